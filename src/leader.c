/*-------------------------------------------------------------------------
 *
 * leader.c
 *		Leader leases for singleton duties and the keyed maintenance tick:
 *		what of them needs C. Their statements are functions of the 1.3
 *		install script (sql/gridha--1.3.sql, section 7: gridha.lead,
 *		renew_lead, resign_lead, run_maintenance, prune_batches and the
 *		gridha_internal functions they call, lease_take, maintenance_tick,
 *		prune_step, maintenance_poll, lease_resign); this file holds the
 *		hand-out's poll duty (when it runs and its subtransaction) and the
 *		C helpers those functions call. On SQL 1.2 (until ALTER EXTENSION
 *		gridha UPDATE) 1.2's own calls serve them: src/leader12.c (1.2's
 *		release_claims, src/claims12.c, resigns through it).
 *
 * Words (the script's section 7 says more):
 *   duty      the name of a singleton duty; each has one row in
 *             gridha.leases. Names that begin with "gridha." are gridha's
 *             own: lead and renew_lead refuse them (RG025), so a user's
 *             duty never shares a lease with gridha's. gridha's own duty
 *             is 'gridha.maintenance'.
 *   lease     who leads a duty, since when, and until when; it lasts
 *             gridha.soft_expiry from its last renewal, like a claim
 *   term      a counter per duty, incremented every time the leader
 *             changes; a lease is renewed only under the term it was
 *             taken with
 *   tick      one run of a duty's work, named by the start of its slot of
 *             the server clock (gridha.maintenance_interval), a row of
 *             gridha.maintenance_ticks keyed by (duty, tick)
 *   poll duty what every instance's hand-out (next_batch, next_batches)
 *             does at most once per gridha.prune_interval in its backend:
 *             gridha_internal.maintenance_poll, which takes gridha's
 *             maintenance lease when it is free or expired, and as its
 *             leader runs the tick when one is due and one prune step; so
 *             retention and the sweep of long-gone instances need no
 *             background worker and no caller of run_maintenance
 *
 * The poll duty runs in a subtransaction of the hand-out's: a failure of
 * its own (a lock timeout, say) is logged and undone, never the
 * hand-out's.
 *
 * On SQL 1.2 (before the update) 1.2's own code serves these calls, the
 * poll duty and the resignation (src/leader12.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common.h"
#include "counts.h"
#include "generation.h"
#include "instances.h"
#include "leader.h"
#include "leader12.h"
#include "spi_util.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "settings.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"


/* The prefix of the duty names gridha keeps for itself (SQL 1.3) */
#define LEADER_RESERVED_PREFIX "gridha."

/* gridha's own maintenance duty (SQL 1.3; 1.2 named it 'maintenance') */
#define LEADER_MAINTENANCE_DUTY LEADER_RESERVED_PREFIX "maintenance"

/* The poll duty: one call of the 1.3 script's function (SQL 1.3 only) */
static GridhaStatement leader_poll_stmt = {
	"SELECT gridha_internal.maintenance_poll($1)",
	1, {UUIDOID}
};

/*
 * The maintenance statements' backend state, kept here for the 1.3
 * script's functions (gridha_internal.prune_from, counts_check_due):
 *
 * Where this backend's next prune step starts in batches_created: after a
 * step that deleted its full chunk, the newest creation time it deleted;
 * after one that looked at all it may, the newest it looked at; so that
 * consecutive steps walk on instead of over the index entries of what the
 * previous ones deleted (dead until vacuum) or kept (batches not final).
 * -infinity after a step that reached the cutoff: then everything old is
 * looked at again, batches skipped as locked or not final yet included.
 */
static TimestampTz leader_prune_from = DT_NOBEGIN;

/* How often a leader's backend checks the service counts */
#define LEADER_COUNTS_EVERY_MS	(60 * 60 * 1000)

/* When this backend last checked them (0: never) */
static TimestampTz leader_counts_checked_at = 0;

/*
 * leader_refuse_reserved: RG025 for a user's duty named in gridha's own
 * namespace.
 */
