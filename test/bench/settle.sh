#!/usr/bin/env bash
# test/bench/settle.sh: what a lone report that empties a queue costs when
# a transaction makes many of them (`make bench`; docs/benchmarks.md,
# "Settling in one transaction").
#
# Measures and prints; it never fails on a figure. One throwaway cluster
# (common.sh), one database, one instance, SETTLE_REPORTS services of one
# batch each, all handed out first (not timed). Each report here empties its
# service's queue, so it settles into the backend's gridha.target_totals row
# of the target: a transaction of N lone report_status calls rewrites that
# row N times. Side by side in the same run, SETTLE_ROUNDS rounds each, the
# same SETTLE_REPORTS reports:
#   baseline  committed every SETTLE_CHUNK reports
#   one       in one transaction
# timed in the server (clock_timestamp around the loop). Printed:
# microseconds per report (median of the rounds) and one/baseline. A report
# whose cost grows with the reports before it in its transaction shows as a
# ratio well above 1 (before 1.2's fix: 4.5 at 16,000 reports).
#
# Environment (defaults in brackets): SETTLE_REPORTS [16000],
# SETTLE_CHUNK [1000], SETTLE_ROUNDS [3], SETTLE_PORT [56600];
# BENCH_PAYLOAD as in common.sh.
set -eu -o pipefail

SETTLE_REPORTS=${SETTLE_REPORTS:-16000}
SETTLE_CHUNK=${SETTLE_CHUNK:-1000}
SETTLE_ROUNDS=${SETTLE_ROUNDS:-3}
export GRIDHA_BASE_PORT=${SETTLE_PORT:-56600}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# shellcheck source=../lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=common.sh
. "$HERE/common.sh"

trap gridha_cluster_cleanup EXIT
trap 'exit 130' INT TERM

DB=settle
gridha_log "settle: $SETTLE_REPORTS lone reports in one transaction against transactions of $SETTLE_CHUNK, $SETTLE_ROUNDS rounds, $(nproc) cores"
bench_start_cluster gridha.prune_interval=-1
bench_gridha_db "$DB"

qf "$DB" >/dev/null <<EOF
SET client_min_messages = warning;
CREATE TABLE bench_handed (service_id text, batch_id text, epoch bigint);

/*
 * bench_round(n, chunk): n services of one batch, taken and handed out by
 * the instance (committed), then n lone reports, each emptying its queue,
 * committed every chunk reports: microseconds per report.
 */
CREATE PROCEDURE bench_round(n int, chunk int, INOUT us float8 DEFAULT NULL)
LANGUAGE plpgsql
AS \$\$
DECLARE
    me uuid;
    r record;
    t0 timestamptz;
    got int;
BEGIN
    TRUNCATE gridha.batches, gridha.service_claims, gridha.leases, gridha.target_totals, bench_handed;
    DELETE FROM gridha.instances;
    me := gridha.register_instance('bench');
    INSERT INTO gridha.batches (service_id, batch_id, payload)
    SELECT 's' || i, 's' || i || '-1', bench_payload()
      FROM generate_series(1, n) AS i
     ORDER BY ('s' || i) COLLATE "C";
    COMMIT;
    LOOP
        SELECT count(*) INTO got FROM gridha.acquire_claims(me);
        COMMIT;
        EXIT WHEN got = 0;
    END LOOP;
    LOOP
        INSERT INTO bench_handed SELECT x.service_id, x.batch_id, x.epoch FROM gridha.next_batches(me, 10000) x;
        GET DIAGNOSTICS got = ROW_COUNT;
        COMMIT;
        EXIT WHEN got = 0;
    END LOOP;
    got := 0;
    t0 := clock_timestamp();
    FOR r IN SELECT * FROM bench_handed LOOP
        PERFORM gridha.report_status(me, r.service_id, r.batch_id, r.epoch, 'committed');
        got := got + 1;
        IF got % chunk = 0 THEN
            COMMIT;
        END IF;
    END LOOP;
    us := extract(epoch FROM clock_timestamp() - t0) * 1e6 / n;
    IF (SELECT sum(settled_committed) FROM gridha.target_totals) IS DISTINCT FROM n THEN
        RAISE EXCEPTION 'settled % of % reports', (SELECT sum(settled_committed) FROM gridha.target_totals), n;
    END IF;
    COMMIT;
END
\$\$;
EOF

round() {
	q "$DB" "CALL bench_round($SETTLE_REPORTS, $1)"
}

base=()
one=()
for ((i = 1; i <= SETTLE_ROUNDS; i++)); do
	base+=("$(round "$SETTLE_CHUNK")")
	one+=("$(round "$SETTLE_REPORTS")")
done
b=$(median "${base[*]}")
o=$(median "${one[*]}")
printf '%-10s %22s %18s  %s\n' "case" "reports a transaction" "us/report (med)" "rounds"
printf '%-10s %22s %18s  %s\n' "baseline" "$SETTLE_CHUNK" "$b" "$(printf '%.1f ' "${base[@]}")"
printf '%-10s %22s %18s  %s\n' "one" "$SETTLE_REPORTS" "$o" "$(printf '%.1f ' "${one[@]}")"
r=$(ratio "$o" "$b")
echo "settle: $SETTLE_REPORTS lone reports in one transaction against transactions of $SETTLE_CHUNK: $r per report (target at most 1.2: $(verdict "$r" 1.2 le))"
