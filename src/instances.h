/*-------------------------------------------------------------------------
 *
 * instances.h
 *		Instances: registration, first-use registration, claim-cycle timing.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_INSTANCES_H
#define GRIDHA_INSTANCES_H

#include "postgres.h"

typedef struct GridhaInstance
{
	bool		is_worker;		/* kind = 'worker': claims only services
								 * whose target can be submitted to */
	bool		cycle_due;		/* renew_interval has passed since its last
								 * claim cycle, or it never had one */
} GridhaInstance;

extern GridhaInstance gridha_instance_touch(Datum instance_id);

#endif							/* GRIDHA_INSTANCES_H */
