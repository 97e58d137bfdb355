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

#endif							/* GRIDHA_STATUS_H */
