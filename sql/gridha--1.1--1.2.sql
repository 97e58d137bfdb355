/*
 * gridha 1.1 -> 1.2: ALTER EXTENSION gridha UPDATE TO '1.2'.
 *
 * An upgraded database equals a fresh 1.2 install (the upgrade test
 * compares pg_dump --schema-only of both). The 1.2 library serves a
 * database still on 1.0 or 1.1 until this script runs.
 */

\echo Use "ALTER EXTENSION gridha UPDATE TO '1.2'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- The schema must be safe: owned by a superuser, CREATE for nobody else
-- ---------------------------------------------------------------------------
--
-- A schema named gridha that existed before CREATE EXTENSION (1.1 did not
-- check) may belong to a role that planted objects in it. The upgrade
-- refuses until an administrator has looked and fixed the ownership.

DO $schema$
DECLARE
    owner_name name;
    owner_super boolean;
    owner_oid oid;
    acl        aclitem[];
BEGIN
    SELECT r.rolname, r.rolsuper, r.oid, n.nspacl INTO owner_name, owner_super, owner_oid, acl
      FROM pg_catalog.pg_namespace n
      JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
     WHERE n.nspname OPERATOR(pg_catalog.=) 'gridha';
    IF NOT owner_super THEN
        RAISE EXCEPTION 'schema gridha belongs to role "%", which is not a superuser', owner_name
            USING ERRCODE = '42501',
                  DETAIL = 'Objects its owner placed there would run with the extension''s rights.',
                  HINT = 'Check the schema for objects gridha did not create, then ALTER SCHEMA gridha OWNER TO a superuser and try again.';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.aclexplode(acl) a
                WHERE a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
                  AND a.grantee OPERATOR(pg_catalog.<>) owner_oid) THEN
        RAISE EXCEPTION 'schema gridha grants CREATE to roles other than its owner'
            USING ERRCODE = '42501',
                  DETAIL = 'Objects another role placed there would run with the extension''s rights.',
                  HINT = 'REVOKE CREATE ON SCHEMA gridha FROM PUBLIC and from every role but its owner, then try again.';
    END IF;
END
$schema$;

-- ---------------------------------------------------------------------------
-- First, every table and view of gridha, locked at once
-- ---------------------------------------------------------------------------
--
-- The statements below lock one table after another. Workers and clients
-- keep running through an upgrade, and a transaction of theirs that holds
-- a table this script has not reached yet and then wants one it already
-- holds would close a deadlock, which the upgrade would usually lose. So
-- everything is locked before anything changes, one attempt at a time:
-- each wait for a lock ends after a short timeout (below deadlock_timeout,
-- so the upgrade is never in a deadlock long enough to be picked as its
-- victim), an attempt that runs out releases what it took, and the next
-- one starts shortly after. Once every lock is held, the rest runs without
-- waiting. The caller's lock_timeout, when set, bounds the whole wait;
-- statement_timeout and a cancel stop it as any statement.

DO $lock$
DECLARE
    rels       text;
    caller_ms  integer := (SELECT setting::integer FROM pg_catalog.pg_settings WHERE name = 'lock_timeout');
    attempt_ms integer := (SELECT least(200, greatest(10, setting::integer / 2))
                             FROM pg_catalog.pg_settings WHERE name = 'deadlock_timeout');
    started    timestamptz := pg_catalog.clock_timestamp();
    attempts   integer := 0;
BEGIN
    SELECT pg_catalog.string_agg(c.oid::pg_catalog.regclass::text, ', ' ORDER BY c.oid)
      INTO rels
      FROM pg_catalog.pg_class c
     WHERE c.relnamespace = 'gridha'::pg_catalog.regnamespace AND c.relkind IN ('r', 'v');
    PERFORM pg_catalog.set_config('lock_timeout', attempt_ms || 'ms', true);
    LOOP
        attempts := attempts + 1;
        BEGIN
            EXECUTE 'LOCK TABLE ' || rels || ' IN ACCESS EXCLUSIVE MODE';
            EXIT;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            IF caller_ms > 0 AND pg_catalog.clock_timestamp() - started >= caller_ms * interval '1 ms' THEN
                RAISE EXCEPTION 'could not lock the tables of gridha within lock_timeout (% attempts)', attempts
                    USING ERRCODE = 'lock_not_available',
                          HINT = 'Transactions that use gridha''s tables held them all along; retry, or raise lock_timeout.';
            END IF;
            PERFORM pg_catalog.pg_sleep(pg_catalog.random() * 0.05);
        END;
    END LOOP;
    PERFORM pg_catalog.set_config('lock_timeout', caller_ms || 'ms', true);
END
$lock$;

-- ---------------------------------------------------------------------------
-- Every function's search_path ends with pg_temp: a temporary type of the
-- caller's session is never found before gridha's and pg_catalog's own
-- ---------------------------------------------------------------------------

DO $path$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::pg_catalog.regprocedure
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_depend d
            ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.objid OPERATOR(pg_catalog.=) p.oid
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
          JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
         WHERE e.extname OPERATOR(pg_catalog.=) 'gridha'
           AND p.proconfig OPERATOR(pg_catalog.@>) ARRAY['search_path=pg_catalog, gridha']
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET search_path = pg_catalog, gridha, pg_temp', f);
    END LOOP;
END
$path$;

-- The rate-state trigger runs as the extension's owner: an administrator's
-- UPDATE of a target's rate_interval writes gridha.target_rate_state, which
-- gridha_admin may not write itself.
ALTER FUNCTION gridha.targets_rate_changed() SECURITY DEFINER;

COMMENT ON FUNCTION gridha.renew_claims(uuid) IS
'extends the instance''s lease (one row: every claim it holds expires with it) and returns how many claims it holds';

