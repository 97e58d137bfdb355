/*-------------------------------------------------------------------------
 *
 * claims12.c
 *		SQL 1.2's copies of the cold claim and count statements that SQL
 *		1.3 keeps in its install script (issue 42): served until ALTER
 *		EXTENSION gridha UPDATE (docs/operations.md, Upgrading), to go when
 *		the library stops serving 1.2.
 *
 *   release_claims  1.2's install script names the C symbol
 *                   gridha_release_claims; 1.3's gridha.release_claims is
 *                   PL/pgSQL calling gridha_internal.release_check
 *                   (claims.c)
 *   epoch band      the band of this cluster (claims.c, claims_epoch_base):
 *                   1.3's gridha_internal.epoch_band; the band lock both
 *                   take is bands.c's
 *
 * (1.2's truncate of the counts, the third such statement pair, is in
 * counts.c beside the trigger that runs it.)
 *
 * The statements are 1.3's, word for word: 1.2's tables have the same
 * columns for them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "bands.h"
#include "claims12.h"
#include "common.h"
#include "instances.h"
#include "leader12.h"
#include "rows.h"
#include "spi_util.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"

/* The claim's head is submitting (claims.c, CLAIMS_HEAD_SUBMITTING) */
#define CLAIMS12_HEAD_SUBMITTING(c) \
	"(" c ".in_flight AND coalesce((SELECT b.status = 'submitting' FROM gridha.batches b" \
	"  WHERE b.service_id = " c ".service_id AND b.seq = " c ".head_seq), false))"

/* ... as gridha.release_claims of the 1.3 script: lock, then hand back */
static GridhaStatement claims12_lock_held_stmt = {
	"SELECT 1 FROM gridha.service_claims WHERE claimant = $1"
	" ORDER BY service_id COLLATE \"C\" FOR NO KEY UPDATE",
	1, {UUIDOID}
};

static GridhaStatement claims12_release_all_stmt = {
	"WITH r AS ("
	"  UPDATE gridha.service_claims c"
	"     SET claimant = NULL, soft_expiry = NULL, hard_expiry = NULL"
	"   WHERE c.claimant = $1 AND NOT " CLAIMS12_HEAD_SUBMITTING("c")
	"  RETURNING 1"
	"), n AS (SELECT count(*)::int4 AS n FROM r"
	"), i AS ("
	"  UPDATE gridha.instances i"
	"     SET held = greatest(i.held - n.n, 0), stopped_at = now(),"
	"         soft_expiry = CASE WHEN i.held - n.n <= 0 THEN NULL ELSE least(i.soft_expiry, now()) END,"
	"         hard_expiry = CASE WHEN i.held - n.n <= 0 THEN NULL ELSE i.hard_expiry END"
	"    FROM n WHERE i.instance_id = $1"
	")"
	" SELECT n.n FROM n",
	1, {UUIDOID}
};

/* ... as gridha_internal.epoch_band of the 1.3 script */
static GridhaStatement claims12_band_stmt = {
	"SELECT band FROM gridha.epoch_bands WHERE system_identifier = $1",
	1, {INT8OID}
};

static GridhaStatement claims12_band_new_stmt = {
	"INSERT INTO gridha.epoch_bands AS e (system_identifier, band)"
	" SELECT $1, coalesce(max(c.epoch), 0) >> 40 FROM gridha.service_claims c"
	" ON CONFLICT (system_identifier) DO UPDATE SET band = e.band"
	" RETURNING e.band",
	1, {INT8OID}
};

static GridhaStatement claims12_band_of_claims_stmt = {
	"SELECT coalesce(max(c.epoch), 0) >> 40 FROM gridha.service_claims c",
	0, {InvalidOid}
};

/* ... as gridha_internal.service_claims_truncated of the 1.3 script */
/*
 * gridha_claims12_band: SQL 1.2's reading of this cluster's band (inside
 * SPI): the row of gridha.epoch_bands (*stored true), else, under the band
 * lock (bands.c, gridha_band_trylock), the row written, or without
 * it the band of the claims (*stored false: read again next time).
 */
int64
gridha_claims12_band(int64 system_identifier, bool *stored)
{
	Datum		args[1];

	args[0] = Int64GetDatum(system_identifier);
	gridha_exec(&claims12_band_stmt, args, NULL, true);
	*stored = SPI_processed > 0;
	if (!*stored)
	{
		if (gridha_band_trylock())
			gridha_exec(&claims12_band_new_stmt, args, NULL, false);
		else
			gridha_exec(&claims12_band_of_claims_stmt, NULL, NULL, true);
	}
	return gridha_col_int64(0, 1);
}

PG_FUNCTION_INFO_V1(gridha_release_claims);

/*
 * gridha_release_claims: SQL 1.2 gridha.release_claims(instance_id) ->
 * integer: what 1.3's gridha.release_claims does (sql/gridha--1.3.sql),
 * in the same order, with 1.2's resignation (src/leader12.c).
 */
Datum
gridha_release_claims(PG_FUNCTION_ARGS)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	Datum		args[1];
	int			n;

	gridha_require_writable("release_claims()");
	args[0] = instance_id;
	SPI_connect();
	gridha_instance_check(instance_id);
	/* the table before its rows, as every call (see claims.c's header) */
	gridha_rows_hold_for_write(GRIDHA_CLAIMS);
	gridha_exec(&claims12_lock_held_stmt, args, NULL, false);
	gridha_exec(&claims12_release_all_stmt, args, NULL, false);
	n = (int) gridha_col_int64(0, 1);
	(void) gridha_leader12_resign_own(instance_id);
	SPI_finish();
	PG_RETURN_INT32(n);
}
