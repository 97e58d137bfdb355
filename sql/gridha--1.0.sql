/*
 * gridha 1.0: highly available, strictly ordered batch submission.
 *
 * Words used here:
 *   instance  one submitter (an external client or a background worker),
 *             known by a uuid for its whole life
 *   service   a service_id; every batch belongs to one, and a service's
 *             batches leave strictly in enqueue order, one at a time
 *   claim     the row of gridha.service_claims for a service: who holds it,
 *             its epoch (the fencing token) and its two expiries
 *   head      the service's oldest batch that is not final yet; only the
 *             head can be handed out or be in flight
 *
 * The per-service bookkeeping columns of service_claims (head_seq, tail_seq,
 * ready_at, in_flight, submitting) are what keep every hand-out an index
 * lookup, whatever the number of services or queued batches.
 */

\echo Use "CREATE EXTENSION gridha" to load this file. \quit

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

CREATE TABLE gridha.targets (
    target          text PRIMARY KEY CHECK (target <> ''),
    submit_url      text,
    status_url      text,
    submit_function regprocedure,
    status_function regprocedure,
    rate_interval   interval CHECK (rate_interval > interval '0'),
    rate_burst      integer NOT NULL DEFAULT 1 CHECK (rate_burst >= 0)
);

COMMENT ON TABLE gridha.targets IS
'where a service''s batches go: an HTTP endpoint or a SQL function, with an optional rate limit';

INSERT INTO gridha.targets (target) VALUES ('default');

CREATE TABLE gridha.instances (
    instance_id   uuid PRIMARY KEY,
    label         text,
    kind          text NOT NULL DEFAULT 'external'
                  CHECK (kind IN ('external', 'worker')),
    registered_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz,
    stopped_at    timestamptz
);

COMMENT ON TABLE gridha.instances IS
'every instance ever seen; last_seen_at is its last claim cycle (renewal), stopped_at its last release of all claims';

CREATE TABLE gridha.service_claims (
    service_id  text PRIMARY KEY CHECK (service_id <> ''),
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
    submitting  boolean NOT NULL DEFAULT false,
    CHECK (claimant IS NULL OR (soft_expiry IS NOT NULL AND hard_expiry >= soft_expiry))
);

COMMENT ON TABLE gridha.service_claims IS
'one row per service: its claim (claimant, epoch, soft_expiry, hard_expiry) and its queue state (head_seq = oldest unfinished batch, tail_seq = last enqueued, ready_at = when the head became submittable, NULL while it is in flight or the queue is empty)';

-- Hand-out: a claimant's services ordered by how long their head has waited.
-- Renewal, release and counting use the claimant prefix, and the free
-- services are found under claimant IS NULL.
CREATE INDEX service_claims_claimant_ready ON gridha.service_claims (claimant, ready_at);

-- Takeover: claims whose soft expiry has passed.
CREATE INDEX service_claims_soft_expiry ON gridha.service_claims (soft_expiry);

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
);

COMMENT ON TABLE gridha.batches IS
'every batch; seq is its position in its service''s enqueue order, epoch and instance_id belong to its latest hand-out';

/*
 * batches_before_insert: gives a new batch its place in its service's queue.
 *
 * The service row is locked before the batch's seq is taken from it, so
 * per service the seq order is the commit order of the enqueues: a batch
 * can never become visible behind a head that has already moved past it.
 */
CREATE FUNCTION gridha.batches_before_insert()
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

COMMENT ON FUNCTION gridha.batches_before_insert() IS
'trigger: places a new batch at the tail of its service''s queue, creating the service when it is new';

CREATE TRIGGER batches_enqueue
    BEFORE INSERT ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION gridha.batches_before_insert();

/*
 * batches_guard_final: committed and invalid are final, whoever writes.
 */
CREATE FUNCTION gridha.batches_guard_final()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, gridha
AS $$
BEGIN
    RAISE EXCEPTION 'batch "%" of service "%" is already %', OLD.batch_id, OLD.service_id, OLD.status
        USING ERRCODE = 'RG002',
              DETAIL = 'Committed and invalid are final statuses and never change.';
END
$$;

COMMENT ON FUNCTION gridha.batches_guard_final() IS
'trigger: refuses any change to a batch whose status is final';

CREATE TRIGGER batches_final
    BEFORE UPDATE OF status, service_id, batch_id, seq ON gridha.batches
    FOR EACH ROW
    WHEN (OLD.status IN ('committed', 'invalid'))
    EXECUTE FUNCTION gridha.batches_guard_final();

