-- 16_security.sql: the boundaries of gridha 1.2's security review
-- (docs/security.md), each checked by the attack that crossed it in 1.1.
--
--   schema     gridha's functions refuse to run (RG015) while schema gridha
--              belongs to a role that is not a superuser, or grants CREATE
--              to another role: objects planted there would run with the
--              extension owner's rights
--   owners     an instance without an owner is refused to every role but a
--              superuser (1.1 handed it to the first caller); an
--              administrator gives it one; an instance registered on first
--              use is owned by its caller from its first row on; only a
--              background worker registers a worker instance
--   targets    a producer never moves a service to another target (RG013);
--              an administrator does, with gridha.move_service
--   headers    a refused write to gridha.targets never shows the row (it
--              holds request_headers, credentials) in its error
--   liveness   every instance's session key is its own (gridha.session_keys)
--
-- Test roles (NOLOGIN, gone with the ROLLBACK): gridha_tap_sec_prod
-- (producer), gridha_tap_sec_sub (submitter), gridha_tap_sec_admin (admin),
-- gridha_tap_sec_owner (no gridha role).
BEGIN;
SELECT plan(35);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
\o

CREATE ROLE gridha_tap_sec_prod NOLOGIN IN ROLE gridha_producer;
CREATE ROLE gridha_tap_sec_sub NOLOGIN IN ROLE gridha_submitter;
CREATE ROLE gridha_tap_sec_admin NOLOGIN IN ROLE gridha_admin;
CREATE ROLE gridha_tap_sec_owner NOLOGIN;

