/*-------------------------------------------------------------------------
 *
 * worker.c
 *		Background-worker instances: their settings, their shared-memory
 *		slots, how they start, wake up and stop, and gridha.workers.
 *
 * Words:
 *   worker    a background worker process that is one gridha instance of
 *             kind 'worker' for its whole life; a restarted worker is a new
 *             instance with a new id
 *   static    started with the server, gridha.workers of them
 *   dynamic   started at run time by gridha.start_worker(label)
 *   slot      the worker's entry in shared memory: pid, instance id, label,
 *             state and the batch in hand; gridha.workers reads the slots
 *   wake-up   a commit that enqueued batches sets every worker's latch, so
 *             idle workers do not wait for gridha.naptime
 *
 * The loop (gridha_worker_main): wait for the database and the extension,
 * register the instance, then run gridha_submit_cycle (submit.c) until
 * SIGTERM. SIGTERM only raises a flag: the batch in hand is submitted and
 * reported, then the claims are released and the worker exits with 0, so
 * the postmaster does not start it again. A worker that exits with an
 * error (or crashes) is started again after GRIDHA_WORKER_RESTART_S seconds
 * as a new instance.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <unistd.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "gridha.h"
#include "spi_util.h"
#include "worker.h"

#define GRIDHA_WORKER_RESTART_S 5
#define GRIDHA_LABEL_LEN		64
#define GRIDHA_ID_LEN			64

int			gridha_workers = 0;
char	   *gridha_database = NULL;
int			gridha_naptime_ms = 1000;
int			gridha_submit_timeout_ms = 15000;
int			gridha_monitor_interval_ms = 500;

typedef struct GridhaWorkerSlot
{
	pid_t		pid;			/* 0: free */
	pg_uuid_t	instance_id;
	bool		registered;		/* instance_id is known */
	char		label[GRIDHA_LABEL_LEN];
	GridhaWorkerState state;
	char		service_id[GRIDHA_ID_LEN];
	char		batch_id[GRIDHA_ID_LEN];
	TimestampTz started_at;
	TimestampTz state_since;
	Latch	   *latch;
} GridhaWorkerSlot;

typedef struct GridhaWorkerShared
{
	slock_t		mutex;
	int			nslots;
	GridhaWorkerSlot slots[FLEXIBLE_ARRAY_MEMBER];
} GridhaWorkerShared;

/* What a dynamic worker is told at start (bgw_extra) */
typedef struct GridhaWorkerStart
{
	pg_uuid_t	instance_id;
	char		label[GRIDHA_LABEL_LEN];
} GridhaWorkerStart;

StaticAssertDecl(sizeof(GridhaWorkerStart) <= BGW_EXTRALEN,
				 "GridhaWorkerStart must fit in bgw_extra");

static GridhaWorkerShared *worker_shared = NULL;
static GridhaWorkerSlot *my_slot = NULL;
static volatile sig_atomic_t worker_got_sigterm = false;
static bool worker_wake_at_commit = false;
static bool worker_xact_callback_set = false;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static const char *const worker_state_names[] = {
	[GRIDHA_WS_STARTING] = "starting",
	[GRIDHA_WS_WAITING] = "waiting for database",
	[GRIDHA_WS_IDLE] = "idle",
	[GRIDHA_WS_HANDING_OUT] = "handing out",
	[GRIDHA_WS_SUBMITTING] = "submitting",
	[GRIDHA_WS_REPORTING] = "reporting",
	[GRIDHA_WS_MONITORING] = "monitoring",
	[GRIDHA_WS_BACKING_OFF] = "backing off",
	[GRIDHA_WS_STOPPING] = "stopping",
};

PGDLLEXPORT void gridha_worker_main(Datum main_arg);

/*
 * gridha_worker_define_gucs: the worker settings. The run-time ones exist
 * in every session; gridha.workers and gridha.database only when gridha is
 * preloaded, since they are read once at server start.
 */
