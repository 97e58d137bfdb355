#!/usr/bin/env python3
"""test/fuzz/fuzz.py: gridha's SQL API under generated hostile input.

Several psql sessions call every SQL function and view of gridha at once,
with argument sets drawn from a seeded generator: NULLs, empty strings,
1 MB ids, unusual Unicode (combining marks, right-to-left text, control
characters, noncharacters), invalid UTF-8 and lone surrogates, int64
extremes, other instances' ids and epochs, unknown outcome and status
words, enqueues that move a service to another target. A superuser session
meanwhile rewrites targets (URL <-> function, malformed rows written with
the check trigger disabled, as a row written before a check existed would
be), and drops and replaces the target functions. The background workers
and the reference client serve the same database all along (the test
test/t/060_fuzz.pl starts them).

Issue 38's actors run beside them, each a session of its own: the producer
also inserts directly (one row or several, with and without ON CONFLICT,
of new batch ids and of existing ones); "inst" runs the submitter loop of
three instances (hand-out, acceptance, final status; it releases their
claims at the end of each script); "admin" calls move_service and
set_instance_owner, renames (fzmv <-> fzmv2), deletes and creates (fzdel)
targets, changes the rates of several targets at once, expires claims and
deletes fuzz instances by hand; "maint" sets its own retention, tick,
poll duty and sweep (SET gridha.retention = 0 ...), runs run_maintenance,
prune_batches and hand-outs, and prepares transactions of calls that it
commits or rolls back at once (COMMIT PREPARED). Target functions also
misbehave: temporary tables and functions, a division by zero, 1.5 s runs.

Words:
  session    one psql process running a generated script, as one role
  round      every session runs one script of --calls statements; rounds
             go on until --seconds have passed (or --rounds are done)
  statement  one call (or one step of a transaction the fuzzer opens);
             after each, psql echoes its SQLSTATE to stdout (\\echo :SQLSTATE)
  ack        an enqueue that succeeded (committed): its batch must exist at
             the end with the seq enqueue returned and the payload sent
  checkpoint a snapshot (REPEATABLE READ) of the queues, checked for the
             invariants below while the sessions run

Checks, each printed as TAP lines:
  sqlstates  every failed statement ended with a code of sqlstates.txt (and
             in its situation: 42501 only for a role without the privilege,
             25006 only in a read-only transaction, ...); every row of a
             batched report likewise; every ERROR line of the server log,
             and every worker step that failed (logged with its SQLSTATE)
  hangs      no session outlived its time limit, no statement hit the
             sessions' statement or lock timeout (57014, 55P03)
  invariants at every checkpoint and at the end: seq gap-free per service
             (1..tail_seq), head_seq = the smallest non-final seq, nothing
             after the head but queued batches, in_flight and held and
             service_counts agree with the rows, epochs never go down, a
             batch seen committed or invalid stays as it was
  acks       every acknowledged enqueue exists with its seq and payload;
             an enqueue rolled back does not
  drain      with the targets repaired and the fuzz instances' leases
             expired, the workers bring every batch to a final status
  coverage   every function of schema gridha but the triggers, and every
             view, was called
  rounds     after each round and after the drain (test/fuzz/invariants.py):
             no seq hole and no head without its batch row; every claim
             free or held by an existing, leased instance; held and
             gridha.metrics equal to the rows; no service with work waiting
             while a polling instance idles (with a planted self-check); and
             no lone call ended in 40P01 (per actor, the workers' from the
             server log)

With --audit (FUZZ_AUDIT=1), a violation of an invariant is followed by the
last changes of its instance, service or target's counts, and the statements
that made them
(public.fz_audit, filled by triggers the setup creates).

Usage: fuzz.py setup|run --db DB --work DIR [--seed N] [--seconds S] ...
(see test/t/060_fuzz.pl). Standard library only.
"""

import argparse
import hashlib
import os
import random
import re
import subprocess
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from invariants import RoundChecker  # noqa: E402 (test/fuzz/invariants.py)

# Roles of the fuzz sessions (cluster-wide names, in test/t/060_fuzz.pl's own cluster).
ROLE_A = "gridha_fuzz_a"            # gridha_client
ROLE_B = "gridha_fuzz_b"            # gridha_client, another owner
ROLE_PRODUCER = "gridha_fuzz_producer"
ROLE_ADMIN = "gridha_fuzz_admin"
ROLE_RUNNER = "gridha_fuzz_runner"  # the reference client's role

# Targets the setup creates; chaos rewrites them all (default included).
TARGETS = ["default", "fzsp", "fzfn", "fzfn2", "fzfaf", "fzrate", "fzmal"]
# Target functions (all of the submit signature but fz_wrong).
SUBMIT_FUNCS = ["fz_sub_a", "fz_sub_b"]
STATUS_FUNCS = ["fz_stat_a", "fz_stat_b"]
SUBMIT_SIG = "(text,text,bytea,bigint)"
STATUS_SIG = "(text[])"

NIL = "00000000-0000-0000-0000-000000000000"
# The labels of the static workers (gridha.workers = 2), which the fuzz
# never stops; the labels it gives dynamic workers are never these.
STATIC_LABELS = "'worker 1', 'worker 2'"
I64MAX = 9223372036854775807
I64MIN = -9223372036854775808
I32MAX = 2147483647
I32MIN = -2147483648

# Every function signature of the API, by the name the generator uses.
F = {
    "register1": "gridha.register_instance(text,text[])",
    "register2": "gridha.register_instance(text,text[])",
    "enqueue": "gridha.enqueue(text,text,bytea,text)",
    "renew": "gridha.renew_claims(uuid)",
    "acquire1": "gridha.acquire_claims(uuid,text[])",
    "acquire2": "gridha.acquire_claims(uuid,text[])",
    "claimed": "gridha.claimed_batches(uuid,integer)",
    "next": "gridha.next_batch(uuid)",
    "nexts": "gridha.next_batches(uuid,integer)",
    "verify": "gridha.verify_batch(uuid,text,text,bigint)",
    "rsub": "gridha.report_submission(uuid,text,text,bigint,text,text)",
    "rsubs": "gridha.report_submissions(uuid,text[],text[],bigint[],text[],text[])",
    "pending": "gridha.pending_batches(uuid,integer)",
    "rstat": "gridha.report_status(uuid,text,text,bigint,text,text)",
    "rstats": "gridha.report_statuses(uuid,text[],text[],bigint[],text[],text[])",
    "release": "gridha.release_claims(uuid)",
    "expiry": "gridha.expiry_settings()",
    "try_lead": "gridha.try_lead(uuid,text)",
    "renew_lead": "gridha.renew_lead(uuid,text,bigint)",
    "resign": "gridha.resign(uuid,text)",
    "maint": "gridha.run_maintenance(uuid,text)",
    "create_seq": "gridha.create_id_sequence(text,bigint,integer)",
    "drop_seq": "gridha.drop_id_sequence(text)",
    "reserve": "gridha.reserve_ids(text,integer)",
    "next_id": "gridha.next_id(text)",
    "start_worker": "gridha.start_worker(text)",
    "stop_worker": "gridha.stop_worker(uuid)",
    "slots": "gridha_internal.worker_slots()",
    "worker_register": "gridha_internal.worker_register(uuid,text)",
    "worker_orphans": "gridha_internal.worker_orphans(uuid)",
    "move_service": "gridha.move_service(text,text)",
    "set_owner": "gridha.set_instance_owner(uuid,regrole)",
    "limits": "gridha_internal.worker_limit_slots()",
    # the 1.2 API (issue 30)
    "rsub12": "gridha.report_submission(uuid,text,text,bigint,gridha.submission_outcome,text)",
    "rstat12": "gridha.report_status(uuid,text,text,bigint,gridha.ledger_status,text)",
    "rsubs12": "gridha.report_submissions(uuid,gridha.submission_report[])",
    "rstats12": "gridha.report_statuses(uuid,gridha.status_report[])",
    "lead": "gridha.lead(uuid,text)",
    "resign_lead": "gridha.resign_lead(uuid,text)",
    "prune": "gridha.prune_batches(integer)",
    # the Citus mode (issue 43.2): outside it, citus_setup is RG031 and the
    # per-bucket functions RG037; bucket_of is a hash
    "bucket_of": "gridha.bucket_of(text,integer)",
    "citus_setup": "gridha.citus_setup(integer)",
    "citus_setup_move": "gridha.citus_setup(boolean,integer)",
    "citus_restore": "gridha.citus_restore()",
    "b_enqueue": "gridha.bucket_enqueue(integer,text,text,bytea)",
    "b_enqueue_t": "gridha.bucket_enqueue(integer,text,text,bytea,text)",
    "b_acquire": "gridha.bucket_acquire(integer,uuid,interval)",
    "b_takeover": "gridha.bucket_takeover(integer,uuid,interval)",
    "b_renew": "gridha.bucket_renew(integer,uuid,bigint,interval)",
    "b_release": "gridha.bucket_release(integer,uuid,bigint)",
    "b_next": "gridha.bucket_next_batch(integer,uuid,bigint)",
    "b_rsub": "gridha.bucket_report_submission(integer,uuid,text,text,bigint,text)",
    "b_rstat": "gridha.bucket_report_status(integer,uuid,text,text,bigint,text)",
    "b_nexts": "gridha.bucket_next_batches(integer,uuid,bigint,integer)",
    "b_rsubs": "gridha.bucket_report_submissions(integer,uuid,gridha.submission_report[])",
    "b_rstats": "gridha.bucket_report_statuses(integer,uuid,gridha.status_report[])",
}
VIEWS = ["claims", "instance_health", "queue_progress", "service_queues",
         "workers", "worker_limits", "leaders", "id_sequence_status", "target_rates", "metrics"]

# Codes that only count in a situation (see sqlstates.txt), by the flag a
# statement carries when it is in that situation.
GATES = {
    "22P02": "badliteral",
    "22003": "range",
    "22021": "badutf8",
    "42601": "lexer",
    "42501": "priv",
    "25006": "ro",
    "25P02": "aborted",
    "40P01": "multi",
    "40001": "snapshot",
    "23503": "targetwrite",
    "23514": "targetwrite",
    "23502": "targetwrite",
    "42883": "fnref",
    "FZ001": "serverlog",
    "22012": "serverlog",
    "42704": "prepared",
    "0A000": "prepared",
    "57014": "serverlog",
    "55P03": "serverlog",
    "57P03": "serverlog",
}


# PostgreSQL's own races of two sessions' DDL on one function at once (the
# fuzz's administrator and chaos sessions drop and replace its target
# functions): the second DROP finds the function gone once it holds its
# lock, a second CREATE OR REPLACE finds its catalog row changed. XX000,
# PostgreSQL's, not gridha's; nothing else is let through this way.
PG_DDL_RACE_SQL = re.compile(r"^(DROP FUNCTION IF EXISTS|CREATE OR REPLACE FUNCTION) public\.fz_")
PG_DDL_RACE_MSG = re.compile(r"^(cache lookup failed for function \d+|tuple concurrently (updated|deleted))$")


class Unknown:
    """The Python value of an SQL value the generator cannot know."""


UNKNOWN = Unknown()


# ---------------------------------------------------------------------------
# psql helpers (the setup, checkpoints and final checks; superuser)

# What psql says when the server is restarting (after a crash): the
# checks wait for it, up to RECONNECT_SECONDS.
RECONNECT = re.compile(r"could not connect|connection to server|the database system is|server closed the connection"
                       r"|terminating connection|no connection to the server")
RECONNECT_SECONDS = 90


def psql(db, sql, user="postgres", check=True, timeout=120, wait=True):
    """Runs sql in one psql call; returns stdout (unaligned, tuples only,
    fields separated by |). While the server restarts, tries again (unless
    not wait)."""
    deadline = time.monotonic() + (RECONNECT_SECONDS if wait else 0)
    while True:
        p = subprocess.run(
            ["psql", "-X", "-q", "-A", "-t", "-F", "|", "-v", "ON_ERROR_STOP=1",
             "-U", user, "-d", db],
            input=sql, capture_output=True, text=True, timeout=timeout)
        if p.returncode == 0 or not check:
            return p.stdout
        if RECONNECT.search(p.stderr) and time.monotonic() < deadline:
            time.sleep(0.2)
            continue
        raise RuntimeError("psql failed: %s\n%s" % (p.stderr.strip(), sql[:300]))


def rows(db, sql, **kw):
    return [line.split("|") for line in psql(db, sql, **kw).splitlines() if line != ""]


def unhex(h):
    return bytes.fromhex(h).decode("utf-8", errors="replace")


def show(s, n=160):
    """A short printable form of an id or statement for a report line."""
    if s is UNKNOWN:
        return "?"
    if s is None:
        return "NULL"
    r = repr(s)
    return r if len(r) <= n else r[:n] + "...(%d chars)" % len(s)


# ---------------------------------------------------------------------------
# SQL literals

def lit(s):
    """s as an SQL literal: plain when printable ASCII, otherwise raw UTF-8
    or a U& escape (control characters always escaped)."""
    if s is None:
        return "NULL::text"
    if all(0x20 <= ord(c) < 0x7f for c in s):
        return "'" + s.replace("'", "''") + "'"
    if not any(ord(c) < 0x20 or ord(c) == 0x7f for c in s) and random.random() < 0.5:
        return "'" + s.replace("'", "''") + "'"
    out = []
    for c in s:
        o = ord(c)
        if c == "\\":
            out.append("\\\\")
        elif c == "'":
            out.append("''")
        elif 0x20 <= o < 0x7f:
            out.append(c)
        elif o <= 0xFFFF:
            out.append("\\%04X" % o)
        else:
            out.append("\\+%06X" % o)
    return "U&'" + "".join(out) + "'"


def blit(b):
    if b is None:
        return "NULL::bytea"
    return "'\\x" + b.hex() + "'::bytea"


class V:
    """A generated value: its SQL text, its Python value (UNKNOWN when it
    comes from a psql variable or a subquery), and the flags it gives the
    statement (badutf8, lexer, range, badliteral)."""
    __slots__ = ("sql", "py", "flags", "objs")

    def __init__(self, sql, py=UNKNOWN, flags=(), objs=()):
        self.sql = sql
        self.py = py
        self.flags = set(flags)
        self.objs = list(objs)


# Strings that make ids interesting (none empty, none with NUL).
WEIRD = [
    "e" + "\u0301" * 40 + "a\u0308\u20dd",                   # combining marks
    "\u05e9\u05dc\u05d5\u05dd\u202eabc\u202c\u200f\u0627",   # RTL, overrides
    "a\u200b\u200c\u200d\ufeffb",                            # zero widths, BOM
    "".join(chr(c) for c in list(range(1, 32)) + [127]),     # control chars
    "\U0001F469\u200D\U0001F469\u200D\U0001F467",            # ZWJ emoji
    "\ufffe\uffff\U0010FFFF\ufdd0",                          # noncharacters
    "../%2e%2e/?a=b&c=d#frag {batch_id}{service_id}{batch_ids}",
    "O'Brien \"; DROP TABLE gridha.batches; --\\",
    " ",
    "\t\n\r",
    "x\r\nX-Injected: 1",
    "%s%n%x%d%%",
    "a,b,,c",
    "\u4e2d\u6587\u30c6\u30b9\u30c8\uac00",
    "caf\u00e9 \u00ff",
    "\u0000".replace("\u0000", "\u2400"),                    # the NUL picture
    "\\u0000 \\x00 \\\\",
    "{\"a\":[1,2]}",
]

# Invalid UTF-8 that PostgreSQL refuses when the text is made (22021).
BAD_UTF8 = ["eda080", "edbfbf", "c0af", "e080af", "f5808080", "80", "ff", "c3", "f4908080"]


# ---------------------------------------------------------------------------
# Statements

class Stmt:
    __slots__ = ("idx", "kind", "sql", "flags", "objs", "role", "ack", "rolled",
                 "capture", "txn", "covers", "rows_capture", "acks")

    def __init__(self, kind, sql, flags=(), objs=(), covers=(), capture=None):
        self.idx = -1
        self.kind = kind
        self.sql = sql
        self.flags = set(flags)
        self.objs = list(objs)
        self.role = None
        self.ack = None          # (service, batch, payload md5) of an enqueue
        self.rolled = None       # (service, batch) a statement may write without an ack
        self.capture = capture   # psql variable echoed after success
        self.txn = None          # id of the explicit transaction it is in
        self.covers = set(covers)
        self.rows_capture = False
        self.acks = []           # (service, batch, payload md5) of each row of a multi-row insert


class Session:
    def __init__(self, name, role, instances, superuser=False):
        self.name = name
        self.role = role
        self.instances = instances
        self.superuser = superuser


