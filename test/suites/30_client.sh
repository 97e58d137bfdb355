#!/usr/bin/env bash
# test/suites/30_client.sh: the reference client (client/gridha-client) and
# the HTTP module it shares with the background worker (src/dlt_http.c).
#
#   1. client/test_dlt_http against client/test_http_fixture.py: URL
#      templates, encoding, both status dialects, malformed bodies, outcome
#      per HTTP status, timeouts, refused connections (its TAP lines, each
#      prefixed "dlt_http:")
#   2. three clients (one with --verify, one registering its own instance)
#      against the test ledger (test/dlt/ledger.py): 10 services x 10
#      batches, two services on a Splinter-dialect target; all committed,
#      per-service arrival order = enqueue order, no duplicate POST, every
#      client handed something out
#   3. a stale write: while a client's POST is held by the ledger, the
#      claim's epoch moves on behind its back; the client logs the RG001
#      refusal and carries on
#   4. SIGTERM in the middle of a POST: the batch in hand is reported, the
#      claims are released, exit status 0
#   5. a server restart (gridha_cluster_restart with the phase 2 settings):
#      the clients reconnect with the same instance ids and carry on
#   6. a hand-out whose answer was lost: the client finds the batch it does
#      not have in hand and submits it
#   7. a target without a status source: accepted means committed
#   8. the API it speaks: the typed report_submission and batched
#      report_statuses of rows (pg_stat_user_functions), never their 1.1
#      forms; against a database whose gridha SQL is still 1.1, which the
#      library refuses (RG022), it stops saying so, and once the database
#      is updated it commits
#
# Words: "victim" is the client a step signals; every wait is a bounded
# poll, never a sleep standing in for an assertion.
#
# Works in a database of its own (gridha_client_test); everything it starts
# it stops, on any exit.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-client.XXXXXX)}
DB=gridha_client_test
CLIENT=$REPO/client/gridha-client
UNIT=$REPO/client/test_dlt_http
FAILED=0
PIDS=()

# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 259

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}


cleanup() {
	local p
	for p in "${PIDS[@]}"; do
		kill -CONT "$p" 2>/dev/null
		kill -TERM "$p" 2>/dev/null
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null
	done
	psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "DROP DATABASE IF EXISTS ${DB}_11" >/dev/null 2>&1
}
trap cleanup EXIT

if [ ! -x "$CLIENT" ] || [ ! -x "$UNIT" ]; then
	not_ok "client/gridha-client and client/test_dlt_http are built (run make)"
	exit 1
fi

# ---------------------------------------------------------------------------
# 1. the HTTP module on its own

python3 "$REPO/client/test_http_fixture.py" "$WORK/fixture.port" 120 &
FIXTURE=$!
PIDS+=("$FIXTURE")
if port=$(wait_port_file "$WORK/fixture.port"); then
	"$UNIT" "http://127.0.0.1:$port" >"$WORK/unit.out" 2>&1
	unit_rc=$?
	sed -n -e 's/^ok [0-9]* - /ok - dlt_http: /p' -e 's/^not ok [0-9]* - /not ok - dlt_http: /p' \
		-e '/^#/p' "$WORK/unit.out"
	FAILED=$((FAILED + $(grep -c '^not ok' "$WORK/unit.out")))
	check "$unit_rc" "dlt_http: the unit test exits 0"
else
	not_ok "dlt_http: the test fixture started"
fi
kill "$FIXTURE" 2>/dev/null
wait "$FIXTURE" 2>/dev/null

# ---------------------------------------------------------------------------
# 2. three clients against the test ledger

start_ledger --commit-delay 0.2 --max-lifetime 300

psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" \
	-c "CREATE DATABASE $DB" >/dev/null || exit 1
# Short claim timings, so balance and takeover happen within seconds.
psql_db >/dev/null <<EOF || exit 1
CREATE EXTENSION gridha;
ALTER DATABASE $DB SET track_functions = 'all';
ALTER DATABASE $DB SET gridha.renew_interval = '1s';
ALTER DATABASE $DB SET gridha.soft_expiry = '6s';
ALTER DATABASE $DB SET gridha.hard_expiry = '20s';
UPDATE gridha.targets
   SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
       status_url = '$LEDGER/batch_statuses?id={batch_ids}'
 WHERE target = 'default';
