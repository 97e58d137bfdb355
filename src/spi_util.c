/*-------------------------------------------------------------------------
 *
 * spi_util.c
 *		Kept SPI plans and the argument checks shared by the SQL API.
 *
 * Every SQL-callable function validates its arguments here before it
 * touches anything, so bad input is refused with its own SQLSTATE and
 * changes nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common.h"
#include "generation.h"
#include "path.h"
#include "spi_util.h"
#include "tables.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"

/* Whether schema gridha was found safe since it (or a role) last changed */
static bool spi_schema_safe = false;
static bool spi_schema_callbacks = false;

static inline int spi_exec_kept(GridhaStatement *stmt, Datum *values, const char *nulls,
								 bool read_only);
static void spi_require_safe_schema(void);
static inline void spi_require_writable(const char *what);

/*
 * gridha_exec: runs a kept statement and returns SPI's result code.
 *
 * The plan is prepared once per backend and is the generic plan unless the
 * statement asks for custom ones: most statements look rows up by key, so
 * the parameter values do not change the best plan, and a custom plan costs
 * a planner run on every call. A statement whose row count comes from a
 * parameter (LIMIT $n driving a join) asks for custom plans: a generic plan
 * guesses a tenth of the table for it and may then join by scanning a whole
 * table. An ANALYZE of a table (autovacuum's) invalidates the plan, so it
 * follows the table's size. An SPI failure is "cannot happen" territory
 * (SQL errors are raised by SPI itself), so it is an elog.
 */
int
gridha_exec(GridhaStatement *stmt, Datum *values, const char *nulls, bool read_only)
{
	gridha_require_safe_schema();
	return spi_exec_kept(stmt, values, nulls, read_only);
}

/*
 * gridha_exec_served: gridha_exec for a background worker's statements,
 * which run in the Citus mode too: each calls the SQL API (whose entry
 * points hand the call over in the mode) or has the mode's branch. Refuses
 * what gridha_exec refuses but the mode (RG035).
 */
int
gridha_exec_served(GridhaStatement *stmt, Datum *values, const char *nulls, bool read_only)
{
	gridha_require_safe_schema_served();
	return spi_exec_kept(stmt, values, nulls, read_only);
}

/*
 * spi_exec_kept: runs a kept statement (prepared on first use) and
 * returns SPI's result code. Inlined: gridha_exec costs what it did.
 */
