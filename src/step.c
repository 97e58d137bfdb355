/*-------------------------------------------------------------------------
 *
 * step.c
 *		A background worker's steps: each runs one piece of the worker's
 *		work in a transaction of its own, with the worker's settings, under
 *		its time limits; and its target calls, the calls of an
 *		administrator's target functions inside a step. Used by the cycle
 *		(src/submit.c) and the ledger monitor (src/monitor.c); it knows
 *		neither.
 *
 * Words:
 *   step       one transaction of the worker (a hand-out, the reports, the
 *              pending list, a call of a target function); each commits on
 *              its own, runs under gridha.worker_statement_timeout (and the
 *              session's lock timeout), and can be cancelled by SIGTERM. An
 *              error in one is logged (a status function's by its caller,
 *              counted: gridha_step_run_call), and the cycle carries on
 *   target call a call of a target's submit_function or status_function,
 *              in a step of its own (gridha_step_call_begin / gridha_step_call_end):
 *              the function is called by the OID the target was judged
 *              with (an overload added since cannot change or break the
 *              call), with search_path GRIDHA_TARGET_SEARCH_PATH, the
 *              deferred triggers it queued fired before the call ends, and
 *              nothing of it is left in the session afterwards: its
 *              settings are undone, its temporary objects dropped and its
 *              prepared statements deallocated
 *   watchdog   while a target call runs: a call that goes on
 *              STEP_CANCEL_GRACE_MS past its cancel (the statement
 *              timeout's, or SIGTERM's) swallowed it, and the worker ends
 *              itself (FATAL, which no PL/pgSQL handler catches)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_proc.h"
#include "commands/prepare.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "common.h"
#include "settings.h"
#include "step.h"

/* How long a target call may run past its cancel before the worker ends */
#define STEP_CANCEL_GRACE_MS	2000
/* How often the watchdog looks, while a target call runs */
#define STEP_WATCHDOG_MS		100

/*
 * The longest lock wait of a stopping worker (see
 * gridha_step_bound_lock_wait): below deadlock_timeout's default (1 s),
 * so a stopping worker gives a wait up before a deadlock check runs in it
 * and never ends its life as a deadlock's victim; what it could not hand
 * back is taken over when its session ends.
 */
#define STEP_STOP_LOCK_TIMEOUT_MS 200

/*
 * How long a commit of a stopping worker waits for a synchronous standby.
 * A backend that is terminated gives that wait up at once, its commit made
 * on this server only; a stopping worker gives the standby this long, then
 * does the same (step_stop_sync_expired), so a standby that is gone
 * cannot hold a fast shutdown up.
 */
#define STEP_STOP_SYNC_WAIT_MS 1000

volatile sig_atomic_t gridha_step_running = false;
volatile sig_atomic_t gridha_step_stopping = false;
volatile sig_atomic_t gridha_step_committing = false;
volatile sig_atomic_t gridha_step_cancelled = false;

static TimeoutId step_stop_sync_timeout = MAX_TIMEOUTS;

static bool step_failed = false;	/* a step failed since last asked */
static bool step_superuser = true;	/* the worker's role is a superuser, as
										 * of the last step (looked up only in
										 * a transaction) */

/* The watchdog of target calls (see the words at the top) */
static TimeoutId step_watchdog_timeout = MAX_TIMEOUTS;
static bool step_watchdog_armed = false;
static TimestampTz step_call_deadline = 0;	/* statement timeout + grace */
static TimestampTz step_cancel_seen = 0;	/* when it saw SIGTERM's cancel */
static volatile sig_atomic_t step_call_ended = false; /* it ended the worker */
static const char *step_call_target_name = NULL;	/* the target called */

/*
 * step_stop_sync_expired: a stopping worker's commit waited
 * STEP_STOP_SYNC_WAIT_MS for its synchronous standby; the wait checks for
 * a cancel request and gives up (a timeout handler: flags and the latch
 * only).
 */
static void
step_stop_sync_expired(void)
{
	QueryCancelPending = true;
	InterruptPending = true;
	SetLatch(MyLatch);
}

/*
 * gridha_step_commit: commits the worker's transaction. A wait for a
 * synchronous standby is bounded: SIGTERM cancels it (worker.c), and once
 * the worker is stopping a commit waits STEP_STOP_SYNC_WAIT_MS at most.
 * Either way the commit stands on this server, as a terminated backend's
 * does.
 */
