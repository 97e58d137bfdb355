/*-------------------------------------------------------------------------
 *
 * rows.c
 *		The hot path's reads and writes of gridha's own tables, by key,
 *		without the planner: a hand-out's and a report's rows are found
 *		through their unique index, locked, checked in C and rewritten
 *		through the executor's single-row update (the one logical
 *		replication applies changes with), which maintains the indexes,
 *		checks NOT NULL and fires the tables' triggers.
 *
 * Words:
 *   rows      one GridhaRows: what a single SQL statement would do, one
 *             command of the transaction with one snapshot, taken after
 *             every earlier command of the transaction
 *   fetch     find a row by its unique key, as the snapshot sees it
 *   update    write a new version of the row fetched last, its columns
 *             with some replaced, if it is still the version the snapshot
 *             saw; if a concurrent transaction changed it, lock its newest
 *             version and let the caller judge that one and try again: what
 *             an UPDATE does under READ COMMITTED (EvalPlanQual); under
 *             REPEATABLE READ and SERIALIZABLE a concurrent change is a
 *             serialization failure
 *   lock      SELECT ... FOR UPDATE [SKIP LOCKED] of the current row
 *
 * Why not SQL: a hand-out and each report rewrite two rows known by key.
 * Through SPI, starting the executor for their statements (plan trees,
 * projections, CTE scans) cost more than the reads and writes themselves;
 * here the only set-up is opening the tables and their indexes. Like an
 * UPDATE, a write locks nothing before it writes, so it adds no WAL
 * record of its own.
 *
 * The finality guard lives here too: the trigger batches_final
 * (gridha_batches_guard_final: committed and invalid never change, whoever
 * writes) and, for the hot path's own writes, the same test made in C
 * after each write instead of the trigger (rows_check_guard).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "attached.h"
#include "compat.h"
#include "common.h"
#include "path.h"
#include "lockcheck.h"
#include "rows.h"
#include "tables.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_enum.h"
#include "catalog/pg_index.h"
#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parsetree.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

static const char *const rows_tables[GRIDHA_NTABLES] = {
	"service_claims", "batches", "instances", "target_totals"
};

/* The column names the attribute numbers of rows.h stand for */
static const char *const rows_claim_columns[] = {
	NULL, "service_id", "target", "claimant", "epoch", "soft_expiry",
	"hard_expiry", "head_seq", "tail_seq", "ready_at", "in_flight"
};
static const char *const rows_batch_columns[] = {
	NULL, "service_id", "batch_id", "seq", "payload", "status", "created_at",
	"epoch", "attempts", "not_before", "instance_id", "handed_out_at",
	"submitted_at", "finished_at", "detail"
};
static const char *const rows_instance_columns[] = {
	NULL, "instance_id", "label", "kind", "registered_at", "last_seen_at",
	"stopped_at", "session_key"
};
static const char *const rows_totals_columns[] = {
	NULL, "target", "slot", "claims_taken_over", "stale_writes_refused",
	"settled_enqueued", "settled_committed", "settled_invalid", "settled_resubmitted"
};

/* The optional columns of rows.h: their table and name */
static const struct
{
	GridhaTable table;
	const char *name;
}			rows_optional[GRIDHA_NOPTIONAL] = {
	[INSTANCE_SERVES] = {GRIDHA_INSTANCES, "serves"},
	[INSTANCE_OWNER] = {GRIDHA_INSTANCES, "owner"},
	[INSTANCE_SOFT_EXPIRY] = {GRIDHA_INSTANCES, "soft_expiry"},
	[INSTANCE_HARD_EXPIRY] = {GRIDHA_INSTANCES, "hard_expiry"},
	[INSTANCE_HELD] = {GRIDHA_INSTANCES, "held"},
	[INSTANCE_OWNER_CLUSTER] = {GRIDHA_INSTANCES, "owner_cluster"},
	[CLAIM_COMMITTED_TOTAL] = {GRIDHA_CLAIMS, "committed_total"},
	[CLAIM_INVALID_TOTAL] = {GRIDHA_CLAIMS, "invalid_total"},
	[CLAIM_RESUBMITTED_TOTAL] = {GRIDHA_CLAIMS, "resubmitted_total"},
	[CLAIM_SETTLED_SEQ] = {GRIDHA_CLAIMS, "settled_seq"},
	[CLAIM_SETTLED_COMMITTED] = {GRIDHA_CLAIMS, "settled_committed"},
	[CLAIM_SETTLED_INVALID] = {GRIDHA_CLAIMS, "settled_invalid"},
	[CLAIM_SETTLED_RESUBMITTED] = {GRIDHA_CLAIMS, "settled_resubmitted"},
};

/*
 * What this backend knows of each table's layout: checked once per
 * relation and again after each invalidation of it (an ALTER TABLE, an
 * ALTER EXTENSION UPDATE, the extension created again).
 */
typedef struct RowsLayout
{
	Oid			relid;			/* InvalidOid: check again */
	AttrNumber	optional[GRIDHA_NOPTIONAL];
} RowsLayout;

static RowsLayout rows_layout[GRIDHA_NTABLES];
static bool rows_callback_registered = false;

/*
 * Where this backend knows gridha's tables to be: schema gridha's OID and
 * each table's, looked up by name at first use and again after an
 * invalidation of the table (a DROP, a rename, a move to another schema:
 * each invalidates its relcache entry) or of any schema (a syscache
 * invalidation of pg_namespace). A name looked up in the syscache is
 * current as of the invalidations taken in, and so is this; but each
 * command of the hot path no longer pays the lookups.
 */
static Oid	rows_nspid = InvalidOid;
static Oid	rows_relids[GRIDHA_NTABLES];
static bool rows_names_registered = false;

static GridhaRowsRel *rows_open(GridhaRows *rows, GridhaTable table);

typedef struct RowsKeyDef
{
	GridhaTable table;
	int			nkeys;
	AttrNumber	attnos[2];
	bool		memo;			/* kept in the row memo (see there) */
} RowsKeyDef;

static const RowsKeyDef rows_keys[GRIDHA_NKEYS] = {
	{GRIDHA_CLAIMS, 1, {CLAIM_SERVICE_ID}, true},
	{GRIDHA_BATCHES, 2, {BATCH_SERVICE_ID, BATCH_BATCH_ID}, true},
	{GRIDHA_BATCHES, 2, {BATCH_SERVICE_ID, BATCH_SEQ}, false},
	{GRIDHA_INSTANCES, 1, {INSTANCE_ID}, true},
	{GRIDHA_TOTALS, 2, {TOTALS_TARGET, TOTALS_SLOT}, true}
};

/* gridha.batch_status's labels and, once looked up, their OIDs */
static const char *const rows_status_labels[GRIDHA_NSTATUSES] = {
	"queued", "submitting", "pending", "valid", "delayed", "unknown",
	"committed", "invalid"
};
static Oid	rows_status_type = InvalidOid;
static Oid	rows_status_oids[GRIDHA_NSTATUSES];

/*
 * rows_check_columns: the attribute numbers of rows.h are the table's: a
 * table changed by hand is refused rather than written wrongly.
 */
static void
rows_check_columns(Relation rel, GridhaTable table)
{
	const char *const *names;
	int			n;
	TupleDesc	desc = RelationGetDescr(rel);
	int			i;

	switch (table)
	{
		case GRIDHA_CLAIMS:
			names = rows_claim_columns;
			n = lengthof(rows_claim_columns);
			break;
		case GRIDHA_BATCHES:
			names = rows_batch_columns;
			n = lengthof(rows_batch_columns);
			break;
		case GRIDHA_INSTANCES:
			names = rows_instance_columns;
			n = lengthof(rows_instance_columns);
			break;
		default:
			names = rows_totals_columns;
			n = lengthof(rows_totals_columns);
			break;
	}
	for (i = 1; i < n; i++)
	{
		Form_pg_attribute att;

		if (i > desc->natts)
			elog(ERROR, "gridha: gridha.%s has no column %d (%s)", rows_tables[table], i, names[i]);
		att = TupleDescAttr(desc, i - 1);
		if (att->attisdropped || strcmp(NameStr(att->attname), names[i]) != 0)
			elog(ERROR, "gridha: column %d of gridha.%s is not %s", i, rows_tables[table], names[i]);
	}
}

/*
 * The partial indexes of gridha_rows_scan_index, once found by definition
 * (index InvalidOid: look again), forgotten when the index or its table
 * changes (rows_layout_callback): found by definition, each idle poll
 * would otherwise open every index of the table.
 */
static struct
{
	Oid			index;
	Oid			table;
}			rows_partial[2];

/*
 * The indexes rows_index found by definition (on a table, these columns,
 * unique or not), kept so that a command opens the one it scans rather
 * than every index of the table until the right one; forgotten as
 * rows_partial are. A few slots: the hot path scans fewer distinct ones.
 */
typedef struct RowsKnownIndex
{
	Oid			table;			/* InvalidOid: a free slot */
	Oid			index;			/* InvalidOid: look again */
	int			n;
	AttrNumber	attnos[INDEX_MAX_KEYS];
	bool		unique;
} RowsKnownIndex;

#define ROWS_KNOWN_INDEXES 8
static RowsKnownIndex rows_known[ROWS_KNOWN_INDEXES];
static int	rows_known_next = 0;

/*
 * What a writer maintains of each table's indexes: their OIDs and what
 * BuildIndexInfo makes of each (read-only templates, copied into each
 * command that writes), kept from one command, and one transaction, to the
 * next instead of built again by every ExecOpenIndices. Made again after
 * an invalidation of the table (its index list changes with it: a CREATE
 * or DROP INDEX, an index made ready or valid) or of one of its indexes
 * (rows_layout_callback). The memory of a set forgotten is freed at the
 * end of the transaction, not at once: a command under way (one whose
 * user's trigger called gridha) may still use its templates.
 */
typedef struct RowsIndexSet
{
	Oid			relid;			/* InvalidOid: make again */
	int			n;
	Oid		   *oids;
	IndexInfo **infos;
	ExprState **preds;			/* a partial index's predicate, ready to run
								 * (rows_pred_keepable), or NULL */
	MemoryContext cxt;			/* holds the above; NULL: none */
} RowsIndexSet;

