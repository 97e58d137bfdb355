/*-------------------------------------------------------------------------
 *
 * queue.h
 *		Batches in: enqueue. Batches out: the ordered hand-out.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_QUEUE_H
#define GRIDHA_QUEUE_H

#include "postgres.h"
#include "fmgr.h"
#include "nodes/execnodes.h"
#include "instances.h"

extern int	gridha_queue_write(Datum instance_id, Datum *service_ids, Datum *head_seqs,
							   Datum *epochs, int n, ReturnSetInfo *rsinfo,
							   Datum *batch_ids);
extern int	gridha_queue_handout(Datum instance_id, int32 max_batches,
								 const GridhaInstance *inst, ReturnSetInfo *rsinfo);

#endif							/* GRIDHA_QUEUE_H */
