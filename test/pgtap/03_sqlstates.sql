-- 03_sqlstates.sql: every documented error, with its SQLSTATE and (where it
-- is stable) its message, and proof that each refusal changed nothing.
--
--   22004  a NULL argument                 22023  an empty id, a negative count or epoch
--   RG001  stale claim (instance/epoch)    RG002  batch not in flight / final status change
--   RG003  unknown service or batch        RG004  unknown submission outcome
--   RG023  a batch never handed out (1.3)
--   RG005  unknown ledger status           RG006  unknown target
--   23505  duplicate batch id in a service
--
-- Instances (literal uuids, also inside the quoted statements):
--   A = aaaaaaaa-0000-0000-0000-000000000001 holds every err-* service but err-b
--   B = bbbbbbbb-0000-0000-0000-000000000001 holds err-b
--   C = cccccccc-0000-0000-0000-000000000001 was never seen
BEGIN;
SELECT plan(112);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = off;  -- A takes everything free
\o

-- Everything the tables hold, as one hash: equal before and after a refusal
-- means the refusal changed nothing.
CREATE FUNCTION pg_temp.snapshot() RETURNS text
LANGUAGE sql AS $$
    SELECT md5(concat_ws('#',
        (SELECT string_agg(b::text, '|' ORDER BY b.service_id, b.batch_id) FROM gridha.batches b),
        (SELECT string_agg(c::text, '|' ORDER BY c.service_id) FROM gridha.service_claims c),
        (SELECT string_agg(i::text, '|' ORDER BY i.instance_id) FROM gridha.instances i),
        (SELECT string_agg(t::text, '|' ORDER BY t.target) FROM gridha.targets t)))
$$;

