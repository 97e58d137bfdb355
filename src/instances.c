/*-------------------------------------------------------------------------
 *
 * instances.c
 *		Instances: registration on first use, who may act as an instance,
 *		and whether its session is still there; the C helpers of
 *		gridha.register_instance (a PL/pgSQL function of the 1.3 script).
 *		The statements on instance rows off the claim cycle are functions
 *		of the 1.3 script (gridha_internal.instance_insert ...
 *		instance_declare), SQL 1.2's copies in src/instances12.c.
 *
 * An instance is any uuid that calls gridha; the first call registers it as
 * kind 'external'. Its last_seen_at is the time of its last claim cycle
 * (renewal); it decides whether the next cycle is due.
 *
 * Words:
 *   owner     the role that registered the instance or used it first (the
 *             calling role, not the SECURITY DEFINER owner of gridha's
 *             functions); a worker's is the worker's role. Every call that
 *             names an instance checks that the calling role is a member of
 *             its owner (superusers may act for any instance), or raises
 *             RG008 before anything is read or written. An instance row
 *             without an owner (one from 1.0) is refused to everyone but
 *             superusers until an administrator gives it one
 *             (gridha.set_instance_owner): the first caller no longer
 *             adopts it.
 *   confirmed an owner set on this cluster (SQL 1.3: instances.owner_cluster
 *             is this cluster's system identifier, or one of a cluster this
 *             database ran on before, listed in gridha.epoch_bands, which
 *             pg_upgrade keeps and pg_dump does not). Roles are global: a
 *             restored instance's owner may be missing on the new cluster,
 *             or be another role of the same name, so nobody but a
 *             superuser acts as it until an administrator confirms its
 *             owner (gridha.set_instance_owner), and no write under its old
 *             epochs is accepted from anyone else.
 *   lease     the instance's soft and hard expiry (gridha 1.1): its claims
 *             expire with it (claims.c)
 *
 * Session liveness (gridha.session_liveness, on by default): the session an
 * instance calls from holds a session-level lock keyed by the instance's
 * session_key (a "userlock", which no SQL function can take: see common.h).
 * The key is given once per instance, from the sequence gridha.session_keys
 * (no two instances share one).
 * When that session ends, for
 * any reason, the lock goes with it, and other instances take the idle
 * claims of the instance at once instead of waiting for soft expiry
 * (claims.c asks gridha_instance_session_gone, a try-lock in the lock
 * manager, once per instance). A second session of the same instance
 * cannot take the lock and simply does not bind; a session with the
 * setting off clears the key, so an instance behind a connection pool is
 * judged by expiry alone.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common.h"
#include "generation.h"
#include "instances.h"
#include "instances12.h"
#include "lockcheck.h"
#include "rows.h"
#include "slots.h"
#include "spi_util.h"
#include "tables.h"
#include "targets.h"

#include "access/htup_details.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "settings.h"
#include "access/xact.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

/* Instances whose liveness lock this session holds (a few at most) */
#define INSTANCES_MAX_BOUND 64
static struct
{
	pg_uuid_t	id;
	int64		key;
}			instances_bound[INSTANCES_MAX_BOUND];
static int	instances_nbound = 0;

/*
 * Ownership verdicts of this backend: this role may act as this instance.
 * Forgotten when any role or membership changes, and when gridha.instances
 * is invalidated: a change of owner, a delete (trigger instances_changed),
 * the extension updated or created again.
 */
#define INSTANCES_VERDICTS 16
typedef struct InstancesVerdict
{
	pg_uuid_t	id;
	Oid			caller;
} InstancesVerdict;

static InstancesVerdict instances_verdicts[INSTANCES_VERDICTS];
static int	instances_nverdicts = 0;
static int	instances_next_verdict = 0;
static bool instances_callback_registered = false;

/*
 * The statements of instance rows that run off the claim cycle are
 * functions of the 1.3 install script (gridha_internal.instance_insert,
 * instance_key, instance_adopt, cluster_known, instance_declare; issue
 * 42.1), called here; on SQL 1.2 their copies in src/instances12.c run.
 * None runs in a steady cycle: a known instance, owned and bound to its
 * session, is read by key (rows.c) and written by nothing here.
 */

/* A first use: registers the instance, or reads the row another made */
static GridhaStatement instances_insert_call = {
	"SELECT inserted, present, present_owner FROM gridha_internal.instance_insert($1, $2)",
	2, {UUIDOID, NAMEOID}
};

/*
 * The key writes a touch may find due, made last in the call with its
 * other instance-row writes (gridha_instance_write_key): a key of its own
 * for an instance that has none, written only if no other session is
 * writing one at the same moment (a second session of the instance never
 * waits here: it does not bind then), or the stored key cleared.
 */
