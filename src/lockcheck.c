/*-------------------------------------------------------------------------
 *
 * lockcheck.c
 *		The lock-order checker of the test build (-DGRIDHA_LOCK_CHECK,
 *		which `make test` builds with): every row lock a call takes on
 *		gridha's tables is recorded, in the order it is taken, and checked
 *		against the order docs/concurrency.md documents. A lock that breaks
 *		it fails the call at once, naming both locks.
 *
 * What it sees, without any statement having to say so:
 *   - every statement the executor runs, at any depth (a C function's SPI
 *     statements, PL/pgSQL and SQL functions, triggers, foreign key
 *     checks and cascades): the rows it locks with FOR UPDATE / NO KEY
 *     UPDATE / SHARE / KEY SHARE (and whether it waits for them), and the
 *     rows an UPDATE, DELETE or INSERT ... ON CONFLICT writes;
 *   - the rows rows.c locks and rewrites without the executor;
 *   - whether the transaction holds gridha.service_claims (ROW EXCLUSIVE
 *     or stronger) when a row lock is taken.
 * The key of a locked row is known when rows.c takes it, and when the
 * statement's top node locks the rows it returns (SELECT ... FOR ...): the
 * checker reads the row each lock points at as it is returned. Otherwise
 * (an UPDATE's rows, a lock under a join) only its kind is known, and only
 * the order of kinds is checked. A lock of a row the call holds already
 * does not wait: a row of the same key, or, when the call holds rows of
 * that kind whose keys are not known (a hand-out's pick under a join), any
 * row of that kind is taken to be one of them.
 *
 * The rules (docs/concurrency.md, "The order"):
 *   kind    kinds of rows are locked earliest first: 1 targets, 2 claims,
 *           3 rate state, 4 batches, 5 instances, 6 counts. A lock that
 *           waits must come after every lock held of a later kind.
 *   key     within a kind, a lock that waits comes after the held locks of
 *           smaller keys only (service_id and target in "C" order,
 *           instance_id in byte order), and never after a lock of the same
 *           kind taken with SKIP LOCKED, unless it is the same row. A batch
 *           row may be waited for in any order by a transaction that holds
 *           its service's claim (the lone acceptance refinement).
 *   claimed a batch row whose service's claim the call holds is not held
 *           against later locks: a batch row is waited for only by the
 *           holder of its claim, or by a lone acceptance, which waits for
 *           nothing after it (the refinement of docs/concurrency.md).
 *   fk      a target row locked FOR KEY SHARE (a foreign key check) while
 *           the call holds gridha.service_claims is not checked: only a
 *           rename or delete of targets waits for it or makes it wait,
 *           and that takes the table first.
 *   table   gridha.service_claims is held before any row lock is taken; a
 *           call that takes it after a row lock (a statement's BEFORE
 *           STATEMENT trigger, which runs before the statement touches any
 *           row, aside) may wait for it while holding that row.
 * Locks taken without waiting (SKIP LOCKED, NOWAIT), rows of a table the
 * transaction holds EXCLUSIVE, and any row while it holds
 * gridha.service_claims EXCLUSIVE (a TRUNCATE's triggers), never close a cycle
 * themselves, so they are checked only as locks held.
 *
 * Scope: one call: a call of a gridha function (outside any other), or a
 * statement a client sends (each statement of a query string on its own),
 * or a background worker's transaction, with all it runs nested. A
 * transaction of several calls may take them in any
 * order, which docs/concurrency.md leaves to the user. A subtransaction
 * that rolls back gives its locks up, and its records go with it.
 *
 * Documented exceptions are marked by the code that makes them
 * (gridha_lockcheck_exempt): the locks taken so far in the call are then
 * no longer held against later ones.
 *
 * Cost: a lock is checked against a summary of the locks held
 * (lockcheck_held), in constant time; the records are searched only to
 * name the lock a break is against. Built with -DGRIDHA_LOCK_CHECK_VERIFY
 * as well, it also searches them for every lock that waits and fails the
 * call when the summary missed a break (quadratic again: for testing the
 * summary, not for make test).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lockcheck.h"

#ifdef GRIDHA_LOCK_CHECK

#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/plannodes.h"
#include "parser/parsetree.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

typedef enum LockKind
{
	LK_NONE = 0,
	LK_TARGET = 1,
	LK_CLAIM = 2,
	LK_RATE = 3,
	LK_BATCH = 4,
	LK_INSTANCE = 5,
	LK_COUNT = 6
} LockKind;

static const struct
{
	const char *table;
	const char *key;
	LockKind	kind;
}			lockcheck_tables[] = {
	{"targets", "target", LK_TARGET},
	{"service_claims", "service_id", LK_CLAIM},
	{"target_rate_state", "target", LK_RATE},
	{"batches", "service_id", LK_BATCH},
	{"instances", "instance_id", LK_INSTANCE},
	{"service_counts", "target", LK_COUNT},
};

typedef struct LockEntry
{
	LockKind	kind;
	char	   *key;			/* NULL: not known */
	bool		waits;			/* taken waiting (not SKIP LOCKED/NOWAIT) */
	bool		exempt;			/* a documented exception: not held against
								 * later locks */
	bool		table_held;		/* gridha.service_claims held when taken */
	SubTransactionId subid;		/* the subtransaction it was taken in */
	int			depth;			/* executor depth of its statement */
	bool		running;		/* its statement has not returned yet */
	bool		insert;			/* an INSERT ... ON CONFLICT's: its row is locked
								 * after its BEFORE triggers */
	char	   *what;
} LockEntry;


