#!/usr/bin/env bash
# test/bench/citus.sh: what gridha's Citus mode costs per call beside gridha
# on one server (`make bench`; docs/citus.md, "Measured: the Citus mode
# beside one server"; docs/dev/benchmarks.md).
#
# Measures and prints; it never fails on a figure (only a server that does
# not start, or a build that fails, stops it).
#
# On ONE machine in ONE run, four throwaway PostgreSQL 15 servers of a copy
# of the installation CITUS_PG_CONFIG names (Citus installed there), with
# gridha built from this source tree into the copy (nothing is installed
# into the original); 127.0.0.1 only; fsync and synchronous_commit off on
# every server (a delegated call commits on one worker, as a call on one
# server commits there: the commit flush is the same on both sides and left
# out); autovacuum off (the tables are vacuumed and analyzed after the fill;
# a vacuum in a window would be counted as the cycle's CPU). Three sides:
#   (a) one    gridha on one server (gridha preloaded): the library's cycle,
#              next_batch -> report_submission -> report_status, and batched,
#              next_batches(n) -> report_submissions -> report_statuses; each
#              pgbench client its own instance, claims taken by gridha
#   (b) sql    the Citus mode's per-bucket SQL functions on one plain server
#              (database of server "one"): the bucket tables made by the DDL
#              of gridha.citus_setup (read from the installed function), not
#              distributed; every call as on (c)
#   (c) citus  the Citus mode on a coordinator and two workers
#              (gridha.citus_setup(64), citus.shard_count 32): every call made
#              on the coordinator as a statement of its own, which Citus sends
#              whole to the worker holding the bucket
# Each side gets the same workload: 64 buckets x CITUS_SERVICES services
# (exactly that many per bucket; on (a) the same service ids), CITUS_DEPTH
# queued batches each (on (a) enqueued with gridha.enqueue, on (b) and (c)
# written into the bucket tables directly: set-up, not measured). On (b) and
# (c) the 64 buckets are acquired once (bucket_acquire, a one-hour lease),
# bucket b by instance b mod CITUS_CLIENTS + 1, at epoch 1.
#
# Words used here:
#   cycle     one batch through three calls, each its own transaction: the
#             hand-out, the report of the submission (accepted), the report
#             of the ledger's status (committed). (b), (c): on one bucket; a
#             client takes its buckets in turn
#   batch n   the same with the batched calls: up to n batches handed out by
#             one call (bucket_next_batches / next_batches), then one
#             batched report of each kind of what it returned
#   round     every case once on each side, the sides' order turned by one
#             each round, so a drift of the machine's speed favours none
#
# Measured, per case (cycle, batch 10, batch 100) and side:
#   1 client   ms per call of each step (pgbench -r over a run of
#              CITUS_SECONDS_1; on (b), (c) the client goes over all 64
#              buckets in turn)
#   N clients  batches/s (CITUS_CLIENTS clients; on (b), (c) each on its own
#              buckets), and the servers' CPU per batch: (a) and (b) the
#              server, (c) the coordinator and the workers (from /proc: each
#              postmaster and its children, to the nanosecond), which the
#              projection in docs/citus.md rests on. Counted over
#              CITUS_SECONDS after a warm-up of CITUS_WARM seconds, from the
#              rows (batches committed); pgbench runs CITUS_TAIL seconds past
#              the window and ends by itself (-T), each client finishing its
#              cycle, so nothing stays in flight for the next run
# Medians over the rounds, and the ratios (c)/(a), (c)/(b), (b)/(a).
#
# Environment (defaults in brackets):
#   CITUS_PG_CONFIG [/usr/lib/postgresql/15/bin/pg_config]  a PostgreSQL 15
#                   with Citus installed (else the bench says so and stops)
#   CITUS_PORT [56700]      first port probed (four are used)
#   CITUS_CLIENTS [4]       N: pgbench clients and instances; divides 64
#   CITUS_ROUNDS [3]        rounds
#   CITUS_SERVICES [128]    services per bucket (at least 100 for batch 100)
#   CITUS_DEPTH [80]        batches queued per service (a run that may have
#                           run dry is flagged: raise it)
#   CITUS_SECONDS_1 [3]     length of a 1-client run
#   CITUS_WARM_CALLS [2]    a client's first transactions, not counted in
#                           the 1-client ms per call
#   CITUS_WARM [1]          warm-up of an N-client run, not counted
#   CITUS_SECONDS [3]       the counted window of an N-client run
#   CITUS_TAIL [2]          pgbench's time past the window
#   CITUS_KEEP [0]          1: keep the servers' directory (logs) at exit
#   CITUS_MAX_SECONDS [1800] a watchdog stops the servers after this long,
#                           even when this script was killed
set -eu -o pipefail

