#!/usr/bin/env python3
"""test/ha/patroni.py: the fault harness's Patroni topology (make ha
HA_DB=patroni): two PostgreSQL servers under Patroni 3 with a single-node
etcd (v3 API), all on 127.0.0.1; Patroni decides who is primary.
test/ha/driver.py uses it with --topology patroni. The harness's other
servers (one server, a primary and a hot standby) are PostgreSQL's TAP
framework's, in test/t/050_ha.pl and test/t/051_failover.pl
(test/ha/nodes.py); Patroni is not the framework's, so its nodes stay here.

Words used here:
  node        one server: its name (node1, node2), port, socket directory,
              data directory and log
  primary     the node that accepts writes; the driver asks primary() for
              every statement that writes or reads the shared state
  multi-host  the connection string every external instance uses:
              host=<sock1>,<sock2> port=<p1>,<p2> target_session_attrs=
              read-write, so that libpq finds the primary by itself
  failover    kill -9 of the leader's patroni and postmaster (the standby
              must be the synchronous one first, in sync mode); Patroni
              promotes the other after the leader key's ttl; the killed
              node's patroni is started again and rejoins (Patroni runs
              pg_rewind)
  switchover  patronictl switchover (the fault's time is when the old
              primary stops answering as a primary, Patroni acting at its
              next loop; "requested" when patronictl ran)

Every wait is bounded; every server command runs as the postgres user
(Patroni needs root to start it so). Python 3 standard library.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request


def now():
    return time.time()


def port_free(port):
    """port_free: nothing listens on 127.0.0.1:port and it can be bound."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_ports(base, n, taken=()):
    """free_ports: n free ports at or after base (200 tried at most)."""
    out = []
    port = base
    while len(out) < n and port < base + 200:
        if port not in taken and port_free(port):
            out.append(port)
        port += 1
    if len(out) < n:
        raise RuntimeError("no %d free ports in %d..%d" % (n, base, base + 199))
    return out


