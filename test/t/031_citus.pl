# test/t/031_citus.pl: beside Citus, gridha is never silently wrong: once
# its tables are Citus tables every call refuses (RG030) instead of reading
# and writing the coordinator's empty shells, and a session calling many
# gridha functions beside Citus keeps its relcache callback slots (issue 43,
# item 1; docs/citus.md).
#
# Citus exists for PostgreSQL 15 only. The test uses the PostgreSQL 15 that
# GRIDHA_CITUS_PG_CONFIG names (default: the system's,
# /usr/lib/postgresql/15/bin/pg_config); it only reads that tree. Citus is
# installed into it beforehand, as root (test/install/citus.sh,
# install_citus); without Citus there every test is reported skipped, with
# the reason.
#
# Steps, in the order they run:
#
#   build     when the run's programs (first in PATH) are that tree's and
#             gridha is installed there, the run's own build; otherwise a
#             copy of the tree in the test's directory (no write into the
#             tree itself), gridha built from this source tree (a copy: the
#             run's own objects stay its major's) and installed into it
#   cluster   a coordinator and two workers, PostgreSQL 15 with
#             shared_preload_libraries = 'citus,gridha' (Citus first), the
#             workers added; CREATE EXTENSION gridha on the coordinator
#   plain     one session, gridha's tables still local: enqueue (s1: b1,
#             b2; s2: c1), acquire, renew, next_batches (b1 and c1 at
#             epoch 1), c1 reported accepted then committed, claimed and
#             pending batches, verify, an ID sequence and an id; the session
#             lives on (gridha takes one relcache callback slot beside
#             Citus's five: "out of relcache_callback_list slots" in no log)
#   citus     a new session calls gridha (its verdict on the tables is
#             kept), then distributes gridha.batches by service_id
#             (citus.enable_unsafe_triggers: its triggers) and makes
#             gridha.instances a reference table, as issue 43 did: its
#             next_batch is refused with RG030 (the kept verdict was
#             invalidated); then, each in a session of its own,
#             report_submission and report_status of b1 (epoch 1; 1.2
#             answered them from the empty shells), enqueue, acquire_claims,
#             register_instance, and a role that does not own the instance
#             (1.2's ownership check read the empty shell of
#             gridha.instances and let it pass) are refused with RG030, and
#             the rows SQL sees did not change (b1 still submitting)
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster): the
# nodes, their ports and logs are the framework's. Run by `make test`
# (test/run.sh, part 031_citus) and by `make prove_installcheck`, as any
# user but root.

use strict;
use warnings FATAL => 'all';

use Cwd qw(abs_path realpath);
use File::Basename qw(dirname);
use File::Path qw(make_path);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $REPO = $ENV{GRIDHA_REPO} // abs_path(dirname(__FILE__) . '/../..');
my $NTESTS = 10;
my $A = 'aaaaaaaa-0000-0000-0000-000000000031';

plan tests => $NTESTS;

# skip_rest(WHY): every test not run yet, skipped; then the end.
sub skip_rest
{
	my ($why) = @_;
	my $left = $NTESTS - Test::More->builder->current_test;
  SKIP:
	{
		skip "citus: $why", $left if $left > 0;
	}
	exit 0;
}

sub slurp
{
	my ($f) = @_;
	return -f $f ? PostgreSQL::Test::Utils::slurp_file($f) : '';
}

sub pg_config_value
{
	my ($cfg, $what) = @_;
	my $v = `"$cfg" --$what`;
	chomp $v;
	return $v;
}

# ---------------------------------------------------------------------------
# Citus: there, or every test skipped

my $CFG = $ENV{GRIDHA_CITUS_PG_CONFIG} // '/usr/lib/postgresql/15/bin/pg_config';
skip_rest("no PostgreSQL 15 at $CFG (GRIDHA_CITUS_PG_CONFIG): Citus exists for PostgreSQL 15 only")
  unless -x $CFG;