static RowsIndexSet rows_index_sets[GRIDHA_NTABLES];

/*
 * Each table's triggers as a writer fires them (rows_take_guard: the
 * relcache's descriptor, copied, batches_final taken out), kept from one
 * command and one transaction to the next instead of copied by every
 * InitResultRelInfo; made again after an invalidation of the table (every
 * CREATE, DROP, ALTER, ENABLE or DISABLE of a trigger sends one) or of any
 * function (rows_guard_callback: batches_final is known by its function).
 * The executor only reads a descriptor; a forgotten one is freed at the
 * end of the transaction, as an index set is.
 */
typedef struct RowsTriggerSet
{
	Oid			relid;			/* InvalidOid: make again */
	TriggerDesc *desc;			/* NULL: the table has no trigger left */
	Trigger		guard;			/* as GridhaRowsRel's */
	bool		has_guard;
	RowsAfterUpdate after;		/* its AFTER UPDATE row triggers */
	MemoryContext cxt;
} RowsTriggerSet;

static RowsTriggerSet rows_trigger_sets[GRIDHA_NTABLES];
static List *rows_index_retired = NIL;	/* contexts to free at transaction end */
static uint64 rows_index_generation = 0;	/* invalidations of sets taken in */
static bool rows_index_xact_registered = false;

static void rows_index_xact_callback(XactEvent event, void *arg);
static Relation rows_index_desc(GridhaRowsRel *r, int i);

/*
 * rows_known_index: the slot for this table, columns and uniqueness (a
 * slot taken over when none is, its index InvalidOid).
 */
static RowsKnownIndex *
rows_known_index(Oid table, const AttrNumber *attnos, int n, bool unique)
{
	RowsKnownIndex *k;
	int			i;

	Assert(n <= INDEX_MAX_KEYS);
	for (i = 0; i < ROWS_KNOWN_INDEXES; i++)
	{
		k = &rows_known[i];
		if (k->table == table && k->n == n && k->unique == unique &&
			memcmp(k->attnos, attnos, n * sizeof(AttrNumber)) == 0)
			return k;
	}
	k = &rows_known[rows_known_next];
	rows_known_next = (rows_known_next + 1) % ROWS_KNOWN_INDEXES;
	k->table = table;
	k->index = InvalidOid;
	k->n = n;
	memcpy(k->attnos, attnos, n * sizeof(AttrNumber));
	k->unique = unique;
	return k;
}

/*
 * rows_layout_callback: a table changed (or every table): its layout is
 * checked again at its next use.
 */
static void
rows_layout_callback(Datum arg, Oid relid)
{
	int			i;

	for (i = 0; i < GRIDHA_NTABLES; i++)
		if (relid == InvalidOid || rows_layout[i].relid == relid)
			rows_layout[i].relid = InvalidOid;
	for (i = 0; i < lengthof(rows_partial); i++)
		if (relid == InvalidOid || rows_partial[i].index == relid || rows_partial[i].table == relid)
			rows_partial[i].index = InvalidOid;
	for (i = 0; i < ROWS_KNOWN_INDEXES; i++)
		if (relid == InvalidOid || rows_known[i].index == relid || rows_known[i].table == relid)
			rows_known[i].index = InvalidOid;
	for (i = 0; i < GRIDHA_NTABLES; i++)
	{
		RowsIndexSet *set = &rows_index_sets[i];
		bool		hit = relid == InvalidOid || set->relid == relid;
		int			k;

		for (k = 0; k < set->n && !hit; k++)
			hit = set->oids[k] == relid;
		if (hit)
			set->relid = InvalidOid;
		if (relid == InvalidOid || rows_trigger_sets[i].relid == relid)
			rows_trigger_sets[i].relid = InvalidOid;
	}
	rows_index_generation++;
}

/*
 * rows_names_callback, rows_schema_callback: a table changed (or every
 * table), a schema changed: its OID is looked up by name again.
 */
static void
rows_names_callback(Datum arg, Oid relid)
{
	int			i;

	for (i = 0; i < GRIDHA_NTABLES; i++)
		if (relid == InvalidOid || rows_relids[i] == relid)
			rows_relids[i] = InvalidOid;
}

static void
rows_schema_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	int			i;

	rows_nspid = InvalidOid;
	for (i = 0; i < GRIDHA_NTABLES; i++)
		rows_relids[i] = InvalidOid;
}

static void
rows_names_register(void)
{
	if (rows_names_registered)
		return;
	gridha_on_relcache(rows_names_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(NAMESPACEOID, rows_schema_callback, (Datum) 0);
	rows_names_registered = true;
}

/*
 * rows_schema: schema gridha's OID (an error when there is none).
 */
static Oid
rows_schema(void)
{
	rows_names_register();
	if (!OidIsValid(rows_nspid))
		rows_nspid = get_namespace_oid("gridha", false);
	return rows_nspid;
}

/*
 * rows_relid: the table's OID, InvalidOid when schema gridha has no such
 * table.
 */
static Oid
rows_relid(GridhaTable table)
{
	Oid			nspid = rows_schema();

	if (!OidIsValid(rows_relids[table]))
	{
		Oid			relid = get_relname_relid(rows_tables[table], nspid);

		/* an invalidation taken in by the lookup forgot the schema */
		if (OidIsValid(rows_nspid))
			rows_relids[table] = relid;
		return relid;
	}
	return rows_relids[table];
}

/*
 * rows_check_layout: the table's columns are what rows.h says, and its
 * optional columns are found, unless this was done since it last changed.
 */
static void
rows_check_layout(Relation rel, GridhaTable table)
{
	RowsLayout *layout = &rows_layout[table];
	TupleDesc	desc = RelationGetDescr(rel);
	int			k;
	int			i;

	if (!rows_callback_registered)
	{
		gridha_on_relcache(rows_layout_callback, (Datum) 0);
		rows_callback_registered = true;
	}
	if (layout->relid == RelationGetRelid(rel))
		return;
	rows_check_columns(rel, table);
	for (k = 0; k < GRIDHA_NOPTIONAL; k++)
	{
		layout->optional[k] = 0;
		if (rows_optional[k].table != table)
			continue;
		for (i = 0; i < desc->natts; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i);

			if (!att->attisdropped && strcmp(NameStr(att->attname), rows_optional[k].name) == 0)
				layout->optional[k] = att->attnum;
		}
	}
	layout->relid = RelationGetRelid(rel);
}

/*
 * gridha_rows_attno: the attribute number of an optional column in the
 * table as this command opened it, 0 when the table has no such column
 * (a database whose SQL is still gridha 1.0). Opens the table if needed.
 */
AttrNumber
gridha_rows_attno(GridhaRows *rows, GridhaOptionalColumn col)
{
	GridhaTable table = rows_optional[col].table;

	(void) rows_open(rows, table);
	return rows_layout[table].optional[col];
}

/*
 * rows_load_statuses: the OIDs of gridha.batch_status's labels, looked up
 * again whenever the type is not the one seen last (the extension was
 * created again).
 */
static void
rows_load_statuses(Relation batches)
{
	Oid			typid = TupleDescAttr(RelationGetDescr(batches), BATCH_STATUS - 1)->atttypid;
	int			i;

	if (typid == rows_status_type)
		return;
	for (i = 0; i < GRIDHA_NSTATUSES; i++)
	{
		HeapTuple	tup = SearchSysCache2(ENUMTYPOIDNAME, ObjectIdGetDatum(typid),
										  CStringGetDatum(rows_status_labels[i]));

		if (!HeapTupleIsValid(tup))
			elog(ERROR, "gridha: gridha.batch_status has no label %s", rows_status_labels[i]);
		rows_status_oids[i] = ((Form_pg_enum) GETSTRUCT(tup))->oid;
		ReleaseSysCache(tup);
	}
	rows_status_type = typid;
}

/*
 * gridha_status_datum: the gridha.batch_status value of a status. Valid
 * once a GridhaRows has opened gridha.batches in this backend.
 */
Datum
gridha_status_datum(GridhaStatus status)
{
	if (!OidIsValid(rows_status_type))
		elog(ERROR, "gridha: batch statuses not looked up yet");
	return ObjectIdGetDatum(rows_status_oids[status]);
}

/*
 * gridha_status_of: the status a gridha.batch_status value stands for.
 */
GridhaStatus
gridha_status_of(Datum value)
{
	Oid			oid = DatumGetObjectId(value);
	int			i;

	for (i = 0; i < GRIDHA_NSTATUSES; i++)
		if (rows_status_oids[i] == oid)
			return (GridhaStatus) i;
	elog(ERROR, "gridha: %u is not a gridha.batch_status label", oid);
	pg_unreachable();
}

/*
 * gridha_rows_hold_for_write: takes the table's lock a writing command
 * takes (RowExclusiveLock), ahead of the command; held to the end of the
 * transaction, as every table lock is. A caller that then judges what a
 * statement holding the table against writers may change (a hand-out, the
 * targets it serves: a rename takes gridha.service_claims first, trigger
 * targets_name_change) judges it after any such statement committed.
 */
void
gridha_rows_hold_for_write(GridhaTable table)
{
	Oid			relid;

	/*
	 * The OID this backend knows, locked: the lock takes in the
	 * invalidations committed meanwhile, so if it is still known after
	 * that, it is still the table of that name.
	 */
	rows_names_register();
	relid = rows_relids[table];
	if (OidIsValid(relid) && OidIsValid(rows_nspid))
	{
		LockRelationOid(relid, RowExclusiveLock);
		if (rows_relids[table] == relid && OidIsValid(rows_nspid))
			return;
		UnlockRelationOid(relid, RowExclusiveLock);
	}

	/*
	 * By name, locked and looked up again until both agree: a table
	 * dropped and made again (DROP and CREATE EXTENSION) while the lock
	 * was waited for is the new one, not the old one's OID.
	 */
	relid = RangeVarGetRelid(makeRangeVar("gridha", (char *) rows_tables[table], -1),
							 RowExclusiveLock, false);
	rows_relids[table] = relid;
	rows_nspid = get_rel_namespace(relid);
}

/*
 * gridha_rows_begin: starts one command of reads (write false) or of
 * reads, locks and updates (write true), with a snapshot that sees every
 * earlier command of the transaction. End it with gridha_rows_end.
 */
