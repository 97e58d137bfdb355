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

/*
 * The writes of every hand-out, as two CTEs ("b", "c") that follow a CTE
 * "s" of locked claims with columns service_id, head_seq and epoch; $1 is
 * the instance. The claim's head becomes submitting under the claim's
 * epoch, its attempts grow by one (b); the claim becomes in flight (c).
 * extra_where narrows the heads, extra_returning adds columns of s to b's
 * rows (service_id, batch_id, payload, epoch, attempts).
 */
#define GRIDHA_HANDOUT_WRITES(extra_where, extra_returning) \
	"b AS (" \
	"  UPDATE gridha.batches b" \
	"     SET status = 'submitting', epoch = s.epoch, attempts = b.attempts + 1," \
	"         instance_id = $1, handed_out_at = now(), not_before = NULL" \
	"    FROM s" \
	"   WHERE b.service_id = s.service_id AND b.seq = s.head_seq" extra_where \
	"     AND b.status IN ('queued', 'delayed', 'unknown', 'submitting')" \
	"  RETURNING b.service_id, b.batch_id, b.payload, b.epoch, b.attempts" extra_returning \
	"), c AS (" \
	"  UPDATE gridha.service_claims c" \
	"     SET ready_at = NULL, in_flight = true" \
	"    FROM b WHERE c.service_id = b.service_id" \
	")"

extern int	gridha_queue_write(Datum instance_id, Datum *service_ids, Datum *head_seqs,
							   Datum *epochs, int n, ReturnSetInfo *rsinfo);
extern int	gridha_queue_handout(Datum instance_id, int32 max_batches,
								 ReturnSetInfo *rsinfo);

#endif							/* GRIDHA_QUEUE_H */
