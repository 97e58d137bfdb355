# test/t/033_citus_suites.pl: the Citus mode's regression and isolation
# suites (issue 43, item 3; docs/testing.md, "The Citus suites") against
# the coordinator of a coordinator and two workers: pg_regress
# (--use-existing) runs test/citus/sql in the order of test/citus/schedule
# (setup, which calls gridha.citus_setup, first), then
# pg_isolation_regress runs test/citus/specs, both from the PostgreSQL 15
# tree the cluster runs on (its PGXS directory's test/regress/pg_regress
# and test/isolation/pg_isolation_regress). One test per regress test and
# per spec, named after it; a failure prints its part of
# regression.diffs.
#
# Citus exists for PostgreSQL 15 only: the tree, the build and the cluster
# are test/t/lib/GridhaCitus.pm's, as for 031_citus and 032_citus_mode;
# without Citus every test is reported skipped, with the reason.
#
# Runs on PostgreSQL's TAP framework. Run by `make test` (test/run.sh,
# part 033_citus_suites) and by `make prove_installcheck`, as any user but
# root.

use strict;
use warnings FATAL => 'all';

use File::Basename qw(dirname);
use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaCitus;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $REPO = $ENV{GRIDHA_REPO} // dirname(dirname($FindBin::RealBin));
my $DIR = "$REPO/test/citus";

# the regress tests in schedule order, the specs in name order
my @regress = map { /^test:\s*(\S+)/ ? $1 : () } split /\n/, slurp("$DIR/schedule");
my @specs = sort map { m{([^/]+)\.spec$} ? $1 : () } glob("$DIR/specs/*.spec");

# build, cluster, one per regress test and spec, no crash
plan tests => 2 + @regress + @specs + 1;

my ($CFG, $CBIN, $CLIB) = citus_tree();
my $install_path = citus_build($CFG, $CBIN, $CLIB);
my $bindir = defined $install_path ? "$install_path/bin" : $CBIN;
my @nodes = citus_cluster($install_path, 'test/t/033_citus_suites.pl', 'c33', '');
my $coord = $nodes[0];

# the test programs of the tree the cluster runs on: PGXS's directory
# holds src/makefiles/pgxs.mk and src/test/{regress,isolation}
my $pgxs = pg_config_value("$bindir/pg_config", 'pgxs');
my $testdir = dirname(dirname($pgxs)) . '/test';
my $user = $coord->safe_psql('c33', 'SELECT current_user');
my @common = ('--use-existing', '--host=' . $coord->host, '--port=' . $coord->port,
	"--user=$user", '--dbname=c33', "--inputdir=$DIR", "--bindir=$bindir");

# suite(NAME, PROGRAM, TESTS...): runs PROGRAM over TESTS; one test per
# TESTS, passed when its line says ok; a failed one prints its diffs
sub suite
{
	my ($name, $program, @tests) = @_;
	my $out = PostgreSQL::Test::Utils::tempdir("c33$name");
	if (!-x $program)
	{
		fail("$name $_: no $program") foreach @tests;
		return;
	}
	my ($stdout, $stderr) = ('', '');
	print "# Running: $program ... @tests\n";
	IPC::Run::run([ $program, @common, "--outputdir=$out", @tests ],
		'<', \undef, '>', \$stdout, '2>', \$stderr);
	my $diffs = slurp("$out/regression.diffs");
	foreach my $t (@tests)
	{
		# PostgreSQL 15: "test NAME ... ok 12 ms" or "... FAILED"
		my ($line) = grep { /^test\s+\Q$t\E\s+\.\.\.\s/ } split /\n/, $stdout;
		my $ok = defined $line && $line =~ /\.\.\.\s+ok\b/;
		ok($ok, "$name $t");
		next if $ok;
		diag($line // "$t did not run:\n$stdout\n$stderr");
		# this test's part of the diffs (each begins with its diff header)
		my ($part) = ($diffs =~ m{(^diff [^\n]*/\Q$t\E\.out[^\n]*\n.*?)(?=^diff |\z)}ms);
		diag($part // $diffs);
	}
}

suite('regress', "$testdir/regress/pg_regress", @regress);

# the specs run in the mode: setup laid it out, unless it failed
if ($coord->safe_psql('c33', q{SELECT to_regclass('gridha.bucket_claims') IS NULL}) eq 't')
{
	diag('the regress suite did not lay the mode out; gridha.citus_setup() here');
	$coord->safe_psql('c33', 'SELECT gridha.citus_setup()');
}
suite('isolation', "$testdir/isolation/pg_isolation_regress", @specs);

my $logs = join('', map { slurp($_->logfile) } @nodes);
my @crash = grep { /server process .* was terminated|PANIC/ } split /\n/, $logs;
ok(!@crash, 'no node crashed and no PANIC in the logs');
diag(join("\n", @crash)) if @crash;

$_->stop foreach @nodes;
