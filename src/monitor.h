/*-------------------------------------------------------------------------
 *
 * monitor.h
 *		A background worker's ledger monitor (src/monitor.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_MONITOR_H
#define GRIDHA_MONITOR_H

#include "postgres.h"

#include "nodes/pg_list.h"

#include "dlt_http.h"

/* A batch whose status a target's answer changes */
typedef struct GridhaAnswer
{
	char	   *service_id;
	char	   *batch_id;
	int64		epoch;
	char	   *status;			/* the ledger's word */
} GridhaAnswer;

extern void gridha_monitor_round(Datum instance, GridhaHttpMulti *multi);
extern void gridha_monitor_done(GridhaHttpDone *done, long away_ms);
extern List *gridha_monitor_take_answers(MemoryContext cxt);
extern int	gridha_monitor_runs(void);
extern void gridha_monitor_forget(bool all);

#endif							/* GRIDHA_MONITOR_H */
