#!/usr/bin/env python3
"""test/ha/citus_check.py: the checker of the fault harness's Citus
topology (test/t/034_citus_faults.pl). Reads what a run recorded and
prints one JSON object: the figures and, per property, the count of
violations with examples (0 = holds).

Sources (in the run directory):
  *.log           every client's calls and answers (test/ha/citus_client.py;
                  tpc.log: the test's own enqueues of the 2pc faults)
  samples.jsonl   the test's own samples of every bucket's epoch
  ids.json        each client's name and its instance id
  batches.csv     gridha.bucket_batches at the end: bucket, service_id,
                  batch_id, seq, payload (text), status, epoch, attempts,
                  instance_id, handed_out_at, finished_at (epoch seconds)

Properties:
  lost          every batch whose enqueue was answered is in the table,
                exactly once (by service and k), and final; every row is one
                the producer sent (answered or unknown: an unknown one may
                be there or not, counted, but a transaction whose answer was
                lost is there whole or not at all); no row is not final; (also
                counted here) no client ended on an error of its own
  order         per service, k rises with seq, seqs are 1..n, each batch
                was handed out (last) after the previous one was final and
                finished after it; in the clients' logs, the hand-outs of a
                service ordered by (seq, epoch) never give a batch twice at
                one epoch, nor a later batch at a lower epoch than an
                earlier one
  epochs        no bucket's epoch was given to two instances (answered
                acquisitions and take-overs, adoptions from the claims
                read, and the buckets the contract instance held when its
                next_batch committed, kind hold); every process's samples
                of a bucket's epoch (each instance's claims reads in order, the test's samples in
                order) never go down
  stale         no write was accepted from an instance that did not hold
                the bucket at that epoch at that moment: every accepted
                hand-out, report, renewal and release named an epoch the
                history gives to that instance, and was sent before any
                higher epoch of the bucket had been answered to anyone;
                every committed batch's epoch and instance are in the
                history, as the same pair
  late          every report a paused instance made after it resumed was
                refused with RG001 (and there was at least one)

Usage: citus_check.py RUN_DIR
"""

import csv
import datetime
import glob
import json
import os
import sys
from collections import defaultdict

WRITES = {'next', 'report-submission', 'report-status', 'renew', 'release'}


