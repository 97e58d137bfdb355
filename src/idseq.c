/*-------------------------------------------------------------------------
 *
 * idseq.c
 *		ID windows, a distributed hi-lo: gridha.reserve_ids and next_id
 *		(served on SQL 1.3 and 1.2), and the C helpers of the 1.3 script's
 *		create_id_sequence, drop_id_sequence and window agent
 *		(gridha_internal.id_windows_top_up, which maintenance runs), whose
 *		statements are the script's (section 7).
 *
 * Words:
 *   sequence    a row of gridha.id_sequences: a name, a window size, how
 *               many open windows to keep, and its high water (the last id
 *               given to any window); its serial changes when it is dropped
 *               and created again
 *   window      a row of gridha.id_windows: ids [window_start, window_end)
 *               of one sequence, of which [next_id, window_end) are not
 *               reserved yet; open while next_id < window_end
 *   block       a contiguous run of ids inside one window, reserved by one
 *               caller by moving the window's next_id past it
 *   agent       the maintenance duty that keeps min_open_windows open
 *               windows per sequence, past the high water; it keeps no
 *               state of its own. It counts a window as open while it has
 *               room for a block of gridha.id_block_size ids (at most the
 *               window), and retires windows with less room: their last
 *               few ids become a gap instead of lingering
 *
 * Reservations never wait for each other: a caller takes the first open
 * window with room that nobody has locked (FOR UPDATE SKIP LOCKED), and
 * opens a new window itself when there is none. The high water only grows
 * (it survives drop_id_sequence too), so no two windows ever overlap and no
 * id is reserved twice.
 *
 * A reservation is part of its transaction: if that rolls back, the block
 * returns to its window. gridha.next_id serves ids from a block cached in
 * backend memory, keyed by the sequence's serial; a block reserved by a
 * (sub)transaction that rolls back is forgotten with it, so a backend never
 * serves an id that another caller can reserve again. The backend checks a
 * name again only after gridha.id_sequences was invalidated: dropping or
 * creating a sequence (and deleting rows by hand) sends a relcache
 * invalidation of that table to every backend at commit.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "common.h"
#include "generation.h"
#include "idseq.h"
#include "settings.h"
#include "spi_util.h"
#include "tables.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rangetypes.h"
#include "utils/typcache.h"

/* min_open_windows of create_id_sequence, at most */
#define IDSEQ_MAX_OPEN_WINDOWS	1000

static GridhaStatement idseq_lookup_stmt = {
	"SELECT q.serial, q.window_size FROM gridha.id_sequences q"
	" WHERE q.name = $1 AND NOT q.dropped",
	1, {TEXTOID}
};

static GridhaStatement idseq_take_stmt = {
	"WITH w AS ("
	"  SELECT w.name, w.window_start FROM gridha.id_windows w"
	"   WHERE w.name = $1 AND w.next_id + $2 <= w.window_end"
	"   ORDER BY w.window_start"
	"   LIMIT 1"
	"   FOR UPDATE SKIP LOCKED"
	")"
	" UPDATE gridha.id_windows x SET next_id = x.next_id + $2"
	"   FROM w"
	"  WHERE x.name = w.name AND x.window_start = w.window_start"
	"    AND x.next_id + $2 <= x.window_end"
	" RETURNING x.next_id - $2, x.next_id",
	2, {TEXTOID, INT4OID}
};

/* A new window past the high water, with the caller's block taken. */
static GridhaStatement idseq_open_stmt = {
	"WITH u AS ("
	"  UPDATE gridha.id_sequences SET high_water = high_water + window_size"
	"   WHERE name = $1 AND NOT dropped"
	"  RETURNING name, high_water - window_size + 1 AS ws, high_water + 1 AS we"
	")"
	" INSERT INTO gridha.id_windows (name, window_start, window_end, next_id)"
	" SELECT name, ws, we, ws + $2 FROM u"
	" RETURNING window_start, next_id",
	2, {TEXTOID, INT4OID}
};

