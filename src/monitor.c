/*-------------------------------------------------------------------------
 *
 * monitor.c
 *		A background worker's ledger monitor: it reads the batches its
 *		instance has pending, asks each one's target about them (a status
 *		run over HTTP, or a call of the target's status function), and
 *		turns the answers that change a batch's status into answers the
 *		cycle reports (src/submit.c takes them with
 *		gridha_monitor_take_answers). It runs its own steps (src/step.c)
 *		and knows nothing of the cycle.
 *
 * Words:
 *   round      one call of gridha_monitor_round: the pending batches read
 *              in a step, grouped by target, and each group asked about
 *   answer     a batch whose status a target's answer changes: its
 *              service, batch, epoch and the ledger's word
 *   status run the GETs that ask one target about this worker's pending
 *              batches (src/dlt_http.c), in the same libcurl multi as the
 *              POSTs, never blocking; one per target at a time, counted in
 *              its limit
 *   omitted    a pending batch that a well-formed status answer left out
 *              (the ledger spoke of other batches, or split its id): it is
 *              counted (gridha.metrics' status_omitted_total), logged a
 *              line a minute per target at most, and asked about again
 *              after a pause that doubles each time, from twice
 *              gridha.monitor_interval up to 30 s, until an answer
 *              speaks of it again (its resubmissions do not reset the
 *              pause). After gridha.status_omitted_limit such answers in a
 *              row it is reported unknown: the ledger does not know it,
 *              and it is submitted again (the ledger dedupes it by its id)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "nodes/makefuncs.h"
#include "utils/builtins.h"
#include "utils/formatting.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "common.h"
#include "dlt_http.h"
#include "generation.h"
#include "limit.h"
#include "monitor.h"
#include "settings.h"
#include "slots.h"
#include "spi_util.h"
#include "step.h"
#include "targets.h"
#include "totals.h"

/* Pending batches polled per monitor round */
#define MONITOR_BATCHES	1000

/*
 * The longest pause before a batch a status answer left out is asked about
 * again: short enough that it is answered within 40 s of the ledger
 * behaving again
 */
#define MONITOR_OMITTED_MAX_MS	30000
/* The status of an entry no well-formed answer spoke of yet (a GET failed) */
#define MONITOR_NOT_ANSWERED		"?"

static GridhaStatement monitor_pending_1_2_stmt = {
	"SELECT p.service_id, p.batch_id, p.status::text, p.epoch, c.target"
	"  FROM gridha.pending_batches($1, $2) p"
	"  JOIN gridha.service_claims c ON c.service_id OPERATOR(pg_catalog.=) p.service_id"
	" ORDER BY c.target, p.submitted_at",
	2, {UUIDOID, INT4OID}
};

/*
 * ... on 1.3's SQL, with the Citus mode's branch: each branch's one-time
 * filter (citus_mode()) runs only the layout's own (one server's joins
 * gridha.service_claims, the mode's reads the bucket tables after
 * pending_batches' check of the instance)
 */
static GridhaStatement monitor_pending_stmt = {
	"SELECT p.service_id, p.batch_id, p.status::text, p.epoch, c.target, p.submitted_at"
	"  FROM gridha.pending_batches($1, $2) p"
	"  JOIN gridha.service_claims c ON c.service_id OPERATOR(pg_catalog.=) p.service_id"
	" WHERE NOT gridha_internal.citus_mode()"
	" UNION ALL"
	" SELECT m.service_id, m.batch_id, m.status, m.epoch, m.target, m.submitted_at"
	"  FROM gridha_internal.citus_worker_pending($1, $2) m"
	" WHERE gridha_internal.citus_mode()"
	" ORDER BY 5, 6",
	2, {UUIDOID, INT4OID}
};

/* A pending batch to ask the ledger about */
typedef struct MonitorPending
{
	char	   *service_id;
	char	   *batch_id;
	char	   *status;
	int64		epoch;
	char	   *target;
} MonitorPending;

/* A pending batch the ledger's status answers left out (see omitted) */
typedef struct MonitorOmitted
{
	uint64		key;			/* monitor_omitted_key: the hash key */
	char	   *service_id;		/* in TopMemoryContext */
	char	   *batch_id;
	int64		epoch;
	int			count;			/* answers in a row that left it out since
								 * it was last reported unknown */
	int			total;			/* ... since an answer last spoke of it */
	TimestampTz next_at;		/* not asked about before this */
	TimestampTz seen_at;		/* last read as pending, or left out */
} MonitorOmitted;

