/*-------------------------------------------------------------------------
 *
 * worker.c
 *		Background-worker instances: how they start, wait for the
 *		extension, register, run their cycles and stop; gridha.start_worker
 *		and gridha.stop_worker.
 *
 * Words:
 *   worker    a background worker process that is one gridha instance of
 *             kind 'worker' for its whole life; a restarted worker is a new
 *             instance with a new id
 *   static    started with the server, gridha.workers of them
 *   dynamic   started at run time by gridha.start_worker(label)
 *   waiting   the extension is not in gridha.database (not created yet,
 *             or dropped while the worker ran): the worker waits quietly
 *             and registers its instance again once it is back
 *
 * The loop (gridha_worker_main): wait for the extension, register the
 * instance, then run cycles (submit.c) until SIGTERM. SIGTERM cancels the
 * step that runs at that moment (a lock wait, a long target function), as
 * a cancel does in a normal backend; no new batch is handed out, the POSTs
 * in flight get a few hundred milliseconds to be answered, every outcome is
 * reported (a POST that got no answer as delayed), the claims are released,
 * and the worker exits within a second. A target function that swallows
 * the cancel is not waited for: the worker ends itself (FATAL) once it has
 * run past the cancel by STEP_CANCEL_GRACE_MS (step.c). The worker
 * never blocks on a ledger: while requests are out it moves them on 20 ms
 * at a time (gridha_submit_poll) and looks at its latch in between, so
 * SIGTERM, postmaster death and new work are seen however a ledger
 * answers, or does not.
 *
 * Restarts: a worker exits with 0 (the postmaster forgets it) only when an
 * administrator stopped it (gridha.stop_worker leaves a stop mark, see
 * slots.c); ended any other way (pg_terminate_backend by its own role or a
 * target function of it, DROP DATABASE, an error, a crash, its own FATAL)
 * it exits with 1 or worse and is started again after
 * GRIDHA_WORKER_RESTART_S seconds as a new instance. At a server shutdown
 * the postmaster starts nothing again, whatever the exit.
 *
 * In binary-upgrade mode (the servers pg_upgrade starts) no worker is
 * registered, none runs, and start_worker() refuses.
 *
 * The worker runs as gridha.worker_role (the bootstrap superuser when it
 * is empty, with a WARNING: it then submits to URL targets only, and calls
 * no target function). Its settings are the server's: what ALTER ROLE or
 * ALTER DATABASE set for its role and database is put back to the value
 * the server gave it before it connected (worker_drop_role_settings).
 * Its own statements run with search_path pinned to pg_catalog, gridha,
 * pg_temp and its own lock timeout, both applied again at every step; its
 * steps run under gridha.worker_statement_timeout (see step.c; target
 * functions are called with search_path pg_catalog, pg_temp). It never
 * runs SQL as a superuser once its session may have run a target's code:
 * its instance is registered through gridha.worker_register, as the worker
 * role. It speaks only the API of SQL 1.3 (which 1.2 has too: the library
 * serves both, generation.c).
 *
 * In the Citus mode (gridha.citus_setup) the worker runs on the
 * coordinator unchanged: the API it calls hands over to the mode there,
 * its registration and the reads it makes itself have the mode's branch
 * (SQL), and its statements let the mode pass (gridha_exec_served); see
 * docs/citus.md, "Built: the workers".
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <unistd.h>

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "common.h"
#include "generation.h"
#include "instances.h"
#include "settings.h"
#include "slots.h"
#include "spi_util.h"
#include "step.h"
#include "submit.h"
#include "worker.h"

#define GRIDHA_WORKER_RESTART_S 5

/* What a dynamic worker is told at start (bgw_extra) */
typedef struct GridhaWorkerStart
{
	pg_uuid_t	instance_id;
	char		label[GRIDHA_LABEL_LEN];
} GridhaWorkerStart;

StaticAssertDecl(sizeof(GridhaWorkerStart) <= BGW_EXTRALEN,
				 "GridhaWorkerStart must fit in bgw_extra");

static volatile sig_atomic_t worker_got_sigterm = false;

/* A setting as the server gave it, before the worker connected */
typedef struct WorkerSetting
{
	char	   *name;
	char	   *value;
} WorkerSetting;

