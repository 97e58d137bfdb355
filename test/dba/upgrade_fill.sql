-- test/dba/upgrade_fill.sql: fills a database whose gridha SQL is still 1.0,
-- through the 1.0 API only, for test/t/015_upgrade.pl.
--
-- Run by psql as a superuser in a database where CREATE EXTENSION gridha
-- VERSION '1.0' was done, with the database defaults the suite sets
-- (gridha.session_liveness off, claim expiries of half an hour), after the
-- suite's queuer-cycle check created the instance named S (its id is in
-- upgrade_scratch.instance).
--
-- Words used here:
--   scratch   the schema upgrade_scratch: the test's own bookkeeping (which
--             instance is which, what each scripted batch should end as,
--             the ids reserved) and, later, the snapshots; never gridha's
--   script    for each batch of the st-* services, the status it must end
--             in (want): the hand-out loop reports what gets it there
--   bulk      100,000 services bulk-000001.. with one batch each (every
--             tenth has a second one), inserted by a plain INSERT ... SELECT
--
-- What it leaves (every batch status, every claim state):
--   S    holds q1, st-1..st-7, rl-1..rl-3: batches queued, submitting,
--        pending, valid, delayed, unknown, committed and invalid; rl-* are
--        on the rate-limited target 'limited' (burst 2: one stays queued)
--   A, B hold their fair share of the bulk (balance on), C the rest
--        (balance off); A has 300 heads handed out (200 reported accepted),
--        B 50 reported delayed, C 200 accepted of which 100 committed
--   R    took rel-1..rel-3 and released them: free claims with epoch 1;
--        free-1, free-2 were never claimed (epoch 0)
--   expired: five of A's idle claims soft-expired, five of A's claims
--        with a head submitting soft-expired (slow), five of C's claims
--        hard-expired (moved into the past with an UPDATE, as the tests
--        do: no sleeping)
--   the 'default' target changed, a leader lease with a maintenance tick,
--   an id sequence with ids reserved (in upgrade_scratch.reserved)

\set ON_ERROR_STOP 1
SET client_min_messages = warning;

-- ---------------------------------------------------------------------------
-- Targets: a changed default row, a rate-limited target

UPDATE gridha.targets
   SET status_url = 'http://127.0.0.1:9/batch_statuses?id={batch_ids}',
       rate_burst = 7
 WHERE target = 'default';

INSERT INTO gridha.targets (target, rate_interval, rate_burst)
VALUES ('limited', '1 hour', 2);

-- ---------------------------------------------------------------------------
-- Scripted services of S: every batch status

CREATE TABLE upgrade_scratch.script (
    service_id text NOT NULL,
    batch_id   text PRIMARY KEY,
    want       text NOT NULL,
    target     text
);

INSERT INTO upgrade_scratch.script (service_id, batch_id, want, target)
SELECT s.service_id, s.service_id || '-b' || w.n, w.want, s.target
  FROM (VALUES ('st-1', '{committed,committed,pending,queued}'::text[], NULL::text),
               ('st-2', '{committed,invalid,submitting,queued}', NULL),
               ('st-3', '{invalid_dlt,valid,queued}', NULL),
               ('st-4', '{committed,delayed,queued}', NULL),
               ('st-5', '{unknown,queued,queued}', NULL),
               ('st-6', '{committed,invalid,committed}', NULL),
               ('st-7', '{pending}', NULL),
               ('rl-1', '{committed}', 'limited'),
               ('rl-2', '{committed}', 'limited'),
               ('rl-3', '{committed}', 'limited')) s (service_id, wants, target)
 CROSS JOIN LATERAL unnest(s.wants) WITH ORDINALITY w (want, n);

SELECT count(*) AS enqueued
  FROM (SELECT gridha.enqueue(service_id, batch_id,
                              convert_to(batch_id || ' payload', 'UTF8'), target)
          FROM upgrade_scratch.script ORDER BY service_id, batch_id) e \gset

-- S is the only instance so far: with balance off it takes every service.
SET gridha.balance_claims = off;
SELECT count(*) AS s_claims
  FROM gridha.acquire_claims((SELECT id FROM upgrade_scratch.instance WHERE name = 'S')) \gset

