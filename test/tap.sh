# shellcheck shell=bash
# test/tap.sh: TAP output and bounded waits for the suites in test/suites.
# Source it; it counts failures in FAILED (set to 0 here when unset).
#
#   ok WHAT / not_ok WHAT     one TAP line; not_ok adds one to FAILED
#   check STATUS WHAT         ok or not_ok by an exit status (0 = ok)
#   diag                      stdin as TAP comments
#   wait_until SECONDS CMD... poll CMD every 0.2 s until it succeeds or the
#                             time is up (then CMD's last status)
#   wait_port_file FILE       a server writes its port there once listening
#   check_sql DB WHAT SQL     ok when SQL prints t in DB (needs test/lib.sh)

FAILED=${FAILED:-0}

ok() {
	echo "ok - $*"
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

wait_until() {
	local deadline=$((SECONDS + $1))
	shift
	while [ "$SECONDS" -lt "$deadline" ]; do
		"$@" && return 0
		sleep 0.2
	done
	"$@"
}

wait_port_file() {
	wait_until 15 test -s "$1" && cat "$1"
}

# check_sql DB WHAT SQL: ok when SQL prints t in database DB, otherwise
# not_ok and what it printed (needs test/lib.sh for gridha_psql)
check_sql() {
	local got
	got=$(gridha_psql -d "$1" -c "$3" 2>&1 || true)
	if [ "$got" = t ]; then
		ok "$2"
	else
		not_ok "$2"
		echo "# got: $got"
	fi
}
