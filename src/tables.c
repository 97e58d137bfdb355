/*-------------------------------------------------------------------------
 *
 * tables.c
 *		gridha's one relcache callback, and the check that gridha's tables
 *		are plain local tables.
 *
 * One callback: PostgreSQL gives a backend ten relcache callback slots for
 * everything loaded into it (Citus alone takes five), and running out is
 * a FATAL. gridha's caches (rows.c's layouts, the ID windows, the owner
 * verdicts, the targets) each ask to be told through gridha_on_relcache,
 * and gridha takes one slot for all of them, whatever a session calls.
 *
 * Plain tables: rows.c reads and writes gridha's tables directly, through
 * their heap and indexes on this server, and the SQL paths assume rows
 * that one server's statements see whole. On a partitioned or foreign
 * table, one with inheritance children, a partition, or a table Citus
 * distributes (a Citus table keeps an empty local "shell" of relkind 'r'
 * on the coordinator), gridha would read and write the wrong rows and
 * answer wrongly. So every entry point refuses (RG030) while one of
 * gridha's tables is such a table (each looked up by name, in the syscache). The verdict is kept until one of those
 * tables changes (its relcache entry is invalidated: an ALTER, a DROP,
 * Citus distributing it), so the hot path pays one test of a flag.
 *
 * Citus is detected without depending on it: a table is a Citus table
 * when pg_catalog.pg_dist_partition, if that table exists, has a row for
 * it. In the Citus mode (gridha.citus_setup made gridha.bucket_claims a
 * Citus table) the refusal is RG035 instead, naming the calls that serve
 * that mode; the entry points the mode serves hand the call over to the
 * mode's path in SQL first (gridha_citus_handover), and the background
 * workers' statements, which call only those and have the mode's branch,
 * let the mode pass (gridha_check_tables_or_mode).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common.h"
#include "tables.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

/*
 * gridha's tables, in name order (the first bad one names the error): the
 * check looks each up by name, so its cost does not grow with the
 * relations of the database.
 */
static const char *const tables_names[] = {
	"batches", "epoch_bands", "id_sequences", "id_windows", "instances",
	"leases", "maintenance_ticks", "rate_handouts", "service_claims",
	"service_counts", "target_rate_state", "target_totals", "targets"
};

/* The caches told of relcache invalidations through the one callback */
#define TABLES_MAX_CALLBACKS	8

static struct
{
	RelcacheCallbackFunction func;
	Datum		arg;
}			tables_callbacks[TABLES_MAX_CALLBACKS];
static int	tables_ncallbacks = 0;
static bool tables_registered = false;

bool		gridha_tables_plain = false;
bool		gridha_tables_citus = false;

/* The tables found plain last: a change of one of them checks again */
static Oid *tables_watched = NULL;
static int	tables_nwatched = 0;
static int	tables_maxwatched = 0;

static bool tables_check(bool allow_mode);

/* Counts invalidations: one taken in while gridha_check_tables looks makes it look again */
static uint64 tables_generation = 0;

/*
 * tables_relcache_callback: the one callback gridha registers: forgets the
 * verdict on the tables when one of them (or every relation) changed, then
 * tells each of gridha's caches.
 */
static void
tables_relcache_callback(Datum arg, Oid relid)
{
	int			i;

	tables_generation++;
	if (!OidIsValid(relid))
		gridha_tables_plain = gridha_tables_citus = false;
	else
		for (i = 0; i < tables_nwatched; i++)
			if (tables_watched[i] == relid)
			{
				gridha_tables_plain = gridha_tables_citus = false;
				break;
			}
	for (i = 0; i < tables_ncallbacks; i++)
		tables_callbacks[i].func(tables_callbacks[i].arg, relid);
}

static void
tables_register(void)
{
	if (tables_registered)
		return;
	CacheRegisterRelcacheCallback(tables_relcache_callback, (Datum) 0);
	tables_registered = true;
}

/*
 * gridha_on_relcache: tells func of every relcache invalidation this
 * backend takes in, as CacheRegisterRelcacheCallback would, through
 * gridha's one slot. Call it once per cache.
 */
void
gridha_on_relcache(RelcacheCallbackFunction func, Datum arg)
{
	if (tables_ncallbacks == TABLES_MAX_CALLBACKS)
		elog(FATAL, "gridha: out of relcache callback entries");
	tables_register();
	tables_callbacks[tables_ncallbacks].func = func;
	tables_callbacks[tables_ncallbacks].arg = arg;
	tables_ncallbacks++;
}

/*
 * tables_watch: remembers a table of schema gridha as checked.
 */
static void
tables_watch(Oid relid)
{
	if (tables_nwatched == tables_maxwatched)
	{
		int			n = Max(16, tables_maxwatched * 2);

		if (tables_watched == NULL)
			tables_watched = MemoryContextAlloc(TopMemoryContext, n * sizeof(Oid));
		else
			tables_watched = repalloc(tables_watched, n * sizeof(Oid));
		tables_maxwatched = n;
	}
	tables_watched[tables_nwatched++] = relid;
}