static ExecutorRun_hook_type prev_executor_run = NULL;
static ProcessUtility_hook_type prev_process_utility = NULL;
static needs_fmgr_hook_type prev_needs_fmgr = NULL;
static fmgr_hook_type prev_fmgr = NULL;
static int	lockcheck_calls = 0;	/* gridha functions under way */

static MemoryContext lockcheck_cxt = NULL;
static LockEntry *lockcheck_entries = NULL;
static int	lockcheck_size = 0;

/*
 * What the call holds, for lookups in constant time: the keys it locked,
 * per kind ("<kind>|<key>"), and how many locks of each kind it holds, and
 * of those how many with a key not known.
 */
#define LOCKCHECK_KEYLEN 600
static HTAB *lockcheck_keys = NULL;
static int	lockcheck_keyed_n = 0;	/* locks held with a key known */

/*
 * Up to this many locks with a key, the call's own records are searched
 * (a hand-out or a report holds a few): the hash is made when a call
 * holds more.
 */
#define LOCKCHECK_HASH_FROM 16
static int	lockcheck_kind_n[LK_COUNT + 1];
static int	lockcheck_keyless_n[LK_COUNT + 1];

/*
 * What the order rules ask of the locks held, kept as locks are taken, so
 * that a lock that waits is checked in constant time, not against every
 * lock held (a release of 57,000 claims took 76 s so, 1.6 s now). Per kind, of the
 * locks held that are not exempt: how many, how many of those are an
 * INSERT ... ON CONFLICT's still running, how many have a key, the
 * largest key locked waiting, and the keys locked without waiting (how
 * many, the smallest and the largest). Of the batch rows: how many with a
 * key were locked per service, and how many of those the call holds no
 * claim of. When these say a lock may break a rule, the records are
 * searched as before (lockcheck_find_broken), which names the lock held
 * that it breaks the rule against.
 */
typedef struct LockcheckHeld
{
	int			n;
	int			running_insert;
	int			keyed;
	const char *max_waited;
	int			nowait_n;
	const char *min_nowait;
	const char *max_nowait;
} LockcheckHeld;

typedef struct LockcheckServiceBatches
{
	char		service_id[LOCKCHECK_KEYLEN];
	int			n;
} LockcheckServiceBatches;

static LockcheckHeld lockcheck_held[LK_COUNT + 1];
static HTAB *lockcheck_batches = NULL;	/* LockcheckServiceBatches */
static int	lockcheck_batches_unclaimed = 0;
static int	lockcheck_n = 0;
static uint64 lockcheck_xact = 0;		/* transactions ended so far */
static uint64 lockcheck_scope_xact = UINT64_MAX;
static TimestampTz lockcheck_scope_stmt = 0;
static int	lockcheck_depth = 0;
static bool lockcheck_table_seen = false;

/* The statement whose top node locks the rows it returns */
typedef struct LockcheckDest
{
	DestReceiver pub;
	DestReceiver *inner;
	EState	   *estate;
	List	   *marks;			/* PlanRowMark of gridha's tables */
	const char *what;
} LockcheckDest;

static void
lockcheck_new_scope(void)
{
	lockcheck_scope_xact = lockcheck_xact;
	lockcheck_scope_stmt = GetCurrentStatementStartTimestamp();
	lockcheck_n = 0;
	lockcheck_table_seen = false;
	MemoryContextReset(lockcheck_cxt);
	lockcheck_keys = NULL;
	lockcheck_keyed_n = 0;
	memset(lockcheck_kind_n, 0, sizeof(lockcheck_kind_n));
	memset(lockcheck_keyless_n, 0, sizeof(lockcheck_keyless_n));
	memset(lockcheck_held, 0, sizeof(lockcheck_held));
	lockcheck_batches = NULL;
	lockcheck_batches_unclaimed = 0;
}

static void
lockcheck_key_of(char *buf, LockKind kind, const char *key)
{
	snprintf(buf, LOCKCHECK_KEYLEN, "%d|%s", (int) kind, key);
}

