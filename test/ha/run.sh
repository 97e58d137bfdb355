#!/usr/bin/env bash
# test/ha/run.sh: gridha's fault harness (`make ha`, and the short version
# in `make test` through test/suites/50_ha.sh).
#
# Starts a throwaway cluster of its own (test/lib.sh, from port
# GRIDHA_BASE_PORT, 56400 unless set) with gridha preloaded, background
# workers, short expiries and durable commits; then test/ha/driver.py runs
# the test ledger, external clients, workers and a producer over 60
# services, injects every fault kind (kill -9, SIGSTOP/SIGCONT of clients and
# worker backends, pg_terminate_backend of a worker, ledger 503s and stalls,
# an immediate server stop and restart), drains, and records the history;
# test/ha/check.py checks it and prints the table. Exit status 0 when the
# checker finds nothing.
#
# Environment:
#   HA_DURATION   seconds of random faults after the first round of every
#                 kind (default 0: one round, about a minute and a half)
#   HA_SEED       the random seed (default: a new one, printed)
#   HA_OUT        keep the run directory here (default: a /tmp directory,
#                 removed unless HA_KEEP=1 or the check failed)
#   HA_TAP=1      print the checker's verdicts as TAP lines
#   HA_SERVICES, HA_CLIENTS, HA_WORKERS   the workload (60, 4, 3)
#
# Words: "run directory" is where the driver records the history (see
# driver.py); everything the harness starts, it stops on any exit.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export GRIDHA_BASE_PORT=${GRIDHA_BASE_PORT:-56400}
# shellcheck source=../lib.sh
. "$REPO/test/lib.sh"

DURATION=${HA_DURATION:-0}
SERVICES=${HA_SERVICES:-60}
CLIENTS=${HA_CLIENTS:-4}
WORKERS=${HA_WORKERS:-3}
SOFT=3s
HARD=6s
OUT_GIVEN=${HA_OUT:-}
if [ -n "$OUT_GIVEN" ]; then
	OUT=$OUT_GIVEN
	mkdir -p "$OUT"
else
	OUT=$(mktemp -d /tmp/gridha-ha.XXXXXX)
fi
DRIVER_PID=

cleanup() {
	if [ -n "$DRIVER_PID" ] && kill -0 "$DRIVER_PID" 2>/dev/null; then
		kill -TERM "$DRIVER_PID" 2>/dev/null
		wait "$DRIVER_PID" 2>/dev/null
	fi
	gridha_cluster_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ ! -x "$REPO/client/gridha-client" ]; then
	echo "test/ha: client/gridha-client is not built (run make)" >&2
	exit 2
fi

gridha_cluster_init || exit 2
# Durable commits: an immediate stop must not lose an acknowledged enqueue
# or report (the base settings turn synchronous_commit off for speed).
if ! gridha_cluster_start shared_preload_libraries=gridha max_worker_processes=24 \
		synchronous_commit=on max_connections=200 \
		gridha.workers="$WORKERS" gridha.database=gridha_ha gridha.naptime=100 \
		gridha.submit_timeout=2000 gridha.monitor_interval=250 \
		gridha.soft_expiry="$SOFT" gridha.hard_expiry="$HARD" gridha.renew_interval=1s \
		log_min_messages=warning; then
	exit 2
fi
gridha_log "ha: cluster on port $PGPORT, run directory $OUT"

seed_opt=()
[ -n "${HA_SEED:-}" ] && seed_opt=(--seed "$HA_SEED")
python3 "$REPO/test/ha/driver.py" --out "$OUT" --repo "$REPO" --bindir "$PG_BINDIR" \
	--pgdata "$PGDATA" --pglog "$GRIDHA_PGLOG" --duration "$DURATION" \
	--services "$SERVICES" --clients "$CLIENTS" --workers "$WORKERS" \
	--static-workers "$WORKERS" "${seed_opt[@]}" &
DRIVER_PID=$!
wait "$DRIVER_PID"
driver_rc=$?
DRIVER_PID=
cp "$GRIDHA_PGLOG" "$OUT/postgres.log" 2>/dev/null
gridha_cluster_stop fast

tap_opt=()
[ "${HA_TAP:-0}" = 1 ] && tap_opt=(--tap)
python3 "$REPO/test/ha/check.py" "${tap_opt[@]}" --hard-expiry "${HARD%s}" "$OUT"
check_rc=$?

if [ "$driver_rc" -ne 0 ]; then
	echo "test/ha: the driver stopped early (exit $driver_rc); see $OUT/driver.log" >&2
fi
rc=$((driver_rc != 0 || check_rc != 0))
if [ -z "$OUT_GIVEN" ]; then
	if [ "$rc" -ne 0 ] || [ "${HA_KEEP:-0}" = 1 ]; then
		gridha_log "ha: kept $OUT"
	else
		rm -rf "$OUT"
	fi
fi
exit "$rc"
