/*-------------------------------------------------------------------------
 *
 * bands.h
 *		The epoch band lock (bands.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_BANDS_H
#define GRIDHA_BANDS_H

#include "postgres.h"

extern bool gridha_band_trylock(void);

#endif							/* GRIDHA_BANDS_H */
