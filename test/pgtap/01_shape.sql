-- 01_shape.sql: the SQL API's shape, exactly as DESIGN.md section 5 writes
-- it: functions with their argument types, names, defaults and results, the
-- batch_status enum, the contract tables and columns, the views and the
-- settings with their defaults.
--
-- start_worker/stop_worker and the worker settings are contract too; the
-- file runs with gridha preloaded, so gridha.workers and gridha.database
-- exist.
BEGIN;
SELECT plan(169);

-- The contract's API, one row per function. args: the argument types that
-- identify it; arguments: pg_get_function_arguments (names and defaults);
-- result: pg_get_function_result; returns: pgTAP's function_returns form.
CREATE TEMP TABLE api (
    ord       int,
    name      text,
    args      name[],
    arguments text,
    result    text,
    returns   text,
    worker    boolean DEFAULT false
);
INSERT INTO api (ord, name, args, arguments, result, returns, worker) VALUES
 (1, 'register_instance', '{text,text[]}',
  'label text DEFAULT NULL::text, serves text[] DEFAULT NULL::text[]',
  'uuid', 'uuid', false),
 (2, 'enqueue', '{text,text,bytea,text}',
  'service_id text, batch_id text, payload bytea, target text DEFAULT NULL::text',
  'bigint', 'bigint', false),
 (3, 'renew_claims', '{uuid}',
  'instance_id uuid',
  'integer', 'integer', false),
 (4, 'acquire_claims', '{uuid,text[]}',
  'instance_id uuid, serves text[] DEFAULT NULL::text[]',
  'TABLE(service_id text, epoch bigint)', 'setof record', false),
 (5, 'claimed_batches', '{uuid,integer}',
  'instance_id uuid, max_batches integer DEFAULT 100',
  'TABLE(service_id text, batch_id text, seq bigint, status gridha.batch_status, epoch bigint)',
  'setof record', false),
 (6, 'next_batch', '{uuid}',
  'instance_id uuid',
  'TABLE(service_id text, batch_id text, payload bytea, epoch bigint, attempts integer)',
  'setof record', false),
 (7, 'next_batches', '{uuid,integer}',
  'instance_id uuid, max_batches integer DEFAULT 100',
  'TABLE(service_id text, batch_id text, payload bytea, epoch bigint, attempts integer)',
  'setof record', false),
 (8, 'verify_batch', '{uuid,text,text,bigint}',
  'instance_id uuid, service_id text, batch_id text, epoch bigint',
  'boolean', 'boolean', false),
 (9, 'report_submission', '{uuid,text,text,bigint,text,text}',
  'instance_id uuid, service_id text, batch_id text, epoch bigint, outcome text, detail text DEFAULT NULL::text',
  'gridha.batch_status', 'gridha.batch_status', false),
 (10, 'pending_batches', '{uuid,integer}',
  'instance_id uuid, max_batches integer DEFAULT 100',
  'TABLE(service_id text, batch_id text, status gridha.batch_status, epoch bigint, submitted_at timestamp with time zone)',
  'setof record', false),
 (11, 'report_status', '{uuid,text,text,bigint,text,text}',
  'instance_id uuid, service_id text, batch_id text, epoch bigint, status text, detail text DEFAULT NULL::text',
  'gridha.batch_status', 'gridha.batch_status', false),
 (12, 'release_claims', '{uuid}',
  'instance_id uuid',
  'integer', 'integer', false),
 (15, 'report_submissions', '{uuid,text[],text[],bigint[],text[],text[]}',
  'instance_id uuid, service_ids text[], batch_ids text[], epochs bigint[], outcomes text[], details text[] DEFAULT NULL::text[]',
  'TABLE(service_id text, batch_id text, status gridha.batch_status, sqlstate text, message text)',
  'setof record', false),
 (16, 'report_statuses', '{uuid,text[],text[],bigint[],text[],text[]}',
  'instance_id uuid, service_ids text[], batch_ids text[], epochs bigint[], statuses text[], details text[] DEFAULT NULL::text[]',
  'TABLE(service_id text, batch_id text, status gridha.batch_status, sqlstate text, message text)',
  'setof record', false),
 (13, 'start_worker', '{text}',
  'label text DEFAULT NULL::text',
  'uuid', 'uuid', true),
 (14, 'stop_worker', '{uuid}',
  'instance_id uuid',
  'boolean', 'boolean', true);

