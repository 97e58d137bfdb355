/*-------------------------------------------------------------------------
 *
 * slots.c
 *		Background workers' shared-memory slots, gridha.workers, and the
 *		wake-up at the commit of an enqueue.
 *
 * Words:
 *   slot      a running worker's entry in shared memory: pid, instance id,
 *             label, state, one batch it is busy with and how many are in
 *             flight; gridha.workers reads the slots
 *   wake-up   a commit that enqueued batches sets every worker's latch, so
 *             idle workers do not wait for gridha.naptime
 *   limit     a worker's adaptive concurrency limit for one target (see
 *             submit.c); a slot shows up to GRIDHA_SLOT_LIMITS of them,
 *             read by gridha.worker_limits()
 *   start key what the postmaster starts a worker again with: the number
 *             of a static worker, the start id of a dynamic one (its
 *             bgw_extra); the same for every run of that registration
 *   stop mark gridha.stop_worker's note that an administrator stopped the
 *             worker of a start key. A worker exits with 0 (the postmaster
 *             forgets it) only when its mark is there, and with 1 (it is
 *             started again) otherwise; a run that starts and finds the
 *             mark (its predecessor was ended by force, with 1) takes it
 *             and exits with 0 at once
 *
 * There is one slot per possible background worker (max_worker_processes),
 * and as many stop marks; they exist only when gridha is preloaded.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"

#include "access/xact.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "slots.h"

#define SLOTS_ID_LEN			64

typedef struct GridhaWorkerSlot
{
	pid_t		pid;			/* 0: free */
	int32		static_no;		/* start key: a static worker's number, */
	pg_uuid_t	start_id;		/* ... or a dynamic one's start id */
	pg_uuid_t	instance_id;
	bool		registered;		/* instance_id is known */
	char		label[GRIDHA_LABEL_LEN];
	GridhaWorkerState state;
	char		service_id[SLOTS_ID_LEN];
	char		batch_id[SLOTS_ID_LEN];
	int			in_flight;		/* POSTs started, not reported yet */
	GridhaRoleCheck role_check; /* the last role check's answer */
	int			n_limits;
	GridhaSlotLimit limits[GRIDHA_SLOT_LIMITS];	/* per target */
	TimestampTz started_at;
	TimestampTz state_since;
	Latch	   *latch;
} GridhaWorkerSlot;

/* An administrator's stop of the worker of a start key */
typedef struct GridhaStopMark
{
	bool		used;
	int32		static_no;
	pg_uuid_t	start_id;
} GridhaStopMark;

typedef struct GridhaWorkerShared
{
	slock_t		mutex;
	int			nslots;
	GridhaWorkerSlot slots[FLEXIBLE_ARRAY_MEMBER];
	/* followed by nslots GridhaStopMark (slots_marks) */
} GridhaWorkerShared;

static GridhaWorkerShared *slots_shared = NULL;
static GridhaWorkerSlot *my_slot = NULL;
static bool slots_wake_at_commit = false;
static bool slots_xact_callback_set = false;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static const char *const slots_state_names[] = {
	[GRIDHA_WS_STARTING] = "starting",
	[GRIDHA_WS_WAITING] = "waiting for database",
	[GRIDHA_WS_IDLE] = "idle",
	[GRIDHA_WS_HANDING_OUT] = "handing out",
	[GRIDHA_WS_SUBMITTING] = "submitting",
	[GRIDHA_WS_REPORTING] = "reporting",
	[GRIDHA_WS_MONITORING] = "monitoring",
	[GRIDHA_WS_BACKING_OFF] = "backing off",
	[GRIDHA_WS_STOPPING] = "stopping",
	[GRIDHA_WS_WAITING_ROLE] = "waiting for its role",
};

/*
 * slots_shmem_size: one slot and one stop mark per possible background
 * worker.
 */
static Size
slots_shmem_size(void)
{
	return add_size(add_size(offsetof(GridhaWorkerShared, slots),
							 mul_size(max_worker_processes, sizeof(GridhaWorkerSlot))),
					mul_size(max_worker_processes, sizeof(GridhaStopMark)));
}