CITUS_PG_CONFIG=${CITUS_PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
CITUS_PORT=${CITUS_PORT:-56700}
CITUS_CLIENTS=${CITUS_CLIENTS:-4}
CITUS_ROUNDS=${CITUS_ROUNDS:-3}
CITUS_SERVICES=${CITUS_SERVICES:-128}
CITUS_DEPTH=${CITUS_DEPTH:-80}
CITUS_SECONDS_1=${CITUS_SECONDS_1:-3}
CITUS_WARM_CALLS=${CITUS_WARM_CALLS:-2}
CITUS_WARM=${CITUS_WARM:-1}
CITUS_SECONDS=${CITUS_SECONDS:-3}
CITUS_TAIL=${CITUS_TAIL:-2}
CITUS_KEEP=${CITUS_KEEP:-0}
CITUS_MAX_SECONDS=${CITUS_MAX_SECONDS:-1800}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# gridha_log, gridha_as_pg, gridha_free_port
export PG_CONFIG=$CITUS_PG_CONFIG
# shellcheck source=../lib.sh
. "$ROOT/test/lib.sh"
# median, ratio
# shellcheck source=common.sh
. "$HERE/common.sh"

unset PGDATABASE PGOPTIONS PGPASSWORD PGSERVICE PGSSLMODE PGHOST PGPORT PGUSER

if [ $((64 % CITUS_CLIENTS)) != 0 ]; then
	echo "citus: CITUS_CLIENTS ($CITUS_CLIENTS) must divide 64" >&2
	exit 1
fi
if [ ! -x "$CITUS_PG_CONFIG" ] || ! "$CITUS_PG_CONFIG" --version | grep -q '^PostgreSQL 15'; then
	echo "citus: skipped: no PostgreSQL 15 at $CITUS_PG_CONFIG (CITUS_PG_CONFIG); Citus 13.2 here exists for 15 only"
	exit 0
fi
if [ ! -e "$("$CITUS_PG_CONFIG" --pkglibdir)/citus.so" ]; then
	echo "citus: skipped: Citus is not installed in $("$CITUS_PG_CONFIG" --pkglibdir) (test/install/citus.sh installs it, as root)"
	exit 0
fi

N=$CITUS_CLIENTS
NODES="one coord w1 w2"

DIR=$(mktemp -d "${TMPDIR:-/tmp}/gridha-citus.XXXXXX")
chmod 755 "$DIR"
declare -A PORT

stop_all() {
	local n
	for n in $NODES; do
		[ -f "$DIR/$n/postmaster.pid" ] || continue
		gridha_as_pg "$PG_BINDIR/pg_ctl" stop -w -t 20 -m fast -D "$DIR/$n" >/dev/null 2>&1 ||
			gridha_as_pg "$PG_BINDIR/pg_ctl" stop -w -t 20 -m immediate -D "$DIR/$n" >/dev/null 2>&1 || true
	done
}

cleanup() {
	trap - EXIT INT TERM
	[ -z "${PGBENCH_PID:-}" ] || kill "$PGBENCH_PID" 2>/dev/null || true
	stop_all
	if [ "$CITUS_KEEP" = 1 ]; then
		gridha_log "kept $DIR (CITUS_KEEP=1)"
	else
		rm -rf "$DIR"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

loadavg() {
	cut -d ' ' -f 1-3 /proc/loadavg
}

T0=$SECONDS
LOAD_START=$(loadavg)
gridha_log "citus: gridha's Citus mode beside gridha on one server; $(nproc) cores, load $LOAD_START; $N clients, $CITUS_ROUNDS rounds, 64 buckets x $CITUS_SERVICES services x $CITUS_DEPTH batches"

# ---------------------------------------------------------------------------
# gridha built into a copy of the PostgreSQL 15 tree (as test/t/lib/GridhaCitus.pm)
# ---------------------------------------------------------------------------

TREE=$DIR/tree
for k in bindir pkglibdir sharedir includedir pkgincludedir includedir-server; do
	d=$("$CITUS_PG_CONFIG" --"$k")
	[ -n "$d" ] && [ ! -e "$TREE$d" ] || continue
	mkdir -p "$(dirname "$TREE$d")"
	cp -a "$d" "$TREE$d"
done
d=$("$CITUS_PG_CONFIG" --libdir)
if [ ! -e "$TREE$d" ]; then
	mkdir -p "$(dirname "$TREE$d")"
	ln -s "$d" "$TREE$d"
fi
CBIN=$("$CITUS_PG_CONFIG" --bindir)
CFG=$TREE$CBIN/pg_config
rm -f "$TREE$("$CITUS_PG_CONFIG" --pkglibdir)/gridha.so" "$TREE$("$CITUS_PG_CONFIG" --sharedir)"/extension/gridha[.-]*
mkdir -p "$DIR/build"
tar -C "$ROOT" --exclude='*.o' --exclude='*.so' --exclude='*.bc' --exclude=.pg_build \
	--exclude=client/gridha-client --exclude=client/test_dlt_http \
	-cf - Makefile gridha.control README.md src sql client | tar -C "$DIR/build" -xf -
if ! (unset MAKEFLAGS MFLAGS MAKELEVEL LD_LIBRARY_PATH; make -C "$DIR/build" -j2 PG_CONFIG="$CFG" install) \
	>"$DIR/build.log" 2>&1; then
	tail -n 20 "$DIR/build.log" >&2
	gridha_log "citus: gridha could not be built for the Citus tree"
	exit 1
fi
PG_BINDIR=$TREE$CBIN
PSQL=$PG_BINDIR/psql
PGBENCH=$PG_BINDIR/pgbench
[ "$(id -u)" -ne 0 ] || chown -R postgres: "$DIR"
gridha_log "built gridha into a copy of $CITUS_PG_CONFIG's tree ($((SECONDS - T0)) s so far)"

# The watchdog: a process of its own session that stops the servers and
# removes the directory when this script is gone (even killed with -9) or
# after CITUS_MAX_SECONDS.
cat >"$DIR/watchdog.sh" <<EOF
#!/bin/bash
end=\$((SECONDS + $CITUS_MAX_SECONDS))
while kill -0 $$ 2>/dev/null && [ \$SECONDS -lt \$end ]; do sleep 2; done
for n in $NODES; do
	[ -f "$DIR/\$n/postmaster.pid" ] || continue
	if [ "\$(id -u)" -eq 0 ]; then
		runuser -u postgres -- "$PG_BINDIR/pg_ctl" stop -w -t 20 -m immediate -D "$DIR/\$n" >/dev/null 2>&1
	else
		"$PG_BINDIR/pg_ctl" stop -w -t 20 -m immediate -D "$DIR/\$n" >/dev/null 2>&1
	fi
done
[ "$CITUS_KEEP" = 1 ] || rm -rf "$DIR"
EOF
setsid bash "$DIR/watchdog.sh" </dev/null >/dev/null 2>&1 &

# ---------------------------------------------------------------------------
# The servers
# ---------------------------------------------------------------------------

# node_start NAME PRELOAD [SETTING...]: initdb and start a server on
# port PORT[NAME].
node_start() {
	local n=$1 preload=$2 port=${PORT[$1]} out s
	shift 2
	if ! out=$(gridha_as_pg "$PG_BINDIR/initdb" --auth=trust -U postgres --encoding=UTF8 \
			--locale=C.UTF-8 --no-sync -D "$DIR/$n" 2>&1); then
		echo "$out" >&2
		gridha_log "initdb of $n failed"
		return 1
	fi
	{
		echo "# --- test/bench/citus.sh: $n ---"
		echo "port = $port"
		echo "listen_addresses = '127.0.0.1'"
		echo "unix_socket_directories = '$DIR'"
		echo "shared_preload_libraries = '$preload'"
		echo "fsync = off"
		echo "synchronous_commit = off"
		echo "full_page_writes = off"
		echo "shared_buffers = 256MB"
		echo "max_connections = 100"
		echo "max_prepared_transactions = 20"
		echo "max_worker_processes = 32"
		echo "log_min_messages = warning"
		echo "autovacuum = off"
		echo "log_line_prefix = '%m [%p] '"
		for s in "$@"; do echo "$s"; done
	} >>"$DIR/$n/postgresql.conf"
	gridha_as_pg "$PG_BINDIR/pg_ctl" start -w -t 60 -D "$DIR/$n" -l "$DIR/$n.log" >/dev/null ||
		{ tail -n 20 "$DIR/$n.log" >&2; return 1; }
}

# cq NODE SQL...: psql on NODE's database cb, unaligned, no headers.
# cqd NODE DB SQL...: the same on database DB.
cq() {
	local n=$1
	shift
	"$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "${PORT[$n]}" -U postgres -d cb -c "$@"
}
cqd() {
	local n=$1 db=$2
	shift 2
	"$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "${PORT[$n]}" -U postgres -d "$db" -c "$@"
}

# node_cpu_ms NODE...: CPU (ms, with microseconds) the servers used so far:
# each postmaster and its live children to the nanosecond
# (/proc/PID/schedstat), plus the children it reaped (cutime + cstime of
# the postmaster, in clock ticks).
node_cpu_ms() {
	local pids='' n
	for n in "$@"; do
		pids="$pids $(head -n 1 "$DIR/$n/postmaster.pid")"
	done
	python3 - $pids <<'EOF'
import os, sys
pms = set(sys.argv[1:])
tick = os.sysconf('SC_CLK_TCK')
def stat(pid):
    with open('/proc/%s/stat' % pid) as f:
        s = f.read()
    return s[s.rindex(')') + 2:].split()
def run_ns(pid):
    with open('/proc/%s/schedstat' % pid) as f:
        return int(f.read().split()[0])
ns = 0
for pm in pms:
    f = stat(pm)
    ns += run_ns(pm) + (int(f[13]) + int(f[14])) * 10**9 // tick
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            if stat(pid)[1] in pms:
                ns += run_ns(pid)
        except OSError:
            continue
print('%.3f' % (ns / 1e6))
EOF
}

NEXT_PORT=$CITUS_PORT
for n in $NODES; do
	port=$(gridha_free_port "$NEXT_PORT")
	NEXT_PORT=$((port + 1))
	PORT[$n]=$port
done
for n in $NODES; do
	if [ "$n" = one ]; then
		node_start one gridha &
	else
		node_start "$n" citus,gridha citus.shard_count=32 &
	fi
	eval "start_pid_$n=\$!"
done
for n in $NODES; do
	eval "wait \$start_pid_$n" || { gridha_log "the $n server did not start"; exit 1; }
done
for n in $NODES; do
	"$PSQL" -X -q -h 127.0.0.1 -p "${PORT[$n]}" -U postgres -d postgres -c "CREATE DATABASE cb" >/dev/null
done
"$PSQL" -X -q -h 127.0.0.1 -p "${PORT[one]}" -U postgres -d postgres -c "CREATE DATABASE cbsql" >/dev/null
for n in coord w1 w2; do
	cq "$n" "SET client_min_messages = warning" -c "CREATE EXTENSION citus" >/dev/null
done
cq coord "SELECT citus_set_coordinator_host('127.0.0.1', ${PORT[coord]})" \
	-c "SELECT citus_add_node('127.0.0.1', ${PORT[w1]})" \
	-c "SELECT citus_add_node('127.0.0.1', ${PORT[w2]})" >/dev/null
cq coord "SET client_min_messages = warning" -c "CREATE EXTENSION gridha" -c "SELECT gridha.citus_setup(64)" >/dev/null
cq one "CREATE EXTENSION gridha" >/dev/null
cqd one cbsql "CREATE EXTENSION gridha" >/dev/null
# (b): the bucket tables as gridha.citus_setup creates them (the CREATE
# TABLE, CREATE INDEX and ALTER TABLE statements on gridha.bucket_* of it
# and of its part for targets, read from the installed functions), left
# local; the default target, as the setup copies it from gridha.targets
for f in 'gridha.citus_setup(integer)' 'gridha_internal.citus_setup_targets()'; do
	cqd one cbsql "SELECT pg_get_functiondef('$f'::regprocedure)"
done | awk '/^ *(CREATE TABLE gridha\.bucket_|CREATE (UNIQUE )?INDEX .* ON gridha\.bucket_|ALTER TABLE gridha\.bucket_)/ { on = 1 }
	on { print } on && /;[[:space:]]*$/ { on = 0 }' >"$DIR/bucket_tables.sql"
"$PSQL" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "${PORT[one]}" -U postgres -d cbsql \
	-f "$DIR/bucket_tables.sql" >/dev/null
cqd one cbsql "INSERT INTO gridha.bucket_claims (bucket, buckets) SELECT b, 64 FROM generate_series(0, 63) AS b" \
	-c "INSERT INTO gridha.bucket_targets (target, reject_codes) SELECT target, reject_codes FROM gridha.targets" >/dev/null
CITUS_VERSION=$(cq coord "SELECT extversion FROM pg_extension WHERE extname = 'citus'")
PG_VERSION=$(cq one "SHOW server_version")
GRIDHA_VERSION=$(cq coord "SELECT extversion FROM pg_extension WHERE extname = 'gridha'")
gridha_log "servers: one :${PORT[one]} (databases cb: gridha, cbsql: the per-bucket SQL), coordinator :${PORT[coord]}, workers :${PORT[w1]} :${PORT[w2]} (PostgreSQL $PG_VERSION, Citus $CITUS_VERSION, gridha $GRIDHA_VERSION)"

# side -> node and database
declare -A SNODE=([one]=one [sql]=one [citus]=coord)
declare -A SDB=([one]=cb [sql]=cbsql [citus]=cb)

# ---------------------------------------------------------------------------
# The workload, the same on every side
# ---------------------------------------------------------------------------

SVC="SELECT bucket, service_id FROM (
    SELECT gridha.bucket_of(id, 64) AS bucket, id AS service_id,
           row_number() OVER (PARTITION BY gridha.bucket_of(id, 64) ORDER BY id) AS r
      FROM (SELECT 's' || lpad(i::text, 7, '0') AS id
              FROM generate_series(1, 64 * $CITUS_SERVICES * 3) AS i) AS c) AS x
 WHERE r <= $CITUS_SERVICES"
PAYLOAD="substr(decode(repeat(md5(service_id), 8), 'hex'), 1, 100)"
FILL_BUCKETS="
SET client_min_messages = warning;
INSERT INTO gridha.bucket_services (bucket, service_id, head_seq, tail_seq, ready_at)
SELECT bucket, service_id, 1, $CITUS_DEPTH, now() FROM ($SVC) AS s;
INSERT INTO gridha.bucket_batches (bucket, service_id, batch_id, seq, payload)
SELECT s.bucket, s.service_id, s.service_id || '-' || q, q, $PAYLOAD
  FROM gridha.bucket_services AS s, generate_series(1, $CITUS_DEPTH) AS q;
"
{
	cqd one cbsql "$FILL_BUCKETS" >/dev/null
	cqd one cbsql "VACUUM ANALYZE gridha.bucket_batches" -c "VACUUM ANALYZE gridha.bucket_services" \
		-c "VACUUM ANALYZE gridha.bucket_claims" >/dev/null
} &
fill_sql=$!
{
	cq coord "$FILL_BUCKETS" >/dev/null
	cq coord "VACUUM ANALYZE gridha.bucket_batches" -c "VACUUM ANALYZE gridha.bucket_services" \
		-c "VACUUM ANALYZE gridha.bucket_claims" >/dev/null
} &
fill_citus=$!
# (a): through gridha.enqueue, one transaction per depth (batch q of every
# service), so each service's batches are in order
{
	cq one "CREATE TABLE bench_svc AS $SVC" >/dev/null
	for ((q = 1; q <= CITUS_DEPTH; q++)); do
		cq one "SELECT count(gridha.enqueue(service_id, service_id || '-' || $q, $PAYLOAD)) FROM bench_svc" >/dev/null
	done
	cq one "VACUUM ANALYZE" >/dev/null
} &
fill_one=$!
wait "$fill_sql" && wait "$fill_citus" && wait "$fill_one" || { gridha_log "the fill failed"; exit 1; }
for s in one sql citus; do
	case $s in
		one) rows=$(cq one "SELECT count(*) FROM gridha.batches") ;;
		*) rows=$(cqd "${SNODE[$s]}" "${SDB[$s]}" "SELECT count(*) FROM gridha.bucket_batches") ;;
	esac
	gridha_log "filled $s: $rows batches"
