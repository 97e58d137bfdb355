/*-------------------------------------------------------------------------
 *
 * submit.c
 *		What a background worker does in one cycle: hand out batches, submit
 *		them to their targets outside any transaction (many POSTs in flight
 *		at once), report the outcomes and the ledger monitor's answers
 *		(src/monitor.c asks the ledger), and try the maintenance tick. Each
 *		transaction is a step (src/step.c).
 *
 * Words:
 *   cycle      one call of gridha_submit_cycle
 *   step       one transaction of the cycle (src/step.c): a hand-out, the
 *              reports, the pending list, a call of a target function
 *   in flight  a batch handed out to this worker and POSTed (libcurl multi,
 *              at most gridha.worker_inflight at once, one per service),
 *              whose outcome is not reported yet
 *   target     where a service's batches go (gridha.targets), as judged by
 *              targets.c when the batch is handed out: a URL or a function
 *              to submit to, and one to ask for statuses, or none
 *   refusal    RG001 (the claim moved on) or RG002 (the batch is no longer
 *              in flight) on a report: the batch is dropped, its new owner
 *              submits it again
 *   orphan     a batch submitting under this worker's claim and epoch that
 *              the worker does not have in hand: its report failed (an error,
 *              not a refusal). It is reported delayed, so it is handed out
 *              again; without that, the service would wait for as long as
 *              this worker renews the claim
 *   limit      how many requests (POSTs and status runs) the worker keeps
 *              in flight to one target: adaptive, from 1 up to
 *              gridha.worker_inflight (the ceiling): a slow start, then
 *              additive increase and multiplicative decrease, with a quick
 *              regrowth after a halving by slow answers. The rules and
 *              their words are src/limit.c's
 *   waiting    a handed-out batch whose target's limit (or connection rate,
 *              gridha.worker_connect_rate) has no room yet; in hand, POSTed
 *              as soon as there is
 *   status run, omitted: the ledger monitor's words (src/monitor.c)
 *   retry-after the time a 429 or 503 answer's Retry-After names (up to
 *              the backoff's ceiling, a minute): no request of this worker
 *              goes to that target before it; the batches handed out
 *              meanwhile wait in hand
 *
 * The worker never waits on the network: every request is moved on by
 * gridha_submit_poll, which waits at most the time it is given (the worker
 * gives it 20 ms at a time and looks at its latch in between), so SIGTERM,
 * postmaster death and new work are seen while a ledger hangs.
 *
 * No transaction is ever open during a network call: a hand-out commits
 * before its POSTs start, and their outcomes are reported by later steps,
 * many in one transaction (gridha.report_submissions / report_statuses,
 * the forms that take gridha.submission_report[] / gridha.status_report[];
 * the worker calls only the API of SQL 1.3, which 1.2 has too). In the
 * Citus mode the same calls run the mode's path on the coordinator; the
 * statements that read tables themselves (the targets of a hand-out, the
 * orphans) have the mode's branch.
 *
 * A target the worker cannot use when the batch is in hand (its function
 * was dropped, its row is malformed) makes that batch delayed with the
 * reason; the worker never calls what it could not check.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "common.h"
#include "dlt_http.h"
#include "generation.h"
#include "limit.h"
#include "monitor.h"
#include "ratelimit.h"
#include "settings.h"
#include "slots.h"
#include "spi_util.h"
#include "step.h"
#include "submit.h"
#include "targets.h"

/* A target no request went to for this long is no longer shown */
#define SUBMIT_LIMIT_SHOWN_MS	60000
/* How long a stopping worker waits for the answers of its POSTs in flight */
#define SUBMIT_STOP_DRAIN_MS	300
/*
 * The most of a submit function's unknown answer, or of its error's
 * message, a batch's detail shows
 */
#define SUBMIT_ANSWER_MAX_BYTES 200

static GridhaStatement submit_handout_stmt = {
	"SELECT service_id, batch_id, payload, epoch, attempts FROM gridha.next_batches($1, $2)",
	2, {UUIDOID, INT4OID}
};

/*
 * The handed-out batches' targets, read by a statement of its own after
 * the hand-out. Not a join in the hand-out statement: its snapshot is
 * older than what next_batches claims inside it, so the claim row of a
 * service enqueued for the first time while the statement ran would be
 * missing, the row lost and the batch left submitting under this worker's
 * claim.
 */
static GridhaStatement submit_targets_1_2_stmt = {
	"SELECT service_id, target FROM gridha.service_claims"
	" WHERE service_id OPERATOR(pg_catalog.=) ANY ($1)",
	1, {TEXTARRAYOID}
};

/*
 * ... on 1.3's SQL, with the Citus mode's branch (the services' targets
 * in gridha.bucket_services; on one server its one-time filter is false
 * and gridha.service_claims, read as before, is empty in the mode)
 */
static GridhaStatement submit_targets_stmt = {
	"SELECT service_id, target FROM gridha.service_claims"
	" WHERE service_id OPERATOR(pg_catalog.=) ANY ($1)"
	" UNION ALL"
	" SELECT t.service_id, t.target FROM gridha_internal.citus_service_targets($1) t"
	"  WHERE gridha_internal.citus_mode()",
	1, {TEXTARRAYOID}
};

/*
 * Reports, many in one statement: the worker's parallel arrays made into
 * the rows report_submissions and report_statuses take, in their order
 * (the words are the labels the worker hands out: lower case, known).
 */
static GridhaStatement submit_reports_stmt = {
	"SELECT r.service_id, r.batch_id, r.status::pg_catalog.text, r.sqlstate, r.message"
	"  FROM gridha.report_submissions($1, ARRAY("
	"         SELECT ROW(u.s, u.b, u.e, u.w::gridha.submission_outcome, u.d)::gridha.submission_report"
	"           FROM unnest($2, $3, $4, $5, $6) WITH ORDINALITY AS u(s, b, e, w, d, n)"
	"          ORDER BY u.n)) r",
	6, {UUIDOID, TEXTARRAYOID, TEXTARRAYOID, INT8ARRAYOID, TEXTARRAYOID, TEXTARRAYOID}
};