void
gridha_rows_begin(GridhaRows *rows, bool write)
{
	gridha_require_plain_tables();
	memset(rows, 0, sizeof(GridhaRows));
	rows->write = write;
	rows->nspid = rows_schema();
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	rows->snapshot = GetActiveSnapshot();
	if (write)
	{
		List	   *rtable = NIL;
		/* one allocation for the four: they live and go together */
		RangeTblEntry *rtes = palloc0(sizeof(RangeTblEntry) * GRIDHA_NTABLES);
		int			i;

		rows->estate = CreateExecutorState();
		for (i = 0; i < GRIDHA_NTABLES; i++)
		{
			RangeTblEntry *rte = &rtes[i];

			NodeSetTag(rte, T_RangeTblEntry);
			/* relid is filled in when the table is first used */
			rte->rtekind = RTE_RELATION;
			rte->relkind = RELKIND_RELATION;
			rte->rellockmode = RowExclusiveLock;
			rtable = lappend(rtable, rte);
			rows->rels[i].rti = i + 1;
		}
		gridha_init_range_table(rows->estate, rtable);
		rows->estate->es_snapshot = rows->snapshot;
		rows->estate->es_output_cid = GetCurrentCommandId(true);
		EvalPlanQualInit_compat(&rows->epq, rows->estate, NULL, NIL, -1, NIL);
		AfterTriggerBeginQuery();
	}
}

/*
 * rows_status_is_final: whether a gridha.batch_status value (an enum label's
 * OID) is committed or invalid.
 */
static bool
rows_status_is_final(Datum status)
{
	HeapTuple	tup = SearchSysCache1(ENUMOID, status);
	const char *label;
	bool		final;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "gridha: no enum label with OID %u", DatumGetObjectId(status));
	label = NameStr(((Form_pg_enum) GETSTRUCT(tup))->enumlabel);
	final = strcmp(label, "committed") == 0 || strcmp(label, "invalid") == 0;
	ReleaseSysCache(tup);
	return final;
}

PG_FUNCTION_INFO_V1(gridha_batches_guard_final);

/*
 * gridha_batches_guard_final: the AFTER UPDATE row trigger batches_final on
 * gridha.batches: committed and invalid are final, whoever writes. The
 * error undoes the whole statement.
 *
 * It tests the old status itself, in C, rather than through a WHEN clause:
 * PostgreSQL reads a WHEN back from its stored text for every UPDATE
 * statement on the table, and every hand-out and report is one. It runs no
 * SQL, so it needs no pinned search_path either (see the install script).
 * gridha's own writes (rows.c) do not fire it: rows_check_guard makes the
 * same test, with the same error, right after each write.
 */
Datum
gridha_batches_guard_final(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	old;
	int			attno;
	bool		isnull;
	Datum		status;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BY_UPDATE(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event))
		elog(ERROR, "gridha: batches_guard_final must be called as a row trigger on UPDATE");
	desc = RelationGetDescr(td->tg_relation);
	old = td->tg_trigtuple;
	attno = SPI_fnumber(desc, "status");
	if (attno <= 0)
		elog(ERROR, "gridha: batches_guard_final: the table has no status column");
	status = heap_getattr(old, attno, desc, &isnull);
	if (!isnull && rows_status_is_final(status))
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_NOT_IN_FLIGHT),
				 errmsg("batch \"%s\" of service \"%s\" is already %s",
						SPI_getvalue(old, desc, SPI_fnumber(desc, "batch_id")),
						SPI_getvalue(old, desc, SPI_fnumber(desc, "service_id")),
						SPI_getvalue(old, desc, attno)),
				 errdetail("Committed and invalid are final statuses and never change.")));
	return PointerGetDatum(NULL);
}

/*
 * The function of the trigger batches_final (gridha_batches_guard_final,
 * above),
 * once recognised by its address, forgotten when any function changes
 * (a CREATE OR REPLACE may point the same OID at another symbol).
 */
static Oid	rows_guard_fn = InvalidOid;
static bool rows_guard_registered = false;

static void
rows_guard_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	int			i;

	rows_guard_fn = InvalidOid;
	for (i = 0; i < GRIDHA_NTABLES; i++)
		rows_trigger_sets[i].relid = InvalidOid;
	rows_index_generation++;
}

/*
 * rows_is_guard: whether a trigger of gridha.batches is batches_final as
 * the extension creates it: an enabled AFTER UPDATE row trigger without a
 * WHEN clause, arguments or transition tables, calling
 * gridha_batches_guard_final of this library. Only a C function of that
 * symbol is loaded to compare addresses: another trigger's function (a
 * disabled one's, or one whose library is gone) is never loaded here, so
 * it breaks no write that firing it would not break.
 */
static bool
rows_is_guard(Trigger *trig)
{
	FmgrInfo	finfo;
	HeapTuple	tup;
	Form_pg_proc proc;
	bool		candidate;
	bool		isnull;
	Datum		src;

	if (trig->tgtype != (TRIGGER_TYPE_ROW | TRIGGER_TYPE_UPDATE) ||
		trig->tgenabled == TRIGGER_DISABLED ||
		trig->tgqual != NULL || trig->tgnargs != 0 ||
		trig->tgoldtable != NULL || trig->tgnewtable != NULL)
		return false;
	if (!rows_guard_registered)
	{
		CacheRegisterSyscacheCallback(PROCOID, rows_guard_callback, (Datum) 0);
		rows_guard_registered = true;
	}
	if (OidIsValid(rows_guard_fn))
		return trig->tgfoid == rows_guard_fn;
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(trig->tgfoid));
	if (!HeapTupleIsValid(tup))
		return false;
	proc = (Form_pg_proc) GETSTRUCT(tup);
	candidate = proc->prolang == ClanguageId && !proc->prosecdef &&
		heap_attisnull(tup, Anum_pg_proc_proconfig, NULL);
	if (candidate)
	{
		src = SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_prosrc, &isnull);
		candidate = !isnull && strcmp(TextDatumGetCString(src), "gridha_batches_guard_final") == 0;
	}
	ReleaseSysCache(tup);
	if (!candidate)
		return false;
	fmgr_info(trig->tgfoid, &finfo);
	if (finfo.fn_addr != gridha_batches_guard_final)
		return false;
	rows_guard_fn = trig->tgfoid;
	return true;
}

/*
 * rows_take_guard: takes batches_final out of the triggers the writer's
 * updates of gridha.batches fire, to test what it tests in
 * gridha_rows_update instead (rows_check_guard): the same refusal, without
 * queueing an AFTER trigger event per write and firing it at the end of
 * the command. Direct SQL writes still fire the trigger.
 */
static void
rows_take_guard(RowsTriggerSet *set)
{
	TriggerDesc *td = set->desc;
	int			i;
	int			j;

	if (td == NULL)
		return;
	for (i = 0; i < td->numtriggers; i++)
		if (rows_is_guard(&td->triggers[i]))
			break;
	if (i == td->numtriggers)
		return;
	/* the descriptor is the set's own copy */
	set->guard = td->triggers[i];
	set->has_guard = true;
	memmove(&td->triggers[i], &td->triggers[i + 1],
			(td->numtriggers - i - 1) * sizeof(Trigger));
	td->numtriggers--;
	td->trig_update_after_row = false;
	for (j = 0; j < td->numtriggers; j++)
		if (TRIGGER_TYPE_MATCHES(td->triggers[j].tgtype, TRIGGER_TYPE_ROW,
								 TRIGGER_TYPE_AFTER, TRIGGER_TYPE_UPDATE))
			td->trig_update_after_row = true;
}

/*
 * rows_check_guard: what batches_final would do for this update of the
 * row version r->row held: when the trigger is enabled for this session's
 * replication role and the update writes a column it names, an old status
 * committed or invalid is refused (RG002), as gridha_batches_guard_final
 * refuses it.
 */
static void
rows_check_guard(GridhaRowsRel *r, Bitmapset *updated)
{
	Trigger    *trig = &r->guard;
	bool		isnull;
	Datum		status;
	int			i;

	if (SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
	{
		if (trig->tgenabled == TRIGGER_FIRES_ON_ORIGIN || trig->tgenabled == TRIGGER_DISABLED)
			return;
	}
	else if (trig->tgenabled == TRIGGER_FIRES_ON_REPLICA || trig->tgenabled == TRIGGER_DISABLED)
		return;
	if (trig->tgnattr > 0)
	{
		for (i = 0; i < trig->tgnattr; i++)
			if (bms_is_member(trig->tgattr[i] - FirstLowInvalidHeapAttributeNumber, updated))
				break;
		if (i == trig->tgnattr)
			return;
	}
	status = slot_getattr(r->row, BATCH_STATUS, &isnull);
	if (isnull)
		return;
	if (DatumGetObjectId(status) == rows_status_oids[GRIDHA_COMMITTED] ||
		DatumGetObjectId(status) == rows_status_oids[GRIDHA_INVALID])
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_NOT_IN_FLIGHT),
				 errmsg("batch \"%s\" of service \"%s\" is already %s",
						TextDatumGetCString(slot_getattr(r->row, BATCH_BATCH_ID, &isnull)),
						TextDatumGetCString(slot_getattr(r->row, BATCH_SERVICE_ID, &isnull)),
						rows_status_labels[gridha_status_of(status)]),
				 errdetail("Committed and invalid are final statuses and never change.")));
}

/*
 * rows_retire: a set's memory, to be freed at the end of the transaction
 * (rows_index_xact_callback).
 */
