/*-------------------------------------------------------------------------
 *
 * claims.c
 *		Claims on services: renew, acquire (with balance); the C helpers of
 *		release_claims and of the epoch band, whose statements are
 *		functions of the 1.3 install script (gridha.release_claims,
 *		gridha_internal.epoch_band; 1.2's copies: claims12.c).
 *
 * Words:
 *   claim     the service_claims row of a service; claimant NULL = free
 *   epoch     bumped each time the claimant changes; the fencing token
 *   lease     an instance's soft and hard expiry (gridha.instances): every
 *             claim it holds expires with it, so renewing
 *             writes one row whatever the instance holds. A claim's own
 *             soft_expiry/hard_expiry, NULL normally, can only make that
 *             claim expire earlier (an operator's UPDATE); a renewal clears
 *             them.
 *   takeover  acquiring a claim another instance holds: allowed once it is
 *             soft-expired (or its holder's session is gone) and nothing is
 *             submitting, or once it is hard-expired, whatever is going on
 *   held      how many claims an instance holds (instances.held), kept by
 *             every statement here that moves claims
 *   live      an instance whose lease runs, whose session is not known to
 *             have ended and that has not released its claims
 *   work      a service with work: its head ready now or in flight
 *   balance   with gridha.balance_claims, two shares. The work share
 *             decides where services with work go (claims_balance_work):
 *             each live instance serves the work over the live instances,
 *             taken from the free services with work, then from the
 *             busiest instance (ready heads only, and only while that
 *             evens out the work); an idle instance always takes free
 *             work. The count share only bounds how many free idle
 *             claims an instance takes: services / live instances (per
 *             target when instances serve different kinds). Idle claims
 *             cost nothing per cycle and stay where they are: nobody hands
 *             them back to even out counts (an instance joining a fleet
 *             takes the free ones and the work, not others' idle claims).
 *             Idle claims never hold back work, and work never moves to
 *             even out counts.
 *
 * What a cycle costs follows what changes, not what exists: the live
 * instances are read through the lease index (never the dead ones), the
 * services are counted by service_counts, an expired or gone instance's
 * claims are found through the claimant index, and the claims with an
 * expiry of their own through a partial index that is normally empty.
 * Session liveness is asked of the lock manager, once per instance.
 *
 * Every candidate claim is locked with FOR UPDATE SKIP LOCKED and judged
 * again, with a snapshot taken after the locks were granted, by the
 * statement that takes it (claims_take_stmt), so two instances can never
 * both take one claim, and a takeover can never slip between a claimant's
 * lock and its write. A takeover also revokes the hand-out of a head still
 * submitting, which is what fences the old claimant's acceptance (see
 * status.c). An instance found with its session gone is asked again once
 * the pick holds the claims (claims_gone_now): a client that reconnected
 * in between, and handed out under its claims, keeps them.
 *
 * The lock order (this file owns it; docs/concurrency.md lists the
 * isolation specs that show it, and the test build checks every call
 * against it: lockcheck.c). Row kinds, in this order:
 *
 *   1. target rows (gridha.targets), FOR KEY SHARE: an enqueue naming a
 *      new service's target, move_service's destination, and the foreign
 *      key checks of new claim rows
 *   2. claim rows (gridha.service_claims), by service_id (COLLATE "C"),
 *      always FOR NO KEY UPDATE (no statement here writes a key column):
 *      the FOR KEY SHARE of a foreign key check (a target's DELETE
 *      looking for its services, a batch's insert) never waits for them
 *   3. rate-state rows (ratelimit.c), by target (COLLATE "C"): the
 *      hand-out's slots (a second hand-out in the same transaction waits
 *      only for rows past those it holds), a change of targets' rates
 *      (trigger targets_rate_changed)
 *   4. batch rows (gridha.batches), by service_id (COLLATE "C")
 *   5. instance rows (gridha.instances), by instance_id
 *   6. count rows (gridha.service_counts), written at commit in target
 *      order (counts.c)
 *
 * A transaction waits for a row only when every lock it holds is earlier
 * in the order; a lock taken with SKIP LOCKED counts as held, so after it
 * a transaction never waits on a row of the same or an earlier kind.
 * What follows from it:
 *   - picks of claims (takes, hand-outs) use SKIP LOCKED and
 *     never wait; a wait for claim rows (release_claims, a batched report)
 *     locks them in service_id order before anything later;
 *   - a takeover locks the heads it revokes in service_id order
 *     (CLAIMS_REVOKE), the hand-out writes its heads in service_id order
 *     (queue.c), and a batched report locks the claim rows of all its
 *     rows first, then reports in service_id order (status.c);
 *   - the instance-row writes of a call (counts of claims moved, renewal,
 *     claims handed back) are gathered as the cycle goes (ClaimsPending)
 *     and made last, by gridha_claims_finish: the rows it must write
 *     locked in id order, waiting; then, never waiting, expired leases
 *     forgotten, each row skipped when another transaction holds it.
 *   - a statement that renames or deletes targets takes service_claims
 *     in SHARE ROW EXCLUSIVE mode before any row (trigger
 *     targets_name_change); every call holds service_claims in ROW
 *     EXCLUSIVE mode before it locks a row such a statement locks, or
 *     one it may hold while it waits for the table (a call that touches
 *     its instance, from the start, so before a hand-out judges the
 *     targets: instances.c; release_claims; an enqueue naming a target:
 *     queue.c; move_service; a flush of the transaction's totals rows:
 *     totals.c),
 *     so such a statement and a call never hold rows the other waits for.
 * A batch row is written only under its claim row's lock, but by a lone
 * accepted submission (report_submission, or a batched report of one
 * row; status.c), which holds no claim row and waits for nothing after
 * its batch row. A takeover's revocations of one acquisition can span
 * several statements (one per kind of candidate), each in service_id
 * order: only such an acceptance can hold a head it then waits for.
 * Known exceptions: the first call of a session may write its instance
 * row at the start, to bind the session (instances.c; with session
 * liveness off it writes nothing); a user's multi-row INSERT INTO
 * gridha.batches locks its services' claim rows in the order of its rows
 * (batches_before_insert), not necessarily service_id order.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "claims.h"
#include "claims12.h"
#include "counts.h"
#include "common.h"
#include "tables.h"
#include "generation.h"
#include "instances.h"
#include "rows.h"
#include "settings.h"
#include "spi_util.h"
#include "targets.h"
#include "totals.h"

/* Expired instances whose claims one acquisition looks at, at most */
#define CLAIMS_EXPIRED_BATCH	64
/*
 * How often an instance asks the lock manager about others' sessions
 * between its claim cycles: gridha.probe_interval (-1: never), and how
 * often an instance below its share that has work acquires anyway: a fifth
 * of it
 */
#define CLAIMS_PROBE_EVERY_MS	gridha_probe_interval_ms
#define CLAIMS_BELOW_SHARE_EVERY_MS	(gridha_probe_interval_ms / 5)
/* Services with work counted per instance, at most (claims_balance_work) */
#define CLAIMS_WORK_CAP			10000

/*
 * Services an instance may claim: those whose target it can serve ($2,
 * the names; NULL: every service, for an instance that declared nothing).
 */
#define CLAIMS_TARGET_FILTER(c) \
	" AND ($2::text[] IS NULL OR " c ".target = ANY ($2::text[]))"

/*
 * The claim's head is submitting. Only a hand-out makes a head submitting,
 * and it holds the claim's row lock; an accepted report moves it on to
 * pending without that lock (status.c). A scalar subquery on the batch's
 * key, not EXISTS: the planner may turn an EXISTS under OR/NOT into a
 * hashed subplan that reads every submitting batch of the table on each
 * call (a takeover's pick then cost 0.2 s at 100,000 batches, 1.3 s at a
 * million); this one is one index probe per claim in flight.
 */
#define CLAIMS_HEAD_SUBMITTING(c) \
	"(" c ".in_flight AND coalesce((SELECT b.status = 'submitting' FROM gridha.batches b" \
	"  WHERE b.service_id = " c ".service_id AND b.seq = " c ".head_seq), false))"

/*
 * Revoking a head still submitting, in a take (r: instance_id := NULL,
 * status unchanged): the old claimant's acceptance no longer matches it,
 * and the claim becomes ready so the new claimant hands it out again. If
 * the acceptance commits first, the re-check on the newest row version
 * finds the batch pending and leaves it alone, and the claim stays in
 * flight with it. The heads are locked first (l), in service_id order, as
 * every wait for a batch row is (see the lock order above).
 */
#define CLAIMS_REVOKE \
	"l AS (" \
	"  SELECT b.service_id, b.seq FROM gridha.batches b" \
	"    JOIN t ON b.service_id = t.service_id AND b.seq = t.head_seq" \
	"   WHERE t.submitting AND b.status = 'submitting'" \
	"   ORDER BY b.service_id COLLATE \"C\"" \
	"   FOR NO KEY UPDATE OF b" \
	"), r AS (" \
	"  UPDATE gridha.batches b SET instance_id = NULL" \
	"    FROM l" \
	"   WHERE b.service_id = l.service_id AND b.seq = l.seq" \
	"     AND b.status = 'submitting'" \
	"  RETURNING b.service_id" \
	")"