static GridhaStatement submit_statuses_stmt = {
	"SELECT r.service_id, r.batch_id, r.status::pg_catalog.text, r.sqlstate, r.message"
	"  FROM gridha.report_statuses($1, ARRAY("
	"         SELECT ROW(u.s, u.b, u.e, u.w::gridha.ledger_status, NULL)::gridha.status_report"
	"           FROM unnest($2, $3, $4, $5) WITH ORDINALITY AS u(s, b, e, w, n)"
	"          ORDER BY u.n)) r",
	5, {UUIDOID, TEXTARRAYOID, TEXTARRAYOID, INT8ARRAYOID, TEXTARRAYOID}
};

static GridhaStatement submit_maintenance_stmt = {
	"SELECT outcome FROM gridha.run_maintenance($1)",
	1, {UUIDOID}
};

/*
 * This worker's orphans, read as the worker's role: worker_orphans is in
 * gridha_internal on 1.3's SQL, in gridha on 1.2's (src/generation.c).
 */
static GridhaStatement submit_orphans_stmt = {
	"SELECT o.service_id, o.batch_id, o.epoch FROM gridha_internal.worker_orphans($1) o",
	1, {UUIDOID}
};

static GridhaStatement submit_orphans_1_2_stmt = {
	"SELECT o.service_id, o.batch_id, o.epoch FROM gridha.worker_orphans($1) o",
	1, {UUIDOID}
};

/* A handed-out batch, in hand until its outcome is reported */
typedef struct SubmitBatch
{
	MemoryContext cxt;			/* everything of the batch; deleted with it */
	char	   *service_id;
	char	   *batch_id;
	bytea	   *payload;		/* NULL for a NULL payload */
	int64		epoch;
	int32		attempt;
	char	   *target;
	char	   *submit_url;		/* NULL: submit_function */
	Oid			submit_function;
	GridhaHttpTarget http;		/* its headers and rejecting codes */
	bool		fire_and_forget;	/* the target has no status source */
	char	   *problem;		/* the target cannot be used: why */
	TimestampTz started_at;		/* when its POST started */
} SubmitBatch;

/* One report waiting to be sent */
typedef struct SubmitReport
{
	char	   *service_id;
	char	   *batch_id;
	int64		epoch;
	char	   *word;			/* outcome, or the ledger's status */
	char	   *detail;			/* NULL: none */
	bool		commit_after;	/* accepted by a fire-and-forget target */
} SubmitReport;

static MemoryContext submit_cxt = NULL; /* reset every cycle */
static MemoryContext submit_batches_cxt = NULL; /* parent of in-flight batches */
static GridhaHttp *submit_http = NULL;
static GridhaHttpMulti *submit_multi = NULL;
static pg_uuid_t submit_instance;
static int	submit_in_flight = 0;
static List *submit_in_hand = NIL;	/* SubmitBatch * POSTed and not done, in
									 * submit_batches_cxt */
static List *submit_waiting = NIL;	/* SubmitBatch * handed out, not POSTed
									 * yet, in submit_batches_cxt */
static TimestampTz submit_last_poll = 0;	/* when the last poll ended */
static long submit_away_ms = 0; /* how long before this poll nobody looked:
								 * an answer may have waited that long */
static long submit_conn_host = 0;	/* the multi's connection bounds now */
static long submit_conn_total = 0;
static List *submit_submissions = NIL;	/* SubmitReport *, in submit_cxt */
static List *submit_statuses = NIL;
static TimestampTz submit_next_monitor = 0;	/* when the next monitor round
												 * is due */
static TimestampTz submit_last_maintenance = 0;
static bool submit_orphans_due = true;	/* look for orphans next cycle */
static long submit_slot_ms = -1;	/* ms until a rate-limited target of a
									 * ready head has a slot; -1: none */

/*
 * gridha_submit_init: the worker's HTTP handles and memory.
 */
void
gridha_submit_init(const pg_uuid_t *instance_id)
{
	submit_instance = *instance_id;
	gridha_step_init();
	submit_cxt = AllocSetContextCreate(TopMemoryContext, "gridha worker cycle",
									   ALLOCSET_DEFAULT_SIZES);
	submit_batches_cxt = AllocSetContextCreate(TopMemoryContext, "gridha batches in flight",
											   ALLOCSET_SMALL_SIZES);
	if (gridha_http_global_init() != 0 || (submit_http = gridha_http_create()) == NULL ||
		(submit_multi = gridha_http_multi_create()) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("gridha worker could not initialise libcurl")));
}

void
gridha_submit_shutdown(void)
{
	if (submit_multi != NULL)
		gridha_http_multi_destroy(submit_multi);
	if (submit_http != NULL)
		gridha_http_destroy(submit_http);
	submit_multi = NULL;
	submit_http = NULL;
}

static Datum
submit_instance_datum(void)
{
	return UUIDPGetDatum(&submit_instance);
}

/*
 * submit_publish: shows this worker's POSTs in flight and limits in its
 * slot (gridha.workers, gridha.worker_limits()), and bounds the multi's
 * connections by the limits: no more than the limits together, and a
 * status run each (targets may share a host, so the bound per host is the
 * same).
 */
