/*-------------------------------------------------------------------------
 *
 * status.c
 *		What happens to a batch after its hand-out: gridha.report_submission
 *		(the submitter's word) and gridha.report_status (the ledger's word,
 *		via the DLT monitor). (gridha.pending_batches, what the monitor
 *		polls, is SQL of the install script since 1.3; src/sql12.c serves
 *		its 1.2 form.)
 *
 * Words:
 *   in flight   submitting (under the current epoch), pending or valid
 *   final       committed or invalid: never changes again, and moves the
 *               service's head to its next batch
 *   fencing     a write changes anything only if this instance holds the
 *               service at this epoch; a stale one raises RG001 and changes
 *               nothing
 *
 * An accepted submission (submitting -> pending) touches the batch row
 * only: its hand-out's instance and epoch are the fence. Every takeover
 * revokes the hand-out of a head still submitting (instance_id := NULL)
 * under that batch's row lock, in the statement that bumps the epoch (see
 * claims.c), so the report and the takeover are ordered by that lock: the
 * report first, and the takeover sees the batch pending and leaves it in
 * flight; the takeover first, and the report matches nothing. The claim
 * has nothing to learn from an acceptance: it was in flight and stays so.
 *
 * Every other report is one command (rows.c): write the claim (claimant,
 * epoch and head judged on the version written), then the batch (its
 * status and hand-out epoch judged likewise). A version changed since the
 * snapshot is judged again in its newest, locked version, as an UPDATE
 * does. Every writer of a batch row but the acceptance writes its
 * service's claim row first, so once the claim is written the head can
 * only go from submitting to pending meanwhile; a batch found moved
 * otherwise after the claim was written raises, which undoes both. The
 * next head is seq + 1: seqs are given out gap-free under the claim lock
 * (batches_before_insert) and an unfinished batch cannot be deleted, so
 * the claim's tail_seq in the version written says whether it exists even
 * when it was enqueued after the report's snapshot.
 *
 * When a report changes nothing, a read with a fresh snapshot says why
 * (RG003, RG001, RG002). If that read finds the report valid after all,
 * the batch or claim moved after the report's snapshot; the report runs
 * once more, with a fresh snapshot.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "common.h"
#include "path.h"
#include "tables.h"
#include "generation.h"
#include "instances.h"
#include "rows.h"
#include "spi_util.h"
#include "status.h"
#include "totals.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_enum.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

/* Statuses a report may move a batch from */
typedef enum ReportFrom
{
	FROM_SUBMITTING,			/* submitting under this epoch */
	FROM_IN_FLIGHT				/* that, or pending, or valid */
} ReportFrom;

/*
 * Why a report changed nothing: the claim and the batch as they are now.
 * On SQL 1.3 a function of the install script (issue 42.1); the statement
 * below it serves a 1.2 schema only.
 */
static GridhaStatement status_diagnose_call = {
	"SELECT * FROM gridha_internal.report_diagnose($1, $2)",
	2, {TEXTOID, TEXTOID}
};

static GridhaStatement status_diagnose_stmt = {
	"SELECT c.claimant, c.epoch, c.head_seq, b.seq, b.status::text, b.epoch, c.target,"
	"       b.submitted_at IS NOT NULL, b.attempts"
	"  FROM gridha.service_claims c"
	"  LEFT JOIN gridha.batches b"
	"         ON b.service_id = c.service_id AND b.batch_id = $2"
	" WHERE c.service_id = $1",
	2, {TEXTOID, TEXTOID}
};

/*
 * status_diagnose: explains why a report changed nothing, by raising RG003
 * (unknown service), RG023 (a batch never handed out: no attempt of it
 * started, so no instance can hold a claim on it to report, and the write
 * is no stale one; 1.3), RG001 (stale claim: the instance does not hold the
 * service at this epoch, whatever the batch), RG003 (unknown batch) or
 * RG002 (batch not in the state the report needs), in that order. Returns
 * only when the report is valid now.
 *
 * A batch id the service never had is RG001 for an instance that does not
 * hold the service at this epoch, as before 1.3: it cannot be told apart
 * from a final batch that retention deleted since a stale hand-out.
 */
