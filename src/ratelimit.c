/*-------------------------------------------------------------------------
 *
 * ratelimit.c
 *		Per-target rate limits, enforced at hand-out across all instances.
 *
 * Words:
 *   limited   a target with a rate_interval; rate_burst = 0 pauses it
 *   slot      the right to hand out one batch of a limited target
 *   tat       the target's theoretical arrival time (generic cell rate
 *             algorithm), kept in gridha.target_rate_state: a hand-out at
 *             time t conforms when t >= tat - (rate_burst - 1) * rate_interval,
 *             and moves tat to max(tat, t) + rate_interval
 *   closed    a limited target with no slot now (or paused)
 *
 * Why the bound holds: slots of one target are taken one at a time under
 * the lock of its target_rate_state row, with t = the hand-out's now() (also
 * its batches.handed_out_at and rate_handouts.slot_at). Each slot moves tat
 * by at least rate_interval past the t of the slot before it, and a slot is
 * taken only when t >= tat - (rate_burst - 1) * rate_interval. So for any
 * two hand-outs i and j of the target (j taken n slots after i),
 * t_j >= t_i + n * rate_interval - (rate_burst - 1) * rate_interval: any
 * window of length W holds at most rate_burst + W / rate_interval of them.
 * Nothing moves tat back but a rate change: an instance that dies after its
 * hand-out committed has used its slot (the batch is handed out again by the
 * claim's next holder, under a slot of its own); one whose hand-out rolls
 * back took its slot back together with the batch, so none went out.
 *
 * The hand-out (gridha_queue_handout) takes this path only while some
 * target is limited: gridha_ratelimit_active() answers from a per-backend
 * flag that every change of gridha.targets resets at commit (relcache
 * invalidation), so services on unlimited targets cost nothing more while
 * no target is limited. On this path:
 *
 *   1. the pick locks the ready claims as the plain hand-out's does,
 *      skipping those of closed targets; the heads of unlimited targets are
 *      then handed out at once (gridha_queue_write), those of limited
 *      targets with a slot open are kept locked;
 *   2. only when 1 returned heads of limited targets: slots are taken per
 *      target, targets in name order (so two instances never deadlock),
 *      each waiting for the row lock of its target_rate_state row;
 *   3. the heads that got a slot are handed out (gridha_queue_write) and
 *      logged in gridha.rate_handouts. A head whose target had no slot after all (an
 *      instance ahead of it took the last one) stays queued for later.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "gridha.h"
#include "queue.h"
#include "ratelimit.h"
#include "spi_util.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/tuplestore.h"

static GridhaStatement ratelimit_prune_stmt = {
	"DELETE FROM gridha.rate_handouts WHERE slot_at < now() - interval '1 day'",
	0, {InvalidOid}
};

static GridhaStatement ratelimit_any_stmt = {
	"SELECT EXISTS (SELECT 1 FROM gridha.targets WHERE rate_interval IS NOT NULL)",
	0, {InvalidOid}
};

/*
 * Step 1, the pick. Columns: service_id, head_seq, epoch, target, limited.
 * Locks up to $2 ready claims, longest waiting first, as queue.c's pick
 * does, skipping those of closed targets. The two arrays are computed once
 * per statement (InitPlans), so the claim scan stays the plain pick's index
 * range scan. Planned for each call's count (see gridha_exec): hand-outs of
 * limited targets are few by definition, so the planner run is cheap next
 * to them. "(SELECT now())": as in queue.c's pick.
 */
static GridhaStatement ratelimit_pick_stmt = {
	"WITH l AS ("
	"  SELECT coalesce(array_agg(t.target), '{}') AS limited,"
	"         coalesce(array_agg(t.target) FILTER (WHERE t.rate_burst = 0"
	"                  OR now() < r.tat - (t.rate_burst - 1) * t.rate_interval), '{}') AS closed"
	"    FROM gridha.targets t"
	"    LEFT JOIN gridha.target_rate_state r ON r.target = t.target"
	"   WHERE t.rate_interval IS NOT NULL"
	")"
	" SELECT c.service_id, c.head_seq, c.epoch, c.target,"
	"        c.target = ANY ((SELECT limited FROM l)::text[]) AS limited"
	"   FROM gridha.service_claims c"
	"  WHERE c.claimant = $1 AND c.ready_at <= now() AND c.soft_expiry > (SELECT now())"
	"    AND c.target <> ALL ((SELECT closed FROM l)::text[])"
	"  ORDER BY c.ready_at"
	"  LIMIT $2"
	"  FOR UPDATE OF c SKIP LOCKED",
	2, {UUIDOID, INT8OID}, true
};

