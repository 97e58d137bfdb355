/*
 * gridha 1.2 -> 1.3: ALTER EXTENSION gridha UPDATE TO '1.3'.
 *
 * An upgraded database equals a fresh 1.3 install (test/suites/15_upgrade.sh
 * compares pg_dump --schema-only of both): every change below is made the
 * same way in gridha--1.3.sql. Each section names the issue it belongs to.
 */

\echo Use "ALTER EXTENSION gridha UPDATE TO '1.3'" to load this file. \quit

-- --- issue 39: status answers that leave out a batch (status_omitted) ---

ALTER TABLE gridha.target_totals
    ADD COLUMN status_omitted bigint NOT NULL DEFAULT 0;

COMMENT ON TABLE gridha.target_totals IS
'running totals per target spread over one row per backend slot (their sum is the total): claims taken over from another instance, writes refused as stale, the settled_* part of the services'' counters (what each counted until its queue last ran dry), and status answers that left out a batch asked about; read through gridha.metrics';

CREATE OR REPLACE FUNCTION gridha.targets_totals_follow()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.target = OLD.target THEN
            RETURN NULL;
        END IF;
        INSERT INTO gridha.target_totals AS t
               (target, slot, claims_taken_over, stale_writes_refused, settled_enqueued,
                settled_committed, settled_invalid, settled_resubmitted, status_omitted)
        SELECT NEW.target, o.slot, o.claims_taken_over, o.stale_writes_refused,
               o.settled_enqueued, o.settled_committed, o.settled_invalid,
               o.settled_resubmitted, o.status_omitted
          FROM gridha.target_totals o
         WHERE o.target = OLD.target
         ORDER BY o.slot
        ON CONFLICT (target, slot) DO UPDATE
           SET claims_taken_over = t.claims_taken_over + excluded.claims_taken_over,
               stale_writes_refused = t.stale_writes_refused + excluded.stale_writes_refused,
               settled_enqueued = t.settled_enqueued + excluded.settled_enqueued,
               settled_committed = t.settled_committed + excluded.settled_committed,
               settled_invalid = t.settled_invalid + excluded.settled_invalid,
               settled_resubmitted = t.settled_resubmitted + excluded.settled_resubmitted,
               status_omitted = t.status_omitted + excluded.status_omitted;
    ELSIF OLD.target = 'default' AND pg_trigger_depth() > 1 THEN
        -- the untouched default row, replaced by an INSERT of 'default'
        -- (targets_restore_default: a restore, whose totals may come
        -- first): the totals stay with the name
        RETURN NULL;
    END IF;
    DELETE FROM gridha.target_totals WHERE target = OLD.target;
    RETURN NULL;
END
$$;