/* A status run in flight, with everything it needs at its end */
typedef struct MonitorRun
{
	MemoryContext cxt;			/* everything of the run; deleted with it */
	char	   *target;
	MonitorPending *rows;		/* the pending batches asked about */
	GridhaStatusEntry *entries;
	int			n;
	TimestampTz started_at;
} MonitorRun;

static List *monitor_runs = NIL; /* MonitorRun *, in monitor_runs_cxt */
static MemoryContext monitor_runs_cxt = NULL;	/* the runs in flight */
static MemoryContext monitor_round_cxt = NULL;	/* reset every round */
static MemoryContext monitor_answers_cxt = NULL;	/* until taken */
static List *monitor_answers = NIL; /* GridhaAnswer *, in monitor_answers_cxt */
static Datum monitor_instance;	/* the round's instance */
static GridhaHttpMulti *monitor_multi = NULL;	/* the round's multi */

static void monitor_omitted_sweep(bool all);

static HTAB *monitor_omitted = NULL; /* MonitorOmitted, in TopMemoryContext */

static char *
monitor_text_col(int row, int col, MemoryContext cxt)
{
	char	   *v = SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col);

	return v ? MemoryContextStrdup(cxt, v) : NULL;
}

/* monitor_answer: an answer for the cycle to report (copies its words) */
static void
monitor_answer(const char *service_id, const char *batch_id, int64 epoch, const char *status)
{
	MemoryContext old;
	GridhaAnswer *a;

	if (monitor_answers_cxt == NULL)
		monitor_answers_cxt = AllocSetContextCreate(TopMemoryContext, "gridha monitor answers",
													ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(monitor_answers_cxt);
	a = palloc(sizeof(GridhaAnswer));
	a->service_id = pstrdup(service_id);
	a->batch_id = pstrdup(batch_id);
	a->epoch = epoch;
	a->status = pstrdup(status);
	monitor_answers = lappend(monitor_answers, a);
	MemoryContextSwitchTo(old);
}

/*
 * gridha_monitor_take_answers: the answers not taken yet, in the order
 * they came, copied into cxt; the monitor forgets them.
 */
List *
gridha_monitor_take_answers(MemoryContext cxt)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);
	List	   *out = NIL;
	ListCell   *lc;

	foreach(lc, monitor_answers)
	{
		GridhaAnswer *a = lfirst(lc);
		GridhaAnswer *c = palloc(sizeof(GridhaAnswer));

		c->service_id = pstrdup(a->service_id);
		c->batch_id = pstrdup(a->batch_id);
		c->epoch = a->epoch;
		c->status = pstrdup(a->status);
		out = lappend(out, c);
	}
	MemoryContextSwitchTo(old);
	monitor_answers = NIL;
	if (monitor_answers_cxt != NULL)
		MemoryContextReset(monitor_answers_cxt);
	return out;
}

/* gridha_monitor_runs: how many status runs are out */
int
gridha_monitor_runs(void)
{
	return list_length(monitor_runs);
}

/*
 * gridha_monitor_forget: the status runs out are let go (their batches stay
 * pending, asked about again by whoever holds them next); with all, the
 * answers not taken and the batches answers left out are forgotten too
 * (the extension was dropped).
 */
void
gridha_monitor_forget(bool all)
{
	monitor_runs = NIL;
	monitor_multi = NULL;
	if (monitor_runs_cxt != NULL)
		MemoryContextReset(monitor_runs_cxt);
	if (all)
	{
		monitor_omitted_sweep(true);
		monitor_answers = NIL;
		if (monitor_answers_cxt != NULL)
			MemoryContextReset(monitor_answers_cxt);
	}
}

/* Step: the pending batches of this instance; arg is a List ** */
static void
monitor_pending_step(void *arg)
{
	List	  **out = (List **) arg;
	Datum		args[2];
	uint64		i;
	MemoryContext old;

	/* first: a refresh runs SQL of its own, which would replace the rows */
	gridha_targets_refresh();
	args[0] = monitor_instance;
	args[1] = Int32GetDatum(MONITOR_BATCHES);
	gridha_exec_served(gridha_sql_generation() == GRIDHA_SQL_1_2 ? &monitor_pending_1_2_stmt :
					   &monitor_pending_stmt, args, NULL, true);
	old = MemoryContextSwitchTo(monitor_round_cxt);
	for (i = 0; i < SPI_processed; i++)
	{
		MonitorPending *p = palloc0(sizeof(MonitorPending));

		p->service_id = monitor_text_col(i, 1, monitor_round_cxt);
		p->batch_id = monitor_text_col(i, 2, monitor_round_cxt);
		p->status = monitor_text_col(i, 3, monitor_round_cxt);
		p->epoch = gridha_col_int64(i, 4);
		p->target = monitor_text_col(i, 5, monitor_round_cxt);
		*out = lappend(*out, p);
	}
	MemoryContextSwitchTo(old);
}

