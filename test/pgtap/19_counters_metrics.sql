-- 19_counters_metrics.sql: the queue views and gridha.metrics are read from
-- running totals kept on the service rows, never from the batches' history
-- (docs/operations.md, "Monitoring"):
--
--   0. an INSERT that replaces the untouched default row (a restore)
--      keeps the totals rows of 'default'
--   1. a report of a final status adds one to its service's committed_total
--      or invalid_total; a batch handed out again adds one to
--      resubmitted_total
--   2. pruning a final batch lowers no total: service_queues and
--      queue_progress count committed and invalid batches so far
--   3. queued, in_flight, retrying and oldest_queued_at come from the head
--      and the tail
--   4. gridha.metrics: a row per target with the gauges and the sums of the
--      totals, a row per instance with its gauges
--   5. the views' plans read gridha.batches by key only (no scan of it)
--   6. claims_taken_over_total counts claims taken from another instance
--      (not free ones); stale_writes_refused_total counts writes refused
--      with RG001, written by the refused instance's next call
--   7. the report that empties a queue settles the service's counters into
--      gridha.target_totals and marks them settled on its row (a call of
--      many reports, once at its end); whatever the services did (run dry,
--      get work again, run dry again), each counter of gridha.metrics
--      equals the sum over the target's service rows
--   8. a scrape reads no idle service: with 400 idle services, it fetches
--      no more rows of service_claims than there are services with work
--      and claimants, and scans it nowhere
--   9. a renamed target keeps every count under its new name; a count
--      noted under the old name is dropped, not written to a row no target
--      owns; a deleted target's rows go, and a new one of its name starts
--      at 0
--
-- One transaction, rolled back.
BEGIN;
SELECT plan(44);

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
\o
SET LOCAL gridha.renew_interval = '1h';
SET LOCAL gridha.soft_expiry = '2h';
SET LOCAL gridha.hard_expiry = '3h';
SET LOCAL gridha.prune_interval = -1;   -- no poll duty: this file prunes by hand
SET LOCAL gridha.retention = '1h';

TRUNCATE gridha.batches, gridha.service_claims, gridha.target_totals;
DELETE FROM gridha.leases;
DELETE FROM gridha.instances;

-- 0. a restore's INSERT of 'default' replaces the untouched default row: the
-- totals rows restored under that name stay (1)
INSERT INTO gridha.target_totals (target, slot, settled_committed) VALUES ('default', 100001, 3);
SAVEPOINT restore_default;
INSERT INTO gridha.targets (target, rate_burst) SELECT 'default', 2
 WHERE (SELECT submit_url IS NULL AND rate_burst = 1 FROM gridha.targets WHERE target = 'default');
SELECT is((SELECT rate_burst::bigint * 1000 + sum(o.settled_committed)::bigint
             FROM gridha.targets t JOIN gridha.target_totals o USING (target)
            WHERE t.target = 'default' GROUP BY t.rate_burst),
          2003::bigint,
          'an INSERT that replaces the untouched default row (what a restore does) keeps default''s totals rows');
ROLLBACK TO SAVEPOINT restore_default;
DELETE FROM gridha.target_totals;

CREATE TEMP TABLE ids AS SELECT gridha.register_instance('M') AS m;
CREATE FUNCTION pg_temp.m() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT m FROM ids $$;

