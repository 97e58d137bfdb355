#!/usr/bin/env bash
# test/bench/ordered.sh: ordered keys. gridha's cycles against a plain
# per-key ordered queue on the same workload, side by side in one run
# (`make bench`).
#
# Measures and prints; it never fails on a figure. It runs on a throwaway
# cluster of test/lib.sh (shared_buffers 512MB, fsync and
# synchronous_commit on) and removes it at exit. Words and the way a run is
# timed: test/bench/common.sh.
#
# The workload: ORDERED_SERVICES services x ORDERED_DEPTH batches (100 x
# 200), enqueued before the run in ORDERED_DEPTH transactions of
# ORDERED_SERVICES batches (round r holds batch r of every service), 100-byte
# payloads; ORDERED_CLIENTS pgbench clients (8), each its own instance. The
# rate is counted in the database, from the first hand-out to the last
# commit of the workload.
#
# Cases, each step its own transaction:
#   keyed3   the baseline: take (lock a free key FOR UPDATE SKIP LOCKED, mark
#            it busy, take its oldest job) -> mark the job accepted ->
#            complete it and release the key
#   keyed2   the baseline in two steps: take -> complete and release
#   g3       next_batch -> report_submission('accepted') ->
#            report_status('committed'), warm: the instances registered and
#            the claims spread before the run (renew, acquire as the product
#            does, while every service is idle)
#   g2       next_batch -> report_status('committed'), warm
#   gbat     next_batches(10) -> one report_statuses of the whole batch, warm
#   cold     g3 from a cold start: no instance exists before the run, every
#            claim is free; each client registers its instance with its
#            first call and starts its cycles at once (no start-up second:
#            the first instances up take claims before the others exist),
#            the instances then settle their shares as the product does
# Each round runs every case once, back to back, the order rotating from
# round to round; a ratio is the median of the rounds' ratios (each compares
# runs made minutes apart at most, which on a shared machine matters more
# than either side's best run).
#
# Environment (defaults in brackets):
#   ORDERED_RUNS [3]        rounds
#   ORDERED_SERVICES [100]  services (keys)
#   ORDERED_DEPTH [200]     batches per service
#   ORDERED_CLIENTS [8]     pgbench clients = instances
#   ORDERED_BATCH [10]      batches per next_batches call (gbat)
#   ORDERED_JOINS [3]       times a newcomer joins the busy fleet (0: none)
#   ORDERED_CASES [keyed3 g3 keyed2 g2 gbat cold]
#   BENCH_IDLE_MS [10]      sleep of a client that found nothing to take
#   ORDERED_PORT [56380]    first port probed
#   GRIDHA_KEEP_TMP [0]     1: keep the cluster's directory (logs)
set -eu -o pipefail

ORDERED_RUNS=${ORDERED_RUNS:-3}
ORDERED_SERVICES=${ORDERED_SERVICES:-100}
ORDERED_DEPTH=${ORDERED_DEPTH:-200}
ORDERED_CLIENTS=${ORDERED_CLIENTS:-8}
ORDERED_CASES=${ORDERED_CASES:-keyed3 g3 keyed2 g2 gbat cold}
BENCH_BATCH=${ORDERED_BATCH:-10}
export GRIDHA_BASE_PORT=${ORDERED_PORT:-56380}

# Targets (ratios)
TARGET_G3=0.80		# three steps / keyed baseline
TARGET_BATCHED=4	# next_batches + one report / keyed baseline
TARGET_COLD=0.90	# cold start / warm

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# shellcheck source=../lib.sh
. "$ROOT/test/lib.sh"
# shellcheck source=common.sh
. "$HERE/common.sh"

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	gridha_cluster_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM

gridha_log "ordered keys: $ORDERED_SERVICES services x $ORDERED_DEPTH batches, $ORDERED_CLIENTS clients, $ORDERED_RUNS rounds, $(nproc) cores"
bench_start_cluster max_connections=$((ORDERED_CLIENTS + 20))
BENCH_SCRIPTS=$GRIDHA_TEST_DIR/scripts
mkdir -p "$BENCH_SCRIPTS"
bench_write_scripts "$BENCH_SCRIPTS"

# The databases: the keyed baseline, gridha warm (its services created idle
# and spread once), gridha cold (services created idle, nobody holds them).
bench_keyed_db ord_keyed "$ORDERED_SERVICES"
for db in ord_warm ord_cold; do
	bench_gridha_db "$db"
	q "$db" "SET gridha.balance_claims = off" -c "CALL bench_new_services(1, $ORDERED_SERVICES)" >/dev/null
done

# cold_reset: no instance, every claim free.
cold_reset() {
	q ord_cold "SELECT count(gridha.release_claims(instance_id)) FROM gridha.instances" \
		-c "DELETE FROM gridha.instances" >/dev/null
}

