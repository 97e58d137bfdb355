# shellcheck shell=bash
# test/tap.sh: TAP output and bounded waits for the suites in test/suites.
# Source it; it counts failures in FAILED (set to 0 here when unset).
#
#   plan N                    the suite's plan: prints "1..N" (call it
#                             first); the runner fails a suite that runs
#                             fewer or more tests than it planned
#   ok WHAT / not_ok WHAT     one TAP line; not_ok adds one to FAILED
#   skip_test WHAT WHY        a planned test not run: "ok - WHAT # SKIP WHY",
#                             counted as skipped, never as passed
#   check STATUS WHAT         ok or not_ok by an exit status (0 = ok)
#   diag                      stdin as TAP comments
#   wait_until SECONDS CMD... poll CMD every 0.2 s until it succeeds or the
#                             time is up (then CMD's last status)
#   wait_port_file FILE       a server writes its port there once listening
#   check_sql DB WHAT SQL     ok when SQL prints t in DB (needs test/lib.sh)
#   suite_work NAME           sets WORK, the suite's directory: the runner's,
#                             or, run alone, NAME in a cluster of its own
#                             (started here with SUITE_CLUSTER_OPTS, removed
#                             at exit)
#   SUITE_CLUSTER_OPTS        the settings the suites' cluster runs with
#   start_ledger ARG...       the test ledger on a free port (sets LEDGER)
#   ledger_control JSON       POST /control to that ledger
#   check_ledger_order EXPECTED LOG WHAT
#                             ok when every batch of EXPECTED reached the
#                             ledger in its service's order, one in flight

FAILED=${FAILED:-0}
# Background workers call target functions only as a role that is not a
# superuser (gridha.worker_role): the suites' workers run as this one, a
# member of gridha_submitter (and 1.0's gridha_client) and nothing more, as
# docs/security.md asks; a suite grants what its own target functions and
# tables need, as a user would.
SUITE_WORKER_ROLE=gridha_test_worker
SUITE_CLUSTER_OPTS="${GRIDHA_CLUSTER_OPTS:-shared_preload_libraries=gridha max_worker_processes=32} gridha.worker_role=$SUITE_WORKER_ROLE"

# suite_worker_role: makes the suites' worker role in the cluster PGHOST and
# PGPORT name (roles are the cluster's), a member of gridha_submitter and of
# gridha_client (1.0's role; each made here when no CREATE EXTENSION gridha
# made it yet) and of no other role (it revokes pg_read_all_data and
# pg_write_all_data, which it once had). Quiet.
suite_worker_role() {
	type gridha_psql >/dev/null 2>&1 || return 0
	gridha_psql -d postgres -c "DO \$\$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$SUITE_WORKER_ROLE') THEN
        CREATE ROLE $SUITE_WORKER_ROLE LOGIN;
    END IF;
    REVOKE pg_read_all_data, pg_write_all_data FROM $SUITE_WORKER_ROLE;
    -- CREATE EXTENSION gridha makes these group roles when they are missing
    -- (gridha_client is the one role of gridha 1.0's SQL)
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'gridha_submitter') THEN
        CREATE ROLE gridha_submitter NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'gridha_client') THEN
        CREATE ROLE gridha_client NOLOGIN;
    END IF;
    GRANT gridha_submitter, gridha_client TO $SUITE_WORKER_ROLE;
END
\$\$" >/dev/null 2>&1
	return 0
}
suite_worker_role

plan() {
	echo "1..$1"
}

ok() {
	echo "ok - $*"
}

skip_test() {
	echo "ok - $1 # SKIP ${2:-not run}"
}

not_ok() {
	echo "not ok - $*"
	FAILED=$((FAILED + 1))
}

check() {
	if [ "$1" -eq 0 ]; then ok "$2"; else not_ok "$2"; fi
}

diag() {
	sed 's/^/# /'
}

# suite_stop_pids: sends TERM to every process in the suite's PIDS, then
# waits for each (for a suite's EXIT trap).
suite_stop_pids() {
	local p
	for p in "${PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null
	done
}

# suite_restore_cluster: when the suite restarted the cluster with settings
# of its own (RESTARTED=1), restarts it with the phase 2 settings.
suite_restore_cluster() {
	if [ "${RESTARTED:-0}" = 1 ]; then
		# shellcheck disable=SC2086 # the options are words
		gridha_cluster_restart $SUITE_CLUSTER_OPTS >/dev/null 2>&1 ||
			echo "# could not restart the cluster with the phase 2 settings" >&2
	fi
}

wait_until() {
	local deadline=$((SECONDS + $1))
	shift
	while [ "$SECONDS" -lt "$deadline" ]; do
		"$@" && return 0
		sleep 0.2
	done
	"$@"
}

wait_port_file() {
	wait_until 15 test -s "$1" && cat "$1"
}

# check_sql DB WHAT SQL: ok when SQL prints t in database DB, otherwise
# not_ok and what it printed (needs test/lib.sh for gridha_psql)
check_sql() {
	local got
	got=$(gridha_psql -d "$1" -c "$3" 2>&1 || true)
	if [ "$got" = t ]; then
		ok "$2"
	else
		not_ok "$2"
		echo "# got: $got"
	fi
}

suite_work() {
	if [ -z "${GRIDHA_TEST_DIR:-}" ]; then
		gridha_cluster_init
		trap gridha_cluster_cleanup EXIT
		trap 'exit 130' INT TERM
		# shellcheck disable=SC2086 # the options are words
		gridha_cluster_start $SUITE_CLUSTER_OPTS
		suite_worker_role
	fi
	WORK=${GRIDHA_SUITE_DIR:-$GRIDHA_TEST_DIR/$1}
	mkdir -p "$WORK"
}

# start_ledger ARG...: starts test/dlt/ledger.py on a free port with ARGs,
# logging to $WORK/ledger.log (its output in $WORK/ledger.out), adds its pid
# to PIDS and sets LEDGER to its URL. Ends the suite when it does not start.
# Needs REPO, WORK and PIDS from the suite.
start_ledger() {
	local port
	python3 "$REPO/test/dlt/ledger.py" --port 0 --port-file "$WORK/ledger.port" \
		--log "$WORK/ledger.log" "$@" >"$WORK/ledger.out" 2>&1 &
	PIDS+=("$!")
	if ! port=$(wait_port_file "$WORK/ledger.port"); then
		not_ok "the test ledger started"
		diag <"$WORK/ledger.out"
		exit 1
	fi
	LEDGER=http://127.0.0.1:$port
}

# ledger_control JSON: POST /control to the ledger of start_ledger.
ledger_control() {
	python3 - "$LEDGER/control" "$1" <<'EOF'
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(),
                             headers={"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=10).read()
EOF
}

# check_ledger_order EXPECTED LOG WHAT: one TAP line, ok when every batch
# of EXPECTED (service, batch id, tab-separated, each service's batches in
# enqueue order) reached the ledger whose log is LOG, in that order, one in
# flight per service (test/dlt/check_log.py); else not_ok and the
# violations. Needs REPO from the suite.
check_ledger_order() {
	if python3 "$REPO/test/dlt/check_log.py" --expected "$1" --require-all --one-in-flight \
			"$2" >"$1.check" 2>&1; then
		ok "$3"
	else
		not_ok "$3"
		grep -A 10 '^violations' "$1.check" | diag
	fi
}
