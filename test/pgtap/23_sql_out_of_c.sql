-- 23_sql_out_of_c.sql: the calls whose statements moved from the library
-- into the 1.3 install script (issue 42, item 1) are SQL there, keep the
-- rights and checks of the C calls they replace, and check their arguments
-- and the instance in the same order; the C helper they call is no API.
--
-- One transaction, rolled back.
BEGIN;
SELECT plan(6);

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
