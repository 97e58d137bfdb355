#!/usr/bin/env bash
# test/suites/15_upgrade.sh: versioned upgrades (DESIGN.md section 9): a
# database whose gridha SQL is 1.0 (and one on 1.1), filled and served by
# the last library that served those (OLD_REV, built from this repository
# into a copy of the installation: the current library serves only 1.2 and
# 1.3, issue 40), is refused by the current library with RG022 until
# ALTER EXTENSION gridha UPDATE, upgraded to the default version
# (gridha.control), loses nothing, and ends equal to a fresh install.
#
# Steps, in the order they run:
#
#   0. old      OLD_REV built into a copy of the installation
#               (gridha_build_commit); the cluster restarts on the copy's
#               binaries, which load that library. Steps a, b and h's fill
#               run on it; the cluster restarts on the current library
#               before c.
#   a. fill     database gridha_upgrade, CREATE EXTENSION gridha VERSION
#               '1.0', filled through the 1.0 API (test/dba/upgrade_fill.sql):
#               batches in every status, every claim state (free, held,
#               slow, soft and hard expired), a changed 'default' target, a
#               rate-limited target, a leader lease and a maintenance tick,
#               an id sequence with ids reserved, and 100,000 services
#               claimed by three instances (two balanced, one not), some
#               heads in flight. A snapshot of everything that must survive
#               goes to the scratch schema upgrade_scratch
#               (test/dba/upgrade_state.sql).
#   b. 1.0 SQL  first, before the fill, a queuer cycle through SQL on 1.0
#               (next_batch, verify_batch, report_submission,
#               pending_batches, report_status); then the cluster restarts
#               with two background workers serving the database and a
#               target at the test ledger: they commit what is enqueued on
#               it while extversion is still 1.0, in enqueue order, and
#               touch nothing else.
#   c. upgrade  a second wave of batches on the workers' services, part of
#               it in hand when the cluster restarts on the current library
#               (workers on): on 1.0 SQL it refuses the API (RG022, naming
#               ALTER EXTENSION gridha UPDATE), the workers wait (saying so
#               in the server log), and nothing changes. ALTER EXTENSION gridha UPDATE
#               with the workers starting again. After it:
#               extversion 1.1; no claim, epoch or batch lost or changed
#               (the snapshot taken just before, in-flight batches
#               included); every instance's held = its claims; every
#               instance holding claims has a lease; gridha.claims shows
#               every claim in the state it was in; the idle services'
#               counters are settled into gridha.target_totals and each
#               target's counters in gridha.metrics equal the sums over its
#               services; the workers, now on
#               1.1, commit the second wave in order and keep the counts.
#               Then the cluster restarts without workers.
#   e. schema   the extension's objects equal those of a fresh 1.1 install
#               (CREATE EXTENSION gridha in gridha_upgrade_fresh):
#               pg_dump --schema-only --binary-upgrade of both, less the
#               lines that carry OIDs (test/dba/schema_filter.py);
#               extconfig/extcondition by table name, pg_init_privs of the
#               members by name and aclitems, the member list
#               (test/dba/extension_catalog.sql); and a self-test: a comment
#               planted in the fresh copy makes the comparison fail
#   h. from 1.1 a database on 1.1, filled the same way (by the old
#               library), refused by the current library (RG022) until it
#               is upgraded while a client cycles through it (next_batch,
#               report accepted, report committed): its 40 batches committed in order,
#               nothing else changed, gridha.metrics' counters equal the
#               sums over the services, the schema equal a fresh install's
#   g. locks    in a third 1.0 database: a transaction that reads
#               gridha.instances, waits until the upgrade waits for a lock
#               and then reads gridha.targets (which the upgrade changes
#               first) commits, and so does the upgrade (the 1.0 -> 1.1
#               script of before lost that deadlock); with the caller's
#               lock_timeout of 1 s against a transaction that holds
#               gridha.instances, the upgrade fails with 55P03 and leaves
#               the database on 1.0
#   k. 1.2 SQL  a database on 1.2 (issue 42.1): the lease, maintenance and
#               ID sequence calls answer as 1.2's library answered them,
#               and the cycle works; after ALTER EXTENSION gridha UPDATE in
#               the same session they answer from the 1.3 script
#   d. suites   pg_regress (the Makefile's REGRESS list and REGRESS_OPTS:
#               test/sql and expected/)
#               with --use-existing and pg_prove over test/pgtap/*.sql, both
#               in the upgraded database; one TAP line per regress test and
#               per pgTAP file. They run after e, since they create objects
#               of their own (the pgtap extension, test tables), and on a
#               database emptied to what CREATE EXTENSION leaves: they are
#               written for a fresh database (api.sql reads
#               gridha.instances before it truncates anything, 01_shape
#               asserts the 'default' target is untouched), with the
#               database settings pg_regress gives a database it creates.
#   f. the databases are dropped at the end (kept when GRIDHA_KEEP=1).
#
# Words: "scratch" is upgrade_scratch, the test's own schema (which instance
# is which, what each batch should end as, the snapshots); "wave" is a set of
# batches enqueued on the workers' services at once. Claim timings are
# database settings here (session liveness off, half-hour expiries), so the
# filled claims stay as they were for the whole suite; a state that needs
# the past is made with an UPDATE, never by sleeping. JIT is off in the
# database too: compiling the plans of the comparisons' scans of 100,000
# rows costs more than running them. Every wait is a bounded poll.
#
# The cluster is left with the phase 2 settings; everything this suite
# starts it stops, on any exit.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-upgrade.XXXXXX)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
# The version a plain CREATE EXTENSION installs, and ALTER ... UPDATE reaches
DEFAULT_VERSION=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$REPO/gridha.control")
DBA=$REPO/test/dba
CHECK_LOG=$REPO/test/dlt/check_log.py
DB=gridha_upgrade
FRESH=gridha_upgrade_fresh
FAILED=0
PIDS=()
RESTARTED=0
# The last library that served gridha SQL 1.0 and 1.1 (issue 40 ended it)
OLD_REV=61532db

# The workers of step b and c (balance off: the filled instances count as
# live for half an hour, and a worker must not wait for its fair share of
# the ledger's few services behind them).
WORKER_OPTS="gridha.workers=2 gridha.database=$DB gridha.naptime=200ms
	gridha.monitor_interval=200ms gridha.balance_claims=off"

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"

# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}

# sql_is EXPECTED SQL: the query's output in $DB is exactly EXPECTED.
sql_is() {
	[ "$(psql_db -c "$2" 2>/dev/null)" = "$1" ]
}

# check_is EXPECTED WHAT SQL: one TAP line; on failure what SQL printed.
check_is() {
	local got
	got=$(psql_db -c "$3" 2>&1)
	if [ "$got" = "$1" ]; then
		ok "$2"
	else
		not_ok "$2"
		printf 'expected: %s\ngot: %s\n' "$1" "$got" | head -n 30 | diag
	fi
}

cleanup() {
	suite_stop_pids
	suite_restore_cluster
	if [ "${GRIDHA_KEEP:-0}" = 1 ]; then
		echo "# kept the databases $DB and $FRESH (GRIDHA_KEEP=1)"
	else
		psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB" \
			-c "DROP DATABASE IF EXISTS $FRESH" -c "DROP DATABASE IF EXISTS gridha_upgrade_locks" >/dev/null 2>&1
	fi
}
trap cleanup EXIT

if [ -z "${PGDATA:-}" ] || [ -z "${GRIDHA_PGLOG:-}" ]; then
	not_ok "the suite runs inside test/run.sh (PGDATA and GRIDHA_PGLOG are set)"
	exit 1
