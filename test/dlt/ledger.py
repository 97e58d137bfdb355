#!/usr/bin/env python3
"""test/dlt/ledger.py: a test ledger (a stand-in DLT) for gridha.

gridha's tests, its demo and its fault harness submit batches here over HTTP,
the way a gridha worker submits to a real ledger, and read back what arrived
and in which order. Python 3 standard library only.

Words used here:
  batch          one POST: a service_id, a batch_id (the key: batch ids are
                 taken to be globally unique), the epoch and attempt gridha
                 sent, and the payload (only its size is kept).
  accepted       the first POST of a batch id; the batch is PENDING until
                 --commit-delay has passed, then COMMITTED, or INVALID when
                 its id matches --invalid-pattern or was named invalid.
  duplicate      a later POST of a known batch id: answered 202, counted and
                 logged, never applied again (the commit time does not move).
  dialect        the status query's shape: "sawtooth" (GET /batch_statuses)
                 or "splinter" (GET /splinter/batch_statuses).
  fault window   a time span during which every request gets 503 or 429, is
                 held (a stall), or status queries get a malformed body.
                 Windows are set by flags at start and by POST /control.
  hold           how long a stalled request waits before being answered.

Endpoints (127.0.0.1 only):
  POST /batches/<service_id>/<batch_id>    path segments URL-decoded
  POST /batches                            ids from X-Gridha-Service-Id and
                                           X-Gridha-Batch-Id
      Both read X-Gridha-Epoch and X-Gridha-Attempt, answer 202 and a JSON
      body {"result": "accepted"|"duplicate", "status": ..., ...}; 400 when
      the batch id matches --reject-pattern or an id is missing.
  GET /batch_statuses?id=a,b               {"data": [{"id", "status"}]}:
                                           PENDING COMMITTED INVALID UNKNOWN
  GET /splinter/batch_statuses?ids=a,b     [{"id", "status": {"statusType",
                                           "message": []}}]: Pending
                                           Committed Invalid Unknown
      Ids are comma-separated, each URL-encoded ('+' stays a plus sign).
  POST /control                            a JSON object, any of:
      fail_503_for, fail_429_for, malformed_for, stall_for   window length
                                           in seconds from now (0 ends it)
      stall_seconds    the hold of a stalled request
      stall_apply      "after" (default): a stalled POST is applied after the
                       hold, and only when its client is still connected (a
                       client that timed out has sent nothing: the batch
                       stays unknown, logged with result "stalled");
                       "before": applied on arrival, only the answer is held
                       (a client that times out has lost the answer, and its
                       retry is a duplicate)
      malformed_kind   "cycle" (default: truncated, garbage, shape in turn),
                       "truncated" (cut JSON), "garbage" (not JSON), "shape"
                       (JSON of the wrong shape)
      invalid          a list of batch ids that end INVALID instead of
                       COMMITTED (unless already final)
      commit_delay     the commit delay of batches accepted from now on
      clear            true: end every fault window
  GET /stats                               counts: posts (every POST to
      /batches), accepted, duplicates, committed, invalid, rejected (400s),
      503s, 429s, stalls (requests held), status_queries, malformed,
      controls; and pending, batches, commit_delay, the open windows
  /control and /stats are never subject to faults. A 503 window wins over a
  429 window, which wins over a stall; malformed bodies are only for status
  queries.

The log (--log FILE, appended, "-" for stdout): one JSON object a line,
flushed per line, each with "seq" (1, 2, ... continuing an existing file),
"t" (wall time, Unix seconds) and "event":
  start        port, pid, commit_delay
  post         service_id, batch_id, epoch, attempt, bytes, result
               (accepted, duplicate, 503, 429, rejected, stalled); accepted
               lines carry service_seq (1, 2, ... per service: the arrival
               order), duplicates carry first_seq (the accepted line's seq),
               held ones carry stalled (the hold in seconds)
  committed    service_id, batch_id, after (seconds since accepted)
  invalid      service_id, batch_id, after, reason (pattern or control)
  unanswered   a POST applied before a hold whose client had gone
  status_query dialect, ids (how many), result (ok, 503, 429, malformed,
               stalled: the client had gone)
  control      the settings applied, or error
  stop         reason (signal or max-lifetime), signal
Per-service arrival order: the post lines with result "accepted", in seq
order, grouped by service_id (check_log.py does this and more). In Python:
  order = {}
  for e in map(json.loads, open(log)):
      if e["event"] == "post" and e["result"] == "accepted":
          order.setdefault(e["service_id"], []).append(e["batch_id"])
In psql (the odd QUOTE and DELIMITER keep every line whole):
  CREATE TABLE ledger_log (e jsonb);
  \\copy ledger_log FROM 'ledger.log' WITH (FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')
  SELECT e->>'service_id', e->>'batch_id' FROM ledger_log
   WHERE e->>'event' = 'post' AND e->>'result' = 'accepted'
   ORDER BY e->>'service_id', (e->>'seq')::bigint;

Usage:
  ledger.py --port 0 --port-file /tmp/p --log /tmp/ledger.log
The ledger stops by itself after --max-lifetime seconds, and on SIGTERM or
SIGINT; either way it logs "stop" and exits 0. It keeps everything in
memory: restarted on the same log, it continues the seq numbers but has
forgotten every batch (their statuses are UNKNOWN, a re-POST is accepted).
"""

