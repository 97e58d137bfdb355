-- 25_writer_shortcuts.sql: what the row writer (src/rows.c) does once
-- instead of at every write must leave the tables exactly as the executor
-- would: a partial index's predicate made ready once per backend, a partial
-- index opened only when a new row version belongs in it, and the AFTER
-- UPDATE row triggers looked at only when an update can fire one.
--
-- The indexes are checked with amcheck (bt_index_check with heapallindexed:
-- every row version that belongs in an index has its entry) and by counting
-- through each partial index against a count that reads the table (an
-- entry for a row that does not belong would be counted).
--
-- One transaction, rolled back. Instance: A = aaaaaaaa-0000-0000-0000-00000000000a.
BEGIN;
SELECT plan(10);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
CREATE EXTENSION IF NOT EXISTS amcheck;
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = off;
\o

-- Partial indexes of a user's beside gridha's: one whose predicate the
-- writer makes ready once (built-in operators over columns and constants,
-- an enum among them), one it leaves to the executor (a function of a
-- user's, not inlined).
CREATE FUNCTION public.gridha_t25_flying(boolean) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS 'BEGIN RETURN $1; END';
CREATE INDEX t25_kept ON gridha.service_claims (service_id) WHERE in_flight AND epoch > 0;
CREATE INDEX t25_function ON gridha.service_claims (service_id) WHERE public.gridha_t25_flying(in_flight);
CREATE INDEX t25_pending ON gridha.batches (batch_id) WHERE status = 'pending';

-- Column-specific AFTER UPDATE triggers on service_claims
CREATE TEMP TABLE t25_log (n serial, what text);
CREATE FUNCTION pg_temp.t25_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO t25_log (what) VALUES (TG_NAME || ' ' || NEW.service_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER t25_ready AFTER UPDATE OF ready_at ON gridha.service_claims
    FOR EACH ROW EXECUTE FUNCTION pg_temp.t25_note();
CREATE TRIGGER t25_target AFTER UPDATE OF target ON gridha.service_claims
    FOR EACH ROW EXECUTE FUNCTION pg_temp.t25_note();

-- index_counts: each partial index counted through itself, and the rows
-- that belong in it counted from the table
CREATE FUNCTION pg_temp.index_counts() RETURNS TABLE (what text, through_index bigint, from_table bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SET LOCAL enable_indexscan = off;
    SET LOCAL enable_bitmapscan = off;
    SET LOCAL enable_indexonlyscan = off;
    CREATE TEMP TABLE IF NOT EXISTS t25_expected (what text, n bigint);
    TRUNCATE t25_expected;
    INSERT INTO t25_expected
    SELECT 'in_flight', count(*) FROM gridha.service_claims WHERE in_flight
    UNION ALL SELECT 'kept', count(*) FROM gridha.service_claims WHERE in_flight AND epoch > 0
    UNION ALL SELECT 'function', count(*) FROM gridha.service_claims WHERE public.gridha_t25_flying(in_flight)
    UNION ALL SELECT 'pending', count(*) FROM gridha.batches WHERE status = 'pending';
    SET LOCAL enable_seqscan = off;
    SET LOCAL enable_indexscan = on;
    RETURN QUERY
    SELECT 'in_flight', (SELECT count(*) FROM gridha.service_claims WHERE in_flight), e.n
      FROM t25_expected e WHERE e.what = 'in_flight'
    UNION ALL
    SELECT 'kept', (SELECT count(*) FROM gridha.service_claims WHERE in_flight AND epoch > 0), e.n
      FROM t25_expected e WHERE e.what = 'kept'
    UNION ALL
    SELECT 'function', (SELECT count(*) FROM gridha.service_claims WHERE public.gridha_t25_flying(in_flight)), e.n
      FROM t25_expected e WHERE e.what = 'function'
    UNION ALL
    SELECT 'pending', (SELECT count(*) FROM gridha.batches WHERE status = 'pending'), e.n
      FROM t25_expected e WHERE e.what = 'pending';
END
$$;

-- every index of both tables passes amcheck's heapallindexed check
CREATE FUNCTION pg_temp.indexes_whole() RETURNS bigint LANGUAGE sql AS $$
    SELECT count(bt_index_check(i.indexrelid, true))
      FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
     WHERE i.indrelid IN ('gridha.service_claims'::regclass, 'gridha.batches'::regclass)
       AND c.relam = (SELECT oid FROM pg_am WHERE amname = 'btree')
$$;

\o /dev/null
SELECT gridha.enqueue('s' || s, 's' || s || '-b' || b, NULL)
  FROM generate_series(1, 4) s, generate_series(1, 3) b;
\o
TRUNCATE t25_log;

-- The first hand-out claims the four services and hands one out (h1);
-- then three more (h3). h1's batch is committed (its next head becomes
-- ready), one of h3's accepted, the other two left submitting.
CREATE TEMP TABLE h1 AS SELECT * FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a');
TRUNCATE t25_log;
CREATE TEMP TABLE h3 AS SELECT * FROM gridha.next_batches('aaaaaaaa-0000-0000-0000-00000000000a', 3);
SELECT is((SELECT count(*) FROM h3), 3::bigint,
          'next_batches hands out three heads with partial indexes and column triggers of a user''s');
\o /dev/null
SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', service_id, batch_id, epoch, 'accepted') FROM h1;
SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', service_id, batch_id, epoch, 'committed') FROM h1;
SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', service_id, batch_id, epoch, 'accepted')
  FROM (SELECT * FROM h3 ORDER BY service_id LIMIT 1) x;
\o

SELECT results_eq(
    $$SELECT what, through_index, from_table FROM pg_temp.index_counts() ORDER BY what$$,
    $$VALUES ('function'::text, 3::bigint, 3::bigint), ('in_flight', 3, 3), ('kept', 3, 3), ('pending', 1, 1)$$,
    'each partial index holds exactly the rows its predicate holds for, made ready once or not');
SELECT is(pg_temp.indexes_whole(), 10::bigint,
          'every btree index of service_claims and batches passes bt_index_check with heapallindexed');
SELECT results_eq(
    $$SELECT what FROM t25_log ORDER BY what$$,
    $$VALUES ('t25_ready s1'::text), ('t25_ready s2'), ('t25_ready s3'), ('t25_ready s4')$$,
    'AFTER UPDATE OF ready_at fires for each hand-out of h3 and for the report that readied h1''s next head; UPDATE OF target never');

-- A partial index created now, after the writer knows the table's
-- indexes: the next write knows it too.
CREATE INDEX t25_late ON gridha.service_claims (claimant) WHERE in_flight AND head_seq > 1;
SELECT results_eq(
    $$SELECT service_id, batch_id FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$SELECT service_id, service_id || '-b2' FROM h1$$,
    'the next hand-out, with an index created in between, is h1''s service''s second batch');
SELECT is((SELECT count(*) FROM gridha.service_claims WHERE in_flight AND head_seq > 1), 1::bigint,
          'one claim belongs in the late index');
SELECT is(pg_temp.indexes_whole(), 11::bigint,
          'the index created in between has every entry it should, as have the others');

-- Reports that clear in_flight: entries are written only where they belong
\o /dev/null
SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', service_id, batch_id, epoch, 'accepted')
  FROM (SELECT * FROM h3 ORDER BY service_id OFFSET 1) x;
SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', service_id, batch_id, epoch, 'committed')
  FROM h3;
\o
SELECT results_eq(
    $$SELECT what, through_index, from_table FROM pg_temp.index_counts() ORDER BY what$$,
    $$VALUES ('function'::text, 1::bigint, 1::bigint), ('in_flight', 1, 1), ('kept', 1, 1), ('pending', 0, 0)$$,
    'after the reports, each partial index again holds exactly its rows');
SELECT is(pg_temp.indexes_whole(), 11::bigint,
          'and every index passes bt_index_check with heapallindexed');

-- Dropped again: the writer forgets it, and the writes go on.
DROP INDEX gridha.t25_late;
SELECT is((SELECT count(*) FROM gridha.next_batches('aaaaaaaa-0000-0000-0000-00000000000a', 5)), 3::bigint,
          'after the index is dropped, the three ready second batches are handed out');

SELECT * FROM finish();
ROLLBACK;
