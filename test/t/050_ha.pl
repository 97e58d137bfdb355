# test/t/050_ha.pl: the short run of the fault harness (test/ha) on one
# server.
#
#   1. the run: a cluster of its own (gridha preloaded, three workers,
#      short expiries, durable commits); the driver (test/ha/driver.py,
#      see test/t/lib/GridhaHA.pm for the split) runs the test ledger,
#      four clients, the workers and the producer over 60 services, with
#      every fault kind once in its seeded order: kill9-off, kill9-on,
#      stop-client, term-worker, stop-worker, 503, stall (the driver's
#      own) and restart, which it asks of this test: stop('immediate') of
#      the cluster, one second down, start. The checker's verdicts
#      (test/ha/check.py) are tests, each prefixed "ha:"; and the driver's
#      own exit is one. A primary with a streaming standby, failover and
#      switchover are 051_failover.pl's
#   2. the checker can fail: on copies of that run's history, each with one
#      planted fault of the system (test/ha/plant.py: two arrivals swapped,
#      a duplicate POST with no fault near it, a write accepted from an
#      instance that did not hold the claim, a batch missing from the
#      database), the matching property must be reported "not ok"
#
# 14 tests, as the suite this replaces (test/suites/50_ha.sh). Bounded:
# the driver is stopped after HA_TIMEOUT seconds (600 by default); the
# cluster is the framework's (stopped at exit), and the driver is sent
# TERM at exit (it stops its clients and ledger). Run by `make test`
# (test/run.sh, part 050_ha) and by `make prove_installcheck`, as any user
# but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use GridhaTest;
use GridhaHA;

my $repo = gridha_repo();
plan skip_all => 'client/gridha-client is not built (run make)'
  unless -x "$repo/client/gridha-client";
plan tests => 14;

# make ha (test/ha/run.sh) runs this test longer: HA_DURATION seconds of
# random faults after the first round; HA_KINDS, HA_SEED
my $DURATION = $ENV{HA_DURATION} // 0;

my $work = PostgreSQL::Test::Utils::tempdir('ha');
my $run  = "$work/run";
my $NAME = 'ha';

my $node = PostgreSQL::Test::Cluster->new('node1');
$node->init;
$node->append_conf('postgresql.conf', ha_settings());
$node->start;

my $rc = ha_run(
	run     => $run,
	nodes   => [$node],
	primary => 0,
	timeout => $ENV{HA_TIMEOUT} // 600 + $DURATION,
	args    => [
		'--duration', $DURATION, $ENV{HA_SEED} ? ('--seed', $ENV{HA_SEED}) : (),
		$ENV{HA_KINDS} ? ('--kinds', $ENV{HA_KINDS}) : ()
	],
	faults  => { restart => sub { ha_restart($node) } });
$node->stop('fast', fail_ok => 1);
ha_gather_logs($run, $node);
ha_check($run, $NAME);
is($rc, 0, "$NAME: the harness run exits 0")
  or diag slurp_file("$run/driver.err");

if (-f "$run/ledger.log" && -f "$run/db_batch_events.csv")
{
	ha_expect_flag($run, $work, $NAME, 'order', 'per-service arrival order');
	ha_expect_flag($run, $work, $NAME, 'duplicate', 'every duplicate POST is explained');
	ha_expect_flag($run, $work, $NAME, 'stale', 'no two instances held a service at once');
	ha_expect_flag($run, $work, $NAME, 'lost', 'no batch lost');
}
else
{
	fail("$NAME checker: the run left a history to plant faults in");
}
