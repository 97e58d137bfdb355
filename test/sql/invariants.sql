-- invariants: a seq is reserved only by a row that is really inserted, and
-- a head without its batch row is repaired at the hand-out, never skipped
-- in silence (issue 38, item 1).
\set A '''aaaaaaaa-0000-0000-0000-0000000000a1'''
SET gridha.balance_claims = off;
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances;

CREATE FUNCTION pg_temp.queue(sid text) RETURNS TABLE (head_seq bigint, tail_seq bigint, ready boolean, in_flight boolean)
LANGUAGE sql AS $$
    SELECT head_seq, tail_seq, ready_at IS NOT NULL, in_flight FROM gridha.service_claims WHERE service_id = sid
$$;

INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('w', 'w1', '\x01'), ('w', 'w2', '\x02');

-- a producer's idempotent enqueue of a batch that exists: skipped, and the
-- service's tail stays where it was
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('w', 'w1', '\x01')
    ON CONFLICT DO NOTHING;
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('w', 'w1', '\x01')
    ON CONFLICT (service_id, batch_id) DO NOTHING;
-- an upsert updates the batch that exists and reserves nothing either
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('w', 'w2', '\x22')
    ON CONFLICT (service_id, batch_id) DO UPDATE SET payload = excluded.payload;
SELECT * FROM pg_temp.queue('w');
-- a plain duplicate still fails on the primary key, and changes nothing
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('w', 'w1', '\x01');
-- a new batch takes the next seq: no hole
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('w', 'w3', '\x03')
    ON CONFLICT DO NOTHING;
SELECT batch_id, seq, payload FROM gridha.batches WHERE service_id = 'w' ORDER BY seq;

-- the service goes out in order, every batch of it
SELECT batch_id FROM gridha.next_batch(:A);
SELECT gridha.report_submission(:A, 'w', 'w1', 1, 'accepted');
SELECT gridha.report_status(:A, 'w', 'w1', 1, 'committed');
SELECT batch_id FROM gridha.next_batch(:A);
SELECT gridha.report_submission(:A, 'w', 'w2', 1, 'rejected');
SELECT batch_id FROM gridha.next_batch(:A);
SELECT gridha.report_submission(:A, 'w', 'w3', 1, 'accepted');
SELECT gridha.report_status(:A, 'w', 'w3', 1, 'committed');
SELECT * FROM pg_temp.queue('w');

-- a finished batch's id enqueued again, ON CONFLICT DO NOTHING: the empty
-- queue stays empty (before 1.3 its head pointed at a seq with no row)
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('w', 'w3', '\x03')
    ON CONFLICT DO NOTHING;
SELECT * FROM pg_temp.queue('w');
SELECT count(*) AS nothing_to_hand_out FROM gridha.next_batch(:A);

