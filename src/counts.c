/*-------------------------------------------------------------------------
 *
 * counts.c
 *		How many services each target has (gridha.service_counts): the
 *		trigger on gridha.service_claims that keeps the count, and the
 *		flush that writes what a transaction changed.
 *
 * Words:
 *   count row  a row (target, shard) of gridha.service_counts; a target's
 *              count is the sum of its rows. A backend writes only the row
 *              of its own shard (pid % COUNTS_SHARDS), so a row may go
 *              below zero (a service created by one backend and removed by
 *              another): only the sum means anything
 *   delta      what this transaction changed of a target's count and has
 *              not written yet, per (sub)transaction that made it
 *
 * The trigger only adds to the deltas in backend memory; the deltas are
 * written at commit (and at PREPARE TRANSACTION), one row per target, in
 * target order, in a single statement. So a transaction that creates many
 * services writes each count row once, whatever their number, and a
 * transaction takes count-row locks only at its very end, in the same order
 * as every other: two transactions never wait for each other's count rows
 * in a cycle (a transaction that waits for a count row is committing and
 * waits for nothing else, and so is every holder of one). A reader of the
 * counts in the middle of a transaction that changed them (the balance of
 * gridha_claims_acquire) adds the unwritten deltas to what it reads
 * (gridha_counts_unwritten) instead of writing them early. Deltas made in a
 * subtransaction that rolls back are forgotten with it.
 *
 * A TRUNCATE of gridha.service_claims empties the counts and every
 * instance's held count: since 1.3 that is SQL of the install script (the
 * trigger function gridha_internal.service_claims_truncated), which calls
 * gridha_counts_truncated here for the deltas; 1.2's truncate trigger is
 * this file's C trigger, with 1.2's copy of those statements (counts12_truncated).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "counts.h"
#include "path.h"
#include "spi_util.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#define COUNTS_SHARDS 8

typedef struct CountsDelta
{
	char	   *target;
	int64		delta;
	SubTransactionId subid;		/* the (sub)transaction that made it */
	SubTransactionId flushed;	/* written (or wiped by a TRUNCATE) in this
								 * one; Invalid: not yet */
} CountsDelta;

/* In TopTransactionContext; forgotten at the end of every transaction */
static Oid	counts_relid = InvalidOid;	/* the gridha.service_claims they count */
static CountsDelta *counts_deltas = NULL;
static int	counts_ndeltas = 0;
static int	counts_maxdeltas = 0;
static bool counts_callbacks_registered = false;

/*
 * The deltas not written yet, summed per target, to the shard's rows, in
 * target order. Written at commit, after the trigger function's own
 * search_path is gone, with gridha's set again (gridha_pinned_run); every
 * name is schema-qualified besides.
 */
static GridhaStatement counts_write_stmt = {
	"INSERT INTO gridha.service_counts AS c (target, shard, services)"
	" SELECT d.target, $3, d.services"
	"   FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.int8[]))"
	"        AS d (target, services)"
	"  ORDER BY d.target COLLATE pg_catalog.\"C\""
	" ON CONFLICT (target, shard) DO UPDATE"
	"  SET services = c.services OPERATOR(pg_catalog.+) excluded.services",
	3, {TEXTARRAYOID, INT8ARRAYOID, INT4OID}
};

/*
 * counts_forget: drops every delta (the transaction ended; its memory goes
 * with TopTransactionContext).
 */
static void
counts_forget(void)
{
	counts_relid = InvalidOid;
	counts_deltas = NULL;
	counts_ndeltas = 0;
	counts_maxdeltas = 0;
}

/*
 * counts_remove_subxact: a subtransaction rolled back: its deltas go, and
 * the deltas it wrote wait to be written again.
 */
static void
counts_remove_subxact(SubTransactionId subid)
{
	int			i,
				n = 0;

	for (i = 0; i < counts_ndeltas; i++)
	{
		CountsDelta *d = &counts_deltas[i];

		if (d->subid == subid)
			continue;			/* made in it: undone with it */
		if (d->flushed == subid)
			d->flushed = InvalidSubTransactionId;	/* its write is undone */
		counts_deltas[n++] = *d;
	}
	counts_ndeltas = n;
}

