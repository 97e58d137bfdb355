-- counts: gridha.service_counts follows the services (the sum of a
-- target's rows is its number of services), written once per target at
-- commit; subtransactions that roll back take their changes with them.
\set A '''aaaaaaaa-0000-0000-0000-000000000001'''
SET gridha.balance_claims = on;
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances;
INSERT INTO gridha.targets (target) VALUES ('other');

-- per target: what the count rows say, and the services there are
CREATE FUNCTION pg_temp.counts() RETURNS TABLE (target text, counted bigint, services bigint)
LANGUAGE sql AS $$
    SELECT t.target,
           coalesce((SELECT sum(c.services) FROM gridha.service_counts c WHERE c.target = t.target), 0)::bigint,
           (SELECT count(*) FROM gridha.service_claims s WHERE s.target = t.target)
      FROM gridha.targets t
     ORDER BY 1
$$;

-- how many row writes service_counts had, as the statistics say
CREATE FUNCTION pg_temp.count_row_writes() RETURNS bigint LANGUAGE sql AS $$
    SELECT pg_stat_clear_snapshot();
    SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables WHERE relid = 'gridha.service_counts'::regclass
$$;

-- new services, one statement
SELECT count(gridha.enqueue('s' || i, 'b1', '\x01')) FROM generate_series(1, 3) i;
SELECT * FROM pg_temp.counts();

-- a producer, which has no right on gridha.service_counts, creates
-- services: the counts are written at its commit all the same
SET ROLE gridha_producer;
BEGIN;
SELECT count(gridha.enqueue('p' || i, 'b1', '\x01')) FROM generate_series(1, 2) i;
COMMIT;
SELECT gridha.enqueue('p3', 'b1', '\x01');
RESET ROLE;
SELECT * FROM pg_temp.counts();

-- 500 new services on two targets in one transaction: one row written per
-- target (not one per service)
SELECT pg_stat_force_next_flush();
SELECT pg_temp.count_row_writes() AS writes_before \gset
BEGIN;
SELECT count(gridha.enqueue('m' || i, 'b1', '\x01', CASE WHEN i % 2 = 0 THEN 'default' ELSE 'other' END))
  FROM generate_series(1, 500) i;
COMMIT;
SELECT pg_stat_force_next_flush();
SELECT pg_temp.count_row_writes() - :writes_before AS count_row_writes;
SELECT * FROM pg_temp.counts();

-- a DO block that commits as it goes writes the counts at each COMMIT
DO $$
BEGIN
    FOR k IN 1 .. 3 LOOP
        PERFORM gridha.enqueue('d' || k, 'b1', '\x01', 'other');
        COMMIT;
    END LOOP;
    PERFORM gridha.enqueue('d4', 'b1', '\x01', 'other');
    ROLLBACK;
END
$$;
SELECT * FROM pg_temp.counts();

-- a savepoint rolled back takes its new service with it; a released one
-- keeps it
BEGIN;
SAVEPOINT a;
SELECT gridha.enqueue('x1', 'b1', '\x01');
ROLLBACK TO a;
SAVEPOINT b;
SELECT gridha.enqueue('x2', 'b1', '\x01');
RELEASE b;
COMMIT;
SELECT * FROM pg_temp.counts();

-- a reader in the same transaction (the fair share of acquire_claims)
-- counts what the transaction has not written yet: the only instance's
-- share is all 511 services, y1 included, while the rows still say 510
BEGIN;
SELECT gridha.enqueue('y1', 'b1', '\x01');
SAVEPOINT a;
SELECT count(*) AS taken FROM gridha.acquire_claims(:A);
SELECT sum(services) AS rows_say FROM gridha.service_counts;
ROLLBACK TO a;
COMMIT;
SELECT * FROM pg_temp.counts();

-- a service moved to another target, and services removed
UPDATE gridha.service_claims SET target = 'other' WHERE service_id IN ('s1', 's2');
DELETE FROM gridha.service_claims WHERE service_id IN ('s3', 'x2');
SELECT * FROM pg_temp.counts();

-- TRUNCATE inside a savepoint that rolls back leaves everything counted;
-- a TRUNCATE that commits empties the counts, services created before it in
-- the transaction too
BEGIN;
SELECT gridha.enqueue('z1', 'b1', '\x01');
SAVEPOINT a;
TRUNCATE gridha.batches, gridha.service_claims;
ROLLBACK TO a;
COMMIT;
SELECT * FROM pg_temp.counts();
BEGIN;
SELECT gridha.enqueue('z2', 'b1', '\x01');
TRUNCATE gridha.batches, gridha.service_claims;
SELECT gridha.enqueue('z3', 'b1', '\x01', 'other');
COMMIT;
SELECT * FROM pg_temp.counts();
SELECT count(*) AS held_rows FROM gridha.instances WHERE held <> 0;

-- PREPARE TRANSACTION writes the counts as COMMIT does: COMMIT PREPARED
-- keeps them, ROLLBACK PREPARED takes them back with the service. Only
-- where prepared transactions are allowed (make test's cluster allows
-- them; a server with max_prepared_transactions = 0, the default, says it
-- skipped this part: expected/counts_1.out)
SELECT current_setting('max_prepared_transactions')::int > 0 AS prepared_xacts \gset
\if :prepared_xacts
BEGIN;
SELECT gridha.enqueue('t1', 'b1', '\x01', 'other');
PREPARE TRANSACTION 'gridha_counts_1';
COMMIT PREPARED 'gridha_counts_1';
SELECT * FROM pg_temp.counts();
BEGIN;
SELECT gridha.enqueue('t2', 'b1', '\x01', 'other');
PREPARE TRANSACTION 'gridha_counts_2';
ROLLBACK PREPARED 'gridha_counts_2';
SELECT * FROM pg_temp.counts();
\else
\echo 'skipped: PREPARE TRANSACTION needs max_prepared_transactions > 0 (this server has 0, the default)'
\endif

-- a count gone wrong (here by hand; issue 27 drifted one with DROP and
-- CREATE EXTENSION in a savepoint) strands no service: with balance on, a
-- lone instance whose count share the counts put at 0 still takes a free
-- service with work, by the work share, which counts no services (its
-- first call acquires, takes d1 and hands out its head; the second has
-- nothing to hand out), and maintenance repairs the count
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances;
SELECT gridha.enqueue('d1', 'b1', '\x01');
UPDATE gridha.service_counts SET services = 0;
SELECT * FROM pg_temp.counts() WHERE target = 'default';
SELECT service_id, batch_id FROM gridha.next_batch(:A);
SELECT service_id, batch_id FROM gridha.next_batch(:A);
SELECT outcome FROM gridha.run_maintenance(:A, 'counts_check');
SELECT * FROM pg_temp.counts() WHERE target = 'default';
SELECT outcome FROM gridha.run_maintenance(:A, 'counts_check_again');
SELECT * FROM pg_temp.counts() WHERE target = 'default';

-- N subtransactions that commit, each creating a service, are merged into
-- one delta per target as they commit: the counts are right at commit
BEGIN;
DO $$
BEGIN
    FOR i IN 1..200 LOOP
        BEGIN
            PERFORM gridha.enqueue('n' || i, 'b1', '\x01');
        EXCEPTION WHEN OTHERS THEN
            RAISE;
        END;
    END LOOP;
END
$$;
COMMIT;
SELECT * FROM pg_temp.counts() WHERE target = 'default';

-- run_maintenance after an enqueue of a new service in one transaction,
-- in a new backend (whose first tick checks the counts): the check waits
-- for a tick of a transaction that has written its counts, or it would
-- read the new service but not its count, repair the difference, and the
-- commit would count the service a second time
\c
BEGIN;
SELECT gridha.enqueue('m1', 'b1', '\x01');
SELECT outcome FROM gridha.run_maintenance(:A, 'counts_check_pending');
COMMIT;
SELECT (SELECT sum(services) FROM gridha.service_counts WHERE target = 'default') AS counted,
       (SELECT count(*) FROM gridha.service_claims WHERE target = 'default') AS services;
-- the check was left for later, not skipped: the next tick of this
-- backend repairs a count gone wrong
INSERT INTO gridha.service_counts AS c (target, shard, services) VALUES ('default', 0, 5)
ON CONFLICT (target, shard) DO UPDATE SET services = c.services + 5;
SELECT (SELECT sum(services) FROM gridha.service_counts WHERE target = 'default') AS counted;
SELECT outcome FROM gridha.run_maintenance(:A, 'counts_check_pending_again');
SELECT (SELECT sum(services) FROM gridha.service_counts WHERE target = 'default') AS counted,
       (SELECT count(*) FROM gridha.service_claims WHERE target = 'default') AS services;

-- leave nothing queued behind (the upgrade suite runs pgTAP next, in the
-- same database)
DELETE FROM gridha.maintenance_ticks WHERE duty LIKE 'counts_check%';
DELETE FROM gridha.leases WHERE duty LIKE 'counts_check%';
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances;
DELETE FROM gridha.targets WHERE target = 'other';
SELECT count(*) AS count_rows FROM gridha.service_counts;
