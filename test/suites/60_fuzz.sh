#!/usr/bin/env bash
# test/suites/60_fuzz.sh: gridha's SQL API under generated hostile input
# (test/fuzz/fuzz.py), while two background workers and the reference
# client serve the same database against the test ledger.
#
# The cluster is restarted with two static workers serving this suite's
# database (gridha.workers = 2), short claim timings, SQLSTATEs in the
# server log (log_error_verbosity = verbose) and synchronous_commit = on
# (an acknowledged enqueue must survive a crash of a server process); at
# the end it is restarted with the phase 2 settings only.
#
#   workers    the two static workers are registered
#   fuzz       eight psql sessions (a superuser that also rewrites targets
#              and target functions, three gridha_client sessions of two
#              owners, a gridha_producer that also inserts directly, with
#              and without ON CONFLICT, a gridha_client running the
#              submitter loop of three instances, an administrator:
#              move_service, set_instance_owner, renames, deletes and rate
#              changes of targets, claims expired and instances deleted by
#              hand; maintenance with retention and the sweep, and prepared
#              transactions) run generated statements against every
#              function and view of gridha, target functions misbehave
#              (temp objects, errors, long runs); after each round
#              invariants.py asserts the invariants seq, claims, counts,
#              work (one TAP line each, ok only if it held after every
#              round) and counts the lone calls that ended in 40P01 (one
#              TAP line); then fuzz.py checks the
#              SQLSTATEs (test/fuzz/sqlstates.txt), hangs, the queue
#              invariants at checkpoints and at the end, the acknowledged
#              enqueues, a drain with the targets repaired, coverage, and
#              the server log (no process ended by a signal, every ERROR with
#              a documented SQLSTATE); see its header
#   client     the reference client is still running afterwards
#
# FUZZ_SECONDS=N fuzzes for N seconds, in rounds of 300 statements per
# session (make fuzz); unset, 120 seconds (make test); 0, three rounds (a
# quick look). FUZZ_SEED=N repeats the generated statements of a run (the
# interleaving of the sessions, the workers and the client differs).
# Debugging aids: FUZZ_KEEP=1 keeps the scripts and their outputs, the logs
# of the client and the ledger, the server log of the fuzz and a dump of the
# database in a /tmp/gridha-fuzz-keep.* directory it names, and the
# database in the cluster (GRIDHA_KEEP_TMP=1 keeps the cluster);
# FUZZ_KNOWN_BUGS=skip leaves out the statements that meet the bugs being
# fixed in issue 38 (a development aid for the invariants' own precision;
# make test never sets it). FUZZ_AUDIT=1 records every change of gridha.instances and
# gridha.service_claims, with the statement that made it, in
# public.fz_audit, and shows those of the first invariant violations.
#
# Works in a database of its own (gridha_fuzz_test) and login roles
# gridha_fuzz_*; everything it starts it stops, on any exit.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-fuzz.XXXXXX)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
DB=gridha_fuzz_test
CLIENT=$REPO/client/gridha-client
FUZZ=$REPO/test/fuzz/fuzz.py
FAILED=0
PIDS=()
RESTARTED=0
SECONDS_WANTED=${FUZZ_SECONDS:-120}
SEED=${FUZZ_SEED:-}
KEEP_DIR=
MARK=

# The worker settings of this suite (see the header).
WORKER_OPTS="gridha.workers=2 gridha.database=$DB gridha.naptime=100ms
	gridha.monitor_interval=100ms gridha.submit_timeout=2s
	gridha.soft_expiry=3s gridha.hard_expiry=8s gridha.renew_interval=1s
	log_error_verbosity=verbose log_min_error_statement=panic synchronous_commit=on"

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"

# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 20

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}

cleanup() {
	suite_stop_pids
	suite_restore_cluster
	if [ -n "$KEEP_DIR" ]; then
		keep
		return
	fi
	psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" \
		-c "DROP ROLE IF EXISTS gridha_fuzz_a, gridha_fuzz_b, gridha_fuzz_producer, gridha_fuzz_admin,
		    gridha_fuzz_runner" >/dev/null 2>&1
}
trap cleanup EXIT

# keep: what FUZZ_KEEP=1 keeps, in KEEP_DIR (the fuzz's scripts and outputs
# are there already); the database stays in the cluster too.
keep() {
	local f
	for f in client.log client.err ledger.log ledger.out setup.out; do
		[ -f "$WORK/$f" ] && cp "$WORK/$f" "$KEEP_DIR/"
	done
	[ -n "$MARK" ] && tail -n +"$((MARK + 1))" "$GRIDHA_PGLOG" >"$KEEP_DIR/server.log"
	pg_dump -Fc -d "$DB" -f "$KEEP_DIR/$DB.dump" 2>"$KEEP_DIR/pg_dump.err" ||
		echo "# pg_dump of $DB failed (see $KEEP_DIR/pg_dump.err)"
	echo "# FUZZ_KEEP=1: kept $KEEP_DIR (scripts r<round>-<session>.sql and their .out in fuzz/," \
		"client, ledger and server logs, $DB.dump) and the database $DB"
}

