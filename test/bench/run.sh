#!/usr/bin/env bash
# test/bench/run.sh: gridha's throughput benchmark (`make bench`).
#
# Measures and prints; it never fails on a figure. Everything runs on ONE
# throwaway cluster that this script starts (as the postgres user, in its own
# temp directory, on a free port near $BENCH_PORT) and removes at exit.
#
# Words used here:
#   batch      one unit of work that goes through three steps, each its own
#              transaction: take, mark accepted, mark done
#   cycle      one pgbench script run: the three steps for one batch (or, for
#              gridha, a next_batch that found nothing: an empty cycle)
#   bare       the baseline: a plain table used as a queue, taken with
#              FOR UPDATE SKIP LOCKED through a partial index on the queued rows
#   gridha     next_batch -> report_submission(accepted) ->
#              report_status(committed), each pgbench client its own instance
#   batches/s  batches that reached committed during a timed run, counted in
#              the database (committed rows after - before), divided by the
#              run's wall-clock time. pgbench's own tps counts cycles, which
#              for gridha includes empty ones; it is printed for information.
#
# What it runs:
#   (a)+(b) bare vs gridha with the same services, payload size, clients and
#           duration, in pairs of runs back to back, first with
#           synchronous_commit = on, then off. Which side goes first
#           alternates from pair to pair (bare-gridha, gridha-bare, ...), so
#           a drift of the machine's speed favours neither. The ratio checked
#           against the target is the median of the pairs' ratios: each
#           compares two runs made under nearly the same conditions, where
#           "best run of each side" compares runs that may be minutes apart.
#   (c)     the gridha cycle at 10 services x 10k queued batches (small) and
#           at 10k services x 100 queued batches each = 1M (large).
#   (d)     the comparison (a)+(b) again in two more shapes, with
#           synchronous_commit = BENCH_SHAPES_SYNC: "idle", the gridha side's
#           instances also holding BENCH_IDLE (100,000) claimed services
#           with nothing to do (written directly in the state the API leaves
#           them: test/bench/idle_direct.sql; kept alive whenever they do
#           not cycle themselves, see keepalive_start), the bare side as in
#           (a); and
#           "finished", BENCH_FINISHED (2,000,000) finished batches on each
#           side before the queued ones (gridha: committed batches of the
#           same services, appended as a restore writes them; bare: rows
#           with status committed). BENCH_SHAPES=0 skips it.
#   (p)     a profile (pg_stat_statements, track = all) of one bare and two
#           gridha runs: which statement costs what. BENCH_PROFILE=0 skips it.
#
# Choices that affect the figures:
#   - Both kinds run with pgbench -M prepared (no parse/plan per statement on
#     either side), each statement in its own transaction (autocommit).
#   - Before every timed run: VACUUM ANALYZE of the tables involved, then a
#     CHECKPOINT, so every run starts from the same state (no dead rows left
#     by the previous run; each pays the same full-page images). A run lasts
#     less than autovacuum's naptime, so what is measured is the first
#     seconds after a vacuum; both queues degrade alike when runs are longer.
#   - gridha runs are preceded by a warm-up that settles the split of the
#     claims over the instances (see gridha_warmup); the timed run then uses
#     the product's default settings (renew 10 s, soft expiry 30 s, balance on).
#   - The scale runs use synchronous_commit = off (BENCH_SCALE_SYNC): with it
#     on, the commit flush dominates and would hide what the number of
#     services and batches costs.
#   - Each run also reports the CPU the cluster used per batch and the WAL
#     written per batch: on a shared machine batches/s moves with the
#     neighbours' load, CPU per batch much less. "flushes" counts the WAL
#     fsyncs per batch: with synchronous_commit on, each of a batch's three
#     commits waits for one, and fewer than three per batch means commits
#     shared a flush (group commit).
#
# Environment (defaults in brackets):
#   BENCH_SECONDS [15]   length of each timed run
#   BENCH_CLIENTS [8]    pgbench clients (= gridha instances)
#   BENCH_JOBS [2]       pgbench threads
#   BENCH_PAIRS [4]      bare/gridha pairs of each synchronous_commit setting
#   BENCH_ROUNDS [2]     runs of each scale case; the best is reported
#   BENCH_WARMUP [4]     seconds of each gridha warm-up run
#   BENCH_SERVICES [64]  services in the bare/gridha comparison
#   BENCH_PAYLOAD [100]  payload bytes of every batch
#   BENCH_SCALE_SYNC [off]  synchronous_commit for the scale runs
#   BENCH_PROFILE [1]    run the profile (p)
#   BENCH_SCALE [1]      run the scale comparison (c)
#   BENCH_COMPARE [1]    run the comparison (a)+(b)
#   BENCH_SHAPES [1]     run the shapes (d)
#   BENCH_SHAPE_LIST ["idle finished"]  the shapes (d) runs
#   BENCH_SHAPES_SYNC [on]  synchronous_commit for the shapes
#   BENCH_IDLE [100000]  idle claimed services of the "idle" shape
#   BENCH_FINISHED [2000000]  finished batches of the "finished" shape
#   BENCH_PORT [55443]   first port probed
#   BENCH_KEEP [0]       1: keep the cluster's directory (logs) at exit
#   PG_CONFIG [/usr/lib/postgresql/15/bin/pg_config]  the PostgreSQL to use

set -eu -o pipefail

BENCH_SECONDS=${BENCH_SECONDS:-15}
BENCH_CLIENTS=${BENCH_CLIENTS:-8}
BENCH_JOBS=${BENCH_JOBS:-2}
BENCH_PAIRS=${BENCH_PAIRS:-4}
BENCH_ROUNDS=${BENCH_ROUNDS:-2}
BENCH_WARMUP=${BENCH_WARMUP:-4}
BENCH_SERVICES=${BENCH_SERVICES:-64}
BENCH_PAYLOAD=${BENCH_PAYLOAD:-100}
BENCH_SCALE_SYNC=${BENCH_SCALE_SYNC:-off}
BENCH_PROFILE=${BENCH_PROFILE:-1}
BENCH_SCALE=${BENCH_SCALE:-1}
BENCH_COMPARE=${BENCH_COMPARE:-1}
BENCH_SHAPES=${BENCH_SHAPES:-1}
BENCH_SHAPE_LIST=${BENCH_SHAPE_LIST:-idle finished}
BENCH_SHAPES_SYNC=${BENCH_SHAPES_SYNC:-on}
BENCH_IDLE=${BENCH_IDLE:-100000}
BENCH_FINISHED=${BENCH_FINISHED:-2000000}
BENCH_PORT=${BENCH_PORT:-55443}
BENCH_KEEP=${BENCH_KEEP:-0}

