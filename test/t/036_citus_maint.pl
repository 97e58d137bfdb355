# test/t/036_citus_maint.pl: maintenance and metrics in the Citus mode
# (issue 43; docs/citus.md, "Built: maintenance and metrics"): on a
# coordinator and two workers, gridha.prune_batches and
# gridha.run_maintenance prune the bucket tables, bucket by bucket, and
# gridha.metrics reads them.
#
# Citus exists for PostgreSQL 15 only. As test/t/032_citus_mode.pl: the
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
#   setup     gridha.citus_setup(64); instance A registered; 4 batches
#             enqueued into each of services m01..m12; A takes their
#             buckets and, through the per-bucket functions, commits each
#             service's first batch, rejects the second of the odd services
#             (invalid) and hands the second of the even ones out twice
#             (delayed, then, in a second pass after its 250 ms backoff,
#             committed), has the third accepted (pending,
#             in flight); the fourth stays queued: 18 committed, 6 invalid,
#             12 pending, 12 queued
#   age       with gridha.retention = 1h: every first batch, and the
#             second of m01..m06, made created and finished 2 h ago (18
#             past the retention: 15 committed, 3 invalid); the second of
#             m07..m12 created 2 h ago but finished now, the third and
#             fourth of every service created 2 h ago (not final)
#   metrics   before any prune: gridha.metrics equals what the bucket
#             tables give, computed here (backlog, in flight, oldest
#             ready, enqueued, committed, invalid, resubmitted; per
#             instance its buckets, in flight, lease)
#   prune     gridha.prune_batches(2) removes 2 of the 18
#   maint     gridha.run_maintenance(A) leads gridha.maintenance on the
#             coordinator and runs the tick: pruned 16; the batches left
#             are exactly those before but the 18, with their statuses;
#             gridha.pruned_totals holds 18 (15 committed, 3 invalid, 3
#             hand-outs after the first); a second instance B is not the
#             leader meanwhile and prunes nothing
#   totals    gridha.metrics after the prune: the gauges as the bucket
#             tables give them, the running totals unchanged (pruned
#             batches stay counted); with every final batch deleted by
#             hand (rolled back) the same: it reads the services' totals,
#             no batch
#   views     gridha.claims, instance_health, service_queues and
#             queue_progress refused (RG035)
#   worker    run_maintenance and prune_batches on a worker refused (RG043)
#   refusals  bad input refused with the single server's SQLSTATEs (22004,
#             22023, RG025, 25006), nothing changed; another role's
#             instance (RG008), an unknown id when gridha.unknown_instance
#             is refuse (RG024, not registered)
#   retention the 6 second batches of m07..m12 aged too: with
#             gridha.retention = -1 prune_batches removes none, with 1 h
#             all 6
#   shells    gridha.batches, service_claims and instances hold no row, the
#             bucket tables' local files on the coordinator are empty;
#             gridha.leases holds the maintenance lease (A)
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster). Run by
# `make test` (test/run.sh, part 036_citus_maint) and by `make
# prove_installcheck`, as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaCitus;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $NTESTS = 19;
my $A = 'aaaaaaaa-0000-0000-0000-000000000036';
my $B = 'bbbbbbbb-0000-0000-0000-000000000036';

plan tests => $NTESTS;

my ($CFG, $CBIN, $CLIB) = citus_tree();
my $install_path = citus_build($CFG, $CBIN, $CLIB);
my @nodes = citus_cluster($install_path, 'test/t/036_citus_maint.pl', 'c36', '');
my $coord = $nodes[0];

