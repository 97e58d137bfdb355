/*-------------------------------------------------------------------------
 *
 * claims.c
 *		Claims on services: renew, acquire (with balance), release.
 *
 * Words:
 *   claim     the service_claims row of a service; claimant NULL = free
 *   epoch     bumped each time the claimant changes; the fencing token
 *   takeover  acquiring a claim another instance holds: allowed once its
 *             soft expiry has passed and nothing is submitting, or once its
 *             hard expiry has passed, whatever is going on
 *   share     with gridha.balance_claims, ceil(services / live instances);
 *             an instance acquires up to its share and releases idle claims
 *             above it. Rounding up is the slack: the shares add up to at
 *             least the number of services, so every service finds a holder
 *
 * Every candidate row is locked with FOR UPDATE SKIP LOCKED and its
 * condition is re-checked on the newest row version (READ COMMITTED
 * EvalPlanQual), so two instances can never both take one claim, and a
 * takeover can never slip between a claimant's lock and its write. A
 * takeover also revokes the hand-out of a head still submitting, which is
 * what fences the old claimant's acceptance (see status.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "claims.h"
#include "gridha.h"
#include "instances.h"
#include "spi_util.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

/* Services a worker may claim: those whose target it can submit to. */
#define CLAIMS_TARGET_FILTER(c) \
	" AND (NOT $2 OR " c ".target IN (SELECT t.target FROM gridha.targets t" \
	"      WHERE t.submit_url IS NOT NULL OR t.submit_function IS NOT NULL))"

static GridhaStatement claims_renew_stmt = {
	"WITH r AS ("
	"  UPDATE gridha.service_claims c"
	"     SET soft_expiry = now() + $2 * interval '1 millisecond',"
	"         hard_expiry = now() + $3 * interval '1 millisecond'"
	"    FROM (SELECT s.service_id FROM gridha.service_claims s"
	"           WHERE s.claimant = $1 FOR UPDATE SKIP LOCKED) s"
	"   WHERE c.service_id = s.service_id"
	"  RETURNING 1"
	"), i AS ("
	"  UPDATE gridha.instances SET last_seen_at = now() WHERE instance_id = $1"
	")"
	" SELECT count(*)::int4 FROM r",
	3, {UUIDOID, INT8OID, INT8OID}
};

static GridhaStatement claims_counts_stmt = {
	"SELECT (SELECT count(*) FROM gridha.service_claims c WHERE true"
	CLAIMS_TARGET_FILTER("c") "),"
	"       (SELECT count(*) FROM gridha.instances i"
	"         WHERE i.instance_id = $1"
	"            OR (i.last_seen_at > now() - $3 * interval '1 millisecond'"
	"                AND (i.stopped_at IS NULL OR i.stopped_at < i.last_seen_at)"
	"                AND NOT " GRIDHA_SESSION_GONE("i") ")),"
	"       (SELECT count(*) FROM gridha.service_claims c WHERE c.claimant = $1)",
	3, {UUIDOID, BOOLOID, INT8OID}
};

/*
 * The claim's head is submitting. Only a hand-out makes a head submitting,
 * and it holds the claim's row lock; an accepted report moves it on to
 * pending without that lock (status.c).
 */
#define CLAIMS_HEAD_SUBMITTING(c) \
	"(" c ".in_flight AND EXISTS (SELECT 1 FROM gridha.batches b" \
	"  WHERE b.service_id = " c ".service_id AND b.seq = " c ".head_seq" \
	"    AND b.status = 'submitting'))"

/*
 * Taking claims is two statements. The first picks and locks candidates
 * (FOR UPDATE SKIP LOCKED; the claim's own conditions are re-checked on its
 * newest row version) and returns their ids. The second takes them, with a
 * snapshot taken after the locks were granted: no hand-out can have
 * happened since, so whether a head is submitting is read as it is, but
 * for an accepted report moving it to pending meanwhile, which the batch
 * row lock settles (see claims_take_stmt). In one statement, a candidate
 * whose claim row a hand-out changed after the statement's snapshot (the
 * lock follows it to its newest version) would be judged on a batch row
 * older than that claim row.
 *
 * $1 instance, $2 a worker (only services it can submit for), $3 at most
 * this many (NULL: no limit).
 */
