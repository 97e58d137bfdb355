-- 02_privileges.sql: who may do what, as a matrix and as behaviour.
--
-- The model (sql/gridha--1.1.sql, "Privileges" and the section-7 grants):
--
--   PUBLIC            nothing in schema gridha
--   gridha_producer   enqueue, INSERT of (service_id, batch_id, payload)
--                     into gridha.batches, ids, the progress views
--   gridha_submitter  the instance API, gridha.targets (credentials
--                     included), a service's target, the operator views
--   gridha_admin      changes gridha.targets, workers, ID sequences, views
--   gridha_client     producer + submitter, nothing of its own
--
-- Part 1 compares every privilege every test role holds on every object of
-- the extension (enumerated from the catalog, so a new object is covered
-- without touching this file) with the expected matrix below: any cell
-- allowed that should not be, or refused that should be, fails.
-- Part 2 runs the calls that matter as each role and checks the SQLSTATE:
-- 42501 for a missing privilege, RG008 for an instance of another role.
--
-- Test roles (NOLOGIN, created here and gone with the ROLLBACK):
--   gridha_tap_nobody    PUBLIC's rights only
--   gridha_tap_producer  in gridha_producer
--   gridha_tap_sub_a     in gridha_submitter      (owns instance A1)
--   gridha_tap_sub_b     in gridha_submitter      (owns instance B1)
--   gridha_tap_worker    in gridha_submitter      (what gridha.worker_role is)
--   gridha_tap_admin     in gridha_admin
--   gridha_tap_client    in gridha_client
-- Instance ids are kept in the settings tap.a1, tap.b1 and tap.orphan.
--
-- stop_worker names an instance but is an administrator's call: its
-- EXECUTE privilege (gridha_admin) is the check, not the instance's owner
-- (README, Security); here it is only checked that a submitter cannot
-- call it.
BEGIN;
SELECT plan(102);

-- The tables are emptied (inside this transaction only) so the hand-outs
-- below do not depend on what the database held before.
DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
\o

CREATE ROLE gridha_tap_nobody NOLOGIN;
CREATE ROLE gridha_tap_producer NOLOGIN IN ROLE gridha_producer;
CREATE ROLE gridha_tap_sub_a NOLOGIN IN ROLE gridha_submitter;
CREATE ROLE gridha_tap_sub_b NOLOGIN IN ROLE gridha_submitter;
CREATE ROLE gridha_tap_worker NOLOGIN IN ROLE gridha_submitter;
CREATE ROLE gridha_tap_admin NOLOGIN IN ROLE gridha_admin;
CREATE ROLE gridha_tap_client NOLOGIN IN ROLE gridha_client;

