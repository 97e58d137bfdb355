#!/usr/bin/env bash
# test/bench/instructions.sh: CPU instructions per batch, gridha against
# bare, counted by valgrind (callgrind) in one single-user backend.
#
# Measures and prints; it never fails on a figure. Batches/s and CPU time
# move with the machine's load; an instruction count does not (gridha's
# repeats to within about 5%, bare's to 0.1%), so it shows what a change to the hot
# path saves. It does not show waits, cache misses
# or WAL flushes: that is what `make bench` is for.
#
# Both sides run as a PL/pgSQL procedure that commits after every step, as
# make bench's clients do:
#   gridha  next_batch -> report_submission('accepted') ->
#           report_status('committed'), one instance, 64 services of
#           1000 batches each (INSTR_DEPTH=1: 64,000 services of one batch,
#           so that every report empties its queue and settles the
#           service's counters, see src/status.c)
#   bare    take (UPDATE ... FOR UPDATE SKIP LOCKED), mark accepted, mark
#           done, on the same table as make bench's baseline
# Each side runs twice from the same copy of the data directory, N1 and N2
# cycles; (count at N2 - count at N1) / (N2 - N1) is the cost of one cycle
# without start-up. The procedure's own loop is in both figures alike.
#
# The counted gridha runs with gridha.probe_interval = -1 (when the
# installed gridha has it): no work in the hand-out depends on the clock,
# so the count repeats from run to run and test/suites/72_instructions.sh
# holds it to the record in test/bench/instructions.expected.
#
# Also printed: the share of each side's cycle spent starting the executor
# for its statements (standard_ExecutorStart, inclusive), and gridha's
# cycle less the claim acquisitions a hand-out starts once a wall-clock
# interval has passed (gridha_claims_acquire, inclusive): how many of those
# fall into the counted cycles follows valgrind's speed, i.e. the machine's
# load, so that figure is the one to compare across runs (with 64,000
# services one acquisition costs as much as hundreds of cycles).
#
# It counts the gridha that is installed (`make bench` installs the tree's
# first). INSTR_BEFORE=<commit> counts that commit's gridha too, in the
# same run: the commit (git archive of this repository) is built against a
# private copy of the PostgreSQL installation (PG_CONFIG's binaries,
# libraries, share and include directories copied under a scratch
# directory, each at its own path, so that the copy finds its files
# relative to its binaries), the same cycles are counted there, and the
# table gives both, e.g. INSTR_BEFORE=11b521e (the last commit of 1.0).
#
# Environment (defaults in brackets): INSTR_N1 [100], INSTR_N2 [600],
# INSTR_PORT [56360] (first port probed for the set-up cluster),
# INSTR_BEFORE [none] (a commit to compare with), INSTR_DEPTH [1000]
# (batches per service; the services are 64,000 / INSTR_DEPTH), INSTR_IDLE
# [0] (that many idle services besides them, claimed by the same instance:
# services with an empty queue, as a deployment with many quiet services
# has; the shape "idle" of test/suites/72_instructions.sh), INSTR_KEEP
# [none] (a directory that keeps each counted run's callgrind file, named
# PROC.N.callgrind: callgrind_annotate --inclusive=yes on the N2 and N1
# files of a side gives its profile by function).
set -eu -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
N1=${INSTR_N1:-100}
N2=${INSTR_N2:-600}
DEPTH=${INSTR_DEPTH:-1000}
IDLE=${INSTR_IDLE:-0}
export GRIDHA_BASE_PORT=${INSTR_PORT:-56360}
DB=gridha_instr
INSTANCE=00000000-0000-4000-8000-000000000001

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$ROOT/test/lib.sh"

if ! command -v valgrind >/dev/null; then
	gridha_log "$(gridha_missing_note valgrind)"
	exit 1
fi

