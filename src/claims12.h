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
extern void gridha_counts12_truncated(void);

/* claims.c: the band lock, shared by both generations */
extern bool gridha_claims_band_trylock(void);

#endif							/* GRIDHA_CLAIMS12_H */