static void
status_diagnose(Datum instance_id, text *service_id, text *batch_id,
				int64 epoch, ReportFrom from)
{
	bool		accepted_before;
	Datum		args[2];
	bool		isnull;
	bool		claimant_null;
	Datum		claimant;
	int64		claim_epoch;
	int64		seq;
	bool		is_head;
	bool		epoch_matches;
	char	   *status;
	Datum		d;

	args[0] = PointerGetDatum(service_id);
	args[1] = PointerGetDatum(batch_id);
	gridha_exec(gridha_sql_is_current() ? &status_diagnose_call : &status_diagnose_stmt,
				args, NULL, false);

	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_UNKNOWN_BATCH),
				 errmsg("unknown service \"%s\"", text_to_cstring(service_id)),
				 errdetail("No batch was ever enqueued for this service.")));

	claimant = gridha_col(0, 1, &claimant_null);
	claim_epoch = gridha_col_int64(0, 2);

	/* never handed out: not stale, and not counted as such (1.3) */
	d = gridha_col(0, 9, &isnull);
	if (!isnull && DatumGetInt32(d) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_NEVER_HANDED_OUT),
				 errmsg("batch \"%s\" of service \"%s\" was never handed out",
						text_to_cstring(batch_id), text_to_cstring(service_id)),
				 errdetail("No attempt of it has started: its status is %s, and no instance was given it to submit.",
						   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5)),
				 errhint("Report only a batch that next_batch or next_batches handed out, with the epoch it came with.")));

	/*
	 * The fence before the batch: a report of an instance that no longer
	 * holds the service at this epoch is stale whether or not its batch is
	 * still there (retention may have pruned it, once final under the
	 * claim's next holder), and is counted as such.
	 */
	if (claimant_null || !gridha_uuid_equal(claimant, instance_id) || claim_epoch != epoch)
	{
		/* counted across the abort this raises (totals.c) */
		gridha_totals_note(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 7),
						   GRIDHA_TOTAL_STALE_REFUSED);
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_STALE_CLAIM),
				 errmsg("stale claim on service \"%s\"", text_to_cstring(service_id)),
				 claimant_null ?
				 errdetail("The claim is free at epoch " INT64_FORMAT "; the write carried epoch " INT64_FORMAT " of instance %s.",
						   claim_epoch, epoch,
						   DatumGetCString(DirectFunctionCall1(uuid_out, instance_id))) :
				 errdetail("Instance %s holds the claim at epoch " INT64_FORMAT "; the write carried epoch " INT64_FORMAT " of instance %s.",
						   DatumGetCString(DirectFunctionCall1(uuid_out, claimant)),
						   claim_epoch, epoch,
						   DatumGetCString(DirectFunctionCall1(uuid_out, instance_id))),
				 errhint("Drop this batch: the claim has moved on and its current holder hands the batch out again.")));
	}

	d = gridha_col(0, 4, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_UNKNOWN_BATCH),
				 errmsg("unknown batch \"%s\" of service \"%s\"",
						text_to_cstring(batch_id), text_to_cstring(service_id))));
	seq = DatumGetInt64(d);

	d = gridha_col(0, 3, &isnull);
	is_head = !isnull && DatumGetInt64(d) == seq;
	status = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5);
	d = gridha_col(0, 6, &isnull);
	epoch_matches = !isnull && DatumGetInt64(d) == epoch;

	d = gridha_col(0, 8, &isnull);
	accepted_before = !isnull && DatumGetBool(d);

	if (is_head &&
		((strcmp(status, "submitting") == 0 && epoch_matches &&
		  (from == FROM_SUBMITTING || !accepted_before)) ||
		 (from == FROM_IN_FLIGHT &&
		  (strcmp(status, "pending") == 0 || strcmp(status, "valid") == 0))))
		return;

	if (is_head && from == FROM_IN_FLIGHT && strcmp(status, "submitting") == 0 && epoch_matches)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_NOT_IN_FLIGHT),
				 errmsg("batch \"%s\" of service \"%s\" was handed out again since the ledger accepted it",
						text_to_cstring(batch_id), text_to_cstring(service_id)),
				 errdetail("Its status is submitting, and an earlier attempt was accepted: a ledger status now may be about that attempt, and never changes a later one."),
				 errhint("Report this attempt's submission first (report_submission); drop a status answer about an earlier attempt.")));

	ereport(ERROR,
			(errcode(ERRCODE_GRIDHA_NOT_IN_FLIGHT),
			 errmsg("batch \"%s\" of service \"%s\" is not %s",
					text_to_cstring(batch_id), text_to_cstring(service_id),
					from == FROM_SUBMITTING ? "submitting under this epoch" : "in flight"),
			 errdetail("Its status is %s%s.", status,
					   strcmp(status, "submitting") == 0 && !epoch_matches ?
					   ", handed out under another epoch" : "")));
}

/*
 * status_judge_batch: whether the current batch row is in a status the
 * report may move it from; sets its seq and attempts.
 */
static bool
status_judge_batch(GridhaRows *rows, int64 epoch, ReportFrom from, int64 *seq, int32 *attempts)
{
	bool		isnull;
	GridhaStatus status = gridha_status_of(gridha_rows_get(rows, GRIDHA_BATCHES, BATCH_STATUS, &isnull));
	Datum		d = gridha_rows_get(rows, GRIDHA_BATCHES, BATCH_EPOCH, &isnull);

	if (!((status == GRIDHA_SUBMITTING && !isnull && DatumGetInt64(d) == epoch) ||
		  (from == FROM_IN_FLIGHT && (status == GRIDHA_PENDING || status == GRIDHA_VALID))))
		return false;

	/*
	 * A ledger status moves a batch still submitting only when no earlier
	 * attempt of it was accepted (submitted_at is set by an acceptance and
	 * kept by a new hand-out): otherwise the answer may be about that
	 * attempt, applied after the batch was handed out again under the same
	 * epoch, and must not move the attempt now in flight (1.3).
	 */
	if (from == FROM_IN_FLIGHT && status == GRIDHA_SUBMITTING)
	{
		(void) gridha_rows_get(rows, GRIDHA_BATCHES, BATCH_SUBMITTED_AT, &isnull);
		if (!isnull)
			return false;
	}
	*seq = DatumGetInt64(gridha_rows_get(rows, GRIDHA_BATCHES, BATCH_SEQ, &isnull));
	*attempts = DatumGetInt32(gridha_rows_get(rows, GRIDHA_BATCHES, BATCH_ATTEMPTS, &isnull));
	return true;
}

/*
 * What a report that empties its service's queue settles into
 * gridha.target_totals (see src/totals.c): the service's counters since it
 * last ran dry, in GridhaTotal's order from GRIDHA_TOTAL_SETTLED_ENQUEUED
 */
typedef struct StatusSettle
{
	bool		due;			/* the report empties the queue */
	char	   *target;
	int64		delta[GRIDHA_TOTALS_NSETTLED];
} StatusSettle;

/*
 * status_judge_settle: when the report empties the queue, the service's
 * counters as it leaves them (this report's own final status counted)
 * marked settled on its row, and what they grew by since it last ran dry
 * (gridha_totals_settle_claim). Appends to claim.
 */
static void
status_judge_settle(GridhaRows *rows, GridhaStatus new_status, GridhaColumn *claim,
					int *nclaim, StatusSettle *settle)
{
	bool		isnull;

	gridha_totals_settle_claim(rows, new_status == GRIDHA_COMMITTED ? 1 : 0,
							   new_status == GRIDHA_INVALID ? 1 : 0, claim, nclaim, settle->delta);
	settle->target = TextDatumGetCString(gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_TARGET, &isnull));
	settle->due = true;
}