void
gridha_step_commit(void)
{
	if (step_stop_sync_timeout == MAX_TIMEOUTS)
		step_stop_sync_timeout = RegisterTimeout(USER_TIMEOUT, step_stop_sync_expired);
	if (gridha_step_stopping)
		enable_timeout_after(step_stop_sync_timeout, STEP_STOP_SYNC_WAIT_MS);
	gridha_step_committing = true;
	PG_TRY();
	{
		CommitTransactionCommand();
	}
	PG_FINALLY();
	{
		gridha_step_committing = false;
		disable_timeout(step_stop_sync_timeout, false);
	}
	PG_END_TRY();
	/* committed: a cancel that came too late to end the wait has nothing to end */
	QueryCancelPending = false;
}

/*
 * step_exit_log: at the worker's exit, says why when the watchdog ended it
 * (the FATAL before says only "due to administrator command").
 */
static void
step_exit_log(int code, Datum arg)
{
	if (step_call_ended)
		ereport(LOG,
				(errmsg("gridha worker ended itself: a function of target \"%s\" ran on %d ms after it was cancelled",
						step_call_target_name ? step_call_target_name : "?",
						STEP_CANCEL_GRACE_MS),
				 errdetail("A target function that catches query_canceled cannot be stopped otherwise; the worker is started again unless an administrator stopped it or the server is shutting down.")));
}

/*
 * gridha_step_init: at the worker's start: its exit says why when the
 * watchdog ended it.
 */
void
gridha_step_init(void)
{
	before_shmem_exit(step_exit_log, (Datum) 0);
}

/*
 * step_watchdog: a timeout handler (flags and the latch only), every
 * STEP_WATCHDOG_MS while a target call runs. When the call has run
 * STEP_CANCEL_GRACE_MS past the statement timeout, or past the cancel
 * SIGTERM sent it, it swallowed that cancel: the worker ends (ProcDiePending
 * makes the next interrupt check raise FATAL, which ends the process; no
 * exception handler of the function can catch it).
 */
static void
step_watchdog(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (gridha_step_cancelled && step_cancel_seen == 0)
		step_cancel_seen = now;
	if ((step_call_deadline != 0 && now >= step_call_deadline) ||
		(step_cancel_seen != 0 &&
		 TimestampDifferenceExceeds(step_cancel_seen, now, STEP_CANCEL_GRACE_MS)))
	{
		step_call_ended = true;
		ProcDiePending = true;
		InterruptPending = true;
		SetLatch(MyLatch);
	}
}

/*
 * step_watchdog_arm: starts the watchdog for a target call of the
 * running step, whose statement timeout (when set) was armed at its start.
 */
static void
step_watchdog_arm(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (step_watchdog_timeout == MAX_TIMEOUTS)
		step_watchdog_timeout = RegisterTimeout(USER_TIMEOUT, step_watchdog);
	step_cancel_seen = 0;
	step_call_deadline = 0;
	if (get_timeout_active(STATEMENT_TIMEOUT))
		step_call_deadline = TimestampTzPlusMilliseconds(get_timeout_finish_time(STATEMENT_TIMEOUT),
														   STEP_CANCEL_GRACE_MS);
	enable_timeout_every(step_watchdog_timeout,
						 TimestampTzPlusMilliseconds(now, STEP_WATCHDOG_MS), STEP_WATCHDOG_MS);
	step_watchdog_armed = true;
}

/* step_watchdog_disarm: the target call ended (any way); idempotent */
static void
step_watchdog_disarm(void)
{
	if (!step_watchdog_armed)
		return;
	disable_timeout(step_watchdog_timeout, false);
	step_watchdog_armed = false;
	step_call_target_name = NULL;
}

/*
 * gridha_step_bound_lock_wait: once the worker is stopping (SIGTERM), a
 * lock wait of the current transaction ends after at most
 * STEP_STOP_LOCK_TIMEOUT_MS (gridha.worker_lock_timeout when that is
 * shorter), even with no lock timeout set: a report or the release at stop
 * that cannot lock its row gives up, and the claims' expiry does the rest.
 * Until the transaction ends.
 */
