-- test/soak/check.sql: what the soak proves, one TAP line per check.
--
-- Run by test/t/001_soak.pl with psql -At and variables :services, :batches.
-- Each query prints "ok - ..." or "not ok - ..." with the numbers behind it;
-- the .pl makes each line one test, found by the words after "ok - ".

\set expected (:services * :batches)

-- 1. Nothing lost, nothing stuck: every enqueued batch is final and committed.
SELECT CASE WHEN total = :expected AND committed = total THEN 'ok' ELSE 'not ok' END
       || format(' - every enqueued batch reached committed (%s enqueued, %s expected, %s committed, not committed by status: %s)',
                 total, :expected, committed, coalesce(others, 'none'))
FROM (SELECT count(*) AS total,
             count(*) FILTER (WHERE status = 'committed') AS committed
      FROM gridha.batches) t,
     (SELECT string_agg(format('%s=%s', status, n), ', ' ORDER BY status) AS others
      FROM (SELECT status, count(*) AS n FROM gridha.batches
            WHERE status <> 'committed' GROUP BY status) s) o;

-- 2. No double hand-out: without faults, each batch is handed out exactly
-- once, and nothing is handed out that was never enqueued.
SELECT CASE WHEN not_once = 0 AND strays = 0 THEN 'ok' ELSE 'not ok' END
       || format(' - each batch was handed out exactly once (%s batches handed out 0 or 2+ times, %s hand-outs of unknown batches)',
                 not_once, strays)
FROM (SELECT count(*) AS not_once
      FROM gridha.batches b
      LEFT JOIN (SELECT service_id, batch_id, count(*) AS n
                 FROM soak_log WHERE kind = 'handout'
                 GROUP BY service_id, batch_id) l USING (service_id, batch_id)
      WHERE coalesce(l.n, 0) <> 1) a,
     (SELECT count(*) AS strays
      FROM soak_log l
      WHERE NOT EXISTS (SELECT 1 FROM gridha.batches b
                        WHERE b.service_id = l.service_id AND b.batch_id = l.batch_id)) s;

-- 3. Strict order: per service, the hand-outs in log order have ascending seq.
SELECT CASE WHEN inversions = 0 THEN 'ok' ELSE 'not ok' END
       || format(' - per service, hand-out order equals seq order (%s out-of-order hand-outs in %s services)',
                 inversions, services)
FROM (SELECT count(*) FILTER (WHERE prev_seq > seq) AS inversions,
             count(DISTINCT service_id) FILTER (WHERE prev_seq > seq) AS services
      FROM (SELECT l.service_id, b.seq,
                   lag(b.seq) OVER (PARTITION BY l.service_id ORDER BY l.id) AS prev_seq
            FROM soak_log l
            JOIN gridha.batches b USING (service_id, batch_id)
            WHERE l.kind = 'handout') x) y;

-- 4. One in flight per service: a batch is handed out only after the
-- previous batch of its service (in seq order) was committed.
SELECT CASE WHEN early = 0 THEN 'ok' ELSE 'not ok' END
       || format(' - per service, a batch is handed out only after the previous one committed (%s early hand-outs)',
                 early)
FROM (SELECT count(*) AS early
      FROM (SELECT l.id, l.service_id,
                   lag(b.batch_id) OVER (PARTITION BY b.service_id ORDER BY b.seq) AS prev_batch
            FROM soak_log l
            JOIN gridha.batches b USING (service_id, batch_id)
            WHERE l.kind = 'handout') h
      WHERE h.prev_batch IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM soak_log c
                        WHERE c.kind = 'committed'
                          AND c.service_id = h.service_id
                          AND c.batch_id = h.prev_batch
                          AND c.id < h.id)) e;

-- 5. No resubmission without a fault: one attempt each.
SELECT CASE WHEN bad_batches = 0 AND bad_log = 0 THEN 'ok' ELSE 'not ok' END
       || format(' - every committed batch has attempts = 1 (%s batches with other attempts, %s hand-outs with attempt <> 1)',
                 bad_batches, bad_log)
FROM (SELECT count(*) AS bad_batches FROM gridha.batches
      WHERE status = 'committed' AND attempts IS DISTINCT FROM 1) a,
     (SELECT count(*) AS bad_log FROM soak_log
      WHERE kind = 'handout' AND attempt IS DISTINCT FROM 1) l;

-- 6. The reports did what the contract says and were never refused.
SELECT CASE WHEN reports = :expected AND bad = 0 THEN 'ok' ELSE 'not ok' END
       || format(' - report_submission gave pending and report_status gave committed for every batch (%s reports, %s unexpected)',
                 reports, bad)
FROM (SELECT count(*) AS reports,
             count(*) FILTER (WHERE sub_status IS DISTINCT FROM 'pending'
                                 OR status IS DISTINCT FROM 'committed') AS bad
      FROM soak_log WHERE kind = 'committed') r;

-- 7. Balance: the work was shared.
SELECT CASE WHEN instances > 1 THEN 'ok' ELSE 'not ok' END
       || format(' - more than one instance did work (%s instances; hand-outs each: %s)',
                 instances, per_instance)
FROM (SELECT count(*) AS instances,
             string_agg(n::text, ' ' ORDER BY n DESC) AS per_instance
      FROM (SELECT instance_id, count(*) AS n FROM soak_log
            WHERE kind = 'handout' GROUP BY instance_id) i) x;
