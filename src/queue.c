/*-------------------------------------------------------------------------
 *
 * queue.c
 *		Enqueue and the ordered hand-out: gridha.enqueue, next_batch,
 *		next_batches, claimed_batches, verify_batch.
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
#include "gridha.h"
#include "instances.h"
#include "queue.h"
#include "ratelimit.h"
#include "rows.h"
#include "spi_util.h"

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
 */
typedef struct QueuePick
{
	Datum		instance_id;
	TimestampTz now;
	int			max;			/* how many to pick at most */
	int			n;				/* picked so far */
	int			size;			/* room in the arrays */
	Datum	   *service_ids;
	Datum	   *head_seqs;
	Datum	   *epochs;
} QueuePick;

static GridhaStatement queue_target_exists_stmt = {
	"SELECT 1 FROM gridha.targets WHERE target = $1",
	1, {TEXTOID}
};

static GridhaStatement queue_set_target_stmt = {
	"INSERT INTO gridha.service_claims AS c (service_id, target) VALUES ($1, $2)"
	" ON CONFLICT (service_id) DO UPDATE SET target = EXCLUDED.target"
	" WHERE c.target IS DISTINCT FROM EXCLUDED.target",
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

/*
 * The claims are picked first and each one's head is then looked up by its
 * key (LATERAL ... LIMIT 1 keeps that a per-claim lookup whatever the
 * statistics say): the cost follows the instance's claims, never the number
 * of batches.
 */
static GridhaStatement queue_claimed_stmt = {
	"SELECT c.service_id, h.batch_id, h.seq, h.status, c.epoch"
	"  FROM (SELECT c.service_id, c.head_seq, c.epoch, c.ready_at"
	"          FROM gridha.service_claims c"
	"         WHERE c.claimant = $1 AND c.head_seq IS NOT NULL"
	"         ORDER BY c.ready_at, c.service_id"
	"         LIMIT $2) c"
	" CROSS JOIN LATERAL ("
	"  SELECT b.batch_id, b.seq, b.status FROM gridha.batches b"
	"   WHERE b.service_id = c.service_id AND b.seq = c.head_seq"
	"   LIMIT 1) h"
	" ORDER BY c.ready_at, c.service_id",
	2, {UUIDOID, INT8OID}
};

static GridhaStatement queue_verify_stmt = {
	"SELECT c.claimant = $3 AND c.epoch = $4 AND c.hard_expiry > now()"
	"       AND b.seq = c.head_seq AND b.status = 'submitting' AND b.epoch = $4"
	"  FROM gridha.service_claims c"
	"  JOIN gridha.batches b ON b.service_id = c.service_id AND b.batch_id = $2"
	" WHERE c.service_id = $1",
	4, {TEXTOID, TEXTOID, UUIDOID, INT8OID}
};

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
 */
int
gridha_queue_write(Datum instance_id, Datum *service_ids, Datum *head_seqs,
				   Datum *epochs, int n, ReturnSetInfo *rsinfo, Datum *batch_ids)
{
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	GridhaRows	rows;
	int			done = 0;
	int			i;

	if (n == 0)
		return 0;
	gridha_rows_begin(&rows, true);
	for (i = 0; i < n; i++)
	{
		Datum		key[2];
		bool		isnull;
		GridhaStatus status;
		GridhaUpdateResult res = GRIDHA_ROW_DELETED;
		int32		attempts = 0;
		Datum		out[5];
		bool		outnull[5] = {false, false, false, false, false};
		GridhaColumn batch[6];
		GridhaColumn claim[2] = {
			{CLAIM_READY_AT, (Datum) 0, true},
			{CLAIM_IN_FLIGHT, BoolGetDatum(true), false}
		};

		if (batch_ids != NULL)
			batch_ids[i] = (Datum) 0;
		key[0] = service_ids[i];
		key[1] = head_seqs[i];
		if (!gridha_rows_fetch(&rows, GRIDHA_KEY_BATCH_SEQ, key))
			continue;
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

		out[0] = service_ids[i];
		out[1] = gridha_rows_get(&rows, GRIDHA_BATCHES, BATCH_BATCH_ID, &isnull);
		out[2] = gridha_rows_get(&rows, GRIDHA_BATCHES, BATCH_PAYLOAD, &outnull[2]);
		out[3] = epochs[i];
		out[4] = Int32GetDatum(attempts);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnull);
		if (batch_ids != NULL)
			batch_ids[i] = datumCopy(out[1], false, -1);

		/* the pick locked the claim: it is as this snapshot sees it */
		if (!gridha_rows_fetch(&rows, GRIDHA_KEY_CLAIM, &service_ids[i]) ||
			gridha_rows_update(&rows, GRIDHA_CLAIMS, claim, lengthof(claim)) != GRIDHA_ROW_UPDATED)
			elog(ERROR, "gridha: the claim on service \"%s\" changed during its hand-out",
				 TextDatumGetCString(service_ids[i]));
		done++;
	}
	gridha_rows_end(&rows);
	return done;
}

