/*-------------------------------------------------------------------------
 *
 * compat.h
 *		Every PostgreSQL version difference gridha cares about, in one place.
 *
 * gridha is built and tested against PostgreSQL 15, 16 and 17. It is
 * included after postgres.h (or postgres_fe.h in the client programs).
 *
 * Words:
 *   foo_compat  a call of foo with the newest release's arguments; on an
 *               older release the arguments it lacks are dropped, and the
 *               caller must pass what that release implied (NIL, NULL)
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_COMPAT_H
#define GRIDHA_COMPAT_H

#if PG_VERSION_NUM < 150000
#error "gridha needs PostgreSQL 15 or later"
#endif

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"

/*
 * The JSON parser (common/jsonapi.h), used by the server and by the client
 * programs (dlt_json.c):
 *
 * PostgreSQL 16: the semantic callbacks return JsonParseErrorType, so that
 * a callback can stop the parse (JSON_SEM_ACTION_FAILED); on 15 they return
 * void and the parse runs to its end whatever they find. JSON_CB_RESULT is
 * the callbacks' type, JSON_CB_RETURN(failed) their return.
 *
 * PostgreSQL 17: makeJsonLexContextCstringLen takes a first argument (a
 * context to fill in, NULL to allocate one), and freeJsonLexContext frees
 * it; before, the context and its string buffer are freed by hand.
 */
#if PG_VERSION_NUM >= 160000
#define JSON_CB_RESULT JsonParseErrorType
#define JSON_CB_RETURN(failed) return ((failed) ? JSON_SEM_ACTION_FAILED : JSON_SUCCESS)
#else
#define JSON_CB_RESULT void
#define JSON_CB_RETURN(failed) return
#endif

#if PG_VERSION_NUM >= 170000
#define JSON_LEX_NEW(buf, len, escapes) \
	makeJsonLexContextCstringLen(NULL, (buf), (len), PG_UTF8, (escapes))
#define JSON_LEX_FREE(lex) freeJsonLexContext(lex)
#else
#define JSON_LEX_NEW(buf, len, escapes) \
	makeJsonLexContextCstringLen((buf), (len), PG_UTF8, (escapes))
#define JSON_LEX_FREE(lex) gridha_json_lex_free(lex)

static inline void
gridha_json_lex_free(JsonLexContext *lex)
{
	if (lex->strval != NULL)
	{
		pfree(lex->strval->data);
		pfree(lex->strval);
	}
	pfree(lex);
}
#endif

/* The rest is the server's */
#ifndef FRONTEND

#include "utils/wait_event.h"

/*
 * PostgreSQL 17: an extension gives its waits names of their own
 * (WaitEventExtensionNew, shown in pg_stat_activity.wait_event); on 15 and
 * 16 every wait of an extension is PG_WAIT_EXTENSION ("Extension").
 * WAIT_EVENT_EXTENSION_NEW(name) is the wait event to pass to WaitLatch or
 * pgstat_report_wait_start.
 */
#if PG_VERSION_NUM >= 170000
#define WAIT_EVENT_EXTENSION_NEW(name) WaitEventExtensionNew(name)
#else
#define WAIT_EVENT_EXTENSION_NEW(name) ((void) (name), PG_WAIT_EXTENSION)
#endif

#include "access/tableam.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "nodes/parsenodes.h"
#include "utils/rangetypes.h"

/*
 * PostgreSQL 16: a relation RTE's permission fields, updatedCols among
 * them, moved to an RTEPermissionInfo that rte->perminfoindex points at in
 * estate->es_rteperminfos, and ExecInitRangeTable takes that list. The
 * executor reads updatedCols there (UPDATE OF triggers, the modified
 * columns of an AFTER UPDATE event, the index-unchanged hint) and checks
 * that the RTEPermissionInfo's relid is the RTE's.
 *
 * gridha_init_range_table: ExecInitRangeTable, each RTE with an
 * RTEPermissionInfo of its own from 16 on.
 * gridha_rte_set_relid: sets an RTE's relid (and its RTEPermissionInfo's).
 * gridha_rte_set_updated_cols: sets the columns an update of the RTE's
 * table writes.
 */
static inline void
gridha_init_range_table(EState *estate, List *rtable)
{
#if PG_VERSION_NUM >= 160000
	List	   *perminfos = NIL;
	ListCell   *lc;
	/* one allocation for all: they live and go together */
	RTEPermissionInfo *block = palloc0(sizeof(RTEPermissionInfo) * Max(list_length(rtable), 1));

	foreach(lc, rtable)
	{
		RangeTblEntry *rte = lfirst_node(RangeTblEntry, lc);
		RTEPermissionInfo *perminfo = &block[foreach_current_index(lc)];

		NodeSetTag(perminfo, T_RTEPermissionInfo);

		perminfo->relid = rte->relid;
		perminfos = lappend(perminfos, perminfo);
		rte->perminfoindex = list_length(perminfos);
	}
	ExecInitRangeTable(estate, rtable, perminfos);
#else
	ExecInitRangeTable(estate, rtable);
#endif
}

