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

-- The keyed baseline (test/bench/ordered.sh, scale.sh): a plain per-key
-- ordered queue. A free key with jobs waiting is locked with FOR UPDATE SKIP
-- LOCKED and marked busy, which takes its next job (seq = head) in the same
-- statement; the job is marked submitting, then completed, and the key
-- released: one job per key at a time, in seq order, as gridha hands out a
-- service's batches. The key row says which job is next: the row locked is
-- its newest version, where a job picked by a query on bench_jobs would be
-- read with the statement's older snapshot (the previous job again).
CREATE TABLE bench_keys (
    key        text PRIMARY KEY,
    busy       boolean NOT NULL DEFAULT false,
    head       bigint NOT NULL DEFAULT 1,   -- seq of the next job to take
    tail       bigint NOT NULL DEFAULT 0,   -- seq of the last job enqueued
    free_since timestamptz NOT NULL DEFAULT now()
);
-- The keys that can be taken, the one free the longest first.
CREATE INDEX bench_keys_ready ON bench_keys (free_since) WHERE NOT busy AND head <= tail;

CREATE TABLE bench_jobs (
    id       bigserial PRIMARY KEY,
    key      text NOT NULL,
    seq      bigint NOT NULL,
    batch_id text NOT NULL,
    payload  bytea,
    status   text NOT NULL DEFAULT 'queued',
    taken_at timestamptz,
    done_at  timestamptz,
    UNIQUE (key, seq)
);