-- Runs q as role r (the cells that must work).
CREATE FUNCTION pg_temp.as_role(r name, q text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE q;
    RESET ROLE;
END
$$;

-- For the refusals (under throws_ok): runs q as role r, and should q be
-- allowed, fails anyway, so that a widened privilege is reported and what
-- the call did is undone with the statement's subtransaction.
CREATE FUNCTION pg_temp.refused_as(r name, q text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE q;
    RAISE EXCEPTION 'allowed as %: %', r, q USING ERRCODE = 'P0001';
END
$$;

-- Runs q as role r and returns the first column of its first row as text,
-- or the error that refused it (so a narrowed privilege fails one
-- assertion, not the whole file).
CREATE FUNCTION pg_temp.as_role_text(r name, q text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE q INTO v;
    RESET ROLE;
    RETURN v;
EXCEPTION WHEN OTHERS THEN
    RETURN format('error %s: %s', SQLSTATE, SQLERRM);
END
$$;

-- Runs q as role r: 'ok', or the SQLSTATE that refused it (undone).
CREATE FUNCTION pg_temp.sqlstate_as(r name, q text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE q;
    RESET ROLE;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END
$$;

-- ===========================================================================
-- Part 1: the matrix
-- ===========================================================================

-- Who is tested, and which group roles each one is in.
CREATE TEMP TABLE tap_roles (ord int, label text, rolname name, groups text[]);
INSERT INTO tap_roles VALUES
 (1, 'PUBLIC',      'public',              '{}'),
 (2, 'nobody',      'gridha_tap_nobody',   '{}'),
 (3, 'producer',    'gridha_tap_producer', '{producer}'),
 (4, 'submitter A', 'gridha_tap_sub_a',    '{submitter}'),
 (5, 'submitter B', 'gridha_tap_sub_b',    '{submitter}'),
 (6, 'worker role', 'gridha_tap_worker',   '{submitter}'),
 (7, 'admin',       'gridha_tap_admin',    '{admin}'),
 (8, 'client',      'gridha_tap_client',   '{producer,submitter}');

-- The expected matrix: every cell a group role is allowed. Every other
-- cell of every object below is refused.
--   kind   schema | function | table | view | sequence | column
--   column a privilege on some columns only (the table-wide one not held)
CREATE TEMP TABLE tap_grants (grp text, kind text, obj text, priv text);
INSERT INTO tap_grants VALUES
 -- producer: enqueue, see its queues' progress, take ids
 ('producer', 'schema',   'gridha', 'USAGE'),
 ('producer', 'function', 'gridha.enqueue(text, text, bytea, text)', 'EXECUTE'),
 -- the Citus mode (issue 43.2): its enqueue, and the buckets' hash
 ('producer', 'function', 'gridha.bucket_enqueue(integer, text, text, bytea)', 'EXECUTE'),
 ('producer', 'function', 'gridha.bucket_enqueue(integer, text, text, bytea, text)', 'EXECUTE'),
 ('producer', 'function', 'gridha.bucket_of(text, integer)', 'EXECUTE'),
 ('producer', 'function', 'gridha.expiry_settings()', 'EXECUTE'),
 ('producer', 'function', 'gridha.reserve_ids(text, integer)', 'EXECUTE'),
 ('producer', 'function', 'gridha.next_id(text)', 'EXECUTE'),
 ('producer', 'column',   'gridha.batches(service_id)', 'INSERT'),
 ('producer', 'column',   'gridha.batches(batch_id)', 'INSERT'),
 ('producer', 'column',   'gridha.batches(payload)', 'INSERT'),
 ('producer', 'view',     'gridha.queue_progress', 'SELECT'),
 -- the views' check of the Citus mode (RG035 there), called through them
 ('producer', 'function', 'gridha_internal.citus_view_check()', 'EXECUTE'),
 ('producer', 'view',     'gridha.id_sequence_status', 'SELECT'),
 -- submitter: the instance API; reads what it needs to submit
 ('submitter', 'schema',   'gridha', 'USAGE'),
 ('submitter', 'function', 'gridha.register_instance(text, text[])', 'EXECUTE'),
 ('submitter', 'function', 'gridha.renew_claims(uuid)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.acquire_claims(uuid, text[])', 'EXECUTE'),
 ('submitter', 'function', 'gridha.claimed_batches(uuid, integer)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.next_batch(uuid)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.next_batches(uuid, integer)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.verify_batch(uuid, text, text, bigint)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.report_submission(uuid, text, text, bigint, text, text)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.report_submissions(uuid, text[], text[], bigint[], text[], text[])', 'EXECUTE'),
 ('submitter', 'function', 'gridha.pending_batches(uuid, integer)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.report_status(uuid, text, text, bigint, text, text)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.report_statuses(uuid, text[], text[], bigint[], text[], text[])', 'EXECUTE'),
 ('submitter', 'function', 'gridha.release_claims(uuid)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.expiry_settings()', 'EXECUTE'),
 ('submitter', 'schema',   'gridha_internal', 'USAGE'),
 ('submitter', 'function', 'gridha_internal.worker_slots()', 'EXECUTE'),
 ('submitter', 'function', 'gridha_internal.worker_register(uuid, text)', 'EXECUTE'),
 ('submitter', 'function', 'gridha_internal.worker_limit_slots()', 'EXECUTE'),
 ('submitter', 'view',     'gridha.worker_limits', 'SELECT'),
 -- the Citus mode (issue 43.2): the per-bucket cycle, and the buckets' hash
 ('submitter', 'function', 'gridha.bucket_of(text, integer)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.bucket_acquire(integer, uuid, interval)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.bucket_takeover(integer, uuid, interval)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.bucket_renew(integer, uuid, bigint, interval)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.bucket_release(integer, uuid, bigint)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.bucket_next_batch(integer, uuid, bigint)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.bucket_report_submission(integer, uuid, text, text, bigint, text)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.bucket_report_status(integer, uuid, text, text, bigint, text)', 'EXECUTE'),
 -- the Citus mode (issue 43.4): the batched per-bucket hand-out and reports
 ('submitter', 'function', 'gridha.bucket_next_batches(integer, uuid, bigint, integer)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.bucket_report_submissions(integer, uuid, gridha.submission_report[])', 'EXECUTE'),
 ('submitter', 'function', 'gridha.bucket_report_statuses(integer, uuid, gridha.status_report[])', 'EXECUTE'),
 ('submitter', 'function', 'gridha_internal.worker_orphans(uuid)', 'EXECUTE'),
 ('submitter', 'function', 'gridha_internal.rate_wait_ms(uuid)', 'EXECUTE'),
 ('submitter', 'function', 'gridha_internal.report_arrays_check(text[], text[], bigint[], text, text[], text[])', 'EXECUTE'),
 ('submitter', 'function', 'gridha.try_lead(uuid, text)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.renew_lead(uuid, text, bigint)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.resign(uuid, text)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.run_maintenance(uuid, text)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.report_submission(uuid, text, text, bigint, gridha.submission_outcome, text)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.report_status(uuid, text, text, bigint, gridha.ledger_status, text)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.report_submissions(uuid, gridha.submission_report[])', 'EXECUTE'),
 ('submitter', 'function', 'gridha.report_statuses(uuid, gridha.status_report[])', 'EXECUTE'),
 ('submitter', 'function', 'gridha.lead(uuid, text)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.resign_lead(uuid, text)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.reserve_ids(text, integer)', 'EXECUTE'),
 ('submitter', 'function', 'gridha.next_id(text)', 'EXECUTE'),
 ('submitter', 'table',    'gridha.targets', 'SELECT'),
 ('submitter', 'column',   'gridha.service_claims(service_id)', 'SELECT'),
 ('submitter', 'column',   'gridha.service_claims(target)', 'SELECT'),
 ('submitter', 'view',     'gridha.claims', 'SELECT'),
 ('submitter', 'view',     'gridha.instance_health', 'SELECT'),
 ('submitter', 'view',     'gridha.service_queues', 'SELECT'),
 ('submitter', 'view',     'gridha.queue_progress', 'SELECT'),
 ('submitter', 'view',     'gridha.workers', 'SELECT'),
 ('submitter', 'view',     'gridha.leaders', 'SELECT'),
 ('submitter', 'view',     'gridha.metrics', 'SELECT'),
 ('submitter', 'view',     'gridha.id_sequence_status', 'SELECT'),
 ('submitter', 'view',     'gridha.target_rates', 'SELECT'),
 -- the Citus mode (issue 43): what gridha.metrics and the views call
 ('submitter', 'function', 'gridha_internal.citus_mode()', 'EXECUTE'),
 ('submitter', 'function', 'gridha_internal.citus_metrics()', 'EXECUTE'),
 ('submitter', 'function', 'gridha_internal.citus_target_rates()', 'EXECUTE'),
 ('submitter', 'function', 'gridha_internal.citus_view_check()', 'EXECUTE'),
 -- the Citus mode: what a background worker's statements call
 ('submitter', 'function', 'gridha_internal.citus_service_targets(text[])', 'EXECUTE'),
 ('submitter', 'function', 'gridha_internal.citus_worker_pending(uuid, integer)', 'EXECUTE'),
 -- admin: the targets, the workers, the ID sequences; the views
 ('admin', 'schema',   'gridha', 'USAGE'),
 ('admin', 'table',    'gridha.targets', 'SELECT'),
 ('admin', 'table',    'gridha.targets', 'INSERT'),
 ('admin', 'table',    'gridha.targets', 'UPDATE'),
 ('admin', 'table',    'gridha.targets', 'DELETE'),
 ('admin', 'function', 'gridha.start_worker(text)', 'EXECUTE'),
 ('admin', 'function', 'gridha.stop_worker(uuid)', 'EXECUTE'),
 ('admin', 'function', 'gridha_internal.worker_slots()', 'EXECUTE'),
 ('admin', 'function', 'gridha.create_id_sequence(text, bigint, integer)', 'EXECUTE'),
 ('admin', 'function', 'gridha.drop_id_sequence(text)', 'EXECUTE'),
 ('admin', 'function', 'gridha.move_service(text, text)', 'EXECUTE'),
 ('admin', 'function', 'gridha_internal.worker_limit_slots()', 'EXECUTE'),
 ('admin', 'view',     'gridha.worker_limits', 'SELECT'),
 ('admin', 'function', 'gridha.set_instance_owner(uuid, regrole)', 'EXECUTE'),
 ('admin', 'function', 'gridha.prune_batches(integer)', 'EXECUTE'),
 ('admin', 'view',     'gridha.claims', 'SELECT'),
 ('admin', 'view',     'gridha.instance_health', 'SELECT'),
 ('admin', 'view',     'gridha.service_queues', 'SELECT'),
 ('admin', 'view',     'gridha.queue_progress', 'SELECT'),
 ('admin', 'view',     'gridha.workers', 'SELECT'),
 ('admin', 'view',     'gridha.leaders', 'SELECT'),
 ('admin', 'view',     'gridha.metrics', 'SELECT'),
 ('admin', 'view',     'gridha.id_sequence_status', 'SELECT'),
 ('admin', 'view',     'gridha.target_rates', 'SELECT'),
 -- the Citus mode (issue 43): what gridha.metrics and the views call, and
 -- what maintenance pruned
 ('admin', 'function', 'gridha_internal.citus_mode()', 'EXECUTE'),
 ('admin', 'function', 'gridha_internal.citus_metrics()', 'EXECUTE'),
 ('admin', 'function', 'gridha_internal.citus_target_rates()', 'EXECUTE'),
 ('admin', 'function', 'gridha_internal.citus_view_check()', 'EXECUTE'),
 ('admin', 'table',    'gridha.pruned_totals', 'SELECT'),
 -- admin: every column of gridha.batches but payload (issue 40)
 ('admin', 'column',   'gridha.batches(service_id)', 'SELECT'),
 ('admin', 'column',   'gridha.batches(batch_id)', 'SELECT'),
 ('admin', 'column',   'gridha.batches(seq)', 'SELECT'),
 ('admin', 'column',   'gridha.batches(status)', 'SELECT'),
 ('admin', 'column',   'gridha.batches(created_at)', 'SELECT'),
 ('admin', 'column',   'gridha.batches(epoch)', 'SELECT'),
 ('admin', 'column',   'gridha.batches(attempts)', 'SELECT'),
 ('admin', 'column',   'gridha.batches(not_before)', 'SELECT'),
 ('admin', 'column',   'gridha.batches(instance_id)', 'SELECT'),
 ('admin', 'column',   'gridha.batches(handed_out_at)', 'SELECT'),
 ('admin', 'column',   'gridha.batches(submitted_at)', 'SELECT'),
 ('admin', 'column',   'gridha.batches(finished_at)', 'SELECT'),
 ('admin', 'column',   'gridha.batches(detail)', 'SELECT');

-- Every object of the extension, from the catalog: the functions and
-- relations in schema gridha and those the extension owns elsewhere.
CREATE TEMP TABLE tap_objects AS
WITH ext AS (
    SELECT d.classid, d.objid FROM pg_depend d
     WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
       AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'gridha'))
SELECT 'function'::text AS kind, p.oid, format('%s.%s(%s)', n.nspname, p.proname, oidvectortypes(p.proargtypes)) AS obj
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'gridha' OR p.oid IN (SELECT objid FROM ext WHERE classid = 'pg_proc'::regclass)
UNION ALL
SELECT CASE WHEN c.relkind = 'S' THEN 'sequence' WHEN c.relkind IN ('v', 'm') THEN 'view' ELSE 'table' END,
       c.oid, format('%s.%s', n.nspname, c.relname)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p', 'f', 'v', 'm', 'S')
   AND (n.nspname = 'gridha' OR c.oid IN (SELECT objid FROM ext WHERE classid = 'pg_class'::regclass));

-- Every cell: object x privilege kind (columns: each column of each table
-- and view, with the privileges a column can carry).
CREATE TEMP TABLE tap_cells AS
SELECT 'schema'::text AS kind, n.oid, 0::int2 AS attnum, n.nspname::text AS obj, k.priv
  FROM pg_namespace n CROSS JOIN unnest(ARRAY['USAGE', 'CREATE']) AS k(priv)
 WHERE n.nspname IN ('gridha', 'gridha_internal')
UNION ALL
SELECT o.kind, o.oid, 0::int2, o.obj, k.priv
  FROM tap_objects o
  JOIN (VALUES ('function', 'EXECUTE'),
               ('table', 'SELECT'), ('table', 'INSERT'), ('table', 'UPDATE'), ('table', 'DELETE'),
               ('table', 'TRUNCATE'), ('table', 'REFERENCES'), ('table', 'TRIGGER'),
               ('view', 'SELECT'), ('view', 'INSERT'), ('view', 'UPDATE'), ('view', 'DELETE'),
               ('view', 'TRUNCATE'), ('view', 'REFERENCES'), ('view', 'TRIGGER'),
               ('sequence', 'USAGE'), ('sequence', 'SELECT'), ('sequence', 'UPDATE')) AS k(kind, priv)
    ON k.kind = o.kind
UNION ALL
SELECT 'column', o.oid, a.attnum, format('%s(%s)', o.obj, a.attname), k.priv
  FROM tap_objects o
  JOIN pg_attribute a ON a.attrelid = o.oid AND a.attnum > 0 AND NOT a.attisdropped
 CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'REFERENCES']) AS k(priv)
 WHERE o.kind IN ('table', 'view');

-- What each role may do now, cell by cell; a column cell counts only when
-- the table-wide privilege is not held (then it is a column grant).
CREATE TEMP VIEW tap_actual AS
SELECT r.label, c.kind, c.obj, c.priv
  FROM tap_roles r CROSS JOIN tap_cells c
 WHERE CASE c.kind
         WHEN 'schema'   THEN has_schema_privilege(r.rolname, c.oid, c.priv)
         WHEN 'function' THEN has_function_privilege(r.rolname, c.oid, c.priv)
         WHEN 'sequence' THEN has_sequence_privilege(r.rolname, c.oid, c.priv)
         WHEN 'column'   THEN has_column_privilege(r.rolname, c.oid, c.attnum, c.priv)
                              AND NOT has_table_privilege(r.rolname, c.oid, c.priv)
         ELSE has_table_privilege(r.rolname, c.oid, c.priv)
       END;

CREATE TEMP VIEW tap_expected AS
SELECT DISTINCT r.label, g.kind, g.obj, g.priv
  FROM tap_roles r JOIN tap_grants g ON g.grp = ANY (r.groups);

SELECT diag(format('matrix: %s roles x %s objects (%s functions, %s tables, %s views, %s sequences, 1 schema; %s columns) = %s cells',
                   (SELECT count(*) FROM tap_roles),
                   (SELECT count(*) FROM tap_objects) + 1,
                   (SELECT count(*) FROM tap_objects WHERE kind = 'function'),
                   (SELECT count(*) FROM tap_objects WHERE kind = 'table'),
                   (SELECT count(*) FROM tap_objects WHERE kind = 'view'),
                   (SELECT count(*) FROM tap_objects WHERE kind = 'sequence'),
                   (SELECT count(DISTINCT obj) FROM tap_cells WHERE kind = 'column'),
                   (SELECT count(*) FROM tap_roles) * (SELECT count(*) FROM tap_cells)));

-- The enumeration is the extension: nothing in schema gridha is outside it.
SELECT set_eq(
    $$SELECT kind, obj FROM tap_objects$$,
    $$SELECT CASE WHEN d.classid = 'pg_proc'::regclass THEN 'function'
                  WHEN c.relkind = 'S' THEN 'sequence'
                  WHEN c.relkind IN ('v', 'm') THEN 'view' ELSE 'table' END,
             CASE WHEN p.oid IS NOT NULL THEN format('%s.%s(%s)', p.pronamespace::regnamespace, p.proname, oidvectortypes(p.proargtypes))
                  ELSE format('gridha.%s', c.relname) END
        FROM pg_depend d
        LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
        LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
       WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
         AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'gridha')
         AND (p.oid IS NOT NULL OR c.relkind IN ('r', 'p', 'f', 'v', 'm', 'S'))$$,
    'the matrix covers exactly the functions, tables, views and sequences of the extension');