my ($CMAJOR) = (`"$CFG" --version` =~ /^PostgreSQL (\d+)/m);
$CMAJOR //= '?';
skip_rest("$CFG is PostgreSQL $CMAJOR; Citus here exists for 15 only") unless $CMAJOR eq '15';
my $CBIN = pg_config_value($CFG, 'bindir');
my $CLIB = pg_config_value($CFG, 'pkglibdir');
skip_rest("Citus is not installed in $CLIB (test/install/citus.sh installs it, as root)")
  unless -e "$CLIB/citus.so";

# ---------------------------------------------------------------------------
# build

my $RUN_BIN;
foreach my $d (split /:/, $ENV{PATH})
{
	if ($d ne '' && -x "$d/initdb")
	{
		$RUN_BIN = $d;
		last;
	}
}
my $install_path;    # undef: the programs in PATH
if (defined $RUN_BIN && realpath($RUN_BIN) eq realpath($CBIN) && -e "$CLIB/gridha.so")
{
	pass("build: gridha is the run's own build, installed into PostgreSQL 15 ($CFG)");
}
else
{
	my $tmp = PostgreSQL::Test::Utils::tempdir('citus');
	my $dest = "$tmp/tree";
	my $ok = 1;
	# a copy of the tree, each directory at DEST/<its path> (the copy finds
	# its files relative to its programs); the client library's directory
	# is linked
	foreach my $k (qw(bindir pkglibdir sharedir includedir pkgincludedir includedir-server))
	{
		my $d = pg_config_value($CFG, $k);
		next if $d eq '' || -e "$dest$d";
		make_path(dirname("$dest$d"));
		$ok &&= system('cp', '-a', $d, "$dest$d") == 0;
	}
	my $libdir = pg_config_value($CFG, 'libdir');
	if (!-e "$dest$libdir")
	{
		make_path(dirname("$dest$libdir"));
		symlink($libdir, "$dest$libdir");
	}
	unlink "$dest$CLIB/gridha.so";
	unlink glob("$dest" . pg_config_value($CFG, 'sharedir') . '/extension/gridha[.-]*');
	my $cfg = "$dest$CBIN/pg_config";
	make_path("$tmp/build");
	$ok &&= system('sh', '-c',
		q{tar -C "$1" --exclude='*.o' --exclude='*.so' --exclude='*.bc' --exclude=.pg_build }
		  . q{--exclude=client/gridha-client --exclude=client/test_dlt_http }
		  . q{-cf - Makefile gridha.control README.md src sql client | tar -C "$2" -xf -},
		'sh', $REPO, "$tmp/build") == 0;
	if ($ok)
	{
		local %ENV = %ENV;
		delete $ENV{$_} foreach qw(MAKEFLAGS MFLAGS MAKELEVEL LD_LIBRARY_PATH);
		print "# Running: make -C $tmp/build PG_CONFIG=$cfg GRIDHA_TEST_HOOKS=1 install\n";
		IPC::Run::run([ 'make', '-C', "$tmp/build", "PG_CONFIG=$cfg", 'GRIDHA_TEST_HOOKS=1', 'install' ],
			'<', \undef, '>', "$tmp/build.log", '2>&1');
		$ok = $? == 0 && -e "$dest$CLIB/gridha.so";
	}
	ok($ok, "build: gridha built from this tree and installed into a copy of PostgreSQL 15 with Citus ($CFG)");
	if (!$ok)
	{
		my @l = split /\n/, slurp("$tmp/build.log");
		splice(@l, 0, @l - 20) if @l > 20;
		diag(join("\n", @l));
		skip_rest('gridha could not be built for the Citus tree');
	}
	$install_path = dirname("$dest$CBIN");
}

# ---------------------------------------------------------------------------
# cluster: a coordinator (n0) and two workers (n1, n2)

my @nodes;
foreach my $n (0 .. 2)
{
	my $node = PostgreSQL::Test::Cluster->new("n$n",
		defined $install_path ? (install_path => $install_path) : ());
	$node->init(extra => [ '--encoding=UTF8', '--locale=C.UTF-8' ]);
	$node->append_conf('postgresql.conf', q{
# --- a node of test/t/031_citus.pl ---
listen_addresses = 'localhost'
shared_preload_libraries = 'citus,gridha'
max_prepared_transactions = 20
max_worker_processes = 32
synchronous_commit = off
full_page_writes = off
log_statement = none
});
	$node->start;
	push @nodes, $node;
}