/*
 * status_judge_claim: whether the current claim row is this instance's at
 * this epoch with the batch (seq) as its head; fills claim (3 columns, 4
 * for a final status: its running total, SQL 1.2 on, and 4 more when the
 * report empties the queue, see status_judge_settle; *nclaim says) with
 * what the report makes of it: in flight, ready again (now, or after the
 * backoff), or moved on to the next batch.
 */
static bool
status_judge_claim(GridhaRows *rows, Datum instance_id, int64 epoch, int64 seq,
				   int32 attempts, GridhaStatus new_status, GridhaColumn *claim, int *nclaim,
				   StatusSettle *settle)
{
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	bool		final = GRIDHA_STATUS_IS_FINAL(new_status);
	bool		isnull;
	bool		more;
	Datum		d;

	d = gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_CLAIMANT, &isnull);
	if (isnull || !gridha_uuid_equal(d, instance_id) ||
		DatumGetInt64(gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_EPOCH, &isnull)) != epoch)
		return false;
	d = gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_HEAD_SEQ, &isnull);
	if (isnull || DatumGetInt64(d) != seq)
		return false;
	/* the next batch is seq + 1 if it exists (see the file header) */
	more = DatumGetInt64(gridha_rows_get(rows, GRIDHA_CLAIMS, CLAIM_TAIL_SEQ, &isnull)) > seq;

	claim[0] = (GridhaColumn) {CLAIM_IN_FLIGHT,
		BoolGetDatum(new_status == GRIDHA_PENDING || new_status == GRIDHA_VALID), false};
	claim[1] = (GridhaColumn) {CLAIM_HEAD_SEQ, Int64GetDatum(final ? seq + 1 : seq), final && !more};
	claim[2] = (GridhaColumn) {CLAIM_READY_AT, TimestampTzGetDatum(now), false};
	if (new_status == GRIDHA_DELAYED)
		claim[2].value = TimestampTzGetDatum(gridha_backoff_until(now, attempts));
	else if (final ? !more : new_status != GRIDHA_UNKNOWN)
		claim[2].isnull = true;
	*nclaim = 3;
	if (final)
	{
		AttrNumber	total = gridha_rows_attno(rows, new_status == GRIDHA_COMMITTED ?
											  CLAIM_COMMITTED_TOTAL : CLAIM_INVALID_TOTAL);

		if (total != 0)
		{
			d = gridha_rows_get(rows, GRIDHA_CLAIMS, total, &isnull);
			claim[3] = (GridhaColumn) {total, Int64GetDatum((isnull ? 0 : DatumGetInt64(d)) + 1), false};
			*nclaim = 4;
		}
	}
	settle->due = false;
	if (final && !more)
		status_judge_settle(rows, new_status, claim, nclaim, settle);
	return true;
}

/*
 * Where this transaction last wrote this backend's totals row of a target
 * (status_write_settle). Lone reports that empty queues, many in one
 * transaction, rewrite that row each time, and an index fetch walks every
 * version the transaction wrote before the one its snapshot sees: that
 * made such a transaction quadratic in its reports. The version is
 * fetched where it was written instead, and checked: the snapshot must
 * see it and its key must be the row's (a rename moves the row). Forgotten
 * when the transaction ends and when a subtransaction aborts.
 */
static struct
{
	bool		known;
	char	   *target;			/* in TopMemoryContext */
	ItemPointerData tid;
}			status_totals_at;
static bool status_totals_callbacks = false;

static void
status_totals_forget(void)
{
	status_totals_at.known = false;
}

static void
status_totals_xact_callback(XactEvent event, void *arg)
{
	status_totals_forget();
}

static void
status_totals_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
							   SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		status_totals_forget();
}

/*
 * status_fetch_totals: makes this backend's totals row of the target the
 * current row: where this transaction last wrote it if the snapshot sees
 * it there, else through the key's index. False if there is none.
 */
static bool
status_fetch_totals(GridhaRows *rows, const char *target, Datum *key)
{
	bool		isnull;

	if (status_totals_at.known && strcmp(status_totals_at.target, target) == 0 &&
		gridha_rows_fetch_tid(rows, GRIDHA_TOTALS, &status_totals_at.tid))
	{
		Datum		t = gridha_rows_get(rows, GRIDHA_TOTALS, TOTALS_TARGET, &isnull);
		Datum		slot = gridha_rows_get(rows, GRIDHA_TOTALS, TOTALS_SLOT, &isnull);
		char	   *name = TextDatumGetCString(t);
		bool		same = strcmp(name, target) == 0 && DatumGetInt32(slot) == DatumGetInt32(key[1]);

		pfree(name);
		if (same)
			return true;
	}
	return gridha_rows_fetch(rows, GRIDHA_KEY_TOTALS, key);
}

/*
 * status_totals_remember: the totals row of the target was just written
 * by this transaction, there.
 */
static void
status_totals_remember(GridhaRows *rows, const char *target)
{
	if (!status_totals_callbacks)
	{
		RegisterXactCallback(status_totals_xact_callback, NULL);
		RegisterSubXactCallback(status_totals_subxact_callback, NULL);
		status_totals_callbacks = true;
	}
	if (status_totals_at.target == NULL || strcmp(status_totals_at.target, target) != 0)
	{
		if (status_totals_at.target != NULL)
			pfree(status_totals_at.target);
		status_totals_at.target = MemoryContextStrdup(TopMemoryContext, target);
	}
	status_totals_at.tid = gridha_rows_stored_tid(rows, GRIDHA_TOTALS);
	status_totals_at.known = true;
}

/*
 * status_write_settle: adds what the report settles to this transaction's
 * slot row of the service's target in gridha.target_totals
 * (gridha_totals_slot), in the report's own command (see src/totals.c); a
 * row not there yet is made by status_report's flush, in this transaction
 * too.
 */
