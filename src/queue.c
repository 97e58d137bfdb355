/*-------------------------------------------------------------------------
 *
 * queue.c
 *		Enqueue and the ordered hand-out: gridha.enqueue, next_batch,
 *		next_batches. (claimed_batches and verify_batch are SQL of the
 *		install script since 1.3; src/sql12.c serves their 1.2 forms.)
 *
 * Words:
 *   head      a service's oldest batch that is not final (service_claims.
 *             head_seq); only the head is ever handed out or in flight, so
 *             batches leave strictly in enqueue order, one at a time
 *   ready     a head that may be handed out now (ready_at <= now()): queued,
 *             delayed past its not_before, unknown, or left submitting by a
 *             claimant that was taken over
 *   hand-out  marking a ready head submitting under the claim's epoch
 *
 * A hand-out is one index range scan over (claimant, ready_at): its cost
 * does not depend on how many services exist or how many batches wait.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "claims.h"
#include "common.h"
#include "path.h"
#include "tables.h"
#include "instances.h"
#include "leader.h"
#include "queue.h"
#include "ratelimit.h"
#include "rows.h"
#include "spi_util.h"
#include "targets.h"
#include "totals.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

/*
 * The hand-out is two commands (rows.c): the pick walks the instance's
 * ready claims in the (claimant, ready_at) index, oldest ready first, and
 * locks up to max_batches of them as SELECT ... FOR UPDATE SKIP LOCKED
 * would; the write then marks their heads submitting and the claims in
 * flight (gridha_queue_write). Apart, the pick's index scan ends before
 * anything is written: a scan marks the dead entries it stepped over (each
 * hand-out and report leaves one behind in that index) only if their leaf
 * page is unchanged when it ends, and the claim's own new index entry
 * would change it first. Unmarked, every hand-out would step over all of
 * them again until the next vacuum.
 *
 * Two things can keep a locked claim's head from going out. Its target
 * may be rate-limited: the pick skips targets with no slot now, and a
 * head of a limited target goes out only with a slot (ratelimit.c). Or
 * the instance cannot serve its target (it declared the kinds it serves,
 * targets.c): the claim is set aside, handed back, and if no instance can
 * serve the target at all, its head is delayed with the reason.
 */
typedef struct QueueHead
{
	Datum		service_id;		/* text, copied */
	Datum		head_seq;
	Datum		epoch;
	const GridhaTarget *target; /* when the pick looks at targets */
	bool		go;				/* to be handed out */
} QueueHead;

typedef struct QueueHeads
{
	int			n;
	int			size;
	QueueHead  *heads;
} QueueHeads;

typedef struct QueuePick
{
	Datum		instance_id;
	TimestampTz now;
	bool		lease_live;		/* the instance's lease is within its soft expiry */
	int			max;			/* how many to pick at most */
	int			serves;			/* the kinds the instance serves */
	bool		by_target;		/* look at each claim's target */
	List	   *closed;			/* limited targets with no slot now */
	QueueHeads	picked;			/* in hand-out order */
	QueueHeads	aside;			/* locked, but not this instance's to serve */
} QueuePick;

/*
 * A service that has this target already: nothing to check or write. A
 * service on another target stays there: a producer never moves a service
 * (gridha.move_service is an administrator's). Else (a new service) the
 * target must exist, and is locked as the foreign key's check locks it, so
 * that a rename or delete committing meanwhile makes this RG006 rather
 * than a foreign key violation of the write that follows.
 *
 * The service's target is read under its claim's lock (the insert's
 * trigger locks that row next anyway): a move_service under way is waited
 * for, and the check judges the target it leaves. Read without the lock,
 * an enqueue naming the old target passed while the move was open, then
 * waited for it in the insert and put its batch on the new target
 * (isolation spec enqueue-move).
 */
static GridhaStatement queue_target_of_stmt = {
	"SELECT target FROM gridha.service_claims WHERE service_id OPERATOR(pg_catalog.=) $1"
	"   FOR NO KEY UPDATE",
	1, {TEXTOID}
};

static GridhaStatement queue_target_exists_stmt = {
	"SELECT 1 FROM gridha.targets WHERE target OPERATOR(pg_catalog.=) $1 FOR KEY SHARE",
	1, {TEXTOID}
};

/* ... created on the target, unless an enqueue created it meanwhile */
static GridhaStatement queue_set_target_stmt = {
	"INSERT INTO gridha.service_claims AS c (service_id, target) VALUES ($1, $2)"
	" ON CONFLICT (service_id) DO NOTHING",
	2, {TEXTOID, TEXTOID}
};

static GridhaStatement queue_batch_exists_stmt = {
	"SELECT 1 FROM gridha.batches WHERE service_id = $1 AND batch_id = $2",
	2, {TEXTOID, TEXTOID}
};

static GridhaStatement queue_insert_stmt = {
	"INSERT INTO gridha.batches (service_id, batch_id, payload)"
	" VALUES ($1, $2, $3) RETURNING seq",
	3, {TEXTOID, TEXTOID, BYTEAOID}
};

