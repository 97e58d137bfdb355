/*-------------------------------------------------------------------------
 *
 * counts.h
 *		How many services each target has: the trigger's deltas, written
 *		at commit; what is not written yet, for a reader in the same
 *		transaction.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_COUNTS_H
#define GRIDHA_COUNTS_H

#include "postgres.h"

extern void gridha_counts_unwritten(Datum *targets, Datum *deltas);
extern bool gridha_counts_pending(void);

#endif							/* GRIDHA_COUNTS_H */