import argparse
import heapq
import json
import os
import re
import select
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote, urlsplit

SPLINTER_WORDS = {
    "PENDING": "Pending",
    "COMMITTED": "Committed",
    "INVALID": "Invalid",
    "UNKNOWN": "Unknown",
}
WINDOWS = ("fail_503", "fail_429", "stall", "malformed")
MALFORMED_KINDS = ("truncated", "garbage", "shape")
STAT_NAMES = ("posts", "accepted", "duplicates", "committed", "invalid",
              "rejected", "503s", "429s", "stalls", "status_queries",
              "malformed", "controls")


class BadRequest(Exception):
    """BadRequest: a request the ledger refuses with 400 and this message."""


class EventLog:
    """EventLog: the JSON-lines log, numbered and flushed line by line."""

    def __init__(self, path):
        self.lock = threading.Lock()
        self.seq = 0
        self.fh = None
        if path == "-":
            self.fh = sys.stdout
        elif path:
            self.seq = EventLog.last_seq(path)
            self.fh = open(path, "a", encoding="utf-8")

    @staticmethod
    def last_seq(path):
        """last_seq: the highest seq in an existing log, so that seq keeps
        growing across restarts of the ledger on one file."""
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - 65536))
                lines = fh.read().splitlines()
        except FileNotFoundError:
            return 0
        for line in reversed(lines):
            try:
                return int(json.loads(line)["seq"])
            except (ValueError, KeyError, TypeError):
                continue
        return 0

    def write(self, event, **fields):
        """write: log one event; returns its seq."""
        with self.lock:
            self.seq += 1
            record = {"seq": self.seq, "t": round(time.time(), 6),
                      "event": event}
            record.update(fields)
            if self.fh is not None:
                self.fh.write(json.dumps(record, separators=(",", ":")) + "\n")
                self.fh.flush()
            return self.seq

    def close(self):
        """close: end the log; later events (a connection still finishing
        when the ledger stops) are counted but not written."""
        with self.lock:
            if self.fh is not None and self.fh is not sys.stdout:
                self.fh.close()
            self.fh = None


class Batch:
    """Batch: what the ledger keeps of an accepted batch."""

    __slots__ = ("service_id", "batch_id", "status", "accepted_at", "seq")

    def __init__(self, service_id, batch_id, accepted_at, seq):
        self.service_id = service_id
        self.batch_id = batch_id
        self.status = "PENDING"
        self.accepted_at = accepted_at
        self.seq = seq