/* slots_marks: the stop marks, after the slots */
static GridhaStopMark *
slots_marks(void)
{
	return (GridhaStopMark *) &slots_shared->slots[slots_shared->nslots];
}

/* slots_mark_is: whether a stop mark is for this start key */
static bool
slots_mark_is(const GridhaStopMark *m, int32 static_no, const pg_uuid_t *start_id)
{
	return m->used && m->static_no == static_no &&
		(static_no != 0 || memcmp(m->start_id.data, start_id->data, UUID_LEN) == 0);
}

static void
slots_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(slots_shmem_size());
}

static void
slots_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	slots_shared = ShmemInitStruct("gridha workers", slots_shmem_size(), &found);
	if (!found)
	{
		memset(slots_shared, 0, slots_shmem_size());
		SpinLockInit(&slots_shared->mutex);
		slots_shared->nslots = max_worker_processes;
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * gridha_slots_install_hooks: shared memory for the slots (preload only).
 */
void
gridha_slots_install_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = slots_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = slots_shmem_startup;
}

/*
 * gridha_slots_available: whether gridha was preloaded, so workers exist.
 */
bool
gridha_slots_available(void)
{
	return slots_shared != NULL;
}

/*
 * slots_clip_len: how many bytes of an id fit in a slot: all of it, or as
 * many whole characters as fit (an id cut inside a multibyte character
 * would make the workers view return text that is not valid in the
 * database's encoding).
 */
static int
slots_clip_len(const char *src)
{
	if (src == NULL)
		return 0;
	return pg_mbcliplen(src, strlen(src), SLOTS_ID_LEN - 1);
}

/*
 * slots_copy_id: an id, cut to len bytes (slots_clip_len), into a slot.
 */
static void
slots_copy_id(char *dst, const char *src, int len)
{
	if (src != NULL)
		memcpy(dst, src, len);
	dst[len] = '\0';
}

/*
 * slots_release: frees this worker's slot at exit, whatever the exit.
 */
static void
slots_release(int code, Datum arg)
{
	if (my_slot == NULL)
		return;
	SpinLockAcquire(&slots_shared->mutex);
	my_slot->pid = 0;
	my_slot->latch = NULL;
	my_slot->registered = false;
	SpinLockRelease(&slots_shared->mutex);
	my_slot = NULL;
}

/*
 * gridha_slot_take: claims a free slot for this worker process, the worker
 * of a start key (static_no > 0: that static worker; 0: the dynamic worker
 * of start_id); the slot is freed when the process exits.
 */
void
gridha_slot_take(const char *label, int32 static_no, const pg_uuid_t *start_id)
{
	int			i;

	SpinLockAcquire(&slots_shared->mutex);
	for (i = 0; i < slots_shared->nslots; i++)
	{
		GridhaWorkerSlot *slot = &slots_shared->slots[i];

		if (slot->pid == 0)
		{
			memset(slot, 0, sizeof(*slot));
			slot->pid = MyProcPid;
			slot->static_no = static_no;
			if (static_no == 0)
				slot->start_id = *start_id;
			slot->latch = MyLatch;
			strlcpy(slot->label, label, GRIDHA_LABEL_LEN);
			slot->state = GRIDHA_WS_STARTING;
			slot->started_at = slot->state_since = GetCurrentTimestamp();
			my_slot = slot;
			break;
		}
	}
	SpinLockRelease(&slots_shared->mutex);
	if (my_slot == NULL)
		elog(ERROR, "gridha: no free worker slot");
	before_shmem_exit(slots_release, (Datum) 0);
}

/*
 * gridha_slot_is_self: whether this process is the background worker that
 * is this instance (false in any other process).
 */
bool
gridha_slot_is_self(const pg_uuid_t *id)
{
	bool		self;

	if (my_slot == NULL)
		return false;
	SpinLockAcquire(&slots_shared->mutex);
	self = my_slot->registered && memcmp(my_slot->instance_id.data, id->data, UUID_LEN) == 0;
	SpinLockRelease(&slots_shared->mutex);
	return self;
}

/*
 * gridha_slot_set_instance: this worker is known as that instance now.
 */