/*
 * Step 2: the lock that serializes slot-taking per target. It waits for a
 * rival instance's hand-out (or a rate change) to commit rather than
 * skipping the row: a free slot is then never lost to a rival that merely
 * held the lock, and the next statements, each with a fresh snapshot, see
 * the newest tat and the newest rate. The wait is short: hand-outs commit
 * right away, and the bound does not depend on it (see the header).
 */
static GridhaStatement ratelimit_lock_stmt = {
	"SELECT 1 FROM gridha.target_rate_state WHERE target = $1 FOR UPDATE",
	1, {TEXTOID}
};

/* A limited target's first slot: its state row starts at tat -infinity */
static GridhaStatement ratelimit_create_stmt = {
	"INSERT INTO gridha.target_rate_state (target)"
	" SELECT $1 WHERE EXISTS (SELECT 1 FROM gridha.targets"
	"                          WHERE target = $1 AND rate_interval IS NOT NULL)"
	" ON CONFLICT (target) DO NOTHING",
	1, {TEXTOID}
};

/* One slot, if one is open now (GCRA); rate_burst = 0 never has one */
static GridhaStatement ratelimit_slot_stmt = {
	"UPDATE gridha.target_rate_state r"
	"   SET tat = greatest(r.tat, now()) + t.rate_interval,"
	"       slots_taken = r.slots_taken + 1"
	"  FROM gridha.targets t"
	" WHERE r.target = $1 AND t.target = r.target"
	"   AND t.rate_interval IS NOT NULL AND t.rate_burst > 0"
	"   AND now() >= r.tat - (t.rate_burst - 1) * t.rate_interval"
	" RETURNING 1",
	1, {TEXTOID}
};

static GridhaStatement ratelimit_unlimited_stmt = {
	"SELECT 1 FROM gridha.targets WHERE target = $1 AND rate_interval IS NULL",
	1, {TEXTOID}
};

/* Step 3: the log of the heads handed out with a slot */
static GridhaStatement ratelimit_log_stmt = {
	"INSERT INTO gridha.rate_handouts (target, slot_at, service_id, batch_id, instance_id, epoch)"
	" SELECT u.target, now(), u.service_id, u.batch_id, $1, u.epoch"
	"   FROM unnest($2::text[], $3::text[], $4::text[], $5::int8[])"
	"     AS u(target, service_id, batch_id, epoch)",
	5, {UUIDOID, TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID, INT8ARRAYOID}
};

/*
 * For the background worker's wait: how many ms until the next slot of a
 * limited target for which this instance holds a ready head.
 */
static GridhaStatement ratelimit_wait_stmt = {
	"SELECT ceil(extract(epoch FROM min(r.next_slot_at) - clock_timestamp()) * 1000)::int8"
	"  FROM gridha.target_rates r"
	" WHERE r.next_slot_at < 'infinity'"
	"   AND EXISTS (SELECT 1 FROM gridha.service_claims c"
	"                WHERE c.claimant = $1 AND c.target = r.target"
	"                  AND c.ready_at <= now() AND c.soft_expiry > now())",
	1, {UUIDOID}
};

/*
 * The per-backend answer of gridha_ratelimit_active: valid while
 * ratelimit_known_gen equals ratelimit_gen, which every invalidation of
 * gridha.targets (or of every relation) bumps.
 */
static uint64 ratelimit_gen = 1;
static uint64 ratelimit_known_gen = 0;
static bool ratelimit_any = false;
static Oid	ratelimit_relid = InvalidOid;
static bool ratelimit_callback_registered = false;

/* A head of a limited target, waiting for its slot */
typedef struct RatelimitHead
{
	Datum		service_id;
	int64		head_seq;
	int64		epoch;
	char	   *target;
	int			ord;			/* place in the hand-out order */
	bool		slotted;
} RatelimitHead;

/*
 * gridha_ratelimit_prune_log: maintenance forgets hand-out log rows older
 * than a day. Inside SPI.
 */
void
gridha_ratelimit_prune_log(void)
{
	gridha_exec(&ratelimit_prune_stmt, NULL, NULL, false);
}

/*
 * ratelimit_relcache_callback: gridha.targets (or every relation) was
 * invalidated; the next hand-out asks again whether any target is limited.
 */
