/*-------------------------------------------------------------------------
 *
 * generation.c
 *		The generation of gridha's SQL installed in this database, and the
 *		refusal of one this library does not serve.
 *
 * The library serves the current SQL (1.3) and the one before it (1.2),
 * so that 1.2 clients keep working while an administrator runs ALTER
 * EXTENSION gridha UPDATE. The released install scripts name the same C
 * symbols in every version, so the generation is read from the catalog:
 * pg_extension.extversion, once per backend, read again after any
 * relation or function changed (an ALTER EXTENSION UPDATE alters tables
 * and replaces functions; DROP and CREATE EXTENSION drop and create them).
 * Everything that differs between 1.2 and 1.3 asks gridha_sql_generation;
 * nothing else in the library looks at columns or versions to decide. (One
 * such difference: the worker's own functions, worker_register and
 * worker_orphans, are in schema gridha_internal on 1.3, in gridha on 1.2;
 * the 1.2 script's C symbols of the deprecated forms stay in the library,
 * which 1.3 wraps in SQL instead.)
 *
 * SQL 1.0 and 1.1 are refused (RG022) by every function that reads or
 * writes gridha's tables, with a hint to run ALTER EXTENSION gridha
 * UPDATE. The update scripts themselves run while an extension script is
 * executing (creating_extension), when nothing is refused: their triggers
 * fire on the old tables.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common.h"
#include "generation.h"
#include "tables.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/syscache.h"

/* GRIDHA_SQL_NONE with known false: read the catalog again */
static GridhaGeneration generation_cached = GRIDHA_SQL_NONE;
static bool generation_known = false;
static char generation_version[NAMEDATALEN];
static bool generation_callbacks = false;

static void
generation_relcache_changed(Datum arg, Oid relid)
{
	generation_known = false;
}

static void
generation_syscache_changed(Datum arg, int cacheid, uint32 hashvalue)
{
	generation_known = false;
}

/*
 * generation_read: extversion of gridha in this database into version
 * (empty when it is not installed).
 */
static void
generation_read(char *version)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;

	version[0] = '\0';
	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("gridha"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			strlcpy(version, TextDatumGetCString(d), NAMEDATALEN);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
}

/*
 * gridha_sql_generation: the generation of the installed SQL. Inside an
 * extension script (CREATE or ALTER EXTENSION) the catalog is read every
 * time and nothing is kept: the version changes at the script's end.
 */
GridhaGeneration
gridha_sql_generation(void)
{
	char		version[NAMEDATALEN];
	GridhaGeneration g;

	if (generation_known && !creating_extension)
		return generation_cached;
	if (!generation_callbacks)
	{
		gridha_on_relcache(generation_relcache_changed, (Datum) 0);
		CacheRegisterSyscacheCallback(PROCOID, generation_syscache_changed, (Datum) 0);
		generation_callbacks = true;
	}
	generation_read(version);
	if (version[0] == '\0')
		g = GRIDHA_SQL_NONE;
	else if (strcmp(version, "1.3") == 0)
		g = GRIDHA_SQL_1_3;
	else if (strcmp(version, "1.2") == 0)
		g = GRIDHA_SQL_1_2;
	else
		g = GRIDHA_SQL_OLD;
	if (!creating_extension)
	{
		generation_cached = g;
		strlcpy(generation_version, version, NAMEDATALEN);
		generation_known = true;
	}
	return g;
}

/*
 * gridha_require_served: refuses (RG022) to run on SQL this library does
 * not serve (1.0, 1.1), before anything is read or written. Passes inside
 * an extension script, and where gridha is not installed (the caller
 * fails on its own).
 */
void
gridha_require_served(void)
{
	if (creating_extension || gridha_sql_generation() != GRIDHA_SQL_OLD)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_GRIDHA_SQL_NOT_SERVED),
			 errmsg("gridha's SQL in this database is version %s, which this library no longer serves",
					generation_version),
			 errdetail("This gridha library serves the SQL of gridha 1.2 and 1.3 only."),
			 errhint("Update the extension: ALTER EXTENSION gridha UPDATE.")));
}