def utc(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime('%H:%M:%S.%f')[:-3]


def main():
    run = sys.argv[1]
    events = []
    for f in sorted(glob.glob(os.path.join(run, '*.log'))):
        with open(f) as fh:
            for line in fh:
                line = line.strip()
                if line:
                    events.append(json.loads(line))
    samples = []
    if os.path.exists(os.path.join(run, 'samples.jsonl')):
        with open(os.path.join(run, 'samples.jsonl')) as fh:
            samples = [json.loads(l) for l in fh if l.strip()]
    rows = []
    with open(os.path.join(run, 'batches.csv')) as fh:
        for r in csv.DictReader(fh):
            rows.append(r)

    fig = {}
    checks = {}
    ex = defaultdict(list)

    def bad(name, what):
        checks[name] = checks.get(name, 0) + 1
        if len(ex[name]) < 5:
            ex[name].append(what)

    for name in ('lost', 'order', 'epochs', 'stale', 'late'):
        checks[name] = 0

    # ---- calls
    calls = defaultdict(lambda: defaultdict(int))
    for e in events:
        if e.get('kind') == 'crash':
            bad('lost', 'a client crashed: %s %s' % (e['who'], e.get('message')))
        if 'outcome' in e and e.get('kind') not in ('connect', 'drop', 'adopt', 'hold', 'pause', 'resume', 'exit',
                                                    'producer-done', 'crash') \
                and not (e.get('kind') == 'next' and e.get('contract')):
            calls[e['kind']][e['outcome']] += 1
    fig['calls'] = {k: dict(v) for k, v in sorted(calls.items())}
    fig['connects'] = sum(1 for e in events if e.get('kind') == 'connect')

    # ---- lost
    acked, unknown, refused_enq = {}, {}, 0
    for e in events:
        if e.get('kind') != 'enqueue':
            continue
        for i in e['items']:
            if e['outcome'] == 'ok':
                acked[i['batch']] = i
            elif e['outcome'] == 'unknown' and e.get('sent', True):
                unknown[i['batch']] = i
        if e['outcome'] == 'refused':
            refused_enq += 1
    byid = {}
    seen_k = set()
    for r in rows:
        if r['batch_id'] in byid:
            bad('lost', 'batch %s twice' % r['batch_id'])
        byid[r['batch_id']] = r
        sk = tuple(r['payload'].split(':'))
        if sk in seen_k:
            bad('lost', 'service %s k %s twice' % sk)
        seen_k.add(sk)
        if r['payload'] != '%s:%d' % (r['service_id'], int(r['batch_id'].rsplit('-', 1)[1])):
            bad('lost', 'batch %s payload %s' % (r['batch_id'], r['payload']))
    # a transaction whose answer was lost is there whole or not at all
    partial = 0
    for e in events:
        if e.get('kind') == 'enqueue' and e['outcome'] == 'unknown' and e.get('sent', True):
            there = sum(1 for i in e['items'] if i['batch'] in byid)
            if 0 < there < len(e['items']):
                partial += 1
                bad('lost', 'enqueue of %s (answer lost) half there: %d of %d rows'
                    % (e['who'], there, len(e['items'])))
    fig['enqueue_unknown_partial'] = partial
    lost = [b for b in acked if b not in byid]
    for b in lost:
        bad('lost', 'acknowledged %s missing' % b)
    extra = [b for b in byid if b not in acked and b not in unknown]
    for b in extra:
        bad('lost', 'row %s never sent' % b)
    not_final = [r['batch_id'] for r in rows if r['status'] not in ('committed', 'invalid')]
    for b in not_final:
        bad('lost', 'row %s not final (%s)' % (b, byid[b]['status']))
    fig['enqueued_acknowledged'] = len(acked)
    fig['enqueued_unknown'] = len(unknown)
    fig['enqueued_unknown_present'] = sum(1 for b in unknown if b in byid)
    fig['enqueued_unknown_absent'] = sum(1 for b in unknown if b not in byid)
    fig['enqueue_transactions_refused'] = refused_enq
    fig['rows'] = len(rows)
    fig['committed'] = sum(1 for r in rows if r['status'] == 'committed')
    fig['lost'] = len(lost)
    fig['not_final'] = len(not_final)
    fig['never_sent'] = len(extra)
    fig['services'] = len({r['service_id'] for r in rows})

    # ---- order (the table)
    per = defaultdict(list)
    for r in rows:
        per[r['service_id']].append(r)
    ooo = 0
    for s, rs in per.items():
        rs.sort(key=lambda r: int(r['seq']))
        for i, r in enumerate(rs):
            if int(r['seq']) != i + 1:
                ooo += 1
                bad('order', '%s seq %s at place %d' % (s, r['seq'], i + 1))
            if i == 0:
                continue
            p = rs[i - 1]
            k0, k1 = int(p['batch_id'].rsplit('-', 1)[1]), int(r['batch_id'].rsplit('-', 1)[1])
            if k1 <= k0:
                ooo += 1
                bad('order', '%s: k %d after k %d' % (s, k1, k0))
            if r['handed_out_at'] and p['finished_at'] and float(r['handed_out_at']) < float(p['finished_at']):
                ooo += 1
                bad('order', '%s: seq %s handed out before seq %s was final' % (s, r['seq'], p['seq']))
            if r['finished_at'] and p['finished_at'] and float(r['finished_at']) < float(p['finished_at']):
                ooo += 1
                bad('order', '%s: seq %s final before seq %s' % (s, r['seq'], p['seq']))
    # ---- order (the hand-outs in the logs)
    handouts = defaultdict(list)
    for e in events:
        v = e.get('value') or ''
        if e.get('kind') == 'next' and e.get('contract') and e['outcome'] == 'ok':
            # a hand-out of the contract calls: its seq from the table
            r = byid.get(e['batch'])
            if r is None:
                ooo += 1
                bad('order', '%s handed out by %s but not in the table' % (e['batch'], e['who']))
                continue
            handouts[e['service']].append((int(r['seq']), int(e['epoch']), e['who'], e['batch']))
        elif e.get('kind') == 'next' and e['outcome'] == 'ok' and v.startswith('(') and v.endswith(')') \
                and len(v[1:-1].split(',')) >= 6 and v[1:-1].split(',')[0] != '':
            inner = v[1:-1].split(',')
            handouts[inner[0].strip('"')].append((int(inner[2]), int(e['epoch']), e['who'], inner[1].strip('"')))
    again = 0
    for s, hs in handouts.items():
        hs.sort()
        for i in range(1, len(hs)):
            (q0, e0, _, _), (q1, e1, _, b1) = hs[i - 1], hs[i]
            if q1 == q0:
                again += 1
                if e1 <= e0:
                    ooo += 1
                    bad('order', '%s: %s handed out twice at epoch %d' % (s, b1, e1))
            elif e1 < e0:
                ooo += 1
                bad('order', '%s: seq %d at epoch %d after seq %d at epoch %d' % (s, q1, e1, q0, e0))
    fig['out_of_order'] = ooo
    fig['handouts'] = sum(len(v) for v in handouts.values())
    fig['handed_out_again'] = again

    # ---- epochs: the history
    owner = {}      # (bucket, epoch) -> the first instance it was given to
    owners = defaultdict(set)  # (bucket, epoch) -> every instance it was given to
    first_at = {}
    answered = defaultdict(list)  # bucket -> [(t1, epoch)] of takes answered
    twice = 0
    takes = 0

    def own(b, ep, who, t1):
        nonlocal twice
        k = (b, ep)
        if k in owner and owner[k] != who:
            twice += 1
            bad('epochs', 'bucket %d epoch %d given to %s and %s (answered at %s and %s UTC)'
                % (b, ep, owner[k], who, utc(first_at[k]), utc(t1)))
        first_at.setdefault(k, t1)
        owner.setdefault(k, who)
        owners[k].add(who)
        answered[b].append((t1, ep))

    for e in events:
        k = e.get('kind')
        if k in ('acquire', 'takeover') and e['outcome'] == 'ok' and e['value'] != '<null>':
            own(int(e['bucket']), int(e['value']), e['who'], e['t1'])
            takes += 1
        elif k == 'acquire-multi' and e['outcome'] == 'ok':
            for b, ep in zip(e['buckets'], e['value'].strip('{}').split(',')):
                if ep != 'NULL':
                    own(int(b), int(ep), e['who'], e['t1'])
                    takes += 1
        elif k in ('adopt', 'hold'):
            own(int(e['bucket']), int(e['epoch']), e['who'], e['t1'])
    fig['takes'] = takes
    fig['takeovers'] = sum(1 for e in events if e.get('kind') == 'takeover' and e['outcome'] == 'ok'
                           and e['value'] != '<null>')
    fig['adoptions'] = sum(1 for e in events if e.get('kind') == 'adopt')
    fig['contract_holds'] = len({(e['bucket'], e['epoch']) for e in events if e.get('kind') == 'hold'})
    fig['epoch_given_twice'] = twice
    # samples: per process, in order
    seqs = defaultdict(list)
    for e in events:
        if e.get('kind') == 'claims' and e['outcome'] == 'ok':
            for part in (e['value'] or '').split(','):
                f = part.split(':')
                if len(f) == 4 and f[0].isdigit() and f[2].isdigit():
                    seqs[(e['who'], int(f[0]))].append(int(f[2]))
    for smp in samples:
        for b, ep in smp['epochs'].items():
            seqs[('test', int(b))].append(int(ep))
    down = 0
    nsamples = 0
    for (who, b), eps in seqs.items():
        nsamples += len(eps)
        for i in range(1, len(eps)):
            if eps[i] < eps[i - 1]:
                down += 1
                bad('epochs', 'bucket %d went down %d -> %d in the samples of %s' % (b, eps[i - 1], eps[i], who))
    fig['epoch_samples'] = nsamples
    fig['epochs_down'] = down

    # ---- stale writes accepted
    stale = 0
    accepted = 0
    writers = defaultdict(set)
    for e in events:
        if e.get('kind') not in WRITES or e['outcome'] != 'ok':
            continue
        accepted += 1
        b, ep = int(e['bucket']), int(e['epoch'])
        writers[(b, ep)].add(e['who'])
        if e['who'] not in owners.get((b, ep), ()):
            stale += 1
            bad('stale', '%s accepted for %s at bucket %d epoch %d, given to %s'
                % (e['kind'], e['who'], b, ep, owner.get((b, ep))))
            continue
        later = [t1 for t1, ep2 in answered[b] if ep2 > ep]
        if later and min(later) < e['t0']:
            stale += 1
            bad('stale', '%s of %s at bucket %d epoch %d sent %.3f s after a higher epoch was given'
                % (e['kind'], e['who'], b, ep, e['t0'] - min(later)))
    # an epoch given to two instances: a stale write is accepted when both
    # had writes accepted at it
    for k, ws in writers.items():
        if len(ws) > 1:
            stale += 1
            bad('stale', 'bucket %d epoch %d: writes of %s accepted' % (k[0], k[1], sorted(ws)))
    ID = {}
    if os.path.exists(os.path.join(run, 'ids.json')):
        with open(os.path.join(run, 'ids.json')) as fh:
            ID = json.load(fh)
    for r in rows:
        if not r['epoch']:
            continue
        k = (int(r['bucket']), int(r['epoch']))
        if not owners.get(k) or r['instance_id'] not in {ID.get(w, w) for w in owners[k]}:
            stale += 1
            bad('stale', 'batch %s final at bucket %d epoch %d by %s, given to %s'
                % (r['batch_id'], k[0], k[1], r['instance_id'], owner.get(k)))
    fig['writes_accepted'] = accepted
    fig['contract_writes_accepted'] = sum(1 for e in events if e.get('contract') and e.get('kind') in WRITES
                                          and e['outcome'] == 'ok')
    fig['contract_handouts'] = sum(1 for e in events if e.get('contract') and e.get('kind') == 'next')
    fig['stale_accepted'] = stale
    fig['refused'] = {}
    for e in events:
        if e.get('outcome') == 'refused':
            key = '%s %s' % (e['kind'], e['sqlstate'])
            fig['refused'][key] = fig['refused'].get(key, 0) + 1

    # ---- late reports
    late = [e for e in events if e.get('late') and e.get('kind', '').startswith('report')]
    late_refused = [e for e in late if e['outcome'] == 'refused' and e['sqlstate'] == 'RG001']
    fig['late_reports'] = len(late)
    fig['late_refused'] = len(late_refused)
    if not late:
        bad('late', 'no late report was tried')
    for e in late:
        if not (e['outcome'] == 'refused' and e['sqlstate'] == 'RG001'):
            bad('late', 'late %s of %s: %s %s' % (e['kind'], e['who'], e['outcome'], e.get('sqlstate')))
    fig['paused'] = sum(1 for e in events if e.get('kind') == 'pause')

    print(json.dumps({'figures': fig, 'checks': checks, 'examples': ex}, sort_keys=True))
    return 0


if __name__ == '__main__':
    sys.exit(main())