/*
 * Taking claims is two statements. The first picks and locks candidates
 * (FOR UPDATE SKIP LOCKED) and returns their ids. The second takes them,
 * with a snapshot taken after the locks were granted: no hand-out can have
 * happened since, so whether a head is submitting is read as it is, but
 * for an accepted report moving it to pending meanwhile, which the batch
 * row lock settles (CLAIMS_REVOKE). In one statement, a candidate whose
 * claim row a hand-out changed after the statement's snapshot (the lock
 * follows it to its newest version) would be judged on a batch row older
 * than that claim row.
 *
 * Picks: $1 instance, $2 the targets it can serve (NULL: any), $3 at most
 * this many (NULL: no limit).
 */
static GridhaStatement claims_free_stmt = {
	"SELECT array_agg(service_id) FROM ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"   WHERE c.claimant IS NULL" CLAIMS_TARGET_FILTER("c")
	"   ORDER BY c.ready_at"
	"   LIMIT $3"
	"   FOR NO KEY UPDATE SKIP LOCKED) c",
	3, {UUIDOID, TEXTARRAYOID, INT8OID}
};

/*
 * ... free claims with no work now (no head ready and none in flight:
 * empty, or delayed): what the count share hands out (claims_free_stmt,
 * for a target only this instance serves, or with balance off, takes both)
 */
static GridhaStatement claims_free_idle_stmt = {
	"SELECT array_agg(service_id) FROM ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"   WHERE c.claimant IS NULL AND (c.ready_at IS NULL OR c.ready_at > now())"
	"     AND NOT c.in_flight"
	CLAIMS_TARGET_FILTER("c")
	"   LIMIT $3"
	"   FOR NO KEY UPDATE SKIP LOCKED) c",
	3, {UUIDOID, TEXTARRAYOID, INT8OID}
};

/*
 * ... how many free claims have work (a head ready now, or in flight: a
 * claim handed back with its head pending, whose ledger answer nobody asks
 * for until it is taken), up to $3
 */
static GridhaStatement claims_free_work_count_stmt = {
	"SELECT count(*) FROM (SELECT 1 FROM gridha.service_claims c"
	"   WHERE c.claimant IS NULL AND (c.ready_at <= now() OR c.in_flight)" CLAIMS_TARGET_FILTER("c")
	"   LIMIT $3) c",
	3, {UUIDOID, TEXTARRAYOID, INT8OID}
};

/*
 * ... free claims with work (a head ready now, or in flight): what the
 * work share hands out (claims_balance_work)
 */
static GridhaStatement claims_free_work_stmt = {
	"SELECT array_agg(service_id) FROM ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"   WHERE c.claimant IS NULL AND (c.ready_at <= now() OR c.in_flight)" CLAIMS_TARGET_FILTER("c")
	"   ORDER BY c.ready_at"
	"   LIMIT $3"
	"   FOR NO KEY UPDATE SKIP LOCKED) c",
	3, {UUIDOID, TEXTARRAYOID, INT8OID}
};

/* ... the claims of one instance ($4), submitting ones too with $5 */
static GridhaStatement claims_of_stmt = {
	"SELECT array_agg(service_id) FROM ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"   WHERE c.claimant = $4 AND $4 <> $1" CLAIMS_TARGET_FILTER("c")
	"     AND ($5 OR NOT " CLAIMS_HEAD_SUBMITTING("c") ")"
	"   ORDER BY c.ready_at"
	"   LIMIT $3"
	"   FOR NO KEY UPDATE SKIP LOCKED) c",
	5, {UUIDOID, TEXTARRAYOID, INT8OID, UUIDOID, BOOLOID}
};

/*
 * ... the claims with work (a head ready, or in flight) of one instance
 * ($4) that no live instance serves: what an idle instance takes whatever
 * its share (claims_take_orphans)
 */
static GridhaStatement claims_work_of_stmt = {
	"SELECT array_agg(service_id) FROM ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"   WHERE c.claimant = $4 AND $4 <> $1" CLAIMS_TARGET_FILTER("c")
	"     AND (c.ready_at <= now() OR c.in_flight)"
	"   ORDER BY c.ready_at"
	"   LIMIT $3"
	"   FOR NO KEY UPDATE SKIP LOCKED) c",
	4, {UUIDOID, TEXTARRAYOID, INT8OID, UUIDOID}
};

/*
 * ... the ready claims of a live instance being relieved ($4), nothing in
 * flight, those that waited longest first
 */
static GridhaStatement claims_relief_stmt = {
	"SELECT array_agg(service_id) FROM ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"   WHERE c.claimant = $4 AND $4 <> $1 AND c.ready_at <= now() AND NOT c.in_flight"
	CLAIMS_TARGET_FILTER("c")
	"   ORDER BY c.ready_at"
	"   LIMIT $3"
	"   FOR NO KEY UPDATE SKIP LOCKED) c",
	4, {UUIDOID, TEXTARRAYOID, INT8OID, UUIDOID}
};

/*
 * How many services with work each instance in $1 has: heads in flight
 * and heads ready now, each counted up to $2 (through the in-flight index
 * and the hand-out index: never its idle claims)
 */
static GridhaStatement claims_busy_stmt = {
	"SELECT (SELECT count(*) FROM (SELECT 1 FROM gridha.service_claims w"
	"                               WHERE w.claimant = b.id AND w.in_flight LIMIT $2) x)"
	"     + (SELECT count(*) FROM (SELECT 1 FROM gridha.service_claims w"
	"                               WHERE w.claimant = b.id AND w.ready_at <= now() LIMIT $2) y)"
	"  FROM unnest($1::uuid[]) WITH ORDINALITY AS b(id, n)"
	" ORDER BY b.n",
	2, {UUIDARRAYOID, INT8OID}
};

/* ... the claims whose own expiry has passed (normally none) */
static GridhaStatement claims_own_expiry_stmt = {
	"SELECT array_agg(service_id) FROM ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"   WHERE (c.soft_expiry IS NOT NULL OR c.hard_expiry IS NOT NULL)"
	"     AND least(c.soft_expiry, c.hard_expiry) <= now()"
	"     AND c.claimant IS NOT NULL AND c.claimant <> $1" CLAIMS_TARGET_FILTER("c")
	"   LIMIT $3"
	"   FOR NO KEY UPDATE SKIP LOCKED) c",
	3, {UUIDOID, TEXTARRAYOID, INT8OID}
};

/*
 * The take: $1 instance, $2 the locked candidates, $3 the lowest epoch it
 * may give (the timeline's base, see claims_epoch_base), $4 the instances
 * whose session has ended, $5 the live instances being relieved (NULL:
 * none; see claims_balance_work). A candidate is taken when it is free, when its
 * claim is hard-expired (or its holder has no lease at all), when it is
 * soft-expired or its holder's session is gone and its head is not
 * submitting, or when its holder is being relieved and its head is ready
 * and not in flight; each judged on what is committed now. Taking sets the
 * claimant, bumps the epoch, clears the claim's own expiries. Returns
 * (service_id, epoch, the claimant it had).
 */
static GridhaStatement claims_take_stmt = {
	"WITH h AS ("
	"  SELECT c.service_id, c.head_seq, c.claimant AS old,"
	"         least(c.soft_expiry, i.soft_expiry) AS soft,"
	"         least(c.hard_expiry, i.hard_expiry) AS hard,"
	"         " CLAIMS_HEAD_SUBMITTING("c") " AS submitting,"
	"         c.in_flight, c.ready_at"
	"    FROM gridha.service_claims c"
	"    LEFT JOIN gridha.instances i ON i.instance_id = c.claimant"
	"   WHERE c.service_id = ANY ($2)"
	"), t AS ("
	"  SELECT h.service_id, h.head_seq, h.submitting, h.old FROM h"
	"   WHERE h.old IS NULL"
	"      OR (h.old <> $1"
	"          AND (h.hard IS NULL OR h.hard <= now()"
	"               OR h.old = ANY ($4)"
	"               OR (h.soft <= now() AND NOT h.submitting)"
	"               OR (h.old = ANY ($5) AND NOT h.in_flight AND h.ready_at <= now())))"
	"), " CLAIMS_REVOKE
	" UPDATE gridha.service_claims c"
	"    SET claimant = $1, epoch = greatest(c.epoch + 1, $3),"
	"        soft_expiry = NULL, hard_expiry = NULL,"
	"        in_flight = c.in_flight AND r.service_id IS NULL,"
	"        ready_at = CASE WHEN r.service_id IS NULL THEN c.ready_at ELSE now() END"
	"   FROM t LEFT JOIN r ON r.service_id = t.service_id"
	"  WHERE c.service_id = t.service_id"
	" RETURNING c.service_id, c.epoch, t.old, c.target",
	5, {UUIDOID, TEXTARRAYOID, INT8OID, UUIDARRAYOID, UUIDARRAYOID}
};

/*
 * The instance-row writes of a cycle, made last (ClaimsPending): every
 * row written locked first, in id order, when there is more than one;
 * $1 ids, $2 how many claims each gained (or lost), $3 which one took
 * claims (its lease reaches now + expiry: it holds claims now), $4/$5 soft
 * and hard expiry in ms, $6 which one renews (its lease and last_seen_at
 * are set). An expired instance left holding nothing loses its lease: it
 * leaves the lease index.
 */