static void
rows_retire(MemoryContext cxt)
{
	MemoryContext old;

	if (cxt == NULL)
		return;
	if (!rows_index_xact_registered)
	{
		RegisterXactCallback(rows_index_xact_callback, NULL);
		rows_index_xact_registered = true;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	rows_index_retired = lappend(rows_index_retired, cxt);
	MemoryContextSwitchTo(old);
}

/*
 * rows_fk_columns: adds the referencing columns of foreign key constraint
 * conoid to *cols; false if they cannot be read, or the key is MATCH FULL.
 */
static bool
rows_fk_columns(Oid conoid, Bitmapset **cols)
{
	HeapTuple	tup = SearchSysCache1(CONSTROID, ObjectIdGetDatum(conoid));
	ArrayType  *keys;
	bool		isnull;
	Datum		d;
	int			i;

	if (!HeapTupleIsValid(tup))
		return false;

	/*
	 * MATCH FULL checks a key that is partly NULL whether it changed or not
	 * (RI_FKey_fk_upd_check_required): such a check always fires.
	 */
	if (((Form_pg_constraint) GETSTRUCT(tup))->confmatchtype == FKCONSTR_MATCH_FULL)
	{
		ReleaseSysCache(tup);
		return false;
	}
	d = SysCacheGetAttr(CONSTROID, tup, Anum_pg_constraint_conkey, &isnull);
	keys = isnull ? NULL : DatumGetArrayTypeP(d);
	if (keys == NULL || ARR_NDIM(keys) != 1 || ARR_HASNULL(keys) ||
		ARR_ELEMTYPE(keys) != INT2OID)
	{
		ReleaseSysCache(tup);
		return false;
	}
	for (i = 0; i < ARR_DIMS(keys)[0]; i++)
		*cols = bms_add_member(*cols, ((int16 *) ARR_DATA_PTR(keys))[i] -
							   FirstLowInvalidHeapAttributeNumber);
	ReleaseSysCache(tup);
	return true;
}

/*
 * rows_after_update_make: when the set's AFTER UPDATE row triggers fire
 * (RowsAfterUpdate), in the current memory context (the set's).
 */
static void
rows_after_update_make(RowsTriggerSet *set, Relation rel)
{
	TriggerDesc *td = set->desc;
	RowsAfterUpdate *a = &set->after;
	int			i;
	int			k;

	memset(a, 0, sizeof(RowsAfterUpdate));
	if (td == NULL || !td->trig_update_after_row)
		return;
	a->always = td->trig_update_before_row ||
		(rel->rd_att->constr != NULL && rel->rd_att->constr->has_generated_stored);
	for (i = 0; i < td->numtriggers && !a->always; i++)
	{
		Trigger    *t = &td->triggers[i];

		if (!TRIGGER_TYPE_MATCHES(t->tgtype, TRIGGER_TYPE_ROW, TRIGGER_TYPE_AFTER,
								  TRIGGER_TYPE_UPDATE))
			continue;
		if (t->tgoldtable != NULL || t->tgnewtable != NULL)
			a->always = true;
		else if (t->tgnattr > 0)
			for (k = 0; k < t->tgnattr; k++)
				a->cols = bms_add_member(a->cols, t->tgattr[k] - FirstLowInvalidHeapAttributeNumber);
		else if (RI_FKey_trigger_type(t->tgfoid) == RI_TRIGGER_FK &&
				 rows_fk_columns(t->tgconstraint, &a->cols))
			a->fk = true;
		else
			a->always = true;
	}
}

/*
 * rows_after_update: whether an update of r's row that names the columns
 * "updated" may queue an AFTER UPDATE row trigger's event (RowsAfterUpdate).
 */
static bool
rows_after_update(GridhaRowsRel *r, Bitmapset *updated)
{
	const RowsAfterUpdate *a = &r->after_update;
	bool		isnull;
	Datum		xmin;

	if (r->rri->ri_TrigDesc == NULL || !r->rri->ri_TrigDesc->trig_update_after_row)
		return false;
	if (a->always || bms_overlap(updated, a->cols))
		return true;
	if (!a->fk)
		return false;
	/* a foreign key's check fires for a row inserted by this transaction */
	xmin = slot_getsysattr(r->row, MinTransactionIdAttributeNumber, &isnull);
	return isnull || TransactionIdIsCurrentTransactionId(DatumGetTransactionId(xmin));
}

/*
 * rows_trigger_set: the writer's triggers of the table (see
 * RowsTriggerSet), made first if they are not known.
 */
static RowsTriggerSet *
rows_trigger_set(Relation rel, GridhaTable table)
{
	RowsTriggerSet *set = &rows_trigger_sets[table];
	uint64		generation;
	MemoryContext old;

	if (set->relid == RelationGetRelid(rel))
		return set;
	generation = rows_index_generation;
	rows_retire(set->cxt);
	set->cxt = NULL;
	set->relid = InvalidOid;
	set->desc = NULL;
	set->has_guard = false;
	if (rel->trigdesc != NULL)
	{
		set->cxt = AllocSetContextCreate(CacheMemoryContext, "gridha trigger set",
										 ALLOCSET_SMALL_SIZES);
		old = MemoryContextSwitchTo(set->cxt);
		set->desc = CopyTriggerDesc(rel->trigdesc);
		if (table == GRIDHA_BATCHES)
			rows_take_guard(set);
		rows_after_update_make(set, rel);
		MemoryContextSwitchTo(old);
	}
	else
		memset(&set->after, 0, sizeof(RowsAfterUpdate));
	/* known from now on unless an invalidation came in meanwhile */
	if (generation == rows_index_generation)
		set->relid = RelationGetRelid(rel);
	return set;
}

/*
 * rows_init_result_rel: InitResultRelInfo for the writer's table, its
 * triggers the table's trigger set instead of a copy of the relcache's
 * descriptor made for every command.
 */
static void
rows_init_result_rel(GridhaRowsRel *r, GridhaTable table)
{
	RowsTriggerSet *set = rows_trigger_set(r->rel, table);
	TriggerDesc *relcache = r->rel->trigdesc;
	TriggerDesc *td = set->desc;

	r->rri = makeNode(ResultRelInfo);
	/* no copy: the descriptor is out of the relcache entry's sight meanwhile */
	r->rel->trigdesc = NULL;
	PG_TRY();
	{
		InitResultRelInfo(r->rri, r->rel, r->rti, NULL, 0);
	}
	PG_FINALLY();
	{
		r->rel->trigdesc = relcache;
	}
	PG_END_TRY();
	r->guard = set->guard;
	r->has_guard = set->has_guard;
	r->after_update = set->after;
	if (td != NULL)
	{
		r->rri->ri_TrigDesc = td;
		r->rri->ri_TrigFunctions = (FmgrInfo *) palloc0(td->numtriggers * sizeof(FmgrInfo));
		r->rri->ri_TrigWhenExprs = (ExprState **) palloc0(td->numtriggers * sizeof(ExprState *));
	}
}

/*
 * rows_open: the table, opened on first use in this command.
 */
static GridhaRowsRel *
rows_open(GridhaRows *rows, GridhaTable table)
{
	GridhaRowsRel *r = &rows->rels[table];
	Oid			relid;

	if (r->rel != NULL)
		return r;
	relid = rows_relid(table);
	if (!OidIsValid(relid))
		elog(ERROR, "gridha: table gridha.%s does not exist", rows_tables[table]);
	r->rel = table_open(relid, rows->write ? RowExclusiveLock : AccessShareLock);

	/*
	 * The lock took in what other sessions changed: if something other than
	 * gridha's own is attached to its tables now, it must not run on a
	 * caller's search_path (path.c).
	 */
	if (unlikely(!gridha_tables_bare()))
		gridha_path_pin();
	rows_check_layout(r->rel, table);
	if (table == GRIDHA_BATCHES)
		rows_load_statuses(r->rel);
	if (rows->write)
	{
		EState	   *estate = rows->estate;

		gridha_rte_set_relid(estate, r->rti, relid);
		rows_init_result_rel(r, table);
		/* where the AFTER triggers' firing looks the table up */
		estate->es_opened_result_relations =
			lappend(estate->es_opened_result_relations, r->rri);
		/* its indexes: opened by the first update that writes to them */
		r->row = table_slot_create(r->rel, &estate->es_tupleTable);
		r->next = table_slot_create(r->rel, &estate->es_tupleTable);
	}
	else
		r->row = table_slot_create(r->rel, NULL);
	return r;
}

/*
 * rows_index_guard: before the relcache builds an index's expressions or
 * predicate (the first time after the index was created or its entry was
 * made again: an invalidation, a concurrent CREATE INDEX CONCURRENTLY taken
 * in by a lock), gridha's search_path: building them inlines SQL functions,
 * parsed by the path of that moment, and folds constant calls, as the
 * call's owner (path.c).
 */
static inline void
rows_index_guard(Relation index)
{
	if ((index->rd_indexprs == NIL &&
		 !heap_attisnull(index->rd_indextuple, Anum_pg_index_indexprs, NULL)) ||
		(index->rd_indpred == NIL &&
		 !heap_attisnull(index->rd_indextuple, Anum_pg_index_indpred, NULL)))
		gridha_path_pin();
}

/*
 * rows_index_usable: whether an index is a plain btree index gridha may
 * scan: valid and ready, usable by this transaction (indcheckxmin: as the
 * planner judges it), on n key columns and nothing else (no INCLUDE), each
 * in the default order (indoption 0: ascending, nulls last), with no
 * expression, and with no predicate unless pred (checked by the caller).
 * The expressions and the predicate are read through the relcache's
 * functions, which fill them on first use.
 */
static bool
rows_index_usable(Relation index, int n, bool unique, bool pred)
{
	Form_pg_index ind = index->rd_index;
	int			i;

	if (index->rd_rel->relam != BTREE_AM_OID || (unique && !ind->indisunique) ||
		!ind->indisvalid || !ind->indisready || ind->indnkeyatts != n || ind->indnatts != n)
		return false;
	if (ind->indcheckxmin &&
		!TransactionIdPrecedes(HeapTupleHeaderGetXmin(index->rd_indextuple->t_data),
							   TransactionXmin))
		return false;
	for (i = 0; i < n; i++)
		if (index->rd_indoption[i] != 0)
			return false;
	rows_index_guard(index);
	if (RelationGetIndexExpressions(index) != NIL)
		return false;
	return pred || RelationGetIndexPredicate(index) == NIL;
}

/*
 * rows_index_on: whether an index is a plain btree index (unique if
 * asked) on exactly these columns, in this order (rows_index_usable).
 */
static bool
rows_index_on(Relation index, const AttrNumber *attnos, int n, bool unique)
{
	int			i;

	/* the columns first: most indexes of the table fail there, cheaply */
	if (index->rd_index->indnkeyatts != n)
		return false;
	for (i = 0; i < n; i++)
		if (index->rd_index->indkey.values[i] != attnos[i])
			return false;
	return rows_index_usable(index, n, unique, false);
}

/*
 * rows_index_missing: RG014, an index the hot path scans is missing or
 * not the one gridha created.
 */
static void
rows_index_missing(Relation rel, const char *what, const char *create)
{
	ereport(ERROR,
			(errcode(ERRCODE_GRIDHA_INDEX_ALTERED),
			 errmsg("gridha.%s has no index %s", RelationGetRelationName(rel), what),
			 errdetail("gridha scans it directly; an index that was dropped or created with another definition is not used."),
			 errhint("Create it again as the extension does: %s", create)));
}

/*
 * rows_index: the table's index on these columns; *opened tells whether
 * the caller must close it (a reader's), or it is the writer's (open until
 * gridha_rows_end).
 */
static Relation
rows_index(GridhaRowsRel *r, const AttrNumber *attnos, int n, bool unique, bool *opened)
{
	int			i;
	ListCell   *lc;
	StringInfoData cols;
	TupleDesc	desc = RelationGetDescr(r->rel);

	*opened = false;
	if (r->indexes_open)
	{
		/* one left unopened is partial: never a key's (rows_index_usable) */
		for (i = 0; i < r->rri->ri_NumIndices; i++)
			if (r->rri->ri_IndexRelationDescs[i] != NULL &&
				rows_index_on(r->rri->ri_IndexRelationDescs[i], attnos, n, unique))
				return r->rri->ri_IndexRelationDescs[i];
	}
	else
	{
		RowsKnownIndex *known = rows_known_index(RelationGetRelid(r->rel), attnos, n, unique);
		Oid			oid = known->index;

		if (OidIsValid(oid))
		{
			/* the lock first: it takes in the changes that may forget it */
			LockRelationOid(oid, AccessShareLock);
			if (known->index == oid)
			{
				Relation	index = index_open(oid, NoLock);

				if (rows_index_on(index, attnos, n, unique))
				{
					*opened = true;
					return index;
				}
				index_close(index, NoLock);
			}
			UnlockRelationOid(oid, AccessShareLock);
		}
		foreach(lc, RelationGetIndexList(r->rel))
		{
			Relation	candidate = index_open(lfirst_oid(lc), AccessShareLock);

			if (rows_index_on(candidate, attnos, n, unique))
			{
				*opened = true;
				known->index = RelationGetRelid(candidate);
				return candidate;
			}
			index_close(candidate, AccessShareLock);
		}
		known->index = InvalidOid;
	}
	initStringInfo(&cols);
	for (i = 0; i < n; i++)
		appendStringInfo(&cols, "%s%s", i > 0 ? ", " : "",
						 NameStr(TupleDescAttr(desc, attnos[i] - 1)->attname));
	rows_index_missing(r->rel, psprintf("on (%s)", cols.data),
					   psprintf("CREATE %sINDEX ON gridha.%s (%s);", unique ? "UNIQUE " : "",
								RelationGetRelationName(r->rel), cols.data));
	pg_unreachable();
}

/*
 * rows_is_not_null: whether a node is "column attno IS NOT NULL" (a
 * plain column of the index's table).
 */
static bool
rows_is_not_null(Node *node, AttrNumber attno)
{
	NullTest   *t;
	Var		   *v;

	if (!IsA(node, NullTest))
		return false;
	t = (NullTest *) node;
	if (t->nulltesttype != IS_NOT_NULL || t->argisrow || !IsA(t->arg, Var))
		return false;
	v = (Var *) t->arg;
	return v->varattno == attno && v->varlevelsup == 0;
}

/*
 * rows_partial_is: whether an index is the partial index "which" as gridha
 * created it: btree on (soft_expiry), with its predicate, and nothing else.
 */
static bool
rows_partial_is(Relation index, GridhaPartialIndex which, AttrNumber soft, AttrNumber hard)
{
	List	   *pred;
	Node	   *p;

	if (soft <= 0 || !rows_index_usable(index, 1, false, true) ||
		index->rd_index->indkey.values[0] != soft)
		return false;
	/* filled on first use, then kept by the relcache (a copy otherwise) */
	rows_index_guard(index);
	pred = index->rd_indpred != NIL ? index->rd_indpred : RelationGetIndexPredicate(index);
	if (list_length(pred) != 1)
		return false;
	p = (Node *) linitial(pred);
	if (which == GRIDHA_INDEX_LEASE)
		return rows_is_not_null(p, soft);
	if (!is_orclause(p) || list_length(((BoolExpr *) p)->args) != 2)
		return false;
	return rows_is_not_null(linitial(((BoolExpr *) p)->args), soft) &&
		rows_is_not_null(lsecond(((BoolExpr *) p)->args), hard);
}

/*
 * The comparison functions of the scan keys: an index column's operator
 * family, type and strategy name one operator (pg_amop) whose function
 * (pg_operator.oprcode) no ALTER OPERATOR changes. Two catalog lookups a
 * key, on every fetch and scan of the hot path, were the same answer each
 * time: kept here, and forgotten when pg_amop changes (an operator added
 * to or dropped from a family, or dropped).
 */
typedef struct RowsOpProc
{
	Oid			opfamily;		/* InvalidOid: a free slot */
	Oid			type;
	StrategyNumber strategy;
	RegProcedure proc;
}			RowsOpProc;

#define ROWS_OP_PROCS 8
static RowsOpProc rows_op_procs[ROWS_OP_PROCS];
static int	rows_op_procs_next = 0;
static bool rows_op_procs_registered = false;

static void
rows_op_procs_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	memset(rows_op_procs, 0, sizeof(rows_op_procs));
}

