/*-------------------------------------------------------------------------
 *
 * claims12.h
 *		SQL 1.2's copies of the cold claim and count statements
 *		(claims12.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_CLAIMS12_H
#define GRIDHA_CLAIMS12_H

#include "postgres.h"

extern int64 gridha_claims12_band(int64 system_identifier, bool *stored);

#endif							/* GRIDHA_CLAIMS12_H */