static void
submit_publish(void)
{
	GridhaSlotLimit shown[GRIDHA_SLOT_LIMITS];
	TimestampTz now = GetCurrentTimestamp();
	long		max_host = 0;
	long		total = 0;
	int			n = 0;
	ListCell   *lc;

	foreach(lc, gridha_limits)
	{
		GridhaLimit *l = lfirst(lc);

		if (l->in_flight == 0 &&
			TimestampDifferenceExceeds(l->used_at, now, SUBMIT_LIMIT_SHOWN_MS))
			continue;
		total += (long) l->limit + 1;
		max_host = total;
		if (n < GRIDHA_SLOT_LIMITS)
		{
			int			len = pg_mbcliplen(l->target, strlen(l->target),
										   GRIDHA_SLOT_TARGET_LEN - 1);

			memcpy(shown[n].target, l->target, len);
			shown[n].target[len] = '\0';
			shown[n].in_flight = l->in_flight;
			shown[n].limit = (int) l->limit;
			shown[n].failures = l->failures;
			n++;
		}
	}
	gridha_slot_set_limits(shown, n);
	gridha_slot_set_in_flight(submit_in_flight);
	if (submit_multi != NULL && max_host > 0 &&
		(max_host != submit_conn_host || total != submit_conn_total))
	{
		gridha_http_multi_set_connections(submit_multi, max_host, total);
		submit_conn_host = max_host;
		submit_conn_total = total;
	}
}

/*
 * submit_handout_room: how many more batches the worker may take in hand:
 * the limits of the targets it talked to lately together (the ceiling
 * before it talked to any), under the ceiling, less what it has in hand.
 */
static int
submit_handout_room(void)
{
	TimestampTz now = GetCurrentTimestamp();
	int			budget = 0;
	bool		any = false;
	ListCell   *lc;

	foreach(lc, gridha_limits)
	{
		GridhaLimit *l = lfirst(lc);

		if (l->in_flight == 0 &&
			TimestampDifferenceExceeds(l->used_at, now, SUBMIT_LIMIT_SHOWN_MS))
			continue;
		budget += (int) l->limit;
		any = true;
	}
	if (!any || budget > gridha_worker_inflight)
		budget = gridha_worker_inflight;
	return budget - submit_in_flight - list_length(submit_waiting);
}

static char *
submit_text_col(int row, int col, MemoryContext cxt)
{
	char	   *v = SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col);

	return v ? MemoryContextStrdup(cxt, v) : NULL;
}

static char *
submit_strdup(MemoryContext cxt, const char *s)
{
	return s ? MemoryContextStrdup(cxt, s) : NULL;
}

/*
 * submit_valid_text: s as far as it is valid in the database's encoding: a
 * detail cut at a byte count (a buffer of the HTTP code, say) may end
 * inside a character, and what the worker writes must load again from a
 * dump. palloc'd.
 */
static char *
submit_valid_text(const char *s)
{
	int			len = strlen(s);

	return pnstrdup(s, pg_encoding_verifymbstr(GetDatabaseEncoding(), s, len));
}

/*
 * submit_clip: at most max_bytes of s, cut on a character boundary.
 * palloc'd.
 */
static char *
submit_clip(const char *s, int max_bytes)
{
	return pnstrdup(s, pg_mbcliplen(s, strlen(s), max_bytes));
}

/*
 * submit_add_report: queues a report of a submission's outcome, or of a
 * ledger status (status true); sent by submit_flush. The detail is cut
 * before the first byte not valid in the database's encoding.
 */
static void
submit_add_report(bool status, const char *service_id, const char *batch_id, int64 epoch,
				  const char *word, const char *detail, bool commit_after)
{
	MemoryContext old = MemoryContextSwitchTo(submit_cxt);
	SubmitReport *r = palloc0(sizeof(SubmitReport));

	r->service_id = pstrdup(service_id);
	r->batch_id = pstrdup(batch_id);
	r->epoch = epoch;
	r->word = pstrdup(word);
	r->detail = detail ? submit_valid_text(detail) : NULL;
	r->commit_after = commit_after;
	if (status)
		submit_statuses = lappend(submit_statuses, r);
	else
		submit_submissions = lappend(submit_submissions, r);
	MemoryContextSwitchTo(old);
}

/*
 * submit_target_of: fills a batch's target from the judged targets (its
 * own copies: they outlive the cycle), or its problem when the worker
 * cannot use it. Inside a step, after gridha_targets_refresh.
 */
static void
submit_target_of(SubmitBatch *b)
{
	const GridhaTarget *t = b->target ? gridha_target_get(b->target) : NULL;
	MemoryContext old;
	int			i;

	old = MemoryContextSwitchTo(b->cxt);
	if (t == NULL)
		b->problem = psprintf("service \"%s\" has no target row", b->service_id);
	else if (!gridha_target_servable(t, GRIDHA_SERVES_ALL))
		b->problem = pstrdup(t->unusable ? t->unusable : "the target cannot be served");
	else
	{
		b->submit_url = submit_strdup(b->cxt, t->submit_url);
		b->submit_function = t->submit_function;
		b->fire_and_forget = t->status_kind == 0;
		if (t->reject_codes != NULL)
		{
			int		   *codes = palloc(sizeof(int) * Max(t->n_reject_codes, 1));

			memcpy(codes, t->reject_codes, sizeof(int) * t->n_reject_codes);
			b->http.reject_codes = codes;
			b->http.n_reject_codes = t->n_reject_codes;
		}
		if (t->n_headers > 0)
		{
			char	  **headers = palloc(sizeof(char *) * t->n_headers);

			for (i = 0; i < t->n_headers; i++)
				headers[i] = pstrdup(t->headers[i]);
			b->http.headers = (const char *const *) headers;
			b->http.n_headers = t->n_headers;
		}
	}
	MemoryContextSwitchTo(old);
}

/* What the hand-out step hands to the cycle */
typedef struct SubmitHandout
{
	int			max;
	List	   *batches;		/* SubmitBatch * */
} SubmitHandout;

