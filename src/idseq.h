/*-------------------------------------------------------------------------
 *
 * idseq.h
 *		ID windows: what another file calls (SQL 1.2's window agent).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_IDSEQ_H
#define GRIDHA_IDSEQ_H

#include "postgres.h"

extern int32 gridha_idseq12_top_up(void);

#endif							/* GRIDHA_IDSEQ_H */
