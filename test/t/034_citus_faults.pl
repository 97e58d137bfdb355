# test/t/034_citus_faults.pl: the fault harness's Citus topology (issue
# 43; docs/citus.md, "Faults"; docs/testing.md, "Fault harness"): gridha's
# Citus mode on a coordinator and two workers, under load, through faults
# of the cluster itself, then a checker over the recorded history.
#
# Citus exists for PostgreSQL 15 only: the tree, the build and the cluster
# are test/t/lib/GridhaCitus.pm's (as 032_citus_mode; without Citus every
# test is reported skipped, with the reason).
#
#   setup     gridha.citus_setup(64); every node with durable commits
#             (synchronous_commit on: a killed node must not lose what it
#             acknowledged)
#   load      services svc01..svc60; a producer (test/ha/citus_client.py)
#             enqueues through gridha.bucket_enqueue, several services of
#             different buckets in one transaction (one statement, which
#             Citus runs on the coordinator: a transaction over several
#             buckets' shards, two-phase when both workers are written),
#             batch <service>-<k> with the service's own k in the payload;
#             three instances (the same program) acquire free buckets
#             (several in one transaction, up to a quarter of the buckets
#             each), take over buckets whose lease (5 s) ran out, renew
#             what they hold, and run the cycle per bucket
#             (bucket_next_batch, bucket_report_submission,
#             bucket_report_status); a fourth instance (ci) through the
#             contract calls, gridha.next_batch, gridha.report_submission,
#             gridha.report_status, which in the mode run a pass over the
#             buckets on the coordinator (5 s lease: gridha.hard_expiry);
#             every call and its answer, refused or lost ones included, go
#             to their logs
#   faults    in this order, each once, while the load runs (pause,
#             coordinator, 2pc commit, 2pc abort, move, rebalance, worker):
#             pause     one instance stops right after a hand-out (no
#                       renewal, no call) until the others took over every
#                       bucket it held, then tries its late reports
#             move      citus_move_shard_placement of the busiest bucket's
#                       shard to the other worker and back (block_writes)
#             rebalance four shard groups moved from one worker to the
#                       other (an imbalance), then citus_rebalance_start,
#                       waited for (citus_rebalance_wait)
#             worker    kill -9 of a worker's postmaster, then start
#             coordinator  an immediate stop of the coordinator while a
#                       statement over several buckets runs there (seen in
#                       pg_stat_activity: ci's next_batch first), then
#                       start; the prepared transactions left on the
#                       workers are counted, then resolved by
#                       recover_prepared_transactions()
#             2pc       the coordinator killed (-9) inside the two-phase
#                       commit of the test's own enqueue into four buckets
#                       (two on each worker), held there by gdb: after the
#                       coordinator's commit record, before COMMIT PREPARED
#                       (commit), or after the workers' PREPARE, before the
#                       coordinator's commit (abort); started again, then
#                       recover_prepared_transactions(): the first's rows
#                       in every bucket, none of the second's (skipped when
#                       gdb is missing or cannot attach)
#   drain     the producer stops, the instances stop (releasing what they
#             hold), a fresh instance serves what is left (bounded)
#   checks    test/ha/citus_check.py over the logs, the test's epoch
#             samples and the batches at the end: 0 lost, 0 out of order,
#             0 stale writes accepted, every late report refused, no epoch
#             given twice or gone down; here: the coordinator's shells
#             empty, no prepared transaction on any node, no crash
#
# 23 tests. Bounded: every wait has its bound; the clients stop by
# themselves (a stop file, then at most --max-seconds) and are killed at
# the end. Run by `make test` (test/run.sh, part 034_citus_faults) and by
# `make prove_installcheck`, as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaCitus;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $NTESTS = 23;
my $NSERVICES = 60;
my $LEASE = 5;
my $DB = 'c34';
my $REPO = "$FindBin::RealBin/../..";
my @IDS = map { sprintf('%08d-0000-4000-8000-000000000034', $_) } 1 .. 5;
my @NAMES = qw(i1 i2 i3 drain ci);

plan tests => $NTESTS;

my ($CFG, $CBIN, $CLIB) = citus_tree();
my $install_path = citus_build($CFG, $CBIN, $CLIB);
my $PSQL = defined $install_path ? "$install_path/bin/psql" : 'psql';
my @nodes = citus_cluster($install_path, 'test/t/034_citus_faults.pl', $DB, '');
my $coord = $nodes[0];
my $t_start = time;