fi

# ---------------------------------------------------------------------------
# 0. the old library

start=$SECONDS
if OLD_CONFIG=$(gridha_build_commit "$OLD_REV" "$WORK/old" 2>"$WORK/old-build.err"); then
	ok "old library: $OLD_REV built into a copy of the installation ($((SECONDS - start)) s)"
else
	not_ok "old library: $OLD_REV built into a copy of the installation"
	diag <"$WORK/old-build.err"
	exit 1
fi
OLD_BINDIR=$(dirname "$OLD_CONFIG")
RESTARTED=1
# shellcheck disable=SC2086 # the options are words
PG_BINDIR=$OLD_BINDIR gridha_cluster_restart $SUITE_CLUSTER_OPTS
check $? "old library: the cluster restarted on the copy's binaries"

# refused_in DB SQL: the statement fails in DB with RG022, whose hint names
# ALTER EXTENSION gridha UPDATE.
refused_in() {
	local out
	out=$(psql -X -q -A -t -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -d "$1" -c "$2" 2>&1)
	if [ $? -ne 0 ] && grep -q 'ERROR:  RG022: ' <<<"$out" &&
		grep -q 'HINT:  .*ALTER EXTENSION gridha UPDATE' <<<"$out"; then
		return 0
	fi
	echo "$out" | head -n 5 | diag
	return 1
}

H=${DB}_h
psql_h() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$H" "$@"
}
# prepare_h: h's database on 1.1, filled, with the client's instance L
# holding the live service; run on the old library (before c).
prepare_h() {
psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $H" \
	-c "CREATE DATABASE $H" >/dev/null &&
	psql -X -q -d postgres -c "ALTER DATABASE $H SET gridha.session_liveness = off" \
		-c "ALTER DATABASE $H SET gridha.soft_expiry = '30min'" \
		-c "ALTER DATABASE $H SET gridha.hard_expiry = '60min'" -c "ALTER DATABASE $H SET jit = off" >/dev/null &&
	psql_h >/dev/null <<'EOF'
CREATE EXTENSION gridha VERSION '1.1';
CREATE SCHEMA upgrade_scratch;
CREATE TABLE upgrade_scratch.instance (name text PRIMARY KEY, id uuid NOT NULL);
INSERT INTO upgrade_scratch.instance VALUES ('S', gridha.register_instance('S'));
EOF
check $? "from 1.1: a database on 1.1 ($H)"
if psql_h -f "$DBA/upgrade_fill.sql" >"$WORK/fill-h.out" 2>&1 &&
	psql_h -f "$DBA/upgrade_state.sql" >>"$WORK/fill-h.out" 2>&1; then
	ok "from 1.1: filled as the 1.0 database was (every batch status, every claim state, 100,000 services)"
else
	not_ok "from 1.1: filled as the 1.0 database was"
	tail -n 20 "$WORK/fill-h.out" | diag
fi
# The client L holds the live service alone: its claim and lease are set
# by hand, and its claim cycle is not due for minutes, so it takes nothing
# else (the fill left expired claims any cycle would take over).
psql -X -q -d postgres -c "ALTER DATABASE $H SET gridha.renew_interval = '5min'" >/dev/null
L=$(psql_h -c "SELECT gridha.register_instance('L')")
psql_h >/dev/null <<EOF
SELECT gridha.enqueue('h-live', 'h-live-b' || lpad(n::text, 2, '0'), '\x01') FROM generate_series(1, 40) n;
UPDATE gridha.service_claims SET claimant = '$L', epoch = 1 WHERE service_id = 'h-live';
UPDATE gridha.instances SET last_seen_at = now(), held = 1,
       soft_expiry = now() + interval '30 minutes', hard_expiry = now() + interval '60 minutes'
 WHERE instance_id = '$L';
SELECT upgrade_scratch.snapshot('pre11');
EOF
}

# ---------------------------------------------------------------------------
# a. a database on 1.0

start_ledger --commit-delay 0.1 --max-lifetime 900

psql -X -q -d postgres -c "SET client_min_messages = warning" \
	-c "DROP DATABASE IF EXISTS $DB" -c "DROP DATABASE IF EXISTS $FRESH" \
	-c "CREATE DATABASE $DB" >/dev/null || exit 1
# Claim timings of this database (see the header)
psql -X -q -d postgres >/dev/null <<EOF || exit 1
ALTER DATABASE $DB SET gridha.session_liveness = off;
ALTER DATABASE $DB SET gridha.soft_expiry = '30min';
ALTER DATABASE $DB SET gridha.hard_expiry = '60min';
ALTER DATABASE $DB SET jit = off;
EOF
psql_db >/dev/null <<'EOF' || exit 1
CREATE EXTENSION gridha VERSION '1.0';
CREATE SCHEMA upgrade_scratch;
CREATE TABLE upgrade_scratch.instance (name text PRIMARY KEY, id uuid NOT NULL);
INSERT INTO upgrade_scratch.instance VALUES ('S', gridha.register_instance('S'));
EOF

check_is "1.0|$DEFAULT_VERSION" "CREATE EXTENSION gridha VERSION '1.0' installs 1.0 while the library's default is $DEFAULT_VERSION" \
	"SELECT e.extversion || '|' || a.default_version FROM pg_extension e
	   JOIN pg_available_extensions a ON a.name = e.extname WHERE e.extname = 'gridha'"

S=$(psql_db -c "SELECT id FROM upgrade_scratch.instance WHERE name = 'S'")

# b, first half: one queuer cycle through SQL on 1.0, each call its own
# session, as a 1.0 client makes them.
psql_db -c "SELECT gridha.enqueue('q1', 'q1-b' || n, '\\x0a0b', NULL) FROM generate_series(1, 2) n" >/dev/null
check_is "q1|1" "1.0 SQL: acquire_claims takes the new service with epoch 1" \
	"SELECT service_id || '|' || epoch FROM gridha.acquire_claims('$S')"
check_is "q1|q1-b1|\\x0a0b|1|1" "1.0 SQL: next_batch hands out the head with its payload, epoch and attempt" \
	"SELECT concat_ws('|', service_id, batch_id, payload, epoch, attempt) FROM gridha.next_batch('$S')"
check_is "true|submitting" "1.0 SQL: verify_batch says the batch is still this instance's; it is submitting" \
	"SELECT gridha.verify_batch('$S', 'q1', 'q1-b1', 1) || '|' || status FROM gridha.batches WHERE batch_id = 'q1-b1'"
check_is "pending" "1.0 SQL: report_submission accepted -> pending" \
	"SELECT gridha.report_submission('$S', 'q1', 'q1-b1', 1, 'accepted')"
check_is "q1-b1|pending|1" "1.0 SQL: pending_batches lists it for the monitor" \
	"SELECT concat_ws('|', batch_id, status, epoch) FROM gridha.pending_batches('$S')"
check_is "committed" "1.0 SQL: report_status COMMITTED -> committed" \
	"SELECT gridha.report_status('$S', 'q1', 'q1-b1', 1, 'COMMITTED')"
check_is "q1-b2|1" "1.0 SQL: the next batch of the service follows" \
	"SELECT batch_id || '|' || attempt FROM gridha.next_batch('$S')"
check_is "pending" "1.0 SQL: ... and is reported accepted (left pending for the upgrade)" \
	"SELECT gridha.report_submission('$S', 'q1', 'q1-b2', 1, 'accepted')"
check_is "1.0" "1.0 SQL: the cycle ran with the database's SQL still on 1.0" \
	"SELECT extversion FROM pg_extension WHERE extname = 'gridha'"

