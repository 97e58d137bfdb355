-- 07_row_writes.sql: the hot path writes its rows by key without the
-- planner (src/rows.c); what an UPDATE statement would guarantee must hold
-- all the same: user triggers on gridha.batches and gridha.service_claims
-- fire for every hand-out and report, with the right old and new rows and
-- the right "UPDATE OF" columns; a BEFORE UPDATE trigger may change the
-- new row, skip it or raise; a skipped hand-out leaves nothing half done.
--
-- One transaction, rolled back: the triggers and their log vanish with it.
--
-- Instance: A = aaaaaaaa-0000-0000-0000-00000000000a.
BEGIN;
SELECT plan(27);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = off;
\o

CREATE TEMP TABLE row_log (
    n       serial,
    tbl     text,
    what    text
);

CREATE FUNCTION pg_temp.log_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO row_log (tbl, what)
    VALUES ('batches', format('%s %s->%s epoch %s attempts %s', NEW.batch_id, OLD.status, NEW.status,
                              NEW.epoch, NEW.attempts));
    RETURN NULL;
END
$$;

CREATE FUNCTION pg_temp.log_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO row_log (tbl, what)
    VALUES ('claims', format('%s head %s->%s in_flight %s->%s', NEW.service_id, OLD.head_seq, NEW.head_seq,
                             OLD.in_flight, NEW.in_flight));
    RETURN NULL;
END
$$;

-- Column-specific: it fires only when the write names status among its
-- columns, which the row writes must say as an UPDATE's SET list would.
CREATE TRIGGER t_log_status AFTER UPDATE OF status ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION pg_temp.log_status();
-- Never named by a hand-out or report: must never fire.
CREATE TRIGGER t_log_payload AFTER UPDATE OF payload ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION pg_temp.log_status();
CREATE TRIGGER t_log_claim AFTER UPDATE ON gridha.service_claims
    FOR EACH ROW WHEN (OLD.head_seq IS DISTINCT FROM NEW.head_seq OR OLD.in_flight <> NEW.in_flight)
    EXECUTE FUNCTION pg_temp.log_claim();

\o /dev/null
SELECT gridha.enqueue('r', 'r1', '\x01');
SELECT gridha.enqueue('r', 'r2', '\x02');
\o
TRUNCATE row_log;

-- ---------------------------------------------------------------------------
-- AFTER triggers see every step, in order, once
-- ---------------------------------------------------------------------------

SELECT results_eq(
    $$SELECT batch_id, epoch, attempts FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$VALUES ('r1'::text, 1::bigint, 1)$$,
    'next_batch hands out r1 with user triggers on both tables');
SELECT is(gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r1', 1, 'accepted'),
          'pending'::gridha.batch_status, 'report_submission accepted with user triggers');
SELECT is(gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r1', 1, 'committed'),
          'committed'::gridha.batch_status, 'report_status committed with user triggers');
SELECT results_eq(
    $$SELECT tbl, what FROM row_log ORDER BY n$$,
    $$VALUES ('batches'::text, 'r1 queued->submitting epoch 1 attempts 1'::text),
             ('claims', 'r head 1->1 in_flight f->t'),
             ('batches', 'r1 submitting->pending epoch 1 attempts 1'),
             ('claims', 'r head 1->2 in_flight t->f'),
             ('batches', 'r1 pending->committed epoch 1 attempts 1')$$,
    'AFTER row triggers fire once per write, UPDATE OF status ones included, UPDATE OF payload ones never');

-- ---------------------------------------------------------------------------
-- BEFORE UPDATE triggers: may change the new row
-- ---------------------------------------------------------------------------

CREATE FUNCTION pg_temp.stamp_detail() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'pending' THEN
        NEW.detail := 'stamped by a trigger';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER t_stamp BEFORE UPDATE ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION pg_temp.stamp_detail();

SELECT results_eq(
    $$SELECT batch_id, attempts FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$VALUES ('r2'::text, 1)$$,
    'next_batch hands out r2 with a BEFORE UPDATE trigger on gridha.batches');
SELECT is(gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r2', 1, 'accepted', 'from the ledger'),
          'pending'::gridha.batch_status, 'report_submission accepted through the BEFORE trigger');
SELECT is((SELECT detail FROM gridha.batches WHERE batch_id = 'r2'), 'stamped by a trigger',
          'what the BEFORE trigger set in NEW is what is stored');
DROP TRIGGER t_stamp ON gridha.batches;

