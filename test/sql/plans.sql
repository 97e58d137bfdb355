-- plans: a hand-out and the monitor's reads look rows up by key, so they cost
-- what the instance holds, never what is queued, even with statistics that
-- are stale the way they always are here: gathered while every soft_expiry
-- lay in the past (any statistics older than the soft expiry look like that).
-- The counts come from pg_stat_xact_user_tables, taken before and after the
-- call in one transaction: the rows the call read, by sequential scan and
-- through indexes.
\set A '''aaaaaaaa-0000-0000-0000-00000000000a'''
SET gridha.balance_claims = off;
SET gridha.renew_interval = '1h';
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances;

-- 2000 services with 3 batches each, all held by A; 500 heads pending
INSERT INTO gridha.batches (service_id, batch_id, payload)
SELECT 'p' || lpad(s::text, 4, '0'), 'b' || g, '\x00'
  FROM generate_series(1, 2000) AS s, generate_series(1, 3) AS g
 ORDER BY 1, 2;
SELECT count(*) AS taken FROM gridha.acquire_claims(:A);
SELECT count(*) AS handed_out FROM gridha.next_batches(:A, 500);
SELECT count(gridha.report_submission(:A, service_id, batch_id, epoch, 'accepted')) AS accepted
  FROM gridha.batches WHERE status = 'submitting';

-- statistics gathered while the claims looked expired, then the claims live again
UPDATE gridha.service_claims
   SET soft_expiry = now() - interval '2 hours', hard_expiry = now() - interval '1 hour';
ANALYZE gridha.service_claims;
ANALYZE gridha.batches;
UPDATE gridha.service_claims
   SET soft_expiry = now() + interval '1 hour', hard_expiry = now() + interval '2 hours';

CREATE TEMP VIEW rows_read AS
SELECT relname, seq_tup_read, idx_tup_fetch
  FROM pg_stat_xact_user_tables
 WHERE schemaname = 'gridha' AND relname IN ('batches', 'service_claims');
CREATE TEMP TABLE before_call (relname name, seq_tup_read bigint, idx_tup_fetch bigint);
-- count_from_here(): the next call_read counts from this point on
CREATE FUNCTION pg_temp.count_from_here() RETURNS void LANGUAGE sql AS $$
  DELETE FROM before_call;
  INSERT INTO before_call SELECT * FROM rows_read;
$$;
-- what the call read: the counts now minus those in before_call
CREATE TEMP VIEW call_read AS
SELECT r.relname, r.seq_tup_read - b.seq_tup_read AS seq_read,
       r.idx_tup_fetch - b.idx_tup_fetch AS idx_fetched
  FROM rows_read r JOIN before_call b USING (relname)
 ORDER BY r.relname;

-- next_batch: one claim and one batch found by key (a few index fetches)
BEGIN;
SELECT pg_temp.count_from_here() \g /dev/null
SELECT service_id, batch_id FROM gridha.next_batch(:A);
SELECT relname, seq_read, idx_fetched <= 4 AS by_key FROM call_read;
COMMIT;

-- next_batches: the same, for each batch handed out
BEGIN;
SELECT pg_temp.count_from_here() \g /dev/null
SELECT count(*) AS handed_out FROM gridha.next_batches(:A, 3);
SELECT relname, seq_read, idx_fetched <= 12 AS by_key FROM call_read;
COMMIT;

-- pending_batches: reads A's claims, and only the heads in flight of gridha.batches:
-- the 500 pending ones and the 4 handed out above
BEGIN;
SELECT pg_temp.count_from_here() \g /dev/null
SELECT count(*) AS pending FROM gridha.pending_batches(:A, 1000);
SELECT relname, seq_read, idx_fetched <= 504 AS heads_only
  FROM call_read WHERE relname = 'batches';
-- ... and of A's 2000 claims only the 504 in flight (the partial index
-- service_claims_in_flight): idle claims cost the monitor nothing
SELECT relname, seq_read, idx_fetched <= 504 AS in_flight_only
  FROM call_read WHERE relname = 'service_claims';
COMMIT;

-- claimed_batches: reads A's claims, and only the 100 heads it returns
BEGIN;
SELECT pg_temp.count_from_here() \g /dev/null
SELECT count(*) AS claimed FROM gridha.claimed_batches(:A, 100);
SELECT relname, seq_read, idx_fetched <= 100 AS heads_only
  FROM call_read WHERE relname = 'batches';
COMMIT;

TRUNCATE gridha.batches, gridha.service_claims, gridha.instances;
