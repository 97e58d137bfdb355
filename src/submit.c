/*-------------------------------------------------------------------------
 *
 * submit.c
 *		What a background worker does in one cycle: hand out batches, submit
 *		them to their targets outside any transaction (many POSTs in flight
 *		at once), report the outcomes, poll the ledger for the batches it
 *		has pending (the DLT monitor), and try the maintenance tick.
 *
 * Words:
 *   cycle      one call of gridha_submit_cycle
 *   step       one transaction of the cycle (a hand-out, the reports, the
 *              pending list, a call of a target function); each commits on
 *              its own, runs under gridha.worker_statement_timeout (and the
 *              session's lock timeout), and can be cancelled by SIGTERM. An
 *              error in one is logged, and the cycle carries on
 *   in flight  a batch handed out to this worker and POSTed (libcurl multi,
 *              at most gridha.worker_inflight at once, one per service),
 *              whose outcome is not reported yet
 *   target     where a service's batches go (gridha.targets), as judged by
 *              targets.c when the batch is handed out: a URL or a function
 *              to submit to, and one to ask for statuses, or none
 *   refusal    RG001 (the claim moved on) or RG002 (the batch is no longer
 *              in flight) on a report: the batch is dropped, its new owner
 *              submits it again
 *   orphan     a batch submitting under this worker's claim and epoch that
 *              the worker does not have in hand: its report failed (an error,
 *              not a refusal). It is reported delayed, so it is handed out
 *              again; without that, the service would wait for as long as
 *              this worker renews the claim
 *   limit      how many requests (POSTs and status runs) the worker keeps
 *              in flight to one target: adaptive, from 1 up to
 *              gridha.worker_inflight (the ceiling). Slow start first: +1
 *              per answer in time (doubling every round trip) until the
 *              first sign of overload (src/limit.c). Then additive increase: +1
 *              after a limit's worth of answers in time while the limit is
 *              at least half used; multiplicative decrease: halved on a
 *              429 or 503, a timeout, a refused or dropped connection, or
 *              answers far slower than the fastest of the last 10 to 20 s
 *              (their moving average: one slow answer among fast ones is
 *              noise; each answer's time less the time the worker spent in
 *              a step before it looked) (once per round trip: what started
 *              before the last halving does not halve it again). A limit's worth of slow answers
 *              in a row means the ledger itself got slower: the slow
 *              becomes the fastest, and the limit stops falling
 *   waiting    a handed-out batch whose target's limit (or connection rate,
 *              gridha.worker_connect_rate) has no room yet; in hand, POSTed
 *              as soon as there is
 *   status run the GETs that ask one target about this worker's pending
 *              batches (src/dlt_http.c), in the same libcurl multi as the
 *              POSTs, never blocking; one per target at a time, counted in
 *              its limit
 *   omitted    a pending batch that a well-formed status answer left out
 *              (the ledger spoke of other batches, or split its id): it is
 *              counted (gridha.metrics' status_omitted_total), logged a
 *              line a minute per target at most, and asked about again
 *              after a pause that doubles each time, from twice
 *              gridha.monitor_interval up to 30 s, until an answer
 *              speaks of it again (its resubmissions do not reset the
 *              pause). After gridha.status_omitted_limit such answers in a
 *              row it is reported unknown: the ledger does not know it,
 *              and it is submitted again (the ledger dedupes it by its id)
 *   retry-after the time a 429 or 503 answer's Retry-After names (up to
 *              the backoff's ceiling, a minute): no request of this worker
 *              goes to that target before it; the batches handed out
 *              meanwhile wait in hand
 *   target call a call of a target's submit_function or status_function,
 *              in a step of its own (submit_call_begin / submit_call_end):
 *              the function is called by the OID the target was judged
 *              with (an overload added since cannot change or break the
 *              call), with search_path GRIDHA_TARGET_SEARCH_PATH, the
 *              deferred triggers it queued fired before the call ends, and
 *              nothing of it is left in the session afterwards: its
 *              settings are undone, its temporary objects dropped and its
 *              prepared statements deallocated
 *   watchdog   while a target call runs: a call that goes on
 *              SUBMIT_CANCEL_GRACE_MS past its cancel (the statement
 *              timeout's, or SIGTERM's) swallowed it, and the worker ends
 *              itself (FATAL, which no PL/pgSQL handler catches)
 *
 * The worker never waits on the network: every request is moved on by
 * gridha_submit_poll, which waits at most the time it is given (the worker
 * gives it 20 ms at a time and looks at its latch in between), so SIGTERM,
 * postmaster death and new work are seen while a ledger hangs.
 *
 * No transaction is ever open during a network call: a hand-out commits
 * before its POSTs start, and their outcomes are reported by later steps,
 * many in one transaction (gridha.report_submissions / report_statuses,
 * the forms that take gridha.submission_report[] / gridha.status_report[];
 * the worker calls only the API of SQL 1.3, which 1.2 has too).
 *
 * A target the worker cannot use when the batch is in hand (its function
 * was dropped, its row is malformed) makes that batch delayed with the
 * reason; the worker never calls what it could not check.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "commands/prepare.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "nodes/makefuncs.h"
#include "utils/builtins.h"
#include "utils/formatting.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "mb/pg_wchar.h"
#include "storage/latch.h"

#include "dlt_http.h"
#include "common.h"
#include "generation.h"
#include "limit.h"
#include "ratelimit.h"
#include "settings.h"
#include "slots.h"
#include "spi_util.h"
#include "submit.h"
#include "targets.h"
#include "totals.h"

/* Pending batches polled per monitor round */
#define SUBMIT_MONITOR_BATCHES	1000
/* A target no request went to for this long is no longer shown */
#define SUBMIT_LIMIT_SHOWN_MS	60000
/*
 * The longest pause before a batch a status answer left out is asked about
 * again: short enough that it is answered within 40 s of the ledger
 * behaving again
 */
#define SUBMIT_OMITTED_MAX_MS	30000
/* The status of an entry no well-formed answer spoke of yet (a GET failed) */
#define SUBMIT_NOT_ANSWERED		"?"
/* How long a stopping worker waits for the answers of its POSTs in flight */
#define SUBMIT_STOP_DRAIN_MS	300
/* How long a target call may run past its cancel before the worker ends */
#define SUBMIT_CANCEL_GRACE_MS	2000
/* How often the watchdog looks, while a target call runs */
#define SUBMIT_WATCHDOG_MS		100
/* The most of a submit function's unknown answer a batch's detail shows */
#define SUBMIT_ANSWER_MAX_BYTES 200

/*
 * The longest lock wait of a stopping worker (see
 * gridha_submit_bound_lock_wait): below deadlock_timeout's default (1 s),
 * so a stopping worker gives a wait up before a deadlock check runs in it
 * and never ends its life as a deadlock's victim; what it could not hand
 * back is taken over when its session ends.
 */
#define SUBMIT_STOP_LOCK_TIMEOUT_MS 200

/*
 * How long a commit of a stopping worker waits for a synchronous standby.
 * A backend that is terminated gives that wait up at once, its commit made
 * on this server only; a stopping worker gives the standby this long, then
 * does the same (submit_stop_sync_expired), so a standby that is gone
 * cannot hold a fast shutdown up.
 */
#define SUBMIT_STOP_SYNC_WAIT_MS 1000

volatile sig_atomic_t gridha_submit_in_step = false;
volatile sig_atomic_t gridha_submit_stopping = false;
volatile sig_atomic_t gridha_submit_committing = false;
volatile sig_atomic_t gridha_submit_cancelled = false;

static TimeoutId submit_stop_sync_timeout = MAX_TIMEOUTS;

static GridhaStatement submit_handout_stmt = {
	"SELECT service_id, batch_id, payload, epoch, attempts FROM gridha.next_batches($1, $2)",
	2, {UUIDOID, INT4OID}
};

/*
 * The handed-out batches' targets, read by a statement of its own after
 * the hand-out. Not a join in the hand-out statement: its snapshot is
 * older than what next_batches claims inside it, so the claim row of a
 * service enqueued for the first time while the statement ran would be
 * missing, the row lost and the batch left submitting under this worker's
 * claim.
 */
static GridhaStatement submit_targets_stmt = {
	"SELECT service_id, target FROM gridha.service_claims"
	" WHERE service_id OPERATOR(pg_catalog.=) ANY ($1)",
	1, {TEXTARRAYOID}
};

/*
 * Reports, many in one statement: the worker's parallel arrays made into
 * the rows report_submissions and report_statuses take, in their order
 * (the words are the labels the worker hands out: lower case, known).
 */
static GridhaStatement submit_reports_stmt = {
	"SELECT r.service_id, r.batch_id, r.status::pg_catalog.text, r.sqlstate, r.message"
	"  FROM gridha.report_submissions($1, ARRAY("
	"         SELECT ROW(u.s, u.b, u.e, u.w::gridha.submission_outcome, u.d)::gridha.submission_report"
	"           FROM unnest($2, $3, $4, $5, $6) WITH ORDINALITY AS u(s, b, e, w, d, n)"
	"          ORDER BY u.n)) r",
	6, {UUIDOID, TEXTARRAYOID, TEXTARRAYOID, INT8ARRAYOID, TEXTARRAYOID, TEXTARRAYOID}
};

static GridhaStatement submit_statuses_stmt = {
	"SELECT r.service_id, r.batch_id, r.status::pg_catalog.text, r.sqlstate, r.message"
	"  FROM gridha.report_statuses($1, ARRAY("
	"         SELECT ROW(u.s, u.b, u.e, u.w::gridha.ledger_status, NULL)::gridha.status_report"
	"           FROM unnest($2, $3, $4, $5) WITH ORDINALITY AS u(s, b, e, w, n)"
	"          ORDER BY u.n)) r",
	5, {UUIDOID, TEXTARRAYOID, TEXTARRAYOID, INT8ARRAYOID, TEXTARRAYOID}
};