/*
 * The windows of sequences whose row is gone (deleted or truncated by
 * hand). gridha.id_windows has no foreign key to gridha.id_sequences on
 * purpose: the key-share lock each new window's check would take on its
 * sequence row mixes with the updates of high_water that opening windows
 * makes, under concurrent reservations that roll back, into multixacts
 * that PostgreSQL 17 refused with "new multixact has more than one
 * updating member" (40_idseq_soak with small windows). Every writer of a
 * window updates or locks its sequence row first, so a window never
 * appears for a row being deleted.
 */
static GridhaStatement idseq_orphans_stmt = {
	"DELETE FROM gridha.id_windows w"
	" WHERE NOT EXISTS (SELECT 1 FROM gridha.id_sequences q WHERE q.name = w.name)",
	0, {InvalidOid}
};

/* This node was found to be the Citus coordinator (idseq_require_writable) */
static bool idseq_coordinator = false;

/*
 * idseq_require_coordinator: in the Citus mode, RG043 unless this node is
 * the cluster's coordinator; remembered for the backend once it is.
 */
static void
idseq_require_coordinator(const char *what)
{
	bool		isnull;
	bool		coordinator;

	SPI_connect();
	if (SPI_execute("SELECT pg_catalog.citus_is_coordinator()", true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "gridha: could not ask Citus whether this node is the coordinator");
	coordinator = DatumGetBool(gridha_col(0, 1, &isnull)) && !isnull;
	SPI_finish();
	if (!coordinator)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_CITUS_NOT_COORDINATOR),
				 errmsg("gridha.%s runs on the coordinator in Citus mode, and this node is not it", what),
				 errdetail("The Citus mode keeps the ID sequences and their windows in plain tables of the coordinator (gridha.id_sequences, gridha.id_windows), one for the cluster; this node's own would hand the same ids out again."),
				 errhint("Call it on the coordinator.")));
	idseq_coordinator = true;
}

/*
 * idseq_require_writable: gridha_require_writable for the ID sequences'
 * calls, which the Citus mode serves on its coordinator (RG043 elsewhere):
 * there gridha.id_sequences and gridha.id_windows stay plain tables of the
 * coordinator, where every call of the mode runs. On one server the same
 * checks as gridha_require_writable.
 */
static void
idseq_require_writable(const char *what)
{
	if (unlikely(gridha_require_plain_tables_or_mode()) && !idseq_coordinator)
		idseq_require_coordinator(what);
	gridha_require_writable_served(what);
}

/*
 * The backend's blocks for next_id, one per sequence name, in
 * TopMemoryContext.
 */
typedef struct IdseqBlock
{
	char	   *name;
	int64		serial;			/* the sequence incarnation it came from */
	int64		window_size;
	int64		next;			/* next id to serve */
	int64		end;			/* first id past the block */
	SubTransactionId subid;		/* reserving subtransaction while its
								 * transaction is open, else invalid */
	uint64		checked;		/* idseq_generation of the last name check */
} IdseqBlock;

static IdseqBlock *idseq_blocks = NULL;
static int	idseq_nblocks = 0;
static int	idseq_maxblocks = 0;

/* Bumped by every invalidation of gridha.id_sequences: names are checked
 * again after it. Starts at 1 so a new block is always checked. */
static uint64 idseq_generation = 1;
static Oid	idseq_relid = InvalidOid;
static bool idseq_callbacks_registered = false;

/*
 * idseq_sequences_relid: the oid of gridha.id_sequences (it changes when
 * the extension is created again).
 */
static Oid
idseq_sequences_relid(void)
{
	Oid			nsp = get_namespace_oid("gridha", false);

	return get_relname_relid("id_sequences", nsp);
}

/*
 * idseq_relcache_callback: gridha.id_sequences (or every relation) was
 * invalidated; every name is checked again at its next use.
 */
static void
idseq_relcache_callback(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == idseq_relid)
		idseq_generation++;
}

