#!/usr/bin/env bash
# test/suites/10_ledger.sh: the test ledger (test/dlt) against its contract.
#
# Starts test/dlt/ledger.py five times on ports the OS picks (--port 0) and
# drives it with python3's urllib (http.client where a redirect must not be
# followed or a header repeated): POST in both forms, idempotence, the commit
# delay, both status dialects, INVALID by pattern and by control, 400 by
# reject pattern, the 503, 429, stall and malformed windows (set by /control
# and by start flags), /stats, the log, check_log.py's order checks, the ways
# it stops (SIGTERM, SIGINT, --max-lifetime); then code windows (301 with its
# Location, 401 ... 502 in turn, POSTs only, GETs only), latency, 414 past
# max_url, 431 past max_header_bytes, and require_header (401 without the
# header or with another value; its value in no log line, /stats or answer).
#
# Words: "ledger A" is the main one; "B" starts with every fault flag set; "C"
# only has to stop by itself; "D" starts in a 404 code window and gets the
# rest by /control; "E" starts with --latency, --max-url, --max-header-bytes
# and --require-header. Waits are bounded polls, never fixed sleeps. The time
# bounds asserted are lower ones the ledger guarantees (a hold lasts at least
# its length, a commit comes at least --commit-delay after its POST, an
# answer comes at least the latency after its request), and one upper bound
# that checks a concurrency property, not speed: 10 POSTs sent together with
# a latency of 0.2 s are all answered within 1.5 s, where one after another
# would take 2 s.
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

