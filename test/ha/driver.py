#!/usr/bin/env python3
"""test/ha/driver.py: the fault harness's driver. Runs a workload over the
harness's database servers, injects faults on a schedule, and records the
history the checker (check.py) reads. test/t/050_ha.pl and
051_failover.pl start it (test/t/lib/GridhaHA.pm), or test/ha/run.sh for
make ha HA_DB=patroni.

Words used here:
  run directory   where everything is recorded (--out): enqueued.tsv,
                  faults.jsonl, instances.jsonl, clients/*.log, ledger.log,
                  db_*.csv, nodes.jsonl, standby.jsonl, postgres.log,
                  driver.log, run.json
  topology        the database servers: framework (one server, or a
                  primary and a hot standby, --replica sync|async, that a
                  test on PostgreSQL's TAP framework started and changes
                  when asked: nodes.py) or patroni (two nodes under
                  Patroni, patroni.py); the driver always knows which node
                  is the primary, and every statement of its own goes there
  client          an external instance: client/gridha-client, started with
                  its own instance id (also its PGAPPNAME, so audit.sql can
                  name it as a writer), its JSON-lines log and the
                  topology's connection string (--dsn: multi-host with
                  target_session_attrs=read-write when there are two nodes;
                  the client reconnects by itself)
  liveness        whether a client's session runs with
                  gridha.session_liveness on or off (PGOPTIONS)
  worker          a background-worker instance inside the primary
  producer        the thread that enqueues one batch per service per round
                  through the same multi-host connection string (a new
                  connection per round, so it finds a new primary by
                  itself); a round is retried with the same ids until it
                  commits, so enqueued.tsv lists exactly the committed
                  batches, in enqueue order
  fault           one injection, logged to faults.jsonl with its kind, its
                  start and end (wall time), its victim instance and the
                  services the victim held when it struck
  fault kinds     kill9-off, kill9-on (kill -9 of a client with liveness off
                  or on, and a new client started in its place), stop-client
                  (SIGSTOP longer than hard_expiry, then SIGCONT), term-worker
                  (pg_terminate_backend, and a new worker started), stop-worker
                  (SIGSTOP of a worker backend longer than hard_expiry), 503
                  (ledger answers 503), stall (ledger holds requests longer
                  than the submit timeout), restart (an immediate stop of
                  the primary, then start); with two nodes also failover
                  (kill -9 of the primary's postmaster -- and of its Patroni
                  --, the standby promoted, the old primary back as a
                  standby) and switchover (a clean stop of the primary, the
                  standby promoted, the old primary back as a standby); the
                  fault record carries the times of each step (down,
                  promoted, rejoined, synced), the new timeline and how the
                  old primary rejoined (rewind, no rewind required,
                  patroni). The framework's test may make the standby lag
                  before a failover (051_failover.pl, HA_FAILOVER_LAG: the
                  primary's WAL sender stopped S seconds, then every process
                  of the primary killed at once, a standby that lags when
                  the primary's machine dies); --failover-lag S records it.
                  --kinds chooses among the kinds the topology has
                  (all of them by default; patroni has no restart)
  reconcile       after a promotion, the enqueued batches the new primary
                  does not have (acknowledged by the old primary, never
                  replicated: asynchronous replication only) are counted;
                  with async replication the producer is held from just
                  before the fault (framework: from the request) until they are enqueued again in their
                  order, as an application that knows its database may
                  lose acknowledged writes would do; with sync replication
                  they are only counted (the checker wants 0)
  observation     (two nodes) every second, each node's pg_is_in_recovery()
                  before and after counting its 'gridha worker' backends in
                  pg_stat_activity: nodes.jsonl
  standby probe   (two nodes) at the start and before each failover or
                  switchover, on the standby: SELECT * FROM
                  gridha.next_batch(<new uuid>) and gridha.enqueue(...) must
                  fail with SQLSTATE 25006, the uuid and the probe batch
                  must exist on neither node afterwards, and no gridha
                  worker runs there: standby.jsonl
  schedule        first every kind once in a seeded random order, then
                  random kinds until --duration has passed; --duration 0 runs
                  the first round only

Every loop is bounded; every process it starts is stopped before it exits,
on any exit (the servers of the patroni topology too, after the
database's history has been dumped; a framework test stops its own). Python 3 standard library only.
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

import nodes

# The kinds that need no second server; a topology adds its own (restart,
# failover, switchover: nodes.py, patroni.py).
INSTANCE_KINDS = ("kill9-off", "kill9-on", "stop-client", "term-worker", "stop-worker",
                  "503", "stall")
DB_CHANGES = ("failover", "switchover")


def now():
    return time.time()


class Driver:
    """Driver: one harness run."""

    def __init__(self, args, topo):
        self.a = args
        self.topo = topo
        self.kinds = args.kinds
        self.out = args.out
        self.rng = random.Random(args.seed)
        self.db = args.database
        self.stop_producing = threading.Event()
        self.stop_observing = threading.Event()
        self.lock = threading.Lock()
        self.produce_lock = threading.Lock()    # held by one producer attempt
        self.enqueued_ids = []                  # (service, batch), enqueue order
        self.observer = None
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
        self.nodes_log = open(os.path.join(self.out, "nodes.jsonl"), "a", encoding="utf-8")
        self.standby_log = open(os.path.join(self.out, "standby.jsonl"), "a", encoding="utf-8")
        os.makedirs(os.path.join(self.out, "clients"), exist_ok=True)

    # --- plumbing -----------------------------------------------------------

    def say(self, msg):
        line = "[%s] ha: %s" % (time.strftime("%H:%M:%S"), msg)
        print(line, file=sys.stderr, flush=True)
        with open(os.path.join(self.out, "driver.log"), "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def psql(self, sql, db=None, timeout=30, check=True, node=None, dsn=None):
        """psql: run SQL on the primary (or node, or through dsn), return
        stdout (unaligned, tuples only); raises RuntimeError on failure when
        check is set, else returns None."""
        on_primary = node is None and dsn is None
        if dsn is None:
            dsn = (node or self.topo.primary()).conninfo(db or self.db)
        cmd = [os.path.join(self.a.bindir, "psql"), "-X", "-q", "-A", "-t",
               "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", sql]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                               check=False)
        except subprocess.TimeoutExpired:
            if check:
                raise RuntimeError("psql timed out: %s" % sql[:80]) from None
            return None
        if r.returncode != 0:
            if on_primary:
                self.topo.refresh()
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
             "--label", label, "--log", log, "--dsn", self.topo.client_dsn(self.db),
             "--idle-sleep-ms", "100",
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
        told to stop; a failed round is retried with the same ids, each
        attempt a new connection through the clients' connection string."""
        services = ["svc-%02d" % i for i in range(self.a.services)]
        dsn = self.topo.client_dsn(self.db)
        while not self.stop_producing.is_set():
            r = self.rounds + 1
            ids = []
            for s in services:
                suffix = "-inv" if r % 37 == 5 else ""
                ids.append((s, "%s-%05d%s" % (s, r, suffix)))
            done = False
            for _ in range(600):        # bounded: about 5 minutes of outage
                with self.produce_lock:
                    if self.psql(self.insert_sql(ids), check=False, timeout=20,
                                 dsn=dsn) is not None:
                        t = now()
                        with self.lock:
                            for s, b in ids:
                                self.enqueued.write("%s\t%s\t%.3f\n" % (s, b, t))
                            self.enqueued.flush()
                            self.enqueued_ids.extend(ids)
                        done = True
                if done:
                    break
                time.sleep(0.5)
            else:
                self.say("producer: round %d never committed; stopping" % r)
                return
            self.rounds = r
            self.stop_producing.wait(self.a.round_interval)

    @staticmethod
    def insert_sql(ids):
        """insert_sql: enqueue ids in their order, skipping those present."""
        values = ",".join("('%s','%s')" % p for p in ids)
        return ("INSERT INTO gridha.batches (service_id, batch_id, payload)"
                " SELECT v.s, v.b, convert_to(v.b, 'UTF8')"
                "   FROM (VALUES %s) v(s, b)"
                "  WHERE NOT EXISTS (SELECT 1 FROM gridha.batches x"
                "                     WHERE x.service_id = v.s AND x.batch_id = v.b)"
                % values)

    def reconcile(self, rec):
        """reconcile: after a promotion, the enqueued batches the new primary
        lacks (of the last 50 rounds); enqueued again in order with async
        replication (the producer is held meanwhile), only counted with sync."""
        with self.lock:
            recent = list(self.enqueued_ids[-50 * self.a.services:])
        missing = []
        for i in range(0, len(recent), 500):
            chunk = recent[i:i + 500]
            out = self.psql("SELECT batch_id FROM gridha.batches WHERE batch_id = ANY ('{%s}')"
                            % ",".join(b for _, b in chunk), check=False, timeout=30)
            if out is None:
                rec["reconcile_error"] = True
                return
            have = set(out.split())
            missing.extend(p for p in chunk if p[1] not in have)
        rec["lost_enqueues"] = len(missing)
        if missing:
            self.say("%d acknowledged enqueues are missing on the new primary (first %s)"
                     % (len(missing), missing[0][1]))
        if missing and not self.a.sync:
            self.psql(self.insert_sql(missing), timeout=30)
            rec["reenqueued"] = len(missing)

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
        """stop_worker: SIGSTOP a worker caught submitting, the workers tried
        in random order. Returns False when none was caught (nothing was
        injected)."""
        ws = self.workers()
        if not ws:
            self.top_up_workers()
            return False
        self.rng.shuffle(ws)
        for iid, pid, _ in ws:
            # only while it submits (outside any transaction): a backend
            # stopped inside one could hold locks everyone waits for
            def is_mid(pid=pid):
                return any(w[1] == pid and w[2] == "submitting" for w in self.workers())
            t_try = now()
            if self.pause(pid, is_mid):
                break
            # never caught submitting: do not keep a backend stopped that
            # may hold locks; try the next one
            self.resume(pid)
            self.say("stop-worker: worker %d never caught submitting" % pid)
            # the tries stopped it up to 300 times, each for as long as a
            # look at gridha.workers takes: a POST it had in flight can time
            # out meanwhile and be sent again (check.py counts this apart
            # from the injected faults, as a cause of duplicates only)
            self.fault("stop-tries", t_try, victim=iid, pid=pid)
        else:
            return False
        t0 = now()
        row = self.psql("SELECT service_id, batch_id FROM gridha.workers WHERE pid = %d" % pid,
                        check=False) or ""
        held = self.held(iid)
        time.sleep(self.a.stop_seconds)
        self.resume(pid)
        svc, _, batch = row.strip().partition("|")
        self.fault("stop-worker", t0, victim=iid, pid=pid, held=held, mid_submission=True,
                   service=svc or None, batch=batch or None)
        return True

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
        rec = self.topo.restart()
        # static workers come back by themselves; dynamic ones do not
        self.wait_until(10, lambda: len(self.workers()) >= min(self.a.workers, self.a.static_workers))
        self.top_up_workers()
        t0 = rec.pop("t")
        self.fault("restart", t0, **rec)

    def change_primary(self, kind):
        """change_primary: a failover or a switchover (nodes.py, patroni.py); the
        standby is probed first; with async replication the producer is
        held from the fault (after the lag, if any) until the reconcile is
        done."""
        self.probe_standbys("before " + kind)
        held = not self.a.sync
        taken = []

        def before_fault():
            if held:
                self.produce_lock.acquire()
                taken.append(True)

        def on_promoted(rec):
            self.say("%s: %s promoted (timeline %s)" % (kind, rec["new_primary"], rec.get("tli")))
            self.reconcile(rec)
            if taken:
                taken.pop()
                self.produce_lock.release()
                rec["producer_held"] = True

        fn = self.topo.failover if kind == "failover" else self.topo.switchover
        try:
            rec = fn(on_promoted, before_fault)
        finally:
            if taken:
                self.produce_lock.release()
        self.wait_until(20, lambda: len(self.workers()) >= min(self.a.workers, self.a.static_workers))
        self.top_up_workers()
        t0 = rec.pop("t")
        rec["held"] = []
        self.fault(kind, t0, **rec)

    # --- the standby --------------------------------------------------------

    def observe(self):
        """observe: every second, each node's recovery state and its gridha
        workers in pg_stat_activity (nodes.jsonl)."""
        while not self.stop_observing.wait(1.0):
            for node in self.topo.nodes:
                cmd = [os.path.join(self.a.bindir, "psql"), "-X", "-q", "-A", "-t",
                       "-d", node.conninfo("postgres"),
                       "-c", "SELECT pg_is_in_recovery()",
                       "-c", "SELECT count(*) FROM pg_stat_activity"
                             " WHERE backend_type = 'gridha worker'",
                       "-c", "SELECT pg_is_in_recovery()"]
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=False)
                except subprocess.TimeoutExpired:
                    continue
                parts = r.stdout.split()
                if r.returncode != 0 or len(parts) != 3:
                    continue
                self.record(self.nodes_log, {
                    "t": now(), "node": node.name, "recovery_before": parts[0] == "t",
                    "workers": int(parts[1]), "recovery_after": parts[2] == "t",
                    "primary": node is self.topo.primary()})

    def probe_standbys(self, when):
        """probe_standbys: the write paths refuse on each standby with
        25006 and write nothing; no gridha worker runs there
        (standby.jsonl)."""
        for node in self.topo.standbys():
            iid = str(uuid.uuid4())
            probe = "ha-probe-" + iid[:8]
            rec = {"t": now(), "when": when, "node": node.name, "instance": iid,
                   "in_recovery": self.topo.in_recovery(node)}
            for name, sql in (("next_batch", "SELECT * FROM gridha.next_batch('%s'::uuid)" % iid),
                              ("enqueue", "SELECT gridha.enqueue('ha-probe', '%s', '\\x00'::bytea)"
                               % probe)):
                cmd = [os.path.join(self.a.bindir, "psql"), "-X", "-q", "-A", "-t",
                       "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose",
                       "-d", node.conninfo(self.db), "-c", sql]
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=15, check=False)
                    err = r.stderr
                    rc = r.returncode
                except subprocess.TimeoutExpired:
                    err, rc = "timed out", None
                state = msg = None
                for line in err.splitlines():
                    if line.startswith("ERROR:"):
                        body = line[len("ERROR:"):].strip()
                        state, _, msg = body.partition(": ")
                        break
                rec[name] = {"rc": rc, "sqlstate": state, "message": msg}
            written = []
            for n in self.topo.nodes:
                out = self.psql("SELECT (SELECT count(*) FROM gridha.instances"
                                "         WHERE instance_id = '%s')"
                                "     + (SELECT count(*) FROM gridha.batches"
                                "         WHERE batch_id = '%s')" % (iid, probe),
                                node=n, check=False, timeout=10)
                written.append(None if out is None else int(out.strip() or 0))
            rec["written"] = written
            out = self.psql("SELECT count(*) FROM pg_stat_activity"
                            " WHERE backend_type = 'gridha worker'", db="postgres",
                            node=node, check=False, timeout=10)
            rec["workers"] = None if out is None else int(out.strip() or 0)
            self.record(self.standby_log, rec)
            self.say("standby probe (%s) on %s: next_batch %s %s; workers %s"
                     % (when, node.name, rec["next_batch"]["sqlstate"],
                        rec["next_batch"]["message"], rec["workers"]))

    def inject(self, kind):
        """inject: one fault of the kind. Returns False when it could not be
        injected this time (stop-worker caught no worker submitting)."""
        if kind == "stop-worker":
            return self.stop_worker()
        if kind == "kill9-off":
            self.kill9(False)
        elif kind == "kill9-on":
            self.kill9(True)
        elif kind == "stop-client":
            self.stop_client()
        elif kind == "term-worker":
            self.term_worker()
        elif kind == "503":
            self.fail_503()
        elif kind == "stall":
            self.stall()
        elif kind == "restart":
            self.restart()
        elif kind in DB_CHANGES:
            self.change_primary(kind)
        return True

    # --- the run ------------------------------------------------------------

    def run(self):
        self.say("run directory %s, seed %d, topology %s%s, kinds %s"
                 % (self.out, self.a.seed, self.topo.kind,
                    "" if self.topo.kind == "single" else
                    " (%s)" % ("sync" if self.a.sync else "async"), ",".join(self.kinds)))
        self.topo.setup()
        self.start_ledger()
        self.setup_db()
        if len(self.topo.nodes) > 1:
            self.observer = threading.Thread(target=self.observe, name="observer", daemon=True)
            self.observer.start()
            # the standby has replayed the database by now, or soon
            self.wait_until(30, lambda: all(
                self.psql("SELECT 1 FROM pg_extension WHERE extname = 'gridha'", node=n,
                          check=False, timeout=5) not in (None, "")
                for n in self.topo.standbys()))
            self.probe_standbys("start")
        self.wait_until(30, lambda: len(self.workers()) >= min(self.a.workers, self.a.static_workers))
        self.top_up_workers()
        for i in range(self.a.clients):
            self.start_client(i % 2 == 1)
        self.producer = threading.Thread(target=self.produce, name="producer", daemon=True)
        self.producer.start()
        time.sleep(self.a.warmup)

        # one round of every kind first; a kind that could not be injected
        # goes to the end of the round again (three more tries at most)
        first = list(self.kinds)
        self.rng.shuffle(first)
        retries = {k: 3 for k in self.kinds}
        injected = set()
        t_end = now() + self.a.duration
        n = 0
        while True:
            if first:
                kind = first.pop(0)
            elif now() < t_end:
                kind = self.rng.choice(self.kinds)
            else:
                break
            n += 1
            if n > 10000:           # bounded, whatever the duration
                break
            if self.inject(kind):
                injected.add(kind)
            elif kind not in injected and retries[kind] > 0:
                retries[kind] -= 1
                first.append(kind)
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
                                   " old_claimant, claimant, old_epoch, epoch, tli"
                                   " FROM ha.claim_events ORDER BY n",
            "db_batch_events.csv": "SELECT n, extract(epoch FROM at) AS t, service_id, batch_id,"
                                   " old_status, status, epoch, attempts, instance_id, writer,"
                                   " claimant, claim_epoch, tli FROM ha.batch_events ORDER BY n",
            "db_instances.csv": "SELECT instance_id, label, kind FROM gridha.instances",
        }
        for name, q in queries.items():
            out = self.psql("COPY (%s) TO STDOUT WITH (FORMAT csv, HEADER)" % q,
                            check=False, timeout=120)
            with open(os.path.join(self.out, name), "w", encoding="utf-8") as fh:
                fh.write(out or "")

    def shutdown(self):
        """shutdown: stop the workload this run started (safe to call
        twice); the servers are stopped by close(), after the dump."""
        self.stop_producing.set()
        self.stop_observing.set()
        if self.observer is not None:
            self.observer.join(timeout=15)
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


    def close(self):
        """close: stop the servers of a two-node topology and gather every
        node's server log into postgres.log (single: run.sh does both)."""
        if not getattr(self.topo, "owns_servers", True) or self.topo.kind == "single":
            return
        for name, text in self.topo.configs():
            with open(os.path.join(self.out, name), "w", encoding="utf-8") as fh:
                fh.write(text)
        try:
            self.topo.shutdown()
        finally:
            with open(os.path.join(self.out, "postgres.log"), "w", encoding="utf-8") as out:
                for name, path in self.topo.logs():
                    try:
                        with open(path, encoding="utf-8", errors="replace") as fh:
                            text = fh.read()
                    except OSError:
                        continue
                    with open(os.path.join(self.out, "postgres-%s.log" % name), "w",
                              encoding="utf-8") as one:
                        one.write(text)
                    out.write(text)


