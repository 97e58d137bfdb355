#!/usr/bin/env python3
"""test/ha/check.py: the fault harness's checker. Reads the history a run of
test/ha/driver.py recorded and proves gridha's HA claims over it, then
prints a table.

Sources (all in the run directory):
  enqueued.tsv        what the producer enqueued (committed), in order
  ledger.log          the test ledger's log: every POST with its epoch and
                      attempt, per-service arrival order, duplicates
  clients/*.log       each external instance's log: hand-outs, submissions,
                      reports, refusals (RG001 = stale claim)
  db_batches.csv      gridha.batches at the end
  db_claim_events.csv, db_batch_events.csv   the database's own record of
                      every claim change and batch change, with the writer
                      and the holder of the service at that moment
                      (test/ha/audit.sql)
  faults.jsonl        every fault injected, its victim and the services the
                      victim held
  postgres.log        the server log: workers' refused writes ("gridha
                      worker dropped a batch: ... refused"), crashes

Properties (each one TAP line with --tap):
  faults        every fault kind was injected at least once
  terminal      every enqueued batch reached committed or invalid
  lost          no batch lost: each is in the database, final there, and
                its final status agrees with the ledger's
  order         per-service arrival order at the ledger equals enqueue
                order, and a batch arrives only once its predecessor is final
  fencing       no write accepted from an instance that did not hold the
                service at that epoch (the audit), epochs only grow, and no
                client's report was accepted after its claim had moved on
  delay path    every SIGSTOPped submitter caught mid-submission tried its
                late write and had it refused
  duplicates    every duplicate POST at the ledger is explained by a fault:
                a stall that lost the answer to an applied POST, a killed or
                paused or terminated submitter, or a server restart, between
                the batch's previous POST and the duplicate
  crashes       no server process crashed (signal 6, 7, 11, PANIC, TRAP)

Failover time: for each fault with a victim, for each service the victim
held, from the fault to the first hand-out of that service by another
instance (database time, same host clock); median and max per fault kind.

Usage: check.py [--tap] [--json] [--hard-expiry S] RUN_DIR
Exit status: 0 all properties hold, 1 one does not, 2 unreadable input.
"""

import argparse
import csv
import glob
import json
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "dlt"))
import check_log  # noqa: E402  pylint: disable=wrong-import-position

KINDS = ("kill9-off", "kill9-on", "stop-client", "term-worker", "stop-worker",
         "503", "stall", "restart")
KIND_NAMES = {
    "kill9-off": "kill -9 of a client, liveness off",
    "kill9-on": "kill -9 of a client, liveness on",
    "stop-client": "SIGSTOP of a client > hard_expiry",
    "term-worker": "pg_terminate_backend of a worker",
    "stop-worker": "SIGSTOP of a worker > hard_expiry",
    "503": "ledger 503 window",
    "stall": "ledger stall",
    "restart": "immediate server stop + start",
}
VICTIM_KINDS = ("kill9-off", "kill9-on", "stop-client", "term-worker", "stop-worker")
FINAL = ("committed", "invalid")
# Slack for comparing times taken by different processes on one host.
SLACK = 0.5


def read_jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                continue            # a line cut by kill -9
    return out


def read_csv(path):
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return []
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def fnum(v):
    return None if v in (None, "") else float(v)


def inum(v):
    return None if v in (None, "") else int(v)


class Run:
    """Run: everything recorded by one harness run."""

    def __init__(self, path):
        self.path = path
        self.enqueued = []          # (service, batch) in enqueue order
        with open(os.path.join(path, "enqueued.tsv"), encoding="utf-8") as fh:
            for line in fh:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 2:
                    self.enqueued.append((parts[0], parts[1]))
        self.faults = read_jsonl(os.path.join(path, "faults.jsonl"))
        self.instances = read_jsonl(os.path.join(path, "instances.jsonl"))
        self.ledger = read_jsonl(os.path.join(path, "ledger.log"))
        self.clients = {}           # instance id -> its log events
        for f in sorted(glob.glob(os.path.join(path, "clients", "*.log"))):
            evs = read_jsonl(f)
            iid = next((e["instance"] for e in evs if e.get("instance")), None)
            if iid:
                self.clients.setdefault(iid, []).extend(evs)
        self.batches = {(r["service_id"], r["batch_id"]): r
                        for r in read_csv(os.path.join(path, "db_batches.csv"))}
        self.claim_events = read_csv(os.path.join(path, "db_claim_events.csv"))
        self.batch_events = read_csv(os.path.join(path, "db_batch_events.csv"))
        self.pglog = []
        p = os.path.join(path, "postgres.log")
        if os.path.exists(p):
            with open(p, encoding="utf-8", errors="replace") as fh:
                self.pglog = fh.read().splitlines()
        run_json = os.path.join(path, "run.json")
        self.meta = {}
        if os.path.exists(run_json):
            with open(run_json, encoding="utf-8") as fh:
                self.meta = json.load(fh)


