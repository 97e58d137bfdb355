/*-------------------------------------------------------------------------
 *
 * tables.h
 *		gridha's one relcache callback, and the check that its tables are
 *		plain local tables (see tables.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_TABLES_H
#define GRIDHA_TABLES_H

#include "postgres.h"

#include "utils/inval.h"

/* A cache of gridha's told of relcache invalidations (tables.c) */
extern void gridha_on_relcache(RelcacheCallbackFunction func, Datum arg);

/* Whether the tables were found plain since one of them last changed */
extern bool gridha_tables_plain;
extern void gridha_check_tables(void);

/*
 * gridha_require_plain_tables: refuses (RG030) to run while a table of
 * schema gridha is one gridha cannot read and write correctly (partitioned,
 * foreign, a partition, with inheritance children, or a Citus table). A
 * test of one flag once the tables were found plain.
 */
static inline void
gridha_require_plain_tables(void)
{
	if (likely(gridha_tables_plain))
		return;
	gridha_check_tables();
}

#ifdef GRIDHA_TEST_HOOKS
extern void gridha_test_fill_relcache(int count);
#endif

#endif							/* GRIDHA_TABLES_H */
