-- 04_behaviour.sql: a batch's lifecycle and the two-phase expiry, as
-- assertions.
--
-- The whole file is one transaction, so now() stands still: time passes
-- only where an UPDATE moves a timestamp into the past (not_before and
-- ready_at for a backoff, soft_expiry/hard_expiry for a claim). Nothing
-- sleeps.
--
-- Instances: A = aaaaaaaa-0000-0000-0000-00000000000a,
--            B = bbbbbbbb-0000-0000-0000-00000000000b.
BEGIN;
SELECT plan(83);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = off;  -- one instance may take everything
\o

-- ---------------------------------------------------------------------------
-- The normal cycle; outcome and status words in any case
-- ---------------------------------------------------------------------------

SELECT is(gridha.enqueue('case', 'c1', convert_to('p1', 'UTF8')), 1::bigint, 'enqueue: first batch of a service gets seq 1');
SELECT is(gridha.enqueue('case', 'c2', convert_to('p2', 'UTF8')), 2::bigint, 'enqueue: second batch gets seq 2');
SELECT results_eq(
    $$SELECT claimant, epoch, target FROM gridha.service_claims WHERE service_id = 'case'$$,
    $$VALUES (NULL::uuid, 0::bigint, 'default'::text)$$,
    'enqueue creates the service: free, epoch 0, target default');

SELECT results_eq(
    $$SELECT service_id, batch_id, payload, epoch, attempts
        FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$VALUES ('case'::text, 'c1'::text, convert_to('p1', 'UTF8'), 1::bigint, 1)$$,
    'next_batch: A claims the service (epoch 1) and is handed the head c1, attempt 1');
SELECT is((SELECT status::text FROM gridha.batches WHERE batch_id = 'c1'), 'submitting',
          'the handed-out batch is submitting');
SELECT is(gridha.verify_batch('aaaaaaaa-0000-0000-0000-00000000000a', 'case', 'c1', 1), true,
          'verify_batch: c1 is still A''s to submit');
SELECT is_empty($$SELECT * FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
                'next_batch: c2 waits while c1 is submitting (one batch in flight per service)');

SELECT is(gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'case', 'c1', 1, 'ACCEPTED'),
          'pending'::gridha.batch_status, 'report_submission: outcome ACCEPTED (any case) -> pending');
SELECT results_eq(
    $$SELECT service_id, batch_id, status::text, epoch, submitted_at = now()
        FROM gridha.pending_batches('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$VALUES ('case'::text, 'c1'::text, 'pending'::text, 1::bigint, true)$$,
    'pending_batches: c1 is pending, submitted now');
SELECT is_empty($$SELECT * FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
                'next_batch: c2 still waits while c1 is pending');
SELECT is(gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'case', 'c1', 1, 'Valid'),
          'valid'::gridha.batch_status, 'report_status: Valid (any case) -> valid');
SELECT is((SELECT string_agg(status::text, ',') FROM gridha.pending_batches('aaaaaaaa-0000-0000-0000-00000000000a')),
          'valid', 'pending_batches: a valid batch is still polled');
SELECT is(gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'case', 'c1', 1, 'COMMITTED'),
          'committed'::gridha.batch_status, 'report_status: COMMITTED (any case) -> committed');
SELECT ok((SELECT finished_at = now() FROM gridha.batches WHERE batch_id = 'c1'),
          'a committed batch records when it finished');
SELECT is_empty($$SELECT * FROM gridha.pending_batches('aaaaaaaa-0000-0000-0000-00000000000a')$$,
                'pending_batches: nothing left to poll');
SELECT results_eq(
    $$SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$VALUES ('case'::text, 'c2'::text, 1::bigint, 1)$$,
    'next_batch: once c1 is committed, c2 is handed out');
SELECT is(gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'case', 'c2', 1, 'Accepted'),
          'pending'::gridha.batch_status, 'report_submission: Accepted -> pending');
SELECT is(gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'case', 'c2', 1, 'cOmMiTtEd'),
          'committed'::gridha.batch_status, 'report_status: cOmMiTtEd -> committed');