void
gridha_slot_set_instance(const pg_uuid_t *id)
{
	SpinLockAcquire(&slots_shared->mutex);
	my_slot->instance_id = *id;
	my_slot->registered = true;
	SpinLockRelease(&slots_shared->mutex);
}

/*
 * gridha_slot_set_state: publishes what this worker does now. No-op
 * outside a worker.
 */
void
gridha_slot_set_state(GridhaWorkerState state, const char *service_id,
					  const char *batch_id)
{
	int			service_len = slots_clip_len(service_id);
	int			batch_len = slots_clip_len(batch_id);

	if (my_slot == NULL)
		return;
	SpinLockAcquire(&slots_shared->mutex);
	if (my_slot->state != state)
		my_slot->state_since = GetCurrentTimestamp();
	my_slot->state = state;
	slots_copy_id(my_slot->service_id, service_id, service_len);
	slots_copy_id(my_slot->batch_id, batch_id, batch_len);
	SpinLockRelease(&slots_shared->mutex);
}

/*
 * gridha_slot_set_in_flight: how many POSTs this worker has in flight.
 */
void
gridha_slot_set_in_flight(int n)
{
	if (my_slot == NULL)
		return;
	SpinLockAcquire(&slots_shared->mutex);
	my_slot->in_flight = n;
	SpinLockRelease(&slots_shared->mutex);
}

/*
 * gridha_slot_index: this worker's slot, as a role check is told it.
 */
int
gridha_slot_index(void)
{
	return my_slot == NULL ? -1 : (int) (my_slot - slots_shared->slots);
}

/*
 * gridha_slot_set_role_check: resets (or sets) the answer of this worker's
 * role check.
 */
void
gridha_slot_set_role_check(GridhaRoleCheck result)
{
	if (my_slot == NULL)
		return;
	SpinLockAcquire(&slots_shared->mutex);
	my_slot->role_check = result;
	SpinLockRelease(&slots_shared->mutex);
}

/*
 * gridha_slot_role_check: the answer of this worker's last role check.
 */
GridhaRoleCheck
gridha_slot_role_check(void)
{
	GridhaRoleCheck result;

	if (my_slot == NULL)
		return GRIDHA_ROLE_UNKNOWN;
	SpinLockAcquire(&slots_shared->mutex);
	result = my_slot->role_check;
	SpinLockRelease(&slots_shared->mutex);
	return result;
}

/*
 * gridha_slot_answer_role_check: a role check's answer, into the slot of
 * the worker that asked (still that process's: else it is dropped).
 */
void
gridha_slot_answer_role_check(int index, pid_t worker_pid, GridhaRoleCheck result)
{
	if (slots_shared == NULL || index < 0 || index >= slots_shared->nslots)
		return;
	SpinLockAcquire(&slots_shared->mutex);
	if (slots_shared->slots[index].pid == worker_pid)
		slots_shared->slots[index].role_check = result;
	SpinLockRelease(&slots_shared->mutex);
}

/*
 * gridha_slot_set_limits: this worker's limits per target now (the first
 * GRIDHA_SLOT_LIMITS of them).
 */
void
gridha_slot_set_limits(const GridhaSlotLimit *limits, int n)
{
	if (my_slot == NULL)
		return;
	n = Min(n, GRIDHA_SLOT_LIMITS);
	SpinLockAcquire(&slots_shared->mutex);
	if (n > 0)
		memcpy(my_slot->limits, limits, sizeof(GridhaSlotLimit) * n);
	my_slot->n_limits = n;
	SpinLockRelease(&slots_shared->mutex);
}

/*
 * gridha_slot_take_stop_mark: whether an administrator stopped this worker
 * (gridha_slot_request_stop); the mark is taken: a later run of the same
 * start key is a new start. False outside a worker.
 */
bool
gridha_slot_take_stop_mark(void)
{
	GridhaStopMark *marks;
	bool		stopped = false;
	int			i;

	if (my_slot == NULL)
		return false;
	SpinLockAcquire(&slots_shared->mutex);
	marks = slots_marks();
	for (i = 0; i < slots_shared->nslots; i++)
		if (slots_mark_is(&marks[i], my_slot->static_no, &my_slot->start_id))
		{
			marks[i].used = false;
			stopped = true;
		}
	SpinLockRelease(&slots_shared->mutex);
	return stopped;
}