/* A handed-out row kept until all are written (gridha_queue_write) */
typedef struct QueueOut
{
	bool		done;
	Datum		values[6];
	bool		nulls[6];
} QueueOut;

/*
 * queue_text_cmp: service ids compared byte by byte, as COLLATE "C" does
 * (the order of every wait for claim and batch rows, claims.c).
 */
static int
queue_text_cmp(Datum a, Datum b)
{
	text	   *ta = DatumGetTextPP(a);
	text	   *tb = DatumGetTextPP(b);
	int			la = VARSIZE_ANY_EXHDR(ta);
	int			lb = VARSIZE_ANY_EXHDR(tb);
	int			c = memcmp(VARDATA_ANY(ta), VARDATA_ANY(tb), Min(la, lb));

	return c != 0 ? c : (la > lb) - (la < lb);
}

/*
 * queue_service_order: the positions 0..n-1 of service_ids, in service_id
 * order (ties in the order given).
 */
static int *
queue_service_order(Datum *service_ids, int n)
{
	int		   *order = palloc(sizeof(int) * Max(n, 1));
	int			i,
				j;

	/* insertion sort: a hand-out is a few rows */
	for (i = 0; i < n; i++)
	{
		for (j = i; j > 0 && queue_text_cmp(service_ids[order[j - 1]], service_ids[i]) > 0; j--)
			order[j] = order[j - 1];
		order[j] = i;
	}
	return order;
}

/*
 * queue_row_final: whether the current batch row is committed or invalid.
 */
static bool
queue_row_final(GridhaRows *rows)
{
	bool		isnull;
	GridhaStatus status = gridha_status_of(gridha_rows_get(rows, GRIDHA_BATCHES, BATCH_STATUS, &isnull));

	return status == GRIDHA_COMMITTED || status == GRIDHA_INVALID;
}

/* Heads whose queue queue_repair_head found empty, in this hand-out */
static int	queue_heads_emptied = 0;

/* What queue_next_batch found: the first unfinished batch after a seq */
typedef struct QueueNext
{
	bool		found;
	int64		seq;
} QueueNext;

static bool
queue_next_batch(GridhaRows *rows, void *arg)
{
	QueueNext  *next = (QueueNext *) arg;
	bool		isnull;

	if (queue_row_final(rows))
		return true;
	next->found = true;
	next->seq = DatumGetInt64(gridha_rows_get(rows, GRIDHA_BATCHES, BATCH_SEQ, &isnull));
	return false;
}

/*
 * queue_repair_head: the claim row of service_id, locked by this
 * transaction, names as its head a seq that has no batch row, or a final
 * one. That happens only when something skipped an insert after its seq
 * was reserved (a user's BEFORE trigger that fires after batches_enqueue
 * and returns NULL), or a superuser wrote the rows by hand: gridha's own
 * paths never leave it. Handing out nothing for such a head would wedge
 * the service, and, while it is the instance's longest waiting, every
 * hand-out of the instance. So the head moves to the service's next
 * unfinished batch: *seq is set to it and true returned, with that batch
 * the current row; or, when there is none, the service's queue is empty,
 * its claim row is written so and settled (gridha_totals_settle_claim, as
 * a report that empties a queue settles it), and false is returned. Either way a
 * WARNING (RG020) names the service and the target's heads_repaired
 * counter grows by one (gridha.metrics). The caller holds the claim row's
 * lock, so the snapshot of this command sees every batch committed under
 * it (a batch inserted by a transaction still open holds it too).
 */
