/*-------------------------------------------------------------------------
 *
 * leader12.c
 *		SQL 1.2's lease and maintenance calls, served until ALTER EXTENSION
 *		gridha UPDATE (docs/operations.md, Upgrading): gridha.lead,
 *		renew_lead, resign_lead, run_maintenance, prune_batches and the
 *		deprecated try_lead and resign, as 1.2's install script names their
 *		C symbols, and the hand-outs' poll duty on a 1.2 schema. Since SQL
 *		1.3 these are functions of the install script (src/leader.c holds
 *		their C helpers); this file goes when the library stops serving 1.2.
 *		The code is 1.2's own, its statements in 1.2's words: the column
 *		that names a duty is role, and gridha's maintenance duty is
 *		'maintenance'.
 *
 * Words:
 *   role      a duty: the name of a singleton duty; each has one row in
 *             gridha.leases. Names that begin with "gridha." are refused
 *             (RG025), as 1.2's library refused them.
 *   lease     who leads a role (leader), since when, and until when
 *             (expires_at); it lasts gridha.soft_expiry from its last
 *             renewal, like a claim
 *   term      a counter per role, incremented every time the leader
 *             changes (or the role is taken after a resignation); a lease is
 *             renewed only under the term it was taken with
 *   tick      one run of a role's duties, named by the start of its slot of
 *             the server clock: floor(now / interval) * interval, in
 *             milliseconds since 1970, with gridha.maintenance_interval as
 *             the interval. Ticks are rows of gridha.maintenance_ticks keyed
 *             by (role, tick): a second, stale leader that tries the same
 *             tick hits the key and backs off, and a tick that is not past
 *             every stored tick of its role is not run at all (the clock went
 *             back: wait). After a jump forward, only the current tick runs.
 *   prune step one bounded DELETE of final batches finished longer than
 *             gridha.retention ago, oldest first (src/leader.c says how)
 *   poll duty what every instance's hand-out does at most once per
 *             gridha.prune_interval in its backend: read gridha's
 *             maintenance lease, take it when it is free or expired, and as
 *             its leader run the tick when one is due and one prune step
 *
 * A run's duties happen in the same transaction as its tick row: a run that
 * fails leaves no tick behind and is retried at the next call. The poll
 * duty runs in a subtransaction of the hand-out's: a failure of its own
 * (a lock timeout, say) is logged and undone, never the hand-out's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common.h"
#include "counts.h"
#include "generation.h"
#include "idseq.h"
#include "instances.h"
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


#define LEADER_READ_SQL(D) \
	"SELECT coalesce(l.leader = $1, false), l.term," \
	"       coalesce(l.expires_at > now(), false)," \
	"       coalesce(l.renewed_at <= now() - $3 * interval '1 millisecond', true)" \
	"  FROM gridha.leases l" \
	" WHERE l." D " = $2"
/*
 * The column that names a duty is role in SQL 1.2 (gridha.leases,
 * gridha.maintenance_ticks); the statements are made from texts that name
 * it, as 1.2's library made both generations' forms.
 */

static GridhaStatement leader_read_stmt = {
	LEADER_READ_SQL("role"), 3, {UUIDOID, TEXTOID, INT8OID}
};

/*
 * Take or renew: the row lock of the upsert and the re-check of its WHERE
 * on the newest row version make two would-be leaders agree on one.
 */
#define LEADER_TAKE_SQL(D) \
	"INSERT INTO gridha.leases AS l" \
	"       (" D ", leader, term, acquired_at, renewed_at, expires_at)" \
	" VALUES ($2, $1, 1, now(), now(), now() + $3 * interval '1 millisecond')" \
	" ON CONFLICT (" D ") DO UPDATE" \
	"   SET leader = $1," \
	"       term = CASE WHEN l.leader = $1 THEN l.term ELSE l.term + 1 END," \
	"       acquired_at = CASE WHEN l.leader = $1 THEN l.acquired_at ELSE now() END," \
	"       renewed_at = now()," \
	"       expires_at = EXCLUDED.expires_at" \
	" WHERE l.leader = $1 OR l.leader IS NULL OR l.expires_at <= now()" \
	" RETURNING l.term"