/*
 * idseq_invalidate: at commit, tells every backend to check its names again.
 */
static void
idseq_invalidate(void)
{
	Oid			relid = idseq_sequences_relid();

	if (OidIsValid(relid))
		CacheInvalidateRelcacheByRelid(relid);
}

/*
 * idseq_forget: drops a block's ids (they become a gap).
 */
static void
idseq_forget(IdseqBlock *b)
{
	b->next = b->end = 0;
	b->subid = InvalidSubTransactionId;
}

/*
 * idseq_xact_callback: at commit a block reserved in the transaction
 * becomes the backend's for good; at abort (or prepare, whose outcome this
 * backend never learns) it is forgotten, since its reservation may not last.
 */
static void
idseq_xact_callback(XactEvent event, void *arg)
{
	int			i;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			for (i = 0; i < idseq_nblocks; i++)
				idseq_blocks[i].subid = InvalidSubTransactionId;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			for (i = 0; i < idseq_nblocks; i++)
				if (idseq_blocks[i].subid != InvalidSubTransactionId)
					idseq_forget(&idseq_blocks[i]);
			break;
		default:
			break;
	}
}

/*
 * idseq_subxact_callback: a block reserved in a subtransaction that rolls
 * back is forgotten; one whose subtransaction commits passes to the parent.
 */
static void
idseq_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	int			i;

	for (i = 0; i < idseq_nblocks; i++)
	{
		IdseqBlock *b = &idseq_blocks[i];

		if (b->subid != mySubid)
			continue;
		if (event == SUBXACT_EVENT_ABORT_SUB)
			idseq_forget(b);
		else if (event == SUBXACT_EVENT_COMMIT_SUB)
			b->subid = parentSubid;
	}
}

/*
 * idseq_block_for: the backend's block entry for a sequence name (created
 * empty when new).
 */
static IdseqBlock *
idseq_block_for(const char *name)
{
	IdseqBlock *b;
	int			i;

	for (i = 0; i < idseq_nblocks; i++)
		if (strcmp(idseq_blocks[i].name, name) == 0)
			return &idseq_blocks[i];

	if (!idseq_callbacks_registered)
	{
		RegisterXactCallback(idseq_xact_callback, NULL);
		RegisterSubXactCallback(idseq_subxact_callback, NULL);
		gridha_on_relcache(idseq_relcache_callback, (Datum) 0);
		idseq_callbacks_registered = true;
	}
	if (idseq_nblocks == idseq_maxblocks)
	{
		int			n = Max(8, idseq_maxblocks * 2);

		if (idseq_blocks == NULL)
			idseq_blocks = MemoryContextAlloc(TopMemoryContext, n * sizeof(IdseqBlock));
		else
			idseq_blocks = repalloc(idseq_blocks, n * sizeof(IdseqBlock));
		idseq_maxblocks = n;
	}
	b = &idseq_blocks[idseq_nblocks];
	memset(b, 0, sizeof(IdseqBlock));
	b->name = MemoryContextStrdup(TopMemoryContext, name);
	b->subid = InvalidSubTransactionId;
	idseq_nblocks++;
	return b;
}

/*
 * idseq_unknown: the error for a name that is not a live sequence.
 */
static void
idseq_unknown(text *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_GRIDHA_UNKNOWN_ID_SEQUENCE),
			 errmsg("unknown id sequence \"%s\"", text_to_cstring(name)),
			 errhint("Create it first with gridha.create_id_sequence().")));
}

/*
 * idseq_lookup: the live sequence's serial and window size; raises the
 * unknown-sequence error when there is none. Inside SPI.
 */
static void
idseq_lookup(text *name, int64 *serial, int64 *window_size)
{
	Datum		args[1];

	args[0] = PointerGetDatum(name);
	gridha_exec_served(&idseq_lookup_stmt, args, NULL, true);
	if (SPI_processed == 0)
		idseq_unknown(name);
	*serial = gridha_col_int64(0, 1);
	*window_size = gridha_col_int64(0, 2);
}