static bool
queue_repair_head(GridhaRows *rows, Datum service_id, Datum *seq)
{
	static const AttrNumber attnos[2] = {BATCH_SERVICE_ID, BATCH_SEQ};
	static const StrategyNumber strategies[2] = {BTEqualStrategyNumber, BTGreaterStrategyNumber};
	Datum		values[2];
	QueueNext	next = {false, 0};
	int64		was = DatumGetInt64(*seq);
	char	   *target;
	bool		isnull;
	Datum		d;

	values[0] = service_id;
	values[1] = *seq;
	gridha_rows_scan(rows, GRIDHA_BATCHES, attnos, strategies, values, 2, queue_next_batch, &next);

	/* the claim row: its target, and an empty queue written here */
	if (!gridha_rows_fetch(rows, GRIDHA_KEY_CLAIM, &service_id))
		elog(ERROR, "gridha: the claim on service \"%s\" changed during its hand-out",
			 TextDatumGetCString(service_id));
	d = gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_TARGET, &isnull);
	target = isnull ? pstrdup("default") : TextDatumGetCString(d);
	if (!next.found)
	{
		/* the queue runs dry here: settled, as a report that empties it is */
		GridhaColumn claim[3 + GRIDHA_TOTALS_NSETTLED] = {
			{CLAIM_HEAD_SEQ, (Datum) 0, true},
			{CLAIM_READY_AT, (Datum) 0, true},
			{CLAIM_IN_FLIGHT, BoolGetDatum(false), false}
		};
		int			nclaim = 3;
		int64		delta[GRIDHA_TOTALS_NSETTLED];
		int			k;

		gridha_totals_settle_claim(rows, 0, 0, claim, &nclaim, delta);
		if (gridha_rows_update(rows, GRIDHA_CLAIMS, claim, nclaim) != GRIDHA_ROW_UPDATED)
			elog(ERROR, "gridha: the claim on service \"%s\" changed during its hand-out",
				 TextDatumGetCString(service_id));
		for (k = 0; k < GRIDHA_TOTALS_NSETTLED; k++)
			if (delta[k] != 0)
				gridha_totals_add(target, GRIDHA_TOTAL_SETTLED_ENQUEUED + k, delta[k]);
		queue_heads_emptied++;
	}
	ereport(WARNING,
			(errcode(ERRCODE_GRIDHA_HEAD_REPAIRED),
			 errmsg("the head of service \"%s\" had no unfinished batch at seq " INT64_FORMAT,
					TextDatumGetCString(service_id), was),
			 next.found ?
			 errdetail("Its head moved to its next batch, seq " INT64_FORMAT ".", next.seq) :
			 errdetail("It has no unfinished batch after it: its queue is empty now."),
			 errhint("An insert into gridha.batches was skipped after its place was reserved (a BEFORE trigger that returns NULL?), or the rows were changed by hand.")));
	gridha_totals_note(target, GRIDHA_TOTAL_HEADS_REPAIRED);
	pfree(target);
	if (!next.found)
		return false;
	*seq = Int64GetDatum(next.seq);
	values[1] = *seq;
	if (!gridha_rows_fetch(rows, GRIDHA_KEY_BATCH_SEQ, values))
		elog(ERROR, "gridha: batch " INT64_FORMAT " of service \"%s\" vanished during its hand-out",
			 next.seq, TextDatumGetCString(service_id));
	return true;
}

/*
 * gridha_queue_write: hands out the heads of n claims this transaction has
 * locked: service_ids (text), head_seqs and epochs (bigint), as the pick
 * returned them. Each head still waiting (queued, delayed, unknown, or
 * submitting under a revoked hand-out) becomes submitting under its
 * claim's epoch and this instance, its attempts grow by one, its claim
 * becomes in flight, and its row goes to rsinfo's tuplestore. Returns the
 * number handed out. With batch_ids, batch_ids[i] is set to the batch id
 * of claim i's head when it was handed out, to (Datum) 0 when not.
 *
 * The rows are written by key (rows.c): a head changed since the write's
 * snapshot is judged again in its newest version, as an UPDATE would.
 * They are written in service_id order, as every wait for batch rows is
 * (the lock order, claims.c), and returned in the order given.
 */
