#!/usr/bin/env python3
"""test/ha/topology.py: the database side of the fault harness: which
PostgreSQL servers a run has, which one is the primary at any moment, and
the faults that change it. test/ha/driver.py uses one of three:

  single    the cluster test/ha/run.sh started with test/lib.sh (one
            server); `restart` is its only database fault
  replica   two servers on loopback built here: node1 the primary, node2
            a hot standby made with pg_basebackup -R, streaming
            replication, synchronous (synchronous_standby_names on the
            primary names the standby's application_name) or asynchronous
  patroni   two servers under Patroni 3 with a single-node etcd (v3 API),
            all on 127.0.0.1; Patroni decides who is primary

Words used here:
  node        one server: its name (node1, node2; also its
              application_name as a standby and its cluster_name), port,
              socket directory, data directory and log
  primary     the node that accepts writes; the driver asks primary() for
              every statement that writes or reads the shared state
  multi-host  the connection string every external instance uses:
              host=<sock1>,<sock2> port=<p1>,<p2> target_session_attrs=
              read-write, so that libpq finds the primary by itself
  node.conf   (replica) the per-node settings, in each data directory and
              included last by postgresql.conf: port, socket directory,
              cluster_name, synchronous_standby_names. pg_basebackup and
              pg_rewind copy the source's, so it is written again after
              each; a standby's always names no synchronous standby, so a
              freshly promoted node never waits for the node it replaces
  failover    (replica) kill -9 of the primary's postmaster (with a lag
              set, HA_FAILOVER_LAG: the primary's WAL sender is first
              SIGSTOPped for that many seconds, then the postmaster and
              all its children are killed at once -- a primary whose
              machine dies while its standby lags: with async replication
              what it acknowledged meanwhile is lost, with sync its commits
              wait and are never acknowledged); pg_ctl promote of the
              standby; the old primary's orphaned backends are
              waited for (and the killed postmaster to leave the process
              table: a lock file naming a pid that exists stops a server
              from starting); a CHECKPOINT on the new primary (pg_rewind
              reads the source's timeline from its control file); the old
              primary comes back as a standby of the new primary by
              pg_rewind --source-server ... -R (a fresh pg_basebackup -R if
              pg_rewind fails); in sync mode synchronous_standby_names on
              the new primary then names it and the driver waits for
              sync_state 'sync'
              (patroni) kill -9 of the leader's patroni and postmaster (the
              standby must be the synchronous one first, in sync mode);
              Patroni promotes the other after the leader key's ttl; the
              killed node's patroni is started again and rejoins (Patroni
              runs pg_rewind)
  switchover  (replica) pg_ctl stop -m fast of the primary (it sends all of
              its WAL to the standby before it stops), promote, rejoin as
              above; (patroni) patronictl switchover (the fault's time is
              when the old primary stops answering as a primary, Patroni
              acting at its next loop; "requested" when patronictl ran)
  restart     pg_ctl stop -m immediate of the primary, then start (single,
              replica)

Every wait is bounded; every server command runs as the postgres user
(runuser when we are root, as test/lib.sh does). Python 3 standard library.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

# Settings of the two-node topologies besides the harness's own list (the
# gridha.* settings and the rest run.sh passes): what streaming replication
# and pg_rewind need. fsync stays off as in test/lib.sh: the faults kill
# processes, never the machine, so the page cache keeps what was written.
#
# The nodes listen on their sockets only: every connection here goes through
# them, and a node restarted minutes after its port was chosen could find
# that port taken on 127.0.0.1 by some program's outgoing connection (an
# ephemeral port) and not start.
REPLICA_BASE = [
    ("listen_addresses", ""),
    ("log_line_prefix", "%m [%p] %q%a "),
    ("fsync", "off"),
    ("full_page_writes", "on"),          # pg_rewind needs it
    ("wal_log_hints", "on"),             # pg_rewind needs it (or checksums)
    ("wal_level", "replica"),
    ("max_wal_senders", "10"),
    ("wal_keep_size", "512MB"),
    ("hot_standby", "on"),
    ("wal_sender_timeout", "10s"),
    ("wal_receiver_timeout", "10s"),
    ("wal_receiver_status_interval", "1s"),
    ("wal_retrieve_retry_interval", "1s"),
]


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


def conf_quote(value):
    return "'%s'" % str(value).replace("'", "''")


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
    """Topology: the common part; see the module's docstring."""

    kind = "single"
    faults = ("restart",)

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

    def start(self, node, timeout=60):
        rc, out = self.run_pg([self.bin("pg_ctl"), "start", "-w", "-t", str(timeout),
                               "-D", node.pgdata, "-l", node.log], timeout=timeout + 30)
        if rc != 0:
            raise RuntimeError("%s did not start: %s" % (node.name, out))

    def stop(self, node, mode="fast", timeout=60):
        rc, out = self.run_pg([self.bin("pg_ctl"), "stop", "-w", "-t", str(timeout),
                               "-m", mode, "-D", node.pgdata], timeout=timeout + 30)
        return rc == 0 or "Is server running?" in out

    def restart(self):
        """restart: an immediate stop of the primary, then start. Returns
        the fault's times."""
        node = self.primary()
        t0 = now()
        self.stop(node, "immediate", 30)
        t_down = now()
        time.sleep(1)
        self.start(node)
        self.wait_until(30, lambda: self.in_recovery(node) is False)
        return {"t": t0, "down": t_down, "up": now(), "node": node.name}