-- Four rounds of hand-outs; each batch is reported until it has its want.
-- A batch that comes back (unknown is resubmitted first) is reported the
-- same way again. 'queued' batches wait behind their service's head.
DO $$
DECLARE
    s uuid := (SELECT id FROM upgrade_scratch.instance WHERE name = 'S');
    r record;
    w text;
BEGIN
    FOR round IN 1..4 LOOP
        FOR r IN SELECT * FROM gridha.next_batches(s, 100) LOOP
            SELECT want INTO w FROM upgrade_scratch.script WHERE batch_id = r.batch_id;
            CASE w
                WHEN 'submitting' THEN
                    NULL;
                WHEN 'delayed' THEN
                    PERFORM gridha.report_submission(s, r.service_id, r.batch_id, r.epoch, 'delayed', 'http 503');
                WHEN 'invalid' THEN
                    PERFORM gridha.report_submission(s, r.service_id, r.batch_id, r.epoch, 'rejected', 'http 400');
                ELSE
                    PERFORM gridha.report_submission(s, r.service_id, r.batch_id, r.epoch, 'accepted');
                    IF w IN ('committed', 'valid', 'unknown', 'invalid_dlt') THEN
                        PERFORM gridha.report_status(s, r.service_id, r.batch_id, r.epoch,
                                                     CASE w WHEN 'invalid_dlt' THEN 'INVALID'
                                                            ELSE upper(w) END);
                    END IF;
            END CASE;
        END LOOP;
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------
-- Singleton duties and ids

SELECT gridha.try_lead((SELECT id FROM upgrade_scratch.instance WHERE name = 'S')) AS term \gset
SELECT outcome AS tick_outcome
  FROM gridha.run_maintenance((SELECT id FROM upgrade_scratch.instance WHERE name = 'S')) \gset

SELECT gridha.create_id_sequence('orders', 1000, 3);

CREATE TABLE upgrade_scratch.reserved (ids int8range NOT NULL);
INSERT INTO upgrade_scratch.reserved
SELECT gridha.reserve_ids('orders', n) FROM (VALUES (10), (25), (900), (5)) v (n);
-- next_id reserves a block of gridha.id_block_size for this backend
INSERT INTO upgrade_scratch.reserved
SELECT int8range(i, i, '[]') FROM (SELECT gridha.next_id('orders') AS i) x;

-- ---------------------------------------------------------------------------
-- The bulk: 100,000 services, by a plain INSERT

INSERT INTO gridha.batches (service_id, batch_id, payload)
SELECT format('bulk-%s', lpad(g::text, 6, '0')), format('bulk-%s-b1', lpad(g::text, 6, '0')),
       decode(md5(g::text), 'hex')
  FROM generate_series(1, 100000) g;

INSERT INTO gridha.batches (service_id, batch_id, payload)
SELECT format('bulk-%s', lpad(g::text, 6, '0')), format('bulk-%s-b2', lpad(g::text, 6, '0')),
       decode(md5('second ' || g), 'hex')
  FROM generate_series(10, 100000, 10) g;

-- A, B and C count as live (renew_claims records the cycle), then A and B
-- take their fair share and C, with balance off, everything left.
INSERT INTO upgrade_scratch.instance (name, id)
SELECT n, gridha.register_instance(n) FROM unnest(ARRAY['A', 'B', 'C']) n;
SELECT count(gridha.renew_claims(id)) FROM upgrade_scratch.instance WHERE name IN ('A', 'B', 'C') \gset

SET gridha.balance_claims = on;
SELECT count(*) AS a_claims FROM gridha.acquire_claims((SELECT id FROM upgrade_scratch.instance WHERE name = 'A')) \gset
SELECT count(*) AS b_claims FROM gridha.acquire_claims((SELECT id FROM upgrade_scratch.instance WHERE name = 'B')) \gset
SET gridha.balance_claims = off;
SELECT count(*) AS c_claims FROM gridha.acquire_claims((SELECT id FROM upgrade_scratch.instance WHERE name = 'C')) \gset

-- Heads in flight: A 300 handed out, 200 of them accepted (pending)
CREATE TABLE upgrade_scratch.handed (name text, service_id text, batch_id text, epoch bigint);
INSERT INTO upgrade_scratch.handed
SELECT 'A', h.service_id, h.batch_id, h.epoch
  FROM gridha.next_batches((SELECT id FROM upgrade_scratch.instance WHERE name = 'A'), 300) h;