# run($node, SQL, [DB, [extra psql params]]): what psql prints, its errors
# after it (no stop at an error, as a session would go on)
sub run
{
	my ($node, $sql, $db, @extra) = @_;
	my ($out, $err) = ('', '');
	$node->psql($db // 'c31', $sql, stdout => \$out, stderr => \$err,
		on_error_stop => 0, extra_params => [@extra]);
	return $out . ($err ne '' ? "\n$err" : '');
}

my $setup = '';
my $cluster_ok = 1;
foreach my $node (@nodes)
{
	my $rc = $node->psql('postgres', 'CREATE DATABASE c31', stderr => \my $e1);
	$rc ||= $node->psql('c31', 'CREATE EXTENSION citus', stderr => \my $e2);
	$setup .= ($e1 // '') . ($e2 // '');
	$cluster_ok &&= $rc == 0;
}
{
	my ($out, $err) = ('', '');
	my $rc = $nodes[0]->psql('c31', sprintf(q{
SELECT citus_set_coordinator_host('localhost', %d);
SELECT citus_add_node('localhost', %d);
SELECT citus_add_node('localhost', %d);
CREATE EXTENSION gridha;
CREATE ROLE c31_other LOGIN IN ROLE gridha_submitter;
}, $nodes[0]->port, $nodes[1]->port, $nodes[2]->port),
		stdout => \$out, stderr => \$err, on_error_stop => 1);
	$setup .= $err;
	$cluster_ok &&= $rc == 0
	  && $nodes[0]->safe_psql('c31', 'SELECT count(*) FROM citus_get_active_worker_nodes()') eq '2';
}
ok($cluster_ok,
	'cluster: a coordinator and two workers (PostgreSQL 15, citus then gridha preloaded), gridha created on the coordinator');
if (!$cluster_ok)
{
	diag($setup);
	skip_rest('the Citus cluster did not start');
}

# ---------------------------------------------------------------------------
# plain: one session calls many gridha functions; citus: a new session keeps
# gridha's verdict on its tables, then distributes them and calls again; each
# other refusal in a session of its own

my $session = run($nodes[0], <<"EOF");
SET client_min_messages = warning;
CREATE FUNCTION public.c31_error_of(q text) RETURNS text
LANGUAGE plpgsql AS \$\$
DECLARE
    st text; msg text;
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
    RETURN st || '|' || msg;
END
\$\$;
SET gridha.balance_claims = off;
SELECT 'enqueue:' || gridha.enqueue('s1', 'b1', '\\x01') || ',' || gridha.enqueue('s1', 'b2', '\\x02')
       || ',' || gridha.enqueue('s2', 'c1', '\\x03');
SELECT 'acquire:' || count(*) FROM gridha.acquire_claims('$A');
SELECT 'renew:' || gridha.renew_claims('$A');
SELECT 'handed:' || string_agg(service_id || '/' || batch_id || '/' || epoch, ',' ORDER BY service_id)
  FROM gridha.next_batches('$A', 10);
SELECT 'reported:' || gridha.report_submission('$A', 's2', 'c1', 1, 'accepted')
       || ',' || gridha.report_status('$A', 's2', 'c1', 1, 'committed');
SELECT 'claimed:' || count(*) FROM gridha.claimed_batches('$A');
SELECT 'pending:' || count(*) FROM gridha.pending_batches('$A');
SELECT 'verify:' || gridha.verify_batch('$A', 's1', 'b1', 1);
SELECT gridha.create_id_sequence('c31');
SELECT 'ids:' || (gridha.next_id('c31') IS NOT NULL);
SELECT 'plain done';
EOF
$session .= "\n" . run($nodes[0], <<"EOF");
SET client_min_messages = warning;
SELECT 'claimed before:' || count(*) FROM gridha.claimed_batches('$A');
SET citus.enable_unsafe_triggers = on;
SELECT create_distributed_table('gridha.batches', 'service_id');
SELECT create_reference_table('gridha.instances');
SELECT 'distributed:' || string_agg(logicalrelid::text || '/' || partmethod::text, ',' ORDER BY logicalrelid::text)
  FROM pg_dist_partition;
SELECT 'refused next_batch:' || public.c31_error_of('SELECT * FROM gridha.next_batch(''$A'')');
EOF

# refusal(LABEL, SQL): SQL in a new session; adds LABEL:sqlstate|message
sub refusal
{
	my ($label, $sql) = @_;
	$session .= "\n" . run($nodes[0], <<"EOF");
SET client_min_messages = warning;
SELECT '$label:' || public.c31_error_of(\$q\$$sql\$q\$);
EOF
}
refusal('refused report_submission', "SELECT gridha.report_submission('$A', 's1', 'b1', 1, 'accepted')");
refusal('refused report_status', "SELECT gridha.report_status('$A', 's1', 'b1', 1, 'committed')");
refusal('refused enqueue', "SELECT gridha.enqueue('s1', 'b3', '\\x03')");
refusal('refused acquire_claims', "SELECT * FROM gridha.acquire_claims('$A')");
refusal('refused register_instance', "SELECT gridha.register_instance('c31b')");
$session .= "\n" . run($nodes[0], q{
SELECT 'state:' || string_agg(service_id || '/' || batch_id || '/' || status, ',' ORDER BY service_id, batch_id)
  FROM gridha.batches;
});
diag("session:\n$session");

# line(LABEL): what the session printed after LABEL: (its first such line)
sub line
{
	my ($label) = @_;
	return $session =~ /^\Q$label\E:(.*)$/m ? $1 : '';
}
my $plain_done = $session =~ /^plain done$/m;

ok( line('enqueue') eq '1,2,1'
	  && line('acquire') eq '2'
	  && line('handed') eq 's1/b1/1,s2/c1/1'
	  && line('reported') eq 'pending,committed'
	  && line('verify') eq 'true'
	  && line('ids') eq 'true'
	  && $plain_done,
	'plain: beside Citus, with its tables local, one session enqueues, hands out, reports, verifies and reserves ids');

my $logs = join('', map { slurp($_->logfile) } @nodes);
ok( $plain_done
	  && "$logs$session" !~ /out of relcache_callback_list slots/,
	"plain: the session calling those gridha functions beside Citus lived to its end (no 'out of relcache_callback_list slots')"
);
diag(join("\n", grep { /relcache_callback/ } split /\n/, $logs)) if $logs =~ /relcache_callback/;

my $RG030_BATCHES =
  'RG030|gridha.batches is a Citus table (distributed, reference or Citus local), which gridha does not support';
ok( line('distributed') eq 'gridha.batches/h,gridha.instances/n'
	  && line('refused next_batch') eq $RG030_BATCHES,
	'citus: gridha.batches distributed, gridha.instances a reference table: next_batch in the session that called gridha before is refused (RG030)'
);
ok(line('refused report_submission') eq $RG030_BATCHES,
	"citus: report_submission of the batch in flight is refused (RG030), not answered 'pending'");
ok(line('refused report_status') eq $RG030_BATCHES,
	"citus: report_status of the batch in flight is refused (RG030), not answered 'committed'");
ok( line('refused enqueue') eq $RG030_BATCHES
	  && line('refused acquire_claims') eq $RG030_BATCHES
	  && line('refused register_instance') eq $RG030_BATCHES,
	'citus: enqueue, acquire_claims and register_instance are refused (RG030)');

# the ownership check: a new session, of a role that does not own A
my $other = run($nodes[0], "SELECT gridha.renew_claims('$A')", 'c31',
	'-U', 'c31_other', '-v', 'VERBOSITY=verbose');
diag($other);
ok($other =~ /ERROR:  RG030: gridha.batches is a Citus table/,
	'citus: a role that does not own the instance is refused (RG030) in a new session');

ok(line('state') eq 's1/b1/submitting,s1/b2/queued,s2/c1/committed',
	'citus: the refusals changed nothing: SQL still sees b1 submitting, b2 queued, c1 committed');

$_->stop foreach @nodes;