static void
lockcheck_hash_key(const LockEntry *e)
{
	char		buf[LOCKCHECK_KEYLEN];

	lockcheck_key_of(buf, e->kind, e->key);
	(void) hash_search(lockcheck_keys, buf, HASH_ENTER, NULL);
}

/*
 * lockcheck_note: counts a lock the call now holds (recorded already in
 * lockcheck_entries, where lockcheck_holds_key looks for it while the
 * call holds few).
 */
static void
lockcheck_note(const LockEntry *e)
{
	lockcheck_kind_n[e->kind]++;
	if (e->key == NULL)
	{
		lockcheck_keyless_n[e->kind]++;
		return;
	}
	lockcheck_keyed_n++;
	if (lockcheck_keys != NULL)
		lockcheck_hash_key(e);
	else if (lockcheck_keyed_n > LOCKCHECK_HASH_FROM)
	{
		HASHCTL		ctl;
		int			i;

		ctl.keysize = LOCKCHECK_KEYLEN;
		ctl.entrysize = LOCKCHECK_KEYLEN;
		ctl.hcxt = lockcheck_cxt;
		lockcheck_keys = hash_create("gridha lock check keys", 256, &ctl,
									 HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		for (i = 0; i < lockcheck_n; i++)
			if (lockcheck_entries[i].key != NULL)
				lockcheck_hash_key(&lockcheck_entries[i]);
	}
}

static bool
lockcheck_holds_key(LockKind kind, const char *key)
{
	char		buf[LOCKCHECK_KEYLEN];
	int			i;

	if (lockcheck_keys == NULL)
	{
		for (i = 0; i < lockcheck_n; i++)
			if (lockcheck_entries[i].kind == kind && lockcheck_entries[i].key != NULL &&
				strcmp(lockcheck_entries[i].key, key) == 0)
				return true;
		return false;
	}
	lockcheck_key_of(buf, kind, key);
	return hash_search(lockcheck_keys, buf, HASH_FIND, NULL) != NULL;
}

static void
lockcheck_scope(void)
{
	if (lockcheck_scope_xact != lockcheck_xact ||
		lockcheck_scope_stmt != GetCurrentStatementStartTimestamp())
		lockcheck_new_scope();
}

static LockKind
lockcheck_kind_lookup(Oid relid, AttrNumber *keyatt)
{
	Oid			nsp = get_rel_namespace(relid);
	char	   *nspname;
	char	   *relname;
	int			i;

	*keyatt = InvalidAttrNumber;
	if (!OidIsValid(nsp))
		return LK_NONE;
	nspname = get_namespace_name(nsp);
	if (nspname == NULL || strcmp(nspname, "gridha") != 0)
		return LK_NONE;
	relname = get_rel_name(relid);
	for (i = 0; i < lengthof(lockcheck_tables); i++)
		if (relname != NULL && strcmp(relname, lockcheck_tables[i].table) == 0)
		{
			*keyatt = get_attnum(relid, lockcheck_tables[i].key);
			return lockcheck_tables[i].kind;
		}
	return LK_NONE;
}

/*
 * What lockcheck_kind found of the relations it was asked about last
 * (their schema, name and key column: each row lock asked the catalog
 * caches four times), and the OID of gridha.service_claims; forgotten
 * when the relation changes (a relcache invalidation) or any schema does
 * (a rename).
 */
#define LOCKCHECK_KNOWN 8
static struct
{
	Oid			relid;			/* InvalidOid: a free slot */
	LockKind	kind;
	AttrNumber	keyatt;
}			lockcheck_known[LOCKCHECK_KNOWN];
static int	lockcheck_known_next = 0;
static Oid	lockcheck_claims_relid = InvalidOid;

static void
lockcheck_relcache_callback(Datum arg, Oid relid)
{
	int			i;

	for (i = 0; i < LOCKCHECK_KNOWN; i++)
		if (relid == InvalidOid || lockcheck_known[i].relid == relid)
			lockcheck_known[i].relid = InvalidOid;
	if (relid == InvalidOid || lockcheck_claims_relid == relid)
		lockcheck_claims_relid = InvalidOid;
}

static void
lockcheck_schema_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	lockcheck_relcache_callback((Datum) 0, InvalidOid);
}

static LockKind
lockcheck_kind(Oid relid, AttrNumber *keyatt)
{
	AttrNumber	att;
	LockKind	kind;
	int			i;

	for (i = 0; i < LOCKCHECK_KNOWN; i++)
		if (lockcheck_known[i].relid == relid && OidIsValid(relid))
		{
			if (keyatt != NULL)
				*keyatt = lockcheck_known[i].keyatt;
			return lockcheck_known[i].kind;
		}
	kind = lockcheck_kind_lookup(relid, &att);
	if (OidIsValid(relid))
	{
		i = lockcheck_known_next;
		lockcheck_known_next = (lockcheck_known_next + 1) % LOCKCHECK_KNOWN;
		lockcheck_known[i].relid = relid;
		lockcheck_known[i].kind = kind;
		lockcheck_known[i].keyatt = att;
	}
	if (keyatt != NULL)
		*keyatt = att;
	return kind;
}