declare -A RATES CPUS WALS
declare -A PAIR_G3 PAIR_G2 PAIR_BAT PAIR_COLD
t_start=$SECONDS
for round in $(seq 1 "$ORDERED_RUNS"); do
	gridha_log "round $round"
	# shellcheck disable=SC2086 # one word per case
	for kind in $(rotate $((round - 1)) $ORDERED_CASES); do
		prefix="r${round}${kind}_"
		case $kind in
			keyed*)
				db=ord_keyed
				q "$db" "CALL bench_enqueue('$prefix', $ORDERED_SERVICES, $ORDERED_DEPTH)"
				bench_prepare "$db" bench_keys bench_jobs
				bench_timed "$kind" "$db" "$ORDERED_CLIENTS" "$prefix"
				;;
			cold)
				db=ord_cold
				cold_reset
				q "$db" "CALL bench_enqueue('$prefix', 1, $ORDERED_SERVICES, $ORDERED_DEPTH)"
				bench_prepare "$db" gridha.batches gridha.service_claims gridha.instances
				bench_timed gcold "$db" "$ORDERED_CLIENTS" "$prefix"
				# shellcheck disable=SC2034 # read by bench_log_run
				RUN_INFO="claims per instance after: $(q "$db" "SELECT min(held) || '-' || max(held) FROM gridha.instances")"
				;;
			*)
				db=ord_warm
				split=$(q "$db" "SELECT bench_spread($ORDERED_CLIENTS)")
				q "$db" "CALL bench_enqueue('$prefix', 1, $ORDERED_SERVICES, $ORDERED_DEPTH)"
				bench_prepare "$db" gridha.batches gridha.service_claims gridha.instances
				bench_timed "$kind" "$db" "$ORDERED_CLIENTS" "$prefix"
				# shellcheck disable=SC2034 # read by bench_log_run
				RUN_INFO="claims per instance $split"
				;;
		esac
		bench_log_run "$kind #$round"
		RATES[$kind]="${RATES[$kind]:-} $RUN_RATE"
		CPUS[$kind]="${CPUS[$kind]:-} $RUN_CPU"
		WALS[$kind]="${WALS[$kind]:-} $RUN_WAL"
		eval "R_${kind}_$round=$RUN_RATE"
	done
	# the round's ratios
	r() { eval "echo \${R_${1}_$round:-}"; }	# empty: the case did not run
	PAIR_G3[$round]=$(ratio "$(r g3)" "$(r keyed3)")
	PAIR_G2[$round]=$(ratio "$(r g2)" "$(r keyed2)")
	PAIR_BAT[$round]=$(ratio "$(r gbat)" "$(r keyed3)")
	PAIR_COLD[$round]=$(ratio "$(r cold)" "$(r g3)")
	gridha_log "  round $round: g3/keyed3 ${PAIR_G3[$round]}, g2/keyed2 ${PAIR_G2[$round]}," \
		"gbat/keyed3 ${PAIR_BAT[$round]}, cold/warm ${PAIR_COLD[$round]}"
done

# join: a newcomer joins a busy fleet. ORDERED_CLIENTS - 1 instances hold
# every service (spread) and drain the workload with the two-step script;
# 3 s later (each fleet client sleeps its first second, see common.sh) the
# last instance, holding nothing, starts polling as a client
# does (next_batch, its batch reported committed, 10 ms of sleep when it
# got nothing, each call its own transaction) until it holds its share,
# floor(services / clients). Printed: how long that took, from its first
# call; ORDERED_JOINS (3) times, the median against 1 s.
JOIN_SECS=
if [ "${ORDERED_JOINS:-3}" -gt 0 ]; then
	q ord_warm "CREATE PROCEDURE bench_join(inst uuid, share int, max_s float8, INOUT secs float8 DEFAULT NULL)
	            LANGUAGE plpgsql
	            AS \$\$
	            DECLARE
	                t0 timestamptz := clock_timestamp();
	                r record;
	                h int;
	            BEGIN
	                LOOP
	                    r := NULL;
	                    SELECT * INTO r FROM gridha.next_batch(inst);
	                    IF r.service_id IS NOT NULL THEN
	                        PERFORM gridha.report_status(inst, r.service_id, r.batch_id, r.epoch, 'committed');
	                    END IF;
	                    COMMIT;
	                    SELECT held INTO h FROM gridha.instances WHERE instance_id = inst;
	                    IF h >= share THEN
	                        secs := extract(epoch FROM clock_timestamp() - t0);
	                        RETURN;
	                    END IF;
	                    EXIT WHEN clock_timestamp() - t0 > max_s * interval '1 second';
	                    IF r.service_id IS NULL THEN
	                        PERFORM pg_sleep(0.01);
	                    END IF;
	                END LOOP;
	            END
	            \$\$" >/dev/null
	share=$((ORDERED_SERVICES / ORDERED_CLIENTS))
	for j in $(seq 1 "${ORDERED_JOINS:-3}"); do
		prefix="join${j}_"
		q ord_warm "SELECT gridha.release_claims(bench_instance($ORDERED_CLIENTS))" >/dev/null
		split=$(q ord_warm "SELECT bench_spread($((ORDERED_CLIENTS - 1)))")
		q ord_warm "CALL bench_enqueue('$prefix', 1, $ORDERED_SERVICES, $ORDERED_DEPTH)"
		bench_prepare ord_warm gridha.batches gridha.service_claims gridha.instances
		"$PG_BINDIR/pgbench" -n -M prepared -c $((ORDERED_CLIENTS - 1)) -j $((ORDERED_CLIENTS - 1 < BENCH_JOBS ? ORDERED_CLIENTS - 1 : BENCH_JOBS)) \
			-T 30 -D started=0 -f "$BENCH_SCRIPTS/g2.sql" ord_warm >"$BENCH_SCRIPTS/join.out" 2>&1 &
		fleet=$!
		sleep 3	# the fleet's first second is its own sleep (see common.sh)
		secs=$(q ord_warm "CALL bench_join(bench_instance($ORDERED_CLIENTS), $share, 10)")
		held=$(q ord_warm "SELECT held FROM gridha.instances WHERE instance_id = bench_instance($ORDERED_CLIENTS)")
		kill "$fleet" 2>/dev/null || true
		wait "$fleet" 2>/dev/null || true
		gridha_log "  join #$j: the newcomer held its share ($share) after ${secs:-more than 10} s (held $held; the fleet of $((ORDERED_CLIENTS - 1)) held $split before)"
		JOIN_SECS="$JOIN_SECS ${secs:-99}"
	done