-- The matrix itself: one assertion per role, every cell of every object.
SELECT set_eq(
    format('SELECT kind, obj, priv FROM tap_actual WHERE label = %L', r.label),
    format('SELECT kind, obj, priv FROM tap_expected WHERE label = %L', r.label),
    format('matrix, %s (%s): exactly the expected privileges on every object of gridha',
           r.label, CASE WHEN r.groups = '{}' THEN 'no group role'
                         ELSE 'in ' || array_to_string(r.groups, ' + ') END))
  FROM tap_roles r ORDER BY r.ord;

-- The same for EXECUTE, by trying: EXPLAIN starts the executor, which
-- checks EXECUTE (and the schema's USAGE) and runs nothing. An
-- administrator executes gridha_internal's worker_slots and
-- worker_limit_slots through the views only (no USAGE on that schema).
CREATE TEMP TABLE tap_calls AS
SELECT r.label, o.obj,
       pg_temp.sqlstate_as(r.rolname,
           format('EXPLAIN (COSTS OFF) SELECT %I.%I(%s)', p.pronamespace::regnamespace, p.proname,
                  (SELECT string_agg(format('NULL::%s', format_type(t, NULL)), ', ' ORDER BY i)
                     FROM unnest(p.proargtypes) WITH ORDINALITY AS a(t, i)))) AS state
  FROM tap_roles r CROSS JOIN tap_objects o JOIN pg_proc p ON p.oid = o.oid
 WHERE o.kind = 'function' AND r.rolname <> 'public';

SELECT set_eq(
    $$SELECT label, obj FROM tap_calls WHERE state = 'ok'$$,
    $$SELECT e.label, e.obj FROM tap_expected e JOIN tap_roles r ON r.label = e.label
       WHERE e.kind = 'function' AND e.label <> 'PUBLIC'
         AND (e.obj NOT LIKE 'gridha\_internal.%' OR has_schema_privilege(r.rolname, 'gridha_internal', 'USAGE'))$$,
    'calling every function as every role: exactly the expected ones may be called');
SELECT is((SELECT array_agg(DISTINCT state) FROM tap_calls WHERE state <> 'ok'), ARRAY['42501'],
          'every refused call is refused with 42501 (insufficient_privilege)');

-- ---------------------------------------------------------------------------
-- The group roles themselves
-- ---------------------------------------------------------------------------

SELECT is((SELECT array_agg(rolname::text ORDER BY rolname) FROM pg_roles
            WHERE rolname IN ('gridha_producer', 'gridha_submitter', 'gridha_admin', 'gridha_client')
              AND NOT rolcanlogin AND NOT rolsuper AND rolinherit),
          ARRAY['gridha_admin', 'gridha_client', 'gridha_producer', 'gridha_submitter'],
          'the four group roles exist: NOLOGIN, not superusers, inheriting');
SELECT set_eq(
    $$SELECT m.rolname::text AS member, g.rolname::text AS member_of FROM pg_auth_members a
        JOIN pg_roles m ON m.oid = a.member JOIN pg_roles g ON g.oid = a.roleid
       WHERE m.rolname IN ('gridha_producer', 'gridha_submitter', 'gridha_admin', 'gridha_client')$$,
    $$VALUES ('gridha_client', 'gridha_producer'), ('gridha_client', 'gridha_submitter')$$,
    'gridha_client is a member of gridha_producer and gridha_submitter; the others are members of nothing');
-- Every ACL entry on the schema, its objects and their columns: only the
-- owner and the three roles with grants appear (not PUBLIC, not
-- gridha_client, not any other role).
SELECT set_eq(
    $$SELECT DISTINCT CASE WHEN e.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(e.grantee)::text END
        FROM (SELECT nspacl AS acl FROM pg_namespace WHERE nspname IN ('gridha', 'gridha_internal')
              UNION ALL SELECT p.proacl FROM pg_proc p JOIN tap_objects o ON o.oid = p.oid
              UNION ALL SELECT c.relacl FROM pg_class c JOIN tap_objects o ON o.oid = c.oid
              UNION ALL SELECT a.attacl FROM pg_attribute a JOIN tap_objects o ON o.oid = a.attrelid) x
       CROSS JOIN LATERAL aclexplode(x.acl) e$$,
    $$VALUES ((SELECT pg_get_userbyid(nspowner)::text FROM pg_namespace WHERE nspname = 'gridha')),
             ('gridha_producer'), ('gridha_submitter'), ('gridha_admin')$$,
    'grants in gridha name only its owner, gridha_producer, gridha_submitter and gridha_admin');

-- ---------------------------------------------------------------------------
-- search_path and SECURITY DEFINER
-- ---------------------------------------------------------------------------

-- Two exceptions without any path: the C trigger batches_guard_final, on
-- every hand-out and report, runs no SQL and resolves no name (see the
-- install script); the C trigger targets_check (1.3) runs no SQL and
-- resolves only the function names the writer gives, with the writer's
-- search_path, as a regprocedure cast in the writer's statement did.
-- Neither is SECURITY DEFINER. And the claim cycle's C functions (1.3),
-- whose C code sets the same path itself before its first statement
-- (gridha_pinned_call, src/spi_util.c; 024_security, step path, runs them
-- on a hostile path).
CREATE TEMP TABLE cycle_functions (fn) AS
VALUES ('gridha.next_batch(uuid)'),
       ('gridha.next_batches(uuid,integer)'),
       ('gridha.report_statuses(uuid,gridha.status_report[])'),
       ('gridha.report_status(uuid,text,text,bigint,gridha.ledger_status,text)'),
       ('gridha.report_status(uuid,text,text,bigint,text,text)'),
       ('gridha.report_submissions(uuid,gridha.submission_report[])'),
       ('gridha.report_submission(uuid,text,text,bigint,gridha.submission_outcome,text)'),
       ('gridha.report_submission(uuid,text,text,bigint,text,text)');

SELECT is((SELECT array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text)
             FROM pg_proc p
            WHERE p.pronamespace IN ('gridha'::regnamespace, 'gridha_internal'::regnamespace)
              AND NOT coalesce('search_path=pg_catalog, gridha, pg_temp' = ANY (p.proconfig), false)
              AND p.oid::regprocedure::text NOT IN (SELECT fn FROM cycle_functions)),
          ARRAY['gridha_internal.batches_guard_final()', 'gridha_internal.targets_check()'],
          'every function in schemas gridha and gridha_internal but the C triggers batches_guard_final and targets_check and the claim cycle''s C functions pins search_path = pg_catalog, gridha, pg_temp');