/*
 * idseq_reserve: reserves "count" ids (at most the window size) of a
 * sequence as [*lo, *hi), from an open window nobody else holds, or from a
 * new window. Inside SPI.
 */
static void
idseq_reserve(text *name, int32 count, int64 *lo, int64 *hi)
{
	Datum		args[2];

	args[0] = PointerGetDatum(name);
	args[1] = Int32GetDatum(count);
	gridha_exec_served(&idseq_take_stmt, args, NULL, false);
	if (SPI_processed == 0)
	{
		gridha_exec_served(&idseq_open_stmt, args, NULL, false);
		if (SPI_processed == 0)
			idseq_unknown(name);	/* dropped meanwhile */
	}
	*lo = gridha_col_int64(0, 1);
	*hi = gridha_col_int64(0, 2);
}

PG_FUNCTION_INFO_V1(gridha_id_sequence_call);

/*
 * gridha_id_sequence_call: SQL gridha_internal.id_sequence_call(call,
 * name, window_size, min_open_windows): the checks create_id_sequence()
 * and drop_id_sequence() make before they write (the statements are the
 * 1.3 script's), in the order their C functions of 1.2 made them: the
 * name (a new id for create), for create the window size (1 to 2^31 - 1)
 * and min_open_windows (0 to IDSEQ_MAX_OPEN_WINDOWS: each open window is
 * a row, opened at once and kept by maintenance), a writable transaction.
 */
Datum
gridha_id_sequence_call(PG_FUNCTION_ARGS)
{
	char	   *call;

	if (PG_ARGISNULL(0))
		elog(ERROR, "gridha: id_sequence_call needs the call's name");
	call = text_to_cstring(PG_GETARG_TEXT_PP(0));
	if (strcmp(call, "create_id_sequence()") == 0)
	{
		int64		window_size;
		int32		min_open;

		(void) gridha_arg_new_id(fcinfo, 1, "name");
		if (PG_ARGISNULL(2) || PG_ARGISNULL(3))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("window_size and min_open_windows must not be null")));
		window_size = PG_GETARG_INT64(2);
		min_open = PG_GETARG_INT32(3);
		if (window_size <= 0 || window_size > PG_INT32_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("window_size must be between 1 and %d", PG_INT32_MAX),
					 errdetail("The value given was " INT64_FORMAT ".", window_size)));
		if (min_open < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("min_open_windows must not be negative"),
					 errdetail("The value given was %d.", min_open)));
		if (min_open > IDSEQ_MAX_OPEN_WINDOWS)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("min_open_windows must be at most %d", IDSEQ_MAX_OPEN_WINDOWS),
					 errdetail("The value given was %d.", min_open)));
	}
	else
		(void) gridha_arg_id(fcinfo, 1, "name");
	idseq_require_writable(call);
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(gridha_id_sequences_invalidate);

/*
 * gridha_id_sequences_invalidate: SQL
 * gridha_internal.id_sequences_invalidate(others): a sequence was created
 * or dropped (or a drop found none): this backend checks its next_id
 * names again at once, and with others every backend at commit.
 */
