-- 08_read_only.sql: every function that writes refuses inside a read-only
-- transaction with SQLSTATE 25006, before it changes anything. The hot
-- path writes its rows without the planner (src/rows.c), so this is not
-- PostgreSQL's own check on an INSERT or UPDATE statement: each entry point
-- must ask.
--
-- One transaction, rolled back. Each call runs in the subtransaction of
-- pg_temp.read_only(), which sets transaction_read_only for itself only:
-- the setting goes with the subtransaction, as it would with the caller's
-- own BEGIN READ ONLY.
--
-- Instance: pg_temp.a(), registered by this session's role; it holds
-- service ro with ro1 submitting (epoch 1) and ro2 queued.
BEGIN;
SELECT plan(31);

DELETE FROM gridha.batches;
DELETE FROM gridha.service_claims;
DELETE FROM gridha.instances;
DELETE FROM gridha.leases;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = off;
\o

CREATE FUNCTION pg_temp.snapshot() RETURNS text
LANGUAGE sql AS $$
    SELECT md5(concat_ws('#',
        (SELECT string_agg(b::text, '|' ORDER BY b.service_id, b.batch_id) FROM gridha.batches b),
        (SELECT string_agg(c::text, '|' ORDER BY c.service_id) FROM gridha.service_claims c),
        (SELECT string_agg(i::text, '|' ORDER BY i.instance_id) FROM gridha.instances i),
        (SELECT string_agg(l::text, '|' ORDER BY l.duty) FROM gridha.leases l),
        (SELECT string_agg(s::text, '|' ORDER BY s.name) FROM gridha.id_sequences s),
        (SELECT string_agg(w::text, '|' ORDER BY w.name, w.window_start) FROM gridha.id_windows w),
        (SELECT string_agg(t::text, '|' ORDER BY t.target) FROM gridha.targets t)))
$$;

-- The SQLSTATE a statement raises in a read-only subtransaction, or
-- 'no error'.
CREATE FUNCTION pg_temp.read_only(q text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    st text;
BEGIN
    PERFORM set_config('transaction_read_only', 'on', true);
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE;
    RETURN st;
END
$$;

-- Re-raises: for throws_ok, which catches.
CREATE FUNCTION pg_temp.read_only_raise(q text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('transaction_read_only', 'on', true);
    EXECUTE q;
END
$$;

CREATE TEMP TABLE ro_instance AS SELECT gridha.register_instance('read-only test') AS id;
CREATE FUNCTION pg_temp.a() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT id FROM ro_instance $$;

\o /dev/null
SELECT gridha.enqueue('ro', 'ro1', '\x01');
SELECT gridha.enqueue('ro', 'ro2', '\x02');
SELECT gridha.next_batch(pg_temp.a());
SELECT gridha.create_id_sequence('ro_ids', 100, 1);
SELECT gridha.try_lead(pg_temp.a(), 'ro_role');
\o

CREATE TEMP TABLE before AS SELECT pg_temp.snapshot() AS h;

-- Sanity: the subtransaction really is read-only, and reads still work.
SELECT is(pg_temp.read_only($$CREATE TEMP TABLE ro_probe (x int)$$), '25006',
          'pg_temp.read_only makes its statement read-only');
SELECT is(pg_temp.read_only($$SELECT * FROM gridha.claims$$), 'no error',
          'reading a view is allowed in a read-only transaction');
SELECT is(pg_temp.read_only($$SELECT gridha.verify_batch(pg_temp.a(), 'ro', 'ro1', 1)$$),
          'no error', 'verify_batch only reads: allowed in a read-only transaction');
SELECT is(pg_temp.read_only($$SELECT gridha.stop_worker(pg_temp.a())$$), 'no error',
          'stop_worker only signals a worker (as pg_terminate_backend does): allowed in a read-only transaction');

-- Every write path.
SELECT is(pg_temp.read_only(q), '25006', name || ' refuses in a read-only transaction (25006)')
  FROM (VALUES
    ('enqueue',            $$SELECT gridha.enqueue('ro', 'ro3', '\x03')$$),
    ('enqueue with target', $$SELECT gridha.enqueue('ro2', 'x1', '\x03', 'default')$$),
    ('next_batch',         $$SELECT gridha.next_batch(pg_temp.a())$$),
    ('next_batches',       $$SELECT gridha.next_batches(pg_temp.a(), 10)$$),
    ('report_submission',  $$SELECT gridha.report_submission(pg_temp.a(), 'ro', 'ro1', 1, 'accepted')$$),
    ('report_status',      $$SELECT gridha.report_status(pg_temp.a(), 'ro', 'ro1', 1, 'committed')$$),
    ('report_submissions', $$SELECT * FROM gridha.report_submissions(pg_temp.a(), '{ro}', '{ro1}', '{1}', '{accepted}')$$),
    ('report_statuses',    $$SELECT * FROM gridha.report_statuses(pg_temp.a(), '{ro}', '{ro1}', '{1}', '{committed}')$$),
    ('register_instance',  $$SELECT gridha.register_instance('another')$$),
    ('register_instance with serves', $$SELECT gridha.register_instance('another', '{submit_url,status_url}')$$),
    ('acquire_claims',     $$SELECT gridha.acquire_claims(pg_temp.a())$$),
    ('acquire_claims with serves', $$SELECT gridha.acquire_claims(pg_temp.a(), '{submit_url,status_url}')$$),
    ('renew_claims',       $$SELECT gridha.renew_claims(pg_temp.a())$$),
    ('release_claims',     $$SELECT gridha.release_claims(pg_temp.a())$$),
    ('create_id_sequence', $$SELECT gridha.create_id_sequence('ro_more', 100, 1)$$),
    ('drop_id_sequence',   $$SELECT gridha.drop_id_sequence('ro_ids')$$),
    ('reserve_ids',        $$SELECT gridha.reserve_ids('ro_ids', 5)$$),
    ('next_id',            $$SELECT gridha.next_id('ro_ids')$$),
    ('try_lead',           $$SELECT gridha.try_lead(pg_temp.a(), 'ro_other')$$),
    ('renew_lead',         $$SELECT gridha.renew_lead(pg_temp.a(), 'ro_role', 1)$$),
    ('resign',             $$SELECT gridha.resign(pg_temp.a(), 'ro_role')$$),
    ('run_maintenance',    $$SELECT * FROM gridha.run_maintenance(pg_temp.a(), 'ro_role')$$),
    ('start_worker',       $$SELECT gridha.start_worker('ro worker')$$)
  ) AS calls(name, q);

SELECT is(pg_temp.snapshot(), (SELECT h FROM before),
          'after every refusal the tables are exactly as before');

-- The message says what was refused, as PostgreSQL's own refusals do.
SELECT throws_ok(
    $$SELECT pg_temp.read_only_raise($x$SELECT gridha.next_batch(pg_temp.a())$x$)$$,
    '25006', 'cannot execute next_batch() in a read-only transaction',
    'next_batch''s refusal names the call');

-- And outside the read-only subtransaction everything works again.
SELECT is((SELECT batch_id FROM gridha.next_batches(pg_temp.a(), 10)),
          NULL, 'with ro1 in flight, the service has nothing more to hand out');
SELECT is(gridha.report_status(pg_temp.a(), 'ro', 'ro1', 1, 'committed'),
          'committed'::gridha.batch_status, 'read-write again: report_status commits ro1');

SELECT * FROM finish();
ROLLBACK;
