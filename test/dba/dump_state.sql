-- test/dba/dump_state.sql: everything gridha keeps in a database that a
-- logical backup must carry, as rows (kind, key, val) with val a JSON
-- object of every column, for test/t/016_dump_restore.pl.
--
-- One SELECT without a final semicolon, so that the test can wrap it:
-- COPY (<this>) TO STDOUT under the dump's snapshot (what the dump holds),
-- and the same in a restored database (what the restore made of it).
-- Sorted, so that two outputs compare with diff. jsonb prints its keys in
-- one order, and timestamps in the session's time zone (the test sets
-- PGTZ=UTC for every session).
--
-- kinds: batch (every column; the payload as its md5), claim, instance,
-- target, lease, tick, id_sequence, id_window, rate_state (every column),
-- serial (gridha.id_sequence_serial's last value), services (how many, as
-- gridha.service_counts adds them up: it is not dumped but rebuilt by the
-- restore, so it must agree with the claims restored)
SELECT kind, key, val FROM (
    SELECT 'batch' AS kind, b.service_id || '/' || b.batch_id AS key,
           to_jsonb(b) - 'payload' || jsonb_build_object('payload_md5', md5(b.payload)) AS val
      FROM gridha.batches b
    UNION ALL
    SELECT 'claim', c.service_id, to_jsonb(c) FROM gridha.service_claims c
    UNION ALL
    SELECT 'instance', i.instance_id::text, to_jsonb(i) FROM gridha.instances i
    UNION ALL
    SELECT 'target', t.target, to_jsonb(t) FROM gridha.targets t
    UNION ALL
    SELECT 'lease', l.duty, to_jsonb(l) FROM gridha.leases l
    UNION ALL
    SELECT 'tick', m.duty || '/' || m.tick, to_jsonb(m) FROM gridha.maintenance_ticks m
    UNION ALL
    SELECT 'id_sequence', q.name, to_jsonb(q) FROM gridha.id_sequences q
    UNION ALL
    SELECT 'id_window', w.name || '/' || w.window_start, to_jsonb(w) FROM gridha.id_windows w
    UNION ALL
    SELECT 'rate_state', r.target, to_jsonb(r) FROM gridha.target_rate_state r
    UNION ALL
    SELECT 'serial', 'last_value', to_jsonb(s.last_value) FROM gridha.id_sequence_serial s
    UNION ALL
    SELECT 'services', 'counted', to_jsonb(coalesce(sum(n.services), 0)) FROM gridha.service_counts n
    UNION ALL
    SELECT 'services', 'claims', to_jsonb(count(*)) FROM gridha.service_claims
) x
ORDER BY kind, key
