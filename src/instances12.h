/*-------------------------------------------------------------------------
 *
 * instances12.h
 *		SQL 1.2's instance-row statements, served until ALTER EXTENSION
 *		gridha UPDATE (src/instances12.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_INSTANCES12_H
#define GRIDHA_INSTANCES12_H

#include "postgres.h"

extern bool gridha_instances12_insert(Datum instance_id, Datum owner_name,
									  bool *present, Datum *owner, bool *owner_null);
extern bool gridha_instances12_key(Datum instance_id, bool fresh, int64 *key);
extern bool gridha_instances12_adopt(Datum instance_id, Datum owner_name);
extern void gridha_instances12_declare(Datum instance_id, Datum serves, bool any);

#endif							/* GRIDHA_INSTANCES12_H */
