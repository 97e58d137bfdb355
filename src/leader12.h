/*-------------------------------------------------------------------------
 *
 * leader12.h
 *		SQL 1.2's lease and maintenance calls, served until ALTER EXTENSION
 *		gridha UPDATE (src/leader12.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_LEADER12_H
#define GRIDHA_LEADER12_H

#include "postgres.h"

extern int64 gridha_leader12_poll_duty(Datum instance_id);
extern bool gridha_leader12_resign_own(Datum instance_id);

#endif							/* GRIDHA_LEADER12_H */