# a: the fill
start=$SECONDS
if psql_db -f "$DBA/upgrade_fill.sql" >"$WORK/fill.out" 2>&1 &&
	psql_db -f "$DBA/upgrade_state.sql" >>"$WORK/fill.out" 2>&1; then
	ok "fill: batches, claims, targets, lease, tick and ids made through the 1.0 API ($((SECONDS - start)) s)"
else
	not_ok "fill: batches, claims, targets, lease, tick and ids made through the 1.0 API"
	tail -n 20 "$WORK/fill.out" | diag
	exit 1
fi
tail -n 1 "$WORK/fill.out" | diag

check_is "queued,submitting,pending,valid,delayed,unknown,committed,invalid" \
	"fill: batches in every status" \
	"SELECT string_agg(s::text, ',' ORDER BY s) FROM (SELECT DISTINCT status s FROM gridha.batches) x"
check_is "free,hard_expired,held,slow,soft_expired" "fill: claims in every state of gridha.claims" \
	"SELECT string_agg(state, ',' ORDER BY state) FROM (SELECT DISTINCT state FROM gridha.claims) x"
check_is "true|true" "fill: 100,000 bulk services, all claimed, some heads in flight" \
	"SELECT (count(*) FILTER (WHERE service_id LIKE 'bulk-%' AND claimant IS NOT NULL) = 100000)::text
	        || '|' || (count(*) FILTER (WHERE service_id LIKE 'bulk-%' AND in_flight) >= 300)::text
	   FROM gridha.service_claims"
check_is "t|t|t|t" "fill: default target changed, rate state of 'limited', a leader lease with a tick, ids reserved" \
	"SELECT concat_ws('|',
	        (SELECT rate_burst = 7 AND status_url IS NOT NULL FROM gridha.targets WHERE target = 'default'),
	        (SELECT slots_taken = 2 FROM gridha.target_rate_state WHERE target = 'limited'),
	        (SELECT count(*) = 1 FROM gridha.leases l JOIN gridha.maintenance_ticks m USING (role, term)),
	        (SELECT high_water > 0 FROM gridha.id_sequences WHERE name = 'orders')
	          AND (SELECT count(*) = 5 FROM upgrade_scratch.reserved))"
psql_db -c "SELECT upgrade_scratch.snapshot('filled')" >/dev/null

# ---------------------------------------------------------------------------
# b, second half: background workers on 1.0 SQL

psql_db >/dev/null <<EOF || exit 1
INSERT INTO gridha.targets (target, submit_url, status_url)
VALUES ('ledger', '$LEDGER/batches/{service_id}/{batch_id}', '$LEDGER/batch_statuses?id={batch_ids}');
EOF

# The old library's workers read columns of gridha.service_claims that
# gridha_submitter may not read (fixed in 1.3: 5caea49): while it runs,
# their role may read every table, as its users' roles had to.
psql -X -q -d postgres -c "GRANT pg_read_all_data TO $SUITE_WORKER_ROLE" >/dev/null
RESTARTED=1
# shellcheck disable=SC2086 # the options are words
if ! PG_BINDIR=$OLD_BINDIR gridha_cluster_restart $SUITE_CLUSTER_OPTS $WORKER_OPTS; then
	not_ok "the cluster restarted on the old library with gridha.workers = 2 serving $DB"
	exit 1
fi
wait_until 30 sql_is 2 "SELECT count(*) FROM gridha.workers WHERE instance_id IS NOT NULL"
check $? "1.0 SQL: two background workers registered"

# enqueue_wave FROM TO: batches wFROM..wTO of services w-1..w-4 on 'ledger',
# in rounds, so the services' batches interleave in enqueue order.
enqueue_wave() {
	psql_db -c "SELECT gridha.enqueue('w-' || s, format('w-%s-b%s', s, lpad(b::text, 2, '0')),
	                                  convert_to('wave ' || b, 'UTF8'), 'ledger')
	              FROM generate_series($1, $2) b, generate_series(1, 4) s ORDER BY b, s" >/dev/null
}

# order_kept NAME: every batch of the w-* services arrived at the ledger, in
# enqueue order, one in flight per service (check_log.py).
order_kept() {
	local exp=$WORK/expected-$1.tsv out=$WORK/check-$1.out
	psql_db -F $'\t' -c "SELECT service_id, batch_id FROM gridha.batches
	                     WHERE service_id LIKE 'w-%' ORDER BY service_id, seq" >"$exp" || return 1
	if ! python3 "$CHECK_LOG" --expected "$exp" --require-all --one-in-flight \
			"$WORK/ledger.log" >"$out" 2>&1; then
		grep -A 10 '^violations' "$out" | diag
		return 1
	fi
}

enqueue_wave 1 3
wait_until 60 sql_is 12 "SELECT count(*) FROM gridha.batches WHERE service_id LIKE 'w-%' AND status = 'committed'"
check $? "1.0 SQL: the workers commit the 12 batches enqueued on the ledger's target"
psql_db -c "SELECT status, count(*) FROM gridha.batches WHERE service_id LIKE 'w-%' GROUP BY 1" | diag
check_is "1.0" "1.0 SQL: ... while extversion is still 1.0" \
	"SELECT extversion FROM pg_extension WHERE extname = 'gridha'"
order_kept wave1
check $? "1.0 SQL: the workers' batches arrived at the ledger in enqueue order, one in flight per service"

# What the workers may change: their own instances, the ledger target and
# its services; nothing of the filled state.
check_is "0" "1.0 SQL: the workers changed nothing of the filled state" \
	"SELECT count(*) FROM upgrade_scratch.changed('filled', NULL, '^(w-|ledger$)')
	  WHERE kind <> 'count' AND NOT (change = 'new' AND kind = 'instance' AND now_val->>'kind' = 'worker')"

# h's database on 1.1 is filled by the old library too (see h)
prepare_h

# ---------------------------------------------------------------------------
# c. the current library on 1.0 SQL, then the upgrade

# A second wave on the workers' services, so that some of it is in hand
# when the library changes and the rest waits for the upgrade.
enqueue_wave 4 8
wait_until 30 sql_is t "SELECT count(*) > 0 FROM gridha.batches WHERE service_id LIKE 'w-%' AND batch_id ~ '-b0[4-8]$'
                          AND status <> 'queued'"
mark=$(wc -l <"$GRIDHA_PGLOG")
psql -X -q -d postgres -c "REVOKE pg_read_all_data FROM $SUITE_WORKER_ROLE" >/dev/null
# shellcheck disable=SC2086 # the options are words
if ! gridha_cluster_restart $SUITE_CLUSTER_OPTS $WORKER_OPTS; then
	not_ok "the cluster restarted on the current library with gridha.workers = 2 serving $DB"
	exit 1
fi
refused_in "$DB" "SELECT * FROM gridha.next_batch('$S')"
check $? "current library on 1.0 SQL: the hand-out is refused with RG022, whose hint names ALTER EXTENSION gridha UPDATE"
refused_in "$DB" "SELECT gridha.enqueue('q1', 'q1-b9', '\\x00')" &&
	refused_in "$DB" "SELECT gridha.report_status('$S', 'q1', 'q1-b2', 1, 'committed')" &&
	refused_in "$DB" "SELECT * FROM gridha.pending_batches('$S')"
check $? "current library on 1.0 SQL: enqueue, a report and pending_batches are refused the same way"
workers_wait_logged() {
	tail -n +"$((mark + 1))" "$GRIDHA_PGLOG" | grep -q "gridha worker waits: .*which this library no longer serves"
}
wait_until 30 workers_wait_logged
check $? "current library on 1.0 SQL: the workers wait, saying why once in the server log (RG022)"