INSERT INTO gridha.targets (target, submit_url, status_url)
VALUES ('splinter', '$LEDGER/batches/{service_id}/{batch_id}',
        '$LEDGER/splinter/batch_statuses?ids={batch_ids}');
EOF

# 10 services x 10 batches, in rounds; s09 and s10 go to the Splinter target.
psql_db >/dev/null <<'EOF' || exit 1
DO $$
BEGIN
    FOR b IN 1..10 LOOP
        FOR s IN 1..10 LOOP
            PERFORM gridha.enqueue(format('s%s', lpad(s::text, 2, '0')),
                                   format('s%s-b%s', lpad(s::text, 2, '0'), lpad(b::text, 2, '0')),
                                   decode('00ff0a' || lpad(to_hex(b), 2, '0'), 'hex'),
                                   CASE WHEN s >= 9 THEN 'splinter' END);
        END LOOP;
    END LOOP;
END
$$;
EOF
psql_db -F $'\t' -c "SELECT service_id, batch_id FROM gridha.batches ORDER BY service_id, seq" \
	>"$WORK/expected.tsv"

# The clients log in as a role with gridha_submitter only, as the README
# tells users to run them.
psql_db >/dev/null <<'EOF' || exit 1
DROP ROLE IF EXISTS gridha_test_submitter;
CREATE ROLE gridha_test_submitter LOGIN IN ROLE gridha_submitter;
EOF

ID1=$(psql_db -c "SELECT gen_random_uuid()")
ID2=$(psql_db -c "SELECT gen_random_uuid()")
COMMON=(--dsn "dbname=$DB user=gridha_test_submitter" --idle-sleep-ms 100 --monitor-interval-ms 200
	--submit-timeout-ms 10000 --max-runtime-s 120)
"$CLIENT" "${COMMON[@]}" --instance-id "$ID1" --log "$WORK/c1.log" 2>"$WORK/c1.err" &
C1=$!
GRIDHA_INSTANCE_ID=$ID2 GRIDHA_VERIFY=1 "$CLIENT" "${COMMON[@]}" --log "$WORK/c2.log" 2>"$WORK/c2.err" &
C2=$!
"$CLIENT" "${COMMON[@]}" --label third --log "$WORK/c3.log" 2>"$WORK/c3.err" &
C3=$!
PIDS+=("$C1" "$C2" "$C3")

# instance_of LOG: the instance id a client logged at its start.
instance_of() {
	python3 -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "start":
        print(e["instance"]); break' "$1" 2>/dev/null
}

all_committed() {
	[ "$(psql_db -c "SELECT count(*) FILTER (WHERE status = 'committed') FROM gridha.batches")" = 100 ]
}

wait_until 45 all_committed
check $? "3 clients: all 100 batches committed"
psql_db -c "SELECT status, count(*) FROM gridha.batches GROUP BY 1" | diag

# calls_of SIGNATURE: how often the clients called a function (their
# sessions' counts reach the statistics at most a second or so late).
calls_of() {
	psql_db -c "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions
	             WHERE funcid = to_regprocedure('$1')"
}
speaks_12() {
	[ "$(calls_of 'gridha.report_submission(uuid,text,text,bigint,gridha.submission_outcome,text)')" -ge 100 ] &&
		[ "$(calls_of 'gridha.report_statuses(uuid,gridha.status_report[])')" -ge 1 ]
}
wait_until 10 speaks_12
check $? "API 1.2: the clients reported every submission with a gridha.submission_outcome and the ledger's words as gridha.status_report rows"
[ "$(calls_of 'gridha.report_submission(uuid,text,text,bigint,text,text)')" = 0 ] &&
	[ "$(calls_of 'gridha.report_statuses(uuid,text[],text[],bigint[],text[])')" = 0 ]
