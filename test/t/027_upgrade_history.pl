# test/t/027_upgrade_history.pl: an upgrade from 1.1 of a database with a
# long history (issue 28): GRIDHA_UPGRADE_HISTORY (2,000,000) final batches
# over 100 services, half of them finished 8 days ago (older than the
# default retention of 7 days), half a day ago, 10% invalid, some handed
# out twice; then 3 queued batches per service.
#
# ALTER EXTENSION gridha UPDATE (its time is printed, not judged), then:
# the version; no batch lost or changed (counts per status and a checksum
# of the seqs); the running totals that the queue views read start from the
# history (per service: committed, invalid and resubmitted as the batches
# say); the prune step's search goes through the index batches_created
# (entries read about the batches pruned, no seq scan); prune steps at the
# default retention remove exactly the final batches older than 7 days and
# nothing else; the hand-out goes on (each service's head).
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded. Run by `make test` (test/run.sh, part
# 027_upgrade_history) and by `make prove_installcheck` as any user but
# root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $db = 'gridha_upgrade_history';
my $history = $ENV{GRIDHA_UPGRADE_HISTORY} // 2000000;

my $node = gridha_node('history', qq{
log_statement = none
jit = off
});
$node->safe_psql('postgres', "CREATE DATABASE $db");

# query($sql): what psql printed and its errors
sub query
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	$node->psql($db, $sql, stdout => \$out, stderr => \$err);
	return $err eq '' ? $out : "$out$err";
}

# check_is($want, $what, $sql)
sub check_is
{
	my ($want, $what, $sql) = @_;
	is(query($sql), $want, $what);
	return;
}

my $t0 = time();
$node->safe_psql($db, qq{
CREATE EXTENSION gridha VERSION '1.1';
-- 100 services, restored as a dump restores them: their rows, then their
-- history with its seqs, statuses and times
INSERT INTO gridha.service_claims (service_id, head_seq, tail_seq, ready_at)
SELECT 'u' || i, NULL, $history / 100, NULL FROM generate_series(1, 100) AS i;
INSERT INTO gridha.batches (service_id, batch_id, seq, payload, status, created_at, epoch,
                            attempts, handed_out_at, submitted_at, finished_at)
SELECT 'u' || i, 'h' || k, k, '\\x00',
       CASE WHEN k % 10 = 0 THEN 'invalid' ELSE 'committed' END::gridha.batch_status,
       t, 1, 1 + (k % 7 = 0)::int, t, t, t
  FROM generate_series(1, 100) AS i
 CROSS JOIN generate_series(1, $history / 100) AS k
 CROSS JOIN LATERAL (SELECT now() - CASE WHEN k % 2 = 0 THEN interval '8 days' ELSE interval '12 hours' END
                              - k * interval '1 ms' AS t) x;
-- then 3 batches queued on each, through the enqueue trigger
INSERT INTO gridha.batches (service_id, batch_id, payload)
SELECT 'u' || i, 'q' || r, '\\x01' FROM generate_series(1, 3) AS r, generate_series(1, 100) AS i
 ORDER BY r, i;
CREATE TABLE before AS
SELECT status, count(*) AS n, sum(seq) AS seqs FROM gridha.batches GROUP BY status;
CREATE TABLE kept AS
SELECT service_id, count(*) FILTER (WHERE status = 'committed') AS committed,
       count(*) FILTER (WHERE status = 'invalid') AS invalid,
       sum(greatest(attempts - 1, 0)) AS resubmitted,
       count(*) FILTER (WHERE status IN ('committed', 'invalid')
                          AND finished_at < now() - interval '7 days') AS old
  FROM gridha.batches GROUP BY service_id;
});
note(sprintf('upgrade with history: %d final batches on 1.1 in %.0f s', $history, time() - $t0));

$t0 = time();
my $update = query('ALTER EXTENSION gridha UPDATE');
note(sprintf('upgrade with history: ALTER EXTENSION gridha UPDATE took %.1f s', time() - $t0));
diag($update) if $update ne '';

my ($current) = slurp_file(gridha_repo() . '/gridha.control') =~ /^default_version\s*=\s*'([^']*)'/m;
check_is($current, "upgrade with history: the database is on the current version ($current)",
	"SELECT extversion FROM pg_extension WHERE extname = 'gridha'");
check_is('0', 'upgrade with history: no batch lost or changed (counts per status, seqs)', q{
SELECT count(*) FROM (SELECT status, count(*) AS n, sum(seq) AS seqs FROM gridha.batches GROUP BY status
                      EXCEPT SELECT * FROM before) d});
check_is('100|0',
	"upgrade with history: each service's totals start from its history (committed, invalid, resubmitted)", q{
SELECT count(*), count(*) FILTER (WHERE (c.committed_total, c.invalid_total, c.resubmitted_total)
                                  IS DISTINCT FROM (k.committed, k.invalid, k.resubmitted))
  FROM gridha.service_claims c JOIN kept k USING (service_id)});
check_is('100|0', 'upgrade with history: service_queues shows the totals and 3 queued per service', q{
SELECT count(*), count(*) FILTER (WHERE (q.committed, q.invalid, q.queued) IS DISTINCT FROM (k.committed, k.invalid, 3))
  FROM gridha.service_queues q JOIN kept k USING (service_id)});

# prune steps at the default retention until none is left
$node->safe_psql($db, q{
CREATE PROCEDURE prune_all(INOUT total bigint DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    LOOP
        n := gridha.prune_batches();
        total := total + n;
        COMMIT;
        EXIT WHEN n = 0;
    END LOOP;
END
$$;
});
my $stats = q{
SELECT t.seq_scan, i.idx_tup_read
  FROM pg_stat_user_tables t, pg_stat_user_indexes i
 WHERE t.relid = 'gridha.batches'::regclass AND i.indexrelname = 'batches_created'};
my $s0 = query($stats);
$t0 = time();
my $pruned = query('CALL prune_all()');
my $took = time() - $t0;
sleep 1;    # the pruning backend has exited: its statistics are in
my $s1 = query($stats);

# the index entries the steps read: a step looks at twice its chunk at
# most and the next one walks on from the newest it deleted, so about
# twice the batches pruned (at most 3 times), never all the old ones at
# each step; and no seq scan
my @x = split /\|/, $s0;
my @y = split /\|/, $s1;
ok( $pruned =~ /^\d+$/
	  && @x == 2
	  && @y == 2
	  && $y[0] == $x[0]
	  && $y[1] - $x[1] >= $pruned
	  && $y[1] - $x[1] <= 3 * $pruned,
	"upgrade with history: prune steps walk batches_created in order (entries read before|after: $s0 -> $s1 for $pruned pruned), no seq scan"
);
note(sprintf('upgrade with history: %s pruned in %.1f s', $pruned, $took));
check_is('0|0|300',
	"upgrade with history: prune steps at the default retention removed exactly the final batches older than 7 days ($pruned)",
	qq{
SELECT (SELECT sum(old) FROM kept) - $pruned,
       (SELECT count(*) FROM gridha.batches WHERE status IN ('committed', 'invalid')
           AND finished_at < now() - interval '7 days'),
       (SELECT count(*) FROM gridha.batches WHERE status = 'queued')});
check_is('t', "upgrade with history: the hand-out goes on (services' heads, q1)",
	"SELECT count(*) > 0 AND bool_and(batch_id = 'q1') FROM gridha.next_batches(gridha.register_instance('after'), 1000)"
);

$node->stop;
done_testing();