done

inst_sql() {
	echo "('00000000-0000-4000-8000-' || lpad(($1)::text, 12, '0'))::uuid"
}
for s in sql citus; do
	{
		echo "SET client_min_messages = warning;"
		for ((b = 0; b < 64; b++)); do
			echo "SELECT gridha.bucket_acquire($b, $(inst_sql "$b % $N + 1"), '1 hour');"
		done
	} | "$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "${PORT[${SNODE[$s]}]}" -U postgres \
		-d "${SDB[$s]}" | sort | uniq -c | sed 's/^ */  /' >"$DIR/acquired.$s"
	gridha_log "buckets acquired on $s (count epoch): $(tr '\n' ' ' <"$DIR/acquired.$s")"
done
gridha_log "set up in $((SECONDS - T0)) s"

# ---------------------------------------------------------------------------
# pgbench scripts
# ---------------------------------------------------------------------------

# (b), (c): the client's next bucket in turn (k), its holder's instance.
# -D: k=-1, nclients, holders (= N), ep (1), n (batch size).
PICK="\\set k (:k + 1) % (64 / :nclients)
\\set b :client_id + :nclients * :k
\\set inst :b % :holders + 1"
INST="('00000000-0000-4000-8000-' || lpad(:inst::text, 12, '0'))::uuid"