psql_db -c "SELECT upgrade_scratch.snapshot('pre')" >/dev/null
# claims held right before, by state
psql_db -c "SELECT val->>'state', count(*) FROM upgrade_scratch.snap WHERE tag = 'pre' AND kind = 'claim'
            GROUP BY 1 ORDER BY 1" | diag

start=$SECONDS
if psql_db -c "ALTER EXTENSION gridha UPDATE" >"$WORK/upgrade.out" 2>&1; then
	ok "ALTER EXTENSION gridha UPDATE runs with the workers starting again ($((SECONDS - start)) s)"
else
	not_ok "ALTER EXTENSION gridha UPDATE runs with the workers starting again"
	diag <"$WORK/upgrade.out"
	# the rest compares an upgraded database: nothing to compare
	exit 1
fi
check_is "$DEFAULT_VERSION" "upgrade: extversion is $DEFAULT_VERSION" "SELECT extversion FROM pg_extension WHERE extname = 'gridha'"

# The second wave's batches are new and the workers' services move on; the
# workers' claims are checked below. Everything else is exactly as before.
SKIP='^(w-[0-9]+$|w-[0-9]+/w-[0-9]+-b0[4-8]$)'
n_cmp=$(psql_db -c "SELECT count(*) FROM upgrade_scratch.snap WHERE tag = 'pre' AND kind <> 'count' AND key !~ '$SKIP'")
# (the workers register again after the upgrade: new worker instances)
changed=$(psql_db -c "SELECT change, kind, key, was_val, now_val FROM upgrade_scratch.changed('pre', NULL, '$SKIP')
                      WHERE kind <> 'count'
                        AND NOT (change = 'new' AND kind = 'instance' AND now_val->>'kind' = 'worker') LIMIT 40" 2>&1)
if [ -z "$changed" ]; then
	ok "upgrade: no claim, epoch, batch, instance, target, lease, tick, id window or rate state lost or changed ($n_cmp rows compared)"
else
	not_ok "upgrade: no claim, epoch, batch, instance, target, lease, tick, id window or rate state lost or changed ($n_cmp rows compared)"
	echo "$changed" | diag
fi

check_is "t" "upgrade: the batches in flight before it (submitting, pending, valid, delayed, unknown) are all still in flight, unchanged" \
	"SELECT count(*) > 350 AND count(*) = count(b.batch_id)
	   FROM upgrade_scratch.snap s
	   LEFT JOIN gridha.batches b ON b.service_id || '/' || b.batch_id = s.key
	        AND b.status::text = s.val->>'status' AND b.epoch = (s.val->>'epoch')::bigint
	        AND b.attempts = (s.val->>'attempts')::int AND md5(b.payload) = s.val->>'payload_md5'
	  WHERE s.tag = 'pre' AND s.kind = 'batch' AND s.key !~ '^w-'
	    AND s.val->>'status' IN ('submitting', 'pending', 'valid', 'delayed', 'unknown')"

check_is "t" "upgrade: no epoch of the workers' services went back" \
	"SELECT bool_and(c.epoch >= (s.val->>'epoch')::bigint) AND count(*) = 4
	   FROM upgrade_scratch.snap s JOIN gridha.service_claims c ON c.service_id = s.key
	  WHERE s.tag = 'pre' AND s.kind = 'claim' AND s.key LIKE 'w-%'"

# (but the workers' services, which the workers take again after it)
check_is "$(psql_db -c "SELECT count(*) FROM upgrade_scratch.snap WHERE tag = 'pre' AND kind = 'claim' AND key NOT LIKE 'w-%'")" \
	"upgrade: gridha.claims shows every claim in the state it was in (held, slow, soft and hard expired, free)" \
	"SELECT count(*) FROM upgrade_scratch.snap s JOIN gridha.claims c ON c.service_id = s.key
	  WHERE s.tag = 'pre' AND s.kind = 'claim' AND s.key NOT LIKE 'w-%' AND c.state = s.val->>'state'"

# held_counts_kept: every instance's held is its number of claims.
HELD_SQL="SELECT count(*) FROM gridha.instances i
           WHERE i.held <> (SELECT count(*) FROM gridha.service_claims c WHERE c.claimant = i.instance_id)"
check_is "0" "upgrade: every instance's held equals the number of claims it holds" "$HELD_SQL"
if ! sql_is 0 "$HELD_SQL"; then
	psql_db -c "SELECT i.label, i.kind, i.held, (SELECT count(*) FROM gridha.service_claims c
	            WHERE c.claimant = i.instance_id) FROM gridha.instances i" | diag
fi
check_is "0|4" "upgrade: every instance holding claims has a lease (soft and hard expiry)" \
	"SELECT count(*) FILTER (WHERE held > 0 AND (soft_expiry IS NULL OR hard_expiry IS NULL))
	        || '|' || count(*) FILTER (WHERE held > 0 AND kind = 'external')
	   FROM gridha.instances"

# METRICS_SQL: whether some idle service was settled, and how many targets'
# counters in gridha.metrics differ from the sums over their service rows
# (what they were before the settled totals): "true|0"
METRICS_SQL="SELECT (SELECT coalesce(sum(settled_committed), 0) > 0 FROM gridha.target_totals) || '|' || count(*)
   FROM gridha.metrics m
   JOIN (SELECT target, sum(tail_seq) AS e, sum(committed_total) AS c, sum(invalid_total) AS i,
                sum(resubmitted_total) AS r
           FROM gridha.service_claims GROUP BY target) s USING (target)
  WHERE m.scope = 'target'
    AND (m.enqueued_total, m.committed_total, m.invalid_total, m.resubmitted_total)
        IS DISTINCT FROM (s.e, s.c, s.i, s.r)"
check_is "true|0" "upgrade: the idle services' counters are settled into target_totals, and each target's counters in gridha.metrics equal the sums over its services" \
	"$METRICS_SQL"

wait_until 60 sql_is 32 "SELECT count(*) FROM gridha.batches WHERE service_id LIKE 'w-%' AND status = 'committed'"
check $? "$DEFAULT_VERSION after the upgrade: the workers commit the second wave (32 batches of the ledger's target committed)"
order_kept wave2
check $? "$DEFAULT_VERSION after the upgrade: each worker service's 8 batches arrived in enqueue order across the upgrade, one in flight"
check_is "0" "$DEFAULT_VERSION after the upgrade: held still equals each instance's claims once the workers have worked on 1.1" "$HELD_SQL"
check_is "t" "$DEFAULT_VERSION after the upgrade: the workers hold the ledger's 4 services under leases" \
	"SELECT count(*) = 4 AND bool_and(i.kind = 'worker' AND i.soft_expiry > now())
	   FROM gridha.service_claims c JOIN gridha.instances i ON i.instance_id = c.claimant
	  WHERE c.service_id LIKE 'w-%'"

# The workers stop; the rest runs on the phase 2 settings.
# shellcheck disable=SC2086 # the options are words
gridha_cluster_restart $SUITE_CLUSTER_OPTS
check $? "the cluster restarted without workers"
RESTARTED=0

# ---------------------------------------------------------------------------
# e. the upgraded schema equals a fresh install

psql -X -q -d postgres -c "CREATE DATABASE $FRESH" >/dev/null &&
	psql -X -q -d "$FRESH" -c "CREATE EXTENSION gridha" >/dev/null
check $? "a fresh $DEFAULT_VERSION install in $FRESH"