COMMENT ON TABLE gridha.instances IS
'every instance ever seen; last_seen_at is its last claim cycle (renewal), stopped_at its last release of all claims, session_key the key of the liveness lock its session holds (gridha.session_liveness; given once per instance from gridha.session_keys)';

-- ---------------------------------------------------------------------------
-- Ids "." and ".." are refused: they name other paths in a ledger's URLs
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION gridha.batches_before_insert()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    IF NEW.service_id IS NULL OR NEW.batch_id IS NULL THEN
        RAISE EXCEPTION 'service_id and batch_id must not be null'
            USING ERRCODE = '22004';
    END IF;
    IF NEW.service_id = '' OR NEW.batch_id = '' THEN
        RAISE EXCEPTION 'service_id and batch_id must not be empty'
            USING ERRCODE = '22023';
    END IF;

    -- A row that comes with its seq is being restored (pg_restore, or psql
    -- with a plain dump): it keeps its place, status and history, and its
    -- service's claim row is restored beside it. Producers can insert only
    -- service_id, batch_id and payload, so only the extension's owner or a
    -- superuser can do this.
    IF NEW.seq IS NOT NULL THEN
        RETURN NEW;
    END IF;

    -- Ids are put into the ledger's URLs one path segment each: "." and
    -- ".." would name another path there.
    IF NEW.service_id IN ('.', '..') OR NEW.batch_id IN ('.', '..') THEN
        RAISE EXCEPTION 'service_id and batch_id must not be "." or ".."'
            USING ERRCODE = '22023',
                  DETAIL = 'Ids are path segments of the ledger''s URLs, where these two name other paths.';
    END IF;

    -- A new batch's ids are index keys: keep them well inside a btree entry.
    IF octet_length(NEW.service_id) > 512 OR octet_length(NEW.batch_id) > 512 THEN
        RAISE EXCEPTION 'service_id or batch_id is too long'
            USING ERRCODE = '22023',
                  DETAIL = 'An id has at most 512 bytes.';
    END IF;

    INSERT INTO gridha.service_claims AS c (service_id, head_seq, tail_seq, ready_at)
    VALUES (NEW.service_id, 1, 1, now())
    ON CONFLICT (service_id) DO UPDATE
        SET tail_seq = c.tail_seq + 1,
            head_seq = coalesce(c.head_seq, c.tail_seq + 1),
            ready_at = CASE WHEN c.head_seq IS NULL THEN now() ELSE c.ready_at END
    RETURNING c.tail_seq INTO NEW.seq;

    NEW.status := 'queued';
    NEW.created_at := now();
    NEW.epoch := NULL;
    NEW.attempts := 0;
    NEW.not_before := NULL;
    NEW.instance_id := NULL;
    NEW.handed_out_at := NULL;
    NEW.submitted_at := NULL;
    NEW.finished_at := NULL;
    RETURN NEW;
END
$$;

-- ---------------------------------------------------------------------------
-- instance_health: new (registered, never seen) and stopped (released since
-- its last cycle, whatever it still holds)
-- ---------------------------------------------------------------------------

CREATE OR REPLACE VIEW gridha.instance_health AS
SELECT i.instance_id,
       i.label,
       i.kind,
       i.last_seen_at,
       i.held::bigint AS claims,
       coalesce(x.submitting, false) AS submitting,
       CASE
           WHEN i.stopped_at IS NOT NULL AND (i.last_seen_at IS NULL OR i.stopped_at >= i.last_seen_at)
                AND (i.soft_expiry IS NULL OR i.soft_expiry <= i.stopped_at) THEN 'stopped'
           WHEN i.last_seen_at IS NULL THEN 'new'
           WHEN i.soft_expiry IS NULL OR i.hard_expiry <= now() THEN 'failed'
           WHEN i.soft_expiry > now() THEN 'healthy'
           WHEN coalesce(x.submitting, false) THEN 'slow'
           ELSE 'failed'
       END AS health,
       i.soft_expiry,
       i.hard_expiry
FROM gridha.instances i
LEFT JOIN LATERAL (
    SELECT bool_or(c.submitting) AS submitting
      FROM gridha.claims c
     WHERE c.claimant = i.instance_id AND c.in_flight) x ON true;

COMMENT ON VIEW gridha.instance_health IS
'each instance''s health by the decision tree, from its lease: registered and never seen new; within its lease healthy; past its soft expiry and mid-submission slow (assumed healthy); past it and idle, or past its hard expiry, failed; released its claims since its last cycle: stopped';

-- The keys of 1.1 were hashes of the instance id: each instance is given a
-- key of its own at its next call.
UPDATE gridha.instances SET session_key = NULL WHERE session_key IS NOT NULL;

-- ---------------------------------------------------------------------------
-- 1.2: what crosses a boundary only through an administrator
-- ---------------------------------------------------------------------------

-- The keys of the session-liveness locks: one per instance, never two alike
-- (a hash of the id could be made to collide on purpose).
CREATE SEQUENCE gridha.session_keys;

COMMENT ON SEQUENCE gridha.session_keys IS
'the key of each instance''s session-liveness lock (gridha.instances.session_key), given once per instance';

REVOKE ALL ON SEQUENCE gridha.session_keys FROM PUBLIC;

/*
 * worker_limit_slots: each running worker's concurrency limit per target
 * (docs/workers.md), from its shared-memory slot.
 */