/* Step: call a target's status_function for some batch ids */
typedef struct MonitorStatusCall
{
	Oid			function;
	const char *target;
	GridhaStatusEntry *entries;
	int			n;
	bool		malformed;
} MonitorStatusCall;

static void
monitor_status_function_step(void *arg)
{
	static const char *const words[] = {"pending", "valid", "committed", "invalid", "unknown"};
	MonitorStatusCall *call = (MonitorStatusCall *) arg;
	Datum	   *ids = palloc(sizeof(Datum) * call->n);
	FuncExpr   *expr;
	ExprContext *econtext;
	SetExprState *state;
	MemoryContext argcxt;
	Tuplestorestate *rows;
	TupleTableSlot *slot;
	TupleDesc	desc;
	Oid			rettype;
	List	   *got_ids = NIL;
	List	   *got_words = NIL;
	ListCell   *lc;
	ListCell   *lw;
	int			nest;
	int			k;

	gridha_step_function_lock(call->function, "status_function", call->target, true);
	if (get_func_result_type(call->function, &rettype, &desc) != TYPEFUNC_COMPOSITE ||
		desc->natts != 2 || TupleDescAttr(desc, 0)->atttypid != TEXTOID ||
		TupleDescAttr(desc, 1)->atttypid != TEXTOID)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
				 errmsg("status_function of target \"%s\" (OID %u) is not a status function",
						call->target, call->function)));
	for (k = 0; k < call->n; k++)
		ids[k] = CStringGetTextDatum(call->entries[k].batch_id);
	expr = makeFuncExpr(call->function, rettype,
						list_make1(gridha_step_text_const(TEXTARRAYOID, gridha_text_array(ids, call->n), false)),
						InvalidOid, DEFAULT_COLLATION_OID, COERCE_EXPLICIT_CALL);
	expr->funcretset = true;
	econtext = CreateStandaloneExprContext();
	argcxt = AllocSetContextCreate(CurrentMemoryContext, "gridha status function arguments",
								   ALLOCSET_DEFAULT_SIZES);
	nest = gridha_step_call_begin(call->target);
	state = ExecInitTableFunctionResult((Expr *) expr, econtext, NULL);
	rows = ExecMakeTableFunctionResult(state, econtext, argcxt, desc, false);
	slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
	while (tuplestore_gettupleslot(rows, true, false, slot))
	{
		bool		isnull;
		Datum		d;
		char	   *w = NULL;

		d = slot_getattr(slot, 1, &isnull);
		got_ids = lappend(got_ids, isnull ? NULL : TextDatumGetCString(d));
		d = slot_getattr(slot, 2, &isnull);
		if (!isnull)
		{
			w = TextDatumGetCString(d);
			w = str_tolower(w, strlen(w), DEFAULT_COLLATION_OID);
		}
		got_words = lappend(got_words, w);
	}
	ExecDropSingleTupleTableSlot(slot);
	tuplestore_end(rows);
	FreeExprContext(econtext, true);
	MemoryContextDelete(argcxt);
	gridha_step_call_end(nest);

	/* check every row first: an unknown word means nothing is applied */
	foreach(lw, got_words)
	{
		char	   *w = lfirst(lw);
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
	forboth(lc, got_ids, lw, got_words)
	{
		char	   *id = lfirst(lc);

		for (k = 0; k < call->n; k++)
			if (id != NULL && strcmp(id, call->entries[k].batch_id) == 0)
				strlcpy(call->entries[k].status, lfirst(lw), sizeof(call->entries[k].status));
	}
}

/* ----------------------------------------------------------------------
 * Batches the status answers left out
 * ----------------------------------------------------------------------
 */

/* monitor_omitted_key: the hash key of a batch */
static uint64
monitor_omitted_key(const char *service_id, const char *batch_id)
{
	uint64		h = hash_bytes_extended((const unsigned char *) service_id,
										(int) strlen(service_id), 0);

	return hash_bytes_extended((const unsigned char *) batch_id, (int) strlen(batch_id), h);
}

