-- claims: acquire, two-phase expiry, takeover with fencing, balance, release, health.
\set A '''aaaaaaaa-0000-0000-0000-000000000001'''
\set B '''bbbbbbbb-0000-0000-0000-000000000002'''
\set C '''cccccccc-0000-0000-0000-000000000003'''
SET gridha.balance_claims = off;
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances;

CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

SELECT gridha.enqueue('s1', 'b1', '\x01'), gridha.enqueue('s1', 'b2', '\x02'), gridha.enqueue('s2', 'c1', '\x03');

-- A takes both; B finds nothing to take while A's claims are fresh
SELECT * FROM gridha.acquire_claims(:A) ORDER BY service_id;
SELECT * FROM gridha.acquire_claims(:B);
SELECT service_id, state FROM gridha.claims ORDER BY service_id;

-- s1 has a batch submitting; s2 is idle
SELECT service_id, batch_id, epoch FROM gridha.next_batch(:A) WHERE service_id = 's1';
SELECT service_id, batch_id, epoch FROM gridha.next_batch(:A);

-- soft expiry: the submitting claim is protected, the idle one is taken
SELECT gridha.report_submission(:A, 's2', 'c1', 1, 'accepted');
UPDATE gridha.service_claims SET soft_expiry = now() - interval '1 second';
SELECT service_id, state FROM gridha.claims ORDER BY service_id;
SELECT * FROM gridha.acquire_claims(:B) ORDER BY service_id;
SELECT service_id, claimant = :B AS b_holds, epoch, state FROM gridha.claims ORDER BY service_id;
-- A's stale write on s2 is refused and changes nothing; B now polls it
SELECT pg_temp.err($$SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-000000000001', 's2', 'c1', 1, 'committed')$$);
SELECT batch_id, status FROM gridha.batches WHERE service_id = 's2';
SELECT service_id, batch_id, status, epoch FROM gridha.pending_batches(:B);
SELECT gridha.report_status(:B, 's2', 'c1', 2, 'committed');

-- hard expiry: taken even mid-submission; the batch is handed out again
UPDATE gridha.service_claims SET hard_expiry = now() - interval '1 second' WHERE service_id = 's1';
SELECT service_id, state FROM gridha.claims WHERE service_id = 's1';
SELECT * FROM gridha.acquire_claims(:B) ORDER BY service_id;
SELECT gridha.verify_batch(:A, 's1', 'b1', 1) AS a_may_submit;
SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batch(:B) WHERE service_id = 's1';
SELECT pg_temp.err($$SELECT gridha.report_submission('aaaaaaaa-0000-0000-0000-000000000001', 's1', 'b1', 1, 'accepted')$$);
SELECT batch_id, status, epoch, attempts FROM gridha.batches WHERE service_id = 's1' ORDER BY seq;
SELECT gridha.verify_batch(:B, 's1', 'b1', 2) AS b_may_submit;
SELECT gridha.report_submission(:B, 's1', 'b1', 2, 'accepted');
SELECT gridha.report_status(:B, 's1', 'b1', 2, 'committed');

-- A's renewal no longer covers what it lost
SELECT gridha.renew_claims(:A);

-- release: B hands everything back (nothing submitting), and is "stopped"
SELECT gridha.release_claims(:B);
SELECT service_id, claimant, epoch, state FROM gridha.claims ORDER BY service_id;
SELECT instance_id = :B AS is_b, claims_held, health FROM gridha.instance_health WHERE instance_id = :B;

-- a submitting batch keeps its claim through release
SELECT * FROM gridha.acquire_claims(:A) ORDER BY service_id;
SELECT service_id, batch_id, epoch, attempts FROM gridha.next_batch(:A) WHERE service_id = 's1';
SELECT gridha.release_claims(:A);
SELECT service_id, claimant = :A AS a_holds, state FROM gridha.claims ORDER BY service_id;

-- instance health: the decision tree, from the instance's lease
SELECT health FROM gridha.instance_health WHERE instance_id = :A;
UPDATE gridha.instances SET soft_expiry = now() - interval '1 second' WHERE instance_id = :A;
SELECT health AS soft_expired_mid_submission FROM gridha.instance_health WHERE instance_id = :A;
UPDATE gridha.instances SET hard_expiry = now() - interval '1 second' WHERE instance_id = :A;
SELECT health AS hard_expired FROM gridha.instance_health WHERE instance_id = :A;
SELECT gridha.report_submission(:A, 's1', 'b2', 3, 'accepted');
SELECT gridha.report_status(:A, 's1', 'b2', 3, 'committed');
SELECT gridha.renew_claims(:A);
UPDATE gridha.instances SET soft_expiry = now() - interval '1 second' WHERE instance_id = :A;
SELECT health AS soft_expired_idle FROM gridha.instance_health WHERE instance_id = :A;
SELECT gridha.renew_claims(:A);
SELECT health AS renewed FROM gridha.instance_health WHERE instance_id = :A;
SELECT gridha.release_claims(:A);

-- balance: 10 services, then a second and third live instance
SET gridha.balance_claims = on;
TRUNCATE gridha.batches, gridha.service_claims, gridha.instances;
SELECT count(gridha.enqueue('bal-' || g, 'x', NULL)) FROM generate_series(1, 10) g;
-- A alone takes everything
SELECT count(*) AS a_takes FROM gridha.acquire_claims(:A);
-- B arrives and renews (it is live now); nothing is free, but every service
-- has work: B takes its work share, 5 of A's 10 ready services
SELECT gridha.renew_claims(:A), gridha.renew_claims(:B);
SELECT count(*) AS b_takes FROM gridha.acquire_claims(:B);
-- A's next acquisition sees 2 live instances: share 5, A holds 5
SELECT count(*) AS a_takes FROM gridha.acquire_claims(:A);
SELECT claimant, count(*) FROM gridha.service_claims GROUP BY 1 ORDER BY 1;
SELECT count(*) AS b_takes FROM gridha.acquire_claims(:B);
SELECT claimant, count(*) FROM gridha.service_claims GROUP BY 1 ORDER BY 1;
-- C arrives: the work is 10 services over 3 (3, 3 and 4); A and B hand back
-- no service with work, and C takes 2 of A's and 1 of B's
SELECT gridha.renew_claims(:C);
SELECT count(*) FROM gridha.acquire_claims(:A);
SELECT count(*) FROM gridha.acquire_claims(:B);
SELECT count(*) AS c_takes FROM gridha.acquire_claims(:C);
SELECT claimant, count(*) FROM gridha.service_claims GROUP BY 1 ORDER BY 1;
-- released instances are "stopped" and no longer count as live: A takes all back
SELECT gridha.release_claims(:B), gridha.release_claims(:C);
SELECT count(*) AS a_takes_back FROM gridha.acquire_claims(:A);
-- a claim with a batch in flight is never released for balance
SELECT gridha.renew_claims(:A);
SELECT count(*) AS a_hands_out FROM gridha.next_batches(:A, 100);
SELECT gridha.renew_claims(:B), gridha.renew_claims(:C);
SELECT count(*) FROM gridha.acquire_claims(:A);
SELECT claimant, count(*) FROM gridha.service_claims GROUP BY 1 ORDER BY 1;