SELECT results_eq(
    $$SELECT head_batch_id, queued, in_flight, retrying, committed, invalid
        FROM gridha.service_queues WHERE service_id = 'case'$$,
    $$VALUES (NULL::text, 0::bigint, 0::bigint, 0::bigint, 2::bigint, 0::bigint)$$,
    'service_queues: both batches committed, no head left');

-- A target given at enqueue must exist and becomes the service's target.
INSERT INTO gridha.targets (target, submit_url) VALUES ('tap-ledger', 'http://127.0.0.1:1/{service_id}/{batch_id}');
SELECT is(gridha.enqueue('tgt', 't1', NULL, 'tap-ledger'), 1::bigint, 'enqueue with an existing target');
SELECT is((SELECT target FROM gridha.service_claims WHERE service_id = 'tgt'), 'tap-ledger',
          'the new service is on the given target');
SELECT is(gridha.enqueue('tgt', 't2', NULL), 2::bigint, 'a later enqueue without a target ...');
SELECT is((SELECT target FROM gridha.service_claims WHERE service_id = 'tgt'), 'tap-ledger',
          '... keeps the service''s target');
-- Only finished batches may be deleted: finish these two, then drop the service.
SELECT throws_ok($$DELETE FROM gridha.batches WHERE service_id = 'tgt'$$, 'RG002',
                 'batch "t1" of service "tgt" is queued and cannot be deleted',
                 'deleting an unfinished batch is refused (RG002)');
SELECT is((SELECT string_agg(batch_id || ':' || status, ',' ORDER BY seq) FROM gridha.batches WHERE service_id = 'tgt'),
          't1:queued,t2:queued', '... and the refused DELETE removed nothing');
UPDATE gridha.batches SET status = 'invalid' WHERE service_id = 'tgt';
DELETE FROM gridha.batches WHERE service_id = 'tgt';
DELETE FROM gridha.service_claims WHERE service_id = 'tgt';

-- ---------------------------------------------------------------------------
-- delayed: back after not_before, before the later batches; unknown: back at
-- once; rejected: invalid, and the next batch becomes available
-- ---------------------------------------------------------------------------

SELECT gridha.enqueue('dly', 'd1', NULL), gridha.enqueue('dly', 'd2', NULL), gridha.enqueue('dly', 'd3', NULL) \g /dev/null

SELECT results_eq(
    $$SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$VALUES ('dly'::text, 'd1'::text, 1::bigint, 1)$$,
    'next_batch: A takes the new service dly and is handed d1, attempt 1');
SELECT is(gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'dly', 'd1', 1, 'delayed', 'http 503'),
          'delayed'::gridha.batch_status, 'report_submission: delayed -> delayed');
SELECT results_eq(
    $$SELECT status::text, not_before > now(), not_before - now(), detail
        FROM gridha.batches WHERE service_id = 'dly' AND batch_id = 'd1'$$,
    $$VALUES ('delayed'::text, true, interval '250 milliseconds', 'http 503'::text)$$,
    'a delayed batch gets not_before in the future (250 ms backoff on attempt 1) and keeps the detail');
SELECT is((SELECT ready_at FROM gridha.service_claims WHERE service_id = 'dly'),
          (SELECT not_before FROM gridha.batches WHERE service_id = 'dly' AND batch_id = 'd1'),
          'the service becomes ready again at the batch''s not_before');
SELECT is_empty($$SELECT * FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
                'next_batch: neither d1 (before its not_before) nor d2 (behind it) is handed out');
SELECT is((SELECT status::text FROM gridha.batches WHERE service_id = 'dly' AND batch_id = 'd2'), 'queued',
          'd2 is still queued');

-- time passes
UPDATE gridha.batches SET not_before = now() - interval '1 second' WHERE service_id = 'dly' AND batch_id = 'd1';
UPDATE gridha.service_claims SET ready_at = now() - interval '1 second' WHERE service_id = 'dly';

SELECT results_eq(
    $$SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$VALUES ('dly'::text, 'd1'::text, 1::bigint, 2)$$,
    'next_batch: after not_before, d1 is handed out again with attempt 2, before d2');
SELECT is((SELECT not_before FROM gridha.batches WHERE service_id = 'dly' AND batch_id = 'd1'), NULL,
          'the new hand-out clears not_before');
SELECT is(gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'dly', 'd1', 1, 'Delayed'),
          'delayed'::gridha.batch_status, 'report_submission: Delayed again -> delayed');
