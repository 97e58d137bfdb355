#!/usr/bin/env bash
# test/repeat.sh: run parts of `make test` again and again, to find checks
# that depend on timing.
#
#   test/repeat.sh [-n TIMES] [-m MINUTES] [-o DIR] PART...
#
# Runs test/run.sh with GRIDHA_ONLY=PART for each PART in turn, then again,
# round after round, until each PART ran TIMES times (default 20) or MINUTES
# have passed (default: no limit; a round in progress ends first). PART is
# what GRIDHA_ONLY takes (regress, isolation, pgtap, a suite's name, a
# test/t file's name such as 001_soak).
# PG_CONFIG and the other settings of test/run.sh pass through.
#
# Each run's whole log goes to DIR/PART.RUN.log (default DIR: a new
# /tmp/gridha-repeat.XXXXXX), and a failed run's directory (its server
# logs, the suite's files) to DIR/PART.RUN.dir; DIR/results.tsv has a line
# per run:
#   part  run  exit  passed  failed  skipped  seconds
# The end prints per part the runs, the runs that failed, the slowest run,
# and for each failed run its log and the "not ok" lines, and exits non-zero
# when any run failed.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TIMES=20
MINUTES=0
OUT=
while getopts n:m:o: opt; do
	case $opt in
		n) TIMES=$OPTARG ;;
		m) MINUTES=$OPTARG ;;
		o) OUT=$OPTARG ;;
		*) echo "usage: test/repeat.sh [-n TIMES] [-m MINUTES] [-o DIR] PART..." >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -eq 0 ]; then
	echo "usage: test/repeat.sh [-n TIMES] [-m MINUTES] [-o DIR] PART..." >&2
	exit 2
fi
case $TIMES$MINUTES in
	*[!0-9]*) echo "test/repeat.sh: -n and -m take whole numbers" >&2; exit 2 ;;
esac
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/gridha-repeat.XXXXXX)
mkdir -p "$OUT"
RESULTS=$OUT/results.tsv
: >"$RESULTS"
deadline=0
[ "$MINUTES" -gt 0 ] && deadline=$((SECONDS + MINUTES * 60))

limit=
[ "$MINUTES" -gt 0 ] && limit=" (at most $MINUTES min)"
echo "# test/repeat.sh: $*: $TIMES times each$limit; logs in $OUT"
for ((run = 1; run <= TIMES; run++)); do
	if [ "$deadline" -gt 0 ] && [ "$SECONDS" -ge "$deadline" ]; then
		echo "# the time limit ended the repeats before round $run"
		break
	fi
	for part in "$@"; do
		log=$OUT/$part.$run.log
		start=$SECONDS
		GRIDHA_ONLY=$part GRIDHA_KEEP_TMP=1 "$REPO/test/run.sh" >"$log" 2>&1
		rc=$?
		# the run's directory (server logs, a suite's files): kept in DIR
		# when the run failed, removed when it passed
		kept=$(sed -n 's/^\[[0-9:]*\] kept \(.*\) (GRIDHA_KEEP_TMP=1)$/\1/p' "$log" | tail -n 1)
		if [ -n "$kept" ] && [ -d "$kept" ]; then
			if [ "$rc" -ne 0 ]; then
				mv "$kept" "$OUT/$part.$run.dir" 2>/dev/null || cp -a "$kept" "$OUT/$part.$run.dir"
			fi
			rm -rf "$kept"
		fi
		# the runner's summary line: "N passed, N failed, N skipped"
		read -r p f s < <(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1 \2 \3/p' "$log" |
			tail -n 1)
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$part" "$run" "$rc" \
			"${p:--}" "${f:--}" "${s:--}" "$((SECONDS - start))" >>"$RESULTS"
		if [ "$rc" -ne 0 ]; then
			echo "# $part run $run FAILED (exit $rc, $((SECONDS - start)) s): $log${kept:+ (its directory: $OUT/$part.$run.dir)}"
		else
			echo "# $part run $run: ${p:-?} passed, ${f:-?} failed, ${s:-?} skipped ($((SECONDS - start)) s)"
		fi
		p= f= s=
	done
done

echo "== repeats =="
bad=0
for part in "$@"; do
	awk -F'\t' -v part="$part" '
		$1 == part { n++; if ($3 != 0) f++; if ($7 > max) max = $7 }
		END { printf "  %-20s %3d runs, %2d failed, slowest %d s\n", part, n, f, max }' "$RESULTS"
done
while IFS=$'\t' read -r part run rc _ _ _ _; do
	[ "$rc" -eq 0 ] && continue
	bad=1
	echo "== $part run $run (exit $rc): $OUT/$part.$run.log =="
	grep -E '^not ok|^FAILED|^# ' "$OUT/$part.$run.log" | grep -A3 -E '^not ok|^FAILED' | head -n 40
done <"$RESULTS"
exit "$bad"
