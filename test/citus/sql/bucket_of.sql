-- bucket_of: a service's bucket, an immutable hash of its id: in range,
-- the same for the same id, spread over the buckets, NULL for NULL; with a
-- power of two the bucket among fewer buckets is the bucket among more
-- modulo the fewer (what a count laid out later could rely on).
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT gridha.bucket_of('x', 64) AS x_64, gridha.bucket_of('x') AS x_default, gridha.bucket_of('x', 128) AS x_128,
       gridha.bucket_of('s52', 64) AS s52, gridha.bucket_of('s53', 64) AS s53, gridha.bucket_of('s5', 64) AS s5;
SELECT gridha.bucket_of(NULL, 64) IS NULL AS null_id, gridha.bucket_of('x', NULL) IS NULL AS null_count;
SELECT p.provolatile AS volatility, p.proparallel AS parallel
  FROM pg_proc p WHERE p.oid = 'gridha.bucket_of(text,integer)'::regprocedure;
\echo '--- 10,000 ids: every bucket used, none outside 0..63, none with more than twice its share'
SELECT count(DISTINCT b) AS buckets_used, min(b), max(b),
       max(n) <= 2 * 10000 / 64 AS within_twice_share
  FROM (SELECT gridha.bucket_of('svc-' || i, 64) AS b, count(*) OVER (PARTITION BY gridha.bucket_of('svc-' || i, 64)) AS n
          FROM generate_series(1, 10000) AS i) x;
\echo '--- among 32 buckets, the bucket among 64 modulo 32'
SELECT count(*) FILTER (WHERE gridha.bucket_of('svc-' || i, 32) <> gridha.bucket_of('svc-' || i, 64) % 32) AS not_nested
  FROM generate_series(1, 10000) AS i;
\echo '--- a call with constants folds to its bucket (Citus routes a delegated call by it)'
EXPLAIN (COSTS OFF, VERBOSE) SELECT gridha.bucket_of('x', 64);