void
gridha_worker_define_gucs(void)
{
	DefineCustomIntVariable("gridha.naptime",
							"How long an idle worker sleeps when no batch arrives.",
							"A commit that enqueues batches wakes the workers at once.",
							&gridha_naptime_ms,
							1000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.submit_timeout",
							"Time limit of one HTTP request to a target.",
							"A submission that runs out of time is reported delayed and retried with backoff.",
							&gridha_submit_timeout_ms,
							15000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.monitor_interval",
							"How often a worker polls the ledger for its pending batches.",
							NULL,
							&gridha_monitor_interval_ms,
							500, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	/*
	 * Settings read only at server start exist only when gridha is
	 * preloaded: a library loaded later may not define them.
	 */
	if (!process_shared_preload_libraries_in_progress)
		return;

	DefineCustomIntVariable("gridha.workers",
							"Background-worker instances started with the server.",
							"Needs shared_preload_libraries = 'gridha'; each one counts against max_worker_processes.",
							&gridha_workers,
							0, 0, 1024,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomStringVariable("gridha.database",
							   "Database the background workers serve.",
							   "gridha must be installed there (CREATE EXTENSION gridha); workers wait until it is.",
							   &gridha_database,
							   "postgres",
							   PGC_POSTMASTER, 0,
							   NULL, NULL, NULL);
}

/*
 * worker_shmem_size: one slot per possible background worker.
 */
static Size
worker_shmem_size(void)
{
	return add_size(offsetof(GridhaWorkerShared, slots),
					mul_size(max_worker_processes, sizeof(GridhaWorkerSlot)));
}

static void
worker_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(worker_shmem_size());
}

static void
worker_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	worker_shared = ShmemInitStruct("gridha workers", worker_shmem_size(), &found);
	if (!found)
	{
		memset(worker_shared, 0, worker_shmem_size());
		SpinLockInit(&worker_shared->mutex);
		worker_shared->nslots = max_worker_processes;
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * gridha_worker_install_hooks: shared memory for the slots (preload only).
 */
void
gridha_worker_install_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = worker_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = worker_shmem_startup;
}

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

static void
worker_copy_id(char *dst, const char *src)
{
	if (src == NULL)
		dst[0] = '\0';
	else
		strlcpy(dst, src, GRIDHA_ID_LEN);
}

/*
 * gridha_worker_set_state: publishes what this worker does now, in its slot
 * and in pg_stat_activity.
 */
void
gridha_worker_set_state(GridhaWorkerState state, const char *service_id,
						const char *batch_id)
{
	if (my_slot == NULL)
		return;
	SpinLockAcquire(&worker_shared->mutex);
	if (my_slot->state != state)
		my_slot->state_since = GetCurrentTimestamp();
	my_slot->state = state;
	worker_copy_id(my_slot->service_id, service_id);
	worker_copy_id(my_slot->batch_id, batch_id);
	SpinLockRelease(&worker_shared->mutex);
}

/*
 * gridha_worker_stopping: true once SIGTERM has arrived.
 */
bool
gridha_worker_stopping(void)
{
	return worker_got_sigterm;
}

static void
worker_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	worker_got_sigterm = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

/*
 * worker_slot_release: frees this worker's slot at exit, whatever the exit.
 */
static void
worker_slot_release(int code, Datum arg)
{
	if (my_slot == NULL)
		return;
	SpinLockAcquire(&worker_shared->mutex);
	my_slot->pid = 0;
	my_slot->latch = NULL;
	my_slot->registered = false;
	SpinLockRelease(&worker_shared->mutex);
	my_slot = NULL;
}

/*
 * worker_slot_take: claims a free slot for this process.
 */
static void
worker_slot_take(const char *label)
{
	int			i;

	SpinLockAcquire(&worker_shared->mutex);
	for (i = 0; i < worker_shared->nslots; i++)
	{
		GridhaWorkerSlot *slot = &worker_shared->slots[i];

		if (slot->pid == 0)
		{
			memset(slot, 0, sizeof(*slot));
			slot->pid = MyProcPid;
			slot->latch = MyLatch;
			strlcpy(slot->label, label, GRIDHA_LABEL_LEN);
			slot->state = GRIDHA_WS_STARTING;
			slot->started_at = slot->state_since = GetCurrentTimestamp();
			my_slot = slot;
			break;
		}
	}
	SpinLockRelease(&worker_shared->mutex);
	if (my_slot == NULL)
		elog(ERROR, "gridha: no free worker slot");
	before_shmem_exit(worker_slot_release, (Datum) 0);
}

/*
 * worker_wait: sleeps until the latch is set or ms pass; reloads the
 * configuration when asked.
 */
static void
worker_wait(long ms)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
}

/*
 * worker_extension_ready: true when gridha is installed in this database.
 */
