/*-------------------------------------------------------------------------
 *
 * targets.c
 *		Targets: the check of a row of gridha.targets when it is written
 *		(RG007), and the same judgement as instances use it at hand-out,
 *		kept per backend.
 *
 * Words:
 *   submit source   submit_url (an HTTP POST) or submit_function, not both
 *   status source   status_url (an HTTP GET) or status_function, not both;
 *                   none: fire and forget, an accepted batch is committed
 *   submit_function (service_id text, batch_id text, payload bytea,
 *                   epoch bigint) RETURNS text: accepted, delayed or rejected
 *   signature       how a function is stored (1.3): text, the function's
 *                   schema-qualified name and argument types as regprocedure
 *                   prints it under search_path = pg_catalog, e.g.
 *                   public.f(text,text,bytea,bigint). Never an OID: OIDs
 *                   do not survive pg_upgrade nor a restore. The trigger
 *                   resolves what is written (with the writer's
 *                   search_path, the errors of a regprocedure cast) and
 *                   stores the signature; each backend resolves the stored
 *                   signature to an OID when it loads the targets. Up to
 *                   1.2 the columns are regprocedure (an OID), which the
 *                   library still reads
 *   status_function (batch_ids text[]) RETURNS TABLE (batch_id text,
 *                   status text): pending, valid, committed, invalid,
 *                   unknown (any case)
 *   kind            one of the four sources; an instance declares the kinds
 *                   it can serve (instances.serves), a target needs one
 *                   submit kind and at most one status kind
 *   unusable        a target no instance can serve: no submit source, a
 *                   malformed URL or header, a function that was dropped or
 *                   has the wrong signature, two sources of one side. Such a
 *                   row is refused when it is written (but for "no submit
 *                   source", which external instances may serve by their own
 *                   means); one that is unusable all the same (a function
 *                   dropped later, a row written before a check existed)
 *                   makes its batches delayed at hand-out, with the reason
 *
 * The judged rows are kept in backend memory and judged again after any
 * change of gridha.targets (relcache invalidation), of any function
 * (syscache invalidation of pg_proc) or of any schema (pg_namespace: a
 * signature names one): the hand-out asks them without SQL.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "storage/lmgr.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "dlt_http.h"
#include "common.h"
#include "generation.h"
#include "spi_util.h"
#include "tables.h"
#include "targets.h"

/* One WARNING per target and reason per backend in this many ms */
#define TARGETS_WARN_EVERY_MS	60000

/*
 * Every row, as the cache needs it. On SQL 1.3 the statement is a function
 * of the install script (gridha_internal.targets_load, issue 42.1), the
 * functions as signatures (text). SQL 1.2's form stays here, for a 1.2
 * schema only: the functions as OIDs (regprocedure), the optional columns
 * of later versions read through to_jsonb. gridha_targets_refresh picks
 * the one the installed SQL needs.
 */
#define TARGETS_LOAD_TAIL \
	"       t.rate_interval IS NOT NULL," \
	"       CASE WHEN to_jsonb(t) ? 'reject_codes' THEN coalesce(" \
	"         (SELECT array_agg(c::int4) FROM jsonb_array_elements_text(" \
	"            CASE WHEN jsonb_typeof(to_jsonb(t) -> 'reject_codes') = 'array'" \
	"                 THEN to_jsonb(t) -> 'reject_codes' END) AS c" \
	"           WHERE c ~ '^[0-9]{1,3}$'), '{}') END," \
	"       (SELECT array_agg(h.key || ': ' || (h.value #>> '{}') ORDER BY h.key)" \
	"          FROM jsonb_each(" \
	"            CASE WHEN jsonb_typeof(to_jsonb(t) -> 'request_headers') = 'object'" \
	"                 THEN to_jsonb(t) -> 'request_headers' END) AS h" \
	"         WHERE jsonb_typeof(h.value) = 'string')," \
	"       CASE WHEN jsonb_typeof(to_jsonb(t) -> 'request_headers') NOT IN ('object', 'null')" \
	"            THEN 'request_headers is not a JSON object'" \
	"            WHEN EXISTS (SELECT FROM jsonb_each(" \
	"              CASE WHEN jsonb_typeof(to_jsonb(t) -> 'request_headers') = 'object'" \
	"                   THEN to_jsonb(t) -> 'request_headers' END) AS h" \
	"              WHERE jsonb_typeof(h.value) <> 'string')" \
	"            THEN 'a request header is not a string' END" \
	"  FROM gridha.targets t"

static GridhaStatement targets_load_call = {
	"SELECT * FROM gridha_internal.targets_load()",
	0, {InvalidOid}
};

static GridhaStatement targets_load_oid_stmt = {
	"SELECT t.target, t.submit_url, t.submit_function::oid, t.status_url,"
	"       t.status_function::oid,"
	TARGETS_LOAD_TAIL,
	0, {InvalidOid}
};

static const char *const targets_kind_words[] = {
	"submit_url", "submit_function", "status_url", "status_function"
};