static GridhaStatement leader_take_stmt = {
	LEADER_TAKE_SQL("role"), 3, {UUIDOID, TEXTOID, INT8OID}
};

#define LEADER_RENEW_SQL(D) \
	"UPDATE gridha.leases" \
	"   SET renewed_at = now(), expires_at = now() + $4 * interval '1 millisecond'" \
	" WHERE " D " = $2 AND leader = $1 AND term = $3"

static GridhaStatement leader_renew_stmt = {
	LEADER_RENEW_SQL("role"), 4, {UUIDOID, TEXTOID, INT8OID, INT8OID}
};

#define LEADER_RESIGN_SQL(D) \
	"UPDATE gridha.leases" \
	"   SET leader = NULL, expires_at = NULL, renewed_at = now()" \
	" WHERE " D " = $2 AND leader = $1"

static GridhaStatement leader_resign_stmt = {
	LEADER_RESIGN_SQL("role"), 2, {UUIDOID, TEXTOID}
};

/*
 * Before the poll duty writes a lease (takes or renews it), it makes sure
 * it will not wait for anyone: no other backend is taking the role in an
 * open transaction (the role's lock, leader_trylock, held to the end of
 * the hand-out's transaction), and the lease row, when there is one, is
 * not locked.
 */
#define LEADER_ROW_FREE_SQL(D) \
	"SELECT NOT EXISTS (SELECT 1 FROM gridha.leases l WHERE l." D " = $1)" \
	"       OR EXISTS (SELECT 1 FROM gridha.leases l WHERE l." D " = $1" \
	"                     FOR UPDATE SKIP LOCKED)"

static GridhaStatement leader_row_free_stmt = {
	LEADER_ROW_FREE_SQL("role"), 1, {TEXTOID}
};

/* The current tick: the start of now()'s slot, in ms since 1970. */
#define LEADER_TICK_EXPR \
	"(floor(extract(epoch FROM now()) * 1000 / $4) * $4)::int8"

#define LEADER_TICK_SQL(D) \
	"INSERT INTO gridha.maintenance_ticks AS m (" D ", tick, term, leader, started_at)" \
	" SELECT $1, t.tick, $3, $2, now()" \
	"   FROM (SELECT " LEADER_TICK_EXPR " AS tick) t" \
	"  WHERE EXISTS (SELECT 1 FROM gridha.leases l" \
	"                 WHERE l." D " = $1 AND l.leader = $2 AND l.term = $3" \
	"                   AND l.expires_at > now())" \
	"    AND NOT EXISTS (SELECT 1 FROM gridha.maintenance_ticks p" \
	"                     WHERE p." D " = $1 AND p.tick >= t.tick)" \
	" ON CONFLICT (" D ", tick) DO NOTHING" \
	" RETURNING m.tick"

static GridhaStatement leader_tick_stmt = {
	LEADER_TICK_SQL("role"), 4, {TEXTOID, UUIDOID, INT8OID, INT8OID}
};

/* Why no tick was run: the current tick, the highest stored, the lease. */
#define LEADER_WHY_SQL(D) \
	"SELECT t.tick," \
	"       (SELECT max(p.tick) FROM gridha.maintenance_ticks p WHERE p." D " = $1)," \
	"       EXISTS (SELECT 1 FROM gridha.leases l" \
	"                WHERE l." D " = $1 AND l.leader = $2 AND l.term = $3" \
	"                  AND l.expires_at > now())" \
	"  FROM (SELECT " LEADER_TICK_EXPR " AS tick) t"

static GridhaStatement leader_why_stmt = {
	LEADER_WHY_SQL("role"), 4, {TEXTOID, UUIDOID, INT8OID, INT8OID}
};

/*
 * The sweep of long-unseen instances: deletes those that hold nothing (no
 * claim, no lease of a duty), each locked first and skipped when another
 * transaction holds it: an instance taking claims as the sweep runs writes
 * its row before it commits. A delete that commits first makes that take
 * fail instead (claims.c). A take that committed after this statement's
 * snapshot is not seen by its NOT EXISTS: the instances_guard_claims
 * trigger (SQL 1.3) then refuses the delete, and this maintenance step is
 * undone and runs again at the next tick, which sees the claims.
 */
