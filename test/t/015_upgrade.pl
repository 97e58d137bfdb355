# test/t/015_upgrade.pl: versioned upgrades (DESIGN.md section 9): a
# database whose gridha SQL is 1.0 (and one on 1.1), filled and served by
# the last library that served those (OLD_REV, built from this repository
# into a copy of the installation: the current library serves only 1.2 and
# 1.3, issue 40), is refused by the current library with RG022 until
# ALTER EXTENSION gridha UPDATE, upgraded to the default version
# (gridha.control), loses nothing, and ends equal to a fresh install.
#
# Steps, in the order they run:
#
#   0. old      OLD_REV built into a copy of the installation under the
#               test's temporary directory (git archive, make install into
#               the copy); the cluster starts on the copy's binaries
#               (PostgreSQL::Test::Cluster->new(..., install_path => the
#               copy)), which load that library. Steps a, b and h's fill
#               run on it; before c the cluster stops and starts again on
#               the current installation: a second Cluster object without
#               install_path, on the same port, whose data directory is
#               the first one's (a symbolic link to it).
#   a. fill     database gridha_upgrade, CREATE EXTENSION gridha VERSION
#               '1.0', filled through the 1.0 API (test/dba/upgrade_fill.sql):
#               batches in every status, every claim state (free, held,
#               slow, soft and hard expired), a changed 'default' target, a
#               rate-limited target, a leader lease and a maintenance tick,
#               an id sequence with ids reserved, and 100,000 services
#               claimed by three instances (two balanced, one not), some
#               heads in flight. A snapshot of everything that must survive
#               goes to the scratch schema upgrade_scratch
#               (test/dba/upgrade_state.sql).
#   b. 1.0 SQL  first, before the fill, a queuer cycle through SQL on 1.0
#               (next_batch, verify_batch, report_submission,
#               pending_batches, report_status); then the cluster restarts
#               with two background workers serving the database and a
#               target at the test ledger: they commit what is enqueued on
#               it while extversion is still 1.0, in enqueue order, and
#               touch nothing else.
#   c. upgrade  a second wave of batches on the workers' services, part of
#               it in hand when the cluster restarts on the current library
#               (workers on): on 1.0 SQL it refuses the API (RG022, naming
#               ALTER EXTENSION gridha UPDATE), the workers wait (saying so
#               in the server log), and nothing changes. ALTER EXTENSION
#               gridha UPDATE with the workers starting again. After it:
#               extversion the default; no claim, epoch or batch lost or
#               changed (the snapshot taken just before, in-flight batches
#               included); every instance's held = its claims; every
#               instance holding claims has a lease; gridha.claims shows
#               every claim in the state it was in; the idle services'
#               counters are settled into gridha.target_totals and each
#               target's counters in gridha.metrics equal the sums over its
#               services; the workers, now on the new SQL, commit the
#               second wave in order and keep the counts. Then the cluster
#               restarts without workers.
#   e. schema   the extension's objects equal those of a fresh install
#               (CREATE EXTENSION gridha in gridha_upgrade_fresh):
#               pg_dump --schema-only --binary-upgrade of both, less the
#               lines that carry OIDs (test/dba/schema_filter.py);
#               extconfig/extcondition by table name, pg_init_privs of the
#               members by name and aclitems, the member list
#               (test/dba/extension_catalog.sql); and a self-test: a comment
#               planted in the fresh copy makes the comparison fail
#   g. locks    in a third 1.0 database: a transaction that reads
#               gridha.instances, waits until the upgrade waits for a lock
#               and then reads gridha.targets (which the upgrade changes
#               first) commits, and so does the upgrade (the 1.0 -> 1.1
#               script of before lost that deadlock); with the caller's
#               lock_timeout of 1 s against a transaction that holds
#               gridha.instances, the upgrade fails with 55P03 and leaves
#               the database on 1.0
#   h. from 1.1 a database on 1.1, filled the same way (by the old
#               library), refused by the current library (RG022) until it
#               is upgraded while a client cycles through it (next_batch,
#               report accepted, report committed): its 40 batches
#               committed in order, nothing else changed, gridha.metrics'
#               counters equal the sums over the services, the schema
#               equal a fresh install's
#   i. 1.2 fns  1.2's function targets (issue 39): regprocedure columns,
#               read by this library; the update turns each into its
#               schema-qualified signature
#   j. 1.1 SQL  one session on 1.1 SQL: the hand-out refused (RG022), the
#               same session updates and then hands out
#   k. 1.2 SQL  a database on 1.2 (issue 42.1): the lease, maintenance and
#               ID sequence calls answer as 1.2's library answered them,
#               and the cycle works; after ALTER EXTENSION gridha UPDATE in
#               the same session they answer from the 1.3 script
#   d. suites   pg_regress (the Makefile's REGRESS list and REGRESS_OPTS:
#               test/sql and expected/) with --use-existing and pg_prove
#               over test/pgtap/*.sql, both in the upgraded database; one
#               TAP line per regress test and per pgTAP file. They run
#               after e, since they create objects of their own (the pgtap
#               extension, test tables), and on a database emptied to what
#               CREATE EXTENSION leaves: they are written for a fresh
#               database (api.sql reads gridha.instances before it
#               truncates anything, 01_shape asserts the 'default' target
#               is untouched), with the database settings pg_regress gives
#               a database it creates.
#
# Words: "scratch" is upgrade_scratch, the test's own schema (which instance
# is which, what each batch should end as, the snapshots); "wave" is a set of
# batches enqueued on the workers' services at once. Claim timings are
# database settings here (session liveness off, half-hour expiries), so the
# filled claims stay as they were for the whole test; a state that needs
# the past is made with an UPDATE, never by sleeping. JIT is off in the
# database too: compiling the plans of the comparisons' scans of 100,000
# rows costs more than running them. Every wait is a bounded poll. The
# databases go with the cluster at the end (the framework keeps its
# directory when a test failed, or with PG_TEST_NOCLEAN=1).
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded (first on the old library's copy of the
# installation, then on the current one), workers running as
# gridha_test_worker (a member of gridha_submitter and of 1.0's
# gridha_client), with the test ledger (commits 0.1 s after accepting).
# Needs a git checkout (the old library is built from OLD_REV), pg_prove
# and pgTAP in the installation. Run by `make test` (test/run.sh, part
# 015_upgrade) and by `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use Cwd ();
use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use File::Basename qw(basename dirname);
use File::Path qw(make_path rmtree);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $REPO = gridha_repo();
my $WORK = PostgreSQL::Test::Utils::tempdir;
my ($DEFAULT_VERSION) =
  slurp_file("$REPO/gridha.control") =~ /^default_version\s*=\s*'([^']*)'/m;
my $DBA = "$REPO/test/dba";
my $DB = 'gridha_upgrade';
my $FRESH = 'gridha_upgrade_fresh';
# The last library that served gridha SQL 1.0 and 1.1 (issue 40 ended it)
my $OLD_REV = '61532db';
my $WORKER_ROLE = 'gridha_test_worker';
my $PG_CONFIG =
  (defined $ENV{PG_CONFIG} && -x $ENV{PG_CONFIG}) ? $ENV{PG_CONFIG} : 'pg_config';

# pg_config_value($cfg, $what): one line of pg_config's
sub pg_config_value
{
	my ($cfg, $what) = @_;
	my $v = `"$cfg" --$what`;
	chomp $v;
	return $v;
}

my $BINDIR = pg_config_value($PG_CONFIG, 'bindir');

# ---------------------------------------------------------------------------
# the plan: 73 checks, one per test of the Makefile's REGRESS, one per
# test/pgtap file

# make_var(NAME): a variable of the Makefile, as PGXS's installcheck gets it
open my $mk, '>', "$WORK/print.mk" or die "print.mk: $!";
print $mk "gridha-print-%:\n\t\@echo \$(\$*)\n";
close $mk;

sub make_var
{
	my ($name) = @_;
	local %ENV = %ENV;
	delete $ENV{$_} foreach qw(MAKEFLAGS MFLAGS MAKELEVEL);
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[
			'make', '-s', '--no-print-directory', '-C', $REPO, '-f', 'Makefile',
			'-f', "$WORK/print.mk", "PG_CONFIG=$PG_CONFIG", "gridha-print-$name"
		],
		'<', \undef, '>', \$out, '2>', \$err);
	chomp $out;
	return split ' ', $out;
}
my @regress_tests = make_var('REGRESS');
my @regress_opts = make_var('REGRESS_OPTS');
my @pgtap_files = sort glob("$REPO/test/pgtap/*.sql");
plan tests => 73 + @regress_tests + @pgtap_files;

# ---------------------------------------------------------------------------
# helpers

my $pg;    # the cluster now: the old library's node, then the current one

