/*-------------------------------------------------------------------------
 *
 * rows.h
 *		Rows of gridha's own tables read, locked and rewritten by key,
 *		without the planner: the hot path's reads and writes (see rows.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_ROWS_H
#define GRIDHA_ROWS_H

#include "postgres.h"
#include "access/attnum.h"
#include "access/stratnum.h"
#include "executor/tuptable.h"
#include "nodes/execnodes.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"

/* The tables the hot path touches */
typedef enum GridhaTable
{
	GRIDHA_CLAIMS,				/* gridha.service_claims */
	GRIDHA_BATCHES,				/* gridha.batches */
	GRIDHA_INSTANCES,			/* gridha.instances */
	GRIDHA_TOTALS,				/* gridha.target_totals (1.2) */
	GRIDHA_NTABLES
} GridhaTable;

/* Their unique keys */
typedef enum GridhaKey
{
	GRIDHA_KEY_CLAIM,			/* service_claims (service_id) */
	GRIDHA_KEY_BATCH_ID,		/* batches (service_id, batch_id) */
	GRIDHA_KEY_BATCH_SEQ,		/* batches (service_id, seq) */
	GRIDHA_KEY_INSTANCE,		/* instances (instance_id) */
	GRIDHA_KEY_TOTALS,			/* target_totals (target, slot) */
	GRIDHA_NKEYS
} GridhaKey;

/*
 * Column numbers, in the order of the install script (rows.c checks each
 * name it uses against the table when it opens it).
 */
#define CLAIM_SERVICE_ID	1
#define CLAIM_TARGET		2
#define CLAIM_CLAIMANT		3
#define CLAIM_EPOCH			4
#define CLAIM_SOFT_EXPIRY	5
#define CLAIM_HARD_EXPIRY	6
#define CLAIM_HEAD_SEQ		7
#define CLAIM_TAIL_SEQ		8
#define CLAIM_READY_AT		9
#define CLAIM_IN_FLIGHT		10

#define BATCH_SERVICE_ID	1
#define BATCH_BATCH_ID		2
#define BATCH_SEQ			3
#define BATCH_PAYLOAD		4
#define BATCH_STATUS		5
#define BATCH_CREATED_AT	6
#define BATCH_EPOCH			7
#define BATCH_ATTEMPTS		8
#define BATCH_NOT_BEFORE	9
#define BATCH_INSTANCE_ID	10
#define BATCH_HANDED_OUT_AT	11
#define BATCH_SUBMITTED_AT	12
#define BATCH_FINISHED_AT	13
#define BATCH_DETAIL		14

#define INSTANCE_ID			1
#define INSTANCE_KIND		3
#define INSTANCE_LAST_SEEN_AT	5
#define INSTANCE_SESSION_KEY	7

#define TOTALS_TARGET		1
#define TOTALS_SLOT			2
#define TOTALS_SETTLED_ENQUEUED	5	/* then committed, invalid, resubmitted */

/*
 * Columns added after gridha 1.0, found by name when a table is opened
 * (gridha_rows_attno): 0 while the database's SQL is older than the
 * column (1.0 for the instances', 1.1 for the claims' counters).
 */
typedef enum GridhaOptionalColumn
{
	INSTANCE_SERVES,			/* instances.serves */
	INSTANCE_OWNER,				/* instances.owner */
	INSTANCE_SOFT_EXPIRY,		/* instances.soft_expiry: the lease */
	INSTANCE_HARD_EXPIRY,		/* instances.hard_expiry */
	INSTANCE_HELD,				/* instances.held: claims it holds */
	INSTANCE_OWNER_CLUSTER,		/* instances.owner_cluster (1.3) */
	CLAIM_COMMITTED_TOTAL,		/* service_claims.committed_total (1.2) */
	CLAIM_INVALID_TOTAL,		/* service_claims.invalid_total (1.2) */
	CLAIM_RESUBMITTED_TOTAL,	/* service_claims.resubmitted_total (1.2) */
	CLAIM_SETTLED_SEQ,			/* service_claims.settled_seq (1.2) */
	CLAIM_SETTLED_COMMITTED,	/* service_claims.settled_committed (1.2) */
	CLAIM_SETTLED_INVALID,		/* service_claims.settled_invalid (1.2) */
	CLAIM_SETTLED_RESUBMITTED,	/* service_claims.settled_resubmitted (1.2) */
	GRIDHA_NOPTIONAL
} GridhaOptionalColumn;

/*
 * When a table's AFTER UPDATE row triggers can fire (rows.c,
 * rows_after_update): always, when one names no column (and is not a
 * foreign key's check, or is a MATCH FULL one) or a BEFORE UPDATE row
 * trigger or a generated column may change more than the update names;
 * else when the update names one of the columns they name, or, for a
 * foreign key's check, one of its key's columns or a row this transaction
 * inserted. PostgreSQL queues no event in the other cases either
 * (TriggerEnabled, RI_FKey_fk_upd_check_required): the writer then skips
 * ExecARUpdateTriggers, which would look at each trigger again for every
 * row. Copied into each command (a nested one may make the set again).
 */
typedef struct RowsAfterUpdate
{
	bool		always;
	bool		fk;				/* a foreign key's check is among them */
	Bitmapset  *cols;			/* offset by FirstLowInvalidHeapAttributeNumber */
} RowsAfterUpdate;

