# test/t/019_restore_roles.pl: restores by any superuser keep every batch
# and never hand an instance to a stranger; a worker whose role is not
# usable waits quietly (issue 39, items 2 and 3).
#
# Steps, in the order they run:
#
#   source    database r19_src on the first cluster ('main'): r19_alice and
#             r19_bob (LOGIN, gridha_submitter) each act as an instance
#             (A, B); 3 services x 2 batches; A holds s1's head submitting
#             at epoch E. pg_dump -Fc of it.
#   other     pg_restore -d by r19_admin, a superuser that owned nothing
#             in the dump, with and without --no-owner: no error, every
#             batch there (the old install script refused the schema the
#             dump gave to the bootstrap superuser; --no-owner worked
#             before too).
#   cluster2  a second cluster ('other': another initdb, another system
#             identifier) where a role r19_alice exists, and r19_bob does
#             not: the restore warns once, naming r19_bob as missing and
#             r19_alice as ambiguous, with the set_instance_owner command.
#             r19_alice there (granted gridha_submitter) is refused RG008
#             by next_batch(A) and by report_submission(A, s1, E): s1's
#             head stays submitting, at E. Once a superuser confirms A's
#             owner (set_instance_owner), the same report is accepted.
#   role      the first cluster restarted with one worker whose
#             gridha.worker_role is missing, then a role without
#             gridha_submitter, then a NOLOGIN role: each time the worker
#             keeps its pid for 20 s, logs at most 2 lines in that time,
#             and once the role is fixed (CREATE ROLE, GRANT, ALTER ROLE
#             LOGIN) commits a batch within 10 s, still that process; each
#             warning (what is wrong, the command) was logged once.
#
# Every wait is a bounded poll. Runs on PostgreSQL's TAP framework
# (PostgreSQL::Test::Cluster starts both clusters); it replaced
# test/suites/19_restore_roles.sh. Run by `make test` (test/run.sh, part
# 019_restore_roles) and by `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use GridhaTest;

plan tests => 16;

my $work = PostgreSQL::Test::Utils::tempdir;

# Both clusters as test/run.sh's: gridha preloaded, the server's own
# messages only (the framework logs every statement otherwise, and the
# worker cases count the log's lines).
my $base_conf = gridha_conf() . q{
log_statement = none
};

my $main = PostgreSQL::Test::Cluster->new('main');
$main->init;
$main->append_conf('postgresql.conf', $base_conf);
# each worker case's settings, rewritten before each restart
$main->append_conf('postgresql.conf', "include_if_exists = 'gridha_case.conf'");
$main->start;

my $other = PostgreSQL::Test::Cluster->new('other');
$other->init;
$other->append_conf('postgresql.conf', $base_conf);

# --- source ----------------------------------------------------------------
$main->safe_psql('postgres', 'CREATE DATABASE r19_src');
$main->safe_psql('r19_src', q{
SET client_min_messages = warning;
CREATE EXTENSION gridha;
CREATE ROLE r19_alice LOGIN IN ROLE gridha_submitter, gridha_producer;
CREATE ROLE r19_bob LOGIN IN ROLE gridha_submitter, gridha_producer;
CREATE ROLE r19_admin LOGIN SUPERUSER;
SELECT gridha.enqueue('s' || s, 's' || s || '-b' || b, '\x00'::bytea)
  FROM generate_series(1, 3) s, generate_series(1, 2) b ORDER BY s, b;
});
my $A = $main->safe_psql('r19_src', q{SELECT gridha.register_instance('A')},
	extra_params => [ '-U', 'r19_alice' ]);
my $B = $main->safe_psql('r19_src', q{SELECT gridha.register_instance('B')},
	extra_params => [ '-U', 'r19_bob' ]);
# A takes the claims and hands out one head; the first claim's epoch is E
my $head = $main->safe_psql('r19_src',
	qq{SELECT service_id || '|' || batch_id || '|' || epoch FROM gridha.next_batch('$A')},
	extra_params => [ '-U', 'r19_alice' ]);
