-- 06_coordination.sql: section 7's API shape, privileges, settings and
-- SQLSTATEs: leader lease and maintenance, ID windows, rate limits.
--
-- One transaction, rolled back at the end.
BEGIN;
SELECT plan(64);

DELETE FROM gridha.leases;
DELETE FROM gridha.maintenance_ticks;

\o /dev/null
SELECT gridha.expiry_settings();        -- loads the library, defines gridha.*
\o

CREATE TEMP TABLE api7 (ord int, name text, args text[], arguments text, result text, client boolean);
INSERT INTO api7 VALUES
 (1, 'try_lead', '{uuid,text}', 'instance_id uuid, role text DEFAULT ''default''::text', 'bigint', true),
 (2, 'renew_lead', '{uuid,text,bigint}', 'instance_id uuid, duty text, term bigint', 'boolean', true),
 (3, 'resign', '{uuid,text}', 'instance_id uuid, role text DEFAULT ''default''::text', 'boolean', true),
 (4, 'run_maintenance', '{uuid,text}',
     'instance_id uuid, duty text DEFAULT ''gridha.maintenance''::text, OUT term bigint, OUT tick bigint, OUT outcome gridha.maintenance_outcome, OUT swept_instances integer, OUT pruned_batches bigint, OUT opened_windows integer',
     'record', true),
 (5, 'create_id_sequence', '{text,bigint,integer}',
     'name text, window_size bigint DEFAULT 1000000, min_open_windows integer DEFAULT 4', 'void', false),
 (6, 'drop_id_sequence', '{text}', 'name text', 'boolean', false),
 (7, 'reserve_ids', '{text,integer}', 'name text, count integer', 'int8range', true),
 (8, 'next_id', '{text}', 'name text', 'bigint', true);

CREATE FUNCTION pg_temp.proc7(a api7) RETURNS regprocedure LANGUAGE sql AS $$
    SELECT to_regprocedure(format('gridha.%s(%s)', a.name, array_to_string(a.args, ',')))
$$;

-- ---------------------------------------------------------------------------
-- Shape (8 x 3 = 24)
-- ---------------------------------------------------------------------------
SELECT is(pg_get_function_arguments(pg_temp.proc7(a)), a.arguments,
          format('gridha.%s arguments are: %s', a.name, a.arguments))
  FROM api7 a ORDER BY a.ord;
SELECT is(pg_get_function_result(pg_temp.proc7(a)), a.result,
          format('gridha.%s returns %s', a.name, a.result))
  FROM api7 a ORDER BY a.ord;
-- try_lead and resign (deprecated) are SQL wrappers over lead and
-- resign_lead since 1.3, run with the caller's rights (issue 40).
SELECT ok(coalesce((SELECT CASE WHEN a.name IN ('try_lead', 'resign')
                                THEN NOT p.prosecdef AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'sql')
                                ELSE p.prosecdef END
                           AND 'search_path=pg_catalog, gridha, pg_temp' = ANY (p.proconfig)
                      FROM pg_proc p WHERE p.oid = pg_temp.proc7(a)), false),
          format('gridha.%s is %s with search_path pinned', a.name,
                 CASE WHEN a.name IN ('try_lead', 'resign') THEN 'an SQL wrapper, SECURITY INVOKER,'
                      ELSE 'SECURITY DEFINER' END))
  FROM api7 a ORDER BY a.ord;

SELECT has_view('gridha', v, format('view gridha.%s exists', v))
  FROM unnest(ARRAY['leaders', 'id_sequence_status', 'target_rates']) AS v;
SELECT columns_are('gridha', 'leaders',
       ARRAY['duty', 'leader', 'term', 'acquired_at', 'renewed_at', 'expires_at', 'state',
             'last_tick', 'last_run_at'],
       'gridha.leaders shows each duty''s leader, term, expiry and last tick');

-- ---------------------------------------------------------------------------
-- Privileges (8 + 3)
-- ---------------------------------------------------------------------------
SELECT is(has_function_privilege('gridha_client', pg_temp.proc7(a), 'EXECUTE'), a.client,
          format('gridha_client %s execute gridha.%s', CASE WHEN a.client THEN 'can' ELSE 'cannot' END, a.name))
  FROM api7 a ORDER BY a.ord;
SELECT ok(has_table_privilege('gridha_client', format('gridha.%s', v), 'SELECT'),
          format('gridha_client may read gridha.%s', v))
  FROM unnest(ARRAY['leaders', 'id_sequence_status', 'target_rates']) AS v;