-- a: 4 batches; b1 committed, b2 invalid, b3 delayed then handed out again
SELECT gridha.enqueue('a', 'a' || i, NULL) FROM generate_series(1, 4) AS i \g /dev/null
SELECT gridha.enqueue('z', 'z1', NULL) \g /dev/null
CREATE FUNCTION pg_temp.take(want text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    SELECT * INTO r FROM gridha.next_batches(pg_temp.m(), 10) n WHERE n.service_id = 'a';
    IF r.batch_id IS DISTINCT FROM want THEN
        RAISE EXCEPTION 'handed out %, not %', r.batch_id, want;
    END IF;
    RETURN r.epoch;
END
$$;
SELECT gridha.report_status(pg_temp.m(), 'a', 'a1', pg_temp.take('a1'), 'committed') \g /dev/null
SELECT gridha.report_submission(pg_temp.m(), 'a', 'a2', pg_temp.take('a2'), 'rejected') \g /dev/null
SELECT gridha.report_submission(pg_temp.m(), 'a', 'a3', pg_temp.take('a3'), 'delayed') \g /dev/null
UPDATE gridha.batches SET not_before = now() - interval '1 second' WHERE batch_id = 'a3';
UPDATE gridha.service_claims SET ready_at = now() - interval '1 second' WHERE service_id = 'a';

-- 3. from the head and the tail (3)
SELECT results_eq($$SELECT head_batch_id, head_status::text, queued, in_flight, retrying, committed, invalid
                      FROM gridha.service_queues WHERE service_id = 'a'$$,
                  $$VALUES ('a3', 'delayed', 1::bigint, 0::bigint, 1::bigint, 1::bigint, 1::bigint)$$,
                  'service_queues: a3 retrying, a4 queued, one committed, one invalid');
SELECT is((SELECT oldest_queued_at FROM gridha.queue_progress WHERE service_id = 'a'),
          (SELECT created_at FROM gridha.batches WHERE batch_id = 'a4'),
          'the oldest queued batch behind a retrying head is the next one');

SELECT gridha.report_submission(pg_temp.m(), 'a', 'a3', pg_temp.take('a3'), 'accepted') \g /dev/null
SELECT results_eq($$SELECT head_batch_id, head_status::text, queued, in_flight, retrying
                      FROM gridha.queue_progress WHERE service_id = 'a'$$,
                  $$VALUES ('a3', 'pending', 1::bigint, 1::bigint, 0::bigint)$$,
                  'queue_progress: a3 handed out again and pending, a4 queued');

-- 1. the totals (3)
SELECT results_eq($$SELECT committed_total, invalid_total, resubmitted_total, tail_seq
                      FROM gridha.service_claims WHERE service_id = 'a'$$,
                  $$VALUES (1::bigint, 1::bigint, 1::bigint, 4::bigint)$$,
                  'a''s totals: 1 committed, 1 invalid, 1 handed out again; 4 enqueued');
SELECT gridha.report_status(pg_temp.m(), 'a', 'a3', e, 'committed')
  FROM (SELECT epoch FROM gridha.service_claims WHERE service_id = 'a') c(e) \g /dev/null
SELECT is((SELECT committed_total FROM gridha.service_claims WHERE service_id = 'a'), 2::bigint,
          'a committed report adds one to committed_total');
SELECT is((SELECT committed_total + invalid_total FROM gridha.service_claims WHERE service_id = 'z'), 0::bigint,
          'another service''s totals do not move');

-- 2. pruning lowers no total (2)
UPDATE gridha.batches SET created_at = now() - interval '3 hours', finished_at = now() - interval '2 hours'
 WHERE batch_id IN ('a1', 'a2');
SELECT is(gridha.prune_batches(), 2::bigint, 'a1 and a2 are pruned');
SELECT results_eq($$SELECT committed, invalid FROM gridha.service_queues WHERE service_id = 'a'$$,
                  $$VALUES (2::bigint, 1::bigint)$$,
                  'service_queues still counts them: committed and invalid so far');

-- 4. gridha.metrics (4)
SELECT results_eq($$SELECT backlog, in_flight, enqueued_total, committed_total, invalid_total, resubmitted_total
                      FROM gridha.metrics WHERE scope = 'target' AND target = 'default'$$,
                  $$VALUES (2::bigint, 1::bigint, 5::bigint, 2::bigint, 1::bigint, 1::bigint)$$,
                  'the target''s row: 2 not final (a4 queued, z1 in flight), 5 enqueued, 2 committed, 1 invalid, 1 resubmitted');
SELECT ok((SELECT oldest_ready_age_seconds FROM gridha.metrics WHERE scope = 'target' AND target = 'default')
          >= 0, 'the target''s oldest ready age is a number of seconds');
SELECT results_eq($$SELECT instance_id, label, claims_held, lease_remaining_seconds > 3600
                      FROM gridha.metrics WHERE scope = 'instance'$$,
                  $$VALUES (pg_temp.m(), 'M', 2::bigint, true)$$,
                  'the instance''s row: its claims and the rest of its lease');
SELECT is((SELECT count(*) FROM gridha.metrics WHERE scope = 'target'),
          (SELECT count(*) FROM gridha.targets), 'one row per target');

-- 6. claims taken over, stale writes refused (7)
SELECT results_eq($$SELECT claims_taken_over_total, stale_writes_refused_total
                      FROM gridha.metrics WHERE scope = 'target' AND target = 'default'$$,
                  $$VALUES (0::bigint, 0::bigint)$$,
                  'claims taken while free are not taken over; nothing refused yet');
CREATE TEMP TABLE before_take AS
    SELECT service_id, epoch FROM gridha.service_claims WHERE claimant = pg_temp.m();
-- an operator expires M's claims; N takes them over
UPDATE gridha.service_claims SET hard_expiry = now() - interval '1 second'
 WHERE claimant = pg_temp.m();
CREATE TEMP TABLE ids_n AS SELECT gridha.register_instance('N') AS n;
CREATE TEMP TABLE taken AS SELECT service_id FROM gridha.acquire_claims((SELECT n FROM ids_n));
SELECT ok((SELECT count(*) FROM taken t JOIN before_take b USING (service_id)) >= 1,
          'N takes over M''s expired claims (its share of them)');
SELECT results_eq($$SELECT claims_taken_over_total FROM gridha.metrics
                     WHERE scope = 'target' AND target = 'default'$$,
                  $$SELECT count(*) FROM taken$$,
                  'claims_taken_over_total counts each claim N took from M');
SELECT throws_ok(format($$SELECT gridha.report_submission(%L, %L, %L, %s, 'accepted')$$,
                        pg_temp.m(), b.service_id,
                        (SELECT max(batch_id) FROM gridha.batches
                          WHERE service_id = b.service_id AND attempts > 0),
                        b.epoch),
                 'RG001', NULL, 'M''s report at its old epoch on a service N took is refused as stale')
  FROM before_take b JOIN taken USING (service_id)
 WHERE EXISTS (SELECT 1 FROM gridha.batches x WHERE x.service_id = b.service_id AND x.attempts > 0)
 ORDER BY b.service_id LIMIT 1;
SELECT results_eq($$SELECT stale_writes_refused_total FROM gridha.metrics
                     WHERE scope = 'target' AND target = 'default'$$,
                  $$VALUES (0::bigint)$$,
                  'the refusal is not written by the refused call (its error rolls it back)');
SELECT gridha.next_batch(pg_temp.m()) \g /dev/null
SELECT results_eq($$SELECT stale_writes_refused_total FROM gridha.metrics
                     WHERE scope = 'target' AND target = 'default'$$,
                  $$VALUES (1::bigint)$$,
                  'M''s next call writes it: stale_writes_refused_total is 1');
SELECT results_eq($$SELECT count(*), sum(claims_taken_over), sum(stale_writes_refused)
                     FROM gridha.target_totals WHERE target = 'default'$$,
                  $$SELECT 1::bigint, count(*)::numeric, 1::numeric FROM taken$$,
                  'one backend wrote both, into its one slot row');

-- 7. settled counters (8)
CREATE FUNCTION pg_temp.sums(t text) RETURNS TABLE (enq numeric, com numeric, inv numeric, res numeric)
LANGUAGE sql AS $$
    SELECT sum(tail_seq), sum(committed_total), sum(invalid_total), sum(resubmitted_total)
      FROM gridha.service_claims WHERE target = t
$$;
CREATE FUNCTION pg_temp.scraped(t text) RETURNS TABLE (enq numeric, com numeric, inv numeric, res numeric)
LANGUAGE sql AS $$
    SELECT enqueued_total::numeric, committed_total::numeric, invalid_total::numeric,
           resubmitted_total::numeric
      FROM gridha.metrics WHERE scope = 'target' AND target = t
$$;
-- N works service 's' (its own now): two batches, both final, the queue runs dry
CREATE FUNCTION pg_temp.drain(svc text, outcome text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    LOOP
        SELECT * INTO r FROM gridha.next_batches((SELECT n FROM ids_n), 100) x WHERE x.service_id = svc;
        EXIT WHEN r.batch_id IS NULL;
        IF outcome = 'rejected' THEN
            PERFORM gridha.report_submission((SELECT n FROM ids_n), svc, r.batch_id, r.epoch, 'rejected');
        ELSE
            PERFORM gridha.report_status((SELECT n FROM ids_n), svc, r.batch_id, r.epoch, 'committed');
        END IF;
    END LOOP;
END
$$;
SELECT gridha.enqueue('s', 's' || i, NULL) FROM generate_series(1, 2) AS i \g /dev/null
SELECT results_eq($$SELECT * FROM pg_temp.scraped('default')$$, $$SELECT * FROM pg_temp.sums('default')$$,
                  'before any queue ran dry, each counter is the sum over the service rows');
SELECT pg_temp.drain('s', 'committed');
SELECT results_eq($$SELECT head_seq, settled_seq, settled_committed, settled_invalid, settled_resubmitted
                      FROM gridha.service_claims WHERE service_id = 's'$$,
                  $$VALUES (NULL::bigint, 2::bigint, 2::bigint, 0::bigint, 0::bigint)$$,
                  's ran dry: its row is marked settled at 2 enqueued, 2 committed');
SELECT results_eq($$SELECT sum(settled_enqueued), sum(settled_committed), sum(settled_invalid)
                      FROM gridha.target_totals WHERE target = 'default'$$,
                  $$VALUES (2::numeric, 2::numeric, 0::numeric)$$,
                  'the target''s totals hold what s counted until it ran dry');
SELECT results_eq($$SELECT * FROM pg_temp.scraped('default')$$, $$SELECT * FROM pg_temp.sums('default')$$,
                  'after s ran dry, each counter is still the sum over the service rows');
-- s gets work again (one rejected), runs dry again
SELECT gridha.enqueue('s', 's3', NULL) \g /dev/null
SELECT results_eq($$SELECT * FROM pg_temp.scraped('default')$$, $$SELECT * FROM pg_temp.sums('default')$$,
                  's with work again: its new batch counts, its settled past once');
SELECT pg_temp.drain('s', 'rejected');
SELECT results_eq($$SELECT settled_seq, settled_committed, settled_invalid FROM gridha.service_claims
                     WHERE service_id = 's'$$,
                  $$VALUES (3::bigint, 2::bigint, 1::bigint)$$,
                  's ran dry again: settled at 3 enqueued, 2 committed, 1 invalid');
SELECT results_eq($$SELECT * FROM pg_temp.scraped('default')$$, $$SELECT * FROM pg_temp.sums('default')$$,
                  'after s ran dry twice, each counter is still the sum over the service rows');
-- a target of its own: its counters are its services' only
INSERT INTO gridha.targets (target, submit_url) VALUES ('other', 'http://127.0.0.1:9/{batch_id}');
SELECT gridha.enqueue('o', 'o1', NULL, 'other') \g /dev/null
SELECT pg_temp.drain('o', 'committed');
SELECT results_eq($$SELECT * FROM pg_temp.scraped('other')$$, $$VALUES (1::numeric, 1::numeric, 0::numeric, 0::numeric)$$,
                  'another target counts only its own services (1 enqueued, 1 committed)');

-- a settlement rolled back with its savepoint: the totals row is as the
-- reports before it left it, and the next settlement adds to that
SELECT gridha.enqueue('s', 's4', NULL) \g /dev/null
SELECT pg_temp.drain('s', 'committed');
SAVEPOINT settle_s5;
SELECT gridha.enqueue('s', 's5', NULL) \g /dev/null
SELECT pg_temp.drain('s', 'committed');
ROLLBACK TO SAVEPOINT settle_s5;
SELECT gridha.enqueue('s', 's6', NULL) \g /dev/null
SELECT pg_temp.drain('s', 'committed');
SELECT results_eq($$SELECT * FROM pg_temp.scraped('default')$$, $$SELECT * FROM pg_temp.sums('default')$$,
                  'settlements in one transaction, one of them rolled back to its savepoint: each counter is still the sum over the service rows');

-- many reports in one call: the queues run dry, settled once, at the end
SELECT gridha.enqueue('m' || i, 'm' || i || '-1', NULL) FROM generate_series(1, 3) AS i \g /dev/null
CREATE TEMP TABLE mh AS
    SELECT * FROM gridha.next_batches((SELECT n FROM ids_n), 100) x WHERE x.service_id LIKE 'm_';
SELECT results_eq($$SELECT count(*) FILTER (WHERE r.status = 'committed') FROM gridha.report_statuses(
                        (SELECT n FROM ids_n),
                        ARRAY(SELECT ROW(service_id, batch_id, epoch, 'committed', NULL)::gridha.status_report
                                FROM mh)) r$$,
                  $$SELECT count(*) FROM mh WHERE (SELECT count(*) FROM mh) >= 2$$,
                  'report_statuses commits in one call every head N was handed out (2 or more of the 3)');
SELECT results_eq($$SELECT * FROM pg_temp.scraped('default')$$, $$SELECT * FROM pg_temp.sums('default')$$,
                  'queues run dry in one call of report_statuses: each counter is still the sum over the service rows');

-- 9. a rename keeps a target's counts, a delete takes them (8)
SELECT throws_ok(format($$SELECT gridha.report_status(%L, 'o', 'o1', 7, 'committed')$$, pg_temp.m()),
                 'RG001', NULL, 'M''s report on o (N''s service) is refused as stale: M counts it for "other"');
CREATE TEMP TABLE other_before AS SELECT * FROM pg_temp.scraped('other');
UPDATE gridha.targets SET target = 'other2' WHERE target = 'other';
SELECT results_eq($$SELECT * FROM pg_temp.scraped('other2')$$, $$SELECT * FROM other_before$$,
                  'a renamed target keeps its counters (settled ones included) under its new name');
SELECT is((SELECT count(*) FROM gridha.target_totals WHERE target = 'other'), 0::bigint,
          'no totals row is left under the old name');
SELECT gridha.next_batch(pg_temp.m()) \g /dev/null
SELECT is((SELECT count(*) FROM gridha.target_totals WHERE target = 'other'), 0::bigint,
          'M''s next call drops the refusal it counted under the old name: no row of a name no target has');
SELECT results_eq($$SELECT * FROM pg_temp.scraped('other2')$$, $$SELECT * FROM pg_temp.sums('other2')$$,
                  'after the rename, each counter is still the sum over the service rows');
SELECT gridha.enqueue('o', 'o2', NULL, 'other2') \g /dev/null
SELECT pg_temp.drain('o', 'committed');
SELECT results_eq($$SELECT * FROM pg_temp.scraped('other2')$$, $$SELECT * FROM pg_temp.sums('other2')$$,
                  'a queue of the renamed target running dry settles under the new name: each counter is still the sum');
INSERT INTO gridha.targets (target, submit_url) VALUES ('gone', 'http://127.0.0.1:9/{batch_id}');
INSERT INTO gridha.target_totals (target, slot, stale_writes_refused, settled_enqueued, settled_committed)
VALUES ('gone', 100000, 1, 4, 4);
DELETE FROM gridha.targets WHERE target = 'gone';
SELECT is((SELECT count(*) FROM gridha.target_totals WHERE target = 'gone'), 0::bigint,
          'a deleted target''s totals rows go with it');
INSERT INTO gridha.targets (target, submit_url) VALUES ('gone', 'http://127.0.0.1:9/{batch_id}');
SELECT results_eq($$SELECT enqueued_total, committed_total, stale_writes_refused_total
                      FROM gridha.metrics WHERE scope = 'target' AND target = 'gone'$$,
                  $$VALUES (0::bigint, 0::bigint, 0::bigint)$$,
                  'a new target of a deleted one''s name starts at 0');

-- 8. a scrape reads no idle service (3)
SET LOCAL session_replication_role = replica;   -- rows as gridha leaves them, no triggers
INSERT INTO gridha.service_claims (service_id, claimant, epoch, tail_seq, committed_total,
                                   settled_seq, settled_committed)
SELECT 'idle' || i, pg_temp.m(), 1, 3, 3, 3, 3 FROM generate_series(1, 400) AS i;
RESET session_replication_role;
-- what the reports that emptied their queues settled (another backend's slot)
INSERT INTO gridha.target_totals (target, slot, settled_enqueued, settled_committed)
VALUES ('default', 100000, 1200, 1200);
ANALYZE gridha.service_claims;
CREATE TEMP TABLE reads (fetched bigint, returned bigint, seqscans bigint);
CREATE FUNCTION pg_temp.note_reads() RETURNS void LANGUAGE sql AS $$
    INSERT INTO reads
    SELECT pg_stat_get_xact_tuples_fetched('gridha.service_claims'::regclass),
           pg_stat_get_xact_tuples_returned('gridha.service_claims'::regclass),
           pg_stat_get_xact_numscans('gridha.service_claims'::regclass)
$$;
SELECT pg_temp.note_reads();
SELECT * FROM gridha.metrics \g /dev/null
SELECT pg_temp.note_reads();
SELECT cmp_ok((SELECT max(fetched) - min(fetched) + max(returned) - min(returned) FROM reads),
              '<=', (SELECT count(*) FROM gridha.service_claims WHERE head_seq IS NOT NULL)
                    + 2 * (SELECT count(DISTINCT claimant) FROM gridha.service_claims) + 4,
              'a scrape with 400 idle services reads only the rows of the services with work (and a few index descents)');
SELECT is((SELECT max(seqscans) - min(seqscans) FROM reads), 0::bigint,
          'a scrape scans service_claims nowhere');
SELECT results_eq($$SELECT * FROM pg_temp.scraped('default')$$, $$SELECT * FROM pg_temp.sums('default')$$,
                  'with the idle services (settled as gridha leaves them), each counter is the sum over the service rows');

-- 5. no scan of gridha.batches (2)
CREATE FUNCTION pg_temp.plan_of(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    line text;
    all_lines text := '';
BEGIN
    SET LOCAL enable_seqscan = off;     -- a tiny table: plan as for a large one
    FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
        all_lines := all_lines || line || E'\n';
    END LOOP;
    RESET enable_seqscan;
    RETURN all_lines;
END
$$;
SELECT unalike(pg_temp.plan_of('SELECT * FROM gridha.service_queues'), '%Seq Scan on batches%',
               'service_queues reads no batch but by key');
SELECT unalike(pg_temp.plan_of('SELECT * FROM gridha.metrics'), '%on batches%',
               'gridha.metrics reads no batch at all');

SELECT * FROM finish();
ROLLBACK;