/*
 * tables_citus: the tables Citus has metadata for (pg_dist_partition's
 * logicalrelid), or NIL when Citus's catalog does not exist here.
 */
static List *
tables_citus(void)
{
	Oid			catalog = get_relname_relid("pg_dist_partition", PG_CATALOG_NAMESPACE);
	List	   *result = NIL;
	Relation	rel;
	SysScanDesc scan;
	HeapTuple	tup;

	if (!OidIsValid(catalog) || get_rel_relkind(catalog) != RELKIND_RELATION)
		return NIL;
	rel = table_open(catalog, AccessShareLock);
	if (RelationGetDescr(rel)->natts >= 1 &&
		TupleDescAttr(RelationGetDescr(rel), 0)->atttypid == REGCLASSOID)
	{
		scan = systable_beginscan(rel, InvalidOid, false, NULL, 0, NULL);
		while (HeapTupleIsValid(tup = systable_getnext(scan)))
		{
			bool		isnull;
			Datum		d = heap_getattr(tup, 1, RelationGetDescr(rel), &isnull);

			if (!isnull)
				result = lappend_oid(result, DatumGetObjectId(d));
		}
		systable_endscan(scan);
	}
	table_close(rel, AccessShareLock);
	return result;
}

/*
 * tables_refuse: RG030, a table of schema gridha is not a plain local
 * table.
 */
static void
tables_refuse(const char *name, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_GRIDHA_UNSUPPORTED_TABLE),
			 errmsg("gridha.%s is %s, which gridha does not support", name, what),
			 errdetail("gridha reads and writes its tables directly on this server; on such a table its answers would be wrong, so every gridha function refuses to run."),
			 errhint("Keep gridha's tables plain local tables of one PostgreSQL server, as CREATE EXTENSION gridha creates them; do not distribute them with Citus: on Citus, gridha.citus_setup lays gridha out by bucket in a fresh database (docs/citus.md).")));
}

/*
 * gridha_check_tables: looks at every table of schema gridha and refuses
 * (RG030) if one is not a plain local table; otherwise remembers the
 * verdict until one of them changes. Does nothing without schema gridha
 * (the caller fails on its own).
 */
void
gridha_check_tables(void)
{
	(void) tables_check(false);
}

/*
 * tables_check: gridha_check_tables; with allow_mode, the Citus mode
 * returns true instead of refusing (RG035).
 */
static bool
tables_check(bool allow_mode)
{
	Oid			nsp;
	List	   *citus;
	int			i;
	char	   *bad_name = NULL;
	const char *bad_what = NULL;
	uint64		generation;

	tables_register();
	nsp = get_namespace_oid("gridha", true);
	if (!OidIsValid(nsp))
		return false;
	generation = tables_generation;
	citus = tables_citus();
	tables_nwatched = 0;

	/*
	 * The Citus mode (gridha.citus_setup): gridha.bucket_claims is a Citus
	 * table. The per-bucket functions (SQL, not this library) run there,
	 * and the entry points that hand over (GRIDHA_CITUS_HANDOVER); every
	 * other entry point of the library refuses (RG035).
	 */
	{
		Oid			mode = get_relname_relid("bucket_claims", nsp);

		if (OidIsValid(mode) && list_member_oid(citus, mode))
		{
			list_free(citus);
			/* kept until gridha.bucket_claims changes (DROP EXTENSION) */
			tables_watch(mode);
			gridha_tables_citus = (generation == tables_generation);
			if (allow_mode)
				return true;
			ereport(ERROR,
					(errcode(ERRCODE_GRIDHA_CITUS_MODE),
					 errmsg("gridha is in Citus mode, where this function does not run"),
					 errdetail("gridha.citus_setup laid gridha out by bucket in this database; there, the per-bucket functions, enqueue, register_instance, the instance calls next_batch, next_batches, renew_claims, acquire_claims, release_claims, report_submission, report_status, report_submissions, report_statuses, claimed_batches, pending_batches and verify_batch, run_maintenance, prune_batches, gridha.metrics, the ID sequences (create_id_sequence, drop_id_sequence, reserve_ids, next_id, on the coordinator), start_worker, stop_worker and the background workers serve it."),
					 errhint("Enqueue with gridha.enqueue or gridha.bucket_enqueue; submit through gridha.next_batch and the reports, or the per-bucket functions and their batched forms, each called as a statement of its own (docs/citus.md).")));
		}
	}

	for (i = 0; i < lengthof(tables_names); i++)
	{
		Oid			relid = get_relname_relid(tables_names[i], nsp);
		HeapTuple	tup;
		Form_pg_class cls;
		const char *what = NULL;

		if (!OidIsValid(relid))
			continue;			/* a missing table fails where it is used */
		tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
		if (!HeapTupleIsValid(tup))
			continue;
		cls = (Form_pg_class) GETSTRUCT(tup);
		if (cls->relkind == RELKIND_PARTITIONED_TABLE)
			what = "a partitioned table";
		else if (cls->relkind == RELKIND_FOREIGN_TABLE)
			what = "a foreign table";
		else if (cls->relkind != RELKIND_RELATION)
			what = "not a table";
		else if (cls->relispartition)
			what = "a partition of another table";
		else if (list_member_oid(citus, relid))
			what = "a Citus table (distributed, reference or Citus local)";
		else if (cls->relhassubclass && find_inheritance_children(relid, NoLock) != NIL)
			what = "a table with inheritance children";
		ReleaseSysCache(tup);
		if (what == NULL)
			tables_watch(relid);
		else if (bad_name == NULL)
		{
			/* the first by name, so that the message does not vary */
			bad_name = pstrdup(tables_names[i]);
			bad_what = what;
		}
	}
	list_free(citus);
	if (bad_what != NULL)
	{
		tables_nwatched = 0;
		tables_refuse(bad_name, bad_what);
	}
	/* a change taken in while looking: look again at the next call */
	gridha_tables_plain = (generation == tables_generation);
	return false;
}

