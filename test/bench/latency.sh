#!/usr/bin/env bash
# test/bench/latency.sh: workers against ledger latency (`make bench`).
#
# Measures and prints; it never fails on a figure. It runs on a throwaway
# cluster of test/lib.sh (shared_buffers 512MB, fsync and
# synchronous_commit on) with gridha preloaded and LAT_WORKERS background
# workers (3), and the test ledger (test/dlt/ledger.py) answering each POST
# and each status GET after LAT_LATENCY seconds (0.02) and committing a
# batch LAT_COMMIT_DELAY seconds (0.5) after accepting it. Both are removed
# at exit.
#
# The workload: LAT_SERVICES services x LAT_DEPTH batches (1000 x 10),
# enqueued in one transaction (batch r of every service before batch r + 1
# of any; batch ids unique, as the ledger wants them), 100-byte payloads. Before the runs, one batch
# per service is drained by the workers (the warm-up): every service exists
# and the workers hold their shares. The rate is counted in the database:
# the workload's batches / (last commit - first hand-out).
#
# What bounds it: a service has one batch in flight at a time, and a batch
# is in flight for its POST (the latency), the commit delay, the wait for
# the next monitor round (up to gridha.monitor_interval) and the status GET
# (the latency again); so the services together make at most
#   services / (commit delay + monitor interval + 2 x latency)
# batches/s. A worker has at most gridha.worker_inflight POSTs in flight,
# each taking the latency; so the workers make at most
#   workers x inflight / latency
# The bound printed is the smaller of the two; the target is 0.7 of it.
# The same workload with gridha.worker_inflight = 1 (one POST at a time, as
# in 1.0) is printed beside it, with its own bound.
#
# Each case runs LAT_RUNS times (1), the cases alternating; the figure is
# the median run.
#
# Environment (defaults in brackets):
#   LAT_SERVICES [1000]    services        LAT_DEPTH [10]     batches each
#   LAT_WORKERS [3]        workers         LAT_INFLIGHT [64 1] the cases:
#                                          gridha.worker_inflight of each
#   LAT_LATENCY [0.02]     ledger latency per POST and per status GET (s)
#   LAT_COMMIT_DELAY [0.5] ledger commit delay (s)
#   LAT_MONITOR_MS [500]   gridha.monitor_interval
#   LAT_RUNS [1]           runs of each case
#   LAT_TIMEOUT [600]      a run not done after this long is stopped
#   LAT_PORT [56460]       first port probed
#   GRIDHA_KEEP_TMP [0]    1: keep the cluster's directory (logs)
set -eu -o pipefail

LAT_SERVICES=${LAT_SERVICES:-1000}
LAT_DEPTH=${LAT_DEPTH:-10}
LAT_WORKERS=${LAT_WORKERS:-3}
LAT_INFLIGHT=${LAT_INFLIGHT:-64 1}
LAT_LATENCY=${LAT_LATENCY:-0.02}
LAT_COMMIT_DELAY=${LAT_COMMIT_DELAY:-0.5}
LAT_MONITOR_MS=${LAT_MONITOR_MS:-500}
LAT_RUNS=${LAT_RUNS:-1}
LAT_TIMEOUT=${LAT_TIMEOUT:-600}
export GRIDHA_BASE_PORT=${LAT_PORT:-56460}

TARGET=0.70	# rate / bound

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# shellcheck source=../lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=common.sh
. "$HERE/common.sh"

DB=lat
LEDGER_PID=
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	[ -z "$LEDGER_PID" ] || kill "$LEDGER_PID" 2>/dev/null || true
	gridha_cluster_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() {
	gridha_log "ERROR: $*"
	exit 1
}

# bound INFLIGHT: min(services / (commit delay + monitor + 2 latency),
# workers x inflight / latency), batches/s
bound() {
	awk -v s="$LAT_SERVICES" -v cd="$LAT_COMMIT_DELAY" -v mi="$LAT_MONITOR_MS" -v l="$LAT_LATENCY" \
		-v w="$LAT_WORKERS" -v i="$1" 'BEGIN {
		a = s / (cd + mi / 1000 + 2 * l); b = (l > 0) ? w * i / l : a
		printf "%.0f %.0f %.0f", (a < b ? a : b), a, b }'
}

# proc_cpu_ms PID: CPU (user + system, ms) the process has used so far.
proc_cpu_ms() {
	awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); print int(($12 + $13) * 1000 / hz) }' "/proc/$1/stat"
}

# ledger_stats: the ledger's counts, "name=value ..." of a few.
ledger_stats() {
	python3 - "$LEDGER/stats" <<'EOF'
import json, sys, urllib.request
s = json.load(urllib.request.urlopen(sys.argv[1], timeout=10))
print(" ".join("%s=%s" % (k, s.get(k)) for k in
               ("posts", "accepted", "duplicates", "status_queries", "committed", "latency_waits")))
EOF
}

