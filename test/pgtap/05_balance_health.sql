-- 05_balance_health.sql: claim balance between live instances, and the
-- instance_health decision tree.
--
-- One transaction: now() stands still, and time passes only where an UPDATE
-- moves last_seen_at or a lease into the past.
--
-- Instances: P = 11111111-0000-0000-0000-000000000001 (first, alone)
--            Q = 22222222-0000-0000-0000-000000000002 (joins later)
--            H = 33333333-0000-0000-0000-000000000003 (health walk-through)
--            E = 44444444-0000-0000-0000-000000000004 (no claims)
BEGIN;
SELECT plan(35);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = on;
SELECT gridha.enqueue(format('bal-%s', lpad(i::text, 2, '0')), 'b1', NULL) FROM generate_series(1, 10) AS i;
\o

CREATE FUNCTION pg_temp.claims_of(inst uuid) RETURNS bigint
LANGUAGE sql AS $$ SELECT count(*) FROM gridha.service_claims WHERE claimant = inst $$;

-- ---------------------------------------------------------------------------
-- Balance: 10 services, 2 live instances -> 5 each
-- ---------------------------------------------------------------------------

SELECT is((SELECT count(*) FROM gridha.next_batch('11111111-0000-0000-0000-000000000001')), 1::bigint,
          'P, alone, is handed a batch');
SELECT is(pg_temp.claims_of('11111111-0000-0000-0000-000000000001'), 10::bigint,
          'P, alone, claims all 10 services');
SELECT is((SELECT count(*) FROM gridha.next_batch('22222222-0000-0000-0000-000000000002')), 1::bigint,
          'Q registers, takes its share of the work from live P and is handed a batch');
SELECT is(pg_temp.claims_of('22222222-0000-0000-0000-000000000002'), 5::bigint,
          'Q takes 5 of P''s 9 ready services (every service has work: 10 over 2)');
SELECT is(pg_temp.claims_of('11111111-0000-0000-0000-000000000001'), 5::bigint,
          'P keeps 5, among them the one it handed out');

-- P's renewal becomes due
UPDATE gridha.instances SET last_seen_at = now() - interval '1 hour'
 WHERE instance_id = '11111111-0000-0000-0000-000000000001';
SELECT is((SELECT count(*) FROM gridha.next_batch('11111111-0000-0000-0000-000000000001')), 1::bigint,
          'P''s next cycle still hands out a batch');
SELECT is(pg_temp.claims_of('11111111-0000-0000-0000-000000000001'), 5::bigint,
          'P, counting Q as live, keeps its share: 5 claims');
SELECT is((SELECT count(*) FROM gridha.service_claims WHERE claimant IS NULL), 0::bigint,
          'no claim is free');
SELECT is((SELECT count(*) FROM gridha.batches b JOIN gridha.service_claims c USING (service_id)
            WHERE b.status = 'submitting'
              AND c.claimant = '11111111-0000-0000-0000-000000000001' AND c.epoch = b.epoch), 2::bigint,
          'P released only idle claims: both batches it was handed are still its own');

-- Q's renewal becomes due
UPDATE gridha.instances SET last_seen_at = now() - interval '1 hour'
 WHERE instance_id = '22222222-0000-0000-0000-000000000002';
SELECT is((SELECT count(*) FROM gridha.next_batch('22222222-0000-0000-0000-000000000002')), 1::bigint,
          'Q''s next cycle hands it a batch');
SELECT results_eq(
    $$SELECT claimant, count(*) FROM gridha.service_claims GROUP BY claimant ORDER BY claimant$$,
    $$VALUES ('11111111-0000-0000-0000-000000000001'::uuid, 5::bigint),
             ('22222222-0000-0000-0000-000000000002'::uuid, 5::bigint)$$,
    'balanced: P and Q hold 5 claims each, none is free');
SELECT is((SELECT array_agg(DISTINCT epoch) FROM gridha.service_claims
            WHERE claimant = '22222222-0000-0000-0000-000000000002'), ARRAY[2::bigint],
          'each claim Q took changed hands once more: epoch 2');
SELECT is_empty($$SELECT * FROM gridha.acquire_claims('22222222-0000-0000-0000-000000000002')$$,
                'acquire_claims: Q, at its share, takes nothing more');
SELECT is_empty($$SELECT * FROM gridha.acquire_claims('11111111-0000-0000-0000-000000000001')$$,
                'acquire_claims: P, at its share, takes nothing more');

-- With balance off, an instance claims all it can (only free or expired
-- claims, never live ones).
SET LOCAL gridha.balance_claims = off;
UPDATE gridha.service_claims SET claimant = NULL, soft_expiry = NULL, hard_expiry = NULL
 WHERE claimant = '22222222-0000-0000-0000-000000000002'
   AND service_id NOT IN (SELECT service_id FROM gridha.batches WHERE status = 'submitting');
SELECT is((SELECT count(*) FROM gridha.acquire_claims('11111111-0000-0000-0000-000000000001')), 3::bigint,
          'balance off: P takes all 3 free claims beyond its share');
SELECT is(pg_temp.claims_of('11111111-0000-0000-0000-000000000001'), 8::bigint,
          'balance off: P holds 8 of 10');