# ask(NODE, SQL): the answer (unaligned, tuples only), or undef on an error
# or after 120 s
sub ask
{
	my ($node, $sql, $timeout) = @_;
	my ($out, $err, $to) = ('', '', 0);
	my $rc = $node->psql($DB, $sql, stdout => \$out, stderr => \$err,
		timeout => $timeout // 120, timed_out => \$to);
	return undef if $rc != 0 || $to;
	return $out;
}

# ---------------------------------------------------------------------------
# setup

foreach my $n (@nodes)
{
	$n->safe_psql($DB, 'ALTER SYSTEM SET synchronous_commit = on');
	$n->reload;
}
my $setup = ask($coord, 'SELECT gridha.citus_setup(64)') // '';
my $durable = join(',', map { ask($_, 'SHOW synchronous_commit') // '?' } @nodes);
diag("setup: $setup; synchronous_commit on the nodes: $durable");
ok($setup eq '64' && $durable eq 'on,on,on',
	'setup: 64 buckets laid out; every node commits durably (synchronous_commit on)');

my @services = map { sprintf('svc%02d', $_) } 1 .. $NSERVICES;
my %bucket_of = map { split /\|/ } split /\n/, $coord->safe_psql($DB,
	join(' UNION ALL ', map { "SELECT '$_' || '|' || gridha.bucket_of('$_', 64)" } @services));
my %per_bucket;
$per_bucket{ $bucket_of{$_} }++ foreach @services;
my @buckets = sort { $a <=> $b } keys %per_bucket;
my ($busy) = sort { $per_bucket{$b} <=> $per_bucket{$a} || $a <=> $b } @buckets;
# the per-bucket instances leave about a quarter of the buckets to the
# instance of the contract calls
my $share = int((@buckets + 3) / 4);
diag(sprintf('%d services in %d buckets (busiest %d: %d services); each per-bucket instance takes up to %d free buckets',
		$NSERVICES, scalar @buckets, $busy, $per_bucket{$busy}, $share));

# the services of the two-phase commit faults: four, of four of those
# buckets, two on each worker (the producer does not enqueue into them)
my %on_port = map { split /\|/ } split /\n/, $coord->safe_psql($DB, sprintf(q{
SELECT b || '|' || p.nodeport FROM unnest(ARRAY[%s]) b
  JOIN pg_dist_shard_placement p ON p.shardid = get_shard_id_for_distribution_column('gridha.bucket_batches', b)},
		join(',', @buckets)));
my @tpc;    # [service, bucket]
{
	my %cand = map { split /\|/ } split /\n/, $coord->safe_psql($DB,
		join(' UNION ALL ', map { sprintf(q{SELECT 'tpc%02d|' || gridha.bucket_of('tpc%02d', 64)}, $_, $_) } 1 .. 99));
	my %used;
	foreach my $port ($nodes[1]->port, $nodes[2]->port)
	{
		my $n = 0;
		foreach my $s (sort keys %cand)
		{
			my $b = $cand{$s};
			next unless defined $on_port{$b} && $on_port{$b} == $port && !$used{$b};
			$used{$b} = 1;
			push @tpc, [ $s, $b ];
			last if ++$n == 2;
		}
	}
}
diag('two-phase commit faults: services ' . join(', ', map { "$_->[0] (bucket $_->[1], port $on_port{$_->[1]})" } @tpc));

# what gridha's own tables hold after the setup (on the coordinator)
my $LOCAL_SQL = q{SELECT string_agg(c.relname || ':' || (xpath('/row/n/text()',
    query_to_xml(format('SELECT count(*) AS n FROM gridha.%I', c.relname), false, true, '')))[1]::text, ','
    ORDER BY c.relname)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'gridha' AND c.relkind = 'r'
   AND c.oid NOT IN (SELECT logicalrelid FROM pg_dist_partition)};
my $local_before = $coord->safe_psql($DB, $LOCAL_SQL);

# ---------------------------------------------------------------------------
# the run directory, the clients

# (kept with the test's logs: tmp_check/c34run)
my $run = "$PostgreSQL::Test::Utils::tmp_check/c34run";
mkdir $run;
my %faults;    # kind -> what happened
my @fault_log;

sub fault
{
	my ($kind, %what) = @_;
	my @t = gmtime(time);
	$what{ended_at} = sprintf('%02d:%02d:%02d UTC', @t[ 2, 1, 0 ]);
	push @{ $faults{$kind} }, \%what;
	push @fault_log, "$kind: " . join(', ', map { "$_ $what{$_}" } sort keys %what);
	note("fault $kind");
}

# sample(): every bucket's epoch now, for the checker (skipped when the
# coordinator does not answer)
sub sample
{
	my $v = ask($coord, q{SELECT string_agg(bucket || ':' || epoch, ',' ORDER BY bucket) FROM gridha.bucket_claims}, 30);
	return unless defined $v && $v ne '';
	my %e = map { split /:/ } split /,/, $v;
	open my $fh, '>>', "$run/samples.jsonl" or die;
	print $fh encode_json({ t => time, epochs => \%e }) . "\n";
	close $fh;
}

{
	open my $fh, '>', "$run/ids.json" or die;
	print $fh encode_json({ map { $NAMES[$_] => $IDS[$_] } 0 .. 4 });
	close $fh;
}

my @clients;
sub client
{
	my ($name, @args) = @_;
	my $h = IPC::Run::start(
		[ 'python3', "$REPO/test/ha/citus_client.py", '--psql', $PSQL, '--conn', $coord->connstr($DB),
		  '--name', $name, '--log', "$run/$name.log", @args ],
		'<', \undef, '>', "$run/$name.out", '2>', "$run/$name.err");
	push @clients, $h;
	return $h;
}

END
{
	foreach my $h (@clients)
	{
		eval { $h->kill_kill(grace => 2) };
	}
}

sample();
my $services_arg = join(',', map { "$_:$bucket_of{$_}" } @services);
my $services_all = join(',', $services_arg, map { "$_->[0]:$_->[1]" } @tpc);
client('producer', '--mode', 'producer', '--services', $services_arg, '--per-service', 12,
	'--per-txn', 5, '--pace', 0.8, '--stop-file', "$run/stop-producer", '--seed', 34);
my @inst;
foreach my $i (0 .. 2)
{
	push @inst, client($NAMES[$i], '--mode', 'instance', '--instance-id', $IDS[$i],
		'--buckets', join(',', @buckets), '--share', $share, '--lease', $LEASE,
		'--stop-file', "$run/stop-instances", '--pause-file', "$run/pause-$NAMES[$i]",
		'--seed', 340 + $i, '--max-seconds', 600);
}
# the instance of the contract calls (gridha.next_batch and the reports,
# each a pass over the buckets on the coordinator)
push @inst, client('ci', '--mode', 'contract', '--instance-id', $IDS[4], '--services', $services_all,
	'--lease', $LEASE, '--stop-file', "$run/stop-instances", '--max-seconds', 600);

# wait_until(SECONDS, SUB): SUB's true answer, or undef when the time ran out
sub wait_until
{
	my ($secs, $sub) = @_;
	my $end = time + $secs;
	while (time < $end)
	{
		my $r = $sub->();
		return $r if $r;
		sample();
		usleep(300_000);
	}
	return undef;
}

sub holders
{
	return ask($coord, sprintf(q{SELECT count(DISTINCT holder) FROM gridha.bucket_claims WHERE bucket IN (%s)},
			join(',', @buckets)), 30) // 0;
}
my $started = wait_until(60, sub { holders() >= 3 });
diag('the instances hold buckets: ' . ($started ? 'yes' : 'no') . ' (' . holders() . ' holders)');
sleep 3;

# ---------------------------------------------------------------------------
# pause: i3 stops right after a hand-out until the others took every bucket
# it held, then reports (late)

my $victim = $IDS[2];
{
	my $held = ask($coord, "SELECT count(*) FROM gridha.bucket_claims WHERE holder = '$victim'") // '?';
	open my $fh, '>', "$run/pause-i3" or die;
	close $fh;
	my $paused = wait_until(60, sub { slurp("$run/i3.log") =~ /"kind": "pause"/ });
	my $t0 = time;
	my $taken = $paused && wait_until(60, sub {
		(ask($coord, "SELECT count(*) FROM gridha.bucket_claims WHERE holder = '$victim'") // 1) eq '0' });
	my $gone = sprintf('%.1f', time - $t0);
	unlink "$run/pause-i3";
	my $resumed = wait_until(30, sub { slurp("$run/i3.log") =~ /"kind": "resume"/ });
	fault('pause', held => $held, paused => $paused ? 1 : 0, taken_over_in_s => $gone,
		all_taken => $taken ? 1 : 0, resumed => $resumed ? 1 : 0);
	diag("pause: i3 held $held buckets, paused: " . ($paused ? 1 : 0) . ", all taken over by the others after $gone s: "
		  . ($taken ? 1 : 0) . ', resumed: ' . ($resumed ? 1 : 0));
	ok($paused && $taken && $resumed,
		'pause: an instance stopped right after a hand-out (no renewal), the others took over every bucket it held, then it went on');
}

# ---------------------------------------------------------------------------
# coordinator: an immediate stop while a statement over several buckets runs

{
	my ($so, $se, $sto) = ('', '', 0);
	$coord->psql($DB, q{DO $$
DECLARE q text;
BEGIN
    FOR i IN 1 .. 600 LOOP
        PERFORM pg_stat_clear_snapshot();
        -- the contract instance's next_batch (a pass over the buckets) first,
        -- after 300 rounds a multi-bucket enqueue or acquisition too
        SELECT query INTO q FROM pg_stat_activity
         WHERE state = 'active' AND pid <> pg_backend_pid()
           AND (query LIKE '%gridha.next_batch(%'
                OR (i > 300 AND (query LIKE 'SELECT ARRAY[gridha.bucket_enqueue%'
                                 OR query LIKE 'SELECT ARRAY[gridha.bucket_acquire%')))
         LIMIT 1;
        EXIT WHEN q IS NOT NULL;
        PERFORM pg_sleep(0.02);
    END LOOP;
    RAISE NOTICE 'seen: %', CASE WHEN q LIKE '%gridha.next_batch(%' THEN 'gridha.next_batch'
                                 ELSE left(coalesce(q, '(none)'), 60) END;
END
$$}, stdout => \$so, stderr => \$se, timeout => 60, timed_out => \$sto);
	my $seen = $se =~ /seen: (gridha\.next_batch|SELECT ARRAY\[gridha\.bucket_\w+)/ ? $1 : undef;
	my ($o, $e) = ('', '');
	my $t0 = time;
	$coord->stop('immediate');
	my $prep_sql = 'SELECT count(*) FROM pg_prepared_xacts';
	my $prepared_left = join('/', map { ask($_, $prep_sql) // '?' } @nodes[ 1, 2 ]);
	sleep 1;
	$coord->start;
	my $rec = ask($coord, 'SELECT recover_prepared_transactions()', 120);
	my $prepared_after = join('/', map { ask($_, $prep_sql) // '?' } @nodes);
	fault('coordinator', active => defined $seen ? 1 : 0, prepared_on_workers => $prepared_left,
		recovered => $rec // '?', prepared_after => $prepared_after);
	diag(sprintf('coordinator: a statement over several buckets was running: %s; stopped (immediate), started after %.1f s; '
			  . 'prepared transactions left on the workers: %s; recover_prepared_transactions(): %s; then on every node: %s',
			  $seen // 'no', time - $t0, $prepared_left, $rec // 'failed', $prepared_after));
	ok(defined $seen && defined $rec && $coord->safe_psql($DB, 'SELECT 1') eq '1',
		'coordinator: stopped (immediate) while a statement over several buckets ran there, started again; its prepared transactions resolved by recover_prepared_transactions()');
}

# ---------------------------------------------------------------------------
# 2pc: the coordinator killed inside the two-phase commit, deterministically.
# The test's own session enqueues into the four tpc services (buckets on
# both workers: a two-phase commit) while gdb, attached to that session's
# backend, holds it at a breakpoint in Citus: at
# CoordinatedRemoteTransactionsCommit (commit: the workers PREPAREd, the
# coordinator's commit record, its pg_dist_transaction rows included,
# written, COMMIT PREPARED not sent), or on the return from
# CoordinatedRemoteTransactionsPrepare (abort: the workers PREPAREd, the
# coordinator's transaction not committed). There gdb kills the
# coordinator's postmaster (-9) and then the held backend; the coordinator
# is started again and Citus's recovery (recover_prepared_transactions(),
# called by the test: the maintenance daemon's own recovery is off,
# citus.recover_2pc_interval = -1, for these two faults) must commit the
# first transaction's prepared parts and roll back the second's. Without
# gdb, or when gdb cannot attach (ptrace refused), these 6 tests are
# skipped.

my $GDB = $ENV{GRIDHA_GDB} // '/usr/bin/gdb';    # another gdb, or one that cannot attach, for the skip
# gdb_probe(): undef when gdb is there, else why not (whether it can attach
# shows at the first attach)
sub gdb_probe
{
	return -x $GDB ? undef : "no $GDB (the Debian package gdb)";
}

sub tpc_fault
{
	my ($variant, $k) = @_;
	my @items = map { { service => $_->[0], bucket => $_->[1], k => $k, batch => sprintf('%s-%05d', $_->[0], $k) } } @tpc;
	my %r = (variant => $variant, of => scalar @items, rows => 'not read');
	my ($in, $out, $err) = ('', '', '');
	my $ps = IPC::Run::start([ $PSQL, '-X', '-q', '-A', '-t', '-d', $coord->connstr($DB) ],
		'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(180));
	$in .= "SET application_name = 'c34-tpc';\nSELECT 'pid:' || pg_backend_pid();\n";
	my $end = time + 30;
	eval { $ps->pump while time < $end && $out !~ /pid:(\d+)/ };
	my ($pid) = $out =~ /pid:(\d+)/;
	open my $pf, '<', $coord->data_dir . '/postmaster.pid' or die;
	my $postmaster = <$pf>;
	close $pf;
	chomp $postmaster;
	# the coordinator's postmaster and every process of it killed (-9) at
	# once, as when its machine dies (with the postmaster alone killed, an
	# orphaned backend inside a subtransaction of a multi-bucket call
	# errored again in its abort, Citus's "postmaster was shut down", and
	# ended in PANIC: ERRORDATA_STACK_SIZE exceeded)
	open my $kf, '>', "$run/kill-node.sh" or die;
	print $kf q{pm=$1
kids=
for f in /proc/[0-9]*/status; do
	case $(sed -n 's/^PPid:[[:space:]]*//p' "$f" 2>/dev/null) in
		"$pm") kids="$kids ${f#/proc/}" ;;
	esac
done
kill -9 "$pm" $(printf '%s\n' $kids | sed 's,/status$,,')
};
	close $kf;
	my $ready = "$run/gdb-ready-$variant";
	my $hit = "$run/gdb-hit-$variant";
	my $cmds = "$run/gdb-$variant.cmd";
	open my $cf, '>', $cmds or die;
	print $cf join("\n",
		'set pagination off', 'set confirm off',
		'handle all nostop noprint pass', 'handle SIGINT nostop noprint pass',
		($variant eq 'commit' ? 'break CoordinatedRemoteTransactionsCommit' : 'break CoordinatedRemoteTransactionsPrepare'),
		'info proc',    # fails when not attached: the rest of the file is not run
		"shell touch $ready",
		'continue',
		($variant eq 'commit' ? () : ('finish')),
		'if $_isvoid($_exitcode)',
		"  shell touch $hit",
		"  shell sh $run/kill-node.sh $postmaster",
		'  kill',
		'end', '');
	close $cf;
	my ($gout, $gerr) = ('', '');
	my $g = IPC::Run::start([ 'timeout', '90', $GDB, '-q', '-nx', '-batch', '-p', $pid, '-x', $cmds ],
		'<', \undef, '>', \$gout, '2>&1');
	$end = time + 60;
	while (time < $end && !-e $ready && $g->pumpable)
	{
		$g->pump_nb;
		usleep(100_000);
	}
	if (!-e $ready)
	{
		eval { $g->finish };
		eval { $ps->kill_kill(grace => 1) };
		$r{attach} = ($gout =~ /ptrace|Operation not permitted|Could not attach/i) ? 'refused' : 'failed';
		$r{gdb} = substr($gout, -400);
		return \%r;
	}
	$r{attach} = 'ok';
	my $t0 = time;
	$in .= 'SELECT ARRAY[' . join(', ', map {
		sprintf(q{gridha.bucket_enqueue(%d, '%s', '%s', convert_to('%s:%d', 'UTF8'))},
			$_->{bucket}, $_->{service}, $_->{batch}, $_->{service}, $_->{k}) } @items) . "]::text;\n";
	while ($g->pumpable)
	{
		eval { $ps->pump_nb };
		$g->pump_nb;
		usleep(50_000);
	}
	eval { $g->finish };    # gdb ends: the process killed, or its 90 s
	my $t1 = time;
	$r{hit} = -e $hit ? 1 : 0;
	$r{breakpoint} = $gout =~ /Breakpoint 1, .*CoordinatedRemoteTransactions(Commit|Prepare)/ ? 1 : 0;
	eval { $ps->finish };
	eval { $ps->kill_kill(grace => 1) };
	# the history for the checker: an enqueue whose answer was lost
	open my $lf, '>>', "$run/tpc.log" or die;
	print $lf encode_json({ who => 'tpc', kind => 'enqueue', t0 => $t0, t1 => $t1, outcome => 'unknown',
			value => undef, sqlstate => undef, message => "coordinator killed inside the two-phase commit ($variant)",
			sent => JSON::PP::true, items => \@items }) . "\n";
	close $lf;
	# the coordinator is down: the workers' prepared transactions of that
	# backend (Citus names them citus_<group>_<pid>_<transaction>_<connection>)
	my $mine = "gid LIKE 'citus\\_%\\_${pid}\\_%'";
	$r{prepared} = join('/', map { ask($_, "SELECT count(*) FROM pg_prepared_xacts WHERE $mine", 30) // '?' } @nodes[ 1, 2 ]);
	# the postmaster gone (or a zombie not yet reaped), within 10 s
	my $gone = sub {
		my $st = slurp("/proc/$postmaster/stat");
		return !kill(0, $postmaster) || $st =~ /^\d+ \(.*\) Z /;
	};
	$end = time + 10;
	usleep(100_000) while !$gone->() && time < $end;
	$r{postmaster_gone} = $gone->() ? 1 : 0;
	my $up = 0;
	for my $i (1 .. 30)
	{
		# killed behind the node's back (as its kill9 does); again before
		# each try, as a failed start reads the pid file (the old
		# postmaster's, while its process is not reaped) into it
		$coord->{_pid} = undef;
		if ($coord->start(fail_ok => 1)) { $up = 1; last; }
		sleep 1;
	}
	$r{up} = $up;
	$r{dist_transaction} = ask($coord, "SELECT count(*) FROM pg_dist_transaction WHERE $mine", 60) // '?';
	$r{recovered} = ask($coord, 'SELECT recover_prepared_transactions()', 120) // '?';
	$r{prepared_after} = join('/', map { ask($_, "SELECT count(*) FROM pg_prepared_xacts WHERE $mine", 30) // '?' } @nodes[ 1, 2 ]);
	$r{rows} = ask($coord, sprintf(q{SELECT count(DISTINCT bucket) FROM gridha.bucket_batches WHERE batch_id IN (%s)},
			join(',', map { "'$_->{batch}'" } @items)), 60) // '?';
	$r{pid} = $pid;
	return \%r;
}

{
	$coord->safe_psql($DB, 'ALTER SYSTEM SET citus.recover_2pc_interval = -1');
	$coord->reload;
	my @res;
	my $why = gdb_probe();
	foreach my $v ([ 'commit', 1 ], [ 'abort', 2 ])
	{
		last if defined $why;
		my $r = tpc_fault(@$v);
		if ($r->{attach} eq 'refused')
		{
			$why = "gdb could not attach to the backend: $r->{gdb}";
			last;
		}
		push @res, $r;
		fault("2pc-$v->[0]", map { $_ => $r->{$_} } grep { $_ ne 'gdb' } sort keys %$r);
		diag(sprintf('2pc %s: gdb attached to backend %s: %s, breakpoint hit: %s; coordinator killed (-9, postmaster gone: %s), '
				  . 'started: %s; prepared transactions of that backend on the workers: %s; its pg_dist_transaction rows: %s; '
				  . 'recover_prepared_transactions(): %s; then left: %s; buckets with its rows: %s of %s',
				  $v->[0], $r->{pid} // '?', $r->{attach}, $r->{breakpoint} // '?', $r->{postmaster_gone} // '?',
				  $r->{up} // '?', $r->{prepared} // '?', $r->{dist_transaction} // '?', $r->{recovered} // '?',
				  $r->{prepared_after} // '?', $r->{rows} // '?', $r->{of} // '?'));
		diag("gdb: $r->{gdb}") if $r->{attach} ne 'ok';
	}
	$coord->safe_psql($DB, 'ALTER SYSTEM RESET citus.recover_2pc_interval');
	$coord->reload;
  SKIP:
	{
		skip "2pc: $why", 6 if defined $why;
		my ($c, $a) = @res;
		my $in_window = sub {
			my ($r, $rows_kept) = @_;
			my @p = split m{/}, $r->{prepared} // '';
			return $r->{attach} eq 'ok' && $r->{hit} && $r->{breakpoint} && $r->{postmaster_gone}
			  && @p == 2 && $p[0] =~ /^\d+$/ && $p[0] >= 1 && $p[1] =~ /^\d+$/ && $p[1] >= 1
			  && ($rows_kept ? $r->{dist_transaction} =~ /^[1-9]\d*$/ : $r->{dist_transaction} eq '0');
		};
		ok($in_window->($c, 1),
			'2pc commit: the coordinator killed (-9) after its commit record, before COMMIT PREPARED: prepared transactions of that transaction on both workers, its pg_dist_transaction rows kept');
		ok($c->{up} && $c->{recovered} =~ /^\d+$/ && $c->{recovered} >= 2 && $c->{prepared_after} eq '0/0',
			'2pc commit: recover_prepared_transactions() on the coordinator resolved them: none left on either worker');
		is($c->{rows}, $c->{of}, '2pc commit: the transaction\'s rows are present in every bucket it wrote (committed on both workers)');
		ok($in_window->($a, 0),
			'2pc abort: the coordinator killed (-9) after the workers PREPAREd, before its own commit: prepared transactions on both workers, no pg_dist_transaction row of it');
		ok($a->{up} && $a->{recovered} =~ /^\d+$/ && $a->{recovered} >= 2 && $a->{prepared_after} eq '0/0',
			'2pc abort: recover_prepared_transactions() on the coordinator resolved them: none left on either worker');
		is($a->{rows}, '0', '2pc abort: none of the transaction\'s rows is present (rolled back on both workers)');
	}
}

# ---------------------------------------------------------------------------
# move: the busiest bucket's shard to the other worker and back

my %port_node = map { $nodes[$_]->port => $_ } 1, 2;
{
	my $shard = $coord->safe_psql($DB, "SELECT get_shard_id_for_distribution_column('gridha.bucket_batches', $busy)");
	my $place = sub { ask($coord, "SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shard") // '?' };
	my $from = $place->();
	my $to = $from == $nodes[1]->port ? $nodes[2]->port : $nodes[1]->port;
	my $mv = sub {
		my ($a, $b) = @_;
		my ($o, $e) = ('', '');
		$coord->psql($DB, "SELECT citus_move_shard_placement($shard, 'localhost', $a, 'localhost', $b, shard_transfer_mode => 'block_writes')",
			stdout => \$o, stderr => \$e, timeout => 180, timed_out => \my $to2);
		sample();
		$coord->psql($DB, 'CALL citus_cleanup_orphaned_resources()', timeout => 120, timed_out => \my $to3);
		return $e =~ /ERROR/ || $to2 ? "failed: $e" : 'ok';
	};
	my $out1 = $mv->($from, $to);
	my $there = $place->();
	sleep 2;
	my $out2 = $mv->($to, $from);
	my $back = $place->();
	fault('move', bucket => $busy, shard => $shard, there => $out1, back => $out2);
	diag("move: shard $shard of bucket $busy ($per_bucket{$busy} services) $from -> $to: $out1 (now on $there); back: $out2 (now on $back)");
	ok($out1 eq 'ok' && $there == $to && $out2 eq 'ok' && $back == $from,
		'move: the shard of the busiest bucket moved to the other worker and back under load (citus_move_shard_placement, block_writes)');
}

# ---------------------------------------------------------------------------
# rebalance: an imbalance of four shard groups, then citus_rebalance_start

{
	my $count_sql = q{SELECT string_agg(n, '/' ORDER BY port) FROM (
  SELECT p.nodeport AS port, count(*)::text AS n FROM pg_dist_shard s JOIN pg_dist_shard_placement p USING (shardid)
   WHERE s.logicalrelid = 'gridha.bucket_claims'::regclass GROUP BY p.nodeport) x};
	my $before = ask($coord, $count_sql) // '?';
	my $p1 = $nodes[1]->port;
	my $p2 = $nodes[2]->port;
	my @move = split /\n/, $coord->safe_psql($DB, qq{
SELECT s.shardid FROM pg_dist_shard s JOIN pg_dist_shard_placement p USING (shardid)
 WHERE s.logicalrelid = 'gridha.bucket_claims'::regclass AND p.nodeport = $p1 ORDER BY s.shardid LIMIT 4});
	my $moved = 0;
	foreach my $sh (@move)
	{
		my $r = ask($coord, "SELECT citus_move_shard_placement($sh, 'localhost', $p1, 'localhost', $p2, shard_transfer_mode => 'block_writes')", 180);
		$moved++ if defined $r;
		sample();
	}
	$coord->psql($DB, 'CALL citus_cleanup_orphaned_resources()', timeout => 120, timed_out => \my $to3);
	my $imbalanced = ask($coord, $count_sql) // '?';
	my ($o, $e, $to) = ('', '', 0);
	$coord->psql($DB, q{SELECT citus_rebalance_start(shard_transfer_mode => 'block_writes') IS NOT NULL;
SELECT citus_rebalance_wait();
SELECT state FROM citus_rebalance_status() ORDER BY job_id DESC LIMIT 1},
		stdout => \$o, stderr => \$e, timeout => 300, timed_out => \$to);
	sample();
	$coord->psql($DB, 'CALL citus_cleanup_orphaned_resources()', timeout => 120, timed_out => \my $to4);
	my $after = ask($coord, $count_sql) // '?';
	$o =~ s/\n/ /g;
	fault('rebalance', before => $before, imbalanced => $imbalanced, after => $after, job => $o);
	diag("rebalance: shards per worker $before; after moving $moved of them $imbalanced; citus_rebalance_start: $o $e; after $after");
	my @after = split m{/}, $after;
	ok( $moved == 4
		  && $imbalanced eq '12/20'
		  && @after == 2
		  && $after[0] + $after[1] == 32
		  && (grep { $_ >= 15 && $_ <= 17 } @after) == 2
		  && !$to
		  && $o =~ /finished\s*$/,
		'rebalance: an imbalance of four shard groups (12/20), then citus_rebalance_start, waited for, finished with the workers within the rebalancer\'s threshold (15 to 17 shard groups each)');
}

# ---------------------------------------------------------------------------
# worker: kill -9 of worker 2's postmaster, then start

{
	my $w = $nodes[2];
	my $pid = $w->{_pid};
	my $t0 = time;
	$w->kill9;
	sleep 2;
	my $up = 0;
	for my $i (1 .. 30)
	{
		if ($w->start(fail_ok => 1)) { $up = 1; last; }
		sleep 1;
	}
	my $serving = $up && wait_until(120, sub {
		defined ask($coord, 'SELECT count(*) FROM gridha.bucket_claims', 30) });
	my $down = sprintf('%.1f', time - $t0);
	fault('worker', pid => $pid, up => $up, serving_after_s => $down);
	diag("worker: kill -9 of n2 (postmaster $pid), restarted: $up, the cluster answered again after $down s");
	ok($up && $serving, 'worker: a worker\'s postmaster killed (-9) under load and started again; the cluster answers');
	sleep 3;
}

# ---------------------------------------------------------------------------
# drain

sleep 5;
open my $sp, '>', "$run/stop-producer" or die;
close $sp;
my $producer_exit = wait_until(60, sub { slurp("$run/producer.log") =~ /"kind": "exit"/ });
eval { $clients[0]->kill_kill(grace => 2) };
open my $si, '>', "$run/stop-instances" or die;
close $si;
my $instances_exit = wait_until(90, sub { 4 == grep { slurp("$run/$_.log") =~ /"kind": "exit"/ } @NAMES[ 0 .. 2, 4 ] });
eval { $_->kill_kill(grace => 2) } foreach @inst;
sample();
my $drain = client('drain', '--mode', 'instance', '--instance-id', $IDS[3], '--buckets', join(',', @buckets),
	'--share', 64, '--lease', $LEASE, '--stop-file', "$run/stop-drain", '--seed', 349, '--max-seconds', 300,
	'--cycles', 10);
my $left_sql = q{SELECT count(*) FROM gridha.bucket_batches WHERE status NOT IN ('committed', 'invalid')};
my $t_drain = time;
my $drained = wait_until(240, sub { (ask($coord, $left_sql, 30) // 1) eq '0' });
my $drain_s = sprintf('%.1f', time - $t_drain);
open my $sd, '>', "$run/stop-drain" or die;
close $sd;
my $drain_exit = wait_until(60, sub { slurp("$run/drain.log") =~ /"kind": "exit"/ });
eval { $drain->kill_kill(grace => 2) };
sample();
my $rows = $coord->safe_psql($DB, 'SELECT count(*) FROM gridha.bucket_batches');
my $run_s = sprintf('%.0f', time - $t_start);
diag("drain: a fresh instance left nothing unfinished after $drain_s s: " . ($drained ? 'yes' : 'no') . "; $rows batches");

# the batches, for the checker
{
	my ($o, $e) = ('', '');
	$coord->psql($DB, q{COPY (SELECT bucket, service_id, batch_id, seq, convert_from(payload, 'UTF8') AS payload,
  status, epoch, attempts, instance_id, extract(epoch FROM handed_out_at) AS handed_out_at,
  extract(epoch FROM finished_at) AS finished_at FROM gridha.bucket_batches) TO STDOUT WITH (FORMAT csv, HEADER)},
		stdout => \$o, stderr => \$e);
	open my $fh, '>', "$run/batches.csv" or die;
	print $fh "$o\n";
	close $fh;
}
my $check_out = `python3 "$REPO/test/ha/citus_check.py" "$run" 2>&1`;
my $res = eval { decode_json($check_out) };
if (!$res)
{
	diag("checker: $check_out");
	$res = { figures => {}, checks => {}, examples => {} };
}
my $F = $res->{figures};
my $C = $res->{checks};
my $json = JSON::PP->new->canonical;
diag('faults: ' . join("\n  ", @fault_log));
diag("figures: " . $json->encode($F));
foreach my $k (sort keys %{ $res->{examples} })
{
	diag("$k: $_") foreach @{ $res->{examples}{$k} };
}
diag(sprintf('figures: run %s s; faults injected %d (%s); enqueued %s acknowledged + %s unknown (%s of those present); '
		  . 'lost %s, out of order %s, stale writes accepted %s, late reports %s (refused %s), epochs down %s, '
		  . 'epoch given twice %s; hand-outs %s (again at a higher epoch %s), take-overs %s',
		  $run_s, scalar @fault_log, join(', ', map { "$_ " . scalar @{ $faults{$_} } } sort keys %faults),
		  map { $F->{$_} // '?' } qw(enqueued_acknowledged enqueued_unknown enqueued_unknown_present lost
		  out_of_order stale_accepted late_reports late_refused epochs_down epoch_given_twice handouts
		  handed_out_again takeovers)));

ok( $drained
	  && ($F->{rows} // -1) == $rows
	  && ($F->{enqueued_acknowledged} // 0) > 0
	  && ($F->{handouts} // 0) > 0
	  && $producer_exit && $instances_exit && $drain_exit,
	"drain: the producer stopped, the instances stopped, a fresh instance finished what was left ($rows batches, none unfinished)");

is(($C->{lost} // -1), 0,
	sprintf('lost: 0 (of %s acknowledged enqueues, each present once and committed; %s whose answer was lost accounted for: %s present, %s absent; no row never sent)',
		$F->{enqueued_acknowledged} // '?', $F->{enqueued_unknown} // '?', $F->{enqueued_unknown_present} // '?',
		$F->{enqueued_unknown_absent} // '?'));
is(($C->{order} // -1), 0,
	'out of order: 0 (per service: k rises with seq, seqs 1..n, each batch handed out after the previous one was final and final after it; a batch handed out again only at a higher epoch)');
is(($C->{stale} // -1), 0,
	sprintf('stale writes accepted: 0 (of %s accepted hand-outs, reports, renewals and releases, each at an epoch the history gives to its instance, sent before a higher one was given; every final batch\'s epoch and instance a pair of the history)',
		$F->{writes_accepted} // '?'));
is(($C->{late} // -1), 0,
	sprintf('late reports: the paused instance\'s %s reports after it resumed were all refused (RG001)', $F->{late_reports} // '?'));
is(($C->{epochs} // -1), 0,
	sprintf('epochs: no bucket epoch given to two instances (%s takes), none went down in %s samples',
		$F->{takes} // '?', $F->{epoch_samples} // '?'));

# shells: the bucket tables' local files on the coordinator, gridha's own
# tables as they were after the setup
my $shells = $coord->safe_psql($DB, q{
SELECT string_agg(logicalrelid::text || ':' || (pg_stat_file(pg_relation_filepath(logicalrelid))).size, ',' ORDER BY logicalrelid::text)
  FROM pg_dist_partition WHERE logicalrelid::text LIKE 'gridha.%'});
my $local_after = $coord->safe_psql($DB, $LOCAL_SQL);
diag("coordinator shells: $shells; gridha's own tables after the setup: $local_before; at the end: $local_after");
my @nonempty = grep { !/:0$/ } split /,/, $local_after;
ok( $shells eq 'gridha.bucket_batches:0,gridha.bucket_claims:0,gridha.bucket_instances:0,gridha.bucket_rates:0,gridha.bucket_services:0,gridha.bucket_targets:0'
	  && $local_after eq $local_before
	  && !(grep { /^(batches|service_claims|instances|leases|service_counts|id_windows|rate_handouts):/ } @nonempty),
	'shells: on the coordinator the bucket tables\' local files (the instances\' and targets\' reference tables\' too) are empty and gridha\'s own tables hold what the setup left (no batch, claim, instance or lease)');

my $prepared = join('/', map { ask($_, 'SELECT count(*) FROM pg_prepared_xacts') // '?' } @nodes);
$coord->psql($DB, 'SELECT recover_prepared_transactions()') if $prepared ne '0/0/0';
diag("prepared transactions at the end (coordinator/worker/worker): $prepared");
is($prepared, '0/0/0', 'prepared: no prepared transaction left on any node');

my $logs = join('', map { slurp($_->logfile) } @nodes);
my @crash = grep { /terminated by signal (4|6|7|8|11)\b|PANIC:|TRAP:/ } split /\n/, $logs;
diag(join("\n", @crash)) if @crash;
ok(!@crash, 'no server process crashed (signal 4, 6, 7, 8, 11), no PANIC in the nodes\' logs');

$_->stop('fast', fail_ok => 1) foreach @nodes;