-- The error a statement raises, as sqlstate|message|has detail|has hint.
CREATE FUNCTION pg_temp.error_of(q text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    st text; msg text; det text; hin text;
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                            det = PG_EXCEPTION_DETAIL, hin = PG_EXCEPTION_HINT;
    RETURN concat_ws('|', st, msg, (nullif(det, '') IS NOT NULL)::text, (nullif(hin, '') IS NOT NULL)::text);
END
$$;

-- ---------------------------------------------------------------------------
-- Setup: one service per situation
--   err-b     B holds it, b1 queued
--   err-sub   s1 submitting (A, epoch 1), s2 queued behind it
--   err-pend  p1 pending
--   err-done  d1 committed, d2 invalid, d3 the queued head
--   err-dly   y1 delayed
-- ---------------------------------------------------------------------------

\o /dev/null
SELECT gridha.enqueue('err-b', 'b1', '\x00');
SELECT * FROM gridha.acquire_claims('bbbbbbbb-0000-0000-0000-000000000001');
SELECT gridha.enqueue('err-sub', 's1', '\x01'), gridha.enqueue('err-sub', 's2', '\x02'),
       gridha.enqueue('err-pend', 'p1', '\x03'),
       gridha.enqueue('err-done', 'd1', '\x04'), gridha.enqueue('err-done', 'd2', '\x05'),
       gridha.enqueue('err-done', 'd3', '\x06'),
       gridha.enqueue('err-dly', 'y1', '\x07');
\o

SELECT is((SELECT count(*) FROM gridha.next_batches('aaaaaaaa-0000-0000-0000-000000000001', 10)),
          4::bigint, 'setup: A is handed s1, p1, d1 and y1');
\o /dev/null
SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-pend', 'p1', 1, 'accepted'),
       gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-done', 'd1', 1, 'accepted'),
       gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-dly', 'y1', 1, 'delayed');
SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-done', 'd1', 1, 'committed');
\o
SELECT is((SELECT string_agg(batch_id, ',') FROM gridha.next_batches('aaaaaaaa-0000-0000-0000-000000000001', 10)),
          'd2', 'setup: A is handed d2');
\o /dev/null
SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-done', 'd2', 1, 'rejected');
\o

SELECT results_eq(
    $$SELECT b.service_id, b.batch_id, b.status::text, c.claimant::text, c.epoch
        FROM gridha.batches b JOIN gridha.service_claims c USING (service_id)
       ORDER BY b.service_id, b.seq$$,
    $$VALUES ('err-b'::text, 'b1'::text, 'queued'::text, 'bbbbbbbb-0000-0000-0000-000000000001'::text, 1::bigint),
             ('err-dly', 'y1', 'delayed', 'aaaaaaaa-0000-0000-0000-000000000001', 1),
             ('err-done', 'd1', 'committed', 'aaaaaaaa-0000-0000-0000-000000000001', 1),
             ('err-done', 'd2', 'invalid', 'aaaaaaaa-0000-0000-0000-000000000001', 1),
             ('err-done', 'd3', 'queued', 'aaaaaaaa-0000-0000-0000-000000000001', 1),
             ('err-pend', 'p1', 'pending', 'aaaaaaaa-0000-0000-0000-000000000001', 1),
             ('err-sub', 's1', 'submitting', 'aaaaaaaa-0000-0000-0000-000000000001', 1),
             ('err-sub', 's2', 'queued', 'aaaaaaaa-0000-0000-0000-000000000001', 1)$$,
    'setup: every situation is in place');

SELECT pg_temp.snapshot() AS before \gset

-- ---------------------------------------------------------------------------
-- 22004: NULL arguments
-- ---------------------------------------------------------------------------

SELECT throws_ok($$SELECT gridha.enqueue(NULL, 'n1', '\x00')$$,
                 '22004', 'service_id must not be null', 'enqueue: NULL service_id -> 22004');
SELECT throws_ok($$SELECT gridha.enqueue('err-new', NULL, '\x00')$$,
                 '22004', 'batch_id must not be null', 'enqueue: NULL batch_id -> 22004');
SELECT throws_ok($$INSERT INTO gridha.batches (service_id, batch_id) VALUES (NULL, 'n1')$$,
                 '22004', 'service_id and batch_id must not be null', 'INSERT: NULL service_id -> 22004');
SELECT throws_ok($$INSERT INTO gridha.batches (service_id, batch_id) VALUES ('err-new', NULL)$$,
                 '22004', 'service_id and batch_id must not be null', 'INSERT: NULL batch_id -> 22004');
SELECT throws_ok($$SELECT * FROM gridha.next_batch(NULL)$$,
                 '22004', 'instance_id must not be null', 'next_batch: NULL instance_id -> 22004');
SELECT throws_ok($$SELECT * FROM gridha.next_batches(NULL, 1)$$,
                 '22004', 'instance_id must not be null', 'next_batches: NULL instance_id -> 22004');
SELECT throws_ok($$SELECT * FROM gridha.next_batches('aaaaaaaa-0000-0000-0000-000000000001', NULL)$$,
                 '22004', 'max_batches must not be null', 'next_batches: NULL max_batches -> 22004');
SELECT throws_ok($$SELECT gridha.renew_claims(NULL)$$,
                 '22004', 'instance_id must not be null', 'renew_claims: NULL instance_id -> 22004');
SELECT throws_ok($$SELECT * FROM gridha.acquire_claims(NULL)$$,
                 '22004', 'instance_id must not be null', 'acquire_claims: NULL instance_id -> 22004');
SELECT throws_ok($$SELECT gridha.release_claims(NULL)$$,
                 '22004', 'instance_id must not be null', 'release_claims: NULL instance_id -> 22004');
SELECT throws_ok($$SELECT * FROM gridha.claimed_batches(NULL)$$,
                 '22004', 'instance_id must not be null', 'claimed_batches: NULL instance_id -> 22004');
SELECT throws_ok($$SELECT * FROM gridha.claimed_batches('aaaaaaaa-0000-0000-0000-000000000001', NULL)$$,
                 '22004', 'max_batches must not be null', 'claimed_batches: NULL max_batches -> 22004');
SELECT throws_ok($$SELECT * FROM gridha.pending_batches(NULL)$$,
                 '22004', 'instance_id must not be null', 'pending_batches: NULL instance_id -> 22004');
SELECT throws_ok($$SELECT * FROM gridha.pending_batches('aaaaaaaa-0000-0000-0000-000000000001', NULL)$$,
                 '22004', 'max_batches must not be null', 'pending_batches: NULL max_batches -> 22004');
SELECT throws_ok($$SELECT gridha.verify_batch(NULL, 'err-sub', 's1', 1)$$,
                 '22004', 'instance_id must not be null', 'verify_batch: NULL instance_id -> 22004');
SELECT throws_ok($$SELECT gridha.verify_batch('aaaaaaaa-0000-0000-0000-000000000001', NULL, 's1', 1)$$,
                 '22004', 'service_id must not be null', 'verify_batch: NULL service_id -> 22004');
SELECT throws_ok($$SELECT gridha.verify_batch('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', NULL, 1)$$,
                 '22004', 'batch_id must not be null', 'verify_batch: NULL batch_id -> 22004');
SELECT throws_ok($$SELECT gridha.verify_batch('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', NULL)$$,
                 '22004', 'epoch must not be null', 'verify_batch: NULL epoch -> 22004');
SELECT throws_ok($$SELECT gridha.report_submission(NULL, 'err-sub', 's1', 1, 'accepted')$$,
                 '22004', 'instance_id must not be null', 'report_submission: NULL instance_id -> 22004');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', NULL, 's1', 1, 'accepted')$$,
                 '22004', 'service_id must not be null', 'report_submission: NULL service_id -> 22004');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', NULL, 1, 'accepted')$$,
                 '22004', 'batch_id must not be null', 'report_submission: NULL batch_id -> 22004');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', NULL, 'accepted')$$,
                 '22004', 'epoch must not be null', 'report_submission: NULL epoch -> 22004');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', 1, NULL)$$,
                 '22004', 'outcome must not be null', 'report_submission: NULL outcome -> 22004');