static void
status_write_settle(GridhaRows *rows, const StatusSettle *settle)
{
	Datum		key[2];
	GridhaColumn cols[GRIDHA_TOTALS_NSETTLED];
	GridhaUpdateResult res = GRIDHA_ROW_DELETED;
	bool		isnull;
	int			k;

	key[0] = CStringGetTextDatum(settle->target);
	key[1] = Int32GetDatum(gridha_totals_slot());
	if (status_fetch_totals(rows, settle->target, key))
	{
		do
		{
			for (k = 0; k < GRIDHA_TOTALS_NSETTLED; k++)
			{
				Datum		d = gridha_rows_get(rows, GRIDHA_TOTALS, TOTALS_SETTLED_ENQUEUED + k, &isnull);

				cols[k] = (GridhaColumn) {TOTALS_SETTLED_ENQUEUED + k,
					Int64GetDatum((isnull ? 0 : DatumGetInt64(d)) + settle->delta[k]), false};
			}
			res = gridha_rows_update(rows, GRIDHA_TOTALS, cols, GRIDHA_TOTALS_NSETTLED);
		} while (res == GRIDHA_ROW_CHANGED);
	}
	if (res == GRIDHA_ROW_UPDATED)
	{
		status_totals_remember(rows, settle->target);
		return;
	}
	for (k = 0; k < GRIDHA_TOTALS_NSETTLED; k++)
		if (settle->delta[k] != 0)
			gridha_totals_add(settle->target, GRIDHA_TOTAL_SETTLED_ENQUEUED + k, settle->delta[k]);
}

/*
 * status_judge_handout: whether the current batch row is submitting under
 * this instance's hand-out at this epoch (not revoked since).
 */
static bool
status_judge_handout(GridhaRows *rows, Datum instance_id, int64 epoch)
{
	bool		isnull;
	Datum		d;

	if (gridha_status_of(gridha_rows_get(rows, GRIDHA_BATCHES, BATCH_STATUS, &isnull)) != GRIDHA_SUBMITTING)
		return false;
	d = gridha_rows_get(rows, GRIDHA_BATCHES, BATCH_EPOCH, &isnull);
	if (isnull || DatumGetInt64(d) != epoch)
		return false;
	d = gridha_rows_get(rows, GRIDHA_BATCHES, BATCH_INSTANCE_ID, &isnull);
	return !isnull && gridha_uuid_equal(d, instance_id);
}

/*
 * status_try: one try of a report (see the file header); true when it
 * moved the batch, false when it changed nothing. A report that wrote the
 * claim and then finds the batch moved by a concurrent report raises.
 */
static bool
status_try(Datum instance_id, text *service_id, text *batch_id, int64 epoch,
		   GridhaStatus new_status, text *detail, ReportFrom from, StatusSettle *defer)
{
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	bool		final = GRIDHA_STATUS_IS_FINAL(new_status);
	Datum		key[2];
	GridhaRows	rows;
	GridhaUpdateResult res;
	int64		seq;
	int64		now_seq;
	int32		attempts;
	GridhaColumn batch[4];
	GridhaColumn claim[4 + GRIDHA_TOTALS_NSETTLED];
	StatusSettle settle = {0};
	int			nclaim;
	int			nbatch;

	key[0] = PointerGetDatum(service_id);
	key[1] = PointerGetDatum(batch_id);
	gridha_rows_begin(&rows, true);

	if (from == FROM_SUBMITTING && new_status == GRIDHA_PENDING)
	{
		/* an acceptance: the batch only, fenced by its hand-out */
		if (!gridha_rows_fetch(&rows, GRIDHA_KEY_BATCH_ID, key))
			goto nothing;
		do
		{
			if (!status_judge_handout(&rows, instance_id, epoch))
				goto nothing;
			nbatch = 0;
			batch[nbatch++] = (GridhaColumn) {BATCH_STATUS, gridha_status_datum(GRIDHA_PENDING), false};
			batch[nbatch++] = (GridhaColumn) {BATCH_SUBMITTED_AT, TimestampTzGetDatum(now), false};
			if (detail != NULL)
				batch[nbatch++] = (GridhaColumn) {BATCH_DETAIL, PointerGetDatum(detail), false};
			res = gridha_rows_update(&rows, GRIDHA_BATCHES, batch, nbatch);
		} while (res == GRIDHA_ROW_CHANGED);
		if (res != GRIDHA_ROW_UPDATED)
			goto nothing;
		gridha_rows_end(&rows);
		return true;
	}

	/* the claim first (the fence), as every writer of both writes them */
	if (!gridha_rows_fetch(&rows, GRIDHA_KEY_CLAIM, key) ||
		!gridha_rows_fetch(&rows, GRIDHA_KEY_BATCH_ID, key) ||
		!status_judge_batch(&rows, epoch, from, &seq, &attempts))
		goto nothing;
	do
	{
		if (!status_judge_claim(&rows, instance_id, epoch, seq, attempts, new_status, claim, &nclaim,
								&settle))
			goto nothing;
		res = gridha_rows_update(&rows, GRIDHA_CLAIMS, claim, nclaim);
	} while (res == GRIDHA_ROW_CHANGED);
	if (res != GRIDHA_ROW_UPDATED)
		goto nothing;

	/* the claim is written: the batch must follow, or the report raises */
	do
	{
		if (!status_judge_batch(&rows, epoch, from, &now_seq, &attempts) || now_seq != seq)
		{
			gridha_rows_end(&rows);
			SPI_connect();
			status_diagnose(instance_id, service_id, batch_id, epoch, from);
			elog(ERROR, "gridha: report on batch \"%s\" of service \"%s\" moved its claim but not the batch",
				 text_to_cstring(batch_id), text_to_cstring(service_id));
		}
		nbatch = 0;
		batch[nbatch++] = (GridhaColumn) {BATCH_STATUS, gridha_status_datum(new_status), false};
		batch[nbatch++] = (GridhaColumn) {BATCH_NOT_BEFORE,
			TimestampTzGetDatum(gridha_backoff_until(now, attempts)), new_status != GRIDHA_DELAYED};
		batch[nbatch++] = (GridhaColumn) {BATCH_FINISHED_AT, TimestampTzGetDatum(now), !final};
		if (detail != NULL)
			batch[nbatch++] = (GridhaColumn) {BATCH_DETAIL, PointerGetDatum(detail), false};
		res = gridha_rows_update(&rows, GRIDHA_BATCHES, batch, nbatch);
	} while (res == GRIDHA_ROW_CHANGED);
	if (res != GRIDHA_ROW_UPDATED)
		elog(ERROR, "gridha: batch \"%s\" of service \"%s\" was deleted while in flight",
			 text_to_cstring(batch_id), text_to_cstring(service_id));
	if (settle.due && defer != NULL)
		*defer = settle;
	else if (settle.due)
		status_write_settle(&rows, &settle);
	gridha_rows_end(&rows);
	return true;

nothing:
	gridha_rows_end(&rows);
	return false;
}

