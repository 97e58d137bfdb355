-- 17_work_conserving.sql: an instance that finds nothing to hand out and
-- idles takes the work no live instance serves, whatever its share says
-- (docs/concepts.md, "Balance"):
--
--   1. the claims with work of an instance past its hard expiry (paused,
--      hung): taken, a head still submitting too (revoked, handed out
--      again), while the taker is above its share's ceiling
--   2. a claim an operator expired (its own hard_expiry in the past) of a
--      live instance: taken; that instance's other claims stay
--   3. a released instance no longer counts as live: its lease ends at the
--      release, it is "stopped"; what it gave back is taken, what it kept
--      for a batch submitting stays with it, "slow"
--   4. an instance with work of its own in flight takes nothing beyond its
--      share
--
-- One transaction, rolled back, with the fixtures of 13_relief: A and B
-- live, their claim cycles not due; C, when a scenario needs a third live
-- instance (so that A's share is small), holds nothing.
BEGIN;
SELECT plan(13);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = on;
SET LOCAL gridha.renew_interval = '1h';
SET LOCAL gridha.soft_expiry = '2h';
\o

\ir lib/claims_scenario.sql

/* a third live instance, holding nothing: A's share is then smaller */
CREATE FUNCTION pg_temp.third() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    c uuid := gridha.register_instance('C');
BEGIN
    UPDATE gridha.instances
       SET soft_expiry = now() + interval '1 hour', hard_expiry = now() + interval '2 hours',
           last_seen_at = now()
     WHERE instance_id = c;
END
$$;

-- 1. B is past its hard expiry with b1 ready and b2 in flight; A holds
-- four idle claims, above its share's ceiling (6 services, A and C live).
SELECT pg_temp.scenario('{e1,e2,e3,e4}', '{b1,b2}', '{e1,e2,e3,e4}', '{b2}');
SELECT pg_temp.third();
UPDATE gridha.instances SET soft_expiry = now() - interval '2 hours', hard_expiry = now() - interval '1 second'
 WHERE instance_id = pg_temp.b();
SELECT is((SELECT count(*) FROM gridha.next_batch(pg_temp.a())), 1::bigint,
          'A, idle above its share, takes the hard-expired B''s work and hands a head out');
SELECT results_eq($$SELECT service_id, holder, epoch FROM pg_temp.claims() WHERE service_id LIKE 'b%'$$,
                  $$VALUES ('b1', 'A', 2::bigint), ('b2', 'A', 2::bigint)$$,
                  'both of B''s claims with work moved to A at epoch 2, the one in flight too');
SELECT is((SELECT count(*) FROM gridha.batches WHERE service_id = 'b2' AND seq = 1
            AND status = 'submitting' AND instance_id IS NOT DISTINCT FROM pg_temp.b()), 0::bigint,
          'B''s hand-out of b2 was revoked: its late report would be refused');

-- 2. An operator expires b1's claim of a live, healthy B; A idles above
-- its share.
SELECT pg_temp.scenario('{e1,e2,e3,e4}', '{b1,b2}', '{e1,e2,e3,e4}', '{}');
SELECT pg_temp.third();
UPDATE gridha.service_claims SET hard_expiry = now() - interval '1 second' WHERE service_id = 'b1';
SELECT results_eq($$SELECT service_id, epoch FROM gridha.next_batch(pg_temp.a())$$,
                  $$VALUES ('b1', 2::bigint)$$,
                  'A takes the claim an operator expired and hands its head out');
SELECT results_eq($$SELECT service_id, holder, epoch FROM pg_temp.claims() WHERE service_id LIKE 'b%'$$,
                  $$VALUES ('b1', 'A', 2::bigint), ('b2', 'B', 1::bigint)$$,
                  'B keeps its other claim');

-- 3. B releases (a clean stop) with b1's head submitting and b2 ready.
SELECT pg_temp.scenario('{e1}', '{b1,b2}', '{e1}', '{b1}');
SELECT is(gridha.release_claims(pg_temp.b()), 1, 'B releases: b2 goes back, b1 (submitting) stays');
SELECT is((SELECT health FROM gridha.instance_health WHERE instance_id = pg_temp.b()), 'stopped',
          'B is stopped');
SELECT ok((SELECT soft_expiry <= now() FROM gridha.instances WHERE instance_id = pg_temp.b()),
          'its lease ended at the release: it no longer counts as live');
SELECT is((SELECT state FROM gridha.claims WHERE service_id = 'b1'), 'slow',
          'b1, kept for its batch submitting, is slow: it waits for B''s report or hard expiry');
SELECT results_eq($$SELECT service_id FROM gridha.next_batch(pg_temp.a())$$,
                  $$VALUES ('b2'::text)$$,
                  'A takes what B gave back and hands it out');
SELECT results_eq($$SELECT service_id, holder FROM pg_temp.claims() WHERE service_id LIKE 'b%'$$,
                  $$VALUES ('b1', 'B'), ('b2', 'A')$$,
                  'b1 stays with B');

-- 4. A has a head of its own in flight and nothing ready, above its share;
-- B is past its hard expiry with b1 ready.
SELECT pg_temp.scenario('{f1,e2,e3,e4}', '{b1}', '{e2,e3,e4}', '{f1}');
SELECT pg_temp.third();
UPDATE gridha.instances SET soft_expiry = now() - interval '2 hours', hard_expiry = now() - interval '1 second'
 WHERE instance_id = pg_temp.b();
SELECT is((SELECT count(*) FROM gridha.next_batch(pg_temp.a())), 0::bigint,
          'A, busy with f1 in flight, has nothing to hand out');
SELECT results_eq($$SELECT service_id, holder FROM pg_temp.claims() WHERE service_id = 'b1'$$,
                  $$VALUES ('b1', 'B')$$,
                  'and does not take B''s work beyond its share: it is not idle');

SELECT * FROM finish();
ROLLBACK;
