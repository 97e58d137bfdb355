/*-------------------------------------------------------------------------
 *
 * sql12.c
 *		The C entry points that only gridha 1.2's SQL names: calls whose
 *		statements gridha 1.3 keeps in its install script (issue 42).
 *
 * The 1.2 install script declares every call as a C function of this
 * library; the 1.3 script declares the cold ones in SQL, which a DBA can
 * read and EXPLAIN. This library serves both (src/generation.c), so the
 * 1.2 symbols stay until it no longer serves 1.2, and live here alone, to
 * go with it:
 *
 *   served     the calls of the client fleet's cycle, which a 1.2 database
 *              must keep answering until ALTER EXTENSION gridha UPDATE
 *              (verify_batch; claimed_batches, with which gridha-client
 *              finds a hand-out lost with its connection; pending_batches,
 *              which every monitor polls): the same checks and the same
 *              statement as 1.3's SQL
 *   registered register_instance and worker_register (1.3: SQL of the
 *              script over C helpers): their checks, their row's
 *              statement, and the session's bind through src/instances.c
 *              (whose own 1.2 statements are in src/instances12.c, below
 *              it)
 *
 * Nothing in 1.3's SQL names these symbols; sql/gridha--1.3.sql holds the
 * statements that matter.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "instances.h"
#include "spi_util.h"
#include "targets.h"
#include "worker.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"
#include "utils/uuid.h"

/* ... as gridha.verify_batch of the 1.3 script */
static GridhaStatement sql12_verify_stmt = {
	"SELECT c.claimant = $3 AND c.epoch = $4"
	"       AND least(c.hard_expiry, i.hard_expiry) > now()"
	"       AND b.seq = c.head_seq AND b.status = 'submitting' AND b.epoch = $4"
	"       AND b.instance_id = $3"
	"  FROM gridha.service_claims c"
	"  JOIN gridha.batches b ON b.service_id = c.service_id AND b.batch_id = $2"
	"  LEFT JOIN gridha.instances i ON i.instance_id = c.claimant"
	" WHERE c.service_id = $1",
	4, {TEXTOID, TEXTOID, UUIDOID, INT8OID}
};

/* ... as gridha.claimed_batches of the 1.3 script */
static GridhaStatement sql12_claimed_stmt = {
	"SELECT c.service_id, h.batch_id, h.seq, h.status, c.epoch"
	"  FROM (SELECT c.service_id, c.head_seq, c.epoch, c.ready_at"
	"          FROM gridha.service_claims c"
	"         WHERE c.claimant = $1 AND c.head_seq IS NOT NULL"
	"         ORDER BY c.ready_at, c.service_id"
	"         LIMIT $2) c"
	" CROSS JOIN LATERAL ("
	"  SELECT b.batch_id, b.seq, b.status FROM gridha.batches b"
	"   WHERE b.service_id = c.service_id AND b.seq = c.head_seq"
	"   LIMIT 1) h"
	" ORDER BY c.ready_at, c.service_id",
	2, {UUIDOID, INT8OID}
};

/* ... as gridha.pending_batches of the 1.3 script */
static GridhaStatement sql12_pending_stmt = {
	"SELECT c.service_id, h.batch_id, h.status, c.epoch, h.submitted_at"
	"  FROM gridha.service_claims c"
	" CROSS JOIN LATERAL ("
	"  SELECT b.batch_id, b.status, b.submitted_at FROM gridha.batches b"
	"   WHERE b.service_id = c.service_id AND b.seq = c.head_seq"
	"     AND b.status IN ('pending', 'valid')"
	"   LIMIT 1) h"
	" WHERE c.claimant = $1 AND c.in_flight"
	" ORDER BY h.submitted_at, c.service_id"
	" LIMIT $2",
	2, {UUIDOID, INT8OID}
};

/*
 * sql12_listing: a read-only listing of this instance's claims
 * (instance_id, max_batches), its rows the statement's, five columns.
 */
static Datum
sql12_listing(FunctionCallInfo fcinfo, GridhaStatement *stmt)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	int32		max_batches = gridha_arg_count(fcinfo, 1, "max_batches");
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		args[2];

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	gridha_instance_check(instance_id);
	args[0] = instance_id;
	args[1] = Int64GetDatum(max_batches);
	gridha_exec(stmt, args, NULL, true);
	gridha_put_rows(rsinfo, 5);
	SPI_finish();
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(gridha_claimed_batches);

/*
 * gridha_claimed_batches: SQL 1.2 gridha.claimed_batches(instance_id,
 * max_batches).
 */
Datum
gridha_claimed_batches(PG_FUNCTION_ARGS)
{
	return sql12_listing(fcinfo, &sql12_claimed_stmt);
}

PG_FUNCTION_INFO_V1(gridha_verify_batch);