SET LOCAL gridha.balance_claims = on;

-- ---------------------------------------------------------------------------
-- instance_health: new / healthy / slow / failed / stopped
-- ---------------------------------------------------------------------------

SELECT gridha.register_instance('tap new') AS new_id \gset
SELECT is((SELECT health FROM gridha.instance_health WHERE instance_id = :'new_id'),
          'new', 'registered, never seen: new (not failed)');

SET LOCAL gridha.balance_claims = off;
SELECT gridha.enqueue('hl-1', 'h1', NULL) \g /dev/null
SELECT results_eq(
    $$SELECT service_id, batch_id FROM gridha.next_batch('33333333-0000-0000-0000-000000000003')$$,
    $$VALUES ('hl-1'::text, 'h1'::text)$$,
    'H claims hl-1 and is handed h1');
SELECT is((SELECT health FROM gridha.instance_health WHERE instance_id = '33333333-0000-0000-0000-000000000003'),
          'healthy', 'within its claim window: healthy');
SELECT is((SELECT state FROM gridha.claims WHERE service_id = 'hl-1'), 'held', 'claims: hl-1 is held');

UPDATE gridha.instances SET soft_expiry = now() - interval '1 second' WHERE instance_id = '33333333-0000-0000-0000-000000000003';
SELECT is((SELECT health FROM gridha.instance_health WHERE instance_id = '33333333-0000-0000-0000-000000000003'),
          'slow', 'past soft expiry and mid-submission: slow (assumed healthy)');

UPDATE gridha.instances SET soft_expiry = now() - interval '2 minutes', hard_expiry = now() - interval '1 second'
 WHERE instance_id = '33333333-0000-0000-0000-000000000003';
SELECT is((SELECT health FROM gridha.instance_health WHERE instance_id = '33333333-0000-0000-0000-000000000003'),
          'failed', 'past hard expiry, even mid-submission: failed');

UPDATE gridha.instances SET soft_expiry = now() + interval '30 seconds', hard_expiry = now() + interval '3 minutes'
 WHERE instance_id = '33333333-0000-0000-0000-000000000003';
SELECT is((SELECT health FROM gridha.instance_health WHERE instance_id = '33333333-0000-0000-0000-000000000003'),
          'healthy', 'renewed: healthy again');

SELECT is(gridha.report_submission('33333333-0000-0000-0000-000000000003', 'hl-1', 'h1', 1, 'accepted'),
          'pending'::gridha.batch_status, 'h1 accepted: H has nothing submitting');
UPDATE gridha.instances SET soft_expiry = now() - interval '1 second' WHERE instance_id = '33333333-0000-0000-0000-000000000003';
SELECT is((SELECT health FROM gridha.instance_health WHERE instance_id = '33333333-0000-0000-0000-000000000003'),
          'failed', 'past soft expiry and idle: failed');
SELECT is((SELECT state FROM gridha.claims WHERE service_id = 'hl-1'), 'soft_expired',
          'claims: hl-1 is soft_expired');

SELECT is(gridha.release_claims('33333333-0000-0000-0000-000000000003'), 1, 'H releases its claim');
SELECT is((SELECT health FROM gridha.instance_health WHERE instance_id = '33333333-0000-0000-0000-000000000003'),
          'stopped', 'released everything: stopped');
SELECT is((SELECT state FROM gridha.claims WHERE service_id = 'hl-1'), 'free', 'claims: hl-1 is free');

-- Released while a batch is still submitting under it (a clean stop that
-- did not report it): stopped all the same, though it keeps that claim.
SELECT gridha.enqueue('hl-2', 'h2', NULL) \g /dev/null
SELECT is((SELECT batch_id FROM gridha.next_batch('33333333-0000-0000-0000-000000000003')), 'h2',
          'H claims hl-2 and is handed h2');
SELECT gridha.release_claims('33333333-0000-0000-0000-000000000003') \g /dev/null
SELECT is((SELECT claimant FROM gridha.service_claims WHERE service_id = 'hl-2'),
          '33333333-0000-0000-0000-000000000003'::uuid, 'H releases: hl-2 stays with it (h2 submitting)');
SELECT is((SELECT health FROM gridha.instance_health WHERE instance_id = '33333333-0000-0000-0000-000000000003'),
          'stopped', 'released, a batch still submitting under it: stopped');

-- An instance holding nothing is judged by its lease all the same.
SELECT is(gridha.renew_claims('44444444-0000-0000-0000-000000000004'), 0, 'E cycles, holding nothing');
SELECT is((SELECT health FROM gridha.instance_health WHERE instance_id = '44444444-0000-0000-0000-000000000004'),
          'healthy', 'no claims, seen within the claim window: healthy');
UPDATE gridha.instances
   SET last_seen_at = now() - interval '1 hour', soft_expiry = now() - interval '1 hour' + interval '30 seconds',
       hard_expiry = now() - interval '1 hour' + interval '3 minutes'
 WHERE instance_id = '44444444-0000-0000-0000-000000000004';
SELECT is((SELECT health FROM gridha.instance_health WHERE instance_id = '44444444-0000-0000-0000-000000000004'),
          'failed', 'no claims, not seen for an hour: failed');

SELECT * FROM finish();
ROLLBACK;
