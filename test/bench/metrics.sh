#!/usr/bin/env bash
# test/bench/metrics.sh: what a scrape of gridha.metrics costs as idle
# services pile up (`make bench`; docs/benchmarks.md, "Metrics").
#
# Measures and prints; it never fails on a figure. One throwaway cluster
# (common.sh), one database, METRICS_INSTANCES instances holding METRICS_BUSY services with
# work (5 batches each: some heads in flight, some ready, some delayed, a
# quarter of the queues run dry once and filled again), then idle services added
# in steps up to METRICS_IDLE (0, a tenth of it, all of it), written as
# gridha leaves a service whose queue ran dry (head_seq NULL, its counters
# settled into gridha.target_totals), claimed by the instances.
#
# At each step, side by side in the same database:
#   metrics    SELECT * FROM gridha.metrics (reads the services with work,
#              the targets' totals and the instances)
#   baseline   the same rows computed as 1.2's first gridha.metrics did:
#              the counters and gauges summed over every service row
# each METRICS_SCRAPES times in one backend (after one warm-up), timed in
# the server (clock_timestamp around each): median and best, ms. Both must
# give the same counters: a difference is printed as such.
#
# Environment (defaults in brackets): METRICS_IDLE [1000000],
# METRICS_INSTANCES [8],
# METRICS_BUSY [100], METRICS_SCRAPES [20], METRICS_PORT [56500];
# BENCH_PAYLOAD as in common.sh.
set -eu -o pipefail

METRICS_IDLE=${METRICS_IDLE:-1000000}
METRICS_BUSY=${METRICS_BUSY:-100}
METRICS_SCRAPES=${METRICS_SCRAPES:-20}
METRICS_INSTANCES=${METRICS_INSTANCES:-8}
export GRIDHA_BASE_PORT=${METRICS_PORT:-56500}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# shellcheck source=../lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=common.sh
. "$HERE/common.sh"

trap gridha_cluster_cleanup EXIT
trap 'exit 130' INT TERM

DB=metrics
gridha_log "metrics: $METRICS_INSTANCES instances, $METRICS_BUSY services with work, up to $METRICS_IDLE idle, $METRICS_SCRAPES scrapes per figure, $(nproc) cores"
bench_start_cluster
bench_gridha_db "$DB"

qf "$DB" >/dev/null <<EOF
SET client_min_messages = warning;
SELECT gridha.register_instance('bench ' || lpad(i::text, 3, '0')) FROM generate_series(1, $METRICS_INSTANCES) AS i \\g /dev/null

-- the services with work, through the API: 5 batches each; every instance
-- takes its share and works it: a quarter of the services run dry and get
-- 5 more, a quarter have their head in flight, a quarter delayed
SELECT gridha.enqueue('busy' || s, 'b' || b, bench_payload())
  FROM generate_series(1, $METRICS_BUSY) AS s, generate_series(1, 5) AS b
 ORDER BY b, s \\g /dev/null

CREATE PROCEDURE bench_work()
LANGUAGE plpgsql
AS \$\$
DECLARE
    i record;
    r record;
    k int;
BEGIN
    -- each instance hands out its heads: k = 0 committed, 1 accepted
    -- (pending), 2 delayed, 3 committed (its next head then in flight)
    FOR i IN SELECT instance_id FROM gridha.instances ORDER BY label LOOP
        FOR r IN SELECT * FROM gridha.next_batches(i.instance_id, 1000) LOOP
            k := substr(r.service_id, 5)::int % 4;
            IF k = 1 THEN
                PERFORM gridha.report_submission(i.instance_id, r.service_id, r.batch_id, r.epoch, 'accepted');
            ELSIF k = 2 THEN
                PERFORM gridha.report_submission(i.instance_id, r.service_id, r.batch_id, r.epoch, 'delayed', 'bench');
            ELSE
                PERFORM gridha.report_status(i.instance_id, r.service_id, r.batch_id, r.epoch, 'committed');
            END IF;
        END LOOP;
        COMMIT;
    END LOOP;
    -- the k = 0 services run dry (their queue settles), then get 5 more
    FOR n IN 2..5 LOOP
        FOR i IN SELECT instance_id FROM gridha.instances ORDER BY label LOOP
            PERFORM gridha.report_status(i.instance_id, x.service_id, x.batch_id, x.epoch, 'committed')
               FROM gridha.next_batches(i.instance_id, 1000) x
              WHERE substr(x.service_id, 5)::int % 4 = 0;
            COMMIT;
        END LOOP;
    END LOOP;
    PERFORM gridha.enqueue('busy' || s, 'c' || b, bench_payload())
       FROM generate_series(4, $METRICS_BUSY, 4) AS s, generate_series(1, 5) AS b;
END
\$\$;
CALL bench_work();

/*
 * bench_idle(first, n): n idle services as gridha leaves one whose queue
 * ran dry (3 batches, committed, settled), claimed round robin by the 8
 * instances, 100,000 per transaction.
 */
CREATE PROCEDURE bench_idle(first bigint, n bigint)
LANGUAGE plpgsql
AS \$\$
DECLARE
    chunk bigint;
    ids uuid[] := ARRAY(SELECT instance_id FROM gridha.instances ORDER BY label);
BEGIN
    WHILE n > 0 LOOP
        chunk := least(n, 100000);
        PERFORM set_config('session_replication_role', 'replica', true);
        INSERT INTO gridha.service_claims (service_id, claimant, epoch, tail_seq, committed_total,
                                           settled_seq, settled_committed)
        SELECT 'idle' || s, ids[1 + s % $METRICS_INSTANCES], 1, 3, 3, 3, 3
          FROM generate_series(first, first + chunk - 1) AS s;
        PERFORM set_config('session_replication_role', 'origin', true);
        INSERT INTO gridha.target_totals AS t (target, slot, settled_enqueued, settled_committed)
        VALUES ('default', 0, 3 * chunk, 3 * chunk)
        ON CONFLICT (target, slot) DO UPDATE
           SET settled_enqueued = t.settled_enqueued + excluded.settled_enqueued,
               settled_committed = t.settled_committed + excluded.settled_committed;
        COMMIT;
        first := first + chunk;
        n := n - chunk;
    END LOOP;
