-- 11_fair_share.sql: a newcomer gets its fair share on its next calls, not
-- a renew interval later. One below its share that finds nothing free asks
-- those above it to shed (instances.shed); each hands back that many idle
-- claims on its next hand-out, never one with a batch in flight and never
-- below its own share; the newcomer takes them on its next call. Nobody's
-- claim cycle is due anywhere in this file (renew_interval 1h): the shares
-- move by shedding alone.
--
-- One transaction, rolled back.
--
-- Instances: P holds everything at first, Q and R join. Then W, which
-- serves every kind, and C, which serves URL targets only: services only W
-- can serve are W's whatever its share, and W sheds the others instead.
BEGIN;
SELECT plan(24);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = on;
SET LOCAL gridha.renew_interval = '1h';
SET LOCAL gridha.soft_expiry = '2h';
SELECT gridha.enqueue(format('fs-%s', lpad(i::text, 2, '0')), 'b' || j, NULL)
  FROM generate_series(1, 12) AS i, generate_series(1, 3) AS j;
\o

CREATE TEMP TABLE ids AS
    SELECT gridha.register_instance('P') AS p, gridha.register_instance('Q') AS q,
           gridha.register_instance('R') AS r;
CREATE FUNCTION pg_temp.p() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT p FROM ids $$;
CREATE FUNCTION pg_temp.q() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT q FROM ids $$;
CREATE FUNCTION pg_temp.r() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT r FROM ids $$;
CREATE FUNCTION pg_temp.held(inst uuid) RETURNS bigint
LANGUAGE sql AS $$ SELECT count(*) FROM gridha.service_claims WHERE claimant = inst $$;

-- Q and R registered but have not called yet: P, alone in the lease index
-- with a live lease, takes every service it counts as its share.
UPDATE gridha.instances SET soft_expiry = NULL, hard_expiry = NULL WHERE instance_id IN (pg_temp.q(), pg_temp.r());
SELECT is((SELECT count(*) FROM gridha.next_batches(pg_temp.p(), 8)), 8::bigint,
          'P hands out 8 batches');
SELECT is(pg_temp.held(pg_temp.p()), 12::bigint, 'P, alone, holds all 12 services, 8 of them in flight');

-- Q joins: nothing is free, so it asks P to shed.
SELECT is_empty($$SELECT * FROM gridha.next_batch(pg_temp.q())$$,
                'Q''s first call finds nothing free and hands out nothing');
SELECT is((SELECT shed FROM gridha.instances WHERE instance_id = pg_temp.p()), 6,
          'Q asked P, 6 above the share of 6, to shed the 6 Q misses');

-- P's next hand-out sheds (its cycle is not due).
SELECT is((SELECT count(*) FROM gridha.next_batch(pg_temp.p())), 0::bigint,
          'P''s next call hands out nothing new (its idle services were the ones it shed)');
SELECT is(pg_temp.held(pg_temp.p()), 8::bigint, 'P handed back the 4 idle claims it had, not the 6 asked');
SELECT is((SELECT count(*) FROM gridha.service_claims c
            WHERE c.claimant = pg_temp.p() AND c.in_flight), 8::bigint,
          'every claim P kept has its batch in flight: none in flight was shed');

-- Q's next call takes them.
SELECT is((SELECT count(*) FROM gridha.next_batches(pg_temp.q(), 10)), 4::bigint,
          'Q''s next call takes the 4 and hands out their heads');
SELECT is(pg_temp.held(pg_temp.q()), 4::bigint, 'Q holds 4');

-- R joins: the share is now 4. P is 4 above it, but all in flight: the
-- request stands until P's batches finish and P has idle claims to give.
SELECT is_empty($$SELECT * FROM gridha.next_batch(pg_temp.r())$$,
                'R''s first call finds nothing free');
SELECT gridha.report_status(pg_temp.p(), b.service_id, b.batch_id, b.epoch, 'committed')
  FROM gridha.batches b JOIN gridha.service_claims c USING (service_id)
 WHERE c.claimant = pg_temp.p() AND b.status = 'submitting' \g /dev/null
SELECT is((SELECT count(*) FROM gridha.next_batches(pg_temp.p(), 10)), 4::bigint,
          'once its batches are done P sheds 4 and hands out the heads of the 4 it keeps');
SELECT results_eq(
    $$SELECT pg_temp.held(pg_temp.p()), (SELECT count(*) FROM gridha.next_batches(pg_temp.r(), 10)),
             pg_temp.held(pg_temp.r()), pg_temp.held(pg_temp.q())$$,
    $$VALUES (4::bigint, 4::bigint, 4::bigint, 4::bigint)$$,
    'R takes the 4 on its next call: 4, 4 and 4');

