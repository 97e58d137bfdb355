/*-------------------------------------------------------------------------
 *
 * submit.c
 *		What a background worker does in one cycle: hand out a batch, submit
 *		it to its target outside any transaction, report the outcome, and
 *		poll the ledger for its pending batches (the DLT monitor).
 *
 * Words:
 *   cycle      one call of gridha_submit_cycle: at most one batch submitted,
 *              and the monitor when gridha.monitor_interval has passed
 *   step       one transaction of the cycle (hand-out, a report, the
 *              pending list, a call of a target function); each commits on
 *              its own, and an error in one is logged and ends the cycle
 *   target     where a service's batches go (gridha.targets): submit_url or
 *              submit_function, status_url or status_function
 *   refusal    RG001 (the claim moved on) or RG002 (the batch is no longer
 *              in flight) on a report: the batch is dropped, its new owner
 *              submits it again
 *   orphan     a batch submitting under this worker's claim and epoch that
 *              the worker does not have in hand: its report failed (an error,
 *              not a refusal). It is reported delayed, so it is handed out
 *              again; without that, the service would wait for as long as
 *              this worker renews the claim
 *   maintenance  gridha.run_maintenance(instance, 'maintenance'), tried every
 *              gridha.maintenance_interval: whichever worker leads the role
 *              runs the tick's duties, the others learn they do not lead
 *
 * A target without status_url and status_function has no ledger to ask: a
 * batch it accepted is reported committed at once.
 *
 * The network call (HTTP, through dlt_http.c) never runs inside a
 * transaction: the hand-out is committed before it and the report is a new
 * transaction after it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "dlt_http.h"
#include "gridha.h"
#include "leader.h"
#include "ratelimit.h"
#include "spi_util.h"
#include "worker.h"

/* Pending batches polled per monitor round */
#define SUBMIT_MONITOR_BATCHES	100

static GridhaStatement submit_handout_stmt = {
	"SELECT service_id, batch_id, payload, epoch, attempt FROM gridha.next_batch($1)",
	1, {UUIDOID}
};

/*
 * The handed-out batch's target, read by a statement of its own after the
 * hand-out. Not a join in the hand-out statement: its snapshot is older
 * than what next_batch claims inside it, so the claim row of a service
 * enqueued for the first time while the statement ran would be missing, the
 * row lost and the batch left submitting under this worker's claim.
 */
static GridhaStatement submit_target_stmt = {
	"SELECT t.submit_url, t.submit_function::oid,"
	"       t.status_url IS NULL AND t.status_function IS NULL"
	"  FROM gridha.service_claims c"
	"  JOIN gridha.targets t ON t.target = c.target"
	" WHERE c.service_id = $1",
	1, {TEXTOID}
};

static GridhaStatement submit_report_stmt = {
	"SELECT gridha.report_submission($1, $2, $3, $4, $5, $6)",
	6, {UUIDOID, TEXTOID, TEXTOID, INT8OID, TEXTOID, TEXTOID}
};

static GridhaStatement submit_status_stmt = {
	"SELECT gridha.report_status($1, $2, $3, $4, $5)",
	5, {UUIDOID, TEXTOID, TEXTOID, INT8OID, TEXTOID}
};

static GridhaStatement submit_pending_stmt = {
	"SELECT p.service_id, p.batch_id, p.status::text, p.epoch,"
	"       t.target, t.status_url, t.status_function::oid"
	"  FROM gridha.pending_batches($1, $2) p"
	"  JOIN gridha.service_claims c ON c.service_id = p.service_id"
	"  JOIN gridha.targets t ON t.target = c.target"
	" ORDER BY t.target, p.submitted_at",
	2, {UUIDOID, INT4OID}
};

static GridhaStatement submit_maintenance_stmt = {
	"SELECT outcome FROM gridha.run_maintenance($1, 'maintenance')",
	1, {UUIDOID}
};

static GridhaStatement submit_orphans_stmt = {
	"SELECT b.service_id, b.batch_id, b.epoch"
	"  FROM gridha.service_claims c"
	"  JOIN gridha.batches b ON b.service_id = c.service_id AND b.seq = c.head_seq"
	" WHERE c.claimant = $1 AND c.in_flight"
	"   AND b.status = 'submitting' AND b.epoch = c.epoch AND b.instance_id = $1",
	1, {UUIDOID}
};

