/*-------------------------------------------------------------------------
 *
 * instances.c
 *		Instances: gridha.register_instance and registration on first use.
 *
 * An instance is any uuid that calls gridha; the first call registers it as
 * kind 'external'. Its last_seen_at is the time of its last claim cycle
 * (renewal); it decides whether the next cycle is due and whether other
 * instances count it as live when they balance.
 *
 * Session liveness (gridha.session_liveness, on by default): the session an
 * instance calls from holds a session-level advisory lock keyed by the
 * instance (GRIDHA_LOCK_CLASS, session_key). When that session ends, for
 * any reason, the lock goes with it, and other instances take the idle
 * claims of the instance at once instead of waiting for soft expiry
 * (claims.c). A second session of the same instance cannot take the lock
 * and simply does not bind; a session with the setting off clears the key,
 * so an instance behind a connection pool is judged by expiry alone.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "gridha.h"
#include "instances.h"
#include "rows.h"
#include "spi_util.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

/* Instances whose liveness lock this session holds (a few at most) */
#define INSTANCES_MAX_BOUND 64
static pg_uuid_t instances_bound[INSTANCES_MAX_BOUND];
static int	instances_nbound = 0;

static GridhaStatement instances_insert = {
	"INSERT INTO gridha.instances (instance_id) VALUES ($1)"
	" ON CONFLICT (instance_id) DO NOTHING",
	1, {UUIDOID}
};

static GridhaStatement instances_set_key = {
	"UPDATE gridha.instances SET session_key = $2 WHERE instance_id = $1",
	2, {UUIDOID, INT8OID}
};

static GridhaStatement instances_register = {
	"INSERT INTO gridha.instances (instance_id, label, kind)"
	" VALUES (gen_random_uuid(), $1, 'external')"
	" RETURNING instance_id",
	1, {TEXTOID}
};

/*
 * instances_session_key: the instance's liveness lock key.
 */
static uint32
instances_session_key(pg_uuid_t *id)
{
	return hash_bytes(id->data, UUID_LEN);
}

/*
 * instances_bind: makes this session hold the instance's liveness lock, if
 * it can; true when it holds it (now or from before).
 */
static bool
instances_bind(pg_uuid_t *id, uint32 key)
{
	LOCKTAG		tag;
	int			i;

	for (i = 0; i < instances_nbound; i++)
		if (memcmp(instances_bound[i].data, id->data, UUID_LEN) == 0)
			return true;
	if (instances_nbound >= INSTANCES_MAX_BOUND)
		return false;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, GRIDHA_LOCK_CLASS, key, 2);
	if (LockAcquire(&tag, ExclusiveLock, true, true) == LOCKACQUIRE_NOT_AVAIL)
		return false;
	instances_bound[instances_nbound++] = *id;
	return true;
}

/*
 * instances_liveness: keeps the instance's stored session_key in line with
 * this session: set when this session holds the lock, cleared when the
 * setting is off here. Writes only when the stored key is wrong.
 */
static void
instances_liveness(Datum instance_id, bool stored_null, int64 stored)
{
	Datum		args[2];
	char		nulls[3] = "  ";
	pg_uuid_t  *id = DatumGetUUIDP(instance_id);
	uint32		key = instances_session_key(id);

	args[0] = instance_id;
	if (gridha_session_liveness)
	{
		if (!instances_bind(id, key) || (!stored_null && stored == (int64) key))
			return;
		args[1] = Int64GetDatum((int64) key);
	}
	else
	{
		if (stored_null)
			return;
		nulls[1] = 'n';
		args[1] = (Datum) 0;
	}
	gridha_exec(&instances_set_key, args, nulls, false);
}

/*
 * gridha_instance_touch: the instance's kind and whether its claim cycle is
 * due; an unknown id is registered (kind 'external', cycle due). The
 * session's liveness lock is taken on first use (see above).
 *
 * Must be called inside SPI. Writes nothing for a known instance already
 * bound to this session.
 */
GridhaInstance
gridha_instance_touch(Datum instance_id)
{
	GridhaInstance inst = {false, true};
	GridhaTiming t = gridha_timing();
	GridhaRows	rows;
	Datum		args[1];
	bool		isnull;
	bool		key_null = true;
	int64		key = 0;
	bool		found;
	Datum		d;

	/* a read by key (rows.c): this runs before every hand-out */
	gridha_rows_begin(&rows, false);
	found = gridha_rows_fetch(&rows, GRIDHA_KEY_INSTANCE, &instance_id);
	if (found)
	{
		d = gridha_rows_get(&rows, GRIDHA_INSTANCES, INSTANCE_KIND, &isnull);
		inst.is_worker = !isnull && strcmp(TextDatumGetCString(d), "worker") == 0;
		d = gridha_rows_get(&rows, GRIDHA_INSTANCES, INSTANCE_LAST_SEEN_AT, &isnull);
		inst.cycle_due = isnull ||
			DatumGetTimestampTz(d) <= TimestampTzPlusMilliseconds(GetCurrentTransactionStartTimestamp(),
																  -t.renew_ms);
		d = gridha_rows_get(&rows, GRIDHA_INSTANCES, INSTANCE_SESSION_KEY, &key_null);
		if (!key_null)
			key = DatumGetInt64(d);
	}
	gridha_rows_end(&rows);

	if (!found)
	{
		args[0] = instance_id;
		gridha_exec(&instances_insert, args, NULL, false);
	}
	instances_liveness(instance_id, key_null, key);
	return inst;
}

PG_FUNCTION_INFO_V1(gridha_register_instance);

/*
 * gridha_register_instance: SQL gridha.register_instance(label) -> uuid.
 */
Datum
gridha_register_instance(PG_FUNCTION_ARGS)
{
	Datum		args[1];
	char		nulls[2] = "  ";
	bool		isnull;
	Datum		id;

	args[0] = PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0);
	nulls[0] = PG_ARGISNULL(0) ? 'n' : ' ';

	SPI_connect();
	gridha_exec(&instances_register, args, nulls, false);
	id = gridha_col(0, 1, &isnull);
	id = SPI_datumTransfer(id, false, UUID_LEN);
	SPI_finish();
	PG_RETURN_DATUM(id);
}
