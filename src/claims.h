/*-------------------------------------------------------------------------
 *
 * claims.h
 *		Claims: renewal, acquisition with balance, release.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_CLAIMS_H
#define GRIDHA_CLAIMS_H

#include "postgres.h"
#include "fmgr.h"
#include "nodes/execnodes.h"
#include "instances.h"

extern void gridha_claims_begin(Datum instance_id);
extern void gridha_claims_count_later(Datum instance_id, int32 delta);
extern int	gridha_claims_finish(void);
extern int	gridha_claims_renew(Datum instance_id, const GridhaInstance *inst);
extern int	gridha_claims_acquire(Datum instance_id, const GridhaInstance *inst,
								  bool idle_poll, ReturnSetInfo *rsinfo);
extern bool gridha_claims_below_share(Datum instance_id, const GridhaInstance *inst);

#endif							/* GRIDHA_CLAIMS_H */