class Gen:
    """Generates one session's script for one round."""

    def __init__(self, rng, sess, rnd, world):
        self.r = rng
        self.s = sess
        self.rnd = rnd
        self.w = world
        self.stmts = []
        self.n = 0
        self.cur_role = sess.role
        self.txn = None
        self.seq_names = world["seq_names"]

    # -- values -----------------------------------------------------------

    def pick(self, items):
        return self.r.choice(items)

    def cycle(self, name, items):
        """the items in turn, in an order of the seed's: each comes up once
        in every len(items) draws of this name"""
        order, i = self.w["cycles"].get(name, (None, 0))
        if order is None or i >= len(order):
            order, i = list(range(len(items))), 0
            self.r.shuffle(order)
        self.w["cycles"][name] = (order, i + 1)
        return items[order[i]]

    def chance(self, p):
        return self.r.random() < p

    def text_weird(self):
        w = self.pick(WEIRD)
        return V(lit(w), w)

    def text_bad(self):
        """a text the statement cannot even make"""
        if self.chance(0.3):
            return V("E'\\uD800'", UNKNOWN, ["lexer"])
        return V("convert_from('\\x%s'::bytea, 'UTF8')" % self.pick(BAD_UTF8), UNKNOWN, ["badutf8"])

    def text_huge(self):
        k = self.r.randrange(4)
        if k == 0:
            return V("repeat('x', 1048576)", "x" * 1048576)
        if k == 1:
            return V("repeat(U&'\\00FC', 524288)", "\u00fc" * 524288)
        if k == 2:
            return V(lit("\u00e9" * 256), "\u00e9" * 256)          # 512 bytes
        return V(lit("x" + "\u00e9" * 256), "x" + "\u00e9" * 256)  # 513 bytes

    def text_any(self, known=()):
        """an id for a lookup: known ones mostly, anything else too"""
        k = self.r.random()
        if known and k < 0.55:
            return self.pick(known)
        if k < 0.62:
            return V("NULL::text", None)
        if k < 0.68:
            return V("''", "")
        if k < 0.78:
            return self.text_weird()
        if k < 0.84:
            return self.text_huge()
        if k < 0.88:
            return self.text_bad()
        t = "fz-%d" % self.r.randrange(100)
        return V(lit(t), t)

    def service_new(self):
        """a service id an enqueue may create (Python value known)"""
        k = self.r.random()
        if k < 0.75:
            s = self.pick(self.w["services"])
        elif k < 0.9:
            s = self.pick(WEIRD) + "#" + str(self.r.randrange(6))
        else:
            s = "fz-new-%d" % self.r.randrange(40)
        return V(lit(s), s)

    def batch_new(self):
        tag = "%s.%d.%d" % (self.s.name, self.rnd, self.n)
        k = self.r.random()
        if k < 0.6:
            b = "b-" + tag
        elif k < 0.7:
            b = "bad-" + tag
        elif k < 0.76:
            b = "rej-" + tag
        elif k < 0.94:
            b = self.pick(WEIRD) + tag
        else:
            b = tag + "\u00e9" * (250 - len(tag) // 2)       # about 512 bytes
        return V(lit(b), b)

    def payload(self):
        k = self.r.random()
        if k < 0.6:
            b = bytes(self.r.randrange(256) for _ in range(self.r.randrange(1, 40)))
            return V(blit(b), b)
        if k < 0.7:
            return V("NULL::bytea", None)
        if k < 0.8:
            return V("''::bytea", b"")
        if k < 0.83:
            return V("decode(repeat('ab', 524288), 'hex')", b"\xab" * 524288)
        b = b"\x00" * self.r.randrange(1, 10) + "\u00e9\u202e".encode()
        return V(blit(b), b)

    def bigint(self, near=None):
        """an epoch or term: near a psql variable mostly, extremes too"""
        k = self.r.random()
        if near and k < 0.5:
            return V(":%s::bigint" % near)
        if near and k < 0.6:
            return V("(:%s::bigint + %d)" % (near, self.pick([1, -1, 2, 1000])))
        if k < 0.66:
            return V("NULL::bigint", None)
        if k < 0.9:
            v = self.pick([0, -1, 1, 2, 3, 7, 100, I64MAX, I64MIN, I64MAX - 1, I64MIN + 1,
                           2 ** 31, -(2 ** 31), 2 ** 53 + 1])
            return V("'%d'::bigint" % v, v)
        if k < 0.96:
            return V("'%d'::bigint" % self.pick([I64MAX + 1, I64MIN - 1, 10 ** 30]), UNKNOWN, ["range"])
        return V("'%s'::bigint" % self.pick(["1e3", "0x10", " ", "NaN", "one"]), UNKNOWN, ["badliteral"])

    def integer(self, small=True):
        k = self.r.random()
        if k < 0.55 and small:
            v = self.pick([1, 2, 3, 5, 10, 50])
            return V("'%d'::int4" % v, v)
        if k < 0.62:
            return V("NULL::int4", None)
        if k < 0.92:
            v = self.pick([0, -1, 1, 100, 1000, 100000, I32MAX, I32MIN, I32MAX - 1])
            return V("'%d'::int4" % v, v)
        if k < 0.97:
            return V("'%d'::int4" % self.pick([I32MAX + 1, I32MIN - 1, I64MAX]), UNKNOWN, ["range"])
        return V("'%s'::int4" % self.pick(["2.5", "ten", ""]), UNKNOWN, ["badliteral"])

    def own(self):
        return self.pick(self.s.instances)

    def uuid_any(self, var=None):
        """an instance id: own ones, others', workers', fresh ones, junk"""
        k = self.r.random()
        if var and k < 0.45:
            return V(":'%s'::uuid" % var)
        if k < 0.65:
            return V("'%s'::uuid" % self.own(), UNKNOWN)
        if k < 0.75:
            return V("'%s'::uuid" % self.pick(self.w["all_instances"]), UNKNOWN)
        if k < 0.80:
            return V(":'ri'::uuid")
        if k < 0.86:
            return V("(SELECT h.instance_id FROM gridha.instance_health h ORDER BY random() LIMIT 1)",
                     objs=["r:gridha.instance_health"])
        if k < 0.90:
            return V("NULL::uuid", None)
        if k < 0.93:
            return V("'%s'::uuid" % NIL)
        if k < 0.96:
            return V("gen_random_uuid()")
        return V("'%s'::uuid" % self.pick(["not-a-uuid", "", "0000", "{12345678-1234-1234-1234-1234567890ab}x"]),
                 UNKNOWN, ["badliteral"])

    def serves(self):
        kinds = ["submit_url", "submit_function", "status_url", "status_function"]
        k = self.r.random()
        if k < 0.5:
            return V("ARRAY[%s]::text[]" % ",".join(lit(x) for x in self.r.sample(kinds, self.r.randrange(1, 5))))
        if k < 0.6:
            return V("'{}'::text[]")
        if k < 0.66:
            return V("NULL::text[]", None)
        if k < 0.72:
            return V("ARRAY['submit_url', NULL]::text[]")
        if k < 0.78:
            return V("'{{submit_url,status_url},{submit_function,status_function}}'::text[]")
        if k < 0.84:
            return V("'[0:1]={submit_url,status_url}'::text[]")
        if k < 0.9:
            return V("ARRAY['SUBMIT_URL', 'submit_url ', 'submit_url']::text[]")
        t = self.text_any()
        return V("ARRAY[%s]::text[]" % t.sql, flags=t.flags)

    def label(self):
        k = self.r.random()
        if k < 0.3:
            return V(lit("fz-%s" % self.s.name), "fz")
        if k < 0.4:
            return V("NULL::text", None)
        return self.text_any()

    def outcome(self):
        k = self.r.random()
        if k < 0.55:
            return V(lit(self.pick(["accepted", "delayed", "rejected", "ACCEPTED", "Delayed"])))
        if k < 0.85:
            return V(lit(self.pick(["accept", " accepted", "accepted ", "pending", "committed",
                                    "acc\u00e9pted", "accepted\n", "", "null", "ok"])))
        return self.text_any()

    def dlt(self):
        k = self.r.random()
        if k < 0.6:
            return V(lit(self.pick(["pending", "valid", "committed", "invalid", "unknown",
                                    "COMMITTED", "Committed", "INVALID", "Valid"])))
        if k < 0.85:
            return V(lit(self.pick(["commited", "committed ", "accepted", "", "\u0131nvalid",
                                    "COMMITTED\u0000".replace("\u0000", ""), "statusType", "delayed"])))
        return self.text_any()

    def lead_role(self):
        k = self.r.random()
        if k < 0.5:
            return V(lit(self.pick(["maintenance", "fz-role", "fz-role-2"])))
        return self.text_any()

    def seq_name(self):
        if self.chance(0.7):
            return V(lit(self.pick(self.seq_names)))
        return self.text_any()

    def text_array(self, known_var=None, n=None):
        """a text[] for the batched reports"""
        k = self.r.random()
        if known_var and k < 0.6:
            return V(":'%s'::text[]" % known_var)
        if k < 0.66:
            return V("NULL::text[]", None)
        if k < 0.72:
            return V("'{}'::text[]")
        if k < 0.76:
            return V("'{{a,b},{c,d}}'::text[]")
        if k < 0.80:
            return V("'[5:6]={a,b}'::text[]")
        if k < 0.84:
            return V("array_fill('x'::text, ARRAY[1000])")
        items = [self.text_any() for _ in range(n if n is not None else self.r.randrange(0, 4))]
        v = V("ARRAY[%s]::text[]" % ",".join(i.sql for i in items))
        for i in items:
            v.flags |= i.flags
        return v

    def words_array(self, word, like_var):
        """outcomes or statuses, as many as the ids in like_var mostly"""
        if like_var and self.chance(0.7):
            words = ["accepted", "delayed", "rejected"] if word == "outcome" else \
                ["pending", "valid", "committed", "invalid", "unknown"]
            if self.chance(0.2):
                words.append("bogus")
            return V("(SELECT coalesce(array_agg((ARRAY[%s])[1 + (ord %% %d)::int4]), '{}') "
                     "FROM unnest(:'%s'::text[]) WITH ORDINALITY AS u(x, ord))"
                     % (",".join(lit(x) for x in words), len(words), like_var))
        return self.text_array()

    def bigint_array(self, known_var=None):
        k = self.r.random()
        if known_var and k < 0.6:
            return V(":'%s'::bigint[]" % known_var)
        if known_var and k < 0.7:
            return V("(SELECT coalesce(array_agg(e + 1), '{}') FROM unnest(:'%s'::bigint[]) e)" % known_var)
        if k < 0.76:
            return V("NULL::bigint[]", None)
        if k < 0.82:
            return V("ARRAY[NULL, -1, '%d']::bigint[]" % I64MAX)
        if k < 0.86:
            return V("'{{1,2},{3,4}}'::bigint[]")
        return V("ARRAY[%s]::bigint[]" % ",".join(str(self.pick([0, 1, 2, -5, I64MIN]))
                                                  for _ in range(self.r.randrange(0, 4))))

    # -- statements -------------------------------------------------------

    def add(self, st, *vals):
        for v in vals:
            st.flags |= v.flags
            st.objs += v.objs
        st.role = self.cur_role
        st.txn = self.txn
        st.idx = self.n
        self.n += 1
        self.stmts.append(st)
        return st

    def call(self, kind, fn, sql, vals, capture=None):
        return self.add(Stmt(kind, sql, objs=["f:" + F[fn]], covers=[F[fn]], capture=capture), *vals)

    def args(self, vals):
        return ", ".join(v.sql for v in vals)

    def k_enqueue(self):
        s, b, p = self.service_new(), self.batch_new(), self.payload()
        if self.chance(0.04):
            s = self.text_any()
        if self.chance(0.03):
            b = self.text_any()
        if self.chance(0.03) and self.w["enqueued"]:
            sid, bid = self.pick(self.w["enqueued"])
            s, b = V(lit(sid), sid), V(lit(bid), bid)
        vals = [s, b, p]
        k = self.r.random()
        if k < 0.5:
            pass
        elif k < 0.85:
            vals.append(V(lit(self.pick(self.w["targets"]))))
        elif k < 0.9:
            vals.append(V("NULL::text", None))
        else:
            vals.append(self.text_any([V(lit("nope"))]))
        st = self.call("enqueue", "enqueue", "SELECT gridha.enqueue(%s) AS eq \\gset" % self.args(vals), vals,
                       capture="eq")
        self.keep_key(st, s, b, p)

    def keep_key(self, st, s, b, p):
        """an enqueue whose ids and payload are known: its ack is checked"""
        if isinstance(s.py, str) and isinstance(b.py, str) and p.py is not UNKNOWN:
            st.ack = (s.py, b.py, md5(p.py))
            if len(s.py) + len(b.py) < 200 and len(self.w["enqueued"]) < 2000:
                self.w["enqueued"].append((s.py, b.py))

    def k_insert(self):
        s, b, p = self.service_new(), self.batch_new(), self.payload()
        st = self.add(Stmt("insert", "INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES (%s, %s, %s)"
                           % (s.sql, b.sql, p.sql), objs=["t:gridha.batches:INSERT"]), s, b, p)
        self.keep_key(st, s, b, p)

    def k_register(self):
        if self.chance(0.5):
            lab = self.label()
            vals = [lab] if self.chance(0.8) else []
            self.call("register", "register1", "SELECT gridha.register_instance(%s) AS ri \\gset" % self.args(vals),
                      vals)
        else:
            vals = [self.label(), self.serves()]
            self.call("register", "register2", "SELECT gridha.register_instance(%s) AS ri \\gset" % self.args(vals),
                      vals)

    def k_claim_cycle(self):
        u = self.uuid_any("ri")
        k = self.r.randrange(5)
        if k == 0:
            self.call("renew", "renew", "SELECT gridha.renew_claims(%s)" % u.sql, [u])
        elif k == 1:
            self.call("acquire", "acquire1", "SELECT count(*) FROM gridha.acquire_claims(%s)" % u.sql, [u])
        elif k == 2:
            sv = self.serves()
            self.call("acquire", "acquire2", "SELECT count(*) FROM gridha.acquire_claims(%s, %s)" % (u.sql, sv.sql),
                      [u, sv])
        elif k == 3:
            vals = [u] + ([self.integer()] if self.chance(0.7) else [])
            self.call("claimed", "claimed", "SELECT * FROM gridha.claimed_batches(%s)" % self.args(vals), vals)
        else:
            self.call("release", "release", "SELECT gridha.release_claims(%s)" % u.sql, [u])

    def own_or_any(self):
        if self.chance(0.8):
            return V("'%s'::uuid" % self.own())
        return self.uuid_any("ri")

    def k_next(self, u=None):
        u = u or self.own_or_any()
        uq = u.sql
        self.call("next_batch", "next",
                  "SELECT coalesce(b.service_id, :'h_sid') AS h_sid, coalesce(b.batch_id, :'h_bid') AS h_bid,"
                  " coalesce(b.epoch, :h_ep::bigint) AS h_ep,"
                  " CASE WHEN b.service_id IS NULL THEN :'h_inst' ELSE (%s)::text END AS h_inst"
                  " FROM (SELECT 1) AS d LEFT JOIN gridha.next_batch(%s) AS b ON true \\gset" % (uq, uq), [u, u])

    def k_nexts(self):
        u = self.own_or_any()
        n = self.integer()
        self.call("next_batches", "nexts",
                  "SELECT coalesce(array_agg(b.service_id), :'nb_sids'::text[]) AS nb_sids,"
                  " coalesce(array_agg(b.batch_id), :'nb_bids'::text[]) AS nb_bids,"
                  " coalesce(array_agg(b.epoch), :'nb_eps'::bigint[]) AS nb_eps,"
                  " CASE WHEN count(*) = 0 THEN :'nb_inst' ELSE (%s)::text END AS nb_inst"
                  " FROM gridha.next_batches(%s, %s) AS b \\gset" % (u.sql, u.sql, n.sql), [u, n])

    def handed(self, prefix):
        """service, batch, epoch, instance of a hand-out (psql variables),
        now and then changed"""
        sid = V(":'%s_sid'" % prefix) if self.chance(0.85) else self.text_any()
        bid = V(":'%s_bid'" % prefix) if self.chance(0.85) else self.text_any()
        ep = self.bigint("%s_ep" % prefix)
        inst = V(":'%s_inst'::uuid" % prefix) if self.chance(0.8) else self.uuid_any("ri")
        return inst, sid, bid, ep

    def src(self):
        return self.pick(["h", "h", "p", "o"] + (["st"] if self.s.superuser else []))

    def k_verify(self):
        inst, sid, bid, ep = self.handed(self.src())
        self.call("verify", "verify", "SELECT gridha.verify_batch(%s)" % self.args([inst, sid, bid, ep]),
                  [inst, sid, bid, ep])

    def typed(self, v, enum):
        """a word cast to one of the 1.2 enums: a word it lacks is 22P02"""
        return V("(%s)::gridha.%s" % (v.sql, enum), UNKNOWN, v.flags | {"badliteral"}, v.objs)

    def k_rsub(self):
        inst, sid, bid, ep = self.handed(self.src())
        typed = self.chance(0.4)
        o = self.outcome()
        vals = [inst, sid, bid, ep, self.typed(o, "submission_outcome") if typed else o]
        if self.chance(0.4):
            vals.append(self.text_any([V(lit("fz detail"))]))
        self.call("report_submission", "rsub12" if typed else "rsub",
                  "SELECT gridha.report_submission(%s)" % self.args(vals), vals)

    def k_rstat(self):
        inst, sid, bid, ep = self.handed(self.pick(["p", "p", "h", "o"] + (["st"] if self.s.superuser else [])))
        typed = self.chance(0.4)
        d = self.dlt()
        vals = [inst, sid, bid, ep, self.typed(d, "ledger_status") if typed else d]
        self.call("report_status", "rstat12" if typed else "rstat",
                  "SELECT gridha.report_status(%s)" % self.args(vals), vals)

    def batched(self, kind, fn, prefix):
        inst = V(":'%s_inst'::uuid" % prefix) if self.chance(0.8) else self.uuid_any("ri")
        sids = self.text_array("%s_sids" % prefix)
        bids = self.text_array("%s_bids" % prefix) if self.chance(0.3) else \
            (V(":'%s_bids'::text[]" % prefix) if sids.sql.startswith(":") else self.text_array())
        eps = self.bigint_array("%s_eps" % prefix)
        words = self.words_array("outcome" if fn == "rsubs" else "status", "%s_sids" % prefix)
        vals = [inst, sids, bids, eps, words]
        if fn == "rsubs" and self.chance(0.4):
            vals.append(self.text_array())
        name = "report_submissions" if fn == "rsubs" else "report_statuses"
        if self.chance(0.5):
            # 1.2: the same arrays as one array of rows; a word the enum
            # lacks is 22P02, a NULL element a row of NULLs
            enum, row = ("submission_outcome", "submission_report") if fn == "rsubs" else \
                ("ledger_status", "status_report")
            details = vals[5].sql if len(vals) > 5 else "NULL::text[]"
            rows_arg = V("ARRAY(SELECT CASE WHEN u.n %% 7 = 6 THEN NULL ELSE"
                         " (u.s, u.b, u.e, u.w::gridha.%s, u.d)::gridha.%s END"
                         " FROM unnest(%s, %s, %s, %s, %s) WITH ORDINALITY AS u(s, b, e, w, d, n) ORDER BY u.n)"
                         "::gridha.%s[]" % (enum, row, vals[1].sql, vals[2].sql, vals[3].sql, vals[4].sql,
                                            details, row), UNKNOWN, {"badliteral"})
            for v in vals[1:]:
                rows_arg.flags |= v.flags
                rows_arg.objs += v.objs
            vals = [inst, rows_arg]
            fn = fn + "12"
        st = self.call(kind, fn,
                       "SELECT count(*) || ':' || count(*) FILTER (WHERE (r.status IS NULL) <> (r.sqlstate IS NULL))"
                       " || ':' || coalesce(string_agg(DISTINCT r.sqlstate, ','), '') AS rr"
                       " FROM gridha.%s(%s) AS r \\gset" % (name, self.args(vals)),
                       vals, capture="rr")
        st.rows_capture = True

    def k_rsubs(self):
        self.batched("report_submissions", "rsubs", self.pick(["nb", "nb", "pb"]))

    def k_rstats(self):
        self.batched("report_statuses", "rstats", self.pick(["pb", "pb", "nb"]))

    def k_pending(self):
        u = self.own_or_any()
        vals = [u] + ([self.integer()] if self.chance(0.7) else [])
        if self.chance(0.5):
            self.call("pending_batches", "pending",
                      "SELECT coalesce(b.service_id, :'p_sid') AS p_sid, coalesce(b.batch_id, :'p_bid') AS p_bid,"
                      " coalesce(b.epoch, :p_ep::bigint) AS p_ep,"
                      " CASE WHEN b.service_id IS NULL THEN :'p_inst' ELSE (%s)::text END AS p_inst"
                      " FROM (SELECT 1) AS d LEFT JOIN LATERAL (SELECT * FROM gridha.pending_batches(%s)"
                      " ORDER BY random() LIMIT 1) AS b ON true \\gset" % (u.sql, self.args(vals)), vals + [u])
        else:
            self.call("pending_batches", "pending",
                      "SELECT coalesce(array_agg(b.service_id), :'pb_sids'::text[]) AS pb_sids,"
                      " coalesce(array_agg(b.batch_id), :'pb_bids'::text[]) AS pb_bids,"
                      " coalesce(array_agg(b.epoch), :'pb_eps'::bigint[]) AS pb_eps,"
                      " CASE WHEN count(*) = 0 THEN :'pb_inst' ELSE (%s)::text END AS pb_inst"
                      " FROM gridha.pending_batches(%s) AS b \\gset" % (u.sql, self.args(vals)), vals + [u])

    def k_peek(self):
        """another instance's claim, epoch and head batch, as a submitter
        sees them"""
        self.add(Stmt("peek",
                      "SELECT coalesce(x.service_id, :'o_sid') AS o_sid, coalesce(x.head_batch_id, :'o_bid') AS o_bid,"
                      " coalesce(x.epoch, :o_ep::bigint) AS o_ep, coalesce(x.claimant::text, :'o_inst') AS o_inst"
                      " FROM (SELECT 1) AS d LEFT JOIN LATERAL (SELECT q.service_id, q.head_batch_id, q.epoch,"
                      " q.claimant FROM gridha.service_queues q WHERE q.claimant IS NOT NULL"
                      " ORDER BY random() LIMIT 1) AS x ON true \\gset",
                      objs=["r:gridha.service_queues"], covers=["v:service_queues"]))

    def k_steal(self):
        """(superuser) an in-flight batch of anyone, and a report as its
        instance with its real epoch"""
        self.add(Stmt("steal",
                      "SELECT coalesce(x.service_id, :'st_sid') AS st_sid, coalesce(x.batch_id, :'st_bid') AS st_bid,"
                      " coalesce(x.epoch, :st_ep::bigint) AS st_ep, coalesce(x.instance_id::text, :'st_inst') AS st_inst"
                      " FROM (SELECT 1) AS d LEFT JOIN LATERAL (SELECT b.service_id, b.batch_id, b.epoch, b.instance_id"
                      " FROM gridha.batches b WHERE b.status IN ('submitting', 'pending', 'valid', 'delayed', 'unknown')"
                      " AND b.instance_id IS NOT NULL ORDER BY random() LIMIT 1) AS x ON true \\gset"))
        k = self.r.random()
        if k < 0.4:
            vals = [V(":'st_inst'::uuid"), V(":'st_sid'"), V(":'st_bid'"), V(":st_ep::bigint"), self.outcome()]
            self.call("report_submission", "rsub", "SELECT gridha.report_submission(%s)" % self.args(vals), vals)
        elif k < 0.8:
            vals = [V(":'st_inst'::uuid"), V(":'st_sid'"), V(":'st_bid'"), V(":st_ep::bigint"), self.dlt()]
            self.call("report_status", "rstat", "SELECT gridha.report_status(%s)" % self.args(vals), vals)
        else:
            vals = [V(":'st_inst'::uuid"), V(":'st_sid'"), V(":'st_bid'"), V(":st_ep::bigint")]
            self.call("verify", "verify", "SELECT gridha.verify_batch(%s)" % self.args(vals), vals)

    def k_lead(self):
        u = self.uuid_any("ri")
        k = self.r.randrange(6)
        if k == 4:
            vals = [u] + ([self.lead_role()] if self.chance(0.8) else [])
            self.call("lead", "lead",
                      "SELECT coalesce(gridha.lead(%s), :ld_term::bigint) AS ld_term \\gset" % self.args(vals),
                      vals)
        elif k == 5:
            vals = [u] + ([self.lead_role()] if self.chance(0.8) else [])
            self.call("resign_lead", "resign_lead", "SELECT gridha.resign_lead(%s)" % self.args(vals), vals)
        elif k == 0:
            rl = self.lead_role()
            vals = [u] + ([rl] if self.chance(0.8) else [])
            self.call("try_lead", "try_lead",
                      "SELECT coalesce(gridha.try_lead(%s), :ld_term::bigint) AS ld_term \\gset" % self.args(vals),
                      vals)
        elif k == 1:
            vals = [u, self.lead_role(), self.bigint("ld_term")]
            self.call("renew_lead", "renew_lead", "SELECT gridha.renew_lead(%s)" % self.args(vals), vals)
        elif k == 2:
            vals = [u] + ([self.lead_role()] if self.chance(0.8) else [])
            self.call("resign", "resign", "SELECT gridha.resign(%s)" % self.args(vals), vals)
        else:
            vals = [u] + ([self.lead_role()] if self.chance(0.6) else [])
            self.call("run_maintenance", "maint", "SELECT * FROM gridha.run_maintenance(%s)" % self.args(vals), vals)

    def k_ids(self):
        k = self.r.randrange(5)
        if k == 0 and self.s.superuser:
            # a new sequence, of every size in turn
            vals = [V(lit("fz-seq-%s-%d-%d" % (self.s.name, self.rnd, self.n))),
                    V("'%d'::bigint" % self.cycle("window size", [1, 10, 1000, I32MAX, I32MAX + 1, 0])),
                    V("'%d'::int4" % self.cycle("open windows", [0, 3, 50, 10000000, I32MAX, -1]))]
            self.call("create_id_sequence", "create_seq", "SELECT gridha.create_id_sequence(%s)" % self.args(vals),
                      vals)
        elif k == 0:
            vals = [self.seq_name()]
            if self.chance(0.8):
                ws = self.pick([V("'1'::bigint"), V("'10'::bigint"), V("'1000'::bigint"), self.bigint()])
                vals.append(ws)
                if self.chance(0.8):
                    mo = self.pick([V("'0'::int4"), V("'1'::int4"), V("'3'::int4"), self.integer()])
                    vals.append(mo)
            self.call("create_id_sequence", "create_seq", "SELECT gridha.create_id_sequence(%s)" % self.args(vals),
                      vals)
        elif k == 1:
            v = self.seq_name()
            self.call("drop_id_sequence", "drop_seq", "SELECT gridha.drop_id_sequence(%s)" % v.sql, [v])
        elif k == 2 or k == 3:
            vals = [self.seq_name(), self.integer()]
            self.call("reserve_ids", "reserve", "SELECT gridha.reserve_ids(%s)" % self.args(vals), vals)
        else:
            v = self.seq_name()
            self.call("next_id", "next_id", "SELECT gridha.next_id(%s)" % v.sql, [v])

    def k_view(self):
        v = self.pick(VIEWS)
        self.add(Stmt("view", "SELECT * FROM gridha.%s ORDER BY random() LIMIT 20" % v,
                      objs=["r:gridha." + v], covers=["v:" + v]))

    def k_misc(self):
        k = self.r.randrange(3)
        if k == 0:
            self.call("expiry_settings", "expiry", "SELECT * FROM gridha.expiry_settings()", [])
        elif k == 1:
            self.call("worker_slots", "slots", "SELECT * FROM gridha_internal.worker_slots()", [])
        else:
            self.add(Stmt("set", "SET gridha.session_liveness = %s" % self.pick(["on", "off"])))

    def k_workers(self):
        k = self.r.random()
        if k < 0.35:
            lab = self.pick([V(lit("fzdyn-%s" % self.s.name)), V(lit("fzdyn-\u00e9" * 5)),
                             V(lit("fzdyn" + "\u00e9" * 29)), V(lit("x" * 63)), V(lit("x" * 64)), self.label()])
            self.call("start_worker", "start_worker", "SELECT gridha.start_worker(%s) AS sw \\gset" % lab.sql, [lab])
        elif k < 0.8:
            u = self.pick([V(":'sw'::uuid"), V(":'sw'::uuid"),
                           V("(SELECT w.instance_id FROM gridha.workers w WHERE w.label NOT IN (%s)"
                             " ORDER BY random() LIMIT 1)" % STATIC_LABELS, objs=["r:gridha.workers"]),
                           V("gen_random_uuid()"), V("NULL::uuid", None), V("'%s'::uuid" % NIL)])
            self.call("stop_worker", "stop_worker", "SELECT gridha.stop_worker(%s)" % u.sql, [u])
        else:
            self.call("worker_slots", "slots", "SELECT * FROM gridha_internal.worker_slots()", [])

    # -- chaos (superuser) --------------------------------------------------

    def tgt(self):
        return self.pick(self.w["targets"])

    def tw(self, sql, kind="target_write"):
        flags = ["targetwrite"]
        if "_function =" in sql:
            flags.append("fnref")
        return self.add(Stmt(kind, sql, flags=flags, objs=["t:gridha.targets:UPDATE"]))

    def k_target_update(self):
        t = lit(self.tgt())
        led = self.w["ledger"]
        url_sub = lit(led + "/batches/{service_id}/{batch_id}")
        url_st = lit(self.pick([led + "/batch_statuses?id={batch_ids}", led + "/splinter/batch_statuses?ids={batch_ids}"]))
        f_sub = lit(self.pick(SUBMIT_FUNCS) + SUBMIT_SIG)
        f_st = lit(self.pick(STATUS_FUNCS) + STATUS_SIG)
        k = self.cycle("target update", list(range(13)))
        if k == 0:
            self.tw("UPDATE gridha.targets SET submit_function = NULL, submit_url = %s WHERE target = %s" % (url_sub, t))
        elif k == 1:
            self.tw("UPDATE gridha.targets SET submit_url = NULL, submit_function = %s WHERE target = %s" % (f_sub, t))
        elif k == 2:
            self.tw("UPDATE gridha.targets SET status_function = NULL, status_url = %s WHERE target = %s" % (url_st, t))
        elif k == 3:
            self.tw("UPDATE gridha.targets SET status_url = NULL, status_function = %s WHERE target = %s" % (f_st, t))
        elif k == 4:
            self.tw("UPDATE gridha.targets SET status_url = NULL, status_function = NULL WHERE target = %s" % t)
        elif k == 5:
            self.tw("UPDATE gridha.targets SET rate_interval = %s, rate_burst = %s WHERE target = %s" % (
                self.pick(["NULL", "'10 ms'", "'50 ms'", "'1 s'", "'0 s'", "'-1 s'", "'1000 years'"]),
                self.pick(["0", "1", "5", "-1", "1000001"]), t))
        elif k == 6:
            self.tw("UPDATE gridha.targets SET reject_codes = %s WHERE target = %s" % (
                self.pick(["'{}'", "'{400,422}'", "'{202}'", "'{500,503}'", "'{99}'", "'{600}'", "'{NULL}'",
                           "'{{400},{422}}'", "NULL"]), t))
        elif k == 7:
            self.tw("UPDATE gridha.targets SET request_headers = %s WHERE target = %s" % (
                self.pick(["NULL", "'{\"X-Fz\": \"1\"}'", "'{\"X-Fz\": \"a\\r\\nX-B: 1\"}'", "'{\"X-Fz\": 1}'",
                           "'[1,2]'", "'{\"Bad Name\": \"v\"}'", "'{\"Content-Length\": \"3\"}'",
                           "'{\"X-Gridha-Epoch\": \"9\"}'", "'{\"X-\u00e9\": \"\u00e9\"}'", "'{}'"]), t))
        elif k == 8:
            self.tw("UPDATE gridha.targets SET submit_url = %s, submit_function = NULL WHERE target = %s" % (
                lit(self.pick(["htp:/x", "http://127.0.0.1:1/b/{batch_id}", "http://[::1/x", "", " ",
                               "http://127.0.0.1:%d/%s" % (self.r.randrange(70000), self.pick(WEIRD)),
                               led + "/batches/{service_id}/{batch_id}/{batch_ids}",
                               "file:///etc/passwd", "http://127.0.0.1/" + "x" * 5000])), t))
        elif k == 9:
            self.tw("UPDATE gridha.targets SET status_url = %s, status_function = NULL WHERE target = %s" % (
                lit(self.pick(["http://127.0.0.1:1/s?id={batch_ids}", led + "/batch_statuses?id=all",
                               led + "/batch_statuses?id={batch_ids}&again={batch_ids}", "{batch_ids}"])), t))
        elif k == 10:
            name = self.pick(["fzx", "fzx2", "", "x" * 600, self.pick(WEIRD)])
            self.tw("INSERT INTO gridha.targets (target, submit_url) VALUES (%s, %s) ON CONFLICT (target) DO NOTHING"
                    % (lit(name), url_sub))
            if name in ("fzx", "fzx2") and name not in self.w["targets"]:
                self.w["targets"].append(name)
        elif k == 11:
            name = self.pick(["fzx", "fzx2", self.tgt()])
            self.tw("DELETE FROM gridha.targets WHERE target = %s" % lit(name))
        else:
            # a rename, which the services follow (ON UPDATE CASCADE)
            self.tw("UPDATE gridha.targets SET target = CASE target WHEN 'fzmal' THEN 'fzmal2' ELSE 'fzmal' END"
                    " WHERE target IN ('fzmal', 'fzmal2')")
            if "fzmal2" not in self.w["targets"]:
                self.w["targets"].append("fzmal2")

    def k_target_malformed(self):
        """a row the check would refuse, written with the check trigger
        off (a row written before the check existed)"""
        t = lit(self.pick(TARGETS))
        bad = self.cycle("malformed", [
            "submit_url = NULL, submit_function = NULL",
            "submit_url = NULL, submit_function = NULL, status_url = NULL, status_function = NULL",
            "submit_url = 'htp:/x', submit_function = NULL",
            "submit_url = %s, submit_function = 'fz_sub_a%s'" % (lit(self.w["ledger"] + "/batches/{batch_id}"), SUBMIT_SIG),
            "status_url = %s, status_function = NULL" % lit(self.w["ledger"] + "/batch_statuses?id=all"),
            "submit_url = NULL, submit_function = 'fz_wrong(text)'",
            "status_url = NULL, status_function = 'fz_sub_b%s'" % SUBMIT_SIG,
            "status_url = NULL, status_function = 'fz_wrong(text)'",
            "request_headers = '{\"X-Fz\": null}'",
            "request_headers = '{\"X-Fz\": {\"a\": 1}}'",
            "request_headers = '[1, \"a\"]'",
            "request_headers = '\"text\"'",
            "request_headers = '{\"Bad Name\": \"v\", \"X-A\": \"a\\r\\nX-B: b\"}'",
            "request_headers = '{\"Content-Length\": \"0\", \"Host\": \"x\"}'",
            "reject_codes = '{NULL}'",
            "reject_codes = '{-1,0,99999,2147483647}'",
            "reject_codes = '{{400,422},{500,503}}'",
            "reject_codes = '[3:4]={400,422}'",
            "submit_url = repeat('h', 1048576), submit_function = NULL",
            "submit_url = %s, submit_function = NULL" % lit(self.w["ledger"] + "/batches/{batch_ids}/{batch_id}"),
            "status_url = 'http://127.0.0.1:1/{batch_ids}' || repeat('/x', 3000), status_function = NULL",
        ])
        self.txn = "%s.%d.%d" % (self.s.name, self.rnd, self.n)
        self.add(Stmt("txn", "BEGIN"))
        # ALTER TABLE waits for every transaction that read the targets, and
        # every hand-out that reads them waits behind it: not for long
        self.add(Stmt("txn", "SET LOCAL lock_timeout = '2s'"))
        for st in (self.tw("ALTER TABLE gridha.targets DISABLE TRIGGER targets_check", "target_malformed"),
                   self.tw("UPDATE gridha.targets SET %s WHERE target = %s" % (bad, t), "target_malformed"),
                   self.tw("ALTER TABLE gridha.targets ENABLE TRIGGER targets_check", "target_malformed")):
            st.flags |= {"multi", "locktimeout"}
        self.add(Stmt("txn", "COMMIT"))
        self.txn = None

    def k_function(self):
        """drop, create, or replace a target function"""
        if self.chance(0.6):
            f = self.pick(SUBMIT_FUNCS)
            body = self.cycle("submit body", [
                "INSERT INTO public.fz_applied (sid, bid) VALUES ($1, $2) ON CONFLICT DO NOTHING; RETURN 'accepted';",
                "RAISE EXCEPTION 'fz: % down', $1 USING ERRCODE = 'FZ001';",
                "RETURN NULL;",
                "RETURN 'delayed';",
                "RETURN 'rejected';",
                "RETURN %s;" % lit(self.pick(WEIRD)),
                "RETURN repeat('r', 1048576);",
                "PERFORM pg_sleep(0.05); RETURN 'accepted';",
                "IF right($2, 3) <> '-re' THEN PERFORM gridha.enqueue($1, $2 || '-re', $3); END IF; RETURN 'accepted';",
                "PERFORM gridha.report_submission(b.instance_id, b.service_id, b.batch_id, b.epoch, 'accepted')"
                " FROM gridha.batches b WHERE b.service_id = $1 AND b.batch_id = $2; RETURN 'accepted';",
                "PERFORM gridha.release_claims(c.claimant) FROM gridha.service_claims c WHERE c.service_id = $1;"
                " RETURN 'accepted';",
                # misbehaving: temp objects, an error of its own, a long run
                "CREATE TEMP TABLE IF NOT EXISTS fz_tmp (sid text, bid text); INSERT INTO fz_tmp VALUES ($1, $2);"
                " RETURN 'accepted';",
                "CREATE TEMP TABLE IF NOT EXISTS fz_tmp_c (x int) ON COMMIT DROP;"
                " CREATE OR REPLACE FUNCTION pg_temp.fz_t() RETURNS text LANGUAGE sql AS $t$ SELECT 'accepted' $t$;"
                " RETURN pg_temp.fz_t();",
                "PERFORM 1 / (length($2) - length($2)); RETURN 'accepted';",
                "PERFORM pg_sleep(1.5); RETURN 'accepted';",
            ])
            k = self.r.randrange(4)
            create = ("CREATE OR REPLACE FUNCTION public.%s(service_id text, batch_id text, payload bytea, epoch bigint)"
                      " RETURNS text LANGUAGE plpgsql AS $fz$ BEGIN %s END $fz$" % (f, body))
            if k == 0:
                self.add(Stmt("function", "DROP FUNCTION IF EXISTS public.%s%s" % (f, SUBMIT_SIG)))
            elif k == 1:
                self.add(Stmt("function", "DROP FUNCTION IF EXISTS public.%s%s" % (f, SUBMIT_SIG)))
                self.add(Stmt("function", create))
            else:
                self.add(Stmt("function", create))
        else:
            f = self.pick(STATUS_FUNCS)
            body = self.cycle("status body", [
                "SELECT x, 'COMMITTED' FROM unnest($1) x",
                "SELECT x, 'Committed' FROM unnest($1) x",
                "SELECT a.bid, 'COMMITTED' FROM public.fz_applied a WHERE a.bid = ANY ($1)",
                "SELECT x, NULL FROM unnest($1) x",
                "SELECT NULL, 'COMMITTED' FROM unnest($1) x",
                "SELECT x || 'zz', 'INVALID' FROM unnest($1) x",
                "SELECT x, s FROM unnest($1) x, unnest(ARRAY['PENDING', 'COMMITTED', 'INVALID']) s",
                "SELECT x, 'bogus' FROM unnest($1) x",
                "SELECT x, repeat('C', 100000) FROM unnest($1) x",
                "SELECT x, 'UNKNOWN' FROM unnest($1) x",
                "SELECT x, 'VALID' FROM unnest($1) x",
                "SELECT 'nope', 'COMMITTED' WHERE false",
                # misbehaving: temp objects, an error of its own, a long run
                "CREATE TEMP TABLE IF NOT EXISTS fz_tmp_s (x text); SELECT x, 'COMMITTED' FROM unnest($1) x",
                "SELECT x, (1 / (length(x) - length(x)))::text FROM unnest($1) x",
                "SELECT x, 'COMMITTED' FROM unnest($1) x CROSS JOIN (SELECT pg_sleep(1.5)) s",
            ])
            k = self.r.randrange(4)
            create = ("CREATE OR REPLACE FUNCTION public.%s(batch_ids text[])"
                      " RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $fz$ %s $fz$" % (f, body))
            if k == 0:
                self.add(Stmt("function", "DROP FUNCTION IF EXISTS public.%s%s" % (f, STATUS_SIG)))
            elif k == 1:
                self.add(Stmt("function", "DROP FUNCTION IF EXISTS public.%s%s" % (f, STATUS_SIG)))
                self.add(Stmt("function", create))
            else:
                self.add(Stmt("function", create))

    def k_expire(self):
        """move expiries into the past, as tests do instead of waiting"""
        if self.chance(0.5):
            self.add(Stmt("expire",
                          "UPDATE gridha.service_claims u SET soft_expiry = now() - interval '1 s'%s"
                          " FROM (SELECT c.service_id FROM gridha.service_claims c"
                          " WHERE c.service_id = ANY (ARRAY(SELECT x.service_id FROM gridha.service_claims x"
                          " WHERE x.claimant IS NOT NULL ORDER BY random() LIMIT 3))"
                          # rows locked in gridha's order (docs/concurrency.md): a lone call
                          " ORDER BY c.service_id COLLATE \"C\" FOR NO KEY UPDATE) l"
                          " WHERE u.service_id = l.service_id"
                          % (", hard_expiry = now() - interval '1 s'" if self.chance(0.3) else "")))
        else:
            self.add(Stmt("expire",
                          "UPDATE gridha.instances SET soft_expiry = now() - interval '1 s'%s"
                          " WHERE instance_id = (SELECT i.instance_id FROM gridha.instances i"
                          " WHERE i.soft_expiry IS NOT NULL ORDER BY random() LIMIT 1)"
                          % (", hard_expiry = now() - interval '1 s'" if self.chance(0.3) else "")))

    def k_setrole(self):
        role = self.pick([ROLE_A, ROLE_B, ROLE_PRODUCER, ROLE_ADMIN])
        self.add(Stmt("setrole", "SET ROLE %s" % role))
        self.cur_role = role
        self.pick([self.k_enqueue, self.k_next, self.k_rsub, self.k_workers, self.k_ids, self.k_view,
                   self.k_lead, self.k_target_update])()
        self.add(Stmt("setrole", "RESET ROLE"))
        self.cur_role = self.s.role

    # -- actors of issue 38: producers' direct inserts, a submitter loop of
    # several instances, administrators, maintenance, prepared transactions

    def skip_known(self):
        """FUZZ_KNOWN_BUGS=skip (a development aid, never in make test):
        leave out the statements that meet the bugs being fixed"""
        return self.w["known_bugs_skip"]

    def k_insert_oc(self):
        """(producer) a direct INSERT with ON CONFLICT, of a new batch or
        of one that exists"""
        s, b, p = self.service_new(), self.batch_new(), self.payload()
        old = self.w["enqueued"] and self.chance(0.5) and not self.skip_known()
        if old:
            sid, bid = self.pick(self.w["enqueued"])
            s, b = V(lit(sid), sid), V(lit(bid), bid)
        oc = self.cycle("on conflict", ["ON CONFLICT DO NOTHING", "ON CONFLICT (service_id, batch_id) DO NOTHING",
                                        "ON CONFLICT ON CONSTRAINT batches_pkey DO NOTHING"])
        st = self.add(Stmt("insert_oc", "INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES (%s, %s, %s)"
                           " %s" % (s.sql, b.sql, p.sql, oc), objs=["t:gridha.batches:INSERT"]), s, b, p)
        if not old:
            self.keep_key(st, s, b, p)
        else:
            st.rolled = (s.py, b.py)

    def k_insert_multi(self):
        """(producer) one INSERT of several new batches: in service_id
        order (COLLATE "C") a lone call; in another order a statement that
        may deadlock (docs/concurrency.md, known exceptions)"""
        items = [(self.service_new(), self.batch_new(), self.payload()) for _ in range(self.r.randrange(2, 5))]
        for i, (s, b, p) in enumerate(items):
            b.sql = lit(b.py + "-m%d" % i)
            b.py = b.py + "-m%d" % i
        ordered = self.chance(0.7)
        if ordered:
            items.sort(key=lambda x: x[0].py.encode("utf-8"))
        else:
            self.r.shuffle(items)
        oc = " ON CONFLICT DO NOTHING" if self.chance(0.3) else ""
        st = self.add(Stmt("insert_multi", "INSERT INTO gridha.batches (service_id, batch_id, payload) VALUES %s%s"
                           % (", ".join("(%s, %s, %s)" % (s.sql, b.sql, p.sql) for s, b, p in items), oc),
                           flags=[] if ordered else ["multi"], objs=["t:gridha.batches:INSERT"]),
                      *[v for it in items for v in it])
        for s, b, p in items:
            st.acks.append((s.py, b.py, md5(p.py)))

    def k_loop(self):
        """(the instances' session) one turn of the submitter loop of one of
        its instances: hand-out, acceptance, final status"""
        u = V("'%s'::uuid" % self.pick(self.s.instances))
        self.k_next(u)
        if self.chance(0.9):
            o = self.pick(["accepted"] * 8 + ["delayed", "rejected"])
            self.call("report_submission", "rsub", "SELECT gridha.report_submission(:'h_inst', :'h_sid', :'h_bid',"
                      " :h_ep, '%s')" % o, [])
            if o == "accepted" and self.chance(0.85):
                d = self.pick(["committed"] * 6 + ["valid", "invalid", "unknown", "pending"])
                self.call("report_status", "rstat", "SELECT gridha.report_status(:'h_inst', :'h_sid', :'h_bid',"
                          " :h_ep, '%s')" % d, [])

    def release_own(self):
        """the instances' session ends by releasing its claims"""
        for i in self.s.instances:
            self.call("release", "release", "SELECT gridha.release_claims('%s'::uuid)" % i, [])

    def admin_service(self):
        if self.chance(0.85):
            s = self.pick(self.w["services"])
            return V(lit(s), s)
        return self.text_any()

    def k_move(self):
        """(administrator) move_service"""
        s = self.admin_service()
        t = V(lit(self.pick(["default", "fzmv", "fzmv2", "fzrate", "fzdel", "fzsp", "fzfn", "nope"])))
        if self.chance(0.05):
            t = V("NULL::text", None)
        self.call("move_service", "move_service", "SELECT gridha.move_service(%s)" % self.args([s, t]), [s, t])

    def k_owner(self):
        """(administrator) set_instance_owner of a fuzz instance"""
        k = self.r.random()
        if k < 0.8:
            u = V("'%s'::uuid" % self.pick(self.w["all_instances"]))
        elif k < 0.9:
            u = V("gen_random_uuid()")
        else:
            u = V("NULL::uuid", None)
        role = V(self.pick(["'%s'::regrole" % r for r in (ROLE_A, ROLE_B, ROLE_PRODUCER)] + ["NULL::regrole"]))
        self.call("set_instance_owner", "set_owner", "SELECT gridha.set_instance_owner(%s)" % self.args([u, role]),
                  [u, role])

    def k_admin_target(self):
        """(administrator) renames and deletes of targets that services use,
        rate changes of several targets at once"""
        led = self.w["ledger"]
        k = self.cycle("admin target", ["rename", "delete", "create", "rates", "rates", "rename", "rates1"])
        if self.skip_known() and k in ("rename", "delete", "rates"):
            k = "rates1"
        if k == "rename":
            self.tw("UPDATE gridha.targets SET target = CASE target WHEN 'fzmv' THEN 'fzmv2' ELSE 'fzmv' END"
                    " WHERE target IN ('fzmv', 'fzmv2')", "target_rename")
        elif k == "delete":
            self.tw("DELETE FROM gridha.targets WHERE target = %s" % lit(self.pick(["fzdel", "fzmv", "fzmv2"])),
                    "target_delete")
        elif k == "create":
            self.tw("INSERT INTO gridha.targets (target, submit_url, status_url) VALUES ('fzdel', %s, %s)"
                    " ON CONFLICT (target) DO NOTHING" % (lit(led + "/batches/{service_id}/{batch_id}"),
                                                           lit(led + "/batch_statuses?id={batch_ids}")),
                    "target_create")
        else:
            ri = self.pick(["NULL", "'10 ms'", "'50 ms'", "'5 ms'"])
            rb = self.pick(["1", "5", "20"])
            where = "target IN ('fzrate', 'fzmv', 'fzmv2', 'default', 'fzdel')" if k == "rates" else \
                "target = %s" % lit(self.pick(["fzrate", "fzmv", "fzmv2", "fzdel"]))
            self.tw("UPDATE gridha.targets SET rate_interval = %s, rate_burst = %s WHERE %s" % (ri, rb, where),
                    "target_rates")

    def k_expire_claim(self):
        """(administrator) one claim expired by hand, as the docs show"""
        s = self.admin_service()
        col = self.pick(["hard_expiry", "soft_expiry", "hard_expiry"])
        self.add(Stmt("expire_claim", "UPDATE gridha.service_claims SET %s = now() WHERE service_id = %s"
                      % (col, s.sql)), s)

    def k_delete_instance(self):
        """(administrator) DELETE of an instance of the fuzz that seems to
        hold nothing, or of any"""
        if self.skip_known():
            return self.k_expire_claim()
        u = "'%s'::uuid" % self.pick(self.w["all_instances"])
        self.add(Stmt("delete_instance", "DELETE FROM gridha.instances WHERE instance_id = %s%s"
                      % (u, " AND held = 0" if self.chance(0.7) else "")))

    def k_maint_set(self):
        """(maintenance) this session's retention, tick, poll duty and sweep"""
        k = self.cycle("maint set", ["retention", "interval", "prune", "sweep"])
        if k == "retention":
            v = self.pick(["0", "1", "3", "-1"])
        elif k == "interval":
            v = self.pick(["10", "100", "1000"])
        elif k == "prune":
            v = self.pick(["10", "100", "-1"])
        else:
            v = "-1" if self.skip_known() else self.pick(["0", "1", "5", "-1"])
        guc = {"retention": "gridha.retention", "interval": "gridha.maintenance_interval",
               "prune": "gridha.prune_interval", "sweep": "gridha.sweep_instances_after"}[k]
        self.add(Stmt("maint_set", "SET %s = %s" % (guc, v)))

    def k_maint(self):
        """(maintenance) run_maintenance, prune_batches, a hand-out that runs
        the poll duty"""
        k = self.r.randrange(4)
        if k == 0:
            vals = [V("'%s'::uuid" % self.own()), V(lit(self.pick(["gridha.maintenance", "maintenance", "fz-maint"])))]
            self.call("run_maintenance", "maint", "SELECT * FROM gridha.run_maintenance(%s)" % self.args(vals), vals)
        elif k == 1:
            n = V("'%d'::int4" % self.pick([1, 10, 1000]))
            self.call("prune_batches", "prune", "SELECT gridha.prune_batches(%s)" % n.sql, [n])
        elif k == 2:
            self.k_next(V("'%s'::uuid" % self.own()))
        else:
            self.call("resign_lead", "resign_lead", "SELECT gridha.resign_lead('%s'::uuid, %s)"
                      % (self.own(), lit(self.pick(["maintenance", "fz-maint"]))), [])

    def k_prepared(self):
        """(maintenance) calls in a transaction that is prepared, then
        committed or rolled back from the same session (at once: a row it
        holds would otherwise wait for the session's own later statement)"""
        gid = "fz-%s-%d-%d" % (self.s.name, self.rnd, self.n)
        self.txn = gid
        first = len(self.stmts)
        self.add(Stmt("txn", "BEGIN"))
        if self.chance(0.5):
            self.add(Stmt("set", "SET LOCAL gridha.session_liveness = off"))
        for _ in range(self.r.randrange(1, 3)):
            self.pick([self.k_enqueue, self.k_next, self.k_rsub, self.k_loop, self.k_claim_cycle, self.k_insert,
                       self.k_maint])()
        self.add(Stmt("prepare", "PREPARE TRANSACTION '%s'" % gid))
        for st in self.stmts[first:]:
            st.flags |= {"multi", "prepared"}
            # what commits is not known here: no ack either way
            if st.ack:
                st.rolled = st.ack[:2]
            st.ack = None
        self.txn = None
        if self.chance(0.5):
            self.add(Stmt("view", "SELECT * FROM gridha.metrics", objs=["r:gridha.metrics"], covers=["v:metrics"]))
        self.add(Stmt("prepare", "%s PREPARED '%s'" % (self.pick(["COMMIT", "COMMIT", "ROLLBACK"]), gid),
                      flags=["prepared"]))


    # -- transactions -------------------------------------------------------

    def k_txn(self):
        """calls in a transaction the fuzzer opens: read-only, rolled back,
        committed, or committed under REPEATABLE READ or SERIALIZABLE, now
        and then with a savepoint rolled back"""
        mode = self.pick(["ro", "rollback", "commit", "commit", "rr", "serializable"])
        self.txn = "%s.%d.%d" % (self.s.name, self.rnd, self.n)
        self.add(Stmt("txn", {"ro": "BEGIN READ ONLY", "rr": "BEGIN ISOLATION LEVEL REPEATABLE READ",
                              "serializable": "BEGIN ISOLATION LEVEL SERIALIZABLE"}.get(mode, "BEGIN")))
        calls = [self.k_enqueue, self.k_enqueue, self.k_next, self.k_nexts, self.k_rsub, self.k_rsubs,
                 self.k_claim_cycle, self.k_lead, self.k_ids, self.k_register, self.k_insert]
        n = self.r.randrange(1, 4)
        first = len(self.stmts)
        for i in range(n):
            # (a savepoint first, while nothing can have failed yet)
            if i == 0 and self.chance(0.2):
                self.add(Stmt("txn", "SAVEPOINT fz"))
                self.pick(calls)()
                self.add(Stmt("txn", "ROLLBACK TO SAVEPOINT fz"))
            else:
                self.pick(calls)()
        for st in self.stmts[first:]:
            if mode == "ro":
                st.flags.add("ro")
            if mode in ("rr", "serializable"):
                st.flags.add("snapshot")
            if n > 1:
                st.flags.add("multi")
        self.add(Stmt("txn", "ROLLBACK" if mode in ("ro", "rollback") else "COMMIT",
                      flags=["snapshot"] if mode in ("rr", "serializable") else []))
        self.txn = None

    def k_tour(self):
        """every function and view once, with arguments that fit"""
        ri, tag = V(":'ri'::uuid"), "%d" % self.rnd
        c = self.call
        c("register", "register1", "SELECT gridha.register_instance('fz tour') AS ri \\gset", [])
        c("register", "register2", "SELECT gridha.register_instance('fz tour', '{submit_url,status_url}') AS ri"
          " \\gset", [])
        st = c("enqueue", "enqueue", "SELECT gridha.enqueue('fz-tour', 'tour-%s', '\\x01') AS eq \\gset" % tag,
               [], capture="eq")
        st.ack = ("fz-tour", "tour-" + tag, md5(b"\x01"))
        c("renew", "renew", "SELECT gridha.renew_claims(:'ri')", [ri])
        c("acquire", "acquire1", "SELECT * FROM gridha.acquire_claims(:'ri')", [ri])
        c("acquire", "acquire2", "SELECT * FROM gridha.acquire_claims(:'ri', '{submit_url,status_url}')", [ri])
        c("claimed", "claimed", "SELECT * FROM gridha.claimed_batches(:'ri', 10)", [ri])
        self.k_next()
        c("verify", "verify", "SELECT gridha.verify_batch(:'h_inst', :'h_sid', :'h_bid', :h_ep)", [])
        c("report_submission", "rsub", "SELECT gridha.report_submission(:'h_inst', :'h_sid', :'h_bid', :h_ep,"
          " 'accepted')", [])
        self.k_nexts()
        c("report_submissions", "rsubs", "SELECT * FROM gridha.report_submissions(:'nb_inst', :'nb_sids',"
          " :'nb_bids', :'nb_eps', array_fill('accepted'::text, ARRAY[cardinality(:'nb_sids'::text[])]))", [])
        c("pending_batches", "pending", "SELECT * FROM gridha.pending_batches(:'ri', 10)", [ri])
        c("report_status", "rstat", "SELECT gridha.report_status(:'h_inst', :'h_sid', :'h_bid', :h_ep,"
          " 'committed')", [])
        c("report_statuses", "rstats", "SELECT * FROM gridha.report_statuses(:'nb_inst', :'nb_sids',"
          " :'nb_bids', :'nb_eps', array_fill('committed'::text, ARRAY[cardinality(:'nb_sids'::text[])]))", [])
        c("release", "release", "SELECT gridha.release_claims(:'ri')", [ri])
        c("expiry_settings", "expiry", "SELECT * FROM gridha.expiry_settings()", [])
        c("try_lead", "try_lead", "SELECT coalesce(gridha.try_lead(:'ri', 'fz-tour'), 0) AS ld_term \\gset", [ri])
        c("renew_lead", "renew_lead", "SELECT gridha.renew_lead(:'ri', 'fz-tour', :ld_term)", [ri])
        c("resign", "resign", "SELECT gridha.resign(:'ri', 'fz-tour')", [ri])
        c("run_maintenance", "maint", "SELECT * FROM gridha.run_maintenance(:'ri', 'fz-tour')", [ri])
        c("lead", "lead", "SELECT coalesce(gridha.lead(:'ri', 'fz-tour'), 0) AS ld_term \\gset", [ri])
        c("resign_lead", "resign_lead", "SELECT gridha.resign_lead(:'ri', 'fz-tour')", [ri])
        c("report_submission", "rsub12", "SELECT gridha.report_submission(:'h_inst', :'h_sid', :'h_bid', :h_ep,"
          " 'delayed'::gridha.submission_outcome, 'fz tour')", [])
        c("report_status", "rstat12", "SELECT gridha.report_status(:'h_inst', :'h_sid', :'h_bid', :h_ep,"
          " 'committed'::gridha.ledger_status)", [])
        c("report_submissions", "rsubs12", "SELECT * FROM gridha.report_submissions(:'nb_inst',"
          " ARRAY[(:'h_sid', :'h_bid', :h_ep, 'accepted', NULL)]::gridha.submission_report[])", [])
        c("report_statuses", "rstats12", "SELECT * FROM gridha.report_statuses(:'nb_inst',"
          " ARRAY[(:'h_sid', :'h_bid', :h_ep, 'committed', 'fz tour')]::gridha.status_report[])", [])
        c("create_id_sequence", "create_seq", "SELECT gridha.create_id_sequence('fz-tour-%s', 10, 1)" % tag, [])
        c("reserve_ids", "reserve", "SELECT gridha.reserve_ids('fz-tour-%s', 5)" % tag, [])
        c("next_id", "next_id", "SELECT gridha.next_id('fz-tour-%s')" % tag, [])
        c("drop_id_sequence", "drop_seq", "SELECT gridha.drop_id_sequence('fz-tour-%s')" % tag, [])
        c("start_worker", "start_worker", "SELECT gridha.start_worker('fz tour') AS sw \\gset", [])
        c("worker_slots", "slots", "SELECT * FROM gridha_internal.worker_slots()", [])
        c("stop_worker", "stop_worker", "SELECT gridha.stop_worker(:'sw')", [])
        c("worker_register", "worker_register", "SELECT gridha_internal.worker_register(gen_random_uuid(), 'fz tour')", [])
        c("worker_orphans", "worker_orphans", "SELECT * FROM gridha_internal.worker_orphans(:'ri')", [ri])
        c("worker_limit_slots", "limits", "SELECT * FROM gridha_internal.worker_limit_slots()", [])
        c("prune_batches", "prune", "SELECT gridha.prune_batches(10)", [])
        c("move_service", "move_service", "SELECT gridha.move_service('fz-tour', 'default')", [])
        c("set_instance_owner", "set_owner", "SELECT gridha.set_instance_owner(:'ri', current_user::regrole)", [ri])
        c("bucket_of", "bucket_of", "SELECT gridha.bucket_of('fz-tour', 64)", [])
        c("citus_setup", "citus_setup", "SELECT gridha.citus_setup(64)", [])
        c("citus_setup", "citus_setup_move", "SELECT gridha.citus_setup(move_rows => true, buckets => 64)", [])
        c("citus_restore", "citus_restore", "SELECT gridha.citus_restore()", [])
        c("bucket_enqueue", "b_enqueue", "SELECT gridha.bucket_enqueue(gridha.bucket_of('fz-tour', 64), 'fz-tour',"
          " 'tour-b-%s', '\\x01')" % tag, [])
        c("bucket_enqueue", "b_enqueue_t", "SELECT gridha.bucket_enqueue(gridha.bucket_of('fz-tour', 64), 'fz-tour',"
          " 'tour-t-%s', '\\x01', 'default')" % tag, [])
        c("bucket_acquire", "b_acquire", "SELECT gridha.bucket_acquire(0, :'ri', '30 s')", [ri])
        c("bucket_takeover", "b_takeover", "SELECT gridha.bucket_takeover(0, :'ri', '30 s')", [ri])
        c("bucket_renew", "b_renew", "SELECT gridha.bucket_renew(0, :'ri', 1, '30 s')", [ri])
        c("bucket_next_batch", "b_next", "SELECT gridha.bucket_next_batch(0, :'ri', 1)", [ri])
        c("bucket_report_submission", "b_rsub", "SELECT gridha.bucket_report_submission(0, :'ri', 'fz-tour',"
          " 'tour-b-%s', 1, 'accepted')" % tag, [ri])
        c("bucket_report_status", "b_rstat", "SELECT gridha.bucket_report_status(0, :'ri', 'fz-tour',"
          " 'tour-b-%s', 1, 'committed')" % tag, [ri])
        c("bucket_release", "b_release", "SELECT gridha.bucket_release(0, :'ri', 1)", [ri])
        c("bucket_next_batches", "b_nexts", "SELECT gridha.bucket_next_batches(0, :'ri', 1, 10)", [ri])
        c("bucket_report_submissions", "b_rsubs", "SELECT gridha.bucket_report_submissions(0, :'ri',"
          " ARRAY[('fz-tour', 'tour-b-%s', 1, 'accepted', NULL)]::gridha.submission_report[])" % tag, [ri])
        c("bucket_report_statuses", "b_rstats", "SELECT gridha.bucket_report_statuses(0, :'ri',"
          " ARRAY[('fz-tour', 'tour-b-%s', 1, 'committed', NULL)]::gridha.status_report[])" % tag, [ri])
        for v in VIEWS:
            self.add(Stmt("view", "SELECT * FROM gridha.%s" % v, objs=["r:gridha." + v], covers=["v:" + v]))

    # -- the script ---------------------------------------------------------

    def generate(self, count, weights):
        kinds = list(weights)
        ws = [weights[k] for k in kinds]
        while self.n < count:
            getattr(self, "k_" + self.r.choices(kinds, ws)[0])()
        return self.stmts


def md5(b):
    return None if b is None else hashlib.md5(b).hexdigest()


# What each session does, by weight.
CLIENT_WEIGHTS = {
    "enqueue": 14, "insert": 2, "register": 2, "claim_cycle": 6, "next": 12, "nexts": 6, "verify": 4,
    "rsub": 10, "rsubs": 5, "pending": 6, "rstat": 8, "rstats": 4, "peek": 3, "lead": 4, "ids": 4,
    "view": 3, "misc": 2, "txn": 4,
}
PRODUCER_WEIGHTS = dict(CLIENT_WEIGHTS, enqueue=30, insert=8, insert_oc=8, insert_multi=5)
CHAOS_WEIGHTS = dict(CLIENT_WEIGHTS, target_update=6, target_malformed=5, function=5, expire=3, steal=6,
                     workers=2, setrole=4, enqueue=8, move=3)
# issue 38's actors: a submitter loop of several instances; administrators;
# maintenance with retention and the sweep, and prepared transactions
INSTANCES_WEIGHTS = {"loop": 30, "enqueue": 12, "insert_oc": 2, "nexts": 8, "pending": 3, "rstats": 2,
                     "claim_cycle": 2, "view": 1}
# (the superuser's session moves services too, so that a move meets the
# administrator's renames and deletes of targets from another session)
ADMIN_WEIGHTS = {"move": 10, "owner": 4, "admin_target": 12, "expire_claim": 6, "delete_instance": 3,
                 "function": 3, "enqueue": 10, "next": 3, "view": 3, "peek": 2}
MAINT_WEIGHTS = {"maint_set": 4, "maint": 14, "prepared": 6, "enqueue": 10, "insert": 2, "next": 4, "rsub": 3,
                 "rstat": 3, "view": 2}


# ---------------------------------------------------------------------------
# Scripts and their results

# The mark of a statement in an explicit transaction of several calls, at
# the start of its text: the server log's account of a deadlock quotes the
# queries of the processes in it (a worker may be the one chosen to fail).
TXN_MARK = "/* fz:txn */ "


def with_txn(lines):
    """whether an explicit transaction of several calls (its statements
    carry TXN_MARK) is among the lines of a server-log entry"""
    return any(TXN_MARK.strip() in l for l in lines)


def write_script(path, stmts, nonce):
    """the psql script of a session: each statement, then its SQLSTATE
    echoed (with the error message, or the captured variable)"""
    out = []
    w = out.append
    w("\\set VERBOSITY terse")
    w("\\o /dev/null")
    for st in stmts:
        sql = st.sql
        if not sql.endswith("\\gset"):
            sql += ";"
        if "multi" in st.flags:
            sql = TXN_MARK + sql
        w(sql)
        cap = " :'%s'" % st.capture if st.capture else ""
        w("\\echo @@%s %d :SQLSTATE" % (nonce, st.idx))
        w("\\if :ERROR")
        w("\\echo @@%sM :'LAST_ERROR_MESSAGE'" % nonce)
        if cap:
            w("\\else")
            w("\\echo @@%sV%s" % (nonce, cap))
        w("\\endif")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


def init_stmts(sess, seed, world):
    """The first statements of every script: time limits and the psql
    variables the generator refers to."""
    own = sess.instances[0]
    return [
        Stmt("init", "SET statement_timeout = '%ds'" % world["statement_timeout"]),
        Stmt("init", "SET lock_timeout = '%ds'" % world["lock_timeout"]),
        Stmt("init", "SET application_name = 'fuzz %s'" % sess.name),
        Stmt("init", "SELECT setseed(%f)" % ((seed % 1000) / 1000.0)),
        Stmt("init",
             "SELECT 'fz-00' AS h_sid, 'none' AS h_bid, 0 AS h_ep, '%s' AS h_inst,"
             " 'fz-00' AS p_sid, 'none' AS p_bid, 0 AS p_ep, '%s' AS p_inst,"
             " 'fz-00' AS o_sid, 'none' AS o_bid, 0 AS o_ep, '%s' AS o_inst,"
             " 'fz-00' AS st_sid, 'none' AS st_bid, 0 AS st_ep, '%s' AS st_inst,"
             " '{}' AS nb_sids, '{}' AS nb_bids, '{}' AS nb_eps, '%s' AS nb_inst,"
             " '{}' AS pb_sids, '{}' AS pb_bids, '{}' AS pb_eps, '%s' AS pb_inst,"
             " '%s' AS ri, '%s' AS sw, 0 AS ld_term, 0 AS eq, '' AS rr \\gset"
             % ((own,) * 6 + (own, NIL))),
    ]


class Result:
    __slots__ = ("code", "msg", "val")

    def __init__(self, code):
        self.code = code
        self.msg = None
        self.val = None


def parse_output(path, nonce):
    """idx -> Result from a session's stdout"""
    res = {}
    cur = None
    mark = "@@" + nonce
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith(mark + "M "):
                if cur is not None:
                    cur.msg = unquote(line[len(mark) + 2:])
            elif line.startswith(mark + "V"):
                if cur is not None:
                    cur.val = unquote(line[len(mark) + 2:])
            elif line.startswith(mark + " "):
                parts = line.split(" ")
                cur = Result(parts[2] if len(parts) > 2 else "")
                res[int(parts[1])] = cur
            elif cur is not None and cur.msg is not None:
                cur.msg += "\n" + line
    return res


def unquote(s):
    s = s.strip()
    if len(s) >= 2 and s[0] == "'" and s[-1] == "'":
        s = s[1:-1].replace("''", "'")
    return s


# ---------------------------------------------------------------------------
# Checkpoints: the invariants on one snapshot

INVARIANTS_SQL = r"""
BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;
WITH allb AS (
    SELECT service_id, seq, status FROM gridha.batches
    UNION ALL
    SELECT service_id, seq, 'committed'::gridha.batch_status FROM public.fz_pruned),
agg AS (
    SELECT service_id, count(*) AS n, min(seq) AS lo, max(seq) AS hi,
           min(seq) FILTER (WHERE status < 'committed') AS head
      FROM allb GROUP BY service_id)
SELECT 'V', 'gap-free seq', encode(convert_to(c.service_id, 'UTF8'), 'hex'),
       format('tail_seq %s, %s batches, seq %s..%s', c.tail_seq, coalesce(a.n, 0), a.lo, a.hi)
  FROM gridha.service_claims c LEFT JOIN agg a USING (service_id)
 WHERE coalesce(a.n, 0) <> c.tail_seq OR (a.n > 0 AND (a.lo <> 1 OR a.hi <> c.tail_seq))
UNION ALL
SELECT 'V', 'one head', encode(convert_to(c.service_id, 'UTF8'), 'hex'),
       format('head_seq %s, smallest non-final seq %s', c.head_seq, a.head)
  FROM gridha.service_claims c LEFT JOIN agg a USING (service_id)
 WHERE c.head_seq IS DISTINCT FROM a.head
UNION ALL
SELECT 'V', 'a batch without its service', encode(convert_to(a.service_id, 'UTF8'), 'hex'), a.n::text
  FROM (SELECT service_id, count(*) AS n FROM gridha.batches GROUP BY service_id) a WHERE NOT EXISTS (SELECT 1 FROM gridha.service_claims c WHERE c.service_id = a.service_id)
UNION ALL
SELECT 'V', 'only queued batches behind the head', encode(convert_to(b.service_id, 'UTF8'), 'hex'),
       format('batch %s seq %s is %s, head_seq %s', encode(convert_to(b.batch_id, 'UTF8'), 'hex'), b.seq, b.status,
              c.head_seq)
  FROM gridha.batches b JOIN gridha.service_claims c USING (service_id)
 WHERE b.seq > c.head_seq AND b.status <> 'queued'
UNION ALL
SELECT 'V', 'in_flight is the head handed out', encode(convert_to(c.service_id, 'UTF8'), 'hex'),
       format('in_flight %s, head %s (instance %s)', c.in_flight, h.status, h.instance_id)
  FROM gridha.service_claims c LEFT JOIN gridha.batches h ON h.service_id = c.service_id AND h.seq = c.head_seq
 WHERE c.in_flight IS DISTINCT FROM coalesce(h.status IN ('pending', 'valid')
                                             OR (h.status = 'submitting' AND h.instance_id IS NOT NULL), false)
UNION ALL
SELECT 'V', 'the head was handed out under an epoch of its claim', encode(convert_to(c.service_id, 'UTF8'), 'hex'),
       format('head epoch %s, claim epoch %s', h.epoch, c.epoch)
  FROM gridha.service_claims c JOIN gridha.batches h ON h.service_id = c.service_id AND h.seq = c.head_seq
 WHERE h.epoch > c.epoch
UNION ALL
SELECT 'V', 'held counts the claims', i.instance_id::text, format('held %s, claims %s', i.held, coalesce(n.n, 0))
  FROM gridha.instances i
  LEFT JOIN (SELECT claimant, count(*) AS n FROM gridha.service_claims WHERE claimant IS NOT NULL
              GROUP BY claimant) n ON n.claimant = i.instance_id
 WHERE i.held <> coalesce(n.n, 0)
UNION ALL
SELECT 'V', 'a claimant is an instance', c.claimant::text, encode(convert_to(c.service_id, 'UTF8'), 'hex')
  FROM gridha.service_claims c
 WHERE c.claimant IS NOT NULL AND NOT EXISTS (SELECT 1 FROM gridha.instances i WHERE i.instance_id = c.claimant)
UNION ALL
SELECT 'V', 'service_counts counts the services', encode(convert_to(coalesce(x.target, y.target), 'UTF8'), 'hex'),
       format('counted %s, services %s', coalesce(x.n, 0), coalesce(y.n, 0))
  FROM (SELECT target, sum(services) AS n FROM gridha.service_counts GROUP BY target) x
  FULL JOIN (SELECT target, count(*) AS n FROM gridha.service_claims GROUP BY target) y USING (target)
 WHERE coalesce(x.n, 0) <> coalesce(y.n, 0);
SELECT 'E', encode(convert_to(service_id, 'UTF8'), 'hex'), epoch FROM gridha.service_claims;
SELECT 'F', encode(convert_to(service_id, 'UTF8'), 'hex'), encode(convert_to(batch_id, 'UTF8'), 'hex'),
       status, seq, coalesce(md5(payload), '-'), coalesce(finished_at::text, '-')
  FROM gridha.batches WHERE status >= 'committed';
SELECT 'N', count(*), count(*) FILTER (WHERE status >= 'committed') FROM gridha.batches;
COMMIT;
"""


class Checker:
    """The invariants, at checkpoints and at the end."""

    def __init__(self, db):
        self.db = db
        self.finals = {}
        self.epochs = {}
        self.violations = []     # keys of self.seen, in the order first seen
        self.seen = {}           # key -> [message, how many checks saw it]
        self.count = 0
        self.reported = []
        self.lock = threading.Lock()
        self.batches = (0, 0)

    def checkpoint(self, label, wait=True):
        out = rows(self.db, INVARIANTS_SQL, wait=wait)
        with self.lock:
            self.count += 1
            for r in out:
                if r[0] == "V":
                    if r[1] in ("held counts the claims", "a claimant is an instance"):
                        self.violate((r[1], r[2]), "%s (%s): instance %s: %s" % (r[1], label, r[2], r[3]))
                    else:
                        self.violate((r[1], r[2]), "%s (%s): service %s: %s"
                                     % (r[1], label, show(unhex(r[2])), r[3]))
                elif r[0] == "E":
                    sid, ep = r[1], int(r[2])
                    old = self.epochs.get(sid)
                    if old is not None and ep < old:
                        self.violate(("epoch", sid), "epochs never go down (%s): service %s went from %d to %d"
                                     % (label, show(unhex(sid)), old, ep))
                    self.epochs[sid] = ep
                elif r[0] == "F":
                    key = (r[1], r[2], r[4])
                    val = tuple(r[3:])
                    old = self.finals.get(key)
                    if old is None:
                        self.finals[key] = val
                    elif old != val:
                        self.violate(("final", key), "a final batch stays as it was (%s): %s/%s was %s, is %s"
                                     % (label, show(unhex(r[1])), show(unhex(r[2])), old, val))
                elif r[0] == "N":
                    self.batches = (int(r[1]), int(r[2]))

    def final_finals(self):
        """every batch ever seen final is still there, unchanged"""
        now = {}
        for r in rows(self.db, "SELECT encode(convert_to(service_id, 'UTF8'), 'hex'),"
                               " encode(convert_to(batch_id, 'UTF8'), 'hex'), status, seq,"
                               " coalesce(md5(payload), '-'), coalesce(finished_at::text, '-')"
                               " FROM gridha.batches WHERE status >= 'committed'"):
            now[(r[0], r[1], r[3])] = tuple(r[2:])
        pruned = set(tuple(r) for r in rows(self.db, "SELECT encode(convert_to(service_id, 'UTF8'), 'hex'),"
                                                     " encode(convert_to(batch_id, 'UTF8'), 'hex'), seq"
                                                     " FROM public.fz_pruned"))
        for key, val in self.finals.items():
            if now.get(key) != val and not (key not in now and key in pruned):
                self.violate(("final", key), "a final batch stays as it was (end): %s/%s was %s, is %s"
                             % (show(unhex(key[0])), show(unhex(key[1])), val, now.get(key)))

    def violate(self, key, msg):
        """one line per violation, however many checks see it again"""
        if key in self.seen:
            self.seen[key][1] += 1
        else:
            self.seen[key] = [msg, 1]
            self.violations.append(key)

    def report(self):
        """the violations seen since the last report, and forgets them (their
        keys stay in self.reported, for the audit trail)"""
        out = [m + (" (and at %d later checks)" % (n - 1) if n > 1 else "")
               for m, n in (self.seen[k] for k in self.violations)]
        self.reported = list(self.violations)
        self.violations, self.seen = [], {}
        return out


# ---------------------------------------------------------------------------
# Setup

SETUP_SQL = r"""
SET client_min_messages = warning;
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['gridha_fuzz_a', 'gridha_fuzz_b', 'gridha_fuzz_producer', 'gridha_fuzz_admin',
                             'gridha_fuzz_runner'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I LOGIN', r);
        END IF;
    END LOOP;
END
$$;
GRANT gridha_client TO gridha_fuzz_a, gridha_fuzz_b;
GRANT gridha_producer TO gridha_fuzz_producer;
GRANT gridha_admin TO gridha_fuzz_admin;
GRANT gridha_submitter TO gridha_fuzz_runner;

-- What the in-database target functions applied.
CREATE TABLE public.fz_applied (sid text, bid text, PRIMARY KEY (sid, bid));
GRANT ALL ON public.fz_applied TO PUBLIC;

CREATE FUNCTION public.fz_ok_submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS $fz$
BEGIN
    INSERT INTO public.fz_applied (sid, bid) VALUES ($1, $2) ON CONFLICT DO NOTHING;
    RETURN 'accepted';
END
$fz$;
CREATE FUNCTION public.fz_ok_status(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $fz$
    SELECT x, 'COMMITTED' FROM unnest($1) x
$fz$;
CREATE FUNCTION public.fz_sub_a(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $fz$ SELECT public.fz_ok_submit($1, $2, $3, $4) $fz$;
CREATE FUNCTION public.fz_sub_b(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $fz$ SELECT public.fz_ok_submit($1, $2, $3, $4) $fz$;
CREATE FUNCTION public.fz_stat_a(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $fz$ SELECT * FROM public.fz_ok_status($1) $fz$;
CREATE FUNCTION public.fz_stat_b(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $fz$ SELECT * FROM public.fz_ok_status($1) $fz$;
CREATE FUNCTION public.fz_wrong(batch_id text) RETURNS text LANGUAGE sql AS $fz$ SELECT $1 $fz$;

UPDATE gridha.targets SET submit_url = :'led' || '/batches/{service_id}/{batch_id}',
                          status_url = :'led' || '/batch_statuses?id={batch_ids}'
 WHERE target = 'default';
INSERT INTO gridha.targets (target, submit_url, status_url) VALUES
    ('fzsp', :'led' || '/batches/{service_id}/{batch_id}', :'led' || '/splinter/batch_statuses?ids={batch_ids}'),
    ('fzmal', :'led' || '/batches/{service_id}/{batch_id}', :'led' || '/batch_statuses?id={batch_ids}');
INSERT INTO gridha.targets (target, submit_url) VALUES
    ('fzfaf', :'led' || '/batches/{service_id}/{batch_id}');
INSERT INTO gridha.targets (target, submit_url, status_url, rate_interval, rate_burst) VALUES
    ('fzrate', :'led' || '/batches/{service_id}/{batch_id}', :'led' || '/batch_statuses?id={batch_ids}', '20 ms', 5);
INSERT INTO gridha.targets (target, submit_function) VALUES ('fzfn', 'public.fz_sub_a(text,text,bytea,bigint)');
INSERT INTO gridha.targets (target, submit_function, status_function) VALUES
    ('fzfn2', 'public.fz_sub_b(text,text,bytea,bigint)', 'public.fz_stat_a(text[])');
SELECT gridha.create_id_sequence('fz-seq-1', 100, 2);
-- issue 38: targets the administrators' session moves services to, renames
-- (fzmv <-> fzmv2) and deletes and creates again (fzdel)
INSERT INTO gridha.targets (target, submit_url, status_url) VALUES
    ('fzmv', :'led' || '/batches/{service_id}/{batch_id}', :'led' || '/batch_statuses?id={batch_ids}'),
    ('fzdel', :'led' || '/batches/{service_id}/{batch_id}', :'led' || '/batch_statuses?id={batch_ids}');

-- Batches deleted (retention's prune steps, by the maintenance session): the
-- invariants count them as the seqs they were (test/fuzz/invariants.py).
CREATE TABLE public.fz_pruned (service_id text, batch_id text, seq bigint, status text,
                               at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION public.fz_pruned_row() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fz$
BEGIN
    INSERT INTO public.fz_pruned (service_id, batch_id, seq, status)
    VALUES (OLD.service_id, OLD.batch_id, OLD.seq, OLD.status::text);
    RETURN NULL;
END
$fz$;
CREATE TRIGGER fz_pruned AFTER DELETE ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION public.fz_pruned_row();

-- What a deleted target's running totals held when it went (its rows of
-- gridha.target_totals go with it, docs/operations.md): the settled counts
-- of services that moved away from it before. The invariant "counts" adds
-- them (test/fuzz/invariants.py). A BEFORE trigger, so that it reads the
-- rows before targets_totals_follow deletes them, and goes with a delete
-- that fails.
CREATE TABLE public.fz_totals_gone (target text, enq bigint, com bigint, inv bigint, res bigint,
                                    at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION public.fz_totals_gone_row() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fz$
BEGIN
    INSERT INTO public.fz_totals_gone (target, enq, com, inv, res)
    SELECT OLD.target, coalesce(sum(o.settled_enqueued), 0), coalesce(sum(o.settled_committed), 0),
           coalesce(sum(o.settled_invalid), 0), coalesce(sum(o.settled_resubmitted), 0)
      FROM gridha.target_totals o WHERE o.target = OLD.target;
    RETURN OLD;
END
$fz$;
CREATE TRIGGER fz_totals_gone BEFORE DELETE ON gridha.targets
    FOR EACH ROW EXECUTE FUNCTION public.fz_totals_gone_row();
"""


# A debugging aid (--audit): every change of gridha.instances,
# gridha.service_claims and gridha.service_counts, with the statement that
# made it.
AUDIT_SQL = r"""
CREATE TABLE public.fz_audit (
    id   bigserial PRIMARY KEY,
    at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    xid  xid8 DEFAULT pg_current_xact_id(),
    app  text DEFAULT current_setting('application_name'),
    tbl  text, op text, old jsonb, new jsonb,
    q    text DEFAULT left(current_query(), 400));
CREATE FUNCTION public.fz_audit_row() RETURNS trigger LANGUAGE plpgsql AS $fz$
BEGIN
    INSERT INTO public.fz_audit (tbl, op, old, new)
    VALUES (TG_TABLE_NAME, TG_OP, CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) END,
            CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) END);
    RETURN NULL;
END
$fz$;
CREATE TRIGGER fz_audit AFTER INSERT OR UPDATE OR DELETE ON gridha.instances
    FOR EACH ROW EXECUTE FUNCTION public.fz_audit_row();
CREATE TRIGGER fz_audit AFTER INSERT OR UPDATE OR DELETE ON gridha.service_claims
    FOR EACH ROW EXECUTE FUNCTION public.fz_audit_row();
CREATE TRIGGER fz_audit AFTER INSERT OR UPDATE OR DELETE ON gridha.service_counts
    FOR EACH ROW EXECUTE FUNCTION public.fz_audit_row();
GRANT INSERT ON public.fz_audit TO PUBLIC;
GRANT USAGE ON SEQUENCE public.fz_audit_id_seq TO PUBLIC;
"""


def setup(a):
    psql(a.db, "\\set led '%s'\n" % a.ledger + SETUP_SQL + (AUDIT_SQL if a.audit else ""))


# ---------------------------------------------------------------------------
# The run

def privileges(db):
    """(role, object) -> bool for every role and every object a statement
    may need"""
    objs = ["f:" + f for f in F.values()] + ["r:gridha." + v for v in VIEWS] + \
        ["t:gridha.batches:INSERT", "t:gridha.targets:UPDATE"]
    out = {}
    for role in [ROLE_A, ROLE_B, ROLE_PRODUCER, ROLE_ADMIN]:
        parts = []
        for o in objs:
            if o.startswith("f:"):
                # a function of gridha_internal needs USAGE on that schema too
                fn = o[2:]
                usage = " AND has_schema_privilege('%s', '%s', 'USAGE')" % (role, fn.split(".")[0]) \
                    if fn.startswith("gridha_internal.") else ""
                parts.append("has_function_privilege('%s', '%s', 'EXECUTE')%s" % (role, fn, usage))
            elif o.startswith("r:"):
                parts.append("has_table_privilege('%s', '%s', 'SELECT')" % (role, o[2:]))
            else:
                _, rel, priv = o.split(":")
                parts.append("has_table_privilege('%s', '%s', '%s')" % (role, rel, priv))
        got = psql(db, "SELECT " + " || ',' || ".join("(%s)::text" % p for p in parts)).strip().split(",")
        for o, g in zip(objs, got):
            out[(role, o)] = g == "true"
    return out


def load_sqlstates(path):
    codes = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            code, _, meaning = line.partition(" ")
            codes[code] = meaning.strip()
    return codes


class Run:
    def __init__(self, a):
        self.a = a
        self.db = a.db
        self.seed = a.seed
        self.work = a.work
        self.codes = load_sqlstates(a.sqlstates)
        self.checker = Checker(a.db)
        self.bad_codes = []          # (session, stmt, result, why)
        self.hangs = []
        self.lost = 0                # sessions that ended before their last statement
        self.acks = {}               # (sid, bid) -> (md5, seq or None, where)
        self.dup_acks = []
        self.rolled = set()
        self.calls = 0
        self.by_kind = {}
        self.covered = set()
        self.covered_ok = set()
        self.batched_rows = 0
        self.batched_bad = []
        self.lone_deadlocks = {}     # actor -> lone calls that ended in 40P01
        self.maybe = set()           # (service, batch) written by a statement without an ack
        self.rcheck = RoundChecker(rows, a.db, a.ledger, ROLE_RUNNER)
        self.leftover_prepared = []

    def tap(self, ok, what, details=()):
        print(("ok - " if ok else "not ok - ") + what, flush=True)
        for d in list(details)[:20]:
            for line in str(d).splitlines():
                print("# " + line, flush=True)
        if len(details) > 20:
            print("# ... and %d more" % (len(details) - 20), flush=True)
        return ok

    def sessions(self):
        rng = random.Random(self.seed)
        ids = lambda n: [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]
        ss = [
            Session("chaos", "postgres", ids(2), superuser=True),
            Session("a1", ROLE_A, ids(2)),
            Session("a2", ROLE_A, ids(2)),
            Session("b1", ROLE_B, ids(2)),
            Session("prod", ROLE_PRODUCER, ids(1)),
            Session("inst", ROLE_B, ids(3)),
            Session("admin", "postgres", ids(1), superuser=True),
            Session("maint", "postgres", ids(1), superuser=True),
        ]
        return ss[:max(2, self.a.sessions)]

    def main(self):
        a = self.a
        print("# fuzz seed %d (FUZZ_SEED=%d reproduces the statements; the interleaving differs)"
              % (self.seed, self.seed), flush=True)
        self.privs = privileges(self.db)
        sess = self.sessions()
        world = {
            "services": ["fz-%02d" % i for i in range(16)] + [w + "#s" for w in WEIRD[:6]] +
                        ["\u00e9" * 256],
            "targets": list(TARGETS),
            "ledger": a.ledger,
            "seq_names": ["fz-seq-1", "fz-seq-2", "maintenance"],
            "all_instances": [i for s in sess for i in s.instances],
            "enqueued": [],
            "cycles": {},
            "statement_timeout": a.statement_timeout,
            "lock_timeout": a.lock_timeout,
            "known_bugs_skip": os.environ.get("FUZZ_KNOWN_BUGS") == "skip",
        }
        world["targets"] += ["fzmv", "fzmv2", "fzdel"]
        if world["known_bugs_skip"]:
            print("# FUZZ_KNOWN_BUGS=skip: the statements that meet the bugs being fixed are left out"
                  " (a development aid: make test never sets it)", flush=True)
        start = time.monotonic()
        stop_checker = threading.Event()
        cp_errors = []

        def checkpoints():
            while not stop_checker.wait(a.checkpoint_every):
                try:
                    self.checker.checkpoint("checkpoint %d" % (self.checker.count + 1), wait=False)
                except Exception as e:  # a checkpoint that could not run is a failure too
                    cp_errors.append(str(e)[:500])

        th = threading.Thread(target=checkpoints, daemon=True)
        th.start()
        rnd = 0
        while True:
            rnd += 1
            lost = self.lost
            self.round(rnd, sess, world)
            self.after_round(rnd)
            elapsed = time.monotonic() - start
            if self.lost > lost:
                # a session lost its connection or hung: the server may be
                # restarting again and again; what follows would show nothing
                print("# the fuzz stops after round %d: a session did not finish" % rnd, flush=True)
                break
            if a.seconds > 0:
                if elapsed >= a.seconds:
                    break
            elif rnd >= a.rounds:
                break
        stop_checker.set()
        th.join()
        fuzz_time = time.monotonic() - start
        self.repair()
        self.checker.checkpoint("after the last round")
        print("# %d rounds, %d statements in %.1f s, %d checkpoints; batches %d (%d final)"
              % (rnd, self.calls, fuzz_time, self.checker.count, self.checker.batches[0],
                 self.checker.batches[1]), flush=True)
        self.report_kinds()

        ok = True
        ok &= self.tap(not self.bad_codes, "sqlstates: every error of %d statements has a documented SQLSTATE "
                       "(test/fuzz/sqlstates.txt), in its situation" % self.calls,
                       [self.describe(*b) for b in self.bad_codes])
        ok &= self.tap(not self.batched_bad, "sqlstates: the batched reports gave one row per batch, each with a "
                       "status or a documented SQLSTATE (%d calls)" % self.batched_rows, self.batched_bad)
        ok &= self.tap(not self.hangs, "hangs: every session finished in time, no statement ran into its "
                       "statement or lock timeout", self.hangs)
        ok &= self.tap(not cp_errors, "invariants: every checkpoint ran (%d)" % self.checker.count, cp_errors)
        bad = self.checker.report()
        ok &= self.tap(not bad, "invariants hold at every checkpoint: gap-free seq, one head, "
                       "only queued batches behind it, bookkeeping, epochs never down, final batches unchanged", bad)
        self.audit_trail(self.checker.reported)
        ok &= self.drain()
        # once more with the targets repaired and the fuzz's leases over:
        # the workers then idle, and work left waiting shows
        self.after_round("after the drain")
        ok &= self.round_invariants()
        ok &= self.final_checks()
        ok &= self.coverage()
        ok &= self.server_log()
        return 0 if ok else 1

    def after_round(self, rnd):
        """a transaction a script left prepared (it ended between PREPARE
        and COMMIT PREPARED) is rolled back, then the round's invariants
        (test/fuzz/invariants.py)"""
        for r in rows(self.db, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'fz-%' AND database = current_database()"):
            self.leftover_prepared.append("round %s: %s" % (rnd, r[0]))
            psql(self.db, "ROLLBACK PREPARED '%s'" % r[0].replace("'", "''"), check=False)
        label = rnd if isinstance(rnd, str) else "round %d" % rnd
        n = self.rcheck.check(label, unhex)
        if n:
            print("# %s: %d new invariant violations" % (label, n), flush=True)

    def round_invariants(self):
        """the TAP lines of the invariants after each round"""
        rc = self.rcheck
        ok = True
        ok &= self.tap(not rc.violations["seq"] and not rc.errors,
                       "invariant seq: no seq hole and no head without its batch row, after every round (%d checks)"
                       % rc.rounds, rc.errors + rc.violations["seq"])
        ok &= self.tap(not rc.violations["claims"], "invariant claims: every claim is free or held by an existing, "
                       "leased instance, after every round", rc.violations["claims"])
        ok &= self.tap(not rc.violations["counts"], "invariant counts: instances.held and gridha.metrics equal what "
                       "the rows say, after every round", rc.violations["counts"])
        try:
            flagged, note = rc.self_check(psql, self.a.ledger, unhex)
        except Exception as e:
            flagged, note = False, "the self-check could not run: %s" % str(e)[:300]
        print("# invariant work, self-check (a planted service that waits, its claim locked): %s"
              % ("flagged" if flagged else "not judged" if flagged is None else "NOT flagged"), flush=True)
        for line in note.splitlines():
            print("#   " + line, flush=True)
        ok &= self.tap(not rc.violations["work"] and flagged is not False,
                       "invariant work: no service with work waits while an instance idles (the pollers, settled),"
                       " after every round", rc.violations["work"])
        # A lone call may lose a deadlock to an explicit transaction of
        # several calls, which can lock in any order (docs/errors.md); a
        # deadlock among lone calls only is a break of the lock order.
        multi, lone_only = self.deadlock_partners()
        by_actor = ", ".join("%s %d" % (k, len(v)) for k, v in sorted(self.lone_deadlocks.items())) or "none"
        client = [d for v in self.lone_deadlocks.values() for d in v]
        workers_lone = [d for d in self.worker_deadlocks() if "(its partner: " not in d]
        workers_multi = len(self.worker_deadlocks()) - len(workers_lone)
        details = workers_lone[:]
        if lone_only or len(client) > max(multi - workers_multi, 0):
            details = client + details
        for d in client if not details else []:
            print("# a lone call lost a deadlock to an explicit transaction of several calls: "
                  + d.splitlines()[0][:200], flush=True)
        ok &= self.tap(not details, "invariant deadlocks: no lone call ended in 40P01 against lone calls only"
                       " (lone calls that did, by actor: %s; their partners in the log: %d explicit transactions"
                       " of several calls, %d lone calls only; workers: %d)"
                       % (by_actor, multi, lone_only, len(self.worker_deadlocks())), details)
        if self.leftover_prepared:
            print("# prepared transactions a script left, rolled back: %s" % ", ".join(self.leftover_prepared),
                  flush=True)
        return ok

    def deadlock_partners(self):
        """from the server log: of the deadlocks a lone call lost, how many
        had an explicit transaction of several calls among the others
        (docs/errors.md: "or in a deadlock with one") and how many lone
        calls only (docs/concurrency.md: never)"""
        if not self.a.pglog:
            return 0, 0
        with open(self.a.pglog, "rb") as f:
            lines = [line.decode("utf-8", errors="replace") for line in f.read().split(b"\n")[self.a.log_mark:]]
        multi = lone = 0
        for at, l in enumerate(lines):
            m = re.search(r"\[(\d+)\].*\b(ERROR|LOG):\s+40P01:", l)
            if not m:
                continue
            entry = "\n".join(self.log_entry(lines, at))
            procs = re.findall(r"Process (\d+): (.*)", entry)
            mine = [q for pid, q in procs if pid == m.group(1)]
            if with_txn(mine):
                continue         # the loser was in a transaction of several calls
            if with_txn(q for pid, q in procs if pid != m.group(1)):
                multi += 1
            else:
                lone += 1
        if multi or lone:
            print("# 40P01 of lone calls in the server log: %d with an explicit transaction of several calls among"
                  " the others, %d among lone calls only" % (multi, lone), flush=True)
        return multi, lone

    def worker_deadlocks(self):
        """the worker steps (lone calls) that failed with 40P01, from the
        server log"""
        if not self.a.pglog:
            return []
        if getattr(self, "_wd", None) is None:
            with open(self.a.pglog, "rb") as f:
                lines = [line.decode("utf-8", errors="replace") for line in f.read().split(b"\n")[self.a.log_mark:]]
            self._wd = []
            for at, l in enumerate(lines):
                if re.search(r"\bLOG:\s+40P01:\s+gridha worker\b", l) or \
                        re.search(r"\bLOG:\s+[0-9A-Z]{5}:\s+gridha worker: .* failed: .* \(40P01\)$", l):
                    entry = self.log_entry(lines, at)
                    partner = " (its partner: an explicit transaction of several calls)" \
                        if with_txn(entry) else ""
                    self._wd.append("worker%s: %s" % (partner, "\n".join(x[:300] for x in entry[:6])))
        return self._wd

    def report_kinds(self):
        for kind in sorted(self.by_kind):
            c = self.by_kind[kind]
            codes = ", ".join("%s %d" % (k, v) for k, v in sorted(c.items(), key=lambda x: -x[1]))
            print("#   %-20s %s" % (kind, codes), flush=True)

    def describe(self, sess, st, res, why):
        return "%s #%d (%s, role %s): %s %s\n  statement: %s\n  message: %s" % (
            sess, st.idx, st.kind, st.role, res.code, why, show(st.sql, 600), show(res.msg, 400))

    def round(self, rnd, sess, world):
        procs = []
        nonce = "%08x" % random.Random(self.seed * 1000003 + rnd).getrandbits(32)
        for s in sess:
            rng = random.Random("%d/%d/%s" % (self.seed, rnd, s.name))
            g = Gen(rng, s, rnd, world)
            g.stmts = init_stmts(s, self.seed + rnd, world)
            for st in g.stmts:
                st.idx = g.n
                st.role = s.role
                g.n += 1
            weights = {"inst": INSTANCES_WEIGHTS, "admin": ADMIN_WEIGHTS, "maint": MAINT_WEIGHTS}.get(s.name) or \
                (CHAOS_WEIGHTS if s.superuser else (PRODUCER_WEIGHTS if s.role == ROLE_PRODUCER else CLIENT_WEIGHTS))
            random.seed("%d/%d/%s/lit" % (self.seed, rnd, s.name))
            if rnd == 1 and s.superuser:
                g.k_tour()
            stmts = g.generate(self.a.calls + len(g.stmts), weights)
            if s.name == "inst":
                g.release_own()
            script = os.path.join(self.work, "r%d-%s.sql" % (rnd, s.name))
            out = os.path.join(self.work, "r%d-%s.out" % (rnd, s.name))
            write_script(script, stmts, nonce)
            p = subprocess.Popen(["psql", "-X", "-q", "-U", s.role, "-d", self.db, "-f", script],
                                 stdout=open(out, "w"), stderr=subprocess.DEVNULL)
            procs.append((s, stmts, p, out, script, time.monotonic()))
        deadline = time.monotonic() + self.a.session_timeout
        for s, stmts, p, out, script, t0 in procs:
            try:
                p.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                self.hangs.append("round %d session %s did not finish within %d s (script %s)"
                                  % (rnd, s.name, self.a.session_timeout, script))
        for s, stmts, p, out, script, t0 in procs:
            self.judge(rnd, s, stmts, parse_output(out, nonce))
            if not self.a.keep:
                os.unlink(out)
                os.unlink(script)

    def judge(self, rnd, s, stmts, res):
        """the results of one session's script: codes, batched rows, acks.

        In a transaction the fuzzer opened, an enqueue is acknowledged when
        the transaction commits without an error left standing (an error
        rolled back to its savepoint does not count; the enqueues inside
        that savepoint are rolled back)."""
        where = "round %d %s" % (rnd, s.name)
        aborted = False          # the open transaction has an error standing
        in_txn = []              # enqueues that succeeded in the open transaction
        in_sp = []               # ... of them, those since SAVEPOINT
        missing = 0
        for st in stmts:
            self.calls += 1
            r = res.get(st.idx)
            kind = self.by_kind.setdefault(st.kind, {})
            if r is None:
                kind["no result"] = kind.get("no result", 0) + 1
                missing += 1
                if missing == 1:
                    self.lost += 1
                    self.hangs.append("%s: #%d (%s) and the %d statements after it have no result: the session "
                                      "ended before them\n  statement: %s"
                                      % (where, st.idx, st.kind, len(stmts) - 1 - stmts.index(st), show(st.sql, 300)))
                continue
            kind[r.code] = kind.get(r.code, 0) + 1
            self.covered |= st.covers
            if r.code == "00000":
                self.covered_ok |= st.covers
            else:
                if r.code == "55P03" and "locktimeout" in st.flags:
                    pass         # a lock timeout the statement set itself
                elif r.code in ("57014", "55P03"):
                    # the statement ran into the session's statement or
                    # lock timeout: a hang
                    self.hangs.append(self.describe(where, st, r, "(timeout)"))
                elif r.code == "XX000" and PG_DDL_RACE_SQL.match(st.sql) and \
                        PG_DDL_RACE_MSG.match(r.msg or ""):
                    # PostgreSQL's own race of two sessions dropping one
                    # function at once (the second finds it gone once it
                    # holds its lock; server_log lets its line pass too); a
                    # worker's call holds the function, so the fuzz's drops
                    # now often wait side by side
                    pass
                elif r.code == "40P01" and st.txn is None:
                    # a lone call's deadlock: judged by the deadlock
                    # invariant, which reads its partners from the server
                    # log (a lone call may lose to an explicit transaction
                    # of several calls, never to lone calls only)
                    pass
                elif r.code == "40001" and "was deleted while it took claims" in (r.msg or ""):
                    # the admin (or the sweep) deleted the calling instance's
                    # row while the call took claims: its takes are undone
                    # (docs/errors.md; 1.3)
                    pass
                else:
                    why = self.why_not(st, r.code, aborted)
                    if why is not None:
                        self.bad_codes.append((where, st, r, why))
                if st.txn is not None:
                    aborted = True
            if st.kind == "txn":
                if st.sql.startswith("BEGIN"):
                    aborted, in_txn, in_sp = False, [], []
                elif st.sql == "SAVEPOINT fz":
                    in_sp = []
                elif st.sql == "ROLLBACK TO SAVEPOINT fz":
                    for key in in_sp:
                        in_txn.remove(key)
                        self.rolled.add(key[0])
                    in_sp = []
                    aborted = aborted and r.code != "00000"
                elif st.sql == "COMMIT" and st.txn is not None:
                    for key in in_txn:
                        if aborted:
                            self.rolled.add(key[0])
                        else:
                            self.ack(*key)
                    in_txn, in_sp, aborted = [], [], False
                elif st.sql == "ROLLBACK" and st.txn is not None:
                    for key in in_txn:
                        self.rolled.add(key[0])
                    in_txn, in_sp, aborted = [], [], False
            if st.rows_capture and r.code == "00000":
                self.judge_rows(where, st, r)
            if st.rolled and r.code == "00000":
                self.maybe.add(st.rolled)
            if r.code == "40P01" and st.txn is None and "multi" not in st.flags:
                self.lone_deadlocks.setdefault(s.name, []).append(self.describe(where, st, r, "(a lone call)"))
            for a_ in (([st.ack] if st.ack else []) + st.acks) if r.code == "00000" else []:
                seq = int(r.val) if st.capture == "eq" and r.val and r.val.isdigit() else None
                key = ((a_[0], a_[1]), a_[2], seq, "%s #%d" % (where, st.idx))
                if st.txn is None:
                    self.ack(*key)
                else:
                    in_txn.append(key)
                    in_sp.append(key)

    def ack(self, key, m, seq, where):
        if key in self.acks:
            self.dup_acks.append((key, "%s: %s/%s enqueued twice (first %s)"
                                  % (where, show(key[0]), show(key[1]), self.acks[key][2])))
        self.acks[key] = (m, seq, where)

    def why_not(self, st, code, txn_failed):
        """None when code is documented and fits the statement's
        situation; otherwise why not"""
        if code not in self.codes:
            return "(not in sqlstates.txt)"
        gate = GATES.get(code)
        if gate is None:
            return None
        if gate == "priv":
            if st.role in (None, "postgres"):
                return "(a superuser lacks no privilege)"
            if all(self.privs.get((st.role, o), True) for o in st.objs):
                return "(role %s holds every privilege the statement needs: %s)" % (st.role, st.objs)
            return None
        if gate == "aborted":
            return None if (st.txn is not None and txn_failed) else "(not after an error in its transaction)"
        if gate == "serverlog":
            return "(only the workers may end so, in the server log)"
        if gate in st.flags:
            return None
        # a lone call (one statement outside an explicit transaction of
        # several calls) never ends in a deadlock, whoever else took part:
        # every statement follows one lock order (src/claims.c)
        return "(the statement is not in that situation: no %s)" % gate

    def judge_rows(self, where, st, r):
        """the rows of a batched report: as many as batches, each with a
        status or a documented SQLSTATE"""
        self.batched_rows += 1
        if r.val is None:
            return
        n, good, states = (r.val.split(":", 2) + ["", "", ""])[:3]
        if n != good:
            self.batched_bad.append("%s #%d: %s of %s rows have a status or an SQLSTATE (not both, not neither)"
                                    "\n  statement: %s" % (where, st.idx, good, n, show(st.sql, 300)))
        for code in filter(None, states.split(",")):
            if code not in self.codes or code in GATES:
                self.batched_bad.append("%s #%d: a row refused with %s\n  statement: %s"
                                        % (where, st.idx, code, show(st.sql, 300)))

    # -- after the fuzz ---------------------------------------------------------

    def repair(self):
        """after the fuzz: the dynamic workers stopped, every target usable
        (functions that accept and commit everything), the leases of the
        fuzz sessions' instances expired (as tests do instead of waiting)"""
        # first what may make every backend that reads the targets crash
        # (a server restarting again and again lets short statements through)
        psql(self.db, r"""
BEGIN;
ALTER TABLE gridha.targets DISABLE TRIGGER targets_check;
UPDATE gridha.targets SET submit_url = NULL, status_url = NULL, submit_function = NULL, status_function = NULL,
       rate_interval = NULL, rate_burst = 1, reject_codes = '{400,422}', request_headers = NULL;
ALTER TABLE gridha.targets ENABLE TRIGGER targets_check;
COMMIT;
""")
        psql(self.db, r"""
SELECT gridha.stop_worker(instance_id) FROM gridha.workers WHERE label NOT IN (@static@);
CREATE OR REPLACE FUNCTION public.fz_sub_a(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $fz$ SELECT public.fz_ok_submit($1, $2, $3, $4) $fz$;
CREATE OR REPLACE FUNCTION public.fz_stat_a(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $fz$ SELECT * FROM public.fz_ok_status($1) $fz$;
UPDATE gridha.targets SET submit_function = 'public.fz_sub_a(text,text,bytea,bigint)',
       status_function = 'public.fz_stat_a(text[])';
-- (rows locked in id order, as gridha locks them)
UPDATE gridha.instances i SET soft_expiry = now() - interval '1 s', hard_expiry = now() - interval '1 s'
  FROM (SELECT x.instance_id FROM gridha.instances x
         WHERE x.kind = 'external' AND x.soft_expiry IS NOT NULL AND x.owner IS DISTINCT FROM '@runner@'
         ORDER BY x.instance_id FOR UPDATE) l
 WHERE i.instance_id = l.instance_id;
""".replace("@static@", STATIC_LABELS).replace("@runner@", ROLE_RUNNER))

    def drain(self):
        """the workers finish every batch"""
        db = self.db
        t0 = time.monotonic()
        stalled_since = t0
        left = None
        while True:
            # time passes for delayed batches: their backoff is over (rows
            # locked in service_id order, COLLATE "C", as gridha locks them:
            # in heap order this statement once closed a cycle with a
            # worker's batched report, which waits for its claims in that
            # order; docs/concurrency.md)
            psql(db, """
UPDATE gridha.service_claims c SET ready_at = now()
  FROM (SELECT x.service_id FROM gridha.service_claims x WHERE x.ready_at > now()
         ORDER BY x.service_id COLLATE "C" FOR NO KEY UPDATE) l
 WHERE c.service_id = l.service_id""")
            now_left = int(psql(db, "SELECT count(*) FROM gridha.batches WHERE status < 'committed'").strip())
            if left is None or now_left < left:
                stalled_since = time.monotonic()
            left = now_left
            # done, or no progress for --drain-timeout seconds
            if left == 0 or time.monotonic() - stalled_since > self.a.drain_timeout:
                break
            time.sleep(1)
        total = psql(db, "SELECT count(*) || ' batches: ' || coalesce(string_agg(s, ', '), '') FROM"
                         " (SELECT status || ' ' || count(*) AS s, count(*) AS n FROM gridha.batches GROUP BY status"
                         " ORDER BY status) x").strip()
        details = []
        if left:
            details = [" | ".join([show(unhex(r[0]), 40), show(unhex(r[1]), 40)] + r[2:7] + [show(unhex(r[7]), 120)]) for r in rows(db, """
SELECT encode(convert_to(b.service_id, 'UTF8'), 'hex'), encode(convert_to(b.batch_id, 'UTF8'), 'hex'),
       b.status, b.attempts, c.target, c.claimant, coalesce(i.kind, '-'),
       encode(convert_to(left(coalesce(b.detail, ''), 120), 'UTF8'), 'hex')
  FROM gridha.batches b JOIN gridha.service_claims c USING (service_id)
  LEFT JOIN gridha.instances i ON i.instance_id = c.claimant
 WHERE b.status < 'committed' ORDER BY b.service_id, b.seq LIMIT 12""")]
            # who holds what, and their leases (seconds from now)
            details = ["instance %s (%s, serves %s): held %s, claims %s, lease soft %s s, hard %s s" % tuple(r)
                       for r in rows(db, """
SELECT i.instance_id, i.kind, coalesce(array_to_string(i.serves, ','), 'any'), i.held,
       (SELECT count(*) FROM gridha.service_claims c WHERE c.claimant = i.instance_id),
       coalesce(round(extract(epoch FROM i.soft_expiry - now()))::text, '-'),
       coalesce(round(extract(epoch FROM i.hard_expiry - now()))::text, '-')
  FROM gridha.instances i
 WHERE i.soft_expiry IS NOT NULL
    OR EXISTS (SELECT 1 FROM gridha.service_claims c WHERE c.claimant = i.instance_id)
 ORDER BY i.kind DESC, i.instance_id LIMIT 8""")] + details
            # what each worker is doing, its limits per target, and the
            # targets of the batches left: what a stall needs to be read
            try:
                details += self.stall_details(db)
            except Exception as e:    # only ever a report of a failure
                details.append("stall details could not be read: %s" % str(e)[:200])
        print("# drain: %.1f s; %s" % (time.monotonic() - t0, total), flush=True)
        return self.tap(left == 0, "drain: with the targets repaired, the workers bring every batch to a final "
                        "status (%d left, no progress for %d s)" % (left, self.a.drain_timeout) if left else
                        "drain: with the targets repaired, the workers bring every batch to a final status", details)

    def stall_details(self, db):
        """the workers, their limits, and the targets of the batches left"""
        details = ["worker %s" % " | ".join(r) for r in rows(db, """
SELECT w.instance_id, w.label, w.pid, w.state, w.state_since, coalesce(w.service_id, '-'),
       coalesce(w.batch_id, '-'), w.requests_in_flight
  FROM gridha.workers w ORDER BY w.label""")]
        details += ["limit %s" % " | ".join(r) for r in rows(db, """
SELECT l.instance_id, l.target, l.requests_in_flight, l.inflight_limit, l.failures
  FROM gridha.worker_limits l ORDER BY l.instance_id, l.target""")]
        details += ["target %s" % " | ".join(r) for r in rows(db, """
SELECT t.target, coalesce(t.submit_url, '-'), coalesce(t.submit_function, '-'),
       coalesce(t.rate_interval::text, '-'), t.rate_burst
  FROM gridha.targets t
 WHERE t.target IN (SELECT c.target FROM gridha.service_claims c JOIN gridha.batches b USING (service_id)
                     WHERE b.status < 'committed')""")]
        return details

    def final_checks(self):
        ok = True
        self.checker.checkpoint("end")
        self.checker.final_finals()
        bad = self.checker.report()
        ok &= self.tap(not bad, "invariants hold at the end: gap-free seq, one head, "
                       "bookkeeping, epochs, every batch seen final unchanged (%d)" % len(self.checker.finals), bad)
        self.audit_trail(self.checker.reported)
        have = {}
        for r in rows(self.db, "SELECT encode(convert_to(service_id, 'UTF8'), 'hex'),"
                               " encode(convert_to(batch_id, 'UTF8'), 'hex'), seq, coalesce(md5(payload), '-')"
                               " FROM gridha.batches"):
            have[(unhex(r[0]), unhex(r[1]))] = (int(r[2]), r[3])
        pruned = {}
        for r in rows(self.db, "SELECT encode(convert_to(service_id, 'UTF8'), 'hex'),"
                               " encode(convert_to(batch_id, 'UTF8'), 'hex'), seq FROM public.fz_pruned"):
            pruned.setdefault((unhex(r[0]), unhex(r[1])), set()).add(int(r[2]))
        lost = []
        for key, (m, seq, where) in self.acks.items():
            got = have.get(key)
            if got != (seq, m or "-") and key in pruned and (seq is None or seq in pruned[key]):
                continue         # final, then deleted by retention (and maybe enqueued again)
            if got is None:
                lost.append("%s: %s/%s acknowledged, missing" % (where, show(key[0]), show(key[1])))
            elif (m or "-") != got[1] or (seq is not None and seq != got[0]):
                lost.append("%s: %s/%s acknowledged as seq %s payload %s, is seq %d payload %s"
                            % (where, show(key[0]), show(key[1]), seq, m, got[0], got[1]))
        # (a batch that retention deleted may be enqueued again)
        dups = [m for k, m in self.dup_acks if k not in pruned]
        ok &= self.tap(not lost and not dups, "acks: every acknowledged enqueue (%d) exists with the seq "
                       "enqueue returned and its payload" % len(self.acks), lost + dups)
        ghosts = ["%s/%s was rolled back, exists" % (show(k[0]), show(k[1]))
                  for k in self.rolled if (k in have or k in pruned) and k not in self.acks and k not in self.maybe]
        ok &= self.tap(not ghosts, "acks: no enqueue that was rolled back exists (%d)" % len(self.rolled), ghosts)
        bad = rows(self.db, "SELECT 'instances.label', encode(convert_to(label, 'UTF8'), 'hex') FROM gridha.instances"
                            " UNION ALL SELECT 'batches.detail', encode(convert_to(detail, 'UTF8'), 'hex')"
                            " FROM gridha.batches WHERE detail IS NOT NULL")
        enc = []
        for what, h in bad:
            try:
                bytes.fromhex(h).decode("utf-8")
            except (UnicodeDecodeError, ValueError):
                enc.append("%s holds invalid UTF-8: %s" % (what, h[:80]))
        ok &= self.tap(not enc, "encoding: every label and detail gridha wrote is valid UTF-8", enc)
        return ok

    def coverage(self):
        fns = [r[0] for r in rows(self.db, "SELECT p.oid::regprocedure::text FROM pg_proc p"
                                           " WHERE p.pronamespace = 'gridha'::regnamespace"
                                           " AND p.prorettype <> 'trigger'::regtype ORDER BY 1")]
        views = [r[0] for r in rows(self.db, "SELECT c.relname FROM pg_class c WHERE c.relnamespace ="
                                             " 'gridha'::regnamespace AND c.relkind = 'v' ORDER BY 1")]
        missing = [f for f in fns if f.replace(" ", "") not in self.covered]
        missing += ["view " + v for v in views if "v:" + v not in self.covered]
        never_ok = [f for f in fns if f.replace(" ", "") in self.covered and f.replace(" ", "") not in self.covered_ok]
        ok = self.tap(not missing, "coverage: every function of schema gridha (%d, triggers aside) and every view "
                      "(%d) was called" % (len(fns), len(views)), missing)
        if never_ok:
            print("# called, never succeeded: %s" % ", ".join(never_ok), flush=True)
        return ok

    def audit_trail(self, keys):
        """with --audit (FUZZ_AUDIT=1): the last changes of the instances,
        services and targets' counts of the first violations, and the
        statements that made them"""
        if not self.a.audit or not keys:
            return
        for key in keys[:3]:
            what, ident = key[0], key[1]
            if what in ("held counts the claims", "a claimant is an instance"):
                where = ("(a.tbl = 'instances' AND %s IN (a.old->>'instance_id', a.new->>'instance_id'))"
                         " OR (a.tbl = 'service_claims' AND %s IN (a.old->>'claimant', a.new->>'claimant'))"
                         % (lit(ident), lit(ident)))
                label = "instance " + ident
            elif what == "service_counts counts the services":
                # the target's count rows, and the claims that came, went
                # or changed target (what the counts follow)
                tgt = "convert_from(decode('%s', 'hex'), 'UTF8')" % ident
                where = ("(a.tbl = 'service_counts' AND coalesce(a.new->>'target', a.old->>'target') = %s)"
                         " OR (a.tbl = 'service_claims' AND %s IN (a.old->>'target', a.new->>'target')"
                         " AND (a.op <> 'UPDATE' OR a.old->>'target' IS DISTINCT FROM a.new->>'target'))"
                         % (tgt, tgt))
                label = "target " + show(unhex(ident), 60)
            else:
                sid = ident[0] if isinstance(ident, tuple) else ident
                where = ("a.tbl = 'service_claims' AND coalesce(a.new->>'service_id', a.old->>'service_id')"
                         " = convert_from(decode('%s', 'hex'), 'UTF8')" % sid)
                label = "service " + show(unhex(sid), 60)
            try:
                trail = rows(self.db, """
SELECT a.id, to_char(a.at, 'HH24:MI:SS.MS'), a.xid, a.app, a.tbl, a.op,
       coalesce(a.old->>'claimant', '-') || ' -> ' || coalesce(a.new->>'claimant', '-'),
       coalesce(a.old->>'held', a.old->>'services', '-') || ' -> '
       || coalesce(a.new->>'held', a.new->>'services', '-'),
       coalesce(a.old->>'epoch', '-') || ' -> ' || coalesce(a.new->>'epoch', '-'),
       encode(convert_to(regexp_replace(left(a.q, 200), '\s+', ' ', 'g'), 'UTF8'), 'hex')
  FROM (SELECT * FROM public.fz_audit a WHERE %s ORDER BY a.id DESC LIMIT 12) a
 ORDER BY a.id""" % where)
            except RuntimeError as e:
                print("# audit trail of %s: %s" % (label, str(e).splitlines()[0]), flush=True)
                continue
            print("# audit trail of %s (%s), last %d changes (id, time, xid, session, table, op, claimant, held"
                  " or services, epoch, statement):" % (label, what, len(trail)), flush=True)
            for r in trail:
                print("#   " + " | ".join(r[:9] + [show(unhex(r[9]), 200)]), flush=True)

    @staticmethod
    def log_entry(lines, at):
        """the log entry starting at lines[at]: its DETAIL, HINT, CONTEXT
        lines and their continuation lines"""
        pid = re.search(r"\[(\d+)\]", lines[at])
        entry = [lines[at]]
        for l in lines[at + 1:at + 40]:
            if re.match(r"\d{4}-\d\d-\d\d ", l):
                if not (pid and "[%s]" % pid.group(1) in l and
                        re.search(r"\b(DETAIL|HINT|CONTEXT|LOCATION|STATEMENT):", l)):
                    break
            entry.append(l)
        return entry

    def server_log(self):
        if not self.a.pglog:
            return True
        # lines as wc -l counts them (ids with a CR in them are logged too)
        with open(self.a.pglog, "rb") as f:
            lines = [line.decode("utf-8", errors="replace")
                     for line in f.read().split(b"\n")[self.a.log_mark:]]
        sig = [l for l in lines if re.search(r"terminated by signal|was terminated by|server process .* was terminated", l)]
        ok = self.tap(not sig, "server log: no server process ended by a signal", sig)
        bad = []
        worker_codes = {}
        for at, l in enumerate(lines):
            m = re.search(r"\b(ERROR|FATAL|PANIC):\s+([0-9A-Z]{5}):", l)
            w = re.search(r"\bLOG:\s+([0-9A-Z]{5}):\s+gridha worker\b", l) or \
                re.search(r"\bLOG:\s+[0-9A-Z]{5}:\s+gridha worker: .* failed: .* \(([0-9A-Z]{5})\)$", l)
            if m and m.group(2) == "XX000" and PG_DDL_RACE_MSG.search(l[m.end():].strip()):
                pass     # two sessions' DDL on one function at once (PostgreSQL's race)
            elif m and m.group(2) not in self.codes:
                bad.append(l[:400])
            elif re.search(r"\b(PANIC|TRAP):", l):
                bad.append(l[:400])
            elif w and w.group(1) == "40001" and "was deleted while it took claims" in l:
                pass     # the administrator deleted the worker's instance row (docs/errors.md)
            elif w and w.group(1) != "00000":
                # a worker step that failed, or a report of it refused: a
                # documented code, of those a worker may meet (its step ran
                # out of time, a target function raised or was dropped)
                code = w.group(1)
                worker_codes[code] = worker_codes.get(code, 0) + 1
                # a worker's step is a lone call: a deadlock is a failure
                # unless an explicit transaction of several calls took part
                # (40P01's gate is "multi"; docs/errors.md), which the
                # invariant deadlocks judges with the other lone calls
                entry = self.log_entry(lines, at)
                if code == "40P01" and with_txn(entry):
                    continue
                if code not in self.codes or GATES.get(code) not in (None, "serverlog", "fnref"):
                    bad.append("\n".join(x[:400] for x in entry[:8]))
        if worker_codes:
            print("# worker steps that failed, by SQLSTATE: %s"
                  % ", ".join("%s %d" % kv for kv in sorted(worker_codes.items(), key=lambda kv: -kv[1])), flush=True)
        ok &= self.tap(not bad, "server log: every ERROR and FATAL, and every failed worker step, has a documented "
                       "SQLSTATE", bad)
        return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["setup", "run"])
    ap.add_argument("--db", required=True)
    ap.add_argument("--work", default="/tmp")
    ap.add_argument("--ledger", default="http://127.0.0.1:1")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=0, help="fuzz this long (0: --rounds rounds)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=300, help="statements per session and round")
    ap.add_argument("--sessions", type=int, default=8)
    # generous: a hang is a statement that never ends, not a slow one on a
    # loaded machine
    ap.add_argument("--statement-timeout", type=int, default=60)
    ap.add_argument("--lock-timeout", type=int, default=30)
    ap.add_argument("--session-timeout", type=int, default=600)
    ap.add_argument("--checkpoint-every", type=float, default=2.0)
    ap.add_argument("--drain-timeout", type=int, default=20,
                    help="the drain fails after this many seconds without progress")
    ap.add_argument("--sqlstates", default=os.path.join(HERE, "sqlstates.txt"))
    ap.add_argument("--pglog")
    ap.add_argument("--log-mark", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the scripts and outputs")
    ap.add_argument("--audit", action="store_true", help="setup: log every change of gridha.instances and "
                    "gridha.service_claims in public.fz_audit (a debugging aid); run: show the changes of the "
                    "instances and services of the first violations")
    a = ap.parse_args()
    if a.what == "setup":
        setup(a)
        return 0
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1, 2 ** 31)
    os.makedirs(a.work, exist_ok=True)
    return Run(a).main()


if __name__ == "__main__":
    sys.exit(main())