/* Step: hand out up to handout->max batches and look up their targets */
static void
submit_handout_step(void *arg)
{
	SubmitHandout *handout = (SubmitHandout *) arg;
	Datum		args[2];
	Datum	   *sids;
	uint64		n;
	uint64		i;
	uint64		k;
	SPITupleTable *batches;
	ListCell   *lc;
	MemoryContext old;

	submit_slot_ms = -1;
	args[0] = submit_instance_datum();
	args[1] = Int32GetDatum(handout->max);
	gridha_exec_served(&submit_handout_stmt, args, NULL, false);
	n = SPI_processed;
	if (n == 0)
	{
		submit_slot_ms = gridha_ratelimit_wait_ms(args[0]);
		return;
	}

	/* the rows are needed past the next statement */
	batches = SPI_tuptable;
	sids = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		MemoryContext bcxt = AllocSetContextCreate(submit_batches_cxt, "gridha batch",
												   ALLOCSET_SMALL_SIZES);
		SubmitBatch *b = MemoryContextAllocZero(bcxt, sizeof(SubmitBatch));
		bool		isnull;
		Datum		d;

		b->cxt = bcxt;
		b->service_id = MemoryContextStrdup(bcxt, SPI_getvalue(batches->vals[i], batches->tupdesc, 1));
		b->batch_id = MemoryContextStrdup(bcxt, SPI_getvalue(batches->vals[i], batches->tupdesc, 2));
		d = SPI_getbinval(batches->vals[i], batches->tupdesc, 3, &isnull);
		if (!isnull)
		{
			old = MemoryContextSwitchTo(bcxt);
			b->payload = DatumGetByteaPCopy(d);
			MemoryContextSwitchTo(old);
		}
		b->epoch = DatumGetInt64(SPI_getbinval(batches->vals[i], batches->tupdesc, 4, &isnull));
		b->attempt = DatumGetInt32(SPI_getbinval(batches->vals[i], batches->tupdesc, 5, &isnull));
		old = MemoryContextSwitchTo(submit_cxt);
		handout->batches = lappend(handout->batches, b);
		MemoryContextSwitchTo(old);
		sids[i] = CStringGetTextDatum(b->service_id);
	}

	gridha_targets_refresh();
	args[0] = gridha_text_array(sids, (int) n);
	gridha_exec_served(gridha_sql_generation() == GRIDHA_SQL_1_2 ? &submit_targets_1_2_stmt :
					   &submit_targets_stmt, args, NULL, true);
	for (k = 0; k < SPI_processed; k++)
	{
		char	   *sid = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1);
		ListCell   *bc;

		foreach(bc, handout->batches)
		{
			SubmitBatch *b = lfirst(bc);

			if (strcmp(b->service_id, sid) == 0)
				b->target = submit_text_col(k, 2, b->cxt);
		}
	}
	foreach(lc, handout->batches)
		submit_target_of((SubmitBatch *) lfirst(lc));
}

/*
 * submit_batch_done: the batch's outcome is known: queue its report and
 * let it go.
 */
static void
submit_batch_done(SubmitBatch *b, const char *outcome, const char *detail)
{
	submit_add_report(false, b->service_id, b->batch_id, b->epoch, outcome, detail,
					  strcmp(outcome, "accepted") == 0 && b->fire_and_forget);
	MemoryContextDelete(b->cxt);
}

/* Step: call a target's submit_function */
typedef struct SubmitCall
{
	SubmitBatch *batch;
	char	   *outcome;		/* in submit_cxt */
} SubmitCall;

static void
submit_function_step(void *arg)
{
	SubmitCall *call = (SubmitCall *) arg;
	SubmitBatch *b = call->batch;
	List	   *args;
	FuncExpr   *expr;
	ExprState  *state;
	ExprContext *econtext;
	Datum		result;
	bool		isnull;
	int			nest;

	gridha_step_function_lock(b->submit_function, "submit_function", b->target, false);
	args = list_make4(gridha_step_text_const(TEXTOID, CStringGetTextDatum(b->service_id), false),
					  gridha_step_text_const(TEXTOID, CStringGetTextDatum(b->batch_id), false),
					  makeConst(BYTEAOID, -1, InvalidOid, -1,
								b->payload ? PointerGetDatum(b->payload) : (Datum) 0,
								b->payload == NULL, false),
					  makeConst(INT8OID, -1, InvalidOid, sizeof(int64),
								Int64GetDatum(b->epoch), false, FLOAT8PASSBYVAL));
	expr = makeFuncExpr(b->submit_function, TEXTOID, args, InvalidOid,
						DEFAULT_COLLATION_OID, COERCE_EXPLICIT_CALL);
	econtext = CreateStandaloneExprContext();
	nest = gridha_step_call_begin(b->target);
	/* the executor checks EXECUTE, and runs a SECURITY DEFINER's as its owner */
	state = ExecInitExpr((Expr *) expr, NULL);
	result = ExecEvalExprSwitchContext(state, econtext, &isnull);
	call->outcome = isnull ? NULL : MemoryContextStrdup(submit_cxt, TextDatumGetCString(result));
	FreeExprContext(econtext, true);
	gridha_step_call_end(nest);
}

/*
 * submit_by_function: calls the target's function in a step and takes its
 * word; a failure (an error, a timeout, a cancel) or another word delays
 * the batch, its detail saying which: the error's message or the word
 * ("null" for NULL), cut to whole characters.
 */