static MemoryContext targets_cxt = NULL;
static GridhaTarget *targets = NULL;
static int	ntargets = 0;
static bool targets_any_limited = false;
static uint64 targets_gen = 1;	/* bumped by every invalidation */
static uint64 targets_loaded_gen = 0;
static Oid	targets_relid = InvalidOid;
static bool targets_callbacks = false;

/* The last WARNING per target and reason */
typedef struct TargetsWarned
{
	char	   *target;
	char	   *reason;
	TimestampTz at;
} TargetsWarned;

static List *targets_warned = NIL;

/*
 * targets_function_problem: why fn cannot be this target's function, or
 * NULL. want_submit: the submit signature, else the status one.
 */
static char *
targets_function_problem(const char *target, const char *column, Oid fn, bool want_submit)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	Form_pg_proc proc;
	bool		ok;

	if (!HeapTupleIsValid(tup))
		return psprintf("%s of target \"%s\" (OID %u) does not exist", column, target, fn);
	proc = (Form_pg_proc) GETSTRUCT(tup);
	if (want_submit)
		ok = proc->pronargs == 4 &&
			proc->proargtypes.values[0] == TEXTOID &&
			proc->proargtypes.values[1] == TEXTOID &&
			proc->proargtypes.values[2] == BYTEAOID &&
			proc->proargtypes.values[3] == INT8OID &&
			proc->prorettype == TEXTOID && !proc->proretset &&
			proc->prokind == PROKIND_FUNCTION;
	else
		ok = proc->pronargs == 1 && proc->proargtypes.values[0] == TEXTARRAYOID &&
			proc->proretset && proc->prokind == PROKIND_FUNCTION;
	ReleaseSysCache(tup);
	if (ok && !want_submit)
	{
		Oid			rettype;
		TupleDesc	tupdesc = NULL;

		ok = get_func_result_type(fn, &rettype, &tupdesc) == TYPEFUNC_COMPOSITE &&
			tupdesc->natts == 2 &&
			TupleDescAttr(tupdesc, 0)->atttypid == TEXTOID &&
			TupleDescAttr(tupdesc, 1)->atttypid == TEXTOID;
	}
	if (!ok)
		return psprintf("%s of target \"%s\" is %s, which is not %s", column, target,
						format_procedure(fn),
						want_submit ?
						"(service_id text, batch_id text, payload bytea, epoch bigint) RETURNS text" :
						"(batch_ids text[]) RETURNS TABLE (batch_id text, status text)");
	return NULL;
}

/*
 * targets_bare_oid: whether a written function is a bare OID ("-" or
 * digits), which regprocedure input takes as it is, unchecked: an OID is
 * never stored (it does not survive pg_upgrade nor a restore).
 */
static bool
targets_bare_oid(const char *signature)
{
	return strcmp(signature, "-") == 0 ||
		(signature[0] >= '0' && signature[0] <= '9' &&
		 strspn(signature, "0123456789") == strlen(signature));
}

/*
 * targets_signature_of: the signature of a function as it is stored:
 * schema-qualified (but for pg_catalog's), argument types as
 * format_type prints them under search_path = pg_catalog. It resolves to
 * the same function under any search_path that starts with pg_catalog.
 */
static char *
targets_signature_of(Oid fn)
{
	int			nest = NewGUCNestLevel();
	char	   *signature;

	(void) set_config_option("search_path", "pg_catalog", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	signature = format_procedure(fn);
	AtEOXact_GUC(true, nest);
	return signature;
}

/* What the look-up of targets_resolve is given and gives back */
typedef struct TargetsLookup
{
	const char *signature;
	Oid			fn;
} TargetsLookup;

/* targets_lookup: regprocedurein of the signature (in a subtransaction) */
static void
targets_lookup(void *arg)
{
	TargetsLookup *lookup = (TargetsLookup *) arg;

	lookup->fn = DatumGetObjectId(DirectFunctionCall1(regprocedurein,
													  CStringGetDatum(lookup->signature)));
}

/*
 * targets_resolve: the OID of the function a stored signature names, under
 * search_path = pg_catalog (the signature qualifies every other name), or
 * InvalidOid and *why (does not exist, or the look-up's error message).
 * Never raises for a signature that does not resolve: the look-up runs in a
 * subtransaction, whose error (a name, type or schema that is not there, a
 * malformed signature) becomes the reason. Any other error (a cancel) is
 * raised again.
 */
static Oid
targets_resolve(const char *signature, char **why)
{
	TargetsLookup lookup;
	ErrorData  *edata;

	*why = NULL;
	if (targets_bare_oid(signature))
	{
		*why = pstrdup("is not a function signature");
		return InvalidOid;
	}
	lookup.signature = signature;
	lookup.fn = InvalidOid;
	edata = gridha_subxact_try(targets_lookup, &lookup,
							   "search_path", "pg_catalog", PGC_USERSET);
	if (edata != NULL)
	{
		if (edata->sqlerrcode == ERRCODE_UNDEFINED_FUNCTION)
			*why = pstrdup("does not exist");
		else if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) == ERRCODE_SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION ||
				 edata->sqlerrcode == ERRCODE_INVALID_SCHEMA_NAME ||
				 edata->sqlerrcode == ERRCODE_INVALID_TEXT_REPRESENTATION)
			*why = psprintf("cannot be resolved: %s", edata->message);
		else
			ReThrowError(edata);
		FreeErrorData(edata);
		lookup.fn = InvalidOid;
	}
	if (!OidIsValid(lookup.fn) && *why == NULL)
		*why = pstrdup("does not exist");
	return lookup.fn;
}

