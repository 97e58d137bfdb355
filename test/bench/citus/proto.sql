/*
 * test/bench/citus/proto.sql: a PROTOTYPE of the core of the planned Citus
 * mode (docs/citus.md, "Planned: a Citus mode"), to check the design against
 * a real Citus cluster and measure what it costs (test/bench/citus.sh). It
 * is not gridha and not the Citus mode: its own schema (cproto), plain
 * SQL/PL/pgSQL, no gridha loaded, only the hand-out path of one fleet.
 *
 * Words used here:
 *   bucket    cproto.bucket_of(service_id), an immutable hash of the id
 *             into 0..63: the distribution column of every table here, so
 *             that a bucket's rows share one shard
 *   holder    the instance that holds a bucket (cproto.bucket_claims) until
 *             its lease's hard expiry; it alone hands out the bucket's
 *             batches and reports them
 *   epoch     the bucket's fencing token: it rises each time the bucket
 *             changes hands; a hand-out carries it, and a call that does
 *             not name the bucket's current epoch (a stale holder) is
 *             refused (SQLSTATE CP001)
 *   head      a service's oldest batch that is not final; it is handed out
 *             only when nothing of the service is in flight, and the next
 *             batch becomes the head only when the head is final
 *             (committed or rejected): order per service, one in flight
 *   ready     a service whose head waits (service_claims.ready_since set)
 *
 * Every function takes the bucket as an argument and touches only that
 * bucket's rows, so that on Citus it can be a distributed function with
 * the bucket as distribution argument, co-located with cproto.batches:
 * `SELECT f(bucket, ...)` on the coordinator is then sent whole to the node
 * holding the bucket, where each statement of f is a router statement on
 * that node's shard. On one plain server the same functions run as they
 * are. Tables are created here local; test/bench/citus.sh distributes them
 * (cproto.distribute()).
 *
 * There are no triggers: enqueue reserves the seq itself. The functions
 * raise errors with SQLSTATEs of their own (CPnnn): this is a prototype.
 * Citus 13.2 refuses a non-immutable function such as now() inside CASE
 * or COALESCE in a statement on a distributed table ("non-IMMUTABLE
 * functions are not allowed in CASE or COALESCE statements"), so the
 * functions that need the time there read it into a variable first (t).
 */

CREATE SCHEMA cproto;

/*
 * bucket_of(service_id): the service's bucket, 0..63. Immutable: a planner
 * folds bucket_of('s1') to a constant, which Citus needs to route a call.
 */
CREATE FUNCTION cproto.bucket_of(service_id text) RETURNS int
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT (hashtextextended(service_id, 0) & 63)::int $$;

-- One row per bucket, all 64 created here: who holds it, at which epoch,
-- until when.
CREATE TABLE cproto.bucket_claims (
    bucket int PRIMARY KEY,
    holder uuid,
    epoch bigint NOT NULL DEFAULT 0,
    soft_expiry timestamptz,
    hard_expiry timestamptz
);
INSERT INTO cproto.bucket_claims (bucket) SELECT b FROM generate_series(0, 63) AS b;

-- One row per service: its queue's ends and whether its head is ready or
-- in flight.
CREATE TABLE cproto.service_claims (
    bucket int NOT NULL,
    service_id text NOT NULL,
    tail bigint NOT NULL DEFAULT 0,         -- seq of the last batch enqueued
    head bigint NOT NULL DEFAULT 1,         -- seq of the oldest batch not final
    in_flight boolean NOT NULL DEFAULT false,
    ready_since timestamptz,                -- set: the head waits to be handed out
    PRIMARY KEY (bucket, service_id)
);
CREATE INDEX service_claims_ready ON cproto.service_claims (bucket, ready_since)
    WHERE ready_since IS NOT NULL;