check $? "API 1.2: the clients never called the 1.1 text and array forms"

ID3=$(instance_of "$WORK/c3.log")
[ "$ID3" != "" ] && [ "$(psql_db -c "SELECT label FROM gridha.instances WHERE instance_id = '$ID3'")" = third ]
check $? "a client without --instance-id registers one with its --label"

[ "$(psql_db -c "SELECT string_agg(DISTINCT owner::text, ',') FROM gridha.instances
                  WHERE instance_id IN ('$ID1', '$ID2', '$ID3')")" = gridha_test_submitter ]
check $? "the clients' instances belong to the role they logged in as (gridha_submitter only)"

if python3 "$REPO/test/dlt/check_log.py" --expected "$WORK/expected.tsv" --require-all \
		--one-in-flight "$WORK/ledger.log" >"$WORK/check.out" 2>&1; then
	ok "each service's arrival order at the ledger is its enqueue order, one in flight"
else
	not_ok "each service's arrival order at the ledger is its enqueue order, one in flight"
	tail -n 20 "$WORK/check.out" | diag
fi

# count_posts RESULT: POST lines of the ledger log with this result.
count_posts() {
	python3 -c '
import json, sys
n = 0
for line in open(sys.argv[1]):
    e = json.loads(line)
    n += e.get("event") == "post" and e.get("result") == sys.argv[2]
print(n)' "$WORK/ledger.log" "$1"
}
dups=$(count_posts duplicate)
accepted=$(count_posts accepted)
[ "$dups" = 0 ] && [ "$accepted" = 100 ]
check $? "no duplicate POST: 100 accepted, $dups duplicates"

# count_events LOG EVENT: lines of a client log with this event.
count_events() {
	grep -c "\"event\":\"$2\"" "$1"
}
n1=$(count_events "$WORK/c1.log" handout)
n2=$(count_events "$WORK/c2.log" handout)
n3=$(count_events "$WORK/c3.log" handout)
[ "$n1" -gt 0 ] && [ "$n2" -gt 0 ] && [ "$n3" -gt 0 ] && [ $((n1 + n2 + n3)) -eq 100 ]
check $? "every client handed something out ($n1 + $n2 + $n3 = 100 hand-outs)"

n_sub=$(grep -h '"event":"report"' "$WORK"/c[123].log | grep -c '"kind":"submission","service"[^}]*"word":"accepted","result":"pending"')
[ "$n_sub" -eq 100 ]
check $? "every hand-out was reported accepted -> pending ($n_sub)"

n_stat=$(grep -h '"event":"report"' "$WORK"/c[123].log | grep -c '"kind":"status"[^}]*"word":"committed","result":"committed"')
[ "$n_stat" -eq 100 ]
check $? "the monitors reported every batch committed, both dialects ($n_stat)"

grep -q '"event":"refused"' "$WORK"/c[123].log
[ $? -ne 0 ]
check $? "no refusal in normal operation"

# ---------------------------------------------------------------------------
# 3. a stale write: the claim moves on while the client is stopped mid-POST

# submitting_claimant BATCH: the claimant while the batch is submitting.
submitting_claimant() {
	psql_db -c "SELECT c.claimant FROM gridha.batches b
	            JOIN gridha.service_claims c USING (service_id)
	            WHERE b.batch_id = '$1' AND b.status = 'submitting'"
}

has_claimant() {
	[ -n "$(submitting_claimant "$1")" ]
}

# claimant_is_not SERVICE INSTANCE: someone else holds the claim now.
claimant_is_not() {
	local who
	who=$(psql_db -c "SELECT claimant FROM gridha.service_claims WHERE service_id = '$1'")
	[ -n "$who" ] && [ "$who" != "$2" ]
}

# client_of INSTANCE: PID and log of the client running as INSTANCE.
client_of() {
	case "$1" in
		"$ID1") echo "$C1 $WORK/c1.log" ;;
		"$ID2") echo "$C2 $WORK/c2.log" ;;
		"$ID3") echo "$C3 $WORK/c3.log" ;;
		*) return 1 ;;
	esac
}