static void
leader_refuse_reserved(text *duty)
{
	int			len = VARSIZE_ANY_EXHDR(duty);
	int			plen = strlen(LEADER_RESERVED_PREFIX);

	if (len >= plen && strncmp(VARDATA_ANY(duty), LEADER_RESERVED_PREFIX, plen) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_RESERVED_DUTY),
				 errmsg("duty \"%s\" is reserved for gridha", text_to_cstring(duty)),
				 errdetail("Duties whose names begin with \"%s\" are gridha's own; gridha's maintenance runs under \"%s\".",
						   LEADER_RESERVED_PREFIX, LEADER_MAINTENANCE_DUTY),
				 errhint("Name your duty otherwise; to run gridha's maintenance, call gridha.run_maintenance.")));
}

/*
 * leader_refuse_maintenance_name: run_maintenance runs, of the reserved
 * namespace, only gridha's own maintenance, 'gridha.maintenance' (the
 * default duty). 1.2's name of that duty, 'maintenance', is refused rather
 * than taken either way: as gridha's duty it would give one duty two
 * names, and as a user's duty of that name it would run gridha's
 * maintenance under a lease apart from the one the hand-outs' poll duty
 * takes, which is not what a 1.2 caller that names it means.
 */
static void
leader_refuse_maintenance_name(text *duty)
{
	char	   *name = text_to_cstring(duty);

	if (strcmp(name, "maintenance") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("gridha's maintenance duty is \"%s\", not \"maintenance\"",
						LEADER_MAINTENANCE_DUTY),
				 errdetail("Since gridha 1.3, \"maintenance\" is a name like any other for a user's duty, and gridha's own maintenance runs under \"%s\".",
						   LEADER_MAINTENANCE_DUTY),
				 errhint("Call gridha.run_maintenance(instance_id) without a duty, or name the duty \"%s\".",
						 LEADER_MAINTENANCE_DUTY)));
	if (strcmp(name, LEADER_MAINTENANCE_DUTY) != 0)
		leader_refuse_reserved(duty);
}

/* The poll duty's bound on any lock wait (a setting's text) */
#define LEADER_POLL_LOCK_TIMEOUT "50ms"

/* When this backend's hand-out may next run the poll duty (0: at once) */
static TimestampTz leader_poll_next = 0;

/* What the poll duty's step is given and gives back */
typedef struct LeaderPollStep
{
	Datum		instance_id;
	int64		pruned;			/* batches its prune step deleted */
} LeaderPollStep;

/*
 * leader_poll_step: the poll duty's work (run in a subtransaction): the
 * 1.3 script's gridha_internal.maintenance_poll, or SQL 1.2's own.
 */
static void
leader_poll_step(void *arg)
{
	LeaderPollStep *step = (LeaderPollStep *) arg;
	Datum		args[1];

	if (!gridha_sql_is_current())
	{
		step->pruned = gridha_leader12_poll_duty(step->instance_id);
		return;
	}
	args[0] = step->instance_id;
	gridha_exec(&leader_poll_stmt, args, NULL, false);
	step->pruned = gridha_col_int64(0, 1);
}

/*
 * gridha_leader_poll: the poll duty of a hand-out (see the words above),
 * at most once per gridha.prune_interval in this backend; when its prune
 * step found a full chunk (retention is behind) the next may come after a
 * tenth of that. Cheap otherwise: one clock read. Only in a READ COMMITTED
 * transaction (below). On SQL 1.3 its statements are the script's
 * (gridha_internal.maintenance_poll); on 1.2 it is 1.2's own
 * (src/leader12.c). Call it inside SPI, once the
 * hand-out's own rows are written. It never raises an error: a failure is
 * undone with its subtransaction and logged.
 */
