/*-------------------------------------------------------------------------
 *
 * bands.c
 *		The lock under which a cluster's epoch band is written: one row of
 *		gridha.epoch_bands per system identifier, read by every first take
 *		of a backend (claims.c, claims_epoch_base). SQL 1.3 reads and writes
 *		the row in gridha_internal.epoch_band (its install script), which
 *		takes this lock through gridha_internal.epoch_band_trylock; SQL
 *		1.2's copy of that function (claims12.c) takes it directly. Both
 *		generations are served by one library, so the lock is here, below
 *		both, and neither file calls the other for it.
 *
 * Words:
 *   band      the bits above bit 40 of the highest epoch the claims held
 *             when a cluster of this system identifier first took a claim;
 *             its takes give epochs from (band + timeline - 1) << 40 on
 *             (claims.c, claims_epoch_base), so a database brought from
 *             another cluster never gives an epoch it gave there
 *   band lock an advisory lock of gridha's own class (GRIDHA_LOCK_CLASS,
 *             key 3) that no SQL function a user may call takes; only its
 *             holder writes the band row
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "bands.h"
#include "common.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lock.h"

/*
 * gridha_band_trylock: the band lock, this transaction's, never waited
 * for: false when another transaction holds it. Only its holder writes the
 * band row, so a writer never waits on another's uncommitted row.
 */
bool
gridha_band_trylock(void)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, GRIDHA_LOCK_CLASS, 0, 3);
	return LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

PG_FUNCTION_INFO_V1(gridha_epoch_band_trylock);

/*
 * gridha_epoch_band_trylock: SQL gridha_internal.epoch_band_trylock() ->
 * boolean (1.3): gridha_band_trylock, for gridha_internal.epoch_band.
 */
Datum
gridha_epoch_band_trylock(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(gridha_band_trylock());
}