-- Runs q as role r: 'ok', or 'SQLSTATE: message' of the error (undone).
CREATE FUNCTION pg_temp.as_role(r name, q text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE q;
    RESET ROLE;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- Runs q as role r: what its error says (SQLSTATE, message, detail, hint:
-- what the server log and the client get besides the statement, which is
-- the caller's own text), or 'ok'.
CREATE FUNCTION pg_temp.error_text(r name, q text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    st text; msg text; det text; hnt text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE q;
    RESET ROLE;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL,
                            hnt = PG_EXCEPTION_HINT;
    RETURN concat_ws(' | ', st, msg, det, hnt);
END
$$;

-- ===========================================================================
-- schema: gridha refuses to run in a schema another role could write
-- ===========================================================================

SELECT lives_ok($$SELECT gridha.register_instance('tap sec')$$,
                'schema: gridha runs while its schema is a superuser''s and nobody else may create in it');

ALTER SCHEMA gridha OWNER TO gridha_tap_sec_owner;
SELECT throws_ok($$SELECT gridha.register_instance('tap sec')$$, 'RG015',
                 'schema gridha belongs to role "gridha_tap_sec_owner", which is not a superuser',
                 'schema: owned by a role that is not a superuser, gridha refuses to run (RG015)');
SELECT throws_ok($$SELECT * FROM gridha.next_batch(gen_random_uuid())$$, 'RG015', NULL,
                 'schema: ... next_batch too');
SELECT throws_ok($$SELECT gridha.enqueue('sec-s', 'b', NULL)$$, 'RG015', NULL,
                 'schema: ... enqueue too');
RESET ROLE;
ALTER SCHEMA gridha OWNER TO CURRENT_USER;

GRANT CREATE ON SCHEMA gridha TO gridha_tap_sec_owner;
SELECT throws_ok($$SELECT gridha.register_instance('tap sec')$$, 'RG015',
                 'schema gridha grants CREATE to role "gridha_tap_sec_owner"',
                 'schema: granting CREATE on it to another role, gridha refuses to run (RG015)');
REVOKE CREATE ON SCHEMA gridha FROM gridha_tap_sec_owner;
GRANT CREATE ON SCHEMA gridha TO PUBLIC;
SELECT throws_ok($$SELECT gridha.register_instance('tap sec')$$, 'RG015',
                 'schema gridha grants CREATE to PUBLIC',
                 'schema: ... to PUBLIC too');
REVOKE CREATE ON SCHEMA gridha FROM PUBLIC;
SELECT lives_ok($$SELECT gridha.register_instance('tap sec')$$,
                'schema: once the schema is safe again, gridha runs');

-- ===========================================================================
-- owners: no adoption by the first caller
-- ===========================================================================

SET LOCAL tap.unowned = 'dddddddd-0000-0000-0000-00000000000d';
INSERT INTO gridha.instances (instance_id, label) VALUES (current_setting('tap.unowned')::uuid, 'tap unowned');

SELECT is(pg_temp.as_role('gridha_tap_sec_sub', format('SELECT * FROM gridha.next_batch(%L)', current_setting('tap.unowned'))),
          format('RG008: instance %s has no owner', current_setting('tap.unowned')),
          'owners: a submitter''s next_batch on an instance without owner is refused (RG008)');
SELECT is(pg_temp.as_role('gridha_tap_sec_sub', format('SELECT gridha.release_claims(%L)', current_setting('tap.unowned'))),
          format('RG008: instance %s has no owner', current_setting('tap.unowned')),
          'owners: ... and so are the calls that do not register it (release_claims)');
SELECT is((SELECT owner FROM gridha.instances WHERE instance_id = current_setting('tap.unowned')::uuid), NULL,
          'owners: nobody adopted it');
SELECT lives_ok(format('SELECT * FROM gridha.next_batch(%L)', current_setting('tap.unowned')),
                'owners: a superuser may still act as it');
SELECT is(left(pg_temp.as_role('gridha_tap_sec_sub',
              format('SELECT gridha.set_instance_owner(%L, %L)', current_setting('tap.unowned'), 'gridha_tap_sec_sub')), 5),
          '42501', 'owners: a submitter cannot give an instance an owner (42501)');
SELECT is(pg_temp.as_role('gridha_tap_sec_admin',
              format('SELECT gridha.set_instance_owner(%L, %L)', current_setting('tap.unowned'), 'gridha_tap_sec_sub')),
          'ok', 'owners: an administrator gives it one');
SELECT is(pg_temp.as_role('gridha_tap_sec_sub', format('SELECT * FROM gridha.next_batch(%L)', current_setting('tap.unowned'))),
          'ok', 'owners: then its owner acts as it');
SELECT is(left(pg_temp.as_role('gridha_tap_sec_admin',
              format('SELECT gridha.set_instance_owner(%L, %L)', gen_random_uuid(), 'gridha_tap_sec_sub')), 5),
          'RG003', 'owners: set_instance_owner of an unknown instance is refused (RG003)');

SET LOCAL tap.fresh = 'eeeeeeee-0000-0000-0000-00000000000e';
SELECT is(pg_temp.as_role('gridha_tap_sec_sub', format('SELECT * FROM gridha.next_batch(%L)', current_setting('tap.fresh'))),
          'ok', 'owners: a submitter''s first call on an unknown id registers it');
SELECT is((SELECT owner::text FROM gridha.instances WHERE instance_id = current_setting('tap.fresh')::uuid),
          'gridha_tap_sec_sub', 'owners: ... owned by that submitter from its first row on');
SELECT is(pg_temp.as_role('gridha_tap_sec_sub', format($$SELECT gridha_internal.worker_register(%L, 'forged')$$, gen_random_uuid())),
          'RG016: only a gridha background worker may register a worker instance',
          'owners: outside a background worker, worker_register is refused (RG016)');
SELECT is((SELECT count(*) FROM gridha.instances WHERE kind = 'worker'), 0::bigint,
          'owners: ... and made no instance of kind worker');

-- ===========================================================================
-- targets: a service's target is moved by an administrator only
-- ===========================================================================

INSERT INTO gridha.targets (target, submit_url) VALUES ('sec-other', 'http://127.0.0.1:9/o/{service_id}/{batch_id}');
SELECT is(pg_temp.as_role('gridha_tap_sec_prod', $$SELECT gridha.enqueue('sec-s1', 'b1', '\x01')$$), 'ok',
          'targets: a producer creates a service on the default target');
SELECT is(pg_temp.as_role('gridha_tap_sec_prod', $$SELECT gridha.enqueue('sec-s1', 'b2', '\x02', 'sec-other')$$),
          'RG013: service "sec-s1" is on target "default", not "sec-other"',
          'targets: enqueue naming another target than the service''s is refused (RG013)');
SELECT is((SELECT target || '/' || tail_seq FROM gridha.service_claims WHERE service_id = 'sec-s1'), 'default/1',
          'targets: ... the service stays on its target and nothing was enqueued');
SELECT is(pg_temp.as_role('gridha_tap_sec_prod', $$SELECT gridha.enqueue('sec-s1', 'b2', '\x02', 'default')$$), 'ok',
          'targets: enqueue naming the service''s own target works');
SELECT is(left(pg_temp.as_role('gridha_tap_sec_prod', $$SELECT gridha.move_service('sec-s1', 'sec-other')$$), 5), '42501',
          'targets: a producer cannot call move_service (42501)');
SELECT is(pg_temp.as_role('gridha_tap_sec_admin', $$SELECT gridha.move_service('sec-s1', 'sec-other')$$), 'ok',
          'targets: an administrator moves the service');
SELECT is((SELECT target FROM gridha.service_claims WHERE service_id = 'sec-s1'), 'sec-other',
          'targets: ... to the new target');
SELECT is(pg_temp.as_role('gridha_tap_sec_admin', $$SELECT gridha.move_service('sec-s1', 'nowhere')$$),
          'RG006: unknown target "nowhere"', 'targets: move_service to an unknown target is refused (RG006)');
UPDATE gridha.service_claims SET in_flight = true WHERE service_id = 'sec-s1';
SELECT is(left(pg_temp.as_role('gridha_tap_sec_admin', $$SELECT gridha.move_service('sec-s1', 'default')$$), 5),
          '55006', 'targets: a service with a batch in flight is not moved (55006)');

SELECT is(pg_temp.as_role('gridha_tap_sec_admin',
              $$UPDATE gridha.targets SET rate_interval = '2 seconds' WHERE target = 'sec-other'$$),
          'ok', 'targets: an administrator changes a target''s rate (the rate-state trigger writes as the extension''s owner)');

-- ===========================================================================
-- headers: a refused write to gridha.targets never shows the row
-- ===========================================================================

SELECT unalike(pg_temp.error_text('gridha_tap_sec_admin',
                   $$INSERT INTO gridha.targets (target, submit_url, rate_interval, request_headers)
                     VALUES ('sec-h', 'http://127.0.0.1:9/{batch_id}', '0', '{"Authorization": "Bearer s3cr3t-1"}')$$),
               '%s3cr3t%', 'headers: a CHECK violation (rate_interval 0) says nothing of the headers');
SELECT alike(pg_temp.error_text('gridha_tap_sec_admin',
                   $$INSERT INTO gridha.targets (target, submit_url, rate_interval, request_headers)
                     VALUES ('sec-h', 'http://127.0.0.1:9/{batch_id}', '0', '{"Authorization": "Bearer s3cr3t-1"}')$$),
            '23514 | new row for relation "targets" violates check constraint "targets_rate_interval_check"%',
            'headers: ... it is still 23514 with PostgreSQL''s message');
SELECT unalike(pg_temp.error_text('gridha_tap_sec_admin',
                   $$INSERT INTO gridha.targets (target, rate_burst, request_headers)
                     VALUES ('sec-h', NULL, '{"Authorization": "Bearer s3cr3t-2"}')$$),
               '%s3cr3t%', 'headers: a NOT NULL violation (rate_burst) says nothing of the headers');
SELECT unalike(pg_temp.error_text('gridha_tap_sec_admin',
                   $$UPDATE gridha.targets SET request_headers = '{"Authorization": "Bearer s3cr3t-3"}', rate_burst = -1
                      WHERE target = 'sec-other'$$),
               '%s3cr3t%', 'headers: an UPDATE breaking a CHECK (rate_burst -1) says nothing of the headers');

-- ===========================================================================
-- liveness: every instance's key is its own
-- ===========================================================================

SELECT * FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a') \g /dev/null
SELECT * FROM gridha.next_batch('bbbbbbbb-0000-0000-0000-00000000000b') \g /dev/null
SELECT is((SELECT count(DISTINCT session_key) FROM gridha.instances
            WHERE instance_id IN ('aaaaaaaa-0000-0000-0000-00000000000a', 'bbbbbbbb-0000-0000-0000-00000000000b')),
          2::bigint, 'liveness: two instances bound by one session have two keys');
SELECT ok((SELECT bool_and(session_key <= currval('gridha.session_keys')) FROM gridha.instances
            WHERE instance_id IN ('aaaaaaaa-0000-0000-0000-00000000000a', 'bbbbbbbb-0000-0000-0000-00000000000b')),
          'liveness: ... given by gridha.session_keys');

SELECT * FROM finish();
ROLLBACK;