/* A handed-out batch */
typedef struct SubmitBatch
{
	char	   *service_id;
	char	   *batch_id;
	bytea	   *payload;		/* NULL for a NULL payload */
	int64		epoch;
	int32		attempt;
	char	   *submit_url;
	Oid			submit_function;
	bool		fire_and_forget;	/* the target has no status source */
} SubmitBatch;

/* A pending batch to ask the ledger about */
typedef struct SubmitPending
{
	char	   *service_id;
	char	   *batch_id;
	char	   *status;
	int64		epoch;
	char	   *target;
	char	   *status_url;
	Oid			status_function;
} SubmitPending;

/* A step: what it runs inside its transaction */
typedef void (*SubmitStepFn) (void *arg);

static MemoryContext submit_cxt = NULL;	/* reset every cycle */
static GridhaHttp *submit_http = NULL;
static TimestampTz submit_last_monitor = 0;
static bool submit_orphans_due = true;	/* look for orphans next cycle */
static TimestampTz submit_last_maintenance = 0;
static pg_uuid_t *submit_instance = NULL;
static long submit_slot_ms = -1;	/* ms until a rate-limited target of a
									 * ready head has a slot; -1: none */

/*
 * gridha_submit_init: the worker's HTTP handle and memory.
 */
void
gridha_submit_init(void)
{
	submit_cxt = AllocSetContextCreate(TopMemoryContext, "gridha worker cycle",
									   ALLOCSET_DEFAULT_SIZES);
	if (gridha_http_global_init() != 0 || (submit_http = gridha_http_create()) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("gridha worker could not initialise libcurl")));
}

void
gridha_submit_shutdown(void)
{
	if (submit_http != NULL)
		gridha_http_destroy(submit_http);
	submit_http = NULL;
}

/*
 * submit_step: runs fn in a transaction of its own. Returns true when it
 * committed; otherwise the error is logged (a refusal, RG001/RG002, at LOG
 * as "dropped"), the transaction rolled back, and *sqlstate says which
 * error it was.
 */
static bool
submit_step(SubmitStepFn fn, void *arg, const char *what, int *sqlstate)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool ok = true;

	if (sqlstate)
		*sqlstate = 0;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		fn(arg);
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		if (sqlstate)
			*sqlstate = edata->sqlerrcode;
		if (edata->sqlerrcode == ERRCODE_GRIDHA_STALE_CLAIM ||
			edata->sqlerrcode == ERRCODE_GRIDHA_NOT_IN_FLIGHT)
			ereport(LOG,
					(errmsg("gridha worker dropped a batch: %s refused: %s", what, edata->message),
					 edata->detail ? errdetail_internal("%s", edata->detail) : 0));
		else
			ereport(LOG,
					(errmsg("gridha worker: %s failed: %s", what, edata->message),
					 edata->detail ? errdetail_internal("%s", edata->detail) : 0));
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	return ok;
}

static char *
submit_text_col(int row, int col)
{
	char	   *v = SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col);

	return v ? MemoryContextStrdup(submit_cxt, v) : NULL;
}