void
gridha_leader_poll(Datum instance_id)
{
	TimestampTz now;
	LeaderPollStep step;
	ErrorData  *edata;

	/*
	 * Only under READ COMMITTED: in a REPEATABLE READ or SERIALIZABLE
	 * hand-out, the duty's reads and deletes could make the caller's own
	 * transaction fail to serialize. Such a caller's next plain call
	 * carries it.
	 */
	if (gridha_prune_interval_ms < 0 || IsolationUsesXactSnapshot())
		return;
	now = GetCurrentTimestamp();
	if (now < leader_poll_next)
		return;
	leader_poll_next = TimestampTzPlusMilliseconds(now, gridha_prune_interval_ms);

	/* never keep the hand-out waiting long: lock waits end soon */
	step.instance_id = instance_id;
	step.pruned = 0;
	edata = gridha_subxact_try(leader_poll_step, &step,
							   "lock_timeout", LEADER_POLL_LOCK_TIMEOUT, PGC_SUSET);
	if (edata != NULL)
	{
		ereport(LOG,
				(errmsg("gridha: the maintenance duty of a hand-out failed: %s", edata->message),
				 errdetail("It is tried again at the next hand-out after gridha.prune_interval.")));
		FreeErrorData(edata);
		return;
	}
	if (step.pruned >= gridha_prune_chunk)
		leader_poll_next = TimestampTzPlusMilliseconds(now, gridha_prune_interval_ms / 10);
}

/*
 * The C helpers of the 1.3 script's lease and maintenance functions: what
 * needs C (argument checks with their SQLSTATEs, the instance's ownership
 * check and touch with their cache, the settings, a lock no SQL function
 * can take, backend state). They are in gridha_internal, executable by
 * the extension's owner only; the functions that call them run as it.
 */

PG_FUNCTION_INFO_V1(gridha_lease_call);

/*
 * gridha_lease_call: SQL gridha_internal.lease_call(call, instance_id,
 * duty, n) -> bigint: the checks a lease or maintenance call makes before
 * it reads or writes, by the call's name, in the order the C functions of
 * 1.2 made them; errors name the call and the argument as the user wrote
 * them.
 *
 *   lead()             instance_id, a new duty's name, not reserved
 *                      (RG025), writable, the instance touched
 *   renew_lead()       instance_id, duty, n (the term) not null, not
 *                      reserved, writable, the instance checked
 *   resign_lead()      instance_id, duty, writable, the instance checked
 *   run_maintenance()  instance_id, duty, writable, gridha's duty or a
 *                      user's, the instance touched
 *   prune_batches()    n (max_batches) not negative, writable; returns
 *                      it, or gridha.prune_chunk for NULL
 *
 * A call that touched the instance ends with lease_done.
 */
Datum
gridha_lease_call(PG_FUNCTION_ARGS)
{
	char	   *call;
	Datum		instance_id;
	text	   *duty;

	if (PG_ARGISNULL(0))
		elog(ERROR, "gridha: lease_call needs the call's name");
	call = text_to_cstring(PG_GETARG_TEXT_PP(0));
	if (strcmp(call, "prune_batches()") == 0)
	{
		int64		limit = gridha_prune_chunk;

		if (!PG_ARGISNULL(3))
		{
			limit = PG_GETARG_INT64(3);
			if (limit < 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("max_batches must not be negative"),
						 errdetail("The value given was " INT64_FORMAT ".", limit)));
		}
		gridha_require_writable(call);
		PG_RETURN_INT64(limit);
	}

	instance_id = gridha_arg_uuid(fcinfo, 1, "instance_id");
	if (strcmp(call, "lead()") == 0)
	{
		duty = gridha_arg_new_id(fcinfo, 2, "duty");
		leader_refuse_reserved(duty);
	}
	else
		duty = gridha_arg_id(fcinfo, 2, "duty");
	if (strcmp(call, "renew_lead()") == 0)
	{
		if (PG_ARGISNULL(3))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("term must not be null")));
		leader_refuse_reserved(duty);
	}
	gridha_require_writable(call);
	if (strcmp(call, "run_maintenance()") == 0)
		leader_refuse_maintenance_name(duty);

	SPI_connect();
	if (strcmp(call, "lead()") == 0 || strcmp(call, "run_maintenance()") == 0)
		(void) gridha_instance_touch(instance_id);
	else
		gridha_instance_check(instance_id);
	SPI_finish();
	PG_RETURN_NULL();
}

PG_FUNCTION_INFO_V1(gridha_lease_done);

/*
 * gridha_lease_done: SQL gridha_internal.lease_done(instance_id): the
 * write to the instance's row that its touch left for the end of the call
 * (instances.c), if any.
 */
Datum
gridha_lease_done(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0))
		PG_RETURN_VOID();
	SPI_connect();
	gridha_instance_write_key(PG_GETARG_DATUM(0));
	SPI_finish();
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(gridha_lease_settings);