static GridhaStatement claims_lock_instances_stmt = {
	"SELECT 1 FROM gridha.instances WHERE instance_id = ANY ($1)"
	" ORDER BY instance_id FOR UPDATE",
	1, {UUIDARRAYOID}
};

static GridhaStatement claims_count_stmt = {
	"UPDATE gridha.instances i"
	"   SET held = greatest(i.held + d.delta, 0),"
	"       last_seen_at = CASE WHEN d.renew THEN now() ELSE i.last_seen_at END,"
	"       soft_expiry = CASE"
	"           WHEN d.renew THEN now() + $4 * interval '1 millisecond'"
	"           WHEN d.taker THEN greatest(i.soft_expiry, now() + $4 * interval '1 millisecond')"
	"           WHEN i.held + d.delta <= 0 AND i.soft_expiry <= now() THEN NULL"
	"           ELSE i.soft_expiry END,"
	"       hard_expiry = CASE"
	"           WHEN d.renew THEN now() + $5 * interval '1 millisecond'"
	"           WHEN d.taker THEN greatest(i.hard_expiry, now() + $5 * interval '1 millisecond')"
	"           WHEN i.held + d.delta <= 0 AND i.soft_expiry <= now() THEN NULL"
	"           ELSE i.hard_expiry END"
	"  FROM unnest($1::uuid[], $2::int4[], $3::bool[], $6::bool[])"
	"       AS d(id, delta, taker, renew)"
	" WHERE i.instance_id = d.id"
	" RETURNING i.instance_id, i.held",
	6, {UUIDARRAYOID, INT4ARRAYOID, BOOLARRAYOID, INT8OID, INT8OID, BOOLARRAYOID}
};

/* The renewal: one row, whatever the instance holds */
static GridhaStatement claims_renew_stmt = {
	"UPDATE gridha.instances"
	"   SET soft_expiry = now() + $2 * interval '1 millisecond',"
	"       hard_expiry = now() + $3 * interval '1 millisecond',"
	"       last_seen_at = now()"
	" WHERE instance_id = $1"
	" RETURNING held",
	3, {UUIDOID, INT8OID, INT8OID}
};

/* ... and the claims of its own that had an expiry of their own */
static GridhaStatement claims_clear_own_stmt = {
	"WITH o AS ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"   WHERE (c.soft_expiry IS NOT NULL OR c.hard_expiry IS NOT NULL) AND c.claimant = $1"
	"   FOR NO KEY UPDATE SKIP LOCKED"
	")"
	" UPDATE gridha.service_claims c SET soft_expiry = NULL, hard_expiry = NULL"
	"   FROM o WHERE c.service_id = o.service_id",
	1, {UUIDOID}
};

/*
 * How many services the instance can serve ($1 its targets; NULL: all),
 * with what this transaction changed and has not written yet ($2 targets,
 * $3 how many more; see counts.c)
 */
#define CLAIMS_COUNTS \
	"(SELECT target, services FROM gridha.service_counts" \
	" UNION ALL SELECT * FROM ROWS FROM (unnest($2::text[]), unnest($3::int8[]))) AS c (target, services)"

static GridhaStatement claims_services_stmt = {
	"SELECT coalesce(sum(services), 0)::int8 FROM " CLAIMS_COUNTS
	" WHERE $1::text[] IS NULL OR target = ANY ($1)",
	3, {TEXTARRAYOID, TEXTARRAYOID, INT8ARRAYOID}
};

/* ... per target */
static GridhaStatement claims_services_by_target_stmt = {
	"SELECT target, sum(services)::int8 FROM " CLAIMS_COUNTS
	" WHERE $1::text[] IS NULL OR target = ANY ($1)"
	" GROUP BY target",
	3, {TEXTARRAYOID, TEXTARRAYOID, INT8ARRAYOID}
};

/*
 * The live leases: a range of the lease index, with the kinds each serves
 * as a GRIDHA_SERVES_ mask (a worker every kind, -1 any target: declared
 * nothing)
 */
static GridhaStatement claims_live_stmt = {
	"SELECT instance_id, session_key, held,"
	"       CASE WHEN kind = 'worker' THEN 15"
	"            WHEN serves IS NULL THEN -1"
	"            ELSE ('submit_url' = ANY (serves))::int4 * 1"
	"               + ('submit_function' = ANY (serves))::int4 * 2"
	"               + ('status_url' = ANY (serves))::int4 * 4"
	"               + ('status_function' = ANY (serves))::int4 * 8"
	"       END"
	"  FROM gridha.instances"
	" WHERE soft_expiry > now()",
	0, {InvalidOid}
};

/*
 * Expired leases still holding claims, the oldest first (a count that is
 * wrong, a claimant set by hand, is not trusted to say "nothing held"),
 * whether each is hard-expired, and whether it may have anything to take:
 * not when, before its hard expiry, every claim it holds has its head
 * submitting. That is counted through the index of the claims in flight;
 * the claimant index would walk the entries of every claim that moved away
 * (a hung instance keeps its submitting claims until hard expiry, and every
 * survivor asks on each acquisition meanwhile).
 */
static GridhaStatement claims_expired_stmt = {
	"SELECT i.instance_id, i.hard_expiry <= now(),"
	"       i.hard_expiry <= now() OR i.held = 0"
	"       OR i.held > (SELECT count(*) FROM gridha.service_claims c"
	"                     WHERE c.claimant = i.instance_id AND " CLAIMS_HEAD_SUBMITTING("c") "),"
	"       i.session_key"
	"  FROM gridha.instances i"
	" WHERE i.soft_expiry <= now()"
	"   AND (i.held > 0 OR EXISTS (SELECT 1 FROM gridha.service_claims c"
	"                               WHERE c.claimant = i.instance_id))"
	" ORDER BY i.soft_expiry LIMIT " CppAsString2(CLAIMS_EXPIRED_BATCH),
	0, {InvalidOid}
};

/*
 * Expired leases holding nothing leave the lease index; their count is
 * set right on the way (it is what a lease of an empty instance should be).
 */
static GridhaStatement claims_forget_leases_stmt = {
	"UPDATE gridha.instances i SET soft_expiry = NULL, hard_expiry = NULL, held = 0"
	"  FROM (SELECT x.instance_id FROM gridha.instances x"
	"         WHERE x.soft_expiry <= now()"
	"           AND NOT EXISTS (SELECT 1 FROM gridha.service_claims c"
	"                            WHERE c.claimant = x.instance_id)"
	"         LIMIT 1000 FOR UPDATE SKIP LOCKED) e"
	" WHERE i.instance_id = e.instance_id",
	0, {InvalidOid}
};

/*
 * Whether an idle poll may find anything to take (claims_anything): free
 * work, an expired lease, a claim expired on its own. Read through the
 * indexes by rows.c, without the planner: an idle poll runs it every time,
 * and starting the executor for a statement with three subqueries cost
 * more than the three index probes (a quarter of an idle poll's time).
 */
typedef struct ClaimsAnything
{
	TimestampTz now;
	int			nnames;			/* the targets it can serve; -1: any */
	char	  **names;
	bool		found;
} ClaimsAnything;

/*
 * Handing back the claims whose target the instance cannot serve (any more):
 * lock them, then, with a snapshot that sees every hand-out made under
 * those locks, hand back those with nothing submitting ($2: the targets it
 * can serve).
 */
static GridhaStatement claims_lock_unservable_stmt = {
	"SELECT c.service_id, c.target FROM gridha.service_claims c"
	" WHERE c.claimant = $1 AND c.target <> ALL ($2)"
	" FOR NO KEY UPDATE SKIP LOCKED",
	2, {UUIDOID, TEXTARRAYOID}
};

static GridhaStatement claims_release_some_stmt = {
	"WITH r AS ("
	"  UPDATE gridha.service_claims c"
	"     SET claimant = NULL, soft_expiry = NULL, hard_expiry = NULL"
	"   WHERE c.service_id = ANY ($2) AND c.claimant = $1"
	"     AND NOT " CLAIMS_HEAD_SUBMITTING("c")
	"  RETURNING 1"
	")"
	" SELECT count(*)::int4 FROM r",
	2, {UUIDOID, TEXTARRAYOID}
};

/*
 * What this backend knows of an instance's standing, from its last full
 * acquisition: an idle poll of an instance at its share, with nothing
 * expired or free to take, costs one short statement.
 */
static struct
{
	pg_uuid_t	id;
	bool		valid;
	TimestampTz probed_at;		/* others' sessions last asked about */
	uint64		targets_gen;	/* the targets its claims were checked */
	int			serves;			/* against, and what it served then */
	bool		work_short;		/* below its work share, with work elsewhere */
}			claims_known;

/*
 * The instance-row writes of the call under way (the renewal, the counts
 * of claims moved, leases forgotten), gathered as the cycle goes and made
 * last, in gridha_claims_finish: see
 * the lock order in the file header. Begun by every SQL function that
 * runs a cycle (gridha_claims_begin); in the memory context it was begun
 * in, which lasts until the finish.
 */