static void
submit_by_function(SubmitBatch *b)
{
	SubmitCall	call = {b, NULL};
	char	   *failure;
	char	   *detail;

	gridha_slot_set_state(GRIDHA_WS_SUBMITTING, b->service_id, b->batch_id);
	if (!gridha_step_run_call(submit_function_step, &call, "submit function", &failure, false))
	{
		/* it raised an error (logged by the step): try again later */
		detail = psprintf("submit function failed: %s",
						  submit_clip(failure, SUBMIT_ANSWER_MAX_BYTES));
		submit_batch_done(b, "delayed", detail);
		return;
	}
	if (call.outcome != NULL &&
		(strcmp(call.outcome, "accepted") == 0 || strcmp(call.outcome, "delayed") == 0 ||
		 strcmp(call.outcome, "rejected") == 0))
	{
		detail = psprintf("submit function: %s", call.outcome);
		submit_batch_done(b, call.outcome, detail);
		return;
	}
	/* it said something else: try again later */
	detail = psprintf("submit function returned \"%s\"",
					  call.outcome ? submit_clip(call.outcome, SUBMIT_ANSWER_MAX_BYTES) : "null");
	submit_batch_done(b, "delayed", detail);
}

/*
 * submit_http_done: a POST finished: its target's limit learns from it;
 * answers that delay a batch are warned about (once a minute per target
 * and code), failures without an answer counted and logged quietly
 * (gridha_target_note); the report is queued.
 */
static void
submit_http_done(GridhaHttpDone *done)
{
	SubmitBatch *b = (SubmitBatch *) done->tag;

	gridha_limit_done(gridha_limit_of(b->target), done, b->started_at, submit_away_ms);
	if (done->outcome == GRIDHA_SUBMIT_DELAYED && done->http_code != 0)
	{
		char		reason[64];

		snprintf(reason, sizeof(reason), "the ledger answered http %ld", done->http_code);
		gridha_target_warn_answer(b->target, reason);
	}
	else if (done->http_code == 0)
		(void) gridha_target_note(b->target, "POSTs got no answer", done->detail);
	submit_in_flight--;
	submit_in_hand = list_delete_ptr(submit_in_hand, b);
	submit_batch_done(b, gridha_http_outcome_name(done->outcome), done->detail);
}

/*
 * submit_start_waiting: POSTs every waiting batch whose target has room
 * (gridha_limit_start), in the order they were handed out; the others
 * keep waiting. Nothing starts once the worker is stopping.
 */
static void
submit_start_waiting(void)
{
	List	   *still = NIL;
	ListCell   *lc;
	MemoryContext old;

	if (submit_waiting == NIL || submit_multi == NULL || gridha_step_stopping)
		return;
	old = MemoryContextSwitchTo(submit_batches_cxt);
	foreach(lc, submit_waiting)
	{
		SubmitBatch *b = lfirst(lc);
		GridhaLimit *l = gridha_limit_of(b->target);

		if (!gridha_limit_start(l, false))
		{
			still = lappend(still, b);
			continue;
		}
		gridha_slot_set_state(GRIDHA_WS_SUBMITTING, b->service_id, b->batch_id);
		b->started_at = GetCurrentTimestamp();
		(void) gridha_http_multi_submit(submit_multi, b, b->submit_url, &b->http,
										b->service_id, b->batch_id, (long long) b->epoch,
										b->attempt,
										b->payload ? VARDATA_ANY(b->payload) : "",
										b->payload ? VARSIZE_ANY_EXHDR(b->payload) : 0,
										gridha_submit_timeout_ms);
		l->in_flight++;
		submit_in_flight++;
		submit_in_hand = lappend(submit_in_hand, b);
	}
	list_free(submit_waiting);
	submit_waiting = still;
	MemoryContextSwitchTo(old);
}

/*
 * gridha_submit_poll: moves the requests in flight on, waiting up to
 * wait_ms for one to finish (with nothing in flight, for the latch, which
 * it leaves set for the caller to see), queues the reports of those that
 * did, and POSTs the waiting batches that now have room. Never blocks
 * longer than wait_ms. Returns how many requests finished.
 */
int
gridha_submit_poll(long wait_ms)
{
	GridhaHttpDone done[16];
	int			n;
	int			i;
	int			finished = 0;

	submit_away_ms = submit_last_poll == 0 ? 0 :
		(long) ((GetCurrentTimestamp() - submit_last_poll) / 1000);
	submit_start_waiting();
	if (submit_multi == NULL || gridha_http_multi_pending(submit_multi) == 0)
	{
		if (wait_ms > 0 && submit_waiting != NIL)
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 wait_ms, gridha_wait_event(GRIDHA_WAIT_LIMIT));
	}
	else
	{
		do
		{
			pgstat_report_wait_start(gridha_wait_event(submit_in_flight > 0 ?
															  GRIDHA_WAIT_LEDGER_ANSWER :
															  GRIDHA_WAIT_STATUS_POLL));
			n = gridha_http_multi_perform(submit_multi, wait_ms, done, lengthof(done));
			pgstat_report_wait_end();
			for (i = 0; i < n; i++)
			{
				if (done[i].is_status)
					gridha_monitor_done(&done[i], submit_away_ms);
				else
					submit_http_done(&done[i]);
			}
			finished += n;
			wait_ms = 0;
		} while (n == lengthof(done));
	}
	submit_start_waiting();
	submit_publish();
	submit_last_poll = GetCurrentTimestamp();
	return finished;
}

/*
 * gridha_submit_in_flight: what the worker has under way on the network:
 * POSTs in flight, batches waiting for room, status runs.
 */
int
gridha_submit_in_flight(void)
{
	return submit_in_flight + list_length(submit_waiting) + gridha_monitor_runs();
}

/*
 * submit_start: sends a handed-out batch on its way: a POST (waiting for
 * room, then left in flight), a function call (its outcome known at once), or, when its
 * target cannot be used, a delay with the reason.
 */