-- to_regprocedure, not ::regprocedure: a missing function must fail its
-- assertion, not abort the file.
CREATE FUNCTION pg_temp.api_proc(a api) RETURNS regprocedure
LANGUAGE sql STABLE AS $$
    SELECT to_regprocedure(format('gridha.%I(%s)', a.name, array_to_string(a.args, ',')))
$$;

-- ---------------------------------------------------------------------------
-- Schema and enum
-- ---------------------------------------------------------------------------

SELECT has_schema('gridha', 'schema gridha exists');
SELECT has_extension('gridha', 'extension gridha is installed');
SELECT has_enum('gridha', 'batch_status', 'enum gridha.batch_status exists');
SELECT enum_has_labels('gridha', 'batch_status',
    ARRAY['queued', 'submitting', 'pending', 'valid', 'delayed', 'unknown', 'committed', 'invalid'],
    'gridha.batch_status has exactly the lifecycle labels, in order');

-- ---------------------------------------------------------------------------
-- API functions (14 of them, 5 assertions each)
-- ---------------------------------------------------------------------------

SELECT has_function('gridha', a.name, a.args,
           format('gridha.%s(%s) exists', a.name, array_to_string(a.args, ', ')))
  FROM api a WHERE NOT a.worker ORDER BY a.ord;

SELECT function_returns('gridha', a.name, a.args, a.returns,
           format('gridha.%s returns %s', a.name, a.returns))
  FROM api a WHERE NOT a.worker ORDER BY a.ord;

SELECT is(pg_get_function_arguments(pg_temp.api_proc(a)), a.arguments,
           format('gridha.%s arguments are: %s', a.name, a.arguments))
  FROM api a WHERE NOT a.worker ORDER BY a.ord;

SELECT is(pg_get_function_result(pg_temp.api_proc(a)), a.result,
           format('gridha.%s result is: %s', a.name, a.result))
  FROM api a WHERE NOT a.worker ORDER BY a.ord;

SELECT is((SELECT count(*) FROM pg_proc p
            WHERE p.oid = pg_temp.api_proc(a) AND p.proretset = (a.result LIKE 'TABLE(%')),
          1::bigint,
          format('gridha.%s %s a set', a.name,
                 CASE WHEN a.result LIKE 'TABLE(%' THEN 'returns' ELSE 'does not return' END))
  FROM api a WHERE NOT a.worker ORDER BY a.ord;

SELECT is((SELECT p.prorows FROM pg_proc p WHERE p.oid = 'gridha.next_batch(uuid)'::regprocedure),
          1::real, 'gridha.next_batch is planned as 0 or 1 row');

-- Background-worker functions (contract).

SELECT has_function('gridha', a.name, a.args,
           format('gridha.%s(%s) exists', a.name, array_to_string(a.args, ', ')))
  FROM api a WHERE a.worker ORDER BY a.ord;

SELECT is(pg_get_function_result(pg_temp.api_proc(a)), a.result,
           format('gridha.%s result is: %s', a.name, a.result))
  FROM api a WHERE a.worker ORDER BY a.ord;

SELECT is(pg_get_function_arguments(pg_temp.api_proc(a)), a.arguments,
           format('gridha.%s arguments are: %s', a.name, a.arguments))
  FROM api a WHERE a.worker ORDER BY a.ord;

SELECT ok(coalesce((SELECT p.prosecdef FROM pg_proc p WHERE p.oid = pg_temp.api_proc(a)), false),
           format('gridha.%s is SECURITY DEFINER', a.name))
  FROM api a WHERE a.worker ORDER BY a.ord;

-- ---------------------------------------------------------------------------
-- Contract tables and columns
-- ---------------------------------------------------------------------------

SELECT has_table('gridha', 'service_claims', 'table gridha.service_claims exists');
SELECT has_table('gridha', 'batches', 'table gridha.batches exists');
SELECT has_table('gridha', 'targets', 'table gridha.targets exists');
SELECT has_table('gridha', 'instances', 'table gridha.instances exists');