SELECT set_eq(
    $$SELECT p.oid::regprocedure::text, l.lanname::text, p.prosecdef, p.proconfig IS NULL
        FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
       WHERE p.oid::regprocedure::text IN (SELECT fn FROM cycle_functions)$$,
    $$SELECT fn, 'c'::text, true AS secdef, true AS unset FROM cycle_functions$$,
    'the claim cycle''s eight functions are C, SECURITY DEFINER, without a SET clause (their C code sets gridha''s search_path before its first statement)');

SELECT ok((SELECT l.lanname = 'c' AND NOT p.prosecdef AND p.prorettype = 'trigger'::regtype
                  AND p.proconfig IS NULL
             FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
            WHERE p.oid = 'gridha_internal.targets_check()'::regprocedure),
          'gridha_internal.targets_check is a C trigger function, not SECURITY DEFINER, without SET');

SELECT ok((SELECT l.lanname = 'c' AND NOT p.prosecdef AND p.prorettype = 'trigger'::regtype
                  AND p.proconfig IS NULL
             FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
            WHERE p.oid = 'gridha_internal.batches_guard_final()'::regprocedure),
          'gridha_internal.batches_guard_final is a C trigger function, not SECURITY DEFINER, without SET');

SELECT is((SELECT array_agg(p.oid::regprocedure::text ORDER BY 1)
             FROM pg_proc p
            WHERE p.pronamespace IN ('gridha'::regnamespace, 'gridha_internal'::regnamespace) AND p.prosecdef
              AND NOT coalesce('search_path=pg_catalog, gridha, pg_temp' = ANY (p.proconfig), false)
              AND p.oid::regprocedure::text NOT IN (SELECT fn FROM cycle_functions)),
          NULL,
          'no SECURITY DEFINER function of gridha runs with a caller-controlled search_path (the claim cycle''s set gridha''s in C)');