static GridhaStatement submit_pending_stmt = {
	"SELECT p.service_id, p.batch_id, p.status::text, p.epoch, c.target"
	"  FROM gridha.pending_batches($1, $2) p"
	"  JOIN gridha.service_claims c ON c.service_id OPERATOR(pg_catalog.=) p.service_id"
	" ORDER BY c.target, p.submitted_at",
	2, {UUIDOID, INT4OID}
};

static GridhaStatement submit_maintenance_stmt = {
	"SELECT outcome FROM gridha.run_maintenance($1)",
	1, {UUIDOID}
};

/*
 * This worker's orphans, read as the worker's role: worker_orphans is in
 * gridha_internal on 1.3's SQL, in gridha on 1.2's (src/generation.c).
 */
static GridhaStatement submit_orphans_stmt = {
	"SELECT o.service_id, o.batch_id, o.epoch FROM gridha_internal.worker_orphans($1) o",
	1, {UUIDOID}
};

static GridhaStatement submit_orphans_1_2_stmt = {
	"SELECT o.service_id, o.batch_id, o.epoch FROM gridha.worker_orphans($1) o",
	1, {UUIDOID}
};

/* A handed-out batch, in hand until its outcome is reported */
typedef struct SubmitBatch
{
	MemoryContext cxt;			/* everything of the batch; deleted with it */
	char	   *service_id;
	char	   *batch_id;
	bytea	   *payload;		/* NULL for a NULL payload */
	int64		epoch;
	int32		attempt;
	char	   *target;
	char	   *submit_url;		/* NULL: submit_function */
	Oid			submit_function;
	GridhaHttpTarget http;		/* its headers and rejecting codes */
	bool		fire_and_forget;	/* the target has no status source */
	char	   *problem;		/* the target cannot be used: why */
	TimestampTz started_at;		/* when its POST started */
} SubmitBatch;

/* One report waiting to be sent */
typedef struct SubmitReport
{
	char	   *service_id;
	char	   *batch_id;
	int64		epoch;
	char	   *word;			/* outcome, or the ledger's status */
	char	   *detail;			/* NULL: none */
	bool		commit_after;	/* accepted by a fire-and-forget target */
} SubmitReport;

/* A pending batch to ask the ledger about */
typedef struct SubmitPending
{
	char	   *service_id;
	char	   *batch_id;
	char	   *status;
	int64		epoch;
	char	   *target;
} SubmitPending;

/* A pending batch the ledger's status answers left out (see omitted) */
typedef struct SubmitOmitted
{
	uint64		key;			/* submit_omitted_key: the hash key */
	char	   *service_id;		/* in TopMemoryContext */
	char	   *batch_id;
	int64		epoch;
	int			count;			/* answers in a row that left it out since
								 * it was last reported unknown */
	int			total;			/* ... since an answer last spoke of it */
	TimestampTz next_at;		/* not asked about before this */
	TimestampTz seen_at;		/* last read as pending, or left out */
} SubmitOmitted;

/* A status run in flight, with everything it needs at its end */
typedef struct SubmitStatusRun
{
	MemoryContext cxt;			/* everything of the run; deleted with it */
	char	   *target;
	SubmitPending *rows;		/* the pending batches asked about */
	GridhaStatusEntry *entries;
	int			n;
	TimestampTz started_at;
} SubmitStatusRun;

/* A step: what it runs inside its transaction */
typedef void (*SubmitStepFn) (void *arg);

static MemoryContext submit_cxt = NULL; /* reset every cycle */
static MemoryContext submit_batches_cxt = NULL; /* parent of in-flight batches */
static GridhaHttp *submit_http = NULL;
static GridhaHttpMulti *submit_multi = NULL;
static pg_uuid_t submit_instance;
static int	submit_in_flight = 0;
static List *submit_in_hand = NIL;	/* SubmitBatch * POSTed and not done, in
									 * submit_batches_cxt */
static List *submit_waiting = NIL;	/* SubmitBatch * handed out, not POSTed
									 * yet, in submit_batches_cxt */
static List *submit_runs = NIL; /* SubmitStatusRun *, in submit_batches_cxt */
static TimestampTz submit_last_poll = 0;	/* when the last poll ended */
static long submit_away_ms = 0; /* how long before this poll nobody looked:
								 * an answer may have waited that long */
static long submit_conn_host = 0;	/* the multi's connection bounds now */
static long submit_conn_total = 0;
static List *submit_submissions = NIL;	/* SubmitReport *, in submit_cxt */
static List *submit_statuses = NIL;
static TimestampTz submit_last_monitor = 0;
static TimestampTz submit_last_maintenance = 0;
static bool submit_orphans_due = true;	/* look for orphans next cycle */
static bool submit_failed = false;	/* a step failed since last asked */
static bool submit_superuser = true;	/* the worker's role is a superuser, as
										 * of the last step (looked up only in
										 * a transaction) */
static long submit_slot_ms = -1;	/* ms until a rate-limited target of a
									 * ready head has a slot; -1: none */
static HTAB *submit_omitted = NULL; /* SubmitOmitted, in TopMemoryContext */

/* The watchdog of target calls (see the words at the top) */
static TimeoutId submit_watchdog_timeout = MAX_TIMEOUTS;
static bool submit_watchdog_armed = false;
static TimestampTz submit_call_deadline = 0;	/* statement timeout + grace */
static TimestampTz submit_cancel_seen = 0;	/* when it saw SIGTERM's cancel */
static volatile sig_atomic_t submit_call_ended = false; /* it ended the worker */
static const char *submit_call_target_name = NULL;	/* the target called */

/*
 * submit_stop_sync_expired: a stopping worker's commit waited
 * SUBMIT_STOP_SYNC_WAIT_MS for its synchronous standby; the wait checks for
 * a cancel request and gives up (a timeout handler: flags and the latch
 * only).
 */
static void
submit_stop_sync_expired(void)
{
	QueryCancelPending = true;
	InterruptPending = true;
	SetLatch(MyLatch);
}

/*
 * gridha_submit_commit: commits the worker's transaction. A wait for a
 * synchronous standby is bounded: SIGTERM cancels it (worker.c), and once
 * the worker is stopping a commit waits SUBMIT_STOP_SYNC_WAIT_MS at most.
 * Either way the commit stands on this server, as a terminated backend's
 * does.
 */
void
gridha_submit_commit(void)
{
	if (submit_stop_sync_timeout == MAX_TIMEOUTS)
		submit_stop_sync_timeout = RegisterTimeout(USER_TIMEOUT, submit_stop_sync_expired);
	if (gridha_submit_stopping)
		enable_timeout_after(submit_stop_sync_timeout, SUBMIT_STOP_SYNC_WAIT_MS);
	gridha_submit_committing = true;
	PG_TRY();
	{
		CommitTransactionCommand();
	}
	PG_FINALLY();
	{
		gridha_submit_committing = false;
		disable_timeout(submit_stop_sync_timeout, false);
	}
	PG_END_TRY();
	/* committed: a cancel that came too late to end the wait has nothing to end */
	QueryCancelPending = false;
}

/*
 * submit_exit_log: at the worker's exit, says why when the watchdog ended it
 * (the FATAL before says only "due to administrator command").
 */
static void
submit_exit_log(int code, Datum arg)
{
	if (submit_call_ended)
		ereport(LOG,
				(errmsg("gridha worker ended itself: a function of target \"%s\" ran on %d ms after it was cancelled",
						submit_call_target_name ? submit_call_target_name : "?",
						SUBMIT_CANCEL_GRACE_MS),
				 errdetail("A target function that catches query_canceled cannot be stopped otherwise; the worker is started again unless an administrator stopped it or the server is shutting down.")));
}

/*
 * gridha_submit_init: the worker's HTTP handles and memory.
 */
void
gridha_submit_init(const pg_uuid_t *instance_id)
{
	submit_instance = *instance_id;
	before_shmem_exit(submit_exit_log, (Datum) 0);
	submit_cxt = AllocSetContextCreate(TopMemoryContext, "gridha worker cycle",
									   ALLOCSET_DEFAULT_SIZES);
	submit_batches_cxt = AllocSetContextCreate(TopMemoryContext, "gridha batches in flight",
											   ALLOCSET_SMALL_SIZES);
	if (gridha_http_global_init() != 0 || (submit_http = gridha_http_create()) == NULL ||
		(submit_multi = gridha_http_multi_create()) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("gridha worker could not initialise libcurl")));
}

void
gridha_submit_shutdown(void)
{
	if (submit_multi != NULL)
		gridha_http_multi_destroy(submit_multi);
	if (submit_http != NULL)
		gridha_http_destroy(submit_http);
	submit_multi = NULL;
	submit_http = NULL;
}

static Datum
submit_instance_datum(void)
{
	return UUIDPGetDatum(&submit_instance);
}

/*
 * submit_publish: shows this worker's POSTs in flight and limits in its
 * slot (gridha.workers, gridha.worker_limits()), and bounds the multi's
 * connections by the limits: no more than the limits together, and a
 * status run each (targets may share a host, so the bound per host is the
 * same).
 */
static void
submit_publish(void)
{
	GridhaSlotLimit shown[GRIDHA_SLOT_LIMITS];
	TimestampTz now = GetCurrentTimestamp();
	long		max_host = 0;
	long		total = 0;
	int			n = 0;
	ListCell   *lc;

	foreach(lc, gridha_limits)
	{
		GridhaLimit *l = lfirst(lc);

		if (l->in_flight == 0 &&
			TimestampDifferenceExceeds(l->used_at, now, SUBMIT_LIMIT_SHOWN_MS))
			continue;
		total += (long) l->limit + 1;
		max_host = total;
		if (n < GRIDHA_SLOT_LIMITS)
		{
			int			len = pg_mbcliplen(l->target, strlen(l->target),
										   GRIDHA_SLOT_TARGET_LEN - 1);

			memcpy(shown[n].target, l->target, len);
			shown[n].target[len] = '\0';
			shown[n].in_flight = l->in_flight;
			shown[n].limit = (int) l->limit;
			shown[n].failures = l->failures;
			n++;
		}
	}
	gridha_slot_set_limits(shown, n);
	gridha_slot_set_in_flight(submit_in_flight);
	if (submit_multi != NULL && max_host > 0 &&
		(max_host != submit_conn_host || total != submit_conn_total))
	{
		gridha_http_multi_set_connections(submit_multi, max_host, total);
		submit_conn_host = max_host;
		submit_conn_total = total;
	}
}

