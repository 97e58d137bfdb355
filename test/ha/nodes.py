#!/usr/bin/env python3
"""test/ha/nodes.py: the fault harness's database servers as the driver
(test/ha/driver.py) sees them when a test on PostgreSQL's TAP framework
(test/t/050_ha.pl, test/t/051_failover.pl) owns them: the .pl starts,
stops, promotes and rewinds them with PostgreSQL::Test::Cluster, and the
driver runs the workload and asks the .pl for each fault that changes a
server.

Words used here:
  nodes file   JSON the .pl writes before it starts the driver:
               {"nodes": [{"name", "host", "port"}, ...], "primary": i};
               host is the node's socket directory (or address)
  node         one server: its name (node1, node2: the framework's node
               names, also the standby's application_name) and where to
               connect
  multi-host   (two nodes) the connection string of the clients and the
               producer: host=h1,h2 port=p1,p2 target_session_attrs=
               read-write, so that libpq finds the primary by itself
  control dir  where the driver and the .pl talk, one fault at a time:
                 request.N    the driver: {"n": N, "kind": K} (K is
                              restart, failover or switchover), written
                              to a temporary name and renamed
                 promoted.N   the .pl (failover, switchover), as soon as
                              the standby is promoted: {"t", "down",
                              "promoted", "tli", "old_primary",
                              "new_primary"}
                 done.N       the .pl, when the fault is over: the fault's
                              record (times, how the old primary rejoined),
                              or {"error": text}
               The driver waits for each answer a bounded time. Between
               request and promoted it holds the producer when told to
               (asynchronous replication), and at promoted it reconciles
               (driver.py), as it did when it drove the servers itself.

Python 3 standard library only.
"""

import json
import os
import subprocess
import time

# how long the driver waits for each answer of the .pl
ANSWER_SECONDS = 240


def now():
    return time.time()


class Node:
    """Node: one server of the nodes file."""

    def __init__(self, name, host, port):
        self.name = name
        self.host = host
        self.port = int(port)

    def conninfo(self, db):
        return "host=%s port=%d dbname=%s" % (self.host, self.port, db)

    def as_dict(self):
        return {"name": self.name, "host": self.host, "port": self.port}


class FrameworkNodes:
    """FrameworkNodes: the servers of a .pl, and the faults it runs for the
    driver (see the module's docstring). kind is single (one node) or
    replica (two), as the checker (check.py) reads it from run.json."""

    def __init__(self, bindir, say, nodes_file, control_dir):
        self.bindir = bindir
        self.say = say
        self.control = control_dir
        with open(nodes_file, encoding="utf-8") as fh:
            spec = json.load(fh)
        self.nodes = [Node(n["name"], n["host"], n["port"]) for n in spec["nodes"]]
        self.primary_i = int(spec.get("primary", 0))
        self.kind = "single" if len(self.nodes) == 1 else "replica"
        self.faults = ("restart",) if len(self.nodes) == 1 else ("restart", "failover",
                                                                  "switchover")
        self.n = 0

    # --- what the driver asks -----------------------------------------------

    def primary(self):
        return self.nodes[self.primary_i]

    def standbys(self):
        return [n for i, n in enumerate(self.nodes) if i != self.primary_i]

    def client_dsn(self, db):
        """client_dsn: the external instances' connection string."""
        if len(self.nodes) == 1:
            return self.nodes[0].conninfo(db)
        return ("host=%s port=%s dbname=%s target_session_attrs=read-write connect_timeout=3"
                % (",".join(n.host for n in self.nodes),
                   ",".join(str(n.port) for n in self.nodes), db))

    def psql(self, node, sql, timeout=15):
        cmd = [os.path.join(self.bindir, "psql"), "-X", "-q", "-A", "-t", "-v",
               "ON_ERROR_STOP=1", "-d", node.conninfo("postgres"), "-c", sql]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                               check=False)
        except subprocess.TimeoutExpired:
            return None
        return r.stdout if r.returncode == 0 else None

    def in_recovery(self, node):
        out = self.psql(node, "SELECT pg_is_in_recovery()", timeout=5)
        return None if out is None else out.strip() == "t"

    def describe(self):
        return {"topology": self.kind, "nodes": [n.as_dict() for n in self.nodes]}

    # the .pl builds, stops and logs the servers
    def setup(self):
        pass

    def refresh(self):
        pass

    def shutdown(self):
        pass

    def configs(self):
        return []

    def logs(self):
        return []

    owns_servers = False

    # --- the file protocol --------------------------------------------------

    def answer(self, name, seconds=ANSWER_SECONDS):
        """answer: the .pl's answer NAME.N, waited for (bounded)."""
        path = os.path.join(self.control, "%s.%d" % (name, self.n))
        deadline = now() + seconds
        while now() < deadline:
            if os.path.exists(path):
                with open(path, encoding="utf-8") as fh:
                    rec = json.load(fh)
                if "error" in rec:
                    raise RuntimeError("the test could not run the %s: %s"
                                       % (name, rec["error"]))
                return rec
            time.sleep(0.1)
        raise RuntimeError("no %s.%d from the test after %d s" % (name, self.n, seconds))

    def ask(self, kind):
        """ask: request fault KIND of the .pl."""
        self.n += 1
        tmp = os.path.join(self.control, ".request.%d" % self.n)
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"n": self.n, "kind": kind}, fh)
        os.rename(tmp, os.path.join(self.control, "request.%d" % self.n))

    def restart(self):
        """restart: an immediate stop of the primary, then start (the .pl's
        stop('immediate') and start). Returns the fault's times."""
        self.ask("restart")
        rec = self.answer("done")
        rec.pop("kind", None)
        return rec

    def change_primary(self, kind, on_promoted, before_fault):
        """change_primary: a failover or switchover run by the .pl; the
        driver's before_fault runs just before the request, on_promoted at
        the .pl's promoted answer."""
        if before_fault is not None:
            before_fault()
        self.ask(kind)
        rec = self.answer("promoted")
        self.primary_i = next(i for i, n in enumerate(self.nodes)
                              if n.name == rec["new_primary"])
        if on_promoted is not None:
            on_promoted(rec)
        done = self.answer("done")
        for k, v in done.items():
            if k != "kind":
                rec[k] = v
        return rec

    def failover(self, on_promoted=None, before_fault=None):
        return self.change_primary("failover", on_promoted, before_fault)

    def switchover(self, on_promoted=None, before_fault=None):
        return self.change_primary("switchover", on_promoted, before_fault)