# The scale cases, as the project states them.
SMALL_SERVICES=10
SMALL_DEPTH=10000
LARGE_SERVICES=10000
LARGE_DEPTH=100

# Targets (ratios), printed next to the figures: gridha's 3-step cycle at
# 0.95 of the bare queue's in every shape (issue 41, item 3).
TARGET_SYNC_ON=0.95
TARGET_SYNC_OFF=0.95
TARGET_SHAPES=0.95
TARGET_SCALE=0.75

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# Settings from the caller's environment must not leak into the runs.
unset PGDATABASE PGOPTIONS PGPASSWORD PGSERVICE PGSSLMODE PGHOST PGPORT PGUSER

log() {
	printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2
}

die() {
	log "ERROR: $*"
	exit 1
}

# gridha_as_pg, gridha_missing_packages, gridha_missing_note, gridha_free_port;
# PG_CONFIG (default Debian's 15) and its PG_BINDIR
# shellcheck source=../lib.sh
. "$ROOT/test/lib.sh"

# ---------------------------------------------------------------------------
# Packages and build
# ---------------------------------------------------------------------------

install_missing_packages() {
	local need
	need=$(gridha_missing_packages | tr '\n' ' ')
	if [ -n "${need% }" ]; then
		# shellcheck disable=SC2086 # one word per package
		die "$(gridha_missing_note $need)"
	fi
	if [ "$BENCH_PROFILE" = 1 ] &&
			[ ! -f "$("$PG_CONFIG" --pkglibdir)/pg_stat_statements.so" ]; then
		log "pg_stat_statements is not installed: skipping the profile"
		BENCH_PROFILE=0
	fi
}

build_extension() {
	log "building and installing gridha"
	(cd "$ROOT" && make -s PG_CONFIG="$PG_CONFIG" >/dev/null &&
		make -s PG_CONFIG="$PG_CONFIG" install >/dev/null) ||
		die "make && make install failed"
}

# ---------------------------------------------------------------------------
# The cluster
# ---------------------------------------------------------------------------

BENCH_DIR=
PGPORT=

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$BENCH_DIR" ] && [ -d "$BENCH_DIR/data" ]; then
		gridha_as_pg "$PG_BINDIR/pg_ctl" stop -w -t 30 -m fast -D "$BENCH_DIR/data" >/dev/null 2>&1 ||
			gridha_as_pg "$PG_BINDIR/pg_ctl" stop -w -t 30 -m immediate -D "$BENCH_DIR/data" >/dev/null 2>&1 || true
	fi
	if [ -n "$BENCH_DIR" ]; then
		if [ "$BENCH_KEEP" = 1 ]; then
			log "kept $BENCH_DIR (BENCH_KEEP=1)"
		else
			rm -rf "$BENCH_DIR"
		fi
	fi
	exit "$rc"
}

# start_cluster [EXTRA_SETTING...]: (re)start with the base settings plus
# the given ones (name=value).
start_cluster() {
	{
		cat <<EOF
port = $PGPORT
listen_addresses = ''
unix_socket_directories = '$BENCH_DIR'
max_connections = 50
shared_buffers = '512MB'
# Durability as in production: synchronous_commit = on must cost a flush.
fsync = on
full_page_writes = on
synchronous_commit = on
# No checkpoint in the middle of a timed run (one is forced before each).
max_wal_size = '8GB'
checkpoint_timeout = '30min'
log_min_messages = warning
log_line_prefix = '%m [%p] '
EOF
		local kv
		for kv in "$@"; do
			printf "%s = '%s'\n" "${kv%%=*}" "${kv#*=}"
		done
	} >"$BENCH_DIR/bench.conf"
	[ "$(id -u)" -ne 0 ] || chown postgres: "$BENCH_DIR/bench.conf"
	gridha_as_pg "$PG_BINDIR/pg_ctl" start -w -t 60 -D "$BENCH_DIR/data" -l "$BENCH_DIR/postgres.log" >/dev/null ||
		{ tail -n 20 "$BENCH_DIR/postgres.log" >&2; die "the server did not start"; }
}

stop_cluster() {
	gridha_as_pg "$PG_BINDIR/pg_ctl" stop -w -t 60 -m fast -D "$BENCH_DIR/data" >/dev/null
}

init_cluster() {
	BENCH_DIR=$(mktemp -d /tmp/gridha-bench.XXXXXX)
	chmod 755 "$BENCH_DIR"
	[ "$(id -u)" -ne 0 ] || chown postgres: "$BENCH_DIR"
	PGPORT=$(gridha_free_port "$BENCH_PORT") || die "no free port near $BENCH_PORT"
	gridha_as_pg "$PG_BINDIR/initdb" -D "$BENCH_DIR/data" --auth=trust -U postgres \
		--encoding=UTF8 --locale=C.UTF-8 >"$BENCH_DIR/initdb.log" 2>&1 ||
		{ cat "$BENCH_DIR/initdb.log" >&2; die "initdb failed"; }
	echo "include = '$BENCH_DIR/bench.conf'" >>"$BENCH_DIR/data/postgresql.conf"
	mkdir -p "$BENCH_DIR/scripts"
	start_cluster
	log "cluster up: $BENCH_DIR, port $PGPORT"
}

# q DB SQL: run SQL, print the result unaligned without headers.
q() {
	local db=$1
	shift
	"$PG_BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$BENCH_DIR" -p "$PGPORT" \
		-U postgres -d "$db" -c "$@"
}