class Ledger:
    """Ledger: the batches, their commit schedule, the fault windows and the
    counts. One lock guards it all; events are logged under that lock, so the
    log's seq order is the order in which things were applied."""

    def __init__(self, args, log):
        self.log = log
        self.cond = threading.Condition()
        self.stopping = threading.Event()
        self.batches = {}
        self.service_counts = {}
        self.schedule = []          # heap of (due, n, batch_id)
        self.scheduled = 0
        self.commit_delay = args.commit_delay
        self.invalid_ids = set(args.invalid)
        self.invalid_re = re.compile(args.invalid_pattern) if args.invalid_pattern else None
        self.reject_re = re.compile(args.reject_pattern) if args.reject_pattern else None
        self.until = dict.fromkeys(WINDOWS, 0.0)
        self.stall_seconds = args.stall_seconds
        self.stall_apply = args.stall_apply
        self.malformed_kind = args.malformed_kind
        self.malformed_n = 0
        self.stats = dict.fromkeys(STAT_NAMES, 0)
        now = time.monotonic()
        for name, secs in (("fail_503", args.fail_503_for),
                           ("fail_429", args.fail_429_for),
                           ("stall", args.stall_for),
                           ("malformed", args.malformed_for)):
            if secs > 0:
                self.until[name] = now + secs

    # --- commits -----------------------------------------------------------

    def settle(self):
        """settle: give every batch whose commit delay has passed its final
        status, logging it. Called with the lock held, by the commit thread
        and before every status answer, so no answer is ever behind."""
        now = time.monotonic()
        while self.schedule and self.schedule[0][0] <= now:
            _, _, batch_id = heapq.heappop(self.schedule)
            batch = self.batches[batch_id]
            if batch.status != "PENDING":
                continue
            reason = None
            if batch_id in self.invalid_ids:
                reason = "control"
            elif self.invalid_re is not None and self.invalid_re.search(batch_id):
                reason = "pattern"
            after = round(now - batch.accepted_at, 6)
            if reason is None:
                batch.status = "COMMITTED"
                self.stats["committed"] += 1
                self.log.write("committed", service_id=batch.service_id,
                               batch_id=batch_id, after=after)
            else:
                batch.status = "INVALID"
                self.stats["invalid"] += 1
                self.log.write("invalid", service_id=batch.service_id,
                               batch_id=batch_id, after=after, reason=reason)

    def commit_loop(self):
        """commit_loop: the commit thread; settles batches as they fall due
        until the ledger stops."""
        with self.cond:
            while not self.stopping.is_set():
                self.settle()
                wait = None
                if self.schedule:
                    wait = max(0.001, self.schedule[0][0] - time.monotonic())
                self.cond.wait(wait)

    def stop(self):
        """stop: end the commit thread and every hold."""
        self.stopping.set()
        with self.cond:
            self.cond.notify_all()

    # --- faults ------------------------------------------------------------

    def gate(self):
        """gate: the fault a request arriving now meets: "503", "429",
        "stall" or None (malformed bodies are decided by status_body)."""
        now = time.monotonic()
        with self.cond:
            if now < self.until["fail_503"]:
                self.stats["503s"] += 1
                return "503"
            if now < self.until["fail_429"]:
                self.stats["429s"] += 1
                return "429"
            if now < self.until["stall"]:
                self.stats["stalls"] += 1
                return "stall"
        return None

    def windows(self):
        """windows: the seconds left of each open fault window."""
        now = time.monotonic()
        return {name + "_for": round(until - now, 3)
                for name, until in self.until.items() if until > now}

    def control(self, body):
        """control: apply a POST /control body; raises BadRequest and
        changes nothing when any part of it is wrong."""
        try:
            req = json.loads(body.decode("utf-8") or "null")
        except (UnicodeDecodeError, ValueError) as exc:
            raise BadRequest("control body is not JSON: %s" % exc) from None
        if not isinstance(req, dict) or not req:
            raise BadRequest("control body must be a non-empty JSON object")
        known = {"fail_503_for", "fail_429_for", "stall_for", "malformed_for",
                 "stall_seconds", "stall_apply", "malformed_kind", "invalid",
                 "commit_delay", "clear"}
        unknown = sorted(set(req) - known)
        if unknown:
            raise BadRequest("unknown control keys: %s" % ", ".join(unknown))
        for key in ("fail_503_for", "fail_429_for", "stall_for",
                    "malformed_for", "stall_seconds", "commit_delay"):
            if key in req:
                val = req[key]
                if isinstance(val, bool) or not isinstance(val, (int, float)) or val < 0:
                    raise BadRequest("%s must be a number of seconds >= 0" % key)
        if "stall_apply" in req and req["stall_apply"] not in ("after", "before"):
            raise BadRequest('stall_apply must be "after" or "before"')
        if "malformed_kind" in req and req["malformed_kind"] not in ("cycle",) + MALFORMED_KINDS:
            raise BadRequest("malformed_kind must be cycle, truncated, garbage or shape")
        invalid = req.get("invalid", [])
        if not isinstance(invalid, list) or not all(isinstance(i, str) and i for i in invalid):
            raise BadRequest("invalid must be a list of batch ids")
        if "clear" in req and not isinstance(req["clear"], bool):
            raise BadRequest("clear must be true or false")

        now = time.monotonic()
        already_final = []
        with self.cond:
            if req.get("clear"):
                self.until = dict.fromkeys(WINDOWS, 0.0)
            for name in WINDOWS:
                if name + "_for" in req:
                    self.until[name] = now + req[name + "_for"]
            self.stall_seconds = req.get("stall_seconds", self.stall_seconds)
            self.stall_apply = req.get("stall_apply", self.stall_apply)
            if "malformed_kind" in req:
                self.malformed_kind = req["malformed_kind"]
                self.malformed_n = 0
            self.commit_delay = req.get("commit_delay", self.commit_delay)
            for batch_id in invalid:
                batch = self.batches.get(batch_id)
                if batch is not None and batch.status != "PENDING":
                    already_final.append(batch_id)
                else:
                    self.invalid_ids.add(batch_id)
            self.stats["controls"] += 1
            self.log.write("control", set=req, already_final=already_final)
            return {"ok": True, "windows": self.windows(),
                    "already_final": already_final}

    # --- batches -----------------------------------------------------------

    def post(self, service_id, batch_id, epoch, attempt, nbytes, extra):
        """post: apply one POST that passed the fault gate; returns the HTTP
        code and the JSON answer. A duplicate changes nothing but counts."""
        with self.cond:
            self.stats["posts"] += 1
            fields = dict(service_id=service_id, batch_id=batch_id,
                          epoch=epoch, attempt=attempt, bytes=nbytes)
            fields.update(extra)
            if self.reject_re is not None and self.reject_re.search(batch_id):
                self.stats["rejected"] += 1
                self.log.write("post", **fields, result="rejected",
                               reason="reject-pattern")
                return 400, {"error": "batch rejected by the ledger",
                             "batch_id": batch_id}
            batch = self.batches.get(batch_id)
            if batch is not None:
                self.stats["duplicates"] += 1
                if batch.service_id != service_id:
                    fields["first_service_id"] = batch.service_id
                self.log.write("post", **fields, result="duplicate",
                               first_seq=batch.seq)
                result = "duplicate"
            else:
                self.stats["accepted"] += 1
                n = self.service_counts.get(service_id, 0) + 1
                self.service_counts[service_id] = n
                seq = self.log.write("post", **fields, result="accepted",
                                     service_seq=n)
                now = time.monotonic()
                batch = Batch(service_id, batch_id, now, seq)
                self.batches[batch_id] = batch
                self.scheduled += 1
                heapq.heappush(self.schedule,
                               (now + self.commit_delay, self.scheduled, batch_id))
                self.settle()
                self.cond.notify_all()
                result = "accepted"
            return 202, {"result": result, "service_id": batch.service_id,
                         "batch_id": batch_id, "status": batch.status,
                         "link": "/batch_statuses?id=" + quote(batch_id, safe="")}

    def refuse(self, verdict, service_id, batch_id, epoch, attempt, nbytes, extra):
        """refuse: count and log a POST that was not applied: answered 503,
        429 or 400 (missing ids), or stalled for a client that had gone."""
        with self.cond:
            self.stats["posts"] += 1
            if verdict == "rejected":
                self.stats["rejected"] += 1
            self.log.write("post", service_id=service_id, batch_id=batch_id,
                           epoch=epoch, attempt=attempt, bytes=nbytes,
                           result=verdict, **extra)

    def note(self, event, **fields):
        """note: log an event under the ledger's lock."""
        with self.cond:
            self.log.write(event, **fields)

    def statuses(self, ids):
        """statuses: the current status word of each id, in the order given."""
        with self.cond:
            self.settle()
            return [(i, self.batches[i].status if i in self.batches else "UNKNOWN")
                    for i in ids]

    def status_query(self, dialect, ids, result):
        with self.cond:
            self.stats["status_queries"] += 1
            if result == "malformed":
                self.stats["malformed"] += 1
            self.log.write("status_query", dialect=dialect, ids=len(ids),
                           result=result)

    def malformed_body(self, ids):
        """malformed_body: a 200 body a status client must refuse."""
        with self.cond:
            kind = self.malformed_kind
            if kind == "cycle":
                kind = MALFORMED_KINDS[self.malformed_n % len(MALFORMED_KINDS)]
                self.malformed_n += 1
        first = ids[0] if ids else ""
        if kind == "truncated":
            return ('{"data":[{"id":%s,"sta' % json.dumps(first)).encode()
        if kind == "garbage":
            return b"<html><body>ledger overloaded</body></html>\n"
        return b'{"data":"unavailable"}'

    def stats_body(self):
        with self.cond:
            body = dict(self.stats)
            body["pending"] = sum(1 for b in self.batches.values()
                                  if b.status == "PENDING")
            body["batches"] = len(self.batches)
            body["commit_delay"] = self.commit_delay
            body["windows"] = self.windows()
            return body


