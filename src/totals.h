/*-------------------------------------------------------------------------
 *
 * totals.h
 *		Running totals no claim or batch row carries (claims taken over,
 *		stale writes refused), per target, in gridha.target_totals.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_TOTALS_H
#define GRIDHA_TOTALS_H

#include "postgres.h"

typedef enum GridhaTotal
{
	GRIDHA_TOTAL_TAKEN_OVER,	/* a claim taken from another instance */
	GRIDHA_TOTAL_STALE_REFUSED, /* a write refused as stale (RG001) */
	GRIDHA_NTOTALS
} GridhaTotal;

extern void gridha_totals_note(const char *target, GridhaTotal which);
extern bool gridha_totals_noted(void);
extern void gridha_totals_flush(void);

#endif							/* GRIDHA_TOTALS_H */
