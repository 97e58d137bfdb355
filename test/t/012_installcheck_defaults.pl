# test/t/012_installcheck_defaults.pl: `make installcheck` passes against a
# server whose only setting that changes behaviour is the preload
# (shared_preload_libraries = 'gridha'; max_prepared_transactions,
# max_worker_processes and every other setting at PostgreSQL's default), as
# a user's server would be (issue 42, item 3).
#
# The three parts of installcheck run against it, each on its own and each
# one test, with the installed build's flags (no rebuild): pgTAP (pg_prove;
# skipped, naming what is missing, without pg_prove or pgTAP), pg_regress,
# the isolation specs. Where prepared transactions are off (the default),
# expected/counts_1.out and test/isolation/expected/settle-prepared_1.out
# are the outputs that match: the first says it skipped its PREPARE
# TRANSACTION part, the second shows PostgreSQL refusing it.
#
# Then the same cluster restarts without the preload, its postgresql.conf
# still naming the workers' settings (gridha.workers, gridha.database,
# gridha.worker_role, defined with PGC_POSTMASTER only when preloaded): a
# session's first gridha call logs no WARNING about them (issue 40; up to
# 1.2 every session logged 'invalid configuration parameter name
# "gridha.database"').
#
# Words: "the installed build's flags" are GRIDHA_TEST_HOOKS=1 when the
# preloaded server has the test build's gridha.test_probe_pause setting
# (then the specs that need the hooks run too) and GRIDHA_LOCK_CHECK=1 when
# it has gridha.lock_check, so that make sees the build it installed.
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with nothing set but the preload; make runs in the repository
# with PG_CONFIG (or the pg_config first in PATH). Run by `make test`
# (test/run.sh, part 012_installcheck_defaults) and by
# `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More tests => 5;

my $repo = gridha_repo();
my $work = PostgreSQL::Test::Utils::tempdir;
my $pg_config = $ENV{PG_CONFIG} // 'pg_config';

# PostgreSQL's defaults and the preload, nothing else that changes
# behaviour; the server's own messages from WARNING up, and not every
# statement, as the framework would log them: the statements of
# test/pgtap/21_lock_check.sql quote the lock-order checker's message,
# which test/run.sh's scan of the server logs looks for
my $node = PostgreSQL::Test::Cluster->new('defaults');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'gridha'
log_min_messages = warning
log_statement = none
});
$node->start;

my $mpt = $node->safe_psql('postgres', 'SHOW max_prepared_transactions');
is($mpt, '0', "the cluster keeps PostgreSQL's defaults: max_prepared_transactions is 0 (got '$mpt')");

# the installed build's flags, read from the server that loaded it
my %flag;
foreach my $row (split /\n/, $node->safe_psql('postgres', q{
	SELECT name FROM pg_settings WHERE name IN ('gridha.test_probe_pause', 'gridha.lock_check')}))
{
	$flag{$row} = 1;
}
my @flags = (
	'GRIDHA_TEST_HOOKS=' . ($flag{'gridha.test_probe_pause'} ? '1' : ''),
	'GRIDHA_LOCK_CHECK=' . ($flag{'gridha.lock_check'} ? '1' : ''));

# part($name, $dir, @vars): make installcheck with @vars (the other parts
# emptied) against the node, its output in $work/$dir; one test.
sub part
{
	my ($name, $dir, @vars) = @_;
	my $out = "$work/$dir";
	mkdir $out;
	my $what = "make installcheck, $name only, passes against it";
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	delete local $ENV{PGUSER};
	delete local $ENV{PGDATABASE};
	my $ok = IPC::Run::run(
		[
			'make', '-s', '-C', $repo, 'installcheck', 'TAP_TESTS=', "PG_CONFIG=$pg_config",
			@flags, "EXTRA_REGRESS_OPTS=--outputdir=$out", @vars
		],
		'<', \undef, '>', "$out/make.log", '2>&1');
	ok($ok, $what) and return;
	my @bad = grep { /not ok|FAILED|failed/ } split /\n/, slurp_file("$out/make.log");
	diag(join("\n", @bad[ 0 .. ($#bad < 39 ? $#bad : 39) ]));
	if (-f "$out/regression.diffs")
	{
		my @d = split /\n/, slurp_file("$out/regression.diffs");
		diag(join("\n", @d[ 0 .. ($#d < 59 ? $#d : 59) ]));
	}
}

SKIP:
{
	my $pgtap = `$pg_config --sharedir`;
	chomp $pgtap;
	$pgtap .= '/extension/pgtap.control';
	my $pg_prove = grep { -x "$_/pg_prove" } split /:/, $ENV{PATH};
	skip 'no pg_prove in PATH (libtap-parser-sourcehandler-pgtap-perl)', 1 unless $pg_prove;
	skip "no pgTAP ($pgtap is missing)", 1 unless -f $pgtap;
	part('pgTAP', 'pgtap', 'REGRESS=', 'ISOLATION=');
}
part('pg_regress', 'regress', 'ISOLATION=', 'PGTAP_TESTS=');
part('the isolation specs', 'isolation', 'REGRESS=', 'PGTAP_TESTS=');

# No preload, and the workers' settings in the configuration; only the log
# lines written from here on count
my $mark = log_size($node->logfile);
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = ''
gridha.workers = 2
gridha.database = 'postgres'
gridha.worker_role = 'gridha_nobody'
});
$node->restart;
$node->psql('postgres', 'CREATE EXTENSION IF NOT EXISTS gridha');
my ($np_out, $np_err) = ('', '');
my $np_ok = IPC::Run::run(
	[
		'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		'-c', 'SET client_min_messages = warning',
		'-c', 'SELECT count(*) FROM gridha.expiry_settings()',
		'-c', "SELECT current_setting('gridha.database')"
	],
	'<', \undef, '>', \$np_out, '2>', \$np_err);
my @np_warn = grep { /invalid configuration parameter/ } split /\n/, log_since($node->logfile, $mark);
ok($np_ok && !@np_warn && "$np_out$np_err" !~ /WARNING/,
	"without the preload, a session's first gridha call logs no WARNING about gridha.database")
  or diag("$np_out$np_err" . join("\n", @np_warn[ 0 .. ($#np_warn < 4 ? $#np_warn : 4) ]));

$node->stop;