SELECT throws_ok($$SELECT gridha.report_status(NULL, 'err-pend', 'p1', 1, 'committed')$$,
                 '22004', 'instance_id must not be null', 'report_status: NULL instance_id -> 22004');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', NULL, 'p1', 1, 'committed')$$,
                 '22004', 'service_id must not be null', 'report_status: NULL service_id -> 22004');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-pend', NULL, 1, 'committed')$$,
                 '22004', 'batch_id must not be null', 'report_status: NULL batch_id -> 22004');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-pend', 'p1', NULL, 'committed')$$,
                 '22004', 'epoch must not be null', 'report_status: NULL epoch -> 22004');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-pend', 'p1', 1, NULL)$$,
                 '22004', 'status must not be null', 'report_status: NULL status -> 22004');

SELECT is(pg_temp.snapshot(), :'before', '22004 refusals changed nothing');

-- ---------------------------------------------------------------------------
-- 22023: empty ids, negative counts and epochs
-- ---------------------------------------------------------------------------

SELECT throws_ok($$SELECT gridha.enqueue('', 'n1', '\x00')$$,
                 '22023', 'service_id must not be empty', 'enqueue: empty service_id -> 22023');
SELECT throws_ok($$SELECT gridha.enqueue('err-new', '', '\x00')$$,
                 '22023', 'batch_id must not be empty', 'enqueue: empty batch_id -> 22023');
SELECT throws_ok($$SELECT gridha.enqueue('err-new', 'n1', '\x00', '')$$,
                 '22023', 'target must not be empty', 'enqueue: empty target -> 22023');
SELECT throws_ok($$INSERT INTO gridha.batches (service_id, batch_id) VALUES ('', 'n1')$$,
                 '22023', 'service_id and batch_id must not be empty', 'INSERT: empty service_id -> 22023');
