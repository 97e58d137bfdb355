-- 20_stale_pruned.sql: a stale report about a batch that retention has
-- already pruned is refused as stale (RG001) and counted as a stale write,
-- like any other report of an instance that no longer holds the service
-- at that epoch (issue 38, item 11). In 1.2 the report found no batch and
-- was refused with RG003 (unknown batch), and stale_writes_refused_total
-- missed it. A report of the pruned batch by the service's holder, at its
-- own epoch, is still about an unknown batch (RG003).
--
-- One transaction, rolled back.
BEGIN;
SELECT plan(6);

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
\o
SET LOCAL gridha.renew_interval = '1h';
SET LOCAL gridha.soft_expiry = '2h';
SET LOCAL gridha.hard_expiry = '3h';
SET LOCAL gridha.prune_interval = -1;   -- no poll duty: this file prunes by hand
SET LOCAL gridha.retention = '1h';
SET LOCAL gridha.balance_claims = off;

TRUNCATE gridha.batches, gridha.service_claims, gridha.target_totals;
DELETE FROM gridha.leases;
DELETE FROM gridha.instances;

CREATE TEMP TABLE ids AS SELECT gridha.register_instance('A') AS a, gridha.register_instance('B') AS b;
CREATE FUNCTION pg_temp.a() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT a FROM ids $$;
CREATE FUNCTION pg_temp.b() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT b FROM ids $$;

-- A takes p1 and hands out p1-1; an operator expires A's claims; B takes
-- p1 over, hands p1-1 out again and reports it committed
SELECT gridha.enqueue('p1', 'p1-1', NULL) \g /dev/null
SELECT gridha.enqueue('p1', 'p1-2', NULL) \g /dev/null
CREATE TEMP TABLE handed_a AS SELECT service_id, batch_id, epoch FROM gridha.next_batch(pg_temp.a());
UPDATE gridha.service_claims SET hard_expiry = now() - interval '1 second' WHERE claimant = pg_temp.a();
CREATE TEMP TABLE taken_b AS SELECT service_id, epoch FROM gridha.acquire_claims(pg_temp.b());
CREATE TEMP TABLE handed_b AS SELECT service_id, batch_id, epoch FROM gridha.next_batch(pg_temp.b());
SELECT gridha.report_submission(pg_temp.b(), 'p1', 'p1-1', (SELECT epoch FROM handed_b), 'accepted') \g /dev/null
SELECT gridha.report_status(pg_temp.b(), 'p1', 'p1-1', (SELECT epoch FROM handed_b), 'committed') \g /dev/null
-- ... long ago: retention prunes it
UPDATE gridha.batches SET created_at = now() - interval '2 hours', finished_at = now() - interval '2 hours'
 WHERE service_id = 'p1' AND batch_id = 'p1-1';

SELECT results_eq($$SELECT (SELECT batch_id FROM handed_a), (SELECT batch_id FROM handed_b),
                           (SELECT epoch FROM handed_b) > (SELECT epoch FROM handed_a),
                           gridha.prune_batches(NULL)$$,
                  $$VALUES ('p1-1'::text, 'p1-1'::text, true, 1::bigint)$$,
                  'A handed out p1-1, B took p1 over at a later epoch and committed p1-1, and retention pruned it');

SELECT throws_ok(format($$SELECT gridha.report_status(%L, 'p1', 'p1-1', %s, 'committed')$$,
                        pg_temp.a(), (SELECT epoch FROM handed_a)),
                 'RG001', NULL,
                 'A''s report_status of the pruned batch at its old epoch is refused as stale (RG001), not as an unknown batch');
SELECT throws_ok(format($$SELECT gridha.report_submission(%L, 'p1', 'p1-1', %s, 'accepted')$$,
                        pg_temp.a(), (SELECT epoch FROM handed_a)),
                 'RG001', NULL,
                 'A''s report_submission of the pruned batch at its old epoch is refused as stale (RG001)');
SELECT results_eq($$SELECT sqlstate FROM gridha.report_statuses(pg_temp.a(),
                      ARRAY[('p1', 'p1-1', (SELECT epoch FROM handed_a), 'committed', NULL)]::gridha.status_report[])$$,
                  $$VALUES ('RG001'::text)$$,
                  'a batched report of it is refused as stale too');

-- A's next call writes what it counted
SELECT gridha.next_batch(pg_temp.a()) \g /dev/null
SELECT results_eq($$SELECT stale_writes_refused_total FROM gridha.metrics
                     WHERE scope = 'target' AND target = 'default'$$,
                  $$VALUES (3::bigint)$$,
                  'the three refusals count as stale writes');

SELECT throws_ok(format($$SELECT gridha.report_status(%L, 'p1', 'p1-1', %s, 'committed')$$,
                        pg_temp.b(), (SELECT epoch FROM handed_b)),
                 'RG003', 'unknown batch "p1-1" of service "p1"',
                 'B, which holds p1 at that epoch, reporting the pruned batch gets RG003 (unknown batch)');

SELECT * FROM finish();
ROLLBACK;