/*
 * submit_handout_room: how many more batches the worker may take in hand:
 * the limits of the targets it talked to lately together (the ceiling
 * before it talked to any), under the ceiling, less what it has in hand.
 */
static int
submit_handout_room(void)
{
	TimestampTz now = GetCurrentTimestamp();
	int			budget = 0;
	bool		any = false;
	ListCell   *lc;

	foreach(lc, gridha_limits)
	{
		GridhaLimit *l = lfirst(lc);

		if (l->in_flight == 0 &&
			TimestampDifferenceExceeds(l->used_at, now, SUBMIT_LIMIT_SHOWN_MS))
			continue;
		budget += (int) l->limit;
		any = true;
	}
	if (!any || budget > gridha_worker_inflight)
		budget = gridha_worker_inflight;
	return budget - submit_in_flight - list_length(submit_waiting);
}

/*
 * submit_watchdog: a timeout handler (flags and the latch only), every
 * SUBMIT_WATCHDOG_MS while a target call runs. When the call has run
 * SUBMIT_CANCEL_GRACE_MS past the statement timeout, or past the cancel
 * SIGTERM sent it, it swallowed that cancel: the worker ends (ProcDiePending
 * makes the next interrupt check raise FATAL, which ends the process; no
 * exception handler of the function can catch it).
 */
static void
submit_watchdog(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (gridha_submit_cancelled && submit_cancel_seen == 0)
		submit_cancel_seen = now;
	if ((submit_call_deadline != 0 && now >= submit_call_deadline) ||
		(submit_cancel_seen != 0 &&
		 TimestampDifferenceExceeds(submit_cancel_seen, now, SUBMIT_CANCEL_GRACE_MS)))
	{
		submit_call_ended = true;
		ProcDiePending = true;
		InterruptPending = true;
		SetLatch(MyLatch);
	}
}

/*
 * submit_watchdog_arm: starts the watchdog for a target call of the
 * running step, whose statement timeout (when set) was armed at its start.
 */
static void
submit_watchdog_arm(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (submit_watchdog_timeout == MAX_TIMEOUTS)
		submit_watchdog_timeout = RegisterTimeout(USER_TIMEOUT, submit_watchdog);
	submit_cancel_seen = 0;
	submit_call_deadline = 0;
	if (get_timeout_active(STATEMENT_TIMEOUT))
		submit_call_deadline = TimestampTzPlusMilliseconds(get_timeout_finish_time(STATEMENT_TIMEOUT),
														   SUBMIT_CANCEL_GRACE_MS);
	enable_timeout_every(submit_watchdog_timeout,
						 TimestampTzPlusMilliseconds(now, SUBMIT_WATCHDOG_MS), SUBMIT_WATCHDOG_MS);
	submit_watchdog_armed = true;
}

/* submit_watchdog_disarm: the target call ended (any way); idempotent */
static void
submit_watchdog_disarm(void)
{
	if (!submit_watchdog_armed)
		return;
	disable_timeout(submit_watchdog_timeout, false);
	submit_watchdog_armed = false;
	submit_call_target_name = NULL;
}

/*
 * gridha_submit_bound_lock_wait: once the worker is stopping (SIGTERM), a
 * lock wait of the current transaction ends after at most
 * SUBMIT_STOP_LOCK_TIMEOUT_MS (gridha.worker_lock_timeout when that is
 * shorter), even with no lock timeout set: a report or the release at stop
 * that cannot lock its row gives up, and the claims' expiry does the rest.
 * Until the transaction ends.
 */
void
gridha_submit_bound_lock_wait(void)
{
	char		value[32];

	if (!gridha_submit_stopping ||
		(gridha_worker_lock_timeout_ms > 0 &&
		 gridha_worker_lock_timeout_ms <= SUBMIT_STOP_LOCK_TIMEOUT_MS))
		return;
	snprintf(value, sizeof(value), "%d", SUBMIT_STOP_LOCK_TIMEOUT_MS);
	(void) set_config_option("lock_timeout", value, PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * gridha_submit_pin_settings: the settings every statement of the worker
 * runs with, applied again when they differ (at each step, at start, after
 * a reload): the lock timeout, and a search_path through which no object
 * planted in another schema can take part in its statements. Nothing a
 * target function sets survives its call (submit_call_end), and this puts
 * back what anything else may have changed.
 */
void
gridha_submit_pin_settings(void)
{
	char		value[32];
	const char *now;

	snprintf(value, sizeof(value), "%d", gridha_worker_lock_timeout_ms);
	now = GetConfigOption("lock_timeout", true, false);
	if (now == NULL || strcmp(now, value) != 0)
		SetConfigOption("lock_timeout", value, PGC_SUSET, PGC_S_SESSION);
	now = GetConfigOption("search_path", true, false);
	if (now == NULL || strcmp(now, GRIDHA_WORKER_SEARCH_PATH) != 0)
		SetConfigOption("search_path", GRIDHA_WORKER_SEARCH_PATH, PGC_USERSET, PGC_S_SESSION);
}

/*
 * submit_step: runs fn in a transaction of its own, under the statement
 * timeout, with the worker's settings pinned; SIGTERM cancels it (see
 * worker.c). Returns true when it
 * committed; otherwise the error is logged, the transaction rolled back,
 * and *sqlstate (when given) says which error it was.
 */
static bool
submit_step(SubmitStepFn fn, void *arg, const char *what, int *sqlstate)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool ok = true;
	volatile bool unconfirmed = false;

	if (sqlstate)
		*sqlstate = 0;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	gridha_submit_cancelled = false;
	gridha_submit_in_step = true;
	PG_TRY();
	{
		gridha_submit_pin_settings();
		gridha_submit_bound_lock_wait();
		submit_superuser = superuser();
		if (gridha_worker_statement_timeout_ms > 0)
			enable_timeout_after(STATEMENT_TIMEOUT, gridha_worker_statement_timeout_ms);
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		fn(arg);
		submit_watchdog_disarm();
		SPI_finish();
		PopActiveSnapshot();
		disable_timeout(STATEMENT_TIMEOUT, false);
		gridha_submit_commit();
		unconfirmed = ProcDiePending;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		submit_watchdog_disarm();
		disable_timeout(STATEMENT_TIMEOUT, false);
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		if (sqlstate)
			*sqlstate = edata->sqlerrcode;
		if (edata->sqlerrcode == ERRCODE_GRIDHA_STALE_CLAIM ||
			edata->sqlerrcode == ERRCODE_GRIDHA_NOT_IN_FLIGHT)
			ereport(LOG,
					(errcode(edata->sqlerrcode),
					 errmsg("gridha worker dropped a batch: %s refused: %s", what, edata->message),
					 edata->detail ? errdetail_internal("%s", edata->detail) : 0));
		else
			ereport(LOG,
					(errcode(edata->sqlerrcode),
					 errmsg("gridha worker: %s failed: %s", what, edata->message),
					 edata->detail ? errdetail_internal("%s", edata->detail) : 0,
					 edata->detail_log ? errdetail_log("%s", edata->detail_log) : 0));
		/* a refusal says nothing of the database; anything else may */
		if (edata->sqlerrcode != ERRCODE_GRIDHA_STALE_CLAIM &&
			edata->sqlerrcode != ERRCODE_GRIDHA_NOT_IN_FLIGHT)
			submit_failed = true;
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();

	/*
	 * A commit that waits for a synchronous standby gives up when the
	 * postmaster dies, committed here only (SyncRepWaitForLSN sets
	 * ProcDiePending): this server may be gone for good, and what the step
	 * handed out with it. Nothing of it may go out: the worker ends here,
	 * before any POST.
	 */
	if (unconfirmed)
	{
		ereport(LOG,
				(errmsg("gridha worker: %s committed without its synchronous standby's confirmation: ending", what)));
		proc_exit(1);
	}
	gridha_submit_in_step = false;
	QueryCancelPending = false;
	MemoryContextSwitchTo(cxt);
	pgstat_report_stat(false);
	return ok;
}

/*
 * gridha_submit_take_failure: whether a step failed since the last call
 * (the worker then checks that the extension is still there).
 */
bool
gridha_submit_take_failure(void)
{
	bool		failed = submit_failed;

	submit_failed = false;
	return failed;
}

static char *
submit_text_col(int row, int col, MemoryContext cxt)
{
	char	   *v = SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col);

	return v ? MemoryContextStrdup(cxt, v) : NULL;
}

static char *
submit_strdup(MemoryContext cxt, const char *s)
{
	return s ? MemoryContextStrdup(cxt, s) : NULL;
}

/*
 * submit_valid_text: s as far as it is valid in the database's encoding: a
 * detail cut at a byte count (a buffer of the HTTP code, say) may end
 * inside a character, and what the worker writes must load again from a
 * dump. palloc'd.
 */
static char *
submit_valid_text(const char *s)
{
	int			len = strlen(s);

	return pnstrdup(s, pg_encoding_verifymbstr(GetDatabaseEncoding(), s, len));
}

/*
 * submit_clip: at most max_bytes of s, cut on a character boundary.
 * palloc'd.
 */
static char *
submit_clip(const char *s, int max_bytes)
{
	return pnstrdup(s, pg_mbcliplen(s, strlen(s), max_bytes));
}

/*
 * submit_add_report: queues a report of a submission's outcome, or of a
 * ledger status (status true); sent by submit_flush. The detail is cut
 * before the first byte not valid in the database's encoding.
 */
static void
submit_add_report(bool status, const char *service_id, const char *batch_id, int64 epoch,
				  const char *word, const char *detail, bool commit_after)
{
	MemoryContext old = MemoryContextSwitchTo(submit_cxt);
	SubmitReport *r = palloc0(sizeof(SubmitReport));

	r->service_id = pstrdup(service_id);
	r->batch_id = pstrdup(batch_id);
	r->epoch = epoch;
	r->word = pstrdup(word);
	r->detail = detail ? submit_valid_text(detail) : NULL;
	r->commit_after = commit_after;
	if (status)
		submit_statuses = lappend(submit_statuses, r);
	else
		submit_submissions = lappend(submit_submissions, r);
	MemoryContextSwitchTo(old);
}

/*
 * submit_target_of: fills a batch's target from the judged targets (its
 * own copies: they outlive the cycle), or its problem when the worker
 * cannot use it. Inside a step, after gridha_targets_refresh.
 */
static void
submit_target_of(SubmitBatch *b)
{
	const GridhaTarget *t = b->target ? gridha_target_get(b->target) : NULL;
	MemoryContext old;
	int			i;

	old = MemoryContextSwitchTo(b->cxt);
	if (t == NULL)
		b->problem = psprintf("service \"%s\" has no target row", b->service_id);
	else if (!gridha_target_servable(t, GRIDHA_SERVES_ALL))
		b->problem = pstrdup(t->unusable ? t->unusable : "the target cannot be served");
	else
	{
		b->submit_url = submit_strdup(b->cxt, t->submit_url);
		b->submit_function = t->submit_function;
		b->fire_and_forget = t->status_kind == 0;
		if (t->reject_codes != NULL)
		{
			int		   *codes = palloc(sizeof(int) * Max(t->n_reject_codes, 1));

			memcpy(codes, t->reject_codes, sizeof(int) * t->n_reject_codes);
			b->http.reject_codes = codes;
			b->http.n_reject_codes = t->n_reject_codes;
		}
		if (t->n_headers > 0)
		{
			char	  **headers = palloc(sizeof(char *) * t->n_headers);

			for (i = 0; i < t->n_headers; i++)
				headers[i] = pstrdup(t->headers[i]);
			b->http.headers = (const char *const *) headers;
			b->http.n_headers = t->n_headers;
		}
	}
	MemoryContextSwitchTo(old);
}

/* What the hand-out step hands to the cycle */
typedef struct SubmitHandout
{
	int			max;
	List	   *batches;		/* SubmitBatch * */
} SubmitHandout;

/* Step: hand out up to handout->max batches and look up their targets */
static void
submit_handout_step(void *arg)
{
	SubmitHandout *handout = (SubmitHandout *) arg;
	Datum		args[2];
	Datum	   *sids;
	uint64		n;
	uint64		i;
	uint64		k;
	SPITupleTable *batches;
	ListCell   *lc;
	MemoryContext old;

	submit_slot_ms = -1;
	args[0] = submit_instance_datum();
	args[1] = Int32GetDatum(handout->max);
	gridha_exec(&submit_handout_stmt, args, NULL, false);
	n = SPI_processed;
	if (n == 0)
	{
		submit_slot_ms = gridha_ratelimit_wait_ms(args[0]);
		return;
	}

	/* the rows are needed past the next statement */
	batches = SPI_tuptable;
	sids = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		MemoryContext bcxt = AllocSetContextCreate(submit_batches_cxt, "gridha batch",
												   ALLOCSET_SMALL_SIZES);
		SubmitBatch *b = MemoryContextAllocZero(bcxt, sizeof(SubmitBatch));
		bool		isnull;
		Datum		d;

		b->cxt = bcxt;
		b->service_id = MemoryContextStrdup(bcxt, SPI_getvalue(batches->vals[i], batches->tupdesc, 1));
		b->batch_id = MemoryContextStrdup(bcxt, SPI_getvalue(batches->vals[i], batches->tupdesc, 2));
		d = SPI_getbinval(batches->vals[i], batches->tupdesc, 3, &isnull);
		if (!isnull)
		{
			old = MemoryContextSwitchTo(bcxt);
			b->payload = DatumGetByteaPCopy(d);
			MemoryContextSwitchTo(old);
		}
		b->epoch = DatumGetInt64(SPI_getbinval(batches->vals[i], batches->tupdesc, 4, &isnull));
		b->attempt = DatumGetInt32(SPI_getbinval(batches->vals[i], batches->tupdesc, 5, &isnull));
		old = MemoryContextSwitchTo(submit_cxt);
		handout->batches = lappend(handout->batches, b);
		MemoryContextSwitchTo(old);
		sids[i] = CStringGetTextDatum(b->service_id);
	}

	gridha_targets_refresh();
	args[0] = gridha_text_array(sids, (int) n);
	gridha_exec(&submit_targets_stmt, args, NULL, true);
	for (k = 0; k < SPI_processed; k++)
	{
		char	   *sid = SPI_getvalue(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1);
		ListCell   *bc;

		foreach(bc, handout->batches)
		{
			SubmitBatch *b = lfirst(bc);

			if (strcmp(b->service_id, sid) == 0)
				b->target = submit_text_col(k, 2, b->cxt);
		}
	}
	foreach(lc, handout->batches)
		submit_target_of((SubmitBatch *) lfirst(lc));
}

