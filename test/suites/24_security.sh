#!/usr/bin/env bash
# test/suites/24_security.sh: the boundaries of docs/security.md that need
# databases, roles or a server restart of their own (the others are in
# pgTAP 16_security and 22_worker_safety).
#
#   schema     a database owner (not a superuser) creates schema gridha
#              before the superuser's CREATE EXTENSION gridha: the install
#              refuses (42501), and so it does when a schema of the
#              superuser's grants CREATE to PUBLIC; a database on 1.1 whose
#              gridha schema was handed to a role that is not a superuser
#              is not upgraded (ALTER EXTENSION ... UPDATE refuses, the
#              database stays on 1.1), and gridha's functions refuse to run
#              there (RG015)
#   superuser  with gridha.worker_role naming a superuser, a worker calls no
#              target function: a batch of a function target waits,
#              delayed, with the reason as detail, logged at most once a
#              minute for its target, and the function never ran; a batch
#              of a URL target is committed
#
# Works in databases of its own; restarts the cluster once with a worker
# and, at the end, with the phase 2 settings again.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
DB=gridha_security_test
DBO=gridha_security_dbo
FAILED=0
PIDS=()

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 9
suite_work 24_security

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}

# sql_is EXPECTED SQL: the query's output in $DB is exactly EXPECTED.
sql_is() {
	[ "$(psql_db -c "$2" 2>/dev/null)" = "$1" ]
}

drop_all() {
	psql -X -q -d postgres -c "SET client_min_messages = warning" \
		-c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "DROP ROLE IF EXISTS $DBO" >/dev/null 2>&1
}

cleanup() {
	suite_stop_pids
	suite_restore_cluster
	drop_all
}
trap cleanup EXIT

# fresh_db: database $DB owned by the role $DBO, which is not a superuser.
fresh_db() {
	drop_all
	psql -X -q -d postgres -v ON_ERROR_STOP=1 -c "CREATE ROLE $DBO LOGIN" \
		-c "CREATE DATABASE $DB OWNER $DBO" >/dev/null
}

# ---------------------------------------------------------------------------
# schema

fresh_db || exit 1
psql -X -q -U "$DBO" -d "$DB" -c "CREATE SCHEMA gridha" >/dev/null
out=$(psql_db -c "CREATE EXTENSION gridha" 2>&1)
[ $? -ne 0 ] && [[ "$out" == *"schema gridha belongs to role \"$DBO\", not to \"postgres\""* ]] &&
	sql_is 0 "SELECT count(*) FROM pg_extension WHERE extname = 'gridha'"
check $? "schema: CREATE EXTENSION gridha refuses a schema gridha that the database's owner ($DBO) made first, and installs nothing"
echo "$out" | head -n 3 | diag

fresh_db || exit 1
psql_db -c "CREATE SCHEMA gridha" -c "GRANT CREATE ON SCHEMA gridha TO PUBLIC" >/dev/null
out=$(psql_db -c "CREATE EXTENSION gridha" 2>&1)
[ $? -ne 0 ] && [[ "$out" == *"schema gridha grants CREATE to roles other than its owner"* ]]
check $? "schema: ... and a schema gridha of its own that grants CREATE to PUBLIC"

fresh_db || exit 1
psql_db -c "CREATE EXTENSION gridha VERSION '1.1'" -c "ALTER SCHEMA gridha OWNER TO $DBO" >/dev/null
out=$(psql_db -c "ALTER EXTENSION gridha UPDATE" 2>&1)
[ $? -ne 0 ] && [[ "$out" == *"schema gridha belongs to role \"$DBO\", which is not a superuser"* ]] &&
	sql_is 1.1 "SELECT extversion FROM pg_extension WHERE extname = 'gridha'"
check $? "schema: a database on 1.1 whose schema gridha belongs to $DBO is not upgraded (it stays on 1.1)"
out=$(psql_db -c "SELECT gridha.register_instance('x')" 2>&1)
[[ "$out" == *"schema gridha belongs to role \"$DBO\", which is not a superuser"* ]]
check $? "schema: ... and gridha's functions refuse to run there (RG015)"
psql_db -c "ALTER SCHEMA gridha OWNER TO postgres" >/dev/null &&
	psql_db -c "ALTER EXTENSION gridha UPDATE" >/dev/null &&
	sql_is "$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$REPO/gridha.control")" \
		"SELECT extversion FROM pg_extension WHERE extname = 'gridha'"
check $? "schema: once a superuser owns the schema again, the upgrade runs"

# ---------------------------------------------------------------------------
# superuser: a worker connected as a superuser calls no target function

fresh_db || exit 1
start_ledger --commit-delay 0.05 --max-lifetime 600
psql_db >/dev/null <<EOF || exit 1
CREATE EXTENSION gridha;
CREATE TABLE called (service_id text, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION sec_submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.called (service_id) VALUES (\$1);
    RETURN 'accepted';
END
\$\$;
INSERT INTO gridha.targets (target, submit_function) VALUES ('fn', 'sec_submit(text,text,bytea,bigint)');
INSERT INTO gridha.targets (target, submit_url, status_url) VALUES
    ('ledger', '$LEDGER/batches/{service_id}/{batch_id}', '$LEDGER/batch_statuses?id={batch_ids}');
EOF
mark=$(wc -l <"$GRIDHA_PGLOG")
# shellcheck disable=SC2086 # the options are words
if ! gridha_cluster_restart $SUITE_CLUSTER_OPTS gridha.workers=1 gridha.database=$DB gridha.naptime=100ms \
		gridha.monitor_interval=100ms gridha.worker_role=postgres; then
	not_ok "superuser: the cluster restarted with a worker whose gridha.worker_role is a superuser"
	exit 1
fi
psql_db -c "SELECT gridha.enqueue('f1', 'f1-b' || n, '\\x01', 'fn') FROM generate_series(1, 2) n" \
	-c "SELECT gridha.enqueue('u1', 'u1-b1', '\\x01', 'ledger')" >/dev/null
wait_until 30 sql_is committed "SELECT status FROM gridha.batches WHERE batch_id = 'u1-b1'"
check $? "superuser: the worker commits the batch of a URL target"
REASON='target functions are not called while the worker runs as a superuser: set gridha.worker_role to a role that is not one'
wait_until 30 sql_is "delayed|$REASON" "SELECT status || '|' || detail FROM gridha.batches WHERE batch_id = 'f1-b1'"
check $? "superuser: the head of the function target's service is delayed with the reason as its detail"
sleep 2
sql_is "0|queued|true" "SELECT (SELECT count(*) FROM called) || '|' ||
                            (SELECT status FROM gridha.batches WHERE batch_id = 'f1-b2') || '|' ||
                            (SELECT attempts > 1 FROM gridha.batches WHERE batch_id = 'f1-b1')"
check $? "superuser: the function never ran, the batch behind waits, and the head was handed out again and again, never failed"
psql_db -c "SELECT batch_id, status, attempts, detail FROM gridha.batches WHERE service_id = 'f1' ORDER BY seq" \
	-c "SELECT count(*) AS called FROM called" | diag
n_warn=$(tail -n +"$((mark + 1))" "$GRIDHA_PGLOG" | grep -c 'target functions are not called')
n_start=$(tail -n +"$((mark + 1))" "$GRIDHA_PGLOG" | grep -c 'runs as a superuser')
[ "$n_start" -ge 1 ] && [ "$n_warn" -ge 1 ] && [ "$n_warn" -le 2 ]
check $? "superuser: the worker warns at start ($n_start) and about the target once a minute at most ($n_warn lines)"

[ "$FAILED" -eq 0 ]
