#!/usr/bin/env bash
# test/suites/26_metrics.sh: gridha's metrics through a real
# prometheus-postgres-exporter and a real Prometheus (Debian packages,
# installed here when missing), while two background workers serve a
# steady load.
#
#   exporter    prometheus-postgres-exporter with monitoring/gridha-queries.yaml
#               against the suite's database, on 127.0.0.1: its /metrics
#               has gridha_target_* and gridha_instance_* series, and
#               gridha_target_committed_total lies between what the database
#               said just before and just after the scrape, and so do
#               the claims taken over and the stale writes refused; the workers'
#               instances are there with their claims and leases
#   prometheus  prometheus scraping the exporter every second, on
#               127.0.0.1, with its data in the suite's directory: its HTTP
#               query API gives a committed-batches rate,
#               rate(gridha_target_committed_total[10s]), above zero and
#               within a factor of 3 of the rate counted in the database
#
# Everything this suite starts listens on 127.0.0.1 only and is stopped at
# exit (by pid); each wait is bounded. Without the packages (no apt-get, no
# network) the tests are skipped, never passed. Runs in a database of its
# own, with the cluster restarted with two workers serving it, and at the
# end with the phase 2 settings again.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
DB=gridha_metrics_test
FAILED=0
PIDS=()
N_TESTS=9

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan "$N_TESTS"
suite_work metrics

EXPORTER=/usr/bin/prometheus-postgres-exporter
PROMETHEUS=/usr/bin/prometheus

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}

cleanup() {
	local p
	for p in "${PIDS[@]}"; do
		kill "$p" 2>/dev/null
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null
	done
	# shellcheck disable=SC2086 # the options are words
	gridha_cluster_restart $SUITE_CLUSTER_OPTS >/dev/null 2>&1 ||
		echo "# could not restart the cluster with the phase 2 settings" >&2
	psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1
}
trap cleanup EXIT

skip_all() {
	local i
	for i in $(seq 1 "$N_TESTS"); do
		skip_test "metrics test $i" "$1"
	done
	exit 0
}

# The packages
need=()
[ -x "$EXPORTER" ] || need+=(prometheus-postgres-exporter)
[ -x "$PROMETHEUS" ] || need+=(prometheus)
command -v curl >/dev/null || need+=(curl)
if [ "${#need[@]}" -gt 0 ]; then
	skip_all "$(gridha_missing_note "${need[@]}")"
fi

# The database: a target function that accepts everything (fire and forget:
# committed at once), two workers serving it
psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" \
	-c "CREATE DATABASE $DB" >/dev/null || exit 1
psql_db >/dev/null <<'EOF' || exit 1
CREATE EXTENSION gridha;
CREATE FUNCTION m_submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT 'accepted' $$;
UPDATE gridha.targets SET submit_function = 'm_submit(text,text,bytea,bigint)'
 WHERE target = 'default';
-- the load: rounds of one batch for each of 20 services, in service_id
-- order (COLLATE "C"), as docs/concurrency.md asks of a multi-row INSERT:
-- in the order m1, m2, ..., m20 it can deadlock with a worker's batched
-- report, which locks m1, m10, ..., m19, m2, m20, ... (seen once in 20 runs
-- on 17: the load ended and the rate below was 0)
CREATE PROCEDURE m_load(rounds int)
LANGUAGE plpgsql AS $$
BEGIN
    FOR r IN 1..rounds LOOP
        INSERT INTO gridha.batches (service_id, batch_id, payload)
        SELECT 'm' || i, 'm' || i || '-' || r, '\x00'
          FROM generate_series(1, 20) AS i
         ORDER BY ('m' || i) COLLATE "C";
        COMMIT;
        PERFORM pg_sleep(0.02);
    END LOOP;
END
$$;
EOF
# shellcheck disable=SC2086 # the options are words
if ! gridha_cluster_restart $SUITE_CLUSTER_OPTS gridha.workers=2 gridha.database=$DB \
		gridha.naptime=100ms gridha.monitor_interval=100ms; then
	not_ok "metrics: the cluster restarted with two workers"
	exit 1
fi

psql_db -c "CALL m_load(5000)" >"$WORK/load.log" 2>&1 &
PIDS+=($!)

committed() {
	psql_db -c "SELECT coalesce(sum(committed_total), 0) FROM gridha.service_claims WHERE target = 'default'"
}
moving() {
	[ "$(committed)" -gt 100 ]
}
wait_until 30 moving
check $? "metrics: the workers commit the load ($(committed) committed)"

# The exporter
EXP_PORT=$(gridha_free_port 9187) || exit 1
DATA_SOURCE_NAME="postgresql://$PGUSER@127.0.0.1:$PGPORT/$DB?sslmode=disable" \
	"$EXPORTER" --web.listen-address="127.0.0.1:$EXP_PORT" \
	--extend.query-path="$REPO/monitoring/gridha-queries.yaml" \
	--disable-settings-metrics >"$WORK/exporter.log" 2>&1 &
PIDS+=($!)
scrape() {
	curl -fsS --max-time 5 "http://127.0.0.1:$EXP_PORT/metrics" >"$WORK/metrics.txt" 2>/dev/null &&
		grep -q '^gridha_target_committed_total' "$WORK/metrics.txt"
}
wait_until 30 scrape
check $? "exporter: /metrics has gridha_target_committed_total"
if ! scrape; then
	diag <"$WORK/exporter.log"
fi