# qf DB: run SQL from stdin.
qf() {
	"$PG_BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$BENCH_DIR" -p "$PGPORT" \
		-U postgres -d "$1"
}

set_sync() {
	q postgres "ALTER SYSTEM SET synchronous_commit = '$1'" >/dev/null
	q postgres "SELECT pg_reload_conf()" >/dev/null
	sleep 0.2
}

# ---------------------------------------------------------------------------
# Schemas, loads, refills
# ---------------------------------------------------------------------------

# A fixed payload of BENCH_PAYLOAD bytes (random bytes, not compressible).
PAYLOAD_SQL="decode(substr(repeat(md5('gridha-bench'), ($BENCH_PAYLOAD / 16) + 1), 1, 2 * $BENCH_PAYLOAD), 'hex')"

# setup_gridha_db DB: a database with the extension and the load helpers.
setup_gridha_db() {
	q postgres "CREATE DATABASE $1" >/dev/null
	qf "$1" >/dev/null <<EOF
CREATE EXTENSION gridha;

-- bench_payload(): the payload of every batch, gridha's and bare's alike.
CREATE FUNCTION bench_payload() RETURNS bytea
LANGUAGE sql IMMUTABLE
AS \$\$ SELECT substr($PAYLOAD_SQL || $PAYLOAD_SQL, 1, $BENCH_PAYLOAD) \$\$;

/*
 * bench_refill(depth, chunk): tops every service's queue up to "depth"
 * unfinished batches, creating services s00001..s<n_services> as needed.
 * The INSERT goes through gridha's per-row trigger, ordered by service then
 * batch. It commits every "chunk" batches per service: the trigger updates
 * the service's claim row once per batch, and within one transaction those
 * row versions cannot be pruned, so one huge transaction per service would
 * make each update walk an ever longer chain.
 */
CREATE PROCEDURE bench_refill(n_services int, depth int, chunk int)
LANGUAGE plpgsql
AS \$\$
DECLARE
	added bigint;
BEGIN
	LOOP
		INSERT INTO gridha.batches (service_id, batch_id, payload)
		SELECT s.service_id, 'b' || lpad((s.tail_seq + g)::text, 9, '0'), bench_payload()
		  FROM (SELECT 's' || lpad(i::text, 5, '0') AS service_id,
		               coalesce(c.tail_seq, 0) AS tail_seq,
		               CASE WHEN c.head_seq IS NULL THEN 0
		                    ELSE c.tail_seq - c.head_seq + 1 END AS queued
		          FROM generate_series(1, n_services) AS i
		          LEFT JOIN gridha.service_claims c
		                 ON c.service_id = 's' || lpad(i::text, 5, '0')) AS s,
		       generate_series(1, least(chunk, depth - s.queued)) AS g
		 ORDER BY s.service_id, g;
		GET DIAGNOSTICS added = ROW_COUNT;
		COMMIT;
		EXIT WHEN added = 0;
	END LOOP;
END
\$\$;
EOF
}

setup_bare() {
	qf "$1" >/dev/null <"$HERE/bare_schema.sql"
}

# bare_refill DB N_SERVICES QUEUED: tops the bare queue up to QUEUED rows,
# round-robin over the services.
bare_refill() {
	q "$1" "INSERT INTO bench_bare (service_id, batch_id, payload)
	        SELECT 's' || lpad((1 + (k % $2))::text, 5, '0'), 'b' || k, bench_payload()
	          FROM generate_series(coalesce((SELECT max(id) FROM bench_bare), 0) + 1,
	                               coalesce((SELECT max(id) FROM bench_bare), 0)
	                               + $3 - (SELECT count(*) FROM bench_bare WHERE status = 'queued')) AS k" >/dev/null
}

# setup_idle DB: the "idle" shape's extra: BENCH_IDLE services that the
# comparison's instances hold with nothing to do, split evenly over them
# (after a warm-up on a first load of the workload has registered the
# instances and split the workload's services).
setup_idle() {
	local db=$1 per
	qf "$db" >/dev/null <<'EOF'
CREATE FUNCTION bench_service(i bigint) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT 'idle' || lpad(i::text, 7, '0') $$;

CREATE FUNCTION bench_instance(i int) RETURNS uuid
LANGUAGE sql IMMUTABLE
AS $$ SELECT ('00000000-0000-4000-8000-' || lpad(i::text, 12, '0'))::uuid $$;
EOF
	qf "$db" >/dev/null <"$HERE/idle_direct.sql"
	q "$db" "CALL bench_refill($BENCH_SERVICES, 200, 100)"
	gridha_warmup "$db"
	per=$((BENCH_IDLE / BENCH_CLIENTS))
	q "$db" "CALL bench_idle_direct(1, array_fill($per, ARRAY[$BENCH_CLIENTS]))" >/dev/null
}

