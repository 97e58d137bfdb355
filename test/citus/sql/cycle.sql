-- cycle: the per-bucket functions' happy paths on bucket 6 (services s52
-- and s53), each called as a statement of its own (Citus sends it whole
-- to the worker holding the bucket): enqueue, acquire, renew, hand-out in
-- order with one batch in flight per service, every report outcome and
-- ledger status, release and a new holder at a higher epoch, and final
-- statuses that never change.
\set VERBOSITY default
\set SHOW_CONTEXT never
\set A aaaaaaaa-0000-0000-0000-00000000000a
\set B bbbbbbbb-0000-0000-0000-00000000000b
SELECT gridha.bucket_of('s52', 64) AS s52, gridha.bucket_of('s53', 64) AS s53;

\echo '--- enqueue: each service its own seqs, from 1'
SELECT gridha.bucket_enqueue(6, 's52', 'b1', '\x5201');
SELECT gridha.bucket_enqueue(6, 's52', 'b2', '\x5202');
SELECT gridha.bucket_enqueue(6, 's53', 'b1', '\x5301');
SELECT gridha.bucket_enqueue(6, 's52', 'b3', '\x5203');
SELECT service_id, head_seq, tail_seq, ready_at IS NOT NULL AS ready, in_flight
  FROM gridha.bucket_services WHERE bucket = 6 ORDER BY service_id;
SELECT service_id, batch_id, seq, status, epoch, attempts FROM gridha.bucket_batches
 WHERE bucket = 6 ORDER BY service_id, seq;

\echo '--- acquire: a free bucket (epoch 0 -> 1); the holder again (a renewal: epoch stays); another instance (NULL)'
SELECT gridha.bucket_acquire(6, :'A', '10 min');
SELECT gridha.bucket_acquire(6, :'A', '10 min');
SELECT gridha.bucket_acquire(6, :'B', '10 min') IS NULL AS b_gets_nothing;
\echo '--- takeover while the lease runs, or of one''s own bucket: NULL, nothing changes'
SELECT gridha.bucket_takeover(6, :'B', '10 min') IS NULL AS b_gets_nothing;
SELECT gridha.bucket_takeover(6, :'A', '10 min') IS NULL AS a_gets_nothing;
SELECT holder = :'A' AS a_holds, epoch, holder_role = current_user AS taken_by_me,
       hard_expiry > now() + interval '5 min' AS lease_runs, soft_expiry < hard_expiry AS soft_first
  FROM gridha.bucket_claims WHERE bucket = 6;
\echo '--- renew: the new hard expiry (lease from now)'
SELECT gridha.bucket_renew(6, :'A', 1, '20 min') > now() + interval '15 min' AS renewed;

\echo '--- hand-out: the service that waited longest first, one in flight per service'
SELECT gridha.bucket_next_batch(6, :'A', 1);
SELECT gridha.bucket_next_batch(6, :'A', 1);
SELECT gridha.bucket_next_batch(6, :'A', 1) IS NULL AS nothing_ready;
SELECT service_id, head_seq, tail_seq, ready_at IS NOT NULL AS ready, in_flight
  FROM gridha.bucket_services WHERE bucket = 6 ORDER BY service_id;

\echo '--- accepted (pending) and valid keep the batch in flight; committed makes the next batch the head'
SELECT gridha.bucket_report_submission(6, :'A', 's52', 'b1', 1, 'accepted');
SELECT gridha.bucket_next_batch(6, :'A', 1) IS NULL AS nothing_ready;
SELECT gridha.bucket_report_status(6, :'A', 's52', 'b1', 1, 'pending');
SELECT gridha.bucket_report_status(6, :'A', 's52', 'b1', 1, 'valid');
SELECT gridha.bucket_next_batch(6, :'A', 1) IS NULL AS nothing_ready;
SELECT gridha.bucket_report_status(6, :'A', 's52', 'b1', 1, 'committed');
SELECT gridha.bucket_next_batch(6, :'A', 1);

\echo '--- rejected: invalid, final (s53 has nothing more)'
SELECT gridha.bucket_report_submission(6, :'A', 's53', 'b1', 1, 'rejected');