# the plan: the TAP lines the checks below print
echo "1..172"
rc=0
python3 - "$REPO/test/dlt" "$WORK" <<'EOF' || rc=$?
import http.client
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

    def post(self, service_id, batch_id, epoch=1, attempt=1, headers=None, **kw):
        code, data = self.request(
            "POST", "/batches/%s/%s" % (service_id, batch_id), body=b"{}",
            headers=dict({"X-Gridha-Service-Id": service_id, "X-Gridha-Batch-Id": batch_id,
                          "X-Gridha-Epoch": str(epoch), "X-Gridha-Attempt": str(attempt)},
                         **(headers or {})),
            **kw)
        return code, (json.loads(data) if code in (202, 400) and data else None)

    def raw(self, method, path, body=None, headers=()):
        """raw: one request by http.client, which follows no redirect and
        may repeat a header: (code, response headers, body bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.putrequest(method, path, skip_accept_encoding=True)
            for name, value in headers:
                conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            return resp.status, resp.headers, resp.read()
        finally:
            conn.close()

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


def secret_free(path, *secrets):
    """secret_free: true when grep -F finds none of secrets in the file."""
    return all(subprocess.run(["grep", "-q", "-F", "-e", sec, path]).returncode == 1
               for sec in secrets)


def codes_latency_limits_auth(ledgers):
    """codes_latency_limits_auth: ledger D (code windows, latency, max_url,
    max_header_bytes, require_header, set by /control) and E (the same set
    by start flags)."""
    d = Ledger("d", "--fail-code", "404", "--fail-code-for", "60",
               "--fail-code-applies", "post", "--commit-delay", "0.05",
               "--max-lifetime", "120")
    ledgers.append(d)
    if not ok(d.wait_port(), "ledger D starts with --fail-code 404 --fail-code-for 60 "
                             "--fail-code-applies post"):
        return

    # --- code windows ------------------------------------------------------
    code, _ = d.post("svc-d", "d1")
    ok(code == 404, "in a 404 code window (start flags) a POST gets 404", code)
    ok(d.status("d1") == "UNKNOWN",
       "fail_code_applies post: a status GET is served during the window; "
       "the 404'd POST was not applied")
    code, body = d.control(fail_code_for=0)
    ok(code == 200 and "fail_code_for" not in body["windows"], "control ends the code window",
       body)
    code, body = d.post("svc-d", "d1")
    ok(code == 202 and body["result"] == "accepted", "after the code window the POST is accepted",
       body)
    lines = [e["result"] for e in d.posts_of("d1")]
    ok(lines == ["404", "accepted"], "the log shows 404 then accepted", lines)

    code, body = d.control(fail_code=301, fail_code_for=60, fail_code_applies="both")
    ok(code == 200 and "fail_code_for" in body["windows"], "control opens a 301 window", body)
    code, hdrs, _ = d.raw("POST", "/batches/svc-d/d2", b"{}")
    want = "https://127.0.0.1:%d/batches/svc-d/d2" % d.port
    ok(code == 301 and hdrs.get("Location") == want,
       "a 301 carries a Location header, an https URL of the same target",
       (code, hdrs.get("Location"), want))
    code, hdrs, _ = d.raw("GET", "/batch_statuses?id=d1")
    ok(code == 301 and (hdrs.get("Location") or "").startswith("https://"),
       "fail_code_applies both: a status GET gets the 301 too", code)

    seen = []
    for want_code in (401, 403, 404, 408, 414, 500, 502):
        d.control(fail_code=want_code)
        code, hdrs, _ = d.raw("POST", "/batches/svc-d/d2", b"{}")
        seen.append(code)
        if want_code == 401:
            ok(code == 401 and hdrs.get("WWW-Authenticate"),
               "a code window's 401 carries WWW-Authenticate", dict(hdrs))
        if want_code == 408:
            ok(code == 408 and (hdrs.get("Connection") or "").lower() == "close",
               "a code window's 408 closes the connection", dict(hdrs))
    ok(seen == [401, 403, 404, 408, 414, 500, 502],
       "successive controls change the code of the open window: 401 403 404 408 414 "
       "500 502 in turn", seen)
    code, _ = d.sawtooth("d2")
    ok(code == 502, "fail_code_applies both: a status GET gets the code in effect (502)", code)

    code, body = d.control(fail_code=500, fail_code_applies="get")
    ok(code == 200 and "fail_code_for" in body["windows"], "control narrows the window to GETs",
       body)
    code, _ = d.sawtooth("d1")
    ok(code == 500, 'fail_code_applies get: a status GET gets the code (500)', code)
    code, _ = d.request("GET", "/splinter/batch_statuses?ids=d1")
    ok(code == 500, "and a splinter status GET too", code)
    code, body = d.post("svc-d", "d2")
    ok(code == 202 and body["result"] == "accepted",
       "fail_code_applies get: POSTs are still accepted", body)
    code, body = d.control(fail_code_for=0)
    got = [d.sawtooth("d1,d2")[0],
           poll(lambda: d.status("d1") == "COMMITTED" and d.status("d2") == "COMMITTED")]
    ok(got == [200, True], "after the get window status GETs are served again", (got, body))
    lines = [e["result"] for e in d.posts_of("d2")]
    ok(lines == ["301", "401", "403", "404", "408", "414", "500", "502", "accepted"],
       "post lines carry each code as their result; nothing was applied before 'accepted'",
       lines)
    queries = [e["result"] for e in d.events() if e["event"] == "status_query"]
    ok(queries.count("301") == 1 and queries.count("500") == 2,
       "status_query lines carry the code as their result", queries)
    st = d.stats()
    got = {k: st.get(k) for k in ("fail_codes", "fail_code_counts", "accepted", "posts",
                                  "fail_code", "fail_code_applies")}
    ok(got == {"fail_codes": 13,
               "fail_code_counts": {"404": 2, "301": 2, "401": 1, "403": 1, "408": 1,
                                    "414": 1, "500": 3, "502": 2},
               "accepted": 2, "posts": 11, "fail_code": 500, "fail_code_applies": "get"},
       "/stats counts the code windows' answers, per code", got)

    code, _ = d.control(fail_code=200)
    ok(code == 400, "control refuses a fail_code outside 300-599", code)
    code, _ = d.control(fail_code_applies="put")
    ok(code == 400, "control refuses a fail_code_applies other than post, get, both", code)
    code, _ = d.control(latency=-1)
    ok(code == 400, "control refuses a negative latency", code)
    code, _ = d.control(max_url=1.5)
    ok(code == 400, "control refuses a max_url that is not a whole number", code)

    # --- latency -----------------------------------------------------------
    before = d.stats()["latency_waits"]
    code, body = d.control(latency=0.2)
    ok(code == 200, "control sets a latency of 0.2 s", body)
    (code, _), secs = timed(d.post, "svc-l", "l0")
    ok(code == 202 and secs >= 0.2, "with latency 0.2 a POST takes at least 0.2 s", (code, secs))
    (code, _), secs = timed(d.sawtooth, "l0")
    ok(code == 200 and secs >= 0.2, "and a status GET too", (code, secs))
    after = d.stats()["latency_waits"]
    ok(after - before == 2, "/stats counts latency_waits: the POST and the GET, not /control "
                            "or /stats", (before, after))

    results = {}
    barrier = threading.Barrier(10)

    def post_one(i):
        barrier.wait(10)
        results[i] = d.post("svc-l", "lc%d" % i, timeout=10)[0]
    threads = [threading.Thread(target=post_one, args=(i,)) for i in range(10)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    secs = time.monotonic() - t0
    ok(sorted(results.values()) == [202] * 10 and secs < 1.5,
       "concurrency: latency does not serialize requests: 10 concurrent POSTs with "
       "latency 0.2 s are all answered within 1.5 s (one after another takes >= 2 s)",
       (results, secs))
    lines = [e for e in d.events() if e["event"] == "post" and e["service_id"] == "svc-l"]
    ok(len(lines) == 11 and all(e.get("latency") == 0.2 for e in lines),
       "post lines carry the latency waited", lines[:2])
    d.control(latency=0)
    ok(d.stats()["latency"] == 0, "control ends the latency")

    # --- max_url and max_header_bytes ---------------------------------------
    code, body = d.control(max_url=200, max_header_bytes=1024)
    ok(code == 200, "control sets max_url 200 and max_header_bytes 1024", body)
    long_ids = ",".join("long-id-%03d" % i for i in range(20))
    code, data = d.sawtooth(long_ids)
    ok(code == 414, "a status GET whose target is over max_url gets 414", (code, data))
    ok(d.sawtooth("d1,d2")[0] == 200, "a short status GET is served")
    n_batches = d.stats()["batches"]
    code, _ = d.post("svc-u", "u" * 200)
    lines = [e["result"] for e in d.posts_of("u" * 200)]
    ok(code == 414 and lines == ["414"] and d.stats()["batches"] == n_batches,
       "a POST whose target is over max_url gets 414, not applied", (code, lines))
    pad = {"X-Pad": "p" * 1500}
    code, _ = d.sawtooth("d1", headers=pad)
    ok(code == 431, "a status GET whose header block is over max_header_bytes gets 431", code)
    code, _ = d.post("svc-u", "u1", headers=pad)
    ok(code == 431 and d.status("u1") == "UNKNOWN",
       "a POST whose header block is over max_header_bytes gets 431, not applied", code)
    code, _ = d.post("svc-u", "u1", headers={"X-Pad": "p" * 100})
    ok(code == 202, "a POST within both limits is accepted", code)
    ev = d.events()
    big = [(e["event"], e["result"], e.get("target_bytes", e.get("header_bytes")))
           for e in ev if "target_bytes" in e or "header_bytes" in e]
    ok([b[:2] for b in big] == [("status_query", "414"), ("post", "414"),
                                ("status_query", "431"), ("post", "431")]
       and big[0][2] > 200 and big[2][2] > 1024,
       "414 and 431 are logged with the size found", big)
    st = d.stats()
    got = {k: st.get(k) for k in ("414s", "431s", "max_url", "max_header_bytes")}
    ok(got == {"414s": 2, "431s": 2, "max_url": 200, "max_header_bytes": 1024},
       "/stats counts 414s and 431s", got)
    d.control(max_url=0, max_header_bytes=0)
    ok(d.sawtooth(long_ids, headers=pad)[0] == 200, "max_url 0 and max_header_bytes 0: no limits")

    # --- require_header ----------------------------------------------------
    secret = "Bearer s3cret-" + os.urandom(8).hex()
    wrong = "Bearer wr0ng-" + os.urandom(8).hex()
    code, body = d.control(require_header="Authorization: " + secret)
    ok(code == 200 and secret not in json.dumps(body), "control sets require_header", body)
    code, body = d.post("svc-r", "r1")
    ok(code == 401, "require_header: a POST without the header gets 401", code)
    code, body = d.post("svc-r", "r1", headers={"Authorization": wrong})
    ok(code == 401, "require_header: a POST with another value gets 401", code)
    code, _ = d.sawtooth("r1")
    ok(code == 401, "require_header: a status GET without it gets 401", code)
    code, body = d.post("svc-r", "r1", headers={"Authorization": secret})
    ok(code == 202 and body["result"] == "accepted",
       "require_header: a POST with the right value gets 202", body)
    code, data = d.sawtooth("r1", headers={"Authorization": wrong})
    ok(code == 401, "require_header: a status GET with another value gets 401", code)
    code, data = d.sawtooth("r1", headers={"Authorization": secret})
    ok(code == 200 and json.loads(data)["data"][0]["status"] in ("PENDING", "COMMITTED"),
       "require_header: a status GET with it is served", data)
    code, data = d.request("GET", "/splinter/batch_statuses?ids=r1",
                           headers={"Authorization": secret})
    ok(code == 200 and json.loads(data)[0]["id"] == "r1", "the splinter dialect too", data)
    code, data = d.request("POST", "/batches", b"x",
                           {"Authorization": secret, "X-Gridha-Service-Id": "svc-r",
                            "X-Gridha-Batch-Id": "r2"})
    ok(code == 202, "and POST /batches with the ids in headers", code)
    code, _, _ = d.raw("POST", "/batches/svc-r/r3", b"{}",
                       [("Authorization", secret), ("Authorization", wrong)])
    ok(code == 401, "require_header: the header given twice gets 401", code)
    lines = [(e["result"], e.get("header"), e.get("auth")) for e in d.posts_of("r1")]
    ok(lines == [("401", "Authorization", "missing"), ("401", "Authorization", "wrong"),
                 ("accepted", None, None)],
       "401s are logged with the header's name and missing or wrong", lines)
    st = d.stats()
    got = {k: st.get(k) for k in ("auth_failures", "missing_header", "wrong_header",
                                  "require_header")}
    ok(got == {"auth_failures": 5, "missing_header": 2, "wrong_header": 3,
               "require_header": "Authorization"},
       "/stats counts auth_failures (missing and wrong) and names the header", got)
    code, data = d.request("GET", "/stats")
    ok(code == 200 and secret.encode() not in data and wrong.encode() not in data,
       "/stats needs no header and holds no secret", data)
    code, body = d.control(require_header=None)
    ok(code == 200 and d.post("svc-r", "r4")[0] == 202 and d.stats()["require_header"] is None,
       "control require_header null clears it: a POST without it is accepted", body)
    d.control(require_header="Authorization: " + secret)
    code, body = d.control(require_header="")
    ok(code == 200 and d.post("svc-r", "r5")[0] == 202, 'require_header "" clears it too', body)
    code, body = d.control(require_header="Authorization " + secret)
    ok(code == 400 and secret not in json.dumps(body),
       "control refuses a require_header without a colon, without echoing it", body)
    ctl = [e.get("set", {}).get("require_header", "-") for e in d.events()
           if e["event"] == "control" and "require_header" in e.get("set", {})]
    ok(ctl == ["Authorization", None, "Authorization", None],
       "control lines name the required header, never its value", ctl)
    rc = d.stop(signal.SIGTERM)
    ok(rc == 0 and secret_free(d.log, secret, wrong, "s3cret", "wr0ng")
       and secret_free(os.path.join(WORK, "d.stderr"), "s3cret", "wr0ng"),
       "grep -F finds neither the secret nor the wrong value in ledger D's log or stderr", rc)
    rc, out, err = run_check("--json", d.log)
    js = json.loads(out) if rc == 0 else {}
    svcs = js.get("services", {})
    ok(js.get("totals", {}).get("refused") == 14
       and svcs.get("svc-d", {}).get("order") == ["d1", "d2"]
       and svcs.get("svc-r", {}).get("order") == ["r1", "r2", "r4", "r5"]
       and "u" * 200 not in json.dumps(svcs),
       "check_log totals the refused POSTs (codes, 401, 414, 431) and takes none for an arrival",
       out + err)

    # --- E: the same set by start flags -------------------------------------
    secret2 = "k3y-" + os.urandom(8).hex()
    e = Ledger("e", "--latency", "0.1", "--max-url", "100", "--max-header-bytes", "2048",
               "--require-header", "X-Ledger-Key: " + secret2, "--commit-delay", "0.05",
               "--max-lifetime", "120")
    ledgers.append(e)
    if ok(e.wait_port(), "ledger E starts with --latency, --max-url, --max-header-bytes, "
                         "--require-header"):
        first = e.events()[0]
        ok(first["event"] == "start" and first.get("require_header") == "X-Ledger-Key",
           "the start event names the required header", first)
        key = {"X-Ledger-Key": secret2}
        (code, _), secs = timed(e.post, "svc-e", "e1", headers=key)
        ok(code == 202 and secs >= 0.1, "--latency and --require-header: a POST with the key "
                                        "takes at least the latency, accepted", (code, secs))
        code, _ = e.post("svc-e", "e2")
        ok(code == 401, "--require-header: a POST without the key gets 401", code)
        code, _ = e.sawtooth(",".join(["e1"] * 40), headers=key)
        ok(code == 414, "--max-url: a long status GET gets 414", code)
        code, _ = e.sawtooth("e1", headers=dict(key, **{"X-Pad": "p" * 3000}))
        ok(code == 431, "--max-header-bytes: a large header block gets 431", code)
        code, _ = e.control(fail_code_for=5)
        ok(code == 400, "control refuses fail_code_for when no fail_code was ever set", code)
        st = e.stats()
        got = {k: st.get(k) for k in ("latency", "max_url", "max_header_bytes", "require_header",
                                      "auth_failures", "414s", "431s", "accepted")}
        ok(got == {"latency": 0.1, "max_url": 100, "max_header_bytes": 2048,
                   "require_header": "X-Ledger-Key", "auth_failures": 1, "414s": 1, "431s": 1,
                   "accepted": 1},
           "/stats shows the settings of the start flags", got)
        rc = e.stop(signal.SIGTERM)
        ok(rc == 0 and secret_free(e.log, secret2), "grep -F finds no key in ledger E's log", rc)

    for flags, what in ((["--require-header", "no-colon-" + secret2], "a --require-header "
                         "without a colon"),
                        (["--fail-code-for", "5"], "--fail-code-for without --fail-code"),
                        (["--fail-code", "200"], "a --fail-code outside 300-599")):
        proc = subprocess.run([sys.executable, LEDGER, "--port", "0"] + flags,
                              capture_output=True, text=True, timeout=30)
        ok(proc.returncode == 2 and secret2 not in proc.stderr + proc.stdout,
           "the ledger refuses %s (exit 2, nothing echoed of a secret)" % what,
           (proc.returncode, proc.stderr))


ledgers = []
try:
    suite(ledgers)
    codes_latency_limits_auth(ledgers)
except Exception as exc:  # a broken step must not leave ledgers behind
    import traceback
    ok(False, "the ledger suite ran to its end", traceback.format_exc())
finally:
    for led in ledgers:
        led.kill()
sys.exit(1 if failures else 0)
EOF
exit "$rc"
