# test/t/001_soak.pl: the concurrency soak.
#
# 8 pgbench clients, each its own gridha instance, drain 60 services x 40
# batches through the contract API (next_batch -> report_submission ->
# report_status), logging every hand-out and commit with a global id
# (test/soak/cycle.sql, into test/soak/setup.sql's soak_log). Then
# test/soak/check.sql's seven checks, one test each, prove: every batch
# committed, each handed out once, per-service order, one in flight per
# service, attempts = 1, reports accepted, the work shared. One more test
# before them: the pgbench clients ran without errors.
#
# Words: a "burst" is one pgbench run of at most SOAK_BURST seconds; the
# bursts follow each other until every batch is committed or SOAK_SECONDS
# have passed. pgbench -T ends each client at a script boundary, so no
# hand-out is left unreported between bursts, and the instance ids (from
# :client_id) carry over. Each burst connects its clients anew, so the
# database runs with gridha.session_liveness off, as docs/concepts.md asks
# of an instance whose calls come from more than one session (with it on,
# another instance may judge a client gone between its old session's end
# and its new one's first call and take its claims over while it works:
# safe, its next write is refused with RG001, but the batch is handed out
# twice, which check.sql refuses). Claims are short (renew 1 s, soft 5 s,
# hard 20 s) so that balancing happens within the run.
#
# Knobs (environment): SOAK_SERVICES (60), SOAK_BATCHES (40), SOAK_CLIENTS
# (8), SOAK_JOBS (2), SOAK_SECONDS (60, the cap on pgbench time),
# SOAK_BURST (3).
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded and no background workers; the pgbench
# clients connect as the cluster's superuser, as the clients of 040 and 041
# do. Run by `make test` (test/run.sh, part 001_soak) and by
# `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More tests => 8;

my $services = $ENV{SOAK_SERVICES} // 60;
my $batches = $ENV{SOAK_BATCHES} // 40;
my $clients = $ENV{SOAK_CLIENTS} // 8;
my $jobs = $ENV{SOAK_JOBS} // 2;
my $max_seconds = $ENV{SOAK_SECONDS} // 60;
my $burst_cap = $ENV{SOAK_BURST} // 3;
my $db = 'gridha_soak';
my $soak_dir = gridha_repo() . '/test/soak';
my $work = PostgreSQL::Test::Utils::tempdir;

my $max_connections = $clients + 20 > 100 ? $clients + 20 : 100;
my $node = gridha_node('soak', qq{
max_connections = $max_connections
});

# setup: a fresh database with the extension, short claim timings, and the
# queue. The settings are the database's: every new session takes them,
# pgbench's included.
$node->safe_psql('postgres', "CREATE DATABASE $db");
$node->safe_psql($db, 'CREATE EXTENSION gridha');
$node->safe_psql('postgres', qq{
ALTER DATABASE $db SET gridha.renew_interval = '1s';
ALTER DATABASE $db SET gridha.soft_expiry = '5s';
ALTER DATABASE $db SET gridha.hard_expiry = '20s';
ALTER DATABASE $db SET gridha.session_liveness = off;
});
my $enqueued = $node->safe_psql($db, slurp_file("$soak_dir/setup.sql"),
	extra_params => [ '-v', "services=$services", '-v', "batches=$batches" ]);
$enqueued = (split /\n/, $enqueued)[-1] // '';
note("soak: enqueued $enqueued batches ($services services x $batches)");

# remaining(): batches not committed yet
sub remaining
{
	return $node->safe_psql($db,
		"SELECT count(*) FROM gridha.batches WHERE status <> 'committed'");
}

# drive: pgbench bursts until every batch is committed or the time cap is
# reached; a burst that fails (pgbench's exit, or a client that aborted on
# an error) ends the driving, its errors shown.
my $start = time();
my $driver_ok = 1;
my $driver_errors = '';
my $burst = 0;
while (1)
{
	my $left = remaining();
	last if $left == 0;
	my $t = $max_seconds - (time() - $start);
	if ($t <= 0)
	{
		note("soak: time cap of ${max_seconds}s reached with $left batches left");
		last;
	}
	$t = $burst_cap if $t > $burst_cap;
	$burst++;
	my $out = '';
	my $ran = IPC::Run::run(
		[
			'pgbench', '-n', '-M', 'extended', '-c', $clients, '-j', $jobs,
			'-T', $t, '-f', "$soak_dir/cycle.sql", $node->connstr($db)
		],
		'<', \undef, '>', \$out, '2>&1');
	append_to_file("$work/pgbench.$burst.log", $out);
	if (!$ran || $out =~ /aborted|error/)
	{
		$driver_ok = 0;
		my $rc = $? >> 8;
		my @errors = grep { /error|abort|failed|FATAL/i } split /\n/, $out;
		splice(@errors, 20) if @errors > 20;
		$driver_errors = join("\n", "pgbench burst $burst failed (exit $rc):", @errors);
		last;
	}
	my ($cycles) = $out =~ /number of transactions actually processed: (\d+)/;
	note("soak: burst $burst ($t s): " . ($cycles // '?') . ' cycles, '
		  . remaining() . ' batches left');
}
note('soak: drove for ' . (time() - $start) . 's');

ok($driver_ok, 'pgbench clients ran without errors') or diag($driver_errors);

# check.sql's seven checks, in its order: each prints "ok - ..." or
# "not ok - ..." with the numbers behind it, and is one test here, named
# by its line; a check that did not print counts as failed.
my @checks = (
	'every enqueued batch reached committed',
	'each batch was handed out exactly once',
	'per service, hand-out order equals seq order',
	'per service, a batch is handed out only after the previous one committed',
	'every committed batch has attempts = 1',
	'report_submission gave pending and report_status gave committed for every batch',
	'more than one instance did work');
my ($out, $err) = ('', '');
$node->psql($db, slurp_file("$soak_dir/check.sql"),
	stdout => \$out, stderr => \$err,
	on_error_stop => 1,
	extra_params => [ '-v', "services=$services", '-v', "batches=$batches" ]);
my @lines = split /\n/, $out;
foreach my $check (@checks)
{
	my ($line) = grep { /^(not )?ok - \Q$check\E/ } @lines;
	if (!defined $line)
	{
		fail("$check (check.sql did not print it)");
		diag($err) if $err ne '';
		next;
	}
	(my $name = $line) =~ s/^(not )?ok - //;
	ok($line =~ /^ok - /, $name);
}

$node->stop;
