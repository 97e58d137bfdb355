-- 09_batched_reports.sql: report_submissions and report_statuses report
-- many batches in one call and return one row per batch, in the order
-- given: its new status, or the SQLSTATE and message that refused it. A
-- refused row is rolled back alone; the others are kept. What refuses the
-- whole call: arrays that do not line up, a NULL array, an instance the
-- caller does not own.
--
-- One transaction, rolled back.
--
-- Instances: pg_temp.a() holds services m1..m4, pg_temp.b() holds mb.
BEGIN;
SELECT plan(16);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = off;
\o

CREATE TEMP TABLE ids AS
    SELECT gridha.register_instance('batched a') AS a, gridha.register_instance('batched b') AS b;
CREATE FUNCTION pg_temp.a() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT a FROM ids $$;
CREATE FUNCTION pg_temp.b() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT b FROM ids $$;

\o /dev/null
-- B takes mb first, then A takes everything else.
SELECT gridha.enqueue('mb', 'b1', '\x00');
SELECT gridha.next_batch(pg_temp.b());
SELECT gridha.enqueue(s, s || '-1', '\x01') FROM unnest('{m1,m2,m3,m4}'::text[]) AS s;
SELECT gridha.enqueue(s, s || '-2', '\x02') FROM unnest('{m1,m2,m3,m4}'::text[]) AS s;
\o

SELECT results_eq(
    $$SELECT service_id, batch_id, epoch FROM gridha.next_batches(pg_temp.a(), 10) ORDER BY service_id$$,
    $$VALUES ('m1'::text, 'm1-1'::text, 1::bigint), ('m2', 'm2-1', 1), ('m3', 'm3-1', 1), ('m4', 'm4-1', 1)$$,
    'A has the four heads in hand');

-- ---------------------------------------------------------------------------
-- report_submissions: one row per batch, refused rows alone
-- ---------------------------------------------------------------------------

SELECT results_eq(
    $$SELECT service_id, batch_id, status::text, sqlstate
        FROM gridha.report_submissions(pg_temp.a(),
             '{m1,m2,m3,mb,m4,m1}', '{m1-1,m2-1,m3-1,b1,m4-1,nope}', '{1,1,7,1,1,1}',
             '{accepted,rejected,accepted,accepted,exploded,accepted}',
             '{null,"bad payload",null,null,null,null}')$$,
    $$VALUES ('m1'::text, 'm1-1'::text, 'pending'::text, NULL::text),
             ('m2', 'm2-1', 'invalid', NULL),
             ('m3', 'm3-1', NULL, 'RG001'),
             ('mb', 'b1', NULL, 'RG001'),
             ('m4', 'm4-1', NULL, 'RG004'),
             ('m1', 'nope', NULL, 'RG003')$$,
    'report_submissions: a row per batch in the order given, each with its status or the SQLSTATE that refused it');

SELECT results_eq(
    $$SELECT batch_id, status::text, detail FROM gridha.batches
       WHERE batch_id IN ('m1-1', 'm2-1', 'm3-1', 'm4-1', 'b1') ORDER BY batch_id$$,
    $$VALUES ('b1'::text, 'submitting'::text, NULL::text),
             ('m1-1', 'pending', NULL), ('m2-1', 'invalid', 'bad payload'),
             ('m3-1', 'submitting', NULL), ('m4-1', 'submitting', NULL)$$,
    'the accepted and rejected rows are kept, the refused ones changed nothing');

SELECT is(
    (SELECT message FROM gridha.report_submissions(pg_temp.a(), '{m3}', '{m3-1}', '{7}', '{accepted}')),
    'stale claim on service "m3"',
    'a refused row carries the refusal''s message');

SELECT results_eq(
    $$SELECT status::text, sqlstate FROM gridha.report_submissions(pg_temp.a(),
             ARRAY[NULL, 'm3', 'm3'], ARRAY['m3-1', '', 'm3-1'], ARRAY[1, 1, -1]::bigint[],
             '{accepted,accepted,accepted}')$$,
    $$VALUES (NULL::text, '22004'::text), (NULL, '22023'), (NULL, '22023')$$,
    'a NULL id, an empty id and a negative epoch refuse their own row only');