typedef struct ClaimsPending
{
	bool		active;
	int			n;				/* instances with a row to write... */
	int			size;
	Datum	   *ids;			/* ... their ids ([0]: this instance) */
	int32	   *deltas;			/* ... how many claims each gained or lost */
	bool	   *takers;			/* ... which took claims */
	bool		renew;			/* this instance renews its lease */
	bool		forget;			/* forget expired leases holding nothing */
} ClaimsPending;

static ClaimsPending claims_pending;

/*
 * gridha_claims_begin: starts gathering the instance-row writes of a
 * cycle of this instance (inside SPI).
 */
void
gridha_claims_begin(Datum instance_id)
{
	ClaimsPending *p = &claims_pending;

	/*
	 * Every cycle's call has taken service_claims already, when it touched
	 * its instance (instances.c): a take or a hand-back locks claims in one
	 * statement and writes them in the next, and must not wait for the
	 * table in between (see the lock order in the file header).
	 */
	memset(p, 0, sizeof(*p));
	p->size = 8;
	p->ids = palloc(sizeof(Datum) * p->size);
	p->deltas = palloc0(sizeof(int32) * p->size);
	p->takers = palloc0(sizeof(bool) * p->size);
	p->ids[0] = datumCopy(instance_id, false, UUID_LEN);
	p->n = 1;
	p->active = true;
}

/*
 * claims_pending_add: the instance's held count changes by delta (taker:
 * it took claims, and its lease must reach now + expiry), written last.
 */
static void
claims_pending_add(Datum id, int32 delta, bool taker)
{
	ClaimsPending *p = &claims_pending;
	int			k;

	if (!p->active)
		elog(ERROR, "gridha: a claim cycle wrote outside gridha_claims_begin/finish");
	for (k = 0; k < p->n; k++)
		if (gridha_uuid_equal(p->ids[k], id))
			break;
	if (k == p->n)
	{
		if (p->n == p->size)
		{
			p->size *= 2;
			p->ids = repalloc(p->ids, sizeof(Datum) * p->size);
			p->deltas = repalloc(p->deltas, sizeof(int32) * p->size);
			p->takers = repalloc(p->takers, sizeof(bool) * p->size);
		}
		p->ids[k] = datumCopy(id, false, UUID_LEN);
		p->deltas[k] = 0;
		p->takers[k] = false;
		p->n++;
	}
	p->deltas[k] += delta;
	p->takers[k] |= taker;
}

/*
 * gridha_claims_count_later: this instance's held count changes by delta
 * (claims it handed back), written with the cycle's other instance-row
 * writes, last.
 */
void
gridha_claims_count_later(Datum instance_id, int32 delta)
{
	claims_pending_add(instance_id, delta, false);
}

/*
 * gridha_claims_finish: makes the instance-row writes gathered since
 * gridha_claims_begin, the last writes of the cycle: first the rows it
 * must write, waiting for them, locked in id order (one statement when
 * there is only this instance's row); then, never waiting, the leases to
 * forget, each row skipped when another transaction holds it. Returns
 * this instance's held count when its row was written, -1 otherwise.
 */
int
gridha_claims_finish(void)
{
	ClaimsPending *p = &claims_pending;
	GridhaTiming t = gridha_timing();
	Datum	   *ids;
	Datum	   *deltas;
	Datum	   *takers;
	Datum	   *renews;
	Datum		args[7];
	int			held = -1;
	int			n = 0;
	int			nlock;
	bool		own_key;
	int			k;
	uint64		i;

	/*
	 * The totals the cycle noted (claims taken over) and refusals noted
	 * before: rows of this backend's own, which no other call waits for;
	 * the flush holds gridha.service_claims first, as a rename of targets
	 * that moves these rows does (totals.c), so it may come first here.
	 */
	gridha_totals_flush();
	if (!p->active)
		return -1;
	p->active = false;
	ids = palloc(sizeof(Datum) * (p->n + 1));
	deltas = palloc(sizeof(Datum) * p->n);
	takers = palloc(sizeof(Datum) * p->n);
	renews = palloc(sizeof(Datum) * p->n);
	for (k = 0; k < p->n; k++)
	{
		bool		self = k == 0;

		if (p->deltas[k] == 0 && !p->takers[k] && !(self && p->renew))
			continue;
		ids[n] = p->ids[k];
		deltas[n] = Int32GetDatum(p->deltas[k]);
		takers[n] = BoolGetDatum(p->takers[k]);
		renews[n] = BoolGetDatum(self && p->renew);
		n++;
	}

	/*
	 * The key write its touch left (instances.c) is this instance's too:
	 * one that waits for the row locks it in id order with the others; it
	 * is written last.
	 */
	own_key = gridha_instance_key_waits(p->ids[0]);
	nlock = n;
	if (own_key)
	{
		for (k = 0; k < n; k++)
			if (gridha_uuid_equal(ids[k], p->ids[0]))
				break;
		if (k == n)
			ids[nlock++] = p->ids[0];
	}

	if (n == 1 && p->renew && gridha_uuid_equal(ids[0], p->ids[0]) &&
		p->deltas[0] == 0 && !p->takers[0])
	{
		/* the common case: a renewal alone */
		args[0] = p->ids[0];
		args[1] = Int64GetDatum(t.soft_ms);
		args[2] = Int64GetDatum(t.hard_ms);
		gridha_exec(&claims_renew_stmt, args, NULL, false);
		if (SPI_processed > 0)
			held = (int) gridha_col_int64(0, 1);
	}
	else if (n > 0)
	{
		if (nlock > 1)
		{
			args[0] = PointerGetDatum(construct_array(ids, nlock, UUIDOID, UUID_LEN, false,
													  TYPALIGN_CHAR));
			gridha_exec(&claims_lock_instances_stmt, args, NULL, false);
		}
		args[0] = PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
		args[1] = PointerGetDatum(construct_array(deltas, n, INT4OID, 4, true, TYPALIGN_INT));
		args[2] = PointerGetDatum(construct_array(takers, n, BOOLOID, 1, true, TYPALIGN_CHAR));
		args[3] = Int64GetDatum(t.soft_ms);
		args[4] = Int64GetDatum(t.hard_ms);
		args[5] = PointerGetDatum(construct_array(renews, n, BOOLOID, 1, true, TYPALIGN_CHAR));
		gridha_exec(&claims_count_stmt, args, NULL, false);
		for (i = 0; i < SPI_processed; i++)
		{
			bool		isnull;

			if (gridha_uuid_equal(gridha_col(i, 1, &isnull), p->ids[0]))
				held = (int) gridha_col_int64(i, 2);
		}

		/*
		 * Claims are held only by an instance whose row exists: its lease
		 * is what they expire with, and what a takeover starts from. A row
		 * deleted while this call took claims (the sweep of long-unseen
		 * instances, or an administrator, committed a delete of it after
		 * the call's touch) is not re-created with a count that would
		 * miss them: the call fails as a serialization failure, its takes
		 * undone, and its next call registers the instance anew.
		 */
		if (held < 0 && (p->takers[0] || p->deltas[0] > 0))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("instance %s was deleted while it took claims",
							DatumGetCString(DirectFunctionCall1(uuid_out, p->ids[0]))),
					 errdetail("Its row was deleted by another transaction (the sweep of long-unseen instances, or an administrator) after this call began."),
					 errhint("Call again: the instance is registered anew.")));
	}

	gridha_instance_write_key(p->ids[0]);

	/* never waited for: rows another transaction holds are skipped */
	if (p->forget)
		gridha_exec(&claims_forget_leases_stmt, NULL, NULL, false);
	return held;
}

/*
 * Instances whose session was found ended, with the liveness keys they were
 * judged by: a take asks again once its pick holds the claims
 * (claims_gone_now).
 */
typedef struct ClaimsGone
{
	int			n;
	Datum	   *ids;
	int64	   *keys;
} ClaimsGone;

/* The live instances as an acquisition sees them */
typedef struct ClaimsLive
{
	int			n;				/* live, this one included */
	ClaimsGone	gone;			/* leased, but their session has ended */
	int			nabove;			/* live ones holding more than... */
	Datum	   *above;			/* ... (ids) */
	int		   *above_held;		/* ... (what they hold) */
	int		   *above_serves;	/* ... (the kinds they serve) */
	int			self_at;		/* this one among them, or -1 */
} ClaimsLive;

/*
 * The band of this cluster (gridha.epoch_bands), $1 its system identifier:
 * the 1.3 script's gridha_internal.epoch_band (what it reads and writes is
 * told there), 1.2's copy in claims12.c. Asked once per backend: a band
 * stored is kept (claims_band); one read from the claims, when another
 * transaction holds the band lock, is asked again at the next take.
 */
static GridhaStatement claims_band_stmt = {
	"SELECT band, stored FROM gridha_internal.epoch_band($1)",
	1, {INT8OID}
};

/* the band of this cluster, once read (-1: not yet) */
static int64 claims_band = -1;

