#!/usr/bin/env bash
# test/suites/71_quickstart.sh: the README's quick start runs as written.
#
# Reads README.md afresh and takes from it:
#   setup   the fenced block after "<!-- quickstart-setup -->": the server
#           settings it writes (lines "name = 'value'") are applied to the
#           test cluster by a restart, after the phase 2 settings, so they
#           decide (a README that stopped preloading gridha would fail here).
#           The block's other lines (the conf.d path, pg_ctlcluster,
#           createuser) are the host's own: the runner's cluster stands in
#           for them, already running as the superuser postgres. The
#           Install section's apt-get and make are what test/run.sh does
#           before any suite.
#   blocks  every fenced sh block after a "<!-- quickstart -->" line, run in
#           order as one bash script (bash -e -o pipefail), from an empty
#           scratch directory: the quick start needs no source tree (a
#           user who installed the .deb or from PGXN has none). psql
#           reads a psqlrc that sets ON_ERROR_STOP, so a failing statement
#           fails the run; the script runs in a process group of its own,
#           ended at exit with whatever it started.
#
# Then checks: the script exited 0 within QUICKSTART_TIMEOUT seconds; every
# batch in the quick start's database (gridha.database of the setup) is
# committed; the batches a worker handed out reached the quick start's ledger
# stand-in (its table public.ledger) in each service's enqueue order, each
# after the one before it was committed; at least one batch
# was handed out by a psql instance and one by a worker; no worker runs
# afterwards. Words: "quick-start database" is that gridha.database. The
# role the setup names as gridha.worker_role (the quick start creates it) is
# dropped before and after.
#
# Output: numbered TAP lines ("ok N - ...", "not ok N - ..."), the plan line
# "1..N" last. Runs alone too (bash test/suites/71_quickstart.sh starts a
# cluster of its own; the extension must be installed).
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
TIMEOUT=${QUICKSTART_TIMEOUT:-180}
FAILED=0
RESTARTED=0
STANDALONE=0
QS_PID=
DB=
ROLE=
[ -n "${GRIDHA_TEST_DIR:-}" ] || STANDALONE=1

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"

# Numbered TAP lines; the plan line "1..N" comes last (at exit), since an
# early failure ends the suite.
TESTS=0
ok() {
	TESTS=$((TESTS + 1))
	echo "ok $TESTS - $*"
}
not_ok() {
	TESTS=$((TESTS + 1))
	echo "not ok $TESTS - $*"
	FAILED=$((FAILED + 1))
}

suite_work 71_quickstart
RUN=$WORK/run
rm -rf "$RUN"
mkdir -p "$RUN"

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	if [ -n "$QS_PID" ]; then
		kill -TERM -- "-$QS_PID" 2>/dev/null
		wait "$QS_PID" 2>/dev/null
	fi
	suite_restore_cluster
	if [ -n "$DB" ]; then
		psql -X -q -d postgres -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" >/dev/null 2>&1
	fi
	if [ -n "$ROLE" ]; then
		psql -X -q -d postgres -c "DROP ROLE IF EXISTS \"$ROLE\"" >/dev/null 2>&1
	fi
	if [ "$STANDALONE" = 1 ]; then
		gridha_cluster_cleanup
	fi
	echo "1..$TESTS"
}
trap cleanup EXIT

# What the README says, as files: setup.conf (name<TAB>value) and
# quickstart.sh (the blocks, each after a comment naming its line).
python3 - "$REPO/README.md" "$WORK" <<'PYEOF'
import re
import sys

readme, work = sys.argv[1], sys.argv[2]
lines = open(readme, encoding="utf-8").read().split("\n")


def block_after(i):
    """block_after: (first line number, language, body) of the fenced block
    that starts after line i with only blank lines between, else None."""
    j = i + 1
    while j < len(lines) and not lines[j].strip():
        j += 1
    if j >= len(lines) or not lines[j].startswith("```"):
        return None
    lang = lines[j][3:].strip()
    k = j + 1
    while k < len(lines) and not lines[k].startswith("```"):
        k += 1
    return j + 1, lang, lines[j + 1:k]


setup, blocks = [], []
for i, line in enumerate(lines):
    mark = line.strip()
    if mark == "<!-- quickstart-setup -->":
        b = block_after(i)
        if b:
            for l in b[2]:
                m = re.match(r"^\s*([A-Za-z_][\w.]*)\s*=\s*'([^']*)'\s*(#.*)?$", l)
                if m:
                    setup.append((m.group(1), m.group(2)))
    elif mark == "<!-- quickstart -->":
        b = block_after(i)
        blocks.append(b if b else (i + 1, None, None))

with open(work + "/setup.conf", "w") as f:
    for name, value in setup:
        f.write("%s\t%s\n" % (name, value))
with open(work + "/quickstart.sh", "w") as f:
    for start, lang, body in blocks:
        if body is None:
            f.write("echo 'README.md line %d: <!-- quickstart --> is not followed by a fenced block' >&2\nexit 2\n" % start)
        elif lang not in ("sh", "bash", "shell"):
            f.write("echo 'README.md line %d: a quickstart block must be sh, not %r' >&2\nexit 2\n" % (start, lang))
        else:
            f.write("# --- README.md line %d\n%s\n" % (start, "\n".join(body)))

PYEOF

