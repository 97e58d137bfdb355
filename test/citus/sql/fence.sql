-- fence: the epoch fence on bucket 0 (service s5): a take-over after the
-- holder's lease ran out raises the epoch by one, hands the batch in
-- flight out again, and refuses the stale holder's reports, hand-out,
-- renewal and release (RG001); on bucket 10 (s32) a holder whose lease ran
-- out, with no take-over, has its reports accepted and its hand-out
-- refused (RG001, renew first) until it renews. The holder hands out under
-- a lease of 10 minutes, then renews it for 10 ms: after pg_sleep(0.2) the
-- next statement's now() is past it, however slow the machine.
\set VERBOSITY default
\set SHOW_CONTEXT never
\set A aaaaaaaa-0000-0000-0000-00000000000a
\set B bbbbbbbb-0000-0000-0000-00000000000b
SELECT gridha.bucket_of('s5', 64) AS s5, gridha.bucket_of('s32', 64) AS s32;

\echo '--- take-over: A hands out b1, renews for 10 ms, the lease runs out; B takes the bucket over (epoch 2)'
SELECT gridha.bucket_enqueue(0, 's5', 'b1', '\x0501');
SELECT gridha.bucket_enqueue(0, 's5', 'b2', '\x0502');
SELECT gridha.bucket_acquire(0, :'A', '10 min');
SELECT gridha.bucket_next_batch(0, :'A', 1);
SELECT gridha.bucket_renew(0, :'A', 1, '10 ms') IS NOT NULL AS renewed_short;
SELECT pg_sleep(0.2);
SELECT gridha.bucket_acquire(0, :'B', '10 min') IS NULL AS acquire_is_not_takeover;
SELECT gridha.bucket_takeover(0, :'B', '10 min');
SELECT gridha.bucket_takeover(0, :'A', '10 min') IS NULL AS no_take_back;
SELECT holder = :'B' AS b_holds, epoch FROM gridha.bucket_claims WHERE bucket = 0;
\echo '--- the stale holder A: every call at epoch 1 refused (RG001)'
SELECT gridha.bucket_report_submission(0, :'A', 's5', 'b1', 1, 'accepted');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_status(0, :'A', 's5', 'b1', 1, 'committed');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_next_batch(0, :'A', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_renew(0, :'A', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_release(0, :'A', 1);
\echo :LAST_ERROR_SQLSTATE
\echo '--- nor at the new epoch: B holds it'
SELECT gridha.bucket_next_batch(0, :'A', 2);
\echo :LAST_ERROR_SQLSTATE
\echo '--- B hands b1 out again at epoch 2 (second attempt), commits it, then b2'
SELECT gridha.bucket_next_batch(0, :'B', 2);
SELECT gridha.bucket_report_submission(0, :'B', 's5', 'b1', 2, 'accepted');
SELECT gridha.bucket_report_status(0, :'B', 's5', 'b1', 2, 'committed');
SELECT gridha.bucket_next_batch(0, :'B', 2);
SELECT gridha.bucket_report_submission(0, :'B', 's5', 'b2', 2, 'accepted');
SELECT gridha.bucket_report_status(0, :'B', 's5', 'b2', 2, 'committed');
SELECT batch_id, status, epoch, attempts, instance_id = :'B' AS by_b
  FROM gridha.bucket_batches WHERE bucket = 0 AND service_id = 's5' ORDER BY seq;
\echo '--- released and acquired again: epoch 3'
SELECT gridha.bucket_release(0, :'B', 2);
SELECT gridha.bucket_acquire(0, :'A', '10 min');
SELECT gridha.bucket_release(0, :'A', 3);

\echo '--- lapsed: A''s 10 ms lease on bucket 10 runs out and nobody takes it over'
SELECT gridha.bucket_enqueue(10, 's32', 'b1', '\x3201');
SELECT gridha.bucket_enqueue(10, 's32', 'b2', '\x3202');
SELECT gridha.bucket_acquire(10, :'A', '10 min');
SELECT gridha.bucket_next_batch(10, :'A', 1);
SELECT gridha.bucket_renew(10, :'A', 1, '10 ms') IS NOT NULL AS renewed_short;
SELECT pg_sleep(0.2);
SELECT holder = :'A' AS a_holds, hard_expiry < now() AS lease_ran_out FROM gridha.bucket_claims WHERE bucket = 10;
\echo '--- its reports are accepted'
SELECT gridha.bucket_report_submission(10, :'A', 's32', 'b1', 1, 'accepted');
SELECT gridha.bucket_report_status(10, :'A', 's32', 'b1', 1, 'committed');
\echo '--- its hand-out is refused (RG001) until it renews (the detail names the time the lease ran out)'
\set VERBOSITY terse
SELECT gridha.bucket_next_batch(10, :'A', 1);
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_renew(10, :'A', 1, '10 min') > now() AS renewed;
SELECT gridha.bucket_next_batch(10, :'A', 1);
SELECT gridha.bucket_report_submission(10, :'A', 's32', 'b2', 1, 'accepted');
SELECT gridha.bucket_report_status(10, :'A', 's32', 'b2', 1, 'committed');
SELECT batch_id, status, epoch, attempts FROM gridha.bucket_batches WHERE bucket = 10 AND service_id = 's32' ORDER BY seq;
SELECT gridha.bucket_release(10, :'A', 1);
\echo '--- epochs: bucket 0 at 3, bucket 10 at 1; no batch above its bucket''s epoch'
SELECT bucket, epoch, holder IS NULL AS free FROM gridha.bucket_claims WHERE bucket IN (0, 10) ORDER BY bucket;
