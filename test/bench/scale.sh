#!/usr/bin/env bash
# test/bench/scale.sh: what idle services, many instances and dead
# instances cost, and what a takeover costs (`make bench`).
#
# Measures and prints; it never fails on a figure. It runs on a throwaway
# cluster of test/lib.sh (shared_buffers 512MB, fsync and
# synchronous_commit on, pg_stat_statements loaded) and removes it at exit.
# Words and the way a run is timed: test/bench/common.sh.
#
# The workload of the rate runs: SCALE_SERVICES services x SCALE_DEPTH
# batches (100 x 200), SCALE_CLIENTS pgbench clients (8), each its own
# instance, warm (claims spread before the run), two steps: next_batch ->
# report_status('committed'). Rate: first hand-out to last commit, counted in
# the database.
#
# What it measures:
#   rate      the rate with 0 idle services, with SCALE_IDLE (100,000) idle
#             claimed services, and with SCALE_DEAD (50,000) dead instances,
#             one run of each per round, the order rotating; ratios are the
#             median of the rounds' ratios. An idle service had one batch,
#             handed out and committed through the API before the run
#             (enqueue, acquire_claims, next_batches, report_statuses, in big
#             transactions): it is claimed and has nothing to do. The idle
#             services are spread so that every instance holds its fair
#             share, the workload's services 12 or 13 of them as without idle
#             services. Dead instances: a third registered and never used, a
#             third registered and released, a third that renewed a lease in
#             a session that then ended (the lease expires 2 s later; the
#             instances' acquisitions forget such leases 1000 at a time)
#   latency   the empty poll: next_batch of an instance that holds its share
#             of idle services and has nothing ready, one client calling it
#             in a loop for SCALE_POLL_SECONDS (the mean pgbench reports, and
#             the mean execution time pg_stat_statements reports), with
#             SCALE_IDLE and with SCALE_IDLE_LARGE (1,000,000) idle services;
#             the other instances stay live and bound in another session.
#             SELECT 1 in the same way is the round trip it includes
#   many      SCALE_MANY clients (32, 96), each its own instance, gridha
#             against the keyed baseline at the same client count, two
#             steps both, on SCALE_MANY_SERVICES services x SCALE_MANY_DEPTH
#             batches (100 x 200, the workload of the rate runs: with 96
#             instances each holds one or two services, and still always
#             has one ready, since its client commits each batch itself).
#             Each run also prints its tail (how long after the median
#             service the last one finished) and, for gridha, how many
#             claims changed hands during the run (relief: see claims.c)
#   wal       WAL of one renew_claims of an instance holding its share of
#             SCALE_IDLE and SCALE_IDLE_LARGE services (the WAL insert
#             position before and after the call and its commit; median of
#             20 calls, after one that pays the page's full-page image), and
#             of an acquire_claims and an empty next_batch
#   takeover  an instance holding SCALE_TAKEOVER (50,000) claims dies, with
#             SCALE_IDLE (100k) and SCALE_IDLE_LARGE (1M) claims in all, the
#             rest held by 7 surviving instances that poll next_batch (a
#             client each, pgbench, sleeping 10 ms when it finds nothing):
#               (a) the client process of its session is killed (kill -9):
#                   the session ends, the survivors take its claims
#                   (session liveness)
#               (b) it hangs: its session stays, its lease is not renewed
#                   (set to expire 10 s after its last renewal, hard 20 s,
#                   for the run's sake; the session outlives both), with
#                   SCALE_TAKEOVER_INFLIGHT (100) of its services in the
#                   middle of a submission (a batch handed out, submitting):
#                   the survivors take the idle claims at soft expiry and
#                   the ones in flight at hard expiry
#             Printed: the time until the last claim has moved (from the
#             kill; from the soft expiry for the idle claims of (b), from
#             the hard expiry for its claims in flight), and the database time the
#             survivors' claim statements took meanwhile (pg_stat_statements,
#             track = all). The survivors run with gridha.balance_claims off:
#             with balance on, 7 survivors holding 7/8 of the claims could
#             not hold them at a fair share of 8, so the case cannot be set
#             up at both totals with the same survivors; off, the first
#             survivor to look takes all 50,000, in the same statements a
#             balanced take runs.
#   uneven    issue 26, case 1: the workload (SCALE_SERVICES x SCALE_DEPTH,
#             SCALE_CLIENTS clients, two steps) on services created just
#             before the run, free, AFTER the idle ones were claimed (no
#             spreading beforehand), in three databases, one run of each per
#             round (SCALE_UNEVEN_RUNS, the order rotating; each round's
#             services are new ones):
#               none  no idle service (the services of earlier rounds only)
#               idle  SCALE_UNEVEN_IDLE (100,000) idle services, claimed by
#                     the SCALE_CLIENTS instances as the issue found them,
#                     set again before each round (bench_issue_split): each
#                     holds its count share of idle + busy services,
#                     instance 1 that less the busy ones (12,413; the
#                     others 12,513 or 12,512), so that by count all the
#                     busy ones fit under instance 1's ceiling
#               join  the same, all of them held by instance 1, which also
#                     takes the new services (balance off) before the run:
#                     one instance holding everything and 7 joining
#             Printed: the rates and the median of the rounds' ratios
#             against none, and the spread of work: another session counts
#             every SCALE_SAMPLE_MS (500) the services with work (head ready
#             or in flight) each instance holds; "from 2 s" is the lowest
#             and highest count over the samples taken 2 s or more after the
#             run's first hand-out and before the first service finished
#             (the tail, where instances run out of work, is left out), "at
#             2 s" the first such sample. Idle services are written
#             directly, as for SCALE_IDLE_LARGE below
#   survivor  issue 26, cases 2 and 3 and an operator's expiry: runs
#             test/t/043_survivor.pl SCALE_SURVIVOR_RUNS (3) times, each on
#             a cluster of its own from the same installation (as postgres
#             when root; its loops and watches bounded by
#             SCALE_SURVIVOR_SECONDS, 45: longer than the 30 s soft expiry
#             of the crashed instance, so that the code before balance by
#             work gets a figure too) and prints the seconds from the
#             survivor's first idle poll (and from its first poll) until
#             every service with work is held by it (median of the runs;
#             "not held" when a run did not see it), and from the
#             operator's UPDATE until the idle instance holds the claim
#
# Idle services beyond SCALE_IDLE (for SCALE_IDLE_LARGE) are written
# directly as a superuser, in the state the API leaves (claim: claimant,
# epoch 1, tail_seq 1, no head, not ready, not in flight; batch seq 1
# committed under epoch 1 with its hand-out and finish times), the per-row
# triggers off (session_replication_role = replica) and what they keep
# (service_counts, instances.held) written in the same transaction. The
# takeover cases move claims between the instances by UPDATE (claimant, and
# epoch + 1 as a take does) and recount instances.held.
#
# Environment (defaults in brackets):
#   SCALE_PARTS [rate latency many wal takeover uneven survivor]  what to run
#   SCALE_RUNS [3]           rounds of the rate and many comparisons
#   SCALE_SERVICES [100]     SCALE_DEPTH [200]    SCALE_CLIENTS [8]
#   SCALE_IDLE [100000]      SCALE_IDLE_LARGE [1000000]    SCALE_DEAD [50000]
#   SCALE_MANY [32 96]       SCALE_MANY_SERVICES [100]     SCALE_MANY_DEPTH [200]
#   SCALE_POLL_SECONDS [5]   SCALE_TAKEOVER [50000]        SCALE_TAKEOVER_INFLIGHT [100]
#   SCALE_TAKEOVER_CASES [a b]
#   SCALE_UNEVEN_IDLE [100000]  SCALE_UNEVEN_RUNS [3]    SCALE_SAMPLE_MS [500]
#   SCALE_SURVIVOR_RUNS [3]     SCALE_SURVIVOR_SECONDS [45]
#   BENCH_IDLE_MS [10]       SCALE_PORT [56400]   GRIDHA_KEEP_TMP [0]
#   BENCH_PROFILE [0]        1: after each timed run, the statements that
#                            took the most time (test/bench/common.sh)
set -eu -o pipefail