my ($S, $BATCH, $E) = split /\|/, $head;
note("A=$A B=$B head=$head");
my $nbatch = $main->safe_psql('r19_src', 'SELECT count(*) FROM gridha.batches');
my $dump = "$work/r19.dump";
my $dump_err;
IPC::Run::run([ 'pg_dump', '-Fc', '-d', $main->connstr('r19_src'), '-f', $dump ],
	'2>', \$dump_err)
  or die "pg_dump: $dump_err";

# --- other, no-owner -------------------------------------------------------

# restore_as($db, @opts): createdb, pg_restore as r19_admin; "exit N batches N"
sub restore_as
{
	my ($db, @opts) = @_;
	$main->safe_psql('postgres', "CREATE DATABASE $db OWNER r19_admin");
	my $out;
	my $ok = IPC::Run::run(
		[ 'pg_restore', '-U', 'r19_admin', '-d', $main->connstr($db), @opts, $dump ],
		'>', \$out, '2>&1');
	note("pg_restore into $db: $out") if $out ne '';
	my ($rc, $n) = $main->psql($db, 'SELECT count(*) FROM gridha.batches');
	return 'exit ' . ($ok ? 0 : $? >> 8) . " batches $n";
}
is(restore_as('r19_other') . ', ' . restore_as('r19_noown', '--no-owner'),
	"exit 0 batches $nbatch, exit 0 batches $nbatch",
	'restores by another superuser, with and without --no-owner, succeed and keep every batch');

# --- cluster2 --------------------------------------------------------------
$other->start;
$other->safe_psql('postgres', 'CREATE ROLE r19_alice LOGIN');
$other->safe_psql('postgres', 'CREATE DATABASE r19');
my $at = log_size($other->logfile);
my $restore_out;
my $restore_ok = IPC::Run::run([ 'pg_restore', '-d', $other->connstr('r19'), $dump ],
	'>', \$restore_out, '2>&1');
$other->safe_psql('postgres', 'GRANT gridha_submitter, gridha_producer TO r19_alice');
my $restore_log = log_since($other->logfile, $at);
my $nwarn = () = $restore_log =~ /restored gridha instances are not confirmed on this cluster/g;
ok($nwarn == 1 && $restore_ok, 'the restore warns once about unconfirmed owners')
  or diag("warnings: $nwarn, pg_restore: $restore_out\n$restore_log");
ok( $restore_log =~ /missing here \(instances\): r19_bob \(1\)\./
	  && $restore_log =~ /may be other roles of the same name \(instances\): r19_alice \(1\)\./
	  && index($restore_log,
		"set_instance_owner(instance_id, 'r19_alice') FROM gridha.instances WHERE owner = 'r19_alice';"
	  ) >= 0,
	'the warning names r19_bob missing, r19_alice ambiguous, and the command')
  or diag($restore_log);

