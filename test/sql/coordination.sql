-- coordination: leader lease, maintenance ticks (clock jumps included),
-- maintenance duties, ID windows and their errors.
--
-- The tick tests run in one transaction, so now() stands still: a clock
-- jump is simulated by moving the stored ticks and lease times instead.
\set A '''aaaaaaaa-0000-0000-0000-00000000000a'''
\set B '''bbbbbbbb-0000-0000-0000-00000000000b'''
SET gridha.balance_claims = off;
SET gridha.maintenance_interval = '1h';
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances,
         gridha.leases, gridha.maintenance_ticks;

CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- the tick of now(): the start of its one-hour slot, in ms since 1970
CREATE FUNCTION pg_temp.now_tick() RETURNS bigint LANGUAGE sql AS $$
    SELECT (floor(extract(epoch FROM now()) * 1000 / 3600000) * 3600000)::bigint
$$;

-- ---------------------------------------------------------------------------
-- Leases
-- ---------------------------------------------------------------------------
SELECT gridha.try_lead(:A) AS a_leads;
SELECT gridha.try_lead(:B) AS b_is_refused;
SELECT gridha.try_lead(:A) AS a_renews_same_term;
SELECT gridha.try_lead(:B, 'other-role') AS b_leads_another_role;
SELECT duty, leader = :A AS a, term, state FROM gridha.leaders ORDER BY duty;
-- A's lease expires: B takes it under a new term; A's old term cannot renew
UPDATE gridha.leases SET expires_at = now() - interval '1 second' WHERE duty = 'default';
SELECT gridha.try_lead(:B) AS b_takes_over;
SELECT gridha.renew_lead(:A, 'default', 1) AS a_stale_renewal;
SELECT gridha.try_lead(:A) AS a_is_refused;
SELECT gridha.renew_lead(:B, 'default', 2) AS b_renews_its_term;
-- an expired lease nobody took is still renewed under its own term
UPDATE gridha.leases SET expires_at = now() - interval '1 second' WHERE duty = 'default';
SELECT gridha.renew_lead(:B, 'default', 2) AS b_renews_expired_term;
SELECT gridha.resign(:A) AS a_cannot_resign, gridha.resign(:B) AS b_resigns;
SELECT duty, leader, term, state FROM gridha.leaders WHERE duty = 'default';
SELECT gridha.try_lead(:A) AS a_leads_after_resignation;
SELECT pg_temp.err($$SELECT gridha.try_lead(NULL)$$);
SELECT pg_temp.err($$SELECT gridha.try_lead('aaaaaaaa-0000-0000-0000-00000000000a', '')$$);
SELECT pg_temp.err($$SELECT gridha.renew_lead('aaaaaaaa-0000-0000-0000-00000000000a', 'default', NULL)$$);

-- ---------------------------------------------------------------------------
-- Ticks: once per slot of the clock, never backwards, once after a jump
-- ---------------------------------------------------------------------------
TRUNCATE gridha.leases, gridha.maintenance_ticks;
BEGIN;
SELECT term, tick = pg_temp.now_tick() AS current_tick, outcome FROM gridha.run_maintenance(:A);
SELECT term, tick = pg_temp.now_tick() AS current_tick, outcome FROM gridha.run_maintenance(:A);
SELECT term, tick IS NULL AS no_tick, outcome FROM gridha.run_maintenance(:B);
-- the clock jumps back three hours: the stored tick (and the lease's
-- renewal) now lie in the future. Nothing runs until the clock is past it.
UPDATE gridha.maintenance_ticks SET tick = tick + 3 * 3600000, started_at = started_at + interval '3 hours';
UPDATE gridha.leases SET renewed_at = renewed_at + interval '3 hours', expires_at = expires_at + interval '3 hours';
SELECT term, outcome FROM gridha.run_maintenance(:A);
SELECT term, outcome FROM gridha.run_maintenance(:B);
SELECT count(*) AS ticks, max(tick) = pg_temp.now_tick() + 3 * 3600000 AS counter_kept
  FROM gridha.maintenance_ticks;
-- the clock jumps forward 100 hours past the stored tick, and the lease
-- expired meanwhile: the leader leads again and runs the current tick once
UPDATE gridha.maintenance_ticks SET tick = tick - 103 * 3600000, started_at = started_at - interval '103 hours';
UPDATE gridha.leases SET renewed_at = now() - interval '100 hours', expires_at = now() - interval '99 hours';
SELECT term, tick = pg_temp.now_tick() AS current_tick, outcome FROM gridha.run_maintenance(:A);
SELECT term, outcome FROM gridha.run_maintenance(:A);
SELECT count(*) AS ticks, count(*) FILTER (WHERE tick = pg_temp.now_tick()) AS current_ticks
  FROM gridha.maintenance_ticks;