static GridhaStatement claims_free_stmt = {
	"SELECT array_agg(service_id) FROM ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"   WHERE c.claimant IS NULL" CLAIMS_TARGET_FILTER("c")
	"   ORDER BY c.ready_at"
	"   LIMIT $3"
	"   FOR UPDATE SKIP LOCKED) c",
	3, {UUIDOID, BOOLOID, INT8OID}
};

static GridhaStatement claims_expired_stmt = {
	"SELECT array_agg(service_id) FROM ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"   WHERE c.soft_expiry <= now()"
	"     AND c.claimant IS NOT NULL AND c.claimant <> $1"
	"     AND (c.hard_expiry <= now() OR NOT " CLAIMS_HEAD_SUBMITTING("c") ")"
	CLAIMS_TARGET_FILTER("c")
	"   ORDER BY c.soft_expiry"
	"   LIMIT $3"
	"   FOR UPDATE SKIP LOCKED) c",
	3, {UUIDOID, BOOLOID, INT8OID}
};

/*
 * Orphaned claims: held by an instance whose session has ended (session
 * liveness), within their soft expiry (later ones are expired claims), and
 * with nothing submitting: taken like a soft-expired claim.
 */
static GridhaStatement claims_orphaned_stmt = {
	"SELECT array_agg(service_id) FROM ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"    JOIN gridha.instances i ON i.instance_id = c.claimant"
	"   WHERE i.instance_id <> $1 AND " GRIDHA_SESSION_GONE("i")
	"     AND c.soft_expiry > now() AND NOT " CLAIMS_HEAD_SUBMITTING("c")
	CLAIMS_TARGET_FILTER("c")
	"   ORDER BY c.ready_at"
	"   LIMIT $3"
	"   FOR UPDATE OF c SKIP LOCKED) c",
	3, {UUIDOID, BOOLOID, INT8OID}
};

/*
 * The take: $1 instance, $2 the locked candidates, $3/$4 soft/hard expiry
 * in ms, $5 a claim within its hard expiry is taken only with nothing
 * submitting (expired and orphaned claims; a free one is always taken).
 *
 * A head still submitting has its hand-out revoked (r: instance_id := NULL,
 * status unchanged): the old claimant's acceptance no longer matches it, and
 * the claim becomes ready so the new claimant hands it out again. If the
 * acceptance commits first, r's re-check on the newest row version finds
 * the batch pending and leaves it alone, and the claim stays in flight with
 * it. Taking sets the claimant, bumps the epoch and sets both expiries.
 */
static GridhaStatement claims_take_stmt = {
	"WITH h AS ("
	"  SELECT c.service_id, c.head_seq, c.hard_expiry,"
	"         " CLAIMS_HEAD_SUBMITTING("c") " AS submitting"
	"    FROM gridha.service_claims c"
	"   WHERE c.service_id = ANY ($2)"
	"), t AS ("
	"  SELECT h.service_id, h.head_seq, h.submitting FROM h"
	"   WHERE NOT $5 OR NOT h.submitting OR h.hard_expiry <= now()"
	"), r AS ("
	"  UPDATE gridha.batches b SET instance_id = NULL"
	"    FROM t"
	"   WHERE t.submitting AND b.service_id = t.service_id AND b.seq = t.head_seq"
	"     AND b.status = 'submitting'"
	"  RETURNING b.service_id"
	")"
	" UPDATE gridha.service_claims c"
	"    SET claimant = $1, epoch = c.epoch + 1,"
	"        soft_expiry = now() + $3 * interval '1 millisecond',"
	"        hard_expiry = now() + $4 * interval '1 millisecond',"
	"        in_flight = c.in_flight AND r.service_id IS NULL,"
	"        ready_at = CASE WHEN r.service_id IS NULL THEN c.ready_at ELSE now() END"
	"   FROM t LEFT JOIN r ON r.service_id = t.service_id"
	"  WHERE c.service_id = t.service_id"
	" RETURNING c.service_id, c.epoch",
	5, {UUIDOID, TEXTARRAYOID, INT8OID, INT8OID, BOOLOID}
};