-- The API runs as its owner (callers need no table rights); so does the
-- enqueue trigger, through which a producer's INSERT writes service_claims.
SELECT set_eq(
    $$SELECT obj FROM tap_objects o JOIN pg_proc p ON p.oid = o.oid WHERE p.prosecdef$$,
    $$VALUES ('gridha.register_instance(text, text[])'),
             ('gridha.enqueue(text, text, bytea, text)'),
             ('gridha.renew_claims(uuid)'),
             ('gridha.acquire_claims(uuid, text[])'), ('gridha.claimed_batches(uuid, integer)'),
             ('gridha.next_batch(uuid)'), ('gridha.next_batches(uuid, integer)'),
             ('gridha.verify_batch(uuid, text, text, bigint)'),
             ('gridha.report_submission(uuid, text, text, bigint, text, text)'),
             ('gridha.pending_batches(uuid, integer)'),
             ('gridha.report_status(uuid, text, text, bigint, text, text)'),
             ('gridha.release_claims(uuid)'),
             ('gridha.start_worker(text)'), ('gridha.stop_worker(uuid)'),
             ('gridha.renew_lead(uuid, text, bigint)'), ('gridha.run_maintenance(uuid, text)'),
             ('gridha.create_id_sequence(text, bigint, integer)'), ('gridha.drop_id_sequence(text)'),
             ('gridha.reserve_ids(text, integer)'), ('gridha.next_id(text)'),
             ('gridha_internal.worker_register(uuid, text)'), ('gridha_internal.worker_orphans(uuid)'),
             ('gridha_internal.rate_wait_ms(uuid)'),
             ('gridha_internal.citus_service_targets(text[])'),
             ('gridha_internal.citus_worker_pending(uuid, integer)'),
             ('gridha.move_service(text, text)'), ('gridha.set_instance_owner(uuid, regrole)'),
             ('gridha.report_submission(uuid, text, text, bigint, gridha.submission_outcome, text)'),
             ('gridha.report_status(uuid, text, text, bigint, gridha.ledger_status, text)'),
             ('gridha.report_submissions(uuid, gridha.submission_report[])'),
             ('gridha.report_statuses(uuid, gridha.status_report[])'),
             ('gridha.lead(uuid, text)'), ('gridha.resign_lead(uuid, text)'),
             ('gridha.prune_batches(integer)'),
             ('gridha_internal.batches_before_insert()'), ('gridha_internal.targets_rate_changed()'),
             ('gridha_internal.id_sequences_changed()'), ('gridha_internal.targets_name_change()'),
             ('gridha_internal.targets_totals_follow()'),
             ('gridha.bucket_enqueue(integer, text, text, bytea)'),
             ('gridha.bucket_enqueue(integer, text, text, bytea, text)'),
             ('gridha_internal.targets_citus_mirror()'),
             ('gridha.bucket_acquire(integer, uuid, interval)'), ('gridha.bucket_takeover(integer, uuid, interval)'),
             ('gridha.bucket_renew(integer, uuid, bigint, interval)'), ('gridha.bucket_release(integer, uuid, bigint)'),
             ('gridha.bucket_next_batch(integer, uuid, bigint)'),
             ('gridha.bucket_report_submission(integer, uuid, text, text, bigint, text)'),
             ('gridha.bucket_report_status(integer, uuid, text, text, bigint, text)'),
             ('gridha.bucket_next_batches(integer, uuid, bigint, integer)'),
             ('gridha.bucket_report_submissions(integer, uuid, gridha.submission_report[])'),
             ('gridha.bucket_report_statuses(integer, uuid, gridha.status_report[])'),
             ('gridha_internal.citus_metrics()'), ('gridha_internal.citus_view_check()'),
             ('gridha_internal.citus_target_rates()')$$,
    'the SECURITY DEFINER functions are the API (the Citus mode''s per-bucket functions too, and what gridha.metrics and the views call in it), the enqueue trigger, the rate-state trigger, the trigger that removes the windows of deleted ID sequences, the one that locks the services before a target rename or delete, the one that moves a target''s totals with it and the one that writes a target to the Citus mode''s targets');

SELECT is((SELECT array_agg(DISTINCT g.obj ORDER BY g.obj)
             FROM tap_grants g JOIN tap_objects o ON o.obj = g.obj AND o.kind = 'function'
             JOIN pg_proc p ON p.oid = o.oid
            WHERE NOT p.prosecdef),
          ARRAY['gridha.bucket_of(text, integer)', 'gridha.expiry_settings()',
                'gridha.report_statuses(uuid, text[], text[], bigint[], text[], text[])',
                'gridha.report_submissions(uuid, text[], text[], bigint[], text[], text[])',
                'gridha.resign(uuid, text)', 'gridha.try_lead(uuid, text)', 'gridha_internal.citus_mode()',
                'gridha_internal.report_arrays_check(text[], text[], bigint[], text, text[], text[])',
                'gridha_internal.worker_limit_slots()', 'gridha_internal.worker_slots()'],
          'every granted function is SECURITY DEFINER but the six that read no table (bucket_of, citus_mode, expiry_settings, worker_limit_slots, worker_slots, report_arrays_check) and the 1.2 forms that call the API as the caller (try_lead, resign, the five-array reports)');

SELECT is((SELECT array_agg(p.oid::regprocedure::text ORDER BY 1)
             FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
            WHERE p.pronamespace IN ('gridha'::regnamespace, 'gridha_internal'::regnamespace) AND p.prosecdef
              AND NOT r.rolsuper),
          NULL,
          'every SECURITY DEFINER function of gridha is owned by a superuser (the extension''s installer)');

