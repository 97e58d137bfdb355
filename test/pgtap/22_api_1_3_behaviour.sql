-- 22_api_1_3_behaviour.sql: issue 40, item 2, the behaviour of API 1.3:
-- a report on a batch never handed out gets RG023 (not RG001) and is not
-- counted as a stale write; RG008's hint never suggests membership in a
-- superuser role or in a role that does not exist; gridha.unknown_instance
-- = refuse turns an unknown instance id away (RG024) and changes nothing;
-- a user's duty never shares a lease with gridha's own maintenance duty
-- (gridha.maintenance, a reserved name: RG025), so a user's first lead()
-- returns a term; release_claims gives gridha's maintenance lease up.
--
-- One transaction, rolled back. pg_prove runs this file in a backend of
-- its own, so its first hand-out is the backend's first: its poll duty is
-- due.
BEGIN;
SELECT plan(26);

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
\o
SET LOCAL gridha.renew_interval = '1h';
SET LOCAL gridha.soft_expiry = '2h';
SET LOCAL gridha.hard_expiry = '3h';
SET LOCAL gridha.prune_interval = '1h';  -- this backend's first hand-out runs the poll duty
SET LOCAL gridha.balance_claims = off;
SET LOCAL gridha.session_liveness = off;

TRUNCATE gridha.batches, gridha.service_claims, gridha.target_totals;
DELETE FROM gridha.leases;
DELETE FROM gridha.maintenance_ticks;
DELETE FROM gridha.instances;

/*
 * pg_temp.refusal(q): the SQLSTATE, message and hint of the error q raises
 * ('ok' when it raises none).
 */
CREATE FUNCTION pg_temp.refusal(q text, OUT state text, OUT message text, OUT hint text)
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    state := 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                            hint = PG_EXCEPTION_HINT;
END
$$;
GRANT EXECUTE ON FUNCTION pg_temp.refusal(text) TO PUBLIC;

CREATE TEMP TABLE ids AS SELECT gridha.register_instance('A') AS a, gridha.register_instance('B') AS b;
GRANT SELECT ON ids TO PUBLIC;
CREATE FUNCTION pg_temp.a() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT a FROM ids $$;
CREATE FUNCTION pg_temp.b() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT b FROM ids $$;

-- ---------------------------------------------------------------------------
-- A batch never handed out (8)
-- ---------------------------------------------------------------------------
-- A holds q1 (taken, nothing handed out); q1-1 is its head, q1-2 behind it
SELECT gridha.enqueue('q1', 'q1-1', NULL) \g /dev/null
SELECT gridha.enqueue('q1', 'q1-2', NULL) \g /dev/null
CREATE TEMP TABLE taken_a AS SELECT service_id, epoch FROM gridha.acquire_claims(pg_temp.a());

SELECT results_eq($$SELECT state, message FROM pg_temp.refusal(format(
                      'SELECT gridha.report_submission(%L, ''q1'', ''q1-1'', 1, ''accepted'')', pg_temp.b()))$$,
                  $$VALUES ('RG023'::text, 'batch "q1-1" of service "q1" was never handed out'::text)$$,
                  'report_submission of a batch never handed out, by an instance that does not hold its service: RG023, not RG001');
SELECT results_eq($$SELECT state FROM pg_temp.refusal(format(
                      'SELECT gridha.report_status(%L, ''q1'', ''q1-1'', 1, ''committed'')', pg_temp.b()))$$,
                  $$VALUES ('RG023'::text)$$,
                  'report_status of it: RG023');
SELECT results_eq($$SELECT state FROM pg_temp.refusal(format(
                      'SELECT gridha.report_submission(%L, ''q1'', ''q1-2'', %s, ''accepted'')',
                      pg_temp.a(), (SELECT epoch FROM taken_a)))$$,
                  $$VALUES ('RG023'::text)$$,
                  'a report by the holder, at its epoch, of a batch queued behind the head: RG023, not RG002');