static GridhaStatement leader_sweep_stmt = {
	"WITH gone AS ("
	"  SELECT i.instance_id FROM gridha.instances i"
	"   WHERE greatest(i.registered_at, i.last_seen_at, i.stopped_at)"
	"         < now() - $1 * interval '1 second'"
	"     AND NOT EXISTS (SELECT 1 FROM gridha.service_claims c"
	"                      WHERE c.claimant = i.instance_id)"
	"     AND NOT EXISTS (SELECT 1 FROM gridha.leases l"
	"                      WHERE l.leader = i.instance_id)"
	"   FOR UPDATE OF i SKIP LOCKED"
	"), d AS ("
	"  DELETE FROM gridha.instances i USING gone"
	"   WHERE i.instance_id = gone.instance_id"
	"  RETURNING 1"
	")"
	" SELECT count(*)::int4 FROM d",
	1, {INT8OID}
};

/*
 * One prune step: scan looks at the next batches by creation time (at
 * most $2 * 2, from $3 on, all created before the cutoff), old keeps the
 * oldest $2 final ones among them finished before the cutoff, picked from
 * scan's rows (so the table is read by row address only, whatever the
 * planner thinks of sorting), locked (rows another transaction holds are
 * skipped, not waited for), and d
 * deletes them by their row address. The status is checked again on the
 * row deleted; the batches_unfinished trigger would refuse the rest
 * anyway. Returns the count deleted, the count looked at, the newest
 * creation time looked at and the newest deleted.
 */
static GridhaStatement leader_prune_stmt = {
	"WITH scan AS MATERIALIZED ("
	"  SELECT b.ctid, b.created_at, b.status, b.finished_at FROM gridha.batches b"
	"   WHERE b.created_at >= $3"
	"     AND b.created_at < now() - $1 * interval '1 second'"
	"   ORDER BY b.created_at"
	"   LIMIT $2 * 2"
	"), old AS ("
	"  SELECT b.ctid FROM gridha.batches b"
	"   WHERE b.ctid = ANY (ARRAY(SELECT s.ctid FROM scan s"
	"                              WHERE s.status IN ('committed', 'invalid')"
	"                                AND s.finished_at < now() - $1 * interval '1 second'"
	"                              ORDER BY s.created_at"
	"                              LIMIT $2))"
	"     AND b.status IN ('committed', 'invalid')"
	"   FOR UPDATE OF b SKIP LOCKED"
	"), d AS ("
	"  DELETE FROM gridha.batches b"
	"   WHERE b.ctid = ANY (ARRAY(SELECT old.ctid FROM old))"
	"     AND b.status IN ('committed', 'invalid')"
	"  RETURNING b.created_at"
	")"
	" SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM scan),"
	"        (SELECT max(s.created_at) FROM scan s), (SELECT max(d.created_at) FROM d)",
	3, {INT8OID, INT8OID, TIMESTAMPTZOID}
};

/*
 * Where this backend's next prune step starts in batches_created: after a
 * step that deleted its full chunk, the newest creation time it deleted;
 * after one that looked at all it may, the newest it looked at; so that
 * consecutive steps walk on instead of over the index entries of what the
 * previous ones deleted (dead until vacuum) or kept (batches not final).
 * -infinity after a step that reached the cutoff: then everything old is
 * looked at again, batches skipped as locked or not final yet included.
 */
static TimestampTz leader_prune_from = DT_NOBEGIN;

/*
 * The service counts checked against the services there are, and a count
 * gone wrong repaired (counts.c explains how one can drift): the
 * difference, as this statement's snapshot sees both, is added to shard
 * 0's row of the target, rows written in target order as counts.c writes
 * them. Returns the targets repaired.
 */
