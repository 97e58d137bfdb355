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
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "gridha.h"
#include "instances.h"
#include "spi_util.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

static GridhaStatement instances_lookup = {
	"SELECT i.kind = 'worker',"
	"       i.last_seen_at IS NULL"
	"       OR i.last_seen_at <= now() - $2 * interval '1 millisecond'"
	"  FROM gridha.instances i"
	" WHERE i.instance_id = $1",
	2, {UUIDOID, INT8OID}
};

static GridhaStatement instances_insert = {
	"INSERT INTO gridha.instances (instance_id) VALUES ($1)"
	" ON CONFLICT (instance_id) DO NOTHING",
	1, {UUIDOID}
};

static GridhaStatement instances_register = {
	"INSERT INTO gridha.instances (instance_id, label, kind)"
	" VALUES (gen_random_uuid(), $1, 'external')"
	" RETURNING instance_id",
	1, {TEXTOID}
};

/*
 * gridha_instance_touch: the instance's kind and whether its claim cycle is
 * due; an unknown id is registered (kind 'external', cycle due).
 *
 * Must be called inside SPI. Writes nothing for a known instance.
 */
GridhaInstance
gridha_instance_touch(Datum instance_id)
{
	GridhaInstance inst = {false, true};
	GridhaTiming t = gridha_timing();
	Datum		args[2];
	bool		isnull;

	args[0] = instance_id;
	args[1] = Int64GetDatum(t.renew_ms);
	gridha_exec(&instances_lookup, args, NULL, false);
	if (SPI_processed == 0)
	{
		gridha_exec(&instances_insert, args, NULL, false);
		return inst;
	}
	inst.is_worker = DatumGetBool(gridha_col(0, 1, &isnull));
	inst.cycle_due = DatumGetBool(gridha_col(0, 2, &isnull));
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
