# test/t/039_citus_workers.pl: gridha's background workers in the Citus
# mode (docs/citus.md, "Built: the workers"): two workers started on the
# coordinator with gridha.start_worker serve the mode's batches through
# the SQL API (next_batches, the batched reports, pending_batches), as on
# one server, to a target whose submit and status are SQL functions on the
# coordinator (a ledger of its own: every submission it receives is
# logged, in the order received); one is stopped mid-run (stop_worker),
# the other then terminated mid-run (pg_terminate_backend: it is started
# again as a new instance).
#
# Citus exists for PostgreSQL 15 only. As test/t/035_citus_loop.pl: the
# PostgreSQL 15 GRIDHA_CITUS_PG_CONFIG names (default: the system's), used
# as it is when the run's programs are that tree's with gridha installed,
# otherwise a copy of it with gridha built from this source tree; without
# Citus there every test is reported skipped, with the reason
# (test/t/lib/GridhaCitus.pm).
#
# Steps, in the order they run:
#
#   build     as 031_citus
#   cluster   a coordinator and two workers, citus and gridha created
#   setup     gridha.citus_setup(64); the ledger (schema led on the
#             coordinator: led.submit logs each submission and accepts it,
#             led.statuses answers COMMITTED for what it accepted); target
#             'led' written to gridha.targets (reaching
#             gridha.bucket_targets); the workers' role c39_worker (a
#             member of gridha_submitter, no superuser); the coordinator
#             restarted with gridha.database and gridha.worker_role set
#   start     gridha.start_worker('w1') and ('w2') return their ids; both
#             run as c39_worker (gridha.workers, pg_stat_activity) and are
#             registered in gridha.bucket_instances on every node, owned
#             by c39_worker, serving every target (serves NULL)
#   refusals  what the mode does not serve still refuses, changing
#             nothing: worker_register called by a client (RG016), a
#             library call of one server (gridha.lead: RG035)
#   run       a producer enqueues 5 batches into each of 30 services
#             (gridha.enqueue, a transaction per batch); every batch is
#             committed, and both workers handed batches out
#   stop      5 more per service; once some of them are committed,
#             gridha.stop_worker(w1): true, w1 leaves gridha.workers; then
#             3 more per service; every batch is committed
#   served    the batches enqueued after w1 stopped were handed out by w2,
#             and w1 holds no bucket
#   terminate 4 more per service; once some of them are committed, w2 is
#             terminated (pg_terminate_backend): a worker labelled w2 is
#             started again as a new instance, and every batch is
#             committed, the rest handed out by the new instance
#   once      every batch enqueued is committed, once (its row), and the
#             ledger accepted each exactly once
#   order     per service, the ledger received its batches in seq order:
#             every submission of batch k before the first of batch k + 1
#   rate      target led limited to one batch per 150 ms: 16 more batches
#             (one per new service) are committed by the workers, handed
#             out at least 150 ms apart each, one slot each (the workers
#             wait for the next slot through the mode's rate_wait_ms)
#   end       gridha's own tables and the bucket tables' shells on the
#             coordinator hold no row; no worker step refused in the mode
#             (RG035 in the coordinator's log) and no node crashed
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster). Run by
# `make test` (test/run.sh, part 039_citus_workers) and by `make
# prove_installcheck`, as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaCitus;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $NTESTS = 13;

plan tests => $NTESTS;

my ($CFG, $CBIN, $CLIB) = citus_tree();
my $install_path = citus_build($CFG, $CBIN, $CLIB);
my @nodes = citus_cluster($install_path, 'test/t/039_citus_workers.pl', 'c39', '');
my $coord = $nodes[0];

my $NSERVICES = 30;

sub run
{
	my ($sql) = @_;
	return citus_psql($coord, 'c39', $sql, '-v', 'VERBOSITY=verbose');
}

