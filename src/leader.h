/*-------------------------------------------------------------------------
 *
 * leader.h
 *		Leader leases for singleton duties, and the maintenance tick.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_LEADER_H
#define GRIDHA_LEADER_H

#include "postgres.h"

extern void gridha_leader_poll(Datum instance_id);

#endif							/* GRIDHA_LEADER_H */
