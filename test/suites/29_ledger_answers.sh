#!/usr/bin/env bash
# test/suites/29_ledger_answers.sh: a background worker against a hostile
# ledger (issue 39, item 4: no batch is stuck without a sign; src/monitor.c,
# src/dlt_http.c, src/totals.c), the test ledger's answer modes
# (test/dlt/ledger.py: omit_pattern, decode_split, retry_after,
# close_kept_alive_for, malformed_kind huge).
#
# The cluster is restarted with one static worker serving this suite's
# database, gridha.monitor_interval = 100ms (a status run per target every
# 100 ms) and gridha.status_omitted_limit = 3; at the end it is restarted
# with the phase 2 settings only. Each target has a service of its own on
# the one ledger. Steps, in the order they run:
#
#   omit      the ledger's well-formed status answers leave out om-1.1 (and
#             speak of a batch nobody asked about): the answers are counted
#             in gridha.metrics' status_omitted_total, logged (a line a
#             minute per target at most), asked again with a pause that
#             doubles (not every 100 ms), and after 3 such answers in a row
#             the batch is reported unknown and submitted again; once the
#             ledger speaks of it again the service drains in order
#   split     the ledger URL-decodes the ids before splitting them on
#             commas: a batch whose id holds a comma is asked about alone,
#             never beside others; the ledger cannot answer for it, and it
#             is resubmitted, not left pending
#   retry     429 with Retry-After: 3 (seconds), then 503 with Retry-After
#             as an HTTP-date 3 s ahead: the next POST of the batch comes no
#             sooner than the wait (1.5 s for the date's whole seconds)
#   keepalive the ledger closes a kept-alive connection after reading a POST
#             (and applies it): libcurl's silent re-send is refused, so no
#             (batch, attempt) reaches the ledger twice; every batch still
#             arrives, in order
#   words     a 409 delays a batch with a WARNING that does not send the
#             operator to gridha.targets; a 200 status answer too big to read
#             is logged as a failed poll, not an unreachable URL
#
# Every wait is a bounded poll or a measured window, never a sleep standing
# in for an assertion. Works in a database of its own (gridha_answers_test);
# everything it starts it stops, on any exit.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-answers.XXXXXX)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
DB=gridha_answers_test
FAILED=0
PIDS=()
RESTARTED=0

WORKER_OPTS="gridha.workers=1 gridha.database=$DB gridha.naptime=100ms
	gridha.monitor_interval=100ms gridha.submit_timeout=5s gridha.status_omitted_limit=3
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

start_ledger --commit-delay 0.3 --max-lifetime 900

# ledger_log PYTHON: runs PYTHON with "events", the ledger log's lines
# (dicts), and prints what it prints.
ledger_log() {
	python3 - "$WORK/ledger.log" "$1" <<'EOF'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
exec(sys.argv[2])
EOF
}

psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" \
	-c "CREATE DATABASE $DB" >/dev/null || exit 1
psql_db >/dev/null <<EOF || exit 1
CREATE EXTENSION gridha;
INSERT INTO gridha.targets (target, submit_url, status_url)
SELECT t, '$LEDGER/batches/{service_id}/{batch_id}', '$LEDGER/batch_statuses?id={batch_ids}'
  FROM unnest(ARRAY['omit', 'split', 'retry', 'keepalive', 'words']) AS t;
EOF

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

# status_of BATCH: the batch's status and attempts ("committed 2").
status_of() {
	psql_db -c "SELECT status || ' ' || attempts FROM gridha.batches WHERE batch_id = '$1'" 2>/dev/null
}

committed() {
	local b
	for b in "$@"; do
		[ "$(status_of "$b" | cut -d' ' -f1)" = committed ] || return 1
	done
}

# ---------------------------------------------------------------------------
# omit: answers that leave the batch out

ledger_control '{"omit_pattern": "^om-"}' >/dev/null
mark=$(log_mark)
t0=$(date +%s.%N)
psql_db >/dev/null <<'EOF'
SELECT gridha.enqueue('om1', 'om-1.' || i, '\x00'::bytea, 'omit') FROM generate_series(1, 2) AS i;
EOF
printf 'om1\tom-1.1\nom1\tom-1.2\n' >"$WORK/omit.expected"

omitted_total() {
	psql_db -c "SELECT status_omitted_total FROM gridha.metrics WHERE scope = 'target' AND target = 'omit'" 2>/dev/null
}
counted() {
	[ "$(omitted_total)" -ge 3 ] 2>/dev/null
}
wait_until 30 counted
check $? "omit: the answers that left om-1.1 out are counted in gridha.metrics (status_omitted_total $(omitted_total))"

