-- The benchmarks' baseline: a plain table used as a queue. A batch is taken
-- with UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1),
-- then marked accepted, then done (test/bench/run.sh, instructions.sh).
CREATE TABLE bench_bare (
    id         bigserial PRIMARY KEY,
    service_id text NOT NULL,
    batch_id   text NOT NULL,
    payload    bytea,
    status     text NOT NULL DEFAULT 'queued'
);
-- What makes the take fast: only the queued rows, in id order.
CREATE INDEX bench_bare_queued ON bench_bare (id) WHERE status = 'queued';
