-- 14_idle_poll.sql: an instance at its share whose next_batch finds nothing
-- to hand out looks at the other instances (liveness, shares, relief) at
-- most once a second; in between, each idle poll only asks whether there
-- is anything to take, and takes it at once when there is: free work, a
-- lease that ran out, a claim whose own expiry passed.
--
-- One transaction, rolled back (now() stays where it was; the once a
-- second follows the clock). Each scenario has its own instances X and Y,
-- live, each holding one service whose queue is empty (x1 and y1, say);
-- X's first call looks at everything, then the scenario changes one thing
-- and X polls again.
BEGIN;
SELECT plan(8);

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = on;
SET LOCAL gridha.renew_interval = '1h';
SET LOCAL gridha.soft_expiry = '2h';
\o

\ir lib/idle_scenario.sql

-- 1. Nothing changes: the polls find nothing.
SELECT is(pg_temp.scenario(1), 0::bigint, 'X''s first poll finds nothing');
SELECT is((SELECT count(*) FROM gridha.next_batch(pg_temp.x())), 0::bigint,
          'nor does its next one');

-- 2. Free work: a new service.
SELECT pg_temp.scenario(2);
SELECT gridha.enqueue('f2', 'f2-b1', NULL) \g /dev/null
SELECT results_eq($$SELECT service_id, batch_id FROM gridha.next_batch(pg_temp.x())$$,
                  $$VALUES ('f2', 'f2-b1')$$,
                  'a new service: X''s next poll takes it and hands out its batch');

-- 3. Y's lease ran out, with a batch ready on y3.
SELECT pg_temp.scenario(3);
SELECT gridha.enqueue('y3', 'y3-b1', NULL) \g /dev/null
UPDATE gridha.instances SET soft_expiry = now() - interval '1 second' WHERE instance_id = pg_temp.y();
SELECT results_eq($$SELECT service_id, batch_id, epoch FROM gridha.next_batch(pg_temp.x())$$,
                  $$VALUES ('y3', 'y3-b1', 2::bigint)$$,
                  'Y''s lease ran out: X''s next poll takes y3 at epoch 2');

-- 4. y4's own expiry passed (an operator's UPDATE), Y's lease is live. Y
-- also holds z4, idle, so that X is below its share's ceiling (3 services
-- for 2): a claim expired on its own is taken within the share.
SELECT pg_temp.scenario(4);
SELECT gridha.enqueue(s, s || '-b1', NULL) FROM unnest(ARRAY['y4', 'z4']) AS s \g /dev/null
UPDATE gridha.batches SET status = 'committed', epoch = 1, attempts = 1,
       handed_out_at = now(), finished_at = now()
 WHERE service_id = 'z4';
UPDATE gridha.service_claims SET claimant = pg_temp.y(), epoch = 1, head_seq = NULL, ready_at = NULL
 WHERE service_id = 'z4';
UPDATE gridha.instances SET held = 2 WHERE instance_id = pg_temp.y();
UPDATE gridha.service_claims SET soft_expiry = now() - interval '1 second' WHERE service_id = 'y4';
SELECT results_eq($$SELECT service_id, batch_id, epoch FROM gridha.next_batch(pg_temp.x())$$,
                  $$VALUES ('y4', 'y4-b1', 2::bigint)$$,
                  'y4''s own soft expiry passed: X''s next poll takes it at epoch 2');

-- 5. What only looking at the others finds waits for the next second: Y,
-- holding more than X, gets two services with work (relief would take
-- one). X's next poll does not see it; a poll a second later does.
SELECT pg_temp.scenario(5);
SELECT gridha.enqueue(s, s || '-b1', NULL) FROM unnest(ARRAY['y5', 'z5']) AS s \g /dev/null
UPDATE gridha.service_claims SET claimant = pg_temp.y(), epoch = 1 WHERE service_id = 'z5';
UPDATE gridha.instances SET held = 2 WHERE instance_id = pg_temp.y();
SELECT is((SELECT count(*) FROM gridha.next_batch(pg_temp.x())), 0::bigint,
          'Y has two services with work: X''s next poll, within the second, takes nothing');
SELECT pg_sleep(1.1) \g /dev/null
SELECT results_eq($$SELECT service_id, epoch FROM gridha.next_batch(pg_temp.x())$$,
                  $$VALUES ('y5', 2::bigint)$$,
                  'a second later X looks at the others and relieves Y of y5');
SELECT results_eq($$SELECT service_id, claimant = pg_temp.x() FROM gridha.service_claims ORDER BY 1$$,
                  $$VALUES ('x5', true), ('y5', true), ('z5', false)$$,
                  'X holds x5 and y5, Y holds z5');

SELECT * FROM finish();
ROLLBACK;