/*
 * gridha_lease_settings: SQL gridha_internal.lease_settings() -> (soft_ms,
 * renew_ms, interval_ms, retention_s, prune_chunk, sweep_after_s): the
 * settings the lease and maintenance functions apply, as applied
 * (gridha_timing).
 */
Datum
gridha_lease_settings(PG_FUNCTION_ARGS)
{
	GridhaTiming t = gridha_timing();
	TupleDesc	tupdesc;
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "gridha: lease_settings must return a record");
	tupdesc = BlessTupleDesc(tupdesc);
	values[0] = Int64GetDatum(t.soft_ms);
	values[1] = Int64GetDatum(t.renew_ms);
	values[2] = Int64GetDatum((int64) gridha_maintenance_interval_ms);
	values[3] = Int64GetDatum((int64) gridha_retention_s);
	values[4] = Int64GetDatum((int64) gridha_prune_chunk);
	values[5] = Int64GetDatum((int64) gridha_sweep_instances_after_s);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

PG_FUNCTION_INFO_V1(gridha_lease_trylock);

/*
 * gridha_lease_trylock: SQL gridha_internal.lease_trylock(duty) ->
 * boolean: the duty's lock, taken for this transaction without waiting;
 * false when another transaction holds it. The lock is a userlock
 * (common.h) keyed by a hash of the duty's name: no SQL function a user
 * may call can take it, so no role without gridha rights can hold it and
 * keep every hand-out's duty from the lease (1.2 took an advisory lock,
 * which any role may hold with pg_advisory_lock). Two duties whose names
 * hash alike only make a hand-out skip its duty once.
 */
Datum
gridha_lease_trylock(PG_FUNCTION_ARGS)
{
	text	   *duty;
	LOCKTAG		tag;
	uint32		h;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(false);
	duty = PG_GETARG_TEXT_PP(0);
	h = DatumGetUInt32(hash_any((const unsigned char *) VARDATA_ANY(duty), VARSIZE_ANY_EXHDR(duty)));
	GRIDHA_USERLOCK_TAG(tag, h, GRIDHA_LEADER_TAG);
	PG_RETURN_BOOL(LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL);
}

PG_FUNCTION_INFO_V1(gridha_prune_from);

/*
 * gridha_prune_from: SQL gridha_internal.prune_from() -> timestamptz:
 * where this backend's next prune step starts (see leader_prune_from).
 */
Datum
gridha_prune_from(PG_FUNCTION_ARGS)
{
	PG_RETURN_TIMESTAMPTZ(leader_prune_from);
}

PG_FUNCTION_INFO_V1(gridha_prune_from_set);

/*
 * gridha_prune_from_set: SQL gridha_internal.prune_from_set(timestamptz):
 * where the next prune step starts; NULL: -infinity.
 */
Datum
gridha_prune_from_set(PG_FUNCTION_ARGS)
{
	leader_prune_from = PG_ARGISNULL(0) ? DT_NOBEGIN : PG_GETARG_TIMESTAMPTZ(0);
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(gridha_counts_check_due);

/*
 * gridha_counts_check_due: SQL gridha_internal.counts_check_due() ->
 * boolean: whether this backend checks the service counts now (true at
 * its first call, then once an hour), and if so notes the check. The
 * check reads every claim row (50-70 ms at 200,000 services); a count
 * gone wrong strands no service meanwhile (claims.c takes free work
 * whatever the share), it only skews the shares. Not due in a
 * transaction that changed the counts and has not written them yet
 * (counts.c writes them at its commit): the check would read its services
 * but not their counts, repair the difference, and the commit would then
 * count them again (run_maintenance called after an enqueue of a new
 * service in one transaction). Such a backend checks at a later tick.
 */
Datum
gridha_counts_check_due(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();

	if (leader_counts_checked_at != 0 &&
		!TimestampDifferenceExceeds(leader_counts_checked_at, now, LEADER_COUNTS_EVERY_MS))
		PG_RETURN_BOOL(false);
	/* this transaction's own count changes are not written yet: later */
	if (gridha_counts_pending())
		PG_RETURN_BOOL(false);
	leader_counts_checked_at = now;
	PG_RETURN_BOOL(true);
}
