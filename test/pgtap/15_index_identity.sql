-- 15_index_identity.sql: the indexes the hot path scans directly (rows.c)
-- are found by what they are, not by their name: a btree on the columns
-- gridha searches, in order, ascending, with no expression, and for the
-- two partial indexes of the idle poll (instances_lease,
-- service_claims_own_expiry) the predicate gridha created. Renamed, they
-- are still found; dropped, or created again with another definition, the
-- call fails with RG014 and a hint that says how to create the index, never
-- with XX000.
--
-- Not one transaction, unlike the other files: an index created in a
-- transaction that has HOT-updated its table is not usable by that
-- transaction (indcheckxmin; rows.c judges it as the planner does), so each
-- index is created in a transaction of its own, and each rejected one is
-- judged by its definition alone. The indexes are put back as the extension
-- creates them at the end. Each scenario has its own live instances X and
-- Y, each holding one service whose queue is empty; X's first call looks at
-- everything, and its next one (an idle poll) asks through the partial
-- indexes whether there is anything to take.
SELECT plan(14);

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET gridha.balance_claims = on;
SET gridha.renew_interval = '1h';
SET gridha.soft_expiry = '2h';
\o

\ir lib/idle_scenario.sql

-- X's idle poll, as a statement for throws_ok/lives_ok
CREATE FUNCTION pg_temp.poll() RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM gridha.next_batch(pg_temp.x())
$$;

-- 1. Renamed, both partial indexes are still found: Y's lease runs out
-- and X's idle poll, which finds that through instances_lease, takes y1.
ALTER INDEX gridha.instances_lease RENAME TO lease_renamed;
ALTER INDEX gridha.service_claims_own_expiry RENAME TO own_expiry_renamed;
SELECT pg_temp.scenario(1);
SELECT gridha.enqueue('y1', 'y1-b1', NULL) \g /dev/null
UPDATE gridha.instances SET soft_expiry = now() - interval '1 second' WHERE instance_id = pg_temp.y();
SELECT results_eq($$SELECT service_id, batch_id, epoch FROM gridha.next_batch(pg_temp.x())$$,
                  $$VALUES ('y1', 'y1-b1', 2::bigint)$$,
                  'renamed indexes: the idle poll still notices an expired lease (found by definition)');

-- 2. The lease index dropped: RG014, with a hint, not XX000.
DROP INDEX gridha.lease_renamed;
SELECT pg_temp.scenario(2);
SELECT throws_ok('SELECT pg_temp.poll()', 'RG014',
                 'gridha.instances has no index on (soft_expiry) WHERE soft_expiry IS NOT NULL',
                 'the lease index dropped: the idle poll fails with RG014');

-- 3. A same-named index with another definition is not used.
CREATE INDEX instances_lease ON gridha.instances (soft_expiry) WHERE soft_expiry IS NULL;
SELECT pg_temp.scenario(3);
SELECT throws_ok('SELECT pg_temp.poll()', 'RG014', NULL,
                 'instances_lease with another predicate (IS NULL): RG014');
DROP INDEX gridha.instances_lease;
CREATE INDEX instances_lease ON gridha.instances (hard_expiry) WHERE soft_expiry IS NOT NULL;
SELECT pg_temp.scenario(4);
SELECT throws_ok('SELECT pg_temp.poll()', 'RG014', NULL,
                 'instances_lease on another column (hard_expiry): RG014');
DROP INDEX gridha.instances_lease;
CREATE INDEX instances_lease ON gridha.instances (soft_expiry DESC) WHERE soft_expiry IS NOT NULL;
SELECT pg_temp.scenario(5);
SELECT throws_ok('SELECT pg_temp.poll()', 'RG014', NULL,
                 'instances_lease in descending order (indoption): RG014');
DROP INDEX gridha.instances_lease;
CREATE INDEX instances_lease ON gridha.instances USING hash (soft_expiry) WHERE soft_expiry IS NOT NULL;
SELECT pg_temp.scenario(6);
SELECT throws_ok('SELECT pg_temp.poll()', 'RG014', NULL,
                 'instances_lease as a hash index: RG014');