CREATE TABLE cproto.batches (
    bucket int NOT NULL,
    service_id text NOT NULL,
    seq bigint NOT NULL,
    batch_id text NOT NULL,
    payload bytea,
    status text NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'submitting', 'pending', 'committed', 'rejected')),
    epoch bigint,                           -- the bucket's epoch at its last hand-out
    attempts int NOT NULL DEFAULT 0,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    handed_out_at timestamptz,
    finished_at timestamptz,
    PRIMARY KEY (bucket, service_id, seq),
    UNIQUE (bucket, service_id, batch_id)
);

-- What the hand-outs return (a single composite: Citus delegates only
-- `SELECT f(...)`, one function call and nothing else, so a caller reads
-- the fields from the one value).
CREATE TYPE cproto.handout AS (
    service_id text,
    batch_id text,
    seq bigint,
    epoch bigint,
    attempts int,
    payload bytea
);
CREATE TYPE cproto.handouts AS (
    service_ids text[],
    batch_ids text[],
    epoch bigint,
    payloads bytea[]
);

/*
 * fence(bucket, instance, epoch): the caller holds the bucket at that epoch
 * and its lease has not expired, or CP001. The bucket's row stays locked
 * (FOR SHARE) to the end of the caller's transaction, so a take-over waits
 * for a hand-out or a report in progress and cannot slip between the check
 * and the writes.
 */
CREATE FUNCTION cproto.fence(bucket int, instance uuid, epoch bigint) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM 1 FROM cproto.bucket_claims c
     WHERE c.bucket = fence.bucket AND c.holder = fence.instance
       AND c.epoch = fence.epoch AND c.hard_expiry >= now()
       FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'instance % does not hold bucket % at epoch %', instance, bucket, epoch
            USING ERRCODE = 'CP001',
                  DETAIL = 'The bucket changed hands, or the lease expired.';
    END IF;
END
$$;

/*
 * take_bucket(instance, bucket, lease): take the bucket when nobody holds
 * it or its holder's lease expired (hard expiry), or renew it when the
 * caller holds it; returns the bucket's epoch, or NULL when another holds
 * it. A take by a new holder raises the epoch, and the services that were
 * in flight under the old epoch become ready again (their head goes out
 * anew, at the new epoch; the old holder's reports of it are refused).
 */
CREATE FUNCTION cproto.take_bucket(instance uuid, bucket int, lease interval DEFAULT '30 s')
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    h uuid;
    e bigint;
    hx timestamptz;
BEGIN
    SELECT c.holder, c.epoch, c.hard_expiry INTO h, e, hx
      FROM cproto.bucket_claims c WHERE c.bucket = take_bucket.bucket FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no bucket %', bucket USING ERRCODE = 'CP003';
    END IF;
    IF h IS NOT NULL AND h <> instance AND hx >= now() THEN
        RETURN NULL;
    END IF;
    IF h IS DISTINCT FROM instance THEN
        e := e + 1;
        UPDATE cproto.service_claims s SET in_flight = false, ready_since = now()
         WHERE s.bucket = take_bucket.bucket AND s.in_flight;
    END IF;
    UPDATE cproto.bucket_claims c
       SET holder = instance, epoch = e,
           soft_expiry = now() + lease / 3, hard_expiry = now() + lease
     WHERE c.bucket = take_bucket.bucket;
    RETURN e;
END
$$;

/*
 * enqueue_in_bucket(bucket, service, batch, payload): append a batch to the
 * service's queue (its seq is the service's tail + 1); returns the seq. The
 * bucket must be bucket_of(service).
 */
CREATE FUNCTION cproto.enqueue_in_bucket(bucket int, service text, batch text, payload bytea)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    q bigint;
    t timestamptz := now();