nsettings=$(wc -l <"$WORK/setup.conf")
nblocks=$(grep -c '^# --- README.md line' "$WORK/quickstart.sh")
DB=$(awk -F'\t' '$1 == "gridha.database" { print $2 }' "$WORK/setup.conf" | tail -n 1)
ROLE=$(awk -F'\t' '$1 == "gridha.worker_role" { print $2 }' "$WORK/setup.conf" | tail -n 1)
preload=$(awk -F'\t' '$1 == "shared_preload_libraries" { print $2 }' "$WORK/setup.conf" | tail -n 1)
if [ "$nsettings" -gt 0 ] && [ -n "$DB" ] && [[ ",${preload// /}," == *,gridha,* ]]; then
	ok "README.md's quick-start setup preloads gridha and names the workers' database ($DB)"
else
	not_ok "README.md's quick-start setup preloads gridha and names the workers' database"
	echo "# settings found after <!-- quickstart-setup -->:"
	diag <"$WORK/setup.conf"
	exit 1
fi
if [ "$nblocks" -ge 3 ]; then
	ok "README.md has $nblocks quick-start blocks"
else
	not_ok "README.md has at least 3 quick-start blocks (found $nblocks)"
	exit 1
fi

# The setup's settings, after the phase 2 ones so that they win.
opts=()
while IFS=$'\t' read -r name value; do
	opts+=("$name=$value")
done <"$WORK/setup.conf"
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" >/dev/null 2>&1
[ -z "$ROLE" ] || psql -X -q -d postgres -c "DROP ROLE IF EXISTS \"$ROLE\"" >/dev/null 2>&1
RESTARTED=1
# shellcheck disable=SC2086 # the options are words
if ! gridha_cluster_restart $SUITE_CLUSTER_OPTS "${opts[@]}"; then
	not_ok "the cluster restarted with the quick start's settings (${opts[*]})"
	exit 1
fi

printf '\\set ON_ERROR_STOP on\n' >"$WORK/psqlrc"
(
	cd "$RUN" || exit 1
	export PSQLRC=$WORK/psqlrc
	exec setsid bash -e -o pipefail "$WORK/quickstart.sh"
) >"$WORK/quickstart.out" 2>&1 &
QS_PID=$!
# shellcheck disable=SC2317 # called by wait_until
quickstart_done() {
	! kill -0 "$QS_PID" 2>/dev/null
}
wait_until "$TIMEOUT" quickstart_done
if kill -0 "$QS_PID" 2>/dev/null; then
	not_ok "the quick start ran to its end within ${TIMEOUT}s"
	tail -n 30 "$WORK/quickstart.out" | diag
	exit 1
fi
wait "$QS_PID"
rc=$?
if [ "$rc" -eq 0 ]; then
	ok "the quick start's commands ran without an error"
else
	not_ok "the quick start's commands ran without an error (exit $rc)"
	tail -n 30 "$WORK/quickstart.out" | diag
fi
# whatever it left running, if the script stopped early
kill -TERM -- "-$QS_PID" 2>/dev/null
QS_PID=

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}

before=$FAILED
check_sql "$DB" "every batch of the quick start is committed" \
	"SELECT count(*) >= 2 AND count(*) FILTER (WHERE status <> 'committed') = 0 FROM gridha.batches"
if [ "$FAILED" -gt "$before" ]; then
	psql_db -c "SELECT service_id, batch_id, status FROM gridha.batches ORDER BY service_id, seq" 2>&1 | diag
fi
check_sql "$DB" "a psql instance handed out and reported batches by hand" \
	"SELECT count(*) > 0 FROM gridha.batches b JOIN gridha.instances i USING (instance_id)
	  WHERE i.kind <> 'worker' AND b.status = 'committed'"
check_sql "$DB" "a background worker handed out batches that ended committed" \
	"SELECT count(*) > 0 FROM gridha.batches b JOIN gridha.instances i USING (instance_id)
	  WHERE i.kind = 'worker' AND b.status = 'committed'"

before=$FAILED
# The worker's services, in enqueue order, against the ledger stand-in's
# table (public.ledger of the quick start): the same batches, received in seq
# order, each after the one before it was committed (one in flight).
check_sql "$DB" "the worker's batches reached the ledger stand-in in enqueue order, one in flight" \
	"WITH w AS (SELECT b.service_id, b.batch_id, b.seq, b.finished_at, l.received_at,
	                   lag(b.finished_at) OVER (PARTITION BY b.service_id ORDER BY b.seq) AS prev_final,
	                   row_number() OVER (PARTITION BY b.service_id ORDER BY b.seq) AS by_seq,
	                   row_number() OVER (PARTITION BY b.service_id ORDER BY l.received_at) AS by_arrival
	              FROM gridha.batches b LEFT JOIN public.ledger l USING (batch_id)
	             WHERE b.service_id IN (SELECT b2.service_id FROM gridha.batches b2
	                                      JOIN gridha.instances i USING (instance_id) WHERE i.kind = 'worker'))
	 SELECT count(*) > 0
	        AND count(*) FILTER (WHERE received_at IS NULL OR by_seq <> by_arrival
	                             OR received_at < prev_final) = 0
	   FROM w"
if [ "$FAILED" -gt "$before" ]; then
	psql_db -c "SELECT b.service_id, b.batch_id, b.seq, b.finished_at, l.received_at
	              FROM gridha.batches b LEFT JOIN public.ledger l USING (batch_id)
	             ORDER BY b.service_id, b.seq" 2>&1 | diag
fi

# shellcheck disable=SC2317 # called by wait_until
no_worker() {
	[ "$(psql_db -c "SELECT count(*) FROM gridha.workers" 2>/dev/null)" = 0 ]
}
wait_until 15 no_worker
check $? "the quick start's last block stopped its worker"

exit $((FAILED > 0))
