# test/t/030_client.pl: the reference client (client/gridha-client) and
# the HTTP module it shares with the background worker (src/dlt_http.c).
#
#   1. client/test_dlt_http against client/test_http_fixture.py: URL
#      templates, encoding, both status dialects, malformed bodies, outcome
#      per HTTP status, timeouts, refused connections (one test for each of
#      its TAP lines, named "dlt_http: ..." after it)
#   2. three clients (one with --verify, one registering its own instance)
#      against the test ledger (test/dlt/ledger.py): 10 services x 10
#      batches, two services on a Splinter-dialect target; all committed,
#      per-service arrival order = enqueue order, no duplicate POST, every
#      client handed something out
#   3. a stale write: while a client's POST is held by the ledger, the
#      claim's epoch moves on behind its back; the client logs the RG001
#      refusal and carries on
#   4. SIGTERM in the middle of a POST: the batch in hand is reported, the
#      claims are released, exit status 0
#   5. a server restart (the framework's stop and start): the clients
#      reconnect with the same instance ids and carry on
#   6. a hand-out whose answer was lost: the client finds the batch it does
#      not have in hand and submits it
#   7. a target without a status source: accepted means committed
#   8. the API it speaks: the typed report_submission and batched
#      report_statuses of rows (pg_stat_user_functions), never their 1.1
#      forms; against a database whose gridha SQL is still 1.1, which the
#      library refuses (RG022), it stops saying so with a failing exit
#      status (with --instance-id too), and once the database is updated
#      it commits
#
# Words: "victim" is the client a step signals; the clients log in as
# gridha_test_submitter, a member of gridha_submitter and nothing more, as
# the README tells users to run them; every wait is a bounded poll, never a
# sleep standing in for an assertion.
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded (no background workers), with the test
# ledger (commits 0.2 s after accepting). Needs client/gridha-client and
# client/test_dlt_http built (make). Run by `make test` (test/run.sh, part
# 030_client) and by `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use IPC::Run;
use JSON::PP;
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More tests => 260;
use Time::HiRes qw(time usleep);

my $db = 'gridha_client_test';
my $db11 = "${db}_11";
my $client = gridha_repo() . '/client/gridha-client';
my $unit = gridha_repo() . '/client/test_dlt_http';
my $work = PostgreSQL::Test::Utils::tempdir;

BAIL_OUT('client/gridha-client and client/test_dlt_http are built (run make)')
  unless -x $client && -x $unit;

# --- the processes this test starts ----------------------------------------

my %exited;    # pid => exit status, once reaped
my @pids;

# spawn(\%env, $out, $err, $append, @cmd): @cmd in the background with
# %env added to the environment, stdout to $out, stderr to $err (appended
# to when $append); its pid
sub spawn
{
	my ($env, $out, $err, $append, @cmd) = @_;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		# the child never returns into the test (its END blocks are the
		# parent's)
		$ENV{$_} = $env->{$_} foreach keys %$env;
		open(STDIN, '<', '/dev/null')
		  && open(STDOUT, '>', $out)
		  && open(STDERR, $append ? '>>' : '>', $err)
		  && exec(@cmd);
		POSIX::_exit(127);
	}
	push @pids, $pid;
	return $pid;
}

# alive($pid): the process has not ended (reaping it when it has)
sub alive
{
	my ($pid) = @_;
	return 0 if exists $exited{$pid};
	my $r = waitpid($pid, WNOHANG);
	return 1 if $r == 0;
	$exited{$pid} = $r == $pid ? $? : -1;
	return 0;
}

# reap($pid, $seconds): wait up to $seconds for the process to end; its exit
# code, or undef when it still runs
sub reap
{
	my ($pid, $seconds) = @_;
	wait_until($seconds, sub { !alive($pid) }) or return undef;
	my $st = $exited{$pid};
	return $st == -1 ? -1 : ($st & 127 ? 128 + ($st & 127) : $st >> 8);
}

# stop_all(): CONT and TERM every process still running, then reap them
sub stop_all
{
	foreach my $p (@pids)
	{
		next unless alive($p);
		kill 'CONT', $p;
		kill 'TERM', $p;
	}
	foreach my $p (@pids)
	{
		next unless alive($p);
		reap($p, 30) // do { kill 'KILL', $p; waitpid($p, 0); };
	}
	return;
}

END
{
	local $?;
	stop_all();
}

# --- helpers ----------------------------------------------------------------

my $node = gridha_node('client');