def parse_args(argv):
    p = argparse.ArgumentParser(description="gridha fault harness driver")
    p.add_argument("--out", required=True)
    p.add_argument("--repo", required=True)
    p.add_argument("--bindir", required=True)
    p.add_argument("--topology", choices=("framework", "patroni"), default="framework")
    p.add_argument("--nodes-file", help="framework: the servers the test started (nodes.py)")
    p.add_argument("--control-dir", help="framework: where the test takes fault requests")
    p.add_argument("--replica", choices=("sync", "async"), default="sync",
                   help="two nodes: synchronous or asynchronous replication")
    p.add_argument("--topo-dir", help="patroni: where its servers live")
    p.add_argument("--port-base", type=int, default=56400,
                   help="patroni: the first port tried for its servers")
    p.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                   help="patroni: a server setting of both (repeatable)")
    p.add_argument("--failover-lag", type=float, default=0.0,
                   help="framework, two nodes: the seconds the test let the standby lag"
                        " before a failover (recorded in run.json)")
    p.add_argument("--kinds", help="comma-separated fault kinds (default: every kind the"
                                   " topology has)")
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
    a.sync = a.replica == "sync"
    a.settings = []
    for opt in a.setting:
        name, eq, value = opt.partition("=")
        if not eq or not name:
            p.error("--setting wants NAME=VALUE, got %r" % opt)
        a.settings.append((name, value))
    if a.topology == "framework" and not (a.nodes_file and a.control_dir):
        p.error("the framework topology needs --nodes-file and --control-dir")
    if a.topology == "patroni" and not a.topo_dir:
        p.error("the patroni topology needs --topo-dir")
    return a


