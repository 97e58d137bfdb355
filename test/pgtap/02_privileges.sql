-- 02_privileges.sql: who may do what.
--
-- PUBLIC has nothing in schema gridha. The role gridha_client gets USAGE on
-- the schema, EXECUTE on the API, INSERT on gridha.batches and SELECT on the
-- views, nothing else. Every function but one C trigger pins its search_path, and the API runs
-- as SECURITY DEFINER so a client needs no table rights. A member of
-- gridha_client can drive the whole cycle and still cannot touch the tables.
BEGIN;
SELECT plan(99);

-- The tables are emptied (inside this transaction only) so the hand-outs
-- below do not depend on what the database held before.
DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

-- gridha_tap_nobody has only what PUBLIC has; gridha_tap_app is a member of
-- gridha_client, as a client application's login role would be.
CREATE ROLE gridha_tap_nobody NOLOGIN;
CREATE ROLE gridha_tap_app NOLOGIN IN ROLE gridha_client;

CREATE TEMP TABLE api (ord int, name text, args text[]);
INSERT INTO api VALUES
 (1, 'register_instance', '{text}'),
 (2, 'enqueue', '{text,text,bytea,text}'),
 (3, 'renew_claims', '{uuid}'),
 (4, 'acquire_claims', '{uuid}'),
 (5, 'claimed_batches', '{uuid,integer}'),
 (6, 'next_batch', '{uuid}'),
 (7, 'next_batches', '{uuid,integer}'),
 (8, 'verify_batch', '{uuid,text,text,bigint}'),
 (9, 'report_submission', '{uuid,text,text,bigint,text,text}'),
 (10, 'pending_batches', '{uuid,integer}'),
 (11, 'report_status', '{uuid,text,text,bigint,text}'),
 (12, 'release_claims', '{uuid}');
GRANT SELECT ON api TO PUBLIC;

