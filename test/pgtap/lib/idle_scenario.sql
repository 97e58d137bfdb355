-- test/pgtap/lib/idle_scenario.sql: the fixture shared by the pgTAP files
-- that poll over idle services (14_idle_poll, 15_index_identity); included
-- with \ir inside their transaction, after the settings are pinned.
--
--   pg_temp.scenario(n)   instances X and Y, services x<n> (X's) and y<n>
--                         (Y's), each with one committed batch; then X's
--                         first poll: the rows it hands out
--   pg_temp.x(), pg_temp.y()   the current X and Y

CREATE TEMP TABLE cur (x uuid, y uuid);
CREATE FUNCTION pg_temp.x() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT x FROM cur $$;
CREATE FUNCTION pg_temp.y() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT y FROM cur $$;

/*
 * scenario(n): instances X and Y, services x<n> (X's) and y<n> (Y's), each
 * with one batch, committed: both queues are empty. Then X's first poll,
 * which finds nothing (and looks at everything).
 */
CREATE FUNCTION pg_temp.scenario(n int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    x uuid;
    y uuid;
BEGIN
    TRUNCATE gridha.batches, gridha.service_claims;
    UPDATE gridha.instances SET soft_expiry = NULL, hard_expiry = NULL, held = 0;
    x := gridha.register_instance('X');
    y := gridha.register_instance('Y');
    DELETE FROM cur;
    INSERT INTO cur VALUES (x, y);
    UPDATE gridha.instances
       SET soft_expiry = now() + interval '1 hour', hard_expiry = now() + interval '2 hours',
           last_seen_at = now()
     WHERE instance_id IN (x, y);
    PERFORM gridha.enqueue(s, s || '-b0', NULL) FROM unnest(ARRAY['x' || n, 'y' || n]) AS s;
    UPDATE gridha.batches SET status = 'committed', epoch = 1, attempts = 1,
           handed_out_at = now(), finished_at = now();
    UPDATE gridha.service_claims
       SET claimant = CASE WHEN service_id LIKE 'x%' THEN x ELSE y END, epoch = 1,
           head_seq = NULL, ready_at = NULL;
    UPDATE gridha.instances SET held = 1 WHERE instance_id IN (x, y);
    RETURN (SELECT count(*) FROM gridha.next_batch(x));
END
$$;
