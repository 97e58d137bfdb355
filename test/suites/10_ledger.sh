#!/usr/bin/env bash
# test/suites/10_ledger.sh: the test ledger (test/dlt) against its contract.
#
# Starts test/dlt/ledger.py three times on ports the OS picks (--port 0) and
# drives it with python3's urllib: POST in both forms, idempotence, the commit
# delay, both status dialects, INVALID by pattern and by control, 400 by
# reject pattern, the 503, 429, stall and malformed windows (set by /control
# and by start flags), /stats, the log, check_log.py's order checks, and the
# ways it stops (SIGTERM, SIGINT, --max-lifetime).
#
# Words: "ledger A" is the main one; "B" starts with every fault flag set; "C"
# only has to stop by itself. Waits are bounded polls, never fixed sleeps;
# the only time bounds asserted are lower ones the ledger guarantees (a hold
# lasts at least its length, a commit comes at least --commit-delay after its
# POST).
#
# Every ledger it starts has a --max-lifetime, and is killed at the end
# whatever happened, so none outlives the suite.
#
# Output: one TAP line per check. Needs no database; runs alone too
# (`bash test/suites/10_ledger.sh`), in a scratch directory of its own.
set -euo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-}
if [ -z "$WORK" ]; then
	WORK=$(mktemp -d /tmp/gridha-ledger.XXXXXX)
	trap 'rm -rf "$WORK"' EXIT
fi

rc=0
python3 - "$REPO/test/dlt" "$WORK" <<'EOF' || rc=$?
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

DLT, WORK = sys.argv[1], sys.argv[2]
LEDGER = os.path.join(DLT, "ledger.py")
CHECK = os.path.join(DLT, "check_log.py")
failures = 0


def ok(cond, what, detail=None):
    """ok: one TAP line; a diagnostic line when it failed."""
    global failures
    print(("ok - " if cond else "not ok - ") + what, flush=True)
    if not cond:
        failures += 1
        if detail is not None:
            print("# " + str(detail).replace("\n", "\n# "), flush=True)
    return cond


def poll(fn, limit=15.0, step=0.05):
    """poll: call fn until it returns something true, at most limit seconds."""
    value = None
    for _ in range(int(limit / step)):
        value = fn()
        if value:
            return value
        time.sleep(step)
    return value


class Ledger:
    """Ledger: one started ledger.py process."""

    def __init__(self, name, *flags):
        self.name = name
        self.port_file = os.path.join(WORK, name + ".port")
        self.log = os.path.join(WORK, name + ".log")
        for f in (self.port_file, self.log):
            if os.path.exists(f):
                os.unlink(f)
        self.err = open(os.path.join(WORK, name + ".stderr"), "w")
        self.proc = subprocess.Popen(
            [sys.executable, LEDGER, "--port", "0", "--port-file", self.port_file,
             "--log", self.log] + list(flags),
            stdout=subprocess.DEVNULL, stderr=self.err)
        self.port = None
        self.counts = {"posts": 0}

    def wait_port(self):
        def read():
            try:
                with open(self.port_file) as fh:
                    return int(fh.read().strip() or 0)
            except (OSError, ValueError):
                return 0
        self.port = poll(read, limit=20)
        return self.port

    def request(self, method, path, body=None, headers=None, timeout=10):
        """request: (code or "timeout", body bytes); counts what it sent."""
        if method == "POST" and path.startswith("/batches"):
            self.counts["posts"] += 1
        req = urllib.request.Request(
            "http://127.0.0.1:%d%s" % (self.port, path), data=body,
            method=method, headers=headers or {})
        if body is not None:
            req.add_header("Content-Type", "application/octet-stream")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                code, data = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            code, data = exc.code, exc.read()
        except (TimeoutError, socket.timeout):
            return "timeout", b""
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                return "timeout", b""
            raise
        self.counts[code] = self.counts.get(code, 0) + 1
        return code, data

    def post(self, service_id, batch_id, epoch=1, attempt=1, **kw):
        code, data = self.request(
            "POST", "/batches/%s/%s" % (service_id, batch_id), body=b"{}",
            headers={"X-Gridha-Service-Id": service_id, "X-Gridha-Batch-Id": batch_id,
                     "X-Gridha-Epoch": str(epoch), "X-Gridha-Attempt": str(attempt)},
            **kw)
        return code, (json.loads(data) if code in (202, 400) and data else None)

    def control(self, **settings):
        code, data = self.request("POST", "/control", json.dumps(settings).encode())
        return code, json.loads(data) if data else None

    def sawtooth(self, ids, **kw):
        code, data = self.request("GET", "/batch_statuses?id=" + ids, **kw)
        return code, data

    def status(self, batch_id):
        """status: the sawtooth status word of one (plain) id."""
        code, data = self.sawtooth(batch_id)
        if code != 200:
            return None
        return json.loads(data)["data"][0]["status"]

    def splinter(self, ids):
        code, data = self.request("GET", "/splinter/batch_statuses?ids=" + ids)
        return code, json.loads(data) if code == 200 else data

    def stats(self):
        code, data = self.request("GET", "/stats")
        return json.loads(data) if code == 200 else None

    def events(self):
        with open(self.log) as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def posts_of(self, batch_id):
        return [e for e in self.events()
                if e["event"] == "post" and e.get("batch_id") == batch_id]

    def stop(self, sig=signal.SIGTERM):
        """stop: signal it and wait (bounded) for its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


def listeners(port):
    """listeners: the local addresses listening on a TCP port, from /proc."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            addr, hexport = cols[1].split(":")
            if cols[3] == "0A" and int(hexport, 16) == port:
                found.append(addr)
    return found