# setup_finished DB: the "finished" shape's history, before any batch is
# queued: the comparison's services created with a few batches each, which
# warm-up runs hand out and commit; then BENCH_FINISHED committed batches
# appended to their queues as a restore writes them (in transactions of at
# most 200,000), and as many committed rows in the bare queue.
setup_finished() {
	local db=$1
	q "$db" "CALL bench_refill($BENCH_SERVICES, 20, 20)"
	local try
	for try in 1 2 3 4 5; do
		[ "$(q "$db" "SELECT count(*) FROM gridha.batches WHERE status <> 'committed'")" != 0 ] || break
		gridha_warmup "$db"
	done
	qf "$db" >/dev/null <<'EOF'
CREATE PROCEDURE bench_history(n bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    services bigint := (SELECT count(*) FROM gridha.service_claims);
    per bigint := n / services;
    step bigint := greatest(200000 / services, 1);
    done bigint := 0;
    k bigint;
BEGIN
    WHILE done < per LOOP
        k := least(step, per - done);
        INSERT INTO gridha.batches (service_id, batch_id, seq, payload, status, created_at, epoch,
                                    attempts, handed_out_at, submitted_at, finished_at)
        SELECT c.service_id, 'h' || (c.tail_seq + g), c.tail_seq + g, bench_payload(), 'committed',
               now() - interval '1 day', 1, 1, now() - interval '1 day', now() - interval '1 day',
               now() - interval '1 day'
          FROM gridha.service_claims c
         CROSS JOIN generate_series(1, k) AS g
         ORDER BY c.service_id, g;
        UPDATE gridha.service_claims SET tail_seq = tail_seq + k;
        COMMIT;
        done := done + k;
    END LOOP;
END
$$;
EOF
	q "$db" "CALL bench_history($BENCH_FINISHED)"
	q "$db" "INSERT INTO bench_bare (service_id, batch_id, payload, status)
	        SELECT 's' || lpad((1 + (k % $BENCH_SERVICES))::text, 5, '0'), 'h' || k, bench_payload(), 'committed'
	          FROM generate_series(1, $BENCH_FINISHED) AS k" >/dev/null
}

# gridha_min_queued DB: the fewest batches queued in a service of the
# workload (the "idle" shape's idle services left out).
gridha_min_queued() {
	q "$1" "SELECT coalesce(min(CASE WHEN head_seq IS NULL THEN 0 ELSE tail_seq - head_seq + 1 END), 0)
	          FROM gridha.service_claims WHERE service_id NOT LIKE 'idle%'"
}

gridha_committed() {
	q "$1" "SELECT count(*) FROM gridha.batches WHERE status = 'committed'"
}

bare_committed() {
	q "$1" "SELECT count(*) FROM bench_bare WHERE status = 'committed'"
}

# ---------------------------------------------------------------------------
# pgbench scripts
# ---------------------------------------------------------------------------

# Instance of pgbench client N (0-based): 00000000-0000-4000-8000-<N+1>.
INSTANCE_SQL="('00000000-0000-4000-8000-' || lpad(:inst::text, 12, '0'))::uuid"
# The same in SQL over a column i.
INSTANCE_SQL_I="('00000000-0000-4000-8000-' || lpad(i::text, 12, '0'))::uuid"

write_scripts() {
	# Each statement is its own transaction (no BEGIN: autocommit). The take
	# always returns one row, got = 0 when the queue had nothing for us.
	cat >"$BENCH_DIR/scripts/bare.sql" <<'EOF'
WITH t AS (
  UPDATE bench_bare SET status = 'submitting'
   WHERE id = (SELECT id FROM bench_bare WHERE status = 'queued'
                ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
  RETURNING id, payload)
SELECT (t.id IS NOT NULL)::int AS got, t.id AS bid, t.payload AS payload
  FROM (SELECT 1) AS one LEFT JOIN t ON true \gset
\if :got
UPDATE bench_bare SET status = 'pending' WHERE id = :bid;
UPDATE bench_bare SET status = 'committed' WHERE id = :bid;
\endif
EOF

	cat >"$BENCH_DIR/scripts/gridha.sql" <<EOF
\\set inst :client_id + 1
SELECT (n.service_id IS NOT NULL)::int AS got, n.service_id AS sid, n.batch_id AS bid,
       n.epoch AS ep, n.payload AS payload
  FROM (SELECT 1) AS one
  LEFT JOIN gridha.next_batch($INSTANCE_SQL) AS n ON true \\gset
\\if :got
SELECT gridha.report_submission($INSTANCE_SQL, :sid, :bid, :ep::bigint, 'accepted');
SELECT gridha.report_status($INSTANCE_SQL, :sid, :bid, :ep::bigint, 'committed');
\\endif
EOF
}

# ---------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------

# Clients of the runs; the profile lowers it.
CLIENTS=$BENCH_CLIENTS

# run_pgbench DB SCRIPT SECONDS: sets PGB_CYCLES, PGB_ELAPSED, PGB_PROBLEM.
# PGOPTIONS from the caller's environment applies to the clients' sessions.
run_pgbench() {
	local db=$1 script=$2 secs=$3 out rc t0 t1 cpu0
	cpu0=$(server_cpu_ms)
	t0=$(date +%s.%N)
	set +e
	# `times` in the substitution's subshell: the CPU pgbench itself used.
	out=$("$PG_BINDIR/pgbench" -n -M prepared -c "$CLIENTS" -j "$((CLIENTS < BENCH_JOBS ? CLIENTS : BENCH_JOBS))" -T "$secs" \
		-h "$BENCH_DIR" -p "$PGPORT" -U postgres -f "$BENCH_DIR/scripts/$script" "$db" 2>&1
		echo "__rc $?"
		times)
	rc=$(printf '%s\n' "$out" | awk '$1 == "__rc" { print $2 }')
	set -e
	t1=$(date +%s.%N)
	PGB_CLIENT_CPU_MS=$(printf '%s\n' "$out" | tail -n 1 | awk '{
		t = 0
		for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); t += p[1] * 60 + p[2] }
		printf "%d", t * 1000 }')
	sleep 0.3	# let the backends exit, so their CPU is counted
	PGB_SERVER_CPU_MS=$(($(server_cpu_ms) - cpu0))
	PGB_ELAPSED=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
	PGB_CYCLES=$(printf '%s\n' "$out" | awk '/number of transactions actually processed/ { split($NF, p, "/"); print p[1] }')
	PGB_CYCLES=${PGB_CYCLES:-0}
	PGB_PROBLEM=
	if [ "$rc" -ne 0 ] || printf '%s\n' "$out" | grep -q 'aborted\|ERROR'; then
		PGB_PROBLEM="pgbench exit $rc: $(printf '%s\n' "$out" | grep -m 3 'aborted\|ERROR\|FATAL' | tr '\n' ' ')"
	fi
}