sub one
{
	my ($sql, $node) = @_;
	return ($node // $coord)->safe_psql('c39', $sql);
}

sub sqlstate_of
{
	my ($out) = @_;
	return $out =~ /ERROR:  ([0-9A-Z]{5}):/ ? $1 : 'no error';
}

# wait_for(SQL, WANT, SECONDS): true once SQL (on the coordinator) answers
# WANT, looking every 200 ms for at most SECONDS
sub wait_for
{
	my ($sql, $want, $seconds) = @_;
	foreach (1 .. $seconds * 5)
	{
		my ($rc, $out) = (0, '');
		$rc = $coord->psql('c39', $sql, stdout => \$out);
		return 1 if $rc == 0 && $out eq $want;
		usleep(200_000);
	}
	return 0;
}

# enqueue(ROUND, N): N more batches into each service, a transaction per
# batch (gridha.enqueue on the coordinator), batch ids sNN-KKKK with KKKK
# the batch's number in its service (1, 2, ...), round ROUND in its payload
my %enqueued;
sub enqueue
{
	my ($round, $n) = @_;
	my $sql = '';
	foreach my $k (1 .. $n)
	{
		foreach my $s (1 .. $NSERVICES)
		{
			my $sid = sprintf('s%02d', $s);
			my $seq = ++$enqueued{$sid};
			$sql .= sprintf("SELECT gridha.enqueue('%s', '%s-%04d', 'r%d'::bytea, 'led');\n",
				$sid, $sid, $seq, $round);
		}
	}
	my ($out, $err) = ('', '');
	my $rc = $coord->psql('c39', $sql, stdout => \$out, stderr => \$err, on_error_stop => 1);
	diag("enqueue round $round: $err") if $rc != 0;
	return $rc == 0;
}

sub total_enqueued
{
	my $t = 0;
	$t += $_ foreach values %enqueued;
	return $t;
}

my $COMMITTED = q{SELECT count(*) FILTER (WHERE status = 'committed') FROM gridha.bucket_batches};

# the workers' process ids, as gridha.workers shows them (for their lines
# in the coordinator's log: a background worker's lines carry no
# application_name, the framework's prefix being '%m [%p] %q%a ')
my %worker_pids;
sub note_worker_pids
{
	$worker_pids{$_} = 1
	  foreach grep { /^\d+$/ } split /\n/, one('SELECT pid FROM gridha.workers WHERE pid IS NOT NULL');
	return;
}

# ---------------------------------------------------------------------------
# setup

my $setup = run(q{
SELECT gridha.citus_setup(64);
CREATE ROLE c39_worker LOGIN IN ROLE gridha_submitter;
CREATE SCHEMA led;
CREATE TABLE led.received (n bigserial PRIMARY KEY, service_id text NOT NULL, batch_id text NOT NULL,
                           epoch bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE led.accepted (batch_id text PRIMARY KEY, service_id text NOT NULL, n bigint NOT NULL);
CREATE FUNCTION led.submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    k bigint;
BEGIN
    INSERT INTO led.received (service_id, batch_id, epoch) VALUES ($1, $2, $4) RETURNING n INTO k;
    INSERT INTO led.accepted (batch_id, service_id, n) VALUES ($2, $1, k) ON CONFLICT DO NOTHING;
    RETURN 'accepted';
END
$$;
CREATE FUNCTION led.statuses(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $$
SELECT u.b, CASE WHEN a.batch_id IS NULL THEN 'UNKNOWN' ELSE 'COMMITTED' END
  FROM pg_catalog.unnest($1) AS u(b) LEFT JOIN led.accepted a ON a.batch_id = u.b
$$;
GRANT USAGE ON SCHEMA led TO c39_worker;
GRANT SELECT, INSERT ON led.received, led.accepted TO c39_worker;
GRANT USAGE ON SEQUENCE led.received_n_seq TO c39_worker;
INSERT INTO gridha.targets (target, submit_function, status_function)
VALUES ('led', 'led.submit(text,text,bytea,bigint)', 'led.statuses(text[])');
SELECT target || '|' || submit_function || '|' || status_function FROM gridha.bucket_targets WHERE target = 'led';
});
$coord->append_conf('postgresql.conf', q{
gridha.workers = 0
gridha.database = 'c39'
gridha.worker_role = 'c39_worker'
gridha.naptime = '200ms'
gridha.monitor_interval = '300ms'
gridha.renew_interval = '1s'
gridha.soft_expiry = '5s'
gridha.hard_expiry = '10s'
});
$coord->restart;
ok($setup =~ /^64$/m && $setup =~ /^led\|led\.submit\(text,text,bytea,bigint\)\|led\.statuses\(text\[\]\)$/m
	  && $setup !~ /ERROR/,
	'setup: citus_setup(64), the ledger\'s functions and target led (in gridha.bucket_targets), the workers\' role; the coordinator restarted with the workers\' settings')
  or diag($setup);

# ---------------------------------------------------------------------------
# start

my $w1 = run(q{SELECT gridha.start_worker('w1')});
my $w2 = run(q{SELECT gridha.start_worker('w2')});
($w1) = $w1 =~ /^([0-9a-f-]{36})$/m;
($w2) = $w2 =~ /^([0-9a-f-]{36})$/m;
$w1 //= '';
$w2 //= '';
my $running = wait_for(qq{SELECT count(*) FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
  WHERE w.instance_id IN ('$w1', '$w2') AND a.usename = 'c39_worker' AND w.state <> 'waiting'}, '2', 60);
my $INST = qq{SELECT coalesce(string_agg(i.label || '|' || i.owner || '|' || coalesce(i.serves::text, 'all'), ',' ORDER BY i.label), '')
  FROM gridha.bucket_instances i WHERE i.instance_id IN ('$w1', '$w2')};
my $registered = wait_for($INST, 'w1|c39_worker|all,w2|c39_worker|all', 30);
my @inst = map { one($INST, $_) } @nodes;
note_worker_pids();
ok($w1 ne '' && $w2 ne '' && $running && $registered && $inst[1] eq $inst[0] && $inst[2] eq $inst[0],
	'start: start_worker returns two instance ids; both workers run as c39_worker and are registered in gridha.bucket_instances on every node, owned by c39_worker, serving every target')
  or diag("w1 $w1 w2 $w2 running $running\n" . join("\n", @inst) . "\n"
	  . one('SELECT string_agg(concat_ws(\'|\', instance_id, label, state), \',\') FROM gridha.workers'));

# ---------------------------------------------------------------------------
# refusals

{
	my $before = one('SELECT count(*) FROM gridha.bucket_instances');
	my $reg = run(q{SELECT gridha_internal.worker_register(gen_random_uuid(), 'fake')});
	my $lead = run(q{SELECT gridha.lead('aaaaaaaa-0000-0000-0000-00000000000a')});
	my $after = one('SELECT count(*) FROM gridha.bucket_instances');
	ok(sqlstate_of($reg) eq 'RG016' && sqlstate_of($lead) eq 'RG035' && $after eq $before,
		'refusals: worker_register called by a client (RG016) and gridha.lead (RG035) refused, nothing written')
	  or diag("$reg\n$lead\n$before -> $after");
}

# ---------------------------------------------------------------------------
# run

my $ok = enqueue(1, 5);
my $done = $ok && wait_for($COMMITTED, total_enqueued(), 300);
my $served_by = one(qq{SELECT count(DISTINCT instance_id) FROM gridha.bucket_batches
  WHERE instance_id IN ('$w1', '$w2')});
ok($done && $served_by eq '2',
	"run: 5 batches into each of $NSERVICES services, every one committed by the workers, both of which handed batches out")
  or diag('committed ' . one($COMMITTED) . ' of ' . total_enqueued() . ", workers that served: $served_by\n"
	  . one(q{SELECT string_agg(concat_ws('|', status, count), ',') FROM (SELECT status, count(*) FROM gridha.bucket_batches GROUP BY 1) s}));

# ---------------------------------------------------------------------------
# stop

my $before_stop = total_enqueued();
$ok = enqueue(2, 5);
my $mid = $ok && wait_for(qq{SELECT ($COMMITTED) >= $before_stop + 20}, 't', 120);
note_worker_pids();
my $stopped = run(qq{SELECT gridha.stop_worker('$w1')});
my $gone = wait_for(qq{SELECT count(*) FROM gridha.workers WHERE instance_id = '$w1'}, '0', 30);
my $stop_mark = total_enqueued();
$ok &&= enqueue(3, 3);
$done = $ok && wait_for($COMMITTED, total_enqueued(), 300);
ok($mid && $stopped =~ /^t$/m && $gone && $done,
	'stop: gridha.stop_worker(w1) mid-run answers true and w1 leaves gridha.workers; every batch enqueued before and after is committed')
  or diag("mid $mid stopped $stopped gone $gone committed " . one($COMMITTED) . ' of ' . total_enqueued());

my $after_stop = one(qq{SELECT count(*) FILTER (WHERE instance_id IS DISTINCT FROM '$w2') || '/' || count(*)
  FROM gridha.bucket_batches WHERE payload = 'r3'::bytea});
my $w1_holds = one(qq{SELECT count(*) FROM gridha.bucket_claims WHERE holder = '$w1'});
ok($after_stop eq '0/' . ($NSERVICES * 3) && $w1_holds eq '0',
	'served: every batch enqueued after w1 stopped was handed out by w2, and w1 holds no bucket')
  or diag("not by w2/all: $after_stop, buckets of w1: $w1_holds");

# ---------------------------------------------------------------------------
# terminate

my $before_term = total_enqueued();
$ok = enqueue(4, 4);
$mid = $ok && wait_for(qq{SELECT ($COMMITTED) >= $before_term + 20}, 't', 120);
my $pid = one(qq{SELECT pid FROM gridha.workers WHERE instance_id = '$w2'});
my $term = run(qq{SELECT pg_terminate_backend($pid)});
my $again = wait_for(qq{SELECT count(*) FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
  WHERE w.label = 'w2' AND w.instance_id IS NOT NULL AND w.instance_id <> '$w2' AND a.usename = 'c39_worker'}, '1', 60);
my $w2b = one(q{SELECT instance_id FROM gridha.workers WHERE label = 'w2'});
note_worker_pids();
$done = $mid && wait_for($COMMITTED, total_enqueued(), 300);
my $by_new = one(qq{SELECT count(*) FROM gridha.bucket_batches WHERE payload = 'r4'::bytea AND instance_id = '$w2b'});
my $old_holds = one(qq{SELECT count(*) FROM gridha.bucket_claims WHERE holder IN ('$w1', '$w2')});
ok($term =~ /^t$/m && $again && $done && $by_new > 0 && $old_holds eq '0',
	'terminate: w2 terminated mid-run is started again as a new instance, which hands out the rest; every batch is committed and the old instances hold no bucket')
  or diag("term $term again $again new $w2b by new $by_new old holds $old_holds committed "
	  . one($COMMITTED) . ' of ' . total_enqueued());

# ---------------------------------------------------------------------------
# once, order

my $total = total_enqueued();
my $rows = one(q{SELECT count(*) || '/' || count(DISTINCT (service_id, batch_id)) || '/'
  || count(*) FILTER (WHERE status = 'committed') FROM gridha.bucket_batches});
my $ledger = one(q{SELECT count(*) || '/' || count(DISTINCT batch_id) FROM led.accepted});
my $received_ids = one(q{SELECT count(DISTINCT batch_id) FROM led.received});
ok($rows eq "$total/$total/$total" && $ledger eq "$total/$total" && $received_ids eq $total,
	"once: all $total batches enqueued are committed, one row each, and the ledger accepted each exactly once")
  or diag("rows $rows ledger $ledger received $received_ids of $total");

# per service, each batch's last submission before the next batch's first
my $disorder = one(q{SELECT count(*) FROM (
  SELECT service_id, batch_id, min(n) AS first, max(n) AS last,
         lead(min(n)) OVER (PARTITION BY service_id ORDER BY batch_id) AS next_first
    FROM led.received GROUP BY service_id, batch_id) r
 WHERE r.next_first IS NOT NULL AND r.next_first < r.last});
my $inversions = one(q{SELECT count(*) FROM (
  SELECT batch_id, row_number() OVER (PARTITION BY service_id ORDER BY min(n)) AS by_arrival,
         row_number() OVER (PARTITION BY service_id ORDER BY batch_id) AS by_seq
    FROM led.received GROUP BY service_id, batch_id) r WHERE by_arrival <> by_seq});
my $resent = one(q{SELECT count(*) - count(DISTINCT batch_id) FROM led.received});
ok($disorder eq '0' && $inversions eq '0',
	"order: per service the ledger received the batches in seq order, every submission of a batch before the next batch's first ($resent submitted again)")
  or diag("disorder $disorder inversions $inversions");

# ---------------------------------------------------------------------------
# rate

my $RI = 150_000;
my $rset = run(q{UPDATE gridha.targets SET rate_interval = '150 ms', rate_burst = 1 WHERE target = 'led'});
my $slots0 = one(q{SELECT slots_taken FROM gridha.bucket_rates WHERE bucket = 0 AND target = 'led'});
my ($rout, $rerr) = ('', '');
$coord->psql('c39', join('', map { sprintf("SELECT gridha.enqueue('z%02d', 'z%02d-1', 'r9'::bytea, 'led');\n", $_, $_) } 1 .. 16),
	stdout => \$rout, stderr => \$rerr, on_error_stop => 1);
my $rdone = wait_for(q{SELECT count(*) FROM gridha.bucket_batches WHERE payload = 'r9'::bytea AND status = 'committed'}, '16', 120);
my ($rtimes, $rattempts) = split /\|/, one(q{SELECT string_agg((EXTRACT(epoch FROM handed_out_at) * 1000000)::int8::text, ','
  ORDER BY handed_out_at) || '|' || sum(attempts) FROM gridha.bucket_batches WHERE payload = 'r9'::bytea});
my @rt = split /,/, $rtimes // '';
my @rclose = grep { $rt[$_] - $rt[$_ - 1] < $RI } 1 .. $#rt;
my $slots1 = one(q{SELECT slots_taken FROM gridha.bucket_rates WHERE bucket = 0 AND target = 'led'});
diag("rate: $rset $rerr\ncommitted: " . ($rdone ? 'all 16' : 'not all') . "; hand-outs " . scalar(@rt)
	  . ', gaps (ms): ' . join(' ', map { int(($rt[$_] - $rt[$_ - 1]) / 1000) } 1 .. $#rt)
	  . "\nattempts $rattempts, slots $slots0 -> $slots1");
ok($rset !~ /ERROR/ && $rerr eq '' && $rdone && @rt == 16 && !@rclose && $slots1 - $slots0 == $rattempts,
	'rate: with led limited to one batch per 150 ms (burst 1), the workers commit 16 more batches, handed out at least 150 ms apart, one slot per hand-out')
  or diag('too close: ' . join(' ', @rclose));

# ---------------------------------------------------------------------------
# end

my $local = one(q{SELECT (SELECT count(*) FROM gridha.batches) + (SELECT count(*) FROM gridha.service_claims)
  + (SELECT count(*) FROM gridha.instances)});
my $shells = one(q{SELECT sum((pg_stat_file(pg_relation_filepath(c))).size)
  FROM unnest(ARRAY['gridha.bucket_batches', 'gridha.bucket_claims', 'gridha.bucket_services']::regclass[]) AS c});
my $clog = slurp($coord->logfile);
# the workers' lines only: the refusals step's own RG035 is the test
# session's
my $pids = join('|', sort keys %worker_pids);
my @refused = grep { /\[(?:$pids)\] / && /RG035|gridha is in Citus mode/ } split /\n/, $clog;
my $logs = join('', map { slurp($_->logfile) } @nodes);
my @crash = grep { /server process .* was terminated|PANIC/ } split /\n/, $logs;
ok($local eq '0' && $shells eq '0' && keys %worker_pids >= 3 && !@refused && !@crash,
	'end: gridha\'s own tables and the bucket tables\' local shells on the coordinator hold no row; no worker step refused in the mode (RG035) and no node crashed')
  or diag("local $local shells $shells workers' pids $pids\n" . join("\n", @refused[0 .. ($#refused < 9 ? $#refused : 9)], @crash));

$_->stop foreach @nodes;
