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
 * takeover can never slip between a claimant's lock and its write.
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

/* What a takeover or a fresh claim sets; a batch left submitting goes back
 * to the head of the queue for the new claimant. */
#define CLAIMS_TAKE_SET \
	" SET claimant = $1, epoch = c.epoch + 1," \
	"     soft_expiry = now() + $4 * interval '1 millisecond'," \
	"     hard_expiry = now() + $5 * interval '1 millisecond'," \
	"     in_flight = c.in_flight AND NOT c.submitting," \
	"     ready_at = CASE WHEN c.submitting THEN now() ELSE c.ready_at END," \
	"     submitting = false"

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

static GridhaStatement claims_take_free_stmt = {
	"WITH cand AS ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"   WHERE c.claimant IS NULL" CLAIMS_TARGET_FILTER("c")
	"   ORDER BY c.ready_at"
	"   LIMIT $3"
	"   FOR UPDATE SKIP LOCKED"
	")"
	" UPDATE gridha.service_claims c" CLAIMS_TAKE_SET
	"  FROM cand WHERE c.service_id = cand.service_id"
	" RETURNING c.service_id, c.epoch",
	5, {UUIDOID, BOOLOID, INT8OID, INT8OID, INT8OID}
};

static GridhaStatement claims_take_expired_stmt = {
	"WITH cand AS ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"   WHERE c.soft_expiry <= now()"
	"     AND c.claimant IS NOT NULL AND c.claimant <> $1"
	"     AND (c.hard_expiry <= now() OR NOT c.submitting)"
	CLAIMS_TARGET_FILTER("c")
	"   ORDER BY c.soft_expiry"
	"   LIMIT $3"
	"   FOR UPDATE SKIP LOCKED"
	")"
	" UPDATE gridha.service_claims c" CLAIMS_TAKE_SET
	"  FROM cand WHERE c.service_id = cand.service_id"
	" RETURNING c.service_id, c.epoch",
	5, {UUIDOID, BOOLOID, INT8OID, INT8OID, INT8OID}
};

/*
 * Orphaned claims: held by an instance whose session has ended (session
 * liveness), within their soft expiry (later ones are expired claims), and
 * with nothing submitting: taken like a soft-expired claim.
 */
static GridhaStatement claims_take_orphaned_stmt = {
	"WITH gone AS ("
	"  SELECT i.instance_id FROM gridha.instances i"
	"   WHERE i.instance_id <> $1 AND " GRIDHA_SESSION_GONE("i")
	"), cand AS ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"    JOIN gone ON c.claimant = gone.instance_id"
	"   WHERE c.soft_expiry > now() AND NOT c.submitting"
	CLAIMS_TARGET_FILTER("c")
	"   ORDER BY c.ready_at"
	"   LIMIT $3"
	"   FOR UPDATE OF c SKIP LOCKED"
	")"
	" UPDATE gridha.service_claims c" CLAIMS_TAKE_SET
	"  FROM cand WHERE c.service_id = cand.service_id"
	"   AND NOT c.submitting"
	" RETURNING c.service_id, c.epoch",
	5, {UUIDOID, BOOLOID, INT8OID, INT8OID, INT8OID}
};

/* Surplus release: idle services first, then those that waited least. */
static GridhaStatement claims_release_surplus_stmt = {
	"WITH r AS ("
	"  SELECT c.service_id FROM gridha.service_claims c"
	"   WHERE c.claimant = $1 AND NOT c.in_flight AND NOT c.submitting"
	"   ORDER BY c.ready_at DESC NULLS FIRST"
	"   LIMIT $2"
	"   FOR UPDATE SKIP LOCKED"
	")"
	" UPDATE gridha.service_claims c"
	"    SET claimant = NULL, soft_expiry = NULL, hard_expiry = NULL"
	"   FROM r WHERE c.service_id = r.service_id",
	2, {UUIDOID, INT8OID}
};

static GridhaStatement claims_release_all_stmt = {
	"WITH r AS ("
	"  UPDATE gridha.service_claims"
	"     SET claimant = NULL, soft_expiry = NULL, hard_expiry = NULL"
	"   WHERE claimant = $1 AND NOT submitting"
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
 * claims_take: runs one take statement for at most "limit" claims (-1: no
 * limit) and appends what it took to rsinfo's tuplestore when given.
 */
static int
claims_take(GridhaStatement *stmt, Datum instance_id, bool is_worker,
			int64 limit, ReturnSetInfo *rsinfo)
{
	GridhaTiming t = gridha_timing();
	Datum		args[5];
	char		nulls[6] = "     ";
	uint64		i;

	args[0] = instance_id;
	args[1] = BoolGetDatum(is_worker);
	args[2] = Int64GetDatum(limit);
	if (limit < 0)
		nulls[2] = 'n';
	args[3] = Int64GetDatum(t.soft_ms);
	args[4] = Int64GetDatum(t.hard_ms);
	gridha_exec(stmt, args, nulls, false);

	if (rsinfo != NULL)
	{
		for (i = 0; i < SPI_processed; i++)
		{
			Datum		values[2];
			bool		isnull[2];

			values[0] = gridha_col(i, 1, &isnull[0]);
			values[1] = gridha_col(i, 2, &isnull[1]);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, isnull);
		}
	}
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

	taken = claims_take(&claims_take_free_stmt, instance_id, is_worker, limit, rsinfo);
	if (limit < 0 || taken < limit)
		taken += claims_take(&claims_take_expired_stmt, instance_id, is_worker,
							 limit < 0 ? -1 : limit - taken, rsinfo);
	if (limit < 0 || taken < limit)
		taken += claims_take(&claims_take_orphaned_stmt, instance_id, is_worker,
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
	gridha_exec(&claims_release_all_stmt, args, NULL, false);
	n = (int) gridha_col_int64(0, 1);
	SPI_finish();
	PG_RETURN_INT32(n);
}
