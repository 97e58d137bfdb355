/*-------------------------------------------------------------------------
 *
 * common.h
 *		What every part of gridha shares: its SQLSTATEs, lock tags and
 *		limits (the settings' variables and timings: settings.h).
 *
 * Times are kept in milliseconds, as the GUCs store them; the effective
 * timings (gridha_timing) repair inconsistent combinations so a claim is
 * always renewed before its soft expiry and never hard-expires first.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_COMMON_H
#define GRIDHA_COMMON_H

#include "postgres.h"

#include "utils/timestamp.h"

/*
 * The search_path every SQL function of gridha runs with: set by its SET
 * clause, by gridha_pinned_call before the first statement of a claim-cycle
 * call (spi_util.c), or by each step of a worker (step.c)
 */
#define GRIDHA_SEARCH_PATH "pg_catalog, gridha, pg_temp"

/*
 * gridha's own SQLSTATE class "RG": not one PostgreSQL uses, so a client
 * can tell gridha's refusals apart from everything else.
 */
#define ERRCODE_GRIDHA_STALE_CLAIM			MAKE_SQLSTATE('R','G','0','0','1')
#define ERRCODE_GRIDHA_NOT_IN_FLIGHT		MAKE_SQLSTATE('R','G','0','0','2')
#define ERRCODE_GRIDHA_UNKNOWN_BATCH		MAKE_SQLSTATE('R','G','0','0','3')
#define ERRCODE_GRIDHA_UNKNOWN_OUTCOME		MAKE_SQLSTATE('R','G','0','0','4')
#define ERRCODE_GRIDHA_UNKNOWN_DLT_STATUS	MAKE_SQLSTATE('R','G','0','0','5')
#define ERRCODE_GRIDHA_UNKNOWN_TARGET		MAKE_SQLSTATE('R','G','0','0','6')
#define ERRCODE_GRIDHA_INVALID_TARGET		MAKE_SQLSTATE('R','G','0','0','7')
#define ERRCODE_GRIDHA_NOT_OWNER			MAKE_SQLSTATE('R','G','0','0','8')
/* 1.2: a service's target is changed by an administrator only */
#define ERRCODE_GRIDHA_TARGET_MISMATCH		MAKE_SQLSTATE('R','G','0','1','3')
/* 1.2: schema gridha could hold another role's objects */
#define ERRCODE_GRIDHA_UNSAFE_SCHEMA		MAKE_SQLSTATE('R','G','0','1','5')
/* 1.2: only a gridha background worker registers a worker instance */
#define ERRCODE_GRIDHA_NOT_A_WORKER			MAKE_SQLSTATE('R','G','0','1','6')
/* 1.3: the database's gridha SQL is older than 1.2 (generation.c) */
#define ERRCODE_GRIDHA_SQL_NOT_SERVED		MAKE_SQLSTATE('R','G','0','2','2')
/* 1.3: a report on a batch no attempt was ever handed out for (status.c) */
#define ERRCODE_GRIDHA_NEVER_HANDED_OUT		MAKE_SQLSTATE('R','G','0','2','3')
/* 1.3: gridha.unknown_instance = refuse, and the instance id is unknown */
#define ERRCODE_GRIDHA_UNKNOWN_INSTANCE		MAKE_SQLSTATE('R','G','0','2','4')
/* 1.3: a duty name reserved for gridha's own leases (leader.c) */
#define ERRCODE_GRIDHA_RESERVED_DUTY		MAKE_SQLSTATE('R','G','0','2','5')
/* Section 7: ID windows */
#define ERRCODE_GRIDHA_UNKNOWN_ID_SEQUENCE	MAKE_SQLSTATE('R','G','0','1','0')
#define ERRCODE_GRIDHA_ID_COUNT_TOO_LARGE	MAKE_SQLSTATE('R','G','0','1','1')
#define ERRCODE_GRIDHA_ID_SEQUENCE_EXISTS	MAKE_SQLSTATE('R','G','0','1','2')
/* an index the hot path scans is missing or not the one gridha created */
#define ERRCODE_GRIDHA_INDEX_ALTERED		MAKE_SQLSTATE('R','G','0','1','4')
/* 1.3: a table of schema gridha is not a plain local table (tables.c) */
#define ERRCODE_GRIDHA_UNSUPPORTED_TABLE	MAKE_SQLSTATE('R','G','0','3','0')
/*
 * 1.3, issue 43.2: the Citus mode. gridha.citus_setup and the per-bucket
 * functions raise RG031-RG034, RG036 and RG037 in SQL; tables.c raises RG035.
 */