# server_cpu_ms: CPU (user + system, ms) the cluster has used so far: the
# postmaster, its live children, and the children that exited (reaped by the
# postmaster, so counted in its cutime/cstime). The machine may be shared, so
# CPU per batch is a steadier figure than batches/s.
server_cpu_ms() {
	python3 - "$(head -n 1 "$BENCH_DIR/data/postmaster.pid")" <<'EOF'
import os, sys
pm = sys.argv[1]
def stat(pid):
    with open('/proc/%s/stat' % pid) as f:
        s = f.read()
    return s[s.rindex(')') + 2:].split()
f = stat(pm)
ticks = sum(int(x) for x in f[11:15])
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            g = stat(pid)
        except OSError:
            continue
        if g[1] == pm:
            ticks += int(g[11]) + int(g[12])
print(ticks * 1000 // os.sysconf('SC_CLK_TCK'))
EOF
}

# wal_stats: "records full-page-images bytes flushes" of WAL so far, all
# processes (pg_stat_wal; backends report theirs when they exit).
wal_stats() {
	q postgres "SELECT wal_records || ' ' || wal_fpi || ' ' || wal_bytes || ' ' || wal_sync FROM pg_stat_wal"
}

# claims_split DB: "instances=N min=A max=B claimed=C/S"
claims_split() {
	q "$1" "SELECT format('instances=%s min=%s max=%s claimed=%s/%s',
	                      count(*) FILTER (WHERE n > 0), min(n), max(n), sum(n), (SELECT count(*) FROM gridha.service_claims))
	          FROM (SELECT i.instance_id, count(c.service_id) AS n
	                  FROM gridha.instances i
	                  LEFT JOIN gridha.service_claims c ON c.claimant = i.instance_id
	                 GROUP BY 1) AS x"
}

# balanced DB: true when every service is claimed and no instance holds
# more than its fair share ceil(services / clients) (instances seen in the
# last soft expiry count as live; the profile's lone client waits for the
# others' claims to expire, hence the generous number of tries).
balanced() {
	local ok
	ok=$(q "$1" "SELECT (SELECT count(*) FROM gridha.service_claims WHERE claimant IS NULL) = 0
	               AND coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM gridha.service_claims
	                                                 GROUP BY claimant) x), 0)
	                   <= ceil((SELECT count(*) FROM gridha.service_claims)::numeric / $CLIENTS)")
	[ "$ok" = t ]
}

# gridha_warmup DB: short pgbench runs with gridha.renew_interval = 1s until
# the claims are split fairly over the clients' instances.
#
# Why: with balance on (the product default), the first instance to cycle
# takes every free claim; the others get theirs only after it sees them as
# live at its next renewal and releases its surplus. At the default 10 s
# renew interval that takes most of a timed run, and instances that were idle
# longer than the soft expiry (30 s, e.g. during a bare run) lose their
# claims to whoever cycles first. So before every timed gridha run the
# instances cycle for a few seconds at a 1 s renew interval (set per session
# through PGOPTIONS), and the split is checked. The timed run itself then
# uses the product's default settings.
gridha_warmup() {
	local db=$1 try
	for try in 1 2 3 4; do
		PGOPTIONS='-c gridha.renew_interval=1s' run_pgbench "$db" gridha.sql "$BENCH_WARMUP"
		[ -z "$PGB_PROBLEM" ] || log "  warm-up: $PGB_PROBLEM"
		if balanced "$db"; then
			log "  warm-up: $(claims_split "$db")"
			return 0
		fi
	done
	log "  warm-up: claims still not split fairly: $(claims_split "$db")"
}

# prepare_run DB TABLE...: clean slate before a timed run.
prepare_run() {
	local db=$1 t
	shift
	for t in "$@"; do
		q "$db" "VACUUM ANALYZE $t" >/dev/null
	done
	q postgres "CHECKPOINT" >/dev/null
}

# timed_run KIND DB LABEL: one timed run; KIND bare|gridha. Prints a line and
# sets RUN_RATE (batches/s).
timed_run() {
	local kind=$1 db=$2 label=$3 before after wal0 wal left empty extra
	if [ "$kind" = bare ]; then
		prepare_run "$db" bench_bare
		before=$(bare_committed "$db")
	else
		gridha_warmup "$db"
		prepare_run "$db" gridha.batches gridha.service_claims gridha.instances
		before=$(gridha_committed "$db")
	fi
	wal0=$(wal_stats)
	run_pgbench "$db" "$kind.sql" "$BENCH_SECONDS"
	wal="$wal0 $(wal_stats)"
	if [ "$kind" = bare ]; then
		after=$(bare_committed "$db")
		left="queued left $(q "$db" "SELECT count(*) FROM bench_bare WHERE status = 'queued'")"
		extra=$(q "$db" "SELECT count(*) FROM bench_bare WHERE status IN ('submitting', 'pending')")
	else
		after=$(gridha_committed "$db")
		left="queued left per service >= $(gridha_min_queued "$db")"
		extra=$(q "$db" "SELECT count(*) FROM gridha.batches WHERE status IN ('submitting', 'pending')")
	fi
	local n=$((after - before))
	[ "$n" -gt 0 ] || n=1
	RUN_RATE=$(awk -v n=$((after - before)) -v t="$PGB_ELAPSED" 'BEGIN { printf "%.0f", n / t }')
	RUN_CPU=$((PGB_SERVER_CPU_MS * 1000 / n))
	empty=$((PGB_CYCLES - (after - before)))
	log "$(printf '  %-26s %6s batches/s  CPU/batch: server %4d us, pgbench %3d us  (%d batches in %ss, %d empty cycles, WAL/batch: %s, %s)' \
		"$label" "$RUN_RATE" "$RUN_CPU" $((PGB_CLIENT_CPU_MS * 1000 / n)) $((after - before)) "$PGB_ELAPSED" "$empty" \
		"$(echo $wal | awk -v n=$n '{ printf "%.1f records %.2f FPI %d B %.2f flushes", ($5 - $1) / n, ($6 - $2) / n, ($7 - $3) / n, ($8 - $4) / n }')" \
		"$left")"
	[ "$extra" = 0 ] || log "  WARNING: $extra batches left submitting/pending after the run"
	[ -z "$PGB_PROBLEM" ] || log "  WARNING: $PGB_PROBLEM"
	case "$left" in
		*" 0") log "  WARNING: the queue ran dry during the run: figure not valid" ;;
	esac
}

# best LIST: the largest number of a space-separated list.
best() {
	if [ -z "${1// /}" ]; then echo -; return; fi
	printf '%s\n' $1 | sort -n | tail -n 1
}