static GridhaStatement instances_key_call = {
	"SELECT gridha_internal.instance_key($1, $2)",
	2, {UUIDOID, BOOLOID}
};

/*
 * The key write of the last touch, due at the end of its call: never at
 * the touch itself, which comes before the claim and batch rows of the
 * call, while the instance rows come last (the lock order, claims.c). A
 * taker that counts this instance's claims waits for its row; a write
 * made at the start would hold that row while the call waits for the
 * claims the taker holds.
 */
typedef enum InstancesKeyWrite
{
	KEY_NONE,
	KEY_CLEAR,					/* clear the stored key (liveness off) */
	KEY_NEW						/* a new key, then hold it */
} InstancesKeyWrite;

static struct
{
	InstancesKeyWrite what;
	pg_uuid_t	id;
}			instances_key_write;


/*
 * instances_lock_tag: the liveness lock of a key (see common.h).
 */
static void
instances_lock_tag(LOCKTAG *tag, int64 key)
{
	tag->locktag_field1 = MyDatabaseId;
	tag->locktag_field2 = (uint32) (((uint64) key) >> 32);
	tag->locktag_field3 = (uint32) key;
	tag->locktag_field4 = GRIDHA_LIVENESS_TAG;
	tag->locktag_type = LOCKTAG_USERLOCK;
	tag->locktag_lockmethodid = USER_LOCKMETHOD;
}

/*
 * The probe lock of a key: held (shared) by every liveness probe around its
 * try of the liveness lock, so that a session that finds the liveness lock
 * taken can tell a probe's instant from another session's hold.
 */
static void
instances_probe_tag(LOCKTAG *tag, int64 key)
{
	instances_lock_tag(tag, key);
	tag->locktag_field4 = GRIDHA_PROBE_TAG;
}

/* How long a bind waits for the probes of its key to end, at most */
#define INSTANCES_BIND_WAIT_MS	1000

/* What the wait of instances_lock_within is given */
typedef struct InstancesLockWait
{
	const LOCKTAG *tag;
	LOCKMODE	mode;
} InstancesLockWait;

/* instances_lock_wait: the wait (in a subtransaction with a lock timeout) */
static void
instances_lock_wait(void *arg)
{
	InstancesLockWait *wait = (InstancesLockWait *) arg;

	(void) LockAcquire(wait->tag, wait->mode, true, false);
}

/*
 * instances_lock_within: takes the tag's lock for the session in mode,
 * waiting at most ms for it; false when it is still held by then. The wait
 * runs in a subtransaction with its own lock timeout, so that running out
 * of time undoes nothing but the wait; any other error (a cancel) is
 * raised as it is.
 */
static bool
instances_lock_within(const LOCKTAG *tag, LOCKMODE mode, int ms)
{
	InstancesLockWait wait;
	ErrorData  *edata;
	char		timeout[32];

	wait.tag = tag;
	wait.mode = mode;
	snprintf(timeout, sizeof(timeout), "%dms", ms);
	edata = gridha_subxact_try(instances_lock_wait, &wait,
							   "lock_timeout", timeout, PGC_SUSET);
	if (edata == NULL)
		return true;
	if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
		ReThrowError(edata);
	FreeErrorData(edata);
	return false;
}

/*
 * instances_bind: makes this session hold the instance's liveness lock of
 * this key, if it can; true when it holds it (now or from before).
 *
 * Another instance's probe (gridha_instance_session_gone) takes the same
 * lock for an instant. A bind that gave up on finding it taken would leave
 * a live session unbound, judged gone by every later probe: its claims,
 * with a head it handed out meanwhile, would be taken over (1.2 did that,
 * rarely, to the first call of a client's new session). So a bind that
 * finds the liveness lock taken holds the probe lock of the key, which no
 * probe then holds (waiting, briefly, for those under way), and tries
 * again: taken still, it is another session of the same instance, and the
 * session does not bind (it never waits for that session).
 */