-- W serves every kind, C only URL targets. W, alone, holds all 6 URL
-- services; C joins and asks W to shed; then 2 services of a function
-- target arrive that only W can serve. W's share is now 3 URL + 2
-- function services: it takes the 2 beyond its ceiling and sheds 3 URL
-- services instead, so C's share is free for C and nothing is stranded.
TRUNCATE gridha.batches, gridha.service_claims;
DELETE FROM gridha.instances;
CREATE FUNCTION pg_temp.fn_submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT 'accepted' $$;
INSERT INTO gridha.targets (target, submit_url) VALUES ('fs-web', 'http://127.0.0.1:1/{service_id}/{batch_id}');
INSERT INTO gridha.targets (target, submit_function) VALUES ('fs-db', 'pg_temp.fn_submit(text,text,bytea,bigint)');
\o /dev/null
SELECT gridha.enqueue(format('web-%s', i), 'b1', NULL, 'fs-web') FROM generate_series(1, 6) AS i;
\o
CREATE TEMP TABLE wc AS
    SELECT gridha.register_instance('W') AS w, gridha.register_instance('C', '{submit_url,status_url}') AS c;
CREATE FUNCTION pg_temp.w() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT w FROM wc $$;
CREATE FUNCTION pg_temp.c() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT c FROM wc $$;
UPDATE gridha.instances SET soft_expiry = NULL, hard_expiry = NULL WHERE instance_id = pg_temp.c();
SELECT is((SELECT count(*) FROM gridha.acquire_claims(pg_temp.w())), 6::bigint, 'W, alone, takes the 6 URL services');
SELECT is((SELECT count(*) FROM gridha.acquire_claims(pg_temp.c())), 0::bigint,
          'C joins, finds nothing free and asks W to shed');
SELECT gridha.renew_claims(pg_temp.c()) \g /dev/null
\o /dev/null
SELECT gridha.enqueue(format('db-%s', i), 'b1', NULL, 'fs-db') FROM generate_series(1, 2) AS i;
\o
SELECT is((SELECT count(*) FROM gridha.acquire_claims(pg_temp.w())), 2::bigint,
          'W takes the 2 function services only it can serve, though it was at its ceiling');
SELECT results_eq(
    $$SELECT c.target, count(*) FROM gridha.service_claims c WHERE c.claimant = pg_temp.w()
       GROUP BY 1 ORDER BY 1$$,
    $$VALUES ('fs-db'::text, 2::bigint), ('fs-web', 3)$$,
    'W keeps the 2 function services and sheds URL services down to its share of 3');
SELECT is((SELECT count(*) FROM gridha.next_batches(pg_temp.c(), 10)), 3::bigint,
          'C takes the 3 URL services W shed and hands out their heads');
SELECT results_eq(
    $$SELECT pg_temp.held(pg_temp.w()), pg_temp.held(pg_temp.c()),
             (SELECT count(*) FROM gridha.service_claims WHERE claimant IS NULL)$$,
    $$VALUES (5::bigint, 3::bigint, 0::bigint)$$,
    'every service is held: W 5, C 3, none free');

-- A newcomer that got part of its share and has work asks for the rest
-- while it serves, not only when it runs dry: N holds 2 of its share of 6,
-- both with work. Its calls hand them out; the first one 200 ms or more
-- after its last acquisition asks P2 to shed the 4 it misses.
TRUNCATE gridha.batches, gridha.service_claims;
DELETE FROM gridha.instances;
\o /dev/null
SELECT gridha.enqueue(format('ns-%s', lpad(i::text, 2, '0')), 'b' || j, NULL)
  FROM generate_series(1, 12) AS i, generate_series(1, 3) AS j;
\o
CREATE TEMP TABLE pn AS
    SELECT gridha.register_instance('P2') AS p2, gridha.register_instance('N') AS n;
CREATE FUNCTION pg_temp.p2() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT p2 FROM pn $$;
CREATE FUNCTION pg_temp.n() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT n FROM pn $$;
UPDATE gridha.instances SET soft_expiry = NULL, hard_expiry = NULL WHERE instance_id = pg_temp.n();
SELECT is((SELECT count(*) FROM gridha.acquire_claims(pg_temp.p2())), 12::bigint, 'P2, alone, takes all 12 services');
SELECT is((SELECT count(*) FROM gridha.acquire_claims(pg_temp.n())), 0::bigint,
          'N joins and finds nothing free (its share is 6)');
SELECT gridha.renew_claims(pg_temp.n()) \g /dev/null
-- as if P2 had shed only 2 of the 6: N holds 2 services with work
UPDATE gridha.instances SET shed = 0 WHERE instance_id = pg_temp.p2();
UPDATE gridha.service_claims SET claimant = pg_temp.n(), epoch = epoch + 1
 WHERE service_id IN ('ns-01', 'ns-02');
UPDATE gridha.instances SET held = held - 2 WHERE instance_id = pg_temp.p2();
UPDATE gridha.instances SET held = held + 2 WHERE instance_id = pg_temp.n();
SELECT is((SELECT count(*) FROM gridha.next_batch(pg_temp.n())), 1::bigint,
          'N hands out a batch of its 2 services');
SELECT is((SELECT shed FROM gridha.instances WHERE instance_id = pg_temp.p2()), 0,
          '... and asks nobody to shed within 200 ms of its last acquisition');
SELECT pg_sleep(0.25) \g /dev/null
SELECT is((SELECT count(*) FROM gridha.next_batch(pg_temp.n())), 1::bigint,
          'N hands out the other service''s batch 250 ms later');
SELECT is((SELECT shed FROM gridha.instances WHERE instance_id = pg_temp.p2()), 4,
          '... and, below its share, asks P2 to shed the 4 it misses though it had work');

SELECT * FROM finish();
ROLLBACK;