/* Step: hand out one batch; arg is a SubmitBatch ** set to NULL or it */
static void
submit_handout_step(void *arg)
{
	SubmitBatch **out = (SubmitBatch **) arg;
	SubmitBatch *b;
	Datum		args[1];
	bool		isnull;
	Datum		d;

	*out = NULL;
	submit_slot_ms = -1;
	args[0] = UUIDPGetDatum(submit_instance);
	gridha_exec(&submit_handout_stmt, args, NULL, false);
	if (SPI_processed == 0)
	{
		submit_slot_ms = gridha_ratelimit_wait_ms(args[0]);
		return;
	}

	b = MemoryContextAllocZero(submit_cxt, sizeof(SubmitBatch));
	b->service_id = submit_text_col(0, 1);
	b->batch_id = submit_text_col(0, 2);
	d = gridha_col(0, 3, &isnull);
	if (!isnull)
	{
		MemoryContext old = MemoryContextSwitchTo(submit_cxt);

		b->payload = DatumGetByteaPCopy(d);
		MemoryContextSwitchTo(old);
	}
	b->epoch = gridha_col_int64(0, 4);
	b->attempt = (int32) gridha_col_int64(0, 5);

	args[0] = CStringGetTextDatum(b->service_id);
	gridha_exec(&submit_target_stmt, args, NULL, false);
	if (SPI_processed != 1)
		elog(ERROR, "gridha: service \"%s\" has no target row", b->service_id);
	b->submit_url = submit_text_col(0, 1);
	d = gridha_col(0, 2, &isnull);
	b->submit_function = isnull ? InvalidOid : DatumGetObjectId(d);
	b->fire_and_forget = DatumGetBool(gridha_col(0, 3, &isnull));
	*out = b;
}

/* Step: call a target's submit_function; arg is a SubmitBatch, result in it */
typedef struct SubmitCall
{
	SubmitBatch *batch;
	char	   *outcome;
} SubmitCall;

static void
submit_function_step(void *arg)
{
	SubmitCall *call = (SubmitCall *) arg;
	SubmitBatch *b = call->batch;
	Oid			types[4] = {TEXTOID, TEXTOID, BYTEAOID, INT8OID};
	Datum		args[4];
	char		nulls[5] = "    ";
	StringInfoData sql;
	char	   *v;

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s($1, $2, $3, $4)::text",
					 quote_qualified_identifier(get_namespace_name(get_func_namespace(b->submit_function)),
												get_func_name(b->submit_function)));
	args[0] = CStringGetTextDatum(b->service_id);
	args[1] = CStringGetTextDatum(b->batch_id);
	args[2] = b->payload ? PointerGetDatum(b->payload) : (Datum) 0;
	if (b->payload == NULL)
		nulls[2] = 'n';
	args[3] = Int64GetDatum(b->epoch);
	if (SPI_execute_with_args(sql.data, 4, types, args, nulls, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "gridha: submit function returned no row");
	v = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	call->outcome = v ? MemoryContextStrdup(submit_cxt, v) : NULL;
}

/* Step: report a submission's outcome */
typedef struct SubmitReport
{
	const char *service_id;
	const char *batch_id;
	int64		epoch;
	const char *word;			/* outcome or ledger status */
	const char *detail;
} SubmitReport;

static void
submit_report_step(void *arg)
{
	SubmitReport *r = (SubmitReport *) arg;
	Datum		args[6];
	char		nulls[7] = "      ";

	args[0] = UUIDPGetDatum(submit_instance);
	args[1] = CStringGetTextDatum(r->service_id);
	args[2] = CStringGetTextDatum(r->batch_id);
	args[3] = Int64GetDatum(r->epoch);
	args[4] = CStringGetTextDatum(r->word);
	args[5] = r->detail ? CStringGetTextDatum(r->detail) : (Datum) 0;
	if (r->detail == NULL)
		nulls[5] = 'n';
	gridha_exec(&submit_report_stmt, args, nulls, false);
}

static void
submit_status_step(void *arg)
{
	SubmitReport *r = (SubmitReport *) arg;
	Datum		args[5];

	args[0] = UUIDPGetDatum(submit_instance);
	args[1] = CStringGetTextDatum(r->service_id);
	args[2] = CStringGetTextDatum(r->batch_id);
	args[3] = Int64GetDatum(r->epoch);
	args[4] = CStringGetTextDatum(r->word);
	gridha_exec(&submit_status_stmt, args, NULL, false);
}

/*
 * submit_one: submits a handed-out batch and reports the outcome.
 */