/* Surplus release: idle services first, then those that waited least. */
static GridhaStatement claims_release_surplus_stmt = {
	"WITH r AS ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"   WHERE c.claimant = $1 AND NOT c.in_flight"
	"   ORDER BY c.ready_at DESC NULLS FIRST"
	"   LIMIT $2"
	"   FOR UPDATE SKIP LOCKED"
	")"
	" UPDATE gridha.service_claims c"
	"    SET claimant = NULL, soft_expiry = NULL, hard_expiry = NULL"
	"   FROM r WHERE c.service_id = r.service_id",
	2, {UUIDOID, INT8OID}
};

/*
 * Release at stop, in two statements as a take is (see above): lock the
 * instance's claims, then, with a snapshot that sees every hand-out made
 * under those locks, hand back those with nothing submitting.
 */
static GridhaStatement claims_lock_held_stmt = {
	"SELECT 1 FROM gridha.service_claims WHERE claimant = $1 FOR UPDATE",
	1, {UUIDOID}
};

static GridhaStatement claims_release_all_stmt = {
	"WITH r AS ("
	"  UPDATE gridha.service_claims c"
	"     SET claimant = NULL, soft_expiry = NULL, hard_expiry = NULL"
	"   WHERE c.claimant = $1 AND NOT " CLAIMS_HEAD_SUBMITTING("c")
	"  RETURNING 1"
	"), i AS ("
	"  UPDATE gridha.instances SET stopped_at = now() WHERE instance_id = $1"
	")"
	" SELECT count(*)::int4 FROM r",
	1, {UUIDOID}
};

/*
 * gridha_claims_renew: extends both expiries of every claim the database
 * says this instance holds, and records the cycle in last_seen_at.
 *
 * Rows locked by another transaction right now (an enqueue in progress) are
 * skipped rather than waited for; they are renewed next cycle, long before
 * their soft expiry. Returns the number of claims renewed.
 */
int
gridha_claims_renew(Datum instance_id)
{
	GridhaTiming t = gridha_timing();
	Datum		args[3];

	args[0] = instance_id;
	args[1] = Int64GetDatum(t.soft_ms);
	args[2] = Int64GetDatum(t.hard_ms);
	gridha_exec(&claims_renew_stmt, args, NULL, false);
	return (int) gridha_col_int64(0, 1);
}

/*
 * claims_take: locks up to "limit" candidates (-1: no limit) with the
 * candidate statement "pick", takes them (claims_take_stmt) and appends
 * what it took to rsinfo's tuplestore when given. Returns how many.
 */
static int
claims_take(GridhaStatement *pick, bool only_idle, Datum instance_id,
			bool is_worker, int64 limit, ReturnSetInfo *rsinfo)
{
	GridhaTiming t = gridha_timing();
	Datum		args[5];
	char		nulls[6] = "     ";
	bool		isnull;
	Datum		ids;

	args[0] = instance_id;
	args[1] = BoolGetDatum(is_worker);
	args[2] = Int64GetDatum(limit);
	if (limit < 0)
		nulls[2] = 'n';
	gridha_exec(pick, args, nulls, false);
	ids = gridha_col(0, 1, &isnull);
	if (isnull)
		return 0;

	args[1] = ids;
	args[2] = Int64GetDatum(t.soft_ms);
	args[3] = Int64GetDatum(t.hard_ms);
	args[4] = BoolGetDatum(only_idle);
	gridha_exec(&claims_take_stmt, args, NULL, false);

	if (rsinfo != NULL)
		gridha_put_rows(rsinfo, 2);
	return (int) SPI_processed;
}

