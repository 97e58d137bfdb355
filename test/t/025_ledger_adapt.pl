# test/t/025_ledger_adapt.pl: background workers that adapt to the ledger
# they talk to (issue 29; src/submit.c, src/dlt_http.c, src/slots.c,
# src/targets.c), against the test ledger (test/dlt/ledger.py).
#
# What it shows, step by step, in the order the steps run:
#
#   up        a workload of 300 services x 100 batches against a ledger
#             that answers in 100 ms: the limit for the target grows from
#             its start (4) to at least 8
#   503       a 6 s window of 503 answers: the limit falls to 2 or less,
#             the overload signals are counted; after the window it grows
#             back to at least 8. Each 503 carries Retry-After: 1, so the
#             halvings come at least a second apart: from 16 or more, 3 or
#             more of them (a 4 s window was once too short on a loaded
#             machine)
#   drop      a 4 s window in which the ledger resets every connection
#             unanswered: the same
#   quiet     a target whose status URL points at a port nobody listens
#             on, for 20 s (the worker polls every 100 ms): every failure
#             is counted, the first is logged, and no more than 2 lines
#             about the target are written (a summary with the count comes
#             at most once a minute)
#   sigterm   the ledger holds every status poll unanswered; with a poll
#             held, SIGTERM to the worker: it exits within 1 s and logs
#             that it released its claims
#
# Words: "the limit" is the worker's in-flight limit for a target, read
# through gridha_worker_limits(), the C function behind the view operators
# use, declared here as adapt_limits(); "overload signals" are its failures
# count. Every wait is a bounded poll, never a sleep standing in for an
# assertion.
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded and one worker serving its database
# (gridha_adapt_test) as a role with only gridha_submitter, with
# gridha.worker_inflight = 32 (the ceiling) and a 10 s
# gridha.submit_timeout (so a request that blocked the worker would block
# it for 10 s), against the test ledger (100 ms latency, commits 0.1 s
# after accepting). Run by `make test` (test/run.sh, part 025_ledger_adapt)
# and by `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use IO::Socket::INET;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More tests => 13;
use Time::HiRes qw(time usleep);

my $db = 'gridha_adapt_test';
my $work = PostgreSQL::Test::Utils::tempdir;

my $node = gridha_node('adapt');

my $ledger = start_ledger($work, '--latency', '0.1', '--commit-delay', '0.1', '--max-lifetime', '900');
my $led = $ledger->{url};
worker_database($node, $db, qq{
UPDATE gridha.targets
   SET submit_url = '$led/batches/{service_id}/{batch_id}',
       status_url = '$led/batch_statuses?id={batch_ids}'
 WHERE target = 'default';

-- The worker's limits per target (gridha_worker_limits in src/slots.c).
CREATE FUNCTION adapt_limits(OUT instance_id uuid, OUT target text, OUT in_flight integer,
                             OUT inflight_limit integer, OUT failures bigint)
RETURNS SETOF record LANGUAGE c AS '\$libdir/gridha', 'gridha_worker_limits';
});

restart_with_workers($node, $db, 1, q{
gridha.naptime = '200ms'
gridha.monitor_interval = '100ms'
gridha.submit_timeout = '10s'
gridha.worker_inflight = 32
gridha.soft_expiry = '6s'
gridha.hard_expiry = '20s'
gridha.renew_interval = '1s'
});

# query($sql): what psql printed, '' after an error
sub query
{
	return psql_value($node, $db, $_[0]);
}

wait_for_workers($node, $db, 1, 30)
  or die 'the worker did not register within 30 s';

# limit(): the worker's current limit for target default (0 when none shown)
sub limit
{
	return query("SELECT coalesce(max(inflight_limit), 0) FROM adapt_limits() WHERE target = 'default'");
}

# failures(): the worker's overload signals for target default so far
sub failures
{
	return query("SELECT coalesce(max(failures), 0) FROM adapt_limits() WHERE target = 'default'");
}

sub limit_at_least
{
	my $l = limit();
	return $l =~ /^\d+$/ && $l >= $_[0];
}

sub limit_at_most
{
	my $l = limit();
	return $l =~ /^\d+$/ && $l > 0 && $l <= $_[0];
}

# ---------------------------------------------------------------------------
# up: the limit grows with the work

$node->safe_psql($db, q{
INSERT INTO gridha.batches (service_id, batch_id, payload)
SELECT 'a' || i, 'a' || r || '.' || i, '\x00'::bytea
  FROM generate_series(1, 100) AS r, generate_series(1, 300) AS i
 ORDER BY r, i;
});

