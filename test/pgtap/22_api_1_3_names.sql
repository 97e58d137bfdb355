-- 22_api_1_3_names.sql: issue 40, API 1.3, names and types.
--
--   report   report_status says status (not dlt_status) in both forms and
--            takes a detail, as report_statuses' arrays say statuses and
--            take details; 1.2's positional calls still work
--   vocab    the enum forms are the recommended ones: the text forms say
--            they are deprecated
--   attempts next_batch and next_batches return attempts only
--   types    states, health, kinds and outcomes are domains with their words
--   names    in_flight is a count of batches wherever a view says it;
--            has_in_flight, requests_in_flight and claims_held each mean
--            one thing
--
-- One transaction, rolled back.
BEGIN;
SELECT plan(30);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = off;
\o

CREATE TEMP TABLE ids AS SELECT gridha.register_instance('names a') AS a;
CREATE FUNCTION pg_temp.a() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT a FROM ids $$;

-- the type of a view's column, as format_type says it
CREATE FUNCTION pg_temp.col_type(rel text, col text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
     WHERE a.attrelid = rel::regclass AND a.attname = col AND NOT a.attisdropped
$$;

-- ---------------------------------------------------------------------------
-- report: status and detail (8)
-- ---------------------------------------------------------------------------

\o /dev/null
SELECT gridha.enqueue(s, s || '-1', '\x01') FROM unnest('{n1,n2,n3,n4,n5}'::text[]) AS s;
CREATE TEMP TABLE handed AS SELECT * FROM gridha.next_batches(pg_temp.a());
SELECT gridha.report_submission(pg_temp.a(), service_id, batch_id, epoch, 'accepted'::gridha.submission_outcome)
  FROM handed;
\o

SELECT is(gridha.report_status(pg_temp.a(), 'n1', 'n1-1', 1, status => 'valid'::gridha.ledger_status,
                               detail => 'block 7'),
          'valid'::gridha.batch_status,
          'report_status(..., status => gridha.ledger_status, detail => ...) in named notation');
SELECT is((SELECT detail FROM gridha.batches WHERE batch_id = 'n1-1'), 'block 7',
          'report_status (enum form) stores its detail on the batch');
SELECT is(gridha.report_status(pg_temp.a(), 'n2', 'n2-1', 1, status => 'VALID', detail => 'seen twice'),
          'valid'::gridha.batch_status,
          'report_status(..., status => text, detail => ...): the text form takes a detail too');
SELECT is((SELECT detail FROM gridha.batches WHERE batch_id = 'n2-1'), 'seen twice',
          'report_status (text form) stores its detail on the batch');
SELECT is(gridha.report_status(pg_temp.a(), 'n3', 'n3-1', 1, 'committed'),
          'committed'::gridha.batch_status,
          'a positional 1.2 call, without a detail, still works');
SELECT throws_ok($$SELECT gridha.report_status(pg_temp.a(), 'n4', 'n4-1', 1, dlt_status => 'valid'::gridha.ledger_status)$$,
                 '42883', NULL, 'the 1.2 parameter name dlt_status is gone (named calls with it fail: the upgrade notes say so)');
SELECT is((SELECT string_agg(status::text, ',') FROM gridha.report_statuses(pg_temp.a(), service_ids => '{n4}',
              batch_ids => '{n4-1}', epochs => '{1}', statuses => '{invalid}', details => '{"bad signature"}')),
          'invalid', 'report_statuses (arrays) names its words statuses and takes details');
SELECT is((SELECT detail FROM gridha.batches WHERE batch_id = 'n4-1'), 'bad signature',
          'report_statuses (arrays) stores each detail on its batch');

-- ---------------------------------------------------------------------------
-- vocab: the text forms are deprecated (2)
-- ---------------------------------------------------------------------------

SELECT ok(obj_description('gridha.report_status(uuid,text,text,bigint,text,text)'::regprocedure, 'pg_proc')
            LIKE 'deprecated since 1.3 (use report_status(uuid, text, text, bigint, gridha.ledger_status, text))%',
          'report_status with a text status says it is deprecated and what to use');
SELECT ok(obj_description('gridha.report_submission(uuid,text,text,bigint,text,text)'::regprocedure, 'pg_proc')
            LIKE 'deprecated since 1.3 (use report_submission(uuid, text, text, bigint, gridha.submission_outcome, text))%',
          'report_submission with a text outcome says it is deprecated and what to use');

-- ---------------------------------------------------------------------------
-- attempts (3)
-- ---------------------------------------------------------------------------

SELECT is(pg_get_function_result('gridha.next_batch(uuid)'::regprocedure),
          'TABLE(service_id text, batch_id text, payload bytea, epoch bigint, attempts integer)',
          'next_batch returns attempts, and no attempt beside it');
SELECT is(pg_get_function_result('gridha.next_batches(uuid,integer)'::regprocedure),
          'TABLE(service_id text, batch_id text, payload bytea, epoch bigint, attempts integer)',
          'next_batches returns attempts, and no attempt beside it');
SELECT is((SELECT string_agg(attempts::text, ',') FROM handed), '1,1,1,1,1',
          'attempts counts the hand-outs (1 at a first one)');

-- ---------------------------------------------------------------------------
-- types (11)
-- ---------------------------------------------------------------------------

SELECT is(pg_temp.col_type('gridha.claims', 'state'), 'gridha.claim_state', 'gridha.claims.state is a gridha.claim_state');
SELECT is(pg_temp.col_type('gridha.instance_health', 'health'), 'gridha.health_state',
          'gridha.instance_health.health is a gridha.health_state');
SELECT is(pg_temp.col_type('gridha.instance_health', 'kind'), 'gridha.instance_kind',
          'gridha.instance_health.kind is a gridha.instance_kind');
SELECT is(pg_temp.col_type('gridha.instances', 'kind'), 'gridha.instance_kind', 'gridha.instances.kind is a gridha.instance_kind');
SELECT is(pg_temp.col_type('gridha.leaders', 'state'), 'gridha.lease_state', 'gridha.leaders.state is a gridha.lease_state');
SELECT is(pg_temp.col_type('gridha.workers', 'state'), 'gridha.worker_state', 'gridha.workers.state is a gridha.worker_state');
SELECT is((SELECT format_type(t, NULL) FROM unnest((SELECT proallargtypes FROM pg_proc
             WHERE oid = 'gridha.run_maintenance(uuid,text)'::regprocedure)) WITH ORDINALITY u(t, n) WHERE n = 5),
          'gridha.maintenance_outcome', 'run_maintenance''s outcome is a gridha.maintenance_outcome');
SELECT is((SELECT string_agg(DISTINCT state, ',') FROM gridha.claims), 'held',
          'gridha.claims says held of the claims the instance holds');
SELECT is((SELECT health || '/' || kind FROM gridha.instance_health WHERE instance_id = pg_temp.a()), 'healthy/external',
          'gridha.instance_health says healthy/external of the instance');
SELECT throws_ok($$SELECT 'taken'::gridha.claim_state$$, '23514', NULL,
                 'a word gridha.claims never says is not a gridha.claim_state');
SELECT throws_ok($$UPDATE gridha.instances SET kind = 'robot' WHERE instance_id = pg_temp.a()$$, '23514', NULL,
                 'gridha.instances.kind refuses a kind that does not exist');

-- ---------------------------------------------------------------------------
-- names (6)
-- ---------------------------------------------------------------------------

SELECT is((SELECT string_agg(DISTINCT format_type(a.atttypid, a.atttypmod), ',')
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            WHERE c.relnamespace = 'gridha'::regnamespace AND c.relkind = 'v' AND a.attname = 'in_flight'),
          'bigint', 'every view column named in_flight is a count of batches (bigint)');
SELECT is(pg_temp.col_type('gridha.claims', 'has_in_flight'), 'boolean',
          'gridha.claims.has_in_flight: whether the head is handed out');
SELECT is(pg_temp.col_type('gridha.workers', 'requests_in_flight') || ',' ||
          pg_temp.col_type('gridha.worker_limits', 'requests_in_flight'), 'integer,integer',
          'gridha.workers and gridha.worker_limits count HTTP requests in requests_in_flight');
SELECT is(pg_temp.col_type('gridha.instance_health', 'claims_held'), 'bigint',
          'gridha.instance_health.claims_held counts the claims an instance holds, as gridha.metrics.claims_held does');
SELECT is((SELECT count(*) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            WHERE c.relnamespace = 'gridha'::regnamespace AND c.relkind = 'v'
              AND a.attname IN ('held', 'claims', 'dlt_status')), 0::bigint,
          'no view column is named held, claims or dlt_status');
SELECT is((SELECT claims_held FROM gridha.instance_health WHERE instance_id = pg_temp.a()), 5::bigint,
          'gridha.instance_health.claims_held is the number of claims held');

SELECT * FROM finish();
ROLLBACK;
