/*-------------------------------------------------------------------------
 *
 * worker.h
 *		Background-worker instances: settings, shared slots, lifecycle.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_WORKER_H
#define GRIDHA_WORKER_H

#include "postgres.h"

#include "utils/uuid.h"

/* Settings (worker.c) */
extern int	gridha_workers;
extern char *gridha_database;
extern int	gridha_naptime_ms;
extern int	gridha_submit_timeout_ms;
extern int	gridha_monitor_interval_ms;

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
	GRIDHA_WS_STOPPING
} GridhaWorkerState;

extern void gridha_worker_define_gucs(void);
extern void gridha_worker_register_static(void);
extern void gridha_worker_install_hooks(void);

/* Called by the running worker (submit.c) to publish what it does */
extern void gridha_worker_set_state(GridhaWorkerState state,
									const char *service_id, const char *batch_id);
extern bool gridha_worker_stopping(void);

/* The worker's loop body: one queuer cycle and, when due, the monitor */
extern bool gridha_submit_cycle(pg_uuid_t *instance_id);
extern void gridha_submit_init(void);
extern void gridha_submit_shutdown(void);
extern long gridha_submit_wait_ms(long max_ms);

#endif							/* GRIDHA_WORKER_H */
