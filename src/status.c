/*-------------------------------------------------------------------------
 *
 * status.c
 *		What happens to a batch after its hand-out: gridha.report_submission
 *		(the submitter's word), gridha.report_status (the ledger's word, via
 *		the DLT monitor) and gridha.pending_batches (what the monitor polls);
 *		and the trigger that keeps a final status final, whoever writes.
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
 * Every other report is one statement: lock the claim (claimant and epoch
 * in its WHERE), move the batch (its status and hand-out epoch in its
 * WHERE), move the claim. Every writer of a batch row but the acceptance
 * holds its service's claim row locked, so once the lock is granted the
 * head can only go from submitting to pending meanwhile. The next head is
 * seq + 1: seqs are given out gap-free under the claim lock
 * (batches_before_insert) and an unfinished batch cannot be deleted, so the
 * claim's tail_seq, read under the lock, says whether it exists even when
 * it was enqueued after the statement's snapshot.
 *
 * When a report changes nothing, a second read with a fresh snapshot says
 * why (RG003, RG001, RG002). If that read finds the report valid after all,
 * the batch or claim moved between the snapshot and the lock; the report
 * runs once more, now with a snapshot taken under the lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "gridha.h"
#include "spi_util.h"
#include "status.h"

#include "access/htup_details.h"
#include "catalog/pg_enum.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"

/* Statuses a report may move a batch from */
typedef enum ReportFrom
{
	FROM_SUBMITTING,			/* submitting under this epoch */
	FROM_IN_FLIGHT				/* that, or pending, or valid */
} ReportFrom;

/* When a delayed batch may go again: the backoff grows with its attempts */
#define STATUS_NOT_BEFORE(attempts) \
	"now() + least(" CppAsString2(GRIDHA_BACKOFF_BASE_MS) " + " \
	CppAsString2(GRIDHA_BACKOFF_STEP_MS) " * greatest(" attempts " - 1, 0), " \
	CppAsString2(GRIDHA_BACKOFF_MAX_MS) ") * interval '1 millisecond'"

/* The parameters of every report statement (see status_report_stmt) */
#define STATUS_REPORT_ARGTYPES \
	{TEXTOID, TEXTOID, UUIDOID, INT8OID, TEXTOID, TEXTOID, BOOLOID}

/* The statuses a report may move the batch from */
#define STATUS_FROM(b) \
	"((" b ".status = 'submitting' AND " b ".epoch = $4)" \
	" OR ($7 AND " b ".status IN ('pending', 'valid')))"

/*
 * Every report but an acceptance: $1 service, $2 batch, $3 instance,
 * $4 epoch, $5 new status, $6 detail, $7 pending/valid may be reported on
 * too.
 *
 * The fence is the claim row's own UPDATE (c): it matches only while this
 * instance holds the service at this epoch and the batch is its head, and
 * it locks the row, so a takeover or another report of the service waits
 * for this transaction and then sees what it wrote. The batch is updated
 * after it, rechecking its status on the newest row version. When either
 * matches nothing the statement returns no row and the caller raises (see
 * status_report), so a claim update without its batch update never commits.
 *
 * "IS NOT DISTINCT FROM" keeps the planner on the primary key rather than
 * the (claimant, ready_at) index, which stale statistics (every claimant
 * NULL when the table was last analyzed) make look cheaper.
 */
