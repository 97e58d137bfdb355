/*-------------------------------------------------------------------------
 *
 * submit.h
 *		A background worker's cycle: hand out, submit (many POSTs in
 *		flight), report, monitor the ledger, run maintenance.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_SUBMIT_H
#define GRIDHA_SUBMIT_H

#include "postgres.h"

#include <signal.h>

#include "utils/uuid.h"

/* Set while a step (a transaction of the cycle) runs: SIGTERM cancels it */
extern volatile sig_atomic_t gridha_submit_in_step;
/* Set by SIGTERM: from then on no lock wait of the worker is unbounded */
extern volatile sig_atomic_t gridha_submit_stopping;
/* Set while the worker commits (gridha_submit_commit): SIGTERM cancels a
 * wait for a synchronous standby */
extern volatile sig_atomic_t gridha_submit_committing;
/* Set by SIGTERM when it cancelled the running step: a target function
 * that swallows the cancel is ended (see submit.c) */
extern volatile sig_atomic_t gridha_submit_cancelled;

extern void gridha_submit_init(const pg_uuid_t *instance_id);
extern bool gridha_submit_cycle(void);
extern int	gridha_submit_in_flight(void);
extern int	gridha_submit_poll(long wait_ms);
extern long gridha_submit_wait_ms(long max_ms);
extern bool gridha_submit_take_failure(void);
extern void gridha_submit_drain(void);
extern void gridha_submit_forget(void);
extern void gridha_submit_shutdown(void);
extern void gridha_submit_bound_lock_wait(void);
extern void gridha_submit_pin_settings(void);
extern void gridha_submit_commit(void);

/* The search_path every statement of a worker runs with */
#define GRIDHA_WORKER_SEARCH_PATH "pg_catalog, gridha, pg_temp"
/* ... and a target function is called with */
#define GRIDHA_TARGET_SEARCH_PATH "pg_catalog, pg_temp"

#endif							/* GRIDHA_SUBMIT_H */