class Handler(BaseHTTPRequestHandler):
    """Handler: one HTTP/1.1 connection (keep-alive) to the ledger."""

    protocol_version = "HTTP/1.1"
    server_version = "gridha-test-ledger/1.0"
    timeout = 120

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass

    @property
    def ledger(self):
        return self.server.ledger

    # --- plumbing ----------------------------------------------------------

    def read_body(self):
        """read_body: the request body (Content-Length or chunked)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def reply(self, code, obj=None, raw=None, headers=()):
        """reply: send a response; a client that has gone is not an error."""
        data = raw if raw is not None else json.dumps(obj).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def fault_reply(self, verdict):
        self.reply(int(verdict), {"error": "ledger fault window: %s" % verdict},
                   headers=[("Retry-After", "1")])

    def client_gone(self):
        """client_gone: true when the client has closed its end (a timed-out
        client does), as far as a non-blocking peek can tell."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def hold(self):
        """hold: wait out a stall; false when the ledger stopped meanwhile."""
        return not self.ledger.stopping.wait(self.ledger.stall_seconds)

    def route(self):
        """route: the URL-decoded path segments and the raw query string."""
        parts = urlsplit(self.path)
        segs = [unquote(s) for s in parts.path.split("/")[1:]]
        if segs and segs[-1] == "" and len(segs) > 1:
            segs.pop()
        return segs, parts.query

    # --- POST --------------------------------------------------------------

    def do_POST(self):  # pylint: disable=invalid-name
        body = self.read_body()
        segs, _ = self.route()
        if segs == ["control"]:
            try:
                self.reply(200, self.ledger.control(body))
            except BadRequest as exc:
                self.ledger.note("control", error=str(exc))
                self.reply(400, {"error": str(exc)})
            return
        if not segs or segs[0] != "batches":
            self.reply(404, {"error": "no such endpoint"})
            return
        self.post_batch(segs, body)

    def post_batch(self, segs, body):
        """post_batch: POST /batches[/<service_id>/<batch_id>]."""
        hdr = self.headers
        if len(segs) == 3:
            service_id, batch_id = segs[1], segs[2]
        elif len(segs) == 1:
            service_id = hdr.get("X-Gridha-Service-Id")
            batch_id = hdr.get("X-Gridha-Batch-Id")
        else:
            service_id = batch_id = None
        epoch = Handler.number(hdr.get("X-Gridha-Epoch"))
        attempt = Handler.number(hdr.get("X-Gridha-Attempt"))
        nbytes = len(body)
        if not service_id or not batch_id:
            self.ledger.refuse("rejected", service_id, batch_id, epoch, attempt,
                               nbytes, {"reason": "missing service or batch id"})
            self.reply(400, {"error": "missing service id or batch id",
                             "hint": "POST /batches/<service_id>/<batch_id>, or "
                                     "POST /batches with X-Gridha-Service-Id and "
                                     "X-Gridha-Batch-Id"})
            return
        extra = {}
        if len(segs) == 3 and hdr.get("X-Gridha-Batch-Id") not in (None, batch_id):
            extra["header_batch_id"] = hdr.get("X-Gridha-Batch-Id")

        verdict = self.ledger.gate()
        if verdict in ("503", "429"):
            self.ledger.refuse(verdict, service_id, batch_id, epoch, attempt,
                               nbytes, extra)
            self.fault_reply(verdict)
            return
        if verdict == "stall":
            extra["stalled"] = self.ledger.stall_seconds
            if self.ledger.stall_apply == "before":
                code, answer = self.ledger.post(service_id, batch_id, epoch,
                                                attempt, nbytes, extra)
                if not self.hold():
                    return
                if self.client_gone():
                    self.ledger.note("unanswered", service_id=service_id,
                                     batch_id=batch_id, stalled=extra["stalled"])
                    self.close_connection = True
                    return
                self.reply(code, answer)
                return
            if not self.hold():
                return
            if self.client_gone():
                self.ledger.refuse("stalled", service_id, batch_id, epoch,
                                   attempt, nbytes, extra)
                self.close_connection = True
                return
        code, answer = self.ledger.post(service_id, batch_id, epoch, attempt,
                                        nbytes, extra)
        self.reply(code, answer)

    @staticmethod
    def number(text):
        """number: a header as an integer when it is one, else as given."""
        if text is None:
            return None
        try:
            return int(text)
        except ValueError:
            return text

    # --- GET ---------------------------------------------------------------

    def do_GET(self):  # pylint: disable=invalid-name
        segs, query = self.route()
        if segs == ["stats"]:
            self.reply(200, self.ledger.stats_body())
        elif segs == ["batch_statuses"]:
            self.status_query("sawtooth", query, "id")
        elif segs == ["splinter", "batch_statuses"]:
            self.status_query("splinter", query, "ids")
        else:
            self.reply(404, {"error": "no such endpoint"})

    @staticmethod
    def query_ids(query, key):
        """query_ids: the ids of parameter key: split on commas first, then
        each URL-decoded, so an encoded comma stays inside its id."""
        ids = []
        for pair in query.split("&"):
            name, _, value = pair.partition("=")
            if unquote(name) == key:
                ids.extend(unquote(v) for v in value.split(",") if v)
        return ids

    def status_query(self, dialect, query, key):
        """status_query: GET batch statuses in either dialect."""
        ids = Handler.query_ids(query, key)
        if not ids:
            self.reply(400, {"error": "no batch ids",
                             "hint": "give ?%s=a,b,c" % key})
            return
        verdict = self.ledger.gate()
        if verdict in ("503", "429"):
            self.ledger.status_query(dialect, ids, verdict)
            self.fault_reply(verdict)
            return
        if verdict == "stall":
            if not self.hold():
                return
            if self.client_gone():
                self.ledger.status_query(dialect, ids, "stalled")
                self.close_connection = True
                return
        if time.monotonic() < self.ledger.until["malformed"]:
            self.ledger.status_query(dialect, ids, "malformed")
            self.reply(200, raw=self.ledger.malformed_body(ids))
            return
        found = self.ledger.statuses(ids)
        self.ledger.status_query(dialect, ids, "ok")
        if dialect == "sawtooth":
            self.reply(200, {"data": [{"id": i, "status": s} for i, s in found]})
        else:
            self.reply(200, [{"id": i, "status": {"statusType": SPLINTER_WORDS[s],
                                                   "message": []}}
                             for i, s in found])


