# shellcheck shell=bash
# test/bench/common.sh: what test/bench/ordered.sh and test/bench/scale.sh
# share. Source it after test/lib.sh; it defines functions only.
#
# Words used here:
#   workload   rounds x services batches enqueued before a timed run, in one
#              transaction per round: round r holds batch r of every service,
#              so each service's batches are in order and all services wait
#   cycle      one pgbench script run: a take and its reports, or an empty
#              poll (nothing to take: the client sleeps BENCH_IDLE_MS)
#   keyed      the baseline: a plain per-key ordered queue. A row per key in
#              bench_keys is locked with FOR UPDATE SKIP LOCKED and marked
#              busy, the key's oldest job is taken, then the job is completed
#              and the key released (bare_schema.sql)
#   rate       batches of the workload / (last commit - first hand-out), both
#              read from the rows (gridha.batches handed_out_at and
#              finished_at, bench_jobs taken_at and done_at): the start-up of
#              pgbench and the polling for the end are not in it
#
# Every timed run starts pgbench in the background and stops it (by its pid)
# once the database says the workload is done; the figure comes from the
# rows, so the few ms of polling do not count. Before a run: VACUUM ANALYZE
# of the tables involved, then a CHECKPOINT.
#
# Instance of pgbench client N (0-based), as in run.sh:
# 00000000-0000-4000-8000-<N+1, 12 digits>. Each client's first transaction
# binds its instance to its session (gridha.renew_claims: session liveness)
# and then sleeps a second, so that every instance is live and bound before
# any of them looks for claims to take; the keyed baseline's clients sleep
# the same second. The cold start (gcold) has no such second. The rate does not count it (it starts at the first
# hand-out).

BENCH_IDLE_MS=${BENCH_IDLE_MS:-10}
BENCH_PAYLOAD=${BENCH_PAYLOAD:-100}
BENCH_JOBS=${BENCH_JOBS:-2}
# A timed run that has not finished after this long is stopped and reported.
BENCH_RUN_TIMEOUT=${BENCH_RUN_TIMEOUT:-300}

INSTANCE_SQL="('00000000-0000-4000-8000-' || lpad(:inst::text, 12, '0'))::uuid"

# bench_instance N: the uuid of instance N (1-based).
bench_instance() {
	printf '00000000-0000-4000-8000-%012d' "$1"
}

# q DB SQL...: run SQL, unaligned, no headers.
q() {
	local db=$1
	shift
	gridha_psql -d "$db" -c "$@"
}

# qf DB: run SQL from stdin.
qf() {
	gridha_psql -d "$1"
}

# bench_start_cluster [SETTING...]: a throwaway cluster of test/lib.sh with
# durable commits (fsync, full-page writes, synchronous_commit on),
# shared_buffers 512MB and no checkpoint in the middle of a run (one is
# forced before each).
bench_start_cluster() {
	gridha_cluster_init
	gridha_cluster_start fsync=on full_page_writes=on synchronous_commit=on \
		shared_buffers=512MB max_wal_size=8GB checkpoint_timeout=30min \
		log_lock_waits=off "$@"
}

# server_cpu_ms: CPU (user + system, ms) the cluster has used so far: the
# postmaster, its live children and the children it reaped.
server_cpu_ms() {
	python3 - "$(head -n 1 "$PGDATA/postmaster.pid")" <<'EOF'
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

# wal_lsn: the current WAL insert position.
wal_lsn() {
	q postgres "SELECT pg_current_wal_insert_lsn()"
}

# wal_diff A B: bytes of WAL between two positions.
wal_diff() {
	q postgres "SELECT pg_wal_lsn_diff('$2', '$1')::bigint"
}

# ratio A B: A / B, 2 decimals; n/a when either is missing (a case that
# did not run) or B is 0.
ratio() {
	if [ -z "$1" ] || [ -z "$2" ]; then echo n/a; return; fi
	awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'
}

# median LIST: the median of a space-separated list (mean of the middle two
# when their count is even); "-" for an empty list.
median() {
	local v
	v=$(printf '%s\n' "$1" | tr ' ' '\n' | grep -v '^-*$' | grep -v 'n/a' || true)
	if [ -z "$v" ]; then echo -; return; fi
	# integers (rates) stay integers, the rest (ratios, ms) get 2 decimals
	printf '%s\n' "$v" | sort -g | awk '{ v[NR] = $1; if ($1 !~ /^[0-9]+$/) frac = 1 }
		END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
		      if (!frac) printf "%.0f", m; else printf "%.2f", m }'
}

