#!/usr/bin/env bash
# test/bench/retention.sh: what history costs, and what retention removes
# (`make bench`; docs/benchmarks.md, "Retention").
#
# Measures and prints; it never fails on a figure. One throwaway cluster
# (common.sh: durable commits), one database. The workload is the ordered
# keys' (RET_SERVICES services x RET_DEPTH batches, RET_CLIENTS pgbench
# clients, each its own instance, the two-step cycle g2: next_batch then
# report_status committed).
#
# Words used here:
#   history    final batches (committed) of the workload's services, written
#              as a restore writes them (with their seq, status and times):
#              RET_HISTORY of them, finished a day ago (inside the default
#              retention of 7 days, so nothing prunes them unasked)
#   step       one prune step: gridha.prune_batches() in a transaction of
#              its own (the statement the hand-out's poll duty and the
#              maintenance tick run)
#
# What it runs, in order:
#   (1) g2 with no history, in a second database with the same services,
#   (2) and g2 with the history written here: RET_RUNS rounds of each,
#       alternated; the ratio (2)/(1) per pair of neighbouring rounds
#       (median) and of the best rounds, and the same for server CPU
#   (3) the views service_queues and queue_progress read whole, and
#       gridha.metrics when there is one: best and median of 5, ms
#   (4) 1.1's prune statement (no index: its 10,000 oldest-or-any final
#       batches found by reading the table), once, ms
#   (5) prune steps at default settings with retention 1 h (all history is
#       old) for RET_PRUNE_SECONDS: batches/s, median and longest step, and
#       the plan of a step's search (an index scan, no seq scan)
#   (6) the history written again; g2 with retention 1 h set for the
#       clients: the hand-out rate while the clients' own poll duty prunes,
#       and how much it pruned meanwhile (no run_maintenance, no worker)
#   (7) a soak of RET_SOAK_SECONDS at the cycle's full rate with retention
#       1 min: a producer keeps every service's queue fed, the clients run
#       g2; every RET_SOAK_EVERY seconds the batches table's and its
#       indexes' sizes, its live rows, batches committed so far and
#       autovacuum's runs on it. RET_SOAK_SECONDS=0 skips it.
#
# Environment (defaults in brackets): RET_HISTORY [2000000],
# RET_SERVICES [100], RET_DEPTH [200], RET_CLIENTS [8], RET_RUNS [2],
# RET_PRUNE_SECONDS [20], RET_SOAK_SECONDS [600], RET_SOAK_EVERY [30],
# RET_PORT [56480]; BENCH_JOBS, BENCH_PAYLOAD as in common.sh.
set -eu -o pipefail

RET_HISTORY=${RET_HISTORY:-2000000}
RET_SERVICES=${RET_SERVICES:-100}
RET_DEPTH=${RET_DEPTH:-200}
RET_CLIENTS=${RET_CLIENTS:-8}
RET_RUNS=${RET_RUNS:-2}
RET_PRUNE_SECONDS=${RET_PRUNE_SECONDS:-20}
RET_SOAK_SECONDS=${RET_SOAK_SECONDS:-600}
RET_SOAK_EVERY=${RET_SOAK_EVERY:-30}
export GRIDHA_BASE_PORT=${RET_PORT:-56480}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# shellcheck source=../lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=common.sh
. "$HERE/common.sh"

PRODUCER=