# schema_dump DB FILE: the filtered binary-upgrade schema dump of DB (less
# this suite's scratch schema).
schema_dump() {
	pg_dump --schema-only --binary-upgrade -N upgrade_scratch -d "$1" >"$2.raw" &&
		python3 "$DBA/schema_filter.py" "$2.raw" >"$2"
}

# same_files WHAT A B: ok when the files are equal, else not_ok and the
# diff as diagnostics.
same_files() {
	if diff -u "$2" "$3" >"$WORK/diff.out" 2>&1; then
		ok "$1"
	else
		not_ok "$1"
		head -n 80 "$WORK/diff.out" | diag
	fi
}

if schema_dump "$DB" "$WORK/upgraded.sql" && schema_dump "$FRESH" "$WORK/fresh.sql"; then
	n_members=$(grep -c '^ALTER EXTENSION gridha ADD ' "$WORK/fresh.sql")
	[ "$n_members" -gt 40 ]
	check $? "schema: the binary-upgrade dump lists every member object ($n_members ALTER EXTENSION ... ADD)"
	same_files "schema: pg_dump --schema-only --binary-upgrade of the upgraded database equals a fresh install's (OID lines removed)" \
		"$WORK/upgraded.sql" "$WORK/fresh.sql"
else
	not_ok "schema: pg_dump --schema-only --binary-upgrade of both databases"
fi

psql -X -q -A -t -d "$DB" -f "$DBA/extension_catalog.sql" >"$WORK/upgraded.cat" 2>&1
psql -X -q -A -t -d "$FRESH" -f "$DBA/extension_catalog.sql" >"$WORK/fresh.cat" 2>&1
for section in config init_priv member; do
	grep "^$section	" "$WORK/upgraded.cat" >"$WORK/upgraded.$section"
	grep "^$section	" "$WORK/fresh.cat" >"$WORK/fresh.$section"
	n=$(wc -l <"$WORK/fresh.$section")
	case $section in
		config) what="pg_extension.extconfig/extcondition (as table names)" ;;
		init_priv) what="pg_init_privs of the members (names and aclitems)" ;;
		member) what="the extension's member objects (pg_depend)" ;;
	esac
	[ "$n" -gt 0 ]
	same_files "schema: $what equal a fresh install's ($n rows)" "$WORK/upgraded.$section" "$WORK/fresh.$section"
done

# Self-test: the comparison sees a difference planted in the fresh copy.
psql -X -q -d "$FRESH" -c "COMMENT ON VIEW gridha.claims IS 'planted by 15_upgrade'" >/dev/null
if schema_dump "$FRESH" "$WORK/planted.sql" &&
	! diff "$WORK/upgraded.sql" "$WORK/planted.sql" >"$WORK/planted.diff" &&
	grep -q "^> COMMENT ON VIEW gridha.claims IS 'planted by 15_upgrade'" "$WORK/planted.diff"; then
	ok "schema: the comparison catches a difference (a view comment planted in the fresh copy)"
else
	not_ok "schema: the comparison catches a difference (a view comment planted in the fresh copy)"
fi

# ---------------------------------------------------------------------------
# g. the upgrade's locks: a transaction that holds a table the upgrade
#    locks late and then wants one it locks early goes on, and so does the
#    upgrade (a plain script would deadlock there, and lose); the caller's
#    lock_timeout bounds the upgrade's wait

psql_locks() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$LOCKS" "$@"
}

# sql_is_in DB EXPECTED SQL: the query's output in DB is exactly EXPECTED.
sql_is_in() {
	[ "$(psql -X -q -A -t -d "$1" -c "$3" 2>/dev/null)" = "$2" ]
}

# hold_then_read SECONDS: in one transaction, read gridha.instances (which
# the upgrade changes after gridha.targets, and locks after it), wait until
# the upgrade waits for a lock (at most SECONDS), read gridha.targets and
# commit.
hold_then_read() {
	psql_locks <<-EOF
		BEGIN;
		SELECT count(*) FROM gridha.instances;
		DO \$\$
		BEGIN
		    FOR i IN 1 .. $1 * 20 LOOP
		        EXIT WHEN EXISTS (SELECT 1 FROM pg_stat_activity
		                           WHERE application_name = 'gridha_upgrade_locks' AND wait_event_type = 'Lock');
		        PERFORM pg_sleep(0.05);
		    END LOOP;
		END
		\$\$;
		SELECT count(*) FROM gridha.targets;
		COMMIT;
	EOF
}

LOCKS=gridha_upgrade_locks
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $LOCKS" -c "CREATE DATABASE $LOCKS" >/dev/null &&
	psql_locks -c "CREATE EXTENSION gridha VERSION '1.0'" >/dev/null
check $? "locks: a database on 1.0 in $LOCKS"

# The caller's lock_timeout (1 s) against a transaction that holds
# gridha.instances for 4 s: the upgrade gives up, with 55P03, and nothing
# changed.
psql_locks -c "BEGIN; SELECT count(*) FROM gridha.instances; SELECT pg_sleep(4); COMMIT" >/dev/null 2>&1 &
holder=$!
PIDS+=("$holder")
wait_until 20 sql_is_in "$LOCKS" "t" "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
	 WHERE c.relname = 'instances' AND l.pid <> pg_backend_pid() AND l.granted)"
