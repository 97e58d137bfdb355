/*-------------------------------------------------------------------------
 *
 * totals.c
 *		Running totals that no claim or batch row carries: the claims an
 *		instance took over from another one, and the writes refused as
 *		stale (RG001), per target, in gridha.target_totals (1.2).
 *
 * Words:
 *   slot row   a row (target, slot) of gridha.target_totals: slot is the
 *              backend's process number, so a row is only ever written by
 *              the one backend that has that slot at the time, and no
 *              transaction waits for another's totals row. A target's
 *              total is the sum of its rows (gridha.metrics)
 *   noted      counted in backend memory, not written yet
 *
 * A take over is noted when the take is made and written at the end of the
 * same call (gridha_totals_flush), in its transaction: if that rolls back,
 * so does the count, and a count noted by a call that failed before its
 * flush is forgotten at the (sub)transaction's abort. A stale write is
 * refused by raising RG001, which rolls its own transaction back: its
 * count is kept across that abort and written by this backend's next call
 * that flushes (an instance refused keeps calling: it polls again, or
 * reports its other batches); one written by a transaction that then rolls
 * back is noted again. A backend that exits with a refusal noted and no
 * call since loses that one count.
 *
 * While the database's SQL is older than 1.2 (no gridha.target_totals) the
 * noted counts are dropped.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "spi_util.h"
#include "totals.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

typedef struct TotalsEntry
{
	char	   *target;
	int64		noted[GRIDHA_NTOTALS];	/* not written yet */
	int64		written_stale;	/* stale refusals written by this
								 * transaction, noted again if it aborts */
} TotalsEntry;

static List *totals_entries = NIL;	/* of TotalsEntry *, in TopMemoryContext */
static bool totals_callback_registered = false;
static bool totals_any_noted = false;	/* some entry has a noted count */

/* $1 targets, $2 slot, $3 taken over, $4 stale refused */
static GridhaStatement totals_write_stmt = {
	"INSERT INTO gridha.target_totals AS t"
	"       (target, slot, claims_taken_over, stale_writes_refused)"
	" SELECT u.target, $2, u.taken, u.stale"
	"   FROM unnest($1::text[], $3::int8[], $4::int8[]) AS u(target, taken, stale)"
	"  ORDER BY u.target COLLATE \"C\""
	" ON CONFLICT (target, slot) DO UPDATE"
	"   SET claims_taken_over = t.claims_taken_over + excluded.claims_taken_over,"
	"       stale_writes_refused = t.stale_writes_refused + excluded.stale_writes_refused",
	4, {TEXTARRAYOID, INT4OID, INT8ARRAYOID, INT8ARRAYOID}
};

/*
 * totals_xact_callback: at the end of the top transaction, the stale
 * refusals it wrote are done with (commit) or noted again (abort); at any
 * abort, a take over noted and not written belongs to a call that failed.
 */
static void
totals_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;
	bool		abort = event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT;

	if (!abort && event != XACT_EVENT_COMMIT && event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_PREPARE)
		return;
	foreach(lc, totals_entries)
	{
		TotalsEntry *e = (TotalsEntry *) lfirst(lc);

		if (abort)
		{
			e->noted[GRIDHA_TOTAL_STALE_REFUSED] += e->written_stale;
			e->noted[GRIDHA_TOTAL_TAKEN_OVER] = 0;
			if (e->noted[GRIDHA_TOTAL_STALE_REFUSED] > 0)
				totals_any_noted = true;
		}
		e->written_stale = 0;
	}
}

static void
totals_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	foreach(lc, totals_entries)
		((TotalsEntry *) lfirst(lc))->noted[GRIDHA_TOTAL_TAKEN_OVER] = 0;
}

/*
 * gridha_totals_note: one more of "which" for the target, written by the
 * next gridha_totals_flush.
 */
void
gridha_totals_note(const char *target, GridhaTotal which)
{
	ListCell   *lc;
	TotalsEntry *e = NULL;

	if (!totals_callback_registered)
	{
		RegisterXactCallback(totals_xact_callback, NULL);
		RegisterSubXactCallback(totals_subxact_callback, NULL);
		totals_callback_registered = true;
	}
	foreach(lc, totals_entries)
	{
		if (strcmp(((TotalsEntry *) lfirst(lc))->target, target) == 0)
		{
			e = (TotalsEntry *) lfirst(lc);
			break;
		}
	}
	if (e == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		e = palloc0(sizeof(TotalsEntry));
		e->target = pstrdup(target);
		totals_entries = lappend(totals_entries, e);
		MemoryContextSwitchTo(old);
	}
	e->noted[which]++;
	totals_any_noted = true;
}

/* gridha_totals_noted: whether gridha_totals_flush has anything to write */
bool
gridha_totals_noted(void)
{
	return totals_any_noted;
}

/*
 * gridha_totals_flush: writes the noted totals to this backend's slot rows,
 * one statement, rows in target order. Inside SPI, in a writable
 * transaction; the last write of a call.
 */
void
gridha_totals_flush(void)
{
	ListCell   *lc;
	Datum	   *targets;
	Datum	   *taken;
	Datum	   *stale;
	Datum		args[4];
	int			n = 0;
	Oid			nsp;

	if (!totals_any_noted)
		return;
	foreach(lc, totals_entries)
	{
		TotalsEntry *e = (TotalsEntry *) lfirst(lc);

		if (e->noted[GRIDHA_TOTAL_TAKEN_OVER] > 0 || e->noted[GRIDHA_TOTAL_STALE_REFUSED] > 0)
			n++;
	}
	totals_any_noted = false;
	if (n == 0)
		return;

	nsp = get_namespace_oid("gridha", true);
	if (!OidIsValid(nsp) || !OidIsValid(get_relname_relid("target_totals", nsp)))
	{
		/* SQL older than 1.2: nowhere to write */
		foreach(lc, totals_entries)
			memset(((TotalsEntry *) lfirst(lc))->noted, 0, sizeof(int64) * GRIDHA_NTOTALS);
		return;
	}

	targets = palloc(sizeof(Datum) * n);
	taken = palloc(sizeof(Datum) * n);
	stale = palloc(sizeof(Datum) * n);
	n = 0;
	foreach(lc, totals_entries)
	{
		TotalsEntry *e = (TotalsEntry *) lfirst(lc);

		if (e->noted[GRIDHA_TOTAL_TAKEN_OVER] == 0 && e->noted[GRIDHA_TOTAL_STALE_REFUSED] == 0)
			continue;
		targets[n] = CStringGetTextDatum(e->target);
		taken[n] = Int64GetDatum(e->noted[GRIDHA_TOTAL_TAKEN_OVER]);
		stale[n] = Int64GetDatum(e->noted[GRIDHA_TOTAL_STALE_REFUSED]);
		n++;
	}
	args[0] = PointerGetDatum(construct_array(targets, n, TEXTOID, -1, false, TYPALIGN_INT));
	args[1] = Int32GetDatum(GRIDHA_MY_SLOT);
	args[2] = PointerGetDatum(construct_array(taken, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	args[3] = PointerGetDatum(construct_array(stale, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	gridha_exec(&totals_write_stmt, args, NULL, false);

	foreach(lc, totals_entries)
	{
		TotalsEntry *e = (TotalsEntry *) lfirst(lc);

		e->written_stale += e->noted[GRIDHA_TOTAL_STALE_REFUSED];
		memset(e->noted, 0, sizeof(int64) * GRIDHA_NTOTALS);
	}
}
