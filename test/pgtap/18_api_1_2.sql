-- 18_api_1_2.sql: the 1.2 SQL API (issue 30) beside the 1.1 one it keeps.
--
--   words      outcomes and ledger statuses are enums; a bare literal
--              ('accepted') still resolves, to the text overload, which
--              refuses an unknown word with RG004 / RG005; an enum value
--              takes the same path
--   rows       report_submissions / report_statuses take one array of
--              gridha.submission_report / gridha.status_report rows, with a
--              detail on each; a refused row is refused alone
--   counts     every function that returns batches defaults to 100
--   attempts   next_batch and next_batches return attempts (1.3: no more
--              attempt, its 1.1 name)
--   leader     lead, renew_lead, resign_lead name a duty; try_lead and
--              resign, deprecated, share the same leases
--
-- One transaction, rolled back.
--
-- Instances: pg_temp.a() holds services w1..w4 and r1..r3; pg_temp.b() is
-- a second instance for the leader lease.
BEGIN;
SELECT plan(37);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;
DELETE FROM gridha.leases;
DELETE FROM gridha.maintenance_ticks;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = off;
\o

CREATE TEMP TABLE ids AS
    SELECT gridha.register_instance('api12 a') AS a, gridha.register_instance('api12 b') AS b;
CREATE FUNCTION pg_temp.a() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT a FROM ids $$;
CREATE FUNCTION pg_temp.b() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT b FROM ids $$;

-- ---------------------------------------------------------------------------
-- Types (4)
-- ---------------------------------------------------------------------------

SELECT enum_has_labels('gridha', 'submission_outcome', ARRAY['accepted', 'delayed', 'rejected'],
    'gridha.submission_outcome has the three outcomes, in order');
SELECT enum_has_labels('gridha', 'ledger_status', ARRAY['pending', 'valid', 'committed', 'invalid', 'unknown'],
    'gridha.ledger_status has the five ledger statuses, in order');
SELECT is((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
             FROM pg_attribute a WHERE a.attrelid = 'gridha.submission_report'::regclass),
          'service_id text, batch_id text, epoch bigint, outcome gridha.submission_outcome, detail text',
          'gridha.submission_report is (service_id, batch_id, epoch, outcome, detail)');
SELECT is((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
             FROM pg_attribute a WHERE a.attrelid = 'gridha.status_report'::regclass),
          'service_id text, batch_id text, epoch bigint, status gridha.ledger_status, detail text',
          'gridha.status_report is (service_id, batch_id, epoch, status, detail)');

-- ---------------------------------------------------------------------------
-- One default count (4)
-- ---------------------------------------------------------------------------

SELECT is((SELECT array_agg(DISTINCT pg_get_expr(p.proargdefaults, 0))
             FROM pg_proc p
            WHERE p.pronamespace = 'gridha'::regnamespace
              AND p.proname IN ('next_batches', 'claimed_batches', 'pending_batches')),
          ARRAY['100'],
          'next_batches, claimed_batches and pending_batches all default to 100 batches');

\o /dev/null
SELECT gridha.enqueue(s, s || '-1', '\x01') FROM unnest('{w1,w2,w3,w4}'::text[]) AS s;
SELECT gridha.enqueue(s, s || '-2', '\x02') FROM unnest('{w1,w2,w3,w4}'::text[]) AS s;
SELECT gridha.enqueue(s, s || '-1', '\x03') FROM unnest('{r1,r2,r3}'::text[]) AS s;
\o

CREATE TEMP TABLE handed AS SELECT * FROM gridha.next_batches(pg_temp.a());

SELECT is((SELECT count(*) FROM handed), 7::bigint,
          'next_batches(instance) without a count hands out (all seven heads, fewer than 100)');
SELECT ok((SELECT bool_and(attempts = 1) FROM handed),
          'next_batches returns attempts (1 at a first hand-out)');
SELECT is((SELECT count(*) FROM gridha.pending_batches(pg_temp.a())), 0::bigint,
          'pending_batches(instance) without a count: nothing pending yet');

-- ---------------------------------------------------------------------------
-- Typed and bare words: report_submission (8)
-- ---------------------------------------------------------------------------

SELECT is(gridha.report_submission(pg_temp.a(), 'w1', 'w1-1', 1, 'accepted'), 'pending',
          'report_submission with a bare literal ''accepted'' resolves (the text overload) and reports');