int
gridha_queue_write(Datum instance_id, Datum *service_ids, Datum *head_seqs,
				   Datum *epochs, int n, ReturnSetInfo *rsinfo, Datum *batch_ids)
{
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	GridhaRows	rows;
	int			done = 0;
	int		   *order;
	QueueOut   *outs = NULL;
	int			k;

	if (n == 0)
		return 0;
	order = queue_service_order(service_ids, n);
	if (n > 1)
		outs = palloc0(sizeof(QueueOut) * n);
	gridha_rows_begin(&rows, true);
	for (k = 0; k < n; k++)
	{
		int			i = order[k];
		Datum		key[2];
		bool		isnull;
		GridhaStatus status;
		GridhaUpdateResult res = GRIDHA_ROW_DELETED;
		int32		attempts = 0;
		Datum		out[6];
		bool		outnull[6] = {false, false, false, false, false, false};
		GridhaColumn batch[6];
		GridhaColumn claim[4] = {
			{CLAIM_READY_AT, (Datum) 0, true},
			{CLAIM_IN_FLIGHT, BoolGetDatum(true), false}
		};
		int			nclaim = 2;

		if (batch_ids != NULL)
			batch_ids[i] = (Datum) 0;
		key[0] = service_ids[i];
		key[1] = head_seqs[i];
		if (!gridha_rows_fetch(&rows, GRIDHA_KEY_BATCH_SEQ, key) ||
			queue_row_final(&rows))
		{
			/* never skipped in silence: the head moves to the next batch */
			if (!queue_repair_head(&rows, service_ids[i], &key[1]))
				continue;
			claim[nclaim++] = (GridhaColumn) {CLAIM_HEAD_SEQ, key[1], false};
		}
		do
		{
			status = gridha_status_of(gridha_rows_get(&rows, GRIDHA_BATCHES, BATCH_STATUS, &isnull));
			if (status != GRIDHA_QUEUED && status != GRIDHA_DELAYED &&
				status != GRIDHA_UNKNOWN && status != GRIDHA_SUBMITTING)
				break;
			attempts = DatumGetInt32(gridha_rows_get(&rows, GRIDHA_BATCHES, BATCH_ATTEMPTS, &isnull)) + 1;
			batch[0] = (GridhaColumn) {BATCH_STATUS, gridha_status_datum(GRIDHA_SUBMITTING), false};
			batch[1] = (GridhaColumn) {BATCH_EPOCH, epochs[i], false};
			batch[2] = (GridhaColumn) {BATCH_ATTEMPTS, Int32GetDatum(attempts), false};
			batch[3] = (GridhaColumn) {BATCH_INSTANCE_ID, instance_id, false};
			batch[4] = (GridhaColumn) {BATCH_HANDED_OUT_AT, TimestampTzGetDatum(now), false};
			batch[5] = (GridhaColumn) {BATCH_NOT_BEFORE, (Datum) 0, true};
			res = gridha_rows_update(&rows, GRIDHA_BATCHES, batch, lengthof(batch));
		} while (res == GRIDHA_ROW_CHANGED);
		if (res != GRIDHA_ROW_UPDATED)
			continue;

		/* what was stored, as RETURNING would say (a trigger may change it) */
		out[0] = gridha_rows_get_stored(&rows, GRIDHA_BATCHES, BATCH_SERVICE_ID, &outnull[0]);
		out[1] = gridha_rows_get_stored(&rows, GRIDHA_BATCHES, BATCH_BATCH_ID, &outnull[1]);
		out[2] = gridha_rows_get_stored(&rows, GRIDHA_BATCHES, BATCH_PAYLOAD, &outnull[2]);
		out[3] = gridha_rows_get_stored(&rows, GRIDHA_BATCHES, BATCH_EPOCH, &outnull[3]);
		out[4] = gridha_rows_get_stored(&rows, GRIDHA_BATCHES, BATCH_ATTEMPTS, &outnull[4]);
		/* 1.2 declares attempt and attempts, the same count (1.3: attempts) */
		out[5] = out[4];
		outnull[5] = outnull[4];
		if (outs != NULL)
		{
			int			c;

			/* kept, and returned in the order given once all are written */
			for (c = 0; c < rsinfo->setDesc->natts; c++)
			{
				outs[i].values[c] = outnull[c] ? (Datum) 0 :
					datumCopy(out[c], c >= 3, c >= 3 ? sizeof(Datum) : -1);
				outs[i].nulls[c] = outnull[c];
			}
			outs[i].done = true;
		}
		else
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnull);
		if (batch_ids != NULL)
			batch_ids[i] = datumCopy(out[1], false, -1);

		/* the pick locked the claim: it is as this snapshot sees it */
		if (!gridha_rows_fetch(&rows, GRIDHA_KEY_CLAIM, &service_ids[i]))
			elog(ERROR, "gridha: the claim on service \"%s\" changed during its hand-out",
				 TextDatumGetCString(service_ids[i]));
		if (attempts > 1)
		{
			/* a batch handed out again: the service's running total (1.2) */
			AttrNumber	total = gridha_rows_attno(&rows, CLAIM_RESUBMITTED_TOTAL);

			if (total != 0)
			{
				Datum		d = gridha_rows_get(&rows, GRIDHA_CLAIMS, total, &isnull);

				claim[nclaim++] = (GridhaColumn) {total, Int64GetDatum((isnull ? 0 : DatumGetInt64(d)) + 1), false};
			}
		}
		if (gridha_rows_update(&rows, GRIDHA_CLAIMS, claim, nclaim) != GRIDHA_ROW_UPDATED)
			elog(ERROR, "gridha: the claim on service \"%s\" changed during its hand-out",
				 TextDatumGetCString(service_ids[i]));
		done++;
	}
	gridha_rows_end(&rows);
	if (outs != NULL)
		for (k = 0; k < n; k++)
			if (outs[k].done)
				tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
									 outs[k].values, outs[k].nulls);
	return done;
}

/*
 * queue_servable: whether the current claim row is this instance's, ready
 * (its head may go now) and within its soft expiry: the instance's lease
 * and the claim's own expiry, when it has one.
 */
static bool
queue_servable(GridhaRows *rows, QueuePick *pick)
{
	bool		isnull;
	Datum		d;

	d = gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_CLAIMANT, &isnull);
	if (isnull || !gridha_uuid_equal(d, pick->instance_id))
		return false;
	d = gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_READY_AT, &isnull);
	if (isnull || DatumGetTimestampTz(d) > pick->now)
		return false;
	d = gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_SOFT_EXPIRY, &isnull);
	if (!pick->lease_live || (!isnull && DatumGetTimestampTz(d) <= pick->now))
		return false;
	(void) gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_HEAD_SEQ, &isnull);
	return !isnull;
}

/*
 * queue_target: the judged target of the current claim row (NULL when the
 * row names none); *closed is set when it is limited with no slot now.
 */