static void
ratelimit_relcache_callback(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == ratelimit_relid)
		ratelimit_gen++;
}

/*
 * gridha_ratelimit_active: true when some target of gridha.targets has a
 * rate limit, as of a change committed before this transaction began (or
 * later: invalidations are also taken in at every new lock). Inside SPI.
 *
 * A stale "true" only costs the limited path; a stale "false" cannot last
 * past the transaction: a change that limits a target invalidates
 * gridha.targets at its commit (trigger targets_rate_inval).
 */
bool
gridha_ratelimit_active(void)
{
	uint64		gen;
	bool		isnull;
	Oid			nsp;

	if (ratelimit_known_gen == ratelimit_gen)
		return ratelimit_any;

	if (!ratelimit_callback_registered)
	{
		CacheRegisterRelcacheCallback(ratelimit_relcache_callback, (Datum) 0);
		ratelimit_callback_registered = true;
	}
	nsp = get_namespace_oid("gridha", false);
	ratelimit_relid = get_relname_relid("targets", nsp);

	/* an invalidation that arrives while we read marks the answer stale */
	gen = ratelimit_gen;
	gridha_exec(&ratelimit_any_stmt, NULL, NULL, true);
	ratelimit_any = DatumGetBool(gridha_col(0, 1, &isnull));
	ratelimit_known_gen = gen;
	return ratelimit_any;
}

/*
 * ratelimit_take: takes up to want slots of a target, one at a time under
 * its row lock, and returns how many it got (all of them when the target
 * is no longer limited). Inside SPI.
 */
static int
ratelimit_take(const char *target, int want)
{
	Datum		args[1];
	int			got = 0;

	args[0] = CStringGetTextDatum(target);
	gridha_exec(&ratelimit_lock_stmt, args, NULL, false);
	if (SPI_processed == 0)
	{
		gridha_exec(&ratelimit_create_stmt, args, NULL, false);
		gridha_exec(&ratelimit_lock_stmt, args, NULL, false);
	}
	if (SPI_processed > 0)
	{
		while (got < want)
		{
			gridha_exec(&ratelimit_slot_stmt, args, NULL, false);
			if (SPI_processed == 0)
				break;
			got++;
		}
		if (got > 0)
			return got;
	}

	/* no slot: unless the limit was lifted meanwhile */
	gridha_exec(&ratelimit_unlimited_stmt, args, NULL, false);
	return SPI_processed > 0 ? want : 0;
}

/*
 * ratelimit_cmp_target: orders heads by target name (byte order), the
 * order in which every instance locks target rows, and within a target
 * longest waiting first.
 */
static int
ratelimit_cmp_target(const void *a, const void *b)
{
	const RatelimitHead *ha = (const RatelimitHead *) a;
	const RatelimitHead *hb = (const RatelimitHead *) b;
	int			c = strcmp(ha->target, hb->target);

	if (c != 0)
		return c;
	return (ha->ord > hb->ord) - (ha->ord < hb->ord);
}

/*
 * gridha_ratelimit_handout: gridha_queue_handout while some target is
 * limited. Hands out up to max_batches ready heads, longest waiting first,
 * skipping the heads of targets with no slot now; a head of a limited
 * target is handed out only with a slot taken in this transaction and is
 * logged in gridha.rate_handouts. Rows go to rsinfo's tuplestore. Returns
 * the number handed out. Inside SPI.
 */