static bool
instances_bind(pg_uuid_t *id, int64 key)
{
	LOCKTAG		tag;
	LOCKTAG		probe;
	int			i;
	bool		got;

	for (i = 0; i < instances_nbound; i++)
		if (memcmp(instances_bound[i].id.data, id->data, UUID_LEN) == 0 &&
			instances_bound[i].key == key)
			return true;
	if (instances_nbound >= INSTANCES_MAX_BOUND)
		return false;

	instances_lock_tag(&tag, key);
	got = LockAcquire(&tag, ExclusiveLock, true, true) != LOCKACQUIRE_NOT_AVAIL;
	if (!got)
	{
		instances_probe_tag(&probe, key);
		if (LockAcquire(&probe, ExclusiveLock, true, true) != LOCKACQUIRE_NOT_AVAIL ||
			instances_lock_within(&probe, ExclusiveLock, INSTANCES_BIND_WAIT_MS))
		{
			/* no probe under way: whoever holds the lock is a session */
			got = LockAcquire(&tag, ExclusiveLock, true, true) != LOCKACQUIRE_NOT_AVAIL;
			LockRelease(&probe, ExclusiveLock, true);
		}
	}
	if (!got)
		return false;
	instances_bound[instances_nbound].id = *id;
	instances_bound[instances_nbound++].key = key;
	return true;
}

/*
 * gridha_instance_session_gone: whether no session holds the liveness lock
 * of this key any more: the session of the instance that stored it has
 * ended. Asked with a try-lock in the lock manager, let go at once; one
 * lock-table probe, never a read of pg_locks.
 */