static WorkerSetting *worker_settings = NULL;
static int	worker_nsettings = 0;

PGDLLEXPORT void gridha_worker_main(Datum main_arg);
PGDLLEXPORT void gridha_role_check_main(Datum main_arg);

/* How often a worker whose role is not usable checks it again */
#define GRIDHA_ROLE_RECHECK_MS	2000
/* ... and says again what is wrong */
#define GRIDHA_ROLE_REPEAT_MS	60000

/*
 * worker_fill: the parts of a worker registration every worker shares.
 */
static void
worker_fill(BackgroundWorker *bgw)
{
	memset(bgw, 0, sizeof(*bgw));
	bgw->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw->bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw->bgw_restart_time = GRIDHA_WORKER_RESTART_S;
	snprintf(bgw->bgw_library_name, BGW_MAXLEN, "gridha");
	snprintf(bgw->bgw_function_name, BGW_MAXLEN, "gridha_worker_main");
	snprintf(bgw->bgw_type, BGW_MAXLEN, "gridha worker");
}

/*
 * gridha_worker_register_static: gridha.workers workers that start with the
 * server (preload only).
 */
void
gridha_worker_register_static(void)
{
	int			i;

	/*
	 * pg_upgrade starts the old and the new server in binary-upgrade mode
	 * (postgres -b), with their configuration, and with fsync off: a
	 * worker there would hand out and POST batches of a database that is
	 * being moved. None is registered.
	 */
	if (IsBinaryUpgrade)
	{
		if (gridha_workers > 0)
			ereport(LOG,
					(errmsg("gridha: no background worker is started in binary-upgrade mode"),
					 errdetail("gridha.workers is %d; the workers start with the server once pg_upgrade is done.",
							   gridha_workers)));
		return;
	}

	for (i = 1; i <= gridha_workers; i++)
	{
		BackgroundWorker bgw;
		GridhaWorkerStart *start;

		worker_fill(&bgw);
		snprintf(bgw.bgw_name, BGW_MAXLEN, "gridha worker %d", i);
		start = (GridhaWorkerStart *) bgw.bgw_extra;
		snprintf(start->label, GRIDHA_LABEL_LEN, "worker %d", i);
		bgw.bgw_main_arg = Int32GetDatum(i);
		RegisterBackgroundWorker(&bgw);
	}
}

/*
 * worker_random_uuid: a version-4 uuid.
 */
static void
worker_random_uuid(pg_uuid_t *id)
{
	if (!pg_strong_random(id->data, UUID_LEN))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random instance id")));
	id->data[6] = (id->data[6] & 0x0f) | 0x40;
	id->data[8] = (id->data[8] & 0x3f) | 0x80;
}

static char *
worker_id_text(const pg_uuid_t *id)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(id)));
}

/*
 * worker_sigterm: stop. A step that runs now is cancelled as a cancel
 * request would (a lock wait, a long target function end with an error
 * the step catches); between steps only the flag is set, so no error is
 * ever raised outside a transaction.
 */
static void
worker_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	/*
	 * Only the first SIGTERM cancels: the steps of the stop itself (the
	 * reports of what was in hand, the release) end on their own (bounded
	 * lock waits, the statement timeout). A second SIGTERM (a repeated
	 * stop_worker; one came during a fast shutdown in 022_worker_safety)
	 * cancelled the report of a batch whose target function the first one
	 * had cancelled, and that batch waited, submitting, for a takeover.
	 * The cancel also ends a commit's wait for a synchronous standby, in a
	 * step or not (gridha_step_commit); commits made while stopping
	 * bound that wait themselves.
	 */
	if ((gridha_step_running || gridha_step_committing) && !gridha_step_stopping)
	{
		QueryCancelPending = true;
		InterruptPending = true;
		/* a target function that swallows it is ended (step.c) */
		if (gridha_step_running)
			gridha_step_cancelled = true;
	}
	worker_got_sigterm = true;
	gridha_step_stopping = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

/*
 * worker_save_settings: before the worker connects, the value the server
 * gives each setting (postgresql.conf, ALTER SYSTEM, the defaults). PL/pgSQL
 * is loaded first, so that its settings are among them.
 */