cleanup() {
	[ -z "$PRODUCER" ] || kill "$PRODUCER" 2>/dev/null || true
	gridha_cluster_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM

DB=ret
gridha_log "retention: $RET_SERVICES services x $RET_DEPTH batches, $RET_CLIENTS clients, history $RET_HISTORY, $(nproc) cores"
bench_start_cluster max_connections=$((RET_CLIENTS + 20))
BENCH_SCRIPTS=$GRIDHA_TEST_DIR/scripts
mkdir -p "$BENCH_SCRIPTS"
bench_write_scripts "$BENCH_SCRIPTS"
bench_gridha_db "$DB"
q "$DB" "SET gridha.balance_claims = off" -c "CALL bench_new_services(1, $RET_SERVICES)" >/dev/null

HAS_PRUNE=$(q "$DB" "SELECT count(*) FROM pg_proc WHERE proname = 'prune_batches'")
HAS_METRICS=$(q "$DB" "SELECT count(*) FROM pg_class WHERE relname = 'metrics' AND relnamespace = 'gridha'::regnamespace")

qf "$DB" >/dev/null <<'EOF'
/*
 * bench_history(n, age): n final batches, spread over the services that
 * exist, appended to their queues as a restore writes them, finished age
 * ago (one per millisecond before that).
 */
CREATE PROCEDURE bench_history(n bigint, age interval)
LANGUAGE plpgsql
AS $$
DECLARE
    per bigint := n / (SELECT count(*) FROM gridha.service_claims WHERE service_id LIKE 's%');
BEGIN
    INSERT INTO gridha.batches (service_id, batch_id, seq, payload, status, created_at, epoch,
                                attempts, handed_out_at, submitted_at, finished_at)
    SELECT c.service_id, 'h' || (c.tail_seq + k), c.tail_seq + k, bench_payload(), 'committed',
           t, 1, 1, t, t, t
      FROM gridha.service_claims c
     CROSS JOIN generate_series(1, per) AS k
     CROSS JOIN LATERAL (SELECT now() - age - k * interval '1 millisecond' AS t) x
     WHERE c.service_id LIKE 's%';
    UPDATE gridha.service_claims SET tail_seq = tail_seq + per WHERE service_id LIKE 's%';
    COMMIT;
END
$$;

/* bench_time(sql, n): best and median of n runs of sql, in ms. */
CREATE FUNCTION bench_time(sql text, n int, OUT best float8, OUT med float8)
LANGUAGE plpgsql
AS $$
DECLARE
    t0 timestamptz;
    ms float8[] := '{}';
BEGIN
    FOR i IN 1..n LOOP
        t0 := clock_timestamp();
        EXECUTE sql;
        ms := ms || extract(epoch FROM clock_timestamp() - t0) * 1000;
    END LOOP;
    SELECT min(m), percentile_cont(0.5) WITHIN GROUP (ORDER BY m) INTO best, med FROM unnest(ms) AS m;
END
$$;

CREATE TABLE bench_steps (n bigint, ms float8);

/* bench_prune(max_s): prune steps, each its own transaction, until none is left or max_s. */
CREATE PROCEDURE bench_prune(max_s float8)
LANGUAGE plpgsql
AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    t timestamptz;
    n bigint;
BEGIN
    LOOP
        t := clock_timestamp();
        EXECUTE 'SELECT gridha.prune_batches()' INTO n;
        COMMIT;
        INSERT INTO bench_steps VALUES (n, extract(epoch FROM clock_timestamp() - t) * 1000);
        COMMIT;
        EXIT WHEN n = 0 OR clock_timestamp() - t0 > max_s * interval '1 second';
    END LOOP;
END
$$;
EOF

# g2_round PREFIX [DB]: one timed g2 run of the workload (on DB, $DB by
# default); sets RUN_* (common.sh)
g2_round() {
	local prefix=$1 db=${2:-$DB} split
	split=$(q "$db" "SELECT bench_spread($RET_CLIENTS)")
	q "$db" "CALL bench_enqueue('$prefix', 1, $RET_SERVICES, $RET_DEPTH)"
	bench_prepare "$db" gridha.batches gridha.service_claims gridha.instances
	bench_timed g2 "$db" "$RET_CLIENTS" "$prefix"
	# shellcheck disable=SC2034 # read by bench_log_run
	RUN_INFO="claims per instance $split"
}

# g2_best LABEL TAG: RET_RUNS rounds; BEST is the best rate
g2_best() {
	local r
	BEST=0
	for r in $(seq 1 "$RET_RUNS"); do
		g2_round "${2}${r}_"
		bench_log_run "$1 #$r"
		[ "$RUN_RATE" -le "$BEST" ] || BEST=$RUN_RATE
	done
}

sizes() {
	q "$DB" "SELECT format('batches %s, indexes %s, live rows %s, dead rows %s, enqueued %s, pruned %s, autovacuums %s',
	                     pg_size_pretty(pg_relation_size('gridha.batches')),
	                     pg_size_pretty(pg_indexes_size('gridha.batches')),
	                     n_live_tup, n_dead_tup, n_tup_ins, n_tup_del, autovacuum_count)
	           FROM pg_stat_user_tables WHERE relid = 'gridha.batches'::regclass"
}