/*
 * targets_side_problem: why one side (submit or status) of a target cannot
 * be used, or NULL; *kind gets the kind it needs (0: it has no source).
 * The function is fn; signature, when not NULL, is the one the row stores
 * (1.3), and fn is InvalidOid when it did not resolve (why says why).
 */
static char *
targets_side_problem(const char *target, bool submit, const char *url, Oid fn,
					 const char *signature, const char *why, int *kind)
{
	const char *url_col = submit ? "submit_url" : "status_url";
	const char *fn_col = submit ? "submit_function" : "status_function";
	char		err[256];

	*kind = 0;
	if (url != NULL && (OidIsValid(fn) || signature != NULL))
		return psprintf("target \"%s\" has both %s and %s", target, url_col, fn_col);
	if (url != NULL)
	{
		if (gridha_url_check(url, submit ? GRIDHA_URL_SUBMIT : GRIDHA_URL_STATUS,
								  err, sizeof(err)) != 0)
			return psprintf("invalid %s of target \"%s\": %s", url_col, target, err);
		*kind = submit ? GRIDHA_SERVES_SUBMIT_URL : GRIDHA_SERVES_STATUS_URL;
	}
	else if (signature != NULL && !OidIsValid(fn))
		return psprintf("%s of target \"%s\" (%s) %s", fn_col, target, signature,
						why ? why : "does not exist");
	else if (OidIsValid(fn))
	{
		char	   *problem = targets_function_problem(target, fn_col, fn, submit);

		if (problem != NULL)
			return problem;
		*kind = submit ? GRIDHA_SERVES_SUBMIT_FUNCTION : GRIDHA_SERVES_STATUS_FUNCTION;
	}
	return NULL;
}

/*
 * targets_headers_problem: why one of a target's request headers cannot be
 * sent, or NULL. The reason names the header, never its value.
 */
static char *
targets_headers_problem(const char *target, char **headers, int n)
{
	char		err[256];
	int			i;

	for (i = 0; i < n; i++)
		if (gridha_http_check_header(headers[i], err, sizeof(err)) != 0)
			return psprintf("request_headers of target \"%s\": %s", target, err);
	return NULL;
}

/*
 * targets_judge: fills submit_kind, status_kind and unusable of a target
 * whose sources are set.
 */
static void
targets_judge(GridhaTarget *t)
{
	char	   *problem;

	problem = targets_side_problem(t->name, true, t->submit_url, t->submit_function,
								   t->submit_signature, t->submit_why, &t->submit_kind);
	if (problem == NULL && t->submit_kind == 0)
		problem = psprintf("target \"%s\" has neither submit_url nor submit_function", t->name);
	if (problem == NULL)
		problem = targets_side_problem(t->name, false, t->status_url, t->status_function,
									   t->status_signature, t->status_why, &t->status_kind);
	if (problem == NULL)
		problem = targets_headers_problem(t->name, t->headers, t->n_headers);
	t->unusable = problem;
}

static void
targets_invalidate(void)
{
	targets_gen++;
}

static void
targets_relcache_callback(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == targets_relid)
		targets_invalidate();
}

static void
targets_syscache_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	targets_invalidate();
}

