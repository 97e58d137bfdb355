#!/usr/bin/env bash
# test/bench/citus.sh: what the planned Citus mode (docs/citus.md) would cost
# per call, and whether what its design relies on holds on Citus 13.2
# (`make bench`; docs/citus.md, "Measured with a prototype (not gridha)").
#
# It runs a PROTOTYPE of the design's core (test/bench/citus/proto.sql,
# schema cproto), not gridha and not the Citus mode: gridha is not loaded.
# Measures and prints; it never fails on a figure. A check that does not
# hold is printed as NOT HELD with what was seen.
#
# On ONE machine in ONE run, four throwaway PostgreSQL 15 servers of the
# installation CITUS_PG_CONFIG names (only its programs are used; nothing
# is installed into it), 127.0.0.1 only, fsync and synchronous_commit off
# (the commit flush is left out on both sides: a delegated call commits on
# one worker, as a call on one server commits there):
#   (a) plain   one server, the prototype's tables local, the same functions
#   (b) citus   a coordinator and two workers (Citus preloaded), the tables
#               distributed by bucket and co-located (32 shards), the
#               functions distributed with the bucket as distribution
#               argument, plan_cache_mode = force_custom_plan; every call
#               made on the coordinator
# Each side gets the same workload: 64 buckets x CITUS_SERVICES services
# (exactly that many in each bucket), CITUS_DEPTH queued batches each; the
# 64 buckets are taken once (take_bucket, a one-hour lease) by CITUS_CLIENTS
# instances, bucket b by instance b mod CITUS_CLIENTS + 1, at epoch 1.
#
# Words used here:
#   call     one function call of the prototype made by a pgbench client
#   cycle    next_in_bucket -> report_in_bucket(accepted) ->
#            report_in_bucket(committed): three calls, each its own
#            transaction, on one bucket (a client takes its buckets in turn)
#   batch n  next_batches_in_bucket(n) -> report_batches_in_bucket(accepted)
#            -> report_batches_in_bucket(committed) of what it returned
#   round    every case once on each side, (a) first in odd rounds, (b)
#            first in even ones, so a drift of the machine's speed favours
#            neither
#
# Measured, per case (cycle, batch 10, batch 100) and side:
#   1 client   ms per call of each step (pgbench -r over a run of
#              CITUS_SECONDS_1, the client going over all 64 buckets in turn)
#   N clients  batches/s and calls/s (CITUS_CLIENTS clients, each on its own
#              buckets), and the CPU the servers used per batch: plain,
#              coordinator, workers (from /proc: the postmasters and their
#              children), which is what the projection to more nodes rests
#              on. Counted over a window of CITUS_SECONDS after a warm-up of
#              CITUS_WARM seconds (connections between the nodes opened,
#              caches filled), from the rows: final batches =
#              sum(head - 1) of cproto.service_claims. pgbench is then
#              stopped, and the hand-outs its clients left in flight are
#              made ready again (as a take-over does) for the next runs
# Medians over the rounds; (b)/(a) of each.
#
# Checked in the same run (on the Citus side unless it says both):
#   delegation   each function call is sent whole to the node holding its
#                bucket: citus.log_remote_commands shows every take_bucket
#                of the 64 buckets and one call of every other function
#                (enqueue through its SQL wrapper included) issued to the
#                node of the bucket's shard; EXPLAIN of a call; and
#                pg_stat_statements (track = all) over a 1-client run: the
#                coordinator ran none of the functions' statements, the
#                workers ran all of them
#   skip locked  FOR UPDATE SKIP LOCKED inside a delegated function is
#                accepted, and skips: a delegated next_in_bucket while another
#                session holds a service of the same bucket locked returns
#                another service at once
#   fencing      (both) two instances taking the same expired bucket at once
#                (B, C) get one new epoch between them; the old holder's
#                reports of its batch are refused (CP001); the batch goes out
#                again at the new epoch and is committed once; after the
#                refusal the session's calls are still delegated
#   move         a pgbench run of the cycle (CITUS_CLIENTS clients) during
#                which the shard of a busy bucket moves to the other worker
#                (citus_move_shard_placement, logical replication) and back
#                (block_writes): no pgbench error, the bucket's batches
#                committed on all along, rows before = after
#   order        (both, at the end) nothing lost, every service's final
#                batches exactly its seqs below its head, each handed out
#                only after the previous one was final, at most one in flight
#
# Environment (defaults in brackets):
#   CITUS_PG_CONFIG [/usr/lib/postgresql/15/bin/pg_config]  a PostgreSQL 15
#                   with Citus installed (else the bench says so and stops)
#   CITUS_PORT [56700]      first port probed (four are used)
#   CITUS_CLIENTS [4]       N: pgbench clients and instances; divides 64
#   CITUS_ROUNDS [3]        rounds
#   CITUS_SERVICES [128]    services per bucket (at least 100 for batch 100)
#   CITUS_DEPTH [40]        batches queued per service (a run that may
#                           have run dry is flagged: raise it)
#   CITUS_SECONDS_1 [2]     length of a 1-client run
#   CITUS_WARM [1]          warm-up of an N-client run, not counted
#   CITUS_SECONDS [3]       the counted window of an N-client run
#   CITUS_MOVE_PAUSE [2]    seconds of the run before, between and after
#                           the shard moves
#   CITUS_KEEP [0]          1: keep the servers' directory (logs) at exit
#   CITUS_MAX_SECONDS [900] a watchdog stops the servers after this long,
#                           even when this script was killed
set -eu -o pipefail

