# test/t/029_ledger_answers.pl: a background worker against a hostile
# ledger (issue 39, item 4: no batch is stuck without a sign; src/monitor.c,
# src/dlt_http.c, src/totals.c), the test ledger's answer modes
# (test/dlt/ledger.py: omit_pattern, decode_split, retry_after,
# close_kept_alive_for, malformed_kind huge).
#
# What it shows, step by step, in the order the steps run (each target has
# a service of its own on the one ledger):
#
#   omit      the ledger's well-formed status answers leave out om-1.1 (and
#             speak of a batch nobody asked about): the answers are counted
#             in gridha.metrics' status_omitted_total, logged (a line a
#             minute per target at most), asked again with a pause that
#             doubles (not every 100 ms), and after 3 such answers in a row
#             the batch is reported unknown and submitted again; once the
#             ledger speaks of it again the service drains in order
#   split     the ledger URL-decodes the ids before splitting them on
#             commas: a batch whose id holds a comma is asked about alone,
#             never beside others; the ledger cannot answer for it, and it
#             is resubmitted, not left pending
#   retry     429 with Retry-After: 3 (seconds), then 503 with Retry-After
#             as an HTTP-date 3 s ahead: the next POST of the batch comes no
#             sooner than the wait (1.5 s for the date's whole seconds)
#   keepalive the ledger closes a kept-alive connection after reading a POST
#             (and applies it): libcurl's silent re-send is refused, so no
#             (batch, attempt) reaches the ledger twice; every batch still
#             arrives, in order
#   words     a 409 delays a batch with a WARNING that does not send the
#             operator to gridha.targets; a 200 status answer too big to read
#             is logged as a failed poll, not an unreachable URL
#
# Words: "answer" is the ledger's reply to a status poll (GET of the
# target's status URL); "in order" is test/dlt/check_log.py's judgement:
# every batch reached the ledger in its service's enqueue order, one in
# flight at a time. Every wait is a bounded poll or a measured window,
# never a sleep standing in for an assertion.
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded and one worker serving its database
# (gridha_answers_test) as a role with only gridha_submitter, with
# gridha.monitor_interval = 100ms (a status run per target every 100 ms)
# and gridha.status_omitted_limit = 3, against the test ledger (commits
# 0.3 s after accepting). Run by `make test` (test/run.sh, part
# 029_ledger_answers) and by `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More tests => 13;
use Time::HiRes qw(time);

my $db = 'gridha_answers_test';
my $work = PostgreSQL::Test::Utils::tempdir;

my $node = gridha_node('answers');

my $ledger = start_ledger($work, '--commit-delay', '0.3', '--max-lifetime', '900');
my $led = $ledger->{url};
worker_database($node, $db, qq{
INSERT INTO gridha.targets (target, submit_url, status_url)
SELECT t, '$led/batches/{service_id}/{batch_id}', '$led/batch_statuses?id={batch_ids}'
  FROM unnest(ARRAY['omit', 'split', 'retry', 'keepalive', 'words']) AS t;
});