static void
submit_one(SubmitBatch *b)
{
	SubmitReport r;
	char		detail[256];
	const char *outcome;
	int			sqlstate;

	gridha_worker_set_state(GRIDHA_WS_SUBMITTING, b->service_id, b->batch_id);
	if (b->submit_url != NULL)
	{
		GridhaSubmitOutcome o;

		o = gridha_http_submit(submit_http, b->submit_url, b->service_id, b->batch_id,
							   (long long) b->epoch, b->attempt,
							   b->payload ? VARDATA_ANY(b->payload) : "",
							   b->payload ? VARSIZE_ANY_EXHDR(b->payload) : 0,
							   gridha_submit_timeout_ms, detail, sizeof(detail));
		outcome = gridha_http_outcome_name(o);
	}
	else
	{
		SubmitCall call = {b, NULL};

		if (submit_step(submit_function_step, &call, "submit function", NULL) &&
			call.outcome != NULL &&
			(strcmp(call.outcome, "accepted") == 0 || strcmp(call.outcome, "delayed") == 0 ||
			 strcmp(call.outcome, "rejected") == 0))
		{
			outcome = call.outcome;
			snprintf(detail, sizeof(detail), "submit function: %s", outcome);
		}
		else
		{
			/* the function failed or said something else: try again later */
			outcome = "delayed";
			snprintf(detail, sizeof(detail), "submit function failed or returned \"%s\"",
					 call.outcome ? call.outcome : "null");
		}
	}

	gridha_worker_set_state(GRIDHA_WS_REPORTING, b->service_id, b->batch_id);
	r.service_id = b->service_id;
	r.batch_id = b->batch_id;
	r.epoch = b->epoch;
	r.word = outcome;
	r.detail = detail;
	if (!submit_step(submit_report_step, &r, "report_submission", &sqlstate))
	{
		/* a refusal: the batch is not ours any more; an error: an orphan */
		if (sqlstate != ERRCODE_GRIDHA_STALE_CLAIM && sqlstate != ERRCODE_GRIDHA_NOT_IN_FLIGHT)
			submit_orphans_due = true;
		return;
	}

	/* a failure here leaves it pending: the monitor reports it (see there) */
	if (strcmp(outcome, "accepted") == 0 && b->fire_and_forget)
	{
		r.word = "committed";
		(void) submit_step(submit_status_step, &r, "report_status", NULL);
	}
}

/* An orphan found by submit_orphans_step */
typedef struct SubmitOrphan
{
	char	   *service_id;
	char	   *batch_id;
	int64		epoch;
} SubmitOrphan;

/* Step: this worker's orphans; arg is a List ** */
static void
submit_orphans_step(void *arg)
{
	List	  **out = (List **) arg;
	Datum		args[1];
	uint64		i;
	MemoryContext old;

	args[0] = UUIDPGetDatum(submit_instance);
	gridha_exec(&submit_orphans_stmt, args, NULL, true);
	old = MemoryContextSwitchTo(submit_cxt);
	for (i = 0; i < SPI_processed; i++)
	{
		SubmitOrphan *o = palloc0(sizeof(SubmitOrphan));

		o->service_id = submit_text_col(i, 1);
		o->batch_id = submit_text_col(i, 2);
		o->epoch = gridha_col_int64(i, 3);
		*out = lappend(*out, o);
	}
	MemoryContextSwitchTo(old);
}

/*
 * submit_recover_orphans: reports this worker's orphans delayed. Run at the
 * worker's first cycle and after a report failed with an error.
 */
static void
submit_recover_orphans(void)
{
	List	   *orphans = NIL;
	ListCell   *lc;

	if (!submit_step(submit_orphans_step, &orphans, "looking for batches not in hand", NULL))
		return;					/* submit_orphans_due stays set: next cycle */
	submit_orphans_due = false;
	foreach(lc, orphans)
	{
		SubmitOrphan *o = lfirst(lc);
		SubmitReport r = {o->service_id, o->batch_id, o->epoch, "delayed",
		"its report had failed: submitted again"};

		ereport(LOG,
				(errmsg("gridha worker: batch \"%s\" of service \"%s\" was submitting but not in hand: reported delayed",
						o->batch_id, o->service_id)));
		if (!submit_step(submit_report_step, &r, "report_submission", NULL))
			submit_orphans_due = true;
	}
}