CITUS_PG_CONFIG=${CITUS_PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
CITUS_PORT=${CITUS_PORT:-56700}
CITUS_CLIENTS=${CITUS_CLIENTS:-4}
CITUS_ROUNDS=${CITUS_ROUNDS:-3}
CITUS_SERVICES=${CITUS_SERVICES:-128}
CITUS_DEPTH=${CITUS_DEPTH:-40}
CITUS_SECONDS_1=${CITUS_SECONDS_1:-2}
CITUS_WARM=${CITUS_WARM:-1}
CITUS_SECONDS=${CITUS_SECONDS:-3}
CITUS_MOVE_PAUSE=${CITUS_MOVE_PAUSE:-2}
CITUS_KEEP=${CITUS_KEEP:-0}
CITUS_MAX_SECONDS=${CITUS_MAX_SECONDS:-900}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PROTO=$HERE/citus/proto.sql

# gridha_log, gridha_as_pg, gridha_free_port; PG_BINDIR of PG_CONFIG
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

DB=cb
N=$CITUS_CLIENTS
PSQL="$PG_BINDIR/psql"
PGBENCH="$PG_BINDIR/pgbench"

# ---------------------------------------------------------------------------
# The servers: plain, coord, w1, w2, each in DIR/<name>
# ---------------------------------------------------------------------------

DIR=$(mktemp -d "${TMPDIR:-/tmp}/gridha-citus.XXXXXX")
chmod 755 "$DIR"
[ "$(id -u)" -ne 0 ] || chown postgres: "$DIR"
NODES="plain coord w1 w2"
declare -A PORT
BG_PIDS=

stop_all() {
	local n
	for n in $NODES; do
		[ -f "$DIR/$n/postmaster.pid" ] || continue
		gridha_as_pg "$PG_BINDIR/pg_ctl" stop -w -t 20 -m fast -D "$DIR/$n" >/dev/null 2>&1 ||
			gridha_as_pg "$PG_BINDIR/pg_ctl" stop -w -t 20 -m immediate -D "$DIR/$n" >/dev/null 2>&1 || true
	done
}

cleanup() {
	local p
	trap - EXIT INT TERM
	for p in $BG_PIDS; do
		kill "$p" 2>/dev/null || true
	done
	stop_all
	if [ "$CITUS_KEEP" = 1 ]; then
		gridha_log "kept $DIR (CITUS_KEEP=1)"
	else
		rm -rf "$DIR"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The watchdog: a process of its own session that stops the servers and
# removes the directory when this script is gone (even killed with -9) or
# after CITUS_MAX_SECONDS.
start_watchdog() {
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
}

# node_start NAME PRELOAD [SETTING...]: initdb and start a server on
# port PORT[NAME].
node_start() {
	local n=$1 preload=$2 port=${PORT[$1]} out
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
		echo "max_connections = 100"
		echo "max_prepared_transactions = 20"
		echo "wal_level = logical"
		echo "log_min_messages = warning"
		echo "log_line_prefix = '%m [%p] '"
		for s in "$@"; do echo "$s"; done
	} >>"$DIR/$n/postgresql.conf"
	gridha_as_pg "$PG_BINDIR/pg_ctl" start -w -t 60 -D "$DIR/$n" -l "$DIR/$n.log" >/dev/null ||
		{ tail -n 20 "$DIR/$n.log" >&2; return 1; }
}

# cq NODE SQL...: psql on NODE's database, unaligned, no headers.
cq() {
	local n=$1
	shift
	"$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "${PORT[$n]}" -U postgres -d "$DB" -c "$@"
}

# cqf NODE [ARG...]: psql on NODE's database, the script on stdin.
cqf() {
	local n=$1
	shift
	"$PSQL" -X -q -A -t -h 127.0.0.1 -p "${PORT[$n]}" -U postgres -d "$DB" "$@"
}

# node_cpu_ms NODE...: CPU (ms, with microseconds) the servers used so far:
# each postmaster and its live children to the nanosecond
# (/proc/PID/schedstat), plus the children it reaped (cutime + cstime of
# the postmaster, in clock ticks; few reap in a window: autovacuum).
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

loadavg() {
	cut -d ' ' -f 1-3 /proc/loadavg
}

# ---------------------------------------------------------------------------
# Start, create, fill
# ---------------------------------------------------------------------------

T0=$SECONDS
CITUS_VERSION=
LOAD_START=$(loadavg)
gridha_log "citus: prototype of the planned Citus mode (not gridha); $(nproc) cores, load $LOAD_START; $N clients, $CITUS_ROUNDS rounds, 64 buckets x $CITUS_SERVICES services x $CITUS_DEPTH batches"
start_watchdog
NEXT_PORT=$CITUS_PORT
for n in $NODES; do
	port=$(gridha_free_port "$NEXT_PORT")
	NEXT_PORT=$((port + 1))
	PORT[$n]=$port
done
# the four at once (initdb is mostly waiting)
for n in $NODES; do
	if [ "$n" = plain ]; then
		node_start plain pg_stat_statements &
	else
		node_start "$n" citus,pg_stat_statements plan_cache_mode=force_custom_plan max_worker_processes=32 &
	fi
	eval "start_pid_$n=\$!"
done
for n in $NODES; do
	eval "wait \$start_pid_$n" || { gridha_log "the $n server did not start"; exit 1; }
done
for n in $NODES; do
	"$PSQL" -X -q -h 127.0.0.1 -p "${PORT[$n]}" -U postgres -d postgres -c "CREATE DATABASE $DB" 2>/dev/null
	cq "$n" "CREATE EXTENSION pg_stat_statements" >/dev/null
done
for n in coord w1 w2; do
	cq "$n" "SET client_min_messages = warning" -c "CREATE EXTENSION citus" >/dev/null
done
cq coord "SELECT citus_set_coordinator_host('127.0.0.1', ${PORT[coord]})" \
	-c "SELECT citus_add_node('127.0.0.1', ${PORT[w1]})" \
	-c "SELECT citus_add_node('127.0.0.1', ${PORT[w2]})" >/dev/null
CITUS_VERSION=$(cq coord "SELECT extversion FROM pg_extension WHERE extname = 'citus'")
PG_VERSION=$(cq plain "SHOW server_version")
gridha_log "servers: plain :${PORT[plain]}, coordinator :${PORT[coord]}, workers :${PORT[w1]} :${PORT[w2]} (PostgreSQL $PG_VERSION, Citus $CITUS_VERSION)"

for n in plain coord; do
	cqf "$n" -v ON_ERROR_STOP=1 >/dev/null <"$PROTO"
done
cq coord "SET client_min_messages = warning" -c "SELECT cproto.distribute()" >/dev/null

# The workload, the same on both sides: exactly CITUS_SERVICES services in
# each bucket, CITUS_DEPTH queued batches each, written directly (set-up,
# not the API; on Citus the batches by an INSERT ... SELECT from the
# co-located service_claims, which each worker runs on its shards).
FILL="
SET client_min_messages = warning;
CREATE TEMP TABLE svc AS
SELECT bucket, service_id FROM (
    SELECT cproto.bucket_of(id) AS bucket, id AS service_id,
           row_number() OVER (PARTITION BY cproto.bucket_of(id) ORDER BY id) AS r
      FROM (SELECT 's' || lpad(i::text, 7, '0') AS id
              FROM generate_series(1, 64 * $CITUS_SERVICES * 3) AS i) AS c) AS x
 WHERE r <= $CITUS_SERVICES;
INSERT INTO cproto.service_claims (bucket, service_id, tail, head, ready_since)
SELECT bucket, service_id, $CITUS_DEPTH, 1, now() FROM svc;
INSERT INTO cproto.batches (bucket, service_id, seq, batch_id, payload)
SELECT s.bucket, s.service_id, q, s.service_id || '-' || q,
       substr(decode(repeat(md5(s.service_id), 8), 'hex'), 1, 100)
  FROM cproto.service_claims AS s, generate_series(1, $CITUS_DEPTH) AS q;
"
for n in plain coord; do
	{
		cq "$n" "$FILL" >/dev/null
		cq "$n" "VACUUM ANALYZE cproto.batches" -c "VACUUM ANALYZE cproto.service_claims" \
			-c "VACUUM ANALYZE cproto.bucket_claims" >/dev/null
	} &
	FILL_PIDS="${FILL_PIDS:-} $!"
done
for p in $FILL_PIDS; do
	wait "$p" || { gridha_log "the fill failed"; exit 1; }
done
ROWS0=$(cq coord "SELECT count(*) FROM cproto.batches")
SVC0=$(cq coord "SELECT count(*) FROM cproto.service_claims")
gridha_log "filled: $SVC0 services, $ROWS0 batches on each side ($((SECONDS - T0)) s so far)"

instance_sql() {
	echo "('00000000-0000-4000-8000-' || lpad(($1)::text, 12, '0'))::uuid"
}
instance() {
	printf '00000000-0000-4000-8000-%012d' "$1"
}

# ---------------------------------------------------------------------------
# Check: delegation of take_bucket, bucket by bucket
# ---------------------------------------------------------------------------

NOT_HELD=0
held() {
	# held WHAT OK DETAIL: one check's line
	if [ "$2" = 1 ]; then
		printf '  held      %s: %s\n' "$1" "$3"
	else
		printf '  NOT HELD  %s: %s\n' "$1" "$3"
		NOT_HELD=$((NOT_HELD + 1))
	fi >>"$DIR/checks.txt"
}
: >"$DIR/checks.txt"

# placement port of each bucket: "bucket port" lines
cq coord "SELECT b, n.nodeport
            FROM generate_series(0, 63) AS b
            JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('cproto.batches', b)
            JOIN pg_dist_node n ON n.groupid = p.groupid
           ORDER BY b" | tr '|' ' ' >"$DIR/placement.txt"

# log_remote_commands NOTICE lines -> "function bucket port" per issued call
parse_issued() {
	awk '/NOTICE:  issuing SELECT cproto\./ {
	         f = $0; sub(/.*issuing SELECT cproto\./, "", f); fn = f; sub(/\(.*/, "", fn)
	         a = f; sub(/^[a-z_]*\(/, "", a)
	         if (fn == "take_bucket") { sub(/^[^,]*, */, "", a) }
	         sub(/[,)].*/, "", a); pending = fn " " a; next }
	     /DETAIL:  on server .*@127\.0\.0\.1:[0-9]+/ && pending != "" {
	         p = $0; sub(/.*@127\.0\.0\.1:/, "", p); sub(/ .*/, "", p); print pending " " p; pending = "" }'
}

{
	echo "SET citus.log_remote_commands = on;"
	for ((b = 0; b < 64; b++)); do
		echo "SELECT cproto.take_bucket($(instance_sql "$b % $N + 1"), $b, '1 hour');"
	done
} | cqf coord -v ON_ERROR_STOP=1 >"$DIR/take.out" 2>"$DIR/take.log"
parse_issued <"$DIR/take.log" >"$DIR/take.issued"
took=$(grep -c '^1$' "$DIR/take.out" || true)
right=$(awk 'NR == FNR { port[$1] = $2; next } $1 == "take_bucket" && port[$2] == $3 { n++ } END { print n + 0 }' \
	"$DIR/placement.txt" "$DIR/take.issued")
held "delegation of take_bucket" "$([ "$right" = 64 ] && [ "$took" = 64 ] && echo 1 || echo 0)" \
	"$right of 64 calls issued whole to the worker holding the bucket's shard ($took took their bucket at epoch 1)"
{
	echo "SET client_min_messages = warning;"
	for ((b = 0; b < 64; b++)); do
		echo "SELECT cproto.take_bucket($(instance_sql "$b % $N + 1"), $b, '1 hour');"
	done
} | cqf plain -v ON_ERROR_STOP=1 >/dev/null

# one call of every other function, on bucket B0, each issued where B0 lives
B0=$(cq coord "SELECT cproto.bucket_of('chk-1')")
I0=$(instance $((B0 % N + 1)))
cqf coord -v ON_ERROR_STOP=1 >"$DIR/calls.out" 2>"$DIR/calls.log" <<EOF
SET citus.log_remote_commands = on;
SELECT cproto.enqueue('chk-1', 'chk-1-1', '\\x01');
SELECT cproto.next_in_bucket($B0, '$I0', 1) AS h \gset
SELECT (:'h'::cproto.handout).service_id AS sid, (:'h'::cproto.handout).batch_id AS bid \gset
SELECT cproto.report_in_bucket($B0, '$I0', 1, :'sid', :'bid', 'accepted');
SELECT cproto.report_in_bucket($B0, '$I0', 1, :'sid', :'bid', 'committed');
SELECT cproto.next_batches_in_bucket($B0, '$I0', 1, 3) AS h \gset
SELECT (:'h'::cproto.handouts).service_ids::text AS sids, (:'h'::cproto.handouts).batch_ids::text AS bids \gset
SELECT cproto.report_batches_in_bucket($B0, '$I0', 1, :'sids', :'bids', 'accepted');
SELECT cproto.report_batches_in_bucket($B0, '$I0', 1, :'sids', :'bids', 'committed');
EOF
parse_issued <"$DIR/calls.log" >"$DIR/calls.issued"
P0=$(awk -v b="$B0" '$1 == b { print $2 }' "$DIR/placement.txt")
for f in enqueue_in_bucket next_in_bucket report_in_bucket next_batches_in_bucket report_batches_in_bucket; do
	want=2
	case $f in enqueue_in_bucket | next_in_bucket | next_batches_in_bucket) want=1 ;; esac
	got=$(awk -v f="$f" -v b="$B0" -v p="$P0" '$1 == f && $2 == b && $3 == p { n++ } END { print n + 0 }' "$DIR/calls.issued")
	what="$f"
	[ "$f" != enqueue_in_bucket ] || what="enqueue (the SQL wrapper, inlined to enqueue_in_bucket(<constant bucket>, ...))"
	held "delegation of $what" "$([ "$got" = "$want" ] && echo 1 || echo 0)" \
		"$got of $want calls issued whole to the worker of bucket $B0 (:$P0)"