DROP INDEX gridha.instances_lease;
CREATE INDEX instances_lease ON gridha.instances ((coalesce(soft_expiry, hard_expiry))) WHERE soft_expiry IS NOT NULL;
SELECT pg_temp.scenario(7);
SELECT throws_ok('SELECT pg_temp.poll()', 'RG014', NULL,
                 'instances_lease on an expression: RG014');

-- 4. Created again as the extension does: the idle poll works again.
DROP INDEX gridha.instances_lease;
CREATE INDEX instances_lease ON gridha.instances (soft_expiry) WHERE soft_expiry IS NOT NULL;
SELECT pg_temp.scenario(8);
SELECT lives_ok('SELECT pg_temp.poll()', 'the lease index created again: the idle poll works');

-- 5. The own-expiry index: dropped, or with half its predicate: RG014.
DROP INDEX gridha.own_expiry_renamed;
SELECT pg_temp.scenario(9);
SELECT throws_ok('SELECT pg_temp.poll()', 'RG014',
                 'gridha.service_claims has no index on (soft_expiry) WHERE soft_expiry IS NOT NULL OR hard_expiry IS NOT NULL',
                 'the own-expiry index dropped: RG014');
CREATE INDEX service_claims_own_expiry ON gridha.service_claims (soft_expiry) WHERE soft_expiry IS NOT NULL;
SELECT pg_temp.scenario(10);
SELECT throws_ok('SELECT pg_temp.poll()', 'RG014', NULL,
                 'service_claims_own_expiry with half its predicate: RG014');
DROP INDEX gridha.service_claims_own_expiry;
CREATE INDEX service_claims_own_expiry ON gridha.service_claims (soft_expiry)
    WHERE soft_expiry IS NOT NULL OR hard_expiry IS NOT NULL;
SELECT pg_temp.scenario(11);
SELECT lives_ok('SELECT pg_temp.poll()', 'the own-expiry index created again: the idle poll works');

-- 6. The hand-out's index on (claimant, ready_at), dropped: RG014 too.
DROP INDEX gridha.service_claims_claimant_ready;
SELECT throws_ok('SELECT pg_temp.poll()', 'RG014',
                 'gridha.service_claims has no index on (claimant, ready_at)',
                 'the hand-out''s index dropped: RG014');
CREATE INDEX service_claims_claimant_ready ON gridha.service_claims (claimant, ready_at DESC);
SELECT throws_ok('SELECT pg_temp.poll()', 'RG014', NULL,
                 'the hand-out''s index in another order: RG014');

-- 7. The hint names the statement that creates the missing index.
DROP INDEX gridha.service_claims_claimant_ready;
CREATE INDEX service_claims_claimant_ready ON gridha.service_claims (claimant, ready_at);
DROP INDEX gridha.instances_lease;
SELECT pg_temp.scenario(12);
CREATE FUNCTION pg_temp.hint() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    h text;
BEGIN
    PERFORM pg_temp.poll();
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
    RETURN h;
END
$$;
SELECT is(pg_temp.hint(),
          'Create it again as the extension does: CREATE INDEX instances_lease ON gridha.instances (soft_expiry) WHERE soft_expiry IS NOT NULL;',
          'the hint of RG014 says how to create the index');

SELECT * FROM finish();

-- as the extension created them, and no instance or service left behind
\o /dev/null
DROP INDEX IF EXISTS gridha.instances_lease, gridha.lease_renamed,
    gridha.service_claims_own_expiry, gridha.own_expiry_renamed, gridha.service_claims_claimant_ready;
CREATE INDEX instances_lease ON gridha.instances (soft_expiry) WHERE soft_expiry IS NOT NULL;
CREATE INDEX service_claims_claimant_ready ON gridha.service_claims (claimant, ready_at);
CREATE INDEX service_claims_own_expiry ON gridha.service_claims (soft_expiry)
    WHERE soft_expiry IS NOT NULL OR hard_expiry IS NOT NULL;
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances;
\o