/*
 * monitor_omitted_find: the entry of a batch, NULL when it has none; with
 * create, a new entry (count 0) when it has none. Two batches of the same
 * key (a hash collision) share the entry: the newer one takes it over.
 */
static MonitorOmitted *
monitor_omitted_find(const char *service_id, const char *batch_id, bool create)
{
	uint64		key = monitor_omitted_key(service_id, batch_id);
	MonitorOmitted *o;
	bool		found;

	if (monitor_omitted == NULL)
	{
		HASHCTL		ctl;

		if (!create)
			return NULL;
		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(uint64);
		ctl.entrysize = sizeof(MonitorOmitted);
		ctl.hcxt = TopMemoryContext;
		monitor_omitted = hash_create("gridha omitted batches", 64, &ctl,
									 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	o = hash_search(monitor_omitted, &key, create ? HASH_ENTER : HASH_FIND, &found);
	if (o == NULL)
		return NULL;
	if (found && strcmp(o->service_id, service_id) == 0 && strcmp(o->batch_id, batch_id) == 0)
		return o;
	if (!create)
		return NULL;
	if (found)
	{
		pfree(o->service_id);
		pfree(o->batch_id);
	}
	o->service_id = MemoryContextStrdup(TopMemoryContext, service_id);
	o->batch_id = MemoryContextStrdup(TopMemoryContext, batch_id);
	o->epoch = 0;
	o->count = 0;
	o->total = 0;
	o->next_at = 0;
	o->seen_at = GetCurrentTimestamp();
	return o;
}

/* monitor_omitted_drop: the batch's entry goes */
static void
monitor_omitted_drop(MonitorOmitted *o)
{
	uint64		key = o->key;

	pfree(o->service_id);
	pfree(o->batch_id);
	(void) hash_search(monitor_omitted, &key, HASH_REMOVE, NULL);
}

/*
 * monitor_omitted_sweep: the entries of batches not read as pending for
 * twice the longest pause go (they moved on: committed, or taken by
 * another worker); with all, every entry goes.
 */
static void
monitor_omitted_sweep(bool all)
{
	HASH_SEQ_STATUS seq;
	MonitorOmitted *o;
	TimestampTz now = GetCurrentTimestamp();

	if (monitor_omitted == NULL)
		return;
	hash_seq_init(&seq, monitor_omitted);
	while ((o = hash_seq_search(&seq)) != NULL)
	{
		if (all || TimestampDifferenceExceeds(o->seen_at, now, 2 * GRIDHA_BACKOFF_MAX_MS))
			monitor_omitted_drop(o);
	}
}

/*
 * monitor_omitted_note: a well-formed status answer of target left out the
 * pending batch p: counted, logged (a line a minute per target at most),
 * asked about again after a pause that doubles each time; after
 * gridha.status_omitted_limit such answers in a row, reported unknown.
 */
static void
monitor_omitted_note(const char *target, const MonitorPending *p, TimestampTz now)
{
	MonitorOmitted *o = monitor_omitted_find(p->service_id, p->batch_id, true);
	char		detail[256];
	int64		ms;

	if (o->epoch != p->epoch)
	{
		o->epoch = p->epoch;
		o->count = 0;
		o->total = 0;
	}
	o->count++;
	o->total++;
	o->seen_at = now;
	ms = Min((int64) gridha_monitor_interval_ms << Min(o->total, 16), MONITOR_OMITTED_MAX_MS);
	o->next_at = TimestampTzPlusMilliseconds(now, ms);
	gridha_totals_note(target, GRIDHA_TOTAL_STATUS_OMITTED);
	if (gridha_status_omitted_limit > 0 && o->count >= gridha_status_omitted_limit)
	{
		snprintf(detail, sizeof(detail),
				 "batch \"%s\" of service \"%s\", left out %d times in a row",
				 p->batch_id, p->service_id, o->total);
		(void) gridha_target_note(target,
								  "a batch the status answers kept leaving out is reported unknown and submitted again",
								  detail);
		monitor_answer(p->service_id, p->batch_id, p->epoch, "unknown");
		o->count = 0;
		return;
	}
	snprintf(detail, sizeof(detail),
			 "batch \"%s\" of service \"%s\" (%d in a row; asked again in " INT64_FORMAT " ms)",
			 p->batch_id, p->service_id, o->total, ms);
	(void) gridha_target_note(target, "a status answer left out a batch asked about", detail);
}

/*
 * monitor_omitted_resting: whether p is left out of this round's questions:
 * an answer left it out, and its pause has not passed. Marks its entry as
 * seen this round.
 */
static bool
monitor_omitted_resting(const MonitorPending *p, TimestampTz now)
{
	MonitorOmitted *o = monitor_omitted_find(p->service_id, p->batch_id, false);

	if (o == NULL)
		return false;
	o->seen_at = now;
	if (o->epoch != p->epoch)
	{
		o->epoch = p->epoch;
		o->count = 0;
		o->total = 0;
		o->next_at = 0;
	}
	return now < o->next_at;
}

/*
 * monitor_apply_statuses: queues a report for each of the n pending
 * batches of target whose status the ledger's word in entries changes. An
 * entry no answer spoke of (MONITOR_NOT_ANSWERED: its GET failed) is left
 * for the next round; one a well-formed answer left out ("") is omitted.
 */
static void
monitor_apply_statuses(const char *target, MonitorPending *const *rows,
					  GridhaStatusEntry *entries, int n)
{
	TimestampTz now = GetCurrentTimestamp();
	int			k;

	for (k = 0; k < n; k++)
	{
		const MonitorPending *p = rows[k];
		MonitorOmitted *o;

		if (strcmp(entries[k].status, MONITOR_NOT_ANSWERED) == 0)
			continue;
		if (entries[k].status[0] == '\0')
		{
			monitor_omitted_note(target, p, now);
			continue;
		}
		if ((o = monitor_omitted_find(p->service_id, p->batch_id, false)) != NULL)
			monitor_omitted_drop(o);
		if (strcmp(entries[k].status, p->status) == 0)
			continue;
		monitor_answer(p->service_id, p->batch_id, p->epoch, entries[k].status);
	}
}

/*
 * monitor_status_start: starts a status run for n pending batches of a
 * target with a status_url, unless one is still out for it (the batches
 * are asked about again next round). The rows are copied: the run
 * outlives the cycle.
 */
static void
monitor_status_start(const GridhaTarget *t, const char *target, MonitorPending *const *rows, int n)
{
	GridhaLimit *l = gridha_limit_of(target);
	GridhaHttpTarget http = {(const char *const *) t->headers, t->n_headers,
	t->reject_codes, t->n_reject_codes};
	MemoryContext cxt;
	MemoryContext old;
	MonitorRun *run;
	int			k;

	if (l->status_running || monitor_multi == NULL || gridha_step_stopping ||
		GetCurrentTimestamp() < l->retry_at)
		return;
	if (monitor_runs_cxt == NULL)
		monitor_runs_cxt = AllocSetContextCreate(TopMemoryContext, "gridha status runs",
												 ALLOCSET_SMALL_SIZES);
	cxt = AllocSetContextCreate(monitor_runs_cxt, "gridha status run", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cxt);
	run = palloc0(sizeof(MonitorRun));
	run->cxt = cxt;
	run->target = pstrdup(target);
	run->n = n;
	run->rows = palloc0(sizeof(MonitorPending) * n);
	run->entries = palloc0(sizeof(GridhaStatusEntry) * n);
	for (k = 0; k < n; k++)
	{
		run->rows[k].service_id = pstrdup(rows[k]->service_id);
		run->rows[k].batch_id = pstrdup(rows[k]->batch_id);
		run->rows[k].status = pstrdup(rows[k]->status);
		run->rows[k].epoch = rows[k]->epoch;
		run->entries[k].batch_id = run->rows[k].batch_id;
		strlcpy(run->entries[k].status, MONITOR_NOT_ANSWERED, sizeof(run->entries[k].status));
	}
	MemoryContextSwitchTo(old);

	(void) gridha_limit_start(l, true);
	run->started_at = GetCurrentTimestamp();
	if (gridha_http_multi_statuses(monitor_multi, run, t->status_url, &http, run->entries, n,
								   (size_t) gridha_status_url_max_length,
								   gridha_submit_timeout_ms) != 0)
	{
		MemoryContextDelete(cxt);
		return;
	}
	l->status_running = true;
	l->in_flight++;
	old = MemoryContextSwitchTo(monitor_runs_cxt);
	monitor_runs = lappend(monitor_runs, run);
	MemoryContextSwitchTo(old);
}

/*
 * gridha_monitor_done: a status run came back: its target's limit learns
 * from it, a failure is counted and logged quietly (the batches it did not
 * answer for are asked about again next round), and the answers that came
 * are applied either way.
 */
void
gridha_monitor_done(GridhaHttpDone *done, long away_ms)
{
	MonitorRun *run = (MonitorRun *) done->tag;
	GridhaLimit *l = gridha_limit_of(run->target);
	MonitorPending **rows = palloc(sizeof(MonitorPending *) * Max(run->n, 1));
	int			k;

	l->status_running = false;
	gridha_limit_done(l, done, run->started_at, away_ms);
	if (done->failed)
		(void) gridha_target_note(run->target,
								  done->http_code == 0 ? "status URL unreachable" : "status poll failed",
								  done->detail);
	for (k = 0; k < run->n; k++)
		rows[k] = &run->rows[k];
	monitor_apply_statuses(run->target, rows, run->entries, run->n);
	pfree(rows);
	monitor_runs = list_delete_ptr(monitor_runs, run);
	MemoryContextDelete(run->cxt);
}

/*
 * monitor_ask_ledger: asks a target about n pending batches: a status run
 * for a status_url (its answers are applied when it comes back), or at
 * once for a status_function or a target without a status source. A
 * status function that fails is logged as a failing status URL is
 * (gridha_target_note): its first failure, then a count at most once a
 * minute; its batches are asked about again next round.
 */
static void
monitor_ask_ledger(const char *target, MonitorPending *const *rows, int n)
{
	const GridhaTarget *t = gridha_target_get(target);
	GridhaStatusEntry *entries;
	char	   *failure;
	int			k;

	if (t == NULL || t->unusable != NULL)
	{
		gridha_target_warn(target, t ? t->unusable : "the target row is missing");
		return;
	}
	if (t->status_url != NULL)
	{
		monitor_status_start(t, target, rows, n);
		return;
	}
	entries = palloc0(sizeof(GridhaStatusEntry) * n);
	for (k = 0; k < n; k++)
		entries[k].batch_id = rows[k]->batch_id;
	if (OidIsValid(t->status_function))
	{
		MonitorStatusCall call = {t->status_function, target, entries, n, false};

		if (gridha_step_refuses_functions() != NULL)
		{
			gridha_target_warn(target, gridha_step_refuses_functions());
			return;
		}
		if (!gridha_step_run_call(monitor_status_function_step, &call, "status function",
								  &failure, true))
		{
			/* counted like a status URL's failures: a line, then a count a minute */
			(void) gridha_target_note(target, "status function failed", failure);
			pfree(failure);
			return;
		}
		if (call.malformed)
		{
			(void) gridha_target_note(target, "status function returned an unknown status word",
									  "nothing was applied; the poll is repeated");
			return;
		}
	}
	else
	{
		/*
		 * No status source: an accepted batch is committed, and was reported
		 * so at submission; one still pending here is one whose report
		 * failed then.
		 */
		for (k = 0; k < n; k++)
			strlcpy(entries[k].status, "committed", sizeof(entries[k].status));
	}
	monitor_apply_statuses(target, rows, entries, n);
}

/*
 * gridha_monitor_round: asks each target about this instance's pending batches;
 * a report is queued for each one whose status changed (for a status_url,
 * when its status run comes back).
 */
void
gridha_monitor_round(Datum instance, GridhaHttpMulti *multi)
{
	List	   *pending = NIL;
	MonitorPending **rows;
	TimestampTz now;
	int			start = 0;
	int			npending = 0;
	ListCell   *lc;

	monitor_instance = instance;
	monitor_multi = multi;
	if (monitor_round_cxt == NULL)
		monitor_round_cxt = AllocSetContextCreate(TopMemoryContext, "gridha monitor round",
												  ALLOCSET_DEFAULT_SIZES);
	MemoryContextReset(monitor_round_cxt);
	gridha_slot_set_state(GRIDHA_WS_MONITORING, NULL, NULL);
	if (!gridha_step_run(monitor_pending_step, &pending, "pending_batches", NULL))
		return;
	/* the batches an answer left out wait out their pause */
	now = GetCurrentTimestamp();
	rows = palloc(sizeof(MonitorPending *) * Max(list_length(pending), 1));
	foreach(lc, pending)
	{
		MonitorPending *p = lfirst(lc);

		if (!monitor_omitted_resting(p, now))
			rows[npending++] = p;
	}
	monitor_omitted_sweep(false);
	if (npending == 0)
		return;

	/* one run of batches per target (the rows are sorted by target) */
	while (start < npending)
	{
		int			end = start + 1;

		while (end < npending && strcmp(rows[end]->target, rows[start]->target) == 0)
			end++;
		monitor_ask_ledger(rows[start]->target, rows + start, end - start);
		start = end;
	}
}