/*
 * gridha_claims_acquire: takes free claims, then expired ones, then those
 * of instances whose session has ended (gridha.session_liveness), up to this
 * instance's fair share (no limit with balance off); with balance on, an
 * instance above its share releases idle surplus claims instead, so a
 * newcomer finds free claims at its next acquisition.
 *
 * Returns the number of claims newly taken; when rsinfo is given, each one
 * is added to its tuplestore as (service_id, epoch).
 */
int
gridha_claims_acquire(Datum instance_id, bool is_worker, ReturnSetInfo *rsinfo)
{
	int64		limit = -1;
	int			taken;

	if (gridha_balance_claims)
	{
		GridhaTiming t = gridha_timing();
		Datum		args[3];
		int64		services,
					live,
					held,
					share;

		args[0] = instance_id;
		args[1] = BoolGetDatum(is_worker);
		args[2] = Int64GetDatum(t.soft_ms);
		gridha_exec(&claims_counts_stmt, args, NULL, false);
		services = gridha_col_int64(0, 1);
		live = Max(gridha_col_int64(0, 2), 1);
		held = gridha_col_int64(0, 3);

		share = (services + live - 1) / live;
		if (held > share)
		{
			Datum		rargs[2];

			rargs[0] = instance_id;
			rargs[1] = Int64GetDatum(held - share);
			gridha_exec(&claims_release_surplus_stmt, rargs, NULL, false);
			return 0;
		}
		limit = share - held;
		if (limit <= 0)
			return 0;
	}

	taken = claims_take(&claims_free_stmt, false, instance_id, is_worker, limit, rsinfo);
	if (limit < 0 || taken < limit)
		taken += claims_take(&claims_expired_stmt, true, instance_id, is_worker,
							 limit < 0 ? -1 : limit - taken, rsinfo);
	if (limit < 0 || taken < limit)
		taken += claims_take(&claims_orphaned_stmt, true, instance_id, is_worker,
							 limit < 0 ? -1 : limit - taken, rsinfo);
	return taken;
}

PG_FUNCTION_INFO_V1(gridha_renew_claims);

/*
 * gridha_renew_claims: SQL gridha.renew_claims(instance_id) -> integer.
 */
Datum
gridha_renew_claims(PG_FUNCTION_ARGS)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	int			n;

	SPI_connect();
	(void) gridha_instance_touch(instance_id);
	n = gridha_claims_renew(instance_id);
	SPI_finish();
	PG_RETURN_INT32(n);
}

PG_FUNCTION_INFO_V1(gridha_acquire_claims);

/*
 * gridha_acquire_claims: SQL gridha.acquire_claims(instance_id)
 * -> TABLE(service_id, epoch), the claims newly taken.
 */
Datum
gridha_acquire_claims(PG_FUNCTION_ARGS)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	GridhaInstance inst;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	inst = gridha_instance_touch(instance_id);
	(void) gridha_claims_acquire(instance_id, inst.is_worker, rsinfo);
	SPI_finish();
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(gridha_release_claims);

/*
 * gridha_release_claims: SQL gridha.release_claims(instance_id) -> integer.
 *
 * Hands back every claim with nothing submitting (a submission in hand
 * keeps its claim until it is reported); marks the instance stopped.
 */
Datum
gridha_release_claims(PG_FUNCTION_ARGS)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	Datum		args[1];
	int			n;

	args[0] = instance_id;
	SPI_connect();
	gridha_exec(&claims_lock_held_stmt, args, NULL, false);
	gridha_exec(&claims_release_all_stmt, args, NULL, false);
	n = (int) gridha_col_int64(0, 1);
	SPI_finish();
	PG_RETURN_INT32(n);
}
