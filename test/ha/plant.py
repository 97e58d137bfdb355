#!/usr/bin/env python3
"""test/ha/plant.py: one fault of the system planted in a copy of a fault
harness run's history, so that the tests can show the checker (check.py)
reports it (test/t/050_ha.pl, test/t/051_failover.pl).

Usage: plant.py KIND RUN_DIR   (RUN_DIR is changed in place: give a copy)

Kinds (the property the checker must then report "not ok"):
  order           two arrivals of a service at the ledger swapped
                  (per-service arrival order)
  duplicate       a duplicate POST with no fault near it (every duplicate
                  POST is explained)
  stale           a write accepted from an instance that did not hold the
                  claim (no two instances held a service at once)
  lost            a batch missing from the database (no batch lost)
  epoch           a take on timeline 2 that gives a service an epoch it had
                  on timeline 1 (epochs never repeat)
  standby-worker  a gridha worker seen on a node in recovery (workers run
                  only on the primary)
  acked           a hand-out a client saw that the surviving history lacks
                  (nothing the database acknowledged was lost)

Exit status 0 when planted, 1 when the history has nothing to plant it in.
Python 3 standard library only.
"""

import csv
import glob
import json
import sys


def read_jsonl(path):
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_jsonl(path, lines):
    with open(path, "w", encoding="utf-8") as fh:
        for e in lines:
            fh.write(json.dumps(e) + "\n")


def rewrite_csv(path, fn):
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    fn(rows)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


def accepted(lines):
    return [e for e in lines if e.get("event") == "post" and e.get("result") == "accepted"]


def plant_order(d):
    lines = read_jsonl(d + "/ledger.log")
    acc = accepted(lines)
    mine = [e for e in acc if e["service_id"] == acc[0]["service_id"]]
    a, b = mine[1], mine[2]
    a["batch_id"], b["batch_id"] = b["batch_id"], a["batch_id"]
    write_jsonl(d + "/ledger.log", lines)


def plant_duplicate(d):
    lines = read_jsonl(d + "/ledger.log")
    last = accepted(lines)[-1]
    extra = dict(last, seq=lines[-1]["seq"] + 1, t=last["t"] + 1, result="duplicate",
                 first_seq=last["seq"])
    extra.pop("service_seq", None)
    write_jsonl(d + "/ledger.log", lines + [extra])


def plant_stale(d):
    def fn(rows):
        others = sorted({r["writer"] for r in rows if r["writer"]})
        for r in rows:
            if r["old_status"] == "submitting" and r["status"] == "pending":
                r["writer"] = next(o for o in others if o != r["writer"])
                break
    rewrite_csv(d + "/db_batch_events.csv", fn)


def plant_lost(d):
    path = d + "/db_batches.csv"
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines(True)
    del lines[len(lines) // 2]
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(lines)


def plant_epoch(d):
    def fn(rows):
        old = {}
        for r in rows:
            if r["tli"] == "1" and r["claimant"]:
                old.setdefault(r["service_id"], r["epoch"])
        r = next(r for r in rows if r["tli"] == "2" and r["claimant"]
                 and r["epoch"] != r["old_epoch"] and r["service_id"] in old)
        r["epoch"] = old[r["service_id"]]
    rewrite_csv(d + "/db_claim_events.csv", fn)


def plant_standby_worker(d):
    lines = read_jsonl(d + "/nodes.jsonl")
    s = next(x for x in lines if x["recovery_before"] and x["recovery_after"])
    s["workers"] = 1
    write_jsonl(d + "/nodes.jsonl", lines)


def plant_acked(d):
    """plant_acked: a hand-out the database acknowledged to a client, at an
    attempt the history never had: made from the first client's first
    hand-out, or, when no client handed anything out (under load the
    workers may take every service), from the history's first hand-out,
    into the first client's log."""
    logs = sorted(glob.glob(d + "/clients/*.log"))
    if not logs:
        raise StopIteration("no client log")
    h = None
    for path in logs:
        lines = read_jsonl(path)
        h = next((x for x in lines if x.get("event") == "handout"), None)
        if h is not None:
            break
    if h is None:
        path = logs[0]
        lines = read_jsonl(path)
        with open(d + "/db_batch_events.csv", encoding="utf-8", newline="") as fh:
            e = next(r for r in csv.DictReader(fh) if r["status"] == "submitting")
        h = {"t": float(e["t"]), "event": "handout",
             "instance": next((x["instance"] for x in lines if x.get("instance")), None),
             "service": e["service_id"], "batch": e["batch_id"],
             "epoch": int(e["epoch"]), "attempt": int(e["attempts"])}
    lines.append(dict(h, attempt=h["attempt"] + 1000))
    write_jsonl(path, lines)


KINDS = {"order": plant_order, "duplicate": plant_duplicate, "stale": plant_stale,
         "lost": plant_lost, "epoch": plant_epoch, "standby-worker": plant_standby_worker,
         "acked": plant_acked}


def main(argv):
    if len(argv) != 2 or argv[0] not in KINDS:
        print("usage: plant.py {%s} RUN_DIR" % ",".join(KINDS), file=sys.stderr)
        return 2
    try:
        KINDS[argv[0]](argv[1])
    except (OSError, IndexError, KeyError, ValueError, StopIteration) as exc:
        print("plant.py: could not plant %s in %s: %r" % (argv[0], argv[1], exc),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