/*
 * rows_op_proc: the function of column i's operator of this strategy.
 */
static RegProcedure
rows_op_proc(Relation index, int i, StrategyNumber strategy)
{
	Oid			opfamily = index->rd_opfamily[i];
	Oid			type = index->rd_opcintype[i];
	RowsOpProc *c;
	Oid			op;
	int			k;

	for (k = 0; k < ROWS_OP_PROCS; k++)
	{
		c = &rows_op_procs[k];
		if (c->opfamily == opfamily && c->type == type && c->strategy == strategy)
			return c->proc;
	}
	if (!rows_op_procs_registered)
	{
		CacheRegisterSyscacheCallback(AMOPSTRATEGY, rows_op_procs_callback, (Datum) 0);
		rows_op_procs_registered = true;
	}
	op = get_opfamily_member(opfamily, type, type, strategy);
	if (!OidIsValid(op))
		elog(ERROR, "gridha: no operator of strategy %d for column %d of index \"%s\"",
			 strategy, i + 1, RelationGetRelationName(index));
	c = &rows_op_procs[rows_op_procs_next];
	rows_op_procs_next = (rows_op_procs_next + 1) % ROWS_OP_PROCS;
	c->proc = get_opcode(op);
	c->opfamily = opfamily;
	c->type = type;
	c->strategy = strategy;
	return c->proc;
}

/*
 * rows_scan_keys: btree scan keys comparing the index's columns, in order,
 * with the values by the strategies (BTEqualStrategyNumber, ...;
 * GRIDHA_IS_NULL: the column is NULL, its value unused).
 */
static void
rows_scan_keys(Relation index, ScanKey skey, const StrategyNumber *strategies,
			   const Datum *values, int n)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		Oid			type = index->rd_opcintype[i];

		if (strategies[i] == GRIDHA_IS_NULL)
		{
			ScanKeyEntryInitialize(&skey[i], SK_ISNULL | SK_SEARCHNULL, i + 1,
								   InvalidStrategy, InvalidOid, InvalidOid, InvalidOid,
								   (Datum) 0);
			continue;
		}
		ScanKeyEntryInitialize(&skey[i], 0, i + 1, strategies[i], type,
							   index->rd_indcollation[i],
							   rows_op_proc(index, i, strategies[i]), values[i]);
	}
}

/*
 * The row memo: where this backend last found or wrote each row by key
 * (a fetch, a lock, an update). A hand-out writes its claim and head
 * batch, the reports that follow fetch the same rows by key: each such
 * fetch tries the version at the remembered place first, and goes through
 * the index only when that is not the row. A hit costs a page read where
 * the index fetch cost a descent of the index and, behind each of a
 * claim's dead entries, a visit of a dead version.
 *
 * A remembered place is only a guess, and is judged as rows_find's answer
 * would be: the version there must be seen by the command's snapshot and
 * carry the key asked for, compared byte by byte. Under MVCC a snapshot
 * sees at most one version of the row of a unique key, so a version seen
 * there with the key is the one the index would have found. Anything else
 * (a version written since by another transaction, pruned, vacuumed away,
 * a table truncated or rewritten, a slot another key took over) is a miss.
 * The key's unique index must still be known (rows_known_index: a
 * dropped or changed index makes the next fetch look for it, and RG014
 * says when it is gone), and SERIALIZABLE transactions fetch through the
 * index always, so that their predicate locks are the index scan's.
 *
 * Direct-mapped by a hash of the key: a collision replaces a slot.
 *
 * A batch's (service_id, seq) is not kept: it is asked for by the
 * hand-out, of a head this backend has not written (a batch enqueued
 * since), so its entry would nearly always miss, and noting it cost two
 * more hashes at each of a cycle's three batch writes. A head handed out
 * again (after a retry or a takeover) is found through the index.
 */
#define ROWS_MEMO_SLOTS 1024

typedef struct RowsMemo
{
	Oid			relid;			/* InvalidOid: empty */
	uint32		hash;			/* of the key kind and its values */
	GridhaKey	key;
	ItemPointerData tid;
}			RowsMemo;

static RowsMemo rows_memo[ROWS_MEMO_SLOTS];

/*
 * rows_key_bytes: the bytes a key column's value is compared and hashed
 * by: a text's data, a fixed-length value's bytes, a by-value value as
 * an int64.
 */
static const char *
rows_key_bytes(Form_pg_attribute att, Datum value, int64 *buf, int *len)
{
	if (att->attlen == -1)
	{
		text	   *t = DatumGetTextPP(value);

		*len = VARSIZE_ANY_EXHDR(t);
		return VARDATA_ANY(t);
	}
	if (!att->attbyval)
	{
		*len = att->attlen;
		return DatumGetPointer(value);
	}
	switch (att->attlen)
	{
		case 8:
			*buf = DatumGetInt64(value);
			break;
		case 4:
			*buf = DatumGetInt32(value);
			break;
		case 2:
			*buf = DatumGetInt16(value);
			break;
		default:
			*buf = DatumGetChar(value);
			break;
	}
	*len = sizeof(int64);
	return (const char *) buf;
}

