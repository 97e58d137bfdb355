/*-------------------------------------------------------------------------
 *
 * totals.h
 *		Running totals per target in gridha.target_totals: those no claim
 *		or batch row carries (claims taken over, stale writes refused) and
 *		the services' counters settled when their queues run dry.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_TOTALS_H
#define GRIDHA_TOTALS_H

#include "postgres.h"

#include "rows.h"

typedef enum GridhaTotal
{
	GRIDHA_TOTAL_TAKEN_OVER,	/* a claim taken from another instance */
	GRIDHA_TOTAL_STALE_REFUSED, /* a write refused as stale (RG001) */
	/* a service's counters since it last ran dry, settled as it does again */
	GRIDHA_TOTAL_SETTLED_ENQUEUED,
	GRIDHA_TOTAL_SETTLED_COMMITTED,
	GRIDHA_TOTAL_SETTLED_INVALID,
	GRIDHA_TOTAL_SETTLED_RESUBMITTED,
	/* a status answer of the ledger that left out a batch asked about (1.3) */
	GRIDHA_TOTAL_STATUS_OMITTED,
	/* 1.3: a head with no unfinished batch row, moved on (queue.c) */
	GRIDHA_TOTAL_HEADS_REPAIRED,
	GRIDHA_NTOTALS
} GridhaTotal;

/* the settled counters, GRIDHA_TOTAL_SETTLED_ENQUEUED and the three after it */
#define GRIDHA_TOTALS_NSETTLED 4

StaticAssertDecl(GRIDHA_TOTAL_SETTLED_RESUBMITTED == GRIDHA_TOTAL_SETTLED_ENQUEUED + GRIDHA_TOTALS_NSETTLED - 1,
				 "the settled totals follow each other in GridhaTotal");

extern void gridha_totals_settle_claim(GridhaRows *rows, int64 committed, int64 invalid,
									   GridhaColumn *claim, int *nclaim,
									   int64 delta[GRIDHA_TOTALS_NSETTLED]);
extern void gridha_totals_note(const char *target, GridhaTotal which);
extern void gridha_totals_add(const char *target, GridhaTotal which, int64 n);
extern bool gridha_totals_noted(void);
extern void gridha_totals_flush(void);
extern int32 gridha_totals_slot(void);

#endif							/* GRIDHA_TOTALS_H */