static const GridhaTarget *
queue_target(GridhaRows *rows, QueuePick *pick, bool *closed)
{
	bool		isnull;
	Datum		d = gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_TARGET, &isnull);
	char	   *name;
	const GridhaTarget *t;
	ListCell   *lc;

	*closed = false;
	if (isnull)
		return NULL;
	name = TextDatumGetCString(d);
	t = gridha_target_get(name);
	if (t != NULL && t->rate_limited)
		foreach(lc, pick->closed)
			if (strcmp((char *) lfirst(lc), name) == 0)
				*closed = true;
	pfree(name);
	return t;
}

/*
 * queue_add: appends the current claim row's head to a list.
 */
static void
queue_add(GridhaRows *rows, QueueHeads *list, const GridhaTarget *t)
{
	QueueHead  *h;
	bool		isnull;

	if (list->n == list->size)
	{
		list->size = Max(list->size * 2, 8);
		list->heads = list->heads ? repalloc(list->heads, list->size * sizeof(QueueHead)) :
			palloc(list->size * sizeof(QueueHead));
	}
	h = &list->heads[list->n++];
	h->service_id =
		datumCopy(gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_SERVICE_ID, &isnull), false, -1);
	h->head_seq = gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_HEAD_SEQ, &isnull);
	h->epoch = gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_EPOCH, &isnull);
	h->target = t;
	h->go = t == NULL || !t->rate_limited;
}

/*
 * queue_pick_claim: the pick's step for one claim the index scan found:
 * unless its target is closed, lock it unless another transaction holds
 * it, judge its newest version, keep it (or set it aside). False once
 * enough are kept.
 */
static bool
queue_pick_claim(GridhaRows *rows, void *arg)
{
	QueuePick  *pick = (QueuePick *) arg;
	const GridhaTarget *t = NULL;
	bool		closed;

	if (!queue_servable(rows, pick))
		return true;
	if (pick->by_target)
	{
		(void) queue_target(rows, pick, &closed);
		if (closed)
			return true;
	}
	if (gridha_rows_lock(rows, GRIDHA_CLAIMS, false, true) != GRIDHA_ROW_LOCKED ||
		!queue_servable(rows, pick))
		return true;
	if (pick->by_target)
	{
		/* judged again on the version locked */
		t = queue_target(rows, pick, &closed);
		if (closed)
			return true;
		if (!gridha_target_servable(t, pick->serves))
		{
			queue_add(rows, &pick->aside, t);
			return true;
		}
	}
	queue_add(rows, &pick->picked, t);
	return pick->picked.n < pick->max;
}

/*
 * queue_slots: the heads of limited targets go out only with a slot:
 * slots are taken per target, targets in name order (ratelimit.c).
 */
static void
queue_slots(QueuePick *pick)
{
	QueueHead  *h = pick->picked.heads;
	int			n = pick->picked.n;
	bool	   *done = palloc0(sizeof(bool) * Max(n, 1));

	for (;;)
	{
		const char *first = NULL;
		int			want = 0;
		int			got;
		int			i;

		/* the next target in name order among those not asked yet */
		for (i = 0; i < n; i++)
			if (!done[i] && h[i].target != NULL && h[i].target->rate_limited &&
				(first == NULL || strcmp(h[i].target->name, first) < 0))
				first = h[i].target->name;
		if (first == NULL)
			break;
		for (i = 0; i < n; i++)
			if (!done[i] && h[i].target != NULL && strcmp(h[i].target->name, first) == 0)
				want++;
		got = gridha_ratelimit_take(first, want);
		/* the longest waiting get the slots */
		for (i = 0; i < n; i++)
			if (!done[i] && h[i].target != NULL && strcmp(h[i].target->name, first) == 0)
			{
				h[i].go = got-- > 0;
				done[i] = true;
			}
	}
	pfree(done);
}

/*
 * queue_delay_head: a head the pick locked the claim of, and whose target
 * no instance can serve, becomes delayed with the reason as its detail,
 * unless it is not waiting to go out (then nothing changes). Returns when
 * it may go again, 0 when it was left alone.
 */
