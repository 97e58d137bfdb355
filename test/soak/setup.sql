-- test/soak/setup.sql: the soak's log table and its queue.
--
-- Run by test/t/001_soak.pl in a fresh database that has the extension, with
-- psql variables :services and :batches.

-- What the pgbench clients saw, in one global order: the id is taken in the
-- same transaction as the event it records, so for one service a hand-out's
-- id is always greater than the id of the previous batch's commit.
CREATE TABLE soak_log (
    id          bigserial PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('handout', 'committed')),
    instance_id uuid NOT NULL,
    service_id  text NOT NULL,
    batch_id    text NOT NULL,
    epoch       bigint,
    attempt     integer,
    sub_status  text,
    status      text,
    logged_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);

SELECT set_config('soak.services', :'services', false),
       set_config('soak.batches', :'batches', false);

-- Enqueue round-robin (batch 1 of every service, then batch 2, ...) so the
-- services interleave in the table. Batch ids are hashes, so their text order
-- says nothing about their enqueue order: only seq does.
DO $$
DECLARE
    n_services integer := current_setting('soak.services')::integer;
    n_batches  integer := current_setting('soak.batches')::integer;
BEGIN
    FOR b IN 1 .. n_batches LOOP
        FOR s IN 1 .. n_services LOOP
            PERFORM gridha.enqueue(
                format('svc-%s', lpad(s::text, 3, '0')),
                'b-' || left(md5(s || '/' || b), 12),
                convert_to(format('payload %s/%s', s, b), 'UTF8'));
        END LOOP;
    END LOOP;
END
$$;

SELECT count(*) AS enqueued FROM gridha.batches;
