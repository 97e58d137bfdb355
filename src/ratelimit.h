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
#include "nodes/execnodes.h"

extern void gridha_ratelimit_prune_log(void);
extern bool gridha_ratelimit_active(void);
extern int	gridha_ratelimit_handout(Datum instance_id, int32 max_batches,
									 ReturnSetInfo *rsinfo);
extern long gridha_ratelimit_wait_ms(Datum instance_id);

#endif							/* GRIDHA_RATELIMIT_H */