static bool
worker_extension_ready(void)
{
	bool		ready;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	ready = OidIsValid(get_extension_oid("gridha", true));
	CommitTransactionCommand();
	return ready;
}

/*
 * worker_register_instance: makes this worker's instance row (kind worker).
 * A start id that already has a row belongs to an earlier run of this
 * worker, which crashed: this run is a new instance with a fresh id.
 */
static void
worker_register_instance(pg_uuid_t *id, const char *label)
{
	static const char *sql =
		"INSERT INTO gridha.instances (instance_id, label, kind)"
		" VALUES ($1, $2, 'worker') ON CONFLICT (instance_id) DO NOTHING";
	Oid			types[2] = {UUIDOID, TEXTOID};
	bool		done = false;

	while (!done)
	{
		Datum		args[2];

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		args[0] = UUIDPGetDatum(id);
		args[1] = CStringGetTextDatum(label);
		if (SPI_execute_with_args(sql, 2, types, args, NULL, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "gridha: could not register the worker instance");
		done = SPI_processed == 1;
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
		if (!done)
			worker_random_uuid(id);
	}

	SpinLockAcquire(&worker_shared->mutex);
	my_slot->instance_id = *id;
	my_slot->registered = true;
	SpinLockRelease(&worker_shared->mutex);
}

/*
 * worker_release: hands back the claims at shutdown. A failure is logged;
 * the claims then expire as usual.
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
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		args[0] = UUIDPGetDatum(id);
		(void) SPI_execute_with_args(sql, 1, types, args, NULL, false, 0);
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
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
 * gridha_worker_main: entry point of every gridha worker.
 */
void
gridha_worker_main(Datum main_arg)
{
	GridhaWorkerStart start;
	pg_uuid_t	instance_id;
	char		appname[GRIDHA_LABEL_LEN + 16];

	memcpy(&start, MyBgworkerEntry->bgw_extra, sizeof(start));
	start.label[GRIDHA_LABEL_LEN - 1] = '\0';

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, worker_sigterm);
	BackgroundWorkerUnblockSignals();

	if (worker_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("gridha workers need shared_preload_libraries = 'gridha'")));
	worker_slot_take(start.label);
	if (DatumGetInt32(main_arg) == 0)
	{
		/* dynamic: known by the id start_worker returned from the start */
		SpinLockAcquire(&worker_shared->mutex);
		my_slot->instance_id = start.instance_id;
		my_slot->registered = true;
		SpinLockRelease(&worker_shared->mutex);
	}

	BackgroundWorkerInitializeConnection(gridha_database, NULL, 0);
	snprintf(appname, sizeof(appname), "gridha %s", start.label);
	SetConfigOption("application_name", appname, PGC_USERSET, PGC_S_SESSION);
	pgstat_report_appname(appname);

	/* gridha may be created later: wait for it, quietly */
	gridha_worker_set_state(GRIDHA_WS_WAITING, NULL, NULL);
	while (!worker_got_sigterm && !worker_extension_ready())
		worker_wait(gridha_naptime_ms);
	if (worker_got_sigterm)
		proc_exit(0);

	/* static workers: a fresh id; dynamic: the one start_worker returned */
	instance_id = start.instance_id;
	if (DatumGetInt32(main_arg) != 0)
		worker_random_uuid(&instance_id);
	worker_register_instance(&instance_id, start.label);
	ereport(LOG,
			(errmsg("gridha worker \"%s\" started as instance %s", start.label,
					DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(&instance_id))))));

	gridha_submit_init();
	gridha_worker_set_state(GRIDHA_WS_IDLE, NULL, NULL);

	while (!worker_got_sigterm)
	{
		bool		busy;

		pgstat_report_activity(STATE_RUNNING, "gridha cycle");
		busy = gridha_submit_cycle(&instance_id);
		pgstat_report_activity(STATE_IDLE, NULL);
		if (worker_got_sigterm)
			break;
		if (busy)
		{
			/* more may be ready: only look at the latch and the config */
			worker_wait(0);
			continue;
		}
		gridha_worker_set_state(GRIDHA_WS_IDLE, NULL, NULL);
		/* ... but not past the next slot of a rate-limited ready head */
		worker_wait(gridha_submit_wait_ms(Min(gridha_naptime_ms, gridha_monitor_interval_ms)));
	}

	gridha_worker_set_state(GRIDHA_WS_STOPPING, NULL, NULL);
	worker_release(&instance_id);
	gridha_submit_shutdown();
	ereport(LOG,
			(errmsg("gridha worker \"%s\" (instance %s) stopped and released its claims",
					start.label,
					DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(&instance_id))))));
	proc_exit(0);
}