static void
submit_start(SubmitBatch *b)
{
	MemoryContext old;

	if (b->problem == NULL && b->submit_url == NULL && gridha_step_refuses_functions() != NULL)
		b->problem = MemoryContextStrdup(b->cxt, gridha_step_refuses_functions());
	if (b->problem != NULL)
	{
		if (b->target != NULL)
			gridha_target_warn(b->target, b->problem);
		submit_batch_done(b, "delayed", b->problem);
	}
	else if (b->submit_url != NULL)
	{
		/* POSTed by submit_start_waiting, as soon as its target has room */
		old = MemoryContextSwitchTo(submit_batches_cxt);
		submit_waiting = lappend(submit_waiting, b);
		MemoryContextSwitchTo(old);
	}
	else
		submit_by_function(b);
}

/* What a reports step sends and learns */
typedef struct SubmitFlush
{
	List	   *reports;		/* SubmitReport * */
	bool		status;			/* ledger statuses, not submissions */
	List	   *committed;		/* fire-and-forget batches now pending */
} SubmitFlush;

/*
 * submit_refused: logs one report the database turned down; an error that
 * is not a refusal leaves a batch submitting under this worker, an orphan.
 */
static void
submit_refused(const char *what, const char *service_id, const char *batch_id,
			   const char *sqlstate, const char *message)
{
	if (strcmp(sqlstate, "RG001") == 0 || strcmp(sqlstate, "RG002") == 0)
		ereport(LOG,
				(errmsg("gridha worker dropped a batch: %s of batch \"%s\" of service \"%s\" refused: %s",
						what, batch_id, service_id, message)));
	else
	{
		ereport(LOG,
				(errmsg("gridha worker: %s of batch \"%s\" of service \"%s\" failed: %s (%s)",
						what, batch_id, service_id, message, sqlstate)));
		submit_orphans_due = true;
	}
}

/* Step: the queued reports, one statement for all of them */
static void
submit_flush_step(void *arg)
{
	SubmitFlush *flush = (SubmitFlush *) arg;
	int			n = list_length(flush->reports);
	Datum	   *sids = palloc(sizeof(Datum) * n);
	Datum	   *bids = palloc(sizeof(Datum) * n);
	Datum	   *epochs = palloc(sizeof(Datum) * n);
	Datum	   *words = palloc(sizeof(Datum) * n);
	Datum	   *details = palloc(sizeof(Datum) * n);
	Datum		args[6];
	uint64		i;
	int			k = 0;
	ListCell   *lc;

	foreach(lc, flush->reports)
	{
		SubmitReport *r = lfirst(lc);

		sids[k] = CStringGetTextDatum(r->service_id);
		bids[k] = CStringGetTextDatum(r->batch_id);
		epochs[k] = Int64GetDatum(r->epoch);
		words[k] = CStringGetTextDatum(r->word);
		details[k] = CStringGetTextDatum(r->detail ? r->detail : "");
		k++;
	}
	args[0] = submit_instance_datum();
	args[1] = gridha_text_array(sids, n);
	args[2] = gridha_text_array(bids, n);
	args[3] = gridha_int8_array(epochs, n);
	args[4] = gridha_text_array(words, n);
	args[5] = gridha_text_array(details, n);
	gridha_exec_served(flush->status ? &submit_statuses_stmt : &submit_reports_stmt, args, NULL, false);

	for (i = 0; i < SPI_processed; i++)
	{
		char	   *sid = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		char	   *bid = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		char	   *status = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3);
		char	   *sqlstate = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 4);
		ListCell   *rc;

		if (sqlstate != NULL)
		{
			submit_refused(flush->status ? "report_status" : "report_submission", sid, bid,
						   sqlstate, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 5));
			continue;
		}
		/* accepted by a target without a status source: committed at once */
		if (!flush->status && status != NULL && strcmp(status, "pending") == 0)
			foreach(rc, flush->reports)
			{
				SubmitReport *r = lfirst(rc);

				if (r->commit_after && strcmp(r->service_id, sid) == 0 &&
					strcmp(r->batch_id, bid) == 0)
				{
					MemoryContext old = MemoryContextSwitchTo(submit_cxt);

					flush->committed = lappend(flush->committed, r);
					MemoryContextSwitchTo(old);
				}
			}
	}
}

/*
 * submit_send: sends a list of reports, submissions or ledger statuses, in
 * one step. Returns the fire-and-forget
 * submissions that were accepted. A step that fails as a whole leaves its
 * batches submitting under this worker: orphans, found again later. When
 * it failed because one row stayed locked past the lock timeout (another
 * session holds a claim row), the reports are sent again one at a time, so
 * that only that row's report waits for the next try.
 */
static List *
submit_send(List *reports, bool status)
{
	SubmitFlush flush = {reports, status, NIL};
	ListCell   *lc;
	int			sqlstate;

	if (reports == NIL)
		return NIL;
	gridha_slot_set_state(GRIDHA_WS_REPORTING, NULL, NULL);
	if (gridha_step_run(submit_flush_step, &flush,
					status ? "report_statuses" : "report_submissions", &sqlstate))
		return flush.committed;
	if (sqlstate != ERRCODE_LOCK_NOT_AVAILABLE || list_length(reports) == 1)
	{
		submit_orphans_due = true;
		return NIL;
	}
	flush.committed = NIL;
	foreach(lc, reports)
	{
		/* one row per statement: a refused row is logged by the step */
		SubmitFlush one = {list_make1(lfirst(lc)), status, NIL};

		if (gridha_step_run(submit_flush_step, &one, status ? "report_status" : "report_submission",
						&sqlstate))
			flush.committed = list_concat(flush.committed, one.committed);
		else
			submit_orphans_due = true;
	}
	return flush.committed;
}

/*
 * submit_flush: sends every queued report: the submissions first, then the
 * ledger statuses, with "committed" for what a target without a status
 * source accepted. Returns how many were sent.
 */