SELECT results_eq($$SELECT sqlstate FROM gridha.report_submissions(pg_temp.b(),
                      ARRAY[('q1', 'q1-1', 1, 'accepted', NULL)]::gridha.submission_report[])$$,
                  $$VALUES ('RG023'::text)$$,
                  'report_submissions returns RG023 in the batch''s row');
SELECT results_eq($$SELECT sqlstate FROM gridha.report_statuses(pg_temp.b(),
                      ARRAY[('q1', 'q1-1', 1, 'committed', NULL)]::gridha.status_report[])$$,
                  $$VALUES ('RG023'::text)$$,
                  'report_statuses returns RG023 in the batch''s row');
SELECT results_eq($$SELECT status::text, attempts FROM gridha.batches WHERE service_id = 'q1' ORDER BY seq$$,
                  $$VALUES ('queued'::text, 0), ('queued', 0)$$,
                  'the refused reports changed nothing');
-- B's next call writes what it counted (none of them is a stale write)
SELECT gridha.next_batch(pg_temp.b()) \g /dev/null
SELECT results_eq($$SELECT coalesce(sum(stale_writes_refused_total), 0)::bigint FROM gridha.metrics
                     WHERE scope = 'target'$$,
                  $$VALUES (0::bigint)$$,
                  'a report on a batch never handed out is not counted as a stale write');
-- a batch id the service never had, from an instance that does not hold it:
-- as a pruned batch's stale report (20_stale_pruned), RG001
SELECT results_eq($$SELECT state FROM pg_temp.refusal(format(
                      'SELECT gridha.report_status(%L, ''q1'', ''q1-none'', 1, ''committed'')', pg_temp.b()))$$,
                  $$VALUES ('RG001'::text)$$,
                  'a batch id its service never had, reported by an instance that does not hold the service: still RG001');

-- ---------------------------------------------------------------------------
-- RG008's hint (4)
-- ---------------------------------------------------------------------------
CREATE ROLE gridha_tap_b13_user NOLOGIN IN ROLE gridha_submitter;
CREATE ROLE gridha_tap_b13_other NOLOGIN IN ROLE gridha_submitter;
CREATE TEMP TABLE owned AS
    SELECT gridha.register_instance('by a superuser') AS su,
           '11111111-2222-3333-4444-555555555555'::uuid AS gone,
           '11111111-2222-3333-4444-666666666666'::uuid AS other;
GRANT SELECT ON owned TO PUBLIC;
INSERT INTO gridha.instances (instance_id, label, owner)
    SELECT gone, 'owner dropped', 'gridha_tap_b13_nobody' FROM owned
    UNION ALL SELECT other, 'another user''s', 'gridha_tap_b13_other' FROM owned;

SET LOCAL ROLE gridha_tap_b13_user;
CREATE TEMP TABLE hints AS
    SELECT 'su' AS k, r.* FROM owned, pg_temp.refusal(format('SELECT gridha.next_batch(%L)', owned.su)) r
    UNION ALL
    SELECT 'gone', r.* FROM owned, pg_temp.refusal(format('SELECT gridha.next_batch(%L)', owned.gone)) r
    UNION ALL
    SELECT 'other', r.* FROM owned, pg_temp.refusal(format('SELECT gridha.next_batch(%L)', owned.other)) r;
RESET ROLE;

SELECT results_eq($$SELECT k, state FROM hints ORDER BY k$$,
                  $$VALUES ('gone'::text, 'RG008'::text), ('other', 'RG008'), ('su', 'RG008')$$,
                  'a user acting as another role''s instance gets RG008');
SELECT ok((SELECT hint NOT LIKE '%membership%' AND hint LIKE '%belongs to a superuser%'
             FROM hints WHERE k = 'su'),
          'the hint for an instance owned by a superuser suggests no membership in it: ' ||
          (SELECT hint FROM hints WHERE k = 'su'));
SELECT ok((SELECT hint NOT LIKE '%membership%' AND hint LIKE '%does not exist%'
             FROM hints WHERE k = 'gone'),
          'the hint for an instance whose owner role does not exist suggests no membership in it: ' ||
          (SELECT hint FROM hints WHERE k = 'gone'));
