/*-------------------------------------------------------------------------
 *
 * lockcheck.h
 *		The lock-order checker of the test build (GRIDHA_LOCK_CHECK): every
 *		row lock a statement takes on gridha's tables, through SQL or
 *		through rows.c, is checked against the order of docs/concurrency.md.
 *
 * A release build has none of it: the calls below are empty macros.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_LOCKCHECK_H
#define GRIDHA_LOCKCHECK_H

#include "executor/tuptable.h"
#include "utils/relcache.h"

#ifdef GRIDHA_LOCK_CHECK
extern void gridha_lockcheck_init(void);
extern void gridha_lockcheck_row(Relation rel, TupleTableSlot *slot, bool wait,
								 const char *what);
extern void gridha_lockcheck_exempt(const char *why);
#else
#define gridha_lockcheck_init() ((void) 0)
#define gridha_lockcheck_row(rel, slot, wait, what) ((void) 0)
#define gridha_lockcheck_exempt(why) ((void) 0)
#endif

#endif							/* GRIDHA_LOCKCHECK_H */