/*
 * gridha_slot_request_stop: an administrator stops the running worker
 * that is this instance: its start key gets a stop mark (so neither it nor
 * a run the postmaster would start after it ended by force serves again).
 * Returns its pid, to signal; 0 when no running worker is it.
 */
pid_t
gridha_slot_request_stop(const pg_uuid_t *id)
{
	GridhaStopMark *marks;
	pid_t		pid = 0;
	int			i;
	int			k;

	if (slots_shared == NULL)
		return 0;
	SpinLockAcquire(&slots_shared->mutex);
	marks = slots_marks();
	for (i = 0; i < slots_shared->nslots; i++)
	{
		GridhaWorkerSlot *slot = &slots_shared->slots[i];
		int			free_mark = -1;

		if (slot->pid == 0 || !slot->registered ||
			memcmp(slot->instance_id.data, id->data, UUID_LEN) != 0)
			continue;
		pid = slot->pid;
		for (k = 0; k < slots_shared->nslots; k++)
		{
			if (slots_mark_is(&marks[k], slot->static_no, &slot->start_id))
			{
				free_mark = -1;
				break;
			}
			if (!marks[k].used && free_mark < 0)
				free_mark = k;
		}
		if (free_mark >= 0)
		{
			marks[free_mark].used = true;
			marks[free_mark].static_no = slot->static_no;
			marks[free_mark].start_id = slot->start_id;
		}
		break;
	}
	SpinLockRelease(&slots_shared->mutex);
	return pid;
}

/*
 * gridha_slot_pid_of: the pid of the running worker that is this
 * instance, 0 when there is none.
 */
pid_t
gridha_slot_pid_of(const pg_uuid_t *id)
{
	pid_t		pid = 0;
	int			i;

	if (slots_shared == NULL)
		return 0;
	SpinLockAcquire(&slots_shared->mutex);
	for (i = 0; i < slots_shared->nslots; i++)
	{
		GridhaWorkerSlot *slot = &slots_shared->slots[i];

		if (slot->pid != 0 && slot->registered &&
			memcmp(slot->instance_id.data, id->data, UUID_LEN) == 0)
		{
			pid = slot->pid;
			break;
		}
	}
	SpinLockRelease(&slots_shared->mutex);
	return pid;
}

/*
 * gridha_slots_wake_all: sets every worker's latch.
 */
void
gridha_slots_wake_all(void)
{
	int			i;

	SpinLockAcquire(&slots_shared->mutex);
	for (i = 0; i < slots_shared->nslots; i++)
		if (slots_shared->slots[i].pid != 0 && slots_shared->slots[i].latch != NULL)
			SetLatch(slots_shared->slots[i].latch);
	SpinLockRelease(&slots_shared->mutex);
}

PG_FUNCTION_INFO_V1(gridha_worker_slots);

/*
 * gridha_worker_slots: SQL gridha.worker_slots(), behind the gridha.workers
 * view: one row per running worker. Empty when gridha is not preloaded.
 * Fills as many columns as the installed SQL declares (1.0: no in_flight).
 */
