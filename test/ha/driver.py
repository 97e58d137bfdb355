#!/usr/bin/env python3
"""test/ha/driver.py: the fault harness's driver. Runs a workload over the
harness's cluster, injects faults on a schedule, and records the history the
checker (check.py) reads. test/ha/run.sh starts the cluster and calls it.

Words used here:
  run directory   where everything is recorded (--out): enqueued.tsv,
                  faults.jsonl, instances.jsonl, clients/*.log, ledger.log,
                  db_*.csv, driver.log
  client          an external instance: client/gridha-client, started with
                  its own instance id (also its PGAPPNAME, so audit.sql can
                  name it as a writer) and its JSON-lines log
  liveness        whether a client's session runs with
                  gridha.session_liveness on or off (PGOPTIONS)
  worker          a background-worker instance inside the server
  producer        the thread that enqueues one batch per service per round;
                  a round is retried with the same ids until it commits, so
                  enqueued.tsv lists exactly the committed batches, in
                  enqueue order
  fault           one injection, logged to faults.jsonl with its kind, its
                  start and end (wall time), its victim instance and the
                  services the victim held when it struck
  fault kinds     kill9-off, kill9-on (kill -9 of a client with liveness off
                  or on, and a new client started in its place), stop-client
                  (SIGSTOP longer than hard_expiry, then SIGCONT), term-worker
                  (pg_terminate_backend, and a new worker started), stop-worker
                  (SIGSTOP of a worker backend longer than hard_expiry), 503
                  (ledger answers 503), stall (ledger holds requests longer
                  than the submit timeout), restart (pg_ctl stop -m immediate,
                  then start)
  schedule        first every kind once in a seeded random order, then
                  random kinds until --duration has passed; --duration 0 runs
                  the first round only

Every loop is bounded; every process it starts is stopped before it exits,
on any exit. Python 3 standard library only.
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

KINDS = ("kill9-off", "kill9-on", "stop-client", "term-worker", "stop-worker",
         "503", "stall", "restart")


def now():
    return time.time()


class Driver:
    """Driver: one harness run."""

    def __init__(self, args):
        self.a = args
        self.out = args.out
        self.rng = random.Random(args.seed)
        self.db = args.database
        self.stop_producing = threading.Event()
        self.lock = threading.Lock()
        self.clients = []           # dicts: proc, id, label, liveness, log
        self.stopped = []           # pids we SIGSTOPped and must SIGCONT
        self.ledger = None
        self.ledger_url = None
        self.producer = None
        self.rounds = 0
        self.n_clients = 0
        self.n_workers = 0
        self.faults = open(os.path.join(self.out, "faults.jsonl"), "a", encoding="utf-8")
        self.instances = open(os.path.join(self.out, "instances.jsonl"), "a", encoding="utf-8")
        self.enqueued = open(os.path.join(self.out, "enqueued.tsv"), "a", encoding="utf-8")
        os.makedirs(os.path.join(self.out, "clients"), exist_ok=True)

    # --- plumbing -----------------------------------------------------------

    def say(self, msg):
        line = "[%s] ha: %s" % (time.strftime("%H:%M:%S"), msg)
        print(line, file=sys.stderr, flush=True)
        with open(os.path.join(self.out, "driver.log"), "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def psql(self, sql, db=None, timeout=30, check=True):
        """psql: run SQL, return stdout (unaligned, tuples only); raises
        RuntimeError on failure when check is set, else returns None."""
        cmd = [os.path.join(self.a.bindir, "psql"), "-X", "-q", "-A", "-t",
               "-v", "ON_ERROR_STOP=1", "-d", db or self.db, "-c", sql]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                               check=False)
        except subprocess.TimeoutExpired:
            if check:
                raise RuntimeError("psql timed out: %s" % sql[:80]) from None
            return None
        if r.returncode != 0:
            if check:
                raise RuntimeError("psql failed: %s: %s" % (sql[:80], r.stderr.strip()))
            return None
        return r.stdout

    def as_pg(self, cmd):
        """as_pg: a server-side command as the postgres user."""
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--"] + cmd
        return cmd

    def record(self, fh, obj):
        with self.lock:
            fh.write(json.dumps(obj, separators=(",", ":")) + "\n")
            fh.flush()

    def control(self, body):
        """control: POST /control to the ledger."""
        req = urllib.request.Request(self.ledger_url + "/control",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()

    def wait_until(self, seconds, fn, step=0.2):
        deadline = now() + seconds
        while now() < deadline:
            if fn():
                return True
            time.sleep(step)
        return fn()

    # --- set-up -------------------------------------------------------------

    def start_ledger(self):
        port_file = os.path.join(self.out, "ledger.port")
        self.ledger = subprocess.Popen(
            [sys.executable, os.path.join(self.a.repo, "test/dlt/ledger.py"),
             "--port", "0", "--port-file", port_file,
             "--log", os.path.join(self.out, "ledger.log"),
             "--commit-delay", str(self.a.commit_delay),
             "--invalid-pattern=-inv$",
             "--max-lifetime", str(self.a.duration + 900)],
            stdout=open(os.path.join(self.out, "ledger.out"), "w"),
            stderr=subprocess.STDOUT)
        if not self.wait_until(15, lambda: os.path.exists(port_file)):
            raise RuntimeError("the test ledger did not start")
        with open(port_file, encoding="ascii") as fh:
            self.ledger_url = "http://127.0.0.1:%d" % int(fh.read())

    def setup_db(self):
        self.psql("DROP DATABASE IF EXISTS %s" % self.db, db="postgres")
        self.psql("CREATE DATABASE %s" % self.db, db="postgres")
        self.psql("CREATE EXTENSION gridha")
        with open(os.path.join(self.a.repo, "test/ha/audit.sql"), encoding="utf-8") as fh:
            self.psql(fh.read())
        self.psql("UPDATE gridha.targets SET submit_url = '%s/batches/{service_id}/{batch_id}',"
                  " status_url = '%s/batch_statuses?id={batch_ids}' WHERE target = 'default'"
                  % (self.ledger_url, self.ledger_url))

    # --- instances ----------------------------------------------------------

    def start_client(self, liveness):
        """start_client: a new external instance with its own id."""
        self.n_clients += 1
        iid = str(uuid.uuid4())
        label = "ha-c%d-%s" % (self.n_clients, "on" if liveness else "off")
        log = os.path.join(self.out, "clients", label + ".log")
        env = dict(os.environ)
        env.update(PGDATABASE=self.db, PGAPPNAME=iid,
                   PGOPTIONS="-c gridha.session_liveness=%s" % ("on" if liveness else "off"))
        proc = subprocess.Popen(
            [os.path.join(self.a.repo, "client/gridha-client"), "--instance-id", iid,
             "--label", label, "--log", log, "--idle-sleep-ms", "100",
             "--monitor-interval-ms", "250", "--submit-timeout-ms", str(self.a.submit_timeout_ms)],
            env=env, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.out, "clients", label + ".err"), "w"))
        c = {"proc": proc, "id": iid, "label": label, "liveness": liveness, "log": log}
        self.clients.append(c)
        self.record(self.instances, {"t": now(), "event": "start", "kind": "client",
                                     "instance": iid, "label": label, "pid": proc.pid,
                                     "liveness": liveness, "log": os.path.basename(log)})
        return c

    def workers(self):
        """workers: the running worker instances: [(instance_id, pid, state)]."""
        out = self.psql("SELECT instance_id, pid, state FROM gridha.workers"
                        " WHERE instance_id IS NOT NULL", check=False, timeout=10)
        rows = []
        for line in (out or "").splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[1]:
                rows.append((parts[0], int(parts[1]), parts[2]))
        return rows

    def top_up_workers(self):
        """top_up_workers: start dynamic workers until --workers run."""
        for _ in range(self.a.workers):
            if len(self.workers()) >= self.a.workers:
                return
            self.n_workers += 1
            label = "ha-w%d" % self.n_workers
            iid = self.psql("SELECT gridha.start_worker('%s')" % label, check=False)
            self.record(self.instances, {"t": now(), "event": "start", "kind": "worker",
                                         "instance": (iid or "").strip(), "label": label})

    def held(self, instance_id):
        out = self.psql("SELECT service_id FROM gridha.service_claims WHERE claimant = '%s'"
                        % instance_id, check=False, timeout=10)
        return sorted((out or "").split())

    # --- the workload -------------------------------------------------------

    def produce(self):
        """produce: one batch per service every --round-interval seconds until
        told to stop; a failed round is retried with the same ids."""
        services = ["svc-%02d" % i for i in range(self.a.services)]
        while not self.stop_producing.is_set():
            r = self.rounds + 1
            ids = []
            for s in services:
                suffix = "-inv" if r % 37 == 5 else ""
                ids.append((s, "%s-%05d%s" % (s, r, suffix)))
            values = ",".join("('%s','%s')" % p for p in ids)
            sql = ("INSERT INTO gridha.batches (service_id, batch_id, payload)"
                   " SELECT v.s, v.b, convert_to(v.b, 'UTF8')"
                   "   FROM (VALUES %s) v(s, b)"
                   "  WHERE NOT EXISTS (SELECT 1 FROM gridha.batches x"
                   "                     WHERE x.service_id = v.s AND x.batch_id = v.b)"
                   % values)
            for _ in range(600):        # bounded: about 5 minutes of outage
                if self.psql(sql, check=False, timeout=20) is not None:
                    break
                time.sleep(0.5)
            else:
                self.say("producer: round %d never committed; stopping" % r)
                return
            t = now()
            with self.lock:
                for s, b in ids:
                    self.enqueued.write("%s\t%s\t%.3f\n" % (s, b, t))
                self.enqueued.flush()
            self.rounds = r
            self.stop_producing.wait(self.a.round_interval)

    # --- faults -------------------------------------------------------------

    def fault(self, kind, t0, **fields):
        rec = {"kind": kind, "t": t0, "t_end": now()}
        rec.update(fields)
        self.record(self.faults, rec)
        self.say("fault %s %s" % (kind, ", ".join("%s=%s" % (k, v) for k, v in fields.items()
                                                   if k != "held")))

    def live_clients(self, liveness=None):
        return [c for c in self.clients if c["proc"].poll() is None
                and (liveness is None or c["liveness"] == liveness)]

    def kill9(self, liveness):
        victims = self.live_clients(liveness)
        if not victims:
            self.start_client(liveness)
            time.sleep(2)
            victims = self.live_clients(liveness)
        c = self.rng.choice(victims)
        held = self.held(c["id"])
        t0 = now()
        c["proc"].kill()
        c["proc"].wait()
        self.record(self.instances, {"t": t0, "event": "killed", "instance": c["id"]})
        new = self.start_client(liveness)
        self.fault("kill9-" + ("on" if liveness else "off"), t0, victim=c["id"],
                   pid=c["proc"].pid, liveness=liveness, held=held, replacement=new["id"])

    @staticmethod
    def last_event(path):
        """last_event: the last line of a client log, parsed; None if none."""
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - 8192))
                lines = fh.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return None
        for line in reversed(lines):
            try:
                return json.loads(line)
            except ValueError:
                continue
        return None

    def pause(self, pid, is_mid):
        """pause: SIGSTOP pid at a moment when is_mid() says it is in the
        middle of a submission; tries a bounded number of times. Returns
        whether the stop caught it mid-submission (it stays stopped either
        way)."""
        for _ in range(300):
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                return False
            self.stopped.append(pid)
            if is_mid():
                return True
            os.kill(pid, signal.SIGCONT)
            self.stopped.remove(pid)
            time.sleep(self.rng.uniform(0.002, 0.03))
        os.kill(pid, signal.SIGSTOP)
        self.stopped.append(pid)
        return False

    def resume(self, pid):
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        if pid in self.stopped:
            self.stopped.remove(pid)

    def stop_client(self):
        c = self.rng.choice(self.live_clients())
        pid = c["proc"].pid

        def is_mid():
            ev = self.last_event(c["log"])
            return ev is not None and ev.get("event") in ("handout", "submit")

        mid = self.pause(pid, is_mid)
        t0 = now()
        ev = self.last_event(c["log"]) or {}
        held = self.held(c["id"])
        time.sleep(self.a.stop_seconds)
        self.resume(pid)
        self.fault("stop-client", t0, victim=c["id"], pid=pid, liveness=c["liveness"],
                   held=held, mid_submission=mid, service=ev.get("service"),
                   batch=ev.get("batch"), epoch=ev.get("epoch"))

    def term_worker(self):
        ws = self.workers()
        if not ws:
            self.top_up_workers()
            return
        iid, pid, _ = self.rng.choice(ws)
        held = self.held(iid)
        t0 = now()
        self.psql("SELECT pg_terminate_backend(%d)" % pid, check=False)
        self.wait_until(20, lambda: pid not in [w[1] for w in self.workers()])
        self.top_up_workers()
        self.fault("term-worker", t0, victim=iid, pid=pid, held=held)

    def stop_worker(self):
        ws = self.workers()
        if not ws:
            self.top_up_workers()
            return
        iid, pid, _ = self.rng.choice(ws)
        # only while it submits (outside any transaction): a backend stopped
        # inside one could hold locks everyone waits for
        def is_mid():
            return any(w[1] == pid and w[2] == "submitting" for w in self.workers())
        mid = self.pause(pid, is_mid)
        if not mid:
            # never caught submitting: do not keep a backend stopped that may
            # hold locks; count the attempt, not a fault
            self.resume(pid)
            self.say("stop-worker: worker %d never caught submitting; skipped" % pid)
            return
        t0 = now()
        row = self.psql("SELECT service_id, batch_id FROM gridha.workers WHERE pid = %d" % pid,
                        check=False) or ""
        held = self.held(iid)
        time.sleep(self.a.stop_seconds)
        self.resume(pid)
        svc, _, batch = row.strip().partition("|")
        self.fault("stop-worker", t0, victim=iid, pid=pid, held=held, mid_submission=mid,
                   service=svc or None, batch=batch or None)

    def fail_503(self):
        t0 = now()
        self.control({"fail_503_for": self.a.window})
        time.sleep(self.a.window)
        self.fault("503", t0, seconds=self.a.window)

    def stall(self):
        t0 = now()
        # the first stall loses answers to applied POSTs (duplicates follow);
        # later ones either way
        self.n_stalls = getattr(self, "n_stalls", 0) + 1
        apply = "before" if self.n_stalls == 1 or self.rng.random() < 0.6 else "after"
        hold = self.a.submit_timeout_ms / 1000.0 + 1
        self.control({"stall_for": self.a.window, "stall_seconds": hold, "stall_apply": apply})
        time.sleep(self.a.window + hold)
        self.fault("stall", t0, seconds=self.a.window, hold=hold, apply=apply)

    def restart(self):
        pg_ctl = os.path.join(self.a.bindir, "pg_ctl")
        t0 = now()
        subprocess.run(self.as_pg([pg_ctl, "stop", "-w", "-t", "30", "-m", "immediate",
                                   "-D", self.a.pgdata]),
                       capture_output=True, check=False, timeout=60)
        t_down = now()
        time.sleep(1)
        r = subprocess.run(self.as_pg([pg_ctl, "start", "-w", "-t", "60", "-D", self.a.pgdata,
                                       "-l", self.a.pglog]),
                           capture_output=True, check=False, timeout=90)
        if r.returncode != 0:
            raise RuntimeError("the server did not start again: %s" % r.stderr)
        self.wait_until(30, lambda: self.psql("SELECT 1", check=False) is not None)
        t_up = now()
        # static workers come back by themselves; dynamic ones do not
        self.wait_until(10, lambda: len(self.workers()) >= min(self.a.workers, self.a.static_workers))
        self.top_up_workers()
        self.fault("restart", t0, down=t_down, up=t_up)

    def inject(self, kind):
        if kind == "kill9-off":
            self.kill9(False)
        elif kind == "kill9-on":
            self.kill9(True)
        elif kind == "stop-client":
            self.stop_client()
        elif kind == "term-worker":
            self.term_worker()
        elif kind == "stop-worker":
            self.stop_worker()
        elif kind == "503":
            self.fail_503()
        elif kind == "stall":
            self.stall()
        elif kind == "restart":
            self.restart()

    # --- the run ------------------------------------------------------------

    def run(self):
        self.say("run directory %s, seed %d" % (self.out, self.a.seed))
        self.start_ledger()
        self.setup_db()
        self.top_up_workers()
        for i in range(self.a.clients):
            self.start_client(i % 2 == 1)
        self.producer = threading.Thread(target=self.produce, name="producer", daemon=True)
        self.producer.start()
        time.sleep(self.a.warmup)

        first = list(KINDS)
        self.rng.shuffle(first)
        t_end = now() + self.a.duration
        n = 0
        while True:
            if first:
                kind = first.pop(0)
            elif now() < t_end:
                kind = self.rng.choice(KINDS)
            else:
                break
            n += 1
            if n > 10000:           # bounded, whatever the duration
                break
            self.inject(kind)
            # a quiet gap, so that failover and recovery show
            time.sleep(self.rng.uniform(self.a.gap, self.a.gap * 1.5))

        self.say("faults done; draining")
        self.stop_producing.set()
        self.producer.join(timeout=330)
        left = None

        def drained():
            nonlocal left
            out = self.psql("SELECT count(*) FROM gridha.batches"
                            " WHERE status NOT IN ('committed', 'invalid')", check=False)
            left = int(out) if out and out.strip().isdigit() else None
            return left == 0
        self.wait_until(self.a.drain_timeout, drained, step=0.5)
        self.say("drained: %s batches not final" % left)

    def dump(self):
        """dump: the database's side of the history, as CSV files."""
        queries = {
            "db_batches.csv": "SELECT service_id, batch_id, seq, status, epoch, attempts,"
                              " instance_id FROM gridha.batches ORDER BY service_id, seq",
            "db_claim_events.csv": "SELECT n, extract(epoch FROM at) AS t, service_id,"
                                   " old_claimant, claimant, old_epoch, epoch"
                                   " FROM ha.claim_events ORDER BY n",
            "db_batch_events.csv": "SELECT n, extract(epoch FROM at) AS t, service_id, batch_id,"
                                   " old_status, status, epoch, attempts, instance_id, writer,"
                                   " claimant, claim_epoch FROM ha.batch_events ORDER BY n",
            "db_instances.csv": "SELECT instance_id, label, kind FROM gridha.instances",
        }
        for name, q in queries.items():
            out = self.psql("COPY (%s) TO STDOUT WITH (FORMAT csv, HEADER)" % q,
                            check=False, timeout=120)
            with open(os.path.join(self.out, name), "w", encoding="utf-8") as fh:
                fh.write(out or "")

    def shutdown(self):
        """shutdown: stop everything this run started (safe to call twice)."""
        self.stop_producing.set()
        for pid in list(self.stopped):
            self.resume(pid)
        for c in self.clients:
            if c["proc"].poll() is None:
                c["proc"].send_signal(signal.SIGTERM)
        deadline = now() + 20
        for c in self.clients:
            try:
                c["proc"].wait(timeout=max(0.1, deadline - now()))
            except subprocess.TimeoutExpired:
                c["proc"].kill()
                c["proc"].wait()
            self.record(self.instances, {"t": now(), "event": "exit", "instance": c["id"],
                                         "status": c["proc"].returncode})
        if self.ledger is not None and self.ledger.poll() is None:
            self.ledger.send_signal(signal.SIGTERM)
            try:
                self.ledger.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.ledger.kill()
                self.ledger.wait()


