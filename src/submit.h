/*-------------------------------------------------------------------------
 *
 * submit.h
 *		A background worker's cycle: hand out, submit (many POSTs in
 *		flight), report, run maintenance (src/submit.c); the ledger
 *		monitor is src/monitor.c, the steps src/step.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_SUBMIT_H
#define GRIDHA_SUBMIT_H

#include "postgres.h"

#include "utils/uuid.h"

extern void gridha_submit_init(const pg_uuid_t *instance_id);
extern bool gridha_submit_cycle(void);
extern int	gridha_submit_in_flight(void);
extern int	gridha_submit_poll(long wait_ms);
extern long gridha_submit_wait_ms(long max_ms);
extern long gridha_submit_monitor_due_ms(void);
extern void gridha_submit_drain(void);
extern void gridha_submit_forget(void);
extern void gridha_submit_shutdown(void);

#endif							/* GRIDHA_SUBMIT_H */