bool
gridha_instance_session_gone(int64 key)
{
	LOCKTAG		tag;
	LOCKTAG		probe;
	LockAcquireResult res;

	/* the probe lock first: a session binding now finds this probe there */
	instances_probe_tag(&probe, key);
	if (LockAcquire(&probe, ShareLock, true, true) == LOCKACQUIRE_NOT_AVAIL)
		return false;			/* a session is binding: alive */
	instances_lock_tag(&tag, key);
	res = LockAcquire(&tag, ExclusiveLock, true, true);
	if (res == LOCKACQUIRE_NOT_AVAIL)
	{
		LockRelease(&probe, ShareLock, true);
		return false;
	}
#ifdef GRIDHA_TEST_HOOKS
	/* a test holds the probe here: gridha_test_probe_pause */
	if (gridha_test_probe_pause != 0 && res == LOCKACQUIRE_OK)
	{
		PG_TRY();
		{
			DirectFunctionCall1(pg_advisory_lock_shared_int8, Int64GetDatum(gridha_test_probe_pause));
			DirectFunctionCall1(pg_advisory_unlock_shared_int8, Int64GetDatum(gridha_test_probe_pause));
		}
		PG_CATCH();
		{
			LockRelease(&tag, ExclusiveLock, true);
			LockRelease(&probe, ShareLock, true);
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
#endif
	LockRelease(&tag, ExclusiveLock, true);
	LockRelease(&probe, ShareLock, true);
	/* held already: by this very session, which is alive */
	return res == LOCKACQUIRE_OK;
}

/*
 * instances_key_later: the key write of this touch, made at the end of its
 * call (see instances_key_write).
 */
static void
instances_key_later(pg_uuid_t *id, InstancesKeyWrite what)
{
	instances_key_write.what = what;
	instances_key_write.id = *id;
}

static bool
instances_key_due(Datum instance_id)
{
	return instances_key_write.what != KEY_NONE &&
		memcmp(instances_key_write.id.data, DatumGetUUIDP(instance_id)->data, UUID_LEN) == 0;
}

/*
 * gridha_instance_key_waits: whether the last touch, of this instance, left
 * a key write for the end of its call that waits for the row (a new key
 * never does: it skips a row another session is writing).
 */
bool
gridha_instance_key_waits(Datum instance_id)
{
	return instances_key_due(instance_id) && instances_key_write.what != KEY_NEW;
}

/*
 * gridha_instance_write_key: makes the key write the last touch of this
 * instance left, if any: the last write of its call to its instance row
 * (gridha_claims_finish, or the caller's end when it runs no claim cycle).
 */
void
gridha_instance_write_key(Datum instance_id)
{
	Datum		args[2];
	InstancesKeyWrite what = instances_key_write.what;
	bool		got;
	int64		key = 0;

	if (!instances_key_due(instance_id))
		return;
	instances_key_write.what = KEY_NONE;
	Assert(what == KEY_NEW || what == KEY_CLEAR);
	if (gridha_sql_is_current())
	{
		Datum		d;
		bool		isnull;

		args[0] = instance_id;
		args[1] = BoolGetDatum(what == KEY_NEW);
		gridha_exec(&instances_key_call, args, NULL, false);
		d = gridha_col(0, 1, &isnull);
		got = !isnull;
		if (got)
			key = DatumGetInt64(d);
	}
	else
		got = gridha_instances12_key(instance_id, what == KEY_NEW, &key);
	if (what == KEY_NEW && got)
		(void) instances_bind(DatumGetUUIDP(instance_id), key);
}

/*
 * instances_liveness: this session holds the instance's liveness lock when
 * it can (another session of the same instance may hold it: then this one
 * does not bind). An instance without a key is given one first: the next
 * of gridha.session_keys (written at the end of the call, never waiting
 * for another session that is doing the same, and then held). With the setting off here, the stored key is cleared at the end of
 * the call: the instance is judged by its expiry alone. Until the end of
 * the call the row keeps what it had (no key: never judged gone).
 */
static void
instances_liveness(Datum instance_id, bool stored_null, int64 stored)
{
	pg_uuid_t  *id = DatumGetUUIDP(instance_id);

	if (!gridha_session_liveness)
	{
		if (stored_null)
			return;
		instances_key_later(id, KEY_CLEAR);
		return;
	}
	if (!stored_null)
	{
		(void) instances_bind(id, stored);
		return;
	}
	instances_key_later(id, KEY_NEW);
}

static void
instances_roles_changed(Datum arg, int cacheid, uint32 hashvalue)
{
	instances_nverdicts = 0;
}

static void
instances_relcache_changed(Datum arg, Oid relid)
{
	/* any relation: cheap to forget, and the table's oid may change */
	instances_nverdicts = 0;
}

/*
 * instances_verdict: whether this backend knows the role may act as the
 * instance.
 */
static bool
instances_verdict(Datum instance_id, Oid caller)
{
	int			i;

	for (i = 0; i < instances_nverdicts; i++)
		if (instances_verdicts[i].caller == caller &&
			memcmp(instances_verdicts[i].id.data, DatumGetUUIDP(instance_id)->data, UUID_LEN) == 0)
			return true;
	return false;
}

static void
instances_remember(Datum instance_id, Oid caller)
{
	InstancesVerdict *v = &instances_verdicts[instances_next_verdict];

	v->id = *DatumGetUUIDP(instance_id);
	v->caller = caller;
	instances_next_verdict = (instances_next_verdict + 1) % INSTANCES_VERDICTS;
	if (instances_nverdicts < INSTANCES_VERDICTS)
		instances_nverdicts++;
}

/*
 * instances_callbacks: what makes verdicts go, registered once.
 */
static void
instances_callbacks(void)
{
	if (instances_callback_registered)
		return;
	CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, instances_roles_changed, (Datum) 0);
	CacheRegisterSyscacheCallback(AUTHOID, instances_roles_changed, (Datum) 0);
	gridha_on_relcache(instances_relcache_changed, (Datum) 0);
	instances_callback_registered = true;
}

/*
 * instances_refuse: RG008, the calling role may not act as the instance.
 */
static void
instances_refuse(Datum instance_id, const char *owner, Oid caller)
{
	Oid			owner_oid = get_role_oid(owner, true);
	char	   *id = DatumGetCString(DirectFunctionCall1(uuid_out, instance_id));

	/*
	 * The hint never suggests membership in a superuser role (that would
	 * make the caller a superuser's member, not the instance's user), nor
	 * in a role that does not exist (1.3).
	 */
	ereport(ERROR,
			(errcode(ERRCODE_GRIDHA_NOT_OWNER),
			 errmsg("instance %s belongs to role \"%s\"", id, owner),
			 errdetail("Role \"%s\" is not a member of \"%s\".",
					   GetUserNameFromId(caller, false), owner),
			 !OidIsValid(owner_oid) ?
			 errhint("Role \"%s\" does not exist here: act only for instances your role registered; an administrator gives this one an owner: SELECT gridha.set_instance_owner('%s', 'role').",
					 owner, id) :
			 superuser_arg(owner_oid) ?
			 errhint("The instance belongs to a superuser: only a superuser acts as it. Act only for instances your role registered; an administrator may give this one another owner: SELECT gridha.set_instance_owner('%s', 'role').",
					 id) :
			 errhint("Act only for instances your role registered, or grant your role membership in \"%s\".",
					 owner)));
}

/*
 * instances_may_act: whether the calling role may act as an instance that
 * role "owner" owns: it is a member of it, or a superuser.
 */
static bool
instances_may_act(Datum instance_id, const char *owner, Oid caller)
{
	Oid			owner_oid = get_role_oid(owner, true);

	return superuser_arg(caller) ||
		(OidIsValid(owner_oid) && is_member_of_role(caller, owner_oid));
}

/* The owner's cluster as read from the row (SQL 1.3) */
typedef struct InstancesOwnerCluster
{
	bool		has_column;		/* SQL 1.3 (generation.c) */
	bool		isnull;
	int64		cluster;
} InstancesOwnerCluster;

/* Whether this database ran on that cluster before (SQL 1.3 only) */
static GridhaStatement instances_cluster_known = {
	"SELECT gridha_internal.cluster_known($1)",
	1, {INT8OID}
};

/*
 * instances_read_cluster: the owner's cluster of the row just read.
 */
static void
instances_read_cluster(GridhaRows *rows, InstancesOwnerCluster *oc)
{
	Datum		d;

	oc->has_column = gridha_sql_is_current();
	oc->isnull = true;
	oc->cluster = 0;
	if (!oc->has_column)
		return;
	d = gridha_rows_get(rows, GRIDHA_INSTANCES,
						gridha_rows_attno(rows, INSTANCE_OWNER_CLUSTER), &oc->isnull);
	if (!oc->isnull)
		oc->cluster = DatumGetInt64(d);
}

/*
 * instances_confirm: refuses (RG008), for a role that is not a superuser,
 * an instance whose owner was set on another cluster than this one, or one
 * this database ran on before: a restore's owner is confirmed by an
 * administrator first. After the row read is over.
 */
static void
instances_confirm(Datum instance_id, const char *owner,
				  const InstancesOwnerCluster *oc, Oid caller)
{
	Datum		args[1];
	char	   *id;

	if (!oc->has_column || superuser_arg(caller))
		return;
	if (!oc->isnull)
	{
		bool		known;
		bool		isnull;

		if ((uint64) oc->cluster == GetSystemIdentifier())
			return;
		/* a connection of its own: callers may or may not be inside SPI */
		args[0] = Int64GetDatum(oc->cluster);
		SPI_connect();
		gridha_exec(&instances_cluster_known, args, NULL, true);
		known = DatumGetBool(gridha_col(0, 1, &isnull)) && !isnull;
		SPI_finish();
		if (known)
			return;
	}
	id = DatumGetCString(DirectFunctionCall1(uuid_out, instance_id));
	ereport(ERROR,
			(errcode(ERRCODE_GRIDHA_NOT_OWNER),
			 errmsg("the owner of instance %s is not confirmed on this cluster", id),
			 errdetail("The instance was restored from another cluster, where role \"%s\" owned it; "
					   "role \"%s\" here may be another role of the same name.", owner, owner),
			 errhint("An administrator who knows the role to be the right one confirms it: SELECT gridha.set_instance_owner('%s', '%s').",
					 id, quote_identifier(owner))));
}

static GridhaStatement instances_adopt_call = {
	"SELECT gridha_internal.instance_adopt($1, $2)",
	2, {UUIDOID, NAMEOID}
};

/*
 * instances_refuse_unowned: RG008 for an instance without an owner (a row
 * from 1.0): nobody but a superuser acts as it until an administrator gives
 * it one. One exception: a background worker's own instance registered
 * while the SQL had no owners (1.0) is owned by the role the worker runs
 * as, from the worker's next call: only that worker process, which the
 * shared memory says is the instance, may take it (gridha_slot_is_self).
 */
static void
instances_refuse_unowned(Datum instance_id, Oid caller)
{
	if (superuser_arg(caller))
		return;
	if (gridha_slot_is_self(DatumGetUUIDP(instance_id)))
	{
		Datum		args[2];
		NameData	name;
		bool		adopted;
		bool		isnull;

		/* a connection of its own: callers may or may not be inside SPI */
		namestrcpy(&name, GetUserNameFromId(caller, false));
		args[0] = instance_id;
		args[1] = NameGetDatum(&name);
		SPI_connect();
		if (gridha_sql_is_current())
		{
			gridha_exec(&instances_adopt_call, args, NULL, false);
			adopted = DatumGetBool(gridha_col(0, 1, &isnull)) && !isnull;
		}
		else
			adopted = gridha_instances12_adopt(args[0], args[1]);
		SPI_finish();
		if (adopted)
			return;
	}
	ereport(ERROR,
			(errcode(ERRCODE_GRIDHA_NOT_OWNER),
			 errmsg("instance %s has no owner",
					DatumGetCString(DirectFunctionCall1(uuid_out, instance_id))),
			 errdetail("An instance without an owner is not adopted by the first role that calls it."),
			 errhint("An administrator gives it one: SELECT gridha.set_instance_owner('%s', 'role').",
					 DatumGetCString(DirectFunctionCall1(uuid_out, instance_id)))));
}

/*
 * instances_insert_as: registers an unknown instance on first use, owned
 * by the calling role. If another session registered it meanwhile, that
 * row's owner is checked as any other.
 */
static void
instances_insert_as(Datum instance_id, Oid caller)
{
	Datum		args[2];
	NameData	name;
	bool		isnull;
	bool		present;
	Datum		owner;

	args[0] = instance_id;
	namestrcpy(&name, GetUserNameFromId(caller, false));
	args[1] = NameGetDatum(&name);
	if (gridha_sql_is_current())
	{
		gridha_exec(&instances_insert_call, args, NULL, false);
		if (DatumGetBool(gridha_col(0, 1, &isnull)))
			return;
		present = DatumGetBool(gridha_col(0, 2, &isnull));
		owner = gridha_col(0, 3, &isnull);
	}
	else if (gridha_instances12_insert(args[0], args[1], &present, &owner, &isnull))
		return;
	/* another session registered it meanwhile, on this cluster */
	if (!present)
		return;
	if (isnull)
		instances_refuse_unowned(instance_id, caller);
	else if (!instances_may_act(instance_id, NameStr(*DatumGetName(owner)), caller))
		instances_refuse(instance_id, NameStr(*DatumGetName(owner)), caller);
}

/*
 * gridha_instance_touch: the instance as the hand-out and the claim cycle
 * need it: its kind, whether its claim cycle is due, what it serves, its
 * lease and claim count; an unknown id is registered (kind 'external',
 * owned by the calling role, cycle due). Refuses with RG008, before any
 * write, a calling role that may not act as the instance. The session's
 * liveness lock is taken on first use (see above).
 *
 * Must be called inside SPI. Writes nothing for a known, owned instance
 * already bound to this session.
 */
GridhaInstance
gridha_instance_touch(Datum instance_id)
{
	GridhaInstance inst;
	GridhaTiming t = gridha_timing();
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	Oid			caller = GetOuterUserId();
	GridhaRows	rows;
	bool		isnull;
	bool		key_null = true;
	int64		key = 0;
	bool		found;
	bool		unowned = false;
	char	   *owner = NULL;
	InstancesOwnerCluster oc = {0};
	AttrNumber	attno;
	Datum		d;

	gridha_require_safe_schema();
	gridha_require_served();
	instances_key_write.what = KEY_NONE;

	/*
	 * service_claims before the instance's row: a rename or delete of
	 * targets takes it whole first (trigger targets_name_change), and a
	 * call that wrote its instance row here (binding its session) and then
	 * waited for the table behind such a statement could close a cycle
	 * with a call that holds the table and waits for that row.
	 */
	gridha_rows_hold_for_write(GRIDHA_CLAIMS);
	memset(&inst, 0, sizeof(inst));
	inst.cycle_due = true;
	inst.serves = GRIDHA_SERVES_ANY;
	instances_callbacks();

	/* a read by key (rows.c): this runs before every hand-out */
	gridha_rows_begin(&rows, false);
	found = gridha_rows_fetch(&rows, GRIDHA_KEY_INSTANCE, &instance_id);
	if (found)
	{
		attno = gridha_rows_attno(&rows, INSTANCE_OWNER);
		if (!instances_verdict(instance_id, caller))
		{
			d = gridha_rows_get(&rows, GRIDHA_INSTANCES, attno, &isnull);
			if (isnull)
				unowned = true; /* judged once the read is over: it may write */
			else if (!instances_may_act(instance_id, NameStr(*DatumGetName(d)), caller))
				instances_refuse(instance_id, NameStr(*DatumGetName(d)), caller);
			else
			{
				/* confirmed once the read is over: it reads a table */
				owner = pstrdup(NameStr(*DatumGetName(d)));
				instances_read_cluster(&rows, &oc);
			}
		}
		d = gridha_rows_get(&rows, GRIDHA_INSTANCES, INSTANCE_KIND, &isnull);
		inst.is_worker = !isnull && strcmp(TextDatumGetCString(d), "worker") == 0;
		d = gridha_rows_get(&rows, GRIDHA_INSTANCES, INSTANCE_LAST_SEEN_AT, &isnull);
		inst.cycle_due = isnull ||
			DatumGetTimestampTz(d) <= TimestampTzPlusMilliseconds(now, -t.renew_ms);
		d = gridha_rows_get(&rows, GRIDHA_INSTANCES, INSTANCE_SESSION_KEY, &key_null);
		if (!key_null)
			key = DatumGetInt64(d);
		if (inst.is_worker)
			inst.serves = GRIDHA_SERVES_ALL;
		else
		{
			d = gridha_rows_get(&rows, GRIDHA_INSTANCES,
								gridha_rows_attno(&rows, INSTANCE_SERVES), &isnull);
			if (!isnull)
				inst.serves = gridha_serves_parse(d);
		}
		d = gridha_rows_get(&rows, GRIDHA_INSTANCES,
							gridha_rows_attno(&rows, INSTANCE_SOFT_EXPIRY), &isnull);
		inst.lease_live = !isnull && DatumGetTimestampTz(d) > now;
		d = gridha_rows_get(&rows, GRIDHA_INSTANCES,
							gridha_rows_attno(&rows, INSTANCE_HELD), &isnull);
		inst.held = isnull ? 0 : DatumGetInt32(d);
	}
	gridha_rows_end(&rows);

	if (owner != NULL)
	{
		instances_confirm(instance_id, owner, &oc, caller);
		instances_remember(instance_id, caller);
	}
	if (unowned)
	{
		instances_refuse_unowned(instance_id, caller);
		instances_remember(instance_id, caller);
	}
	if (!found)
	{
		if (gridha_unknown_instance == GRIDHA_UNKNOWN_INSTANCE_REFUSE)
			ereport(ERROR,
					(errcode(ERRCODE_GRIDHA_UNKNOWN_INSTANCE),
					 errmsg("unknown instance %s",
							DatumGetCString(DirectFunctionCall1(uuid_out, instance_id))),
					 errdetail("gridha.unknown_instance is refuse: a call does not register an instance id it names."),
					 errhint("Register the instance first: SELECT gridha.register_instance('label'), and use the id it returns.")));
		instances_insert_as(instance_id, caller);
	}
	instances_liveness(instance_id, key_null, key);
	return inst;
}

/*
 * gridha_instance_check: refuses (RG008) a calling role that may not act
 * as the instance, for calls that read or write its claims without
 * touching it (release_claims, verify_batch, the reports, the monitor's
 * reads, the leader lease). An unknown instance passes: it owns nothing.
 * Inside SPI.
 */
void
gridha_instance_check(Datum instance_id)
{
	Oid			caller = GetOuterUserId();
	GridhaRows	rows;
	AttrNumber	attno;
	bool		isnull = true;
	bool		unowned = false;
	Datum		d = (Datum) 0;
	char	   *owner = NULL;
	InstancesOwnerCluster oc = {0};

	gridha_require_safe_schema();
	gridha_require_served();
	instances_callbacks();
	/* the reports' path: a role that acted as the instance before passes */
	if (instances_verdict(instance_id, caller))
		return;

	gridha_rows_begin(&rows, false);
	attno = gridha_rows_attno(&rows, INSTANCE_OWNER);
	if (gridha_rows_fetch(&rows, GRIDHA_KEY_INSTANCE, &instance_id))
	{
		d = gridha_rows_get(&rows, GRIDHA_INSTANCES, attno, &isnull);
		if (!isnull)
		{
			owner = pstrdup(NameStr(*DatumGetName(d)));
			instances_read_cluster(&rows, &oc);
		}
		else
			unowned = true;
	}
	gridha_rows_end(&rows);
	if (owner == NULL)
	{
		/* unknown (it owns nothing), or no owner yet */
		if (unowned)
			instances_refuse_unowned(instance_id, caller);
		return;
	}
	if (!instances_may_act(instance_id, owner, caller))
		instances_refuse(instance_id, owner, caller);
	instances_confirm(instance_id, owner, &oc, caller);
	instances_remember(instance_id, caller);
}

PG_FUNCTION_INFO_V1(gridha_instance_check_sql);

/*
 * gridha_instance_check_sql: SQL gridha_internal.instance_check(instance_id,
 * max_batches) and (instance_id, service_id, batch_id, epoch) (1.3), the
 * checks of the read-only calls whose statement is SQL (claimed_batches,
 * pending_batches, verify_batch): their arguments, in their order and with
 * the messages of the C calls' checks (22004, 22023), then
 * gridha_instance_check; in the Citus mode, after the arguments, the
 * mode's check of the owner (gridha_internal.citus_instance_check).
 * Returns nothing.
 */
Datum
gridha_instance_check_sql(PG_FUNCTION_ARGS)
{
	Datum		instance_id = gridha_arg_uuid(fcinfo, 0, "instance_id");

	if (PG_NARGS() == 2)
		(void) gridha_arg_count(fcinfo, 1, "max_batches");
	else
	{
		(void) gridha_arg_id(fcinfo, 1, "service_id");
		(void) gridha_arg_id(fcinfo, 2, "batch_id");
		(void) gridha_arg_epoch(fcinfo, 3);
	}
	/* the Citus mode: gridha_internal.citus_instance_check (the owner) */
	GRIDHA_CITUS_HANDOVER(fcinfo);
	SPI_connect();
	gridha_instance_check(instance_id);
	SPI_finish();
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(gridha_instances_changed);

/*
 * gridha_instances_changed: statement trigger after a change of owner, a
 * delete or a truncate of gridha.instances: every backend forgets its
 * ownership verdicts at commit (a relcache invalidation of the table).
 */
Datum
gridha_instances_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "gridha: instances_changed must be called as a trigger");
	CacheInvalidateRelcacheByRelid(RelationGetRelid(trigdata->tg_relation));
	instances_nverdicts = 0;
	return PointerGetDatum(NULL);
}