done
EXPLAIN_CALL=$(cq coord "EXPLAIN (COSTS OFF) SELECT cproto.next_in_bucket($B0, '$I0', 1)" | tr '\n' ';' | sed 's/;  */; /g')
held "EXPLAIN of a call on the coordinator" "$(echo "$EXPLAIN_CALL" | grep -q "Task Count: 1.*port=$P0" && echo 1 || echo 0)" \
	"$EXPLAIN_CALL"

# ---------------------------------------------------------------------------
# pgbench scripts
# ---------------------------------------------------------------------------

# Every script: the client's next bucket in turn (k), its holder's instance.
# -D: k=-1, nclients, holders (= N), ep (1), n (batch size).
PICK="\\set k (:k + 1) % (64 / :nclients)
\\set b :client_id + :nclients * :k
\\set inst :b % :holders + 1"
INST="('00000000-0000-4000-8000-' || lpad(:inst::text, 12, '0'))::uuid"

cat >"$DIR/cycle.sql" <<EOF
$PICK
SELECT cproto.next_in_bucket(:b, $INST, :ep) AS h \\gset
SELECT ((nullif(:h, '')::cproto.handout).service_id IS NOT NULL)::int AS got, (nullif(:h, '')::cproto.handout).service_id AS sid, (nullif(:h, '')::cproto.handout).batch_id AS bid \\gset
\\if :got
SELECT cproto.report_in_bucket(:b, $INST, :ep, :sid, :bid, 'accepted');
SELECT cproto.report_in_bucket(:b, $INST, :ep, :sid, :bid, 'committed');
\\endif
EOF

