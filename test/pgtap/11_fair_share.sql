-- 11_fair_share.sql: the two shares. Services with work follow the work
-- share (13_relief): a newcomer takes its share of the work, from the free
-- services with work or the busiest instance's ready heads, whatever the
-- counts, at once or at its first poll a second after it last looked; one
-- left short because that work was in flight tries again 200 ms later
-- while it serves. Idle claims (no head ready, none in flight) cost nothing
-- and stay where they are: an instance above its count share keeps them,
-- and nobody asks for them. The count share only bounds how many free idle
-- claims an instance takes. Nobody's claim cycle is due anywhere in this
-- file (renew_interval 1h).
--
-- One transaction, rolled back.
--
-- Instances: P holds everything at first, Q and R join, P stops. Then W,
-- which serves every kind, and C, which serves URL targets only: services
-- only W can serve are W's whatever its share.
BEGIN;
SELECT plan(30);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = on;
SET LOCAL gridha.renew_interval = '1h';
SET LOCAL gridha.soft_expiry = '2h';
SELECT gridha.enqueue(format('fs-%s', lpad(i::text, 2, '0')), 'b1', NULL)
  FROM generate_series(1, 12) AS i;
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
-- with a live lease, takes every service, hands out and finishes every
-- batch: its 12 claims are idle.
UPDATE gridha.instances SET soft_expiry = NULL, hard_expiry = NULL WHERE instance_id IN (pg_temp.q(), pg_temp.r());
SELECT is((SELECT count(*) FROM gridha.next_batches(pg_temp.p(), 12)), 12::bigint,
          'P, alone, takes all 12 services and hands out their 12 batches');
SELECT gridha.report_status(pg_temp.p(), b.service_id, b.batch_id, b.epoch, 'committed')
  FROM gridha.batches b \g /dev/null
SELECT is((SELECT count(*) FROM gridha.service_claims
            WHERE claimant = pg_temp.p() AND NOT in_flight AND ready_at IS NULL), 12::bigint,
          'P holds 12 idle claims');

-- Q joins: nothing is free, nothing has work. Idle claims stay where they
-- are: Q takes none of P's, and nobody asks P for them.
SELECT is_empty($$SELECT * FROM gridha.next_batch(pg_temp.q())$$,
                'Q''s first call finds nothing free and hands out nothing');
SELECT results_eq($$SELECT pg_temp.held(pg_temp.p()), pg_temp.held(pg_temp.q())$$,
                  $$VALUES (12::bigint, 0::bigint)$$,
                  'P keeps its 12 idle claims, above its count share of 6; Q takes none of them');
SELECT hasnt_column('gridha', 'instances', 'shed',
                    'no request to hand back idle claims is kept (instances.shed is gone)');
SELECT is_empty($$SELECT * FROM gridha.next_batch(pg_temp.p())$$,
                'P''s next call hands out nothing (it has no work)');
SELECT is(pg_temp.held(pg_temp.p()), 12::bigint, '... and P still holds its 12 idle claims');

-- Work arrives on 3 of P's services, and R joins: the work share is 1
-- each. R takes one of P's at once; Q, which looked at the others less
-- than a second ago, takes its share at its first poll after that second;
-- P keeps its idle claims throughout.
SELECT gridha.enqueue(c.service_id, 'b2', NULL)
  FROM gridha.service_claims c WHERE c.claimant = pg_temp.p()
 ORDER BY c.service_id LIMIT 3 \g /dev/null
UPDATE gridha.instances SET soft_expiry = now() + interval '1 hour', hard_expiry = now() + interval '2 hours'
 WHERE instance_id = pg_temp.r();
SELECT is((SELECT count(*) FROM gridha.next_batch(pg_temp.r())), 1::bigint,
          'R''s first call takes its work share, one of P''s 3 services with work, and hands out its head');
