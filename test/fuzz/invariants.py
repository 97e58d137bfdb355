"""test/fuzz/invariants.py: the invariants fuzz.py checks after each round.

After every round of test/fuzz/fuzz.py (all sessions have finished their
scripts; only the background workers and the reference client still run)
RoundChecker.check settles, then takes two snapshots (REPEATABLE READ, READ
ONLY) SETTLE seconds apart and judges:

  seq     no seq hole and no head without its batch row: every seq from 1
          to a service's tail_seq is a batch row or a batch that retention
          deleted (public.fz_pruned, filled by a trigger the setup adds);
          no batch above tail_seq; head_seq, when set, names a batch row
  claims  every claim is free or held by an instance that exists and has
          a lease (gridha.instances.soft_expiry set: an instance without
          one "holds nothing", docs/concepts.md)
  counts  held and gridha.metrics equal what the rows say: instances.held
          is the number of its claims; each metrics instance row shows its
          claims and in-flight heads; each metrics target row's backlog
          (batches from head to tail) and in_flight are those of the
          target's services; the counters, summed over the targets (plus
          what target_totals keeps of targets since deleted), are the
          services' running totals, and those are the batches committed and
          invalid (kept or pruned)
  work    no service with work waits while an instance idles (below)

"work", precisely (docs/concepts.md, Balance: "work first"). The instances
judged are the pollers: the running background workers (gridha.workers)
and the reference client (the instance owned by the client's role); the
fuzz's own instances poll only while their scripts run. The settle step is
their own polls: an idle poller looks again at least once a second. A
violation is a pair (I, S) seen in both snapshots, with S's claim unchanged
(claimant, epoch, head_seq) between them:
  I idles      its lease runs (soft_expiry > now()), it has not released
               since its last cycle, and none of its claims has a head ready
               (ready_at <= now()) or in flight
  S has work   a head ready now (ready_at <= now(), not in flight), or in
               flight under a holder that can no longer serve it
  S waits      S is free, or its holder can no longer serve it: the holder
               is missing or has no lease, the claim is hard-expired (the
               holder's or its own hard_expiry passed), or soft-expired
               (the earlier of the two soft expiries passed) with its head
               not submitting. (A holder whose session ended counts as live
               here: conservative.)
  I can serve S  S's target is in a state known servable: the setup's own
               URL rows (submit_url to the ledger's batches, a status URL of
               the ledger or none, no function, no odd headers or reject
               codes) for every poller, or, for workers (they serve every
               kind), a submit function fz_sub_a/fz_sub_b that exists and a
               status function fz_stat_a/fz_stat_b or none. Other targets
               may be unusable (the fuzz writes malformed rows): not judged.
Since the snapshots are SETTLE seconds apart and S's claim did not change,
every poller that idled in both had at least one poll in between.

Each violation is printed with the rows that show it.
"""

import re
import time

SETTLE = 2.0

