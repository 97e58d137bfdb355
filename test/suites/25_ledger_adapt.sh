#!/usr/bin/env bash
# test/suites/25_ledger_adapt.sh: background workers that adapt to the
# ledger they talk to (issue 29; src/submit.c, src/dlt_http.c, src/slots.c,
# src/targets.c), against the test ledger (test/dlt/ledger.py).
#
# The cluster is restarted with one static worker serving this suite's
# database (gridha.workers = 1), gridha.worker_inflight = 32 (the ceiling),
# a 10 s gridha.submit_timeout (so a request that blocked the worker would
# block it for 10 s), short claim timings; at the end it is restarted with
# the phase 2 settings only. The worker's limits are read through
# gridha_worker_limits(), the C function behind the view operators use,
# declared here as adapt_limits(). Steps, in the order they run:
#
#   up        a workload of 300 services x 100 batches against a ledger
#             that answers in 100 ms: the limit for the target grows from
#             its start (4) to at least 8
#   503       a 6 s window of 503 answers: the limit falls to 2 or less,
#             the overload signals are counted; after the window it grows
#             back to at least 8. Each 503 carries Retry-After: 1, so the
#             halvings come at least a second apart: from 16 or more, 3 or
#             more of them (a 4 s window was once too short on a loaded
#             machine)
#   drop      a 4 s window in which the ledger resets every connection
#             unanswered: the same
#   quiet     a target whose status URL points at a port nobody listens
#             on, for 20 s (the worker polls every 100 ms): every failure
#             is counted, the first is logged, and no more than 2 lines
#             about the target are written (a summary with the count comes
#             at most once a minute)
#   sigterm   the ledger holds every status poll unanswered; with a poll
#             held, SIGTERM to the worker: it exits within 1 s and logs
#             that it released its claims
#
# Every wait is a bounded poll, never a sleep standing in for an assertion.
# Works in a database of its own (gridha_adapt_test); everything it starts
# it stops, on any exit.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-adapt.XXXXXX)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
DB=gridha_adapt_test
FAILED=0
PIDS=()
RESTARTED=0

WORKER_OPTS="gridha.workers=1 gridha.database=$DB gridha.naptime=200ms
	gridha.monitor_interval=100ms gridha.submit_timeout=10s gridha.worker_inflight=32
	gridha.soft_expiry=6s gridha.hard_expiry=20s gridha.renew_interval=1s"

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"

# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"

echo "1..13"

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}

log_mark() {
	wc -l <"$GRIDHA_PGLOG"
}

log_since() {
	tail -n +"$(($1 + 1))" "$GRIDHA_PGLOG"
}

# log_count MARK PATTERN: lines written after MARK that match PATTERN.
log_count() {
	log_since "$1" | grep -E -c -e "$2"
}

cleanup() {
	suite_stop_pids
	suite_restore_cluster
	psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1
}
trap cleanup EXIT

if [ -z "${PGDATA:-}" ] || [ -z "${GRIDHA_PGLOG:-}" ]; then
	not_ok "the suite runs inside test/run.sh (PGDATA and GRIDHA_PGLOG are set)"
	exit 1
fi

start_ledger --latency 0.1 --commit-delay 0.1 --max-lifetime 900

# ledger_stat NAME: one count of GET /stats.
ledger_stat() {
	python3 - "$LEDGER/stats" "$1" <<'EOF'
import json, sys, urllib.request
print(json.load(urllib.request.urlopen(sys.argv[1], timeout=10))[sys.argv[2]])
EOF
}

psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" \
	-c "CREATE DATABASE $DB" >/dev/null || exit 1
psql_db >/dev/null <<EOF || exit 1
CREATE EXTENSION gridha;

UPDATE gridha.targets
   SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
       status_url = '$LEDGER/batch_statuses?id={batch_ids}'
 WHERE target = 'default';

-- The worker's limits per target (gridha_worker_limits in src/slots.c).
CREATE FUNCTION adapt_limits(OUT instance_id uuid, OUT target text, OUT in_flight integer,
                             OUT inflight_limit integer, OUT failures bigint)
RETURNS SETOF record LANGUAGE c AS '\$libdir/gridha', 'gridha_worker_limits';
EOF

# the workers' role may now join gridha_submitter (the extension made it)
suite_worker_role

RESTARTED=1
# shellcheck disable=SC2086 # the options are words
if ! gridha_cluster_restart $SUITE_CLUSTER_OPTS $WORKER_OPTS; then
	not_ok "the cluster restarted with gridha.workers = 1"
	exit 1
fi

worker_registered() {
	[ "$(psql_db -c "SELECT count(*) FROM gridha.workers WHERE instance_id IS NOT NULL" 2>/dev/null)" = 1 ]
}
if ! wait_until 30 worker_registered; then
	not_ok "the worker registered"
	exit 1
fi

# limit: the worker's current limit for target default (0 when none shown).
limit() {
	psql_db -c "SELECT coalesce(max(inflight_limit), 0) FROM adapt_limits() WHERE target = 'default'" 2>/dev/null
}

