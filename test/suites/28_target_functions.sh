#!/usr/bin/env bash
# test/suites/28_target_functions.sh: a call of a target function leaves
# nothing behind in the worker, runs under gridha's search_path whatever a
# role or a database owner sets, calls the function it was given however
# someone overloads its name, ends within the statement timeout plus a
# margin whatever the function catches, and cannot keep a worker from being
# started again or the server from stopping (src/step.c, src/worker.c,
# src/slots.c; issue 38, findings 4 to 8).
#
# The cluster is restarted with one static worker serving this suite's
# database as a role of its own ($WROLE), gridha.worker_statement_timeout
# 2 s; the database belongs to a role that is no superuser ($DBOWNER).
# Steps, in the order they run:
#
#   path        a target function reads its search_path: pg_catalog, pg_temp
#   temp        a target function leaves a temporary table with a trigger
#               (and a temporary trigger function) in the worker's session;
#               a later call of another target's SECURITY DEFINER function
#               with SET search_path = public (pg_temp comes first for it)
#               inserts into that name: nothing of the first call is left,
#               the row goes to public's table, the trigger never runs
#   user        the database owner makes a schema named like the worker
#               role ("$user") with a function a target function calls by
#               name: it never runs
#   overload    a role with CREATE on a target function's schema adds
#               overloads of the submit and status functions with one more
#               defaulted parameter: the target's batches are still
#               submitted and committed, the overloads never run
#   utf8        a submit function answers 200 two-byte characters: the
#               batch's detail holds the answer cut to whole characters
#               and its row copies out and in again (what pg_restore does)
#   database    the database owner sets ALTER DATABASE ... SET search_path
#               to a schema of its own; after a restart a target function
#               still reads pg_catalog, pg_temp and the planted function
#               never runs
#   role        a target function runs ALTER ROLE <worker role> SET
#               search_path; after a restart, the same
#   timeout     a target function that catches query_canceled in a loop:
#               the worker ends within the statement timeout plus its
#               margin (logged), is started again, and once the function
#               is disarmed the batch is committed
#   terminate   a target function runs pg_terminate_backend on every
#               worker (they run as its role): the worker is started again
#   stop        (statement timeout off; a dynamic worker started beside
#               the static one) gridha.stop_worker of the worker inside
#               such a function: it ends within the margin and is not
#               started again
#   shutdown    a fast shutdown while a dynamic worker is inside such a
#               function completes within 20 s
#
# Every wait is a bounded poll. Works in a database of its own
# (gridha_tf_test) and roles of its own (gridha_tf_*); everything it starts
# it stops, on any exit.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-tf.XXXXXX)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
DB=gridha_tf_test
WROLE=gridha_tf_worker
DBOWNER=gridha_tf_dbowner
VOWNER=gridha_tf_victim
OVL=gridha_tf_schema
FAILED=0
PIDS=()
RESTARTED=0

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 24

WORKER_OPTS="gridha.workers=1 gridha.database=$DB gridha.balance_claims=off
	gridha.naptime=100ms gridha.monitor_interval=100ms gridha.renew_interval=1s
	gridha.soft_expiry=10s gridha.hard_expiry=30s gridha.worker_statement_timeout=2s"

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}

# sql_is EXPECTED SQL: the query's output is exactly EXPECTED.
sql_is() {
	[ "$(psql_db -c "$2" 2>/dev/null)" = "$1" ]
}

log_mark() {
	wc -l <"$GRIDHA_PGLOG"
}

log_has() {
	tail -n +"$(($1 + 1))" "$GRIDHA_PGLOG" | grep -E -q -e "$2"
}

cleanup() {
	suite_stop_pids
	suite_restore_cluster
	psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1
	psql -X -q -d postgres -c "DROP ROLE IF EXISTS $WROLE" -c "DROP ROLE IF EXISTS $VOWNER" \
		-c "DROP ROLE IF EXISTS $OVL" -c "DROP ROLE IF EXISTS $DBOWNER" >/dev/null 2>&1
}
trap cleanup EXIT

if [ -z "${PGDATA:-}" ] || [ -z "${GRIDHA_PGLOG:-}" ]; then
	not_ok "the suite runs inside test/run.sh (PGDATA and GRIDHA_PGLOG are set)"
	exit 1
fi

step() {
	echo "# --- $1 (at ${SECONDS}s)"
}

# ---------------------------------------------------------------------------
# The roles, the database, the functions