fi

all() {	# all NAME: the values of an associative array, in round order
	local -n arr=$1
	local i out=
	for i in $(seq 1 "$ORDERED_RUNS"); do out="$out ${arr[$i]:-}"; done
	echo "$out"
}
r_g3=$(median "$(all PAIR_G3)")
r_g2=$(median "$(all PAIR_G2)")
r_bat=$(median "$(all PAIR_BAT)")
r_cold=$(median "$(all PAIR_COLD)")

echo
echo "ordered keys: $ORDERED_SERVICES services x $ORDERED_DEPTH batches ($((ORDERED_SERVICES * ORDERED_DEPTH)) per run)," \
	"$ORDERED_CLIENTS clients (instances), $ORDERED_RUNS rounds, ${BENCH_PAYLOAD}-byte payloads," \
	"synchronous_commit on, $(nproc) cores, PostgreSQL $(q postgres "SHOW server_version" | cut -d' ' -f1)"
echo "batches/s: the workload's batches / (last commit - first hand-out), from the rows; the median run."
echo "ratio: the median of the rounds' ratios (the cases of a round run back to back)."
echo "CPU/batch: the cluster's CPU during the run / batches, lowest run; WAL/batch: median run."
echo
printf '  %-44s %9s  %6s  %-12s %9s %9s\n' case batches/s ratio target CPU/batch WAL/batch
row() {	# row LABEL KIND [RATIO TARGET-TEXT]
	local k=$2
	[ -n "${RATES[$k]:-}" ] || return 0
	printf '  %-44s %9s  %6s  %-12s %6s us %7s B\n' "$1" "$(median "${RATES[$k]}")" "${3:-}" "${4:-}" \
		"$(printf '%s\n' "${CPUS[$k]}" | tr ' ' '\n' | grep . | sort -n | head -n 1)" "$(median "${WALS[$k]}")"
}
row "keyed baseline, 3 steps" keyed3
row "gridha 3 steps (warm)" g3 "$r_g3" "≥$TARGET_G3 $(verdict "$r_g3" $TARGET_G3)"
row "keyed baseline, 2 steps" keyed2
row "gridha 2 steps (warm)" g2 "$r_g2" "(vs keyed 2)"
row "gridha next_batches($BENCH_BATCH) + report_statuses" gbat "$r_bat" "≥$TARGET_BATCHED $(verdict "$r_bat" $TARGET_BATCHED)"
row "gridha 3 steps, cold start" cold "$r_cold" "≥$TARGET_COLD $(verdict "$r_cold" $TARGET_COLD)"
echo
echo "  ratios: 3 steps / keyed 3 steps; 2 steps / keyed 2 steps; batched / keyed 3 steps; cold / warm 3 steps."
for k in $ORDERED_CASES; do
	echo "  runs of $k (batches/s):${RATES[$k]:-}"
done
echo "  rounds' ratios: g3/keyed3:$(all PAIR_G3) | g2/keyed2:$(all PAIR_G2) | gbat/keyed3:$(all PAIR_BAT) | cold/warm:$(all PAIR_COLD)"
if [ -n "$JOIN_SECS" ]; then
	j=$(median "$JOIN_SECS")
	echo "  a newcomer joining $((ORDERED_CLIENTS - 1)) busy instances holds its share ($((ORDERED_SERVICES / ORDERED_CLIENTS)) services) after" \
		"$(printf '%.2f' "$j") s (median; runs:$JOIN_SECS s)  target ≤1 s $(awk -v x="$j" 'BEGIN { print (x <= 1) ? "PASS" : "MISS" }')"
fi
echo "  total bench time: $((SECONDS - t_start))s"
