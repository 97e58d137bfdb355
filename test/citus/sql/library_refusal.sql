-- library_refusal: in the Citus mode every contract call of gridha's
-- library refuses (RG035), with a hint naming the per-bucket functions,
-- and changes nothing: gridha's local tables stay empty.
\set VERBOSITY default
\set SHOW_CONTEXT never
\set A aaaaaaaa-0000-0000-0000-00000000000a
SELECT * FROM gridha.next_batch(:'A');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY terse
SELECT * FROM gridha.next_batches(:'A', 10);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.enqueue('s1', 'b1', '\x01');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.report_submission(:'A', 's1', 'b1', 1, 'accepted');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.report_status(:'A', 's1', 'b1', 1, 'committed');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM gridha.report_submissions(:'A', ARRAY['s1'], ARRAY['b1'], ARRAY[1]::bigint[], ARRAY['accepted']);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM gridha.report_statuses(:'A', ARRAY['s1'], ARRAY['b1'], ARRAY[1]::bigint[], ARRAY['committed']);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM gridha.acquire_claims(:'A');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM gridha.renew_claims(:'A');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM gridha.release_claims(:'A');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.register_instance(:'A');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.lead(:'A');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.run_maintenance(:'A');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.create_id_sequence('ids');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.reserve_ids('ids', 10);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.next_id('ids');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.start_worker();
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
\echo '--- nothing entered gridha''s local tables'
SELECT (SELECT count(*) FROM gridha.batches) AS batches, (SELECT count(*) FROM gridha.service_claims) AS claims,
       (SELECT count(*) FROM gridha.instances) AS instances, (SELECT count(*) FROM gridha.leases) AS leases,
       (SELECT count(*) FROM gridha.id_sequences) AS id_sequences;