static int
submit_flush(void)
{
	List	   *committed;
	int			n;
	ListCell   *lc;

	/* the ledger's answers the monitor has gathered since the last flush */
	foreach(lc, gridha_monitor_take_answers(submit_cxt))
	{
		GridhaAnswer *a = lfirst(lc);

		submit_add_report(true, a->service_id, a->batch_id, a->epoch, a->status, NULL, false);
	}
	n = list_length(submit_submissions) + list_length(submit_statuses);
	committed = submit_send(submit_submissions, false);
	submit_submissions = NIL;
	foreach(lc, committed)
	{
		SubmitReport *r = lfirst(lc);

		submit_add_report(true, r->service_id, r->batch_id, r->epoch, "committed", NULL, false);
	}
	(void) submit_send(submit_statuses, true);
	submit_statuses = NIL;
	return n;
}

/* An orphan found by submit_orphans_step */
typedef struct SubmitOrphan
{
	char	   *service_id;
	char	   *batch_id;
	int64		epoch;
} SubmitOrphan;

/* Step: this worker's orphans, read as the worker's role; arg is a List ** */
static void
submit_orphans_step(void *arg)
{
	List	  **out = (List **) arg;
	Datum		args[1];
	uint64		i;
	MemoryContext old;

	args[0] = submit_instance_datum();
	gridha_exec_served(gridha_sql_generation() == GRIDHA_SQL_1_2 ? &submit_orphans_1_2_stmt :
				&submit_orphans_stmt, args, NULL, true);
	old = MemoryContextSwitchTo(submit_cxt);
	for (i = 0; i < SPI_processed; i++)
	{
		SubmitOrphan *o = palloc0(sizeof(SubmitOrphan));

		o->service_id = submit_text_col(i, 1, submit_cxt);
		o->batch_id = submit_text_col(i, 2, submit_cxt);
		o->epoch = gridha_col_int64(i, 3);
		*out = lappend(*out, o);
	}
	MemoryContextSwitchTo(old);
}

/*
 * submit_in_hand_has: whether the worker has this batch in hand: its POST
 * is in flight, or its outcome waits in the queued reports.
 */
static bool
submit_in_hand_has(const char *service_id, const char *batch_id)
{
	ListCell   *lc;

	foreach(lc, submit_in_hand)
	{
		SubmitBatch *b = lfirst(lc);

		if (strcmp(b->service_id, service_id) == 0 && strcmp(b->batch_id, batch_id) == 0)
			return true;
	}
	foreach(lc, submit_waiting)
	{
		SubmitBatch *b = lfirst(lc);

		if (strcmp(b->service_id, service_id) == 0 && strcmp(b->batch_id, batch_id) == 0)
			return true;
	}
	foreach(lc, submit_submissions)
	{
		SubmitReport *r = lfirst(lc);

		if (strcmp(r->service_id, service_id) == 0 && strcmp(r->batch_id, batch_id) == 0)
			return true;
	}
	return false;
}

/*
 * submit_recover_orphans: reports this worker's orphans delayed: batches
 * submitting under its claim that it does not have in hand (a report that
 * failed; an earlier run of the process). Run at the worker's first cycle
 * and after a report failed with an error. A batch whose POST is still in
 * flight is no orphan: its own report follows.
 */
static void
submit_recover_orphans(void)
{
	List	   *orphans = NIL;
	ListCell   *lc;

	if (!gridha_step_run(submit_orphans_step, &orphans, "looking for batches not in hand", NULL))
		return;					/* submit_orphans_due stays set: next cycle */
	submit_orphans_due = false;
	foreach(lc, orphans)
	{
		SubmitOrphan *o = lfirst(lc);

		if (submit_in_hand_has(o->service_id, o->batch_id))
			continue;
		ereport(LOG,
				(errmsg("gridha worker: batch \"%s\" of service \"%s\" was submitting but not in hand: reported delayed",
						o->batch_id, o->service_id)));
		submit_add_report(false, o->service_id, o->batch_id, o->epoch, "delayed",
						  "its report had failed: submitted again", false);
	}
}

/*
 * Step: the maintenance tick, when this worker leads the role (see
 * leader.c); run_maintenance itself decides whether a tick is due (a
 * function of the 1.3 script, or SQL 1.2's C symbol: src/leader12.c).
 */
static void
submit_maintenance_step(void *arg)
{
	Datum		args[1];

	args[0] = submit_instance_datum();
	gridha_exec_served(&submit_maintenance_stmt, args, NULL, false);
}

/*
 * gridha_submit_wait_ms: how long an idle worker may sleep: max_ms, or less
 * when the next monitor round is due sooner, or when the last hand-out
 * found ready heads waiting only for the next slot of their rate-limited
 * target, which opens sooner.
 */
long
gridha_submit_wait_ms(long max_ms)
{
	long		due_ms = gridha_submit_monitor_due_ms();

	if (due_ms < max_ms)
		max_ms = due_ms;
	if (submit_slot_ms >= 0 && submit_slot_ms < max_ms)
		return submit_slot_ms;
	return max_ms;
}

/*
 * gridha_submit_monitor_due_ms: milliseconds until the next monitor round
 * is due (0: now). A worker waiting for its requests or for work wakes for
 * it: a round that waited for a worker's full idle wait would hold every
 * batch whose ledger committed meanwhile that much longer.
 */
long
gridha_submit_monitor_due_ms(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (submit_next_monitor <= now)
		return 0;
	return (long) ((submit_next_monitor - now + 999) / 1000);
}

/*
 * submit_monitor_restart: the next monitor round, when the grid starts
 * again (the first round, one a whole interval late, or an interval made
 * shorter): half an interval to an interval and a half from now, at
 * random, so that workers started together keep to grids of their own
 * instead of asking, and then POSTing, at the same moments (a ledger with
 * a short accept queue would meet all their bursts at once).
 */
static TimestampTz
submit_monitor_restart(TimestampTz now)
{
	long		ms = Max(gridha_monitor_interval_ms, 1);

	return TimestampTzPlusMilliseconds(now, ms / 2 +
									   (long) pg_prng_uint64_range(&pg_global_prng_state, 0, ms - 1));
}

