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

#include "fmgr.h"

/* the trigger batches_final (rows.c recognises it by its address) */
extern PGDLLEXPORT Datum gridha_batches_guard_final(PG_FUNCTION_ARGS);

#endif							/* GRIDHA_STATUS_H */