static GridhaStatement status_report_stmt = {
	"WITH x AS ("
	"  SELECT b.seq, b.attempts FROM gridha.batches b"
	"   WHERE b.service_id = $1 AND b.batch_id = $2 AND " STATUS_FROM("b")
	"), c AS ("
	"  UPDATE gridha.service_claims s"
	"     SET in_flight = $5 IN ('pending', 'valid'),"
	"         head_seq = CASE WHEN $5 NOT IN ('committed', 'invalid') THEN s.head_seq"
	"                         WHEN s.tail_seq > x.seq THEN x.seq + 1 END,"
	"         ready_at = CASE WHEN $5 IN ('committed', 'invalid')"
	"                         THEN CASE WHEN s.tail_seq > x.seq THEN now() END"
	"                         WHEN $5 = 'delayed' THEN " STATUS_NOT_BEFORE("x.attempts")
	"                         WHEN $5 = 'unknown' THEN now() END"
	"    FROM x"
	"   WHERE s.service_id = $1 AND s.claimant IS NOT DISTINCT FROM $3"
	"     AND s.epoch = $4 AND s.head_seq = x.seq"
	"  RETURNING x.seq"
	")"
	" UPDATE gridha.batches b"
	"    SET status = $5::gridha.batch_status,"
	"        not_before = CASE WHEN $5 = 'delayed' THEN " STATUS_NOT_BEFORE("b.attempts") " END,"
	"        detail = coalesce($6, b.detail),"
	"        finished_at = CASE WHEN $5 IN ('committed', 'invalid') THEN now() END"
	"   FROM c"
	"  WHERE b.service_id = $1 AND b.seq = c.seq AND b.batch_id = $2 AND " STATUS_FROM("b")
	" RETURNING $5::gridha.batch_status",
	7, STATUS_REPORT_ARGTYPES
};

/*
 * An accepted submission, with the parameters of status_report_stmt ($5,
 * always 'pending', and $7 unused). Matches only the batch handed out to
 * this instance under this epoch and not revoked since (see the header).
 */
static GridhaStatement status_accept_stmt = {
	"UPDATE gridha.batches b"
	"   SET status = 'pending', detail = coalesce($6, b.detail), submitted_at = now()"
	" WHERE b.service_id = $1 AND b.batch_id = $2 AND b.status = 'submitting'"
	"   AND b.epoch = $4 AND b.instance_id = $3"
	" RETURNING b.status",
	7, STATUS_REPORT_ARGTYPES
};

/* Why a report changed nothing: the claim and the batch as they are now */
static GridhaStatement status_diagnose_stmt = {
	"SELECT c.claimant, c.epoch, c.head_seq, b.seq, b.status::text, b.epoch"
	"  FROM gridha.service_claims c"
	"  LEFT JOIN gridha.batches b"
	"         ON b.service_id = c.service_id AND b.batch_id = $2"
	" WHERE c.service_id = $1",
	2, {TEXTOID, TEXTOID}
};

/*
 * Each in-flight claim's head is looked up by its key (LATERAL ... LIMIT 1
 * keeps that a per-claim lookup whatever the statistics say), so a poll
 * costs what the instance has in flight, never a scan of gridha.batches.
 */
static GridhaStatement status_pending_stmt = {
	"SELECT c.service_id, h.batch_id, h.status, c.epoch, h.submitted_at"
	"  FROM gridha.service_claims c"
	" CROSS JOIN LATERAL ("
	"  SELECT b.batch_id, b.status, b.submitted_at FROM gridha.batches b"
	"   WHERE b.service_id = c.service_id AND b.seq = c.head_seq"
	"     AND b.status IN ('pending', 'valid')"
	"   LIMIT 1) h"
	" WHERE c.claimant = $1 AND c.in_flight"
	" ORDER BY h.submitted_at, c.service_id"
	" LIMIT $2",
	2, {UUIDOID, INT8OID}
};

/*
 * status_diagnose: explains why a report changed nothing, by raising RG003
 * (unknown service or batch), RG001 (stale claim) or RG002 (batch not in
 * the state the report needs). Returns only when the report is valid now.
 */
static void
status_diagnose(Datum instance_id, text *service_id, text *batch_id,
				int64 epoch, ReportFrom from)
{
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
	gridha_exec(&status_diagnose_stmt, args, NULL, false);

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
	seq = DatumGetInt64(d);

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
	is_head = !isnull && DatumGetInt64(d) == seq;
	status = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5);
	d = gridha_col(0, 6, &isnull);
	epoch_matches = !isnull && DatumGetInt64(d) == epoch;

	if (is_head &&
		((strcmp(status, "submitting") == 0 && epoch_matches) ||
		 (from == FROM_IN_FLIGHT &&
		  (strcmp(status, "pending") == 0 || strcmp(status, "valid") == 0))))
		return;

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
 * status_report: moves the batch to new_status if this instance holds the
 * service at this epoch and the batch is its head in one of the "from"
 * statuses; raises RG001/RG002/RG003 otherwise. Returns the new status.
 */