t_start=$SECONDS
gridha_log "workers against latency: $LAT_SERVICES services x $LAT_DEPTH batches, $LAT_WORKERS workers," \
	"latency ${LAT_LATENCY}s, commit delay ${LAT_COMMIT_DELAY}s, monitor ${LAT_MONITOR_MS}ms, inflight: $LAT_INFLIGHT; $(nproc) cores"

gridha_cluster_init
python3 "$ROOT/test/dlt/ledger.py" --port 0 --port-file "$GRIDHA_TEST_DIR/ledger.port" \
	--latency "$LAT_LATENCY" --commit-delay "$LAT_COMMIT_DELAY" --max-lifetime 86400 \
	>"$GRIDHA_TEST_DIR/ledger.out" 2>&1 &
LEDGER_PID=$!
for _i in $(seq 1 100); do
	[ -s "$GRIDHA_TEST_DIR/ledger.port" ] && break
	sleep 0.1
done
[ -s "$GRIDHA_TEST_DIR/ledger.port" ] || die "the test ledger did not start: $(cat "$GRIDHA_TEST_DIR/ledger.out")"
LEDGER=http://127.0.0.1:$(cat "$GRIDHA_TEST_DIR/ledger.port")

first_inflight=${LAT_INFLIGHT%% *}
bench_start_cluster shared_preload_libraries=gridha max_worker_processes=$((LAT_WORKERS + 8)) \
	"gridha.workers=$LAT_WORKERS" "gridha.database=$DB" "gridha.monitor_interval=${LAT_MONITOR_MS}ms" \
	"gridha.worker_inflight=$first_inflight"
bench_gridha_db "$DB"
q "$DB" "UPDATE gridha.targets
            SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
                status_url = '$LEDGER/batch_statuses?id={batch_ids}'
          WHERE target = 'default'" >/dev/null

# lat_enqueue(prefix, n, rounds): the workload in one transaction, batch r
# of every service before batch r + 1 of any, with batch ids the ledger can
# tell apart (it takes them to be globally unique): <prefix><r>.<service
# number>. One transaction, not one per round: while the workers run, an
# enqueue of many services per transaction can deadlock with a worker's
# batched report of services it touches in another order (40P01 for one of
# them); a single transaction committed while nothing is in flight cannot.
q "$DB" "CREATE PROCEDURE lat_enqueue(prefix text, n_services bigint, rounds int)
         LANGUAGE sql
         AS \$\$
             INSERT INTO gridha.batches (service_id, batch_id, payload)
             SELECT bench_service(i), prefix || r || '.' || i, bench_payload()
               FROM generate_series(1, rounds) AS r, generate_series(1, n_services) AS i
              ORDER BY r, i;
         \$\$" >/dev/null

# The workers' instances: registered, live.
for _i in $(seq 1 300); do
	[ "$(q "$DB" "SELECT count(*) FROM gridha.workers WHERE instance_id IS NOT NULL")" -ge "$LAT_WORKERS" ] && break
	sleep 0.1
done
[ "$(q "$DB" "SELECT count(*) FROM gridha.workers WHERE instance_id IS NOT NULL")" -ge "$LAT_WORKERS" ] ||
	die "the workers did not start (server log: $GRIDHA_PGLOG)"

# wait_drained PREFIX: until no service has a batch left (or LAT_TIMEOUT);
# samples the POSTs in flight meanwhile. Sets LEFT, PEAK, MEANIF.
wait_drained() {
	local t0=$SECONDS n=0 sum=0 inf
	PEAK=0
	while [ $((SECONDS - t0)) -lt "$LAT_TIMEOUT" ]; do
		LEFT=$(q "$DB" "SELECT bench_left()")
		[ "$LEFT" != 0 ] || break
		inf=$(q "$DB" "SELECT coalesce(sum(in_flight), 0) FROM gridha.workers")
		[ "$inf" -le "$PEAK" ] || PEAK=$inf
		sum=$((sum + inf))
		n=$((n + 1))
		sleep 0.2
	done
	MEANIF=$(awk -v s="$sum" -v n="$n" 'BEGIN { printf "%.0f", n ? s / n : 0 }')
}

# warm-up: one batch per service, drained by the workers
t0=$SECONDS
q "$DB" "CALL lat_enqueue('warm_', $LAT_SERVICES, 1)"
wait_drained
[ "$LEFT" = 0 ] || die "warm-up: $LEFT services not drained after ${LAT_TIMEOUT}s"
gridha_log "warm-up: $LAT_SERVICES batches drained in $((SECONDS - t0))s; claims per worker:" \
	"$(q "$DB" "SELECT string_agg(held::text, ' ' ORDER BY held) FROM gridha.instances WHERE kind = 'worker' AND held > 0")"