/*
 * submit_batch_done: the batch's outcome is known: queue its report and
 * let it go.
 */
static void
submit_batch_done(SubmitBatch *b, const char *outcome, const char *detail)
{
	submit_add_report(false, b->service_id, b->batch_id, b->epoch, outcome, detail,
					  strcmp(outcome, "accepted") == 0 && b->fire_and_forget);
	MemoryContextDelete(b->cxt);
}

/* Step: call a target's submit_function */
typedef struct SubmitCall
{
	SubmitBatch *batch;
	char	   *outcome;		/* in submit_cxt */
} SubmitCall;

/*
 * submit_call_begin: a target call starts (see the words at the top): a GUC
 * nest level of its own with search_path GRIDHA_TARGET_SEARCH_PATH, so
 * every setting the function changes, SET LOCAL or SET or
 * set_config(..., false) alike, is undone when the call ends (an error
 * undoes them with the transaction); no prepared statement a call left
 * (PREPARE is not undone by an error) is there for it; the watchdog runs.
 *
 * The path is gridha's, never a role's, a database's or "$user": pg_catalog
 * first, pg_temp last, and no schema anyone else may write to. It is the
 * path PostgreSQL 17 runs index expressions and materialized views with
 * during maintenance. A function that needs other schemas names them, or
 * sets its own path (CREATE FUNCTION ... SET search_path).
 *
 * Target functions run only as a role that is not a superuser: a worker
 * connected as one (gridha.worker_role empty or a superuser) never gets
 * here (submit_refuses_functions). Returns the nest level.
 */
static int
submit_call_begin(const char *target)
{
	int			nest = NewGUCNestLevel();

	(void) set_config_option("search_path", GRIDHA_TARGET_SEARCH_PATH, PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	DropAllPreparedStatements();
	submit_watchdog_arm();
	submit_call_target_name = target;
	return nest;
}

/*
 * submit_call_end: a target call returned: the deferred triggers it queued
 * fire now, under its time limit and watchdog (not at the commit, which
 * runs with neither); then its settings are undone and its temporary
 * objects dropped (as DISCARD TEMP does) and its prepared statements
 * deallocated, in the step's transaction, so that none of them is ever
 * committed: no later call, of this target or another, finds a table,
 * trigger or function it made in pg_temp. Errors go up as the call's own.
 */
static void
submit_call_end(int nest)
{
	CommandCounterIncrement();
	if (SPI_execute("SET CONSTRAINTS ALL IMMEDIATE", false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "gridha: could not fire the deferred triggers of a target call");
	submit_watchdog_disarm();
	AtEOXact_GUC(false, nest);
	ResetTempTableNamespace();
	DropAllPreparedStatements();
	CommandCounterIncrement();
}

/*
 * submit_refuses_functions: the worker calls no target function while it
 * runs as a superuser (gridha.worker_role empty or a superuser): whoever
 * owns a function an administrator points a target at would run code with
 * superuser rights. The reason, when it refuses. Asked between steps, so
 * it answers as of the last step: superuser() may read the catalog, which
 * needs a transaction.
 */
static const char *
submit_refuses_functions(void)
{
	if (submit_superuser)
		return "target functions are not called while the worker runs as a superuser: set gridha.worker_role to a role that is not one";
	return NULL;
}

/*
 * submit_function_lock: fn exists and has the shape of a submit (set
 * false) or status (set true) function, or an error: the worker never
 * calls what it could not find. The function is locked (as a DROP FUNCTION
 * would find it: AccessShareLock on the object) until the step's
 * transaction ends, so it cannot be dropped between this look-up and the
 * call: a drop committed meanwhile would make the call fail with "cache
 * lookup failed" instead of this error. It is called by this OID, never by
 * its name: an overload someone adds to its schema changes nothing.
 */
static void
submit_function_lock(Oid fn, const char *column, const char *target, bool set)
{
	HeapTuple	tup;
	bool		shaped;

	LockDatabaseObject(ProcedureRelationId, fn, 0, AccessShareLock);
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	if (!HeapTupleIsValid(tup))
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
				 errmsg("%s of target \"%s\" (OID %u) does not exist", column, target, fn)));
	shaped = ((Form_pg_proc) GETSTRUCT(tup))->proretset == set &&
		((Form_pg_proc) GETSTRUCT(tup))->pronargs == (set ? 1 : 4) &&
		((Form_pg_proc) GETSTRUCT(tup))->prokind == PROKIND_FUNCTION;
	ReleaseSysCache(tup);
	if (!shaped)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
				 errmsg("%s of target \"%s\" (OID %u) is not a %s function", column, target, fn,
						set ? "status" : "submit")));
}

/* submit_text_const: a text constant (NULL: a null one) */
static Const *
submit_text_const(Oid type, Datum value, bool isnull)
{
	return makeConst(type, -1, DEFAULT_COLLATION_OID, -1, value, isnull, false);
}