# as_alice($sql): r19_alice's call in the second cluster, errors verbose:
# what it printed, stdout and stderr
sub as_alice
{
	my ($sql) = @_;
	my ($out, $err);
	$other->psql('r19', $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-U', 'r19_alice', '-v', 'VERBOSITY=verbose' ]);
	return join("\n", grep { $_ ne '' } $out, $err);
}
my $got = as_alice("SELECT count(*) FROM gridha.next_batch('$A')");
like($got, qr/ERROR:  RG008: the owner of instance \Q$A\E is not confirmed on this cluster/,
	'next_batch of the restored instance by a same-named role: RG008');
$got = as_alice(
	"SELECT gridha.report_submission('$A', '$S', '$BATCH', $E, 'accepted'::text)");
like($got, qr/ERROR:  RG008: the owner of instance \Q$A\E is not confirmed/,
	'report_submission at the old epoch by a same-named role: RG008');
is( $other->safe_psql('r19', qq{
	SELECT b.status || ' ' || b.epoch || ' ' || c.claimant || ' ' || c.epoch
	  FROM gridha.batches b JOIN gridha.service_claims c USING (service_id)
	 WHERE b.service_id = '$S' AND b.batch_id = '$BATCH'}),
	"submitting $E $A $E",
	'the refused calls changed nothing: the head is submitting at E, A\'s claim at E');
$other->safe_psql('r19', "SELECT gridha.set_instance_owner('$A', 'r19_alice')");
is(as_alice("SELECT gridha.report_submission('$A', '$S', '$BATCH', $E, 'accepted'::text)"),
	'pending', 'once an administrator confirms the owner, the report at E is accepted');
$other->stop;

# --- role: a worker whose role cannot serve waits, then serves ---------------
my $ledger = start_ledger($work, '--commit-delay', '0.1', '--max-lifetime', '600');
$main->safe_psql('postgres', q{
CREATE DATABASE r19w;
CREATE ROLE r19_w2 LOGIN;
CREATE ROLE r19_w3 NOLOGIN;
});
$main->safe_psql('r19w', qq{
SET client_min_messages = warning;
CREATE EXTENSION gridha;
GRANT gridha_submitter TO r19_w3;
UPDATE gridha.targets
   SET submit_url = '$ledger->{url}/batches/{service_id}/{batch_id}',
       status_url = '$ledger->{url}/batch_statuses?id={batch_ids}'
 WHERE target = 'default';
});

sub worker_pids
{
	return scalar $main->safe_psql('r19w',
		q{SELECT string_agg(pid::text, ',') FROM gridha.workers});
}

# worker_case($role, $what, $fix): one worker as $role, 20 s watched, then $fix
sub worker_case
{
	my ($role, $what, $fix) = @_;
	open(my $fh, '>', $main->data_dir . '/gridha_case.conf') or die $!;
	print $fh qq{gridha.workers = 1
gridha.database = 'r19w'
gridha.worker_role = '$role'
gridha.naptime = '200ms'
gridha.monitor_interval = '200ms'
gridha.soft_expiry = '4s'
gridha.hard_expiry = '10s'
gridha.renew_interval = '1s'
};
	close($fh);
	$main->restart;
	sleep 4;
	my $pid1 = worker_pids();
	my $at = log_size($main->logfile);
	sleep 20;
	my $pid2 = worker_pids();
	my $said = log_since($main->logfile, $at);
	my $n = () = $said =~ /^.+$/mg;
	ok($pid1 ne '' && $pid1 eq $pid2 && $n <= 2,
		"$what: the worker keeps its pid and logs at most 2 lines in 20 s")
	  or diag("pids: '$pid1' then '$pid2'; $n log lines\n$said");
	$main->safe_psql('r19w',
		"SELECT gridha.enqueue('w-$role', 'w-$role-b1', '\\x01'::bytea)");
	$main->safe_psql('postgres', $fix);
	my $committed = wait_until(
		10,
		sub {
			$main->safe_psql('r19w',
				"SELECT status FROM gridha.batches WHERE batch_id = 'w-$role-b1'") eq
			  'committed';
		});
	ok($committed && worker_pids() eq $pid1,
		"$what: the same worker process commits a batch within 10 s of the fix")
	  or diag("pid at first: $pid1; now: "
		  . $main->safe_psql('r19w', 'SELECT pid, state FROM gridha.workers'));
	return;
}
worker_case('r19_w1', 'a missing worker role',
	'CREATE ROLE r19_w1 LOGIN IN ROLE gridha_submitter');
worker_case('r19_w2', 'a worker role without gridha_submitter',
	'GRANT gridha_submitter TO r19_w2');
worker_case('r19_w3', 'a NOLOGIN worker role', 'ALTER ROLE r19_w3 LOGIN');

# the warning for each names the fix, once
my $log = slurp_file($main->logfile);
foreach my $w ([ 'r19_w1', 'does not exist' ],
	[ 'r19_w2', 'is not a member of gridha_submitter' ],
	[ 'r19_w3', 'cannot log in' ])
{
	my ($role, $what) = @$w;
	my $n = () = $log =~ /waits: its role "\Q$role\E.*\Q$what\E/g;
	is($n, 1, "the worker said once: $what");
}

$main->stop;
stop_ledgers();
