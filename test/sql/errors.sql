-- errors: every refusal has its own SQLSTATE and changes nothing.
\set A '''aaaaaaaa-0000-0000-0000-000000000001'''
\set B '''bbbbbbbb-0000-0000-0000-000000000002'''
SET gridha.balance_claims = off;
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances;

CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- a fingerprint of everything gridha stores, to prove refusals change nothing
CREATE FUNCTION pg_temp.state() RETURNS text LANGUAGE sql AS $$
    SELECT md5(coalesce((SELECT string_agg(b::text, '|' ORDER BY service_id, seq) FROM gridha.batches b), '')
            || coalesce((SELECT string_agg(c::text, '|' ORDER BY service_id) FROM gridha.service_claims c), '')
            || coalesce((SELECT string_agg(i::text, '|' ORDER BY instance_id) FROM gridha.instances i), ''))
$$;

SELECT gridha.enqueue('s1', 'b1', '\x01'), gridha.enqueue('s1', 'b2', '\x02'), gridha.enqueue('s2', 'c1', '\x03');
SELECT service_id, batch_id FROM gridha.next_batch(:A) WHERE service_id = 's1';
SELECT gridha.report_submission(:A, 's1', 'b1', 1, 'accepted');
SELECT gridha.report_status(:A, 's1', 'b1', 1, 'committed');
SELECT service_id, batch_id FROM gridha.next_batches(:A, 5) ORDER BY 1;
SELECT pg_temp.state() AS before \gset

CREATE TEMP TABLE refusals (q text);
INSERT INTO refusals VALUES
-- NULL arguments: 22004
($$SELECT gridha.next_batch(NULL)$$),
($$SELECT gridha.next_batches(NULL, 1)$$),
($$SELECT gridha.next_batches('aaaaaaaa-0000-0000-0000-000000000001', NULL)$$),
($$SELECT gridha.renew_claims(NULL)$$),
($$SELECT gridha.acquire_claims(NULL)$$),
($$SELECT gridha.release_claims(NULL)$$),
($$SELECT gridha.claimed_batches(NULL)$$),
($$SELECT gridha.pending_batches(NULL)$$),
($$SELECT gridha.enqueue(NULL, 'x', NULL)$$),
($$SELECT gridha.enqueue('s1', NULL, NULL)$$),
($$INSERT INTO gridha.batches (service_id, batch_id) VALUES (NULL, 'x')$$),
($$SELECT gridha.verify_batch('aaaaaaaa-0000-0000-0000-000000000001', 's1', 'b2', NULL)$$),
($$SELECT gridha.report_submission(NULL, 's1', 'b2', 1, 'accepted')$$),
($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', NULL, 'b2', 1, 'accepted')$$),
($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 's1', NULL, 1, 'accepted')$$),
($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 's1', 'b2', NULL, 'accepted')$$),
($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 's1', 'b2', 1, NULL)$$),
($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 's1', 'b2', 1, NULL)$$),
-- empty ids, negative counts and epochs: 22023
($$SELECT gridha.enqueue('', 'x', NULL)$$),
($$SELECT gridha.enqueue('s1', '', NULL)$$),
($$SELECT gridha.enqueue('s1', 'x', NULL, '')$$),
($$INSERT INTO gridha.batches (service_id, batch_id) VALUES ('s1', '')$$),
($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', '', 'b2', 1, 'committed')$$),
($$SELECT gridha.verify_batch('aaaaaaaa-0000-0000-0000-000000000001', 's1', '', 1)$$),
($$SELECT gridha.next_batches('aaaaaaaa-0000-0000-0000-000000000001', -1)$$),
($$SELECT gridha.claimed_batches('aaaaaaaa-0000-0000-0000-000000000001', -5)$$),
($$SELECT gridha.pending_batches('aaaaaaaa-0000-0000-0000-000000000001', -1)$$),
($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 's1', 'b2', -1, 'accepted')$$),
-- unknown words: RG004, RG005
($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 's1', 'b2', 1, 'ok')$$),
($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 's1', 'b2', 1, 'done')$$),
-- unknown service or batch: RG003
($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 'nope', 'b2', 1, 'accepted')$$),
($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 's1', 'nope', 1, 'committed')$$),
-- stale: wrong epoch, wrong instance: RG001
($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 's1', 'b2', 2, 'accepted')$$),
($$SELECT gridha.report_submission('bbbbbbbb-0000-0000-0000-000000000002', 's1', 'b2', 1, 'accepted')$$),
($$SELECT gridha.report_status('bbbbbbbb-0000-0000-0000-000000000002', 's1', 'b2', 1, 'committed')$$),
-- not in flight: RG002
($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 's1', 'b1', 1, 'accepted')$$),
($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 's1', 'b1', 1, 'committed')$$),
($$UPDATE gridha.batches SET status = 'invalid' WHERE batch_id = 'b1'$$),
-- unknown target for a new service: RG006; another target than the
-- service's (moving it is an administrator's): RG013; ids that are
-- dot-segments of a URL path: 22023; duplicate batch: 23505
($$SELECT gridha.enqueue('s9', 'x', NULL, 'nowhere')$$),
($$SELECT gridha.enqueue('s1', 'x', NULL, 'nowhere')$$),
($$SELECT gridha.enqueue('..', 'x', NULL)$$),
($$SELECT gridha.enqueue('s1', '.', NULL)$$),
($$INSERT INTO gridha.batches (service_id, batch_id) VALUES ('..', 'x')$$),
($$SELECT gridha.enqueue('s1', 'b1', NULL)$$),
($$INSERT INTO gridha.batches (service_id, batch_id) VALUES ('s1', 'b2')$$);

SELECT q, pg_temp.err(q) FROM refusals;
SELECT pg_temp.state() = :'before' AS nothing_changed;

-- reporting on a queued (never handed out: RG023, 1.3) batch, and on a pending one as a submission
SELECT gridha.enqueue('s1', 'b3', NULL);
SELECT pg_temp.state() AS before \gset
SELECT pg_temp.err($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 's1', 'b3', 1, 'committed')$$);
SELECT gridha.report_submission(:A, 's1', 'b2', 1, 'accepted');
SELECT pg_temp.state() AS before \gset
SELECT pg_temp.err($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 's1', 'b2', 1, 'accepted')$$);
SELECT pg_temp.state() = :'before' AS nothing_changed;

-- the full error report of a stale write
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT gridha.report_status(:B, 's1', 'b2', 1, 'committed');

-- read-only transactions: a client's BEGIN READ ONLY, and a session whose
-- transactions are read-only by default; both refuse every write with 25006
\set VERBOSITY sqlstate
SELECT pg_temp.state() AS before \gset
BEGIN READ ONLY;
SELECT gridha.enqueue('s1', 'ro', NULL);
ROLLBACK;
BEGIN READ ONLY;
SELECT * FROM gridha.next_batch(:A);
ROLLBACK;
SET default_transaction_read_only = on;
SELECT gridha.report_status(:A, 's1', 'b2', 1, 'committed');
SELECT gridha.acquire_claims(:A);
SELECT gridha.reserve_ids('nowhere', 1);
RESET default_transaction_read_only;
SELECT pg_temp.state() = :'before' AS nothing_changed;
\set VERBOSITY default
BEGIN READ ONLY;
SELECT gridha.report_submission(:A, 's1', 'b2', 1, 'accepted');
ROLLBACK;