/*
 * claims_epoch_base: the lowest epoch a take may give: (band + T - 1) *
 * 2^40 on timeline T. Each new timeline (a promoted standby, a
 * point-in-time recovery) starts its epochs above every epoch an earlier
 * timeline of the cluster can have given, so an epoch that a lost timeline
 * handed out is never handed out again; the band (see claims_band_stmt)
 * does the same for the epochs a database brought from another cluster.
 * A standby shares its primary's system identifier, so its band row too;
 * were the row lost with the last commits of an asynchronous failover,
 * the new primary writes it again from epochs at least as high.
 */
static int64
claims_epoch_base(void)
{
	TimeLineID	tli = GetWALInsertionTimeLine();

	if (claims_band < 0)
	{
		int64		sysid = (int64) GetSystemIdentifier();
		int64		band;
		bool		stored;

		if (gridha_sql_is_current())
		{
			Datum		args[1];
			bool		isnull;

			args[0] = Int64GetDatum(sysid);
			gridha_exec(&claims_band_stmt, args, NULL, false);
			band = gridha_col_int64(0, 1);
			stored = DatumGetBool(gridha_col(0, 2, &isnull)) && !isnull;
		}
		else
			band = gridha_claims12_band(sysid, &stored);
		if (!stored)
			return (band + (int64) tli - 1) << 40;
		claims_band = band;
	}
	return (claims_band + (int64) tli - 1) << 40;
}

/*
 * claims_add_rows: adds the take's rows (service_id, epoch) to rsinfo.
 */
static void
claims_add_rows(ReturnSetInfo *rsinfo)
{
	if (rsinfo != NULL)
		gridha_put_rows(rsinfo, 2);
}

/*
 * claims_count_moves: after the takes of an acquisition (the result tables
 * of claims_take_stmt in "takes"), the held counts of the taker (and its
 * lease: it holds claims now) and of each instance it took from, written
 * last with the cycle's other instance-row writes (gridha_claims_finish),
 * every row locked in id order.
 */
static void
claims_count_moves(Datum instance_id, List *takes)
{
	uint64		ntaken = 0;
	uint64		i;
	ListCell   *lc;

	foreach(lc, takes)
		ntaken += ((SPITupleTable *) lfirst(lc))->numvals;
	if (ntaken == 0)
		return;
	claims_pending_add(instance_id, (int32) ntaken, true);
	foreach(lc, takes)
	{
		SPITupleTable *taken = (SPITupleTable *) lfirst(lc);

		for (i = 0; i < taken->numvals; i++)
		{
			bool		isnull;
			Datum		old = SPI_getbinval(taken->vals[i], taken->tupdesc, 3, &isnull);

			if (isnull)
				continue;
			claims_pending_add(old, -1, false);
			if (!gridha_uuid_equal(old, instance_id))
				gridha_totals_note(SPI_getvalue(taken->vals[i], taken->tupdesc, 4),
								   GRIDHA_TOTAL_TAKEN_OVER);
		}
	}
}

/*
 * claims_gone_now: the ids (uuid[]) of the instances in "gone" whose
 * session is still gone, asked again now. A take asks once its pick holds
 * the claims' row locks: an instance found gone earlier in the cycle may
 * have come back since (a client that reconnected: its new session takes
 * the liveness lock, then hands out under the claims it still holds), and
 * a take on the earlier answer would revoke that hand-out. A hand-out holds
 * its claim's row lock and comes after the liveness lock: so an instance
 * whose session is gone once the pick holds the claims cannot hand out
 * under them before the take commits, and one that came back keeps them
 * (judged by its expiry like any live holder). Returns 0 (the argument is
 * then null) when none is still gone.
 */
