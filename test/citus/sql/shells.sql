-- shells: after the suite's cycles, nothing on the coordinator: gridha's
-- own tables of the claim cycle hold no row, and the bucket tables' local
-- shells (ordinary tables of the coordinator, which Citus keeps empty) have
-- empty files; the rows are in the shards on the workers. The tables the
-- mode keeps on the coordinator hold what id_sequences left: the
-- maintenance lease and its tick, the dropped sequences' rows (their high
-- water), no window.
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT (SELECT count(*) FROM gridha.batches) AS batches, (SELECT count(*) FROM gridha.service_claims) AS claims,
       (SELECT count(*) FROM gridha.instances) AS instances, (SELECT count(*) FROM gridha.service_counts) AS counts;
SELECT (SELECT count(*) FROM gridha.leases) AS leases, (SELECT count(*) FROM gridha.maintenance_ticks) AS ticks,
       (SELECT count(*) FILTER (WHERE dropped) || '/' || count(*) FROM gridha.id_sequences) AS dropped_sequences,
       (SELECT count(*) FROM gridha.id_windows) AS windows;
SELECT c AS shell, (pg_stat_file(pg_relation_filepath(c))).size AS bytes
  FROM unnest(ARRAY['gridha.bucket_batches', 'gridha.bucket_claims', 'gridha.bucket_services']) AS c ORDER BY c;
\echo '--- the shards: on the workers only (none placed on the coordinator)'
SELECT count(*) AS shards, count(*) FILTER (WHERE n.groupid = 0) AS on_coordinator, count(DISTINCT n.nodeport) AS nodes
  FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid) JOIN pg_dist_node n ON n.groupid = p.groupid
 WHERE s.logicalrelid::text LIKE 'gridha.bucket\_%'
   AND s.logicalrelid NOT IN ('gridha.bucket_instances'::regclass, 'gridha.bucket_targets'::regclass);
\echo '--- what the suite left, read through the shards: two batches queued (in bucket 4, and c33id-svc of id_sequences), the others final, none in flight, no bucket held'
SELECT status, count(*) FROM gridha.bucket_batches GROUP BY status ORDER BY status;
SELECT count(*) FILTER (WHERE in_flight) AS in_flight, count(*) AS services FROM gridha.bucket_services;
SELECT count(holder) AS held, count(*) FILTER (WHERE epoch > 0) AS ever_held FROM gridha.bucket_claims;
\echo '--- no batch carries an epoch above its bucket''s'
SELECT count(*) AS above FROM gridha.bucket_batches b JOIN gridha.bucket_claims c USING (bucket) WHERE b.epoch > c.epoch;
