/*-------------------------------------------------------------------------
 *
 * status.h
 *		Status transitions after a hand-out: report_submission,
 *		report_status, pending_batches.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_STATUS_H
#define GRIDHA_STATUS_H

#include "postgres.h"

/* Backoff before a delayed batch may be handed out again, by attempt */
extern int64 gridha_backoff_ms(int32 attempts);

#endif							/* GRIDHA_STATUS_H */
