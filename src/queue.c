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
#include "spi_util.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

/*
 * The hand-out is two statements: the pick locks up to "limit" ready claims
 * of the instance (FOR UPDATE SKIP LOCKED) and returns them; the
 * writes (GRIDHA_HANDOUT_WRITES) then mark their heads submitting and the
 * claims in flight. Apart, the pick's index scan ends before anything is
 * written: a scan marks the dead entries it stepped over (each hand-out and
 * report leaves one behind in the (claimant, ready_at) index) only if their
 * leaf page is unchanged when it ends, and in one statement the claim's own
 * new index entry changed it first. Unmarked, every hand-out stepped over
 * all of them again until the next vacuum.
 *
 * Two pick statements share the text: next_batch's with LIMIT 1, whose
 * generic plan looks each head up by its key, and next_batches' with
 * LIMIT $2, planned for each call's count (a generic plan would guess a
 * tenth of the instance's services).
 *
 * "(SELECT now())" is computed once per run, after planning, so the planner
 * estimates the soft-expiry test without the statistics: every held claim's
 * soft_expiry lies a few seconds ahead, so statistics even a minute old say
 * it matches nothing, and a plan believing that would rather sort all of the
 * instance's claims than walk the (claimant, ready_at) index to the first.
 */
#define QUEUE_PICK_SQL(limit) \
	"SELECT c.service_id, c.head_seq, c.epoch" \
	"  FROM gridha.service_claims c" \
	" WHERE c.claimant = $1 AND c.ready_at <= now() AND c.soft_expiry > (SELECT now())" \
	" ORDER BY c.ready_at" \
	" LIMIT " limit \
	" FOR UPDATE SKIP LOCKED"

static GridhaStatement queue_pick_one_stmt = {
	QUEUE_PICK_SQL("1"), 2, {UUIDOID, INT8OID}
};

static GridhaStatement queue_pick_many_stmt = {
	QUEUE_PICK_SQL("$2"), 2, {UUIDOID, INT8OID}, true
};

/*
 * The writes: $2, $3, $4 the picked claims' service_id, head_seq, epoch;
 * one claim's as scalars (next_batch: no array to build, no unnest to
 * start), several claims' as arrays. "source" yields them as rows.
 */
#define QUEUE_HANDOUT_SQL(source) \
	"WITH s AS (" source "), " GRIDHA_HANDOUT_WRITES("", "") \
	" SELECT service_id, batch_id, payload, epoch, attempts FROM b"

static GridhaStatement queue_handout_one_stmt = {
	QUEUE_HANDOUT_SQL("SELECT $2::text AS service_id, $3::int8 AS head_seq, $4::int8 AS epoch"),
	4, {UUIDOID, TEXTOID, INT8OID, INT8OID}
};

static GridhaStatement queue_handout_many_stmt = {
	QUEUE_HANDOUT_SQL("SELECT * FROM unnest($2::text[], $3::int8[], $4::int8[])"
					  " AS s(service_id, head_seq, epoch)"),
	4, {UUIDOID, TEXTARRAYOID, INT8ARRAYOID, INT8ARRAYOID}
};

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
 * returned them. Each head becomes submitting under its claim's epoch, its
 * attempts grow by one, and its row goes to rsinfo's tuplestore. Returns
 * the number handed out. Inside SPI.
 */
int
gridha_queue_write(Datum instance_id, Datum *service_ids, Datum *head_seqs,
				   Datum *epochs, int n, ReturnSetInfo *rsinfo)
{
	Datum		args[4];

	if (n == 0)
		return 0;
	args[0] = instance_id;
	if (n == 1)
	{
		args[1] = service_ids[0];
		args[2] = head_seqs[0];
		args[3] = epochs[0];
		gridha_exec(&queue_handout_one_stmt, args, NULL, false);
	}
	else
	{
		args[1] = gridha_text_array(service_ids, n);
		args[2] = gridha_int8_array(head_seqs, n);
		args[3] = gridha_int8_array(epochs, n);
		gridha_exec(&queue_handout_many_stmt, args, NULL, false);
	}
	gridha_put_rows(rsinfo, 5);
	return (int) SPI_processed;
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
	Datum		args[2];
	Datum	   *cols[3];
	int			n;
	int			i;
	int			j;
	bool		isnull;

	if (gridha_ratelimit_active())
		return gridha_ratelimit_handout(instance_id, max_batches, rsinfo);

	args[0] = instance_id;
	args[1] = Int64GetDatum(max_batches);
	gridha_exec(max_batches == 1 ? &queue_pick_one_stmt : &queue_pick_many_stmt,
				args, NULL, false);
	n = (int) SPI_processed;
	if (n == 0)
		return 0;
	for (j = 0; j < 3; j++)
	{
		cols[j] = palloc(n * sizeof(Datum));
		for (i = 0; i < n; i++)
			cols[j][i] = gridha_col(i, j + 1, &isnull);
	}
	return gridha_queue_write(instance_id, cols[0], cols[1], cols[2], n, rsinfo);
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
