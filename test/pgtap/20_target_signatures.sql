-- 20_target_signatures.sql: a target's functions are stored as signatures
-- (gridha 1.3, issue 39): pg_upgrade refuses reg* columns in user tables,
-- and OIDs do not survive it.
--
--   stored     submit_function and status_function are text; what is
--              written is resolved with the writer's search_path (as a
--              regprocedure cast in the writer's statement was) and stored
--              as the schema-qualified signature, whatever the path
--   refused    the errors a regprocedure cast gave: 42883 for a function
--              that does not exist, 42704 for an unknown type, 22P02 for
--              a malformed name; RG007 for a bare OID, which would name
--              nothing after pg_upgrade, and for a wrong signature
--   resolved   a backend resolves the stored signature when it loads the
--              targets, and again when a function changes: a function
--              dropped makes the claimed heads of its target delayed with
--              the reason (no error); created again under the same
--              signature (another OID), it serves again; a stored
--              signature that names nothing (written past the trigger)
--              is a reason too, not an error
--
-- One transaction, rolled back.
BEGIN;
SELECT plan(21);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = off;
\o

CREATE SCHEMA sig_a;
CREATE SCHEMA sig_b;
CREATE FUNCTION sig_a.sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT 'accepted' $$;
CREATE FUNCTION sig_b.sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT 'accepted' $$;
CREATE FUNCTION sig_a.stat(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $$ SELECT b, 'COMMITTED' FROM unnest($1) b $$;
CREATE FUNCTION sig_a.wrong(x text) RETURNS text LANGUAGE sql AS $$ SELECT x $$;

-- ---------------------------------------------------------------------------
-- stored (7)

SELECT is((SELECT format_type(atttypid, atttypmod) FROM pg_attribute
            WHERE attrelid = 'gridha.targets'::regclass AND attname = 'submit_function'),
          'text', 'gridha.targets.submit_function is text');
SELECT is((SELECT format_type(atttypid, atttypmod) FROM pg_attribute
            WHERE attrelid = 'gridha.targets'::regclass AND attname = 'status_function'),
          'text', 'gridha.targets.status_function is text');
SELECT is((SELECT count(*)::int FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            WHERE c.relnamespace = 'gridha'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
              AND a.atttypid IN ('regproc'::regtype, 'regprocedure'::regtype, 'regoper'::regtype,
                                 'regoperator'::regtype, 'regconfig'::regtype,
                                 'regdictionary'::regtype, 'regnamespace'::regtype,
                                 'regcollation'::regtype)),
          0, 'no table of gridha has a column of a reg* type pg_upgrade refuses');

SET LOCAL search_path = sig_a, public;
INSERT INTO gridha.targets (target, submit_function, status_function)
VALUES ('sig', 'sub(text, text, bytea, int8)', 'stat(text[])');
RESET search_path;
SELECT is((SELECT submit_function || ' ' || status_function FROM gridha.targets WHERE target = 'sig'),
          'sig_a.sub(text,text,bytea,bigint) sig_a.stat(text[])',
          'a name written unqualified is resolved with the writer''s search_path and stored schema-qualified');

SET LOCAL search_path = sig_b, public;
UPDATE gridha.targets SET rate_burst = 2 WHERE target = 'sig';
SELECT is((SELECT submit_function FROM gridha.targets WHERE target = 'sig'),
          'sig_a.sub(text,text,bytea,bigint)',
          'a stored signature is kept by a later write under another search_path');
UPDATE gridha.targets SET submit_function = 'sub(text,text,bytea,bigint)' WHERE target = 'sig';
RESET search_path;
SELECT is((SELECT submit_function FROM gridha.targets WHERE target = 'sig'),
          'sig_b.sub(text,text,bytea,bigint)',
          'the same name written under another search_path is that schema''s function');

UPDATE gridha.targets SET submit_function = 'sig_a.sub(text,text,bytea,bigint)'::regprocedure
 WHERE target = 'sig';
SELECT is((SELECT submit_function FROM gridha.targets WHERE target = 'sig'),
          'sig_a.sub(text,text,bytea,bigint)',
          'a regprocedure written (as 1.2 took it) is stored as its signature');

-- ---------------------------------------------------------------------------
-- refused (7)

SELECT throws_ok($$UPDATE gridha.targets SET submit_function = 'sig_a.nosuch(text,text,bytea,bigint)' WHERE target = 'sig'$$,
                 '42883', 'function "sig_a.nosuch(text,text,bytea,bigint)" does not exist',
                 'a function that does not exist is refused (42883), as a regprocedure cast refused it');
SELECT throws_ok($$UPDATE gridha.targets SET status_function = 'sig_a.stat(nosuchtype[])' WHERE target = 'sig'$$,
                 '42704', NULL,
                 'a signature with an unknown type is refused (42704)');
SELECT throws_ok($$UPDATE gridha.targets SET submit_function = 'sig_a.sub' WHERE target = 'sig'$$,
                 '22P02', NULL,
                 'a name without argument types is refused (22P02)');
SELECT throws_ok(format($$UPDATE gridha.targets SET submit_function = '%s' WHERE target = 'sig'$$,
                        'sig_a.sub(text,text,bytea,bigint)'::regprocedure::oid),
                 'RG007', 'submit_function of target "sig" must name a function with its argument types',
                 'an OID is refused (RG007), even one that names a function of the right signature');
SELECT throws_ok($$UPDATE gridha.targets SET status_function = '-' WHERE target = 'sig'$$,
                 'RG007', 'status_function of target "sig" must name a function with its argument types',
                 '"-" (regprocedure''s none) is refused (RG007)');
SELECT throws_ok($$UPDATE gridha.targets SET submit_function = 'sig_a.wrong(text)' WHERE target = 'sig'$$,
                 'RG007', 'submit_function of target "sig" is sig_a.wrong(text), which is not (service_id text, batch_id text, payload bytea, epoch bigint) RETURNS text',
                 'a function of the wrong signature is refused (RG007)');
SELECT is((SELECT submit_function || ' ' || status_function FROM gridha.targets WHERE target = 'sig'),
          'sig_a.sub(text,text,bytea,bigint) sig_a.stat(text[])',
          'the refused writes changed nothing');

-- ---------------------------------------------------------------------------
-- resolved (6)

-- (the hand-outs below warn that the target's batches are delayed)
SET LOCAL client_min_messages = error;

\o /dev/null
SELECT gridha.enqueue('sig-s1', 'b1', '\x01', 'sig');
SELECT gridha.enqueue('sig-s1', 'b2', '\x01', 'sig');
\o
CREATE TEMP TABLE inst AS
    SELECT gridha.register_instance('db only', '{submit_function,status_function}') AS id;
SELECT results_eq(
    $$SELECT service_id FROM gridha.acquire_claims((SELECT id FROM inst), '{submit_function,status_function}')$$,
    $$VALUES ('sig-s1'::text)$$,
    'an instance that serves functions claims the service of the function target');

DROP FUNCTION sig_a.stat(text[]);
SELECT is_empty($$SELECT * FROM gridha.next_batch((SELECT id FROM inst))$$,
                'the status function dropped: nothing is handed out, and no error');
SELECT is((SELECT status || ': ' || detail FROM gridha.batches WHERE service_id = 'sig-s1' AND batch_id = 'b1'),
          'delayed: status_function of target "sig" (sig_a.stat(text[])) does not exist',
          'the head is delayed, with the signature that no longer resolves as the reason');

CREATE FUNCTION sig_a.stat(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $$ SELECT b, 'COMMITTED' FROM unnest($1) b $$;
UPDATE gridha.batches SET not_before = now() - interval '1 s' WHERE service_id = 'sig-s1' AND batch_id = 'b1';
UPDATE gridha.service_claims SET ready_at = now() - interval '1 s' WHERE service_id = 'sig-s1';
\o /dev/null
SELECT gridha.acquire_claims((SELECT id FROM inst), '{submit_function,status_function}');
\o
SELECT results_eq(
    $$SELECT service_id, batch_id FROM gridha.next_batch((SELECT id FROM inst))$$,
    $$VALUES ('sig-s1'::text, 'b1'::text)$$,
    'created again under the same signature (another OID), the function serves again: the head is handed out');

-- A signature that names nothing, written past the trigger (as a
-- superuser may, with session_replication_role = replica).
SET LOCAL session_replication_role = replica;
UPDATE gridha.targets SET submit_function = 'sig_a.gone(text,text,bytea,bigint)' WHERE target = 'sig';
RESET session_replication_role;
-- (with the triggers off, nothing announced the change: a function created
-- does, as any change of pg_proc makes every backend load the targets again)
CREATE FUNCTION sig_a.poke() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;
\o /dev/null
SELECT gridha.report_submission((SELECT id FROM inst), 'sig-s1', 'b1',
                                (SELECT epoch FROM gridha.service_claims WHERE service_id = 'sig-s1'), 'accepted');
SELECT gridha.report_status((SELECT id FROM inst), 'sig-s1', 'b1',
                            (SELECT epoch FROM gridha.service_claims WHERE service_id = 'sig-s1'), 'committed');
\o
SELECT is_empty($$SELECT * FROM gridha.next_batch((SELECT id FROM inst))$$,
                'a stored signature that names nothing: nothing is handed out, and no error');
SELECT is((SELECT status || ': ' || detail FROM gridha.batches WHERE service_id = 'sig-s1' AND batch_id = 'b2'),
          'delayed: submit_function of target "sig" (sig_a.gone(text,text,bytea,bigint)) does not exist',
          'the next head is delayed with that reason');

-- ... and the row can still be changed otherwise (a rate change, here): a
-- signature the row already stores is not judged again at an UPDATE of
-- other columns (the fuzz's administrator met 42883 here)
SELECT lives_ok($$UPDATE gridha.targets SET rate_interval = '1 second', rate_burst = 2 WHERE target = 'sig'$$,
                'an UPDATE of other columns of a row whose stored function names nothing succeeds');

SELECT * FROM finish();
ROLLBACK;