Datum
gridha_id_sequences_invalidate(PG_FUNCTION_ARGS)
{
	int			i;

	for (i = 0; i < idseq_nblocks; i++)
		idseq_blocks[i].checked = 0;
	if (!PG_ARGISNULL(0) && PG_GETARG_BOOL(0))
		idseq_invalidate();
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(gridha_idseq_block_size);

/*
 * gridha_idseq_block_size: SQL gridha_internal.id_block_size() -> bigint:
 * gridha.id_block_size, the block next_id reserves and the room a window
 * needs to count as open.
 */
Datum
gridha_idseq_block_size(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64((int64) gridha_id_block_size);
}

/*
 * SQL 1.2's create_id_sequence and drop_id_sequence, served until ALTER
 * EXTENSION gridha UPDATE (since SQL 1.3 they are functions of its
 * script, which call gridha_internal.id_sequence_call and
 * id_sequences_invalidate here): 1.2's own code and statements.
 */
static GridhaStatement idseq_create_stmt = {
	"INSERT INTO gridha.id_sequences AS q (name, window_size, min_open_windows)"
	" VALUES ($1, $2, $3)"
	" ON CONFLICT (name) DO UPDATE"
	"   SET serial = nextval('gridha.id_sequence_serial'),"
	"       window_size = EXCLUDED.window_size,"
	"       min_open_windows = EXCLUDED.min_open_windows,"
	"       dropped = false, created_at = now()"
	" WHERE q.dropped"
	" RETURNING q.serial",
	3, {TEXTOID, INT8OID, INT4OID}
};

static GridhaStatement idseq_drop_stmt = {
	"WITH d AS ("
	"  UPDATE gridha.id_sequences SET dropped = true"
	"   WHERE name = $1 AND NOT dropped"
	"  RETURNING name"
	"), w AS ("
	"  DELETE FROM gridha.id_windows w USING d WHERE w.name = d.name"
	")"
	" SELECT count(*) FROM d",
	1, {TEXTOID}
};

/*
 * Windows without room for a block of $1 ids are retired (full ones too);
 * the high water remembers them. Windows in use right now are left alone.
 */
static GridhaStatement idseq_retire_stmt = {
	"DELETE FROM gridha.id_windows w"
	" WHERE (w.name, w.window_start) IN ("
	"   SELECT f.name, f.window_start FROM gridha.id_windows f"
	"     JOIN gridha.id_sequences q ON q.name = f.name"
	"    WHERE f.window_end - f.next_id < least($1, q.window_size)"
	"    FOR UPDATE OF f SKIP LOCKED)",
	1, {INT8OID}
};

/*
 * 1.2's window agent: open windows up to min_open_windows ($1: one sequence
 * or all), counting those with room for a block of $2 ids; also the first
 * windows of a sequence 1.2's create_id_sequence makes. A sequence whose
 * row is locked (being dropped, or a reservation opening a window) is
 * skipped.
 */
static GridhaStatement idseq12_top_up_stmt = {
	"WITH s AS ("
	"  SELECT q.name,"
	"         q.min_open_windows - (SELECT count(*) FROM gridha.id_windows w"
	"                                WHERE w.name = q.name"
	"                                  AND w.window_end - w.next_id >= least($2, q.window_size))::int4 AS need"
	"    FROM gridha.id_sequences q"
	"   WHERE NOT q.dropped AND ($1::text IS NULL OR q.name = $1)"
	"), u AS ("
	"  UPDATE gridha.id_sequences q"
	"     SET high_water = q.high_water + s.need * q.window_size"
	"    FROM s"
	"   WHERE q.name = s.name AND s.need > 0 AND NOT q.dropped"
	"     AND q.name IN (SELECT x.name FROM s JOIN gridha.id_sequences x ON x.name = s.name"
	"                     WHERE s.need > 0 FOR UPDATE OF x SKIP LOCKED)"
	"  RETURNING q.name, q.window_size, q.high_water - s.need * q.window_size AS base, s.need"
	"), i AS ("
	"  INSERT INTO gridha.id_windows (name, window_start, window_end, next_id)"
	"  SELECT u.name, u.base + (g - 1) * u.window_size + 1,"
	"         u.base + g * u.window_size + 1, u.base + (g - 1) * u.window_size + 1"
	"    FROM u, generate_series(1, u.need) AS g"
	"  RETURNING 1"
	")"
	" SELECT count(*)::int4 FROM i",
	2, {TEXTOID, INT8OID}
};

/*
 * gridha_idseq12_top_up: the window agent of a tick on SQL 1.2
 * (src/leader12.c): retires windows without room for a block, then opens
 * windows so every live sequence has at least min_open_windows with room.
 * Returns how many windows it opened. Inside SPI.
 */
int32
gridha_idseq12_top_up(void)
{
	Datum		args[2];
	char		nulls[3] = "n ";

	args[0] = Int64GetDatum(gridha_id_block_size);
	gridha_exec(&idseq_retire_stmt, args, NULL, false);
	args[1] = Int64GetDatum(gridha_id_block_size);
	gridha_exec(&idseq12_top_up_stmt, args, nulls, false);
	return (int32) gridha_col_int64(0, 1);
}

PG_FUNCTION_INFO_V1(gridha_create_id_sequence);

/*
 * gridha_create_id_sequence: SQL gridha.create_id_sequence(name,
 * window_size, min_open_windows), and opens its first windows.
 *
 * A name dropped before is created again above everything its earlier
 * incarnation handed out.
 */
Datum
gridha_create_id_sequence(PG_FUNCTION_ARGS)
{
	text	   *name = gridha_arg_new_id(fcinfo, 0, "name");
	int64		window_size;
	int32		min_open;
	Datum		args[3];

	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("window_size and min_open_windows must not be null")));
	window_size = PG_GETARG_INT64(1);
	min_open = PG_GETARG_INT32(2);
	if (window_size <= 0 || window_size > PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("window_size must be between 1 and %d", PG_INT32_MAX),
				 errdetail("The value given was " INT64_FORMAT ".", window_size)));
	if (min_open < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("min_open_windows must not be negative"),
				 errdetail("The value given was %d.", min_open)));
	/* each open window is a row, opened at once and kept by maintenance */
	if (min_open > IDSEQ_MAX_OPEN_WINDOWS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("min_open_windows must be at most %d", IDSEQ_MAX_OPEN_WINDOWS),
				 errdetail("The value given was %d.", min_open)));

	gridha_require_writable("create_id_sequence()");
	SPI_connect();
	args[0] = PointerGetDatum(name);
	args[1] = Int64GetDatum(window_size);
	args[2] = Int32GetDatum(min_open);
	gridha_exec(&idseq_create_stmt, args, NULL, false);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_ID_SEQUENCE_EXISTS),
				 errmsg("id sequence \"%s\" already exists", text_to_cstring(name)),
				 errhint("Use it as it is, or drop it first with gridha.drop_id_sequence().")));
	args[1] = Int64GetDatum(window_size);	/* a fresh window counts */
	gridha_exec(&idseq12_top_up_stmt, args, NULL, false);
	SPI_finish();
	idseq_invalidate();
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(gridha_drop_id_sequence);

