-- 18_retention.sql: retention runs without a background worker and without
-- anyone calling run_maintenance (docs/operations.md, "Retention and
-- maintenance"): an instance's hand-out (next_batch) takes the free
-- maintenance lease, runs the due tick (it sweeps long-gone instances) and
-- a prune step that deletes the final batches finished longer than
-- gridha.retention ago, and only those; at most once per
-- gridha.prune_interval in its backend. gridha.prune_batches is the same
-- step by hand, bounded by gridha.prune_chunk.
--
-- One transaction, rolled back. pg_prove runs this file in a backend of
-- its own, so its first hand-out is the backend's first: its poll duty is
-- due.
BEGIN;
SELECT plan(17);

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
\o

-- Settings (2)
SELECT is((SELECT boot_val FROM pg_settings WHERE name = 'gridha.retention'), '604800',
          'gridha.retention defaults to 7 days');
SELECT is((SELECT boot_val FROM pg_settings WHERE name = 'gridha.prune_interval'), '1000',
          'gridha.prune_interval defaults to 1s');

SET LOCAL gridha.retention = '1h';
SET LOCAL gridha.prune_interval = '1h';
SET LOCAL gridha.renew_interval = '1h';
SET LOCAL gridha.soft_expiry = '2h';

TRUNCATE gridha.batches, gridha.service_claims;
DELETE FROM gridha.leases;
DELETE FROM gridha.maintenance_ticks;
DELETE FROM gridha.instances;

/*
 * final(service, batch, status, age): a batch of its own service, created
 * and made final (status) age ago.
 */
CREATE FUNCTION pg_temp.final(s text, b text, st gridha.batch_status, age interval)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM gridha.enqueue(s, b, NULL);
    UPDATE gridha.batches SET status = st, epoch = 1, attempts = 1, created_at = now() - age,
           handed_out_at = now() - age, finished_at = now() - age
     WHERE service_id = s AND batch_id = b;
    UPDATE gridha.service_claims SET head_seq = NULL, ready_at = NULL WHERE service_id = s;
END
$$;

SELECT pg_temp.final('old1', 'old1-b', 'committed', interval '2 hours');
SELECT pg_temp.final('old2', 'old2-b', 'committed', interval '3 days');
SELECT pg_temp.final('old3', 'old3-b', 'invalid', interval '2 hours');
SELECT pg_temp.final('young', 'young-b', 'committed', interval '10 minutes');
-- a batch that is not final, enqueued long ago: never pruned
SELECT gridha.enqueue('ready', 'ready-b', NULL) \g /dev/null
UPDATE gridha.batches SET created_at = now() - interval '3 days' WHERE batch_id = 'ready-b';

-- an instance gone for two days, holding nothing
CREATE TEMP TABLE ids AS
SELECT gridha.register_instance('gone') AS gone, gridha.register_instance('X') AS x;
UPDATE gridha.instances SET registered_at = now() - interval '2 days', last_seen_at = now() - interval '2 days'
 WHERE instance_id = (SELECT gone FROM ids);

-- The first hand-out of this backend (4)
SELECT results_eq($$SELECT service_id, batch_id FROM gridha.next_batch((SELECT x FROM ids))$$,
                  $$VALUES ('ready', 'ready-b')$$,
                  'the hand-out hands out the ready batch');
SELECT is((SELECT count(*) FROM gridha.batches WHERE batch_id IN ('old1-b', 'old2-b', 'old3-b')), 0::bigint,
          'it pruned the committed and invalid batches finished longer than the retention ago');
SELECT is((SELECT array_agg(batch_id ORDER BY batch_id) FROM gridha.batches), ARRAY['ready-b', 'young-b'],
          'it kept the younger final batch and the batch that is not final');
SELECT is((SELECT count(*) FROM gridha.instances WHERE instance_id = (SELECT gone FROM ids)), 0::bigint,
          'its maintenance tick swept the long-gone instance');

-- What ran (2)
SELECT is((SELECT leader FROM gridha.leases WHERE duty = 'gridha.maintenance'), (SELECT x FROM ids),
          'the polling instance took the free maintenance lease');
SELECT is((SELECT pruned_batches FROM gridha.maintenance_ticks WHERE duty = 'gridha.maintenance'), 3::bigint,
          'the tick it ran records the batches pruned');

-- At most once per gridha.prune_interval (1 h here) in a backend (1)
SELECT pg_temp.final('old4', 'old4-b', 'committed', interval '2 hours');
SELECT is((SELECT count(*) FROM gridha.next_batch((SELECT x FROM ids))), 0::bigint, 'a second poll finds nothing');
SELECT is((SELECT count(*) FROM gridha.batches WHERE batch_id = 'old4-b'), 1::bigint,
          'a second poll within the interval prunes nothing');

-- gridha.prune_batches: one step by hand (7)
SET LOCAL gridha.retention = -1;
SELECT is(gridha.prune_batches(), 0::bigint, 'with retention -1 a prune step deletes nothing');
SET LOCAL gridha.retention = '1h';
SELECT pg_temp.final('old5', 'old5-b', 'invalid', interval '5 hours');
SELECT pg_temp.final('old6', 'old6-b', 'committed', interval '4 hours');
SET LOCAL gridha.prune_chunk = 2;
SELECT is(gridha.prune_batches(), 2::bigint, 'a step deletes at most gridha.prune_chunk batches');
SELECT is((SELECT array_agg(batch_id ORDER BY batch_id) FROM gridha.batches),
          ARRAY['old4-b', 'ready-b', 'young-b'], 'the oldest first');
SELECT is(gridha.prune_batches(10), 1::bigint, 'max_batches bounds a step by hand');
SELECT is(gridha.prune_batches(10), 0::bigint, 'then nothing is left to prune');
UPDATE gridha.batches SET finished_at = now() - interval '3 days' WHERE batch_id = 'ready-b';
SELECT is(gridha.prune_batches(10), 0::bigint,
          'a batch that is not final is not pruned, whatever its times say');
SELECT is((SELECT status FROM gridha.batches WHERE batch_id = 'ready-b'), 'submitting'::gridha.batch_status,
          'it is still there, submitting');

SELECT * FROM finish();
ROLLBACK;
