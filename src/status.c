/*-------------------------------------------------------------------------
 *
 * status.c
 *		What happens to a batch after its hand-out: gridha.report_submission
 *		(the submitter's word), gridha.report_status (the ledger's word, via
 *		the DLT monitor) and gridha.pending_batches (what the monitor polls).
 *
 * Words:
 *   in flight   submitting (under the current epoch), pending or valid
 *   final       committed or invalid: never changes again, and moves the
 *               service's head to its next batch
 *   fencing     every report first locks the service's claim row and checks
 *               claimant and epoch; a stale report raises RG001 and changes
 *               nothing
 *
 * A report runs two statements: the lock-and-check, then the transition.
 * The second takes a fresh snapshot after the lock, so it sees every batch
 * enqueued before the lock was granted; the next head is never missed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "gridha.h"
#include "spi_util.h"
#include "status.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

/* The claim row locked, with the batch's state; one row per service. */
static GridhaStatement status_lock_stmt = {
	"SELECT c.claimant, c.epoch, c.head_seq, b.seq, b.status::text,"
	"       b.epoch, b.attempts"
	"  FROM gridha.service_claims c"
	"  LEFT JOIN gridha.batches b"
	"         ON b.service_id = c.service_id AND b.batch_id = $2"
	" WHERE c.service_id = $1"
	"   FOR UPDATE OF c",
	2, {TEXTOID, TEXTOID}
};

/*
 * $1 service, $2 seq, $3 new status, $4 delay ms (delayed only), $5 detail,
 * $6 final, $7 a new submission was accepted.
 */
static GridhaStatement status_transition_stmt = {
	"WITH b AS ("
	"  UPDATE gridha.batches"
	"     SET status = $3::gridha.batch_status,"
	"         not_before = now() + $4 * interval '1 millisecond',"
	"         detail = coalesce($5, detail),"
	"         submitted_at = CASE WHEN $7 THEN now() ELSE submitted_at END,"
	"         finished_at = CASE WHEN $6 THEN now() END"
	"   WHERE service_id = $1 AND seq = $2"
	"  RETURNING seq"
	"), n AS ("
	"  SELECT (SELECT nb.seq FROM gridha.batches nb"
	"           WHERE nb.service_id = $1 AND nb.seq > $2"
	"           ORDER BY nb.seq LIMIT 1) AS next_seq"
	"   WHERE $6"
	")"
	" UPDATE gridha.service_claims c"
	"    SET submitting = false,"
	"        in_flight = $3 IN ('pending', 'valid'),"
	"        head_seq = CASE WHEN $6 THEN n.next_seq ELSE c.head_seq END,"
	"        ready_at = CASE"
	"                     WHEN $6 THEN CASE WHEN n.next_seq IS NULL THEN NULL ELSE now() END"
	"                     WHEN $3 = 'delayed' THEN now() + $4 * interval '1 millisecond'"
	"                     WHEN $3 = 'unknown' THEN now()"
	"                   END"
	"   FROM b LEFT JOIN n ON true"
	"  WHERE c.service_id = $1"
	" RETURNING $3::gridha.batch_status",
	7, {TEXTOID, INT8OID, TEXTOID, INT8OID, TEXTOID, BOOLOID, BOOLOID}
};

static GridhaStatement status_pending_stmt = {
	"SELECT c.service_id, b.batch_id, b.status, c.epoch, b.submitted_at"
	"  FROM gridha.service_claims c"
	"  JOIN gridha.batches b ON b.service_id = c.service_id AND b.seq = c.head_seq"
	" WHERE c.claimant = $1 AND c.in_flight AND NOT c.submitting"
	"   AND b.status IN ('pending', 'valid')"
	" ORDER BY b.submitted_at, c.service_id"
	" LIMIT $2",
	2, {UUIDOID, INT8OID}
};

/* What the lock-and-check found */
typedef struct StatusBatch
{
	int64		seq;
	char	   *status;
	bool		epoch_matches;	/* batch's hand-out epoch = the report's */
	bool		is_head;
	int32		attempts;
} StatusBatch;

/*
 * gridha_backoff_ms: 250 ms for the first attempt, 500 ms more for each
 * further one, at most GRIDHA_BACKOFF_MAX_MS.
 */
