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
                 held (a stall), or status queries get a malformed body; or,
                 in a code window, POSTs, status GETs or both get the HTTP
                 status code of fail_code. Windows are set by flags at start
                 and by POST /control.
  hold           how long a stalled request waits before being answered.
  drop           a request arriving in a drop window gets no answer: its
                 connection is reset (a ledger or proxy that sheds load).
  hang           a status GET arriving in a hang_status window is held,
                 unanswered, until the window ends (or the ledger stops),
                 then its connection is closed: a ledger that accepts
                 connections but never answers status polls.
  HTTP/1.0       with --http10 the ledger answers in HTTP/1.0 and closes
                 every connection after one answer (no keep-alive), as a
                 plain http.server does; --backlog sets its accept queue
                 (128 by default; Python's own default is 5).
  latency        a fixed wait before each POST to /batches and each status
                 GET is handled, whatever its answer; it is waited in the
                 request's own thread, so requests still overlap.
  admission      the checks a POST to /batches or a status GET meets before
                 any fault window, in this order: 414 when its target (path
                 and query) is longer than max_url bytes; 431 when its
                 header block (the header lines and the blank line after,
                 not the request line) is longer than max_header_bytes; 401
                 when require_header is set and the header is missing, given
                 twice, or has another value. Python's http.server itself
                 answers 431 to over 100 headers or a header line over 64 KiB,
                 and 414 to a request line over 64 KiB; those are not logged.
  secret         require_header's value. It is never written to the log,
                 /stats or an answer; only the header's name is.

Endpoints (127.0.0.1 only):
  POST /batches/<service_id>/<batch_id>    path segments URL-decoded
  POST /batches                            ids from X-Gridha-Service-Id and
                                           X-Gridha-Batch-Id
      Both read X-Gridha-Epoch and X-Gridha-Attempt, answer 202 and a JSON
      body {"result": "accepted"|"duplicate", "status": ..., ...}; 400 when
      the batch id matches --reject-pattern or an id is missing; 401, 414
      or 431 when admission refuses it; the code of a fault window.
  GET /batch_statuses?id=a,b               {"data": [{"id", "status"}]}:
                                           PENDING COMMITTED INVALID UNKNOWN
  GET /splinter/batch_statuses?ids=a,b     [{"id", "status": {"statusType",
                                           "message": []}}]: Pending
                                           Committed Invalid Unknown
      Ids are comma-separated, each URL-encoded ('+' stays a plus sign).
      Both answer 400 without ids, 401, 414 or 431 when admission refuses
      them, and the code of a fault window.
  POST /control                            a JSON object, any of:
      fail_503_for, fail_429_for, fail_code_for, malformed_for, stall_for,
      drop_for, hang_status_for
                       window length in seconds from now (0 ends it)
      fail_code        the HTTP status code (300 to 599) of the code window;
                       needed before fail_code_for can open one. Changing it
                       changes the answer of an open window, so codes can
                       follow each other by successive controls. A 301, 302,
                       303, 307 or 308 carries a Location header, an https
                       URL of this ledger and the same target; a 401 a
                       WWW-Authenticate header; a 408 closes the connection;
                       a 429 or 503 carries Retry-After (retry_after); a 304
                       has no body
      fail_code_applies  which requests the code window answers: "post"
                       (POSTs to /batches), "get" (status GETs) or "both"
                       (default); the others are served as usual
      latency          seconds waited before each POST and status GET (0:
                       none)
      max_url          the longest request target (bytes) admitted (0: no
                       limit)
      max_header_bytes the largest header block (bytes) admitted (0: no
                       limit)
      require_header   "Name: value": every POST and status GET must carry
                       this header with exactly this value; "" or null: no
                       longer required
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
                       (JSON of the wrong shape), "huge" (a well-formed body
                       of 9 MiB, larger than gridha reads; not in the cycle)
      invalid          a list of batch ids that end INVALID instead of
                       COMMITTED (unless already final)
      commit_delay     the commit delay of batches accepted from now on
      clear            true: end every fault window (latency, max_url,
                       max_header_bytes, require_header and the answer modes
                       below stay as they are)
  Answer modes (hostile ledgers, issue 39), each until set back:
      retry_after      the Retry-After of every 429 and 503: seconds (a
                       whole number >= 0; default 1)
      retry_after_form "seconds" (default) or "date": the same wait as an
                       HTTP-date (RFC 9110 IMF-fixdate)
      omit_pattern     a regex (search): a status answer leaves out every id
                       asked about that matches it, and speaks of a batch
                       nobody asked about instead ("" or null: none left out)
      decode_split     true: the status query's ids are URL-decoded before
                       they are split on commas, as many HTTP frameworks
                       do (an id holding an encoded comma reads as two)
      close_kept_alive_for  window length in seconds from now: a POST that
                       is not the first request on its connection is read
                       and applied, then its connection is closed with no
                       answer (a kept-alive connection that dies after the
                       request was sent); logged with closed true
  GET /stats                               counts: posts (every POST to
      /batches), accepted, duplicates, committed, invalid, rejected (400s),
      503s, 429s, fail_codes (requests answered by a code window), stalls
      (requests held), status_queries, malformed, controls, auth_failures
      (401s of require_header) and of them missing_header and wrong_header,
      414s, 431s, latency_waits (requests that waited the latency), dropped
      (requests reset by a drop window), hung (status GETs held by a
      hang_status window), connections (accepted); and
      pending, batches, commit_delay, windows (the open ones), fail_code,
      fail_code_applies, fail_code_counts ({"404": n, ...}), latency,
      max_url, max_header_bytes, require_header (the name, or null)
  /control and /stats are never subject to faults, latency or admission.
  Admission comes first; then a drop window wins over a 503 window, which
  wins over a 429 window, which wins over a code window, which wins over a
  stall; a hang_status window holds status GETs that pass all these;
  malformed bodies are only for status queries. Nothing is applied for a refused request.

The log (--log FILE, appended, "-" for stdout): one JSON object a line,
flushed per line, each with "seq" (1, 2, ... continuing an existing file),
"t" (wall time, Unix seconds) and "event":
  start        port, pid, commit_delay, max_lifetime, require_header (its
               name, when set)
  post         service_id, batch_id, epoch, attempt, bytes, result
               (accepted, duplicate, 503, 429, a code window's code such as
               "404", 401, 414, 431, rejected, stalled, dropped); accepted lines
               carry service_seq (1, 2, ... per service: the arrival order),
               duplicates carry first_seq (the accepted line's seq), held
               ones carry stalled (the hold in seconds), delayed ones
               latency (seconds); a 401 of require_header carries header
               (the name) and auth ("missing" or "wrong", never a value), a
               414 target_bytes and max_url, a 431 header_bytes and
               max_header_bytes
  committed    service_id, batch_id, after (seconds since accepted)
  invalid      service_id, batch_id, after, reason (pattern or control)
  unanswered   a POST applied before a hold whose client had gone
  status_query dialect, ids (how many), raw_ids (how many comma-separated
               values the query had before decoding), encoded_comma (one of
               them holds %2C), left_out (ids omit_pattern left out of an
               ok answer), result (ok, 503, 429, a code
               window's code, 401, 414, 431, malformed, stalled: the client
               had gone, dropped, hung), and latency, header and auth, target_bytes and
               max_url, header_bytes and max_header_bytes as post lines
  control      set (the settings applied; of require_header only the name,
               or null when cleared), already_final; or error
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
Every control key above but clear has a start flag, its name with dashes
(--help lists them), e.g. --fail-code 404 --fail-code-for 30, --latency 0.02,
--max-url 2048, --require-header "Authorization: Bearer x" (a value on a
command line shows in ps: fine for a test secret, for nothing else).
The ledger stops by itself after --max-lifetime seconds, and on SIGTERM or
SIGINT; either way it logs "stop" and exits 0. It keeps everything in
memory: restarted on the same log, it continues the seq numbers but has
forgotten every batch (their statuses are UNKNOWN, a re-POST is accepted).
"""

import argparse
import email.utils
import heapq
import hmac
import json
import os
import re
import select
import signal
import socket
import struct
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
WINDOWS = ("fail_503", "fail_429", "fail_code", "stall", "malformed", "drop",
           "hang_status", "close_kept_alive")
MALFORMED_KINDS = ("truncated", "garbage", "shape")
CODE_APPLIES = ("post", "get", "both")
REDIRECTS = (301, 302, 303, 307, 308)
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
STAT_NAMES = ("posts", "accepted", "duplicates", "committed", "invalid",
              "rejected", "503s", "429s", "fail_codes", "stalls",
              "status_queries", "malformed", "controls", "auth_failures",
              "missing_header", "wrong_header", "414s", "431s",
              "latency_waits", "dropped", "hung", "connections", "closed",
              "left_out")


class BadRequest(Exception):
    """BadRequest: a request the ledger refuses with 400 and this message."""


def parse_required(text):
    """parse_required: a require_header setting "Name: value" as (name, the
    value's bytes). Raises ValueError with a message that never holds the
    value: it is a secret."""
    name, colon, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if (not colon or not HEADER_NAME.match(name) or not value
            or any(c in value for c in "\r\n\0")):
        raise ValueError('must be "Name: value": a header name, a colon and '
                         'a value on one line')
    return name, value.encode("utf-8")


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
        self.fail_code = args.fail_code
        self.fail_code_applies = args.fail_code_applies
        self.fail_code_counts = {}
        self.latency = args.latency
        self.max_url = args.max_url
        self.max_header_bytes = args.max_header_bytes
        self.required = args.require_header     # (name, value bytes) or None
        self.retry_after = args.retry_after
        self.retry_after_form = args.retry_after_form
        self.omit_re = re.compile(args.omit_pattern) if args.omit_pattern else None
        self.decode_split = args.decode_split
        self.stats = dict.fromkeys(STAT_NAMES, 0)
        now = time.monotonic()
        for name, secs in (("fail_503", args.fail_503_for),
                           ("fail_429", args.fail_429_for),
                           ("fail_code", args.fail_code_for),
                           ("stall", args.stall_for),
                           ("malformed", args.malformed_for),
                           ("drop", args.drop_for),
                           ("hang_status", args.hang_status_for),
                           ("close_kept_alive", args.close_kept_alive_for)):
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

    def admit(self, target, header_bytes, headers):
        """admit: the admission of a POST to /batches or a status GET (see
        the module's words): None when it passes, else the refusal, counted,
        as (code, log fields, message). Neither the fields nor the message
        ever hold a header's value."""
        with self.cond:
            if self.max_url and len(target) > self.max_url:
                self.stats["414s"] += 1
                return (414, {"target_bytes": len(target), "max_url": self.max_url},
                        "request target longer than %d bytes" % self.max_url)
            if self.max_header_bytes and header_bytes > self.max_header_bytes:
                self.stats["431s"] += 1
                return (431, {"header_bytes": header_bytes,
                              "max_header_bytes": self.max_header_bytes},
                        "header block longer than %d bytes" % self.max_header_bytes)
            if self.required is None:
                return None
            name, want = self.required
        values = headers.get_all(name) or []
        if len(values) == 1 and hmac.compare_digest(
                values[0].strip().encode("latin-1", "replace"), want):
            return None
        why = "wrong" if values else "missing"
        with self.cond:
            self.stats["auth_failures"] += 1
            self.stats[why + "_header"] += 1
        return (401, {"header": name, "auth": why},
                "%s header %s" % (why, name))

    def gate(self, kind):
        """gate: the fault a request arriving now meets (kind "post" or
        "get"): "503", "429", the code of a code window that applies to
        kind, "stall" or None (malformed bodies are decided by
        status_body)."""
        now = time.monotonic()
        with self.cond:
            if now < self.until["drop"]:
                self.stats["dropped"] += 1
                return "dropped"
            if now < self.until["fail_503"]:
                self.stats["503s"] += 1
                return "503"
            if now < self.until["fail_429"]:
                self.stats["429s"] += 1
                return "429"
            if now < self.until["fail_code"] and self.fail_code_applies in (kind, "both"):
                code = str(self.fail_code)
                self.stats["fail_codes"] += 1
                self.fail_code_counts[code] = self.fail_code_counts.get(code, 0) + 1
                return code
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
        known = {"fail_503_for", "fail_429_for", "fail_code_for", "stall_for",
                 "malformed_for", "drop_for", "hang_status_for", "stall_seconds", "stall_apply", "malformed_kind",
                 "invalid", "commit_delay", "clear", "fail_code",
                 "fail_code_applies", "latency", "max_url", "max_header_bytes",
                 "require_header", "retry_after", "retry_after_form",
                 "omit_pattern", "decode_split", "close_kept_alive_for"}
        unknown = sorted(set(req) - known)
        if unknown:
            raise BadRequest("unknown control keys: %s" % ", ".join(unknown))
        for key in ("fail_503_for", "fail_429_for", "fail_code_for", "stall_for",
                    "malformed_for", "drop_for", "hang_status_for", "stall_seconds",
                    "commit_delay", "latency", "close_kept_alive_for"):
            if key in req:
                val = req[key]
                if isinstance(val, bool) or not isinstance(val, (int, float)) or val < 0:
                    raise BadRequest("%s must be a number of seconds >= 0" % key)
        for key in ("max_url", "max_header_bytes"):
            if key in req:
                val = req[key]
                if isinstance(val, bool) or not isinstance(val, int) or val < 0:
                    raise BadRequest("%s must be a whole number of bytes >= 0" % key)
        if "fail_code" in req:
            val = req["fail_code"]
            if isinstance(val, bool) or not isinstance(val, int) or not 300 <= val <= 599:
                raise BadRequest("fail_code must be an HTTP status code from 300 to 599")
        if req.get("fail_code_for", 0) > 0 and req.get("fail_code", self.fail_code) is None:
            raise BadRequest("fail_code_for needs a fail_code")
        if "fail_code_applies" in req and req["fail_code_applies"] not in CODE_APPLIES:
            raise BadRequest('fail_code_applies must be "post", "get" or "both"')
        required = self.required
        if "require_header" in req:
            val = req["require_header"]
            if val is None or val == "":
                required = None
            elif not isinstance(val, str):
                raise BadRequest('require_header must be "Name: value", "" or null')
            else:
                try:
                    required = parse_required(val)
                except ValueError as exc:
                    raise BadRequest("require_header %s" % exc) from None
        if "stall_apply" in req and req["stall_apply"] not in ("after", "before"):
            raise BadRequest('stall_apply must be "after" or "before"')
        if "malformed_kind" in req and req["malformed_kind"] not in ("cycle", "huge") + MALFORMED_KINDS:
            raise BadRequest("malformed_kind must be cycle, truncated, garbage, shape or huge")
        invalid = req.get("invalid", [])
        if not isinstance(invalid, list) or not all(isinstance(i, str) and i for i in invalid):
            raise BadRequest("invalid must be a list of batch ids")
        if "clear" in req and not isinstance(req["clear"], bool):
            raise BadRequest("clear must be true or false")
        if "retry_after" in req:
            val = req["retry_after"]
            if isinstance(val, bool) or not isinstance(val, int) or val < 0:
                raise BadRequest("retry_after must be a whole number of seconds >= 0")
        if "retry_after_form" in req and req["retry_after_form"] not in ("seconds", "date"):
            raise BadRequest('retry_after_form must be "seconds" or "date"')
        omit_re = self.omit_re
        if "omit_pattern" in req:
            val = req["omit_pattern"]
            if val is None or val == "":
                omit_re = None
            elif not isinstance(val, str):
                raise BadRequest("omit_pattern must be a regex, \"\" or null")
            else:
                try:
                    omit_re = re.compile(val)
                except re.error as exc:
                    raise BadRequest("omit_pattern: %s" % exc) from None
        if "decode_split" in req and not isinstance(req["decode_split"], bool):
            raise BadRequest("decode_split must be true or false")

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
            self.fail_code = req.get("fail_code", self.fail_code)
            self.fail_code_applies = req.get("fail_code_applies", self.fail_code_applies)
            self.latency = req.get("latency", self.latency)
            self.max_url = req.get("max_url", self.max_url)
            self.max_header_bytes = req.get("max_header_bytes", self.max_header_bytes)
            self.required = required
            self.retry_after = req.get("retry_after", self.retry_after)
            self.retry_after_form = req.get("retry_after_form", self.retry_after_form)
            self.omit_re = omit_re
            self.decode_split = req.get("decode_split", self.decode_split)
            for batch_id in invalid:
                batch = self.batches.get(batch_id)
                if batch is not None and batch.status != "PENDING":
                    already_final.append(batch_id)
                else:
                    self.invalid_ids.add(batch_id)
            self.stats["controls"] += 1
            shown = dict(req)
            if "require_header" in shown:   # the name only, never the value
                shown["require_header"] = required[0] if required else None
            self.log.write("control", set=shown, already_final=already_final)
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
        429, a code window's code, 401, 414, 431 or 400 (missing ids), or
        stalled for a client that had gone."""
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

    def status_query(self, dialect, ids, result, **fields):
        with self.cond:
            self.stats["status_queries"] += 1
            if result == "malformed":
                self.stats["malformed"] += 1
            self.log.write("status_query", dialect=dialect, ids=len(ids),
                           result=result, **fields)

    def malformed_body(self, ids):
        """malformed_body: a 200 body a status client must refuse."""
        with self.cond:
            kind = self.malformed_kind
            if kind == "cycle":
                kind = MALFORMED_KINDS[self.malformed_n % len(MALFORMED_KINDS)]
                self.malformed_n += 1
        first = ids[0] if ids else ""
        if kind == "huge":
            pad = [{"id": "pad-%d" % n, "status": "UNKNOWN"} for n in range(300000)]
            return json.dumps({"data": [{"id": first, "status": "PENDING"}] + pad}).encode()
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
            body["fail_code"] = self.fail_code
            body["fail_code_applies"] = self.fail_code_applies
            body["fail_code_counts"] = dict(self.fail_code_counts)
            body["latency"] = self.latency
            body["max_url"] = self.max_url
            body["max_header_bytes"] = self.max_header_bytes
            body["require_header"] = self.required[0] if self.required else None
            return body


class CountingReader:
    """CountingReader: stands in for a connection's rfile while the request's
    header block is read, counting the bytes its lines take."""

    def __init__(self, raw):
        self.raw = raw
        self.n = 0

    def readline(self, limit=-1):
        line = self.raw.readline(limit)
        self.n += len(line)
        return line

    def __getattr__(self, name):
        return getattr(self.raw, name)


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

    def parse_request(self):
        """parse_request: as BaseHTTPRequestHandler's, and sets header_bytes,
        the size of the header block (its lines and the blank line after),
        and requests_here, the requests read on this connection so far."""
        self.requests_here = getattr(self, "requests_here", 0) + 1
        reader = CountingReader(self.rfile)
        self.rfile = reader
        try:
            return super().parse_request()
        finally:
            self.rfile = reader.raw
            self.header_bytes = reader.n

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
        """fault_reply: the answer of a fault window (503, 429 or a code
        window's code), with the headers that code calls for."""
        code = int(verdict)
        headers = []
        if code in (429, 503):
            with self.ledger.cond:
                wait, form = self.ledger.retry_after, self.ledger.retry_after_form
            if form == "date":
                headers.append(("Retry-After",
                                email.utils.formatdate(time.time() + wait, usegmt=True)))
            else:
                headers.append(("Retry-After", str(wait)))
        elif code in REDIRECTS:
            headers.append(("Location", "https://127.0.0.1:%d%s"
                            % (self.server.server_address[1], self.path)))
        elif code == 401:
            headers.append(("WWW-Authenticate", 'Bearer realm="gridha-test-ledger"'))
        elif code == 408:
            headers.append(("Connection", "close"))
        self.reply(code, {"error": "ledger fault window: %s" % verdict},
                   raw=b"" if code == 304 else None, headers=headers)

    def admission(self):
        """admission: Ledger.admit for this request: None, or the refusal
        (code, log fields, message) that the caller logs, then answers with
        refusal_reply."""
        return self.ledger.admit(self.path, self.header_bytes, self.headers)

    def refusal_reply(self, code, message):
        """refusal_reply: the answer of a request admission refused."""
        headers = []
        if code == 401:
            headers.append(("WWW-Authenticate", 'Bearer realm="gridha-test-ledger"'))
        self.reply(code, {"error": message}, headers=headers)

    def delay(self):
        """delay: wait out the latency, outside the lock, so that requests
        overlap; returns the seconds waited (0 when there is none)."""
        with self.ledger.cond:
            secs = self.ledger.latency
            if secs > 0:
                self.ledger.stats["latency_waits"] += 1
        if secs > 0:
            self.ledger.stopping.wait(secs)
        return secs

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

    def drop(self):
        """drop: reset the connection without an answer (SO_LINGER 0)."""
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close_connection = True

    def hang(self):
        """hang: hold a status GET while the hang_status window is open (or
        until the ledger stops), then close its connection unanswered."""
        while not self.ledger.stopping.is_set():
            left = self.ledger.until["hang_status"] - time.monotonic()
            if left <= 0:
                break
            self.ledger.stopping.wait(min(left, 0.5))
        self.close_connection = True

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
        waited = self.delay()
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
        extra = {"latency": waited} if waited else {}
        if len(segs) == 3 and hdr.get("X-Gridha-Batch-Id") not in (None, batch_id):
            extra["header_batch_id"] = hdr.get("X-Gridha-Batch-Id")
        refused = self.admission()
        if refused is not None:
            code, fields, message = refused
            extra.update(fields)
            self.ledger.refuse(str(code), service_id, batch_id, epoch, attempt,
                               nbytes, extra)
            self.refusal_reply(code, message)
            return
        if not service_id or not batch_id:
            self.ledger.refuse("rejected", service_id, batch_id, epoch, attempt,
                               nbytes, dict(extra, reason="missing service or batch id"))
            self.reply(400, {"error": "missing service id or batch id",
                             "hint": "POST /batches/<service_id>/<batch_id>, or "
                                     "POST /batches with X-Gridha-Service-Id and "
                                     "X-Gridha-Batch-Id"})
            return

        verdict = self.ledger.gate("post")
        if verdict == "dropped":
            self.ledger.refuse(verdict, service_id, batch_id, epoch, attempt,
                               nbytes, extra)
            self.drop()
            return
        if verdict not in (None, "stall"):
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
        if self.requests_here > 1 and \
                time.monotonic() < self.ledger.until["close_kept_alive"]:
            with self.ledger.cond:
                self.ledger.stats["closed"] += 1
            self.ledger.post(service_id, batch_id, epoch, attempt, nbytes,
                             dict(extra, closed=True))
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
    def query_ids(query, key, decode_first=False):
        """query_ids: the ids of parameter key: split on commas first, then
        each URL-decoded, so an encoded comma stays inside its id; with
        decode_first, decoded first and then split (decode_split). Also
        the raw values: how many, and whether one holds an encoded comma."""
        ids = []
        raw = []
        for pair in query.split("&"):
            name, _, value = pair.partition("=")
            if unquote(name) == key:
                raw.extend(v for v in value.split(",") if v)
                if decode_first:
                    ids.extend(v for v in unquote(value).split(",") if v)
                else:
                    ids.extend(unquote(v) for v in value.split(",") if v)
        return ids, {"raw_ids": len(raw),
                     "encoded_comma": any("%2c" in v.lower() for v in raw)}

    def status_query(self, dialect, query, key):
        """status_query: GET batch statuses in either dialect."""
        waited = self.delay()
        extra = {"latency": waited} if waited else {}
        with self.ledger.cond:
            decode_first = self.ledger.decode_split
            omit_re = self.ledger.omit_re
        ids, raw = Handler.query_ids(query, key, decode_first)
        extra.update(raw)
        refused = self.admission()
        if refused is not None:
            code, fields, message = refused
            self.ledger.status_query(dialect, ids, str(code), **extra, **fields)
            self.refusal_reply(code, message)
            return
        if not ids:
            self.reply(400, {"error": "no batch ids",
                             "hint": "give ?%s=a,b,c" % key})
            return
        verdict = self.ledger.gate("get")
        if verdict == "dropped":
            self.ledger.status_query(dialect, ids, verdict, **extra)
            self.drop()
            return
        if verdict not in (None, "stall"):
            self.ledger.status_query(dialect, ids, verdict, **extra)
            self.fault_reply(verdict)
            return
        if time.monotonic() < self.ledger.until["hang_status"]:
            with self.ledger.cond:
                self.ledger.stats["hung"] += 1
            self.ledger.status_query(dialect, ids, "hung", **extra)
            self.hang()
            return
        if verdict == "stall":
            if not self.hold():
                return
            if self.client_gone():
                self.ledger.status_query(dialect, ids, "stalled", **extra)
                self.close_connection = True
                return
        if time.monotonic() < self.ledger.until["malformed"]:
            self.ledger.status_query(dialect, ids, "malformed", **extra)
            self.reply(200, raw=self.ledger.malformed_body(ids))
            return
        found = self.ledger.statuses(ids)
        if omit_re is not None:
            kept = [(i, st) for i, st in found if not omit_re.search(i)]
            if len(kept) < len(found):
                extra["left_out"] = len(found) - len(kept)
                with self.ledger.cond:
                    self.ledger.stats["left_out"] += len(found) - len(kept)
                kept.append(("gridha-test-not-asked", "UNKNOWN"))
            found = kept
        self.ledger.status_query(dialect, ids, "ok", **extra)
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

    def __init__(self, port, ledger, backlog=128):
        self.ledger = ledger
        self.request_queue_size = backlog
        super().__init__(("127.0.0.1", port), Handler)

    def process_request(self, request, client_address):
        with self.ledger.cond:
            self.ledger.stats["connections"] += 1
        super().process_request(request, client_address)


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
    p.add_argument("--drop-for", type=float, default=0, metavar="SECONDS",
                   help="reset every request's connection unanswered for this long from start")
    p.add_argument("--hang-status-for", type=float, default=0, metavar="SECONDS",
                   help="hold status GETs unanswered for this long from start")
    p.add_argument("--http10", action="store_true",
                   help="answer in HTTP/1.0 and close every connection after one answer")
    p.add_argument("--backlog", type=int, default=128,
                   help="the listening socket's accept queue (default 128)")
    p.add_argument("--malformed-for", type=float, default=0, metavar="SECONDS",
                   help="status queries get malformed 200 bodies for this long from start")
    p.add_argument("--malformed-kind", choices=("cycle", "huge") + MALFORMED_KINDS,
                   default="cycle", help="which malformed bodies (default cycle)")
    p.add_argument("--fail-code", type=int, metavar="CODE",
                   help="the HTTP status code (300-599) of a code window")
    p.add_argument("--fail-code-for", type=float, default=0, metavar="SECONDS",
                   help="answer requests --fail-code for this long from start")
    p.add_argument("--fail-code-applies", choices=CODE_APPLIES, default="both",
                   help="which requests a code window answers: POSTs, status "
                        "GETs or both (default both)")
    p.add_argument("--latency", type=float, default=0, metavar="SECONDS",
                   help="wait this long before answering each POST and status GET")
    p.add_argument("--max-url", type=int, default=0, metavar="BYTES",
                   help="answer 414 to requests whose target (path and query) is "
                        "longer; 0: no limit (default)")
    p.add_argument("--max-header-bytes", type=int, default=0, metavar="BYTES",
                   help="answer 431 to requests whose header block is longer; "
                        "0: no limit (default)")
    p.add_argument("--require-header", metavar='"NAME: VALUE"',
                   help="answer 401 to POSTs and status GETs without this header "
                        "and value (the value is never logged)")
    p.add_argument("--retry-after", type=int, default=1, metavar="SECONDS",
                   help="the Retry-After of 429 and 503 answers (default 1)")
    p.add_argument("--retry-after-form", choices=("seconds", "date"), default="seconds",
                   help="Retry-After as seconds (default) or as an HTTP-date")
    p.add_argument("--omit-pattern",
                   help="status answers leave out the ids asked about that match this regex")
    p.add_argument("--decode-split", action="store_true",
                   help="URL-decode the status query's ids before splitting them on commas")
    p.add_argument("--close-kept-alive-for", type=float, default=0, metavar="SECONDS",
                   help="for this long from start, a POST that is not the first request "
                        "on its connection is applied, then the connection closed unanswered")
    args = p.parse_args(argv)
    args.invalid = [i for arg in args.invalid for i in arg.split(",") if i]
    for name in ("commit_delay", "max_lifetime", "fail_503_for", "fail_429_for",
                 "fail_code_for", "stall_for", "stall_seconds", "malformed_for",
                 "latency", "max_url", "max_header_bytes", "drop_for",
                 "hang_status_for", "close_kept_alive_for", "retry_after"):
        if getattr(args, name) < 0:
            p.error("--%s must be >= 0" % name.replace("_", "-"))
    if args.fail_code is not None and not 300 <= args.fail_code <= 599:
        p.error("--fail-code must be from 300 to 599")
    if args.fail_code_for > 0 and args.fail_code is None:
        p.error("--fail-code-for needs --fail-code")
    if args.require_header is not None:
        try:
            args.require_header = parse_required(args.require_header)
        except ValueError as exc:
            p.error("--require-header %s" % exc)
    for name in ("invalid_pattern", "reject_pattern", "omit_pattern"):
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
    if args.http10:
        Handler.protocol_version = "HTTP/1.0"
    try:
        server = Server(args.port, ledger, max(1, args.backlog))
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

    started = {}
    if args.require_header is not None:   # the name only, never the value
        started["require_header"] = args.require_header[0]
    log.write("start", port=port, pid=os.getpid(), commit_delay=args.commit_delay,
              max_lifetime=args.max_lifetime, http10=args.http10,
              backlog=args.backlog, **started)
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