static void
submit_function_step(void *arg)
{
	SubmitCall *call = (SubmitCall *) arg;
	SubmitBatch *b = call->batch;
	List	   *args;
	FuncExpr   *expr;
	ExprState  *state;
	ExprContext *econtext;
	Datum		result;
	bool		isnull;
	int			nest;

	submit_function_lock(b->submit_function, "submit_function", b->target, false);
	args = list_make4(submit_text_const(TEXTOID, CStringGetTextDatum(b->service_id), false),
					  submit_text_const(TEXTOID, CStringGetTextDatum(b->batch_id), false),
					  makeConst(BYTEAOID, -1, InvalidOid, -1,
								b->payload ? PointerGetDatum(b->payload) : (Datum) 0,
								b->payload == NULL, false),
					  makeConst(INT8OID, -1, InvalidOid, sizeof(int64),
								Int64GetDatum(b->epoch), false, FLOAT8PASSBYVAL));
	expr = makeFuncExpr(b->submit_function, TEXTOID, args, InvalidOid,
						DEFAULT_COLLATION_OID, COERCE_EXPLICIT_CALL);
	econtext = CreateStandaloneExprContext();
	nest = submit_call_begin(b->target);
	/* the executor checks EXECUTE, and runs a SECURITY DEFINER's as its owner */
	state = ExecInitExpr((Expr *) expr, NULL);
	result = ExecEvalExprSwitchContext(state, econtext, &isnull);
	call->outcome = isnull ? NULL : MemoryContextStrdup(submit_cxt, TextDatumGetCString(result));
	FreeExprContext(econtext, true);
	submit_call_end(nest);
}

/*
 * submit_by_function: calls the target's function in a step and takes its
 * word; a failure, a timeout, a cancel or another word delays the batch
 * (the word, cut to whole characters, in its detail).
 */
static void
submit_by_function(SubmitBatch *b)
{
	SubmitCall	call = {b, NULL};
	char	   *detail;

	gridha_slot_set_state(GRIDHA_WS_SUBMITTING, b->service_id, b->batch_id);
	if (submit_step(submit_function_step, &call, "submit function", NULL) &&
		call.outcome != NULL &&
		(strcmp(call.outcome, "accepted") == 0 || strcmp(call.outcome, "delayed") == 0 ||
		 strcmp(call.outcome, "rejected") == 0))
	{
		detail = psprintf("submit function: %s", call.outcome);
		submit_batch_done(b, call.outcome, detail);
		return;
	}
	/* the function failed or said something else: try again later */
	detail = psprintf("submit function failed or returned \"%s\"",
					  call.outcome ? submit_clip(call.outcome, SUBMIT_ANSWER_MAX_BYTES) : "null");
	submit_batch_done(b, "delayed", detail);
}

/*
 * submit_http_done: a POST finished: its target's limit learns from it;
 * answers that delay a batch are warned about (once a minute per target
 * and code), failures without an answer counted and logged quietly
 * (gridha_target_note); the report is queued.
 */
static void
submit_http_done(GridhaHttpDone *done)
{
	SubmitBatch *b = (SubmitBatch *) done->tag;

	gridha_limit_done(gridha_limit_of(b->target), done, b->started_at, submit_away_ms);
	if (done->outcome == GRIDHA_SUBMIT_DELAYED && done->http_code != 0)
	{
		char		reason[64];

		snprintf(reason, sizeof(reason), "the ledger answered http %ld", done->http_code);
		gridha_target_warn_answer(b->target, reason);
	}
	else if (done->http_code == 0)
		(void) gridha_target_note(b->target, "POSTs got no answer", done->detail);
	submit_in_flight--;
	submit_in_hand = list_delete_ptr(submit_in_hand, b);
	submit_batch_done(b, gridha_http_outcome_name(done->outcome), done->detail);
}

static void submit_status_done(GridhaHttpDone *done);

/*
 * submit_start_waiting: POSTs every waiting batch whose target has room
 * (gridha_limit_start), in the order they were handed out; the others
 * keep waiting. Nothing starts once the worker is stopping.
 */
static void
submit_start_waiting(void)
{
	List	   *still = NIL;
	ListCell   *lc;
	MemoryContext old;

	if (submit_waiting == NIL || submit_multi == NULL || gridha_submit_stopping)
		return;
	old = MemoryContextSwitchTo(submit_batches_cxt);
	foreach(lc, submit_waiting)
	{
		SubmitBatch *b = lfirst(lc);
		GridhaLimit *l = gridha_limit_of(b->target);

		if (!gridha_limit_start(l, false))
		{
			still = lappend(still, b);
			continue;
		}
		gridha_slot_set_state(GRIDHA_WS_SUBMITTING, b->service_id, b->batch_id);
		b->started_at = GetCurrentTimestamp();
		(void) gridha_http_multi_submit(submit_multi, b, b->submit_url, &b->http,
										b->service_id, b->batch_id, (long long) b->epoch,
										b->attempt,
										b->payload ? VARDATA_ANY(b->payload) : "",
										b->payload ? VARSIZE_ANY_EXHDR(b->payload) : 0,
										gridha_submit_timeout_ms);
		l->in_flight++;
		submit_in_flight++;
		submit_in_hand = lappend(submit_in_hand, b);
	}
	list_free(submit_waiting);
	submit_waiting = still;
	MemoryContextSwitchTo(old);
}

/*
 * gridha_submit_poll: moves the requests in flight on, waiting up to
 * wait_ms for one to finish (with nothing in flight, for the latch, which
 * it leaves set for the caller to see), queues the reports of those that
 * did, and POSTs the waiting batches that now have room. Never blocks
 * longer than wait_ms. Returns how many requests finished.
 */
int
gridha_submit_poll(long wait_ms)
{
	GridhaHttpDone done[16];
	int			n;
	int			i;
	int			finished = 0;

	submit_away_ms = submit_last_poll == 0 ? 0 :
		(long) ((GetCurrentTimestamp() - submit_last_poll) / 1000);
	submit_start_waiting();
	if (submit_multi == NULL || gridha_http_multi_pending(submit_multi) == 0)
	{
		if (wait_ms > 0 && submit_waiting != NIL)
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 wait_ms, gridha_wait_event(GRIDHA_WAIT_LIMIT));
	}
	else
	{
		do
		{
			pgstat_report_wait_start(gridha_wait_event(submit_in_flight > 0 ?
															  GRIDHA_WAIT_LEDGER_ANSWER :
															  GRIDHA_WAIT_STATUS_POLL));
			n = gridha_http_multi_perform(submit_multi, wait_ms, done, lengthof(done));
			pgstat_report_wait_end();
			for (i = 0; i < n; i++)
			{
				if (done[i].is_status)
					submit_status_done(&done[i]);
				else
					submit_http_done(&done[i]);
			}
			finished += n;
			wait_ms = 0;
		} while (n == lengthof(done));
	}
	submit_start_waiting();
	submit_publish();
	submit_last_poll = GetCurrentTimestamp();
	return finished;
}

/*
 * gridha_submit_in_flight: what the worker has under way on the network:
 * POSTs in flight, batches waiting for room, status runs.
 */
int
gridha_submit_in_flight(void)
{
	return submit_in_flight + list_length(submit_waiting) + list_length(submit_runs);
}

/*
 * submit_start: sends a handed-out batch on its way: a POST (waiting for
 * room, then left in flight), a function call (its outcome known at once), or, when its
 * target cannot be used, a delay with the reason.
 */
static void
submit_start(SubmitBatch *b)
{
	MemoryContext old;

	if (b->problem == NULL && b->submit_url == NULL && submit_refuses_functions() != NULL)
		b->problem = MemoryContextStrdup(b->cxt, submit_refuses_functions());
	if (b->problem != NULL)
	{
		if (b->target != NULL)
			gridha_target_warn(b->target, b->problem);
		submit_batch_done(b, "delayed", b->problem);
	}
	else if (b->submit_url != NULL)
	{
		/* POSTed by submit_start_waiting, as soon as its target has room */
		old = MemoryContextSwitchTo(submit_batches_cxt);
		submit_waiting = lappend(submit_waiting, b);
		MemoryContextSwitchTo(old);
	}
	else
		submit_by_function(b);
}

/* What a reports step sends and learns */
typedef struct SubmitFlush
{
	List	   *reports;		/* SubmitReport * */
	bool		status;			/* ledger statuses, not submissions */
	List	   *committed;		/* fire-and-forget batches now pending */
} SubmitFlush;

/*
 * submit_refused: logs one report the database turned down; an error that
 * is not a refusal leaves a batch submitting under this worker, an orphan.
 */
static void
submit_refused(const char *what, const char *service_id, const char *batch_id,
			   const char *sqlstate, const char *message)
{
	if (strcmp(sqlstate, "RG001") == 0 || strcmp(sqlstate, "RG002") == 0)
		ereport(LOG,
				(errmsg("gridha worker dropped a batch: %s of batch \"%s\" of service \"%s\" refused: %s",
						what, batch_id, service_id, message)));
	else
	{
		ereport(LOG,
				(errmsg("gridha worker: %s of batch \"%s\" of service \"%s\" failed: %s (%s)",
						what, batch_id, service_id, message, sqlstate)));
		submit_orphans_due = true;
	}
}