-- a new leader after A's lease expired finds this tick already run
UPDATE gridha.leases SET expires_at = now() - interval '1 second';
SELECT term, outcome FROM gridha.run_maintenance(:B);
SELECT leader = :B AS b_leads, term FROM gridha.leases;
COMMIT;

-- ---------------------------------------------------------------------------
-- Duties: sweep long-gone instances, prune old final batches, top up windows
-- ---------------------------------------------------------------------------
TRUNCATE gridha.leases, gridha.maintenance_ticks, gridha.instances;
-- the hand-outs below leave maintenance to run_maintenance (no poll duty)
SET gridha.prune_interval = -1;
INSERT INTO gridha.instances (instance_id, label, registered_at, last_seen_at) VALUES
    ('00000000-0000-0000-0000-000000000001', 'gone, holds nothing', now() - interval '3 days', now() - interval '2 days'),
    ('00000000-0000-0000-0000-000000000002', 'gone, holds a claim', now() - interval '3 days', now() - interval '2 days'),
    ('00000000-0000-0000-0000-000000000003', 'seen an hour ago', now() - interval '3 days', now() - interval '1 hour'),
    ('00000000-0000-0000-0000-000000000004', 'never seen, new', now(), NULL);
SELECT gridha.enqueue('old', 'b1', '\x01'), gridha.enqueue('old', 'b2', '\x02'),
       gridha.enqueue('new', 'b1', '\x03'), gridha.enqueue('held', 'b1', '\x04');
UPDATE gridha.service_claims SET claimant = '00000000-0000-0000-0000-000000000002',
       epoch = 1, soft_expiry = now() + interval '1 day', hard_expiry = now() + interval '1 day'
 WHERE service_id = 'held';
SELECT service_id, batch_id FROM gridha.next_batches(:A, 10) ORDER BY 1;
SELECT gridha.report_submission(:A, s, 'b1', e, 'accepted'), gridha.report_status(:A, s, 'b1', e, 'committed')
  FROM (SELECT service_id, epoch FROM gridha.claims WHERE claimant = :A) c(s, e) ORDER BY s;
UPDATE gridha.batches SET created_at = now() - interval '3 hours', finished_at = now() - interval '2 hours'
 WHERE service_id = 'old' AND batch_id = 'b1';
SELECT gridha.create_id_sequence('duty', 10, 3);
SELECT gridha.reserve_ids('duty', 10) AS fills_first_window;
SET gridha.retention = '1h';
SET gridha.sweep_instances_after = '1d';
SELECT outcome, swept_instances, pruned_batches, opened_windows FROM gridha.run_maintenance(:A);
SELECT label FROM gridha.instances WHERE label IS NOT NULL ORDER BY label;
SELECT service_id, batch_id, status FROM gridha.batches ORDER BY 1, 2;
SELECT window_start, window_end, next_id FROM gridha.id_windows WHERE name = 'duty' ORDER BY 1;
SELECT swept_instances, pruned_batches, opened_windows FROM gridha.maintenance_ticks;
RESET gridha.retention;
RESET gridha.sweep_instances_after;
RESET gridha.prune_interval;

-- ---------------------------------------------------------------------------
-- ID windows
-- ---------------------------------------------------------------------------
SELECT gridha.create_id_sequence('ids', 100, 2);
SELECT window_start, window_end, next_id FROM gridha.id_windows WHERE name = 'ids' ORDER BY 1;
SELECT gridha.reserve_ids('ids', 10) AS r1, gridha.reserve_ids('ids', 95) AS r2_skips_full_window,
       gridha.reserve_ids('ids', 100) AS r3_opens_a_window;
