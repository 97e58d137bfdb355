#!/usr/bin/env python3
"""test/ha/check.py: the fault harness's checker. Reads the history a run of
test/ha/driver.py recorded and proves gridha's HA claims over it, then
prints the tables.

Sources (all in the run directory):
  run.json            the run: topology (single, replica, patroni), its
                      replication (sync, async), the fault kinds it had
  enqueued.tsv        what the producer enqueued (committed), in order
  ledger.log          the test ledger's log: every POST with its epoch and
                      attempt (gridha's X-Gridha-Epoch, X-Gridha-Attempt),
                      per-service arrival order, duplicates
  clients/*.log       each external instance's log: hand-outs, submissions,
                      reports, refusals (RG001 = stale claim), reconnections
  db_batches.csv      gridha.batches at the end (on the last primary)
  db_claim_events.csv, db_batch_events.csv   the database's own record of
                      every claim change and batch change, with the writer,
                      the holder of the service at that moment and the
                      timeline it was written on (test/ha/audit.sql); with
                      two servers this is the history that survived, the
                      last primary's
  db_instances.csv    every instance and its kind (client, worker)
  faults.jsonl        every fault injected, its victim and the services the
                      victim held; a failover or switchover its times (down,
                      promoted, rejoined, synced), the new timeline (tli),
                      how the old primary rejoined, and the acknowledged
                      enqueues the new primary lacked (lost_enqueues)
  nodes.jsonl         (two servers) each node's recovery state and its
                      'gridha worker' backends, sampled every second
  standby.jsonl       (two servers) the probes of the standby: its answer to
                      next_batch and enqueue, what was written, its workers
  postgres.log        the server log (every node's): workers' refused
                      writes ("gridha worker dropped a batch: ... refused"),
                      crashes

Properties (each one TAP line with --tap, prefixed with --name):
  faults        every fault kind of the run was injected at least once
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
                paused or terminated submitter (a stop-worker's short stops
                of a worker it never caught submitting included: each a
                SIGSTOP of that worker), or a server restart, between
                the batch's previous POST and the duplicate; or a failover or
                switchover while the batch was in flight (handed out before
                the fault, not yet final in the surviving history)
  crashes       no server process crashed (signal 6, 7, 11, PANIC, TRAP)
  With a failover or switchover in the run:
  epochs        epochs never repeat for a service: no (service, epoch) was
                ever handed to two instances (the audit's takes and
                hand-outs and every client's hand-outs, on every timeline,
                lost ones included); every take on timeline T > 1 gives an
                epoch >= (T - 1) << 40 and above every epoch any instance
                was handed (the audit, the clients' logs, the ledger's
                epochs) before the promotion that began T; a hand-out on T
                at a lower epoch is one that survived the promotion, by the
                instance that held that epoch before it (counted)
  With two servers:
  standby       workers run only on a primary: no sample of a node in
                recovery (before and after the count) shows a 'gridha
                worker' backend; after each promotion the new primary shows
                workers and worker instances hand out batches on its
                timeline
  probes        on the standby, gridha.next_batch refuses with SQLSTATE
                25006 "cannot execute next_batch() during recovery" and
                gridha.enqueue with 25006, neither the probe's instance nor
                its batch exists on any node afterwards, and no worker runs
  acked writes  (not with asynchronous replication, where it is only
                counted) nothing the database acknowledged was lost: every
                enqueue the producer saw commit is on the last primary,
                every hand-out that reached a client or the ledger and every
                report a client saw accepted is in the surviving history

Failover time: for each fault with a victim, for each service the victim
held, from the fault to the first hand-out of that service by another
instance (database time, same host clock); median and max per fault kind.
For a failover or switchover, from the fault to: the new primary accepting
writes, its first hand-out (by anyone, by a worker, by a client), each
service's first hand-out on it, and the old primary streaming again.

Usage: check.py [--tap] [--json] [--name NAME] [--hard-expiry S] RUN_DIR
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
         "503", "stall", "restart", "failover", "switchover")
# the kinds of a run.json without a list (runs before failovers existed)
OLD_KINDS = KINDS[:8]
DB_CHANGES = ("failover", "switchover")
KIND_NAMES = {
    "kill9-off": "kill -9 of a client, liveness off",
    "kill9-on": "kill -9 of a client, liveness on",
    "stop-client": "SIGSTOP of a client > hard_expiry",
    "term-worker": "pg_terminate_backend of a worker",
    "stop-worker": "SIGSTOP of a worker > hard_expiry",
    "503": "ledger 503 window",
    "stall": "ledger stall",
    "restart": "immediate server stop + start",
    "failover": "kill -9 of the primary, standby promoted",
    "switchover": "clean stop of the primary, standby promoted",
}
# A take on timeline T gives at least this epoch (gridha's claims_epoch_base).
TLI_SHIFT = 40
# The message of the standby probe (src/spi_util.c).
RECOVERY_MSG = "cannot execute next_batch() during recovery"
VICTIM_KINDS = ("kill9-off", "kill9-on", "stop-client", "term-worker", "stop-worker")
# Not faults of their own: a stop-worker's tries on a worker it never caught
# submitting (each a SIGSTOP as long as one look at gridha.workers). They
# explain duplicates of that worker's POSTs and nothing else.
TRY_KINDS = ("stop-tries",)
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
        self.instance_kind = {r["instance_id"]: r["kind"]
                              for r in read_csv(os.path.join(path, "db_instances.csv"))}
        self.nodes = read_jsonl(os.path.join(path, "nodes.jsonl"))
        self.probes = read_jsonl(os.path.join(path, "standby.jsonl"))
        self.db_changes = [f for f in self.faults if f["kind"] in DB_CHANGES]
        self.two_nodes = self.meta.get("topology", "single") != "single"
        self.async_replication = self.meta.get("replication") == "async"


class Checker:
    """Checker: the properties and the numbers of the table."""

    def __init__(self, run, hard_expiry):
        self.r = run
        self.epoch_problems = []
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
        kinds = self.r.meta.get("kinds") or list(OLD_KINDS)
        self.kinds = kinds
        counts = {k: 0 for k in kinds}
        tries = 0
        for f in self.r.faults:
            if f["kind"] in TRY_KINDS:
                tries += 1
                continue
            counts[f["kind"]] = counts.get(f["kind"], 0) + 1
        self.numbers["faults"] = counts
        self.numbers["stop_tries"] = tries
        missing = [k for k in kinds if counts.get(k, 0) == 0]
        self.verdict(not missing, "every fault kind was injected at least once",
                     "missing: " + ", ".join(missing) if missing else "%d faults" % sum(counts.values()))

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
        victims = [f for f in self.r.faults if f["kind"] in VICTIM_KINDS + TRY_KINDS]
        restarts = [f for f in self.r.faults if f["kind"] == "restart"]
        handed = self.handout_times()
        final_at = self.final_times()
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
                # a restart between the two POSTs, or between the later
                # POST's hand-out and that POST: its holder, reconnecting
                # with backoff, may post after the server is back and the
                # claim has moved on, even after the new holder's POST
                h_d = handed.get((d.get("batch_id"), d.get("epoch"), d.get("attempt")), d["t"])
                lo_r = min(lo, h_d - SLACK)
                for f in restarts:
                    if lo_r <= f.get("up", f["t_end"]) and f["t"] <= hi:
                        cause = "restart"
                        break
            if cause is None:
                # in flight at a failover or switchover: handed out (or
                # posted) before the fault, not final before it in the
                # history that survived, and posted again after it
                bid = d.get("batch_id")
                h = handed.get((bid, p.get("epoch"), p.get("attempt")), p["t"])
                fin = final_at.get(bid)
                for f in self.r.db_changes:
                    if (min(h, p["t"]) <= f["t"] + SLACK and d["t"] >= f["t"] - SLACK
                            and (fin is None or fin >= f["t"] - SLACK)):
                        cause = f["kind"]
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

    # --- indexes of the history -----------------------------------------

    def handout_times(self):
        """handout_times: (batch, epoch, attempt) -> the earliest time any
        source saw that hand-out (the audit, a client's log)."""
        out = {}

        def put(key, t):
            if key not in out or t < out[key]:
                out[key] = t
        for e in self.r.batch_events:
            if e["status"] == "submitting":
                put((e["batch_id"], inum(e["epoch"]), inum(e["attempts"])), float(e["t"]))
        for evs in self.r.clients.values():
            for ev in evs:
                if ev.get("event") == "handout":
                    put((ev.get("batch"), ev.get("epoch"), ev.get("attempt")), ev["t"])
        return out

    def final_times(self):
        """final_times: batch -> when the surviving history made it final."""
        out = {}
        for e in self.r.batch_events:
            if e["status"] in FINAL and e["batch_id"] not in out:
                out[e["batch_id"]] = float(e["t"])
        return out

    def promotion_of(self, tli):
        """promotion_of: the failover or switchover that began timeline tli."""
        return next((f for f in self.r.db_changes if f.get("tli") == tli), None)

    # --- epochs across promotions ---------------------------------------

    def check_epochs(self):
        """check_epochs: epochs never repeat for a service, across every
        timeline (see the module's docstring)."""
        if not self.r.db_changes:
            return
        bad = []
        # every (time, service, epoch, instance or None, source, timeline)
        # any source saw handed or taken; a client's or the ledger's
        # hand-out gets the timeline of the audit's record of it, None when
        # the surviving history has none (it was handed on a lost timeline)
        audit_tli = {}
        for e in self.r.batch_events:
            if e["status"] == "submitting":
                audit_tli.setdefault((e["batch_id"], inum(e["epoch"]), inum(e["attempts"])),
                                     inum(e.get("tli")))
        seen = []
        def is_take(e):
            return bool(e["claimant"] and e["epoch"]
                        and (e["epoch"] != e["old_epoch"] or e["claimant"] != e["old_claimant"]))

        for e in self.r.claim_events:
            if is_take(e):
                seen.append((float(e["t"]), e["service_id"], int(e["epoch"]), e["claimant"], "take",
                             inum(e.get("tli"))))
        for e in self.r.batch_events:
            if e["status"] == "submitting":
                seen.append((float(e["t"]), e["service_id"], inum(e["epoch"]), e["instance_id"],
                             "db hand-out", inum(e.get("tli"))))
        for iid, evs in self.r.clients.items():
            for ev in evs:
                if ev.get("event") == "handout" and ev.get("epoch") is not None:
                    seen.append((ev["t"], ev.get("service"), ev["epoch"], iid, "client hand-out",
                                 audit_tli.get((ev.get("batch"), ev["epoch"], ev.get("attempt")))))
        for ev in self.r.ledger:
            if ev.get("event") == "post" and ev.get("epoch") is not None and ev.get("service_id"):
                seen.append((ev["t"], ev["service_id"], ev["epoch"], None, "ledger",
                             audit_tli.get((ev.get("batch_id"), ev["epoch"], ev.get("attempt")))))

        def before(items, tli, f):
            """items seen before the promotion that began timeline tli: on
            an earlier timeline, or lost and seen before it."""
            return [x for x in items if x[2] is not None and (
                (x[5] is not None and x[5] < tli) or (x[5] is None and x[0] < f["promoted"]))]
        owners = {}
        for t, sid, ep, iid, src, _tli in seen:
            if iid is not None and ep is not None:
                owners.setdefault((sid, ep), set()).add(iid)
        for (sid, ep), who in sorted(owners.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
            if len(who) > 1:
                bad.append("service %s: epoch %d was handed to %d instances (%s)"
                           % (sid, ep, len(who), ", ".join(sorted(who))))
        # takes on a new timeline: above its base and above everything seen
        # before the promotion that began it
        takes = 0
        surviving = 0
        below_lost = 0
        by_service = {}
        for item in seen:
            by_service.setdefault(item[1], []).append(item)
        for e in self.r.claim_events:
            tli = inum(e.get("tli"))
            if not is_take(e) or not tli or tli < 2:
                continue
            takes += 1
            ep = int(e["epoch"])
            if ep < (tli - 1) << TLI_SHIFT:
                bad.append("service %s: epoch %d taken on timeline %d, below its base %d"
                           % (e["service_id"], ep, tli, (tli - 1) << TLI_SHIFT))
            f = self.promotion_of(tli)
            if f is None:
                continue
            prior = before(by_service.get(e["service_id"], []), tli, f)
            top = max((x[2] for x in prior), default=None)
            if top is not None and ep <= top:
                src = next(x for x in prior if x[2] == top)
                bad.append("service %s: epoch %d taken on timeline %d at %.3f, not above epoch %d"
                           " (%s, %s) seen before the promotion"
                           % (e["service_id"], ep, tli, float(e["t"]), top, src[4], src[3]))
        # hand-outs on a new timeline at an epoch seen before its promotion:
        # only the instance that held that epoch, under its surviving claim
        for e in self.r.batch_events:
            tli = inum(e.get("tli"))
            if e["status"] != "submitting" or not tli or tli < 2:
                continue
            f = self.promotion_of(tli)
            if f is None:
                continue
            ep = inum(e["epoch"])
            prior = before(by_service.get(e["service_id"], []), tli, f)
            top = max((x[2] for x in prior), default=None)
            if top is None or ep > top:
                continue
            held_before = {x[3] for x in prior if x[2] == ep and x[3] is not None}
            if held_before and held_before != {e["instance_id"]}:
                bad.append("service %s: hand-out of %s at epoch %d on timeline %d to %s, but"
                           " that epoch was %s's before the promotion"
                           % (e["service_id"], e["batch_id"], ep, tli, e["instance_id"],
                              ", ".join(sorted(held_before))))
            elif not held_before and not any(x[2] == ep for x in prior):
                # an epoch taken on this timeline that is not above the old
                # ones: reported with the take above
                continue
            else:
                surviving += 1
                if ep < top:
                    below_lost += 1
        self.numbers.update(epoch_takes_new_tli=takes, epoch_surviving_handouts=surviving,
                            epoch_below_lost=below_lost, epoch_pairs=len(owners))
        self.verdict(not bad, "epochs never repeat for a service across promotions",
                     "%d (service, epoch) pairs, %d takes on new timelines all above every earlier"
                     " epoch, %d hand-outs under claims that survived a promotion"
                     % (len(owners), takes, surviving) if not bad else "%d violations" % len(bad))
        for b in bad[:20]:
            self.problem("epochs: " + b)

    # --- the standby ------------------------------------------------------

    def check_standby(self):
        """check_standby: no worker on a node in recovery; workers serve
        on each new primary."""
        if not self.r.two_nodes:
            return
        bad = []
        samples = [n for n in self.r.nodes if n.get("recovery_before") and n.get("recovery_after")]
        for n in samples:
            if n.get("workers"):
                bad.append("%s in recovery at %.3f had %d gridha worker(s)"
                           % (n["node"], n["t"], n["workers"]))
        worker_first = []
        for f in self.r.db_changes:
            shown = [n for n in self.r.nodes if n["node"] == f.get("new_primary")
                     and n["t"] > f["promoted"] and not n.get("recovery_before")
                     and n.get("workers", 0) > 0]
            if not shown:
                bad.append("%s at %.3f: no gridha worker seen on the new primary %s"
                           % (f["kind"], f["t"], f.get("new_primary")))
            hand = [float(e["t"]) for e in self.r.batch_events
                    if e["status"] == "submitting" and inum(e.get("tli")) == f.get("tli")
                    and self.r.instance_kind.get(e["instance_id"]) == "worker"]
            if not hand:
                bad.append("%s at %.3f: no hand-out to a worker on timeline %s"
                           % (f["kind"], f["t"], f.get("tli")))
            else:
                worker_first.append(min(hand) - f["t"])
        self.numbers.update(standby_samples=len(samples),
                            primary_samples=len(self.r.nodes) - len(samples))
        self.verdict(not bad and bool(samples), "workers run only on the primary",
                     "%d samples of a node in recovery, %d with a worker; workers on each of %d"
                     " new primaries" % (len(samples), sum(1 for n in samples if n.get("workers")),
                                          len(self.r.db_changes)))
        for b in bad[:20]:
            self.problem("standby: " + b)

    def check_probes(self):
        """check_probes: the standby refuses gridha's writes, writes
        nothing, runs no worker."""
        if not self.r.two_nodes:
            return
        bad = []
        for pr in self.r.probes:
            where = "%s (%s)" % (pr.get("node"), pr.get("when"))
            nb = pr.get("next_batch") or {}
            en = pr.get("enqueue") or {}
            if pr.get("in_recovery") is not True:
                bad.append("%s: not in recovery when probed" % where)
            if nb.get("sqlstate") != "25006" or nb.get("message") != RECOVERY_MSG:
                bad.append("%s: next_batch answered %s %r" % (where, nb.get("sqlstate"), nb.get("message")))
            if en.get("sqlstate") != "25006":
                bad.append("%s: enqueue answered %s %r" % (where, en.get("sqlstate"), en.get("message")))
            if pr.get("written") is None or any(w != 0 for w in pr.get("written")):
                bad.append("%s: the probe's rows on the nodes: %s" % (where, pr.get("written")))
            if pr.get("workers") != 0:
                bad.append("%s: %s gridha worker(s) on the standby" % (where, pr.get("workers")))
        self.numbers["probes"] = len(self.r.probes)
        self.verdict(not bad and bool(self.r.probes),
                     "the standby refuses gridha's writes with 25006 and runs no worker",
                     "%d probes: next_batch \"%s\", enqueue 25006, nothing written"
                     % (len(self.r.probes), RECOVERY_MSG) if not bad else "%d problems" % len(bad))
        for b in bad[:20]:
            self.problem("probe: " + b)

    # --- acknowledged writes ----------------------------------------------

    def check_acked(self):
        """check_acked: what the database acknowledged and the surviving
        history lacks: enqueues, hand-outs, reports."""
        lost_enq = sum(int(f.get("lost_enqueues") or 0) for f in self.r.db_changes)
        reenq = sum(int(f.get("reenqueued") or 0) for f in self.r.db_changes)
        db_hand = {(e["batch_id"], inum(e["epoch"]), inum(e["attempts"]))
                   for e in self.r.batch_events if e["status"] == "submitting"}
        db_change = {(e["batch_id"], inum(e["epoch"]), e["status"]) for e in self.r.batch_events}
        db_status = {(e["batch_id"], e["status"]) for e in self.r.batch_events}
        lost_hand_clients = set()
        lost_reports = []
        for iid, evs in self.r.clients.items():
            for ev in evs:
                key = (ev.get("batch"), ev.get("epoch"), ev.get("attempt"))
                if ev.get("event") == "handout" and key not in db_hand:
                    lost_hand_clients.add(key)
                elif ev.get("event") == "report" and ev.get("kind") == "submission":
                    if (ev.get("batch"), ev.get("epoch"), ev.get("result")) not in db_change:
                        lost_reports.append((iid, ev))
                elif (ev.get("event") == "report" and ev.get("kind") == "status"
                      and ev.get("result") in FINAL):
                    if (ev.get("batch"), ev.get("result")) not in db_status:
                        lost_reports.append((iid, ev))
        lost_hand_ledger = set()
        for ev in self.r.ledger:
            if ev.get("event") == "post" and ev.get("epoch") is not None:
                key = (ev.get("batch_id"), ev.get("epoch"), ev.get("attempt"))
                if key not in db_hand and key not in lost_hand_clients:
                    lost_hand_ledger.add(key)
        self.numbers.update(lost_enqueues=lost_enq, reenqueued=reenq,
                            lost_handouts=len(lost_hand_clients | lost_hand_ledger),
                            lost_handouts_clients=len(lost_hand_clients),
                            lost_reports=len(lost_reports))
        total = lost_enq + len(lost_hand_clients | lost_hand_ledger) + len(lost_reports)
        detail = ("%d enqueues, %d hand-outs (%d seen by clients, %d only at the ledger),"
                  " %d reports" % (lost_enq, len(lost_hand_clients | lost_hand_ledger),
                                   len(lost_hand_clients), len(lost_hand_ledger), len(lost_reports)))
        if self.r.async_replication:
            return
        self.verdict(total == 0, "nothing the database acknowledged was lost", detail + " lost")
        for key in sorted(lost_hand_clients | lost_hand_ledger, key=str)[:10]:
            self.problem("acked: hand-out of %s at epoch %s attempt %s is not in the history" % key)
        for iid, ev in lost_reports[:10]:
            self.problem("acked: %s's report on %s at epoch %s (%s) is not in the history"
                         % (iid, ev.get("batch"), ev.get("epoch"), ev.get("result")))

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

        # a failover or switchover: from the fault to each step
        def stat(v):
            return {"n": len(v), "median": statistics.median(v), "max": max(v)} if v else None
        db = {}
        for kind in DB_CHANGES:
            fs = [f for f in self.r.db_changes if f["kind"] == kind]
            if not fs:
                continue
            steps = {"promoted": [], "first": [], "first_worker": [], "first_client": [],
                     "reconnected": [], "services": [], "rejoined": []}
            how = {}
            for f in fs:
                t0 = f["t"]
                steps["promoted"].append(f["promoted"] - t0)
                if f.get("rejoined"):
                    steps["rejoined"].append(f["rejoined"] - t0)
                how[f.get("rejoin")] = how.get(f.get("rejoin"), 0) + 1
                on_new = [e for e in self.r.batch_events if e["status"] == "submitting"
                          and inum(e.get("tli")) == f.get("tli")]
                if not on_new:
                    continue
                steps["first"].append(min(float(e["t"]) for e in on_new) - t0)
                for who in ("worker", "client"):
                    ts = [float(e["t"]) for e in on_new
                          if (self.r.instance_kind.get(e["instance_id"]) == "worker") == (who == "worker")]
                    if ts:
                        steps["first_" + who].append(min(ts) - t0)
                # each client that lost its connection with the fault: when
                # it was connected again (to the new primary)
                for evs in self.r.clients.values():
                    lost = [ev["t"] for ev in evs if ev.get("event") == "disconnected"
                            and f["t"] - SLACK <= ev["t"] <= f.get("t_end", f["t"])]
                    if not lost:
                        continue
                    back = [ev["t"] for ev in evs if ev.get("event") == "connected"
                            and ev["t"] > min(lost)]
                    if back:
                        steps["reconnected"].append(min(back) - t0)
                first_of = {}
                for e in on_new:
                    first_of.setdefault(e["service_id"], float(e["t"]))
                steps["services"].extend(t - t0 for t in first_of.values())
            db[kind] = {k: stat(v) for k, v in steps.items()}
            db[kind]["faults"] = len(fs)
            db[kind]["rejoin"] = how
        self.numbers["db_failover"] = db

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
        self.check_epochs()
        self.check_standby()
        self.check_probes()
        self.check_acked()
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
            sum(fc.values()), ", ".join("%s %d" % (k, fc.get(k, 0)) for k in self.kinds)))
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
        if self.r.two_nodes:
            lines.append("| topology | %s, %s replication |"
                         % (self.r.meta.get("topology"), self.r.meta.get("replication")))
        if self.r.db_changes:
            tlis = [f.get("tli") for f in self.r.db_changes]
            lines.append("| promotions | %d (timelines %s); old primary back by %s |" % (
                len(self.r.db_changes), " → ".join(str(t) for t in [1] + tlis),
                ", ".join("%s %d" % kv for kv in sorted(self._rejoins().items()))))
            lines.append("| acknowledged writes lost with the old primary | %d enqueues (%d enqueued"
                         " again), %d hand-outs (%d seen by clients), %d reports |"
                         % (n["lost_enqueues"], n["reenqueued"], n["lost_handouts"],
                            n["lost_handouts_clients"], n["lost_reports"]))
            if "epoch_pairs" in n:
                lines.append("| epochs | %d (service, epoch) pairs, none handed to two instances;"
                             " %d takes on new timelines, all above every earlier epoch; %d hand-outs"
                             " under a claim that survived a promotion (%d below an epoch handed"
                             " on a lost timeline) |"
                             % (n["epoch_pairs"], n["epoch_takes_new_tli"],
                                n["epoch_surviving_handouts"], n["epoch_below_lost"]))
        if self.r.two_nodes:
            lines.append("| workers on a standby | 0 expected: %d in %d samples of a node in recovery;"
                         " standby probes %d |"
                         % (sum(1 for x in self.r.nodes if x.get("recovery_before")
                                and x.get("recovery_after") and x.get("workers")),
                            n.get("standby_samples", 0), n.get("probes", 0)))
        victim_kinds = [k for k in VICTIM_KINDS if k in self.kinds]
        if victim_kinds:
            lines.append("")
            lines.append("| failover, from the fault | services | first hand-out by another instance:"
                         " median / max | claim taken by another instance: median / max |")
            lines.append("|---|---:|---:|---:|")
        for k in victim_kinds:
            v = n["failover"].get(k)
            w = n["takeover"].get(k)
            lines.append("| %s | %d | %s | %s |" % (
                KIND_NAMES[k], v["services"] if v else 0,
                "%.1f s / %.1f s" % (v["median"], v["max"]) if v else "-",
                "%.1f s / %.1f s" % (w["median"], w["max"]) if w else "-"))
        db = n.get("db_failover") or {}
        if db:
            lines.append("")
            lines.append("| database failover, from the fault | faults | new primary writable"
                         " | first hand-out on it | first by a worker | clients reconnected"
                         " | first by a client | each service's first hand-out on it"
                         " | old primary streaming again |")
            lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")

            def ms(v):
                return "%.1f s / %.1f s" % (v["median"], v["max"]) if v else "-"
            for kind in DB_CHANGES:
                v = db.get(kind)
                if not v:
                    continue
                lines.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
                    KIND_NAMES[kind], v["faults"], ms(v["promoted"]), ms(v["first"]),
                    ms(v["first_worker"]), ms(v["reconnected"]), ms(v["first_client"]),
                    ms(v["services"]), ms(v["rejoined"])))
            lines.append("")
            lines.append("(median / max over the faults; clients over every client of every"
                         " fault; services over every service of every fault)")
        return "\n".join(lines)

    def _rejoins(self):
        how = {}
        for f in self.r.db_changes:
            how[f.get("rejoin")] = how.get(f.get("rejoin"), 0) + 1
        return how


def main(argv):
    p = argparse.ArgumentParser(description="check a gridha fault-harness run")
    p.add_argument("run_dir")
    p.add_argument("--tap", action="store_true", help="one TAP line per property")
    p.add_argument("--json", action="store_true", help="the numbers as JSON too")
    p.add_argument("--hard-expiry", type=float, default=6)
    p.add_argument("--name", default="ha", help="the TAP lines' prefix")
    a = p.parse_args(argv)
    try:
        run = Run(a.run_dir)
        c = Checker(run, a.hard_expiry)
        c.run()
    except (OSError, ValueError, KeyError) as exc:
        print("not ok - %s: the run's history could be read (%s)" % (a.name, exc))
        return 2
    print(c.table())
    print()
    for ok, name, detail in c.results:
        if a.tap:
            print("%s - %s: %s (%s)" % ("ok" if ok else "not ok", a.name, name, detail))
        else:
            print("%-4s %s (%s)" % ("ok" if ok else "FAIL", name, detail))
    for line in c.problems:
        print("# " + line)
    if a.json:
        print(json.dumps(c.numbers, indent=1, default=str))
    return 0 if all(ok for ok, _, _ in c.results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