static const char *
lockcheck_kind_name(LockKind kind)
{
	int			i;

	for (i = 0; i < lengthof(lockcheck_tables); i++)
		if (lockcheck_tables[i].kind == kind)
			return lockcheck_tables[i].table;
	return "?";
}

static char *
lockcheck_describe(const LockEntry *e)
{
	return psprintf("%s row %s%s%s (%s, %s)",
					lockcheck_kind_name(e->kind),
					e->key ? "\"" : "", e->key ? e->key : "of unknown key",
					e->key ? "\"" : "",
					e->waits ? "waiting" : "without waiting", e->what);
}

static void
lockcheck_broken(const LockEntry *held, const LockEntry *taken, const char *rule)
{
	ereport(ERROR,
			(errcode(ERRCODE_INTERNAL_ERROR),
			 errmsg("gridha lock order broken: %s taken after %s",
					lockcheck_describe(taken), lockcheck_describe(held)),
			 errdetail("Rule broken: %s (docs/concurrency.md).", rule)));
}

static bool
lockcheck_rel_locked(Oid relid, LOCKMODE mode)
{
	Relation	rel;
	bool		held;

	if (!OidIsValid(relid) || (rel = RelationIdGetRelation(relid)) == NULL)
		return false;
	held = CheckRelationLockedByMe(rel, mode, true);
	RelationClose(rel);
	return held;
}

/* gridha.service_claims's OID (InvalidOid: none), kept once found */
static Oid
lockcheck_claims(void)
{
	if (!OidIsValid(lockcheck_claims_relid))
		lockcheck_claims_relid = get_relname_relid("service_claims",
												   get_namespace_oid("gridha", true));
	return lockcheck_claims_relid;
}

static bool
lockcheck_table_held(void)
{
	return lockcheck_rel_locked(lockcheck_claims(), RowExclusiveLock);
}

static bool
lockcheck_claims_exclusive(void)
{
	return lockcheck_rel_locked(lockcheck_claims(), ExclusiveLock);
}

/*
 * The table rule: the first time in the call that gridha.service_claims is
 * held, no row lock may have been taken before it, but by a statement that
 * is still running (the lock was taken by its BEFORE STATEMENT trigger).
 */
static void
lockcheck_check_table(void)
{
	int			i;

	if (lockcheck_table_seen || !lockcheck_table_held())
		return;
	lockcheck_table_seen = true;
	for (i = 0; i < lockcheck_n; i++)
	{
		LockEntry  *h = &lockcheck_entries[i];

		if (h->exempt || h->table_held || h->running)
			continue;
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("gridha lock order broken: table gridha.service_claims taken after %s",
						lockcheck_describe(h)),
				 errdetail("Rule broken: a call holds gridha.service_claims before it locks any row (docs/concurrency.md).")));
	}
}

static bool
lockcheck_holds_claim(const char *service_id)
{
	return lockcheck_holds_key(LK_CLAIM, service_id);
}

/*
 * lockcheck_holds: whether the call holds that row already: a lock of its
 * kind and key, or of its kind where either key is not known (an UPDATE's
 * rows, a pick under a join), which is taken to be one of them.
 */
static bool
lockcheck_holds(LockKind kind, const char *key)
{
	if (key == NULL)
		return lockcheck_kind_n[kind] > 0;
	return lockcheck_keyless_n[kind] > 0 || lockcheck_holds_key(kind, key);
}

/*
 * lockcheck_account: lockcheck_held takes in a lock the call now holds
 * (noted already by lockcheck_note). As a lock is taken (incremental), a
 * claim row also settles the batch rows of its service held so far;
 * lockcheck_recount asks of each batch row whether its claim is held.
 */