/*
 * status_settle_add: adds a settlement to those of a call, one entry per
 * target (in the caller's memory context).
 */
static List *
status_settle_add(List *settled, const StatusSettle *settle)
{
	ListCell   *lc;
	StatusSettle *e;
	int			k;

	foreach(lc, settled)
	{
		e = (StatusSettle *) lfirst(lc);
		if (strcmp(e->target, settle->target) == 0)
		{
			for (k = 0; k < GRIDHA_TOTALS_NSETTLED; k++)
				e->delta[k] += settle->delta[k];
			return settled;
		}
	}
	e = palloc(sizeof(StatusSettle));
	*e = *settle;
	e->target = pstrdup(settle->target);
	return lappend(settled, e);
}

/*
 * status_settle_write: writes the settlements of a call of many reports,
 * one row per target, once all of them ran: each report's own write would
 * rewrite the same row once per queue run dry, and a transaction that
 * rewrites a row n times makes each rewrite read the n versions before it.
 */
static void
status_settle_write(List *settled)
{
	ListCell   *lc;
	int			k;

	if (settled == NIL)
		return;
	foreach(lc, settled)
	{
		StatusSettle *e = (StatusSettle *) lfirst(lc);

		for (k = 0; k < GRIDHA_TOTALS_NSETTLED; k++)
			if (e->delta[k] != 0)
				gridha_totals_add(e->target, GRIDHA_TOTAL_SETTLED_ENQUEUED + k, e->delta[k]);
	}
	SPI_connect();
	gridha_totals_flush();
	SPI_finish();
}

/*
 * status_hold_claims_table: every report holds gridha.service_claims
 * before any row it locks: an acceptance writes the batch row only, and its
 * totals row after it, which a rename of targets (holding that table) may
 * be waiting to change (docs/concurrency.md). Taken once per call, by the
 * SQL entry points, not by each row of a batched report.
 */
static void
status_hold_claims_table(void)
{
	gridha_rows_hold_for_write(GRIDHA_CLAIMS);
}

/*
 * status_report: moves the batch to new_status if this instance holds the
 * service at this epoch and the batch is its head in one of the "from"
 * statuses; raises RG001/RG002/RG003 otherwise. Returns the new status.
 * With defer, a settlement (the report empties the queue) is handed back
 * instead of written (see status_report_rows).
 */
static Datum
status_report(Datum instance_id, text *service_id, text *batch_id, int64 epoch,
			  GridhaStatus new_status, text *detail, ReportFrom from, StatusSettle *defer)
{
	int			attempt;

	for (attempt = 0; attempt < 2; attempt++)
	{
		if (status_try(instance_id, service_id, batch_id, epoch, new_status, detail, from, defer))
		{
			if (gridha_totals_noted())
			{
				SPI_connect();
				gridha_totals_flush();
				SPI_finish();
			}
			return gridha_status_datum(new_status);
		}
		SPI_connect();
		status_diagnose(instance_id, service_id, batch_id, epoch, from);
		SPI_finish();
	}
	elog(ERROR, "gridha: report on batch \"%s\" of service \"%s\" found it in flight but could not move it",
		 text_to_cstring(batch_id), text_to_cstring(service_id));
	pg_unreachable();
}

/*
 * status_enum_text: an enum value (its label's OID) as the text of its label.
 */
static Datum
status_enum_text(Datum value)
{
	return CStringGetTextDatum(DatumGetCString(DirectFunctionCall1(enum_out, value)));
}

/*
 * status_of_outcome: the status a submission outcome moves a batch to:
 * accepted -> pending, delayed -> delayed, rejected -> invalid (any case);
 * another word is refused with RG004.
 */
static GridhaStatus
status_of_outcome(Datum word, bool isnull)
{
	char	   *outcome;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("outcome must not be null")));
	outcome = TextDatumGetCString(word);
	if (pg_strcasecmp(outcome, "accepted") == 0)
		return GRIDHA_PENDING;
	if (pg_strcasecmp(outcome, "delayed") == 0)
		return GRIDHA_DELAYED;
	if (pg_strcasecmp(outcome, "rejected") == 0)
		return GRIDHA_INVALID;
	ereport(ERROR,
			(errcode(ERRCODE_GRIDHA_UNKNOWN_OUTCOME),
			 errmsg("unknown submission outcome \"%s\"", outcome),
			 errhint("Use accepted, delayed or rejected.")));
	pg_unreachable();
}

/*
 * status_of_ledger_word: the status a ledger's word moves a batch to:
 * pending, valid, committed, invalid, unknown (any case); another word is
 * refused with RG005.
 */
static GridhaStatus
status_of_ledger_word(Datum value, bool isnull)
{
	static const char *const words[] = {"pending", "valid", "committed", "invalid", "unknown"};
	static const GridhaStatus statuses[] = {GRIDHA_PENDING, GRIDHA_VALID, GRIDHA_COMMITTED,
	GRIDHA_INVALID, GRIDHA_UNKNOWN};
	char	   *word;
	int			i;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("status must not be null")));
	word = TextDatumGetCString(value);
	for (i = 0; i < lengthof(words); i++)
		if (pg_strcasecmp(word, words[i]) == 0)
			return statuses[i];
	ereport(ERROR,
			(errcode(ERRCODE_GRIDHA_UNKNOWN_DLT_STATUS),
			 errmsg("unknown ledger status \"%s\"", word),
			 errhint("Use pending, valid, committed, invalid or unknown (any case).")));
	pg_unreachable();
}