/* Step: the queued reports, one statement for all of them */
static void
submit_flush_step(void *arg)
{
	SubmitFlush *flush = (SubmitFlush *) arg;
	int			n = list_length(flush->reports);
	Datum	   *sids = palloc(sizeof(Datum) * n);
	Datum	   *bids = palloc(sizeof(Datum) * n);
	Datum	   *epochs = palloc(sizeof(Datum) * n);
	Datum	   *words = palloc(sizeof(Datum) * n);
	Datum	   *details = palloc(sizeof(Datum) * n);
	Datum		args[6];
	uint64		i;
	int			k = 0;
	ListCell   *lc;

	foreach(lc, flush->reports)
	{
		SubmitReport *r = lfirst(lc);

		sids[k] = CStringGetTextDatum(r->service_id);
		bids[k] = CStringGetTextDatum(r->batch_id);
		epochs[k] = Int64GetDatum(r->epoch);
		words[k] = CStringGetTextDatum(r->word);
		details[k] = CStringGetTextDatum(r->detail ? r->detail : "");
		k++;
	}
	args[0] = submit_instance_datum();
	args[1] = gridha_text_array(sids, n);
	args[2] = gridha_text_array(bids, n);
	args[3] = gridha_int8_array(epochs, n);
	args[4] = gridha_text_array(words, n);
	args[5] = gridha_text_array(details, n);
	gridha_exec(flush->status ? &submit_statuses_stmt : &submit_reports_stmt, args, NULL, false);

	for (i = 0; i < SPI_processed; i++)
	{
		char	   *sid = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		char	   *bid = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		char	   *status = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3);
		char	   *sqlstate = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 4);
		ListCell   *rc;

		if (sqlstate != NULL)
		{
			submit_refused(flush->status ? "report_status" : "report_submission", sid, bid,
						   sqlstate, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 5));
			continue;
		}
		/* accepted by a target without a status source: committed at once */
		if (!flush->status && status != NULL && strcmp(status, "pending") == 0)
			foreach(rc, flush->reports)
			{
				SubmitReport *r = lfirst(rc);

				if (r->commit_after && strcmp(r->service_id, sid) == 0 &&
					strcmp(r->batch_id, bid) == 0)
				{
					MemoryContext old = MemoryContextSwitchTo(submit_cxt);

					flush->committed = lappend(flush->committed, r);
					MemoryContextSwitchTo(old);
				}
			}
	}
}

/*
 * submit_send: sends a list of reports, submissions or ledger statuses, in
 * one step. Returns the fire-and-forget
 * submissions that were accepted. A step that fails as a whole leaves its
 * batches submitting under this worker: orphans, found again later. When
 * it failed because one row stayed locked past the lock timeout (another
 * session holds a claim row), the reports are sent again one at a time, so
 * that only that row's report waits for the next try.
 */
static List *
submit_send(List *reports, bool status)
{
	SubmitFlush flush = {reports, status, NIL};
	ListCell   *lc;
	int			sqlstate;

	if (reports == NIL)
		return NIL;
	gridha_slot_set_state(GRIDHA_WS_REPORTING, NULL, NULL);
	if (submit_step(submit_flush_step, &flush,
					status ? "report_statuses" : "report_submissions", &sqlstate))
		return flush.committed;
	if (sqlstate != ERRCODE_LOCK_NOT_AVAILABLE || list_length(reports) == 1)
	{
		submit_orphans_due = true;
		return NIL;
	}
	flush.committed = NIL;
	foreach(lc, reports)
	{
		/* one row per statement: a refused row is logged by the step */
		SubmitFlush one = {list_make1(lfirst(lc)), status, NIL};

		if (submit_step(submit_flush_step, &one, status ? "report_status" : "report_submission",
						&sqlstate))
			flush.committed = list_concat(flush.committed, one.committed);
		else
			submit_orphans_due = true;
	}
	return flush.committed;
}

/*
 * submit_flush: sends every queued report: the submissions first, then the
 * ledger statuses, with "committed" for what a target without a status
 * source accepted. Returns how many were sent.
 */
static int
submit_flush(void)
{
	List	   *committed;
	int			n = list_length(submit_submissions) + list_length(submit_statuses);
	ListCell   *lc;

	committed = submit_send(submit_submissions, false);
	submit_submissions = NIL;
	foreach(lc, committed)
	{
		SubmitReport *r = lfirst(lc);

		submit_add_report(true, r->service_id, r->batch_id, r->epoch, "committed", NULL, false);
	}
	(void) submit_send(submit_statuses, true);
	submit_statuses = NIL;
	return n;
}

/* An orphan found by submit_orphans_step */
typedef struct SubmitOrphan
{
	char	   *service_id;
	char	   *batch_id;
	int64		epoch;
} SubmitOrphan;

/* Step: this worker's orphans, read as the worker's role; arg is a List ** */
static void
submit_orphans_step(void *arg)
{
	List	  **out = (List **) arg;
	Datum		args[1];
	uint64		i;
	MemoryContext old;

	args[0] = submit_instance_datum();
	gridha_exec(gridha_sql_generation() == GRIDHA_SQL_1_2 ? &submit_orphans_1_2_stmt :
				&submit_orphans_stmt, args, NULL, true);
	old = MemoryContextSwitchTo(submit_cxt);
	for (i = 0; i < SPI_processed; i++)
	{
		SubmitOrphan *o = palloc0(sizeof(SubmitOrphan));

		o->service_id = submit_text_col(i, 1, submit_cxt);
		o->batch_id = submit_text_col(i, 2, submit_cxt);
		o->epoch = gridha_col_int64(i, 3);
		*out = lappend(*out, o);
	}
	MemoryContextSwitchTo(old);
}

/*
 * submit_in_hand_has: whether the worker has this batch in hand: its POST
 * is in flight, or its outcome waits in the queued reports.
 */
static bool
submit_in_hand_has(const char *service_id, const char *batch_id)
{
	ListCell   *lc;

	foreach(lc, submit_in_hand)
	{
		SubmitBatch *b = lfirst(lc);

		if (strcmp(b->service_id, service_id) == 0 && strcmp(b->batch_id, batch_id) == 0)
			return true;
	}
	foreach(lc, submit_waiting)
	{
		SubmitBatch *b = lfirst(lc);

		if (strcmp(b->service_id, service_id) == 0 && strcmp(b->batch_id, batch_id) == 0)
			return true;
	}
	foreach(lc, submit_submissions)
	{
		SubmitReport *r = lfirst(lc);

		if (strcmp(r->service_id, service_id) == 0 && strcmp(r->batch_id, batch_id) == 0)
			return true;
	}
	return false;
}

/*
 * submit_recover_orphans: reports this worker's orphans delayed: batches
 * submitting under its claim that it does not have in hand (a report that
 * failed; an earlier run of the process). Run at the worker's first cycle
 * and after a report failed with an error. A batch whose POST is still in
 * flight is no orphan: its own report follows.
 */
static void
submit_recover_orphans(void)
{
	List	   *orphans = NIL;
	ListCell   *lc;

	if (!submit_step(submit_orphans_step, &orphans, "looking for batches not in hand", NULL))
		return;					/* submit_orphans_due stays set: next cycle */
	submit_orphans_due = false;
	foreach(lc, orphans)
	{
		SubmitOrphan *o = lfirst(lc);

		if (submit_in_hand_has(o->service_id, o->batch_id))
			continue;
		ereport(LOG,
				(errmsg("gridha worker: batch \"%s\" of service \"%s\" was submitting but not in hand: reported delayed",
						o->batch_id, o->service_id)));
		submit_add_report(false, o->service_id, o->batch_id, o->epoch, "delayed",
						  "its report had failed: submitted again", false);
	}
}

/* Step: the pending batches of this instance; arg is a List ** */
static void
submit_pending_step(void *arg)
{
	List	  **out = (List **) arg;
	Datum		args[2];
	uint64		i;
	MemoryContext old;

	/* first: a refresh runs SQL of its own, which would replace the rows */
	gridha_targets_refresh();
	args[0] = submit_instance_datum();
	args[1] = Int32GetDatum(SUBMIT_MONITOR_BATCHES);
	gridha_exec(&submit_pending_stmt, args, NULL, true);
	old = MemoryContextSwitchTo(submit_cxt);
	for (i = 0; i < SPI_processed; i++)
	{
		SubmitPending *p = palloc0(sizeof(SubmitPending));

		p->service_id = submit_text_col(i, 1, submit_cxt);
		p->batch_id = submit_text_col(i, 2, submit_cxt);
		p->status = submit_text_col(i, 3, submit_cxt);
		p->epoch = gridha_col_int64(i, 4);
		p->target = submit_text_col(i, 5, submit_cxt);
		*out = lappend(*out, p);
	}
	MemoryContextSwitchTo(old);
}

/* Step: call a target's status_function for some batch ids */
typedef struct SubmitStatusCall
{
	Oid			function;
	const char *target;
	GridhaStatusEntry *entries;
	int			n;
	bool		malformed;
} SubmitStatusCall;

static void
submit_status_function_step(void *arg)
{
	static const char *const words[] = {"pending", "valid", "committed", "invalid", "unknown"};
	SubmitStatusCall *call = (SubmitStatusCall *) arg;
	Datum	   *ids = palloc(sizeof(Datum) * call->n);
	FuncExpr   *expr;
	ExprContext *econtext;
	SetExprState *state;
	MemoryContext argcxt;
	Tuplestorestate *rows;
	TupleTableSlot *slot;
	TupleDesc	desc;
	Oid			rettype;
	List	   *got_ids = NIL;
	List	   *got_words = NIL;
	ListCell   *lc;
	ListCell   *lw;
	int			nest;
	int			k;

	submit_function_lock(call->function, "status_function", call->target, true);
	if (get_func_result_type(call->function, &rettype, &desc) != TYPEFUNC_COMPOSITE ||
		desc->natts != 2 || TupleDescAttr(desc, 0)->atttypid != TEXTOID ||
		TupleDescAttr(desc, 1)->atttypid != TEXTOID)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_INVALID_TARGET),
				 errmsg("status_function of target \"%s\" (OID %u) is not a status function",
						call->target, call->function)));
	for (k = 0; k < call->n; k++)
		ids[k] = CStringGetTextDatum(call->entries[k].batch_id);
	expr = makeFuncExpr(call->function, rettype,
						list_make1(submit_text_const(TEXTARRAYOID, gridha_text_array(ids, call->n), false)),
						InvalidOid, DEFAULT_COLLATION_OID, COERCE_EXPLICIT_CALL);
	expr->funcretset = true;
	econtext = CreateStandaloneExprContext();
	argcxt = AllocSetContextCreate(CurrentMemoryContext, "gridha status function arguments",
								   ALLOCSET_DEFAULT_SIZES);
	nest = submit_call_begin(call->target);
	state = ExecInitTableFunctionResult((Expr *) expr, econtext, NULL);
	rows = ExecMakeTableFunctionResult(state, econtext, argcxt, desc, false);
	slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
	while (tuplestore_gettupleslot(rows, true, false, slot))
	{
		bool		isnull;
		Datum		d;
		char	   *w = NULL;

		d = slot_getattr(slot, 1, &isnull);
		got_ids = lappend(got_ids, isnull ? NULL : TextDatumGetCString(d));
		d = slot_getattr(slot, 2, &isnull);
		if (!isnull)
		{
			w = TextDatumGetCString(d);
			w = str_tolower(w, strlen(w), DEFAULT_COLLATION_OID);
		}
		got_words = lappend(got_words, w);
	}
	ExecDropSingleTupleTableSlot(slot);
	tuplestore_end(rows);
	FreeExprContext(econtext, true);
	MemoryContextDelete(argcxt);
	submit_call_end(nest);

	/* check every row first: an unknown word means nothing is applied */
	foreach(lw, got_words)
	{
		char	   *w = lfirst(lw);
		bool		known = false;

		for (k = 0; k < lengthof(words); k++)
			if (w != NULL && strcmp(w, words[k]) == 0)
				known = true;
		if (!known)
		{
			call->malformed = true;
			return;
		}
	}
	forboth(lc, got_ids, lw, got_words)
	{
		char	   *id = lfirst(lc);

		for (k = 0; k < call->n; k++)
			if (id != NULL && strcmp(id, call->entries[k].batch_id) == 0)
				strlcpy(call->entries[k].status, lfirst(lw), sizeof(call->entries[k].status));
	}
}