-- Whatever else skips a row after its seq was reserved (here a user's
-- BEFORE trigger that fires after gridha's and returns NULL) leaves a
-- hole: the hand-out moves the head on, with a warning (RG020), counts it,
-- and hands out the next batch in the same call.
CREATE FUNCTION pg_temp.skip_x() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.batch_id LIKE 'x%' THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER zz_skip BEFORE INSERT ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION pg_temp.skip_x();
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('h', 'x1', '\x01');
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('h', 'h2', '\x02');
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('h', 'x3', '\x03');
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('h', 'h4', '\x04');
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('k', 'k1', '\x01');
-- h waited longest: the instance's oldest ready claim
UPDATE gridha.service_claims SET ready_at = now() - interval '1 h' WHERE service_id = 'h';
SELECT * FROM pg_temp.queue('h');
\set VERBOSITY sqlstate
SELECT service_id, batch_id FROM gridha.next_batch(:A);
\set VERBOSITY default
SELECT * FROM pg_temp.queue('h');
SELECT gridha.report_submission(:A, 'h', 'h2', 1, 'accepted');
SELECT gridha.report_status(:A, 'h', 'h2', 1, 'committed');
-- the next hole, at seq 3, between two batches
SELECT service_id, batch_id FROM gridha.next_batch(:A) ORDER BY 1;
SELECT service_id, batch_id FROM gridha.next_batch(:A) ORDER BY 1;
SELECT target, heads_repaired_total FROM gridha.metrics WHERE scope = 'target' ORDER BY target;
DROP TRIGGER zz_skip ON gridha.batches;

-- a hole at the tail: the queue is empty once the head reaches it, and the
-- hand-out goes on to the instance's other services in the same call
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('t', 't1', '\x01');
UPDATE gridha.service_claims SET tail_seq = tail_seq + 1 WHERE service_id = 't';
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('u', 'u1', '\x01');
SELECT gridha.report_submission(:A, 'h', 'h4', 1, 'accepted');
SELECT gridha.report_status(:A, 'h', 'h4', 1, 'committed');
SELECT gridha.report_submission(:A, 'k', 'k1', 1, 'accepted');
SELECT gridha.report_status(:A, 'k', 'k1', 1, 'committed');
SELECT service_id, batch_id FROM gridha.next_batch(:A);
SELECT gridha.report_submission(:A, 't', 't1', 1, 'accepted');
SELECT gridha.report_status(:A, 't', 't1', 1, 'committed');
-- t's head (seq 2, no row) waited longer than u's
UPDATE gridha.service_claims SET ready_at = now() - interval '1 h' WHERE service_id = 't';
SELECT * FROM pg_temp.queue('t');
SELECT sum(enqueued_total) AS enq_before, sum(committed_total) AS com_before
  FROM gridha.metrics WHERE scope = 'target' \gset
SELECT service_id, batch_id FROM gridha.next_batch(:A);
SELECT * FROM pg_temp.queue('t');
SELECT target, heads_repaired_total FROM gridha.metrics WHERE scope = 'target' ORDER BY target;
-- the queue that ran dry at the repair is settled, as a report that
-- empties it is: gridha.metrics reads only the services with work, so
-- without that its counters would drop t's 2 enqueued and 1 committed
SELECT service_id, tail_seq, settled_seq, committed_total, settled_committed
  FROM gridha.service_claims WHERE service_id = 't';
SELECT sum(enqueued_total) - :enq_before AS enqueued_change,
       sum(committed_total) - :com_before AS committed_change
  FROM gridha.metrics WHERE scope = 'target';

-- A late ledger answer never moves a newer hand-out (issue 38, item 3).
-- Attempt 1 is accepted (pending); the ledger says unknown, so the batch
-- is handed out again, attempt 2, under the same epoch. A second answer
-- about attempt 1 (unknown again, or committed), applied now, is refused:
-- the batch is submitting, and an earlier attempt of it was accepted.
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('m', 'm1', '\x01');
SELECT batch_id, attempts FROM gridha.next_batch(:A);
SELECT gridha.report_submission(:A, 'm', 'm1', 1, 'accepted');
SELECT gridha.report_status(:A, 'm', 'm1', 1, 'unknown');
SELECT batch_id, attempts FROM gridha.next_batch(:A);
SELECT gridha.report_status(:A, 'm', 'm1', 1, 'unknown');
SELECT gridha.report_status(:A, 'm', 'm1', 1, 'committed'::gridha.ledger_status);
SELECT service_id, batch_id, status, sqlstate FROM gridha.report_statuses(:A,
    ARRAY[('m', 'm1', 1, 'unknown', NULL)]::gridha.status_report[]);
SELECT status, attempts FROM gridha.batches WHERE batch_id = 'm1';
-- attempt 2's own acceptance, then its status, move it as before
SELECT gridha.report_submission(:A, 'm', 'm1', 1, 'accepted');
SELECT gridha.report_status(:A, 'm', 'm1', 1, 'committed');
-- a batch never accepted may still go from submitting to a final status
-- (a synchronous ledger's answer to the POST)
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('m', 'm2', '\x02');
SELECT batch_id, attempts FROM gridha.next_batch(:A);
SELECT gridha.report_status(:A, 'm', 'm2', 1, 'committed');

TRUNCATE gridha.batches, gridha.service_claims, gridha.instances, gridha.target_totals;

-- A free claim whose head is in flight is work (found by the fuzz's
-- invariant checker): a claim handed back with its head pending has nobody
-- asking the ledger about it until it is taken, and an idle instance takes
-- it whatever its count share (before 1.3 it counted as an idle claim).
SET gridha.balance_claims = on;
\set B '''bbbbbbbb-0000-0000-0000-0000000000b1'''
\set C '''cccccccc-0000-0000-0000-0000000000c1'''
\set D '''dddddddd-0000-0000-0000-0000000000d1'''
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('i6', 'x', '\x01'), ('i7', 'x', '\x01'), ('i8', 'x', '\x01');
SELECT count(*) AS handed_out FROM gridha.next_batches(:B, 10);
SELECT count(*) AS rejected FROM gridha.report_submissions(:B,
    ARRAY[('i6', 'x', 1, 'rejected', NULL), ('i7', 'x', 1, 'rejected', NULL),
          ('i8', 'x', 1, 'rejected', NULL)]::gridha.submission_report[]) WHERE status = 'invalid';
SELECT gridha.renew_claims(:C);
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('s5', 'f1', '\x01');
SELECT service_id, batch_id FROM gridha.next_batch(:D);
SELECT gridha.report_submission(:D, 's5', 'f1', 1, 'accepted');
SELECT gridha.release_claims(:D);
SELECT claimant IS NULL AS free, in_flight FROM gridha.service_claims WHERE service_id = 's5';
-- B holds three idle claims, more than its share of four services: it has
-- nothing to hand out, and takes s5
SELECT count(*) AS nothing FROM gridha.next_batch(:B);
SELECT c.service_id, i.instance_id = :B AS taken_by_b FROM gridha.service_claims c
  JOIN gridha.instances i ON i.instance_id = c.claimant WHERE c.service_id = 's5';
SELECT service_id, batch_id, status FROM gridha.pending_batches(:B);

TRUNCATE gridha.batches, gridha.service_claims, gridha.instances, gridha.target_totals;