# median LIST: the median of a space-separated list of numbers (the mean of
# the middle two when their count is even), 2 decimals.
median() {
	if [ -z "${1// /}" ]; then echo -; return; fi
	printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 }
		END { printf "%.2f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# lowest LIST: the smallest number of a space-separated list.
lowest() {
	if [ -z "${1// /}" ]; then echo -; return; fi
	printf '%s\n' $1 | sort -n | head -n 1
}

ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'
}

verdict() {
	case $1 in
		n/a|-) echo - ;;	# the case was not run
		*) awk -v r="$1" -v t="$2" 'BEGIN { print (r + 0 >= t + 0) ? "PASS" : "MISS" }' ;;
	esac
}

# need_depth RATE SERVICES: queued batches per service that outlast a
# warm-up and a timed run at RATE with room to spare (x2, + 100).
need_depth() {
	awk -v r="$1" -v s="$2" -v t=$((BENCH_SECONDS + 4 * BENCH_WARMUP)) \
		'BEGIN { printf "%d", (r * t * 2) / s + 100 }'
}

# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

# keepalive_start DB / keepalive_stop: in the "idle" shape, whenever the
# gridha side's instances do not cycle themselves (the refills, the vacuum
# and checkpoint before a run, the bare run), a background loop renews
# their claims every 2 s (gridha.renew_claims, as each instance's own cycle
# does: one row an instance), so that they do not look gone after the soft
# expiry and lose their 100,000 idle claims to whichever instance cycles
# first in the next gridha run (a take-over of them all, which the shape is
# not about; it happened under load when the loop ran during the bare run
# only: a round's refills and vacuums took longer than the soft expiry).
# It stops before each gridha run (its warm-up included) and starts again
# after it. Its CPU (8 single-row renewals every 2 s) counts for the bare
# run. Bounded: it stops by itself after 300 s.
KEEPALIVE_PID=
keepalive_start() {
	local db=$1 n
	rm -f "$BENCH_DIR/keepalive.stop"
	(
		for n in $(seq 1 150); do
			[ ! -e "$BENCH_DIR/keepalive.stop" ] || break
			q "$db" "SELECT count(gridha.renew_claims($INSTANCE_SQL_I)) FROM generate_series(1, $BENCH_CLIENTS) AS i" \
				>/dev/null 2>&1 || true
			sleep 2
		done
	) &
	KEEPALIVE_PID=$!
}
keepalive_stop() {
	touch "$BENCH_DIR/keepalive.stop"
	wait "$KEEPALIVE_PID" 2>/dev/null || true
	KEEPALIVE_PID=
}

# compare_pairs DB SYNC KEY: BENCH_PAIRS pairs of timed runs, bare and
# gridha back to back (which goes first alternates), each run's queue first
# topped up from the fastest rate seen so far; adds the runs to RUNS and
# CPUS (keys bare_KEY, gridha_KEY) and the pairs' ratios to PAIRS[KEY], which
# the caller declares.
compare_pairs() {
	local db=$1 sync=$2 key=$3 guess=8000 round seen depth order kind rate_bare rate_gridha
	[ "$key" != idle ] || keepalive_start "$db"
	for round in $(seq 1 "$BENCH_PAIRS"); do
		seen=$(best "$guess ${RUNS[bare_$key]:-} ${RUNS[gridha_$key]:-}")
		depth=$(need_depth "$seen" "$BENCH_SERVICES")
		bare_refill "$db" "$BENCH_SERVICES" $((BENCH_SERVICES * depth))
		q "$db" "CALL bench_refill($BENCH_SERVICES, $depth, 100)"

		order="bare gridha"
		[ $((round % 2)) = 1 ] || order="gridha bare"
		for kind in $order; do
			[ "$key:$kind" != idle:gridha ] || keepalive_stop
			timed_run "$kind" "$db" "$(printf '%-6s' "$kind") ($key, sync $sync) #$round"
			[ "$key:$kind" != idle:gridha ] || keepalive_start "$db"
			RUNS[${kind}_$key]="${RUNS[${kind}_$key]:-} $RUN_RATE"
			CPUS[${kind}_$key]="${CPUS[${kind}_$key]:-} $RUN_CPU"
			if [ "$kind" = bare ]; then rate_bare=$RUN_RATE; else rate_gridha=$RUN_RATE; fi
		done
		PAIRS[$key]="${PAIRS[$key]:-} $(ratio "$rate_gridha" "$rate_bare")"
		log "  pair #$round: gridha/bare $(ratio "$rate_gridha" "$rate_bare")"
	done
	[ "$key" != idle ] || keepalive_stop
}