static void
worker_save_settings(void)
{
	struct config_generic **vars;
	int			n;
	int			i;

	load_file("plpgsql", false);
	vars = gridha_guc_variables(&n);
	worker_settings = MemoryContextAllocZero(TopMemoryContext, sizeof(WorkerSetting) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		const char *value = GetConfigOption(vars[i]->name, true, false);

		if (value == NULL)
			continue;
		worker_settings[worker_nsettings].name = MemoryContextStrdup(TopMemoryContext, vars[i]->name);
		worker_settings[worker_nsettings].value = MemoryContextStrdup(TopMemoryContext, value);
		worker_nsettings++;
	}
}

/*
 * worker_drop_role_settings: puts back every setting that ALTER ROLE or
 * ALTER DATABASE gave the worker's session when it connected (for its
 * role, its database, or all of them) to the value the server gave it
 * (worker_save_settings), as the session's default: a role may set its
 * own defaults and a database owner the database's, and neither may
 * change how the worker, or a target function, runs (a search_path, a
 * role, a read-only default). Settings the worker cannot change after
 * connecting (log_connections) and those of a transaction are left; a
 * custom setting no library defines is too (the worker has no value of
 * the server's for it): target functions must not trust those.
 */
static void
worker_drop_role_settings(void)
{
	struct config_generic **vars;
	int			n;
	int			i;

	StartTransactionCommand();
	vars = gridha_guc_variables(&n);
	for (i = 0; i < n; i++)
	{
		struct config_generic *var = vars[i];
		int			k;

		if (var->source != PGC_S_GLOBAL && var->source != PGC_S_DATABASE &&
			var->source != PGC_S_USER && var->source != PGC_S_DATABASE_USER)
			continue;
		if (var->context != PGC_USERSET && var->context != PGC_SUSET)
			continue;
		if (strncmp(var->name, "transaction_", 12) == 0)
			continue;
		for (k = 0; k < worker_nsettings; k++)
			if (strcmp(worker_settings[k].name, var->name) == 0)
				break;
		if (k == worker_nsettings)
			continue;
		(void) set_config_option(var->name, worker_settings[k].value, PGC_SUSET,
								 PGC_S_OVERRIDE, GUC_ACTION_SET, true, WARNING, false);
	}
	CommitTransactionCommand();
}

/*
 * worker_exit: ends the worker: with 0 (not started again) when an
 * administrator stopped it, with 1 (started again) otherwise.
 */
static void
worker_exit(void)
{
	proc_exit(gridha_slot_take_stop_mark() ? 0 : 1);
}

/*
 * worker_apply_settings: the session settings every step runs with (see
 * gridha_step_pin_settings, which applies them again at each step).
 */
static void
worker_apply_settings(void)
{
	gridha_step_pin_settings();
}

/* The names of the worker's waits (GridhaWait), and their events */
/*
 * worker_wait: sleeps until the latch is set or ms pass; reloads the
 * configuration when asked. A cancel request that arrives between steps
 * (pg_cancel_backend) has nothing to cancel and is dropped. True when the
 * latch was set (new work, SIGTERM, a reload).
 */
static bool
worker_wait(long ms)
{
	int			rc;

	rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
				   ms, gridha_wait_event(GRIDHA_WAIT_NAP));
	ResetLatch(MyLatch);
	QueryCancelPending = false;
	CHECK_FOR_INTERRUPTS();
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
		worker_apply_settings();
	}
	return (rc & WL_LATCH_SET) != 0;
}

/* Whether this worker said that the database's SQL is not served */
static bool worker_told_not_served = false;

/*
 * worker_extension_ready: true when gridha is installed in this database,
 * in a version this library serves (generation.c). SQL older than 1.2 is
 * logged once (RG022, with the hint to update it) and waited out.
 */
