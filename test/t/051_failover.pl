# test/t/051_failover.pl: the short database-failover run of the fault
# harness (test/ha), on a primary and a synchronous hot standby.
#
#   1. the servers: node1, the primary, and node2, a hot standby made from
#      its backup (init_from_backup with streaming), gridha preloaded on
#      both with three workers each (workers start only once a server is
#      out of recovery); synchronous_standby_names on the primary names
#      the standby (a file of each node's own, sync.conf, so that a freshly
#      promoted node never waits for the node it replaces)
#   2. the run: the driver (test/ha/driver.py, see test/t/lib/GridhaHA.pm
#      for the split) runs the test ledger, four clients on a multi-host
#      connection string, the workers and the producer over 60 services,
#      with the fault kinds failover and switchover once each, in its
#      seeded order; it asks this test for each, and this test runs it:
#        failover    kill9 of the primary's postmaster, promote of the
#                    standby, the killed postmaster's orphans waited for,
#                    a CHECKPOINT on the new primary (pg_rewind reads the
#                    source's timeline from its control file), pg_rewind
#                    of the old primary (command_ok: one test), which comes
#                    back as a standby of the new primary, then the
#                    synchronous one
#        switchover  stop('fast') of the primary (it sends all of its WAL
#                    to the standby first), promote, pg_rewind and rejoin
#                    as above
#      The checker's verdicts (test/ha/check.py) are tests, each prefixed
#      "failover:": nothing lost, order at the ledger, no write accepted
#      from a non-holder, epochs never repeat across the promotions,
#      workers only on the primary, nothing the database acknowledged
#      lost, every duplicate explained; and the driver's own exit is one
#   3. from the run's record of the standby probe made just before the
#      failover: on the standby, SELECT * FROM gridha.next_batch(<uuid>)
#      failed with SQLSTATE 25006 "cannot execute next_batch() during
#      recovery", nothing was written (the instance exists on neither
#      node), and pg_stat_activity there showed no 'gridha worker'
#   4. the checker can fail: on copies of the run's history, each with one
#      planted fault (test/ha/plant.py: a take on the new timeline whose
#      epoch repeats an old one, a gridha worker seen on a node in
#      recovery, a hand-out a client saw that the surviving history lacks),
#      the matching property must be reported "not ok"
#
# 19 tests: the 17 of the suite this replaces (test/suites/51_failover.sh)
# and the two pg_rewind runs, each now a test of its own (command_ok).
# Bounded: the driver is stopped after HA_FAILOVER_TIMEOUT seconds (300 by
# default); every server is the framework's (stopped at exit), and the
# driver is sent TERM at exit (it stops its clients and ledger). Run by
# `make test` (test/run.sh, part 051_failover) and by `make
# prove_installcheck`, as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;
use GridhaTest;
use GridhaHA;

my $repo = gridha_repo();
plan skip_all => 'client/gridha-client is not built (run make)'
  unless -x "$repo/client/gridha-client";
