-- 21_lock_check.sql: the lock-order checker of the test build
-- (src/lockcheck.c, GRIDHA_LOCK_CHECK, which make test builds with; issue
-- 38, item 13). A call that takes a row lock out of docs/concurrency.md's
-- order fails at once, naming both locks; a call that keeps it, several
-- calls of one transaction, and locks a rolled-back subtransaction gave up
-- are let through. A release build has no checker: the file then skips.
--
-- The statements carry the comment "lock-check test", by which test/run.sh's
-- scan of the server logs tells these failures on purpose from a broken
-- order. The locks are taken by this file's own functions, as a new path of
-- gridha's would take them; gridha's own calls run under the checker in
-- every other file, spec and suite of make test.
\set QUIET on
SELECT gridha.expiry_settings() \g /dev/null
SET client_min_messages = warning;
-- set up and committed, so that no table lock of it is held in the tests
TRUNCATE gridha.batches, gridha.service_claims, gridha.target_totals;
DELETE FROM gridha.leases;
DELETE FROM gridha.instances;
INSERT INTO gridha.instances (instance_id, label, owner) VALUES ('aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa', 'A', current_user);
INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES ('s1', 'b1', '\x01'), ('s2', 'b1', '\x01');

CREATE FUNCTION pg_temp.lc(VARIADIC steps text[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s text;
BEGIN
    FOREACH s IN ARRAY steps LOOP
        CASE split_part(s, ' ', 1)
        WHEN 'instance' THEN
            PERFORM 1 /* lock-check test */ FROM gridha.instances WHERE instance_id = 'aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa' FOR UPDATE;
        WHEN 'claim' THEN
            PERFORM 1 /* lock-check test */ FROM gridha.service_claims WHERE service_id = split_part(s, ' ', 2) FOR NO KEY UPDATE;
        WHEN 'claim-skip' THEN
            PERFORM 1 /* lock-check test */ FROM gridha.service_claims WHERE service_id = split_part(s, ' ', 2) FOR NO KEY UPDATE SKIP LOCKED;
        WHEN 'batch' THEN
            PERFORM 1 /* lock-check test */ FROM gridha.batches WHERE service_id = split_part(s, ' ', 2) FOR NO KEY UPDATE;
        WHEN 'batch-skip' THEN
            PERFORM 1 /* lock-check test */ FROM gridha.batches WHERE service_id = split_part(s, ' ', 2) FOR NO KEY UPDATE SKIP LOCKED;
        WHEN 'table' THEN
            LOCK TABLE gridha.service_claims IN ROW EXCLUSIVE MODE;
            PERFORM 1 /* lock-check test */ FROM gridha.targets LIMIT 1;
        WHEN 'fail' THEN
            BEGIN
                PERFORM 1 /* lock-check test */ FROM gridha.instances WHERE instance_id = 'aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa' FOR UPDATE;
                RAISE EXCEPTION 'rolled back';
            EXCEPTION WHEN raise_exception THEN
                NULL;
            END;
        END CASE;
    END LOOP;
END
$$;

BEGIN;
SELECT plan(16);

SELECT current_setting('gridha.lock_check', true) IS NOT NULL AS checker \gset
\if :checker

SELECT throws_like($$SELECT pg_temp.lc('batch s1', 'table')$$,
    'gridha lock order broken: table gridha.service_claims taken after batches row "s1" (waiting,%',
    'a call that takes gridha.service_claims after a row lock fails, naming the row');
SELECT throws_like($$SELECT pg_temp.lc('instance', 'claim s1')$$,
    'gridha lock order broken: service_claims row "s1" (waiting,% taken after instances row "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa" (waiting,%',
    'a claim row waited for after an instance row (a later kind) fails, naming both');
SELECT throws_like($$SELECT pg_temp.lc('claim s2', 'claim s1')$$,
    'gridha lock order broken: service_claims row "s1" (waiting,% taken after service_claims row "s2" (waiting,%',
    'claim rows waited for out of service_id order fail, naming both');
SELECT throws_like($$SELECT pg_temp.lc('claim-skip s1', 'claim s2')$$,
    'gridha lock order broken: service_claims row "s2" (waiting,% taken after service_claims row "s1" (without waiting,%',
    'after a claim taken with SKIP LOCKED, waiting for another claim row fails');
SELECT throws_like($$SELECT pg_temp.lc('batch s2', 'batch s1')$$,
    'gridha lock order broken: batches row "s1" (waiting,% taken after batches row "s2" (waiting,%',
    'batch rows waited for out of order, without their claims, fail');
SELECT lives_ok($$SELECT pg_temp.lc('table', 'claim s1', 'claim s2', 'batch s1', 'instance')$$,
    'the documented order (table, claims in order, batch, instance) passes');
SELECT lives_ok($$SELECT pg_temp.lc('claim s1', 'claim s2', 'batch s2', 'batch s1')$$,
    'batch rows in any order pass while their claims are held (the lone-acceptance refinement)');
-- The checker keeps a summary of the locks held, by which most locks are
-- checked without a search of every lock held (a release of many claims):
-- a batch row held without its claim, then with it, against later locks.
SELECT throws_like($$SELECT pg_temp.lc('batch s2', 'claim s1')$$,
    'gridha lock order broken: service_claims row "s1" (waiting,% taken after batches row "s2" (waiting,%',
    'a claim row waited for after a batch row whose claim the call does not hold fails');
SELECT lives_ok($$SELECT pg_temp.lc('claim s1', 'batch s1', 'claim s2')$$,
    'a batch row whose claim the call holds is not held against a later claim row');
SELECT lives_ok($$SELECT pg_temp.lc('claim s1', 'batch s2', 'batch s1')$$,
    'a batch row of a claim held may be waited for after a batch row of a claim not held');
SELECT throws_like($$SELECT pg_temp.lc('batch-skip s1', 'batch s2')$$,
    'gridha lock order broken: batches row "s2" (waiting,% taken after batches row "s1" (without waiting,%',
    'after a batch row taken with SKIP LOCKED, waiting for another batch row without its claim fails');
SELECT lives_ok($$SELECT pg_temp.lc('fail', 'claim s1')$$,
    'a lock a rolled-back subtransaction gave up is not held against later ones');
SELECT pg_temp.lc('instance');
SELECT lives_ok($$SELECT pg_temp.lc('claim s1')$$,
    'each call of a transaction is checked on its own (the instance row of the call before is not held against it)');
SELECT lives_ok($$SELECT gridha.next_batch('aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa')$$,
    'gridha''s own hand-out passes under the checker');
-- A leader whose touch leaves a stored session key to clear (liveness off)
-- for the end of its call, at its backend's first check of the service
-- counts, with a count to repair and the sweep off: the instance row (kind
-- 5) is written before the count rows (kind 6), not after them (the fuzzer
-- found the key cleared last).
INSERT INTO gridha.instances (instance_id, label, owner, last_seen_at, session_key)
VALUES ('cccccccc-cccc-cccc-cccc-cccccccccccc', 'C', current_user, now(), 12345);
INSERT INTO gridha.service_counts (target, shard, services) VALUES ('default', 0, 1)
    ON CONFLICT (target, shard) DO UPDATE SET services = gridha.service_counts.services + 1;
SET LOCAL gridha.session_liveness = off;
SET LOCAL gridha.sweep_instances_after = -1;
SELECT lives_ok($$SELECT * FROM gridha.run_maintenance('cccccccc-cccc-cccc-cccc-cccccccccccc', 'lc-duty')$$,
    'gridha''s own maintenance, clearing a stored session key at its first repair of the service counts, keeps the order');
SELECT ok((SELECT session_key IS NULL FROM gridha.instances
            WHERE instance_id = 'cccccccc-cccc-cccc-cccc-cccccccccccc'),
    'that maintenance call cleared the key (liveness off)');
\else
SELECT skip('a release build has no lock-order checker (make test builds with GRIDHA_LOCK_CHECK=1)', 16);
\endif

SELECT * FROM finish();
ROLLBACK;

TRUNCATE gridha.batches, gridha.service_claims, gridha.target_totals;
DELETE FROM gridha.leases;
DELETE FROM gridha.instances;