-- ===========================================================================
-- Part 2: behaviour
-- ===========================================================================

-- ---------------------------------------------------------------------------
-- Producer
-- ---------------------------------------------------------------------------

SELECT is(pg_temp.as_role_text('gridha_tap_producer',
              $$SELECT gridha.enqueue('tap-a', 'a1', '\x0a'::bytea)$$),
          '1', 'producer: enqueue works (seq 1 of a new service)');
SELECT lives_ok($$SELECT pg_temp.as_role('gridha_tap_producer',
                      $q$INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('tap-a', 'a2', '\x0b')$q$)$$,
                'producer: INSERT INTO gridha.batches (service_id, batch_id, payload) works');
SELECT is((SELECT seq FROM gridha.batches WHERE service_id = 'tap-a' AND batch_id = 'a2'), 2::bigint,
          'producer: the plain INSERT enqueued a2 at seq 2');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_producer',
                       $q$INSERT INTO gridha.batches (service_id, batch_id, payload, seq) VALUES ('tap-a', 'a9', NULL, 9)$q$)$$,
                 '42501', 'permission denied for table batches',
                 'producer: INSERT naming seq is refused');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_producer',
                       $q$INSERT INTO gridha.batches (service_id, batch_id, status) VALUES ('tap-a', 'a9', 'committed')$q$)$$,
                 '42501', 'permission denied for table batches',
                 'producer: INSERT naming status is refused');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_producer', 'SELECT * FROM gridha.targets')$$,
                 '42501', 'permission denied for table targets',
                 'producer: SELECT FROM gridha.targets (credentials) is refused');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_producer', 'SELECT * FROM gridha.claims')$$,
                 '42501', 'permission denied for view claims',
                 'producer: SELECT FROM gridha.claims is refused');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_producer', 'SELECT payload FROM gridha.batches')$$,
                 '42501', 'permission denied for table batches',
                 'producer: SELECT FROM gridha.batches is refused');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_producer',
                       'SELECT * FROM gridha.next_batch(gen_random_uuid())')$$,
                 '42501', 'permission denied for function next_batch',
                 'producer: next_batch is refused');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_producer',
                       $q$SELECT gridha.report_status(gen_random_uuid(), 'tap-a', 'a1', 1, 'committed')$q$)$$,
                 '42501', 'permission denied for function report_status',
                 'producer: report_status is refused');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_producer',
                       'SELECT gridha.release_claims(gen_random_uuid())')$$,
                 '42501', 'permission denied for function release_claims',
                 'producer: release_claims is refused');
SELECT columns_are('gridha', 'queue_progress',
                   ARRAY['service_id', 'target', 'head_batch_id', 'head_status', 'queued', 'in_flight',
                         'retrying', 'committed', 'invalid', 'oldest_queued_at'],
                   'producer: gridha.queue_progress has no claimant, epoch, instance or payload column');

-- ---------------------------------------------------------------------------
-- Submitter A: its instance A1 is handed tap-a's head
-- ---------------------------------------------------------------------------

SELECT ok(set_config('tap.a1', pg_temp.as_role_text('gridha_tap_sub_a',
                         $$SELECT gridha.register_instance('tap A1')$$), true) IS NOT NULL,
          'submitter A: register_instance works');
SELECT is((SELECT owner::text FROM gridha.instances WHERE instance_id = current_setting('tap.a1')::uuid),
          'gridha_tap_sub_a', 'submitter A: A1 belongs to the role that registered it');
SELECT is(pg_temp.as_role_text('gridha_tap_sub_a',
              format($$SELECT string_agg(service_id || ':' || epoch, ',') FROM gridha.acquire_claims(%L)$$,
                     current_setting('tap.a1'))),
          'tap-a:1', 'submitter A: acquire_claims(A1) takes tap-a at epoch 1');
SELECT is(pg_temp.as_role_text('gridha_tap_sub_a',
              format($$SELECT concat_ws('/', service_id, batch_id, encode(payload, 'hex'), epoch, attempts)
                         FROM gridha.next_batch(%L)$$, current_setting('tap.a1'))),
          'tap-a/a1/0a/1/1', 'submitter A: next_batch(A1) hands out a1 with its payload, epoch 1, attempts 1');
SELECT is(pg_temp.as_role_text('gridha_tap_sub_a',
              $$SELECT target || ':' || coalesce(request_headers::text, 'no headers') FROM gridha.targets
                 WHERE target = 'default'$$),
          'default:no headers', 'submitter A: reads gridha.targets, request_headers included');
SELECT is(pg_temp.as_role_text('gridha_tap_sub_a',
              $$SELECT service_id || ':' || target FROM gridha.service_claims WHERE service_id = 'tap-a'$$),
          'tap-a:default', 'submitter A: reads service_id and target of gridha.service_claims');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_sub_a', 'SELECT claimant FROM gridha.service_claims')$$,
                 '42501', 'permission denied for table service_claims',
                 'submitter A: SELECT claimant FROM gridha.service_claims is refused');
SELECT is(pg_temp.as_role_text('gridha_tap_sub_a',
              $$SELECT state || ':' || claimant FROM gridha.claims WHERE service_id = 'tap-a'$$),
          'held:' || current_setting('tap.a1'), 'submitter A: reads gridha.claims (tap-a held by A1)');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_sub_a',
                       $q$UPDATE gridha.targets SET submit_url = 'http://127.0.0.1:9/x/{batch_id}'$q$)$$,
                 '42501', 'permission denied for table targets',
                 'submitter A: UPDATE gridha.targets is refused');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_sub_a', $q$SET gridha.soft_expiry = '1s'$q$)$$,
                 '42501', NULL,
                 'submitter A: the claim timings (gridha.soft_expiry) are superuser-only');

-- The batch, its claim and A1, before submitter B tries anything.
CREATE FUNCTION pg_temp.a1_state() RETURNS text
LANGUAGE sql AS $$
    SELECT format('batch %s epoch %s attempts %s instance %s; claim claimant %s epoch %s',
                  b.status, b.epoch, b.attempts, b.instance_id, c.claimant, c.epoch)
      FROM gridha.batches b JOIN gridha.service_claims c USING (service_id)
     WHERE b.service_id = 'tap-a' AND b.batch_id = 'a1'
$$;

-- Everything the tables hold, as one hash.
CREATE FUNCTION pg_temp.snapshot() RETURNS text
LANGUAGE sql AS $$
    SELECT md5(concat_ws('#',
        (SELECT string_agg(b::text, '|' ORDER BY b.service_id, b.batch_id) FROM gridha.batches b),
        (SELECT string_agg(c::text, '|' ORDER BY c.service_id) FROM gridha.service_claims c),
        (SELECT string_agg(i::text, '|' ORDER BY i.instance_id) FROM gridha.instances i),
        (SELECT string_agg(l::text, '|' ORDER BY l.duty) FROM gridha.leases l),
        (SELECT string_agg(m::text, '|' ORDER BY m.duty, m.tick) FROM gridha.maintenance_ticks m)))