SELECT is((SELECT not_before - now() FROM gridha.batches WHERE service_id = 'dly' AND batch_id = 'd1'),
          interval '750 milliseconds', 'the backoff grows by 500 ms per attempt (750 ms on attempt 2)');

UPDATE gridha.batches SET not_before = now() - interval '1 second' WHERE service_id = 'dly' AND batch_id = 'd1';
UPDATE gridha.service_claims SET ready_at = now() - interval '1 second' WHERE service_id = 'dly';

SELECT results_eq(
    $$SELECT batch_id, attempts FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$VALUES ('d1'::text, 3)$$,
    'next_batch: d1 again, attempt 3');
SELECT is(gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'dly', 'd1', 1, 'accepted'),
          'pending'::gridha.batch_status, 'd1 accepted on attempt 3 -> pending');
SELECT is(gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'dly', 'd1', 1, 'UNKNOWN'),
          'unknown'::gridha.batch_status, 'report_status: UNKNOWN (the ledger lost it) -> unknown');
SELECT results_eq(
    $$SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$VALUES ('dly'::text, 'd1'::text, 1::bigint, 4)$$,
    'next_batch: an unknown batch is handed out again at once (attempt 4), before d2');
SELECT is(gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'dly', 'd1', 1, 'accepted'),
          'pending'::gridha.batch_status, 'd1 accepted on attempt 4 -> pending');
SELECT is(gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'dly', 'd1', 1, 'committed'),
          'committed'::gridha.batch_status, 'd1 committed');
SELECT results_eq(
    $$SELECT batch_id, attempts FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$VALUES ('d2'::text, 1)$$,
    'next_batch: only now is d2 handed out, attempt 1');
SELECT is(gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'dly', 'd2', 1, 'Rejected', 'http 400'),
          'invalid'::gridha.batch_status, 'report_submission: Rejected -> invalid');
SELECT ok((SELECT finished_at = now() AND detail = 'http 400' FROM gridha.batches WHERE service_id = 'dly' AND batch_id = 'd2'),
          'a rejected batch is finished, with its detail');
SELECT results_eq(
    $$SELECT batch_id, attempts FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$VALUES ('d3'::text, 1)$$,
    'next_batch: after a rejection the next batch, d3, is available at once');
SELECT ctid::text AS dly_claim_ctid FROM gridha.service_claims WHERE service_id = 'dly' \gset
SELECT is(gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'dly', 'd3', 1, 'accepted'),
          'pending'::gridha.batch_status, 'd3 accepted -> pending');
SELECT is((SELECT ctid::text FROM gridha.service_claims WHERE service_id = 'dly'), :'dly_claim_ctid',
          'an acceptance writes the batch row only: the claim row is the same row version');
SELECT is(gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'dly', 'd3', 1, 'Invalid'),
          'invalid'::gridha.batch_status, 'report_status: Invalid (the ledger refused it) -> invalid');

-- committed and invalid never change
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'dly', 'd1', 1, 'invalid')$$,
                 'RG002', NULL, 'a committed batch cannot be reported invalid');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'dly', 'd2', 1, 'committed')$$,
                 'RG002', NULL, 'an invalid batch cannot be reported committed');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'dly', 'd3', 1, 'accepted')$$,
                 'RG002', NULL, 'an invalid batch cannot be resubmitted');
SELECT throws_ok($$UPDATE gridha.batches SET status = 'queued' WHERE service_id = 'dly'$$,
                 'RG002', NULL, 'no UPDATE can send a final batch back to the queue');
SELECT results_eq(
    $$SELECT batch_id, status::text, attempts FROM gridha.batches WHERE service_id = 'dly' ORDER BY seq$$,
    $$VALUES ('d1'::text, 'committed'::text, 4), ('d2', 'invalid', 1), ('d3', 'invalid', 1)$$,
    'dly ends committed, invalid, invalid, in order, with their attempts');
SELECT is_empty($$SELECT * FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
                'next_batch: a final batch is never handed out again');

-- ---------------------------------------------------------------------------
-- Two-phase expiry
-- ---------------------------------------------------------------------------