/*
 * gridha_drop_id_sequence: SQL gridha.drop_id_sequence(name) -> boolean.
 *
 * Deletes its windows; the name keeps its high water so that a sequence
 * created again under it never repeats an id. False when there was none.
 */
Datum
gridha_drop_id_sequence(PG_FUNCTION_ARGS)
{
	text	   *name = gridha_arg_id(fcinfo, 0, "name");
	Datum		args[1];
	bool		dropped;
	int			i;

	gridha_require_writable("drop_id_sequence()");
	SPI_connect();
	args[0] = PointerGetDatum(name);
	gridha_exec(&idseq_drop_stmt, args, NULL, false);
	dropped = gridha_col_int64(0, 1) > 0;
	SPI_finish();

	/* This backend checks its names again at once, the others at commit. */
	for (i = 0; i < idseq_nblocks; i++)
		idseq_blocks[i].checked = 0;
	if (dropped)
		idseq_invalidate();
	PG_RETURN_BOOL(dropped);
}

PG_FUNCTION_INFO_V1(gridha_reserve_ids);

/*
 * gridha_reserve_ids: SQL gridha.reserve_ids(name, count) -> int8range.
 *
 * A block of "count" contiguous ids inside one window, never crossing its
 * end; concurrent callers get disjoint blocks without waiting.
 */