-- Settings as the server sees them now, as intervals; used by the views.
CREATE FUNCTION gridha.expiry_settings(
    OUT soft_expiry interval,
    OUT hard_expiry interval,
    OUT renew_interval interval)
RETURNS record
AS 'MODULE_PATHNAME', 'gridha_expiry_settings'
LANGUAGE C STABLE PARALLEL SAFE
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.expiry_settings() IS
'the effective claim timings (gridha.soft_expiry, gridha.hard_expiry, gridha.renew_interval) as intervals';

-- ---------------------------------------------------------------------------
-- API
-- ---------------------------------------------------------------------------

CREATE FUNCTION gridha.register_instance(label text DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'gridha_register_instance'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.register_instance(text) IS
'registers a new external instance and returns its id';

CREATE FUNCTION gridha.enqueue(service_id text, batch_id text, payload bytea, target text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'gridha_enqueue'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.enqueue(text, text, bytea, text) IS
'adds a batch at the tail of its service''s queue (creating the service, on the given target, when new) and returns its seq';

CREATE FUNCTION gridha.renew_claims(instance_id uuid)
RETURNS integer
AS 'MODULE_PATHNAME', 'gridha_renew_claims'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.renew_claims(uuid) IS
'extends both expiries of every claim the database says this instance holds; returns how many';

CREATE FUNCTION gridha.acquire_claims(instance_id uuid)
RETURNS TABLE (service_id text, epoch bigint)
AS 'MODULE_PATHNAME', 'gridha_acquire_claims'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.acquire_claims(uuid) IS
'takes free, soft-expired (nothing submitting) and hard-expired claims, up to the fair share when gridha.balance_claims is on (releasing surplus idle claims above it); returns the claims newly taken';

CREATE FUNCTION gridha.claimed_batches(instance_id uuid, max_batches integer DEFAULT 100)
RETURNS TABLE (service_id text, batch_id text, seq bigint, status gridha.batch_status, epoch bigint)
AS 'MODULE_PATHNAME', 'gridha_claimed_batches'
LANGUAGE C STABLE SECURITY DEFINER
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.claimed_batches(uuid, integer) IS
'read-only: the head batch of each service this instance holds, submittable ones first, with the claim''s epoch';

CREATE FUNCTION gridha.next_batch(instance_id uuid)
RETURNS TABLE (service_id text, batch_id text, payload bytea, epoch bigint, attempt integer)
AS 'MODULE_PATHNAME', 'gridha_next_batch'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.next_batch(uuid) IS
'the queuer cycle: renews and acquires claims when due, hands out the submittable head that has waited longest among this instance''s services and marks it submitting; 0 or 1 row';

CREATE FUNCTION gridha.next_batches(instance_id uuid, max_batches integer)
RETURNS TABLE (service_id text, batch_id text, payload bytea, epoch bigint, attempt integer)
AS 'MODULE_PATHNAME', 'gridha_next_batches'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 10
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.next_batches(uuid, integer) IS
'like next_batch, up to max_batches batches of distinct services';

CREATE FUNCTION gridha.verify_batch(instance_id uuid, service_id text, batch_id text, epoch bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'gridha_verify_batch'
LANGUAGE C STABLE SECURITY DEFINER
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.verify_batch(uuid, text, text, bigint) IS
'true while the batch is still this instance''s to submit: it holds the claim at this epoch and the batch is submitting under it';

CREATE FUNCTION gridha.report_submission(instance_id uuid, service_id text, batch_id text, epoch bigint,
                                         outcome text, detail text DEFAULT NULL)
RETURNS gridha.batch_status
AS 'MODULE_PATHNAME', 'gridha_report_submission'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.report_submission(uuid, text, text, bigint, text, text) IS
'records the result of submitting a batch: accepted -> pending, delayed -> delayed with backoff, rejected -> invalid; refused for a stale epoch';

CREATE FUNCTION gridha.pending_batches(instance_id uuid, max_batches integer DEFAULT 1000)
RETURNS TABLE (service_id text, batch_id text, status gridha.batch_status, epoch bigint, submitted_at timestamptz)
AS 'MODULE_PATHNAME', 'gridha_pending_batches'
LANGUAGE C STABLE SECURITY DEFINER
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.pending_batches(uuid, integer) IS
'what this instance''s DLT monitor must poll: the pending and valid batches of the services it holds, oldest submission first';

CREATE FUNCTION gridha.report_status(instance_id uuid, service_id text, batch_id text, epoch bigint, dlt_status text)
RETURNS gridha.batch_status
AS 'MODULE_PATHNAME', 'gridha_report_status'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.report_status(uuid, text, text, bigint, text) IS
'records what the ledger says of an in-flight batch: pending, valid, committed, invalid or unknown (any case); refused for a stale epoch';

CREATE FUNCTION gridha.release_claims(instance_id uuid)
RETURNS integer
AS 'MODULE_PATHNAME', 'gridha_release_claims'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, gridha;

COMMENT ON FUNCTION gridha.release_claims(uuid) IS
'hands back every claim of this instance that has nothing submitting; returns how many';

-- ---------------------------------------------------------------------------
-- Views for operators
-- ---------------------------------------------------------------------------

CREATE VIEW gridha.claims AS
SELECT c.service_id,
       c.target,
       c.claimant,
       c.epoch,
       c.soft_expiry,
       c.hard_expiry,
       CASE
           WHEN c.claimant IS NULL THEN 'free'
           WHEN c.soft_expiry > now() THEN 'held'
           WHEN c.hard_expiry <= now() THEN 'hard_expired'
           WHEN c.submitting THEN 'slow'
           ELSE 'soft_expired'
       END AS state,
       c.head_seq,
       c.tail_seq,
       c.in_flight,
       c.submitting,
       c.ready_at
FROM gridha.service_claims c;

COMMENT ON VIEW gridha.claims IS
'each claim with its state: free, held, slow (soft-expired but submitting: not taken), soft_expired (takeover possible), hard_expired (takeover regardless)';

CREATE VIEW gridha.instance_health AS
SELECT i.instance_id,
       i.label,
       i.kind,
       i.last_seen_at,
       count(c.service_id) AS claims,
       coalesce(bool_or(c.submitting), false) AS submitting,
       CASE
           WHEN count(c.service_id) = 0 AND i.stopped_at >= i.last_seen_at THEN 'stopped'
           WHEN coalesce(min(c.hard_expiry), i.last_seen_at + s.hard_expiry) <= now()
                OR i.last_seen_at IS NULL THEN 'failed'
           WHEN coalesce(min(c.soft_expiry), i.last_seen_at + s.soft_expiry) > now() THEN 'healthy'
           WHEN coalesce(bool_or(c.submitting), false) THEN 'slow'
           ELSE 'failed'
       END AS health
FROM gridha.instances i
CROSS JOIN gridha.expiry_settings() s
LEFT JOIN gridha.service_claims c ON c.claimant = i.instance_id
GROUP BY i.instance_id, s.soft_expiry, s.hard_expiry;

COMMENT ON VIEW gridha.instance_health IS
'each instance''s health by the decision tree: within its claim window healthy; past soft expiry and mid-submission slow (assumed healthy); past soft expiry and idle, or past hard expiry, failed; released everything: stopped';

CREATE VIEW gridha.service_queues AS
SELECT c.service_id,
       c.target,
       c.claimant,
       c.epoch,
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

COMMENT ON VIEW gridha.service_queues IS
'each service''s queue: its head batch and how many batches are in each state';

-- ---------------------------------------------------------------------------
-- Privileges: nothing for PUBLIC; the role gridha_client gets the API.
-- ---------------------------------------------------------------------------

REVOKE ALL ON ALL TABLES IN SCHEMA gridha FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA gridha FROM PUBLIC;

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'gridha_client') THEN
        CREATE ROLE gridha_client NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA gridha TO gridha_client;
GRANT EXECUTE ON FUNCTION
    gridha.register_instance(text),
    gridha.enqueue(text, text, bytea, text),
    gridha.renew_claims(uuid),
    gridha.acquire_claims(uuid),
    gridha.claimed_batches(uuid, integer),
    gridha.next_batch(uuid),
    gridha.next_batches(uuid, integer),
    gridha.verify_batch(uuid, text, text, bigint),
    gridha.report_submission(uuid, text, text, bigint, text, text),
    gridha.pending_batches(uuid, integer),
    gridha.report_status(uuid, text, text, bigint, text),
    gridha.release_claims(uuid),
    gridha.expiry_settings()
TO gridha_client;
GRANT INSERT ON gridha.batches TO gridha_client;
GRANT SELECT ON gridha.claims, gridha.instance_health, gridha.service_queues TO gridha_client;