# value NAME LABELMATCH: the value of the first series of NAME whose labels
# contain LABELMATCH, from the last scrape
value() {
	awk -v n="$1" -v m="$2" '$1 ~ "^" n "[{ ]" || $1 == n { if (index($0, m)) { print $NF; exit } }' "$WORK/metrics.txt"
}

# the two totals of gridha.target_totals, as "taken stale", from gridha.metrics
target_totals() {
	psql_db -c "SELECT claims_taken_over_total || ' ' || stale_writes_refused_total FROM gridha.metrics WHERE scope = 'target' AND target = 'default'"
}

before=$(committed)
totals_before=$(target_totals)
scrape
after=$(committed)
totals_after=$(target_totals)
got=$(value gridha_target_committed_total 'target="default"')
awk -v b="$before" -v g="$got" -v a="$after" 'BEGIN { exit !(g != "" && g + 0 >= b && g + 0 <= a) }'
check $? "exporter: gridha_target_committed_total{target=\"default\"} ($got) lies between the database's counts before ($before) and after ($after) the scrape"

got=$(value gridha_target_enqueued_total 'target="default"')
want=$(psql_db -c "SELECT sum(tail_seq) FROM gridha.service_claims WHERE target = 'default'")
awk -v g="$got" -v w="$want" 'BEGIN { exit !(g != "" && g + 0 <= w && g + 0 > 0) }'
check $? "exporter: gridha_target_enqueued_total ($got) is at most what was enqueued by now ($want), and not 0"

taken=$(value gridha_target_claims_taken_over_total 'target="default"')
stale=$(value gridha_target_stale_writes_refused_total 'target="default"')
awk -v t="$taken" -v s="$stale" -v b="$totals_before" -v a="$totals_after" 'BEGIN {
	split(b, lo, " "); split(a, hi, " ")
	exit !(t != "" && s != "" && t + 0 >= lo[1] && t + 0 <= hi[1] && s + 0 >= lo[2] && s + 0 <= hi[2])
}'
check $? "exporter: gridha_target_claims_taken_over_total ($taken) and gridha_target_stale_writes_refused_total ($stale) lie between the database's before ($totals_before) and after ($totals_after) the scrape"

backlog=$(value gridha_target_backlog 'target="default"')
[ -n "$backlog" ] && grep -q '^gridha_target_oldest_ready_age_seconds{' "$WORK/metrics.txt" &&
	grep -q '^gridha_target_in_flight{' "$WORK/metrics.txt"
check $? "exporter: the target's gauges backlog ($backlog), oldest_ready_age_seconds and in_flight are there"

workers=$(psql_db -c "SELECT string_agg(instance_id::text, ' ') FROM gridha.instances WHERE kind = 'worker' AND soft_expiry > now()")
ok_inst=0
n_inst=0
for w in $workers; do
	n_inst=$((n_inst + 1))
	held=$(value gridha_instance_claims_held "instance_id=\"$w\"")
	lease=$(value gridha_instance_lease_remaining_seconds "instance_id=\"$w\"")
	awk -v h="$held" -v l="$lease" 'BEGIN { exit !(h != "" && l != "" && l + 0 > 0) }' && ok_inst=$((ok_inst + 1))
done
[ "$n_inst" -eq 2 ] && [ "$ok_inst" -eq 2 ]
check $? "exporter: both workers' instances have gridha_instance_claims_held and a lease_remaining_seconds above 0 ($ok_inst of $n_inst)"

# Prometheus
PROM_PORT=$(gridha_free_port 9090) || exit 1
cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: gridha
    static_configs:
      - targets: ['127.0.0.1:$EXP_PORT']
EOF
"$PROMETHEUS" --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
	--storage.tsdb.retention.time=1h --web.listen-address="127.0.0.1:$PROM_PORT" \
	>"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)

# prom_query EXPR: the first sample's value of an instant query, or nothing
prom_query() {
	curl -fsS --max-time 5 -G "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" 2>/dev/null |
		python3 -c 'import json, sys
r = json.load(sys.stdin)
res = r.get("data", {}).get("result", [])
print(res[0]["value"][1] if r.get("status") == "success" and res else "")' 2>/dev/null
}
up() {
	[ "$(prom_query 'up{job="gridha"}')" = 1 ]
}
wait_until 30 up
check $? "prometheus: scrapes the exporter (up{job=\"gridha\"} = 1)"
if ! up; then
	tail -20 "$WORK/prometheus.log" | diag
fi

# the rate over 10 s of samples, against the database's own count
c0=$(committed)
t0=$(date +%s.%N)
have_rate() {
	[ -n "$(prom_query 'rate(gridha_target_committed_total{target="default"}[10s])')" ]
}
sleep 12
wait_until 20 have_rate
rate=$(prom_query 'rate(gridha_target_committed_total{target="default"}[10s])')
c1=$(committed)
t1=$(date +%s.%N)
db_rate=$(awk -v a="$c0" -v b="$c1" -v s="$t0" -v e="$t1" 'BEGIN { printf "%.1f", (b - a) / (e - s) }')
awk -v r="$rate" -v d="$db_rate" 'BEGIN { exit !(r != "" && r + 0 > 0 && r + 0 <= 3 * d && r + 0 >= d / 3) }'
rc=$?
check $rc "prometheus: the query API's committed rate ($rate batches/s) is above 0 and within 3x of the database's ($db_rate batches/s)"
[ "$rc" -eq 0 ] || diag <"$WORK/load.log"   # the load's own error, if it ended

gridha_log "metrics: $(committed) committed; exporter on $EXP_PORT, prometheus on $PROM_PORT"
[ "$FAILED" -eq 0 ]