SELECT count(gridha.report_submission(i.id, h.service_id, h.batch_id, h.epoch, 'accepted'))
  FROM (SELECT * FROM upgrade_scratch.handed WHERE name = 'A' ORDER BY batch_id LIMIT 200) h,
       upgrade_scratch.instance i WHERE i.name = 'A' \gset

-- B: 50 delayed
INSERT INTO upgrade_scratch.handed
SELECT 'B', h.service_id, h.batch_id, h.epoch
  FROM gridha.next_batches((SELECT id FROM upgrade_scratch.instance WHERE name = 'B'), 50) h;
SELECT count(gridha.report_submission(i.id, h.service_id, h.batch_id, h.epoch, 'delayed', 'timeout'))
  FROM upgrade_scratch.handed h, upgrade_scratch.instance i WHERE h.name = 'B' AND i.name = 'B' \gset

-- C: 200 accepted, 100 of them committed
INSERT INTO upgrade_scratch.handed
SELECT 'C', h.service_id, h.batch_id, h.epoch
  FROM gridha.next_batches((SELECT id FROM upgrade_scratch.instance WHERE name = 'C'), 200) h;
SELECT count(gridha.report_submission(i.id, h.service_id, h.batch_id, h.epoch, 'accepted'))
  FROM upgrade_scratch.handed h, upgrade_scratch.instance i WHERE h.name = 'C' AND i.name = 'C' \gset
SELECT count(gridha.report_status(i.id, h.service_id, h.batch_id, h.epoch, 'committed'))
  FROM (SELECT * FROM upgrade_scratch.handed WHERE name = 'C' ORDER BY batch_id LIMIT 100) h,
       upgrade_scratch.instance i WHERE i.name = 'C' \gset

-- ---------------------------------------------------------------------------
-- Free claims: released (epoch 1) and never claimed (epoch 0)

SELECT gridha.enqueue('rel-' || n, 'rel-' || n || '-b1', '\x0102') FROM generate_series(1, 3) n;
INSERT INTO upgrade_scratch.instance (name, id) VALUES ('R', gridha.register_instance('R'));
SELECT count(*) AS r_claims FROM gridha.acquire_claims((SELECT id FROM upgrade_scratch.instance WHERE name = 'R')) \gset
SELECT gridha.release_claims((SELECT id FROM upgrade_scratch.instance WHERE name = 'R')) AS r_released \gset
SELECT gridha.enqueue('free-' || n, 'free-' || n || '-b1', '\x0304') FROM generate_series(1, 2) n;

-- ---------------------------------------------------------------------------
-- Expired claims (no call by A or C may follow: a renewal revives them)

UPDATE gridha.service_claims
   SET soft_expiry = now() - interval '1 minute'
 WHERE service_id IN (SELECT c.service_id FROM gridha.service_claims c
                       JOIN upgrade_scratch.instance i ON i.id = c.claimant AND i.name = 'A'
                      WHERE NOT c.in_flight ORDER BY c.service_id LIMIT 5);

UPDATE gridha.service_claims
   SET soft_expiry = now() - interval '1 minute'
 WHERE service_id IN (SELECT h.service_id FROM upgrade_scratch.handed h
                       JOIN gridha.batches b USING (service_id, batch_id)
                      WHERE h.name = 'A' AND b.status = 'submitting'
                      ORDER BY h.service_id LIMIT 5);

UPDATE gridha.service_claims
   SET soft_expiry = now() - interval '2 minutes', hard_expiry = now() - interval '1 minute'
 WHERE service_id IN (SELECT c.service_id FROM gridha.service_claims c
                       JOIN upgrade_scratch.instance i ON i.id = c.claimant AND i.name = 'C'
                      WHERE NOT c.in_flight ORDER BY c.service_id LIMIT 5);

SELECT :'enqueued' AS scripted_batches, :'s_claims' AS s_claims, :'a_claims' AS a_claims,
       :'b_claims' AS b_claims, :'c_claims' AS c_claims, :'r_claims' AS r_claims,
       :'r_released' AS r_released, :'term' AS term, :'tick_outcome' AS tick;
