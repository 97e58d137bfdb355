/*-------------------------------------------------------------------------
 *
 * generation.h
 *		Which gridha SQL the library serves: the one place that decides.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_GENERATION_H
#define GRIDHA_GENERATION_H

#include "postgres.h"

/* The installed SQL, as gridha_sql_generation reads it */
typedef enum GridhaGeneration
{
	GRIDHA_SQL_NONE,			/* no gridha in this database */
	GRIDHA_SQL_OLD,				/* 1.0 or 1.1: not served */
	GRIDHA_SQL_1_2,				/* served until ALTER EXTENSION gridha UPDATE */
	GRIDHA_SQL_1_3				/* the current SQL */
} GridhaGeneration;

extern GridhaGeneration gridha_sql_generation(void);
extern void gridha_require_served(void);

/* Whether the installed SQL is 1.3 (after gridha_require_served) */
static inline bool
gridha_sql_is_current(void)
{
	return gridha_sql_generation() == GRIDHA_SQL_1_3;
}

#endif							/* GRIDHA_GENERATION_H */
