/*
 * gridha 1.0 -> 1.1: ALTER EXTENSION gridha UPDATE TO '1.1'.
 *
 * An upgraded database equals a fresh 1.1 install: new columns go at the
 * end of their tables (where a fresh install has them too), and the
 * upgrade test compares pg_dump --schema-only of both. The 1.1 library
 * serves a database still on 1.0 until this script runs.
 */

\echo Use "ALTER EXTENSION gridha UPDATE TO '1.1'" to load this file. \quit

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
-- Targets: the HTTP answers that end a batch, and the target's own headers
-- ---------------------------------------------------------------------------

ALTER TABLE gridha.targets
    ADD COLUMN reject_codes integer[] NOT NULL DEFAULT '{400,422}',
    ADD COLUMN request_headers jsonb;

COMMENT ON COLUMN gridha.targets.reject_codes IS
'HTTP codes with which the ledger refuses a batch for good (it ends invalid); every other non-2xx answer delays it';

COMMENT ON COLUMN gridha.targets.request_headers IS
'headers sent with every POST and GET to the target, as a JSON object of strings (credentials: never logged, never readable by producers)';

-- ---------------------------------------------------------------------------
-- Instances declare the kinds of target they can serve
-- ---------------------------------------------------------------------------

ALTER TABLE gridha.instances ADD COLUMN serves text[];

COMMENT ON COLUMN gridha.instances.serves IS
'the kinds of target the instance can serve (submit_url, submit_function, status_url, status_function); NULL: it declared nothing and serves every service';

COMMENT ON FUNCTION gridha.register_instance(text) IS
'registers a new external instance, owned by the calling role, and returns its id';

CREATE FUNCTION gridha.register_instance(label text, serves text[])
RETURNS uuid
AS 'MODULE_PATHNAME', 'gridha_register_instance'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.register_instance(text, text[]) IS
'registers a new external instance, owned by the calling role, that serves the kinds of target given (submit_url, submit_function, status_url, status_function), and returns its id';

COMMENT ON FUNCTION gridha.acquire_claims(uuid) IS
'takes free, soft-expired (nothing submitting) and hard-expired claims whose target the instance can serve, up to the fair share when gridha.balance_claims is on (releasing surplus idle claims above it); returns the claims newly taken';

CREATE FUNCTION gridha.acquire_claims(instance_id uuid, serves text[])
RETURNS TABLE (service_id text, epoch bigint)
AS 'MODULE_PATHNAME', 'gridha_acquire_claims'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.acquire_claims(uuid, text[]) IS
'acquire_claims, declaring first which kinds of target the instance can serve (submit_url, submit_function, status_url, status_function): it claims only services whose target it can serve, and hands back those it can no longer serve';

-- ---------------------------------------------------------------------------
-- Batched reports
-- ---------------------------------------------------------------------------

CREATE FUNCTION gridha.report_submissions(instance_id uuid, service_ids text[], batch_ids text[],
                                          epochs bigint[], outcomes text[], details text[] DEFAULT NULL)
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, sqlstate text, message text)
AS 'MODULE_PATHNAME', 'gridha_report_submissions'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 100
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.report_submissions(uuid, text[], text[], bigint[], text[], text[]) IS
'many report_submission in one transaction, one element per batch in each array: one row per batch with its new status, or the SQLSTATE and message that refused it (a refused row does not undo the others)';

CREATE FUNCTION gridha.report_statuses(instance_id uuid, service_ids text[], batch_ids text[],
                                       epochs bigint[], dlt_statuses text[])
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, sqlstate text, message text)
AS 'MODULE_PATHNAME', 'gridha_report_statuses'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 100
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.report_statuses(uuid, text[], text[], bigint[], text[]) IS
'many report_status in one transaction: one row per batch with its new status, or the SQLSTATE and message that refused it';

-- ---------------------------------------------------------------------------
-- Workers keep many POSTs in flight: gridha.workers shows how many
-- ---------------------------------------------------------------------------

DROP VIEW gridha.workers;
DROP FUNCTION gridha.worker_slots();

