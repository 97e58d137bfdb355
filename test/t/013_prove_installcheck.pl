# test/t/013_prove_installcheck.pl: `make prove_installcheck`, the route a
# PostgreSQL hacker takes to these tests, works against the installation
# PG_CONFIG names, whether or not it was configured with
# --enable-tap-tests (issue 42, item 3).
#
# A tree built without it (/opt/pg17 here) has a PGXS whose
# prove_installcheck only says "TAP tests not enabled" and exits 0, having
# run nothing; the Makefile then runs prove itself with the framework
# PG_TEST_PERL names (PGXS's own, else Debian's postgresql-client-NN's). The
# test runs the Makefile's prove_installcheck, in a directory of its own
# (PGXS's VPATH build: make -f the repository's Makefile, so that the
# recipe's tmp_check is that directory's, not the repository's, which may
# be this very run's), on a probe file written here: it loads
# PostgreSQL::Test::Cluster, finds the installation's postgres first in
# PATH, and starts and queries a cluster. Then a PG_TEST_PERL without the
# framework: make stops, naming the variable, and runs nothing.
#
# Runs on PostgreSQL's TAP framework; make runs with PG_CONFIG (or the
# pg_config first in PATH). Run by `make test` (test/run.sh, part
# 013_prove_installcheck) and by `make prove_installcheck` as any user but
# root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More tests => 2;

my $repo = gridha_repo();
my $work = PostgreSQL::Test::Utils::tempdir;
my $pg_config = $ENV{PG_CONFIG} // 'pg_config';
my $bindir = `$pg_config --bindir`;
chomp $bindir;

mkdir "$work/t";
open(my $fh, '>', "$work/t/probe.pl") or die "$work/t/probe.pl: $!";
print $fh <<'EOF';
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More tests => 2;
my ($first) = grep { -x "$_/postgres" } split /:/, $ENV{PATH};
is($first, $ENV{PROBE_BINDIR}, 'the installation\'s postgres is first in PATH');
my $node = PostgreSQL::Test::Cluster->new('probe');
$node->init;
$node->start;
is($node->safe_psql('postgres', 'SELECT 6 * 7'), '42', 'a cluster of the framework answers');
$node->stop;
EOF
close $fh;

# prove_installcheck(@vars): the Makefile's prove_installcheck on the probe,
# in $work; (exit status true, output)
sub prove_installcheck
{
	my @vars = @_;
	my $out = '';
	# the probe's make is not the one running this file (when that is
	# make prove_installcheck): its own variables only
	delete local $ENV{MAKEFLAGS};
	delete local $ENV{MAKELEVEL};
	delete local $ENV{MFLAGS};
	local $ENV{PROBE_BINDIR} = $bindir;
	my $ok = IPC::Run::run(
		[
			'make', '-C', $work, '-f', "$repo/Makefile", 'prove_installcheck',
			"PG_CONFIG=$pg_config", "PROVE_TESTS=$work/t/probe.pl", @vars
		],
		'<', \undef, '>', \$out, '2>&1');
	return ($ok, $out);
}

my ($ok, $out) = prove_installcheck();
ok($ok && $out =~ /^Files=1, Tests=2,/m && $out =~ /^Result: PASS$/m,
	"make prove_installcheck runs a file on PostgreSQL's TAP framework with $bindir first in PATH")
  or diag($out);

($ok, $out) = prove_installcheck("PG_TEST_PERL=$work/none");
ok(!$ok && $out =~ /no PostgreSQL\/Test\/Cluster\.pm in PG_TEST_PERL/ && $out !~ /probe\.pl \.\./,
	'with a PG_TEST_PERL that has no framework, make prove_installcheck stops, naming it, and runs nothing')
  or diag($out);