Datum
gridha_reserve_ids(PG_FUNCTION_ARGS)
{
	text	   *name = gridha_arg_id(fcinfo, 0, "name");
	int32		count;
	int64		serial;
	int64		window_size;
	int64		lo;
	int64		hi;
	TypeCacheEntry *typcache;
	RangeBound	lower;
	RangeBound	upper;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("count must not be null")));
	count = PG_GETARG_INT32(1);
	if (count <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("count must be positive"),
				 errdetail("The value given was %d.", count)));

	idseq_require_writable("reserve_ids()");
	SPI_connect();
	idseq_lookup(name, &serial, &window_size);
	if (count > window_size)
		ereport(ERROR,
				(errcode(ERRCODE_GRIDHA_ID_COUNT_TOO_LARGE),
				 errmsg("cannot reserve %d ids of id sequence \"%s\" at once", count,
						text_to_cstring(name)),
				 errdetail("A block lies inside one window, and the sequence's windows hold " INT64_FORMAT " ids.",
						   window_size),
				 errhint("Reserve at most the window size per call.")));
	idseq_reserve(name, count, &lo, &hi);
	SPI_finish();

	typcache = lookup_type_cache(INT8RANGEOID, TYPECACHE_RANGE_INFO);
	lower.val = Int64GetDatum(lo);
	lower.infinite = false;
	lower.inclusive = true;
	lower.lower = true;
	upper.val = Int64GetDatum(hi);
	upper.infinite = false;
	upper.inclusive = false;
	upper.lower = false;
	PG_RETURN_RANGE_P(make_range_compat(typcache, &lower, &upper, false, NULL));
}

PG_FUNCTION_INFO_V1(gridha_next_id);

/*
 * gridha_next_id: SQL gridha.next_id(name) -> bigint.
 *
 * Served from the backend's block of the sequence, reserving a new block of
 * gridha.id_block_size ids (at most a window) when it is spent. The name is
 * looked up again after gridha.id_sequences was invalidated; a block of an
 * earlier incarnation of the name is not served once that is known.
 */
Datum
gridha_next_id(PG_FUNCTION_ARGS)
{
	text	   *name = gridha_arg_id(fcinfo, 0, "name");
	char	   *cname = text_to_cstring(name);
	IdseqBlock *b;

	idseq_require_writable("next_id()");
	b = idseq_block_for(cname);
	if (b->checked != idseq_generation)
	{
		uint64		generation = idseq_generation;
		int64		serial;
		int64		window_size;

		SPI_connect();
		idseq_relid = idseq_sequences_relid();
		idseq_lookup(name, &serial, &window_size);
		SPI_finish();
		if (b->serial != serial)
		{
			idseq_forget(b);
			b->serial = serial;
		}
		b->window_size = window_size;
		/* an invalidation during the lookup means: check again */
		b->checked = generation;
	}

	if (b->next >= b->end)
	{
		int32		count = (int32) Min((int64) gridha_id_block_size, b->window_size);
		int64		lo;
		int64		hi;

		SPI_connect();
		idseq_reserve(name, count, &lo, &hi);
		SPI_finish();
		b->next = lo;
		b->end = hi;
		b->subid = GetCurrentSubTransactionId();
	}
	pfree(cname);
	PG_RETURN_INT64(b->next++);
}

PG_FUNCTION_INFO_V1(gridha_id_sequences_changed);

/*
 * gridha_id_sequences_changed: trigger on gridha.id_sequences for DELETE
 * and TRUNCATE: rows removed by hand take their windows with them
 * (id_windows has no foreign key: see idseq_orphans_stmt) and make every
 * backend check its names again.
 */
Datum
gridha_id_sequences_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "gridha: id_sequences_changed must be called as a trigger");
	SPI_connect();
	gridha_exec_served(&idseq_orphans_stmt, NULL, NULL, false);
	SPI_finish();
	CacheInvalidateRelcacheByRelid(RelationGetRelid(trigdata->tg_relation));
	return PointerGetDatum(NULL);
}
