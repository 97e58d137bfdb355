#!/usr/bin/env python3
"""test/ha/citus_client.py: a client of gridha's Citus mode for the fault
harness's Citus topology (test/t/034_citus_faults.pl): a producer or an
instance, talking to the coordinator through a psql session of its own
(psql's variables say whether a call failed and with which SQLSTATE; when
the session dies, a new one is started), and writing every call and its
answer to a log, one JSON line each:

  {"who", "kind", "t0" (sent), "t1" (answered), "outcome", "value",
   "sqlstate", "message", ...}

outcome: ok (answered), refused (an error with a gridha SQLSTATE, RGnnn:
the call changed nothing), unknown (the session died, or another error,
e.g. a node's connection lost: the call may or may not have taken effect).

Producer (--mode producer): in transactions that each enqueue into several
services of different buckets (one statement, SELECT ARRAY[
gridha.bucket_enqueue(...), ...], which Citus runs on the coordinator, one
transaction over the buckets' shards, two-phase when both workers are
written), batch <service>-<k> with payload "<service>:<k>", k the
service's own sequence number, up to --per-service batches a service. A
refused transaction is tried again with the same k; one whose answer was
lost is logged unknown and k moves on (the checker accounts for it).

Instance (--mode instance): in rounds, until --stop-file exists: reads
gridha.bucket_claims (a multi-shard read, no lock; logged as an epoch
sample); drops the buckets it thinks it holds that the read shows held by
another or at another epoch, adopts those the read shows it holds (a
take whose answer was lost); acquires free buckets of its services while
it holds fewer than --share (several in one statement, one transaction:
SELECT ARRAY[gridha.bucket_acquire(...), ...]), takes over any whose lease
ran out; renews what it holds every third of the lease; then per bucket
held: bucket_next_batch, bucket_report_submission (accepted),
bucket_report_status (committed). A hand-out whose answer was lost, or a
report that stays unanswered, makes it release the bucket (its services in
flight go out again at a higher epoch). While --pause-file exists, right
after a hand-out it stops (no renewal, no call), then, once the file is
gone, reports that batch: its late reports (logged late) must be refused.

Instance of the contract calls (--mode contract): gridha.next_batch (in a
transaction with a read of the buckets it holds, logged as kind hold),
then gridha.report_submission and gridha.report_status of what it got;
see contract() below. The lease is gridha.hard_expiry (--lease).
"""

import argparse
import json
import os
import random
import select
import subprocess
import sys
import time


class Session:
    """A psql session on the coordinator; call() sends one statement."""

    def __init__(self, psql, conn, errlog, init=()):
        self.args = [psql, '-X', '-q', '-A', '-t', '-P', 'null=<null>', '-v', 'ON_ERROR_STOP=0', '-d', conn]
        self.errlog = errlog
        self.init = list(init)
        self.p = None
        self.buf = b''

    def start(self):
        self.close()
        self.p = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.errlog)
        self.buf = b''
        for sql in ["SET statement_timeout = '30s'"] + self.init:
            ok, _, _, _ = self.call(sql, timeout=15)
            if ok is not True:
                self.close()
                return False
        return True

    def close(self):
        if self.p is not None:
            try:
                self.p.kill()
            except OSError:
                pass
            try:
                self.p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self.p = None

    def readline(self, deadline):
        while b'\n' not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                return None
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if not r:
                return None
            chunk = os.read(self.p.stdout.fileno(), 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b'\n', 1)
        return line.decode('utf-8', 'replace')

    def call(self, sql, timeout=60):
        """(True, value, None, None), (False, None, sqlstate, message), or
        (None, None, None, why) when the session died or did not answer."""
        if self.p is None or self.p.poll() is not None:
            return None, None, None, 'no session'
        text = self.marked(sql)
        try:
            self.p.stdin.write(text.encode())
            self.p.stdin.flush()
        except (BrokenPipeError, OSError):
            self.close()
            return None, None, None, 'session died'
        deadline = time.time() + timeout
        lines = []
        while True:
            line = self.readline(deadline)
            if line is None:
                self.close()
                return None, None, None, 'session died or timed out'
            if line.startswith('@@OK'):
                return True, '\n'.join(lines), None, None
            if line.startswith('@@ERR '):
                parts = line.split(' ', 2)
                return False, None, parts[1], parts[2] if len(parts) > 2 else ''
            lines.append(line)

    @staticmethod
    def marked(sql):
        return (sql.rstrip().rstrip(';') + ';\n'
                '\\if :ERROR\n\\echo @@ERR :LAST_ERROR_SQLSTATE :LAST_ERROR_MESSAGE\n'
                '\\else\n\\echo @@OK\n\\endif\n')

    def call_txn(self, sqls, timeout=60):
        """The statements in one transaction (BEGIN, each, COMMIT): (True,
        [values], None, None) when COMMIT answered and every statement
        passed; (False, None, sqlstate, message) for the first statement
        refused (the transaction rolled back); (None, None, None, why) when
        the session died or did not answer (COMMIT's answer lost: it may have
        committed)."""
        if self.p is None or self.p.poll() is not None:
            return None, None, None, 'no session'
        stmts = ['BEGIN'] + list(sqls) + ['COMMIT']
        try:
            self.p.stdin.write(''.join(self.marked(s) for s in stmts).encode())
            self.p.stdin.flush()
        except (BrokenPipeError, OSError):
            self.close()
            return None, None, None, 'session died'
        deadline = time.time() + timeout
        values, lines, first_err = [], [], None
        for i in range(len(stmts)):
            while True:
                line = self.readline(deadline)
                if line is None:
                    self.close()
                    return None, None, None, 'session died or timed out'
                if line.startswith('@@OK'):
                    values.append('\n'.join(lines))
                    break
                if line.startswith('@@ERR '):
                    parts = line.split(' ', 2)
                    if first_err is None:
                        first_err = (parts[1], parts[2] if len(parts) > 2 else '')
                    values.append(None)
                    break
                lines.append(line)
            lines = []
        if first_err is not None:
            return False, None, first_err[0], first_err[1]
        return True, values[1:-1], None, None


