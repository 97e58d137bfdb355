#!/usr/bin/env bash
# test/bench/latency.sh: workers against ledgers of different kinds (`make
# bench`): how the workers' adaptive concurrency (src/submit.c) copes.
#
# Measures and prints; it never fails on a figure. It runs on a throwaway
# cluster of test/lib.sh (shared_buffers 512MB, fsync and
# synchronous_commit on) with gridha preloaded and LAT_WORKERS background
# workers (3), gridha.worker_inflight = LAT_INFLIGHT (64, the ceiling of
# each worker's limit per target), and the test ledger (test/dlt/ledger.py,
# a new one per case) committing a batch LAT_COMMIT_DELAY seconds (0.5)
# after accepting it. Both are removed at exit. The cases (LAT_CASES):
#
#   keepalive  the ledger speaks HTTP/1.1 with keep-alive and answers each
#              POST and status GET after LAT_LATENCY (0.02 s);
#              LAT_SERVICES x LAT_DEPTH batches (1000 x 10). Target: 0.9
#   http10     the ledger speaks HTTP/1.0 (a new connection per request)
#              with an accept queue of 5 (Python's http.server default),
#              same latency; LAT_HTTP10_SERVICES x LAT_HTTP10_DEPTH batches
#              (300 x 10). Target: 0.6
#   jump       as keepalive, LAT_SERVICES x LAT_JUMP_DEPTH batches (1000 x
#              25); LAT_JUMP_AT seconds (5) into the run the latency jumps
#              to LAT_JUMP_LATENCY (0.5 s) for LAT_JUMP_SECONDS (20), then
#              comes back. Printed: batches marked invalid (must be 0), the
#              duplicates the ledger saw, and how long after the latency
#              came back the rate (over 2 s) reached 0.9 of the bound
#              (target: within 10 s)
#   hang       a ledger that accepts connections but never answers status
#              polls; with a poll of a worker held, SIGTERM to that worker:
#              how long until it exited (target: within 1 s)
#   cold_keepalive, cold_http10
#              as keepalive and http10 from a cold start: the cluster is
#              restarted first (new workers, whose limits know no ledger
#              yet), the ledger is new, there is no warm-up, and the
#              services are ones no worker claimed before; http10's
#              workload is LAT_HTTP10_SERVICES x LAT_COLD_HTTP10_DEPTH
#              (300 x 5 = 1,500 batches). Targets: 0.9 and 0.6
#
# Each case but the cold ones starts with a new ledger and a warm-up
# against it (one batch per service, not measured, its time logged), so
# that the workers meet the ledger before they are measured.
#
# The workload of a case is enqueued in one transaction (batch r of every
# service before batch r + 1 of any; batch ids unique, as the ledger wants
# them), 100-byte payloads. Before the cases, one batch per service is
# drained by the workers (the warm-up). The rate is counted in the
# database: the workload's batches / (last commit - first hand-out).
#
# What bounds it: a service has one batch in flight at a time, and a batch
# is in flight for its POST (the latency), the commit delay, the wait for
# the next monitor round (up to gridha.monitor_interval) and the status GET
# (the latency again); so the services together make at most
#   services / (commit delay + monitor interval + 2 x latency)
# batches/s. A worker has at most gridha.worker_inflight requests in
# flight, each taking the latency; so the workers make at most
#   workers x inflight / latency
# The bound printed is the smaller of the two.
#
# While a case runs, a line a second shows the rate of that second (batches
# committed) and each worker's limit for the target (gridha_worker_limits(),
# the C function behind the limits view), so a reader sees them adapt.
#
# Environment (defaults in brackets):
#   LAT_CASES [cold_keepalive keepalive cold_http10 http10 jump hang]
#   LAT_COLD_HTTP10_DEPTH [5]
#   LAT_SERVICES [1000]  LAT_DEPTH [10]  LAT_WORKERS [3]  LAT_INFLIGHT [64]
#   LAT_HTTP10_SERVICES [300]  LAT_HTTP10_DEPTH [10]  LAT_HTTP10_BACKLOG [5]
#   LAT_JUMP_DEPTH [25]  LAT_JUMP_AT [5]  LAT_JUMP_SECONDS [20]
#   LAT_JUMP_LATENCY [0.5]
#   LAT_LATENCY [0.02]     ledger latency per POST and per status GET (s)
#   LAT_COMMIT_DELAY [0.5] ledger commit delay (s)
#   LAT_MONITOR_MS [500]   gridha.monitor_interval
#   LAT_TIMEOUT [600]      a run not done after this long is stopped
#   LAT_PORT [56460]       first port probed
#   GRIDHA_KEEP_TMP [0]    1: keep the cluster's directory (logs)
set -eu -o pipefail

