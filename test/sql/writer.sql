-- writer: the row writer (src/rows.c) looks at the AFTER UPDATE row
-- triggers of a table only when one can fire for the columns it writes.
-- Here the rows were written by earlier transactions (each statement
-- commits), the case in which a foreign key's check with an unchanged key
-- is not run; pgTAP 07 and 25 run in one transaction, where it always is.
\set A '''aaaaaaaa-0000-0000-0000-0000000000a1'''
SET gridha.balance_claims = off;
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances;

CREATE TABLE writer_log (n serial, what text);
CREATE FUNCTION writer_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.writer_log (what) VALUES (TG_NAME || ' ' || NEW.service_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER writer_ready AFTER UPDATE OF ready_at ON gridha.service_claims
    FOR EACH ROW EXECUTE FUNCTION writer_note();
CREATE TRIGGER writer_target AFTER UPDATE OF target ON gridha.service_claims
    FOR EACH ROW EXECUTE FUNCTION writer_note();

SELECT gridha.enqueue('w1', 'w1-b1', NULL), gridha.enqueue('w1', 'w1-b2', NULL);
SELECT count(*) AS acquired FROM gridha.acquire_claims(:A);
TRUNCATE writer_log;

-- each step its own transaction: the hand-out writes ready_at (fires
-- writer_ready), the submission no claim column, the final report
-- ready_at again (the next head became ready); target never
SELECT service_id, batch_id FROM gridha.next_batch(:A);
SELECT gridha.report_submission(:A, 'w1', 'w1-b1', 1, 'accepted');
SELECT gridha.report_status(:A, 'w1', 'w1-b1', 1, 'committed');
SELECT what FROM writer_log ORDER BY n;
DROP TRIGGER writer_ready ON gridha.service_claims;
DROP TRIGGER writer_target ON gridha.service_claims;

-- A MATCH FULL foreign key is checked at every update of a row whose key
-- is partly NULL, changed or not, as PostgreSQL's own UPDATE does: w1's
-- claim has head_seq 2 and no soft_expiry of its own. Added NOT VALID in
-- the transaction of the hand-out, which must fail as the UPDATE does.
CREATE TABLE writer_ref (h bigint, s timestamptz, UNIQUE (h, s));
BEGIN;
ALTER TABLE gridha.service_claims ADD CONSTRAINT writer_full
    FOREIGN KEY (head_seq, soft_expiry) REFERENCES writer_ref (h, s) MATCH FULL NOT VALID;
SAVEPOINT plain;
UPDATE gridha.service_claims SET in_flight = in_flight WHERE service_id = 'w1';
ROLLBACK TO plain;
SELECT service_id, batch_id FROM gridha.next_batch(:A);
ROLLBACK;

-- with a MATCH SIMPLE key instead, a partly NULL key passes, and the
-- hand-out goes on
BEGIN;
ALTER TABLE gridha.service_claims ADD CONSTRAINT writer_simple
    FOREIGN KEY (head_seq, soft_expiry) REFERENCES writer_ref (h, s) NOT VALID;
SELECT service_id, batch_id FROM gridha.next_batch(:A);
ROLLBACK;

DROP TABLE writer_ref, writer_log;
DROP FUNCTION writer_note();
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances;
