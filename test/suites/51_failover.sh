#!/usr/bin/env bash
# test/suites/51_failover.sh: the short database-failover run of the fault
# harness (test/ha), on a primary and a synchronous hot standby.
#
#   1. test/ha/run.sh with HA_TOPOLOGY=replica HA_REPLICA=sync,
#      HA_KINDS=failover,switchover and HA_DURATION=0: its own two servers
#      on loopback (ports from 56500; gridha preloaded on both with three
#      workers each), the test ledger, four clients on a multi-host
#      connection string, one failover (kill -9 of the primary's
#      postmaster, the standby promoted, the old primary back through
#      pg_rewind) and one switchover (a clean stop of the primary, the
#      standby promoted, the old primary back). The checker's verdicts are
#      the TAP lines, each prefixed "failover:": nothing lost, order at the
#      ledger, no write accepted from a non-holder, epochs never repeat
#      across the promotions, workers only on the primary, nothing the
#      database acknowledged lost, every duplicate explained
#   2. from the run's record of the standby probe made just before the
#      failover: on the standby, SELECT * FROM gridha.next_batch(<uuid>)
#      failed with SQLSTATE 25006 "cannot execute next_batch() during
#      recovery", nothing was written (the instance exists on neither
#      node), and pg_stat_activity there showed no 'gridha worker'
#   3. the checker can fail: on copies of the run's history, each with one
#      planted fault (a take on the new timeline whose epoch repeats an
#      old one, a gridha worker seen on a node in recovery, a hand-out a
#      client saw that the surviving history lacks), the matching property
#      must be reported "not ok"
#
# The run is bounded (HA_FAILOVER_TIMEOUT seconds, 300 by default) and
# everything it starts is stopped on any exit: run.sh stops its servers,
# clients and ledger on EXIT, INT and TERM, and this script sends it TERM
# when it is itself stopped. It does not touch the suites' cluster.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-failover-suite.XXXXXX)}
RUN=$WORK/run
FAILED=0
RUN_PID=

# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 17

stop_run() {
	if [ -n "$RUN_PID" ] && kill -0 "$RUN_PID" 2>/dev/null; then
		kill -TERM "$RUN_PID" 2>/dev/null
		wait "$RUN_PID" 2>/dev/null
	fi
	RUN_PID=
}
trap stop_run EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 1. the run: its TAP lines are the checker's
rm -rf "$RUN"
started=$SECONDS
HA_OUT=$RUN HA_TAP=1 HA_TAP_NAME=failover HA_DURATION=0 HA_TOPOLOGY=replica \
	HA_REPLICA=sync HA_KINDS=failover,switchover \
	GRIDHA_BASE_PORT=${HA_FAILOVER_BASE_PORT:-56500} \
	timeout -k 15 "${HA_FAILOVER_TIMEOUT:-300}" bash "$REPO/test/ha/run.sh" \
	>"$WORK/run.out" 2>"$WORK/run.err" &
RUN_PID=$!
wait "$RUN_PID"
rc=$?
RUN_PID=
grep -E '^(ok|not ok) - ' "$WORK/run.out"
FAILED=$((FAILED + $(grep -c '^not ok - ' "$WORK/run.out")))
grep -E '^(\||#|\()' "$WORK/run.out" | sed 's/^/# /'
# the harness's server logs (gathered into the run directory) join the
# run's crash scan (test/run.sh reads every file in GRIDHA_LOG_DIR)
for f in "$RUN"/postgres*.log; do
	[ -f "$f" ] && [ -d "${GRIDHA_LOG_DIR:-}" ] && cp "$f" "$GRIDHA_LOG_DIR/$(basename "$0" .sh)-$(basename "$f")"
done
echo "# run time: $((SECONDS - started)) s"
# the harness's own exit is one test of the plan, passed or not: a failed
# harness counts against the plan instead of running past it
if [ "$rc" -eq 0 ]; then
	ok "failover: the harness run exits 0"
else
	not_ok "failover: the harness run exits 0 (exit $rc)"
	tail -n 20 "$WORK/run.err" | sed 's/^/# /'
fi