SELECT is(gridha.report_submission(pg_temp.a(), 'w2', 'w2-1', 1, 'accepted'::gridha.submission_outcome), 'pending',
          'report_submission with a gridha.submission_outcome reports');
SELECT is(gridha.report_submission(pg_temp.a(), 'w3', 'w3-1', 1, 'REJECTED', 'bad'), 'invalid',
          'report_submission: a bare literal in any case and a detail still work (1.1 callers)');
SELECT is(gridha.report_submission(pg_temp.a(), 'w4', 'w4-1', 1, 'delayed'::gridha.submission_outcome, 'later'),
          'delayed', 'report_submission: an enum outcome with a detail');
SELECT is((SELECT detail FROM gridha.batches WHERE batch_id = 'w4-1'), 'later',
          'the enum overload stores the detail too');
SELECT throws_ok($$SELECT gridha.report_submission(pg_temp.a(), 'r1', 'r1-1', 1, 'exploded')$$,
                 'RG004', 'unknown submission outcome "exploded"',
                 'a bare unknown outcome is refused with RG004, as in 1.1');
SELECT throws_ok($$SELECT gridha.report_submission(pg_temp.a(), 'r1', 'r1-1', 1, 'exploded'::gridha.submission_outcome)$$,
                 '22P02', NULL,
                 'an unknown outcome cast to the enum is refused by PostgreSQL (22P02) before gridha runs');
SELECT is((SELECT p.oid::regprocedure::text FROM pg_proc p
            WHERE p.oid = (SELECT 'gridha.report_submission(uuid,text,text,bigint,gridha.submission_outcome,text)'::regprocedure)),
          'gridha.report_submission(uuid,text,text,bigint,gridha.submission_outcome,text)',
          'report_submission has an overload taking gridha.submission_outcome');

-- ---------------------------------------------------------------------------
-- Typed and bare words: report_status (4)
-- ---------------------------------------------------------------------------

SELECT is(gridha.report_status(pg_temp.a(), 'w1', 'w1-1', 1, 'COMMITTED'), 'committed',
          'report_status with a bare literal in any case resolves (the text overload) and reports');
SELECT is(gridha.report_status(pg_temp.a(), 'w2', 'w2-1', 1, 'valid'::gridha.ledger_status), 'valid',
          'report_status with a gridha.ledger_status reports');
SELECT throws_ok($$SELECT gridha.report_status(pg_temp.a(), 'w2', 'w2-1', 1, 'sideways')$$,
                 'RG005', 'unknown ledger status "sideways"',
                 'a bare unknown ledger status is refused with RG005, as in 1.1');
SELECT throws_ok($$SELECT gridha.report_status(pg_temp.a(), 'w2', 'w2-1', 1, NULL::gridha.ledger_status)$$,
                 '22004', 'status must not be null',
                 'a NULL ledger status is refused (22004)');

-- ---------------------------------------------------------------------------
-- Batched reports of rows (8)
-- ---------------------------------------------------------------------------

SELECT results_eq(
    $$SELECT service_id, batch_id, status::text, sqlstate
        FROM gridha.report_submissions(pg_temp.a(), ARRAY[
             ('r1', 'r1-1', 1, 'accepted', 'sent'),
             ('r2', 'r2-1', 1, 'rejected', 'bad payload'),
             ('r3', 'r3-1', 9, 'accepted', NULL),
             NULL,
             ('r1', 'nope', 1, 'accepted', NULL)]::gridha.submission_report[])$$,
    $$VALUES ('r1'::text, 'r1-1'::text, 'pending'::text, NULL::text),
             ('r2', 'r2-1', 'invalid', NULL),
             ('r3', 'r3-1', NULL, 'RG001'),
             (NULL, NULL, NULL, '22004'),
             ('r1', 'nope', NULL, 'RG003')$$,
    'report_submissions(rows): a row per batch in the order given, each with its status or the SQLSTATE that refused it');
SELECT results_eq(
    $$SELECT batch_id, status::text, detail FROM gridha.batches WHERE batch_id IN ('r1-1', 'r2-1', 'r3-1') ORDER BY batch_id$$,
    $$VALUES ('r1-1'::text, 'pending'::text, 'sent'::text), ('r2-1', 'invalid', 'bad payload'), ('r3-1', 'submitting', NULL)$$,
    'report_submissions(rows): each row''s detail is stored; the refused row changed nothing');