# One snapshot: the rows each invariant needs. Placeholders: @led@ the
# ledger's URL, @client_role@ the reference client's role.
SNAPSHOT_SQL = r"""
BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;
SET LOCAL statement_timeout = '60s';
-- seq: holes and heads without their row
WITH s AS (
    SELECT service_id, seq FROM gridha.batches
    UNION ALL
    SELECT service_id, seq FROM public.fz_pruned),
agg AS (
    SELECT service_id, count(*) AS n, count(DISTINCT seq) AS nd, min(seq) AS lo, max(seq) AS hi
      FROM s GROUP BY service_id)
SELECT 'seq', encode(convert_to(c.service_id, 'UTF8'), 'hex'),
       format('claim row: target %s, claimant %s, epoch %s, head_seq %s, tail_seq %s, ready_at %s, in_flight %s;'
              ' %s batch rows and pruned batches (%s distinct seqs), seq %s..%s; missing seqs: %s',
              c.target, c.claimant, c.epoch, c.head_seq, c.tail_seq, c.ready_at, c.in_flight,
              coalesce(a.n, 0), coalesce(a.nd, 0), a.lo, a.hi,
              coalesce((SELECT string_agg(g::text, ',') FROM (
                  SELECT g FROM generate_series(1, least(c.tail_seq, 100000)) g
                   WHERE NOT EXISTS (SELECT 1 FROM gridha.batches b WHERE b.service_id = c.service_id AND b.seq = g)
                     AND NOT EXISTS (SELECT 1 FROM public.fz_pruned p WHERE p.service_id = c.service_id AND p.seq = g)
                   ORDER BY g LIMIT 10) x), 'none'))
       || coalesce('; last batches: ' || (SELECT string_agg(format('seq %s %s %s', b.seq,
                 encode(convert_to(left(b.batch_id, 40), 'UTF8'), 'escape'), b.status), ', ' ORDER BY b.seq)
                 FROM (SELECT * FROM gridha.batches b WHERE b.service_id = c.service_id
                        ORDER BY b.seq DESC LIMIT 4) b), '')
  FROM gridha.service_claims c LEFT JOIN agg a USING (service_id)
 WHERE coalesce(a.n, 0) <> c.tail_seq OR coalesce(a.nd, 0) <> c.tail_seq OR a.hi > c.tail_seq OR a.lo < 1
    OR (c.head_seq IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM gridha.batches b WHERE b.service_id = c.service_id AND b.seq = c.head_seq));
-- claims: held by an existing, leased instance, or free
SELECT 'claims', encode(convert_to(c.service_id, 'UTF8'), 'hex'),
       format('claim row: claimant %s, epoch %s, head_seq %s, in_flight %s, ready_at %s; instance row: %s',
              c.claimant, c.epoch, c.head_seq, c.in_flight, c.ready_at,
              CASE WHEN i.instance_id IS NULL THEN 'missing'
                   ELSE format('kind %s, soft_expiry %s, hard_expiry %s, held %s, last_seen_at %s, stopped_at %s',
                               i.kind, i.soft_expiry, i.hard_expiry, i.held, i.last_seen_at, i.stopped_at) END)
  FROM gridha.service_claims c LEFT JOIN gridha.instances i ON i.instance_id = c.claimant
 WHERE c.claimant IS NOT NULL AND (i.instance_id IS NULL OR i.soft_expiry IS NULL);
-- counts: held
SELECT 'counts', 'held ' || i.instance_id::text,
       format('instance %s (%s): held %s, claims %s, soft_expiry %s', i.instance_id, i.kind, i.held,
              coalesce(n.n, 0), i.soft_expiry)
  FROM gridha.instances i
  LEFT JOIN (SELECT claimant, count(*) AS n FROM gridha.service_claims WHERE claimant IS NOT NULL
              GROUP BY claimant) n ON n.claimant = i.instance_id
 WHERE i.held <> coalesce(n.n, 0);
-- counts: metrics, instance rows
SELECT 'counts', 'metrics instance ' || coalesce(i.instance_id::text, m.instance_id::text),
       format('instance %s: metrics claims_held %s, in_flight %s; rows: claims %s, in flight %s, lease %s',
              coalesce(i.instance_id, m.instance_id), m.claims_held, m.in_flight, coalesce(n.n, 0),
              coalesce(n.f, 0), i.soft_expiry)
  FROM (SELECT * FROM gridha.metrics WHERE scope = 'instance') m
  FULL JOIN (SELECT * FROM gridha.instances WHERE soft_expiry IS NOT NULL) i USING (instance_id)
  LEFT JOIN (SELECT claimant, count(*) AS n, count(*) FILTER (WHERE in_flight) AS f
               FROM gridha.service_claims WHERE claimant IS NOT NULL GROUP BY claimant) n
         ON n.claimant = coalesce(i.instance_id, m.instance_id)
 WHERE m.instance_id IS NULL OR i.instance_id IS NULL
    OR m.claims_held IS DISTINCT FROM coalesce(n.n, 0) OR m.in_flight IS DISTINCT FROM coalesce(n.f, 0);
-- counts: metrics, target gauges
SELECT 'counts', 'metrics target ' || encode(convert_to(t.target, 'UTF8'), 'hex'),
       format('target %s: metrics backlog %s, in_flight %s; rows: backlog %s, in flight %s, services %s%s',
              t.target, m.backlog, m.in_flight, coalesce(r.backlog, 0), coalesce(r.f, 0), coalesce(r.n, 0),
              coalesce('; services with a head neither ready nor in flight: ' || r.wedged, ''))
  FROM gridha.targets t
  LEFT JOIN (SELECT * FROM gridha.metrics WHERE scope = 'target') m USING (target)
  LEFT JOIN (SELECT target, count(*) AS n, sum(coalesce(tail_seq - head_seq + 1, 0)) AS backlog,
                    count(*) FILTER (WHERE in_flight) AS f,
                    string_agg(format('%s (head_seq %s, tail_seq %s)', left(service_id, 40), head_seq, tail_seq), ', ')
                        FILTER (WHERE head_seq IS NOT NULL AND ready_at IS NULL AND NOT in_flight) AS wedged
               FROM gridha.service_claims GROUP BY target) r USING (target)
 WHERE m.backlog IS DISTINCT FROM coalesce(r.backlog, 0) OR m.in_flight IS DISTINCT FROM coalesce(r.f, 0);
-- counts: metrics, counters (summed over the targets; what a deleted
-- target's totals held when it went, public.fz_totals_gone, and what
-- target_totals keeps of a target since deleted are not in gridha.metrics)
WITH m AS (
    SELECT sum(enqueued_total) AS enq, sum(committed_total) AS com, sum(invalid_total) AS inv,
           sum(resubmitted_total) AS res
      FROM gridha.metrics WHERE scope = 'target'),
gone AS (
    SELECT coalesce(sum(settled_enqueued), 0) AS enq, coalesce(sum(settled_committed), 0) AS com,
           coalesce(sum(settled_invalid), 0) AS inv, coalesce(sum(settled_resubmitted), 0) AS res
      FROM (SELECT o.settled_enqueued, o.settled_committed, o.settled_invalid, o.settled_resubmitted
              FROM gridha.target_totals o
             WHERE NOT EXISTS (SELECT 1 FROM gridha.targets t WHERE t.target = o.target)
            UNION ALL
            SELECT g.enq, g.com, g.inv, g.res FROM public.fz_totals_gone g) d),
r AS (
    SELECT coalesce(sum(tail_seq), 0) AS enq, coalesce(sum(committed_total), 0) AS com,
           coalesce(sum(invalid_total), 0) AS inv, coalesce(sum(resubmitted_total), 0) AS res
      FROM gridha.service_claims),
b AS (
    SELECT count(*) FILTER (WHERE status = 'committed') AS com, count(*) FILTER (WHERE status = 'invalid') AS inv
      FROM (SELECT status::text FROM gridha.batches UNION ALL SELECT status FROM public.fz_pruned) x)
SELECT 'counts', 'metrics counters',
       format('metrics (+ deleted targets) enqueued %s, committed %s, invalid %s, resubmitted %s;'
              ' services: tail_seq %s, committed %s, invalid %s, resubmitted %s; batches committed %s, invalid %s',
              m.enq + gone.enq, m.com + gone.com, m.inv + gone.inv, m.res + gone.res, r.enq, r.com, r.inv, r.res,
              b.com, b.inv)
  FROM m, gone, r, b
 WHERE m.enq + gone.enq <> r.enq OR m.com + gone.com <> r.com OR m.inv + gone.inv <> r.inv
    OR m.res + gone.res <> r.res OR r.com <> b.com OR r.inv <> b.inv;
-- work: the pollers and whether each idles
SELECT 'poller', i.instance_id::text, i.kind,
       (i.soft_expiry > now() AND NOT (i.stopped_at IS NOT NULL
                                       AND (i.last_seen_at IS NULL OR i.stopped_at >= i.last_seen_at)))::text,
       (NOT EXISTS (SELECT 1 FROM gridha.service_claims c
                     WHERE c.claimant = i.instance_id AND (c.ready_at <= now() OR c.in_flight)))::text,
       format('%s %s (serves %s): lease soft %s hard %s, held %s, last_seen_at %s, stopped_at %s',
              i.kind, i.instance_id, coalesce(array_to_string(i.serves, ','), 'any'), i.soft_expiry, i.hard_expiry,
              i.held, i.last_seen_at, i.stopped_at)
  FROM gridha.instances i
 WHERE i.instance_id IN (SELECT w.instance_id FROM gridha.workers w WHERE w.instance_id IS NOT NULL)
    OR (i.owner = '@client_role@' AND i.kind = 'external');
-- work: the services with work that wait, on targets known servable
WITH tg AS (
    SELECT t.target,
           (t.submit_function IS NULL AND t.status_function IS NULL
            AND t.submit_url = '@led@/batches/{service_id}/{batch_id}'
            AND (t.status_url IS NULL OR t.status_url IN ('@led@/batch_statuses?id={batch_ids}',
                                                          '@led@/splinter/batch_statuses?ids={batch_ids}'))
            AND (t.request_headers IS NULL OR t.request_headers::text IN ('{}', '{"X-Fz": "1"}'))
            AND t.reject_codes::text IN ('{400,422}', '{}', '{202}', '{500,503}')) AS url_ok,
           (t.submit_url IS NULL AND t.status_url IS NULL
            AND to_regprocedure(t.submit_function::text) IS NOT NULL
            AND regexp_replace(t.submit_function::text, '^public\.', '') IN ('fz_sub_a(text,text,bytea,bigint)', 'fz_sub_b(text,text,bytea,bigint)')
            AND (t.status_function IS NULL OR (to_regprocedure(t.status_function::text) IS NOT NULL
                 AND regexp_replace(t.status_function::text, '^public\.', '') IN ('fz_stat_a(text[])', 'fz_stat_b(text[])')))
            AND (t.request_headers IS NULL OR t.request_headers::text IN ('{}', '{"X-Fz": "1"}'))) AS fn_ok
      FROM gridha.targets t)
SELECT 'waits', encode(convert_to(c.service_id, 'UTF8'), 'hex'), coalesce(c.claimant::text, '-'), c.epoch,
       coalesce(c.head_seq, -1), CASE WHEN tg.url_ok THEN 'url' ELSE 'fn' END,
       format('claim row: target %s, claimant %s (%s), epoch %s, head_seq %s, tail_seq %s, ready_at %s (%s s ago),'
              ' in_flight %s, own expiries %s/%s; head: %s',
              c.target, coalesce(c.claimant::text, 'free'),
              CASE WHEN c.claimant IS NULL THEN '-' WHEN i.instance_id IS NULL THEN 'missing'
                   ELSE format('%s, lease soft %s hard %s', i.kind, i.soft_expiry, i.hard_expiry) END,
              c.epoch, c.head_seq, c.tail_seq, c.ready_at, round(extract(epoch FROM now() - c.ready_at)::numeric, 1),
              c.in_flight, c.soft_expiry, c.hard_expiry,
              coalesce((SELECT format('%s %s attempts %s epoch %s instance %s',
                                      encode(convert_to(left(h.batch_id, 40), 'UTF8'), 'escape'), h.status,
                                      h.attempts, h.epoch, h.instance_id)
                          FROM gridha.batches h WHERE h.service_id = c.service_id AND h.seq = c.head_seq), 'no row'))
  FROM gridha.service_claims c
  JOIN tg ON tg.target = c.target AND (tg.url_ok OR tg.fn_ok)
  LEFT JOIN gridha.instances i ON i.instance_id = c.claimant
  CROSS JOIN LATERAL (
      SELECT c.claimant IS NOT NULL AND (
                 i.instance_id IS NULL OR i.soft_expiry IS NULL
                 OR least(i.hard_expiry, c.hard_expiry) <= now()
                 OR (least(i.soft_expiry, c.soft_expiry) <= now()
                     AND NOT EXISTS (SELECT 1 FROM gridha.batches h
                                      WHERE h.service_id = c.service_id AND h.seq = c.head_seq
                                        AND h.status = 'submitting'))) AS gone) g
 WHERE c.head_seq IS NOT NULL
   AND ((c.ready_at <= now() AND NOT c.in_flight AND (c.claimant IS NULL OR g.gone))
        OR (c.in_flight AND (c.claimant IS NULL OR g.gone)));
COMMIT;
"""