# (1) and (2): the same rounds, alternated, on a database without history
# (ret0, the same services) and on this one with it; a ratio per pair of
# neighbouring rounds, so that what the machine does meanwhile weighs on
# both sides alike
bench_gridha_db ret0
q ret0 "SET gridha.balance_claims = off" -c "CALL bench_new_services(1, $RET_SERVICES)" >/dev/null
t0=$SECONDS
q "$DB" "CALL bench_history($RET_HISTORY, interval '1 day')" >/dev/null
q "$DB" "VACUUM ANALYZE gridha.batches" >/dev/null
gridha_log "history: $RET_HISTORY final batches written in $((SECONDS - t0)) s; $(sizes)"
RATE0=0
RATE1=0
PAIRS=
CPU_PAIRS=
for r in $(seq 1 "$RET_RUNS"); do
	g2_round "h0r${r}_" ret0
	bench_log_run "g2, no history #$r"
	r0=$RUN_RATE
	c0=$RUN_CPU
	[ "$r0" -le "$RATE0" ] || RATE0=$r0
	g2_round "h1r${r}_"
	bench_log_run "g2, $RET_HISTORY history #$r"
	[ "$RUN_RATE" -le "$RATE1" ] || RATE1=$RUN_RATE
	PAIRS="$PAIRS $(ratio "$RUN_RATE" "$r0")"
	CPU_PAIRS="$CPU_PAIRS $(ratio "$c0" "$RUN_CPU")"
done
gridha_log "cycle with history / without: median of pairs $(median "$PAIRS") (pairs:$PAIRS), best $(ratio "$RATE1" "$RATE0") ($RATE1 / $RATE0 batches/s); server CPU per batch without / with, median $(median "$CPU_PAIRS") (pairs:$CPU_PAIRS)"
q postgres "DROP DATABASE ret0" >/dev/null

# (3) the views
for v in service_queues queue_progress $([ "$HAS_METRICS" = 0 ] || echo metrics); do
	gridha_log "$(printf '  %-16s %s' "$v" "$(q "$DB" "SELECT format('best %s ms, median %s ms', round(best::numeric, 2), round(med::numeric, 2))
	                                                FROM bench_time('SELECT * FROM gridha.$v', 5)")")"
done

# (4) 1.1's prune statement, once
gridha_log "  1.1's prune statement (10,000, no index): $(q "$DB" "SELECT round(best::numeric) || ' ms' FROM bench_time(\$q\$
	WITH old AS (
	  SELECT b.service_id, b.batch_id FROM gridha.batches b
	   WHERE b.status IN ('committed', 'invalid')
	     AND coalesce(b.finished_at, b.created_at) < now() - 3600 * interval '1 second'
	   LIMIT 10000
	), d AS (
	  DELETE FROM gridha.batches b USING old
	   WHERE b.service_id = old.service_id AND b.batch_id = old.batch_id
	     AND b.status IN ('committed', 'invalid')
	  RETURNING 1)
	SELECT count(*) FROM d\$q\$, 1)")"