#define ERRCODE_GRIDHA_CITUS_ABSENT		MAKE_SQLSTATE('R','G','0','3','1')
#define ERRCODE_GRIDHA_TABLES_HOLD_ROWS	MAKE_SQLSTATE('R','G','0','3','2')
#define ERRCODE_GRIDHA_BAD_BUCKET_COUNT	MAKE_SQLSTATE('R','G','0','3','3')
#define ERRCODE_GRIDHA_CITUS_MODE_EXISTS	MAKE_SQLSTATE('R','G','0','3','4')
#define ERRCODE_GRIDHA_CITUS_MODE		MAKE_SQLSTATE('R','G','0','3','5')
#define ERRCODE_GRIDHA_WRONG_BUCKET		MAKE_SQLSTATE('R','G','0','3','6')
#define ERRCODE_GRIDHA_NOT_CITUS_MODE	MAKE_SQLSTATE('R','G','0','3','7')
/*
 * 1.3, issue 43: gridha.enqueue with a target, and gridha.register_instance
 * with serves, in the Citus mode while it had no targets; no longer raised
 * (reserved)
 */
#define ERRCODE_GRIDHA_CITUS_NO_TARGET	MAKE_SQLSTATE('R','G','0','3','8')
#define ERRCODE_GRIDHA_CITUS_NO_SERVES	MAKE_SQLSTATE('R','G','0','3','9')
/*
 * (RG040, a rate limit refused in the Citus mode, was retired before 1.3
 * was released: the mode applies them.)
 */
/*
 * 1.3, issue 43: run_maintenance, prune_batches or an ID sequence's call in
 * the Citus mode off the coordinator (its maintenance lease and ticks, and
 * the ID sequences, are the coordinator's); raised in SQL and by idseq.c
 */
#define ERRCODE_GRIDHA_CITUS_NOT_COORDINATOR	MAKE_SQLSTATE('R','G','0','4','3')
/*
 * 1.3, issue 43: the Citus mode's lifecycle (raised in SQL): no restored
 * bucket tables for citus_restore; restored ones that are not one layout.
 * (RG046, a refusal of citus_setup(move_rows => true) while ID sequences
 * existed, was retired before 1.3 was released: they stay, served in the
 * mode.)
 */
#define ERRCODE_GRIDHA_CITUS_NOTHING_RESTORED	MAKE_SQLSTATE('R','G','0','4','7')
#define ERRCODE_GRIDHA_CITUS_RESTORE_INCONSISTENT	MAKE_SQLSTATE('R','G','0','4','8')
/*
 * 1.3: internal to the Citus mode's claim cycle (raised and caught in SQL,
 * gridha_internal.citus_take): a bucket looked at and not taken, its look
 * undone with its row lock; never reaches a caller
 */
#define ERRCODE_GRIDHA_CITUS_NOT_TAKEN	MAKE_SQLSTATE('R','G','0','4','9')
/* 1.3: a service's head had no batch row (or a final one): repaired */
#define ERRCODE_GRIDHA_HEAD_REPAIRED		MAKE_SQLSTATE('R','G','0','2','0')