BEGIN
    IF bucket IS DISTINCT FROM cproto.bucket_of(service) THEN
        RAISE EXCEPTION 'service % is in bucket %, not %', service, cproto.bucket_of(service), bucket
            USING ERRCODE = 'CP003';
    END IF;
    INSERT INTO cproto.service_claims (bucket, service_id)
    VALUES (enqueue_in_bucket.bucket, service) ON CONFLICT DO NOTHING;
    UPDATE cproto.service_claims s
       SET tail = s.tail + 1,
           ready_since = CASE WHEN NOT s.in_flight AND s.head = s.tail + 1 THEN t
                              ELSE s.ready_since END
     WHERE s.bucket = enqueue_in_bucket.bucket AND s.service_id = service
    RETURNING s.tail INTO q;
    INSERT INTO cproto.batches (bucket, service_id, seq, batch_id, payload)
    VALUES (enqueue_in_bucket.bucket, service, q, batch, payload);
    RETURN q;
END
$$;

/*
 * enqueue(service, batch, payload): enqueue_in_bucket in the service's
 * bucket. A SQL function the planner inlines, so `SELECT
 * cproto.enqueue('s1', ...)` becomes `SELECT cproto.enqueue_in_bucket(<a
 * constant>, 's1', ...)`, which Citus can delegate (test/bench/citus.sh
 * checks that it does).
 */
CREATE FUNCTION cproto.enqueue(service text, batch text, payload bytea) RETURNS bigint
LANGUAGE sql
AS $$ SELECT cproto.enqueue_in_bucket(cproto.bucket_of(service), service, batch, payload) $$;

/*
 * next_in_bucket(bucket, instance, epoch): the head of the bucket's service
 * that has waited longest, handed out (submitting, at the epoch); NULL when
 * no service of the bucket is ready. Fenced. The pick is FOR UPDATE SKIP
 * LOCKED within the bucket, so two calls on one bucket never take one
 * service.
 */
CREATE FUNCTION cproto.next_in_bucket(bucket int, instance uuid, epoch bigint)
RETURNS cproto.handout
LANGUAGE plpgsql
AS $$
DECLARE
    sid text;
    h bigint;
    r cproto.handout;
BEGIN
    PERFORM cproto.fence(bucket, instance, epoch);
    SELECT s.service_id, s.head INTO sid, h
      FROM cproto.service_claims s
     WHERE s.bucket = next_in_bucket.bucket AND s.ready_since IS NOT NULL
     ORDER BY s.ready_since
     LIMIT 1
       FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE cproto.service_claims s SET in_flight = true, ready_since = NULL
     WHERE s.bucket = next_in_bucket.bucket AND s.service_id = sid;
    UPDATE cproto.batches b
       SET status = 'submitting', epoch = next_in_bucket.epoch, attempts = b.attempts + 1,
           handed_out_at = now()
     WHERE b.bucket = next_in_bucket.bucket AND b.service_id = sid AND b.seq = h
    RETURNING b.service_id, b.batch_id, b.seq, b.epoch, b.attempts, b.payload INTO r;
    RETURN r;
END
$$;

/*
 * next_batches_in_bucket(bucket, instance, epoch, n): up to n heads of the
 * bucket's ready services (those that waited longest), handed out as
 * next_in_bucket does; empty arrays when none is ready.
 */
CREATE FUNCTION cproto.next_batches_in_bucket(bucket int, instance uuid, epoch bigint, n int)
RETURNS cproto.handouts
LANGUAGE plpgsql
AS $$
DECLARE
    sids text[];
    r cproto.handouts;