# logged LOG PATTERN: a line of LOG matches PATTERN (grep -E).
logged() {
	grep -E -q "$2" "$1"
}

all_final() {
	[ "$(psql_db -c "SELECT count(*) FROM gridha.batches WHERE status <> 'committed'")" = 0 ]
}

# The ledger holds POSTs for 3 s, so the client is caught inside one; it is
# stopped there, its claim on s01 expires, another client takes it over
# (epoch + 1) and hands the batch out again; then the client continues, and
# its late report must be refused.
ledger_control '{"stall_for": 3, "stall_seconds": 3}'
psql_db -c "SELECT gridha.enqueue('s01', 's01-stale', '\\x01')" >/dev/null
holder=""
wait_until 10 has_claimant s01-stale && holder=$(submitting_claimant s01-stale)
if read -r VPID VLOG < <(client_of "$holder"); then
	epoch=$(psql_db -c "SELECT epoch FROM gridha.batches WHERE batch_id = 's01-stale'")
	kill -STOP "$VPID"
	psql_db -c "UPDATE gridha.service_claims SET soft_expiry = now() - interval '1s',
	            hard_expiry = now() - interval '1s' WHERE service_id = 's01'" >/dev/null
	wait_until 30 claimant_is_not s01 "$holder"
	check $? "stale write: another client took the claim over while the holder was stopped"
	kill -CONT "$VPID"
	wait_until 20 logged "$VLOG" '"event":"refused","instance":"[^"]*","during":"report_submission","service":"s01","batch":"s01-stale","epoch":'"$epoch"',[^}]*"sqlstate":"RG001"'
	check $? "stale write: the late report for epoch $epoch is refused with RG001 and logged"
	refusal_line=$(grep -n '"batch":"s01-stale"' "$VLOG" | grep '"refused"' | head -n 1 | cut -d: -f1)

	# One more batch for every service: the refused client must keep working.
	psql_db >/dev/null <<'EOF'
SELECT gridha.enqueue(format('s%s', lpad(s::text, 2, '0')), format('s%s-more', lpad(s::text, 2, '0')), '\x02',
                      CASE WHEN s >= 9 THEN 'splinter' END)
  FROM generate_series(1, 10) s;
EOF
	wait_until 45 all_final
	check $? "after the takeover every batch is committed, the stale one included"
	kill -0 "$VPID" 2>/dev/null &&
		tail -n +"$((${refusal_line:-0} + 1))" "$VLOG" | grep -q '"event":"handout"'
	check $? "the refused client carries on: it hands out batches after the refusal"
	[ "$(psql_db -c "SELECT attempts FROM gridha.batches WHERE batch_id = 's01-stale'")" -ge 2 ]
	check $? "the stale batch was handed out again by the claim's new holder (attempt 2+)"
else
	not_ok "stale write: a client held s01-stale in a POST (holder '$holder')"
fi
ledger_control '{"clear": true}'

# ---------------------------------------------------------------------------
# 4. SIGTERM while a POST is in hand

ledger_control '{"stall_for": 3, "stall_seconds": 2}'
psql_db -c "SELECT gridha.enqueue('s05', 's05-term', '\\x03')" >/dev/null
holder=""
wait_until 10 has_claimant s05-term && holder=$(submitting_claimant s05-term)
if read -r VPID VLOG < <(client_of "$holder"); then
	kill -TERM "$VPID"
	vrc=124
	deadline=$((SECONDS + 20))
	while [ "$SECONDS" -lt "$deadline" ] && kill -0 "$VPID" 2>/dev/null; do
		sleep 0.2
	done
	if ! kill -0 "$VPID" 2>/dev/null; then
		wait "$VPID"
		vrc=$?
	fi
	[ "$vrc" -eq 0 ]
	check $? "SIGTERM: the client exits 0 (got $vrc)"
	report_at=$(grep -n -E '"event":"report","instance":"[^"]*","kind":"submission","service":"s05","batch":"s05-term"' "$VLOG" | cut -d: -f1)
	release_at=$(grep -n '"event":"release"' "$VLOG" | cut -d: -f1)
	[ -n "$report_at" ] && [ -n "$release_at" ] && [ "$report_at" -lt "$release_at" ]
	check $? "SIGTERM: the batch in hand was finished and reported before the release"
	[ "$(psql_db -c "SELECT count(*) FROM gridha.service_claims WHERE claimant = '$holder'")" = 0 ]
	check $? "SIGTERM: the client's instance holds no claim afterwards"
	logged "$VLOG" '"event":"release"' && logged "$VLOG" '"event":"stop",[^}]*"reason":"SIGTERM"'
	check $? "SIGTERM: release and stop are logged"
	wait_until 30 all_final
	check $? "the others take over: s05-term is committed"