# the steps of each script: hand-out, reports
BCYCLE="SELECT gridha.bucket_next_batch(:b, $INST, :ep) AS h \\gset
SELECT ((nullif(:h, '')::gridha.bucket_batch).service_id IS NOT NULL)::int AS got, (nullif(:h, '')::gridha.bucket_batch).service_id AS sid, (nullif(:h, '')::gridha.bucket_batch).batch_id AS bid \\gset
\\if :got
SELECT gridha.bucket_report_submission(:b, $INST, :sid, :bid, :ep, 'accepted');
SELECT gridha.bucket_report_status(:b, $INST, :sid, :bid, :ep, 'committed');
\\endif"
BBATCH="SELECT gridha.bucket_next_batches(:b, $INST, :ep, :n) AS h \\gset
SELECT cardinality(:h::gridha.bucket_batch[]) AS got,
       ARRAY(SELECT ROW(x.service_id, x.batch_id, x.epoch, 'accepted', NULL)::gridha.submission_report FROM unnest(:h::gridha.bucket_batch[]) AS x)::text AS subs,
       ARRAY(SELECT ROW(x.service_id, x.batch_id, x.epoch, 'committed', NULL)::gridha.status_report FROM unnest(:h::gridha.bucket_batch[]) AS x)::text AS stats \\gset
