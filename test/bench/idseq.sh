#!/usr/bin/env bash
# test/bench/idseq.sh: gridha.next_id against PostgreSQL's nextval().
#
# Measures and prints; it never fails on a figure. Both sides hand out ids
# from a block cached in the backend of the same size: gridha.next_id with
# gridha.id_block_size = BLOCK, nextval() on a sequence with CACHE BLOCK.
#
#   (1) calls from clients: pgbench -M prepared, CLIENTS clients, one
#       SELECT per call (each its own transaction), SECONDS each, side by side
#   (2) calls inside one statement: N calls in one SELECT, one client, so the
#       per-call cost shows without the round trip
#
# Prints each rate in calls/s and the ratio next_id / nextval (1.00 = as
# fast as nextval).
#
# With PGHOST/PGPORT and GRIDHA_TEST_DIR set (a cluster of test/lib.sh) it
# uses that cluster; otherwise it starts a throwaway one (gridha must be
# installed) and removes it at exit.
#
# Environment (defaults in brackets): IDBENCH_SECONDS [10], IDBENCH_CLIENTS
# [8], IDBENCH_JOBS [2], IDBENCH_BLOCK [100], IDBENCH_CALLS [1000000],
# IDBENCH_PORT [56340] (first port probed for its own cluster).
set -eu -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SECS=${IDBENCH_SECONDS:-10}
CLIENTS=${IDBENCH_CLIENTS:-8}
JOBS=${IDBENCH_JOBS:-2}
BLOCK=${IDBENCH_BLOCK:-100}
CALLS=${IDBENCH_CALLS:-1000000}
export GRIDHA_BASE_PORT=${IDBENCH_PORT:-56340}
DB=gridha_idbench

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$HERE/../lib.sh"

OWN_CLUSTER=0
WORK=$(mktemp -d /tmp/gridha-idbench.XXXXXX)
chmod 755 "$WORK"
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	rm -rf "$WORK"
	if [ "$OWN_CLUSTER" = 1 ]; then
		gridha_cluster_cleanup
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [ -z "${GRIDHA_TEST_DIR:-}" ]; then
	OWN_CLUSTER=1
	gridha_cluster_init
	gridha_cluster_start shared_preload_libraries=gridha
fi

gridha_psql -d postgres -c "SET client_min_messages = warning" \
	-c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
gridha_psql -d postgres -c "ALTER DATABASE $DB SET gridha.id_block_size = $BLOCK"
gridha_psql -d "$DB" -o /dev/null <<SQL
CREATE EXTENSION gridha;
SELECT gridha.create_id_sequence('bench', 1000000, 4);
CREATE SEQUENCE bench_seq CACHE $BLOCK;
SQL

echo 'SELECT gridha.next_id('"'"'bench'"'"');' >"$WORK/next_id.sql"
echo "SELECT nextval('bench_seq');" >"$WORK/nextval.sql"

# rate SCRIPT: calls/s of a pgbench run (one call per transaction).
rate() {
	pgbench -n -M prepared -c "$CLIENTS" -j "$JOBS" -T "$SECS" -f "$1" "$DB" 2>&1 |
		sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p'
}

# in_statement EXPR: calls/s of CALLS calls of EXPR inside one statement.
in_statement() {
	gridha_psql -d "$DB" <<SQL | tail -n 1
BEGIN;
SELECT count($1) FROM generate_series(1, $CALLS) \g /dev/null
SELECT round($CALLS / extract(epoch FROM clock_timestamp() - now()));
COMMIT;
SQL
}

# ratio A B: A / B with two decimals.
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'
}

gridha_log "idseq bench: $CLIENTS clients x ${SECS}s per side, blocks of $BLOCK"
# Warm-up, then alternate and keep each side's best of two.
SECS_SAVED=$SECS
SECS=2
rate "$WORK/next_id.sql" >/dev/null
rate "$WORK/nextval.sql" >/dev/null
SECS=$SECS_SAVED
best_gridha=0
best_pg=0
for _round in 1 2; do
	g=$(rate "$WORK/next_id.sql")
	p=$(rate "$WORK/nextval.sql")
	best_gridha=$(awk -v a="$best_gridha" -v b="$g" 'BEGIN { print (b > a) ? b : a }')
	best_pg=$(awk -v a="$best_pg" -v b="$p" 'BEGIN { print (b > a) ? b : a }')
done

in_g=$(in_statement "gridha.next_id('bench')")
in_p=$(in_statement "nextval('bench_seq')")

printf '%-44s %12.0f calls/s\n' "next_id, $CLIENTS clients, one call per statement" "$best_gridha"
printf '%-44s %12.0f calls/s\n' "nextval, $CLIENTS clients, one call per statement" "$best_pg"
printf '%-44s %12s\n' "ratio next_id / nextval" "$(ratio "$best_gridha" "$best_pg")"
printf '%-44s %12.0f calls/s\n' "next_id, $CALLS calls in one statement" "$in_g"
printf '%-44s %12.0f calls/s\n' "nextval, $CALLS calls in one statement" "$in_p"
printf '%-44s %12s\n' "ratio next_id / nextval (in one statement)" "$(ratio "$in_g" "$in_p")"

gridha_psql -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB"
