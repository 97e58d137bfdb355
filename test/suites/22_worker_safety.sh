#!/usr/bin/env bash
# test/suites/22_worker_safety.sh: a background worker survives whatever its
# targets, the ledger, other sessions and the operator do to it, and keeps
# its credentials to itself (src/worker.c, src/submit.c, src/targets.c).
#
# The cluster is restarted with one static worker serving this suite's
# database (gridha.balance_claims off: it claims every service it can serve),
# short timings and a 1 s gridha.worker_lock_timeout (some steps reload
# other settings, and put them back); later with the same settings and
# gridha.worker_role; at the end with the phase 2 settings.
# Steps, in the order they run:
#
#   switch      a service claimed on a URL target is moved by enqueue to
#               'default', which has neither URL nor function: no crash,
#               its head is delayed with the reason, the next batch waits,
#               one WARNING for five such services; once 'default' gets a
#               URL both batches of each service arrive in order
#   dropped     the submit_function of one target and the status_function
#               of another are dropped (a stored signature records no
#               dependency): after a claim cycle the worker still holds
#               their services, their next heads are delayed with the
#               reason (one WARNING each), the worker is the same process;
#               re-created under the same signatures (the rows untouched:
#               the signature resolves again), every batch is committed in
#               order
#   malformed   target rows written with targets_check disabled (a URL and
#               a function, a malformed URL, headers that are not a JSON
#               object): heads delayed with the reason, no crash
#   pgstat      the worker's writes show in pg_stat_user_tables
#   lock        a session holds a claim row lock (SELECT ... FOR UPDATE,
#               kept open): the worker logs the lock timeout, keeps renewing
#               and serving the other services (no batch POSTed twice), and
#               serves the locked one once the lock is gone
#   statement   with gridha.worker_statement_timeout 2s, a submit function
#               asleep is cancelled (logged), its batch delayed; while the
#               worker is inside it, a DROP FUNCTION of it waits; disarmed,
#               the batches are applied once each, in order
#   codes       the ledger answers 301, 401, 403, 404, 414 for a while: the
#               batches are delayed, then committed, none invalid; 400 and
#               422 still end a batch invalid, and a target's own
#               reject_codes are honoured
#   urls        status GETs: with gridha.status_url_max_length 512 no GET is
#               longer and the fullest holds as many ids as fit; without a
#               limit of its own the worker halves GETs the ledger answers
#               414, and a poll answered 431 is halved down to single ids;
#               every batch committed, none delayed
#   headers     a target's request_headers reach the ledger on every POST
#               and GET; the secret is never in batches.detail, the server
#               log, the client's log, or anything a producer can read
#   client      the reference client (URL targets only) and the worker
#               share URL and function targets with balance on: all
#               committed, the client never holds a function target's
#               service
#   reinstall   DROP EXTENSION / CREATE EXTENSION while the worker runs
#               (first in the transaction that created a service: it
#               commits, and the counts start empty): it
#               waits, then serves again as the same instance (kind worker)
#   sigterm     stop_worker ends a worker waiting for a row lock, and one
#               inside a 600 s target function (that batch reported
#               delayed); a fast shutdown ends a worker in a target function
#               and one waiting for a row lock that only a prepared
#               transaction holds. Each within 30 s (a failure bound, not a
#               measure of speed)
#   role        with gridha.worker_role a plain role: the worker connects
#               as it and owns its instance; target functions redefined to
#               CREATE ROLE or to read pg_authid fail and delay their batch,
#               nothing is created; a public."=" on (text, text), found
#               first by the worker role's search_path, and one on
#               (gridha.batch_status, gridha.batch_status) are never called
#               by the worker
#   headers     (again, over the whole run) every POST and status GET
#               carried the header; the secret is not in the server log
#   dropdb      DROP DATABASE ... WITH (FORCE) while the worker sleeps in a
#               target function: it succeeds, the worker stops
#   syncrep     in a database of its own (gridha_safety_sync), the worker
#               holds a claim when synchronous_commit = on starts waiting
#               for a standby that never connects: a fast shutdown still
#               completes within 30 s, the worker releasing its claims
#
# Words: W1 is the static worker; "history" is w_history, where a trigger
# on gridha.batches records every change of a batch's status or detail, so a
# step can see a batch's past states. Every wait is a bounded poll, never a
# sleep standing in for an assertion. Services are named per step.
#
# Works in a database of its own (gridha_safety_test) and roles of its own
# (gridha_safety_*); everything it starts it stops, on any exit.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-safety.XXXXXX)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
DB=gridha_safety_test
WROLE=gridha_safety_worker
OWNER=gridha_safety_owner
PROLE=gridha_safety_producer
EVIL=gridha_safety_evil
CLIENT=$REPO/client/gridha-client
CHECK_LOG=$REPO/test/dlt/check_log.py
QUERY=$REPO/test/workers/ledger_query.py
SECRET_VALUE=s3cret-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
SECRET="Bearer $SECRET_VALUE"
FAILED=0
PIDS=()
HOLDS=()
RESTARTED=0

# The worker settings of this suite (see the header). A cycle of the lock
# step waits out up to two lock timeouts (the reports in one statement, then
# the locked one alone) while POSTs are out: submit_timeout is longer, as
# the defaults are (5 s and 15 s).
WORKER_OPTS="gridha.workers=1 gridha.database=$DB gridha.balance_claims=off
	gridha.naptime=100ms gridha.monitor_interval=100ms gridha.renew_interval=1s
	gridha.soft_expiry=10s gridha.hard_expiry=30s gridha.submit_timeout=5s
	gridha.worker_lock_timeout=1s max_prepared_transactions=4"

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 92

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}

# sql_is EXPECTED SQL: the query's output is exactly EXPECTED.
sql_is() {
	[ "$(psql_db -c "$2" 2>/dev/null)" = "$1" ]
}

# log_mark: the server log's length in lines; log_since MARK: what came
# after; log_count MARK PATTERN: how many of those lines match (grep -E).
log_mark() {
	wc -l <"$GRIDHA_PGLOG"
}

log_since() {
	tail -n +"$(($1 + 1))" "$GRIDHA_PGLOG"
}

log_count() {
	log_since "$1" | grep -E -c -e "$2"
}

log_has() {
	[ "$(log_count "$1" "$2")" -gt 0 ]
}

# no_crash MARK: no server process ended by a signal since MARK.
no_crash() {
	! log_has "$1" 'terminated by signal'
}

# hist_mark: the newest history row's id.
hist_mark() {
	psql_db -c "SELECT coalesce(max(id), 0) FROM w_history"
}

# worker_pid ID: the pid of the running worker that is instance ID.
worker_pid() {
	psql_db -c "SELECT pid FROM gridha.workers WHERE instance_id = '$1'"
}

# backend_gone PID: no server process has this pid any more.
backend_gone() {
	sql_is 0 "SELECT count(*) FROM pg_stat_activity WHERE pid = $1"
}

# hold_open NAME SQL: a session of its own runs BEGIN and SQL and keeps the
# transaction open (application_name w_hold_NAME) until hold_close NAME.
declare -A HOLD_FD HOLD_PID
hold_open() {
	local fifo=$WORK/hold-$1.in fd
	rm -f "$fifo"
	mkfifo "$fifo" || return 1
	PGAPPNAME=w_hold_$1 psql -X -q -d "$DB" -v ON_ERROR_STOP=1 <"$fifo" >"$WORK/hold-$1.out" 2>&1 &
	HOLD_PID[$1]=$!
	PIDS+=("$!")
	HOLDS+=("$1")
	exec {fd}>"$fifo"
	HOLD_FD[$1]=$fd
	echo "BEGIN; $2" >&"$fd"
	wait_until 10 sql_is 1 "SELECT count(*) FROM pg_stat_activity
	                        WHERE application_name = 'w_hold_$1' AND state = 'idle in transaction'"
}

hold_close() {
	local fd=${HOLD_FD[$1]:-}
	[ -n "$fd" ] || return 0
	echo "COMMIT;" >&"$fd"
	exec {fd}>&-
	wait "${HOLD_PID[$1]}" 2>/dev/null
	HOLD_FD[$1]=
}

cleanup() {
	local h
	for h in "${HOLDS[@]}"; do
		hold_close "$h"
	done
	suite_stop_pids
	psql -X -q -A -t -d "$DB" -c "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()" 2>/dev/null |
		while read -r gid; do
			psql -X -q -d "$DB" -c "ROLLBACK PREPARED '$gid'" >/dev/null 2>&1
		done
	suite_restore_cluster
	psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" \
		-c "DROP DATABASE IF EXISTS gridha_safety_sync WITH (FORCE)" >/dev/null 2>&1
	psql -X -q -d postgres -c "DROP ROLE IF EXISTS $WROLE" -c "DROP ROLE IF EXISTS $PROLE" \
		-c "DROP ROLE IF EXISTS $EVIL" -c "DROP ROLE IF EXISTS $OWNER" >/dev/null 2>&1
}
trap cleanup EXIT

if [ -z "${PGDATA:-}" ] || [ -z "${GRIDHA_PGLOG:-}" ]; then
	not_ok "the suite runs inside test/run.sh (PGDATA and GRIDHA_PGLOG are set)"
	exit 1
fi
if [ ! -x "$CLIENT" ]; then
	not_ok "client/gridha-client is built (run make)"
	exit 1
fi

# ---------------------------------------------------------------------------
# The ledger, the database, the restart with one worker

start_ledger --commit-delay 0.1 --max-lifetime 600 --require-header "Authorization: $SECRET"

# order_kept NAME WHERE: the ledger got the batches of the services matching
# WHERE (an SQL condition on gridha.batches) all, in enqueue order, one in
# flight per service.
order_kept() {
	local exp=$WORK/expected-$1.tsv out=$WORK/check-$1.out
	psql_db -F $'\t' -c "SELECT service_id, batch_id FROM gridha.batches
	                     WHERE $2 ORDER BY service_id, seq" >"$exp" || return 1
	[ -s "$exp" ] || return 1
	if ! python3 "$CHECK_LOG" --expected "$exp" --require-all --one-in-flight \
			"$WORK/ledger.log" >"$out" 2>&1; then
		grep -A 10 '^violations' "$out" | diag
		return 1
	fi
}