static bool
worker_extension_ready(void)
{
	bool		ready;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	ready = OidIsValid(get_extension_oid("gridha", true));
	if (ready && gridha_sql_generation() == GRIDHA_SQL_OLD)
	{
		ready = false;
		if (!worker_told_not_served)
			ereport(LOG,
					(errcode(ERRCODE_GRIDHA_SQL_NOT_SERVED),
					 errmsg("gridha worker waits: gridha's SQL in database \"%s\" is older than 1.2, which this library no longer serves",
							gridha_database),
					 errhint("Update the extension: ALTER EXTENSION gridha UPDATE.")));
		worker_told_not_served = true;
	}
	else if (ready)
		worker_told_not_served = false;
	CommitTransactionCommand();
	return ready;
}

/*
 * worker_wait_for_extension: waits, quietly, until the extension exists
 * in this database, in a version this library serves; false when SIGTERM
 * came first.
 */
static bool
worker_wait_for_extension(void)
{
	gridha_slot_set_state(GRIDHA_WS_WAITING, NULL, NULL);
	while (!worker_got_sigterm && !worker_extension_ready())
		worker_wait(gridha_naptime_ms);
	return !worker_got_sigterm;
}

/*
 * worker_register_instance: makes this worker's instance row (kind worker,
 * owned by the worker's role). With fresh, a start id that already has a
 * row belongs to an earlier run of this worker, which crashed: this run is
 * a new instance with a new id. Without it (the extension was created
 * again) the id is kept.
 *
 * The row is written by gridha_internal.worker_register (gridha's on 1.2's
 * SQL), called as the worker's role: the function lets only a gridha
 * worker process in. (On SQL older
 * than 1.2, which the library does not serve, the worker waits before it
 * comes here: worker_extension_ready.)
 */
static void
worker_register_instance(pg_uuid_t *id, const char *label, bool fresh)
{
	static const char *by_function =
		"SELECT gridha_internal.worker_register($1, $2)";
	static const char *by_function_1_2 =
		"SELECT gridha.worker_register($1, $2)";
	Oid			types[2] = {UUIDOID, TEXTOID};
	bool		done = false;

	while (!done)
	{
		Datum		args[2];
		bool		isnull;

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		gridha_step_pin_settings();
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		args[0] = UUIDPGetDatum(id);
		args[1] = CStringGetTextDatum(label);
		if (SPI_execute_with_args(gridha_sql_generation() == GRIDHA_SQL_1_2 ? by_function_1_2 : by_function,
								  2, types, args, NULL, false, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "gridha: could not register the worker instance");
		done = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) ||
			!fresh;
		SPI_finish();
		PopActiveSnapshot();
		gridha_step_commit();
		if (!done)
			worker_random_uuid(id);
	}
	gridha_slot_set_instance(id);
}

/*
 * worker_release: hands back the claims at shutdown, waiting for a row lock
 * only briefly (gridha_step_bound_lock_wait). A failure is logged; the
 * claims then expire as usual.
 */
static void
worker_release(pg_uuid_t *id)
{
	static const char *sql = "SELECT gridha.release_claims($1)";
	Oid			types[1] = {UUIDOID};
	Datum		args[1];
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		gridha_step_pin_settings();
		gridha_step_bound_lock_wait();
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		args[0] = UUIDPGetDatum(id);
		(void) SPI_execute_with_args(sql, 1, types, args, NULL, false, 0);
		SPI_finish();
		PopActiveSnapshot();
		gridha_step_commit();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
}

/*
 * worker_serve: runs cycles until SIGTERM (true) or until the extension is
 * gone from the database (false).
 */
static bool
worker_serve(void)
{
	while (!worker_got_sigterm)
	{
		bool		busy;
		long		wait_ms;

		pgstat_report_activity(STATE_RUNNING, "gridha cycle");
		busy = gridha_submit_cycle();
		pgstat_report_activity(STATE_IDLE, NULL);
		pgstat_report_stat(false);
		if (gridha_step_take_failure() && !worker_extension_ready())
			return false;
		if (worker_got_sigterm)
			break;
		if (busy)
		{
			/* more may be ready: only look at the latch and the config */
			(void) worker_wait(0);
			continue;
		}
		if (gridha_submit_in_flight() > 0)
		{
			/*
			 * Requests are out: move them on 20 ms at a time, looking at the
			 * latch in between, until one finishes (its report is due), the
			 * latch is set (new work, SIGTERM) or the idle wait has passed;
			 * a ledger that hangs costs no cycle every 20 ms.
			 */
			TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															gridha_submit_wait_ms(Min(gridha_naptime_ms,
																					  gridha_monitor_interval_ms)));

			while (!worker_got_sigterm && gridha_submit_in_flight() > 0)
			{
				if (gridha_submit_poll(Min(gridha_naptime_ms, 20)) > 0 || worker_wait(0) ||
					GetCurrentTimestamp() >= until)
					break;
			}
			continue;
		}
		gridha_slot_set_state(GRIDHA_WS_IDLE, NULL, NULL);
		/* ... but not past the next slot of a rate-limited ready head */
		wait_ms = gridha_submit_wait_ms(Min(gridha_naptime_ms, gridha_monitor_interval_ms));
		worker_wait(wait_ms);
	}
	return true;
}