# make ha HA_TOPOLOGY=replica (test/ha/run.sh) runs this test longer or
# otherwise: HA_DURATION seconds of random faults after the first round,
# HA_KINDS, HA_REPLICA=async, HA_FAILOVER_LAG, HA_SEED. The number of
# pg_rewind runs is then the schedule's: such a run has no plan.
my $DURATION = $ENV{HA_DURATION} // 0;
my $KINDS    = $ENV{HA_KINDS} || 'failover,switchover';
my $SYNC     = ($ENV{HA_REPLICA} // 'sync') ne 'async';
my $LAG      = $ENV{HA_FAILOVER_LAG} // 0;
my $DEFAULT  = !$DURATION && $KINDS eq 'failover,switchover';
plan tests => 19 if $DEFAULT;

my $work = PostgreSQL::Test::Utils::tempdir('failover');
my $run  = "$work/run";
my $NAME = 'failover';

# each node's own settings: its name as a standby (cluster_name is the
# walreceiver's application_name) and, in sync.conf, the synchronous
# standby it waits for (none on a standby)
sub write_sync
{
	my ($node, $standby) = @_;
	PostgreSQL::Test::Utils::append_to_file($node->data_dir . '/sync.conf.new',
		"synchronous_standby_names = '" . ($standby ? $standby->name : '') . "'\n");
	rename $node->data_dir . '/sync.conf.new', $node->data_dir . '/sync.conf'
	  or die "cannot write sync.conf: $!";
	return;
}

# replication($primary, $standby): the standby's state and sync_state on
# the primary ('|' when it does not stream)
sub replication
{
	my ($primary, $standby) = @_;
	my $name = $standby->name;
	return $primary->safe_psql('postgres', qq{
		SELECT coalesce(max(state), '') || '|' || coalesce(max(sync_state), '')
		  FROM pg_stat_replication WHERE application_name = '$name'});
}

sub wait_streaming
{
	my ($primary, $standby, $seconds) = @_;
	return wait_until($seconds, sub { replication($primary, $standby) =~ /^streaming\|/ });
}

# set_sync($primary, $standby): the primary waits for the standby, once
# it is the synchronous one
sub set_sync
{
	my ($primary, $standby) = @_;
	write_sync($primary, $standby);
	$primary->reload;
	wait_until(30, sub { replication($primary, $standby) eq 'streaming|sync' })
	  or die $standby->name . ' is not the synchronous standby of ' . $primary->name;
	return;
}

# --- the servers ------------------------------------------------------------
my $node1 = PostgreSQL::Test::Cluster->new('node1');
$node1->init(allows_streaming => 1);
$node1->append_conf('postgresql.conf', ha_settings() . q{
full_page_writes = on
wal_keep_size = '512MB'
max_wal_size = '512MB'
wal_sender_timeout = '10s'
wal_receiver_timeout = '10s'
wal_receiver_status_interval = '1s'
wal_retrieve_retry_interval = '1s'
cluster_name = 'node1'
include_if_exists = 'sync.conf'
});
write_sync($node1, undef);
$node1->start;
$node1->backup('base');

my $node2 = PostgreSQL::Test::Cluster->new('node2');
$node2->init_from_backup($node1, 'base', has_streaming => 1);
$node2->append_conf('postgresql.conf', "cluster_name = 'node2'\n");
write_sync($node2, undef);
$node2->start;
wait_streaming($node1, $node2, 60) or BAIL_OUT('node2 does not stream from node1');
set_sync($node1, $node2) if $SYNC;
note 'node1 primary on port ' . $node1->port . ', node2 ' . ($SYNC ? 'synchronous' : 'asynchronous')
  . ' standby on port ' . $node2->port;

my @nodes = ($node1, $node2);
my $pi = 0;

# change_primary($kind, $n, $announce): the failover or switchover; see
# the file's header
sub change_primary
{
	my ($kind, $n, $announce) = @_;
	my ($old, $new) = ($nodes[$pi], $nodes[ 1 - $pi ]);
	my %rec = (old_primary => $old->name, new_primary => $new->name);
	wait_streaming($old, $new, 60)
	  or die $new->name . ' does not stream before the ' . $kind;
	my ($pm) = split /\n/, slurp_file($old->data_dir . '/postmaster.pid');
	my @children = $kind eq 'failover' ? ha_child_pids($pm) : ();
	$rec{t} = Time::HiRes::time();
	if ($kind eq 'failover' && $LAG > 0)
	{
		# the standby lags (HA_FAILOVER_LAG): the primary's WAL sender
		# stops, then the primary's machine dies: every process at once
		my $name = $new->name;
		my $sender = $old->safe_psql('postgres',
			"SELECT pid FROM pg_stat_replication WHERE application_name = '$name'");
		kill 'STOP', $sender if $sender =~ /^\d+$/;
		$rec{lag} = $LAG;
		Time::HiRes::sleep($LAG);
		@children = ha_child_pids($pm);
		$rec{t} = Time::HiRes::time();
		$old->kill9;
		kill 'KILL', @children;
	}
	elsif ($kind eq 'failover')
	{
		$old->kill9;
	}
	else
	{
		$old->stop('fast');
	}
	$rec{down} = Time::HiRes::time();
	$new->promote;
	$new->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die $new->name . ' is still in recovery after promote';
	$pi = 1 - $pi;
	$rec{promoted} = Time::HiRes::time();
	$rec{tli} = $new->safe_psql('postgres', q{
		SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int}) + 0;
	$announce->({%rec});

	if ($kind eq 'failover')
	{
		$rec{orphans_killed} = ha_wait_gone(30, @children);
		wait_until(30, sub { !-d "/proc/$pm" })
		  or die "the killed postmaster $pm is still in the process table";
	}
	# the old primary back as a standby: pg_rewind copies the source's
	# configuration, so the old primary's own is kept and put back
	$new->safe_psql('postgres', 'CHECKPOINT');
	my $conf = slurp_file($old->data_dir . '/postgresql.conf');
	command_ok(
		[
			'pg_rewind', '--target-pgdata', $old->data_dir,
			'--source-server', $new->connstr('postgres')
		],
		"$NAME: after the $kind, pg_rewind brings the old primary ("
		  . $old->name . ') onto the new primary\'s timeline');
	# (command_ok returns nothing: its verdict is the test's last)
	(Test::More->builder->summary)[-1]
	  or die 'pg_rewind of ' . $old->name . ' failed';
	open my $fh, '>', $old->data_dir . '/postgresql.conf' or die $!;
	print $fh $conf;
	close $fh;
	write_sync($old, undef);
	$old->append_conf('postgresql.conf',
		"primary_conninfo = '" . $new->connstr . ' application_name=' . $old->name . "'\n");
	$old->set_standby_mode;
	$old->start;
	wait_streaming($new, $old, 90)
	  or die $old->name . ' does not stream from ' . $new->name . ' after pg_rewind';
	$rec{rejoin}   = 'rewind';
	$rec{rejoined} = Time::HiRes::time();
	if ($SYNC)
	{
		set_sync($new, $old);
		$rec{synced} = Time::HiRes::time();
	}
	delete $rec{$_} foreach qw(t down promoted tli);
	return \%rec;
}

# --- the run ----------------------------------------------------------------
my $started = time();
my $rc = ha_run(
	run     => $run,
	nodes   => \@nodes,
	primary => $pi,
	timeout => $ENV{HA_FAILOVER_TIMEOUT} // 300 + $DURATION,
	args    => [
		'--replica', $SYNC ? 'sync' : 'async', '--kinds', $KINDS, '--duration', $DURATION,
		'--failover-lag', $LAG, $ENV{HA_SEED} ? ('--seed', $ENV{HA_SEED}) : ()
	],
	faults => {
		failover   => sub { change_primary('failover', @_) },
		switchover => sub { change_primary('switchover', @_) },
		restart    => sub { ha_restart($nodes[$pi]) },
	});
# both servers stopped (the primary first), so that their logs are whole
$nodes[$pi]->stop('fast', fail_ok => 1);
$nodes[ 1 - $pi ]->stop('fast', fail_ok => 1);
ha_gather_logs($run, @nodes);
ha_check($run, $NAME);
note 'run time: ' . (time() - $started) . ' s';
is($rc, 0, "$NAME: the harness run exits 0")
  or diag slurp_file("$run/driver.err");

# --- the standby before the failover, as the driver probed it ---------------
my ($probe) = grep { ($_->{when} // '') eq 'before failover' }
  ha_read_jsonl("$run/standby.jsonl");
my @bad;
if (!$probe)
{
	push @bad, 'no probe before the failover';
}
else
{
	my $nb = $probe->{next_batch} // {};
	push @bad, "$probe->{node} was not in recovery"
	  unless $probe->{in_recovery};
	push @bad, 'next_batch answered ' . ($nb->{sqlstate} // 'nothing') . ' ' . ($nb->{message} // '')
	  unless ($nb->{sqlstate} // '') eq '25006'
	  && ($nb->{message} // '') eq 'cannot execute next_batch() during recovery';
	push @bad, 'rows of the probe on the two nodes: ' . encode_json($probe->{written} // [])
	  unless encode_json($probe->{written} // []) eq '[0,0]';
	push @bad, ($probe->{workers} // 'unknown') . ' gridha worker(s) in its pg_stat_activity'
	  unless defined $probe->{workers} && $probe->{workers} == 0;
}
ok(!@bad,
	"$NAME: before the failover the standby refused gridha.next_batch with 25006 "
	  . '"cannot execute next_batch() during recovery", wrote nothing and ran no gridha worker ('
	  . (@bad ? join('; ', @bad) : "standby $probe->{node}") . ')');

# --- the checker can fail ---------------------------------------------------
if (-f "$run/db_claim_events.csv" && -f "$run/nodes.jsonl")
{
	ha_expect_flag($run, $work, $NAME, 'epoch', 'epochs never repeat');
	ha_expect_flag($run, $work, $NAME, 'standby-worker', 'workers run only on the primary');
  SKIP:
	{
		skip 'with asynchronous replication the checker only counts the acknowledged writes lost', 1
		  unless $SYNC;
		ha_expect_flag($run, $work, $NAME, 'acked', 'nothing the database acknowledged was lost');
	}
}
else
{
	fail("$NAME checker: the run left a history to plant faults in");
}

done_testing() unless $DEFAULT;