def make_topology(a, say):
    """make_topology: the topology object of the arguments: the servers of
    a test on PostgreSQL's TAP framework (nodes.py), or two under Patroni
    (patroni.py, make ha HA_DB=patroni)."""
    if a.topology == "framework":
        return nodes.FrameworkNodes(a.bindir, say, a.nodes_file, a.control_dir)
    import patroni                                  # pylint: disable=import-outside-toplevel
    return patroni.PatroniPair(a.bindir, say, a.topo_dir, a.port_base, a.settings, a.sync)


def main(argv):
    args = parse_args(argv)
    messages = []

    def say(msg):
        if messages:
            messages[0].say(msg)

    topo = make_topology(args, say)
    have = INSTANCE_KINDS + topo.faults
    if args.kinds:
        args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
        wrong = [k for k in args.kinds if k not in have]
        if wrong:
            print("driver: the %s topology has no fault kind %s (it has %s)"
                  % (topo.kind, ", ".join(wrong), ", ".join(have)), file=sys.stderr)
            return 2
    else:
        args.kinds = list(have)
    d = Driver(args, topo)
    messages.append(d)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)

    signal.signal(signal.SIGTERM, on_signal)
    rc = 0
    try:
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
    finally:
        try:
            d.close()
        except (Exception, KeyboardInterrupt) as exc:   # pylint: disable=broad-except
            d.say("could not stop the servers cleanly: %s" % exc)
    meta = {"seed": args.seed, "duration": args.duration, "services": args.services,
            "clients": args.clients, "workers": args.workers, "rounds": d.rounds,
            "stop_seconds": args.stop_seconds, "early_stop": rc != 0,
            "kinds": args.kinds, "replication": args.replica if topo.kind != "single" else None,
            "failover_lag": args.failover_lag}
    meta.update(topo.describe())
    with open(os.path.join(args.out, "run.json"), "w", encoding="utf-8") as fh:
        json.dump(meta, fh)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