static void
lockcheck_account(const LockEntry *e, bool incremental)
{
	LockcheckHeld *h = &lockcheck_held[e->kind];
	LockcheckServiceBatches *b;
	bool		found;

	/* a claim row: the batch rows of its service are no longer unclaimed */
	if (incremental && e->kind == LK_CLAIM && e->key != NULL && lockcheck_batches != NULL)
	{
		b = hash_search(lockcheck_batches, e->key, HASH_FIND, NULL);
		if (b != NULL)
			lockcheck_batches_unclaimed -= b->n;
	}
	if (e->exempt)
		return;
	h->n++;
	if (e->running && e->insert)
		h->running_insert++;
	if (e->key == NULL)
		return;
	h->keyed++;
	if (e->waits)
	{
		if (h->max_waited == NULL || strcmp(e->key, h->max_waited) > 0)
			h->max_waited = e->key;
	}
	else
	{
		if (h->nowait_n == 0 || strcmp(e->key, h->min_nowait) < 0)
			h->min_nowait = e->key;
		if (h->nowait_n == 0 || strcmp(e->key, h->max_nowait) > 0)
			h->max_nowait = e->key;
		h->nowait_n++;
	}
	if (e->kind == LK_BATCH)
	{
		if (lockcheck_batches == NULL)
		{
			HASHCTL		ctl;

			ctl.keysize = LOCKCHECK_KEYLEN;
			ctl.entrysize = sizeof(LockcheckServiceBatches);
			ctl.hcxt = lockcheck_cxt;
			lockcheck_batches = hash_create("gridha lock check batches", 256, &ctl,
											HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		}
		b = hash_search(lockcheck_batches, e->key, HASH_ENTER, &found);
		if (!found)
			b->n = 0;
		b->n++;
		if (!lockcheck_holds_claim(e->key))
			lockcheck_batches_unclaimed++;
	}
}

/* lockcheck_recount: lockcheck_held anew, from the records */
static void
lockcheck_recount(void)
{
	int			i;

	memset(lockcheck_held, 0, sizeof(lockcheck_held));
	if (lockcheck_batches != NULL)
		hash_destroy(lockcheck_batches);
	lockcheck_batches = NULL;
	lockcheck_batches_unclaimed = 0;
	for (i = 0; i < lockcheck_n; i++)
		lockcheck_account(&lockcheck_entries[i], false);
}

/*
 * lockcheck_may_break: whether a lock that waits, of this kind and key,
 * may break a rule against the locks held, by lockcheck_held alone: when
 * it says no, lockcheck_find_broken would find none. It is exact but for
 * batch rows, which it may take to be unclaimed when only some are.
 */
static bool
lockcheck_may_break(LockKind kind, const char *key)
{
	LockcheckHeld *h;
	int			k;

	/* kind: a lock held of a later kind (a batch row: of a claim not held) */
	for (k = kind + 1; k <= LK_COUNT; k++)
	{
		h = &lockcheck_held[k];
		if (k != LK_BATCH)
		{
			if (h->n - h->running_insert > 0)
				return true;
			continue;
		}
		if (lockcheck_kind_n[LK_CLAIM] == 0 && h->n - h->running_insert - h->keyed > 0)
			return true;
		if (lockcheck_keyless_n[LK_CLAIM] == 0 && lockcheck_batches_unclaimed > 0)
			return true;
	}

	/* key: a lock held of the same kind, both keys known */
	h = &lockcheck_held[kind];
	if (key == NULL || h->keyed == 0)
		return false;
	if (kind == LK_BATCH &&
		(lockcheck_holds_claim(key) || lockcheck_keyless_n[LK_CLAIM] > 0 ||
		 lockcheck_batches_unclaimed == 0))
		return false;
	if (h->max_waited != NULL && strcmp(h->max_waited, key) > 0)
		return true;
	return h->nowait_n > 0 &&
		(strcmp(h->min_nowait, key) != 0 || strcmp(h->max_nowait, key) != 0);
}

/*
 * lockcheck_find_broken: the first lock held (in the order taken) that a
 * lock that waits breaks a rule against, and the rule; false when none.
 */
static bool
lockcheck_find_broken(const LockEntry *n, LockEntry **held, const char **rule)
{
	int			i;

	for (i = 0; i < lockcheck_n; i++)
	{
		LockEntry  *h = &lockcheck_entries[i];
		int			c;

		*held = h;
		if (h->exempt || h->kind < n->kind)
			continue;
		/* an INSERT's conflicting row is locked after its BEFORE triggers */
		if (h->running && h->insert)
			continue;
		/* a batch row of a claim the call holds: see lockcheck_batch_held */
		if (h->kind == LK_BATCH && lockcheck_holds(LK_CLAIM, h->key))
			continue;
		if (h->kind > n->kind)
		{
			*rule = "a lock that waits comes after every lock held of a later kind";
			return true;
		}
		if (h->key == NULL || n->key == NULL)
			continue;
		c = strcmp(h->key, n->key);
		if (c == 0)
			continue;
		if (n->kind == LK_BATCH && lockcheck_holds_claim(n->key))
			continue;
		if (!h->waits)
		{
			*rule = "after a lock taken with SKIP LOCKED, a call never waits for another row of the same kind";
			return true;
		}
		if (c > 0)
		{
			*rule = "rows of one kind are locked in key order";
			return true;
		}
	}
	return false;
}

static void
lockcheck_add(Oid relid, LockKind kind, const char *key, bool waits, const char *what,
			  bool running, bool keyshare)
{
	LockEntry	n;

	lockcheck_scope();
	lockcheck_check_table();

	/*
	 * No one else has a row of a table the transaction holds EXCLUSIVE; and
	 * while it holds gridha.service_claims so (a TRUNCATE of it, whose
	 * trigger resets the counts), no call that locks gridha's rows runs.
	 */
	if (waits && (lockcheck_rel_locked(relid, ExclusiveLock) || lockcheck_claims_exclusive()))
		waits = false;

	/*
	 * A target row FOR KEY SHARE (a foreign key check) waits only for a
	 * rename or delete of targets, which takes gridha.service_claims before
	 * any row: while the call holds that table, there is none.
	 */
	if (kind == LK_TARGET && keyshare && lockcheck_table_seen)
		return;
	n.kind = kind;
	n.key = key ? MemoryContextStrdup(lockcheck_cxt, key) : NULL;
	n.exempt = false;
	n.table_held = lockcheck_table_seen;
	n.subid = GetCurrentSubTransactionId();
	n.depth = lockcheck_depth;
	n.running = running;
	n.insert = false;
	n.what = MemoryContextStrdup(lockcheck_cxt, what);

	/*
	 * A row the call holds already (the same key, or a lock of its kind whose
	 * rows are not known) does not wait again.
	 */
	if (lockcheck_holds(kind, key))
	{
		/* held: not a new lock, nor one to record again (but its first) */
		if (key == NULL || lockcheck_holds_key(kind, key) || !waits)
			return;
		waits = false;
	}
	n.waits = waits;

	if (waits)
	{
		LockEntry  *h;
		const char *rule;

		if (lockcheck_may_break(kind, key) && lockcheck_find_broken(&n, &h, &rule))
			lockcheck_broken(h, &n, rule);
#ifdef GRIDHA_LOCK_CHECK_VERIFY
		else if (lockcheck_find_broken(&n, &h, &rule))
			elog(ERROR, "gridha lock check: lockcheck_may_break missed that %s taken after %s breaks \"%s\"",
				 lockcheck_describe(&n), lockcheck_describe(h), rule);
#endif
	}
	if (lockcheck_n >= lockcheck_size)
	{
		lockcheck_size *= 2;
		lockcheck_entries = repalloc(lockcheck_entries, lockcheck_size * sizeof(LockEntry));
	}
	lockcheck_entries[lockcheck_n++] = n;
	lockcheck_note(&n);
	lockcheck_account(&n, true);
}

static char *
lockcheck_key_text(Datum value, Oid type)
{
	Oid			out;
	bool		varlena;

	getTypeOutputInfo(type, &out, &varlena);
	return OidOutputFunctionCall(out, value);
}

static void
lockcheck_row(Relation rel, TupleTableSlot *slot, bool wait, const char *what, bool keyshare)
{
	AttrNumber	keyatt = InvalidAttrNumber;
	LockKind	kind = lockcheck_kind(RelationGetRelid(rel), &keyatt);
	char	   *key = NULL;
	bool		isnull;
	Datum		value;

	if (kind == LK_NONE)
		return;
	if (keyatt != InvalidAttrNumber && !TTS_EMPTY(slot))
	{
		value = slot_getattr(slot, keyatt, &isnull);
		if (!isnull)
			key = lockcheck_key_text(value, TupleDescAttr(RelationGetDescr(rel), keyatt - 1)->atttypid);
	}
	lockcheck_add(RelationGetRelid(rel), kind, key, wait, what, false, keyshare);
}

void
gridha_lockcheck_row(Relation rel, TupleTableSlot *slot, bool wait, const char *what)
{
	lockcheck_row(rel, slot, wait, what, false);
}

void
gridha_lockcheck_exempt(const char *why)
{
	int			i;

	lockcheck_scope();
	for (i = 0; i < lockcheck_n; i++)
		lockcheck_entries[i].exempt = true;
	lockcheck_recount();
}

static const char *
lockcheck_what(QueryDesc *qd)
{
	const char *s = qd->sourceText ? qd->sourceText : "a statement";
	int			len = strlen(s);

	while (len > 0 && (s[0] == ' ' || s[0] == '\n' || s[0] == '\t'))
		s++, len--;
	return pnstrdup(s, Min(len, 120));
}

/* The row each of the statement's locks of gridha's tables points at */
static bool
lockcheck_receive(TupleTableSlot *slot, DestReceiver *self)
{
	LockcheckDest *d = (LockcheckDest *) self;
	ListCell   *lc;

	foreach(lc, d->marks)
	{
		PlanRowMark *pm = lfirst(lc);
		ExecRowMark *erm = d->estate->es_rowmarks ? d->estate->es_rowmarks[pm->rti - 1] : NULL;
		TupleTableSlot *row;

		if (erm == NULL || !erm->ermActive || !ItemPointerIsValid(&erm->curCtid))
			continue;
		row = table_slot_create(erm->relation, NULL);
		if (table_tuple_fetch_row_version(erm->relation, &erm->curCtid, SnapshotAny, row))
			lockcheck_row(erm->relation, row, pm->waitPolicy == LockWaitBlock, d->what,
						  pm->markType == ROW_MARK_KEYSHARE);
		ExecDropSingleTupleTableSlot(row);
	}
	return d->inner->receiveSlot(slot, d->inner);
}

static void
lockcheck_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
	LockcheckDest *d = (LockcheckDest *) self;

	d->inner->rStartup(d->inner, operation, typeinfo);
}

