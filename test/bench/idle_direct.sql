-- test/bench/idle_direct.sql: bench_idle_direct, which test/bench/scale.sh
-- and test/bench/run.sh load into a benchmark database that already has
-- bench_service(bigint), bench_instance(integer) and bench_payload(), and
-- registered instances.

/*
 * bench_idle_direct(first, counts): instance i gets counts[i] idle services,
 * written directly in the state the API leaves them (see test/bench/scale.sh), 100k
 * per transaction.
 */
CREATE PROCEDURE bench_idle_direct(first_service bigint, counts int[])
LANGUAGE plpgsql
AS $$
DECLARE
    next_service bigint := first_service;
    n bigint;
    chunk bigint;
BEGIN
    FOR i IN 1..array_length(counts, 1) LOOP
        n := counts[i];
        WHILE n > 0 LOOP
            chunk := least(n, 100000);
            PERFORM set_config('session_replication_role', 'replica', true);
            INSERT INTO gridha.service_claims (service_id, claimant, epoch, tail_seq)
            SELECT bench_service(s), bench_instance(i), 1, 1
              FROM generate_series(next_service, next_service + chunk - 1) AS s;
            INSERT INTO gridha.batches (service_id, batch_id, seq, payload, status, created_at,
                                        epoch, attempts, instance_id, handed_out_at, finished_at)
            SELECT bench_service(s), 'idle', 1, bench_payload(), 'committed', now(),
                   1, 1, bench_instance(i), now(), now()
              FROM generate_series(next_service, next_service + chunk - 1) AS s;
            PERFORM set_config('session_replication_role', 'origin', true);
            INSERT INTO gridha.service_counts AS c (target, shard, services)
            VALUES ('default', 0, chunk)
            ON CONFLICT (target, shard) DO UPDATE SET services = c.services + EXCLUDED.services;
            UPDATE gridha.instances SET held = held + chunk WHERE instance_id = bench_instance(i);
            COMMIT;
            next_service := next_service + chunk;
            n := n - chunk;
        END LOOP;
    END LOOP;
END
$$;