PG_FUNCTION_INFO_V1(gridha_instances_owner_stamp);

/*
 * gridha_instances_owner_stamp: row trigger before an INSERT or an UPDATE
 * OF owner of gridha.instances (SQL 1.3): an owner written here is set on
 * this cluster (owner_cluster: its system identifier). An inserted row
 * that names its cluster already (a restore's COPY) keeps it; a row
 * without an owner has none.
 */
Datum
gridha_instances_owner_stamp(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	row;
	int			owner_att;
	int			cluster_att;
	bool		isnull;
	Datum		value;
	bool		null;
	bool		replace = true;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BEFORE(trigdata->tg_event))
		elog(ERROR, "gridha: instances_owner_stamp must be called as a row trigger before the write");
	desc = RelationGetDescr(trigdata->tg_relation);
	row = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ? trigdata->tg_newtuple : trigdata->tg_trigtuple;
	owner_att = SPI_fnumber(desc, "owner");
	cluster_att = SPI_fnumber(desc, "owner_cluster");
	if (owner_att <= 0 || cluster_att <= 0)
		return PointerGetDatum(row);
	(void) heap_getattr(row, owner_att, desc, &isnull);
	null = isnull;
	value = null ? (Datum) 0 : Int64GetDatum((int64) GetSystemIdentifier());
	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
	{
		(void) heap_getattr(row, cluster_att, desc, &isnull);
		replace = isnull && !null;
	}
	if (!replace)
		return PointerGetDatum(row);
	return PointerGetDatum(heap_modify_tuple_by_cols(row, desc, 1, &cluster_att, &value, &null));
}