Datum
gridha_worker_slots(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (slots_shared == NULL)
		return (Datum) 0;

	for (i = 0; i < slots_shared->nslots; i++)
	{
		GridhaWorkerSlot copy;
		Datum		values[9];
		bool		nulls[9] = {0};

		SpinLockAcquire(&slots_shared->mutex);
		copy = slots_shared->slots[i];
		SpinLockRelease(&slots_shared->mutex);
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
		values[3] = CStringGetTextDatum(slots_state_names[copy.state]);
		values[4] = TimestampTzGetDatum(copy.state_since);
		if (copy.service_id[0] == '\0')
			nulls[5] = nulls[6] = true;
		else
		{
			values[5] = CStringGetTextDatum(copy.service_id);
			values[6] = CStringGetTextDatum(copy.batch_id);
		}
		values[7] = TimestampTzGetDatum(copy.started_at);
		values[8] = Int32GetDatum(copy.in_flight);
		Assert(rsinfo->setDesc->natts <= lengthof(values));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(gridha_worker_limits);

/*
 * gridha_worker_limits: SQL gridha.worker_limits(): one row per running
 * worker and target it has talked to lately: instance_id, target, the
 * requests in flight to it, the worker's current concurrency limit for
 * it (at most gridha.worker_inflight) and the overload signals (429, 503,
 * timeouts, refused or dropped connections, answers far slower than the
 * fastest seen) since the worker started. Empty when gridha is not
 * preloaded.
 */
Datum
gridha_worker_limits(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;
	int			k;

	InitMaterializedSRF(fcinfo, 0);
	if (slots_shared == NULL)
		return (Datum) 0;

	for (i = 0; i < slots_shared->nslots; i++)
	{
		GridhaWorkerSlot copy;

		SpinLockAcquire(&slots_shared->mutex);
		copy = slots_shared->slots[i];
		SpinLockRelease(&slots_shared->mutex);
		if (copy.pid == 0 || !copy.registered)
			continue;
		for (k = 0; k < copy.n_limits; k++)
		{
			Datum		values[5];
			bool		nulls[5] = {0};
			pg_uuid_t  *id = palloc(sizeof(pg_uuid_t));

			*id = copy.instance_id;
			copy.limits[k].target[GRIDHA_SLOT_TARGET_LEN - 1] = '\0';
			values[0] = UUIDPGetDatum(id);
			values[1] = CStringGetTextDatum(copy.limits[k].target);
			values[2] = Int32GetDatum(copy.limits[k].in_flight);
			values[3] = Int32GetDatum(copy.limits[k].limit);
			values[4] = Int64GetDatum(copy.limits[k].failures);
			Assert(rsinfo->setDesc->natts <= lengthof(values));
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}

/*
 * slots_xact_callback: after a commit that enqueued batches, wake the
 * workers; the batches are visible to them by then.
 */
static void
slots_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (slots_wake_at_commit && slots_shared != NULL)
				gridha_slots_wake_all();
			slots_wake_at_commit = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			slots_wake_at_commit = false;
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
				 errmsg("gridha_internal.batches_wake() must be called as a trigger")));
	if (slots_shared != NULL)
	{
		if (!slots_xact_callback_set)
		{
			RegisterXactCallback(slots_xact_callback, NULL);
			slots_xact_callback_set = true;
		}
		slots_wake_at_commit = true;
	}
	return PointerGetDatum(NULL);
}

PG_FUNCTION_INFO_V1(gridha_workers_wake);

/*
 * gridha_workers_wake: SQL gridha_internal.workers_wake() (1.3): the
 * workers are woken when the calling transaction commits, as after an
 * INSERT into gridha.batches; the Citus mode's enqueue calls it (its
 * batches go to the bucket tables, which have no trigger). Nothing
 * without preload.
 */
Datum
gridha_workers_wake(PG_FUNCTION_ARGS)
{
	if (slots_shared != NULL)
	{
		if (!slots_xact_callback_set)
		{
			RegisterXactCallback(slots_xact_callback, NULL);
			slots_xact_callback_set = true;
		}
		slots_wake_at_commit = true;
	}
	PG_RETURN_VOID();
}

static const char *const slots_wait_names[GRIDHA_WAIT_COUNT] = {
	"GridhaNap", "GridhaLedgerAnswer", "GridhaStatusPoll", "GridhaLimitWait"
};
static uint32 slots_wait_events[GRIDHA_WAIT_COUNT];

/*
 * gridha_wait_event: the wait event of one of the worker's waits:
 * on PostgreSQL 17 its own name, made at its first use in this process
 * (WaitEventExtensionNew gives every process the same event for a name);
 * on 15 and 16 PG_WAIT_EXTENSION (compat.h).
 */
uint32
gridha_wait_event(GridhaWait which)
{
	Assert(which >= 0 && which < GRIDHA_WAIT_COUNT);
	if (slots_wait_events[which] == 0)
		slots_wait_events[which] = WAIT_EVENT_EXTENSION_NEW(slots_wait_names[which]);
	return slots_wait_events[which];
}