static TimestampTz
queue_delay_head(GridhaRows *rows, QueueHead *h, const char *reason, TimestampTz now)
{
	Datum		key[2];
	bool		isnull;
	GridhaUpdateResult res;
	TimestampTz not_before = 0;

	key[0] = h->service_id;
	key[1] = h->head_seq;
	if (!gridha_rows_fetch(rows, GRIDHA_KEY_BATCH_SEQ, key))
		return 0;
	do
	{
		GridhaStatus status = gridha_status_of(gridha_rows_get(rows, GRIDHA_BATCHES, BATCH_STATUS, &isnull));
		int32		attempts;
		GridhaColumn batch[3];

		/* waiting: queued, delayed, unknown, or a revoked hand-out */
		if (status == GRIDHA_SUBMITTING)
			(void) gridha_rows_get(rows, GRIDHA_BATCHES, BATCH_INSTANCE_ID, &isnull);
		else
			isnull = true;
		if (!isnull || (status != GRIDHA_QUEUED && status != GRIDHA_DELAYED &&
						status != GRIDHA_UNKNOWN && status != GRIDHA_SUBMITTING))
			return 0;
		attempts = DatumGetInt32(gridha_rows_get(rows, GRIDHA_BATCHES, BATCH_ATTEMPTS, &isnull));
		not_before = gridha_backoff_until(now, attempts);
		batch[0] = (GridhaColumn) {BATCH_STATUS, gridha_status_datum(GRIDHA_DELAYED), false};
		batch[1] = (GridhaColumn) {BATCH_NOT_BEFORE, TimestampTzGetDatum(not_before), false};
		batch[2] = (GridhaColumn) {BATCH_DETAIL, CStringGetTextDatum(reason), false};
		res = gridha_rows_update(rows, GRIDHA_BATCHES, batch, lengthof(batch));
	} while (res == GRIDHA_ROW_CHANGED);
	return res == GRIDHA_ROW_UPDATED ? not_before : 0;
}

/*
 * queue_set_aside: hands back the claims the pick locked but this instance
 * cannot serve. When no instance can serve their target, their heads are
 * delayed first, with the reason, and the target is warned about.
 */
static void
queue_set_aside(QueuePick *pick)
{
	GridhaRows	rows;
	int			i;

	gridha_rows_begin(&rows, true);
	for (i = 0; i < pick->aside.n; i++)
	{
		QueueHead  *h = &pick->aside.heads[i];
		const char *reason = h->target == NULL ? "the service's target row is missing" :
			h->target->unusable;
		TimestampTz not_before = 0;
		GridhaColumn claim[4] = {
			{CLAIM_CLAIMANT, (Datum) 0, true},
			{CLAIM_SOFT_EXPIRY, (Datum) 0, true},
			{CLAIM_HARD_EXPIRY, (Datum) 0, true},
			{CLAIM_READY_AT, (Datum) 0, false}
		};
		int			nclaim = 3;

		if (reason != NULL)
		{
			not_before = queue_delay_head(&rows, h, reason, pick->now);
			if (h->target != NULL)
				gridha_target_warn(h->target->name, reason);
		}
		if (not_before != 0)
		{
			claim[3].value = TimestampTzGetDatum(not_before);
			nclaim = 4;
		}
		/* the pick locked the claim: it is as this snapshot sees it */
		if (!gridha_rows_fetch(&rows, GRIDHA_KEY_CLAIM, &h->service_id) ||
			gridha_rows_update(&rows, GRIDHA_CLAIMS, claim, nclaim) != GRIDHA_ROW_UPDATED)
			elog(ERROR, "gridha: the claim on service \"%s\" changed while it was handed back",
				 TextDatumGetCString(h->service_id));
	}
	gridha_rows_end(&rows);
	/* the held count is written last, with the cycle's (claims.c) */
	gridha_claims_count_later(pick->instance_id, -pick->aside.n);
}

/*
 * gridha_queue_handout: hands out up to max_batches ready heads of this
 * instance's services, the one that has waited longest first, one per
 * service. Only claims within their soft expiry are served, and, when the
 * instance declared the kinds of target it serves, only those of targets
 * it can serve (it hands the others back). A head of a rate-limited
 * target goes out only with a slot. Returns the number handed out.
 */