/*
 * counts_add: adds delta to the target's count in this (sub)transaction.
 */
static void
counts_add(const char *target, int64 delta)
{
	SubTransactionId subid = GetCurrentSubTransactionId();
	int			i;

	for (i = 0; i < counts_ndeltas; i++)
	{
		CountsDelta *d = &counts_deltas[i];

		if (d->subid == subid && d->flushed == InvalidSubTransactionId &&
			strcmp(d->target, target) == 0)
		{
			d->delta += delta;
			return;
		}
	}
	if (counts_ndeltas == counts_maxdeltas)
	{
		int			n = Max(8, counts_maxdeltas * 2);

		if (counts_deltas == NULL)
			counts_deltas = MemoryContextAlloc(TopTransactionContext, n * sizeof(CountsDelta));
		else
			counts_deltas = repalloc(counts_deltas, n * sizeof(CountsDelta));
		counts_maxdeltas = n;
	}
	counts_deltas[counts_ndeltas].target = MemoryContextStrdup(TopTransactionContext, target);
	counts_deltas[counts_ndeltas].delta = delta;
	counts_deltas[counts_ndeltas].subid = subid;
	counts_deltas[counts_ndeltas].flushed = InvalidSubTransactionId;
	counts_ndeltas++;
}

/*
 * counts_sum: the deltas not written yet, summed per target (leaving out
 * targets whose sum is 0), as a text[] and a bigint[] Datum.
 */
static void
counts_sum(Datum *targets_array, Datum *deltas_array)
{
	const char **names = palloc(sizeof(char *) * Max(counts_ndeltas, 1));
	int64	   *sums = palloc(sizeof(int64) * Max(counts_ndeltas, 1));
	Datum	   *targets = palloc(sizeof(Datum) * Max(counts_ndeltas, 1));
	Datum	   *deltas = palloc(sizeof(Datum) * Max(counts_ndeltas, 1));
	int			n = 0,
				i,
				j;

	for (i = 0; i < counts_ndeltas; i++)
	{
		CountsDelta *d = &counts_deltas[i];

		if (d->flushed != InvalidSubTransactionId)
			continue;
		for (j = 0; j < n; j++)
			if (strcmp(names[j], d->target) == 0)
				break;
		if (j == n)
		{
			names[n] = d->target;
			sums[n] = 0;
			n++;
		}
		sums[j] += d->delta;
	}
	for (i = 0, j = 0; i < n; i++)
		if (sums[i] != 0)
		{
			targets[j] = CStringGetTextDatum(names[i]);
			deltas[j] = Int64GetDatum(sums[i]);
			j++;
		}
	*targets_array = gridha_text_array(targets, j);
	*deltas_array = gridha_int8_array(deltas, j);
}

/*
 * counts_write: writes the deltas not written yet, one row per target, and
 * marks them written in the current (sub)transaction. Inside SPI, run by
 * gridha_pinned_run (gridha's search_path for its statement). It runs at
 * commit, after the function that made the change (enqueue, a SECURITY
 * DEFINER function) has returned: the rows are written as the owner of
 * gridha.service_counts (*arg), whose bookkeeping they are.
 */
static void
counts_write(void *arg)
{
	Oid			owner = *(Oid *) arg;
	Datum		args[3];
	Oid			save_userid;
	int			save_sec_context;
	int			i;

	counts_sum(&args[0], &args[1]);
	args[2] = Int32GetDatum(MyProcPid % COUNTS_SHARDS);
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	gridha_exec(&counts_write_stmt, args, NULL, false);
	SetUserIdAndSecContext(save_userid, save_sec_context);
	for (i = 0; i < counts_ndeltas; i++)
		if (counts_deltas[i].flushed == InvalidSubTransactionId)
			counts_deltas[i].flushed = GetCurrentSubTransactionId();
}

/*
 * counts_owner: the owner of gridha.service_counts, or InvalidOid when the
 * gridha.service_claims the deltas count is gone (the extension was
 * dropped, or dropped and created again, in this transaction): the deltas
 * are then forgotten, with nothing left to write to.
 */