# query($sql, $dbname): what psql printed, '' after an error
sub query
{
	my ($sql, $dbname, %opt) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql($dbname // $db, $sql,
		stdout => \$out,
		stderr => \$err,
		on_error_stop => 1,
		$opt{user} ? (extra_params => [ '-U', $opt{user} ]) : ());
	return $rc == 0 ? $out : '';
}

# lines($file): the file's lines ('' when missing)
sub lines
{
	my ($file) = @_;
	return () unless -f $file;
	return split /\n/, slurp_file($file);
}

# logged($file, $regex): a line of the file matches
sub logged
{
	my ($file, $re) = @_;
	return scalar(grep { /$re/ } lines($file)) > 0;
}

# count_events($log, $event): lines of a client log with this event
sub count_events
{
	my ($file, $event) = @_;
	return scalar(grep { index($_, "\"event\":\"$event\"") >= 0 } lines($file));
}

# instance_of($log): the instance id a client logged at its start
sub instance_of
{
	foreach my $l (lines($_[0]))
	{
		my $e = eval { decode_json($l) } or next;
		return $e->{instance} if ($e->{event} // '') eq 'start';
	}
	return '';
}

my $all_committed = sub {
	query(q{SELECT count(*) FILTER (WHERE status = 'committed') FROM gridha.batches}) eq '100';
};
my $all_final = sub { query(q{SELECT count(*) FROM gridha.batches WHERE status <> 'committed'}) eq '0' };

# ---------------------------------------------------------------------------
# 1. the HTTP module on its own

my $fixture = spawn({}, "$work/fixture.out", "$work/fixture.err", 0,
	'python3', gridha_repo() . '/client/test_http_fixture.py', "$work/fixture.port", 120);
if (wait_until(15, sub { -s "$work/fixture.port" }))
{
	my $port = slurp_file("$work/fixture.port");
	$port =~ s/\s+//g;
	my $unit_out = '';
	my $h = IPC::Run::start([ $unit, "http://127.0.0.1:$port" ], '<', \undef, '>', \$unit_out, '2>&1');
	$h->finish;
	my $unit_rc = $h->result(0);
	foreach my $l (split /\n/, $unit_out)
	{
		if ($l =~ /^(not )?ok \d+ - (.*)$/)
		{
			ok(!defined $1, "dlt_http: $2");
		}
		elsif ($l =~ /^#\s?(.*)$/)
		{
			note($1);
		}
	}
	is($unit_rc, 0, 'dlt_http: the unit test exits 0');
}
else
{
	fail('dlt_http: the test fixture started');
}
kill 'TERM', $fixture;
reap($fixture, 10);

# ---------------------------------------------------------------------------
# 2. three clients against the test ledger

my $ledger = start_ledger($work, '--commit-delay', '0.2', '--max-lifetime', '300');
my $L = $ledger->{url};

$node->safe_psql('postgres', "CREATE DATABASE $db");
# Short claim timings, so balance and takeover happen within seconds.
$node->safe_psql($db, qq{
CREATE EXTENSION gridha;
ALTER DATABASE $db SET track_functions = 'all';
ALTER DATABASE $db SET gridha.renew_interval = '1s';
ALTER DATABASE $db SET gridha.soft_expiry = '6s';
ALTER DATABASE $db SET gridha.hard_expiry = '20s';
UPDATE gridha.targets
   SET submit_url = '$L/batches/{service_id}/{batch_id}',
       status_url = '$L/batch_statuses?id={batch_ids}'
 WHERE target = 'default';
INSERT INTO gridha.targets (target, submit_url, status_url)
VALUES ('splinter', '$L/batches/{service_id}/{batch_id}',
        '$L/splinter/batch_statuses?ids={batch_ids}');
});

# 10 services x 10 batches, in rounds; s09 and s10 go to the Splinter target.
$node->safe_psql($db, q{
DO $$
BEGIN
    FOR b IN 1..10 LOOP
        FOR s IN 1..10 LOOP
            PERFORM gridha.enqueue(format('s%s', lpad(s::text, 2, '0')),
                                   format('s%s-b%s', lpad(s::text, 2, '0'), lpad(b::text, 2, '0')),
                                   decode('00ff0a' || lpad(to_hex(b), 2, '0'), 'hex'),
                                   CASE WHEN s >= 9 THEN 'splinter' END);
        END LOOP;
    END LOOP;
END
$$;
});
append_to_file("$work/expected.tsv",
	$node->safe_psql($db, 'SELECT service_id, batch_id FROM gridha.batches ORDER BY service_id, seq',
		extra_params => [ '-F', "\t" ]) . "\n");

# The clients log in as a role with gridha_submitter only, as the README
# tells users to run them.
$node->safe_psql($db, 'CREATE ROLE gridha_test_submitter LOGIN IN ROLE gridha_submitter');

my $id1 = query('SELECT gen_random_uuid()');
my $id2 = query('SELECT gen_random_uuid()');
my $dsn = $node->connstr($db) . ' user=gridha_test_submitter';
my @common = (
	$client, '--dsn', $dsn, '--idle-sleep-ms', 100, '--monitor-interval-ms', 200,
	'--submit-timeout-ms', 10000, '--max-runtime-s', 120);
my $c1 = spawn({}, '/dev/null', "$work/c1.err", 0, @common, '--instance-id', $id1, '--log', "$work/c1.log");
my $c2 = spawn({ GRIDHA_INSTANCE_ID => $id2, GRIDHA_VERIFY => 1 },
	'/dev/null', "$work/c2.err", 0, @common, '--log', "$work/c2.log");
my $c3 = spawn({}, '/dev/null', "$work/c3.err", 0, @common, '--label', 'third', '--log', "$work/c3.log");

ok(wait_until(45, $all_committed), '3 clients: all 100 batches committed');
diag(query('SELECT status, count(*) FROM gridha.batches GROUP BY 1'));

# calls_of($signature): how often the clients called a function (their
# sessions' counts reach the statistics at most a second or so late).
sub calls_of
{
	return query("SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions
	               WHERE funcid = to_regprocedure('$_[0]')");
}
ok( wait_until(
		10,
		sub {
			(calls_of('gridha.report_submission(uuid,text,text,bigint,gridha.submission_outcome,text)') || 0) >= 100
			  && (calls_of('gridha.report_statuses(uuid,gridha.status_report[])') || 0) >= 1;
		}),
	"API 1.2: the clients reported every submission with a gridha.submission_outcome and the ledger's words as gridha.status_report rows"
);
ok( calls_of('gridha.report_submission(uuid,text,text,bigint,text,text)') eq '0'
	  && calls_of('gridha.report_statuses(uuid,text[],text[],bigint[],text[])') eq '0',
	'API 1.2: the clients never called the 1.1 text and array forms');

my $id3 = instance_of("$work/c3.log");
ok($id3 ne '' && query("SELECT label FROM gridha.instances WHERE instance_id = '$id3'") eq 'third',
	'a client without --instance-id registers one with its --label');

ok( query(
		"SELECT string_agg(DISTINCT owner::text, ',') FROM gridha.instances
		  WHERE instance_id IN ('$id1', '$id2', '$id3')") eq 'gridha_test_submitter',
	"the clients' instances belong to the role they logged in as (gridha_submitter only)");

my $check = '';
my $in_order = IPC::Run::run(
	[
		'python3', gridha_repo() . '/test/dlt/check_log.py',
		'--expected', "$work/expected.tsv", '--require-all', '--one-in-flight', $ledger->{log}
	],
	'<', \undef, '>', \$check, '2>&1');
ok($in_order, "each service's arrival order at the ledger is its enqueue order, one in flight")
  or diag(join("\n", grep { defined } (split /\n/, $check)[-20 .. -1]));

# count_posts($result): POST lines of the ledger log with this result
sub count_posts
{
	my ($result) = @_;
	my $n = 0;
	foreach my $l (lines($ledger->{log}))
	{
		my $e = eval { decode_json($l) } or next;
		$n++ if ($e->{event} // '') eq 'post' && ($e->{result} // '') eq $result;
	}
	return $n;
}
my $dups = count_posts('duplicate');
my $accepted = count_posts('accepted');
ok($dups == 0 && $accepted == 100, "no duplicate POST: $accepted accepted, $dups duplicates");

my ($n1, $n2, $n3) = map { count_events("$work/c$_.log", 'handout') } 1 .. 3;
ok($n1 > 0 && $n2 > 0 && $n3 > 0 && $n1 + $n2 + $n3 == 100,
	"every client handed something out ($n1 + $n2 + $n3 = 100 hand-outs)");

my @reports = grep { index($_, '"event":"report"') >= 0 } map { lines("$work/c$_.log") } 1 .. 3;
my $n_sub = grep { /"kind":"submission","service"[^}]*"word":"accepted","result":"pending"/ } @reports;
ok($n_sub == 100, "every hand-out was reported accepted -> pending ($n_sub)");

my $n_stat = grep { /"kind":"status"[^}]*"word":"committed","result":"committed"/ } @reports;
ok($n_stat == 100, "the monitors reported every batch committed, both dialects ($n_stat)");

ok(!(grep { logged("$work/c$_.log", '"event":"refused"') } 1 .. 3), 'no refusal in normal operation');

# ---------------------------------------------------------------------------
# 3. a stale write: the claim moves on while the client is stopped mid-POST

# submitting_claimant($batch_id): the claimant while the batch is submitting
sub submitting_claimant
{
	return query("SELECT c.claimant FROM gridha.batches b
	              JOIN gridha.service_claims c USING (service_id)
	              WHERE b.batch_id = '$_[0]' AND b.status = 'submitting'");
}

# claimant_is_not($service, $instance): someone else holds the claim now
sub claimant_is_not
{
	my ($service, $instance) = @_;
	my $who = query("SELECT claimant FROM gridha.service_claims WHERE service_id = '$service'");
	return $who ne '' && $who ne $instance;
}

# client_of($instance): pid and log of the client running as $instance
my %clients = ($id1 => [ $c1, "$work/c1.log" ], $id2 => [ $c2, "$work/c2.log" ], $id3 => [ $c3, "$work/c3.log" ]);

sub client_of
{
	return @{ $clients{ $_[0] } // [] };
}

# The ledger holds POSTs for 3 s, so the client is caught inside one; it is
# stopped there, its claim on s01 expires, another client takes it over
# (epoch + 1) and hands the batch out again; then the client continues, and
# its late report must be refused.
ledger_control($ledger, '{"stall_for": 3, "stall_seconds": 3}');
$node->safe_psql($db, q{SELECT gridha.enqueue('s01', 's01-stale', '\x01')});
my $holder = '';
$holder = submitting_claimant('s01-stale') if wait_until(10, sub { submitting_claimant('s01-stale') ne '' });
my ($vpid, $vlog) = client_of($holder);
if ($vpid)
{
	my $epoch = query(q{SELECT epoch FROM gridha.batches WHERE batch_id = 's01-stale'});
	kill 'STOP', $vpid;
	query(q{UPDATE gridha.service_claims SET soft_expiry = now() - interval '1s',
	        hard_expiry = now() - interval '1s' WHERE service_id = 's01'});
	ok(wait_until(30, sub { claimant_is_not('s01', $holder) }),
		'stale write: another client took the claim over while the holder was stopped');
	kill 'CONT', $vpid;
	ok( wait_until(
			20,
			sub {
				logged($vlog,
					qr/"event":"refused","instance":"[^"]*","during":"report_submission","service":"s01","batch":"s01-stale","epoch":$epoch,[^}]*"sqlstate":"RG001"/
				);
			}),
		"stale write: the late report for epoch $epoch is refused with RG001 and logged");
	my @vl = lines($vlog);
	my ($refusal_line) =
	  grep { index($vl[$_], '"batch":"s01-stale"') >= 0 && index($vl[$_], '"refused"') >= 0 } 0 .. $#vl;

	# One more batch for every service: the refused client must keep working.
	$node->safe_psql($db, q{
SELECT gridha.enqueue(format('s%s', lpad(s::text, 2, '0')), format('s%s-more', lpad(s::text, 2, '0')), '\x02',
                      CASE WHEN s >= 9 THEN 'splinter' END)
  FROM generate_series(1, 10) s;
});
	ok(wait_until(45, $all_final), 'after the takeover every batch is committed, the stale one included');
	@vl = lines($vlog);
	my @after = @vl[ ($refusal_line // -1) + 1 .. $#vl ];
	my $handouts_after = grep { index($_, '"event":"handout"') >= 0 } @after;
	ok(alive($vpid) && $handouts_after > 0,
		'the refused client carries on: it hands out batches after the refusal');
	ok((query(q{SELECT attempts FROM gridha.batches WHERE batch_id = 's01-stale'}) || 0) >= 2,
		'the stale batch was handed out again by the claim\'s new holder (attempt 2+)');
}
else
{
	fail("stale write: a client held s01-stale in a POST (holder '$holder')");
}
ledger_control($ledger, '{"clear": true}');

# ---------------------------------------------------------------------------
# 4. SIGTERM while a POST is in hand

ledger_control($ledger, '{"stall_for": 3, "stall_seconds": 2}');
$node->safe_psql($db, q{SELECT gridha.enqueue('s05', 's05-term', '\x03')});
$holder = '';
$holder = submitting_claimant('s05-term') if wait_until(10, sub { submitting_claimant('s05-term') ne '' });
($vpid, $vlog) = client_of($holder);
if ($vpid)
{
	kill 'TERM', $vpid;
	my $vrc = reap($vpid, 20) // 124;
	is($vrc, 0, "SIGTERM: the client exits 0 (got $vrc)");
	my @vl = lines($vlog);
	my ($report_at) = grep {
		$vl[$_] =~ /"event":"report","instance":"[^"]*","kind":"submission","service":"s05","batch":"s05-term"/
	} 0 .. $#vl;
	my ($release_at) = grep { index($vl[$_], '"event":"release"') >= 0 } 0 .. $#vl;
	ok(defined $report_at && defined $release_at && $report_at < $release_at,
		'SIGTERM: the batch in hand was finished and reported before the release');
	ok(query("SELECT count(*) FROM gridha.service_claims WHERE claimant = '$holder'") eq '0',
		"SIGTERM: the client's instance holds no claim afterwards");
	ok(logged($vlog, '"event":"release"') && logged($vlog, '"event":"stop",[^}]*"reason":"SIGTERM"'),
		'SIGTERM: release and stop are logged');
	ok(wait_until(30, $all_final), 'the others take over: s05-term is committed');
}
else
{
	fail("SIGTERM: a client held s05-term in a POST (holder '$holder')");
}
ledger_control($ledger, '{"clear": true}');

# ---------------------------------------------------------------------------
# 5. a server restart: the remaining clients reconnect and carry on

ok($node->stop('fast', fail_ok => 1) && $node->start(fail_ok => 1), 'restart: the server restarted');
query(q{SELECT gridha.enqueue(format('s%s', lpad(s::text, 2, '0')), format('s%s-restart', lpad(s::text, 2, '0')), '\x04',
                              CASE WHEN s >= 9 THEN 'splinter' END) FROM generate_series(1, 10) s});
ok(wait_until(45, $all_final), 'restart: the clients reconnected and committed 10 more batches');
my $alive = grep { alive($_) } $c1, $c2, $c3;
my $n_re = grep { logged("$work/c$_.log", '"event":"disconnected"') } 1 .. 3;
ok($alive == 2 && $n_re >= 1, "restart: both remaining clients still run, $n_re logged a lost connection");

# ---------------------------------------------------------------------------
# 6. a hand-out whose answer never reached the client: next_batch committed
#    for instance ID4 (from psql as the clients' role, standing in for a
#    connection that broke before the answer arrived); a client then runs as
#    ID4 and must find the batch it does not have in hand, report it delayed
#    and submit it, instead of renewing a claim whose head stays submitting
#    for ever.

foreach my $p ($c1, $c2, $c3)
{
	kill 'TERM', $p if alive($p);
}
reap($_, 30) foreach $c1, $c2, $c3;
my $id4 = query('SELECT gen_random_uuid()');
query(q{SELECT gridha.enqueue('lost1', 'lost1-b' || b, '\x05') FROM generate_series(1, 2) b});
my $lost_batch = query("SELECT batch_id FROM gridha.next_batch('$id4')", $db, user => 'gridha_test_submitter');
ok($lost_batch eq 'lost1-b1' && query(q{SELECT status FROM gridha.batches WHERE batch_id = 'lost1-b1'}) eq 'submitting',
	'lost hand-out: lost1-b1 is submitting under instance ID4, and nobody has it in hand');
my $c4 = spawn({}, '/dev/null', "$work/c4.err", 0,
	@common, '--instance-id', $id4, '--max-runtime-s', 40, '--log', "$work/c4.log");
ok( wait_until(
		30,
		sub {
			query(q{SELECT string_agg(status::text, ',' ORDER BY seq) FROM gridha.batches WHERE service_id = 'lost1'})
			  eq 'committed,committed';
		}),
	'lost hand-out: the client running as ID4 commits lost1-b1 and lost1-b2');
ok(logged("$work/c4.log", '"event":"recovered","instance":"[^"]*","service":"lost1","batch":"lost1-b1"'),
	'lost hand-out: the client logged that it recovered lost1-b1');
ok(scalar(grep { /"batch_id": *"lost1-b1".*"result": *"accepted"/ } lines($ledger->{log})) == 1,
	'lost hand-out: the ledger accepted lost1-b1 once');

# 7. a target with no status source (fire and forget): the client reports an
#    accepted batch committed at once, as the background worker does
query(qq{
INSERT INTO gridha.targets (target, submit_url) VALUES ('faf', '$L/batches/{service_id}/{batch_id}');
SELECT gridha.enqueue('faf1', 'faf1-b' || b, '\\x06', 'faf') FROM generate_series(1, 3) b;
});
ok( wait_until(
		30,
		sub {
			query(q{SELECT string_agg(status::text, ',' ORDER BY seq) FROM gridha.batches WHERE service_id = 'faf1'})
			  eq 'committed,committed,committed';
		}),
	'fire and forget: the client commits the 3 batches of a target without a status source');
ok(scalar(grep { /"batch_id":"faf1-b[123]".*"result":"accepted"/ } lines($ledger->{log})) == 3,
	'fire and forget: the ledger accepted each of them once');
kill 'TERM', $c4;
reap($c4, 30);

# 8. a database whose gridha SQL is 1.1 (this library installed, ALTER
#    EXTENSION gridha UPDATE not run yet): the library refuses it (RG022)
#    and the client, which speaks only the 1.3 API, stops at once saying
#    so (it may run 600 s and is given 30: one that retried until its run
#    time ran out would be killed, exit 124, and fail); after the update
#    the client commits the batches
$node->safe_psql('postgres', "CREATE DATABASE $db11");
$node->safe_psql($db11, qq{
CREATE EXTENSION gridha VERSION '1.1';
ALTER DATABASE $db11 SET gridha.renew_interval = '1s';
UPDATE gridha.targets
   SET submit_url = '$L/batches/{service_id}/{batch_id}',
       status_url = '$L/batch_statuses?id={batch_ids}'
 WHERE target = 'default';
});
my $dsn11 = $node->connstr($db11) . ' user=gridha_test_submitter';
my $c5 = spawn({}, '/dev/null', "$work/c5.err", 0,
	@common, '--dsn', $dsn11, '--max-runtime-s', 600, '--log', "$work/c5.log");
my $rc = reap($c5, 30);
unless (defined $rc)
{
	kill 'KILL', $c5;
	reap($c5, 10);
	$rc = 124;
}
ok( $rc != 0
	  && $rc != 124
	  && index(slurp_file("$work/c5.err"),
		"cannot register an instance: gridha's SQL in this database is version 1.1, which this library no longer serves (RG022)"
	  ) >= 0,
	"API 1.1: against gridha 1.1 SQL the client stops at once with the library's refusal, RG022 (exit $rc)");
# given its instance id, its first call is acquire_claims (what it serves)
my $c6 = spawn({}, '/dev/null', "$work/c6.err", 0,
	@common, '--dsn', $dsn11, '--instance-id', '66666666-0000-0000-0000-000000000006',
	'--max-runtime-s', 600);
$rc = reap($c6, 30);
unless (defined $rc)
{
	kill 'KILL', $c6;
	reap($c6, 10);
	$rc = 124;
}
ok( $rc != 0
	  && $rc != 124
	  && index(slurp_file("$work/c6.err"),
		"cannot declare what this instance serves: gridha's SQL in this database is version 1.1, which this library no longer serves (RG022)"
	  ) >= 0,
	"API 1.1: given --instance-id, against gridha 1.1 SQL the client stops at once with the refusal, RG022, and a failing exit status (exit $rc)")
  or diag(slurp_file("$work/c6.err"));
$node->safe_psql($db11, q{
ALTER EXTENSION gridha UPDATE;
SELECT gridha.enqueue('old' || s, 'old' || s || '-b' || b, '\x07') FROM generate_series(1, 3) s, generate_series(1, 2) b;
});
$c5 = spawn({}, '/dev/null', "$work/c5.err", 1,
	@common, '--dsn', $dsn11, '--max-runtime-s', 40, '--log', "$work/c5.log");
ok(wait_until(30, sub { query(q{SELECT count(*) FILTER (WHERE status = 'committed') FROM gridha.batches}, $db11) eq '6' }),
	'API 1.1: after ALTER EXTENSION gridha UPDATE the client commits its 6 batches');
kill 'TERM', $c5;
reap($c5, 30);

unless (Test::More->builder->is_passing)
{
	foreach my $f (map { "$work/c$_.err" } 1 .. 5)
	{
		my @l = lines($f);
		diag("--- $f\n" . join("\n", @l[ ($#l > 14 ? $#l - 14 : 0) .. $#l ]));
	}
}

stop_all();
$node->stop;