static Datum
status_report(Datum instance_id, text *service_id, text *batch_id, int64 epoch,
			  const char *new_status, text *detail, ReportFrom from)
{
	GridhaStatement *stmt = from == FROM_SUBMITTING && strcmp(new_status, "pending") == 0 ?
		&status_accept_stmt : &status_report_stmt;
	Datum		args[7];
	char		nulls[8] = "       ";
	bool		isnull;
	int			attempt;

	args[0] = PointerGetDatum(service_id);
	args[1] = PointerGetDatum(batch_id);
	args[2] = instance_id;
	args[3] = Int64GetDatum(epoch);
	args[4] = CStringGetTextDatum(new_status);
	args[5] = PointerGetDatum(detail);
	if (detail == NULL)
		nulls[5] = 'n';
	args[6] = BoolGetDatum(from == FROM_IN_FLIGHT);

	for (attempt = 0; attempt < 2; attempt++)
	{
		gridha_exec(stmt, args, nulls, false);
		if (SPI_processed == 1)
			return gridha_col(0, 1, &isnull);
		status_diagnose(instance_id, service_id, batch_id, epoch, from);
	}
	elog(ERROR, "gridha: report on batch \"%s\" of service \"%s\" found it in flight but could not move it",
		 text_to_cstring(batch_id), text_to_cstring(service_id));
	pg_unreachable();
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
	result = status_report(instance_id, service_id, batch_id, epoch, new_status,
						   detail, FROM_SUBMITTING);
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
	result = status_report(instance_id, service_id, batch_id, epoch, new_status,
						   NULL, FROM_IN_FLIGHT);
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

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	args[0] = instance_id;
	args[1] = Int64GetDatum(max_batches);
	gridha_exec(&status_pending_stmt, args, NULL, true);
	gridha_put_rows(rsinfo, 5);
	SPI_finish();
	return (Datum) 0;
}

/*
 * status_is_final: whether a gridha.batch_status value (an enum label's
 * OID) is committed or invalid.
 */
static bool
status_is_final(Datum status)
{
	HeapTuple	tup = SearchSysCache1(ENUMOID, status);
	const char *label;
	bool		final;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "gridha: no enum label with OID %u", DatumGetObjectId(status));
	label = NameStr(((Form_pg_enum) GETSTRUCT(tup))->enumlabel);
	final = strcmp(label, "committed") == 0 || strcmp(label, "invalid") == 0;
	ReleaseSysCache(tup);
	return final;
}

PG_FUNCTION_INFO_V1(gridha_batches_guard_final);

/*
 * gridha_batches_guard_final: the AFTER UPDATE row trigger batches_final on
 * gridha.batches: committed and invalid are final, whoever writes. The
 * error undoes the whole statement.
 *
 * It tests the old status itself, in C, rather than through a WHEN clause:
 * PostgreSQL reads a WHEN back from its stored text for every UPDATE
 * statement on the table, and every hand-out and report is one. It runs no
 * SQL, so it needs no pinned search_path either (see the install script).
 */
Datum
gridha_batches_guard_final(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	old;
	int			attno;
	bool		isnull;
	Datum		status;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BY_UPDATE(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event))
		elog(ERROR, "gridha: batches_guard_final must be called as a row trigger on UPDATE");
	desc = RelationGetDescr(td->tg_relation);
	old = td->tg_trigtuple;
	attno = SPI_fnumber(desc, "status");
	if (attno <= 0)
		elog(ERROR, "gridha: batches_guard_final: the table has no status column");
	status = heap_getattr(old, attno, desc, &isnull);
	if (!isnull && status_is_final(status))
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_NOT_IN_FLIGHT),
				 errmsg("batch \"%s\" of service \"%s\" is already %s",
						SPI_getvalue(old, desc, SPI_fnumber(desc, "batch_id")),
						SPI_getvalue(old, desc, SPI_fnumber(desc, "service_id")),
						SPI_getvalue(old, desc, attno)),
				 errdetail("Committed and invalid are final statuses and never change.")));
	return PointerGetDatum(NULL);
}
