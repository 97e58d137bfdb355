-- 13_relief.sql: balance evens out work as well as counts. An instance
-- that finds nothing to hand out and holds less than its share's ceiling
-- takes a ready claim, with nothing in flight, from a live instance that
-- holds more claims than it and has at least two more services with work
-- (heads ready or in flight), at the next epoch, and hands its head out in
-- the same call. The counts stay within the share; a claim in flight never
-- moves; a move that would not even out the work is not made.
--
-- One transaction, rolled back. Each scenario has its own instances A and
-- B (the ones before it hold nothing and have no lease: they are gone), and
-- its own services, each with two batches, arranged directly: empty (its
-- batches committed), in flight (its head submitting) or ready (its head
-- queued, the lower numbers waiting longer).
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

-- 1. A's service is done; B has two with work, both ready: A takes the one
-- that waited longest and hands it out.
SELECT pg_temp.scenario('{e1}', '{s2,s3}', '{e1}', '{}');
SELECT results_eq($$SELECT service_id, batch_id, epoch, attempt FROM gridha.next_batch(pg_temp.a())$$,
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

-- 6. The counts come first: 4 services for 2 instances is 2 each; A holds
-- its 2, both done, B 2 with work. Taking one would leave 3 and 1.
SELECT pg_temp.scenario('{e1,e2}', '{s3,s4}', '{e1,e2}', '{}');
SELECT is_empty($$SELECT * FROM gridha.next_batch(pg_temp.a())$$,
                'A at the ceiling of its share takes nothing, however busy B is');

-- 7. With balance off there are no shares to keep, and nothing is relieved.
SET LOCAL gridha.balance_claims = off;
SELECT pg_temp.scenario('{e1}', '{s2,s3}', '{e1}', '{}');
SELECT is_empty($$SELECT * FROM gridha.next_batch(pg_temp.a())$$,
                'balance off: A takes nothing from a live B');
SET LOCAL gridha.balance_claims = on;

SELECT * FROM finish();
ROLLBACK;