# (5) prune steps
if [ "$HAS_PRUNE" = 1 ]; then
	gridha_log "  a step's scan: $(q "$DB" "SET enable_seqscan = off" -c "SET enable_bitmapscan = off" -c "SET enable_sort = off" -c "EXPLAIN (COSTS OFF)
	  SELECT b.ctid FROM gridha.batches b
	   WHERE b.created_at >= '-infinity' AND b.created_at < now() - 3600 * interval '1 second'
	   ORDER BY b.created_at LIMIT 20000" | tr -s ' \n' ' ')"
	q "$DB" "SET gridha.retention = '1h'" -c "CALL bench_prune($RET_PRUNE_SECONDS)" >/dev/null
	gridha_log "  prune steps (gridha.prune_chunk $(q "$DB" "LOAD 'gridha'" -c "SHOW gridha.prune_chunk")): $(q "$DB" "
	    SELECT format('%s batches in %s steps, %s batches/s; step median %s ms, longest %s ms',
	                  sum(n), count(*), round(sum(n) / (sum(ms) / 1000)),
	                  round((percentile_cont(0.5) WITHIN GROUP (ORDER BY ms))::numeric, 1),
	                  round(max(ms)::numeric, 1))
	      FROM bench_steps WHERE n > 0")"
	gridha_log "  after: $(sizes)"
else
	gridha_log "  no gridha.prune_batches: prune steps not measured"
fi

# (6) the clients prune while they work
q "$DB" "TRUNCATE bench_steps" >/dev/null
q "$DB" "CALL bench_history($RET_HISTORY, interval '1 day')" >/dev/null
q "$DB" "ALTER DATABASE $DB SET gridha.retention = '1h'" >/dev/null
before=$(q "$DB" "SELECT count(*) FROM gridha.batches WHERE batch_id LIKE 'h%'")
g2_round p1_
bench_log_run "g2 while its poll duty prunes"
after=$(q "$DB" "SELECT count(*) FROM gridha.batches WHERE batch_id LIKE 'h%'")
gridha_log "  the clients pruned $((before - after)) of $before old batches in $RUN_SECS s (no run_maintenance, no worker); with history / without: $(ratio "$RUN_RATE" "$RATE0")"

# (7) soak
if [ "$RET_SOAK_SECONDS" -gt 0 ]; then
	q "$DB" "ALTER DATABASE $DB SET gridha.retention = '1min'" >/dev/null
	q "$DB" "DELETE FROM gridha.batches WHERE batch_id LIKE 'h%'" >/dev/null
	q "$DB" "VACUUM ANALYZE gridha.batches" >/dev/null
	split=$(q "$DB" "SELECT bench_spread($RET_CLIENTS)")
	gridha_log "soak: ${RET_SOAK_SECONDS}s, retention 1min, claims per instance $split; $(sizes)"
	(
		i=0
		while :; do
			left=$(q "$DB" "SELECT bench_left()") || exit 0
			if [ "${left:-0}" -lt $((RET_SERVICES / 2)) ]; then
				i=$((i + 1))
				q "$DB" "CALL bench_enqueue('soak${i}_', 1, $RET_SERVICES, 50)" >/dev/null || exit 0
			fi
			sleep 0.2
		done
	) &
	PRODUCER=$!
	"$PG_BINDIR/pgbench" -n -M prepared -c "$RET_CLIENTS" -j "$BENCH_JOBS" -T "$RET_SOAK_SECONDS" \
		-D started=0 -f "$BENCH_SCRIPTS/g2.sql" "$DB" >"$BENCH_SCRIPTS/soak.out" 2>&1 &
	soak=$!
	t0=$SECONDS
	while kill -0 "$soak" 2>/dev/null; do
		sleep "$RET_SOAK_EVERY"
		kill -0 "$soak" 2>/dev/null || break
		gridha_log "$(printf '  %4ss  %s' "$((SECONDS - t0))" "$(sizes)")"
	done
	wait "$soak" || true
	kill "$PRODUCER" 2>/dev/null || true
	wait "$PRODUCER" 2>/dev/null || true
	PRODUCER=
	gridha_log "  soak: pgbench $(grep -m1 'tps' "$BENCH_SCRIPTS/soak.out" | tr -s ' ')"
	gridha_log "  end: $(sizes)"
fi