SELECT name, high_water, open_windows, free_ids FROM gridha.id_sequence_status WHERE name = 'ids';
SET gridha.id_block_size = 5;
SELECT gridha.next_id('ids') AS from_a_block_of_5 FROM generate_series(1, 6);
SELECT window_start, next_id FROM gridha.id_windows WHERE name = 'ids' ORDER BY 1;
-- a block reserved in a transaction that rolls back returns to its window,
-- and the backend forgets it: the same ids are reserved and served again
SELECT gridha.next_id('ids') AS spends_the_block FROM generate_series(1, 4);
BEGIN;
SELECT gridha.next_id('ids') AS in_rolled_back_block;
ROLLBACK;
SELECT gridha.next_id('ids') AS same_block_again;
BEGIN;
SAVEPOINT s;
SELECT gridha.next_id('ids') FROM generate_series(1, 5) OFFSET 4;
SELECT gridha.next_id('ids') AS in_rolled_back_savepoint;
ROLLBACK TO SAVEPOINT s;
SELECT gridha.next_id('ids') AS same_id_after_savepoint;
COMMIT;
-- dropped and created again: the new incarnation starts above the old high
-- water, and the block this backend holds from the old one is not served
SELECT high_water AS old_high_water FROM gridha.id_sequences WHERE name = 'ids' \gset
SELECT gridha.drop_id_sequence('ids'), gridha.drop_id_sequence('ids') AS again;
SELECT pg_temp.err($$SELECT gridha.next_id('ids')$$);
SELECT gridha.create_id_sequence('ids', 100, 1);
SELECT gridha.next_id('ids') = :old_high_water + 1 AS first_id_above_old_high_water;
RESET gridha.id_block_size;

-- errors, each with its own SQLSTATE
SELECT pg_temp.err($$SELECT gridha.reserve_ids('nope', 1)$$);
SELECT pg_temp.err($$SELECT gridha.next_id('nope')$$);
SELECT pg_temp.err($$SELECT gridha.reserve_ids('ids', 0)$$);
SELECT pg_temp.err($$SELECT gridha.reserve_ids('ids', -3)$$);
SELECT pg_temp.err($$SELECT gridha.reserve_ids('ids', 101)$$);
SELECT pg_temp.err($$SELECT gridha.reserve_ids('ids', NULL)$$);
SELECT pg_temp.err($$SELECT gridha.reserve_ids(NULL, 1)$$);
SELECT pg_temp.err($$SELECT gridha.create_id_sequence('ids')$$);
SELECT pg_temp.err($$SELECT gridha.create_id_sequence('bad', 0)$$);
SELECT pg_temp.err($$SELECT gridha.create_id_sequence('bad', 10, -1)$$);
SELECT pg_temp.err($$SELECT gridha.create_id_sequence('', 10)$$);
SELECT count(*) AS no_bad_sequence FROM gridha.id_sequences WHERE name = 'bad';

-- without an agent and with no open window, reserve_ids opens one itself
SELECT gridha.create_id_sequence('lazy', 50, 0);
SELECT count(*) AS windows_before FROM gridha.id_windows WHERE name = 'lazy';
SELECT gridha.reserve_ids('lazy', 50), gridha.reserve_ids('lazy', 1);

TRUNCATE gridha.batches, gridha.service_claims, gridha.instances,
         gridha.leases, gridha.maintenance_ticks;
SELECT gridha.drop_id_sequence(name) FROM gridha.id_sequences WHERE NOT dropped ORDER BY name;

-- ---------------------------------------------------------------------------
-- Rate limits: a limited target's heads are handed out only with a slot
-- ---------------------------------------------------------------------------
-- invalid values are refused by CHECKs (23514), nothing is written
SELECT pg_temp.err($$INSERT INTO gridha.targets (target, rate_interval) VALUES ('bad', '0')$$);
SELECT pg_temp.err($$INSERT INTO gridha.targets (target, rate_interval) VALUES ('bad', '-1 second')$$);
SELECT pg_temp.err($$INSERT INTO gridha.targets (target, rate_interval, rate_burst) VALUES ('bad', '1 second', -1)$$);
SELECT pg_temp.err($$INSERT INTO gridha.targets (target, rate_interval, rate_burst) VALUES ('bad', '1 second', 2000000)$$);
SELECT pg_temp.err($$INSERT INTO gridha.targets (target, rate_interval) VALUES ('bad', '2000 years')$$);
SELECT pg_temp.err($$INSERT INTO gridha.targets (target, rate_interval, rate_burst) VALUES ('bad', '1 year', 5000)$$);
SELECT pg_temp.err($$UPDATE gridha.targets SET rate_burst = -1 WHERE target = 'default'$$);
SELECT count(*) AS no_bad_target FROM gridha.targets WHERE target = 'bad';