/*
 * rows_memo_hash: the hash of a key kind and its values.
 */
static uint32
rows_memo_hash(Relation rel, GridhaKey key, const Datum *values)
{
	const RowsKeyDef *def = &rows_keys[key];
	uint32		h = (uint32) key;
	int			i;

	for (i = 0; i < def->nkeys; i++)
	{
		int64		buf;
		int			len;
		const char *bytes = rows_key_bytes(TupleDescAttr(RelationGetDescr(rel), def->attnos[i] - 1),
										   values[i], &buf, &len);

		h = hash_combine(h, hash_bytes((const unsigned char *) bytes, len));
	}
	return h;
}

/*
 * rows_memo_note: the row version in slot (where it is: its tts_tid) is
 * the row of each unique key of the table it is a version of.
 */
static void
rows_memo_note(Relation rel, GridhaTable table, TupleTableSlot *slot)
{
	int			k;

	if (!ItemPointerIsValid(&slot->tts_tid))
		return;
	for (k = 0; k < GRIDHA_NKEYS; k++)
	{
		const RowsKeyDef *def = &rows_keys[k];
		Datum		values[2];
		bool		isnull;
		int			i;
		uint32		h;
		RowsMemo   *m;

		if (def->table != table || !def->memo)
			continue;
		for (i = 0; i < def->nkeys; i++)
		{
			values[i] = slot_getattr(slot, def->attnos[i], &isnull);
			if (isnull)
				break;
		}
		if (i < def->nkeys)
			continue;
		h = rows_memo_hash(rel, (GridhaKey) k, values);
		m = &rows_memo[h % ROWS_MEMO_SLOTS];
		m->relid = RelationGetRelid(rel);
		m->hash = h;
		m->key = (GridhaKey) k;
		m->tid = slot->tts_tid;
	}
}

/*
 * rows_memo_fetch: the row of the key with these values into r->row from
 * its remembered place, if the snapshot sees the version there and it is
 * that row's (see above); false otherwise (r->row empty then).
 */
static bool
rows_memo_fetch(GridhaRows *rows, GridhaRowsRel *r, GridhaKey key, const Datum *values)
{
	const RowsKeyDef *def = &rows_keys[key];
	Relation	rel = r->rel;
	uint32		h;
	RowsMemo   *m;
	ItemPointerData tid;
	int			i;

	if (!def->memo || IsolationIsSerializable() ||
		!OidIsValid(rows_known_index(RelationGetRelid(rel), def->attnos, def->nkeys, true)->index))
		return false;
	h = rows_memo_hash(rel, key, values);
	m = &rows_memo[h % ROWS_MEMO_SLOTS];
	if (m->relid != RelationGetRelid(rel) || m->hash != h || m->key != key)
		return false;
	tid = m->tid;
	/* a TRUNCATE, rewrite or vacuum since may have left fewer blocks */
	if (ItemPointerGetBlockNumber(&tid) >= RelationGetNumberOfBlocks(rel))
		return false;
	if (!table_tuple_fetch_row_version(rel, &tid, rows->snapshot, r->row))
	{
		/* a version the snapshot does not see leaves the slot half set */
		ExecClearTuple(r->row);
		return false;
	}
	for (i = 0; i < def->nkeys; i++)
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), def->attnos[i] - 1);
		bool		isnull;
		Datum		d = slot_getattr(r->row, def->attnos[i], &isnull);
		int64		buf1,
					buf2;
		int			len1,
					len2;
		const char *b1,
				   *b2;

		if (isnull)
			break;
		b1 = rows_key_bytes(att, d, &buf1, &len1);
		b2 = rows_key_bytes(att, values[i], &buf2, &len2);
		if (len1 != len2 || memcmp(b1, b2, len1) != 0)
			break;
	}
	if (i == def->nkeys)
		return true;
	ExecClearTuple(r->row);
	return false;
}

/*
 * rows_find: the row with these key values as the snapshot sees it, into
 * r->row; false if there is none.
 */
static bool
rows_find(GridhaRows *rows, GridhaRowsRel *r, const RowsKeyDef *def, Datum *values)
{
	static const StrategyNumber equal[2] = {BTEqualStrategyNumber, BTEqualStrategyNumber};
	bool		opened;
	Relation	index = rows_index(r, def->attnos, def->nkeys, true, &opened);
	ScanKeyData skey[2];
	IndexScanDesc scan;
	bool		found;

	rows_scan_keys(index, skey, equal, values, def->nkeys);
	scan = index_beginscan(r->rel, index, rows->snapshot, def->nkeys, 0);
	index_rescan(scan, skey, def->nkeys, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, r->row);
	index_endscan(scan);
	if (opened)
		index_close(index, AccessShareLock);
	if (found)
		rows_memo_note(r->rel, def->table, r->row);
	return found;
}

/*
 * gridha_rows_scan: calls visit for every row of the table, as the
 * snapshot sees it, whose index on (attnos) compares with the values by
 * the strategies, in the index's order, until visit returns false. The
 * row is the table's current row (gridha_rows_get, gridha_rows_lock)
 * during the call.
 */
void
gridha_rows_scan(GridhaRows *rows, GridhaTable table, const AttrNumber *attnos,
				 const StrategyNumber *strategies, const Datum *values, int n,
				 bool (*visit) (GridhaRows *rows, void *arg), void *arg)
{
	GridhaRowsRel *r = rows_open(rows, table);
	bool		opened;
	Relation	index = rows_index(r, attnos, n, false, &opened);
	ScanKeyData skey[INDEX_MAX_KEYS];
	IndexScanDesc scan;

	Assert(n <= INDEX_MAX_KEYS);
	rows_scan_keys(index, skey, strategies, values, n);
	scan = index_beginscan(r->rel, index, rows->snapshot, n, 0);
	index_rescan(scan, skey, n, NULL, 0);
	while (index_getnext_slot(scan, ForwardScanDirection, r->row))
		if (!visit(rows, arg))
			break;
	index_endscan(scan);
	if (opened)
		index_close(index, AccessShareLock);
}

/*
 * gridha_rows_scan_index: calls visit for every row of the table, as the
 * snapshot sees it, that has an entry in the partial index "which" (the
 * rows its predicate holds for), in the index's order, until visit
 * returns false. The index is found by its definition, whatever its name;
 * when the table has none, RG014 with a hint says how to create it.
 */
void
gridha_rows_scan_index(GridhaRows *rows, GridhaPartialIndex which,
					   bool (*visit) (GridhaRows *rows, void *arg), void *arg)
{
	GridhaTable table = which == GRIDHA_INDEX_LEASE ? GRIDHA_INSTANCES : GRIDHA_CLAIMS;
	GridhaRowsRel *r = rows_open(rows, table);
	AttrNumber	soft = which == GRIDHA_INDEX_LEASE ?
		gridha_rows_attno(rows, INSTANCE_SOFT_EXPIRY) : CLAIM_SOFT_EXPIRY;
	AttrNumber	hard = which == GRIDHA_INDEX_LEASE ? 0 : CLAIM_HARD_EXPIRY;
	Relation	index = NULL;
	bool		opened = false;
	IndexScanDesc scan;
	ListCell   *lc;
	int			i;

	if (r->indexes_open)
	{
		for (i = 0; i < r->rri->ri_NumIndices && index == NULL; i++)
			if (rows_partial_is(rows_index_desc(r, i), which, soft, hard))
				index = r->rri->ri_IndexRelationDescs[i];
	}
	else
	{
		Oid			known = rows_partial[which].index;

		if (OidIsValid(known) && rows_partial[which].table == RelationGetRelid(r->rel))
		{
			/* the lock first: it takes in the changes that may forget it */
			LockRelationOid(known, AccessShareLock);
			if (rows_partial[which].index == known)
			{
				index = index_open(known, NoLock);
				opened = true;
			}
			else
				UnlockRelationOid(known, AccessShareLock);
		}
		if (index == NULL)
			foreach(lc, RelationGetIndexList(r->rel))
			{
				Relation	candidate = index_open(lfirst_oid(lc), AccessShareLock);

				if (rows_partial_is(candidate, which, soft, hard))
				{
					index = candidate;
					opened = true;
					rows_partial[which].index = RelationGetRelid(candidate);
					rows_partial[which].table = RelationGetRelid(r->rel);
					break;
				}
				index_close(candidate, AccessShareLock);
			}
	}
	if (index == NULL)
		rows_index_missing(r->rel,
						   which == GRIDHA_INDEX_LEASE ?
						   "on (soft_expiry) WHERE soft_expiry IS NOT NULL" :
						   "on (soft_expiry) WHERE soft_expiry IS NOT NULL OR hard_expiry IS NOT NULL",
						   which == GRIDHA_INDEX_LEASE ?
						   "CREATE INDEX instances_lease ON gridha.instances (soft_expiry) WHERE soft_expiry IS NOT NULL;" :
						   "CREATE INDEX service_claims_own_expiry ON gridha.service_claims (soft_expiry) WHERE soft_expiry IS NOT NULL OR hard_expiry IS NOT NULL;");
	scan = index_beginscan(r->rel, index, rows->snapshot, 0, 0);
	index_rescan(scan, NULL, 0, NULL, 0);
	while (index_getnext_slot(scan, ForwardScanDirection, r->row))
		if (!visit(rows, arg))
			break;
	index_endscan(scan);
	if (opened)
		index_close(index, AccessShareLock);
}

/*
 * rows_lock, gridha_rows_lock: lock the table's current row, FOR UPDATE
 * or FOR NO KEY UPDATE, waiting for a concurrent writer or, with
 * skip_locked, not, and make its newest version the current row. Under READ COMMITTED a
 * row deleted meanwhile is GRIDHA_ROW_GONE; under REPEATABLE READ and
 * SERIALIZABLE a concurrent change raises a serialization failure, as an
 * UPDATE or SELECT ... FOR UPDATE would. *traversed tells whether the
 * newest version is newer than the current row was. A writer's only.
 */