static GridhaStatement leader_counts_stmt = {
	"WITH a AS ("
	"  SELECT target, count(*)::int8 AS n FROM gridha.service_claims GROUP BY target"
	"), k AS ("
	"  SELECT target, sum(services)::int8 AS n FROM gridha.service_counts GROUP BY target"
	"), d AS ("
	"  SELECT coalesce(a.target, k.target) AS target, coalesce(a.n, 0) - coalesce(k.n, 0) AS diff"
	"    FROM a FULL JOIN k ON k.target = a.target"
	"), w AS ("
	"  INSERT INTO gridha.service_counts AS c (target, shard, services)"
	"  SELECT d.target, 0, d.diff FROM d WHERE d.diff <> 0"
	"   ORDER BY d.target COLLATE \"C\""
	"  ON CONFLICT (target, shard) DO UPDATE SET services = c.services + excluded.services"
	"  RETURNING c.target"
	")"
	" SELECT string_agg(w.target, ', ' ORDER BY w.target) FROM w",
	0, {InvalidOid}
};

/* Old tick rows go after a day; the newest one of the role always stays. */
#define LEADER_PRUNE_TICKS_SQL(D) \
	"DELETE FROM gridha.maintenance_ticks" \
	" WHERE " D " = $1 AND tick < $2 AND started_at < now() - interval '1 day'"

static GridhaStatement leader_prune_ticks_stmt = {
	LEADER_PRUNE_TICKS_SQL("role"), 2, {TEXTOID, INT8OID}
};

#define LEADER_RECORD_SQL(D) \
	"UPDATE gridha.maintenance_ticks" \
	"   SET finished_at = clock_timestamp(), swept_instances = $3," \
	"       pruned_batches = $4, opened_windows = $5" \
	" WHERE " D " = $1 AND tick = $2"

static GridhaStatement leader_record_stmt = {
	LEADER_RECORD_SQL("role"), 5, {TEXTOID, INT8OID, INT4OID, INT8OID, INT4OID}
};

/* The rate limits' hand-out log keeps a day (SQL 1.3: rate_handouts_prune) */
static GridhaStatement leader12_rate_prune_stmt = {
	"DELETE FROM gridha.rate_handouts WHERE slot_at < now() - interval '1 day'",
	0, {InvalidOid}
};

/* leader12_rate_log_prune: the hand-out log's rows older than a day go */
static void
leader12_rate_log_prune(void)
{
	gridha_exec(&leader12_rate_prune_stmt, NULL, NULL, false);
}

static bool leader_trylock(text *role);

/* The prefix of the duty names gridha keeps for itself (SQL 1.3) */
#define LEADER_RESERVED_PREFIX "gridha."

/* gridha's own maintenance duty in SQL 1.2 */
#define LEADER12_DUTY "maintenance"

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
						   LEADER_RESERVED_PREFIX, LEADER_RESERVED_PREFIX "maintenance"),
				 errhint("Name your duty otherwise; to run gridha's maintenance, call gridha.run_maintenance.")));
}

/*
 * gridha_leader12_resign_own: gives up gridha's maintenance lease if the
 * instance holds it (release_claims: an instance that leaves hands its
 * duty on at once, not at the lease's expiry). Inside SPI, after the
 * call's claim rows (a lease row comes after them, as in a hand-out's poll
 * duty). Returns whether it held it.
 */
bool
gridha_leader12_resign_own(Datum instance_id)
{
	Datum		args[2];

	args[0] = instance_id;
	args[1] = CStringGetTextDatum(LEADER12_DUTY);
	gridha_exec(&leader_resign_stmt, args, NULL, false);
	return SPI_processed > 0;
}

/*
 * leader_lead: the term under which this instance leads the role now, or
 * -1 when another instance leads it.
 *
 * With force, a held lease is always renewed (try_lead); without it, only
 * once gridha.renew_interval has passed since its last renewal, so a leader
 * that runs maintenance often does not write its lease every time. With
 * nowait, a lease that would have to wait for another transaction to be
 * written is treated as another's (-1).
 * Must be called inside SPI.
 */
