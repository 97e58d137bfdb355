#!/usr/bin/env bash
# test/run.sh: gridha's one test command (`make test`).
#
# Runs as root on a fresh Debian 12 (test/install-debian.sh installs what it
# needs), or as any user who can write PG_CONFIG's installation (it installs
# gridha there) on a machine that has the packages, against the PostgreSQL
# that PG_CONFIG names (default: Debian's 15,
# /usr/lib/postgresql/15/bin/pg_config; e.g.
# PG_CONFIG=/opt/pg17/bin/pg_config for one built from source). Its bindir,
# PGXS, pg_regress and pg_isolation_regress are the ones used.
#
#   0. as root: test/install-debian.sh (the missing build/test packages with
#      apt-get; pgTAP into PG_CONFIG's installation when it has none; Citus)
#   1. build with -Werror (the Makefile sets it) and install
#   2. phase 1, a throwaway cluster WITHOUT shared_preload_libraries:
#        regress    pg_regress suite (make installcheck): the SQL API needs
#                   no preload
#   3. phase 2, the same cluster restarted WITH shared_preload_libraries:
#        isolation  test/isolation/specs/*.spec (pg_isolation_regress)
#        pgtap      test/pgtap/*.sql (pg_prove), one database for all files
#        suites     every executable test/suites/*.sh, a bash script run as
#                   the caller (root, when root), with this cluster in its
#                   environment (see test/suites/README)
#        test/t     every test/t/*.pl, on PostgreSQL's TAP framework
#                   (PostgreSQL::Test::Cluster), each on clusters of its
#                   own, as the postgres user when root
#        serverlog  no server process crashed during the run, and no call
#                   broke the lock order (the test build's checker)
#
#        totals     (a full run) each part ran the number of tests
#                   test/expected_totals holds for this major
#
# Every test counts once: a regress test, a spec, a pgTAP assertion, a TAP
# line of a suite. A test reported "ok ... # SKIP" (and a part with nothing
# to run) counts as skipped, never as passed. Every suite (and every pgTAP
# file) declares its plan ("1..N"): each planned test that never ran counts
# as failed, and one without a plan, or that ran more tests than planned,
# gets one more failure. The summary gives each part's
# "N passed, N failed, N skipped"; the last line is exactly
# "N passed, N failed, N skipped" (.ci/run reads it); the exit status is
# non-zero when anything failed. The cluster and its /tmp directory are
# removed on any exit (GRIDHA_KEEP_TMP=1 keeps the directory).
#
# Crashes: every server log of the run is read at the end, the run's
# cluster's and those of the clusters test/t files and suites start of their
# own (copied into GRIDHA_LOG_DIR).
#
# Totals: a full run writes what each part ran to test/.last_totals.MAJOR
# and compares it with the line for MAJOR in test/expected_totals; a
# difference is a failure that names the part. `make expected-totals`
# (test/run.sh --update-totals) copies the last full runs' lines into
# test/expected_totals.
#
# GRIDHA_ONLY='words' runs only the parts named (regress isolation pgtap and
# the names of suites and test/t files, e.g. 020_workers, 001_soak); a
# developer's shortcut, not CI's (no totals check).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$REPO/test/lib.sh"

# Settings of phase 2.
PHASE2_OPTS="shared_preload_libraries=gridha max_worker_processes=32"

# Time limits, so one hung suite cannot hang `make test`.
SUITE_TIMEOUT=${GRIDHA_SUITE_TIMEOUT:-900}

PASSED=0
FAILED=0
SKIPPED=0
SUMMARY=()
# the failed tests' lines, with their diagnostics, repeated before the
# summary so that the end of a long log (all CI shows) says what failed
FAILURES=()
# PART=COUNT of every part that ran (passed + failed + skipped), in order
PART_COUNTS=()

# ---------------------------------------------------------------------------
# Bookkeeping

# record NAME PASSED FAILED [SKIPPED [NOTE]]: add a part's counts to the
# totals.
record() {
	local name=$1 p=$2 f=$3 s=${4:-0} note=${5:-}
	PASSED=$((PASSED + p))
	FAILED=$((FAILED + f))
	SKIPPED=$((SKIPPED + s))
	PART_COUNTS+=("$name=$((p + f + s))")
	SUMMARY+=("$(printf '  %-16s %4d passed, %3d failed, %3d skipped%s' "$name" "$p" "$f" "$s" \
		"${note:+  ($note)}")")
}