static GridhaLockResult
rows_lock(GridhaRows *rows, GridhaRowsRel *r, bool for_update, bool skip_locked,
		  bool *traversed)
{
	ItemPointerData tid = r->row->tts_tid;
	TM_FailureData tmfd;
	TM_Result	res;

	Assert(rows->write);
	*traversed = false;
	gridha_lockcheck_row(r->rel, r->row, !skip_locked, "rows.c lock");
	ExecClearTuple(r->row);
	res = table_tuple_lock(r->rel, &tid, rows->snapshot, r->row,
						   rows->estate->es_output_cid,
						   for_update ? LockTupleExclusive : LockTupleNoKeyExclusive,
						   skip_locked ? LockWaitSkip : LockWaitBlock,
						   IsolationUsesXactSnapshot() ? 0 : TUPLE_LOCK_FLAG_FIND_LAST_VERSION,
						   &tmfd);
	switch (res)
	{
		case TM_Ok:
			*traversed = tmfd.traversed;
			rows_memo_note(r->rel, (GridhaTable) (r - rows->rels), r->row);
			return GRIDHA_ROW_LOCKED;
		case TM_WouldBlock:
			return GRIDHA_ROW_SKIPPED;
		case TM_Deleted:
			if (!IsolationUsesXactSnapshot())
				return GRIDHA_ROW_GONE;
			/* fall through */
		case TM_Updated:
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update")));
			break;
		default:
			elog(ERROR, "gridha: unexpected result %d locking a row of gridha.%s",
				 (int) res, RelationGetRelationName(r->rel));
	}
	pg_unreachable();
}

GridhaLockResult
gridha_rows_lock(GridhaRows *rows, GridhaTable table, bool for_update, bool skip_locked)
{
	bool		traversed;

	return rows_lock(rows, &rows->rels[table], for_update, skip_locked, &traversed);
}

/*
 * gridha_rows_fetch: makes the row of the key's table with these key
 * values (in the key's column order), as the snapshot sees it, the
 * table's current row. False if there is none. It is not locked: a
 * writer's gridha_rows_update finds out whether it changed since.
 */
bool
gridha_rows_fetch(GridhaRows *rows, GridhaKey key, Datum *values)
{
	const RowsKeyDef *def = &rows_keys[key];
	GridhaRowsRel *r = rows_open(rows, def->table);

	if (rows_memo_fetch(rows, r, key, values))
		return true;
	return rows_find(rows, r, def, values);
}

/*
 * gridha_rows_fetch_tid: makes the row version at tid the table's current
 * row if the snapshot sees it; false if it does not. For a row this
 * transaction wrote (gridha_rows_stored_tid): by MVCC the snapshot sees at
 * most one version of a row, so a version seen is the newest, and a row
 * rewritten many times in one transaction is found without walking the
 * versions before it, as an index fetch does. The caller checks the key:
 * the version may be another row's.
 */
bool
gridha_rows_fetch_tid(GridhaRows *rows, GridhaTable table, ItemPointer tid)
{
	GridhaRowsRel *r = rows_open(rows, table);

	/* a TRUNCATE or rewrite since may have left fewer blocks */
	if (!ItemPointerIsValid(tid) ||
		ItemPointerGetBlockNumber(tid) >= RelationGetNumberOfBlocks(r->rel))
		return false;
	if (table_tuple_fetch_row_version(r->rel, tid, rows->snapshot, r->row))
		return true;
	/* a version the snapshot does not see leaves the slot half set */
	ExecClearTuple(r->row);
	return false;
}

/*
 * gridha_rows_stored_tid: where the last successful gridha_rows_update of
 * the table wrote its new version. Valid as gridha_rows_get_stored is.
 */
ItemPointerData
gridha_rows_stored_tid(GridhaRows *rows, GridhaTable table)
{
	return rows->rels[table].next->tts_tid;
}

/*
 * gridha_rows_get: a column of the table's row fetched last.
 */
Datum
gridha_rows_get(GridhaRows *rows, GridhaTable table, int attno, bool *isnull)
{
	return slot_getattr(rows->rels[table].row, attno, isnull);
}

/*
 * rows_index_xact_callback: the transaction ends: no command uses the
 * templates of a forgotten index set any more.
 */
static void
rows_index_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PARALLEL_PRE_COMMIT ||
		event == XACT_EVENT_PRE_PREPARE)
		return;
	foreach(lc, rows_index_retired)
		MemoryContextDelete((MemoryContext) lfirst(lc));
	list_free(rows_index_retired);
	rows_index_retired = NIL;
}

/*
 * rows_pred_keepable: whether a partial index's predicate, made ready to
 * run once, may serve every later command of the backend (until the index
 * set is made again): only columns, constants, AND/OR/NOT, IS [NOT] NULL,
 * IS [NOT] TRUE/FALSE and operators whose function is built in, internal
 * and immutable (gridha_function_builtin) over columns and constants of
 * built-in or enum types. Their evaluation keeps nothing in
 * the command's memory and runs no code of a user's that could call gridha
 * again while the state is in use. gridha's own predicates (in_flight;
 * soft_expiry IS NOT NULL OR hard_expiry IS NOT NULL) are of this kind;
 * any other is made ready by the executor in each command, as it would be
 * without the writer.
 */
static bool
rows_pred_arg_keepable(Node *node)
{
	Oid			type;

	if (!IsA(node, Var) && !IsA(node, Const))
		return false;
	type = exprType(node);
	return type < FirstGenbkiObjectId || type_is_enum(type);
}

static bool
rows_pred_keepable(Node *node)
{
	ListCell   *lc;

	if (node == NULL)
		return true;
	switch (nodeTag(node))
	{
		case T_List:
			foreach(lc, (List *) node)
				if (!rows_pred_keepable(lfirst(lc)))
					return false;
			return true;
		case T_Var:
		case T_Const:
			return rows_pred_arg_keepable(node);
		case T_BoolExpr:
			return rows_pred_keepable((Node *) ((BoolExpr *) node)->args);
		case T_NullTest:
			return rows_pred_arg_keepable((Node *) ((NullTest *) node)->arg);
		case T_BooleanTest:
			return rows_pred_arg_keepable((Node *) ((BooleanTest *) node)->arg);
		case T_OpExpr:
			{
				OpExpr	   *op = (OpExpr *) node;

				set_opfuncid(op);
				if (op->opretset || !gridha_function_builtin(op->opfuncid))
					return false;
				foreach(lc, op->args)
					if (!rows_pred_arg_keepable(lfirst(lc)))
						return false;
				return true;
			}
		default:
			return false;
	}
}

/*
 * rows_open_indexes: what ExecOpenIndices does for the writer's table
 * (each index opened and locked RowExclusiveLock, its IndexInfo in
 * r->rri), from the table's index set, made first if it is not known.
 */
static void
rows_open_indexes(GridhaRows *rows, GridhaRowsRel *r, GridhaTable table)
{
	RowsIndexSet *set = &rows_index_sets[table];
	ResultRelInfo *rri = r->rri;
	Oid			relid = RelationGetRelid(r->rel);
	MemoryContext old = MemoryContextSwitchTo(rows->estate->es_query_cxt);
	Relation   *descs = NULL;
	int			i;

	if (set->relid != relid)
	{
		uint64		generation;
		List	   *oids;
		MemoryContext cxt;
		ListCell   *lc;

		/*
		 * The set is made again only after an invalidation, which may have
		 * brought an index nobody judged yet (CREATE INDEX CONCURRENTLY does
		 * not wait for this transaction's lock): its expressions, predicate
		 * and operator class run with gridha's path (path.c).
		 */
		gridha_path_pin();
		generation = rows_index_generation;
		oids = RelationGetIndexList(r->rel);

		rows_retire(set->cxt);
		set->cxt = NULL;
		set->relid = InvalidOid;
		set->n = 0;
		cxt = AllocSetContextCreate(CacheMemoryContext, "gridha index set",
									ALLOCSET_SMALL_SIZES);
		set->cxt = cxt;
		MemoryContextSwitchTo(cxt);
		set->oids = palloc(sizeof(Oid) * Max(list_length(oids), 1));
		set->infos = palloc(sizeof(IndexInfo *) * Max(list_length(oids), 1));
		set->preds = palloc0(sizeof(ExprState *) * Max(list_length(oids), 1));
		MemoryContextSwitchTo(rows->estate->es_query_cxt);
		descs = palloc(sizeof(Relation) * Max(list_length(oids), 1));
		i = 0;
		foreach(lc, oids)
		{
			descs[i] = index_open(lfirst_oid(lc), RowExclusiveLock);
			MemoryContextSwitchTo(cxt);
			set->infos[i] = BuildIndexInfo(descs[i]);

			/*
			 * What ExecPrepareQual makes of the predicate for each command,
			 * made once: a partial index's predicate is run for every new
			 * row version the writer stores out of place.
			 */
			if (set->infos[i]->ii_Predicate != NIL &&
				rows_pred_keepable((Node *) set->infos[i]->ii_Predicate))
				set->preds[i] = ExecInitQual((List *) expression_planner((Expr *) set->infos[i]->ii_Predicate),
											 NULL);
			MemoryContextSwitchTo(rows->estate->es_query_cxt);
			set->oids[i] = lfirst_oid(lc);
			set->n = ++i;
		}
		list_free(oids);
		/* known from now on unless an invalidation came in meanwhile */
		if (generation == rows_index_generation)
			set->relid = relid;
	}
	rri->ri_NumIndices = set->n;
	if (set->n > 0)
	{
		/*
		 * A partial index whose predicate is made ready once is opened (and
		 * locked) only when a new row version is to have an entry in it
		 * (rows_open_partial): a claim's hand-out and report never write to
		 * service_claims_own_expiry, nor a report to
		 * service_claims_in_flight. The executor passes over an index left
		 * NULL. The set's OIDs outlive the command, as its templates do.
		 */
		if (descs == NULL)
		{
			descs = palloc0(sizeof(Relation) * set->n);
			for (i = 0; i < set->n; i++)
				if (set->preds[i] == NULL)
					descs[i] = index_open(set->oids[i], RowExclusiveLock);
		}
		r->index_oids = set->oids;
		rri->ri_IndexRelationDescs = descs;
		rri->ri_IndexRelationInfo = palloc(sizeof(IndexInfo *) * set->n);
		for (i = 0; i < set->n; i++)
		{
			IndexInfo  *info = palloc(sizeof(IndexInfo));

			/*
			 * The command's own state, built by the executor as it needs it;
			 * a predicate made ready once is shared (rows_pred_keepable).
			 */
			memcpy(info, set->infos[i], sizeof(IndexInfo));
			info->ii_ExpressionsState = NIL;
			info->ii_PredicateState = set->preds[i];
			info->ii_AmCache = NULL;
			info->ii_Context = CurrentMemoryContext;
			rri->ri_IndexRelationInfo[i] = info;
		}
	}
	MemoryContextSwitchTo(old);
}