/*
 * gridha_submit_cycle: one cycle. Returns true when it did something that
 * may make more work ready at once (batches handed out, reports sent), so
 * the caller goes round again without sleeping.
 */
bool
gridha_submit_cycle(void)
{
	MemoryContext old = MemoryContextSwitchTo(submit_cxt);
	bool		busy = false;
	TimestampTz now;
	ListCell   *lc;

	if (submit_orphans_due)
		submit_recover_orphans();

	if (submit_handout_room() > 0 && !gridha_step_stopping)
	{
		SubmitHandout handout = {submit_handout_room(), NIL};

		gridha_slot_set_state(GRIDHA_WS_HANDING_OUT, NULL, NULL);
		if (gridha_step_run(submit_handout_step, &handout, "next_batches", NULL))
		{
			foreach(lc, handout.batches)
				submit_start((SubmitBatch *) lfirst(lc));
			submit_start_waiting();
			busy = handout.batches != NIL;
		}
		else
		{
			/* the batches it may have read are not handed out: forget them */
			foreach(lc, handout.batches)
				MemoryContextDelete(((SubmitBatch *) lfirst(lc))->cxt);
			gridha_slot_set_state(GRIDHA_WS_BACKING_OFF, NULL, NULL);
		}
	}
	gridha_submit_poll(0);

	now = GetCurrentTimestamp();
	/* further away than a restart puts it: the interval was made shorter */
	if (submit_next_monitor - now > (TimestampTz) gridha_monitor_interval_ms * 1500)
		submit_next_monitor = submit_monitor_restart(now);
	if (now >= submit_next_monitor)
	{
		/*
		 * The answers of the last status runs go in first. A batch whose
		 * answer was still queued would read as pending and be asked about
		 * again; by the time that second answer came, the first could have
		 * had it handed out anew, and a status report may move a batch
		 * submitting under the same epoch: a batch the ledger did not know
		 * was POSTed twice at once. Applied first, the pending batches read
		 * are those no question is out for.
		 */
		if (submit_flush() > 0)
			busy = true;
		/*
		 * Rounds keep to a grid of gridha.monitor_interval: a round that
		 * started late does not push the next ones later (a batch waits at
		 * most one interval for its question), unless it is a whole
		 * interval late.
		 */
		submit_next_monitor = TimestampTzPlusMilliseconds(submit_next_monitor,
														  gridha_monitor_interval_ms);
		if (submit_next_monitor <= now)
			submit_next_monitor = submit_monitor_restart(now);
		gridha_monitor_round(submit_instance_datum(), submit_multi);
	}
	if (submit_flush() > 0)
		busy = true;

	if (TimestampDifferenceExceeds(submit_last_maintenance, now, gridha_maintenance_interval_ms))
	{
		submit_last_maintenance = now;
		(void) gridha_step_run(submit_maintenance_step, NULL, "run_maintenance", NULL);
	}
	gridha_target_notes_flush();
	submit_publish();
	MemoryContextSwitchTo(old);
	/* everything of this cycle is reported: its memory can go */
	MemoryContextReset(submit_cxt);
	return busy;
}

/*
 * gridha_submit_drain: at stop, in well under a second: the batches still
 * waiting are handed back (reported delayed: they were never sent), the
 * POSTs in flight get SUBMIT_STOP_DRAIN_MS to be answered, and those that
 * were not are let go and reported delayed too (the ledger may have taken
 * them: it sees them again from their next holder, as a duplicate). Status
 * runs are let go: their batches stay pending, asked about by the next
 * holder. Every outcome is reported.
 */
void
gridha_submit_drain(void)
{
	MemoryContext old = MemoryContextSwitchTo(submit_cxt);
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), SUBMIT_STOP_DRAIN_MS);
	ListCell   *lc;

	foreach(lc, submit_waiting)
		submit_batch_done((SubmitBatch *) lfirst(lc), "delayed",
						  "the worker stopped before sending it");
	submit_waiting = NIL;
	while (submit_in_flight > 0 && GetCurrentTimestamp() < until)
		gridha_submit_poll(20);
	if (submit_multi != NULL)
		gridha_http_multi_destroy(submit_multi);
	submit_multi = NULL;
	foreach(lc, submit_in_hand)
		submit_batch_done((SubmitBatch *) lfirst(lc), "delayed",
						  "no answer before the worker stopped: submitted again");
	submit_in_hand = NIL;
	submit_in_flight = 0;
	gridha_monitor_forget(false);
	(void) submit_flush();
	MemoryContextSwitchTo(old);
	MemoryContextReset(submit_cxt);
}

/*
 * gridha_submit_forget: the extension was dropped: nothing under way can
 * be reported any more. The POSTs in flight are let go, and the next
 * cycle starts afresh (looking for orphans of its own, and asking which
 * SQL version is installed).
 */
void
gridha_submit_forget(void)
{
	ListCell   *lc;

	if (submit_multi != NULL)
		gridha_http_multi_destroy(submit_multi);
	submit_multi = gridha_http_multi_create();
	if (submit_multi == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("gridha worker could not initialise libcurl")));
	MemoryContextReset(submit_batches_cxt);
	MemoryContextReset(submit_cxt);
	submit_in_flight = 0;
	submit_in_hand = NIL;
	submit_waiting = NIL;
	gridha_monitor_forget(true);
	submit_conn_host = submit_conn_total = 0;
	foreach(lc, gridha_limits)
	{
		GridhaLimit *l = lfirst(lc);

		l->in_flight = 0;
		l->status_running = false;
	}
	submit_submissions = NIL;
	submit_statuses = NIL;
	submit_orphans_due = true;
	gridha_slot_set_in_flight(0);
}