main() {
	install_missing_packages
	build_extension
	trap cleanup EXIT INT TERM
	init_cluster
	write_scripts

	local t_start=$SECONDS t0
	log "settings: ${BENCH_SECONDS}s per run, $BENCH_CLIENTS clients, $BENCH_JOBS threads, $BENCH_PAIRS pairs, $BENCH_ROUNDS scale rounds," \
		"$BENCH_SERVICES services, ${BENCH_PAYLOAD}-byte payloads, $(nproc) cores"

	# --- (a)+(b): bare vs gridha -------------------------------------------
	local db=bench_cmp
	setup_gridha_db $db
	setup_bare $db
	# Rates are not known yet: start from a generous guess, then refill from
	# the fastest rate seen so far before every run.
	local guess=8000 depth
	depth=$(need_depth $guess "$BENCH_SERVICES")
	log "loading the comparison queues: $BENCH_SERVICES services x $depth batches, same for bare"
	q $db "CALL bench_refill($BENCH_SERVICES, $depth, 100)"
	bare_refill $db "$BENCH_SERVICES" $((BENCH_SERVICES * depth))

	local sync
	declare -A RUNS CPUS PAIRS
	if [ "$BENCH_COMPARE" = 1 ]; then
		for sync in on off; do
			set_sync "$sync"
			log "comparison with synchronous_commit = $sync"
			compare_pairs $db "$sync" "$sync"
		done
	fi

	# --- (d): the shapes -------------------------------------------------------
	if [ "$BENCH_SHAPES" = 1 ]; then
		local shape
		set_sync "$BENCH_SHAPES_SYNC"
		for shape in $BENCH_SHAPE_LIST; do
			setup_gridha_db "bench_$shape"
			setup_bare "bench_$shape"
			log "shape $shape: loading"
			t0=$(date +%s.%N)
			"setup_$shape" "bench_$shape"
			log "  loaded in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')s:" \
				"$(q "bench_$shape" "SELECT count(*) FROM gridha.service_claims") services," \
				"$(q "bench_$shape" "SELECT count(*) FROM gridha.batches") gridha batches," \
				"$(q "bench_$shape" "SELECT count(*) FROM bench_bare") bare rows"
			log "comparison, shape $shape, synchronous_commit = $BENCH_SHAPES_SYNC"
			compare_pairs "bench_$shape" "$BENCH_SHAPES_SYNC" "$shape"
		done
	fi

	# --- (c): scale ----------------------------------------------------------
	local load_small=- load_large=-
	if [ "$BENCH_SCALE" = 1 ]; then
	set_sync "$BENCH_SCALE_SYNC"
	setup_gridha_db bench_small
	setup_gridha_db bench_large
	log "loading small: $SMALL_SERVICES services x $SMALL_DEPTH batches"
	t0=$(date +%s.%N)
	q bench_small "CALL bench_refill($SMALL_SERVICES, $SMALL_DEPTH, 100)"
	load_small=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	log "  loaded $(q bench_small "SELECT count(*) FROM gridha.batches") batches in ${load_small}s"
	log "loading large: $LARGE_SERVICES services x $LARGE_DEPTH batches"
	t0=$(date +%s.%N)
	q bench_large "CALL bench_refill($LARGE_SERVICES, $LARGE_DEPTH, 10)"
	load_large=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	log "  loaded $(q bench_large "SELECT count(*) FROM gridha.batches") batches in ${load_large}s"
	log "scale with synchronous_commit = $BENCH_SCALE_SYNC"
	for round in $(seq 1 "$BENCH_ROUNDS"); do
		# Every run starts from the stated queues: 10 x 10k and 10k x 100.
		q bench_small "CALL bench_refill($SMALL_SERVICES, $SMALL_DEPTH, 100)"
		q bench_large "CALL bench_refill($LARGE_SERVICES, $LARGE_DEPTH, 10)"
		timed_run gridha bench_small "small (10 x 10k) #$round"
		RUNS[small]="${RUNS[small]:-} $RUN_RATE"
		CPUS[small]="${CPUS[small]:-} $RUN_CPU"
		timed_run gridha bench_large "large (10k x 100) #$round"
		RUNS[large]="${RUNS[large]:-} $RUN_RATE"
		CPUS[large]="${CPUS[large]:-} $RUN_CPU"
	done
	fi

	# --- (p): profile --------------------------------------------------------
	local profile_out=
	if [ "$BENCH_PROFILE" = 1 ]; then
		profile_out=$(run_profile)
	fi

	# --- the table -----------------------------------------------------------
	local k
	declare -A RATE CPU
	for k in bare_on gridha_on bare_off gridha_off bare_idle gridha_idle bare_finished gridha_finished small large; do
		case $k in
			small|large) RATE[$k]=$(best "${RUNS[$k]:-}") ;;
			*) RATE[$k]=$(median "${RUNS[$k]:-}" | awk '{ printf "%.0f", $1 }') ;;
		esac
		CPU[$k]=$(lowest "${CPUS[$k]:-}")
	done
	local r_on r_off r_idle r_finished r_scale
	r_on=$(median "${PAIRS[on]:-}")
	r_off=$(median "${PAIRS[off]:-}")
	r_idle=$(median "${PAIRS[idle]:-}")
	r_finished=$(median "${PAIRS[finished]:-}")
	r_scale=$(ratio "${RATE[large]}" "${RATE[small]}")
	echo
	echo "gridha benchmark: $BENCH_CLIENTS clients, ${BENCH_SECONDS}s per run, $BENCH_PAIRS bare/gridha pairs, best of $BENCH_ROUNDS scale runs," \
		"${BENCH_PAYLOAD}-byte payloads, $(nproc) cores, PostgreSQL $(q postgres "SHOW server_version" | cut -d' ' -f1)"
	echo "batches/s: batches that reached committed during the run (counted in the database) / wall-clock seconds."
	echo "CPU/batch: CPU the whole cluster used during the run (backends, autovacuum, WAL writer ...) / batches;"
	echo "lowest of the runs. It does not depend on what else the machine is doing; batches/s does."
	echo
	printf '  %-34s %10s  %6s  %-11s %9s  %s\n' case batches/s ratio target "CPU/batch" "CPU ratio"
	row() {	# label key [ratio target-text cpu-ratio]
		printf '  %-34s %10s  %6s  %-11s %6s us  %s\n' "$1" "${RATE[$2]}" "${3:-}" "${4:-}" "${CPU[$2]}" "${5:-}"
	}
	row "bare   ($BENCH_SERVICES services, sync on)" bare_on
	row "gridha ($BENCH_SERVICES services, sync on)" gridha_on "$r_on" \
		"≥$TARGET_SYNC_ON $(verdict "$r_on" $TARGET_SYNC_ON)" "$(ratio "${CPU[bare_on]}" "${CPU[gridha_on]}")"
	row "bare   ($BENCH_SERVICES services, sync off)" bare_off
	row "gridha ($BENCH_SERVICES services, sync off)" gridha_off "$r_off" \
		"≥$TARGET_SYNC_OFF $(verdict "$r_off" $TARGET_SYNC_OFF)" "$(ratio "${CPU[bare_off]}" "${CPU[gridha_off]}")"
	if [ "$BENCH_SHAPES" = 1 ]; then
		row "bare   (idle, sync $BENCH_SHAPES_SYNC)" bare_idle
		row "gridha (+$BENCH_IDLE idle, sync $BENCH_SHAPES_SYNC)" gridha_idle "$r_idle" \
			"≥$TARGET_SHAPES $(verdict "$r_idle" $TARGET_SHAPES)" "$(ratio "${CPU[bare_idle]}" "${CPU[gridha_idle]}")"
		row "bare   (+$BENCH_FINISHED finished, sync $BENCH_SHAPES_SYNC)" bare_finished
		row "gridha (+$BENCH_FINISHED finished, sync $BENCH_SHAPES_SYNC)" gridha_finished "$r_finished" \
			"≥$TARGET_SHAPES $(verdict "$r_finished" $TARGET_SHAPES)" "$(ratio "${CPU[bare_finished]}" "${CPU[gridha_finished]}")"
	fi
	row "gridha small (10 x 10k, sync $BENCH_SCALE_SYNC)" small
	row "gridha large (10k x 100, sync $BENCH_SCALE_SYNC)" large "$r_scale" \
		"≥$TARGET_SCALE $(verdict "$r_scale" $TARGET_SCALE)" "$(ratio "${CPU[small]}" "${CPU[large]}")"
	echo
	echo "  batches/s: the median run of each side of the comparison, the best run of each scale case."
	echo "  ratio: gridha/bare = the median of the pairs' ratios (each pair: one run of each side, back to"
	echo "  back); large/small = of the best runs. Checked against the target."
	echo "  CPU ratio = the same comparison by CPU per batch (bare/gridha, small/large), for information."
	echo "  all runs (batches/s): bare on:${RUNS[bare_on]:-} | gridha on:${RUNS[gridha_on]:-} |" \
		"bare off:${RUNS[bare_off]:-} | gridha off:${RUNS[gridha_off]:-} | small:${RUNS[small]:-} | large:${RUNS[large]:-}"
	echo "  pairs' ratios gridha/bare, in run order: sync on:${PAIRS[on]:-} | sync off:${PAIRS[off]:-}" \
		"| idle:${PAIRS[idle]:-} | finished:${PAIRS[finished]:-}"
	echo "  load of 1M batches (10k x 100) through the enqueue trigger: ${load_large}s;" \
		"100k (10 x 10k): ${load_small}s"
	echo "  total bench time: $((SECONDS - t_start))s"
	if [ -n "$profile_out" ]; then
		echo
		printf '%s\n' "$profile_out"
	fi
}