class Client:
    def __init__(self, a):
        self.a = a
        self.log = open(a.log, 'a', buffering=1)
        self.err = open(a.log + '.psql.err', 'a')
        init = ["SET application_name = %s" % lit('c34-' + a.name)]
        if a.mode == 'contract':
            # the mode's lease is gridha.hard_expiry; renewals every
            # gridha.renew_interval (at most half the lease)
            init += ["SET gridha.soft_expiry = '%gs'" % a.lease, "SET gridha.hard_expiry = '%gs'" % a.lease,
                     "SET gridha.renew_interval = '%gs'" % (a.lease / 3)]
        self.db = Session(a.psql, a.conn, self.err, init)
        self.connected = False

    def rec(self, **kw):
        kw['who'] = self.a.name
        self.log.write(json.dumps(kw, sort_keys=True) + '\n')

    def ensure(self):
        """A live session, or False after a bounded try (the coordinator
        may be down)."""
        if self.db.p is not None and self.db.p.poll() is None:
            return True
        for _ in range(4):
            if self.db.start():
                self.rec(kind='connect', t0=time.time(), t1=time.time(), outcome='ok')
                return True
            time.sleep(0.25)
        return False

    def call(self, kind, sql, **meta):
        t0 = time.time()
        if not self.ensure():
            self.rec(kind=kind, t0=t0, t1=time.time(), outcome='unknown', value=None,
                     sqlstate=None, message='no session', sent=False, **meta)
            return 'unsent', None, None
        if isinstance(sql, list):
            ok, value, state, msg = self.db.call_txn(sql)
        else:
            ok, value, state, msg = self.db.call(sql)
        t1 = time.time()
        if ok is True:
            outcome = 'ok'
        elif ok is False and state and state.startswith('RG'):
            outcome = 'refused'
        else:
            outcome = 'unknown'
        self.rec(kind=kind, t0=t0, t1=t1, outcome=outcome, value=value, sqlstate=state,
                 message=msg, sent=True, **meta)
        return outcome, value, state

    def stopping(self):
        return os.path.exists(self.a.stop_file)


def lit(s):
    return "'" + s.replace("'", "''") + "'"


def producer(c, a):
    services = [(s.split(':')[0], int(s.split(':')[1])) for s in a.services.split(',')]
    nxt = {s: 1 for s, _ in services}
    rnd = random.Random(a.seed)
    while not c.stopping():
        left = [(s, b) for s, b in services if nxt[s] <= a.per_service]
        if not left:
            c.rec(kind='producer-done', t0=time.time(), t1=time.time(), outcome='ok')
            break
        rnd.shuffle(left)
        pick, seen = [], set()
        for s, b in left:
            if b not in seen:
                pick.append((s, b))
                seen.add(b)
            if len(pick) == a.per_txn:
                break
        items = []
        for s, b in pick:
            k = nxt[s]
            items.append({'service': s, 'bucket': b, 'k': k, 'batch': '%s-%05d' % (s, k)})
        sql = 'SELECT ARRAY[%s]::text' % ', '.join(
            'gridha.bucket_enqueue(%d, %s, %s, convert_to(%s, \'UTF8\'))'
            % (i['bucket'], lit(i['service']), lit(i['batch']), lit('%s:%d' % (i['service'], i['k'])))
            for i in items)
        outcome, _, _ = c.call('enqueue', sql, items=items)
        if outcome in ('ok', 'unknown'):
            for i in items:
                nxt[i['service']] += 1
        if outcome == 'unsent':
            time.sleep(0.3)
        else:
            time.sleep(a.pace)


