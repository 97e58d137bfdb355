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

#include "fmgr.h"
#include "utils/inval.h"

/* A cache of gridha's told of relcache invalidations (tables.c) */
extern void gridha_on_relcache(RelcacheCallbackFunction func, Datum arg);

/* Whether the tables were found plain since one of them last changed */
extern bool gridha_tables_plain;
/* Whether the Citus mode was found since gridha.bucket_claims last changed */
extern bool gridha_tables_citus;
extern void gridha_check_tables(void);
extern bool gridha_check_tables_or_mode(void);

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

/*
 * gridha_require_plain_tables_or_mode: as gridha_require_plain_tables, but
 * lets the Citus mode pass: for the background worker's statements, which
 * call only the SQL API (whose entry points hand over in the mode) and
 * read what both layouts answer (each statement has the mode's branch).
 * True in the mode. On one server, the same test of one flag.
 */
static inline bool
gridha_require_plain_tables_or_mode(void)
{
	if (likely(gridha_tables_plain))
		return false;
	if (gridha_tables_citus)
		return true;
	return gridha_check_tables_or_mode();
}

/*
 * The Citus mode's contract calls (tables.c): gridha_citus_mode() says
 * whether gridha.citus_setup laid this database out by bucket;
 * gridha_citus_handover() calls gridha_internal.citus_<the SQL function's
 * name> with the same arguments and result (the mode's path, in the install
 * script) and returns its result, or returns false in *done when there is
 * no such function (the caller then refuses, RG035).
 */
extern bool gridha_citus_mode(void);
extern Datum gridha_citus_handover(FunctionCallInfo fcinfo, bool *done);

/*
 * GRIDHA_CITUS_HANDOVER: at the top of an entry point that the Citus mode
 * serves: outside the mode, one test of the flag gridha_tables_plain.
 */
#define GRIDHA_CITUS_HANDOVER(fcinfo) \
	do { \
		if (unlikely(!gridha_tables_plain) && gridha_citus_mode()) \
		{ \
			bool		handed_ = false; \
			Datum		result_ = gridha_citus_handover((fcinfo), &handed_); \
			if (handed_) \
				return result_; \
		} \
	} while (0)

#ifdef GRIDHA_TEST_HOOKS
extern void gridha_test_fill_relcache(int count);
#endif

#endif							/* GRIDHA_TABLES_H */