/*
 * gridha_verify_batch: SQL 1.2 gridha.verify_batch(instance_id, service_id,
 * batch_id, epoch) -> boolean.
 */
Datum
gridha_verify_batch(PG_FUNCTION_ARGS)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");
	text	   *service_id = gridha_arg_id(fcinfo, 1, "service_id");
	text	   *batch_id = gridha_arg_id(fcinfo, 2, "batch_id");
	int64		epoch = gridha_arg_epoch(fcinfo, 3);
	Datum		args[4];
	bool		ok = false;

	SPI_connect();
	gridha_instance_check(instance_id);
	args[0] = PointerGetDatum(service_id);
	args[1] = PointerGetDatum(batch_id);
	args[2] = instance_id;
	args[3] = Int64GetDatum(epoch);
	gridha_exec(&sql12_verify_stmt, args, NULL, true);
	if (SPI_processed > 0)
	{
		bool		isnull;
		Datum		d = gridha_col(0, 1, &isnull);

		ok = !isnull && DatumGetBool(d);
	}
	SPI_finish();
	PG_RETURN_BOOL(ok);
}

PG_FUNCTION_INFO_V1(gridha_pending_batches);

/*
 * gridha_pending_batches: SQL 1.2 gridha.pending_batches(instance_id,
 * max_batches).
 */
Datum
gridha_pending_batches(PG_FUNCTION_ARGS)
{
	return sql12_listing(fcinfo, &sql12_pending_stmt);
}

/*
 * SQL 1.2's register_instance and worker_register: the statements 1.3's
 * install script runs as gridha.register_instance and
 * gridha_internal.worker_register.
 */
/* ... as gridha.register_instance */
static GridhaStatement sql12_register_owned = {
	"INSERT INTO gridha.instances (instance_id, label, kind, owner)"
	" VALUES (pg_catalog.gen_random_uuid(), $1, 'external', $2)"
	" RETURNING instance_id",
	2, {TEXTOID, NAMEOID}
};

/* ... as gridha_internal.worker_register */
static GridhaStatement sql12_worker_insert = {
	"INSERT INTO gridha.instances (instance_id, label, kind, owner)"
	" VALUES ($1, $2, 'worker', $3) ON CONFLICT (instance_id) DO NOTHING",
	3, {UUIDOID, TEXTOID, NAMEOID}
};

PG_FUNCTION_INFO_V1(gridha_register_instance);

/*
 * gridha_register_instance: SQL 1.2's gridha.register_instance(label) and
 * (label, serves) -> uuid: a new external instance, owned by the calling
 * role, serving the kinds of target given (NULL: any target).
 */
Datum
gridha_register_instance(PG_FUNCTION_ARGS)
{
	Datum		args[2];
	char		nulls[3] = "   ";
	bool		isnull;
	Datum		id;
	NameData	name;
	int			serves = GRIDHA_SERVES_ANY;

	gridha_require_writable("register_instance()");
	if (PG_NARGS() > 1 && !PG_ARGISNULL(1))
		serves = gridha_serves_parse(PG_GETARG_DATUM(1));
	args[0] = PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0);
	nulls[0] = PG_ARGISNULL(0) ? 'n' : ' ';

	SPI_connect();
	namestrcpy(&name, GetUserNameFromId(GetOuterUserId(), false));
	args[1] = NameGetDatum(&name);
	nulls[1] = ' ';
	gridha_exec(&sql12_register_owned, args, nulls, false);
	id = gridha_col(0, 1, &isnull);
	id = SPI_datumTransfer(id, false, UUID_LEN);
	(void) gridha_instance_touch(id);
	if (serves != GRIDHA_SERVES_ANY)
		gridha_instance_declare(id, serves);
	SPI_finish();
	PG_RETURN_DATUM(id);
}

PG_FUNCTION_INFO_V1(gridha_worker_register);

/*
 * gridha_worker_register: SQL 1.2's gridha.worker_register(instance_id,
 * label) -> boolean: registers the calling background worker's instance,
 * kind worker, owned by the role the worker runs as, after the checks of
 * gridha_worker_register_check (RG016 in any process but a gridha
 * worker). False when the id has a row already.
 */
Datum
gridha_worker_register(PG_FUNCTION_ARGS)
{
	Datum		args[3];
	char		nulls[4] = "   ";
	NameData	owner;
	bool		done;

	gridha_worker_register_check(fcinfo, &owner);
	args[0] = PG_GETARG_DATUM(0);
	if (PG_ARGISNULL(1))
		nulls[1] = 'n';
	else
		args[1] = PG_GETARG_DATUM(1);
	args[2] = NameGetDatum(&owner);
	SPI_connect();
	gridha_exec(&sql12_worker_insert, args, nulls, false);
	done = SPI_processed == 1;
	SPI_finish();
	PG_RETURN_BOOL(done);
}