static Datum
claims_gone_now(const ClaimsGone *gone)
{
	Datum	   *still;
	int			n = 0;
	int			i;

	if (gone->n == 0)
		return (Datum) 0;
	still = palloc(sizeof(Datum) * gone->n);
	for (i = 0; i < gone->n; i++)
		if (gridha_instance_session_gone(gone->keys[i]))
			still[n++] = gone->ids[i];
	if (n == 0)
		return (Datum) 0;
	return PointerGetDatum(construct_array(still, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
}

/*
 * claims_take: locks up to "limit" candidates (-1: no limit) with the pick
 * statement (its arguments in pickargs: instance, targets, limit, and the
 * pick's own), takes those still takeable (claims_take_stmt; relieved: the
 * uuid[] of live instances being relieved, 0 for none), adds the claims
 * taken to rsinfo, and their rows to *takes for claims_count_moves.
 * Returns how many.
 */
static int
claims_take(GridhaStatement *pick, Datum *pickargs, char *picknulls, Datum instance_id,
			const ClaimsGone *gone, Datum relieved, int64 limit, ReturnSetInfo *rsinfo,
			List **takes)
{
	Datum		args[5];
	char		nulls[6] = "     ";
	bool		isnull;
	Datum		ids;
	SPITupleTable *taken;
	uint64		ntaken;

	if (limit == 0)
		return 0;
	pickargs[2] = Int64GetDatum(limit);
	picknulls[2] = limit < 0 ? 'n' : ' ';
	gridha_exec(pick, pickargs, picknulls, false);
	ids = gridha_col(0, 1, &isnull);
	if (isnull)
		return 0;

	args[0] = instance_id;
	args[1] = ids;
	args[2] = Int64GetDatum(claims_epoch_base());
	args[3] = claims_gone_now(gone);
	if (args[3] == (Datum) 0)
		nulls[3] = 'n';
	args[4] = relieved;
	if (relieved == (Datum) 0)
		nulls[4] = 'n';
	gridha_exec(&claims_take_stmt, args, nulls, false);
	taken = SPI_tuptable;
	ntaken = SPI_processed;
	if (ntaken == 0)
		return 0;
	claims_add_rows(rsinfo);
	*takes = lappend(*takes, taken);
	return (int) ntaken;
}

/*
 * claims_live: the live instances (lease within its soft expiry), which of
 * them hold claims though their session has ended, and which hold more
 * than "above" claims. This instance counts as live even before its first
 * renewal: a newcomer must count, or it would never get a share.
 */
static void
claims_live(Datum instance_id, bool probe, ClaimsLive *live)
{
	uint64		i;
	uint64		n;
	bool		self = false;

	gridha_exec(&claims_live_stmt, NULL, NULL, true);
	n = SPI_processed;
	memset(live, 0, sizeof(*live));
	live->self_at = -1;
	live->gone.ids = palloc(sizeof(Datum) * (n + 1));
	live->gone.keys = palloc(sizeof(int64) * (n + 1));
	live->above = palloc(sizeof(Datum) * (n + 1));
	live->above_held = palloc(sizeof(int) * (n + 1));
	live->above_serves = palloc(sizeof(int) * (n + 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		Datum		id = gridha_col(i, 1, &isnull);
		Datum		key = gridha_col(i, 2, &isnull);
		bool		key_null = isnull;
		int			held = DatumGetInt32(gridha_col(i, 3, &isnull));

		if (gridha_uuid_equal(id, instance_id))
		{
			self = true;
			live->self_at = live->nabove;
		}
		else if (probe && gridha_session_liveness && !key_null &&
				 gridha_instance_session_gone(DatumGetInt64(key)))
		{
			live->gone.ids[live->gone.n] = datumCopy(id, false, UUID_LEN);
			live->gone.keys[live->gone.n++] = DatumGetInt64(key);
			continue;
		}
		live->above[live->nabove] = datumCopy(id, false, UUID_LEN);
		live->above_held[live->nabove] = held;
		live->above_serves[live->nabove++] = DatumGetInt32(gridha_col(i, 4, &isnull));
		live->n++;
	}
	if (!self)
		live->n++;
}

/*
 * claims_shares_work: whether a live instance that serves the kinds in
 * "serves" can serve some of the services this one can, so that the two
 * share work (a worker, or an instance that declared nothing, serves every
 * kind). The services of targets that only this instance can serve are
 * its own whatever the shares (the exclusive targets of claims_share).
 */
static bool
claims_shares_work(const GridhaInstance *inst, int serves)
{
	if (serves == GRIDHA_SERVES_ANY || inst->serves == GRIDHA_SERVES_ANY)
		return true;
	return (serves & inst->serves) != 0;
}

/*
 * claims_balance_work: the balance of work, the one rule that decides where
 * a service with work (a head ready now or in flight) goes while its holder
 * lives. Idle claims cost nothing per cycle and are not what is balanced.
 *
 * The work W is every service with work among the live instances that
 * share this one's targets (each counted up to CLAIMS_WORK_CAP) plus the
 * free services with work, over n such instances: each should serve
 * W / n, and W mod n of them one more. This instance takes that one more
 * only while fewer than W mod n others already serve more than W / n, so
 * the shares add up to W and settle at floor or ceiling. It takes what it
 * misses first from the free services with work, then from the busiest
 * live instance: ready heads with nothing in flight (a head in flight never
 * moves while its holder lives), and only while the holder keeps at least
 * two more than this one had (each move lowers the difference between the
 * two, so a service never goes back and forth) and never below W / n.
 * Every move is a take: the epoch is bumped.
 *
 * An instance that idles (idle_poll, and no service with work: a worker
 * whose heads are all in flight is busy, not idle) takes at least one free
 * service with work whatever the shares say: work is never left waiting
 * while an instance idles. One that stays below W / n because
 * what it could take was in flight tries again shortly
 * (gridha_claims_below_share). Returns how many it took.
 */
static int
claims_balance_work(Datum instance_id, const GridhaInstance *inst, const ClaimsLive *live,
					Datum *pickargs, char *picknulls, const ClaimsGone *gone, bool idle_poll,
					ReturnSetInfo *rsinfo, List **takes)
{
	Datum	   *ids = palloc(sizeof(Datum) * (live->nabove + 1));
	bool	   *tried;
	int64	   *busy;
	int64		busy_self;
	int64		free_work;
	int64		total = 0;
	int64		wfloor;
	int64		above = 0;
	int64		want;
	int			taken = 0;
	int			self = -1;
	int			n = 0;
	int			i;
	Datum		args[2];

	for (i = 0; i < live->nabove; i++)
	{
		if (i == live->self_at)
			self = n;
		else if (!claims_shares_work(inst, live->above_serves[i]))
			continue;
		ids[n++] = live->above[i];
	}
	if (self < 0)
	{
		self = n;
		ids[n++] = instance_id;
	}

	args[0] = PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
	args[1] = Int64GetDatum(CLAIMS_WORK_CAP);
	/* read with a new snapshot: the takes of this call so far count too */
	gridha_exec(&claims_busy_stmt, args, NULL, false);
	busy = palloc(sizeof(int64) * n);
	tried = palloc0(sizeof(bool) * n);
	for (i = 0; i < n; i++)
		total += busy[i] = gridha_col_int64(i, 1);
	pickargs[2] = Int64GetDatum(CLAIMS_WORK_CAP);
	picknulls[2] = ' ';
	gridha_exec(&claims_free_work_count_stmt, pickargs, picknulls, false);
	free_work = gridha_col_int64(0, 1);
	total += free_work;

	busy_self = busy[self];
	wfloor = total / n;
	for (i = 0; i < n; i++)
		if (i != self && busy[i] > wfloor)
			above++;
	want = wfloor + (above < total % n ? 1 : 0) - busy_self;
	if (idle_poll && busy_self == 0 && free_work > 0)
		want = Max(want, 1);

	/* the free services with work first */
	if (want > 0 && free_work > 0)
	{
		int			got = claims_take(&claims_free_work_stmt, pickargs, picknulls, instance_id,
									  gone, (Datum) 0, Min(want, free_work), rsinfo, takes);

		taken += got;
		busy_self += got;
	}

	/* then from the busiest live instances, while that evens out the work */
	while (taken < want)
	{
		int			best = -1;
		int64		give;
		int			got;

		for (i = 0; i < n; i++)
			if (i != self && !tried[i] && (best < 0 || busy[i] > busy[best]))
				best = i;
		if (best < 0)
			break;
		give = Min(want - taken, (busy[best] - busy_self) / 2);
		give = Min(give, busy[best] - wfloor);
		if (give <= 0)
			break;
		tried[best] = true;
		pickargs[3] = ids[best];
		got = claims_take(&claims_relief_stmt, pickargs, picknulls, instance_id, gone,
						  PointerGetDatum(construct_array(&ids[best], 1, UUIDOID, UUID_LEN,
														  false, TYPALIGN_CHAR)),
						  give, rsinfo, takes);
		taken += got;
		busy_self += got;
	}
	claims_known.work_short = busy_self < wfloor;
	return taken;
}

/*
 * claims_expired_gone: whether the session of row i of claims_expired_stmt's
 * result (an instance whose lease has expired) has ended: then nothing of
 * it can still report, and everything it holds is taken, a head submitting
 * too (session liveness on, and a key stored; *key is set to it).
 */
static bool
claims_expired_gone(SPITupleTable *expired, uint64 i, int64 *key)
{
	bool		isnull;
	Datum		k;

	if (!gridha_session_liveness)
		return false;
	k = SPI_getbinval(expired->vals[i], expired->tupdesc, 4, &isnull);
	if (isnull || !gridha_instance_session_gone(DatumGetInt64(k)))
		return false;
	*key = DatumGetInt64(k);
	return true;
}

/*
 * claims_idle: whether the instance has no service with work at all (no
 * head ready, none in flight).
 */
static bool
claims_idle(Datum instance_id, int64 held)
{
	Datum		args[2];

	if (held <= 0)
		return true;
	args[0] = PointerGetDatum(construct_array(&instance_id, 1, UUIDOID, UUID_LEN, false,
											  TYPALIGN_CHAR));
	args[1] = Int64GetDatum(1);
	gridha_exec(&claims_busy_stmt, args, NULL, true);
	return gridha_col_int64(0, 1) == 0;
}

/*
 * claims_take_orphans: the work-conserving rule for work no live instance
 * serves. An instance that found nothing to hand out, took nothing, and
 * idles takes, whatever its share says, the claims with work of instances
 * that can no longer serve them: a claim expired on its own (an operator's
 * UPDATE), the claims of expired leases (a crashed, paused or stopped
 * instance; the take judges each: soft-expired with nothing submitting,
 * hard-expired, or its session gone), and of instances whose session has
 * ended; up to CLAIMS_EXPIRED_BATCH at once. Their idle claims stay where
 * they are until a share reaches them: they cost nothing. Returns how many
 * it took.
 */
static int
claims_take_orphans(Datum instance_id, int64 held, Datum *pickargs, char *picknulls,
					const ClaimsGone *gone, const ClaimsLive *live, ReturnSetInfo *rsinfo,
					List **takes)
{
	int			taken = 0;
	uint64		nexpired;
	SPITupleTable *expired;
	uint64		i;

	if (!claims_idle(instance_id, held))
		return 0;
	taken += claims_take(&claims_own_expiry_stmt, pickargs, picknulls, instance_id, gone,
						 (Datum) 0, CLAIMS_EXPIRED_BATCH, rsinfo, takes);
	gridha_exec(&claims_expired_stmt, NULL, NULL, true);
	expired = SPI_tuptable;
	nexpired = SPI_processed;
	for (i = 0; i < nexpired && taken < CLAIMS_EXPIRED_BATCH; i++)
	{
		bool		isnull;
		Datum		id;
		int64		key;
		ClaimsGone	one = {1, &id, &key};

		id = datumCopy(SPI_getbinval(expired->vals[i], expired->tupdesc, 1, &isnull),
					   false, UUID_LEN);
		pickargs[3] = id;
		taken += claims_take(&claims_work_of_stmt, pickargs, picknulls, instance_id,
							 claims_expired_gone(expired, i, &key) ? &one : gone,
							 (Datum) 0, CLAIMS_EXPIRED_BATCH - taken, rsinfo, takes);
	}
	for (i = 0; i < (uint64) live->gone.n && taken < CLAIMS_EXPIRED_BATCH; i++)
	{
		pickargs[3] = live->gone.ids[i];
		taken += claims_take(&claims_work_of_stmt, pickargs, picknulls, instance_id, gone,
							 (Datum) 0, CLAIMS_EXPIRED_BATCH - taken, rsinfo, takes);
	}
	return taken;
}

/*
 * claims_servable: the names of the targets the instance can serve, as a
 * text[] (0: any target).
 */
static Datum
claims_servable(const GridhaInstance *inst)
{
	if (inst->serves == GRIDHA_SERVES_ANY)
		return (Datum) 0;
	gridha_targets_refresh();
	return gridha_targets_servable_names(inst->serves);
}

/*
 * claims_share: the floor and ceiling of the instance's fair share now:
 * the services it can serve over the live instances (see claims_live).
 * When some live instance cannot serve every target this one can (a
 * client that serves URL targets only, beside workers), each target's
 * services are shared among the live instances that can serve it, so the
 * shares add up to every service: none is left to an instance that cannot
 * serve it.
 *
 * *exclusive is set to the names (text[]) of the targets whose services
 * no other live instance can serve, or to 0 when there are none: those
 * services are this instance's whatever its share.
 */
static void
claims_share(const GridhaInstance *inst, Datum servable, const ClaimsLive *live,
			 int64 *floor, int64 *ceiling, Datum *exclusive)
{
	Datum	   *names = NULL;
	int			nnames = 0;
	Datum		args[3];
	char		nulls[4] = "   ";
	int64		services;
	bool		uniform = true;
	double		share = 0;
	uint64		i;
	int			j;

	*exclusive = (Datum) 0;
	args[0] = servable;
	/* the services this transaction created or removed count too */
	gridha_counts_unwritten(&args[1], &args[2]);
	if (servable == (Datum) 0)
		nulls[0] = 'n';
	for (j = 0; j < live->nabove && uniform; j++)
		uniform = live->above_serves[j] == GRIDHA_SERVES_ANY ||
			(inst->serves != GRIDHA_SERVES_ANY &&
			 (live->above_serves[j] & inst->serves) == inst->serves);
	if (uniform)
	{
		gridha_exec(&claims_services_stmt, args, nulls, true);
		services = gridha_col_int64(0, 1);
		*floor = services / live->n;
		*ceiling = (services + live->n - 1) / live->n;
		return;
	}

	gridha_targets_refresh();
	gridha_exec(&claims_services_by_target_stmt, args, nulls, true);
	if (SPI_processed > 0)
		names = palloc(sizeof(Datum) * SPI_processed);
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		const GridhaTarget *t;
		int			k = live->n;

		t = gridha_target_get(TextDatumGetCString(gridha_col(i, 1, &isnull)));
		if (t != NULL)
		{
			k = 1;
			for (j = 0; j < live->nabove; j++)
				if (j != live->self_at && gridha_target_servable(t, live->above_serves[j]))
					k++;
			if (k == 1)
				names[nnames++] = CStringGetTextDatum(t->name);
		}
		share += (double) gridha_col_int64(i, 2) / k;
	}
	if (nnames > 0)
		*exclusive = gridha_text_array(names, nnames);
	*floor = (int64) (share + 1e-6);
	*ceiling = *floor + (share - *floor > 1e-6 ? 1 : 0);
}

/*
 * gridha_claims_renew: extends the instance's lease (one row, written
 * last with the cycle's other instance-row writes, see
 * gridha_claims_finish) and records the cycle
 * in last_seen_at; claims of its own with an expiry of their own follow
 * the lease again. Claim rows locked by another transaction right now are
 * skipped rather than waited for. Returns the number of claims the
 * instance holds, as the caller knew it.
 */
int
gridha_claims_renew(Datum instance_id, const GridhaInstance *inst)
{
	GridhaTiming t = gridha_timing();
	Datum		args[3];

	args[0] = instance_id;
	args[1] = Int64GetDatum(t.soft_ms);
	args[2] = Int64GetDatum(t.hard_ms);
	gridha_exec(&claims_clear_own_stmt, args, NULL, false);
	claims_pending.renew = true;
	return inst->held;
}

/* ... a free claim whose head is ready, of a target it can serve */
static bool
claims_free_visit(GridhaRows *rows, void *arg)
{
	ClaimsAnything *a = (ClaimsAnything *) arg;
	bool		isnull;
	Datum		target;
	char	   *name;
	int			i;

	if (a->nnames < 0)
	{
		a->found = true;
		return false;
	}
	target = gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_TARGET, &isnull);
	if (isnull)
		return true;
	name = TextDatumGetCString(target);
	for (i = 0; i < a->nnames && !a->found; i++)
		a->found = strcmp(name, a->names[i]) == 0;
	pfree(name);
	return !a->found;
}

/* ... the oldest lease (the lease index's first entry) has expired */
static bool
claims_lease_visit(GridhaRows *rows, void *arg)
{
	ClaimsAnything *a = (ClaimsAnything *) arg;
	bool		isnull;
	Datum		soft = gridha_rows_get(rows, GRIDHA_INSTANCES,
									   gridha_rows_attno(rows, INSTANCE_SOFT_EXPIRY), &isnull);

	a->found = !isnull && DatumGetTimestampTz(soft) <= a->now;
	return false;
}

/* ... a held claim whose own expiry (the earlier of the two) has passed */
static bool
claims_own_expiry_visit(GridhaRows *rows, void *arg)
{
	ClaimsAnything *a = (ClaimsAnything *) arg;
	bool		soft_null;
	bool		hard_null;
	bool		isnull;
	Datum		soft = gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_SOFT_EXPIRY, &soft_null);
	Datum		hard = gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_HARD_EXPIRY, &hard_null);

	(void) gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_CLAIMANT, &isnull);
	if (!isnull &&
		((!soft_null && DatumGetTimestampTz(soft) <= a->now) ||
		 (!hard_null && DatumGetTimestampTz(hard) <= a->now)))
		a->found = true;
	return !a->found;
}

