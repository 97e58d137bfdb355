#!/usr/bin/env bash
# test/suites/19_restore_roles.sh: restores by any superuser keep every
# batch and never hand an instance to a stranger; a worker whose role is
# not usable waits quietly (issue 39, items 2 and 3).
#
# Steps, in the order they run:
#
#   source    database r19_src on the suite's cluster: r19_alice and
#             r19_bob (LOGIN, gridha_submitter) each act as an instance
#             (A, B); 3 services x 2 batches; A holds s1's head submitting
#             at epoch E. pg_dump -Fc of it.
#   other     pg_restore -d by r19_admin, a superuser that owned nothing
#             in the dump, with and without --no-owner: no error, every
#             batch there (the old install script refused the schema the
#             dump gave to postgres; --no-owner worked before too).
#   cluster2  a second cluster (another initdb: another system identifier)
#             where a role r19_alice exists, and r19_bob does not: the
#             restore warns once, naming r19_bob as missing and r19_alice
#             as ambiguous, with the set_instance_owner command. r19_alice
#             there (granted gridha_submitter) is refused RG008 by
#             next_batch(A) and by report_submission(A, s1, E): s1's head
#             stays submitting, at E. Once a superuser confirms A's owner
#             (set_instance_owner), the same report is accepted.
#   role      the suite's cluster restarted with one worker whose
#             gridha.worker_role is missing, then a role without
#             gridha_submitter, then a NOLOGIN role: each time the worker
#             keeps its pid for 20 s, logs at most 2 lines in that time,
#             and once the role is fixed (CREATE ROLE, GRANT, ALTER ROLE
#             LOGIN) commits a batch within 10 s, still that process; each
#             warning (what is wrong, the command) was logged once.
#
# Every wait is a bounded poll; the second cluster and the databases are
# removed on any exit, the suite's cluster restarted with its settings.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-r19.XXXXXX)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
FAILED=0
PIDS=()
RESTARTED=0

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 16
# shellcheck source-path=SCRIPTDIR source=../dba/cluster2.sh
. "$REPO/test/dba/cluster2.sh"

q() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 "$@"
}

cleanup() {
	suite_stop_pids
	c2_cleanup
	suite_restore_cluster
	local d
	for d in r19_src r19_other r19_noown r19w; do
		psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $d" >/dev/null 2>&1
	done
	psql -X -q -d postgres -c "DROP ROLE IF EXISTS r19_alice, r19_bob, r19_admin, r19_w1, r19_w2, r19_w3" >/dev/null 2>&1
}
trap cleanup EXIT

if [ -z "${PGDATA:-}" ] || [ -z "${GRIDHA_PGLOG:-}" ]; then
	not_ok "the suite runs inside test/run.sh (PGDATA and GRIDHA_PGLOG are set)"
	exit 1
fi

if ! c2_init >"$WORK/c2_init.out" 2>&1; then
	not_ok "the second cluster's initdb"
	diag <"$WORK/c2_init.out"
	exit 1
fi

# ---------------------------------------------------------------------------
# source

q -d postgres -c "SET client_min_messages = warning" \
	-c "DROP DATABASE IF EXISTS r19_src" -c "CREATE DATABASE r19_src" >/dev/null || exit 1
q -d r19_src >"$WORK/source.out" 2>&1 <<'EOF' || { not_ok "source"; diag <"$WORK/source.out"; exit 1; }
SET client_min_messages = warning;
CREATE EXTENSION gridha;
DROP ROLE IF EXISTS r19_alice;
DROP ROLE IF EXISTS r19_bob;
DROP ROLE IF EXISTS r19_admin;
CREATE ROLE r19_alice LOGIN IN ROLE gridha_submitter, gridha_producer;
CREATE ROLE r19_bob LOGIN IN ROLE gridha_submitter, gridha_producer;
CREATE ROLE r19_admin LOGIN SUPERUSER;
SELECT gridha.enqueue('s' || s, 's' || s || '-b' || b, '\x00'::bytea)
  FROM generate_series(1, 3) s, generate_series(1, 2) b ORDER BY s, b;
