# test/t/017_pitr.pl: a physical backup and a point-in-time recovery never
# give an epoch again that the lost history gave.
#
# A cluster archiving its WAL: instance A claims 5 services (epoch 1), a
# base backup is taken, a batch commits and a restore point is named; then,
# on the history the recovery will lose, A's lease runs out and B takes
# every service at epoch 2 and hands a batch out under it. The backup is
# recovered to the restore point and promoted (a new timeline). There the
# claims are A's at epoch 1 again; B's write from the lost history is
# refused (that batch was never handed out on this history, RG023); and the
# next takeover gives epochs above every epoch an earlier timeline can have
# given (gridha starts each timeline's epochs at (timeline - 1) << 40), so
# A's own late write under epoch 1 is refused too (RG001).
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster): its
# archiving, backup, restore and promotion are the framework's own. Run by
# `make test` (test/run.sh, part 017_pitr) and by `make prove_installcheck`
# as any user but root.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $A = 'aaaaaaaa-0000-0000-0000-00000000000a';
my $B = 'bbbbbbbb-0000-0000-0000-00000000000b';
my $C = 'cccccccc-0000-0000-0000-00000000000c';

# sqlstate($node, $sql): the SQLSTATE the statement raises, or "ok".
sub sqlstate
{
	my ($node, $sql) = @_;
	my ($stdout, $stderr);
	$node->psql('postgres', $sql, stdout => \$stdout, stderr => \$stderr,
		extra_params => [ '-v', 'VERBOSITY=sqlstate' ]);
	return 'ok' if $stderr eq '';
	return $1 if $stderr =~ /ERROR:\s+([0-9A-Z]{5})/;
	return $stderr;
}

# --- the primary, archiving ------------------------------------------------
my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(has_archiving => 1, allows_streaming => 1);
$primary->start;

$primary->safe_psql('postgres', qq{
CREATE EXTENSION gridha;
SET gridha.balance_claims = off;
SELECT gridha.enqueue('p' || s, 'p' || s || '-b' || b, '\\x00')
  FROM generate_series(1, 5) s, generate_series(1, 3) b;
SELECT count(*) FROM gridha.acquire_claims('$A');
});
is($primary->safe_psql('postgres', qq{
	SELECT count(*) || '/' || max(epoch) FROM gridha.service_claims WHERE claimant = '$A'}),
	'5/1', 'primary: A holds the 5 services at epoch 1');

$primary->backup('before');
ok(-f $primary->backup_dir . '/before/backup_label', 'a base backup of the primary');

# After the backup: a batch committed under epoch 1, then the restore point.
$primary->safe_psql('postgres', qq{
SET gridha.balance_claims = off;
SELECT gridha.next_batch('$A');
SELECT gridha.report_status('$A', service_id, batch_id, epoch, 'committed')
  FROM gridha.batches WHERE status = 'submitting';
SELECT pg_create_restore_point('gridha_before_takeover');
});

# The history the recovery loses: A's lease runs out, B takes over at
# epoch 2 and hands a batch out under it.
$primary->safe_psql('postgres', qq{
SET gridha.balance_claims = off;
UPDATE gridha.instances SET soft_expiry = now() - interval '1 hour', hard_expiry = now() - interval '1 minute'
 WHERE instance_id = '$A';
SELECT count(*) FROM gridha.acquire_claims('$B');
SELECT gridha.next_batch('$B');
});
my $lost = $primary->safe_psql('postgres', qq{
	SELECT service_id || ' ' || batch_id || ' ' || epoch FROM gridha.batches
	 WHERE status = 'submitting' AND instance_id = '$B'});
my $lost_max = $primary->safe_psql('postgres', 'SELECT max(epoch) FROM gridha.service_claims');
ok($lost_max eq '2' && $lost ne '',
	"lost history: B took every service at epoch 2 and handed out a batch ($lost)");

# Everything archived, then the primary is gone.
my $segment = $primary->safe_psql('postgres', 'SELECT pg_walfile_name(pg_switch_wal())');
ok($primary->poll_query_until('postgres',
		qq{SELECT last_archived_wal >= '$segment' FROM pg_stat_archiver}),
	"the WAL holding the lost history is archived ($segment)");
$primary->stop('immediate');

# --- point-in-time recovery to the restore point ----------------------------
my $recovered = PostgreSQL::Test::Cluster->new('recovered');
$recovered->init_from_backup($primary, 'before', has_restoring => 1);
$recovered->append_conf('postgresql.conf', qq{
recovery_target_name = 'gridha_before_takeover'
recovery_target_action = 'promote'
});
$recovered->start;
ok($recovered->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'recovery reached the restore point and promoted');
my $tli = $recovered->safe_psql('postgres', q{
	SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int});
cmp_ok($tli, '>=', 2, "the recovered cluster writes a new timeline ($tli)");

is($recovered->safe_psql('postgres', qq{
	SELECT (SELECT count(*) || '/' || max(epoch) FROM gridha.service_claims WHERE claimant = '$A')
	       || ' ' || (SELECT status FROM gridha.batches WHERE service_id = 'p1' AND batch_id = 'p1-b1')}),
	'5/1 committed',
	'recovered: the claims are A\'s at epoch 1 and the batch committed before the restore point is committed');
is($recovered->safe_psql('postgres', 'SELECT count(*) FROM gridha.batches'), '15',
	'recovered: all 15 batches are there');

my ($lost_svc, $lost_batch, $lost_epoch) = split / /, $lost;
is(sqlstate($recovered, qq{
	SELECT gridha.report_submission('$B', '$lost_svc', '$lost_batch', $lost_epoch, 'accepted')}),
	'RG023',
	'B\'s write under epoch 2 from the lost history is refused: on this history that batch was never handed out (RG023)');

# A takeover on the new timeline: epochs start above every earlier
# timeline's. (C's claims are judged by its lease alone: its session ends
# with psql.)
$recovered->safe_psql('postgres', qq{
SET gridha.balance_claims = off;
SET gridha.session_liveness = off;
UPDATE gridha.instances SET soft_expiry = now() - interval '1 hour', hard_expiry = now() - interval '1 minute'
 WHERE instance_id = '$A';
SELECT count(*) FROM gridha.acquire_claims('$C');
});
my $base = ($tli - 1) << 40;
is($recovered->safe_psql('postgres', qq{
	SELECT count(*) FROM gridha.service_claims WHERE claimant = '$C' AND epoch >= $base}),
	'5',
	"a takeover on timeline $tli gives epochs from $base on, above every epoch an earlier timeline can give (the lost history's reached $lost_max)");

ok(sqlstate($recovered, "SELECT gridha.next_batch('$B')") eq 'ok'
	  && $recovered->safe_psql('postgres', qq{
		SELECT count(*) FROM gridha.service_claims WHERE claimant = '$B' AND epoch < $base}) eq '0',
	"B, coming back, holds none of its claims of the lost history: whatever it holds (its work share) it took on timeline $tli, at an epoch from $base on");

is(sqlstate($recovered, qq{SELECT gridha.report_status('$A', 'p1', 'p1-b1', 1, 'committed')}),
	'RG001', 'A\'s late write under epoch 1, on the batch it handed out, is refused after the takeover (RG001)');

$recovered->stop;
done_testing();
