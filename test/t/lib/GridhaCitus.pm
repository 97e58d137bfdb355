# test/t/lib/GridhaCitus.pm: the set-up that gridha's Citus tests on
# PostgreSQL's TAP framework (test/t/031_citus.pl to
# test/t/035_citus_loop.pl) share: the PostgreSQL 15 with Citus they run
# on, or every test reported skipped with the reason; gridha built for it
# (the run's own build, or a copy of that tree in the test's directory
# with gridha built from this source tree and installed into it); a
# coordinator and two workers with citus and gridha preloaded, the workers
# added and gridha created on the coordinator; and a psql session that goes
# on after an error.
#
# It does not load GridhaTest.pm (none of those tests does: its signal handlers).
#
# A test loads it with
#	use FindBin;
#	use lib "$FindBin::RealBin/lib";
#	use GridhaCitus;
# and, after its plan:
#	my ($CFG, $CBIN, $CLIB) = citus_tree();
#	my $install_path = citus_build($CFG, $CBIN, $CLIB);
#	my @nodes = citus_cluster($install_path, 'test/t/NNN_x.pl', 'DB', 'SQL');

package GridhaCitus;

use strict;
use warnings FATAL => 'all';

use Cwd qw(abs_path realpath);
use Exporter 'import';
use File::Basename qw(dirname);
use File::Path qw(make_path);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(skip_rest slurp pg_config_value citus_tree citus_build
  citus_cluster citus_psql);

# the repository's root (test/t/lib is three levels down)
my $REPO = $ENV{GRIDHA_REPO} // abs_path(dirname(__FILE__) . '/../../..');

# skip_rest(WHY): every test of the file's plan not run yet, skipped; then
# the end.
sub skip_rest
{
	my ($why) = @_;
	my $left = Test::More->builder->expected_tests - Test::More->builder->current_test;
  SKIP:
	{
		skip "citus: $why", $left if $left > 0;
	}
	exit 0;
}

# slurp(FILE): its text, or '' when there is no such file.
sub slurp
{
	my ($f) = @_;
	return -f $f ? PostgreSQL::Test::Utils::slurp_file($f) : '';
}

# pg_config_value(PG_CONFIG, WHAT): what `PG_CONFIG --WHAT` prints.
sub pg_config_value
{
	my ($cfg, $what) = @_;
	my $v = `"$cfg" --$what`;
	chomp $v;
	return $v;
}

# citus_tree(): the PostgreSQL 15 with Citus that GRIDHA_CITUS_PG_CONFIG
# names (default: the system's): its pg_config, bindir and pkglibdir; when
# there is none, or it is not 15, or Citus is not installed in it, every
# test is skipped (skip_rest) with the reason.
sub citus_tree
{
	my $cfg = $ENV{GRIDHA_CITUS_PG_CONFIG} // '/usr/lib/postgresql/15/bin/pg_config';
	skip_rest("no PostgreSQL 15 at $cfg (GRIDHA_CITUS_PG_CONFIG): Citus exists for PostgreSQL 15 only")
	  unless -x $cfg;
	my ($major) = (`"$cfg" --version` =~ /^PostgreSQL (\d+)/m);
	$major //= '?';
	skip_rest("$cfg is PostgreSQL $major; Citus here exists for 15 only") unless $major eq '15';
	my $bin = pg_config_value($cfg, 'bindir');
	my $lib = pg_config_value($cfg, 'pkglibdir');
	skip_rest("Citus is not installed in $lib (test/install/citus.sh installs it, as root)")
	  unless -e "$lib/citus.so";
	return ($cfg, $bin, $lib);
}

# citus_build(CFG, CBIN, CLIB): one test, the build. When the run's
# programs (first in PATH) are that tree's and gridha is installed there,
# the run's own build (undef: the programs in PATH); otherwise a copy of
# the tree in the test's directory (no write into the tree itself), gridha
# built from this source tree (a copy: the run's own objects stay its
# major's) and installed into it: the copy's install path. A failed build
# skips the rest (skip_rest).
sub citus_build
{
	my ($CFG, $CBIN, $CLIB) = @_;
	my $RUN_BIN;
	foreach my $d (split /:/, $ENV{PATH})
	{
		if ($d ne '' && -x "$d/initdb")
		{
			$RUN_BIN = $d;
			last;
		}
	}
	if (defined $RUN_BIN && realpath($RUN_BIN) eq realpath($CBIN) && -e "$CLIB/gridha.so")
	{
		pass("build: gridha is the run's own build, installed into PostgreSQL 15 ($CFG)");
		return undef;
	}
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
	return dirname("$dest$CBIN");
}

# citus_cluster(INSTALL_PATH, FILE, DB, SQL, [PREFIX]): one test, the
# cluster. A coordinator (n0) and two workers (n1, n2) (PREFIX instead of
# n: a second cluster of the same test, r0, r1, r2) of INSTALL_PATH (undef: the
# programs in PATH), citus then gridha preloaded (their postgresql.conf
# names FILE); database DB with Citus on each; on the coordinator the
# workers added, CREATE EXTENSION gridha, then SQL (the test's own
# set-up, may be ''). The nodes, the coordinator first; a cluster that did
# not start skips the rest (skip_rest).
sub citus_cluster
{
	my ($install_path, $file, $db, $extra_sql, $prefix) = @_;
	$prefix //= 'n';
	my @nodes;
	foreach my $n (0 .. 2)
	{
		my $node = PostgreSQL::Test::Cluster->new("$prefix$n",
			defined $install_path ? (install_path => $install_path) : ());
		$node->init(extra => [ '--encoding=UTF8', '--locale=C.UTF-8' ]);
		$node->append_conf('postgresql.conf', qq{
# --- a node of $file ---
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

	my $setup = '';
	my $cluster_ok = 1;
	foreach my $node (@nodes)
	{
		my $rc = $node->psql('postgres', "CREATE DATABASE $db", stderr => \my $e1);
		$rc ||= $node->psql($db, 'CREATE EXTENSION citus', stderr => \my $e2);
		$setup .= ($e1 // '') . ($e2 // '');
		$cluster_ok &&= $rc == 0;
	}
	{
		my ($out, $err) = ('', '');
		my $rc = $nodes[0]->psql($db, sprintf(q{
SELECT citus_set_coordinator_host('localhost', %d);
SELECT citus_add_node('localhost', %d);
SELECT citus_add_node('localhost', %d);
CREATE EXTENSION gridha;
}, $nodes[0]->port, $nodes[1]->port, $nodes[2]->port) . $extra_sql,
			stdout => \$out, stderr => \$err, on_error_stop => 1);
		$setup .= $err;
		$cluster_ok &&= $rc == 0
		  && $nodes[0]->safe_psql($db, 'SELECT count(*) FROM citus_get_active_worker_nodes()') eq '2';
	}
	ok($cluster_ok,
		'cluster: a coordinator and two workers (PostgreSQL 15, citus then gridha preloaded), gridha created on the coordinator');
	if (!$cluster_ok)
	{
		diag($setup);
		skip_rest('the Citus cluster did not start');
	}
	return @nodes;
}

# citus_psql(NODE, DB, SQL, [extra psql params]): what psql prints, its
# errors after it (no stop at an error, as a session would go on).
sub citus_psql
{
	my ($node, $db, $sql, @extra) = @_;
	my ($out, $err) = ('', '');
	$node->psql($db, $sql, stdout => \$out, stderr => \$err,
		on_error_stop => 0, extra_params => [@extra]);
	return $out . ($err ne '' ? "\n$err" : '');
}

1;
