-- refusals: every refusal of the per-bucket functions with its SQLSTATE,
-- on bucket 3 (service s41) and bucket 4 (s10), and that none changes a
-- row: a bucket outside the layout or a service in another bucket
-- (RG036), NULL arguments (22004), bad leases and ids (22023), a batch id
-- enqueued twice (23505), another holder or a stale epoch (RG001), an
-- unknown batch (RG003), one never handed out (RG023), unknown words
-- (RG004, RG005), a role that did not take the bucket (RG008).
\set VERBOSITY default
\set SHOW_CONTEXT never
\set A aaaaaaaa-0000-0000-0000-00000000000a
\set B bbbbbbbb-0000-0000-0000-00000000000b
\set me :USER
SELECT gridha.bucket_of('s41', 64) AS s41, gridha.bucket_of('s10', 64) AS s10;
SELECT gridha.bucket_enqueue(3, 's41', 'b1', '\x4101');
SELECT gridha.bucket_enqueue(3, 's41', 'b2', '\x4102');
SELECT gridha.bucket_enqueue(4, 's10', 'b1', '\x1001');
SELECT gridha.bucket_acquire(3, :'A', '10 min');
SELECT gridha.bucket_next_batch(3, :'A', 1);

\echo '--- RG036: a service in another bucket (the detail names its own), a bucket outside the layout'
SELECT gridha.bucket_enqueue(4, 's41', 'b9', '\x00');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_enqueue(64, 's41', 'b9', '\x00');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_acquire(64, :'A');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_takeover(-1, :'A');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_renew(64, :'A', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_release(64, :'A', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_next_batch(64, :'A', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_submission(64, :'A', 's41', 'b1', 1, 'accepted');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_status(64, :'A', 's41', 'b1', 1, 'committed');
\echo :LAST_ERROR_SQLSTATE

\echo '--- 22004: a NULL argument, named by its place'
SELECT gridha.bucket_enqueue(3, NULL, 'b9', '\x00');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_enqueue(NULL, 's41', 'b9', '\x00');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_acquire(3, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_takeover(3, :'B', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_renew(3, :'A', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_release(3, :'A', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_next_batch(3, NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_submission(3, :'A', 's41', 'b1', 1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_status(3, :'A', 's41', NULL, 1, 'committed');
\echo :LAST_ERROR_SQLSTATE

\echo '--- 22023: a lease of zero or less, an empty or too long id'
SELECT gridha.bucket_acquire(4, :'A', '0 s');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_takeover(3, :'B', '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_renew(3, :'A', 1, '0 s');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_enqueue(3, 's41', '', '\x00');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_enqueue(gridha.bucket_of(repeat('s', 513), 64), repeat('s', 513), 'b1', '\x00');
\echo :LAST_ERROR_SQLSTATE

\echo '--- 23505: a batch id enqueued twice for a service (the key names the shard: SQLSTATE only)'
\set VERBOSITY sqlstate
SELECT gridha.bucket_enqueue(3, 's41', 'b1', '\x00');
\set VERBOSITY default

\echo '--- RG001: another instance, a stale epoch (A holds bucket 3 at epoch 1), a bucket nobody holds'
SELECT gridha.bucket_next_batch(3, :'B', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_submission(3, :'B', 's41', 'b1', 1, 'accepted');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_renew(3, :'B', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_release(3, :'B', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_next_batch(3, :'A', 7);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_status(3, :'A', 's41', 'b1', 0, 'committed');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_next_batch(4, :'A', 0);
\echo :LAST_ERROR_SQLSTATE

\echo '--- RG003: an unknown batch; RG023: a batch never handed out; RG002: a batch not in flight'
SELECT gridha.bucket_report_submission(3, :'A', 's41', 'nope', 1, 'accepted');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_submission(3, :'A', 's41', 'b2', 1, 'accepted');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_status(3, :'A', 's41', 'b1', 1, 'committed');
\echo :LAST_ERROR_SQLSTATE

\echo '--- RG004, RG005: words the reports do not know'
SELECT gridha.bucket_report_submission(3, :'A', 's41', 'b1', 1, 'exploded');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_status(3, :'A', 's41', 'b1', 1, 'lost');
\echo :LAST_ERROR_SQLSTATE

\echo '--- RG008: a role in gridha_submitter that did not take bucket 3 may not act as its holder (terse: the detail names the role that took it)'
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_citus_other;
CREATE ROLE regress_citus_other LOGIN IN ROLE gridha_submitter;
RESET client_min_messages;
\c - regress_citus_other
\set VERBOSITY terse
\set SHOW_CONTEXT never
SELECT gridha.bucket_next_batch(3, :'A', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_renew(3, :'A', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_submission(3, :'A', 's41', 'b1', 1, 'accepted');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_release(3, :'A', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_acquire(3, :'A');
\echo :LAST_ERROR_SQLSTATE
\echo '--- nor read the bucket tables'
SELECT count(*) FROM gridha.bucket_batches;
\echo :LAST_ERROR_SQLSTATE
\c - :me
\set VERBOSITY default
\set SHOW_CONTEXT never

\echo '--- nothing changed: A holds bucket 3 at epoch 1 with b1 in flight; bucket 4 free with b1 queued'
SELECT bucket, holder = :'A' AS a_holds, holder IS NULL AS free, epoch, holder_role = current_user AS taken_by_me
  FROM gridha.bucket_claims WHERE bucket IN (3, 4) ORDER BY bucket;
SELECT bucket, service_id, batch_id, seq, status, epoch, attempts, payload
  FROM gridha.bucket_batches WHERE bucket IN (3, 4) ORDER BY bucket, service_id, seq;
SELECT bucket, service_id, head_seq, tail_seq, ready_at IS NOT NULL AS ready, in_flight
  FROM gridha.bucket_services WHERE bucket IN (3, 4) ORDER BY bucket, service_id;
\echo '--- and the cycle goes on'
SELECT gridha.bucket_report_submission(3, :'A', 's41', 'b1', 1, 'accepted');
SELECT gridha.bucket_report_status(3, :'A', 's41', 'b1', 1, 'committed');
SELECT gridha.bucket_next_batch(3, :'A', 1);
SELECT gridha.bucket_report_submission(3, :'A', 's41', 'b2', 1, 'rejected');
SELECT gridha.bucket_release(3, :'A', 1);
DROP ROLE regress_citus_other;