static pg_attribute_always_inline int
spi_exec_kept(GridhaStatement *stmt, Datum *values, const char *nulls, bool read_only)
{
	int			rc;

	gridha_path_pin();
	if (stmt->plan == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare_cursor(stmt->sql, stmt->nargs, stmt->argtypes,
												  stmt->custom_plan ? CURSOR_OPT_CUSTOM_PLAN :
												  CURSOR_OPT_GENERIC_PLAN);

		if (plan == NULL)
			elog(ERROR, "gridha: SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "gridha: SPI_keepplan failed");
		stmt->plan = plan;
	}

	rc = SPI_execute_plan(stmt->plan, values, nulls, read_only, 0);
	if (rc < 0)
		elog(ERROR, "gridha: SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	return rc;
}

/*
 * gridha_col: column "col" of result row "row" of the last SPI statement.
 */
Datum
gridha_col(int row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull);
}

/*
 * gridha_col_int64: a bigint or integer column that must not be NULL.
 */
int64
gridha_col_int64(int row, int col)
{
	bool		isnull;
	Datum		d = gridha_col(row, col, &isnull);
	Oid			typid = SPI_gettypeid(SPI_tuptable->tupdesc, col);

	if (isnull)
		elog(ERROR, "gridha: unexpected NULL in column %d", col);
	if (typid == INT4OID)
		return DatumGetInt32(d);
	return DatumGetInt64(d);
}

/*
 * gridha_put_rows: appends every row of the last SPI statement, its first
 * ncols columns, to a set-returning function's tuplestore.
 */
void
gridha_put_rows(ReturnSetInfo *rsinfo, int ncols)
{
	Datum		values[GRIDHA_MAX_ARGS];
	bool		isnull[GRIDHA_MAX_ARGS];
	uint64		i;
	int			col;

	Assert(ncols <= GRIDHA_MAX_ARGS);
	for (i = 0; i < SPI_processed; i++)
	{
		for (col = 0; col < ncols; col++)
			values[col] = gridha_col(i, col + 1, &isnull[col]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, isnull);
	}
}

/*
 * gridha_arg_uuid: a uuid argument that must be given.
 */
Datum
gridha_arg_uuid(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
	return PG_GETARG_DATUM(argno);
}

/*
 * gridha_check_id: a text identifier (argument or array element) that
 * must be given and not empty.
 */
text *
gridha_check_id(Datum value, bool isnull, const char *name)
{
	text	   *t;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
	t = DatumGetTextPP(value);
	if (VARSIZE_ANY_EXHDR(t) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", name)));
	return t;
}

/*
 * gridha_arg_id: a text identifier argument that must be given and not
 * empty.
 */
text *
gridha_arg_id(FunctionCallInfo fcinfo, int argno, const char *name)
{
	return gridha_check_id(PG_ARGISNULL(argno) ? (Datum) 0 : PG_GETARG_DATUM(argno),
						   PG_ARGISNULL(argno), name);
}

/*
 * gridha_arg_new_id: an identifier argument that names something about to
 * be created, so it must also be at most GRIDHA_MAX_ID_BYTES long (ids are
 * index keys). Ids that already exist are only looked up with
 * gridha_arg_id, so rows stored before the limit stay reachable.
 */
text *
gridha_arg_new_id(FunctionCallInfo fcinfo, int argno, const char *name)
{
	text	   *t = gridha_arg_id(fcinfo, argno, name);

	if (VARSIZE_ANY_EXHDR(t) > GRIDHA_MAX_ID_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too long", name),
				 errdetail("It has %d bytes; an id has at most %d.",
						   (int) VARSIZE_ANY_EXHDR(t), GRIDHA_MAX_ID_BYTES)));
	/* ids are path segments of the ledger's URLs, where these name others */
	if ((VARSIZE_ANY_EXHDR(t) == 1 && memcmp(VARDATA_ANY(t), ".", 1) == 0) ||
		(VARSIZE_ANY_EXHDR(t) == 2 && memcmp(VARDATA_ANY(t), "..", 2) == 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be \"%s\"", name, text_to_cstring(t)),
				 errdetail("Ids are path segments of the ledger's URLs, where \".\" and \"..\" name other paths.")));
	return t;
}

/*
 * gridha_check_epoch: an epoch (argument or array element), given and not
 * negative.
 */
int64
gridha_check_epoch(Datum value, bool isnull)
{
	int64		epoch;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("epoch must not be null")));
	epoch = DatumGetInt64(value);
	if (epoch < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("epoch must not be negative"),
				 errdetail("The epoch given was " INT64_FORMAT ".", epoch)));
	return epoch;
}

/*
 * gridha_arg_epoch: an epoch argument, given and not negative.
 */
int64
gridha_arg_epoch(FunctionCallInfo fcinfo, int argno)
{
	return gridha_check_epoch(PG_ARGISNULL(argno) ? (Datum) 0 : PG_GETARG_DATUM(argno),
							  PG_ARGISNULL(argno));
}

/*
 * gridha_arg_count: a row count argument, given and not negative.
 */
int32
gridha_arg_count(FunctionCallInfo fcinfo, int argno, const char *name)
{
	int32		n;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
	n = PG_GETARG_INT32(argno);
	if (n < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", name),
				 errdetail("The value given was %d.", n)));
	return n;
}

