/*-------------------------------------------------------------------------
 *
 * ratelimit.h
 *		Per-target rate limits, enforced at hand-out across all instances.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_RATELIMIT_H
#define GRIDHA_RATELIMIT_H

#include "postgres.h"
#include "fmgr.h"
#include "nodes/pg_list.h"

extern List *gridha_ratelimit_closed(void);
extern int	gridha_ratelimit_take(const char *target, int want);
extern void gridha_ratelimit_log(Datum instance_id, Datum *targets, Datum *service_ids,
								 Datum *batch_ids, Datum *epochs, int n);
extern long gridha_ratelimit_wait_ms(Datum instance_id);

#endif							/* GRIDHA_RATELIMIT_H */
