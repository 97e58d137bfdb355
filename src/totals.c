/*-------------------------------------------------------------------------
 *
 * totals.c
 *		Running totals per target, in gridha.target_totals (1.2): those
 *		that no claim or batch row carries (the claims an instance took
 *		over from another one, the writes refused as stale, RG001, and
 *		since 1.3 the ledger's status answers that left out a batch asked
 *		about), and the services' own counters settled there when their
 *		queues run dry.
 *
 * Words:
 *   slot row   a row (target, slot) of gridha.target_totals, written only
 *              by the transaction that holds the slot's lock (a userlock,
 *              common.h, taken without waiting for the rest of the
 *              transaction: gridha_totals_slot), so no transaction waits
 *              for another's totals row. A backend's slots are its process
 *              number p, and p + k * TOTALS_SLOT_STRIDE for k = 1, 2, ...:
 *              no other live backend has them. It takes the first whose
 *              lock is free, which is p unless a prepared transaction of a
 *              backend that had p holds it (a prepared transaction keeps its
 *              locks, row locks and the slot's lock alike, after its
 *              backend moved on: in 1.2, which had the process number as
 *              the only slot, that backend's next settlement waited for it;
 *              isolation spec settle-prepared). A target's total is the sum
 *              of its rows (gridha.metrics)
 *   noted      counted in backend memory, not written yet
 *
 *   settled    a service's counters (enqueued, committed, invalid,
 *              resubmitted) up to the write that last emptied its queue
 *              (a report, src/status.c, or a hand-out that repaired its
 *              head, src/queue.c): that write adds what the service counted
 *              since it last ran dry to the settled_* columns here and
 *              marks it on the service's row (gridha_totals_settle_claim),
 *              so that gridha.metrics sums these rows and the services
 *              with work, never the idle ones
 *
 * A settlement is written by the report itself, into the backend's row of
 * the target, in the same command as the service's row (src/status.c);
 * only when that row is not there yet is it noted here. A take over, and
 * a settlement noted, are written at the end of the same call
 * (gridha_totals_flush), in its transaction: if that rolls back, so do
 * they, and what a call noted that failed before its flush is forgotten
 * at the (sub)transaction's abort. A stale write is
 * refused by raising RG001, which rolls its own transaction back: its
 * count is kept across that abort and written by this backend's next call
 * that flushes (an instance refused keeps calling: it polls again, or
 * reports its other batches); one written by a transaction that then rolls
 * back is noted again. A backend that exits with a refusal noted and no
 * call since loses that one count. A status answer that left a batch out
 * is noted by a worker outside any call, and kept the same way until a
 * report of that worker writes it.
 *
 * A target's rows follow it when it is renamed and go when it is deleted
 * (trigger targets_totals_follow); a count noted for a target renamed or
 * deleted since is dropped at the flush, which writes only the targets
 * that exist.
 *
 * On SQL 1.2 (served until ALTER EXTENSION gridha UPDATE) the 1.3 counts
 * (status_omitted, heads_repaired) have no columns and are dropped.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "common.h"
#include "generation.h"
#include "rows.h"
#include "spi_util.h"
#include "totals.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

typedef struct TotalsEntry
{
	char	   *target;
	int64		noted[GRIDHA_NTOTALS];	/* not written yet */
	int64		written_kept[GRIDHA_NTOTALS];	/* counts that outlive an
												 * abort (totals_kept)
												 * written by this
												 * transaction: noted again
												 * if it aborts */
} TotalsEntry;

static List *totals_entries = NIL;	/* of TotalsEntry *, in TopMemoryContext */
static bool totals_callback_registered = false;
static bool totals_any_noted = false;	/* some entry has a noted count */

/*
 * The distance between a backend's slots: above every process number
 * (backends, auxiliary processes and prepared transactions: PostgreSQL
 * allows fewer than 2^18 of the first and of the last). Its 2047th slot
 * still fits an int4.
 */
#define TOTALS_SLOT_STRIDE	(1 << 20)
/* how many of its slots a backend tries before it waits for the first */
#define TOTALS_SLOT_TRIES	2047

/* The slot this transaction holds, -1 before it takes one */
static int32 totals_slot = -1;