def parse_args(argv):
    p = argparse.ArgumentParser(description="gridha fault harness driver")
    p.add_argument("--out", required=True)
    p.add_argument("--repo", required=True)
    p.add_argument("--bindir", required=True)
    p.add_argument("--pgdata", required=True)
    p.add_argument("--pglog", required=True)
    p.add_argument("--database", default="gridha_ha")
    p.add_argument("--duration", type=float, default=0,
                   help="seconds of random faults after the first round (0: one round)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--services", type=int, default=60)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--static-workers", type=int, default=3)
    p.add_argument("--round-interval", type=float, default=1.5)
    p.add_argument("--commit-delay", type=float, default=0.1)
    p.add_argument("--submit-timeout-ms", type=int, default=2000)
    p.add_argument("--stop-seconds", type=float, default=9,
                   help="how long a SIGSTOP lasts (longer than hard_expiry)")
    p.add_argument("--window", type=float, default=2, help="ledger fault window, seconds")
    p.add_argument("--gap", type=float, default=4, help="least quiet time between faults")
    p.add_argument("--warmup", type=float, default=5)
    p.add_argument("--drain-timeout", type=float, default=120)
    a = p.parse_args(argv)
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1, 1 << 30)
    return a


def main(argv):
    args = parse_args(argv)
    d = Driver(args)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)

    signal.signal(signal.SIGTERM, on_signal)
    rc = 0
    try:
        d.run()
    except (Exception, KeyboardInterrupt) as exc:   # pylint: disable=broad-except
        d.say("stopped early: %s" % exc)
        rc = 1
    finally:
        d.shutdown()
    try:
        d.dump()
    except Exception as exc:                        # pylint: disable=broad-except
        d.say("could not dump the database: %s" % exc)
        rc = 1
    with open(os.path.join(args.out, "run.json"), "w", encoding="utf-8") as fh:
        json.dump({"seed": args.seed, "duration": args.duration, "services": args.services,
                   "clients": args.clients, "workers": args.workers, "rounds": d.rounds,
                   "stop_seconds": args.stop_seconds, "early_stop": rc != 0}, fh)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