-- 'slow': one slot an hour, bursts of 2. Instance A holds l1, l2, l3 (on
-- slow) and u1 (unlimited), l1's head having waited longest.
INSERT INTO gridha.targets (target, rate_interval, rate_burst) VALUES ('slow', '1 hour', 2);
INSERT INTO gridha.instances (instance_id, label, last_seen_at) VALUES (:A, 'A', now());
SELECT gridha.enqueue('l' || i, 'b1', '\x01', 'slow') FROM generate_series(1, 3) AS i;
SELECT gridha.enqueue('l1', 'b2', '\x02');
SELECT gridha.enqueue('u1', 'b1', '\x03');
UPDATE gridha.service_claims
   SET claimant = :A, epoch = 1, soft_expiry = now() + interval '1 hour',
       hard_expiry = now() + interval '2 hours',
       ready_at = now() - CASE service_id WHEN 'l1' THEN interval '4 minutes'
                                          WHEN 'l2' THEN interval '3 minutes'
                                          WHEN 'l3' THEN interval '2 minutes'
                                          ELSE interval '1 minute' END;
SELECT service_id, target, ready_at < now() AS ready FROM gridha.service_claims ORDER BY ready_at;
SELECT target, slots_taken, next_slot_at = now() AS slot_open_now FROM gridha.target_rates ORDER BY target;
-- a burst of two: l1 and l2 get the two slots, l3 is skipped, u1 (of
-- another target) is still handed out
SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batches(:A, 10) ORDER BY service_id;
SELECT service_id, batch_id, slot_at = b.handed_out_at AS slot_at_hand_out
  FROM gridha.rate_handouts h JOIN gridha.batches b USING (service_id, batch_id) ORDER BY service_id;
-- the view: the next slot opens an hour after the burst's hand-out
SELECT t.target, t.slots_taken, t.next_slot_at - b.handed_out_at AS next_slot_in
  FROM gridha.target_rates t, gridha.batches b
 WHERE t.target = 'slow' AND b.service_id = 'l1' AND b.batch_id = 'b1';
SELECT service_id, batch_id FROM gridha.next_batch(:A) AS no_slot_for_l3;
SELECT service_id, status FROM gridha.batches WHERE service_id = 'l3';
-- an hour passes (the state is moved back instead): l3 gets the slot
UPDATE gridha.target_rate_state SET tat = tat - interval '1 hour' WHERE target = 'slow';
SELECT service_id, batch_id, attempts FROM gridha.next_batch(:A);
SELECT count(*) AS logged_hand_outs, count(DISTINCT service_id) AS services FROM gridha.rate_handouts;

-- rate_burst 0 pauses the target, whatever its state
UPDATE gridha.target_rate_state SET tat = '-infinity' WHERE target = 'slow';
UPDATE gridha.targets SET rate_burst = 0 WHERE target = 'slow';
SELECT target, next_slot_at FROM gridha.target_rates WHERE target = 'slow';
SELECT gridha.report_submission(:A, 'l1', 'b1', 1, 'accepted');
SELECT gridha.report_status(:A, 'l1', 'b1', 1, 'committed');
SELECT service_id, batch_id FROM gridha.next_batch(:A) AS paused;
-- un-paused: the head goes out at once
UPDATE gridha.targets SET rate_burst = 1 WHERE target = 'slow';
SELECT target, next_slot_at = now() AS slot_open_now FROM gridha.target_rates WHERE target = 'slow';
SELECT service_id, batch_id, attempts FROM gridha.next_batch(:A);
SELECT target, slots_taken, next_slot_at > now() + interval '59 minutes' AS next_in_an_hour
  FROM gridha.target_rates WHERE target = 'slow';

-- a rate change applies at once: the time still owed is rescaled
UPDATE gridha.targets SET rate_interval = '2 hours' WHERE target = 'slow';
SELECT next_slot_at > now() + interval '119 minutes' AS next_in_two_hours
  FROM gridha.target_rates WHERE target = 'slow';
-- the limit lifted: heads of the target go out with no slot, unlogged
SELECT gridha.report_submission(:A, 'l1', 'b2', 1, 'accepted');
SELECT gridha.report_status(:A, 'l1', 'b2', 1, 'committed');
SELECT gridha.enqueue('l1', 'b3', '\x04');
UPDATE gridha.targets SET rate_interval = NULL WHERE target = 'slow';
SELECT target, next_slot_at FROM gridha.target_rates WHERE target = 'slow';
SELECT service_id, batch_id, attempts FROM gridha.next_batch(:A);
SELECT count(*) AS logged_hand_outs FROM gridha.rate_handouts;

TRUNCATE gridha.batches, gridha.service_claims, gridha.instances, gridha.rate_handouts;
DELETE FROM gridha.targets WHERE target = 'slow';
SELECT count(*) AS no_rate_state_left FROM gridha.target_rate_state;