SELECT gridha.enqueue('tx-slow', 's1', NULL), gridha.enqueue('tx-slow', 's2', NULL),
       gridha.enqueue('tx-idle', 'i1', NULL), gridha.enqueue('tx-idle', 'i2', NULL) \g /dev/null

SELECT set_eq(
    $$SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batches('aaaaaaaa-0000-0000-0000-00000000000a', 10)$$,
    $$VALUES ('tx-slow'::text, 's1'::text, 1::bigint, 1), ('tx-idle', 'i1', 1, 1)$$,
    'next_batches: A is handed s1 and i1 (distinct services)');
SELECT is(gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'tx-idle', 'i1', 1, 'accepted'),
          'pending'::gridha.batch_status, 'i1 accepted: tx-idle has nothing submitting');

-- both claims pass their soft expiry
UPDATE gridha.service_claims SET soft_expiry = now() - interval '1 second'
 WHERE service_id IN ('tx-slow', 'tx-idle');

SELECT results_eq(
    $$SELECT service_id, state::text FROM gridha.claims WHERE service_id IN ('tx-idle', 'tx-slow') ORDER BY service_id$$,
    $$VALUES ('tx-idle'::text, 'soft_expired'::text), ('tx-slow', 'slow')$$,
    'claims: soft-expired and idle is soft_expired; soft-expired and submitting is slow');
SELECT results_eq(
    $$SELECT * FROM gridha.acquire_claims('bbbbbbbb-0000-0000-0000-00000000000b')$$,
    $$VALUES ('tx-idle'::text, 2::bigint)$$,
    'acquire_claims: B takes the soft-expired idle claim with epoch 2, and not the one submitting');
SELECT results_eq(
    $$SELECT service_id, claimant, epoch FROM gridha.service_claims WHERE service_id IN ('tx-idle', 'tx-slow') ORDER BY service_id$$,
    $$VALUES ('tx-idle'::text, 'bbbbbbbb-0000-0000-0000-00000000000b'::uuid, 2::bigint),
             ('tx-slow', 'aaaaaaaa-0000-0000-0000-00000000000a', 1)$$,
    'tx-idle is B''s at epoch 2; tx-slow stays A''s at epoch 1');
SELECT ok((SELECT soft_expiry > now() AND hard_expiry > soft_expiry FROM gridha.claims WHERE service_id = 'tx-idle'),
          'a takeover gives the claim fresh soft and hard expiries (the taker''s lease)');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'tx-idle', 'i1', 1, 'committed')$$,
                 'RG001', 'stale claim on service "tx-idle"', 'A''s late status report on tx-idle -> RG001');
SELECT is((SELECT status::text FROM gridha.batches WHERE batch_id = 'i1'), 'pending',
          'i1 stays pending after the refused report');
SELECT results_eq(
    $$SELECT service_id, batch_id, status::text, epoch FROM gridha.pending_batches('bbbbbbbb-0000-0000-0000-00000000000b')$$,
    $$VALUES ('tx-idle'::text, 'i1'::text, 'pending'::text, 2::bigint)$$,
    'pending_batches: B''s monitor now polls i1, under epoch 2');
SELECT is(gridha.report_status('bbbbbbbb-0000-0000-0000-00000000000b', 'tx-idle', 'i1', 2, 'committed'),
          'committed'::gridha.batch_status, 'B reports i1 committed');
SELECT results_eq(
    $$SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batch('bbbbbbbb-0000-0000-0000-00000000000b')$$,
    $$VALUES ('tx-idle'::text, 'i2'::text, 2::bigint, 1)$$,
    'next_batch: B is handed i2 under epoch 2');

-- tx-slow passes its hard expiry, still submitting
UPDATE gridha.service_claims
   SET soft_expiry = now() - interval '2 minutes', hard_expiry = now() - interval '1 second'
 WHERE service_id = 'tx-slow';

SELECT is((SELECT state FROM gridha.claims WHERE service_id = 'tx-slow'), 'hard_expired',
          'claims: past hard expiry is hard_expired');
SELECT is(gridha.verify_batch('aaaaaaaa-0000-0000-0000-00000000000a', 'tx-slow', 's1', 1), false,
          'verify_batch: past its hard expiry, s1 is no longer A''s to submit');