# 2. the standby before the failover, as the driver probed it
probe=$(python3 - "$RUN/standby.jsonl" <<'EOF' 2>&1
import json, sys
try:
    probes = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
except OSError as exc:
    print("no probe record: %s" % exc)
    sys.exit(1)
p = next((p for p in probes if p.get("when") == "before failover"), None)
if p is None:
    print("no probe before the failover")
    sys.exit(1)
nb = p.get("next_batch") or {}
bad = []
if p.get("in_recovery") is not True:
    bad.append("%s was not in recovery" % p.get("node"))
if nb.get("sqlstate") != "25006" or nb.get("message") != "cannot execute next_batch() during recovery":
    bad.append("next_batch answered %s %r" % (nb.get("sqlstate"), nb.get("message")))
if p.get("written") != [0, 0]:
    bad.append("rows of the probe on the two nodes: %s" % p.get("written"))
if p.get("workers") != 0:
    bad.append("%s gridha worker(s) in its pg_stat_activity" % p.get("workers"))
print("; ".join(bad) if bad else "standby %s" % p.get("node"))
sys.exit(1 if bad else 0)
EOF
)
check $? "failover: before the failover the standby refused gridha.next_batch with 25006 \"cannot execute next_batch() during recovery\", wrote nothing and ran no gridha worker ($probe)"

# 3. planted faults: plant KIND DIR alters a copy of the run's history
plant() {
	python3 - "$1" "$2" <<'EOF'
import csv, json, sys
kind, d = sys.argv[1], sys.argv[2]

def rewrite_csv(path, fn):
    rows = list(csv.DictReader(open(path, encoding="utf-8", newline="")))
    fn(rows)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)

if kind == "epoch":
    # a take on timeline 2 that gives the service an epoch it had on 1
    def repeat(rows):
        old = {}
        for r in rows:
            if r["tli"] == "1" and r["claimant"]:
                old.setdefault(r["service_id"], r["epoch"])
        r = next(r for r in rows if r["tli"] == "2" and r["claimant"]
                 and r["epoch"] != r["old_epoch"] and r["service_id"] in old)
        r["epoch"] = old[r["service_id"]]
    rewrite_csv(d + "/db_claim_events.csv", repeat)
elif kind == "standby-worker":
    lines = [json.loads(l) for l in open(d + "/nodes.jsonl", encoding="utf-8") if l.strip()]
    s = next(x for x in lines if x["recovery_before"] and x["recovery_after"])
    s["workers"] = 1
    with open(d + "/nodes.jsonl", "w", encoding="utf-8") as fh:
        for x in lines:
            fh.write(json.dumps(x) + "\n")
elif kind == "acked":
    # a hand-out the database acknowledged to a client, at an attempt the
    # history never had: made from the first client's first hand-out, or,
    # when no client handed anything out (under load the workers may take
    # every service), from the history's first hand-out, into the first
    # client's log
    import glob
    logs = sorted(glob.glob(d + "/clients/*.log"))
    if not logs:
        raise SystemExit("no client log")
    for path in logs:
        lines = [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]
        h = next((x for x in lines if x.get("event") == "handout"), None)
        if h is not None:
            break
    else:
        path = logs[0]
        lines = [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]
        e = next(r for r in csv.DictReader(open(d + "/db_batch_events.csv", encoding="utf-8", newline=""))
                 if r["status"] == "submitting")
        h = {"t": float(e["t"]), "event": "handout",
             "instance": next((x["instance"] for x in lines if x.get("instance")), None),
             "service": e["service_id"], "batch": e["batch_id"],
             "epoch": int(e["epoch"]), "attempt": int(e["attempts"])}
    lines.append(dict(h, attempt=h["attempt"] + 1000))
    with open(path, "w", encoding="utf-8") as fh:
        for x in lines:
            fh.write(json.dumps(x) + "\n")
EOF
}

# expect_flag KIND PROPERTY: the checker, on a copy with KIND planted, says
# "not ok" for PROPERTY
expect_flag() {
	local kind=$1 prop=$2 dir=$WORK/planted-$1
	rm -rf "$dir"
	cp -r "$RUN" "$dir" && plant "$kind" "$dir" || {
		not_ok "failover checker: could plant $kind"
		return
	}
	python3 "$REPO/test/ha/check.py" --tap --name failover "$dir" >"$dir/check.out" 2>&1
	if [ $? -ne 0 ] && grep -q "^not ok - failover: $prop" "$dir/check.out"; then
		ok "failover checker: flags a planted $kind ($prop)"
	else
		not_ok "failover checker: flags a planted $kind ($prop)"
		sed 's/^/# /' "$dir/check.out" | head -n 30
	fi
}

if [ -f "$RUN/db_claim_events.csv" ] && [ -f "$RUN/nodes.jsonl" ]; then
	expect_flag epoch "epochs never repeat"
	expect_flag standby-worker "workers run only on the primary"
	expect_flag acked "nothing the database acknowledged was lost"
else
	not_ok "failover checker: the run left a history to plant faults in"
fi

[ "$FAILED" -eq 0 ]