psql -X -q -d postgres -v ON_ERROR_STOP=1 >/dev/null <<EOF || exit 1
SET client_min_messages = warning;
DROP DATABASE IF EXISTS $DB WITH (FORCE);
DROP ROLE IF EXISTS $WROLE;
DROP ROLE IF EXISTS $VOWNER;
DROP ROLE IF EXISTS $OVL;
DROP ROLE IF EXISTS $DBOWNER;
CREATE ROLE $DBOWNER LOGIN;
CREATE ROLE $VOWNER LOGIN;
CREATE ROLE $OVL LOGIN;
CREATE DATABASE $DB OWNER $DBOWNER;
EOF
psql_db -c "SET client_min_messages = warning" -c "CREATE EXTENSION gridha" >/dev/null || exit 1
psql_db -c "CREATE ROLE $WROLE LOGIN IN ROLE gridha_submitter" >/dev/null || exit 1

psql_db >/dev/null <<EOF || exit 1
-- what target functions record, and what arms the hostile ones
CREATE TABLE tf_probe (label text, path text, who text);
CREATE TABLE tf_stolen (who text, what text);
CREATE TABLE tf_vict_log (bid text);
CREATE TABLE tf_arm (what text PRIMARY KEY);
CREATE TABLE tf_ov_done (bid text PRIMARY KEY);
GRANT INSERT, SELECT ON tf_probe, tf_ov_done TO $WROLE;
GRANT INSERT ON tf_stolen TO PUBLIC;
GRANT INSERT, SELECT ON tf_vict_log TO $VOWNER;
GRANT SELECT ON tf_arm TO PUBLIC;

CREATE FUNCTION public.tf_armed(what text) RETURNS boolean LANGUAGE sql AS
\$\$ SELECT EXISTS (SELECT 1 FROM public.tf_arm a WHERE a.what OPERATOR(pg_catalog.=) \$1) \$\$;

-- path: what a call sees
CREATE FUNCTION public.tf_probe_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.tf_probe VALUES (\$2, pg_catalog.current_setting('search_path'), current_user);
    RETURN 'accepted';
END
\$\$;

-- temp: the plant, and its victim
CREATE FUNCTION public.tf_plant_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    CREATE TEMP TABLE tf_vict_log (bid text);
    GRANT ALL ON pg_temp.tf_vict_log TO PUBLIC;
    CREATE FUNCTION pg_temp.tf_steal() RETURNS trigger LANGUAGE plpgsql AS
        'BEGIN INSERT INTO public.tf_stolen VALUES (current_user, NEW.bid); RETURN NEW; END';
    CREATE TRIGGER tf_steal BEFORE INSERT ON pg_temp.tf_vict_log
        FOR EACH ROW EXECUTE FUNCTION pg_temp.tf_steal();
    RETURN 'accepted';
END
\$\$;
CREATE FUNCTION public.tf_victim_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS \$\$
BEGIN
    INSERT INTO tf_vict_log VALUES (\$2);
    RETURN 'accepted';
END
\$\$;
ALTER FUNCTION public.tf_victim_sub(text, text, bytea, bigint) OWNER TO $VOWNER;

-- user, database, role: a function that calls a helper by name
CREATE FUNCTION public.tf_helper(text) RETURNS text LANGUAGE sql AS \$\$ SELECT \$1 \$\$;
CREATE FUNCTION public.tf_helped_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    PERFORM tf_helper(\$2);
    RETURN 'accepted';
END
\$\$;

-- role: sets the worker role's own default search_path
CREATE FUNCTION public.tf_alter_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    EXECUTE pg_catalog.format('ALTER ROLE %I SET search_path = tf_dbevil, public', current_user);
    RETURN 'accepted';
END
\$\$;

-- overload: the target's functions live in schema tf, where $OVL may create
CREATE SCHEMA tf;
GRANT USAGE, CREATE ON SCHEMA tf TO $OVL;
GRANT USAGE ON SCHEMA tf TO PUBLIC;
CREATE FUNCTION tf.ov_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS \$\$
    INSERT INTO public.tf_ov_done VALUES (\$2) ON CONFLICT DO NOTHING RETURNING 'accepted'
