#!/usr/bin/env bash
# test/suites/12_installcheck_defaults.sh: `make installcheck` passes
# against a server whose only setting that changes behaviour is the
# preload (shared_preload_libraries = 'gridha'; max_prepared_transactions,
# max_worker_processes and every other setting at PostgreSQL's default),
# as a user's server would be (issue 42, item 3).
#
# A second cluster (test/dba/cluster2.sh: its own port and socket, fsync
# off) runs the three parts of installcheck, each one test: pgTAP
# (pg_prove), pg_regress, the isolation specs. Where prepared transactions
# are off (the default), expected/counts_1.out and
# test/isolation/expected/settle-prepared_1.out are the outputs that
# match: the first says it skipped its PREPARE TRANSACTION part, the
# second shows PostgreSQL refusing it.
#
# Then the same cluster restarts without the preload, its postgresql.conf
# still naming the workers' settings (gridha.workers, gridha.database,
# gridha.worker_role, defined with PGC_POSTMASTER only when preloaded): a
# session's first gridha call logs no WARNING about them (issue 40; up to
# 1.2 every session logged 'invalid configuration parameter name
# "gridha.database"').
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-ic.XXXXXX)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
FAILED=0

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 5
# shellcheck source-path=SCRIPTDIR source=../dba/cluster2.sh
. "$REPO/test/dba/cluster2.sh"

cleanup() {
	c2_cleanup
}
trap cleanup EXIT

check() {
	if [ "$1" = 0 ]; then
		echo "ok - $2"
	else
		echo "not ok - $2"
		FAILED=1
	fi
}

if ! c2_init || ! c2_start max_worker_processes=8; then
	check 1 "a cluster with only the preload starts"
	echo "Bail out! no cluster"
	exit 1
fi
mpt=$(c2_psql -d postgres -c "SHOW max_prepared_transactions")
check "$([ "$mpt" = 0 ] && echo 0 || echo 1)" \
	"the cluster keeps PostgreSQL's defaults: max_prepared_transactions is 0 (got '$mpt')"

# The same build flags as the installed test build (no rebuild), each part
# on its own, against the second cluster
part() {
	local name=$1 out=$WORK/$2
	shift 2
	mkdir -p "$out"
	chown -R postgres: "$WORK" 2>/dev/null || true
	if (cd "$REPO" && PGHOST=$C2_DIR PGPORT=$C2_PORT PGUSER=postgres \
			make -s installcheck TAP_TESTS= PG_CONFIG="$PG_CONFIG" GRIDHA_TEST_HOOKS=1 GRIDHA_LOCK_CHECK=1 \
			EXTRA_REGRESS_OPTS="--outputdir=$out" "$@" >"$out/make.log" 2>&1); then
		check 0 "make installcheck, $name only, passes against it"
	else
		check 1 "make installcheck, $name only, passes against it"
		grep -E 'not ok|FAILED|failed' "$out/make.log" | head -n 40 | sed 's/^/# /'
		[ -f "$out/regression.diffs" ] && head -n 60 "$out/regression.diffs" | sed 's/^/# /'
	fi
}
part pgTAP pgtap REGRESS= ISOLATION=
part pg_regress regress ISOLATION= PGTAP_TESTS=
part "the isolation specs" isolation REGRESS= PGTAP_TESTS=

# No preload, and the workers' settings in the configuration; only the
# log lines written from here on count
np_from=$(($(wc -l <"$C2_LOG" 2>/dev/null || echo 0) + 1))
if c2_restart shared_preload_libraries= max_worker_processes=8 gridha.workers=2 \
		gridha.database=postgres gridha.worker_role=gridha_nobody; then
	c2_psql -d postgres -c "CREATE EXTENSION IF NOT EXISTS gridha" >/dev/null 2>&1
	np_out=$(c2_psql -d postgres -c "SET client_min_messages = warning" \
		-c "SELECT count(*) FROM gridha.expiry_settings()" \
		-c "SELECT current_setting('gridha.database')" 2>&1)
	np_rc=$?
	np_warn=$(tail -n "+$np_from" "$C2_LOG" | grep -c 'invalid configuration parameter')
	if [ "$np_rc" = 0 ] && [ "${np_warn:-0}" = 0 ] && ! grep -q WARNING <<<"$np_out"; then
		check 0 "without the preload, a session's first gridha call logs no WARNING about gridha.database"
	else
		check 1 "without the preload, a session's first gridha call logs no WARNING about gridha.database"
		sed 's/^/# /' <<<"$np_out"
		tail -n "+$np_from" "$C2_LOG" | grep 'invalid configuration parameter' | head -n 5 | sed 's/^/# /'
	fi
else
	check 1 "without the preload, a session's first gridha call logs no WARNING about gridha.database"
fi

exit "$FAILED"