static int64
leader_lead(Datum instance_id, text *role, bool force, bool nowait)
{
	GridhaTiming t = gridha_timing();
	Datum		args[3];

	args[0] = instance_id;
	args[1] = PointerGetDatum(role);
	args[2] = Int64GetDatum(t.renew_ms);
	gridha_exec(&leader_read_stmt, args, NULL, true);
	if (SPI_processed > 0)
	{
		bool		isnull;
		bool		mine = DatumGetBool(gridha_col(0, 1, &isnull));
		int64		term = gridha_col_int64(0, 2);
		bool		live = DatumGetBool(gridha_col(0, 3, &isnull));
		bool		due = DatumGetBool(gridha_col(0, 4, &isnull));

		if (live && !mine)
			return -1;
		if (live && mine && !force && !due)
		{
			/*
			 * Another session of this instance may be running the duty
			 * right now (two submitter threads of one instance): without
			 * the lock, both would write the same tick row, and the second
			 * would wait for the first's transaction.
			 */
			if (nowait && !leader_trylock(role))
				return -1;
			return term;
		}
	}
	else if (VARSIZE_ANY_EXHDR(role) > GRIDHA_MAX_ID_BYTES)
		/* a new role (run_maintenance creates one too): ids are index keys */
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("duty is too long"),
				 errdetail("It has %d bytes; an id has at most %d.",
						   (int) VARSIZE_ANY_EXHDR(role), GRIDHA_MAX_ID_BYTES)));

	if (nowait && !leader_trylock(role))
		return -1;
	args[2] = Int64GetDatum(t.soft_ms);
	gridha_exec(&leader_take_stmt, args, NULL, false);
	if (SPI_processed == 0)
		return -1;
	return gridha_col_int64(0, 1);
}

/*
 * leader_trylock: the role's lock, taken for this transaction without
 * waiting, and its lease row free; false when another transaction holds
 * either. The lock is a userlock (common.h) keyed by a hash of the role's
 * name: no SQL function can take it, so no role without gridha rights can
 * hold it and keep every hand-out's duty from the lease (1.2 took an
 * advisory lock, which any role may hold with pg_advisory_lock). Two roles
 * whose names hash alike only make a hand-out skip its duty once.
 */
static bool
leader_trylock(text *role)
{
	LOCKTAG		tag;
	Datum		role_arg[1];
	bool		isnull;
	uint32		h = DatumGetUInt32(hash_any((const unsigned char *) VARDATA_ANY(role),
											VARSIZE_ANY_EXHDR(role)));

	GRIDHA_USERLOCK_TAG(tag, h, GRIDHA_LEADER_TAG);
	if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return false;
	role_arg[0] = PointerGetDatum(role);
	gridha_exec(&leader_row_free_stmt, role_arg, NULL, false);
	return DatumGetBool(gridha_col(0, 1, &isnull)) && !isnull;
}

/*
 * leader_try: lead (1.2) and try_lead (1.1, deprecated): the term when this
 * instance leads the duty (newly or renewed), NULL when another instance
 * holds an unexpired lease on it. fname names the call in errors.
 */
static Datum
leader_try(FunctionCallInfo fcinfo, const char *fname)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	text	   *duty = gridha_arg_new_id(fcinfo, 1, "duty");
	int64		term;

	leader_refuse_reserved(duty);
	gridha_require_writable(fname);
	SPI_connect();
	(void) gridha_instance_touch(instance_id);
	term = leader_lead(instance_id, duty, true, false);
	gridha_instance_write_key(instance_id);
	SPI_finish();
	if (term < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(term);
}

PG_FUNCTION_INFO_V1(gridha_lead);

/*
 * gridha_lead: SQL gridha.lead(instance_id, duty) -> bigint (1.2).
 */
Datum
gridha_lead(PG_FUNCTION_ARGS)
{
	return leader_try(fcinfo, "lead()");
}

PG_FUNCTION_INFO_V1(gridha_try_lead);

/*
 * gridha_try_lead: SQL gridha.try_lead(instance_id, role) -> bigint, the
 * 1.1 name of lead (deprecated).
 */
Datum
gridha_try_lead(PG_FUNCTION_ARGS)
{
	return leader_try(fcinfo, "try_lead()");
}

PG_FUNCTION_INFO_V1(gridha_renew_lead);

/*
 * gridha_renew_lead: SQL gridha.renew_lead(instance_id, role, term)
 * -> boolean.
 *
 * Renews the lease only if this instance still leads the role under that
 * very term; false once the term has moved on (taken over, resigned).
 */