/* Step: the pending batches of this instance; arg is a List ** */
static void
submit_pending_step(void *arg)
{
	List	  **out = (List **) arg;
	Datum		args[2];
	uint64		i;
	MemoryContext old;

	args[0] = UUIDPGetDatum(submit_instance);
	args[1] = Int32GetDatum(SUBMIT_MONITOR_BATCHES);
	gridha_exec(&submit_pending_stmt, args, NULL, true);
	old = MemoryContextSwitchTo(submit_cxt);
	for (i = 0; i < SPI_processed; i++)
	{
		SubmitPending *p = palloc0(sizeof(SubmitPending));
		bool		isnull;
		Datum		d;

		p->service_id = submit_text_col(i, 1);
		p->batch_id = submit_text_col(i, 2);
		p->status = submit_text_col(i, 3);
		p->epoch = gridha_col_int64(i, 4);
		p->target = submit_text_col(i, 5);
		p->status_url = submit_text_col(i, 6);
		d = gridha_col(i, 7, &isnull);
		p->status_function = isnull ? InvalidOid : DatumGetObjectId(d);
		*out = lappend(*out, p);
	}
	MemoryContextSwitchTo(old);
}

/* Step: call a target's status_function for some batch ids */
typedef struct SubmitStatusCall
{
	Oid			function;
	GridhaStatusEntry *entries;
	int			n;
	bool		malformed;
} SubmitStatusCall;

static void
submit_status_function_step(void *arg)
{
	static const char *const words[] = {"pending", "valid", "committed", "invalid", "unknown"};
	SubmitStatusCall *call = (SubmitStatusCall *) arg;
	Oid			types[1] = {TEXTARRAYOID};
	Datum		args[1];
	Datum	   *ids = palloc(sizeof(Datum) * call->n);
	StringInfoData sql;
	uint64		i;
	int			k;

	for (k = 0; k < call->n; k++)
		ids[k] = CStringGetTextDatum(call->entries[k].batch_id);
	args[0] = PointerGetDatum(construct_array(ids, call->n, TEXTOID, -1, false, TYPALIGN_INT));

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT f.batch_id::text, lower(f.status::text) FROM %s($1) AS f(batch_id, status)",
					 quote_qualified_identifier(get_namespace_name(get_func_namespace(call->function)),
												get_func_name(call->function)));
	if (SPI_execute_with_args(sql.data, 1, types, args, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "gridha: status function failed");

	/* check every row first: an unknown word means nothing is applied */
	for (i = 0; i < SPI_processed; i++)
	{
		char	   *w = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		bool		known = false;

		for (k = 0; k < lengthof(words); k++)
			if (w != NULL && strcmp(w, words[k]) == 0)
				known = true;
		if (!known)
		{
			call->malformed = true;
			return;
		}
	}
	for (i = 0; i < SPI_processed; i++)
	{
		char	   *id = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		char	   *w = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);

		for (k = 0; k < call->n; k++)
			if (id != NULL && strcmp(id, call->entries[k].batch_id) == 0)
				strlcpy(call->entries[k].status, w, sizeof(call->entries[k].status));
	}
}

/*
 * submit_monitor: asks each target about this instance's pending batches
 * and reports what changed. Returns true when a batch reached a new status.
 */