SELECT pg_sleep(1.05) \g /dev/null
SELECT is((SELECT count(*) FROM gridha.next_batch(pg_temp.q())), 1::bigint,
          'Q''s first poll a second later takes its work share from P and hands out its head');
SELECT is((SELECT count(*) FROM gridha.next_batches(pg_temp.p(), 10)), 1::bigint,
          'P hands out the head of the one service with work it kept');
SELECT results_eq(
    $$SELECT pg_temp.held(pg_temp.p()), pg_temp.held(pg_temp.q()), pg_temp.held(pg_temp.r()),
             (SELECT count(*) FROM gridha.service_claims WHERE claimant IS NULL)$$,
    $$VALUES (10::bigint, 1::bigint, 1::bigint, 0::bigint)$$,
    'then P 10 (9 idle), Q 1, R 1, none free: only work moved');
SELECT results_eq(
    $$SELECT count(*) FILTER (WHERE claimant = pg_temp.p()), count(*) FILTER (WHERE claimant = pg_temp.q()),
             count(*) FILTER (WHERE claimant = pg_temp.r())
        FROM gridha.service_claims WHERE in_flight$$,
    $$VALUES (1::bigint, 1::bigint, 1::bigint)$$,
    '... each serves one service with work');

-- P stops cleanly: its 9 idle claims go free (the one in flight stays its
-- own until it is taken over). Free idle claims follow the count share:
-- 12 services over the 2 live instances, 6 each.
SELECT gridha.release_claims(pg_temp.p()) \g /dev/null
SELECT is((SELECT count(*) FROM gridha.acquire_claims(pg_temp.q())), 5::bigint,
          'Q takes free idle claims up to its count share of 6 (it held 1): 5');
SELECT is((SELECT count(*) FROM gridha.acquire_claims(pg_temp.r())), 4::bigint,
          'R takes the 4 left');
SELECT results_eq(
    $$SELECT pg_temp.held(pg_temp.p()), pg_temp.held(pg_temp.q()), pg_temp.held(pg_temp.r()),
             (SELECT count(*) FROM gridha.service_claims WHERE claimant IS NULL)$$,
    $$VALUES (1::bigint, 6::bigint, 5::bigint, 0::bigint)$$,
    'P keeps its head in flight, Q 6, R 5, none free');

-- W serves every kind, C only URL targets. W, alone, holds all 6 URL
-- services, each with a batch ready; C joins and takes its work share, 3
-- of them; then 2 services of a function target arrive that only W can
-- serve. W's share is now 3 URL + 2 function services: it takes the 2,
-- which are its whatever the shares, and nothing is stranded.
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
SELECT is((SELECT count(*) FROM gridha.acquire_claims(pg_temp.c())), 3::bigint,
          'C joins and takes its share of the work: 3 of W''s 6 ready URL services');
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
    'W holds the 2 function services and its 3 URL services');
SELECT is((SELECT count(*) FROM gridha.next_batches(pg_temp.c(), 10)), 3::bigint,
          'C hands out the heads of its 3 URL services');
-- C's call looked at the others (the first hand-out of an instance in a
-- backend does): W serves 5 services with work (2 only it can serve), C 3;
-- C takes one of W's ready URL services, 4 and 4
SELECT results_eq(
    $$SELECT pg_temp.held(pg_temp.w()), pg_temp.held(pg_temp.c()),
             (SELECT count(*) FROM gridha.service_claims WHERE claimant IS NULL),
             (SELECT count(*) FROM gridha.service_claims c WHERE c.claimant = pg_temp.w() AND c.target = 'fs-db')$$,
    $$VALUES (4::bigint, 4::bigint, 0::bigint, 2::bigint)$$,
    'every service is held: W 4 (its 2 function services among them), C 4, none free');

