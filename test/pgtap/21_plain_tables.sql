-- 21_plain_tables.sql: gridha refuses (RG030) to run while one of its
-- tables is not a plain local table it can read and write directly, and
-- takes one relcache callback slot, not one per cache (issue 43, item 1).
--
-- Three tables gridha cannot serve correctly, each made inside a savepoint
-- and rolled back:
--   an inheritance child of gridha.batches (SQL would see its rows, the
--     direct row path would not);
--   gridha.batches replaced by a partitioned table;
--   gridha.instances replaced by a foreign table;
--   gridha.service_claims known to Citus (a pg_catalog.pg_dist_partition
--     made here, as Citus's own catalog is; Citus invalidates a table's
--     relcache entry when it distributes it, ALTER TABLE does so here).
-- In each, next_batch, report_submission, report_status, enqueue and a
-- call of a role that does not own the instance (the ownership check,
-- RG008 otherwise) are refused with RG030, and nothing changed; after the
-- rollback gridha runs again.
--
-- Relcache callback slots: PostgreSQL gives a backend ten; Citus takes
-- five. In a test build (gridha.test_relcache_fill exists) this session
-- takes six of them first, as other extensions would, then calls gridha's
-- functions: with one callback per cache (four) the session would end with
-- "FATAL: out of relcache_callback_list slots". A release build skips it.
BEGIN;
SELECT plan(30);

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SELECT set_config('gridha.test_relcache_fill', '6', true)
 WHERE current_setting('gridha.test_relcache_fill', true) IS NOT NULL;
SET LOCAL gridha.balance_claims = off;
\o

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

CREATE ROLE gridha_tap_rg030 NOLOGIN IN ROLE gridha_submitter;

-- Everything the tables hold, as one hash (gridha.batches as named in q).
CREATE FUNCTION pg_temp.snapshot(batches regclass DEFAULT 'gridha.batches') RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    b text;
BEGIN
    EXECUTE format('SELECT string_agg(b::text, ''|'' ORDER BY b.service_id, b.batch_id) FROM %s b', batches)
       INTO b;
    RETURN md5(concat_ws('#', b,
        (SELECT string_agg(c::text, '|' ORDER BY c.service_id) FROM gridha.service_claims c),
        (SELECT string_agg(i::text, '|' ORDER BY i.instance_id) FROM gridha.instances i)));
END
$$;

-- The same, with gridha.instances renamed instances_plain.
CREATE FUNCTION pg_temp.snapshot_foreign() RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    RETURN md5(concat_ws('#',
        (SELECT string_agg(b::text, '|' ORDER BY b.service_id, b.batch_id) FROM gridha.batches b),
        (SELECT string_agg(c::text, '|' ORDER BY c.service_id) FROM gridha.service_claims c),
        (SELECT string_agg(i::text, '|' ORDER BY i.instance_id) FROM gridha.instances_plain i)));
END
$$;

-- The error a statement raises as role r (NULL: the caller), as
-- sqlstate|message.
CREATE FUNCTION pg_temp.error_of(q text, r name DEFAULT NULL) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    st text; msg text;
BEGIN
    IF r IS NOT NULL THEN
        EXECUTE format('SET LOCAL ROLE %I', r);
    END IF;
    EXECUTE q;
    RESET ROLE;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
    RETURN st || '|' || msg;
END
$$;

