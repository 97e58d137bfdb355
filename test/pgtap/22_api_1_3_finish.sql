-- 22_api_1_3_finish.sql: the end of issue 40's API 1.3.
--
--   duty      gridha's own duty has one name, gridha.maintenance:
--             run_maintenance defaults to it, and 1.2's name 'maintenance'
--             is refused with a clear error (22023) that changes nothing
--   columns   the tables and the view of leader leases say duty, as the
--             functions do: no column of gridha's is named role
--   internal  gridha_internal is held to the rule of schema gridha: while a
--             role other than a superuser owns it or may create in it,
--             gridha refuses to run (RG015), and runs again once it is safe
--   check     the deprecated array forms of report_submissions and
--             report_statuses share one check, in gridha_internal, run
--             with the caller's rights and executable by the wrappers'
--             callers only; a submitter gets the same answers as before
--
-- One transaction, rolled back.
BEGIN;
SELECT plan(19);

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
\o
SET LOCAL gridha.renew_interval = '1h';
SET LOCAL gridha.soft_expiry = '2h';
SET LOCAL gridha.hard_expiry = '3h';
SET LOCAL gridha.prune_interval = -1;   -- no poll duty: run_maintenance alone
SET LOCAL gridha.balance_claims = off;

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.leases;
DELETE FROM gridha.maintenance_ticks;
DELETE FROM gridha.instances;

CREATE ROLE gridha_tap_f13_owner NOLOGIN;
CREATE ROLE gridha_tap_f13_sub NOLOGIN IN ROLE gridha_submitter;

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

CREATE TEMP TABLE ids AS SELECT gridha.register_instance('finish a') AS a;
GRANT SELECT ON ids TO PUBLIC;
CREATE FUNCTION pg_temp.a() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT a FROM ids $$;

-- ---------------------------------------------------------------------------
-- duty: one name for gridha's own duty (5)
-- ---------------------------------------------------------------------------

SELECT is((SELECT pg_get_function_arguments('gridha.run_maintenance(uuid,text)'::regprocedure)),
          'instance_id uuid, duty text DEFAULT ''gridha.maintenance''::text, OUT term bigint, OUT tick bigint, '
          'OUT outcome gridha.maintenance_outcome, OUT swept_instances integer, OUT pruned_batches bigint, '
          'OUT opened_windows integer',
          'run_maintenance''s default duty is gridha''s own by its one name, gridha.maintenance');
SELECT throws_ok($$SELECT * FROM gridha.run_maintenance(pg_temp.a(), 'maintenance')$$,
                 '22023', 'gridha''s maintenance duty is "gridha.maintenance", not "maintenance"',
                 'run_maintenance refuses 1.2''s name of gridha''s duty with an error naming the 1.3 name');
SELECT is((SELECT count(*) FROM gridha.leases), 0::bigint,
          '... and changes nothing (no lease of either name)');
SELECT is((SELECT outcome FROM gridha.run_maintenance(pg_temp.a())), 'ran',
          'run_maintenance without a duty runs gridha''s duty');
SELECT is((SELECT string_agg(duty, ',') FROM gridha.leases), 'gridha.maintenance',
          '... under the lease gridha.maintenance');

-- ---------------------------------------------------------------------------
-- columns: duty, not role (4)
-- ---------------------------------------------------------------------------

SELECT columns_are('gridha', 'leases',
                   ARRAY['duty', 'leader', 'term', 'acquired_at', 'renewed_at', 'expires_at'],
                   'gridha.leases names its duty duty');
SELECT is((SELECT a.attname::text FROM pg_attribute a
            WHERE a.attrelid = 'gridha.maintenance_ticks'::regclass AND a.attnum = 1),
          'duty', 'gridha.maintenance_ticks names its duty duty (its first column, as role was)');
SELECT is((SELECT a.attname::text FROM pg_attribute a
            WHERE a.attrelid = 'gridha.leaders'::regclass AND a.attnum = 1),
          'duty', 'gridha.leaders names each lease''s duty duty');