static void
lockcheck_shutdown(DestReceiver *self)
{
	LockcheckDest *d = (LockcheckDest *) self;

	d->inner->rShutdown(d->inner);
}

static void
lockcheck_destroy(DestReceiver *self)
{
}

/* Does the plan lock the rows it returns, at its top (under a LIMIT)? */
static bool
lockcheck_locks_output(Plan *plan)
{
	while (plan != NULL && IsA(plan, Limit))
		plan = outerPlan(plan);
	return plan != NULL && IsA(plan, LockRows);
}

static void
lockcheck_plan_writes(PlannedStmt *ps, Plan *plan, const char *what)
{
	ListCell   *lc;

	if (plan == NULL)
		return;
	if (IsA(plan, ModifyTable))
	{
		ModifyTable *mt = (ModifyTable *) plan;
		bool		locks = mt->operation == CMD_UPDATE || mt->operation == CMD_DELETE ||
			(mt->operation == CMD_INSERT && mt->onConflictAction == ONCONFLICT_UPDATE);

		foreach(lc, mt->resultRelations)
		{
			Oid			relid = rt_fetch(lfirst_int(lc), ps->rtable)->relid;
			LockKind	kind = lockcheck_kind(relid, NULL);

			if (locks && kind != LK_NONE)
			{
				int			before = lockcheck_n;

				lockcheck_add(relid, kind, NULL, true, what, true, false);
				if (mt->operation == CMD_INSERT && lockcheck_n > before)
				{
					LockEntry  *e = &lockcheck_entries[lockcheck_n - 1];

					e->insert = true;
					if (e->running && !e->exempt)
						lockcheck_held[e->kind].running_insert++;
				}
			}
		}
	}
	lockcheck_plan_writes(ps, outerPlan(plan), what);
	lockcheck_plan_writes(ps, innerPlan(plan), what);
}