/*
 * gridha_role_check_main: entry point of a role check, a short-lived
 * background worker a gridha worker starts before it connects as
 * gridha.worker_role: a worker cannot connect twice, and connecting as a
 * role that is missing or cannot log in ends the process, which the
 * postmaster starts again 5 s later, for ever. The check connects as the
 * bootstrap superuser to no database (roles are in shared catalogs), runs
 * no code but catalog look-ups, puts its answer
 * in the slot of the worker that asked (main_arg; bgw_extra holds that
 * worker's pid) and exits.
 */
void
gridha_role_check_main(Datum main_arg)
{
	pid_t		worker_pid;
	GridhaRoleCheck result = GRIDHA_ROLE_OK;
	Oid			role_oid;
	Oid			submitter;
	HeapTuple	tuple;

	memcpy(&worker_pid, MyBgworkerEntry->bgw_extra, sizeof(worker_pid));
	/*
	 * A SIGTERM (a fast shutdown, pg_terminate_backend) lets the check end
	 * on its own, in a moment, instead of dying with a FATAL in the log
	 */
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();
	/* roles are shared catalogs: no database, so a missing one costs nothing */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	StartTransactionCommand();
	role_oid = get_role_oid(gridha_worker_role, true);
	if (!OidIsValid(role_oid))
		result = GRIDHA_ROLE_MISSING;
	else
	{
		tuple = SearchSysCache1(AUTHOID, ObjectIdGetDatum(role_oid));
		if (HeapTupleIsValid(tuple))
		{
			if (!((Form_pg_authid) GETSTRUCT(tuple))->rolcanlogin)
				result = GRIDHA_ROLE_NOLOGIN;
			ReleaseSysCache(tuple);
		}
		/* gridha_submitter exists once gridha was created somewhere */
		submitter = get_role_oid("gridha_submitter", true);
		if (result == GRIDHA_ROLE_OK && OidIsValid(submitter) &&
			!is_member_of_role(role_oid, submitter))
			result = GRIDHA_ROLE_NOT_SUBMITTER;
	}
	CommitTransactionCommand();
	gridha_slot_answer_role_check(DatumGetInt32(main_arg), worker_pid, result);
	proc_exit(0);
}

/*
 * worker_check_role: asks a role check (gridha_role_check_main) whether
 * the role can serve as a worker's; GRIDHA_ROLE_UNKNOWN when no check
 * could run (no background worker free): the worker then connects as
 * before.
 */