static char *
targets_text_col(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/*
 * targets_owner: the owner of gridha.targets (the extension's owner).
 */
static Oid
targets_owner(Oid relid)
{
	HeapTuple	tup;
	Oid			owner;

	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "gridha: cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * gridha_targets_refresh: judges every target again when gridha.targets
 * or a function changed since it last did. Inside SPI, and not inside a
 * GridhaRows command: the hand-out calls it before its pick.
 */
void
gridha_targets_refresh(void)
{
	MemoryContext old;
	uint64		gen;
	bool		as_text;
	Oid			owner = InvalidOid;
	Oid			save_userid;
	int			save_sec_context;
	SPITupleTable *rows;
	int			i;

	if (!targets_callbacks)
	{
		gridha_on_relcache(targets_relcache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(PROCOID, targets_syscache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(NAMESPACEOID, targets_syscache_callback, (Datum) 0);
		targets_cxt = AllocSetContextCreate(TopMemoryContext, "gridha targets",
											ALLOCSET_SMALL_SIZES);
		targets_callbacks = true;
	}
	if (targets_loaded_gen == targets_gen)
		return;

	/*
	 * An invalidation that arrives while we read marks the result stale.
	 * The rows are read with a snapshot taken now, not the statement's: an
	 * invalidation this transaction took in after its snapshot would
	 * otherwise leave the rows it announced unseen until the next change.
	 */
	gen = targets_gen;
	targets_relid = get_relname_relid("targets", get_namespace_oid("gridha", false));

	/*
	 * The functions are signatures (text) in 1.3, OIDs (regprocedure) in
	 * 1.2 (generation.c says which). Asked under the lock the statement
	 * takes, whose invalidations make the generation be read again, so
	 * that an ALTER EXTENSION UPDATE cannot change the type in between.
	 */
	as_text = true;
	if (OidIsValid(targets_relid))
	{
		LockRelationOid(targets_relid, AccessShareLock);
		as_text = gridha_sql_generation() != GRIDHA_SQL_1_2;
		if (as_text)
			owner = targets_owner(targets_relid);
	}

	/*
	 * 1.3's load runs as the owner of gridha.targets, which no role but it
	 * may execute: a worker fills its cache as its own role, outside any
	 * call of the API (an error restores the role with the transaction).
	 */
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	if (OidIsValid(owner))
		SetUserIdAndSecContext(owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	PushActiveSnapshot(GetLatestSnapshot());
	gridha_exec_served(as_text ? &targets_load_call : &targets_load_oid_stmt, NULL, NULL, true);
	PopActiveSnapshot();
	SetUserIdAndSecContext(save_userid, save_sec_context);
	rows = SPI_tuptable;

	MemoryContextReset(targets_cxt);
	old = MemoryContextSwitchTo(targets_cxt);
	ntargets = (int) SPI_processed;
	targets = palloc0(sizeof(GridhaTarget) * Max(ntargets, 1));
	targets_any_limited = false;
	for (i = 0; i < ntargets; i++)
	{
		HeapTuple	tup = rows->vals[i];
		TupleDesc	desc = rows->tupdesc;
		GridhaTarget *t = &targets[i];
		bool		isnull;
		Datum		d;
		char	   *header_problem;

		t->name = targets_text_col(tup, desc, 1);
		t->submit_url = targets_text_col(tup, desc, 2);
		t->status_url = targets_text_col(tup, desc, 4);
		if (as_text)
		{
			t->submit_signature = targets_text_col(tup, desc, 3);
			if (t->submit_signature != NULL)
				t->submit_function = targets_resolve(t->submit_signature, &t->submit_why);
			t->status_signature = targets_text_col(tup, desc, 5);
			if (t->status_signature != NULL)
				t->status_function = targets_resolve(t->status_signature, &t->status_why);
		}
		else
		{
			d = SPI_getbinval(tup, desc, 3, &isnull);
			t->submit_function = isnull ? InvalidOid : DatumGetObjectId(d);
			d = SPI_getbinval(tup, desc, 5, &isnull);
			t->status_function = isnull ? InvalidOid : DatumGetObjectId(d);
		}
		t->rate_limited = DatumGetBool(SPI_getbinval(tup, desc, 6, &isnull));
		targets_any_limited |= t->rate_limited;
		d = SPI_getbinval(tup, desc, 7, &isnull);
		if (!isnull)
		{
			Datum	   *elems;
			bool	   *nulls;
			int			k;

			deconstruct_array(DatumGetArrayTypeP(d), INT4OID, 4, true, TYPALIGN_INT,
							  &elems, &nulls, &t->n_reject_codes);
			t->reject_codes = palloc(sizeof(int) * Max(t->n_reject_codes, 1));
			for (k = 0; k < t->n_reject_codes; k++)
				t->reject_codes[k] = DatumGetInt32(elems[k]);
		}
		d = SPI_getbinval(tup, desc, 8, &isnull);
		if (!isnull)
		{
			Datum	   *elems;
			bool	   *nulls;
			int			k;

			deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT,
							  &elems, &nulls, &t->n_headers);
			t->headers = palloc(sizeof(char *) * Max(t->n_headers, 1));
			for (k = 0; k < t->n_headers; k++)
				t->headers[k] = nulls[k] ? "" : TextDatumGetCString(elems[k]);
		}
		header_problem = targets_text_col(tup, desc, 9);
		targets_judge(t);
		if (header_problem != NULL && t->unusable == NULL)
			t->unusable = psprintf("target \"%s\": %s", t->name, header_problem);
	}
	MemoryContextSwitchTo(old);
	targets_loaded_gen = gen;
}

/*
 * gridha_target_get: the judged target of this name, NULL when there is
 * none. Valid until the next gridha_targets_refresh.
 */
const GridhaTarget *
gridha_target_get(const char *name)
{
	int			i;

	for (i = 0; i < ntargets; i++)
		if (strcmp(targets[i].name, name) == 0)
			return &targets[i];
	return NULL;
}

/*
 * gridha_target_servable: whether an instance that serves these kinds can
 * serve the target: it is usable, and the instance serves its submit kind
 * and its status kind (if any). GRIDHA_SERVES_ANY serves everything.
 */
bool
gridha_target_servable(const GridhaTarget *t, int serves)
{
	if (serves == GRIDHA_SERVES_ANY)
		return true;
	if (t == NULL || t->unusable != NULL)
		return false;
	return (serves & t->submit_kind) != 0 &&
		(t->status_kind == 0 || (serves & t->status_kind) != 0);
}

/*
 * gridha_targets_servable_names: a text[] of the targets an instance that
 * serves these kinds can serve (for the claim statements). After
 * gridha_targets_refresh.
 */
Datum
gridha_targets_servable_names(int serves)
{
	Datum	   *names = palloc(sizeof(Datum) * Max(ntargets, 1));
	int			n = 0;
	int			i;

	for (i = 0; i < ntargets; i++)
		if (gridha_target_servable(&targets[i], serves))
			names[n++] = CStringGetTextDatum(targets[i].name);
	return gridha_text_array(names, n);
}

/*
 * gridha_targets_any_limited: whether some target has a rate limit, as of
 * the last gridha_targets_refresh.
 */
bool
gridha_targets_any_limited(void)
{
	return targets_any_limited;
}

/*
 * gridha_targets_generation: changes whenever the judged targets may have:
 * a caller that remembers it knows when to look at its services again.
 */
uint64
gridha_targets_generation(void)
{
	return targets_loaded_gen;
}

/*
 * targets_warn: a WARNING about a target's batches, at most once per target
 * and reason per TARGETS_WARN_EVERY_MS in this backend, so a broken target
 * logs a line a minute, not one per batch.
 */
static void
targets_warn(const char *target, const char *reason, const char *hint)
{
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;
	TargetsWarned *w = NULL;
	MemoryContext old;

	foreach(lc, targets_warned)
	{
		TargetsWarned *c = lfirst(lc);

		if (strcmp(c->target, target) == 0 && strcmp(c->reason, reason) == 0)
		{
			w = c;
			break;
		}
	}
	if (w != NULL && !TimestampDifferenceExceeds(w->at, now, TARGETS_WARN_EVERY_MS))
		return;
	if (w == NULL)
	{
		old = MemoryContextSwitchTo(TopMemoryContext);
		w = palloc(sizeof(TargetsWarned));
		w->target = pstrdup(target);
		w->reason = pstrdup(reason);
		targets_warned = lappend(targets_warned, w);
		MemoryContextSwitchTo(old);
	}
	w->at = now;
	ereport(WARNING,
			(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
			 errmsg("gridha: batches of target \"%s\" are delayed: %s", target, reason),
			 errhint("%s", hint)));
}

/*
 * gridha_target_warn: a target cannot be used (its row is wrong, its
 * function is gone): the fix is in gridha.targets.
 */
void
gridha_target_warn(const char *target, const char *reason)
{
	targets_warn(target, reason,
				 "Fix the row of gridha.targets; the batches are handed out again once it can be used. This warning is repeated at most once a minute.");
}

/*
 * gridha_target_warn_answer: the target's ledger answered a POST with a
 * code that delays the batch (not a final refusal): nothing is wrong with
 * the row; the batch is submitted again after its backoff.
 */
void
gridha_target_warn_answer(const char *target, const char *reason)
{
	targets_warn(target, reason,
				 "The ledger's answer delays the batch: it is submitted again after its backoff. This warning is repeated at most once a minute per target and answer.");
}

/*
 * A failure of a target's ledger this backend counts (gridha_target_note):
 * what failed, how often since it was last logged, and the last detail.
 */
typedef struct TargetsNoted
{
	char	   *target;
	char	   *what;
	int64		count;			/* since last logged */
	int64		total;			/* since the backend started */
	TimestampTz logged_at;
	TimestampTz first_at;		/* of the failures counted in count */
	char		detail[128];
} TargetsNoted;

static List *targets_noted = NIL;

/*
 * targets_note_log: the summary line of a noted failure: the first one as
 * it is, later ones as a count over the time since the last line.
 */
static void
targets_note_log(TargetsNoted *n, TimestampTz now, bool first)
{
	if (first)
		ereport(LOG,
				(errmsg("gridha worker: target \"%s\": %s: %s", n->target, n->what, n->detail),
				 errdetail("Repeats are counted and logged at most once a minute.")));
	else
		ereport(LOG,
				(errmsg("gridha worker: target \"%s\": %s: " INT64_FORMAT " times in the last %ld s (last: %s)",
						n->target, n->what, n->count,
						(long) ((now - n->logged_at) / USECS_PER_SEC), n->detail)));
	n->logged_at = now;
	n->count = 0;
}

/*
 * targets_note_detail: a noted failure's last detail, cut to whole
 * characters (a line of the log, valid in the database's encoding).
 */
static void
targets_note_detail(TargetsNoted *n, const char *detail)
{
	int			len;

	if (detail == NULL)
		detail = "";
	len = pg_mbcliplen(detail, strlen(detail), sizeof(n->detail) - 1);
	memcpy(n->detail, detail, len);
	n->detail[len] = '\0';
}

/*
 * gridha_target_note: one more failure of what (a short phrase: "status
 * URL unreachable") for a target. The first is logged at once; repeats
 * are counted and logged as one line with the count at most once every
 * TARGETS_WARN_EVERY_MS (by this call or by gridha_target_notes_flush), so
 * a ledger that fails however often makes a few lines a minute. Returns
 * the failures of this kind and target since the backend started.
 */
int64
gridha_target_note(const char *target, const char *what, const char *detail)
{
	TimestampTz now = GetCurrentTimestamp();
	TargetsNoted *n = NULL;
	ListCell   *lc;

	foreach(lc, targets_noted)
	{
		TargetsNoted *c = lfirst(lc);

		if (strcmp(c->target, target) == 0 && strcmp(c->what, what) == 0)
		{
			n = c;
			break;
		}
	}
	if (n == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		n = palloc0(sizeof(TargetsNoted));
		n->target = pstrdup(target);
		n->what = pstrdup(what);
		targets_noted = lappend(targets_noted, n);
		MemoryContextSwitchTo(old);
		targets_note_detail(n, detail);
		n->total = 1;
		targets_note_log(n, now, true);
		return n->total;
	}
	if (n->count == 0)
		n->first_at = now;
	n->count++;
	n->total++;
	targets_note_detail(n, detail);
	if (TimestampDifferenceExceeds(n->logged_at, now, TARGETS_WARN_EVERY_MS))
		targets_note_log(n, now, false);
	return n->total;
}

/*
 * gridha_target_notes_flush: logs the count of every noted failure whose
 * last line is older than TARGETS_WARN_EVERY_MS, so repeats that stopped
 * are still told once.
 */
void
gridha_target_notes_flush(void)
{
	TimestampTz now;
	ListCell   *lc;

	if (targets_noted == NIL)
		return;
	now = GetCurrentTimestamp();
	foreach(lc, targets_noted)
	{
		TargetsNoted *n = lfirst(lc);

		if (n->count > 0 && TimestampDifferenceExceeds(n->logged_at, now, TARGETS_WARN_EVERY_MS))
			targets_note_log(n, now, false);
	}
}

/*
 * gridha_serves_parse: the kinds of a text[] of kind words (NULL: ANY).
 * An unknown word, or a NULL in the array, is refused with 22023.
 */
int
gridha_serves_parse(Datum kinds)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			serves = 0;
	int			i;
	int			k;

	deconstruct_array(DatumGetArrayTypeP(kinds), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	for (i = 0; i < n; i++)
	{
		char	   *word;
		bool		known = false;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("serves must not contain NULL")));
		word = TextDatumGetCString(elems[i]);
		for (k = 0; k < lengthof(targets_kind_words); k++)
			if (strcmp(word, targets_kind_words[k]) == 0)
			{
				serves |= 1 << k;
				known = true;
			}
		if (!known)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown target kind \"%s\"", word),
					 errhint("Use submit_url, submit_function, status_url and status_function.")));
	}
	return serves;
}