cat >"$DIR/batch.sql" <<EOF
$PICK
SELECT cproto.next_batches_in_bucket(:b, $INST, :ep, :n) AS h \\gset
SELECT coalesce(cardinality((nullif(:h, '')::cproto.handouts).service_ids), 0) AS got, (nullif(:h, '')::cproto.handouts).service_ids::text AS sids, (nullif(:h, '')::cproto.handouts).batch_ids::text AS bids \\gset
\\if :got
SELECT cproto.report_batches_in_bucket(:b, $INST, :ep, :sids::text[], :bids::text[], 'accepted');
SELECT cproto.report_batches_in_bucket(:b, $INST, :ep, :sids::text[], :bids::text[], 'committed');
\\endif
EOF

# ---------------------------------------------------------------------------
# Timed runs
# ---------------------------------------------------------------------------

# final_batches SIDE: batches final so far (each service's head - 1).
final_batches() {
	cq "$1" "SELECT sum(head - 1) FROM cproto.service_claims"
}

# run_note OUT N SIDE: what went wrong in a run: pgbench's errors, and a
# bucket left with fewer ready services than a call takes (the run may have
# run dry: raise CITUS_DEPTH).
run_note() {
	local out=$1 n=$2 side=$3 row
	R_NOTE=
	if grep -q 'error\|aborted' "$out"; then
		R_NOTE="pgbench: $(grep -m 2 'error\|aborted' "$out" | tr '\n' ' ')"
	fi
	row=$(cq "$side" "SELECT count(*) || ' ' || coalesce(min(c), 0) FROM (SELECT bucket, count(*) AS c
	                    FROM cproto.service_claims WHERE ready_since IS NOT NULL GROUP BY bucket) AS x")
	if [ "${row% *}" -lt 64 ] || [ "${row#* }" -lt "$n" ]; then
		R_NOTE="$R_NOTE ran dry? ${row% *} buckets with ready services, at least ${row#* } ready in each (raise CITUS_DEPTH)"
	fi
}