/*
 * gridha_require_writable: refuses a write path inside a read-only
 * transaction or on a hot standby, with SQLSTATE 25006, before anything is
 * read or written. The hot path's row writes (rows.c) bypass the executor
 * checks that would otherwise refuse them, so every write path calls this
 * first.
 */
void
gridha_require_writable(const char *what)
{
	/*
	 * Every write path of the API starts here: no unsafe schema (RG015),
	 * then no 1.0 or 1.1 SQL (RG022)
	 */
	gridha_require_safe_schema();
	spi_require_writable(what);
}

/*
 * gridha_require_writable_served: gridha_require_writable for the
 * background workers' calls that serve the Citus mode too (start_worker,
 * a worker's registration): the mode is no refusal (RG035).
 */
void
gridha_require_writable_served(const char *what)
{
	gridha_require_safe_schema_served();
	spi_require_writable(what);
}

/*
 * spi_require_writable: the rest of gridha_require_writable, after the
 * schema's check. Inlined: gridha_require_writable costs what it did.
 */
static pg_attribute_always_inline void
spi_require_writable(const char *what)
{
	gridha_require_served();
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot execute %s during recovery", what),
				 errdetail("This server is a standby; gridha writes only on the primary."),
				 errhint("Connect to the primary, for example with target_session_attrs=read-write in a multi-host connection string.")));
	if (XactReadOnly)
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot execute %s in a read-only transaction", what),
				 errhint("Call it in a read-write transaction.")));
}

/*
 * gridha_uuid_equal: byte equality of two uuid Datums.
 */
bool
gridha_uuid_equal(Datum a, Datum b)
{
	return memcmp(DatumGetUUIDP(a)->data, DatumGetUUIDP(b)->data, UUID_LEN) == 0;
}

/*
 * gridha_text_array, gridha_int8_array: n Datums as a text[] / bigint[]
 * statement parameter.
 */
Datum
gridha_text_array(Datum *elems, int n)
{
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

Datum
gridha_int8_array(Datum *elems, int n)
{
	return PointerGetDatum(construct_array(elems, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * spi_schema_changed: a schema or a role changed: look at gridha's again.
 */
static void
spi_schema_changed(Datum arg, int cacheid, uint32 hashvalue)
{
	spi_schema_safe = false;
}

/*
 * spi_check_schema: refuses (RG015) when the schema named nspname belongs
 * to a role that is not a superuser, or grants CREATE to a role other than
 * its owner that is not a superuser (or to PUBLIC). A schema that does not
 * exist passes: the caller fails on its own.
 */
static void
spi_check_schema(const char *nspname)
{
	Oid			nspid;
	HeapTuple	tup;
	Form_pg_namespace nsp;
	Datum		aclDatum;
	bool		isnull;
	Oid			bad = InvalidOid;
	bool		owner_bad = false;
	bool		create_bad = false;

	nspid = get_namespace_oid(nspname, true);
	if (!OidIsValid(nspid))
		return;
	tup = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(nspid));
	if (!HeapTupleIsValid(tup))
		return;
	nsp = (Form_pg_namespace) GETSTRUCT(tup);
	if (!superuser_arg(nsp->nspowner))
	{
		owner_bad = true;
		bad = nsp->nspowner;
	}
	aclDatum = SysCacheGetAttr(NAMESPACEOID, tup, Anum_pg_namespace_nspacl, &isnull);
	if (!owner_bad && !isnull)
	{
		Acl		   *acl = DatumGetAclPCopy(aclDatum);
		AclItem    *items = ACL_DAT(acl);
		int			i;

		for (i = 0; i < ACL_NUM(acl); i++)
			if ((items[i].ai_privs & ACL_CREATE) && items[i].ai_grantee != nsp->nspowner &&
				(items[i].ai_grantee == ACL_ID_PUBLIC || !superuser_arg(items[i].ai_grantee)))
			{
				bad = items[i].ai_grantee;
				create_bad = true;
				break;
			}
	}
	ReleaseSysCache(tup);
	if (owner_bad)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_UNSAFE_SCHEMA),
				 errmsg("schema %s belongs to role \"%s\", which is not a superuser",
						nspname,
						GetUserNameFromId(bad, true) ? GetUserNameFromId(bad, true) : "?"),
				 errdetail("Objects that role placed in the schema would run with the extension's rights, so gridha refuses to run."),
				 errhint("Check the schema for objects gridha did not create, then ALTER SCHEMA %s OWNER TO a superuser.",
						 nspname)));
	if (create_bad)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_UNSAFE_SCHEMA),
				 errmsg("schema %s grants CREATE to %s", nspname,
						bad == ACL_ID_PUBLIC ? "PUBLIC" :
						psprintf("role \"%s\"", GetUserNameFromId(bad, true) ? GetUserNameFromId(bad, true) : "?")),
				 errdetail("Objects that role placed in the schema would run with the extension's rights, so gridha refuses to run."),
				 errhint("REVOKE CREATE ON SCHEMA %s FROM every role but its owner.", nspname)));
}

