#!/usr/bin/env bash
# test/suites/20_workers.sh: gridha's background-worker instances
# (src/worker.c, src/submit.c, src/targets.c) against the test ledger
# (test/dlt/ledger.py).
#
# The cluster is restarted with two static workers serving this suite's
# database (gridha.workers = 2, gridha.database), short claim timings and a
# 1 s gridha.submit_timeout; at the end it is restarted with the phase 2
# settings only. Steps, in the order they run:
#
#   static      two workers: distinct instance ids, pids in pg_stat_activity
#               as 'gridha worker', instances of kind 'worker'
#   targets     RG007 for a malformed submit_url, a status_url without
#               {batch_ids}, submit_url together with submit_function, a
#               submit_function of the wrong signature; the row unchanged
#   http        20 services x 25 batches over HTTP, both status dialects:
#               all committed, enqueue order at the ledger, no duplicate
#   dynamic     start_worker / stop_worker, the worker slots running out
#               (53400 with a hint)
#   faults      503s, then stalls longer than gridha.submit_timeout: all
#               committed, delayed batches were attempted again
#   waits       pg_stat_activity.wait_event of a napping worker, of one
#               whose POSTs the ledger holds and of one whose status poll
#               it holds: GridhaNap, GridhaLedgerAnswer, GridhaStatusPoll on
#               PostgreSQL 17, 'Extension' on 15 and 16
#   invalid     a batch the ledger marks invalid, a batch it rejects (400):
#               each ends invalid, the next batch of its service commits
#   functions   targets with submit_function (fire and forget, and with a
#               status_function); a submit_function that raises is retried
#               and blocks nobody else
#   orphan      a report that fails with an error: the worker finds the
#               batch it no longer has in hand and submits it again
#   unknown     heads left pending by an instance that never POSTed them:
#               the workers hear UNKNOWN and POST each again, never asking
#               about a batch again before the answer is applied (its
#               hand-out never moves from submitting to unknown)
#   client      client/gridha-client and the workers share services
#   wake-up     with gridha.naptime and gridha.monitor_interval at 60 s, an
#               enqueue is still handed out at once (the latch)
#   crash       kill -9 of a worker: the postmaster restarts every backend,
#               the static workers come back as new instances
#   sigterm     pg_terminate_backend of a worker while batches flow: it
#               exits, releases its claims, and is started again as a new
#               instance (only gridha.stop_worker stops a worker for good);
#               the workers finish everything
#
# Words: "victim" is the worker a step signals; every wait is a bounded
# poll, never a sleep standing in for an assertion. Services are named per
# step (e01.., f1.., v1, r1, fa1.., sh.., w1, t01..), so each step checks
# only its own.
#
# Works in a database of its own (gridha_worker_test); everything it starts
# it stops, on any exit.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-workers.XXXXXX)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
DB=gridha_worker_test
CLIENT=$REPO/client/gridha-client
QUERY=$REPO/test/workers/ledger_query.py
CHECK_LOG=$REPO/test/dlt/check_log.py
FAILED=0
PIDS=()
RESTARTED=0

# The worker settings of this suite (see the header).
WORKER_OPTS="gridha.workers=2 gridha.database=$DB gridha.naptime=200ms
	gridha.monitor_interval=100ms gridha.submit_timeout=1s
	gridha.soft_expiry=6s gridha.hard_expiry=20s gridha.renew_interval=1s"

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"

# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 63

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}

# sql_is EXPECTED SQL: the query's output is exactly EXPECTED.
sql_is() {
	[ "$(psql_db -c "$2" 2>/dev/null)" = "$1" ]
}


# log_mark: the server log's current length in lines; log_since MARK
# prints what was written after it.
log_mark() {
	wc -l <"$GRIDHA_PGLOG"
}

log_since() {
	tail -n +"$(($1 + 1))" "$GRIDHA_PGLOG"
}

