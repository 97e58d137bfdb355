/*-------------------------------------------------------------------------
 *
 * ratelimit.c
 *		Per-target rate limits, enforced at hand-out across all instances.
 *		This file only answers: which limited targets have no slot now, and
 *		how many slots a hand-out gets; the hand-out itself is queue.c's.
 *		Its statements off the hand-out (the log's pruning, the worker's
 *		wait) are the 1.3 script's (gridha_internal.rate_handouts_prune,
 *		rate_wait_ms).
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
 * The hand-out (queue.c) asks only while some target is limited
 * (gridha_targets_any_limited, from the judged targets of targets.c):
 *
 *   1. gridha_ratelimit_closed: the limited targets with no slot now; the
 *      pick skips their claims;
 *   2. gridha_ratelimit_take, for each limited target among the heads the
 *      pick locked, targets in name order (so two instances never
 *      deadlock): the slots it gets, one at a time under the row lock of
 *      its target_rate_state row, which it waits for, unless the
 *      transaction holds the row of a later target already (below);
 *   3. gridha_ratelimit_log: the heads handed out with a slot, in
 *      gridha.rate_handouts. A head whose target had no slot after all (an
 *      instance ahead of it took the last one) stays queued for later.
 *
 * One transaction may run two hand-outs: next_batches hands out again
 * after the acquisition that follows a hand-out of nothing, and the first
 * may have locked rate-state rows it took no slot under. The second then
 * waits only for rows of targets past the last one the transaction locked
 * waiting (ratelimit_held_max); a row before it, it locks only if it is
 * free (SKIP LOCKED), and its heads stay queued otherwise. Waiting for it
 * closed a cycle with another hand-out that held it and waited, in name
 * order, for a row the first hand-out held (40P01; isolation spec
 * lock-handout-twice).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common.h"
#include "generation.h"
#include "ratelimit.h"
#include "spi_util.h"
#include "targets.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

/* Step 1: the limited targets with no slot now */
static GridhaStatement ratelimit_closed_stmt = {
	"SELECT t.target FROM gridha.targets t"
	"  LEFT JOIN gridha.target_rate_state r ON r.target = t.target"
	" WHERE t.rate_interval IS NOT NULL"
	"   AND (t.rate_burst = 0 OR now() < r.tat - (t.rate_burst - 1) * t.rate_interval)",
	0, {InvalidOid}
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

/* ... for a target before one whose row the transaction holds: no wait */
static GridhaStatement ratelimit_lock_free_stmt = {
	"SELECT 1 FROM gridha.target_rate_state WHERE target = $1 FOR UPDATE SKIP LOCKED",
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
 * limited target for which this instance holds a ready head (the 1.3
 * script's statement, SQL 1.3 only).
 */
static GridhaStatement ratelimit_wait_stmt = {
	"SELECT gridha_internal.rate_wait_ms($1)",
	1, {UUIDOID}
};

/*
 * The last target (in name order) whose rate-state row this transaction
 * locked waiting, in TopMemoryContext; NULL when none. Forgotten at the
 * end of the transaction. A subtransaction that rolls back lets go of its
 * row locks but not of this: a later hand-out then skips rows it could
 * have waited for, which is only ever safe.
 */
static char *ratelimit_held_max = NULL;
static bool ratelimit_callback_registered = false;

static void
ratelimit_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
	{
		if (ratelimit_held_max != NULL)
			pfree(ratelimit_held_max);
		ratelimit_held_max = NULL;
	}
}

/*
 * gridha_ratelimit_closed: the names of the limited targets with no slot
 * now (paused ones included), as a List of C strings. Inside SPI.
 */
List *
gridha_ratelimit_closed(void)
{
	List	   *closed = NIL;
	uint64		i;

	gridha_exec(&ratelimit_closed_stmt, NULL, NULL, true);
	for (i = 0; i < SPI_processed; i++)
		closed = lappend(closed, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
	return closed;
}

/*
 * gridha_ratelimit_take: takes up to want slots of a target, one at a time
 * under its row lock, and returns how many it got (all of them when the
 * target is no longer limited). Callers take the slots of several targets
 * in name order. The row is waited for only when it comes at or after
 * every rate-state row this transaction locked waiting (see the header);
 * otherwise it is taken only if free, and a target whose row is held by
 * another transaction (or has none yet) gets no slot. Inside SPI.
 */
int
gridha_ratelimit_take(const char *target, int want)
{
	Datum		args[1];
	int			got = 0;
	bool		wait = ratelimit_held_max == NULL || strcmp(target, ratelimit_held_max) >= 0;

	args[0] = CStringGetTextDatum(target);
	if (!wait)
		gridha_exec(&ratelimit_lock_free_stmt, args, NULL, false);
	else
	{
		gridha_exec(&ratelimit_lock_stmt, args, NULL, false);
		if (SPI_processed == 0)
		{
			gridha_exec(&ratelimit_create_stmt, args, NULL, false);
			gridha_exec(&ratelimit_lock_stmt, args, NULL, false);
		}
		if (SPI_processed > 0)
		{
			if (!ratelimit_callback_registered)
			{
				RegisterXactCallback(ratelimit_xact_callback, NULL);
				ratelimit_callback_registered = true;
			}
			if (ratelimit_held_max != NULL)
				pfree(ratelimit_held_max);
			ratelimit_held_max = MemoryContextStrdup(TopMemoryContext, target);
		}
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
 * gridha_ratelimit_log: records n hand-outs made with a slot: targets,
 * service_ids and batch_ids (text), epochs (bigint). Inside SPI.
 */
void
gridha_ratelimit_log(Datum instance_id, Datum *targets, Datum *service_ids,
					 Datum *batch_ids, Datum *epochs, int n)
{
	Datum		args[5];

	if (n == 0)
		return;
	args[0] = instance_id;
	args[1] = gridha_text_array(targets, n);
	args[2] = gridha_text_array(service_ids, n);
	args[3] = gridha_text_array(batch_ids, n);
	args[4] = gridha_int8_array(epochs, n);
	gridha_exec(&ratelimit_log_stmt, args, NULL, false);
}

/*
 * gridha_ratelimit_wait_ms: for an instance that was handed nothing, the
 * ms until the next slot opens for a limited target of one of its ready
 * heads (at least 10); -1 when there is no such head or nothing is
 * limited, and on SQL 1.2 (the statement is the 1.3 script's: until ALTER
 * EXTENSION gridha UPDATE a worker sleeps its naptime, woken by new
 * batches as ever). Inside SPI.
 *
 * The worker asks it as gridha.worker_role, whose gridha_submitter reads
 * only service_id and target of gridha.service_claims: the statement,
 * gridha_internal.rate_wait_ms, is SECURITY DEFINER, a fixed read of
 * gridha's own tables that runs as their owner, as the hand-out's own
 * reads do.
 */
long
gridha_ratelimit_wait_ms(Datum instance_id)
{
	Datum		args[1];
	bool		isnull;
	Datum		d;

	if (!gridha_sql_is_current())
		return -1;
	gridha_targets_refresh();
	if (!gridha_targets_any_limited())
		return -1;
	args[0] = instance_id;
	/* the Citus mode's workers ask too: the statement has the mode's branch */
	gridha_exec_served(&ratelimit_wait_stmt, args, NULL, true);
	if (SPI_processed == 0)
		return -1;
	d = gridha_col(0, 1, &isnull);
	if (isnull)
		return -1;
	return (long) Max(10, Min(DatumGetInt64(d), (int64) INT_MAX));
}
