/*-------------------------------------------------------------------------
 *
 * path.c
 *		gridha's search_path for the claim cycle's calls, which have no SET
 *		clause.
 *
 * The claim cycle's calls (next_batch, next_batches and the reports) are
 * declared without a SET clause: on PostgreSQL 15 the clause alone cost
 * about 30,000 instructions a call (docs/dev/benchmarks.md), and most of
 * these calls run no statement at all (rows.c reads and writes their rows).
 * gridha_pinned_call sets gridha's search_path, in a GUC nest level of the
 * call's own, when it is first needed (gridha_path_pin), and undoes it
 * when the call returns; an error undoes it with its (sub)transaction.
 * It is needed:
 *   - before a statement is prepared or run (spi_util.c);
 *   - whenever the row writer opens one of gridha's tables (which takes
 *     in the invalidations other sessions sent), while
 *     anything but gridha's own is attached to the tables the writer uses
 *     (attached.c): their triggers, constraints and indexes run as the
 *     call's owner;
 *   - before the row writer fires the AFTER triggers its writes queued
 *     (a foreign key's check plans and runs a query on another table).
 * Until then the call resolves no name by the path: rows.c and tables.c
 * look tables and functions up in their schema, and what the writer runs
 * is gridha's own, C or with its own SET clause (docs/security.md).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common.h"
#include "path.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "utils/guc.h"

static int	path_calls = 0;		/* gridha_pinned_call frames on the stack */
static int	path_pin_call = 0;	/* the frame whose nest level set the path,
								 * 0: none */
static int	path_pin_nest;		/* ... that nest level */
static SubTransactionId path_pin_subxact;	/* ... the subtransaction that
											 * set it */

/*
 * gridha_path_pin: gridha's search_path from here to the end of the call,
 * for the statement about to be prepared or run (a kept plan is parsed
 * again whenever the path differs from the one it was made with), or for
 * what the row writer is about to run (rows.c). Already set: by the called
 * function's SET clause, by a worker's step, or earlier in this call.
 * Otherwise it is set in a nest level of the innermost gridha_pinned_call,
 * which undoes it; outside any such call the statement would run on
 * whatever path its caller chose, so it is refused.
 */
void
gridha_path_pin(void)
{
	if (likely(strcmp(namespace_search_path, GRIDHA_SEARCH_PATH) == 0))
		return;
	if (path_calls == 0)
		elog(ERROR, "gridha: a statement outside a call that sets gridha's search_path (now \"%s\")", namespace_search_path);
	path_pin_nest = NewGUCNestLevel();
	(void) set_config_option("search_path", GRIDHA_SEARCH_PATH, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	path_pin_call = path_calls;
	path_pin_subxact = GetCurrentSubTransactionId();
}

/*
 * path_frame_leave: the end of a frame of gridha_pinned_call or
 * gridha_pinned_run (call: its number). A path set inside a subtransaction
 * of the frame that has ended was undone with it (a later statement set it
 * again); after an error (failed), the abort of the (sub)transaction that
 * catches it undoes the path.
 */
static inline void
path_frame_leave(int call, bool failed)
{
	if (path_pin_call >= call)
	{
		if (!failed && path_pin_call == call &&
			path_pin_subxact == GetCurrentSubTransactionId())
			AtEOXact_GUC(true, path_pin_nest);
		path_pin_call = 0;
	}
	path_calls = call - 1;
}

/*
 * gridha_pinned_run: runs body(arg), with gridha's search_path set when it
 * is first needed (gridha_path_pin) and undone on return. For code no SQL
 * function called (a transaction callback), and for gridha_pinned_call.
 */
void
gridha_pinned_run(void (*body) (void *arg), void *arg)
{
	int			call = ++path_calls;

	PG_TRY();
	{
		body(arg);
	}
	PG_CATCH();
	{
		path_frame_leave(call, true);
		PG_RE_THROW();
	}
	PG_END_TRY();
	path_frame_leave(call, false);
}

/* A call of an entry point's body, run by gridha_pinned_run */
typedef struct PathCall
{
	FunctionCallInfo fcinfo;
	PGFunction	body;
	Datum		result;
} PathCall;

static void
path_call(void *arg)
{
	PathCall   *c = (PathCall *) arg;

	c->result = c->body(c->fcinfo);
}

/*
 * gridha_pinned_call: runs body, the C entry point of an SQL function
 * declared without a SET clause, as gridha_pinned_run runs its body. What
 * is attached to the tables the call writes directly is judged where the
 * writer opens them (rows.c), after the lock took in other sessions'
 * changes: nothing of them runs before.
 */
Datum
gridha_pinned_call(FunctionCallInfo fcinfo, PGFunction body)
{
	PathCall	c = {fcinfo, body, (Datum) 0};

	gridha_pinned_run(path_call, &c);
	return c.result;
}
