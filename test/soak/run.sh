#!/usr/bin/env bash
# test/soak/run.sh: the concurrency soak.
#
# 8 pgbench clients, each its own gridha instance, drain 60 services x 40
# batches through the contract API (next_batch -> report_submission ->
# report_status), logging every hand-out and commit with a global id. Then
# check.sql proves: all committed, each handed out once, per-service order,
# one in flight per service, attempts = 1, reports accepted, work shared.
#
# Output: one TAP line per check ("ok - ..." / "not ok - ..."), progress on
# stderr. Exit status 0 when every check passed.
#
# Called by test/run.sh against its cluster (PGHOST, PGPORT, PGUSER and
# GRIDHA_TEST_DIR set). Run alone (`bash test/soak/run.sh`) it makes its own
# throwaway cluster with gridha preloaded; the extension must be installed.
#
# Knobs (environment): SOAK_SERVICES (60), SOAK_BATCHES (40), SOAK_CLIENTS (8),
# SOAK_JOBS (2), SOAK_SECONDS (60, the cap on pgbench time), SOAK_BURST (3).
set -euo pipefail

SOAK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$SOAK_DIR/../lib.sh"

SERVICES=${SOAK_SERVICES:-60}
BATCHES=${SOAK_BATCHES:-40}
CLIENTS=${SOAK_CLIENTS:-8}
JOBS=${SOAK_JOBS:-2}
MAX_SECONDS=${SOAK_SECONDS:-60}
BURST=${SOAK_BURST:-3}
DB=gridha_soak

# Standalone: our own cluster, set up like test/run.sh's phase 2.
if [ -z "${GRIDHA_TEST_DIR:-}" ]; then
	gridha_cluster_init
	trap gridha_cluster_cleanup EXIT
	trap 'exit 130' INT TERM
	gridha_cluster_start shared_preload_libraries=gridha max_worker_processes=32
fi
WORK=$GRIDHA_TEST_DIR/soak
rm -rf "$WORK"
mkdir -p "$WORK"

# sql DB ARG...: psql against DB, stop at the first error.
sql() {
	local db=$1
	shift
	gridha_psql -d "$db" "$@"
}

# remaining: batches not committed yet.
remaining() {
	sql "$DB" -c "SELECT count(*) FROM gridha.batches WHERE status <> 'committed'"
}

# setup: a fresh database with the extension, short claim timings so that
# balancing happens within the run, and the queue.
setup() {
	sql postgres -c "SET client_min_messages = warning" \
		-c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
	sql "$DB" -c "CREATE EXTENSION gridha"
	# Taken by every new session in the database, pgbench's included.
	# Session liveness off: each pgbench burst connects its clients anew,
	# and an instance whose calls come from more than one session is one
	# docs/concepts.md asks to run with it off. With it on, another
	# instance may judge a client gone between its old session's end and
	# its new one's first call, and take its claims over while it works
	# (safe: its next write is refused, RG001; but the batch is handed out
	# twice, which check.sql refuses).
	sql postgres \
		-c "ALTER DATABASE $DB SET gridha.renew_interval = '1s'" \
		-c "ALTER DATABASE $DB SET gridha.soft_expiry = '5s'" \
		-c "ALTER DATABASE $DB SET gridha.hard_expiry = '20s'" \
		-c "ALTER DATABASE $DB SET gridha.session_liveness = off"
	local n
	n=$(sql "$DB" -v services="$SERVICES" -v batches="$BATCHES" -f "$SOAK_DIR/setup.sql" | tail -n 1)
	gridha_log "soak: enqueued $n batches ($SERVICES services x $BATCHES)"
}

# drive: pgbench bursts until every batch is committed or the time cap is
# reached. Bursts let us stop as soon as the work is done; pgbench -T ends
# each client at a script boundary, so no hand-out is left unreported
# between bursts, and the instance ids (from :client_id) carry over.
# Returns non-zero when a pgbench run failed (a client aborted on an error).
drive() {
	local start=$SECONDS left rc=0 burst=0 t
	DRIVER_OK=1
	while :; do
		left=$(remaining)
		[ "$left" -eq 0 ] && break
		t=$((MAX_SECONDS - (SECONDS - start)))
		if [ "$t" -le 0 ]; then
			gridha_log "soak: time cap of ${MAX_SECONDS}s reached with $left batches left"
			break
		fi
		[ "$t" -gt "$BURST" ] && t=$BURST
		burst=$((burst + 1))
		rc=0
		pgbench -n -M extended -c "$CLIENTS" -j "$JOBS" -T "$t" \
			-f "$SOAK_DIR/cycle.sql" "$DB" >"$WORK/pgbench.$burst.log" 2>&1 || rc=$?
		if [ "$rc" -ne 0 ] || grep -q 'aborted\|error' "$WORK/pgbench.$burst.log"; then
			DRIVER_OK=0
			gridha_log "soak: pgbench burst $burst failed (exit $rc):"
			grep -i 'error\|abort\|failed\|FATAL' "$WORK/pgbench.$burst.log" | head -20 >&2 || true
			break
		fi
		gridha_log "soak: burst $burst ($t s): $(grep -o 'number of transactions actually processed: [0-9]*' "$WORK/pgbench.$burst.log" | grep -o '[0-9]*$') cycles, $(remaining) batches left"
	done
	DRIVE_SECONDS=$((SECONDS - start))
}

main() {
	local t0=$SECONDS out
	# the plan: the pgbench line and check.sql's seven
	echo "1..8"
	setup
	drive
	gridha_log "soak: drove for ${DRIVE_SECONDS}s"

	if [ "$DRIVER_OK" -eq 1 ]; then
		echo "ok - pgbench clients ran without errors"
	else
		echo "not ok - pgbench clients ran without errors (see the errors above)"
	fi
	out=$(sql "$DB" -v services="$SERVICES" -v batches="$BATCHES" -f "$SOAK_DIR/check.sql")
	echo "$out"
	gridha_log "soak: done in $((SECONDS - t0))s"

	if [ "$DRIVER_OK" -ne 1 ] || grep -q '^not ok' <<<"$out"; then
		return 1
	fi
	# A check that did not print at all is a failure too.
	[ "$(grep -c '^ok' <<<"$out")" -eq 7 ]
}

main