# failures: the worker's overload signals for target default so far.
failures() {
	psql_db -c "SELECT coalesce(max(failures), 0) FROM adapt_limits() WHERE target = 'default'" 2>/dev/null
}

limit_at_least() {
	[ "$(limit)" -ge "$1" ] 2>/dev/null
}

limit_at_most() {
	local l
	l=$(limit)
	[ -n "$l" ] && [ "$l" -gt 0 ] && [ "$l" -le "$1" ]
}

# ---------------------------------------------------------------------------
# up: the limit grows with the work

psql_db >/dev/null <<'EOF'
INSERT INTO gridha.batches (service_id, batch_id, payload)
SELECT 'a' || i, 'a' || r || '.' || i, '\x00'::bytea
  FROM generate_series(1, 100) AS r, generate_series(1, 300) AS i
 ORDER BY r, i;
EOF

wait_until 60 limit_at_least 8
check $? "up: the worker's limit for the target grows from 4 to at least 8 under load (now $(limit))"
psql_db -c "SELECT target, in_flight, inflight_limit, failures FROM adapt_limits()" | diag

# ---------------------------------------------------------------------------
# 503 and drop windows: the limit goes down, then back up

# window NAME CONTROL SECONDS: opens the ledger's window (SECONDS long),
# checks the limit falls to 2 or less while it is open, that overload
# signals were counted, and that it grows back to 8 or more after it.
window() {
	local name=$1 f0 f1 low l0
	f0=$(failures)
	l0=$(limit)
	ledger_control "$2" || { not_ok "$name: the ledger took the control"; return; }
	wait_until "$3" limit_at_most 2
	low=$?
	check $low "$name: the limit falls to 2 or less while the window is open (from $l0; now $(limit))"
	f1=$(failures)
	[ "$f1" -gt "$f0" ] 2>/dev/null
	check $? "$name: the overload signals are counted ($f0 before, $f1 after)"
	wait_until 40 limit_at_least 8
	check $? "$name: after the window the limit grows back to at least 8 (now $(limit))"
}

window 503 '{"fail_503_for": 6}' 6
window drop '{"drop_for": 4}' 4
[ "$(ledger_stat dropped)" -gt 0 ] 2>/dev/null
check $? "drop: the ledger reset connections ($(ledger_stat dropped) requests dropped)"

# ---------------------------------------------------------------------------
# quiet: an unreachable status URL for 20 s

# a port nobody listens on: bound by the OS, then closed
dead_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
mark=$(log_mark)
psql_db >/dev/null <<EOF
INSERT INTO gridha.targets (target, submit_url, status_url)
VALUES ('quiet', '$LEDGER/batches/{service_id}/{batch_id}',
        'http://127.0.0.1:$dead_port/batch_statuses?id={batch_ids}');
SELECT gridha.enqueue('q' || i, 'q' || i || '.1', '\x00'::bytea, 'quiet')
  FROM generate_series(1, 20) AS i;
EOF
sleep 20
first=$(log_count "$mark" 'target "quiet": status URL unreachable: connect')
lines=$(log_count "$mark" 'target "quiet"')
polls=$(psql_db -c "SELECT coalesce(max(failures), 0) FROM adapt_limits() WHERE target = 'quiet'")
[ "$polls" -ge 20 ] 2>/dev/null
check $? "quiet: the worker kept polling the unreachable status URL, and counted each failure ($polls)"
[ "$first" = 1 ]
check $? "quiet: the first failure of the unreachable status URL is logged ($first line)"
[ "$lines" -le 2 ] 2>/dev/null
check $? "quiet: at most 2 lines about the target in 20 s of polls every 100 ms ($lines)"
log_since "$mark" | grep -E 'target "quiet"' | head -n 5 | diag

# ---------------------------------------------------------------------------
# sigterm: a status poll held by the ledger does not delay the stop

hung0=$(ledger_stat hung)
ledger_control '{"hang_status_for": 120}' >/dev/null
psql_db -c "UPDATE gridha.targets SET status_url = '$LEDGER/batch_statuses?id={batch_ids}'
             WHERE target = 'default'" >/dev/null
poll_held() {
	[ "$(ledger_stat hung)" -gt "$hung0" ] 2>/dev/null
}
wait_until 20 poll_held
held=$?
pid=$(psql_db -c "SELECT pid FROM gridha.workers")
mark=$(log_mark)
t0=$(date +%s%N)
kill -TERM "$pid"
while kill -0 "$pid" 2>/dev/null && [ $(($(date +%s%N) - t0)) -lt 15000000000 ]; do
	sleep 0.02
done
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$held" = 0 ] && ! kill -0 "$pid" 2>/dev/null && [ "$ms" -le 1000 ]
check $? "sigterm: with a status poll held by the ledger, the worker exits within 1 s of SIGTERM (${ms} ms)"
wait_until 5 sh -c "tail -n +$((mark + 1)) '$GRIDHA_PGLOG' | grep -q 'stopped and released its claims'"
check $? "sigterm: the worker released its claims on the way out"
ledger_control '{"hang_status_for": 0}' >/dev/null

exit $((FAILED > 0))