-- Setup: service rg30 with b1 submitting (instance A, a superuser's) and
-- b2 queued.
\o /dev/null
SELECT gridha.enqueue('rg30', 'b1', '\x01'), gridha.enqueue('rg30', 'b2', '\x02');
SELECT * FROM gridha.acquire_claims('aaaaaaaa-0000-0000-0000-000000000030');
\o
SELECT epoch AS e FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-000000000030') \gset

-- The calls each case must refuse, as label|sqlstate|message rows.
CREATE FUNCTION pg_temp.refusals(e bigint) RETURNS TABLE (call text, error text)
LANGUAGE sql AS $$
    SELECT c.call, pg_temp.error_of(c.q, c.r)
      FROM (VALUES
        (1, 'next_batch', 'SELECT * FROM gridha.next_batch(''aaaaaaaa-0000-0000-0000-000000000030'')', NULL::name),
        (2, 'report_submission', format('SELECT gridha.report_submission(''aaaaaaaa-0000-0000-0000-000000000030'', ''rg30'', ''b1'', %s, ''accepted'')', e), NULL),
        (3, 'report_status', format('SELECT gridha.report_status(''aaaaaaaa-0000-0000-0000-000000000030'', ''rg30'', ''b1'', %s, ''committed'')', e), NULL),
        (4, 'enqueue', 'SELECT gridha.enqueue(''rg30'', ''b9'', ''\x09'')', NULL),
        (5, 'renew_claims by a role that does not own the instance',
         'SELECT gridha.renew_claims(''aaaaaaaa-0000-0000-0000-000000000030'')', 'gridha_tap_rg030')
      ) AS c (n, call, q, r)
     ORDER BY c.n
$$;

SELECT is(pg_temp.error_of('SELECT gridha.renew_claims(''aaaaaaaa-0000-0000-0000-000000000030'')', 'gridha_tap_rg030'),
          'RG008|instance aaaaaaaa-0000-0000-0000-000000000030 belongs to role "' || current_user || '"',
          'plain tables: a role that does not own the instance is refused (RG008)');

-- ---------------------------------------------------------------------------
-- An inheritance child of gridha.batches
-- ---------------------------------------------------------------------------
SAVEPOINT child;
CREATE TABLE public.gridha_tap_batches_child () INHERITS (gridha.batches);
SELECT pg_temp.snapshot() AS before \gset
SELECT is(r.error, 'RG030|gridha.batches is a table with inheritance children, which gridha does not support',
          'inheritance child: ' || r.call || ' is refused (RG030)')
  FROM pg_temp.refusals(:e) r;
SELECT is(pg_temp.snapshot(), :'before', 'inheritance child: the refusals changed nothing');
ROLLBACK TO SAVEPOINT child;

-- ---------------------------------------------------------------------------
-- gridha.batches replaced by a partitioned table
-- ---------------------------------------------------------------------------
SAVEPOINT partitioned;
ALTER TABLE gridha.batches RENAME TO batches_plain;
CREATE TABLE gridha.batches (LIKE gridha.batches_plain) PARTITION BY LIST (service_id);
SELECT pg_temp.snapshot('gridha.batches_plain') AS before \gset
SELECT is(r.error, 'RG030|gridha.batches is a partitioned table, which gridha does not support',
          'partitioned gridha.batches: ' || r.call || ' is refused (RG030)')
  FROM pg_temp.refusals(:e) r;
SELECT is(pg_temp.snapshot('gridha.batches_plain'), :'before', 'partitioned gridha.batches: the refusals changed nothing');
ROLLBACK TO SAVEPOINT partitioned;

-- ---------------------------------------------------------------------------
-- gridha.instances replaced by a foreign table (a wrapper without handler:
-- nothing could read it)
-- ---------------------------------------------------------------------------
SAVEPOINT foreign_table;
CREATE FOREIGN DATA WRAPPER gridha_tap_fdw;
CREATE SERVER gridha_tap_server FOREIGN DATA WRAPPER gridha_tap_fdw;
ALTER TABLE gridha.instances RENAME TO instances_plain;
CREATE FOREIGN TABLE gridha.instances (instance_id uuid) SERVER gridha_tap_server;
SELECT pg_temp.snapshot_foreign() AS before \gset
SELECT is(r.error, 'RG030|gridha.instances is a foreign table, which gridha does not support',
          'foreign gridha.instances: ' || r.call || ' is refused (RG030)')
  FROM pg_temp.refusals(:e) r;
SELECT is(pg_temp.snapshot_foreign(), :'before', 'foreign gridha.instances: the refusals changed nothing');
ROLLBACK TO SAVEPOINT foreign_table;

-- ---------------------------------------------------------------------------
-- gridha.service_claims a Citus table (its local shell)
-- ---------------------------------------------------------------------------
SAVEPOINT citus;
SET LOCAL allow_system_table_mods = on;
CREATE TABLE pg_catalog.pg_dist_partition (logicalrelid regclass NOT NULL, partmethod "char" NOT NULL);
INSERT INTO pg_catalog.pg_dist_partition VALUES ('gridha.service_claims', 'h');
ALTER TABLE gridha.service_claims SET (fillfactor = 100);
SELECT pg_temp.snapshot() AS before \gset
SELECT is(r.error, 'RG030|gridha.service_claims is a Citus table (distributed, reference or Citus local), which gridha does not support',
          'Citus gridha.service_claims: ' || r.call || ' is refused (RG030)')
  FROM pg_temp.refusals(:e) r;
SELECT is(pg_temp.snapshot(), :'before', 'Citus gridha.service_claims: the refusals changed nothing');
ROLLBACK TO SAVEPOINT citus;

-- ---------------------------------------------------------------------------
-- Back to plain tables: gridha runs again, and reports what it did
-- ---------------------------------------------------------------------------
SELECT is(gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000030', 'rg30', 'b1', :e, 'accepted'),
          'pending'::gridha.batch_status, 'plain tables again: report_submission runs');
SELECT is((SELECT status FROM gridha.batches WHERE service_id = 'rg30' AND batch_id = 'b1'),
          'pending'::gridha.batch_status, 'plain tables again: SQL sees what report_submission wrote');

-- ---------------------------------------------------------------------------
-- gridha.batches replaced by another plain table of that name, after the
-- report above read it: the reports use the new one (rows.c keeps each
-- table's OID, forgotten when the table is renamed or dropped)
-- ---------------------------------------------------------------------------
SAVEPOINT replaced;
ALTER TABLE gridha.batches RENAME TO batches_old;
CREATE TABLE gridha.batches (LIKE gridha.batches_old INCLUDING ALL);
SELECT throws_ok(format('SELECT gridha.report_status(%L, %L, %L, %s, %L)',
                        'aaaaaaaa-0000-0000-0000-000000000030', 'rg30', 'b1', :e, 'committed'),
                 'RG003', NULL, 'replaced gridha.batches: report_status looks for the batch in the new table');
SELECT is((SELECT status FROM gridha.batches_old WHERE service_id = 'rg30' AND batch_id = 'b1'),
          'pending'::gridha.batch_status, 'replaced gridha.batches: the batch in the old table is not written');
ROLLBACK TO SAVEPOINT replaced;

-- The relcache callback slots (test builds): the session got here alive,
-- having called the hand-out, the reports, the ownership check, the targets
-- and an ID sequence with six slots taken by others.
\o /dev/null
SELECT gridha.create_id_sequence('rg30_ids');
SELECT gridha.next_id('rg30_ids');
\o
SELECT CASE WHEN current_setting('gridha.test_relcache_fill', true) IS NULL
            THEN skip('a release build has no gridha.test_relcache_fill', 1)
            ELSE is(current_setting('gridha.test_relcache_fill'), '6',
                    'with six relcache callback slots taken by others, every call above ran (gridha takes one)')
       END;

SELECT * FROM finish();
ROLLBACK;