static GridhaRoleCheck
worker_check_role(void)
{
	BackgroundWorker bgw;
	BackgroundWorkerHandle *handle;
	pid_t		pid;
	TimestampTz until;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(bgw.bgw_library_name, BGW_MAXLEN, "gridha");
	snprintf(bgw.bgw_function_name, BGW_MAXLEN, "gridha_role_check_main");
	snprintf(bgw.bgw_name, BGW_MAXLEN, "gridha role check");
	snprintf(bgw.bgw_type, BGW_MAXLEN, "gridha role check");
	bgw.bgw_main_arg = Int32GetDatum(gridha_slot_index());
	bgw.bgw_notify_pid = MyProcPid;
	memcpy(bgw.bgw_extra, &MyProcPid, sizeof(MyProcPid));

	gridha_slot_set_role_check(GRIDHA_ROLE_UNKNOWN);
	if (!RegisterDynamicBackgroundWorker(&bgw, &handle))
		return GRIDHA_ROLE_UNKNOWN;
	until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 10000);
	for (;;)
	{
		BgwHandleStatus status = GetBackgroundWorkerPid(handle, &pid);

		if (status == BGWH_STOPPED || status == BGWH_POSTMASTER_DIED)
			break;
		if (worker_got_sigterm || GetCurrentTimestamp() >= until)
		{
			TerminateBackgroundWorker(handle);
			return GRIDHA_ROLE_UNKNOWN;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 50, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	return gridha_slot_role_check();
}

/*
 * worker_wait_for_role: before a worker connects as gridha.worker_role,
 * waits, in this process, until the role exists, can log in and is a
 * member of gridha_submitter, checking again every
 * GRIDHA_ROLE_RECHECK_MS. What is wrong is logged once, and again at
 * most once a minute or when it changes. False when SIGTERM came first.
 */
static bool
worker_wait_for_role(const char *label, const char *role)
{
	GridhaRoleCheck said = GRIDHA_ROLE_OK;
	TimestampTz said_at = 0;

	for (;;)
	{
		GridhaRoleCheck found = worker_check_role();
		TimestampTz now = GetCurrentTimestamp();

		if (worker_got_sigterm)
			return false;
		if (found == GRIDHA_ROLE_OK || found == GRIDHA_ROLE_UNKNOWN)
		{
			if (said != GRIDHA_ROLE_OK)
				ereport(LOG,
						(errmsg("gridha worker \"%s\": role \"%s\" can serve now, the worker starts",
								label, role)));
			return true;
		}
		gridha_slot_set_state(GRIDHA_WS_WAITING_ROLE, NULL, NULL);
		if (found != said || TimestampDifferenceExceeds(said_at, now, GRIDHA_ROLE_REPEAT_MS))
		{
			const char *q = quote_identifier(role);

			if (found == GRIDHA_ROLE_MISSING)
				ereport(WARNING,
						(errmsg("gridha worker \"%s\" waits: its role \"%s\" (gridha.worker_role) does not exist", label, role),
						 errdetail("The worker checks again every %d seconds and starts once the role is there; this message comes again at most once a minute.",
								   GRIDHA_ROLE_RECHECK_MS / 1000),
						 errhint("Create the role: CREATE ROLE %s LOGIN; GRANT gridha_submitter TO %s; or set gridha.worker_role to an existing role and restart the server.",
								 q, q)));
			else if (found == GRIDHA_ROLE_NOLOGIN)
				ereport(WARNING,
						(errmsg("gridha worker \"%s\" waits: its role \"%s\" (gridha.worker_role) cannot log in", label, role),
						 errdetail("The worker checks again every %d seconds and starts once the role may log in; this message comes again at most once a minute.",
								   GRIDHA_ROLE_RECHECK_MS / 1000),
						 errhint("Let it log in: ALTER ROLE %s LOGIN;", q)));
			else
				ereport(WARNING,
						(errmsg("gridha worker \"%s\" waits: its role \"%s\" (gridha.worker_role) is not a member of gridha_submitter", label, role),
						 errdetail("The worker checks again every %d seconds and starts once the role is a member; this message comes again at most once a minute.",
								   GRIDHA_ROLE_RECHECK_MS / 1000),
						 errhint("Grant it: GRANT gridha_submitter TO %s;", q)));
			said = found;
			said_at = now;
		}
		(void) worker_wait(GRIDHA_ROLE_RECHECK_MS);
		if (worker_got_sigterm)
			return false;
	}
}

/*
 * gridha_worker_main: entry point of every gridha worker.
 */
void
gridha_worker_main(Datum main_arg)
{
	GridhaWorkerStart start;
	pg_uuid_t	instance_id;
	char		appname[GRIDHA_LABEL_LEN + 16];
	const char *role;
	bool		as_superuser;

	memcpy(&start, MyBgworkerEntry->bgw_extra, sizeof(start));
	start.label[GRIDHA_LABEL_LEN - 1] = '\0';

	/* never registered in binary-upgrade mode; should one start, it stops */
	if (IsBinaryUpgrade)
	{
		ereport(LOG,
				(errmsg("gridha worker \"%s\" does not run in binary-upgrade mode", start.label)));
		proc_exit(0);
	}

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, worker_sigterm);
	BackgroundWorkerUnblockSignals();

	if (!gridha_slots_available())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("gridha workers need shared_preload_libraries = 'gridha'")));
	gridha_slot_take(start.label, DatumGetInt32(main_arg), &start.instance_id);
	/* an administrator stopped the run before this one, which was ended by force */
	if (gridha_slot_take_stop_mark())
		proc_exit(0);
	/* dynamic: known by the id start_worker returned from the start */
	if (DatumGetInt32(main_arg) == 0)
		gridha_slot_set_instance(&start.instance_id);

	role = gridha_worker_role != NULL && gridha_worker_role[0] != '\0' ? gridha_worker_role : NULL;
	/* a role that cannot serve: wait here, quietly, instead of failing */
	if (role != NULL && !worker_wait_for_role(start.label, role))
		worker_exit();
	worker_save_settings();
	BackgroundWorkerInitializeConnection(gridha_database, role, 0);
	worker_drop_role_settings();
	StartTransactionCommand();
	as_superuser = superuser();
	CommitTransactionCommand();
	if (as_superuser)
		ereport(WARNING,
				(errmsg("gridha worker \"%s\" runs as a superuser", start.label),
				 errdetail("gridha.worker_role is %s, so the worker calls no target function: their batches wait, delayed.",
						   role == NULL ? "not set" : "a superuser"),
				 errhint("Create a role for the workers that is not a superuser, GRANT gridha_submitter to it, and set gridha.worker_role (server start).")));
	snprintf(appname, sizeof(appname), "gridha %s", start.label);
	SetConfigOption("application_name", appname, PGC_USERSET, PGC_S_SESSION);
	pgstat_report_appname(appname);
	worker_apply_settings();

	/* gridha may be created later: wait for it, quietly */
	if (!worker_wait_for_extension())
		worker_exit();

	/* static workers: a fresh id; dynamic: the one start_worker returned */
	instance_id = start.instance_id;
	if (DatumGetInt32(main_arg) != 0)
		worker_random_uuid(&instance_id);
	worker_register_instance(&instance_id, start.label, true);
	ereport(LOG,
			(errmsg("gridha worker \"%s\" started as instance %s", start.label,
					worker_id_text(&instance_id))));

	gridha_submit_init(&instance_id);
	while (!worker_serve())
	{
		/* the extension was dropped: forget what was under way, wait */
		ereport(LOG,
				(errmsg("gridha worker \"%s\" waits: the extension gridha is gone from database \"%s\"",
						start.label, gridha_database)));
		gridha_submit_forget();
		if (!worker_wait_for_extension())
			break;
		worker_register_instance(&instance_id, start.label, false);
		ereport(LOG,
				(errmsg("gridha worker \"%s\" serves again as instance %s", start.label,
						worker_id_text(&instance_id))));
	}

	gridha_slot_set_state(GRIDHA_WS_STOPPING, NULL, NULL);
	gridha_submit_drain();
	worker_release(&instance_id);
	gridha_submit_shutdown();
	ereport(LOG,
			(errmsg("gridha worker \"%s\" (instance %s) stopped and released its claims",
					start.label, worker_id_text(&instance_id))));
	worker_exit();
}