SCALE_PARTS=${SCALE_PARTS:-rate latency many wal takeover uneven survivor}
SCALE_RUNS=${SCALE_RUNS:-3}
SCALE_SERVICES=${SCALE_SERVICES:-100}
SCALE_DEPTH=${SCALE_DEPTH:-200}
SCALE_CLIENTS=${SCALE_CLIENTS:-8}
SCALE_IDLE=${SCALE_IDLE:-100000}
SCALE_IDLE_LARGE=${SCALE_IDLE_LARGE:-1000000}
SCALE_DEAD=${SCALE_DEAD:-50000}
SCALE_MANY=${SCALE_MANY:-32 96}
SCALE_MANY_SERVICES=${SCALE_MANY_SERVICES:-100}
SCALE_MANY_DEPTH=${SCALE_MANY_DEPTH:-200}
SCALE_POLL_SECONDS=${SCALE_POLL_SECONDS:-5}
SCALE_TAKEOVER=${SCALE_TAKEOVER:-50000}
SCALE_TAKEOVER_INFLIGHT=${SCALE_TAKEOVER_INFLIGHT:-100}
SCALE_TAKEOVER_CASES=${SCALE_TAKEOVER_CASES:-a b}
SCALE_UNEVEN_IDLE=${SCALE_UNEVEN_IDLE:-100000}
SCALE_UNEVEN_RUNS=${SCALE_UNEVEN_RUNS:-3}
SCALE_SAMPLE_MS=${SCALE_SAMPLE_MS:-500}
SCALE_SURVIVOR_RUNS=${SCALE_SURVIVOR_RUNS:-3}
SCALE_SURVIVOR_SECONDS=${SCALE_SURVIVOR_SECONDS:-45}
export GRIDHA_BASE_PORT=${SCALE_PORT:-56400}

# Targets
TARGET_IDLE=0.90	# rate with idle services / without
TARGET_DEAD=0.95	# rate with dead instances / without
TARGET_MANY=0.90	# gridha / keyed at 32 and 96 clients
TARGET_POLL_MS=0.5	# empty next_batch, mean
TARGET_WAL=1024		# bytes per renew
TARGET_UNEVEN=0.90	# rate, busy services created after the idle ones were claimed / no idle

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# shellcheck source=../lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=common.sh
. "$HERE/common.sh"

part() {
	case " $SCALE_PARTS " in *" $1 "*) return 0 ;; esac
	return 1
}

BG_PIDS=
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	local p
	for p in $BG_PIDS; do
		kill -9 "$p" 2>/dev/null || true
	done
	gridha_cluster_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM

max_many=0
for n in $SCALE_MANY; do [ "$n" -le "$max_many" ] || max_many=$n; done
[ "$max_many" -ge "$SCALE_CLIENTS" ] || max_many=$SCALE_CLIENTS

gridha_log "scale: $SCALE_PARTS; $(nproc) cores"
bench_start_cluster max_connections=$((max_many + 30)) \
	shared_preload_libraries=pg_stat_statements pg_stat_statements.track=none \
	pg_stat_statements.max=2000
BENCH_SCRIPTS=$GRIDHA_TEST_DIR/scripts
mkdir -p "$BENCH_SCRIPTS"
bench_write_scripts "$BENCH_SCRIPTS"
# A survivor of a takeover: polls; nothing is ever ready.
cat >"$BENCH_SCRIPTS/surv.sql" <<EOF
\\set inst :client_id + 1
\\if :started
SELECT count(*) AS got FROM gridha.next_batch($INSTANCE_SQL) \\gset
\\if :got = 0
\\sleep $BENCH_IDLE_MS ms
\\endif
\\else
SELECT gridha.renew_claims($INSTANCE_SQL);
\\sleep 1000 ms
\\set started 1
\\endif
EOF

# pss_track none|top|all: what pg_stat_statements records from now on.
pss_track() {
	q postgres "ALTER SYSTEM SET pg_stat_statements.track = '$1'" -c "SELECT pg_reload_conf()" >/dev/null
	sleep 0.3
}

# scale_helpers DB: the procedures only this script needs.
scale_helpers() {
	qf "$1" >/dev/null <<'EOF'
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;

/*
 * bench_counts(n, extra): how many more claims each of instances 1..n must
 * get so that, with "extra" more services, every one holds its fair share
 * (the instances holding most now get the shares rounded up).
 */
CREATE FUNCTION bench_counts(n int, extra bigint) RETURNS int[]
LANGUAGE sql STABLE
AS $$
    WITH t AS (SELECT count(*) + extra AS total FROM gridha.service_claims),
    h AS (SELECT i, (SELECT count(*) FROM gridha.service_claims c WHERE c.claimant = bench_instance(i)) AS held
            FROM generate_series(1, n) AS i),
    r AS (SELECT i, held, row_number() OVER (ORDER BY held DESC, i) AS rk FROM h)
    SELECT array_agg(t.total / n + CASE WHEN r.rk <= t.total % n THEN 1 ELSE 0 END - r.held ORDER BY r.i)::int[]
      FROM r, t
$$;

/*
 * bench_reassign(dying, n, want): moves idle claims between instances 1..n
 * so that instance "dying" holds "want" and the others share the rest
 * evenly (claimant changed, epoch + 1, as a take does); held recounted.
 */
CREATE PROCEDURE bench_reassign(dying int, n int, want bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    d uuid := bench_instance(dying);
    total bigint;
    rest bigint;
    goal bigint;
    have bigint;
    k int;
BEGIN
    SELECT count(*) INTO total FROM gridha.service_claims
     WHERE claimant IN (SELECT bench_instance(i) FROM generate_series(1, n) AS i);
    rest := total - want;
    FOR pass IN 1..2 LOOP
        k := 0;
        FOR s IN 1..n LOOP
            CONTINUE WHEN s = dying;
            goal := rest / (n - 1) + CASE WHEN k < rest % (n - 1) THEN 1 ELSE 0 END;
            k := k + 1;
            SELECT count(*) INTO have FROM gridha.service_claims WHERE claimant = bench_instance(s);
            IF pass = 1 AND have > goal THEN
                UPDATE gridha.service_claims SET claimant = d, epoch = epoch + 1
                 WHERE service_id IN (SELECT service_id FROM gridha.service_claims
                                       WHERE claimant = bench_instance(s) AND NOT in_flight
                                       LIMIT have - goal);
            ELSIF pass = 2 AND have < goal THEN
                UPDATE gridha.service_claims SET claimant = bench_instance(s), epoch = epoch + 1
                 WHERE service_id IN (SELECT service_id FROM gridha.service_claims
                                       WHERE claimant = d AND NOT in_flight
                                       LIMIT goal - have);
            END IF;
            COMMIT;
        END LOOP;
    END LOOP;
    UPDATE gridha.instances i
       SET held = (SELECT count(*) FROM gridha.service_claims c WHERE c.claimant = i.instance_id)
     WHERE instance_id IN (SELECT bench_instance(x) FROM generate_series(1, n) AS x);
    COMMIT;
END
$$;

/*
 * bench_watch(inst, keep, timeout): polls the instance's claim count every
 * 10 ms until it holds nothing; the server clock (epoch seconds) when the
 * first claim had moved, when it held "keep" claims or fewer (its idle
 * claims had moved, when "keep" were in flight) and when the last had.
 */
CREATE PROCEDURE bench_watch(inst uuid, keep bigint, timeout float8,
                             INOUT first_moved float8 DEFAULT NULL, INOUT idle_moved float8 DEFAULT NULL,
                             INOUT all_moved float8 DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    h0 bigint;
    h bigint;
    t0 timestamptz := clock_timestamp();
BEGIN
    SELECT held INTO h0 FROM gridha.instances WHERE instance_id = inst;
    LOOP
        SELECT held INTO h FROM gridha.instances WHERE instance_id = inst;
        IF first_moved IS NULL AND h < h0 THEN
            first_moved := extract(epoch FROM clock_timestamp());
        END IF;
        IF idle_moved IS NULL AND h <= keep THEN
            idle_moved := extract(epoch FROM clock_timestamp());
        END IF;
        IF h = 0 THEN
            all_moved := extract(epoch FROM clock_timestamp());
            EXIT;
        END IF;
        EXIT WHEN clock_timestamp() > t0 + timeout * interval '1 second';
        COMMIT;
        PERFORM pg_sleep(0.01);
    END LOOP;
END
$$;

/*
 * bench_wal(inst, n): WAL per call (bytes between the insert positions
 * around the call and its commit) of renew_claims, acquire_claims and
 * next_batch, each call its own transaction: the median of n calls, after
 * one call of each that is not counted.
 */
CREATE PROCEDURE bench_wal(inst uuid, n int, INOUT renew float8 DEFAULT NULL,
                           INOUT renew_first float8 DEFAULT NULL,
                           INOUT acquire float8 DEFAULT NULL, INOUT poll float8 DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    l pg_lsn;
    r float8[] := '{}';
    a float8[] := '{}';
    p float8[] := '{}';
BEGIN
    CHECKPOINT;
    COMMIT;
    l := pg_current_wal_insert_lsn();
    PERFORM gridha.renew_claims(inst);
    COMMIT;
    renew_first := pg_wal_lsn_diff(pg_current_wal_insert_lsn(), l);
    PERFORM count(*) FROM gridha.acquire_claims(inst);
    COMMIT;
    PERFORM count(*) FROM gridha.next_batch(inst);
    COMMIT;
    FOR i IN 1..n LOOP
        l := pg_current_wal_insert_lsn();
        PERFORM gridha.renew_claims(inst);
        COMMIT;
        r := r || pg_wal_lsn_diff(pg_current_wal_insert_lsn(), l)::float8;
        l := pg_current_wal_insert_lsn();
        PERFORM count(*) FROM gridha.acquire_claims(inst);
        COMMIT;
        a := a || pg_wal_lsn_diff(pg_current_wal_insert_lsn(), l)::float8;
        l := pg_current_wal_insert_lsn();
        PERFORM count(*) FROM gridha.next_batch(inst);
        COMMIT;
        p := p || pg_wal_lsn_diff(pg_current_wal_insert_lsn(), l)::float8;
    END LOOP;
    SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY x) INTO renew FROM unnest(r) AS x;
    SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY x) INTO acquire FROM unnest(a) AS x;
    SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY x) INTO poll FROM unnest(p) AS x;
END
$$;

-- instances 1..n: "held" of each, in order, and whether it matches the claims
CREATE FUNCTION bench_split(n int) RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT min(held) || '-' || max(held)
           || CASE WHEN bool_and(held = real) THEN '' ELSE ' (held counts WRONG)' END
      FROM (SELECT i.held, (SELECT count(*) FROM gridha.service_claims c
                             WHERE c.claimant = i.instance_id) AS real
              FROM gridha.instances i
             WHERE i.instance_id IN (SELECT bench_instance(x) FROM generate_series(1, n) AS x)) s
$$;
EOF
	qf "$1" >/dev/null <"$HERE/idle_direct.sql"
}