SELECT results_eq(
    $$SELECT service_id, batch_id, status::text, sqlstate
        FROM gridha.report_statuses(pg_temp.a(), ARRAY[
             ('r1', 'r1-1', 1, 'invalid', 'ledger: signature'),
             ('w2', 'w2-1', 1, 'committed', NULL),
             ('w1', 'w1-1', 1, 'committed', NULL)]::gridha.status_report[])$$,
    $$VALUES ('r1'::text, 'r1-1'::text, 'invalid'::text, NULL::text),
             ('w2', 'w2-1', 'committed', NULL),
             ('w1', 'w1-1', NULL, 'RG002')$$,
    'report_statuses(rows): statuses reported, a final batch refused alone (RG002)');
SELECT is((SELECT detail FROM gridha.batches WHERE batch_id = 'r1-1'), 'ledger: signature',
          'report_statuses(rows): a row''s detail is stored on its batch');
SELECT is_empty($$SELECT * FROM gridha.report_submissions(pg_temp.a(), '{}'::gridha.submission_report[])$$,
                'an empty array of rows reports nothing');
SELECT throws_ok($$SELECT * FROM gridha.report_statuses(pg_temp.a(), NULL::gridha.status_report[])$$,
                 '22004', 'reports must not be null',
                 'a NULL array of rows refuses the whole call (22004)');
SELECT throws_ok($$SELECT * FROM gridha.report_submissions(pg_temp.a(), ARRAY[('r3', 'r3-1', 1, 'lost', NULL)]::gridha.submission_report[])$$,
                 '22P02', NULL,
                 'an unknown outcome in a row is refused by its enum (22P02) before the call');
SELECT results_eq(
    $$SELECT status::text, sqlstate FROM gridha.report_submissions(pg_temp.a(), '{r3}', '{r3-1}', '{1}', '{accepted}')$$,
    $$VALUES ('pending'::text, NULL::text)$$,
    'the deprecated five-array report_submissions still reports');

-- ---------------------------------------------------------------------------
-- attempts after a resubmission (1)
-- ---------------------------------------------------------------------------

-- its backoff over, and the head that has waited longest: next_batch's pick
UPDATE gridha.batches SET not_before = now() - interval '1 second' WHERE batch_id = 'w4-1';
UPDATE gridha.service_claims SET ready_at = now() - interval '1 hour' WHERE service_id = 'w4';
SELECT is((SELECT attempts FROM gridha.next_batch(pg_temp.a()) WHERE batch_id = 'w4-1'), 2,
          'next_batch hands the delayed batch out again with attempts 2');

-- ---------------------------------------------------------------------------
-- Leader lease: duty (8)
-- ---------------------------------------------------------------------------

CREATE TEMP TABLE terms AS SELECT gridha.lead(pg_temp.a()) AS a_term;

SELECT isnt((SELECT a_term FROM terms), NULL, 'lead(instance) leads its default duty and returns a term');
SELECT is(gridha.try_lead(pg_temp.b()), NULL,
          'try_lead (deprecated) of another instance meets the same lease: NULL');
SELECT ok(gridha.renew_lead(pg_temp.a(), duty => 'default', term => (SELECT a_term FROM terms)),
          'renew_lead names its argument duty (named notation)');
SELECT ok(gridha.resign_lead(pg_temp.a()), 'resign_lead gives the lease up');
SELECT ok(gridha.lead(pg_temp.b(), duty => 'default') > (SELECT a_term FROM terms),
          'lead of the next instance takes the duty under a new term');
SELECT ok(gridha.resign(pg_temp.b(), 'default'), 'resign (deprecated) still gives the lease up');
SELECT throws_ok($$SELECT gridha.lead(pg_temp.a(), '')$$, '22023', 'duty must not be empty',
                 'lead refuses an empty duty (22023)');
SELECT is((SELECT count(*) FROM pg_proc p
            WHERE p.oid IN ('gridha.try_lead(uuid,text)'::regprocedure, 'gridha.resign(uuid,text)'::regprocedure,
                            'gridha.report_submissions(uuid,text[],text[],bigint[],text[],text[])'::regprocedure,
                            'gridha.report_statuses(uuid,text[],text[],bigint[],text[],text[])'::regprocedure)
              AND obj_description(p.oid, 'pg_proc') LIKE 'deprecated since 1.2 (use %'),
          4::bigint, 'the 1.1 names kept as wrappers say they are deprecated and what to use');

SELECT * FROM finish();
ROLLBACK;
