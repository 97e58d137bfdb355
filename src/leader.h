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

/* Settings of section 7 (leader.c) */
extern int	gridha_maintenance_interval_ms;
extern int	gridha_retention_s;
extern int	gridha_sweep_instances_after_s;
extern int	gridha_id_block_size;
extern int	gridha_prune_interval_ms;
extern int	gridha_prune_chunk;

extern void gridha_coordination_define_gucs(void);
extern void gridha_leader_poll(Datum instance_id);

#endif							/* GRIDHA_LEADER_H */