CREATE FUNCTION gridha.worker_slots(
    OUT instance_id uuid,
    OUT label text,
    OUT pid integer,
    OUT state text,
    OUT state_since timestamptz,
    OUT service_id text,
    OUT batch_id text,
    OUT started_at timestamptz,
    OUT in_flight integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'gridha_worker_slots'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.worker_slots() IS
'the running worker instances as their shared-memory slots show them (empty without preload)';

CREATE VIEW gridha.workers AS
SELECT w.instance_id, w.label, w.pid, w.state, w.state_since,
       w.service_id, w.batch_id, w.started_at, w.in_flight
FROM gridha.worker_slots() w;

COMMENT ON VIEW gridha.workers IS
'one row per running background-worker instance: its instance id, pid (as in pg_stat_activity), state, a batch it is busy with, and how many POSTs it has in flight';

-- ---------------------------------------------------------------------------
-- One lease per instance: claims expire with their claimant's lease, a
-- renewal writes one row, and every instance's claim count is kept
-- ---------------------------------------------------------------------------

ALTER TABLE gridha.instances
    ADD COLUMN owner name,
    ADD COLUMN soft_expiry timestamptz,
    ADD COLUMN hard_expiry timestamptz,
    ADD COLUMN held integer NOT NULL DEFAULT 0,
    ADD COLUMN shed integer NOT NULL DEFAULT 0;

COMMENT ON COLUMN gridha.instances.owner IS
'the role that registered or first used the instance: only its members (and superusers) may act as it';

COMMENT ON COLUMN gridha.instances.soft_expiry IS
'the lease: every claim the instance holds soft-expires with it (NULL: the instance holds nothing and has stopped or been emptied)';

COMMENT ON COLUMN gridha.instances.held IS
'how many claims the instance holds, kept by every statement that moves a claim';

COMMENT ON COLUMN gridha.instances.shed IS
'claims another instance below its share asked this one to hand back; read at its next hand-out';

-- Each instance's lease is the latest expiry among the claims it holds
-- (1.0 renewed them all at once); a claim that expired before its
-- claimant's others keeps its own expiry, so nothing held is revived and
-- nothing expired comes back; the others follow the lease from now on.
UPDATE gridha.instances i
   SET held = c.held, soft_expiry = c.soft_expiry, hard_expiry = c.hard_expiry
  FROM (SELECT claimant, count(*)::int4 AS held,
               max(soft_expiry) AS soft_expiry, max(hard_expiry) AS hard_expiry
          FROM gridha.service_claims
         WHERE claimant IS NOT NULL
         GROUP BY claimant) c
 WHERE i.instance_id = c.claimant;

UPDATE gridha.service_claims c
   SET soft_expiry = CASE WHEN c.soft_expiry < i.soft_expiry THEN c.soft_expiry END,
       hard_expiry = CASE WHEN c.hard_expiry < i.hard_expiry THEN c.hard_expiry END
  FROM gridha.instances i
 WHERE i.instance_id = c.claimant
   AND (c.soft_expiry IS NOT NULL OR c.hard_expiry IS NOT NULL);

UPDATE gridha.service_claims
   SET soft_expiry = NULL, hard_expiry = NULL
 WHERE claimant IS NULL AND (soft_expiry IS NOT NULL OR hard_expiry IS NOT NULL);

CREATE INDEX instances_lease ON gridha.instances (soft_expiry) WHERE soft_expiry IS NOT NULL;

CREATE FUNCTION gridha.instances_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'gridha_instances_changed'
LANGUAGE C
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.instances_changed() IS
'trigger: a change of owner, a delete or a truncate of gridha.instances makes every backend check ownership again';

CREATE TRIGGER instances_changed
    AFTER UPDATE OF owner OR DELETE OR TRUNCATE ON gridha.instances
    FOR EACH STATEMENT EXECUTE FUNCTION gridha.instances_changed();

COMMENT ON TABLE gridha.service_claims IS
'one row per service: its claim (claimant, epoch; it expires with the claimant''s lease, or earlier at its own soft_expiry/hard_expiry when set) and its queue state (head_seq = oldest unfinished batch, tail_seq = last enqueued, ready_at = when the head became submittable, NULL while it is in flight or the queue is empty, in_flight = the head is handed out: submitting, pending or valid)';

COMMENT ON COLUMN gridha.service_claims.soft_expiry IS
'NULL: the claim expires with its claimant''s lease (gridha.instances); set, it expires at the earlier of the two (an UPDATE that moves it into the past makes the claim soft-expired); a renewal clears it';

CREATE INDEX service_claims_own_expiry ON gridha.service_claims (soft_expiry)
    WHERE soft_expiry IS NOT NULL OR hard_expiry IS NOT NULL;

-- The monitor's claims with a head in flight (pending_batches): found
-- without reading the instance's idle claims.
CREATE INDEX service_claims_in_flight ON gridha.service_claims (claimant)
    WHERE in_flight;

CREATE TABLE gridha.service_counts (
    target   text NOT NULL,
    shard    integer NOT NULL,
    services bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (target, shard)
);

COMMENT ON TABLE gridha.service_counts IS
'how many services each target has, spread over a few rows (their sum is the count); kept by the triggers on gridha.service_claims, rebuilt from it on restore';

/*
 * The band of epochs of this cluster: each timeline T gives epochs from
 * (band + T - 1) * 2^40 on. A row per cluster (system identifier), written
 * by the first takeover there; band is the highest band of the epochs found
 * then, so a database that arrived with epochs of later timelines (a
 * restored pg_dump, pg_upgrade: timeline 1 again) starts above them. Never
 * dumped: a restore is a new cluster's business.
 */
CREATE TABLE gridha.epoch_bands (
    system_identifier bigint PRIMARY KEY,
    band              bigint NOT NULL CHECK (band >= 0)
);

COMMENT ON TABLE gridha.epoch_bands IS
'the band of epochs of each cluster this database ran on (by system identifier): timeline T gives epochs from (band + T - 1) * 2^40 on; written by the first takeover on a cluster, never dumped';

REVOKE ALL ON gridha.epoch_bands FROM PUBLIC;

INSERT INTO gridha.service_counts (target, shard, services)
SELECT target, 0, count(*) FROM gridha.service_claims GROUP BY target;

CREATE FUNCTION gridha.service_claims_count()
RETURNS trigger
AS 'MODULE_PATHNAME', 'gridha_service_claims_count'
LANGUAGE C
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.service_claims_count() IS
'trigger: keeps gridha.service_counts as services are created, moved to another target and removed, written once per target at commit';

CREATE TRIGGER service_claims_counted
    AFTER INSERT OR DELETE ON gridha.service_claims
    FOR EACH ROW EXECUTE FUNCTION gridha.service_claims_count();

CREATE TRIGGER service_claims_target_counted
    AFTER UPDATE OF target ON gridha.service_claims
    FOR EACH ROW EXECUTE FUNCTION gridha.service_claims_count();

CREATE TRIGGER service_claims_truncated
    AFTER TRUNCATE ON gridha.service_claims
    FOR EACH STATEMENT EXECUTE FUNCTION gridha.service_claims_count();

-- ---------------------------------------------------------------------------
-- A restore keeps every batch as it was
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION gridha.batches_before_insert()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, gridha
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
-- Views: expiries from the leases; what producers may see
-- ---------------------------------------------------------------------------

CREATE OR REPLACE VIEW gridha.claims AS
SELECT c.service_id,
       c.target,
       c.claimant,
       c.epoch,
       e.soft_expiry,
       e.hard_expiry,
       CASE
           WHEN c.claimant IS NULL THEN 'free'
           WHEN e.soft_expiry > now() THEN 'held'
           WHEN e.hard_expiry IS NULL OR e.hard_expiry <= now() THEN 'hard_expired'
           WHEN h.submitting THEN 'slow'
           ELSE 'soft_expired'
       END AS state,
       c.head_seq,
       c.tail_seq,
       c.in_flight,
       h.submitting,
       c.ready_at
FROM gridha.service_claims c
LEFT JOIN gridha.instances i ON i.instance_id = c.claimant
CROSS JOIN LATERAL (
    SELECT least(c.soft_expiry, i.soft_expiry) AS soft_expiry,
           least(c.hard_expiry, i.hard_expiry) AS hard_expiry) e
CROSS JOIN LATERAL (
    SELECT c.in_flight AND EXISTS (
               SELECT 1 FROM gridha.batches b
                WHERE b.service_id = c.service_id AND b.seq = c.head_seq
                  AND b.status = 'submitting') AS submitting) h;

COMMENT ON VIEW gridha.claims IS
'each claim with its effective expiries (its claimant''s lease, or the claim''s own when earlier) and its state: free, held, slow (soft-expired but submitting: not taken), soft_expired (takeover possible), hard_expired (takeover regardless)';

CREATE OR REPLACE VIEW gridha.instance_health AS
SELECT i.instance_id,
       i.label,
       i.kind,
       i.last_seen_at,
       i.held::bigint AS claims,
       coalesce(x.submitting, false) AS submitting,
       CASE
           WHEN i.held = 0 AND i.stopped_at >= i.last_seen_at THEN 'stopped'
           WHEN i.last_seen_at IS NULL OR i.soft_expiry IS NULL
                OR i.hard_expiry <= now() THEN 'failed'
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
'each instance''s health by the decision tree, from its lease: within it healthy; past its soft expiry and mid-submission slow (assumed healthy); past it and idle, or past its hard expiry, failed; released everything: stopped';

CREATE VIEW gridha.queue_progress AS
SELECT c.service_id,
       c.target,
       h.batch_id AS head_batch_id,
       h.status AS head_status,
       count(b.batch_id) FILTER (WHERE b.status = 'queued') AS queued,
       count(b.batch_id) FILTER (WHERE b.status IN ('submitting', 'pending', 'valid')) AS in_flight,
       count(b.batch_id) FILTER (WHERE b.status IN ('delayed', 'unknown')) AS retrying,
       count(b.batch_id) FILTER (WHERE b.status = 'committed') AS committed,
       count(b.batch_id) FILTER (WHERE b.status = 'invalid') AS invalid,
       min(b.created_at) FILTER (WHERE b.status = 'queued') AS oldest_queued_at
FROM gridha.service_claims c
LEFT JOIN gridha.batches h ON h.service_id = c.service_id AND h.seq = c.head_seq
LEFT JOIN gridha.batches b ON b.service_id = c.service_id
GROUP BY c.service_id, h.batch_id, h.status;

COMMENT ON VIEW gridha.queue_progress IS
'each service''s queue as producers may see it: its head batch and how many batches are in each state (no claimant, no epoch, no payload)';

-- ---------------------------------------------------------------------------
-- What a logical backup keeps
-- ---------------------------------------------------------------------------

CREATE FUNCTION gridha.targets_before_insert()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, gridha
AS $$
BEGIN
    IF NEW.target = 'default' THEN
        DELETE FROM gridha.targets t
         WHERE t.target = 'default'
           AND t.submit_url IS NULL AND t.status_url IS NULL
           AND t.submit_function IS NULL AND t.status_function IS NULL
           AND t.rate_interval IS NULL AND t.rate_burst = 1
           AND t.reject_codes = '{400,422}' AND t.request_headers IS NULL
           AND NOT EXISTS (SELECT 1 FROM gridha.service_claims c WHERE c.target = 'default');
    END IF;
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION gridha.targets_before_insert() IS
'trigger: an INSERT of a row named default replaces the untouched default row CREATE EXTENSION made (what a restore does)';

CREATE TRIGGER targets_restore_default
    BEFORE INSERT ON gridha.targets
    FOR EACH ROW EXECUTE FUNCTION gridha.targets_before_insert();

SELECT pg_catalog.pg_extension_config_dump('gridha.targets', '');
SELECT pg_catalog.pg_extension_config_dump('gridha.instances', '');
SELECT pg_catalog.pg_extension_config_dump('gridha.service_claims', '');
SELECT pg_catalog.pg_extension_config_dump('gridha.batches', '');
SELECT pg_catalog.pg_extension_config_dump('gridha.leases', '');
SELECT pg_catalog.pg_extension_config_dump('gridha.maintenance_ticks', '');
SELECT pg_catalog.pg_extension_config_dump('gridha.id_sequences', '');
SELECT pg_catalog.pg_extension_config_dump('gridha.id_windows', '');
SELECT pg_catalog.pg_extension_config_dump('gridha.target_rate_state', '');
SELECT pg_catalog.pg_extension_config_dump('gridha.id_sequence_serial', '');

-- ---------------------------------------------------------------------------
-- Privileges: the roles of 1.1. gridha_client, which had everything
-- directly in 1.0, now has it as a member of gridha_producer and
-- gridha_submitter.
-- ---------------------------------------------------------------------------

REVOKE ALL ON FUNCTION
    gridha.register_instance(text, text[]),
    gridha.acquire_claims(uuid, text[]),
    gridha.report_submissions(uuid, text[], text[], bigint[], text[], text[]),
    gridha.report_statuses(uuid, text[], text[], bigint[], text[]),
    gridha.worker_slots(),
    gridha.instances_changed(),
    gridha.service_claims_count(),
    gridha.targets_before_insert()
FROM PUBLIC;

REVOKE ALL ON ALL TABLES IN SCHEMA gridha FROM gridha_client;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA gridha FROM gridha_client;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA gridha FROM gridha_client;
REVOKE ALL ON SCHEMA gridha FROM gridha_client;

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['gridha_producer', 'gridha_submitter', 'gridha_admin', 'gridha_client'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$$;

GRANT gridha_producer, gridha_submitter TO gridha_client;

GRANT USAGE ON SCHEMA gridha TO gridha_producer, gridha_submitter, gridha_admin;

GRANT EXECUTE ON FUNCTION
    gridha.enqueue(text, text, bytea, text),
    gridha.expiry_settings()
TO gridha_producer;
GRANT INSERT (service_id, batch_id, payload) ON gridha.batches TO gridha_producer;
GRANT SELECT ON gridha.queue_progress TO gridha_producer;

GRANT EXECUTE ON FUNCTION
    gridha.register_instance(text),
    gridha.register_instance(text, text[]),
    gridha.renew_claims(uuid),
    gridha.acquire_claims(uuid),
    gridha.acquire_claims(uuid, text[]),
    gridha.claimed_batches(uuid, integer),
    gridha.next_batch(uuid),
    gridha.next_batches(uuid, integer),
    gridha.verify_batch(uuid, text, text, bigint),
    gridha.report_submission(uuid, text, text, bigint, text, text),
    gridha.report_submissions(uuid, text[], text[], bigint[], text[], text[]),
    gridha.pending_batches(uuid, integer),
    gridha.report_status(uuid, text, text, bigint, text),
    gridha.report_statuses(uuid, text[], text[], bigint[], text[]),
    gridha.release_claims(uuid),
    gridha.expiry_settings(),
    gridha.worker_slots()
TO gridha_submitter;
GRANT SELECT ON gridha.claims, gridha.instance_health, gridha.service_queues,
    gridha.queue_progress, gridha.workers
TO gridha_submitter;
GRANT SELECT ON gridha.targets TO gridha_submitter;
GRANT SELECT (service_id, target) ON gridha.service_claims TO gridha_submitter;

GRANT SELECT, INSERT, UPDATE, DELETE ON gridha.targets TO gridha_admin;
GRANT EXECUTE ON FUNCTION
    gridha.start_worker(text),
    gridha.stop_worker(uuid),
    gridha.worker_slots()
TO gridha_admin;
GRANT SELECT ON gridha.claims, gridha.instance_health, gridha.service_queues,
    gridha.queue_progress, gridha.workers
TO gridha_admin;

GRANT EXECUTE ON FUNCTION
    gridha.try_lead(uuid, text),
    gridha.renew_lead(uuid, text, bigint),
    gridha.resign(uuid, text),
    gridha.run_maintenance(uuid, text)
TO gridha_submitter;
GRANT EXECUTE ON FUNCTION
    gridha.reserve_ids(text, integer),
    gridha.next_id(text)
TO gridha_producer, gridha_submitter;
GRANT EXECUTE ON FUNCTION
    gridha.create_id_sequence(text, bigint, integer),
    gridha.drop_id_sequence(text)
TO gridha_admin;
GRANT SELECT ON gridha.leaders, gridha.id_sequence_status, gridha.target_rates
TO gridha_submitter, gridha_admin;
GRANT SELECT ON gridha.id_sequence_status TO gridha_producer;
