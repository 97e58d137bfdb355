/*-------------------------------------------------------------------------
 *
 * idseq.h
 *		ID windows (distributed hi-lo): sequences, reservations, the
 *		per-backend block of gridha.next_id, and the window agent.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_IDSEQ_H
#define GRIDHA_IDSEQ_H

#include "postgres.h"

extern int32 gridha_idseq_top_up(void);

#endif							/* GRIDHA_IDSEQ_H */
