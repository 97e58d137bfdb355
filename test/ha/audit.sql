-- test/ha/audit.sql: the fault harness's record of what the database
-- accepted, installed by test/ha/driver.py in the harness's own throwaway
-- database (never by the extension, never in a user's database).
--
-- Words used here:
--   event     one row of ha.claim_events or ha.batch_events, numbered by
--             ha.event_seq when the change is made (under the row locks the
--             change holds, so two changes of one service are numbered in
--             the order the database applied them)
--   writer    the instance whose session made a batch change: the session's
--             application_name for external instances (the harness starts
--             every client with PGAPPNAME set to its instance id), the
--             worker slot's instance id for background workers
--   holder    the claimant and epoch of the batch's service as the changing
--             transaction sees them (it has locked that claim row)
--   timeline  the WAL timeline the change was written on (ha.timeline()):
--             1 until the first promotion of a standby, then one more at
--             each promotion; with two servers it tells which primary made
--             the change, and the checker compares gridha's epochs on a
--             timeline with those handed out on earlier ones
--
-- The checker (test/ha/check.py) proves with these rows that no write was
-- ever accepted from an instance that did not hold the service at that
-- epoch, that epochs only grow (and start above every earlier timeline's
-- on a new one), and when each service was handed out by whom (failover
-- times).

CREATE SCHEMA ha;

CREATE SEQUENCE ha.event_seq;

/*
 * ha.timeline: the timeline this primary writes WAL on (the first eight
 * hex digits of the current WAL file's name).
 */
CREATE FUNCTION ha.timeline()
RETURNS integer
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog
AS $$
    SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer
$$;

CREATE TABLE ha.claim_events (
    n            bigint PRIMARY KEY DEFAULT nextval('ha.event_seq'),
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    service_id   text NOT NULL,
    old_claimant uuid,
    claimant     uuid,
    old_epoch    bigint,
    epoch        bigint,
    tli          integer DEFAULT ha.timeline()
);

CREATE TABLE ha.batch_events (
    n           bigint PRIMARY KEY DEFAULT nextval('ha.event_seq'),
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    service_id  text NOT NULL,
    batch_id    text NOT NULL,
    old_status  text,
    status      text,
    epoch       bigint,
    attempts    integer,
    instance_id uuid,
    writer      text,
    claimant    uuid,
    claim_epoch bigint,
    tli         integer DEFAULT ha.timeline()
);

/*
 * ha.claim_changed: a claim changed hands or epoch.
 */
CREATE FUNCTION ha.claim_changed()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
BEGIN
    INSERT INTO ha.claim_events (service_id, old_claimant, claimant, old_epoch, epoch)
    VALUES (NEW.service_id, OLD.claimant, NEW.claimant, OLD.epoch, NEW.epoch);
    RETURN NULL;
END
$$;

CREATE TRIGGER ha_claim_audit
    AFTER UPDATE ON gridha.service_claims
    FOR EACH ROW
    WHEN (OLD.claimant IS DISTINCT FROM NEW.claimant OR OLD.epoch IS DISTINCT FROM NEW.epoch)
    EXECUTE FUNCTION ha.claim_changed();

/*
 * ha.batch_changed: a batch changed status, epoch or attempt; records the
 * writer and the holder of its service at that moment.
 */
CREATE FUNCTION ha.batch_changed()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    w text := current_setting('application_name', true);
    h_claimant uuid;
    h_epoch bigint;
BEGIN
    SELECT c.claimant, c.epoch INTO h_claimant, h_epoch
      FROM gridha.service_claims c
     WHERE c.service_id = NEW.service_id;
    IF w IS NULL OR w !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        SELECT s.instance_id::text INTO w
          FROM gridha_internal.worker_slots() s
         WHERE s.pid = pg_backend_pid();
    END IF;
    INSERT INTO ha.batch_events (service_id, batch_id, old_status, status, epoch,
                                 attempts, instance_id, writer, claimant, claim_epoch)
    VALUES (NEW.service_id, NEW.batch_id, OLD.status::text, NEW.status::text, NEW.epoch,
            NEW.attempts, NEW.instance_id, w, h_claimant, h_epoch);
    RETURN NULL;
END
$$;

CREATE TRIGGER ha_batch_audit
    AFTER UPDATE ON gridha.batches
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.attempts IS DISTINCT FROM NEW.attempts
          OR OLD.epoch IS DISTINCT FROM NEW.epoch)
    EXECUTE FUNCTION ha.batch_changed();
