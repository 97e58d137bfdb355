#!/usr/bin/env bash
# test/suites/18_pg_upgrade.sh: pg_upgrade to every newer major works with
# gridha installed (DESIGN.md section 9: no reg* columns; workers never
# start in binary-upgrade mode).
#
# The old major is the run's (PG_CONFIG); the newer ones are the install
# trees found as .ci/run finds them: /opt/pgNN, else the tarball of
# ../shared/pg (GRIDHA_PG_BUILDS) unpacked into the suite's directory; or,
# when GRIDHA_NEW_PG_CONFIGS is set (pg_config paths, space-separated),
# exactly those. Each major from the old one's next up to 17 (and any
# newer one GRIDHA_NEW_PG_CONFIGS names) is one pair; a pair without a tree
# has its tests reported skipped, with the reason.
#
# Steps, in the order they run:
#
#   old       a cluster of the old major, gridha preloaded (no worker yet),
#             database gridha_pgu: the 'default' target at the test ledger
#             (test/dlt/ledger.py: submit and status URLs), a target 'fn'
#             with a submit_function and a status_function (schema pgu,
#             recording what they apply), an instance X holding seven
#             services whose heads it left submitting, pending, valid,
#             unknown, delayed, committed and invalid, a service 'fence'
#             taken from instance A by instance B (epoch 2), services
#             queued on both targets, an id sequence with ids reserved, and
#             a plain table. What it holds is recorded
#             (test/dba/dump_state.sql, and the plain table); it is stopped,
#             and its configuration then asks for two workers (pg_upgrade
#             starts it too).
#   per pair  for each newer major:
#     build     gridha built from this tree (a copy: the run's own objects
#               stay the old major's) and installed into the new tree
#     new       a new cluster whose configuration preloads gridha with
#               gridha.workers = 2 serving gridha_pgu
#     plain     a cluster holding only a plain table upgraded (see below)
#     upgrade   a fresh ledger on the URL the 'default' target names;
#               pg_upgrade --check, then pg_upgrade (copy mode, --retain),
#               as postgres. The ledger received nothing during them (no
#               POST, no status query), and the servers pg_upgrade started
#               (old and new, pg_upgrade_server.log) started no gridha
#               worker and said why
#     rows      the new cluster started with gridha.workers = 0: every row
#               of gridha's tables and the plain table equal the record;
#               A's write under epoch 1 is refused (RG001); ids reserved
#               after the upgrade never meet those reserved before
#     drain     the old instances' leases ended (an operator's UPDATE: their
#               sessions are gone with the old cluster), the new cluster
#               restarted as configured: two workers drain every batch, the
#               URL target's in enqueue order at the ledger, one in flight
#               (test/dlt/check_log.py), the function target's applied by
#               its function (resolved from the stored signature in the new
#               cluster), each once, in order
#     binary    the new cluster started in binary-upgrade mode (postgres -b,
#               as pg_upgrade starts it): no worker runs although
#               gridha.workers = 2, and gridha.start_worker() refuses
#
# gridha.worker_role is empty (the bootstrap superuser) in both clusters'
# configuration, as in the report of issue 39: in binary-upgrade mode only
# a superuser may connect, so a worker of another role would die at its
# connection and hide the fault; the drain runs the workers as the suites'
# worker role (target functions are called only by a role that is not a
# superuser).
#
# Each pair first upgrades a cluster of the old major that holds nothing but
# a plain table: what pg_upgrade does without gridha. Debian's PostgreSQL 15
# (15.20-0+deb12u1, CI's old major) stamps an attribute option pg_attver on
# every column it creates (pg_attribute.attoptions, {pg_attver=N}; ALTER
# TABLE ... RESET does not remove it), and the 16beta2 and 17beta2 trees do
# not know that option: the new pg_dump writes ALTER COLUMN ... SET
# (pg_attver=N), the new server refuses it (unrecognized parameter
# "pg_attver"), and pg_upgrade fails for any table, gridha's or not. The
# plain table shows it: upgraded as the old build leaves it, it fails with
# that error; with the options cleared (UPDATE pg_attribute, in the test's
# own throwaway cluster), it passes. The suite clears them the same way in
# its old gridha cluster before recording it: a workaround of the test's
# alone, for an old build's quirk; gridha itself sets no attribute option.
# When the old build stamps nothing (PostgreSQL 16 and 17 trees), nothing
# is cleared and the plain table must simply upgrade.
#
# Leaves the run's cluster alone: its clusters, ledger and builds live in a
# directory of its own, removed at the end (kept with GRIDHA_KEEP_TMP=1).
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
FAILED=0
PIDS=()
DB=gridha_pgu
PER_PAIR=16
export PGTZ=UTC

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"