# run1 SIDE SCRIPT N: a 1-client run of CITUS_SECONDS_1 seconds on SIDE
# (plain or coord) over the 64 buckets. Sets R_NEXT, R_ACC, R_COM (ms per
# call, pgbench -r) and R_NOTE.
run1() {
	local side=$1 script=$2 n=$3 out=$DIR/run1.out
	timeout $((CITUS_SECONDS_1 + 60)) "$PGBENCH" -n -M prepared -r -h 127.0.0.1 -p "${PORT[$side]}" -U postgres \
		-c 1 -j 1 -T "$CITUS_SECONDS_1" -D k=-1 -D nclients=1 -D holders="$N" -D ep=1 -D n="$n" \
		-f "$DIR/$script.sql" "$DB" >"$out" 2>&1 || true
	R_NEXT=$(awk '/SELECT cproto\.next/ { print $1; exit }' "$out")
	R_ACC=$(awk '/SELECT cproto\.report/ { print $1; exit }' "$out")
	R_COM=$(awk '/SELECT cproto\.report/ { if (++k == 2) { print $1; exit } }' "$out")
	R_NOTE=
	if grep -q 'error\|aborted' "$out"; then
		R_NOTE="pgbench: $(grep -m 2 'error\|aborted' "$out" | tr '\n' ' ')"
	fi
}

# runN SIDE SCRIPT N: an N-client run on SIDE, each client on its own
# buckets; counted over CITUS_SECONDS after CITUS_WARM, then stopped. Sets R_BPS
# (batches/s), R_CPU (us of server CPU per batch: plain, or the
# coordinator's), R_WCPU (the workers', on coord), R_NOTE.
runN() {
	local side=$1 script=$2 n=$3 out=$DIR/runN.out total pid b0 b1 c0 c1 w0=0 w1=0 t0 t1
	# pgbench is stopped (by its pid) once the window is counted: its own
	# end must not fall inside the window on a slow machine
	total=$(awk -v a="$CITUS_WARM" -v b="$CITUS_SECONDS" 'BEGIN { printf "%d", a + b + 60 }')
	timeout $((total + 60)) "$PGBENCH" -n -M prepared -h 127.0.0.1 -p "${PORT[$side]}" -U postgres \
		-c "$N" -j 2 -T "$total" -D k=-1 -D nclients="$N" -D holders="$N" -D ep=1 -D n="$n" \
		-f "$DIR/$script.sql" "$DB" >"$out" 2>&1 &
	pid=$!
	BG_PIDS="$BG_PIDS $pid"
	sleep "$CITUS_WARM"
	b0=$(final_batches "$side")
	t0=$(date +%s.%N)
	if [ "$side" = plain ]; then c0=$(node_cpu_ms plain); else c0=$(node_cpu_ms coord); w0=$(node_cpu_ms w1 w2); fi
	sleep "$CITUS_SECONDS"
	if [ "$side" = plain ]; then c1=$(node_cpu_ms plain); else c1=$(node_cpu_ms coord); w1=$(node_cpu_ms w1 w2); fi
	t1=$(date +%s.%N)
	b1=$(final_batches "$side")
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	# the stopped clients' hand-outs stay in flight: ready again (what a
	# take-over does; their batches go out again), so that the next runs
	# find every service
	cq "$side" "UPDATE cproto.service_claims SET in_flight = false, ready_since = now() WHERE in_flight" >/dev/null
	R_BPS=$(awk -v b="$((b1 - b0))" -v a="$t0" -v c="$t1" 'BEGIN { printf "%.0f", b / (c - a) }')
	R_CPU=$(awk -v a="$c0" -v b="$c1" -v n="$((b1 > b0 ? b1 - b0 : 1))" 'BEGIN { printf "%.0f", (b - a) * 1000 / n }')
	R_WCPU=$(awk -v a="$w0" -v b="$w1" -v n="$((b1 > b0 ? b1 - b0 : 1))" 'BEGIN { printf "%.0f", (b - a) * 1000 / n }')
	run_note "$out" "$n" "$side"
}

declare -A RES   # RES[case,side,what] = " v1 v2 ..." over the rounds
add() {
	RES[$1]="${RES[$1]:-} $2"
}

CASES="cycle batch10 batch100"
for ((r = 1; r <= CITUS_ROUNDS; r++)); do
	if [ $((r % 2)) = 1 ]; then sides="plain coord"; else sides="coord plain"; fi
	for side in $sides; do
		for c in $CASES; do
			case $c in
				cycle) script=cycle n=1 ;;
				batch10) script=batch n=10 ;;
				batch100) script=batch n=100 ;;
			esac
			run1 "$side" "$script" "$n"
			add "$c,$side,next" "$R_NEXT"
			add "$c,$side,acc" "$R_ACC"
			add "$c,$side,com" "$R_COM"
			[ -z "$R_NOTE" ] || gridha_log "  WARNING ($c, $side, 1 client): $R_NOTE"
			runN "$side" "$script" "$n"
			add "$c,$side,bps" "$R_BPS"
			add "$c,$side,cpu" "$R_CPU"
			[ "$side" = plain ] || add "$c,$side,wcpu" "$R_WCPU"
			[ -z "$R_NOTE" ] || gridha_log "  WARNING ($c, $side, $N clients): $R_NOTE"
		done
		gridha_log "round $r, $side: done ($((SECONDS - T0)) s so far)"
	done
done

# ---------------------------------------------------------------------------
# Check: the functions' statements ran on the workers, none on the coordinator
# ---------------------------------------------------------------------------

for n in coord w1 w2; do
	cq "$n" "ALTER SYSTEM SET pg_stat_statements.track = 'all'" >/dev/null
	cq "$n" "SELECT pg_reload_conf()" -c "SELECT pg_stat_statements_reset()" >/dev/null