# The earlier commit: built and installed into a copy, then counted by this
# same script run there (INSTR_NESTED: print the figures only).
if [ -n "${INSTR_BEFORE:-}" ] && [ -z "${INSTR_NESTED:-}" ]; then
	BEFORE_DIR=$(mktemp -d /tmp/gridha-instr-before.XXXXXX)
	chmod 755 "$BEFORE_DIR"	# the server's owner runs the copy's binaries
	# shellcheck disable=SC2317 # called by the EXIT trap
	before_cleanup() {
		[ "${GRIDHA_KEEP_TMP:-0}" = 1 ] || rm -rf "$BEFORE_DIR"
	}
	trap before_cleanup EXIT
	before_rev=$(git -C "$ROOT" rev-parse --short "$INSTR_BEFORE^{commit}") ||
		{ gridha_log "INSTR_BEFORE: no commit $INSTR_BEFORE"; exit 1; }
	gridha_log "building $before_rev into a copy of $("$PG_CONFIG" --bindir) under $BEFORE_DIR"
	before_config=$(gridha_build_commit "$before_rev" "$BEFORE_DIR") ||
		{ gridha_log "INSTR_BEFORE: $before_rev could not be built"; exit 1; }
	before_figures=$(INSTR_NESTED=1 PG_CONFIG=$before_config INSTR_PORT=$((GRIDHA_BASE_PORT + 20)) \
		bash "${BASH_SOURCE[0]}" </dev/null) ||
		{ gridha_log "INSTR_BEFORE: counting $before_rev failed"; exit 1; }
	read -r bg bgs bgq bb bbs <<<"$before_figures"
	before_cleanup
	trap - EXIT
fi

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	gridha_cluster_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM

gridha_cluster_init
gridha_cluster_start
gridha_psql -d postgres -c "CREATE DATABASE $DB"
# No claim renewal and no maintenance duty inside the counted runs: valgrind
# slows a backend down so much that a renewal every 10 s, or the hand-out's
# duty every second, would weigh far more than in real use, and would make
# the counts differ from run to run (by a third with 64,000 services).
gridha_psql -d postgres -c "ALTER DATABASE $DB SET gridha.soft_expiry = '1h'" \
	-c "ALTER DATABASE $DB SET gridha.hard_expiry = '2h'" \
	-c "ALTER DATABASE $DB SET gridha.renew_interval = '30min'" \
	-c "ALTER DATABASE $DB SET gridha.prune_interval = -1"
# Nor the hand-out's looks at the others' sessions and its share, which
# follow the clock (gridha.probe_interval, since 1.3: an earlier gridha,
# counted with INSTR_BEFORE, has no such setting and looks once a second)
if [ "$(gridha_psql -d postgres -c "LOAD 'gridha'" \
		-c "SELECT count(*) FROM pg_settings WHERE name = 'gridha.probe_interval'")" = 1 ]; then
	gridha_psql -d postgres -c "ALTER DATABASE $DB SET gridha.probe_interval = -1"
	PROBES=off
else
	PROBES=on