static inline void
gridha_rte_set_relid(EState *estate, Index rti, Oid relid)
{
	RangeTblEntry *rte = exec_rt_fetch(rti, estate);

	rte->relid = relid;
#if PG_VERSION_NUM >= 160000
	list_nth_node(RTEPermissionInfo, estate->es_rteperminfos,
				  rte->perminfoindex - 1)->relid = relid;
#endif
}

static inline void
gridha_rte_set_updated_cols(EState *estate, Index rti, Bitmapset *cols)
{
	RangeTblEntry *rte = exec_rt_fetch(rti, estate);

#if PG_VERSION_NUM >= 160000
	list_nth_node(RTEPermissionInfo, estate->es_rteperminfos,
				  rte->perminfoindex - 1)->updatedCols = cols;
#else
	rte->updatedCols = cols;
#endif
}

/*
 * PostgreSQL 16: EvalPlanQualInit takes resultRelations (15's own calls
 * pass NIL, as gridha does).
 */
#if PG_VERSION_NUM >= 160000
#define EvalPlanQualInit_compat(epqstate, parentestate, subplan, auxrowmarks, epqParam, resultRelations) \
	EvalPlanQualInit(epqstate, parentestate, subplan, auxrowmarks, epqParam, resultRelations)
#else
#define EvalPlanQualInit_compat(epqstate, parentestate, subplan, auxrowmarks, epqParam, resultRelations) \
	EvalPlanQualInit(epqstate, parentestate, subplan, auxrowmarks, epqParam)
#endif

/*
 * PostgreSQL 16: ExecBRUpdateTriggers reports the TM_Result of locking the
 * old row in tmresult (NULL: not wanted), before tmfd.
 */
#if PG_VERSION_NUM >= 160000
#define ExecBRUpdateTriggers_compat(estate, epqstate, relinfo, tupleid, fdw_trigtuple, newslot, tmresult, tmfd) \
	ExecBRUpdateTriggers(estate, epqstate, relinfo, tupleid, fdw_trigtuple, newslot, tmresult, tmfd)
#else
#define ExecBRUpdateTriggers_compat(estate, epqstate, relinfo, tupleid, fdw_trigtuple, newslot, tmresult, tmfd) \
	ExecBRUpdateTriggers(estate, epqstate, relinfo, tupleid, fdw_trigtuple, newslot, tmfd)
#endif

/*
 * PostgreSQL 16: table_tuple_update tells which indexes need entries for
 * the new version as a TU_UpdateIndexes instead of a bool (TU_Summarizing:
 * a HOT update that changed a column only summarizing indexes, BRIN,
 * cover), and ExecInsertIndexTuples takes onlySummarizing to match. On 15
 * the bool true is TU_All, and there is no TU_Summarizing update.
 */
#if PG_VERSION_NUM >= 160000
#define table_tuple_update_compat table_tuple_update
#define ExecInsertIndexTuples_compat ExecInsertIndexTuples
#else
typedef enum TU_UpdateIndexes
{
	TU_None,
	TU_All,
	TU_Summarizing
} TU_UpdateIndexes;

static inline TM_Result
table_tuple_update_compat(Relation rel, ItemPointer otid, TupleTableSlot *slot,
						  CommandId cid, Snapshot snapshot, Snapshot crosscheck,
						  bool wait, TM_FailureData *tmfd, LockTupleMode *lockmode,
						  TU_UpdateIndexes *update_indexes)
{
	bool		update_all = false;
	TM_Result	res;

	res = table_tuple_update(rel, otid, slot, cid, snapshot, crosscheck, wait,
							 tmfd, lockmode, &update_all);
	*update_indexes = update_all ? TU_All : TU_None;
	return res;
}

#define ExecInsertIndexTuples_compat(resultRelInfo, slot, estate, update, noDupErr, specConflict, arbiterIndexes, onlySummarizing) \
	ExecInsertIndexTuples(resultRelInfo, slot, estate, update, noDupErr, specConflict, arbiterIndexes)
#endif

/*
 * PostgreSQL 16: make_range takes escontext for soft errors (NULL: raise
 * them, as 15 does).
 */
#if PG_VERSION_NUM >= 160000
#define make_range_compat(typcache, lower, upper, empty, escontext) \
	make_range(typcache, lower, upper, empty, escontext)
#else
#define make_range_compat(typcache, lower, upper, empty, escontext) \
	make_range(typcache, lower, upper, empty)
#endif

/*
 * PostgreSQL 16: get_guc_variables returns how many settings there are
 * through its argument; on 15 GetNumConfigOptions says it.
 * gridha_guc_variables: every setting this process knows, and how many.
 */
#include "utils/guc_tables.h"

static inline struct config_generic **
gridha_guc_variables(int *n)
{
#if PG_VERSION_NUM >= 160000
	return get_guc_variables(n);
#else
	*n = GetNumConfigOptions();
	return get_guc_variables();
#endif
}

#endif							/* FRONTEND */

/* This backend's slot among the server's processes: unique among those alive */
#if PG_VERSION_NUM >= 170000
#define GRIDHA_MY_SLOT ((int32) MyProcNumber)
#else
#define GRIDHA_MY_SLOT ((int32) MyBackendId)
#endif

#endif							/* GRIDHA_COMPAT_H */