/*
 * gridha_subxact_try: runs step(arg) in a subtransaction of its own, with
 * the setting named (NULL: none) at value, in context, for the step's
 * length only. NULL when the step ran through: its subtransaction is kept
 * (released into the caller's transaction). When the step raises an error,
 * its subtransaction is undone and the error is returned, copied into the
 * caller's memory context, for the caller to log, map or raise again
 * (ReThrowError) and free. Either way the caller's memory context and
 * resource owner are current again on return. Where the error left the
 * transaction unusable, undoing the subtransaction raises it.
 */
ErrorData *
gridha_subxact_try(GridhaSubxactStep step, void *arg,
				   const char *setting, const char *value, GucContext context)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile edata = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		int			nest = NewGUCNestLevel();

		if (setting != NULL)
			(void) set_config_option(setting, value, context, PGC_S_SESSION,
									 GUC_ACTION_SAVE, true, 0, false);
		step(arg);
		AtEOXact_GUC(true, nest);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return edata;
}

/*
 * gridha_require_safe_schema: refuses (RG015) to run gridha's functions
 * while schema gridha, or on SQL 1.3 schema gridha_internal (the trigger
 * functions and the worker's own functions, SECURITY DEFINER too), belongs
 * to a role that is not a superuser, or grants CREATE to a role other than
 * its owner: such a role could place an operator, function or type there
 * that gridha's SECURITY DEFINER code would resolve and run with the
 * extension owner's rights. The verdict is kept until a schema or a role
 * changes, so the hot path pays nothing.
 */
void
gridha_require_safe_schema(void)
{
	gridha_require_plain_tables();
	if (spi_schema_safe)
		return;
	spi_require_safe_schema();
}

/*
 * gridha_require_safe_schema_served: gridha_require_safe_schema, but the
 * Citus mode passes (gridha_require_plain_tables_or_mode).
 */
void
gridha_require_safe_schema_served(void)
{
	(void) gridha_require_plain_tables_or_mode();
	if (spi_schema_safe)
		return;
	spi_require_safe_schema();
}

/*
 * spi_require_safe_schema: the schemas' check of
 * gridha_require_safe_schema, whose verdict it keeps.
 */
static void
spi_require_safe_schema(void)
{
	if (!spi_schema_callbacks)
	{
		CacheRegisterSyscacheCallback(NAMESPACEOID, spi_schema_changed, (Datum) 0);
		CacheRegisterSyscacheCallback(AUTHOID, spi_schema_changed, (Datum) 0);
		spi_schema_callbacks = true;
	}
	if (!OidIsValid(get_namespace_oid("gridha", true)))
		return;					/* nothing to run; the caller fails on its own */
	spi_check_schema("gridha");
	if (gridha_sql_is_current())
		spi_check_schema("gridha_internal");
	spi_schema_safe = true;
}