def handout(value):
    """(service, batch) of a gridha.bucket_batch as psql prints it
    ((service_id,batch_id,seq,payload,epoch,attempts)), None for none."""
    if not value or not value.startswith('(') or not value.endswith(')'):
        return None
    inner = value[1:-1].split(',')
    if len(inner) < 6 or inner[0] == '':
        return None
    return inner[0].strip('"'), inner[1].strip('"')


def parse_claims(value):
    out = {}
    for part in (value or '').split(','):
        f = part.split(':')
        if len(f) != 4 or not f[0].isdigit() or not f[2].isdigit():
            continue
        b, h, e, x = f
        out[int(b)] = (None if h == '-' else h, int(e), x in ('t', 'true'))
    return out


def instance(c, a):
    me = a.instance_id
    mine = sorted({int(b) for b in a.buckets.split(',')})
    lease = a.lease
    lease_sql = "'%g s'" % lease
    held = {}        # bucket -> epoch
    renewed = {}     # bucket -> when the lease was last taken or renewed
    to_release = {}  # bucket -> epoch: to hand back (an answer was lost)
    rnd = random.Random(a.seed)
    drain_deadline = time.time() + a.max_seconds

    def drop(b, why):
        if b in held:
            c.rec(kind='drop', t0=time.time(), t1=time.time(), outcome='ok', bucket=b,
                  epoch=held[b], why=why)
            held.pop(b, None)
            renewed.pop(b, None)

    def release_later(b, why):
        if b in held:
            to_release[b] = held[b]
            drop(b, why)

    def report(b, e, sid, bid, kind, fn, word, late):
        """A report, tried again while its answer is lost (bounded); True
        when accepted."""
        for _ in range(a.report_tries):
            outcome, value, state = c.call(
                kind, 'SELECT gridha.%s(%d, %s, %s, %s, %d, %s)' % (fn, b, lit(me), lit(sid), lit(bid), e, lit(word)),
                bucket=b, epoch=e, service=sid, batch=bid, late=late)
            if outcome == 'ok':
                return True
            if outcome == 'refused':
                if state == 'RG001':
                    drop(b, 'refused ' + kind)
                else:
                    release_later(b, 'refused %s %s' % (kind, state))
                return False
            time.sleep(0.3)
        release_later(b, kind + ' unanswered')
        return False

    while not c.stopping() and time.time() < drain_deadline:
        did = 0
        outcome, value, _ = c.call(
            'claims', "SELECT string_agg(bucket || ':' || coalesce(holder::text, '-') || ':' || epoch || ':' "
            "|| coalesce((hard_expiry < now())::text, 'f'), ',' ORDER BY bucket) FROM gridha.bucket_claims")
        if outcome != 'ok':
            time.sleep(0.3)
            continue
        claims = parse_claims(value)
        for b in list(held):
            h, e, _ = claims.get(b, (None, -1, False))
            if h != me or e != held[b]:
                drop(b, 'claims show %s at %d' % (h, e))
        for b, (h, e, _) in claims.items():
            if h == me and b not in held and b not in to_release and b in mine:
                held[b] = e
                renewed[b] = time.time() - lease  # renew at once
                c.rec(kind='adopt', t0=time.time(), t1=time.time(), outcome='ok', bucket=b, epoch=e)
        # hand back what must be handed back
        for b, e in list(to_release.items()):
            outcome, _, _ = c.call('release', 'SELECT gridha.bucket_release(%d, %s, %d)' % (b, lit(me), e),
                                   bucket=b, epoch=e)
            if outcome in ('ok', 'refused'):
                to_release.pop(b)
        # take free buckets while under the share, several in one transaction
        free = [b for b in mine if b in claims and claims[b][0] is None and b not in to_release]
        rnd.shuffle(free)
        want = free[:max(0, a.share - len(held))]
        if len(want) >= 2:
            outcome, value, _ = c.call(
                'acquire-multi', 'SELECT ARRAY[%s]::text' % ', '.join(
                    'gridha.bucket_acquire(%d, %s, %s)' % (b, lit(me), lease_sql) for b in want),
                buckets=want)
            if outcome == 'ok':
                for b, e in zip(want, value.strip('{}').split(',')):
                    if e != 'NULL':
                        held[b] = int(e)
                        renewed[b] = time.time()
        elif len(want) == 1:
            b = want[0]
            outcome, value, _ = c.call('acquire', 'SELECT gridha.bucket_acquire(%d, %s, %s)' % (b, lit(me), lease_sql),
                                       bucket=b)
            if outcome == 'ok' and value != '<null>':
                held[b] = int(value)
                renewed[b] = time.time()
        # take over any bucket of its services whose lease ran out
        for b in mine:
            h, e, expired = claims.get(b, (None, 0, False))
            if h is not None and h != me and expired and b not in to_release:
                outcome, value, _ = c.call(
                    'takeover', 'SELECT gridha.bucket_takeover(%d, %s, %s)' % (b, lit(me), lease_sql),
                    bucket=b, before=e)
                if outcome == 'ok' and value != '<null>':
                    held[b] = int(value)
                    renewed[b] = time.time()
        # renew
        for b in list(held):
            if time.time() - renewed[b] >= lease / 3:
                outcome, _, state = c.call(
                    'renew', 'SELECT gridha.bucket_renew(%d, %s, %d, %s)' % (b, lit(me), held[b], lease_sql),
                    bucket=b, epoch=held[b])
                if outcome == 'ok':
                    renewed[b] = time.time()
                elif outcome == 'refused':
                    drop(b, 'renew refused ' + str(state))
        # work
        order = list(held)
        rnd.shuffle(order)
        for b in order:
            if b not in held or c.stopping():
                continue
            e = held[b]
            for _ in range(a.cycles):
                if b not in held:
                    break
                outcome, value, state = c.call(
                    'next', 'SELECT gridha.bucket_next_batch(%d, %s, %d)' % (b, lit(me), e), bucket=b, epoch=e)
                if outcome == 'refused':
                    drop(b, 'next refused ' + str(state))
                    break
                if outcome in ('unknown', 'unsent'):
                    if outcome == 'unknown':
                        release_later(b, 'next unanswered')
                    break
                got = handout(value)
                if got is None:
                    break
                sid, bid = got
                late = False
                if os.path.exists(a.pause_file):
                    c.rec(kind='pause', t0=time.time(), t1=time.time(), outcome='ok', bucket=b, epoch=e,
                          service=sid, batch=bid)
                    while os.path.exists(a.pause_file):
                        time.sleep(0.1)
                    c.rec(kind='resume', t0=time.time(), t1=time.time(), outcome='ok', bucket=b, epoch=e)
                    late = True
                did += 1
                if report(b, e, sid, bid, 'report-submission', 'bucket_report_submission', 'accepted', late):
                    report(b, e, sid, bid, 'report-status', 'bucket_report_status', 'committed', late)
                if late:
                    break
        if did == 0:
            time.sleep(0.2)
    # hand back what this instance holds when told to stop
    for b, e in list(held.items()) + list(to_release.items()):
        c.call('release', 'SELECT gridha.bucket_release(%d, %s, %d)' % (b, lit(me), e), bucket=b, epoch=e)
    c.rec(kind='exit', t0=time.time(), t1=time.time(), outcome='ok')