/*
 * Session liveness: an instance's session holds a lock keyed by the
 * instance's session_key (a bigint, given once per instance; see
 * instances.c); a lock nobody holds means the session has ended. The lock
 * is a "userlock": a lock tag no SQL function can take, so no other role
 * can hold it in the instance's stead (an advisory lock, as 1.1 used,
 * anyone with pg_advisory_lock could take). The SQL condition below is
 * true for such an instance (alias i of gridha.instances); pg_locks shows
 * the tag's fields as classid (key's high half), objid (low half) and
 * objsubid (GRIDHA_LIVENESS_TAG).
 */
#define GRIDHA_LOCK_CLASS			1735551073	/* "grha" */
#define GRIDHA_LIVENESS_TAG			26472	/* "gh" */
/* the probe lock of a key (instances.c): its liveness probes hold it */
#define GRIDHA_PROBE_TAG			26480	/* "gp" */

/*
 * Two more userlocks, each taken for a transaction and never waited for,
 * so that no role without gridha rights can hold them either (an advisory
 * lock anyone can take): a duty's lock, while a hand-out's poll duty takes
 * its lease (leader.c; field3 a hash of the duty's name), and a totals
 * slot's, while a transaction writes that slot's rows of
 * gridha.target_totals (totals.c; field3 the slot). Both have
 * GRIDHA_LOCK_CLASS in field2.
 */
#define GRIDHA_LEADER_TAG			26476	/* "gl" */
#define GRIDHA_TOTALS_TAG			26484	/* "gt" */

/*
 * GRIDHA_USERLOCK_TAG: the tag of such a lock in this database.
 */
#define GRIDHA_USERLOCK_TAG(tag, key, kind) \
	((tag).locktag_field1 = MyDatabaseId, \
	 (tag).locktag_field2 = GRIDHA_LOCK_CLASS, \
	 (tag).locktag_field3 = (uint32) (key), \
	 (tag).locktag_field4 = (kind), \
	 (tag).locktag_type = LOCKTAG_USERLOCK, \
	 (tag).locktag_lockmethodid = USER_LOCKMETHOD)
#define GRIDHA_SESSION_GONE(i) \
	"(" i ".session_key IS NOT NULL AND NOT EXISTS (" \
	" SELECT 1 FROM pg_catalog.pg_locks l" \
	"  WHERE l.locktype OPERATOR(pg_catalog.=) 'userlock' AND l.granted" \
	"    AND l.objsubid OPERATOR(pg_catalog.=) " CppAsString2(GRIDHA_LIVENESS_TAG) \
	"    AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d" \
	"          WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())" \
	"    AND l.classid OPERATOR(pg_catalog.=) pg_catalog.oid(" i ".session_key OPERATOR(pg_catalog.>>) 32)" \
	"    AND l.objid OPERATOR(pg_catalog.=) pg_catalog.oid(" i ".session_key OPERATOR(pg_catalog.&) 4294967295)))"


/*
 * The longest id (service, batch, target, role, sequence name), in bytes:
 * ids are btree keys, and two of them make the batches' primary key.
 */
#define GRIDHA_MAX_ID_BYTES		512

/* Backoff of a delayed batch: base, growth per attempt, cap (ms) */
#define GRIDHA_BACKOFF_BASE_MS		250
#define GRIDHA_BACKOFF_STEP_MS		500
#define GRIDHA_BACKOFF_MAX_MS		60000

/*
 * gridha_backoff_until: when a batch delayed after its attempts-th hand-out
 * may go again: the wait grows with the attempts, up to the cap.
 */
static inline TimestampTz
gridha_backoff_until(TimestampTz now, int32 attempts)
{
	int64		ms = GRIDHA_BACKOFF_BASE_MS + (int64) GRIDHA_BACKOFF_STEP_MS * Max(attempts - 1, 0);

	return TimestampTzPlusMilliseconds(now, Min(ms, GRIDHA_BACKOFF_MAX_MS));
}

#endif							/* GRIDHA_COMMON_H */
