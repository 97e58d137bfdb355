-- 24_call_search_path.sql: next_batch, next_batches, report_submission
-- and report_status have no SET clause since 1.3 (issue 41): they pin
-- search_path = pg_catalog, gridha, pg_temp in C when a call first runs a
-- statement or is about to fire a user's trigger (src/rows.c). A caller's
-- path still reaches nothing they run: here the caller's path puts schema
-- evil first, whose now() and uuid = uuid raise, and a user's BEFORE and
-- AFTER UPDATE row triggers on gridha.batches call now() unqualified.
-- Each hostile call comes first in this session for what it runs (no
-- statement of the hand-out prepared, each trigger function run first
-- there), so that a path not pinned would resolve to evil's.
--
-- Instance: A = aaaaaaaa-0000-0000-0000-00000000000a.
-- One transaction, rolled back.
BEGIN;
SELECT plan(9);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = off;  -- one instance may take everything
SELECT gridha.enqueue('sp', 'b1', NULL), gridha.enqueue('sp', 'b2', NULL);
\o

CREATE SCHEMA evil;
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'evil.now() ran'; END$$;
CREATE FUNCTION evil.uuid_eq(uuid, uuid) RETURNS boolean LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'evil.= ran'; END$$;
CREATE OPERATOR evil.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = evil.uuid_eq);

-- hostile(call): runs call with the caller's path evil, pg_catalog (set
-- for the transaction, as SET LOCAL does, not by a SET clause, whose end
-- would undo whatever the call left behind), and returns the path it sees
-- after the call; the path before is set again
CREATE FUNCTION pg_temp.hostile(call text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    caller text := current_setting('search_path');
    seen text;
BEGIN
    PERFORM set_config('search_path', 'evil, pg_catalog', true);
    EXECUTE call;
    seen := current_setting('search_path');
    PERFORM set_config('search_path', caller, true);
    RETURN seen;
END$$;

-- ---------------------------------------------------------------------------
-- Statements the hand-out runs (3)
-- ---------------------------------------------------------------------------

SELECT is(pg_temp.hostile('SELECT * FROM gridha.next_batch(''aaaaaaaa-0000-0000-0000-00000000000a'')'),
          'evil, pg_catalog',
          'next_batch under a caller''s path evil, pg_catalog: its statements resolve by the pinned path, and the caller''s path is back after it');
SELECT is((SELECT status::text FROM gridha.batches WHERE service_id = 'sp' AND batch_id = 'b1'), 'submitting',
          'next_batch handed the batch out under that path');
SELECT is(pg_temp.hostile('SELECT * FROM gridha.next_batch(''aaaaaaaa-0000-0000-0000-00000000000a'')'),
          'evil, pg_catalog', 'a second next_batch (the head in flight) leaves the caller''s path as it was');

-- ---------------------------------------------------------------------------
-- A user's triggers on gridha.batches (6)
-- ---------------------------------------------------------------------------

CREATE TABLE public.sp_trigger_runs (tg text);
CREATE FUNCTION public.sp_before() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM now();
    INSERT INTO public.sp_trigger_runs VALUES ('before ' || NEW.status::text);
    RETURN NEW;
END$$;
CREATE FUNCTION public.sp_after() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM now();
    INSERT INTO public.sp_trigger_runs VALUES ('after ' || NEW.status::text);
    RETURN NULL;
END$$;
CREATE TRIGGER sp_before BEFORE UPDATE OF status ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION public.sp_before();

SELECT lives_ok($$SELECT pg_temp.hostile('SELECT gridha.report_submission(''aaaaaaaa-0000-0000-0000-00000000000a'', ''sp'', ''b1'', 1, ''accepted'')')$$,
                'report_submission under the caller''s path: a user''s BEFORE UPDATE trigger runs with the pinned path');

DROP TRIGGER sp_before ON gridha.batches;
CREATE TRIGGER sp_after AFTER UPDATE ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION public.sp_after();

SELECT is(pg_temp.hostile('SELECT gridha.report_status(''aaaaaaaa-0000-0000-0000-00000000000a'', ''sp'', ''b1'', 1, ''committed''::gridha.ledger_status)'),
          'evil, pg_catalog',
          'report_status under the caller''s path: a user''s AFTER UPDATE trigger runs with the pinned path, and the caller''s path is back');
SELECT is((SELECT status::text FROM gridha.batches WHERE service_id = 'sp' AND batch_id = 'b1'), 'committed',
          'the reports moved the batch to committed');
SELECT is((SELECT array_agg(tg ORDER BY tg) FROM public.sp_trigger_runs), ARRAY['after committed', 'before pending'],
          'each trigger fired once, inside the calls');

-- the path is pinned only when needed: with no statement to run and no
-- trigger to fire, a call leaves no trace of a pin behind either
DROP TRIGGER sp_after ON gridha.batches;
SELECT is(pg_temp.hostile('SELECT * FROM gridha.next_batch(''aaaaaaaa-0000-0000-0000-00000000000a'')'),
          'evil, pg_catalog', 'next_batch with the next batch to hand out: the caller''s path is back');
SELECT is((SELECT status::text FROM gridha.batches WHERE service_id = 'sp' AND batch_id = 'b2'), 'submitting',
          'and it handed out the next batch');

SELECT * FROM finish();
ROLLBACK;