CREATE TEMP TABLE contract_columns (ord serial, tab text, col text, typ text);
INSERT INTO contract_columns (tab, col, typ) VALUES
 ('service_claims', 'service_id',      'text'),
 ('service_claims', 'target',          'text'),
 ('service_claims', 'claimant',        'uuid'),
 ('service_claims', 'epoch',           'bigint'),
 ('service_claims', 'soft_expiry',     'timestamp with time zone'),
 ('service_claims', 'hard_expiry',     'timestamp with time zone'),
 ('batches',        'service_id',      'text'),
 ('batches',        'batch_id',        'text'),
 ('batches',        'seq',             'bigint'),
 ('batches',        'payload',         'bytea'),
 ('batches',        'status',          'gridha.batch_status'),
 ('batches',        'created_at',      'timestamp with time zone'),
 ('batches',        'epoch',           'bigint'),
 ('batches',        'attempts',        'integer'),
 ('batches',        'not_before',      'timestamp with time zone'),
 ('targets',        'target',          'text'),
 ('targets',        'submit_url',      'text'),
 ('targets',        'status_url',      'text'),
 ('targets',        'submit_function', 'text'),
 ('targets',        'rate_interval',   'interval'),
 ('targets',        'rate_burst',      'integer'),
 ('instances',      'instance_id',     'uuid'),
 ('instances',      'label',           'text'),
 ('instances',      'kind',            'gridha.instance_kind'),
 ('instances',      'last_seen_at',    'timestamp with time zone');

SELECT has_column('gridha', c.tab, c.col, format('gridha.%s has column %s', c.tab, c.col))
  FROM contract_columns c ORDER BY c.ord;

-- format_type qualifies gridha.batch_status whatever the search_path is,
-- because the column is compared in the form format_type gives.
SELECT is((SELECT format_type(a.atttypid, a.atttypmod)
             FROM pg_attribute a
            WHERE a.attrelid = to_regclass('gridha.' || c.tab)
              AND a.attname = c.col AND NOT a.attisdropped),
          c.typ,
          format('gridha.%s.%s is %s', c.tab, c.col, c.typ))
  FROM contract_columns c ORDER BY c.ord;

SELECT col_type_is('gridha', 'batches', 'status', 'gridha', 'batch_status',
                   'gridha.batches.status is gridha.batch_status (pgTAP col_type_is)');
SELECT col_not_null('gridha', 'batches', 'status', 'gridha.batches.status is NOT NULL');

SELECT col_is_pk('gridha', 'batches', ARRAY['service_id', 'batch_id'],
                 'primary key of gridha.batches is (service_id, batch_id)');
SELECT col_is_pk('gridha', 'service_claims', 'service_id',
                 'primary key of gridha.service_claims is service_id');
SELECT col_is_pk('gridha', 'targets', 'target', 'primary key of gridha.targets is target');
SELECT col_is_pk('gridha', 'instances', 'instance_id',
                 'primary key of gridha.instances is instance_id');

SELECT results_eq($$SELECT target, submit_url, status_url, submit_function::text FROM gridha.targets$$,
                  $$VALUES ('default'::text, NULL::text, NULL::text, NULL::text)$$,
                  'CREATE EXTENSION leaves exactly one target, default, unconfigured');

-- ---------------------------------------------------------------------------
-- Views for operators
-- ---------------------------------------------------------------------------

SELECT has_view('gridha', 'claims', 'view gridha.claims exists');
SELECT has_view('gridha', 'instance_health', 'view gridha.instance_health exists');
SELECT has_view('gridha', 'service_queues', 'view gridha.service_queues exists');
SELECT has_column('gridha', 'claims', 'state', 'gridha.claims has column state');
SELECT has_column('gridha', 'claims', 'claimant', 'gridha.claims has column claimant');
SELECT has_column('gridha', 'claims', 'epoch', 'gridha.claims has column epoch');
SELECT has_column('gridha', 'instance_health', 'instance_id', 'gridha.instance_health has column instance_id');
SELECT has_column('gridha', 'instance_health', 'health', 'gridha.instance_health has column health');
SELECT has_column('gridha', 'service_queues', 'service_id', 'gridha.service_queues has column service_id');

-- ---------------------------------------------------------------------------
-- Settings: defined once the library is loaded by a first gridha call
-- ---------------------------------------------------------------------------

