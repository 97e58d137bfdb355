# test/t/lib/GridhaHA.pm: the fault harness (test/ha) on PostgreSQL's TAP
# framework, shared by test/t/050_ha.pl and test/t/051_failover.pl.
#
# The split: the .pl owns the servers (PostgreSQL::Test::Cluster: init,
# start, stop, kill9, backup, init_from_backup, promote, pg_rewind, ports
# the framework picks); the Python driver (test/ha/driver.py) owns the
# workload (the test ledger, clients, workers, the producer) and the
# faults of instances, and keeps its seeded schedule. When the schedule
# reaches a fault that changes a server (restart, failover, switchover),
# the driver asks the .pl through a small file protocol (test/ha/nodes.py:
# request.N, then promoted.N and done.N) and waits; ha_run() serves those
# requests while the driver runs. So every fault still falls in the middle
# of the load, at the moment the schedule gives it, and every server
# command is the framework's, in the .pl's process. The checker
# (test/ha/check.py) reads the history the driver recorded; its verdicts
# become the .pl's tests.
#
# Why not the other split, the .pl running the server faults in sequence
# while the driver runs the load in the background: the driver interleaves
# the server faults with those of instances in one seeded order (HA_SEED
# replays a run), probes the standby just before each promotion, holds
# the producer across it with asynchronous replication and reconciles at
# the promotion; each fault's record (faults.jsonl) is written where the
# schedule is. Two schedules in two processes would lose the replay and
# need the same hand-shake anyway. The protocol is a file per step in
# the run directory, so it needs no port and leaves a trace.
#
# A test loads it with
#	use FindBin;
#	use lib "$FindBin::RealBin/lib";
#	use GridhaHA;

package GridhaHA;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use File::Basename qw(dirname);
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::RecursiveCopy;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use GridhaTest;

# A test stopped by a signal (prove's timeout, make test's, ^C) dies, so
# that the END blocks run: the driver's here (TERM: it stops its clients
# and ledger) and the framework's (its servers stopped).
$SIG{TERM} = $SIG{INT} = $SIG{HUP} = sub { die "stopped by signal $_[0]\n"; };

our @EXPORT = qw(ha_settings ha_write_json ha_read_jsonl ha_run ha_restart
  ha_gather_logs ha_check ha_expect_flag ha_child_pids ha_wait_gone);

# The servers' settings on every node besides the framework's own: durable
# commits (an immediate stop or a kill -9 must not lose an acknowledged
# enqueue or report), gridha preloaded with its workers and short
# expiries; the statements are not logged (the framework logs them all).
use constant HA_SOFT => 3;
use constant HA_HARD => 6;
our $WORKERS  = 3;
our $DATABASE = 'gridha_ha';

sub ha_settings
{
	return qq{
# --- gridha fault harness (test/t/lib/GridhaHA.pm) ---
shared_preload_libraries = 'gridha'
max_worker_processes = 24
synchronous_commit = on
max_connections = 200
shared_buffers = 32MB
log_statement = none
log_min_messages = warning
gridha.workers = $WORKERS
gridha.database = '$DATABASE'
gridha.naptime = 100
gridha.submit_timeout = 2000
gridha.monitor_interval = 250
gridha.soft_expiry = '@{[HA_SOFT]}s'
gridha.hard_expiry = '@{[HA_HARD]}s'
gridha.renew_interval = '1s'
};
}

# ha_write_json($path, $ref): $ref as JSON, written to a temporary name
# and renamed (the driver never reads half a file).
sub ha_write_json
{
	my ($path, $ref) = @_;
	my $tmp = dirname($path) . '/.tmp.' . $$;
	open my $fh, '>', $tmp or die "cannot write $tmp: $!";
	print $fh JSON::PP->new->canonical->encode($ref);
	close $fh or die "cannot write $tmp: $!";
	rename $tmp, $path or die "cannot rename $tmp to $path: $!";
	return;
}

# ha_read_jsonl($path): the JSON lines of a file (an empty list when it
# cannot be read).
sub ha_read_jsonl
{
	my ($path) = @_;
	open my $fh, '<', $path or return ();
	my @out;
	while (my $line = <$fh>)
	{
		next unless $line =~ /\S/;
		push @out, decode_json($line);
	}
	return @out;
}