# duplicates REGEX: the duplicate POSTs of the services matching REGEX.
duplicates() {
	python3 "$QUERY" "$WORK/ledger.log" posts duplicate "$1"
}

psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" \
	-c "CREATE DATABASE $DB" -c "DROP ROLE IF EXISTS $WROLE" -c "DROP ROLE IF EXISTS $PROLE" \
	-c "DROP ROLE IF EXISTS $EVIL" -c "DROP ROLE IF EXISTS $OWNER" >/dev/null || exit 1

# What the target functions do, and what the steps look at. The functions
# compare text with OPERATOR(pg_catalog.=) only: the role step plants a
# public."=" that the worker role's search_path finds first.
psql_db >/dev/null <<'EOF' || exit 1
CREATE TABLE w_applied (
    bid  text PRIMARY KEY,
    sid  text NOT NULL,
    n    integer NOT NULL DEFAULT 1,
    pos  bigserial
);

CREATE FUNCTION w_submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.w_applied (bid, sid) VALUES ($2, $1)
        ON CONFLICT (bid) DO UPDATE SET n = w_applied.n + 1;
    RETURN 'accepted';
END
$$;

CREATE FUNCTION w_sub_a(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT public.w_submit($1, $2, $3, $4) $$;
CREATE FUNCTION w_sub_b(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT public.w_submit($1, $2, $3, $4) $$;
CREATE FUNCTION w_stat(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $$
    SELECT a.bid, 'COMMITTED' FROM public.w_applied a WHERE a.bid OPERATOR(pg_catalog.=) ANY ($1)
$$;

-- A status function that says PENDING until the batch id is in w_done.
CREATE TABLE w_done (bid text PRIMARY KEY);
CREATE FUNCTION w_gated(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $$
    SELECT b, CASE WHEN EXISTS (SELECT 1 FROM public.w_done d WHERE d.bid OPERATOR(pg_catalog.=) b)
                   THEN 'COMMITTED' ELSE 'PENDING' END
      FROM unnest($1) AS b
$$;

-- Armed: sleep or wait for w_gate's row, but only in the server run that
-- armed it (a restart disarms them).
CREATE TABLE w_arm (what text PRIMARY KEY, armed_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE w_gate (id integer PRIMARY KEY);
INSERT INTO w_gate VALUES (1);
CREATE FUNCTION w_armed(what text) RETURNS boolean LANGUAGE sql AS $$
    SELECT EXISTS (SELECT 1 FROM public.w_arm a WHERE a.what OPERATOR(pg_catalog.=) $1
                   AND a.armed_at > pg_catalog.pg_postmaster_start_time())
$$;
CREATE FUNCTION w_sleepy(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF public.w_armed('sleep') THEN
        PERFORM pg_catalog.pg_sleep(600);
    END IF;
    RETURN public.w_submit($1, $2, $3, $4);
END
$$;
CREATE FUNCTION w_locky(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF public.w_armed('lock') THEN
        PERFORM 1 FROM public.w_gate WHERE id = 1 FOR UPDATE;
    END IF;
    RETURN public.w_submit($1, $2, $3, $4);
END
$$;

-- The role step redefines these two.
CREATE FUNCTION w_ev1(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT public.w_submit($1, $2, $3, $4) $$;
CREATE FUNCTION w_ev2(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT public.w_submit($1, $2, $3, $4) $$;

-- Every change of a batch's status or detail, whoever writes it.
CREATE TABLE w_history (
    id          bigserial PRIMARY KEY,
    service_id  text,
    batch_id    text,
    status      text,
    detail      text,
    attempts    integer,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION w_record() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    -- as text: the role step plants a public."=" on gridha.batch_status
    IF NEW.status::text IS DISTINCT FROM OLD.status::text OR NEW.detail IS DISTINCT FROM OLD.detail THEN
        INSERT INTO public.w_history (service_id, batch_id, status, detail, attempts)
        VALUES (NEW.service_id, NEW.batch_id, NEW.status::text, NEW.detail, NEW.attempts);
    END IF;
    RETURN NULL;
END
$$;

-- Calls of the planted operator (the role step).
CREATE TABLE w_planted (
    at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    who   text NOT NULL DEFAULT session_user,
    app   text DEFAULT current_setting('application_name')
);
EOF

psql_db -c "CREATE EXTENSION gridha" >/dev/null || exit 1

# The worker role of the role step: a plain login role whose own
# search_path puts public first, and a public."=" (text, text) that records
# its calls.
psql_db >/dev/null <<EOF || exit 1
CREATE ROLE $WROLE LOGIN IN ROLE gridha_submitter;
ALTER ROLE $WROLE SET search_path = public, pg_catalog;
GRANT SELECT, INSERT, UPDATE ON w_applied, w_arm, w_gate TO $WROLE;
GRANT USAGE ON SEQUENCE w_applied_pos_seq TO $WROLE;
-- The other steps' workers run as the suites' worker role (test/tap.sh), a
-- member of gridha_submitter only: what the target functions read and
-- write is granted to it here, as a user would.
GRANT SELECT, INSERT, UPDATE ON w_applied, w_arm, w_gate TO $SUITE_WORKER_ROLE;
GRANT SELECT ON w_done TO $SUITE_WORKER_ROLE;
GRANT USAGE ON SEQUENCE w_applied_pos_seq TO $SUITE_WORKER_ROLE;
CREATE FUNCTION public.w_eq(text, text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS \$\$
BEGIN
    INSERT INTO public.w_planted DEFAULT VALUES;
    RETURN \$1 OPERATOR(pg_catalog.=) \$2;
END
\$\$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.w_eq);
EOF
# the plant works for a session with that search_path
psql_db -c "SET search_path = public, pg_catalog" -c "SELECT 'a'::text = 'b'::text" >/dev/null
PLANT_WORKS=$(psql_db -c "SELECT count(*) FROM w_planted")
psql_db -c "TRUNCATE w_planted" >/dev/null

# gridha_setup: the extension's objects this suite adds (targets, the history
# trigger), after every CREATE EXTENSION.
gridha_setup() {
	psql_db >/dev/null <<EOF
SET client_min_messages = warning;
INSERT INTO gridha.targets (target, submit_url) VALUES
    ('closed', 'http://127.0.0.1:9/batches/{service_id}/{batch_id}');
INSERT INTO gridha.targets (target, submit_url, status_url, request_headers) VALUES
    ('ledger', '$LEDGER/batches/{service_id}/{batch_id}', '$LEDGER/batch_statuses?id={batch_ids}',
     jsonb_build_object('Authorization', '$SECRET'));
INSERT INTO gridha.targets (target, submit_function) VALUES
    ('fsub', 'w_sub_a(text,text,bytea,bigint)'),
    ('mal1', 'w_submit(text,text,bytea,bigint)'),
    ('mal2', 'w_submit(text,text,bytea,bigint)'),
    ('mal3', 'w_submit(text,text,bytea,bigint)'),
    ('sleepy', 'w_sleepy(text,text,bytea,bigint)'),
    ('locky', 'w_locky(text,text,bytea,bigint)'),
    ('evil1', 'w_ev1(text,text,bytea,bigint)'),
    ('evil2', 'w_ev2(text,text,bytea,bigint)');
INSERT INTO gridha.targets (target, submit_function, status_function) VALUES
    ('fstat', 'w_sub_b(text,text,bytea,bigint)', 'w_stat(text[])'),
    ('gated', 'w_submit(text,text,bytea,bigint)', 'w_gated(text[])');
CREATE TRIGGER w_record AFTER UPDATE ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION public.w_record();
EOF
}

gridha_setup || exit 1

RESTARTED=1
# shellcheck disable=SC2086 # the options are words
if ! gridha_cluster_restart $SUITE_CLUSTER_OPTS $WORKER_OPTS; then
	not_ok "the cluster restarted with gridha.workers = 1"
	exit 1
fi
wait_until 30 sql_is 1 "SELECT count(*) FROM gridha.workers WHERE instance_id IS NOT NULL"
W1=$(psql_db -c "SELECT instance_id FROM gridha.workers")
W1PID=$(worker_pid "$W1")
if [ -z "$W1" ] || [ -z "$W1PID" ]; then
	not_ok "the static worker registered"
	exit 1
fi
echo "# worker $W1, pid $W1PID"

# step NAME: a comment line with the time the suite has run so far
step() {
	echo "# --- $1 (at ${SECONDS}s)"
}

# claimed_by_w1 SERVICE...: each service is claimed by W1.
claimed_by_w1() {
	local s
	for s in "$@"; do
		sql_is "$W1" "SELECT claimant FROM gridha.service_claims WHERE service_id = '$s'" || return 1
	done
}

# renewed_since TS: W1 has run a claim cycle (acquire, then renew) that
# began after TS.
renewed_since() {
	sql_is t "SELECT last_seen_at > '$1' FROM gridha.instances WHERE instance_id = '$W1'"
}

# reload_worker [OPT...]: the worker settings plus OPTs, reloaded; returns
# once the postmaster has read them and W1 has run two claim cycles since
# (it reads the file between cycles, so it has them too).
reload_worker() {
	local m t
	# shellcheck disable=SC2086 # the options are words
	gridha_write_extra_conf $SUITE_CLUSTER_OPTS $WORKER_OPTS "$@" || return 1
	m=$(log_mark)
	psql_db -c "SELECT pg_reload_conf()" >/dev/null || return 1
	wait_until 10 log_has "$m" 'received SIGHUP, reloading configuration files' || return 1
	t=$(psql_db -c "SELECT clock_timestamp()")
	wait_until 10 renewed_since "$t" || return 1
	t=$(psql_db -c "SELECT clock_timestamp()")
	wait_until 10 renewed_since "$t"
}

# ---------------------------------------------------------------------------
# switch: a claimed service moved to a target with neither URL nor function

step switch

mark=$(log_mark)
# A service's target is moved by an administrator (gridha.move_service),
# once nothing of it is in flight; enqueue never moves one (RG013).
move_svcs() {
	psql_db -c "SELECT gridha.move_service('svc' || s, '$1') FROM generate_series(1, 5) s" >/dev/null 2>&1
}
psql_db -c "SELECT gridha.enqueue('svc' || s, 'svc' || s || '-b5', '\\x00', 'closed')
            FROM generate_series(1, 5) s" >/dev/null
wait_until 20 claimed_by_w1 svc1 svc2 svc3 svc4 svc5
check $? "switch: the worker claims the five services on target 'closed' (a refused port)"
wait_until 20 move_svcs default
check $? "switch: an administrator moves the five services to target 'default' (gridha.move_service)"
psql_db -c "SELECT gridha.enqueue('svc' || s, 'svc' || s || '-b6', '\\x00')
            FROM generate_series(1, 5) s" >/dev/null

REASON='target "default" has neither submit_url nor submit_function'
heads_delayed() {
	sql_is 5 "SELECT count(*) FROM gridha.batches WHERE batch_id ~ '^svc[1-5]-b5\$'
	          AND status = 'delayed' AND detail = '$REASON'"
}
wait_until 20 heads_delayed
check $? "switch: each head (svcN-b5) is delayed with detail '$REASON'"
psql_db -c "SELECT batch_id, status, attempts, detail FROM gridha.batches
            WHERE service_id ~ '^svc' ORDER BY service_id, seq" | diag

sql_is 5 "SELECT count(*) FROM gridha.batches WHERE batch_id ~ '^svc[1-5]-b6\$'
          AND status = 'queued' AND attempts = 0"
check $? "switch: each service's next batch (svcN-b6) waits, queued and never handed out"

no_crash "$mark" && sql_is "$W1PID" "SELECT pid FROM gridha.workers WHERE instance_id = '$W1'"
check $? "switch: no process was terminated by a signal; the worker is the same process (pid $W1PID)"

n_warn=$(log_count "$mark" "WARNING: +gridha: batches of target \"default\" are delayed: $REASON")
[ "$n_warn" -eq 1 ]
check $? "switch: one WARNING for target 'default' and this reason, not one per batch (got $n_warn for 5 batches)"

psql_db -c "UPDATE gridha.targets SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
                   status_url = '$LEDGER/batch_statuses?id={batch_ids}',
                   request_headers = jsonb_build_object('Authorization', '$SECRET')
            WHERE target = 'default'" >/dev/null
wait_until 30 sql_is 10 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^svc' AND status = 'committed'"
check $? "switch: once 'default' has a URL, all 10 batches are committed"

order_kept switch "service_id ~ '^svc'"
check $? "switch: each service's b5 reached the ledger before its b6, one in flight"

# ---------------------------------------------------------------------------
# dropped: target functions dropped after their rows were written

step dropped

psql_db -c "SELECT gridha.enqueue('d1', 'd1-b1', '\\x01', 'fsub'), gridha.enqueue('e1', 'e1-b1', '\\x01', 'fstat')" >/dev/null
wait_until 20 sql_is 2 "SELECT count(*) FROM gridha.batches WHERE batch_id IN ('d1-b1', 'e1-b1') AND status = 'committed'"
check $? "dropped: both function targets work first (d1-b1, e1-b1 committed)"

mark=$(log_mark)
psql_db >/dev/null <<'EOF'
DROP FUNCTION w_sub_a(text, text, bytea, bigint);
DROP FUNCTION w_stat(text[]);
EOF
# the worker holds d1 and e1 through a claim cycle after the drop, then
# their next batches arrive
t_change=$(psql_db -c "SELECT clock_timestamp()")
wait_until 10 renewed_since "$t_change"
psql_db -c "SELECT gridha.enqueue(s, s || '-b' || b, '\\x02', CASE s WHEN 'd1' THEN 'fsub' ELSE 'fstat' END)
            FROM generate_series(2, 4) b, unnest(ARRAY['d1', 'e1']) s ORDER BY b, s" >/dev/null
dropped_delayed() {
	sql_is 2 "SELECT count(*) FROM gridha.batches
	          WHERE (batch_id = 'd1-b2' AND detail = 'submit_function of target \"fsub\" (public.w_sub_a(text,text,bytea,bigint)) does not exist'
	              OR batch_id = 'e1-b2' AND detail = 'status_function of target \"fstat\" (public.w_stat(text[])) does not exist')
	            AND status = 'delayed'"
}
wait_until 10 dropped_delayed
check $? "dropped: after a claim cycle of the worker, the new heads are delayed with detail 'submit_function of target \"fsub\" (public.w_sub_a(text,text,bytea,bigint)) does not exist' / 'status_function of target \"fstat\" (public.w_stat(text[])) ...'"
psql_db -c "SELECT batch_id, status, attempts, detail FROM gridha.batches
            WHERE service_id IN ('d1', 'e1') ORDER BY service_id, seq" | diag

sql_is 0 "SELECT count(*) FROM gridha.batches WHERE service_id IN ('d1', 'e1') AND seq > 2 AND attempts > 0"
check $? "dropped: the batches behind them were never handed out"

n_fsub=$(log_count "$mark" 'WARNING: +gridha: batches of target "fsub" are delayed: submit_function of target "fsub" \(public\.w_sub_a\(text,text,bytea,bigint\)\) does not exist')
n_fstat=$(log_count "$mark" 'WARNING: +gridha: batches of target "fstat" are delayed: status_function of target "fstat" \(public\.w_stat\(text\[\]\)\) does not exist')
[ "$n_fsub" -eq 1 ] && [ "$n_fstat" -eq 1 ]
check $? "dropped: one WARNING for each target and its reason (fsub: $n_fsub, fstat: $n_fstat)"

no_crash "$mark" && sql_is "$W1PID" "SELECT pid FROM gridha.workers WHERE instance_id = '$W1'" &&
	! log_has "$mark" 'started as instance'
check $? "dropped: no crash, no worker restart: the same process (pid $W1PID) keeps running"

psql_db >/dev/null <<'EOF'
CREATE FUNCTION w_sub_a(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT public.w_submit($1, $2, $3, $4) $$;
CREATE FUNCTION w_stat(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $$
    SELECT a.bid, 'COMMITTED' FROM public.w_applied a WHERE a.bid OPERATOR(pg_catalog.=) ANY ($1)
$$;
-- the rows are left as they are: their signatures resolve again
EOF
wait_until 30 sql_is 8 "SELECT count(*) FROM gridha.batches WHERE service_id IN ('d1', 'e1') AND status = 'committed'"
check $? "dropped: re-created under the same signatures, the rows untouched, all 8 batches are committed"

sql_is "d1-b1,d1-b2,d1-b3,d1-b4|e1-b1,e1-b2,e1-b3,e1-b4" \
	"SELECT string_agg(l, '|' ORDER BY sid) FROM (SELECT sid, string_agg(bid, ',' ORDER BY pos) AS l
	 FROM w_applied WHERE sid IN ('d1', 'e1') GROUP BY sid) s"
check $? "dropped: the functions applied each service's batches in enqueue order"

# ---------------------------------------------------------------------------
# malformed: rows written with the check disabled

step malformed

psql_db -c "SELECT gridha.enqueue('m' || t, 'm' || t || '-b1', '\\x01', 'mal' || t) FROM generate_series(1, 3) t" >/dev/null
wait_until 20 sql_is 3 "SELECT count(*) FROM gridha.batches WHERE batch_id ~ '^m[123]-b1\$' AND status = 'committed'"
check $? "malformed: the three targets work first (m1-b1..m3-b1 committed)"

mark=$(log_mark)
psql_db >/dev/null <<'EOF'
ALTER TABLE gridha.targets DISABLE TRIGGER targets_check;
UPDATE gridha.targets SET submit_url = 'http://127.0.0.1:9/x/{batch_id}' WHERE target = 'mal1';
UPDATE gridha.targets SET submit_function = NULL, submit_url = 'htp:/nowhere' WHERE target = 'mal2';
UPDATE gridha.targets SET request_headers = '["Authorization"]' WHERE target = 'mal3';
ALTER TABLE gridha.targets ENABLE TRIGGER targets_check;
EOF
t_change=$(psql_db -c "SELECT clock_timestamp()")
wait_until 10 renewed_since "$t_change"
psql_db -c "SELECT gridha.enqueue('m' || t, 'm' || t || '-b2', '\\x02', 'mal' || t) FROM generate_series(1, 3) t" >/dev/null
malformed_delayed() {
	sql_is 3 "SELECT count(*) FROM gridha.batches WHERE status = 'delayed' AND (
	             batch_id = 'm1-b2' AND detail = 'target \"mal1\" has both submit_url and submit_function'
	          OR batch_id = 'm2-b2' AND detail ~ '^invalid submit_url of target \"mal2\": '
	          OR batch_id = 'm3-b2' AND detail = 'target \"mal3\": request_headers is not a JSON object')"
}
wait_until 10 malformed_delayed
check $? "malformed: after a claim cycle of the worker, each new head is delayed with its reason (both URL and function; invalid submit_url; request_headers not an object)"
psql_db -c "SELECT batch_id, status, detail FROM gridha.batches WHERE service_id ~ '^m[123]\$' ORDER BY 1" | diag

no_crash "$mark" && sql_is "$W1PID" "SELECT pid FROM gridha.workers WHERE instance_id = '$W1'"
check $? "malformed: no crash; the worker is the same process"

# ---------------------------------------------------------------------------
# pgstat: the worker's own writes reach the statistics

step pgstat

# tup_upd TABLE: n_tup_upd of a gridha table, as a fresh snapshot sees it
tup_upd() {
	psql_db -c "SELECT pg_stat_clear_snapshot()" \
		-c "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'gridha.$1'::regclass" | tail -n 1
}
upd_b0=$(tup_upd batches)
upd_c0=$(tup_upd service_claims)
# ten new services of one batch each: the enqueue inserts, only the worker
# updates (hand-out, acceptance, commit)
psql_db -c "SELECT gridha.enqueue('st' || s, 'st' || s || '-b1', '\\x01', 'fsub') FROM generate_series(1, 10) s" >/dev/null
wait_until 20 sql_is 10 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^st' AND status = 'committed'"
stats_grew() {
	[ "$(tup_upd batches)" -ge $((upd_b0 + 30)) ] && [ "$(tup_upd service_claims)" -ge $((upd_c0 + 20)) ]
}
wait_until 15 stats_grew
check $? "pgstat: n_tup_upd of gridha.batches grows by >= 30 and of gridha.service_claims by >= 20 for 10 batches the worker moved ($upd_b0 -> $(tup_upd batches), $upd_c0 -> $(tup_upd service_claims))"

# ---------------------------------------------------------------------------
# lock: a session keeps a claim row locked

step lock

# x1-b1 stays pending (target 'gated') until the lock is taken; then its
# status function says COMMITTED, and that report must wait for the lock.
psql_db -c "SELECT gridha.enqueue('x1', 'x1-b1', '\\x01', 'gated')" >/dev/null
wait_until 10 sql_is pending "SELECT status FROM gridha.batches WHERE batch_id = 'x1-b1'"
mark=$(log_mark)
hold_open lock "SELECT service_id FROM gridha.service_claims WHERE service_id = 'x1' FOR UPDATE;"
check $? "lock: a session holds the claim row of x1 (SELECT ... FOR UPDATE, transaction open)"
psql_db -c "INSERT INTO w_done VALUES ('x1-b1')" >/dev/null

wait_until 20 log_has "$mark" 'gridha worker: .* failed: canceling statement due to lock timeout'
check $? "lock: the worker logs its step's lock timeout (gridha.worker_lock_timeout)"

lease0=$(psql_db -c "SELECT soft_expiry FROM gridha.instances WHERE instance_id = '$W1'")
psql_db -c "SELECT gridha.enqueue('q' || s, 'q' || s || '-b' || b, '\\x01', 'ledger')
            FROM generate_series(1, 3) b, generate_series(1, 5) s ORDER BY b, s" >/dev/null
wait_until 40 sql_is 15 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^q' AND status = 'committed'"
check $? "lock: meanwhile the worker commits all 15 batches of five other services"
psql_db -c "SELECT status, count(*) FROM gridha.batches WHERE service_id ~ '^q' GROUP BY 1" | diag

sql_is t "SELECT soft_expiry > '$lease0' FROM gridha.instances WHERE instance_id = '$W1'"
check $? "lock: the worker keeps renewing (its lease's soft_expiry moved past $lease0)"

dups=$(duplicates '^q' | sort -u | paste -sd, -)
[ -z "$dups" ]
check $? "lock: no batch of the other services was POSTed twice (duplicates: ${dups:-none})"

sql_is "$W1PID" "SELECT pid FROM gridha.workers WHERE instance_id = '$W1'" &&
	sql_is pending "SELECT status FROM gridha.batches WHERE batch_id = 'x1-b1'"
check $? "lock: the worker is the same process, x1-b1 still pending behind the lock"

hold_close lock
wait_until 20 sql_is committed "SELECT status FROM gridha.batches WHERE batch_id = 'x1-b1'"
check $? "lock: once the transaction ends, x1-b1 is committed"

# ---------------------------------------------------------------------------
# statement: a target function that outlasts gridha.worker_statement_timeout

step statement

reload_worker gridha.worker_statement_timeout=2s
check $? "statement: the worker runs with gridha.worker_statement_timeout = 2s (reloaded)"
h0=$(hist_mark)
mark=$(log_mark)
psql_db -c "INSERT INTO w_arm (what) VALUES ('sleep')" \
	-c "SELECT gridha.enqueue('z0', 'z0-b' || b, '\\x01', 'sleepy') FROM generate_series(1, 2) b" >/dev/null
wait_until 20 sql_is 1 "SELECT count(DISTINCT batch_id) FROM w_history WHERE id > $h0 AND batch_id = 'z0-b1'
                        AND status = 'delayed' AND detail = 'submit function failed or returned \"null\"'"
check $? "statement: the submit function asleep past the timeout is cancelled and its batch (z0-b1) delayed"

# While the worker is inside the target function, the function cannot be
# dropped: the worker holds it (as a DROP FUNCTION locks it) until its step
# ends. A DROP with a short lock_timeout times out (rolled back either way);
# tried at each of the worker's attempts until one finds it asleep.
drop_waits() {
	local out
	wait_until 10 sql_is 1 "SELECT count(*) FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
	                        WHERE w.instance_id = '$W1' AND a.wait_event = 'PgSleep'" || return 1
	out=$(psql_db -c "BEGIN" -c "SET LOCAL lock_timeout = '300ms'" \
		-c "DROP FUNCTION w_sleepy(text, text, bytea, bigint)" -c "ROLLBACK" 2>&1)
	case $out in *"lock timeout"*) return 0 ;; esac
	diag <<<"DROP FUNCTION while the worker sleeps in it: $out"
	return 1
}
ok_drop=1
for _ in 1 2 3; do
	drop_waits && { ok_drop=0; break; }
done
[ "$ok_drop" = 0 ]
check $? "statement: while the worker calls the submit function, a DROP FUNCTION of it waits (lock timeout)"

log_has "$mark" 'gridha worker: submit function failed: canceling statement due to statement timeout'
check $? "statement: the worker logs the statement timeout"

psql_db -c "DELETE FROM w_arm WHERE what = 'sleep'" >/dev/null
wait_until 20 sql_is 2 "SELECT count(*) FROM gridha.batches WHERE service_id = 'z0' AND status = 'committed'"
check $? "statement: disarmed, z0-b1 and z0-b2 are committed"

sql_is "z0-b1,z0-b2" "SELECT string_agg(bid, ',' ORDER BY pos) FROM w_applied WHERE sid = 'z0'" &&
	sql_is "$W1PID" "SELECT pid FROM gridha.workers WHERE instance_id = '$W1'" && no_crash "$mark"
check $? "statement: each applied once, in order, by the same worker process (pid $W1PID), no crash"

reload_worker || not_ok "statement: the worker settings reloaded without gridha.worker_statement_timeout"

# ---------------------------------------------------------------------------
# codes: answers that are not the batch's fault, and answers that are

step codes

# code_answered CODE: the ledger's code window has answered CODE
code_answered() {
	python3 - "$LEDGER/stats" "$1" <<'EOF'
import json, sys, urllib.request
s = json.load(urllib.request.urlopen(sys.argv[1], timeout=10))
sys.exit(0 if s.get("fail_code_counts", {}).get(sys.argv[2], 0) > 0 else 1)
EOF
}

# 301, 401, 403, 404, 414 in turn, POSTs and status GETs alike; each code
# stays until the ledger has answered it
h0=$(hist_mark)
ledger_control '{"fail_code": 301, "fail_code_applies": "both", "fail_code_for": 120}'
psql_db -c "SELECT gridha.enqueue('k' || s, 'k' || s || '-b' || b, '\\x0b', 'ledger')
            FROM generate_series(1, 4) b, generate_series(1, 5) s ORDER BY b, s" >/dev/null
met=""
for code in 301 401 403 404 414; do
	ledger_control "{\"fail_code\": $code}"
	wait_until 20 code_answered "$code" && met="$met $code"
done
ledger_control '{"fail_code_for": 0}'
[ "$met" = " 301 401 403 404 414" ]
check $? "codes: the ledger answered 301, 401, 403, 404 and 414 in turn (met:$met)"

wait_until 60 sql_is 20 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^k[1-5]\$' AND status = 'committed'"
check $? "codes: afterwards all 20 batches are committed, none invalid"
psql_db -c "SELECT status, count(*), max(attempts) FROM gridha.batches WHERE service_id ~ '^k[1-5]\$' GROUP BY 1" | diag

sql_is "http 301,http 401,http 403,http 404,http 414" \
	"SELECT string_agg(DISTINCT detail, ',' ORDER BY detail) FROM w_history
	 WHERE id > $h0 AND service_id ~ '^k[1-5]\$' AND status = 'delayed'"
check $? "codes: each of them made a batch delayed with detail 'http NNN', nothing else did"

order_kept codes "service_id ~ '^k[1-5]\$'"
check $? "codes: each service's batches reached the ledger in enqueue order, one in flight"

# the batch's fault: 400 and 422 on the default reject_codes; a target of
# its own list ({404}) takes only 404 as a refusal
psql_db -c "INSERT INTO gridha.targets (target, submit_url, status_url, reject_codes, request_headers)
            VALUES ('ledger404', '$LEDGER/batches/{service_id}/{batch_id}',
                    '$LEDGER/batch_statuses?id={batch_ids}', '{404}',
                    jsonb_build_object('Authorization', '$SECRET'))" >/dev/null
h0=$(hist_mark)
for code in 400 422 404; do
	ledger_control "{\"fail_code\": $code, \"fail_code_applies\": \"post\", \"fail_code_for\": 60}"
	psql_db -c "SELECT gridha.enqueue('rd$code', 'rd$code-b1', '\\x0c', 'ledger'),
	                   gridha.enqueue('ro$code', 'ro$code-b1', '\\x0c', 'ledger404')" >/dev/null
	# both met the code: a final status, or a delay naming it
	wait_until 20 sql_is 2 "SELECT count(*) FROM gridha.batches b WHERE b.batch_id IN ('rd$code-b1', 'ro$code-b1')
	                        AND (b.status = 'invalid' OR EXISTS (SELECT 1 FROM w_history h WHERE h.id > $h0
	                             AND h.batch_id = b.batch_id AND h.detail = 'http $code'))"
	ledger_control '{"fail_code_for": 0}'
	# both final before the next code: a delayed one retried under the
	# next window would meet that code instead
	wait_until 30 sql_is 2 "SELECT count(*) FROM gridha.batches WHERE batch_id IN ('rd$code-b1', 'ro$code-b1')
	                        AND status IN ('committed', 'invalid')"
done
wait_until 30 sql_is 0 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^r[do][0-9]' AND status < 'committed'"
psql_db -c "SELECT batch_id, status, attempts, detail FROM gridha.batches WHERE service_id ~ '^r[do][0-9]' ORDER BY 1" | diag

sql_is "invalid|http 400|invalid|http 422" \
	"SELECT string_agg(status || '|' || detail, '|' ORDER BY batch_id) FROM gridha.batches
	 WHERE batch_id IN ('rd400-b1', 'rd422-b1')"
check $? "codes: with the default reject_codes, 400 and 422 end the batch invalid (detail 'http 400', 'http 422')"

sql_is "invalid|http 404" "SELECT status || '|' || detail FROM gridha.batches WHERE batch_id = 'ro404-b1'"
check $? "codes: a target with reject_codes {404}: 404 ends its batch invalid (detail 'http 404')"

sql_is "committed|committed|committed" \
	"SELECT string_agg(status::text, '|' ORDER BY batch_id) FROM gridha.batches
	 WHERE batch_id IN ('ro400-b1', 'ro422-b1', 'rd404-b1')" &&
	sql_is 3 "SELECT count(DISTINCT batch_id) FROM w_history WHERE id > $h0 AND status = 'delayed'
	          AND (batch_id, detail) IN (('ro400-b1', 'http 400'), ('ro422-b1', 'http 422'), ('rd404-b1', 'http 404'))"
check $? "codes: a code not in the target's list only delays: 400, 422 on {404}, 404 on the default; then committed"

# ---------------------------------------------------------------------------
# urls: status GETs kept within gridha.status_url_max_length, halved on 414
# and 431

step urls

# ledger_mark: the ledger log's length in lines; status_gets MARK: "result
# ids" of each status GET the ledger logged after line MARK, in order.
ledger_mark() {
	wc -l <"$WORK/ledger.log"
}

status_gets() {
	tail -n +"$(($1 + 1))" "$WORK/ledger.log" | python3 -c '
import json, sys
for line in sys.stdin:
    e = json.loads(line)
    if e.get("event") == "status_query":
        print(e["result"], e["ids"])'
}

# enqueue_long PREFIX: services PREFIX01..PREFIX24 on 'ledger', one batch
# each, whose id is 40 bytes (a URL-safe PREFIXnn-uuu...)
enqueue_long() {
	psql_db -c "SELECT gridha.enqueue(s, s || '-' || repeat('u', 35), '\\x0e', 'ledger')
	            FROM (SELECT '$1' || lpad(g::text, 2, '0') AS s FROM generate_series(1, 24) g) x
	            ORDER BY s" >/dev/null
}

# all_committed PREFIX: the 24 batches of those services are committed
all_committed() {
	sql_is 24 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^$1' AND status = 'committed'"
}

# never_delayed PREFIX: none of them was delayed or made invalid once it was
# pending, which is what a status poll could do wrong. Before that only its
# POST can delay a batch (a POST that got no answer, on a loaded machine),
# which this step does not test: those rows are printed, not counted.
never_delayed() {
	psql_db -c "SELECT h.batch_id, h.status, h.detail FROM w_history h
	            WHERE h.service_id ~ '^$1' AND h.status IN ('delayed', 'invalid') ORDER BY h.id" | diag
	sql_is 0 "SELECT count(*) FROM w_history h
	          WHERE h.service_id ~ '^$1' AND h.status IN ('delayed', 'invalid')
	            AND EXISTS (SELECT 1 FROM w_history p WHERE p.batch_id = h.batch_id
	                         AND p.status = 'pending' AND p.id < h.id)"
}

# The status URL is "$LEDGER/batch_statuses?id=" and the ids, comma-separated:
# with 40-byte ids a URL of k ids is BASE + 41 k - 1 bytes.
URL_PATH="/batch_statuses?id="
URL_BASE=$((${#LEDGER} + ${#URL_PATH}))
URL_LIMIT=512
CAP_GRIDHA=$(((URL_LIMIT - URL_BASE + 1) / 41))
# the ledger's max_url counts the target only (path and query)
CAP_LEDGER=$(((URL_LIMIT - ${#URL_PATH} + 1) / 41))
echo "# a status URL holds up to $CAP_GRIDHA ids within $URL_LIMIT bytes; the ledger's target up to $CAP_LEDGER"

# pending_n PREFIX N: N batches of those services are pending (accepted by
# the ledger, not yet polled to their end)
pending_n() {
	sql_is "$2" "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^$1' AND status = 'pending'"
}

# Each part holds the status GETs off with a code window (503, or the 431
# under test) until every batch is pending, so that the polls that follow
# ask about all of them at once.

# 1. gridha.status_url_max_length 512, the ledger answers 414 past 512: the
# 24 pending ids go in GETs of at most CAP_GRIDHA ids, none refused
ledger_control "{\"max_url\": $URL_LIMIT, \"fail_code\": 503, \"fail_code_applies\": \"get\", \"fail_code_for\": 60}"
reload_worker gridha.status_url_max_length=$URL_LIMIT
check $? "urls: the worker runs with gridha.status_url_max_length = $URL_LIMIT (reloaded)"
enqueue_long ua
wait_until 30 pending_n ua 24
check $? "urls: while status GETs get 503, 24 batches with 40-byte ids are accepted and pending"
lm=$(ledger_mark)
ledger_control '{"fail_code_for": 0}'
wait_until 30 all_committed ua
check $? "urls: once the GETs are answered, the 24 are committed"
status_gets "$lm" >"$WORK/gets-ua.txt"
n414=$(grep -c '^414 ' "$WORK/gets-ua.txt")
max_ids=$(awk '$1 == "ok" && $2 > m { m = $2 } END { print m + 0 }' "$WORK/gets-ua.txt")
[ "$n414" -eq 0 ] && [ "$max_ids" -eq "$CAP_GRIDHA" ] && never_delayed ua
check $? "urls: no status GET was over the limit (414s: $n414); the fullest carried $CAP_GRIDHA ids, as many as fit (got $max_ids); none delayed or invalid once pending"
diag <"$WORK/gets-ua.txt" | head -n 6

# 2. no limit of gridha's own (1 MB), the ledger's 512 bytes: a GET of more
# than CAP_LEDGER ids is answered 414 and asked again in halves, which fit.
# The ledger judges a URL's length before its code window, so a poll of
# more than CAP_LEDGER ids gets its 414 while the window is on too; the
# GETs are read from before the window. A status run asks its pieces one
# after another, and this suite has one worker: the two GETs after a 414
# are its halves. Which polls carry how many ids depends on when each batch
# became pending, but once all 24 are, the next poll carries every one not
# yet committed, and none is committed before the window ends: some poll of
# at least 13 ids gets a 414.
reload_worker gridha.status_url_max_length=1MB
check $? "urls: the worker runs with gridha.status_url_max_length = 1MB (reloaded)"
lm=$(ledger_mark)
ledger_control '{"fail_code_for": 60}'
enqueue_long ub
wait_until 30 pending_n ub 24
check $? "urls: while status GETs get 503, 24 more are accepted and pending"
ledger_control '{"fail_code_for": 0}'
wait_until 30 all_committed ub
check $? "urls: once the GETs are answered, the 24 are committed, the ledger answering 414 to long ones"
status_gets "$lm" >"$WORK/gets-ub.txt"
# halves: each 414 as "n:a+b", a and b the ids of the two GETs after it;
# bad: a 414 whose two next GETs are not its halves
halves=$(awk '{ code[NR] = $1; ids[NR] = $2 }
	END {
		for (i = 1; i <= NR; i++) if (code[i] == "414") {
			a = ids[i + 1] + 0; b = ids[i + 2] + 0; n = ids[i]
			printf "%s%d:%d+%d", (k++ ? " " : ""), n, a, b
			if (i + 2 > NR || a + b != n || (a - b) * (a - b) > 1 || code[i + 1] == "414" || code[i + 2] == "414") bad = 1
		}
		exit bad
	}' "$WORK/gets-ub.txt")
halves_rc=$?
max_ok=$(awk '$1 == "ok" && $2 > m { m = $2 } END { print m + 0 }' "$WORK/gets-ub.txt")
min_414=$(awk '$1 == "414" && (m == "" || $2 < m) { m = $2 } END { print m + 0 }' "$WORK/gets-ub.txt")
[ -n "$halves" ] && [ "$halves_rc" -eq 0 ] && [ "$min_414" -gt "$CAP_LEDGER" ] &&
	[ "$max_ok" -le "$CAP_LEDGER" ] && never_delayed ub
check $? "urls: every GET of more than $CAP_LEDGER ids got 414 and was asked again in halves (ids: $halves; fullest answered: $max_ok); none delayed or invalid once pending"
diag <"$WORK/gets-ub.txt" | head -n 12

# 3. every status GET answered 431: a poll of 8 pending batches halves down
# to single ids, depth first
ledger_control '{"max_url": 0, "fail_code": 431, "fail_code_applies": "get", "fail_code_for": 60}'
psql_db -c "SELECT gridha.enqueue('uc' || g, 'uc' || g || '-' || repeat('u', 36), '\\x0e', 'ledger')
            FROM generate_series(1, 8) g" >/dev/null
wait_until 30 pending_n uc 8
check $? "urls: while status GETs get 431, 8 batches are accepted and pending"
lm=$(ledger_mark)
# tree_431: the ids of the first 15 GETs answered 431 from the first poll
# of all 8 after the mark on
tree_431() {
	status_gets "$lm" | awk '$1 == "431" && $2 == 8 { f = 1 } f && $1 == "431" && n < 15 { printf "%s%s", (n ? " " : ""), $2; n++ }'
}
tree_done() {
	[ "$(tree_431 | wc -w)" -ge 15 ]
}
wait_until 20 tree_done
ledger_control '{"fail_code_for": 0}'
got=$(tree_431)
[ "$got" = "8 4 2 1 1 2 1 1 4 2 1 1 2 1 1" ]
check $? "urls: a poll answered 431 is asked again in halves down to single ids (ids per GET: $got)"
wait_until 30 sql_is 8 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^uc' AND status = 'committed'" &&
	never_delayed uc
check $? "urls: once the 431s end, the 8 are committed, none delayed or invalid once pending"

reload_worker || not_ok "urls: the worker settings reloaded without gridha.status_url_max_length"

# ---------------------------------------------------------------------------
# headers: the target's credentials

step headers

psql_db >/dev/null <<EOF
CREATE ROLE $PROLE LOGIN IN ROLE gridha_producer;
SELECT gridha.create_id_sequence('w_ids', 1000, 1);
EOF
# everything the producer role can SELECT in the database
PGUSER=$PROLE psql -X -q -A -t -d "$DB" >"$WORK/producer-view.txt" 2>"$WORK/producer-view.err" <<'EOF'
\set ON_ERROR_STOP 0
SELECT format('SELECT %L, t::text FROM %I.%I t;', 'rel ' || n.nspname || '.' || c.relname, n.nspname, c.relname)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'v', 'm', 'p', 'f')
   AND n.nspname NOT IN ('pg_catalog', 'information_schema')
   AND has_table_privilege(c.oid, 'SELECT')
\gexec
SELECT gridha.enqueue('pr1', 'pr1-b1', '\x01', 'ledger');
SELECT * FROM gridha.queue_progress;
SELECT * FROM gridha.id_sequence_status;
SELECT t::text FROM gridha.targets t;
SELECT pid, usename, application_name, query FROM pg_stat_activity;
SELECT name, setting FROM pg_settings WHERE name LIKE 'gridha.%';
EOF
rels=$(grep '^rel ' "$WORK/producer-view.txt" | cut -d'|' -f1 | cut -c5- | sort -u | paste -sd' ' -)
grep -q 'permission denied for table targets' "$WORK/producer-view.err" && [ -n "$rels" ] &&
	! grep -q -F "$SECRET" "$WORK/producer-view.txt" "$WORK/producer-view.err"
check $? "headers: a gridha_producer member reads every relation it may ($rels), pg_stat_activity and the settings, and never the secret; gridha.targets is refused"

wait_until 20 sql_is committed "SELECT status FROM gridha.batches WHERE batch_id = 'pr1-b1'"
psql_db -c "SELECT detail FROM gridha.batches" >"$WORK/details.txt"
! grep -q -F "$SECRET_VALUE" "$WORK/details.txt"
check $? "headers: the secret is in no batches.detail"

# ---------------------------------------------------------------------------
# client: the reference client and the worker share URL and function targets

step client

# gridha.balance_claims on: the worker hands the client its share.
# shellcheck disable=SC2086 # the options are words
gridha_write_extra_conf $SUITE_CLUSTER_OPTS $WORKER_OPTS gridha.balance_claims=on
psql_db -c "SELECT pg_reload_conf()" >/dev/null
CID=$(psql_db -c "SELECT gen_random_uuid()")
"$CLIENT" --dsn "dbname=$DB" --instance-id "$CID" --label safety-client \
	--idle-sleep-ms 100 --monitor-interval-ms 200 --submit-timeout-ms 5000 \
	--max-runtime-s 120 --log "$WORK/client.log" 2>"$WORK/client.err" &
CLIENT_PID=$!
PIDS+=("$CLIENT_PID")
wait_until 15 sql_is 1 "SELECT count(*) FROM gridha.instances WHERE instance_id = '$CID'"
psql_db -c "SELECT gridha.enqueue(s, s || '-b' || lpad(b::text, 2, '0'), '\\x0c',
                                  CASE WHEN s ~ '^cu' THEN 'ledger' ELSE 'fsub' END)
            FROM generate_series(1, 8) b,
                 unnest(ARRAY['cu1', 'cu2', 'cu3', 'cu4', 'cu5', 'cu6',
                              'cf1', 'cf2', 'cf3', 'cf4', 'cf5', 'cf6']) s
            ORDER BY b, s" >/dev/null
# watch the client's claims until every batch is committed
n_fn_held=0
all_c_committed() {
	local n
	n=$(psql_db -c "SELECT count(*) FROM gridha.service_claims c JOIN gridha.targets t USING (target)
	                WHERE c.claimant = '$CID' AND t.submit_function IS NOT NULL")
	[ "${n:-0}" -gt 0 ] && n_fn_held=$((n_fn_held + n))
	sql_is 96 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^c[uf]' AND status = 'committed'"
}
if wait_until 45 all_c_committed; then
	ok "client: all 96 batches of 6 URL and 6 function services are committed"
else
	not_ok "client: all 96 batches of 6 URL and 6 function services are committed"
	psql_db -c "SELECT c.service_id, c.target, coalesce(i.kind, '-'), c.claimant = '$CID' AS client,
	                   c.head_seq, c.ready_at IS NOT NULL AS ready, c.in_flight
	            FROM gridha.service_claims c LEFT JOIN gridha.instances i ON i.instance_id = c.claimant
	            WHERE c.service_id ~ '^c[uf]' ORDER BY 1" | diag
	psql_db -c "SELECT kind, held, serves, (SELECT count(*) FROM gridha.service_claims c
	                                              WHERE c.claimant = i.instance_id) AS claims
	            FROM gridha.instances i WHERE soft_expiry > now()" | diag
	psql_db -c "SELECT count(*) AS services FROM gridha.service_claims" | diag
fi
psql_db -c "SELECT left(service_id, 2), coalesce(i.kind, '?'), b.instance_id = '$CID' AS client, count(*)
            FROM gridha.batches b LEFT JOIN gridha.instances i USING (instance_id)
            WHERE service_id ~ '^c[uf]' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3" | diag

sql_is t "SELECT count(*) FILTER (WHERE instance_id = '$CID') > 0 FROM gridha.batches WHERE service_id ~ '^cu'"
check $? "client: the client handed out batches of the URL services"

[ "$n_fn_held" -eq 0 ] &&
	sql_is 0 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^cf' AND instance_id = '$CID'" &&
	! grep -q '"batch_id":"cf' "$WORK/client.log"
check $? "client: the client never held a function target's service nor handed out its batches (claims seen: $n_fn_held)"

order_kept client "service_id ~ '^cu'"
check $? "client: the URL services' batches reached the ledger in enqueue order, one in flight"

kill -TERM "$CLIENT_PID" 2>/dev/null
wait_until 20 sh -c "! kill -0 $CLIENT_PID 2>/dev/null"
wait "$CLIENT_PID" 2>/dev/null
! grep -q -F "$SECRET_VALUE" "$WORK/client.log" "$WORK/client.err"
check $? "headers: the secret is nowhere in the client's log or its error output"

# shellcheck disable=SC2086 # the options are words
gridha_write_extra_conf $SUITE_CLUSTER_OPTS $WORKER_OPTS
psql_db -c "SELECT pg_reload_conf()" >/dev/null

# ---------------------------------------------------------------------------
# reinstall: DROP EXTENSION / CREATE EXTENSION under the running worker

step reinstall

# A transaction that creates a service, then drops the extension and
# creates it again, commits: the count of its new service (written at
# commit, counts.c) has no table of its own left, and the new extension
# counts nothing of the old one.
psql_db -c "BEGIN" -c "SELECT gridha.enqueue('ri-gone', 'b1', '\\x01')" \
	-c "SET LOCAL client_min_messages = warning" -c "DROP EXTENSION gridha" -c "CREATE EXTENSION gridha" \
	-c "COMMIT" >/dev/null && gridha_setup
check $? "reinstall: a transaction that creates a service, drops the extension and creates it again commits"
sql_is 0 "SELECT count(*) FROM gridha.service_counts"
check $? "reinstall: ... and the new extension's service counts are empty"

# The same with the drop alone, the worker running: the extension is gone.
mark=$(log_mark)
psql_db -c "BEGIN" -c "SELECT gridha.enqueue('ri-gone', 'b1', '\\x01')" \
	-c "SET LOCAL client_min_messages = warning" -c "DROP EXTENSION gridha" -c "COMMIT" >/dev/null
check $? "reinstall: a transaction that creates a service and drops the extension commits"
wait_until 20 log_has "$mark" "gridha worker \"worker 1\" waits: the extension gridha is gone from database \"$DB\""
check $? "reinstall: after DROP EXTENSION the worker logs that it waits for the extension"

sql_is 1 "SELECT count(*) FROM pg_stat_activity WHERE pid = $W1PID AND backend_type = 'gridha worker'"
check $? "reinstall: the worker (pid $W1PID) stays, waiting"

psql_db -c "CREATE EXTENSION gridha" >/dev/null && gridha_setup
wait_until 20 log_has "$mark" "gridha worker \"worker 1\" serves again as instance $W1"
check $? "reinstall: after CREATE EXTENSION the worker serves again as instance $W1 (logged)"

sql_is "worker|$W1PID" "SELECT i.kind, w.pid FROM gridha.instances i JOIN gridha.workers w USING (instance_id)
                        WHERE i.instance_id = '$W1'"
check $? "reinstall: gridha.instances has it as kind 'worker', gridha.workers with the same pid"

psql_db -c "SELECT gridha.enqueue(s, s || '-b' || b, '\\x0d', CASE WHEN s = 'ri1' THEN 'ledger' ELSE 'fsub' END)
            FROM generate_series(1, 3) b, unnest(ARRAY['ri1', 'ri2']) s ORDER BY b, s" >/dev/null
wait_until 30 sql_is 6 "SELECT count(*) FROM gridha.batches WHERE service_id IN ('ri1', 'ri2') AND status = 'committed'"
check $? "reinstall: batches enqueued after the re-create are committed (URL and function targets)"

no_crash "$mark"
check $? "reinstall: no process was terminated by a signal"

# ---------------------------------------------------------------------------
# sigterm: stop_worker and a fast shutdown end a worker that waits

step sigterm

# No lock timeout from here: only SIGTERM can end a lock wait.
reload_worker gridha.worker_lock_timeout=0
check $? "sigterm: the worker runs with gridha.worker_lock_timeout = 0 (reloaded)"

# 1. W1 waits for a claim row lock (the report of x2-b1's commit)
psql_db -c "SELECT gridha.enqueue('x2', 'x2-b1', '\\x01', 'gated')" >/dev/null
wait_until 10 sql_is pending "SELECT status FROM gridha.batches WHERE batch_id = 'x2-b1'"
hold_open lock2 "SELECT service_id FROM gridha.service_claims WHERE service_id = 'x2' FOR UPDATE;"
psql_db -c "INSERT INTO w_done VALUES ('x2-b1')" >/dev/null
if wait_until 20 sql_is Lock "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $W1PID"; then
	mark=$(log_mark)
	sql_is t "SELECT gridha.stop_worker('$W1')"
	wait_until 30 backend_gone "$W1PID"
	check $? "sigterm: stop_worker ends the worker waiting for a row lock (pid $W1PID gone within 30 s)"
	psql_db -c "SELECT pid, wait_event_type, wait_event, state, query FROM pg_stat_activity WHERE pid = $W1PID" | diag
else
	not_ok "sigterm: the worker waits for the claim row lock of x2"
fi
hold_close lock2
wait_until 20 backend_gone "$W1PID"
log_has "$mark" "gridha worker \"worker 1\" \\(instance $W1\\) stopped and released its claims"
check $? "sigterm: it logged that it stopped and released its claims"

# 2. a dynamic worker inside a 600 s target function
psql_db -c "INSERT INTO w_arm (what) VALUES ('sleep'), ('lock')" >/dev/null
D1=$(psql_db -c "SELECT gridha.start_worker('sleeper')")
psql_db -c "SELECT gridha.enqueue('z1', 'z1-b1', '\\x01', 'sleepy')" >/dev/null
# in_sleep ID: the worker that is instance ID sleeps in pg_sleep
in_wait() {
	sql_is 1 "SELECT count(*) FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
	          WHERE w.instance_id = '$1' AND a.wait_event = '$2'"
}
if wait_until 20 in_wait "$D1" PgSleep; then
	D1PID=$(worker_pid "$D1")
	h0=$(hist_mark)
	mark=$(log_mark)
	sql_is t "SELECT gridha.stop_worker('$D1')"
	wait_until 30 backend_gone "$D1PID"
	check $? "sigterm: stop_worker ends the worker inside pg_sleep(600) (pid $D1PID gone within 30 s)"
	sql_is 1 "SELECT count(*) FROM w_history WHERE id > $h0 AND batch_id = 'z1-b1' AND status = 'delayed'
	          AND detail = 'submit function failed or returned \"null\"'"
	check $? "sigterm: the batch in hand (z1-b1) was reported delayed"
	log_has "$mark" "gridha worker \"sleeper\" \\(instance $D1\\) stopped and released its claims"
	check $? "sigterm: the stopped worker logged that it released its claims"
else
	not_ok "sigterm: a dynamic worker sleeps in the target function of z1"
fi

# 3. a fast shutdown while one worker sleeps in a target function and
# another waits for a row lock that a prepared transaction holds (the
# shutdown ends every session, but not that)
D2=$(psql_db -c "SELECT gridha.start_worker('sleeper 2')")
wait_until 20 in_wait "$D2" PgSleep
psql_db >/dev/null <<'EOF'
BEGIN;
SELECT id FROM w_gate WHERE id = 1 FOR UPDATE;
PREPARE TRANSACTION 'w_gate';
EOF
D3=$(psql_db -c "SELECT gridha.start_worker('locker')")
psql_db -c "SELECT gridha.enqueue('y1', 'y1-b1', '\\x01', 'locky')" >/dev/null
# in_hand ID BATCH WAIT_EVENT_TYPE [WAIT_EVENT]: the worker that is instance
# ID has BATCH handed out (submitting under it) and waits for that kind of
# event (and that event): it is inside the batch's target function. The
# sleeper's is PgSleep itself: other events of type Timeout (SpinDelay, under
# load) can come before the function is called.
in_hand() {
	sql_is 1 "SELECT count(*) FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
	          JOIN gridha.batches b ON b.instance_id = w.instance_id
	          WHERE w.instance_id = '$1' AND b.batch_id = '$2' AND b.status = 'submitting'
	            AND a.wait_event_type = '$3' AND a.wait_event = coalesce(nullif('${4:-}', ''), a.wait_event)"
}
shutdown_state=
if wait_until 20 in_hand "$D2" z1-b1 Timeout PgSleep && wait_until 20 in_hand "$D3" y1-b1 Lock; then
	h0=$(hist_mark)
	mark=$(log_mark)
	shutdown_state=$(psql_db -c "SELECT w.label, a.wait_event_type, a.wait_event, b.batch_id, b.status
	                               FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
	                               LEFT JOIN gridha.batches b ON b.instance_id = w.instance_id
	                                AND b.status = 'submitting' ORDER BY 1")
	gridha_as_pg "$PG_BINDIR/pg_ctl" stop -w -t 30 -m fast -D "$PGDATA" >/dev/null 2>&1
	check $? "sigterm: a fast shutdown completes within 30 s with workers in pg_sleep(600) and in a lock wait"
else
	not_ok "sigterm: one worker sleeps in a target function (z1) and another waits for a row lock (y1)"
	h0=$(hist_mark)
	mark=$(log_mark)
fi
gridha_cluster_stop immediate >/dev/null 2>&1

# ---------------------------------------------------------------------------
# role: gridha.worker_role, and a planted operator

step role

# shellcheck disable=SC2086 # the options are words
if ! gridha_cluster_start $SUITE_CLUSTER_OPTS $WORKER_OPTS gridha.worker_role=$WROLE; then
	not_ok "the cluster restarted with gridha.worker_role = $WROLE"
	exit 1
fi
psql_db -c "ROLLBACK PREPARED 'w_gate'" >/dev/null

sql_is 2 "SELECT count(*) FROM w_history WHERE id > $h0 AND batch_id IN ('z1-b1', 'y1-b1') AND status = 'delayed'
          AND detail = 'submit function failed or returned \"null\"'"
rc=$?
check $rc "sigterm: both batches in hand at the fast shutdown (z1-b1, y1-b1) were reported delayed"
psql_db -c "SELECT id, batch_id, status, detail, at FROM w_history WHERE id > $h0 ORDER BY id" | diag
if [ "$rc" -ne 0 ]; then
	# what the workers were doing just before the shutdown, and what they logged
	echo "workers before the shutdown: $shutdown_state" | diag
	log_since "$mark" | grep -E 'gridha|z1-b1|y1-b1|cancel' | head -n 30 | diag
fi

# A public."=" on gridha.batch_status too (it needs the extension's type,
# so it is planted now): gridha compares statuses in its own SQL.
psql_db >/dev/null <<'EOF'
CREATE FUNCTION public.w_eq_status(gridha.batch_status, gridha.batch_status) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    INSERT INTO public.w_planted DEFAULT VALUES;
    RETURN $1::text OPERATOR(pg_catalog.=) $2::text;
END
$$;
CREATE OPERATOR public.= (LEFTARG = gridha.batch_status, RIGHTARG = gridha.batch_status,
                          FUNCTION = public.w_eq_status);
EOF
psql_db -c "SELECT 'queued'::gridha.batch_status = 'queued'::gridha.batch_status" >/dev/null
PLANT_STATUS_WORKS=$(psql_db -c "SELECT count(*) FROM w_planted")
psql_db -c "TRUNCATE w_planted" >/dev/null

[ "$PLANT_WORKS" = 1 ] && [ "$PLANT_STATUS_WORKS" = 1 ]
check $? "role: the plants work: a session with search_path public, pg_catalog calls public.= (text, text), one with the default search_path public.= (batch_status, batch_status)"

# RW: how long the steps below wait for the worker (not at all without one)
RW=1
mark=$(log_mark)
if wait_until 15 sql_is 1 "SELECT count(*) FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
                           WHERE a.usename = '$WROLE' AND a.backend_type = 'gridha worker'"; then
	ok "role: the worker connects as $WROLE and registers its instance"
	RW=30
else
	not_ok "role: the worker connects as $WROLE and registers its instance"
	log_since "$mark" | grep -E 'ERROR|exited' | sort | uniq -c | head -n 5 | diag
fi

mark=$(log_mark)
psql_db -c "SELECT gridha.enqueue(s, s || '-b1', '\\x01', CASE s WHEN 'ev1' THEN 'evil1' WHEN 'ev2' THEN 'evil2' ELSE 'ledger' END)
            FROM unnest(ARRAY['ev1', 'ev2', 'rl1']) s" >/dev/null
wait_until "$RW" sql_is 3 "SELECT count(*) FROM gridha.batches WHERE batch_id IN ('ev1-b1', 'ev2-b1', 'rl1-b1') AND status = 'committed'"
check $? "role: the worker as $WROLE commits batches of function and URL targets"

sql_is "worker|$WROLE" "SELECT i.kind || '|' || i.owner FROM gridha.instances i JOIN gridha.workers w USING (instance_id)"
check $? "role: its instance is of kind worker and owned by $WROLE"

h0=$(hist_mark)
psql_db >/dev/null <<EOF
CREATE OR REPLACE FUNCTION w_ev1(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    EXECUTE 'CREATE ROLE $EVIL LOGIN';
    RETURN public.w_submit(\$1, \$2, \$3, \$4);
END
\$\$;
CREATE OR REPLACE FUNCTION w_ev2(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    PERFORM rolpassword FROM pg_catalog.pg_authid;
    RETURN public.w_submit(\$1, \$2, \$3, \$4);
END
\$\$;
SELECT gridha.enqueue(s, s || '-b' || b, '\\x02', CASE s WHEN 'ev1' THEN 'evil1' WHEN 'ev2' THEN 'evil2' ELSE 'ledger' END)
  FROM generate_series(2, 4) b, unnest(ARRAY['ev1', 'ev2', 'rl1']) s ORDER BY b, s;
EOF
evil_delayed() {
	sql_is 2 "SELECT count(DISTINCT batch_id) FROM w_history WHERE id > $h0 AND batch_id IN ('ev1-b2', 'ev2-b2')
	          AND status = 'delayed' AND detail = 'submit function failed or returned \"null\"'"
}
wait_until "$RW" evil_delayed
check $? "role: the redefined functions' batches (ev1-b2, ev2-b2) are delayed"

log_has "$mark" 'permission denied to create role' && log_has "$mark" 'permission denied for table pg_authid'
check $? "role: the server log shows both refusals (permission denied to create role / for table pg_authid)"

evil_delayed && sql_is 0 "SELECT count(*) FROM pg_roles WHERE rolname = '$EVIL'" &&
	sql_is 0 "SELECT count(*) FROM w_applied WHERE bid ~ '^ev[12]-b[234]\$'" &&
	sql_is 0 "SELECT count(*) FROM gridha.batches WHERE service_id IN ('ev1', 'ev2') AND seq > 2 AND attempts > 0"
check $? "role: the functions ran and nothing was created: no role $EVIL, nothing applied, the batches behind them never handed out"

wait_until "$RW" sql_is 4 "SELECT count(*) FROM gridha.batches WHERE service_id = 'rl1' AND status = 'committed'" &&
	sql_is 0 "SELECT count(*) FROM w_planted WHERE who = '$WROLE'"
check $? "role: the worker ($WROLE, search_path public, pg_catalog) commits rl1-b1..b4 and never calls a planted public.= (on text or on gridha.batch_status)"

# The review's attack on 1.1: the owner of a function an administrator made
# a target's submit_function redefines it to set the session's search_path
# for good (set_config(..., false)), plants an evil."=" on uuid that makes
# its owner a superuser when a superuser runs it, and a domain evil.text
# that breaks the worker's own report statement (its "::text" casts); the
# failed report made the worker look for orphans as the bootstrap
# superuser, with an unqualified "=" on uuid parsed under that search_path.
psql_db >/dev/null <<EOF
CREATE ROLE $OWNER LOGIN;
GRANT CREATE ON DATABASE $DB TO $OWNER;
EOF
psql -X -q -v ON_ERROR_STOP=1 -U "$OWNER" -d "$DB" >/dev/null <<'EOF'
CREATE SCHEMA evil;
GRANT USAGE ON SCHEMA evil TO PUBLIC;
CREATE TABLE evil.calls (who name, super boolean, at timestamptz DEFAULT pg_catalog.clock_timestamp());
GRANT INSERT ON evil.calls TO PUBLIC;
CREATE FUNCTION evil.eq(uuid, uuid) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    su boolean := (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user);
BEGIN
    INSERT INTO evil.calls (who, super) VALUES (current_user, su);
    IF su THEN
        EXECUTE 'ALTER ROLE gridha_safety_owner SUPERUSER';
    END IF;
    RETURN $1::pg_catalog.text OPERATOR(pg_catalog.=) $2::pg_catalog.text;
END
$$;
CREATE OPERATOR evil.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = evil.eq);
CREATE DOMAIN evil.text AS pg_catalog.int4;
CREATE FUNCTION evil.w_poison(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'evil, pg_catalog, gridha', false);
    RETURN 'accepted';
END
$$;
EOF
psql_db -c "INSERT INTO gridha.targets (target, submit_function) VALUES ('poison', 'evil.w_poison(text,text,bytea,bigint)')" \
	-c "SELECT gridha.enqueue('ev3', 'ev3-b' || b, '\\x03', 'poison') FROM generate_series(1, 3) b" >/dev/null
wait_until "$RW" sql_is 3 "SELECT count(*) FROM gridha.batches WHERE service_id = 'ev3' AND status = 'committed'"
check $? "attack: the worker commits the batches of a target whose function sets the session's search_path to evil, pg_catalog, gridha"
sleep 2
sql_is f "SELECT rolsuper FROM pg_roles WHERE rolname = '$OWNER'" &&
	sql_is 0 "SELECT count(*) FROM evil.calls"
check $? "attack: the function's owner ($OWNER) is not a superuser, and nobody ever ran the planted evil.= on uuid"
psql_db -c "SELECT * FROM evil.calls" | diag

# The workers view cuts an id on a character boundary: a service id of 40
# two-byte characters shows as its first 31 (62 bytes), never 63 bytes
# ending inside a character.
LONG_SID=$(printf 'é%.0s' $(seq 1 40))
psql_db -c "INSERT INTO w_arm (what) VALUES ('sleep')
            ON CONFLICT (what) DO UPDATE SET armed_at = clock_timestamp()" \
	-c "SELECT gridha.enqueue('$LONG_SID', 'u1', '\\x01', 'sleepy')" >/dev/null
RWID=$(psql_db -c "SELECT instance_id FROM gridha.workers")
if wait_until 20 in_wait "$RWID" PgSleep; then
	sql_is "62|true" "SELECT octet_length(service_id) || '|' || (service_id = repeat('é', 31)) FROM gridha.workers"
	check $? "utf8: the workers view shows the long multibyte service id cut to 31 whole characters (62 bytes)"
	psql_db -c "DELETE FROM w_arm WHERE what = 'sleep'" -c "SELECT pg_cancel_backend(pid) FROM gridha.workers" >/dev/null
	wait_until 30 sql_is committed "SELECT status FROM gridha.batches WHERE batch_id = 'u1'"
	check $? "utf8: once woken, the worker commits the long service's batch"
else
	not_ok "utf8: the worker sleeps in the target function of the long service"
fi

# ---------------------------------------------------------------------------
# headers, over the whole run

python3 - "$LEDGER/stats" >"$WORK/header-stats.txt" <<'EOF'
import json, sys, urllib.request
s = json.load(urllib.request.urlopen(sys.argv[1], timeout=10))
print(s["auth_failures"], s["posts"], s["status_queries"], s["require_header"])
EOF
read -r n_auth n_posts n_sq h_name <"$WORK/header-stats.txt"
[ "$n_auth" = 0 ] && [ "$h_name" = Authorization ] && [ "$n_posts" -gt 0 ] && [ "$n_sq" -gt 0 ]
check $? "headers: every POST ($n_posts) and status GET ($n_sq) the ledger got carried the target's Authorization header ($n_auth refused for want of it)"

! grep -q -F "$SECRET_VALUE" "$GRIDHA_PGLOG"
check $? "headers: the secret is nowhere in the server log"

# ---------------------------------------------------------------------------
# dropdb: DROP DATABASE ... WITH (FORCE) ends a worker inside a target function

step dropdb

WR=$(psql_db -c "SELECT instance_id FROM gridha.workers")
WRPID=$(worker_pid "$WR")
psql_db -c "INSERT INTO w_arm (what) VALUES ('sleep')
            ON CONFLICT (what) DO UPDATE SET armed_at = clock_timestamp()" \
	-c "SELECT gridha.enqueue('z9', 'z9-b1', '\\x01', 'sleepy')" >/dev/null
if [ -n "$WRPID" ] && wait_until 20 in_wait "$WR" PgSleep; then
	mark=$(log_mark)
	psql -X -q -d postgres -v ON_ERROR_STOP=1 -c "DROP DATABASE $DB WITH (FORCE)" >/dev/null 2>"$WORK/dropdb.err"
	check $? "dropdb: DROP DATABASE ... WITH (FORCE) succeeds while the worker sleeps in pg_sleep(600)"
	diag <"$WORK/dropdb.err"
	[ "$(psql -X -q -A -t -d postgres -c "SELECT count(*) FROM pg_stat_activity WHERE pid = $WRPID")" = 0 ] &&
		log_has "$mark" 'gridha worker: submit function failed: canceling statement due to user request' &&
		log_has "$mark" "gridha worker \"worker 1\" \\(instance $WR\\) stopped and released its claims" &&
		no_crash "$mark"
	check $? "dropdb: the worker (pid $WRPID) had its target function cancelled, released its claims and stopped (logged); no crash"
else
	not_ok "dropdb: the worker sleeps in the target function of z9"
fi

# ---------------------------------------------------------------------------
# syncrep: a fast shutdown while the worker's commits wait for a synchronous
# standby that is not there

step syncrep

SDB=gridha_safety_sync
# sync_waiting: the worker waits for the synchronous standby
sync_waiting() {
	[ "$(psql -X -q -A -t -d postgres -c "SELECT count(*) FROM pg_stat_activity
	       WHERE backend_type = 'gridha worker' AND wait_event = 'SyncRep'" 2>/dev/null)" = 1 ]
}
# sync_claimed: the worker holds the claim of sr1
sync_claimed() {
	[ "$(psql -X -q -A -t -d "$SDB" -c "SELECT count(*) FROM gridha.service_claims
	       WHERE service_id = 'sr1' AND claimant IS NOT NULL" 2>/dev/null)" = 1 ]
}
# shellcheck disable=SC2086 # the options are words
if gridha_cluster_restart $SUITE_CLUSTER_OPTS $WORKER_OPTS gridha.database=$SDB &&
	psql -X -q -d postgres -c "CREATE DATABASE $SDB" >/dev/null &&
	psql -X -q -d "$SDB" -v ON_ERROR_STOP=1 -c "CREATE EXTENSION gridha" \
		-c "INSERT INTO gridha.targets (target, submit_url) VALUES ('nowhere', 'http://127.0.0.1:9/{batch_id}')" \
		-c "SELECT gridha.enqueue('sr1', 'sr1-b1', '\\x01', 'nowhere')" >/dev/null &&
	wait_until 20 sync_claimed; then
	# From now on every commit that wrote waits for a standby named
	# gridha_absent, which never connects (this step writes nothing more).
	# shellcheck disable=SC2086
	gridha_write_extra_conf $SUITE_CLUSTER_OPTS $WORKER_OPTS gridha.database=$SDB \
		synchronous_commit=on synchronous_standby_names=gridha_absent
	psql -X -q -d postgres -c "SELECT pg_reload_conf()" >/dev/null
	if wait_until 20 sync_waiting; then
		mark=$(log_mark)
		gridha_as_pg "$PG_BINDIR/pg_ctl" stop -w -t 30 -m fast -D "$PGDATA" >/dev/null 2>&1
		check $? "syncrep: a fast shutdown completes within 30 s while the worker, holding a claim, waits for a synchronous standby that never comes"
		log_has "$mark" "gridha worker \"worker 1\" \\(instance [0-9a-f-]*\\) stopped and released its claims"
		check $? "syncrep: the worker logged that it stopped and released its claims"
		log_since "$mark" | grep -E 'gridha|synchronous' | head -n 20 | diag
	else
		not_ok "syncrep: the worker waits for the synchronous standby (wait event SyncRep)"
		not_ok "syncrep: the worker logged that it stopped and released its claims"
	fi
else
	not_ok "syncrep: a worker serving $SDB claims its one service"
	psql -X -q -d "$SDB" -c "SELECT * FROM gridha.service_claims" 2>&1 | diag
	tail -n 20 "$GRIDHA_PGLOG" | diag
	not_ok "syncrep: the worker logged that it stopped and released its claims"
fi
gridha_cluster_stop immediate >/dev/null 2>&1

[ "$FAILED" -eq 0 ]