out=$(PGAPPNAME=gridha_upgrade_locks psql -X -q -A -t -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -d "$LOCKS" \
	-c "SET lock_timeout = '1s'" -c "ALTER EXTENSION gridha UPDATE" 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && grep -q "55P03.*could not lock the tables of gridha within lock_timeout" <<<"$out" &&
	sql_is_in "$LOCKS" "1.0" "SELECT extversion FROM pg_extension WHERE extname = 'gridha'"; then
	ok "locks: the caller's lock_timeout bounds the upgrade's wait (55P03, still 1.0)"
else
	not_ok "locks: the caller's lock_timeout bounds the upgrade's wait (55P03, still 1.0)"
	echo "$out" | diag
fi
wait "$holder"

hold_then_read 30 >"$WORK/locks-holder.out" 2>&1 &
holder=$!
PIDS+=("$holder")
out=$(PGAPPNAME=gridha_upgrade_locks psql_locks -c "ALTER EXTENSION gridha UPDATE" 2>&1)
rc=$?
wait "$holder"
holder_rc=$?
if [ "$rc" -eq 0 ] && sql_is_in "$LOCKS" "$DEFAULT_VERSION" "SELECT extversion FROM pg_extension WHERE extname = 'gridha'"; then
	ok "locks: the upgrade waits out a transaction that holds a late table and wants an early one, and runs"
else
	not_ok "locks: the upgrade waits out a transaction that holds a late table and wants an early one, and runs"
	echo "$out" | diag
fi
if [ "$holder_rc" -eq 0 ] && ! grep -q ERROR "$WORK/locks-holder.out"; then
	ok "locks: ... and that transaction goes on and commits"
else
	not_ok "locks: ... and that transaction goes on and commits"
	diag <"$WORK/locks-holder.out"
fi
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $LOCKS" >/dev/null 2>&1

# ---------------------------------------------------------------------------
# h. from 1.1: a database on 1.1, filled, upgraded while a client cycles
#    through it (next_batch, report accepted, report committed)

L=$(psql_h -c "SELECT instance_id FROM gridha.instances WHERE label = 'L'")
refused_in "$H" "SELECT * FROM gridha.next_batch('$L')"
check $? "from 1.1: the current library refuses the hand-out on 1.1 SQL with RG022, whose hint names ALTER EXTENSION gridha UPDATE"
# L's claim cycle is not due for minutes from now (it was filled a while
# ago): plain SQL, which the library does not refuse
psql_h -c "UPDATE gridha.instances SET last_seen_at = now(), soft_expiry = now() + interval '30 minutes',
                  hard_expiry = now() + interval '60 minutes' WHERE instance_id = '$L'" >/dev/null
live_client() {
	local end=$((SECONDS + 90)) out
	# it stops once its service is done: an idle poll would take over the
	# expired claims the fill left
	while [ "$SECONDS" -lt "$end" ]; do
		[ "$(psql -X -q -A -t -d "$H" -c "SELECT count(*) FROM gridha.batches
		       WHERE service_id = 'h-live' AND status <> 'committed'" 2>/dev/null)" = 0 ] && return 0
		out=$(psql -X -q -A -t -d "$H" -c "SET gridha.balance_claims = off" \
			-c "SELECT concat_ws('|', service_id, batch_id, epoch) FROM gridha.next_batch('$L')" 2>/dev/null | tail -n 1)
		if [ -n "$out" ]; then
			IFS='|' read -r sid bid ep <<<"$out"
			psql -X -q -A -t -d "$H" -c "SELECT gridha.report_submission('$L', '$sid', '$bid', $ep, 'accepted')" \
				-c "SELECT gridha.report_status('$L', '$sid', '$bid', $ep, 'committed')" >/dev/null 2>&1
		fi
	done
	return 1
}
live_client &
CLIENT_PID=$!
sleep 1
if psql_h -c "ALTER EXTENSION gridha UPDATE" >"$WORK/upgrade-h.out" 2>&1; then
	ok "from 1.1: ALTER EXTENSION gridha UPDATE runs while the client cycles"
else
	not_ok "from 1.1: ALTER EXTENSION gridha UPDATE runs while the client cycles"
	diag <"$WORK/upgrade-h.out"
fi
wait "$CLIENT_PID"
check $? "from 1.1: the client, across the upgrade, commits the live service's 40 batches"
sql_is_in "$H" "$DEFAULT_VERSION" "SELECT extversion FROM pg_extension WHERE extname = 'gridha'"
check $? "from 1.1: extversion is $DEFAULT_VERSION"
sql_is_in "$H" "0" "SELECT count(*) FROM (SELECT seq, row_number() OVER (ORDER BY finished_at, seq) AS r
                     FROM gridha.batches WHERE service_id = 'h-live') x WHERE seq <> r"
check $? "from 1.1: ... in enqueue order"
sql_is_in "$H" "true|0" "$METRICS_SQL"
check $? "from 1.1: the idle services' counters are settled, and gridha.metrics' counters equal the sums over the services (the live one's queue ran dry on 1.2)"
SKIP_H="^(h-live|$L\$)"
changed=$(psql_h -c "SELECT change, kind, key, was_val, now_val FROM upgrade_scratch.changed('pre11', NULL, '$SKIP_H')
                     WHERE kind <> 'count' LIMIT 40" 2>&1)
if [ -z "$changed" ]; then
	ok "from 1.1: no claim, epoch, batch, instance, target, lease, tick, id window or rate state lost or changed (but the client's)"
else
	not_ok "from 1.1: no claim, epoch, batch, instance, target, lease, tick, id window or rate state lost or changed (but the client's)"
	echo "$changed" | diag
fi
if schema_dump "$H" "$WORK/upgraded-h.sql"; then
	same_files "from 1.1: pg_dump --schema-only --binary-upgrade of the database upgraded from 1.1 equals a fresh install's" \
		"$WORK/upgraded-h.sql" "$WORK/fresh.sql"
else
	not_ok "from 1.1: pg_dump --schema-only --binary-upgrade of the database upgraded from 1.1"
fi
# The 1.1 forms 1.2 keeps, deprecated, as a 1.1 client calls them after the
# upgrade: the array reports, try_lead and resign (next_batch's attempt is
# attempts since 1.3: the same count, fifth column).
old_calls=$(psql -X -q -A -t -d "$H" -c "SET gridha.balance_claims = off" \
	-c "SELECT gridha.enqueue('h-live', 'h-live-b41', '\x02')" \
	-c "SELECT attempts FROM gridha.next_batch('$L')" \
	-c "SELECT status FROM gridha.report_submissions('$L', '{h-live}', '{h-live-b41}', '{1}', '{accepted}')" \
	-c "SELECT status FROM gridha.report_statuses('$L', '{h-live}', '{h-live-b41}', '{1}', '{COMMITTED}')" \
	-c "SELECT gridha.try_lead('$L', 'h-duty') IS NOT NULL AND gridha.resign('$L', 'h-duty')" 2>&1 | tr '\n' ' ')
[ "$old_calls" = "41 1 pending committed t " ]
check $? "from 1.1: after the upgrade the deprecated 1.1 calls still answer (attempts, array reports, try_lead, resign): $old_calls"
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $H WITH (FORCE)" >/dev/null 2>&1

# ---------------------------------------------------------------------------
# i. 1.2's function targets (issue 39): regprocedure columns, read by this
#    library; the update turns each into its schema-qualified signature

I=${DB}_i
psql_i() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$I" "$@"
}
psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $I" \
	-c "CREATE DATABASE $I" >/dev/null
# One session throughout: the library reads the columns as regprocedure,
# then (after the update, in the same backend) as text.
psql_i >"$WORK/i.out" 2>&1 <<'EOF'
SET client_min_messages = error;
SET gridha.balance_claims = off;
CREATE EXTENSION gridha VERSION '1.2';
CREATE SCHEMA fx;
CREATE FUNCTION fx.sub(text, text, bytea, bigint) RETURNS text LANGUAGE sql AS $$ SELECT 'accepted' $$;
CREATE FUNCTION public.st(text[]) RETURNS TABLE (batch_id text, status text)
LANGUAGE sql AS $$ SELECT b, 'COMMITTED' FROM unnest($1) b $$;
CREATE FUNCTION public.gone(text, text, bytea, bigint) RETURNS text LANGUAGE sql AS $$ SELECT 'accepted' $$;
SET search_path = fx, public;
INSERT INTO gridha.targets (target, submit_function, status_function)
VALUES ('i-fn', 'sub(text,text,bytea,bigint)', 'st(text[])'),
       ('i-gone', 'gone(text,text,bytea,bigint)', NULL),
       ('i-none', '-', NULL);
RESET search_path;
DROP FUNCTION public.gone(text, text, bytea, bigint);
SELECT 'gone-oid', submit_function::oid FROM gridha.targets WHERE target = 'i-gone';
SELECT gridha.register_instance('fn only', '{submit_function,status_function}') AS f \gset
SELECT count(gridha.enqueue(s, s || '-b' || b, '\x01', t))
  FROM (VALUES ('i1', 'i-fn'), ('i2', 'i-gone')) v (s, t), generate_series(1, 2) b;
SELECT 'claimed-1.2', string_agg(service_id, ',' ORDER BY service_id)
  FROM gridha.acquire_claims(:'f', '{submit_function,status_function}');
SELECT 'handed-1.2', service_id, batch_id FROM gridha.next_batch(:'f');
SELECT 'fleet-1.2', gridha.verify_batch(:'f', 'i1', 'i1-b1', 1),
       (SELECT string_agg(batch_id || ':' || status, ',') FROM gridha.claimed_batches(:'f')),
       (SELECT lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
         WHERE p.oid = 'gridha.claimed_batches(uuid, integer)'::regprocedure);
