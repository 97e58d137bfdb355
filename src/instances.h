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
	bool		is_worker;		/* kind = 'worker' */
	bool		cycle_due;		/* renew_interval has passed since its last
								 * claim cycle, or it never had one */
	int			serves;			/* the kinds of target it serves
								 * (targets.h): what it declared, every kind
								 * for a worker, GRIDHA_SERVES_ANY for an
								 * external instance that declared nothing */
	bool		lease_live;		/* its lease is within its soft expiry */
	int			held;			/* claims it holds */
} GridhaInstance;

extern GridhaInstance gridha_instance_touch(Datum instance_id);
extern void gridha_instance_check(Datum instance_id);
extern bool gridha_instance_key_waits(Datum instance_id);
extern void gridha_instance_write_key(Datum instance_id);
extern void gridha_instance_declare(Datum instance_id, int serves);
extern bool gridha_instance_session_gone(int64 key);

#endif							/* GRIDHA_INSTANCES_H */