Datum
gridha_renew_lead(PG_FUNCTION_ARGS)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	text	   *role = gridha_arg_id(fcinfo, 1, "duty");
	GridhaTiming t = gridha_timing();
	Datum		args[4];
	int64		term;
	bool		ok;

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("term must not be null")));
	term = PG_GETARG_INT64(2);

	leader_refuse_reserved(role);
	gridha_require_writable("renew_lead()");
	args[0] = instance_id;
	args[1] = PointerGetDatum(role);
	args[2] = Int64GetDatum(term);
	args[3] = Int64GetDatum(t.soft_ms);
	SPI_connect();
	(void) gridha_instance_check(instance_id);
	gridha_exec(&leader_renew_stmt, args, NULL, false);
	ok = SPI_processed > 0;
	SPI_finish();
	PG_RETURN_BOOL(ok);
}

/*
 * leader_resign: resign_lead (1.2) and resign (1.1, deprecated): gives up
 * the lease at once (true) if this instance holds it; the next leader
 * takes the duty under a new term. fname names the call in errors.
 */
static Datum
leader_resign(FunctionCallInfo fcinfo, const char *fname)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	text	   *duty = gridha_arg_id(fcinfo, 1, "duty");
	Datum		args[2];
	bool		ok;

	gridha_require_writable(fname);
	args[0] = instance_id;
	args[1] = PointerGetDatum(duty);
	SPI_connect();
	(void) gridha_instance_check(instance_id);
	gridha_exec(&leader_resign_stmt, args, NULL, false);
	ok = SPI_processed > 0;
	SPI_finish();
	PG_RETURN_BOOL(ok);
}

PG_FUNCTION_INFO_V1(gridha_resign_lead);

/*
 * gridha_resign_lead: SQL gridha.resign_lead(instance_id, duty) -> boolean
 * (1.2).
 */
Datum
gridha_resign_lead(PG_FUNCTION_ARGS)
{
	return leader_resign(fcinfo, "resign_lead()");
}

PG_FUNCTION_INFO_V1(gridha_resign);

/*
 * gridha_resign: SQL gridha.resign(instance_id, role) -> boolean, the 1.1
 * name of resign_lead (deprecated).
 */
Datum
gridha_resign(PG_FUNCTION_ARGS)
{
	return leader_resign(fcinfo, "resign()");
}

/* How often a leader's backend checks the service counts */
#define LEADER_COUNTS_EVERY_MS	(60 * 60 * 1000)

/* When this backend last checked them (0: never) */
static TimestampTz leader_counts_checked_at = 0;

/*
 * leader_check_counts: repairs the service counts that do not match the
 * services there are (a log line names the targets). It reads every
 * claim row (50-70 ms at 200,000 services), so a
 * backend does it at its first tick and then once an hour: a count gone
 * wrong strands no service meanwhile (claims.c takes free work whatever
 * the share), it only skews the shares. A transaction that changed the
 * counts and has not written them yet (counts.c writes them at its
 * commit: run_maintenance called after an enqueue in one transaction)
 * checks at a later tick.
 */
static void
leader_check_counts(void)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		isnull;
	Datum		repaired;

	if (leader_counts_checked_at != 0 &&
		!TimestampDifferenceExceeds(leader_counts_checked_at, now, LEADER_COUNTS_EVERY_MS))
		return;
	/* this transaction's own count changes are not written yet: later */
	if (gridha_counts_pending())
		return;
	gridha_exec(&leader_counts_stmt, NULL, NULL, false);
	leader_counts_checked_at = now;
	repaired = gridha_col(0, 1, &isnull);
	if (!isnull)
		ereport(LOG,
				(errmsg("gridha: repaired the service counts of targets %s",
						TextDatumGetCString(repaired)),
				 errdetail("The counts did not match the services there are.")));
}

/*
 * leader_prune_step: one prune step of at most limit batches (none while
 * gridha.retention is -1); returns how many it deleted. Must be called
 * inside SPI.
 */
