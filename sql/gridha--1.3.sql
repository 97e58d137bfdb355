/*
 * gridha 1.3: highly available, strictly ordered batch submission.
 *
 * Words used here:
 *   instance  one submitter (an external client or a background worker),
 *             known by a uuid for its whole life
 *   service   a service_id; every batch belongs to one, and a service's
 *             batches leave strictly in enqueue order, one at a time
 *   claim     the row of gridha.service_claims for a service: who holds it
 *             and its epoch (the fencing token)
 *   lease     an instance's two expiries (gridha.instances.soft_expiry,
 *             hard_expiry): every claim an instance holds expires with its
 *             lease, so a renewal writes one row however many claims it
 *             holds. A claim's own soft_expiry/hard_expiry, NULL normally,
 *             can only make that claim expire earlier
 *   head      the service's oldest batch that is not final yet; only the
 *             head can be handed out or be in flight
 *
 * The per-service bookkeeping columns of service_claims (head_seq, tail_seq,
 * ready_at, in_flight) are what keep every hand-out an index lookup,
 * whatever the number of services or queued batches. Whether the head is
 * submitting is read from the head batch itself: an accepted submission
 * writes the batch row only.
 */

\echo Use "CREATE EXTENSION gridha" to load this file. \quit

-- ---------------------------------------------------------------------------
-- The schema must be the installing role's own
-- ---------------------------------------------------------------------------
--
-- gridha.control names schema gridha, and CREATE EXTENSION installs into a
-- schema of that name when one exists already. Its owner (or a role it
-- granted CREATE) could then plant an operator, function or type there that
-- gridha's SECURITY DEFINER functions would resolve and run with the
-- extension owner's rights. So the install refuses a schema it did not just
-- create: one owned by another role that is not a superuser, or one that
-- grants CREATE to a role that is neither the installer nor a superuser.
-- Every name below is qualified, so nothing planted can answer for it.

DO $schema$
DECLARE
    owner_name name;
    acl        aclitem[];
BEGIN
    SELECT r.rolname, n.nspacl INTO owner_name, acl
      FROM pg_catalog.pg_namespace n
      JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
     WHERE n.nspname OPERATOR(pg_catalog.=) 'gridha';
    -- A superuser's schema is as safe as the installer's own: a superuser
    -- can do anything a planted object could. A restore made by another
    -- superuser than the dump's owner creates the schema, gives it to the
    -- dump's owner, then creates the extension (issue 39).
    IF owner_name OPERATOR(pg_catalog.<>) CURRENT_USER
       AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r
                 WHERE r.rolname OPERATOR(pg_catalog.=) owner_name) THEN
        RAISE EXCEPTION 'schema gridha belongs to role "%", not to "%"', owner_name, CURRENT_USER
            USING ERRCODE = '42501',
                  DETAIL = 'gridha installs only into a schema of its own: objects another role placed there would run with the extension''s rights.',
                  HINT = 'Drop the schema gridha (after checking what it holds), or make the installing role its owner and revoke CREATE on it from everyone else.';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.aclexplode(acl) a
                WHERE a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
                  AND a.grantee OPERATOR(pg_catalog.<>) (SELECT r.oid FROM pg_catalog.pg_roles r
                                                          WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER)
                  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                                   WHERE r.oid OPERATOR(pg_catalog.=) a.grantee AND r.rolsuper)) THEN
        RAISE EXCEPTION 'schema gridha grants CREATE to roles other than its owner'
            USING ERRCODE = '42501',
                  DETAIL = 'Objects another role placed there would run with the extension''s rights.',
                  HINT = 'REVOKE CREATE ON SCHEMA gridha FROM PUBLIC and from every role but its owner, then try again.';
    END IF;
END
$schema$;

-- Trigger functions, the functions behind the worker views and the
-- worker's own functions are not part of the API: they live in
-- gridha_internal, created with the extension. No role has USAGE on it
-- but gridha_submitter, whose members include every worker's role: a
-- worker registers (worker_register) and finds its orphans
-- (worker_orphans) by name (the privileges section).
CREATE SCHEMA gridha_internal;

COMMENT ON SCHEMA gridha_internal IS
'gridha''s internal functions (triggers, the worker views'' slot readers, the worker''s registration): not an API, they may change in any release';

-- The two final statuses come last: the guard triggers on gridha.batches
-- test "status >= 'committed'". A new status goes before 'committed'.
CREATE TYPE gridha.batch_status AS ENUM (
    'queued',
    'submitting',
    'pending',
    'valid',
    'delayed',
    'unknown',
    'committed',
    'invalid'
);

COMMENT ON TYPE gridha.batch_status IS
'lifecycle of a batch: queued -> submitting -> pending -> (valid ->) committed | invalid; delayed and unknown send it back for resubmission';

-- issue 40 (1.3): the states, kinds and outcomes gridha reports are typed:
-- domains over text, each with its words (a client reads them as text).
CREATE DOMAIN gridha.instance_kind AS text
    CHECK (VALUE IN ('external', 'worker'));

COMMENT ON DOMAIN gridha.instance_kind IS
'how an instance runs: external (a client that registered or called the API) or worker (a background worker inside the server)';

CREATE DOMAIN gridha.claim_state AS text
    CHECK (VALUE IN ('free', 'held', 'slow', 'soft_expired', 'hard_expired'));

COMMENT ON DOMAIN gridha.claim_state IS
'a claim''s state in gridha.claims: free, held, slow (soft-expired but submitting: not taken), soft_expired (takeover possible), hard_expired (takeover regardless)';

CREATE DOMAIN gridha.health_state AS text
    CHECK (VALUE IN ('new', 'healthy', 'slow', 'failed', 'stopped'));

COMMENT ON DOMAIN gridha.health_state IS
'an instance''s health in gridha.instance_health: new, healthy, slow, failed or stopped';

CREATE DOMAIN gridha.lease_state AS text
    CHECK (VALUE IN ('vacant', 'held', 'expired'));

COMMENT ON DOMAIN gridha.lease_state IS
'a duty''s lease in gridha.leaders: vacant (no leader), held (unexpired) or expired';

CREATE DOMAIN gridha.worker_state AS text
    CHECK (VALUE IN ('starting', 'waiting for database', 'idle', 'handing out', 'submitting',
                     'reporting', 'monitoring', 'backing off', 'stopping', 'waiting for its role'));

COMMENT ON DOMAIN gridha.worker_state IS
'what a background worker does now, in gridha.workers';

CREATE DOMAIN gridha.maintenance_outcome AS text
    CHECK (VALUE IN ('ran', 'not_leader', 'already_run', 'clock_behind', 'lost_lease'));

COMMENT ON DOMAIN gridha.maintenance_outcome IS
'what gridha.run_maintenance came to: ran, not_leader, already_run, clock_behind or lost_lease';

CREATE TABLE gridha.targets (
    target          text PRIMARY KEY CHECK (target <> ''),
    submit_url      text,
    status_url      text,
    submit_function text,
    status_function text,
    rate_interval   interval CHECK (rate_interval > interval '0'),
    rate_burst      integer NOT NULL DEFAULT 1 CHECK (rate_burst >= 0),
    -- the span a burst covers must stay in timestamp range (hand-out math)
    CONSTRAINT targets_rate_span CHECK (
        CASE WHEN rate_interval > interval '1000 years' OR rate_burst > 1000000 THEN false
             ELSE rate_interval * rate_burst <= interval '1000 years' END),
    -- 1.1: the HTTP answers that end a batch, and the target's own headers
    reject_codes    integer[] NOT NULL DEFAULT '{400,422}',
    request_headers jsonb
);

COMMENT ON TABLE gridha.targets IS
'where a service''s batches go: an HTTP endpoint or a SQL function, with an optional rate limit';

COMMENT ON COLUMN gridha.targets.submit_function IS
'instead of submit_url, the function that submits a batch: written as any name that resolves (f(text,text,bytea,bigint)), stored as its schema-qualified signature (never an OID: it survives pg_upgrade and a restore), resolved by each backend when it loads the targets';

COMMENT ON COLUMN gridha.targets.status_function IS
'instead of status_url, the function that gives the ledger''s statuses: written as any name that resolves (f(text[])), stored as its schema-qualified signature';

COMMENT ON COLUMN gridha.targets.reject_codes IS
'HTTP codes with which the ledger refuses a batch for good (it ends invalid); every other non-2xx answer delays it';

COMMENT ON COLUMN gridha.targets.request_headers IS
'headers sent with every POST and GET to the target, as a JSON object of strings (credentials: never logged, never readable by producers)';

INSERT INTO gridha.targets (target) VALUES ('default');

CREATE TABLE gridha.instances (
    instance_id   uuid PRIMARY KEY,
    label         text,
    kind          gridha.instance_kind NOT NULL DEFAULT 'external',
    registered_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz,
    stopped_at    timestamptz,
    session_key   bigint,
    -- 1.1
    serves        text[],
    owner         name,
    soft_expiry   timestamptz,
    hard_expiry   timestamptz,
    held          integer NOT NULL DEFAULT 0,
    -- 1.2: shed (requests to hand back idle claims) is gone: idle claims
    -- stay where they are
    -- 1.3
    owner_cluster bigint
);

COMMENT ON TABLE gridha.instances IS
'every instance ever seen; last_seen_at is its last claim cycle (renewal), stopped_at its last release of all claims, session_key the key of the liveness lock its session holds (gridha.session_liveness; given once per instance from gridha.session_keys)';

COMMENT ON COLUMN gridha.instances.serves IS
'the kinds of target the instance can serve (submit_url, submit_function, status_url, status_function); NULL: it declared nothing and serves every service';

COMMENT ON COLUMN gridha.instances.owner IS
'the role that registered or first used the instance: only its members (and superusers) may act as it';

COMMENT ON COLUMN gridha.instances.soft_expiry IS
'the lease: every claim the instance holds soft-expires with it (NULL: the instance holds nothing and has stopped or been emptied)';

COMMENT ON COLUMN gridha.instances.held IS
'how many claims the instance holds, kept by every statement that moves a claim';

COMMENT ON COLUMN gridha.instances.owner_cluster IS
'the system identifier of the cluster on which the owner was set (registration, first use, set_instance_owner): on another cluster, unless this database ran there before (gridha.epoch_bands), the owner is not confirmed and only superusers may act as the instance';

-- Live leases and the expired ones still holding claims, in lease order;
-- an instance that holds nothing any more has no lease and is not here.
CREATE INDEX instances_lease ON gridha.instances (soft_expiry) WHERE soft_expiry IS NOT NULL;

/*
 * instances_changed: who may act as an instance is remembered by each
 * backend; a change of owner, a delete or a truncate makes every backend
 * ask again.
 */
CREATE FUNCTION gridha_internal.instances_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'gridha_instances_changed'
LANGUAGE C
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.instances_changed() IS
'trigger: a change of owner, a delete or a truncate of gridha.instances makes every backend check ownership again';

CREATE TRIGGER instances_changed
    AFTER UPDATE OF owner OR DELETE OR TRUNCATE ON gridha.instances
    FOR EACH STATEMENT EXECUTE FUNCTION gridha_internal.instances_changed();

/*
 * instances_guard_claims: a claim is held only by an instance whose row
 * exists. Its lease is what the claim expires with, and the takeovers of
 * expired claims start from expired leases: a claim whose holder's row was
 * deleted would never be taken again. So an instance that holds claims
 * cannot be deleted, and gridha.instances cannot be truncated while any
 * claim is held (the sweep of long-unseen instances deletes only instances
 * that hold nothing; a call whose instance row is deleted while it takes
 * claims fails, its takes undone: src/claims.c).
 */