# skip NAME WHY: a part with nothing to run counts as one skipped test.
skip() {
	record "$1" 0 0 1 "skipped: $2"
}

# note_failures NAME LOG: keep LOG's "not ok" lines and the "#" lines
# that follow each (at most 6), prefixed with NAME, for finish.
note_failures() {
	local line
	while IFS= read -r line; do
		FAILURES+=("$1: $line")
	done < <(awk '
		/^not ok/ { print; d = 6; next }
		d > 0 && /^#/ { print; d--; next }
		{ d = 0 }
	' "$2" | cut -c1-300 | head -n 60)
}

# note_diffs NAME RUNLOG DIFFS: keep a pg_regress run's failed test lines
# and the first changed lines of its diffs, for finish.
note_diffs() {
	local line
	while IFS= read -r line; do
		FAILURES+=("$1: $line")
	done < <({
		grep -E '^not ok|\.\.\. +FAILED|failed \(' "$2" | grep -v 'ignored'
		grep -E '^[-+][^-+]' "$3" | head -n 24
	} | cut -c1-300 | head -n 60)
}

# finish: the failures, the summary, the totals line, the exit status.
finish() {
	local line
	if [ "${#FAILURES[@]}" -gt 0 ]; then
		echo
		echo "== failures =="
		for line in "${FAILURES[@]}"; do
			echo "$line"
		done
	fi
	echo
	echo "== summary =="
	for line in "${SUMMARY[@]}"; do
		echo "$line"
	done
	echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
	[ "$FAILED" -eq 0 ] && exit 0
	exit 1
}

# fatal NAME WHY: a step that every later one needs has failed. It counts as
# one failure, and the run ends with the totals line.
fatal() {
	echo "FAILED: $1: $2" >&2
	record "$1" 0 1 0 "$2"
	finish
}

section() {
	echo
	echo "== $* =="
}

# count_pg_regress LOG: print "passed failed" for a pg_regress log. PG15
# prints "test foo ... ok  12 ms", parallel groups "     foo ... ok"; PG16+
# prints TAP ("ok 1 - foo", "not ok 2 - foo"), counted too.
count_pg_regress() {
	awk '
		/^(test +| +)[^ ]+ +\.\.\. / {
			if ($0 ~ /\.\.\. +ok/ || $0 ~ /failed \(ignored\)/) p++
			else f++
			next
		}
		/^ok +[0-9]+ / { p++; next }
		/^not ok +[0-9]+ / { if ($0 ~ /# +\(ignored\)/) p++; else f++ }
		END { printf "%d %d\n", p, f }
	' "$1"
}

# count_tap LOG [numbered]: print "passed failed skipped plan" for the TAP
# lines ("ok ...", "not ok ...", numbered or not; only numbered ones with
# "numbered", as pg_prove --verbose ends a file with a bare "ok") of a
# suite's or a pgTAP file's output; "ok ... # SKIP ..." is skipped, not
# passed; plan is the first "1..N" line's N, or -1 when there is none.
count_tap() {
	awk -v numbered="${2:-}" '
		BEGIN { plan = -1; t = numbered ? "[ \t]+[0-9]+([ \t]|$)" : "([ \t]|$)" }
		/^1\.\.[0-9]+([ \t]|$)/ { if (plan < 0) { sub(/^1\.\./, ""); plan = $1 + 0 }; next }
		$0 ~ "^ok" t { if ($0 ~ /#[ \t]*[Ss][Kk][Ii][Pp]/) s++; else p++; next }
		$0 ~ "^not ok" t { f++ }
		END { printf "%d %d %d %d\n", p, f, s, plan }
	' "$1"
}

# plan_check PLAN RAN: sets PLAN_FAILED to the failures a plan adds (1
# when there is no plan (-1) or more tests ran than planned; one for each
# planned test that never ran) and PLAN_NOTE to what happened ("" when the
# run kept its plan).
plan_check() {
	local plan=$1 ran=$2
	PLAN_FAILED=0
	PLAN_NOTE=
	if [ "$plan" -lt 0 ]; then
		PLAN_FAILED=1
		PLAN_NOTE="no plan (1..N)"
	elif [ "$ran" -lt "$plan" ]; then
		PLAN_FAILED=$((plan - ran))
		PLAN_NOTE="planned $plan, ran $ran: $((plan - ran)) never ran"
	elif [ "$ran" -gt "$plan" ]; then
		PLAN_FAILED=1
		PLAN_NOTE="planned $plan, ran $ran"
	fi
}

# make_var NAME: the value of the Makefile's variable NAME.
make_var() {
	# shellcheck disable=SC2016 # make expands it, not the shell
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory -C "$REPO" -f Makefile \
		-f <(printf 'gridha-print-%%:\n\t@echo $($*)\n') PG_CONFIG="$PG_CONFIG" "gridha-print-$1"
}

# pg_regress's set-up chatter, kept in the logs but not shown.
QUIET_LINES='^(SET|DROP DATABASE|CREATE DATABASE|ALTER DATABASE|CREATE EXTENSION)$'

# run_logged LOG SECONDS CMD...: run CMD with a time limit, its output shown
# (less QUIET_LINES) and kept in LOG; return its exit status. --foreground
# keeps it in our process group, so Ctrl-C reaches it too.
run_logged() {
	local log=$1 secs=$2 rc
	shift 2
	set +e
	timeout --foreground -k 10 "$secs" "$@" 2>&1 | tee "$log" |
		grep --line-buffered -v -E "$QUIET_LINES"
	rc=${PIPESTATUS[0]}
	set -e
	[ "$rc" -eq 124 ] && echo "(timed out after ${secs}s)" | tee -a "$log"
	return "$rc"
}

# ---------------------------------------------------------------------------
# Steps

# install_prerequisites: as root on Debian, test/install-debian.sh installs
# every package any part needs (apt-get, only what is missing), pgTAP into
# a PostgreSQL built from source and Citus (GRIDHA_INSTALL_PACKAGES=0 leaves
# it out). As any other user nothing is installed: what the build needs
# must be there (a failure naming the packages), and a part whose package
# is missing skips or fails saying which.
install_prerequisites() {
	local missing
	if [ "$(id -u)" -eq 0 ] && [ "${GRIDHA_INSTALL_PACKAGES:-1}" != 0 ] &&
			command -v apt-get >/dev/null; then
		section "packages (test/install-debian.sh)"
		bash "$REPO/test/install-debian.sh" || fatal setup "test/install-debian.sh failed"
	fi
	missing=$(gridha_missing_packages | tr '\n' ' ')
	missing=${missing% }
	[ -z "$missing" ] ||
		fatal setup "missing packages ($missing): as root, test/install-debian.sh installs them"
	missing=$(gridha_missing_packages pgtap | tr '\n' ' ')
	missing=${missing% }
	if [ -n "$missing" ]; then
		echo "note: missing packages ($missing): the parts that need them fail or skip;" \
			"as root, test/install-debian.sh installs them"
	fi
}

# check_postgres: PG_CONFIG's installation is complete (one built from
# source is not apt-get's to install); say which it is, and whether it has
# pgTAP (test/install-debian.sh copies it into one built from source).
check_postgres() {
	local f
	for f in "$PG_CONFIG" "$PG_BINDIR/postgres" "$PG_BINDIR/pgbench"; do
		[ -x "$f" ] || fatal setup "no $f (PG_CONFIG=$PG_CONFIG)"
	done
	echo "$("$PG_CONFIG" --version) ($PG_CONFIG)"
	[ -f "$(gridha_pgtap_dir)/pgtap.control" ] ||
		echo "note: no pgTAP in $(gridha_pgtap_dir): the pgtap part fails (as root, test/install-debian.sh copies it)"
}

# build: compile (the Makefile adds -Werror) and install the extension.
build() {
	section build
	local log
	log=$(mktemp /tmp/gridha-build.XXXXXX)
	# the test build: GRIDHA_TEST_HOOKS and GRIDHA_LOCK_CHECK (see the Makefile)
	if ! make -j"$(nproc)" PG_CONFIG="$PG_CONFIG" GRIDHA_TEST_HOOKS=1 GRIDHA_LOCK_CHECK=1 >"$log" 2>&1; then
		# The diagnostics, not the long compiler command lines.
		grep -E -A3 '(error|warning):|\*\*\*' "$log" | head -n 120 || tail -n 40 "$log"
		rm -f "$log"
		fatal build "make failed"
	fi
	local d
	for d in "$("$PG_CONFIG" --pkglibdir)" "$(gridha_pgtap_dir)"; do
		if [ ! -w "$d" ]; then
			rm -f "$log"
			fatal build "$(id -un) cannot write $d: make test installs gridha into PG_CONFIG's installation; run as its owner (or root), or against a copy you own"
		fi
	done
	if ! make install PG_CONFIG="$PG_CONFIG" GRIDHA_TEST_HOOKS=1 GRIDHA_LOCK_CHECK=1 >"$log" 2>&1; then
		tail -n 40 "$log"
		rm -f "$log"
		fatal build "make install failed"
	fi
	rm -f "$log"
	echo "built and installed"
}

# start_cluster: phase 1's cluster, no preload.
start_cluster() {
	section "cluster"
	gridha_cluster_init || fatal cluster "initdb failed"
	gridha_cluster_start || fatal cluster "the server did not start"
	echo "PGHOST=$PGHOST PGPORT=$PGPORT PGDATA=$PGDATA"
}

# run_regress: the pg_regress suite through PGXS's installcheck. Its output
# goes to the run's directory, so parallel runs do not clash in the repo.
run_regress() {
	section "phase 1 (no preload): pg_regress"
	local out=$GRIDHA_TEST_DIR/regress log rc=0 p f
	mkdir -p "$out"
	log=$out/make.log
	run_logged "$log" "$SUITE_TIMEOUT" make -s installcheck ISOLATION= PGTAP_TESTS= TAP_TESTS= PG_CONFIG="$PG_CONFIG" \
		PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres \
		EXTRA_REGRESS_OPTS="--outputdir=$out" || rc=$?
	read -r p f < <(count_pg_regress "$log")
	if [ $((p + f)) -eq 0 ]; then
		if [ "$rc" -eq 0 ]; then
			skip regress "no REGRESS tests"
		else
			record regress 0 1 0 "pg_regress did not run (exit $rc)"
		fi
		return 0
	fi
	# Tests of the Makefile's REGRESS it never reached are failures too.
	local want
	want=$(make_var REGRESS | wc -w)
	if [ $((p + f)) -lt "$want" ]; then
		f=$((want - p))
	fi
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1 # it failed in a way no test line shows
	fi
	if [ "$f" -gt 0 ] && [ -s "$out/regression.diffs" ]; then
		echo "--- regression.diffs (first 200 lines) ---"
		head -n 200 "$out/regression.diffs"
		note_diffs regress "$log" "$out/regression.diffs"
	fi
	record regress "$p" "$f"
}

# start_phase2: restart with gridha preloaded.
start_phase2() {
	section "phase 2: restart with shared_preload_libraries = 'gridha'"
	# shellcheck disable=SC2086
	if ! gridha_cluster_restart $PHASE2_OPTS; then
		fatal cluster "the server did not start with gridha preloaded"
	fi
	echo "shared_preload_libraries = $(gridha_psql -d postgres -c 'SHOW shared_preload_libraries')"
}

# run_isolation: every spec in test/isolation/specs against the preloaded
# cluster; pg_isolation_regress creates the extension in its database.
run_isolation() {
	section "phase 2: isolation"
	local specs=() s unmatched=0
	for s in test/isolation/specs/*.spec; do
		[ -e "$s" ] || continue
		s=${s##*/}
		s=${s%.spec}
		# pg_isolation_regress stops the whole run at a spec without
		# expected output; count it as failed and run the others.
		if [ ! -f "test/isolation/expected/$s.out" ]; then
			echo "FAILED  $s: no test/isolation/expected/$s.out"
			unmatched=$((unmatched + 1))
			continue
		fi
		specs+=("$s")
	done
	if [ ${#specs[@]} -eq 0 ]; then
		if [ "$unmatched" -gt 0 ]; then
			record isolation 0 "$unmatched" 0 "specs without expected output"
		else
			echo "no test/isolation/specs/*.spec yet"
			skip isolation "no specs yet"
		fi
		return 0
	fi
	local out=$GRIDHA_TEST_DIR/isolation rc=0 p f
	mkdir -p "$out"
	run_logged "$out/run.log" "$SUITE_TIMEOUT" \
		"$(dirname "$("$PG_CONFIG" --pgxs)")/../test/isolation/pg_isolation_regress" \
		--inputdir="$REPO/test/isolation" --outputdir="$out" \
		--bindir="$PG_BINDIR" --host="$PGHOST" --port="$PGPORT" --user=postgres \
		--load-extension=gridha "${specs[@]}" || rc=$?
	read -r p f < <(count_pg_regress "$out/run.log")
	if [ $((p + f)) -eq 0 ]; then
		record isolation 0 1 0 "pg_isolation_regress did not run (exit $rc)"
		return 0
	fi
	# Specs it never reached (it stopped early) are failures too.
	if [ $((p + f)) -lt ${#specs[@]} ]; then
		f=$((${#specs[@]} - p))
	fi
	[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
	if [ "$f" -gt 0 ] && [ -s "$out/regression.diffs" ]; then
		echo "--- isolation regression.diffs (first 200 lines) ---"
		head -n 200 "$out/regression.diffs"
		note_diffs isolation "$out/run.log" "$out/regression.diffs"
	fi
	record isolation "$p" $((f + unmatched)) 0 \
		"$([ "$unmatched" -gt 0 ] && echo "$unmatched without expected output")"
}

# run_pgtap: every test/pgtap/*.sql with pg_prove --verbose, in one fresh
# database; every assertion is a test (count_tap of the file's TAP). A file
# without a plan, or that stops before its plan's end, gets failures as a
# suite does (plan_check); pg_prove failing with no failed assertion (an
# error after the last one) one more.
run_pgtap() {
	section "phase 2: pgTAP"
	local files=() f
	for f in test/pgtap/*.sql; do
		[ -e "$f" ] && files+=("$f")
	done
	if [ ${#files[@]} -eq 0 ]; then
		echo "no test/pgtap/*.sql yet"
		skip pgtap "no test files yet"
		return 0
	fi
	local db=gridha_pgtap out=$GRIDHA_TEST_DIR/pgtap log rc
	local p s n plan tp=0 tf=0 ts=0 bad=0
	mkdir -p "$out"
	if [ ! -f "$(gridha_pgtap_dir)/pgtap.control" ] || ! command -v pg_prove >/dev/null; then
		echo "FAILED  no pgTAP in $(gridha_pgtap_dir) or no pg_prove (postgresql-15-pgtap," \
			"libtap-parser-sourcehandler-pgtap-perl; as root, test/install-debian.sh installs them)"
		record pgtap 0 1 0 "no pgTAP or pg_prove"
		return 0
	fi
	if ! gridha_psql -d postgres -c "SET client_min_messages = warning" \
			-c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" ||
		! gridha_psql -d "$db" -c "CREATE EXTENSION pgtap" -c "CREATE EXTENSION gridha"; then
		record pgtap 0 1 0 "could not create the pgTAP database"
		return 0
	fi
	for f in "${files[@]}"; do
		log=$out/$(basename "$f" .sql).log
		rc=0
		timeout -k 10 "$SUITE_TIMEOUT" pg_prove --verbose -h "$PGHOST" -p "$PGPORT" -U postgres \
			-d "$db" "$f" >"$log" 2>&1 || rc=$?
		read -r p n s plan < <(count_tap "$log" numbered)
		plan_check "$plan" $((p + n + s))
		n=$((n + PLAN_FAILED))
		[ "$rc" -ne 0 ] && [ "$n" -eq 0 ] && n=1
		tp=$((tp + p))
		tf=$((tf + n))
		ts=$((ts + s))
		if [ "$n" -eq 0 ]; then
			printf 'ok      %s: %d passed, %d skipped\n' "$f" "$p" "$s"
		else
			bad=$((bad + 1))
			printf 'FAILED  %s: %d passed, %d failed, %d skipped%s\n' "$f" "$p" "$n" "$s" \
				"${PLAN_NOTE:+ ($PLAN_NOTE)}"
			grep -v -E '^ok ' "$log" | head -n 100 | sed 's/^/    /'
			note_failures "pgtap $(basename "$f" .sql)" "$log"
		fi
	done
	record pgtap "$tp" "$tf" "$ts" "${#files[@]} files$([ "$bad" -gt 0 ] && echo ", $bad failed")"
}

# check_only: every word of GRIDHA_ONLY names a part, or the run stops
# before it builds (a word that named nothing ran nothing and passed).
check_only() {
	local w f known=" regress isolation pgtap "
	for f in test/suites/*.sh test/t/*.pl; do
		[ -f "$f" ] && known+="$(basename "${f%.*}") "
	done
	for w in ${GRIDHA_ONLY:-}; do
		if [[ "$known" != *" $w "* ]]; then
			echo "GRIDHA_ONLY: '$w' names no part; the parts are:$known" >&2
			exit 2
		fi
	done
}

# want PART: true when GRIDHA_ONLY is unset or names PART.
want() {
	[ -z "${GRIDHA_ONLY:-}" ] || [[ " $GRIDHA_ONLY " == *" $1 "* ]]
}

# run_tap_suite NAME SCRIPT: a suite script that prints its plan and TAP
# lines; each line counts ("# SKIP" ones as skipped). A missing plan, or a
# count other than the plan, adds failures (plan_check); a non-zero exit
# with no failed test adds one.
run_tap_suite() {
	local name=$1 script=$2 rc=0 p f s plan note
	local dir=$GRIDHA_TEST_DIR/suites/$name
	mkdir -p "$dir"
	GRIDHA_SUITE_DIR=$dir run_logged "$dir/output.log" "$SUITE_TIMEOUT" bash "$script" || rc=$?
	read -r p f s plan < <(count_tap "$dir/output.log")
	plan_check "$plan" $((p + f + s))
	f=$((f + PLAN_FAILED))
	note=$PLAN_NOTE
	[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
	[ "$rc" -ne 0 ] && note="${note:+$note, }exit $rc"
	[ -n "$PLAN_NOTE" ] && echo "FAILED  $name: $PLAN_NOTE"
	[ "$f" -gt 0 ] && note_failures "$name" "$dir/output.log"
	record "$name" "$p" "$f" "$s" "$note"
}

# run_suites: every executable test/suites/*.sh, in name order.
run_suites() {
	section "phase 2: test/suites"
	local s found=0
	for s in test/suites/*.sh; do
		if [ ! -f "$s" ] || [ ! -x "$s" ]; then
			continue
		fi
		found=1
		want "$(basename "$s" .sh)" || continue
		echo "--- $s"
		run_tap_suite "$(basename "$s" .sh)" "$s"
	done
	if [ "$found" -eq 0 ]; then
		echo "no executable test/suites/*.sh yet"
		skip suites "none yet"
	fi
}

# run_framework_tests: every test/t/*.pl, each a part of its own named after
# its file, on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster starts
# its own clusters, with PG_CONFIG's programs first in PATH). The framework
# runs initdb, which refuses root: as root, they run as the postgres user.
# Their clusters' logs go to GRIDHA_LOG_DIR for the crash scan.
run_framework_tests() {
	local f name dir fw rc p n s plan log skip_all
	local files=() as
	for f in test/t/*.pl; do
		[ -f "$f" ] && want "$(basename "$f" .pl)" && files+=("$f")
	done
	[ ${#files[@]} -gt 0 ] || return 0
	section "phase 2: test/t (PostgreSQL's TAP framework)"
	fw=$(gridha_tap_framework)
	for f in "${files[@]}"; do
		name=$(basename "$f" .pl)
		echo "--- $f"
		if [ -z "$fw" ]; then
			record "$name" 0 1 0 "no PostgreSQL::Test::Cluster found"
			continue
		fi
		dir=$GRIDHA_TEST_DIR/t/$name
		mkdir -p "$dir"
		gridha_fix_owner "$GRIDHA_TEST_DIR/t" "$dir"
		as=()
		[ "$(id -u)" -eq 0 ] && as=(runuser -u postgres --)
		rc=0
		(cd "$dir" && run_logged "$dir/output.log" "$SUITE_TIMEOUT" \
			"${as[@]}" env PATH="$PG_BINDIR:$PATH" TESTDIR="$dir" \
			PG_REGRESS="$(dirname "$(dirname "$("$PG_CONFIG" --pgxs)")")/test/regress/pg_regress" \
			perl -I "$fw" "$REPO/$f") || rc=$?
		read -r p n s plan < <(count_tap "$dir/output.log" numbered)
		# a file that skips as a whole ("1..0 # SKIP why") is one test
		# skipped, never none
		skip_all=$(sed -n -E 's/^1\.\.0[[:space:]]*#[[:space:]]*[Ss][Kk][Ii][Pp][[:space:]]*//p' "$dir/output.log" | head -n 1)
		if [ "$plan" -eq 0 ] && [ $((p + n + s)) -eq 0 ] && grep -qiE '^1\.\.0[[:space:]]*#[[:space:]]*skip' "$dir/output.log"; then
			s=1
			plan=1
		fi
		plan_check "$plan" $((p + n + s))
		[ "$s" -eq 1 ] && [ -n "$skip_all" ] && [ -z "$PLAN_NOTE" ] && PLAN_NOTE="skipped: $skip_all"
		n=$((n + PLAN_FAILED))
		[ "$rc" -ne 0 ] && [ "$n" -eq 0 ] && n=1
		for log in "$dir"/tmp_check/log/*.log; do
			[ -f "$log" ] && cp "$log" "$GRIDHA_LOG_DIR/$name.$(basename "$log")"
		done
		[ "$n" -gt 0 ] && note_failures "$name" "$dir/output.log"
		record "$name" "$p" "$n" "$s" "$PLAN_NOTE$([ "$rc" -ne 0 ] && echo " exit $rc")"
	done
}

# check_server_log: one test that no server process crashed during the run
# (SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV, PANIC, failed assertion), in the
# log of the run's cluster and in every log in GRIDHA_LOG_DIR (those of the
# clusters of test/t, and 81_deb's). Tests may kill processes on purpose
# (signal 9, immediate stops); those do not count.
check_server_log() {
	section "server log"
	local hits logs=("$GRIDHA_PGLOG") f
	for f in "$GRIDHA_LOG_DIR"/*; do
		[ -f "$f" ] && logs+=("$f")
	done
	hits=$(grep -H -E 'terminated by signal (4|6|7|8|11)([^0-9]|$)|PANIC:|TRAP:' "${logs[@]}" || true)
	# the lock-order checker of the test build (src/lockcheck.c): a call
	# that broke the order, a worker's included, whatever its caller did
	# with the error; test/pgtap/21_lock_check.sql breaks it on purpose
	hits+=$(grep -H 'gridha lock order broken' "${logs[@]}" | grep -v 'lock-check test' || true)
	if [ -z "$hits" ]; then
		echo "no crashes and no broken lock order in ${#logs[@]} server logs:"
		printf '  %s\n' "${logs[@]}"
		record serverlog 1 0 0 "${#logs[@]} logs"
	else
		echo "$hits" | head -n 20
		record serverlog 0 1 0 "a server process crashed or broke the lock order"
	fi
}

# pg_major: the major version of PG_CONFIG's PostgreSQL (15, 17 for 17beta2).
pg_major() {
	"$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/'
}

# check_totals: (a full run) write what each part ran to
# test/.last_totals.MAJOR, and compare it with MAJOR's line of
# test/expected_totals ("MAJOR total=N part=N ..."): one failure for each
# part that ran another number of tests than written there, or that is
# missing on either side; skipped (one test) when the file has no line for
# MAJOR.
check_totals() {
	section "totals"
	local major total=0 pc line want_line diffs
	major=$(pg_major)
	for pc in "${PART_COUNTS[@]}"; do
		total=$((total + ${pc#*=}))
	done
	line="$major total=$total ${PART_COUNTS[*]}"
	# (a run with failures is marked: make expected-totals takes it only
	# when told to)
	if [ "$FAILED" -eq 0 ]; then
		echo "$line" >"$REPO/test/.last_totals.$major"
	else
		echo "$line # from a run with $FAILED failed" >"$REPO/test/.last_totals.$major"
	fi
	echo "this run: $line"
	want_line=$(awk -v m="$major" '$1 == m' "$REPO/test/expected_totals" 2>/dev/null | tail -n 1 || true)
	if [ -z "$want_line" ]; then
		echo "test/expected_totals has no line for PostgreSQL $major ('make expected-totals' writes it)"
		skip totals "no line for $major in test/expected_totals"
		return 0
	fi
	diffs=$(python3 - "$want_line" "$line" <<'PYEOF'
import sys
def parse(l):
    f = l.split()
    return f[0], [kv.split("=", 1) for kv in f[1:]]
_, want = parse(sys.argv[1])
_, got = parse(sys.argv[2])
w, g = dict(want), dict(got)
for name in [k for k, _ in want] + [k for k, _ in got if k not in w]:
    if name == "total":
        continue
    if name not in g:
        print("%s: expected %s tests, did not run" % (name, w[name]))
    elif name not in w:
        print("%s: ran %s tests, not in test/expected_totals" % (name, g[name]))
    elif w[name] != g[name]:
        print("%s: expected %s tests, ran %s (%+d)" % (name, w[name], g[name], int(g[name]) - int(w[name])))
PYEOF
	)
	if [ -z "$diffs" ]; then
		echo "as test/expected_totals expects for PostgreSQL $major ($total tests)"
		record totals 1 0
	else
		echo "FAILED  not what test/expected_totals expects for PostgreSQL $major:"
		echo "$diffs" | sed 's/^/  /'
		record totals 0 "$(echo "$diffs" | wc -l)" 0 "$(echo "$diffs" | paste -sd ';' | cut -c1-200)"
	fi
}

# update_totals: replace the lines of test/expected_totals with those of
# the last full runs (test/.last_totals.*), one a major; one from a run
# with failures only with GRIDHA_FORCE=1.
update_totals() {
	local f major n=0 tmp
	tmp=$(mktemp)
	if [ -f "$REPO/test/expected_totals" ]; then
		cp "$REPO/test/expected_totals" "$tmp"
	else
		printf '%s\n' "# test/expected_totals: the tests each part of a full \`make test\` runs," \
			"# one line a PostgreSQL major (test/run.sh checks it; \`make expected-totals\`" \
			"# copies the last full runs' test/.last_totals.MAJOR here)." >"$tmp"
	fi
	for f in "$REPO"/test/.last_totals.*; do
		[ -f "$f" ] || continue
		major=${f##*.}
		if grep -q '# from a run with' "$f" && [ "${GRIDHA_FORCE:-0}" != 1 ]; then
			echo "PostgreSQL $major: the last full run had failures; not taken (GRIDHA_FORCE=1 takes it): $(cat "$f")" >&2
			continue
		fi
		awk -v m="$major" '$1 != m' "$tmp" >"$tmp.new"
		sed 's/ *# from a run with.*//' "$f" >>"$tmp.new"
		mv "$tmp.new" "$tmp"
		echo "PostgreSQL $major: $(cat "$f")"
		n=$((n + 1))
	done
	if [ "$n" -eq 0 ]; then
		rm -f "$tmp"
		echo "no usable test/.last_totals.*: run a full make test first" >&2
		return 1
	fi
	# the comments first, then the majors in order
	{ grep '^#' "$tmp"; grep -v '^#' "$tmp" | sort -n; } >"$REPO/test/expected_totals"
	rm -f "$tmp"
	echo "wrote test/expected_totals"
}

# ---------------------------------------------------------------------------

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	gridha_cluster_cleanup || true
}

main() {
	trap cleanup EXIT
	# The EXIT trap does the cleaning; these make Ctrl-C and kill end the run.
	trap 'echo "interrupted" >&2; exit 130' INT
	trap 'exit 143' TERM

	if [ "${1:-}" = --update-totals ]; then
		update_totals
		return
	fi
	check_only
	install_prerequisites
	check_postgres
	build
	# --setup-only: what other make targets (make ha) need first
	if [ "${1:-}" = --setup-only ]; then
		return 0
	fi
	start_cluster
	want regress && run_regress
	start_phase2
	# What suites can rely on (see test/suites/README).
	export GRIDHA_REPO=$REPO GRIDHA_LIB=$REPO/test/lib.sh
	# where the logs of clusters of test/t's and the suites' own go
	# (check_server_log)
	export GRIDHA_LOG_DIR=$GRIDHA_TEST_DIR/server-logs
	mkdir -p "$GRIDHA_LOG_DIR"
	gridha_fix_owner "$GRIDHA_LOG_DIR"
	want isolation && run_isolation
	want pgtap && run_pgtap
	# test/t before the suites: 80_dist and 81_deb install a release build
	# of gridha into the run's PostgreSQL, as a user would, and every test/t
	# file must run on the test build (the lock-order checker, the hooks)
	run_framework_tests
	run_suites
	check_server_log
	if [ -z "${GRIDHA_ONLY:-}" ]; then
		check_totals
	fi
	finish
}

main "$@"