-- ---------------------------------------------------------------------------
-- BEFORE UPDATE triggers: may skip the write; a skipped hand-out is no
-- hand-out at all
-- ---------------------------------------------------------------------------

\o /dev/null
SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r2', 1, 'committed');
SELECT gridha.enqueue('r', 'r3', '\x03');
\o

CREATE FUNCTION pg_temp.skip_handout() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'submitting' THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER t_skip BEFORE UPDATE ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION pg_temp.skip_handout();

SELECT is_empty(
    $$SELECT * FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    'next_batch hands nothing out when a BEFORE trigger skips the batch''s write');
SELECT results_eq(
    $$SELECT b.status::text, b.attempts, c.in_flight, c.ready_at IS NOT NULL
        FROM gridha.batches b JOIN gridha.service_claims c USING (service_id)
       WHERE b.batch_id = 'r3'$$,
    $$VALUES ('queued'::text, 0, false, true)$$,
    'the skipped head stays queued and its claim ready: nothing half done');
DROP TRIGGER t_skip ON gridha.batches;

-- ---------------------------------------------------------------------------
-- BEFORE UPDATE triggers: may raise; the error undoes the whole call
-- ---------------------------------------------------------------------------

SELECT results_eq(
    $$SELECT batch_id, attempts FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$VALUES ('r3'::text, 1)$$,
    'without the trigger r3 is handed out');

CREATE FUNCTION pg_temp.refuse_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'committed' THEN
        RAISE EXCEPTION 'refused by a trigger' USING ERRCODE = 'P0001';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER t_refuse BEFORE UPDATE ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse_final();

SELECT throws_ok(
    $$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r3', 1, 'committed')$$,
    'P0001', 'refused by a trigger',
    'a BEFORE trigger''s error reaches the caller of report_status');
SELECT results_eq(
    $$SELECT b.status::text, c.head_seq, c.in_flight
        FROM gridha.batches b JOIN gridha.service_claims c USING (service_id)
       WHERE b.batch_id = 'r3'$$,
    $$VALUES ('submitting'::text, 3::bigint, true)$$,
    'after the error the claim is as before: its claim write was undone with the batch''s');
DROP TRIGGER t_refuse ON gridha.batches;

SELECT is(gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r3', 1, 'committed'),
          'committed'::gridha.batch_status, 'and the report goes through once the trigger is gone');

-- ---------------------------------------------------------------------------
-- BEFORE UPDATE triggers: a new row of their own at hand-out is what is
-- stored and what next_batch returns (a large payload lives out of line, so
-- its copy must outlive the page the write locks and re-reads)
-- ---------------------------------------------------------------------------

\o /dev/null
SELECT gridha.enqueue('r', 'r4', '\x04');
\o

CREATE FUNCTION pg_temp.swap_payload() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'submitting' THEN
        NEW.payload := convert_to(repeat('swapped by a trigger ', 20000), 'UTF8');
        NEW.detail := 'payload swapped';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER t_swap BEFORE UPDATE ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION pg_temp.swap_payload();

CREATE TEMP TABLE handed AS
    SELECT * FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a');
DROP TRIGGER t_swap ON gridha.batches;

SELECT results_eq(
    $$SELECT batch_id, length(payload), md5(payload) FROM handed$$,
    $$VALUES ('r4'::text, 420000, md5(convert_to(repeat('swapped by a trigger ', 20000), 'UTF8')))$$,
    'next_batch returns the payload a BEFORE trigger put in the new row');
SELECT results_eq(
    $$SELECT length(b.payload), md5(b.payload), b.detail, b.status::text
        FROM gridha.batches b WHERE b.batch_id = 'r4'$$,
    $$SELECT length(payload), md5(payload), 'payload swapped'::text, 'submitting'::text FROM handed$$,
    'and what it returned is exactly what was stored');
SELECT is(gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r4', 1, 'committed'),
          'committed'::gridha.batch_status, 'the swapped batch is reported like any other');

-- ---------------------------------------------------------------------------
-- A disabled trigger whose function cannot be loaded (its library is gone)
-- never fires, so it breaks no hand-out or report: the hot path's look for
-- batches_final loads no function but a C one of that symbol (the PROCOID
-- change of the CREATE FUNCTION makes the look start afresh)
-- ---------------------------------------------------------------------------

-- (a C function is checked when it is created: it is made on a library that
-- exists, then pointed at one that does not, as a library removed since)
CREATE FUNCTION public.gridha_test_lost_library() RETURNS trigger
    LANGUAGE c AS '$libdir/gridha', 'gridha_instances_changed';