static Oid
counts_owner(void)
{
	Oid			nsp = get_namespace_oid("gridha", true);
	Oid			relid;
	Oid			owner = InvalidOid;
	HeapTuple	tup;

	if (OidIsValid(nsp) && get_relname_relid("service_claims", nsp) == counts_relid &&
		OidIsValid(relid = get_relname_relid("service_counts", nsp)))
	{
		tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
		if (HeapTupleIsValid(tup))
		{
			owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
			ReleaseSysCache(tup);
		}
	}
	if (!OidIsValid(owner))
		counts_forget();
	return owner;
}

/*
 * gridha_counts_pending: whether this transaction changed the counts and
 * has not written them yet. A check of the counts against the services
 * (the maintenance tick) waits for a transaction that has: it would read
 * the services this one created or removed but not their counts, repair
 * the difference, and then count them a second time at commit.
 */
bool
gridha_counts_pending(void)
{
	int			i;

	for (i = 0; i < counts_ndeltas; i++)
		if (counts_deltas[i].flushed == InvalidSubTransactionId)
			return true;
	return false;
}

/*
 * gridha_counts_unwritten: what this transaction changed of the counts and
 * has not written yet, per target, as a text[] of targets and a bigint[]
 * of what to add to their sums (empty arrays when nothing): a reader of
 * gridha.service_counts in the same transaction adds them to what it reads.
 */
void
gridha_counts_unwritten(Datum *targets, Datum *deltas)
{
	counts_sum(targets, deltas);
}

/*
 * counts_xact_callback: writes the deltas before commit (and before
 * PREPARE TRANSACTION); forgets them when the transaction ends.
 */
static void
counts_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PRE_PREPARE:
			if (gridha_counts_pending())
			{
				Oid			owner = counts_owner();

				if (!OidIsValid(owner))
					break;
				PushActiveSnapshot(GetTransactionSnapshot());
				SPI_connect();
				gridha_pinned_run(counts_write, &owner);
				SPI_finish();
				PopActiveSnapshot();
			}
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			counts_forget();
			break;
		default:
			break;
	}
}

/*
 * counts_subxact_callback: a subtransaction that rolls back takes its
 * deltas, and the writes made in it, with it; one that commits hands
 * them to its parent.
 */
static void
counts_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	int			i;

	if (event == SUBXACT_EVENT_ABORT_SUB)
		counts_remove_subxact(mySubid);
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		int			n = 0;

		for (i = 0; i < counts_ndeltas; i++)
		{
			CountsDelta *d = &counts_deltas[i];
			int			j;

			if (d->subid == mySubid)
				d->subid = parentSubid;
			if (d->flushed == mySubid)
				d->flushed = parentSubid;

			/*
			 * merged into the parent's delta of the same target, when it
			 * has one in the same state: the list stays one entry per
			 * target and (sub)transaction open, so N subtransactions that
			 * commit cost O(N), not O(N^2)
			 */
			for (j = 0; j < n; j++)
				if (counts_deltas[j].subid == d->subid &&
					counts_deltas[j].flushed == d->flushed &&
					strcmp(counts_deltas[j].target, d->target) == 0)
					break;
			if (d->subid == parentSubid && j < n)
				counts_deltas[j].delta += d->delta;
			else
				counts_deltas[n++] = *d;
		}
		counts_ndeltas = n;
	}
}

/*
 * counts_target: the target column of a gridha.service_claims row.
 */
static char *
counts_target(TriggerData *trigdata, HeapTuple tuple)
{
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);
	int			attno = SPI_fnumber(desc, "target");
	bool		isnull;
	Datum		value;

	if (attno <= 0)
		elog(ERROR, "gridha: gridha.service_claims has no column target");
	value = heap_getattr(tuple, attno, desc, &isnull);
	return isnull ? NULL : TextDatumGetCString(value);
}

/*
 * counts_truncated: every count goes with a TRUNCATE of
 * gridha.service_claims: the deltas not written count as written here, and
 * come back if this subtransaction rolls back.
 */
