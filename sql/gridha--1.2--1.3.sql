/*
 * gridha 1.2 -> 1.3: ALTER EXTENSION gridha UPDATE TO '1.3'.
 *
 * An upgraded database equals a fresh 1.3 install (test/suites/15_upgrade.sh
 * compares pg_dump --schema-only of both): every change below is made the
 * same way in gridha--1.3.sql. Each section names the issue it belongs to.
 */

\echo Use "ALTER EXTENSION gridha UPDATE TO '1.3'" to load this file. \quit

-- --- issue 38 (items 9, 10, 11): lock order ---

-- move_service holds gridha.service_claims (ROW EXCLUSIVE) before it locks
-- the destination target's row, and locks the claim FOR NO KEY UPDATE: a
-- rename or delete of that target takes the table first
CREATE OR REPLACE FUNCTION gridha.move_service(service_id text, target text)
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

-- a change of the rate of several targets locks their rate-state rows in
-- name order, as a hand-out does, before it rewrites one
CREATE OR REPLACE FUNCTION gridha.targets_rate_changed()
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

DROP TRIGGER targets_rate_changed ON gridha.targets;
CREATE TRIGGER targets_rate_changed
    AFTER UPDATE ON gridha.targets
    REFERENCING NEW TABLE AS targets_rate_new
    FOR EACH ROW
    WHEN (OLD.rate_interval IS DISTINCT FROM NEW.rate_interval)
    EXECUTE FUNCTION gridha.targets_rate_changed();