sub run
{
	my ($sql, $node) = @_;
	return citus_psql($node // $coord, 'c36', $sql, '-v', 'VERBOSITY=verbose');
}

sub one
{
	my ($sql) = @_;
	return $coord->safe_psql('c36', $sql);
}

# sqlstates(OUTPUT): the SQLSTATEs of the errors psql printed, in order
sub sqlstates
{
	my ($out) = @_;
	return join(',', $out =~ /ERROR:  ([0-9A-Z]{5}):/g);
}

# the batches as they are: "service/batch:status:attempts", sorted
sub batches
{
	return one(q{SELECT string_agg(service_id || '/' || batch_id || ':' || status || ':' || attempts, ','
	                              ORDER BY service_id, batch_id) FROM gridha.bucket_batches});
}

sub by_status
{
	return one(q{SELECT string_agg(status || ':' || n, ',' ORDER BY status)
	               FROM (SELECT status::text, count(*) AS n FROM gridha.bucket_batches GROUP BY status) x});
}

# ---------------------------------------------------------------------------
# setup

my $setup = run(qq{SELECT gridha.citus_setup(64);
INSERT INTO gridha.bucket_instances VALUES ('$A', current_user, 'A', now()), ('$B', current_user, 'B', now());
DO \$\$ BEGIN
PERFORM gridha.bucket_enqueue(gridha.bucket_of(s, 64), s, s || '-' || j, '\\x36')
  FROM (SELECT 'm' || lpad(i::text, 2, '0') AS s FROM generate_series(1, 12) i) x,
       generate_series(1, 4) j ORDER BY j, s;
END \$\$;});

# A's pass over its buckets, twice: the first leaves the second batch of
# each even service delayed, waiting its backoff (250 ms after a first
# hand-out); the second, after it, hands them out again.
my $pass = qq{DO \$\$
DECLARE
    k integer;
    e bigint;
    r gridha.bucket_batch;
    j integer;
    odd boolean;
BEGIN
    FOR k IN SELECT DISTINCT bucket FROM gridha.bucket_services ORDER BY bucket LOOP
        SELECT c.epoch INTO e FROM gridha.bucket_claims c WHERE c.bucket = k AND c.holder = '$A';
        IF NOT FOUND THEN
            e := gridha.bucket_acquire(k, '$A', '1 hour');
        END IF;
        FOR n IN 1 .. 100 LOOP
            r := gridha.bucket_next_batch(k, '$A', e);
            EXIT WHEN r IS NULL OR r.service_id IS NULL;
            j := split_part(r.batch_id, '-', 2)::integer;
            odd := right(r.service_id, 2)::integer % 2 = 1;
            IF j = 2 AND odd THEN
                PERFORM gridha.bucket_report_submission(k, '$A', r.service_id, r.batch_id, e, 'rejected');
            ELSIF j = 2 AND r.attempts = 1 THEN
                PERFORM gridha.bucket_report_submission(k, '$A', r.service_id, r.batch_id, e, 'delayed');
            ELSE
                PERFORM gridha.bucket_report_submission(k, '$A', r.service_id, r.batch_id, e, 'accepted');
                IF j <> 3 THEN
                    PERFORM gridha.bucket_report_status(k, '$A', r.service_id, r.batch_id, e, 'committed');
                END IF;
            END IF;
        END LOOP;
    END LOOP;
END \$\$;};
$setup .= run($pass);
my $delayed0 = one(q{SELECT count(*) FILTER (WHERE b.status = 'delayed') || '|'
                         || count(*) FILTER (WHERE b.status = 'delayed' AND s.ready_at - b.submitted_at = interval '250 ms'
                                               AND NOT s.in_flight AND s.head_seq = b.seq)
                       FROM gridha.bucket_batches b
                       JOIN gridha.bucket_services s ON s.bucket = b.bucket AND s.service_id = b.service_id});
$setup .= run("SELECT pg_sleep(0.3)") . run($pass);
my $status0 = by_status();
my $resub0 = one(q{SELECT sum(attempts - 1) FILTER (WHERE attempts > 1) FROM gridha.bucket_batches});
ok($setup =~ /^64$/m && $setup !~ /ERROR/ && $delayed0 eq '6|6'
	  && $status0 eq 'committed:18,invalid:6,pending:12,queued:12' && $resub0 eq '6',
	'setup: 12 services of 4 batches in their buckets, held by A: a delayed batch waits its backoff (its service ready 250 ms after the report, not handed out before), then 18 committed, 6 invalid, 12 pending, 12 queued; 6 hand-outs after the first')
  or diag("$setup\ndelayed after the first pass (all, with the backoff) $delayed0\n$status0 resubmitted $resub0");

# ---------------------------------------------------------------------------
# age

# age(WHERE, CREATED, FINISHED): the batches WHERE selects made created
# and/or finished 2 h earlier. Row by row with the times computed first:
# Citus refuses timestamptz - interval (a STABLE operator) on a column in
# an UPDATE of a distributed table.
sub age
{
	my ($where, $created, $finished) = @_;
	return run(qq{DO \$\$
DECLARE
    k integer[];
    s text[];
    b text[];
    c timestamptz[];
    f timestamptz[];
    kk integer;
    ss text;
    bb text;
    cc timestamptz;
    ff timestamptz;
BEGIN
    SELECT array_agg(bucket), array_agg(service_id), array_agg(batch_id), array_agg(created_at),
           array_agg(finished_at)
      INTO k, s, b, c, f FROM gridha.bucket_batches WHERE $where;
    FOR i IN 1 .. coalesce(cardinality(k), 0) LOOP
        kk := k[i];
        ss := s[i];
        bb := b[i];
        cc := c[i];
        ff := f[i];
        IF $created THEN
            cc := cc - interval '2 hours';
        END IF;
        IF $finished THEN
            ff := ff - interval '2 hours';
        END IF;
        UPDATE gridha.bucket_batches SET created_at = cc, finished_at = ff
         WHERE bucket = kk AND service_id = ss AND batch_id = bb;
    END LOOP;
END \$\$;});
}

my $aged = age(q{batch_id LIKE '%-1' OR (batch_id LIKE '%-2' AND service_id <= 'm06')}, 'true', 'true')
  . age(q{(batch_id LIKE '%-2' AND service_id > 'm06') OR batch_id LIKE '%-3' OR batch_id LIKE '%-4'},
	'true', 'false');
my $old = one(q{SELECT string_agg(service_id || '/' || batch_id, ',' ORDER BY service_id, batch_id)
  FROM gridha.bucket_batches WHERE status IN ('committed', 'invalid') AND finished_at < now() - interval '1 hour'});
my @old = split /,/, $old;
my %old = map { $_ => 1 } @old;
my $old_status = one(q{SELECT string_agg(status || ':' || n, ',' ORDER BY status) FROM (
  SELECT status::text, count(*) AS n FROM gridha.bucket_batches
   WHERE status IN ('committed', 'invalid') AND finished_at < now() - interval '1 hour' GROUP BY status) x});
ok($aged !~ /ERROR/ && @old == 18 && $old_status eq 'committed:15,invalid:3',
	'age: 18 final batches finished 2 h ago (15 committed, 3 invalid); the others final within the hour or not final')
  or diag("$aged\n$old\n$old_status");

# ---------------------------------------------------------------------------
# metrics against the bucket tables

my $METRICS = q{SELECT scope || '|' || coalesce(target, '') || '|' || coalesce(instance_id::text, '') || '|'
  || coalesce(label, '') || '|' || coalesce(backlog::text, '') || '|' || coalesce(in_flight::text, '') || '|'
  || coalesce(claims_held::text, '') || '|' || coalesce(enqueued_total::text, '') || '|'
  || coalesce(committed_total::text, '') || '|' || coalesce(invalid_total::text, '') || '|'
  || coalesce(resubmitted_total::text, '') || '|'
  || coalesce(claims_taken_over_total::text, 'null') || coalesce(stale_writes_refused_total::text, 'null')
  || coalesce(heads_repaired_total::text, 'null') || coalesce(status_omitted_total::text, 'null') || '|'
  || (oldest_ready_age_seconds IS NOT NULL)::text || '/' || coalesce((lease_remaining_seconds > 3000)::text, '-')
  FROM gridha.metrics ORDER BY scope DESC, instance_id};

# expected(COMMITTED, INVALID, RESUBMITTED): the rows computed from the bucket tables
sub expected
{
	my ($c, $i, $r) = @_;
	my $g = one(q{SELECT sum(tail_seq - head_seq + 1) || '|' || count(*) FILTER (WHERE in_flight) || '|'
	  || sum(tail_seq) FROM gridha.bucket_services});
	my $inst = one(qq{SELECT count(*) FROM gridha.bucket_claims WHERE holder = '$A'}) . '|'
	  . one(qq{SELECT count(*) FROM gridha.bucket_services s JOIN gridha.bucket_claims c USING (bucket)
	            WHERE c.holder = '$A' AND s.in_flight});
	my ($backlog, $flight, $enq) = split /\|/, $g;
	my ($held, $iflight) = split /\|/, $inst;
	# the target row's oldest_ready_age_seconds is never NULL; A's buckets
	# were taken for an hour
	return "target|default|||$backlog|$flight||$enq|$c|$i|$r|nullnullnullnull|true/-\n"
	  . "instance||$A|A||$iflight|$held|||||nullnullnullnull|false/true";
}

my $m0 = one($METRICS);
my $want0 = expected(18, 6, 6);
ok($m0 eq $want0,
	'metrics: before a prune, gridha.metrics equals the counts computed from the bucket tables (target default: backlog, in flight, enqueued, committed, invalid, resubmitted; the counters the mode does not keep NULL; instance A: its buckets, its services in flight, its lease)')
  or diag("got:\n$m0\nwant:\n$want0");

# ---------------------------------------------------------------------------
# prune

my $before = batches();
my $p2 = run(q{SET gridha.retention = '1h'; SELECT gridha.prune_batches(2);});
my $after2 = batches();
my %b2 = map { (split /:/)[0] => $_ } split /,/, $after2;
my @gone2 = grep { !exists $b2{ (split /:/)[0] } } split /,/, $before;
ok($p2 =~ /^2$/m && @gone2 == 2 && !(grep { !$old{ (split /:/)[0] } } @gone2),
	'prune: gridha.prune_batches(2) removes 2 batches, both final and finished past the retention')
  or diag("$p2\ngone: @gone2");

# ---------------------------------------------------------------------------
# run_maintenance

my $mt = run(qq{SET gridha.retention = '1h';
SET gridha.soft_expiry = '10min';
SELECT outcome || '|' || term || '|' || swept_instances || '|' || pruned_batches || '|' || opened_windows
  FROM gridha.run_maintenance('$A');});
my $after = batches();
my %left = map { (split /:/)[0] => $_ } split /,/, $after;
my @want_left = grep { !$old{ (split /:/)[0] } } split /,/, $before;
my $status1 = by_status();
ok($mt =~ /^ran\|1\|0\|16\|0$/m
	  && join(',', @want_left) eq $after
	  && $status1 eq 'committed:3,invalid:3,pending:12,queued:12',
	'maint: run_maintenance(A) leads gridha.maintenance and runs the tick: 16 pruned; the batches left are exactly those before but the 18 past the retention, each with its status and attempts (none pending or queued removed, no final status changed)')
  or diag("$mt\nbefore $before\nafter $after\nwant " . join(',', @want_left) . "\n$status1");

my $mb = run(qq{SET gridha.retention = '1h';
SELECT outcome || '|' || coalesce(term::text, '') || '|' || pruned_batches FROM gridha.run_maintenance('$B');});
my $lease = one(q{SELECT duty || '|' || leader || '|' || term || '|' || (expires_at > now()) FROM gridha.leases});
my $ticks = one(q{SELECT count(*) || '|' || sum(pruned_batches) FROM gridha.maintenance_ticks});
ok($mb =~ /^not_leader\|\|0$/m && $lease eq "gridha.maintenance|$A|1|true" && $ticks eq '1|16' && batches() eq $after,
	'lease: while A leads gridha.maintenance (its lease on the coordinator\'s gridha.leases), run_maintenance(B) is not the leader and prunes nothing; one tick recorded')
  or diag("$mb\n$lease\n$ticks");

my $pt = one(q{SELECT sum(batches) || '|' || sum(committed) || '|' || sum(invalid) || '|' || sum(resubmitted)
  FROM gridha.pruned_totals});
ok($pt eq '18|15|3|3',
	'totals: gridha.pruned_totals holds what was pruned: 18 batches, 15 committed, 3 invalid, 3 hand-outs after the first')
  or diag($pt);

my $m1 = one($METRICS);
my $want1 = expected(18, 6, 6);
ok($m1 eq $want1,
	'metrics: after the prune, the gauges are the bucket tables\' and the running totals unchanged (committed 18, invalid 6, resubmitted 6: pruned batches stay counted)')
  or diag("got:\n$m1\nwant:\n$want1");

# the running totals are the services' own (kept by the reports and the
# hand-outs), not counted from the batches: with every final batch deleted
# by hand (in a transaction rolled back), gridha.metrics answers the same
my $m2 = one(qq{BEGIN;
SELECT count(*) FROM gridha.bucket_batches WHERE status IN ('committed', 'invalid');
DELETE FROM gridha.bucket_batches WHERE status IN ('committed', 'invalid');
SELECT count(*) FROM gridha.bucket_batches WHERE status IN ('committed', 'invalid');
$METRICS;
ROLLBACK;});
my $want2 = "6\n0\n$want1";
ok($m2 eq $want2 && by_status() eq $status1,
	'metrics: the running totals are kept on the services: with the 6 final batches left deleted by hand (rolled back), gridha.metrics answers the same (it reads no batch)')
  or diag("got:\n$m2\nwant:\n$want2");

# ---------------------------------------------------------------------------
# views

my $views = run(q{SELECT count(*) FROM gridha.claims;
SELECT count(*) FROM gridha.instance_health;
SELECT count(*) FROM gridha.service_queues;
SELECT count(*) FROM gridha.queue_progress;});
ok(sqlstates($views) eq 'RG035,RG035,RG035,RG035' && $views =~ /HINT:  Read gridha\.metrics/,
	'views: gridha.claims, instance_health, service_queues and queue_progress refused in the mode (RG035), not empty')
  or diag($views);

# ---------------------------------------------------------------------------
# a worker

my $w = run(qq{SELECT gridha.run_maintenance('$A');
SELECT gridha.prune_batches();}, $nodes[1]);
ok(sqlstates($w) eq 'RG043,RG043' && $w =~ /runs on the coordinator in Citus mode/ && batches() eq $after,
	'worker: run_maintenance and prune_batches on a worker refused (RG043), nothing pruned')
  or diag($w);

# ---------------------------------------------------------------------------
# refusals

my $lease_before = one(q{SELECT string_agg(duty || leader || term, ',') FROM gridha.leases});
my $bad = run(qq{SET gridha.retention = 0;
SELECT gridha.run_maintenance(NULL);
SELECT gridha.run_maintenance('$A', NULL);
SELECT gridha.run_maintenance('$A', '');
SELECT gridha.run_maintenance('$A', 'maintenance');
SELECT gridha.run_maintenance('$A', 'gridha.other');
BEGIN READ ONLY; SELECT gridha.run_maintenance('$A'); ROLLBACK;
SELECT gridha.prune_batches(-1);
BEGIN READ ONLY; SELECT gridha.prune_batches(); ROLLBACK;});
ok(sqlstates($bad) eq '22004,22004,22023,22023,RG025,25006,22023,25006'
	  && batches() eq $after
	  && one(q{SELECT string_agg(duty || leader || term, ',') FROM gridha.leases}) eq $lease_before,
	'refusals: a NULL instance or duty (22004), an empty duty or 1.2\'s "maintenance" (22023), a reserved duty (RG025), a read-only transaction (25006), a negative max_batches (22023): nothing pruned, the lease unchanged')
  or diag($bad);

# the instance checks of run_maintenance in the mode: another login role
# naming A (RG008), an id never registered with gridha.unknown_instance =
# refuse (RG024, not registered); nothing pruned, the lease unchanged
$coord->safe_psql('c36', 'CREATE ROLE c36_other LOGIN IN ROLE gridha_submitter');
my $stranger = '00000000-0000-4000-8000-0000000036ff';
my $other = citus_psql($coord, 'c36', qq{SELECT gridha.run_maintenance('$A');},
	'-U', 'c36_other', '-v', 'VERBOSITY=verbose');
my $unknown = run(qq{SET gridha.retention = 0; SET gridha.unknown_instance = refuse;
SELECT gridha.run_maintenance('$stranger');});
my $registered = one(qq{SELECT count(*) FROM gridha.bucket_instances WHERE instance_id = '$stranger'});
ok( sqlstates($other) eq 'RG008'
	  && sqlstates($unknown) eq 'RG024'
	  && $registered eq '0'
	  && batches() eq $after
	  && one(q{SELECT string_agg(duty || leader || term, ',') FROM gridha.leases}) eq $lease_before,
	'refusals: run_maintenance naming an instance another role owns (RG008), and an id never registered with gridha.unknown_instance = refuse (RG024, not registered): nothing pruned, the lease unchanged')
  or diag("other role: $other\nunknown: $unknown\nregistered: $registered");

# ---------------------------------------------------------------------------
# retention

my $ret = age(q{batch_id LIKE '%-2' AND service_id > 'm06'}, 'false', 'true') . run(q{
SET gridha.retention = -1;
SELECT 'off ' || gridha.prune_batches();
SET gridha.retention = '1h';
SELECT 'on ' || gridha.prune_batches();});
my $status2 = by_status();
ok($ret =~ /^off 0$/m && $ret =~ /^on 6$/m && $status2 eq 'pending:12,queued:12',
	'retention: with gridha.retention = -1 nothing is pruned; with 1 h, the 6 batches now finished past it; pending and queued stay')
  or diag("$ret\n$status2");

# ---------------------------------------------------------------------------
# where: a pass's statements, as Citus sends them

my $log = run(q{SET gridha.retention = '1h';
SET citus.log_remote_commands = on;
SET client_min_messages = notice;
SELECT 'pass ' || gridha.prune_batches(1000);});
my @sent;
while ($log =~ /issuing ((?:UPDATE gridha\.bucket_claims_|WITH d AS \(DELETE FROM gridha\.bucket_batches_)[^\n]*)\n[^\n]*on server [^\n:]+:(\d+)/g)
{
	push @sent, [ $1, $2 ];
}
my (@order, @where_bad);
my %port_of = map { split /\|/ } split /\n/, one(q{
SELECT b || '|' || (SELECT s.nodeport FROM citus_shards s
                     WHERE s.table_name = 'gridha.bucket_batches'::regclass
                       AND s.shardid = get_shard_id_for_distribution_column('gridha.bucket_batches', b))
  FROM generate_series(0, 63) b});
for (my $i = 0; $i < @sent; $i += 2)
{
	my ($upd, $port) = @{ $sent[$i] };
	my ($del, $dport) = @{ $sent[ $i + 1 ] // [ '', 0 ] };
	my ($k) = ($upd =~ /WHERE \(\(bucket OPERATOR\(pg_catalog\.=\) (\d+)\)/);
	push @order, $k // '?';
	push @where_bad, "bucket " . ($k // '?') . " on $port/$dport, lives on " . ($port_of{ $k // '' } // '?')
	  unless defined $k && $del =~ /^WITH d AS \(DELETE FROM gridha\.bucket_batches_\d+ b WHERE/
	  && $port == $dport && $port == ($port_of{$k} // 0);
}
ok($log =~ /^pass 0$/m && join(',', @order) eq join(',', 0 .. 63) && !@where_bad,
	'where: a prune pass goes over the buckets in ascending order, each bucket\'s two statements (the write that changes nothing, then the delete) sent to the node holding the bucket\'s shards, each within that shard')
  or diag("order @order\n@where_bad\n" . substr($log, 0, 3000));

# ---------------------------------------------------------------------------
# wait: a prune's open transaction holds no lock the cycle on its bucket
# waits for. m01's third batch committed and aged; a session prunes it and
# stays in its transaction; meanwhile, in m01's bucket, its fourth batch is
# handed out, accepted and committed, the deleted batch's report repeated,
# and a fifth enqueued, each call bounded (a call that waited would run
# into the bound and fail the test); then the prune commits.

my $K = one(q{SELECT gridha.bucket_of('m01', 64)});
my $E = one(qq{SELECT epoch FROM gridha.bucket_claims WHERE bucket = $K});
my $prep = run(qq{SELECT gridha.bucket_report_status($K, '$A', 'm01', 'm01-3', $E, 'committed');})
  . age(q{batch_id = 'm01-3'}, 'false', 'true');
my $bg = $coord->background_psql('c36', on_error_stop => 0);
my $held = $bg->query(q{SET gridha.retention = '1h'; BEGIN; SELECT 'held ' || gridha.prune_batches();});
my ($cycle, $cycle_err, $bound) = ('', '', 0);
$coord->psql('c36', qq{
SELECT (gridha.bucket_next_batch($K, '$A', $E)).batch_id;
SELECT gridha.bucket_report_submission($K, '$A', 'm01', 'm01-4', $E, 'accepted');
SELECT gridha.bucket_report_status($K, '$A', 'm01', 'm01-4', $E, 'committed');
SELECT gridha.bucket_report_status($K, '$A', 'm01', 'm01-3', $E, 'committed');
SELECT gridha.bucket_enqueue($K, 'm01', 'm01-5', '\\x36');},
	stdout => \$cycle, stderr => \$cycle_err, on_error_stop => 0, timeout => 120, timed_out => \$bound);
my $still = one(q{SELECT count(*) FROM gridha.bucket_batches WHERE batch_id = 'm01-3'});
$bg->query(q{COMMIT;});
$bg->quit;
my $m01 = one(q{SELECT string_agg(batch_id || ':' || status, ',' ORDER BY seq) FROM gridha.bucket_batches
  WHERE service_id = 'm01'});
ok($prep !~ /ERROR/ && $held =~ /^held 1$/m && !$bound && $cycle_err eq ''
	  && $cycle eq "m01-4\npending\ncommitted\ncommitted\n5"
	  && $still eq '1' && $m01 eq 'm01-4:committed,m01-5:queued',
	'wait: while a prune of its bucket is open, the bucket\'s hand-out, reports (one repeating the report of the batch being deleted) and an enqueue all answer at once; the prune then commits: m01\'s third batch gone, the fourth committed, the fifth queued')
  or diag("prep $prep\nheld $held\nbound $bound\n$cycle\n$cycle_err\nstill $still\n$m01");

# ---------------------------------------------------------------------------
# shells

my $shells = one(q{
SELECT string_agg(c || ':' || (pg_stat_file(pg_relation_filepath(c))).size, ',' ORDER BY c)
  FROM unnest(ARRAY['gridha.bucket_batches', 'gridha.bucket_claims', 'gridha.bucket_services']) AS c});
my $own = one(q{SELECT (SELECT count(*) FROM gridha.batches) + (SELECT count(*) FROM gridha.service_claims)
  + (SELECT count(*) FROM gridha.instances)});
my $leases = one(q{SELECT count(*) || '|' || min(leader::text) FROM gridha.leases});
ok($shells eq 'gridha.bucket_batches:0,gridha.bucket_claims:0,gridha.bucket_services:0'
	  && $own eq '0' && $leases eq "1|$A",
	'shells: the bucket tables\' local files on the coordinator are empty, gridha.batches, service_claims and instances hold no row; gridha.leases holds the maintenance lease only')
  or diag("$shells; $own; $leases");