-- ---------------------------------------------------------------------------
-- Settings (5)
-- ---------------------------------------------------------------------------
SELECT is(current_setting('gridha.maintenance_interval'), '1min', 'gridha.maintenance_interval defaults to 1min');
SELECT is(current_setting('gridha.retention'), '7d', 'gridha.retention defaults to 7d (final batches kept a week)');
SELECT is(current_setting('gridha.sweep_instances_after'), '1d', 'gridha.sweep_instances_after defaults to 1d');
SELECT is(current_setting('gridha.id_block_size'), '100', 'gridha.id_block_size defaults to 100');
SELECT is((SELECT context FROM pg_settings WHERE name = 'gridha.retention'), 'superuser',
          'gridha.retention is superuser-set');

-- ---------------------------------------------------------------------------
-- SQLSTATEs (10)
-- ---------------------------------------------------------------------------
SELECT gridha.create_id_sequence('tap-ids', 10, 1);
SELECT throws_ok($$SELECT gridha.reserve_ids('tap-none', 1)$$, 'RG010', NULL,
                 'reserve_ids of an unknown sequence raises RG010');
SELECT throws_ok($$SELECT gridha.next_id('tap-none')$$, 'RG010', NULL,
                 'next_id of an unknown sequence raises RG010');
SELECT throws_ok($$SELECT gridha.reserve_ids('tap-ids', 11)$$, 'RG011', NULL,
                 'reserve_ids of more than a window raises RG011');
SELECT throws_ok($$SELECT gridha.create_id_sequence('tap-ids')$$, 'RG012', NULL,
                 'create_id_sequence of an existing name raises RG012');
SELECT throws_ok($$SELECT gridha.reserve_ids('tap-ids', 0)$$, '22023', NULL,
                 'reserve_ids of a count of 0 raises 22023');
SELECT throws_ok($$SELECT gridha.reserve_ids('tap-ids', -1)$$, '22023', NULL,
                 'reserve_ids of a negative count raises 22023');
SELECT throws_ok($$SELECT gridha.reserve_ids('tap-ids', NULL)$$, '22004', NULL,
                 'reserve_ids of a NULL count raises 22004');
SELECT throws_ok($$SELECT gridha.try_lead(NULL)$$, '22004', NULL,
                 'try_lead without an instance raises 22004');
SELECT throws_ok($$SELECT gridha.try_lead('11111111-0000-0000-0000-000000000001', '')$$, '22023', NULL,
                 'try_lead of an empty role raises 22023');
SELECT throws_ok($$SELECT gridha.create_id_sequence('tap-bad', 0)$$, '22023', NULL,
                 'create_id_sequence of a window size of 0 raises 22023');

-- ---------------------------------------------------------------------------
-- Behaviour (10)
-- ---------------------------------------------------------------------------
SELECT is(gridha.try_lead('11111111-0000-0000-0000-000000000001'), 1::bigint, 'the first leader gets term 1');
SELECT is(gridha.try_lead('22222222-0000-0000-0000-000000000002'), NULL::bigint,
          'a second would-be leader gets NULL while the lease runs');
SELECT is((SELECT outcome FROM gridha.run_maintenance('22222222-0000-0000-0000-000000000002', 'default')), 'not_leader',
          'run_maintenance of a non-leader does nothing');
SELECT is((SELECT outcome FROM gridha.run_maintenance('11111111-0000-0000-0000-000000000001', 'default')), 'ran',
          'run_maintenance of the leader runs the tick');
SELECT is((SELECT outcome FROM gridha.run_maintenance('11111111-0000-0000-0000-000000000001', 'default')), 'already_run',
          'the same tick does not run twice');
SELECT ok(gridha.resign('11111111-0000-0000-0000-000000000001'), 'the leader resigns');
SELECT is(gridha.try_lead('22222222-0000-0000-0000-000000000002'), 2::bigint,
          'after a resignation the next leader gets a new term');
SELECT is(gridha.reserve_ids('tap-ids', 4), int8range(1, 5), 'reserve_ids returns a block [lo, hi)');
SET LOCAL gridha.id_block_size = 2;
SELECT is(gridha.next_id('tap-ids'), 5::bigint, 'next_id continues after the reserved block, in a block of 2');
SELECT is((SELECT next_slot_at FROM gridha.target_rates WHERE target = 'default'), NULL::timestamptz,
          'a target without a rate limit has no next slot time');

SELECT * FROM finish();
ROLLBACK;