\\if :got
SELECT gridha.bucket_report_submissions(:b, $INST, :subs::gridha.submission_report[]);
SELECT gridha.bucket_report_statuses(:b, $INST, :stats::gridha.status_report[]);
\\endif"

# (a): each client its own instance (client_id + 1)
GINST="('00000000-0000-4000-8000-' || lpad((:client_id + 1)::text, 12, '0'))::uuid"
GCYCLE="WITH n AS (SELECT * FROM gridha.next_batch($GINST))
SELECT count(*) AS got, max(n.service_id) AS sid, max(n.batch_id) AS bid, max(n.epoch) AS ep FROM n \\gset
\\if :got
SELECT gridha.report_submission($GINST, :sid, :bid, :ep::bigint, 'accepted');
SELECT gridha.report_status($GINST, :sid, :bid, :ep::bigint, 'committed');
\\endif"
GBATCH="WITH n AS (SELECT * FROM gridha.next_batches($GINST, :n))
SELECT count(*) AS got,
       array_agg(ROW(n.service_id, n.batch_id, n.epoch, 'accepted', NULL)::gridha.submission_report)::text AS subs,
       array_agg(ROW(n.service_id, n.batch_id, n.epoch, 'committed', NULL)::gridha.status_report)::text AS stats
  FROM n \\gset