SELECT results_eq(
    $$SELECT status::text, sqlstate FROM gridha.report_submissions(pg_temp.a(),
             '{m3,m3}', '{m3-1,m3-1}', '{1,1}', '{accepted,accepted}')$$,
    $$VALUES ('pending'::text, NULL::text), (NULL, 'RG002')$$,
    'the same batch twice: the second report finds it no longer submitting (RG002)');

SELECT is_empty(
    $$SELECT * FROM gridha.report_submissions(pg_temp.a(), '{}', '{}', '{}', '{}')$$,
    'empty arrays report nothing');

-- ---------------------------------------------------------------------------
-- report_statuses
-- ---------------------------------------------------------------------------

SELECT results_eq(
    $$SELECT service_id, batch_id, status::text, sqlstate
        FROM gridha.report_statuses(pg_temp.a(),
             '{m1,m2,m3,m4}', '{m1-1,m2-1,m3-1,m4-1}', '{1,1,1,1}',
             '{committed,committed,pending,sideways}')$$,
    $$VALUES ('m1'::text, 'm1-1'::text, 'committed'::text, NULL::text),
             ('m2', 'm2-1', NULL, 'RG002'),
             ('m3', 'm3-1', 'pending', NULL),
             ('m4', 'm4-1', NULL, 'RG005')$$,
    'report_statuses: committed, a final batch refused (RG002), pending kept, an unknown word refused (RG005)');

SELECT results_eq(
    $$SELECT service_id, batch_id FROM gridha.next_batches(pg_temp.a(), 10) ORDER BY service_id$$,
    $$VALUES ('m1'::text, 'm1-2'::text), ('m2', 'm2-2')$$,
    'after the batched reports the next heads are ready where the old ones ended (m1, m2) and nowhere else');

SELECT results_eq(
    $$SELECT status::text FROM gridha.report_statuses(pg_temp.a(), '{m3,m1}', '{m3-1,m1-1}', '{1,1}', '{committed,committed}')$$,
    $$VALUES ('committed'::text), (NULL)$$,
    'rows come back in the order given, a committed batch stays committed');

-- ---------------------------------------------------------------------------
-- What refuses the whole call
-- ---------------------------------------------------------------------------

CREATE TEMP TABLE before AS
    SELECT md5(string_agg(b::text, '|' ORDER BY b.service_id, b.batch_id)) AS h FROM gridha.batches b;

SELECT throws_ok(
    $$SELECT * FROM gridha.report_statuses(pg_temp.a(), '{m4,m2}', '{m4-1}', '{1,1}', '{committed,committed}')$$,
    '22023', 'batch_ids has 1 elements, service_ids has 2',
    'arrays of different lengths refuse the whole call (22023)');
SELECT throws_ok(
    $$SELECT * FROM gridha.report_submissions(pg_temp.a(), '{m4}', '{m4-1}', '{1}', '{accepted}', '{a,b}')$$,
    '22023', 'details has 2 elements, service_ids has 1',
    'details must line up too');
SELECT throws_ok(
    $$SELECT * FROM gridha.report_statuses(pg_temp.a(), '{m4}', '{m4-1}', NULL, '{committed}')$$,
    '22004', 'epochs must not be null',
    'a NULL array refuses the whole call (22004)');
SELECT throws_ok(
    $$SELECT * FROM gridha.report_statuses(pg_temp.a(), '{{m4}}', '{{m4-1}}', '{{1}}', '{{committed}}')$$,
    '22023', 'service_ids must be a one-dimensional array',
    'a two-dimensional array refuses the whole call');
SELECT throws_ok(
    $$SELECT * FROM gridha.report_statuses(NULL, '{m4}', '{m4-1}', '{1}', '{committed}')$$,
    '22004', 'instance_id must not be null',
    'a NULL instance refuses the whole call');
SELECT is((SELECT md5(string_agg(b::text, '|' ORDER BY b.service_id, b.batch_id)) FROM gridha.batches b),
          (SELECT h FROM before), 'the refused calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