/*
 * gridha_serves_datum: the text[] of the kind words of a mask.
 */
Datum
gridha_serves_datum(int serves)
{
	Datum		words[lengthof(targets_kind_words)];
	int			n = 0;
	int			k;

	for (k = 0; k < lengthof(targets_kind_words); k++)
		if (serves & (1 << k))
			words[n++] = CStringGetTextDatum(targets_kind_words[k]);
	return gridha_text_array(words, n);
}

/*
 * targets_check_headers: the request_headers of a row being written: a
 * JSON object of string values, each header one a ledger can be sent.
 */
static void
targets_check_headers(const char *target, Jsonb *headers)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *key = NULL;
	char		err[256];

	if (!JB_ROOT_IS_OBJECT(headers))
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
				 errmsg("request_headers of target \"%s\" is not a JSON object", target),
				 errhint("Write it as {\"Authorization\": \"Bearer ...\"}.")));
	it = JsonbIteratorInit(&headers->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			key = pnstrdup(v.val.string.val, v.val.string.len);
		else if (tok == WJB_VALUE)
		{
			char	   *line;

			if (v.type != jbvString)
				ereport(ERROR,
						(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
						 errmsg("request header \"%s\" of target \"%s\" is not a string", key, target)));
			line = psprintf("%s: %.*s", key, v.val.string.len, v.val.string.val);
			if (memchr(v.val.string.val, '\0', v.val.string.len) != NULL ||
				gridha_http_check_header(line, err, sizeof(err)) != 0)
				ereport(ERROR,
						(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
						 errmsg("invalid request header of target \"%s\": %s", target,
								memchr(v.val.string.val, '\0', v.val.string.len) ? "a NUL in a value" : err)));
		}
	}
}