static int64
leader_prune_step(int64 limit)
{
	Datum		args[3];
	int			nest;
	int64		pruned;
	int64		scanned;
	bool		isnull;
	Datum		newest = (Datum) 0;

	if (gridha_retention_s < 0 || limit <= 0)
		return 0;
	args[0] = Int64GetDatum(gridha_retention_s);
	args[1] = Int64GetDatum(limit);
	args[2] = TimestampTzGetDatum(leader_prune_from);

	/*
	 * Walk batches_created in order and stop at the limit, whatever the
	 * statistics say: without them (a table just upgraded or restored) the
	 * planner may read every old batch through a bitmap and sort them, at
	 * each step.
	 */
	nest = NewGUCNestLevel();
	(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_sort", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	/* the settings above make the plan look costly: never JIT-compile it */
	(void) set_config_option("jit", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	gridha_exec(&leader_prune_stmt, args, NULL, false);
	pruned = gridha_col_int64(0, 1);
	scanned = gridha_col_int64(0, 2);
	if (pruned >= limit)
		newest = gridha_col(0, 4, &isnull);
	else if (scanned >= limit * 2)
		newest = gridha_col(0, 3, &isnull);
	else
		isnull = true;
	leader_prune_from = isnull ? DT_NOBEGIN : DatumGetTimestampTz(newest);
	AtEOXact_GUC(true, nest);
	return pruned;
}

/*
 * leader_duties: the work of one tick; returns the counts through its
 * arguments. Every duty is idempotent and bounded. The check of the
 * service counts is left out when the tick runs inside someone else's
 * transaction (a hand-out's poll duty): counts.c writes a transaction's
 * counts at its commit, so one that created services before would be
 * counted twice. The count rows come last in the lock order, after the
 * instance rows: the key write the leader's touch left for the end of its
 * call (an UPDATE of its instance row, which may wait) is made before them.
 */
static void
leader_duties(Datum instance_id, text *role, int64 tick, bool check_counts,
			  int32 *swept, int64 *pruned, int32 *opened)
{
	Datum		args[2];

	*swept = 0;
	*pruned = 0;
	if (gridha_sweep_instances_after_s >= 0)
	{
		args[0] = Int64GetDatum(gridha_sweep_instances_after_s);
		gridha_exec(&leader_sweep_stmt, args, NULL, false);
		*swept = (int32) gridha_col_int64(0, 1);
	}
	*pruned = leader_prune_step(gridha_prune_chunk);
	*opened = gridha_idseq12_top_up();
	leader12_rate_log_prune();
	if (check_counts)
	{
		gridha_instance_write_key(instance_id);
		leader_check_counts();
	}

	args[0] = PointerGetDatum(role);
	args[1] = Int64GetDatum(tick);
	gridha_exec(&leader_prune_ticks_stmt, args, NULL, false);
}

/*
 * leader_run_tick: runs the current tick's duties under this term if no
 * tick at or past it has run (true), recording the tick's counts; the
 * counts come back through the arguments. Must be called inside SPI.
 */
static bool
leader_run_tick(Datum instance_id, text *role, int64 term, bool check_counts,
				int64 *tick, int32 *swept, int64 *pruned, int32 *opened)
{
	Datum		args[5];

	args[0] = PointerGetDatum(role);
	args[1] = instance_id;
	args[2] = Int64GetDatum(term);
	args[3] = Int64GetDatum(gridha_maintenance_interval_ms);
	gridha_exec(&leader_tick_stmt, args, NULL, false);
	if (SPI_processed == 0)
		return false;
	*tick = gridha_col_int64(0, 1);
	leader_duties(instance_id, role, *tick, check_counts, swept, pruned, opened);
	args[0] = PointerGetDatum(role);
	args[1] = Int64GetDatum(*tick);
	args[2] = Int32GetDatum(*swept);
	args[3] = Int64GetDatum(*pruned);
	args[4] = Int32GetDatum(*opened);
	gridha_exec(&leader_record_stmt, args, NULL, false);
	return true;
}

PG_FUNCTION_INFO_V1(gridha_run_maintenance);

/*
 * gridha_run_maintenance: SQL gridha.run_maintenance(instance_id, role)
 * -> (term, tick, outcome, swept_instances, pruned_batches, opened_windows).
 *
 * Leads the role if it can and runs the current tick if no tick at or past
 * it has run. outcome is one of:
 *   ran           this call ran the tick's duties
 *   not_leader    another instance leads the role (term and tick NULL)
 *   already_run   the current tick has run (here or by another leader)
 *   clock_behind  a stored tick is later than the clock: wait for it
 *   lost_lease    the lease moved on between leading and the tick
 */
Datum
gridha_run_maintenance(PG_FUNCTION_ARGS)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	text	   *role = gridha_arg_id(fcinfo, 1, "duty");
	TupleDesc	tupdesc;
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};
	Datum		args[5];
	const char *outcome;
	int64		term;
	int64		tick = 0;
	int32		swept = 0;
	int64		pruned = 0;
	int32		opened = 0;

	gridha_require_writable("run_maintenance()");

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "gridha: run_maintenance must return a record");
	tupdesc = BlessTupleDesc(tupdesc);

	SPI_connect();
	(void) gridha_instance_touch(instance_id);
	term = leader_lead(instance_id, role, false, false);
	if (term < 0)
	{
		outcome = "not_leader";
		nulls[0] = nulls[1] = true;
	}
	else
	{
		if (leader_run_tick(instance_id, role, term, true, &tick, &swept, &pruned, &opened))
			outcome = "ran";
		else
		{
			bool		isnull;
			int64		latest;
			bool		lease_ok;

			args[0] = PointerGetDatum(role);
			args[1] = instance_id;
			args[2] = Int64GetDatum(term);
			args[3] = Int64GetDatum(gridha_maintenance_interval_ms);
			gridha_exec(&leader_why_stmt, args, NULL, false);
			tick = gridha_col_int64(0, 1);
			latest = DatumGetInt64(gridha_col(0, 2, &isnull));
			if (isnull)
				latest = PG_INT64_MIN;
			lease_ok = DatumGetBool(gridha_col(0, 3, &isnull));
			if (!lease_ok)
				outcome = "lost_lease";
			else if (latest > tick)
				outcome = "clock_behind";
			else
				outcome = "already_run";
		}
	}
	gridha_instance_write_key(instance_id);
	SPI_finish();

	values[0] = Int64GetDatum(term);
	values[1] = Int64GetDatum(tick);
	values[2] = CStringGetTextDatum(outcome);
	values[3] = Int32GetDatum(swept);
	values[4] = Int64GetDatum(pruned);
	values[5] = Int32GetDatum(opened);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * gridha_leader12_poll_duty: SQL 1.2's poll duty's work, inside SPI, in the
 * subtransaction of the hand-out's poll (gridha_leader_poll of
 * src/leader.c, which decides when): leads the maintenance role when it
 * is this instance's or free, then runs the tick when one is due (its
 * duties include a prune step) or else one prune step. Returns the
 * batches pruned.
 */