done
sleep 0.5
timeout 60 "$PGBENCH" -n -M prepared -h 127.0.0.1 -p "${PORT[coord]}" -U postgres -c 1 -t 64 \
	-D k=-1 -D nclients=1 -D holders="$N" -D ep=1 -D n=1 -f "$DIR/cycle.sql" "$DB" >"$DIR/stmts.out" 2>&1 || true
stmts() {
	# stmts NODE PATTERN: calls of statements of this database matching PATTERN
	cq "$1" "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
	          WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
	            AND query ~ '$2'"
}
# the functions' statements name their tables with an alias (shard names
# on the workers have a suffix)
PAT_INNER='cproto\.(batches|service_claims|bucket_claims)(_[0-9]+)? [a-z]'
coord_calls=$(stmts coord '^SELECT cproto\.next_in_bucket')
coord_inner=$(stmts coord "$PAT_INNER")
w_calls=$(( $(stmts w1 '^SELECT cproto\.next_in_bucket') + $(stmts w2 '^SELECT cproto\.next_in_bucket') ))
w_inner1=$(stmts w1 "$PAT_INNER")
w_inner2=$(stmts w2 "$PAT_INNER")
held "the functions' statements run on the workers only (pg_stat_statements, track = all, 64 cycles)" \
	"$([ "$coord_inner" = 0 ] && [ "$w_calls" = 64 ] && [ "$w_inner1" -gt 0 ] && [ "$w_inner2" -gt 0 ] && echo 1 || echo 0)" \
	"coordinator: $coord_calls calls of next_in_bucket, $coord_inner statements on the tables; workers: $w_calls calls of next_in_bucket, $w_inner1 and $w_inner2 statements on the tables"
for n in coord w1 w2; do
	cq "$n" "ALTER SYSTEM RESET pg_stat_statements.track" -c "SELECT pg_reload_conf()" >/dev/null
done

# ---------------------------------------------------------------------------
# Check: FOR UPDATE SKIP LOCKED inside a delegated call skips a locked service
# ---------------------------------------------------------------------------

