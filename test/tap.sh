# shellcheck shell=bash
# test/tap.sh: TAP output for the suites in test/suites. Source it; it
# counts failures in FAILED (set to 0 here when unset).
#
#   plan N                    the suite's plan: prints "1..N" (call it
#                             first); the runner fails a suite that runs
#                             fewer or more tests than it planned
#   ok WHAT / not_ok WHAT     one TAP line; not_ok adds one to FAILED
#   skip_test WHAT WHY        a planned test not run: "ok - WHAT # SKIP WHY",
#                             counted as skipped, never as passed
#   check STATUS WHAT         ok or not_ok by an exit status (0 = ok)
#   diag                      stdin as TAP comments
#   suite_stop_pids           TERM to every pid in the suite's PIDS, then
#                             a wait for each (for an EXIT trap)

FAILED=${FAILED:-0}

plan() {
	echo "1..$1"
}

ok() {
	echo "ok - $*"
}

skip_test() {
	echo "ok - $1 # SKIP ${2:-not run}"
}

not_ok() {
	echo "not ok - $*"
	FAILED=$((FAILED + 1))
}

check() {
	if [ "$1" -eq 0 ]; then ok "$2"; else not_ok "$2"; fi
}

diag() {
	sed 's/^/# /'
}

suite_stop_pids() {
	local p
	for p in "${PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null
	done
}