UPDATE pg_catalog.pg_proc SET probin = '/nonexistent/gridha_test_lost'
 WHERE oid = 'public.gridha_test_lost_library()'::regprocedure;
CREATE TRIGGER a_lost_library AFTER UPDATE ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION public.gridha_test_lost_library();
ALTER TABLE gridha.batches DISABLE TRIGGER a_lost_library;

\o /dev/null
SELECT gridha.enqueue('r', 'r5', '\x05');
\o

SELECT results_eq(
    $$SELECT batch_id FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a')$$,
    $$VALUES ('r5'::text)$$,
    'a disabled trigger whose library is gone: next_batch hands the batch out');
SELECT is(gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r5', 1, 'accepted'),
          'pending'::gridha.batch_status, '... report_submission takes its outcome');
SELECT is(gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r5', 1, 'committed'),
          'committed'::gridha.batch_status, '... and report_status commits it');
DROP TRIGGER a_lost_library ON gridha.batches;

-- ---------------------------------------------------------------------------
-- The row memo (rows.c): a fetch by key tries where this backend last
-- found or wrote the row. A version written since by a statement, or a
-- place in a file a TRUNCATE replaced, is not the row: the fetch goes
-- through the index and the reports write the newest version.
-- ---------------------------------------------------------------------------

\o /dev/null
SELECT gridha.enqueue('r', 'r6', '\x06');
SELECT * FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a');
SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r6', 1, 'accepted');
\o
UPDATE gridha.batches SET detail = 'by hand' WHERE service_id = 'r' AND batch_id = 'r6';
SELECT is(gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r6', 1, 'committed'),
          'committed'::gridha.batch_status,
          'a batch rewritten by a statement after its acceptance: report_status finds its newest version');
SELECT is((SELECT status::text || ' / ' || detail FROM gridha.batches WHERE batch_id = 'r6'),
          'committed / by hand', '... and writes it, keeping what the statement wrote');

TRUNCATE gridha.batches, gridha.service_claims;
\o /dev/null
SELECT gridha.enqueue('r', 'r7', '\x07');
\o
CREATE TEMP TABLE handed7 AS SELECT * FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a');
SELECT is((SELECT batch_id FROM handed7), 'r7',
          'after a TRUNCATE of both tables, next_batch hands out the new batch');
SELECT is(gridha.report_submission('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r7',
                                   (SELECT epoch FROM handed7), 'accepted'),
          'pending'::gridha.batch_status, '... report_submission finds it in the new file');
SELECT is(gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r7',
                               (SELECT epoch FROM handed7), 'committed'),
          'committed'::gridha.batch_status, '... and report_status commits it');

-- ---------------------------------------------------------------------------
-- The index and trigger sets (rows.c): a writer maintains the indexes and
-- fires the triggers this backend knew of the table when it last wrote
-- it, kept from one call to the next. An index or trigger created since
-- is maintained or fired by the next write, and one dropped since is not
-- opened or fired: the table's invalidation makes the sets again. (The
-- hand-out of r7 wrote service_claims and its indexes: its sets are known.)
-- ---------------------------------------------------------------------------

CREATE FUNCTION pg_temp.refuse_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'claim write refused by a test trigger';
END
$$;

CREATE INDEX gridha_test_head ON gridha.service_claims (head_seq);
\o /dev/null
SELECT gridha.enqueue('r', 'r8', '\x08');
\o
CREATE TEMP TABLE handed8 AS SELECT * FROM gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a');
SET LOCAL enable_seqscan = off;
SELECT is((SELECT count(*)::int FROM gridha.service_claims
            WHERE head_seq = (SELECT seq FROM gridha.batches WHERE batch_id = 'r8')),
          1, 'an index created after the table''s last write is maintained by the next hand-out');
RESET enable_seqscan;

DROP INDEX gridha.gridha_test_head;
CREATE TRIGGER t_refuse BEFORE UPDATE ON gridha.service_claims
    FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse_claim();
SELECT throws_ok(
    $$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r8',
                                  (SELECT epoch FROM handed8), 'committed')$$,
    'P0001', 'claim write refused by a test trigger',
    'a trigger created after the table''s last write fires at the next report');
DROP TRIGGER t_refuse ON gridha.service_claims;
SELECT is(gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'r', 'r8',
                               (SELECT epoch FROM handed8), 'committed'),
          'committed'::gridha.batch_status,
          'once the index and the trigger are dropped, the next report writes without them');

SELECT * FROM finish();
ROLLBACK;