def not_json_or_wrong_shape(data, want):
    try:
        body = json.loads(data)
    except ValueError:
        return True
    if want == "sawtooth":
        return not (isinstance(body, dict) and isinstance(body.get("data"), list))
    return not isinstance(body, list)


def run_check(*args):
    proc = subprocess.run([sys.executable, CHECK] + list(args),
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def write_expected(name, pairs):
    path = os.path.join(WORK, name)
    with open(path, "w") as fh:
        for sid, bid in pairs:
            fh.write("%s\t%s\n" % (sid, bid))
    return path


def timed(fn, *args, **kw):
    t0 = time.monotonic()
    out = fn(*args, **kw)
    return out, time.monotonic() - t0


def suite(ledgers):
    c = Ledger("c", "--max-lifetime", "1")
    ledgers.append(c)
    a = Ledger("a", "--invalid-pattern", "^inv-", "--reject-pattern", "^rej-",
               "--commit-delay", "0.2", "--max-lifetime", "120")
    ledgers.append(a)
    stalls = 0

    # --- start -------------------------------------------------------------
    if not ok(a.wait_port(), "ledger writes the port it listens on to --port-file"):
        return
    ev = a.events()
    ok(ev and ev[0]["event"] == "start" and ev[0]["port"] == a.port,
       "the log starts with a start event carrying the port", ev[:1])
    addrs = listeners(a.port)
    ok(addrs == ["0100007F"], "it listens on 127.0.0.1 only", addrs)

    # --- PENDING, then COMMITTED after the delay ---------------------------
    code, body = a.control(commit_delay=3600)
    ok(code == 200 and body["ok"] is True, "control sets the commit delay", body)
    code, body = a.post("svc-slow", "slow-1")
    ok(code == 202 and body["result"] == "accepted" and body["status"] == "PENDING",
       "POST /batches/<service>/<batch> answers 202 accepted, PENDING", (code, body))
    ok(a.status("slow-1") == "PENDING", "a batch within its commit delay is PENDING")
    code, body = a.splinter("slow-1")
    ok(code == 200 and body == [{"id": "slow-1", "status": {"statusType": "Pending",
                                                           "message": []}}],
       "splinter dialect: Pending", body)
    a.control(commit_delay=0.2)

    for bid in ("a1", "a2", "a3"):
        code, body = a.post("svc-a", bid)
        ok(code == 202 and body["result"] == "accepted", "POST %s accepted" % bid, body)
        ok(poll(lambda: a.status(bid) == "COMMITTED"),
           "%s is COMMITTED after the commit delay" % bid)
        if bid == "a1":
            done = [e for e in a.events() if e["event"] == "committed"
                    and e["batch_id"] == "a1"]
            ok(len(done) == 1 and done[0]["after"] >= 0.2 and done[0]["service_id"] == "svc-a",
               "the committed event comes at least --commit-delay after the POST", done)

    code, data = a.sawtooth("a1,slow-1,nope")
    ok(code == 200 and json.loads(data) == {"data": [
        {"id": "a1", "status": "COMMITTED"}, {"id": "slow-1", "status": "PENDING"},
        {"id": "nope", "status": "UNKNOWN"}]},
       "sawtooth dialect: COMMITTED, PENDING, UNKNOWN in the order asked", data)
    code, body = a.splinter("a1,slow-1,nope")
    ok(code == 200 and body == [
        {"id": "a1", "status": {"statusType": "Committed", "message": []}},
        {"id": "slow-1", "status": {"statusType": "Pending", "message": []}},
        {"id": "nope", "status": {"statusType": "Unknown", "message": []}}],
       "splinter dialect: Committed, Pending, Unknown in the order asked", body)
    code, _ = a.sawtooth("")
    ok(code == 400, "a status query without ids answers 400", code)

    # --- idempotence -------------------------------------------------------
    code, body = a.post("svc-a", "a1", epoch=2, attempt=2)
    ok(code == 202 and body["result"] == "duplicate" and body["status"] == "COMMITTED",
       "a duplicate POST answers 202 duplicate", body)
    ok(a.status("a1") == "COMMITTED", "a duplicate is not applied again (still COMMITTED)")
    posts = a.posts_of("a1")
    acc = [e for e in posts if e["result"] == "accepted"]
    dup = [e for e in posts if e["result"] == "duplicate"]
    ok(len(acc) == 1 and len(dup) == 1 and dup[0]["epoch"] == 2 and dup[0]["attempt"] == 2
       and dup[0]["first_seq"] == acc[0]["seq"],
       "the duplicate is logged once with its own epoch and attempt", posts)
    ok(len([e for e in a.events() if e["event"] == "committed" and e["batch_id"] == "a1"]) == 1,
       "a duplicate does not commit the batch again")

    # --- arrival order, in and out of order --------------------------------
    a.post("svc-b", "b2")
    a.post("svc-b", "b1")
    a.post("svc-slow", "slow-2")

    # --- POST /batches with the ids in headers -----------------------------
    code, data = a.request("POST", "/batches", b"payload",
                           {"X-Gridha-Service-Id": "svc-h", "X-Gridha-Batch-Id": "h1",
                            "X-Gridha-Epoch": "7", "X-Gridha-Attempt": "3"})
    ok(code == 202 and json.loads(data)["batch_id"] == "h1",
       "POST /batches takes the ids from the X-Gridha headers", data)
    lines = a.posts_of("h1")
    ok(len(lines) == 1 and {k: lines[0][k] for k in ("service_id", "epoch", "attempt",
                                                      "bytes", "result", "service_seq")}
       == {"service_id": "svc-h", "epoch": 7, "attempt": 3, "bytes": 7,
           "result": "accepted", "service_seq": 1},
       "its log line has service, epoch, attempt, size, arrival number", lines)
    code, _ = a.request("POST", "/batches", b"x", {"X-Gridha-Service-Id": "svc-h"})
    ok(code == 400, "POST /batches without a batch id answers 400", code)

    # --- URL-decoded ids ---------------------------------------------------
    code, _ = a.request("POST", "/batches/svc%2Fx/b%201%2C2", b"{}")
    ok(code == 202, "POST with URL-encoded path segments answers 202", code)
    lines = a.posts_of("b 1,2")
    ok(len(lines) == 1 and lines[0]["service_id"] == "svc/x",
       "path segments are URL-decoded (an encoded / and , stay in the id)", lines)
    code, data = a.sawtooth("b%201%2C2,a1")
    got = json.loads(data)["data"] if code == 200 else None
    ok(got is not None and [d["id"] for d in got] == ["b 1,2", "a1"]
       and got[0]["status"] in ("PENDING", "COMMITTED"),
       "status ids are split on commas, then URL-decoded", data)
    code, body = a.splinter("b%201%2C2")
    ok(code == 200 and body[0]["id"] == "b 1,2"
       and body[0]["status"]["statusType"] in ("Pending", "Committed"),
       "splinter ids are URL-decoded too", body)

    # --- INVALID and rejected ----------------------------------------------
    a.post("svc-i", "inv-1")
    code, body = a.control(invalid=["ctl-1"])
    ok(code == 200 and body["already_final"] == [], "control names a batch invalid", body)
    a.post("svc-i", "ctl-1")
    ok(poll(lambda: a.status("inv-1") == "INVALID"), "a batch id matching --invalid-pattern ends INVALID")
    ok(poll(lambda: a.status("ctl-1") == "INVALID"), "a batch named by control ends INVALID")
    code, body = a.splinter("inv-1,ctl-1")
    ok(code == 200 and [b["status"]["statusType"] for b in body] == ["Invalid", "Invalid"],
       "splinter dialect: Invalid", body)
    inv = {e["batch_id"]: e["reason"] for e in a.events() if e["event"] == "invalid"}
    ok(inv == {"inv-1": "pattern", "ctl-1": "control"},
       "invalid events name their reason (pattern, control)", inv)
    code, body = a.control(invalid=["a1"])
    ok(code == 200 and body["already_final"] == ["a1"] and a.status("a1") == "COMMITTED",
       "control cannot turn a final batch invalid", body)

    code, body = a.post("svc-r", "rej-1")
    ok(code == 400, "a batch id matching --reject-pattern gets 400", code)
    lines = a.posts_of("rej-1")
    ok(a.status("rej-1") == "UNKNOWN" and len(lines) == 1 and lines[0]["result"] == "rejected",
       "a rejected POST is logged and not applied", lines)

    # --- 503 and 429 windows -----------------------------------------------
    for fault, code_want, bid in (("fail_503_for", 503, "w503"), ("fail_429_for", 429, "w429")):
        a.control(**{fault: 60})
        code, _ = a.post("svc-w", bid)
        ok(code == code_want, "in a %s window a POST gets %d" % (fault, code_want), code)
        code, _ = a.sawtooth("a1")
        ok(code == code_want, "in a %s window a status query gets %d" % (fault, code_want), code)
        ok(a.stats() is not None, "/stats answers during a %s window" % fault)
        code, _ = a.control(**{fault: 0})
        ok(code == 200 and a.status(bid) == "UNKNOWN",
           "control ends the %s window; the refused POST was not applied" % fault)
        code, body = a.post("svc-w", bid)
        ok(code == 202 and body["result"] == "accepted", "after the window the POST is accepted", body)
        lines = [e["result"] for e in a.posts_of(bid)]
        ok(lines == [str(code_want), "accepted"], "the log shows %d then accepted" % code_want, lines)
        a.control(**{fault: 0.5})
        ok(poll(lambda: a.sawtooth("a1")[0] == 200), "a short %s window ends by itself" % fault)
    a.control(fail_503_for=60, fail_429_for=60)
    code, _ = a.sawtooth("a1")
    ok(code == 503, "a 503 window wins over a 429 window", code)
    a.control(clear=True)
    ok(a.sawtooth("a1")[0] == 200, "control clear ends every window")

    # --- stalls: applied after the hold only if the client stayed -----------
    code, body = a.control(stall_for=60, stall_seconds=1.5)
    ok(code == 200 and "stall_for" in body["windows"], "control opens a stall window", body)
    code, _ = a.post("svc-s", "st-1", timeout=0.3)
    stalls += 1
    ok(code == "timeout", "a client with a shorter timeout than the hold times out", code)
    held = {}

    def get_held():
        held["get"] = timed(a.sawtooth, "a1", timeout=10)
    getter = threading.Thread(target=get_held)
    getter.start()
    (code, body), secs = timed(a.post, "svc-s", "st-2", timeout=10)
    getter.join(30)
    stalls += 2
    ok(code == 202 and body["result"] == "accepted" and secs >= 1.5,
       "a patient client's stalled POST is answered after the hold and applied", (code, body, secs))
    (gcode, gdata), gsecs = held.get("get", ((None, b""), 0))
    ok(gcode == 200 and json.loads(gdata)["data"][0]["status"] == "COMMITTED" and gsecs >= 1.5,
       "a stalled status query is answered normally after the hold", (gcode, gdata, gsecs))
    a.control(stall_for=0)
    lines = poll(lambda: a.posts_of("st-1"))
    ok(lines and [e["result"] for e in lines] == ["stalled"] and lines[0]["stalled"] == 1.5,
       "the timed-out client's POST is logged stalled", lines)
    ok(a.status("st-1") == "UNKNOWN", "and not applied (stall_apply after)")
    lines = a.posts_of("st-2")
    ok(len(lines) == 1 and lines[0]["result"] == "accepted" and lines[0]["stalled"] == 1.5,
       "the applied stalled POST's log line carries the hold", lines)

    a.control(stall_for=60, stall_apply="before")
    code, _ = a.post("svc-s", "sb-1", timeout=0.3)
    stalls += 1
    ok(code == "timeout", "stall_apply before: the client times out too", code)
    a.control(stall_for=0)
    ok(a.status("sb-1") in ("PENDING", "COMMITTED"),
       "stall_apply before: the POST was applied though its answer was lost")
    code, body = a.post("svc-s", "sb-1", attempt=2)
    ok(code == 202 and body["result"] == "duplicate", "its retry is a duplicate", body)
    ok(poll(lambda: [e for e in a.events() if e["event"] == "unanswered"
                     and e["batch_id"] == "sb-1"]),
       "the lost answer is logged unanswered")

    # --- malformed status bodies -------------------------------------------
    a.control(malformed_for=60, malformed_kind="cycle")
    bodies = [a.sawtooth("a1") for _ in range(3)]
    ok([c for c, _ in bodies] == [200, 200, 200], "in a malformed window status queries get 200",
       bodies)
    kinds = []
    for _, data in bodies:
        try:
            parsed = json.loads(data)
            kinds.append("shape" if not isinstance(parsed.get("data"), list) else "fine")
        except ValueError:
            kinds.append("not json")
    ok(kinds == ["not json", "not json", "shape"],
       "malformed bodies cycle: cut JSON, not JSON, wrong shape", bodies)
    code, data = a.request("GET", "/splinter/batch_statuses?ids=a1")
    ok(code == 200 and not_json_or_wrong_shape(data, "splinter"),
       "splinter status queries get malformed bodies too", data)
    a.control(malformed_kind="shape")
    code, data = a.request("GET", "/splinter/batch_statuses?ids=a1")
    ok(code == 200 and not_json_or_wrong_shape(data, "splinter") and json.loads(data) is not None,
       "malformed_kind shape: valid JSON of the wrong shape", data)
    code, body = a.post("svc-m", "mal-1")
    ok(code == 202 and body["result"] == "accepted", "POSTs are not affected by a malformed window")
    a.control(malformed_for=0)
    ok(a.status("a1") == "COMMITTED", "after the malformed window statuses are well formed")

    # --- control and routing errors ----------------------------------------
    code, _ = a.request("POST", "/control", b"not json")
    ok(code == 400, "control refuses a body that is not JSON", code)
    code, _ = a.control(fail_503_for=-1)
    ok(code == 400, "control refuses a negative window", code)
    code, _ = a.control(bogus=1)
    ok(code == 400, "control refuses an unknown key", code)
    ok(a.sawtooth("a1")[0] == 200, "a refused control changes nothing")
    code, _ = a.request("GET", "/nowhere")
    ok(code == 404, "an unknown path answers 404", code)

    # --- stats -------------------------------------------------------------
    ok(poll(lambda: (a.stats() or {}).get("pending") == 1),
       "every batch but slow-1 reaches a final status")
    st = a.stats()
    n = a.counts
    want = {
        "posts": n["posts"],
        "accepted": 16,        # slow-1 a1-3 b1 b2 slow-2 h1 "b 1,2" inv-1 ctl-1 w503 w429 st-2 sb-1 mal-1
        "duplicates": 2,       # a1, sb-1
        "committed": 13,       # all but inv-1, ctl-1 and slow-1
        "invalid": 2,
        "rejected": 2,         # rej-1, the POST without a batch id
        "503s": n.get(503, 0),
        "429s": n.get(429, 0),
        "stalls": stalls,
        "pending": 1,
        "batches": 16,
    }
    got = {k: st.get(k) for k in want}
    ok(got == want, "/stats counts exactly what happened", {"got": got, "want": want})

    # --- the log -----------------------------------------------------------
    ev = a.events()
    ok([e["seq"] for e in ev] == list(range(1, len(ev) + 1))
       and all(isinstance(e["t"], float) for e in ev),
       "log lines are JSON with seq 1, 2, ... and a wall time")
    results = {e["result"] for e in ev if e["event"] == "post"}
    ok(results == {"accepted", "duplicate", "503", "429", "rejected", "stalled"},
       "post lines carry every result", results)
    queries = [e for e in ev if e["event"] == "status_query"]
    ok({e["dialect"] for e in queries} == {"sawtooth", "splinter"}
       and any(e["ids"] == 3 for e in queries)
       and {e["result"] for e in queries} >= {"ok", "503", "429", "malformed"},
       "status_query lines carry dialect, id count and result")
    ctl = [e for e in ev if e["event"] == "control"]
    ok(any(e.get("set") == {"invalid": ["ctl-1"]} for e in ctl)
       and sum(1 for e in ctl if "error" in e) == 3,
       "control lines carry what was set, or the error")
    order = {}
    for e in ev:
        if e["event"] == "post" and e["result"] == "accepted":
            order.setdefault(e["service_id"], []).append(e["batch_id"])
    ok(order["svc-a"] == ["a1", "a2", "a3"] and order["svc-b"] == ["b2", "b1"],
       "accepted post lines in seq order give each service's arrival order", order)

    # --- stopping ----------------------------------------------------------
    rc = a.stop(signal.SIGTERM)
    ok(rc == 0, "SIGTERM stops the ledger, exit status 0", rc)
    last = a.events()[-1]
    ok(last["event"] == "stop" and last["reason"] == "signal" and last["signal"] == "SIGTERM",
       "the log ends with a stop event", last)

    # --- check_log.py ------------------------------------------------------
    good = write_expected("good.tsv", [("svc-a", "a1"), ("svc-a", "a2"), ("svc-a", "a3")])
    bad = write_expected("bad.tsv", [("svc-a", "a1"), ("svc-a", "a2"), ("svc-a", "a3"),
                                     ("svc-b", "b1"), ("svc-b", "b2")])
    skip = write_expected("skip.tsv", [("svc-a", "a1"), ("svc-a", "a1x"), ("svc-a", "a2"),
                                       ("svc-a", "a3")])
    slow = write_expected("slow.tsv", [("svc-slow", "slow-1"), ("svc-slow", "slow-2")])
    rc, out, err = run_check(a.log)
    ok(rc == 0 and "service svc-a: 3 accepted, 1 duplicates, 0 rejected\n  a1 a2 a3\n" in out,
       "check_log prints each service's arrival order and duplicates", out + err)
    rc, out, err = run_check("--json", a.log)
    js = json.loads(out) if rc == 0 else {}
    svcs = js.get("services", {})
    ok(svcs.get("svc-a", {}).get("order") == ["a1", "a2", "a3"]
       and svcs["svc-a"]["duplicates"] == 1 and svcs["svc-s"]["duplicate_batches"] == {"sb-1": 1}
       and svcs["svc-b"]["order"] == ["b2", "b1"] and svcs["svc-r"]["rejected"] == ["rej-1"]
       and js["violations"] == [],
       "check_log --json emits orders, duplicate counts, rejections", out + err)
    rc, out, err = run_check("--expected", good, a.log)
    ok(rc == 0 and "violations: 0" in out, "check_log: a clean order passes (exit 0)", out + err)
    rc, out, err = run_check("--json", "--expected", bad, a.log)
    js = json.loads(out) if out else {}
    ok(rc == 1 and [(v["kind"], v["service_id"], v["batch_id"]) for v in js.get("violations", [])]
       == [("order", "svc-b", "b2")],
       "check_log: a swapped pair is an order violation (exit 1)", out + err)
    rc, out, err = run_check("--expected", bad, a.log)
    ok(rc == 1 and "order: service svc-b: batch b2 arrived" in out and "before b1" in out,
       "check_log prints the violation", out)
    rc, out, err = run_check("--json", "--require-all", "--expected", skip, a.log)
    js = json.loads(out) if out else {}
    ok(rc == 1 and [(v["kind"], v["batch_id"]) for v in js.get("violations", [])]
       == [("order", "a2"), ("missing", "a1x")],
       "check_log: a skipped batch is an order violation, and missing with --require-all",
       out + err)
    rc, out, err = run_check("--json", "--one-in-flight", "--expected", slow, a.log)
    js = json.loads(out) if out else {}
    ok(rc == 1 and [(v["kind"], v["batch_id"]) for v in js.get("violations", [])]
       == [("overlap", "slow-2")],
       "check_log --one-in-flight: a batch arriving before its predecessor is final", out + err)
    rc, out, err = run_check("--one-in-flight", "--expected", good, a.log)
    ok(rc == 0, "check_log --one-in-flight: one batch at a time passes", out + err)

    # --- B: faults set by start flags ---------------------------------------
    b = Ledger("b", "--fail-503-for", "60", "--fail-429-for", "60", "--stall-for", "60",
               "--stall-seconds", "0.5", "--malformed-for", "60", "--malformed-kind", "garbage",
               "--invalid", "pre-1,pre-2", "--commit-delay", "0", "--max-lifetime", "120")
    ledgers.append(b)
    if ok(b.wait_port(), "ledger B starts with every fault flag"):
        code, _ = b.post("svc-p", "pre-1")
        ok(code == 503, "--fail-503-for: 503 from the start", code)
        b.control(fail_503_for=0)
        code, _ = b.post("svc-p", "pre-1")
        ok(code == 429, "--fail-429-for: 429 from the start", code)
        b.control(fail_429_for=0)
        (code, data), secs = timed(b.sawtooth, "pre-1", timeout=10)
        ok(code == 200 and secs >= 0.5 and not_json_or_wrong_shape(data, "sawtooth"),
           "--stall-for, --stall-seconds, --malformed-for, --malformed-kind from the start",
           (code, data, secs))
        b.control(stall_for=0, malformed_for=0)
        code, _ = b.post("svc-p", "pre-1")
        ok(code == 202 and poll(lambda: b.status("pre-1") == "INVALID"),
           "--invalid: the named batch ends INVALID")
        rc = b.stop(signal.SIGINT)
        last = b.events()[-1]
        ok(rc == 0 and last["event"] == "stop" and last["signal"] == "SIGINT",
           "SIGINT stops the ledger, exit status 0", (rc, last))

    # --- C: stops by itself -------------------------------------------------
    ok(c.wait_port(), "ledger C starts")
    try:
        rc = c.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = None
    last = c.events()[-1] if os.path.exists(c.log) else None
    ok(rc == 0 and last and last["event"] == "stop" and last["reason"] == "max-lifetime",
       "the ledger stops by itself at --max-lifetime, exit status 0", (rc, last))


ledgers = []
try:
    suite(ledgers)
except Exception as exc:  # a broken step must not leave ledgers behind
    import traceback
    ok(False, "the ledger suite ran to its end", traceback.format_exc())
finally:
    for led in ledgers:
        led.kill()
sys.exit(1 if failures else 0)
EOF
exit "$rc"
