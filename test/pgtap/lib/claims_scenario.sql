-- test/pgtap/lib/claims_scenario.sql: fixtures shared by the pgTAP files
-- that arrange claims by hand (13_relief, 17_work_conserving); included
-- with \ir inside their transaction, after they emptied gridha's tables.
--
--   pg_temp.scenario(a_has, b_has, empty, flying)  new live instances A and
--        B, their claim cycles not due, holding the services named at epoch
--        1: each service has two batches; empty ones are done, flying ones
--        have their head submitting, the others their head queued (the
--        lower numbers waiting longer)
--   pg_temp.a(), pg_temp.b()   the current A and B
--   pg_temp.claims()           (service_id, holder A/B, epoch, in_flight)
--   pg_temp.held()             the held counts of A and B

CREATE TEMP TABLE cur (a uuid, b uuid);
CREATE FUNCTION pg_temp.a() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT a FROM cur $$;
CREATE FUNCTION pg_temp.b() RETURNS uuid LANGUAGE sql STABLE AS $$ SELECT b FROM cur $$;

/*
 * scenario(a_has, b_has, empty, flying): new instances A and B, live, their
 * claim cycle not due, holding the services named (every service there is),
 * at epoch 1.
 */
CREATE FUNCTION pg_temp.scenario(a_has text[], b_has text[], empty text[], flying text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    a uuid;
    b uuid;
BEGIN
    TRUNCATE gridha.batches, gridha.service_claims;
    UPDATE gridha.instances SET soft_expiry = NULL, hard_expiry = NULL, held = 0;
    a := gridha.register_instance('A');
    b := gridha.register_instance('B');
    DELETE FROM cur;
    INSERT INTO cur VALUES (a, b);
    UPDATE gridha.instances
       SET soft_expiry = now() + interval '1 hour', hard_expiry = now() + interval '2 hours',
           last_seen_at = now()
     WHERE instance_id IN (a, b);
    PERFORM gridha.enqueue(s, s || '-x' || j, NULL)
       FROM unnest(a_has || b_has) AS s, generate_series(1, 2) AS j;
    UPDATE gridha.service_claims c
       SET claimant = CASE WHEN c.service_id = ANY (a_has) THEN a ELSE b END, epoch = 1,
           ready_at = now() - substr(c.service_id, 2)::int * interval '-1 second' - interval '1 minute';
    UPDATE gridha.batches SET status = 'committed', epoch = 1, attempts = 1,
           handed_out_at = now(), finished_at = now()
     WHERE service_id = ANY (empty);
    UPDATE gridha.service_claims SET head_seq = NULL, ready_at = NULL WHERE service_id = ANY (empty);
    UPDATE gridha.batches x SET status = 'submitting', epoch = 1, attempts = 1,
           handed_out_at = now(), instance_id = c.claimant
      FROM gridha.service_claims c
     WHERE c.service_id = x.service_id AND x.seq = c.head_seq AND x.service_id = ANY (flying);
    UPDATE gridha.service_claims SET ready_at = NULL, in_flight = true WHERE service_id = ANY (flying);
    UPDATE gridha.instances i
       SET held = (SELECT count(*) FROM gridha.service_claims c WHERE c.claimant = i.instance_id)
     WHERE instance_id IN (a, b);
END
$$;

CREATE FUNCTION pg_temp.claims() RETURNS TABLE (service_id text, holder text, epoch bigint, in_flight boolean)
LANGUAGE sql AS $$
    SELECT c.service_id, CASE c.claimant WHEN pg_temp.a() THEN 'A' WHEN pg_temp.b() THEN 'B' END,
           c.epoch, c.in_flight
      FROM gridha.service_claims c ORDER BY 1
$$;

CREATE FUNCTION pg_temp.held() RETURNS TABLE (a int, b int)
LANGUAGE sql AS $$
    SELECT (SELECT held FROM gridha.instances WHERE instance_id = pg_temp.a()),
           (SELECT held FROM gridha.instances WHERE instance_id = pg_temp.b())
$$;