/*
 * status_word: a word argument as text: the text a caller passed (1.1, and
 * a bare literal), or with is_enum the label of a value of one of the 1.2
 * enums gridha.submission_outcome and gridha.ledger_status, read as the
 * same word, so both overloads take one path.
 */
static Datum
status_word(FunctionCallInfo fcinfo, int argno, bool is_enum)
{
	if (PG_ARGISNULL(argno) || !is_enum)
		return PG_GETARG_DATUM(argno);
	return status_enum_text(PG_GETARG_DATUM(argno));
}

/*
 * status_report_one: one report, the submitter's or the ledger's.
 *
 * With submission, SQL gridha.report_submission(instance_id, service_id,
 * batch_id, epoch, outcome, detail) -> batch_status, the outcome as text
 * (any case) or, since 1.2, a gridha.submission_outcome. The batch must be
 * submitting under this epoch. accepted -> pending, delayed -> delayed
 * (handed out again after the backoff), rejected -> invalid (final; the
 * service moves on).
 *
 * Without, SQL gridha.report_status(instance_id, service_id, batch_id,
 * epoch, status, detail) -> batch_status, the status as text (any case)
 * or, since 1.2, a gridha.ledger_status; the detail (1.3: the 1.2
 * declarations have none) is stored on the batch as report_submission's.
 * The batch must be in flight: pending, valid, or submitting under this
 * epoch with no earlier attempt accepted (a status then may be about that
 * attempt, and never moves a later one). committed and invalid are final;
 * unknown sends it back for resubmission at once.
 */
static Datum
status_report_one(FunctionCallInfo fcinfo, bool is_enum, bool submission)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	text	   *service_id = gridha_arg_id(fcinfo, 1, "service_id");
	text	   *batch_id = gridha_arg_id(fcinfo, 2, "batch_id");
	int64		epoch = gridha_arg_epoch(fcinfo, 3);
	text	   *detail = (PG_NARGS() > 5 && !PG_ARGISNULL(5)) ? PG_GETARG_TEXT_PP(5) : NULL;
	Datum		word;
	GridhaStatus new_status;

	gridha_require_writable(submission ? "report_submission()" : "report_status()");
	word = status_word(fcinfo, 4, is_enum);
	new_status = submission ? status_of_outcome(word, PG_ARGISNULL(4)) :
		status_of_ledger_word(word, PG_ARGISNULL(4));
	(void) gridha_instance_check(instance_id);
	status_hold_claims_table();
	PG_RETURN_DATUM(status_report(instance_id, service_id, batch_id, epoch, new_status,
								  detail, submission ? FROM_SUBMITTING : FROM_IN_FLIGHT, NULL));
}

/*
 * The reports' four C entry points, one per overload of SQL
 * gridha.report_submission and gridha.report_status: the word as text
 * (any case), or as the 1.2 enum gridha.submission_outcome or
 * gridha.ledger_status (_enum). Their SQL functions have no SET clause:
 * gridha_pinned_call sets the path when needed (path.c).
 */
#define STATUS_ENTRY_POINT(name, is_enum, submission) \
	static Datum \
	name##_body(PG_FUNCTION_ARGS) \
	{ \
		GRIDHA_CITUS_HANDOVER(fcinfo); \
		return status_report_one(fcinfo, is_enum, submission); \
	} \
	GRIDHA_PINNED_ENTRY_POINT(name)

STATUS_ENTRY_POINT(gridha_report_submission, false, true)
STATUS_ENTRY_POINT(gridha_report_submission_enum, true, true)
STATUS_ENTRY_POINT(gridha_report_status, false, false)
STATUS_ENTRY_POINT(gridha_report_status_enum, true, false)

/* The arrays of a batched report, one element per batch */
typedef struct StatusMany
{
	int			n;
	Datum	   *service_ids;
	bool	   *service_ids_null;
	Datum	   *batch_ids;
	bool	   *batch_ids_null;
	Datum	   *epochs;
	bool	   *epochs_null;
	Datum	   *words;
	bool	   *words_null;
	Datum	   *details;		/* NULL: no details given */
	bool	   *details_null;
} StatusMany;

/* A batched report's result row, kept until every row is reported */
typedef struct StatusResult
{
	Datum		values[5];
	bool		nulls[5];
} StatusResult;

/*
 * status_array: a one-dimensional array argument, deconstructed; its
 * length must be n (n < 0: it sets n). NULL arrays are refused (22004).
 */
static void
status_array(FunctionCallInfo fcinfo, int argno, const char *name, Oid elemtype,
			 int *n, Datum **elems, bool **nulls)
{
	ArrayType  *a;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			count;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
	a = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(a) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", name)));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(a, elemtype, typlen, typbyval, typalign, elems, nulls, &count);
	if (*n >= 0 && count != *n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s has %d elements, service_ids has %d", name, count, *n),
				 errdetail("Each array holds one element per batch reported.")));
	*n = count;
}

/*
 * status_sid_cmp: two service ids (NULL last) compared byte by byte, as
 * COLLATE "C" does: the order of every wait for claim and batch rows
 * (claims.c).
 */
static int
status_sid_cmp(const StatusMany *m, int a, int b)
{
	text	   *ta;
	text	   *tb;
	int			la,
				lb,
				c;

	if (m->service_ids_null[a] || m->service_ids_null[b])
		return (int) m->service_ids_null[a] - (int) m->service_ids_null[b];
	ta = DatumGetTextPP(m->service_ids[a]);
	tb = DatumGetTextPP(m->service_ids[b]);
	la = VARSIZE_ANY_EXHDR(ta);
	lb = VARSIZE_ANY_EXHDR(tb);
	c = memcmp(VARDATA_ANY(ta), VARDATA_ANY(tb), Min(la, lb));
	return c != 0 ? c : (la > lb) - (la < lb);
}