ok(wait_until(60, sub { limit_at_least(8) }),
	"up: the worker's limit for the target grows from 4 to at least 8 under load (now " . limit() . ')');
diag(query('SELECT target, in_flight, inflight_limit, failures FROM adapt_limits()'));

# ---------------------------------------------------------------------------
# 503 and drop windows: the limit goes down, then back up

# window($name, $control, $seconds): opens the ledger's window ($seconds
# long), checks the limit falls to 2 or less while it is open, that
# overload signals were counted, and that it grows back to 8 or more after
# it (three tests).
sub window
{
	my ($name, $control, $seconds) = @_;
	my $f0 = failures();
	my $l0 = limit();
	ledger_control($ledger, $control);
	ok(wait_until($seconds, sub { limit_at_most(2) }),
		"$name: the limit falls to 2 or less while the window is open (from $l0; now " . limit() . ')');
	my $f1 = failures();
	ok($f0 =~ /^\d+$/ && $f1 =~ /^\d+$/ && $f1 > $f0,
		"$name: the overload signals are counted ($f0 before, $f1 after)");
	ok(wait_until(40, sub { limit_at_least(8) }),
		"$name: after the window the limit grows back to at least 8 (now " . limit() . ')');
	return;
}

window('503', '{"fail_503_for": 6}', 6);
window('drop', '{"drop_for": 4}', 4);
my $dropped = ledger_stat($ledger, 'dropped');
ok($dropped > 0, "drop: the ledger reset connections ($dropped requests dropped)");

# ---------------------------------------------------------------------------
# quiet: an unreachable status URL for 20 s

# a port nobody listens on: bound by the OS, then closed
my $sock = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp')
  or die "no socket: $!";
my $dead_port = $sock->sockport;
close $sock;
my $log = $node->logfile;
my $mark = log_size($log);
$node->safe_psql($db, qq{
INSERT INTO gridha.targets (target, submit_url, status_url)
VALUES ('quiet', '$led/batches/{service_id}/{batch_id}',
        'http://127.0.0.1:$dead_port/batch_statuses?id={batch_ids}');
SELECT gridha.enqueue('q' || i, 'q' || i || '.1', '\\x00'::bytea, 'quiet')
  FROM generate_series(1, 20) AS i;
});
sleep 20;
my $first = log_lines_matching($log, $mark, qr/\Qtarget "quiet": status URL unreachable: connect\E/);
my $lines = log_lines_matching($log, $mark, qr/\Qtarget "quiet"\E/);
my $polls = query("SELECT coalesce(max(failures), 0) FROM adapt_limits() WHERE target = 'quiet'");
ok($polls =~ /^\d+$/ && $polls >= 20,
	"quiet: the worker kept polling the unreachable status URL, and counted each failure ($polls)");
ok($first == 1, "quiet: the first failure of the unreachable status URL is logged ($first line)");
ok($lines <= 2, "quiet: at most 2 lines about the target in 20 s of polls every 100 ms ($lines)");
diag(join("\n", grep { defined } (grep { /\Qtarget "quiet"\E/ } split /\n/, log_since($log, $mark))[ 0 .. 4 ]));

# ---------------------------------------------------------------------------
# sigterm: a status poll held by the ledger does not delay the stop

my $hung0 = ledger_stat($ledger, 'hung');
ledger_control($ledger, '{"hang_status_for": 120}');
$node->safe_psql($db, qq{
UPDATE gridha.targets SET status_url = '$led/batch_statuses?id={batch_ids}' WHERE target = 'default'});
my $held = wait_until(20, sub { ledger_stat($ledger, 'hung') > $hung0 });
my $pid = query('SELECT pid FROM gridha.workers');
$pid = 0 unless $pid =~ /^[1-9]\d*$/;
$mark = log_size($log);
my $t0 = time();
if ($pid)
{
	kill 'TERM', $pid;
	usleep(20_000) while kill(0, $pid) && time() - $t0 < 15;
}
my $ms = int((time() - $t0) * 1000);
ok($held && $pid && !kill(0, $pid) && $ms <= 1000,
	"sigterm: with a status poll held by the ledger, the worker exits within 1 s of SIGTERM (${ms} ms)");
ok(wait_until(5, sub { log_lines_matching($log, $mark, qr/stopped and released its claims/) >= 1 }),
	'sigterm: the worker released its claims on the way out');
ledger_control($ledger, '{"hang_status_for": 0}');

$node->stop;