/* One table as a GridhaRows uses it */
typedef struct GridhaRowsRel
{
	Relation	rel;			/* NULL until first used */
	ResultRelInfo *rri;			/* writers: its indexes and triggers */
	TupleTableSlot *row;		/* the row found last (locked, for writers) */
	TupleTableSlot *next;		/* the new version being written */
	Index		rti;			/* its range table entry */
	Trigger		guard;			/* batches_final, checked here (rows.c) */
	bool		has_guard;		/* guard taken out of rri's triggers */
	bool		indexes_open;	/* rri's indexes opened (an update needed them;
								 * a partial one may be left NULL until an
								 * entry is written to it) */
	const Oid  *index_oids;		/* rri's indexes' OIDs, when opened */
	RowsAfterUpdate after_update;	/* when its AFTER UPDATE row triggers fire */
} GridhaRowsRel;

/* A set of reads and writes done as one command (see rows.c) */
typedef struct GridhaRows
{
	bool		write;
	Oid			nspid;			/* schema gridha */
	Snapshot	snapshot;
	EState	   *estate;
	EPQState	epq;
	GridhaRowsRel rels[GRIDHA_NTABLES];
} GridhaRows;

/* One column of a new row version */
typedef struct GridhaColumn
{
	int			attno;
	Datum		value;
	bool		isnull;
} GridhaColumn;

/* What locking a row came to */
typedef enum GridhaLockResult
{
	GRIDHA_ROW_LOCKED,			/* locked; its newest version is current */
	GRIDHA_ROW_SKIPPED,			/* skip_locked: another transaction holds it */
	GRIDHA_ROW_GONE				/* deleted meanwhile */
} GridhaLockResult;

/* What an update came to */
typedef enum GridhaUpdateResult
{
	GRIDHA_ROW_UPDATED,			/* written */
	GRIDHA_ROW_CHANGED,			/* changed since: judge the newest version */
	GRIDHA_ROW_DELETED,			/* deleted since: nothing to write */
	GRIDHA_ROW_SKIPPED_BY_TRIGGER	/* a BEFORE UPDATE trigger said not to */
} GridhaUpdateResult;

/* A strategy of gridha_rows_scan: the column IS NULL (its value unused) */
#define GRIDHA_IS_NULL		InvalidStrategy

extern void gridha_rows_begin(GridhaRows *rows, bool write);
extern void gridha_rows_scan(GridhaRows *rows, GridhaTable table, const AttrNumber *attnos,
							 const StrategyNumber *strategies, const Datum *values, int n,
							 bool (*visit) (GridhaRows *rows, void *arg), void *arg);
/* The partial indexes the idle poll scans, found by their definition */
typedef enum GridhaPartialIndex
{
	GRIDHA_INDEX_LEASE,			/* instances (soft_expiry) WHERE soft_expiry
								 * IS NOT NULL: instances_lease */
	GRIDHA_INDEX_OWN_EXPIRY		/* service_claims (soft_expiry) WHERE
								 * soft_expiry IS NOT NULL OR hard_expiry IS
								 * NOT NULL: service_claims_own_expiry */
} GridhaPartialIndex;

extern void gridha_rows_scan_index(GridhaRows *rows, GridhaPartialIndex which,
								   bool (*visit) (GridhaRows *rows, void *arg), void *arg);
extern GridhaLockResult gridha_rows_lock(GridhaRows *rows, GridhaTable table,
										 bool for_update, bool skip_locked);
extern void gridha_rows_hold_for_write(GridhaTable table);
extern bool gridha_rows_fetch(GridhaRows *rows, GridhaKey key, Datum *values);
extern bool gridha_rows_fetch_tid(GridhaRows *rows, GridhaTable table, ItemPointer tid);
extern ItemPointerData gridha_rows_stored_tid(GridhaRows *rows, GridhaTable table);
extern Datum gridha_rows_get(GridhaRows *rows, GridhaTable table, int attno,
							 bool *isnull);
extern GridhaUpdateResult gridha_rows_update(GridhaRows *rows, GridhaTable table,
											 GridhaColumn *cols, int ncols);
extern AttrNumber gridha_rows_attno(GridhaRows *rows, GridhaOptionalColumn col);
extern Datum gridha_rows_get_stored(GridhaRows *rows, GridhaTable table, int attno,
									bool *isnull);
extern void gridha_rows_end(GridhaRows *rows);

/* The labels of gridha.batch_status, in its order */
typedef enum GridhaStatus
{
	GRIDHA_QUEUED,
	GRIDHA_SUBMITTING,
	GRIDHA_PENDING,
	GRIDHA_VALID,
	GRIDHA_DELAYED,
	GRIDHA_UNKNOWN,
	GRIDHA_COMMITTED,
	GRIDHA_INVALID,
	GRIDHA_NSTATUSES
} GridhaStatus;

/* committed and invalid: never change again */
#define GRIDHA_STATUS_IS_FINAL(s) ((s) == GRIDHA_COMMITTED || (s) == GRIDHA_INVALID)

extern Datum gridha_status_datum(GridhaStatus status);
extern GridhaStatus gridha_status_of(Datum value);

#endif							/* GRIDHA_ROWS_H */
