-- 10_targets_ids.sql: what gridha 1.1 checks when something is created or
-- configured, and what instances declare they can serve.
--
--   ids         a new service, batch, target, id sequence or lead role has
--               an id of at most 512 bytes (22023); ids stored before keep
--               working
--   headers     request_headers is a JSON object of header lines a ledger
--               can be sent (RG007)
--   reject      reject_codes holds HTTP codes (RG007)
--   serves      the kinds an instance declares are known words (22023);
--               it claims only services whose target it can serve, and
--               hands back those it no longer can
--   windows     an id sequence's windows go with its row when it is
--               deleted or truncated by hand; id_windows has no foreign
--               key (its key-share locks broke concurrent reservations on
--               PostgreSQL 17)
--
-- One transaction, rolled back.
BEGIN;
SELECT plan(39);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = off;
\o

CREATE FUNCTION pg_temp.sqlstate_of(q text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    st text;
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE;
    RETURN st;
END
$$;

-- ---------------------------------------------------------------------------
-- ids: at most 512 bytes when created
-- ---------------------------------------------------------------------------

SELECT is(pg_temp.sqlstate_of(format($$SELECT gridha.enqueue(%L, 'b', '\x00')$$, repeat('s', 512))),
          'no error', 'a service id of 512 bytes is accepted');
SELECT is(pg_temp.sqlstate_of(format($$SELECT gridha.enqueue(%L, 'b', '\x00')$$, repeat('é', 257))),
          '22023', 'a service id of 514 bytes (257 two-byte characters) is refused (22023)');
SELECT throws_ok(format($$SELECT gridha.enqueue('s', %L, '\x00')$$, repeat('b', 513)),
          '22023', 'batch_id is too long',
          'a batch id of 513 bytes is refused, naming the argument');
SELECT is(pg_temp.sqlstate_of(format($$SELECT gridha.enqueue(%L, 'b', '\x00')$$, repeat('s', 1048576))),
          '22023', 'a 1 MB service id is refused (22023), not left to the index');
SELECT is(pg_temp.sqlstate_of(format($$INSERT INTO gridha.batches (service_id, batch_id) VALUES (%L, 'b')$$,
                                     repeat('s', 513))),
          '22023', 'an INSERT into gridha.batches with a 513-byte service id is refused too');
SELECT is(pg_temp.sqlstate_of(format($$INSERT INTO gridha.targets (target) VALUES (%L)$$, repeat('t', 513))),
          '22023', 'a target name of 513 bytes is refused');
SELECT is(pg_temp.sqlstate_of(format($$SELECT gridha.create_id_sequence(%L, 10, 1)$$, repeat('q', 513))),
          '22023', 'an id sequence name of 513 bytes is refused');
SELECT is(pg_temp.sqlstate_of(format($$SELECT gridha.try_lead(gen_random_uuid(), %L)$$, repeat('r', 513))),
          '22023', 'a lead role of 513 bytes is refused');
SELECT is((SELECT count(*) FROM gridha.batches WHERE length(service_id) > 512 OR length(batch_id) > 512),
          0::bigint, 'no refused id was stored');

-- A batch restored with its place (a dump of a database that took longer
-- ids before the limit) keeps it, and ids stored before are still looked up.
INSERT INTO gridha.service_claims (service_id, head_seq, tail_seq, ready_at)
VALUES (repeat('o', 600), 1, 1, now());
INSERT INTO gridha.batches (service_id, batch_id, seq, payload, status, created_at, attempts)
VALUES (repeat('o', 600), 'old', 1, '\x00', 'queued', now(), 0);
SELECT is((SELECT status::text FROM gridha.batches WHERE batch_id = 'old'), 'queued',
          'a restored row (seq given) with a 600-byte service id is kept as it was');
SELECT is(pg_temp.sqlstate_of(format($$SELECT gridha.verify_batch(gen_random_uuid(), %L, 'old', 1)$$, repeat('o', 600))),
          'no error', 'a stored 600-byte id can still be named in a call that only looks it up');

-- ---------------------------------------------------------------------------
-- request_headers
-- ---------------------------------------------------------------------------

SELECT is(pg_temp.sqlstate_of(q), 'RG007', what)
  FROM (VALUES
    ($$INSERT INTO gridha.targets (target, submit_url, request_headers)
       VALUES ('h1', 'http://127.0.0.1:1/{service_id}/{batch_id}', '["Authorization: x"]')$$,
     'request_headers as a JSON array is refused (RG007)'),
    ($$INSERT INTO gridha.targets (target, submit_url, request_headers)
       VALUES ('h1', 'http://127.0.0.1:1/{service_id}/{batch_id}', '{"X-Count": 3}')$$,
     'a header whose value is not a string is refused'),
    ($$INSERT INTO gridha.targets (target, submit_url, request_headers)
       VALUES ('h1', 'http://127.0.0.1:1/{service_id}/{batch_id}', '{"Authorization": "Bearer a\r\nX-Evil: 1"}')$$,
     'a value with CR LF (a second header smuggled in) is refused'),
    ($$INSERT INTO gridha.targets (target, submit_url, request_headers)
       VALUES ('h1', 'http://127.0.0.1:1/{service_id}/{batch_id}', '{"Bad Name": "x"}')$$,
     'a header name with a space is refused'),
    ($$INSERT INTO gridha.targets (target, submit_url, request_headers)
       VALUES ('h1', 'http://127.0.0.1:1/{service_id}/{batch_id}', '{"": "x"}')$$,
     'an empty header name is refused'),
    ($$UPDATE gridha.targets SET request_headers = '"Authorization: x"' WHERE target = 'default'$$,
     'an UPDATE to a JSON string is refused too')
  ) AS refusals(q, what);

SELECT lives_ok(
    $$INSERT INTO gridha.targets (target, submit_url, request_headers)
      VALUES ('h2', 'http://127.0.0.1:1/{service_id}/{batch_id}',
              '{"Authorization": "Bearer abc.def", "X-Tenant": "acme"}')$$,
    'an object of string headers is accepted');
SELECT throws_like(
    $$INSERT INTO gridha.targets (target, submit_url, request_headers)
       VALUES ('h3', 'http://127.0.0.1:1/{service_id}/{batch_id}', '{"Authorization": 42}')$$,
    '%"Authorization"%not a string%',
    'the refusal names the header, never its value');

-- ---------------------------------------------------------------------------
-- reject_codes
-- ---------------------------------------------------------------------------

SELECT is((SELECT reject_codes FROM gridha.targets WHERE target = 'h2'), '{400,422}'::int[],
          'reject_codes defaults to 400 and 422');
SELECT is(pg_temp.sqlstate_of(q), 'RG007', what)
  FROM (VALUES
    ($$UPDATE gridha.targets SET reject_codes = '{99}' WHERE target = 'h2'$$, 'a reject code below 100 is refused (RG007)'),
    ($$UPDATE gridha.targets SET reject_codes = '{600}' WHERE target = 'h2'$$, 'a reject code above 599 is refused'),
    ($$UPDATE gridha.targets SET reject_codes = '{400,NULL}' WHERE target = 'h2'$$, 'a NULL reject code is refused'),
    ($$UPDATE gridha.targets SET reject_codes = '{{400},{422}}' WHERE target = 'h2'$$, 'a two-dimensional list is refused')
  ) AS refusals(q, what);
SELECT is(pg_temp.sqlstate_of($$UPDATE gridha.targets SET reject_codes = NULL WHERE target = 'h2'$$),
          '23502', 'reject_codes cannot be NULL');
SELECT lives_ok($$UPDATE gridha.targets SET reject_codes = '{400,404,422}' WHERE target = 'h2'$$,
                'a target may name its own rejecting codes');

-- ---------------------------------------------------------------------------
-- serves
-- ---------------------------------------------------------------------------

SELECT throws_ok($$SELECT gridha.register_instance('x', '{submit_url,carrier_pigeon}')$$,
                 '22023', 'unknown target kind "carrier_pigeon"',
                 'an unknown kind is refused (22023), naming it');
SELECT throws_ok($$SELECT gridha.register_instance('x', ARRAY['submit_url', NULL])$$,
                 '22023', 'serves must not contain NULL',
                 'a NULL kind is refused');

CREATE FUNCTION pg_temp.fn_submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT 'accepted' $$;
CREATE FUNCTION pg_temp.fn_status(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $$ SELECT b, 'COMMITTED' FROM unnest($1) b $$;
INSERT INTO gridha.targets (target, submit_url, status_url) VALUES
    ('web', 'http://127.0.0.1:1/{service_id}/{batch_id}', 'http://127.0.0.1:1/s?id={batch_ids}');
INSERT INTO gridha.targets (target, submit_function, status_function) VALUES
    ('db', 'pg_temp.fn_submit(text,text,bytea,bigint)', 'pg_temp.fn_status(text[])');

TRUNCATE gridha.batches, gridha.service_claims;
\o /dev/null
SELECT gridha.enqueue('w1', 'x', '\x00', 'web');
SELECT gridha.enqueue('w2', 'x', '\x00', 'web');
SELECT gridha.enqueue('d1', 'x', '\x00', 'db');
\o

CREATE TEMP TABLE inst AS SELECT gridha.register_instance('url only', '{submit_url,status_url}') AS id;
SELECT is((SELECT serves FROM gridha.instances WHERE instance_id = (SELECT id FROM inst)),
          '{submit_url,status_url}'::text[], 'the declared kinds are recorded on the instance');
SELECT results_eq(
    $$SELECT service_id FROM gridha.acquire_claims((SELECT id FROM inst), '{submit_url,status_url}') ORDER BY 1$$,
    $$VALUES ('w1'::text), ('w2')$$,
    'an instance that serves URLs only claims the two URL services, not the function one');
SELECT results_eq(
    $$SELECT service_id FROM gridha.service_claims WHERE claimant = (SELECT id FROM inst) ORDER BY 1$$,
    $$VALUES ('w1'::text), ('w2')$$,
    'it holds w1 and w2');

-- w2 moves to the function target (an administrator's move_service): the
-- URL-only instance hands it back on its next claim cycle, and never hands
-- its batch out.
\o /dev/null
SELECT gridha.move_service('w2', 'db');
SELECT gridha.enqueue('w2', 'y', '\x00', 'db');
\o
SELECT is_empty(
    $$SELECT 1 FROM gridha.next_batches((SELECT id FROM inst), 10) WHERE service_id = 'w2'$$,
    'the URL-only instance does not hand out a batch of a service whose target became a function');
\o /dev/null
SELECT gridha.acquire_claims((SELECT id FROM inst), '{submit_url,status_url}');
\o
SELECT results_eq(
    $$SELECT service_id FROM gridha.service_claims WHERE claimant = (SELECT id FROM inst) ORDER BY 1$$,
    $$VALUES ('w1'::text)$$,
    'and releases it on its next claim cycle');

-- An instance that declares everything takes the rest.
CREATE TEMP TABLE inst2 AS SELECT gridha.register_instance('everything') AS id;
SELECT results_eq(
    $$SELECT service_id FROM gridha.acquire_claims((SELECT id FROM inst2)) ORDER BY 1$$,
    $$VALUES ('d1'::text), ('w2')$$,
    'an instance that declared nothing serves every kind and takes d1 and w2');

-- Windows go with their sequence's row, deleted or truncated by hand.
\o /dev/null
SELECT gridha.create_id_sequence('win_a', 100, 2);
SELECT gridha.create_id_sequence('win_b', 100, 2);
\o
SELECT is_empty(
    $$SELECT 1 FROM pg_catalog.pg_constraint
       WHERE conrelid = 'gridha.id_windows'::regclass AND contype = 'f'$$,
    'id_windows has no foreign key');
-- by a role an administrator let delete sequence rows, and nothing more
CREATE ROLE gridha_tap_seq_operator NOLOGIN;
GRANT USAGE ON SCHEMA gridha TO gridha_tap_seq_operator;
GRANT SELECT, DELETE ON gridha.id_sequences TO gridha_tap_seq_operator;
SELECT ok(NOT has_table_privilege('gridha_tap_seq_operator', 'gridha.id_windows', 'SELECT, DELETE'),
          'the operator role has no right on id_windows');
SET LOCAL ROLE gridha_tap_seq_operator;
DELETE FROM gridha.id_sequences WHERE name = 'win_a';
RESET ROLE;
SELECT is(
    (SELECT count(*)::int FROM gridha.id_windows WHERE name = 'win_a'), 0,
    'deleting a sequence row by hand removes its windows (the trigger runs as the owner)');
SELECT is(
    (SELECT count(*)::int FROM gridha.id_windows WHERE name = 'win_b'), 2,
    'and leaves the windows of the other sequence');
TRUNCATE gridha.id_sequences;
SELECT is(
    (SELECT count(*)::int FROM gridha.id_windows), 0,
    'truncating id_sequences removes every window');

SELECT * FROM finish();
ROLLBACK;