# query($db, $sql, @extra): what psql printed, its errors after it
sub query
{
	my ($db, $sql, @extra) = @_;
	my ($out, $err) = ('', '');
	$pg->psql($db, $sql, stdout => \$out, stderr => \$err, @extra);
	return $err eq '' ? $out : ($out eq '' ? $err : "$out\n$err");
}

# sql_is($db, $want, $sql): the query's output in $db is exactly $want
sub sql_is
{
	my ($db, $want, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $pg->psql($db, $sql, stdout => \$out, stderr => \$err);
	return $rc == 0 && $out eq $want;
}

# check_is($want, $what, $sql): one test, the query's output in $DB is $want
sub check_is
{
	my ($want, $what, $sql) = @_;
	my $got = query($DB, $sql);
	is($got, $want, $what);
	return $got eq $want;
}

# run_psql($db, $sql, @opts): psql -X -q -A -t @opts on $db with $sql on
# its standard input, standard output and error merged as a terminal
# shows them; returns (exit status, output)
sub run_psql
{
	my ($db, $sql, @opts) = @_;
	my $out = '';
	IPC::Run::run([ 'psql', '-X', '-q', '-A', '-t', @opts, '-d', $pg->connstr($db) ],
		'<', \$sql, '>&', \$out);
	return ($? >> 8, $out);
}

# diag_head($text, $n): the first $n lines of $text as diagnostics
sub diag_head
{
	my ($text, $n) = @_;
	my @l = split /\n/, $text // '';
	splice(@l, $n) if @l > $n;
	diag(join("\n", @l)) if @l;
	return;
}

sub diag_tail
{
	my ($text, $n) = @_;
	my @l = split /\n/, $text // '';
	splice(@l, 0, @l - $n) if @l > $n;
	diag(join("\n", @l)) if @l;
	return;
}

# refused_in($db, $sql): the statement fails in $db with RG022, whose hint
# names ALTER EXTENSION gridha UPDATE.
sub refused_in
{
	my ($db, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $pg->psql($db, $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return 1
	  if $rc != 0
	  && $err =~ /ERROR:  RG022: /
	  && $err =~ /HINT:  .*ALTER EXTENSION gridha UPDATE/;
	diag_head("$out$err", 5);
	return 0;
}

# phase_conf($lines): the settings of this start (gridha_phase.conf, which
# postgresql.conf includes), replacing those of the previous one
sub phase_conf
{
	my ($lines) = @_;
	open my $fh, '>', $pg->data_dir . '/gridha_phase.conf' or die "gridha_phase.conf: $!";
	print $fh $lines;
	close $fh;
	return;
}

# restart_with($lines): stop, then start with these settings; true when it
# started
sub restart_with
{
	my ($lines) = @_;
	$pg->stop('fast', fail_ok => 1);
	phase_conf($lines);
	return $pg->start(fail_ok => 1);
}

# ---------------------------------------------------------------------------
# 0. the old library, built into a copy of the installation

# relocated_copy($cfg, $dest): a copy of the installation $cfg names under
# $dest (each directory at $dest/<its path>, so that the copy finds its
# files relative to its programs), without gridha; the client library's
# directory linked (or, when it holds the package library directory, its
# other entries one by one). Returns the copy's pg_config.
sub relocated_copy
{
	my ($cfg, $dest) = @_;
	foreach my $k (qw(bindir pkglibdir sharedir includedir pkgincludedir includedir-server))
	{
		my $d = pg_config_value($cfg, $k);
		next if $d eq '' || -e "$dest$d";
		make_path(dirname("$dest$d"));
		system('cp', '-a', $d, "$dest$d") == 0 or die "cp -a $d: failed";
	}
	my $libdir = pg_config_value($cfg, 'libdir');
	if (!-e "$dest$libdir")
	{
		make_path(dirname("$dest$libdir"));
		symlink($libdir, "$dest$libdir") or die "symlink $libdir: $!";
	}
	else
	{
		foreach my $d (glob("$libdir/*"))
		{
			symlink($d, "$dest$d") unless -e "$dest$d" || -l "$dest$d";
		}
	}
	unlink "$dest" . pg_config_value($cfg, 'pkglibdir') . '/gridha.so';
	unlink glob("$dest" . pg_config_value($cfg, 'sharedir') . '/extension/gridha[.-]*');
	return "$dest" . pg_config_value($cfg, 'bindir') . '/pg_config';
}

# build_commit($rev, $dir): gridha as of commit $rev of this repository
# (git archive) built and installed into a copy of the installation under
# $dir; returns the copy's pg_config, or dies saying why (the build's
# output is in $dir/build.log).
sub build_commit
{
	my ($rev, $dir) = @_;
	make_path($dir);
	# the checkout may belong to another user than the test's
	my $root = Cwd::realpath($REPO);
	my @git = ('git', '-c', "safe.directory=$root", '-C', $root);
	my ($short, $err) = ('', '');
	IPC::Run::run([ @git, 'rev-parse', '--short', "$rev^{commit}" ],
		'<', \undef, '>', \$short, '2>', \$err)
	  or die "no commit $rev (a git checkout is needed): $err";
	chomp $short;
	my $config = relocated_copy($PG_CONFIG, "$dir/pg");
	rmtree("$dir/src");
	make_path("$dir/src");
	IPC::Run::run([ @git, 'archive', $short ], '|', [ 'tar', '-x', '-C', "$dir/src" ], '2>', \$err)
	  or die "git archive $short: $err";
	local %ENV = %ENV;
	delete $ENV{$_} foreach qw(MAKEFLAGS MFLAGS MAKELEVEL);
	my $log = "$dir/build.log";
	IPC::Run::run([ 'make', '-s', '-C', "$dir/src", "PG_CONFIG=$config" ],
		'<', \undef, '>', $log, '2>&1')
	  && IPC::Run::run([ 'make', '-s', '-C', "$dir/src", "PG_CONFIG=$config", 'install' ],
		'<', \undef, '>>', $log, '2>&1')
	  or die "$short does not build; end of $log:\n"
	  . join("\n", (split /\n/, slurp_file($log))[-20 .. -1]);
	return $config;
}

my $start = time();
my $old_config = eval { build_commit($OLD_REV, "$WORK/old") };
ok(defined $old_config,
	sprintf('old library: %s built into a copy of the installation (%d s)', $OLD_REV, time() - $start));
if (!defined $old_config)
{
	diag($@);
	die "no old library";
}
my $OLD_INST = dirname(pg_config_value($old_config, 'bindir'));

my $old = PostgreSQL::Test::Cluster->new('upgrade_old', install_path => $OLD_INST);
$pg = $old;
$old->init;
# the settings of every start; gridha_phase.conf has each start's own
$old->append_conf('postgresql.conf', gridha_conf() . qq{
log_statement = none
log_lock_waits = on
synchronous_commit = off
full_page_writes = off
# test/sql/counts.sql prepares transactions
max_prepared_transactions = 4
gridha.worker_role = '$WORKER_ROLE'
include_if_exists = 'gridha_phase.conf'
});
phase_conf('');
ok( $old->start(fail_ok => 1)
	  && sql_is('postgres', "$OLD_INST/bin", "SELECT setting FROM pg_config WHERE name = 'BINDIR'"),
	"old library: the cluster started on the copy's binaries");

# The workers' role: a member of gridha_submitter and of gridha_client (1.0's
# role; each made here before any CREATE EXTENSION gridha would), nothing
# more.
$old->safe_psql('postgres', qq{
CREATE ROLE $WORKER_ROLE LOGIN;
CREATE ROLE gridha_submitter NOLOGIN;
CREATE ROLE gridha_client NOLOGIN;
GRANT gridha_submitter, gridha_client TO $WORKER_ROLE;
});

# The workers of step b and c (balance off: the filled instances count as
# live for half an hour, and a worker must not wait for its fair share of
# the ledger's few services behind them).
my $WORKER_CONF = qq{
gridha.workers = 2
gridha.database = '$DB'
gridha.naptime = '200ms'
gridha.monitor_interval = '200ms'
gridha.balance_claims = off
};

# database settings of the filled databases (see the header)
sub db_settings
{
	my ($db) = @_;
	return qq{
ALTER DATABASE $db SET gridha.session_liveness = off;
ALTER DATABASE $db SET gridha.soft_expiry = '30min';
ALTER DATABASE $db SET gridha.hard_expiry = '60min';
ALTER DATABASE $db SET jit = off;
};
}

my $H = "${DB}_h";
my $L;

# prepare_h: h's database on 1.1, filled, with the client's instance L
# holding the live service; run on the old library (before c).
sub prepare_h
{
	my ($rc, $out) = run_psql('postgres', "SET client_min_messages = warning;\nDROP DATABASE IF EXISTS $H;\nCREATE DATABASE $H;\n"
		  . db_settings($H), '-v', 'ON_ERROR_STOP=1');
	($rc, $out) = run_psql($H, q{
CREATE EXTENSION gridha VERSION '1.1';
CREATE SCHEMA upgrade_scratch;
CREATE TABLE upgrade_scratch.instance (name text PRIMARY KEY, id uuid NOT NULL);
INSERT INTO upgrade_scratch.instance VALUES ('S', gridha.register_instance('S'));
}, '-v', 'ON_ERROR_STOP=1') if $rc == 0;
	ok($rc == 0, "from 1.1: a database on 1.1 ($H)") or diag_head($out, 10);
	my ($rc1, $fill) = run_psql($H, slurp_file("$DBA/upgrade_fill.sql"), '-v', 'ON_ERROR_STOP=1');
	my ($rc2, $state) = (1, '');
	($rc2, $state) = run_psql($H, slurp_file("$DBA/upgrade_state.sql"), '-v', 'ON_ERROR_STOP=1')
	  if $rc1 == 0;
	ok($rc1 == 0 && $rc2 == 0,
		'from 1.1: filled as the 1.0 database was (every batch status, every claim state, 100,000 services)')
	  or diag_tail("$fill$state", 20);
	# The client L holds the live service alone: its claim and lease are
	# set by hand, and its claim cycle is not due for minutes, so it takes
	# nothing else (the fill left expired claims any cycle would take over).
	$pg->safe_psql('postgres', "ALTER DATABASE $H SET gridha.renew_interval = '5min'");
	$L = $pg->safe_psql($H, "SELECT gridha.register_instance('L')");
	$pg->safe_psql($H, qq{
SELECT gridha.enqueue('h-live', 'h-live-b' || lpad(n::text, 2, '0'), '\\x01') FROM generate_series(1, 40) n;
UPDATE gridha.service_claims SET claimant = '$L', epoch = 1 WHERE service_id = 'h-live';
UPDATE gridha.instances SET last_seen_at = now(), held = 1,
       soft_expiry = now() + interval '30 minutes', hard_expiry = now() + interval '60 minutes'
 WHERE instance_id = '$L';
SELECT upgrade_scratch.snapshot('pre11');
});
	return;
}

# ---------------------------------------------------------------------------
# a. a database on 1.0

my $ledger = start_ledger($WORK, '--commit-delay', '0.1', '--max-lifetime', '900');
my $LEDGER = $ledger->{url};

$pg->safe_psql('postgres', "CREATE DATABASE $DB");
$pg->safe_psql('postgres', db_settings($DB));
$pg->safe_psql($DB, q{
CREATE EXTENSION gridha VERSION '1.0';
CREATE SCHEMA upgrade_scratch;
CREATE TABLE upgrade_scratch.instance (name text PRIMARY KEY, id uuid NOT NULL);
INSERT INTO upgrade_scratch.instance VALUES ('S', gridha.register_instance('S'));
});

check_is("1.0|$DEFAULT_VERSION",
	"CREATE EXTENSION gridha VERSION '1.0' installs 1.0 while the library's default is $DEFAULT_VERSION", q{
SELECT e.extversion || '|' || a.default_version FROM pg_extension e
  JOIN pg_available_extensions a ON a.name = e.extname WHERE e.extname = 'gridha'});

my $S = $pg->safe_psql($DB, "SELECT id FROM upgrade_scratch.instance WHERE name = 'S'");

# b, first half: one queuer cycle through SQL on 1.0, each call its own
# session, as a 1.0 client makes them.
$pg->safe_psql($DB, q{SELECT gridha.enqueue('q1', 'q1-b' || n, '\x0a0b', NULL) FROM generate_series(1, 2) n});
check_is('q1|1', '1.0 SQL: acquire_claims takes the new service with epoch 1',
	"SELECT service_id || '|' || epoch FROM gridha.acquire_claims('$S')");
check_is('q1|q1-b1|\x0a0b|1|1', '1.0 SQL: next_batch hands out the head with its payload, epoch and attempt',
	"SELECT concat_ws('|', service_id, batch_id, payload, epoch, attempt) FROM gridha.next_batch('$S')");
check_is('true|submitting', '1.0 SQL: verify_batch says the batch is still this instance\'s; it is submitting',
	"SELECT gridha.verify_batch('$S', 'q1', 'q1-b1', 1) || '|' || status FROM gridha.batches WHERE batch_id = 'q1-b1'");
check_is('pending', '1.0 SQL: report_submission accepted -> pending',
	"SELECT gridha.report_submission('$S', 'q1', 'q1-b1', 1, 'accepted')");
check_is('q1-b1|pending|1', '1.0 SQL: pending_batches lists it for the monitor',
	"SELECT concat_ws('|', batch_id, status, epoch) FROM gridha.pending_batches('$S')");
check_is('committed', '1.0 SQL: report_status COMMITTED -> committed',
	"SELECT gridha.report_status('$S', 'q1', 'q1-b1', 1, 'COMMITTED')");
check_is('q1-b2|1', '1.0 SQL: the next batch of the service follows',
	"SELECT batch_id || '|' || attempt FROM gridha.next_batch('$S')");
check_is('pending', '1.0 SQL: ... and is reported accepted (left pending for the upgrade)',
	"SELECT gridha.report_submission('$S', 'q1', 'q1-b2', 1, 'accepted')");
check_is('1.0', '1.0 SQL: the cycle ran with the database\'s SQL still on 1.0',
	"SELECT extversion FROM pg_extension WHERE extname = 'gridha'");

# a: the fill
$start = time();
{
	my ($rc1, $fill) = run_psql($DB, slurp_file("$DBA/upgrade_fill.sql"), '-v', 'ON_ERROR_STOP=1');
	my ($rc2, $state) = (1, '');
	($rc2, $state) = run_psql($DB, slurp_file("$DBA/upgrade_state.sql"), '-v', 'ON_ERROR_STOP=1')
	  if $rc1 == 0;
	if (!ok($rc1 == 0 && $rc2 == 0,
		sprintf('fill: batches, claims, targets, lease, tick and ids made through the 1.0 API (%d s)', time() - $start)))
	{
		diag_tail("$fill$state", 20);
		die "the fill failed";
	}
	diag_tail("$fill$state", 1);
}

check_is('queued,submitting,pending,valid,delayed,unknown,committed,invalid', 'fill: batches in every status',
	"SELECT string_agg(s::text, ',' ORDER BY s) FROM (SELECT DISTINCT status s FROM gridha.batches) x");
check_is('free,hard_expired,held,slow,soft_expired', 'fill: claims in every state of gridha.claims',
	"SELECT string_agg(state, ',' ORDER BY state) FROM (SELECT DISTINCT state FROM gridha.claims) x");
check_is('true|true', 'fill: 100,000 bulk services, all claimed, some heads in flight', q{
SELECT (count(*) FILTER (WHERE service_id LIKE 'bulk-%' AND claimant IS NOT NULL) = 100000)::text
       || '|' || (count(*) FILTER (WHERE service_id LIKE 'bulk-%' AND in_flight) >= 300)::text
  FROM gridha.service_claims});
check_is('t|t|t|t', "fill: default target changed, rate state of 'limited', a leader lease with a tick, ids reserved", q{
SELECT concat_ws('|',
       (SELECT rate_burst = 7 AND status_url IS NOT NULL FROM gridha.targets WHERE target = 'default'),
       (SELECT slots_taken = 2 FROM gridha.target_rate_state WHERE target = 'limited'),
       (SELECT count(*) = 1 FROM gridha.leases l JOIN gridha.maintenance_ticks m USING (role, term)),
       (SELECT high_water > 0 FROM gridha.id_sequences WHERE name = 'orders')
         AND (SELECT count(*) = 5 FROM upgrade_scratch.reserved))});
$pg->safe_psql($DB, "SELECT upgrade_scratch.snapshot('filled')");

# ---------------------------------------------------------------------------
# b, second half: background workers on 1.0 SQL

$pg->safe_psql($DB, qq{
INSERT INTO gridha.targets (target, submit_url, status_url)
VALUES ('ledger', '$LEDGER/batches/{service_id}/{batch_id}', '$LEDGER/batch_statuses?id={batch_ids}');
});

# The old library's workers read columns of gridha.service_claims that
# gridha_submitter may not read (fixed in 1.3: 5caea49): while it runs,
# their role may read every table, as its users' roles had to.
$pg->safe_psql('postgres', "GRANT pg_read_all_data TO $WORKER_ROLE");
restart_with($WORKER_CONF)
  or die "the cluster restarted on the old library with gridha.workers = 2 serving $DB";
ok( wait_for_workers($pg, $DB, 2, 30),
	'1.0 SQL: two background workers registered');

# enqueue_wave($from, $to): batches w$from..w$to of services w-1..w-4 on
# 'ledger', in rounds, so the services' batches interleave in enqueue order.
sub enqueue_wave
{
	my ($from, $to) = @_;
	$pg->safe_psql($DB, qq{
SELECT gridha.enqueue('w-' || s, format('w-%s-b%s', s, lpad(b::text, 2, '0')),
                      convert_to('wave ' || b, 'UTF8'), 'ledger')
  FROM generate_series($from, $to) b, generate_series(1, 4) s ORDER BY b, s});
	return;
}

# order_kept($name): every batch of the w-* services arrived at the ledger,
# in enqueue order, one in flight per service (check_log.py).
sub order_kept
{
	my ($name) = @_;
	my $exp = "$WORK/expected-$name.tsv";
	my ($out, $err) = ('', '');
	my $rc = $pg->psql($DB, q{
SELECT service_id, batch_id FROM gridha.batches WHERE service_id LIKE 'w-%' ORDER BY service_id, seq},
		stdout => \$out, stderr => \$err, extra_params => [ '-F', "\t" ]);
	return 0 if $rc != 0;
	open my $fh, '>', $exp or die "$exp: $!";
	print $fh "$out\n";
	close $fh;
	my ($ok, $check) = ledger_in_order($ledger, $exp);
	return 1 if $ok;
	diag_head($1, 11) if $check =~ /(^violations.*)/ms;
	return 0;
}

enqueue_wave(1, 3);
# (a bound, not a speed: the old library's workers beside 100,000 claimed
# services need more than 60 s on a loaded machine, seen once)
ok( wait_until(180,
		sub {
			sql_is($DB, '12',
				"SELECT count(*) FROM gridha.batches WHERE service_id LIKE 'w-%' AND status = 'committed'");
		}),
	'1.0 SQL: the workers commit the 12 batches enqueued on the ledger\'s target');
diag(query($DB, "SELECT status, count(*) FROM gridha.batches WHERE service_id LIKE 'w-%' GROUP BY 1"));
check_is('1.0', '1.0 SQL: ... while extversion is still 1.0',
	"SELECT extversion FROM pg_extension WHERE extname = 'gridha'");
ok(order_kept('wave1'),
	'1.0 SQL: the workers\' batches arrived at the ledger in enqueue order, one in flight per service');

# What the workers may change: their own instances, the ledger target and
# its services; nothing of the filled state.
check_is('0', '1.0 SQL: the workers changed nothing of the filled state', q{
SELECT count(*) FROM upgrade_scratch.changed('filled', NULL, '^(w-|ledger$)')
 WHERE kind <> 'count' AND NOT (change = 'new' AND kind = 'instance' AND now_val->>'kind' = 'worker')});

# h's database on 1.1 is filled by the old library too (see h)
prepare_h();

# ---------------------------------------------------------------------------
# c. the current library on 1.0 SQL, then the upgrade

# A second wave on the workers' services, so that some of it is in hand
# when the library changes and the rest waits for the upgrade.
enqueue_wave(4, 8);
wait_until(30,
	sub {
		sql_is($DB, 't', q{
SELECT count(*) > 0 FROM gridha.batches WHERE service_id LIKE 'w-%' AND batch_id ~ '-b0[4-8]$'
   AND status <> 'queued'});
	});
$pg->safe_psql('postgres', "REVOKE pg_read_all_data FROM $WORKER_ROLE");

# The current installation's node: the same port, its data directory the
# old node's (a link to it).
$old->stop('fast');
my $node = PostgreSQL::Test::Cluster->new('upgrade', port => $old->port);
rmtree($node->data_dir) if -d $node->data_dir && !-l $node->data_dir;
symlink($old->data_dir, $node->data_dir) or die 'symlink ' . $node->data_dir . ": $!";
$pg = $node;
my $mark = log_size($node->logfile);
phase_conf($WORKER_CONF);
$node->start(fail_ok => 1)
  or die "the cluster restarted on the current library with gridha.workers = 2 serving $DB";

ok(refused_in($DB, "SELECT * FROM gridha.next_batch('$S')"),
	'current library on 1.0 SQL: the hand-out is refused with RG022, whose hint names ALTER EXTENSION gridha UPDATE');
ok( refused_in($DB, q{SELECT gridha.enqueue('q1', 'q1-b9', '\x00')})
	  && refused_in($DB, "SELECT gridha.report_status('$S', 'q1', 'q1-b2', 1, 'committed')")
	  && refused_in($DB, "SELECT * FROM gridha.pending_batches('$S')"),
	'current library on 1.0 SQL: enqueue, a report and pending_batches are refused the same way');
ok( wait_until(30,
		sub {
			log_since($node->logfile, $mark) =~
			  /gridha worker waits: .*which this library no longer serves/;
		}),
	'current library on 1.0 SQL: the workers wait, saying why once in the server log (RG022)');

$pg->safe_psql($DB, "SELECT upgrade_scratch.snapshot('pre')");
# claims held right before, by state
diag(query($DB, q{
SELECT val->>'state', count(*) FROM upgrade_scratch.snap WHERE tag = 'pre' AND kind = 'claim'
 GROUP BY 1 ORDER BY 1}));

$start = time();
{
	my ($out, $err) = ('', '');
	my $rc = $pg->psql($DB, 'ALTER EXTENSION gridha UPDATE', stdout => \$out, stderr => \$err);
	if (!ok($rc == 0,
		sprintf('ALTER EXTENSION gridha UPDATE runs with the workers starting again (%d s)', time() - $start)))
	{
		diag("$out$err");
		# the rest compares an upgraded database: nothing to compare
		die 'the upgrade failed';
	}
}
check_is($DEFAULT_VERSION, "upgrade: extversion is $DEFAULT_VERSION",
	"SELECT extversion FROM pg_extension WHERE extname = 'gridha'");

# The second wave's batches are new and the workers' services move on; the
# workers' claims are checked below. Everything else is exactly as before.
my $SKIP = '^(w-[0-9]+$|w-[0-9]+/w-[0-9]+-b0[4-8]$)';
my $n_cmp = query($DB,
	"SELECT count(*) FROM upgrade_scratch.snap WHERE tag = 'pre' AND kind <> 'count' AND key !~ '$SKIP'");
# (the workers register again after the upgrade: new worker instances)
{
	my $changed = query($DB, qq{
SELECT change, kind, key, was_val, now_val FROM upgrade_scratch.changed('pre', NULL, '$SKIP')
 WHERE kind <> 'count'
   AND NOT (change = 'new' AND kind = 'instance' AND now_val->>'kind' = 'worker') LIMIT 40});
	ok($changed eq '',
		"upgrade: no claim, epoch, batch, instance, target, lease, tick, id window or rate state lost or changed ($n_cmp rows compared)"
	) or diag($changed);
}

check_is('t',
	'upgrade: the batches in flight before it (submitting, pending, valid, delayed, unknown) are all still in flight, unchanged',
	q{
SELECT count(*) > 350 AND count(*) = count(b.batch_id)
  FROM upgrade_scratch.snap s
  LEFT JOIN gridha.batches b ON b.service_id || '/' || b.batch_id = s.key
       AND b.status::text = s.val->>'status' AND b.epoch = (s.val->>'epoch')::bigint
       AND b.attempts = (s.val->>'attempts')::int AND md5(b.payload) = s.val->>'payload_md5'
 WHERE s.tag = 'pre' AND s.kind = 'batch' AND s.key !~ '^w-'
   AND s.val->>'status' IN ('submitting', 'pending', 'valid', 'delayed', 'unknown')});

check_is('t', 'upgrade: no epoch of the workers\' services went back', q{
SELECT bool_and(c.epoch >= (s.val->>'epoch')::bigint) AND count(*) = 4
  FROM upgrade_scratch.snap s JOIN gridha.service_claims c ON c.service_id = s.key
 WHERE s.tag = 'pre' AND s.kind = 'claim' AND s.key LIKE 'w-%'});

# (but the workers' services, which the workers take again after it)
check_is(
	query($DB,
		"SELECT count(*) FROM upgrade_scratch.snap WHERE tag = 'pre' AND kind = 'claim' AND key NOT LIKE 'w-%'"),
	'upgrade: gridha.claims shows every claim in the state it was in (held, slow, soft and hard expired, free)',
	q{
SELECT count(*) FROM upgrade_scratch.snap s JOIN gridha.claims c ON c.service_id = s.key
 WHERE s.tag = 'pre' AND s.kind = 'claim' AND s.key NOT LIKE 'w-%' AND c.state = s.val->>'state'});

# HELD_SQL: how many instances' held is not their number of claims
my $HELD_SQL = q{
SELECT count(*) FROM gridha.instances i
 WHERE i.held <> (SELECT count(*) FROM gridha.service_claims c WHERE c.claimant = i.instance_id)};
check_is('0', 'upgrade: every instance\'s held equals the number of claims it holds', $HELD_SQL)
  or diag(query($DB, q{
SELECT i.label, i.kind, i.held, (SELECT count(*) FROM gridha.service_claims c
 WHERE c.claimant = i.instance_id) FROM gridha.instances i}));
check_is('0|4', 'upgrade: every instance holding claims has a lease (soft and hard expiry)', q{
SELECT count(*) FILTER (WHERE held > 0 AND (soft_expiry IS NULL OR hard_expiry IS NULL))
       || '|' || count(*) FILTER (WHERE held > 0 AND kind = 'external')
  FROM gridha.instances});

# METRICS_SQL: whether some idle service was settled, and how many targets'
# counters in gridha.metrics differ from the sums over their service rows
# (what they were before the settled totals): "true|0"
my $METRICS_SQL = q{
SELECT (SELECT coalesce(sum(settled_committed), 0) > 0 FROM gridha.target_totals) || '|' || count(*)}
  . metrics_off_sql();
check_is('true|0',
	'upgrade: the idle services\' counters are settled into target_totals, and each target\'s counters in gridha.metrics equal the sums over its services',
	$METRICS_SQL);

ok( wait_until(60,
		sub {
			sql_is($DB, '32',
				"SELECT count(*) FROM gridha.batches WHERE service_id LIKE 'w-%' AND status = 'committed'");
		}),
	"$DEFAULT_VERSION after the upgrade: the workers commit the second wave (32 batches of the ledger's target committed)"
);
ok(order_kept('wave2'),
	"$DEFAULT_VERSION after the upgrade: each worker service's 8 batches arrived in enqueue order across the upgrade, one in flight"
);
check_is('0',
	"$DEFAULT_VERSION after the upgrade: held still equals each instance's claims once the workers have worked on 1.1",
	$HELD_SQL);
check_is('t', "$DEFAULT_VERSION after the upgrade: the workers hold the ledger's 4 services under leases", q{
SELECT count(*) = 4 AND bool_and(i.kind = 'worker' AND i.soft_expiry > now())
  FROM gridha.service_claims c JOIN gridha.instances i ON i.instance_id = c.claimant
 WHERE c.service_id LIKE 'w-%'});

# The workers stop; the rest runs without them.
ok(restart_with(''), 'the cluster restarted without workers');

# ---------------------------------------------------------------------------
# e. the upgraded schema equals a fresh install

{
	my ($rc, $out) = run_psql('postgres', "CREATE DATABASE $FRESH", '-v', 'ON_ERROR_STOP=1');
	($rc, $out) = run_psql($FRESH, 'CREATE EXTENSION gridha', '-v', 'ON_ERROR_STOP=1') if $rc == 0;
	ok($rc == 0, "a fresh $DEFAULT_VERSION install in $FRESH") or diag($out);
}

# schema_dump($db, $file): the filtered binary-upgrade schema dump of $db
# (less this test's scratch schema); true when written.
sub schema_dump
{
	my ($db, $file) = @_;
	my $err = '';
	IPC::Run::run(
		[ 'pg_dump', '--schema-only', '--binary-upgrade', '-N', 'upgrade_scratch', '-d', $pg->connstr($db) ],
		'<', \undef, '>', "$file.raw", '2>', \$err)
	  or do { diag($err); return 0; };
	IPC::Run::run([ 'python3', "$DBA/schema_filter.py", "$file.raw" ], '<', \undef, '>', $file, '2>', \$err)
	  or do { diag($err); return 0; };
	return 1;
}

# same_files($what, $a, $b): one test, ok when the files are equal; else
# the diff as diagnostics.
sub same_files
{
	my ($what, $a, $b) = @_;
	if (!ok(slurp_file($a) eq slurp_file($b), $what))
	{
		my $d = '';
		IPC::Run::run([ 'diff', '-u', $a, $b ], '<', \undef, '>&', \$d);
		diag_head($d, 80);
	}
	return;
}

if (schema_dump($DB, "$WORK/upgraded.sql") && schema_dump($FRESH, "$WORK/fresh.sql"))
{
	my $n_members = () = slurp_file("$WORK/fresh.sql") =~ /^ALTER EXTENSION gridha ADD /mg;
	ok($n_members > 40,
		"schema: the binary-upgrade dump lists every member object ($n_members ALTER EXTENSION ... ADD)");
	same_files(
		'schema: pg_dump --schema-only --binary-upgrade of the upgraded database equals a fresh install\'s (OID lines removed)',
		"$WORK/upgraded.sql", "$WORK/fresh.sql");
}
else
{
	fail('schema: pg_dump --schema-only --binary-upgrade of both databases');
}

{
	my $catalog = slurp_file("$DBA/extension_catalog.sql");
	my ($rc_up, $up) = run_psql($DB, $catalog, '-v', 'ON_ERROR_STOP=1');
	my ($rc_fr, $fr) = run_psql($FRESH, $catalog, '-v', 'ON_ERROR_STOP=1');
	my %what = (
		config => 'pg_extension.extconfig/extcondition (as table names)',
		init_priv => 'pg_init_privs of the members (names and aclitems)',
		member => 'the extension\'s member objects (pg_depend)');
	foreach my $section (qw(config init_priv member))
	{
		my @u = grep { /^$section\t/ } split /\n/, $up;
		my @f = grep { /^$section\t/ } split /\n/, $fr;
		foreach my $x ([ 'upgraded', \@u ], [ 'fresh', \@f ])
		{
			open my $fh, '>', "$WORK/$x->[0].$section" or die "$x->[0].$section: $!";
			print $fh map { "$_\n" } @{ $x->[1] };
			close $fh;
		}
		my $n = @f;
		if ($rc_up || $rc_fr || $n == 0)
		{
			# two empty answers are equal, and prove nothing
			fail("schema: $what{$section} equal a fresh install's "
				  . "(extension_catalog.sql exited $rc_up and $rc_fr, $n rows)");
			diag_head($up . $fr, 20);
			next;
		}
		same_files("schema: $what{$section} equal a fresh install's ($n rows)",
			"$WORK/upgraded.$section", "$WORK/fresh.$section");
	}
}

# Self-test: the comparison sees a difference planted in the fresh copy.
$pg->safe_psql($FRESH, "COMMENT ON VIEW gridha.claims IS 'planted by 015_upgrade'");
{
	my $planted = "COMMENT ON VIEW gridha.claims IS 'planted by 015_upgrade';";
	my $ok = schema_dump($FRESH, "$WORK/planted.sql");
	if ($ok)
	{
		my $p = slurp_file("$WORK/planted.sql");
		my $u = slurp_file("$WORK/upgraded.sql");
		$ok = $p ne $u && $p =~ /^\Q$planted\E$/m && $u !~ /^\Q$planted\E$/m;
	}
	ok($ok, 'schema: the comparison catches a difference (a view comment planted in the fresh copy)');
}

# ---------------------------------------------------------------------------
# g. the upgrade's locks: a transaction that holds a table the upgrade
#    locks late and then wants one it locks early goes on, and so does the
#    upgrade (a plain script would deadlock there, and lose); the caller's
#    lock_timeout bounds the upgrade's wait

my $LOCKS = 'gridha_upgrade_locks';

# psql_bg($db, $sql): a psql session in the background running $sql (from
# a file: IPC::Run feeds a child's input only when pumped); the IPC::Run
# handle and a ref to its output (standard error merged)
my $n_bg = 0;

sub psql_bg
{
	my ($db, $sql) = @_;
	my $file = "$WORK/bg-" . ++$n_bg . '.sql';
	open my $fh, '>', $file or die "$file: $!";
	print $fh $sql;
	close $fh;
	my $out = '';
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', $pg->connstr($db), '-f', $file ],
		'<', \undef, '>&', \$out);
	return ($h, \$out);
}

{
	my ($rc, $out) = run_psql('postgres', "CREATE DATABASE $LOCKS", '-v', 'ON_ERROR_STOP=1');
	($rc, $out) = run_psql($LOCKS, "CREATE EXTENSION gridha VERSION '1.0'", '-v', 'ON_ERROR_STOP=1')
	  if $rc == 0;
	ok($rc == 0, "locks: a database on 1.0 in $LOCKS") or diag($out);
}

# The caller's lock_timeout (1 s) against a transaction that holds
# gridha.instances for 4 s: the upgrade gives up, with 55P03, and nothing
# changed.
{
	my ($holder) = psql_bg($LOCKS, 'BEGIN; SELECT count(*) FROM gridha.instances; SELECT pg_sleep(4); COMMIT;');
	wait_until(20,
		sub {
			sql_is($LOCKS, 't', q{
SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
 WHERE c.relname = 'instances' AND l.pid <> pg_backend_pid() AND l.granted)});
		});
	my ($rc, $out);
	{
		local $ENV{PGAPPNAME} = 'gridha_upgrade_locks';
		($rc, $out) = run_psql($LOCKS, "SET lock_timeout = '1s';\nALTER EXTENSION gridha UPDATE;\n",
			'-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose');
	}
	ok( $rc != 0
		  && $out =~ /55P03.*could not lock the tables of gridha within lock_timeout/
		  && sql_is($LOCKS, '1.0', "SELECT extversion FROM pg_extension WHERE extname = 'gridha'"),
		'locks: the caller\'s lock_timeout bounds the upgrade\'s wait (55P03, still 1.0)') or diag($out);
	$holder->finish;
}

# hold_then_read: in one transaction, read gridha.instances (which the
# upgrade changes after gridha.targets, and locks after it), wait until the
# upgrade waits for a lock (at most 30 s), read gridha.targets and commit.
{
	my ($holder, $holder_out) = psql_bg($LOCKS, q{
BEGIN;
SELECT count(*) FROM gridha.instances;
DO $$
BEGIN
    FOR i IN 1 .. 30 * 20 LOOP
        EXIT WHEN EXISTS (SELECT 1 FROM pg_stat_activity
                           WHERE application_name = 'gridha_upgrade_locks' AND wait_event_type = 'Lock');
        PERFORM pg_sleep(0.05);
    END LOOP;
END
$$;
SELECT count(*) FROM gridha.targets;
COMMIT;
});
	my ($rc, $out);
	{
		local $ENV{PGAPPNAME} = 'gridha_upgrade_locks';
		($rc, $out) = run_psql($LOCKS, 'ALTER EXTENSION gridha UPDATE', '-v', 'ON_ERROR_STOP=1');
	}
	$holder->finish;
	my $holder_rc = $holder->result;
	ok($rc == 0 && sql_is($LOCKS, $DEFAULT_VERSION, "SELECT extversion FROM pg_extension WHERE extname = 'gridha'"),
		'locks: the upgrade waits out a transaction that holds a late table and wants an early one, and runs')
	  or diag($out);
	ok($holder_rc == 0 && $$holder_out !~ /ERROR/, 'locks: ... and that transaction goes on and commits')
	  or diag($$holder_out);
}
run_psql('postgres', "DROP DATABASE IF EXISTS $LOCKS");

# ---------------------------------------------------------------------------
# h. from 1.1: a database on 1.1, filled, upgraded while a client cycles
#    through it (next_batch, report accepted, report committed)

$L = query($H, "SELECT instance_id FROM gridha.instances WHERE label = 'L'");
ok(refused_in($H, "SELECT * FROM gridha.next_batch('$L')"),
	'from 1.1: the current library refuses the hand-out on 1.1 SQL with RG022, whose hint names ALTER EXTENSION gridha UPDATE'
);
# L's claim cycle is not due for minutes from now (it was filled a while
# ago): plain SQL, which the library does not refuse
$pg->safe_psql($H, qq{
UPDATE gridha.instances SET last_seen_at = now(), soft_expiry = now() + interval '30 minutes',
       hard_expiry = now() + interval '60 minutes' WHERE instance_id = '$L'});

# live_client: a process that, for at most 90 s, hands out L's next batch
# and reports it accepted and committed, each in a session of its own, and
# exits 0 once the live service has nothing left but committed batches
# (an idle poll would take over the expired claims the fill left).
my $live_client = IPC::Run::start(
	[
		$^X, '-e', q{
use strict;
use warnings;
my ($conn, $L) = @ARGV;
sub sq {
	my @cmd = ('psql', '-X', '-q', '-A', '-t', '-d', $conn, map { ('-c', $_) } @_);
	open my $fh, '-|', @cmd or return '';
	local $/;
	my $out = <$fh> // '';
	close $fh;
	return $out;
}
my $end = time() + 90;
while (time() < $end)
{
	my $left = sq("SELECT count(*) FROM gridha.batches WHERE service_id = 'h-live' AND status <> 'committed'");
	chomp $left;
	exit 0 if $left eq '0';
	my @lines = split /\n/, sq('SET gridha.balance_claims = off',
		"SELECT concat_ws('|', service_id, batch_id, epoch) FROM gridha.next_batch('$L')");
	my $got = $lines[-1] // '';
	if ($got ne '')
	{
		my ($sid, $bid, $ep) = split /\|/, $got;
		sq("SELECT gridha.report_submission('$L', '$sid', '$bid', $ep, 'accepted')",
			"SELECT gridha.report_status('$L', '$sid', '$bid', $ep, 'committed')");
	}
}
exit 1;
}, $pg->connstr($H), $L
	],
	'<', \undef, '>', "$WORK/live-client.out", '2>&1');
sleep 1;
{
	my ($out, $err) = ('', '');
	my $rc = $pg->psql($H, 'ALTER EXTENSION gridha UPDATE', stdout => \$out, stderr => \$err);
	ok($rc == 0, 'from 1.1: ALTER EXTENSION gridha UPDATE runs while the client cycles') or diag("$out$err");
}
$live_client->finish;
ok($live_client->result == 0, 'from 1.1: the client, across the upgrade, commits the live service\'s 40 batches');
ok(sql_is($H, $DEFAULT_VERSION, "SELECT extversion FROM pg_extension WHERE extname = 'gridha'"),
	"from 1.1: extversion is $DEFAULT_VERSION");
ok( sql_is($H, '0', q{
SELECT count(*) FROM (SELECT seq, row_number() OVER (ORDER BY finished_at, seq) AS r
                        FROM gridha.batches WHERE service_id = 'h-live') x WHERE seq <> r}),
	'from 1.1: ... in enqueue order');
ok(sql_is($H, 'true|0', $METRICS_SQL),
	'from 1.1: the idle services\' counters are settled, and gridha.metrics\' counters equal the sums over the services (the live one\'s queue ran dry on 1.2)'
);
{
	my $SKIP_H = "^(h-live|$L\$)";
	my $changed = query($H, qq{
SELECT change, kind, key, was_val, now_val FROM upgrade_scratch.changed('pre11', NULL, '$SKIP_H')
 WHERE kind <> 'count' LIMIT 40});
	ok($changed eq '',
		'from 1.1: no claim, epoch, batch, instance, target, lease, tick, id window or rate state lost or changed (but the client\'s)'
	) or diag($changed);
}
if (schema_dump($H, "$WORK/upgraded-h.sql"))
{
	same_files(
		'from 1.1: pg_dump --schema-only --binary-upgrade of the database upgraded from 1.1 equals a fresh install\'s',
		"$WORK/upgraded-h.sql", "$WORK/fresh.sql");
}
else
{
	fail('from 1.1: pg_dump --schema-only --binary-upgrade of the database upgraded from 1.1');
}
# The 1.1 forms 1.2 keeps, deprecated, as a 1.1 client calls them after the
# upgrade: the array reports, try_lead and resign (next_batch's attempt is
# attempts since 1.3: the same count, fifth column).
{
	my (undef, $old_calls) = run_psql($H, qq{SET gridha.balance_claims = off;
SELECT gridha.enqueue('h-live', 'h-live-b41', '\\x02');
SELECT attempts FROM gridha.next_batch('$L');
SELECT status FROM gridha.report_submissions('$L', '{h-live}', '{h-live-b41}', '{1}', '{accepted}');
SELECT status FROM gridha.report_statuses('$L', '{h-live}', '{h-live-b41}', '{1}', '{COMMITTED}');
SELECT gridha.try_lead('$L', 'h-duty') IS NOT NULL AND gridha.resign('$L', 'h-duty');
});
	$old_calls =~ s/\n/ /g;
	ok($old_calls eq '41 1 pending committed t ',
		"from 1.1: after the upgrade the deprecated 1.1 calls still answer (attempts, array reports, try_lead, resign): $old_calls"
	);
}
run_psql('postgres', "DROP DATABASE IF EXISTS $H WITH (FORCE)");

# ---------------------------------------------------------------------------
# i. 1.2's function targets (issue 39): regprocedure columns, read by this
#    library; the update turns each into its schema-qualified signature

my $I = "${DB}_i";
run_psql('postgres', "SET client_min_messages = warning;\nDROP DATABASE IF EXISTS $I;\nCREATE DATABASE $I;\n");
# One session throughout: the library reads the columns as regprocedure,
# then (after the update, in the same backend) as text.
{
	my (undef, $out) = run_psql($I, q{
SET client_min_messages = error;
SET gridha.balance_claims = off;
CREATE EXTENSION gridha VERSION '1.2';
CREATE SCHEMA fx;
CREATE FUNCTION fx.sub(text, text, bytea, bigint) RETURNS text LANGUAGE sql AS $$ SELECT 'accepted' $$;
CREATE FUNCTION public.st(text[]) RETURNS TABLE (batch_id text, status text)
LANGUAGE sql AS $$ SELECT b, 'COMMITTED' FROM unnest($1) b $$;
CREATE FUNCTION public.gone(text, text, bytea, bigint) RETURNS text LANGUAGE sql AS $$ SELECT 'accepted' $$;
SET search_path = fx, public;
INSERT INTO gridha.targets (target, submit_function, status_function)
VALUES ('i-fn', 'sub(text,text,bytea,bigint)', 'st(text[])'),
       ('i-gone', 'gone(text,text,bytea,bigint)', NULL),
       ('i-none', '-', NULL);
RESET search_path;
DROP FUNCTION public.gone(text, text, bytea, bigint);
SELECT 'gone-oid', submit_function::oid FROM gridha.targets WHERE target = 'i-gone';
SELECT gridha.register_instance('fn only', '{submit_function,status_function}') AS f \gset
SELECT count(gridha.enqueue(s, s || '-b' || b, '\x01', t))
  FROM (VALUES ('i1', 'i-fn'), ('i2', 'i-gone')) v (s, t), generate_series(1, 2) b;
SELECT 'claimed-1.2', string_agg(service_id, ',' ORDER BY service_id)
  FROM gridha.acquire_claims(:'f', '{submit_function,status_function}');
SELECT 'handed-1.2', service_id, batch_id FROM gridha.next_batch(:'f');
SELECT 'fleet-1.2', gridha.verify_batch(:'f', 'i1', 'i1-b1', 1),
       (SELECT string_agg(batch_id || ':' || status, ',') FROM gridha.claimed_batches(:'f')),
       (SELECT lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
         WHERE p.oid = 'gridha.claimed_batches(uuid, integer)'::regprocedure);
SELECT 'accepted-1.2', gridha.report_submission(:'f', 'i1', 'i1-b1', 1, 'accepted'::text);
SELECT 'pending-1.2', batch_id, status FROM gridha.pending_batches(:'f');
SELECT 'report-1.2', gridha.report_status(:'f', 'i1', 'i1-b1', 1, 'committed');
ALTER EXTENSION gridha UPDATE;
SELECT 'types', string_agg(format_type(atttypid, atttypmod), ',' ORDER BY attname)
  FROM pg_attribute WHERE attrelid = 'gridha.targets'::regclass
   AND attname IN ('submit_function', 'status_function');
SELECT 'row', target, coalesce(submit_function, '(null)'), coalesce(status_function, '(null)')
  FROM gridha.targets WHERE target LIKE 'i-%' ORDER BY target;
SELECT 'handed-1.3', service_id, batch_id FROM gridha.next_batch(:'f');
SELECT 'fleet-1.3', gridha.verify_batch(:'f', 'i1', 'i1-b2', 1),
       (SELECT string_agg(batch_id || ':' || status, ',') FROM gridha.claimed_batches(:'f')),
       (SELECT string_agg(DISTINCT lanname, ',') FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
         WHERE p.oid IN ('gridha.claimed_batches(uuid, integer)'::regprocedure,
                         'gridha.pending_batches(uuid, integer)'::regprocedure,
                         'gridha.verify_batch(uuid, text, text, bigint)'::regprocedure));
}, '-v', 'ON_ERROR_STOP=1');
	my ($gone_oid) = $out =~ /^gone-oid\|(\d+)$/m;
	my $all_passed = 1;
	$all_passed &= ok($out =~ /^claimed-1\.2\|i1$/m && $out =~ /^handed-1\.2\|i1\|i1-b1$/m,
		'1.2 functions: on 1.2\'s SQL (regprocedure columns) the library judges the function target servable and hands its head out, and not the target whose function was dropped'
	);
	my $gone_shown = $gone_oid // '';
	$all_passed &= ok(
		$out =~ /^types\|text,text$/m
		  && $out =~ /^row\|i-fn\|fx\.sub\(text,text,bytea,bigint\)\|public\.st\(text\[\]\)$/m
		  && defined $gone_oid
		  && $out =~ /^row\|i-gone\|$gone_oid\|\(null\)$/m
		  && $out =~ /^row\|i-none\|\(null\)\|\(null\)$/m,
		"1.2 functions: the update makes the columns text, each function its schema-qualified signature (written unqualified on 1.2), a dropped one's OID digits ($gone_shown), none ('-') NULL"
	);
	$all_passed &= ok($out =~ /^handed-1\.3\|i1\|i1-b2$/m,
		'1.2 functions: after the update, in the same session, the library reads the signatures and hands out the function target\'s next batch'
	);
	$all_passed &= ok($out =~ /^fleet-1\.2\|t\|i1-b1:submitting\|c$/m && $out =~ /^pending-1\.2\|i1-b1\|pending$/m,
		'1.2 SQL, issue 42: verify_batch, claimed_batches and pending_batches (C entry points of 1.2\'s SQL, src/sql12.c) answer as before'
	);
	$all_passed &= ok($out =~ /^fleet-1\.3\|t\|i1-b2:submitting\|sql$/m,
		'1.2 SQL, issue 42: after the update, in the same session, verify_batch, claimed_batches and pending_batches are the 1.3 script\'s SQL and answer the same'
	);
	my $got = query($I, q{
SELECT count(*) FROM gridha.acquire_claims(gridha.register_instance('fn only 2', '{submit_function}'),
                                           '{submit_function}')
 WHERE service_id = 'i2'});
	$all_passed &= ok($got eq '0',
		"1.2 functions: the target whose function was dropped (its OID as digits after the update) is served by no instance (claimed: $got)"
	);
	diag($out) unless $all_passed;
}
run_psql('postgres', "DROP DATABASE IF EXISTS $I WITH (FORCE)");

# ---------------------------------------------------------------------------
# j. one session on 1.1 SQL (issue 40): the hand-out is refused (RG022,
#    its hint naming ALTER EXTENSION gridha UPDATE); the same session runs
#    the update and then hands out, the library's reading of the version
#    renewed by the update

my $J = "${DB}_j";
run_psql('postgres', "SET client_min_messages = warning;\nDROP DATABASE IF EXISTS $J;\nCREATE DATABASE $J;\n");
{
	my (undef, $out) = run_psql($J, q{
CREATE EXTENSION gridha VERSION '1.1';
SELECT 'before', service_id FROM gridha.next_batch('00000000-0000-4000-8000-00000000a0f1');
ALTER EXTENSION gridha UPDATE;
SELECT 'enqueued', gridha.enqueue('j1', 'j1-b1', '\x01');
SELECT 'after', service_id, batch_id, epoch FROM gridha.next_batch('00000000-0000-4000-8000-00000000a0f1');
}, '-v', 'VERBOSITY=verbose');
	my $all_passed = ok(
		$out =~ /ERROR:  RG022: gridha's SQL in this database is version 1\.1, which this library no longer serves/
		  && $out =~ /HINT:  Update the extension: ALTER EXTENSION gridha UPDATE\./
		  && $out !~ /^before\|/m,
		'1.1 SQL: next_batch is refused with RG022, its hint naming ALTER EXTENSION gridha UPDATE');
	$all_passed &= ok($out =~ /^after\|j1\|j1-b1\|1$/m,
		'1.1 SQL: after ALTER EXTENSION gridha UPDATE in the same session, next_batch hands out the head');
	diag($out) unless $all_passed;
}
run_psql('postgres', "DROP DATABASE IF EXISTS $J WITH (FORCE)");

# ---------------------------------------------------------------------------
# k. one session on 1.2 SQL (issue 42.1): the lease, maintenance and ID
#    sequence calls, whose statements are functions of the 1.3 script since,
#    answer on 1.2 as 1.2's library answered them (src/leader12.c and
#    idseq.c keep 1.2's code: the new library serves the old SQL until
#    ALTER EXTENSION gridha UPDATE), the hand-out's poll duty takes 1.2's
#    maintenance lease, and the cycle works; after the update in the same
#    session, lead and run_maintenance answer from the 1.3 script

my $K = "${DB}_k";
run_psql('postgres', "SET client_min_messages = warning;\nDROP DATABASE IF EXISTS $K;\nCREATE DATABASE $K;\n");
{
	my (undef, $out) = run_psql($K, q{
SET client_min_messages = error;
SET gridha.balance_claims = off;
SET gridha.prune_interval = 0;
CREATE EXTENSION gridha VERSION '1.2';
SELECT gridha.register_instance('k') AS k \gset
SELECT 'enqueued', gridha.enqueue('k1', 'k1-b1', '\x01');
SELECT 'handed', service_id, batch_id, epoch FROM gridha.next_batch(:'k');
SELECT 'reported', gridha.report_status(:'k', 'k1', 'k1-b1', 1, 'committed');
SELECT 'poll_lease', count(*) FROM gridha.leases WHERE role = 'maintenance' AND leader = :'k';
SELECT 'create_id_sequence', gridha.create_id_sequence('k-ids', 100, 1);
SELECT 'ids', gridha.reserve_ids('k-ids', 10);
SELECT 'drop_id_sequence', gridha.drop_id_sequence('k-ids');
SELECT 'lead', gridha.lead(:'k', 'k-duty');
SELECT 'try_lead', gridha.try_lead(:'k', 'k-duty');
SELECT 'renew_lead', gridha.renew_lead(:'k', 'k-duty', 1);
SELECT 'resign_lead', gridha.resign_lead(:'k', 'k-duty');
SELECT 'resign', gridha.resign(:'k', 'k-duty');
SELECT 'run_maintenance', outcome FROM gridha.run_maintenance(:'k');
SELECT 'prune_batches', gridha.prune_batches();
SELECT 'create_id_sequence2', gridha.create_id_sequence('k-ids2', 100, 1);
SELECT 'next_id', gridha.next_id('k-ids2');
SELECT 'band', count(*) FROM gridha.epoch_bands;
BEGIN;
TRUNCATE gridha.batches, gridha.service_claims;
SELECT 'truncated', (SELECT count(*) FROM gridha.service_counts), (SELECT count(*) FROM gridha.instances WHERE held <> 0);
ROLLBACK;
SELECT 'released', gridha.release_claims(:'k');
SELECT 'after_release', count(*) FROM gridha.leases WHERE role = 'maintenance' AND leader IS NOT NULL;
SELECT 'end-1.2';
ALTER EXTENSION gridha UPDATE;
SELECT 'enqueued-1.3', gridha.enqueue('k1', 'k1-b2', '\x02');
SELECT 'handed-1.3', batch_id FROM gridha.next_batch(:'k');
SELECT 'lead-1.3', gridha.lead(:'k', 'k-duty');
SELECT 'maintenance-1.3', outcome FROM gridha.run_maintenance(:'k');
SELECT 'released-1.3', gridha.release_claims(:'k');
}, '-v', 'VERBOSITY=verbose');
	my $answered = grep { $out =~ /^\Q$_\E\|/m }
	  qw(lead try_lead renew_lead resign_lead resign run_maintenance prune_batches create_id_sequence drop_id_sequence);
	my ($before_end) = $out =~ /\A(.*?^end-1\.2$)/ms;
	$before_end //= $out;
	my $all_passed = ok(
		$answered == 9
		  && $out =~ /^lead\|1$/m
		  && $out =~ /^try_lead\|1$/m
		  && $out =~ /^renew_lead\|t$/m
		  && $out =~ /^resign_lead\|t$/m
		  && $out =~ /^drop_id_sequence\|t$/m
		  && $out =~ /^run_maintenance\|(ran|already_run)$/m
		  && $before_end !~ /ERROR/,
		"1.2 SQL: lead, try_lead, renew_lead, resign_lead, resign, run_maintenance, prune_batches, create_id_sequence and drop_id_sequence answer as 1.2's library answered them ($answered of 9, no error)"
	);
	$all_passed &= ok(
		$out =~ /^handed\|k1\|k1-b1\|1$/m
		  && $out =~ /^reported\|committed$/m
		  && $out =~ /^ids\|\[1,11\)$/m
		  && $out =~ /^next_id\|1$/m
		  && $out =~ /^poll_lease\|1$/m
		  && $out =~ /^released\|/m
		  && $out =~ /^after_release\|0$/m
		  && $out =~ /^band\|1$/m
		  && $out =~ /^truncated\|0\|0$/m,
		'1.2 SQL: meanwhile the cycle works: next_batch (its poll duty takes 1.2\'s maintenance lease; its take writes the epoch band), report_status, reserve_ids, next_id, a truncate of service_claims (no count left, no instance holding), release_claims (which resigns that lease)'
	);
	$all_passed &= ok(
		$out =~ /^handed-1\.3\|k1-b2$/m
		  && $out =~ /^lead-1\.3\|[0-9]+$/m
		  && $out =~ /^maintenance-1\.3\|(ran|already_run)$/m
		  && $out =~ /^released-1\.3\|0$/m,
		'1.2 SQL: after ALTER EXTENSION gridha UPDATE in the same session, next_batch (and its poll duty), lead, run_maintenance and release_claims (keeping the head handed out) answer'
	);
	diag($out) unless $all_passed;
}
run_psql('postgres', "DROP DATABASE IF EXISTS $K WITH (FORCE)");

# ---------------------------------------------------------------------------
# d. pg_regress and pgTAP in the upgraded database

# Empty it to what CREATE EXTENSION leaves (see the header), with the
# settings pg_regress gives a database it creates.
{
	my ($rc, $out) = run_psql($DB, qq{
ALTER DATABASE $DB RESET ALL;
ALTER DATABASE $DB SET lc_messages TO 'C';
ALTER DATABASE $DB SET lc_monetary TO 'C';
ALTER DATABASE $DB SET lc_numeric TO 'C';
ALTER DATABASE $DB SET lc_time TO 'C';
ALTER DATABASE $DB SET bytea_output TO 'hex';
ALTER DATABASE $DB SET timezone_abbreviations TO 'Default';
DROP SCHEMA upgrade_scratch CASCADE;
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances, gridha.leases,
    gridha.maintenance_ticks, gridha.id_windows, gridha.id_sequences, gridha.target_rate_state,
    gridha.rate_handouts, gridha.service_counts;
DELETE FROM gridha.targets WHERE target <> 'default';
UPDATE gridha.targets
   SET submit_url = NULL, status_url = NULL, submit_function = NULL, status_function = NULL,
       rate_interval = NULL, rate_burst = 1, reject_codes = '{400,422}', request_headers = NULL
 WHERE target = 'default';
SELECT setval('gridha.id_sequence_serial', 1, false);
ANALYZE;
}, '-v', 'ON_ERROR_STOP=1');
	ok($rc == 0, 'the upgraded database emptied to what CREATE EXTENSION leaves, for the suites')
	  or diag_tail($out, 20);
}

# The tests and options as the Makefile hands them to PGXS's installcheck
# (which adds --dbname=contrib_regression; the last --dbname wins).
my $PG_REGRESS = $ENV{PG_REGRESS}
  // dirname(dirname(pg_config_value($PG_CONFIG, 'pgxs'))) . '/test/regress/pg_regress';
make_path("$WORK/regress");
if (@regress_tests)
{
	my $log = '';
	IPC::Run::run(
		[
			$PG_REGRESS, "--outputdir=$WORK/regress", "--bindir=$BINDIR",
			'--host=' . $pg->host, '--port=' . $pg->port, '--use-existing',
			@regress_opts, "--dbname=$DB", @regress_tests
		],
		'<', \undef, '>&', \$log,
		init => sub { chdir $REPO or die "chdir $REPO: $!" });
	my $regress_rc = $?;
	foreach my $t (@regress_tests)
	{
		# PostgreSQL 15 prints "test api ... ok", 16 and later "ok 1 - api"
		ok($log =~ /^((test +| +)\Q$t\E +\.\.\. +ok|ok +[0-9]+ +- +\Q$t\E( |$))/m,
			"pg_regress in the upgraded database: $t");
	}
	if ($regress_rc != 0)
	{
		diag_tail($log, 15);
		diag_head(slurp_file("$WORK/regress/regression.diffs"), 60)
		  if -s "$WORK/regress/regression.diffs";
	}
}
else
{
	fail('pg_regress: the Makefile\'s REGRESS list');
}

{
	my ($rc, $out) = run_psql($DB, 'CREATE EXTENSION pgtap', '-v', 'ON_ERROR_STOP=1');
	if ($rc == 0)
	{
		foreach my $f (@pgtap_files)
		{
			my $log = '';
			IPC::Run::run([ 'pg_prove', '-h', $pg->host, '-p', $pg->port, '-d', $DB, $f ],
				'<', \undef, '>&', \$log);
			ok($? == 0, 'pgTAP in the upgraded database: ' . basename($f))
			  or diag_head(join("\n", grep { !/^ok/ } split /\n/, $log), 30);
		}
	}
	else
	{
		fail('CREATE EXTENSION pgtap in the upgraded database');
		diag($out);
	}
}

$node->stop;