/*
 * $1 targets, $2 slot, then the amounts in GridhaTotal's order: $3 taken
 * over, $4 stale refused, $5 to $8 settled enqueued, committed, invalid,
 * resubmitted
 */
static GridhaStatement totals_write_stmt = {
	"INSERT INTO gridha.target_totals AS t"
	"       (target, slot, claims_taken_over, stale_writes_refused, settled_enqueued,"
	"        settled_committed, settled_invalid, settled_resubmitted)"
	" SELECT u.target, $2, u.taken, u.stale, u.enq, u.com, u.inv, u.res"
	"   FROM unnest($1::text[], $3::int8[], $4::int8[], $5::int8[], $6::int8[],"
	"               $7::int8[], $8::int8[]) AS u(target, taken, stale, enq, com, inv, res)"
	"   JOIN gridha.targets g ON g.target = u.target"
	"  ORDER BY u.target COLLATE \"C\""
	" ON CONFLICT (target, slot) DO UPDATE"
	"   SET claims_taken_over = t.claims_taken_over + excluded.claims_taken_over,"
	"       stale_writes_refused = t.stale_writes_refused + excluded.stale_writes_refused,"
	"       settled_enqueued = t.settled_enqueued + excluded.settled_enqueued,"
	"       settled_committed = t.settled_committed + excluded.settled_committed,"
	"       settled_invalid = t.settled_invalid + excluded.settled_invalid,"
	"       settled_resubmitted = t.settled_resubmitted + excluded.settled_resubmitted",
	8, {TEXTARRAYOID, INT4OID, INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID,
	INT8ARRAYOID, INT8ARRAYOID}
};

/*
 * ... and with SQL 1.3's columns: $9 status_omitted, $10 heads_repaired
 */
static GridhaStatement totals_write_13_stmt = {
	"INSERT INTO gridha.target_totals AS t"
	"       (target, slot, claims_taken_over, stale_writes_refused, settled_enqueued,"
	"        settled_committed, settled_invalid, settled_resubmitted, status_omitted,"
	"        heads_repaired)"
	" SELECT u.target, $2, u.taken, u.stale, u.enq, u.com, u.inv, u.res, u.omit, u.rep"
	"   FROM unnest($1::text[], $3::int8[], $4::int8[], $5::int8[], $6::int8[],"
	"               $7::int8[], $8::int8[], $9::int8[], $10::int8[])"
	"        AS u(target, taken, stale, enq, com, inv, res, omit, rep)"
	"   JOIN gridha.targets g ON g.target = u.target"
	"  ORDER BY u.target COLLATE \"C\""
	" ON CONFLICT (target, slot) DO UPDATE"
	"   SET claims_taken_over = t.claims_taken_over + excluded.claims_taken_over,"
	"       stale_writes_refused = t.stale_writes_refused + excluded.stale_writes_refused,"
	"       settled_enqueued = t.settled_enqueued + excluded.settled_enqueued,"
	"       settled_committed = t.settled_committed + excluded.settled_committed,"
	"       settled_invalid = t.settled_invalid + excluded.settled_invalid,"
	"       settled_resubmitted = t.settled_resubmitted + excluded.settled_resubmitted,"
	"       status_omitted = t.status_omitted + excluded.status_omitted,"
	"       heads_repaired = t.heads_repaired + excluded.heads_repaired",
	10, {TEXTARRAYOID, INT4OID, INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID,
	INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID}
};

/*
 * totals_kept: whether a count outlives an abort: it was not noted by the
 * call that aborts, so the abort does not undo it.
 */
static bool
totals_kept(int which)
{
	return which == GRIDHA_TOTAL_STALE_REFUSED || which == GRIDHA_TOTAL_STATUS_OMITTED;
}

/* totals_clear_unwritten: forget what only a call's own flush may write */
static void
totals_clear_unwritten(TotalsEntry *e)
{
	int			k;

	for (k = 0; k < GRIDHA_NTOTALS; k++)
		if (!totals_kept(k))
			e->noted[k] = 0;
}