static void
counts_truncated(void)
{
	int			i;

	for (i = 0; i < counts_ndeltas; i++)
		if (counts_deltas[i].flushed == InvalidSubTransactionId)
			counts_deltas[i].flushed = GetCurrentSubTransactionId();
}

/*
 * SQL 1.2's emptying of the counts and of every instance's held count
 * after a TRUNCATE of gridha.service_claims (1.2's truncate trigger is
 * this file's C trigger; 1.3's is gridha_internal.service_claims_truncated
 * of the install script, with the same two statements). Goes when the
 * library stops serving 1.2.
 */
static GridhaStatement counts12_truncated_stmt = {
	"DELETE FROM gridha.service_counts",
	0, {InvalidOid}
};

static GridhaStatement counts12_truncated_held_stmt = {
	"UPDATE gridha.instances SET held = 0"
	" WHERE held OPERATOR(pg_catalog.<>) 0",
	0, {InvalidOid}
};

/*
 * counts12_truncated: SQL 1.2's truncate of the counts (the statements
 * above), after counts_truncated.
 */
static void
counts12_truncated(void)
{
	SPI_connect();
	gridha_exec(&counts12_truncated_stmt, NULL, NULL, false);
	gridha_exec(&counts12_truncated_held_stmt, NULL, NULL, false);
	SPI_finish();
}

PG_FUNCTION_INFO_V1(gridha_counts_truncated);

/*
 * gridha_counts_truncated: SQL gridha_internal.counts_truncated() (1.3),
 * called by the truncate trigger of the 1.3 script
 * (gridha_internal.service_claims_truncated, which then empties the
 * counts and every instance's held count): the deltas of this transaction
 * are not written (counts_truncated).
 */
Datum
gridha_counts_truncated(PG_FUNCTION_ARGS)
{
	counts_truncated();
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(gridha_service_claims_count);

/*
 * gridha_service_claims_count: trigger on gridha.service_claims, after each
 * row inserted or deleted or whose target changed, and (SQL 1.2) after a
 * truncate. A row adds to its target's delta; a truncate empties the
 * counts and every instance's held count (1.2's statements: above;
 * 1.3's truncate trigger is SQL of the install script), and the deltas
 * made before it are not written (unless the truncate's subtransaction
 * rolls back).
 */
Datum
gridha_service_claims_count(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TriggerEvent ev;
	char	   *old_target = NULL;
	char	   *new_target = NULL;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("gridha_internal.service_claims_count() must be called as a trigger")));
	if (!counts_callbacks_registered)
	{
		RegisterXactCallback(counts_xact_callback, NULL);
		RegisterSubXactCallback(counts_subxact_callback, NULL);
		counts_callbacks_registered = true;
	}
	ev = trigdata->tg_event;
	if (counts_relid != RelationGetRelid(trigdata->tg_relation))
	{
		/* deltas of a table dropped since (see counts_owner) */
		counts_ndeltas = 0;
		counts_relid = RelationGetRelid(trigdata->tg_relation);
	}
	if (TRIGGER_FIRED_BY_TRUNCATE(ev))
	{
		/* SQL 1.2's truncate trigger (1.3's is service_claims_truncated) */
		counts_truncated();
		counts12_truncated();
		return PointerGetDatum(NULL);
	}
	if (!TRIGGER_FIRED_FOR_ROW(ev) || !TRIGGER_FIRED_AFTER(ev))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("gridha_internal.service_claims_count() must fire after each row or after a truncate")));
	if (TRIGGER_FIRED_BY_INSERT(ev))
		new_target = counts_target(trigdata, trigdata->tg_trigtuple);
	else if (TRIGGER_FIRED_BY_DELETE(ev))
		old_target = counts_target(trigdata, trigdata->tg_trigtuple);
	else
	{
		old_target = counts_target(trigdata, trigdata->tg_trigtuple);
		new_target = counts_target(trigdata, trigdata->tg_newtuple);
		if (old_target != NULL && new_target != NULL && strcmp(old_target, new_target) == 0)
			return PointerGetDatum(NULL);
	}
	if (old_target != NULL)
		counts_add(old_target, -1);
	if (new_target != NULL)
		counts_add(new_target, 1);
	return PointerGetDatum(NULL);
}
