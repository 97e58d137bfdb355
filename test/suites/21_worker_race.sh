#!/usr/bin/env bash
# test/suites/21_worker_race.sh: a background worker's hand-out of a service
# enqueued for the first time while the worker's hand-out statement runs.
#
# The race: an enqueue transaction that creates a new service begins before
# the worker's hand-out statement and commits while that statement runs.
# next_batch, inside the statement, then claims and hands out the new
# service with snapshots of its own; whatever the worker reads about the
# batch afterwards must see that claim, or the batch is left submitting under
# the worker's claim and its service waits for as long as the worker lives.
#
# How the race is made certain: one worker with gridha.balance_claims off
# (it claims every free service), a trigger that holds the worker's claim
# renewal (the UPDATE of gridha.instances inside next_batch) for 1.5 s, and
# an enqueue transaction opened before and committed while the worker is
# held. The target is a submit_function without a status source, so an
# accepted batch is committed at once; no ledger is needed.
#
# Works in a database of its own (gridha_race_test); restarts the cluster with
# one worker serving it and, at the end, with the phase 2 settings again.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
DB=gridha_race_test
FAILED=0
ENQ_PID=

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 4

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}

cleanup() {
	if [ -n "$ENQ_PID" ]; then
		kill "$ENQ_PID" 2>/dev/null
	fi
	# shellcheck disable=SC2086 # the options are words
	gridha_cluster_restart $SUITE_CLUSTER_OPTS >/dev/null 2>&1 ||
		echo "# could not restart the cluster with the phase 2 settings" >&2
	psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1
}
trap cleanup EXIT

psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" \
	-c "CREATE DATABASE $DB" >/dev/null || exit 1
psql_db >/dev/null <<'EOF' || exit 1
CREATE EXTENSION gridha;
CREATE FUNCTION race_submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT 'accepted' $$;
UPDATE gridha.targets SET submit_function = 'race_submit(text,text,bytea,bigint)'
 WHERE target = 'default';
SELECT gridha.enqueue('warm', 'warm-b1', '\x00');
EOF

# shellcheck disable=SC2086 # the options are words
if ! gridha_cluster_restart $SUITE_CLUSTER_OPTS gridha.workers=1 gridha.database=$DB \
		gridha.balance_claims=off gridha.renew_interval=1s gridha.naptime=100ms \
		gridha.monitor_interval=100ms; then
	not_ok "race: the cluster restarted with one worker"
	exit 1
fi

committed() {
	[ "$(psql_db -c "SELECT status FROM gridha.batches WHERE batch_id = '$1'" 2>/dev/null)" = committed ]
}
wait_until 30 committed warm-b1
check $? "race: the worker runs (warm-b1 committed)"

# The enqueue transaction begins first, then the trigger holds the renewal.
mkfifo "$GRIDHA_SUITE_DIR/enq.in" 2>/dev/null || exit 1
psql -X -q -d "$DB" -v ON_ERROR_STOP=1 <"$GRIDHA_SUITE_DIR/enq.in" >"$GRIDHA_SUITE_DIR/enq.out" 2>&1 &
ENQ_PID=$!
exec 7>"$GRIDHA_SUITE_DIR/enq.in"
echo "BEGIN; SELECT gridha.enqueue('race1', 'race1-b1', '\\x01');" >&7
enqueue_open() {
	[ "$(psql_db -c "SELECT count(*) FROM pg_stat_activity
	                 WHERE datname = '$DB' AND state = 'idle in transaction'")" -ge 1 ]
}
wait_until 10 enqueue_open
check $? "race: the enqueue of the new service race1 is open, not committed"

psql_db >/dev/null <<'EOF'
CREATE FUNCTION race_hold() RETURNS trigger LANGUAGE plpgsql SET search_path = public AS $$
BEGIN
    PERFORM pg_sleep(1.5);
    RETURN NEW;
END
$$;
CREATE TRIGGER race_hold BEFORE UPDATE ON gridha.instances
    FOR EACH ROW WHEN (NEW.kind = 'worker') EXECUTE FUNCTION race_hold();
EOF
worker_held() {
	[ "$(psql_db -c "SELECT count(*) FROM pg_stat_activity
	                 WHERE backend_type = 'gridha worker' AND wait_event = 'PgSleep'")" -ge 1 ]
}
wait_until 10 worker_held
check $? "race: the worker is held inside its hand-out statement (renewal)"

echo "COMMIT;" >&7
exec 7>&-
wait "$ENQ_PID"
ENQ_PID=
psql_db -c "DROP TRIGGER race_hold ON gridha.instances" >/dev/null

wait_until 15 committed race1-b1
check $? "race: race1-b1, claimed and handed out inside the statement that began before its enqueue committed, is committed"
psql_db -c "SELECT batch_id, status, attempts FROM gridha.batches WHERE service_id = 'race1'" | diag

[ "$FAILED" -eq 0 ]