SELECT throws_ok($$INSERT INTO gridha.batches (service_id, batch_id) VALUES ('err-new', '')$$,
                 '22023', 'service_id and batch_id must not be empty', 'INSERT: empty batch_id -> 22023');
SELECT throws_ok($$SELECT gridha.verify_batch('aaaaaaaa-0000-0000-0000-000000000001', '', 's1', 1)$$,
                 '22023', 'service_id must not be empty', 'verify_batch: empty service_id -> 22023');
SELECT throws_ok($$SELECT gridha.verify_batch('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', '', 1)$$,
                 '22023', 'batch_id must not be empty', 'verify_batch: empty batch_id -> 22023');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', '', 's1', 1, 'accepted')$$,
                 '22023', 'service_id must not be empty', 'report_submission: empty service_id -> 22023');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', '', 1, 'accepted')$$,
                 '22023', 'batch_id must not be empty', 'report_submission: empty batch_id -> 22023');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', '', 'p1', 1, 'committed')$$,
                 '22023', 'service_id must not be empty', 'report_status: empty service_id -> 22023');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-pend', '', 1, 'committed')$$,
                 '22023', 'batch_id must not be empty', 'report_status: empty batch_id -> 22023');
SELECT throws_ok($$SELECT * FROM gridha.next_batches('aaaaaaaa-0000-0000-0000-000000000001', -1)$$,
                 '22023', 'max_batches must not be negative', 'next_batches: negative max_batches -> 22023');
SELECT throws_ok($$SELECT * FROM gridha.claimed_batches('aaaaaaaa-0000-0000-0000-000000000001', -1)$$,
                 '22023', 'max_batches must not be negative', 'claimed_batches: negative max_batches -> 22023');
SELECT throws_ok($$SELECT * FROM gridha.pending_batches('aaaaaaaa-0000-0000-0000-000000000001', -1)$$,
                 '22023', 'max_batches must not be negative', 'pending_batches: negative max_batches -> 22023');
SELECT throws_ok($$SELECT gridha.verify_batch('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', -1)$$,
                 '22023', 'epoch must not be negative', 'verify_batch: negative epoch -> 22023');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', -1, 'accepted')$$,
                 '22023', 'epoch must not be negative', 'report_submission: negative epoch -> 22023');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-pend', 'p1', -1, 'committed')$$,
                 '22023', 'epoch must not be negative', 'report_status: negative epoch -> 22023');

SELECT is(pg_temp.snapshot(), :'before', '22023 refusals changed nothing');
SELECT is((SELECT count(*) FROM gridha.service_claims WHERE service_id IN ('', 'err-new')), 0::bigint,
          'no service was created by a refused enqueue');

-- ---------------------------------------------------------------------------
-- RG004 / RG005: unknown words
-- ---------------------------------------------------------------------------

SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', 1, 'ok')$$,
                 'RG004', 'unknown submission outcome "ok"', 'report_submission: unknown outcome -> RG004');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', 1, '')$$,
                 'RG004', 'unknown submission outcome ""', 'report_submission: empty outcome -> RG004');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', 1, 'pending')$$,
                 'RG004', 'unknown submission outcome "pending"',
                 'report_submission: a status word is not an outcome -> RG004');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-pend', 'p1', 1, 'done')$$,
                 'RG005', 'unknown ledger status "done"', 'report_status: unknown status word -> RG005');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-pend', 'p1', 1, '')$$,
                 'RG005', 'unknown ledger status ""', 'report_status: empty status word -> RG005');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-pend', 'p1', 1, 'accepted')$$,
                 'RG005', 'unknown ledger status "accepted"',
                 'report_status: an outcome word is not a ledger status -> RG005');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-pend', 'p1', 1, 'queued')$$,
                 'RG005', 'unknown ledger status "queued"',
                 'report_status: queued is not a ledger status -> RG005');

SELECT is(pg_temp.snapshot(), :'before', 'RG004/RG005 refusals changed nothing');

-- ---------------------------------------------------------------------------
-- RG003: unknown service or batch
-- ---------------------------------------------------------------------------

SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-none', 'x1', 1, 'accepted')$$,
                 'RG003', 'unknown service "err-none"', 'report_submission: unknown service -> RG003');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 'nope', 1, 'accepted')$$,
                 'RG003', 'unknown batch "nope" of service "err-sub"', 'report_submission: unknown batch -> RG003');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-none', 'x1', 1, 'committed')$$,
                 'RG003', 'unknown service "err-none"', 'report_status: unknown service -> RG003');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-pend', 'nope', 1, 'committed')$$,
                 'RG003', 'unknown batch "nope" of service "err-pend"', 'report_status: unknown batch -> RG003');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-pend', 's1', 1, 'committed')$$,
                 'RG003', 'unknown batch "s1" of service "err-pend"',
                 'report_status: a batch id of another service -> RG003');
SELECT is(gridha.verify_batch('aaaaaaaa-0000-0000-0000-000000000001', 'err-none', 'x1', 1), false,
          'verify_batch: an unknown batch is simply not this instance''s (false, no error)');

SELECT is(pg_temp.snapshot(), :'before', 'RG003 refusals changed nothing');

-- ---------------------------------------------------------------------------
-- RG001: stale claim (wrong instance, wrong epoch)
-- ---------------------------------------------------------------------------

SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', 2, 'accepted')$$,
                 'RG001', 'stale claim on service "err-sub"', 'report_submission: a later epoch -> RG001');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', 0, 'accepted')$$,
                 'RG001', 'stale claim on service "err-sub"', 'report_submission: an earlier epoch -> RG001');
SELECT throws_ok($$SELECT gridha.report_submission('bbbbbbbb-0000-0000-0000-000000000001', 'err-sub', 's1', 1, 'accepted')$$,
                 'RG001', 'stale claim on service "err-sub"', 'report_submission: another instance -> RG001');
SELECT throws_ok($$SELECT gridha.report_submission('cccccccc-0000-0000-0000-000000000001', 'err-sub', 's1', 1, 'accepted')$$,
                 'RG001', 'stale claim on service "err-sub"', 'report_submission: an instance never seen -> RG001');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-pend', 'p1', 2, 'committed')$$,
                 'RG001', 'stale claim on service "err-pend"', 'report_status: a later epoch -> RG001');
SELECT throws_ok($$SELECT gridha.report_status('bbbbbbbb-0000-0000-0000-000000000001', 'err-pend', 'p1', 1, 'committed')$$,
                 'RG001', 'stale claim on service "err-pend"', 'report_status: another instance -> RG001');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-b', 'b1', 1, 'committed')$$,
                 'RG023', 'batch "b1" of service "err-b" was never handed out',
                 'report_status: a batch never handed out of a service another instance holds -> RG023 (1.3; 1.2: RG001)');
SELECT is(pg_temp.error_of($$SELECT gridha.report_submission('bbbbbbbb-0000-0000-0000-000000000001', 'err-sub', 's1', 1, 'accepted')$$),
          'RG001|stale claim on service "err-sub"|true|true',
          'RG001 comes with a detail (who holds the claim) and a hint (drop the batch)');
SELECT is(gridha.verify_batch('bbbbbbbb-0000-0000-0000-000000000001', 'err-sub', 's1', 1), false,
          'verify_batch: another instance -> false');
SELECT is(gridha.verify_batch('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', 2), false,
          'verify_batch: another epoch -> false');
SELECT is(gridha.verify_batch('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', 1), true,
          'verify_batch: the holder at its epoch -> true');

SELECT is(pg_temp.snapshot(), :'before', 'RG001 refusals changed nothing');

-- ---------------------------------------------------------------------------
-- RG002: not in flight, or a final status changed
-- ---------------------------------------------------------------------------

SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's2', 1, 'accepted')$$,
                 'RG023', 'batch "s2" of service "err-sub" was never handed out',
                 'report_submission: a queued batch behind the head -> RG023 (1.3; 1.2: RG002)');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's2', 1, 'committed')$$,
                 'RG023', 'batch "s2" of service "err-sub" was never handed out',
                 'report_status: a queued batch behind the head -> RG023 (1.3; 1.2: RG002)');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-done', 'd3', 1, 'accepted')$$,
                 'RG023', 'batch "d3" of service "err-done" was never handed out',
                 'report_submission: a queued head never handed out -> RG023 (1.3; 1.2: RG002)');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-done', 'd3', 1, 'valid')$$,
                 'RG023', 'batch "d3" of service "err-done" was never handed out',
                 'report_status: a queued head never handed out -> RG023 (1.3; 1.2: RG002)');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-pend', 'p1', 1, 'accepted')$$,
                 'RG002', 'batch "p1" of service "err-pend" is not submitting under this epoch',
                 'report_submission: a pending batch (reported twice) -> RG002');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-done', 'd1', 1, 'committed')$$,
                 'RG002', 'batch "d1" of service "err-done" is not in flight',
                 'report_status: an already committed batch -> RG002');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-done', 'd1', 1, 'unknown')$$,
                 'RG002', 'batch "d1" of service "err-done" is not in flight',
                 'report_status: unknown on a committed batch -> RG002');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-done', 'd1', 1, 'delayed')$$,
                 'RG002', 'batch "d1" of service "err-done" is not submitting under this epoch',
                 'report_submission: an already committed batch -> RG002');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-done', 'd2', 1, 'committed')$$,
                 'RG002', 'batch "d2" of service "err-done" is not in flight',
                 'report_status: an invalid batch -> RG002');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-dly', 'y1', 1, 'committed')$$,
                 'RG002', 'batch "y1" of service "err-dly" is not in flight',
                 'report_status: a delayed batch -> RG002');
SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-dly', 'y1', 1, 'accepted')$$,
                 'RG002', 'batch "y1" of service "err-dly" is not submitting under this epoch',
                 'report_submission: a delayed batch not yet handed out again -> RG002');

-- The guard trigger: final is final, even for a superuser's UPDATE.
SELECT throws_ok($$UPDATE gridha.batches SET status = 'queued' WHERE service_id = 'err-done' AND batch_id = 'd1'$$,
                 'RG002', 'batch "d1" of service "err-done" is already committed',
                 'UPDATE of a committed batch''s status (superuser) -> RG002');
SELECT throws_ok($$UPDATE gridha.batches SET status = 'committed' WHERE service_id = 'err-done' AND batch_id = 'd2'$$,
                 'RG002', 'batch "d2" of service "err-done" is already invalid',
                 'UPDATE of an invalid batch''s status (superuser) -> RG002');
SELECT throws_ok($$UPDATE gridha.batches SET seq = 100 WHERE service_id = 'err-done' AND batch_id = 'd1'$$,
                 'RG002', 'batch "d1" of service "err-done" is already committed',
                 'UPDATE of a committed batch''s seq (superuser) -> RG002');
SELECT throws_ok($$UPDATE gridha.batches SET batch_id = 'd1-again' WHERE service_id = 'err-done' AND batch_id = 'd1'$$,
                 'RG002', 'batch "d1" of service "err-done" is already committed',
                 'UPDATE of a committed batch''s id (superuser) -> RG002');
SELECT throws_ok($$UPDATE gridha.batches SET status = status WHERE service_id = 'err-done'$$,
                 'RG002', NULL,
                 'an UPDATE touching a final batch among others (superuser) -> RG002');

SELECT is(pg_temp.snapshot(), :'before', 'RG002 refusals changed nothing');

-- ---------------------------------------------------------------------------
-- RG006 and 23505 at enqueue
-- ---------------------------------------------------------------------------

SELECT throws_ok($$SELECT gridha.enqueue('err-new', 'n1', '\x00', 'nope')$$,
                 'RG006', 'unknown target "nope"', 'enqueue: unknown target -> RG006');
