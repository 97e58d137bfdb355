# test/t/023_worker_churn.pl: workers terminated every few tenths of a
# second (pg_terminate_backend) while a producer enqueues to many services
# at once, for CHURN_SECONDS (30).
#
# What it shows: no server process ends by a signal, however a worker is
# caught (starting, handing out, with POSTs in flight, releasing its claims
# at stop, waiting for a row lock that a producer's statement holds); after
# the churn, every batch the producer enqueued is committed, and each
# service's batches reached the ledger in enqueue order with one in flight
# at a time. A stopping worker's release may lose a deadlock against the
# producer's statement (40P01 in the server log, the claims then expire):
# that is allowed, a crash is not. (PostgreSQL 16beta2 crashed here: see
# the README, "Supported PostgreSQL versions".)
#
# Words: "churn" is the terminating and topping up of workers (a dynamic
# worker is started whenever fewer than 4 run; 3 static ones come back by
# themselves), for CHURN_SECONDS and until CHURN_SECONDS * 2 terminations;
# "producer" is one psql statement every 0.2 s enqueueing 100 batches over
# 200 services, in an order that is not the services', while the churn
# lasts.
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded and three workers serving its database,
# with the test ledger (5 ms latency, commits 0.1 s after accepting). Run
# by `make test` (test/run.sh, part 023_worker_churn) and by
# `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $db = 'gridha_churn_test';
my $churn_seconds = $ENV{CHURN_SECONDS} // 30;
my $work = PostgreSQL::Test::Utils::tempdir;

my $node = gridha_node('churn');

my $ledger = start_ledger($work, '--latency', '0.005', '--commit-delay', '0.1',
	'--max-lifetime', $churn_seconds + 300);
my $led = $ledger->{url};
worker_database($node, $db, qq{
UPDATE gridha.targets SET submit_url = '$led/batches/{service_id}/{batch_id}',
                          status_url = '$led/batch_statuses?id={batch_ids}'
 WHERE target = 'default';
});

restart_with_workers($node, $db, 3, q{
gridha.naptime = '50ms'
gridha.monitor_interval = '200ms'
gridha.renew_interval = '1s'
gridha.soft_expiry = '5s'
gridha.hard_expiry = '10s'
});

# query($sql): what psql printed, '' after an error
sub query
{
	return psql_value($node, $db, $_[0]);
}

sub workers_up
{
	my $n = workers_registered($node, $db);
	return $n ne '' && $n >= 3;
}
ok(wait_until(30, \&workers_up), "churn: three workers serve $db");

my $mark = log_size($node->logfile);

# the producer, until the churn ends: batch ids are unique (the ledger
# takes them to be)
my $done = "$work/churn.done";
my $cap = $churn_seconds * 4 + 30;
my $producer = IPC::Run::start(
	[
		'bash', '-c', q{
			cap=$((SECONDS + $3))
			n=0
			while [ ! -e "$2" ] && [ "$SECONDS" -lt "$cap" ]; do
				n=$((n + 1))
				psql -X -q -d "$1" -c "SELECT count(gridha.enqueue('churn-' || (i * 7 % 200), 'b' || $n || '.' || i, '\x00'))
				            FROM generate_series(1, 100) AS i" >/dev/null 2>&1
				sleep 0.2
			done
		}, 'producer', $node->connstr($db), $done, $cap
	],
	'<', \undef, '>', "$work/producer.out", '2>&1');

# the churn: for CHURN_SECONDS and until workers were terminated twice a
# second's worth (CHURN_SECONDS * 2 times), at most 4 times as long. The
# number of terminations, not the time they take, is what the test
# promises: on a loaded machine each psql call of the loop takes longer.
my $start = time();
my $end = $start + $churn_seconds;
my $stop = $start + $churn_seconds * 4;
my $want = $churn_seconds * 2;
my $kills = 0;
while (time() < $end || ($kills < $want && time() < $stop))
{
	$kills++
	  if query(q{SELECT pg_terminate_backend(pid) FROM gridha.workers
	             WHERE pid IS NOT NULL ORDER BY random() LIMIT 1}) eq 't';
	query("SELECT gridha.start_worker('churn-' || $kills)
	        WHERE (SELECT count(*) FROM gridha.workers) < 4");
	usleep((int(rand(3)) + 1) * 100_000);
}
append_to_file($done, '');
$producer->finish;

my $took = int(time() - $start);
ok($kills >= $want,
	"churn: workers terminated $kills times in $took s (at least $want, over at least ${churn_seconds} s)");

my @log = split /\n/, log_since($node->logfile, $mark);
my @crash = crash_lines($node->logfile, $mark);
is(scalar(@crash), 0, 'churn: no server process ended by a signal (' . scalar(@crash) . ')')
  or diag(join("\n", @crash[ 0 .. ($#crash < 5 ? $#crash : 5) ]));
diag('deadlocks logged: ' . scalar(grep { /deadlock detected/ } @log));

wait_until(20, \&workers_up);
ok( wait_until(90, sub { query("SELECT count(*) FROM gridha.batches WHERE status <> 'committed'") eq '0' }),
	'churn: every batch enqueued (' . query('SELECT count(*) FROM gridha.batches') . ') is committed afterwards');
diag(query('SELECT status, count(*) FROM gridha.batches GROUP BY 1 ORDER BY 1'));

# each service's batches at the ledger in enqueue order, one in flight
# (test/dlt/check_log.py)
my $expected = "$work/expected.tsv";
append_to_file($expected, $node->safe_psql($db,
	'SELECT service_id, batch_id FROM gridha.batches ORDER BY service_id, seq',
	extra_params => [ '-F', "\t" ]) . "\n");
my ($in_order, $check) = ledger_in_order($ledger, $expected);
ok($in_order, "churn: each service's batches reached the ledger in enqueue order, one in flight at a time")
  or diag($check =~ /(violations.*?)(?:\n\n|\z)/s ? $1 : $check);

$node->stop;
done_testing();
