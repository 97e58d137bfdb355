-- 24_citus_setup.sql: the Citus mode's setup and its refusals on a server
-- without Citus (issue 43, item 2; docs/citus.md). test/t/032_citus_mode.pl
-- runs the mode itself on a coordinator and two workers.
--
--   gridha.citus_setup without Citus is refused (RG031) (that a refused
--   call changes nothing is not checked here: error_of runs it in a
--   subtransaction, whose rollback would undo any change);
--   the per-bucket functions outside the mode are refused (RG037), the
--   batched ones too;
--   gridha.bucket_of is the same immutable hash everywhere (values pinned
--   here: a change would move services between buckets of a running
--   cluster);
--   in the mode (gridha.bucket_claims known to Citus: a
--   pg_catalog.pg_dist_partition made here, as Citus's own catalog is),
--   next_batch's, enqueue's and register_instance's entry points hand the
--   call over to the mode's path (enqueue after the single server's checks
--   of its ids, with a target too; serves checked as on one server); after
--   the rollback gridha runs again.
BEGIN;
SELECT plan(14);

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library
SET LOCAL gridha.balance_claims = off;
\o

CREATE FUNCTION pg_temp.error_of(q text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    st text;
    msg text;
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
    RETURN st || '|' || msg;
END
$$;

SELECT is(pg_temp.error_of('SELECT gridha.citus_setup()'),
          'RG031|gridha.citus_setup needs Citus, which is not installed in database "' || current_database() || '"',
          'citus_setup() without Citus is refused (RG031)');
SELECT is(pg_temp.error_of('SELECT gridha.citus_setup(128)'),
          'RG031|gridha.citus_setup needs Citus, which is not installed in database "' || current_database() || '"',
          'citus_setup(128) without Citus is refused (RG031)');

SELECT is(pg_temp.error_of('SELECT gridha.bucket_enqueue(42, ''s1'', ''b1'', ''\x01'')'),
          'RG037|gridha is not in Citus mode in this database',
          'bucket_enqueue outside the Citus mode is refused (RG037)');
SELECT is(pg_temp.error_of('SELECT gridha.bucket_next_batch(42, ''aaaaaaaa-0000-0000-0000-000000000024'', 1)'),
          'RG037|gridha is not in Citus mode in this database',
          'bucket_next_batch outside the Citus mode is refused (RG037)');
SELECT is(ARRAY[pg_temp.error_of('SELECT gridha.bucket_next_batches(42, ''aaaaaaaa-0000-0000-0000-000000000024'', 1, 10)'),
                pg_temp.error_of('SELECT gridha.bucket_report_submissions(42, ''aaaaaaaa-0000-0000-0000-000000000024'', ''{}'')'),
                pg_temp.error_of('SELECT gridha.bucket_report_statuses(42, ''aaaaaaaa-0000-0000-0000-000000000024'', ''{}'')')],
          array_fill('RG037|gridha is not in Citus mode in this database'::text, ARRAY[3]),
          'the batched bucket_next_batches, bucket_report_submissions and bucket_report_statuses outside the Citus mode are refused (RG037)');

SELECT is(ARRAY[gridha.bucket_of('s1'), gridha.bucket_of('s2'), gridha.bucket_of('s1', 128),
                gridha.bucket_of('', 64), gridha.bucket_of('service-ä', 4096)],
          ARRAY[42, 14, 42, 45, 1898],
          'bucket_of is the same hash as ever (s1, s2 in 64 buckets; s1 in 128; the empty id; a non-ASCII id in 4096)');
SELECT is(p.provolatile::text, 'i',
          'bucket_of is immutable (a call with constants folds to the bucket Citus routes by)')
  FROM pg_proc p WHERE p.oid = 'gridha.bucket_of(text, integer)'::regprocedure;

-- ---------------------------------------------------------------------------
-- in the mode: the library hands the instance calls over to the mode's
-- path and refuses what the mode does not serve (RG035)
-- ---------------------------------------------------------------------------
SAVEPOINT mode;
SET LOCAL allow_system_table_mods = on;
CREATE TABLE pg_catalog.pg_dist_partition (logicalrelid regclass NOT NULL, partmethod "char" NOT NULL);
CREATE TABLE gridha.bucket_claims (bucket integer PRIMARY KEY);
INSERT INTO pg_catalog.pg_dist_partition VALUES ('gridha.bucket_claims', 'h');
-- what citus_setup does last (and what makes every backend look again)
REVOKE INSERT (service_id, batch_id, payload) ON gridha.batches FROM gridha_producer;
-- next_batch is one of the instance calls the mode serves: its entry point
-- hands the call to gridha_internal.citus_next_batch, which first reads
-- the instance's owner in gridha.bucket_instances (this fake layout has
-- only bucket_claims)
SELECT is(pg_temp.error_of('SELECT * FROM gridha.next_batch(''aaaaaaaa-0000-0000-0000-000000000024'')'),
          '42P01|relation "gridha.bucket_instances" does not exist',
          'in the mode, next_batch is handed over to the mode''s path (gridha_internal.citus_next_batch reads the instance''s owner in gridha.bucket_instances first)');
-- enqueue: its entry point checks the ids as on one server, then hands the
-- call to gridha_internal.citus_enqueue, which reads the layout's bucket
-- count (this fake bucket_claims has none), with a target or without
SELECT is(pg_temp.error_of('SELECT gridha.enqueue(''m1'', ''b1'', ''\x01'')'),
          '42703|column c.buckets does not exist',
          'in the mode, enqueue is handed over to the mode''s path (gridha_internal.citus_enqueue reads the bucket count of the layout)');
SELECT is(pg_temp.error_of('SELECT gridha.enqueue(NULL, ''b1'', ''\x01'')'),
          '22004|service_id must not be null',
          'in the mode, enqueue refuses a NULL service id as on one server (22004)');
SELECT is(pg_temp.error_of('SELECT gridha.enqueue(''m1'', ''b1'', ''\x01'', ''ledger'')'),
          '42703|column c.buckets does not exist',
          'in the mode, enqueue with a target is handed over to the mode''s path too (gridha_internal.citus_enqueue reads the bucket count of the layout)');
-- register_instance: the mode's path writes gridha.bucket_instances
-- (which this fake layout lacks); serves is checked first (22023)
SELECT is(pg_temp.error_of('SELECT gridha.register_instance(''aaaaaaaa-0000-0000-0000-000000000024'')'),
          '42P01|relation "gridha.bucket_instances" does not exist',
          'in the mode, register_instance is handed over to the mode''s path (gridha_internal.citus_register_instance writes gridha.bucket_instances)');
SELECT is(pg_temp.error_of('SELECT gridha.register_instance(''l'', ARRAY[''submit_url'', ''bogus''])'),
          '22023|unknown target kind "bogus"',
          'in the mode, register_instance checks serves as on one server (22023 for an unknown kind) before it writes');
ROLLBACK TO SAVEPOINT mode;

SELECT is(gridha.enqueue('m1', 'b1', '\x01'), 1::bigint,
          'after the rollback (no mode), enqueue runs again');

SELECT * FROM finish();
ROLLBACK;