\\if :got
SELECT count(*) FROM gridha.report_submissions($GINST, :subs::gridha.submission_report[]);
SELECT count(*) FROM gridha.report_statuses($GINST, :stats::gridha.status_report[]);
\\endif"

# Each script: a client's first CITUS_WARM_CALLS transactions run a copy of
# the steps (opening the connections to the workers, filling the caches),
# which pgbench -r counts on the copy's lines, not on the measured ones.
# script NAME PICK STEPS
script() {
	{
		echo "$2"
		echo "\\set w :w + 1"
		echo "\\if :w > :warmcalls"
		echo "$3"
		echo "\\else"
		echo "$3"
		echo "\\endif"
	} >"$DIR/$1.sql"
}
script bcycle "$PICK" "$BCYCLE"
script bbatch "$PICK" "$BBATCH"
script gcycle "" "$GCYCLE"
script gbatch "" "$GBATCH"

# ---------------------------------------------------------------------------
# Timed runs
# ---------------------------------------------------------------------------

# final_batches SIDE: batches committed so far.
final_batches() {
	case $1 in
		one) cq one "SELECT count(*) FROM gridha.batches WHERE status = 'committed'" ;;
		*) cqd "${SNODE[$1]}" "${SDB[$1]}" "SELECT sum(head_seq - 1) FROM gridha.bucket_services" ;;
	esac
}

# script SIDE CASE: the pgbench script and batch size
script_of() {
	local pre=b
	[ "$1" != one ] || pre=g
	case $2 in
		cycle) echo "$pre"cycle 1 ;;
		batch10) echo "$pre"batch 10 ;;
		batch100) echo "$pre"batch 100 ;;
	esac
}

# pgb SIDE CLIENTS SECONDS SCRIPT N OUT [-r]: pgbench on SIDE.
pgb() {
	local side=$1 c=$2 t=$3 script=$4 n=$5 out=$6
	shift 6
	timeout $((t + 120)) "$PGBENCH" -n -M prepared "$@" -h 127.0.0.1 -p "${PORT[${SNODE[$side]}]}" -U postgres \
		-c "$c" -j "$((c < 2 ? c : 2))" -T "$t" -D k=-1 -D nclients="$c" -D holders="$N" -D ep=1 -D n="$n" -D w=0 -D warmcalls="$CITUS_WARM_CALLS" \
		-f "$DIR/$script.sql" "${SDB[$side]}" >"$out" 2>&1
}

