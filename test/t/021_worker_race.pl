# test/t/021_worker_race.pl: a background worker's hand-out of a service
# enqueued for the first time while the worker's hand-out statement runs.
#
# The race: an enqueue transaction that creates a new service begins before
# the worker's hand-out statement and commits while that statement runs.
# next_batch, inside the statement, then claims and hands out the new
# service with snapshots of its own; whatever the worker reads about the
# batch afterwards must see that claim, or the batch is left submitting
# under the worker's claim and its service waits for as long as the worker
# lives.
#
# How the race is made certain: one worker with gridha.balance_claims off
# (it claims every free service), a trigger that holds the worker's claim
# renewal (the UPDATE of gridha.instances inside next_batch) for 1.5 s, and
# an enqueue transaction opened before and committed while the worker is
# held. The target is a submit_function without a status source, so an
# accepted batch is committed at once; no ledger is needed.
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded. Run by `make test` (test/run.sh, part
# 021_worker_race) and by `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $db = 'gridha_race_test';

my $node = gridha_node('race');

# workers call target functions only as a role that is not a superuser
worker_database($node, $db, q{
CREATE FUNCTION race_submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT 'accepted' $$;
UPDATE gridha.targets SET submit_function = 'race_submit(text,text,bytea,bigint)'
 WHERE target = 'default';
SELECT gridha.enqueue('warm', 'warm-b1', '\x00');
});

# one worker serving the database, renewing and polling often
restart_with_workers($node, $db, 1, q{
gridha.balance_claims = off
gridha.renew_interval = '1s'
gridha.naptime = '100ms'
gridha.monitor_interval = '100ms'
});

sub committed
{
	my ($batch_id) = @_;
	return $node->safe_psql($db,
		"SELECT status FROM gridha.batches WHERE batch_id = '$batch_id'") eq 'committed';
}

ok(wait_until(30, sub { committed('warm-b1') }), 'race: the worker runs (warm-b1 committed)');

# The enqueue transaction begins first, then the trigger holds the renewal.
my ($in, $out) = ('', '');
my $enqueue = IPC::Run::start(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($db) ],
	'<', \$in, '>', \$out, '2>&1');
$in .= "BEGIN; SELECT gridha.enqueue('race1', 'race1-b1', '\\x01');\n";
$enqueue->pump_nb;
ok( wait_until(
		10,
		sub {
			$enqueue->pump_nb;
			$node->safe_psql($db, qq{
				SELECT count(*) FROM pg_stat_activity
				 WHERE datname = '$db' AND state = 'idle in transaction'}) >= 1;
		}),
	'race: the enqueue of the new service race1 is open, not committed');

$node->safe_psql($db, q{
CREATE FUNCTION race_hold() RETURNS trigger LANGUAGE plpgsql SET search_path = public AS $$
BEGIN
    PERFORM pg_sleep(1.5);
    RETURN NEW;
END
$$;
CREATE TRIGGER race_hold BEFORE UPDATE ON gridha.instances
    FOR EACH ROW WHEN (NEW.kind = 'worker') EXECUTE FUNCTION race_hold();
});
ok( wait_until(
		10,
		sub {
			$node->safe_psql($db, q{
				SELECT count(*) FROM pg_stat_activity
				 WHERE backend_type = 'gridha worker' AND wait_event = 'PgSleep'}) >= 1;
		}),
	'race: the worker is held inside its hand-out statement (renewal)');

$in .= "COMMIT;\n";
$enqueue->finish or diag("the enqueue session: $out");
$node->safe_psql($db, 'DROP TRIGGER race_hold ON gridha.instances');

ok(wait_until(15, sub { committed('race1-b1') }),
	'race: race1-b1, claimed and handed out inside the statement that began before its enqueue committed, is committed'
);
diag($node->safe_psql($db,
	"SELECT batch_id, status, attempts FROM gridha.batches WHERE service_id = 'race1'"));

$node->stop;
done_testing();