# verdict RATIO TARGET [le]: PASS or MISS (le: the ratio must not exceed it).
verdict() {
	case $1 in
		n/a|-|'') echo - ;;
		*) awk -v r="$1" -v t="$2" -v le="${3:-}" 'BEGIN {
			ok = (le == "le") ? (r + 0 <= t + 0) : (r + 0 >= t + 0)
			print ok ? "PASS" : "MISS" }' ;;
	esac
}

# rotate N WORD...: the words, starting from the (N mod count)-th.
rotate() {
	local n=$1
	shift
	local a=("$@") i
	for ((i = 0; i < ${#a[@]}; i++)); do
		printf '%s ' "${a[$(((i + n) % ${#a[@]}))]}"
	done
}

# ---------------------------------------------------------------------------
# Databases
# ---------------------------------------------------------------------------

# bench_gridha_db DB: a database with gridha and the load helpers.
bench_gridha_db() {
	q postgres "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null
	qf "$1" >/dev/null <<EOF
SET client_min_messages = warning;
CREATE EXTENSION gridha;

CREATE FUNCTION bench_payload() RETURNS bytea
LANGUAGE sql IMMUTABLE
AS \$\$ SELECT substr(decode(repeat(md5('gridha-bench'), ($BENCH_PAYLOAD / 16) + 1), 'hex')
                     || decode(repeat(md5('gridha-bench'), ($BENCH_PAYLOAD / 16) + 1), 'hex'),
                     1, $BENCH_PAYLOAD) \$\$;

CREATE FUNCTION bench_service(i bigint) RETURNS text
LANGUAGE sql IMMUTABLE
AS \$\$ SELECT 's' || lpad(i::text, 7, '0') \$\$;

CREATE FUNCTION bench_instance(i int) RETURNS uuid
LANGUAGE sql IMMUTABLE
AS \$\$ SELECT ('00000000-0000-4000-8000-' || lpad(i::text, 12, '0'))::uuid \$\$;

/*
 * bench_enqueue(prefix, first, n, rounds): the workload, "rounds"
 * transactions of n batches: round r holds batch <prefix><r> of services
 * first .. first + n - 1 (through the enqueue trigger, as producers do).
 */
CREATE PROCEDURE bench_enqueue(prefix text, first_service bigint, n_services bigint, rounds int)
LANGUAGE plpgsql
AS \$\$
BEGIN
    FOR r IN 1..rounds LOOP
        INSERT INTO gridha.batches (service_id, batch_id, payload)
        SELECT bench_service(i), prefix || lpad(r::text, 6, '0'), bench_payload()
          FROM generate_series(first_service, first_service + n_services - 1) AS i
         ORDER BY i;
        COMMIT;
    END LOOP;
END
\$\$;

/*
 * bench_cycle_all(instance, n): as one instance, hands out and commits
 * every ready batch of the services it holds, n at a time (next_batches,
 * one batched report_statuses per call). Returns how many.
 */
CREATE FUNCTION bench_cycle_all(inst uuid, n int) RETURNS bigint
LANGUAGE plpgsql
AS \$\$
DECLARE
    total bigint := 0;
    got int;
    s text[];
    b text[];
    e bigint[];
BEGIN
    LOOP
        SELECT count(*), array_agg(service_id), array_agg(batch_id), array_agg(epoch)
          INTO got, s, b, e
          FROM gridha.next_batches(inst, n);
        EXIT WHEN got = 0;
        PERFORM count(*) FROM gridha.report_statuses(inst, s, b, e, array_fill('committed'::text, ARRAY[got]));
        total := total + got;
    END LOOP;
    RETURN total;
END
\$\$;

/*
 * bench_new_services(first, n): services first .. first + n - 1, each with
 * one batch enqueued, handed out and committed through the API by a
 * set-up instance, which then hands them back: they exist, are free and
 * have nothing to do. (Balance off in the calling session.)
 */
CREATE PROCEDURE bench_new_services(first_service bigint, n_services bigint)
LANGUAGE plpgsql
AS \$\$
DECLARE
    setup uuid := '00000000-0000-4000-9000-000000000001';
BEGIN
    CALL bench_enqueue('setup', first_service, n_services, 1);
    PERFORM count(*) FROM gridha.acquire_claims(setup);
    PERFORM bench_cycle_all(setup, 10000);
    PERFORM gridha.release_claims(setup);
    COMMIT;
END
\$\$;

/*
 * bench_spread(n): instances 1..n take the free services as the product
 * does (renew, then acquire with balance on: each takes free claims up to
 * its count share), until every service is claimed and the shares differ
 * by at most one; shares already further apart are handed back first. One session:
 * every instance stays bound to it, none looks gone to another. Returns
 * the split, "min-max".
 */
CREATE FUNCTION bench_spread(n int) RETURNS text
LANGUAGE plpgsql
AS \$\$
DECLARE
    inst uuid;
    lo int;
    hi int;
    free bigint;
BEGIN
    -- shares already apart (a run's work share moved services): start over,
    -- as the held claims would otherwise stay where they are
    IF (SELECT max(held) - min(held) FROM gridha.instances
         WHERE instance_id IN (SELECT bench_instance(i) FROM generate_series(1, n) AS i)) > 1 THEN
        PERFORM gridha.release_claims(bench_instance(i)) FROM generate_series(1, n) AS i;
    END IF;
    PERFORM gridha.renew_claims(bench_instance(i)) FROM generate_series(1, n) AS i;
    FOR pass IN 1..6 LOOP
        -- the instances that hold least first
        FOR inst IN SELECT instance_id FROM gridha.instances
                     WHERE instance_id IN (SELECT bench_instance(i) FROM generate_series(1, n) AS i)
                     ORDER BY held, instance_id LOOP
            PERFORM count(*) FROM gridha.acquire_claims(inst);
        END LOOP;
        SELECT min(held), max(held) INTO lo, hi FROM gridha.instances
         WHERE instance_id IN (SELECT bench_instance(i) FROM generate_series(1, n) AS i);
        SELECT count(*) INTO free FROM gridha.service_claims WHERE claimant IS NULL;
        EXIT WHEN free = 0 AND hi - lo <= 1;
    END LOOP;
    RETURN lo || '-' || hi || CASE WHEN free > 0 THEN ' (' || free || ' free)' ELSE '' END;
END
\$\$;

/*
 * bench_idle(first, counts): idle claimed services, through the API:
 * instance i gets counts[i] new services, each with one batch it hands out
 * and commits (balance off in the calling session, so it takes them all).
 * One session, as bench_spread.
 */
CREATE PROCEDURE bench_idle(first_service bigint, counts int[])
LANGUAGE plpgsql
AS \$\$
DECLARE
    next_service bigint := first_service;
BEGIN
    FOR i IN 1..array_length(counts, 1) LOOP
        CONTINUE WHEN counts[i] <= 0;
        -- every lease renewed (and bound to this session): none expires
        -- while the others take their services
        PERFORM gridha.renew_claims(bench_instance(k)) FROM generate_series(1, array_length(counts, 1)) AS k;
        COMMIT;
        CALL bench_enqueue('idle', next_service, counts[i], 1);
        PERFORM count(*) FROM gridha.acquire_claims(bench_instance(i));
        PERFORM bench_cycle_all(bench_instance(i), 10000);
        COMMIT;
        next_service := next_service + counts[i];
    END LOOP;
END
\$\$;

-- The workload's progress: services with a batch not final yet (a head:
-- ready, or in flight), counted through the indexes, so that polling it
-- every 0.2 s does not scan the idle services' claims beside the run.
CREATE FUNCTION bench_left() RETURNS bigint
LANGUAGE sql STABLE
AS \$\$ SELECT (SELECT count(*) FROM gridha.service_claims WHERE ready_at IS NOT NULL)
            + (SELECT count(*) FROM gridha.service_claims WHERE in_flight AND ready_at IS NULL) \$\$;
EOF
}

# bench_keyed_db DB KEYS: a database with the keyed baseline and KEYS keys.
bench_keyed_db() {
	q postgres "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null
	qf "$1" >/dev/null <"$HERE/bare_schema.sql"
	qf "$1" >/dev/null <<EOF
CREATE FUNCTION bench_payload() RETURNS bytea
LANGUAGE sql IMMUTABLE
AS \$\$ SELECT substr(decode(repeat(md5('gridha-bench'), ($BENCH_PAYLOAD / 16) + 1), 'hex')
                     || decode(repeat(md5('gridha-bench'), ($BENCH_PAYLOAD / 16) + 1), 'hex'),
                     1, $BENCH_PAYLOAD) \$\$;

INSERT INTO bench_keys (key)
SELECT 's' || lpad(i::text, 7, '0') FROM generate_series(1, $2) AS i;

-- The same workload as bench_enqueue: round r holds job r of every key.
CREATE PROCEDURE bench_enqueue(prefix text, n_keys int, rounds int)
LANGUAGE plpgsql
AS \$\$
BEGIN
    FOR r IN 1..rounds LOOP
        WITH j AS (
            INSERT INTO bench_jobs (key, seq, batch_id, payload)
            SELECT k.key, k.tail + 1, prefix || lpad(r::text, 6, '0'), bench_payload()
              FROM (SELECT key, tail FROM bench_keys ORDER BY key LIMIT n_keys) AS k
             ORDER BY k.key
            RETURNING key)
        UPDATE bench_keys k SET tail = k.tail + 1
          FROM j WHERE k.key = j.key;
        COMMIT;
    END LOOP;
END
\$\$;

CREATE FUNCTION bench_left() RETURNS bigint
LANGUAGE sql STABLE
AS \$\$ SELECT coalesce(sum(tail - head + 1), 0) + count(*) FILTER (WHERE busy) FROM bench_keys \$\$;
EOF
}

# ---------------------------------------------------------------------------
# pgbench scripts
# ---------------------------------------------------------------------------

# bench_write_scripts DIR: the scripts of the timed runs.
#   keyed3  take (lock a free key, mark it busy, take its oldest job) ->
#           mark the job accepted -> complete it and release the key
#   keyed2  take -> complete and release
#   g3      next_batch -> report_submission('accepted') ->
#           report_status('committed')
#   gcold   g3 without the start-up second: each client binds its instance
#           and starts its cycles at once (the cold start)
#   g2      next_batch -> report_status('committed')
#   gbat    next_batches(BENCH_BATCH) -> one report_statuses of them all
#   poll    next_batch alone, no sleep (the empty-poll latency)
# Each step is its own transaction (autocommit). Variable "started" (pgbench
# -D started=0) marks a client's first transaction: the bind and the sleep.
bench_write_scripts() {
	local dir=$1 take_keyed start_g start_k idle
	idle="\\sleep $BENCH_IDLE_MS ms"
	start_g="\\else
SELECT gridha.renew_claims($INSTANCE_SQL);
\\sleep 1000 ms
\\set started 1
\\endif"
	start_k="\\else
\\sleep 1000 ms
\\set started 1
\\endif"
	take_keyed="WITH k AS (
  UPDATE bench_keys SET busy = true, head = head + 1
   WHERE key = (SELECT key FROM bench_keys WHERE NOT busy AND head <= tail
                 ORDER BY free_since LIMIT 1 FOR UPDATE SKIP LOCKED)
  RETURNING key, head - 1 AS seq),
j AS (
  UPDATE bench_jobs b SET status = 'submitting', taken_at = now()
    FROM k WHERE b.key = k.key AND b.seq = k.seq
  RETURNING b.id, b.key, b.payload)
SELECT (j.id IS NOT NULL)::int AS got, j.id AS jid, j.key AS key, j.payload AS payload
  FROM (SELECT 1) AS one LEFT JOIN j ON true \\gset"

	cat >"$dir/keyed3.sql" <<EOF
\\if :started
$take_keyed
\\if :got
UPDATE bench_jobs SET status = 'pending' WHERE id = :jid;
WITH d AS (UPDATE bench_jobs SET status = 'committed', done_at = now() WHERE id = :jid)
UPDATE bench_keys SET busy = false, free_since = now() WHERE key = :key;
\\else
$idle
\\endif
$start_k
EOF

	cat >"$dir/keyed2.sql" <<EOF
\\if :started
$take_keyed
\\if :got
WITH d AS (UPDATE bench_jobs SET status = 'committed', done_at = now() WHERE id = :jid)
UPDATE bench_keys SET busy = false, free_since = now() WHERE key = :key;
\\else
$idle
\\endif
$start_k
EOF

	local next="SELECT (n.service_id IS NOT NULL)::int AS got, n.service_id AS sid, n.batch_id AS bid,
       n.epoch AS ep, n.payload AS payload
  FROM (SELECT 1) AS one
  LEFT JOIN gridha.next_batch($INSTANCE_SQL) AS n ON true \\gset"

	cat >"$dir/g3.sql" <<EOF
\\set inst :client_id + 1
\\if :started
$next
\\if :got
SELECT gridha.report_submission($INSTANCE_SQL, :sid, :bid, :ep::bigint, 'accepted');
SELECT gridha.report_status($INSTANCE_SQL, :sid, :bid, :ep::bigint, 'committed');
\\else
$idle
\\endif
$start_g
EOF

	# the cold start: as g3, but a client's first transaction only binds its
	# instance (registering it) and the client goes on at once, as a fleet
	# started at once does: no second for the others to show up
	cat >"$dir/gcold.sql" <<EOF
\\set inst :client_id + 1
\\if :started
$next
\\if :got
SELECT gridha.report_submission($INSTANCE_SQL, :sid, :bid, :ep::bigint, 'accepted');
SELECT gridha.report_status($INSTANCE_SQL, :sid, :bid, :ep::bigint, 'committed');
\\else
$idle
\\endif
\\else
SELECT gridha.renew_claims($INSTANCE_SQL);
\\set started 1
\\endif
EOF

	cat >"$dir/g2.sql" <<EOF
\\set inst :client_id + 1
\\if :started
$next
\\if :got
SELECT gridha.report_status($INSTANCE_SQL, :sid, :bid, :ep::bigint, 'committed');
\\else
$idle
\\endif
$start_g
EOF

	cat >"$dir/gbat.sql" <<EOF
\\set inst :client_id + 1
\\if :started
SELECT count(*) AS got, array_agg(n.service_id)::text AS sids, array_agg(n.batch_id)::text AS bids,
       array_agg(n.epoch)::text AS eps, sum(length(n.payload)) AS bytes
  FROM gridha.next_batches($INSTANCE_SQL, ${BENCH_BATCH:-10}) AS n \\gset
\\if :got
SELECT count(*) FILTER (WHERE r.sqlstate IS NULL) AS ok
  FROM gridha.report_statuses($INSTANCE_SQL, :sids::text[], :bids::text[], :eps::bigint[],
                              array_fill('committed'::text, ARRAY[:got::int])) AS r \\gset
\\else
$idle
\\endif
$start_g
EOF

	cat >"$dir/poll.sql" <<EOF
\\set inst 1
SELECT count(*) FROM gridha.next_batch($INSTANCE_SQL);
EOF
	echo 'SELECT 1;' >"$dir/select1.sql"
}

# ---------------------------------------------------------------------------
# Timed runs
# ---------------------------------------------------------------------------

# bench_wait_sessions DB: until no client session is connected to DB (the
# backends of a stopped pgbench have exited, their instances unbound).
bench_wait_sessions() {
	local i
	for i in $(seq 1 100); do
		[ "$(q postgres "SELECT count(*) FROM pg_stat_activity
		                  WHERE datname = '$1' AND pid <> pg_backend_pid()")" = 0 ] && return 0
		sleep 0.1
	done
	gridha_log "  WARNING: sessions still connected to $1"
}

# bench_prepare DB TABLE...: VACUUM ANALYZE the tables, then a CHECKPOINT.
bench_prepare() {
	local db=$1 t
	shift
	for t in "$@"; do
		q "$db" "VACUUM ANALYZE $t" >/dev/null
	done
	q postgres "CHECKPOINT" >/dev/null
}

# bench_timed KIND DB CLIENTS PREFIX: one timed run of script KIND (keyed*
# or g*) on DB with CLIENTS clients, until the workload whose batch ids
# start with PREFIX is done. Sets RUN_RATE (batches/s), RUN_N, RUN_SECS,
# RUN_CPU (server CPU us per batch), RUN_WAL (WAL bytes per batch),
# RUN_NOTE (problems, or empty); RUN_INFO is cleared for the caller to fill.
bench_timed() {
	local kind=$1 db=$2 clients=$3 prefix=$4 pid cpu0 cpu1 wal0 wal1 t0 left=1 out row
	bench_wait_sessions "$db"
	bench_profile_start "$db"
	cpu0=$(server_cpu_ms)
	wal0=$(wal_lsn)
	out=$BENCH_SCRIPTS/$kind.out
	t0=$SECONDS
	"$PG_BINDIR/pgbench" -n -M prepared -c "$clients" -j "$((clients < BENCH_JOBS ? clients : BENCH_JOBS))" \
		-T $((BENCH_RUN_TIMEOUT + 10)) -D started=0 -f "$BENCH_SCRIPTS/$kind.sql" "$db" >"$out" 2>&1 &
	pid=$!
	sleep 1
	while [ $((SECONDS - t0)) -lt "$BENCH_RUN_TIMEOUT" ]; do
		left=$(q "$db" "SELECT bench_left()")
		[ "$left" != 0 ] || break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.2
	done
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	bench_wait_sessions "$db"
	# the server's CPU and WAL now, before the queries below count the run
	# (a scan of gridha.batches by batch_id prefix: with millions of batches
	# of history it cost more CPU than the run itself)
	cpu1=$(server_cpu_ms)
	wal1=$(wal_lsn)
	RUN_NOTE=
	RUN_INFO=
	[ "$left" = 0 ] || RUN_NOTE="not finished: $left left"
	if grep -q 'ERROR\|aborted' "$out"; then
		RUN_NOTE="$RUN_NOTE pgbench: $(grep -m 2 'ERROR\|aborted' "$out" | tr '\n' ' ')"
	fi
	case $kind in
		keyed*) row=$(q "$db" "SELECT count(*) FILTER (WHERE status = 'committed'),
		                        extract(epoch FROM max(done_at) - min(taken_at))
		                   FROM bench_jobs WHERE starts_with(batch_id, '$prefix')") ;;
		*) row=$(q "$db" "SELECT count(*) FILTER (WHERE status = 'committed' AND attempts = 1),
		                   extract(epoch FROM max(finished_at) - min(handed_out_at))
		              FROM gridha.batches WHERE starts_with(batch_id, '$prefix')") ;;
	esac
	RUN_N=${row%%|*}
	RUN_SECS=${row#*|}
	RUN_RATE=$(awk -v n="$RUN_N" -v t="$RUN_SECS" 'BEGIN { if (t > 0) printf "%.0f", n / t; else print 0 }')
	RUN_CPU=$(((cpu1 - cpu0) * 1000 / (RUN_N > 0 ? RUN_N : 1)))
	RUN_WAL=$(($(wal_diff "$wal0" "$wal1") / (RUN_N > 0 ? RUN_N : 1)))
	bench_profile_print "$db" "$kind, $clients clients"
}

# bench_profile_start DB, bench_profile_print DB LABEL: with BENCH_PROFILE=1
# and pg_stat_statements loaded, each timed run is profiled: the counters
# are reset before it (track = all, so the statements gridha runs inside
# its functions count too) and the BENCH_PROFILE_TOP (8) statements that
# took the most execution time are logged after it, with calls, the mean
# and the time spent compiling them (JIT).
bench_profile_start() {
	[ "${BENCH_PROFILE:-0}" = 1 ] || return 0
	q "$1" "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null 2>&1 || return 0
	q postgres "ALTER SYSTEM SET pg_stat_statements.track = 'all'" -c "SELECT pg_reload_conf()" >/dev/null
	q "$1" "SELECT pg_stat_statements_reset()" >/dev/null
}

bench_profile_print() {
	[ "${BENCH_PROFILE:-0}" = 1 ] || return 0
	gridha_log "  profile of $2 (pg_stat_statements, execution time):"
	q "$1" "SELECT format('    %9s ms %8s calls %8s ms/call %7s ms JIT  %s', round(total_exec_time), calls,
	                     round((total_exec_time / calls)::numeric, 3),
	                     round(jit_generation_time + jit_inlining_time + jit_optimization_time + jit_emission_time),
	                     left(regexp_replace(query, '\\s+', ' ', 'g'), 110))
	          FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
	         ORDER BY total_exec_time DESC LIMIT ${BENCH_PROFILE_TOP:-8}" 2>&1 | while IFS= read -r line; do
		gridha_log "$line"
	done
	q postgres "ALTER SYSTEM RESET pg_stat_statements.track" -c "SELECT pg_reload_conf()" >/dev/null
}

# bench_log_run LABEL: the log line of the last timed run.
bench_log_run() {
	gridha_log "$(printf '  %-34s %6s batches/s  (%s batches in %.2fs; server CPU %d us, WAL %d B per batch%s)%s' \
		"$1" "$RUN_RATE" "$RUN_N" "$RUN_SECS" "$RUN_CPU" "$RUN_WAL" "${RUN_INFO:+; $RUN_INFO}" \
		"${RUN_NOTE:+  WARNING: $RUN_NOTE}")"
}