END
\$\$;

-- the baseline: the rows of 1.2's first gridha.metrics, summed over every
-- service row (the target rows; the instance rows are the same query)
CREATE VIEW bench_baseline AS
SELECT t.target,
       coalesce(s.backlog, 0)::bigint AS backlog,
       coalesce(greatest(extract(epoch FROM now() - s.oldest_ready_at), 0), 0)::float8 AS oldest_ready_age_seconds,
       coalesce(s.in_flight, 0)::bigint AS in_flight,
       coalesce(s.enqueued, 0)::bigint AS enqueued_total,
       coalesce(s.committed, 0)::bigint AS committed_total,
       coalesce(s.invalid, 0)::bigint AS invalid_total,
       coalesce(s.resubmitted, 0)::bigint AS resubmitted_total,
       coalesce(x.taken_over, 0)::bigint AS claims_taken_over_total,
       coalesce(x.stale, 0)::bigint AS stale_writes_refused_total
FROM gridha.targets t
LEFT JOIN (
    SELECT c.target,
           sum(coalesce(c.tail_seq - c.head_seq + 1, 0)) AS backlog,
           min(c.ready_at) FILTER (WHERE NOT c.in_flight) AS oldest_ready_at,
           count(*) FILTER (WHERE c.in_flight) AS in_flight,
           sum(c.tail_seq) AS enqueued,
           sum(c.committed_total) AS committed,
           sum(c.invalid_total) AS invalid,
           sum(c.resubmitted_total) AS resubmitted
      FROM gridha.service_claims c
     GROUP BY c.target) s ON s.target = t.target
LEFT JOIN LATERAL (
    SELECT sum(o.claims_taken_over) AS taken_over, sum(o.stale_writes_refused) AS stale
      FROM gridha.target_totals o
     WHERE o.target = t.target) x ON true;

-- bench_scrape(query, n): each of n reads of the query's whole result, ms
CREATE FUNCTION bench_scrape(query text, n int) RETURNS float8[]
LANGUAGE plpgsql
AS \$\$
DECLARE
    r record;
    t0 timestamptz;
    out float8[] := '{}';
BEGIN
    FOR r IN EXECUTE query LOOP NULL; END LOOP;     -- warm-up
    FOR i IN 1..n LOOP
        t0 := clock_timestamp();
        FOR r IN EXECUTE query LOOP NULL; END LOOP;
        out := out || (extract(epoch FROM clock_timestamp() - t0) * 1000)::float8;
    END LOOP;
    RETURN out;
END
\$\$;
EOF

# figures ARRAY: "median best" of a {ms,...} array
figures() {
	echo "$1" | tr -d '{}' | tr ',' '\n' | sort -g | awk '{ v[NR] = $1 } END {
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%.3f %.3f\n", m, v[1] }'
}

printf '%-12s %16s %16s %18s %10s\n' "idle" "metrics ms" "baseline ms" "metrics/baseline" "counters"
printf '%-12s %16s %16s %18s %10s\n' "" "(median/best)" "(median/best)" "(medians)" ""
added=0
first_metrics=
for idle in 0 $((METRICS_IDLE / 10)) "$METRICS_IDLE"; do
	if [ "$idle" -gt "$added" ]; then
		q "$DB" "CALL bench_idle($((added + 1)), $((idle - added)))" >/dev/null
		added=$idle
		q "$DB" "VACUUM ANALYZE gridha.service_claims" >/dev/null
	fi
	read -r mm mb < <(figures "$(q "$DB" "SELECT bench_scrape('SELECT * FROM gridha.metrics', $METRICS_SCRAPES)")")
	read -r bm bb < <(figures "$(q "$DB" "SELECT bench_scrape('SELECT * FROM bench_baseline', $METRICS_SCRAPES)")")
	same=$(q "$DB" "SELECT CASE WHEN count(*) = 0 THEN 'same' ELSE 'DIFFER' END FROM (
		(SELECT target, backlog, in_flight, enqueued_total, committed_total, invalid_total, resubmitted_total
		   FROM gridha.metrics WHERE scope = 'target'
		 EXCEPT SELECT target, backlog, in_flight, enqueued_total, committed_total, invalid_total, resubmitted_total
		   FROM bench_baseline)
		UNION ALL
		(SELECT target, backlog, in_flight, enqueued_total, committed_total, invalid_total, resubmitted_total
		   FROM bench_baseline
		 EXCEPT SELECT target, backlog, in_flight, enqueued_total, committed_total, invalid_total, resubmitted_total
		   FROM gridha.metrics WHERE scope = 'target')) d")
	[ -n "$first_metrics" ] || first_metrics=$mm
	printf '%-12s %16s %16s %18s %10s\n' "$idle" "$mm / $mb" "$bm / $bb" "$(ratio "$mm" "$bm")" "$same"
done
echo "metrics: the scrape with $METRICS_IDLE idle services against none: $(ratio "$mm" "$first_metrics") (medians)"
q "$DB" "SELECT 'metrics: services with work ' || count(*) FILTER (WHERE head_seq IS NOT NULL)
                || ', in flight ' || count(*) FILTER (WHERE in_flight)
                || ', idle ' || count(*) FILTER (WHERE head_seq IS NULL)
           FROM gridha.service_claims"