# ha_child_pids($pid): the processes whose parent is $pid (from /proc; an
# empty list where there is no /proc).
sub ha_child_pids
{
	my ($ppid) = @_;
	my @out;
	return @out unless $ppid && opendir(my $dh, '/proc');
	foreach my $d (grep { /^\d+$/ } readdir $dh)
	{
		open my $fh, '<', "/proc/$d/stat" or next;
		my $stat = <$fh> // '';
		close $fh;
		my ($rest) = $stat =~ /\)\s+(.*)$/ or next;
		my @f = split /\s+/, $rest;
		push @out, $d + 0 if @f > 1 && $f[1] == $ppid;
	}
	closedir $dh;
	return @out;
}

# ha_wait_gone($seconds, @pids): wait for @pids to exit; kill -9 those
# still there (the orphaned children of a postmaster killed by kill9: a new
# server refuses to start while they hold its shared memory). A zombie
# counts as gone. Returns how many had to be killed.
sub ha_wait_gone
{
	my ($seconds, @pids) = @_;
	my $alive = sub {
		my ($pid) = @_;
		open my $fh, '<', "/proc/$pid/stat" or return kill(0, $pid) ? 1 : 0;
		my $stat = <$fh> // '';
		return $stat =~ /\)\s+Z/ ? 0 : 1;
	};
	wait_until($seconds, sub { !grep { $alive->($_) } @pids });
	my @left = grep { $alive->($_) } @pids;
	kill 'KILL', @left if @left;
	wait_until(10, sub { !grep { $alive->($_) } @left });
	return scalar @left;
}

# ha_restart($node): the fault restart: an immediate stop of the primary,
# one second down, then start. Returns the fault's times.
sub ha_restart
{
	my ($node) = @_;
	my %rec = (t => Time::HiRes::time(), node => $node->name);
	$node->stop('immediate');
	$rec{down} = Time::HiRes::time();
	sleep 1;
	$node->start;
	$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die $node->name . " is still in recovery after its restart";
	$rec{up} = Time::HiRes::time();
	return \%rec;
}

# ha_run(%o): the driver over the servers of $o{nodes} (framework nodes,
# $o{primary} the index of the primary), recording into $o{run}; its
# requests for faults served by $o{faults}{KIND}->($n, $announce), which
# returns the fault's record and may first call $announce->(\%promoted)
# (a failover or switchover, as soon as the standby is promoted).
# $o{args}: more driver arguments; $o{timeout}: seconds before the driver
# is stopped (TERM). Returns the driver's exit status (-1: stopped at the
# timeout).
my @drivers;

