-- api: every SQL function of gridha once, on its normal path.
\set A '''aaaaaaaa-0000-0000-0000-000000000001'''
\set B '''bbbbbbbb-0000-0000-0000-000000000002'''
SET gridha.balance_claims = off;

-- register_instance makes a new external instance
SELECT gridha.register_instance('first') IS NOT NULL AS registered;
SELECT label, kind, last_seen_at IS NULL AS never_cycled FROM gridha.instances;

-- enqueue gives per-service positions; plain INSERT works and creates the service
SELECT gridha.enqueue('svc-a', 'a1', '\x0a01');
SELECT gridha.enqueue('svc-a', 'a2', '\x0a02');
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('svc-b', 'b1', '\x0b01');
SELECT service_id, batch_id, seq, status, attempts, epoch FROM gridha.batches ORDER BY service_id, seq;
SELECT service_id, target, claimant, epoch, head_seq, tail_seq, state FROM gridha.claims ORDER BY service_id;

-- acquire_claims takes every free claim (balance off) with epoch 1
SELECT * FROM gridha.acquire_claims(:A) ORDER BY service_id;
SELECT * FROM gridha.acquire_claims(:A) ORDER BY service_id;

-- renew_claims extends the instance's lease, which every claim it holds
-- follows (one row written); it returns how many it holds
UPDATE gridha.instances SET soft_expiry = now() + interval '1 second', hard_expiry = now() + interval '2 seconds';
SELECT gridha.renew_claims(:A);
SELECT count(*) AS renewed FROM gridha.claims
 WHERE soft_expiry > now() + interval '20 seconds' AND hard_expiry > now() + interval '170 seconds';
SELECT gridha.renew_claims(:B);

-- claimed_batches: the head of each held service, read-only
SELECT * FROM gridha.claimed_batches(:A) ORDER BY service_id;
SELECT * FROM gridha.claimed_batches(:A, 1);

-- next_batch hands out one head; next_batches more, one per service
SELECT service_id, batch_id, payload, epoch, attempts FROM gridha.next_batch(:A) WHERE service_id = 'svc-a';
SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batches(:A, 10);
SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batches(:A, 10);

-- verify_batch: true for the holder at its epoch, false otherwise
SELECT gridha.verify_batch(:A, 'svc-a', 'a1', 1) AS holder,
       gridha.verify_batch(:A, 'svc-a', 'a1', 2) AS wrong_epoch,
       gridha.verify_batch(:B, 'svc-a', 'a1', 1) AS other_instance,
       gridha.verify_batch(:A, 'svc-a', 'a2', 1) AS not_handed_out,
       gridha.verify_batch(:A, 'svc-a', 'nope', 1) AS unknown_batch;

-- report_submission: accepted -> pending
SELECT gridha.report_submission(:A, 'svc-a', 'a1', 1, 'accepted');
SELECT gridha.report_submission(:A, 'svc-b', 'b1', 1, 'accepted', 'http 202');
SELECT service_id, batch_id, status, detail, submitted_at IS NOT NULL AS submitted FROM gridha.batches ORDER BY service_id, seq;

-- pending_batches: what the monitor polls
SELECT service_id, batch_id, status, epoch FROM gridha.pending_batches(:A) ORDER BY service_id;
SELECT count(*) FROM gridha.pending_batches(:A, 1);

-- report_status: valid, then committed; the next batch becomes the head
SELECT gridha.report_status(:A, 'svc-a', 'a1', 1, 'valid');
SELECT gridha.report_status(:A, 'svc-a', 'a1', 1, 'committed');
SELECT service_id, head_seq, has_in_flight, submitting, ready_at IS NOT NULL AS ready FROM gridha.claims ORDER BY service_id;
SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batch(:A);

-- release_claims hands back what has nothing submitting
SELECT gridha.release_claims(:A);
SELECT service_id, claimant IS NOT NULL AS held, state FROM gridha.claims ORDER BY service_id;

-- expiry_settings shows the effective timings
SELECT * FROM gridha.expiry_settings();
SET gridha.soft_expiry = '4s';
SET gridha.renew_interval = '10s';
SET gridha.hard_expiry = '1s';
SELECT * FROM gridha.expiry_settings();
RESET gridha.soft_expiry;
RESET gridha.renew_interval;
RESET gridha.hard_expiry;

-- the operator views
SELECT service_id, head_batch_id, head_status, queued, in_flight, retrying, committed, invalid
  FROM gridha.service_queues ORDER BY service_id;
SELECT instance_id, kind, claims_held, submitting, health FROM gridha.instance_health WHERE instance_id = :A;
