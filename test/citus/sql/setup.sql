-- setup: gridha.citus_setup on the coordinator of a coordinator and two
-- workers (the database test/t/033_citus_suites.pl made: Citus, the
-- workers added, CREATE EXTENSION gridha), its refusals, and the layout it
-- makes. Runs first: every other file of the suite runs in the mode.
\set VERBOSITY default
\set SHOW_CONTEXT never
\set maindb :DBNAME
SET client_min_messages = warning;

\echo '--- before the setup: the per-bucket functions refuse (RG037), bucket_of answers'
SELECT gridha.bucket_enqueue(0, 'x', 'b1', '\x01');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_acquire(0, 'aaaaaaaa-0000-0000-0000-000000000001');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_takeover(0, 'aaaaaaaa-0000-0000-0000-000000000001');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_renew(0, 'aaaaaaaa-0000-0000-0000-000000000001', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_release(0, 'aaaaaaaa-0000-0000-0000-000000000001', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_next_batch(0, 'aaaaaaaa-0000-0000-0000-000000000001', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_submission(0, 'aaaaaaaa-0000-0000-0000-000000000001', 'x', 'b1', 1, 'accepted');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_report_status(0, 'aaaaaaaa-0000-0000-0000-000000000001', 'x', 'b1', 1, 'committed');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.bucket_of('x', 64) AS x_in_64;

\echo '--- bucket counts refused (RG033): not a power of two, below citus.shard_count, above 16384; NULL (22004)'
SHOW citus.shard_count;
SELECT gridha.citus_setup(3);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.citus_setup(16);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.citus_setup(32768);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.citus_setup(0);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.citus_setup(NULL);
\echo :LAST_ERROR_SQLSTATE
\echo '--- a refusal changes nothing: no bucket table, gridha.batches still open to producers'
SELECT to_regclass('gridha.bucket_claims') IS NULL AS no_bucket_claims,
       has_column_privilege('gridha_producer', 'gridha.batches', 'payload', 'INSERT') AS producers_insert;

\echo '--- a database without Citus (RG031); one whose gridha tables hold rows (RG032)'
DROP DATABASE IF EXISTS gridha_citus_regress_plain;
DROP DATABASE IF EXISTS gridha_citus_regress_rows;
CREATE DATABASE gridha_citus_regress_plain;
CREATE DATABASE gridha_citus_regress_rows;
\c gridha_citus_regress_plain
\set SHOW_CONTEXT never
SET client_min_messages = warning;
CREATE EXTENSION gridha;
SELECT gridha.citus_setup();
\echo :LAST_ERROR_SQLSTATE
\c gridha_citus_regress_rows
\set SHOW_CONTEXT never
SET client_min_messages = warning;
CREATE EXTENSION citus;
SELECT count(*) AS coordinator_set FROM citus_set_coordinator_host('localhost', current_setting('port')::integer);
CREATE EXTENSION gridha;
SELECT gridha.enqueue('r1', 'rb1', '\x01');
SELECT gridha.citus_setup();
\echo :LAST_ERROR_SQLSTATE
SELECT to_regclass('gridha.bucket_claims') IS NULL AS no_bucket_claims, count(*) AS batches FROM gridha.batches;
\c :maindb
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP DATABASE gridha_citus_regress_plain;
DROP DATABASE gridha_citus_regress_rows;

\echo '--- the setup: 64 buckets; a second setup refused (RG034)'
SELECT gridha.citus_setup();
SELECT gridha.citus_setup(128);
\echo :LAST_ERROR_SQLSTATE

\echo '--- the layout: four tables distributed by bucket (the rate limits'' state too), co-located (and the instances'' reference table); 64 buckets at epoch 0, free'
SELECT logicalrelid, partmethod, column_to_column_name(logicalrelid, partkey) AS by
  FROM pg_dist_partition WHERE partmethod <> 'n' ORDER BY logicalrelid::text;
SELECT count(DISTINCT colocationid) AS colocation_groups FROM pg_dist_partition WHERE partmethod <> 'n';
SELECT logicalrelid, partmethod FROM pg_dist_partition WHERE partmethod = 'n';
SELECT count(*) AS buckets, min(bucket), max(bucket), min(buckets) AS count_min, max(buckets) AS count_max,
       max(epoch) AS max_epoch, count(holder) AS held
  FROM gridha.bucket_claims;
\echo '--- the eight per-bucket functions distributed by their bucket, co-located with the tables'
SELECT o.objid::regprocedure AS function, o.distribution_argument_index AS by_argument,
       o.colocationid = (SELECT colocationid FROM pg_dist_partition
                          WHERE logicalrelid = 'gridha.bucket_claims'::regclass) AS colocated
  FROM pg_dist_object o
 WHERE o.classid = 'pg_proc'::regclass AND o.objid::regproc::text LIKE 'gridha.bucket\_%'
 ORDER BY o.objid::regprocedure::text;
\echo '--- producers enqueue through bucket_enqueue only: their INSERT on gridha.batches revoked'
SELECT has_column_privilege('gridha_producer', 'gridha.batches', 'payload', 'INSERT') AS producers_insert,
       has_function_privilege('gridha_producer', 'gridha.bucket_enqueue(integer,text,text,bytea)', 'EXECUTE') AS producers_enqueue,
       has_function_privilege('gridha_submitter', 'gridha.bucket_next_batch(integer,uuid,bigint)', 'EXECUTE') AS submitters_hand_out,
       has_table_privilege('gridha_submitter', 'gridha.bucket_batches', 'SELECT') AS submitters_read_batches;
