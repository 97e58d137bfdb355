#!/usr/bin/env bash
# test/suites/11_limit_unit.sh: the worker's adaptive limit and connection
# bucket (src/limit.c), unit by unit: test/unit/test_limit drives the core
# with a simulated ledger on a fake clock (no server, no network) and
# asserts every step's limit exactly. Its TAP lines are relayed; the plan
# is fixed here, so a program that stops early fails the tests it never ran.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
UNIT=$REPO/test/unit/test_limit
FAILED=0

# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 71

# built here (make rebuilds it when a source or the PostgreSQL changed)
if [ -n "${PG_CONFIG:-}" ]; then
	make -s -C "$REPO" test/unit/test_limit PG_CONFIG="$PG_CONFIG" \
		GRIDHA_TEST_HOOKS=1 GRIDHA_LOCK_CHECK=1 >&2
fi
if [ ! -x "$UNIT" ]; then
	not_ok "test/unit/test_limit is built (run make)"
	exit 1
fi
out=$("$UNIT" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -v '^1\.\.[0-9]*$'
[ "$rc" -eq 0 ] || FAILED=1
exit "$FAILED"
