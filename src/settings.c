/*-------------------------------------------------------------------------
 *
 * settings.c
 *		Every gridha.* setting: its variable and its definition, in the
 *		order of docs/configuration.md's table (test/t/070_docs.pl
 *		checks that they agree row for row), and the claim timings as they
 *		are applied (gridha_timing).
 *
 * The SQL API works without shared_preload_libraries: the library is then
 * loaded by the first gridha function a session calls, and any gridha.*
 * value set before that (ALTER SYSTEM, ALTER DATABASE, SET) is taken over.
 * The claim timings are PGC_SUSET: they decide when one instance may take
 * another's work, so only a superuser (or ALTER SYSTEM / ALTER DATABASE)
 * sets them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "settings.h"
#include "tables.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

/* Claims */
int			gridha_soft_expiry_ms = 30 * 1000;
int			gridha_hard_expiry_ms = 3 * 60 * 1000;
int			gridha_renew_interval_ms = 10 * 1000;
bool		gridha_balance_claims = true;
int			gridha_probe_interval_ms = 1000;
bool		gridha_session_liveness = true;
int			gridha_unknown_instance = GRIDHA_UNKNOWN_INSTANCE_REGISTER;

/* gridha.unknown_instance's words */
static const struct config_enum_entry unknown_instance_options[] = {
	{"register", GRIDHA_UNKNOWN_INSTANCE_REGISTER, false},
	{"refuse", GRIDHA_UNKNOWN_INSTANCE_REFUSE, false},
	{NULL, 0, false}
};

/* Background workers */
int			gridha_workers = 0;
char	   *gridha_database = NULL;
char	   *gridha_worker_role = NULL;
int			gridha_naptime_ms = 1000;
int			gridha_submit_timeout_ms = 15000;
int			gridha_monitor_interval_ms = 500;
int			gridha_worker_inflight = 64;
int			gridha_worker_connect_rate = 200;
int			gridha_worker_lock_timeout_ms = 5000;
int			gridha_worker_statement_timeout_ms = 60000;
int			gridha_status_url_max_length = 2048;
int			gridha_status_omitted_limit = 5;

/* Leader leases, maintenance, ID windows; the default retention: 7 days */
#define RETENTION_DEFAULT_S (7 * 24 * 60 * 60)
int			gridha_maintenance_interval_ms = 60 * 1000;
int			gridha_retention_s = RETENTION_DEFAULT_S;
int			gridha_prune_interval_ms = 1000;
int			gridha_prune_chunk = 5000;
int			gridha_sweep_instances_after_s = 24 * 60 * 60;
int			gridha_id_block_size = 100;

/* Test builds only */
#ifdef GRIDHA_TEST_HOOKS
int			gridha_test_probe_pause = 0;
static int	gridha_test_relcache_fill = 0;
static int	gridha_test_relcache_filled = 0;

/*
 * gridha_test_relcache_fill_assign: takes the relcache callback slots the
 * setting asks for beyond those taken already (never gives any back).
 */
static void
gridha_test_relcache_fill_assign(int newval, void *extra)
{
	if (newval > gridha_test_relcache_filled && IsUnderPostmaster)
	{
		gridha_test_fill_relcache(newval - gridha_test_relcache_filled);
		gridha_test_relcache_filled = newval;
	}
}
#endif
#ifdef GRIDHA_LOCK_CHECK
static bool gridha_lock_check = true;
#endif

/*
 * gridha_settings_define: defines every gridha.* setting (from _PG_init).
 */
