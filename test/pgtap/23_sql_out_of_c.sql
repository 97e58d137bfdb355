-- 23_sql_out_of_c.sql: the calls whose statements moved from the library
-- into the 1.3 install script (issue 42, item 1) are SQL there, keep the
-- rights and checks of the C calls they replace, and check their arguments
-- and the instance in the same order; the C helpers they call are no API.
--
-- One transaction, rolled back.
BEGIN;
SELECT plan(21);

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
             ('gridha_internal.worker_register(uuid,text)', 'plpgsql', true, 'v', '{"search_path=pg_catalog, gridha, pg_temp"}')$$,
    'register_instance and worker_register are functions of the script (PL/pgSQL both: worker_register has the Citus mode'' branch), SECURITY DEFINER with search_path pinned');

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

-- ---------------------------------------------------------------------------
-- release_claims, the epoch band, the counts' truncate (5)
-- ---------------------------------------------------------------------------

SELECT set_eq(
    $$SELECT p.oid::regprocedure::text, l.lanname::text, p.prosecdef, p.provolatile::text,
             p.proconfig::text
        FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
       WHERE p.oid IN ('gridha.release_claims(uuid)'::regprocedure,
                       to_regprocedure('gridha_internal.epoch_band(bigint)'),
                       to_regprocedure('gridha_internal.service_claims_truncated()'))$$,
    $$VALUES ('gridha.release_claims(uuid)', 'plpgsql', true, 'v', '{"search_path=pg_catalog, gridha, pg_temp"}'),
             ('gridha_internal.epoch_band(bigint)', 'plpgsql', false, 'v', '{"search_path=pg_catalog, gridha, pg_temp"}'),
             ('gridha_internal.service_claims_truncated()', 'plpgsql', false, 'v', '{"search_path=pg_catalog, gridha, pg_temp"}')$$,
    'release_claims, the epoch band and the truncate trigger of service_claims are PL/pgSQL of the install script; release_claims SECURITY DEFINER, all with search_path pinned');

SELECT is((SELECT t.tgfoid::regprocedure::text FROM pg_trigger t
            WHERE t.tgrelid = 'gridha.service_claims'::regclass AND t.tgname = 'service_claims_truncated'),
          'gridha_internal.service_claims_truncated()',
          'a TRUNCATE of gridha.service_claims runs the script''s gridha_internal.service_claims_truncated');

SELECT is((SELECT count(*) FROM pg_proc p
            WHERE p.pronamespace = to_regnamespace('gridha_internal')
              AND p.proname IN ('release_check', 'epoch_band', 'epoch_band_trylock', 'counts_truncated')
              AND NOT EXISTS (SELECT FROM unnest(ARRAY['public', 'gridha_producer', 'gridha_submitter',
                                                       'gridha_admin', 'gridha_client']) AS r
                               WHERE has_function_privilege(r, p.oid, 'EXECUTE'))),
          4::bigint, 'release_check, epoch_band, epoch_band_trylock and counts_truncated: no role may execute them');

-- The band of a cluster with no row: written now (under the band lock) from
-- the claims' epochs, not stored yet as far as this call knows; the next
-- call reads the row.
SAVEPOINT band;
DELETE FROM gridha.epoch_bands WHERE system_identifier = 4242;
CREATE TEMP TABLE bands AS SELECT 1 AS k, b.* FROM gridha_internal.epoch_band(4242) b;
INSERT INTO bands SELECT 2, b.* FROM gridha_internal.epoch_band(4242) b;
SELECT results_eq(
    $$SELECT band, stored FROM bands ORDER BY k$$,
    $$SELECT m, s FROM (SELECT coalesce(max(epoch), 0) >> 40 AS m FROM gridha.service_claims) c,
                       (VALUES (1, false), (2, true)) v(k, s) ORDER BY v.k$$,
    'epoch_band: a cluster without a row gets one from the claims (stored false), then reads it (stored true)');
ROLLBACK TO SAVEPOINT band;