SELECT is((SELECT string_agg(c.relname || '.' || a.attname, ', ')
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            WHERE c.relnamespace = 'gridha'::regnamespace AND a.attname = 'role' AND NOT a.attisdropped),
          NULL, 'no table or view of gridha has a column named role');

-- ---------------------------------------------------------------------------
-- internal: RG015 covers gridha_internal (5)
-- ---------------------------------------------------------------------------

SELECT lives_ok($$SELECT gridha.register_instance('finish safe')$$,
                'gridha runs while gridha_internal is a superuser''s and nobody else may create in it');
GRANT CREATE ON SCHEMA gridha_internal TO PUBLIC;
SELECT throws_ok($$SELECT gridha.register_instance('finish unsafe')$$, 'RG015',
                 'schema gridha_internal grants CREATE to PUBLIC',
                 'gridha_internal granting CREATE to PUBLIC: gridha refuses to run (RG015)');
REVOKE CREATE ON SCHEMA gridha_internal FROM PUBLIC;
SELECT lives_ok($$SELECT gridha.register_instance('finish safe again')$$,
                '... and runs once CREATE is revoked');
ALTER SCHEMA gridha_internal OWNER TO gridha_tap_f13_owner;
SELECT throws_ok($$SELECT * FROM gridha.next_batch(pg_temp.a())$$, 'RG015',
                 'schema gridha_internal belongs to role "gridha_tap_f13_owner", which is not a superuser',
                 'gridha_internal owned by a role that is not a superuser: gridha refuses to run (RG015)');
ALTER SCHEMA gridha_internal OWNER TO CURRENT_USER;
SELECT lives_ok($$SELECT * FROM gridha.next_batch(pg_temp.a())$$,
                '... and runs once a superuser owns it again');

-- ---------------------------------------------------------------------------
-- check: one check for the array report wrappers (5)
-- ---------------------------------------------------------------------------

SELECT is((SELECT count(*) FROM pg_proc p
            WHERE p.oid IN ('gridha.report_submissions(uuid,text[],text[],bigint[],text[],text[])'::regprocedure,
                            'gridha.report_statuses(uuid,text[],text[],bigint[],text[],text[])'::regprocedure)
              AND p.prosrc LIKE '%gridha_internal.report_arrays_check(%'
              AND p.prosrc NOT LIKE '%RAISE%'),
          2::bigint, 'both array wrappers call gridha_internal.report_arrays_check and raise nothing themselves');
SELECT is((SELECT NOT p.prosecdef FROM pg_proc p
            WHERE p.oid = to_regprocedure('gridha_internal.report_arrays_check(text[],text[],bigint[],text,text[],text[])')),
          true, 'the check runs with the caller''s rights (SECURITY INVOKER)');
SELECT is((SELECT array_agg(r.rolname::text ORDER BY r.rolname) FROM pg_roles r
            WHERE r.rolname IN ('gridha_submitter', 'gridha_producer', 'gridha_admin')
              AND has_function_privilege(r.oid,
                      to_regprocedure('gridha_internal.report_arrays_check(text[],text[],bigint[],text,text[],text[])'),
                      'EXECUTE')),
          ARRAY['gridha_submitter'], 'only gridha_submitter, the wrappers'' callers, may execute the check');
SELECT is(pg_temp.as_role('gridha_tap_f13_sub',
              $$SELECT * FROM gridha.report_statuses(pg_temp.a(), '{x,y}', '{x-1,y-1}', '{1,1}', '{committed}')$$),
          '22023: statuses has 1 elements, service_ids has 2',
          'a submitter''s five-array report_statuses: arrays that do not line up, 22023 naming statuses');
SELECT is(pg_temp.as_role('gridha_tap_f13_sub',
              $$SELECT * FROM gridha.report_submissions(pg_temp.a(), '{x}', '{x-1}', '{1}', '{{accepted}}')$$),
          '22023: outcomes must be a one-dimensional array',
          'a submitter''s five-array report_submissions: a two-dimensional array, 22023 naming outcomes');

SELECT * FROM finish();
ROLLBACK;
