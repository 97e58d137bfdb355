#!/usr/bin/env python3
"""test/dlt/check_log.py: what arrived at the test ledger, and in which order.

Reads a log written by ledger.py and prints, per service, the arrival order
of its accepted batches and its duplicate counts; with --expected it also
checks that order against the enqueue order and prints every violation.

Words used here:
  arrival      a batch's first accepted POST (its "post" line with result
               "accepted"); for the order checks a POST refused by the
               ledger's --reject-pattern counts as an arrival too, since
               gridha then marks the batch invalid and moves on.
  duplicate    a later POST of an accepted batch id (result "duplicate"); a
               batch accepted again after a ledger restart (which forgets
               everything) counts as a duplicate as well.
  final        the batch's first "committed" or "invalid" line.
  refused      a POST the ledger did not apply, answered with an error code
               (or, "stalled", never answered): 503, 429 and stalled are
               totalled apart, the rest (a code window's code, 401, 414,
               431) as "refused". None is an arrival.
  expected     a file of lines "service_id<TAB>batch_id" in enqueue order
               (blank lines and lines starting with # are skipped). Only the
               services it names are checked.
  violation    one of:
    order        a batch arrived while a batch of its service enqueued before
                 it had not arrived yet (swapped or skipped); each batch
                 jumped over is reported once, at the first arrival past it
    unexpected   a batch arrived that the expected file does not list for
                 its service (or lists under another service)
    missing      (--require-all) an expected batch never arrived
    overlap      (--one-in-flight) a batch arrived before the batch that
                 arrived before it in its service was final: two in flight
    log          seq numbers do not grow, or a line is not a log event

Usage:
  check_log.py [--json] [--expected FILE] [--require-all] [--one-in-flight] LOG
Exit status: 0 no violation, 1 violations, 2 the log or expected file could
not be read.
"""

import argparse
import json
import sys


class Service:
    """Service: what one service's batches did at the ledger."""

    def __init__(self, service_id):
        self.service_id = service_id
        self.order = []             # accepted batch ids, arrival order
        self.arrivals = []          # (seq, batch_id): accepted or rejected
        self.duplicates = {}        # batch_id -> count
        self.rejected = []
        self.final = {}             # batch_id -> (status, seq)

    def as_json(self):
        return {
            "order": self.order,
            "accepted": len(self.order),
            "duplicates": sum(self.duplicates.values()),
            "duplicate_batches": self.duplicates,
            "rejected": self.rejected,
            "final": {b: s for b, (s, _) in self.final.items()},
        }


def read_log(path):
    """read_log: the services found in a log, the totals, and the log's own
    violations. A last line without its newline (a ledger killed mid-write)
    is skipped."""
    services = {}
    totals = {"accepted": 0, "duplicates": 0, "rejected": 0, "503": 0,
              "429": 0, "stalled": 0, "refused": 0, "committed": 0,
              "invalid": 0, "status_queries": 0, "starts": 0}
    violations = []
    first = {}                      # batch_id -> service_id of its arrival
    last_seq = 0
    fh = sys.stdin if path == "-" else open(path, encoding="utf-8")
    with fh:
        lines = fh.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif lines:
        print("check_log: note: skipping an unfinished last line", file=sys.stderr)
        lines.pop()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
            seq = int(ev["seq"])
            kind = ev["event"]
        except (ValueError, KeyError, TypeError):
            violations.append(violation("log", None, None,
                                        "line %d is not a log event" % lineno))
            continue
        if seq <= last_seq:
            violations.append(violation("log", None, None,
                                        "line %d: seq %d after seq %d" % (lineno, seq, last_seq)))
        last_seq = max(last_seq, seq)
        if kind == "start":
            totals["starts"] += 1
        elif kind == "status_query":
            totals["status_queries"] += 1
        elif kind in ("committed", "invalid"):
            totals[kind] += 1
            svc = services.setdefault(ev["service_id"], Service(ev["service_id"]))
            svc.final.setdefault(ev["batch_id"], (kind, seq))
        elif kind == "post":
            result = ev.get("result")
            sid, bid = ev.get("service_id"), ev.get("batch_id")
            if result in ("503", "429", "stalled"):
                totals[result] += 1
                continue
            if result not in ("accepted", "duplicate", "rejected"):
                totals["refused"] += 1
                continue
            if sid is None or bid is None:
                continue
            svc = services.setdefault(sid, Service(sid))
            if result == "accepted" and bid not in first:
                first[bid] = sid
                svc.order.append(bid)
                svc.arrivals.append((seq, bid))
                totals["accepted"] += 1
            elif result in ("accepted", "duplicate"):
                svc.duplicates[bid] = svc.duplicates.get(bid, 0) + 1
                totals["duplicates"] += 1
            elif result == "rejected" and ev.get("reason") == "reject-pattern":
                totals["rejected"] += 1
                svc.rejected.append(bid)
                if bid not in first:
                    first[bid] = sid
                    svc.arrivals.append((seq, bid))
    return services, totals, violations


