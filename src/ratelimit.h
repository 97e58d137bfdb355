/*-------------------------------------------------------------------------
 *
 * ratelimit.h
 *		Per-target rate limits, enforced at hand-out across all instances.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_RATELIMIT_H
#define GRIDHA_RATELIMIT_H

#include "postgres.h"

extern void gridha_ratelimit_prune_log(void);

#endif							/* GRIDHA_RATELIMIT_H */