SELECT results_eq(
    $$SELECT * FROM gridha.acquire_claims('bbbbbbbb-0000-0000-0000-00000000000b')$$,
    $$VALUES ('tx-slow'::text, 2::bigint)$$,
    'acquire_claims: B takes the hard-expired claim although a batch is submitting, epoch 2');
SELECT results_eq(
    $$SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batch('bbbbbbbb-0000-0000-0000-00000000000b')$$,
    $$VALUES ('tx-slow'::text, 's1'::text, 2::bigint, 2)$$,
    'next_batch: B is handed s1 again, epoch 2, attempt 2 (before s2)');
SELECT is(gridha.verify_batch('bbbbbbbb-0000-0000-0000-00000000000b', 'tx-slow', 's1', 2), true,
          'verify_batch: s1 is B''s to submit');
SELECT is(gridha.verify_batch('aaaaaaaa-0000-0000-0000-00000000000a', 'tx-slow', 's1', 1), false,
          'verify_batch: s1 is not A''s any more');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'tx-slow', 's1', 1, 'accepted')$$,
                 'RG001', 'stale claim on service "tx-slow"', 'A''s late submission report -> RG001');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'tx-slow', 's1', 1, 'rejected')$$,
                 'RG001', 'stale claim on service "tx-slow"', 'A''s late rejection -> RG001');
SELECT results_eq(
    $$SELECT status::text, epoch, attempts, instance_id FROM gridha.batches WHERE batch_id = 's1'$$,
    $$VALUES ('submitting'::text, 2::bigint, 2, 'bbbbbbbb-0000-0000-0000-00000000000b'::uuid)$$,
    's1 is unchanged by A''s reports: submitting under B''s epoch 2, attempt 2');
SELECT is(gridha.report_submission('bbbbbbbb-0000-0000-0000-00000000000b', 'tx-slow', 's1', 2, 'accepted'),
          'pending'::gridha.batch_status, 'B reports s1 accepted');
SELECT is(gridha.report_status('bbbbbbbb-0000-0000-0000-00000000000b', 'tx-slow', 's1', 2, 'committed'),
          'committed'::gridha.batch_status, 'B reports s1 committed');
SELECT results_eq(
    $$SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batch('bbbbbbbb-0000-0000-0000-00000000000b')$$,
    $$VALUES ('tx-slow'::text, 's2'::text, 2::bigint, 1)$$,
    'next_batch: then s2, in order');

-- A still holds case and dly (both empty); a fresh soft-expired claim of A
-- with nothing queued is taken too
UPDATE gridha.service_claims SET soft_expiry = now() - interval '1 second' WHERE service_id = 'case';
SELECT results_eq(
    $$SELECT * FROM gridha.acquire_claims('bbbbbbbb-0000-0000-0000-00000000000b')$$,
    $$VALUES ('case'::text, 2::bigint)$$,
    'acquire_claims: an empty soft-expired claim is taken, epoch 2');
SELECT is(gridha.renew_claims('bbbbbbbb-0000-0000-0000-00000000000b'), 3,
          'renew_claims: B renews its three claims');
SELECT is(gridha.renew_claims('aaaaaaaa-0000-0000-0000-00000000000a'), 1,
          'renew_claims: A renews only what the database says it still holds (dly)');
SELECT is(gridha.release_claims('bbbbbbbb-0000-0000-0000-00000000000b'), 1,
          'release_claims: B hands back case and keeps tx-idle and tx-slow, whose i2 and s2 are submitting');
SELECT results_eq(
    $$SELECT service_id, claimant, epoch FROM gridha.service_claims ORDER BY service_id$$,
    $$VALUES ('case'::text, NULL::uuid, 2::bigint),
             ('dly', 'aaaaaaaa-0000-0000-0000-00000000000a', 1),
             ('tx-idle', 'bbbbbbbb-0000-0000-0000-00000000000b', 2),
             ('tx-slow', 'bbbbbbbb-0000-0000-0000-00000000000b', 2)$$,
    'a released claim is free and keeps its epoch');
SELECT results_eq(
    $$SELECT * FROM gridha.acquire_claims('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$VALUES ('case'::text, 3::bigint)$$,
    'acquire_claims: A takes the free claim back, epoch 3');

SELECT * FROM finish();
ROLLBACK;
