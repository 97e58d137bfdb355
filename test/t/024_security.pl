# test/t/024_security.pl: the boundaries of docs/security.md that need
# databases, roles or a server restart of their own (the others are in
# pgTAP 16_security and 022_worker_safety).
#
#   schema     a database owner (not a superuser) creates schema gridha
#              before the superuser's CREATE EXTENSION gridha: the install
#              refuses (42501), and so it does when a schema of the
#              superuser's grants CREATE to PUBLIC; a database on 1.1 whose
#              gridha schema was handed to a role that is not a superuser
#              is not upgraded (ALTER EXTENSION ... UPDATE refuses, the
#              database stays on 1.1), and gridha's functions refuse to run
#              there (RG015)
#   superuser  with gridha.worker_role naming a superuser, a worker calls no
#              target function: a batch of a function target waits,
#              delayed, with the reason as detail, logged at most once a
#              minute for its target, and the function never ran; a batch
#              of a URL target is committed
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded, restarted once with a worker. Run by
# `make test` (test/run.sh, part 024_security) and by
# `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $db = 'gridha_security_test';
my $dbo = 'gridha_security_dbo';

my $node = gridha_node('security');
# the bootstrap superuser: whoever runs the test
my $su = $node->safe_psql('postgres', 'SELECT current_user');

# run($sql, user => ...): psql's exit code and what it printed (stdout and
# stderr together) in $db
sub run
{
	my ($sql, %opt) = @_;
	my ($rc, $out, $err) = psql_as($node, $db, $sql, $opt{user});
	return ($rc, $out . $err);
}

# sql_is($expected, $sql): the query's output in $db is exactly $expected
sub sql_is
{
	my ($expected, $sql) = @_;
	my ($rc, $out) = run($sql);
	return $rc == 0 && $out eq $expected;
}

# fresh_db(): database $db owned by the role $dbo, which is not a superuser
sub fresh_db
{
	$node->safe_psql('postgres', qq{
SET client_min_messages = warning;
DROP DATABASE IF EXISTS $db WITH (FORCE);
DROP ROLE IF EXISTS $dbo;
CREATE ROLE $dbo LOGIN;
});
	$node->safe_psql('postgres', "CREATE DATABASE $db OWNER $dbo");
	return;
}

# --- schema ----------------------------------------------------------------
fresh_db();
run('CREATE SCHEMA gridha', user => $dbo);
my ($rc, $out) = run('CREATE EXTENSION gridha');
ok( $rc != 0
	  && $out =~ /schema gridha belongs to role "$dbo", not to "\Q$su\E"/
	  && sql_is('0', "SELECT count(*) FROM pg_extension WHERE extname = 'gridha'"),
	"schema: CREATE EXTENSION gridha refuses a schema gridha that the database's owner ($dbo) made first, and installs nothing"
) or diag($out);

fresh_db();
run('CREATE SCHEMA gridha; GRANT CREATE ON SCHEMA gridha TO PUBLIC;');
($rc, $out) = run('CREATE EXTENSION gridha');
ok($rc != 0 && $out =~ /schema gridha grants CREATE to roles other than its owner/,
	'schema: ... and a schema gridha of its own that grants CREATE to PUBLIC')
  or diag($out);

fresh_db();
run("CREATE EXTENSION gridha VERSION '1.1'; ALTER SCHEMA gridha OWNER TO $dbo;");
($rc, $out) = run('ALTER EXTENSION gridha UPDATE');
ok( $rc != 0
	  && $out =~ /schema gridha belongs to role "$dbo", which is not a superuser/
	  && sql_is('1.1', "SELECT extversion FROM pg_extension WHERE extname = 'gridha'"),
	"schema: a database on 1.1 whose schema gridha belongs to $dbo is not upgraded (it stays on 1.1)"
) or diag($out);
($rc, $out) = run("SELECT gridha.register_instance('x')");
ok($out =~ /schema gridha belongs to role "$dbo", which is not a superuser/,
	"schema: ... and gridha's functions refuse to run there (RG015)")
  or diag($out);

my ($version) = slurp_file(gridha_repo() . '/gridha.control') =~ /^default_version = '(.*)'/m;
ok( (run("ALTER SCHEMA gridha OWNER TO \"$su\""))[0] == 0
	  && (run('ALTER EXTENSION gridha UPDATE'))[0] == 0
	  && sql_is($version, "SELECT extversion FROM pg_extension WHERE extname = 'gridha'"),
	'schema: once a superuser owns the schema again, the upgrade runs');

# --- superuser: a worker connected as a superuser calls no target function --
fresh_db();
my $work = PostgreSQL::Test::Utils::tempdir;
my $ledger = start_ledger($work, '--commit-delay', '0.05', '--max-lifetime', '600');
my $led = $ledger->{url};
$node->safe_psql($db, qq{
CREATE EXTENSION gridha;
CREATE TABLE called (service_id text, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION sec_submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.called (service_id) VALUES (\$1);
    RETURN 'accepted';
END
\$\$;
INSERT INTO gridha.targets (target, submit_function) VALUES ('fn', 'sec_submit(text,text,bytea,bigint)');
INSERT INTO gridha.targets (target, submit_url, status_url) VALUES
    ('ledger', '$led/batches/{service_id}/{batch_id}', '$led/batch_statuses?id={batch_ids}');
});

my $mark = log_size($node->logfile);
restart_with_workers($node, $db, 1, q{
gridha.naptime = '100ms'
gridha.monitor_interval = '100ms'
}, $su);
$node->safe_psql($db, q{
SELECT gridha.enqueue('f1', 'f1-b' || n, '\x01', 'fn') FROM generate_series(1, 2) n;
SELECT gridha.enqueue('u1', 'u1-b1', '\x01', 'ledger');
});
ok(wait_until(30, sub { sql_is('committed', "SELECT status FROM gridha.batches WHERE batch_id = 'u1-b1'") }),
	'superuser: the worker commits the batch of a URL target');

my $reason =
  'target functions are not called while the worker runs as a superuser: set gridha.worker_role to a role that is not one';
ok( wait_until(
		30,
		sub {
			sql_is("delayed|$reason",
				"SELECT status || '|' || detail FROM gridha.batches WHERE batch_id = 'f1-b1'");
		}),
	"superuser: the head of the function target's service is delayed with the reason as its detail");

sleep 2;
ok( sql_is(
		'0|queued|true', q{
SELECT (SELECT count(*) FROM called) || '|' ||
       (SELECT status FROM gridha.batches WHERE batch_id = 'f1-b2') || '|' ||
       (SELECT attempts > 1 FROM gridha.batches WHERE batch_id = 'f1-b1')}),
	'superuser: the function never ran, the batch behind waits, and the head was handed out again and again, never failed'
);
diag($node->safe_psql($db, q{
SELECT batch_id, status, attempts, detail FROM gridha.batches WHERE service_id = 'f1' ORDER BY seq;
SELECT count(*) AS called FROM called;
}));

my $log = log_since($node->logfile, $mark);
my $n_warn = grep { /target functions are not called/ } split /\n/, $log;
my $n_start = grep { /runs as a superuser/ } split /\n/, $log;
ok($n_start >= 1 && $n_warn >= 1 && $n_warn <= 2,
	"superuser: the worker warns at start ($n_start) and about the target once a minute at most ($n_warn lines)"
);

$node->stop;
done_testing();