/* totals_any: whether the entry has something noted */
static bool
totals_any(const TotalsEntry *e)
{
	int			k;

	for (k = 0; k < GRIDHA_NTOTALS; k++)
		if (e->noted[k] != 0)
			return true;
	return false;
}

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
	/* its lock went with the transaction (or with the prepared one) */
	totals_slot = -1;
	foreach(lc, totals_entries)
	{
		TotalsEntry *e = (TotalsEntry *) lfirst(lc);
		int			k;

		if (abort)
		{
			for (k = 0; k < GRIDHA_NTOTALS; k++)
				e->noted[k] += e->written_kept[k];
			totals_clear_unwritten(e);
			if (totals_any(e))
				totals_any_noted = true;
		}
		memset(e->written_kept, 0, sizeof(e->written_kept));
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
		totals_clear_unwritten((TotalsEntry *) lfirst(lc));
}

/* totals_callbacks: registers this file's callbacks, once */
static void
totals_callbacks(void)
{
	if (!totals_callback_registered)
	{
		RegisterXactCallback(totals_xact_callback, NULL);
		RegisterSubXactCallback(totals_subxact_callback, NULL);
		totals_callback_registered = true;
	}
}

/*
 * gridha_totals_slot: the slot whose rows of gridha.target_totals this
 * transaction writes (see the words above): its lock is taken, without
 * waiting, by the first call in the transaction and held to its end (by
 * the top transaction, so that a subtransaction's abort keeps it). Only
 * when every slot of the backend is held by a prepared transaction does
 * it wait, for the first.
 */
int32
gridha_totals_slot(void)
{
	ResourceOwner owner = CurrentResourceOwner;
	LOCKTAG		tag;
	int			k;

	if (totals_slot >= 0)
		return totals_slot;
	totals_callbacks();
	CurrentResourceOwner = TopTransactionResourceOwner;
	for (k = 0; k < TOTALS_SLOT_TRIES; k++)
	{
		int32		slot = GRIDHA_MY_SLOT + k * TOTALS_SLOT_STRIDE;

		GRIDHA_USERLOCK_TAG(tag, slot, GRIDHA_TOTALS_TAG);
		if (LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL)
		{
			totals_slot = slot;
			break;
		}
	}
	if (totals_slot < 0)
	{
		GRIDHA_USERLOCK_TAG(tag, GRIDHA_MY_SLOT, GRIDHA_TOTALS_TAG);
		(void) LockAcquire(&tag, ExclusiveLock, false, false);
		totals_slot = GRIDHA_MY_SLOT;
	}
	CurrentResourceOwner = owner;
	return totals_slot;
}

/*
 * gridha_totals_settle_claim: a service's queue runs dry (the claim row
 * rows holds is its current version, locked by this transaction). Its
 * counters as they stand, its enqueued one being tail_seq, plus what the
 * write that empties the queue adds to them (committed, invalid: a
 * report's own final status), go to its settled_* columns, appended to
 * claim (*nclaim grows by GRIDHA_TOTALS_NSETTLED); delta gets what each
 * grew by since it last ran dry, which the caller adds to the target's
 * settled totals. Whoever empties a queue settles it: gridha.metrics
 * reads only the services with work (see the file header).
 */
void
gridha_totals_settle_claim(GridhaRows *rows, int64 committed, int64 invalid,
						   GridhaColumn *claim, int *nclaim,
						   int64 delta[GRIDHA_TOTALS_NSETTLED])
{
	/* the first, enqueued, is tail_seq, a column of every version */
	static const GridhaOptionalColumn totals[GRIDHA_TOTALS_NSETTLED] = {
		GRIDHA_NOPTIONAL, CLAIM_COMMITTED_TOTAL, CLAIM_INVALID_TOTAL, CLAIM_RESUBMITTED_TOTAL
	};
	static const GridhaOptionalColumn settled[GRIDHA_TOTALS_NSETTLED] = {
		CLAIM_SETTLED_SEQ, CLAIM_SETTLED_COMMITTED, CLAIM_SETTLED_INVALID,
		CLAIM_SETTLED_RESUBMITTED
	};
	const int64 own[GRIDHA_TOTALS_NSETTLED] = {0, committed, invalid, 0};
	bool		isnull;
	int			k;

	for (k = 0; k < GRIDHA_TOTALS_NSETTLED; k++)
	{
		AttrNumber	from = k == 0 ? CLAIM_TAIL_SEQ : gridha_rows_attno(rows, totals[k]);
		AttrNumber	to = gridha_rows_attno(rows, settled[k]);
		Datum		d = gridha_rows_get(rows, GRIDHA_CLAIMS, from, &isnull);
		int64		value = (isnull ? 0 : DatumGetInt64(d)) + own[k];

		d = gridha_rows_get(rows, GRIDHA_CLAIMS, to, &isnull);
		delta[k] = value - (isnull ? 0 : DatumGetInt64(d));
		claim[(*nclaim)++] = (GridhaColumn) {to, Int64GetDatum(value), false};
	}
}

