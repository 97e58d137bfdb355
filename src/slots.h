/*-------------------------------------------------------------------------
 *
 * slots.h
 *		Background workers' shared-memory slots: who runs, as which
 *		instance, doing what; and the latches a commit sets to wake them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_SLOTS_H
#define GRIDHA_SLOTS_H

#include "postgres.h"

#include "utils/uuid.h"

#define GRIDHA_LABEL_LEN		64

/* What a worker is doing, as gridha.workers shows it */
typedef enum GridhaWorkerState
{
	GRIDHA_WS_STARTING,
	GRIDHA_WS_WAITING,			/* for the database or the extension */
	GRIDHA_WS_IDLE,
	GRIDHA_WS_HANDING_OUT,
	GRIDHA_WS_SUBMITTING,
	GRIDHA_WS_REPORTING,
	GRIDHA_WS_MONITORING,
	GRIDHA_WS_BACKING_OFF,
	GRIDHA_WS_STOPPING,
	GRIDHA_WS_WAITING_ROLE		/* for gridha.worker_role to be usable */
} GridhaWorkerState;

/* What a role check found (worker.c) */
typedef enum GridhaRoleCheck
{
	GRIDHA_ROLE_UNKNOWN,		/* no answer: the check could not run */
	GRIDHA_ROLE_OK,
	GRIDHA_ROLE_MISSING,
	GRIDHA_ROLE_NOLOGIN,
	GRIDHA_ROLE_NOT_SUBMITTER
} GridhaRoleCheck;

extern void gridha_slots_install_hooks(void);
extern bool gridha_slots_available(void);

/* The running worker's own slot */
extern void gridha_slot_take(const char *label, int32 static_no, const pg_uuid_t *start_id);
extern bool gridha_slot_take_stop_mark(void);
extern void gridha_slot_set_instance(const pg_uuid_t *id);
extern void gridha_slot_set_state(GridhaWorkerState state, const char *service_id,
								  const char *batch_id);
extern void gridha_slot_set_in_flight(int n);
extern int	gridha_slot_index(void);
extern void gridha_slot_set_role_check(GridhaRoleCheck result);
extern GridhaRoleCheck gridha_slot_role_check(void);

/* The role check's process answers into the slot of its worker */
extern void gridha_slot_answer_role_check(int index, pid_t worker_pid,
										  GridhaRoleCheck result);

/* How many targets' limits a slot shows (the busiest ones) */
#define GRIDHA_SLOT_LIMITS		8
#define GRIDHA_SLOT_TARGET_LEN	64

/* A worker's adaptive concurrency limit for one target, as published */
typedef struct GridhaSlotLimit
{
	char		target[GRIDHA_SLOT_TARGET_LEN];
	int			in_flight;		/* POSTs and status runs out now */
	int			limit;			/* the current limit */
	int64		failures;		/* overload signals since the worker started */
} GridhaSlotLimit;

extern void gridha_slot_set_limits(const GridhaSlotLimit *limits, int n);
extern bool gridha_slot_is_self(const pg_uuid_t *id);

/* Any session */
extern pid_t gridha_slot_pid_of(const pg_uuid_t *id);
extern pid_t gridha_slot_request_stop(const pg_uuid_t *id);
extern void gridha_slots_wake_all(void);

/* A worker's waits, each with a name of its own on PostgreSQL 17 */
typedef enum GridhaWait
{
	GRIDHA_WAIT_NAP,			/* GridhaNap: between cycles, nothing to do */
	GRIDHA_WAIT_LEDGER_ANSWER,	/* GridhaLedgerAnswer: POSTs in flight */
	GRIDHA_WAIT_STATUS_POLL,	/* GridhaStatusPoll: only status runs out */
	GRIDHA_WAIT_LIMIT,			/* GridhaLimitWait: batches in hand wait for
								 * room under a limit, the connection bucket
								 * or a Retry-After, nothing out */
	GRIDHA_WAIT_COUNT
} GridhaWait;

extern uint32 gridha_wait_event(GridhaWait which);

#endif							/* GRIDHA_SLOTS_H */