/*
 * rows_close_indexes: what ExecCloseIndices does, but the locks are kept
 * to the end of the transaction, as the table's is: a later command of
 * the transaction takes them again from the backend's own lock table, and
 * the end of the transaction lets go of them all at once.
 */
static void
rows_close_indexes(GridhaRowsRel *r)
{
	ResultRelInfo *rri = r->rri;
	int			i;

	for (i = 0; i < rri->ri_NumIndices; i++)
	{
		if (rri->ri_IndexRelationDescs[i] == NULL)
			continue;
#if PG_VERSION_NUM >= 170000
		index_insert_cleanup(rri->ri_IndexRelationDescs[i], rri->ri_IndexRelationInfo[i]);
#endif
		index_close(rri->ri_IndexRelationDescs[i], NoLock);
	}
}

/*
 * rows_index_desc: the writer's index i of the table, opened now if it
 * was left for later (rows_open_indexes).
 */
static Relation
rows_index_desc(GridhaRowsRel *r, int i)
{
	Relation   *descs = r->rri->ri_IndexRelationDescs;

	if (descs[i] == NULL)
		descs[i] = index_open(r->index_oids[i], RowExclusiveLock);
	return descs[i];
}

/*
 * rows_open_partial: opens each partial index left for later whose
 * predicate holds for the new row version r->next, before the executor
 * writes its entries.
 */
static void
rows_open_partial(GridhaRows *rows, GridhaRowsRel *r)
{
	ResultRelInfo *rri = r->rri;
	ExprContext *econtext = NULL;
	int			i;

	for (i = 0; i < rri->ri_NumIndices; i++)
	{
		if (rri->ri_IndexRelationDescs[i] != NULL)
			continue;
		if (econtext == NULL)
		{
			econtext = GetPerTupleExprContext(rows->estate);
			econtext->ecxt_scantuple = r->next;
		}
		if (ExecQual(rri->ri_IndexRelationInfo[i]->ii_PredicateState, econtext))
			rows_index_desc(r, i);
	}
}

/*
 * gridha_rows_update: writes a new version of the table's current row:
 * its columns, with cols replaced. Indexes and NOT NULL apply, and the
 * table's AFTER UPDATE row triggers fire at gridha_rows_end.
 *
 * As an UPDATE does, it writes only if the row is still the version the
 * caller judged. If a concurrent transaction changed it since, under READ
 * COMMITTED its newest version becomes the current row, locked, and the
 * result is GRIDHA_ROW_CHANGED: the caller judges that version and
 * updates again, or leaves it (GRIDHA_ROW_DELETED: it was deleted); under
 * REPEATABLE READ and SERIALIZABLE it is a serialization failure.
 */
GridhaUpdateResult
gridha_rows_update(GridhaRows *rows, GridhaTable table, GridhaColumn *cols, int ncols)
{
	GridhaRowsRel *r = &rows->rels[table];
	EState	   *estate = rows->estate;
	int			natts = RelationGetDescr(r->rel)->natts;
	Bitmapset  *updated = NULL;
	ItemPointerData tid = r->row->tts_tid;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	TU_UpdateIndexes update_indexes;
	List	   *recheck = NIL;
	TM_Result	res;
	int			i;

	Assert(rows->write && !TTS_EMPTY(r->row));
	slot_getallattrs(r->row);
	ExecClearTuple(r->next);
	memcpy(r->next->tts_values, r->row->tts_values, natts * sizeof(Datum));
	memcpy(r->next->tts_isnull, r->row->tts_isnull, natts * sizeof(bool));
	for (i = 0; i < ncols; i++)
	{
		r->next->tts_values[cols[i].attno - 1] = cols[i].value;
		r->next->tts_isnull[cols[i].attno - 1] = cols[i].isnull;
		updated = bms_add_member(updated, cols[i].attno - FirstLowInvalidHeapAttributeNumber);
	}
	ExecStoreVirtualTuple(r->next);
	/* what UPDATE OF triggers and the index-unchanged hints look at */
	gridha_rte_set_updated_cols(estate, r->rti, updated);

	/*
	 * BEFORE UPDATE row triggers (gridha has none; a user's may change the
	 * new row, skip it, or raise) fire on the row locked first, so that
	 * they never see a version newer than the one the caller judged.
	 */
	if (r->rri->ri_TrigDesc != NULL && r->rri->ri_TrigDesc->trig_update_before_row)
	{
		bool		traversed;

		/*
		 * The new row's values still point into the page of the row they
		 * came from, and the lock below lets go of that page before it
		 * reads the row again: give the new row its own copy first, as
		 * PostgreSQL's trigger code does.
		 */
		ExecMaterializeSlot(r->next);
		switch (rows_lock(rows, r, false, false, &traversed))
		{
			case GRIDHA_ROW_LOCKED:
				if (traversed)
					return GRIDHA_ROW_CHANGED;
				break;
			case GRIDHA_ROW_SKIPPED:
				elog(ERROR, "gridha: a waiting lock was skipped");
				break;
			case GRIDHA_ROW_GONE:
				return GRIDHA_ROW_DELETED;
		}
		tid = r->row->tts_tid;
		if (!ExecBRUpdateTriggers_compat(estate, &rows->epq, r->rri, &tid, NULL, r->next, NULL, &tmfd))
			return GRIDHA_ROW_SKIPPED_BY_TRIGGER;
	}
	if (r->rel->rd_att->constr != NULL)
		ExecConstraints(r->rri, r->next, estate);
	gridha_lockcheck_row(r->rel, r->row, true, "rows.c update");

	res = table_tuple_update_compat(r->rel, &tid, r->next, estate->es_output_cid,
									 estate->es_snapshot, InvalidSnapshot, true,
									 &tmfd, &lockmode, &update_indexes);
	switch (res)
	{
		case TM_Ok:
			if (r->has_guard)
				rows_check_guard(r, updated);
			break;
		case TM_Updated:
		case TM_Deleted:
			if (IsolationUsesXactSnapshot())
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not serialize access due to concurrent update")));
			if (res == TM_Deleted ||
				gridha_rows_lock(rows, table, false, false) != GRIDHA_ROW_LOCKED)
				return GRIDHA_ROW_DELETED;
			return GRIDHA_ROW_CHANGED;
		default:
			elog(ERROR, "gridha: unexpected result %d updating a row of gridha.%s",
				 (int) res, RelationGetRelationName(r->rel));
	}

	/*
	 * A HOT update writes no index entry, so the indexes are opened (and
	 * locked, as the executor's ExecOpenIndices does) only by the first
	 * update of the command that needs them.
	 */
	if (update_indexes != TU_None && !r->indexes_open)
	{
		rows_open_indexes(rows, r, table);
		r->indexes_open = true;
	}
	if (r->rri->ri_NumIndices > 0 && update_indexes != TU_None)
	{
		rows_open_partial(rows, r);
		recheck = ExecInsertIndexTuples_compat(r->rri, r->next, estate, true, false, NULL, NIL,
												update_indexes == TU_Summarizing);
	}
	if (rows_after_update(r, updated))
		ExecARUpdateTriggers(estate, r->rri, NULL, NULL, &tid, NULL, r->next, recheck, NULL, false);
	list_free(recheck);
	rows_memo_note(r->rel, table, r->next);
	return GRIDHA_ROW_UPDATED;
}

/*
 * gridha_rows_get_stored: a column of the row version the last successful
 * gridha_rows_update of the table wrote, a BEFORE UPDATE trigger's changes
 * included: what a RETURNING clause would return. Valid until the next
 * fetch, lock or update of the table.
 */
Datum
gridha_rows_get_stored(GridhaRows *rows, GridhaTable table, int attno, bool *isnull)
{
	return slot_getattr(rows->rels[table].next, attno, isnull);
}

/*
 * gridha_rows_end: ends the command: fires the AFTER triggers of its
 * updates, closes what it opened, and makes its writes visible to the
 * commands that follow.
 */
void
gridha_rows_end(GridhaRows *rows)
{
	ListCell   *lc;
	int			i;

	if (rows->write)
	{
		/*
		 * The AFTER triggers the writes queued (a foreign key's check plans
		 * and runs a query on another table) run with gridha's path.
		 */
		for (i = 0; i < GRIDHA_NTABLES; i++)
			if (rows->rels[i].rel != NULL &&
				AfterTriggerPendingOnRel(RelationGetRelid(rows->rels[i].rel)))
			{
				gridha_path_pin();
				break;
			}
		AfterTriggerEndQuery(rows->estate);
		for (i = 0; i < GRIDHA_NTABLES; i++)
			if (rows->rels[i].indexes_open)
				rows_close_indexes(&rows->rels[i]);
		EvalPlanQualEnd(&rows->epq);
		/* tables a trigger's firing opened (ours are found first: none) */
		foreach(lc, rows->estate->es_trig_target_relations)
			table_close(((ResultRelInfo *) lfirst(lc))->ri_RelationDesc, NoLock);
		ExecResetTupleTable(rows->estate->es_tupleTable, false);
		FreeExecutorState(rows->estate);
	}
	for (i = 0; i < GRIDHA_NTABLES; i++)
	{
		GridhaRowsRel *r = &rows->rels[i];

		if (r->rel == NULL)
			continue;
		if (!rows->write)
			ExecDropSingleTupleTableSlot(r->row);
		table_close(r->rel, NoLock);
	}
	PopActiveSnapshot();
	if (rows->write)
		CommandCounterIncrement();
}