# major_of PG_CONFIG: its major version (16 of "PostgreSQL 16beta2").
major_of() {
	"$1" --version 2>/dev/null | sed -nE 's/^PostgreSQL ([0-9]+).*/\1/p'
}

OLD_MAJOR=$(major_of "$PG_CONFIG")
OLD_BIN=$PG_BINDIR
BUILDS=${GRIDHA_PG_BUILDS:-$REPO/../shared/pg}

# The pairs: NEW_CONFIG[major] is its pg_config, or empty (WHY[major] says
# why). Nothing is unpacked yet.
declare -A NEW_CONFIG WHY
MAJORS=()
for m in $(seq $((OLD_MAJOR + 1)) 17); do
	MAJORS+=("$m")
	NEW_CONFIG[$m]=
	WHY[$m]="no PostgreSQL $m tree"
done
if [ -n "${GRIDHA_NEW_PG_CONFIGS:-}" ]; then
	for c in $GRIDHA_NEW_PG_CONFIGS; do
		m=$(major_of "$c")
		if [ -n "$m" ] && [ "$m" -gt "$OLD_MAJOR" ]; then
			[ -n "${NEW_CONFIG[$m]+x}" ] || MAJORS+=("$m")
			NEW_CONFIG[$m]=$c
		fi
	done
	for m in "${MAJORS[@]}"; do
		[ -n "${NEW_CONFIG[$m]}" ] || WHY[$m]="no PostgreSQL $m in GRIDHA_NEW_PG_CONFIGS"
	done
else
	for m in "${MAJORS[@]}"; do
		if [ "$(major_of "/opt/pg$m/bin/pg_config")" = "$m" ]; then
			NEW_CONFIG[$m]=/opt/pg$m/bin/pg_config
		elif compgen -G "$BUILDS/pg$m*-debian12-x86_64.tar.xz" >/dev/null; then
			NEW_CONFIG[$m]=tarball
		else
			WHY[$m]="no PostgreSQL $m tree in /opt/pg$m nor in $BUILDS"
		fi
	done
fi

if [ "${#MAJORS[@]}" -eq 0 ]; then
	plan 1
	skip_test "pg_upgrade from PostgreSQL $OLD_MAJOR" "no newer major than $OLD_MAJOR is supported yet"
	exit 0