class Checker:
    """Checker: the properties and the numbers of the table."""

    def __init__(self, run, hard_expiry):
        self.r = run
        self.hard = hard_expiry
        self.results = []           # (ok, name, detail)
        self.numbers = {}
        self.problems = []          # lines explaining failures

    def verdict(self, ok, name, detail=""):
        self.results.append((ok, name, detail))

    def problem(self, msg):
        if len(self.problems) < 200:
            self.problems.append(msg)

    # --- faults -------------------------------------------------------------

    def check_faults(self):
        counts = {k: 0 for k in KINDS}
        for f in self.r.faults:
            counts[f["kind"]] = counts.get(f["kind"], 0) + 1
        self.numbers["faults"] = counts
        missing = [k for k in KINDS if counts.get(k, 0) == 0]
        self.verdict(not missing, "every fault kind was injected at least once",
                     "missing: " + ", ".join(missing) if missing else "%d faults" % len(self.r.faults))

    # --- terminal, lost, order ----------------------------------------------

    def check_batches(self):
        services, totals, log_violations = check_log.read_log(os.path.join(self.r.path, "ledger.log"))
        self.services = services
        expected = {}
        for s, b in self.r.enqueued:
            expected.setdefault(s, []).append(b)
        arrived = {}
        ledger_final = {}
        for sid, svc in services.items():
            for _, bid in svc.arrivals:
                arrived[bid] = sid
            for bid, (st, _) in svc.final.items():
                ledger_final[bid] = st.lower()
        n = len(self.r.enqueued)
        not_final = []
        lost = []
        committed = invalid = 0
        for s, b in self.r.enqueued:
            row = self.r.batches.get((s, b))
            status = row["status"] if row else None
            if status == "committed":
                committed += 1
            elif status == "invalid":
                invalid += 1
            if status not in FINAL:
                not_final.append((s, b, status))
            why = None
            if row is None:
                why = "missing from gridha.batches"
            elif status not in FINAL:
                why = "ended %s" % status
            elif b not in arrived:
                why = "%s in the database but never arrived at the ledger" % status
            elif ledger_final.get(b) != status:
                why = "%s in the database, %s at the ledger" % (status, ledger_final.get(b))
            if why:
                lost.append((s, b, why))
        extra = [k for k in self.r.batches if k not in set(self.r.enqueued)]
        self.numbers.update(batches=n, committed=committed, invalid=invalid,
                            lost=len(lost), not_final=len(not_final),
                            services=len(expected))
        self.verdict(n > 0 and not not_final and not extra,
                     "every enqueued batch reached a terminal status",
                     "%d batches, %d not final%s" % (n, len(not_final),
                                                     ", %d unknown to the producer" % len(extra) if extra else ""))
        for s, b, st in not_final[:20]:
            self.problem("not final: %s/%s is %s" % (s, b, st))
        self.verdict(n > 0 and not lost, "no batch lost", "%d lost" % len(lost))
        for s, b, why in lost[:20]:
            self.problem("lost: %s/%s %s" % (s, b, why))

        order = check_log.check_order(services, expected, False)
        order += check_log.check_in_flight(services, expected)
        order += log_violations
        self.numbers["order_violations"] = len(order)
        self.verdict(not order, "per-service arrival order at the ledger equals enqueue order",
                     "%d violations over %d services" % (len(order), len(expected)))
        for v in order[:20]:
            self.problem("order: " + v["message"])
        self.numbers["ledger"] = totals

    # --- fencing ------------------------------------------------------------

    def claim_history(self):
        """claim_history: service -> [(n, t, claimant, epoch)] from the audit."""
        hist = {}
        for e in self.r.claim_events:
            hist.setdefault(e["service_id"], []).append(
                (int(e["n"]), float(e["t"]), e["claimant"] or None, inum(e["epoch"]),
                 e["old_claimant"] or None, inum(e["old_epoch"])))
        return hist

    def check_fencing(self):
        bad = []
        hist = self.claim_history()
        self.epoch_owner = {}       # (service, epoch) -> claimant
        for sid, evs in hist.items():
            for (n, _t, cl, ep, old_cl, old_ep) in evs:
                if ep is not None and old_ep is not None and ep < old_ep:
                    bad.append("claim of %s: epoch went back from %d to %d (event %d)"
                               % (sid, old_ep, ep, n))
                if cl is not None and cl != old_cl and (ep is None or old_ep is None or ep <= old_ep):
                    bad.append("claim of %s: taken by %s without a new epoch (event %d)"
                               % (sid, cl, n))
                if cl is not None:
                    prev = self.epoch_owner.get((sid, ep))
                    if prev is not None and prev != cl:
                        bad.append("claim of %s: epoch %d held by %s and %s" % (sid, ep, prev, cl))
                    self.epoch_owner[(sid, ep)] = cl
        unattributed = 0
        handouts = 0
        writes = 0
        self.handouts = {}          # service -> [(t, instance, batch, epoch)]
        for e in self.r.batch_events:
            sid, bid = e["service_id"], e["batch_id"]
            writer = e["writer"] or None
            holder = e["claimant"] or None
            ep, hep = inum(e["epoch"]), inum(e["claim_epoch"])
            is_handout = e["status"] == "submitting"
            if is_handout:
                handouts += 1
                self.handouts.setdefault(sid, []).append((float(e["t"]), e["instance_id"], bid, ep))
                self.epoch_owner.setdefault((sid, ep), e["instance_id"])
                if e["instance_id"] != holder or ep != hep:
                    bad.append("hand-out of %s/%s at epoch %s to %s while %s held it at epoch %s"
                               % (sid, bid, ep, e["instance_id"], holder, hep))
            else:
                writes += 1
            if writer is None:
                unattributed += 1
                bad.append("change %s of %s/%s (%s -> %s) by an unknown session"
                           % (e["n"], sid, bid, e["old_status"], e["status"]))
            elif writer != holder:
                bad.append("change %s of %s/%s (%s -> %s) accepted from %s while %s held the service"
                           % (e["n"], sid, bid, e["old_status"], e["status"], writer, holder))
            if e["old_status"] == "submitting" and not is_handout and ep != hep:
                bad.append("report on %s/%s accepted at epoch %s while the claim was at epoch %s"
                           % (sid, bid, ep, hep))

        # The instances' own view: a client's report accepted although the
        # claim had moved past its epoch before the report was even sent.
        takes = {}                  # service -> [(t, epoch)] of takes
        for sid, evs in hist.items():
            takes[sid] = [(t, ep) for (_n, t, cl, ep, _o, _oe) in evs if cl is not None and ep is not None]
        client_bad = 0
        refused = {"RG001": 0, "RG002": 0}
        for iid, evs in self.r.clients.items():
            last_submit = {}
            for ev in evs:
                key = (ev.get("service"), ev.get("batch"), ev.get("epoch"))
                if ev.get("event") == "submit":
                    last_submit[key] = ev["t"]
                elif ev.get("event") == "refused":
                    if ev.get("sqlstate") in refused:
                        refused[ev["sqlstate"]] += 1
                elif ev.get("event") == "report" and ev.get("kind") == "submission":
                    t_sent = last_submit.get(key)
                    if t_sent is None or ev.get("epoch") is None:
                        continue
                    later = [t for (t, ep) in takes.get(ev["service"], []) if ep > ev["epoch"]]
                    if later and min(later) < t_sent - SLACK:
                        client_bad += 1
                        bad.append("client %s: report on %s/%s at epoch %s accepted, but epoch %s"
                                   " was taken %.2fs before the report was sent"
                                   % (iid, ev["service"], ev["batch"], ev["epoch"],
                                      min(ep for (t, ep) in takes[ev["service"]] if ep > ev["epoch"]),
                                      t_sent - min(later)))
        worker_refused = sum(1 for line in self.r.pglog
                             if "gridha worker dropped a batch" in line and "refused" in line)
        worker_stale = sum(1 for line in self.r.pglog
                           if "gridha worker dropped a batch" in line and "stale claim" in line)
        self.numbers.update(stale_refused_clients=refused["RG001"],
                            not_in_flight_refused_clients=refused["RG002"],
                            refused_workers=worker_refused, stale_refused_workers=worker_stale,
                            stale_accepted=len(bad), audited_handouts=handouts,
                            audited_writes=writes, unattributed=unattributed)
        self.verdict(not bad and handouts > 0,
                     "no two instances held a service at once with both writes accepted",
                     "%d hand-outs and %d reports audited, %d stale writes refused, %d accepted"
                     % (handouts, writes, refused["RG001"] + worker_stale, len(bad)))
        for b in bad[:20]:
            self.problem("fencing: " + b)

    def check_delay_path(self):
        """check_delay_path: each paused submitter caught mid-submission
        came back, tried its late write and had it refused."""
        tried = refused = 0
        bad = []
        for f in self.r.faults:
            if f["kind"] == "stop-client" and f.get("mid_submission") and f.get("batch"):
                tried += 1
                evs = self.r.clients.get(f["victim"], [])
                after = [e for e in evs if e.get("t", 0) >= f["t"] - SLACK
                         and e.get("batch") == f["batch"] and e.get("epoch") == f.get("epoch")
                         and e.get("event") in ("report", "refused")]
                took = any(ep > (f.get("epoch") or 0)
                           for (_t, _i, b, ep) in self.handouts.get(f.get("service"), [])
                           if b == f["batch"])
                if any(e["event"] == "refused" for e in after):
                    refused += 1
                elif not took:
                    # the claim never moved on (the batch was finished before
                    # the stop hit): no late write to refuse
                    tried -= 1
                else:
                    bad.append("client %s paused holding %s at epoch %s: no refusal logged (%s)"
                               % (f["victim"], f["batch"], f.get("epoch"),
                                  ", ".join(e["event"] for e in after) or "no report"))
            elif f["kind"] == "stop-worker" and f.get("mid_submission"):
                tried += 1
                pid = f.get("pid")
                pat = re.compile(r"\[%d\] .*gridha worker dropped a batch: .*refused" % pid)
                if any(pat.search(line) for line in self.r.pglog):
                    refused += 1
                else:
                    took = any(i != f["victim"] for (t, i, b, _ep)
                               in self.handouts.get(f.get("service"), [])
                               if b == f.get("batch") and t > f["t"])
                    if took:
                        bad.append("worker %s (pid %s) paused submitting %s: no refusal in the server log"
                                   % (f["victim"], pid, f.get("batch")))
                    else:
                        tried -= 1
        self.numbers.update(delay_tried=tried, delay_refused=refused)
        self.verdict(not bad, "every late write of a paused submitter was refused",
                     "%d of %d refused" % (refused, tried))
        for b in bad:
            self.problem("delay path: " + b)

    # --- duplicates ---------------------------------------------------------

    def check_duplicates(self):
        posts = {}                  # batch -> applied posts in order
        dups = []
        for ev in self.r.ledger:
            if ev.get("event") != "post" or ev.get("result") not in ("accepted", "duplicate"):
                continue
            bid = ev.get("batch_id")
            prior = posts.get(bid)
            if prior:
                dups.append((ev, prior[-1]))
            posts.setdefault(bid, []).append(ev)
        victims = [f for f in self.r.faults if f["kind"] in VICTIM_KINDS]
        restarts = [f for f in self.r.faults if f["kind"] == "restart"]
        causes = {}
        unexplained = []
        for d, p in dups:
            sid = d.get("service_id")
            i_d = self.epoch_owner.get((sid, d.get("epoch")))
            i_p = self.epoch_owner.get((sid, p.get("epoch")))
            lo, hi = p["t"] - SLACK, d["t"] + SLACK
            cause = None
            if p.get("stalled") is not None:
                cause = "stall"
            if cause is None:
                for f in victims:
                    if f["victim"] in (i_d, i_p) and f["t"] - SLACK <= hi and f["t_end"] + SLACK >= lo:
                        cause = f["kind"]
                        break
            if cause is None:
                for f in restarts:
                    if lo <= f.get("up", f["t_end"]) and f["t"] <= hi:
                        cause = "restart"
                        break
            if cause is None:
                unexplained.append((d, p, i_p, i_d))
            else:
                causes[cause] = causes.get(cause, 0) + 1
        self.numbers.update(duplicates=len(dups), duplicate_causes=causes,
                            unexplained=len(unexplained))
        self.verdict(not unexplained, "every duplicate POST is explained by a fault",
                     "%d duplicates, %d unexplained" % (len(dups), len(unexplained)))
        for d, p, i_p, i_d in unexplained[:20]:
            self.problem("duplicate: %s/%s posted at %.3f (epoch %s, %s) and again at %.3f"
                         " (epoch %s, %s) with no fault in between"
                         % (d.get("service_id"), d.get("batch_id"), p["t"], p.get("epoch"), i_p,
                            d["t"], d.get("epoch"), i_d))

    # --- failover -----------------------------------------------------------

    def failover(self):
        """failover: per victim fault kind, for each service the victim
        held, the time from the fault to the first hand-out by another
        instance, and to the first claim by another instance."""
        hist = self.claim_history()
        times = {}
        claims = {}
        for f in self.r.faults:
            if f["kind"] not in VICTIM_KINDS:
                continue
            for sid in f.get("held", []):
                first = next((t for (t, i, _b, _e) in self.handouts.get(sid, [])
                              if t > f["t"] and i != f["victim"]), None)
                if first is not None:
                    times.setdefault(f["kind"], []).append(first - f["t"])
                taken = next((t for (_n, t, cl, _e, _o, _oe) in hist.get(sid, [])
                              if t > f["t"] and cl is not None and cl != f["victim"]), None)
                if taken is not None:
                    claims.setdefault(f["kind"], []).append(taken - f["t"])
        self.numbers["failover"] = {
            k: {"services": len(v), "median": statistics.median(v), "max": max(v)}
            for k, v in times.items()}
        self.numbers["takeover"] = {
            k: {"services": len(v), "median": statistics.median(v), "max": max(v)}
            for k, v in claims.items()}

    # --- crashes ------------------------------------------------------------

    def check_crashes(self):
        pat = re.compile(r"terminated by signal (6|7|11)|PANIC:|TRAP:")
        hits = [line for line in self.r.pglog if pat.search(line)]
        self.verdict(bool(self.r.pglog) and not hits, "no server process crashed",
                     "%d crash lines" % len(hits))
        for h in hits[:10]:
            self.problem("crash: " + h)

    def run(self):
        self.check_faults()
        self.check_batches()
        self.check_fencing()
        self.check_delay_path()
        self.check_duplicates()
        self.failover()
        self.check_crashes()

    # --- output -------------------------------------------------------------

    def table(self):
        n = self.numbers
        fc = n["faults"]
        lines = []
        lines.append("| | |")
        lines.append("|---|---|")
        lines.append("| faults injected | %d: %s |" % (
            sum(fc.values()), ", ".join("%s %d" % (k, fc.get(k, 0)) for k in KINDS)))
        lines.append("| services / batches enqueued | %d / %d |" % (n["services"], n["batches"]))
        lines.append("| committed | %d (and %d invalid, as the ledger was told) |"
                     % (n["committed"], n["invalid"]))
        lines.append("| lost | %d |" % n["lost"])
        lines.append("| order violations | %d |" % n["order_violations"])
        causes = ", ".join("%s %d" % kv for kv in sorted(n["duplicate_causes"].items()))
        lines.append("| duplicate POSTs | %d (%s; unexplained %d) |"
                     % (n["duplicates"], causes or "none", n["unexplained"]))
        lines.append("| stale writes refused | %d (clients %d, workers %d); accepted: %d |"
                     % (n["stale_refused_clients"] + n["stale_refused_workers"],
                        n["stale_refused_clients"], n["stale_refused_workers"], n["stale_accepted"]))
        lines.append("| paused submitters' late writes refused | %d of %d |"
                     % (n["delay_refused"], n["delay_tried"]))
        lines.append("")
        lines.append("| failover, from the fault | services | first hand-out by another instance: median / max"
                     " | claim taken by another instance: median / max |")
        lines.append("|---|---:|---:|---:|")
        for k in VICTIM_KINDS:
            v = n["failover"].get(k)
            w = n["takeover"].get(k)
            lines.append("| %s | %d | %s | %s |" % (
                KIND_NAMES[k], v["services"] if v else 0,
                "%.1f s / %.1f s" % (v["median"], v["max"]) if v else "-",
                "%.1f s / %.1f s" % (w["median"], w["max"]) if w else "-"))
        return "\n".join(lines)


def main(argv):
    p = argparse.ArgumentParser(description="check a gridha fault-harness run")
    p.add_argument("run_dir")
    p.add_argument("--tap", action="store_true", help="one TAP line per property")
    p.add_argument("--json", action="store_true", help="the numbers as JSON too")
    p.add_argument("--hard-expiry", type=float, default=6)
    a = p.parse_args(argv)
    try:
        run = Run(a.run_dir)
        c = Checker(run, a.hard_expiry)
        c.run()
    except (OSError, ValueError, KeyError) as exc:
        print("not ok - ha: the run's history could be read (%s)" % exc)
        return 2
    print(c.table())
    print()
    for ok, name, detail in c.results:
        if a.tap:
            print("%s - ha: %s (%s)" % ("ok" if ok else "not ok", name, detail))
        else:
            print("%-4s %s (%s)" % ("ok" if ok else "FAIL", name, detail))
    for line in c.problems:
        print("# " + line)
    if a.json:
        print(json.dumps(c.numbers, indent=1, default=str))
    return 0 if all(ok for ok, _, _ in c.results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