void
gridha_step_bound_lock_wait(void)
{
	char		value[32];

	if (!gridha_step_stopping ||
		(gridha_worker_lock_timeout_ms > 0 &&
		 gridha_worker_lock_timeout_ms <= STEP_STOP_LOCK_TIMEOUT_MS))
		return;
	snprintf(value, sizeof(value), "%d", STEP_STOP_LOCK_TIMEOUT_MS);
	(void) set_config_option("lock_timeout", value, PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * gridha_step_pin_settings: the settings every statement of the worker
 * runs with, applied again when they differ (at each step, at start, after
 * a reload): the lock timeout, and a search_path through which no object
 * planted in another schema can take part in its statements. Nothing a
 * target function sets survives its call (gridha_step_call_end), and this puts
 * back what anything else may have changed.
 */
void
gridha_step_pin_settings(void)
{
	char		value[32];
	const char *now;

	snprintf(value, sizeof(value), "%d", gridha_worker_lock_timeout_ms);
	now = GetConfigOption("lock_timeout", true, false);
	if (now == NULL || strcmp(now, value) != 0)
		SetConfigOption("lock_timeout", value, PGC_SUSET, PGC_S_SESSION);
	now = GetConfigOption("search_path", true, false);
	if (now == NULL || strcmp(now, GRIDHA_SEARCH_PATH) != 0)
		SetConfigOption("search_path", GRIDHA_SEARCH_PATH, PGC_USERSET, PGC_S_SESSION);
}

/*
 * step_run: gridha_step_run, and gridha_step_run_call's message (when
 * message is given: the error's message, palloc'd in the caller's context)
 * and quiet (the error is not logged: the caller does).
 */
static bool
step_run(GridhaStepFn fn, void *arg, const char *what, int *sqlstate,
		 char **message, bool quiet)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool ok = true;
	volatile bool unconfirmed = false;

	if (sqlstate)
		*sqlstate = 0;
	if (message)
		*message = NULL;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	gridha_step_cancelled = false;
	gridha_step_running = true;
	PG_TRY();
	{
		gridha_step_pin_settings();
		gridha_step_bound_lock_wait();
		step_superuser = superuser();
		if (gridha_worker_statement_timeout_ms > 0)
			enable_timeout_after(STATEMENT_TIMEOUT, gridha_worker_statement_timeout_ms);
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		fn(arg);
		step_watchdog_disarm();
		SPI_finish();
		PopActiveSnapshot();
		disable_timeout(STATEMENT_TIMEOUT, false);
		gridha_step_commit();
		unconfirmed = ProcDiePending;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		step_watchdog_disarm();
		disable_timeout(STATEMENT_TIMEOUT, false);
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		if (sqlstate)
			*sqlstate = edata->sqlerrcode;
		if (edata->sqlerrcode == ERRCODE_GRIDHA_STALE_CLAIM ||
			edata->sqlerrcode == ERRCODE_GRIDHA_NOT_IN_FLIGHT)
			ereport(LOG,
					(errcode(edata->sqlerrcode),
					 errmsg("gridha worker dropped a batch: %s refused: %s", what, edata->message),
					 edata->detail ? errdetail_internal("%s", edata->detail) : 0));
		else if (!quiet)
			ereport(LOG,
					(errcode(edata->sqlerrcode),
					 errmsg("gridha worker: %s failed: %s", what, edata->message),
					 edata->detail ? errdetail_internal("%s", edata->detail) : 0,
					 edata->detail_log ? errdetail_log("%s", edata->detail_log) : 0));
		/* a refusal says nothing of the database; anything else may */
		if (edata->sqlerrcode != ERRCODE_GRIDHA_STALE_CLAIM &&
			edata->sqlerrcode != ERRCODE_GRIDHA_NOT_IN_FLIGHT)
			step_failed = true;
		if (message)
			*message = MemoryContextStrdup(cxt, edata->message ? edata->message : "");
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();

	/*
	 * A commit that waits for a synchronous standby gives up when the
	 * postmaster dies, committed here only (SyncRepWaitForLSN sets
	 * ProcDiePending): this server may be gone for good, and what the step
	 * handed out with it. Nothing of it may go out: the worker ends here,
	 * before any POST.
	 */
	if (unconfirmed)
	{
		ereport(LOG,
				(errmsg("gridha worker: %s committed without its synchronous standby's confirmation: ending", what)));
		proc_exit(1);
	}
	gridha_step_running = false;
	QueryCancelPending = false;
	MemoryContextSwitchTo(cxt);
	pgstat_report_stat(false);
	return ok;
}

/*
 * gridha_step_run: runs fn in a transaction of its own, under the statement
 * timeout, with the worker's settings pinned; SIGTERM cancels it (see
 * worker.c). Returns true when it
 * committed; otherwise the error is logged, the transaction rolled back,
 * and *sqlstate (when given) says which error it was.
 */
bool
gridha_step_run(GridhaStepFn fn, void *arg, const char *what, int *sqlstate)
{
	return step_run(fn, arg, what, sqlstate, NULL, false);
}

/*
 * gridha_step_run_call: gridha_step_run for a step that calls a target
 * function: when it fails, *message is the error's message (palloc'd in
 * the caller's memory context; NULL when it committed), for the batch's
 * detail or the caller's own log line; with quiet, the error is not
 * logged here (the caller counts it: gridha_target_note).
 */
bool
gridha_step_run_call(GridhaStepFn fn, void *arg, const char *what, char **message, bool quiet)
{
	return step_run(fn, arg, what, NULL, message, quiet);
}

/*
 * gridha_step_take_failure: whether a step failed since the last call
 * (the worker then checks that the extension is still there).
 */
bool
gridha_step_take_failure(void)
{
	bool		failed = step_failed;

	step_failed = false;
	return failed;
}

/*
 * gridha_step_call_begin: a target call starts (see the words at the top): a GUC
 * nest level of its own with search_path GRIDHA_TARGET_SEARCH_PATH, so
 * every setting the function changes, SET LOCAL or SET or
 * set_config(..., false) alike, is undone when the call ends (an error
 * undoes them with the transaction); no prepared statement a call left
 * (PREPARE is not undone by an error) is there for it; the watchdog runs.
 *
 * The path is gridha's, never a role's, a database's or "$user": pg_catalog
 * first, pg_temp last, and no schema anyone else may write to. It is the
 * path PostgreSQL 17 runs index expressions and materialized views with
 * during maintenance. A function that needs other schemas names them, or
 * sets its own path (CREATE FUNCTION ... SET search_path).
 *
 * Target functions run only as a role that is not a superuser: a worker
 * connected as one (gridha.worker_role empty or a superuser) never gets
 * here (gridha_step_refuses_functions). Returns the nest level.
 */
int
gridha_step_call_begin(const char *target)
{
	int			nest = NewGUCNestLevel();

	(void) set_config_option("search_path", GRIDHA_TARGET_SEARCH_PATH, PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	DropAllPreparedStatements();
	step_watchdog_arm();
	step_call_target_name = target;
	return nest;
}

/*
 * gridha_step_call_end: a target call returned: the deferred triggers it queued
 * fire now, under its time limit and watchdog (not at the commit, which
 * runs with neither); then its settings are undone and its temporary
 * objects dropped (as DISCARD TEMP does) and its prepared statements
 * deallocated, in the step's transaction, so that none of them is ever
 * committed: no later call, of this target or another, finds a table,
 * trigger or function it made in pg_temp. Errors go up as the call's own.
 */
void
gridha_step_call_end(int nest)
{
	CommandCounterIncrement();
	if (SPI_execute("SET CONSTRAINTS ALL IMMEDIATE", false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "gridha: could not fire the deferred triggers of a target call");
	step_watchdog_disarm();
	AtEOXact_GUC(false, nest);
	ResetTempTableNamespace();
	DropAllPreparedStatements();
	CommandCounterIncrement();
}

/*
 * gridha_step_refuses_functions: the worker calls no target function while it
 * runs as a superuser (gridha.worker_role empty or a superuser): whoever
 * owns a function an administrator points a target at would run code with
 * superuser rights. The reason, when it refuses. Asked between steps, so
 * it answers as of the last step: superuser() may read the catalog, which
 * needs a transaction.
 */
const char *
gridha_step_refuses_functions(void)
{
	if (step_superuser)
		return "target functions are not called while the worker runs as a superuser: set gridha.worker_role to a role that is not one";
	return NULL;
}

/*
 * gridha_step_function_lock: fn exists and has the shape of a submit (set
 * false) or status (set true) function, or an error: the worker never
 * calls what it could not find. The function is locked (as a DROP FUNCTION
 * would find it: AccessShareLock on the object) until the step's
 * transaction ends, so it cannot be dropped between this look-up and the
 * call: a drop committed meanwhile would make the call fail with "cache
 * lookup failed" instead of this error. It is called by this OID, never by
 * its name: an overload someone adds to its schema changes nothing.
 */
void
gridha_step_function_lock(Oid fn, const char *column, const char *target, bool set)
{
	HeapTuple	tup;
	bool		shaped;

	LockDatabaseObject(ProcedureRelationId, fn, 0, AccessShareLock);
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	if (!HeapTupleIsValid(tup))
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
				 errmsg("%s of target \"%s\" (OID %u) does not exist", column, target, fn)));
	shaped = ((Form_pg_proc) GETSTRUCT(tup))->proretset == set &&
		((Form_pg_proc) GETSTRUCT(tup))->pronargs == (set ? 1 : 4) &&
		((Form_pg_proc) GETSTRUCT(tup))->prokind == PROKIND_FUNCTION;
	ReleaseSysCache(tup);
	if (!shaped)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
				 errmsg("%s of target \"%s\" (OID %u) is not a %s function", column, target, fn,
						set ? "status" : "submit")));
}

/* gridha_step_text_const: a text constant (NULL: a null one) */
Const *
gridha_step_text_const(Oid type, Datum value, bool isnull)
{
	return makeConst(type, -1, DEFAULT_COLLATION_OID, -1, value, isnull, false);
}