/*
 * status_order: the rows of a batched report in service_id order (ties in
 * the order given), as positions.
 */
static int *
status_order(const StatusMany *m)
{
	int		   *order = palloc(sizeof(int) * Max(m->n, 1));
	int			i,
				j;

	/* insertion sort: stable, and a report is a few hundred rows at most */
	for (i = 0; i < m->n; i++)
	{
		for (j = i; j > 0 && status_sid_cmp(m, order[j - 1], i) > 0; j--)
			order[j] = order[j - 1];
		order[j] = i;
	}
	return order;
}

/*
 * status_lock_claims: a batched report's first step: the claim rows of all
 * its rows, locked (FOR NO KEY UPDATE, waiting) in service_id order
 * (order: the rows by service_id), before any batch row. An acceptance
 * writes its batch row only and keeps that lock to the end of the call:
 * without its claim locked first, a later row would wait (for a claim, or
 * for another batch row) while holding that batch row, against a takeover
 * that holds the claim (or revoked the other head in an earlier statement)
 * and waits for the batch row to revoke it. With the claims held, a
 * takeover skips them (SKIP LOCKED) and revokes nothing of this call's.
 * Ids that are NULL, empty or unknown are left to the row's own report to
 * refuse.
 */
static void
status_lock_claims(const StatusMany *m, const int *order)
{
	GridhaRows	rows;
	int			prev = -1;
	int			k;

	gridha_rows_begin(&rows, true);
	for (k = 0; k < m->n; k++)
	{
		int			i = order[k];
		Datum		key[1];

		if (m->service_ids_null[i] || VARSIZE_ANY_EXHDR(DatumGetTextPP(m->service_ids[i])) == 0)
			continue;
		if (prev >= 0 && status_sid_cmp(m, prev, i) == 0)
			continue;
		prev = i;
		key[0] = m->service_ids[i];
		if (gridha_rows_fetch(&rows, GRIDHA_KEY_CLAIM, key))
			(void) gridha_rows_lock(&rows, GRIDHA_CLAIMS, false, false);
	}
	gridha_rows_end(&rows);
}

/*
 * status_report_rows: the rows of a batched report, reported. Each batch
 * is reported as its single report would be, in a subtransaction of its
 * own; one that is refused (gridha's RG errors, a NULL or empty id, a
 * negative epoch, an unknown word) is rolled back alone and its row says
 * why, the others are kept. Any other error (a serialization failure, a
 * lock timeout, a cancel) aborts the whole call. A row's detail, when
 * given and not empty, is stored on its batch.
 *
 * The lock order (claims.c): with more than one row, the claim rows of
 * all its rows are locked first (status_lock_claims), then the rows are
 * reported in service_id order; the result rows keep the order given.
 */
static void
status_report_rows(FunctionCallInfo fcinfo, Datum instance_id, StatusMany *mp, bool submissions)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	StatusMany	m = *mp;
	StatusResult *volatile results = NULL;
	List	   *volatile settled = NIL;
	int		   *order;
	volatile int i;				/* read after the catch */
	int			k;

	(void) gridha_instance_check(instance_id);
	/* once for every row, outside the rows' subtransactions */
	status_hold_claims_table();
	InitMaterializedSRF(fcinfo, 0);

	order = status_order(&m);
	if (m.n > 1)
	{
		status_lock_claims(&m, order);
		results = palloc0(sizeof(StatusResult) * m.n);
	}

	for (k = 0; k < m.n; k++)
	{
		MemoryContext cxt = CurrentMemoryContext;
		ResourceOwner owner = CurrentResourceOwner;
		Datum		values[5];
		bool		nulls[5] = {false, false, false, true, true};

		i = order[k];
		values[0] = m.service_ids[i];
		nulls[0] = m.service_ids_null[i];
		values[1] = m.batch_ids[i];
		nulls[1] = m.batch_ids_null[i];

		BeginInternalSubTransaction(NULL);
		MemoryContextSwitchTo(cxt);
		PG_TRY();
		{
			text	   *service_id = gridha_check_id(m.service_ids[i], m.service_ids_null[i], "service_id");
			text	   *batch_id = gridha_check_id(m.batch_ids[i], m.batch_ids_null[i], "batch_id");
			int64		epoch = gridha_check_epoch(m.epochs[i], m.epochs_null[i]);
			text	   *detail = NULL;
			GridhaStatus new_status;
			StatusSettle settle;

			if (submissions)
				new_status = status_of_outcome(m.words[i], m.words_null[i]);
			else
				new_status = status_of_ledger_word(m.words[i], m.words_null[i]);
			if (m.details != NULL && !m.details_null[i] &&
				VARSIZE_ANY_EXHDR(DatumGetTextPP(m.details[i])) > 0)
				detail = DatumGetTextPP(m.details[i]);
			settle.due = false;
			values[2] = status_report(instance_id, service_id, batch_id, epoch, new_status,
									  detail, submissions ? FROM_SUBMITTING : FROM_IN_FLIGHT,
									  &settle);
			nulls[2] = false;
			ReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(cxt);
			CurrentResourceOwner = owner;
			if (settle.due)
				settled = status_settle_add(settled, &settle);
		}
		PG_CATCH();
		{
			ErrorData  *edata;
			int			code;

			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			FlushErrorState();
			RollbackAndReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(cxt);
			CurrentResourceOwner = owner;
			code = edata->sqlerrcode;
			/* a refusal of this row, or something the whole call must see */
			if (!(PGUNSIXBIT(code) == 'R' && PGUNSIXBIT(code >> 6) == 'G') &&
				code != ERRCODE_NULL_VALUE_NOT_ALLOWED &&
				code != ERRCODE_INVALID_PARAMETER_VALUE)
				ReThrowError(edata);
			nulls[2] = true;
			values[3] = CStringGetTextDatum(unpack_sql_state(code));
			nulls[3] = false;
			values[4] = CStringGetTextDatum(edata->message);
			nulls[4] = false;
			FreeErrorData(edata);
		}
		PG_END_TRY();
		if (results != NULL)
		{
			memcpy(results[i].values, values, sizeof(values));
			memcpy(results[i].nulls, nulls, sizeof(nulls));
		}
		else
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	if (results != NULL)
		for (i = 0; i < m.n; i++)
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
								 results[i].values, results[i].nulls);
	status_settle_write(settled);
}