else
	not_ok "SIGTERM: a client held s05-term in a POST (holder '$holder')"
fi
ledger_control '{"clear": true}'

# ---------------------------------------------------------------------------
# 5. a server restart: the remaining clients reconnect and carry on

if [ -n "${GRIDHA_LIB:-}" ] && [ -n "${PGDATA:-}" ]; then
	# shellcheck source=../lib.sh
	. "$GRIDHA_LIB"
	# shellcheck disable=SC2086 # the options are words
	gridha_cluster_restart ${GRIDHA_CLUSTER_OPTS:-}
	check $? "restart: the server restarted"
	psql_db -c "SELECT gridha.enqueue(format('s%s', lpad(s::text, 2, '0')), format('s%s-restart', lpad(s::text, 2, '0')), '\\x04',
	                           CASE WHEN s >= 9 THEN 'splinter' END) FROM generate_series(1, 10) s" >/dev/null
	wait_until 45 all_final
	check $? "restart: the clients reconnected and committed 10 more batches"
	alive=0
	for p in "$C1" "$C2" "$C3"; do
		if kill -0 "$p" 2>/dev/null; then
			alive=$((alive + 1))
		fi
	done
	n_re=$(grep -l '"event":"disconnected"' "$WORK"/c[123].log | wc -l)
	[ "$alive" -eq 2 ] && [ "$n_re" -ge 1 ]
	check $? "restart: both remaining clients still run, $n_re logged a lost connection"
fi

# ---------------------------------------------------------------------------
# 6. a hand-out whose answer never reached the client: next_batch committed
#    for instance ID4 (from psql as the clients' role, standing in for a connection that broke
#    before the answer arrived); a client then runs as ID4 and must find the
#    batch it does not have in hand, report it delayed and submit it, instead
#    of renewing a claim whose head stays submitting for ever.

for p in "$C1" "$C2" "$C3"; do
	kill -TERM "$p" 2>/dev/null
done
for p in "$C1" "$C2" "$C3"; do
	wait "$p" 2>/dev/null
done
ID4=$(psql_db -c "SELECT gen_random_uuid()")
psql_db -c "SELECT gridha.enqueue('lost1', 'lost1-b' || b, '\x05') FROM generate_series(1, 2) b" >/dev/null
lost_batch=$(psql_db -U gridha_test_submitter -c "SELECT batch_id FROM gridha.next_batch('$ID4')")
[ "$lost_batch" = lost1-b1 ] &&
	[ "$(psql_db -c "SELECT status FROM gridha.batches WHERE batch_id = 'lost1-b1'")" = submitting ]
check $? "lost hand-out: lost1-b1 is submitting under instance ID4, and nobody has it in hand"
"$CLIENT" "${COMMON[@]}" --instance-id "$ID4" --max-runtime-s 40 --log "$WORK/c4.log" 2>"$WORK/c4.err" &
C4=$!
PIDS+=("$C4")
lost_done() {
	[ "$(psql_db -c "SELECT string_agg(status::text, ',' ORDER BY seq) FROM gridha.batches
	                 WHERE service_id = 'lost1'")" = "committed,committed" ]
}
wait_until 30 lost_done
check $? "lost hand-out: the client running as ID4 commits lost1-b1 and lost1-b2"
logged "$WORK/c4.log" '"event":"recovered","instance":"[^"]*","service":"lost1","batch":"lost1-b1"'
check $? "lost hand-out: the client logged that it recovered lost1-b1"
[ "$(grep -c '"batch_id": *"lost1-b1".*"result": *"accepted"' "$WORK/ledger.log")" = 1 ]
check $? "lost hand-out: the ledger accepted lost1-b1 once"