LAT_CASES=${LAT_CASES:-cold_keepalive keepalive cold_http10 http10 jump hang}
LAT_COLD_HTTP10_DEPTH=${LAT_COLD_HTTP10_DEPTH:-5}
LAT_SERVICES=${LAT_SERVICES:-1000}
LAT_DEPTH=${LAT_DEPTH:-10}
LAT_WORKERS=${LAT_WORKERS:-3}
LAT_INFLIGHT=${LAT_INFLIGHT:-64}
LAT_HTTP10_SERVICES=${LAT_HTTP10_SERVICES:-300}
LAT_HTTP10_DEPTH=${LAT_HTTP10_DEPTH:-10}
LAT_HTTP10_BACKLOG=${LAT_HTTP10_BACKLOG:-5}
LAT_JUMP_DEPTH=${LAT_JUMP_DEPTH:-25}
LAT_JUMP_AT=${LAT_JUMP_AT:-5}
LAT_JUMP_SECONDS=${LAT_JUMP_SECONDS:-20}
LAT_JUMP_LATENCY=${LAT_JUMP_LATENCY:-0.5}
LAT_LATENCY=${LAT_LATENCY:-0.02}
LAT_COMMIT_DELAY=${LAT_COMMIT_DELAY:-0.5}
LAT_MONITOR_MS=${LAT_MONITOR_MS:-500}
LAT_TIMEOUT=${LAT_TIMEOUT:-600}
export GRIDHA_BASE_PORT=${LAT_PORT:-56460}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# shellcheck source=../lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=common.sh
. "$HERE/common.sh"

DB=lat
LEDGER_PID=
JUMP_PID=
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	[ -z "$JUMP_PID" ] || kill "$JUMP_PID" 2>/dev/null || true
	[ -z "$LEDGER_PID" ] || kill "$LEDGER_PID" 2>/dev/null || true
	gridha_cluster_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() {
	gridha_log "ERROR: $*"
	exit 1
}

# bound SERVICES: min(services / (commit delay + monitor + 2 latency),
# workers x inflight / latency), batches/s
bound() {
	awk -v s="$1" -v cd="$LAT_COMMIT_DELAY" -v mi="$LAT_MONITOR_MS" -v l="$LAT_LATENCY" \
		-v w="$LAT_WORKERS" -v i="$LAT_INFLIGHT" 'BEGIN {
		a = s / (cd + mi / 1000 + 2 * l); b = (l > 0) ? w * i / l : a
		printf "%.0f", (a < b ? a : b) }'
}

# ledger_start ARG...: a new test ledger (the last one stopped) with ARGs;
# the default target is pointed at it. Sets LEDGER and LEDGER_PID.
ledger_start() {
	local pf=$GRIDHA_TEST_DIR/ledger.port _i
	if [ -n "$LEDGER_PID" ]; then
		kill "$LEDGER_PID" 2>/dev/null || true
		wait "$LEDGER_PID" 2>/dev/null || true
	fi
	rm -f "$pf"
	python3 "$ROOT/test/dlt/ledger.py" --port 0 --port-file "$pf" --commit-delay "$LAT_COMMIT_DELAY" \
		--latency "$LAT_LATENCY" --max-lifetime 86400 "$@" >>"$GRIDHA_TEST_DIR/ledger.out" 2>&1 &
	LEDGER_PID=$!
	for _i in $(seq 1 100); do
		[ -s "$pf" ] && break
		sleep 0.1
	done
	[ -s "$pf" ] || die "the test ledger did not start: $(cat "$GRIDHA_TEST_DIR/ledger.out")"
	LEDGER=http://127.0.0.1:$(cat "$pf")
	q "$DB" "UPDATE gridha.targets
	            SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
	                status_url = '$LEDGER/batch_statuses?id={batch_ids}'
	          WHERE target = 'default'" >/dev/null
}