-- A TRUNCATE of service_claims leaves no instance holding anything (the
-- trigger's statements, SQL since 1.3). The counts are not checked here:
-- inside this one transaction they are deltas not yet written; the
-- regression test counts.sql checks them after a TRUNCATE that commits.
SAVEPOINT trunc;
CREATE TEMP TABLE trunc_inst AS SELECT gridha.register_instance('trunc') AS id;
SELECT count(gridha.enqueue('trunc-' || i, 'b1', NULL)) FROM generate_series(1, 3) AS i \gset
SELECT count(*) FROM gridha.acquire_claims((SELECT id FROM trunc_inst)) \gset
SELECT held AS held_before FROM gridha.instances WHERE instance_id = (SELECT id FROM trunc_inst) \gset
TRUNCATE gridha.batches, gridha.service_claims;
SELECT is((:held_before > 0) || '/' || (SELECT count(*) FROM gridha.instances WHERE held <> 0),
          'true/0', 'after a TRUNCATE of service_claims: the instance that held claims holds none, and no instance holds any');
ROLLBACK TO SAVEPOINT trunc;

-- ---------------------------------------------------------------------------
-- The targets' load and a refused report's diagnosis (issue 42.1,
-- src/targets.c and src/status.c) (6)
-- ---------------------------------------------------------------------------

SELECT set_eq(
    $$SELECT p.oid::regprocedure::text, l.lanname::text, p.prosecdef, p.provolatile::text,
             p.proconfig::text
        FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
       WHERE p.oid IN (to_regprocedure('gridha_internal.targets_load()'),
                       to_regprocedure('gridha_internal.report_diagnose(text, text)'))$$,
    $$VALUES ('gridha_internal.targets_load()', 'sql', false, 's', '{"search_path=pg_catalog, gridha, pg_temp"}'),
             ('gridha_internal.report_diagnose(text,text)', 'sql', false, 's', '{"search_path=pg_catalog, gridha, pg_temp"}')$$,
    'targets_load and report_diagnose are SQL functions of the script, STABLE, with search_path pinned');

SELECT is((SELECT array_agg(r || ' ' || p.oid::regprocedure::text ORDER BY r, p.oid::regprocedure::text)
             FROM pg_proc p,
                  unnest(ARRAY['public', 'gridha_producer', 'gridha_submitter', 'gridha_admin', 'gridha_client']) AS r
            WHERE p.pronamespace = to_regnamespace('gridha_internal')
              AND p.proname IN ('targets_load', 'report_diagnose')
              AND has_function_privilege(r, p.oid, 'EXECUTE')),
          NULL, 'no role may execute targets_load nor report_diagnose (the library runs them as their owner)');

-- Rows the table's trigger would refuse (written as a restore with its
-- triggers off could): the load keeps the codes 0-999 in their order, the
-- string headers sorted, and names what is wrong with the headers.
SAVEPOINT load;
SET LOCAL session_replication_role = replica;
INSERT INTO gridha.targets (target, submit_url, submit_function, rate_interval, reject_codes, request_headers)
VALUES ('load-odd', 'http://ledger.invalid/', NULL, '1 second', '{422,1000,NULL,400}', '{"B": "y", "A": "x", "C": 1}'),
       ('load-arr', NULL, 'pg_catalog.now()', NULL, '{}', '[1]');
SET LOCAL session_replication_role = origin;
SELECT results_eq(
    $$SELECT * FROM gridha_internal.targets_load() l WHERE l.target LIKE 'load-%' ORDER BY l.target$$,
    $$VALUES ('load-arr'::text, NULL::text, 'pg_catalog.now()'::text, NULL::text, NULL::text, false, '{}'::integer[],
              NULL::text[], 'request_headers is not a JSON object'::text),
             ('load-odd', 'http://ledger.invalid/', NULL, NULL, NULL, true, '{422,400}',
              '{"A: x","B: y"}', 'a request header is not a string')$$,
    'targets_load: each target as the cache needs it (signatures, rate limited, codes 0-999, string headers, the headers'' problem)');
ROLLBACK TO SAVEPOINT load;

SAVEPOINT diag;
SELECT gridha.enqueue('diag-s', 'diag-b1', NULL) \g /dev/null
SELECT results_eq(
    $$SELECT d.claimant, d.claim_epoch, d.head_seq = d.seq, d.status, d.batch_epoch, d.target, d.submitted, d.attempts
        FROM gridha_internal.report_diagnose('diag-s', 'diag-b1') d$$,
    $$VALUES (NULL::uuid, 0::bigint, true, 'queued'::text, NULL::bigint, 'default'::text, false, 0)$$,
    'report_diagnose: the claim and the batch as they are (a queued head, never handed out)');
SELECT is((SELECT count(*) FROM gridha_internal.report_diagnose('diag-none', 'diag-b1')), 0::bigint,
          'report_diagnose: no row for a service without a claim (RG003, unknown service)');
ROLLBACK TO SAVEPOINT diag;

-- The library calls them: a refused report once, the load once per change
-- of gridha.targets (track_functions, set above)
CREATE FUNCTION pg_temp.cold_calls(f name) RETURNS bigint LANGUAGE sql AS $$
SELECT coalesce(sum(s.calls), 0)::bigint FROM pg_stat_xact_user_functions s
 WHERE s.schemaname = 'gridha_internal' AND s.funcname = f
$$;
CREATE TEMP TABLE cold_inst AS SELECT gridha.register_instance('cold calls') AS id;
SELECT gridha.enqueue('cold-s', 'cold-b1', NULL) \g /dev/null
SELECT count(*) FROM gridha.next_batch((SELECT id FROM cold_inst)) \g /dev/null
CREATE TEMP TABLE cold AS SELECT i.id, pg_temp.cold_calls('targets_load') AS loads,
       pg_temp.cold_calls('report_diagnose') AS diagnoses FROM cold_inst i;
UPDATE gridha.targets SET rate_burst = rate_burst WHERE target = 'default';
SELECT count(*) FROM gridha.next_batch((SELECT id FROM cold)) \g /dev/null
SELECT count(*) FROM gridha.next_batch((SELECT id FROM cold)) \g /dev/null
DO $$
BEGIN
    -- a stale epoch: refused (RG001), diagnosed
    PERFORM gridha.report_submission((SELECT id FROM cold), 'cold-s', 'cold-b1', 99, 'accepted');
    RAISE 'the report was not refused';
EXCEPTION WHEN SQLSTATE 'RG001' THEN
    NULL;
END
$$;
SELECT is(ARRAY[pg_temp.cold_calls('targets_load') - c.loads, pg_temp.cold_calls('report_diagnose') - c.diagnoses],
          ARRAY[1::bigint, 1::bigint],
          'the library runs targets_load once for a change of gridha.targets (two hand-outs after it), report_diagnose for a refused report')
  FROM cold c;

SELECT * FROM finish();
ROLLBACK;
