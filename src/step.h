/*-------------------------------------------------------------------------
 *
 * step.h
 *		A background worker's steps (one transaction each) and its target
 *		calls (src/step.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_STEP_H
#define GRIDHA_STEP_H

#include "postgres.h"

#include <signal.h>

#include "nodes/primnodes.h"

/* Set while a step runs: SIGTERM cancels it */
extern volatile sig_atomic_t gridha_step_running;
/* Set by SIGTERM: from then on no lock wait of the worker is unbounded */
extern volatile sig_atomic_t gridha_step_stopping;
/* Set while the worker commits (gridha_step_commit): SIGTERM cancels a
 * wait for a synchronous standby */
extern volatile sig_atomic_t gridha_step_committing;
/* Set by SIGTERM when it cancelled the running step: a target function
 * that swallows the cancel is ended (the watchdog, src/step.c) */
extern volatile sig_atomic_t gridha_step_cancelled;

/* What a step runs inside its transaction */
typedef void (*GridhaStepFn) (void *arg);

extern void gridha_step_init(void);
extern bool gridha_step_run(GridhaStepFn fn, void *arg, const char *what, int *sqlstate);
extern bool gridha_step_run_call(GridhaStepFn fn, void *arg, const char *what,
								 char **message, bool quiet);
extern bool gridha_step_take_failure(void);
extern void gridha_step_commit(void);
extern void gridha_step_bound_lock_wait(void);
extern void gridha_step_pin_settings(void);

extern const char *gridha_step_refuses_functions(void);
extern void gridha_step_function_lock(Oid fn, const char *column, const char *target, bool set);
extern int	gridha_step_call_begin(const char *target);
extern void gridha_step_call_end(int nest);
extern Const *gridha_step_text_const(Oid type, Datum value, bool isnull);

/* The search_path a target function is called with (a worker's own
 * statements run with GRIDHA_SEARCH_PATH, common.h) */
#define GRIDHA_TARGET_SEARCH_PATH "pg_catalog, pg_temp"

#endif							/* GRIDHA_STEP_H */
