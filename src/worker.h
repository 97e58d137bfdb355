/*-------------------------------------------------------------------------
 *
 * worker.h
 *		Background-worker instances: how they start, run and stop.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_WORKER_H
#define GRIDHA_WORKER_H

#include "postgres.h"

extern void gridha_worker_register_static(void);

/* A worker's waits, each with a name of its own on PostgreSQL 17 */
typedef enum GridhaWait
{
	GRIDHA_WAIT_NAP,			/* GridhaNap: between cycles, nothing to do */
	GRIDHA_WAIT_LEDGER_ANSWER,	/* GridhaLedgerAnswer: POSTs in flight */
	GRIDHA_WAIT_STATUS_POLL,	/* GridhaStatusPoll: only status runs out */
	GRIDHA_WAIT_LIMIT,			/* GridhaLimitWait: batches in hand wait for
								 * room under a limit, the connection bucket
								 * or a Retry-After, nothing out */
	GRIDHA_WAIT_COUNT
} GridhaWait;

extern uint32 gridha_worker_wait_event(GridhaWait which);

#endif							/* GRIDHA_WORKER_H */
