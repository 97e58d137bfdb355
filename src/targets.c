/*-------------------------------------------------------------------------
 *
 * targets.c
 *		Checks a row of gridha.targets when it is written, so a target that
 *		a worker could never use is refused at once (RG007) instead of
 *		failing batch after batch later.
 *
 * Words:
 *   submit source   submit_url (an HTTP POST) or submit_function, not both
 *   status source   status_url (an HTTP GET) or status_function, not both
 *   submit_function (service_id text, batch_id text, payload bytea,
 *                   epoch bigint) RETURNS text: accepted, delayed or rejected
 *   status_function (batch_ids text[]) RETURNS TABLE (batch_id text,
 *                   status text): pending, valid, committed, invalid,
 *                   unknown (any case)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

#include "dlt_http.h"
#include "gridha.h"

/*
 * targets_check_url: refuses a URL template that is not usable.
 */
static void
targets_check_url(const char *target, const char *column, const char *url,
				  GridhaUrlKind kind)
{
	char		err[256];

	if (gridha_http_check_url(url, kind, err, sizeof(err)) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
				 errmsg("invalid %s of target \"%s\": %s", column, target, err),
				 kind == GRIDHA_URL_SUBMIT ?
				 errhint("Use an http:// or https:// URL; {service_id} and {batch_id} are filled in.") :
				 errhint("Use an http:// or https:// URL containing {batch_ids}, which is filled in with the comma-separated ids.")));
}

/*
 * targets_function_error: the RG007 refusal for a function of the wrong
 * shape.
 */
static void
targets_function_error(const char *target, const char *column, Oid fn, const char *want)
{
	ereport(ERROR,
			(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
			 errmsg("%s of target \"%s\" has the wrong signature", column, target),
			 errdetail("%s is %s.", column, format_procedure(fn)),
			 errhint("It must be %s.", want)));
}

/*
 * targets_check_submit_function: (text, text, bytea, bigint) RETURNS text,
 * not a set.
 */
static void
targets_check_submit_function(const char *target, Oid fn)
{
	static const char *want = "(service_id text, batch_id text, payload bytea, epoch bigint) RETURNS text";
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	Form_pg_proc proc;
	bool		ok;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for function %u", fn);
	proc = (Form_pg_proc) GETSTRUCT(tup);
	ok = proc->pronargs == 4 &&
		proc->proargtypes.values[0] == TEXTOID &&
		proc->proargtypes.values[1] == TEXTOID &&
		proc->proargtypes.values[2] == BYTEAOID &&
		proc->proargtypes.values[3] == INT8OID &&
		proc->prorettype == TEXTOID && !proc->proretset && proc->prokind == PROKIND_FUNCTION;
	ReleaseSysCache(tup);
	if (!ok)
		targets_function_error(target, "submit_function", fn, want);
}

/*
 * targets_check_status_function: (text[]) RETURNS TABLE (batch_id text,
 * status text).
 */
static void
targets_check_status_function(const char *target, Oid fn)
{
	static const char *want = "(batch_ids text[]) RETURNS TABLE (batch_id text, status text)";
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	Form_pg_proc proc;
	bool		ok;
	Oid			rettype;
	TupleDesc	tupdesc = NULL;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for function %u", fn);
	proc = (Form_pg_proc) GETSTRUCT(tup);
	ok = proc->pronargs == 1 && proc->proargtypes.values[0] == TEXTARRAYOID &&
		proc->proretset && proc->prokind == PROKIND_FUNCTION;
	ReleaseSysCache(tup);
	if (ok)
		ok = get_func_result_type(fn, &rettype, &tupdesc) == TYPEFUNC_COMPOSITE &&
			tupdesc->natts == 2 &&
			TupleDescAttr(tupdesc, 0)->atttypid == TEXTOID &&
			TupleDescAttr(tupdesc, 1)->atttypid == TEXTOID;
	if (!ok)
		targets_function_error(target, "status_function", fn, want);
}

PG_FUNCTION_INFO_V1(gridha_targets_check);

/*
 * gridha_targets_check: BEFORE INSERT OR UPDATE trigger on gridha.targets.
 */
Datum
gridha_targets_check(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	HeapTuple	tuple;
	TupleDesc	desc;
	bool		isnull;
	Datum		d;
	char	   *target;
	char	   *submit_url = NULL;
	char	   *status_url = NULL;
	Oid			submit_fn = InvalidOid;
	Oid			status_fn = InvalidOid;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("gridha.targets_check() must be called as a trigger")));

	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ? trigdata->tg_newtuple : trigdata->tg_trigtuple;
	desc = trigdata->tg_relation->rd_att;

	d = heap_getattr(tuple, SPI_fnumber(desc, "target"), desc, &isnull);
	target = isnull ? "" : TextDatumGetCString(d);
	d = heap_getattr(tuple, SPI_fnumber(desc, "submit_url"), desc, &isnull);
	if (!isnull)
		submit_url = TextDatumGetCString(d);
	d = heap_getattr(tuple, SPI_fnumber(desc, "status_url"), desc, &isnull);
	if (!isnull)
		status_url = TextDatumGetCString(d);
	d = heap_getattr(tuple, SPI_fnumber(desc, "submit_function"), desc, &isnull);
	if (!isnull)
		submit_fn = DatumGetObjectId(d);
	d = heap_getattr(tuple, SPI_fnumber(desc, "status_function"), desc, &isnull);
	if (!isnull)
		status_fn = DatumGetObjectId(d);

	if (submit_url != NULL && OidIsValid(submit_fn))
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
				 errmsg("target \"%s\" has both submit_url and submit_function", target),
				 errhint("Set one of them to NULL.")));
	if (status_url != NULL && OidIsValid(status_fn))
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
				 errmsg("target \"%s\" has both status_url and status_function", target),
				 errhint("Set one of them to NULL.")));
	if (submit_url != NULL)
		targets_check_url(target, "submit_url", submit_url, GRIDHA_URL_SUBMIT);
	if (status_url != NULL)
		targets_check_url(target, "status_url", status_url, GRIDHA_URL_STATUS);
	if (OidIsValid(submit_fn))
		targets_check_submit_function(target, submit_fn);
	if (OidIsValid(status_fn))
		targets_check_status_function(target, status_fn);

	return PointerGetDatum(tuple);
}