BEGIN
    PERFORM cproto.fence(bucket, instance, epoch);
    SELECT coalesce(array_agg(p.service_id), '{}') INTO sids
      FROM (SELECT s.service_id FROM cproto.service_claims s
             WHERE s.bucket = next_batches_in_bucket.bucket AND s.ready_since IS NOT NULL
             ORDER BY s.ready_since
             LIMIT n
               FOR UPDATE SKIP LOCKED) AS p;
    UPDATE cproto.service_claims s SET in_flight = true, ready_since = NULL
     WHERE s.bucket = next_batches_in_bucket.bucket AND s.service_id = ANY (sids);
    WITH u AS (
        UPDATE cproto.batches b
           SET status = 'submitting', epoch = next_batches_in_bucket.epoch,
               attempts = b.attempts + 1, handed_out_at = now()
          FROM cproto.service_claims s
         WHERE s.bucket = next_batches_in_bucket.bucket AND s.service_id = ANY (sids)
           AND b.bucket = next_batches_in_bucket.bucket AND b.service_id = s.service_id
           AND b.seq = s.head
        RETURNING b.service_id, b.batch_id, b.payload)
    SELECT coalesce(array_agg(u.service_id), '{}'), coalesce(array_agg(u.batch_id), '{}'),
           next_batches_in_bucket.epoch, coalesce(array_agg(u.payload), '{}')
      INTO r FROM u;
    RETURN r;
END
$$;

/*
 * report_in_bucket(bucket, instance, epoch, service, batch, status): the
 * fate of a batch handed out at that epoch: 'accepted' (submitting ->
 * pending), 'committed' or 'rejected' (final: the service's next batch
 * becomes its head and ready). Returns the batch's status. Fenced (CP001);
 * a batch not in flight at that epoch is CP002. A report that repeats the
 * status the batch already has returns it and changes nothing.
 */