SELECT 'accepted-1.2', gridha.report_submission(:'f', 'i1', 'i1-b1', 1, 'accepted'::text);
SELECT 'pending-1.2', batch_id, status FROM gridha.pending_batches(:'f');
SELECT 'report-1.2', gridha.report_status(:'f', 'i1', 'i1-b1', 1, 'committed');
ALTER EXTENSION gridha UPDATE;
SELECT 'types', string_agg(format_type(atttypid, atttypmod), ',' ORDER BY attname)
  FROM pg_attribute WHERE attrelid = 'gridha.targets'::regclass
   AND attname IN ('submit_function', 'status_function');
SELECT 'row', target, coalesce(submit_function, '(null)'), coalesce(status_function, '(null)')
  FROM gridha.targets WHERE target LIKE 'i-%' ORDER BY target;
SELECT 'handed-1.3', service_id, batch_id FROM gridha.next_batch(:'f');
SELECT 'fleet-1.3', gridha.verify_batch(:'f', 'i1', 'i1-b2', 1),
       (SELECT string_agg(batch_id || ':' || status, ',') FROM gridha.claimed_batches(:'f')),
       (SELECT string_agg(DISTINCT lanname, ',') FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
         WHERE p.oid IN ('gridha.claimed_batches(uuid, integer)'::regprocedure,
                         'gridha.pending_batches(uuid, integer)'::regprocedure,
                         'gridha.verify_batch(uuid, text, text, bigint)'::regprocedure));
EOF
gone_oid=$(sed -n 's/^gone-oid|//p' "$WORK/i.out")
grep -q '^claimed-1.2|i1$' "$WORK/i.out" && grep -q '^handed-1.2|i1|i1-b1$' "$WORK/i.out"
check $? "1.2 functions: on 1.2's SQL (regprocedure columns) the library judges the function target servable and hands its head out, and not the target whose function was dropped"
grep -q '^types|text,text$' "$WORK/i.out" &&
	grep -q '^row|i-fn|fx.sub(text,text,bytea,bigint)|public.st(text\[\])$' "$WORK/i.out" &&
	[ -n "$gone_oid" ] && grep -q "^row|i-gone|$gone_oid|(null)\$" "$WORK/i.out" &&
	grep -q '^row|i-none|(null)|(null)$' "$WORK/i.out"
check $? "1.2 functions: the update makes the columns text, each function its schema-qualified signature (written unqualified on 1.2), a dropped one's OID digits ($gone_oid), none ('-') NULL"
grep -q '^handed-1.3|i1|i1-b2$' "$WORK/i.out"
check $? "1.2 functions: after the update, in the same session, the library reads the signatures and hands out the function target's next batch"
grep -q '^fleet-1.2|t|i1-b1:submitting|c$' "$WORK/i.out" && grep -q '^pending-1.2|i1-b1|pending$' "$WORK/i.out"
check $? "1.2 SQL, issue 42: verify_batch, claimed_batches and pending_batches (C entry points of 1.2's SQL, src/sql12.c) answer as before"
grep -q '^fleet-1.3|t|i1-b2:submitting|sql$' "$WORK/i.out"
check $? "1.2 SQL, issue 42: after the update, in the same session, verify_batch, claimed_batches and pending_batches are the 1.3 script's SQL and answer the same"
got=$(psql_i -c "SELECT count(*) FROM gridha.acquire_claims(gridha.register_instance('fn only 2', '{submit_function}'),
                                                               '{submit_function}')
                 WHERE service_id = 'i2'" 2>&1)
[ "$got" = 0 ]
check $? "1.2 functions: the target whose function was dropped (its OID as digits after the update) is served by no instance (claimed: $got)"
[ "$FAILED" -eq 0 ] || diag <"$WORK/i.out"
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $I WITH (FORCE)" >/dev/null 2>&1

# ---------------------------------------------------------------------------
# j. one session on 1.1 SQL (issue 40): the hand-out is refused (RG022,
#    its hint naming ALTER EXTENSION gridha UPDATE); the same session runs
#    the update and then hands out, the library's reading of the version
#    renewed by the update

J=${DB}_j
psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $J" \
	-c "CREATE DATABASE $J" >/dev/null
psql -X -q -A -t -v VERBOSITY=verbose -d "$J" >"$WORK/j.out" 2>&1 <<'EOF'
CREATE EXTENSION gridha VERSION '1.1';
SELECT 'before', service_id FROM gridha.next_batch('00000000-0000-4000-8000-00000000a0f1');
ALTER EXTENSION gridha UPDATE;
SELECT 'enqueued', gridha.enqueue('j1', 'j1-b1', '\x01');
SELECT 'after', service_id, batch_id, epoch FROM gridha.next_batch('00000000-0000-4000-8000-00000000a0f1');
EOF
grep -q "ERROR:  RG022: gridha's SQL in this database is version 1.1, which this library no longer serves" "$WORK/j.out" &&
	grep -q "HINT:  Update the extension: ALTER EXTENSION gridha UPDATE." "$WORK/j.out" &&
	! grep -q '^before|' "$WORK/j.out"
check $? "1.1 SQL: next_batch is refused with RG022, its hint naming ALTER EXTENSION gridha UPDATE"
grep -q '^after|j1|j1-b1|1$' "$WORK/j.out"
check $? "1.1 SQL: after ALTER EXTENSION gridha UPDATE in the same session, next_batch hands out the head"
[ "$FAILED" -eq 0 ] || diag <"$WORK/j.out"
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $J WITH (FORCE)" >/dev/null 2>&1

# ---------------------------------------------------------------------------
# k. one session on 1.2 SQL (issue 42.1): the lease, maintenance and ID
#    sequence calls, whose statements are functions of the 1.3 script since,
#    answer on 1.2 as 1.2's library answered them (src/leader12.c and
#    idseq.c keep 1.2's code: the new library serves the old SQL until
#    ALTER EXTENSION gridha UPDATE), the hand-out's poll duty takes 1.2's
#    maintenance lease, and the cycle works; after the update in the same
#    session, lead and run_maintenance answer from the 1.3 script

K=${DB}_k
psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $K" \
	-c "CREATE DATABASE $K" >/dev/null
psql -X -q -A -t -v VERBOSITY=verbose -d "$K" >"$WORK/k.out" 2>&1 <<'EOF'
SET client_min_messages = error;
SET gridha.balance_claims = off;
SET gridha.prune_interval = 0;
CREATE EXTENSION gridha VERSION '1.2';
SELECT gridha.register_instance('k') AS k \gset
SELECT 'enqueued', gridha.enqueue('k1', 'k1-b1', '\x01');
SELECT 'handed', service_id, batch_id, epoch FROM gridha.next_batch(:'k');
SELECT 'reported', gridha.report_status(:'k', 'k1', 'k1-b1', 1, 'committed');
SELECT 'poll_lease', count(*) FROM gridha.leases WHERE role = 'maintenance' AND leader = :'k';
SELECT 'create_id_sequence', gridha.create_id_sequence('k-ids', 100, 1);
SELECT 'ids', gridha.reserve_ids('k-ids', 10);
SELECT 'drop_id_sequence', gridha.drop_id_sequence('k-ids');
SELECT 'lead', gridha.lead(:'k', 'k-duty');
SELECT 'try_lead', gridha.try_lead(:'k', 'k-duty');
SELECT 'renew_lead', gridha.renew_lead(:'k', 'k-duty', 1);
SELECT 'resign_lead', gridha.resign_lead(:'k', 'k-duty');
SELECT 'resign', gridha.resign(:'k', 'k-duty');
SELECT 'run_maintenance', outcome FROM gridha.run_maintenance(:'k');
SELECT 'prune_batches', gridha.prune_batches();
SELECT 'create_id_sequence2', gridha.create_id_sequence('k-ids2', 100, 1);
SELECT 'next_id', gridha.next_id('k-ids2');
SELECT 'released', gridha.release_claims(:'k');
SELECT 'after_release', count(*) FROM gridha.leases WHERE role = 'maintenance' AND leader IS NOT NULL;
SELECT 'end-1.2';
ALTER EXTENSION gridha UPDATE;
SELECT 'enqueued-1.3', gridha.enqueue('k1', 'k1-b2', '\x02');
SELECT 'handed-1.3', batch_id FROM gridha.next_batch(:'k');
SELECT 'lead-1.3', gridha.lead(:'k', 'k-duty');
SELECT 'maintenance-1.3', outcome FROM gridha.run_maintenance(:'k');
EOF
answered=0
for f in lead try_lead renew_lead resign_lead resign run_maintenance prune_batches create_id_sequence drop_id_sequence; do
	grep -q "^$f|" "$WORK/k.out" && answered=$((answered + 1))
