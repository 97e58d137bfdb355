-- 13_relief.sql: the work share. Services with work (a head ready or in
-- flight) are what is balanced: W of them over n live instances, each
-- serving W / n and W mod n of them one more. An instance below its share
-- takes free services with work first, then ready claims, with nothing in
-- flight, from the busiest live instance while that one keeps at least two
-- more than it (a move that would not even out the work is not made), at
-- the next epoch, and hands a head out in the same call. Counts do not
-- hold work back, a claim in flight never moves, and idle claims stay
-- where they are.
--
-- One transaction, rolled back. Each scenario has its own instances A and
-- B (the ones before it hold nothing and have no lease: they are gone), and
-- its own services, each with two batches, arranged directly: empty (its
-- batches committed), in flight (its head submitting) or ready (its head
-- queued, the lower numbers waiting longer).
BEGIN;
SELECT plan(21);

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

-- 1. A's service is done; B has two with work, both ready: A takes the one
-- that waited longest and hands it out.
SELECT pg_temp.scenario('{e1}', '{s2,s3}', '{e1}', '{}');
SELECT results_eq($$SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batch(pg_temp.a())$$,
                  $$VALUES ('s2', 's2-x1', 2::bigint, 1)$$,
                  'A, with nothing to hand out, takes B''s ready claim that waited longest and hands out its head at epoch 2');
SELECT results_eq($$SELECT * FROM pg_temp.claims()$$,
                  $$VALUES ('e1', 'A', 1::bigint, false), ('s2', 'A', 2::bigint, true), ('s3', 'B', 1::bigint, false)$$,
                  'only that claim moved');
SELECT results_eq($$SELECT * FROM pg_temp.held()$$, $$VALUES (2, 1)$$,
                  'the counts follow: A 2, B 1 (the share is 1 to 2)');

-- 2. B has one in flight and one ready (one client serving two services):
-- A takes the ready one, never the one in flight.
SELECT pg_temp.scenario('{e1}', '{f2,s3}', '{e1}', '{f2}');
SELECT results_eq($$SELECT service_id, epoch FROM gridha.next_batch(pg_temp.a())$$,
                  $$VALUES ('s3', 2::bigint)$$,
                  'B serving f2 with s3 waiting: A takes s3');
SELECT results_eq($$SELECT * FROM pg_temp.claims()$$,
                  $$VALUES ('e1', 'A', 1::bigint, false), ('f2', 'B', 1::bigint, true), ('s3', 'A', 2::bigint, true)$$,
                  'f2, in flight, stays B''s at epoch 1');

-- 3. B's other service has nothing to do: moving s3 would leave B idle
-- instead of A. Nothing moves.
SELECT pg_temp.scenario('{e1}', '{e2,s3}', '{e1,e2}', '{}');
SELECT is_empty($$SELECT * FROM gridha.next_batch(pg_temp.a())$$,
                'B has one service with work: A takes nothing');
SELECT results_eq($$SELECT * FROM pg_temp.claims()$$,
                  $$VALUES ('e1', 'A', 1::bigint, false), ('e2', 'B', 1::bigint, false), ('s3', 'B', 1::bigint, false)$$,
                  '... and every claim stays where it was');

-- 4. B's two services are both in flight: nothing ready to move.
SELECT pg_temp.scenario('{e1}', '{f2,f3}', '{e1}', '{f2,f3}');
SELECT is_empty($$SELECT * FROM gridha.next_batch(pg_temp.a())$$,
                'B has two services in flight and none ready: A takes nothing');

-- 5. The work evens out, not just any work moves: A has one in flight, B
-- one in flight and two ready (3 against 1): A takes one. With one of B's
-- ready ones done instead (2 against 1), the move would only swap who
-- waits: nothing moves.
SELECT pg_temp.scenario('{e1,f2}', '{f3,s4,s5}', '{e1}', '{f2,f3}');
SELECT results_eq($$SELECT service_id, epoch FROM gridha.next_batch(pg_temp.a())$$,
                  $$VALUES ('s4', 2::bigint)$$,
                  'A with 1 service with work, B with 3: A takes B''s oldest ready one');
SELECT results_eq($$SELECT * FROM pg_temp.held()$$, $$VALUES (3, 2)$$,
                  'A 3, B 2: within the share of 2 to 3');