/* A statement returned: the rows it locked count as held */
static void
lockcheck_statement_done(int first)
{
	int			i;

	if (lockcheck_scope_xact != lockcheck_xact)
		return;
	/* a table the statement took, its BEFORE STATEMENT trigger took first */
	lockcheck_check_table();
	for (i = first; i < lockcheck_n; i++)
	{
		LockEntry  *e = &lockcheck_entries[i];

		if (e->depth != lockcheck_depth)
			continue;
		if (e->running && e->insert && !e->exempt)
			lockcheck_held[e->kind].running_insert--;
		e->running = false;
	}
}

static void
lockcheck_executor_run(QueryDesc *qd, ScanDirection direction, uint64 count, bool execute_once)
{
	PlannedStmt *ps = qd->plannedstmt;
	LockcheckDest *dest = NULL;
	DestReceiver *saved = qd->dest;
	const char *what = NULL;
	ListCell   *lc;
	volatile int first = -1;

	if (ps != NULL && ps->commandType != CMD_UTILITY)
	{
		List	   *keyed = NIL;
		bool		output = lockcheck_locks_output(ps->planTree);

		/* a statement a client sent, each of a query string's alike, is a call */
		if (qd->dest->mydest == DestRemote || qd->dest->mydest == DestRemoteExecute ||
			qd->dest->mydest == DestRemoteSimple)
			lockcheck_new_scope();
		else
			lockcheck_scope();
		first = lockcheck_n;
		foreach(lc, ps->rowMarks)
		{
			PlanRowMark *pm = lfirst(lc);
			LockKind	kind;
			Oid			relid;

			if (pm->isParent || !RowMarkRequiresRowShareLock(pm->markType))
				continue;
			relid = rt_fetch(pm->rti, ps->rtable)->relid;
			kind = lockcheck_kind(relid, NULL);
			if (kind == LK_NONE)
				continue;
			if (what == NULL)
				what = lockcheck_what(qd);
			if (output)
				keyed = lappend(keyed, pm);
			else
				lockcheck_add(relid, kind, NULL, pm->waitPolicy == LockWaitBlock, what, true,
							  pm->markType == ROW_MARK_KEYSHARE);
		}
		if (what == NULL)
			what = lockcheck_what(qd);
		lockcheck_plan_writes(ps, ps->planTree, what);
		foreach(lc, ps->subplans)
			lockcheck_plan_writes(ps, lfirst(lc), what);
		if (keyed != NIL)
		{
			dest = palloc0(sizeof(LockcheckDest));
			dest->pub.receiveSlot = lockcheck_receive;
			dest->pub.rStartup = lockcheck_startup;
			dest->pub.rShutdown = lockcheck_shutdown;
			dest->pub.rDestroy = lockcheck_destroy;
			dest->pub.mydest = saved->mydest;
			dest->inner = saved;
			dest->estate = qd->estate;
			dest->marks = keyed;
			dest->what = what;
			qd->dest = &dest->pub;
		}
	}

	lockcheck_depth++;
	PG_TRY();
	{
		if (prev_executor_run)
			prev_executor_run(qd, direction, count, execute_once);
		else
			standard_ExecutorRun(qd, direction, count, execute_once);
	}
	PG_FINALLY();
	{
		lockcheck_depth--;
		qd->dest = saved;
	}
	PG_END_TRY();

	if (first >= 0)
		lockcheck_statement_done(first);
}