static int
queue_handout_once(Datum instance_id, int32 max_batches, const GridhaInstance *inst,
				   ReturnSetInfo *rsinfo)
{
	static const AttrNumber attnos[2] = {CLAIM_CLAIMANT, CLAIM_READY_AT};
	static const StrategyNumber strategies[2] = {BTEqualStrategyNumber, BTLessEqualStrategyNumber};
	Datum		values[2];
	QueuePick	pick;
	GridhaRows	rows;
	bool		limited;
	Datum	   *sids;
	Datum	   *seqs;
	Datum	   *epochs;
	Datum	   *batch_ids = NULL;
	int			n = 0;
	int			done;
	int			i;

	/*
	 * The call holds service_claims already (its instance touch took it
	 * first, instances.c): a rename of targets holds it against writers
	 * until it commits, so the targets judged here name the services as
	 * the pick will find them. Judged before that lock, a head of a renamed
	 * limited target was an unknown target's and went out without a slot.
	 */
	gridha_targets_refresh();
	limited = gridha_targets_any_limited();

	memset(&pick, 0, sizeof(pick));
	pick.instance_id = instance_id;
	pick.now = GetCurrentTransactionStartTimestamp();
	pick.lease_live = inst->lease_live;
	pick.max = max_batches;
	pick.serves = inst->serves;
	pick.by_target = limited || inst->serves != GRIDHA_SERVES_ANY;
	pick.closed = limited ? gridha_ratelimit_closed() : NIL;
	values[0] = instance_id;
	values[1] = TimestampTzGetDatum(pick.now);

	gridha_rows_begin(&rows, true);
	gridha_rows_scan(&rows, GRIDHA_CLAIMS, attnos, strategies, values, 2, queue_pick_claim, &pick);
	gridha_rows_end(&rows);

	if (pick.picked.n == 0)
	{
		if (pick.aside.n > 0)
			queue_set_aside(&pick);
		return 0;
	}
	if (limited)
		queue_slots(&pick);

	sids = palloc(sizeof(Datum) * pick.picked.n);
	seqs = palloc(sizeof(Datum) * pick.picked.n);
	epochs = palloc(sizeof(Datum) * pick.picked.n);
	for (i = 0; i < pick.picked.n; i++)
	{
		QueueHead  *h = &pick.picked.heads[i];

		if (!h->go)
			continue;
		sids[n] = h->service_id;
		seqs[n] = h->head_seq;
		epochs[n] = h->epoch;
		n++;
	}
	if (limited)
		batch_ids = palloc(sizeof(Datum) * Max(n, 1));
	done = gridha_queue_write(instance_id, sids, seqs, epochs, n, rsinfo, batch_ids);
	if (pick.aside.n > 0)
		queue_set_aside(&pick);

	/* log the hand-outs that took a slot */
	if (limited && done > 0)
	{
		Datum	   *targets = palloc(sizeof(Datum) * n);
		int			nlog = 0;
		int			k = 0;

		for (i = 0; i < pick.picked.n; i++)
		{
			QueueHead  *h = &pick.picked.heads[i];

			if (!h->go)
				continue;
			if (batch_ids[k] != (Datum) 0 && h->target != NULL && h->target->rate_limited)
			{
				targets[nlog] = CStringGetTextDatum(h->target->name);
				sids[nlog] = h->service_id;
				batch_ids[nlog] = batch_ids[k];
				epochs[nlog] = h->epoch;
				nlog++;
			}
			k++;
		}
		gridha_ratelimit_log(instance_id, targets, sids, batch_ids, epochs, nlog);
	}
	return done;
}

/*
 * gridha_queue_handout: queue_handout_once, and once more when it handed
 * out fewer than asked because a repaired head's queue turned out empty
 * (queue_repair_head): a service whose head had no batch row never costs
 * the instance's other services a hand-out.
 */
int
gridha_queue_handout(Datum instance_id, int32 max_batches, const GridhaInstance *inst,
					 ReturnSetInfo *rsinfo)
{
	int			done;

	queue_heads_emptied = 0;
	done = queue_handout_once(instance_id, max_batches, inst, rsinfo);
	if (done < max_batches && queue_heads_emptied > 0)
	{
		queue_heads_emptied = 0;
		done += queue_handout_once(instance_id, max_batches - done, inst, rsinfo);
	}
	return done;
}

/*
 * queue_next: the queuer cycle shared by next_batch and next_batches.
 *
 * Acquires and renews when the renew interval has passed; the instance
 * rows (renewal, counts) are written last, when the
 * call ends (gridha_claims_finish: the lock order, see claims.c); otherwise claim work is done only when there is nothing
 * to hand out (then acquire only, and cheaply when there is nothing to
 * take), or when the instance holds less than its share (a newcomer,
 * every CLAIMS_BELOW_SHARE_EVERY_MS at most).
 */
static void
queue_next(FunctionCallInfo fcinfo, Datum instance_id, int32 max_batches)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	GridhaInstance inst;
	bool		acquired = false;

	gridha_require_writable(max_batches == 1 ? "next_batch()" : "next_batches()");

	/*
	 * The row type the caller expects (the function's declared result, as
	 * its scan built it): looking the function's result type up again in
	 * pg_proc cost each hand-out about 8,000 instructions.
	 */
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (max_batches == 0)
		return;

	SPI_connect();
	inst = gridha_instance_touch(instance_id);
	gridha_claims_begin(instance_id);
	if (inst.cycle_due || !inst.lease_live)
	{
		if (!acquired)
			(void) gridha_claims_acquire(instance_id, &inst, false, NULL);
		(void) gridha_claims_renew(instance_id, &inst);
		inst.lease_live = true;
		acquired = true;
	}
	if (gridha_queue_handout(instance_id, max_batches, &inst, rsinfo) == 0 && !acquired)
	{
		if (gridha_claims_acquire(instance_id, &inst, true, NULL) > 0)
		{
			inst.lease_live = true;
			(void) gridha_queue_handout(instance_id, max_batches, &inst, rsinfo);
		}
	}
	else if (!acquired && gridha_claims_below_share(instance_id, &inst))
		(void) gridha_claims_acquire(instance_id, &inst, false, NULL);
	/* the instance rows last (the lock order, claims.c) */
	(void) gridha_claims_finish();
	/* retention and sweeps, at most once per gridha.prune_interval (leader.c) */
	gridha_leader_poll(instance_id);
	SPI_finish();
}

/*
 * gridha_next_batch_body: SQL gridha.next_batch(instance_id), 0 or 1 row.
 */