B1=$(awk -v p="${PORT[w1]}" '$2 == p { print $1; exit }' "$DIR/placement.txt")
I1=$(instance $((B1 % N + 1)))
# session A: in a transaction block (Citus does not delegate a call inside
# one: the function runs on the coordinator, each statement routed to the
# worker), hands out a head of bucket B1 and keeps its locks 4 s
cqf coord >"$DIR/skipA.out" 2>"$DIR/skipA.log" <<EOF &
SET citus.log_remote_commands = on;
BEGIN;
SELECT cproto.next_in_bucket($B1, '$I1', 1);
SELECT pg_sleep(4);
COMMIT;
EOF
skip_pid=$!
BG_PIDS="$BG_PIDS $skip_pid"
sleep 1.5
t_skip0=$(date +%s.%N)
cqf coord >"$DIR/skipB.out" 2>"$DIR/skipB.log" <<EOF
SET citus.log_remote_commands = on;
SELECT cproto.next_in_bucket($B1, '$I1', 1);
EOF
t_skip=$(awk -v a="$t_skip0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
wait "$skip_pid" || true
sA=$(sed -n 's/^(\([^,]*\),.*/\1/p' "$DIR/skipA.out" | head -n 1)
sB=$(sed -n 's/^(\([^,]*\),.*/\1/p' "$DIR/skipB.out" | head -n 1)
B_delegated=$(grep -c "issuing SELECT cproto.next_in_bucket($B1," "$DIR/skipB.log" || true)
A_delegated=$(grep -c "issuing SELECT cproto.next_in_bucket($B1," "$DIR/skipA.log" || true)
held "FOR UPDATE SKIP LOCKED in a delegated call skips a locked service" \
	"$([ -n "$sA" ] && [ -n "$sB" ] && [ "$sA" != "$sB" ] && [ "$B_delegated" = 1 ] && awk -v t="$t_skip" 'BEGIN { exit !(t < 2.0) }' && echo 1 || echo 0)" \
	"session A (in a transaction block; call delegated: $A_delegated) took $sA and kept it locked 4 s; the delegated call of session B (delegated: $B_delegated) took $sB in ${t_skip}s"
# report both, so that nothing stays in flight (two statements: Citus
# refuses a call of a distributed function from a query on a distributed
# table, "cannot execute a distributed query from a query on a shard")
for s in $sA $sB; do
	bid=$(cq coord "SELECT batch_id FROM cproto.batches
	                 WHERE bucket = $B1 AND service_id = '$s' AND status = 'submitting'")
	[ -z "$bid" ] || cq coord "SELECT cproto.report_in_bucket($B1, '$I1', 1, '$s', '$bid', 'committed')" >/dev/null
done

# ---------------------------------------------------------------------------
# Check: the shard of a busy bucket moves during a run
# ---------------------------------------------------------------------------

MB=$B1
MSHARD=$(cq coord "SELECT get_shard_id_for_distribution_column('cproto.batches', $MB)")
rows_before=$(cq coord "SELECT count(*) FROM cproto.batches")
com_before=$(cq coord "SELECT count(*) FROM cproto.batches WHERE bucket = $MB AND status = 'committed'")
move_t0=$SECONDS
timeout 300 "$PGBENCH" -n -M prepared -h 127.0.0.1 -p "${PORT[coord]}" -U postgres \
	-c "$N" -j 2 -T 240 -D k=-1 -D nclients="$N" -D holders="$N" -D ep=1 -D n=1 \
	-f "$DIR/cycle.sql" "$DB" >"$DIR/move.out" 2>&1 &
move_pid=$!
BG_PIDS="$BG_PIDS $move_pid"
sleep "$CITUS_MOVE_PAUSE"
t1=$SECONDS
move1=$(cq coord "SELECT citus_move_shard_placement($MSHARD, '127.0.0.1', ${PORT[w1]}, '127.0.0.1', ${PORT[w2]},
                                                    shard_transfer_mode => 'force_logical')" 2>&1 && echo ok) || true
t1=$((SECONDS - t1))
com_mid=$(cq coord "SELECT count(*) FROM cproto.batches WHERE bucket = $MB AND status = 'committed'")
# the source's copy is dropped later by Citus; drop it now, so that the
# shard can move back
cq coord "CALL citus_cleanup_orphaned_resources()" >/dev/null 2>&1 || true
sleep "$CITUS_MOVE_PAUSE"
t2=$SECONDS
move2=$(cq coord "SELECT citus_move_shard_placement($MSHARD, '127.0.0.1', ${PORT[w2]}, '127.0.0.1', ${PORT[w1]},
                                                    shard_transfer_mode => 'block_writes')" 2>&1 && echo ok) || true
t2=$((SECONDS - t2))
sleep "$CITUS_MOVE_PAUSE"
running=0
! kill -0 "$move_pid" 2>/dev/null || running=1
kill "$move_pid" 2>/dev/null || true
wait "$move_pid" 2>/dev/null || true
move_secs=$((SECONDS - move_t0))
com_after=$(cq coord "SELECT count(*) FROM cproto.batches WHERE bucket = $MB AND status = 'committed'")
rows_after=$(cq coord "SELECT count(*) FROM cproto.batches")
move_err=$(grep -c 'error\|aborted' "$DIR/move.out" || true)
held "a busy bucket's shard moved during a run (there: logical replication, ${t1}s; back: block_writes, ${t2}s)" \
	"$([ "${move1##*$'\n'}" = ok ] && [ "${move2##*$'\n'}" = ok ] && [ "$rows_before" = "$rows_after" ] &&
		[ "$com_mid" -gt "$com_before" ] && [ "$com_after" -gt "$com_mid" ] && [ "$move_err" = 0 ] && [ "$running" = 1 ] && echo 1 || echo 0)" \
	"shard $MSHARD (bucket $MB and its co-located shards): batches $rows_before before, $rows_after after; bucket $MB committed $com_before -> $com_mid (first move done) -> $com_after; the run ($N clients) lasted ${move_secs}s, $move_err pgbench errors${move1:+; there: $(echo "$move1" | tail -n 1)}${move2:+; back: $(echo "$move2" | tail -n 1)}"
[ "$move_err" = 0 ] || grep -m 3 'error\|aborted' "$DIR/move.out" | sed 's/^/    /' >>"$DIR/checks.txt"

# ---------------------------------------------------------------------------
# Check: fencing (both sides)
# ---------------------------------------------------------------------------

fence_check() {
	local side=$1 F=$2 A B C eA out sid bid eB eC win lose refused1 again deleg
	A=$(instance $((F % N + 1)))
	B=00000000-0000-4000-9000-00000000000b
	C=00000000-0000-4000-9000-00000000000c
	eA=$(cq "$side" "SELECT cproto.take_bucket('$A', $F, '1 second')")
	# every call a lone `SELECT f(...)`, which Citus delegates
	out=$(cq "$side" "SELECT cproto.next_in_bucket($F, '$A', $eA)")
	sid=$(echo "$out" | sed -n 's/^(\([^,]*\),\([^,]*\),.*/\1/p')
	bid=$(echo "$out" | sed -n 's/^(\([^,]*\),\([^,]*\),.*/\2/p')
	attA=$(echo "$out" | sed -n 's/^(\([^,]*\),\([^,]*\),\([^,]*\),\([^,]*\),\([^,]*\),.*/\5/p')
	early=$(cq "$side" "SELECT cproto.take_bucket('$B', $F)")
	sleep 1.3
	# B and C at once
	cq "$side" "SELECT cproto.take_bucket('$B', $F)" >"$DIR/fenceB" 2>&1 &
	local pb=$!
	cq "$side" "SELECT cproto.take_bucket('$C', $F)" >"$DIR/fenceC" 2>&1 &
	local pc=$!
	wait "$pb" "$pc" || true
	eB=$(cat "$DIR/fenceB")
	eC=$(cat "$DIR/fenceC")
	# an empty answer is NULL: the bucket is held by another
	early=${early:-null}
	eB=${eB:-null}
	eC=${eC:-null}
	if [ "$eB" != null ]; then win=$B; lose=$C; eW=$eB; else win=$C; lose=$B; eW=$eC; fi
	# A's reports (stale), then the winner hands out what is ready (A's batch
	# again among it) and commits it, then A reports again; one session for
	# A's calls, to see that a refusal does not stop the delegation
	cqf "$side" >"$DIR/fenceA.out" 2>"$DIR/fenceA.log" <<EOF
SET citus.log_remote_commands = on;
SELECT cproto.report_in_bucket($F, '$A', $eA, '$sid', '$bid', 'accepted');
SELECT cproto.take_bucket('$A', $F);
EOF
	cqf "$side" -v ON_ERROR_STOP=1 >/dev/null <<EOF
SELECT cproto.next_batches_in_bucket($F, '$win', $eW, 1000) AS h \gset
SELECT cproto.report_batches_in_bucket($F, '$win', $eW, (:'h'::cproto.handouts).service_ids,
                                       (:'h'::cproto.handouts).batch_ids, 'committed');
EOF
	cqf "$side" >>"$DIR/fenceA.out" 2>>"$DIR/fenceA.log" <<EOF
SELECT cproto.report_in_bucket($F, '$A', $eA, '$sid', '$bid', 'committed');
EOF
	refused1=$(grep -c 'ERROR:  instance .* does not hold bucket' "$DIR/fenceA.log" || true)
	again=$(cq "$side" "SELECT status || ' epoch ' || epoch || ' attempts ' || attempts FROM cproto.batches
	                     WHERE bucket = $F AND service_id = '$sid' AND batch_id = '$bid'")
	deleg=$(grep -c "issuing SELECT cproto.take_bucket" "$DIR/fenceA.log" || true)
	lose2=$(cq "$side" "SELECT cproto.take_bucket('$lose', $F)")
	lose2=${lose2:-null}
	local ok=0
	if [ "$early" = null ] && { [ "$eB" = null ] || [ "$eC" = null ]; } && [ "$eW" = $((eA + 1)) ] &&
		[ "$refused1" = 2 ] && [ "$again" = "committed epoch $eW attempts $((attA + 1))" ] && [ "$lose2" = null ] &&
		{ [ "$side" = plain ] || [ "$deleg" = 1 ]; }; then
		ok=1
	fi
	local d=
	[ "$side" = plain ] || d="; after the refusal the session's next call was delegated: $deleg"
	held "fencing on $side (bucket $F)" "$ok" \
		"holder A at epoch $eA handed out $bid (attempt $attA); B while A's lease ran: $early; after it expired B and C at once: $eB and $eC; A's accepted and committed reports refused: $refused1 of 2; $bid then $again; the loser again: $lose2$d"
}
FB=$(awk -v p="${PORT[w2]}" '$2 == p { print $1; exit }' "$DIR/placement.txt")
fence_check plain "$FB"
fence_check coord "$FB"

# ---------------------------------------------------------------------------
# Check: nothing lost, order kept (both sides)
# ---------------------------------------------------------------------------

ORDER_SQL="
SELECT count(*),
       count(*) FILTER (WHERE final AND seq >= head),
       count(*) FILTER (WHERE NOT final AND seq < head),
       count(*) FILTER (WHERE handed_out_at < prev_finished),
       count(*) FILTER (WHERE status IN ('submitting', 'pending') AND seq <> head),
       count(*) FILTER (WHERE attempts > 1),
       count(*) FILTER (WHERE final)
  FROM (SELECT b.seq, b.status, b.attempts, b.handed_out_at, s.head,
               b.status IN ('committed', 'rejected') AS final,
               lag(b.finished_at) OVER (PARTITION BY b.bucket, b.service_id ORDER BY b.seq) AS prev_finished
          FROM cproto.batches b
          JOIN cproto.service_claims s ON s.bucket = b.bucket AND s.service_id = b.service_id) AS x"
for side in plain coord; do
	IFS='|' read -r total beyond below early_h stray retried final <<<"$(cq "$side" "$ORDER_SQL")"
	expect=$ROWS0
	[ "$side" = plain ] || expect=$((ROWS0 + 1))	# chk-1-1, enqueued by the delegation check
	held "nothing lost, order kept on $side" \
		"$([ "$total" = "$expect" ] && [ "$beyond" = 0 ] && [ "$below" = 0 ] && [ "$early_h" = 0 ] && [ "$stray" = 0 ] && echo 1 || echo 0)" \
		"$total batches ($expect enqueued), $final final; final at or past the head: $beyond, not final below it: $below, handed out before the previous was final: $early_h, in flight but not the head: $stray; handed out more than once (take-overs, and the runs the bench stopped): $retried"
done

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------

LOAD_END=$(loadavg)
m() { median "${RES[$1]:-}"; }
echo
echo "citus: a PROTOTYPE of the planned Citus mode (test/bench/citus/proto.sql), not gridha"
echo "PostgreSQL $PG_VERSION, Citus $CITUS_VERSION, $(nproc) cores, load $LOAD_START -> $LOAD_END; $CITUS_ROUNDS rounds, $N clients, 64 buckets x $CITUS_SERVICES services x $CITUS_DEPTH batches; $((SECONDS - T0)) s"
echo "(a) plain: one server; (b) citus: a coordinator and 2 workers on the same machine, every call made on the coordinator."
echo "Medians of the rounds (each round's figure under 'rounds')."
echo
echo "1 client, ms per call: next / accepted / committed (a batch call hands out or reports n batches):"
printf '  %-9s %-26s %-26s %s\n' case "(a) plain" "(b) citus" "(b)/(a): next accepted committed"
for c in $CASES; do
	an=$(m "$c,plain,next"); aa=$(m "$c,plain,acc"); ac=$(m "$c,plain,com")
	bn=$(m "$c,coord,next"); ba=$(m "$c,coord,acc"); bc=$(m "$c,coord,com")
	printf '  %-9s %-26s %-26s %s %s %s\n' "$c" "$an / $aa / $ac" "$bn / $ba / $bc" \
		"$(ratio "$bn" "$an")" "$(ratio "$ba" "$aa")" "$(ratio "$bc" "$ac")"
done
echo
echo "$N clients: batches/s (calls/s), server CPU us per batch:"
printf '  %-9s %-30s %-40s %s\n' case "(a) plain" "(b) citus: CPU coordinator + workers" "(b)/(a): rate, CPU"
for c in $CASES; do
	case $c in cycle) n=1 ;; batch10) n=10 ;; batch100) n=100 ;; esac
	ab=$(m "$c,plain,bps"); acpu=$(m "$c,plain,cpu")
	bb=$(m "$c,coord,bps"); bcpu=$(m "$c,coord,cpu"); bw=$(m "$c,coord,wcpu")
	btot=$(awk -v a="$bcpu" -v b="$bw" 'BEGIN { print a + b }')
	printf '  %-9s %-30s %-40s %s %s\n' "$c" \
		"$ab ($(awk -v b="$ab" -v n="$n" 'BEGIN { printf "%.0f", 3 * b / n }')), $acpu us" \
		"$bb ($(awk -v b="$bb" -v n="$n" 'BEGIN { printf "%.0f", 3 * b / n }')), $bcpu + $bw = $btot us" \
		"$(ratio "$bb" "$ab")" "$(ratio "$btot" "$acpu")"
done
echo
echo "rounds:"
for k in $(printf '%s\n' "${!RES[@]}" | sort); do
	printf '  %-20s %s\n' "$k" "${RES[$k]}"
done
echo
echo "checks (what the design relies on):"
cat "$DIR/checks.txt"
echo "citus: $NOT_HELD checks did not hold"
