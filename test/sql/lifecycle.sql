-- lifecycle: every status transition, and per-service order.
\set A '''aaaaaaaa-0000-0000-0000-000000000001'''
SET gridha.balance_claims = off;
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances;

CREATE FUNCTION pg_temp.show(sid text) RETURNS TABLE (batch_id text, seq bigint, status gridha.batch_status, attempts integer, epoch bigint)
LANGUAGE sql AS $$
    SELECT batch_id, seq, status, attempts, epoch FROM gridha.batches WHERE service_id = sid ORDER BY seq
$$;

-- queued -> submitting -> pending -> valid -> committed
SELECT gridha.enqueue('s1', 'b1', '\x01'), gridha.enqueue('s1', 'b2', '\x02'), gridha.enqueue('s1', 'b3', '\x03');
SELECT batch_id, attempts FROM gridha.next_batch(:A);
SELECT * FROM pg_temp.show('s1');
-- only one batch of a service is in flight: nothing more to hand out
SELECT count(*) AS more FROM gridha.next_batch(:A);
SELECT gridha.report_submission(:A, 's1', 'b1', 1, 'accepted');
SELECT count(*) AS more_while_pending FROM gridha.next_batch(:A);
SELECT gridha.report_status(:A, 's1', 'b1', 1, 'Valid');
SELECT count(*) AS more_while_valid FROM gridha.next_batch(:A);
SELECT gridha.report_status(:A, 's1', 'b1', 1, 'COMMITTED');
SELECT * FROM pg_temp.show('s1');

-- submitting -> delayed: backed off, then resubmitted before any later batch
SELECT batch_id, attempts FROM gridha.next_batch(:A);
-- (one transaction, so now() stands still and the backoff reads exactly)
BEGIN;
SELECT gridha.report_submission(:A, 's1', 'b2', 1, 'delayed', 'http 503');
SELECT status, detail, not_before - now() AS backoff, ready_at = not_before AS ready_then
  FROM gridha.batches JOIN gridha.service_claims USING (service_id) WHERE batch_id = 'b2';
SELECT count(*) AS before_not_before FROM gridha.next_batch(:A);
COMMIT;
UPDATE gridha.service_claims SET ready_at = now() - interval '1 ms' WHERE service_id = 's1';
SELECT batch_id, attempts FROM gridha.next_batch(:A);
SELECT status, not_before FROM gridha.batches WHERE batch_id = 'b2';
-- the second delay backs off longer: 250 ms + 500 ms
BEGIN;
SELECT gridha.report_submission(:A, 's1', 'b2', 1, 'DELAYED');
SELECT not_before - now() AS second_backoff FROM gridha.batches WHERE batch_id = 'b2';
COMMIT;
UPDATE gridha.service_claims SET ready_at = now() - interval '1 ms' WHERE service_id = 's1';
SELECT batch_id, attempts FROM gridha.next_batch(:A);

-- pending -> unknown: resubmitted at once, still before b3
SELECT gridha.report_submission(:A, 's1', 'b2', 1, 'accepted');
SELECT gridha.report_status(:A, 's1', 'b2', 1, 'unknown');
SELECT * FROM pg_temp.show('s1');
SELECT batch_id, attempts FROM gridha.next_batch(:A);
SELECT gridha.report_submission(:A, 's1', 'b2', 1, 'accepted');
SELECT gridha.report_status(:A, 's1', 'b2', 1, 'committed');

-- submitting -> invalid (rejected): final, and the service moves on
SELECT batch_id, attempts FROM gridha.next_batch(:A);
SELECT gridha.report_submission(:A, 's1', 'b3', 1, 'rejected', 'http 400');
SELECT * FROM pg_temp.show('s1');
SELECT service_id, head_seq, ready_at, in_flight FROM gridha.service_claims WHERE service_id = 's1';
SELECT count(*) AS drained FROM gridha.next_batch(:A);

-- pending -> invalid from the ledger; a new batch after an empty queue
SELECT gridha.enqueue('s1', 'b4', '\x04');
SELECT batch_id, attempts FROM gridha.next_batch(:A);
SELECT gridha.report_submission(:A, 's1', 'b4', 1, 'accepted');
SELECT gridha.report_status(:A, 's1', 'b4', 1, 'invalid');
SELECT * FROM pg_temp.show('s1');

-- submitting -> committed straight from the ledger (the monitor saw it first)
SELECT gridha.enqueue('s1', 'b5', '\x05');
SELECT batch_id FROM gridha.next_batch(:A);
SELECT gridha.report_status(:A, 's1', 'b5', 1, 'committed');

-- final statuses never change, whoever writes
\set VERBOSITY terse
UPDATE gridha.batches SET status = 'queued' WHERE batch_id = 'b1';
UPDATE gridha.batches SET status = 'committed' WHERE batch_id = 'b3';
\set VERBOSITY default
SELECT * FROM pg_temp.show('s1');

-- oldest waiting first across services
SELECT gridha.enqueue('s2', 'x1', '\x11');
SELECT gridha.enqueue('s3', 'y1', '\x21');
SELECT gridha.enqueue('s2', 'x2', '\x12');
UPDATE gridha.service_claims SET ready_at = now() - interval '10 seconds' WHERE service_id = 's3';
UPDATE gridha.service_claims SET ready_at = now() - interval '5 seconds' WHERE service_id = 's2';
SELECT service_id, batch_id FROM gridha.next_batch(:A);
SELECT service_id, batch_id FROM gridha.next_batch(:A);
SELECT count(*) FROM gridha.next_batch(:A);

-- a big queue leaves in exactly its enqueue order
SELECT count(*) FROM (SELECT gridha.enqueue('s4', 'q' || g, NULL) FROM generate_series(1, 50) g) e;
DO $$
DECLARE
    r record;
    got text[] := '{}';
BEGIN
    LOOP
        SELECT * INTO r FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-000000000001') WHERE service_id = 's4';
        EXIT WHEN NOT FOUND;
        got := got || r.batch_id;
        PERFORM gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', r.service_id, r.batch_id, r.epoch, 'accepted');
        PERFORM gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', r.service_id, r.batch_id, r.epoch, 'committed');
    END LOOP;
    RAISE NOTICE 'handed out % batches, in order: %', cardinality(got),
        got = ARRAY(SELECT 'q' || g FROM generate_series(1, 50) g);
END
$$;