/*
 * status_report_many: report_submissions and report_statuses of 1.1: one
 * array per field, one element per batch, that must line up.
 */
static void
status_report_many(FunctionCallInfo fcinfo, bool submissions)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	StatusMany	m;

	gridha_require_writable(submissions ? "report_submissions()" : "report_statuses()");
	memset(&m, 0, sizeof(m));
	m.n = -1;
	status_array(fcinfo, 1, "service_ids", TEXTOID, &m.n, &m.service_ids, &m.service_ids_null);
	status_array(fcinfo, 2, "batch_ids", TEXTOID, &m.n, &m.batch_ids, &m.batch_ids_null);
	status_array(fcinfo, 3, "epochs", INT8OID, &m.n, &m.epochs, &m.epochs_null);
	status_array(fcinfo, 4, submissions ? "outcomes" : "statuses", TEXTOID, &m.n,
				 &m.words, &m.words_null);
	/* details: report_submissions' since 1.1, report_statuses' since 1.3 */
	if (PG_NARGS() > 5 && !PG_ARGISNULL(5))
		status_array(fcinfo, 5, "details", TEXTOID, &m.n, &m.details, &m.details_null);
	status_report_rows(fcinfo, instance_id, &m, submissions);
}

/*
 * status_report_composite: report_submissions and report_statuses of 1.2:
 * one array of gridha.submission_report or gridha.status_report rows
 * (service_id, batch_id, epoch, outcome or status, detail), taken apart
 * into the arrays of the 1.1 form. The word is a label of an enum; a NULL
 * element is a row of NULLs, refused alone (22004).
 */
static void
status_report_composite(FunctionCallInfo fcinfo, bool submissions)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	StatusMany	m;
	Datum	   *elems;
	bool	   *elems_null;
	Oid			elemtype = InvalidOid;
	int			i;

	gridha_require_writable(submissions ? "report_submissions()" : "report_statuses()");
	memset(&m, 0, sizeof(m));
	m.n = -1;
	if (!PG_ARGISNULL(1))
		elemtype = ARR_ELEMTYPE(PG_GETARG_ARRAYTYPE_P(1));
	status_array(fcinfo, 1, "reports", elemtype, &m.n, &elems, &elems_null);
	m.service_ids = palloc0(sizeof(Datum) * Max(m.n, 1));
	m.service_ids_null = palloc0(sizeof(bool) * Max(m.n, 1));
	m.batch_ids = palloc0(sizeof(Datum) * Max(m.n, 1));
	m.batch_ids_null = palloc0(sizeof(bool) * Max(m.n, 1));
	m.epochs = palloc0(sizeof(Datum) * Max(m.n, 1));
	m.epochs_null = palloc0(sizeof(bool) * Max(m.n, 1));
	m.words = palloc0(sizeof(Datum) * Max(m.n, 1));
	m.words_null = palloc0(sizeof(bool) * Max(m.n, 1));
	m.details = palloc0(sizeof(Datum) * Max(m.n, 1));
	m.details_null = palloc0(sizeof(bool) * Max(m.n, 1));
	for (i = 0; i < m.n; i++)
	{
		HeapTupleHeader row;

		if (elems_null[i])
		{
			m.service_ids_null[i] = m.batch_ids_null[i] = m.epochs_null[i] = true;
			m.words_null[i] = m.details_null[i] = true;
			continue;
		}
		row = DatumGetHeapTupleHeader(elems[i]);
		m.service_ids[i] = GetAttributeByNum(row, 1, &m.service_ids_null[i]);
		m.batch_ids[i] = GetAttributeByNum(row, 2, &m.batch_ids_null[i]);
		m.epochs[i] = GetAttributeByNum(row, 3, &m.epochs_null[i]);
		m.words[i] = GetAttributeByNum(row, 4, &m.words_null[i]);
		if (!m.words_null[i])
			m.words[i] = status_enum_text(m.words[i]);
		m.details[i] = GetAttributeByNum(row, 5, &m.details_null[i]);
	}
	status_report_rows(fcinfo, instance_id, &m, submissions);
}

/*
 * The batched reports' four C entry points: SQL gridha.report_submissions
 * and gridha.report_statuses (instance_id, reports gridha.submission_report[]
 * or gridha.status_report[]) -> TABLE(service_id, batch_id, status,
 * sqlstate, message), one composite row per batch (_rows); and the five
 * arrays of 1.2's SQL (service_ids, batch_ids, epochs, outcomes or
 * statuses, details; 1.3 wraps those in PL/pgSQL). Many reports in one
 * call, one row per batch: its new status, or the SQLSTATE that refused it
 * (a refused row does not undo the others). The SQL functions of the
 * composite rows have no SET clause, as the single reports'.
 */
#define STATUS_MANY_ENTRY_POINT(name, report, submissions) \
	static Datum \
	name##_body(PG_FUNCTION_ARGS) \
	{ \
		GRIDHA_CITUS_HANDOVER(fcinfo); \
		report(fcinfo, submissions); \
		return (Datum) 0; \
	} \
	GRIDHA_PINNED_ENTRY_POINT(name)

STATUS_MANY_ENTRY_POINT(gridha_report_submission_rows, status_report_composite, true)
STATUS_MANY_ENTRY_POINT(gridha_report_status_rows, status_report_composite, false)
STATUS_MANY_ENTRY_POINT(gridha_report_submissions, status_report_many, true)
STATUS_MANY_ENTRY_POINT(gridha_report_statuses, status_report_many, false)
