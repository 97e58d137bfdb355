-- library_refusal: in the Citus mode every contract call of gridha's
-- library that the mode does not serve refuses (RG035), with a hint naming
-- what serves it, and changes nothing: gridha's local tables stay empty.
-- (The instance calls the mode serves, next_batch, next_batches, the
-- claims' calls, the reports, single and batched, and the reads
-- claimed_batches, pending_batches, verify_batch: test/t/035_citus_loop.pl;
-- enqueue and register_instance: test/t/032_citus_mode.pl; run_maintenance
-- and prune_batches: test/t/036_citus_maint.pl; start_worker, stop_worker
-- and the background workers: test/t/039_citus_workers.pl; the ID
-- sequences: id_sequences, next in the schedule.)
\set VERBOSITY default
\set SHOW_CONTEXT never
\set A aaaaaaaa-0000-0000-0000-00000000000a
SELECT gridha.lead(:'A');
\echo :LAST_ERROR_SQLSTATE
\echo '--- nothing entered gridha''s local tables'
SELECT (SELECT count(*) FROM gridha.batches) AS batches, (SELECT count(*) FROM gridha.service_claims) AS claims,
       (SELECT count(*) FROM gridha.instances) AS instances, (SELECT count(*) FROM gridha.leases) AS leases,
       (SELECT count(*) FROM gridha.id_sequences) AS id_sequences;
