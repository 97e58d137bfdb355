-- test/soak/cycle.sql: one cycle of one instance, for pgbench.
--
-- Every pgbench client is its own instance: its uuid is derived from
-- :client_id, so it stays the same across pgbench bursts. Run with
-- -M extended so the variables travel as parameters (batch ids need no
-- quoting).

-- Hand-out and its log row in ONE statement, so the log records exactly the
-- hand-outs that committed.
WITH nb AS (
    SELECT * FROM gridha.next_batch(md5('soak-' || :client_id::text)::uuid)
), lg AS (
    INSERT INTO soak_log (kind, instance_id, service_id, batch_id, epoch, attempt)
    SELECT 'handout', md5('soak-' || :client_id::text)::uuid,
           nb.service_id, nb.batch_id, nb.epoch, nb.attempts
    FROM nb
    RETURNING 1
)
SELECT count(*) AS got,
       coalesce(max(nb.service_id), '') AS sid,
       coalesce(max(nb.batch_id), '') AS bid,
       coalesce(max(nb.epoch), 0) AS ep
FROM nb
\gset

\if :got
-- The DLT accepted it ...
SELECT gridha.report_submission(md5('soak-' || :client_id::text)::uuid,
                                :sid, :bid, :ep, 'accepted')::text AS sub_status
\gset
-- ... and later reported it committed; log that in the same transaction.
WITH r AS (
    SELECT gridha.report_status(md5('soak-' || :client_id::text)::uuid,
                                :sid, :bid, :ep, 'committed')::text AS st
)
INSERT INTO soak_log (kind, instance_id, service_id, batch_id, epoch, sub_status, status)
SELECT 'committed', md5('soak-' || :client_id::text)::uuid, :sid, :bid, :ep, :sub_status, r.st
FROM r;
\else
-- Nothing to do for this instance right now.
\sleep 5 ms
\endif