/*
 * worker_require_shared: refuses worker functions when gridha is not
 * preloaded.
 */
static void
worker_require_shared(void)
{
	if (!gridha_slots_available())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("gridha background workers are not available"),
				 errdetail("gridha is not in shared_preload_libraries."),
				 errhint("Add gridha to shared_preload_libraries in postgresql.conf and restart the server.")));
}

PG_FUNCTION_INFO_V1(gridha_start_worker);

/*
 * gridha_start_worker: SQL gridha.start_worker(label) -> uuid. Starts one
 * dynamic worker and returns its instance id once it runs.
 */
Datum
gridha_start_worker(PG_FUNCTION_ARGS)
{
	BackgroundWorker bgw;
	BackgroundWorkerHandle *handle;
	GridhaWorkerStart *start;
	pid_t		pid;
	pg_uuid_t  *id = palloc(sizeof(pg_uuid_t));

	worker_require_shared();
	if (IsBinaryUpgrade)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("gridha workers cannot be started in binary-upgrade mode"),
				 errdetail("The server was started by pg_upgrade (postgres -b)."),
				 errhint("Start workers once pg_upgrade is done and the server runs normally.")));
	gridha_require_writable_served("start_worker()");

	worker_fill(&bgw);
	start = (GridhaWorkerStart *) bgw.bgw_extra;
	worker_random_uuid(id);
	start->instance_id = *id;
	if (PG_ARGISNULL(0))
		snprintf(start->label, GRIDHA_LABEL_LEN, "dynamic worker");
	else
	{
		char	   *label = text_to_cstring(PG_GETARG_TEXT_PP(0));

		if (strlen(label) >= GRIDHA_LABEL_LEN)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("worker label is too long"),
					 errdetail("A label has at most %d bytes.", GRIDHA_LABEL_LEN - 1)));
		strlcpy(start->label, label, GRIDHA_LABEL_LEN);
	}
	snprintf(bgw.bgw_name, BGW_MAXLEN, "gridha worker \"%s\"", start->label);
	bgw.bgw_main_arg = Int32GetDatum(0);
	bgw.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&bgw, &handle))
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start a gridha worker: no background worker slot is free"),
				 errhint("Raise max_worker_processes (it needs a restart), or stop another worker.")));

	if (WaitForBackgroundWorkerStartup(handle, &pid) != BGWH_STARTED)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("the gridha worker did not start"),
				 errhint("Look at the server log.")));

	PG_RETURN_UUID_P(id);
}