/*
 * claims_anything: whether there may be anything to take, for an instance
 * that can serve the targets in servable (a text[]; 0: any).
 */
static bool
claims_anything(Datum servable)
{
	static const AttrNumber attnos[2] = {CLAIM_CLAIMANT, CLAIM_READY_AT};
	static const StrategyNumber strategies[2] = {GRIDHA_IS_NULL, BTLessEqualStrategyNumber};
	ClaimsAnything a;
	GridhaRows	rows;
	Datum		values[2];

	a.now = GetCurrentTransactionStartTimestamp();
	a.nnames = -1;
	a.names = NULL;
	a.found = false;
	if (servable != (Datum) 0)
	{
		Datum	   *elems;
		int			i;

		deconstruct_array(DatumGetArrayTypeP(servable), TEXTOID, -1, false, TYPALIGN_INT,
						  &elems, NULL, &a.nnames);
		a.names = palloc(sizeof(char *) * Max(a.nnames, 1));
		for (i = 0; i < a.nnames; i++)
			a.names[i] = TextDatumGetCString(elems[i]);
	}
	values[0] = (Datum) 0;
	values[1] = TimestampTzGetDatum(a.now);

	gridha_rows_begin(&rows, false);
	gridha_rows_scan(&rows, GRIDHA_CLAIMS, attnos, strategies, values, 2, claims_free_visit, &a);
	if (!a.found)
		gridha_rows_scan_index(&rows, GRIDHA_INDEX_LEASE, claims_lease_visit, &a);
	if (!a.found)
		gridha_rows_scan_index(&rows, GRIDHA_INDEX_OWN_EXPIRY, claims_own_expiry_visit, &a);
	gridha_rows_end(&rows);
	return a.found;
}

/*
 * claims_nothing_to_take: on an idle poll, whether this instance, at its
 * share as far as this backend knows, can skip the acquisition: no free
 * work, no expired lease or claim, and others' sessions were asked about
 * recently (short of its work share: within CLAIMS_BELOW_SHARE_EVERY_MS).
 */
static bool
claims_nothing_to_take(Datum instance_id, const GridhaInstance *inst, Datum servable)
{
	TimestampTz now = GetCurrentTimestamp();

	if (!claims_known.valid || !gridha_uuid_equal(UUIDPGetDatum(&claims_known.id), instance_id) ||
		(gridha_probe_interval_ms >= 0 &&
		 TimestampDifferenceExceeds(claims_known.probed_at, now, CLAIMS_PROBE_EVERY_MS)))
		return false;
	/* short of its work share: look again, but not at every poll */
	if (gridha_balance_claims && claims_known.work_short && gridha_probe_interval_ms >= 0 &&
		TimestampDifferenceExceeds(claims_known.probed_at, now, CLAIMS_BELOW_SHARE_EVERY_MS))
		return false;
	return !claims_anything(servable);
}

/*
 * gridha_claims_below_share: whether an instance that has just handed out
 * work should acquire now all the same: it holds less than its share, or
 * serves less than its share of the work (as its last acquisition in this
 * backend reckoned them), and has not acquired for
 * CLAIMS_BELOW_SHARE_EVERY_MS; or it has not looked at the others for
 * CLAIMS_PROBE_EVERY_MS, or not at all in this backend (others take from
 * a busy instance too: it learns that it fell below its work share, or
 * that an instance died, within a second). Without it a newcomer that got some work at once would serve
 * that and ask for the rest of its share only at its next renewal.
 */
bool
gridha_claims_below_share(Datum instance_id, const GridhaInstance *inst)
{
	TimestampTz now;

	if (!gridha_balance_claims)
		return false;
	/* this backend has not looked yet (a new session of a busy instance) */
	if (!claims_known.valid || !gridha_uuid_equal(UUIDPGetDatum(&claims_known.id), instance_id))
		return true;
	/* -1: only the claim cycle looks again (no clock in the hand-out) */
	if (gridha_probe_interval_ms < 0)
		return false;
	now = GetCurrentTimestamp();
	if (TimestampDifferenceExceeds(claims_known.probed_at, now, CLAIMS_PROBE_EVERY_MS))
		return true;
	return claims_known.work_short &&
		TimestampDifferenceExceeds(claims_known.probed_at, now, CLAIMS_BELOW_SHARE_EVERY_MS);
}

/*
 * claims_release_unservable: hands back the claims whose target the
 * instance cannot serve, when the targets or its declaration changed since
 * it last looked (the hand-out hands back those it meets as it goes).
 * Claims on a target that no instance can use (a dropped function, a
 * malformed row) are kept for the hand-out, which makes their next head
 * delayed with the reason and warns before it hands them back: handed back
 * here, their batches would wait unclaimed with no word of why.
 * Returns how many it handed back.
 */
static int
claims_release_unservable(Datum instance_id, const GridhaInstance *inst, Datum servable)
{
	bool		same = claims_known.valid &&
		gridha_uuid_equal(UUIDPGetDatum(&claims_known.id), instance_id);
	Datum		args[2];
	Datum	   *ids;
	int			n = 0;
	uint64		i;

	if (same && claims_known.targets_gen == gridha_targets_generation() &&
		claims_known.serves == inst->serves)
		return 0;
	claims_known.targets_gen = gridha_targets_generation();
	claims_known.serves = inst->serves;
	if (servable == (Datum) 0 || inst->held == 0)
		return 0;
	args[0] = instance_id;
	args[1] = servable;
	gridha_exec(&claims_lock_unservable_stmt, args, NULL, false);
	ids = palloc(sizeof(Datum) * Max(SPI_processed, 1));
	for (i = 0; i < SPI_processed; i++)
	{
		char	   *target = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		const GridhaTarget *t = gridha_target_get(target);

		if (t != NULL && t->unusable != NULL)
			continue;
		ids[n++] = CStringGetTextDatum(SPI_getvalue(SPI_tuptable->vals[i],
													SPI_tuptable->tupdesc, 1));
	}
	if (n == 0)
		return 0;
	args[1] = gridha_text_array(ids, n);
	gridha_exec(&claims_release_some_stmt, args, NULL, false);
	n = (int) gridha_col_int64(0, 1);
	claims_pending_add(instance_id, -n, false);
	return n;
}