# ledger_control JSON: POST /control to the ledger.
ledger_control() {
	python3 - "$LEDGER/control" "$1" <<'EOF'
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(),
                             headers={"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=10).read()
EOF
}

# ledger_stat NAME: one count of the ledger's /stats.
ledger_stat() {
	python3 - "$LEDGER/stats" "$1" <<'EOF'
import json, sys, urllib.request
print(json.load(urllib.request.urlopen(sys.argv[1], timeout=10))[sys.argv[2]])
EOF
}

# limits: each worker's limit for target default, "a/b/c" ("-" without).
limits() {
	local l
	l=$(q "$DB" "SELECT string_agg(inflight_limit::text, '/' ORDER BY instance_id)
	               FROM lat_limits() WHERE target = 'default'" 2>/dev/null || true)
	echo "${l:--}"
}

t_start=$SECONDS
gridha_log "workers against ledgers: cases $LAT_CASES; $LAT_WORKERS workers, ceiling $LAT_INFLIGHT," \
	"latency ${LAT_LATENCY}s, commit delay ${LAT_COMMIT_DELAY}s, monitor ${LAT_MONITOR_MS}ms; $(nproc) cores"

CLUSTER_OPTS=(shared_preload_libraries=gridha max_worker_processes=$((LAT_WORKERS + 8))
	"gridha.workers=$LAT_WORKERS" "gridha.database=$DB" "gridha.monitor_interval=${LAT_MONITOR_MS}ms"
	"gridha.worker_inflight=$LAT_INFLIGHT")
bench_start_cluster "${CLUSTER_OPTS[@]}"
bench_gridha_db "$DB"
q "$DB" "CREATE FUNCTION lat_limits(OUT instance_id uuid, OUT target text, OUT in_flight integer,
                                     OUT inflight_limit integer, OUT failures bigint)
         RETURNS SETOF record LANGUAGE c AS '\$libdir/gridha', 'gridha_worker_limits'" >/dev/null 2>&1 ||
	gridha_log "this gridha has no gridha_worker_limits(): limits are not shown"
ledger_start

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
# ... of services first .. first + n - 1 (the cold cases' services, never
# claimed before)
q "$DB" "CREATE PROCEDURE lat_enqueue(prefix text, first bigint, n_services bigint, rounds int)
         LANGUAGE sql
         AS \$\$
             INSERT INTO gridha.batches (service_id, batch_id, payload)
             SELECT bench_service(i), prefix || r || '.' || i, bench_payload()
               FROM generate_series(1, rounds) AS r, generate_series(first, first + n_services - 1) AS i
              ORDER BY r, i;
         \$\$" >/dev/null

# workers_wait: until LAT_WORKERS workers run with an instance
workers_wait() {
	local _i
	for _i in $(seq 1 300); do
		[ "$(q "$DB" "SELECT count(*) FROM gridha.workers WHERE instance_id IS NOT NULL")" -ge "$LAT_WORKERS" ] && return 0
		sleep 0.1
	done
	die "the workers did not start (server log: $GRIDHA_PGLOG)"
}
workers_wait

# run_case PREFIX SERVICES DEPTH [FIRST]: the workload (of services FIRST
# on when given), until drained; a line a
# second (rate of that second, each worker's limit) into $TIMELINE. Sets
# RATE, N, SECS, LEFT, INVALID, RETRIED, LOAD (the load average when it
# started).
run_case() {
	local prefix=$1 t0=$SECONDS done0=0 d row secs_since
	TIMELINE=$GRIDHA_TEST_DIR/timeline.$prefix
	: >"$TIMELINE"
	# the machine's load when the case starts (others may share it)
	LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
	bench_prepare "$DB" gridha.batches gridha.service_claims gridha.instances
	if [ -n "${4:-}" ]; then
		q "$DB" "CALL lat_enqueue('$prefix', $4, $2, $3)" >/dev/null
	else
		q "$DB" "CALL lat_enqueue('$prefix', $2, $3)" >/dev/null
	fi
	CASE_T0=$(date +%s.%N)
	while [ $((SECONDS - t0)) -lt "$LAT_TIMEOUT" ]; do
		sleep 1
		row=$(q "$DB" "SELECT count(*) FILTER (WHERE status = 'committed'), bench_left()
		                 FROM gridha.batches WHERE starts_with(batch_id, '$prefix')")
		IFS='|' read -r d LEFT <<<"$row"
		secs_since=$(awk -v a="$CASE_T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
		printf '%s %s %s\n' "$secs_since" "$((d - done0))" "$(limits)" >>"$TIMELINE"
		done0=$d
		[ "$LEFT" != 0 ] || break
	done
	row=$(q "$DB" "SELECT count(*) FILTER (WHERE status = 'committed'),
	                      extract(epoch FROM max(finished_at) - min(handed_out_at)),
	                      count(*) FILTER (WHERE status = 'invalid'),
	                      count(*) FILTER (WHERE attempts > 1)
	                 FROM gridha.batches WHERE starts_with(batch_id, '$prefix')")
	IFS='|' read -r N SECS INVALID RETRIED <<<"$row"
	RATE=$(awk -v n="$N" -v t="$SECS" 'BEGIN { if (t > 0) printf "%.0f", n / t; else print 0 }')
}

# case_warmup NAME SERVICES: one batch per service against the case's
# ledger, drained before the case is measured, so that the workers have met
# that ledger (a limit grown over keep-alive meets an HTTP/1.0 ledger here,
# not in the measurement); logs how long it took.
case_warmup() {
	local t0=$SECONDS _i
	q "$DB" "CALL lat_enqueue('w$1_', $2, 1)" >/dev/null
	for _i in $(seq 1 "$LAT_TIMEOUT"); do
		[ "$(q "$DB" "SELECT bench_left()")" = 0 ] && break
		sleep 1
	done
	gridha_log "$1: warm-up against its ledger, $2 batches drained in $((SECONDS - t0))s; limits $(limits)"
}

# cold_start: the cluster restarted (new workers: their limits know no
# ledger yet), the workers waited for; a new ledger is the caller's.
COLD_FIRST=1000001
cold_start() {
	gridha_cluster_restart "${CLUSTER_OPTS[@]}" || die "the cluster did not restart"
	workers_wait
}

# print_timeline: the case's seconds, four to a line.
print_timeline() {
	awk '{ printf "  t=%3ss %5s/s limits %-12s%s", $1, $2, $3, (NR % 4 == 0) ? "\n" : "" }
	     END { if (NR % 4 != 0) printf "\n" }' "$TIMELINE"
}

# warm-up: one batch per service, drained by the workers
t0=$SECONDS
q "$DB" "CALL lat_enqueue('warm_', $LAT_SERVICES, 1)"
for _i in $(seq 1 "$LAT_TIMEOUT"); do
	[ "$(q "$DB" "SELECT bench_left()")" = 0 ] && break
	sleep 1
done
gridha_log "warm-up: $LAT_SERVICES batches drained in $((SECONDS - t0))s; claims per worker:" \
	"$(q "$DB" "SELECT string_agg(held::text, ' ' ORDER BY held) FROM gridha.instances WHERE kind = 'worker' AND held > 0")"

declare -A RESULT
for c in $LAT_CASES; do
	case $c in
		keepalive)
			ledger_start
			case_warmup keepalive "$LAT_SERVICES"
			dup0=$(ledger_stat duplicates)
			run_case ka_ "$LAT_SERVICES" "$LAT_DEPTH"
			b=$(bound "$LAT_SERVICES")
			r=$(ratio "$RATE" "$b")
			gridha_log "keepalive: $RATE batches/s ($N in ${SECS}s), bound $b: $r (target 0.9: $(verdict "$r" 0.9));" \
				"left $LEFT, invalid $INVALID, handed out again $RETRIED, ledger duplicates $(($(ledger_stat duplicates) - dup0)), connections $(ledger_stat connections); load average $LOAD"
			print_timeline
			RESULT[keepalive]="$RATE $b $r ≥0.9 $(verdict "$r" 0.9)"
			;;
		cold_keepalive)
			cold_start
			ledger_start
			run_case cka_ "$LAT_SERVICES" "$LAT_DEPTH" "$COLD_FIRST"
			COLD_FIRST=$((COLD_FIRST + LAT_SERVICES))
			b=$(bound "$LAT_SERVICES")
			r=$(ratio "$RATE" "$b")
			gridha_log "cold_keepalive: $RATE batches/s ($N in ${SECS}s), bound $b: $r (target 0.9: $(verdict "$r" 0.9));" \
				"left $LEFT, invalid $INVALID, handed out again $RETRIED, ledger connections $(ledger_stat connections); load average $LOAD"
			print_timeline
			RESULT[cold_keepalive]="$RATE $b $r ≥0.9 $(verdict "$r" 0.9)"
			;;
		cold_http10)
			cold_start
			ledger_start --http10 --backlog "$LAT_HTTP10_BACKLOG"
			run_case ch10_ "$LAT_HTTP10_SERVICES" "$LAT_COLD_HTTP10_DEPTH" "$COLD_FIRST"
			COLD_FIRST=$((COLD_FIRST + LAT_HTTP10_SERVICES))
			b=$(bound "$LAT_HTTP10_SERVICES")
			r=$(ratio "$RATE" "$b")
			gridha_log "cold_http10 (backlog $LAT_HTTP10_BACKLOG): $RATE batches/s ($N in ${SECS}s), bound $b: $r (target 0.6: $(verdict "$r" 0.6));" \
				"left $LEFT, invalid $INVALID, handed out again $RETRIED, ledger connections $(ledger_stat connections); load average $LOAD"
			print_timeline
			RESULT[cold_http10]="$RATE $b $r ≥0.6 $(verdict "$r" 0.6)"
			;;
		http10)
			ledger_start --http10 --backlog "$LAT_HTTP10_BACKLOG"
			case_warmup http10 "$LAT_HTTP10_SERVICES"
			run_case h10_ "$LAT_HTTP10_SERVICES" "$LAT_HTTP10_DEPTH"
			b=$(bound "$LAT_HTTP10_SERVICES")
			r=$(ratio "$RATE" "$b")
			gridha_log "http10 (backlog $LAT_HTTP10_BACKLOG): $RATE batches/s ($N in ${SECS}s), bound $b: $r (target 0.6: $(verdict "$r" 0.6));" \
				"left $LEFT, invalid $INVALID, handed out again $RETRIED, ledger connections $(ledger_stat connections); load average $LOAD"
			print_timeline
			RESULT[http10]="$RATE $b $r ≥0.6 $(verdict "$r" 0.6)"
			;;
		jump)
			ledger_start
			case_warmup jump "$LAT_SERVICES"
			dup0=$(ledger_stat duplicates)
			(
				sleep "$LAT_JUMP_AT"
				ledger_control "{\"latency\": $LAT_JUMP_LATENCY}"
				sleep "$LAT_JUMP_SECONDS"
				ledger_control "{\"latency\": $LAT_LATENCY}"
			) &
			JUMP_PID=$!
			run_case jump_ "$LAT_SERVICES" "$LAT_JUMP_DEPTH"
			wait "$JUMP_PID" 2>/dev/null || true
			JUMP_PID=
			b=$(bound "$LAT_SERVICES")
			back=$((LAT_JUMP_AT + LAT_JUMP_SECONDS))
			# the first second after the latency came back at which the mean
			# rate of it and the second before reaches 0.9 of the bound
			rec=$(awk -v back="$back" -v want="$(awk -v b="$b" 'BEGIN { print 0.9 * b }')" '
				{ t = $1; r = $2; if (t > back && prev != "" && (r + prev) / 2 >= want) { print t - back; found = 1; exit } prev = r }
				END { if (!found) print "never" }' "$TIMELINE")
			dups=$(($(ledger_stat duplicates) - dup0))
			verdict_rec=MISS
			[ "$rec" != never ] && [ "$rec" -le 10 ] && verdict_rec=PASS
			[ "$INVALID" = 0 ] || verdict_rec=MISS
			gridha_log "jump ${LAT_LATENCY}s -> ${LAT_JUMP_LATENCY}s at t=${LAT_JUMP_AT}s for ${LAT_JUMP_SECONDS}s: $RATE batches/s overall ($N in ${SECS}s), bound $b;" \
				"invalid $INVALID, handed out again $RETRIED, ledger duplicates $dups; rate back to 0.9 of the bound ${rec}s after the latency came back"
			print_timeline
			RESULT[jump]="$RATE $b - ≤10s ${rec}s/$verdict_rec(invalid $INVALID, duplicates $dups)"
			;;
		hang)
			ledger_start
			ledger_control '{"hang_status_for": 3600}'
			hung0=$(ledger_stat hung)
			q "$DB" "CALL lat_enqueue('hang_', 100, 1)" >/dev/null
			for _i in $(seq 1 100); do
				[ "$(ledger_stat hung)" -gt "$hung0" ] && break
				sleep 0.1
			done
			sleep 1
			# a worker with pending batches: its poll is held
			pid=$(q "$DB" "SELECT w.pid FROM gridha.workers w
			                 JOIN gridha.service_claims c ON c.claimant = w.instance_id
			                 JOIN gridha.batches b ON b.service_id = c.service_id
			                WHERE b.status = 'pending' AND starts_with(b.batch_id, 'hang_') LIMIT 1")
			ms=n/a
			if [ -n "$pid" ]; then
				t0ns=$(date +%s%N)
				kill -TERM "$pid"
				while kill -0 "$pid" 2>/dev/null && [ $(($(date +%s%N) - t0ns)) -lt 30000000000 ]; do
					sleep 0.01
				done
				ms=$((($(date +%s%N) - t0ns) / 1000000))
			fi
			v=MISS
			[ "$ms" != n/a ] && [ "$ms" -le 1000 ] && v=PASS
			gridha_log "hang: status polls held by the ledger ($(ledger_stat hung) held); SIGTERM to worker pid ${pid:-none}: exited after ${ms} ms"
			RESULT[hang]="- - - ≤1000ms ${ms}ms/$v"
			;;
		*) die "unknown case $c" ;;
	esac
done

echo
echo "workers against ledgers: $LAT_WORKERS workers, gridha.worker_inflight $LAT_INFLIGHT (ceiling), ledger latency" \
	"${LAT_LATENCY}s per POST and per status GET, commit delay ${LAT_COMMIT_DELAY}s, gridha.monitor_interval" \
	"${LAT_MONITOR_MS}ms; synchronous_commit on, $(nproc) cores, PostgreSQL $(q postgres "SHOW server_version" | cut -d' ' -f1)"
echo "batches/s: the workload's batches / (last commit - first hand-out), from the rows."
echo "bound: min(services / (commit delay + monitor interval + 2 x latency), workers x inflight / latency)."
echo
printf '  %-14s %9s  %9s  %6s  %-8s %s\n' case batches/s bound ratio target result
for c in $LAT_CASES; do
	read -r rate b r target res <<<"${RESULT[$c]:-- - - - not run}"
	printf '  %-14s %9s  %9s  %6s  %-8s %s\n' "$c" "$rate" "$b" "$r" "$target" "$res"
done
echo "  total bench time: $((SECONDS - t_start))s"
