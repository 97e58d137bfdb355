/*-------------------------------------------------------------------------
 *
 * instances12.c
 *		SQL 1.2's instance rows: the statements src/instances.c runs on a
 *		database still on gridha 1.2's SQL (issue 42); the C entry points
 *		of register_instance and worker_register that only 1.2's install
 *		script names are in src/sql12.c, above src/instances.c.
 *
 * gridha 1.3 keeps these statements in its install script, as functions
 * of gridha_internal (instance_insert, instance_key, instance_adopt,
 * instance_declare; register_instance and worker_register are SQL there).
 * A 1.2 database has none of them, and the library serves it until ALTER
 * EXTENSION gridha UPDATE (src/generation.c): each statement is the same
 * as the 1.3 function's, and goes with 1.2. Each runs inside SPI.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "instances12.h"
#include "spi_util.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/uuid.h"

/* ... as gridha_internal.instance_insert of the 1.3 script */
static GridhaStatement instances12_insert_owned = {
	"INSERT INTO gridha.instances (instance_id, owner) VALUES ($1, $2)"
	" ON CONFLICT (instance_id) DO NOTHING",
	2, {UUIDOID, NAMEOID}
};

static GridhaStatement instances12_owner = {
	"SELECT owner FROM gridha.instances WHERE instance_id OPERATOR(pg_catalog.=) $1",
	1, {UUIDOID}
};

/* ... as gridha_internal.instance_key */
static GridhaStatement instances12_clear_key = {
	"UPDATE gridha.instances SET session_key = NULL WHERE instance_id = $1",
	1, {UUIDOID}
};

static GridhaStatement instances12_new_key = {
	"UPDATE gridha.instances"
	"   SET session_key = pg_catalog.nextval('gridha.session_keys'::pg_catalog.regclass)"
	" WHERE instance_id OPERATOR(pg_catalog.=) $1"
	"   AND instance_id IN (SELECT x.instance_id FROM gridha.instances x"
	"                        WHERE x.instance_id OPERATOR(pg_catalog.=) $1 AND x.session_key IS NULL"
	"                        FOR UPDATE SKIP LOCKED)"
	" RETURNING session_key",
	1, {UUIDOID}
};

/* ... as gridha_internal.instance_adopt */
static GridhaStatement instances12_adopt_self = {
	"UPDATE gridha.instances SET owner = $2"
	" WHERE instance_id OPERATOR(pg_catalog.=) $1 AND owner IS NULL AND kind OPERATOR(pg_catalog.=) 'worker'",
	2, {UUIDOID, NAMEOID}
};

/* ... as gridha_internal.instance_declare */
static GridhaStatement instances12_declare = {
	"UPDATE gridha.instances SET serves = $2 WHERE instance_id = $1"
	"   AND serves IS DISTINCT FROM $2",
	2, {UUIDOID, TEXTARRAYOID}
};

/*
 * gridha_instances12_insert: registers an unknown instance on first use,
 * owned by owner_name; true if it did. Otherwise *present says whether
 * another session's row is there, and *owner (*owner_null) its owner.
 */
bool
gridha_instances12_insert(Datum instance_id, Datum owner_name,
						  bool *present, Datum *owner, bool *owner_null)
{
	Datum		args[2];

	args[0] = instance_id;
	args[1] = owner_name;
	gridha_exec(&instances12_insert_owned, args, NULL, false);
	if (SPI_processed > 0)
		return true;
	gridha_exec(&instances12_owner, args, NULL, false);
	*present = SPI_processed > 0;
	*owner_null = true;
	*owner = (Datum) 0;
	if (*present)
		*owner = gridha_col(0, 1, owner_null);
	return false;
}

/*
 * gridha_instances12_key: fresh, a key of its own for an instance that has
 * none (true and *key when written); else clears its key (false).
 */
bool
gridha_instances12_key(Datum instance_id, bool fresh, int64 *key)
{
	Datum		args[1];

	args[0] = instance_id;
	if (!fresh)
	{
		gridha_exec(&instances12_clear_key, args, NULL, false);
		return false;
	}
	gridha_exec(&instances12_new_key, args, NULL, false);
	if (SPI_processed == 0)
		return false;
	*key = gridha_col_int64(0, 1);
	return true;
}

/*
 * gridha_instances12_adopt: a worker's instance without an owner is owned
 * by owner_name; true if it was.
 */
bool
gridha_instances12_adopt(Datum instance_id, Datum owner_name)
{
	Datum		args[2];

	args[0] = instance_id;
	args[1] = owner_name;
	gridha_exec(&instances12_adopt_self, args, NULL, false);
	return SPI_processed > 0;
}

/*
 * gridha_instances12_declare: records the kinds of target the instance
 * serves (any: NULL).
 */
void
gridha_instances12_declare(Datum instance_id, Datum serves, bool any)
{
	Datum		args[2];
	char		nulls[3] = "  ";

	args[0] = instance_id;
	args[1] = serves;
	if (any)
		nulls[1] = 'n';
	gridha_exec(&instances12_declare, args, nulls, false);
}