/* ----------------------------------------------------------------------
 * Batches the status answers left out
 * ----------------------------------------------------------------------
 */

/* submit_omitted_key: the hash key of a batch */
static uint64
submit_omitted_key(const char *service_id, const char *batch_id)
{
	uint64		h = hash_bytes_extended((const unsigned char *) service_id,
										(int) strlen(service_id), 0);

	return hash_bytes_extended((const unsigned char *) batch_id, (int) strlen(batch_id), h);
}

/*
 * submit_omitted_find: the entry of a batch, NULL when it has none; with
 * create, a new entry (count 0) when it has none. Two batches of the same
 * key (a hash collision) share the entry: the newer one takes it over.
 */
static SubmitOmitted *
submit_omitted_find(const char *service_id, const char *batch_id, bool create)
{
	uint64		key = submit_omitted_key(service_id, batch_id);
	SubmitOmitted *o;
	bool		found;

	if (submit_omitted == NULL)
	{
		HASHCTL		ctl;

		if (!create)
			return NULL;
		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(uint64);
		ctl.entrysize = sizeof(SubmitOmitted);
		ctl.hcxt = TopMemoryContext;
		submit_omitted = hash_create("gridha omitted batches", 64, &ctl,
									 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	o = hash_search(submit_omitted, &key, create ? HASH_ENTER : HASH_FIND, &found);
	if (o == NULL)
		return NULL;
	if (found && strcmp(o->service_id, service_id) == 0 && strcmp(o->batch_id, batch_id) == 0)
		return o;
	if (!create)
		return NULL;
	if (found)
	{
		pfree(o->service_id);
		pfree(o->batch_id);
	}
	o->service_id = MemoryContextStrdup(TopMemoryContext, service_id);
	o->batch_id = MemoryContextStrdup(TopMemoryContext, batch_id);
	o->epoch = 0;
	o->count = 0;
	o->total = 0;
	o->next_at = 0;
	o->seen_at = GetCurrentTimestamp();
	return o;
}

/* submit_omitted_drop: the batch's entry goes */
static void
submit_omitted_drop(SubmitOmitted *o)
{
	uint64		key = o->key;

	pfree(o->service_id);
	pfree(o->batch_id);
	(void) hash_search(submit_omitted, &key, HASH_REMOVE, NULL);
}

/*
 * submit_omitted_sweep: the entries of batches not read as pending for
 * twice the longest pause go (they moved on: committed, or taken by
 * another worker); with all, every entry goes.
 */
static void
submit_omitted_sweep(bool all)
{
	HASH_SEQ_STATUS seq;
	SubmitOmitted *o;
	TimestampTz now = GetCurrentTimestamp();

	if (submit_omitted == NULL)
		return;
	hash_seq_init(&seq, submit_omitted);
	while ((o = hash_seq_search(&seq)) != NULL)
	{
		if (all || TimestampDifferenceExceeds(o->seen_at, now, 2 * GRIDHA_BACKOFF_MAX_MS))
			submit_omitted_drop(o);
	}
}

/*
 * submit_omitted_note: a well-formed status answer of target left out the
 * pending batch p: counted, logged (a line a minute per target at most),
 * asked about again after a pause that doubles each time; after
 * gridha.status_omitted_limit such answers in a row, reported unknown.
 */
static void
submit_omitted_note(const char *target, const SubmitPending *p, TimestampTz now)
{
	SubmitOmitted *o = submit_omitted_find(p->service_id, p->batch_id, true);
	char		detail[256];
	int64		ms;

	if (o->epoch != p->epoch)
	{
		o->epoch = p->epoch;
		o->count = 0;
		o->total = 0;
	}
	o->count++;
	o->total++;
	o->seen_at = now;
	ms = Min((int64) gridha_monitor_interval_ms << Min(o->total, 16), SUBMIT_OMITTED_MAX_MS);
	o->next_at = TimestampTzPlusMilliseconds(now, ms);
	gridha_totals_note(target, GRIDHA_TOTAL_STATUS_OMITTED);
	if (gridha_status_omitted_limit > 0 && o->count >= gridha_status_omitted_limit)
	{
		snprintf(detail, sizeof(detail),
				 "batch \"%s\" of service \"%s\", left out %d times in a row",
				 p->batch_id, p->service_id, o->total);
		(void) gridha_target_note(target,
								  "a batch the status answers kept leaving out is reported unknown and submitted again",
								  detail);
		submit_add_report(true, p->service_id, p->batch_id, p->epoch, "unknown", NULL, false);
		o->count = 0;
		return;
	}
	snprintf(detail, sizeof(detail),
			 "batch \"%s\" of service \"%s\" (%d in a row; asked again in " INT64_FORMAT " ms)",
			 p->batch_id, p->service_id, o->total, ms);
	(void) gridha_target_note(target, "a status answer left out a batch asked about", detail);
}

/*
 * submit_omitted_resting: whether p is left out of this round's questions:
 * an answer left it out, and its pause has not passed. Marks its entry as
 * seen this round.
 */
static bool
submit_omitted_resting(const SubmitPending *p, TimestampTz now)
{
	SubmitOmitted *o = submit_omitted_find(p->service_id, p->batch_id, false);

	if (o == NULL)
		return false;
	o->seen_at = now;
	if (o->epoch != p->epoch)
	{
		o->epoch = p->epoch;
		o->count = 0;
		o->total = 0;
		o->next_at = 0;
	}
	return now < o->next_at;
}

/*
 * submit_apply_statuses: queues a report for each of the n pending
 * batches of target whose status the ledger's word in entries changes. An
 * entry no answer spoke of (SUBMIT_NOT_ANSWERED: its GET failed) is left
 * for the next round; one a well-formed answer left out ("") is omitted.
 */
static void
submit_apply_statuses(const char *target, SubmitPending *const *rows,
					  GridhaStatusEntry *entries, int n)
{
	TimestampTz now = GetCurrentTimestamp();
	int			k;

	for (k = 0; k < n; k++)
	{
		const SubmitPending *p = rows[k];
		SubmitOmitted *o;

		if (strcmp(entries[k].status, SUBMIT_NOT_ANSWERED) == 0)
			continue;
		if (entries[k].status[0] == '\0')
		{
			submit_omitted_note(target, p, now);
			continue;
		}
		if ((o = submit_omitted_find(p->service_id, p->batch_id, false)) != NULL)
			submit_omitted_drop(o);
		if (strcmp(entries[k].status, p->status) == 0)
			continue;
		submit_add_report(true, p->service_id, p->batch_id, p->epoch,
						  entries[k].status, NULL, false);
	}
}

/*
 * submit_status_start: starts a status run for n pending batches of a
 * target with a status_url, unless one is still out for it (the batches
 * are asked about again next round). The rows are copied: the run
 * outlives the cycle.
 */
static void
submit_status_start(const GridhaTarget *t, const char *target, SubmitPending *const *rows, int n)
{
	GridhaLimit *l = gridha_limit_of(target);
	GridhaHttpTarget http = {(const char *const *) t->headers, t->n_headers,
	t->reject_codes, t->n_reject_codes};
	MemoryContext cxt;
	MemoryContext old;
	SubmitStatusRun *run;
	int			k;

	if (l->status_running || submit_multi == NULL || gridha_submit_stopping ||
		GetCurrentTimestamp() < l->retry_at)
		return;
	cxt = AllocSetContextCreate(submit_batches_cxt, "gridha status run", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cxt);
	run = palloc0(sizeof(SubmitStatusRun));
	run->cxt = cxt;
	run->target = pstrdup(target);
	run->n = n;
	run->rows = palloc0(sizeof(SubmitPending) * n);
	run->entries = palloc0(sizeof(GridhaStatusEntry) * n);
	for (k = 0; k < n; k++)
	{
		run->rows[k].service_id = pstrdup(rows[k]->service_id);
		run->rows[k].batch_id = pstrdup(rows[k]->batch_id);
		run->rows[k].status = pstrdup(rows[k]->status);
		run->rows[k].epoch = rows[k]->epoch;
		run->entries[k].batch_id = run->rows[k].batch_id;
		strlcpy(run->entries[k].status, SUBMIT_NOT_ANSWERED, sizeof(run->entries[k].status));
	}
	MemoryContextSwitchTo(old);

	(void) gridha_limit_start(l, true);
	run->started_at = GetCurrentTimestamp();
	if (gridha_http_multi_statuses(submit_multi, run, t->status_url, &http, run->entries, n,
								   (size_t) gridha_status_url_max_length,
								   gridha_submit_timeout_ms) != 0)
	{
		MemoryContextDelete(cxt);
		return;
	}
	l->status_running = true;
	l->in_flight++;
	old = MemoryContextSwitchTo(submit_batches_cxt);
	submit_runs = lappend(submit_runs, run);
	MemoryContextSwitchTo(old);
}

/*
 * submit_status_done: a status run came back: its target's limit learns
 * from it, a failure is counted and logged quietly (the batches it did not
 * answer for are asked about again next round), and the answers that came
 * are applied either way.
 */
static void
submit_status_done(GridhaHttpDone *done)
{
	SubmitStatusRun *run = (SubmitStatusRun *) done->tag;
	GridhaLimit *l = gridha_limit_of(run->target);
	SubmitPending **rows = palloc(sizeof(SubmitPending *) * Max(run->n, 1));
	int			k;

	l->status_running = false;
	gridha_limit_done(l, done, run->started_at, submit_away_ms);
	if (done->failed)
		(void) gridha_target_note(run->target,
								  done->http_code == 0 ? "status URL unreachable" : "status poll failed",
								  done->detail);
	for (k = 0; k < run->n; k++)
		rows[k] = &run->rows[k];
	submit_apply_statuses(run->target, rows, run->entries, run->n);
	pfree(rows);
	submit_runs = list_delete_ptr(submit_runs, run);
	MemoryContextDelete(run->cxt);
}

/*
 * submit_ask_ledger: asks a target about n pending batches: a status run
 * for a status_url (its answers are applied when it comes back), or at
 * once for a status_function or a target without a status source.
 */
static void
submit_ask_ledger(const char *target, SubmitPending *const *rows, int n)
{
	const GridhaTarget *t = gridha_target_get(target);
	GridhaStatusEntry *entries;
	int			k;

	if (t == NULL || t->unusable != NULL)
	{
		gridha_target_warn(target, t ? t->unusable : "the target row is missing");
		return;
	}
	if (t->status_url != NULL)
	{
		submit_status_start(t, target, rows, n);
		return;
	}
	entries = palloc0(sizeof(GridhaStatusEntry) * n);
	for (k = 0; k < n; k++)
		entries[k].batch_id = rows[k]->batch_id;
	if (OidIsValid(t->status_function))
	{
		SubmitStatusCall call = {t->status_function, target, entries, n, false};

		if (submit_refuses_functions() != NULL)
		{
			gridha_target_warn(target, submit_refuses_functions());
			return;
		}
		if (!submit_step(submit_status_function_step, &call, "status function", NULL))
			return;
		if (call.malformed)
		{
			(void) gridha_target_note(target, "status function returned an unknown status word",
									  "nothing was applied; the poll is repeated");
			return;
		}
	}
	else
	{
		/*
		 * No status source: an accepted batch is committed, and was reported
		 * so at submission; one still pending here is one whose report
		 * failed then.
		 */
		for (k = 0; k < n; k++)
			strlcpy(entries[k].status, "committed", sizeof(entries[k].status));
	}
	submit_apply_statuses(target, rows, entries, n);
}

/*
 * submit_monitor: asks each target about this instance's pending batches;
 * a report is queued for each one whose status changed (for a status_url,
 * when its status run comes back).
 */
static void
submit_monitor(void)
{
	List	   *pending = NIL;
	SubmitPending **rows;
	TimestampTz now;
	int			start = 0;
	int			npending = 0;
	ListCell   *lc;

	gridha_slot_set_state(GRIDHA_WS_MONITORING, NULL, NULL);
	if (!submit_step(submit_pending_step, &pending, "pending_batches", NULL))
		return;
	/* the batches an answer left out wait out their pause */
	now = GetCurrentTimestamp();
	rows = palloc(sizeof(SubmitPending *) * Max(list_length(pending), 1));
	foreach(lc, pending)
	{
		SubmitPending *p = lfirst(lc);

		if (!submit_omitted_resting(p, now))
			rows[npending++] = p;
	}
	submit_omitted_sweep(false);
	if (npending == 0)
		return;

	/* one run of batches per target (the rows are sorted by target) */
	while (start < npending)
	{
		int			end = start + 1;

		while (end < npending && strcmp(rows[end]->target, rows[start]->target) == 0)
			end++;
		submit_ask_ledger(rows[start]->target, rows + start, end - start);
		start = end;
	}
}

/*
 * Step: the maintenance tick, when this worker leads the role (see
 * leader.c); run_maintenance itself decides whether a tick is due.
 */
static void
submit_maintenance_step(void *arg)
{
	Datum		args[1];

	args[0] = submit_instance_datum();
	gridha_exec(&submit_maintenance_stmt, args, NULL, false);
}

/*
 * gridha_submit_wait_ms: how long an idle worker may sleep: max_ms, or less
 * when the last hand-out found ready heads waiting only for the next slot
 * of their rate-limited target, which opens sooner.
 */
long
gridha_submit_wait_ms(long max_ms)
{
	if (submit_slot_ms >= 0 && submit_slot_ms < max_ms)
		return submit_slot_ms;
	return max_ms;
}

/*
 * gridha_submit_cycle: one cycle. Returns true when it did something that
 * may make more work ready at once (batches handed out, reports sent), so
 * the caller goes round again without sleeping.
 */
bool
gridha_submit_cycle(void)
{
	MemoryContext old = MemoryContextSwitchTo(submit_cxt);
	bool		busy = false;
	TimestampTz now;
	ListCell   *lc;

	if (submit_orphans_due)
		submit_recover_orphans();

	if (submit_handout_room() > 0 && !gridha_submit_stopping)
	{
		SubmitHandout handout = {submit_handout_room(), NIL};

		gridha_slot_set_state(GRIDHA_WS_HANDING_OUT, NULL, NULL);
		if (submit_step(submit_handout_step, &handout, "next_batches", NULL))
		{
			foreach(lc, handout.batches)
				submit_start((SubmitBatch *) lfirst(lc));
			submit_start_waiting();
			busy = handout.batches != NIL;
		}
		else
		{
			/* the batches it may have read are not handed out: forget them */
			foreach(lc, handout.batches)
				MemoryContextDelete(((SubmitBatch *) lfirst(lc))->cxt);
			gridha_slot_set_state(GRIDHA_WS_BACKING_OFF, NULL, NULL);
		}
	}
	gridha_submit_poll(0);

	now = GetCurrentTimestamp();
	if (TimestampDifferenceExceeds(submit_last_monitor, now, gridha_monitor_interval_ms))
	{
		/*
		 * The answers of the last status runs go in first. A batch whose
		 * answer was still queued would read as pending and be asked about
		 * again; by the time that second answer came, the first could have
		 * had it handed out anew, and a status report may move a batch
		 * submitting under the same epoch: a batch the ledger did not know
		 * was POSTed twice at once. Applied first, the pending batches read
		 * are those no question is out for.
		 */
		if (submit_flush() > 0)
			busy = true;
		submit_last_monitor = now;
		submit_monitor();
	}
	if (submit_flush() > 0)
		busy = true;

	if (TimestampDifferenceExceeds(submit_last_maintenance, now, gridha_maintenance_interval_ms))
	{
		submit_last_maintenance = now;
		(void) submit_step(submit_maintenance_step, NULL, "run_maintenance", NULL);
	}
	gridha_target_notes_flush();
	submit_publish();
	MemoryContextSwitchTo(old);
	/* everything of this cycle is reported: its memory can go */
	MemoryContextReset(submit_cxt);
	return busy;
}

/*
 * gridha_submit_drain: at stop, in well under a second: the batches still
 * waiting are handed back (reported delayed: they were never sent), the
 * POSTs in flight get SUBMIT_STOP_DRAIN_MS to be answered, and those that
 * were not are let go and reported delayed too (the ledger may have taken
 * them: it sees them again from their next holder, as a duplicate). Status
 * runs are let go: their batches stay pending, asked about by the next
 * holder. Every outcome is reported.
 */
void
gridha_submit_drain(void)
{
	MemoryContext old = MemoryContextSwitchTo(submit_cxt);
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), SUBMIT_STOP_DRAIN_MS);
	ListCell   *lc;

	foreach(lc, submit_waiting)
		submit_batch_done((SubmitBatch *) lfirst(lc), "delayed",
						  "the worker stopped before sending it");
	submit_waiting = NIL;
	while (submit_in_flight > 0 && GetCurrentTimestamp() < until)
		gridha_submit_poll(20);
	if (submit_multi != NULL)
		gridha_http_multi_destroy(submit_multi);
	submit_multi = NULL;
	foreach(lc, submit_in_hand)
		submit_batch_done((SubmitBatch *) lfirst(lc), "delayed",
						  "no answer before the worker stopped: submitted again");
	submit_in_hand = NIL;
	submit_in_flight = 0;
	submit_runs = NIL;
	(void) submit_flush();
	MemoryContextSwitchTo(old);
	MemoryContextReset(submit_cxt);
}

/*
 * gridha_submit_forget: the extension was dropped: nothing under way can
 * be reported any more. The POSTs in flight are let go, and the next
 * cycle starts afresh (looking for orphans of its own, and asking which
 * SQL version is installed).
 */
void
gridha_submit_forget(void)
{
	ListCell   *lc;

	if (submit_multi != NULL)
		gridha_http_multi_destroy(submit_multi);
	submit_multi = gridha_http_multi_create();
	if (submit_multi == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("gridha worker could not initialise libcurl")));
	MemoryContextReset(submit_batches_cxt);
	MemoryContextReset(submit_cxt);
	submit_in_flight = 0;
	submit_in_hand = NIL;
	submit_waiting = NIL;
	submit_runs = NIL;
	submit_conn_host = submit_conn_total = 0;
	submit_omitted_sweep(true);
	foreach(lc, gridha_limits)
	{
		GridhaLimit *l = lfirst(lc);

		l->in_flight = 0;
		l->status_running = false;
	}
	submit_submissions = NIL;
	submit_statuses = NIL;
	submit_orphans_due = true;
	gridha_slot_set_in_flight(0);
}