sub ha_run
{
	my (%o) = @_;
	my $run  = $o{run};
	my $ctl  = "$run/ctl";
	my $repo = gridha_repo();
	mkdir $run;
	mkdir $ctl;
	mkdir "$run/clients";
	ha_write_json("$run/nodes.json",
		{
			nodes => [
				map { { name => $_->name, host => $_->host, port => $_->port } }
				  @{ $o{nodes} }
			],
			primary => $o{primary}
		});
	my ($bindir) = grep { -x "$_/psql" } split /:/, $ENV{PATH};
	die "no psql in PATH" unless defined $bindir;
	my @cmd = (
		'python3', "$repo/test/ha/driver.py",
		'--out', $run, '--repo', $repo, '--bindir', $bindir,
		'--topology', 'framework', '--nodes-file', "$run/nodes.json",
		'--control-dir', $ctl, '--database', $DATABASE,
		'--services', 60, '--clients', 4, '--workers', $WORKERS,
		'--static-workers', $WORKERS, @{ $o{args} // [] });
	note "driver: @cmd";
	my $h = IPC::Run::start(\@cmd, '<', \undef, '>', "$run/driver.out",
		'2>', "$run/driver.err");
	push @drivers, $h;
	my $deadline = time() + $o{timeout};
	my $n = 0;
	my $rc;
	while (1)
	{
		my $req = "$ctl/request." . ($n + 1);
		if (-f $req)
		{
			$n++;
			my $r = decode_json(slurp_file($req));
			note "fault $n: $r->{kind}";
			my $announce =
			  sub { ha_write_json("$ctl/promoted.$n", $_[0]); };
			my $rec = eval {
				my $fn = $o{faults}{ $r->{kind} }
				  or die "no fault $r->{kind} here";
				$fn->($n, $announce);
			};
			if (!$rec)
			{
				my $err = $@ || 'no record';
				diag "fault $r->{kind}: $err";
				$rec = { error => "$err" };
			}
			ha_write_json("$ctl/done.$n", { %$rec, kind => $r->{kind} });
			next;
		}
		# (pump_nb reaps the driver once it has exited)
		eval { $h->pump_nb; };
		last unless $h->pumpable;
		if (time() > $deadline)
		{
			diag "the driver still runs after $o{timeout} s: stopped";
			$h->signal('TERM');
			$rc = -1;
			last;
		}
		usleep(100_000);
	}
	eval { $h->finish; };
	@drivers = grep { $_ != $h } @drivers;
	$rc //= ($h->full_result(0) // 0) >> 8;
	return $rc;
}

END
{
	local $?;
	foreach my $h (@drivers)
	{
		eval { $h->signal('TERM'); $h->finish; };
	}
	@drivers = ();
}

# ha_gather_logs($run, @nodes): every node's server log into the run
# directory, as postgres-NAME.log and all together as postgres.log (the
# checker reads it). The framework's log directory keeps them too, for
# the crash scan of make test.
sub ha_gather_logs
{
	my ($run, @nodes) = @_;
	open my $all, '>', "$run/postgres.log" or die "cannot write $run/postgres.log: $!";
	foreach my $node (@nodes)
	{
		my $text = -f $node->logfile ? slurp_file($node->logfile) : '';
		open my $one, '>', "$run/postgres-" . $node->name . ".log" or die $!;
		print $one $text;
		close $one;
		print $all $text;
	}
	close $all;
	return;
}

# ha_check($run, $name): the checker over the run: each of its verdicts
# ("ok - NAME: property (detail)") is one test here, and one more that
# fails when the checker stopped without judging (its exit status).
# Returns the number of tests.
sub ha_check
{
	my ($run, $name) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[
			'python3', gridha_repo() . '/test/ha/check.py',
			'--tap', '--hard-expiry', HA_HARD, '--name', $name, $run
		],
		'<', \undef, '>', \$out, '2>', \$err);
	my $rc = $? >> 8;
	my $n = 0;
	foreach my $line (split /\n/, $out)
	{
		if ($line =~ /^(not )?ok - (.*)$/)
		{
			ok(!defined $1, $2);
			$n++;
		}
		elsif ($line =~ /^(\||#|\()/)
		{
			note $line;
		}
	}
	diag $err if $err ne '';
	# check.py exits 1 when a verdict is "not ok", 2 when it could not
	# judge: a checker that stopped before its verdicts fails here too (a
	# run without a fixed plan would not miss them)
	if ($rc > 1 || ($rc == 1 && $out !~ /^not ok - /m))
	{
		fail("$name checker: judged the run to its end (exit $rc)");
		$n++;
	}
	return $n;
}

# ha_expect_flag($run, $work, $name, $kind, $property): on a copy of the
# run's history with the fault $kind planted (test/ha/plant.py), the
# checker must say "not ok - $name: $property" and exit non-zero.
sub ha_expect_flag
{
	my ($run, $work, $name, $kind, $prop) = @_;
	my $dir = "$work/planted-$kind";
	my $repo = gridha_repo();
	my $title = "$name checker: flags a planted $kind ($prop)";
	my ($out, $err) = ('', '');
	PostgreSQL::Test::RecursiveCopy::copypath($run, $dir);
	if (!IPC::Run::run([ 'python3', "$repo/test/ha/plant.py", $kind, $dir ],
			'<', \undef, '>', \$out, '2>', \$err))
	{
		fail("$name checker: could plant $kind");
		diag $err;
		return;
	}
	my $clean = IPC::Run::run(
		[
			'python3', "$repo/test/ha/check.py", '--tap', '--hard-expiry', HA_HARD,
			'--name', $name, $dir
		],
		'<', \undef, '>', \$out, '2>&1');
	my $flagged = !$clean && $out =~ /^not ok - \Q$name: $prop\E/m;
	ok($flagged, $title)
	  or diag join("\n", grep { /^(not )?ok/ } split /\n/, $out);
	return;
}

1;