/*
 * gridha_claims_acquire: takes free claims, claims expired on their own,
 * those of instances whose lease has expired, and those of instances whose
 * session has ended (gridha.session_liveness), up to this instance's share
 * (no limit with balance off; with balance on, services with work by the
 * work share, idle ones up to the count share, and an instance above that
 * keeps what it holds). Only services whose target the instance can serve
 * are taken.
 *
 * idle_poll: called because a hand-out found nothing; then an instance at
 * its share with nothing to take looks no further (claims_nothing_to_take).
 *
 * Returns the number of claims newly taken; when rsinfo is given, each one
 * is added to its tuplestore as (service_id, epoch).
 */
int
gridha_claims_acquire(Datum instance_id, const GridhaInstance *inst, bool idle_poll,
					  ReturnSetInfo *rsinfo)
{
	int64		limit = -1;
	int64		floor = 0;
	int64		ceiling = 0;
	int64		held = inst->held;
	int			taken = 0;
	Datum		servable = (Datum) 0;
	Datum		pickargs[5];
	char		picknulls[6] = "     ";
	ClaimsLive	live;
	const ClaimsGone *gone = &live.gone;
	Datum		exclusive = (Datum) 0;
	uint64		i;
	uint64		nexpired;
	SPITupleTable *expired;
	List	   *takes = NIL;

	servable = claims_servable(inst);
	if (idle_poll && claims_nothing_to_take(instance_id, inst, servable))
		return 0;

	held -= claims_release_unservable(instance_id, inst, servable);
	claims_live(instance_id, true, &live);
	claims_known.id = *DatumGetUUIDP(instance_id);
	claims_known.probed_at = GetCurrentTimestamp();
	claims_known.valid = true;
	claims_known.work_short = false;
	pickargs[0] = instance_id;
	pickargs[1] = servable;
	picknulls[1] = servable == (Datum) 0 ? 'n' : ' ';
	if (gridha_balance_claims)
	{
		claims_share(inst, servable, &live, &floor, &ceiling, &exclusive);

		/*
		 * Free services that only this instance can serve are taken
		 * whatever its share.
		 */
		if (exclusive != (Datum) 0)
		{
			pickargs[1] = exclusive;
			picknulls[1] = ' ';
			taken += claims_take(&claims_free_stmt, pickargs, picknulls, instance_id, gone,
								 (Datum) 0, -1, rsinfo, &takes);
			pickargs[1] = servable;
			picknulls[1] = servable == (Datum) 0 ? 'n' : ' ';
		}
		/* idle claims above the count's ceiling stay where they are */
		limit = Max(ceiling - held, taken);

		/*
		 * The work share: services with work, free or from the busiest.
		 * What the count share leaves is for idle claims (never below 0:
		 * a negative limit would mean none).
		 */
		taken += claims_balance_work(instance_id, inst, &live, pickargs, picknulls, gone,
									 idle_poll, rsinfo, &takes);
		limit = Max(limit, taken);
	}

	/* free claims (with balance, those with no work now), then claims expired on their own */
	taken += claims_take(gridha_balance_claims ? &claims_free_idle_stmt : &claims_free_stmt,
						 pickargs, picknulls, instance_id, gone,
						 (Datum) 0, limit < 0 ? -1 : limit - taken, rsinfo, &takes);
	taken += claims_take(&claims_own_expiry_stmt, pickargs, picknulls, instance_id, gone,
						 (Datum) 0, limit < 0 ? -1 : limit - taken, rsinfo, &takes);

	/* the claims of expired leases (leases left holding nothing go, last) */
	claims_pending.forget = true;
	gridha_exec(&claims_expired_stmt, NULL, NULL, true);
	expired = SPI_tuptable;
	nexpired = SPI_processed;
	for (i = 0; i < nexpired && (limit < 0 || taken < limit); i++)
	{
		bool		isnull;
		Datum		id;
		int64		key;
		ClaimsGone	one = {1, &id, &key};
		const ClaimsGone *its_gone = gone;

		id = datumCopy(SPI_getbinval(expired->vals[i], expired->tupdesc, 1, &isnull),
					   false, UUID_LEN);
		pickargs[3] = id;
		pickargs[4] = SPI_getbinval(expired->vals[i], expired->tupdesc, 2, &isnull);
		if (isnull)
			pickargs[4] = BoolGetDatum(false);
		if (claims_expired_gone(expired, i, &key))
		{
			/* its session has ended: everything it holds, submitting or not */
			pickargs[4] = BoolGetDatum(true);
			its_gone = &one;
		}
		else if (!DatumGetBool(SPI_getbinval(expired->vals[i], expired->tupdesc, 3, &isnull)) &&
				 !isnull)
			continue;
		taken += claims_take(&claims_of_stmt, pickargs, picknulls, instance_id, its_gone,
							 (Datum) 0, limit < 0 ? -1 : limit - taken, rsinfo, &takes);
	}

	/*
	 * the claims of instances whose session has ended, a head submitting
	 * too: nobody is left to report it (a late report of a session that
	 * comes back is refused, its hand-out revoked)
	 */
	for (i = 0; i < (uint64) live.gone.n && (limit < 0 || taken < limit); i++)
	{
		pickargs[3] = live.gone.ids[i];
		pickargs[4] = BoolGetDatum(true);
		taken += claims_take(&claims_of_stmt, pickargs, picknulls, instance_id, gone,
							 (Datum) 0, limit < 0 ? -1 : limit - taken, rsinfo, &takes);
	}

	/* work-conserving: idle, and work no live instance serves */
	if (idle_poll && gridha_balance_claims && taken == 0)
		taken += claims_take_orphans(instance_id, held, pickargs, picknulls, gone, &live,
									 rsinfo, &takes);

	claims_count_moves(instance_id, takes);
	return taken;
}

PG_FUNCTION_INFO_V1(gridha_renew_claims);

/*
 * gridha_renew_claims: SQL gridha.renew_claims(instance_id) -> integer,
 * the claims the instance holds (all of them renewed).
 */
Datum
gridha_renew_claims(PG_FUNCTION_ARGS)
{
	Datum		instance_id;
	GridhaInstance inst;
	int			n;

	GRIDHA_CITUS_HANDOVER(fcinfo);
	instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	gridha_require_writable("renew_claims()");
	SPI_connect();
	inst = gridha_instance_touch(instance_id);
	gridha_claims_begin(instance_id);
	(void) gridha_claims_renew(instance_id, &inst);
	n = gridha_claims_finish();
	n = Max(n, 0);
	gridha_instance_write_key(instance_id);
	SPI_finish();
	PG_RETURN_INT32(n);
}

PG_FUNCTION_INFO_V1(gridha_acquire_claims);

/*
 * gridha_acquire_claims: SQL gridha.acquire_claims(instance_id, serves)
 * -> TABLE(service_id, epoch), the claims newly taken. serves, when given,
 * records which kinds of target the instance serves (a 1.2 caller may
 * call the form without it).
 */
Datum
gridha_acquire_claims(PG_FUNCTION_ARGS)
{
	Datum		instance_id;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	GridhaInstance inst;
	int			declared = GRIDHA_SERVES_ANY;

	GRIDHA_CITUS_HANDOVER(fcinfo);
	instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	gridha_require_writable("acquire_claims()");
	if (PG_NARGS() > 1 && !PG_ARGISNULL(1))
		declared = gridha_serves_parse(PG_GETARG_DATUM(1));
	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	inst = gridha_instance_touch(instance_id);
	if (PG_NARGS() > 1 && !PG_ARGISNULL(1) && !inst.is_worker)
	{
		gridha_instance_declare(instance_id, declared);
		inst.serves = declared;
	}
	gridha_claims_begin(instance_id);
	(void) gridha_claims_acquire(instance_id, &inst, false, rsinfo);
	(void) gridha_claims_finish();
	SPI_finish();
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(gridha_release_check);

/*
 * gridha_release_check: SQL gridha_internal.release_check(instance_id)
 * (1.3): what gridha.release_claims of the 1.3 script needs C for before
 * its statements: instance_id given (22004), a writable transaction, the
 * calling role may act as the instance (RG008, with the library's cache of
 * that verdict), and gridha.service_claims held for writing before any of
 * its rows is locked (see the lock order in the file header). 1.2's
 * release_claims: claims12.c.
 */
Datum
gridha_release_check(PG_FUNCTION_ARGS)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");

	gridha_require_writable("release_claims()");
	SPI_connect();
	gridha_instance_check(instance_id);
	gridha_rows_hold_for_write(GRIDHA_CLAIMS);
	SPI_finish();
	PG_RETURN_VOID();
}