CREATE FUNCTION cproto.report_in_bucket(bucket int, instance uuid, epoch bigint,
                                        service text, batch text, status text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    newst text;
    q bigint;
    st text;
    t timestamptz := now();
BEGIN
    newst := CASE status WHEN 'accepted' THEN 'pending' WHEN 'committed' THEN 'committed'
                         WHEN 'rejected' THEN 'rejected' END;
    IF newst IS NULL THEN
        RAISE EXCEPTION 'unknown status %', status USING ERRCODE = 'CP003';
    END IF;
    PERFORM cproto.fence(bucket, instance, epoch);
    UPDATE cproto.batches b
       SET status = newst,
           finished_at = CASE WHEN newst = 'pending' THEN NULL ELSE t END
     WHERE b.bucket = report_in_bucket.bucket AND b.service_id = service AND b.batch_id = batch
       AND b.epoch = report_in_bucket.epoch
       AND b.status IN ('submitting', CASE WHEN newst = 'pending' THEN 'submitting' ELSE 'pending' END)
    RETURNING b.seq INTO q;
    IF NOT FOUND THEN
        SELECT b.status INTO st FROM cproto.batches b
         WHERE b.bucket = report_in_bucket.bucket AND b.service_id = service AND b.batch_id = batch
           AND b.epoch = report_in_bucket.epoch;
        IF st = newst THEN
            RETURN st;
        END IF;
        RAISE EXCEPTION 'batch % of service % is not in flight at epoch % (%)', batch, service, epoch,
                        coalesce(st, 'not handed out at that epoch')
            USING ERRCODE = 'CP002';
    END IF;
    IF newst <> 'pending' THEN
        UPDATE cproto.service_claims s
           SET head = s.head + 1, in_flight = false,
               ready_since = CASE WHEN s.head + 1 <= s.tail THEN t END
         WHERE s.bucket = report_in_bucket.bucket AND s.service_id = service
           AND s.head = q AND s.in_flight;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'batch % of service % is not its head in flight', batch, service
                USING ERRCODE = 'CP004';
        END IF;
    END IF;
    RETURN newst;
END
$$;

/*
 * report_batches_in_bucket(bucket, instance, epoch, services, batches,
 * status): report_in_bucket for many batches of the bucket at once
 * (services[i], batches[i]; a service at most once, as only one of its
 * batches can be in flight). Returns how many were reported; a batch not
 * in flight at that epoch is CP002 and nothing is reported.
 */
CREATE FUNCTION cproto.report_batches_in_bucket(bucket int, instance uuid, epoch bigint,
                                                services text[], batches text[], status text)
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    newst text;
    done_sids text[];
    done_seqs bigint[];
    n int;
    t timestamptz := now();
BEGIN
    newst := CASE status WHEN 'accepted' THEN 'pending' WHEN 'committed' THEN 'committed'
                         WHEN 'rejected' THEN 'rejected' END;
    IF newst IS NULL THEN
        RAISE EXCEPTION 'unknown status %', status USING ERRCODE = 'CP003';
    END IF;
    PERFORM cproto.fence(bucket, instance, epoch);
    WITH u AS (
        UPDATE cproto.batches b
           SET status = newst,
               finished_at = CASE WHEN newst = 'pending' THEN NULL ELSE t END
         WHERE b.bucket = report_batches_in_bucket.bucket AND b.service_id = ANY (services)
           AND b.batch_id = batches[array_position(services, b.service_id)]
           AND b.epoch = report_batches_in_bucket.epoch
           AND b.status IN ('submitting', CASE WHEN newst = 'pending' THEN 'submitting' ELSE 'pending' END)
        RETURNING b.service_id, b.seq)
    SELECT coalesce(array_agg(u.service_id), '{}'), coalesce(array_agg(u.seq), '{}')
      INTO done_sids, done_seqs FROM u;
    n := cardinality(done_sids);
    IF n <> cardinality(services) THEN
        RAISE EXCEPTION '% of % batches are not in flight at epoch %', cardinality(services) - n,
                        cardinality(services), epoch
            USING ERRCODE = 'CP002';
    END IF;
    IF newst <> 'pending' AND n > 0 THEN
        UPDATE cproto.service_claims s
           SET head = s.head + 1, in_flight = false,
               ready_since = CASE WHEN s.head + 1 <= s.tail THEN t END
         WHERE s.bucket = report_batches_in_bucket.bucket AND s.service_id = ANY (done_sids)
           AND s.head = done_seqs[array_position(done_sids, s.service_id)] AND s.in_flight;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n <> cardinality(done_sids) THEN
            RAISE EXCEPTION '% batches are not their service''s head in flight', cardinality(done_sids) - n
                USING ERRCODE = 'CP004';
        END IF;
    END IF;
    RETURN n;
END
$$;

/*
 * distribute(): on a Citus coordinator, the tables distributed by bucket and
 * co-located (cproto.batches first, the others with it), and every function
 * that takes a bucket made a distributed function with the bucket as its
 * distribution argument, co-located with cproto.batches (Citus already
 * created every function of the schema on every node when it was created
 * here). Run once, on a fresh schema.
 */
CREATE FUNCTION cproto.distribute() RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    f text;
BEGIN
    -- one connection per node: Citus refuses a function command after a
    -- parallel operation in the same transaction
    PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
    PERFORM create_distributed_table('cproto.batches', 'bucket');
    PERFORM create_distributed_table('cproto.service_claims', 'bucket', colocate_with => 'cproto.batches');
    PERFORM create_distributed_table('cproto.bucket_claims', 'bucket', colocate_with => 'cproto.batches');
    PERFORM truncate_local_data_after_distributing_table('cproto.bucket_claims');
    FOREACH f IN ARRAY ARRAY['cproto.fence(int,uuid,bigint)',
                             'cproto.take_bucket(uuid,int,interval)',
                             'cproto.enqueue_in_bucket(int,text,text,bytea)',
                             'cproto.next_in_bucket(int,uuid,bigint)',
                             'cproto.next_batches_in_bucket(int,uuid,bigint,int)',
                             'cproto.report_in_bucket(int,uuid,bigint,text,text,text)',
                             'cproto.report_batches_in_bucket(int,uuid,bigint,text[],text[],text)'] LOOP
        PERFORM create_distributed_function(f::regprocedure, distribution_arg_name => 'bucket',
                                            colocate_with => 'cproto.batches');
    END LOOP;
END
$$;