SELECT is((SELECT hint FROM hints WHERE k = 'other'),
          'Act only for instances your role registered, or grant your role membership in "gridha_tap_b13_other".',
          'the hint for an ordinary role''s instance still names membership in it');

-- ---------------------------------------------------------------------------
-- Registration that can be required (7)
-- ---------------------------------------------------------------------------
SELECT is((SELECT boot_val FROM pg_settings WHERE name = 'gridha.unknown_instance'), 'register',
          'gridha.unknown_instance defaults to register (as up to 1.2)');
SELECT lives_ok($$SELECT gridha.next_batch('77777777-0000-0000-0000-000000000001')$$,
                'register: next_batch of an unknown id runs');
SELECT ok(EXISTS (SELECT 1 FROM gridha.instances WHERE instance_id = '77777777-0000-0000-0000-000000000001'),
          'register: and registers it');
SET LOCAL gridha.unknown_instance = refuse;
SELECT throws_ok($$SELECT gridha.next_batch('77777777-0000-0000-0000-000000000002')$$,
                 'RG024', 'unknown instance 77777777-0000-0000-0000-000000000002',
                 'refuse: next_batch of an unknown id is refused (RG024)');
SELECT throws_ok($$SELECT gridha.lead('77777777-0000-0000-0000-000000000002', 'mine')$$,
                 'RG024', NULL,
                 'refuse: lead of an unknown id is refused (RG024)');
SELECT ok(NOT EXISTS (SELECT 1 FROM gridha.instances WHERE instance_id = '77777777-0000-0000-0000-000000000002')
          AND NOT EXISTS (SELECT 1 FROM gridha.leases WHERE duty = 'mine'),
          'refuse: and changes nothing');
SELECT lives_ok($$SELECT gridha.next_batch(gridha.register_instance('registered'))$$,
                'refuse: an instance registered with register_instance is served');
SET LOCAL gridha.unknown_instance = register;

-- ---------------------------------------------------------------------------
-- Duties: the user's apart from gridha's own (5)
-- ---------------------------------------------------------------------------
-- B's hand-outs ran this backend's poll duty: B leads gridha's maintenance
SELECT is((SELECT leader FROM gridha.leases WHERE duty = 'gridha.maintenance'), pg_temp.b(),
          'the poll duty of a hand-out leads gridha''s own duty, gridha.maintenance');
SELECT isnt(gridha.lead(pg_temp.a()), NULL,
            'a user''s first lead() with the default duty returns a term meanwhile');
SELECT throws_ok($$SELECT gridha.lead(pg_temp.a(), 'gridha.maintenance')$$,
                 'RG025', 'duty "gridha.maintenance" is reserved for gridha',
                 'lead of gridha''s own duty is refused (RG025)');
SELECT throws_ok($$SELECT gridha.renew_lead(pg_temp.a(), 'gridha.anything', 1)$$,
                 'RG025', NULL,
                 'renew_lead of any duty named gridha.* is refused (RG025)');
SELECT is((SELECT outcome FROM gridha.run_maintenance(pg_temp.a())), 'not_leader',
          'run_maintenance''s default duty is gridha''s own, which B leads');

-- ---------------------------------------------------------------------------
-- release_claims gives gridha's maintenance lease up (2)
-- ---------------------------------------------------------------------------
SELECT gridha.release_claims(pg_temp.b()) \g /dev/null
SELECT is((SELECT leader FROM gridha.leases WHERE duty = 'gridha.maintenance'), NULL,
          'release_claims gave gridha''s maintenance lease up');
CREATE TEMP TABLE a_runs AS SELECT outcome FROM gridha.run_maintenance(pg_temp.a());
SELECT ok((SELECT outcome <> 'not_leader' FROM a_runs)
          AND (SELECT leader FROM gridha.leases WHERE duty = 'gridha.maintenance') = pg_temp.a(),
          'and another instance takes the duty at once');

SELECT * FROM finish();
ROLLBACK;