/*
 * queue_servable: whether the current claim row is this instance's, ready
 * (its head may go now) and within its soft expiry.
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
	if (isnull || DatumGetTimestampTz(d) <= pick->now)
		return false;
	(void) gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_HEAD_SEQ, &isnull);
	return !isnull;
}

/*
 * queue_pick_claim: the pick's step for one claim the index scan found:
 * lock it unless another transaction holds it, judge its newest version,
 * keep it. False once enough are kept.
 */
static bool
queue_pick_claim(GridhaRows *rows, void *arg)
{
	QueuePick  *pick = (QueuePick *) arg;
	bool		isnull;

	if (!queue_servable(rows, pick) ||
		gridha_rows_lock(rows, GRIDHA_CLAIMS, true, true) != GRIDHA_ROW_LOCKED ||
		!queue_servable(rows, pick))
		return true;
	if (pick->n == pick->size)
	{
		pick->size *= 2;
		pick->service_ids = repalloc(pick->service_ids, pick->size * sizeof(Datum));
		pick->head_seqs = repalloc(pick->head_seqs, pick->size * sizeof(Datum));
		pick->epochs = repalloc(pick->epochs, pick->size * sizeof(Datum));
	}
	pick->service_ids[pick->n] =
		datumCopy(gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_SERVICE_ID, &isnull), false, -1);
	pick->head_seqs[pick->n] = gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_HEAD_SEQ, &isnull);
	pick->epochs[pick->n] = gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_EPOCH, &isnull);
	pick->n++;
	return pick->n < pick->max;
}

/*
 * gridha_queue_handout: hands out up to max_batches ready heads of this
 * instance's services, the one that has waited longest first, one per
 * service. Only claims within their soft expiry are served. Returns the
 * number handed out.
 *
 * While some target is rate-limited, ratelimit.c hands out instead: it
 * skips the heads of targets with no slot now and takes a slot for each
 * head of a limited target. Otherwise the pick and gridha_queue_write are
 * all there is.
 */
int
gridha_queue_handout(Datum instance_id, int32 max_batches, ReturnSetInfo *rsinfo)
{
	static const AttrNumber attnos[2] = {CLAIM_CLAIMANT, CLAIM_READY_AT};
	static const StrategyNumber strategies[2] = {BTEqualStrategyNumber, BTLessEqualStrategyNumber};
	Datum		values[2];
	QueuePick	pick;
	GridhaRows	rows;

	if (gridha_ratelimit_active())
		return gridha_ratelimit_handout(instance_id, max_batches, rsinfo);

	pick.instance_id = instance_id;
	pick.now = GetCurrentTransactionStartTimestamp();
	pick.max = max_batches;
	pick.n = 0;
	pick.size = Max(Min(max_batches, 8), 1);
	pick.service_ids = palloc(pick.size * sizeof(Datum));
	pick.head_seqs = palloc(pick.size * sizeof(Datum));
	pick.epochs = palloc(pick.size * sizeof(Datum));
	values[0] = instance_id;
	values[1] = TimestampTzGetDatum(pick.now);

	gridha_rows_begin(&rows, true);
	gridha_rows_scan(&rows, GRIDHA_CLAIMS, attnos, strategies, values, 2, queue_pick_claim, &pick);
	gridha_rows_end(&rows);

	return gridha_queue_write(instance_id, pick.service_ids, pick.head_seqs, pick.epochs,
							  pick.n, rsinfo, NULL);
}

/*
 * queue_next: the queuer cycle shared by next_batch and next_batches.
 *
 * Renews and acquires when the renew interval has passed; otherwise claim
 * work is done only when there is nothing to hand out (then acquire only).
 */
