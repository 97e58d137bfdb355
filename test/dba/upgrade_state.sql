-- test/dba/upgrade_state.sql: what gridha holds that an upgrade must keep,
-- as rows a test can store and compare, for test/t/015_upgrade.pl.
--
-- upgrade_scratch.state() returns one row per thing kept: (kind, key, val),
-- val a JSON object of the columns gridha 1.0 and 1.1 share, so that a
-- snapshot taken on 1.0 compares with the state after ALTER EXTENSION
-- gridha UPDATE. upgrade_scratch.snapshot(tag) stores it under a tag in
-- upgrade_scratch.snap; upgrade_scratch.changed(tag, ...) lists what
-- differs from that snapshot now.
--
-- kinds:
--   claim     per service: target, claimant, epoch, head_seq, tail_seq,
--             in_flight, ready_at, and its state in the view gridha.claims.
--             The claim's own expiries are left out: 1.1 moves them to the
--             claimant's lease (the view's state shows what they mean)
--   batch     per batch: seq, status, md5 of the payload, attempts, epoch,
--             created_at, not_before, instance_id, handed_out_at,
--             submitted_at, finished_at, detail
--   instance  id, label, kind, registered_at, last_seen_at (not for
--             workers: they go on renewing), stopped_at
--   target    every 1.0 column
--   lease, tick, id_sequence, id_window, rate_state   every 1.0 column
--   rate_handouts   how many rows
--   serial    the last value of gridha.id_sequence_serial
--   count     batches per status, services, claimed services (a summary
--             that reads well in a failure's diagnostics)
--
-- Run by psql as a superuser; creates the objects in upgrade_scratch. JIT is
-- off in them: compiling the plans of these scans of 100,000 rows costs
-- more than running them.

\set ON_ERROR_STOP 1

CREATE UNLOGGED TABLE upgrade_scratch.snap (
    tag  text NOT NULL,
    kind text NOT NULL,
    key  text NOT NULL,
    val  jsonb,
    PRIMARY KEY (tag, kind, key)
);

-- duty(role): a lease's duty under one name across the update to 1.3,
-- which renames gridha's own duty 'maintenance' to 'gridha.maintenance'
CREATE FUNCTION upgrade_scratch.duty(role text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN role = 'maintenance' THEN 'gridha.maintenance' ELSE role END $$;

CREATE FUNCTION upgrade_scratch.state()
RETURNS TABLE (kind text, key text, val jsonb)
LANGUAGE sql STABLE
SET search_path = pg_catalog
SET jit = off
AS $$
    SELECT 'claim', c.service_id,
           jsonb_build_object('target', c.target, 'claimant', c.claimant, 'epoch', c.epoch,
                              'head_seq', c.head_seq, 'tail_seq', c.tail_seq,
                              'in_flight', c.in_flight, 'ready_at', c.ready_at,
                              'state', v.state)
      FROM gridha.service_claims c
      JOIN gridha.claims v USING (service_id)
    UNION ALL
    SELECT 'batch', b.service_id || '/' || b.batch_id,
           jsonb_build_object('seq', b.seq, 'status', b.status, 'payload_md5', md5(b.payload),
                              'attempts', b.attempts, 'epoch', b.epoch, 'created_at', b.created_at,
                              'not_before', b.not_before, 'instance_id', b.instance_id,
                              'handed_out_at', b.handed_out_at, 'submitted_at', b.submitted_at,
                              'finished_at', b.finished_at, 'detail', b.detail)
      FROM gridha.batches b
    UNION ALL
    SELECT 'instance', i.instance_id::text,
           jsonb_build_object('label', i.label, 'kind', i.kind, 'registered_at', i.registered_at,
                              'last_seen_at', CASE WHEN i.kind = 'worker' THEN NULL ELSE i.last_seen_at END,
                              'stopped_at', i.stopped_at)
      FROM gridha.instances i
    UNION ALL
    SELECT 'target', t.target,
           jsonb_build_object('submit_url', t.submit_url, 'status_url', t.status_url,
                              'submit_function', t.submit_function::text,
                              'status_function', t.status_function::text,
                              'rate_interval', t.rate_interval, 'rate_burst', t.rate_burst)
      FROM gridha.targets t
    UNION ALL
    -- gridha's own duty: 'maintenance' up to 1.2, 'gridha.maintenance' since
    -- 1.3 (the update renames its lease and ticks), in a column named role
    -- up to 1.2 and duty since 1.3: one name and one key here
    SELECT 'lease', upgrade_scratch.duty(coalesce(to_jsonb(l) ->> 'duty', to_jsonb(l) ->> 'role')),
           (to_jsonb(l) - 'duty' - 'role')
           || jsonb_build_object('role', upgrade_scratch.duty(coalesce(to_jsonb(l) ->> 'duty', to_jsonb(l) ->> 'role')))
      FROM gridha.leases l
    UNION ALL
    SELECT 'tick', upgrade_scratch.duty(coalesce(to_jsonb(m) ->> 'duty', to_jsonb(m) ->> 'role')) || '/' || m.tick,
           (to_jsonb(m) - 'duty' - 'role')
           || jsonb_build_object('role', upgrade_scratch.duty(coalesce(to_jsonb(m) ->> 'duty', to_jsonb(m) ->> 'role')))
      FROM gridha.maintenance_ticks m
    UNION ALL
    SELECT 'id_sequence', q.name, to_jsonb(q) FROM gridha.id_sequences q
    UNION ALL
    SELECT 'id_window', w.name || '/' || w.window_start, to_jsonb(w) FROM gridha.id_windows w
    UNION ALL
    SELECT 'rate_state', r.target, to_jsonb(r) FROM gridha.target_rate_state r
    UNION ALL
    SELECT 'rate_handouts', 'rows', to_jsonb(count(*)) FROM gridha.rate_handouts
    UNION ALL
    SELECT 'serial', 'last_value', to_jsonb(s.last_value) FROM gridha.id_sequence_serial s
    UNION ALL
    SELECT 'count', 'status ' || b.status, to_jsonb(count(*)) FROM gridha.batches b GROUP BY b.status
    UNION ALL
    SELECT 'count', 'services', to_jsonb(count(*)) FROM gridha.service_claims
    UNION ALL
    SELECT 'count', 'claimed', to_jsonb(count(claimant)) FROM gridha.service_claims
$$;

CREATE FUNCTION upgrade_scratch.snapshot(tag text)
RETURNS bigint
LANGUAGE sql
SET jit = off
AS $$
    DELETE FROM upgrade_scratch.snap s WHERE s.tag = snapshot.tag;
    WITH i AS (
        INSERT INTO upgrade_scratch.snap (tag, kind, key, val)
        SELECT snapshot.tag, st.kind, st.key, st.val FROM upgrade_scratch.state() st
        RETURNING 1)
    SELECT count(*) FROM i
$$;

-- changed(tag, kinds, skip): the rows that differ between the snapshot and
-- now, of the kinds given (NULL: all), less the keys matching skip (a
-- regex; NULL: none): change is 'lost' (in the snapshot only), 'new' (now
-- only) or 'changed' (was_val, now_val: the two versions).
CREATE FUNCTION upgrade_scratch.changed(tag text, kinds text[] DEFAULT NULL, skip text DEFAULT NULL)
RETURNS TABLE (change text, kind text, key text, was_val jsonb, now_val jsonb)
LANGUAGE sql
SET jit = off
AS $$
    WITH s AS (SELECT s.kind, s.key, s.val FROM upgrade_scratch.snap s
                WHERE s.tag = changed.tag
                  AND (kinds IS NULL OR s.kind = ANY (kinds))
                  AND (skip IS NULL OR s.key !~ skip)),
         n AS (SELECT n.kind, n.key, n.val FROM upgrade_scratch.state() n
                WHERE (kinds IS NULL OR n.kind = ANY (kinds))
                  AND (skip IS NULL OR n.key !~ skip))
    SELECT CASE WHEN s.key IS NULL THEN 'new' WHEN n.key IS NULL THEN 'lost' ELSE 'changed' END,
           coalesce(s.kind, n.kind), coalesce(s.key, n.key), s.val, n.val
      FROM s FULL JOIN n ON n.kind = s.kind AND n.key = s.key
     WHERE s.key IS NULL OR n.key IS NULL OR s.val IS DISTINCT FROM n.val
     ORDER BY 2, 3
$$;