# run_profile: restarts with pg_stat_statements (track = all, so the
# statements gridha runs through SPI are counted too) and prints, for one
# short run of each kind, what each statement costs per call.
#
# The profile runs ONE client (BENCH_PROFILE_CLIENTS): with 8 clients on a
# few cores, every statement's time also counts the time its backend waited
# for a CPU, which hides what the statement itself costs. The lone instance
# is given every claim first (the others' claims are made to look expired,
# as the tests do), so it never has to wait for a takeover.
run_profile() {
	local secs=$((BENCH_SECONDS < 10 ? BENCH_SECONDS : 10)) db kind label spec
	CLIENTS=${BENCH_PROFILE_CLIENTS:-1}
	log "profile: restarting with pg_stat_statements (track = all), $CLIENTS client(s)"
	stop_cluster
	start_cluster shared_preload_libraries=pg_stat_statements pg_stat_statements.track=all \
		pg_stat_statements.max=1000
	set_sync off
	echo "profile: pg_stat_statements (track = all), $CLIENTS client(s), sync off, ${secs}s per run."
	echo "Per call: execution time, rows, WAL bytes. top = sent by pgbench; nested = run by gridha's C"
	echo "code through SPI inside the top-level call (its time is part of the top-level time). A top-level"
	echo "call's time minus its nested statements' is the call's own overhead plus the planning of its"
	echo "SPI statements (pg_stat_statements counts execution only: track_planning is off)."
	for spec in "bench_cmp bare bare-$BENCH_SERVICES" "bench_cmp gridha gridha-$BENCH_SERVICES" \
			"bench_large gridha gridha-large-10k"; do
		set -- $spec
		db=$1 kind=$2 label=$3
		if [ -z "$(q postgres "SELECT 1 FROM pg_database WHERE datname = '$db'")" ]; then
			continue	# its case was not run (BENCH_SCALE=0)
		fi
		q "$db" "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null 2>&1
		if [ "$kind" = gridha ]; then
			q "$db" "UPDATE gridha.instances SET last_seen_at = now() - interval '1 hour'
			          WHERE instance_id::text > '00000000-0000-4000-8000-$(printf '%012d' "$CLIENTS")';
			         UPDATE gridha.service_claims SET soft_expiry = now() - interval '1 second'
			          WHERE claimant::text > '00000000-0000-4000-8000-$(printf '%012d' "$CLIENTS")'" >/dev/null
			gridha_warmup "$db" 2>/dev/null
			prepare_run "$db" gridha.batches gridha.service_claims gridha.instances
		else
			prepare_run "$db" bench_bare
		fi
		q "$db" "SELECT pg_stat_statements_reset()" >/dev/null
		run_pgbench "$db" "$kind.sql" "$secs"
		echo
		echo "  $label: $PGB_CYCLES cycles in ${PGB_ELAPSED}s = $(awk -v n="$PGB_CYCLES" -v t="$PGB_ELAPSED" \
			'BEGIN { printf "%.0f", n / t }') cycles/s, $(awk -v n="$PGB_CYCLES" -v t="$PGB_ELAPSED" \
			'BEGIN { printf "%.0f", 1e6 * t / (n > 0 ? n : 1) }') us per cycle (client round trips included)"
		echo "              calls    us/call  rows/call  WAL B/call  statement"
		q "$db" "SELECT format('  %s %9s %10s %10s %11s  %s',
		                        CASE WHEN toplevel THEN 'top   ' ELSE 'nested' END,
		                        calls, round((1000 * mean_exec_time)::numeric, 1),
		                        round(rows::numeric / greatest(calls, 1), 2),
		                        round(wal_bytes / greatest(calls, 1)),
		                        left(regexp_replace(query, '\\s+', ' ', 'g'), 120))
		           FROM pg_stat_statements
		          WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		            AND query NOT ILIKE '%pg_stat_statements%'
		          ORDER BY toplevel DESC, total_exec_time DESC
		          LIMIT 14"
	done
	CLIENTS=$BENCH_CLIENTS
}

main "$@"