CREATE OR REPLACE VIEW gridha.metrics AS
WITH RECURSIVE claimants(id) AS (
    (SELECT c.claimant FROM gridha.service_claims c
      WHERE c.claimant IS NOT NULL
      ORDER BY c.claimant
      LIMIT 1)
    UNION ALL
    SELECT (SELECT c.claimant FROM gridha.service_claims c
             WHERE c.claimant > k.id
             ORDER BY c.claimant
             LIMIT 1)
      FROM claimants k
     WHERE k.id IS NOT NULL
),
busy AS (
    SELECT w.* FROM claimants k
    CROSS JOIN LATERAL (
        SELECT c.target, c.head_seq, c.tail_seq, c.ready_at, c.in_flight,
               c.tail_seq - c.settled_seq AS enqueued,
               c.committed_total - c.settled_committed AS committed,
               c.invalid_total - c.settled_invalid AS invalid,
               c.resubmitted_total - c.settled_resubmitted AS resubmitted
          FROM gridha.service_claims c
         WHERE c.claimant = k.id AND c.ready_at IS NOT NULL) w
    UNION ALL
    SELECT c.target, c.head_seq, c.tail_seq, c.ready_at, c.in_flight,
           c.tail_seq - c.settled_seq, c.committed_total - c.settled_committed,
           c.invalid_total - c.settled_invalid, c.resubmitted_total - c.settled_resubmitted
      FROM gridha.service_claims c
     WHERE c.claimant IS NULL AND c.ready_at IS NOT NULL
    UNION ALL
    SELECT c.target, c.head_seq, c.tail_seq, c.ready_at, c.in_flight,
           c.tail_seq - c.settled_seq, c.committed_total - c.settled_committed,
           c.invalid_total - c.settled_invalid, c.resubmitted_total - c.settled_resubmitted
      FROM gridha.service_claims c
     WHERE c.in_flight AND c.ready_at IS NULL
)
SELECT 'target'::text AS scope,
       t.target,
       NULL::uuid AS instance_id,
       NULL::text AS label,
       coalesce(s.backlog, 0)::bigint AS backlog,
       coalesce(greatest(extract(epoch FROM now() - s.oldest_ready_at), 0), 0)::float8 AS oldest_ready_age_seconds,
       coalesce(s.in_flight, 0)::bigint AS in_flight,
       NULL::bigint AS claims_held,
       NULL::float8 AS lease_remaining_seconds,
       (coalesce(x.enqueued, 0) + coalesce(s.enqueued, 0))::bigint AS enqueued_total,
       (coalesce(x.committed, 0) + coalesce(s.committed, 0))::bigint AS committed_total,
       (coalesce(x.invalid, 0) + coalesce(s.invalid, 0))::bigint AS invalid_total,
       (coalesce(x.resubmitted, 0) + coalesce(s.resubmitted, 0))::bigint AS resubmitted_total,
       coalesce(x.taken_over, 0)::bigint AS claims_taken_over_total,
       coalesce(x.stale, 0)::bigint AS stale_writes_refused_total,
       coalesce(x.omitted, 0)::bigint AS status_omitted_total
FROM gridha.targets t
LEFT JOIN (
    SELECT b.target,
           sum(coalesce(b.tail_seq - b.head_seq + 1, 0)) AS backlog,
           min(b.ready_at) FILTER (WHERE NOT b.in_flight) AS oldest_ready_at,
           count(*) FILTER (WHERE b.in_flight) AS in_flight,
           sum(b.enqueued) AS enqueued,
           sum(b.committed) AS committed,
           sum(b.invalid) AS invalid,
           sum(b.resubmitted) AS resubmitted
      FROM busy b
     GROUP BY b.target) s ON s.target = t.target
LEFT JOIN LATERAL (
    SELECT sum(o.claims_taken_over) AS taken_over, sum(o.stale_writes_refused) AS stale,
           sum(o.settled_enqueued) AS enqueued, sum(o.settled_committed) AS committed,
           sum(o.settled_invalid) AS invalid, sum(o.settled_resubmitted) AS resubmitted,
           sum(o.status_omitted) AS omitted
      FROM gridha.target_totals o
     WHERE o.target = t.target) x ON true
UNION ALL
SELECT 'instance'::text,
       NULL::text,
       i.instance_id,
       i.label,
       NULL::bigint,
       NULL::float8,
       (SELECT count(*) FROM gridha.service_claims c
         WHERE c.claimant = i.instance_id AND c.in_flight)::bigint,
       i.held::bigint,
       greatest(extract(epoch FROM i.soft_expiry - now()), 0)::float8,
       NULL::bigint,
       NULL::bigint,
       NULL::bigint,
       NULL::bigint,
       NULL::bigint,
       NULL::bigint,
       NULL::bigint
FROM gridha.instances i
WHERE i.soft_expiry IS NOT NULL;

COMMENT ON VIEW gridha.metrics IS
'Prometheus-style metrics: one row per target (gauges backlog, oldest_ready_age_seconds, in_flight; running totals enqueued_total, committed_total, invalid_total, resubmitted_total, claims_taken_over_total, stale_writes_refused_total, status_omitted_total) and one per instance with a lease (gauges in_flight, claims_held, lease_remaining_seconds); reads no batch';