static void
queue_next(FunctionCallInfo fcinfo, Datum instance_id, int32 max_batches)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	GridhaInstance inst;

	InitMaterializedSRF(fcinfo, 0);
	if (max_batches == 0)
		return;

	SPI_connect();
	inst = gridha_instance_touch(instance_id);
	if (inst.cycle_due)
	{
		(void) gridha_claims_renew(instance_id);
		(void) gridha_claims_acquire(instance_id, inst.is_worker, NULL);
	}
	if (gridha_queue_handout(instance_id, max_batches, rsinfo) == 0 && !inst.cycle_due)
	{
		if (gridha_claims_acquire(instance_id, inst.is_worker, NULL) > 0)
			(void) gridha_queue_handout(instance_id, max_batches, rsinfo);
	}
	SPI_finish();
}

PG_FUNCTION_INFO_V1(gridha_next_batch);

/*
 * gridha_next_batch: SQL gridha.next_batch(instance_id), 0 or 1 row.
 */
Datum
gridha_next_batch(PG_FUNCTION_ARGS)
{
	queue_next(fcinfo, gridha_arg_uuid(fcinfo, 0, "instance_id"), 1);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(gridha_next_batches);

/*
 * gridha_next_batches: SQL gridha.next_batches(instance_id, max_batches).
 */
Datum
gridha_next_batches(PG_FUNCTION_ARGS)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	int32		max_batches = gridha_arg_count(fcinfo, 1, "max_batches");

	queue_next(fcinfo, instance_id, max_batches);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(gridha_enqueue);

/*
 * gridha_enqueue: SQL gridha.enqueue(service_id, batch_id, payload, target)
 * -> seq.
 *
 * A given target must exist and becomes the service's target; the batch
 * goes to the tail of the service's queue (see the batches_enqueue trigger).
 */
Datum
gridha_enqueue(PG_FUNCTION_ARGS)
{
	text	   *service_id = gridha_arg_id(fcinfo, 0, "service_id");
	text	   *batch_id = gridha_arg_id(fcinfo, 1, "batch_id");
	Datum		args[3];
	char		nulls[4] = "   ";
	int64		seq;

	SPI_connect();

	if (!PG_ARGISNULL(3))
	{
		text	   *target = gridha_arg_id(fcinfo, 3, "target");

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

PG_FUNCTION_INFO_V1(gridha_claimed_batches);

/*
 * gridha_claimed_batches: SQL gridha.claimed_batches(instance_id,
 * max_batches): the head of every service this instance holds, ready ones
 * first (longest waiting first). Read-only.
 */
Datum
gridha_claimed_batches(PG_FUNCTION_ARGS)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	int32		max_batches = gridha_arg_count(fcinfo, 1, "max_batches");
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		args[2];

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	args[0] = instance_id;
	args[1] = Int64GetDatum(max_batches);
	gridha_exec(&queue_claimed_stmt, args, NULL, true);
	gridha_put_rows(rsinfo, 5);
	SPI_finish();
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(gridha_verify_batch);

/*
 * gridha_verify_batch: SQL gridha.verify_batch(instance_id, service_id,
 * batch_id, epoch) -> boolean.
 *
 * True only while this instance holds the claim at this epoch, the claim
 * has not hard-expired, and the batch is the head, submitting under this
 * epoch. An unknown batch is simply not this instance's: false.
 */
Datum
gridha_verify_batch(PG_FUNCTION_ARGS)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	text	   *service_id = gridha_arg_id(fcinfo, 1, "service_id");
	text	   *batch_id = gridha_arg_id(fcinfo, 2, "batch_id");
	int64		epoch = gridha_arg_epoch(fcinfo, 3);
	Datum		args[4];
	bool		ok = false;

	SPI_connect();
	args[0] = PointerGetDatum(service_id);
	args[1] = PointerGetDatum(batch_id);
	args[2] = instance_id;
	args[3] = Int64GetDatum(epoch);
	gridha_exec(&queue_verify_stmt, args, NULL, true);
	if (SPI_processed > 0)
	{
		bool		isnull;
		Datum		d = gridha_col(0, 1, &isnull);

		ok = !isnull && DatumGetBool(d);
	}
	SPI_finish();
	PG_RETURN_BOOL(ok);
}