$$;

SELECT is(pg_temp.a1_state(),
          format('batch submitting epoch 1 attempts 1 instance %1$s; claim claimant %1$s epoch 1',
                 current_setting('tap.a1')),
          'before B: a1 is submitting under A1''s claim, epoch 1, attempt 1');
SELECT set_config('tap.snapshot', pg_temp.snapshot(), true) \g /dev/null

-- ---------------------------------------------------------------------------
-- Submitter B against A's instance: RG008 for every call that names it
-- ---------------------------------------------------------------------------

SELECT throws_ok(format('SELECT pg_temp.refused_as(%L, %L)', 'gridha_tap_sub_b', format(c.q, current_setting('tap.a1'))),
                 'RG008', format('instance %s belongs to role "gridha_tap_sub_a"', current_setting('tap.a1')),
                 format('submitter B: %s with A1 is refused (RG008)', c.call))
  FROM (VALUES
    (1,  'next_batch',         $$SELECT * FROM gridha.next_batch(%L)$$),
    (2,  'next_batches',       $$SELECT * FROM gridha.next_batches(%L, 5)$$),
    (3,  'report_submission',  $$SELECT gridha.report_submission(%L, 'tap-a', 'a1', 1, 'rejected', 'b')$$),
    (4,  'report_submissions', $$SELECT * FROM gridha.report_submissions(%L, '{tap-a}', '{a1}', '{1}', '{rejected}')$$),
    (5,  'report_status',      $$SELECT gridha.report_status(%L, 'tap-a', 'a1', 1, 'invalid')$$),
    (6,  'report_statuses',    $$SELECT * FROM gridha.report_statuses(%L, '{tap-a}', '{a1}', '{1}', '{invalid}')$$),
    (7,  'verify_batch',       $$SELECT gridha.verify_batch(%L, 'tap-a', 'a1', 1)$$),
    (8,  'claimed_batches',    $$SELECT * FROM gridha.claimed_batches(%L)$$),
    (9,  'pending_batches',    $$SELECT * FROM gridha.pending_batches(%L)$$),
    (10, 'renew_claims',       $$SELECT gridha.renew_claims(%L)$$),
    (11, 'acquire_claims',     $$SELECT * FROM gridha.acquire_claims(%L)$$),
    (12, 'acquire_claims(serves)', $$SELECT * FROM gridha.acquire_claims(%L, '{submit_url}')$$),
    (13, 'release_claims',     $$SELECT gridha.release_claims(%L)$$),
    (14, 'try_lead',           $$SELECT gridha.try_lead(%L)$$),
    (15, 'renew_lead',         $$SELECT gridha.renew_lead(%L, 'maintenance', 1)$$),
    (16, 'resign',             $$SELECT gridha.resign(%L)$$),
    (17, 'run_maintenance',    $$SELECT * FROM gridha.run_maintenance(%L)$$),
    (18, 'lead',               $$SELECT gridha.lead(%L)$$),
    (19, 'resign_lead',        $$SELECT gridha.resign_lead(%L)$$),
    (20, 'report_submission(outcome)', $$SELECT gridha.report_submission(%L, 'tap-a', 'a1', 1, 'rejected'::gridha.submission_outcome)$$),
    (21, 'report_status(ledger_status)', $$SELECT gridha.report_status(%L, 'tap-a', 'a1', 1, 'invalid'::gridha.ledger_status)$$),
    (22, 'report_submissions(rows)', $$SELECT * FROM gridha.report_submissions(%L, ARRAY[('tap-a', 'a1', 1, 'rejected', NULL)]::gridha.submission_report[])$$),
    (23, 'report_statuses(rows)', $$SELECT * FROM gridha.report_statuses(%L, ARRAY[('tap-a', 'a1', 1, 'invalid', NULL)]::gridha.status_report[])$$)
  ) AS c(ord, call, q)
 ORDER BY c.ord;

SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_sub_b', 'SELECT payload FROM gridha.batches')$$,
                 '42501', 'permission denied for table batches',
                 'submitter B: cannot read payloads (SELECT FROM gridha.batches is refused)');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_sub_b',
                       'SELECT gridha.stop_worker(gen_random_uuid())')$$,
                 '42501', 'permission denied for function stop_worker',
                 'submitter B: stop_worker is refused (an administrator''s call)');
SELECT throws_ok(format('SELECT pg_temp.refused_as(%L, %L)', 'gridha_tap_worker',
                        format('SELECT * FROM gridha.next_batch(%L)', current_setting('tap.a1'))),
                 'RG008', format('instance %s belongs to role "gridha_tap_sub_a"', current_setting('tap.a1')),
                 'worker role: next_batch with A1 is refused (RG008)');
SELECT throws_ok(format('SELECT pg_temp.refused_as(%L, %L)', 'gridha_tap_client',
                        format($$SELECT gridha.report_status(%L, 'tap-a', 'a1', 1, 'committed')$$,
                               current_setting('tap.a1'))),
                 'RG008', format('instance %s belongs to role "gridha_tap_sub_a"', current_setting('tap.a1')),
                 'client: report_status with A1 is refused (RG008)');

SELECT is(pg_temp.a1_state(),
          format('batch submitting epoch 1 attempts 1 instance %1$s; claim claimant %1$s epoch 1',
                 current_setting('tap.a1')),
          'after B: a1 and its claim are unchanged (status, epoch, attempts, instance, claimant)');
SELECT is(pg_temp.snapshot(), current_setting('tap.snapshot'),
          'after B: batches, claims, instances, leases and ticks are unchanged');

-- ---------------------------------------------------------------------------
-- A superuser may act for any instance; A1 is still A's
-- ---------------------------------------------------------------------------

SELECT is(gridha.renew_claims(current_setting('tap.a1')::uuid), 1,
          'superuser: renew_claims(A1) works (renews its one claim)');
SELECT is(gridha.verify_batch(current_setting('tap.a1')::uuid, 'tap-a', 'a1', 1), true,
          'superuser: verify_batch(A1) works');
SELECT is(pg_temp.as_role_text('gridha_tap_sub_a',
              format($$SELECT gridha.report_submission(%L, 'tap-a', 'a1', 1, 'accepted')$$,
                     current_setting('tap.a1'))),
          'pending', 'submitter A: report_submission(A1) still works: a1 pending');

-- ---------------------------------------------------------------------------
-- Producer's view of it: progress, no claimant
-- ---------------------------------------------------------------------------

SELECT is(pg_temp.as_role_text('gridha_tap_producer',
              $$SELECT concat_ws('/', service_id, head_batch_id, head_status, queued, in_flight)
                  FROM gridha.queue_progress WHERE service_id = 'tap-a'$$),
          'tap-a/a1/pending/1/1', 'producer: gridha.queue_progress shows tap-a''s head a1 pending, a2 queued');