/*
 * targets_check_reject_codes: HTTP codes 100 to 599, no NULL.
 */
static void
targets_check_reject_codes(const char *target, ArrayType *codes)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			i;

	if (ARR_NDIM(codes) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
				 errmsg("reject_codes of target \"%s\" must be a one-dimensional array", target)));
	deconstruct_array(codes, INT4OID, 4, true, TYPALIGN_INT, &elems, &nulls, &n);
	for (i = 0; i < n; i++)
		if (nulls[i] || DatumGetInt32(elems[i]) < 100 || DatumGetInt32(elems[i]) > 599)
			ereport(ERROR,
					(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
					 errmsg("reject_codes of target \"%s\" must hold HTTP status codes (100 to 599)", target),
					 errhint("For example '{400,422}'; 2xx codes accept, whatever the list says.")));
}

/*
 * targets_interval_us: an interval in microseconds, months of 30 days and
 * days of 24 hours, as PostgreSQL compares intervals.
 */
static double
targets_interval_us(Interval *iv)
{
	return (double) iv->time + ((double) iv->day + (double) iv->month * 30.0) * (double) USECS_PER_DAY;
}

/*
 * targets_refuse_null, targets_refuse_check: a row that breaks a NOT NULL
 * or CHECK constraint of gridha.targets, refused with PostgreSQL's own
 * SQLSTATE and message, but without its detail: see targets_check_row.
 */
