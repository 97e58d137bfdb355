/*-------------------------------------------------------------------------
 *
 * path.h
 *		gridha's search_path for the claim cycle's calls, which have no SET
 *		clause (path.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_PATH_H
#define GRIDHA_PATH_H

#include "fmgr.h"

/*
 * The C entry point body of an SQL function declared without a SET clause,
 * run with gridha's search_path (GRIDHA_SEARCH_PATH) from the first moment
 * it is needed on
 */
extern Datum gridha_pinned_call(FunctionCallInfo fcinfo, PGFunction body);
/*
 * An SQL-callable C entry point name(), declared without a SET clause,
 * whose body is name##_body
 */
#define GRIDHA_PINNED_ENTRY_POINT(name) \
	PG_FUNCTION_INFO_V1(name); \
	Datum \
	name(PG_FUNCTION_ARGS) \
	{ \
		return gridha_pinned_call(fcinfo, name##_body); \
	}
/* ... and code no SQL function called (a transaction callback) */
extern void gridha_pinned_run(void (*body) (void *arg), void *arg);
/* gridha's search_path from here to the end of the call */
extern void gridha_path_pin(void);

#endif							/* GRIDHA_PATH_H */
