#!/usr/bin/env bash
# test/suites/50_ha.sh: the short run of the fault harness (test/ha).
#
#   1. test/ha/run.sh with HA_DURATION=0 and its default single-server
#      topology: its own throwaway cluster (ports from 56400), the test
#      ledger, four clients and three workers over 60 services, every fault
#      kind once; the checker's verdicts are the TAP lines (one per
#      property, each prefixed "ha:"). A primary with a streaming standby,
#      failover and switchover are 51_failover.sh's
#   2. the checker can fail: on copies of that run's history, each with one
#      planted fault of the system (two arrivals swapped, a duplicate POST
#      with no fault near it, a write accepted from an instance that did not
#      hold the claim, a batch missing from the database), the matching
#      property must be reported "not ok"
#
# It does not touch the run's cluster (the harness's cluster is its own, so
# its immediate stop disturbs no other suite).
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-ha-suite.XXXXXX)}
RUN=$WORK/run
FAILED=0

# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 14

# 1. the short run: its TAP lines are the checker's
rm -rf "$RUN"
HA_OUT=$RUN HA_TAP=1 HA_DURATION=0 GRIDHA_BASE_PORT=${HA_BASE_PORT:-56400} \
	bash "$REPO/test/ha/run.sh" >"$WORK/run.out" 2>"$WORK/run.err"
rc=$?
grep -E '^(ok|not ok) - ' "$WORK/run.out"
FAILED=$((FAILED + $(grep -c '^not ok - ' "$WORK/run.out")))
grep -E '^(\||#)' "$WORK/run.out" | sed 's/^/# /'
# the harness's server logs (gathered into the run directory) join the
# run's crash scan (test/run.sh reads every file in GRIDHA_LOG_DIR)
for f in "$RUN"/postgres*.log; do
	[ -f "$f" ] && [ -d "${GRIDHA_LOG_DIR:-}" ] && cp "$f" "$GRIDHA_LOG_DIR/$(basename "$0" .sh)-$(basename "$f")"
done
# the harness's own exit is one test of the plan, passed or not: a failed
# harness counts against the plan instead of running past it
if [ "$rc" -eq 0 ]; then
	ok "ha: the harness run exits 0"
else
	not_ok "ha: the harness run exits 0 (exit $rc)"
	tail -n 20 "$WORK/run.err" | sed 's/^/# /'
fi

# 2. planted faults: plant KIND DIR alters a copy of the run's history
plant() {
	python3 - "$1" "$2" <<'EOF'
import csv, json, sys
kind, d = sys.argv[1], sys.argv[2]

def rewrite_jsonl(path, fn):
    lines = [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]
    lines = fn(lines)
    with open(path, "w", encoding="utf-8") as fh:
        for e in lines:
            fh.write(json.dumps(e) + "\n")

def accepted(lines):
    return [e for e in lines if e.get("event") == "post" and e.get("result") == "accepted"]

if kind == "order":
    def swap(lines):
        acc = accepted(lines)
        svc = acc[0]["service_id"]
        mine = [e for e in acc if e["service_id"] == svc]
        a, b = mine[1], mine[2]
        a["batch_id"], b["batch_id"] = b["batch_id"], a["batch_id"]
        return lines
    rewrite_jsonl(d + "/ledger.log", swap)
elif kind == "duplicate":
    def dup(lines):
        last = accepted(lines)[-1]
        extra = dict(last, seq=lines[-1]["seq"] + 1, t=last["t"] + 1, result="duplicate",
                     first_seq=last["seq"])
        extra.pop("service_seq", None)
        return lines + [extra]
    rewrite_jsonl(d + "/ledger.log", dup)
elif kind == "stale":
    path = d + "/db_batch_events.csv"
    rows = list(csv.DictReader(open(path, encoding="utf-8", newline="")))
    others = sorted({r["writer"] for r in rows if r["writer"]})
    for r in rows:
        if r["old_status"] == "submitting" and r["status"] == "pending":
            r["writer"] = next(o for o in others if o != r["writer"])
            break
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
elif kind == "lost":
    path = d + "/db_batches.csv"
    lines = open(path, encoding="utf-8").read().splitlines(True)
    del lines[len(lines) // 2]
    open(path, "w", encoding="utf-8").writelines(lines)
EOF
}

# expect_flag KIND PROPERTY: the checker, on a copy with KIND planted, says
# "not ok" for PROPERTY
expect_flag() {
	local kind=$1 prop=$2 dir=$WORK/planted-$1
	rm -rf "$dir"
	cp -r "$RUN" "$dir" && plant "$kind" "$dir" || {
		not_ok "ha checker: could plant $kind"
		return
	}
	python3 "$REPO/test/ha/check.py" --tap "$dir" >"$dir/check.out" 2>&1
	if [ $? -ne 0 ] && grep -q "^not ok - ha: $prop" "$dir/check.out"; then
		ok "ha checker: flags a planted $kind ($prop)"
	else
		not_ok "ha checker: flags a planted $kind ($prop)"
		sed 's/^/# /' "$dir/check.out" | head -n 30
	fi
}

if [ -f "$RUN/ledger.log" ] && [ -f "$RUN/db_batch_events.csv" ]; then
	expect_flag order "per-service arrival order"
	expect_flag duplicate "every duplicate POST is explained"
	expect_flag stale "no two instances held a service at once"
	expect_flag lost "no batch lost"
else
	not_ok "ha checker: the run left a history to plant faults in"
fi

[ "$FAILED" -eq 0 ]