# run1 SIDE CASE: a 1-client run; sets R_NEXT, R_ACC, R_COM (ms per call,
# pgbench -r) and R_NOTE.
run1() {
	local side=$1 out=$DIR/run1.out script n
	read -r script n <<<"$(script_of "$1" "$2")"
	pgb "$side" 1 "$CITUS_SECONDS_1" "$script" "$n" "$out" -r || true
	R_NEXT=$(awk '/gridha\.(bucket_)?next_batch/ { print $1; exit }' "$out")
	R_ACC=$(awk '/gridha\.(bucket_)?report_submission/ { print $1; exit }' "$out")
	R_COM=$(awk '/gridha\.(bucket_)?report_status/ { print $1; exit }' "$out")
	# a step that never ran after the warm-up (0.000): no figure
	[ "$R_NEXT" != 0.000 ] || R_NEXT=
	[ "$R_ACC" != 0.000 ] || R_ACC=
	[ "$R_COM" != 0.000 ] || R_COM=
	R_NOTE=
	if grep -q 'ERROR\|error\|aborted' "$out"; then
		R_NOTE="pgbench: $(grep -m 2 'ERROR\|error\|aborted' "$out" | tr '\n' ' ')"
	fi
}

# runN SIDE CASE: an N-client run; sets R_BPS (batches/s), R_CPU (us of
# server CPU per batch: the server, or the coordinator), R_WCPU (the
# workers'), R_NOTE.
runN() {
	local side=$1 out=$DIR/runN.out script n b0 b1 c0 c1 w0=0 w1=0 t0 t1 node=${SNODE[$1]}
	read -r script n <<<"$(script_of "$1" "$2")"
	pgb "$side" "$N" $((CITUS_WARM + CITUS_SECONDS + CITUS_TAIL)) "$script" "$n" "$out" &
	PGBENCH_PID=$!
	sleep "$CITUS_WARM"
	b0=$(final_batches "$side")
	t0=$(date +%s.%N)
	c0=$(node_cpu_ms "$node")
	[ "$side" != citus ] || w0=$(node_cpu_ms w1 w2)
	sleep "$CITUS_SECONDS"
	c1=$(node_cpu_ms "$node")
	[ "$side" != citus ] || w1=$(node_cpu_ms w1 w2)
	t1=$(date +%s.%N)
	b1=$(final_batches "$side")
	wait "$PGBENCH_PID" || true
	PGBENCH_PID=
	R_BPS=$(awk -v b="$((b1 - b0))" -v a="$t0" -v c="$t1" 'BEGIN { printf "%.0f", b / (c - a) }')
	R_CPU=$(awk -v a="$c0" -v b="$c1" -v n="$((b1 > b0 ? b1 - b0 : 1))" 'BEGIN { printf "%.0f", (b - a) * 1000 / n }')
	R_WCPU=$(awk -v a="$w0" -v b="$w1" -v n="$((b1 > b0 ? b1 - b0 : 1))" 'BEGIN { printf "%.0f", (b - a) * 1000 / n }')
	R_NOTE=
	if grep -q 'ERROR\|error\|aborted' "$out"; then
		R_NOTE="pgbench: $(grep -m 2 'ERROR\|error\|aborted' "$out" | tr '\n' ' ')"
	fi
	if [ "$side" != one ]; then
		local row
		row=$(cqd "$node" "${SDB[$side]}" "SELECT count(*) || ' ' || coalesce(min(c), 0) FROM (SELECT bucket, count(*) AS c
		        FROM gridha.bucket_services WHERE ready_at IS NOT NULL GROUP BY bucket) AS x")
		if [ "${row% *}" -lt 64 ] || [ "${row#* }" -lt "$n" ]; then
			R_NOTE="$R_NOTE ran dry? ${row% *} buckets with ready services, at least ${row#* } ready in each (raise CITUS_DEPTH)"
		fi
	else
		local left
		left=$(cq one "SELECT count(*) FROM gridha.batches WHERE status = 'queued'")
		[ "$left" -ge $((64 * CITUS_SERVICES)) ] ||
			R_NOTE="$R_NOTE ran dry? $left batches queued (raise CITUS_DEPTH)"
	fi
}

declare -A RES   # RES[case,side,what] = " v1 v2 ..." over the rounds
add() {
	RES[$1]="${RES[$1]:-} $2"
}