/*
 * gridha_totals_note: one more of "which" for the target, written by the
 * next gridha_totals_flush.
 */
void
gridha_totals_note(const char *target, GridhaTotal which)
{
	gridha_totals_add(target, which, 1);
}

/* gridha_totals_add: n more of "which" for the target (see above) */
void
gridha_totals_add(const char *target, GridhaTotal which, int64 n)
{
	ListCell   *lc;
	TotalsEntry *e = NULL;

	totals_callbacks();
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
	e->noted[which] += n;
	totals_any_noted = true;
}

/* gridha_totals_noted: whether gridha_totals_flush has anything to write */
bool
gridha_totals_noted(void)
{
	return totals_any_noted;
}

/*
 * gridha_totals_flush: writes the noted totals to this transaction's slot
 * rows (gridha_totals_slot), one statement, rows in target order. Inside
 * SPI, in a writable transaction; the last write of a call.
 */
void
gridha_totals_flush(void)
{
	ListCell   *lc;
	Datum	   *targets;
	Datum	   *amounts[GRIDHA_NTOTALS];
	Datum		args[2 + GRIDHA_NTOTALS];
	int			n = 0;
	int			k;
	int			nwrite = GRIDHA_NTOTALS;

	if (!totals_any_noted)
		return;
	foreach(lc, totals_entries)
	{
		if (totals_any((TotalsEntry *) lfirst(lc)))
			n++;
	}
	totals_any_noted = false;
	if (n == 0)
		return;

	/* SQL 1.2: no 1.3 columns (status_omitted, heads_repaired); those counts are dropped */
	if (!gridha_sql_is_current())
		nwrite = GRIDHA_TOTAL_STATUS_OMITTED;

	/*
	 * Hold gridha.service_claims as its writers do before the slot rows: a
	 * rename or delete of targets takes it first (trigger
	 * targets_name_change), then moves their slot rows, so it waits for
	 * this transaction to end instead of waiting for a slot row this
	 * transaction holds while this one waits for it. Every call that
	 * flushes today has opened it for writing already (rows.c); this keeps
	 * that true for any later one.
	 */
	gridha_rows_hold_for_write(GRIDHA_CLAIMS);

	targets = palloc(sizeof(Datum) * n);
	for (k = 0; k < GRIDHA_NTOTALS; k++)
		amounts[k] = palloc(sizeof(Datum) * n);
	n = 0;
	foreach(lc, totals_entries)
	{
		TotalsEntry *e = (TotalsEntry *) lfirst(lc);

		if (!totals_any(e))
			continue;
		targets[n] = CStringGetTextDatum(e->target);
		for (k = 0; k < GRIDHA_NTOTALS; k++)
			amounts[k][n] = Int64GetDatum(e->noted[k]);
		n++;
	}
	args[0] = PointerGetDatum(construct_array(targets, n, TEXTOID, -1, false, TYPALIGN_INT));
	args[1] = Int32GetDatum(gridha_totals_slot());
	for (k = 0; k < nwrite; k++)
		args[2 + k] = PointerGetDatum(construct_array(amounts[k], n, INT8OID, 8, FLOAT8PASSBYVAL,
													  TYPALIGN_DOUBLE));
	gridha_exec(nwrite == GRIDHA_NTOTALS ? &totals_write_13_stmt : &totals_write_stmt,
				args, NULL, false);

	foreach(lc, totals_entries)
	{
		TotalsEntry *e = (TotalsEntry *) lfirst(lc);

		for (k = 0; k < nwrite; k++)
			if (totals_kept(k))
				e->written_kept[k] += e->noted[k];
		memset(e->noted, 0, sizeof(int64) * GRIDHA_NTOTALS);
	}
}