/*
 * gridha_check_tables_or_mode: gridha_check_tables, but the Citus mode
 * is no refusal: true in the mode (the verdict kept in
 * gridha_tables_citus), false when the tables are plain; RG030 for any
 * other table that is not plain.
 */
bool
gridha_check_tables_or_mode(void)
{
	return tables_check(true);
}

/*
 * gridha_citus_mode: gridha.citus_setup laid this database out by bucket
 * (gridha.bucket_claims exists and is a Citus table). Looked up afresh at
 * every call: only calls made while the tables are not found plain (in
 * the mode, or before a first check) ask.
 */
bool
gridha_citus_mode(void)
{
	Oid			nsp = get_namespace_oid("gridha", true);
	Oid			mode;
	List	   *citus;
	bool		result;

	if (!OidIsValid(nsp))
		return false;
	mode = get_relname_relid("bucket_claims", nsp);
	if (!OidIsValid(mode))
		return false;
	citus = tables_citus();
	result = list_member_oid(citus, mode);
	list_free(citus);
	return result;
}

PG_FUNCTION_INFO_V1(gridha_citus_mode_sql);

/*
 * gridha_citus_mode_sql: SQL gridha_internal.citus_mode(): whether this
 * database is in the Citus mode. On one server, once gridha's tables were
 * found plain (the read calls' check ran first), one test of the flag.
 */
Datum
gridha_citus_mode_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(!gridha_tables_plain && gridha_citus_mode());
}

/*
 * gridha_citus_handover: the Citus mode's path of a contract call: calls
 * gridha_internal.citus_<name>, where name is the called SQL function's,
 * with the same argument types (the install script declares it with the
 * same result), passing the arguments and the set-result information on
 * as they are, and returns what it returns. *done is false when the
 * install script has no such function (a call the mode does not serve).
 * The function runs as this entry point does (the extension's owner, a
 * SECURITY DEFINER call), and session_user stays the caller's, which the
 * per-bucket functions check.
 */
Datum
gridha_citus_handover(FunctionCallInfo fcinfo, bool *done)
{
	Oid			self = fcinfo->flinfo->fn_oid;
	HeapTuple	tup;
	Form_pg_proc proc;
	char	   *name;
	int			nargs;
	Oid		   *argtypes;
	Oid			target;
	FmgrInfo   *flinfo;
	LOCAL_FCINFO(call, FUNC_MAX_ARGS);
	int			i;
	Datum		result;

	*done = false;
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(self));
	if (!HeapTupleIsValid(tup))
		return (Datum) 0;
	proc = (Form_pg_proc) GETSTRUCT(tup);
	name = psprintf("citus_%s", NameStr(proc->proname));
	nargs = proc->pronargs;
	argtypes = palloc(sizeof(Oid) * Max(nargs, 1));
	memcpy(argtypes, proc->proargtypes.values, sizeof(Oid) * nargs);
	ReleaseSysCache(tup);
	target = LookupFuncName(list_make2(makeString("gridha_internal"), makeString(name)),
							nargs, argtypes, true);
	if (!OidIsValid(target) || nargs != PG_NARGS())
		return (Datum) 0;
	flinfo = palloc0(sizeof(FmgrInfo));
	fmgr_info(target, flinfo);
	InitFunctionCallInfoData(*call, flinfo, nargs, fcinfo->fncollation, NULL, fcinfo->resultinfo);
	for (i = 0; i < nargs; i++)
	{
		call->args[i].value = fcinfo->args[i].value;
		call->args[i].isnull = fcinfo->args[i].isnull;
	}
	result = FunctionCallInvoke(call);
	fcinfo->isnull = call->isnull;
	*done = true;
	return result;
}

#ifdef GRIDHA_TEST_HOOKS
static void
tables_test_noop(Datum arg, Oid relid)
{
}

/*
 * gridha_test_fill_relcache: test builds only: takes count more relcache
 * callback slots in this backend, as other extensions loaded beside gridha
 * do (Citus takes five); a backend out of slots ends with a FATAL.
 */
void
gridha_test_fill_relcache(int count)
{
	int			i;

	for (i = 0; i < count; i++)
		CacheRegisterRelcacheCallback(tables_test_noop, (Datum) 0);
}
#endif