SELECT pg_temp.scenario('{e1,f2}', '{f3,s4,e5}', '{e1,e5}', '{f2,f3}');
SELECT is_empty($$SELECT * FROM gridha.next_batch(pg_temp.a())$$,
                'A with 1 service with work, B with 2: A takes nothing');

-- 6. Counts do not hold work back: 4 services for 2 instances is 2 each;
-- A holds its 2, both done, B 2 with work. A takes one (3 claims to 1).
SELECT pg_temp.scenario('{e1,e2}', '{s3,s4}', '{e1,e2}', '{}');
SELECT results_eq($$SELECT service_id, epoch FROM gridha.next_batch(pg_temp.a())$$,
                  $$VALUES ('s3', 2::bigint)$$,
                  'A at the ceiling of its count share takes B''s oldest ready service all the same');
SELECT results_eq($$SELECT * FROM pg_temp.held()$$, $$VALUES (3, 1)$$,
                  '... A 3 claims, B 1: the work is even');

-- 7. With balance off there are no shares to keep, and nothing is relieved.
SET LOCAL gridha.balance_claims = off;
SELECT pg_temp.scenario('{e1}', '{s2,s3}', '{e1}', '{}');
SELECT is_empty($$SELECT * FROM gridha.next_batch(pg_temp.a())$$,
                'balance off: A takes nothing from a live B');
SET LOCAL gridha.balance_claims = on;

-- 8. Free services with work spread, whatever the counts: B holds 10 idle
-- claims (e11..e20), A none, and 6 services with work (s3..s8) appear
-- free. The count share (16 over 2) would let A take all 6; A's call takes
-- its work share, 3, those that waited longest; B, above its count share
-- of 8, takes the other 3 all the same: counts never hold work back.
SELECT pg_temp.scenario('{}', '{e11,e12,e13,e14,e15,e16,e17,e18,e19,e20,s3,s4,s5,s6,s7,s8}',
                        '{e11,e12,e13,e14,e15,e16,e17,e18,e19,e20}', '{}');
UPDATE gridha.service_claims SET claimant = NULL, epoch = 0 WHERE service_id LIKE 's%';
UPDATE gridha.instances SET held = 10 WHERE instance_id = pg_temp.b();
SELECT results_eq($$SELECT service_id, epoch FROM gridha.next_batch(pg_temp.a())$$,
                  $$VALUES ('s3', 1::bigint)$$,
                  'A, idle, takes its work share of the free services and hands out the oldest');
SELECT results_eq($$SELECT service_id, holder FROM pg_temp.claims() WHERE service_id LIKE 's%'$$,
                  $$VALUES ('s3', 'A'), ('s4', 'A'), ('s5', 'A'), ('s6', NULL), ('s7', NULL), ('s8', NULL)$$,
                  '... 3 of the 6 (6 over 2 instances), those that waited longest, not all 6');
SELECT results_eq($$SELECT service_id FROM gridha.next_batch(pg_temp.b())$$, $$VALUES ('s6')$$,
                  'B, above its count share with 10 idle claims, takes the other 3 and hands out the oldest');
SELECT results_eq($$SELECT holder, count(*) FROM pg_temp.claims() WHERE service_id LIKE 's%' GROUP BY 1 ORDER BY 1$$,
                  $$VALUES ('A', 3::bigint), ('B', 3::bigint)$$, '... 3 services with work each');
SELECT is((SELECT count(*) FROM pg_temp.claims() WHERE service_id LIKE 'e%' AND holder = 'B'), 10::bigint,
          '... and B keeps its 10 idle claims: idle claims stay where they are');

-- 9. An instance above its count share keeps its idle claims and its work:
-- A holds 4 (s2, s3 with work, e1, e4 done), B 1 (e5); the count share is
-- 2 to 3. A hands out s2 and hands nothing back.
SELECT pg_temp.scenario('{e1,s2,s3,e4}', '{e5}', '{e1,e4,e5}', '{}');
SELECT results_eq($$SELECT service_id FROM gridha.next_batch(pg_temp.a())$$, $$VALUES ('s2')$$,
                  'A, above its count share, hands out s2');
SELECT results_eq($$SELECT * FROM pg_temp.claims()$$,
                  $$VALUES ('e1', 'A', 1::bigint, false), ('e4', 'A', 1::bigint, false),
                           ('e5', 'B', 1::bigint, false), ('s2', 'A', 1::bigint, true),
                           ('s3', 'A', 1::bigint, false)$$,
                  '... and keeps its 2 idle claims and both with work');

SELECT * FROM finish();
ROLLBACK;