class Server(ThreadingHTTPServer):
    """Server: the listening socket; one thread per connection."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, port, ledger):
        self.ledger = ledger
        super().__init__(("127.0.0.1", port), Handler)


def parse_args(argv):
    """parse_args: the command line."""
    p = argparse.ArgumentParser(
        description="A test ledger (DLT) for gridha: accepts batches over "
                    "HTTP, answers status queries, injects faults, logs events.")
    p.add_argument("--port", type=int, default=8008,
                   help="TCP port on 127.0.0.1; 0 lets the OS pick (default 8008)")
    p.add_argument("--port-file", help="write the real port here once listening")
    p.add_argument("--log", help='JSON-lines event log (appended; "-" for stdout)')
    p.add_argument("--commit-delay", type=float, default=0.2,
                   help="seconds from accepted to COMMITTED (default 0.2)")
    p.add_argument("--max-lifetime", type=float, default=600,
                   help="stop by itself after this many seconds; 0: never (default 600)")
    p.add_argument("--invalid-pattern", help="batch ids matching this regex (search) end INVALID")
    p.add_argument("--reject-pattern", help="POSTs of batch ids matching this regex get 400")
    p.add_argument("--invalid", action="append", default=[], metavar="ID[,ID...]",
                   help="batch ids that end INVALID (repeatable)")
    p.add_argument("--fail-503-for", type=float, default=0, metavar="SECONDS",
                   help="answer every request 503 for this long from start")
    p.add_argument("--fail-429-for", type=float, default=0, metavar="SECONDS",
                   help="answer every request 429 for this long from start")
    p.add_argument("--stall-for", type=float, default=0, metavar="SECONDS",
                   help="hold requests arriving within this long from start")
    p.add_argument("--stall-seconds", type=float, default=20,
                   help="how long a stalled request is held (default 20)")
    p.add_argument("--stall-apply", choices=("after", "before"), default="after",
                   help="apply a stalled POST after the hold if its client is still "
                        "there (after, default) or on arrival (before)")
    p.add_argument("--malformed-for", type=float, default=0, metavar="SECONDS",
                   help="status queries get malformed 200 bodies for this long from start")
    p.add_argument("--malformed-kind", choices=("cycle",) + MALFORMED_KINDS,
                   default="cycle", help="which malformed bodies (default cycle)")
    args = p.parse_args(argv)
    args.invalid = [i for arg in args.invalid for i in arg.split(",") if i]
    for name in ("commit_delay", "max_lifetime", "fail_503_for", "fail_429_for",
                 "stall_for", "stall_seconds", "malformed_for"):
        if getattr(args, name) < 0:
            p.error("--%s must be >= 0" % name.replace("_", "-"))
    for name in ("invalid_pattern", "reject_pattern"):
        try:
            if getattr(args, name):
                re.compile(getattr(args, name))
        except re.error as exc:
            p.error("--%s: %s" % (name.replace("_", "-"), exc))
    return args


def write_port_file(path, port):
    """write_port_file: write the port atomically, so a reader polling for
    the file never sees it half written."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write("%d\n" % port)
    os.replace(tmp, path)


def main(argv):
    args = parse_args(argv)
    log = EventLog(args.log)
    ledger = Ledger(args, log)
    try:
        server = Server(args.port, ledger)
    except OSError as exc:
        print("ledger.py: cannot listen on 127.0.0.1:%d: %s" % (args.port, exc),
              file=sys.stderr)
        return 1
    port = server.server_address[1]

    stop = threading.Event()
    why = {"reason": "max-lifetime"}

    def on_signal(signum, _frame):
        why["reason"] = "signal"
        why["signal"] = signal.Signals(signum).name
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    log.write("start", port=port, pid=os.getpid(), commit_delay=args.commit_delay,
              max_lifetime=args.max_lifetime)
    committer = threading.Thread(target=ledger.commit_loop, name="commits", daemon=True)
    committer.start()
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                               name="http", daemon=True)
    serving.start()
    if args.port_file:
        write_port_file(args.port_file, port)

    deadline = time.monotonic() + args.max_lifetime if args.max_lifetime > 0 else None
    while not stop.is_set():
        left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
        if left <= 0:
            break
        stop.wait(left)

    server.shutdown()
    ledger.stop()
    server.server_close()
    committer.join(timeout=5)
    with ledger.cond:
        log.write("stop", **why)
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