static GridhaStatement instances_declare_call = {
	"SELECT gridha_internal.instance_declare($1, $2)",
	2, {UUIDOID, TEXTARRAYOID}
};

/*
 * gridha_instance_declare: records the kinds of target the instance serves
 * (GRIDHA_SERVES_ANY: it declares nothing, as a 1.0 client). Its next
 * claims follow it, and the services it holds whose targets it cannot
 * serve are handed back. Inside SPI, after gridha_instance_touch.
 */
void
gridha_instance_declare(Datum instance_id, int serves)
{
	Datum		args[2];
	char		nulls[3] = "  ";

	args[0] = instance_id;
	if (serves == GRIDHA_SERVES_ANY)
	{
		nulls[1] = 'n';
		args[1] = (Datum) 0;
	}
	else
		args[1] = gridha_serves_datum(serves);
	if (gridha_sql_is_current())
		gridha_exec(&instances_declare_call, args, nulls, false);
	else
		gridha_instances12_declare(args[0], args[1], nulls[1] == 'n');
	/* a known exception to the lock order (docs/concurrency.md) */
	gridha_lockcheck_exempt("the declaration of what an instance serves is written first");
}

PG_FUNCTION_INFO_V1(gridha_register_check);

/*
 * gridha_register_check: SQL gridha_internal.register_check(serves) -> name
 * (1.3): what gridha.register_instance checks before it writes its row (no
 * unsafe schema, SQL served, a writable transaction: 25006; the words of
 * serves), and the calling role, the new instance's owner.
 */