if [ -z "${PGDATA:-}" ] || [ -z "${GRIDHA_PGLOG:-}" ]; then
	not_ok "the suite runs inside test/run.sh (PGDATA and GRIDHA_PGLOG are set; make fuzz does that)"
	exit 1
fi
if [ ! -x "$CLIENT" ]; then
	not_ok "client/gridha-client is built (run make)"
	exit 1
fi
case "$SECONDS_WANTED" in
	'' | *[!0-9]*)
		not_ok "FUZZ_SECONDS is a whole number of seconds (got '$SECONDS_WANTED')"
		exit 1
		;;
esac

# ---------------------------------------------------------------------------
# The ledger, the database, the restart with workers

start_ledger --commit-delay 0.05 --max-lifetime $((SECONDS_WANTED + 900)) \
	--invalid-pattern '^bad-' --reject-pattern '^rej-'

psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" \
	-c "CREATE DATABASE $DB" >/dev/null || exit 1
psql_db -c "CREATE EXTENSION gridha" >/dev/null || exit 1
# The workers run as the suites' worker role (test/tap.sh), a member of
# gridha_submitter only. Two of the generated submit functions read gridha's
# tables to misbehave (release the service's claimant's claims, report
# their own batch): the columns they read are granted here, as a user
# would, or they would fail with 42501 instead of misbehaving.
psql_db -c "GRANT SELECT (service_id, claimant) ON gridha.service_claims TO $SUITE_WORKER_ROLE" \
	-c "GRANT SELECT (service_id, batch_id, instance_id, epoch) ON gridha.batches TO $SUITE_WORKER_ROLE" \
	>/dev/null || exit 1

RESTARTED=1
# shellcheck disable=SC2086 # the options are words
if ! gridha_cluster_restart $SUITE_CLUSTER_OPTS $WORKER_OPTS; then
	not_ok "the cluster restarted with gridha.workers = 2"
	exit 1
fi

workers_registered() {
	[ "$(psql_db -c "SELECT count(*) FROM gridha.workers WHERE instance_id IS NOT NULL" 2>/dev/null)" = 2 ]
}
wait_until 30 workers_registered
check $? "workers: the 2 static workers are registered"

if [ "${FUZZ_KEEP:-0}" = 1 ]; then
	KEEP_DIR=$(mktemp -d /tmp/gridha-fuzz-keep.XXXXXX)
	chmod 755 "$KEEP_DIR"
fi
FUZZ_WORK=${KEEP_DIR:-$WORK}/fuzz

setup_args=(setup --db "$DB" --ledger "$LEDGER")
[ "${FUZZ_AUDIT:-0}" = 1 ] && setup_args+=(--audit)
if ! python3 "$FUZZ" "${setup_args[@]}" >"$WORK/setup.out" 2>&1; then
	not_ok "fuzz: the roles, target functions and targets are set up"
	diag <"$WORK/setup.out"
	exit 1
fi

# The reference client, as a login role with gridha_submitter only.
CLIENT_ID=$(psql_db -c "SELECT gen_random_uuid()")
"$CLIENT" --dsn "dbname=$DB user=gridha_fuzz_runner" --instance-id "$CLIENT_ID" --label fuzz-client \
	--idle-sleep-ms 50 --monitor-interval-ms 100 --submit-timeout-ms 2000 \
	--max-runtime-s $((SECONDS_WANTED + 600)) --log "$WORK/client.log" 2>"$WORK/client.err" &
CLIENT_PID=$!
PIDS+=("$CLIENT_PID")

# ---------------------------------------------------------------------------
# The fuzz (fuzz.py prints its own TAP lines)

MARK=$(wc -l <"$GRIDHA_PGLOG")
args=(run --db "$DB" --work "$FUZZ_WORK" --ledger "$LEDGER" --pglog "$GRIDHA_PGLOG" --log-mark "$MARK")
if [ "$SECONDS_WANTED" -gt 0 ]; then
	args+=(--seconds "$SECONDS_WANTED")
else
	args+=(--rounds 3)
fi
[ -n "$SEED" ] && args+=(--seed "$SEED")
[ -n "$KEEP_DIR" ] && args+=(--keep)
[ "${FUZZ_AUDIT:-0}" = 1 ] && args+=(--audit)
python3 "$FUZZ" "${args[@]}"
fuzz_rc=$?
[ "$fuzz_rc" -eq 0 ] || FAILED=$((FAILED + 1))

# ---------------------------------------------------------------------------
# The client lived through it

if kill -0 "$CLIENT_PID" 2>/dev/null; then
	ok "client: the reference client is still running after the fuzz"
else
	wait "$CLIENT_PID"
	not_ok "client: the reference client is still running after the fuzz (it ended with status $?)"
	tail -n 20 "$WORK/client.err" | diag
fi
n_handout=$(grep -c '"event":"handout"' "$WORK/client.log" 2>/dev/null)
echo "# the client handed out ${n_handout:-0} batches"

[ "$FAILED" -eq 0 ]