int64
gridha_backoff_ms(int32 attempts)
{
	int64		ms = GRIDHA_BACKOFF_BASE_MS +
		(int64) GRIDHA_BACKOFF_STEP_MS * Max(attempts - 1, 0);

	return Min(ms, GRIDHA_BACKOFF_MAX_MS);
}

/*
 * status_lock: locks the service's claim row and checks that this instance
 * holds it at this epoch. Raises RG003 for an unknown service or batch and
 * RG001 for a stale claim; returns the batch's state otherwise.
 */
static StatusBatch
status_lock(Datum instance_id, text *service_id, text *batch_id, int64 epoch)
{
	Datum		args[2];
	bool		isnull;
	Datum		claimant;
	bool		claimant_null;
	int64		claim_epoch;
	StatusBatch sb;
	Datum		d;

	args[0] = PointerGetDatum(service_id);
	args[1] = PointerGetDatum(batch_id);
	gridha_exec(&status_lock_stmt, args, NULL, false);

	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_UNKNOWN_BATCH),
				 errmsg("unknown service \"%s\"", text_to_cstring(service_id)),
				 errdetail("No batch was ever enqueued for this service.")));

	claimant = gridha_col(0, 1, &claimant_null);
	claim_epoch = gridha_col_int64(0, 2);

	d = gridha_col(0, 4, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_UNKNOWN_BATCH),
				 errmsg("unknown batch \"%s\" of service \"%s\"",
						text_to_cstring(batch_id), text_to_cstring(service_id))));
	sb.seq = DatumGetInt64(d);

	if (claimant_null || !gridha_uuid_equal(claimant, instance_id) || claim_epoch != epoch)
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

	d = gridha_col(0, 3, &isnull);
	sb.is_head = !isnull && DatumGetInt64(d) == sb.seq;
	sb.status = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5);
	d = gridha_col(0, 6, &isnull);
	sb.epoch_matches = !isnull && DatumGetInt64(d) == epoch;
	sb.attempts = DatumGetInt32(gridha_col(0, 7, &isnull));
	return sb;
}

/*
 * status_not_in_flight: the RG002 refusal.
 */
static void
status_not_in_flight(text *service_id, text *batch_id, StatusBatch *sb, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_GRIDHA_NOT_IN_FLIGHT),
			 errmsg("batch \"%s\" of service \"%s\" is not %s",
					text_to_cstring(batch_id), text_to_cstring(service_id), what),
			 errdetail("Its status is %s%s.", sb->status,
					   strcmp(sb->status, "submitting") == 0 && !sb->epoch_matches ?
					   ", handed out under another epoch" : "")));
}

/*
 * status_apply: runs the transition and returns the new status (enum Datum).
 */
static Datum
status_apply(text *service_id, int64 seq, const char *new_status, int64 delay_ms,
			 text *detail, bool final, bool submitted)
{
	Datum		args[7];
	char		nulls[8] = "       ";
	bool		isnull;

	args[0] = PointerGetDatum(service_id);
	args[1] = Int64GetDatum(seq);
	args[2] = CStringGetTextDatum(new_status);
	args[3] = Int64GetDatum(delay_ms);
	if (delay_ms < 0)
		nulls[3] = 'n';
	args[4] = PointerGetDatum(detail);
	if (detail == NULL)
		nulls[4] = 'n';
	args[5] = BoolGetDatum(final);
	args[6] = BoolGetDatum(submitted);
	gridha_exec(&status_transition_stmt, args, nulls, false);
	if (SPI_processed != 1)
		elog(ERROR, "gridha: status transition of seq " INT64_FORMAT " touched " UINT64_FORMAT " rows",
			 seq, SPI_processed);
	return gridha_col(0, 1, &isnull);
}

PG_FUNCTION_INFO_V1(gridha_report_submission);

/*
 * gridha_report_submission: SQL gridha.report_submission(instance_id,
 * service_id, batch_id, epoch, outcome, detail) -> batch_status.
 *
 * The batch must be submitting under this epoch. accepted -> pending,
 * delayed -> delayed (handed out again after the backoff), rejected ->
 * invalid (final; the service moves on).
 */