\$\$;
CREATE FUNCTION tf.ov_stat(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS \$\$
    SELECT d.bid, 'COMMITTED' FROM public.tf_ov_done d WHERE d.bid OPERATOR(pg_catalog.=) ANY (\$1)
\$\$;

-- utf8: an answer that is no word
CREATE FUNCTION public.tf_utf_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS \$\$ SELECT pg_catalog.repeat('é', 200) \$\$;

-- timeout, stop, shutdown: swallows every cancel while armed
CREATE FUNCTION public.tf_stubborn_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    LOOP
        -- the check too: a cancel that comes while it runs is swallowed
        BEGIN
            EXIT WHEN NOT public.tf_armed('stubborn');
            PERFORM pg_catalog.pg_sleep(0.5);
        EXCEPTION WHEN query_canceled THEN
            NULL;
        END;
    END LOOP;
    RETURN 'accepted';
END
\$\$;

-- terminate: every worker, while armed
CREATE FUNCTION public.tf_killer_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    IF public.tf_armed('killer') THEN
        PERFORM pg_catalog.pg_terminate_backend(a.pid) FROM pg_catalog.pg_stat_activity a
          WHERE a.backend_type OPERATOR(pg_catalog.=) 'gridha worker';
    END IF;
    RETURN 'accepted';
END
\$\$;

SET client_min_messages = warning;
INSERT INTO gridha.targets (target, submit_function) VALUES
    ('probe', 'public.tf_probe_sub(text,text,bytea,bigint)'),
    ('plant', 'public.tf_plant_sub(text,text,bytea,bigint)'),
    ('victim', 'public.tf_victim_sub(text,text,bytea,bigint)'),
    ('helped', 'public.tf_helped_sub(text,text,bytea,bigint)'),
    ('alter', 'public.tf_alter_sub(text,text,bytea,bigint)'),
    ('utf', 'public.tf_utf_sub(text,text,bytea,bigint)'),
    ('stubborn', 'public.tf_stubborn_sub(text,text,bytea,bigint)'),
    ('killer', 'public.tf_killer_sub(text,text,bytea,bigint)');
INSERT INTO gridha.targets (target, submit_function, status_function) VALUES
    ('ovl', 'tf.ov_sub(text,text,bytea,bigint)', 'tf.ov_stat(text[])');
-- a target with a credential, which the planted functions go after
INSERT INTO gridha.targets (target, submit_url, request_headers) VALUES
    ('secret', 'http://127.0.0.1:9/{batch_id}', '{"Authorization": "Bearer tf-secret"}');
EOF

RESTARTED=1
# shellcheck disable=SC2086 # the options are words
if ! gridha_cluster_restart $SUITE_CLUSTER_OPTS $WORKER_OPTS gridha.worker_role=$WROLE; then
	not_ok "the cluster restarted with one worker as $WROLE"
	exit 1
fi

# worker_up: a worker runs as $WROLE and has registered its instance
worker_up() {
	sql_is 1 "SELECT count(*) FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
	          WHERE w.instance_id IS NOT NULL AND a.usename = '$WROLE'"
}
worker_pid() {
	psql_db -c "SELECT pid FROM gridha.workers WHERE instance_id IS NOT NULL"
}
backend_gone() {
	sql_is 0 "SELECT count(*) FROM pg_stat_activity WHERE pid = $1"
}
committed() {
	sql_is committed "SELECT status FROM gridha.batches WHERE batch_id = '$1'"
}
# called BATCH: the batch's target function was called: it failed (as
# tf_helped_sub does when tf_helper is not on its path) or it was committed
called() {
	sql_is t "SELECT status = 'committed' OR detail = 'submit function failed or returned \"null\"'
	          FROM gridha.batches WHERE batch_id = '$1'"
}
# in_sleep: the worker sleeps in a target function
in_sleep() {
	sql_is 1 "SELECT count(*) FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
	          WHERE a.wait_event = 'PgSleep'"
}
if ! wait_until 30 worker_up; then
	not_ok "the worker runs as $WROLE"
	exit 1
fi

# ---------------------------------------------------------------------------
step path

psql_db -c "SELECT gridha.enqueue('probe', 'p1', '\\x00', 'probe')" >/dev/null
wait_until 20 committed p1
sql_is "pg_catalog, pg_temp|$WROLE" "SELECT path || '|' || who FROM tf_probe WHERE label = 'p1'"
check $? "path: a target function runs as $WROLE with search_path 'pg_catalog, pg_temp' (got '$(psql_db -c "SELECT path FROM tf_probe WHERE label = 'p1'")')"

# ---------------------------------------------------------------------------
step temp

psql_db -c "SELECT gridha.enqueue('plant', 't1', '\\x00', 'plant')" >/dev/null
wait_until 20 committed t1
sql_is "0|0" "SELECT (SELECT count(*) FROM pg_class WHERE relname = 'tf_vict_log' AND relpersistence = 't')
                  || '|' || (SELECT count(*) FROM pg_proc WHERE proname = 'tf_steal')"
check $? "temp: after a call that made a temporary table with a trigger and a temporary function, neither is left in the worker's session"

psql_db -c "SELECT gridha.enqueue('victim', 'v1', '\\x00', 'victim')" >/dev/null
wait_until 20 committed v1
sql_is 1 "SELECT count(*) FROM public.tf_vict_log WHERE bid = 'v1'"
check $? "temp: the next target's SECURITY DEFINER function (SET search_path = public) writes its row to public.tf_vict_log"

sql_is 0 "SELECT count(*) FROM tf_stolen WHERE what = 'v1'"
check $? "temp: the planted trigger never ran (tf_stolen: $(psql_db -c "SELECT string_agg(who || ':' || what, ',') FROM tf_stolen"))"

# ---------------------------------------------------------------------------
step user

# The database owner, no superuser, makes a schema named like the worker role.
psql -X -q -v ON_ERROR_STOP=1 -U "$DBOWNER" -d "$DB" >/dev/null <<EOF
CREATE SCHEMA $WROLE;
GRANT USAGE ON SCHEMA $WROLE TO PUBLIC;
CREATE FUNCTION $WROLE.tf_helper(text) RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.tf_stolen SELECT current_user, \$1 || ' ' || t.request_headers::text
      FROM gridha.targets t WHERE t.target = 'secret';
    RETURN \$1;
END
\$\$;
EOF
check $? "user: the database owner ($DBOWNER, no superuser) makes schema $WROLE with a function tf_helper(text)"
psql_db -c "SELECT gridha.enqueue('helped', 'h1', '\\x00', 'helped')" >/dev/null
wait_until 20 called h1
sql_is 0 "SELECT count(*) FROM tf_stolen WHERE what LIKE 'h1 %'"
check $? "user: a target function calling tf_helper by name never runs $WROLE.tf_helper (batch h1: $(psql_db -c "SELECT status || ' ' || coalesce(detail, '') FROM gridha.batches WHERE batch_id = 'h1'"))"

# ---------------------------------------------------------------------------
step overload

psql_db -c "SELECT gridha.enqueue('ovl', 'o1', '\\x00', 'ovl')" >/dev/null
wait_until 20 committed o1
psql -X -q -v ON_ERROR_STOP=1 -U "$OVL" -d "$DB" >/dev/null <<'EOF'
CREATE FUNCTION tf.ov_sub(service_id text, batch_id text, payload bytea, epoch bigint, extra int DEFAULT 0)
RETURNS text LANGUAGE sql AS $$
    INSERT INTO public.tf_stolen VALUES (current_user, 'ov_sub overload') RETURNING 'accepted'
$$;
CREATE FUNCTION tf.ov_stat(batch_ids text[], extra int DEFAULT 0)
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $$
    INSERT INTO public.tf_stolen VALUES (current_user, 'ov_stat overload') RETURNING NULL::text, NULL::text
$$;
EOF
psql_db -c "SELECT gridha.enqueue('ovl', 'o2', '\\x00', 'ovl')" >/dev/null
wait_until 30 committed o2
check $? "overload: with overloads of tf.ov_sub and tf.ov_stat (one more defaulted parameter) added by $OVL, batch o2 is submitted and committed (o2: $(psql_db -c "SELECT status || ' ' || coalesce(detail, '') FROM gridha.batches WHERE batch_id = 'o2'"))"
sql_is 0 "SELECT count(*) FROM tf_stolen WHERE what LIKE 'ov_%'"
check $? "overload: the overloads never ran"

# ---------------------------------------------------------------------------
step utf8

psql_db -c "SELECT gridha.enqueue('utf', 'u1', '\\x00', 'utf')" >/dev/null
wait_until 20 sql_is delayed "SELECT status FROM gridha.batches WHERE batch_id = 'u1'"
sql_is t "SELECT detail = 'submit function failed or returned \"' || repeat('é', 100) || '\"'
          FROM gridha.batches WHERE batch_id = 'u1'"
check $? "utf8: the detail holds the function's answer of 200 two-byte characters cut to 100 whole characters"
psql_db -c "COPY (SELECT batch_id, detail FROM gridha.batches WHERE service_id = 'utf') TO STDOUT" >"$WORK/utf.copy" &&
	psql_db -c "CREATE TEMP TABLE u (b text, d text)" -c "\\copy u FROM '$WORK/utf.copy'" >/dev/null 2>"$WORK/utf.err"
check $? "utf8: the batch's row copies out and in again, as pg_restore loads it"
diag <"$WORK/utf.err"

# ---------------------------------------------------------------------------
step database

psql -X -q -v ON_ERROR_STOP=1 -U "$DBOWNER" -d "$DB" >/dev/null <<EOF
CREATE SCHEMA tf_dbevil;
GRANT USAGE ON SCHEMA tf_dbevil TO PUBLIC;
CREATE FUNCTION tf_dbevil.tf_helper(text) RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.tf_stolen SELECT current_user, \$1 || ' ' || t.request_headers::text
      FROM gridha.targets t WHERE t.target = 'secret';
    RETURN \$1;
END
\$\$;
ALTER DATABASE $DB SET search_path = tf_dbevil, public;
EOF
# shellcheck disable=SC2086 # the options are words
gridha_cluster_restart $SUITE_CLUSTER_OPTS $WORKER_OPTS gridha.worker_role=$WROLE >/dev/null 2>&1 &&
	wait_until 30 worker_up
psql_db -c "SELECT gridha.enqueue('probe', 'p2', '\\x00', 'probe'), gridha.enqueue('helped-db', 'h2', '\\x00', 'helped')" >/dev/null
wait_until 20 committed p2
sql_is "pg_catalog, pg_temp" "SELECT path FROM tf_probe WHERE label = 'p2'"
check $? "database: after ALTER DATABASE ... SET search_path = tf_dbevil, public by its owner and a restart, a target function still has 'pg_catalog, pg_temp' (got '$(psql_db -c "SELECT path FROM tf_probe WHERE label = 'p2'")')"
wait_until 20 called h2
sql_is 0 "SELECT count(*) FROM tf_stolen WHERE what LIKE 'h2 %'"
check $? "database: tf_dbevil.tf_helper never ran"

# ---------------------------------------------------------------------------
step role

psql_db -c "SELECT gridha.enqueue('alter', 'a1', '\\x00', 'alter')" >/dev/null
wait_until 20 committed a1
sql_is 1 "SELECT count(*) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
          WHERE r.rolname = '$WROLE' AND s.setconfig::text ~ 'tf_dbevil'"
check $? "role: a target function set its role's default: ALTER ROLE $WROLE SET search_path = tf_dbevil, public"
# shellcheck disable=SC2086 # the options are words
gridha_cluster_restart $SUITE_CLUSTER_OPTS $WORKER_OPTS gridha.worker_role=$WROLE >/dev/null 2>&1 &&
	wait_until 30 worker_up
psql_db -c "SELECT gridha.enqueue('probe', 'p3', '\\x00', 'probe'), gridha.enqueue('helped-role', 'h3', '\\x00', 'helped')" >/dev/null
wait_until 20 committed p3
sql_is "pg_catalog, pg_temp" "SELECT path FROM tf_probe WHERE label = 'p3'"
check $? "role: after a restart, a target function still has 'pg_catalog, pg_temp' (got '$(psql_db -c "SELECT path FROM tf_probe WHERE label = 'p3'")')"
wait_until 20 called h3
sql_is 0 "SELECT count(*) FROM tf_stolen WHERE what LIKE 'h3 %'"
check $? "role: tf_dbevil.tf_helper never ran"
psql_db -c "ALTER ROLE $WROLE RESET ALL" -c "ALTER DATABASE $DB RESET ALL" >/dev/null

# ---------------------------------------------------------------------------
step timeout

mark=$(log_mark)
psql_db -c "INSERT INTO tf_arm VALUES ('stubborn')" -c "SELECT gridha.enqueue('stubborn', 's1', '\\x00', 'stubborn')" >/dev/null
if wait_until 20 in_sleep; then
	PID1=$(worker_pid)
	t0=$SECONDS
	# statement timeout 2 s + margin 2 s; the bound is a failure bound
	wait_until 15 backend_gone "$PID1"
	check $? "timeout: the worker (pid $PID1) inside a function that swallows every cancel ends within 15 s (gone after $((SECONDS - t0)) s; statement timeout 2 s, margin 2 s)"
	log_has "$mark" 'gridha worker ended itself: a function of target "stubborn" ran on 2000 ms after it was cancelled'
	check $? "timeout: the worker logged why it ended"
	psql_db -c "DELETE FROM tf_arm WHERE what = 'stubborn'" >/dev/null
	wait_until 30 sql_is t "SELECT count(*) = 1 AND min(pid) <> $PID1 FROM gridha.workers WHERE instance_id IS NOT NULL"
	check $? "timeout: a worker is started again (a new process)"
	wait_until 45 committed s1
	check $? "timeout: disarmed, the batch is committed"
else
	not_ok "timeout: the worker calls the function"
	for _ in 1 2 3; do not_ok "timeout: (not run)"; done
fi
psql_db -c "DELETE FROM tf_arm WHERE what = 'stubborn'" >/dev/null

# ---------------------------------------------------------------------------
step terminate

wait_until 30 worker_up
PID2=$(worker_pid)
psql_db -c "INSERT INTO tf_arm VALUES ('killer')" -c "SELECT gridha.enqueue('killer', 'k1', '\\x00', 'killer')" >/dev/null
wait_until 20 backend_gone "$PID2"
check $? "terminate: a target function terminates the worker (pid $PID2) with pg_terminate_backend"
psql_db -c "DELETE FROM tf_arm WHERE what = 'killer'" >/dev/null
wait_until 30 sql_is t "SELECT count(*) = 1 AND min(pid) <> $PID2 FROM gridha.workers WHERE instance_id IS NOT NULL"
check $? "terminate: a worker is started again (a new process)"

# ---------------------------------------------------------------------------
step stop

# no statement timeout from here: only SIGTERM's cancel is swallowed
mark=$(log_mark)
# shellcheck disable=SC2086 # the options are words
gridha_write_extra_conf $SUITE_CLUSTER_OPTS $WORKER_OPTS gridha.worker_role=$WROLE gridha.worker_statement_timeout=0
psql_db -c "SELECT pg_reload_conf()" >/dev/null
wait_until 10 log_has "$mark" 'received SIGHUP, reloading configuration files'
wait_until 30 worker_up
# the worker reads the file at its next wait (gridha.naptime 100 ms)
sleep 1
# a dynamic worker too, so that the step does not depend on the last one's
# restart
psql_db -c "SELECT gridha.start_worker('tf stop')" >/dev/null
psql_db -c "INSERT INTO tf_arm VALUES ('stubborn')" -c "SELECT gridha.enqueue('stubborn', 's2', '\\x00', 'stubborn')" >/dev/null
if wait_until 20 in_sleep; then
	read -r W3 PID3 LABEL3 <<<"$(psql_db -F ' ' -c "SELECT w.instance_id, w.pid, replace(w.label, ' ', '_')
	                                              FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
	                                             WHERE a.wait_event = 'PgSleep'")"
	LABEL3=${LABEL3//_/ }
	t0=$SECONDS
	sql_is t "SELECT gridha.stop_worker('$W3')"
	wait_until 15 backend_gone "$PID3"
	check $? "stop: stop_worker ends the worker '$LABEL3' (pid $PID3) inside a function that swallows the cancel within 15 s (gone after $((SECONDS - t0)) s; margin 2 s)"
	psql_db -c "DELETE FROM tf_arm WHERE what = 'stubborn'" >/dev/null
	# a worker that is started again comes after 5 s
	if wait_until 12 sql_is 1 "SELECT count(*) FROM gridha.workers WHERE label = '$LABEL3'"; then
		not_ok "stop: an administrator stopped it: it is not started again (worker '$LABEL3' runs again)"
	else
		ok "stop: an administrator stopped it: it is not started again (12 s later no worker '$LABEL3' runs)"
	fi
else
	not_ok "stop: the worker calls the function"
	not_ok "stop: (not run)"
fi

# ---------------------------------------------------------------------------
step shutdown

psql_db -c "INSERT INTO tf_arm VALUES ('stubborn') ON CONFLICT DO NOTHING" \
	-c "SELECT gridha.enqueue('stubborn', 's3', '\\x00', 'stubborn')" >/dev/null
psql_db -c "SELECT gridha.start_worker('tf dynamic')" >/dev/null
if wait_until 30 in_sleep; then
	t0=$SECONDS
	gridha_as_pg "$PG_BINDIR/pg_ctl" stop -w -t 20 -m fast -D "$PGDATA" >/dev/null 2>&1
	check $? "shutdown: a fast shutdown completes within 20 s while a worker is inside a function that swallows the cancel (took $((SECONDS - t0)) s)"
else
	not_ok "shutdown: a dynamic worker calls the function"
fi
gridha_cluster_stop immediate >/dev/null 2>&1

[ "$FAILED" -eq 0 ]