# spread DB N: claims spread over instances 1..N, unless they are already.
spread() {
	local ok
	ok=$(q "$1" "SELECT (SELECT count(*) FROM gridha.service_claims WHERE claimant IS NULL) = 0
	               AND (SELECT max(held) - min(held) FROM gridha.instances
	                     WHERE instance_id IN (SELECT bench_instance(i) FROM generate_series(1, $2) AS i)) <= 1")
	[ "$ok" = t ] || q "$1" "SELECT bench_spread($2)" >/dev/null
}

# session_open DB NAME [PGOPTIONS]: a psql session in the background
# (application_name NAME) that runs what session_send writes to it and stays
# idle in between, as a client does between calls. Sets SESSION_FD (this
# shell's end) and SESSION_PID (psql's pid).
session_open() {
	local fifo=$GRIDHA_TEST_DIR/session.fifo
	rm -f "$fifo"
	mkfifo "$fifo"
	PGAPPNAME=$2 PGOPTIONS=${3:-} "$PG_BINDIR/psql" -X -q -A -t -d "$1" <"$fifo" >>"$GRIDHA_TEST_DIR/sessions.out" 2>&1 &
	SESSION_PID=$!
	disown "$SESSION_PID"	# no job report when it is killed
	BG_PIDS="$BG_PIDS $SESSION_PID"
	exec {SESSION_FD}>"$fifo"
	rm -f "$fifo"
}

# session_send FD SQL
session_send() {
	echo "$2" >&"$1"
}

# session_close FD PID: end of input: psql exits, its session ends.
session_close() {
	local fd=$1 _i
	exec {fd}>&-
	for _i in $(seq 1 100); do
		kill -0 "$2" 2>/dev/null || return 0
		sleep 0.1
	done
	gridha_log "  WARNING: psql $2 did not exit"
}

# holder DB FROM TO: a background session that renews instances FROM..TO,
# binding them to it (live, their session there), and stays. Sets
# HOLDER_FD and HOLDER_PID.
holder() {
	local _i
	session_open "$1" gridha-holder
	HOLDER_FD=$SESSION_FD
	HOLDER_PID=$SESSION_PID
	session_send "$HOLDER_FD" "SELECT count(gridha.renew_claims(bench_instance(i))) FROM generate_series($2, $3) AS i;"
	for _i in $(seq 1 100); do
		[ "$(q "$1" "SELECT count(*) FROM gridha.instances
		              WHERE instance_id IN (SELECT bench_instance(i) FROM generate_series($2, $3) AS i)
		                AND last_seen_at > now() - interval '2 seconds'")" = $(($3 - $2 + 1)) ] && return 0
		sleep 0.1
	done
	gridha_log "  WARNING: the holder did not renew instances $2..$3"
}

stop_holder() {
	session_close "$HOLDER_FD" "$HOLDER_PID"
	bench_wait_sessions "$1"
}

# pgbench_latency DB SCRIPT SECONDS: mean latency (ms) pgbench reports for
# one client running SCRIPT.
pgbench_latency() {
	"$PG_BINDIR/pgbench" -n -M prepared -c 1 -T "$3" -f "$BENCH_SCRIPTS/$2" "$1" 2>&1 |
		sed -n 's/^latency average = \([0-9.]*\) ms$/\1/p'
}

declare -A FIG

# ---------------------------------------------------------------------------
# Databases
# ---------------------------------------------------------------------------

t_start=$SECONDS
if part rate || part latency || part wal || part takeover; then
	gridha_log "loading: $SCALE_SERVICES services, spread over $SCALE_CLIENTS instances, then $SCALE_IDLE idle services through the API"
	dbs=sc_idle
	if part rate; then dbs="sc_idle0 sc_idle sc_dead"; fi
	for db in $dbs; do
		bench_gridha_db "$db"
		scale_helpers "$db"
		q "$db" "SET gridha.balance_claims = off" -c "CALL bench_new_services(1, $SCALE_SERVICES)" >/dev/null
		q "$db" "SELECT bench_spread($SCALE_CLIENTS)" >/dev/null
	done
	t0=$SECONDS
	q sc_idle "SELECT bench_spread($SCALE_CLIENTS)" -c "SET gridha.balance_claims = off" \
		-c "CALL bench_idle($((SCALE_SERVICES + 1)), bench_counts($SCALE_CLIENTS, $SCALE_IDLE))" >/dev/null
	FIG[load_idle]=$((SECONDS - t0))
	gridha_log "  $SCALE_IDLE idle services in ${FIG[load_idle]}s; claims per instance $(q sc_idle "SELECT bench_split($SCALE_CLIENTS)")"
	if part rate; then
		t0=$SECONDS
		third=$((SCALE_DEAD / 3))
		q sc_dead "SELECT count(gridha.register_instance('dead, never used')) FROM generate_series(1, $third)" >/dev/null
		q sc_dead "SELECT count(gridha.release_claims(gridha.register_instance('dead, released')))
		             FROM generate_series(1, $third)" >/dev/null
		q sc_dead "SET gridha.soft_expiry = '1s'" -c "SET gridha.hard_expiry = '2s'" -c "SET gridha.renew_interval = '500ms'" \
			-c "SELECT count(gridha.renew_claims(gridha.register_instance('dead, session ended')))
			      FROM generate_series(1, $((SCALE_DEAD - 2 * third)))" >/dev/null
		gridha_log "  $SCALE_DEAD dead instances in $((SECONDS - t0))s"
	fi
fi

# ---------------------------------------------------------------------------
# rate: 0 idle, SCALE_IDLE idle, SCALE_DEAD dead
# ---------------------------------------------------------------------------

declare -A RATES
if part rate; then
	gridha_log "rate: $SCALE_SERVICES x $SCALE_DEPTH batches, $SCALE_CLIENTS clients, two steps"
	for round in $(seq 1 "$SCALE_RUNS"); do
		for db in $(rotate $((round - 1)) sc_idle0 sc_idle sc_dead); do
			prefix="r${round}_"
			spread "$db" "$SCALE_CLIENTS"
			q "$db" "CALL bench_enqueue('$prefix', 1, $SCALE_SERVICES, $SCALE_DEPTH)"
			bench_prepare "$db" gridha.batches gridha.service_claims gridha.instances
			bench_timed g2 "$db" "$SCALE_CLIENTS" "$prefix"
			# shellcheck disable=SC2034 # read by bench_log_run
			RUN_INFO="claims per instance $(q "$db" "SELECT bench_split($SCALE_CLIENTS)")"
			bench_log_run "$db #$round"
			RATES[$db]="${RATES[$db]:-} $RUN_RATE"
			eval "R_${db}_$round=$RUN_RATE"
		done
		r_idle=$(ratio "$(eval "echo \$R_sc_idle_$round")" "$(eval "echo \$R_sc_idle0_$round")")
		r_dead=$(ratio "$(eval "echo \$R_sc_dead_$round")" "$(eval "echo \$R_sc_idle0_$round")")
		PAIRS_IDLE="${PAIRS_IDLE:-} $r_idle"
		PAIRS_DEAD="${PAIRS_DEAD:-} $r_dead"
		gridha_log "  round $round: idle/none $r_idle, dead/none $r_dead"
	done
	FIG[rate_none]=$(median "${RATES[sc_idle0]}")
	FIG[rate_idle]=$(median "${RATES[sc_idle]}")
	FIG[rate_dead]=$(median "${RATES[sc_dead]}")
	FIG[r_idle]=$(median "$PAIRS_IDLE")
	FIG[r_dead]=$(median "$PAIRS_DEAD")
	FIG[idle_runs]="none:${RATES[sc_idle0]} | idle:${RATES[sc_idle]} | dead:${RATES[sc_dead]}"
	FIG[idle_pairs]="idle/none:$PAIRS_IDLE | dead/none:$PAIRS_DEAD"
	FIG[dead_left]=$(q sc_dead "SELECT count(*) FILTER (WHERE soft_expiry IS NOT NULL) || ' of ' || count(*)
	                             FROM gridha.instances WHERE label LIKE 'dead%'")
fi

# ---------------------------------------------------------------------------
# latency: empty next_batch
# ---------------------------------------------------------------------------

# poll_latency DB KEY: the empty poll of instance 1, the others held live.
poll_latency() {
	local db=$1 key=$2 held
	bench_wait_sessions "$db"
	pss_track top
	holder "$db" 2 "$SCALE_CLIENTS"
	q "$db" "SELECT pg_stat_statements_reset()" >/dev/null
	FIG[poll_$key]=$(pgbench_latency "$db" poll.sql "$SCALE_POLL_SECONDS")
	FIG[poll_server_$key]=$(q "$db" "SELECT round(mean_exec_time::numeric, 3) || ' ms over ' || calls || ' calls'
	                                   FROM pg_stat_statements WHERE query LIKE '%gridha.next_batch%' AND toplevel
	                                  ORDER BY calls DESC LIMIT 1")
	FIG[rtt_$key]=$(pgbench_latency "$db" select1.sql 2)
	stop_holder "$db"
	pss_track none
	held=$(q "$db" "SELECT held FROM gridha.instances WHERE instance_id = bench_instance(1)")
	FIG[poll_held_$key]=$held
	gridha_log "  empty next_batch, $key idle services (instance holds $held): ${FIG[poll_$key]} ms" \
		"(server ${FIG[poll_server_$key]}; SELECT 1 ${FIG[rtt_$key]} ms); claims per instance" \
		"$(q "$db" "SELECT bench_split($SCALE_CLIENTS)")"
}

if part latency; then
	poll_latency sc_idle "$SCALE_IDLE"
fi

# ---------------------------------------------------------------------------
# many: 32 and 96 clients against the keyed baseline
# ---------------------------------------------------------------------------

# many_tail_sql ROWS: SQL giving the tail of a run from ROWS (service, time
# a batch finished): how long after the median service's last batch the
# last service's finished. Services held by one client with another wait
# their turn there, and finish last.
many_tail_sql() {
	echo "WITH s AS (SELECT max(t) AS last FROM ($1) AS r (service, t) GROUP BY service)
	      SELECT round(extract(epoch FROM max(last) - percentile_disc(0.5) WITHIN GROUP (ORDER BY last))::numeric, 2) || ' s'
	        FROM s"
}

declare -A PAIR_MANY
if part many; then
	gridha_log "many: $SCALE_MANY_SERVICES x $SCALE_MANY_DEPTH batches, two steps, clients: $SCALE_MANY"
	bench_keyed_db sc_many_keyed "$SCALE_MANY_SERVICES"
	for n in $SCALE_MANY; do
		bench_gridha_db "sc_many_$n"
		q "sc_many_$n" "SET gridha.balance_claims = off" -c "CALL bench_new_services(1, $SCALE_MANY_SERVICES)" >/dev/null
	done
	for round in $(seq 1 "$SCALE_RUNS"); do
		for n in $SCALE_MANY; do
			prefix="r${round}c${n}_"
			order="keyed2 g2"
			[ $((round % 2)) = 1 ] || order="g2 keyed2"
			for kind in $order; do
				if [ "$kind" = keyed2 ]; then
					db=sc_many_keyed
					q "$db" "CALL bench_enqueue('$prefix', $SCALE_MANY_SERVICES, $SCALE_MANY_DEPTH)"
					bench_prepare "$db" bench_keys bench_jobs
				else
					db=sc_many_$n
					q "$db" "SELECT bench_spread($n)" >/dev/null
					q "$db" "CALL bench_enqueue('$prefix', 1, $SCALE_MANY_SERVICES, $SCALE_MANY_DEPTH)"
					bench_prepare "$db" gridha.batches gridha.service_claims gridha.instances
				fi
				bench_timed "$kind" "$db" "$n" "$prefix"
				# shellcheck disable=SC2034 # read by bench_log_run
				if [ "$kind" = keyed2 ]; then
					RUN_INFO="tail $(q "$db" "$(many_tail_sql "SELECT key, done_at FROM bench_jobs
					                                          WHERE starts_with(batch_id, '$prefix')")")"
				else
					RUN_INFO="claims per instance $(q "$db" "SELECT min(held) || '-' || max(held) FROM gridha.instances
					                                        WHERE instance_id IN (SELECT bench_instance(i) FROM generate_series(1, $n) AS i)")"
					RUN_INFO="$RUN_INFO, claims moved $(q "$db" "SELECT count(DISTINCT (service_id, epoch)) - count(DISTINCT service_id)
					                                              FROM gridha.batches WHERE starts_with(batch_id, '$prefix')")"
					RUN_INFO="$RUN_INFO, tail $(q "$db" "$(many_tail_sql "SELECT service_id, finished_at FROM gridha.batches
					                                                     WHERE starts_with(batch_id, '$prefix')")")"
				fi
				bench_log_run "$kind, $n clients #$round"
				RATES[${kind}_$n]="${RATES[${kind}_$n]:-} $RUN_RATE"
				eval "R_${kind}_$n=$RUN_RATE"
			done
			PAIR_MANY[$n]="${PAIR_MANY[$n]:-} $(ratio "$(eval "echo \$R_g2_$n")" "$(eval "echo \$R_keyed2_$n")")"
			gridha_log "  $n clients, round $round: gridha/keyed $(eval "echo \$R_g2_$n") / $(eval "echo \$R_keyed2_$n")"
		done
	done
fi

# ---------------------------------------------------------------------------
# uneven: busy services that appear after the idle ones were claimed
# ---------------------------------------------------------------------------

# uneven_helpers DB: the sampler of the spread of work, and the reset of
# the "join" case.
uneven_helpers() {
	qf "$1" >/dev/null <<'EOS'
CREATE TABLE bench_work_samples (at timestamptz, lo int, hi int, total int, counts int[]);

/*
 * bench_sample_work(n, every_ms, timeout): every every_ms, the services
 * with work (head ready now, or in flight) each of instances 1..n holds:
 * the smallest and largest count, their sum, and each instance's count
 * (counts[i]); until the workload is
 * done (once work was seen) or the timeout.
 */
CREATE PROCEDURE bench_sample_work(n int, every_ms int, timeout float8)
LANGUAGE plpgsql
AS $$
DECLARE
    t_end timestamptz := clock_timestamp() + timeout * interval '1 second';
    seen boolean := false;
    l int;
    h int;
    t int;
    cs int[];
BEGIN
    WHILE clock_timestamp() < t_end LOOP
        SELECT min(w), max(w), sum(w), array_agg(w ORDER BY i) INTO l, h, t, cs
          FROM (SELECT i, (SELECT count(*) FROM gridha.service_claims c
                            WHERE c.claimant = bench_instance(i)
                              AND (c.ready_at <= clock_timestamp() OR c.in_flight)) AS w
                  FROM generate_series(1, n) AS i) x;
        IF t > 0 THEN
            seen := true;
            INSERT INTO bench_work_samples VALUES (clock_timestamp(), l, h, t, cs);
        END IF;
        COMMIT;
        EXIT WHEN seen AND bench_left() = 0;
        PERFORM pg_sleep(every_ms / 1000.0);
    END LOOP;
END
$$;

/*
 * bench_issue_split(n, busy): the claims moved (claimant set, epoch + 1, as
 * a take does) so that, with "busy" more services, instances 1..n hold
 * their count shares of them all, instance 1 "busy" fewer; held
 * recounted. Claims are dealt in service_id order.
 */
CREATE PROCEDURE bench_issue_split(n int, busy int)
LANGUAGE plpgsql
AS $$
DECLARE
    t bigint;
BEGIN
    SELECT count(*) + busy INTO t FROM gridha.service_claims;
    WITH s AS (SELECT i, t / n + CASE WHEN i <= t % n THEN 1 ELSE 0 END
                         - CASE WHEN i = 1 THEN busy ELSE 0 END AS k
                 FROM generate_series(1, n) AS i),
    tgt AS (SELECT i, sum(k) OVER (ORDER BY i) AS upto FROM s),
    r AS (SELECT service_id, row_number() OVER (ORDER BY service_id) AS rn FROM gridha.service_claims),
    w AS (SELECT r.service_id, bench_instance((SELECT min(i) FROM tgt WHERE tgt.upto >= r.rn)::int) AS inst FROM r)
    UPDATE gridha.service_claims c SET claimant = w.inst, epoch = c.epoch + 1
      FROM w WHERE c.service_id = w.service_id AND c.claimant IS DISTINCT FROM w.inst;
    UPDATE gridha.instances i
       SET held = (SELECT count(*) FROM gridha.service_claims c WHERE c.claimant = i.instance_id)
     WHERE instance_id IN (SELECT bench_instance(x) FROM generate_series(1, n) AS x);
    COMMIT;
END
$$;

-- bench_all_to_one(): every claim to instance 1 (epoch + 1, as a take
-- does), held recounted
CREATE PROCEDURE bench_all_to_one(n int)
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE gridha.service_claims SET claimant = bench_instance(1), epoch = epoch + 1
     WHERE claimant IS DISTINCT FROM bench_instance(1);
    UPDATE gridha.instances i
       SET held = (SELECT count(*) FROM gridha.service_claims c WHERE c.claimant = i.instance_id)
     WHERE instance_id IN (SELECT bench_instance(x) FROM generate_series(1, n) AS x);
    COMMIT;
END
$$;
EOS
}

# uneven_run DB KIND ROUND FIRST: one timed run of case KIND (none, idle,
# join) in DB: SCALE_SERVICES new services x SCALE_DEPTH batches, numbered
# from FIRST, enqueued now (free); for join, they and every other claim are
# then given to instance 1. The spread of work is sampled during the run.
# Sets RUN_* (bench_timed) and SPREAD (the samples from 2 s after the
# first hand-out on: min-max of the lowest and highest counts), SPREAD2
# (the sample nearest 2 s after the first hand-out) and SPREAD_FIRST (the
# first sample).
uneven_run() {
	local db=$1 kind=$2 round=$3 first=$4 prefix spid
	prefix="u${round}${kind}_"
	[ "$kind" != idle ] || q "$db" "CALL bench_issue_split($SCALE_CLIENTS, $SCALE_SERVICES)"
	q "$db" "CALL bench_enqueue('$prefix', $first, $SCALE_SERVICES, $SCALE_DEPTH)"
	if [ "$kind" = join ]; then
		q "$db" "CALL bench_all_to_one($SCALE_CLIENTS)" -c "SET gridha.balance_claims = off" \
			-c "SELECT gridha.renew_claims(bench_instance(1))" \
			-c "SELECT count(*) FROM gridha.acquire_claims(bench_instance(1))" >/dev/null
	fi
	bench_prepare "$db" gridha.batches gridha.service_claims gridha.instances
	q "$db" "TRUNCATE bench_work_samples" >/dev/null
	# the sampler connects once pgbench's clients have (bench_timed waits
	# for the database to have no session before it starts them)
	(
		for _i in $(seq 1 200); do
			[ "$(q postgres "SELECT count(*) FROM pg_stat_activity
			                  WHERE datname = '$db' AND application_name = 'pgbench'")" = 0 ] || break
			sleep 0.05
		done
		exec "$PG_BINDIR/psql" -X -q -A -t -d "$db" \
			-c "CALL bench_sample_work($SCALE_CLIENTS, $SCALE_SAMPLE_MS, $((BENCH_RUN_TIMEOUT + 20)))"
	) >"$BENCH_SCRIPTS/sampler.out" 2>&1 &
	spid=$!
	BG_PIDS="$BG_PIDS $spid"
	bench_timed g2 "$db" "$SCALE_CLIENTS" "$prefix"
	# the sampler ends by itself once the workload is done
	for _i in $(seq 1 50); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
	kill "$spid" 2>/dev/null || true
	wait "$spid" 2>/dev/null || true
	local t0 tail
	t0=$(q "$db" "SELECT min(handed_out_at) FROM gridha.batches WHERE starts_with(batch_id, '$prefix')")
	# the tail: from when the first service has no batch left
	tail=$(q "$db" "SELECT min(f) FROM (SELECT max(finished_at) AS f FROM gridha.batches
	                                    WHERE starts_with(batch_id, '$prefix') GROUP BY service_id) x")
	SPREAD=$(q "$db" "SELECT min(lo) || '-' || max(hi) FROM bench_work_samples
	                   WHERE at >= '$t0'::timestamptz + interval '2 seconds' AND at < '$tail'::timestamptz")
	SPREAD2=$(q "$db" "SELECT lo || '-' || hi FROM bench_work_samples
	                    WHERE at >= '$t0'::timestamptz + interval '2 seconds' ORDER BY at LIMIT 1")
	COUNTS2=$(q "$db" "SELECT counts::text FROM bench_work_samples
	                    WHERE at >= '$t0'::timestamptz + interval '2 seconds' ORDER BY at LIMIT 1")
	SPREAD_FIRST=$(q "$db" "SELECT lo || '-' || hi || ' at ' || round(extract(epoch FROM at - '$t0'::timestamptz)::numeric, 2) || 's'
	                         FROM bench_work_samples ORDER BY at LIMIT 1")
	SAMPLES=$(q "$db" "SELECT string_agg(CASE WHEN at < '$tail'::timestamptz THEN '' ELSE '(tail)' END
	                                     || lo || '-' || hi || '/' || total, ' ' ORDER BY at)
	                     FROM bench_work_samples")
}

declare -A UNEVEN
if part uneven; then
	gridha_log "uneven: $SCALE_SERVICES x $SCALE_DEPTH batches on services created after $SCALE_UNEVEN_IDLE idle" \
		"services were claimed by $SCALE_CLIENTS instances, $SCALE_CLIENTS clients, two steps"
	t0=$SECONDS
	for db in sc_un_none sc_un_idle sc_un_join; do
		bench_gridha_db "$db"
		scale_helpers "$db"
		uneven_helpers "$db"
		q "$db" "SELECT count(gridha.renew_claims(bench_instance(i))) FROM generate_series(1, $SCALE_CLIENTS) AS i" >/dev/null
	done
	q sc_un_idle "CALL bench_idle_direct(1, bench_counts($SCALE_CLIENTS, $SCALE_UNEVEN_IDLE))" >/dev/null
	q sc_un_join "CALL bench_idle_direct(1, ARRAY[$SCALE_UNEVEN_IDLE])" >/dev/null
	gridha_log "  $SCALE_UNEVEN_IDLE idle services written directly in $((SECONDS - t0))s; claims per instance:" \
		"idle $(q sc_un_idle "SELECT bench_split($SCALE_CLIENTS)"), join $(q sc_un_join "SELECT bench_split($SCALE_CLIENTS)")"
	next=$((SCALE_UNEVEN_IDLE + 1))
	for round in $(seq 1 "$SCALE_UNEVEN_RUNS"); do
		for kind in $(rotate $((round - 1)) none idle join); do
			uneven_run "sc_un_$kind" "$kind" "$round" "$next"
			RUN_INFO="busy per instance from 2 s: $SPREAD (at 2 s: $SPREAD2; first sample $SPREAD_FIRST);"
			RUN_INFO="$RUN_INFO claims moved $(q "sc_un_$kind" "SELECT count(DISTINCT (service_id, epoch)) - count(DISTINCT service_id)
			                                                 FROM gridha.batches WHERE starts_with(batch_id, 'u${round}${kind}_')")"
			bench_log_run "uneven $kind #$round"
			gridha_log "    samples (lowest-highest busy per instance/their sum, every ${SCALE_SAMPLE_MS} ms): $SAMPLES"
			gridha_log "    busy per instance 1..$SCALE_CLIENTS at 2 s: $COUNTS2"
			UNEVEN[rate_$kind]="${UNEVEN[rate_$kind]:-} $RUN_RATE"
			UNEVEN[spread_$kind]="${UNEVEN[spread_$kind]:-} $SPREAD"
			UNEVEN[spread2_$kind]="${UNEVEN[spread2_$kind]:-} $SPREAD2"
			eval "U_${kind}_$round=$RUN_RATE"
		done
		next=$((next + SCALE_SERVICES))
		UNEVEN[pairs_idle]="${UNEVEN[pairs_idle]:-} $(ratio "$(eval "echo \$U_idle_$round")" "$(eval "echo \$U_none_$round")")"
		UNEVEN[pairs_join]="${UNEVEN[pairs_join]:-} $(ratio "$(eval "echo \$U_join_$round")" "$(eval "echo \$U_none_$round")")"
		gridha_log "  round $round: idle/none $(eval "echo \$U_idle_$round") / $(eval "echo \$U_none_$round")," \
			"join/none $(eval "echo \$U_join_$round") / $(eval "echo \$U_none_$round")"
	done
	for db in sc_un_none sc_un_idle sc_un_join; do q postgres "DROP DATABASE $db" >/dev/null; done
fi

# ---------------------------------------------------------------------------
# survivor: issue 26's cases 2 and 3 (test/t/043_survivor.pl)
# ---------------------------------------------------------------------------

declare -A SURV
# surv_fig LIST: the median of a survivor figure's runs; "not held" when a
# run did not see every service with work held
surv_fig() {
	case " $1 " in
		*" none "*) echo "not held" ;;
		*) median "$1" ;;
	esac
}
surv_verdict() {
	if [[ $1 =~ ^[0-9.]+$ ]]; then verdict "$1" 1 le; else echo MISS; fi
}
if part survivor; then
	gridha_log "survivor: test/t/043_survivor.pl, $SCALE_SURVIVOR_RUNS runs (its loops end after ${SCALE_SURVIVOR_SECONDS}s at most)"
	surv_fw=$(gridha_tap_framework)
	surv_as=()
	[ "$(id -u)" -eq 0 ] && surv_as=(runuser -u postgres --)
	for run in $(seq 1 "$SCALE_SURVIVOR_RUNS"); do
		figs=$GRIDHA_TEST_DIR/survivor.$run
		surv_dir=$GRIDHA_TEST_DIR/survivor-$run
		mkdir -p "$surv_dir"
		: >"$figs"
		gridha_fix_owner "$figs" "$surv_dir"
		(cd "$surv_dir" && "${surv_as[@]}" env PATH="$PG_BINDIR:$PATH" TESTDIR="$surv_dir" \
			PG_REGRESS="$(dirname "$(dirname "$("$PG_CONFIG" --pgxs)")")/test/regress/pg_regress" \
			SURVIVOR_FIGURES="$figs" SURVIVOR_SECONDS="$SCALE_SURVIVOR_SECONDS" \
			perl -I "$surv_fw" "$ROOT/test/t/043_survivor.pl") >"$GRIDHA_TEST_DIR/survivor-$run.out" 2>&1 || true
		gridha_log "  run $run: $(grep -c '^ok' "$GRIDHA_TEST_DIR/survivor-$run.out") ok," \
			"$(grep -c '^not ok' "$GRIDHA_TEST_DIR/survivor-$run.out") not ok; $(tr '\n' ';' <"$figs")"
		while read -r what a b; do
			SURV[first_$what]="${SURV[first_$what]:-} $a"
			SURV[idle_$what]="${SURV[idle_$what]:-} ${b:-}"
		done <"$figs"
	done
fi

# ---------------------------------------------------------------------------
# wal: one renew per instance
# ---------------------------------------------------------------------------

# wal_of DB KEY: WAL of renew_claims, acquire_claims and an empty
# next_batch of instance 1, the others held live.
wal_of() {
	local db=$1 key=$2 row
	bench_wait_sessions "$db"
	holder "$db" 2 "$SCALE_CLIENTS"
	row=$(q "$db" "CALL bench_wal(bench_instance(1), 20)")
	stop_holder "$db"
	IFS='|' read -r "FIG[wal_renew_$key]" "FIG[wal_renew_first_$key]" "FIG[wal_acquire_$key]" "FIG[wal_poll_$key]" <<<"$row"
	FIG[wal_held_$key]=$(q "$db" "SELECT held FROM gridha.instances WHERE instance_id = bench_instance(1)")
	gridha_log "  WAL per call, instance holding ${FIG[wal_held_$key]} of $key+ claims: renew_claims ${FIG[wal_renew_$key]} B" \
		"(first after a checkpoint ${FIG[wal_renew_first_$key]} B), acquire_claims ${FIG[wal_acquire_$key]} B," \
		"empty next_batch ${FIG[wal_poll_$key]} B"
}

if part wal; then
	wal_of sc_idle "$SCALE_IDLE"
fi

# ---------------------------------------------------------------------------
# takeover
# ---------------------------------------------------------------------------

# takeover DB KEY a|b: instance SCALE_CLIENTS (the dying one) holds
# SCALE_TAKEOVER claims, the others share the rest and poll; it dies.
takeover() {
	local db=$1 key=$2 how=$3 dying=$SCALE_CLIENTS d dfd dpid spid wpid t_event row first idle all total soft hard before
	local keep=0 inflight
	local surv=$((SCALE_CLIENTS - 1))
	d=$(bench_instance "$dying")
	bench_wait_sessions "$db"
	q "$db" "CALL bench_reassign($dying, $SCALE_CLIENTS, $SCALE_TAKEOVER)" >/dev/null
	bench_prepare "$db" gridha.service_claims gridha.instances
	total=$(q "$db" "SELECT count(*) FROM gridha.service_claims")
	pss_track all

	# the dying instance's session: idle once its renewal is done
	if [ "$how" = a ]; then
		session_open "$db" gridha-dying "-c gridha.balance_claims=off"
	else
		session_open "$db" gridha-dying "-c gridha.balance_claims=off -c gridha.soft_expiry=10s -c gridha.hard_expiry=20s -c gridha.renew_interval=2s"
	fi
	dfd=$SESSION_FD
	dpid=$SESSION_PID
	if [ "$how" = b ] && [ "$SCALE_TAKEOVER_INFLIGHT" -gt 0 ]; then
		# some of its services have a batch submitting when it hangs: those
		# move only at hard expiry. Handed out right after the renewal, so
		# that the hand-out takes no claim (none is due)
		keep=$SCALE_TAKEOVER_INFLIGHT
		q "$db" "INSERT INTO gridha.batches (service_id, batch_id, payload)
		         SELECT service_id, 'hung-$key-' || service_id, bench_payload()
		           FROM gridha.service_claims WHERE claimant = '$d' AND NOT in_flight
		          ORDER BY service_id LIMIT $keep" >/dev/null
	fi
	session_send "$dfd" "SELECT gridha.renew_claims('$d');"
	[ "$keep" = 0 ] || session_send "$dfd" "SELECT count(*) FROM gridha.next_batches('$d', $keep);"
	for _i in $(seq 1 100); do
		[ "$(q "$db" "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		               WHERE a.application_name = 'gridha-dying' AND l.locktype = 'advisory' AND l.granted")" = 0 ] || break
		sleep 0.1
	done
	if [ "$keep" -gt 0 ]; then
		for _i in $(seq 1 100); do
			inflight=$(q "$db" "SELECT count(*) FROM gridha.service_claims WHERE claimant = '$d' AND in_flight")
			[ "$inflight" -lt "$keep" ] || break
			sleep 0.1
		done
		[ "$inflight" = "$keep" ] || gridha_log "  WARNING: $inflight of $keep batches submitting under the hung instance"
	fi
	row=$(q "$db" "SELECT extract(epoch FROM soft_expiry), extract(epoch FROM hard_expiry)
	                 FROM gridha.instances WHERE instance_id = '$d'")
	soft=${row%%|*}
	hard=${row#*|}

	# the survivors
	PGOPTIONS="-c gridha.balance_claims=off" "$PG_BINDIR/pgbench" -n -M prepared -c "$surv" -j "$BENCH_JOBS" \
		-T 300 -D started=0 -f "$BENCH_SCRIPTS/surv.sql" "$db" >"$BENCH_SCRIPTS/surv.out" 2>&1 &
	spid=$!
	BG_PIDS="$BG_PIDS $spid"
	sleep 3
	q "$db" "SELECT pg_stat_statements_reset()" >/dev/null
	# the watcher's own statements are not counted (track = top)
	PGOPTIONS="-c pg_stat_statements.track=top" \
		"$PG_BINDIR/psql" -X -q -A -t -d "$db" -c "CALL bench_watch('$d', $keep, 120)" >"$GRIDHA_TEST_DIR/watch.out" &
	wpid=$!
	BG_PIDS="$BG_PIDS $wpid"
	sleep 0.5
	before=$(q "$db" "SELECT held FROM gridha.instances WHERE instance_id = '$d'")
	[ "$before" = "$SCALE_TAKEOVER" ] ||
		gridha_log "  WARNING: the dying instance holds $before claims before it dies"
	if [ "$how" = a ]; then
		t_event=$(date +%s.%N)
		kill -9 "$dpid"
	else
		t_event=$soft
	fi
	wait "$wpid" || true
	IFS='|' read -r first idle all <"$GRIDHA_TEST_DIR/watch.out"
	sleep 0.5
	FIG[take_stmts_${how}_$key]=$(q "$db" "SELECT format('      %9s calls %10s ms %12s rows  %s', calls, round(total_exec_time::numeric, 1),
	                                         rows, left(regexp_replace(query, '\\s+', ' ', 'g'), 90))
	                                  FROM pg_stat_statements
	                                 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
	                                   AND NOT toplevel AND query NOT LIKE '%bench_%'
	                                 ORDER BY total_exec_time DESC LIMIT 8")
	row=$(q "$db" "SELECT round(sum(total_exec_time) FILTER (WHERE NOT toplevel)::numeric, 1),
	                      round(sum(total_exec_time) FILTER (WHERE NOT toplevel AND (query LIKE '%c.claimant = \$4%'
	                                                         OR query LIKE 'WITH h AS%' OR query LIKE '%d(id, delta, taker)%'
	                                                         OR query LIKE '%ORDER BY instance_id FOR UPDATE%'))::numeric, 1),
	                      sum(calls) FILTER (WHERE toplevel AND query LIKE '%gridha.next_batch%')
	                 FROM pg_stat_statements
	                WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
	                  AND query NOT LIKE '%bench_%'")
	IFS='|' read -r "FIG[take_db_${how}_$key]" "FIG[take_dbmove_${how}_$key]" "FIG[take_polls_${how}_$key]" <<<"$row"
	kill "$spid" 2>/dev/null || true
	wait "$spid" 2>/dev/null || true
	if [ "$how" = b ]; then
		# the hung session outlives its hard expiry
		while awk -v h="$hard" -v n="$(date +%s.%N)" 'BEGIN { exit !(n < h + 0.5) }'; do sleep 0.2; done
	fi
	session_close "$dfd" "$dpid"
	bench_wait_sessions "$db"
	pss_track none
	FIG[take_total_$key]=$total
	# (a): from the kill; (b): the idle claims from the soft expiry, the
	# ones in flight from the hard expiry
	since() { if [ -n "$1" ]; then awk -v a="$1" -v t="$2" 'BEGIN { printf "%.2f", a - t }'; else echo "not done"; fi; }
	FIG[take_first_${how}_$key]=$(since "$first" "$t_event")
	FIG[take_time_${how}_$key]=$(since "$idle" "$t_event")
	FIG[take_keep_${how}_$key]=$keep
	if [ "$keep" -gt 0 ]; then
		FIG[take_hard_${how}_$key]=$(since "$all" "$hard")
	fi
	gridha_log "  takeover ($how) of $SCALE_TAKEOVER claims ($keep in flight), $total in all: first moved after ${FIG[take_first_${how}_$key]}s," \
		"the idle ones after ${FIG[take_time_${how}_$key]}s${FIG[take_hard_${how}_$key]:+, the ones in flight ${FIG[take_hard_${how}_$key]}s after the hard expiry};" \
		"survivors' statements ${FIG[take_db_${how}_$key]} ms" \
		"(taking ${FIG[take_dbmove_${how}_$key]} ms), ${FIG[take_polls_${how}_$key]} polls; claims left with the dying:" \
		"$(q "$db" "SELECT count(*) FROM gridha.service_claims WHERE claimant = '$d'"), claims per survivor" \
		"$(q "$db" "SELECT bench_split($surv)")"
}

if part takeover; then
	gridha_log "takeover: $SCALE_TAKEOVER claims, $SCALE_IDLE+ in all"
	for how in $SCALE_TAKEOVER_CASES; do takeover sc_idle "$SCALE_IDLE" "$how"; done
fi

# ---------------------------------------------------------------------------
# the large case: SCALE_IDLE_LARGE idle services
# ---------------------------------------------------------------------------

if part latency || part wal || part takeover; then
	extra=$((SCALE_IDLE_LARGE - $(q sc_idle "SELECT count(*) FROM gridha.service_claims")))
	t0=$SECONDS
	first=$(($(q sc_idle "SELECT count(*) FROM gridha.service_claims") + 1))
	q sc_idle "CALL bench_idle_direct($first, bench_counts($SCALE_CLIENTS, $extra))" >/dev/null
	bench_prepare sc_idle gridha.batches gridha.service_claims gridha.instances gridha.service_counts
	FIG[load_large]=$((SECONDS - t0))
	gridha_log "large: $extra more idle services written directly in ${FIG[load_large]}s (with VACUUM ANALYZE);" \
		"$(q sc_idle "SELECT count(*) FROM gridha.service_claims") services, claims per instance" \
		"$(q sc_idle "SELECT bench_split($SCALE_CLIENTS)"), counted $(q sc_idle "SELECT sum(services) FROM gridha.service_counts")"
	part latency && poll_latency sc_idle "$SCALE_IDLE_LARGE"
	part wal && wal_of sc_idle "$SCALE_IDLE_LARGE"
	if part takeover; then
		for how in $SCALE_TAKEOVER_CASES; do takeover sc_idle "$SCALE_IDLE_LARGE" "$how"; done
	fi
fi

# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------

echo
echo "scale: $(nproc) cores, PostgreSQL $(q postgres "SHOW server_version" | cut -d' ' -f1), shared_buffers 512MB," \
	"synchronous_commit on, ${BENCH_PAYLOAD}-byte payloads, $SCALE_RUNS rounds"
echo "rates: the workload's batches / (last commit - first hand-out), from the rows; median run;"
echo "ratio: the median of the rounds' ratios (each round runs the cases back to back)."
echo
printf '  %-58s %16s  %6s  %s\n' case figure ratio target
line() { printf '  %-58s %16s  %6s  %s\n' "$@"; }
if part rate; then
	line "$SCALE_CLIENTS clients, 2 steps, $SCALE_SERVICES x $SCALE_DEPTH, no idle service" "${FIG[rate_none]} b/s" "" ""
	line "... with $SCALE_IDLE idle claimed services" "${FIG[rate_idle]} b/s" "${FIG[r_idle]}" \
		"≥$TARGET_IDLE $(verdict "${FIG[r_idle]}" $TARGET_IDLE)"
	line "... with $SCALE_DEAD dead instances" "${FIG[rate_dead]} b/s" "${FIG[r_dead]}" \
		"≥$TARGET_DEAD $(verdict "${FIG[r_dead]}" $TARGET_DEAD)"
fi
if part many; then
	for n in $SCALE_MANY; do
		r=$(median "${PAIR_MANY[$n]}")
		line "$n clients, keyed baseline, 2 steps, $SCALE_MANY_SERVICES x $SCALE_MANY_DEPTH" "$(median "${RATES[keyed2_$n]}") b/s" "" ""
		line "$n clients, gridha, 2 steps" "$(median "${RATES[g2_$n]}") b/s" "$r" "≥$TARGET_MANY $(verdict "$r" $TARGET_MANY)"
	done
fi
if part latency; then
	for k in $SCALE_IDLE $SCALE_IDLE_LARGE; do
		[ -n "${FIG[poll_$k]:-}" ] || continue
		line "empty next_batch, $k idle services (mean, client)" "${FIG[poll_$k]} ms" "" \
			"≤$TARGET_POLL_MS ms $(verdict "${FIG[poll_$k]}" $TARGET_POLL_MS le)"
		line "   server (pg_stat_statements), SELECT 1 round trip" "${FIG[poll_server_$k]%% ms*} ms" "" "SELECT 1: ${FIG[rtt_$k]} ms"
	done
fi
if part wal; then
	for k in $SCALE_IDLE $SCALE_IDLE_LARGE; do
		[ -n "${FIG[wal_renew_$k]:-}" ] || continue
		line "renew_claims WAL, instance holding ${FIG[wal_held_$k]} claims" "${FIG[wal_renew_$k]} B" "" \
			"≤$TARGET_WAL B $(verdict "${FIG[wal_renew_$k]}" $TARGET_WAL le)"
		line "   first renew after a checkpoint (full-page image)" "${FIG[wal_renew_first_$k]} B" "" ""
		line "   acquire_claims / empty next_batch" "${FIG[wal_acquire_$k]} / ${FIG[wal_poll_$k]} B" "" ""
	done
fi
if part takeover; then
	for how in a b; do
		for k in $SCALE_IDLE $SCALE_IDLE_LARGE; do
			[ -n "${FIG[take_time_${how}_$k]:-}" ] || continue
			if [ $how = a ]; then what="session killed"; since="kill"; else what="hung past expiry"; since="soft expiry"; fi
			line "takeover ($how) $what: $SCALE_TAKEOVER of ${FIG[take_total_$k]} claims" \
				"${FIG[take_time_${how}_$k]} s" "" "from the $since (first moved ${FIG[take_first_${how}_$k]} s)"
			if [ -n "${FIG[take_hard_${how}_$k]:-}" ]; then
				line "   its ${FIG[take_keep_${how}_$k]} claims in flight" \
					"${FIG[take_hard_${how}_$k]} s" "" "from the hard expiry"
			fi
			line "   survivors' claim statements (of them moving claims)" \
				"${FIG[take_db_${how}_$k]} ms" "" "(${FIG[take_dbmove_${how}_$k]} ms), ${FIG[take_polls_${how}_$k]} polls"
		done
	done
fi
if part uneven; then
	r_i=$(median "${UNEVEN[pairs_idle]}")
	r_j=$(median "${UNEVEN[pairs_join]}")
	line "$SCALE_CLIENTS clients, 2 steps, $SCALE_SERVICES x $SCALE_DEPTH new services, no idle" "$(median "${UNEVEN[rate_none]}") b/s" "" ""
	line "... created after $SCALE_UNEVEN_IDLE idle services were claimed" "$(median "${UNEVEN[rate_idle]}") b/s" "$r_i" \
		"≥$TARGET_UNEVEN $(verdict "$r_i" $TARGET_UNEVEN)"
	line "   busy services per instance from 2 s, each run" "${UNEVEN[spread_idle]# }" "" "12-13"
	line "... one instance holding everything, 7 joining" "$(median "${UNEVEN[rate_join]}") b/s" "$r_j" \
		"≥$TARGET_UNEVEN $(verdict "$r_j" $TARGET_UNEVEN)"
	line "   busy services per instance from 2 s, each run" "${UNEVEN[spread_join]# }" "" "12-13"
	line "   (no idle) busy services per instance from 2 s" "${UNEVEN[spread_none]# }" "" ""
fi
if part survivor; then
	for k in case2 case3; do
		if [ $k = case2 ]; then what="case 2, crash + release"; else what="case 3, paused past hard expiry"; fi
		f=$(surv_fig "${SURV[idle_$k]:-}")
		line "$what: first idle poll -> all work held" "$f s" "" "≤1 s $(surv_verdict "$f")"
		line "   from the survivor's first poll" "$(surv_fig "${SURV[first_$k]:-}") s" "" ""
	done
	f=$(surv_fig "${SURV[first_op]:-}")
	line "operator's expiry of a live instance's claim -> held" "$f s" "" "≤1 s $(surv_verdict "$f")"
fi
echo
if part uneven; then
	for k in none idle join; do
		echo "  uneven $k, runs (batches/s):${UNEVEN[rate_$k]}; busy per instance from 2 s:${UNEVEN[spread_$k]}; at 2 s:${UNEVEN[spread2_$k]}"
	done
	echo "  uneven rounds' ratios: idle/none:${UNEVEN[pairs_idle]} | join/none:${UNEVEN[pairs_join]}"
fi
if part survivor; then
	for k in case2 case3; do
		echo "  survivor $k, each run: from the first idle poll${SURV[idle_$k]:-}; from the first poll${SURV[first_$k]:-}"
	done
	echo "  survivor op, each run:${SURV[first_op]:-}"
fi
if part rate; then
	echo "  rate runs (batches/s): ${FIG[idle_runs]}"
	echo "  rounds' ratios: ${FIG[idle_pairs]}"
	echo "  dead instances with a lease left after the runs: ${FIG[dead_left]}"
fi
if part many; then
	for n in $SCALE_MANY; do
		echo "  $n clients, runs (batches/s): keyed:${RATES[keyed2_$n]} | gridha:${RATES[g2_$n]} | ratios:${PAIR_MANY[$n]}"
	done
fi
if part takeover; then
	for how in a b; do
		for k in $SCALE_IDLE $SCALE_IDLE_LARGE; do
			[ -n "${FIG[take_stmts_${how}_$k]:-}" ] || continue
			echo "  takeover ($how), ${FIG[take_total_$k]} claims: the survivors' costliest statements (nested, pg_stat_statements):"
			printf '%s\n' "${FIG[take_stmts_${how}_$k]}"
		done
	done
fi
echo "  load: $SCALE_IDLE idle services through the API ${FIG[load_idle]:--}s${FIG[load_large]:+; the rest up to $SCALE_IDLE_LARGE written directly ${FIG[load_large]}s}"
echo "  total bench time: $((SECONDS - t_start))s"