static void
targets_refuse_null(const char *column)
{
	ereport(ERROR,
			(errcode(ERRCODE_NOT_NULL_VIOLATION),
			 errmsg("null value in column \"%s\" of relation \"targets\" violates not-null constraint",
					column),
			 errdetail("The row is not shown: it may hold credentials (request_headers).")));
}

static void
targets_refuse_check(const char *constraint)
{
	ereport(ERROR,
			(errcode(ERRCODE_CHECK_VIOLATION),
			 errmsg("new row for relation \"targets\" violates check constraint \"%s\"", constraint),
			 errdetail("The row is not shown: it may hold credentials (request_headers).")));
}

/*
 * targets_check_row: what the table's constraints say of a row, said
 * first. A constraint that fails reports the whole row ("Failing row
 * contains ...") to the client and in the server log, and the row holds
 * the target's request headers: credentials. So every NOT NULL and CHECK
 * constraint of gridha.targets is checked here, before PostgreSQL checks
 * it, with the same SQLSTATE and message and no row.
 */
static void
targets_check_row(HeapTuple tuple, TupleDesc desc)
{
	/* 1000 years, the longest span a rate limit may cover */
	const double limit_us = 12000.0 * 30.0 * (double) USECS_PER_DAY;
	bool		isnull;
	Datum		d;
	Interval   *iv = NULL;
	int64		burst;
	int			attno;

	d = heap_getattr(tuple, SPI_fnumber(desc, "target"), desc, &isnull);
	if (isnull)
		targets_refuse_null("target");
	if (VARSIZE_ANY_EXHDR(DatumGetTextPP(d)) == 0)
		targets_refuse_check("targets_target_check");
	d = heap_getattr(tuple, SPI_fnumber(desc, "rate_burst"), desc, &isnull);
	if (isnull)
		targets_refuse_null("rate_burst");
	burst = DatumGetInt32(d);
	d = heap_getattr(tuple, SPI_fnumber(desc, "rate_interval"), desc, &isnull);
	if (!isnull)
	{
		iv = DatumGetIntervalP(d);
		if (targets_interval_us(iv) <= 0)
			targets_refuse_check("targets_rate_interval_check");
	}
	if (burst < 0)
		targets_refuse_check("targets_rate_burst_check");
	if (burst > 1000000 ||
		(iv != NULL && (targets_interval_us(iv) > limit_us ||
						targets_interval_us(iv) * (double) burst > limit_us)))
		targets_refuse_check("targets_rate_span");
	attno = SPI_fnumber(desc, "reject_codes");
	if (attno > 0)
	{
		(void) heap_getattr(tuple, attno, desc, &isnull);
		if (isnull)
			targets_refuse_null("reject_codes");
	}
}

/*
 * targets_written_function: the function a row being written names in a
 * text column (1.3), resolved as a regprocedure cast in the writer's
 * statement would resolve it (the writer's search_path; the same errors:
 * 42883 for a function that does not exist, 22P02 or 42704 for a
 * malformed name or an unknown type). A bare OID is refused (RG007): it
 * names nothing once the cluster is upgraded or restored.
 */
static Oid
targets_written_function(const char *target, const char *column, const char *written)
{
	if (targets_bare_oid(written))
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
				 errmsg("%s of target \"%s\" must name a function with its argument types", column, target),
				 errdetail("\"%s\" would be taken as an OID, and an OID does not survive pg_upgrade nor a restore.", written),
				 errhint("Write it as myschema.f(text, text, bytea, bigint).")));
	return DatumGetObjectId(DirectFunctionCall1(regprocedurein, CStringGetDatum(written)));
}

/*
 * targets_column_unchanged: whether an UPDATE leaves the column as it was.
 */
static bool
targets_column_unchanged(TriggerData *trigdata, TupleDesc desc, int attno)
{
	bool		oldnull;
	bool		newnull;
	Datum		o = heap_getattr(trigdata->tg_trigtuple, attno, desc, &oldnull);
	Datum		n = heap_getattr(trigdata->tg_newtuple, attno, desc, &newnull);

	if (oldnull || newnull)
		return oldnull == newnull;
	return datumIsEqual(o, n, false, -1);
}

PG_FUNCTION_INFO_V1(gridha_targets_check);

