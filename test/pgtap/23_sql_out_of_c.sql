-- 23_sql_out_of_c.sql: the calls whose statements moved from the library
-- into the 1.3 install script (issue 42, item 1) are SQL there, keep the
-- rights and checks of the C calls they replace, and check their arguments
-- and the instance in the same order; the C helpers they call are no API.
--
-- One transaction, rolled back.
BEGIN;
SELECT plan(10);

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
\o

-- ---------------------------------------------------------------------------
-- SQL of the install script, with the C calls' rights (2)
-- ---------------------------------------------------------------------------

SELECT set_eq(
    $$SELECT p.oid::regprocedure::text, l.lanname::text, p.prosecdef, p.provolatile::text,
             p.proconfig::text
        FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
       WHERE p.oid IN ('gridha.claimed_batches(uuid, integer)'::regprocedure,
                       'gridha.verify_batch(uuid, text, text, bigint)'::regprocedure,
                       'gridha.pending_batches(uuid, integer)'::regprocedure)$$,
    $$VALUES ('gridha.claimed_batches(uuid,integer)', 'sql', true, 's', '{"search_path=pg_catalog, gridha, pg_temp"}'),
             ('gridha.verify_batch(uuid,text,text,bigint)', 'sql', true, 's', '{"search_path=pg_catalog, gridha, pg_temp"}'),
             ('gridha.pending_batches(uuid,integer)', 'sql', true, 's', '{"search_path=pg_catalog, gridha, pg_temp"}')$$,
    'claimed_batches, verify_batch and pending_batches are SQL functions, STABLE, SECURITY DEFINER with search_path pinned');

SELECT is((SELECT array_agg(r || ' ' || p.oid::regprocedure::text ORDER BY r, p.oid::regprocedure::text)
             FROM pg_proc p,
                  unnest(ARRAY['public', 'gridha_producer', 'gridha_submitter', 'gridha_admin', 'gridha_client']) AS r
            WHERE p.pronamespace = to_regnamespace('gridha_internal') AND p.proname = 'instance_check'
              AND has_function_privilege(r, p.oid, 'EXECUTE')),
          NULL, 'no role may execute gridha_internal.instance_check (the calls run it as their owner)');

-- ---------------------------------------------------------------------------
-- Instance rows (issue 42.1, src/instances.c and src/worker.c) (4)
-- ---------------------------------------------------------------------------

SELECT set_eq(
    $$SELECT p.oid::regprocedure::text, l.lanname::text, p.prosecdef, p.provolatile::text,
             p.proconfig::text
        FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
       WHERE p.oid IN ('gridha.register_instance(text, text[])'::regprocedure,
                       to_regprocedure('gridha_internal.worker_register(uuid, text)'))$$,
    $$VALUES ('gridha.register_instance(text,text[])', 'plpgsql', true, 'v', '{"search_path=pg_catalog, gridha, pg_temp"}'),
             ('gridha_internal.worker_register(uuid,text)', 'sql', true, 'v', '{"search_path=pg_catalog, gridha, pg_temp"}')$$,
    'register_instance and worker_register are functions of the script (PL/pgSQL, SQL), SECURITY DEFINER with search_path pinned');

SELECT is((SELECT array_agg(r || ' ' || p.oid::regprocedure::text ORDER BY r, p.oid::regprocedure::text)
             FROM pg_proc p,
                  unnest(ARRAY['public', 'gridha_producer', 'gridha_submitter', 'gridha_admin', 'gridha_client']) AS r
            WHERE p.pronamespace = to_regnamespace('gridha_internal')
              AND p.proname IN ('instance_insert', 'instance_key', 'instance_adopt', 'cluster_known',
                                'instance_declare', 'register_check', 'register_touch', 'worker_owner')
              AND has_function_privilege(r, p.oid, 'EXECUTE')),
          NULL, 'no role may execute the instance rows'' functions nor the helpers of register_instance and worker_register (the calls run them as their owner)');

-- A steady cycle (next_batch, report_submission, report_status of a known
-- instance bound to its session) runs none of them: counted with
-- track_functions in this transaction (2)
SET LOCAL track_functions = 'all';
CREATE TEMP TABLE steady AS SELECT gridha.register_instance('steady cycle') AS id;
SELECT gridha.enqueue('steady-s', 'steady-b' || i, NULL) FROM generate_series(1, 4) AS i \g /dev/null

CREATE FUNCTION pg_temp.steady_cycle() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    id uuid := (SELECT s.id FROM steady s);
    b  record;
BEGIN
    SELECT * INTO b FROM gridha.next_batch(id);
    PERFORM gridha.report_submission(id, b.service_id, b.batch_id, b.epoch, 'accepted', NULL);
    PERFORM gridha.report_status(id, b.service_id, b.batch_id, b.epoch, 'committed', NULL);
END
$$;

CREATE FUNCTION pg_temp.instance_calls() RETURNS TABLE (funcname name, calls bigint) LANGUAGE sql AS $$
SELECT f.funcname, f.calls FROM pg_stat_xact_user_functions f
 WHERE f.schemaname = 'gridha_internal'
   AND f.funcname IN ('instance_insert', 'instance_key', 'instance_adopt', 'cluster_known', 'instance_declare')
$$;

SELECT pg_temp.steady_cycle() \g /dev/null
CREATE TEMP TABLE first_calls AS SELECT * FROM pg_temp.instance_calls();
SELECT is((SELECT string_agg(f.funcname || ' ' || f.calls, ', ' ORDER BY f.funcname) FROM first_calls f),
          'instance_key 1',
          'the first cycle of a new instance gives its session a liveness key (instance_key), once');
SELECT pg_temp.steady_cycle() \g /dev/null
SELECT pg_temp.steady_cycle() \g /dev/null
SELECT set_eq($$SELECT * FROM pg_temp.instance_calls()$$, $$SELECT * FROM first_calls$$,
              'two steady cycles after it run none of the instance rows'' functions');

-- ---------------------------------------------------------------------------
-- The checks, in the C calls' order (4)
-- ---------------------------------------------------------------------------

SELECT throws_ok($$SELECT * FROM gridha.claimed_batches(NULL, -1)$$,
                 '22004', 'instance_id must not be null',
                 'claimed_batches: instance_id is checked before max_batches');
SELECT throws_ok($$SELECT * FROM gridha.pending_batches('aaaaaaaa-0000-0000-0000-000000000001', -1)$$,
                 '22023', 'max_batches must not be negative',
                 'pending_batches: a negative max_batches is refused (22023)');
SELECT throws_ok($$SELECT gridha.verify_batch('aaaaaaaa-0000-0000-0000-000000000001', '', NULL, -1)$$,
                 '22023', 'service_id must not be empty',
                 'verify_batch: service_id is checked before batch_id and epoch');
SELECT throws_ok($$SELECT gridha.verify_batch('aaaaaaaa-0000-0000-0000-000000000001', 's', 'b', -1)$$,
                 '22023', NULL, 'verify_batch: a negative epoch is refused (22023)');

SELECT * FROM finish();
ROLLBACK;