Datum
gridha_report_submission(PG_FUNCTION_ARGS)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	text	   *service_id = gridha_arg_id(fcinfo, 1, "service_id");
	text	   *batch_id = gridha_arg_id(fcinfo, 2, "batch_id");
	int64		epoch = gridha_arg_epoch(fcinfo, 3);
	text	   *detail = PG_ARGISNULL(5) ? NULL : PG_GETARG_TEXT_PP(5);
	char	   *outcome;
	const char *new_status;
	StatusBatch sb;
	Datum		result;

	if (PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("outcome must not be null")));
	outcome = text_to_cstring(PG_GETARG_TEXT_PP(4));
	if (pg_strcasecmp(outcome, "accepted") == 0)
		new_status = "pending";
	else if (pg_strcasecmp(outcome, "delayed") == 0)
		new_status = "delayed";
	else if (pg_strcasecmp(outcome, "rejected") == 0)
		new_status = "invalid";
	else
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_UNKNOWN_OUTCOME),
				 errmsg("unknown submission outcome \"%s\"", outcome),
				 errhint("Use accepted, delayed or rejected.")));

	SPI_connect();
	sb = status_lock(instance_id, service_id, batch_id, epoch);
	if (!sb.is_head || strcmp(sb.status, "submitting") != 0 || !sb.epoch_matches)
		status_not_in_flight(service_id, batch_id, &sb, "submitting under this epoch");

	result = status_apply(service_id, sb.seq, new_status,
						  strcmp(new_status, "delayed") == 0 ? gridha_backoff_ms(sb.attempts) : -1,
						  detail,
						  strcmp(new_status, "invalid") == 0,
						  strcmp(new_status, "pending") == 0);
	SPI_finish();
	PG_RETURN_DATUM(result);
}

PG_FUNCTION_INFO_V1(gridha_report_status);

/*
 * gridha_report_status: SQL gridha.report_status(instance_id, service_id,
 * batch_id, epoch, dlt_status) -> batch_status.
 *
 * The batch must be in flight: pending, valid, or submitting under this
 * epoch. committed and invalid are final; unknown sends it back for
 * resubmission at once.
 */
Datum
gridha_report_status(PG_FUNCTION_ARGS)
{
	static const char *const words[] = {"pending", "valid", "committed", "invalid", "unknown"};
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	text	   *service_id = gridha_arg_id(fcinfo, 1, "service_id");
	text	   *batch_id = gridha_arg_id(fcinfo, 2, "batch_id");
	int64		epoch = gridha_arg_epoch(fcinfo, 3);
	char	   *word;
	const char *new_status = NULL;
	StatusBatch sb;
	Datum		result;
	int			i;

	if (PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("dlt_status must not be null")));
	word = text_to_cstring(PG_GETARG_TEXT_PP(4));
	for (i = 0; i < lengthof(words); i++)
		if (pg_strcasecmp(word, words[i]) == 0)
			new_status = words[i];
	if (new_status == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_UNKNOWN_DLT_STATUS),
				 errmsg("unknown ledger status \"%s\"", word),
				 errhint("Use pending, valid, committed, invalid or unknown (any case).")));

	SPI_connect();
	sb = status_lock(instance_id, service_id, batch_id, epoch);
	if (!sb.is_head ||
		!(strcmp(sb.status, "pending") == 0 || strcmp(sb.status, "valid") == 0 ||
		  (strcmp(sb.status, "submitting") == 0 && sb.epoch_matches)))
		status_not_in_flight(service_id, batch_id, &sb, "in flight");

	result = status_apply(service_id, sb.seq, new_status, -1, NULL,
						  strcmp(new_status, "committed") == 0 ||
						  strcmp(new_status, "invalid") == 0,
						  false);
	SPI_finish();
	PG_RETURN_DATUM(result);
}

PG_FUNCTION_INFO_V1(gridha_pending_batches);

/*
 * gridha_pending_batches: SQL gridha.pending_batches(instance_id,
 * max_batches): the pending and valid heads of this instance's services,
 * oldest submission first. Read-only.
 */
Datum
gridha_pending_batches(PG_FUNCTION_ARGS)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	int32		max_batches = gridha_arg_count(fcinfo, 1, "max_batches");
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		args[2];
	uint64		i;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	args[0] = instance_id;
	args[1] = Int64GetDatum(max_batches);
	gridha_exec(&status_pending_stmt, args, NULL, true);
	for (i = 0; i < SPI_processed; i++)
	{
		Datum		values[5];
		bool		isnull[5];
		int			col;

		for (col = 0; col < 5; col++)
			values[col] = gridha_col(i, col + 1, &isnull[col]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, isnull);
	}
	SPI_finish();
	return (Datum) 0;
}