fi
plan $((2 + PER_PAIR * ${#MAJORS[@]}))

DIR=$(mktemp -d /tmp/gridha-pgu.XXXXXX)
chmod 755 "$DIR"
[ "$(id -u)" -eq 0 ] && chown postgres: "$DIR"
P_OLD=$(gridha_free_port $((PGPORT + 120)))
P_NEW=$(gridha_free_port $((P_OLD + 1)))
P_LEDGER=$(gridha_free_port $((P_NEW + 1)))
LEDGER=http://127.0.0.1:$P_LEDGER
WORKER_ROLE=$SUITE_WORKER_ROLE

cleanup() {
	suite_stop_pids
	local d
	for d in "$DIR"/old "$DIR"/new-*; do
		[ -d "$d" ] || continue
		gridha_as_pg "$OLD_BIN/pg_ctl" -D "$d" -m immediate stop >/dev/null 2>&1
	done
	for d in "$DIR"/new-*; do
		[ -d "$d" ] || continue
		# a new cluster's own pg_ctl, should the old one refuse it
		m=${d##*-}
		[ -n "${NEW_CONFIG[$m]:-}" ] && [ -x "${NEW_BIN_OF[$m]:-/nonexistent}/pg_ctl" ] &&
			gridha_as_pg env LD_LIBRARY_PATH="${NEW_LIB_OF[$m]}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
				"${NEW_BIN_OF[$m]}/pg_ctl" -D "$d" -m immediate stop >/dev/null 2>&1
	done
	if [ "${GRIDHA_KEEP_TMP:-0}" = 1 ]; then
		echo "# kept $DIR (GRIDHA_KEEP_TMP=1)" >&2
	else
		rm -rf "$DIR"
	fi
}
declare -A NEW_BIN_OF NEW_LIB_OF
trap cleanup EXIT

# old SQL...: psql to gridha_pgu on the old cluster.
old() {
	"$OLD_BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$DIR" -p "$P_OLD" -U postgres -d "$DB" "$@"
}

# sqlstate_of PSQLFUNC SQL: the SQLSTATE the statement raises, or "ok".
sqlstate_of() {
	"$1" 2>&1 <<EOF | sed -n 's/.*NOTICE: *//p'
DO \$\$
BEGIN
    EXECUTE \$q\$$2\$q\$;
    RAISE NOTICE 'ok';
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE '%', SQLSTATE;
END
\$\$;
EOF
}

# start_ledger_at LOG: the test ledger on P_LEDGER (the URL the targets
# name), logging to LOG.
start_ledger_at() {
	python3 "$REPO/test/dlt/ledger.py" --port "$P_LEDGER" --port-file "$1.port" --log "$1" \
		--commit-delay 0.2 --max-lifetime 900 >"$1.out" 2>&1 &
	LEDGER_PID=$!
	PIDS+=("$LEDGER_PID")
	wait_port_file "$1.port" >/dev/null
}
stop_ledger() {
	kill -TERM "$LEDGER_PID" 2>/dev/null
	wait "$LEDGER_PID" 2>/dev/null
}

# conf DATADIR PORT WORKERS: the settings both clusters share, and
# gridha.workers (DATADIR/extra.conf, read last, may change it).
conf() {
	cat >>"$1/postgresql.conf" <<EOF

# --- test/suites/18_pg_upgrade.sh ---
port = $2
listen_addresses = ''
unix_socket_directories = '$DIR'
fsync = off
synchronous_commit = off
log_line_prefix = '%m [%p] %q%a '
shared_preload_libraries = 'gridha'
max_worker_processes = 16
gridha.database = '$DB'
# empty: the bootstrap superuser, which may connect in binary-upgrade
# mode (a worker of another role could not); the drain sets WORKER_ROLE
gridha.worker_role = ''
gridha.naptime = '100ms'
gridha.monitor_interval = '200ms'
gridha.renew_interval = '500ms'
gridha.soft_expiry = '5s'
gridha.hard_expiry = '10s'
gridha.workers = $3
include_if_exists = '$1/extra.conf'
EOF
}

# ---------------------------------------------------------------------------
# old: the cluster of the old major

OLD_LOG=$(gridha_server_log pgu-old "$DIR/old.log")
if ! gridha_as_pg "$OLD_BIN/initdb" --auth=trust -U postgres --encoding=UTF8 --locale=C.UTF-8 \
		--no-sync -D "$DIR/old" >"$DIR/initdb-old.log" 2>&1; then
	not_ok "initdb of the PostgreSQL $OLD_MAJOR cluster"
	diag <"$DIR/initdb-old.log"
	exit 1
fi
conf "$DIR/old" "$P_OLD" 0
if ! gridha_as_pg "$OLD_BIN/pg_ctl" -D "$DIR/old" -l "$OLD_LOG" -w -t 60 start >/dev/null; then
	not_ok "the PostgreSQL $OLD_MAJOR cluster starts"
	exit 1
fi
"$OLD_BIN/psql" -X -q -h "$DIR" -p "$P_OLD" -U postgres -d postgres \
	-c "CREATE DATABASE $DB" \
	-c "CREATE ROLE $WORKER_ROLE LOGIN IN ROLE pg_read_all_data, pg_write_all_data" >/dev/null || exit 1

old >"$DIR/setup.out" 2>&1 <<EOF
SET client_min_messages = warning;
SET gridha.balance_claims = off;
SET gridha.session_liveness = off;
SET gridha.soft_expiry = '1h';
SET gridha.hard_expiry = '1h';
CREATE EXTENSION gridha;
GRANT gridha_submitter TO $WORKER_ROLE;

-- a plain table, beside gridha's
CREATE SCHEMA pgu;
CREATE TABLE pgu.plain (i integer PRIMARY KEY, t text);
INSERT INTO pgu.plain SELECT i, md5(i::text) FROM generate_series(1, 100) i;

-- the function target: what it applies, in order
CREATE TABLE pgu.applied (pos bigserial PRIMARY KEY, sid text, bid text, epoch bigint);
CREATE FUNCTION pgu.sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS \$\$
    INSERT INTO pgu.applied (sid, bid, epoch) VALUES (\$1, \$2, \$4) RETURNING 'accepted'
\$\$;
CREATE FUNCTION pgu.stat(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS \$\$
    SELECT a.bid, 'COMMITTED' FROM pgu.applied a WHERE a.bid = ANY (\$1)
\$\$;

UPDATE gridha.targets
   SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
       status_url = '$LEDGER/batch_statuses?id={batch_ids}'
 WHERE target = 'default';
INSERT INTO gridha.targets (target, submit_function, status_function)
VALUES ('fn', 'pgu.sub(text,text,bytea,bigint)', 'pgu.stat(text[])');

-- X: seven services, their heads left in seven statuses
SELECT count(gridha.enqueue(s, s || '-b' || b, convert_to(s || ' batch ' || b, 'UTF8')))
  FROM unnest(ARRAY['x-sub', 'x-pend', 'x-valid', 'x-unk', 'x-del', 'x-com', 'x-inv']) s,
       generate_series(1, 3) b;
SELECT count(*) FROM gridha.acquire_claims('00000000-0000-0000-0000-0000000000aa');
CREATE TEMP TABLE h AS SELECT * FROM gridha.next_batches('00000000-0000-0000-0000-0000000000aa', 10);
SELECT gridha.report_submission('00000000-0000-0000-0000-0000000000aa', service_id, batch_id, epoch, 'accepted')
  FROM h WHERE service_id IN ('x-pend', 'x-valid', 'x-unk', 'x-com');
SELECT gridha.report_status('00000000-0000-0000-0000-0000000000aa', service_id, batch_id, epoch,
                            CASE service_id WHEN 'x-valid' THEN 'VALID' WHEN 'x-unk' THEN 'UNKNOWN'
                                            ELSE 'COMMITTED' END)
  FROM h WHERE service_id IN ('x-valid', 'x-unk', 'x-com');
SELECT gridha.report_submission('00000000-0000-0000-0000-0000000000aa', service_id, batch_id, epoch,
                                CASE service_id WHEN 'x-del' THEN 'delayed' ELSE 'rejected' END,
                                'held back by the test')
  FROM h WHERE service_id IN ('x-del', 'x-inv');

-- fence: A holds it at epoch 1 and hands its head out, its lease runs out,
-- B takes it (epoch 2)
SELECT count(gridha.enqueue('fence', 'fence-b' || b, '\\x0e')) FROM generate_series(1, 2) b;
SELECT count(*) FROM gridha.acquire_claims('aaaaaaaa-0000-0000-0000-00000000000a');
SELECT count(*) FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a');
UPDATE gridha.instances SET soft_expiry = now() - interval '1 hour', hard_expiry = now() - interval '1 minute'
 WHERE instance_id = 'aaaaaaaa-0000-0000-0000-00000000000a';
SELECT count(*) FROM gridha.acquire_claims('bbbbbbbb-0000-0000-0000-00000000000b');

-- queued work on both targets, nobody's yet
SELECT count(gridha.enqueue(format('u%s', s), format('u%s-b%s', s, b), convert_to(format('u %s/%s', s, b), 'UTF8')))
  FROM generate_series(1, 4) b, generate_series(1, 5) s;
SELECT count(gridha.enqueue(format('f%s', s), format('f%s-b%s', s, b), '\\x0f', 'fn'))
  FROM generate_series(1, 3) b, generate_series(1, 3) s;

SELECT gridha.create_id_sequence('pgu_ids', 100, 2);
EOF
setup_rc=$?

# ATTVER_SQL: how many user columns carry the old build's pg_attver
# attribute option (see the header); CLEAR_SQL clears them.
ATTVER_SQL="SELECT count(*) FROM pg_attribute
             WHERE attrelid >= 16384 AND array_to_string(attoptions, ',') ~ '(^|,)pg_attver='"
CLEAR_SQL="UPDATE pg_attribute SET attoptions = NULLIF(ARRAY(
               SELECT o FROM unnest(attoptions) o WHERE o !~ '^pg_attver='), '{}')
            WHERE attrelid >= 16384 AND array_to_string(attoptions, ',') ~ '(^|,)pg_attver='"
ATTVER=$(old -c "$ATTVER_SQL")
if [ "${ATTVER:-0}" -gt 0 ]; then
	echo "the old build stamped pg_attver on $ATTVER columns of $DB: cleared in every database (see the header)" | diag
	for d in $("$OLD_BIN/psql" -X -A -t -h "$DIR" -p "$P_OLD" -U postgres -d postgres \
			-c "SELECT datname FROM pg_database WHERE datallowconn"); do
		"$OLD_BIN/psql" -X -q -h "$DIR" -p "$P_OLD" -U postgres -d "$d" -c "$CLEAR_SQL" >/dev/null
	done
fi
OLD_IDS=$(old -c "SELECT array_agg(gridha.reserve_ids('pgu_ids', n) ORDER BY n) FROM (VALUES (40), (30), (60)) v (n)")
old -c "SELECT status, count(*) FROM gridha.batches GROUP BY 1 ORDER BY 1" | diag
[ "$setup_rc" -eq 0 ] && [ -n "$OLD_IDS" ] &&
	[ "$(old -c "SELECT string_agg(DISTINCT status::text, ',' ORDER BY status::text) FROM gridha.batches")" = \
		"committed,delayed,invalid,pending,queued,submitting,unknown,valid" ] &&
	[ "$(old -c "SELECT claimant || '/' || epoch FROM gridha.service_claims WHERE service_id = 'fence'")" = \
		"bbbbbbbb-0000-0000-0000-00000000000b/2" ]
check $? "old: PostgreSQL $OLD_MAJOR cluster with gridha: URL and function targets, claims held, batches in every status, an id sequence (ids $OLD_IDS)"
[ "$setup_rc" -eq 0 ] || diag <"$DIR/setup.out"

STATE_SQL=$(cat "$REPO/test/dba/dump_state.sql")
old -c "SELECT 'pgu.sub(text,text,bytea,bigint)'::regprocedure::oid" >"$DIR/old-sub-oid"
old -c "COPY ($STATE_SQL) TO STDOUT" >"$DIR/old.tsv" &&
	old -c "COPY (SELECT * FROM pgu.plain ORDER BY i) TO STDOUT" >"$DIR/old-plain.tsv" &&
	gridha_as_pg "$OLD_BIN/pg_ctl" -D "$DIR/old" -m fast -w stop >/dev/null
rc=$?
# from now on every start of the old cluster (pg_upgrade's) asks for workers
echo "gridha.workers = 2" >"$DIR/old/extra.conf"
gridha_fix_owner "$DIR/old/extra.conf"
[ "$rc" -eq 0 ] && [ -s "$DIR/old.tsv" ]
check $? "old: its rows recorded ($(wc -l <"$DIR/old.tsv") gridha rows, the plain table), stopped; its configuration now asks for two workers"

# ---------------------------------------------------------------------------
# per pair

# unpack MAJOR: a tarball tree unpacked into DIR (sets NEW_CONFIG[MAJOR]).
unpack() {
	local tarball
	tarball=$(compgen -G "$BUILDS/pg$1*-debian12-x86_64.tar.xz" | head -n 1)
	mkdir -p "$DIR/trees" && chmod 755 "$DIR/trees" &&
		tar -C "$DIR/trees" -xJf "$tarball" 2>&1 | sed 's/^/# tar: /' &&
		[ -x "$DIR/trees/pg$1/bin/pg_config" ] &&
		NEW_CONFIG[$1]=$DIR/trees/pg$1/bin/pg_config
}

# skip_rest N WHY: the pair's last N tests, skipped.
skip_rest() {
	local i
	for ((i = 0; i < $1; i++)); do
		skip_test "$PAIR: test $((PER_PAIR - $1 + i + 1)) of $PER_PAIR" "$2"
	done
}

run_pair() {
	local m=$1 cfg NEW NEWBIN NEWLIB PAIRDIR rc n got logged_before
	PAIR="$OLD_MAJOR -> $m"
	cfg=${NEW_CONFIG[$m]}
	if [ "$cfg" = tarball ] && ! unpack "$m"; then
		skip_rest "$PER_PAIR" "its tree could not be unpacked from $BUILDS"
		return
	fi
	cfg=${NEW_CONFIG[$m]}
	NEWBIN=$("$cfg" --bindir)
	NEWLIB=$("$cfg" --libdir)
	NEW_BIN_OF[$m]=$NEWBIN
	NEW_LIB_OF[$m]=$NEWLIB
	NEW=$DIR/new-$m
	PAIRDIR=$DIR/pair-$m
	mkdir -p "$PAIRDIR" && chmod 755 "$PAIRDIR"
	[ "$(id -u)" -eq 0 ] && chown postgres: "$PAIRDIR"
	# the new major's programs find their own libraries first
	local -a E=(env LD_LIBRARY_PATH="$NEWLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
	# (a statement timeout: after a pg_upgrade that went wrong, a row may
	# name a transaction the new cluster thinks is still running)
	new() {
		PGOPTIONS="-c statement_timeout=60s" \
			"${E[@]}" "$NEWBIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$DIR" -p "$P_NEW" -U postgres -d "$DB" "$@"
	}
	new_ctl() {
		gridha_as_pg "${E[@]}" "$NEWBIN/pg_ctl" -D "$NEW" -l "$NEW_LOG" -w -t 60 "$@" >/dev/null 2>&1
	}

	# --- build: a copy of the tree, built for the new major, installed
	mkdir -p "$DIR/build-$m"
	tar -C "$REPO" --exclude='*.o' --exclude='*.so' --exclude='*.bc' --exclude=.pg_build \
		--exclude=client/gridha-client --exclude=client/test_dlt_http \
		-cf - Makefile gridha.control README.md src sql client | tar -C "$DIR/build-$m" -xf -
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL "${E[@]}" make -C "$DIR/build-$m" PG_CONFIG="$cfg" install \
		>"$PAIRDIR/build.log" 2>&1
	rc=$?
	check $rc "$PAIR: gridha built from this tree and installed into PostgreSQL $m ($cfg)"
	[ "$rc" -eq 0 ] || tail -n 20 "$PAIRDIR/build.log" | diag

	# --- new: its configuration preloads gridha with two workers
	NEW_LOG=$(gridha_server_log "pgu-new-$m" "$DIR/new-$m.log")
	gridha_as_pg "${E[@]}" "$NEWBIN/initdb" --auth=trust -U postgres --encoding=UTF8 --locale=C.UTF-8 \
		--no-sync -D "$NEW" >"$PAIRDIR/initdb.log" 2>&1 &&
		conf "$NEW" "$P_NEW" 2
	rc=$?
	check $rc "$PAIR: a new PostgreSQL $m cluster whose configuration preloads gridha with gridha.workers = 2 serving $DB"
	if [ "$rc" -ne 0 ]; then
		diag <"$PAIRDIR/initdb.log"
		skip_rest $((PER_PAIR - 2)) "no new cluster"
		return
	fi

	# --- plain: pg_upgrade without gridha (see the header)
	plain_upgrade() {
		local p=$DIR/plain-$m
		rm -rf "$p" "$p-new"
		gridha_as_pg "$OLD_BIN/initdb" --auth=trust -U postgres --encoding=UTF8 --locale=C.UTF-8 \
			--no-sync -D "$p" >/dev/null 2>&1 &&
			gridha_as_pg "${E[@]}" "$NEWBIN/initdb" --auth=trust -U postgres --encoding=UTF8 \
				--locale=C.UTF-8 --no-sync -D "$p-new" >/dev/null 2>&1 &&
			printf "port = %s\nlisten_addresses = ''\nunix_socket_directories = '%s'\n" "$P_OLD" "$DIR" \
				>>"$p/postgresql.conf" &&
			gridha_as_pg "$OLD_BIN/pg_ctl" -D "$p" -l "$PAIRDIR/plain-old.log" -w -t 60 start >/dev/null &&
			"$OLD_BIN/psql" -X -q -h "$DIR" -p "$P_OLD" -U postgres -d postgres \
				-c "CREATE TABLE plain (i integer PRIMARY KEY, t text)" \
				-c "INSERT INTO plain SELECT i, md5(i::text) FROM generate_series(1, 100) i" \
				${1:+-c "$CLEAR_SQL"} >/dev/null &&
			gridha_as_pg "$OLD_BIN/pg_ctl" -D "$p" -m fast -w stop >/dev/null &&
			(cd "$PAIRDIR" && gridha_as_pg "${E[@]}" "$NEWBIN/pg_upgrade" -b "$OLD_BIN" -B "$NEWBIN" \
				-d "$p" -D "$p-new" -p "$P_OLD" -P "$P_NEW" -s "$DIR") >"$PAIRDIR/plain${1:+-cleared}.out" 2>&1
		rc=$?
		find "$p-new/pg_upgrade_output.d" -name '*.log' -exec cat {} + >>"$PAIRDIR/plain${1:+-cleared}.out" 2>/dev/null
		gridha_as_pg "$OLD_BIN/pg_ctl" -D "$p" -m immediate stop >/dev/null 2>&1
		rm -rf "$p" "$p-new"
		return "$rc"
	}
	if [ "${ATTVER:-0}" -gt 0 ]; then
		! plain_upgrade && grep -q 'unrecognized parameter "pg_attver"' "$PAIRDIR/plain.out" &&
			plain_upgrade clear
		check $? "$PAIR: a cluster holding only a plain table: pg_upgrade fails as PostgreSQL $OLD_MAJOR's build leaves it (unrecognized parameter \"pg_attver\": an attribute option that build stamps on every column and $m does not know; not gridha's), and passes once the test clears that option, as it did in its gridha cluster"
	else
		plain_upgrade
		check $? "$PAIR: a cluster holding only a plain table: pg_upgrade works (the old build stamps no pg_attver option: nothing cleared)"
	fi
	[ "$FAILED" -eq 0 ] || grep -i 'error\|fatal\|failure' "$PAIRDIR"/plain*.out | head -n 10 | diag

	# --- upgrade
	start_ledger_at "$PAIRDIR/ledger.log"
	upgrade() {
		(cd "$PAIRDIR" && gridha_as_pg "${E[@]}" "$NEWBIN/pg_upgrade" -b "$OLD_BIN" -B "$NEWBIN" \
			-d "$DIR/old" -D "$NEW" -p "$P_OLD" -P "$P_NEW" -s "$DIR" "$@")
	}
	upgrade --check >"$PAIRDIR/check.out" 2>&1
	rc=$?
	check $rc "$PAIR: pg_upgrade --check accepts the cluster with gridha installed"
	if [ "$rc" -ne 0 ]; then
		diag <"$PAIRDIR/check.out"
		stop_ledger
		skip_rest $((PER_PAIR - 4)) "pg_upgrade --check failed"
		return
	fi

	upgrade --retain >"$PAIRDIR/upgrade.out" 2>&1
	rc=$?
	check $rc "$PAIR: pg_upgrade (copy mode) of the cluster with gridha"
	if [ "$rc" -ne 0 ]; then
		tail -n 30 "$PAIRDIR/upgrade.out" | diag
		find "$NEW/pg_upgrade_output.d" -name '*.log' -exec tail -n 20 {} + 2>/dev/null | diag
		stop_ledger
		skip_rest $((PER_PAIR - 5)) "pg_upgrade failed"
		return
	fi

	n=$(grep -c '"event": *"\(post\|status_query\)"' "$PAIRDIR/ledger.log")
	[ -s "$PAIRDIR/ledger.log" ] && [ "$n" -eq 0 ]
	check $? "$PAIR: the ledger the targets name received nothing during pg_upgrade (POSTs and status queries: $n)"

	# The servers pg_upgrade started (old and new) log to one file.
	local slog
	slog=$(find "$NEW/pg_upgrade_output.d" -name pg_upgrade_server.log | head -n 1)
	cat "$slog" >>"$NEW_LOG" 2>/dev/null
	n=$(grep -c 'gridha: no background worker is started in binary-upgrade mode' "$slog" 2>/dev/null)
	got=$(grep -c 'background worker "gridha worker\|gridha worker .* started as instance\|gridha worker .* does not run' \
		"$slog" 2>/dev/null)
	[ -n "$slog" ] && [ "${n:-0}" -ge 2 ] && [ "${got:-1}" -eq 0 ]
	check $? "$PAIR: the servers pg_upgrade started registered no gridha worker (said so $n times) and none started ($got)"

	# --- rows: started without workers
	echo "gridha.workers = 0" >"$NEW/extra.conf"
	gridha_fix_owner "$NEW/extra.conf"
	if ! new_ctl start; then
		not_ok "$PAIR: the upgraded cluster starts"
		tail -n 20 "$NEW_LOG" | diag
		stop_ledger
		skip_rest $((PER_PAIR - 8)) "the upgraded cluster did not start"
		return
	fi
	new -c "COPY ($STATE_SQL) TO STDOUT" >"$PAIRDIR/new.tsv" 2>&1
	new -c "COPY (SELECT * FROM pgu.plain ORDER BY i) TO STDOUT" >"$PAIRDIR/new-plain.tsv" 2>&1
	if diff -u "$DIR/old.tsv" "$PAIRDIR/new.tsv" >"$PAIRDIR/diff.out" 2>&1 &&
		diff -u "$DIR/old-plain.tsv" "$PAIRDIR/new-plain.tsv" >>"$PAIRDIR/diff.out" 2>&1; then
		ok "$PAIR: every row of gridha's tables (batches, claims, instances, targets with their function signatures, leases, ids, rate state) and the plain table equals the old cluster's"
	else
		not_ok "$PAIR: every row of gridha's tables and the plain table equals the old cluster's"
		head -n 40 "$PAIRDIR/diff.out" | diag
	fi
	echo "pgu.sub: OID $(old_oid) in the old cluster, $(new -c "SELECT 'pgu.sub(text,text,bytea,bigint)'::regprocedure::oid") in the new" | diag

	got=$(sqlstate_of new "SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'fence', 'fence-b1', 1, 'accepted')")
	[ "$got" = RG001 ]
	check $? "$PAIR: A's write under epoch 1, B having taken 'fence' at epoch 2 before the upgrade, is refused ($got)"

	got=$(new -c "SELECT count(*) FROM unnest('$OLD_IDS'::int8range[]) o,
	                (SELECT gridha.reserve_ids('pgu_ids', n) AS r FROM (VALUES (40), (30), (60), (5)) v (n)) x
	               WHERE o.o && x.r" 2>&1)
	[ "$got" = 0 ]
	check $? "$PAIR: ids reserved after the upgrade never meet those reserved before (overlaps: $got)"

	# --- drain: the old instances' sessions are gone; an operator ends their
	# leases, so that the workers take everything, the submitting head too.
	new -c "UPDATE gridha.instances SET soft_expiry = now() - interval '1 minute',
	                                   hard_expiry = now() - interval '1 second'
	         WHERE soft_expiry IS NOT NULL" >/dev/null
	new -F $'\t' -c "SELECT b.service_id, b.batch_id FROM gridha.batches b
	                   JOIN gridha.service_claims c USING (service_id)
	                  WHERE c.target = 'default' AND b.status NOT IN ('committed', 'invalid')
	                  ORDER BY b.service_id, b.seq" >"$PAIRDIR/expected.tsv"
	N_ALL=$(new -c "SELECT count(*) FROM gridha.batches")
	echo "gridha.worker_role = '$WORKER_ROLE'" >"$NEW/extra.conf"
	new_ctl stop
	workers_up() {
		[ "$(new -c "SELECT count(*) FROM gridha.workers WHERE instance_id IS NOT NULL" 2>/dev/null)" = 2 ]
	}
	new_ctl start && wait_until 30 workers_up
	check $? "$PAIR: the upgraded cluster restarted as configured: two workers serve $DB"

	all_final() {
		[ "$(new -c "SELECT count(*) FROM gridha.batches WHERE status IN ('committed', 'invalid')" 2>/dev/null)" = "$N_ALL" ]
	}
	wait_until 90 all_final
	check $? "$PAIR: the workers drain every batch to a final status ($N_ALL batches)"
	new -c "SELECT status, count(*) FROM gridha.batches GROUP BY 1 ORDER BY 1" | diag

	check_ledger_order "$PAIRDIR/expected.tsv" "$PAIRDIR/ledger.log" \
		"$PAIR: the URL target's batches ($(wc -l <"$PAIRDIR/expected.tsv")) arrived at the ledger in enqueue order, one in flight per service"

	got=$(new -c "SELECT string_agg(l, '|' ORDER BY sid) FROM (
	                SELECT sid, string_agg(bid, ',' ORDER BY pos) AS l FROM pgu.applied GROUP BY sid) s")
	[ "$got" = "f1-b1,f1-b2,f1-b3|f2-b1,f2-b2,f2-b3|f3-b1,f3-b2,f3-b3" ]
	check $? "$PAIR: the function target's batches applied by pgu.sub, resolved from its stored signature in the new cluster, each once, in order ($got)"

	# --- binary: as pg_upgrade starts a server, the workers' role the
	# superuser (as during pg_upgrade)
	: >"$NEW/extra.conf"
	new_ctl stop
	# what the binary-upgrade start logs, apart from the stop before it (a
	# worker that a shutdown ends exits with 1, and the postmaster logs it)
	logged_before=$(wc -c <"$NEW_LOG")
	if new_ctl start -o "-b"; then
		got=$(sqlstate_of new "SELECT gridha.start_worker('in binary-upgrade mode')")
		new -c "SELECT gridha.start_worker()" >"$PAIRDIR/start_worker.out" 2>&1
		grep -q 'gridha workers cannot be started in binary-upgrade mode' "$PAIRDIR/start_worker.out" &&
			[ "$got" = 55000 ]
		check $? "$PAIR: in binary-upgrade mode gridha.start_worker() refuses (55000: gridha workers cannot be started in binary-upgrade mode)"
		sleep 1
		got=$(new -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'gridha worker'")
		[ "$got" = 0 ] && [ "$(new -c "SHOW gridha.workers")" = 2 ] &&
			! tail -c +"$((logged_before + 1))" "$NEW_LOG" | grep -q 'background worker "gridha worker'
		check $? "$PAIR: in binary-upgrade mode no gridha worker runs although gridha.workers = 2 ($got)"
		new_ctl stop
	else
		not_ok "$PAIR: the new cluster starts in binary-upgrade mode"
		skip_rest 1 "it did not start"
	fi
	stop_ledger
}

old_oid() {
	cat "$DIR/old-sub-oid" 2>/dev/null
}

for m in "${MAJORS[@]}"; do
	if [ -z "${NEW_CONFIG[$m]}" ]; then
		PAIR="$OLD_MAJOR -> $m"
		skip_rest "$PER_PAIR" "${WHY[$m]}"
		continue
	fi
	run_pair "$m"
done

[ "$FAILED" -eq 0 ]
