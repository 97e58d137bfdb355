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

extern int	gridha_claims_renew(Datum instance_id);
extern int	gridha_claims_acquire(Datum instance_id, bool is_worker,
								  ReturnSetInfo *rsinfo);

#endif							/* GRIDHA_CLAIMS_H */
