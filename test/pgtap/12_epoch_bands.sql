-- 12_epoch_bands.sql: a database that arrives on a cluster with epochs of
-- a later timeline (a restored pg_dump of a cluster that had failed over,
-- or pg_upgrade, which starts at timeline 1 again) gives epochs above them
-- on every timeline of its new cluster. The first takeover on a cluster
-- writes the cluster's band (gridha.epoch_bands, by system identifier):
-- the highest band of the epochs found; timeline T gives epochs from
-- (band + T - 1) * 2^40 on. The cluster's timeline here is 1.
--
-- One transaction, rolled back. Its first takeover must be the session's
-- first (a backend reads the band once).
BEGIN;
SELECT plan(6);

TRUNCATE gridha.batches, gridha.service_claims;
DELETE FROM gridha.instances;
DELETE FROM gridha.epoch_bands;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
SET LOCAL gridha.balance_claims = off;
SELECT gridha.enqueue('eb-' || i, 'b1', NULL) FROM generate_series(1, 3) AS i;
\o

SELECT is((SELECT timeline_id FROM pg_control_checkpoint()), 1, 'this cluster is on timeline 1');

-- As pg_upgrade or a restore would bring them: the row of the cluster the
-- database came from, and epochs its timeline 4 gave (band 3).
INSERT INTO gridha.epoch_bands VALUES (12345, 0);
UPDATE gridha.service_claims SET epoch = (3::bigint << 40) + 7 WHERE service_id = 'eb-1';
UPDATE gridha.service_claims SET epoch = 5 WHERE service_id = 'eb-2';

CREATE TEMP TABLE inst AS SELECT gridha.register_instance('eb') AS id;
SELECT results_eq(
    $$SELECT service_id, epoch FROM gridha.acquire_claims((SELECT id FROM inst)) ORDER BY 1$$,
    $$VALUES ('eb-1'::text, (3::bigint << 40) + 8), ('eb-2', 3::bigint << 40), ('eb-3', 3::bigint << 40)$$,
    'the first takeover gives epochs from band 3 on: above every epoch the database brought');
SELECT is((SELECT band FROM gridha.epoch_bands
            WHERE system_identifier = (SELECT system_identifier FROM pg_control_system())),
          3::bigint, 'it wrote this cluster''s band: 3, the highest band of the epochs it found');
SELECT is((SELECT band FROM gridha.epoch_bands WHERE system_identifier = 12345), 0::bigint,
          'the row of the cluster the database came from is left as it was');

-- A later takeover on this cluster uses the band it wrote.
SELECT gridha.release_claims((SELECT id FROM inst)) \g /dev/null
SELECT results_eq(
    $$SELECT service_id, epoch FROM gridha.acquire_claims((SELECT id FROM inst)) ORDER BY 1$$,
    $$VALUES ('eb-1'::text, (3::bigint << 40) + 9), ('eb-2', (3::bigint << 40) + 1),
             ('eb-3', (3::bigint << 40) + 1)$$,
    'the next takeover goes on from there, one up');

SELECT ok((SELECT NOT ('gridha.epoch_bands'::regclass = ANY (coalesce(extconfig, '{}')))
             FROM pg_extension WHERE extname = 'gridha'),
          'gridha.epoch_bands is not dumped: a restored database writes its new cluster''s band');

SELECT * FROM finish();
ROLLBACK;