int
gridha_ratelimit_handout(Datum instance_id, int32 max_batches, ReturnSetInfo *rsinfo)
{
	Datum		args[5];
	SPITupleTable *tab;
	uint64		n;
	uint64		i;
	RatelimitHead *heads;
	int			nheads = 0;
	int			nfree = 0;
	int			nslotted = 0;
	int			done = 0;
	int			written;
	int			nlogged;
	int			start;
	Datum	   *batch_ids;
	Datum	   *sids;
	Datum	   *seqs;
	Datum	   *epochs;
	Datum	   *targets;

	args[0] = instance_id;
	args[1] = Int64GetDatum(max_batches);
	gridha_exec(&ratelimit_pick_stmt, args, NULL, false);
	tab = SPI_tuptable;
	n = SPI_processed;
	if (n == 0)
		return 0;

	/* the heads of unlimited targets go out at once; the others need slots */
	heads = palloc0(sizeof(RatelimitHead) * n);
	sids = palloc(sizeof(Datum) * n);
	seqs = palloc(sizeof(Datum) * n);
	epochs = palloc(sizeof(Datum) * n);
	targets = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		Datum		service_id = SPI_getbinval(tab->vals[i], tab->tupdesc, 1, &isnull);
		int64		head_seq = DatumGetInt64(SPI_getbinval(tab->vals[i], tab->tupdesc, 2, &isnull));
		int64		epoch = DatumGetInt64(SPI_getbinval(tab->vals[i], tab->tupdesc, 3, &isnull));
		RatelimitHead *h;

		if (!DatumGetBool(SPI_getbinval(tab->vals[i], tab->tupdesc, 5, &isnull)))
		{
			sids[nfree] = service_id;
			seqs[nfree] = Int64GetDatum(head_seq);
			epochs[nfree] = Int64GetDatum(epoch);
			nfree++;
			continue;
		}
		h = &heads[nheads];
		h->ord = nheads++;
		h->target = TextDatumGetCString(SPI_getbinval(tab->vals[i], tab->tupdesc, 4, &isnull));
		h->service_id = service_id;
		h->epoch = epoch;
		h->head_seq = head_seq;
	}
	done = gridha_queue_write(instance_id, sids, seqs, epochs, nfree, rsinfo, NULL);
	if (nheads == 0)
		return done;

	/* step 2: slots for the heads of limited targets */
	qsort(heads, nheads, sizeof(RatelimitHead), ratelimit_cmp_target);
	for (start = 0; start < nheads;)
	{
		int			end = start;
		int			got;

		while (end < nheads && strcmp(heads[end].target, heads[start].target) == 0)
			end++;
		got = ratelimit_take(heads[start].target, end - start);
		for (i = start; i < (uint64) (start + got); i++)
		{
			heads[i].slotted = true;
			nslotted++;
		}
		start = end;
	}
	if (nslotted == 0)
		return done;

	/* step 3: hand out the heads with a slot */
	nslotted = 0;
	for (i = 0; i < (uint64) nheads; i++)
	{
		if (!heads[i].slotted)
			continue;
		sids[nslotted] = heads[i].service_id;
		seqs[nslotted] = Int64GetDatum(heads[i].head_seq);
		epochs[nslotted] = Int64GetDatum(heads[i].epoch);
		targets[nslotted] = CStringGetTextDatum(heads[i].target);
		nslotted++;
	}
	batch_ids = palloc(sizeof(Datum) * nslotted);
	written = gridha_queue_write(instance_id, sids, seqs, epochs, nslotted, rsinfo, batch_ids);
	if (written == 0)
		return done;

	/* log them: the rows the write handed out, with their targets */
	nlogged = 0;
	for (i = 0; i < (uint64) nslotted; i++)
	{
		if (batch_ids[i] == (Datum) 0)
			continue;
		targets[nlogged] = targets[i];
		sids[nlogged] = sids[i];
		batch_ids[nlogged] = batch_ids[i];
		epochs[nlogged] = epochs[i];
		nlogged++;
	}
	args[1] = gridha_text_array(targets, nlogged);
	args[2] = gridha_text_array(sids, nlogged);
	args[3] = gridha_text_array(batch_ids, nlogged);
	args[4] = gridha_int8_array(epochs, nlogged);
	gridha_exec(&ratelimit_log_stmt, args, NULL, false);
	return done + written;
}

/*
 * gridha_ratelimit_wait_ms: for an instance that was handed nothing, the
 * ms until the next slot opens for a limited target of one of its ready
 * heads (at least 10); -1 when there is no such head or nothing is
 * limited. Inside SPI.
 */
long
gridha_ratelimit_wait_ms(Datum instance_id)
{
	Datum		args[1];
	bool		isnull;
	Datum		d;

	if (!gridha_ratelimit_active())
		return -1;
	args[0] = instance_id;
	gridha_exec(&ratelimit_wait_stmt, args, NULL, true);
	if (SPI_processed == 0)
		return -1;
	d = gridha_col(0, 1, &isnull);
	if (isnull)
		return -1;
	return (long) Max(10, Min(DatumGetInt64(d), (int64) INT_MAX));
}

PG_FUNCTION_INFO_V1(gridha_targets_rate_inval);

/*
 * gridha_targets_rate_inval: statement trigger on gridha.targets: at
 * commit, every backend asks again whether any target is limited.
 */
Datum
gridha_targets_rate_inval(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "gridha: targets_rate_inval must be called as a trigger");
	CacheInvalidateRelcacheByRelid(RelationGetRelid(trigdata->tg_relation));
	return PointerGetDatum(NULL);
}