def contract(c, a):
    """An instance through the contract calls (--mode contract), which in
    the mode run a pass over the buckets on the coordinator
    (gridha_internal.citus_*): gridha.next_batch, then
    gridha.report_submission (accepted) and gridha.report_status
    (committed) of what it handed out.

    Each next_batch runs in a transaction with a read of the buckets the
    instance holds (gridha.bucket_claims), so that when COMMIT is answered
    the log has, besides the hand-out, the buckets and epochs the instance
    held when it committed (kind hold: the epochs the call's pass took,
    which the checker adds to the history as it does acquisitions). A
    hand-out whose answer was lost (or a report that stays unanswered)
    makes it read what it has in flight (gridha.bucket_batches, instance
    and status; logged as kind inflight) and report each again at its epoch
    (a report at an epoch the bucket no longer has is refused, RG001).
    When told to stop: gridha.release_claims."""
    me = a.instance_id
    bucket_of = {s.split(':')[0]: int(s.split(':')[1]) for s in a.services.split(',') if s}
    deadline = time.time() + a.max_seconds
    recover = False

    def report(b, e, sid, bid, kind, fn, word):
        for _ in range(a.report_tries):
            outcome, _, state = c.call(
                kind, 'SELECT gridha.%s(%s, %s, %s, %d, %s::text, NULL::text)' % (fn, lit(me), lit(sid), lit(bid), e, lit(word)),
                bucket=b, epoch=e, service=sid, batch=bid, late=False, contract=True)
            if outcome == 'ok':
                return True
            if outcome == 'refused':
                return False
            time.sleep(0.3)
        return None

    while not c.stopping() and time.time() < deadline:
        if recover:
            outcome, value, _ = c.call(
                'inflight', "SELECT string_agg(bucket || '|' || service_id || '|' || batch_id || '|' || epoch || '|' "
                "|| status, ',') FROM gridha.bucket_batches WHERE instance_id = %s "
                "AND status IN ('submitting', 'pending', 'valid')" % lit(me))
            if outcome != 'ok':
                time.sleep(0.3)
                continue
            recover = False
            for part in (value or '').split(','):
                f = part.split('|')
                if len(f) != 5 or part == '<null>':
                    continue
                b, sid, bid, e, st = int(f[0]), f[1], f[2], int(f[3]), f[4]
                ok = True
                if st == 'submitting':
                    ok = report(b, e, sid, bid, 'report-submission', 'report_submission', 'accepted')
                if ok:
                    ok = report(b, e, sid, bid, 'report-status', 'report_status', 'committed')
                if ok is None:
                    recover = True
            continue
        t0 = time.time()
        outcome, values, state = c.call(
            'next-contract', [
                'SELECT n.service_id || \'|\' || n.batch_id || \'|\' || n.epoch || \'|\' || n.attempts '
                'FROM gridha.next_batch(%s) n' % lit(me),
                "SELECT string_agg(bucket || ':' || epoch, ',' ORDER BY bucket) FROM gridha.bucket_claims "
                "WHERE holder = %s" % lit(me)])
        if outcome != 'ok':
            if outcome == 'unknown':
                recover = True
            time.sleep(0.3)
            continue
        t1 = time.time()
        for part in (values[1] or '').split(','):
            f = part.split(':')
            if len(f) == 2 and f[0].isdigit() and f[1].isdigit():
                c.rec(kind='hold', t0=t1, t1=t1, outcome='ok', bucket=int(f[0]), epoch=int(f[1]))
        got = (values[0] or '').split('|')
        if len(got) != 4:
            time.sleep(0.2)
            continue
        sid, bid, e = got[0], got[1], int(got[2])
        b = bucket_of.get(sid)
        c.rec(kind='next', t0=t0, t1=t1, outcome='ok', bucket=b, epoch=e, service=sid, batch=bid,
              attempts=int(got[3]), contract=True)
        ok = report(b, e, sid, bid, 'report-submission', 'report_submission', 'accepted')
        if ok:
            ok = report(b, e, sid, bid, 'report-status', 'report_status', 'committed')
        if ok is None:
            recover = True
    c.call('release-claims', 'SELECT gridha.release_claims(%s)' % lit(me))
    c.rec(kind='exit', t0=time.time(), t1=time.time(), outcome='ok')


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--mode', choices=('producer', 'instance', 'contract'), required=True)
    p.add_argument('--psql', required=True)
    p.add_argument('--conn', required=True)
    p.add_argument('--name', required=True)
    p.add_argument('--log', required=True)
    p.add_argument('--stop-file', required=True)
    p.add_argument('--pause-file', default='/nonexistent')
    p.add_argument('--seed', type=int, default=1)
    p.add_argument('--services', default='', help='service:bucket,... (producer, contract)')
    p.add_argument('--per-service', type=int, default=10)
    p.add_argument('--per-txn', type=int, default=6)
    p.add_argument('--pace', type=float, default=0.1)
    p.add_argument('--instance-id')
    p.add_argument('--buckets', default='')
    p.add_argument('--share', type=int, default=64)
    p.add_argument('--lease', type=float, default=5.0)
    p.add_argument('--report-tries', type=int, default=30)
    p.add_argument('--max-seconds', type=float, default=600)
    p.add_argument('--cycles', type=int, default=2, help='hand-outs per bucket per round')
    a = p.parse_args()
    c = Client(a)
    try:
        if a.mode == 'producer':
            producer(c, a)
            c.rec(kind='exit', t0=time.time(), t1=time.time(), outcome='ok')
        elif a.mode == 'contract':
            contract(c, a)
        else:
            instance(c, a)
    except Exception as ex:  # logged, then the end: the test sees no exit record
        c.rec(kind='crash', t0=time.time(), t1=time.time(), outcome='unknown', message=repr(ex))
        raise
    finally:
        c.db.close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