CREATE FUNCTION gridha.worker_limit_slots(
    OUT instance_id uuid,
    OUT target text,
    OUT in_flight integer,
    OUT inflight_limit integer,
    OUT failures bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'gridha_worker_limits'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.worker_limit_slots() IS
'each running worker''s requests in flight and concurrency limit per target it talked to lately, with the overload signals it saw (empty without preload)';

CREATE VIEW gridha.worker_limits AS
SELECT l.instance_id, l.target, l.in_flight, l.inflight_limit, l.failures
FROM gridha.worker_limit_slots() l;

COMMENT ON VIEW gridha.worker_limits IS
'one row per running worker and target: requests in flight, the worker''s current concurrency limit (at most gridha.worker_inflight) and the overload signals since it started';

REVOKE ALL ON FUNCTION gridha.worker_limit_slots() FROM PUBLIC;
REVOKE ALL ON gridha.worker_limits FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gridha.worker_limit_slots() TO gridha_submitter, gridha_admin;
GRANT SELECT ON gridha.worker_limits TO gridha_submitter, gridha_admin;

/*
 * worker_register: a background worker's instance row, with the worker's
 * role as its owner. Only a gridha background worker process may call it
 * (the function checks the process, not the role), so no SQL client can
 * make an instance of kind worker.
 */
CREATE FUNCTION gridha.worker_register(instance_id uuid, label text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'gridha_worker_register'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.worker_register(uuid, text) IS
'registers the calling background worker''s instance (kind worker, owned by the worker''s role); refused outside a gridha worker; false when the id has a row already';

/*
 * worker_orphans: the heads a background worker handed out and still has
 * submitting under its claim, for the worker to find those whose report
 * failed (it reports them delayed). Read by the worker as its own role.
 */
CREATE FUNCTION gridha.worker_orphans(instance_id uuid)
RETURNS TABLE (service_id text, batch_id text, epoch bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
SELECT b.service_id, b.batch_id, b.epoch
  FROM gridha.service_claims c
  JOIN gridha.batches b ON b.service_id = c.service_id AND b.seq = c.head_seq
 WHERE c.claimant = $1 AND c.in_flight
   AND b.status = 'submitting' AND b.epoch = c.epoch AND b.instance_id = $1
$$;

COMMENT ON FUNCTION gridha.worker_orphans(uuid) IS
'the heads an instance handed out that are still submitting under its claim and epoch (a worker reports those it does not have in hand delayed)';

/*
 * move_service: a service's target is set when the service is created;
 * moving it to another ledger is an administrator's decision. A service
 * with a batch in flight stays where it is until that batch is final: its
 * status is known only to the ledger that has it.
 */
CREATE FUNCTION gridha.move_service(service_id text, target text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    from_target text;
    busy        boolean;
BEGIN
    IF move_service.service_id IS NULL OR move_service.target IS NULL THEN
        RAISE EXCEPTION 'service_id and target must not be null' USING ERRCODE = '22004';
    END IF;
    -- the target row first, then the claim: the lock order of enqueue
    PERFORM 1 FROM gridha.targets t WHERE t.target = move_service.target FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown target "%"', move_service.target
            USING ERRCODE = 'RG006',
                  HINT = 'Add it first: INSERT INTO gridha.targets (target, ...) VALUES (...).';
    END IF;
    SELECT c.target, c.in_flight INTO from_target, busy
      FROM gridha.service_claims c
     WHERE c.service_id = move_service.service_id
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown service "%"', move_service.service_id
            USING ERRCODE = 'RG003',
                  DETAIL = 'No batch was ever enqueued for this service.';
    END IF;
    IF from_target = move_service.target THEN
        RETURN false;
    END IF;
    IF busy THEN
        RAISE EXCEPTION 'service "%" has a batch in flight at target "%"', move_service.service_id, from_target
            USING ERRCODE = '55006',
                  DETAIL = 'Only the ledger that has it can say what became of it.',
                  HINT = 'Try again once the batch is final.';
    END IF;
    UPDATE gridha.service_claims c SET target = move_service.target
     WHERE c.service_id = move_service.service_id;
    RETURN true;
END
$$;

COMMENT ON FUNCTION gridha.move_service(text, text) IS
'moves a service (its queued batches and those to come) to another target; refused while a batch of it is in flight; false when it is on that target already (administrators)';

/*
 * set_instance_owner: an instance without an owner (one from 1.0) is no
 * longer adopted by whoever calls first: an administrator gives it one.
 */
CREATE FUNCTION gridha.set_instance_owner(instance_id uuid, owner regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    IF set_instance_owner.instance_id IS NULL OR set_instance_owner.owner IS NULL THEN
        RAISE EXCEPTION 'instance_id and owner must not be null' USING ERRCODE = '22004';
    END IF;
    UPDATE gridha.instances i SET owner = (SELECT r.rolname FROM pg_catalog.pg_roles r
                                            WHERE r.oid = set_instance_owner.owner::oid)
     WHERE i.instance_id = set_instance_owner.instance_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown instance %', set_instance_owner.instance_id
            USING ERRCODE = 'RG003';
    END IF;
END
$$;

COMMENT ON FUNCTION gridha.set_instance_owner(uuid, regrole) IS
'gives an instance an owner (administrators): only members of that role may act as it; an instance without an owner is refused to everyone but superusers';

REVOKE ALL ON FUNCTION gridha.worker_register(uuid, text), gridha.worker_orphans(uuid),
    gridha.move_service(text, text),
    gridha.set_instance_owner(uuid, regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gridha.worker_register(uuid, text), gridha.worker_orphans(uuid)
TO gridha_submitter;
GRANT EXECUTE ON FUNCTION gridha.move_service(text, text), gridha.set_instance_owner(uuid, regrole)
TO gridha_admin;

-- ---------------------------------------------------------------------------
-- 1.2: the SQL API (issue 30)
-- ---------------------------------------------------------------------------
--
-- Typed words: a submission's outcome and a ledger's status are enums;
-- the text forms of 1.1 stay (a bare literal such as 'accepted' resolves
-- to the text overload, which reads any case and refuses an unknown word
-- with RG004 or RG005). Batched reports take one array of rows, with a
-- detail on each; the five parallel arrays of 1.1 stay, deprecated. The
-- leader API says duty, not role: lead, renew_lead, resign_lead (try_lead
-- and resign stay, deprecated). Every function that returns batches
-- defaults to 100 of them.

CREATE TYPE gridha.submission_outcome AS ENUM ('accepted', 'delayed', 'rejected');

COMMENT ON TYPE gridha.submission_outcome IS
'what submitting a batch came to: accepted (-> pending), delayed (-> delayed, handed out again after a backoff), rejected (-> invalid)';

CREATE TYPE gridha.ledger_status AS ENUM ('pending', 'valid', 'committed', 'invalid', 'unknown');

COMMENT ON TYPE gridha.ledger_status IS
'what the ledger says of an in-flight batch: pending, valid, committed (final), invalid (final), unknown (-> handed out again)';

CREATE TYPE gridha.submission_report AS (
    service_id text,
    batch_id   text,
    epoch      bigint,
    outcome    gridha.submission_outcome,
    detail     text
);

COMMENT ON TYPE gridha.submission_report IS
'one row of report_submissions(instance_id, gridha.submission_report[]): a handed-out batch, its epoch, the outcome of submitting it and an optional detail stored on the batch';

CREATE TYPE gridha.status_report AS (
    service_id text,
    batch_id   text,
    epoch      bigint,
    status     gridha.ledger_status,
    detail     text
);

COMMENT ON TYPE gridha.status_report IS
'one row of report_statuses(instance_id, gridha.status_report[]): an in-flight batch, its epoch, what the ledger says of it and an optional detail stored on the batch';

CREATE FUNCTION gridha.report_submission(instance_id uuid, service_id text, batch_id text, epoch bigint,
                                         outcome gridha.submission_outcome, detail text DEFAULT NULL)
RETURNS gridha.batch_status
AS 'MODULE_PATHNAME', 'gridha_report_submission_enum'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.report_submission(uuid, text, text, bigint, gridha.submission_outcome, text) IS
'records the result of submitting a batch, the outcome typed: accepted -> pending, delayed -> delayed with backoff, rejected -> invalid; refused for a stale epoch';

CREATE FUNCTION gridha.report_status(instance_id uuid, service_id text, batch_id text, epoch bigint,
                                     dlt_status gridha.ledger_status)
RETURNS gridha.batch_status
AS 'MODULE_PATHNAME', 'gridha_report_status_enum'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.report_status(uuid, text, text, bigint, gridha.ledger_status) IS
'records what the ledger says of an in-flight batch, the status typed: pending, valid, committed, invalid or unknown; refused for a stale epoch';

CREATE FUNCTION gridha.report_submissions(instance_id uuid, reports gridha.submission_report[])
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, sqlstate text, message text)
AS 'MODULE_PATHNAME', 'gridha_report_submission_rows'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 100
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.report_submissions(uuid, gridha.submission_report[]) IS
'many report_submission in one transaction, one row per batch: one result row per batch, in the order given, with its new status, or the SQLSTATE and message that refused it (a refused row does not undo the others)';

CREATE FUNCTION gridha.report_statuses(instance_id uuid, reports gridha.status_report[])
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, sqlstate text, message text)
AS 'MODULE_PATHNAME', 'gridha_report_status_rows'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 100
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.report_statuses(uuid, gridha.status_report[]) IS
'many report_status in one transaction, one row per batch with an optional detail: one result row per batch with its new status, or the SQLSTATE and message that refused it';

CREATE FUNCTION gridha.lead(instance_id uuid, duty text DEFAULT 'maintenance')
RETURNS bigint
AS 'MODULE_PATHNAME', 'gridha_lead'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.lead(uuid, text) IS
'leads the duty (a new term when the leader changes) or renews this instance''s lease on it; returns the term, or NULL while another instance holds an unexpired lease';

CREATE FUNCTION gridha.resign_lead(instance_id uuid, duty text DEFAULT 'maintenance')
RETURNS boolean
AS 'MODULE_PATHNAME', 'gridha_resign_lead'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.resign_lead(uuid, text) IS
'gives up this instance''s lease on the duty at once; true if it held it';

REVOKE ALL ON FUNCTION
    gridha.report_submission(uuid, text, text, bigint, gridha.submission_outcome, text),
    gridha.report_status(uuid, text, text, bigint, gridha.ledger_status),
    gridha.report_submissions(uuid, gridha.submission_report[]),
    gridha.report_statuses(uuid, gridha.status_report[]),
    gridha.lead(uuid, text),
    gridha.resign_lead(uuid, text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    gridha.report_submission(uuid, text, text, bigint, gridha.submission_outcome, text),
    gridha.report_status(uuid, text, text, bigint, gridha.ledger_status),
    gridha.report_submissions(uuid, gridha.submission_report[]),
    gridha.report_statuses(uuid, gridha.status_report[]),
    gridha.lead(uuid, text),
    gridha.resign_lead(uuid, text)
TO gridha_submitter;

-- Objects of 1.1 the 1.2 API changes: next_batch and next_batches return
-- attempts (beside attempt, its 1.1 name); next_batches and pending_batches
-- default to 100 batches, as claimed_batches does; the leader functions
-- name their argument duty.

DROP FUNCTION gridha.next_batch(uuid);

CREATE FUNCTION gridha.next_batch(instance_id uuid)
RETURNS TABLE (service_id text, batch_id text, payload bytea, epoch bigint, attempt integer, attempts integer)
AS 'MODULE_PATHNAME', 'gridha_next_batch'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.next_batch(uuid) IS
'the queuer cycle: renews and acquires claims when due, hands out the submittable head that has waited longest among this instance''s services and marks it submitting; 0 or 1 row; attempts counts its hand-outs (attempt, the same count, is its deprecated 1.1 name)';

DROP FUNCTION gridha.next_batches(uuid, integer);

CREATE FUNCTION gridha.next_batches(instance_id uuid, max_batches integer DEFAULT 100)
RETURNS TABLE (service_id text, batch_id text, payload bytea, epoch bigint, attempt integer, attempts integer)
AS 'MODULE_PATHNAME', 'gridha_next_batches'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 10
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.next_batches(uuid, integer) IS
'like next_batch, up to max_batches batches of distinct services';

CREATE OR REPLACE FUNCTION gridha.pending_batches(instance_id uuid, max_batches integer DEFAULT 100)
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, epoch bigint, submitted_at timestamptz)
AS 'MODULE_PATHNAME', 'gridha_pending_batches'
LANGUAGE C STABLE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

DROP FUNCTION gridha.renew_lead(uuid, text, bigint);

CREATE FUNCTION gridha.renew_lead(instance_id uuid, duty text, term bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'gridha_renew_lead'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.renew_lead(uuid, text, bigint) IS
'renews the lease only if this instance still leads the duty under this term; false once the term has moved on';

DROP FUNCTION gridha.run_maintenance(uuid, text);

CREATE FUNCTION gridha.run_maintenance(
    instance_id uuid,
    duty text DEFAULT 'maintenance',
    OUT term bigint,
    OUT tick bigint,
    OUT outcome text,
    OUT swept_instances integer,
    OUT pruned_batches bigint,
    OUT opened_windows integer)
RETURNS record
AS 'MODULE_PATHNAME', 'gridha_run_maintenance'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.run_maintenance(uuid, text) IS
'leads the duty if it can and runs the current tick once: sweeps long-gone instances, prunes final batches past gridha.retention, tops up ID windows; outcome ran, not_leader, already_run, clock_behind or lost_lease';

REVOKE ALL ON FUNCTION
    gridha.next_batch(uuid),
    gridha.next_batches(uuid, integer),
    gridha.renew_lead(uuid, text, bigint),
    gridha.run_maintenance(uuid, text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    gridha.next_batch(uuid),
    gridha.next_batches(uuid, integer),
    gridha.renew_lead(uuid, text, bigint),
    gridha.run_maintenance(uuid, text)
TO gridha_submitter;

COMMENT ON FUNCTION gridha.report_submissions(uuid, text[], text[], bigint[], text[], text[]) IS
'deprecated since 1.2 (use report_submissions(uuid, gridha.submission_report[])): many report_submission in one transaction, one element per batch in each array: one row per batch with its new status, or the SQLSTATE and message that refused it (a refused row does not undo the others)';

COMMENT ON FUNCTION gridha.report_statuses(uuid, text[], text[], bigint[], text[]) IS
'deprecated since 1.2 (use report_statuses(uuid, gridha.status_report[])): many report_status in one transaction: one row per batch with its new status, or the SQLSTATE and message that refused it';

COMMENT ON FUNCTION gridha.try_lead(uuid, text) IS
'deprecated since 1.2 (use lead): leads the duty named role (a new term when the leader changes) or renews this instance''s lease; returns the term, or NULL while another instance holds an unexpired lease';

COMMENT ON FUNCTION gridha.resign(uuid, text) IS
'deprecated since 1.2 (use resign_lead): gives up this instance''s lease on the duty named role at once; true if it held it';

SELECT pg_catalog.pg_extension_config_dump('gridha.session_keys', '');

-- ---------------------------------------------------------------------------
-- 1.2: retention, counters and metrics (issue 28)
-- ---------------------------------------------------------------------------

-- Final batches always got their finished_at from the library; one that
-- came without (a restore of hand-made rows) takes its creation time, so
-- that retention, which judges by it, finds it.
UPDATE gridha.batches SET finished_at = created_at
 WHERE finished_at IS NULL AND status IN ('committed', 'invalid');

-- The prune step walks this index in creation order (a batch finished
-- longer than the retention ago was created before that too) and keeps the
-- final ones finished before the cutoff. No rewrite of a batch changes
-- created_at, so the hand-out's, the submission's and the final report's
-- rewrites all stay HOT updates. See src/leader.c and docs/operations.md.
CREATE INDEX batches_created ON gridha.batches (created_at);

CREATE FUNCTION gridha.prune_batches(max_batches integer DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'gridha_prune_batches'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.prune_batches(integer) IS
'one prune step by hand: deletes at most max_batches (NULL: gridha.prune_chunk) committed or invalid batches finished longer than gridha.retention ago, oldest first; returns how many (administrators)';

REVOKE ALL ON FUNCTION gridha.prune_batches(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gridha.prune_batches(integer) TO gridha_admin;

-- Running totals per service, kept by the reports (a final status adds one
-- to committed_total or invalid_total) and the hand-out (a batch handed out
-- again adds one to resubmitted_total) on the claim row they rewrite
-- anyway: no extra row, no extra lock. Never lowered by retention: pruned
-- batches stay counted. enqueued is tail_seq.
ALTER TABLE gridha.service_claims
    ADD COLUMN committed_total bigint NOT NULL DEFAULT 0,
    ADD COLUMN invalid_total bigint NOT NULL DEFAULT 0,
    ADD COLUMN resubmitted_total bigint NOT NULL DEFAULT 0,
    ADD COLUMN settled_seq bigint NOT NULL DEFAULT 0,
    ADD COLUMN settled_committed bigint NOT NULL DEFAULT 0,
    ADD COLUMN settled_invalid bigint NOT NULL DEFAULT 0,
    ADD COLUMN settled_resubmitted bigint NOT NULL DEFAULT 0;

COMMENT ON COLUMN gridha.service_claims.committed_total IS
'batches of this service committed so far (a running total: pruned batches stay counted)';
COMMENT ON COLUMN gridha.service_claims.invalid_total IS
'batches of this service found invalid so far (a running total)';
COMMENT ON COLUMN gridha.service_claims.resubmitted_total IS
'hand-outs of a batch that had been handed out before (after delayed, unknown or a takeover), so far';
COMMENT ON COLUMN gridha.service_claims.settled_seq IS
'tail_seq when the queue last ran dry: the batches enqueued up to it are counted in gridha.target_totals';
COMMENT ON COLUMN gridha.service_claims.settled_committed IS
'committed_total when the queue last ran dry (counted in gridha.target_totals)';
COMMENT ON COLUMN gridha.service_claims.settled_invalid IS
'invalid_total when the queue last ran dry (counted in gridha.target_totals)';
COMMENT ON COLUMN gridha.service_claims.settled_resubmitted IS
'resubmitted_total when the queue last ran dry (counted in gridha.target_totals)';

-- The totals of an upgraded database start from the batches it kept.
UPDATE gridha.service_claims c
   SET committed_total = x.committed, invalid_total = x.invalid, resubmitted_total = x.resubmitted
  FROM (SELECT b.service_id,
               count(*) FILTER (WHERE b.status = 'committed') AS committed,
               count(*) FILTER (WHERE b.status = 'invalid') AS invalid,
               coalesce(sum(greatest(b.attempts - 1, 0)), 0) AS resubmitted
          FROM gridha.batches b
         GROUP BY b.service_id) x
 WHERE x.service_id = c.service_id;

/*
 * The queue views read each service's row and its head (and, when the head
 * is not queued, the batch after it): every batch between the head and the
 * tail is queued, only the head can be in flight or retrying. What they
 * cost follows the services, never the history. committed and invalid are
 * the service's running totals (pruned batches stay counted).
 */
CREATE OR REPLACE VIEW gridha.service_queues AS
SELECT c.service_id,
       c.target,
       c.claimant,
       c.epoch,
       h.batch_id AS head_batch_id,
       h.status AS head_status,
       coalesce(c.tail_seq - c.head_seq + 1, 0) - q.in_flight - q.retrying AS queued,
       q.in_flight,
       q.retrying,
       c.committed_total AS committed,
       c.invalid_total AS invalid,
       CASE WHEN h.status = 'queued' THEN h.created_at ELSE n.created_at END AS oldest_queued_at
FROM gridha.service_claims c
LEFT JOIN gridha.batches h ON h.service_id = c.service_id AND h.seq = c.head_seq
LEFT JOIN gridha.batches n ON n.service_id = c.service_id AND n.seq = c.head_seq + 1
                          AND c.head_seq < c.tail_seq
CROSS JOIN LATERAL (
    SELECT coalesce((h.status IN ('submitting', 'pending', 'valid'))::int, 0)::bigint AS in_flight,
           coalesce((h.status IN ('delayed', 'unknown'))::int, 0)::bigint AS retrying) q;

COMMENT ON VIEW gridha.service_queues IS
'each service''s queue: its head batch, how many batches wait in each state, and how many were committed and found invalid so far (running totals, pruned batches included)';

-- What a producer may see of the queues: their progress, without who holds
-- them (claimant ids, epochs) and without payloads.
CREATE OR REPLACE VIEW gridha.queue_progress AS
SELECT service_id, target, head_batch_id, head_status, queued, in_flight, retrying,
       committed, invalid, oldest_queued_at
FROM gridha.service_queues;

COMMENT ON VIEW gridha.queue_progress IS
'each service''s queue as producers may see it: its head batch, how many batches wait in each state, and how many were committed and found invalid so far (running totals; no claimant, no epoch, no payload)';

/*
 * Running totals no service's row carries, per target: claims taken over
 * from another instance and writes refused as stale (RG001). Each backend
 * adds to its own row (slot: its process number), so no writer ever waits
 * for another; a target's total is the sum of its rows (src/totals.c).
 *
 * The settled_* columns hold the services' own counters (enqueued,
 * committed, invalid, resubmitted) up to the report that last emptied each
 * one's queue: that report moves what its service counted since it last
 * ran dry here, and marks it settled on the service's row (settled_seq and
 * the others). A target's counter is then its settled sum plus, for the
 * services with work only, their part not settled yet: gridha.metrics
 * never reads an idle service.
 */
CREATE TABLE gridha.target_totals (
    target               text NOT NULL,
    slot                 integer NOT NULL,
    claims_taken_over    bigint NOT NULL DEFAULT 0,
    stale_writes_refused bigint NOT NULL DEFAULT 0,
    -- what the target's services counted until they last ran dry
    settled_enqueued     bigint NOT NULL DEFAULT 0,
    settled_committed    bigint NOT NULL DEFAULT 0,
    settled_invalid      bigint NOT NULL DEFAULT 0,
    settled_resubmitted  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (target, slot)
);

COMMENT ON TABLE gridha.target_totals IS
'running totals per target spread over one row per backend slot (their sum is the total): claims taken over from another instance, writes refused as stale, and the settled_* part of the services'' counters (what each counted until its queue last ran dry); read through gridha.metrics';

REVOKE ALL ON gridha.target_totals FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('gridha.target_totals', '');

-- The idle services of an upgraded database are settled now: their
-- counters go into the targets' totals (slot 0) and are marked so on their
-- rows; the services with work settle when their queue next runs dry.
UPDATE gridha.service_claims
   SET settled_seq = tail_seq, settled_committed = committed_total,
       settled_invalid = invalid_total, settled_resubmitted = resubmitted_total
 WHERE head_seq IS NULL;

INSERT INTO gridha.target_totals
       (target, slot, settled_enqueued, settled_committed, settled_invalid, settled_resubmitted)
SELECT c.target, 0, sum(c.settled_seq), sum(c.settled_committed),
       sum(c.settled_invalid), sum(c.settled_resubmitted)
  FROM gridha.service_claims c
 WHERE c.head_seq IS NULL
 GROUP BY c.target;

/*
 * metrics: what a Prometheus scrape reads (docs/operations.md,
 * "Monitoring"). One row per target (scope 'target': gauges backlog,
 * oldest_ready_age_seconds, in_flight; counters *_total) and one per
 * instance that has a lease (scope 'instance': gauges in_flight,
 * claims_held, lease_remaining_seconds). Columns that do not apply to a
 * scope are NULL.
 *
 * It reads no batch and no idle claim: what it costs follows the targets,
 * the instances and the services with work, whatever the number of idle
 * services. The services with work are found as the hand-out finds them:
 * per claimant (the distinct claimants by a loose scan of the hand-out
 * index, one descent each, and the free services) those with a head
 * ready or waiting, through the hand-out index, and those with a head in
 * flight, through the in-flight index. A counter is what the target's
 * idle services had when they last ran dry (settled into
 * gridha.target_totals by the report that emptied their queue) plus, for
 * each service with work, what it counted since it last ran dry.
 */
CREATE VIEW gridha.metrics AS
WITH RECURSIVE claimants(id) AS (
    (SELECT c.claimant FROM gridha.service_claims c
      WHERE c.claimant IS NOT NULL
      ORDER BY c.claimant
      LIMIT 1)
    UNION ALL
    SELECT (SELECT c.claimant FROM gridha.service_claims c
             WHERE c.claimant > k.id
             ORDER BY c.claimant
             LIMIT 1)
      FROM claimants k
     WHERE k.id IS NOT NULL
),
busy AS (
    SELECT w.* FROM claimants k
    CROSS JOIN LATERAL (
        SELECT c.target, c.head_seq, c.tail_seq, c.ready_at, c.in_flight,
               c.tail_seq - c.settled_seq AS enqueued,
               c.committed_total - c.settled_committed AS committed,
               c.invalid_total - c.settled_invalid AS invalid,
               c.resubmitted_total - c.settled_resubmitted AS resubmitted
          FROM gridha.service_claims c
         WHERE c.claimant = k.id AND c.ready_at IS NOT NULL) w
    UNION ALL
    SELECT c.target, c.head_seq, c.tail_seq, c.ready_at, c.in_flight,
           c.tail_seq - c.settled_seq, c.committed_total - c.settled_committed,
           c.invalid_total - c.settled_invalid, c.resubmitted_total - c.settled_resubmitted
      FROM gridha.service_claims c
     WHERE c.claimant IS NULL AND c.ready_at IS NOT NULL
    UNION ALL
    SELECT c.target, c.head_seq, c.tail_seq, c.ready_at, c.in_flight,
           c.tail_seq - c.settled_seq, c.committed_total - c.settled_committed,
           c.invalid_total - c.settled_invalid, c.resubmitted_total - c.settled_resubmitted
      FROM gridha.service_claims c
     WHERE c.in_flight AND c.ready_at IS NULL
)
SELECT 'target'::text AS scope,
       t.target,
       NULL::uuid AS instance_id,
       NULL::text AS label,
       coalesce(s.backlog, 0)::bigint AS backlog,
       coalesce(greatest(extract(epoch FROM now() - s.oldest_ready_at), 0), 0)::float8 AS oldest_ready_age_seconds,
       coalesce(s.in_flight, 0)::bigint AS in_flight,
       NULL::bigint AS claims_held,
       NULL::float8 AS lease_remaining_seconds,
       (coalesce(x.enqueued, 0) + coalesce(s.enqueued, 0))::bigint AS enqueued_total,
       (coalesce(x.committed, 0) + coalesce(s.committed, 0))::bigint AS committed_total,
       (coalesce(x.invalid, 0) + coalesce(s.invalid, 0))::bigint AS invalid_total,
       (coalesce(x.resubmitted, 0) + coalesce(s.resubmitted, 0))::bigint AS resubmitted_total,
       coalesce(x.taken_over, 0)::bigint AS claims_taken_over_total,
       coalesce(x.stale, 0)::bigint AS stale_writes_refused_total
FROM gridha.targets t
LEFT JOIN (
    SELECT b.target,
           sum(coalesce(b.tail_seq - b.head_seq + 1, 0)) AS backlog,
           min(b.ready_at) FILTER (WHERE NOT b.in_flight) AS oldest_ready_at,
           count(*) FILTER (WHERE b.in_flight) AS in_flight,
           sum(b.enqueued) AS enqueued,
           sum(b.committed) AS committed,
           sum(b.invalid) AS invalid,
           sum(b.resubmitted) AS resubmitted
      FROM busy b
     GROUP BY b.target) s ON s.target = t.target
LEFT JOIN LATERAL (
    SELECT sum(o.claims_taken_over) AS taken_over, sum(o.stale_writes_refused) AS stale,
           sum(o.settled_enqueued) AS enqueued, sum(o.settled_committed) AS committed,
           sum(o.settled_invalid) AS invalid, sum(o.settled_resubmitted) AS resubmitted
      FROM gridha.target_totals o
     WHERE o.target = t.target) x ON true
UNION ALL
SELECT 'instance'::text,
       NULL::text,
       i.instance_id,
       i.label,
       NULL::bigint,
       NULL::float8,
       (SELECT count(*) FROM gridha.service_claims c
         WHERE c.claimant = i.instance_id AND c.in_flight)::bigint,
       i.held::bigint,
       greatest(extract(epoch FROM i.soft_expiry - now()), 0)::float8,
       NULL::bigint,
       NULL::bigint,
       NULL::bigint,
       NULL::bigint,
       NULL::bigint,
       NULL::bigint
FROM gridha.instances i
WHERE i.soft_expiry IS NOT NULL;

COMMENT ON VIEW gridha.metrics IS
'Prometheus-style metrics: one row per target (gauges backlog, oldest_ready_age_seconds, in_flight; running totals enqueued_total, committed_total, invalid_total, resubmitted_total, claims_taken_over_total, stale_writes_refused_total) and one per instance with a lease (gauges in_flight, claims_held, lease_remaining_seconds); reads no batch';

REVOKE ALL ON gridha.metrics FROM PUBLIC;
GRANT SELECT ON gridha.metrics TO gridha_submitter, gridha_admin;

-- ---------------------------------------------------------------------------
-- 1.2: ID windows without a foreign key to their sequence
-- ---------------------------------------------------------------------------

-- Each window written takes its sequence row's lock first anyway; the
-- key-share lock the key's check added is what PostgreSQL 17 turned into
-- "new multixact has more than one updating member" under concurrent
-- reservations. The trigger id_sequences_changed removes the windows of
-- rows deleted by hand, as the key's ON DELETE CASCADE did.
DO $fk$
DECLARE
    c name;
BEGIN
    FOR c IN
        SELECT k.conname FROM pg_catalog.pg_constraint k
         WHERE k.conrelid = 'gridha.id_windows'::pg_catalog.regclass
           AND k.confrelid = 'gridha.id_sequences'::pg_catalog.regclass
           AND k.contype = 'f'
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE gridha.id_windows DROP CONSTRAINT %I', c);
    END LOOP;
END
$fk$;

-- It runs as the extension's owner, as the key's cascade did: a role an
-- administrator let delete sequence rows needs no right on id_windows.
ALTER FUNCTION gridha.id_sequences_changed() SECURITY DEFINER;

COMMENT ON FUNCTION gridha.id_sequences_changed() IS
'trigger: rows of gridha.id_sequences deleted by hand take their windows with them and make every backend look its next_id names up again';

-- ---------------------------------------------------------------------------
-- 1.2: idle claims stay where they are
-- ---------------------------------------------------------------------------

-- The count share no longer moves idle claims: an instance above it keeps
-- them, and nobody asks another to hand some back. The requests' column
-- goes (src/claims.c, "balance").
ALTER TABLE gridha.instances DROP COLUMN shed;

-- ---------------------------------------------------------------------------
-- 1.2: target renames and deletes wait for the hand-outs; totals follow them
-- ---------------------------------------------------------------------------

/*
 * targets_name_change: a statement that renames targets (UPDATE OF target;
 * the new name cascades to the services' rows, the rate state and the
 * running totals) or deletes them (the rate state and the totals go with
 * them) first waits for every transaction writing gridha.service_claims to
 * end, and holds new ones off until it commits. Without it, a rename's
 * cascade locked the services' rows in its own order while a hand-out held
 * some of them and waited for the target's rate-state row the cascade had
 * taken: one of the two ended with 40P01 (found by the fuzz suite). Every
 * call holds service_claims before any row such a statement locks (the
 * lock order, src/claims.c), so a statement that holds it first closes
 * those cycles. Renames and deletes are rare; while one waits or runs,
 * the calls of every target wait for it (docs/concurrency.md).
 */
CREATE FUNCTION gridha.targets_name_change()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    LOCK TABLE gridha.service_claims IN SHARE ROW EXCLUSIVE MODE;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION gridha.targets_name_change() IS
'trigger: a statement that may rename or delete targets first takes gridha.service_claims in SHARE ROW EXCLUSIVE mode, so that its cascades never deadlock with a hand-out, a report or a backend''s totals row';

REVOKE ALL ON FUNCTION gridha.targets_name_change() FROM PUBLIC;

CREATE TRIGGER targets_name_change
    BEFORE UPDATE OF target OR DELETE ON gridha.targets
    FOR EACH STATEMENT
    EXECUTE FUNCTION gridha.targets_name_change();

/*
 * targets_totals_follow: a target's running totals (gridha.target_totals,
 * keyed by its name, with no foreign key: a backend's note of a target
 * that is gone must never fail its call) follow a rename to the new name,
 * and go with a deleted target, so that a counter of gridha.metrics keeps
 * its value across a rename and a new target of an old name starts at 0.
 * Rows already under the new name (left by a call in a REPEATABLE READ
 * transaction that began before the rename) are added to. The default
 * row that an INSERT of 'default' replaces (a restore) keeps its rows.
 */
CREATE FUNCTION gridha.targets_totals_follow()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.target = OLD.target THEN
            RETURN NULL;
        END IF;
        INSERT INTO gridha.target_totals AS t
               (target, slot, claims_taken_over, stale_writes_refused, settled_enqueued,
                settled_committed, settled_invalid, settled_resubmitted)
        SELECT NEW.target, o.slot, o.claims_taken_over, o.stale_writes_refused,
               o.settled_enqueued, o.settled_committed, o.settled_invalid,
               o.settled_resubmitted
          FROM gridha.target_totals o
         WHERE o.target = OLD.target
         ORDER BY o.slot
        ON CONFLICT (target, slot) DO UPDATE
           SET claims_taken_over = t.claims_taken_over + excluded.claims_taken_over,
               stale_writes_refused = t.stale_writes_refused + excluded.stale_writes_refused,
               settled_enqueued = t.settled_enqueued + excluded.settled_enqueued,
               settled_committed = t.settled_committed + excluded.settled_committed,
               settled_invalid = t.settled_invalid + excluded.settled_invalid,
               settled_resubmitted = t.settled_resubmitted + excluded.settled_resubmitted;
    ELSIF OLD.target = 'default' AND pg_trigger_depth() > 1 THEN
        -- the untouched default row, replaced by an INSERT of 'default'
        -- (targets_restore_default: a restore, whose totals may come
        -- first): the totals stay with the name
        RETURN NULL;
    END IF;
    DELETE FROM gridha.target_totals WHERE target = OLD.target;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION gridha.targets_totals_follow() IS
'trigger: a renamed target''s rows of gridha.target_totals move to its new name; a deleted target''s rows go with it';

REVOKE ALL ON FUNCTION gridha.targets_totals_follow() FROM PUBLIC;

CREATE TRIGGER targets_totals_follow
    AFTER UPDATE OF target OR DELETE ON gridha.targets
    FOR EACH ROW
    EXECUTE FUNCTION gridha.targets_totals_follow();