void
gridha_settings_define(void)
{
	DefineCustomIntVariable("gridha.soft_expiry",
							"Claim window: past it, an idle claim may be taken over.",
							"A claim whose soft expiry has passed is taken by another instance when none of its batches is submitting.",
							&gridha_soft_expiry_ms,
							30 * 1000, 10, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.hard_expiry",
							"Past it, a claim is taken over even in the middle of a submission.",
							"Never shorter than gridha.soft_expiry; a smaller value acts as gridha.soft_expiry.",
							&gridha_hard_expiry_ms,
							3 * 60 * 1000, 10, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.renew_interval",
							"How often an instance renews its claims and looks for more.",
							"Must stay below gridha.soft_expiry; a larger value acts as half of gridha.soft_expiry.",
							&gridha_renew_interval_ms,
							10 * 1000, 1, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("gridha.balance_claims",
							 "Each instance claims about its fair share of the services.",
							 "When off, an instance claims every service it can.",
							 &gridha_balance_claims,
							 true,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.probe_interval",
							"How often a busy instance's hand-out looks whether it fell below its share or another instance's session ended.",
							"Between its claim cycles; -1: only at its claim cycles (gridha.renew_interval), which makes a hand-out's work independent of the clock (test/bench/instructions.sh).",
							&gridha_probe_interval_ms,
							1000, -1, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("gridha.session_liveness",
							 "An instance's claims are taken over as soon as its database session ends.",
							 "Only claims with nothing submitting, as at soft expiry. Turn it off for a client behind a connection pool that does not keep one session per instance.",
							 &gridha_session_liveness,
							 true,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("gridha.unknown_instance",
							 "What a call that names an instance id unknown to gridha.instances does.",
							 "register: the id becomes a new instance, owned by the calling role (as up to 1.2); refuse: the call fails with RG024 and changes nothing, so only register_instance and the workers create instances.",
							 &gridha_unknown_instance,
							 GRIDHA_UNKNOWN_INSTANCE_REGISTER,
							 unknown_instance_options,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	/*
	 * Read once at server start, and used only when gridha is preloaded. A
	 * library loaded later may not define PGC_POSTMASTER settings, so there
	 * they are defined as PGC_SIGHUP over storage of their own, which
	 * nothing reads: the prefix stays reserved (MarkGUCPrefixReserved) and a
	 * postgresql.conf that names them draws no WARNING from every session
	 * (issue 40), while the workers' variables keep their defaults.
	 */
	{
		static int	unloaded_workers = 0;
		static char *unloaded_database = NULL;
		static char *unloaded_worker_role = NULL;
		bool		preloading = process_shared_preload_libraries_in_progress;
		GucContext	context = preloading ? PGC_POSTMASTER : PGC_SIGHUP;

		DefineCustomIntVariable("gridha.workers",
								"Background-worker instances started with the server.",
								"Needs shared_preload_libraries = 'gridha'; each one counts against max_worker_processes.",
								preloading ? &gridha_workers : &unloaded_workers,
								0, 0, 1024,
								context, 0,
								NULL, NULL, NULL);

		DefineCustomStringVariable("gridha.database",
								   "Database the background workers serve.",
								   "gridha must be installed there (CREATE EXTENSION gridha); workers wait until it is.",
								   preloading ? &gridha_database : &unloaded_database,
								   "postgres",
								   context, 0,
								   NULL, NULL, NULL);

		DefineCustomStringVariable("gridha.worker_role",
								   "The role background workers connect as; target functions run with its privileges.",
								   "Empty: the bootstrap superuser, as gridha 1.0 did (a WARNING says so at start). Grant the role gridha_submitter.",
								   preloading ? &gridha_worker_role : &unloaded_worker_role,
								   "",
								   context, 0,
								   NULL, NULL, NULL);
	}

	DefineCustomIntVariable("gridha.naptime",
							"How long an idle worker sleeps when no batch arrives.",
							"A commit that enqueues batches wakes the workers at once.",
							&gridha_naptime_ms,
							1000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.submit_timeout",
							"Time limit of one HTTP request to a target.",
							"A submission that runs out of time is reported delayed and retried with backoff.",
							&gridha_submit_timeout_ms,
							15000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.monitor_interval",
							"How often a worker polls the ledger for its pending batches.",
							NULL,
							&gridha_monitor_interval_ms,
							500, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.worker_inflight",
							"How many POSTs one worker keeps in flight at once.",
							"Still one batch per service: a worker needs as many ready services as this to fill it. Lower it for a ledger that cannot take that many requests at once.",
							&gridha_worker_inflight,
							64, 1, 1024,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.worker_connect_rate",
							"How many new connections a worker opens to one target per second, at most (0: no cap).",
							"Bursts of a twentieth of a second's worth are allowed. Requests that reuse a kept-alive connection do not count.",
							&gridha_worker_connect_rate,
							200, 0, 100000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.worker_lock_timeout",
							"Longest a worker's step waits for a row lock (0: no limit).",
							"A step that times out is logged and retried by the next cycle; the worker keeps serving its other services.",
							&gridha_worker_lock_timeout_ms,
							5000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.worker_statement_timeout",
							"Longest a worker's step may run, a target function's call included (0: no limit).",
							"A submit function that runs out of time makes its batch delayed.",
							&gridha_worker_statement_timeout_ms,
							60000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.status_url_max_length",
							"Longest URL of one status request; longer id lists are split.",
							"A request answered 414 or 431 is asked again in halves.",
							&gridha_status_url_max_length,
							2048, 64, 1024 * 1024,
							PGC_SIGHUP, GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.status_omitted_limit",
							"Status answers in a row that may leave a pending batch out before it is taken as unknown to the ledger (0: never).",
							"Such a batch is then reported unknown and submitted again; until then it is asked about with a growing pause.",
							&gridha_status_omitted_limit,
							5, 0, 1000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.maintenance_interval",
							"Length of a maintenance tick.",
							"The leader runs its duties at most once per tick; ticks are slots of the server clock of this length.",
							&gridha_maintenance_interval_ms,
							60 * 1000, 10, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.retention",
							"Age past which maintenance deletes committed and invalid batches.",
							"Counted from the batch's final status; -1 keeps them forever. The default is 7 days.",
							&gridha_retention_s,
							RETENTION_DEFAULT_S, -1, INT_MAX,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.prune_interval",
							"How often each backend's hand-out may run the maintenance duty.",
							"At most once per interval, next_batch and next_batches read the maintenance lease, take it when free, and as leader run a due tick and one prune step; -1 leaves this to run_maintenance and the workers.",
							&gridha_prune_interval_ms,
							1000, -1, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.prune_chunk",
							"Final batches one prune step deletes at most.",
							"Each step is its own short transaction's work (a hand-out's, a tick's or a prune_batches call's).",
							&gridha_prune_chunk,
							5000, 1, 1000000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.sweep_instances_after",
							"Age past which maintenance forgets an instance that holds nothing.",
							"Counted from the instance's last claim cycle, release or registration; -1 never forgets.",
							&gridha_sweep_instances_after_s,
							24 * 60 * 60, -1, INT_MAX,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("gridha.id_block_size",
							"How many ids gridha.next_id reserves at a time for its backend.",
							"Ids of a block that a backend does not use are a gap; a block never exceeds its sequence's window size.",
							&gridha_id_block_size,
							100, 1, INT_MAX,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

#ifdef GRIDHA_TEST_HOOKS
	DefineCustomIntVariable("gridha.test_probe_pause",
							"Test builds only: a liveness probe holds the lock it probes until it can take this advisory lock (shared).",
							NULL,
							&gridha_test_probe_pause,
							0, 0, INT_MAX,
							PGC_USERSET, GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);
#endif

#ifdef GRIDHA_LOCK_CHECK
	DefineCustomBoolVariable("gridha.lock_check",
							 "Test builds only: the lock-order checker is built in (read only).",
							 NULL, &gridha_lock_check, true, PGC_INTERNAL, GUC_NOT_IN_SAMPLE,
							 NULL, NULL, NULL);
#endif

#ifdef GRIDHA_TEST_HOOKS
	DefineCustomIntVariable("gridha.test_relcache_fill",
							"Test builds only: setting it takes this many relcache callback slots of the session, as other extensions do.",
							NULL,
							&gridha_test_relcache_fill,
							0, 0, 10,
							PGC_USERSET, GUC_NOT_IN_SAMPLE,
							NULL, gridha_test_relcache_fill_assign, NULL);
#endif
}

/*
 * gridha_timing: the claim timings as they are applied right now.
 *
 * Guarantees hard_ms >= soft_ms and renew_ms < soft_ms whatever the
 * settings say, so a live instance never lets its own claims lapse.
 */
GridhaTiming
gridha_timing(void)
{
	GridhaTiming t;

	t.soft_ms = gridha_soft_expiry_ms;
	t.hard_ms = Max(gridha_hard_expiry_ms, gridha_soft_expiry_ms);
	t.renew_ms = gridha_renew_interval_ms;
	if (t.renew_ms >= t.soft_ms)
		t.renew_ms = Max(t.soft_ms / 2, 1);
	return t;
}

static Datum
gridha_ms_interval(int64 ms)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = ms * INT64CONST(1000);
	return IntervalPGetDatum(iv);
}

PG_FUNCTION_INFO_V1(gridha_expiry_settings);

/*
 * gridha_expiry_settings: the effective timings as intervals, for views.
 */
Datum
gridha_expiry_settings(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};
	GridhaTiming t = gridha_timing();

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "gridha: expiry_settings must return a record");
	tupdesc = BlessTupleDesc(tupdesc);

	values[0] = gridha_ms_interval(t.soft_ms);
	values[1] = gridha_ms_interval(t.hard_ms);
	values[2] = gridha_ms_interval(t.renew_ms);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