resubmitted() {
	[ "$(status_of om-1.1 | cut -d' ' -f2)" -ge 2 ] 2>/dev/null
}
wait_until 30 resubmitted
res=$?
posts=$(ledger_log 'print(sum(1 for e in events if e["event"] == "post" and e["batch_id"] == "om-1.1"))')
[ "$res" = 0 ] && [ "$posts" -ge 2 ]
check $? "omit: after 3 answers without it, om-1.1 is reported unknown and POSTed again (attempts: $(status_of om-1.1), POSTs the ledger saw: $posts)"

# 10 s of answers without it, counted from the first answer that left it out
sleep 10
polls=$(ledger_log "
t0 = $t0
first = [e['t'] for e in events if e['event'] == 'status_query' and e.get('left_out') and e['t'] >= t0]
print(sum(1 for e in events if e['event'] == 'status_query' and e.get('left_out')
          and first and first[0] <= e['t'] < first[0] + 10))")
[ "$polls" -ge 3 ] && [ "$polls" -le 15 ] 2>/dev/null
check $? "omit: in 10 s of answers without it the batch is asked about with a growing pause, not every 100 ms ($polls polls; every 100 ms would be about 100)"

first=$(log_count "$mark" 'target "omit": a status answer left out a batch asked about: batch "om-1.1"')
lines=$(log_count "$mark" 'target "omit"')
[ "$first" = 1 ] && [ "$lines" -le 4 ]
check $? "omit: the first answer that left it out is logged, and the target costs at most 4 lines in the first minute ($first first, $lines in all)"
log_since "$mark" | grep -E 'target "omit"' | head -n 5 | diag

ledger_control '{"omit_pattern": null}' >/dev/null
t1=$SECONDS
wait_until 40 committed om-1.1 om-1.2
ok_drain=$?
if [ "$ok_drain" = 0 ]; then
	check_ledger_order "$WORK/omit.expected" "$WORK/ledger.log" \
		"omit: once the ledger speaks of it, om-1.1 and om-1.2 commit in order within 40 s ($((SECONDS - t1)) s)"
else
	not_ok "omit: once the ledger speaks of it, om-1.1 and om-1.2 commit in order within 40 s (om-1.1: $(status_of om-1.1), om-1.2: $(status_of om-1.2))"
fi

# ---------------------------------------------------------------------------
# split: a ledger that decodes before it splits

ledger_control '{"decode_split": true, "commit_delay": 2}' >/dev/null
s0=$(ledger_log 'print(len(events))')
psql_db >/dev/null <<'EOF'
SELECT gridha.enqueue(s, b, '\x00'::bytea, 'split')
  FROM (VALUES ('sp1', 'sp,1.1'), ('sp2', 'sp2.1'), ('sp3', 'sp3.1'), ('sp4', 'sp4.1')) AS v(s, b);
EOF
split_resubmitted() {
	[ "$(status_of 'sp,1.1' | cut -d' ' -f2)" -ge 2 ] 2>/dev/null && committed sp2.1 sp3.1 sp4.1
}
wait_until 30 split_resubmitted
res=$?
mixed=$(ledger_log "print(sum(1 for e in events[$s0:] if e['event'] == 'status_query' and e.get('encoded_comma') and e.get('raw_ids', 0) > 1))")
alone=$(ledger_log "print(sum(1 for e in events[$s0:] if e['event'] == 'status_query' and e.get('encoded_comma') and e.get('raw_ids') == 1))")
[ "$mixed" = 0 ] && [ "$alone" -ge 1 ]
check $? "split: the id with a comma is asked about alone ($alone GETs alone, $mixed beside other ids)"
[ "$res" = 0 ]
check $? "split: the batch whose id the ledger splits is resubmitted, not left pending (sp,1.1: $(status_of 'sp,1.1')), and the others commit"
ledger_control '{"decode_split": false, "commit_delay": 0.3}' >/dev/null
wait_until 30 committed 'sp,1.1' >/dev/null

# ---------------------------------------------------------------------------
# retry: Retry-After on 429 (seconds) and 503 (HTTP-date)

# min_gap BATCH RESULT: the shortest time between two POSTs of BATCH the
# ledger answered RESULT (-1 with fewer than two).
min_gap() {
	ledger_log "
ts = [e['t'] for e in events if e['event'] == 'post' and e['batch_id'] == '$1' and e['result'] == '$2']
print(round(min(b - a for a, b in zip(ts, ts[1:])), 2) if len(ts) > 1 else -1)"
}

ledger_control '{"retry_after": 3, "retry_after_form": "seconds", "fail_429_for": 8}' >/dev/null
psql_db -c "SELECT gridha.enqueue('ra1', 'ra-1.1', '\x00'::bytea, 'retry')" >/dev/null
wait_until 30 committed ra-1.1
gap=$(min_gap ra-1.1 429)
python3 -c "import sys; sys.exit(0 if ${gap:--1} >= 2.5 else 1)"
check $? "retry: after a 429 with Retry-After: 3 the batch is POSTed again no sooner than 2.5 s later (shortest gap $gap s)"

ledger_control '{"retry_after": 3, "retry_after_form": "date", "fail_503_for": 8}' >/dev/null
psql_db -c "SELECT gridha.enqueue('ra2', 'ra-2.1', '\x00'::bytea, 'retry')" >/dev/null
wait_until 30 committed ra-2.1
gap=$(min_gap ra-2.1 503)
python3 -c "import sys; sys.exit(0 if ${gap:--1} >= 1.5 else 1)"
check $? "retry: after a 503 with Retry-After as an HTTP-date 3 s ahead the batch is POSTed again no sooner than 1.5 s later (shortest gap $gap s)"
ledger_control '{"retry_after": 1, "retry_after_form": "seconds"}' >/dev/null

# ---------------------------------------------------------------------------
# keepalive: a kept-alive connection that dies after the request was sent

ledger_control '{"close_kept_alive_for": 10}' >/dev/null
k0=$(ledger_log 'print(len(events))')
psql_db >/dev/null <<'EOF'
SELECT gridha.enqueue('ka' || s, 'ka-' || s || '.' || b, '\x00'::bytea, 'keepalive')
  FROM generate_series(1, 3) AS b, generate_series(1, 5) AS s
 ORDER BY b, s;
EOF
psql_db -c "SELECT service_id, batch_id FROM gridha.batches WHERE batch_id LIKE 'ka-%' ORDER BY service_id, seq" \
	-F "$(printf '\t')" >"$WORK/keepalive.expected"
kas=$(psql_db -c "SELECT string_agg(batch_id, ' ') FROM gridha.batches WHERE batch_id LIKE 'ka-%'")
# shellcheck disable=SC2086 # the ids are words
wait_until 60 committed $kas
twice=$(ledger_log "
import collections
n = collections.Counter((e['batch_id'], e['attempt']) for e in events[$k0:] if e['event'] == 'post' and e['batch_id'].startswith('ka-'))
closed = sum(1 for e in events[$k0:] if e['event'] == 'post' and e.get('closed'))
print(sum(1 for v in n.values() if v > 1), closed)")
[ "${twice% *}" = 0 ] && [ "${twice#* }" -ge 1 ]
check $? "keepalive: with kept-alive connections closed after a POST was read, no attempt reaches the ledger twice (attempts sent twice, connections closed: $twice)"
check_ledger_order "$WORK/keepalive.expected" "$WORK/ledger.log" \
	"keepalive: every batch still reaches the ledger, in its service's order, one in flight"

# ---------------------------------------------------------------------------
# words: what the log says of a 409 and of a body too big to read

ledger_control '{"close_kept_alive_for": 0, "fail_code": 409, "fail_code_applies": "post", "fail_code_for": 2}' >/dev/null
mark=$(log_mark)
psql_db -c "SELECT gridha.enqueue('wd1', 'wd-1.1', '\x00'::bytea, 'words')" >/dev/null
wait_until 30 committed wd-1.1
warned=$(log_count "$mark" 'batches of target "words" are delayed: the ledger answered http 409')
row=$(log_since "$mark" | grep -A 2 'batches of target "words" are delayed: the ledger answered http 409' | grep -c 'Fix the row of gridha.targets')
[ "$warned" -ge 1 ] && [ "$row" = 0 ]
check $? "words: a 409 is logged as the ledger's answer delaying the batch, without a hint to fix the target's row ($warned warnings, $row such hints)"
log_since "$mark" | grep -A 2 'answered http 409' | head -n 3 | diag

ledger_control '{"malformed_kind": "huge", "malformed_for": 4, "commit_delay": 3}' >/dev/null
mark=$(log_mark)
psql_db -c "SELECT gridha.enqueue('wd2', 'wd-2.1', '\x00'::bytea, 'words')" >/dev/null
huge_logged() {
	[ "$(log_count "$mark" 'target "words": status poll failed: http 200 with a body larger than')" -ge 1 ]
}
wait_until 20 huge_logged
res=$?
unreachable=$(log_count "$mark" 'target "words": status URL unreachable')
[ "$res" = 0 ] && [ "$unreachable" = 0 ]
check $? "words: a 200 status answer too big to read is logged as a failed poll, not as an unreachable status URL ($unreachable unreachable lines)"
log_since "$mark" | grep -E 'target "words"' | head -n 3 | diag
ledger_control '{"malformed_kind": "cycle", "malformed_for": 0, "commit_delay": 0.3}' >/dev/null

exit $((FAILED > 0))
