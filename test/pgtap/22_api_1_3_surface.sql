-- 22_api_1_3_surface.sql: the surface of the 1.3 API (issue 40): the
-- internal functions out of schema gridha (in gridha_internal, which no
-- role but gridha_submitter may use), one register_instance and one
-- acquire_claims with defaults where 1.2 had overloads (1.2's calls still
-- work), the forms deprecated in 1.2 as wrappers over the current
-- functions (no C entry point of their own, the same answers), and an
-- administrator who reads every batch's status and detail but not its
-- payload.
--
-- Names of gridha_internal are looked up with to_regnamespace, so that on a
-- schema without it (1.3 before issue 40) each test fails alone.
--
-- One transaction, rolled back.
BEGIN;
SELECT plan(33);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = off;
\o

CREATE ROLE gridha_tap_s13_admin NOLOGIN IN ROLE gridha_admin;
CREATE ROLE gridha_tap_s13_producer NOLOGIN IN ROLE gridha_producer;
CREATE ROLE gridha_tap_s13_sub NOLOGIN IN ROLE gridha_submitter;

-- sql run as role: 'ok', or 'SQLSTATE: message' of the error it raised
CREATE FUNCTION pg_temp.as_role(role text, sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', role);
    BEGIN
        EXECUTE sql;
    EXCEPTION WHEN OTHERS THEN
        RESET ROLE;
        RETURN SQLSTATE || ': ' || SQLERRM;
    END;
    RESET ROLE;
    RETURN 'ok';
END
$$;

-- ---------------------------------------------------------------------------
-- Internal functions: in gridha_internal, not in gridha (10)
-- ---------------------------------------------------------------------------

SELECT is((SELECT array_agg(p.proname::text ORDER BY p.proname)
             FROM pg_proc p
            WHERE p.pronamespace = 'gridha'::regnamespace
              AND (p.prorettype = 'trigger'::regtype OR p.proname LIKE 'worker\_%')),
          NULL,
          'schema gridha has no trigger function and no worker_* function');

SELECT set_eq(
    $$SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = to_regnamespace('gridha_internal')$$,
    $$VALUES ('gridha_internal.batches_before_insert()'), ('gridha_internal.batches_guard_final()'),
             ('gridha_internal.batches_guard_delete()'), ('gridha_internal.batches_wake()'),
             ('gridha_internal.id_sequences_changed()'), ('gridha_internal.instances_changed()'),
             ('gridha_internal.instances_guard_claims()'), ('gridha_internal.instances_owner_stamp()'),
             ('gridha_internal.instances_restored()'), ('gridha_internal.service_claims_count()'),
             ('gridha_internal.targets_before_insert()'), ('gridha_internal.targets_check()'),
             ('gridha_internal.targets_name_change()'), ('gridha_internal.targets_rate_changed()'),
             ('gridha_internal.targets_rate_inval()'), ('gridha_internal.targets_totals_follow()'),
             ('gridha_internal.worker_limit_slots()'), ('gridha_internal.worker_orphans(uuid)'),
             ('gridha_internal.worker_register(uuid,text)'), ('gridha_internal.worker_slots()'),
             ('gridha_internal.report_arrays_check(text[],text[],bigint[],text,text[],text[])'),
             ('gridha_internal.instance_check(uuid,integer)'),
             ('gridha_internal.bucket_fence(integer,uuid,bigint,boolean)'), ('gridha_internal.bucket_args(text[])'),
             ('gridha_internal.bucket_report(integer,uuid,text,text,bigint,gridha.batch_status[],gridha.batch_status)'),
             ('gridha_internal.bucket_take(integer,uuid,interval,boolean)'), ('gridha_internal.bucket_unknown(text,text)'),
             ('gridha_internal.bucket_report_many(integer,uuid,text,text[],text[],bigint[],text[])'),
             ('gridha_internal.instance_check(uuid,text,text,bigint)'),
             -- issue 42.1: the lease and maintenance functions and their C helpers
             ('gridha_internal.lease_call(text,uuid,text,bigint)'), ('gridha_internal.lease_done(uuid)'),
             ('gridha_internal.lease_settings()'), ('gridha_internal.lease_trylock(text)'),
             ('gridha_internal.prune_from()'), ('gridha_internal.prune_from_set(timestamp with time zone)'),
             ('gridha_internal.counts_check_due()'), ('gridha_internal.id_windows_top_up()'),
             ('gridha_internal.rate_handouts_prune()'), ('gridha_internal.lease_take(uuid,text,boolean,boolean)'),
             ('gridha_internal.lease_resign(uuid,text)'), ('gridha_internal.prune_step(bigint)'),
             ('gridha_internal.maintenance_tick(uuid,text,bigint,boolean)'),
             ('gridha_internal.maintenance_poll(uuid)'),
             ('gridha_internal.id_sequence_call(text,text,bigint,integer)'),
             ('gridha_internal.id_sequences_invalidate(boolean)'), ('gridha_internal.id_block_size()'),
             ('gridha_internal.id_windows_open(text,bigint)'),
             ('gridha_internal.rate_wait_ms(uuid)'),
             -- issue 42.1: release_claims' check, the epoch band, the counts' truncate
             ('gridha_internal.release_check(uuid)'), ('gridha_internal.epoch_band(bigint)'),
             ('gridha_internal.epoch_band_trylock()'), ('gridha_internal.counts_truncated()'),
             ('gridha_internal.service_claims_truncated()'),
             -- issue 42.1: the instance rows, register_instance's and worker_register's helpers
             ('gridha_internal.instance_insert(uuid,name)'), ('gridha_internal.instance_key(uuid,boolean)'),
             ('gridha_internal.instance_adopt(uuid,name)'), ('gridha_internal.cluster_known(bigint)'),
             ('gridha_internal.instance_declare(uuid,text[])'), ('gridha_internal.register_check(text[])'),
             ('gridha_internal.register_touch(uuid,text[])'), ('gridha_internal.worker_owner(uuid)'),
             -- issue 42.1: the targets' load, a refused report's diagnosis
             ('gridha_internal.targets_load()'), ('gridha_internal.report_diagnose(text,text)'),
             -- issue 43.2: the Citus mode's instance calls
             ('gridha_internal.citus_buckets()'), ('gridha_internal.citus_cycle(uuid,boolean)'),
             ('gridha_internal.citus_take(integer,uuid,interval,boolean)'),
             ('gridha_internal.citus_handout(uuid,gridha_internal.citus_bucket[],integer)'),
             ('gridha_internal.citus_next_batch(uuid)'), ('gridha_internal.citus_next_batches(uuid,integer)'),
             ('gridha_internal.citus_renew_claims(uuid)'), ('gridha_internal.citus_acquire_claims(uuid,text[])'),
             ('gridha_internal.citus_release_claims(uuid)'),
             ('gridha_internal.citus_report(uuid,text,text,bigint,text,boolean)'),
             ('gridha_internal.citus_report_submission(uuid,text,text,bigint,text,text)'),
             ('gridha_internal.citus_report_submission(uuid,text,text,bigint,gridha.submission_outcome,text)'),
             ('gridha_internal.citus_report_status(uuid,text,text,bigint,text,text)'),
             ('gridha_internal.citus_report_status(uuid,text,text,bigint,gridha.ledger_status,text)'),
             -- issue 43: the Citus mode's batched reports and reads
             ('gridha_internal.citus_mode()'), ('gridha_internal.citus_owner_check(uuid)'),
             ('gridha_internal.citus_instance_check(uuid,integer)'),
             ('gridha_internal.citus_instance_check(uuid,text,text,bigint)'),
             ('gridha_internal.citus_claimed_batches(uuid,integer)'),
             ('gridha_internal.citus_pending_batches(uuid,integer)'),
             ('gridha_internal.citus_verify_batch(uuid,text,text,bigint)'),
             ('gridha_internal.citus_report_many(uuid,boolean,anyarray)'),
             ('gridha_internal.citus_report_submissions(uuid,gridha.submission_report[])'),
             ('gridha_internal.citus_report_statuses(uuid,gridha.status_report[])'),
             -- issue 43: producers and instances in the Citus mode
             ('gridha_internal.bucket_may_act(name,name)'), ('gridha_internal.citus_instance(uuid)'),
             ('gridha_internal.citus_enqueue(text,text,bytea,text)'),
             ('gridha_internal.citus_register_instance(text,text[])'),
             -- issue 43: maintenance and metrics in the Citus mode
             ('gridha_internal.bucket_prune(integer,timestamp with time zone,bigint)'),
             ('gridha_internal.citus_coordinator(text)'), ('gridha_internal.citus_prune(bigint)'),
             ('gridha_internal.citus_run_maintenance(uuid,text)'),
             ('gridha_internal.citus_prune_batches(integer)'), ('gridha_internal.citus_metrics()'),
             ('gridha_internal.citus_view_check()'),
             -- issue 43: targets in the Citus mode
             ('gridha_internal.citus_setup_targets()'), ('gridha_internal.targets_citus_mirror()'),
             ('gridha_internal.bucket_servable(text[])'), ('gridha_internal.bucket_serves_check(text[])'),
             ('gridha_internal.bucket_enqueue_target(integer,text,text,bytea,text)'),
             ('gridha_internal.citus_buckets(uuid)'),
             -- rate limits in the Citus mode
             ('gridha_internal.bucket_rate_slot(text,bigint)'), ('gridha_internal.bucket_rate_closed(bigint)'),
             ('gridha_internal.citus_target_rates()'),
             -- the background workers in the Citus mode
             ('gridha_internal.citus_service_targets(text[])'),
             ('gridha_internal.citus_worker_pending(uuid,integer)'),
             ('gridha_internal.workers_wake()')$$,
    'gridha_internal holds the 18 trigger functions, the four worker functions, the array reports'' check, the two instance checks, release_claims'' check, the epoch band and the counts'' truncate helper, the lease, maintenance, ID sequence and rate limit functions with their helpers, and the instance rows'' functions with register_instance''s and worker_register''s helpers, the targets'' load and a refused report''s diagnosis (issue 42.1), and the Citus mode''s six helpers (issue 43.2; the batched reports'' one, 43.4) and the thirteen functions of its instance calls (issue 43.2), the ten of its batched reports and reads (issue 43), its owner check, instance check, enqueue and register_instance (issue 43), the seven of its maintenance, metrics and views (issue 43), its six functions for targets and the three of its rate limits (issue 43), and the three its background workers call (the services'' targets, the monitor''s pending batches, the wake at enqueue)');

SELECT ok(EXISTS (SELECT FROM pg_depend d
                   WHERE d.classid = 'pg_namespace'::regclass
                     AND d.objid = to_regnamespace('gridha_internal')
                     AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'),
          'gridha_internal belongs to the extension (created by it, dropped with it)');

SELECT is((SELECT array_agg(r ORDER BY r) FROM unnest(ARRAY['public', 'gridha_producer', 'gridha_submitter',
                                                            'gridha_admin', 'gridha_client']) AS r
            WHERE to_regnamespace('gridha_internal') IS NOT NULL
              AND has_schema_privilege(r, 'gridha_internal', 'USAGE')),
          ARRAY['gridha_client', 'gridha_submitter'],
          'USAGE on gridha_internal: gridha_submitter (a worker''s role) and its members only');

SELECT is((SELECT count(*) FROM pg_proc p
            WHERE p.pronamespace = to_regnamespace('gridha_internal') AND p.prorettype = 'trigger'::regtype
              AND EXISTS (SELECT FROM unnest(ARRAY['public', 'gridha_producer', 'gridha_submitter',
                                                   'gridha_admin']) AS r
                           WHERE has_function_privilege(r, p.oid, 'EXECUTE'))),
          0::bigint, 'no role may execute a trigger function');

SELECT is(pg_temp.as_role('gridha_tap_s13_admin', 'SELECT * FROM gridha_internal.worker_slots()'),
          '42501: permission denied for schema gridha_internal',
          'an administrator cannot name gridha_internal''s functions');
SELECT is(pg_temp.as_role('gridha_tap_s13_admin', 'SELECT count(*) FROM gridha.workers, gridha.worker_limits'),
          'ok', '... and reads the worker views, which call them');

\o /dev/null
SELECT gridha.enqueue('s13', 's13-1', '\x01');
\o
SELECT is((SELECT seq FROM gridha.batches WHERE batch_id = 's13-1'), 1::bigint,
          'the enqueue trigger (gridha_internal.batches_before_insert) still places a batch');
SELECT throws_ok($$DELETE FROM gridha.batches WHERE batch_id = 's13-1'$$, 'RG002', NULL,
                 'the delete guard (gridha_internal.batches_guard_delete) still refuses an unfinished batch');
SELECT is(pg_temp.as_role('gridha_tap_s13_sub', $$SELECT gridha_internal.worker_register(gen_random_uuid(), 'x')$$),
          'RG016: only a gridha background worker may register a worker instance',
          'a submitter reaches worker_register, which still refuses a process that is no worker (RG016)');

-- ---------------------------------------------------------------------------
-- One function with defaults (9)
-- ---------------------------------------------------------------------------

SELECT is((SELECT array_agg(format('%s(%s)', p.proname, pg_get_function_arguments(p.oid)) ORDER BY p.proname)
             FROM pg_proc p
            WHERE p.pronamespace = 'gridha'::regnamespace
              AND p.proname IN ('register_instance', 'acquire_claims')),
          ARRAY['acquire_claims(instance_id uuid, serves text[] DEFAULT NULL::text[])',
                'register_instance(label text DEFAULT NULL::text, serves text[] DEFAULT NULL::text[])'],
          'register_instance and acquire_claims: one function each, serves DEFAULT NULL');

SELECT is((SELECT array_agg(x.proname::text ORDER BY x.proname)
             FROM (SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'gridha'::regnamespace
                    GROUP BY p.proname HAVING count(*) > 1) x
            WHERE x.proname IN ('register_instance', 'acquire_claims')),
          NULL, 'no overload of either is left');

CREATE TEMP TABLE s13 AS
SELECT gridha.register_instance() AS none,
       gridha.register_instance('s13 positional') AS positional,
       gridha.register_instance(label => 's13 named') AS named,
       gridha.register_instance('s13 serves', ARRAY['submit_url', 'status_url']) AS serves,
       gridha.register_instance('s13 null serves', NULL) AS null_serves;

SELECT results_eq(
    $$SELECT i.label, i.serves::text FROM s13, gridha.instances i
       WHERE i.instance_id IN (s13.none, s13.positional, s13.named, s13.serves, s13.null_serves)
       ORDER BY i.label NULLS FIRST$$,
    $$VALUES (NULL::text, NULL::text), ('s13 named', NULL), ('s13 null serves', NULL),
             ('s13 positional', NULL), ('s13 serves', '{submit_url,status_url}')$$,
    'register_instance: 1.2''s calls (none, label by position or by name, label and serves) register as before');

SELECT is((SELECT count(*) FROM s13, gridha.acquire_claims(s13.positional)), 1::bigint,
          'acquire_claims(instance_id), 1.2''s call, takes the free claim');
SELECT is((SELECT count(*) FROM s13, gridha.acquire_claims(s13.serves, ARRAY['submit_function'])), 0::bigint,
          'acquire_claims(instance_id, serves) with serves given: nothing to take');
SELECT is((SELECT i.serves::text FROM s13, gridha.instances i WHERE i.instance_id = s13.serves),
          '{submit_function}', '... and the declaration is recorded');
SELECT is((SELECT count(*) FROM s13, gridha.acquire_claims(s13.positional, NULL)), 0::bigint,
          'acquire_claims with serves NULL declares nothing');
SELECT is((SELECT i.serves::text FROM s13, gridha.instances i WHERE i.instance_id = s13.positional),
          NULL, '... the instance still serves any kind');
SELECT is(pg_temp.as_role('gridha_tap_s13_sub', 'SELECT gridha.register_instance(''s13 sub'')'), 'ok',
          'a submitter may call register_instance with one argument');

-- ---------------------------------------------------------------------------
-- Deprecated forms: wrappers, the same answers (9)
-- ---------------------------------------------------------------------------

SELECT is((SELECT array_agg(p.prosrc ORDER BY p.prosrc) FROM pg_proc p
            WHERE p.pronamespace = 'gridha'::regnamespace
              AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')
              AND p.prosrc IN ('gridha_try_lead', 'gridha_resign', 'gridha_report_submissions',
                               'gridha_report_statuses')),
          NULL, 'the 1.3 schema names none of the C entry points of the deprecated forms');

SELECT set_eq(
    $$SELECT p.oid::regprocedure::text, l.lanname::text, p.prosecdef FROM pg_proc p
        JOIN pg_language l ON l.oid = p.prolang
       WHERE p.oid IN ('gridha.try_lead(uuid, text)'::regprocedure, 'gridha.resign(uuid, text)'::regprocedure,
                       'gridha.report_submissions(uuid, text[], text[], bigint[], text[], text[])'::regprocedure,
                       'gridha.report_statuses(uuid, text[], text[], bigint[], text[], text[])'::regprocedure)$$,
    $$VALUES ('gridha.try_lead(uuid,text)', 'sql', false), ('gridha.resign(uuid,text)', 'sql', false),
             ('gridha.report_submissions(uuid,text[],text[],bigint[],text[],text[])', 'plpgsql', false),
             ('gridha.report_statuses(uuid,text[],text[],bigint[],text[],text[])', 'plpgsql', false)$$,
    'try_lead and resign are SQL wrappers, the five-array reports PL/pgSQL ones, all with the caller''s rights');

SELECT is((SELECT gridha.try_lead(s13.none, 's13-duty') FROM s13), 1::bigint,
          'try_lead leads the duty (term 1)');
SELECT is((SELECT term FROM gridha.leaders WHERE duty = 's13-duty'), 1::bigint,
          '... the same lease lead takes');
SELECT ok((SELECT gridha.resign(s13.none, 's13-duty') FROM s13), 'resign gives it up');

\o /dev/null
SELECT * FROM s13, gridha.next_batch(s13.positional);
\o

SELECT results_eq(
    $$SELECT r.batch_id, r.status::text, r.sqlstate, r.message
        FROM s13, gridha.report_submissions(s13.positional, '{s13,s13}', '{s13-x,s13-1}',
                                              '{1,1}', '{exploded,ACCEPTED}') r$$,
    $$VALUES ('s13-x'::text, NULL::text, 'RG004'::text, 'unknown submission outcome "exploded"'::text),
             ('s13-1', 'pending', NULL, NULL)$$,
    'five-array report_submissions: words in any case, an unknown word refuses its row alone (RG004), order kept');

SELECT throws_ok($$SELECT * FROM gridha.report_submissions((SELECT positional FROM s13), '{s13}', '{a,b}', '{1}', '{accepted}')$$,
                 '22023', 'batch_ids has 2 elements, service_ids has 1',
                 'five-array report_submissions: arrays that do not line up fail the whole call (22023)');
SELECT throws_ok($$SELECT * FROM gridha.report_statuses((SELECT positional FROM s13), '{s13}', '{s13-1}', NULL, '{committed}')$$,
                 '22004', 'epochs must not be null',
                 'five-array report_statuses: a NULL array fails the whole call (22004)');
SELECT results_eq(
    $$SELECT r.batch_id, r.status::text, r.sqlstate, r.message
        FROM s13, gridha.report_statuses(s13.positional, '{s13,s13}', '{s13-1,s13-1}', '{1,1}',
                                           '{banana,Committed}') r$$,
    $$VALUES ('s13-1'::text, NULL::text, 'RG005'::text, 'unknown ledger status "banana"'::text),
             ('s13-1', 'committed', NULL, NULL)$$,
    'five-array report_statuses: an unknown word refuses its row alone (RG005), a known one in any case is reported');

-- ---------------------------------------------------------------------------
-- Administrators read status and detail, not payloads (5)
-- ---------------------------------------------------------------------------

\o /dev/null
SELECT gridha.enqueue('s13', 's13-2', '\x02');
\o
UPDATE gridha.batches SET detail = 'http 503' WHERE batch_id = 's13-2';

SELECT is(pg_temp.as_role('gridha_tap_s13_admin',
              $q$DO $d$ BEGIN
                  IF (SELECT status::text || ' ' || detail FROM gridha.batches WHERE batch_id = 's13-2')
                     IS DISTINCT FROM 'queued http 503' THEN
                      RAISE EXCEPTION 'read something else';
                  END IF;
              END $d$$q$),
          'ok', 'an administrator (no superuser) reads a batch''s status and detail');
SELECT is(pg_temp.as_role('gridha_tap_s13_admin', 'SELECT payload FROM gridha.batches'),
          '42501: permission denied for table batches', '... but not its payload');
SELECT is(pg_temp.as_role('gridha_tap_s13_admin', 'SELECT * FROM gridha.batches'),
          '42501: permission denied for table batches', '... nor SELECT *, which includes it');
SELECT is(pg_temp.as_role('gridha_tap_s13_producer', 'SELECT status, detail FROM gridha.batches'),
          '42501: permission denied for table batches', 'a producer reads no batch (it has gridha.queue_progress)');
SELECT is(pg_temp.as_role('gridha_tap_s13_sub', 'SELECT status, detail FROM gridha.batches'),
          '42501: permission denied for table batches',
          'a submitter reads no batch table (its instances'' batches come from the API)');

SELECT * FROM finish();
ROLLBACK;