def read_expected(path):
    """read_expected: service_id -> its batch ids in enqueue order."""
    expected = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            sid, tab, bid = line.partition("\t")
            if not tab or not sid or not bid:
                raise ValueError("%s:%d: expected service_id<TAB>batch_id" % (path, lineno))
            expected.setdefault(sid, []).append(bid)
    return expected


def violation(kind, service_id, batch_id, message):
    return {"kind": kind, "service_id": service_id, "batch_id": batch_id,
            "message": message}


def check_order(services, expected, require_all):
    """check_order: the order, unexpected and missing violations of the
    services named in the expected file."""
    out = []
    owner = {b: s for s, bids in expected.items() for b in bids}
    for sid, bids in expected.items():
        svc = services.get(sid, Service(sid))
        index = {b: i for i, b in enumerate(bids)}
        arrived = set()
        jumped = set()              # reported once, at the first jump
        for seq, bid in svc.arrivals:
            if bid not in index:
                where = owner.get(bid)
                msg = ("service %s: batch %s arrived (seq %d) but is not expected"
                       % (sid, bid, seq))
                if where is not None:
                    msg += " in it (expected in service %s)" % where
                out.append(violation("unexpected", sid, bid, msg))
                continue
            earlier = [b for b in bids[:index[bid]]
                       if b not in arrived and b not in jumped]
            if earlier:
                out.append(violation(
                    "order", sid, bid,
                    "service %s: batch %s arrived (seq %d) before %s, enqueued before it"
                    % (sid, bid, seq, earlier[0])))
                jumped.update(earlier)
            arrived.add(bid)
        if require_all:
            for bid in bids:
                if bid not in arrived:
                    out.append(violation("missing", sid, bid,
                                         "service %s: batch %s never arrived" % (sid, bid)))
    return out


def check_in_flight(services, only):
    """check_in_flight: overlap violations: in each service, every arrival
    must come after the previous arrival was final (or rejected)."""
    out = []
    for sid, svc in services.items():
        if only is not None and sid not in only:
            continue
        rejected = set(svc.rejected)
        for (_, prev), (seq, bid) in zip(svc.arrivals, svc.arrivals[1:]):
            if prev in rejected:
                continue
            done = svc.final.get(prev)
            if done is None or done[1] > seq:
                out.append(violation(
                    "overlap", sid, bid,
                    "service %s: batch %s arrived (seq %d) while %s was not final"
                    % (sid, bid, seq, prev)))
    return out


def main(argv):
    p = argparse.ArgumentParser(description="Per-service arrival order and "
                                "duplicates in a test ledger log; order checks.")
    p.add_argument("log", help='the ledger\'s --log file ("-" for stdin)')
    p.add_argument("--expected", metavar="FILE",
                   help='lines "service_id<TAB>batch_id" in enqueue order')
    p.add_argument("--require-all", action="store_true",
                   help="an expected batch that never arrived is a violation")
    p.add_argument("--one-in-flight", action="store_true",
                   help="a batch arriving before its predecessor was final is a violation")
    p.add_argument("--json", action="store_true", help="emit one JSON object")
    args = p.parse_args(argv)

    try:
        services, totals, violations = read_log(args.log)
        expected = read_expected(args.expected) if args.expected else None
    except (OSError, ValueError) as exc:
        print("check_log: %s" % exc, file=sys.stderr)
        return 2
    if expected is not None:
        violations += check_order(services, expected, args.require_all)
    if args.one_in_flight:
        violations += check_in_flight(services, expected)
    unchecked = [] if expected is None else sorted(set(services) - set(expected))

    if args.json:
        print(json.dumps({
            "services": {s: services[s].as_json() for s in sorted(services)},
            "totals": totals,
            "checked": sorted(expected) if expected is not None else [],
            "unchecked": unchecked,
            "violations": violations,
        }, indent=1))
    else:
        for sid in sorted(services):
            svc = services[sid]
            print("service %s: %d accepted, %d duplicates, %d rejected"
                  % (sid, len(svc.order), sum(svc.duplicates.values()), len(svc.rejected)))
            if svc.order:
                print("  " + " ".join(svc.order))
        print("totals: " + ", ".join("%s %d" % kv for kv in totals.items()))
        if expected is not None:
            print("checked %d services against %s%s"
                  % (len(expected), args.expected,
                     "; %d not in it" % len(unchecked) if unchecked else ""))
        print("violations: %d" % len(violations))
        for v in violations:
            print("  %s: %s" % (v["kind"], v["message"]))
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