Datum
gridha_register_check(PG_FUNCTION_ARGS)
{
	Name		owner = (Name) palloc0(NAMEDATALEN);

	gridha_require_writable("register_instance()");
	if (!PG_ARGISNULL(0))
		(void) gridha_serves_parse(PG_GETARG_DATUM(0));
	namestrcpy(owner, GetUserNameFromId(GetOuterUserId(), false));
	PG_RETURN_NAME(owner);
}

PG_FUNCTION_INFO_V1(gridha_register_touch);

/*
 * gridha_register_touch: SQL gridha_internal.register_touch(instance_id,
 * serves) (1.3): the first use of the instance gridha.register_instance
 * just wrote (gridha_instance_touch: the session's liveness), then its
 * declaration of serves when given.
 */
Datum
gridha_register_touch(PG_FUNCTION_ARGS)
{
	Datum		id;
	int			serves = GRIDHA_SERVES_ANY;

	if (PG_ARGISNULL(0))
		elog(ERROR, "gridha: register_touch needs an instance");
	id = PG_GETARG_DATUM(0);
	if (!PG_ARGISNULL(1))
		serves = gridha_serves_parse(PG_GETARG_DATUM(1));
	SPI_connect();
	(void) gridha_instance_touch(id);
	if (serves != GRIDHA_SERVES_ANY)
		gridha_instance_declare(id, serves);
	SPI_finish();
	PG_RETURN_VOID();
}