CREATE FUNCTION gridha_internal.instances_guard_claims()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF EXISTS (SELECT 1 FROM gridha.service_claims c WHERE c.claimant = OLD.instance_id) THEN
            RAISE EXCEPTION 'instance % holds claims and cannot be deleted', OLD.instance_id
                USING ERRCODE = 'RG021',
                      DETAIL = 'A claim expires with its holder''s lease: the claims of a deleted instance would never be taken over.',
                      HINT = 'Release them first (gridha.release_claims), or move them: UPDATE gridha.service_claims SET claimant = NULL WHERE claimant = ''' || OLD.instance_id || '''.';
        END IF;
    ELSIF EXISTS (SELECT 1 FROM gridha.service_claims c WHERE c.claimant IS NOT NULL) THEN
        RAISE EXCEPTION 'gridha.instances cannot be truncated while claims are held'
            USING ERRCODE = 'RG021',
                  DETAIL = 'A claim expires with its holder''s lease: the claims of a deleted instance would never be taken over.',
                  HINT = 'Truncate gridha.service_claims in the same statement, or free the claims first.';
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION gridha_internal.instances_guard_claims() IS
'trigger: refuses to delete an instance that holds claims, or to truncate gridha.instances while any claim is held';

REVOKE ALL ON FUNCTION gridha_internal.instances_guard_claims() FROM PUBLIC;

CREATE TRIGGER instances_guard_claims
    AFTER DELETE ON gridha.instances
    FOR EACH ROW EXECUTE FUNCTION gridha_internal.instances_guard_claims();

CREATE TRIGGER instances_guard_truncate
    AFTER TRUNCATE ON gridha.instances
    FOR EACH STATEMENT EXECUTE FUNCTION gridha_internal.instances_guard_claims();

/*
 * instances_owner_stamp: an owner set here (a registration, a first use,
 * set_instance_owner) is set on this cluster. A row that arrives with the
 * cluster it was owned on (a restore) keeps it.
 */
CREATE FUNCTION gridha_internal.instances_owner_stamp()
RETURNS trigger
AS 'MODULE_PATHNAME', 'gridha_instances_owner_stamp'
LANGUAGE C
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.instances_owner_stamp() IS
'trigger: an owner written on this cluster (INSERT without owner_cluster, UPDATE OF owner) gets this cluster''s system identifier in owner_cluster';

CREATE TRIGGER instances_owner_stamp
    BEFORE INSERT OR UPDATE OF owner ON gridha.instances
    FOR EACH ROW EXECUTE FUNCTION gridha_internal.instances_owner_stamp();

/*
 * instances_restored: a statement that brings instances owned on another
 * cluster (a restore's COPY) says, once, whose owners are missing here or
 * only share a name with a role here, and how an administrator confirms
 * them. Until then only superusers act as those instances.
 */
CREATE FUNCTION gridha_internal.instances_restored()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    here      bigint := (SELECT s.system_identifier FROM pg_catalog.pg_control_system() s);
    missing   text;
    ambiguous text;
    fix       text;
    n         bigint;
BEGIN
    WITH unconfirmed AS (
        SELECT r.owner, count(*) AS instances,
               EXISTS (SELECT 1 FROM pg_catalog.pg_roles p WHERE p.rolname = r.owner) AS exists_here
          FROM restored r
         WHERE r.owner IS NOT NULL
           AND r.owner_cluster IS DISTINCT FROM here
           AND NOT EXISTS (SELECT 1 FROM gridha.epoch_bands e
                            WHERE e.system_identifier = r.owner_cluster)
         GROUP BY r.owner)
    SELECT sum(u.instances),
           string_agg(format('%I (%s)', u.owner, u.instances), ', ' ORDER BY u.owner)
               FILTER (WHERE NOT u.exists_here),
           string_agg(format('%I (%s)', u.owner, u.instances), ', ' ORDER BY u.owner)
               FILTER (WHERE u.exists_here),
           string_agg(format('SELECT gridha.set_instance_owner(instance_id, %L) FROM gridha.instances WHERE owner = %L;',
                             quote_ident(u.owner), u.owner), ' ' ORDER BY u.owner)
      INTO n, missing, ambiguous, fix
      FROM unconfirmed u;
    IF n > 0 THEN
        RAISE WARNING 'the owners of % restored gridha instances are not confirmed on this cluster', n
            USING DETAIL = format('Owner roles missing here (instances): %s. Owner roles that exist here, but may be other roles of the same name (instances): %s. Until an administrator confirms an owner, only superusers may act as its instances.',
                                  coalesce(missing, 'none'), coalesce(ambiguous, 'none')),
                  HINT = format('Create each missing role, check that each role is the one that owned the instances, then: %s', fix);
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION gridha_internal.instances_restored() IS
'trigger: a statement that brings instances owned on another cluster (a restore) warns once which owners are missing or ambiguous here, with the set_instance_owner commands that confirm them';

CREATE TRIGGER instances_restored
    AFTER INSERT ON gridha.instances
    REFERENCING NEW TABLE AS restored
    FOR EACH STATEMENT EXECUTE FUNCTION gridha_internal.instances_restored();

REVOKE ALL ON FUNCTION gridha_internal.instances_owner_stamp(), gridha_internal.instances_restored() FROM PUBLIC;

CREATE TABLE gridha.service_claims (
    service_id  text PRIMARY KEY,
    target      text NOT NULL DEFAULT 'default'
                REFERENCES gridha.targets ON UPDATE CASCADE,
    claimant    uuid,
    epoch       bigint NOT NULL DEFAULT 0,
    soft_expiry timestamptz,
    hard_expiry timestamptz,
    head_seq    bigint,
    tail_seq    bigint NOT NULL DEFAULT 0,
    ready_at    timestamptz,
    in_flight   boolean NOT NULL DEFAULT false,
    -- running totals (see their comments below)
    committed_total bigint NOT NULL DEFAULT 0,
    invalid_total bigint NOT NULL DEFAULT 0,
    resubmitted_total bigint NOT NULL DEFAULT 0,
    -- the part of them already in gridha.target_totals (settled_*)
    settled_seq         bigint NOT NULL DEFAULT 0,
    settled_committed   bigint NOT NULL DEFAULT 0,
    settled_invalid     bigint NOT NULL DEFAULT 0,
    settled_resubmitted bigint NOT NULL DEFAULT 0
)
-- Every hand-out and report rewrites the row: room on its page keeps the
-- new version there (fewer pages touched, and HOT when no key changes).
--
-- No CHECK constraints: PostgreSQL reads each CHECK back from its stored
-- text for every UPDATE statement on the table, which cost about a tenth of
-- a hand-out/report cycle here. Rows are only written by gridha: a service
-- is created by an enqueue (gridha.enqueue or the batches_before_insert
-- trigger), and both refuse empty ids.
WITH (fillfactor = 50);

COMMENT ON TABLE gridha.service_claims IS
'one row per service: its claim (claimant, epoch; it expires with the claimant''s lease, or earlier at its own soft_expiry/hard_expiry when set) and its queue state (head_seq = oldest unfinished batch, tail_seq = last enqueued, ready_at = when the head became submittable, NULL while it is in flight or the queue is empty, in_flight = the head is handed out: submitting, pending or valid)';

COMMENT ON COLUMN gridha.service_claims.soft_expiry IS
'NULL: the claim expires with its claimant''s lease (gridha.instances); set, it expires at the earlier of the two (an UPDATE that moves it into the past makes the claim soft-expired); a renewal clears it';

-- Hand-out: a claimant's services ordered by how long their head has waited.
-- Renewal, release and counting use the claimant prefix, and the free
-- services are found under claimant IS NULL.
--
-- Takeovers find the claims of an expired or gone instance through the
-- claimant prefix too: they cost what moves, never a scan of every claim.
--
-- No deduplication (1.3): every hand-out leaves its claim's old entry dead,
-- and a scan marks a dead entry so that the next one skips it; but in a
-- posting list (claims that became ready at the same time: an enqueue of
-- many services in one transaction) an entry is marked only once all of
-- its list is dead, so every hand-out visited the dead claims before it
-- again.
CREATE INDEX service_claims_claimant_ready ON gridha.service_claims (claimant, ready_at)
    WITH (deduplicate_items = off);

-- The few claims whose own expiry was set (normally none): found without
-- reading the others.
CREATE INDEX service_claims_own_expiry ON gridha.service_claims (soft_expiry)
    WHERE soft_expiry IS NOT NULL OR hard_expiry IS NOT NULL;

-- The monitor's claims with a head in flight (pending_batches): found
-- without reading the instance's idle claims.
CREATE INDEX service_claims_in_flight ON gridha.service_claims (claimant)
    WHERE in_flight;

/*
 * Services per target, kept by triggers on service_claims so that a fair
 * share is computed without counting claims. A service is counted in one
 * of several rows of its target (shard), so that producers creating
 * services at once do not wait on one row; the count is their sum.
 */
CREATE TABLE gridha.service_counts (
    target   text NOT NULL,
    shard    integer NOT NULL,
    services bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (target, shard)
);

COMMENT ON TABLE gridha.service_counts IS
'how many services each target has, spread over a few rows (their sum is the count); kept by the triggers on gridha.service_claims, rebuilt from it on restore';

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
    PRIMARY KEY (target, slot),
    -- 1.3: heads that had no unfinished batch row, moved on at a hand-out
    heads_repaired       bigint NOT NULL DEFAULT 0,
    -- status answers of the ledger that left out a batch asked about (1.3)
    status_omitted       bigint NOT NULL DEFAULT 0
);

COMMENT ON TABLE gridha.target_totals IS
'running totals per target spread over one row per backend slot (their sum is the total): claims taken over from another instance, writes refused as stale, the settled_* part of the services'' counters (what each counted until its queue last ran dry), and status answers that left out a batch asked about; read through gridha.metrics';

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

CREATE FUNCTION gridha_internal.service_claims_count()
RETURNS trigger
AS 'MODULE_PATHNAME', 'gridha_service_claims_count'
LANGUAGE C
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.service_claims_count() IS
'trigger: keeps gridha.service_counts as services are created, moved to another target and removed, written once per target at commit';

CREATE TRIGGER service_claims_counted
    AFTER INSERT OR DELETE ON gridha.service_claims
    FOR EACH ROW EXECUTE FUNCTION gridha_internal.service_claims_count();

-- No WHEN clause: the hand-out's and the reports' row writes never change
-- the target, so the column list alone keeps this trigger off their path.
CREATE TRIGGER service_claims_target_counted
    AFTER UPDATE OF target ON gridha.service_claims
    FOR EACH ROW EXECUTE FUNCTION gridha_internal.service_claims_count();

-- The C helper of the truncate trigger: the counts this transaction
-- changed and has not written yet are not written (unless the truncate's
-- subtransaction rolls back), as they count services that are gone.
CREATE FUNCTION gridha_internal.counts_truncated()
RETURNS void
AS 'MODULE_PATHNAME', 'gridha_counts_truncated'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.counts_truncated() IS
'for the truncate trigger of gridha.service_claims: the service counts this transaction changed and has not written yet are not written';

-- A TRUNCATE of gridha.service_claims leaves no service: every count row
-- goes, and every instance holds nothing.
CREATE FUNCTION gridha_internal.service_claims_truncated()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    PERFORM gridha_internal.counts_truncated();
    DELETE FROM gridha.service_counts;
    UPDATE gridha.instances i SET held = 0 WHERE i.held <> 0;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION gridha_internal.service_claims_truncated() IS
'trigger: after a truncate of gridha.service_claims, empties gridha.service_counts and every instance''s held count';

REVOKE ALL ON FUNCTION gridha_internal.counts_truncated(), gridha_internal.service_claims_truncated()
FROM PUBLIC;

CREATE TRIGGER service_claims_truncated
    AFTER TRUNCATE ON gridha.service_claims
    FOR EACH STATEMENT EXECUTE FUNCTION gridha_internal.service_claims_truncated();

CREATE TABLE gridha.batches (
    service_id    text NOT NULL,
    batch_id      text NOT NULL,
    seq           bigint NOT NULL,
    payload       bytea,
    status        gridha.batch_status NOT NULL DEFAULT 'queued',
    created_at    timestamptz NOT NULL DEFAULT now(),
    epoch         bigint,
    attempts      integer NOT NULL DEFAULT 0,
    not_before    timestamptz,
    instance_id   uuid,
    handed_out_at timestamptz,
    submitted_at  timestamptz,
    finished_at   timestamptz,
    detail        text,
    PRIMARY KEY (service_id, batch_id),
    UNIQUE (service_id, seq)
)
-- A batch is rewritten three times (hand-out, submission, final status) and
-- none of those changes a key: free room on its page makes them HOT updates.
WITH (fillfactor = 80);

COMMENT ON TABLE gridha.batches IS
'every batch; seq is its position in its service''s enqueue order, epoch and instance_id belong to its latest hand-out (instance_id NULL: a takeover revoked that hand-out while it was submitting)';

/*
 * batches_before_insert: gives a new batch its place in its service's queue
 * (a restored batch keeps the place it had).
 *
 * The service row is locked before the batch's seq is taken from it, so
 * per service the seq order is the commit order of the enqueues: a batch
 * can never become visible behind a head that has already moved past it.
 */
CREATE FUNCTION gridha_internal.batches_before_insert()
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

    -- A seq is reserved only for a row that is really inserted. The
    -- service's row is locked first (created when the service is new), so
    -- that an insert of the same batch id by another transaction has
    -- committed or rolled back; then, when the batch exists, this row
    -- takes the existing batch's seq and the service's tail stays where it
    -- was: the insert conflicts with that batch (an ON CONFLICT clause
    -- skips or updates it, a plain INSERT fails with 23505). The existing
    -- batch is locked FOR KEY SHARE, so that retention cannot delete it
    -- before the insert meets it. (Whatever else skips the row, a user's
    -- BEFORE trigger that fires after this one and returns NULL, leaves a
    -- hole, which the hand-out repairs and counts: src/queue.c.)
    --
    -- The INSERT comes first, also for a service that exists: it holds
    -- gridha.service_claims in ROW EXCLUSIVE mode before any of its rows is
    -- locked, as every writer of the table does (a rename of targets takes
    -- the table in SHARE ROW EXCLUSIVE mode first: docs/concurrency.md).
    LOOP
        INSERT INTO gridha.service_claims AS c (service_id, head_seq, tail_seq, ready_at)
        VALUES (NEW.service_id, 1, 1, now())
        ON CONFLICT (service_id) DO NOTHING
        RETURNING c.tail_seq INTO NEW.seq;
        -- a new service: no batch of it can exist
        EXIT WHEN FOUND;
        PERFORM FROM gridha.service_claims c
         WHERE c.service_id = NEW.service_id
           FOR NO KEY UPDATE;
        EXIT WHEN FOUND;
        -- deleted meanwhile (a service with no batches): create it, as above
    END LOOP;

    IF NEW.seq IS NULL THEN
        SELECT b.seq INTO NEW.seq FROM gridha.batches b
         WHERE b.service_id = NEW.service_id AND b.batch_id = NEW.batch_id
           FOR KEY SHARE;
        IF FOUND THEN
            RETURN NEW;
        END IF;
        UPDATE gridha.service_claims AS c
           SET tail_seq = c.tail_seq + 1,
               head_seq = coalesce(c.head_seq, c.tail_seq + 1),
               ready_at = CASE WHEN c.head_seq IS NULL THEN now() ELSE c.ready_at END
         WHERE c.service_id = NEW.service_id
        RETURNING c.tail_seq INTO NEW.seq;
    END IF;

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

COMMENT ON FUNCTION gridha_internal.batches_before_insert() IS
'trigger: places a new batch at the tail of its service''s queue, creating the service when it is new';

CREATE TRIGGER batches_enqueue
    BEFORE INSERT ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION gridha_internal.batches_before_insert();

/*
 * batches_guard_final: committed and invalid are final, whoever writes.
 *
 * Both guards are AFTER row triggers: the error still undoes the statement.
 * A BEFORE UPDATE or DELETE row trigger would lock every row before the
 * write, one more WAL record per hand-out and report.
 *
 * The UPDATE guard runs on every hand-out and report, so it is in C and has
 * no WHEN clause (PostgreSQL reads a WHEN back from its stored text for
 * every UPDATE statement on the table) and no SET search_path (applying a
 * setting costs each call more than the test itself). It runs no SQL and
 * resolves no name, so no search_path can change what it does; it is the
 * one function of the schema without the pinned path, and pgTAP checks both
 * facts. The DELETE guard is off the hot path and keeps its WHEN.
 */
CREATE FUNCTION gridha_internal.batches_guard_final()
RETURNS trigger
AS 'MODULE_PATHNAME', 'gridha_batches_guard_final'
LANGUAGE C;

COMMENT ON FUNCTION gridha_internal.batches_guard_final() IS
'trigger: refuses any change to a batch whose status is final';

CREATE TRIGGER batches_final
    AFTER UPDATE OF status, service_id, batch_id, seq ON gridha.batches
    FOR EACH ROW
    EXECUTE FUNCTION gridha_internal.batches_guard_final();

/*
 * batches_guard_delete: only a finished batch may be deleted. A queued or
 * in-flight batch is part of its service's gap-free sequence: the next head
 * after a final batch is always seq + 1.
 */
CREATE FUNCTION gridha_internal.batches_guard_delete()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'batch "%" of service "%" is % and cannot be deleted', OLD.batch_id, OLD.service_id, OLD.status
        USING ERRCODE = 'RG002',
              DETAIL = 'Only committed and invalid batches may be deleted.';
END
$$;

COMMENT ON FUNCTION gridha_internal.batches_guard_delete() IS
'trigger: refuses to delete a batch that is not final';

CREATE TRIGGER batches_unfinished
    AFTER DELETE ON gridha.batches
    FOR EACH ROW
    WHEN (OLD.status < 'committed')
    EXECUTE FUNCTION gridha_internal.batches_guard_delete();

-- Settings as the server sees them now, as intervals; used by the views.
CREATE FUNCTION gridha.expiry_settings(
    OUT soft_expiry interval,
    OUT hard_expiry interval,
    OUT renew_interval interval)
RETURNS record
AS 'MODULE_PATHNAME', 'gridha_expiry_settings'
LANGUAGE C STABLE PARALLEL SAFE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.expiry_settings() IS
'the effective claim timings (gridha.soft_expiry, gridha.hard_expiry, gridha.renew_interval) as intervals';

/*
 * Instance rows (issue 42.1: these statements were C string literals in
 * src/instances.c). They run off the claim cycle: when an instance is used
 * for the first time, when its session is given a liveness key or has it
 * cleared, when a worker's instance from 1.0 is adopted, when a restored
 * owner's cluster is looked up, when an instance declares what it serves.
 * The library calls them; what needs C stays there: who may act as an
 * instance (and the backend's cache of that verdict), the session's
 * liveness lock, the checks of a call. Executable by the extension's owner
 * only: the calls that run them run as it.
 */
CREATE FUNCTION gridha_internal.instance_insert(instance_id uuid, owner name,
    OUT inserted boolean, OUT present boolean, OUT present_owner name)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO gridha.instances AS i (instance_id, owner)
    VALUES (instance_insert.instance_id, instance_insert.owner)
    ON CONFLICT (instance_id) DO NOTHING;
    inserted := FOUND;
    present := FOUND;
    IF inserted THEN
        present_owner := instance_insert.owner;
        RETURN;
    END IF;
    -- another session registered it meanwhile: this statement sees it
    SELECT true, i.owner INTO present, present_owner
      FROM gridha.instances i
     WHERE i.instance_id = instance_insert.instance_id;
    present := coalesce(present, false);
END
$$;

COMMENT ON FUNCTION gridha_internal.instance_insert(uuid, name) IS
'registers an unknown instance on first use (kind external, owned by the role given); when another session registered it meanwhile, whether its row is there and its owner, for the caller to check';

CREATE FUNCTION gridha_internal.instance_key(instance_id uuid, fresh boolean)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    new_key bigint;
BEGIN
    IF NOT instance_key.fresh THEN
        UPDATE gridha.instances i SET session_key = NULL
         WHERE i.instance_id = instance_key.instance_id;
        RETURN NULL;
    END IF;
    -- never waits for another session writing the row (it does not bind)
    UPDATE gridha.instances i
       SET session_key = pg_catalog.nextval('gridha.session_keys'::pg_catalog.regclass)
     WHERE i.instance_id = instance_key.instance_id
       AND i.instance_id IN (SELECT x.instance_id FROM gridha.instances x
                              WHERE x.instance_id = instance_key.instance_id AND x.session_key IS NULL
                                FOR UPDATE SKIP LOCKED)
    RETURNING i.session_key INTO new_key;
    RETURN new_key;
END
$$;

COMMENT ON FUNCTION gridha_internal.instance_key(uuid, boolean) IS
'fresh: gives an instance without a session key the next of gridha.session_keys and returns it (NULL: it has one, or another session is writing its row); else clears its key (an instance judged by its expiry alone)';

CREATE FUNCTION gridha_internal.instance_adopt(instance_id uuid, owner name)
RETURNS boolean
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
WITH a AS (
    UPDATE gridha.instances i SET owner = $2
     WHERE i.instance_id = $1 AND i.owner IS NULL AND i.kind = 'worker'
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM a)
$$;

COMMENT ON FUNCTION gridha_internal.instance_adopt(uuid, name) IS
'gives a worker''s instance without an owner (a row from 1.0) the role given, which the worker runs as; true if it did';

CREATE FUNCTION gridha_internal.cluster_known(system_identifier bigint)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
SELECT EXISTS (SELECT 1 FROM gridha.epoch_bands b WHERE b.system_identifier = $1)
$$;

COMMENT ON FUNCTION gridha_internal.cluster_known(bigint) IS
'whether this database ran on the cluster of this system identifier before (gridha.epoch_bands): an owner set there is confirmed here';

CREATE FUNCTION gridha_internal.instance_declare(instance_id uuid, serves text[])
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
UPDATE gridha.instances i SET serves = $2
 WHERE i.instance_id = $1 AND i.serves IS DISTINCT FROM $2
$$;

COMMENT ON FUNCTION gridha_internal.instance_declare(uuid, text[]) IS
'records the kinds of target an instance serves (NULL: it declares nothing), in the words of the library''s order';

CREATE FUNCTION gridha_internal.register_check(serves text[])
RETURNS name
AS 'MODULE_PATHNAME', 'gridha_register_check'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.register_check(text[]) IS
'the checks register_instance() makes before it writes (a writable transaction, the words of serves), and the calling role: the new instance''s owner';

CREATE FUNCTION gridha_internal.register_touch(instance_id uuid, serves text[])
RETURNS void
AS 'MODULE_PATHNAME', 'gridha_register_touch'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.register_touch(uuid, text[]) IS
'the first use of an instance register_instance() just wrote (the session binds to it), and its declaration of serves when given';

REVOKE ALL ON FUNCTION gridha_internal.instance_insert(uuid, name), gridha_internal.instance_key(uuid, boolean),
    gridha_internal.instance_adopt(uuid, name), gridha_internal.cluster_known(bigint),
    gridha_internal.instance_declare(uuid, text[]), gridha_internal.register_check(text[]),
    gridha_internal.register_touch(uuid, text[]) FROM PUBLIC;

/*
 * The targets' cache fill and a refused report's diagnosis (issue 42.1:
 * these statements were C string literals in src/targets.c and
 * src/status.c). Neither runs in a steady cycle: the load once per change
 * of gridha.targets in a backend, the diagnosis only when a report changed
 * nothing, for its error. The library calls them and keeps what needs C:
 * the cache, the resolution and judgement of the targets, the errors.
 */
CREATE FUNCTION gridha_internal.targets_load()
RETURNS TABLE (target text, submit_url text, submit_function text, status_url text,
               status_function text, rate_limited boolean, reject_codes integer[],
               request_headers text[], header_problem text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
SELECT t.target, t.submit_url, t.submit_function, t.status_url, t.status_function,
       t.rate_interval IS NOT NULL,
       (SELECT coalesce(pg_catalog.array_agg(c.c ORDER BY c.n), '{}')
          FROM pg_catalog.unnest(t.reject_codes) WITH ORDINALITY AS c (c, n)
         WHERE c.c BETWEEN 0 AND 999),
       (SELECT pg_catalog.array_agg(h.key || ': ' || (h.value #>> '{}') ORDER BY h.key)
          FROM pg_catalog.jsonb_each(
                 CASE WHEN pg_catalog.jsonb_typeof(t.request_headers) = 'object'
                      THEN t.request_headers END) AS h
         WHERE pg_catalog.jsonb_typeof(h.value) = 'string'),
       CASE WHEN pg_catalog.jsonb_typeof(t.request_headers) NOT IN ('object', 'null')
            THEN 'request_headers is not a JSON object'
            WHEN EXISTS (SELECT FROM pg_catalog.jsonb_each(
                           CASE WHEN pg_catalog.jsonb_typeof(t.request_headers) = 'object'
                                THEN t.request_headers END) AS h
                          WHERE pg_catalog.jsonb_typeof(h.value) <> 'string')
            THEN 'a request header is not a string' END
  FROM gridha.targets t
$$;

COMMENT ON FUNCTION gridha_internal.targets_load() IS
'every target as the library''s cache needs it: the functions as signatures, whether it is rate limited, its reject codes (0-999), its request headers as "name: value" lines (strings only), what is wrong with its headers (NULL: nothing); read once per change of gridha.targets by each backend';

CREATE FUNCTION gridha_internal.report_diagnose(service_id text, batch_id text)
RETURNS TABLE (claimant uuid, claim_epoch bigint, head_seq bigint, seq bigint, status text,
               batch_epoch bigint, target text, submitted boolean, attempts integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
SELECT c.claimant, c.epoch, c.head_seq, b.seq, b.status::text, b.epoch, c.target,
       b.submitted_at IS NOT NULL, b.attempts
  FROM gridha.service_claims c
  LEFT JOIN gridha.batches b
         ON b.service_id = c.service_id AND b.batch_id = $2
 WHERE c.service_id = $1
$$;

COMMENT ON FUNCTION gridha_internal.report_diagnose(text, text) IS
'why a report changed nothing: the service''s claim (holder, epoch, head, target) and the batch as they are now (seq, status, epoch, whether it was ever accepted, attempts); no row: an unknown service';

-- Executable by the extension's owner only: the report calls run the
-- diagnosis as it, and the library runs the load as it.
REVOKE ALL ON FUNCTION gridha_internal.targets_load(), gridha_internal.report_diagnose(text, text) FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- API
-- ---------------------------------------------------------------------------

CREATE FUNCTION gridha.register_instance(label text DEFAULT NULL, serves text[] DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    new_owner name;
    new_id    uuid;
BEGIN
    -- the Citus mode (gridha.citus_setup): its own path, gridha.bucket_instances
    IF pg_catalog.to_regclass('gridha.bucket_claims') IS NOT NULL THEN
        RETURN gridha_internal.citus_register_instance(register_instance.label, register_instance.serves);
    END IF;
    new_owner := gridha_internal.register_check(register_instance.serves);
    INSERT INTO gridha.instances AS i (instance_id, label, kind, owner)
    VALUES (pg_catalog.gen_random_uuid(), register_instance.label, 'external', new_owner)
    RETURNING i.instance_id INTO new_id;
    PERFORM gridha_internal.register_touch(new_id, register_instance.serves);
    RETURN new_id;
END
$$;

COMMENT ON FUNCTION gridha.register_instance(text, text[]) IS
'registers a new external instance, owned by the calling role, and returns its id; serves, when given, declares the kinds of target it serves (submit_url, submit_function, status_url, status_function), NULL: any';

CREATE FUNCTION gridha.enqueue(service_id text, batch_id text, payload bytea, target text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'gridha_enqueue'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.enqueue(text, text, bytea, text) IS
'adds a batch at the tail of its service''s queue (creating the service, on the given target, when new) and returns its seq';

CREATE FUNCTION gridha.renew_claims(instance_id uuid)
RETURNS integer
AS 'MODULE_PATHNAME', 'gridha_renew_claims'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.renew_claims(uuid) IS
'extends the instance''s lease (one row: every claim it holds expires with it) and returns how many claims it holds';

CREATE FUNCTION gridha.acquire_claims(instance_id uuid, serves text[] DEFAULT NULL)
RETURNS TABLE (service_id text, epoch bigint)
AS 'MODULE_PATHNAME', 'gridha_acquire_claims'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.acquire_claims(uuid, text[]) IS
'takes free, soft-expired (nothing submitting) and hard-expired claims whose target the instance can serve, up to the fair share when gridha.balance_claims is on (releasing surplus idle claims above it); returns the claims newly taken; serves, when given, first declares which kinds of target the instance can serve (submit_url, submit_function, status_url, status_function) and hands back the claims it can no longer serve';

-- The checks of the read-only calls whose statement is SQL since 1.3
-- (claimed_batches, pending_batches, verify_batch): their arguments, as the
-- C calls check theirs (22004, 22023), then whether the calling role may act
-- as the instance (RG008), with the library's cache of that verdict. An
-- unknown instance passes: it owns nothing. C, as the hot path shares it.
CREATE FUNCTION gridha_internal.instance_check(instance_id uuid, max_batches integer)
RETURNS void
AS 'MODULE_PATHNAME', 'gridha_instance_check_sql'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.instance_check(uuid, integer) IS
'the checks of claimed_batches and pending_batches before their statement: instance_id given, max_batches given and not negative, the calling role may act as the instance (RG008)';

CREATE FUNCTION gridha_internal.instance_check(instance_id uuid, service_id text, batch_id text, epoch bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'gridha_instance_check_sql'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.instance_check(uuid, text, text, bigint) IS
'the checks of verify_batch before its statement: instance_id, service_id, batch_id and epoch given, ids not empty, epoch not negative, the calling role may act as the instance (RG008)';

-- ---------------------------------------------------------------------------
-- The Citus mode's side of the read calls and views (docs/citus.md): the
-- calls and views below read gridha's tables of one server, or in the
-- mode, through these, the bucket tables; the rest of the mode is at the
-- end of this script.
-- ---------------------------------------------------------------------------

-- Whether this database is in the Citus mode: false at once on one server
-- once gridha's tables were found plain (the flag the hot path tests).
CREATE FUNCTION gridha_internal.citus_mode()
RETURNS boolean
AS 'MODULE_PATHNAME', 'gridha_citus_mode_sql'
LANGUAGE C STABLE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.citus_mode() IS
'whether gridha.citus_setup laid this database out by bucket (the Citus mode); the read calls choose their statement by it';

/*
 * citus_claimed_batches(instance, max_batches): claimed_batches in the
 * mode: the head batch of each service of every bucket the instance holds
 * (its lease running or not, as a claim is the instance's until taken
 * over), with the bucket's epoch, the services whose head is ready first
 * (by when it became ready), then those in flight; one read over every
 * shard without a lock.
 */
CREATE FUNCTION gridha_internal.citus_claimed_batches(instance_id uuid, max_batches integer)
RETURNS TABLE (service_id text, batch_id text, seq bigint, status gridha.batch_status, epoch bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    RETURN QUERY
    SELECT s.service_id, b.batch_id, b.seq, b.status, c.epoch
      FROM gridha.bucket_claims c
      JOIN gridha.bucket_services s ON s.bucket = c.bucket
      JOIN gridha.bucket_batches b ON b.bucket = s.bucket AND b.service_id = s.service_id AND b.seq = s.head_seq
     WHERE c.holder = citus_claimed_batches.instance_id AND s.head_seq <= s.tail_seq
     ORDER BY s.ready_at, s.service_id
     LIMIT citus_claimed_batches.max_batches;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_claimed_batches(uuid, integer) IS
'Citus mode: gridha.claimed_batches: the head batch of each service of the buckets the instance holds, ready ones first, with the bucket''s epoch; read without a lock';

/*
 * citus_pending_batches(instance, max_batches): pending_batches in the
 * mode: the heads in flight that the ledger accepted (pending, valid) in
 * the buckets the instance holds, oldest submission first, with the
 * bucket's epoch; one read over every shard without a lock.
 */
CREATE FUNCTION gridha_internal.citus_pending_batches(instance_id uuid, max_batches integer)
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, epoch bigint, submitted_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    RETURN QUERY
    SELECT s.service_id, b.batch_id, b.status, c.epoch, b.submitted_at
      FROM gridha.bucket_claims c
      JOIN gridha.bucket_services s ON s.bucket = c.bucket
      JOIN gridha.bucket_batches b ON b.bucket = s.bucket AND b.service_id = s.service_id AND b.seq = s.head_seq
     WHERE c.holder = citus_pending_batches.instance_id AND s.in_flight
       AND b.status IN ('pending', 'valid')
     ORDER BY b.submitted_at, s.service_id
     LIMIT citus_pending_batches.max_batches;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_pending_batches(uuid, integer) IS
'Citus mode: gridha.pending_batches: the pending and valid heads of the services of the buckets the instance holds, oldest submission first; read without a lock';

/*
 * citus_verify_batch(instance, service, batch, epoch): verify_batch in the
 * mode: true only while the instance holds the service's bucket at this
 * epoch, the bucket's lease has not run out, and the batch is the
 * service's head, submitting, handed out to the instance at this epoch.
 * One read of the service's bucket (a router query), without a lock.
 */
CREATE FUNCTION gridha_internal.citus_verify_batch(instance_id uuid, service_id text, batch_id text, epoch bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    t timestamptz := pg_catalog.now();
    n integer;
    k integer;
    ok boolean;
BEGIN
    SELECT c.buckets INTO n FROM gridha.bucket_claims c WHERE c.bucket = 0;
    k := gridha.bucket_of(citus_verify_batch.service_id, n);
    SELECT c.holder = citus_verify_batch.instance_id AND c.epoch = citus_verify_batch.epoch
           AND c.hard_expiry > t
           AND b.seq = s.head_seq AND b.status = 'submitting' AND b.epoch = citus_verify_batch.epoch
           AND b.instance_id = citus_verify_batch.instance_id
      INTO ok
      FROM gridha.bucket_claims c
      JOIN gridha.bucket_services s ON s.bucket = c.bucket AND s.service_id = citus_verify_batch.service_id
      JOIN gridha.bucket_batches b ON b.bucket = c.bucket AND b.service_id = citus_verify_batch.service_id
                                  AND b.batch_id = citus_verify_batch.batch_id
     WHERE c.bucket = k;
    RETURN ok IS TRUE;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_verify_batch(uuid, text, text, bigint) IS
'Citus mode: gridha.verify_batch: true while the instance holds the service''s bucket at this epoch (lease running) and the batch is its head, submitting under it; read without a lock';

/*
 * citus_metrics(): gridha.metrics' rows in the mode (none outside it), the
 * same columns as on one server, read from the bucket tables over every
 * shard without a lock. One row of scope target per target of
 * gridha.bucket_targets (as one server has one per row of gridha.targets),
 * its figures those of the services on it (gridha.bucket_services.target):
 * backlog, oldest_ready_age_seconds and in_flight from
 * gridha.bucket_services, enqueued_total the services' tail_seq,
 * committed_total, invalid_total and resubmitted_total the services'
 * running totals (kept by the reports and the hand-outs; pruned batches
 * stay counted): no batch is read; the counters the mode does not keep
 * (claims_taken_over_total, stale_writes_refused_total,
 * heads_repaired_total, status_omitted_total) are NULL. One row of scope
 * instance per instance holding a bucket: in_flight in its buckets,
 * claims_held the buckets it holds, lease_remaining_seconds until the
 * first of their leases runs out (then they may be taken over).
 */
CREATE FUNCTION gridha_internal.citus_metrics()
RETURNS TABLE (scope text, target text, instance_id uuid, label text, backlog bigint,
               oldest_ready_age_seconds float8, in_flight bigint, claims_held bigint,
               lease_remaining_seconds float8, enqueued_total bigint, committed_total bigint,
               invalid_total bigint, resubmitted_total bigint, claims_taken_over_total bigint,
               stale_writes_refused_total bigint, heads_repaired_total bigint, status_omitted_total bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    t timestamptz := pg_catalog.now();
BEGIN
    IF NOT gridha_internal.citus_mode() THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT 'target'::text, g.target, NULL::uuid, NULL::text,
           coalesce(q.backlog, 0)::bigint,
           coalesce(greatest(EXTRACT(epoch FROM t - q.oldest), 0), 0)::float8,
           coalesce(q.in_flight, 0)::bigint, NULL::bigint, NULL::float8,
           coalesce(q.enqueued, 0)::bigint,
           coalesce(q.committed, 0)::bigint,
           coalesce(q.invalid, 0)::bigint,
           coalesce(q.resubmitted, 0)::bigint,
           NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint
      FROM gridha.bucket_targets g
      LEFT JOIN (SELECT s.target,
                        pg_catalog.sum(s.tail_seq - s.head_seq + 1) AS backlog,
                        pg_catalog.min(s.ready_at) FILTER (WHERE NOT s.in_flight) AS oldest,
                        pg_catalog.count(*) FILTER (WHERE s.in_flight) AS in_flight,
                        pg_catalog.sum(s.tail_seq) AS enqueued,
                        pg_catalog.sum(s.committed_total) AS committed,
                        pg_catalog.sum(s.invalid_total) AS invalid,
                        pg_catalog.sum(s.resubmitted_total) AS resubmitted
                   FROM gridha.bucket_services s
                  GROUP BY s.target) q ON q.target = g.target
     ORDER BY g.target;
    RETURN QUERY
    SELECT 'instance'::text, NULL::text, h.holder, i.label, NULL::bigint, NULL::float8,
           coalesce(h.in_flight, 0)::bigint, h.buckets::bigint,
           greatest(EXTRACT(epoch FROM h.expiry - t), 0)::float8,
           NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
           NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint
      FROM (SELECT c.holder, pg_catalog.count(*) AS buckets, pg_catalog.min(c.hard_expiry) AS expiry,
                   pg_catalog.sum(w.n) AS in_flight
              FROM gridha.bucket_claims c
              LEFT JOIN (SELECT s.bucket, pg_catalog.count(*) AS n
                           FROM gridha.bucket_services s
                          WHERE s.in_flight
                          GROUP BY s.bucket) w ON w.bucket = c.bucket
             WHERE c.holder IS NOT NULL
             GROUP BY c.holder) h
      LEFT JOIN gridha.bucket_instances i ON i.instance_id = h.holder
     ORDER BY h.holder;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_metrics() IS
'Citus mode: gridha.metrics'' rows (none outside the mode): per target of gridha.bucket_targets, its services'' gauges and running totals, from gridha.bucket_services alone (no batch is read); one row per instance holding a bucket';

/*
 * citus_view_check(): true outside the Citus mode; in it, RG035: the
 * views that read gridha's tables of one server (claims, instance_health,
 * service_queues and through it queue_progress) would show nothing there,
 * which is not the mode's state.
 */
CREATE FUNCTION gridha_internal.citus_view_check()
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    IF gridha_internal.citus_mode() THEN
        RAISE EXCEPTION 'gridha is in Citus mode, where this view does not run'
            USING ERRCODE = 'RG035',
                  DETAIL = 'gridha.claims, gridha.instance_health, gridha.service_queues and gridha.queue_progress read gridha''s tables of one server, which stay empty in the Citus mode.',
                  HINT = 'Read gridha.metrics, or the bucket tables (gridha.bucket_claims, gridha.bucket_services, gridha.bucket_batches) as gridha_admin (docs/citus.md).';
    END IF;
    RETURN true;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_view_check() IS
'true outside the Citus mode; RG035 in it, for the views that read gridha''s tables of one server';

-- The claims are picked first and each one's head is then looked up by its
-- key (LATERAL ... LIMIT 1 keeps that a per-claim lookup whatever the
-- statistics say): the cost follows the instance's claims, never the number
-- of batches. claimed_batches, verify_batch and pending_batches each have
-- the Citus mode's branch: on one server it is not run (its one-time
-- filter, citus_mode(), is false); in the mode gridha's tables of one
-- server are empty and that branch reads the bucket tables.
CREATE FUNCTION gridha.claimed_batches(instance_id uuid, max_batches integer DEFAULT 100)
RETURNS TABLE (service_id text, batch_id text, seq bigint, status gridha.batch_status, epoch bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
SELECT gridha_internal.instance_check($1, $2);
(SELECT c.service_id, h.batch_id, h.seq, h.status, c.epoch
  FROM (SELECT c.service_id, c.head_seq, c.epoch, c.ready_at
          FROM gridha.service_claims c
         WHERE c.claimant = $1 AND c.head_seq IS NOT NULL
         ORDER BY c.ready_at, c.service_id
         LIMIT $2) c
 CROSS JOIN LATERAL (
  SELECT b.batch_id, b.seq, b.status FROM gridha.batches b
   WHERE b.service_id = c.service_id AND b.seq = c.head_seq
   LIMIT 1) h
 ORDER BY c.ready_at, c.service_id)
UNION ALL
SELECT m.service_id, m.batch_id, m.seq, m.status, m.epoch
  FROM gridha_internal.citus_claimed_batches($1, $2) m
 WHERE gridha_internal.citus_mode()
$$;

COMMENT ON FUNCTION gridha.claimed_batches(uuid, integer) IS
'read-only: the head batch of each service this instance holds, submittable ones first, with the claim''s epoch';

-- The claim cycle's C functions (next_batch, next_batches, report_submission,
-- report_status and their batched forms) have no SET clause: on
-- PostgreSQL 15 the clause cost a tenth of a cycle, and most of their calls
-- run no SQL statement. Their C code sets search_path = pg_catalog, gridha,
-- pg_temp itself, in a nest level of the call's own, before the call's
-- first statement, and resolves no name by the path before that
-- (docs/security.md).
CREATE FUNCTION gridha.next_batch(instance_id uuid)
RETURNS TABLE (service_id text, batch_id text, payload bytea, epoch bigint, attempts integer)
AS 'MODULE_PATHNAME', 'gridha_next_batch'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1;

COMMENT ON FUNCTION gridha.next_batch(uuid) IS
'the queuer cycle: renews and acquires claims when due, hands out the submittable head that has waited longest among this instance''s services and marks it submitting; 0 or 1 row; attempts counts its hand-outs, this one included';

CREATE FUNCTION gridha.next_batches(instance_id uuid, max_batches integer DEFAULT 100)
RETURNS TABLE (service_id text, batch_id text, payload bytea, epoch bigint, attempts integer)
AS 'MODULE_PATHNAME', 'gridha_next_batches'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 10;

COMMENT ON FUNCTION gridha.next_batches(uuid, integer) IS
'like next_batch, up to max_batches batches of distinct services';

-- True only while this instance holds the claim at this epoch, the claim
-- has not hard-expired (the hard expiry is the lease's, or the claim's own
-- when earlier), and the batch is the head, submitting under this epoch. An
-- unknown batch is simply not this instance's: false.
CREATE FUNCTION gridha.verify_batch(instance_id uuid, service_id text, batch_id text, epoch bigint)
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
SELECT gridha_internal.instance_check($1, $2, $3, $4);
SELECT CASE WHEN gridha_internal.citus_mode() THEN gridha_internal.citus_verify_batch($1, $2, $3, $4)
       ELSE coalesce((SELECT c.claimant = $1 AND c.epoch = $4
                        AND least(c.hard_expiry, i.hard_expiry) > now()
                        AND b.seq = c.head_seq AND b.status = 'submitting' AND b.epoch = $4
                        AND b.instance_id = $1
                   FROM gridha.service_claims c
                   JOIN gridha.batches b ON b.service_id = c.service_id AND b.batch_id = $3
                   LEFT JOIN gridha.instances i ON i.instance_id = c.claimant
                  WHERE c.service_id = $2), false) END
$$;

COMMENT ON FUNCTION gridha.verify_batch(uuid, text, text, bigint) IS
'true while the batch is still this instance''s to submit: it holds the claim at this epoch and the batch is submitting under it';

CREATE FUNCTION gridha.report_submission(instance_id uuid, service_id text, batch_id text, epoch bigint,
                                         outcome text, detail text DEFAULT NULL)
RETURNS gridha.batch_status
AS 'MODULE_PATHNAME', 'gridha_report_submission'
LANGUAGE C VOLATILE SECURITY DEFINER;

COMMENT ON FUNCTION gridha.report_submission(uuid, text, text, bigint, text, text) IS
'deprecated since 1.3 (use report_submission(uuid, text, text, bigint, gridha.submission_outcome, text)): records the result of submitting a batch: accepted -> pending, delayed -> delayed with backoff, rejected -> invalid; refused for a stale epoch';

-- Each in-flight claim's head is looked up by its key (LATERAL ... LIMIT 1
-- keeps that a per-claim lookup whatever the statistics say), so a poll
-- costs what the instance has in flight, never a scan of gridha.batches.
CREATE FUNCTION gridha.pending_batches(instance_id uuid, max_batches integer DEFAULT 100)
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, epoch bigint, submitted_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
SELECT gridha_internal.instance_check($1, $2);
(SELECT c.service_id, h.batch_id, h.status, c.epoch, h.submitted_at
  FROM gridha.service_claims c
 CROSS JOIN LATERAL (
  SELECT b.batch_id, b.status, b.submitted_at FROM gridha.batches b
   WHERE b.service_id = c.service_id AND b.seq = c.head_seq
     AND b.status IN ('pending', 'valid')
   LIMIT 1) h
 WHERE c.claimant = $1 AND c.in_flight
 ORDER BY h.submitted_at, c.service_id
 LIMIT $2)
UNION ALL
SELECT m.service_id, m.batch_id, m.status, m.epoch, m.submitted_at
  FROM gridha_internal.citus_pending_batches($1, $2) m
 WHERE gridha_internal.citus_mode()
$$;

COMMENT ON FUNCTION gridha.pending_batches(uuid, integer) IS
'what this instance''s DLT monitor must poll: the pending and valid batches of the services it holds, oldest submission first';

CREATE FUNCTION gridha.report_status(instance_id uuid, service_id text, batch_id text, epoch bigint,
                                     status text, detail text DEFAULT NULL)
RETURNS gridha.batch_status
AS 'MODULE_PATHNAME', 'gridha_report_status'
LANGUAGE C VOLATILE SECURITY DEFINER;

COMMENT ON FUNCTION gridha.report_status(uuid, text, text, bigint, text, text) IS
'deprecated since 1.3 (use report_status(uuid, text, text, bigint, gridha.ledger_status, text)): records what the ledger says of an in-flight batch, the status as text: pending, valid, committed, invalid or unknown (any case), with an optional detail stored on the batch; refused for a stale epoch';

-- The forms deprecated in 1.2 call the current functions: no C entry
-- point of their own (the library keeps those symbols for 1.2's SQL).
-- The batched reports check their arrays as before (NULL, more than one
-- dimension, lengths that differ: the whole call fails) and read the
-- words in any case; an unknown word refuses its row alone, with RG004 or
-- RG005, as before.
-- The array forms' one check of their arrays (both call it; it returns
-- how many batches they report): an array NULL (details may be), of more
-- than one dimension, or of another length than service_ids fails the
-- whole call (22004, 22023). Run with the caller's rights, by the
-- wrappers' callers only (gridha_submitter, as the wrappers).
CREATE FUNCTION gridha_internal.report_arrays_check(service_ids text[], batch_ids text[], epochs bigint[],
                                                    words_name text, words text[], details text[])
RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    n integer := 0;
    a record;
BEGIN
    FOR a IN SELECT * FROM (VALUES (1, 'service_ids', service_ids), (2, 'batch_ids', batch_ids),
                                   (3, 'epochs', epochs::text[]), (4, words_name, words),
                                   (5, 'details', details)) v(i, name, arr) ORDER BY i LOOP
        CONTINUE WHEN a.i = 5 AND a.arr IS NULL;
        IF a.arr IS NULL THEN
            RAISE EXCEPTION '% must not be null', a.name USING ERRCODE = '22004';
        END IF;
        IF array_ndims(a.arr) > 1 THEN
            RAISE EXCEPTION '% must be a one-dimensional array', a.name USING ERRCODE = '22023';
        END IF;
        IF a.i > 1 AND cardinality(a.arr) <> n THEN
            RAISE EXCEPTION '% has % elements, service_ids has %', a.name, cardinality(a.arr), n
                USING ERRCODE = '22023', DETAIL = 'Each array holds one element per batch reported.';
        END IF;
        n := cardinality(a.arr);
    END LOOP;
    RETURN n;
END
$$;

COMMENT ON FUNCTION gridha_internal.report_arrays_check(text[], text[], bigint[], text, text[], text[]) IS
'the check of the deprecated array forms of report_submissions and report_statuses: the number of batches, or 22004/22023 for the whole call';

CREATE FUNCTION gridha.report_submissions(instance_id uuid, service_ids text[], batch_ids text[],
                                                     epochs bigint[], outcomes text[], details text[] DEFAULT NULL)
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, sqlstate text, message text)
LANGUAGE plpgsql VOLATILE ROWS 100
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    n integer := gridha_internal.report_arrays_check(service_ids, batch_ids, epochs, 'outcomes', outcomes, details);
BEGIN
    RETURN QUERY
    SELECT r.service_id, r.batch_id, r.status,
           CASE WHEN u.w IS NOT NULL AND r.message = 'outcome must not be null' THEN 'RG004' ELSE r.sqlstate END,
           CASE WHEN u.w IS NOT NULL AND r.message = 'outcome must not be null'
                THEN format('unknown submission outcome "%s"', u.w) ELSE r.message END
      FROM ROWS FROM (gridha.report_submissions(instance_id, ARRAY(
               SELECT ROW(v.s, v.b, v.e,
                          CASE lower(v.w COLLATE "C") WHEN 'accepted' THEN 'accepted' WHEN 'delayed' THEN 'delayed'
                               WHEN 'rejected' THEN 'rejected' END::gridha.submission_outcome,
                          v.d)::gridha.submission_report
                 FROM unnest(service_ids, batch_ids, epochs, outcomes,
                             coalesce(details, array_fill(NULL::text, ARRAY[n])))
                      WITH ORDINALITY AS v(s, b, e, w, d, k)
                ORDER BY v.k))) WITH ORDINALITY AS r(service_id, batch_id, status, sqlstate, message, k)
      JOIN unnest(outcomes) WITH ORDINALITY AS u(w, k) ON u.k = r.k
     ORDER BY r.k;
END
$$;

COMMENT ON FUNCTION gridha.report_submissions(uuid, text[], text[], bigint[], text[], text[]) IS
'deprecated since 1.2 (use report_submissions(uuid, gridha.submission_report[])): many report_submission in one transaction, one element per batch in each array: one row per batch with its new status, or the SQLSTATE and message that refused it (a refused row does not undo the others)';

CREATE FUNCTION gridha.report_statuses(instance_id uuid, service_ids text[], batch_ids text[],
                                                  epochs bigint[], statuses text[], details text[] DEFAULT NULL)
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, sqlstate text, message text)
LANGUAGE plpgsql VOLATILE ROWS 100
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    n integer := gridha_internal.report_arrays_check(service_ids, batch_ids, epochs, 'statuses', statuses, details);
BEGIN
    RETURN QUERY
    SELECT r.service_id, r.batch_id, r.status,
           CASE WHEN u.w IS NOT NULL AND r.message = 'status must not be null' THEN 'RG005' ELSE r.sqlstate END,
           CASE WHEN u.w IS NOT NULL AND r.message = 'status must not be null'
                THEN format('unknown ledger status "%s"', u.w) ELSE r.message END
      FROM ROWS FROM (gridha.report_statuses(instance_id, ARRAY(
               SELECT ROW(v.s, v.b, v.e,
                          CASE lower(v.w COLLATE "C") WHEN 'pending' THEN 'pending' WHEN 'valid' THEN 'valid'
                               WHEN 'committed' THEN 'committed' WHEN 'invalid' THEN 'invalid'
                               WHEN 'unknown' THEN 'unknown' END::gridha.ledger_status,
                          v.d)::gridha.status_report
                 FROM unnest(service_ids, batch_ids, epochs, statuses,
                             coalesce(details, array_fill(NULL::text, ARRAY[n])))
                      WITH ORDINALITY AS v(s, b, e, w, d, k)
                ORDER BY v.k))) WITH ORDINALITY AS r(service_id, batch_id, status, sqlstate, message, k)
      JOIN unnest(statuses) WITH ORDINALITY AS u(w, k) ON u.k = r.k
     ORDER BY r.k;
END
$$;

COMMENT ON FUNCTION gridha.report_statuses(uuid, text[], text[], bigint[], text[], text[]) IS
'deprecated since 1.2 (use report_statuses(uuid, gridha.status_report[])): many report_status in one transaction, one element per batch in each array: one row per batch with its new status, or the SQLSTATE and message that refused it';

-- What release_claims needs C for before its statements: instance_id given
-- (22004), a writable transaction, the calling role may act as the
-- instance (RG008, with the library's cache of that verdict), and
-- gridha.service_claims held for writing before any of its rows is locked
-- (the lock order: src/claims.c).
CREATE FUNCTION gridha_internal.release_check(instance_id uuid)
RETURNS void
AS 'MODULE_PATHNAME', 'gridha_release_check'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.release_check(uuid) IS
'the checks of release_claims before its statements: instance_id given, a writable transaction, the calling role may act as the instance (RG008); holds gridha.service_claims for writing';

REVOKE ALL ON FUNCTION gridha_internal.release_check(uuid) FROM PUBLIC;

-- Release at stop, in two statements as a take is (src/claims.c): the
-- instance's claims locked, in service_id order as every wait for claim
-- rows, then, with a snapshot that sees every hand-out made under those
-- locks, those with nothing submitting handed back. The instance is marked
-- stopped; its lease goes when it holds nothing any more, otherwise it
-- ends now (soft expiry): a stopped instance no longer counts as live, and
-- what it kept (a head submitting) is taken over as any slow instance's
-- claim is. Last, gridha's maintenance lease is given up if the instance
-- held it, so that another instance takes the duty at once rather than at
-- the lease's expiry.
CREATE FUNCTION gridha.release_claims(instance_id uuid)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    released integer;
BEGIN
    -- the Citus mode (gridha.citus_setup): its own path, by bucket
    IF pg_catalog.to_regclass('gridha.bucket_claims') IS NOT NULL THEN
        RETURN gridha_internal.citus_release_claims(release_claims.instance_id);
    END IF;
    PERFORM gridha_internal.release_check(release_claims.instance_id);
    PERFORM 1 FROM gridha.service_claims c
      WHERE c.claimant = release_claims.instance_id
      ORDER BY c.service_id COLLATE "C"
        FOR NO KEY UPDATE;
    WITH r AS (
        UPDATE gridha.service_claims c
           SET claimant = NULL, soft_expiry = NULL, hard_expiry = NULL
         WHERE c.claimant = release_claims.instance_id
           AND NOT (c.in_flight
                    AND coalesce((SELECT b.status = 'submitting' FROM gridha.batches b
                                   WHERE b.service_id = c.service_id AND b.seq = c.head_seq), false))
        RETURNING 1
    ), k AS (
        SELECT count(*)::int4 AS n FROM r
    ), i AS (
        UPDATE gridha.instances i
           SET held = greatest(i.held - k.n, 0), stopped_at = now(),
               soft_expiry = CASE WHEN i.held - k.n <= 0 THEN NULL ELSE least(i.soft_expiry, now()) END,
               hard_expiry = CASE WHEN i.held - k.n <= 0 THEN NULL ELSE i.hard_expiry END
          FROM k
         WHERE i.instance_id = release_claims.instance_id
    )
    SELECT k.n INTO released FROM k;
    PERFORM gridha_internal.lease_resign(release_claims.instance_id, 'gridha.maintenance');
    RETURN released;
END
$$;

COMMENT ON FUNCTION gridha.release_claims(uuid) IS
'hands back every claim of this instance that has nothing submitting; returns how many';

-- The band of epochs of this cluster (gridha.epoch_bands), asked by the
-- first take of a backend (src/claims.c, claims_epoch_base: epochs from
-- (band + T - 1) * 2^40 on timeline T); stored says it was read from the
-- band row, which the backend then keeps. The first take on a cluster
-- writes the row: the highest band of the epochs there, so a database
-- that arrived with epochs of a later timeline (a restored dump,
-- pg_upgrade) starts its timelines above them. It reads every claim, once
-- per cluster. Only a transaction holding the band lock
-- (epoch_band_trylock, never waited for) writes the row, so a writer never
-- waits on another's uncommitted row; one that cannot have the lock reads
-- the same band from the claims and leaves the row to the other.
CREATE FUNCTION gridha_internal.epoch_band_trylock()
RETURNS boolean
AS 'MODULE_PATHNAME', 'gridha_epoch_band_trylock'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.epoch_band_trylock() IS
'the lock under which a transaction writes the band row of this cluster, taken for the transaction without waiting; false when another transaction holds it';

CREATE FUNCTION gridha_internal.epoch_band(system_identifier bigint, OUT band bigint, OUT stored boolean)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    SELECT e.band INTO band FROM gridha.epoch_bands e
     WHERE e.system_identifier = epoch_band.system_identifier;
    stored := FOUND;
    IF stored THEN
        RETURN;
    END IF;
    IF gridha_internal.epoch_band_trylock() THEN
        INSERT INTO gridha.epoch_bands AS e (system_identifier, band)
        SELECT epoch_band.system_identifier, coalesce(max(c.epoch), 0) >> 40 FROM gridha.service_claims c
        ON CONFLICT (system_identifier) DO UPDATE SET band = e.band
        RETURNING e.band INTO band;
    ELSE
        SELECT coalesce(max(c.epoch), 0) >> 40 INTO band FROM gridha.service_claims c;
    END IF;
END
$$;

COMMENT ON FUNCTION gridha_internal.epoch_band(bigint) IS
'the band of epochs of the cluster of this system identifier: its row of gridha.epoch_bands (stored), else written now under the band lock, or read from the claims when another transaction holds it';

REVOKE ALL ON FUNCTION gridha_internal.epoch_band_trylock(), gridha_internal.epoch_band(bigint) FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- Views for operators
-- ---------------------------------------------------------------------------

-- The views of one server's tables: refused in the Citus mode (RG035,
-- gridha_internal.citus_view_check) rather than empty there; on one
-- server the check is a one-time filter, true.
CREATE VIEW gridha.claims AS
SELECT o.* FROM (
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
       END::gridha.claim_state AS state,
       c.head_seq,
       c.tail_seq,
       c.in_flight AS has_in_flight,
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
                  AND b.status = 'submitting') AS submitting) h
) o
WHERE gridha_internal.citus_view_check();

COMMENT ON VIEW gridha.claims IS
'each claim with its effective expiries (its claimant''s lease, or the claim''s own when earlier) and its state: free, held, slow (soft-expired but submitting: not taken), soft_expired (takeover possible), hard_expired (takeover regardless); has_in_flight: its head is handed out (submitting, pending or valid)';

CREATE VIEW gridha.instance_health AS
SELECT o.* FROM (
SELECT i.instance_id,
       i.label,
       i.kind,
       i.last_seen_at,
       i.held::bigint AS claims_held,
       coalesce(x.submitting, false) AS submitting,
       CASE
           WHEN i.stopped_at IS NOT NULL AND (i.last_seen_at IS NULL OR i.stopped_at >= i.last_seen_at)
                AND (i.soft_expiry IS NULL OR i.soft_expiry <= i.stopped_at) THEN 'stopped'
           WHEN i.last_seen_at IS NULL THEN 'new'
           WHEN i.soft_expiry IS NULL OR i.hard_expiry <= now() THEN 'failed'
           WHEN i.soft_expiry > now() THEN 'healthy'
           WHEN coalesce(x.submitting, false) THEN 'slow'
           ELSE 'failed'
       END::gridha.health_state AS health,
       i.soft_expiry,
       i.hard_expiry
FROM gridha.instances i
LEFT JOIN LATERAL (
    SELECT bool_or(c.submitting) AS submitting
      FROM gridha.claims c
     WHERE c.claimant = i.instance_id AND c.has_in_flight) x ON true
) o
WHERE gridha_internal.citus_view_check();

COMMENT ON VIEW gridha.instance_health IS
'each instance''s health by the decision tree, from its lease: registered and never seen new; within its lease healthy; past its soft expiry and mid-submission slow (assumed healthy); past it and idle, or past its hard expiry, failed; released its claims since its last cycle: stopped';



/*
 * The queue views read each service's row and its head (and, when the head
 * is not queued, the batch after it): every batch between the head and the
 * tail is queued, only the head can be in flight or retrying. What they
 * cost follows the services, never the history. committed and invalid are
 * the service's running totals (pruned batches stay counted).
 */
CREATE VIEW gridha.service_queues AS
SELECT o.* FROM (
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
           coalesce((h.status IN ('delayed', 'unknown'))::int, 0)::bigint AS retrying) q
) o
WHERE gridha_internal.citus_view_check();

COMMENT ON VIEW gridha.service_queues IS
'each service''s queue: its head batch, how many batches wait in each state, and how many were committed and found invalid so far (running totals, pruned batches included)';

-- What a producer may see of the queues: their progress, without who holds
-- them (claimant ids, epochs) and without payloads.
CREATE VIEW gridha.queue_progress AS
SELECT service_id, target, head_batch_id, head_status, queued, in_flight, retrying,
       committed, invalid, oldest_queued_at
FROM gridha.service_queues;

COMMENT ON VIEW gridha.queue_progress IS
'each service''s queue as producers may see it: its head batch, how many batches wait in each state, and how many were committed and found invalid so far (running totals; no claimant, no epoch, no payload)';

-- ---------------------------------------------------------------------------
-- Background-worker instances (need shared_preload_libraries = 'gridha')
-- ---------------------------------------------------------------------------

CREATE FUNCTION gridha.start_worker(label text DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'gridha_start_worker'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.start_worker(text) IS
'starts a background-worker instance now and returns its instance id';

CREATE FUNCTION gridha.stop_worker(instance_id uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'gridha_stop_worker'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.stop_worker(uuid) IS
'asks a running worker instance to stop: it reports the batch in hand, releases its claims and exits; false when no running worker has this id';

CREATE FUNCTION gridha_internal.worker_slots(
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
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.worker_slots() IS
'the running worker instances as their shared-memory slots show them (empty without preload)';

CREATE VIEW gridha.workers AS
SELECT w.instance_id, w.label, w.pid, w.state::gridha.worker_state AS state, w.state_since,
       w.service_id, w.batch_id, w.started_at, w.in_flight AS requests_in_flight
FROM gridha_internal.worker_slots() w;

COMMENT ON VIEW gridha.workers IS
'one row per running background-worker instance: its instance id, pid (as in pg_stat_activity), state, a batch it is busy with, and how many POSTs it has in flight (requests_in_flight)';

-- A commit that enqueued batches wakes the workers (no-op without preload).
CREATE FUNCTION gridha_internal.batches_wake()
RETURNS trigger
AS 'MODULE_PATHNAME', 'gridha_batches_wake'
LANGUAGE C
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.batches_wake() IS
'trigger: wakes the background workers when the enqueuing transaction commits';

CREATE TRIGGER batches_wake
    AFTER INSERT ON gridha.batches
    FOR EACH STATEMENT EXECUTE FUNCTION gridha_internal.batches_wake();

-- A target a worker could not use is refused when it is written (RG007).
-- Without SET search_path (1.3): it resolves the functions the writer
-- names with the writer's search_path, as a regprocedure cast in the
-- writer's statement did; it runs no SQL and resolves nothing else.
CREATE FUNCTION gridha_internal.targets_check()
RETURNS trigger
AS 'MODULE_PATHNAME', 'gridha_targets_check'
LANGUAGE C;

COMMENT ON FUNCTION gridha_internal.targets_check() IS
'trigger: refuses malformed URLs, two sources of one kind, and functions that do not exist or have the wrong signature in gridha.targets; stores each function as its schema-qualified signature';

CREATE TRIGGER targets_check
    BEFORE INSERT OR UPDATE ON gridha.targets
    FOR EACH ROW EXECUTE FUNCTION gridha_internal.targets_check();

-- ---------------------------------------------------------------------------
-- Privileges: nothing for PUBLIC. Four roles (created when missing):
--   gridha_producer   enqueues, sees the queues' progress
--   gridha_submitter  the instance API; reads what it needs to submit
--   gridha_admin      changes gridha.targets, ID sequences, workers
--   gridha_client     producer and submitter, for convenience
-- The API functions are SECURITY DEFINER: no role needs table rights to
-- call them, and each checks that the calling role owns the instance it
-- names (RG008).
-- ---------------------------------------------------------------------------

REVOKE ALL ON ALL TABLES IN SCHEMA gridha FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA gridha FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA gridha_internal FROM PUBLIC;

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
REVOKE ALL ON SCHEMA gridha_internal FROM PUBLIC;
GRANT USAGE ON SCHEMA gridha_internal TO gridha_submitter;

-- Producers: enqueue, and nothing of the claims
GRANT EXECUTE ON FUNCTION
    gridha.enqueue(text, text, bytea, text),
    gridha.expiry_settings()
TO gridha_producer;
GRANT INSERT (service_id, batch_id, payload) ON gridha.batches TO gridha_producer;
GRANT SELECT ON gridha.queue_progress TO gridha_producer;

-- Submitters: the instance API
GRANT EXECUTE ON FUNCTION
    gridha.register_instance(text, text[]),
    gridha.renew_claims(uuid),
    gridha.acquire_claims(uuid, text[]),
    gridha.claimed_batches(uuid, integer),
    gridha.next_batch(uuid),
    gridha.next_batches(uuid, integer),
    gridha.verify_batch(uuid, text, text, bigint),
    gridha.report_submission(uuid, text, text, bigint, text, text),
    gridha.report_submissions(uuid, text[], text[], bigint[], text[], text[]),
    gridha.pending_batches(uuid, integer),
    gridha.report_status(uuid, text, text, bigint, text, text),
    gridha.report_statuses(uuid, text[], text[], bigint[], text[], text[]),
    gridha.release_claims(uuid),
    gridha.expiry_settings(),
    gridha_internal.worker_slots()
TO gridha_submitter;
GRANT EXECUTE ON FUNCTION gridha_internal.report_arrays_check(text[], text[], bigint[], text, text[], text[])
TO gridha_submitter;
GRANT SELECT ON gridha.claims, gridha.instance_health, gridha.service_queues,
    gridha.queue_progress, gridha.workers
TO gridha_submitter;
-- A submitter needs each service's target to submit to it, credentials
-- included.
GRANT SELECT ON gridha.targets TO gridha_submitter;
GRANT SELECT (service_id, target) ON gridha.service_claims TO gridha_submitter;

-- Admins: the targets, the ID sequences, the workers
GRANT SELECT, INSERT, UPDATE, DELETE ON gridha.targets TO gridha_admin;
GRANT EXECUTE ON FUNCTION
    gridha.start_worker(text),
    gridha.stop_worker(uuid),
    gridha_internal.worker_slots()
TO gridha_admin;
GRANT SELECT ON gridha.claims, gridha.instance_health, gridha.service_queues,
    gridha.queue_progress, gridha.workers
TO gridha_admin;
-- Administrators read every batch's place and status, its attempts and the
-- detail a report stored (why it is retried), not its payload: a grant on
-- the other columns of gridha.batches.
GRANT SELECT (service_id, batch_id, seq, status, created_at, epoch, attempts, not_before,
              instance_id, handed_out_at, submitted_at, finished_at, detail)
ON gridha.batches TO gridha_admin;

-- Section 7: leader lease, ID windows, rate limits
--
-- Words used here (see src/leader.c, src/idseq.c, src/ratelimit.c):
--   duty     a singleton duty; one lease per duty in gridha.leases (the
--            column was role until 1.3)
--   term     bumped each time a duty's leader changes; a lease is renewed
--            only under its term
--   tick     one run of a duty, keyed (duty, tick) so that it runs
--            once: the start of its slot of the server clock, in ms since 1970
--   window   ids [window_start, window_end) of an id sequence, reserved in
--            blocks from next_id on; the high water is the last id ever
--            given to a window of the sequence
--   slot     the right to hand out one batch of a rate-limited target; tat
--            is the target's theoretical arrival time (generic cell rate
--            algorithm)

CREATE TABLE gridha.leases (
    duty        text PRIMARY KEY CHECK (duty <> ''),
    leader      uuid,
    term        bigint NOT NULL DEFAULT 0,
    acquired_at timestamptz,
    renewed_at  timestamptz,
    expires_at  timestamptz,
    CHECK (leader IS NULL OR expires_at IS NOT NULL)
);

COMMENT ON TABLE gridha.leases IS
'one row per singleton duty: its leader (NULL after a resignation), the term it leads under, and when the lease expires (gridha.soft_expiry after its last renewal)';

CREATE TABLE gridha.maintenance_ticks (
    duty            text NOT NULL,
    tick            bigint NOT NULL,
    term            bigint NOT NULL,
    leader          uuid NOT NULL,
    started_at      timestamptz NOT NULL,
    finished_at     timestamptz,
    swept_instances integer,
    pruned_batches  bigint,
    opened_windows  integer,
    PRIMARY KEY (duty, tick)
);

COMMENT ON TABLE gridha.maintenance_ticks IS
'every run of a duty, keyed by (duty, tick): a second leader trying the same tick hits the key and backs off; a tick runs only past every stored tick of its duty';

/*
 * The lease and maintenance functions (issue 42.1: their statements were
 * C string literals in src/leader.c). What needs C stays there, as the
 * gridha_internal helpers below: the checks of a call's arguments and of
 * its instance (ownership, with its cache), the settings, the duty's lock
 * and a backend's state. All of gridha_internal's are executable by the
 * extension's owner only; the API functions that call them run as it.
 */
CREATE FUNCTION gridha_internal.lease_call(call text, instance_id uuid, duty text, n bigint DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'gridha_lease_call'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.lease_call(text, uuid, text, bigint) IS
'the checks a lease or maintenance call (lead(), renew_lead(), resign_lead(), run_maintenance(), prune_batches()) makes first: its arguments, a writable transaction, the instance''s owner (touched or checked); for prune_batches() the step''s limit';

CREATE FUNCTION gridha_internal.lease_done(instance_id uuid)
RETURNS void
AS 'MODULE_PATHNAME', 'gridha_lease_done'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.lease_done(uuid) IS
'the end of a lease call that touched its instance: the write to the instance''s row the touch left for the end, if any';

CREATE FUNCTION gridha_internal.lease_settings(
    OUT soft_ms bigint,
    OUT renew_ms bigint,
    OUT interval_ms bigint,
    OUT retention_s bigint,
    OUT prune_chunk bigint,
    OUT sweep_after_s bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'gridha_lease_settings'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.lease_settings() IS
'the settings as leases and maintenance apply them: gridha.soft_expiry and the renewal interval (ms), gridha.maintenance_interval (ms), gridha.retention (s), gridha.prune_chunk, gridha.sweep_instances_after (s)';

CREATE FUNCTION gridha_internal.lease_trylock(duty text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'gridha_lease_trylock'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.lease_trylock(text) IS
'the duty''s lock for this transaction, without waiting (a lock no user''s SQL can take); false when another transaction holds it';

CREATE FUNCTION gridha_internal.prune_from()
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'gridha_prune_from'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.prune_from() IS
'where this backend''s next prune step starts in batches_created (-infinity: from the oldest)';

CREATE FUNCTION gridha_internal.prune_from_set(next_from timestamptz)
RETURNS void
AS 'MODULE_PATHNAME', 'gridha_prune_from_set'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.prune_from_set(timestamptz) IS
'sets where this backend''s next prune step starts (NULL: from the oldest)';

CREATE FUNCTION gridha_internal.counts_check_due()
RETURNS boolean
AS 'MODULE_PATHNAME', 'gridha_counts_check_due'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.counts_check_due() IS
'whether this backend checks the service counts now (at its first tick, then once an hour), noting the check';

/*
 * lease_take: the term under which the instance leads the duty now, or
 * NULL when another instance leads it. Take or renew: the row lock of the
 * upsert and the re-check of its WHERE on the newest row version make two
 * would-be leaders agree on one. With force, a held lease is always
 * renewed (lead); without it, only once the renewal interval has passed
 * since its last renewal, so a leader that runs maintenance often does not
 * write its lease every time. With nowait (the hand-outs' poll duty), a
 * lease that would have to wait for another transaction to be written is
 * treated as another's: the duty's lock (lease_trylock, held to the end
 * of the transaction) and its row, when there is one, must be free.
 * Another session of this instance may be running the duty right now (two
 * submitter threads of one instance): without the lock, both would write
 * the same tick row, and the second would wait for the first's
 * transaction.
 */
CREATE FUNCTION gridha_internal.lease_take(instance_id uuid, duty text, force boolean, nowait boolean)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s     record;
    mine  boolean;
    held  bigint;
    live  boolean;
    due   boolean;
    keep  boolean := false;
    taken bigint;
BEGIN
    SELECT * INTO s FROM gridha_internal.lease_settings();
    SELECT coalesce(l.leader = lease_take.instance_id, false), l.term,
           coalesce(l.expires_at > now(), false),
           coalesce(l.renewed_at <= now() - s.renew_ms * interval '1 millisecond', true)
      INTO mine, held, live, due
      FROM gridha.leases l
     WHERE l.duty = lease_take.duty;
    IF FOUND THEN
        IF live AND NOT mine THEN
            RETURN NULL;
        END IF;
        keep := live AND mine AND NOT lease_take.force AND NOT due;
    ELSIF octet_length(lease_take.duty) > 512 THEN
        -- a new duty (run_maintenance creates one too): ids are index keys
        RAISE EXCEPTION 'duty is too long'
            USING ERRCODE = '22023',
                  DETAIL = format('It has %s bytes; an id has at most 512.', octet_length(lease_take.duty));
    END IF;
    IF lease_take.nowait THEN
        IF NOT gridha_internal.lease_trylock(lease_take.duty) THEN
            RETURN NULL;
        END IF;
        IF NOT (NOT EXISTS (SELECT 1 FROM gridha.leases l WHERE l.duty = lease_take.duty)
                OR EXISTS (SELECT 1 FROM gridha.leases l WHERE l.duty = lease_take.duty
                              FOR UPDATE SKIP LOCKED)) THEN
            RETURN NULL;
        END IF;
    END IF;
    IF keep THEN
        RETURN held;
    END IF;
    INSERT INTO gridha.leases AS l (duty, leader, term, acquired_at, renewed_at, expires_at)
    VALUES (lease_take.duty, lease_take.instance_id, 1, now(), now(),
            now() + s.soft_ms * interval '1 millisecond')
    ON CONFLICT (duty) DO UPDATE
       SET leader = EXCLUDED.leader,
           term = CASE WHEN l.leader = EXCLUDED.leader THEN l.term ELSE l.term + 1 END,
           acquired_at = CASE WHEN l.leader = EXCLUDED.leader THEN l.acquired_at ELSE now() END,
           renewed_at = now(),
           expires_at = EXCLUDED.expires_at
     WHERE l.leader = EXCLUDED.leader OR l.leader IS NULL OR l.expires_at <= now()
    RETURNING l.term INTO taken;
    RETURN taken;
END
$$;

COMMENT ON FUNCTION gridha_internal.lease_take(uuid, text, boolean, boolean) IS
'the term under which the instance leads the duty now (taken or renewed: always with force, else once the renewal interval has passed), NULL when another instance leads it; with nowait, NULL rather than wait for another transaction';

/*
 * lease_resign: gives up the instance's lease on the duty at once (true if
 * it held it); the next leader takes the duty under a new term.
 */
CREATE FUNCTION gridha_internal.lease_resign(instance_id uuid, duty text)
RETURNS boolean
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
WITH r AS (
    UPDATE gridha.leases l
       SET leader = NULL, expires_at = NULL, renewed_at = now()
     WHERE l.duty = $2 AND l.leader = $1
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM r)
$$;

COMMENT ON FUNCTION gridha_internal.lease_resign(uuid, text) IS
'gives up the instance''s lease on the duty at once; true if it held it';

/*
 * prune_step: one bounded DELETE of final batches finished longer than
 * gridha.retention ago, oldest first (none while it is -1); returns how
 * many it deleted. scan looks at the next batches by creation time (at
 * most max_batches * 2, from where this backend's last step stopped, all
 * created before the cutoff), old keeps the oldest max_batches final ones
 * among them finished before the cutoff, picked from scan's rows (so the
 * table is read by row address only, whatever the planner thinks of
 * sorting), locked (rows another transaction holds are skipped, not waited
 * for), and d deletes them by their row address. The status is checked
 * again on the row deleted; the batches_unfinished trigger would refuse
 * the rest anyway. The index is on created_at, which no rewrite of a batch
 * changes (every rewrite stays a HOT update); a batch finished after the
 * retention was created before it, so every batch to prune lies in the
 * walked range. The next step starts after the newest deleted (a full
 * chunk) or the newest looked at (all it may), so consecutive steps walk
 * on instead of over what the previous ones deleted or kept; from the
 * oldest again after a step that reached the cutoff.
 *
 * The SET clauses walk batches_created in order and stop at the limit,
 * whatever the statistics say: without them (a table just upgraded or
 * restored) the planner may read every old batch through a bitmap and
 * sort them, at each step; the plan then looks costly, and is never
 * JIT-compiled.
 */
CREATE FUNCTION gridha_internal.prune_step(max_batches bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    s              record;
    from_at        timestamptz := gridha_internal.prune_from();
    pruned         bigint;
    scanned        bigint;
    newest_scanned timestamptz;
    newest_pruned  timestamptz;
BEGIN
    SELECT * INTO s FROM gridha_internal.lease_settings();
    IF s.retention_s < 0 OR max_batches <= 0 THEN
        RETURN 0;
    END IF;
    WITH scan AS MATERIALIZED (
        SELECT b.ctid, b.created_at, b.status, b.finished_at FROM gridha.batches b
         WHERE b.created_at >= from_at
           AND b.created_at < now() - s.retention_s * interval '1 second'
         ORDER BY b.created_at
         LIMIT max_batches * 2
    ), old AS (
        SELECT b.ctid FROM gridha.batches b
         WHERE b.ctid = ANY (ARRAY(SELECT c.ctid FROM scan c
                                    WHERE c.status IN ('committed', 'invalid')
                                      AND c.finished_at < now() - s.retention_s * interval '1 second'
                                    ORDER BY c.created_at
                                    LIMIT max_batches))
           AND b.status IN ('committed', 'invalid')
         FOR UPDATE OF b SKIP LOCKED
    ), d AS (
        DELETE FROM gridha.batches b
         WHERE b.ctid = ANY (ARRAY(SELECT old.ctid FROM old))
           AND b.status IN ('committed', 'invalid')
        RETURNING b.created_at
    )
    SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM scan),
           (SELECT max(c.created_at) FROM scan c), (SELECT max(d.created_at) FROM d)
      INTO pruned, scanned, newest_scanned, newest_pruned;
    PERFORM gridha_internal.prune_from_set(CASE WHEN pruned >= max_batches THEN newest_pruned
                                                WHEN scanned >= max_batches * 2 THEN newest_scanned
                                           END);
    RETURN pruned;
END
$$;

COMMENT ON FUNCTION gridha_internal.prune_step(bigint) IS
'one prune step: deletes at most max_batches committed or invalid batches finished longer than gridha.retention ago, oldest first, walking batches_created on from this backend''s last step; returns how many';

/*
 * maintenance_tick: runs the current tick's duties under this term if no
 * tick at or past it has run, recording the tick's counts; tick_run is
 * NULL when it ran none. The tick is the start of now()'s slot of
 * gridha.maintenance_interval in ms since 1970; a second, stale leader
 * that tries the same tick hits the key and backs off, and a tick that is
 * not past every stored tick of its duty is not run at all (the clock went
 * back: wait). After a jump forward, only the current tick runs. The
 * duties happen in the same transaction as the tick row: a run that fails
 * leaves no tick behind and is retried at the next call. Every duty is
 * idempotent and bounded:
 *
 *   the sweep of long-unseen instances deletes those that hold nothing
 *   (no claim, no lease of a duty), each locked first and skipped when
 *   another transaction holds it: an instance taking claims as the sweep
 *   runs writes its row before it commits. A delete that commits first
 *   makes that take fail instead (claims.c). A take that committed after
 *   the statement's snapshot is not seen by its NOT EXISTS: the
 *   instances_guard_claims trigger then refuses the delete, and the tick
 *   is undone and runs again at the next, which sees the claims;
 *
 *   a prune step, the ID window agent, the hand-out log's pruning;
 *
 *   with check_counts (not when the tick runs inside someone else's
 *   transaction, a hand-out's poll duty: counts.c writes a transaction's
 *   counts at its commit, so one that created services before would be
 *   counted twice; nor in a transaction that created or removed services
 *   before calling run_maintenance, for the same reason: counts_check_due
 *   says so), at the first tick of a backend and then once an hour,
 *   the service counts checked against the services there are, and a
 *   count gone wrong repaired (counts.c explains how one can drift): the
 *   difference, as the statement's snapshot sees both, is added to shard
 *   0's row of the target, rows written in target order as counts.c
 *   writes them. The count rows come last in the lock order, after the
 *   instance rows: the key write the leader's touch left for the end of
 *   its call (an UPDATE of its instance row, which may wait) is made
 *   before them;
 *
 *   old tick rows go after a day; the newest one of the duty always stays.
 */
CREATE FUNCTION gridha_internal.maintenance_tick(
    instance_id uuid,
    duty text,
    term bigint,
    check_counts boolean,
    OUT tick_run bigint,
    OUT swept integer,
    OUT pruned bigint,
    OUT opened integer)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s        record;
    repaired text;
BEGIN
    SELECT * INTO s FROM gridha_internal.lease_settings();
    INSERT INTO gridha.maintenance_ticks AS m (duty, tick, term, leader, started_at)
    SELECT maintenance_tick.duty, t.tick, maintenance_tick.term, maintenance_tick.instance_id, now()
      FROM (SELECT (floor(extract(epoch FROM now()) * 1000 / s.interval_ms) * s.interval_ms)::int8 AS tick) t
     WHERE EXISTS (SELECT 1 FROM gridha.leases l
                    WHERE l.duty = maintenance_tick.duty AND l.leader = maintenance_tick.instance_id
                      AND l.term = maintenance_tick.term AND l.expires_at > now())
       AND NOT EXISTS (SELECT 1 FROM gridha.maintenance_ticks p
                        WHERE p.duty = maintenance_tick.duty AND p.tick >= t.tick)
    ON CONFLICT (duty, tick) DO NOTHING
    RETURNING m.tick INTO tick_run;
    IF tick_run IS NULL THEN
        RETURN;
    END IF;

    swept := 0;
    IF s.sweep_after_s >= 0 THEN
        WITH gone AS (
            SELECT i.instance_id FROM gridha.instances i
             WHERE greatest(i.registered_at, i.last_seen_at, i.stopped_at)
                   < now() - s.sweep_after_s * interval '1 second'
               AND NOT EXISTS (SELECT 1 FROM gridha.service_claims c
                                WHERE c.claimant = i.instance_id)
               AND NOT EXISTS (SELECT 1 FROM gridha.leases l
                                WHERE l.leader = i.instance_id)
             FOR UPDATE OF i SKIP LOCKED
        ), d AS (
            DELETE FROM gridha.instances i USING gone
             WHERE i.instance_id = gone.instance_id
            RETURNING 1
        )
        SELECT count(*)::int4 INTO swept FROM d;
    END IF;
    pruned := gridha_internal.prune_step(s.prune_chunk);
    opened := gridha_internal.id_windows_top_up();
    PERFORM gridha_internal.rate_handouts_prune();
    IF check_counts THEN
        PERFORM gridha_internal.lease_done(maintenance_tick.instance_id);
        IF gridha_internal.counts_check_due() THEN
            WITH a AS (
                SELECT c.target, count(*)::int8 AS n FROM gridha.service_claims c GROUP BY c.target
            ), k AS (
                SELECT c.target, sum(c.services)::int8 AS n FROM gridha.service_counts c GROUP BY c.target
            ), d AS (
                SELECT coalesce(a.target, k.target) AS target, coalesce(a.n, 0) - coalesce(k.n, 0) AS diff
                  FROM a FULL JOIN k ON k.target = a.target
            ), w AS (
                INSERT INTO gridha.service_counts AS c (target, shard, services)
                SELECT d.target, 0, d.diff FROM d WHERE d.diff <> 0
                 ORDER BY d.target COLLATE "C"
                ON CONFLICT (target, shard) DO UPDATE SET services = c.services + EXCLUDED.services
                RETURNING c.target
            )
            SELECT string_agg(w.target, ', ' ORDER BY w.target) INTO repaired FROM w;
            IF repaired IS NOT NULL THEN
                RAISE LOG 'gridha: repaired the service counts of targets %', repaired
                    USING DETAIL = 'The counts did not match the services there are.';
            END IF;
        END IF;
    END IF;

    DELETE FROM gridha.maintenance_ticks m
     WHERE m.duty = maintenance_tick.duty AND m.tick < tick_run
       AND m.started_at < now() - interval '1 day';
    UPDATE gridha.maintenance_ticks m
       SET finished_at = clock_timestamp(), swept_instances = swept,
           pruned_batches = pruned, opened_windows = opened
     WHERE m.duty = maintenance_tick.duty AND m.tick = tick_run;
END
$$;

COMMENT ON FUNCTION gridha_internal.maintenance_tick(uuid, text, bigint, boolean) IS
'runs the current tick of the duty under this term once (sweep, prune step, ID windows, hand-out log, with check_counts the service counts), recording it; tick_run NULL when no tick ran';

/*
 * maintenance_poll: the poll duty of a hand-out (src/leader.c calls it at
 * most once per gridha.prune_interval): leads gridha's maintenance duty
 * when it is this instance's or free, without waiting for anyone, then
 * runs the tick when one is due (its duties include a prune step) or else
 * one prune step. Returns the batches pruned.
 */
CREATE FUNCTION gridha_internal.maintenance_poll(instance_id uuid)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    t bigint;
    r record;
BEGIN
    t := gridha_internal.lease_take(instance_id, 'gridha.maintenance', false, true);
    IF t IS NULL THEN
        RETURN 0;
    END IF;
    SELECT * INTO r FROM gridha_internal.maintenance_tick(instance_id, 'gridha.maintenance', t, false);
    IF r.tick_run IS NOT NULL THEN
        RETURN r.pruned;
    END IF;
    RETURN gridha_internal.prune_step((SELECT s.prune_chunk FROM gridha_internal.lease_settings() s));
END
$$;

COMMENT ON FUNCTION gridha_internal.maintenance_poll(uuid) IS
'the poll duty of a hand-out: leads gridha''s maintenance duty if it can without waiting, runs a due tick or else one prune step; returns the batches pruned';

REVOKE ALL ON FUNCTION
    gridha_internal.lease_call(text, uuid, text, bigint),
    gridha_internal.lease_done(uuid),
    gridha_internal.lease_settings(),
    gridha_internal.lease_trylock(text),
    gridha_internal.prune_from(),
    gridha_internal.prune_from_set(timestamptz),
    gridha_internal.counts_check_due(),
    gridha_internal.lease_take(uuid, text, boolean, boolean),
    gridha_internal.lease_resign(uuid, text),
    gridha_internal.prune_step(bigint),
    gridha_internal.maintenance_tick(uuid, text, bigint, boolean),
    gridha_internal.maintenance_poll(uuid)
FROM PUBLIC;

CREATE FUNCTION gridha.try_lead(instance_id uuid, role text DEFAULT 'default')
RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
SELECT gridha.lead(instance_id, role)
$$;

COMMENT ON FUNCTION gridha.try_lead(uuid, text) IS
'deprecated since 1.2 (use lead): leads the duty named role (a new term when the leader changes) or renews this instance''s lease; returns the term, or NULL while another instance holds an unexpired lease';

CREATE FUNCTION gridha.renew_lead(instance_id uuid, duty text, term bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    soft_ms bigint;
BEGIN
    PERFORM gridha_internal.lease_call('renew_lead()', renew_lead.instance_id, renew_lead.duty, renew_lead.term);
    SELECT s.soft_ms INTO soft_ms FROM gridha_internal.lease_settings() s;
    UPDATE gridha.leases l
       SET renewed_at = now(), expires_at = now() + soft_ms * interval '1 millisecond'
     WHERE l.duty = renew_lead.duty AND l.leader = renew_lead.instance_id AND l.term = renew_lead.term;
    RETURN FOUND;
END
$$;

COMMENT ON FUNCTION gridha.renew_lead(uuid, text, bigint) IS
'renews the lease only if this instance still leads the duty under this term; false once the term has moved on';

CREATE FUNCTION gridha.resign(instance_id uuid, role text DEFAULT 'default')
RETURNS boolean
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
SELECT gridha.resign_lead(instance_id, role)
$$;

COMMENT ON FUNCTION gridha.resign(uuid, text) IS
'deprecated since 1.2 (use resign_lead): gives up this instance''s lease on the duty named role at once; true if it held it';

CREATE FUNCTION gridha.run_maintenance(
    instance_id uuid,
    duty text DEFAULT 'gridha.maintenance',
    OUT term bigint,
    OUT tick bigint,
    OUT outcome gridha.maintenance_outcome,
    OUT swept_instances integer,
    OUT pruned_batches bigint,
    OUT opened_windows integer)
RETURNS record
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r        record;
    s        record;
    latest   bigint;
    lease_ok boolean;
BEGIN
    IF gridha_internal.citus_mode() THEN
        -- the Citus mode: the same lease and tick, a prune pass by bucket
        SELECT * INTO r FROM gridha_internal.citus_run_maintenance(run_maintenance.instance_id, run_maintenance.duty);
        term := r.term;
        tick := r.tick;
        outcome := r.outcome;
        swept_instances := r.swept_instances;
        pruned_batches := r.pruned_batches;
        opened_windows := r.opened_windows;
        RETURN;
    END IF;
    PERFORM gridha_internal.lease_call('run_maintenance()', run_maintenance.instance_id, run_maintenance.duty);
    swept_instances := 0;
    pruned_batches := 0;
    opened_windows := 0;
    term := gridha_internal.lease_take(run_maintenance.instance_id, run_maintenance.duty, false, false);
    IF term IS NULL THEN
        outcome := 'not_leader';
    ELSE
        SELECT * INTO r
          FROM gridha_internal.maintenance_tick(run_maintenance.instance_id, run_maintenance.duty, term, true);
        IF r.tick_run IS NOT NULL THEN
            tick := r.tick_run;
            swept_instances := r.swept;
            pruned_batches := r.pruned;
            opened_windows := r.opened;
            outcome := 'ran';
        ELSE
            -- why no tick ran: the current tick, the highest stored, the lease
            SELECT * INTO s FROM gridha_internal.lease_settings();
            SELECT t.tick,
                   (SELECT max(p.tick) FROM gridha.maintenance_ticks p WHERE p.duty = run_maintenance.duty),
                   EXISTS (SELECT 1 FROM gridha.leases l
                            WHERE l.duty = run_maintenance.duty AND l.leader = run_maintenance.instance_id
                              AND l.term = run_maintenance.term AND l.expires_at > now())
              INTO tick, latest, lease_ok
              FROM (SELECT (floor(extract(epoch FROM now()) * 1000 / s.interval_ms) * s.interval_ms)::int8 AS tick) t;
            outcome := CASE WHEN NOT lease_ok THEN 'lost_lease'
                            WHEN latest > tick THEN 'clock_behind'
                            ELSE 'already_run' END;
        END IF;
    END IF;
    PERFORM gridha_internal.lease_done(run_maintenance.instance_id);
END
$$;

COMMENT ON FUNCTION gridha.run_maintenance(uuid, text) IS
'leads the duty (by default gridha''s own, gridha.maintenance; 1.2''s name maintenance is refused) if it can and runs the current tick once: sweeps long-gone instances, prunes final batches past gridha.retention, tops up ID windows; outcome ran, not_leader, already_run, clock_behind or lost_lease';

CREATE VIEW gridha.leaders AS
SELECT l.duty,
       l.leader,
       l.term,
       l.acquired_at,
       l.renewed_at,
       l.expires_at,
       CASE
           WHEN l.leader IS NULL THEN 'vacant'
           WHEN l.expires_at > now() THEN 'held'
           ELSE 'expired'
       END::gridha.lease_state AS state,
       t.tick AS last_tick,
       t.started_at AS last_run_at
FROM gridha.leases l
LEFT JOIN LATERAL (
    SELECT m.tick, m.started_at
    FROM gridha.maintenance_ticks m
    WHERE m.duty = l.duty
    ORDER BY m.tick DESC
    LIMIT 1
) t ON true;

COMMENT ON VIEW gridha.leaders IS
'each duty''s leader, term, lease expiry and state (held, expired, vacant), with its latest tick';

CREATE SEQUENCE gridha.id_sequence_serial;

CREATE TABLE gridha.id_sequences (
    name             text PRIMARY KEY CHECK (name <> ''),
    serial           bigint NOT NULL UNIQUE DEFAULT nextval('gridha.id_sequence_serial'),
    window_size      bigint NOT NULL CHECK (window_size > 0),
    min_open_windows integer NOT NULL CHECK (min_open_windows >= 0),
    high_water       bigint NOT NULL DEFAULT 0,
    dropped          boolean NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now()
);

ALTER SEQUENCE gridha.id_sequence_serial OWNED BY gridha.id_sequences.serial;

COMMENT ON TABLE gridha.id_sequences IS
'ID sequences (distributed hi-lo): high_water is the last id given to any window and never goes down; a dropped sequence keeps its row so that one created again under its name continues above it; serial names the incarnation';

-- No foreign key to id_sequences: each window written takes its sequence
-- row's lock first anyway, and the key-share lock a key's check would add
-- is what PostgreSQL 17 turned into "new multixact has more than one
-- updating member" under concurrent reservations. The trigger
-- id_sequences_changed removes the windows of rows deleted by hand.
CREATE TABLE gridha.id_windows (
    name         text NOT NULL,
    window_start bigint NOT NULL,
    window_end   bigint NOT NULL,
    next_id      bigint NOT NULL,
    opened_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, window_start),
    CHECK (window_start < window_end AND next_id BETWEEN window_start AND window_end)
);

COMMENT ON TABLE gridha.id_windows IS
'windows of ID sequences: ids [window_start, window_end), of which [next_id, window_end) are not reserved yet (open while next_id < window_end)';

-- Runs as the extension's owner, as the foreign key's cascade did: a role
-- an administrator let delete sequence rows needs no right on id_windows.
CREATE FUNCTION gridha_internal.id_sequences_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'gridha_id_sequences_changed'
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.id_sequences_changed() IS
'trigger: rows of gridha.id_sequences deleted by hand take their windows with them and make every backend look its next_id names up again';

CREATE TRIGGER id_sequences_changed
    AFTER DELETE OR TRUNCATE ON gridha.id_sequences
    FOR EACH STATEMENT EXECUTE FUNCTION gridha_internal.id_sequences_changed();

/*
 * The ID sequences' statements (issue 42.1: they were C string literals
 * in src/idseq.c, which keeps reserve_ids and next_id, served on SQL 1.2
 * too, and the helpers below).
 */
CREATE FUNCTION gridha_internal.id_sequence_call(call text, name text, window_size bigint DEFAULT NULL,
                                                 min_open_windows integer DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'gridha_id_sequence_call'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.id_sequence_call(text, text, bigint, integer) IS
'the checks create_id_sequence() and drop_id_sequence() make first: the name, the window size and min_open_windows, a writable transaction';

CREATE FUNCTION gridha_internal.id_sequences_invalidate(others boolean)
RETURNS void
AS 'MODULE_PATHNAME', 'gridha_id_sequences_invalidate'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.id_sequences_invalidate(boolean) IS
'a sequence was created or dropped: this backend looks its next_id names up again at once, with others every backend at commit';

CREATE FUNCTION gridha_internal.id_block_size()
RETURNS bigint
AS 'MODULE_PATHNAME', 'gridha_idseq_block_size'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.id_block_size() IS
'gridha.id_block_size: the block next_id reserves, and the room a window needs to count as open';

/*
 * id_windows_open: the agent's opening: windows up to min_open_windows
 * (of one sequence, or of all when seq_name is NULL), counting those with room
 * for a block of block ids (at most the window). A sequence whose row is
 * locked (being dropped, or a reservation opening a window) is skipped:
 * the agent has just retired windows, whose locks it holds, and a drop
 * locks the sequence before its windows. Returns the windows opened.
 */
CREATE FUNCTION gridha_internal.id_windows_open(seq_name text, block bigint)
RETURNS integer
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
WITH s AS (
    SELECT q.name,
           q.min_open_windows - (SELECT count(*) FROM gridha.id_windows w
                                  WHERE w.name = q.name
                                    AND w.window_end - w.next_id >= least($2, q.window_size))::int4 AS need
      FROM gridha.id_sequences q
     WHERE NOT q.dropped AND ($1 IS NULL OR q.name = $1)
), u AS (
    UPDATE gridha.id_sequences q
       SET high_water = q.high_water + s.need * q.window_size
      FROM s
     WHERE q.name = s.name AND s.need > 0 AND NOT q.dropped
       AND q.name IN (SELECT x.name FROM s JOIN gridha.id_sequences x ON x.name = s.name
                       WHERE s.need > 0 FOR UPDATE OF x SKIP LOCKED)
    RETURNING q.name, q.window_size, q.high_water - s.need * q.window_size AS base, s.need
), i AS (
    INSERT INTO gridha.id_windows (name, window_start, window_end, next_id)
    SELECT u.name, u.base + (g - 1) * u.window_size + 1,
           u.base + g * u.window_size + 1, u.base + (g - 1) * u.window_size + 1
      FROM u, generate_series(1, u.need) AS g
    RETURNING 1
)
SELECT count(*)::int4 FROM i
$$;

COMMENT ON FUNCTION gridha_internal.id_windows_open(text, bigint) IS
'opens windows past the high water up to min_open_windows with room for a block of block ids (one sequence, or all for NULL), skipping sequences locked by others; returns how many';

/*
 * id_windows_top_up: the window agent, a maintenance duty: windows without
 * room for a block of gridha.id_block_size ids are retired (full ones too;
 * the high water remembers them, and their last few ids become a gap
 * instead of lingering; windows in use right now are left alone), then
 * every live sequence gets min_open_windows windows with room.
 */
CREATE FUNCTION gridha_internal.id_windows_top_up()
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    block bigint := gridha_internal.id_block_size();
BEGIN
    DELETE FROM gridha.id_windows w
     WHERE (w.name, w.window_start) IN (
        SELECT f.name, f.window_start FROM gridha.id_windows f
          JOIN gridha.id_sequences q ON q.name = f.name
         WHERE f.window_end - f.next_id < least(block, q.window_size)
           FOR UPDATE OF f SKIP LOCKED);
    RETURN gridha_internal.id_windows_open(NULL, block);
END
$$;

COMMENT ON FUNCTION gridha_internal.id_windows_top_up() IS
'the ID window agent''s maintenance step: retires windows without room for a block and opens windows up to each sequence''s min_open_windows; returns how many it opened';

REVOKE ALL ON FUNCTION
    gridha_internal.id_sequence_call(text, text, bigint, integer),
    gridha_internal.id_sequences_invalidate(boolean),
    gridha_internal.id_block_size(),
    gridha_internal.id_windows_open(text, bigint),
    gridha_internal.id_windows_top_up()
FROM PUBLIC;

CREATE FUNCTION gridha.create_id_sequence(name text, window_size bigint DEFAULT 1000000,
                                          min_open_windows integer DEFAULT 4)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM gridha_internal.id_sequence_call('create_id_sequence()', create_id_sequence.name,
                                             create_id_sequence.window_size, create_id_sequence.min_open_windows);
    -- a name dropped before is created again above everything its earlier
    -- incarnation handed out: its row, high water and all, is kept
    INSERT INTO gridha.id_sequences AS q (name, window_size, min_open_windows)
    VALUES (create_id_sequence.name, create_id_sequence.window_size, create_id_sequence.min_open_windows)
    ON CONFLICT (name) DO UPDATE
       SET serial = nextval('gridha.id_sequence_serial'),
           window_size = EXCLUDED.window_size,
           min_open_windows = EXCLUDED.min_open_windows,
           dropped = false, created_at = now()
     WHERE q.dropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'id sequence "%" already exists', create_id_sequence.name
            USING ERRCODE = 'RG012',
                  HINT = 'Use it as it is, or drop it first with gridha.drop_id_sequence().';
    END IF;
    -- its first windows (a fresh window counts whatever the block size)
    PERFORM gridha_internal.id_windows_open(create_id_sequence.name, create_id_sequence.window_size);
    PERFORM gridha_internal.id_sequences_invalidate(true);
END
$$;

COMMENT ON FUNCTION gridha.create_id_sequence(text, bigint, integer) IS
'creates an ID sequence and opens its first min_open_windows windows; a name dropped before continues above its old ids';

CREATE FUNCTION gridha.drop_id_sequence(name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM gridha_internal.id_sequence_call('drop_id_sequence()', drop_id_sequence.name);
    -- the row and its high water stay, so that a sequence created again
    -- under the name never repeats an id; its windows go
    UPDATE gridha.id_sequences q SET dropped = true
     WHERE q.name = drop_id_sequence.name AND NOT q.dropped;
    IF NOT FOUND THEN
        PERFORM gridha_internal.id_sequences_invalidate(false);
        RETURN false;
    END IF;
    DELETE FROM gridha.id_windows w WHERE w.name = drop_id_sequence.name;
    PERFORM gridha_internal.id_sequences_invalidate(true);
    RETURN true;
END
$$;

COMMENT ON FUNCTION gridha.drop_id_sequence(text) IS
'drops an ID sequence and its windows (its high water is kept); false if there was none';

CREATE FUNCTION gridha.reserve_ids(name text, count integer)
RETURNS int8range
AS 'MODULE_PATHNAME', 'gridha_reserve_ids'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.reserve_ids(text, integer) IS
'reserves count contiguous ids inside one open window (opening one when none has room); concurrent callers never wait on each other';

CREATE FUNCTION gridha.next_id(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'gridha_next_id'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.next_id(text) IS
'the next id of the sequence from this backend''s block, reserving a block of gridha.id_block_size ids when it is spent';

CREATE VIEW gridha.id_sequence_status AS
SELECT q.name,
       q.window_size,
       q.min_open_windows,
       q.high_water,
       count(w.window_start) FILTER (WHERE w.next_id < w.window_end) AS open_windows,
       coalesce(sum(w.window_end - w.next_id), 0) AS free_ids
FROM gridha.id_sequences q
LEFT JOIN gridha.id_windows w ON w.name = q.name
WHERE NOT q.dropped
GROUP BY q.name;

COMMENT ON VIEW gridha.id_sequence_status IS
'each ID sequence with its high water, its open windows and how many ids they still hold';

CREATE TABLE gridha.target_rate_state (
    target      text PRIMARY KEY REFERENCES gridha.targets ON DELETE CASCADE ON UPDATE CASCADE,
    tat         timestamptz NOT NULL DEFAULT '-infinity',
    slots_taken bigint NOT NULL DEFAULT 0
);

COMMENT ON TABLE gridha.target_rate_state IS
'shared state of each rate-limited target: its theoretical arrival time (tat) and how many slots were taken; a hand-out at t conforms when t >= tat - (rate_burst - 1) * rate_interval';

CREATE TABLE gridha.rate_handouts (
    target      text NOT NULL,
    slot_at     timestamptz NOT NULL,
    service_id  text NOT NULL,
    batch_id    text NOT NULL,
    instance_id uuid NOT NULL,
    epoch       bigint NOT NULL
);

CREATE INDEX rate_handouts_target_slot ON gridha.rate_handouts (target, slot_at);

COMMENT ON TABLE gridha.rate_handouts IS
'every hand-out of a rate-limited target, at the time of its slot; maintenance forgets rows after a day';

/*
 * targets_rate_changed: a new rate applies at once. The time a target still
 * owes under the old interval is scaled to the new one; without a limit
 * nothing is owed. The rate-state rows of every target the statement
 * updates are locked first, in name order, as a hand-out locks them
 * (ratelimit.c); rewritten in the order the UPDATE met the targets, a
 * change of several targets deadlocked with a hand-out of them (1.3;
 * isolation spec lock-rate-change). The statement's targets are its
 * transition table, which a trigger that names columns cannot have: the
 * trigger is on every UPDATE, and its WHEN picks the rate changes.
 */
CREATE FUNCTION gridha_internal.targets_rate_changed()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM gridha.target_rate_state r
     WHERE r.target IN (SELECT n.target FROM targets_rate_new n)
     ORDER BY r.target COLLATE "C"
       FOR NO KEY UPDATE;
    UPDATE gridha.target_rate_state r
       SET tat = CASE
               WHEN OLD.rate_interval IS NOT NULL AND NEW.rate_interval IS NOT NULL
                    AND r.tat > clock_timestamp()
               THEN clock_timestamp() + (r.tat - clock_timestamp())
                    * (extract(epoch FROM NEW.rate_interval) / extract(epoch FROM OLD.rate_interval))::float8
               ELSE least(r.tat, clock_timestamp())
           END
     WHERE r.target = NEW.target;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION gridha_internal.targets_rate_changed() IS
'trigger: rescales a target''s rate state when its rate_interval changes, so the new rate applies at once';

CREATE TRIGGER targets_rate_changed
    AFTER UPDATE ON gridha.targets
    REFERENCING NEW TABLE AS targets_rate_new
    FOR EACH ROW
    WHEN (OLD.rate_interval IS DISTINCT FROM NEW.rate_interval)
    EXECUTE FUNCTION gridha_internal.targets_rate_changed();

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
CREATE FUNCTION gridha_internal.targets_name_change()
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

COMMENT ON FUNCTION gridha_internal.targets_name_change() IS
'trigger: a statement that may rename or delete targets first takes gridha.service_claims in SHARE ROW EXCLUSIVE mode, so that its cascades never deadlock with a hand-out, a report or a backend''s totals row';

REVOKE ALL ON FUNCTION gridha_internal.targets_name_change() FROM PUBLIC;

CREATE TRIGGER targets_name_change
    BEFORE UPDATE OF target OR DELETE ON gridha.targets
    FOR EACH STATEMENT
    EXECUTE FUNCTION gridha_internal.targets_name_change();

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
CREATE FUNCTION gridha_internal.targets_totals_follow()
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
                settled_committed, settled_invalid, settled_resubmitted, heads_repaired,
                status_omitted)
        SELECT NEW.target, o.slot, o.claims_taken_over, o.stale_writes_refused,
               o.settled_enqueued, o.settled_committed, o.settled_invalid,
               o.settled_resubmitted, o.heads_repaired, o.status_omitted
          FROM gridha.target_totals o
         WHERE o.target = OLD.target
         ORDER BY o.slot
        ON CONFLICT (target, slot) DO UPDATE
           SET claims_taken_over = t.claims_taken_over + excluded.claims_taken_over,
               stale_writes_refused = t.stale_writes_refused + excluded.stale_writes_refused,
               settled_enqueued = t.settled_enqueued + excluded.settled_enqueued,
               settled_committed = t.settled_committed + excluded.settled_committed,
               settled_invalid = t.settled_invalid + excluded.settled_invalid,
               settled_resubmitted = t.settled_resubmitted + excluded.settled_resubmitted,
               heads_repaired = t.heads_repaired + excluded.heads_repaired,
               status_omitted = t.status_omitted + excluded.status_omitted;
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

COMMENT ON FUNCTION gridha_internal.targets_totals_follow() IS
'trigger: a renamed target''s rows of gridha.target_totals move to its new name; a deleted target''s rows go with it';

REVOKE ALL ON FUNCTION gridha_internal.targets_totals_follow() FROM PUBLIC;

CREATE TRIGGER targets_totals_follow
    AFTER UPDATE OF target OR DELETE ON gridha.targets
    FOR EACH ROW
    EXECUTE FUNCTION gridha_internal.targets_totals_follow();

/*
 * targets_rate_inval: a hand-out takes the rate-limited path only while
 * some target is limited, which each backend remembers; every change of
 * gridha.targets makes it ask again once the change commits.
 */
CREATE FUNCTION gridha_internal.targets_rate_inval()
RETURNS trigger
AS 'MODULE_PATHNAME', 'gridha_targets_rate_inval'
LANGUAGE C
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.targets_rate_inval() IS
'trigger: a change of gridha.targets makes every backend check again, at its commit, whether any target is rate-limited';

CREATE TRIGGER targets_rate_inval
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON gridha.targets
    FOR EACH STATEMENT EXECUTE FUNCTION gridha_internal.targets_rate_inval();

/*
 * citus_target_rates(): gridha.target_rates' rows in the Citus mode (none
 * outside it): each target of gridha.bucket_targets with its limit, the
 * slots taken and when its next slot opens, from the state the mode's
 * hand-outs keep in gridha.bucket_rates (microseconds since the epoch).
 */
CREATE FUNCTION gridha_internal.citus_target_rates()
RETURNS TABLE (target text, rate_interval interval, rate_burst integer, slots_taken bigint,
               next_slot_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF NOT gridha_internal.citus_mode() THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT x.target, x.rate_interval, x.rate_burst, r.slots_taken,
           CASE
               WHEN x.rate_interval IS NULL THEN NULL
               WHEN x.rate_burst = 0 THEN 'infinity'::timestamptz
               ELSE greatest(pg_catalog.now(),
                             pg_catalog.to_timestamp((r.tat_us - (x.rate_burst - 1) * x.rate_interval_us)
                                                     / 1000000.0::float8))
           END
      FROM gridha.bucket_rates r
      JOIN gridha.bucket_targets x ON x.target = r.target
     WHERE r.bucket = 0;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_target_rates() IS
'Citus mode: gridha.target_rates'' rows (none outside the mode), from the limits on gridha.bucket_targets and their state on gridha.bucket_rates';

REVOKE ALL ON FUNCTION gridha_internal.citus_target_rates() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gridha_internal.citus_target_rates() TO gridha_submitter, gridha_admin;

CREATE VIEW gridha.target_rates AS
SELECT t.target,
       t.rate_interval,
       t.rate_burst,
       coalesce(s.slots_taken, 0) AS slots_taken,
       CASE
           WHEN t.rate_interval IS NULL THEN NULL
           WHEN t.rate_burst = 0 THEN 'infinity'::timestamptz
           ELSE greatest(now(), coalesce(s.tat, '-infinity') - (t.rate_burst - 1) * t.rate_interval)
       END AS next_slot_at
FROM gridha.targets t
LEFT JOIN gridha.target_rate_state s ON s.target = t.target
WHERE NOT gridha_internal.citus_mode()
UNION ALL
SELECT r.* FROM gridha_internal.citus_target_rates() r;

COMMENT ON VIEW gridha.target_rates IS
'each target''s rate limit and when its next hand-out slot opens (NULL: not limited; infinity: rate_burst 0 pauses it); in the Citus mode from the state its hand-outs keep (gridha.bucket_rates)';

/*
 * The rate limits' statements off the hand-out (issue 42.1: they were C
 * string literals in src/ratelimit.c, which keeps the hand-out's own:
 * which targets are closed, the slots, the log). A worker calls
 * rate_wait_ms as its own role, as it calls worker_orphans: it reads
 * gridha's tables as their owner.
 */
CREATE FUNCTION gridha_internal.rate_wait_ms(instance_id uuid)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    tg text[];
BEGIN
    IF NOT gridha_internal.citus_mode() THEN
        RETURN (SELECT ceil(extract(epoch FROM min(r.next_slot_at) - clock_timestamp()) * 1000)::int8
                  FROM gridha.target_rates r
                 WHERE r.next_slot_at < 'infinity'
                   AND EXISTS (SELECT 1 FROM gridha.service_claims c
                                WHERE c.claimant = rate_wait_ms.instance_id AND c.target = r.target
                                  AND c.ready_at <= now()
                                  AND coalesce(c.soft_expiry, 'infinity') > now()));
    END IF;
    -- the Citus mode: the targets of the ready heads in the instance's
    -- buckets (one read over the shards), then their rates
    SELECT pg_catalog.array_agg(DISTINCT s.target) INTO tg
      FROM gridha.bucket_services s
      JOIN gridha.bucket_claims c ON c.bucket = s.bucket
     WHERE c.holder = rate_wait_ms.instance_id AND s.ready_at <= now();
    RETURN (SELECT ceil(extract(epoch FROM min(r.next_slot_at) - clock_timestamp()) * 1000)::int8
              FROM gridha_internal.citus_target_rates() r
             WHERE r.next_slot_at < 'infinity' AND r.target = ANY (tg));
END
$$;

COMMENT ON FUNCTION gridha_internal.rate_wait_ms(uuid) IS
'for an instance handed nothing: ms until the next slot opens for a rate-limited target of one of its ready heads (NULL: none), in the Citus mode too; a worker sleeps no longer';

CREATE FUNCTION gridha_internal.rate_handouts_prune()
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DELETE FROM gridha.rate_handouts WHERE slot_at < now() - interval '1 day'
$$;

COMMENT ON FUNCTION gridha_internal.rate_handouts_prune() IS
'forgets the rows of gridha.rate_handouts older than a day';

REVOKE ALL ON FUNCTION gridha_internal.rate_wait_ms(uuid), gridha_internal.rate_handouts_prune() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gridha_internal.rate_wait_ms(uuid) TO gridha_submitter;

REVOKE ALL ON gridha.leases, gridha.maintenance_ticks, gridha.id_sequences, gridha.id_windows,
    gridha.target_rate_state, gridha.rate_handouts, gridha.leaders, gridha.id_sequence_status,
    gridha.target_rates FROM PUBLIC;
REVOKE ALL ON SEQUENCE gridha.id_sequence_serial FROM PUBLIC;
REVOKE ALL ON FUNCTION
    gridha.try_lead(uuid, text),
    gridha.renew_lead(uuid, text, bigint),
    gridha.resign(uuid, text),
    gridha.run_maintenance(uuid, text),
    gridha.create_id_sequence(text, bigint, integer),
    gridha.drop_id_sequence(text),
    gridha.reserve_ids(text, integer),
    gridha.next_id(text),
    gridha_internal.id_sequences_changed(),
    gridha_internal.targets_rate_changed(),
    gridha_internal.targets_rate_inval()
FROM PUBLIC;

-- Submitters lead and run maintenance (as instances they own); producers
-- and submitters take ids; admins create and drop ID sequences.
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

-- ---------------------------------------------------------------------------
-- What a logical backup keeps (pg_dump, pg_restore)
-- ---------------------------------------------------------------------------
--
-- Every table with state that matters is dumped with its rows: batches in
-- every status, the services' claims and queue state, targets, instances
-- (with their leases, which a restore finds expired or soon expiring),
-- leader leases and maintenance ticks (terms and ticks never go back), ID
-- sequences and their windows (no id is handed out twice), rate state. The
-- restore keeps them as they were: a batch restored with its seq keeps its
-- place (batches_before_insert), and the service counts are rebuilt by the
-- triggers of service_claims as its rows come back. Not dumped: the
-- counts themselves and the day's log of rate-limited hand-outs.

/*
 * targets_before_insert: the row 'default' is created with the extension,
 * so a restore, which inserts the row the dump holds, would collide with
 * it. While that row is untouched (as CREATE EXTENSION made it) and no
 * service uses it, an INSERT of a row named 'default' replaces it.
 */
CREATE FUNCTION gridha_internal.targets_before_insert()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, gridha, pg_temp
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

COMMENT ON FUNCTION gridha_internal.targets_before_insert() IS
'trigger: an INSERT of a row named default replaces the untouched default row CREATE EXTENSION made (what a restore does)';

CREATE TRIGGER targets_restore_default
    BEFORE INSERT ON gridha.targets
    FOR EACH ROW EXECUTE FUNCTION gridha_internal.targets_before_insert();

REVOKE ALL ON FUNCTION gridha_internal.targets_before_insert(), gridha_internal.service_claims_count(),
    gridha_internal.instances_changed() FROM PUBLIC;
REVOKE ALL ON gridha.service_counts, gridha.target_totals, gridha.queue_progress FROM PUBLIC;

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
CREATE FUNCTION gridha_internal.worker_limit_slots(
    OUT instance_id uuid,
    OUT target text,
    OUT in_flight integer,
    OUT inflight_limit integer,
    OUT failures bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'gridha_worker_limits'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.worker_limit_slots() IS
'each running worker''s requests in flight and concurrency limit per target it talked to lately, with the overload signals it saw (empty without preload)';

CREATE VIEW gridha.worker_limits AS
SELECT l.instance_id, l.target, l.in_flight AS requests_in_flight, l.inflight_limit, l.failures
FROM gridha_internal.worker_limit_slots() l;

COMMENT ON VIEW gridha.worker_limits IS
'one row per running worker and target: requests in flight, the worker''s current concurrency limit (at most gridha.worker_inflight) and the overload signals since it started';

REVOKE ALL ON FUNCTION gridha_internal.worker_limit_slots() FROM PUBLIC;
REVOKE ALL ON gridha.worker_limits FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gridha_internal.worker_limit_slots() TO gridha_submitter, gridha_admin;
GRANT SELECT ON gridha.worker_limits TO gridha_submitter, gridha_admin;

/*
 * worker_register: a background worker's instance row, with the worker's
 * role as its owner. Only a gridha background worker process may call it
 * (worker_owner checks the process, not the role), so no SQL client can
 * make an instance of kind worker.
 */
CREATE FUNCTION gridha_internal.worker_owner(instance_id uuid)
RETURNS name
AS 'MODULE_PATHNAME', 'gridha_worker_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.worker_owner(uuid) IS
'the checks of worker_register() (refused outside a gridha worker; instance_id given; a writable transaction) and the worker''s role: its instance''s owner';

CREATE FUNCTION gridha_internal.worker_register(instance_id uuid, label text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r name := gridha_internal.worker_owner(worker_register.instance_id);
BEGIN
    -- the Citus mode (docs/citus.md, "Built: the workers"): an instance of
    -- gridha.bucket_instances (a reference table), owned by the worker's
    -- role, serving every target (serves NULL); a read of the reference
    -- table first, then the write (on every node, in this transaction)
    IF gridha_internal.citus_mode() THEN
        PERFORM 1 FROM gridha.bucket_instances i WHERE i.instance_id = worker_register.instance_id;
        IF FOUND THEN
            RETURN false;
        END IF;
        INSERT INTO gridha.bucket_instances (instance_id, owner, label, registered_at, serves)
        VALUES (worker_register.instance_id, r, worker_register.label, pg_catalog.clock_timestamp(), NULL);
        RETURN true;
    END IF;
    INSERT INTO gridha.instances AS i (instance_id, label, kind, owner)
    VALUES (worker_register.instance_id, worker_register.label, 'worker', r)
    ON CONFLICT (instance_id) DO NOTHING;
    RETURN FOUND;
END
$$;

COMMENT ON FUNCTION gridha_internal.worker_register(uuid, text) IS
'registers the calling background worker''s instance (kind worker, owned by the worker''s role; in the Citus mode in gridha.bucket_instances, serving every target); refused outside a gridha worker; false when the id has a row already';

REVOKE ALL ON FUNCTION gridha_internal.worker_owner(uuid) FROM PUBLIC;

/*
 * worker_orphans: the heads a background worker handed out and still has
 * submitting under its claim, for the worker to find those whose report
 * failed (it reports them delayed). Read by the worker as its own role.
 */
CREATE FUNCTION gridha_internal.worker_orphans(instance_id uuid)
RETURNS TABLE (service_id text, batch_id text, epoch bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    -- the Citus mode: the heads of the buckets the instance holds, handed
    -- out to it at the bucket's epoch (one read over every shard, no lock)
    IF gridha_internal.citus_mode() THEN
        RETURN QUERY
        SELECT s.service_id, b.batch_id, b.epoch
          FROM gridha.bucket_claims c
          JOIN gridha.bucket_services s ON s.bucket = c.bucket
          JOIN gridha.bucket_batches b ON b.bucket = s.bucket AND b.service_id = s.service_id
                                      AND b.seq = s.head_seq
         WHERE c.holder = worker_orphans.instance_id AND s.in_flight
           AND b.status = 'submitting' AND b.epoch = c.epoch
           AND b.instance_id = worker_orphans.instance_id;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT b.service_id, b.batch_id, b.epoch
      FROM gridha.service_claims c
      JOIN gridha.batches b ON b.service_id = c.service_id AND b.seq = c.head_seq
     WHERE c.claimant = worker_orphans.instance_id AND c.in_flight
       AND b.status = 'submitting' AND b.epoch = c.epoch
       AND b.instance_id = worker_orphans.instance_id;
END
$$;

COMMENT ON FUNCTION gridha_internal.worker_orphans(uuid) IS
'the heads an instance handed out that are still submitting under its claim and epoch (in the Citus mode: its buckets and their epochs); a worker reports those it does not have in hand delayed';

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
    IF pg_catalog.to_regclass('gridha.bucket_claims') IS NOT NULL THEN
        RAISE EXCEPTION 'gridha is in Citus mode, where this function does not run'
            USING ERRCODE = 'RG035',
                  DETAIL = 'gridha.citus_setup laid gridha out by bucket in this database; gridha.service_claims, which this function reads, stays empty there.',
                  HINT = 'In the Citus mode a service stays on the target it was created on: its services are not moved (docs/citus.md).';
    END IF;
    IF move_service.service_id IS NULL OR move_service.target IS NULL THEN
        RAISE EXCEPTION 'service_id and target must not be null' USING ERRCODE = '22004';
    END IF;
    -- gridha.service_claims before any row a rename or delete of targets
    -- locks (it takes the table first: trigger targets_name_change), then
    -- the target row, then the claim: the lock order of enqueue
    -- (docs/concurrency.md)
    LOCK TABLE gridha.service_claims IN ROW EXCLUSIVE MODE;
    PERFORM 1 FROM gridha.targets t WHERE t.target = move_service.target FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown target "%"', move_service.target
            USING ERRCODE = 'RG006',
                  HINT = 'Add it first: INSERT INTO gridha.targets (target, ...) VALUES (...).';
    END IF;
    SELECT c.target, c.in_flight INTO from_target, busy
      FROM gridha.service_claims c
     WHERE c.service_id = move_service.service_id
       FOR NO KEY UPDATE;
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
    IF pg_catalog.to_regclass('gridha.bucket_claims') IS NOT NULL THEN
        RAISE EXCEPTION 'gridha is in Citus mode, where this function does not run'
            USING ERRCODE = 'RG035',
                  DETAIL = 'gridha.citus_setup laid gridha out by bucket in this database; gridha.instances, which this function writes, stays empty there.',
                  HINT = 'The Citus mode has no instances table yet: only the role that took a bucket (gridha.bucket_acquire), its members and superusers act as its holder (docs/citus.md).';
    END IF;
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
'gives an instance an owner, or confirms a restored instance''s owner on this cluster (administrators): only members of that role may act as it; an instance without an owner, or whose owner is not confirmed here, is refused to everyone but superusers';

REVOKE ALL ON FUNCTION gridha_internal.worker_register(uuid, text), gridha_internal.worker_orphans(uuid),
    gridha.move_service(text, text),
    gridha.set_instance_owner(uuid, regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gridha_internal.worker_register(uuid, text), gridha_internal.worker_orphans(uuid)
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
LANGUAGE C VOLATILE SECURITY DEFINER;

COMMENT ON FUNCTION gridha.report_submission(uuid, text, text, bigint, gridha.submission_outcome, text) IS
'records the result of submitting a batch, the outcome typed: accepted -> pending, delayed -> delayed with backoff, rejected -> invalid; refused for a stale epoch';

CREATE FUNCTION gridha.report_status(instance_id uuid, service_id text, batch_id text, epoch bigint,
                                     status gridha.ledger_status, detail text DEFAULT NULL)
RETURNS gridha.batch_status
AS 'MODULE_PATHNAME', 'gridha_report_status_enum'
LANGUAGE C VOLATILE SECURITY DEFINER;

COMMENT ON FUNCTION gridha.report_status(uuid, text, text, bigint, gridha.ledger_status, text) IS
'records what the ledger says of an in-flight batch, the status typed: pending, valid, committed, invalid or unknown, with an optional detail stored on the batch; refused for a stale epoch';

CREATE FUNCTION gridha.report_submissions(instance_id uuid, reports gridha.submission_report[])
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, sqlstate text, message text)
AS 'MODULE_PATHNAME', 'gridha_report_submission_rows'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 100;

COMMENT ON FUNCTION gridha.report_submissions(uuid, gridha.submission_report[]) IS
'many report_submission in one transaction, one row per batch: one result row per batch, in the order given, with its new status, or the SQLSTATE and message that refused it (a refused row does not undo the others)';

CREATE FUNCTION gridha.report_statuses(instance_id uuid, reports gridha.status_report[])
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, sqlstate text, message text)
AS 'MODULE_PATHNAME', 'gridha_report_status_rows'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 100;

COMMENT ON FUNCTION gridha.report_statuses(uuid, gridha.status_report[]) IS
'many report_status in one transaction, one row per batch with an optional detail: one result row per batch with its new status, or the SQLSTATE and message that refused it';

CREATE FUNCTION gridha.lead(instance_id uuid, duty text DEFAULT 'default')
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    t bigint;
BEGIN
    PERFORM gridha_internal.lease_call('lead()', lead.instance_id, lead.duty);
    t := gridha_internal.lease_take(lead.instance_id, lead.duty, true, false);
    PERFORM gridha_internal.lease_done(lead.instance_id);
    RETURN t;
END
$$;

COMMENT ON FUNCTION gridha.lead(uuid, text) IS
'leads the duty (a new term when the leader changes) or renews this instance''s lease on it; returns the term, or NULL while another instance holds an unexpired lease; duties named gridha.* are gridha''s own and refused (RG025)';

CREATE FUNCTION gridha.resign_lead(instance_id uuid, duty text DEFAULT 'default')
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    PERFORM gridha_internal.lease_call('resign_lead()', resign_lead.instance_id, resign_lead.duty);
    RETURN gridha_internal.lease_resign(resign_lead.instance_id, resign_lead.duty);
END
$$;

COMMENT ON FUNCTION gridha.resign_lead(uuid, text) IS
'gives up this instance''s lease on the duty at once; true if it held it';

REVOKE ALL ON FUNCTION
    gridha.report_submission(uuid, text, text, bigint, gridha.submission_outcome, text),
    gridha.report_status(uuid, text, text, bigint, gridha.ledger_status, text),
    gridha.report_submissions(uuid, gridha.submission_report[]),
    gridha.report_statuses(uuid, gridha.status_report[]),
    gridha.lead(uuid, text),
    gridha.resign_lead(uuid, text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    gridha.report_submission(uuid, text, text, bigint, gridha.submission_outcome, text),
    gridha.report_status(uuid, text, text, bigint, gridha.ledger_status, text),
    gridha.report_submissions(uuid, gridha.submission_report[]),
    gridha.report_statuses(uuid, gridha.status_report[]),
    gridha.lead(uuid, text),
    gridha.resign_lead(uuid, text)
TO gridha_submitter;

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
SELECT pg_catalog.pg_extension_config_dump('gridha.session_keys', '');
SELECT pg_catalog.pg_extension_config_dump('gridha.target_totals', '');

-- ---------------------------------------------------------------------------
-- 1.2: retention, counters and metrics (issue 28)
-- ---------------------------------------------------------------------------

-- The prune step walks this index in creation order (a batch finished
-- longer than the retention ago was created before that too) and keeps the
-- final ones finished before the cutoff. No rewrite of a batch changes
-- created_at, so the hand-out's, the submission's and the final report's
-- rewrites all stay HOT updates. See src/leader.c and docs/operations.md.
CREATE INDEX batches_created ON gridha.batches (created_at);

CREATE FUNCTION gridha.prune_batches(max_batches integer DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    IF gridha_internal.citus_mode() THEN
        RETURN gridha_internal.citus_prune_batches(max_batches);
    END IF;
    RETURN gridha_internal.prune_step(gridha_internal.lease_call('prune_batches()', NULL, NULL, max_batches));
END
$$;

COMMENT ON FUNCTION gridha.prune_batches(integer) IS
'one prune step by hand: deletes at most max_batches (NULL: gridha.prune_chunk) committed or invalid batches finished longer than gridha.retention ago, oldest first; returns how many (administrators)';

REVOKE ALL ON FUNCTION gridha.prune_batches(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gridha.prune_batches(integer) TO gridha_admin;

-- Running totals per service, kept by the reports (a final status adds one
-- to committed_total or invalid_total) and the hand-out (a batch handed out
-- again adds one to resubmitted_total) on the claim row they rewrite
-- anyway: no extra row, no extra lock. Never lowered by retention: pruned
-- batches stay counted. enqueued is tail_seq.
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
 *
 * That statement is not run in the Citus mode (its one-time filter,
 * citus_mode(), is false there); the mode's rows follow it
 * (gridha_internal.citus_metrics, none on one server).
 */
CREATE VIEW gridha.metrics AS
SELECT o.* FROM (
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
       coalesce(x.stale, 0)::bigint AS stale_writes_refused_total,
       coalesce(x.repaired, 0)::bigint AS heads_repaired_total,
       coalesce(x.omitted, 0)::bigint AS status_omitted_total
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
           sum(o.settled_invalid) AS invalid, sum(o.settled_resubmitted) AS resubmitted,
           sum(o.heads_repaired) AS repaired, sum(o.status_omitted) AS omitted
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
       NULL::bigint,
       NULL::bigint,
       NULL::bigint
FROM gridha.instances i
WHERE i.soft_expiry IS NOT NULL
) o
WHERE NOT gridha_internal.citus_mode()
UNION ALL
SELECT m.* FROM gridha_internal.citus_metrics() m;

COMMENT ON VIEW gridha.metrics IS
'Prometheus-style metrics: one row per target (gauges backlog, oldest_ready_age_seconds, in_flight; running totals enqueued_total, committed_total, invalid_total, resubmitted_total, claims_taken_over_total, stale_writes_refused_total, heads_repaired_total, status_omitted_total) and one per instance with a lease (gauges in_flight, claims_held, lease_remaining_seconds); reads no batch';

REVOKE ALL ON gridha.metrics FROM PUBLIC;
GRANT SELECT ON gridha.metrics TO gridha_submitter, gridha_admin;

-- --- issue 43.2: the Citus mode (citus_setup, the per-bucket functions) ---
--
-- docs/citus.md, "Built". gridha.citus_setup lays gridha out by bucket on
-- the coordinator of a Citus cluster: three tables of its own, distributed
-- by bucket and co-located (gridha.bucket_claims, gridha.bucket_services,
-- gridha.bucket_batches; created by the call, so that Citus creates and
-- keeps them on every node, which it does not do for an extension's own
-- tables; and the instances' reference table gridha.bucket_instances), and the per-bucket functions below made Citus distributed
-- functions with the bucket as distribution argument: `SELECT f(bucket,
-- ...)` as a statement of its own is sent whole to the node holding the
-- bucket, where every statement of f reads and locks that bucket's shard
-- only. No triggers; every time a statement needs is read into a variable
-- first (Citus refuses now() inside CASE and COALESCE on distributed
-- tables). Outside the mode the per-bucket functions refuse (RG037).

/*
 * bucket_of(service_id, buckets): the service's bucket, 0 .. buckets - 1
 * (NULL for a NULL argument). Immutable, so that a call with constants
 * folds to a constant (Citus routes a distributed function's call by that
 * value); the planner folds it with its SET clause too.
 */
CREATE FUNCTION gridha.bucket_of(service_id text, buckets integer DEFAULT 64)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
SELECT ((pg_catalog.hashtextextended($1, 0) & 9223372036854775807) % $2)::integer
$$;

COMMENT ON FUNCTION gridha.bucket_of(text, integer) IS
'the bucket of a service among buckets (the count gridha.citus_setup laid out): an immutable hash of the id, the same on every node and release';

-- What a per-bucket hand-out returns: one value (Citus delegates only a
-- lone SELECT f(...), so the hand-out cannot return a set), with its
-- service's target.
CREATE TYPE gridha.bucket_batch AS (
    service_id text,
    batch_id   text,
    seq        bigint,
    payload    bytea,
    epoch      bigint,
    attempts   integer,
    target     text
);

COMMENT ON TYPE gridha.bucket_batch IS
'a batch handed out by gridha.bucket_next_batch (Citus mode): its service, id, place in the queue, payload, the bucket''s epoch, how often it was handed out, and its service''s target';

/*
 * citus_setup(buckets): the Citus mode, once, on the coordinator of a
 * fresh database. Refuses (changing nothing) without Citus or off the
 * coordinator (RG031), a second time (RG034, also to a setup that waited
 * for a concurrent one), a bucket count that is not a power of two between
 * citus.shard_count and 16384 (RG033), and gridha tables that hold rows
 * (RG032; they stay locked against writes to the end of the setup), the
 * ID sequences excepted: they stay, served from the coordinator.
 * Returns the bucket count.
 */
CREATE FUNCTION gridha.citus_setup(buckets integer DEFAULT 64)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    coordinator boolean;
    has_rows boolean;
    shards integer;
    t text;
    f text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'citus') THEN
        RAISE EXCEPTION 'gridha.citus_setup needs Citus, which is not installed in database "%"',
                        current_database()
            USING ERRCODE = 'RG031',
                  DETAIL = 'The Citus mode distributes gridha''s work over a Citus cluster; without Citus there is nothing to set up.',
                  HINT = 'On one server, use gridha as it is. For the Citus mode: preload citus before gridha, CREATE EXTENSION citus and add the workers on the coordinator, then CREATE EXTENSION gridha and call gridha.citus_setup there.';
    END IF;
    EXECUTE 'SELECT pg_catalog.citus_is_coordinator()' INTO coordinator;
    IF NOT coordinator THEN
        RAISE EXCEPTION 'gridha.citus_setup runs on the coordinator of a Citus cluster, and this node is not one'
            USING ERRCODE = 'RG031',
                  DETAIL = 'This node is a worker, or no node has been added to its cluster.',
                  HINT = 'Call it on the coordinator, after citus_set_coordinator_host and citus_add_node.';
    END IF;
    -- From here to the commit no row enters gridha's tables, and a second
    -- setup waits here: after this one commits it finds the bucket tables
    -- (RG034). The tables in gridha's lock order (docs/concurrency.md).
    LOCK TABLE gridha.service_claims, gridha.batches, gridha.instances, gridha.leases, gridha.id_sequences
        IN SHARE ROW EXCLUSIVE MODE;
    IF pg_catalog.to_regclass('gridha.bucket_claims') IS NOT NULL THEN
        RAISE EXCEPTION 'gridha is already in Citus mode in this database'
            USING ERRCODE = 'RG034',
                  DETAIL = 'gridha.citus_setup ran before: gridha.bucket_claims exists.',
                  HINT = 'Nothing to do: the layout cannot be changed in place (Citus does not undistribute it); to change the bucket count, set up a new database and move the batches there.';
    END IF;
    IF buckets IS NULL THEN
        RAISE EXCEPTION 'the bucket count must not be NULL' USING ERRCODE = '22004';
    END IF;
    shards := pg_catalog.current_setting('citus.shard_count')::integer;
    IF buckets < 1 OR buckets > 16384 OR (buckets & (buckets - 1)) <> 0 OR buckets < shards THEN
        RAISE EXCEPTION 'cannot lay gridha out in % buckets', buckets
            USING ERRCODE = 'RG033',
                  DETAIL = format('The bucket count must be a power of two from citus.shard_count (%s here) to 16384.', shards),
                  HINT = 'Choose such a count (64 by default), or lower citus.shard_count for this call.';
    END IF;
    FOREACH t IN ARRAY ARRAY['batches', 'service_claims', 'instances', 'leases'] LOOP
        IF pg_catalog.to_regclass('gridha.' || t) IS NOT NULL THEN
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM gridha.%I)', t) INTO has_rows;
            IF has_rows THEN
                RAISE EXCEPTION 'gridha.% holds rows; gridha.citus_setup needs a fresh database', t
                    USING ERRCODE = 'RG032',
                          DETAIL = 'The Citus mode keeps its batches and claims in tables of its own; rows in gridha''s tables of one server would be left behind, unseen.',
                          HINT = 'Move them into the buckets in the same step: SELECT gridha.citus_setup(move_rows => true, buckets => ...) (docs/citus.md, "Lifecycle"); or set up the Citus mode in a new database.';
            END IF;
        END IF;
    END LOOP;

    -- one connection per node: Citus refuses a function's distribution
    -- after a parallel command in the same transaction
    PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);

    CREATE TABLE gridha.bucket_claims (
        bucket      integer PRIMARY KEY,
        buckets     integer NOT NULL,
        holder      uuid,
        holder_role name,
        epoch       bigint NOT NULL DEFAULT 0,
        soft_expiry timestamptz,
        hard_expiry timestamptz,
        taken_at    timestamptz
    );
    CREATE TABLE gridha.bucket_services (
        bucket     integer NOT NULL,
        service_id text NOT NULL,
        head_seq   bigint NOT NULL DEFAULT 1,
        tail_seq   bigint NOT NULL DEFAULT 0,
        ready_at   timestamptz,
        in_flight  boolean NOT NULL DEFAULT false,
        -- running totals (gridha.metrics reads them, never the batches):
        -- batches committed, invalid, and hand-outs after a batch's first
        committed_total   bigint NOT NULL DEFAULT 0,
        invalid_total     bigint NOT NULL DEFAULT 0,
        resubmitted_total bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (bucket, service_id)
    ) WITH (fillfactor = 50);
    CREATE INDEX bucket_services_ready ON gridha.bucket_services (bucket, ready_at)
        WHERE ready_at IS NOT NULL;
    -- the heads in flight of a holder's buckets (pending_batches, a
    -- worker's ledger monitor): found without reading its idle services
    CREATE INDEX bucket_services_in_flight ON gridha.bucket_services (bucket)
        WHERE in_flight;
    CREATE TABLE gridha.bucket_batches (
        bucket        integer NOT NULL,
        service_id    text NOT NULL,
        batch_id      text NOT NULL,
        seq           bigint NOT NULL,
        payload       bytea,
        status        gridha.batch_status NOT NULL DEFAULT 'queued',
        created_at    timestamptz NOT NULL DEFAULT now(),
        epoch         bigint,
        attempts      integer NOT NULL DEFAULT 0,
        instance_id   uuid,
        handed_out_at timestamptz,
        submitted_at  timestamptz,
        finished_at   timestamptz,
        PRIMARY KEY (bucket, service_id, batch_id),
        UNIQUE (bucket, service_id, seq)
    ) WITH (fillfactor = 70);
    -- maintenance's prune walks a bucket's batches by creation (run_maintenance);
    -- no rewrite of a batch changes created_at, so they stay HOT updates
    CREATE INDEX bucket_batches_created ON gridha.bucket_batches (bucket, created_at);
    COMMENT ON TABLE gridha.bucket_claims IS
    'Citus mode: one row per bucket: its holder (an instance, and the role that took it), its epoch (rises whenever it changes hands) and its lease';
    COMMENT ON TABLE gridha.bucket_services IS
    'Citus mode: one row per service, in its bucket: its queue''s head and tail, when its head became ready, whether it is in flight';
    COMMENT ON TABLE gridha.bucket_batches IS
    'Citus mode: the batches, in their service''s bucket';
    REVOKE ALL ON gridha.bucket_claims, gridha.bucket_services, gridha.bucket_batches FROM PUBLIC;
    -- Operators (gridha_admin) read the mode's state as they read gridha.batches
    -- on one server: every column but the payload; only the owner writes.
    GRANT SELECT ON gridha.bucket_claims, gridha.bucket_services TO gridha_admin;
    GRANT SELECT (bucket, service_id, batch_id, seq, status, created_at, epoch, attempts, instance_id,
                  handed_out_at, submitted_at, finished_at) ON gridha.bucket_batches TO gridha_admin;

    PERFORM create_distributed_table('gridha.bucket_claims', 'bucket', colocate_with => 'none');
    PERFORM create_distributed_table('gridha.bucket_services', 'bucket', colocate_with => 'gridha.bucket_claims');
    PERFORM create_distributed_table('gridha.bucket_batches', 'bucket', colocate_with => 'gridha.bucket_claims');
    -- The mode's instances: a reference table, so that every node holds
    -- it whole and a per-bucket function reads an instance's owner
    -- locally, where it runs (gridha.register_instance writes it, and the
    -- instance calls on first use)
    CREATE TABLE gridha.bucket_instances (
        instance_id   uuid PRIMARY KEY,
        owner         name NOT NULL,
        label         text,
        registered_at timestamptz NOT NULL
    );
    COMMENT ON TABLE gridha.bucket_instances IS
    'Citus mode: one row per registered instance, with the role that owns it (a reference table: on every node)';
    REVOKE ALL ON gridha.bucket_instances FROM PUBLIC;
    PERFORM create_reference_table('gridha.bucket_instances');
    -- targets: the service's target, what an instance serves, gridha.bucket_targets
    PERFORM gridha_internal.citus_setup_targets();
    INSERT INTO gridha.bucket_claims (bucket, buckets)
    SELECT b, citus_setup.buckets FROM pg_catalog.generate_series(0, citus_setup.buckets - 1) AS b;

    FOREACH f IN ARRAY ARRAY[
            'gridha.bucket_enqueue(integer,text,text,bytea)',
            'gridha.bucket_acquire(integer,uuid,interval)',
            'gridha.bucket_takeover(integer,uuid,interval)',
            'gridha.bucket_renew(integer,uuid,bigint,interval)',
            'gridha.bucket_release(integer,uuid,bigint)',
            'gridha.bucket_next_batch(integer,uuid,bigint)',
            'gridha.bucket_report_submission(integer,uuid,text,text,bigint,text)',
            'gridha.bucket_report_status(integer,uuid,text,text,bigint,text)',
            'gridha.bucket_next_batches(integer,uuid,bigint,integer)',
            'gridha.bucket_report_submissions(integer,uuid,gridha.submission_report[])',
            'gridha.bucket_report_statuses(integer,uuid,gridha.status_report[])'] LOOP
        PERFORM create_distributed_function(f::regprocedure, distribution_arg_name => 'bucket',
                                            colocate_with => 'gridha.bucket_claims');
    END LOOP;

    -- Producers enqueue through gridha.bucket_enqueue in this mode. The
    -- revoke also makes every backend look at gridha's tables again (it
    -- invalidates gridha.batches), so a session that called gridha before
    -- the setup is refused (RG035) from its next call on.
    REVOKE INSERT (service_id, batch_id, payload) ON gridha.batches FROM gridha_producer;
    RETURN buckets;
END
$$;

COMMENT ON FUNCTION gridha.citus_setup(integer) IS
'Citus mode: lays gridha out by bucket on the coordinator of a fresh database (after CREATE EXTENSION citus and gridha): the bucket tables distributed and co-located, the per-bucket functions distributed by bucket; once; cannot be undone in place';

/*
 * bucket_fence(bucket, instance, epoch, live): the instance holds the
 * bucket at that epoch (and, when live, its lease has not run out), and
 * the calling role took it (or is a member of the role that did); RG001
 * or RG008 otherwise, RG036 for a bucket outside the layout. The bucket's
 * row stays locked (FOR SHARE) to the end of the call, so a take-over
 * (FOR UPDATE) waits for a hand-out or report in progress; a holder and
 * epoch that match mean nobody else held the bucket since. The reports
 * fence without live (as a report on a claim whose lease ran out, which
 * nobody took over, is accepted on one server); the hand-out with it.
 */
CREATE FUNCTION gridha_internal.bucket_fence(bucket integer, instance_id uuid, epoch bigint, live boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    h uuid;
    hr name;
    e bigint;
    hx timestamptz;
    t timestamptz;
BEGIN
    -- First a write of the bucket's claim row that changes nothing:
    -- Citus takes a shard's metadata lock for a write, not for a read
    -- (FOR UPDATE and FOR SHARE included). So a move of the shard under
    -- way makes this call wait for it, a move not begun waits for this
    -- call's transaction, and every statement after this one runs on the
    -- placement the shard has after the move. Without it the row lock
    -- below could be taken on the placement a move leaves, and two
    -- take-overs read the same epoch (docs/citus.md, "Faults").
    UPDATE gridha.bucket_claims c SET epoch = c.epoch
     WHERE c.bucket = bucket_fence.bucket AND c.epoch < 0;
    SELECT c.holder, c.holder_role, c.epoch, c.hard_expiry INTO h, hr, e, hx
      FROM gridha.bucket_claims c WHERE c.bucket = bucket_fence.bucket FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no bucket % in this layout', bucket_fence.bucket
            USING ERRCODE = 'RG036',
                  HINT = 'Buckets are numbered from 0 to the count gridha.citus_setup laid out, minus one.';
    END IF;
    -- the clock, read once the row is locked (not the transaction's
    -- start: a call that waited for a shard move compares with the time
    -- it goes on), as leases are set (bucket_take, bucket_renew)
    t := pg_catalog.clock_timestamp();
    IF h IS NOT DISTINCT FROM bucket_fence.instance_id AND e = bucket_fence.epoch
       AND live AND hx < t THEN
        RAISE EXCEPTION 'stale claim on bucket %', bucket_fence.bucket
            USING ERRCODE = 'RG001',
                  DETAIL = format('Instance %s holds the bucket at epoch %s, its lease ran out at %s; nobody took it over yet.',
                                  h, e, hx),
                  HINT = 'Renew the lease (gridha.bucket_renew) before asking for batches; while it has run out, another instance may take the bucket over.';
    END IF;
    IF h IS DISTINCT FROM bucket_fence.instance_id OR e <> bucket_fence.epoch THEN
        RAISE EXCEPTION 'stale claim on bucket %', bucket_fence.bucket
            USING ERRCODE = 'RG001',
                  DETAIL = format('Instance %s holds the bucket at epoch %s%s; the call carried epoch %s of instance %s.',
                                  coalesce(h::text, '(none)'), e,
                                  CASE WHEN hx < t THEN ', its lease ran out' ELSE '' END,
                                  bucket_fence.epoch, bucket_fence.instance_id),
                  HINT = 'Drop what you hold of this bucket: it changed hands, and its holder hands its batches out again.';
    END IF;
    IF NOT pg_catalog.pg_has_role(session_user, hr, 'MEMBER') THEN
        RAISE EXCEPTION 'role "%" does not own instance %', session_user, bucket_fence.instance_id
            USING ERRCODE = 'RG008',
                  DETAIL = format('Role "%s" took bucket %s for that instance.', hr, bucket_fence.bucket);
    END IF;
END
$$;

COMMENT ON FUNCTION gridha_internal.bucket_fence(integer, uuid, bigint, boolean) IS
'Citus mode: the instance holds the bucket at that epoch (live: and its lease runs), taken by the calling role; RG001, RG008 or RG036 otherwise';

/*
 * bucket_args(args): what every per-bucket function checks first: the
 * database is in Citus mode (RG037 otherwise: the bucket tables do not
 * exist), and no argument it needs is NULL (22004).
 */
CREATE FUNCTION gridha_internal.bucket_args(args text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    IF pg_catalog.to_regclass('gridha.bucket_claims') IS NULL THEN
        RAISE EXCEPTION 'gridha is not in Citus mode in this database'
            USING ERRCODE = 'RG037',
                  DETAIL = 'The per-bucket functions serve the Citus mode only; gridha.citus_setup has not laid gridha out by bucket here.',
                  HINT = 'On one server, use gridha.enqueue, gridha.next_batch and the reports; on Citus, call gridha.citus_setup first (docs/citus.md).';
    END IF;
    IF pg_catalog.array_position(args, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'argument % must not be NULL', pg_catalog.array_position(args, NULL)
            USING ERRCODE = '22004';
    END IF;
END
$$;

COMMENT ON FUNCTION gridha_internal.bucket_args(text[]) IS
'Citus mode: RG037 outside the mode, 22004 naming the first NULL argument of a per-bucket call';

/*
 * bucket_enqueue(bucket, service, batch, payload): appends a batch to the
 * service's queue in its bucket (bucket = gridha.bucket_of(service_id,
 * buckets), else RG036); returns its seq. A new service is created on
 * target default; the form with a target, and what both share
 * (gridha_internal.bucket_enqueue_target), are with the mode's targets
 * below.
 */
CREATE FUNCTION gridha.bucket_enqueue(bucket integer, service_id text, batch_id text, payload bytea)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    RETURN gridha_internal.bucket_enqueue_target(bucket, service_id, batch_id, payload, NULL);
END
$$;

COMMENT ON FUNCTION gridha.bucket_enqueue(integer, text, text, bytea) IS
'Citus mode: appends a batch to its service''s queue in the service''s bucket (gridha.bucket_of); returns its seq';

/*
 * bucket_take(bucket, instance, lease, takeover): the common part of
 * bucket_acquire (a free bucket, or the caller's own: renewed) and
 * bucket_takeover (a bucket whose holder's lease ran out). A new holder
 * raises the epoch by one, and the services in flight under the old one
 * become ready: their heads go out again at the new epoch, and the old
 * holder's reports of them are refused (RG001). Returns the epoch, or
 * NULL when the bucket is not to be had.
 */
CREATE FUNCTION gridha_internal.bucket_take(bucket integer, instance_id uuid, lease interval, takeover boolean)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    h uuid;
    hr name;
    e bigint;
    hx timestamptz;
    r name := session_user;
    io name;
    t timestamptz;
BEGIN
    IF lease <= interval '0' THEN
        RAISE EXCEPTION 'a lease must be longer than zero' USING ERRCODE = '22023';
    END IF;
    -- First a write of the bucket's claim row that changes nothing:
    -- Citus takes a shard's metadata lock for a write, not for a read
    -- (FOR UPDATE and FOR SHARE included). So a move of the shard under
    -- way makes this call wait for it, a move not begun waits for this
    -- call's transaction, and every statement after this one runs on the
    -- placement the shard has after the move. Without it the row lock
    -- below could be taken on the placement a move leaves, and two
    -- take-overs read the same epoch (docs/citus.md, "Faults").
    UPDATE gridha.bucket_claims c SET epoch = c.epoch
     WHERE c.bucket = bucket_take.bucket AND c.epoch < 0;
    SELECT c.holder, c.holder_role, c.epoch, c.hard_expiry INTO h, hr, e, hx
      FROM gridha.bucket_claims c WHERE c.bucket = bucket_take.bucket FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no bucket % in this layout', bucket_take.bucket
            USING ERRCODE = 'RG036',
                  HINT = 'Buckets are numbered from 0 to the count gridha.citus_setup laid out, minus one.';
    END IF;
    -- A registered instance (gridha.bucket_instances, a reference table
    -- read here, on the node the call runs on): only its owner, a member
    -- of it or a superuser may take a bucket for it (RG008). An id never
    -- registered: refused (RG024) when gridha.unknown_instance is refuse;
    -- otherwise it passes, and the bucket's own holder_role rules it.
    SELECT i.owner INTO io FROM gridha.bucket_instances i WHERE i.instance_id = bucket_take.instance_id;
    IF FOUND THEN
        IF NOT gridha_internal.bucket_may_act(r, io) THEN
            RAISE EXCEPTION 'role "%" does not own instance %', r, bucket_take.instance_id
                USING ERRCODE = 'RG008',
                      DETAIL = format('The instance is registered to role "%s" (gridha.bucket_instances).', io),
                      HINT = 'Act as an instance your role registered (gridha.register_instance), or as a member of its owner.';
        END IF;
    ELSIF pg_catalog.current_setting('gridha.unknown_instance', true) = 'refuse' THEN
        RAISE EXCEPTION 'unknown instance %', bucket_take.instance_id
            USING ERRCODE = 'RG024',
                  DETAIL = 'gridha.unknown_instance is refuse: a call does not take a bucket for an instance id gridha.bucket_instances does not hold.',
                  HINT = 'Register the instance first: SELECT gridha.register_instance(''label''), and use the id it returns.';
    END IF;
    -- the lease from the clock, read once the row is locked: a call that
    -- waited (for a shard move, another take-over) gets its whole lease
    -- from the time it goes on, not from its transaction's start
    t := pg_catalog.clock_timestamp();
    IF h = bucket_take.instance_id AND NOT takeover THEN
        IF NOT pg_catalog.pg_has_role(session_user, hr, 'MEMBER') THEN
            RAISE EXCEPTION 'role "%" does not own instance %', session_user, bucket_take.instance_id
                USING ERRCODE = 'RG008',
                      DETAIL = format('Role "%s" took bucket %s for that instance.', hr, bucket_take.bucket);
        END IF;
    ELSIF (takeover AND h IS NOT NULL AND h <> bucket_take.instance_id AND hx < t)
          OR (NOT takeover AND h IS NULL) THEN
        e := e + 1;
        UPDATE gridha.bucket_services s SET in_flight = false, ready_at = t
         WHERE s.bucket = bucket_take.bucket AND s.in_flight;
    ELSE
        RETURN NULL;
    END IF;
    UPDATE gridha.bucket_claims c
       SET holder = bucket_take.instance_id,
           holder_role = CASE WHEN c.holder IS DISTINCT FROM bucket_take.instance_id THEN r
                              ELSE c.holder_role END,
           epoch = e,
           taken_at = CASE WHEN c.holder IS DISTINCT FROM bucket_take.instance_id THEN t
                           ELSE c.taken_at END,
           soft_expiry = t + lease / 2, hard_expiry = t + lease
     WHERE c.bucket = bucket_take.bucket;
    RETURN e;
END
$$;

COMMENT ON FUNCTION gridha_internal.bucket_take(integer, uuid, interval, boolean) IS
'Citus mode: what bucket_acquire and bucket_takeover share: takes the bucket (raising its epoch) or renews the caller''s own; NULL when it is not to be had';

CREATE FUNCTION gridha.bucket_acquire(bucket integer, instance_id uuid, lease interval DEFAULT '30 s')
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    PERFORM gridha_internal.bucket_args(ARRAY[bucket::text, instance_id::text, lease::text]);
    RETURN gridha_internal.bucket_take(bucket, instance_id, lease, false);
END
$$;

COMMENT ON FUNCTION gridha.bucket_acquire(integer, uuid, interval) IS
'Citus mode: takes a free bucket for the instance (its epoch rises by one) or renews the instance''s own; returns the epoch, NULL when another instance holds it';

CREATE FUNCTION gridha.bucket_takeover(bucket integer, instance_id uuid, lease interval DEFAULT '30 s')
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    PERFORM gridha_internal.bucket_args(ARRAY[bucket::text, instance_id::text, lease::text]);
    RETURN gridha_internal.bucket_take(bucket, instance_id, lease, true);
END
$$;

COMMENT ON FUNCTION gridha.bucket_takeover(integer, uuid, interval) IS
'Citus mode: takes a bucket whose holder''s lease ran out (its epoch rises by one; its batches in flight go out again); returns the epoch, NULL when the bucket is free, the caller''s, or its holder''s lease runs';

CREATE FUNCTION gridha.bucket_renew(bucket integer, instance_id uuid, epoch bigint, lease interval DEFAULT '30 s')
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    t timestamptz;
BEGIN
    PERFORM gridha_internal.bucket_args(ARRAY[bucket::text, instance_id::text, epoch::text, lease::text]);
    IF lease <= interval '0' THEN
        RAISE EXCEPTION 'a lease must be longer than zero' USING ERRCODE = '22023';
    END IF;
    PERFORM gridha_internal.bucket_fence(bucket, instance_id, epoch, false);
    -- the lease from the clock once the row is locked (bucket_take)
    t := pg_catalog.clock_timestamp();
    UPDATE gridha.bucket_claims c SET soft_expiry = t + lease / 2, hard_expiry = t + lease
     WHERE c.bucket = bucket_renew.bucket;
    RETURN t + lease;
END
$$;

COMMENT ON FUNCTION gridha.bucket_renew(integer, uuid, bigint, interval) IS
'Citus mode: extends the lease of a bucket the instance holds at that epoch (RG001 when it changed hands); returns the new hard expiry';

CREATE FUNCTION gridha.bucket_release(bucket integer, instance_id uuid, epoch bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    t timestamptz := pg_catalog.now();
BEGIN
    PERFORM gridha_internal.bucket_args(ARRAY[bucket::text, instance_id::text, epoch::text]);
    PERFORM gridha_internal.bucket_fence(bucket, instance_id, epoch, false);
    UPDATE gridha.bucket_services s SET in_flight = false, ready_at = t
     WHERE s.bucket = bucket_release.bucket AND s.in_flight;
    UPDATE gridha.bucket_claims c
       SET holder = NULL, holder_role = NULL, soft_expiry = NULL, hard_expiry = NULL, taken_at = NULL
     WHERE c.bucket = bucket_release.bucket;
    RETURN true;
END
$$;

COMMENT ON FUNCTION gridha.bucket_release(integer, uuid, bigint) IS
'Citus mode: hands back a bucket the instance holds at that epoch (RG001 when it changed hands); its batches in flight go out again under the next holder, at a higher epoch';

/*
 * bucket_rate_slot(target, t_us): a slot of a rate-limited target for a
 * hand-out at t_us (microseconds since the epoch), taken when one
 * conforms (t_us >= tat - (rate_burst - 1) * rate_interval; rate_burst 0
 * pauses the target): its tat moves to greatest(tat, t_us) +
 * rate_interval, under the lock of its row of gridha.bucket_rates (bucket
 * 0's shard, one placement), so every hand-out of the target, on whichever
 * node it runs, takes its slots one at a time under the same row's lock
 * (the bound of one server, src/ratelimit.c). False when no slot conforms, and
 * when another transaction holds the row: a hand-out never waits for a
 * rate row, so no cycle of waits passes through one; its batch stays
 * queued for a later call.
 */
CREATE FUNCTION gridha_internal.bucket_rate_slot(target text, t_us bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    got boolean;
    iv bigint;
    bu integer;
BEGIN
    SELECT x.rate_interval_us, x.rate_burst INTO iv, bu
      FROM gridha.bucket_targets x WHERE x.target = bucket_rate_slot.target;
    IF iv IS NULL OR bu = 0 THEN
        RETURN false;
    END IF;
    BEGIN
        PERFORM 1 FROM gridha.bucket_rates r
         WHERE r.bucket = 0 AND r.target = bucket_rate_slot.target FOR UPDATE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
    -- integers only: Citus refuses a STABLE operator (timestamptz -
    -- interval) on a column in a distributed UPDATE
    UPDATE gridha.bucket_rates r
       SET tat_us = greatest(r.tat_us, bucket_rate_slot.t_us) + iv, slots_taken = r.slots_taken + 1
     WHERE r.bucket = 0 AND r.target = bucket_rate_slot.target
       AND bucket_rate_slot.t_us >= r.tat_us - (bu - 1) * iv
    RETURNING true INTO got;
    RETURN coalesce(got, false);
END
$$;

COMMENT ON FUNCTION gridha_internal.bucket_rate_slot(text, bigint) IS
'Citus mode: takes a slot of a rate-limited target for a hand-out at t_us (microseconds since the epoch) under the lock of its gridha.bucket_rates row, without waiting for it; false when none conforms or the row is locked';

/*
 * bucket_rate_closed(t_us): the rate-limited targets (limited) and those
 * of them with no slot at t_us (closed: paused, or t_us before tat -
 * (rate_burst - 1) * rate_interval): the limits read where the hand-out
 * runs (the reference table), and only when some target is limited, their
 * state (bucket 0's shard).
 */
CREATE FUNCTION gridha_internal.bucket_rate_closed(t_us bigint, OUT limited text[], OUT closed text[])
RETURNS record
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    SELECT pg_catalog.array_agg(x.target) INTO limited
      FROM gridha.bucket_targets x WHERE x.rate_interval_us IS NOT NULL;
    IF limited IS NULL THEN
        RETURN;             -- none limited: nothing more read
    END IF;
    SELECT pg_catalog.array_agg(r.target) INTO closed
      FROM gridha.bucket_rates r
      JOIN gridha.bucket_targets x ON x.target = r.target
     WHERE r.bucket = 0 AND r.target = ANY (limited)
       AND (x.rate_burst = 0 OR t_us < r.tat_us - (x.rate_burst - 1) * x.rate_interval_us);
END
$$;

COMMENT ON FUNCTION gridha_internal.bucket_rate_closed(bigint) IS
'Citus mode: the rate-limited targets, and those of them with no slot at t_us (microseconds since the epoch)';

/*
 * bucket_next_batch(bucket, instance, epoch): the head of the bucket's
 * service that has waited longest, handed out (submitting, at the epoch);
 * NULL when none is ready. Fenced. The pick is FOR UPDATE SKIP LOCKED
 * within the bucket's shard. Only the heads of services whose target the
 * instance serves are handed out (its serves in gridha.bucket_instances,
 * read where the call runs; an instance not registered, or that declared
 * nothing, serves every target), each with its service's target. A head
 * of a rate-limited target goes out only with a slot of it
 * (bucket_rate_slot): the pick skips the targets with none now, and a
 * head whose target had no slot after all stays queued, the pick going on
 * without that target.
 */
CREATE FUNCTION gridha.bucket_next_batch(bucket integer, instance_id uuid, epoch bigint)
RETURNS gridha.bucket_batch
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    sid text;
    h bigint;
    tg text;
    sv text[];
    ok text[];
    r gridha.bucket_batch;
    again integer;
    t timestamptz := pg_catalog.now();
    t_us bigint := (EXTRACT(epoch FROM pg_catalog.now()) * 1000000)::int8;
    rc record;
BEGIN
    PERFORM gridha_internal.bucket_args(ARRAY[bucket::text, instance_id::text, epoch::text]);
    PERFORM gridha_internal.bucket_fence(bucket, instance_id, epoch, true);
    SELECT i.serves INTO sv FROM gridha.bucket_instances i WHERE i.instance_id = bucket_next_batch.instance_id;
    ok := gridha_internal.bucket_servable(sv);
    rc := gridha_internal.bucket_rate_closed(t_us);
    LOOP
        SELECT s.service_id, s.head_seq, s.target INTO sid, h, tg
          FROM gridha.bucket_services s
         WHERE s.bucket = bucket_next_batch.bucket AND s.ready_at <= t
           AND (ok IS NULL OR s.target = ANY (ok))
           AND (rc.closed IS NULL OR s.target <> ALL (rc.closed))
         ORDER BY s.ready_at, s.service_id
         LIMIT 1
           FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        EXIT WHEN rc.limited IS NULL OR NOT tg = ANY (rc.limited)
                  OR gridha_internal.bucket_rate_slot(tg, t_us);
        -- no slot after all (another hand-out took it, or holds the row)
        rc.closed := coalesce(rc.closed, '{}') || tg;
    END LOOP;
    -- the batch first (its service's row is locked): a hand-out after
    -- the batch's first counts in the service's resubmitted_total
    UPDATE gridha.bucket_batches b
       SET status = 'submitting', epoch = bucket_next_batch.epoch, attempts = b.attempts + 1,
           instance_id = bucket_next_batch.instance_id, handed_out_at = t, submitted_at = NULL
     WHERE b.bucket = bucket_next_batch.bucket AND b.service_id = sid AND b.seq = h
    RETURNING b.service_id, b.batch_id, b.seq, b.payload, b.epoch, b.attempts, tg INTO r;
    again := CASE WHEN r.attempts > 1 THEN 1 ELSE 0 END;
    UPDATE gridha.bucket_services s
       SET in_flight = true, ready_at = NULL, resubmitted_total = s.resubmitted_total + again
     WHERE s.bucket = bucket_next_batch.bucket AND s.service_id = sid;
    RETURN r;
END
$$;

COMMENT ON FUNCTION gridha.bucket_next_batch(integer, uuid, bigint) IS
'Citus mode: hands out the head of the bucket''s service that has waited longest (one in flight per service, in order), to the instance holding the bucket at that epoch; NULL when none is ready';

/*
 * bucket_report(...): the reports' common part. from: the statuses the
 * batch may be in; to: its new status; final: the service's next batch
 * becomes its head; delayed or unknown: the service's head goes out again,
 * delayed after the backoff of one server (250 ms after its first
 * hand-out, 500 ms more for each further one, at most 60 s: the service's
 * ready_at, which the pick compares with now).
 */
CREATE FUNCTION gridha_internal.bucket_report(bucket integer, instance_id uuid, service_id text, batch_id text,
                                              epoch bigint, from_status gridha.batch_status[],
                                              to_status gridha.batch_status)
RETURNS gridha.batch_status
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    q bigint;
    st gridha.batch_status;
    e bigint;
    n integer;
    final boolean := to_status IN ('committed', 'invalid');
    t timestamptz := pg_catalog.now();
    back timestamptz;
BEGIN
    PERFORM gridha_internal.bucket_fence(bucket, instance_id, epoch, false);
    UPDATE gridha.bucket_batches b
       SET status = to_status,
           submitted_at = CASE WHEN b.status = 'submitting' THEN t ELSE b.submitted_at END,
           finished_at = CASE WHEN final THEN t END
     WHERE b.bucket = bucket_report.bucket AND b.service_id = bucket_report.service_id
       AND b.batch_id = bucket_report.batch_id AND b.epoch = bucket_report.epoch
       AND b.instance_id = bucket_report.instance_id AND b.status = ANY (from_status)
    RETURNING b.seq, b.attempts INTO q, n;
    IF NOT FOUND THEN
        SELECT b.status, b.epoch, b.attempts INTO st, e, n FROM gridha.bucket_batches b
         WHERE b.bucket = bucket_report.bucket AND b.service_id = bucket_report.service_id
           AND b.batch_id = bucket_report.batch_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'unknown batch "%" of service "%" in bucket %', batch_id, service_id, bucket
                USING ERRCODE = 'RG003';
        ELSIF n = 0 THEN
            RAISE EXCEPTION 'batch "%" of service "%" was never handed out', batch_id, service_id
                USING ERRCODE = 'RG023';
        ELSIF st = to_status AND e = epoch THEN
            RETURN st;          -- a repeated report: nothing changes
        END IF;
        RAISE EXCEPTION 'batch "%" of service "%" is not in flight at epoch %', batch_id, service_id, epoch
            USING ERRCODE = 'RG002',
                  DETAIL = format('It is %s, handed out last at epoch %s.', st, e);
    END IF;
    IF final OR to_status IN ('delayed', 'unknown') THEN
        -- the backoff computed here: Citus refuses a STABLE expression
        -- (timestamptz + interval) in the statement's CASE
        IF to_status = 'delayed' THEN
            back := t + least(250 + 500 * greatest(n - 1, 0), 60000) * interval '1 millisecond';
        END IF;
        UPDATE gridha.bucket_services s
           SET head_seq = CASE WHEN final THEN s.head_seq + 1 ELSE s.head_seq END,
               in_flight = false,
               ready_at = CASE WHEN to_status = 'delayed' THEN back
                               WHEN NOT final OR s.head_seq + 1 <= s.tail_seq THEN t END,
               committed_total = s.committed_total + CASE WHEN to_status = 'committed' THEN 1 ELSE 0 END,
               invalid_total = s.invalid_total + CASE WHEN to_status = 'invalid' THEN 1 ELSE 0 END
         WHERE s.bucket = bucket_report.bucket AND s.service_id = bucket_report.service_id
           AND s.head_seq = q AND s.in_flight;
    END IF;
    RETURN to_status;
END
$$;

COMMENT ON FUNCTION gridha_internal.bucket_report(integer, uuid, text, text, bigint, gridha.batch_status[], gridha.batch_status) IS
'Citus mode: what the per-bucket reports share: a fenced status change of a batch in flight; a final one makes the service''s next batch its head';

CREATE FUNCTION gridha.bucket_report_submission(bucket integer, instance_id uuid, service_id text, batch_id text,
                                                epoch bigint, outcome text)
RETURNS gridha.batch_status
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    PERFORM gridha_internal.bucket_args(ARRAY[bucket::text, instance_id::text, service_id, batch_id, epoch::text, outcome]);
    RETURN gridha_internal.bucket_report(bucket, instance_id, service_id, batch_id, epoch, '{submitting}',
        CASE outcome WHEN 'accepted' THEN 'pending'::gridha.batch_status
                     WHEN 'delayed' THEN 'delayed'::gridha.batch_status
                     WHEN 'rejected' THEN 'invalid'::gridha.batch_status
                     ELSE gridha_internal.bucket_unknown('RG004', outcome) END);
END
$$;

COMMENT ON FUNCTION gridha.bucket_report_submission(integer, uuid, text, text, bigint, text) IS
'Citus mode: the outcome of submitting a batch handed out at that epoch: accepted (pending), delayed (handed out again after the backoff) or rejected (invalid, final); fenced by the bucket''s epoch';

CREATE FUNCTION gridha.bucket_report_status(bucket integer, instance_id uuid, service_id text, batch_id text,
                                            epoch bigint, status text)
RETURNS gridha.batch_status
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    PERFORM gridha_internal.bucket_args(ARRAY[bucket::text, instance_id::text, service_id, batch_id, epoch::text, status]);
    RETURN gridha_internal.bucket_report(bucket, instance_id, service_id, batch_id, epoch,
        '{pending,valid}',
        CASE WHEN status IN ('pending', 'valid', 'unknown', 'committed', 'invalid') THEN status::gridha.batch_status
             ELSE gridha_internal.bucket_unknown('RG005', status) END);
END
$$;

COMMENT ON FUNCTION gridha.bucket_report_status(integer, uuid, text, text, bigint, text) IS
'Citus mode: the ledger''s status of a batch accepted at that epoch: pending or valid (still in flight), unknown (handed out again), committed or invalid (final: the service''s next batch becomes its head); fenced by the bucket''s epoch';

CREATE FUNCTION gridha_internal.bucket_unknown(code text, word text)
RETURNS gridha.batch_status
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    IF code = 'RG004' THEN
        RAISE EXCEPTION 'unknown submission outcome "%"', word
            USING ERRCODE = 'RG004', HINT = 'Report accepted, delayed or rejected.';
    END IF;
    RAISE EXCEPTION 'unknown ledger status "%"', word
        USING ERRCODE = 'RG005', HINT = 'Report pending, valid, committed, invalid or unknown.';
END
$$;

COMMENT ON FUNCTION gridha_internal.bucket_unknown(text, text) IS
'Citus mode: RG004 or RG005 for a word the per-bucket reports do not know';

REVOKE ALL ON FUNCTION
    gridha.bucket_of(text, integer),
    gridha.citus_setup(integer),
    gridha.bucket_enqueue(integer, text, text, bytea),
    gridha.bucket_acquire(integer, uuid, interval),
    gridha.bucket_takeover(integer, uuid, interval),
    gridha.bucket_renew(integer, uuid, bigint, interval),
    gridha.bucket_release(integer, uuid, bigint),
    gridha.bucket_next_batch(integer, uuid, bigint),
    gridha.bucket_report_submission(integer, uuid, text, text, bigint, text),
    gridha.bucket_report_status(integer, uuid, text, text, bigint, text),
    gridha_internal.bucket_fence(integer, uuid, bigint, boolean),
    gridha_internal.bucket_rate_slot(text, bigint),
    gridha_internal.bucket_rate_closed(bigint),
    gridha_internal.bucket_args(text[]),
    gridha_internal.bucket_take(integer, uuid, interval, boolean),
    gridha_internal.bucket_report(integer, uuid, text, text, bigint, gridha.batch_status[], gridha.batch_status),
    gridha_internal.bucket_unknown(text, text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gridha.bucket_enqueue(integer, text, text, bytea) TO gridha_producer;
GRANT EXECUTE ON FUNCTION gridha.bucket_of(text, integer) TO gridha_producer, gridha_submitter;
GRANT EXECUTE ON FUNCTION
    gridha.bucket_acquire(integer, uuid, interval),
    gridha.bucket_takeover(integer, uuid, interval),
    gridha.bucket_renew(integer, uuid, bigint, interval),
    gridha.bucket_release(integer, uuid, bigint),
    gridha.bucket_next_batch(integer, uuid, bigint),
    gridha.bucket_report_submission(integer, uuid, text, text, bigint, text),
    gridha.bucket_report_status(integer, uuid, text, text, bigint, text)
TO gridha_submitter;

-- --- issue 43.4: the batched per-bucket hand-out and reports (Citus mode) ---
--
-- docs/citus.md, "Built". Many batches of one bucket per call, as one
-- value each (Citus delegates only a lone SELECT f(...) returning one
-- value): the hand-out returns an array of gridha.bucket_batch, the
-- reports take an array of gridha.submission_report or
-- gridha.status_report and return an array of gridha.bucket_report_result,
-- one element per row in the order given. citus_setup distributes them by
-- bucket with the others.

-- One row of a batched per-bucket report's answer: the batch, its new
-- status, or the SQLSTATE and message that refused it.
CREATE TYPE gridha.bucket_report_result AS (
    service_id text,
    batch_id   text,
    status     gridha.batch_status,
    sqlstate   text,
    message    text
);

COMMENT ON TYPE gridha.bucket_report_result IS
'one element of what gridha.bucket_report_submissions and gridha.bucket_report_statuses return (Citus mode): a reported batch, its new status, or the SQLSTATE and message that refused it';

/*
 * bucket_next_batches(bucket, instance, epoch, max_batches): up to
 * max_batches heads of the bucket's ready services, the services that
 * waited longest first (one per service), handed out as bucket_next_batch
 * does (of the targets the instance serves, each with its target); an
 * empty array when none is ready. Fenced once for the call. The pick is
 * one FOR UPDATE SKIP LOCKED within the bucket's shard.
 */
CREATE FUNCTION gridha.bucket_next_batches(bucket integer, instance_id uuid, epoch bigint,
                                                      max_batches integer DEFAULT 100)
RETURNS gridha.bucket_batch[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    sids text[];
    tgs text[];
    sv text[];
    ok text[];
    r gridha.bucket_batch[];
    again text[];
    t timestamptz := pg_catalog.now();
    t_us bigint := (EXTRACT(epoch FROM pg_catalog.now()) * 1000000)::int8;
    rc record;
    tg text;
    i integer;
    out_ boolean;
BEGIN
    PERFORM gridha_internal.bucket_args(ARRAY[bucket::text, instance_id::text, epoch::text, max_batches::text]);
    IF max_batches < 0 THEN
        RAISE EXCEPTION 'max_batches must not be negative' USING ERRCODE = '22023';
    END IF;
    PERFORM gridha_internal.bucket_fence(bucket, instance_id, epoch, true);
    SELECT i.serves INTO sv FROM gridha.bucket_instances i WHERE i.instance_id = bucket_next_batches.instance_id;
    ok := gridha_internal.bucket_servable(sv);
    rc := gridha_internal.bucket_rate_closed(t_us);
    SELECT pg_catalog.array_agg(p.service_id ORDER BY p.ready_at, p.service_id),
           pg_catalog.array_agg(p.target ORDER BY p.ready_at, p.service_id) INTO sids, tgs
      FROM (SELECT s.service_id, s.ready_at, s.target
              FROM gridha.bucket_services s
             WHERE s.bucket = bucket_next_batches.bucket AND s.ready_at <= t
               AND (ok IS NULL OR s.target = ANY (ok))
               AND (rc.closed IS NULL OR s.target <> ALL (rc.closed))
             ORDER BY s.ready_at, s.service_id
             LIMIT max_batches
               FOR UPDATE SKIP LOCKED) AS p;
    IF sids IS NULL THEN
        RETURN '{}';
    END IF;
    -- a head of a rate-limited target goes out with a slot of it, taken in
    -- pick order; once a target has none, its other heads stay queued
    IF rc.limited IS NOT NULL THEN
        FOR tg IN SELECT DISTINCT x.x FROM pg_catalog.unnest(tgs) x WHERE x.x = ANY (rc.limited) LOOP
            out_ := false;
            FOR i IN 1 .. pg_catalog.cardinality(sids) LOOP
                CONTINUE WHEN tgs[i] IS DISTINCT FROM tg;
                IF NOT out_ AND NOT gridha_internal.bucket_rate_slot(tg, t_us) THEN
                    out_ := true;
                END IF;
                IF out_ THEN
                    sids[i] := NULL;
                END IF;
            END LOOP;
        END LOOP;
        sids := pg_catalog.array_remove(sids, NULL);
        IF pg_catalog.cardinality(sids) = 0 THEN
            RETURN '{}';
        END IF;
    END IF;
    -- the batches first (their services' rows are locked), then the
    -- services, a hand-out after a batch's first counted in its service's
    -- resubmitted_total
    WITH u AS (
        UPDATE gridha.bucket_batches b
           SET status = 'submitting', epoch = bucket_next_batches.epoch, attempts = b.attempts + 1,
               instance_id = bucket_next_batches.instance_id, handed_out_at = t, submitted_at = NULL
          FROM gridha.bucket_services s
         WHERE s.bucket = bucket_next_batches.bucket AND s.service_id = ANY (sids)
           AND b.bucket = bucket_next_batches.bucket AND b.service_id = s.service_id
           AND b.seq = s.head_seq
        RETURNING b.service_id, b.batch_id, b.seq, b.payload, b.epoch, b.attempts, s.target)
    SELECT pg_catalog.array_agg(ROW(u.service_id, u.batch_id, u.seq, u.payload, u.epoch, u.attempts,
                                    u.target)::gridha.bucket_batch
                                ORDER BY pg_catalog.array_position(sids, u.service_id))
      INTO r FROM u;
    SELECT pg_catalog.array_agg(x.service_id) INTO again FROM pg_catalog.unnest(r) x WHERE x.attempts > 1;
    UPDATE gridha.bucket_services s
       SET in_flight = true, ready_at = NULL,
           resubmitted_total = s.resubmitted_total
                               + CASE WHEN s.service_id = ANY (again) THEN 1 ELSE 0 END
     WHERE s.bucket = bucket_next_batches.bucket AND s.service_id = ANY (sids);
    RETURN coalesce(r, '{}');
END
$$;

COMMENT ON FUNCTION gridha.bucket_next_batches(integer, uuid, bigint, integer) IS
'Citus mode: hands out up to max_batches heads of the bucket''s ready services (one per service, those that waited longest first) to the instance holding the bucket at that epoch, as an array; empty when none is ready';

/*
 * bucket_report_many(bucket, instance, kind, services, batches, epochs,
 * words): what the batched reports share: one bucket_report per row, each
 * in a subtransaction of its own, so that a row refused (stale epoch, not
 * in flight, unknown batch, NULL) is answered with its SQLSTATE and
 * message and does not undo the others. Each row is fenced by its own
 * epoch.
 */
CREATE FUNCTION gridha_internal.bucket_report_many(bucket integer, instance_id uuid, kind text,
                                                   service_ids text[], batch_ids text[], epochs bigint[],
                                                   words text[])
RETURNS gridha.bucket_report_result[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    out gridha.bucket_report_result[] := '{}';
    st gridha.batch_status;
    code text;
    msg text;
    i integer;
BEGIN
    FOR i IN 1 .. coalesce(pg_catalog.cardinality(service_ids), 0) LOOP
        st := NULL;
        code := NULL;
        msg := NULL;
        BEGIN
            IF service_ids[i] IS NULL OR batch_ids[i] IS NULL OR epochs[i] IS NULL OR words[i] IS NULL THEN
                RAISE EXCEPTION 'a report row must name a service, a batch, an epoch and a %',
                                CASE kind WHEN 'submission' THEN 'outcome' ELSE 'status' END
                    USING ERRCODE = '22004';
            END IF;
            IF kind = 'submission' THEN
                st := gridha_internal.bucket_report(bucket, instance_id, service_ids[i], batch_ids[i], epochs[i],
                        '{submitting}',
                        CASE words[i] WHEN 'accepted' THEN 'pending'::gridha.batch_status
                                      WHEN 'delayed' THEN 'delayed'::gridha.batch_status
                                      ELSE 'invalid'::gridha.batch_status END);
            ELSE
                st := gridha_internal.bucket_report(bucket, instance_id, service_ids[i], batch_ids[i], epochs[i],
                        '{pending,valid}', words[i]::gridha.batch_status);
            END IF;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
            st := NULL;
        END;
        out := out || ROW(service_ids[i], batch_ids[i], st, code, msg)::gridha.bucket_report_result;
    END LOOP;
    RETURN out;
END
$$;

COMMENT ON FUNCTION gridha_internal.bucket_report_many(integer, uuid, text, text[], text[], bigint[], text[]) IS
'Citus mode: what the batched per-bucket reports share: one fenced report per row, each in a subtransaction of its own; a refused row is answered with its SQLSTATE and does not undo the others';

CREATE FUNCTION gridha.bucket_report_submissions(bucket integer, instance_id uuid,
                                                 reports gridha.submission_report[])
RETURNS gridha.bucket_report_result[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    PERFORM gridha_internal.bucket_args(ARRAY[bucket::text, instance_id::text,
                                              CASE WHEN reports IS NOT NULL THEN '' END]);
    RETURN gridha_internal.bucket_report_many(bucket, instance_id, 'submission',
        ARRAY(SELECT r.service_id FROM pg_catalog.unnest(reports) WITH ORDINALITY AS r(service_id, batch_id, epoch, outcome, detail, o) ORDER BY r.o),
        ARRAY(SELECT r.batch_id FROM pg_catalog.unnest(reports) WITH ORDINALITY AS r(service_id, batch_id, epoch, outcome, detail, o) ORDER BY r.o),
        ARRAY(SELECT r.epoch FROM pg_catalog.unnest(reports) WITH ORDINALITY AS r(service_id, batch_id, epoch, outcome, detail, o) ORDER BY r.o),
        ARRAY(SELECT r.outcome::text FROM pg_catalog.unnest(reports) WITH ORDINALITY AS r(service_id, batch_id, epoch, outcome, detail, o) ORDER BY r.o));
END
$$;

COMMENT ON FUNCTION gridha.bucket_report_submissions(integer, uuid, gridha.submission_report[]) IS
'Citus mode: many bucket_report_submission of one bucket in one call, one gridha.submission_report per batch, each fenced by its own epoch: one element per row, in the order given, with its new status or the SQLSTATE and message that refused it (a refused row does not undo the others); detail is not stored in the mode';

CREATE FUNCTION gridha.bucket_report_statuses(bucket integer, instance_id uuid,
                                              reports gridha.status_report[])
RETURNS gridha.bucket_report_result[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    PERFORM gridha_internal.bucket_args(ARRAY[bucket::text, instance_id::text,
                                              CASE WHEN reports IS NOT NULL THEN '' END]);
    RETURN gridha_internal.bucket_report_many(bucket, instance_id, 'status',
        ARRAY(SELECT r.service_id FROM pg_catalog.unnest(reports) WITH ORDINALITY AS r(service_id, batch_id, epoch, status, detail, o) ORDER BY r.o),
        ARRAY(SELECT r.batch_id FROM pg_catalog.unnest(reports) WITH ORDINALITY AS r(service_id, batch_id, epoch, status, detail, o) ORDER BY r.o),
        ARRAY(SELECT r.epoch FROM pg_catalog.unnest(reports) WITH ORDINALITY AS r(service_id, batch_id, epoch, status, detail, o) ORDER BY r.o),
        ARRAY(SELECT r.status::text FROM pg_catalog.unnest(reports) WITH ORDINALITY AS r(service_id, batch_id, epoch, status, detail, o) ORDER BY r.o));
END
$$;

COMMENT ON FUNCTION gridha.bucket_report_statuses(integer, uuid, gridha.status_report[]) IS
'Citus mode: many bucket_report_status of one bucket in one call, one gridha.status_report per batch, each fenced by its own epoch: one element per row, in the order given, with its new status or the SQLSTATE and message that refused it (a refused row does not undo the others); detail is not stored in the mode';

REVOKE ALL ON FUNCTION
    gridha.bucket_next_batches(integer, uuid, bigint, integer),
    gridha.bucket_report_submissions(integer, uuid, gridha.submission_report[]),
    gridha.bucket_report_statuses(integer, uuid, gridha.status_report[]),
    gridha_internal.bucket_report_many(integer, uuid, text, text[], text[], bigint[], text[])
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    gridha.bucket_next_batches(integer, uuid, bigint, integer),
    gridha.bucket_report_submissions(integer, uuid, gridha.submission_report[]),
    gridha.bucket_report_statuses(integer, uuid, gridha.status_report[])
TO gridha_submitter;

-- --- issue 43.2: the Citus mode's instance calls, balance by bucket ---
--
-- docs/citus.md, "Built: the instance calls". In the Citus mode the C entry
-- points of next_batch, next_batches, renew_claims, acquire_claims and
-- the reports hand the call over (src/tables.c, gridha_citus_handover) to
-- gridha_internal.citus_<name> below, with the same arguments and result;
-- release_claims checks the mode first. These run on the coordinator: one
-- multi-shard read of the buckets without a lock, then one per-bucket
-- function per bucket (each a router call on the bucket's shard: every
-- locking statement stays within one bucket), in bucket order, in the
-- caller's transaction.

CREATE TYPE gridha_internal.citus_bucket AS (
    bucket      integer,
    holder      uuid,
    holder_role name,
    epoch       bigint,
    hard_expiry timestamptz,
    ready       integer,
    flying      integer,
    oldest      timestamptz
);

COMMENT ON TYPE gridha_internal.citus_bucket IS
'Citus mode: what an instance call reads of a bucket: its holder, role, epoch and lease, how many services have a head ready or in flight, and since when the oldest head waits';

/*
 * citus_buckets(): every bucket of the layout with its work, one
 * multi-shard read without a lock (Citus allows it; the locking happens in
 * the per-bucket functions). Ordered by bucket.
 */
CREATE FUNCTION gridha_internal.citus_buckets()
RETURNS gridha_internal.citus_bucket[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    r gridha_internal.citus_bucket[];
BEGIN
    SELECT pg_catalog.array_agg(ROW(c.bucket, c.holder, c.holder_role, c.epoch, c.hard_expiry,
                                    coalesce(w.ready, 0), coalesce(w.flying, 0), w.oldest)::gridha_internal.citus_bucket
                                ORDER BY c.bucket)
      INTO r
      FROM gridha.bucket_claims c
      LEFT JOIN (SELECT s.bucket,
                        pg_catalog.count(*) FILTER (WHERE s.ready_at IS NOT NULL)::integer AS ready,
                        pg_catalog.count(*) FILTER (WHERE s.in_flight)::integer AS flying,
                        pg_catalog.min(s.ready_at) AS oldest
                   FROM gridha.bucket_services s
                  WHERE s.ready_at IS NOT NULL OR s.in_flight
                  GROUP BY s.bucket) w ON w.bucket = c.bucket;
    RETURN coalesce(r, '{}');
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_buckets() IS
'Citus mode: every bucket with its holder and work, read without a lock over every shard';

/*
 * citus_take(bucket, instance, lease, takeover): bucket_acquire (a free
 * bucket) or bucket_takeover (one whose holder's lease ran out) for the
 * claim cycle, in a subtransaction that is undone when the bucket is not
 * taken. bucket_take locks the bucket's row before it looks at it, and a
 * row lock lasts to the end of the transaction: kept for a bucket another
 * instance took meanwhile, it would make that instance's hand-out (its
 * fence locks the row FOR SHARE) wait for this call while this call's
 * cycle, going on in bucket order, waits for a row that instance locked
 * further on: a cycle of waits across the workers, which Citus ends with
 * 40P01 (three instances starting at once did). Undone, the look leaves no
 * lock behind; the internal SQLSTATE RG049 that undoes it never leaves
 * this function. Epoch taken, or NULL.
 */
CREATE FUNCTION gridha_internal.citus_take(bucket integer, instance_id uuid, lease interval, takeover boolean)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    e bigint;
BEGIN
    BEGIN
        IF takeover THEN
            e := gridha.bucket_takeover(bucket, instance_id, lease);
        ELSE
            e := gridha.bucket_acquire(bucket, instance_id, lease);
        END IF;
        IF e IS NULL THEN
            RAISE EXCEPTION 'bucket % was not taken', bucket USING ERRCODE = 'RG049';
        END IF;
    EXCEPTION WHEN SQLSTATE 'RG049' THEN
        RETURN NULL;        -- the look at the row undone, with its lock
    END;
    RETURN e;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_take(integer, uuid, interval, boolean) IS
'Citus mode: the claim cycle''s take of a bucket (bucket_acquire, or bucket_takeover when takeover), undone with its row lock when the bucket is not taken; the epoch taken, or NULL';

/*
 * citus_cycle(instance, force, taken): the claim cycle of an instance in
 * the mode, by bucket; returns the buckets it holds afterwards (with their
 * epochs) and, in taken, those it took in this call.
 *
 * Refuses (RG008) when a bucket the instance holds was taken by a role the
 * caller is not a member of. Then, when due (force; a renewal due, every
 * gridha.renew_interval; a bucket to take or to give back), one pass over
 * the buckets in bucket order (so two instances' passes wait for each
 * other's rows in one order): its own buckets renewed (gridha.hard_expiry
 * as the lease) or released, free buckets with work taken
 * (bucket_acquire) and buckets whose holder's lease ran out taken over
 * (bucket_takeover), up to its share; a bucket looked at and not taken
 * keeps no lock (citus_take).
 *
 * The share: W buckets with work (a head ready or in flight), L live
 * holders (lease running, the caller counted), each instance holds
 * ceil(W / L) buckets with work at most; one above gives back the
 * difference, and one above floor(W / L) gives back one while a live
 * holder has fewer than floor(W / L) and nothing is free; one at floor(W /
 * L) or above takes no free bucket while such a holder is below it (that
 * one takes it: no give-back and take-again). Work-conserving:
 * an instance with no head ready in its buckets takes free work and
 * expired buckets whatever its share. Buckets without work are given back
 * (an instance keeps one, so that the others count it); an instance that
 * holds nothing takes a free one to be counted. Only buckets with nothing
 * in flight are given back.
 */
CREATE FUNCTION gridha_internal.citus_cycle(instance_id uuid, force boolean, OUT held gridha_internal.citus_bucket[],
                                            OUT taken integer[])
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    t timestamptz;
    lease interval := pg_catalog.current_setting('gridha.hard_expiry')::interval;
    every interval := least(pg_catalog.current_setting('gridha.renew_interval')::interval,
                            pg_catalog.current_setting('gridha.soft_expiry')::interval / 2, lease / 2);
    me name := session_user;
    bs gridha_internal.citus_bucket[];
    b gridha_internal.citus_bucket;
    e bigint;
    live uuid[];
    w integer := 0;
    nlive integer;
    hi integer;
    lo integer;
    mine integer := 0;        -- buckets with work the instance holds
    mine_all integer := 0;
    mine_ready integer := 0;
    free_work integer := 0;
    starved boolean;
    needy boolean := false;
    give integer;
    due boolean := force;
    keep_one boolean;
BEGIN
    IF instance_id IS NULL THEN
        RAISE EXCEPTION 'instance_id must not be null' USING ERRCODE = '22004';
    END IF;
    -- the instance's owner (RG008), or its registration on first use
    PERFORM gridha_internal.citus_instance(instance_id);
    -- the heads ready counted for the targets the instance serves
    bs := gridha_internal.citus_buckets(instance_id);
    -- leases from the clock, as the per-bucket functions set them
    t := pg_catalog.clock_timestamp();
    held := '{}';
    taken := '{}';
    FOREACH b IN ARRAY bs LOOP
        IF b.holder = instance_id AND NOT pg_catalog.pg_has_role(me, b.holder_role, 'MEMBER') THEN
            RAISE EXCEPTION 'role "%" does not own instance %', me, instance_id
                USING ERRCODE = 'RG008',
                      DETAIL = format('Role "%s" took bucket %s for that instance.', b.holder_role, b.bucket);
        END IF;
        IF b.ready + b.flying > 0 THEN
            w := w + 1;
        END IF;
        IF b.holder = instance_id THEN
            mine_all := mine_all + 1;
            IF b.ready + b.flying > 0 THEN
                mine := mine + 1;
            END IF;
            mine_ready := mine_ready + b.ready;
            IF t >= b.hard_expiry - lease + every OR b.hard_expiry > t + lease
               OR b.ready + b.flying = 0 THEN
                due := true;                -- a renewal due (or a shorter lease), or a bucket to give back
            END IF;
        ELSIF b.holder IS NOT NULL AND b.hard_expiry >= t THEN
            IF NOT b.holder = ANY (coalesce(live, '{}')) THEN
                live := coalesce(live, '{}') || b.holder;
            END IF;
        ELSIF b.ready + b.flying > 0 THEN
            free_work := free_work + 1;     -- free, or its holder's lease ran out
        END IF;
    END LOOP;
    nlive := coalesce(pg_catalog.cardinality(live), 0) + 1;
    hi := (w + nlive - 1) / nlive;
    lo := w / nlive;
    starved := mine_ready = 0;
    give := greatest(mine - hi, 0);
    IF nlive > 1 THEN
        -- a live holder below floor(W / L)
        needy := EXISTS (SELECT 1 FROM unnest(live) l(h)
                          WHERE (SELECT pg_catalog.count(*) FROM unnest(bs) x
                                  WHERE x.holder = l.h AND x.ready + x.flying > 0) < lo);
    END IF;
    IF give = 0 AND mine > lo AND free_work = 0 AND needy THEN
        give := 1;          -- one above floor(W / L) gives one back to it
    END IF;
    IF give > 0 OR (free_work > 0 AND (mine < lo OR (mine < hi AND NOT needy) OR starved)) OR mine_all = 0 THEN
        due := true;
    END IF;
    IF NOT due THEN
        FOREACH b IN ARRAY bs LOOP
            IF b.holder = instance_id THEN
                held := held || b;
            END IF;
        END LOOP;
        RETURN;
    END IF;

    keep_one := true;
    FOREACH b IN ARRAY bs LOOP
        IF b.holder = instance_id THEN
            IF (b.ready + b.flying = 0 AND (mine > 0 OR NOT keep_one))
               OR (give > 0 AND b.flying = 0 AND b.ready > 0) THEN
                BEGIN
                    PERFORM gridha.bucket_release(b.bucket, instance_id, b.epoch);
                    IF b.ready > 0 THEN
                        give := give - 1;
                        mine := mine - 1;
                    END IF;
                    mine_all := mine_all - 1;
                EXCEPTION WHEN SQLSTATE 'RG001' THEN
                    mine_all := mine_all - 1;
                END;
                CONTINUE;
            END IF;
            keep_one := false;
            BEGIN
                IF t >= b.hard_expiry - lease + every OR b.hard_expiry > t + lease THEN
                    PERFORM gridha.bucket_renew(b.bucket, instance_id, b.epoch, lease);
                    b.hard_expiry := t + lease;
                END IF;
                held := held || b;
            EXCEPTION WHEN SQLSTATE 'RG001' THEN
                mine_all := mine_all - 1;   -- taken over meanwhile: no longer its
            END;
        ELSIF b.ready + b.flying > 0 AND (b.holder IS NULL OR b.hard_expiry < t)
              AND (mine < lo OR (mine < hi AND NOT needy) OR starved) THEN
            e := gridha_internal.citus_take(b.bucket, instance_id, lease, b.holder IS NOT NULL);
            IF e IS NOT NULL THEN
                b.holder := instance_id;
                b.holder_role := me;
                b.epoch := e;
                b.hard_expiry := t + lease;
                b.ready := b.ready + b.flying;      -- what was in flight goes out again
                b.flying := 0;
                b.oldest := coalesce(b.oldest, t);
                held := held || b;
                taken := taken || b.bucket;
                mine := mine + 1;
                mine_all := mine_all + 1;
            END IF;
        END IF;
    END LOOP;
    IF mine_all = 0 THEN
        -- a seat: an instance that holds nothing takes a free bucket, so
        -- that the others count it in their share
        FOREACH b IN ARRAY bs LOOP
            CONTINUE WHEN b.holder IS NOT NULL AND b.hard_expiry >= t;
            CONTINUE WHEN b.holder = instance_id;
            e := gridha_internal.citus_take(b.bucket, instance_id, lease, b.holder IS NOT NULL);
            IF e IS NOT NULL THEN
                b.holder := instance_id;
                b.holder_role := me;
                b.epoch := e;
                b.hard_expiry := t + lease;
                b.ready := b.ready + b.flying;
                b.flying := 0;
                held := held || b;
                taken := taken || b.bucket;
                EXIT;
            END IF;
        END LOOP;
    END IF;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_cycle(uuid, boolean) IS
'Citus mode: an instance''s claim cycle by bucket (renew, take free and expired buckets up to its share, give back above it), one bucket at a time through the per-bucket functions; the buckets it holds afterwards and those it took';

/*
 * citus_handout(instance, held, n): up to n batches of distinct services
 * from the instance's buckets, the bucket whose head waited longest
 * first, each through bucket_next_batch (fenced; RG001, a bucket taken
 * over meanwhile, is skipped).
 */
CREATE FUNCTION gridha_internal.citus_handout(instance_id uuid, held gridha_internal.citus_bucket[], n integer)
RETURNS SETOF gridha.bucket_batch
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    b record;
    r gridha.bucket_batch;
    got integer := 0;
BEGIN
    FOR b IN SELECT x.bucket, x.epoch FROM unnest(held) x
              WHERE x.ready > 0 ORDER BY x.oldest, x.bucket LOOP
        LOOP
            EXIT WHEN got >= n;
            BEGIN
                r := gridha.bucket_next_batch(b.bucket, instance_id, b.epoch);
            EXCEPTION WHEN SQLSTATE 'RG001' THEN
                r := NULL;
            END;
            EXIT WHEN r IS NULL OR r.service_id IS NULL;
            got := got + 1;
            RETURN NEXT r;
        END LOOP;
        EXIT WHEN got >= n;
    END LOOP;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_handout(uuid, gridha_internal.citus_bucket[], integer) IS
'Citus mode: up to n batches handed out from the instance''s buckets, the longest-waiting bucket first, one per-bucket call each';

CREATE FUNCTION gridha_internal.citus_next_batch(instance_id uuid)
RETURNS TABLE (service_id text, batch_id text, payload bytea, epoch bigint, attempts integer)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    c record := gridha_internal.citus_cycle(instance_id, false);
BEGIN
    RETURN QUERY SELECT h.service_id, h.batch_id, h.payload, h.epoch, h.attempts
                   FROM gridha_internal.citus_handout(instance_id, c.held, 1) h;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_next_batch(uuid) IS
'Citus mode: gridha.next_batch: the claim cycle by bucket when due, then the head that waited longest among the instance''s buckets; 0 or 1 row';

CREATE FUNCTION gridha_internal.citus_next_batches(instance_id uuid, max_batches integer)
RETURNS TABLE (service_id text, batch_id text, payload bytea, epoch bigint, attempts integer)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    c record;
BEGIN
    IF max_batches IS NULL THEN
        RAISE EXCEPTION 'max_batches must not be null' USING ERRCODE = '22004';
    ELSIF max_batches < 0 THEN
        RAISE EXCEPTION 'max_batches must not be negative' USING ERRCODE = '22023';
    END IF;
    c := gridha_internal.citus_cycle(instance_id, false);
    RETURN QUERY SELECT h.service_id, h.batch_id, h.payload, h.epoch, h.attempts
                   FROM gridha_internal.citus_handout(instance_id, c.held, max_batches) h;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_next_batches(uuid, integer) IS
'Citus mode: gridha.next_batches: as next_batch, up to max_batches batches of distinct services';

CREATE FUNCTION gridha_internal.citus_renew_claims(instance_id uuid)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    lease interval := pg_catalog.current_setting('gridha.hard_expiry')::interval;
    b gridha_internal.citus_bucket;
    n integer := 0;
BEGIN
    IF instance_id IS NULL THEN
        RAISE EXCEPTION 'instance_id must not be null' USING ERRCODE = '22004';
    END IF;
    FOREACH b IN ARRAY gridha_internal.citus_buckets() LOOP
        CONTINUE WHEN b.holder IS DISTINCT FROM instance_id;
        BEGIN
            PERFORM gridha.bucket_renew(b.bucket, instance_id, b.epoch, lease);
            n := n + 1;
        EXCEPTION WHEN SQLSTATE 'RG001' THEN
            NULL;                           -- taken over meanwhile
        END;
    END LOOP;
    RETURN n;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_renew_claims(uuid) IS
'Citus mode: gridha.renew_claims: renews every bucket the instance holds (gridha.hard_expiry as the lease); returns how many';

/*
 * citus_acquire_claims(instance, serves): gridha.acquire_claims in the
 * mode: with serves, first (re)declares what the instance serves (22023
 * for a bad word, as on one server), after the owner check; then the claim
 * cycle by bucket now.
 */
CREATE FUNCTION gridha_internal.citus_acquire_claims(instance_id uuid, serves text[])
RETURNS TABLE (service_id text, epoch bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    c record;
    b gridha_internal.citus_bucket;
BEGIN
    IF serves IS NOT NULL AND instance_id IS NOT NULL THEN
        PERFORM gridha_internal.bucket_serves_check(serves);
        PERFORM gridha_internal.citus_instance(instance_id);
        UPDATE gridha.bucket_instances i SET serves = citus_acquire_claims.serves
         WHERE i.instance_id = citus_acquire_claims.instance_id
           AND i.serves IS DISTINCT FROM citus_acquire_claims.serves;
    END IF;
    c := gridha_internal.citus_cycle(instance_id, true);
    FOREACH b IN ARRAY c.held LOOP
        CONTINUE WHEN NOT b.bucket = ANY (c.taken);
        RETURN QUERY SELECT s.service_id, b.epoch FROM gridha.bucket_services s
                      WHERE s.bucket = b.bucket ORDER BY s.service_id;
    END LOOP;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_acquire_claims(uuid, text[]) IS
'Citus mode: gridha.acquire_claims: (re)declares serves when given, then the claim cycle by bucket now; one row per service of each bucket taken, with the bucket''s epoch';

/*
 * citus_release_claims(instance): gives back every bucket of the instance
 * with nothing in flight (as release_claims on one server keeps a claim
 * with a batch submitting); returns how many. The buckets it keeps are
 * taken over when its lease runs out.
 */
CREATE FUNCTION gridha_internal.citus_release_claims(instance_id uuid)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    b gridha_internal.citus_bucket;
    n integer := 0;
BEGIN
    IF instance_id IS NULL THEN
        RAISE EXCEPTION 'instance_id must not be null' USING ERRCODE = '22004';
    END IF;
    FOREACH b IN ARRAY gridha_internal.citus_buckets() LOOP
        CONTINUE WHEN b.holder IS DISTINCT FROM instance_id OR b.flying > 0;
        BEGIN
            PERFORM gridha.bucket_release(b.bucket, instance_id, b.epoch);
            n := n + 1;
        EXCEPTION WHEN SQLSTATE 'RG001' THEN
            NULL;
        END;
    END LOOP;
    RETURN n;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_release_claims(uuid) IS
'Citus mode: gridha.release_claims: gives back every bucket of the instance with nothing in flight; returns how many';

/*
 * citus_report(...): a report of the instance calls: the bucket from the
 * service id and the layout's bucket count, then the per-bucket report
 * (fenced by the bucket's epoch). The word in any case; the detail is not
 * stored (the mode's batches have no column for it).
 */
CREATE FUNCTION gridha_internal.citus_report(instance_id uuid, service_id text, batch_id text, epoch bigint,
                                             word text, submission boolean)
RETURNS gridha.batch_status
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    n integer;
    b integer;
BEGIN
    IF service_id IS NULL THEN
        RAISE EXCEPTION 'service_id must not be null' USING ERRCODE = '22004';
    END IF;
    SELECT c.buckets INTO n FROM gridha.bucket_claims c WHERE c.bucket = 0;
    b := gridha.bucket_of(service_id, n);
    IF submission THEN
        RETURN gridha.bucket_report_submission(b, instance_id, service_id, batch_id, epoch,
                                               pg_catalog.lower(word COLLATE "C"));
    END IF;
    RETURN gridha.bucket_report_status(b, instance_id, service_id, batch_id, epoch,
                                       pg_catalog.lower(word COLLATE "C"));
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_report(uuid, text, text, bigint, text, boolean) IS
'Citus mode: what the instance reports share: the service''s bucket under the layout, then the per-bucket report';

CREATE FUNCTION gridha_internal.citus_report_submission(instance_id uuid, service_id text, batch_id text, epoch bigint,
                                                        outcome text, detail text)
RETURNS gridha.batch_status
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$ SELECT gridha_internal.citus_report($1, $2, $3, $4, $5, true) $$;

CREATE FUNCTION gridha_internal.citus_report_submission(instance_id uuid, service_id text, batch_id text, epoch bigint,
                                                        outcome gridha.submission_outcome, detail text)
RETURNS gridha.batch_status
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$ SELECT gridha_internal.citus_report($1, $2, $3, $4, $5::text, true) $$;

CREATE FUNCTION gridha_internal.citus_report_status(instance_id uuid, service_id text, batch_id text, epoch bigint,
                                                    status text, detail text)
RETURNS gridha.batch_status
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$ SELECT gridha_internal.citus_report($1, $2, $3, $4, $5, false) $$;

CREATE FUNCTION gridha_internal.citus_report_status(instance_id uuid, service_id text, batch_id text, epoch bigint,
                                                    status gridha.ledger_status, detail text)
RETURNS gridha.batch_status
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$ SELECT gridha_internal.citus_report($1, $2, $3, $4, $5::text, false) $$;

COMMENT ON FUNCTION gridha_internal.citus_report_submission(uuid, text, text, bigint, text, text) IS
'Citus mode: gridha.report_submission (outcome as text, any case)';
COMMENT ON FUNCTION gridha_internal.citus_report_submission(uuid, text, text, bigint, gridha.submission_outcome, text) IS
'Citus mode: gridha.report_submission (outcome as gridha.submission_outcome)';
COMMENT ON FUNCTION gridha_internal.citus_report_status(uuid, text, text, bigint, text, text) IS
'Citus mode: gridha.report_status (status as text, any case)';
COMMENT ON FUNCTION gridha_internal.citus_report_status(uuid, text, text, bigint, gridha.ledger_status, text) IS
'Citus mode: gridha.report_status (status as gridha.ledger_status)';

REVOKE ALL ON FUNCTION
    gridha_internal.citus_buckets(),
    gridha_internal.citus_cycle(uuid, boolean),
    gridha_internal.citus_take(integer, uuid, interval, boolean),
    gridha_internal.citus_handout(uuid, gridha_internal.citus_bucket[], integer),
    gridha_internal.citus_next_batch(uuid),
    gridha_internal.citus_next_batches(uuid, integer),
    gridha_internal.citus_renew_claims(uuid),
    gridha_internal.citus_acquire_claims(uuid, text[]),
    gridha_internal.citus_release_claims(uuid),
    gridha_internal.citus_report(uuid, text, text, bigint, text, boolean),
    gridha_internal.citus_report_submission(uuid, text, text, bigint, text, text),
    gridha_internal.citus_report_submission(uuid, text, text, bigint, gridha.submission_outcome, text),
    gridha_internal.citus_report_status(uuid, text, text, bigint, text, text),
    gridha_internal.citus_report_status(uuid, text, text, bigint, gridha.ledger_status, text)
FROM PUBLIC;

-- --- issue 43: the batched reports and the read calls in the Citus mode ---
--
-- docs/citus.md, "Built: the batched reports and the read calls". In the
-- Citus mode the C entry points of report_submissions and report_statuses
-- (the composite forms; the array forms call them) hand the call over to
-- gridha_internal.citus_report_submissions / citus_report_statuses below,
-- which group the rows by bucket and call the batched per-bucket report
-- once per bucket, in bucket order. claimed_batches, pending_batches and
-- verify_batch stay SQL: their check (gridha_internal.instance_check, C)
-- hands over to gridha_internal.citus_instance_check in the mode, and
-- their statement reads the bucket tables there (gridha_internal.citus_mode
-- says which), without a lock; that branch is defined with them, above.

/*
 * citus_owner_check(instance): the calling role (session_user) may act as
 * the instance under the instance calls' rule (bucket_may_act: a superuser,
 * or a member): as its owner in gridha.bucket_instances, when registered,
 * and as the role that took each bucket it holds (RG008 otherwise). An
 * instance neither registered nor holding a bucket passes: it owns
 * nothing. Two reads without a lock: one router read of the reference
 * table, one over every shard.
 */
CREATE FUNCTION gridha_internal.citus_owner_check(instance_id uuid)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    me name := session_user;
    io name;
    b record;
BEGIN
    -- the owner the instance calls check (gridha_internal.citus_instance);
    -- a read does not register an id it names
    SELECT i.owner INTO io FROM gridha.bucket_instances i WHERE i.instance_id = citus_owner_check.instance_id;
    IF FOUND AND NOT gridha_internal.bucket_may_act(me, io) THEN
        RAISE EXCEPTION 'role "%" does not own instance %', me, instance_id
            USING ERRCODE = 'RG008',
                  DETAIL = format('The instance is registered to role "%s" (gridha.bucket_instances).', io);
    END IF;
    FOR b IN SELECT c.bucket, c.holder_role FROM gridha.bucket_claims c
              WHERE c.holder = citus_owner_check.instance_id ORDER BY c.bucket LOOP
        IF NOT gridha_internal.bucket_may_act(me, b.holder_role) THEN
            RAISE EXCEPTION 'role "%" does not own instance %', me, instance_id
                USING ERRCODE = 'RG008',
                      DETAIL = format('Role "%s" took bucket %s for that instance.', b.holder_role, b.bucket);
        END IF;
    END LOOP;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_owner_check(uuid) IS
'Citus mode: RG008 unless the calling role may act as the instance''s registered owner and as the role that took every bucket it holds (a superuser, or a member; the same rule as the instance calls)';

-- The read calls' check in the mode (gridha_internal.instance_check hands
-- over to these once the C part checked the arguments): the owner.
CREATE FUNCTION gridha_internal.citus_instance_check(instance_id uuid, max_batches integer)
RETURNS void
LANGUAGE sql STABLE
SET search_path = pg_catalog, gridha, pg_temp
AS $$ SELECT gridha_internal.citus_owner_check($1) $$;

CREATE FUNCTION gridha_internal.citus_instance_check(instance_id uuid, service_id text, batch_id text, epoch bigint)
RETURNS void
LANGUAGE sql STABLE
SET search_path = pg_catalog, gridha, pg_temp
AS $$ SELECT gridha_internal.citus_owner_check($1) $$;

COMMENT ON FUNCTION gridha_internal.citus_instance_check(uuid, integer) IS
'Citus mode: the check of claimed_batches and pending_batches after their arguments: the calling role may act as the instance (RG008)';
COMMENT ON FUNCTION gridha_internal.citus_instance_check(uuid, text, text, bigint) IS
'Citus mode: the check of verify_batch after its arguments: the calling role may act as the instance (RG008)';

/*
 * citus_report_many(instance, submission, reports): the batched reports
 * in the mode, one row per report in the order given. The whole call is
 * refused as on one server for a NULL instance or array, an array of more
 * than one dimension (22004, 22023), a read-only transaction (25006), a
 * role that may not act as the instance (RG008). Each row is checked as
 * the single server checks it (service_id, batch_id given and not empty,
 * epoch given and not negative, the outcome or status given: 22004 or
 * 22023 for that row alone); the rows that pass are grouped by bucket
 * (gridha.bucket_of under the layout's count) and reported with one call
 * of the batched per-bucket report per bucket, in bucket order, the rows
 * of a bucket in service_id order (byte order, ties in the order given),
 * as one server orders a batched report's rows: one lock order for every
 * caller. Each row is fenced by its own epoch and run in a subtransaction
 * of its own there: a stale row is refused (RG001) while the others pass.
 * The detail is not stored (the mode's batches have no column for it).
 */
CREATE FUNCTION gridha_internal.citus_report_many(instance_id uuid, submission boolean, reports anyarray)
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, sqlstate text, message text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    word_name text := CASE WHEN submission THEN 'outcome' ELSE 'status' END;
    sids text[];
    bids text[];
    eps bigint[];
    words text[];
    n integer;
    nb integer;
    k integer[];
    st gridha.batch_status[];
    codes text[];
    msgs text[];
    i integer;
    bk integer;
    got gridha.bucket_report_result[];
    pos integer[];
    j integer;
BEGIN
    IF instance_id IS NULL THEN
        RAISE EXCEPTION 'instance_id must not be null' USING ERRCODE = '22004';
    END IF;
    IF reports IS NULL THEN
        RAISE EXCEPTION 'reports must not be null' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.array_ndims(reports) > 1 THEN
        RAISE EXCEPTION 'reports must be a one-dimensional array' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute % in a read-only transaction',
                        CASE WHEN submission THEN 'report_submissions()' ELSE 'report_statuses()' END
            USING ERRCODE = '25006', HINT = 'Call it in a read-write transaction.';
    END IF;
    PERFORM gridha_internal.citus_owner_check(instance_id);
    -- the rows, taken apart (a NULL element is a row of NULLs)
    SELECT pg_catalog.array_agg(x.s ORDER BY x.o), pg_catalog.array_agg(x.b ORDER BY x.o),
           pg_catalog.array_agg(x.e ORDER BY x.o), pg_catalog.array_agg(x.w::text ORDER BY x.o)
      INTO sids, bids, eps, words
      FROM pg_catalog.unnest(reports) WITH ORDINALITY AS x(s, b, e, w, d, o);
    n := coalesce(pg_catalog.cardinality(sids), 0);
    IF n = 0 THEN
        RETURN;
    END IF;
    SELECT c.buckets INTO nb FROM gridha.bucket_claims c WHERE c.bucket = 0;
    k := pg_catalog.array_fill(NULL::integer, ARRAY[n]);
    st := pg_catalog.array_fill(NULL::gridha.batch_status, ARRAY[n]);
    codes := pg_catalog.array_fill(NULL::text, ARRAY[n]);
    msgs := pg_catalog.array_fill(NULL::text, ARRAY[n]);
    FOR i IN 1 .. n LOOP
        IF sids[i] IS NULL THEN
            codes[i] := '22004'; msgs[i] := 'service_id must not be null';
        ELSIF sids[i] = '' THEN
            codes[i] := '22023'; msgs[i] := 'service_id must not be empty';
        ELSIF bids[i] IS NULL THEN
            codes[i] := '22004'; msgs[i] := 'batch_id must not be null';
        ELSIF bids[i] = '' THEN
            codes[i] := '22023'; msgs[i] := 'batch_id must not be empty';
        ELSIF eps[i] IS NULL THEN
            codes[i] := '22004'; msgs[i] := 'epoch must not be null';
        ELSIF eps[i] < 0 THEN
            codes[i] := '22023'; msgs[i] := 'epoch must not be negative';
        ELSIF words[i] IS NULL THEN
            codes[i] := '22004'; msgs[i] := word_name || ' must not be null';
        ELSE
            k[i] := gridha.bucket_of(sids[i], nb);
        END IF;
    END LOOP;
    -- one call of the batched per-bucket report per bucket, in bucket order
    FOR bk IN SELECT DISTINCT x.b FROM pg_catalog.unnest(k) AS x(b) WHERE x.b IS NOT NULL ORDER BY x.b LOOP
        pos := ARRAY(SELECT x.i FROM pg_catalog.unnest(k) WITH ORDINALITY AS x(b, i)
                      WHERE x.b = bk ORDER BY sids[x.i] COLLATE "C", x.i);
        IF submission THEN
            got := gridha.bucket_report_submissions(bk, instance_id,
                     ARRAY(SELECT ROW(sids[x.p], bids[x.p], eps[x.p], words[x.p]::gridha.submission_outcome,
                                      NULL)::gridha.submission_report
                             FROM pg_catalog.unnest(pos) WITH ORDINALITY AS x(p, o) ORDER BY x.o));
        ELSE
            got := gridha.bucket_report_statuses(bk, instance_id,
                     ARRAY(SELECT ROW(sids[x.p], bids[x.p], eps[x.p], words[x.p]::gridha.ledger_status,
                                      NULL)::gridha.status_report
                             FROM pg_catalog.unnest(pos) WITH ORDINALITY AS x(p, o) ORDER BY x.o));
        END IF;
        FOR j IN 1 .. pg_catalog.cardinality(pos) LOOP
            st[pos[j]] := (got[j]).status;
            codes[pos[j]] := (got[j]).sqlstate;
            msgs[pos[j]] := (got[j]).message;
        END LOOP;
    END LOOP;
    RETURN QUERY SELECT sids[g.r], bids[g.r], st[g.r], codes[g.r], msgs[g.r] FROM pg_catalog.generate_series(1, n) AS g(r);
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_report_many(uuid, boolean, anyarray) IS
'Citus mode: what the batched reports share: the rows checked, grouped by bucket, one batched per-bucket report per bucket in bucket order; one result row per report, in the order given';

-- PL/pgSQL, not SQL: the C entry point hands its set-result information
-- over to these, and a PL/pgSQL function answers a set in one call
-- (materialized), where an SQL one would answer a row per call.
CREATE FUNCTION gridha_internal.citus_report_submissions(instance_id uuid, reports gridha.submission_report[])
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, sqlstate text, message text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT * FROM gridha_internal.citus_report_many(instance_id, true, reports);
END
$$;

CREATE FUNCTION gridha_internal.citus_report_statuses(instance_id uuid, reports gridha.status_report[])
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, sqlstate text, message text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT * FROM gridha_internal.citus_report_many(instance_id, false, reports);
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_report_submissions(uuid, gridha.submission_report[]) IS
'Citus mode: gridha.report_submissions: one batched per-bucket report per bucket, in bucket order; one row per report, in the order given';
COMMENT ON FUNCTION gridha_internal.citus_report_statuses(uuid, gridha.status_report[]) IS
'Citus mode: gridha.report_statuses: one batched per-bucket report per bucket, in bucket order; one row per report, in the order given';

REVOKE ALL ON FUNCTION
    gridha_internal.citus_mode(),
    gridha_internal.citus_owner_check(uuid),
    gridha_internal.citus_instance_check(uuid, integer),
    gridha_internal.citus_instance_check(uuid, text, text, bigint),
    gridha_internal.citus_claimed_batches(uuid, integer),
    gridha_internal.citus_pending_batches(uuid, integer),
    gridha_internal.citus_verify_batch(uuid, text, text, bigint),
    gridha_internal.citus_report_many(uuid, boolean, anyarray),
    gridha_internal.citus_report_submissions(uuid, gridha.submission_report[]),
    gridha_internal.citus_report_statuses(uuid, gridha.status_report[])
FROM PUBLIC;

-- --- issue 43: producers and instances in the Citus mode (enqueue, register_instance, owners) ---
--
-- docs/citus.md, "Built: producers and instances". In the Citus mode the C
-- entry point of gridha.enqueue checks its arguments as on one server, then
-- hands the call over (src/tables.c, gridha_citus_handover) to
-- gridha_internal.citus_enqueue; gridha.register_instance calls
-- gridha_internal.citus_register_instance. An instance's owner is kept in
-- gridha.bucket_instances (a reference table citus_setup creates), which
-- bucket_acquire and bucket_takeover read on the node they run on.

/*
 * bucket_may_act(role, owner): whether role may act as an instance owner
 * owns: a superuser, or a member of owner (a role that no longer exists
 * owns nothing anyone but a superuser may use), as on one server.
 */
CREATE FUNCTION gridha_internal.bucket_may_act(role name, owner name)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
SELECT coalesce((SELECT a.rolsuper FROM pg_catalog.pg_roles a WHERE a.rolname = $1), false)
    OR CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_roles a WHERE a.rolname = $2)
            THEN pg_catalog.pg_has_role($1, $2, 'MEMBER') ELSE false END
$$;

COMMENT ON FUNCTION gridha_internal.bucket_may_act(name, name) IS
'Citus mode: whether a role may act as an instance another role owns (a superuser, or a member of the owner)';

/*
 * citus_instance(instance): what the instance calls check first in the
 * mode: the calling role (session_user) may act as the instance (RG008
 * otherwise); an id gridha.bucket_instances does not hold is registered,
 * owned by the calling role, as on one server (refused with RG024 when
 * gridha.unknown_instance is refuse). Runs on the coordinator.
 */
CREATE FUNCTION gridha_internal.citus_instance(instance_id uuid)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r name := session_user;
    io name;
    t timestamptz;
BEGIN
    SELECT i.owner INTO io FROM gridha.bucket_instances i WHERE i.instance_id = citus_instance.instance_id;
    IF NOT FOUND THEN
        IF pg_catalog.current_setting('gridha.unknown_instance', true) = 'refuse' THEN
            RAISE EXCEPTION 'unknown instance %', citus_instance.instance_id
                USING ERRCODE = 'RG024',
                      DETAIL = 'gridha.unknown_instance is refuse: a call does not register an instance id it names.',
                      HINT = 'Register the instance first: SELECT gridha.register_instance(''label''), and use the id it returns.';
        END IF;
        t := pg_catalog.clock_timestamp();
        INSERT INTO gridha.bucket_instances AS i (instance_id, owner, registered_at)
        VALUES (citus_instance.instance_id, r, t)
        ON CONFLICT (instance_id) DO NOTHING;
        -- another session may have registered it meanwhile: its owner
        SELECT i.owner INTO io FROM gridha.bucket_instances i WHERE i.instance_id = citus_instance.instance_id;
    END IF;
    IF NOT gridha_internal.bucket_may_act(r, io) THEN
        RAISE EXCEPTION 'role "%" does not own instance %', r, citus_instance.instance_id
            USING ERRCODE = 'RG008',
                  DETAIL = format('The instance is registered to role "%s" (gridha.bucket_instances).', io),
                  HINT = 'Act as an instance your role registered (gridha.register_instance), or as a member of its owner.';
    END IF;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_instance(uuid) IS
'Citus mode: the calling role may act as the instance (RG008 otherwise); an unknown id is registered, owned by it (RG024 when gridha.unknown_instance is refuse)';

/*
 * citus_enqueue(...): gridha.enqueue in the mode, after the C entry point
 * checked the ids as on one server: the service's bucket under the layout
 * (the count every bucket row carries), then bucket_enqueue with the
 * target (RG006, RG013 as on one server; nothing written then).
 */
CREATE FUNCTION gridha_internal.citus_enqueue(service_id text, batch_id text, payload bytea, target text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    n integer;
BEGIN
    SELECT c.buckets INTO n FROM gridha.bucket_claims c WHERE c.bucket = 0;
    -- the background workers on the coordinator are woken at the commit
    PERFORM gridha_internal.workers_wake();
    RETURN gridha.bucket_enqueue(gridha.bucket_of(citus_enqueue.service_id, n), citus_enqueue.service_id,
                                 citus_enqueue.batch_id, citus_enqueue.payload, citus_enqueue.target);
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_enqueue(text, text, bytea, text) IS
'Citus mode: gridha.enqueue: the service''s bucket under the layout, then gridha.bucket_enqueue with the target; wakes the background workers at the commit';

/*
 * citus_register_instance(label, serves): gridha.register_instance in the
 * mode: a new instance in gridha.bucket_instances, owned by the calling
 * role (session_user, the role the mode's checks read), with what it
 * serves (checked as on one server: 22023; NULL: every target).
 */
CREATE FUNCTION gridha_internal.citus_register_instance(label text, serves text[])
RETURNS uuid
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    id uuid := pg_catalog.gen_random_uuid();
    t timestamptz := pg_catalog.clock_timestamp();
    r name := session_user;
BEGIN
    PERFORM gridha_internal.bucket_serves_check(serves);
    INSERT INTO gridha.bucket_instances (instance_id, owner, label, registered_at, serves)
    VALUES (id, r, citus_register_instance.label, t, citus_register_instance.serves);
    RETURN id;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_register_instance(text, text[]) IS
'Citus mode: gridha.register_instance: a new instance in gridha.bucket_instances, owned by the calling role, with the kinds of target it serves';

REVOKE ALL ON FUNCTION
    gridha_internal.bucket_may_act(name, name),
    gridha_internal.citus_instance(uuid),
    gridha_internal.citus_enqueue(text, text, bytea, text),
    gridha_internal.citus_register_instance(text, text[])
FROM PUBLIC;

-- --- issue 43: maintenance and metrics in the Citus mode ---
--
-- docs/citus.md, "Built: maintenance and metrics". In the Citus mode
-- gridha.run_maintenance and gridha.prune_batches prune the bucket tables,
-- one bucket at a time in ascending order (gridha_internal.bucket_prune:
-- every statement a router statement on the bucket's shard, run on the
-- node holding it), and gridha.metrics reads the bucket tables. The
-- maintenance lease and its ticks stay where one server keeps them,
-- gridha.leases and gridha.maintenance_ticks, plain tables of the
-- coordinator, where every contract call of the mode runs (off the
-- coordinator run_maintenance and prune_batches refuse, RG043). What a
-- prune removed is added to gridha.pruned_totals (on the coordinator, in
-- the prune's transaction), a record of it; gridha.metrics reads the
-- services' running totals (gridha.bucket_services), which keep pruned
-- batches counted.
-- The views that read gridha's tables of one server (empty in the mode)
-- refuse there (RG035) instead of showing nothing.

CREATE TABLE gridha.pruned_totals (
    bucket      integer NOT NULL,
    target      text NOT NULL DEFAULT 'default',
    batches     bigint NOT NULL DEFAULT 0,
    committed   bigint NOT NULL DEFAULT 0,
    invalid     bigint NOT NULL DEFAULT 0,
    resubmitted bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, target)
);

COMMENT ON TABLE gridha.pruned_totals IS
'Citus mode: per bucket and target (the target of the batches'' service), what maintenance pruned so far (batches, of which committed and invalid, and their hand-outs after the first): a plain table of the coordinator, written in the prune''s transaction: the record of what retention removed (gridha.metrics reads the services'' running totals, which keep pruned batches counted)';

REVOKE ALL ON gridha.pruned_totals FROM PUBLIC;
GRANT SELECT ON gridha.pruned_totals TO gridha_admin;
SELECT pg_catalog.pg_extension_config_dump('gridha.pruned_totals', '');

/*
 * bucket_prune(bucket, cutoff, max_batches): deletes at most max_batches
 * final batches (committed, invalid) of the bucket finished before cutoff,
 * created first first; returns how many, of which committed and invalid,
 * and the hand-outs after the first they had. Every statement reads and
 * writes that bucket's shard only (a router statement, run on the node
 * holding it), the first a write that changes nothing, as in the fence
 * (a move of the shard under way makes it wait, and what follows runs on
 * the placement after the move). The delete re-checks the status on the
 * row it deletes: a batch that is not final is never removed. It locks
 * only final batches, which no instance call writes or waits for.
 * per_target splits the counts by the target of the batches' service
 * (a JSON array of {target, pruned, committed, invalid, resubmitted}).
 */
CREATE FUNCTION gridha_internal.bucket_prune(bucket integer, cutoff timestamptz, max_batches bigint,
                                             OUT pruned bigint, OUT committed bigint, OUT invalid bigint,
                                             OUT resubmitted bigint, OUT per_target jsonb)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    UPDATE gridha.bucket_claims c SET epoch = c.epoch
     WHERE c.bucket = bucket_prune.bucket AND c.epoch < 0;
    WITH d AS (
        DELETE FROM gridha.bucket_batches b
         WHERE b.bucket = bucket_prune.bucket
           AND (b.service_id, b.batch_id) IN (
                SELECT x.service_id, x.batch_id FROM gridha.bucket_batches x
                 WHERE x.bucket = bucket_prune.bucket AND x.created_at < bucket_prune.cutoff
                   AND x.status IN ('committed', 'invalid') AND x.finished_at < bucket_prune.cutoff
                 ORDER BY x.created_at
                 LIMIT bucket_prune.max_batches)
           AND b.status IN ('committed', 'invalid') AND b.finished_at < bucket_prune.cutoff
        RETURNING b.service_id, b.status, b.attempts
    ), t AS (
        SELECT coalesce(s.target, 'default') AS target, pg_catalog.count(*) AS pruned,
               pg_catalog.count(*) FILTER (WHERE d.status = 'committed') AS committed,
               pg_catalog.count(*) FILTER (WHERE d.status = 'invalid') AS invalid,
               coalesce(pg_catalog.sum(greatest(d.attempts - 1, 0)), 0) AS resubmitted
          FROM d
          LEFT JOIN gridha.bucket_services s
            ON s.bucket = bucket_prune.bucket AND s.service_id = d.service_id
         GROUP BY 1
    )
    SELECT coalesce(pg_catalog.sum(t.pruned), 0), coalesce(pg_catalog.sum(t.committed), 0),
           coalesce(pg_catalog.sum(t.invalid), 0), coalesce(pg_catalog.sum(t.resubmitted), 0),
           coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t) ORDER BY t.target), '[]')
      INTO pruned, committed, invalid, resubmitted, per_target
      FROM t;
END
$$;

COMMENT ON FUNCTION gridha_internal.bucket_prune(integer, timestamptz, bigint) IS
'Citus mode: deletes at most max_batches committed or invalid batches of the bucket finished before cutoff, oldest first, in the bucket''s shard only; how many, of which committed and invalid, and their hand-outs after the first';

/*
 * citus_coordinator(call): RG043 unless this node is the coordinator of
 * the Citus cluster: the mode's maintenance keeps its lease, ticks and
 * pruned totals there.
 */
CREATE FUNCTION gridha_internal.citus_coordinator(call text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    coordinator boolean;
BEGIN
    EXECUTE 'SELECT pg_catalog.citus_is_coordinator()' INTO coordinator;
    IF NOT coordinator THEN
        RAISE EXCEPTION 'gridha.% runs on the coordinator in Citus mode, and this node is not it', call
            USING ERRCODE = 'RG043',
                  DETAIL = 'The Citus mode keeps its maintenance lease, ticks and pruned totals on the coordinator (gridha.leases, gridha.maintenance_ticks, gridha.pruned_totals); a run elsewhere would hold a lease of its own.',
                  HINT = 'Call it on the coordinator.';
    END IF;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_coordinator(text) IS
'Citus mode: RG043 unless this node is the Citus coordinator (the mode''s maintenance runs there)';

/*
 * citus_prune(max_batches): one prune pass of the mode: the buckets in
 * ascending order (one lock order for every pass), each pruned by
 * bucket_prune until max_batches batches are gone in all (so a bucket
 * with more to prune than that holds the later ones back to the next
 * pass); what each bucket lost is added to gridha.pruned_totals, in the
 * same transaction. None while gridha.retention is -1. Returns how many.
 */
CREATE FUNCTION gridha_internal.citus_prune(max_batches bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    s record;
    r record;
    n integer;
    k integer;
    cutoff timestamptz;
    left_ bigint := max_batches;
BEGIN
    SELECT * INTO s FROM gridha_internal.lease_settings();
    IF s.retention_s < 0 OR max_batches <= 0 THEN
        RETURN 0;
    END IF;
    cutoff := pg_catalog.now() - s.retention_s * interval '1 second';
    SELECT c.buckets INTO n FROM gridha.bucket_claims c WHERE c.bucket = 0;
    FOR k IN 0 .. coalesce(n, 0) - 1 LOOP
        EXIT WHEN left_ <= 0;
        SELECT * INTO r FROM gridha_internal.bucket_prune(k, cutoff, left_);
        CONTINUE WHEN r.pruned = 0;
        INSERT INTO gridha.pruned_totals AS t (bucket, target, batches, committed, invalid, resubmitted)
        SELECT k, x.target, x.pruned, x.committed, x.invalid, x.resubmitted
          FROM pg_catalog.jsonb_to_recordset(r.per_target)
               AS x(target text, pruned bigint, committed bigint, invalid bigint, resubmitted bigint)
        ON CONFLICT (bucket, target) DO UPDATE
           SET batches = t.batches + EXCLUDED.batches, committed = t.committed + EXCLUDED.committed,
               invalid = t.invalid + EXCLUDED.invalid, resubmitted = t.resubmitted + EXCLUDED.resubmitted;
        left_ := left_ - r.pruned;
    END LOOP;
    RETURN max_batches - left_;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_prune(bigint) IS
'Citus mode: one prune pass: the buckets in ascending order, at most max_batches final batches past gridha.retention in all, what each bucket lost added to gridha.pruned_totals; returns how many';

/*
 * citus_run_maintenance(instance, duty): gridha.run_maintenance in the
 * mode, with its checks, result and outcomes. The arguments are checked
 * as on one server (22004, 22023, RG025, 25006), the node must be the
 * coordinator (RG043), the calling role may act as the instance (RG008;
 * an id never registered is registered, owned by it, as the instance
 * calls do, or RG024). The lease and the tick are one server's, on the
 * coordinator's gridha.leases and gridha.maintenance_ticks: one leader per
 * duty, a tick at most once per gridha.maintenance_interval. The tick's
 * duty is one prune pass (citus_prune, gridha.prune_chunk) and the ID
 * window agent (id_windows_top_up, on the coordinator's gridha.id_windows,
 * as on one server); the sweep of instances, the hand-out log and the
 * service counts do not apply to the mode (docs/citus.md):
 * swept_instances is 0.
 */
CREATE FUNCTION gridha_internal.citus_run_maintenance(
    instance_id uuid,
    duty text,
    OUT term bigint,
    OUT tick bigint,
    OUT outcome gridha.maintenance_outcome,
    OUT swept_instances integer,
    OUT pruned_batches bigint,
    OUT opened_windows integer)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s        record;
    latest   bigint;
    lease_ok boolean;
    tick_run bigint;
BEGIN
    IF citus_run_maintenance.instance_id IS NULL THEN
        RAISE EXCEPTION 'instance_id must not be null' USING ERRCODE = '22004';
    ELSIF citus_run_maintenance.duty IS NULL THEN
        RAISE EXCEPTION 'duty must not be null' USING ERRCODE = '22004';
    ELSIF citus_run_maintenance.duty = '' THEN
        RAISE EXCEPTION 'duty must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute run_maintenance() in a read-only transaction'
            USING ERRCODE = '25006', HINT = 'Call it in a read-write transaction.';
    END IF;
    IF citus_run_maintenance.duty = 'maintenance' THEN
        RAISE EXCEPTION 'gridha''s maintenance duty is "gridha.maintenance", not "maintenance"'
            USING ERRCODE = '22023',
                  DETAIL = 'Since gridha 1.3, "maintenance" is a name like any other for a user''s duty, and gridha''s own maintenance runs under "gridha.maintenance".',
                  HINT = 'Call gridha.run_maintenance(instance_id) without a duty, or name the duty "gridha.maintenance".';
    ELSIF citus_run_maintenance.duty <> 'gridha.maintenance'
          AND pg_catalog.left(citus_run_maintenance.duty, 7) = 'gridha.' THEN
        RAISE EXCEPTION 'duty "%" is reserved for gridha', citus_run_maintenance.duty
            USING ERRCODE = 'RG025',
                  DETAIL = 'Duties whose names begin with "gridha." are gridha''s own; gridha''s maintenance runs under "gridha.maintenance".',
                  HINT = 'Name your duty otherwise; to run gridha''s maintenance, call gridha.run_maintenance.';
    END IF;
    PERFORM gridha_internal.citus_coordinator('run_maintenance');
    PERFORM gridha_internal.citus_instance(citus_run_maintenance.instance_id);
    swept_instances := 0;
    pruned_batches := 0;
    opened_windows := 0;
    term := gridha_internal.lease_take(citus_run_maintenance.instance_id, citus_run_maintenance.duty, false, false);
    IF term IS NULL THEN
        outcome := 'not_leader';
        RETURN;
    END IF;
    SELECT * INTO s FROM gridha_internal.lease_settings();
    -- the tick, as maintenance_tick writes it: once, past every stored
    -- tick of the duty, under a lease the instance holds at this term
    INSERT INTO gridha.maintenance_ticks AS m (duty, tick, term, leader, started_at)
    SELECT citus_run_maintenance.duty, t.tick, citus_run_maintenance.term,
           citus_run_maintenance.instance_id, pg_catalog.now()
      FROM (SELECT (pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.now()) * 1000 / s.interval_ms)
                    * s.interval_ms)::int8 AS tick) t
     WHERE EXISTS (SELECT 1 FROM gridha.leases l
                    WHERE l.duty = citus_run_maintenance.duty AND l.leader = citus_run_maintenance.instance_id
                      AND l.term = citus_run_maintenance.term AND l.expires_at > pg_catalog.now())
       AND NOT EXISTS (SELECT 1 FROM gridha.maintenance_ticks p
                        WHERE p.duty = citus_run_maintenance.duty AND p.tick >= t.tick)
    ON CONFLICT (duty, tick) DO NOTHING
    RETURNING m.tick INTO tick_run;
    IF tick_run IS NOT NULL THEN
        pruned_batches := gridha_internal.citus_prune(s.prune_chunk);
        opened_windows := gridha_internal.id_windows_top_up();
        DELETE FROM gridha.maintenance_ticks m
         WHERE m.duty = citus_run_maintenance.duty AND m.tick < tick_run
           AND m.started_at < pg_catalog.now() - interval '1 day';
        UPDATE gridha.maintenance_ticks m
           SET finished_at = pg_catalog.clock_timestamp(), swept_instances = 0,
               pruned_batches = citus_run_maintenance.pruned_batches,
               opened_windows = citus_run_maintenance.opened_windows
         WHERE m.duty = citus_run_maintenance.duty AND m.tick = tick_run;
        tick := tick_run;
        outcome := 'ran';
        RETURN;
    END IF;
    -- why no tick ran: the current tick, the highest stored, the lease
    SELECT t.tick,
           (SELECT pg_catalog.max(p.tick) FROM gridha.maintenance_ticks p WHERE p.duty = citus_run_maintenance.duty),
           EXISTS (SELECT 1 FROM gridha.leases l
                    WHERE l.duty = citus_run_maintenance.duty AND l.leader = citus_run_maintenance.instance_id
                      AND l.term = citus_run_maintenance.term AND l.expires_at > pg_catalog.now())
      INTO tick, latest, lease_ok
      FROM (SELECT (pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.now()) * 1000 / s.interval_ms)
                    * s.interval_ms)::int8 AS tick) t;
    outcome := CASE WHEN NOT lease_ok THEN 'lost_lease'
                    WHEN latest > tick THEN 'clock_behind'
                    ELSE 'already_run' END;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_run_maintenance(uuid, text) IS
'Citus mode: gridha.run_maintenance: the duty''s lease and tick on the coordinator, as on one server, a prune pass over the buckets in ascending order and the ID windows topped up';

/*
 * citus_prune_batches(max_batches): gridha.prune_batches in the mode: one
 * prune pass by hand (citus_prune), without the lease, as on one server;
 * at most max_batches (NULL: gridha.prune_chunk) batches.
 */
CREATE FUNCTION gridha_internal.citus_prune_batches(max_batches integer)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    IF max_batches < 0 THEN
        RAISE EXCEPTION 'max_batches must not be negative'
            USING ERRCODE = '22023', DETAIL = format('The value given was %s.', max_batches);
    END IF;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute prune_batches() in a read-only transaction'
            USING ERRCODE = '25006', HINT = 'Call it in a read-write transaction.';
    END IF;
    PERFORM gridha_internal.citus_coordinator('prune_batches');
    RETURN gridha_internal.citus_prune(coalesce(max_batches::bigint,
                                                (SELECT s.prune_chunk FROM gridha_internal.lease_settings() s)));
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_prune_batches(integer) IS
'Citus mode: gridha.prune_batches: one prune pass over the buckets in ascending order, by hand (no lease)';

REVOKE ALL ON FUNCTION
    gridha_internal.bucket_prune(integer, timestamptz, bigint),
    gridha_internal.citus_coordinator(text),
    gridha_internal.citus_prune(bigint),
    gridha_internal.citus_run_maintenance(uuid, text),
    gridha_internal.citus_prune_batches(integer),
    gridha_internal.citus_metrics(),
    gridha_internal.citus_view_check()
FROM PUBLIC;
-- the views' readers call these through them (a function a view calls is
-- checked against the reader)
GRANT EXECUTE ON FUNCTION gridha_internal.citus_mode(), gridha_internal.citus_metrics()
TO gridha_submitter, gridha_admin;
GRANT EXECUTE ON FUNCTION gridha_internal.citus_view_check()
TO gridha_producer, gridha_submitter, gridha_admin;

-- --- issue 43: targets in the Citus mode (the targets' reference table, enqueue's target, serves) ---
--
-- docs/citus.md, "Built: targets". gridha.citus_setup calls
-- gridha_internal.citus_setup_targets, which adds a service's target to
-- gridha.bucket_services and what an instance serves to
-- gridha.bucket_instances, creates gridha.bucket_targets (a reference
-- table: every node holds the targets, read where a per-bucket function
-- runs) with the rows of gridha.targets, and distributes the enqueue with
-- a target. An administrator keeps writing gridha.targets on the
-- coordinator, as on one server: its own triggers and constraints check
-- the row (same SQLSTATEs), then the trigger targets_citus_mirror (on that
-- local table, not on a Citus table) writes the row to
-- gridha.bucket_targets, rate limits included: the limit's state (its
-- theoretical arrival time and the slots taken) is a row of
-- gridha.bucket_rates in bucket 0's shard, and every hand-out of a limited
-- target takes its slot in an update of that row, wherever it runs
-- (docs/citus.md, "Rate limits in the mode").

/*
 * citus_setup_targets(): citus_setup's part for targets, in its
 * transaction (after the bucket tables and gridha.bucket_instances were
 * distributed). A target's rate limit comes along with the state one
 * server kept for it (gridha.target_rate_state), in microseconds (since
 * the epoch): the hand-out's arithmetic on them is integer arithmetic,
 * which Citus runs in a distributed UPDATE (it refuses timestamptz -
 * interval there, a STABLE operator, on a column). The state is not on
 * the reference table: Citus serializes every write of a reference table
 * cluster-wide under a lock of its whole shard, taken before the row's,
 * which a hand-out would then wait for while holding its bucket's rows;
 * gridha.bucket_rates is distributed by bucket with the others, every row
 * in bucket 0, one placement: a write there waits for nothing but the
 * row, which the hand-out locks without waiting (bucket_rate_slot).
 */
CREATE FUNCTION gridha_internal.citus_setup_targets()
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
BEGIN
    ALTER TABLE gridha.bucket_services ADD COLUMN target text NOT NULL DEFAULT 'default';
    ALTER TABLE gridha.bucket_instances ADD COLUMN serves text[];
    CREATE TABLE gridha.bucket_targets (
        target          text PRIMARY KEY,
        submit_url      text,
        status_url      text,
        submit_function text,
        status_function text,
        reject_codes    integer[] NOT NULL,
        request_headers jsonb,
        -- the rate limit (as gridha.targets) and its state: the interval
        -- in microseconds, the theoretical arrival time in microseconds
        -- since the epoch, the slots taken
        rate_interval    interval,
        rate_burst       integer NOT NULL DEFAULT 1,
        rate_interval_us bigint
    );
    COMMENT ON TABLE gridha.bucket_targets IS
    'Citus mode: the targets (a reference table: on every node), written from gridha.targets on the coordinator (trigger targets_citus_mirror), with their rate limits (rate_interval_us: the interval in microseconds)';
    REVOKE ALL ON gridha.bucket_targets FROM PUBLIC;
    -- as gridha.targets on one server: submitters and administrators read it
    GRANT SELECT ON gridha.bucket_targets TO gridha_submitter, gridha_admin;
    PERFORM create_reference_table('gridha.bucket_targets');
    INSERT INTO gridha.bucket_targets (target, submit_url, status_url, submit_function, status_function,
                                       reject_codes, request_headers, rate_interval, rate_burst,
                                       rate_interval_us)
    SELECT t.target, t.submit_url, t.status_url, t.submit_function, t.status_function,
           t.reject_codes, t.request_headers, t.rate_interval, t.rate_burst,
           (EXTRACT(epoch FROM t.rate_interval) * 1000000)::int8
      FROM gridha.targets t;
    CREATE TABLE gridha.bucket_rates (
        bucket      integer NOT NULL DEFAULT 0,
        target      text NOT NULL,
        tat_us      bigint NOT NULL DEFAULT 0,
        slots_taken bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (bucket, target)
    );
    COMMENT ON TABLE gridha.bucket_rates IS
    'Citus mode: each target''s rate-limit state, in bucket 0: its theoretical arrival time (tat_us, microseconds since the epoch) and the slots taken, written by the hand-outs of a limited target';
    REVOKE ALL ON gridha.bucket_rates FROM PUBLIC;
    GRANT SELECT ON gridha.bucket_rates TO gridha_admin;
    PERFORM create_distributed_table('gridha.bucket_rates', 'bucket', colocate_with => 'gridha.bucket_claims');
    INSERT INTO gridha.bucket_rates (bucket, target, tat_us, slots_taken)
    SELECT 0, t.target,
           CASE WHEN pg_catalog.isfinite(r.tat) THEN (EXTRACT(epoch FROM r.tat) * 1000000)::int8 ELSE 0 END,
           coalesce(r.slots_taken, 0)
      FROM gridha.targets t
      LEFT JOIN gridha.target_rate_state r ON r.target = t.target;
    PERFORM create_distributed_function('gridha.bucket_enqueue(integer,text,text,bytea,text)'::regprocedure,
                                        distribution_arg_name => 'bucket',
                                        colocate_with => 'gridha.bucket_claims');
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_setup_targets() IS
'Citus mode: what gridha.citus_setup lays out for targets: the service''s target, what an instance serves, gridha.bucket_targets (a reference table) filled from gridha.targets, rate limits and their state included';

/*
 * targets_citus_mirror: in the Citus mode, a row written to gridha.targets
 * on the coordinator (checked by that table's own triggers and
 * constraints, as on one server) is written to gridha.bucket_targets.
 * Refused there: the delete of a target a service is on (23503, as the
 * single server's foreign key); a rename carries the services along (as
 * ON UPDATE CASCADE does). A new rate applies at once, as on one server
 * (targets_rate_changed): the time still owed under the old interval is
 * scaled to the new one, under the lock of the target's row, which the
 * hand-outs take their slots under. Outside the mode (one server; a
 * restored dump before gridha.citus_restore): nothing.
 */
CREATE FUNCTION gridha_internal.targets_citus_mirror()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    used text;
    tat bigint;
    now_us bigint;
    us bigint;
BEGIN
    -- (not in the mode: one server, or a restore before gridha.citus_restore,
    -- whose dump brings gridha.bucket_targets' rows of its own)
    IF pg_catalog.to_regclass('gridha.bucket_targets') IS NULL OR NOT gridha_internal.citus_mode() THEN
        RETURN NULL;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        us := (EXTRACT(epoch FROM NEW.rate_interval) * 1000000)::int8;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO gridha.bucket_targets (target, submit_url, status_url, submit_function, status_function,
                                           reject_codes, request_headers, rate_interval, rate_burst,
                                           rate_interval_us)
        VALUES (NEW.target, NEW.submit_url, NEW.status_url, NEW.submit_function, NEW.status_function,
                NEW.reject_codes, NEW.request_headers, NEW.rate_interval, NEW.rate_burst, us);
        INSERT INTO gridha.bucket_rates (bucket, target) VALUES (0, NEW.target);
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' OR OLD.target <> NEW.target THEN
        SELECT s.service_id INTO used FROM gridha.bucket_services s WHERE s.target = OLD.target LIMIT 1;
        IF FOUND AND TG_OP = 'DELETE' THEN
            RAISE EXCEPTION 'update or delete on table "targets" violates foreign key constraint "service_claims_target_fkey" on table "service_claims"'
                USING ERRCODE = '23503',
                      DETAIL = format('Key (target)=(%s) is still referenced from table "bucket_services" (service "%s").',
                                      OLD.target, used);
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        DELETE FROM gridha.bucket_targets t WHERE t.target = OLD.target;
        DELETE FROM gridha.bucket_rates r WHERE r.bucket = 0 AND r.target = OLD.target;
        RETURN NULL;
    END IF;
    -- the rate state's row locked first (a hand-out trying for a slot
    -- meanwhile gets none), read, the new rate's state computed here
    -- (integers: see citus_setup_targets)
    SELECT r.tat_us INTO tat FROM gridha.bucket_rates r WHERE r.bucket = 0 AND r.target = OLD.target FOR UPDATE;
    IF OLD.rate_interval IS DISTINCT FROM NEW.rate_interval THEN
        now_us := (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::int8;
        IF OLD.rate_interval IS NOT NULL AND NEW.rate_interval IS NOT NULL AND tat > now_us THEN
            tat := now_us + ((tat - now_us) * (EXTRACT(epoch FROM NEW.rate_interval)
                                               / EXTRACT(epoch FROM OLD.rate_interval)))::int8;
        ELSE
            tat := least(tat, now_us);
        END IF;
    END IF;
    UPDATE gridha.bucket_targets t
       SET target = NEW.target, submit_url = NEW.submit_url, status_url = NEW.status_url,
           submit_function = NEW.submit_function, status_function = NEW.status_function,
           reject_codes = NEW.reject_codes, request_headers = NEW.request_headers,
           rate_interval = NEW.rate_interval, rate_burst = NEW.rate_burst, rate_interval_us = us
     WHERE t.target = OLD.target;
    UPDATE gridha.bucket_rates r SET target = NEW.target, tat_us = coalesce(tat, 0)
     WHERE r.bucket = 0 AND r.target = OLD.target;
    IF OLD.target <> NEW.target AND used IS NOT NULL THEN
        UPDATE gridha.bucket_services s SET target = NEW.target WHERE s.target = OLD.target;
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION gridha_internal.targets_citus_mirror() IS
'trigger: in the Citus mode, writes a row of gridha.targets to gridha.bucket_targets (a new rate applies at once, as on one server; 23503 for the delete of a target a service is on; a rename carries its services along)';

CREATE TRIGGER targets_citus_mirror
    AFTER INSERT OR UPDATE OR DELETE ON gridha.targets
    FOR EACH ROW EXECUTE FUNCTION gridha_internal.targets_citus_mirror();

/*
 * bucket_servable(serves): the targets an instance that declared serves
 * (kinds of target source) can serve, as one server judges them: the
 * target's submit kind and its status kind (if any) among serves; a
 * target without a submit source is served by none. NULL when serves is
 * NULL (an instance that declared nothing serves every target). Reads
 * gridha.bucket_targets where it runs.
 */
CREATE FUNCTION gridha_internal.bucket_servable(serves text[])
RETURNS text[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
SELECT CASE WHEN $1 IS NULL THEN NULL ELSE coalesce(
  (SELECT pg_catalog.array_agg(t.target ORDER BY t.target)
     FROM gridha.bucket_targets t
    WHERE ((t.submit_url IS NOT NULL AND 'submit_url' = ANY ($1))
           OR (t.submit_function IS NOT NULL AND 'submit_function' = ANY ($1)))
      AND ((t.status_url IS NULL AND t.status_function IS NULL)
           OR (t.status_url IS NOT NULL AND 'status_url' = ANY ($1))
           OR (t.status_function IS NOT NULL AND 'status_function' = ANY ($1)))), '{}') END
$$;

COMMENT ON FUNCTION gridha_internal.bucket_servable(text[]) IS
'Citus mode: the targets an instance that serves these kinds can serve (NULL: every target)';

/*
 * bucket_serves_check(serves): serves as one server checks it: no NULL,
 * only the four kind words (22023).
 */
CREATE FUNCTION gridha_internal.bucket_serves_check(serves text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    w text;
BEGIN
    IF serves IS NULL THEN
        RETURN;
    END IF;
    FOREACH w IN ARRAY serves LOOP
        IF w IS NULL THEN
            RAISE EXCEPTION 'serves must not contain NULL' USING ERRCODE = '22023';
        END IF;
        IF w NOT IN ('submit_url', 'submit_function', 'status_url', 'status_function') THEN
            RAISE EXCEPTION 'unknown target kind "%"', w
                USING ERRCODE = '22023',
                      HINT = 'Use submit_url, submit_function, status_url and status_function.';
        END IF;
    END LOOP;
END
$$;

COMMENT ON FUNCTION gridha_internal.bucket_serves_check(text[]) IS
'Citus mode: 22023 for a NULL or an unknown word in serves, as on one server';

/*
 * bucket_enqueue_target(...): the per-bucket enqueue with a target. A
 * target given must be in gridha.bucket_targets (RG006); a new service is
 * created on it ('default' without one); an existing service must be on
 * it already (RG013). Both checked before anything is written.
 */
CREATE FUNCTION gridha_internal.bucket_enqueue_target(bucket integer, service_id text, batch_id text, payload bytea,
                                                      target text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    n integer;
    q bigint;
    cur text;
    t timestamptz := pg_catalog.now();
BEGIN
    PERFORM gridha_internal.bucket_args(ARRAY[bucket::text, service_id, batch_id]);
    IF service_id = '' OR batch_id = '' OR pg_catalog.octet_length(service_id) > 512
       OR pg_catalog.octet_length(batch_id) > 512 THEN
        RAISE EXCEPTION 'a service or batch id must be 1 to 512 bytes' USING ERRCODE = '22023';
    END IF;
    IF target = '' THEN
        RAISE EXCEPTION 'target must not be empty' USING ERRCODE = '22023';
    END IF;
    SELECT c.buckets INTO n FROM gridha.bucket_claims c WHERE c.bucket = bucket_enqueue_target.bucket;
    IF NOT FOUND OR gridha.bucket_of(bucket_enqueue_target.service_id, n) <> bucket_enqueue_target.bucket THEN
        RAISE EXCEPTION 'service "%" is not in bucket %', bucket_enqueue_target.service_id, bucket_enqueue_target.bucket
            USING ERRCODE = 'RG036',
                  DETAIL = CASE WHEN n IS NULL THEN 'There is no such bucket in this layout.'
                                ELSE format('Its bucket is %s (gridha.bucket_of(service_id, %s)).',
                                            gridha.bucket_of(bucket_enqueue_target.service_id, n), n) END,
                  HINT = 'Pass gridha.bucket_of(service_id, buckets) as the bucket, with the count gridha.citus_setup laid out.';
    END IF;
    IF target IS NOT NULL THEN
        SELECT s.target INTO cur FROM gridha.bucket_services s
         WHERE s.bucket = bucket_enqueue_target.bucket AND s.service_id = bucket_enqueue_target.service_id;
        IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM gridha.bucket_targets x WHERE x.target = bucket_enqueue_target.target) THEN
            RAISE EXCEPTION 'unknown target "%"', target
                USING ERRCODE = 'RG006',
                      HINT = 'Add it first: INSERT INTO gridha.targets (target, ...) VALUES (...).';
        END IF;
    END IF;
    INSERT INTO gridha.bucket_services (bucket, service_id, target)
    VALUES (bucket_enqueue_target.bucket, bucket_enqueue_target.service_id, coalesce(bucket_enqueue_target.target, 'default'))
    ON CONFLICT DO NOTHING;
    -- the service's row, locked: its target is the one it has (a
    -- concurrent enqueue may have created it on another)
    SELECT s.target INTO cur FROM gridha.bucket_services s
     WHERE s.bucket = bucket_enqueue_target.bucket AND s.service_id = bucket_enqueue_target.service_id
       FOR UPDATE;
    IF target IS NOT NULL AND cur <> target THEN
        RAISE EXCEPTION 'service "%" is on target "%", not "%"', service_id, cur, target
            USING ERRCODE = 'RG013',
                  DETAIL = 'A service''s target is set when the service is created.',
                  HINT = 'Enqueue without a target; in the Citus mode a service is not moved (gridha.move_service is refused there).';
    END IF;
    UPDATE gridha.bucket_services s
       SET tail_seq = s.tail_seq + 1,
           ready_at = CASE WHEN NOT s.in_flight AND s.head_seq = s.tail_seq + 1 THEN t
                           ELSE s.ready_at END
     WHERE s.bucket = bucket_enqueue_target.bucket AND s.service_id = bucket_enqueue_target.service_id
    RETURNING s.tail_seq INTO q;
    INSERT INTO gridha.bucket_batches (bucket, service_id, batch_id, seq, payload, created_at)
    VALUES (bucket_enqueue_target.bucket, bucket_enqueue_target.service_id, bucket_enqueue_target.batch_id, q,
            bucket_enqueue_target.payload, t);
    RETURN q;
END
$$;

COMMENT ON FUNCTION gridha_internal.bucket_enqueue_target(integer, text, text, bytea, text) IS
'Citus mode: what both forms of gridha.bucket_enqueue share: appends a batch to its service''s queue in its bucket, the service created on the target given (default without); RG006 for an unknown target, RG013 for another target than the service''s';

CREATE FUNCTION gridha.bucket_enqueue(bucket integer, service_id text, batch_id text, payload bytea, target text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    RETURN gridha_internal.bucket_enqueue_target(bucket, service_id, batch_id, payload, target);
END
$$;

COMMENT ON FUNCTION gridha.bucket_enqueue(integer, text, text, bytea, text) IS
'Citus mode: appends a batch to its service''s queue in the service''s bucket, the service created on target (NULL: default) when new; RG006 for an unknown target, RG013 for another target than the service''s; returns its seq';

/*
 * citus_buckets(instance): as citus_buckets(), the heads ready counted
 * only for services whose target the instance serves (its serves in
 * gridha.bucket_instances), so that its claim cycle counts as work only
 * what it can hand out: a bucket whose ready heads it cannot serve is
 * given back, and another instance that serves them takes it.
 */
CREATE FUNCTION gridha_internal.citus_buckets(instance_id uuid)
RETURNS gridha_internal.citus_bucket[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    sv text[];
    ok text[];
    r gridha_internal.citus_bucket[];
BEGIN
    SELECT i.serves INTO sv FROM gridha.bucket_instances i WHERE i.instance_id = citus_buckets.instance_id;
    ok := gridha_internal.bucket_servable(sv);
    IF ok IS NULL THEN
        RETURN gridha_internal.citus_buckets();
    END IF;
    SELECT pg_catalog.array_agg(ROW(c.bucket, c.holder, c.holder_role, c.epoch, c.hard_expiry,
                                    coalesce(w.ready, 0), coalesce(w.flying, 0), w.oldest)::gridha_internal.citus_bucket
                                ORDER BY c.bucket)
      INTO r
      FROM gridha.bucket_claims c
      LEFT JOIN (SELECT s.bucket,
                        pg_catalog.count(*) FILTER (WHERE s.ready_at IS NOT NULL AND s.target = ANY (ok))::integer AS ready,
                        pg_catalog.count(*) FILTER (WHERE s.in_flight)::integer AS flying,
                        pg_catalog.min(s.ready_at) FILTER (WHERE s.target = ANY (ok)) AS oldest
                   FROM gridha.bucket_services s
                  WHERE s.ready_at IS NOT NULL OR s.in_flight
                  GROUP BY s.bucket) w ON w.bucket = c.bucket;
    RETURN coalesce(r, '{}');
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_buckets(uuid) IS
'Citus mode: every bucket with its holder and work, the heads ready counted only for targets the instance serves; read without a lock over every shard';




REVOKE ALL ON FUNCTION
    gridha_internal.citus_setup_targets(),
    gridha_internal.targets_citus_mirror(),
    gridha_internal.bucket_servable(text[]),
    gridha_internal.bucket_serves_check(text[]),
    gridha_internal.bucket_enqueue_target(integer, text, text, bytea, text),
    gridha.bucket_enqueue(integer, text, text, bytea, text),
    gridha_internal.citus_buckets(uuid)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gridha.bucket_enqueue(integer, text, text, bytea, text) TO gridha_producer;

-- --- issue 43: the Citus mode's lifecycle (rows moved in at setup, a dump restored) ---
--
-- docs/citus.md, "Lifecycle". gridha.citus_setup(move_rows => true, ...)
-- lays a database out by bucket and moves into the buckets what gridha 1.2
-- or 1.3 kept on the coordinator before (batches, services' queues,
-- instances); gridha.citus_restore() makes the bucket tables a restored
-- dump brought back as plain tables the mode's layout again.

/*
 * citus_setup(move_rows, buckets): citus_setup(buckets), and with
 * move_rows the rows of gridha's local tables moved into the buckets in
 * the same transaction, instead of the refusal RG032. What moves: every
 * batch (status, seq, payload, attempts, epoch, instance, timestamps; not
 * detail or not_before, which the mode's batches do not have), every
 * service's queue (head, tail, when its head became ready, whether it is
 * in flight) and its target, every instance with its owner (an instance
 * without one is registered to the calling role), label and serves (the
 * targets themselves, rate limits included, are laid out by citus_setup). Claims do not move (a bucket
 * holds services several instances claimed): every bucket starts free, at
 * the highest epoch its services had, so its next holder's epoch is above
 * every epoch handed out before, and a late write of a 1.2 claim is
 * refused (RG001); its heads in flight go out again at that epoch. Leader
 * leases and maintenance ticks are cleared. The ID sequences and their
 * windows stay as they are: the mode serves them from the coordinator's
 * tables, which they are. No default for buckets: with one argument,
 * citus_setup(NULL) would not know which function it calls.
 */
CREATE FUNCTION gridha.citus_setup(move_rows boolean, buckets integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    n integer;
    t timestamptz := pg_catalog.clock_timestamp();
    me name := session_user;
    nb bigint;
    ns bigint;
    ni bigint;
    r record;
BEGIN
    IF move_rows IS NULL THEN
        RAISE EXCEPTION 'move_rows must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- nothing to move, or no Citus, not the coordinator, in the mode
    -- already: citus_setup's own answer (and its refusals)
    IF NOT move_rows OR pg_catalog.to_regclass('gridha.bucket_claims') IS NOT NULL
       OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'citus') THEN
        RETURN gridha.citus_setup(buckets);
    END IF;
    -- no write of gridha's tables from here to the commit (the lock order
    -- of citus_setup, stronger: the rows are read, then removed)
    LOCK TABLE gridha.service_claims, gridha.batches, gridha.instances, gridha.leases, gridha.id_sequences,
               gridha.maintenance_ticks
        IN ACCESS EXCLUSIVE MODE;

    -- the rows, kept for this transaction, then gridha's tables emptied
    -- (in one statement: the instances' truncate checks that no claim is
    -- held, and the claims go with them)
    CREATE TEMP TABLE citus_move_services ON COMMIT DROP AS
    SELECT c.service_id, c.target, coalesce(c.head_seq, c.tail_seq + 1) AS head_seq, c.tail_seq,
           CASE WHEN c.head_seq IS NOT NULL AND NOT c.in_flight THEN coalesce(c.ready_at, t) END AS ready_at,
           c.head_seq IS NOT NULL AND c.in_flight AS in_flight,
           greatest(c.epoch, coalesce((SELECT max(b.epoch) FROM gridha.batches b WHERE b.service_id = c.service_id), 0)) AS epoch,
           c.committed_total, c.invalid_total, c.resubmitted_total
      FROM gridha.service_claims c;
    CREATE TEMP TABLE citus_move_batches ON COMMIT DROP AS
    SELECT b.service_id, b.batch_id, b.seq, b.payload, b.status, b.created_at, b.epoch, b.attempts,
           b.instance_id, b.handed_out_at, b.submitted_at, b.finished_at
      FROM gridha.batches b;
    CREATE TEMP TABLE citus_move_instances ON COMMIT DROP AS
    SELECT i.instance_id, coalesce(i.owner, me) AS owner, i.label, i.registered_at, i.serves
      FROM gridha.instances i;
    TRUNCATE gridha.batches, gridha.service_claims, gridha.instances, gridha.leases, gridha.maintenance_ticks;

    -- the layout, with every refusal of citus_setup (RG031 to RG034, and
    -- RG032 for any row left in gridha's tables)
    n := gridha.citus_setup(buckets);

    INSERT INTO gridha.bucket_instances (instance_id, owner, label, registered_at, serves)
    SELECT m.instance_id, m.owner, m.label, m.registered_at, m.serves FROM citus_move_instances m;
    INSERT INTO gridha.bucket_services (bucket, service_id, target, head_seq, tail_seq, ready_at, in_flight,
                                        committed_total, invalid_total, resubmitted_total)
    SELECT gridha.bucket_of(m.service_id, n), m.service_id, m.target, m.head_seq, m.tail_seq, m.ready_at,
           m.in_flight, m.committed_total, m.invalid_total, m.resubmitted_total
      FROM citus_move_services m;
    INSERT INTO gridha.bucket_batches (bucket, service_id, batch_id, seq, payload, status, created_at, epoch,
                                       attempts, instance_id, handed_out_at, submitted_at, finished_at)
    SELECT gridha.bucket_of(m.service_id, n), m.service_id, m.batch_id, m.seq, m.payload, m.status, m.created_at,
           m.epoch, m.attempts, m.instance_id, m.handed_out_at, m.submitted_at, m.finished_at
      FROM citus_move_batches m;
    -- every bucket at the highest epoch its services had (free: its next
    -- holder takes it at one more)
    FOR r IN SELECT gridha.bucket_of(m.service_id, n) AS bucket, max(m.epoch) AS epoch
               FROM citus_move_services m GROUP BY 1 HAVING max(m.epoch) > 0 ORDER BY 1 LOOP
        UPDATE gridha.bucket_claims c SET epoch = r.epoch WHERE c.bucket = r.bucket;
    END LOOP;
    SELECT count(*) INTO nb FROM citus_move_batches;
    SELECT count(*) INTO ns FROM citus_move_services;
    SELECT count(*) INTO ni FROM citus_move_instances;
    RAISE NOTICE 'gridha moved % batch(es) of % service(s) and % instance(s) into % buckets', nb, ns, ni, n
        USING DETAIL = 'Every bucket is free, at the highest epoch of its services; the heads that were in flight go out again when an instance takes their bucket.';
    RETURN n;
END
$$;

COMMENT ON FUNCTION gridha.citus_setup(boolean, integer) IS
'Citus mode: citus_setup(buckets), and with move_rows the batches, queues and instances of gridha''s local tables moved into the buckets (every bucket free, at the highest epoch of its services); ID sequences stay on the coordinator, which serves them in the mode';

/*
 * citus_restore(): after a dump of a database in Citus mode is restored on
 * the coordinator of a new Citus cluster (workers added first): the
 * restore brought the bucket tables back as plain tables of the
 * coordinator, with their rows; this distributes them again as
 * citus_setup laid them out (by bucket, co-located; gridha.bucket_instances
 * a reference table), moves their rows into the shards (no row left in a
 * shell), and makes the per-bucket functions distributed functions again.
 * Rows are kept as they are: every batch and status, every bucket's epoch,
 * holder and lease. First it checks that the restored rows are one layout
 * (RG048 otherwise, nothing changed). Refuses without Citus or off the
 * coordinator (RG031), without restored bucket tables (RG047), with tables
 * already distributed (RG034), with rows in gridha's own tables (RG032).
 * Returns the bucket count.
 */
CREATE FUNCTION gridha.citus_restore()
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    coordinator boolean;
    t text;
    n integer;
    bad text;
    has_rows boolean;
    f regprocedure;
    nf integer := 0;
    nb bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'citus') THEN
        RAISE EXCEPTION 'gridha.citus_restore needs Citus, which is not installed in database "%"',
                        current_database()
            USING ERRCODE = 'RG031',
                  DETAIL = 'A dump of a database in Citus mode restores into the coordinator of a Citus cluster only.',
                  HINT = 'Create the new cluster first (CREATE EXTENSION citus, citus_set_coordinator_host, citus_add_node for each worker), restore the dump into its coordinator, then call gridha.citus_restore() there.';
    END IF;
    EXECUTE 'SELECT pg_catalog.citus_is_coordinator()' INTO coordinator;
    IF NOT coordinator THEN
        RAISE EXCEPTION 'gridha.citus_restore runs on the coordinator of a Citus cluster, and this node is not one'
            USING ERRCODE = 'RG031',
                  DETAIL = 'This node is a worker, or no node has been added to its cluster.',
                  HINT = 'Call it on the coordinator, after citus_set_coordinator_host and citus_add_node.';
    END IF;
    FOREACH t IN ARRAY ARRAY['bucket_claims', 'bucket_services', 'bucket_batches', 'bucket_instances',
                             'bucket_targets', 'bucket_rates'] LOOP
        IF pg_catalog.to_regclass('gridha.' || t) IS NULL THEN
            RAISE EXCEPTION 'nothing to restore: gridha.% does not exist', t
                USING ERRCODE = 'RG047',
                      DETAIL = 'gridha.citus_restore lays out again the bucket tables a restored dump of a database in Citus mode brought back; this database has none (or not all six).',
                      HINT = 'Restore the whole dump first; for a database never in Citus mode, call gridha.citus_setup.';
        END IF;
    END LOOP;
    -- a layout in place (citus_setup, or citus_restore before): nothing to do
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p
                WHERE p.logicalrelid IN ('gridha.bucket_claims'::regclass, 'gridha.bucket_services'::regclass,
                                         'gridha.bucket_batches'::regclass, 'gridha.bucket_instances'::regclass,
                                         'gridha.bucket_targets'::regclass, 'gridha.bucket_rates'::regclass)) THEN
        RAISE EXCEPTION 'gridha is already in Citus mode in this database'
            USING ERRCODE = 'RG034',
                  DETAIL = 'The bucket tables are Citus tables already: gridha.citus_setup or gridha.citus_restore ran here.',
                  HINT = 'Nothing to do.';
    END IF;
    LOCK TABLE gridha.service_claims, gridha.batches, gridha.instances, gridha.leases, gridha.id_sequences
        IN SHARE ROW EXCLUSIVE MODE;
    LOCK TABLE gridha.bucket_claims, gridha.bucket_services, gridha.bucket_batches, gridha.bucket_instances,
               gridha.bucket_targets, gridha.bucket_rates
        IN ACCESS EXCLUSIVE MODE;
    FOREACH t IN ARRAY ARRAY['batches', 'service_claims', 'instances', 'leases'] LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM gridha.%I)', t) INTO has_rows;
        IF has_rows THEN
            RAISE EXCEPTION 'gridha.% holds rows; gridha.citus_restore needs them empty', t
                USING ERRCODE = 'RG032',
                      DETAIL = 'In the Citus mode gridha''s own tables stay empty; rows there (written by a call made before this one) would be left behind, unseen.',
                      HINT = 'Restore into a new database and call gridha.citus_restore() before any client connects.';
        END IF;
    END LOOP;

    -- the restored rows are one layout, or nothing changes (a dump taken
    -- while calls ran can hold a service's queue and its batches from
    -- different moments)
    SELECT c.buckets INTO n FROM gridha.bucket_claims c WHERE c.bucket = 0;
    IF n IS NULL THEN
        bad := 'gridha.bucket_claims has no bucket 0';
    ELSIF n < 1 OR n > 16384 OR (n & (n - 1)) <> 0 THEN
        bad := format('bucket 0 says %s buckets, not a power of two from 1 to 16384', n);
    ELSIF (SELECT count(*) FROM gridha.bucket_claims) <> n
          OR EXISTS (SELECT 1 FROM gridha.bucket_claims c WHERE c.buckets <> n OR c.bucket < 0 OR c.bucket >= n) THEN
        bad := format('gridha.bucket_claims does not hold buckets 0 to %s, each once, each of %s buckets', n - 1, n);
    ELSIF EXISTS (SELECT 1 FROM gridha.bucket_claims c
                   WHERE c.epoch < 0 OR (c.holder IS NULL) <> (c.holder_role IS NULL)) THEN
        bad := (SELECT format('bucket %s has a negative epoch, or a holder without its role', min(c.bucket))
                  FROM gridha.bucket_claims c WHERE c.epoch < 0 OR (c.holder IS NULL) <> (c.holder_role IS NULL));
    ELSE
        SELECT format('service "%s" is in bucket %s, not in its bucket %s', s.service_id, s.bucket,
                      gridha.bucket_of(s.service_id, n))
          INTO bad FROM gridha.bucket_services s
         WHERE s.bucket <> gridha.bucket_of(s.service_id, n) ORDER BY s.service_id LIMIT 1;
        IF bad IS NULL THEN
            SELECT format('batch "%s" of service "%s" (seq %s) %s', b.batch_id, b.service_id, b.seq,
                          CASE WHEN s.service_id IS NULL THEN 'has no service row'
                               WHEN b.bucket <> s.bucket THEN 'is not in its service''s bucket'
                               WHEN b.seq > s.tail_seq THEN format('is past its service''s tail (%s)', s.tail_seq)
                               WHEN b.seq >= s.head_seq AND b.status IN ('committed', 'invalid')
                                    THEN format('is %s at or past its service''s head (%s)', b.status, s.head_seq)
                               WHEN b.seq < s.head_seq AND b.status NOT IN ('committed', 'invalid')
                                    THEN format('is %s before its service''s head (%s)', b.status, s.head_seq)
                               ELSE format('is %s, the head of a service whose in_flight is %s', b.status, s.in_flight) END)
              INTO bad
              FROM gridha.bucket_batches b
              LEFT JOIN gridha.bucket_services s ON s.service_id = b.service_id
             WHERE s.service_id IS NULL OR b.bucket <> s.bucket OR b.seq > s.tail_seq
                OR (b.seq >= s.head_seq AND b.status IN ('committed', 'invalid'))
                OR (b.seq < s.head_seq AND b.status NOT IN ('committed', 'invalid'))
                OR (b.seq = s.head_seq AND (b.status IN ('submitting', 'pending', 'valid')) <> s.in_flight)
             ORDER BY b.service_id, b.seq LIMIT 1;
        END IF;
        IF bad IS NULL THEN
            SELECT format('service "%s" has its head %s (tail %s) without a batch row', s.service_id, s.head_seq, s.tail_seq)
              INTO bad FROM gridha.bucket_services s
             WHERE s.head_seq <= s.tail_seq
               AND NOT EXISTS (SELECT 1 FROM gridha.bucket_batches b
                                WHERE b.service_id = s.service_id AND b.seq = s.head_seq)
             ORDER BY s.service_id LIMIT 1;
        END IF;
    END IF;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'the restored bucket tables are not one layout: %', bad
            USING ERRCODE = 'RG048',
                  DETAIL = 'gridha.citus_restore checks the restored rows before it distributes them: each bucket once, each service in its bucket, each batch beside its service''s queue. Nothing was changed.',
                  HINT = 'Restore a dump taken while nothing wrote the bucket tables: stop every producer and instance before pg_dump (docs/citus.md, "Lifecycle").';
    END IF;

    -- the layout again, as citus_setup makes it (one connection per node)
    PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);
    PERFORM create_distributed_table('gridha.bucket_claims', 'bucket', colocate_with => 'none');
    PERFORM create_distributed_table('gridha.bucket_services', 'bucket', colocate_with => 'gridha.bucket_claims');
    PERFORM create_distributed_table('gridha.bucket_batches', 'bucket', colocate_with => 'gridha.bucket_claims');
    PERFORM create_reference_table('gridha.bucket_instances');
    PERFORM create_reference_table('gridha.bucket_targets');
    PERFORM create_distributed_table('gridha.bucket_rates', 'bucket', colocate_with => 'gridha.bucket_claims');
    -- the restored rows are in the shards now: the shells are emptied
    FOREACH t IN ARRAY ARRAY['bucket_claims', 'bucket_services', 'bucket_batches', 'bucket_instances',
                             'bucket_targets', 'bucket_rates'] LOOP
        PERFORM truncate_local_data_after_distributing_table(('gridha.' || t)::regclass);
    END LOOP;
    -- every per-bucket function (in schema gridha, named bucket_..., its
    -- first argument the bucket), distributed by it with the tables
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'gridha'::regnamespace AND p.proname LIKE 'bucket\_%'
                AND p.pronargs > 0 AND p.proargtypes[0] = 'integer'::regtype
                AND p.proargnames[1] = 'bucket'
              ORDER BY p.oid::regprocedure::text LOOP
        PERFORM create_distributed_function(f, distribution_arg_name => 'bucket',
                                            colocate_with => 'gridha.bucket_claims');
        nf := nf + 1;
    END LOOP;
    -- producers enqueue through the mode (as citus_setup leaves it); this
    -- also makes every backend look at gridha's tables again
    REVOKE INSERT (service_id, batch_id, payload) ON gridha.batches FROM gridha_producer;
    SELECT count(*) INTO nb FROM gridha.bucket_batches;
    RAISE NOTICE 'gridha laid out % restored batch(es) in % buckets again, with % per-bucket functions', nb, n, nf;
    RETURN n;
END
$$;

COMMENT ON FUNCTION gridha.citus_restore() IS
'Citus mode: after a dump of a database in Citus mode is restored on a new cluster''s coordinator: checks the restored bucket tables (RG048), distributes them again as citus_setup does, empties the shells, distributes the per-bucket functions; rows, epochs and holders kept';

REVOKE ALL ON FUNCTION
    gridha.citus_setup(boolean, integer),
    gridha.citus_restore()
FROM PUBLIC;

-- --- the background workers in the Citus mode ---
--
-- docs/citus.md, "Built: the workers". gridha's background workers run on
-- the coordinator and call the SQL API, whose entry points hand over to
-- the mode (next_batches, the batched reports, pending_batches,
-- release_claims, run_maintenance); their registration and their orphans
-- have the mode's branch (worker_register, worker_orphans). Two reads of
-- what one server's worker reads in gridha.service_claims: the targets of
-- the services of handed-out batches, and the pending batches with their
-- targets for the ledger monitor (each is the mode's branch of a worker
-- statement, src/submit.c and src/monitor.c).

/*
 * citus_service_targets(service_ids): the target of each of these
 * services (gridha.bucket_services.target), as one server's worker reads
 * gridha.service_claims' service_id and target (which gridha_submitter
 * may read). One read of the services' buckets (under the count laid out),
 * without a lock; a service not found gives no row.
 */
CREATE FUNCTION gridha_internal.citus_service_targets(service_ids text[])
RETURNS TABLE (service_id text, target text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    n integer;
    ks integer[];
BEGIN
    IF service_ids IS NULL OR pg_catalog.cardinality(service_ids) = 0 THEN
        RETURN;
    END IF;
    SELECT c.buckets INTO n FROM gridha.bucket_claims c WHERE c.bucket = 0;
    SELECT pg_catalog.array_agg(DISTINCT gridha.bucket_of(u.s, n)) INTO ks
      FROM pg_catalog.unnest(citus_service_targets.service_ids) AS u(s);
    RETURN QUERY
    SELECT s.service_id, s.target
      FROM gridha.bucket_services s
     WHERE s.bucket = ANY (ks) AND s.service_id = ANY (citus_service_targets.service_ids);
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_service_targets(text[]) IS
'Citus mode: the target of each of these services (gridha.bucket_services), for a background worker''s hand-out';

/*
 * citus_worker_pending(instance, max_batches): what a background worker's
 * ledger monitor asks about in the mode: pending_batches' rows (the
 * pending and valid heads of the buckets the instance holds, oldest
 * submission first) with each service's target. The instance is checked
 * as pending_batches checks it (instance_check: RG008 for a caller that
 * may not act as it), then one read over every shard without a lock.
 */
CREATE FUNCTION gridha_internal.citus_worker_pending(instance_id uuid, max_batches integer)
RETURNS TABLE (service_id text, batch_id text, status text, epoch bigint, target text,
               submitted_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, gridha, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    PERFORM gridha_internal.instance_check(citus_worker_pending.instance_id,
                                           citus_worker_pending.max_batches);
    RETURN QUERY
    SELECT s.service_id, b.batch_id, b.status::text, c.epoch, s.target, b.submitted_at
      FROM gridha.bucket_claims c
      JOIN gridha.bucket_services s ON s.bucket = c.bucket
      JOIN gridha.bucket_batches b ON b.bucket = s.bucket AND b.service_id = s.service_id
                                  AND b.seq = s.head_seq
     WHERE c.holder = citus_worker_pending.instance_id AND s.in_flight
       AND b.status IN ('pending', 'valid')
     ORDER BY b.submitted_at, s.service_id
     LIMIT citus_worker_pending.max_batches;
END
$$;

COMMENT ON FUNCTION gridha_internal.citus_worker_pending(uuid, integer) IS
'Citus mode: a background worker''s ledger monitor: the pending and valid heads of the buckets the instance holds, with their services'' targets (the instance checked as pending_batches checks it)';

/*
 * workers_wake(): the background workers are woken when the calling
 * transaction commits (nothing without preload), as the trigger on
 * gridha.batches wakes them on one server; the mode's enqueue
 * (citus_enqueue) calls it.
 */
CREATE FUNCTION gridha_internal.workers_wake()
RETURNS void
AS 'MODULE_PATHNAME', 'gridha_workers_wake'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha_internal.workers_wake() IS
'wakes the background workers when the calling transaction commits (the Citus mode''s enqueue); nothing without preload';

REVOKE ALL ON FUNCTION gridha_internal.workers_wake() FROM PUBLIC;

REVOKE ALL ON FUNCTION
    gridha_internal.citus_service_targets(text[]),
    gridha_internal.citus_worker_pending(uuid, integer)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    gridha_internal.citus_service_targets(text[]),
    gridha_internal.citus_worker_pending(uuid, integer)
TO gridha_submitter;