SELECT isnt(gridha.expiry_settings(), NULL, 'gridha.expiry_settings() loads the library');

SELECT is(current_setting('gridha.soft_expiry'), '30s', 'gridha.soft_expiry defaults to 30s');
SELECT is(current_setting('gridha.hard_expiry'), '3min', 'gridha.hard_expiry defaults to 3min');
SELECT is(current_setting('gridha.renew_interval'), '10s', 'gridha.renew_interval defaults to 10s');
SELECT is(current_setting('gridha.balance_claims'), 'on', 'gridha.balance_claims defaults to on');

SELECT results_eq(
    $$SELECT name, context, unit, boot_val FROM pg_settings
       WHERE name IN ('gridha.soft_expiry', 'gridha.hard_expiry', 'gridha.renew_interval', 'gridha.balance_claims')
       ORDER BY name$$,
    $$VALUES ('gridha.balance_claims'::text, 'superuser'::text, NULL::text, 'on'::text),
             ('gridha.hard_expiry', 'superuser', 'ms', '180000'),
             ('gridha.renew_interval', 'superuser', 'ms', '10000'),
             ('gridha.soft_expiry', 'superuser', 'ms', '30000')$$,
    'the claim settings are superuser-settable, in milliseconds, with the documented boot values');

SELECT results_eq($$SELECT soft_expiry, hard_expiry, renew_interval FROM gridha.expiry_settings()$$,
                  $$VALUES (interval '30 seconds', interval '3 minutes', interval '10 seconds')$$,
                  'gridha.expiry_settings() shows the defaults as intervals');

SET LOCAL gridha.soft_expiry = '2s';
SET LOCAL gridha.hard_expiry = '5s';
SET LOCAL gridha.renew_interval = '500ms';
SELECT results_eq($$SELECT soft_expiry, hard_expiry, renew_interval FROM gridha.expiry_settings()$$,
                  $$VALUES (interval '2 seconds', interval '5 seconds', interval '500 milliseconds')$$,
                  'the settings change with SET, no restart');

SET LOCAL gridha.soft_expiry = '2s';
SET LOCAL gridha.hard_expiry = '1s';
SET LOCAL gridha.renew_interval = '10s';
SELECT results_eq($$SELECT soft_expiry, hard_expiry, renew_interval FROM gridha.expiry_settings()$$,
                  $$VALUES (interval '2 seconds', interval '2 seconds', interval '1 second')$$,
                  'inconsistent settings are repaired: hard_expiry never below soft_expiry, renew_interval below it (half)');
RESET gridha.soft_expiry;
RESET gridha.hard_expiry;
RESET gridha.renew_interval;

SELECT throws_ok($$SET gridha.no_such_setting = 1$$, '42602', NULL,
                 'the gridha prefix is reserved: an unknown gridha.* setting is refused');

-- Worker settings (contract; gridha.workers and gridha.database exist with preload).
SELECT is(current_setting('gridha.workers', true), '0', 'gridha.workers defaults to 0');
SELECT is(current_setting('gridha.naptime', true), '1s', 'gridha.naptime defaults to 1s');
SELECT is(current_setting('gridha.submit_timeout', true), '15s', 'gridha.submit_timeout defaults to 15s');
SELECT isnt(current_setting('gridha.database', true), NULL, 'gridha.database exists');

-- The finality guard on every hand-out and report: a row trigger after
-- UPDATE, with no WHEN clause (a WHEN is read back from its stored text by
-- every UPDATE statement on the table; the C function tests the status).
SELECT trigger_is('gridha', 'batches', 'batches_final', 'gridha_internal', 'batches_guard_final',
                  'batches_final calls gridha_internal.batches_guard_final');
SELECT is((SELECT format('%s %s', pg_get_triggerdef(t.oid) ~ ' AFTER UPDATE OF .* FOR EACH ROW EXECUTE',
                         t.tgqual IS NULL)
             FROM pg_trigger t
            WHERE t.tgrelid = 'gridha.batches'::regclass AND t.tgname = 'batches_final'),
          't t',
          'batches_final is an AFTER UPDATE row trigger without a WHEN clause');

SELECT * FROM finish();
ROLLBACK;