/*
 * gridha_targets_check: BEFORE INSERT OR UPDATE trigger on gridha.targets:
 * refuses what the table's constraints would (targets_check_row, without
 * the row in the message), and with RG007 a row no instance could use (but
 * for one without a submit source: external instances may submit by their
 * own means). In 1.3 it resolves the functions written (text) with the
 * writer's search_path, and stores each as its signature.
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
	char	   *url;
	Oid			fn;
	char	   *problem;
	int			kind;
	int			attno;
	int			side;
	Datum	   *new_values;
	bool	   *new_nulls;
	bool	   *replace;
	bool		any_replaced = false;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("gridha_internal.targets_check() must be called as a trigger")));

	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ? trigdata->tg_newtuple : trigdata->tg_trigtuple;
	desc = trigdata->tg_relation->rd_att;
	targets_check_row(tuple, desc);
	new_values = palloc0(sizeof(Datum) * desc->natts);
	new_nulls = palloc0(sizeof(bool) * desc->natts);
	replace = palloc0(sizeof(bool) * desc->natts);

	d = heap_getattr(tuple, SPI_fnumber(desc, "target"), desc, &isnull);
	target = isnull ? "" : TextDatumGetCString(d);
	if (strlen(target) > GRIDHA_MAX_ID_BYTES)
	{
		bool		renamed = true;

		if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		{
			d = heap_getattr(trigdata->tg_trigtuple, SPI_fnumber(desc, "target"), desc, &isnull);
			renamed = isnull || strcmp(TextDatumGetCString(d), target) != 0;
		}
		if (renamed)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("target name is too long"),
					 errdetail("It has %zu bytes; an id has at most %d.",
							   strlen(target), GRIDHA_MAX_ID_BYTES)));
	}
	for (side = 0; side < 2; side++)
	{
		const char *fn_col = side == 0 ? "submit_function" : "status_function";
		int			fn_attno = SPI_fnumber(desc, fn_col);

		d = heap_getattr(tuple, SPI_fnumber(desc, side == 0 ? "submit_url" : "status_url"),
						 desc, &isnull);
		url = isnull ? NULL : TextDatumGetCString(d);
		d = heap_getattr(tuple, fn_attno, desc, &isnull);
		if (isnull)
			fn = InvalidOid;
		else if (TupleDescAttr(desc, fn_attno - 1)->atttypid == TEXTOID &&
				 TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) &&
				 targets_column_unchanged(trigdata, desc, fn_attno))
		{
			/*
			 * 1.3: a signature the row already stored (an UPDATE of other
			 * columns, a rate change say): judged as the workers judge it,
			 * never refused for a function dropped since (its batches wait,
			 * delayed, with the reason, until the row names another)
			 */
			char	   *why = NULL;

			fn = targets_resolve(TextDatumGetCString(d), &why);
			if (!OidIsValid(fn))
				continue;
		}
		else if (TupleDescAttr(desc, fn_attno - 1)->atttypid == TEXTOID)
		{
			/* 1.3: a signature, resolved here and stored as signature */
			char	   *written = TextDatumGetCString(d);
			char	   *signature;

			fn = targets_written_function(target, fn_col, written);
			signature = targets_signature_of(fn);
			if (strcmp(signature, written) != 0)
			{
				new_values[fn_attno - 1] = CStringGetTextDatum(signature);
				replace[fn_attno - 1] = true;
				any_replaced = true;
			}
		}
		else
			fn = DatumGetObjectId(d);
		problem = targets_side_problem(target, side == 0, url, fn, NULL, NULL, &kind);
		if (problem != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
					 errmsg("%s", problem),
					 url != NULL && OidIsValid(fn) ? errhint("Set one of them to NULL.") :
					 url != NULL ?
					 (side == 0 ?
					  errhint("Use an http:// or https:// URL; {service_id} and {batch_id} are filled in.") :
					  errhint("Use an http:// or https:// URL containing {batch_ids}, which is filled in with the comma-separated ids.")) :
					 errhint("Create the function first, with exactly that signature.")));
	}

	/* columns of gridha 1.1 */
	attno = SPI_fnumber(desc, "request_headers");
	if (attno > 0)
	{
		d = heap_getattr(tuple, attno, desc, &isnull);
		if (!isnull)
			targets_check_headers(target, DatumGetJsonbP(d));
	}
	attno = SPI_fnumber(desc, "reject_codes");
	if (attno > 0)
	{
		d = heap_getattr(tuple, attno, desc, &isnull);
		if (!isnull)
			targets_check_reject_codes(target, DatumGetArrayTypeP(d));
	}
	if (any_replaced)
		tuple = heap_modify_tuple(tuple, desc, new_values, new_nulls, replace);
	return PointerGetDatum(tuple);
}

PG_FUNCTION_INFO_V1(gridha_targets_rate_inval);

/*
 * gridha_targets_rate_inval: statement trigger targets_rate_inval on
 * gridha.targets: at commit, every backend judges its targets again (and
 * learns whether any is rate-limited).
 */
Datum
gridha_targets_rate_inval(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "gridha: targets_rate_inval must be called as a trigger");
	CacheInvalidateRelcacheByRelid(RelationGetRelid(trigdata->tg_relation));
	return PointerGetDatum(NULL);
}