restart_with_workers($node, $db, 1, q{
gridha.naptime = '100ms'
gridha.monitor_interval = '100ms'
gridha.submit_timeout = '5s'
gridha.status_omitted_limit = 3
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

# status_of($batch): the batch's status and attempts ("committed 2")
sub status_of
{
	return query("SELECT status || ' ' || attempts FROM gridha.batches WHERE batch_id = '$_[0]'");
}

# attempts_of($batch): its attempts, 0 when unknown
sub attempts_of
{
	my (undef, $n) = split / /, status_of($_[0]);
	return $n // 0;
}

# committed(@batches): every one of them is committed
sub committed
{
	foreach my $b (@_)
	{
		return 0 unless status_of($b) =~ /^committed /;
	}
	return 1;
}

# events(): the ledger log's lines (hashes), whole lines only
sub events
{
	my @e;
	open my $fh, '<', $ledger->{log} or return ();
	while (my $line = <$fh>)
	{
		next unless $line =~ /\S/ && $line =~ /\n\z/;
		push @e, decode_json($line);
	}
	close $fh;
	return @e;
}

# since($n): the ledger's events after its first $n
sub since
{
	my ($n) = @_;
	my @e = events();
	return @e[ $n .. $#e ];
}

# in_order($expected, $what): one test, ok when every batch of the file
# $expected (service, batch id, tab-separated, each service's in enqueue
# order) reached the ledger in that order, one in flight per service
# (test/dlt/check_log.py); else the violations
sub in_order
{
	my ($expected, $what) = @_;
	my ($ok, $out) = ledger_in_order($ledger, $expected);
	ok($ok, $what) or diag($out =~ /(violations.*?)(?:\n\n|\z)/s ? $1 : $out);
	return;
}

my $log = $node->logfile;

# ---------------------------------------------------------------------------
# omit: answers that leave the batch out

ledger_control($ledger, '{"omit_pattern": "^om-"}');
my $mark = log_size($log);
my $t0 = time();
$node->safe_psql($db,
	q{SELECT gridha.enqueue('om1', 'om-1.' || i, '\x00'::bytea, 'omit') FROM generate_series(1, 2) AS i});
append_to_file("$work/omit.expected", "om1\tom-1.1\nom1\tom-1.2\n");

sub omitted_total
{
	return query(
		"SELECT status_omitted_total FROM gridha.metrics WHERE scope = 'target' AND target = 'omit'");
}
ok( wait_until(30, sub { my $n = omitted_total(); $n =~ /^\d+$/ && $n >= 3 }),
	'omit: the answers that left om-1.1 out are counted in gridha.metrics (status_omitted_total '
	  . omitted_total() . ')');

my $res = wait_until(30, sub { attempts_of('om-1.1') >= 2 });
my $posts = grep { $_->{event} eq 'post' && $_->{batch_id} eq 'om-1.1' } events();
ok( $res && $posts >= 2,
	'omit: after 3 answers without it, om-1.1 is reported unknown and POSTed again (attempts: '
	  . status_of('om-1.1') . ", POSTs the ledger saw: $posts)");

# 10 s of answers without it, counted from the first answer that left it out
sleep 10;
my @left = grep { $_->{event} eq 'status_query' && $_->{left_out} } events();
my @first = grep { $_->{t} >= $t0 } @left;
my $polls = @first ? scalar(grep { $first[0]{t} <= $_->{t} && $_->{t} < $first[0]{t} + 10 } @left) : 0;
ok( $polls >= 3 && $polls <= 15,
	"omit: in 10 s of answers without it the batch is asked about with a growing pause, not every 100 ms ($polls polls; every 100 ms would be about 100)"
);

my $first = log_lines_matching($log, $mark,
	qr/\Qtarget "omit": a status answer left out a batch asked about: batch "om-1.1"\E/);
my $lines = log_lines_matching($log, $mark, qr/\Qtarget "omit"\E/);
ok( $first == 1 && $lines <= 4,
	"omit: the first answer that left it out is logged, and the target costs at most 4 lines in the first minute ($first first, $lines in all)"
);
diag(join("\n", grep { defined } (grep { /\Qtarget "omit"\E/ } split /\n/, log_since($log, $mark))[ 0 .. 4 ]));

ledger_control($ledger, '{"omit_pattern": null}');
my $t1 = time();
if (wait_until(40, sub { committed('om-1.1', 'om-1.2') }))
{
	in_order("$work/omit.expected",
		'omit: once the ledger speaks of it, om-1.1 and om-1.2 commit in order within 40 s ('
		  . int(time() - $t1) . ' s)');
}
else
{
	fail('omit: once the ledger speaks of it, om-1.1 and om-1.2 commit in order within 40 s (om-1.1: '
		  . status_of('om-1.1') . ', om-1.2: ' . status_of('om-1.2') . ')');
}

# ---------------------------------------------------------------------------
# split: a ledger that decodes before it splits

ledger_control($ledger, '{"decode_split": true, "commit_delay": 2}');
my $s0 = scalar(events());
$node->safe_psql($db, q{
SELECT gridha.enqueue(s, b, '\x00'::bytea, 'split')
  FROM (VALUES ('sp1', 'sp,1.1'), ('sp2', 'sp2.1'), ('sp3', 'sp3.1'), ('sp4', 'sp4.1')) AS v(s, b);
});
$res = wait_until(30, sub { attempts_of('sp,1.1') >= 2 && committed('sp2.1', 'sp3.1', 'sp4.1') });
my @comma = grep { $_->{event} eq 'status_query' && $_->{encoded_comma} } since($s0);
my $mixed = grep { ($_->{raw_ids} // 0) > 1 } @comma;
my $alone = grep { ($_->{raw_ids} // 0) == 1 } @comma;
ok($mixed == 0 && $alone >= 1,
	"split: the id with a comma is asked about alone ($alone GETs alone, $mixed beside other ids)");
ok($res,
	'split: the batch whose id the ledger splits is resubmitted, not left pending (sp,1.1: '
	  . status_of('sp,1.1') . '), and the others commit');
ledger_control($ledger, '{"decode_split": false, "commit_delay": 0.3}');
wait_until(30, sub { committed('sp,1.1') });

# ---------------------------------------------------------------------------
# retry: Retry-After on 429 (seconds) and 503 (HTTP-date)

# min_gap($batch, $result): the shortest time between two POSTs of $batch
# the ledger answered $result (-1 with fewer than two)
sub min_gap
{
	my ($batch, $result) = @_;
	my @ts = map { $_->{t} }
	  grep { $_->{event} eq 'post' && $_->{batch_id} eq $batch && $_->{result} eq $result } events();
	return -1 if @ts < 2;
	my $min;
	for my $i (1 .. $#ts)
	{
		my $d = $ts[$i] - $ts[ $i - 1 ];
		$min = $d if !defined $min || $d < $min;
	}
	return sprintf('%.2f', $min) + 0;
}

ledger_control($ledger, '{"retry_after": 3, "retry_after_form": "seconds", "fail_429_for": 8}');
$node->safe_psql($db, q{SELECT gridha.enqueue('ra1', 'ra-1.1', '\x00'::bytea, 'retry')});
wait_until(30, sub { committed('ra-1.1') });
my $gap = min_gap('ra-1.1', '429');
ok($gap >= 2.5,
	"retry: after a 429 with Retry-After: 3 the batch is POSTed again no sooner than 2.5 s later (shortest gap $gap s)"
);

ledger_control($ledger, '{"retry_after": 3, "retry_after_form": "date", "fail_503_for": 8}');
$node->safe_psql($db, q{SELECT gridha.enqueue('ra2', 'ra-2.1', '\x00'::bytea, 'retry')});
wait_until(30, sub { committed('ra-2.1') });
$gap = min_gap('ra-2.1', '503');
ok($gap >= 1.5,
	"retry: after a 503 with Retry-After as an HTTP-date 3 s ahead the batch is POSTed again no sooner than 1.5 s later (shortest gap $gap s)"
);
ledger_control($ledger, '{"retry_after": 1, "retry_after_form": "seconds"}');

# ---------------------------------------------------------------------------
# keepalive: a kept-alive connection that dies after the request was sent

ledger_control($ledger, '{"close_kept_alive_for": 10}');
my $k0 = scalar(events());
$node->safe_psql($db, q{
SELECT gridha.enqueue('ka' || s, 'ka-' || s || '.' || b, '\x00'::bytea, 'keepalive')
  FROM generate_series(1, 3) AS b, generate_series(1, 5) AS s
 ORDER BY b, s;
});
append_to_file("$work/keepalive.expected", $node->safe_psql($db,
	q{SELECT service_id, batch_id FROM gridha.batches WHERE batch_id LIKE 'ka-%' ORDER BY service_id, seq},
	extra_params => [ '-F', "\t" ]) . "\n");
my @kas = split /\n/, $node->safe_psql($db, q{SELECT batch_id FROM gridha.batches WHERE batch_id LIKE 'ka-%'});
wait_until(60, sub { committed(@kas) });
my %sent;
my $closed = 0;
foreach my $e (grep { $_->{event} eq 'post' } since($k0))
{
	$closed++ if $e->{closed};
	$sent{"$e->{batch_id} $e->{attempt}"}++ if $e->{batch_id} =~ /^ka-/;
}
my $twice = grep { $_ > 1 } values %sent;
ok($twice == 0 && $closed >= 1,
	"keepalive: with kept-alive connections closed after a POST was read, no attempt reaches the ledger twice (attempts sent twice, connections closed: $twice $closed)"
);
in_order("$work/keepalive.expected",
	"keepalive: every batch still reaches the ledger, in its service's order, one in flight");

# ---------------------------------------------------------------------------
# words: what the log says of a 409 and of a body too big to read

ledger_control($ledger,
	'{"close_kept_alive_for": 0, "fail_code": 409, "fail_code_applies": "post", "fail_code_for": 2}');
$mark = log_size($log);
$node->safe_psql($db, q{SELECT gridha.enqueue('wd1', 'wd-1.1', '\x00'::bytea, 'words')});
wait_until(30, sub { committed('wd-1.1') });
my $delayed = qr/\Qbatches of target "words" are delayed: the ledger answered http 409\E/;
my @new = split /\n/, log_since($log, $mark);
my @at = grep { $new[$_] =~ $delayed } 0 .. $#new;
# each warning and the two lines after it (grep -A 2)
my %near = map { $_ => 1 } grep { $_ <= $#new } map { ($_, $_ + 1, $_ + 2) } @at;
my $row = grep { $new[$_] =~ /\QFix the row of gridha.targets\E/ } keys %near;
my $warned = scalar(@at);
ok($warned >= 1 && $row == 0,
	"words: a 409 is logged as the ledger's answer delaying the batch, without a hint to fix the target's row ($warned warnings, $row such hints)"
);
diag(join("\n", @new[ $at[0] .. ($at[0] + 2 > $#new ? $#new : $at[0] + 2) ])) if @at;

ledger_control($ledger, '{"malformed_kind": "huge", "malformed_for": 4, "commit_delay": 3}');
$mark = log_size($log);
$node->safe_psql($db, q{SELECT gridha.enqueue('wd2', 'wd-2.1', '\x00'::bytea, 'words')});
$res = wait_until(20,
	sub { log_lines_matching($log, $mark, qr/\Qtarget "words": status poll failed: http 200 with a body larger than\E/) >= 1 });
my $unreachable = log_lines_matching($log, $mark, qr/\Qtarget "words": status URL unreachable\E/);
ok($res && $unreachable == 0,
	"words: a 200 status answer too big to read is logged as a failed poll, not as an unreachable status URL ($unreachable unreachable lines)"
);
diag(join("\n", grep { defined } (grep { /\Qtarget "words"\E/ } split /\n/, log_since($log, $mark))[ 0 .. 2 ]));
ledger_control($ledger, '{"malformed_kind": "cycle", "malformed_for": 0, "commit_delay": 0.3}');

$node->stop;