class RoundChecker:
    """The invariants after each round (see the module's header)."""

    NAMES = ["seq", "claims", "counts", "work"]

    def __init__(self, rows, db, ledger, client_role):
        self.rows = rows
        self.db = db
        self.sql = SNAPSHOT_SQL.replace("@led@", ledger.replace("'", "''")).replace("@client_role@", client_role)
        self.violations = {n: [] for n in self.NAMES}   # name -> [(round, text)]
        self.seen = {n: set() for n in self.NAMES}       # keys reported once
        self.rounds = 0
        self.errors = []

    def snapshot(self):
        out = {"seq": {}, "claims": {}, "counts": {}, "pollers": {}, "waits": {}}
        for r in self.rows(self.db, self.sql):
            if r[0] in ("seq", "claims", "counts"):
                out[r[0]][r[1]] = r[2]
            elif r[0] == "poller":
                out["pollers"][r[1]] = (r[2], r[3] == "true", r[4] == "true", r[5])
            elif r[0] == "waits":
                out["waits"][r[1]] = (r[2], r[3], r[4], r[5], r[6])
        return out

    def check(self, label, unhex):
        """settle, two snapshots, the violations of this round (each
        reported once); returns how many new ones"""
        self.rounds += 1
        try:
            a, b = self.two_snapshots()
        except Exception as e:  # a check that could not run fails the line too
            self.errors.append("%s: %s" % (label, str(e)[:400]))
            return 1
        new = 0
        for name, key, text in self.judge(a, b, label, unhex):
            if key in self.seen[name]:
                continue
            self.seen[name].add(key)
            self.violations[name].append(text)
            new += 1
        return new

    def two_snapshots(self):
        time.sleep(SETTLE)
        a = self.snapshot()
        time.sleep(SETTLE)
        return a, self.snapshot()

    @staticmethod
    def idle_pollers(a, b):
        return [iid for iid, (kind, live, idles, _) in b["pollers"].items()
                if live and idles and iid in a["pollers"] and a["pollers"][iid][1] and a["pollers"][iid][2]]

    def judge(self, a, b, label, unhex):
        """(name, key, text) of each violation: as the second snapshot shows
        it, when the first showed it too (a violation that stays)"""
        out = []
        for name in ("seq", "claims", "counts"):
            for key, text in b[name].items():
                if key in a[name]:
                    what = key if name == "counts" else "service %r" % unhex(key)
                    out.append((name, key, "%s: %s: %s" % (label, what, text)))
        # work: an idle poller in both snapshots, a service that waited in
        # both with its claim unchanged, on a target the poller can serve
        idle = self.idle_pollers(a, b)
        for sid, w in b["waits"].items():
            if sid not in a["waits"] or a["waits"][sid][:3] != w[:3]:
                continue
            who = [iid for iid in idle if w[3] == "url" or b["pollers"][iid][0] == "worker"]
            if not who:
                continue
            out.append(("work", (sid, w[0], w[1]),
                        "%s: service %r waits (%s) while %d poller(s) idle:\n  %s\n  %s" % (
                            label, unhex(sid), w[4], len(who),
                            "\n  ".join(b["pollers"][i][3] for i in who[:3]),
                            "(idle in both snapshots, %.0f s apart; the claim unchanged)" % SETTLE)))
        return out

    def self_check(self, psql, led, unhex):
        """the work invariant's own check: a service with a ready head on a
        URL target every poller serves, whose free claim a transaction
        holds locked (so no poller can take it: their picks skip locked
        rows) while the checker looks. Returns (True, note) when the
        checker flagged it, (False, note) when it did not although a poller
        idled, (None, note) when no poller idled (nothing to judge)."""
        import subprocess
        psql(self.db, "INSERT INTO gridha.targets (target) VALUES ('fzplant') ON CONFLICT (target) DO NOTHING;"
                      " SELECT gridha.enqueue('fz-plant', 'plant-' || gen_random_uuid(), decode('01', 'hex'), 'fzplant');")
        holder = subprocess.Popen(["psql", "-X", "-q", "-A", "-t", "-U", "postgres", "-d", self.db, "-c",
                                   "BEGIN; SELECT 'held:' || coalesce(claimant::text, '-')"
                                   " FROM gridha.service_claims WHERE service_id = 'fz-plant'"
                                   " FOR NO KEY UPDATE; SELECT pg_sleep(3 * %s + 2); COMMIT;" % SETTLE],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            time.sleep(1)
            psql(self.db, "UPDATE gridha.targets SET submit_url = '%s/batches/{service_id}/{batch_id}',"
                          " status_url = '%s/batch_statuses?id={batch_ids}' WHERE target = 'fzplant'" % (led, led))
            a, b = self.two_snapshots()
        finally:
            held_out = holder.communicate()[0] or ""
        found = [t for n, k, t in self.judge(a, b, "self-check", unhex) if n == "work" and unhex(k[0]) == "fz-plant"]
        if found:
            return True, found[0]
        if not [i for i in self.idle_pollers(a, b)]:
            return None, "no poller idled in both snapshots: nothing to judge"
        # an instance that serves every target (the reference client) may
        # take the planted claim between its enqueue and the holder's lock:
        # then it is not free while the checker looks, and nothing can be
        # said of it
        m = re.search(r"held:(\S+)", held_out)
        if m is None or m.group(1) != "-":
            return None, "the planted service was claimed (%s) before its claim was locked: nothing to judge" % (
                m.group(1) if m else "the holder saw no claim row")
        return False, "a poller idled, and the planted service was not flagged: %s" % (
            b["waits"].get("fz-plant".encode().hex(), "it is not among the services that wait"))