PG_FUNCTION_INFO_V1(gridha_stop_worker);

/*
 * gridha_stop_worker: SQL gridha.stop_worker(instance_id) -> boolean. Asks
 * the worker that is this instance to stop (SIGTERM: it reports what it has
 * in flight, releases its claims, exits) for good: it is not started again,
 * even when a target function that will not stop makes it end by force.
 * False when no running worker is it. Workers belong to gridha.worker_role, and stopping them is an
 * administrator's duty: the privilege to execute this function (the
 * extension's owner, gridha_admin) is the check, not the instance's owner.
 */
Datum
gridha_stop_worker(PG_FUNCTION_ARGS)
{
	Datum		id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	pid_t		pid;

	worker_require_shared();
	pid = gridha_slot_request_stop(DatumGetUUIDP(id));
	if (pid == 0)
		PG_RETURN_BOOL(false);
	if (kill(pid, SIGTERM) != 0)
		PG_RETURN_BOOL(false);
	PG_RETURN_BOOL(true);
}

/*
 * gridha_worker_register_check: the checks of worker_register (1.3's
 * gridha_internal.worker_register and 1.2's entry point, src/instances12.c):
 * refused (RG016) in any process but a gridha background worker, as the
 * check is on the process, so no SQL client can make itself an instance of
 * kind worker; instance_id given (22004); a writable transaction (25006).
 * *owner is the calling role, the instance's owner.
 */
void
gridha_worker_register_check(FunctionCallInfo fcinfo, NameData *owner)
{
	if (MyBgworkerEntry == NULL ||
		strcmp(MyBgworkerEntry->bgw_library_name, "gridha") != 0 ||
		strcmp(MyBgworkerEntry->bgw_function_name, "gridha_worker_main") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_NOT_A_WORKER),
				 errmsg("only a gridha background worker may register a worker instance"),
				 errhint("Use gridha.register_instance() for an external instance.")));
	(void) gridha_arg_uuid(fcinfo, 0, "instance_id");
	namestrcpy(owner, GetUserNameFromId(GetOuterUserId(), false));
	gridha_require_writable_served("worker_register()");
}

PG_FUNCTION_INFO_V1(gridha_worker_owner);

/*
 * gridha_worker_owner: SQL gridha_internal.worker_owner(instance_id) ->
 * name (1.3): the checks of gridha_internal.worker_register, which writes
 * the row, and the worker's role, its owner.
 */
Datum
gridha_worker_owner(PG_FUNCTION_ARGS)
{
	Name		owner = (Name) palloc0(NAMEDATALEN);

	gridha_worker_register_check(fcinfo, owner);
	PG_RETURN_NAME(owner);
}