/*
 * worker_require_shared: refuses worker functions when gridha is not
 * preloaded.
 */
static void
worker_require_shared(void)
{
	if (worker_shared == NULL)
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
 * the worker that is this instance to stop (SIGTERM: it reports the batch in
 * hand, releases its claims, exits). False when no running worker is it.
 */
Datum
gridha_stop_worker(PG_FUNCTION_ARGS)
{
	Datum		id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	pg_uuid_t  *uuid = DatumGetUUIDP(id);
	pid_t		pid = 0;
	int			i;

	worker_require_shared();

	SpinLockAcquire(&worker_shared->mutex);
	for (i = 0; i < worker_shared->nslots; i++)
	{
		GridhaWorkerSlot *slot = &worker_shared->slots[i];

		if (slot->pid != 0 && slot->registered &&
			memcmp(slot->instance_id.data, uuid->data, UUID_LEN) == 0)
		{
			pid = slot->pid;
			break;
		}
	}
	SpinLockRelease(&worker_shared->mutex);

	if (pid == 0)
		PG_RETURN_BOOL(false);
	if (kill(pid, SIGTERM) != 0)
		PG_RETURN_BOOL(false);
	PG_RETURN_BOOL(true);
}

PG_FUNCTION_INFO_V1(gridha_worker_slots);

/*
 * gridha_worker_slots: SQL gridha.worker_slots(), behind the gridha.workers
 * view: one row per running worker. Empty when gridha is not preloaded.
 */
Datum
gridha_worker_slots(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (worker_shared == NULL)
		return (Datum) 0;

	for (i = 0; i < worker_shared->nslots; i++)
	{
		GridhaWorkerSlot copy;
		Datum		values[8];
		bool		nulls[8] = {0};

		SpinLockAcquire(&worker_shared->mutex);
		copy = worker_shared->slots[i];
		SpinLockRelease(&worker_shared->mutex);
		if (copy.pid == 0)
			continue;

		if (copy.registered)
		{
			pg_uuid_t  *id = palloc(sizeof(pg_uuid_t));

			*id = copy.instance_id;
			values[0] = UUIDPGetDatum(id);
		}
		else
			nulls[0] = true;
		values[1] = CStringGetTextDatum(copy.label);
		values[2] = Int32GetDatum(copy.pid);
		values[3] = CStringGetTextDatum(worker_state_names[copy.state]);
		values[4] = TimestampTzGetDatum(copy.state_since);
		if (copy.service_id[0] == '\0')
			nulls[5] = nulls[6] = true;
		else
		{
			values[5] = CStringGetTextDatum(copy.service_id);
			values[6] = CStringGetTextDatum(copy.batch_id);
		}
		values[7] = TimestampTzGetDatum(copy.started_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * worker_wake_all: sets every worker's latch.
 */
static void
worker_wake_all(void)
{
	int			i;

	SpinLockAcquire(&worker_shared->mutex);
	for (i = 0; i < worker_shared->nslots; i++)
		if (worker_shared->slots[i].pid != 0 && worker_shared->slots[i].latch != NULL)
			SetLatch(worker_shared->slots[i].latch);
	SpinLockRelease(&worker_shared->mutex);
}

/*
 * worker_xact_callback: after a commit that enqueued batches, wake the
 * workers; the batches are visible to them by then.
 */
static void
worker_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (worker_wake_at_commit && worker_shared != NULL)
				worker_wake_all();
			worker_wake_at_commit = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			worker_wake_at_commit = false;
			break;
		default:
			break;
	}
}

PG_FUNCTION_INFO_V1(gridha_batches_wake);

/*
 * gridha_batches_wake: statement trigger after INSERT on gridha.batches;
 * the workers are woken when the transaction commits.
 */
Datum
gridha_batches_wake(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("gridha.batches_wake() must be called as a trigger")));
	if (worker_shared != NULL)
	{
		if (!worker_xact_callback_set)
		{
			RegisterXactCallback(worker_xact_callback, NULL);
			worker_xact_callback_set = true;
		}
		worker_wake_at_commit = true;
	}
	return PointerGetDatum(NULL);
}