-- Runs q as role r; the role switch is undone with the statement's
-- subtransaction when q fails (as it does under throws_ok).
CREATE FUNCTION pg_temp.as_role(r name, q text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE q;
    RESET ROLE;
END
$$;

-- ---------------------------------------------------------------------------
-- PUBLIC
-- ---------------------------------------------------------------------------

SELECT ok(NOT has_schema_privilege('public', 'gridha', 'USAGE'),
          'PUBLIC has no USAGE on schema gridha');
SELECT ok(NOT has_schema_privilege('public', 'gridha', 'CREATE'),
          'PUBLIC cannot CREATE in schema gridha');

SELECT is((SELECT array_agg(c.relname::text ORDER BY c.relname)
             FROM pg_class c
            WHERE c.relnamespace = 'gridha'::regnamespace
              AND c.relkind IN ('r', 'v', 'm', 'S', 'p', 'f')
              AND has_table_privilege('public', c.oid,
                      'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')),
          NULL,
          'PUBLIC has no privilege on any table, view or sequence of gridha');

SELECT is((SELECT array_agg(p.oid::regprocedure::text ORDER BY 1)
             FROM pg_proc p
            WHERE p.pronamespace = 'gridha'::regnamespace
              AND has_function_privilege('public', p.oid, 'EXECUTE')),
          NULL,
          'PUBLIC cannot execute any function of gridha');

SELECT table_privs_are('gridha', t, 'gridha_tap_nobody', ARRAY[]::text[],
                       format('a role with only PUBLIC''s rights has no privilege on gridha.%s', t))
  FROM unnest(ARRAY['batches', 'service_claims', 'targets', 'instances',
                    'claims', 'instance_health', 'service_queues']) AS t;

SELECT function_privs_are('gridha', a.name, a.args, 'gridha_tap_nobody', ARRAY[]::text[],
                          format('a role with only PUBLIC''s rights cannot execute gridha.%s', a.name))
  FROM api a ORDER BY a.ord;

-- ---------------------------------------------------------------------------
-- gridha_client
-- ---------------------------------------------------------------------------

SELECT has_role('gridha_client', 'role gridha_client exists');
SELECT ok(NOT (SELECT rolcanlogin FROM pg_roles WHERE rolname = 'gridha_client'),
          'gridha_client is a group role (NOLOGIN)');
SELECT schema_privs_are('gridha', 'gridha_client', ARRAY['USAGE'],
                        'gridha_client has USAGE (only) on schema gridha');

SELECT table_privs_are('gridha', 'batches', 'gridha_client', ARRAY['INSERT'],
                       'gridha_client may only INSERT into gridha.batches');
SELECT table_privs_are('gridha', t, 'gridha_client', ARRAY[]::text[],
                       format('gridha_client has no table-wide privilege on gridha.%s', t))
  FROM unnest(ARRAY['service_claims', 'instances']) AS t;
SELECT table_privs_are('gridha', 'targets', 'gridha_client', ARRAY['SELECT'],
                       'gridha_client may only SELECT from gridha.targets (a client submits to them)');
SELECT ok(has_column_privilege('gridha_client', 'gridha.service_claims', 'target', 'SELECT')
          AND has_column_privilege('gridha_client', 'gridha.service_claims', 'service_id', 'SELECT')
          AND NOT has_column_privilege('gridha_client', 'gridha.service_claims', 'claimant', 'SELECT')
          AND NOT has_column_privilege('gridha_client', 'gridha.service_claims', 'target', 'UPDATE'),
          'gridha_client may read only service_id and target of gridha.service_claims (a service''s target)');
SELECT table_privs_are('gridha', v, 'gridha_client', ARRAY['SELECT'],
                       format('gridha_client may only SELECT from view gridha.%s', v))
  FROM unnest(ARRAY['claims', 'instance_health', 'service_queues', 'workers']) AS v;

SELECT function_privs_are('gridha', a.name, a.args, 'gridha_client', ARRAY['EXECUTE'],
                          format('gridha_client can execute gridha.%s', a.name))
  FROM api a ORDER BY a.ord;

SELECT set_eq(
    $$SELECT p.oid::regprocedure::text FROM pg_proc p
       WHERE p.pronamespace = 'gridha'::regnamespace
         AND has_function_privilege('gridha_client', p.oid, 'EXECUTE')$$,
    $$SELECT format('gridha.%s(%s)', name, array_to_string(args, ',')) FROM api
      UNION ALL SELECT 'gridha.expiry_settings()'
      UNION ALL SELECT 'gridha.worker_slots()'
      UNION ALL SELECT unnest(ARRAY['gridha.try_lead(uuid,text)', 'gridha.renew_lead(uuid,text,bigint)',
                                    'gridha.resign(uuid,text)', 'gridha.run_maintenance(uuid,text)',
                                    'gridha.reserve_ids(text,integer)', 'gridha.next_id(text)'])$$,
    'gridha_client can execute the API, the leader lease and ID functions (and expiry_settings and worker_slots, used by views) and nothing else');

-- ---------------------------------------------------------------------------
-- search_path and SECURITY DEFINER
-- ---------------------------------------------------------------------------

-- One exception: the C trigger batches_guard_final, on every hand-out and
-- report, runs no SQL and resolves no name (see the install script).
SELECT is((SELECT array_agg(p.oid::regprocedure::text ORDER BY 1)
             FROM pg_proc p
            WHERE p.pronamespace = 'gridha'::regnamespace
              AND NOT coalesce('search_path=pg_catalog, gridha' = ANY (p.proconfig), false)),
          ARRAY['gridha.batches_guard_final()'],
          'every function in schema gridha but the C guard trigger pins search_path = pg_catalog, gridha');

SELECT ok((SELECT l.lanname = 'c' AND NOT p.prosecdef AND p.prorettype = 'trigger'::regtype
             FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
            WHERE p.oid = 'gridha.batches_guard_final()'::regprocedure),
          'gridha.batches_guard_final is a C trigger function, not SECURITY DEFINER');

SELECT is((SELECT array_agg(p.oid::regprocedure::text ORDER BY 1)
             FROM pg_proc p
            WHERE p.pronamespace = 'gridha'::regnamespace AND p.prosecdef
              AND NOT coalesce('search_path=pg_catalog, gridha' = ANY (p.proconfig), false)),
          NULL,
          'no SECURITY DEFINER function of gridha runs with a caller-controlled search_path');

SELECT is_definer('gridha', a.name, a.args, format('gridha.%s is SECURITY DEFINER', a.name))
  FROM api a ORDER BY a.ord;

SELECT is((SELECT array_agg(p.oid::regprocedure::text ORDER BY 1)
             FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
            WHERE p.pronamespace = 'gridha'::regnamespace AND p.prosecdef
              AND NOT r.rolsuper),
          NULL,
          'every SECURITY DEFINER function of gridha is owned by a superuser (the extension''s installer)');

-- ---------------------------------------------------------------------------
-- A member of gridha_client drives the whole cycle through the API
-- ---------------------------------------------------------------------------

SET ROLE gridha_tap_app;
SELECT current_user AS who \gset
SELECT gridha.enqueue('tap-priv', 'b1', '\x01'::bytea) AS seq1 \gset
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('tap-priv', 'b2', '\x02');
SELECT gridha.register_instance('tap client') AS inst \gset
SELECT service_id AS h1_sid, batch_id AS h1_bid, encode(payload, 'hex') AS h1_payload,
       epoch AS h1_epoch, attempt AS h1_attempt
  FROM gridha.next_batch(:'inst') \gset
SELECT gridha.verify_batch(:'inst', 'tap-priv', 'b1', :h1_epoch) AS h1_verified \gset
SELECT gridha.report_submission(:'inst', 'tap-priv', 'b1', :h1_epoch, 'accepted', 'http 202') AS h1_sub \gset
SELECT string_agg(batch_id || ':' || status, ',') AS h1_pending FROM gridha.pending_batches(:'inst') \gset
SELECT gridha.report_status(:'inst', 'tap-priv', 'b1', :h1_epoch, 'committed') AS h1_status \gset
SELECT batch_id AS h2_bid, epoch AS h2_epoch FROM gridha.next_batch(:'inst') \gset
SELECT string_agg(batch_id || ':' || status, ',') AS claimed FROM gridha.claimed_batches(:'inst') \gset
SELECT head_batch_id AS q_head, committed AS q_committed FROM gridha.service_queues
 WHERE service_id = 'tap-priv' \gset
SELECT state AS c_state, claimant AS c_claimant FROM gridha.claims WHERE service_id = 'tap-priv' \gset
SELECT health AS i_health, label AS i_label FROM gridha.instance_health WHERE instance_id = :'inst' \gset
SELECT gridha.renew_claims(:'inst') AS renewed \gset
SELECT count(*) AS acquired FROM gridha.acquire_claims(:'inst') \gset
SELECT count(*) AS nothing_more FROM gridha.next_batches(:'inst', 5) \gset
SELECT gridha.report_submission(:'inst', 'tap-priv', 'b2', :h2_epoch, 'rejected', 'http 400') AS h2_sub \gset
SELECT gridha.release_claims(:'inst') AS released \gset
RESET ROLE;

SELECT is(:'who'::text, 'gridha_tap_app', 'the cycle below runs as a member of gridha_client, not as a superuser');
SELECT is(:'seq1'::text, '1', 'gridha_client: enqueue returns seq 1 for a new service');
SELECT is((SELECT seq FROM gridha.batches WHERE service_id = 'tap-priv' AND batch_id = 'b2'), 2::bigint,
          'gridha_client: a plain INSERT INTO gridha.batches enqueues at seq 2');
SELECT is((SELECT label FROM gridha.instances WHERE instance_id = :'inst'), 'tap client',
          'gridha_client: register_instance registers the instance with its label');
SELECT is(:'h1_sid' || '/' || :'h1_bid' || '/' || :'h1_payload' || '/' || :'h1_epoch' || '/' || :'h1_attempt',
          'tap-priv/b1/01/1/1',
          'gridha_client: next_batch hands out the head b1 with its payload, epoch 1, attempt 1');
SELECT is(:'h1_verified'::text, 't', 'gridha_client: verify_batch is true for the batch in hand');
SELECT is(:'h1_sub'::text, 'pending', 'gridha_client: report_submission accepted -> pending');
SELECT is(:'h1_pending'::text, 'b1:pending', 'gridha_client: pending_batches lists b1');
SELECT is(:'h1_status'::text, 'committed', 'gridha_client: report_status committed -> committed');
SELECT is(:'h2_bid'::text, 'b2', 'gridha_client: next_batch then hands out b2');
SELECT is(:'claimed'::text, 'b2:submitting', 'gridha_client: claimed_batches shows the head b2 submitting');
SELECT is(:'q_head' || '/' || :'q_committed', 'b2/1', 'gridha_client: can read gridha.service_queues');
SELECT is(:'c_state' || '/' || :'c_claimant', 'held/' || :'inst', 'gridha_client: can read gridha.claims');
SELECT is(:'i_health' || '/' || :'i_label', 'healthy/tap client',
          'gridha_client: can read gridha.instance_health');
SELECT is(:'renewed'::text, '1', 'gridha_client: renew_claims renews its one claim');
SELECT is(:'acquired'::text, '0', 'gridha_client: acquire_claims has nothing more to take');
SELECT is(:'nothing_more'::text, '0', 'gridha_client: next_batches hands out nothing while b2 is in flight');
SELECT is(:'h2_sub'::text, 'invalid', 'gridha_client: report_submission rejected -> invalid');
SELECT is(:'released'::text, '1', 'gridha_client: release_claims hands back its claim');
SELECT is((SELECT string_agg(batch_id || ':' || status, ',' ORDER BY seq) FROM gridha.batches
            WHERE service_id = 'tap-priv'),
          'b1:committed,b2:invalid', 'gridha_client: the batches reached their final statuses');

-- ... but cannot touch the tables directly.
SELECT throws_ok($$SELECT pg_temp.as_role('gridha_tap_app', 'UPDATE gridha.batches SET payload = NULL')$$,
                 '42501', 'permission denied for table batches',
                 'gridha_client member: UPDATE gridha.batches is refused');
SELECT throws_ok($$SELECT pg_temp.as_role('gridha_tap_app',
                       $q$UPDATE gridha.batches SET status = 'queued' WHERE batch_id = 'b9'$q$)$$,
                 '42501', 'permission denied for table batches',
                 'gridha_client member: UPDATE of a batch''s status is refused');
SELECT throws_ok($$SELECT pg_temp.as_role('gridha_tap_app', 'DELETE FROM gridha.batches')$$,
                 '42501', 'permission denied for table batches',
                 'gridha_client member: DELETE FROM gridha.batches is refused');
SELECT throws_ok($$SELECT pg_temp.as_role('gridha_tap_app', 'SELECT * FROM gridha.batches')$$,
                 '42501', 'permission denied for table batches',
                 'gridha_client member: SELECT FROM gridha.batches is refused (views only)');
SELECT throws_ok($$SELECT pg_temp.as_role('gridha_tap_app', 'UPDATE gridha.service_claims SET claimant = NULL')$$,
                 '42501', 'permission denied for table service_claims',
                 'gridha_client member: UPDATE gridha.service_claims is refused');
SELECT throws_ok($$SELECT pg_temp.as_role('gridha_tap_app',
                       $q$INSERT INTO gridha.service_claims (service_id) VALUES ('tap-x')$q$)$$,
                 '42501', 'permission denied for table service_claims',
                 'gridha_client member: INSERT INTO gridha.service_claims is refused');
SELECT throws_ok($$SELECT pg_temp.as_role('gridha_tap_app', 'DELETE FROM gridha.service_claims')$$,
                 '42501', 'permission denied for table service_claims',
                 'gridha_client member: DELETE FROM gridha.service_claims is refused');
SELECT throws_ok($$SELECT pg_temp.as_role('gridha_tap_app',
                       $q$UPDATE gridha.targets SET submit_url = 'http://127.0.0.1:1/{batch_id}'$q$)$$,
                 '42501', 'permission denied for table targets',
                 'gridha_client member: UPDATE gridha.targets is refused');
SELECT throws_ok($$SELECT pg_temp.as_role('gridha_tap_app',
                       $q$UPDATE gridha.instances SET last_seen_at = now()$q$)$$,
                 '42501', 'permission denied for table instances',
                 'gridha_client member: UPDATE gridha.instances is refused');
SELECT throws_ok($$SELECT pg_temp.as_role('gridha_tap_app', $q$SET gridha.soft_expiry = '1s'$q$)$$,
                 '42501', NULL,
                 'gridha_client member: the claim settings are superuser-only');

-- A role with PUBLIC's rights only gets nowhere.
SELECT throws_ok($$SELECT pg_temp.as_role('gridha_tap_nobody',
                       $q$SELECT gridha.enqueue('tap-y', 'b1', NULL)$q$)$$,
                 '42501', NULL,
                 'PUBLIC: gridha.enqueue is refused');
SELECT throws_ok($$SELECT pg_temp.as_role('gridha_tap_nobody',
                       $q$SELECT * FROM gridha.next_batch(gen_random_uuid())$q$)$$,
                 '42501', NULL,
                 'PUBLIC: gridha.next_batch is refused');
SELECT throws_ok($$SELECT pg_temp.as_role('gridha_tap_nobody',
                       $q$INSERT INTO gridha.batches (service_id, batch_id) VALUES ('tap-y', 'b1')$q$)$$,
                 '42501', NULL,
                 'PUBLIC: INSERT INTO gridha.batches is refused');
SELECT throws_ok($$SELECT pg_temp.as_role('gridha_tap_nobody', 'SELECT * FROM gridha.claims')$$,
                 '42501', NULL,
                 'PUBLIC: SELECT FROM gridha.claims is refused');

SELECT is((SELECT count(*) FROM gridha.batches WHERE service_id IN ('tap-x', 'tap-y')), 0::bigint,
          'the refused writes left no batch behind');

SELECT * FROM finish();
ROLLBACK;