# 7. a target with no status source (fire and forget): the client reports an
#    accepted batch committed at once, as the background worker does
psql_db >/dev/null <<EOF
INSERT INTO gridha.targets (target, submit_url) VALUES ('faf', '$LEDGER/batches/{service_id}/{batch_id}');
SELECT gridha.enqueue('faf1', 'faf1-b' || b, '\\x06', 'faf') FROM generate_series(1, 3) b;
EOF
faf_done() {
	[ "$(psql_db -c "SELECT string_agg(status::text, ',' ORDER BY seq) FROM gridha.batches
	                 WHERE service_id = 'faf1'")" = "committed,committed,committed" ]
}
wait_until 30 faf_done
check $? "fire and forget: the client commits the 3 batches of a target without a status source"
[ "$(grep -c '"batch_id":"faf1-b[123]".*"result":"accepted"' "$WORK/ledger.log")" = 3 ]
check $? "fire and forget: the ledger accepted each of them once"
kill -TERM "$C4" 2>/dev/null
wait "$C4" 2>/dev/null

# 8. a database whose gridha SQL is 1.1 (this library installed, ALTER
#    EXTENSION gridha UPDATE not run yet): the library refuses it (RG022)
#    and the client, which speaks only the 1.3 API, stops at once saying
#    so; after the update the client commits the batches
DB11=${DB}_11
psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB11" \
	-c "CREATE DATABASE $DB11" >/dev/null
psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB11" >/dev/null <<EOF
CREATE EXTENSION gridha VERSION '1.1';
ALTER DATABASE $DB11 SET gridha.renew_interval = '1s';
UPDATE gridha.targets
   SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
       status_url = '$LEDGER/batch_statuses?id={batch_ids}'
 WHERE target = 'default';
EOF
timeout 30 "$CLIENT" "${COMMON[@]}" --dsn "dbname=$DB11 user=gridha_test_submitter" --max-runtime-s 20 \
	--log "$WORK/c5.log" 2>"$WORK/c5.err"
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] &&
	grep -q "cannot register an instance: gridha's SQL in this database is version 1.1, which this library no longer serves (RG022)" "$WORK/c5.err"
check $? "API 1.1: against gridha 1.1 SQL the client stops at once with the library's refusal, RG022 (exit $rc)"
psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB11" >/dev/null <<EOF
ALTER EXTENSION gridha UPDATE;
SELECT gridha.enqueue('old' || s, 'old' || s || '-b' || b, '\x07') FROM generate_series(1, 3) s, generate_series(1, 2) b;
EOF
"$CLIENT" "${COMMON[@]}" --dsn "dbname=$DB11 user=gridha_test_submitter" --max-runtime-s 40 \
	--log "$WORK/c5.log" 2>>"$WORK/c5.err" &
C5=$!
PIDS+=("$C5")
old_done() {
	[ "$(psql -X -q -A -t -d "$DB11" -c "SELECT count(*) FILTER (WHERE status = 'committed') FROM gridha.batches")" = 6 ]
}
wait_until 30 old_done
check $? "API 1.1: after ALTER EXTENSION gridha UPDATE the client commits its 6 batches"
kill -TERM "$C5" 2>/dev/null
wait "$C5" 2>/dev/null
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB11" >/dev/null 2>&1

if [ "$FAILED" -gt 0 ]; then
	for f in "$WORK"/c[12345].err; do
		echo "--- $f" | diag
		tail -n 15 "$f" | diag
	done
fi
[ "$FAILED" -eq 0 ]