def child_pids(ppid):
    """child_pids: the pids whose parent is ppid (from /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d, encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == ppid:
                out.append(int(d))
        except (OSError, IndexError, ValueError):
            continue
    return out


def exists(pid):
    """exists: pid is in the process table, a zombie included (a server
    refuses to start while its lock file names a pid that exists, and the
    init of some machines reaps orphans only now and then)."""
    return os.path.exists("/proc/%d" % pid)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is not alive for our purposes
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Node:
    """Node: one PostgreSQL server of the topology."""

    def __init__(self, name, port, sockdir, pgdata, log):
        self.name = name
        self.port = port
        self.sockdir = sockdir
        self.pgdata = pgdata
        self.log = log

    def conninfo(self, db):
        return "host=%s port=%d dbname=%s user=postgres" % (self.sockdir, self.port, db)

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.pgdata, "postmaster.pid"), encoding="ascii") as fh:
                return int(fh.readline().strip())
        except (OSError, ValueError):
            return None

    def as_dict(self):
        return {"name": self.name, "port": self.port, "sockdir": self.sockdir,
                "pgdata": self.pgdata, "log": self.log}


class Topology:
    """Topology: the driver's view of the servers; PatroniPair is the one."""

    kind = "patroni"
    faults = ()

    def __init__(self, bindir, say):
        self.bindir = bindir
        self.say = say
        self.nodes = []
        self.primary_i = 0

    # --- plumbing -----------------------------------------------------------

    def bin(self, name):
        return os.path.join(self.bindir, name)

    @staticmethod
    def as_pg(cmd):
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--"] + cmd
        return cmd

    def run_pg(self, cmd, timeout=120):
        """run_pg: a server-side command as postgres; (rc, output)."""
        try:
            r = subprocess.run(self.as_pg(cmd), capture_output=True, text=True,
                               timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return 124, "timed out after %ds: %s" % (timeout, " ".join(cmd))
        return r.returncode, (r.stdout + r.stderr).strip()

    def psql(self, node, sql, db="postgres", timeout=15):
        """psql: SQL on one node; its output, or None on any failure."""
        cmd = [self.bin("psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
               "-d", node.conninfo(db), "-c", sql]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                               check=False)
        except subprocess.TimeoutExpired:
            return None
        return r.stdout if r.returncode == 0 else None

    @staticmethod
    def wait_until(seconds, fn, step=0.2):
        deadline = now() + seconds
        while now() < deadline:
            if fn():
                return True
            time.sleep(step)
        return bool(fn())

    # --- what the driver asks -----------------------------------------------

    def primary(self):
        return self.nodes[self.primary_i]

    def standbys(self):
        return [n for i, n in enumerate(self.nodes) if i != self.primary_i]

    def other(self, node):
        return next(n for n in self.nodes if n is not node)

    def client_dsn(self, db):
        """client_dsn: the external instances' connection string."""
        if len(self.nodes) == 1:
            return self.nodes[0].conninfo(db)
        return ("host=%s port=%s dbname=%s user=postgres target_session_attrs=read-write"
                " connect_timeout=3"
                % (",".join(n.sockdir for n in self.nodes),
                   ",".join(str(n.port) for n in self.nodes), db))

    def in_recovery(self, node):
        out = self.psql(node, "SELECT pg_is_in_recovery()", timeout=5)
        return None if out is None else out.strip() == "t"

    def timeline(self, node):
        """timeline: the timeline the node writes WAL on (a primary)."""
        out = self.psql(node, "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))"
                              "::bit(32)::integer", timeout=10)
        try:
            return int(out.strip())
        except (AttributeError, ValueError):
            return None

    def describe(self):
        return {"topology": self.kind, "nodes": [n.as_dict() for n in self.nodes]}

    def logs(self):
        return [(n.name, n.log) for n in self.nodes]

    def configs(self):
        """configs: [(file name, text)] of the configuration a run keeps."""
        return []

    def setup(self):
        pass

    def refresh(self):
        """refresh: find the primary again after a failed statement (only
        Patroni moves it by itself)."""

    def shutdown(self):
        pass


class PatroniPair(Topology):
    """PatroniPair: two nodes under Patroni with a one-member etcd (see the
    module's docstring). The gridha settings go into
    bootstrap.dcs.postgresql.parameters, as a user would set them."""

    kind = "patroni"
    faults = ("failover", "switchover")
    SCOPE = "gridha-ha"

    def __init__(self, bindir, say, topo_dir, port_base, settings, sync):
        super().__init__(bindir, say)
        self.dir = topo_dir
        self.settings = settings
        self.sync = sync
        ports = free_ports(port_base, 6)
        self.pg_ports = ports[0:2]
        self.rest_ports = ports[2:4]
        self.etcd_client, self.etcd_peer = ports[4:6]
        self.run_dir = os.path.join(topo_dir, "run")
        self.log_dir = os.path.join(topo_dir, "log")
        for i in (1, 2):
            self.nodes.append(Node("node%d" % i, self.pg_ports[i - 1], self.run_dir,
                                   os.path.join(topo_dir, "node%d" % i, "data"),
                                   os.path.join(self.log_dir, "node%d" % i, "postgresql.log")))
        self.procs = {}

    # --- plumbing -----------------------------------------------------------

    def mkdir(self, path, mode=0o700):
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode)
        if os.geteuid() == 0:
            shutil.chown(path, "postgres", "postgres")

    def spawn(self, name, cmd, home):
        """spawn: a long-running process as postgres in its own session,
        with a clean environment; its pid goes to run/NAME.pid."""
        pre = []
        if os.geteuid() == 0:
            pre = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
        env = ["env", "-i", "PATH=/usr/bin:/bin", "HOME=%s" % home, "USER=postgres",
               "LANG=C.UTF-8"]
        logf = open(os.path.join(self.log_dir, name + ".log"), "a", encoding="utf-8")
        p = subprocess.Popen(["setsid"] + pre + env + cmd, stdout=logf, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        logf.close()
        self.procs[name] = p
        with open(os.path.join(self.run_dir, name + ".pid"), "w", encoding="ascii") as fh:
            fh.write("%d\n" % p.pid)
        return p

    def rest(self, node, path, timeout=2):
        """rest: the HTTP status of Patroni's REST endpoint path on node."""
        port = self.rest_ports[self.nodes.index(node)]
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path),
                                        timeout=timeout) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except (OSError, ValueError):
            return None

    def yml(self, i):
        return os.path.join(self.dir, "node%d.yml" % i)

    def config(self, i):
        """config: node i's Patroni configuration (YAML, written by hand:
        the standard library has no YAML writer)."""
        params = ["        %s: %s" % (k, '"%s"' % v.replace('"', '\\"'))
                  for k, v in [("wal_level", "replica"), ("hot_standby", "on"),
                               ("wal_log_hints", "on"), ("max_wal_senders", "10"),
                               ("max_replication_slots", "10"), ("wal_keep_size", "512MB"),
                               ("wal_sender_timeout", "10s"), ("wal_receiver_timeout", "10s"),
                               ("fsync", "off")] + list(self.settings)]
        node = self.nodes[i - 1]
        return """# test/ha/patroni.py: Patroni configuration of %(name)s
scope: %(scope)s
namespace: /service/
name: %(name)s

log:
  level: INFO

restapi:
  listen: 127.0.0.1:%(rest)d
  connect_address: 127.0.0.1:%(rest)d

etcd3:
  hosts: 127.0.0.1:%(etcd)d

bootstrap:
  dcs:
    ttl: 10
    loop_wait: 2
    retry_timeout: 3
    maximum_lag_on_failover: 1048576
    synchronous_mode: %(sync)s
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
%(params)s
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8
    - data-checksums
    - auth-local: trust
    - auth-host: scram-sha-256
  pg_hba:
    - local all all trust
    - local replication all trust
    - host all all 127.0.0.1/32 scram-sha-256
    - host replication replicator 127.0.0.1/32 scram-sha-256

postgresql:
  listen: 127.0.0.1:%(port)d
  connect_address: 127.0.0.1:%(port)d
  data_dir: %(pgdata)s
  bin_dir: %(bindir)s
  pgpass: %(run)s/pgpass-%(name)s
  authentication:
    superuser:
      username: postgres
      password: postgrespw
    replication:
      username: replicator
      password: replpw
    rewind:
      username: rewinder
      password: rewindpw
  parameters:
    unix_socket_directories: %(run)s
    logging_collector: "on"
    log_directory: %(logdir)s
    log_filename: postgresql.log
    log_rotation_age: "0"
    log_rotation_size: "0"
    log_line_prefix: "%%m [%%p] %%q%%a "
  create_replica_methods:
    - basebackup
  basebackup:
    - checkpoint: fast

watchdog:
  mode: "off"
""" % {"name": node.name, "scope": self.SCOPE, "rest": self.rest_ports[i - 1],
       "etcd": self.etcd_client, "sync": "true" if self.sync else "false",
       "params": "\n".join(params), "port": node.port, "pgdata": node.pgdata,
       "bindir": self.bindir, "run": self.run_dir,
       "logdir": os.path.dirname(node.log)}

    def start_patroni(self, i):
        return self.spawn("patroni-node%d" % i, ["/usr/bin/patroni", self.yml(i)],
                          "/var/lib/postgresql")

    # --- building -----------------------------------------------------------

    def setup(self):
        self.mkdir(self.dir, 0o755)
        self.mkdir(self.run_dir, 0o755)
        self.mkdir(self.log_dir, 0o755)
        self.mkdir(os.path.join(self.dir, "etcd"))
        for i, node in enumerate(self.nodes, 1):
            self.mkdir(os.path.dirname(node.pgdata))
            self.mkdir(os.path.dirname(node.log), 0o755)
            with open(self.yml(i), "w", encoding="utf-8") as fh:
                fh.write(self.config(i))
            if os.geteuid() == 0:
                shutil.chown(self.yml(i), "postgres", "postgres")
        peer = "http://127.0.0.1:%d" % self.etcd_peer
        client = "http://127.0.0.1:%d" % self.etcd_client
        self.spawn("etcd", ["/usr/bin/etcd", "--name", "ha-etcd",
                            "--data-dir", os.path.join(self.dir, "etcd"),
                            "--listen-client-urls", client, "--advertise-client-urls", client,
                            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                            "--initial-cluster", "ha-etcd=" + peer,
                            "--initial-cluster-state", "new",
                            "--initial-cluster-token", "gridha-ha"], self.dir)

        def etcd_up():
            try:
                with urllib.request.urlopen(client + "/health", timeout=2) as r:
                    return b"true" in r.read()
            except (OSError, ValueError):
                return False
        if not self.wait_until(30, etcd_up):
            raise RuntimeError("etcd did not start (see %s/etcd.log)" % self.log_dir)
        n1, n2 = self.nodes
        self.start_patroni(1)
        if not self.wait_until(120, lambda: self.in_recovery(n1) is False, step=0.5):
            raise RuntimeError("node1 did not become primary (see %s)" % self.log_dir)
        self.primary_i = 0
        self.say("patroni: node1 primary on port %d" % n1.port)
        self.start_patroni(2)
        if not self.wait_standby(n2, 120):
            raise RuntimeError("node2 did not join (see %s)" % self.log_dir)
        self.say("patroni: node2 %s standby on port %d"
                 % ("synchronous" if self.sync else "asynchronous", n2.port))

    def wait_standby(self, node, seconds):
        """wait_standby: node streams from the leader (and, in sync mode,
        is the synchronous standby)."""
        path = "/sync" if self.sync else "/replica"
        return self.wait_until(seconds, lambda: self.rest(node, path) == 200, step=0.5)

    def refresh(self):
        """refresh: Patroni may have moved the primary by itself: ask."""
        for i, n in enumerate(self.nodes):
            if self.in_recovery(n) is False:
                self.primary_i = i
                return

    # --- faults -------------------------------------------------------------

    def failover(self, on_promoted=None, before_fault=None):
        old = self.primary()
        new = self.other(old)
        i_old = self.nodes.index(old) + 1
        rec = {"old_primary": old.name, "new_primary": new.name}
        if not self.wait_standby(new, 60):
            raise RuntimeError("%s is not a %s standby before the failover"
                               % (new.name, "synchronous" if self.sync else "streaming"))
        pat = self.procs.get("patroni-node%d" % i_old)
        pm = old.postmaster_pid()
        children = child_pids(pm) if pm else []
        if before_fault is not None:
            before_fault()
        rec["t"] = now()
        for pid in [pat.pid if pat else None, pm]:
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if pat:
            pat.wait()
        rec["down"] = now()
        if not self.wait_until(90, lambda: self.in_recovery(new) is False, step=0.2):
            raise RuntimeError("Patroni did not promote %s" % new.name)
        self.primary_i = self.nodes.index(new)
        rec["promoted"] = now()
        rec["tli"] = self.timeline(new)
        if on_promoted is not None:
            on_promoted(rec)
        left = [p for p in children if alive(p)]
        self.wait_until(30, lambda: not any(alive(p) for p in left), step=0.1)
        for p in [p for p in left if alive(p)]:
            os.kill(p, signal.SIGKILL)
        if pm:
            self.wait_until(30, lambda: not exists(pm), step=0.1)
        self.start_patroni(i_old)
        if not self.wait_standby(old, 180):
            raise RuntimeError("%s did not rejoin (see %s)" % (old.name, self.log_dir))
        rec["rejoin"] = "patroni"
        rec["rejoined"] = now()
        if self.sync:
            rec["synced"] = rec["rejoined"]
        return rec

    def switchover(self, on_promoted=None, before_fault=None):
        old = self.primary()
        new = self.other(old)
        rec = {"old_primary": old.name, "new_primary": new.name}
        if not self.wait_standby(new, 60):
            raise RuntimeError("%s is not ready for a switchover" % new.name)
        if before_fault is not None:
            before_fault()
        rec["requested"] = now()
        p = subprocess.Popen(["patronictl", "-c", self.yml(self.nodes.index(old) + 1),
                              "switchover", "--leader", old.name, "--candidate", new.name,
                              "--force", self.SCOPE],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # the fault's time is when the old primary stops taking writes
        # (Patroni acts at its next loop, after a checkpoint), as for the
        # replica topology's pg_ctl stop
        down = []

        def promoted():
            if not down and self.in_recovery(old) is not False:
                down.append(now())
            return self.in_recovery(new) is False
        if not self.wait_until(90, promoted, step=0.1):
            p.kill()
            raise RuntimeError("the switchover to %s did not happen: %s"
                               % (new.name, p.communicate()[0]))
        self.primary_i = self.nodes.index(new)
        rec["promoted"] = now()
        rec["t"] = rec["down"] = down[0] if down else rec["promoted"]
        rec["tli"] = self.timeline(new)
        if on_promoted is not None:
            on_promoted(rec)
        try:
            p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
        if not self.wait_standby(old, 180):
            raise RuntimeError("%s did not rejoin after the switchover" % old.name)
        rec["rejoin"] = "patroni"
        rec["rejoined"] = now()
        if self.sync:
            rec["synced"] = rec["rejoined"]
        return rec

    def restart(self):
        raise RuntimeError("restart is not a fault of the patroni topology")

    def configs(self):
        out = []
        for i in (1, 2):
            try:
                with open(self.yml(i), encoding="utf-8") as fh:
                    out.append(("patroni-node%d.yml" % i, fh.read()))
            except OSError:
                pass
        return out

    def shutdown(self):
        """shutdown: stop both Patronis (they stop their servers), then
        etcd; whatever is left after 40 s is killed by its pid."""
        for name in ("patroni-node1", "patroni-node2"):
            p = self.procs.get(name)
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = now() + 40
        for name in ("patroni-node1", "patroni-node2"):
            p = self.procs.get(name)
            if p is None:
                continue
            try:
                p.wait(timeout=max(0.1, deadline - now()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for node in self.nodes:
            pm = node.postmaster_pid()
            if pm and alive(pm):
                try:
                    os.kill(pm, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        p = self.procs.get("etcd")
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