int64
gridha_leader12_poll_duty(Datum instance_id)
{
	text	   *role = cstring_to_text(LEADER12_DUTY);
	int64		term;
	int64		tick;
	int32		swept = 0;
	int64		pruned = 0;
	int32		opened = 0;

	term = leader_lead(instance_id, role, false, true);
	if (term < 0)
		return 0;
	if (leader_run_tick(instance_id, role, term, false, &tick, &swept, &pruned, &opened))
		return pruned;
	return leader_prune_step(gridha_prune_chunk);
}

PG_FUNCTION_INFO_V1(gridha_prune_batches);

/*
 * gridha_prune_batches: SQL gridha.prune_batches(max_batches) -> bigint.
 *
 * One prune step by hand (an administrator catching up, a benchmark):
 * deletes at most max_batches (NULL: gridha.prune_chunk) final batches
 * finished longer than gridha.retention ago, oldest first; 0 while the
 * retention is -1. It leads nothing: pruning is idempotent, and two
 * steps at once skip each other's rows.
 */
Datum
gridha_prune_batches(PG_FUNCTION_ARGS)
{
	int64		limit = gridha_prune_chunk;
	int64		pruned;

	if (!PG_ARGISNULL(0))
		limit = gridha_arg_count(fcinfo, 0, "max_batches");
	gridha_require_writable("prune_batches()");
	SPI_connect();
	pruned = leader_prune_step(limit);
	SPI_finish();
	PG_RETURN_INT64(pruned);
}
