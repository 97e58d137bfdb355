-- id_sequences: in the Citus mode the ID sequences run on the coordinator,
-- on its plain tables gridha.id_sequences and gridha.id_windows, as on one
-- server: create_id_sequence opens the first windows, reserve_ids and
-- next_id hand out ids that never repeat (next_id in the transaction of a
-- distributed enqueue too), the argument checks keep their SQLSTATEs,
-- run_maintenance tops the windows up (opened_windows), drop_id_sequence
-- keeps the high water and a name created again continues above it.
-- A producer and a submitter that are not superusers take ids there too.
-- Nothing enters the bucket tables. (Off the coordinator the calls refuse,
-- RG043: test/t/032_citus_mode.pl.)
\set VERBOSITY terse
\set I cccccccc-0000-0000-0000-000000000033
\echo '--- create: two windows of 100 ids, past the high water'
SELECT gridha.create_id_sequence('c33ids', window_size => 100, min_open_windows => 2);
SELECT name, window_start, window_end, next_id FROM gridha.id_windows ORDER BY name, window_start;
\echo '--- reserve_ids: 10 ids from the first window; next_id: a block of 100 (gridha.id_block_size), the second window'
SELECT gridha.reserve_ids('c33ids', 10);
SELECT gridha.next_id('c33ids') AS first, gridha.next_id('c33ids') AS second;
\echo '--- next_id in the transaction of an enqueue (a distributed write)'
BEGIN;
SELECT gridha.enqueue('c33id-svc', 'b1', '\x01') IS NOT NULL AS enqueued;
SELECT gridha.next_id('c33ids') AS third;
COMMIT;
SELECT (SELECT count(*) FROM gridha.bucket_batches WHERE service_id = 'c33id-svc') AS batches,
       (SELECT next_id FROM gridha.id_windows WHERE name = 'c33ids' AND window_start = 101) AS second_window_next;
\echo '--- refusals, each with its SQLSTATE, nothing changed'
SELECT gridha.create_id_sequence('c33ids');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.create_id_sequence('c33bad', window_size => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.reserve_ids('c33ids', 101);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.next_id('c33none');
\echo :LAST_ERROR_SQLSTATE
BEGIN READ ONLY;
SELECT gridha.reserve_ids('c33ids', 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT name, high_water, open_windows, free_ids FROM gridha.id_sequence_status ORDER BY name;
\echo '--- run_maintenance: both windows lack room for a block: retired, two opened past the high water'
SELECT outcome, swept_instances, opened_windows FROM gridha.run_maintenance(:'I');
SELECT name, window_start, window_end, next_id FROM gridha.id_windows ORDER BY name, window_start;
SELECT opened_windows FROM gridha.maintenance_ticks WHERE duty = 'gridha.maintenance';
\echo '--- drop keeps the high water: created again, the name continues above every id it gave'
SELECT gridha.drop_id_sequence('c33ids');
SELECT count(*) AS windows_left FROM gridha.id_windows;
SELECT gridha.next_id('c33ids');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.create_id_sequence('c33ids', window_size => 100, min_open_windows => 1);
SELECT gridha.next_id('c33ids') AS after_recreate;
SELECT name, high_water, open_windows FROM gridha.id_sequence_status ORDER BY name;
\echo '--- a producer and a submitter, neither a superuser, take ids on the coordinator (a sequence new to this backend: its first next_id reserves a block); neither may create a sequence (42501)'
DROP ROLE IF EXISTS regress_citus_ids_producer;
DROP ROLE IF EXISTS regress_citus_ids_submitter;
CREATE ROLE regress_citus_ids_producer IN ROLE gridha_producer;
CREATE ROLE regress_citus_ids_submitter IN ROLE gridha_submitter;
SELECT gridha.create_id_sequence('c33roles', window_size => 1000, min_open_windows => 1);
SET ROLE regress_citus_ids_producer;
SELECT gridha.reserve_ids('c33roles', 5) AS producer_range;
SELECT gridha.next_id('c33roles') AS producer_id;
SELECT gridha.create_id_sequence('c33prod');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE regress_citus_ids_submitter;
SELECT gridha.reserve_ids('c33roles', 3) AS submitter_range;
SELECT gridha.drop_id_sequence('c33roles');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT name, window_start, window_end, next_id FROM gridha.id_windows WHERE name = 'c33roles';
SELECT gridha.drop_id_sequence('c33roles');
DROP ROLE regress_citus_ids_producer;
DROP ROLE regress_citus_ids_submitter;
SELECT gridha.drop_id_sequence('c33ids');
\set VERBOSITY default