done
[ "$answered" = 9 ] && grep -q '^lead|1$' "$WORK/k.out" && grep -q '^try_lead|1$' "$WORK/k.out" &&
	grep -q '^renew_lead|t$' "$WORK/k.out" && grep -q '^resign_lead|t$' "$WORK/k.out" &&
	grep -q '^drop_id_sequence|t$' "$WORK/k.out" && grep -qE '^run_maintenance\|(ran|already_run)$' "$WORK/k.out" &&
	! sed -n '1,/^end-1.2$/p' "$WORK/k.out" | grep -q 'ERROR'
check $? "1.2 SQL: lead, try_lead, renew_lead, resign_lead, resign, run_maintenance, prune_batches, create_id_sequence and drop_id_sequence answer as 1.2's library answered them ($answered of 9, no error)"
grep -q '^handed|k1|k1-b1|1$' "$WORK/k.out" && grep -q '^reported|committed$' "$WORK/k.out" &&
	grep -q '^ids|\[1,11)$' "$WORK/k.out" && grep -q '^next_id|1$' "$WORK/k.out" &&
	grep -q '^poll_lease|1$' "$WORK/k.out" && grep -q '^released|' "$WORK/k.out" &&
	grep -q '^after_release|0$' "$WORK/k.out"
check $? "1.2 SQL: meanwhile the cycle works: next_batch (its poll duty takes 1.2's maintenance lease), report_status, reserve_ids, next_id, release_claims (which resigns that lease)"
grep -q '^handed-1.3|k1-b2$' "$WORK/k.out" &&
	grep -qE '^lead-1.3\|[0-9]+$' "$WORK/k.out" && grep -qE '^maintenance-1.3\|(ran|already_run)$' "$WORK/k.out"
check $? "1.2 SQL: after ALTER EXTENSION gridha UPDATE in the same session, next_batch (and its poll duty), lead and run_maintenance answer"
[ "$FAILED" -eq 0 ] || diag <"$WORK/k.out"
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $K WITH (FORCE)" >/dev/null 2>&1

# ---------------------------------------------------------------------------
# d. pg_regress and pgTAP in the upgraded database

# Empty it to what CREATE EXTENSION leaves (see the header), with the
# settings pg_regress gives a database it creates.
psql_db >"$WORK/reset.out" 2>&1 <<EOF
ALTER DATABASE $DB RESET ALL;
ALTER DATABASE $DB SET lc_messages TO 'C';
ALTER DATABASE $DB SET lc_monetary TO 'C';
ALTER DATABASE $DB SET lc_numeric TO 'C';
ALTER DATABASE $DB SET lc_time TO 'C';
ALTER DATABASE $DB SET bytea_output TO 'hex';
ALTER DATABASE $DB SET timezone_abbreviations TO 'Default';
DROP SCHEMA upgrade_scratch CASCADE;
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances, gridha.leases,
    gridha.maintenance_ticks, gridha.id_windows, gridha.id_sequences, gridha.target_rate_state,
    gridha.rate_handouts, gridha.service_counts;
DELETE FROM gridha.targets WHERE target <> 'default';
UPDATE gridha.targets
   SET submit_url = NULL, status_url = NULL, submit_function = NULL, status_function = NULL,
       rate_interval = NULL, rate_burst = 1, reject_codes = '{400,422}', request_headers = NULL
 WHERE target = 'default';
SELECT setval('gridha.id_sequence_serial', 1, false);
ANALYZE;
EOF
check $? "the upgraded database emptied to what CREATE EXTENSION leaves, for the suites"

# The tests and options as the Makefile hands them to PGXS's installcheck
# (which adds --dbname=contrib_regression; the last --dbname wins).
PG_REGRESS=$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress
# shellcheck disable=SC2016 # make expands it, not the shell
printf 'gridha-print-%%:\n\t@echo $($*)\n' >"$WORK/print.mk"
make_var() {
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory -C "$REPO" -f Makefile -f "$WORK/print.mk" \
		PG_CONFIG="$PG_CONFIG" "gridha-print-$1"
}
read -r -a regress_tests <<<"$(make_var REGRESS)"
read -r -a regress_opts <<<"$(make_var REGRESS_OPTS)"
mkdir -p "$WORK/regress"
regress_rc=1
if [ "${#regress_tests[@]}" -gt 0 ]; then
	(cd "$REPO" && "$PG_REGRESS" --outputdir="$WORK/regress" --bindir="$PG_BINDIR" \
		--host="$PGHOST" --port="$PGPORT" --user=postgres --use-existing \
		"${regress_opts[@]}" --dbname="$DB" "${regress_tests[@]}") >"$WORK/regress/run.log" 2>&1
	regress_rc=$?
else
	not_ok "pg_regress: the Makefile's REGRESS list"
fi
for t in "${regress_tests[@]}"; do
	# PostgreSQL 15 prints "test api ... ok", 16 and later "ok 1 - api"
	if grep -E -q "^((test +| +)$t +\.\.\. +ok|ok +[0-9]+ +- +$t( |$))" "$WORK/regress/run.log"; then
		ok "pg_regress in the upgraded database: $t"
	else
		not_ok "pg_regress in the upgraded database: $t"
	fi
done
if [ "$regress_rc" -ne 0 ]; then
	tail -n 15 "$WORK/regress/run.log" | diag
	[ -s "$WORK/regress/regression.diffs" ] && head -n 60 "$WORK/regress/regression.diffs" | diag
fi

if psql_db -c "CREATE EXTENSION pgtap" >/dev/null 2>&1; then
	for f in "$REPO"/test/pgtap/*.sql; do
		log=$WORK/pgtap-$(basename "$f" .sql).log
		if pg_prove -h "$PGHOST" -p "$PGPORT" -U postgres -d "$DB" "$f" >"$log" 2>&1; then
			ok "pgTAP in the upgraded database: $(basename "$f")"
		else
			not_ok "pgTAP in the upgraded database: $(basename "$f")"
			grep -v '^ok' "$log" | head -n 30 | diag
		fi
	done
else
	not_ok "CREATE EXTENSION pgtap in the upgraded database"
fi

# The plan, printed last as it depends on the inputs: 70 checks, one per
# test of the Makefile's REGRESS, one per test/pgtap file.
n_pgtap=$(compgen -G "$REPO/test/pgtap/*.sql" | wc -l)
plan $((73 + ${#regress_tests[@]} + n_pgtap))

[ "$FAILED" -eq 0 ]