static bool
submit_monitor(void)
{
	List	   *pending = NIL;
	bool		changed = false;
	int			start = 0;
	int			npending;

	gridha_worker_set_state(GRIDHA_WS_MONITORING, NULL, NULL);
	if (!submit_step(submit_pending_step, &pending, "pending_batches", NULL))
		return false;
	npending = list_length(pending);

	/* one request per run of batches with the same target (rows are sorted) */
	while (start < npending)
	{
		SubmitPending *first = list_nth(pending, start);
		int			end = start + 1;
		int			n;
		int			k;
		GridhaStatusEntry *entries;
		char		err[256];
		bool		ok;

		while (end < npending &&
			   strcmp(((SubmitPending *) list_nth(pending, end))->target, first->target) == 0)
			end++;
		n = end - start;
		entries = MemoryContextAllocZero(submit_cxt, sizeof(GridhaStatusEntry) * n);
		for (k = 0; k < n; k++)
			entries[k].batch_id = ((SubmitPending *) list_nth(pending, start + k))->batch_id;

		if (first->status_url != NULL)
		{
			ok = gridha_http_statuses(submit_http, first->status_url, entries, n,
									  gridha_submit_timeout_ms, err, sizeof(err)) == 0;
			if (!ok)
				ereport(LOG,
						(errmsg("gridha worker: status poll of target \"%s\" failed: %s",
								first->target, err),
						 errdetail("Nothing was applied; the poll is repeated.")));
		}
		else if (OidIsValid(first->status_function))
		{
			SubmitStatusCall call = {first->status_function, entries, n, false};

			ok = submit_step(submit_status_function_step, &call, "status function", NULL);
			if (ok && call.malformed)
			{
				ereport(LOG,
						(errmsg("gridha worker: status function of target \"%s\" returned an unknown status word",
								first->target),
						 errdetail("Nothing was applied; the poll is repeated.")));
				ok = false;
			}
		}
		else
		{
			/*
			 * No status source: an accepted batch is committed, and was
			 * reported so at submission; one still pending here is one whose
			 * report failed then.
			 */
			for (k = 0; k < n; k++)
				strlcpy(entries[k].status, "committed", sizeof(entries[k].status));
			ok = true;
		}

		for (k = 0; ok && k < n; k++)
		{
			SubmitPending *p = list_nth(pending, start + k);
			SubmitReport r;

			if (entries[k].status[0] == '\0' || strcmp(entries[k].status, p->status) == 0)
				continue;
			r.service_id = p->service_id;
			r.batch_id = p->batch_id;
			r.epoch = p->epoch;
			r.word = entries[k].status;
			r.detail = NULL;
			gridha_worker_set_state(GRIDHA_WS_REPORTING, p->service_id, p->batch_id);
			if (submit_step(submit_status_step, &r, "report_status", NULL))
				changed = true;
		}
		start = end;
	}
	return changed;
}

/*
 * Step: the maintenance tick, when this worker leads the role (see
 * leader.c); run_maintenance itself decides whether a tick is due.
 */
static void
submit_maintenance_step(void *arg)
{
	Datum		args[1];

	args[0] = UUIDPGetDatum(submit_instance);
	gridha_exec(&submit_maintenance_stmt, args, NULL, false);
}

/*
 * gridha_submit_wait_ms: how long an idle worker may sleep: max_ms, or less
 * when the last hand-out found ready heads waiting only for the next slot
 * of their rate-limited target, which opens sooner.
 */
long
gridha_submit_wait_ms(long max_ms)
{
	if (submit_slot_ms >= 0 && submit_slot_ms < max_ms)
		return submit_slot_ms;
	return max_ms;
}

/*
 * gridha_submit_cycle: one cycle. Returns true when it did something that
 * may make more work ready at once (a batch submitted, a status changed),
 * so the caller goes round again without sleeping.
 */
bool
gridha_submit_cycle(pg_uuid_t *instance_id)
{
	SubmitBatch *batch = NULL;
	bool		busy = false;
	TimestampTz now;

	MemoryContextReset(submit_cxt);
	submit_instance = instance_id;

	if (submit_orphans_due && !gridha_worker_stopping())
		submit_recover_orphans();

	gridha_worker_set_state(GRIDHA_WS_HANDING_OUT, NULL, NULL);
	if (!submit_step(submit_handout_step, &batch, "next_batch", NULL))
	{
		gridha_worker_set_state(GRIDHA_WS_BACKING_OFF, NULL, NULL);
		return false;
	}
	if (batch != NULL)
	{
		submit_one(batch);
		busy = true;
	}

	now = GetCurrentTimestamp();
	if (!gridha_worker_stopping() &&
		TimestampDifferenceExceeds(submit_last_monitor, now, gridha_monitor_interval_ms))
	{
		submit_last_monitor = now;
		if (submit_monitor())
			busy = true;
	}

	if (!gridha_worker_stopping() &&
		TimestampDifferenceExceeds(submit_last_maintenance, now, gridha_maintenance_interval_ms))
	{
		submit_last_maintenance = now;
		(void) submit_step(submit_maintenance_step, NULL, "run_maintenance", NULL);
	}
	return busy;
}