declare -A RATES NOTES
for run in $(seq 1 "$LAT_RUNS"); do
	cases=$LAT_INFLIGHT
	# shellcheck disable=SC2086 # one word per case
	[ $((run % 2)) = 1 ] || cases=$(rotate 1 $LAT_INFLIGHT)
	for inf in $cases; do
		prefix="r${run}i${inf}_"
		q postgres "ALTER SYSTEM SET gridha.worker_inflight = $inf" -c "SELECT pg_reload_conf()" >/dev/null
		sleep 1
		bench_prepare "$DB" gridha.batches gridha.service_claims gridha.instances
		stats0=$(ledger_stats)
		cpu0=$(server_cpu_ms)
		lcpu0=$(proc_cpu_ms "$LEDGER_PID")
		q "$DB" "CALL lat_enqueue('$prefix', $LAT_SERVICES, $LAT_DEPTH)"
		wait_drained
		cpu=$(server_cpu_ms)
		lcpu=$(proc_cpu_ms "$LEDGER_PID")
		row=$(q "$DB" "SELECT count(*) FILTER (WHERE status = 'committed'),
		                      extract(epoch FROM max(finished_at) - min(handed_out_at)),
		                      count(*) FILTER (WHERE attempts > 1),
		                      round(avg(extract(epoch FROM submitted_at - handed_out_at)) * 1000),
		                      round(avg(extract(epoch FROM finished_at - submitted_at)) * 1000)
		                 FROM gridha.batches WHERE starts_with(batch_id, '$prefix')")
		IFS='|' read -r n secs retried post_ms wait_ms <<<"$row"
		gap_ms=$(q "$DB" "SELECT round(avg(extract(epoch FROM handed_out_at - prev)) * 1000)
		                   FROM (SELECT handed_out_at, lag(finished_at) OVER (PARTITION BY service_id ORDER BY seq) AS prev
		                           FROM gridha.batches WHERE starts_with(batch_id, '$prefix')) s
		                  WHERE prev IS NOT NULL")
		rate=$(awk -v n="$n" -v t="$secs" 'BEGIN { if (t > 0) printf "%.0f", n / t; else print 0 }')
		read -r b b_svc b_wrk <<<"$(bound "$inf")"
		note=
		[ "$LEFT" = 0 ] || note="not finished: $LEFT services left"
		[ "$retried" = 0 ] || note="$note $retried batches handed out more than once"
		gridha_log "$(printf '  inflight %-3s #%s %6s batches/s (%s in %.2fs), bound %s (services %s, workers %s): %s;' \
			"$inf" "$run" "$rate" "$n" "$secs" "$b" "$b_svc" "$b_wrk" "$(ratio "$rate" "$b")")" \
			"per batch: hand-out to accepted ${post_ms} ms, accepted to committed ${wait_ms} ms," \
			"committed to next hand-out ${gap_ms} ms; POSTs in flight: peak $PEAK, mean $MEANIF;" \
			"server CPU $(((cpu - cpu0) * 1000 / (n > 0 ? n : 1))) us/batch, ledger CPU $(((lcpu - lcpu0) * 1000 / (n > 0 ? n : 1))) us/batch;" \
			"ledger before: $stats0; after: $(ledger_stats)" \
			"${note:+ WARNING: $note}"
		RATES[$inf]="${RATES[$inf]:-} $rate"
		NOTES[$inf]="per batch: POST+report ${post_ms} ms, accepted->committed seen ${wait_ms} ms, ->next hand-out ${gap_ms} ms; in flight peak $PEAK mean $MEANIF"
	done
done

echo
echo "workers against latency: $LAT_SERVICES services x $LAT_DEPTH batches, $LAT_WORKERS workers, ledger latency" \
	"${LAT_LATENCY}s per POST and per status GET, commit delay ${LAT_COMMIT_DELAY}s, gridha.monitor_interval" \
	"${LAT_MONITOR_MS}ms; synchronous_commit on, $(nproc) cores, PostgreSQL $(q postgres "SHOW server_version" | cut -d' ' -f1)"
echo "batches/s: the workload's batches / (last commit - first hand-out), from the rows; median of $LAT_RUNS run(s)."
echo "bound: min(services / (commit delay + monitor interval + 2 x latency), workers x inflight / latency)."
echo
printf '  %-34s %9s  %9s  %6s  %s\n' case batches/s bound ratio target
for inf in $LAT_INFLIGHT; do
	r=$(median "${RATES[$inf]}")
	read -r b _ _ <<<"$(bound "$inf")"
	rr=$(ratio "$r" "$b")
	if [ "$inf" = "$first_inflight" ]; then t="≥$TARGET $(verdict "$rr" $TARGET)"; else t="(comparison)"; fi
	printf '  %-34s %9s  %9s  %6s  %s\n' "gridha.worker_inflight = $inf" "$r" "$b" "$rr" "$t"
done
echo
for inf in $LAT_INFLIGHT; do
	echo "  inflight $inf: runs (batches/s):${RATES[$inf]}; ${NOTES[$inf]}"
done
echo "  total bench time: $((SECONDS - t_start))s"