-- ---------------------------------------------------------------------------
-- Submitter B with its own instance
-- ---------------------------------------------------------------------------

SELECT is(pg_temp.as_role_text('gridha_tap_producer',
              $$SELECT gridha.enqueue('tap-b', 'b1', '\x0c'::bytea)$$),
          '1', 'producer: enqueue of tap-b works');
SELECT ok(set_config('tap.b1', pg_temp.as_role_text('gridha_tap_sub_b',
                         $$SELECT gridha.register_instance('tap B1')$$), true) IS NOT NULL,
          'submitter B: register_instance works');
SELECT is(pg_temp.as_role_text('gridha_tap_sub_b',
              format($$SELECT concat_ws('/', service_id, batch_id, encode(payload, 'hex'), epoch, attempts)
                         FROM gridha.next_batch(%L)$$, current_setting('tap.b1'))),
          'tap-b/b1/0c/1/1', 'submitter B: next_batch(B1) hands out tap-b''s b1');
SELECT is(pg_temp.as_role_text('gridha_tap_sub_b',
              format($$SELECT gridha.report_submission(%L, 'tap-b', 'b1', 1, 'accepted')$$,
                     current_setting('tap.b1'))),
          'pending', 'submitter B: report_submission(B1) works: b1 pending');
SELECT is(pg_temp.as_role_text('gridha_tap_sub_b',
              format($$SELECT string_agg(batch_id || ':' || status, ',') FROM gridha.pending_batches(%L)$$,
                     current_setting('tap.b1'))),
          'b1:pending', 'submitter B: pending_batches(B1) lists b1 only, not A''s a1');

-- ---------------------------------------------------------------------------
-- An instance without an owner is nobody's until an administrator gives it
-- one (1.1 handed it to the first role that used it; 16_security has more)
-- ---------------------------------------------------------------------------

SET LOCAL tap.orphan = 'dddddddd-0000-0000-0000-00000000000d';
INSERT INTO gridha.instances (instance_id, label) VALUES (current_setting('tap.orphan')::uuid, 'tap orphan');

SELECT throws_ok(format('SELECT pg_temp.refused_as(%L, %L)', 'gridha_tap_sub_b',
                        format('SELECT * FROM gridha.next_batch(%L)', current_setting('tap.orphan'))),
                 'RG008', format('instance %s has no owner', current_setting('tap.orphan')),
                 'orphan: submitter B''s next_batch on an instance without owner is refused (RG008)');
SELECT is((SELECT owner::text FROM gridha.instances WHERE instance_id = current_setting('tap.orphan')::uuid),
          NULL, 'orphan: submitter B did not adopt it');
SELECT throws_ok(format('SELECT pg_temp.refused_as(%L, %L)', 'gridha_tap_sub_a',
                        format('SELECT * FROM gridha.next_batch(%L)', current_setting('tap.orphan'))),
                 'RG008', format('instance %s has no owner', current_setting('tap.orphan')),
                 'orphan: nor did submitter A (RG008)');

-- ---------------------------------------------------------------------------
-- Admin
-- ---------------------------------------------------------------------------

SELECT lives_ok($$SELECT pg_temp.as_role('gridha_tap_admin',
                      $q$UPDATE gridha.targets SET submit_url = 'http://127.0.0.1:9/b/{batch_id}' WHERE target = 'default'$q$)$$,
                'admin: UPDATE gridha.targets works');
SELECT is((SELECT submit_url FROM gridha.targets WHERE target = 'default'), 'http://127.0.0.1:9/b/{batch_id}',
          'admin: the default target''s submit_url was changed');
SELECT lives_ok($$SELECT pg_temp.as_role('gridha_tap_admin',
                      $q$INSERT INTO gridha.targets (target, submit_url) VALUES ('tap-target', 'http://127.0.0.1:9/t/{batch_id}')$q$)$$,
                'admin: INSERT INTO gridha.targets works');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_admin', 'SELECT * FROM gridha.next_batch(gen_random_uuid())')$$,
                 '42501', 'permission denied for function next_batch',
                 'admin: next_batch is refused');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_admin', 'SELECT payload FROM gridha.batches')$$,
                 '42501', 'permission denied for table batches',
                 'admin: SELECT FROM gridha.batches is refused');
SELECT is(pg_temp.as_role_text('gridha_tap_admin',
              $$SELECT string_agg(service_id || ':' || state, ',' ORDER BY service_id) FROM gridha.claims$$),
          'tap-a:held,tap-b:held', 'admin: reads gridha.claims');
SELECT is(pg_temp.as_role_text('gridha_tap_admin', 'SELECT count(*) FROM gridha.workers'), '0',
          'admin: reads gridha.workers (no worker running)');
SELECT lives_ok($$SELECT pg_temp.as_role('gridha_tap_admin',
                      $q$SELECT gridha.create_id_sequence('tap-ids', 100, 1)$q$)$$,
                'admin: create_id_sequence works');

-- ---------------------------------------------------------------------------
-- Producer: ids
-- ---------------------------------------------------------------------------

SELECT matches(pg_temp.as_role_text('gridha_tap_producer', $$SELECT gridha.next_id('tap-ids')$$),
               '^[1-9][0-9]*$', 'producer: next_id works');
SELECT is(pg_temp.as_role_text('gridha_tap_producer',
              $$SELECT name FROM gridha.id_sequence_status WHERE name = 'tap-ids'$$),
          'tap-ids', 'producer: reads gridha.id_sequence_status');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_producer', $q$SELECT gridha.drop_id_sequence('tap-ids')$q$)$$,
                 '42501', 'permission denied for function drop_id_sequence',
                 'producer: drop_id_sequence is refused');

-- ---------------------------------------------------------------------------
-- PUBLIC: a role with nothing gets nowhere
-- ---------------------------------------------------------------------------

SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_nobody',
                       $q$SELECT gridha.enqueue('tap-y', 'y1', NULL)$q$)$$,
                 '42501', 'permission denied for schema gridha',
                 'PUBLIC: enqueue is refused (no USAGE on schema gridha)');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_nobody', 'SELECT * FROM gridha.claims')$$,
                 '42501', 'permission denied for schema gridha',
                 'PUBLIC: SELECT FROM gridha.claims is refused');
SELECT throws_ok($$SELECT pg_temp.refused_as('gridha_tap_nobody',
                       $q$INSERT INTO gridha.batches (service_id, batch_id) VALUES ('tap-y', 'y1')$q$)$$,
                 '42501', 'permission denied for schema gridha',
                 'PUBLIC: INSERT INTO gridha.batches is refused');
SELECT is((SELECT count(*) FROM tap_calls WHERE label = 'nobody' AND state = '42501'),
          (SELECT count(*) FROM tap_objects WHERE kind = 'function'),
          'PUBLIC: calling any function of gridha is refused with 42501');

SELECT is((SELECT count(*) FROM gridha.batches WHERE service_id = 'tap-y'), 0::bigint,
          'the refused writes left no batch behind');

SELECT * FROM finish();
ROLLBACK;