/* A utility statement a client sent (TRUNCATE, DO, CALL) is a call */
static void
lockcheck_process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
						  ProcessUtilityContext context, ParamListInfo params,
						  QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (context == PROCESS_UTILITY_TOPLEVEL && IsTransactionState())
		lockcheck_new_scope();
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params,
							 queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
								queryEnv, dest, qc);
}

/*
 * A call of a gridha function, outside any other, is a call: a statement
 * that calls several (one a row) makes several calls, as a transaction
 * does. The test build then calls gridha's functions through the function
 * manager's hook, which keeps its SQL functions from being inlined.
 */
static bool
lockcheck_needs_fmgr(Oid fn)
{
	Oid			nsp;

	if (prev_needs_fmgr && prev_needs_fmgr(fn))
		return true;
	nsp = get_namespace_oid("gridha", true);
	return OidIsValid(nsp) && get_func_namespace(fn) == nsp;
}

static void
lockcheck_fmgr(FmgrHookEventType event, FmgrInfo *flinfo, Datum *private)
{
	switch (event)
	{
		case FHET_START:
			if (lockcheck_calls++ == 0 && IsTransactionState())
				lockcheck_new_scope();
			break;
		case FHET_END:
		case FHET_ABORT:
			if (lockcheck_calls > 0)
				lockcheck_calls--;
			break;
	}
	if (prev_fmgr)
		prev_fmgr(event, flinfo, private);
}

static void
lockcheck_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			lockcheck_xact++;
			lockcheck_depth = 0;
			lockcheck_calls = 0;
			break;
		default:
			break;
	}
}

static void
lockcheck_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						   SubTransactionId parentSubid, void *arg)
{
	int			i;
	int			n = 0;

	if (event != SUBXACT_EVENT_ABORT_SUB || lockcheck_scope_xact != lockcheck_xact)
		return;

	/*
	 * The subtransaction and those it started (later ids) give their locks
	 * up; those of subtransactions released before it stay with the parent.
	 */
	for (i = 0; i < lockcheck_n; i++)
		if (lockcheck_entries[i].subid < mySubid)
			lockcheck_entries[n++] = lockcheck_entries[i];
	if (n == lockcheck_n)
		return;
	lockcheck_n = n;
	if (lockcheck_keys != NULL)
		hash_destroy(lockcheck_keys);
	lockcheck_keys = NULL;
	lockcheck_keyed_n = 0;
	memset(lockcheck_kind_n, 0, sizeof(lockcheck_kind_n));
	memset(lockcheck_keyless_n, 0, sizeof(lockcheck_keyless_n));
	for (i = 0; i < lockcheck_n; i++)
		lockcheck_note(&lockcheck_entries[i]);
	lockcheck_recount();
}

void
gridha_lockcheck_init(void)
{
	lockcheck_cxt = AllocSetContextCreate(TopMemoryContext, "gridha lock check",
										  ALLOCSET_SMALL_SIZES);
	lockcheck_size = 1024;
	lockcheck_entries = MemoryContextAlloc(TopMemoryContext,
										   lockcheck_size * sizeof(LockEntry));
	prev_executor_run = ExecutorRun_hook;
	ExecutorRun_hook = lockcheck_executor_run;
	prev_needs_fmgr = needs_fmgr_hook;
	needs_fmgr_hook = lockcheck_needs_fmgr;
	prev_fmgr = fmgr_hook;
	fmgr_hook = lockcheck_fmgr;
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = lockcheck_process_utility;
	RegisterXactCallback(lockcheck_xact_callback, NULL);
	RegisterSubXactCallback(lockcheck_subxact_callback, NULL);
	CacheRegisterRelcacheCallback(lockcheck_relcache_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(NAMESPACEOID, lockcheck_schema_callback, (Datum) 0);
}

#endif							/* GRIDHA_LOCK_CHECK */
