#!/usr/bin/env python3
"""test/workers/ledger_query.py: small questions about a test ledger log,
for test/t/020_workers.pl and test/t/022_worker_safety.pl.

Words used here:
  log       the JSON-lines event log written by test/dlt/ledger.py --log
  post      a "post" event; its "result" is accepted, duplicate, 503, 429,
            rejected or stalled
  services  a regular expression (Python, matched from the start) that
            selects services by their service_id; default: every service

Usage:
  ledger_query.py LOG posts RESULT [SERVICES]
      the batch id of every post line with this result, one a line, in log
      order (a batch appears once per matching line)
  ledger_query.py LOG queries DIALECT
      how many status queries of this dialect (sawtooth, splinter) the
      ledger answered with result ok
Exit status: 0, or 2 when the log cannot be read or the arguments are wrong.
"""

import json
import re
import sys


def events(path):
    """events: the log's events; an unfinished last line is skipped."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break
            try:
                yield json.loads(line)
            except ValueError:
                continue


def posts(path, result, services):
    """posts: batch ids of the post lines with this result."""
    pattern = re.compile(services)
    for ev in events(path):
        if ev.get("event") != "post" or ev.get("result") != result:
            continue
        if ev.get("service_id") is None or not pattern.match(ev["service_id"]):
            continue
        print(ev.get("batch_id"))


def queries(path, dialect):
    """queries: answered status queries of one dialect."""
    n = 0
    for ev in events(path):
        if (ev.get("event") == "status_query" and ev.get("dialect") == dialect
                and ev.get("result") == "ok"):
            n += 1
    print(n)


def main(argv):
    if len(argv) >= 3 and argv[1] == "posts" and len(argv) <= 4:
        posts(argv[0], argv[2], argv[3] if len(argv) == 4 else "")
    elif len(argv) == 3 and argv[1] == "queries":
        queries(argv[0], argv[2])
    else:
        print(__doc__.split("Usage:")[1].split("Exit status")[0], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except OSError as exc:
        print("ledger_query: %s" % exc, file=sys.stderr)
        sys.exit(2)