EOF
A=$(q -d r19_src -U r19_alice -c "SELECT gridha.register_instance('A')")
B=$(q -d r19_src -U r19_bob -c "SELECT gridha.register_instance('B')")
# A takes the claims and hands out one head; the first claim's epoch is E
HEAD=$(q -d r19_src -U r19_alice -c "SELECT service_id || '|' || batch_id || '|' || epoch FROM gridha.next_batch('$A')")
S=${HEAD%%|*}
REST=${HEAD#*|}
BATCH=${REST%%|*}
E=${REST#*|}
echo "# A=$A B=$B head=$HEAD"
NBATCH=$(q -d r19_src -c "SELECT count(*) FROM gridha.batches")
"$PG_BINDIR/pg_dump" -Fc -d r19_src -f "$WORK/r19.dump" 2>"$WORK/dump.err" || { not_ok "pg_dump"; diag <"$WORK/dump.err"; exit 1; }

# ---------------------------------------------------------------------------
# other, no-owner

restore_as() { # DB OPTS...: createdb, pg_restore as r19_admin; prints the count
	local db=$1
	shift
	q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" \
		-c "CREATE DATABASE $db OWNER r19_admin" >/dev/null
	"$PG_BINDIR/pg_restore" -U r19_admin -d "$db" "$@" "$WORK/r19.dump" >"$WORK/$db.err" 2>&1
	echo "exit $? batches $(q -d "$db" -c "SELECT count(*) FROM gridha.batches" 2>/dev/null)"
}
GOT=$(restore_as r19_other)
GOT2=$(restore_as r19_noown --no-owner)
if [ "$GOT" = "exit 0 batches $NBATCH" ] && [ "$GOT2" = "exit 0 batches $NBATCH" ]; then
	ok "restores by another superuser, with and without --no-owner, succeed and keep every batch"
else
	not_ok "restores by another superuser, with and without --no-owner, succeed and keep every batch"
	{
		echo "got: '$GOT' and with --no-owner '$GOT2' (want exit 0 batches $NBATCH)"
		head -n 5 "$WORK/r19_other.err" "$WORK/r19_noown.err"
	} | diag
fi

# ---------------------------------------------------------------------------
# cluster2

c2_start >"$WORK/c2_start.out" 2>&1 || { not_ok "the second cluster starts"; diag <"$WORK/c2_start.out"; exit 1; }
c2_psql -d postgres -c "CREATE ROLE r19_alice LOGIN" -c "CREATE DATABASE r19" >/dev/null || exit 1
LOG_AT=$(stat -c %s "$C2_LOG")
"$PG_BINDIR/pg_restore" -h "$C2_DIR" -p "$C2_PORT" -U postgres -d r19 "$WORK/r19.dump" >"$WORK/c2_restore.err" 2>&1
RC=$?
c2_psql -d postgres -c "GRANT gridha_submitter, gridha_producer TO r19_alice" >/dev/null
tail -c +$((LOG_AT + 1)) "$C2_LOG" >"$WORK/c2_restore.log"
N=$(grep -c "restored gridha instances are not confirmed on this cluster" "$WORK/c2_restore.log")
if [ "$N" = 1 ] && [ "$RC" = 0 ]; then
	ok "the restore warns once about unconfirmed owners"
else
	not_ok "the restore warns once about unconfirmed owners"
	echo "warnings: $N, pg_restore exit $RC" | diag
	head -n 10 "$WORK/c2_restore.err" | diag
	tail -n 20 "$WORK/c2_restore.log" | diag
fi
if grep -q 'missing here (instances): r19_bob (1)\.' "$WORK/c2_restore.log" &&
	grep -q 'may be other roles of the same name (instances): r19_alice (1)\.' "$WORK/c2_restore.log" &&
	grep -q "set_instance_owner(instance_id, 'r19_alice') FROM gridha.instances WHERE owner = 'r19_alice';" "$WORK/c2_restore.log"; then
	ok "the warning names r19_bob missing, r19_alice ambiguous, and the command"
else
	not_ok "the warning names r19_bob missing, r19_alice ambiguous, and the command"
	grep -A3 "not confirmed" "$WORK/c2_restore.log" | diag
fi

# c2_as_alice SQL: r19_alice's call in the second cluster, errors verbose
c2_as_alice() {
	"$PG_BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -v VERBOSITY=verbose \
		-h "$C2_DIR" -p "$C2_PORT" -U r19_alice -d r19 -c "$1" 2>&1
}
GOT=$(c2_as_alice "SELECT count(*) FROM gridha.next_batch('$A')")
if [[ "$GOT" == *"ERROR:  RG008: the owner of instance $A is not confirmed on this cluster"* ]]; then
	ok "next_batch of the restored instance by a same-named role: RG008"
else
	not_ok "next_batch of the restored instance by a same-named role: RG008"
	echo "$GOT" | diag
fi
GOT=$(c2_as_alice "SELECT gridha.report_submission('$A', '$S', '$BATCH', $E, 'accepted'::text)")
if [[ "$GOT" == *"ERROR:  RG008: the owner of instance $A is not confirmed"* ]]; then
	ok "report_submission at the old epoch by a same-named role: RG008"
else
	not_ok "report_submission at the old epoch by a same-named role: RG008"
	echo "$GOT" | diag
fi
GOT=$(c2_psql -d r19 -c "SELECT b.status || ' ' || b.epoch || ' ' || c.claimant || ' ' || c.epoch
	FROM gridha.batches b JOIN gridha.service_claims c USING (service_id)
	WHERE b.service_id = '$S' AND b.batch_id = '$BATCH'" 2>&1)
if [ "$GOT" = "submitting $E $A $E" ]; then
	ok "the refused calls changed nothing: the head is submitting at E, A's claim at E"
else
	not_ok "the refused calls changed nothing: the head is submitting at E, A's claim at E"
	echo "got: $GOT (want submitting $E $A $E)" | diag
fi
c2_psql -d r19 -c "SELECT gridha.set_instance_owner('$A', 'r19_alice')" >/dev/null
GOT=$(c2_as_alice "SELECT gridha.report_submission('$A', '$S', '$BATCH', $E, 'accepted'::text)")
if [ "$GOT" = pending ]; then
	ok "once an administrator confirms the owner, the report at E is accepted"
else
	not_ok "once an administrator confirms the owner, the report at E is accepted"
	echo "$GOT" | diag
fi
c2_stop

# ---------------------------------------------------------------------------
# role: a worker whose role cannot serve waits, then serves

start_ledger --commit-delay 0.1 --max-lifetime 600
q -d postgres -c "SET client_min_messages = warning" \
	-c "DROP DATABASE IF EXISTS r19w" -c "CREATE DATABASE r19w" \
	-c "DROP ROLE IF EXISTS r19_w1, r19_w2, r19_w3" \
	-c "CREATE ROLE r19_w2 LOGIN" -c "CREATE ROLE r19_w3 NOLOGIN" >/dev/null || exit 1
q -d r19w >/dev/null 2>&1 <<EOF || { not_ok "r19w"; exit 1; }
SET client_min_messages = warning;
CREATE EXTENSION gridha;
GRANT gridha_submitter TO r19_w3;
UPDATE gridha.targets
   SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
       status_url = '$LEDGER/batch_statuses?id={batch_ids}'
 WHERE target = 'default';
EOF

# committed BATCH: the batch is committed in r19w
committed() {
	[ "$(q -d r19w -c "SELECT status FROM gridha.batches WHERE batch_id = '$1'" 2>/dev/null)" = committed ]
}

# worker_case ROLE WHAT FIX: one worker as ROLE, 20 s watched, then FIX
worker_case() {
	local role=$1 what=$2 fix=$3 pid1 pid2 at n
	RESTARTED=1
	# shellcheck disable=SC2086 # the options are words
	if ! gridha_cluster_restart $SUITE_CLUSTER_OPTS gridha.workers=1 gridha.database=r19w \
		gridha.worker_role="$role" gridha.naptime=200ms gridha.monitor_interval=200ms \
		gridha.soft_expiry=4s gridha.hard_expiry=10s gridha.renew_interval=1s >"$WORK/restart.out" 2>&1; then
		not_ok "$what: the cluster restarts"
		not_ok "$what: the same worker process commits a batch within 10 s of the fix"
		diag <"$WORK/restart.out"
		return
	fi
	sleep 4
	pid1=$(q -d r19w -c "SELECT string_agg(pid::text, ',') FROM gridha.workers")
	at=$(stat -c %s "$GRIDHA_PGLOG")
	sleep 20
	pid2=$(q -d r19w -c "SELECT string_agg(pid::text, ',') FROM gridha.workers")
	n=$(tail -c +$((at + 1)) "$GRIDHA_PGLOG" | grep -c .)
	if [ -n "$pid1" ] && [ "$pid1" = "$pid2" ] && [ "$n" -le 2 ]; then
		ok "$what: the worker keeps its pid and logs at most 2 lines in 20 s"
	else
		not_ok "$what: the worker keeps its pid and logs at most 2 lines in 20 s"
		{ echo "pids: '$pid1' then '$pid2'; $n log lines"; tail -c +$((at + 1)) "$GRIDHA_PGLOG" | head -n 12; } | diag
	fi
	q -d r19w -c "SELECT gridha.enqueue('w-$role', 'w-$role-b1', '\\x01'::bytea)" >/dev/null
	q -d postgres -c "$fix" >/dev/null
	if wait_until 10 committed "w-$role-b1" &&
		[ "$(q -d r19w -c "SELECT string_agg(pid::text, ',') FROM gridha.workers")" = "$pid1" ]; then
		ok "$what: the same worker process commits a batch within 10 s of the fix"
	else
		not_ok "$what: the same worker process commits a batch within 10 s of the fix"
		{ echo "pid at first: $pid1"; q -d r19w -c "SELECT pid, state FROM gridha.workers"; } | diag
		tail -n 10 "$GRIDHA_PGLOG" | diag
	fi
}
worker_case r19_w1 "a missing worker role" "CREATE ROLE r19_w1 LOGIN IN ROLE gridha_submitter"
worker_case r19_w2 "a worker role without gridha_submitter" "GRANT gridha_submitter TO r19_w2"
worker_case r19_w3 "a NOLOGIN worker role" "ALTER ROLE r19_w3 LOGIN"
# the warning for each names the fix, once
for w in "r19_w1.*does not exist" "r19_w2.*is not a member of gridha_submitter" "r19_w3.*cannot log in"; do
	n=$(grep -c "waits: its role \"${w}" "$GRIDHA_PGLOG")
	if [ "$n" = 1 ]; then
		ok "the worker said once: ${w#*\*}"
	else
		not_ok "the worker said once: ${w#*\*}"
		echo "said $n times" | diag
	fi
done

exit $((FAILED > 0))