SELECT throws_ok($$SELECT gridha.enqueue('err-sub', 's3', '\x00', 'nope')$$,
                 'RG013', 'service "err-sub" is on target "default", not "nope"',
                 'enqueue: another target than an existing service''s -> RG013 (moving it is an administrator''s)');
SELECT is(pg_temp.error_of($$SELECT gridha.enqueue('err-new', 'n1', '\x00', 'nope')$$),
          'RG006|unknown target "nope"|false|true', 'RG006 comes with a hint (add the target first)');
SELECT throws_ok($$SELECT gridha.enqueue('err-sub', 's1', '\x00')$$,
                 '23505', 'batch "s1" of service "err-sub" already exists',
                 'enqueue: duplicate batch id (in flight) -> 23505');
SELECT throws_ok($$SELECT gridha.enqueue('err-done', 'd1', '\x00')$$,
                 '23505', 'batch "d1" of service "err-done" already exists',
                 'enqueue: duplicate of a committed batch id -> 23505');
SELECT throws_ok($$SELECT gridha.enqueue('err-sub', 's2', '\x00', 'default')$$,
                 '23505', 'batch "s2" of service "err-sub" already exists',
                 'enqueue: duplicate batch id with an explicit target -> 23505');
SELECT throws_ok($$INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('err-sub', 's2', '\x00')$$,
                 '23505', NULL, 'INSERT: duplicate batch id -> 23505');

SELECT is(pg_temp.snapshot(), :'before', 'RG006/23505 refusals changed nothing');
SELECT is((SELECT tail_seq FROM gridha.service_claims WHERE service_id = 'err-sub'), 2::bigint,
          'a refused duplicate did not use up a seq');

-- ---------------------------------------------------------------------------
-- After a takeover: the old claimant is fenced (RG001), and the new one
-- cannot report a batch it has not been handed yet (RG002)
-- ---------------------------------------------------------------------------

UPDATE gridha.service_claims
   SET soft_expiry = now() - interval '2 minutes', hard_expiry = now() - interval '1 minute'
 WHERE service_id = 'err-sub';
SELECT results_eq($$SELECT * FROM gridha.acquire_claims('bbbbbbbb-0000-0000-0000-000000000001')$$,
                  $$VALUES ('err-sub'::text, 2::bigint)$$,
                  'B takes the hard-expired err-sub at epoch 2');

SELECT pg_temp.snapshot() AS after_takeover \gset

SELECT throws_ok($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', 1, 'accepted')$$,
                 'RG001', 'stale claim on service "err-sub"', 'the old claimant''s late report -> RG001');
SELECT throws_ok($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', 1, 'committed')$$,
                 'RG001', 'stale claim on service "err-sub"', 'the old claimant''s late status -> RG001');
SELECT is(pg_temp.error_of($$SELECT gridha.report_submission('bbbbbbbb-0000-0000-0000-000000000001', 'err-sub', 's1', 2, 'accepted')$$),
          'RG002|batch "s1" of service "err-sub" is not submitting under this epoch|true|false',
          'the new claimant reporting s1 before its own hand-out -> RG002 (with a detail)');
SELECT throws_ok($$SELECT gridha.report_status('bbbbbbbb-0000-0000-0000-000000000001', 'err-sub', 's1', 2, 'committed')$$,
                 'RG002', 'batch "s1" of service "err-sub" is not in flight',
                 'the new claimant''s status report on s1 before its own hand-out -> RG002');
SELECT is(gridha.verify_batch('aaaaaaaa-0000-0000-0000-000000000001', 'err-sub', 's1', 1), false,
          'verify_batch: the old claimant -> false');
SELECT is(gridha.verify_batch('bbbbbbbb-0000-0000-0000-000000000001', 'err-sub', 's1', 2), false,
          'verify_batch: the new claimant before its hand-out -> false');

SELECT is(pg_temp.snapshot(), :'after_takeover', 'the fenced reports changed nothing');

SELECT * FROM finish();
ROLLBACK;