static Datum
gridha_next_batch_body(PG_FUNCTION_ARGS)
{
	GRIDHA_CITUS_HANDOVER(fcinfo);
	queue_next(fcinfo, gridha_arg_uuid(fcinfo, 0, "instance_id"), 1);
	return (Datum) 0;
}

/*
 * gridha_next_batches_body: SQL gridha.next_batches(instance_id, max_batches).
 */
static Datum
gridha_next_batches_body(PG_FUNCTION_ARGS)
{
	Datum		instance_id;
	int32		max_batches;

	GRIDHA_CITUS_HANDOVER(fcinfo);
	instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	max_batches = gridha_arg_count(fcinfo, 1, "max_batches");
	queue_next(fcinfo, instance_id, max_batches);
	return (Datum) 0;
}

/*
 * The two hand-outs' C entry points: their SQL functions have no SET
 * clause: gridha_pinned_call sets the path when needed (path.c).
 */
GRIDHA_PINNED_ENTRY_POINT(gridha_next_batch)
GRIDHA_PINNED_ENTRY_POINT(gridha_next_batches)

PG_FUNCTION_INFO_V1(gridha_enqueue);

/*
 * gridha_enqueue: SQL gridha.enqueue(service_id, batch_id, payload, target)
 * -> seq. In the Citus mode, after the checks of its arguments, the call is
 * handed over to gridha_internal.citus_enqueue (docs/citus.md).
 *
 * A given target must exist; a new service is created on it, and an
 * existing service must be on it already (RG013 otherwise: moving a
 * service is an administrator's, gridha.move_service). The batch goes to
 * the tail of the service's queue (see the batches_enqueue trigger).
 */
Datum
gridha_enqueue(PG_FUNCTION_ARGS)
{
	text	   *service_id = gridha_arg_new_id(fcinfo, 0, "service_id");
	text	   *batch_id = gridha_arg_new_id(fcinfo, 1, "batch_id");
	text	   *target = PG_ARGISNULL(3) ? NULL : gridha_arg_id(fcinfo, 3, "target");
	Datum		args[3];
	char		nulls[4] = "   ";
	int64		seq;

	/*
	 * The Citus mode: the ids were checked as here (same SQLSTATEs), then
	 * gridha_internal.citus_enqueue routes the batch to its bucket
	 */
	GRIDHA_CITUS_HANDOVER(fcinfo);
	gridha_require_writable("enqueue()");
	gridha_require_safe_schema();
	SPI_connect();

	if (target != NULL)
	{
		int			tries;

		/*
		 * service_claims before the target's row (FOR KEY SHARE below): a
		 * rename of the target takes the table first, then the row, and
		 * would wait for this call's key share while this call waited for
		 * the table to create the service.
		 */
		gridha_rows_hold_for_write(GRIDHA_CLAIMS);

		/* twice at most: a concurrent enqueue may create the service */
		for (tries = 0; tries < 2; tries++)
		{
			args[0] = PointerGetDatum(service_id);
			gridha_exec(&queue_target_of_stmt, args, NULL, false);
			if (SPI_processed > 0)
			{
				char	   *current = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);

				if (current == NULL || strcmp(current, text_to_cstring(target)) != 0)
					ereport(ERROR,
							(errcode(ERRCODE_GRIDHA_TARGET_MISMATCH),
							 errmsg("service \"%s\" is on target \"%s\", not \"%s\"",
									text_to_cstring(service_id), current ? current : "",
									text_to_cstring(target)),
							 errdetail("A service's target is set when the service is created."),
							 errhint("Enqueue without a target, or ask an administrator to move the service: gridha.move_service().")));
				break;
			}
			args[0] = PointerGetDatum(target);
			gridha_exec(&queue_target_exists_stmt, args, NULL, false);
			if (SPI_processed == 0)
				ereport(ERROR,
						(errcode(ERRCODE_GRIDHA_UNKNOWN_TARGET),
						 errmsg("unknown target \"%s\"", text_to_cstring(target)),
						 errhint("Add it first: INSERT INTO gridha.targets (target, ...) VALUES (...).")));
			args[0] = PointerGetDatum(service_id);
			args[1] = PointerGetDatum(target);
			gridha_exec(&queue_set_target_stmt, args, NULL, false);
			if (SPI_processed > 0)
				break;
		}
	}

	args[0] = PointerGetDatum(service_id);
	args[1] = PointerGetDatum(batch_id);
	gridha_exec(&queue_batch_exists_stmt, args, NULL, false);
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("batch \"%s\" of service \"%s\" already exists",
						text_to_cstring(batch_id), text_to_cstring(service_id)),
				 errdetail("A batch id is unique within its service.")));

	if (PG_ARGISNULL(2))
		nulls[2] = 'n';
	else
		args[2] = PG_GETARG_DATUM(2);
	gridha_exec(&queue_insert_stmt, args, nulls, false);
	seq = gridha_col_int64(0, 1);

	SPI_finish();
	PG_RETURN_INT64(seq);
}