\echo '--- delayed: the batch goes out again after its backoff (250 ms after a first hand-out), not before; a ledger status unknown at once'
SELECT gridha.bucket_report_submission(6, :'A', 's52', 'b2', 1, 'delayed');
SELECT gridha.bucket_next_batch(6, :'A', 1) IS NULL AS waiting;
SELECT s.ready_at - b.submitted_at = interval '250 ms' AS backoff_250ms, s.in_flight
  FROM gridha.bucket_services s JOIN gridha.bucket_batches b ON b.bucket = s.bucket AND b.service_id = s.service_id
 WHERE s.bucket = 6 AND s.service_id = 's52' AND b.batch_id = 'b2';
SELECT pg_sleep(0.3);
SELECT gridha.bucket_next_batch(6, :'A', 1);
SELECT gridha.bucket_report_submission(6, :'A', 's52', 'b2', 1, 'accepted');
SELECT gridha.bucket_report_status(6, :'A', 's52', 'b2', 1, 'unknown');
SELECT gridha.bucket_next_batch(6, :'A', 1);
SELECT gridha.bucket_report_submission(6, :'A', 's52', 'b2', 1, 'accepted');
SELECT gridha.bucket_report_status(6, :'A', 's52', 'b2', 1, 'committed');
SELECT gridha.bucket_next_batch(6, :'A', 1);

\echo '--- release with b3 in flight: the bucket is free, b3 ready again; the old holder is fenced (RG001)'
SELECT gridha.bucket_release(6, :'A', 1);
SELECT holder IS NULL AS free, epoch, hard_expiry IS NULL AS no_lease FROM gridha.bucket_claims WHERE bucket = 6;
SELECT gridha.bucket_report_submission(6, :'A', 's52', 'b3', 1, 'accepted');
\echo :LAST_ERROR_SQLSTATE
\echo '--- a new holder: epoch 2; b3 goes out again at epoch 2, its second attempt'
SELECT gridha.bucket_acquire(6, :'B', '10 min');
SELECT gridha.bucket_next_batch(6, :'B', 2);
SELECT gridha.bucket_report_submission(6, :'B', 's52', 'b3', 2, 'accepted');
SELECT gridha.bucket_report_status(6, :'B', 's52', 'b3', 2, 'committed');
SELECT gridha.bucket_next_batch(6, :'B', 2) IS NULL AS drained;

\echo '--- final statuses never change: a repeated report answers the same, another is refused (RG002)'
SELECT gridha.bucket_report_status(6, :'B', 's52', 'b3', 2, 'committed');
SELECT gridha.bucket_report_status(6, :'B', 's52', 'b3', 2, 'invalid');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_submission(6, :'B', 's52', 'b3', 2, 'rejected');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_status(6, :'B', 's52', 'b1', 2, 'invalid');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_submission(6, :'B', 's53', 'b1', 2, 'accepted');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_submission(6, :'A', 's53', 'b1', 1, 'rejected');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_enqueue(6, 's53', 'b2', '\x5302');
SELECT gridha.bucket_next_batch(6, :'B', 2);
SELECT gridha.bucket_report_submission(6, :'B', 's53', 'b2', 2, 'accepted');
SELECT gridha.bucket_report_status(6, :'B', 's53', 'b2', 2, 'invalid');
SELECT gridha.bucket_report_status(6, :'B', 's53', 'b2', 2, 'committed');
\echo :LAST_ERROR_SQLSTATE

\echo '--- the rows: every batch final, in seq order, each with its epoch and attempts'
SELECT service_id, batch_id, seq, status, epoch, attempts, instance_id = :'A' AS by_a,
       handed_out_at IS NOT NULL AS handed_out, submitted_at IS NOT NULL AS submitted,
       finished_at >= handed_out_at AS finished_after_hand_out
  FROM gridha.bucket_batches WHERE bucket = 6 ORDER BY service_id, seq;
SELECT service_id, head_seq, tail_seq, ready_at IS NOT NULL AS ready, in_flight
  FROM gridha.bucket_services WHERE bucket = 6 ORDER BY service_id;
SELECT gridha.bucket_release(6, :'B', 2);