# log_has MARK PATTERN: a line written after MARK matches PATTERN (grep -E).
# grep -c reads to the end, so the pipe never breaks under pipefail.
log_has() {
	log_since "$1" | grep -E -c -e "$2" >/dev/null
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
if [ ! -x "$CLIENT" ]; then
	not_ok "client/gridha-client is built (run make)"
	exit 1
fi

# ---------------------------------------------------------------------------
# The ledger, the database, the restart with workers

start_ledger --commit-delay 0.1 --max-lifetime 600 \
	--invalid-pattern '^bad-' --reject-pattern '^rej-'

# ledger_stat NAME: one count of GET /stats.
ledger_stat() {
	python3 - "$LEDGER/stats" "$1" <<'EOF'
import json, sys, urllib.request
print(json.load(urllib.request.urlopen(sys.argv[1], timeout=10))[sys.argv[2]])
EOF
}

# posts RESULT [SERVICES]: batch ids of the ledger's post lines with RESULT.
posts() {
	python3 "$QUERY" "$WORK/ledger.log" posts "$@"
}

# order_kept NAME WHERE: check_log.py against the enqueue order of the
# services matching WHERE (an SQL condition on gridha.batches): every batch
# arrived, in order, one in flight per service. NAME names the files.
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

# duplicates_of REGEX: the services' duplicate POSTs, "batch count" lines.
duplicates_of() {
	posts duplicate "$1" | sort | uniq -c | awk '{print $2, $1}'
}

psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" \
	-c "CREATE DATABASE $DB" >/dev/null || exit 1
psql_db >/dev/null <<EOF || exit 1
CREATE EXTENSION gridha;

UPDATE gridha.targets
   SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
       status_url = '$LEDGER/batch_statuses?id={batch_ids}'
 WHERE target = 'default';
INSERT INTO gridha.targets (target, submit_url, status_url) VALUES
    ('splinter', '$LEDGER/batches/{service_id}/{batch_id}',
     '$LEDGER/splinter/batch_statuses?ids={batch_ids}'),
    ('ff', '$LEDGER/batches/{service_id}/{batch_id}', NULL),
    ('t7', '$LEDGER/batches/{service_id}/{batch_id}',
     '$LEDGER/batch_statuses?id={batch_ids}');

-- An in-database ledger: what the submit functions applied, in order.
CREATE TABLE w_applied (
    bid  text PRIMARY KEY,
    sid  text NOT NULL,
    ep   bigint NOT NULL,
    n    integer NOT NULL DEFAULT 1,
    pos  bigserial
);

-- Target functions are called with search_path pg_catalog, pg_temp: these
-- find public's tables and functions through a path of their own.
CREATE FUNCTION w_submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql SET search_path = public, pg_temp AS \$\$
BEGIN
    INSERT INTO w_applied (bid, sid, ep) VALUES (\$2, \$1, \$4)
        ON CONFLICT (bid) DO UPDATE SET n = w_applied.n + 1;
    RETURN 'accepted';
END
\$\$;

CREATE FUNCTION w_status(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql SET search_path = public, pg_temp AS \$\$
    SELECT a.bid, 'COMMITTED' FROM w_applied a WHERE a.bid = ANY (\$1)
\$\$;

-- Services listed here make w_flaky raise.
CREATE TABLE w_fail (sid text PRIMARY KEY);

CREATE FUNCTION w_flaky(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql SET search_path = public, pg_temp AS \$\$
BEGIN
    IF EXISTS (SELECT 1 FROM w_fail f WHERE f.sid = \$1) THEN
        RAISE EXCEPTION 'the in-database ledger is down for %', \$1;
    END IF;
    RETURN w_submit(\$1, \$2, \$3, \$4);
END
\$\$;

-- The workers call w_submit, w_status and w_flaky as the worker role
-- (gridha.worker_role; test/tap.sh makes it a member of gridha_submitter
-- only): the functions' own tables are the user's to grant.
GRANT SELECT, INSERT, UPDATE ON w_applied TO $SUITE_WORKER_ROLE;
GRANT USAGE ON SEQUENCE w_applied_pos_seq TO $SUITE_WORKER_ROLE;
GRANT SELECT ON w_fail TO $SUITE_WORKER_ROLE;

CREATE FUNCTION w_wrong(batch_id text) RETURNS text LANGUAGE sql AS 'SELECT \$1';

INSERT INTO gridha.targets (target, submit_function) VALUES
    ('fn', 'w_submit(text,text,bytea,bigint)'),
    ('fnflaky', 'w_flaky(text,text,bytea,bigint)');
INSERT INTO gridha.targets (target, submit_function, status_function) VALUES
    ('fn2', 'w_submit(text,text,bytea,bigint)', 'w_status(text[])');

-- w_sqlstate(cmd): runs cmd; 'ok' or the SQLSTATE it raised.
CREATE FUNCTION w_sqlstate(cmd text) RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    EXECUTE cmd;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END
\$\$;

CREATE TABLE w_dyn (id uuid);
CREATE TABLE w_dyn_error (state text, message text, hint text);
EOF

RESTARTED=1
# shellcheck disable=SC2086 # the options are words
if ! gridha_cluster_restart $SUITE_CLUSTER_OPTS $WORKER_OPTS; then
	not_ok "the cluster restarted with gridha.workers = 2"
	exit 1
fi

# ---------------------------------------------------------------------------
# static workers

workers_registered() {
	sql_is 2 "SELECT count(*) FROM gridha.workers WHERE instance_id IS NOT NULL"
}
wait_until 30 workers_registered
check $? "static: gridha.workers shows 2 registered workers"
psql_db -c "SELECT instance_id, label, pid, state FROM gridha.workers" | diag

sql_is 2 "SELECT count(DISTINCT instance_id) FROM gridha.workers"
check $? "static: the 2 workers have distinct instance ids"

sql_is 2 "SELECT count(*) FROM gridha.workers w
          JOIN pg_stat_activity a ON a.pid = w.pid AND a.backend_type = 'gridha worker'"
check $? "static: their pids are in pg_stat_activity with backend_type 'gridha worker'"

sql_is 2 "SELECT count(*) FROM gridha.workers w
          JOIN gridha.instances i USING (instance_id) WHERE i.kind = 'worker'"
check $? "static: each is a gridha.instances row of kind 'worker'"

n_logged=0
for id in $(psql_db -c "SELECT instance_id FROM gridha.workers"); do
	if grep -q "gridha worker \"worker [12]\" started as instance $id" "$GRIDHA_PGLOG"; then
		n_logged=$((n_logged + 1))
	fi
done
[ "$n_logged" -eq 2 ]
check $? "static: the server log names each worker's instance at its start ($n_logged of 2)"

# ---------------------------------------------------------------------------
# target checks (RG007)

t7_row() {
	psql_db -c "SELECT t::text FROM gridha.targets t WHERE target = 't7'"
}

# refused WHAT SQL: SQL is refused with RG007 and the t7 row is unchanged.
refused() {
	local before after state
	before=$(t7_row)
	state=$(psql_db -c "SELECT w_sqlstate(\$cmd\$$2\$cmd\$)")
	after=$(t7_row)
	[ "$state" = RG007 ] && [ -n "$before" ] && [ "$before" = "$after" ]
	check $? "targets: $1 is refused with RG007, the row unchanged (got $state)"
}

refused "a malformed submit_url" \
	"UPDATE gridha.targets SET submit_url = 'htp:/127.0.0.1/batches' WHERE target = 't7'"
refused "a status_url without {batch_ids}" \
	"UPDATE gridha.targets SET status_url = '$LEDGER/batch_statuses?id=all' WHERE target = 't7'"
refused "both submit_url and submit_function" \
	"UPDATE gridha.targets SET submit_function = 'w_submit(text,text,bytea,bigint)' WHERE target = 't7'"
refused "a submit_function with the wrong signature" \
	"UPDATE gridha.targets SET submit_url = NULL, submit_function = 'w_wrong(text)' WHERE target = 't7'"

state=$(psql_db -c "SELECT w_sqlstate(\$\$UPDATE gridha.targets SET submit_url = NULL,
                    submit_function = 'w_submit(text,text,bytea,bigint)' WHERE target = 't7'\$\$)")
[ "$state" = ok ] && [ "$(psql_db -c "SELECT submit_function FROM gridha.targets WHERE target = 't7'")" = \
	"public.w_submit(text,text,bytea,bigint)" ]
check $? "targets: a valid change of the same row (submit_url -> submit_function) is accepted, the function stored as its schema-qualified signature"

# ---------------------------------------------------------------------------
# end to end over HTTP: 20 services x 25 batches, both dialects

psql_db >/dev/null <<'EOF'
DO $$
BEGIN
    FOR b IN 1..25 LOOP
        FOR s IN 1..20 LOOP
            PERFORM gridha.enqueue(format('e%s', lpad(s::text, 2, '0')),
                                   format('e%s-b%s', lpad(s::text, 2, '0'), lpad(b::text, 2, '0')),
                                   decode(lpad(to_hex(b), 2, '0'), 'hex'),
                                   CASE WHEN s > 10 THEN 'splinter' END);
        END LOOP;
    END LOOP;
END
$$;
EOF

wait_until 120 sql_is 500 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^e' AND status = 'committed'"
check $? "http: all 500 batches of 20 services reach committed"
psql_db -c "SELECT status, count(*) FROM gridha.batches WHERE service_id ~ '^e' GROUP BY 1" | diag

[ "$(python3 "$QUERY" "$WORK/ledger.log" queries sawtooth)" -gt 0 ] &&
	[ "$(python3 "$QUERY" "$WORK/ledger.log" queries splinter)" -gt 0 ]
check $? "http: the workers polled both status dialects (Sawtooth and Splinter)"

order_kept e2e "service_id ~ '^e'"
check $? "http: each service's batches arrived at the ledger in enqueue order, one in flight"

dups=$(ledger_stat duplicates)
accepted=$(ledger_stat accepted)
[ "$dups" = 0 ] && [ "$accepted" = 500 ]
check $? "http: no batch applied twice (ledger: $accepted accepted, $dups duplicates)"

sql_is 2 "SELECT count(DISTINCT instance_id) FROM gridha.batches WHERE service_id ~ '^e'"
check $? "http: both workers handed batches out"

# ---------------------------------------------------------------------------
# dynamic workers

DYN=$(psql_db -c "SELECT gridha.start_worker('dyn')" 2>&1)
[[ "$DYN" =~ ^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$ ]]
check $? "dynamic: start_worker('dyn') returns a uuid ($DYN)"

wait_until 15 sql_is dyn "SELECT label FROM gridha.workers WHERE instance_id = '$DYN'"
check $? "dynamic: it appears in gridha.workers with label dyn"

# With balance on, three live instances share the work: the idle claims
# stay with the two workers that hold them, and the new worker takes its
# share of the services that get work (6 new ones, free, 20 batches each).
wait_until 20 sql_is t "SELECT soft_expiry > now() FROM gridha.instances WHERE instance_id = '$DYN'"
psql_db -c "SELECT gridha.enqueue(format('dy%s', s), format('dy%s-b%s', s, lpad(b::text, 2, '0')), '\x5a')
            FROM generate_series(1, 20) b, generate_series(1, 6) s ORDER BY b, s" >/dev/null
wait_until 30 sql_is 120 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^dy' AND status = 'committed'"
sql_is t "SELECT count(DISTINCT instance_id) FILTER (WHERE instance_id = '$DYN') = 1
             AND count(DISTINCT instance_id) FILTER (WHERE instance_id <> '$DYN') >= 1
          FROM gridha.batches WHERE service_id ~ '^dy'"
check $? "dynamic: the new worker takes its share of the new work, beside the others ($(psql_db -c "SELECT string_agg(n::text, '+') FROM (SELECT count(*) AS n FROM gridha.batches WHERE service_id ~ '^dy' GROUP BY instance_id ORDER BY 1) x") batches of 120 by instance)"

sql_is t "SELECT gridha.stop_worker('$DYN')"
check $? "dynamic: stop_worker of its id returns true"

wait_until 15 sql_is 0 "SELECT count(*) FROM gridha.workers WHERE instance_id = '$DYN'"
check $? "dynamic: the stopped worker disappears from gridha.workers"

sql_is 0 "SELECT count(*) FROM gridha.service_claims WHERE claimant = '$DYN'"
check $? "dynamic: its instance holds no claims afterwards"

sql_is f "SELECT gridha.stop_worker(gen_random_uuid())"
check $? "dynamic: stop_worker of an unknown uuid returns false"

# Start workers until the background worker slots run out.
psql_db >/dev/null <<'EOF'
DO $$
DECLARE
    st text;
    msg text;
    hnt text;
BEGIN
    FOR i IN 1..64 LOOP
        BEGIN
            INSERT INTO w_dyn SELECT gridha.start_worker('fill');
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                                    hnt = PG_EXCEPTION_HINT;
            INSERT INTO w_dyn_error VALUES (st, msg, hnt);
            EXIT;
        END;
    END LOOP;
END
$$;
EOF
n_fill=$(psql_db -c "SELECT count(*) FROM w_dyn")
psql_db -c "SELECT * FROM w_dyn_error" | diag
sql_is t "SELECT state = '53400' AND coalesce(hint, '') <> '' FROM w_dyn_error"
check $? "dynamic: start_worker with max_worker_processes exhausted raises 53400 with a hint (after $n_fill started)"

n_stopped=$(psql_db -c "SELECT count(*) FILTER (WHERE gridha.stop_worker(id)) FROM w_dyn")
fill_gone() {
	sql_is 2 "SELECT count(*) FROM gridha.workers"
}
wait_until 30 fill_gone && [ "$n_stopped" = "$n_fill" ] && [ "$n_fill" -gt 0 ]
check $? "dynamic: all $n_fill extra workers stop ($n_stopped stop_worker calls true), the 2 static remain"

# ---------------------------------------------------------------------------
# 503s, then stalls longer than gridha.submit_timeout (1 s)

# 503 for 2 s, then every request is held 2 s until 6 s from now.
ledger_control '{"fail_503_for": 2, "stall_for": 6, "stall_seconds": 2}'
psql_db >/dev/null <<'EOF'
SELECT gridha.enqueue(format('f%s', s), format('f%s-b%s', s, b), '\x0f',
                      CASE WHEN s > 3 THEN 'splinter' END)
  FROM generate_series(1, 4) b, generate_series(1, 5) s
 ORDER BY b, s;
EOF
wait_until 90 sql_is 20 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^f' AND status = 'committed'"
check $? "faults: all 20 batches enqueued during 503s and stalls end committed"
psql_db -c "SELECT status, count(*), max(attempts) FROM gridha.batches WHERE service_id ~ '^f' GROUP BY 1" | diag
ledger_control '{"clear": true}'

n503=$(ledger_stat 503s)
nstall=$(ledger_stat stalls)
[ "$n503" -gt 0 ] && [ "$nstall" -gt 0 ]
check $? "faults: the ledger answered 503s ($n503) and held requests ($nstall stalls)"

posts 503 '^f' | sort -u >"$WORK/delayed-503.txt"
posts stalled '^f' | sort -u >"$WORK/delayed-stall.txt"
sort -u "$WORK/delayed-503.txt" "$WORK/delayed-stall.txt" >"$WORK/delayed.txt"
n_d=$(wc -l <"$WORK/delayed.txt")
n_503=$(wc -l <"$WORK/delayed-503.txt")
n_st=$(wc -l <"$WORK/delayed-stall.txt")
ids=$(sed "s/.*/'&'/" "$WORK/delayed.txt" | paste -sd,)
[ "$n_503" -gt 0 ] && [ "$n_st" -gt 0 ] &&
	sql_is "$n_d" "SELECT count(*) FROM gridha.batches WHERE batch_id IN (${ids:-''}) AND attempts > 1"
check $? "faults: every batch that met a 503 ($n_503) or a stall past the timeout ($n_st) has attempts > 1"

order_kept faults "service_id ~ '^f'"
check $? "faults: enqueue order kept at the ledger"

# ---------------------------------------------------------------------------
# waits: pg_stat_activity names what a worker waits for. On PostgreSQL 17
# each wait has a name of its own (GridhaNap, GridhaLedgerAnswer,
# GridhaStatusPoll); on 15 and 16 every one is 'Extension'.

server_major=$(($(psql_db -c "SHOW server_version_num") / 10000))
# wait_name NAME: what wait_event shows for NAME on this server
wait_name() {
	if [ "$server_major" -ge 17 ]; then echo "$1"; else echo Extension; fi
}
# a_worker_waits EVENT: a worker of this suite waits on EVENT now
a_worker_waits() {
	sql_is t "SELECT EXISTS (SELECT FROM gridha.workers w
	                           JOIN pg_stat_activity a ON a.pid = w.pid
	                          WHERE a.wait_event_type = 'Extension' AND a.wait_event = '$1')"
}

ev=$(wait_name GridhaNap)
wait_until 20 a_worker_waits "$ev"
check $? "waits: an idle worker's nap shows as wait_event '$ev' (PostgreSQL $server_major)"

# POSTs held 0.8 s (under gridha.submit_timeout) for the next 4 s
ev=$(wait_name GridhaLedgerAnswer)
ledger_control '{"stall_for": 4, "stall_seconds": 0.8}'
psql_db -c "SELECT gridha.enqueue(format('wt%s', s), format('wt%s-b%s', s, b), '\x0f')
              FROM generate_series(1, 4) b, generate_series(1, 3) s ORDER BY b, s" >/dev/null
wait_until 20 a_worker_waits "$ev"
check $? "waits: a worker with POSTs held by the ledger shows as wait_event '$ev'"
wait_until 60 sql_is 12 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^wt' AND status = 'committed'"
ledger_control '{"clear": true}'

# status GETs held for the next 4 s
ev=$(wait_name GridhaStatusPoll)
ledger_control '{"hang_status_for": 4}'
psql_db -c "SELECT gridha.enqueue(format('ws%s', s), format('ws%s-b1', s), '\x0f')
              FROM generate_series(1, 3) s" >/dev/null
wait_until 20 a_worker_waits "$ev"
check $? "waits: a worker whose status poll the ledger holds shows as wait_event '$ev'"
wait_until 60 sql_is 3 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^ws' AND status = 'committed'"
ledger_control '{"clear": true}'

# ---------------------------------------------------------------------------
# INVALID and rejected batches end without blocking their service

mark_invalid=$(log_mark)
psql_db >/dev/null <<'EOF'
SELECT gridha.enqueue('v1', 'v1-b1', '\x01');
SELECT gridha.enqueue('v1', 'bad-v1-b2', '\x02');
SELECT gridha.enqueue('v1', 'v1-b3', '\x03');
SELECT gridha.enqueue('r1', 'r1-b1', '\x01', 'splinter');
SELECT gridha.enqueue('r1', 'rej-r1-b2', '\x02', 'splinter');
SELECT gridha.enqueue('r1', 'r1-b3', '\x03', 'splinter');
EOF
wait_until 30 sql_is 0 "SELECT count(*) FROM gridha.batches WHERE service_id IN ('v1', 'r1')
                        AND status NOT IN ('committed', 'invalid')"
psql_db -c "SELECT batch_id, status, attempts, detail, instance_id, epoch FROM gridha.batches
            WHERE service_id IN ('v1', 'r1') ORDER BY service_id, seq" | diag
if ! sql_is 0 "SELECT count(*) FROM gridha.batches WHERE service_id IN ('v1', 'r1')
               AND status NOT IN ('committed', 'invalid')"; then
	# what held them up: the claims, the workers, the server's words
	psql_db -c "SELECT service_id, claimant, epoch, soft_expiry, hard_expiry, ready_at, has_in_flight, submitting
	            FROM gridha.claims WHERE service_id IN ('v1', 'r1')" | diag
	psql_db -c "SELECT * FROM gridha.workers" | diag
	log_since "$mark_invalid" | grep -v 'statement:' | tail -n 40 | diag
fi

sql_is "invalid|committed" "SELECT string_agg(status::text, '|' ORDER BY seq) FROM gridha.batches
                            WHERE batch_id IN ('bad-v1-b2', 'v1-b3')"
check $? "invalid: the batch the ledger marks INVALID ends invalid, the next of its service committed"

sql_is "invalid|http 400|committed" "SELECT b.status || '|' || b.detail || '|' || n.status
                                     FROM gridha.batches b, gridha.batches n
                                     WHERE b.batch_id = 'rej-r1-b2' AND n.batch_id = 'r1-b3'"
check $? "invalid: the batch the ledger rejects (400) ends invalid with detail 'http 400', its service moves on"

order_kept invalid "service_id IN ('v1', 'r1')"
check $? "invalid: enqueue order kept at the ledger"

# ---------------------------------------------------------------------------
# in-database targets

mark=$(log_mark)
psql_db >/dev/null <<'EOF'
INSERT INTO w_fail VALUES ('fl1');
SELECT gridha.enqueue(format('%s1', t), format('%s1-b%s', t, b), '\x0a',
                      CASE t WHEN 'fa' THEN 'fn' WHEN 'fb' THEN 'fn2' ELSE 'fnflaky' END)
  FROM generate_series(1, 5) b, unnest(ARRAY['fa', 'fb', 'fl', 'fm']) t
 ORDER BY b, t;
EOF
# fl1 raises until it is taken off w_fail; fm1 is on the same target.
others_done() {
	sql_is 15 "SELECT count(*) FROM gridha.batches WHERE service_id IN ('fa1', 'fb1', 'fm1')
	           AND status = 'committed'" &&
		sql_is t "SELECT attempts >= 2 FROM gridha.batches WHERE batch_id = 'fl1-b1'"
}
wait_until 60 others_done
psql_db -c "SELECT service_id, status, count(*), max(attempts) FROM gridha.batches
            WHERE service_id ~ '^f[abml]1' GROUP BY 1, 2 ORDER BY 1" | diag

sql_is 5 "SELECT count(*) FROM gridha.batches WHERE service_id = 'fa1' AND status = 'committed'" &&
	sql_is 5 "SELECT count(*) FROM w_applied WHERE sid = 'fa1' AND n = 1"
check $? "functions: a submit_function target (no status source) commits its batches, each applied once"

sql_is 5 "SELECT count(*) FROM gridha.batches WHERE service_id = 'fb1' AND status = 'committed'" &&
	sql_is 5 "SELECT count(*) FROM w_applied WHERE sid = 'fb1' AND n = 1"
check $? "functions: a submit_function + status_function target commits its batches, each applied once"

sql_is "true|queued" "SELECT string_agg(CASE WHEN seq = 1 THEN (attempts >= 2 AND status IN ('delayed', 'submitting'))::text
                                          ELSE status::text END, '|' ORDER BY seq)
                   FROM gridha.batches WHERE service_id = 'fl1' AND seq <= 2" &&
	sql_is 5 "SELECT count(*) FROM gridha.batches WHERE service_id = 'fm1' AND status = 'committed'"
check $? "functions: a raising submit_function is retried (delayed, attempts >= 2) while other services of its target commit"

log_has "$mark" 'gridha worker: submit function failed: the in-database ledger is down for fl1'
check $? "functions: the worker logs the submit function's failure"

psql_db -c "DELETE FROM w_fail" >/dev/null
wait_until 30 sql_is 5 "SELECT count(*) FROM gridha.batches WHERE service_id = 'fl1' AND status = 'committed'"
check $? "functions: once the function works again, the retried service commits all its batches"

sql_is "fl1-b1,fl1-b2,fl1-b3,fl1-b4,fl1-b5" "SELECT string_agg(bid, ',' ORDER BY pos) FROM w_applied WHERE sid = 'fl1'"
check $? "functions: the retried service's batches were applied in enqueue order"

# ---------------------------------------------------------------------------
# orphan: a report that fails with an error (not a refusal) leaves its batch
# submitting under the worker's own live claim; the worker must find it and
# report it delayed, or the service would wait for as long as it renews

mark=$(log_mark)
psql_db >/dev/null <<'EOF'
CREATE SEQUENCE w_report_fail;
-- gridha's functions pin search_path: the trigger brings its own
CREATE FUNCTION w_fail_report() RETURNS trigger LANGUAGE plpgsql SET search_path = public AS $$
BEGIN
    -- a sequence, not a table: the failure rolls everything else back
    IF NEW.batch_id = 'o1-b1' AND NEW.status = 'pending' AND nextval('w_report_fail') = 1 THEN
        RAISE EXCEPTION 'injected failure of the report of %', NEW.batch_id;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER w_fail_report BEFORE UPDATE ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION w_fail_report();
SELECT gridha.enqueue('o1', 'o1-b' || b, '\x0b') FROM generate_series(1, 3) b;
EOF
wait_until 30 sql_is "committed,committed,committed" \
	"SELECT string_agg(status::text, ',' ORDER BY seq) FROM gridha.batches WHERE service_id = 'o1'"
check $? "orphan: after its report failed, o1-b1 is handed out again and o1 commits all 3 batches"
psql_db -c "SELECT batch_id, status, attempts FROM gridha.batches WHERE service_id = 'o1' ORDER BY seq" | diag
log_has "$mark" 'injected failure of the report of o1-b1' &&
	log_has "$mark" 'batch "o1-b1" of service "o1" was submitting but not in hand: reported delayed'
check $? "orphan: the worker logged the failed report and that it reported o1-b1 delayed"
# The recovery hands o1-b1 out once more; a POST of that hand-out that
# outlives the suite's 1 s gridha.submit_timeout (a loaded machine) is
# reported delayed and handed out again, as any timed-out POST is. So the
# exact count is of the orphan reports, and attempts is at least 2.
grep -F '"o1-b1"' "$WORK/ledger.log" | diag
sql_is t "SELECT attempts >= 2 FROM gridha.batches WHERE batch_id = 'o1-b1'" &&
	[ "$(log_since "$mark" | grep -c -F 'batch "o1-b1" of service "o1" was submitting but not in hand')" = 1 ] &&
	[ "$(posts accepted '^o1$' | grep -c -x 'o1-b1')" = 1 ]
check $? "orphan: o1-b1 was reported delayed as an orphan exactly once, handed out again (attempts >= 2) and accepted by the ledger once"
psql_db -c "DROP TRIGGER w_fail_report ON gridha.batches" >/dev/null

# ---------------------------------------------------------------------------
# unknown: heads pending at a ledger that never got them (an external
# instance reported them accepted without POSTing them, then released its
# claims). The workers that take them over ask the ledger, hear UNKNOWN and
# POST each batch again: the answer applied, the batch is not asked about
# again while that answer waits to be applied. A second question, asked
# before the first answer was applied, reaches the ledger before the new
# POST and is answered UNKNOWN as well; applied after the batch was handed
# out anew, it would move that hand-out to unknown and have the batch
# POSTed twice at once. The workers look at their pending batches every
# 10 ms for this step (gridha.monitor_interval), so that an answer often
# comes back in a cycle whose monitor round is due. A trigger records every
# status change of these batches: a worker moves a batch to unknown only
# from pending, never from submitting.

psql_db >/dev/null <<'EOF'
CREATE TABLE w_moves (batch_id text, old_status text, new_status text, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION w_record_move() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = public AS $$
BEGIN
    IF NEW.batch_id LIKE 'uk%' AND NEW.status::text IS DISTINCT FROM OLD.status::text THEN
        INSERT INTO public.w_moves (batch_id, old_status, new_status) VALUES (NEW.batch_id, OLD.status, NEW.status);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER w_record_move AFTER UPDATE ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION w_record_move();
EOF
psql_db -c "ALTER SYSTEM SET gridha.monitor_interval = '10ms'" -c "SELECT pg_reload_conf()" >/dev/null
psql_db >"$WORK/unknown-e.out" 2>&1 <<'EOF'
SET gridha.balance_claims = off;
SELECT gridha.register_instance('uk-e') AS e \gset
BEGIN;
SELECT count(gridha.enqueue(s, s || '-b1', '\x0c'))
  FROM (SELECT 'uk' || lpad(i::text, 2, '0') AS s FROM generate_series(1, 10) i) x;
SELECT count(*) FROM gridha.acquire_claims(:'e');
CREATE TEMP TABLE h AS SELECT * FROM gridha.next_batches(:'e', 100);
COMMIT;
SELECT count(gridha.report_submission(:'e', service_id, batch_id, epoch, 'accepted')) FROM h;
SELECT gridha.release_claims(:'e');
SELECT string_agg(batch_id, ',' ORDER BY batch_id) FROM h;
EOF
[ "$(tail -n 1 "$WORK/unknown-e.out")" = "uk01-b1,uk02-b1,uk03-b1,uk04-b1,uk05-b1,uk06-b1,uk07-b1,uk08-b1,uk09-b1,uk10-b1" ]
check $? "unknown: an external instance left the heads of 10 new services pending without POSTing them, and released their claims"
diag <"$WORK/unknown-e.out"
wait_until 30 sql_is 10 "SELECT count(*) FROM gridha.batches WHERE batch_id LIKE 'uk%' AND status = 'committed'"
check $? "unknown: the workers took the services over and every batch is committed"
psql_db -c "ALTER SYSTEM RESET gridha.monitor_interval" -c "SELECT pg_reload_conf()" >/dev/null
sql_is "10|0" "SELECT count(*) FILTER (WHERE old_status = 'pending') || '|' || count(*) FILTER (WHERE old_status <> 'pending')
               FROM w_moves WHERE new_status = 'unknown'" &&
	[ "$(posts accepted '^uk[0-9]+$' | sort -u | wc -l)" = 10 ]
rc=$?
check $rc "unknown: each batch went to unknown once, from pending, never from submitting (a hand-out the ledger had not answered for), and the ledger accepted all 10"
if [ "$rc" -ne 0 ]; then
	psql_db -c "SELECT batch_id, old_status, new_status, at FROM w_moves ORDER BY at" | diag
	grep -F '"uk' "$WORK/ledger.log" | grep -F '"post"' | diag
fi
psql_db -c "DROP TRIGGER w_record_move ON gridha.batches" >/dev/null

# ---------------------------------------------------------------------------
# an external client and the workers share services

CID=$(psql_db -c "SELECT gen_random_uuid()")
"$CLIENT" --dsn "dbname=$DB" --instance-id "$CID" --label shared-client \
	--idle-sleep-ms 100 --monitor-interval-ms 200 --submit-timeout-ms 10000 \
	--max-runtime-s 120 --log "$WORK/client.log" 2>"$WORK/client.err" &
CLIENT_PID=$!
PIDS+=("$CLIENT_PID")

# The client joins two workers that hold every idle service: it takes none
# of their idle claims (they stay where they are), but its share of the
# work: 8 new services, free, 10 batches each, shared by the three.
client_live() {
	sql_is t "SELECT soft_expiry > now() FROM gridha.instances WHERE instance_id = '$CID'"
}
if wait_until 30 client_live; then
	printf 'sh%s\n' 01 02 03 04 05 06 07 08 >"$WORK/shared.txt"
	SHARED=$(sed "s/.*/'&'/" "$WORK/shared.txt" | paste -sd,)
	psql_db >/dev/null <<EOF
SELECT gridha.enqueue(s, format('sh-%s-b%s', s, lpad(b::text, 2, '0')), '\x5a')
  FROM generate_series(1, 10) b, unnest(ARRAY[$SHARED]) s
 ORDER BY b, s;
EOF
	n_sh=$(($(wc -l <"$WORK/shared.txt") * 10))
	wait_until 60 sql_is "$n_sh" "SELECT count(*) FROM gridha.batches WHERE batch_id ~ '^sh-' AND status = 'committed'"
	check $? "client: all $n_sh batches of services shared by the client and the workers are committed"
	psql_db -c "SELECT coalesce(i.kind, '?'), count(*) FROM gridha.batches b
	            LEFT JOIN gridha.instances i USING (instance_id)
	            WHERE b.batch_id ~ '^sh-' GROUP BY 1" | diag

	sql_is t "SELECT count(*) FILTER (WHERE b.instance_id = '$CID') > 0
	             AND count(*) FILTER (WHERE i.kind = 'worker') > 0
	          FROM gridha.batches b JOIN gridha.instances i USING (instance_id)
	          WHERE b.batch_id ~ '^sh-'" &&
		grep -q '"event":"handout"' "$WORK/client.log"
	check $? "client: both the client's instance and a worker instance handed batches out"

	order_kept shared "service_id IN ($SHARED)"
	check $? "client: enqueue order kept at the ledger for the shared services"

	# only this step's batches: a shared service may be one an earlier step
	# used (o1 was sent twice on purpose)
	dups=$(duplicates_of "^($(paste -sd'|' "$WORK/shared.txt"))\$" | grep '^sh-')
	[ -z "$dups" ]
	check $? "client: no batch of the shared services was applied twice"
	if [ -n "$dups" ]; then
		# each duplicate's story: the ledger's posts, the client's events
		echo "$dups" | while read -r bid _; do
			grep -F "\"$bid\"" "$WORK/ledger.log" | diag
			grep -F "\"$bid\"" "$WORK/client.log" | diag
			psql_db -c "SELECT batch_id, status, attempts, instance_id, epoch FROM gridha.batches
			            WHERE batch_id = '$bid'" | diag
		done
	fi
else
	not_ok "client: the client registered and took a lease"
	tail -n 20 "$WORK/client.err" | diag
fi
kill -TERM "$CLIENT_PID" 2>/dev/null
crc=124
deadline=$((SECONDS + 20))
while [ "$SECONDS" -lt "$deadline" ] && kill -0 "$CLIENT_PID" 2>/dev/null; do
	sleep 0.2
done
if ! kill -0 "$CLIENT_PID" 2>/dev/null; then
	wait "$CLIENT_PID"
	crc=$?
fi
[ "$crc" -eq 0 ]
check $? "client: SIGTERM stops it with exit status 0 (got $crc)"

# ---------------------------------------------------------------------------
# wake-up: an enqueue is handed out at once even with a 60 s naptime

# Worker settings are reloadable: rewrite the per-start settings and reload.
# shellcheck disable=SC2086 # the options are words
gridha_write_extra_conf $SUITE_CLUSTER_OPTS $WORKER_OPTS gridha.naptime=60s gridha.monitor_interval=60s
psql_db -c "SELECT pg_reload_conf()" >/dev/null

# workers_asleep: both workers idle and unchanged over 1.5 s. On the old
# settings an idle worker goes round every 200 ms, so a worker that has not
# taken the new ones yet would show a newer state_since.
worker_states() {
	psql_db -c "SELECT string_agg(pid || ' ' || state || ' ' || state_since, ',' ORDER BY pid)
	            FROM gridha.workers"
}
workers_asleep() {
	local a b
	a=$(worker_states)
	sleep 1.5
	b=$(worker_states)
	[ -n "$a" ] && [ "$a" = "$b" ] && [ "$(grep -o ' idle ' <<<"$a" | wc -l)" -eq 2 ]
}
if wait_until 30 workers_asleep; then
	psql_db -c "SELECT gridha.enqueue('w1', 'w1-b1', '\\x77', 'ff')" >/dev/null
	t0=$SECONDS
	wait_until 20 sql_is committed "SELECT status FROM gridha.batches WHERE batch_id = 'w1-b1'"
	check $? "wake-up: with naptime 60 s, an enqueued batch is committed within 20 s ($((SECONDS - t0)) s)"
else
	not_ok "wake-up: the workers settled into their 60 s sleep"
	worker_states | diag
fi
# shellcheck disable=SC2086 # the options are words
gridha_write_extra_conf $SUITE_CLUSTER_OPTS $WORKER_OPTS
psql_db -c "SELECT pg_reload_conf()" >/dev/null

sql_is "w1-b1" "SELECT batch_id FROM gridha.batches WHERE service_id = 'w1' AND status = 'committed'" &&
	[ "$(posts accepted '^w1$')" = "w1-b1" ]
check $? "wake-up: the fire-and-forget target got the POST once and the batch was reported committed"

# ---------------------------------------------------------------------------
# crash: kill -9 of a worker, the postmaster restarts everything

OLD_IDS=$(psql_db -c "SELECT string_agg(quote_literal(instance_id::text), ',') FROM gridha.instances WHERE kind = 'worker'")
VICTIM=$(psql_db -c "SELECT pid FROM gridha.workers ORDER BY label LIMIT 1")
mark=$(log_mark)
kill -9 "$VICTIM"
new_workers_up() {
	sql_is "2|2" "SELECT count(*) FILTER (WHERE instance_id::text NOT IN ($OLD_IDS)), count(*)
	              FROM gridha.workers"
}
wait_until 60 new_workers_up
check $? "crash: after kill -9 of worker pid $VICTIM, gridha.workers shows 2 workers with new instance ids"
psql_db -c "SELECT instance_id, label, pid, state FROM gridha.workers" | diag

log_has "$mark" "\\(PID $VICTIM\\) was terminated by signal 9"
check $? "crash: the postmaster saw the worker die and restarted the backends"

sql_is 2 "SELECT count(*) FROM gridha.workers w JOIN gridha.instances i USING (instance_id)
          WHERE i.kind = 'worker' AND w.pid <> $VICTIM"
check $? "crash: the restarted workers are new gridha.instances rows of kind 'worker'"

# ---------------------------------------------------------------------------
# SIGTERM while batches flow

psql_db >/dev/null <<'EOF'
SELECT gridha.enqueue(format('t%s', lpad(s::text, 2, '0')),
                      format('t%s-b%s', lpad(s::text, 2, '0'), lpad(b::text, 2, '0')), '\x74',
                      CASE WHEN s % 2 = 0 THEN 'splinter' END)
  FROM generate_series(1, 20) b, generate_series(1, 8) s
 ORDER BY b, s;
EOF
# Some work done, much left.
wait_until 30 sql_is t "SELECT count(*) BETWEEN 10 AND 100 FROM gridha.batches
                        WHERE service_id ~ '^t' AND status = 'committed'"
# The victim: a worker holding t claims; what it has in hand, read in the
# same statement that signals it.
read -r VICTIM_ID VICTIM_PID VICTIM_LABEL <<<"$(psql_db -F ' ' -c "SELECT w.instance_id, w.pid, replace(w.label, ' ', '_')
	FROM gridha.workers w JOIN gridha.service_claims c ON c.claimant = w.instance_id
	WHERE c.service_id ~ '^t' GROUP BY 1, 2, 3 ORDER BY count(*) DESC LIMIT 1")"
VICTIM_LABEL=${VICTIM_LABEL//_/ }
mark=$(log_mark)
# The victim's row is read first (a materialized CTE), then only its pid is
# signalled: a plain WHERE pid = ... AND pg_terminate_backend(pid) may run
# the function on every row of the view.
IN_HAND=$(psql_db -c "WITH v AS MATERIALIZED (
                          SELECT w.pid, CASE WHEN w.state IN ('submitting', 'reporting') THEN w.batch_id END AS b
                            FROM gridha.workers w WHERE w.pid = $VICTIM_PID)
                      SELECT v.b FROM v WHERE pg_terminate_backend(v.pid)")
echo "# victim $VICTIM_ID (pid $VICTIM_PID, $VICTIM_LABEL), batch in hand: '${IN_HAND}'"

wait_until 20 sql_is 0 "SELECT count(*) FROM gridha.workers WHERE pid = $VICTIM_PID"
check $? "sigterm: the terminated worker exits (gone from gridha.workers)"
gone_at=$SECONDS

sql_is 0 "SELECT count(*) FROM gridha.service_claims WHERE claimant = '$VICTIM_ID'"
check $? "sigterm: its instance holds no claims afterwards"

wait_until 10 log_has "$mark" "gridha worker \"$VICTIM_LABEL\" \\(instance $VICTIM_ID\\) stopped and released its claims"
check $? "sigterm: it logged that it stopped and released its claims"

wait_until 90 sql_is 160 "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^t' AND status = 'committed'"
check $? "sigterm: the workers commit all 160 batches"
psql_db -c "SELECT status, count(*) FROM gridha.batches WHERE service_id ~ '^t' GROUP BY 1" | diag

order_kept sigterm "service_id ~ '^t'"
check $? "sigterm: enqueue order kept at the ledger"

duplicates_of '^t' >"$WORK/sigterm-dups.txt"
diag <"$WORK/sigterm-dups.txt"
if [ ! -s "$WORK/sigterm-dups.txt" ]; then
	ok "sigterm: no batch applied twice (the batch in hand, '${IN_HAND}', was finished and reported)"
elif [ -n "$IN_HAND" ] && [ "$(cat "$WORK/sigterm-dups.txt")" = "$IN_HAND 1" ]; then
	ok "sigterm: only the batch in hand ($IN_HAND) was sent again, once"
else
	not_ok "sigterm: duplicates only of the batch in hand ('${IN_HAND}'), at most once"
fi

# Started again: a worker ended by anyone but an administrator's
# stop_worker (or a server shutdown) exits with 1, and the postmaster starts
# it again after 5 s, as a new instance.
wait_until 30 sql_is 2 "SELECT count(*) FROM gridha.workers WHERE instance_id IS NOT NULL
                        AND instance_id <> '$VICTIM_ID' AND pid <> $VICTIM_PID" &&
	log_has "$mark" "gridha worker \"$VICTIM_LABEL\" started as instance"
check $? "sigterm: the worker is started again as a new instance ($((SECONDS - gone_at)) s after its exit)"

[ "$FAILED" -eq 0 ]