CASES="cycle batch10 batch100"
SIDES="one sql citus"
for ((r = 1; r <= CITUS_ROUNDS; r++)); do
	case $((r % 3)) in
		1) order="one sql citus" ;;
		2) order="citus one sql" ;;
		0) order="sql citus one" ;;
	esac
	for side in $order; do
		for c in $CASES; do
			run1 "$side" "$c"
			add "$c,$side,next" "$R_NEXT"
			add "$c,$side,acc" "$R_ACC"
			add "$c,$side,com" "$R_COM"
			[ -z "$R_NOTE" ] || gridha_log "  WARNING ($c, $side, 1 client): $R_NOTE"
			runN "$side" "$c"
			add "$c,$side,bps" "$R_BPS"
			add "$c,$side,cpu" "$R_CPU"
			[ "$side" != citus ] || add "$c,$side,wcpu" "$R_WCPU"
			[ -z "$R_NOTE" ] || gridha_log "  WARNING ($c, $side, $N clients): $R_NOTE"
		done
		gridha_log "round $r, $side: done ($((SECONDS - T0)) s so far, load $(loadavg))"
	done
done

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------

LOAD_END=$(loadavg)
m() { median "${RES[$1]:-}"; }
echo
echo "citus: gridha $GRIDHA_VERSION's Citus mode beside gridha on one server"
echo "PostgreSQL $PG_VERSION, Citus $CITUS_VERSION, $(nproc) cores, load $LOAD_START -> $LOAD_END; $CITUS_ROUNDS rounds, $N clients, 64 buckets x $CITUS_SERVICES services x $CITUS_DEPTH batches; $((SECONDS - T0)) s"
echo "(a) one: gridha on one server (next_batch(es), report_submission(s), report_status(es));"
echo "(b) sql: the per-bucket functions on one plain server; (c) citus: the Citus mode, a coordinator and 2 workers"
echo "on the same machine, every call made on the coordinator. Medians of the rounds (each round's figure under 'rounds')."
echo
echo "1 client, ms per call: hand-out / report accepted / report committed (a batched call hands out or reports n batches):"
printf '  %-9s %-22s %-22s %-22s %-16s %-16s %s\n' case "(a) one" "(b) sql" "(c) citus" "(c)/(a)" "(c)/(b)" "(b)/(a)"
for c in $CASES; do
	declare -A V=()
	for s in $SIDES; do
		V[$s,n]=$(m "$c,$s,next"); V[$s,a]=$(m "$c,$s,acc"); V[$s,c]=$(m "$c,$s,com")
	done
	rr() { echo "$(ratio "${V[$1,n]}" "${V[$2,n]}") $(ratio "${V[$1,a]}" "${V[$2,a]}") $(ratio "${V[$1,c]}" "${V[$2,c]}")"; }
	printf '  %-9s %-22s %-22s %-22s %-16s %-16s %s\n' "$c" \
		"${V[one,n]} / ${V[one,a]} / ${V[one,c]}" "${V[sql,n]} / ${V[sql,a]} / ${V[sql,c]}" \
		"${V[citus,n]} / ${V[citus,a]} / ${V[citus,c]}" "$(rr citus one)" "$(rr citus sql)" "$(rr sql one)"
done
echo
echo "$N clients: batches/s, server CPU us per batch ((c): coordinator + workers):"
printf '  %-9s %-18s %-18s %-32s %-22s %s\n' case "(a) one" "(b) sql" "(c) citus" "(c)/(a): rate, CPU" "(c)/(b): rate, CPU"
for c in $CASES; do
	ab=$(m "$c,one,bps"); acpu=$(m "$c,one,cpu")
	bb=$(m "$c,sql,bps"); bcpu=$(m "$c,sql,cpu")
	cb=$(m "$c,citus,bps"); ccpu=$(m "$c,citus,cpu"); cw=$(m "$c,citus,wcpu")
	ctot=$(awk -v a="$ccpu" -v b="$cw" 'BEGIN { print a + b }')
	printf '  %-9s %-18s %-18s %-32s %-22s %s\n' "$c" "$ab, $acpu us" "$bb, $bcpu us" \
		"$cb, $ccpu + $cw = $ctot us" "$(ratio "$cb" "$ab") $(ratio "$ctot" "$acpu")" "$(ratio "$cb" "$bb") $(ratio "$ctot" "$bcpu")"
done
echo
echo "rounds:"
for k in $(printf '%s\n' "${!RES[@]}" | sort); do
	printf '  %-22s %s\n' "$k" "${RES[$k]}"
done
