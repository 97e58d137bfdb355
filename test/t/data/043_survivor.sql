-- test/t/data/043_survivor.sql: the helpers of test/t/043_survivor.pl
-- (and of the survivor part of test/bench/scale.sh, which runs that test).
--
-- Words: "instance" is a psql session calling the API as an external client
-- does; "work" is a service with a batch not final yet (queued, submitting,
-- pending, valid, delayed or unknown); "held by X" means claimant = X.
-- Times are the server's clock (clock_timestamp), in epoch seconds.

SET client_min_messages = warning;
CREATE EXTENSION gridha;

-- every hand-out an instance made: who, what, under which epoch, when
CREATE TABLE survivor_log (
    who text NOT NULL,
    service_id text NOT NULL,
    batch_id text NOT NULL,
    epoch bigint NOT NULL,
    attempt integer NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- a looping instance's first poll and first poll that found nothing
CREATE TABLE survivor_polls (
    who text PRIMARY KEY,
    first_poll timestamptz,
    first_idle timestamptz,
    handed integer NOT NULL DEFAULT 0
);

CREATE FUNCTION survivor_instance(name text) RETURNS uuid
LANGUAGE sql IMMUTABLE
AS $$ SELECT ('00000000-0000-4000-a000-' || lpad(to_hex(ascii(name)), 12, '0'))::uuid $$;

-- survivor_enqueue(prefix, services, batches): services prefix0..prefixN-1,
-- each with batches b01.. in order
CREATE PROCEDURE survivor_enqueue(prefix text, services int, batches int)
LANGUAGE plpgsql
AS $$
BEGIN
    FOR r IN 1..batches LOOP
        INSERT INTO gridha.batches (service_id, batch_id, payload)
        SELECT prefix || lpad(s::text, 2, '0'), 'b' || lpad(r::text, 3, '0'), '\x00'
          FROM generate_series(0, services - 1) AS s ORDER BY s;
        COMMIT;
    END LOOP;
END
$$;

-- survivor_handout(name, n): one next_batches(n) of instance "name",
-- logged; returns how many it handed out
CREATE FUNCTION survivor_handout(name text, n int) RETURNS bigint
LANGUAGE sql
AS $$
    WITH h AS (SELECT * FROM gridha.next_batches(survivor_instance(name), n)),
    l AS (INSERT INTO survivor_log (who, service_id, batch_id, epoch, attempt)
          SELECT name, service_id, batch_id, epoch, attempts FROM h RETURNING 1)
    SELECT count(*) FROM l
$$;

-- survivor_cycle_all(name): hands out and commits every ready batch of the
-- services instance "name" holds (logged); returns how many
CREATE FUNCTION survivor_cycle_all(name text) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    inst uuid := survivor_instance(name);
    r record;
    total bigint := 0;
BEGIN
    LOOP
        SELECT * INTO r FROM gridha.next_batch(inst);
        EXIT WHEN r.service_id IS NULL;
        INSERT INTO survivor_log (who, service_id, batch_id, epoch, attempt)
        VALUES (name, r.service_id, r.batch_id, r.epoch, r.attempts);
        PERFORM gridha.report_status(inst, r.service_id, r.batch_id, r.epoch, 'committed');
        total := total + 1;
    END LOOP;
    RETURN total;
END
$$;

-- survivor_left(): batches not final yet
CREATE FUNCTION survivor_left() RETURNS bigint
LANGUAGE sql STABLE
AS $$ SELECT count(*) FROM gridha.batches WHERE status NOT IN ('committed', 'invalid') $$;

/*
 * survivor_loop(name, seconds, idle_ms, work_ms): instance "name" as a
 * client runs it, each step its own transaction: next_batch; when it hands
 * out a batch, the submission (work_ms) and report_status('committed');
 * when it finds nothing, a sleep of idle_ms. Records its first poll and its
 * first empty one, logs every hand-out. Ends when nothing is left to do in
 * the database (seen at an empty poll) or after "seconds".
 */
CREATE PROCEDURE survivor_loop(name text, seconds float8, idle_ms int, work_ms int)
LANGUAGE plpgsql
AS $$
DECLARE
    inst uuid := survivor_instance(name);
    t_end timestamptz := clock_timestamp() + seconds * interval '1 second';
    r record;
BEGIN
    INSERT INTO survivor_polls (who, first_poll) VALUES (name, clock_timestamp())
    ON CONFLICT (who) DO UPDATE SET first_poll = EXCLUDED.first_poll, first_idle = NULL;
    COMMIT;
    WHILE clock_timestamp() < t_end LOOP
        SELECT * INTO r FROM gridha.next_batch(inst);
        IF r.service_id IS NULL THEN
            UPDATE survivor_polls SET first_idle = coalesce(first_idle, clock_timestamp())
             WHERE who = name;
            COMMIT;
            EXIT WHEN survivor_left() = 0;
            PERFORM pg_sleep(idle_ms / 1000.0);
        ELSE
            INSERT INTO survivor_log (who, service_id, batch_id, epoch, attempt)
            VALUES (name, r.service_id, r.batch_id, r.epoch, r.attempts);
            UPDATE survivor_polls SET handed = handed + 1 WHERE who = name;
            COMMIT;
            PERFORM pg_sleep(work_ms / 1000.0);
            PERFORM gridha.report_status(inst, r.service_id, r.batch_id, r.epoch, 'committed');
            COMMIT;
        END IF;
    END LOOP;
END
$$;

/*
 * survivor_watch(name, seconds): polls every 10 ms until every service
 * with work is held by instance "name" (and there is work); returns when
 * that was first seen, NULL when not within "seconds".
 */
CREATE PROCEDURE survivor_watch(name text, seconds float8, INOUT held_at float8 DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    inst uuid := survivor_instance(name);
    t_end timestamptz := clock_timestamp() + seconds * interval '1 second';
BEGIN
    WHILE clock_timestamp() < t_end LOOP
        IF EXISTS (SELECT 1 FROM gridha.batches WHERE status NOT IN ('committed', 'invalid'))
           AND NOT EXISTS (SELECT 1 FROM gridha.service_claims c
                            WHERE c.claimant IS DISTINCT FROM inst
                              AND EXISTS (SELECT 1 FROM gridha.batches b
                                           WHERE b.service_id = c.service_id
                                             AND b.status NOT IN ('committed', 'invalid'))) THEN
            held_at := extract(epoch FROM clock_timestamp());
            RETURN;
        END IF;
        COMMIT;
        PERFORM pg_sleep(0.01);
    END LOOP;
END
$$;

-- survivor_order_violations(): hand-outs of a batch made while an earlier
-- batch of its service was not committed yet (or committed later)
CREATE FUNCTION survivor_order_violations() RETURNS TABLE (who text, service_id text, batch_id text, earlier text)
LANGUAGE sql STABLE
AS $$
    SELECT l.who, l.service_id, l.batch_id, e.batch_id
      FROM survivor_log l
      JOIN gridha.batches b ON b.service_id = l.service_id AND b.batch_id = l.batch_id
      JOIN gridha.batches e ON e.service_id = l.service_id AND e.seq < b.seq
     WHERE e.status <> 'committed' OR e.finished_at IS NULL OR e.finished_at > l.at
$$;

-- survivor_late(name, word): instance "name" reports, all at once, the
-- last batch of each service it was handed (services LIKE "pattern"), under
-- the epoch it was handed with: report_submissions(word) for 'accepted', report_statuses(word)
-- otherwise. Returns what each row got: "SQLSTATE x count", sorted ("ok"
-- for a row that was accepted).
CREATE FUNCTION survivor_late(name text, word text, pattern text DEFAULT '%') RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    s text[];
    b text[];
    e bigint[];
    w text[];
    got text;
BEGIN
    SELECT array_agg(service_id ORDER BY service_id), array_agg(batch_id ORDER BY service_id),
           array_agg(epoch ORDER BY service_id), array_agg(word)
      INTO s, b, e, w
      FROM (SELECT DISTINCT ON (service_id) service_id, batch_id, epoch
              FROM survivor_log WHERE who = name AND service_id LIKE pattern
             ORDER BY service_id, at DESC) mine;
    IF word = 'accepted' THEN
        SELECT string_agg(x || ' x ' || n, ', ' ORDER BY x) INTO got
          FROM (SELECT coalesce(r.sqlstate, 'ok') AS x, count(*) AS n
                  FROM gridha.report_submissions(survivor_instance(name), s, b, e, w) r GROUP BY 1) y;
    ELSE
        SELECT string_agg(x || ' x ' || n, ', ' ORDER BY x) INTO got
          FROM (SELECT coalesce(r.sqlstate, 'ok') AS x, count(*) AS n
                  FROM gridha.report_statuses(survivor_instance(name), s, b, e, w) r GROUP BY 1) y;
    END IF;
    RETURN got;
END
$$;