fi
# Which build is counted: the test build (GRIDHA_TEST_HOOKS=1
# GRIDHA_LOCK_CHECK=1, make test's, each with a setting of its own) counts
# about 8% more than a release build (the lock-order checker judges every
# row lock), so a count says which it is of (72_instructions's record is of
# the test build).
BUILD=$(gridha_psql -d postgres -c "LOAD 'gridha'" -c "
	SELECT CASE count(*) WHEN 2 THEN 'test' WHEN 0 THEN 'release' ELSE 'partial-test' END
	  FROM pg_settings WHERE name IN ('gridha.lock_check', 'gridha.test_probe_pause')")
# A single-user backend does not apply ALTER DATABASE's settings: the
# counted runs are given them on their command line (before, every counted
# run renewed its claims every 10 s and ran the maintenance duty every
# second of valgrind's slow clock: the counts followed the machine's load).
SINGLE_OPTS=(-c gridha.soft_expiry=1h -c gridha.hard_expiry=2h -c gridha.renew_interval=30min
	-c gridha.prune_interval=-1)
[ "$PROBES" = off ] && SINGLE_OPTS+=(-c gridha.probe_interval=-1)
gridha_psql -d "$DB" -o /dev/null <<SQL
CREATE EXTENSION gridha;
INSERT INTO gridha.batches (service_id, batch_id, payload)
SELECT 's' || lpad(s::text, 5, '0'), 'b' || lpad(g::text, 9, '0'), decode(repeat('ab', 100), 'hex')
  FROM generate_series(1, 64000 / $DEPTH) s, generate_series(1, $DEPTH) g
 ORDER BY 1, 2;
-- idle services (INSTR_IDLE): a claim row each, its queue empty
INSERT INTO gridha.service_claims (service_id)
SELECT 'i' || lpad(g::text, 7, '0') FROM generate_series(1, $IDLE) g;

\i $HERE/bare_schema.sql
INSERT INTO bench_bare (service_id, batch_id, payload)
SELECT 's' || lpad((1 + k % 64)::text, 5, '0'), 'b' || k, decode(repeat('ab', 100), 'hex')
  FROM generate_series(1, 64000) k;

CREATE PROCEDURE gridha_cycles(n int) LANGUAGE plpgsql AS \$\$
DECLARE
    r record;
BEGIN
    FOR i IN 1..n LOOP
        SELECT * INTO r FROM gridha.next_batch('$INSTANCE');
        COMMIT;
        PERFORM gridha.report_submission('$INSTANCE', r.service_id, r.batch_id, r.epoch, 'accepted');
        COMMIT;
        PERFORM gridha.report_status('$INSTANCE', r.service_id, r.batch_id, r.epoch, 'committed');
        COMMIT;
    END LOOP;
END
\$\$;

CREATE PROCEDURE bare_cycles(n int) LANGUAGE plpgsql AS \$\$
DECLARE
    taken bigint;
BEGIN
    FOR i IN 1..n LOOP
        WITH t AS (
          UPDATE bench_bare SET status = 'submitting'
           WHERE id = (SELECT id FROM bench_bare WHERE status = 'queued'
                        ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
          RETURNING id)
        SELECT id INTO taken FROM t;
        COMMIT;
        UPDATE bench_bare SET status = 'pending' WHERE id = taken;
        COMMIT;
        UPDATE bench_bare SET status = 'committed' WHERE id = taken;
        COMMIT;
    END LOOP;
END
\$\$;

VACUUM ANALYZE;
SQL
# Warm both paths once (the instance registers, takes its claims), and let
# the instance take every service before the count: with many services
# (INSTR_DEPTH=1) the claim cycle would otherwise go on taking them during
# the counted cycles, as fast as valgrind's clock lets it.
gridha_psql -d "$DB" -c "CALL gridha_cycles(10)" -c "CALL bare_cycles(10)"
gridha_psql -d "$DB" -o /dev/null <<SQL
DO \$\$
BEGIN
    LOOP
        EXIT WHEN (SELECT count(*) FROM gridha.acquire_claims('$INSTANCE')) = 0;
    END LOOP;
END
\$\$;
SQL
gridha_log "the instance holds $(gridha_psql -d "$DB" -c "SELECT count(*) FROM gridha.service_claims WHERE claimant = '$INSTANCE'") of $(gridha_psql -d "$DB" -c "SELECT count(*) FROM gridha.service_claims") services"
gridha_psql -d "$DB" -c "VACUUM ANALYZE" -c "CHECKPOINT"
EXTVERSION=$(gridha_psql -d "$DB" -c "SELECT extversion FROM pg_extension WHERE extname = 'gridha'")
gridha_cluster_stop

# count PROC N: "total executor-start" instructions of one single-user
# backend that runs PROC(N) on a fresh copy of the data directory.
count() {
	local copy=$GRIDHA_TEST_DIR/run out=$GRIDHA_TEST_DIR/callgrind.out total start
	rm -rf "$copy" "$out"
	gridha_as_pg cp -a "$PGDATA" "$copy"
	# valgrind writes its scratch files to TMPDIR, which must be the
	# server owner's to write (the caller's may be root's alone: valgrind
	# then gives up at once)
	echo "CALL $1($2);" |
		gridha_as_pg env TMPDIR="$GRIDHA_TEST_DIR" valgrind -q --tool=callgrind --callgrind-out-file="$out" \
			"$PG_BINDIR/postgres" --single -D "$copy" -c synchronous_commit=off "${SINGLE_OPTS[@]}" "$DB" \
			>/dev/null 2>>"$GRIDHA_TEST_DIR/single.log" || true
	rm -rf "$copy"
	if [ -n "${INSTR_KEEP:-}" ] && [ -s "$out" ]; then
		cp "$out" "$INSTR_KEEP/$1.$2.callgrind"
	fi
	if [ ! -s "$out" ] || grep -q 'ERROR:\|FATAL:\|Unable to start up' "$GRIDHA_TEST_DIR/single.log"; then
		gridha_log "the counted run of $1($2) failed (valgrind or the single-user backend):"
		tail -n 20 "$GRIDHA_TEST_DIR/single.log" >&2
		return 1
	fi
	total=$(callgrind_annotate "$out" | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
	start=$(callgrind_annotate --inclusive=yes "$out" |
		sed -n 's/^ *\([0-9,]*\) .*:standard_ExecutorStart .*/\1/p' | head -n 1 | tr -d ,)
	# the claim acquisitions a hand-out starts when a wall-clock interval
	# has passed (gridha_claims_below_share): how many fall into the
	# counted cycles depends on how fast valgrind runs, i.e. on the load
	acq=$(callgrind_annotate --inclusive=yes "$out" |
		sed -n 's/^ *\([0-9,]*\) .*:gridha_claims_acquire .*/\1/p' | head -n 1 | tr -d ,)
	echo "$total ${start:-0} ${acq:-0}"
}

# per_cycle PROC: "instructions executor-start-percent instructions-less-
# acquisitions" of one cycle of PROC.
# (count runs in this shell, not in a process substitution, so that its
# failure ends the script with its message instead of an empty read.)
per_cycle() {
	local t1 s1 t2 s2 c1 c2
	c1=$(count "$1" "$N1") || exit 1
	c2=$(count "$1" "$N2") || exit 1
	read -r t1 s1 a1 <<<"$c1"
	read -r t2 s2 a2 <<<"$c2"
	awk -v t1="$t1" -v s1="$s1" -v t2="$t2" -v s2="$s2" -v n=$((N2 - N1)) \
		-v a1="$a1" -v a2="$a2" \
		'BEGIN { printf "%d %.0f %d\n", (t2 - t1) / n, 100 * (s2 - s1) / (t2 - t1), (t2 - t1 - (a2 - a1)) / n }'
}

gridha_log "instructions per batch (callgrind, one backend, $N1 and $N2 cycles, $((64000 / DEPTH)) services of $DEPTH batches, $IDLE idle services), gridha $EXTVERSION ($BUILD build) of $PG_BINDIR, clock-driven probes $PROBES"
figures=$(per_cycle gridha_cycles) || exit 1
read -r g gs gq <<<"$figures"
figures=$(per_cycle bare_cycles) || exit 1
read -r b bs _ <<<"$figures"
if [ -n "${INSTR_NESTED:-}" ]; then
	echo "$g $gs $gq $b $bs"
	exit 0
fi
if [ -n "${before_rev:-}" ]; then
	printf '%-50s %12d instructions, %2d%% starting the executor\n' "gridha cycle, $before_rev (3 steps, each committed)" "$bg" "$bgs"
	printf '%-50s %12d instructions\n' "... less its periodic claim acquisitions" "$bgq"
	printf '%-50s %12d instructions, %2d%% starting the executor\n' "bare cycle, beside $before_rev" "$bb" "$bbs"
fi
printf '%-50s %12s\n' "gridha build counted" "$BUILD"
printf '%-50s %12d instructions, %2d%% starting the executor\n' "gridha cycle (3 steps, each committed)" "$g" "$gs"
printf '%-50s %12d instructions\n' "... less its periodic claim acquisitions" "$gq"
printf '%-50s %12d instructions, %2d%% starting the executor\n' "bare cycle (3 steps, each committed)" "$b" "$bs"
printf '%-50s %12s\n' "ratio bare / gridha" "$(awk -v a="$b" -v g="$g" 'BEGIN { printf "%.2f", a / g }')"
if [ -n "${before_rev:-}" ]; then
	printf '%-50s %12s\n' "ratio gridha now / gridha $before_rev" "$(awk -v a="$g" -v o="$bg" 'BEGIN { printf "%.3f", a / o }')"
	printf '%-50s %12s\n' "... less the periodic claim acquisitions" "$(awk -v a="$gq" -v o="$bgq" 'BEGIN { printf "%.3f", a / o }')"
fi