-- A newcomer left short of its work share, because the work it could take
-- was in flight, tries again while it serves, not only when it runs dry:
-- N holds 2 services with work, P2 10, all in flight when N acquires.
-- Once P2's heads are ready again, N's first call 200 ms or more after its
-- last acquisition takes 4 of them: 6 and 6.
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
-- as if N had taken 2 of them: N holds 2 services with work
UPDATE gridha.service_claims SET claimant = pg_temp.n(), epoch = epoch + 1
 WHERE service_id IN ('ns-01', 'ns-02');
UPDATE gridha.instances SET held = held - 2 WHERE instance_id = pg_temp.p2();
UPDATE gridha.instances SET held = held + 2 WHERE instance_id = pg_temp.n();
SELECT gridha.renew_claims(pg_temp.n()) \g /dev/null
SELECT is((SELECT count(*) FROM gridha.next_batches(pg_temp.p2(), 10)), 10::bigint,
          'P2 hands out the heads of its 10');
SELECT is((SELECT count(*) FROM gridha.acquire_claims(pg_temp.n())), 0::bigint,
          'N, 4 short of its work share of 6, takes nothing: P2''s work is all in flight');
SELECT gridha.report_status(pg_temp.p2(), b.service_id, b.batch_id, b.epoch, 'committed')
  FROM gridha.batches b WHERE b.status = 'submitting' \g /dev/null
SELECT is((SELECT count(*) FROM gridha.next_batch(pg_temp.n())), 1::bigint,
          'P2''s heads are ready again; N hands out a batch of its 2 services');
SELECT is(pg_temp.held(pg_temp.n()), 2::bigint,
          '... and takes nothing within 200 ms of its last acquisition');
SELECT pg_sleep(0.25) \g /dev/null
SELECT is((SELECT count(*) FROM gridha.next_batch(pg_temp.n())), 1::bigint,
          'N hands out the other service''s batch 250 ms later');
SELECT results_eq(
    $$SELECT pg_temp.held(pg_temp.n()), pg_temp.held(pg_temp.p2()),
             (SELECT count(*) FROM gridha.service_claims WHERE claimant = pg_temp.n() AND epoch = 2)$$,
    $$VALUES (6::bigint, 6::bigint, 6::bigint)$$,
    '... and takes 4 of P2''s ready services at the next epoch: 6 and 6');

-- Services that only one instance can serve are its own, and they do not
-- crowd others out of its work share: W2 serves every kind, C2 URL targets
-- only, both live; 6 function and 6 URL services appear, each with a batch
-- ready. W2 takes the 6 function services, its share of the 12, and leaves
-- the URL ones; C2 takes those.
TRUNCATE gridha.batches, gridha.service_claims;
DELETE FROM gridha.instances;
CREATE TEMP TABLE wc2 AS
    SELECT gridha.register_instance('W2', '{submit_url,submit_function,status_url,status_function}') AS w,
           gridha.register_instance('C2', '{submit_url,status_url}') AS c;
SELECT gridha.renew_claims(w), gridha.renew_claims(c) FROM wc2 \g /dev/null
\o /dev/null
SELECT gridha.enqueue(s, s || '-b1', NULL, CASE WHEN s LIKE 'cu%' THEN 'fs-web' ELSE 'fs-db' END)
  FROM unnest(ARRAY['cu1','cu2','cu3','cu4','cu5','cu6','cf1','cf2','cf3','cf4','cf5','cf6']) s;
\o
SELECT results_eq($$SELECT string_agg(service_id, ',' ORDER BY service_id) FROM gridha.acquire_claims((SELECT w FROM wc2))$$,
                  $$VALUES ('cf1,cf2,cf3,cf4,cf5,cf6')$$,
                  'W2 takes the 6 function services only it can serve: that is its share of the work');
SELECT results_eq($$SELECT string_agg(service_id, ',' ORDER BY service_id) FROM gridha.acquire_claims((SELECT c FROM wc2))$$,
                  $$VALUES ('cu1,cu2,cu3,cu4,cu5,cu6')$$,
                  'C2 takes the 6 URL services');

SELECT * FROM finish();
ROLLBACK;