class SingleNode(Topology):
    """SingleNode: the cluster run.sh started; the driver only restarts it."""

    kind = "single"

    def __init__(self, bindir, say, pgdata, pglog, port, sockdir):
        super().__init__(bindir, say)
        self.nodes = [Node("node1", port, sockdir, pgdata, pglog)]


class ReplicaPair(Topology):
    """ReplicaPair: a primary and a hot standby built here (see the module's
    docstring)."""

    kind = "replica"
    faults = ("restart", "failover", "switchover")

    def __init__(self, bindir, say, topo_dir, port_base, settings, sync, lag=0.0):
        super().__init__(bindir, say)
        self.dir = topo_dir
        self.settings = settings
        self.sync = sync
        self.lag = lag
        ports = free_ports(port_base, 2)
        for i, port in enumerate(ports, 1):
            d = os.path.join(topo_dir, "node%d" % i)
            self.nodes.append(Node("node%d" % i, port, d, os.path.join(d, "data"),
                                   os.path.join(d, "postgres.log")))

    # --- building -----------------------------------------------------------

    def mkdir(self, path, mode):
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode)
        if os.geteuid() == 0:
            shutil.chown(path, "postgres", "postgres")

    def write_file(self, path, text):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        if os.geteuid() == 0:
            shutil.chown(path, "postgres", "postgres")

    def write_node_conf(self, node, sync_with=None):
        """write_node_conf: node.conf of node; sync_with names the standby
        the node (a primary) waits for, None for none."""
        text = ("# test/ha/topology.py: this node's own settings (rewritten after\n"
                "# every pg_basebackup and pg_rewind, which copy the source's)\n"
                "port = %d\nunix_socket_directories = %s\ncluster_name = %s\n"
                "synchronous_standby_names = %s\n"
                % (node.port, conf_quote(node.sockdir), conf_quote(node.name),
                   conf_quote(sync_with.name if sync_with is not None else "")))
        self.write_file(os.path.join(node.pgdata, "node.conf"), text)

    def setup(self):
        n1, n2 = self.nodes
        for n in self.nodes:
            self.mkdir(n.sockdir, 0o755)
        rc, out = self.run_pg([self.bin("initdb"), "--auth=trust", "-U", "postgres",
                               "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync",
                               "-D", n1.pgdata])
        if rc != 0:
            raise RuntimeError("initdb failed: %s" % out)
        lines = ["", "# --- gridha fault harness, replica topology (test/ha/topology.py) ---"]
        for k, v in REPLICA_BASE + list(self.settings):
            lines.append("%s = %s" % (k, conf_quote(v)))
        lines.append("include_if_exists = 'node.conf'")
        with open(os.path.join(n1.pgdata, "postgresql.conf"), "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        self.write_node_conf(n1)
        self.start(n1)
        self.primary_i = 0
        self.say("replica: %s primary on port %d" % (n1.name, n1.port))
        self.build_standby(n2, n1)
        self.start(n2)
        if not self.wait_streaming(n1, n2, 60):
            raise RuntimeError("%s does not stream from %s" % (n2.name, n1.name))
        if self.sync:
            self.set_sync(n1, n2)
        self.say("replica: %s standby on port %d (%s)"
                 % (n2.name, n2.port, "synchronous" if self.sync else "asynchronous"))

    def build_standby(self, node, source):
        """build_standby: node's data directory afresh from source with
        pg_basebackup -R (primary_conninfo names node as application_name)."""
        if os.path.isdir(node.pgdata):
            shutil.rmtree(node.pgdata)
        rc, out = self.run_pg([self.bin("pg_basebackup"), "-D", node.pgdata, "-R",
                               "-X", "stream", "-c", "fast", "--no-sync",
                               "-d", "host=%s port=%d user=postgres application_name=%s"
                               % (source.sockdir, source.port, node.name)], timeout=300)
        if rc != 0:
            raise RuntimeError("pg_basebackup of %s from %s failed: %s"
                               % (node.name, source.name, out))
        self.write_node_conf(node)

    def replication(self, primary):
        """replication: {application_name: (state, sync_state)} on primary."""
        out = self.psql(primary, "SELECT application_name, state, sync_state"
                                 " FROM pg_stat_replication", timeout=5)
        rows = {}
        for line in (out or "").splitlines():
            parts = line.split("|")
            if len(parts) == 3:
                rows[parts[0]] = (parts[1], parts[2])
        return rows

    def wait_streaming(self, primary, standby, seconds):
        return self.wait_until(seconds, lambda: self.replication(primary).get(
            standby.name, ("", ""))[0] == "streaming", step=0.25)

    def set_sync(self, primary, standby, seconds=30):
        """set_sync: synchronous replication of primary pointed at standby,
        and wait until the standby is the synchronous one."""
        self.write_node_conf(primary, standby)
        self.psql(primary, "SELECT pg_reload_conf()")
        ok = self.wait_until(seconds, lambda: self.replication(primary).get(
            standby.name, ("", ""))[1] == "sync", step=0.25)
        if not ok:
            raise RuntimeError("%s is not the synchronous standby of %s after %ds"
                               % (standby.name, primary.name, seconds))

    # --- faults -------------------------------------------------------------

    def promote(self, node):
        rc, out = self.run_pg([self.bin("pg_ctl"), "promote", "-w", "-t", "60",
                               "-D", node.pgdata], timeout=90)
        if rc != 0:
            raise RuntimeError("pg_ctl promote of %s failed: %s" % (node.name, out))
        if not self.wait_until(30, lambda: self.in_recovery(node) is False):
            raise RuntimeError("%s still in recovery after promote" % node.name)

    def wait_gone(self, pids, seconds):
        """wait_gone: wait for pids to exit; kill -9 those that do not
        (they are the children of a postmaster we killed). Returns how
        many had to be killed."""
        self.wait_until(seconds, lambda: not any(alive(p) for p in pids), step=0.1)
        left = [p for p in pids if alive(p)]
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.wait_until(10, lambda: not any(alive(p) for p in left), step=0.1)
        return len(left)

    def rejoin(self, node, primary):
        """rejoin: the stopped node follows primary: pg_rewind -R, or a
        fresh pg_basebackup -R when pg_rewind fails. Returns (how, detail)."""
        how = "rewind"
        # pg_rewind reads the source's timeline from its control file, which
        # a promotion updates only at its next checkpoint: without this it
        # would find both on the same timeline and rewind nothing
        self.psql(primary, "CHECKPOINT", timeout=120)
        rc, out = self.run_pg([self.bin("pg_rewind"), "--target-pgdata", node.pgdata, "-R",
                               "--source-server",
                               "host=%s port=%d user=postgres dbname=postgres application_name=%s"
                               % (primary.sockdir, primary.port, node.name)], timeout=300)
        detail = " / ".join(line for line in out.splitlines()
                            if "diverged" in line or "rewind" in line.lower()
                            or "error" in line.lower() or "fatal" in line.lower())[:500]
        if rc != 0:
            self.say("replica: pg_rewind of %s failed (%s); a fresh pg_basebackup instead"
                     % (node.name, out.splitlines()[-1] if out else rc))
            how = "basebackup"
            self.build_standby(node, primary)
        elif "no rewind required" in out:
            how = "no rewind required"
        if not os.path.exists(os.path.join(node.pgdata, "standby.signal")):
            self.write_file(os.path.join(node.pgdata, "standby.signal"), "")
        self.write_node_conf(node)
        self.start(node)
        if not self.wait_streaming(primary, node, 90):
            raise RuntimeError("%s does not stream from %s after %s" % (node.name, primary.name, how))
        return how, detail

    def change_primary(self, kind, on_promoted=None, before_fault=None):
        """change_primary: failover (kill -9) or switchover (clean stop) of
        the primary to the standby, then the old primary rejoins. Returns
        the fault's times and details."""
        old = self.primary()
        new = self.other(old)
        rec = {"old_primary": old.name, "new_primary": new.name}
        pm = old.postmaster_pid()
        if kind == "failover":
            children = child_pids(pm) if pm else []
            sender = None
            if self.lag > 0:
                out = self.psql(old, "SELECT pid FROM pg_stat_replication WHERE application_name = '%s'"
                                % new.name, timeout=5)
                sender = int(out.strip()) if out and out.strip().isdigit() else None
            if sender:
                # the standby lags: the primary's WAL sender stops (what it
                # has not sent stays on the primary), then the primary's
                # machine dies: every process of it at once
                os.kill(sender, signal.SIGSTOP)
                rec["lag"] = self.lag
                time.sleep(self.lag)
                if before_fault is not None:
                    before_fault()
                children = child_pids(pm) if pm else []
                rec["t"] = now()
                for p in [pm] + children:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except (ProcessLookupError, TypeError):
                        pass
            else:
                if before_fault is not None:
                    before_fault()
                rec["t"] = now()
                if pm:
                    os.kill(pm, signal.SIGKILL)
        else:
            children = []
            if before_fault is not None:
                before_fault()
            rec["t"] = now()
            self.stop(old, "fast", 60)
        rec["down"] = now()
        self.promote(new)
        self.primary_i = self.nodes.index(new)
        rec["promoted"] = now()
        rec["tli"] = self.timeline(new)
        if on_promoted is not None:
            on_promoted(rec)
        if kind == "failover":
            rec["orphans_killed"] = self.wait_gone(children, 30)
            if pm and not self.wait_until(30, lambda: not exists(pm), step=0.1):
                raise RuntimeError("the killed postmaster %d of %s is still in the process"
                                   " table" % (pm, old.name))
        how, detail = self.rejoin(old, new)
        rec["rejoin"] = how
        rec["rewind"] = detail
        rec["rejoined"] = now()
        if self.sync:
            self.set_sync(new, old)
            rec["synced"] = now()
        return rec

    def failover(self, on_promoted=None, before_fault=None):
        return self.change_primary("failover", on_promoted, before_fault)

    def switchover(self, on_promoted=None, before_fault=None):
        return self.change_primary("switchover", on_promoted, before_fault)

    def configs(self):
        """configs: each node's settings as the run left them: the
        harness's part of postgresql.conf, node.conf, postgresql.auto.conf
        (primary_conninfo from -R)."""
        out = []
        for n in self.nodes:
            for f in ("postgresql.conf", "node.conf", "postgresql.auto.conf"):
                try:
                    with open(os.path.join(n.pgdata, f), encoding="utf-8") as fh:
                        text = fh.read()
                except OSError:
                    continue
                mark = text.find("# --- gridha fault harness")
                out.append(("%s-%s" % (n.name, f), text[mark:] if mark >= 0 else text))
        return out

    def shutdown(self):
        """shutdown: stop both servers (the primary first), fast, else
        immediately."""
        for node in [self.primary()] + self.standbys():
            if node.postmaster_pid() is None:
                continue
            if not self.stop(node, "fast", 30):
                self.stop(node, "immediate", 30)


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
        return """# test/ha/topology.py: Patroni configuration of %(name)s
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
