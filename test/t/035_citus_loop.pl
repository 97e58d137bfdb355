# test/t/035_citus_loop.pl: the Citus mode's instance calls (issue 43;
# docs/citus.md, "Built: the instance calls" and "Built: the batched
# reports and the read calls"): three instances on the coordinator call
# gridha.next_batch, the reports (single and batched) and the reads
# claimed_batches, pending_batches and verify_batch (not the per-bucket
# functions) over 60 services in 64 buckets; the buckets are balanced
# between them, and the buckets of an instance that stops are taken over
# by the others.
#
# Citus exists for PostgreSQL 15 only. As test/t/032_citus_mode.pl: the
# PostgreSQL 15 GRIDHA_CITUS_PG_CONFIG names (default: the system's), used
# as it is when the run's programs are that tree's with gridha installed,
# otherwise a copy of it with gridha built from this source tree; without
# Citus there every test is reported skipped, with the reason
# (test/t/lib/GridhaCitus.pm).
#
# Steps, in the order they run:
#
#   build     as 031_citus
#   cluster   a coordinator and two workers, citus and gridha created
#   setup     gridha.citus_setup(64); a producer enqueues 3 batches into
#             each of services c01..c60 (gridha.bucket_enqueue)
#   run       rounds: A, B and C (leases of 60 s) each call next_batch 6
#             times (one psql session each, every call a statement of its
#             own); a reader then counts the services with more than one
#             batch in flight; then each instance reports what it got
#             (accepted, then committed). Every hand-out is checked against
#             the service's first batch not committed yet, and each
#             (bucket, epoch) against the one instance that got it
#   balance   within the first 8 rounds, a round ends with every bucket
#             that has work held by one of A, B and C (lease running) and
#             their counts of such buckets within one of each other
#   takeover  C renews with a 2 s lease, is handed one more batch and
#             stops; A and B go on (bounded: at most 200 rounds) until C
#             holds no bucket with work; C's late reports are then refused
#             (RG001) and change nothing; the batch goes out again to A or
#             B at a higher epoch
#   owner     a role that did not take A's buckets is refused next_batch
#             as A (RG008)
#   reads     two more batches enqueued into each service; A is handed 8
#             (in several buckets); claimed_batches, verify_batch and then
#             pending_batches of A compared with the bucket tables read as
#             their owner (rows, order, max_batches); a batched
#             report_submissions whose third row names the next epoch:
#             that row refused (RG001) and unchanged, the others pending,
#             one result row per report in the order given; another role
#             refused each read and batched report as A (RG008), nothing
#             changed; bad input refused with the single server's
#             SQLSTATEs, whole call (22004, 22023, 25006) or row alone
#             (22004, 22023, RG004), nothing changed; gridha_admin reads
#             the bucket tables but not the payload, a submitter none
#             (42501); the 8 committed through report_statuses and the
#             array forms
#   end       every batch committed once, each service's in seq order;
#             release_claims gives back A's and B's buckets
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster). Run by
# `make test` (test/run.sh, part 035_citus_loop) and by `make
# prove_installcheck`, as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaCitus;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $NTESTS = 23;
my %ID = (
	A => 'aaaaaaaa-0000-0000-0000-000000000035',
	B => 'bbbbbbbb-0000-0000-0000-000000000035',
	C => 'cccccccc-0000-0000-0000-000000000035');
my $NSERVICES = 60;
my $NBATCHES = 3;
my $PER_CALL = 6;    # next_batch calls of an instance per round

plan tests => $NTESTS;

my ($CFG, $CBIN, $CLIB) = citus_tree();
my $install_path = citus_build($CFG, $CBIN, $CLIB);
my @nodes = citus_cluster($install_path, 'test/t/035_citus_loop.pl', 'c35', '');
my $coord = $nodes[0];

sub run
{
	my ($sql) = @_;
	return citus_psql($coord, 'c35', $sql, '-v', 'VERBOSITY=verbose');
}

sub one
{
	my ($sql) = @_;
	return $coord->safe_psql('c35', $sql);
}

# ---------------------------------------------------------------------------
# setup

my @services = map { sprintf('c%02d', $_) } 1 .. $NSERVICES;
my $setup = run(q{SELECT gridha.citus_setup(64);
DO $$ BEGIN
PERFORM gridha.bucket_enqueue(gridha.bucket_of(s, 64), s, s || '-' || j, '\x35')
  FROM (SELECT 'c' || lpad(i::text, 2, '0') AS s FROM generate_series(1, 60) i) x,
       generate_series(1, 3) j ORDER BY j, s;
END $$;});
my $rows = one(q{SELECT count(*) || '/' || count(DISTINCT service_id) || '/' || count(DISTINCT bucket)
  FROM gridha.bucket_batches});
my %bucket_of = map { split /\|/ } split /\n/,
  one(q{SELECT service_id || '|' || bucket FROM gridha.bucket_services});
my $nbuckets = scalar keys %{ { map { $_ => 1 } values %bucket_of } };
ok($setup =~ /^64$/m && $rows eq ($NSERVICES * $NBATCHES) . "/$NSERVICES/$nbuckets" && $nbuckets > 3,
	"setup: 64 buckets laid out, $NBATCHES batches enqueued into each of $NSERVICES services ($nbuckets buckets)")
  or diag("$setup\n$rows");

# ---------------------------------------------------------------------------
# the loop

my %done;         # service -> batches committed so far (read before each hand-out)
my %seen_epoch;   # "bucket/epoch" -> instance handed out to
my %max_epoch;    # bucket -> highest epoch seen
my @order_bad;
my @epoch_bad;
my $multi_flight = 0;
my %lease = (A => '60s', B => '60s', C => '60s');
my %renew = (A => '10s', B => '10s', C => '10s');

# handout(X, N): X's N next_batch calls in one session; the batches it got
sub handout
{
	my ($x, $n) = @_;
	# what each service has committed: its next hand-out must be the next seq
	%done = map { split /\|/ } split /\n/, one(q{SELECT service_id || '|' || count(*)
		FROM gridha.bucket_batches WHERE status = 'committed' GROUP BY service_id});
	my $sql = "SET gridha.hard_expiry = '$lease{$x}'; SET gridha.soft_expiry = '$lease{$x}';"
	  . " SET gridha.renew_interval = '$renew{$x}';\n"
	  . join('', map { "SELECT service_id || '|' || batch_id || '|' || epoch FROM gridha.next_batch('$ID{$x}');\n" } 1 .. $n);
	my $out = run($sql);
	my @got;
	foreach my $l (split /\n/, $out)
	{
		next unless $l =~ /^(c\d\d)\|(c\d\d-(\d+))\|(\d+)$/;
		my ($s, $b, $q, $e) = ($1, $2, $3, $4);
		push @got, [ $s, $b, $e ];
		my $want = ($done{$s} // 0) + 1;
		push @order_bad, "$x got $b, $s wants seq $want" if $q != $want;
		my $k = "$bucket_of{$s}/$e";
		push @epoch_bad, "$k to $seen_epoch{$k} and $x" if defined $seen_epoch{$k} && $seen_epoch{$k} ne $x;
		push @epoch_bad, "$k below $max_epoch{$bucket_of{$s}}"
		  if defined $max_epoch{ $bucket_of{$s} } && $e < $max_epoch{ $bucket_of{$s} };
		$seen_epoch{$k} = $x;
		$max_epoch{ $bucket_of{$s} } = $e;
	}
	diag("handout $x: $out") if $out =~ /ERROR/;
	return @got;
}

# report(X, batches): accepted then committed, each a statement of its own;
# the output
sub report
{
	my ($x, @b) = @_;
	return '' unless @b;
	my $sql = join('', map {
			"SELECT gridha.report_submission('$ID{$x}', '$_->[0]', '$_->[1]', $_->[2], 'accepted');\n"
			  . "SELECT gridha.report_status('$ID{$x}', '$_->[0]', '$_->[1]', $_->[2], 'committed');\n"
	} @b);
	return run($sql);
}

sub flights
{
	return one(q{SELECT count(*) FROM (SELECT service_id FROM gridha.bucket_batches
		WHERE status IN ('submitting', 'pending', 'valid') GROUP BY service_id HAVING count(*) > 1) x});
}

# holders(): instance letter -> buckets with work it holds (lease running),
# and the buckets with work held by nobody live
sub holders
{
	my %who = map { $ID{$_} => $_ } keys %ID;
	my %n = (A => 0, B => 0, C => 0, none => 0);
	foreach my $l (split /\n/, one(q{SELECT coalesce(c.holder::text, '-') || '|' || (c.hard_expiry >= now())
		  FROM gridha.bucket_claims c
		 WHERE EXISTS (SELECT 1 FROM gridha.bucket_services s
		                WHERE s.bucket = c.bucket AND (s.ready_at IS NOT NULL OR s.in_flight))}))
	{
		my ($h, $live) = split /\|/, $l;
		if ($h ne '-' && $live eq 'true' && $who{$h}) { $n{ $who{$h} }++ }
		else { $n{none}++ }
	}
	return %n;
}

sub round
{
	my @who = @_;
	my %got;
	$got{$_} = [ handout($_, $PER_CALL) ] foreach @who;
	$multi_flight++ if flights() ne '0';
	my $out = '';
	$out .= report($_, @{ $got{$_} }) foreach @who;
	diag("reports: $out") if $out =~ /ERROR/;
	return $out;
}

my ($balanced, $last) = (0, '');
for my $r (1 .. 8)
{
	round(qw(A B C));
	my %n = holders();
	$last = "round $r: A $n{A}, B $n{B}, C $n{C}, not held $n{none}";
	my @c = sort { $a <=> $b } @n{qw(A B C)};
	if ($r >= 2 && $n{none} == 0 && $c[2] - $c[0] <= 1 && $c[0] > 0)
	{
		$balanced = 1;
		last;
	}
}
diag("balance: $last");
ok($balanced,
	'balance: within 8 rounds, every bucket with work is held by a live instance and A, B and C hold within one of each other');

# ---------------------------------------------------------------------------
# take-over: C renews with a 2 s lease, is handed a batch and stops

$lease{C} = '2s';
$renew{C} = '100ms';
my @c_got = handout('C', 1);
my $c_buckets = one("SELECT count(*) FROM gridha.bucket_claims WHERE holder = '$ID{C}'");
my ($gone, $rounds) = (0, 0);
for my $r (1 .. 200)
{
	$rounds = $r;
	round(qw(A B));
	my %n = holders();
	if ($n{C} == 0 && $n{none} == 0)
	{
		$gone = 1;
		last;
	}
	usleep(250_000);
}
ok(@c_got == 1 && $c_buckets > 0 && $gone,
	"takeover: C stopped holding $c_buckets buckets (lease 2 s); within $rounds rounds of A and B every bucket with work is theirs")
  or diag("C got: " . scalar(@c_got) . ", buckets $c_buckets, rounds $rounds");

# C's late reports of the batch it was handed
my ($cs, $cb, $ce) = @{ $c_got[0] // [ 'c01', 'none', 0 ] };
my $before = one("SELECT status || '/' || epoch || '/' || attempts FROM gridha.bucket_batches WHERE batch_id = '$cb'");
my $late = run("SELECT gridha.report_submission('$ID{C}', '$cs', '$cb', $ce, 'accepted');\n"
	  . "SELECT gridha.report_status('$ID{C}', '$cs', '$cb', $ce, 'committed');");
my $after = one("SELECT status || '/' || epoch || '/' || attempts FROM gridha.bucket_batches WHERE batch_id = '$cb'");
my @rg001 = ($late =~ /ERROR:  RG001:/g);
ok(@rg001 == 2 && $before eq $after,
	"takeover: C's late reports of $cb at epoch $ce are refused (RG001) and change nothing ($after)")
  or diag("$late\n$before -> $after");

# ---------------------------------------------------------------------------
# owner

$coord->safe_psql('c35', q{CREATE ROLE r35 LOGIN; GRANT gridha_submitter TO r35;});
my $other = '';
$coord->psql('c35', "SELECT * FROM gridha.next_batch('$ID{A}')",
	stderr => \$other, extra_params => [ '-U', 'r35', '-v', 'VERBOSITY=verbose' ]);
ok($other =~ /ERROR:  RG008: role "r35" does not own instance $ID{A}/,
	'owner: a role that did not take A\'s buckets is refused next_batch as A (RG008)')
  or diag($other);

# ---------------------------------------------------------------------------
# reads and batched reports: claimed_batches, pending_batches, verify_batch
# and the batched reports in the mode, checked against the bucket tables

# code(SQL, ROLE): the SQLSTATE of the first error of SQL (as ROLE when
# given), or 'ok'
sub code
{
	my ($sql, $role) = @_;
	my $out = citus_psql($coord, 'c35', $sql, '-v', 'VERBOSITY=verbose',
		defined $role ? ('-U', $role) : ());
	return $out =~ /ERROR:  ([0-9A-Z]{5}):/ ? $1 : 'ok';
}

# bucket_state(X): X's buckets read from the bucket tables as their owner:
# bucket -> epoch, and per service of those buckets its head
# (service, batch, seq, status, bucket epoch, ready_at, in_flight,
# submitted_at; the times in microseconds since 1970)
sub bucket_state
{
	my ($x) = @_;
	my @rows;
	foreach my $l (split /\n/, one(qq{SELECT concat_ws('|', s.service_id, b.batch_id, b.seq, b.status, c.epoch,
	         coalesce((extract(epoch FROM s.ready_at) * 1000000)::bigint::text, ''), s.in_flight,
	         coalesce((extract(epoch FROM b.submitted_at) * 1000000)::bigint::text, ''), c.bucket)
	    FROM gridha.bucket_claims c, gridha.bucket_services s, gridha.bucket_batches b
	   WHERE c.holder = '$ID{$x}' AND s.bucket = c.bucket AND s.head_seq <= s.tail_seq
	     AND b.bucket = s.bucket AND b.service_id = s.service_id AND b.seq = s.head_seq}))
	{
		my @f = split /\|/, $l, -1;
		push @rows, { s => $f[0], b => $f[1], q => $f[2], st => $f[3], e => $f[4], ready => $f[5],
			fl => $f[6], sub => $f[7], k => $f[8] };
	}
	return @rows;
}

# two more batches into each service (ids <service>-<seq>, as above), so
# that A has work in many buckets whatever the rounds above left
my $more = run(q{DO $$ BEGIN
PERFORM gridha.bucket_enqueue(gridha.bucket_of(s, 64), s, s || '-' || j, '\x35')
  FROM (SELECT 'c' || lpad(i::text, 2, '0') AS s FROM generate_series(1, 60) i) x,
       generate_series(4, 5) j ORDER BY j, s;
END $$;});
diag("enqueue: $more") if $more =~ /ERROR/;
$NBATCHES = 5;
my @a_got = handout('A', 8);
my %a_batch = map { $_->[1] => $_ } @a_got;
my %a_bucket = map { $bucket_of{ $_->[0] } => 1 } @a_got;

# claimed_batches: every head of A's buckets, ready ones first (by when
# they became ready), then those in flight; by service within a time
my @st = bucket_state('A');
my @want = map { join('|', $_->{s}, $_->{b}, $_->{q}, $_->{st}, $_->{e}) }
  sort {
	($a->{ready} eq '') <=> ($b->{ready} eq '')
	  or ($a->{ready} eq '' ? 0 : $a->{ready} <=> $b->{ready})
	  or $a->{s} cmp $b->{s}
  } @st;
my $claimed = one("SELECT concat_ws('|', service_id, batch_id, seq, status, epoch)
  FROM gridha.claimed_batches('$ID{A}', 1000)");
my $claimed3 = one("SELECT concat_ws('|', service_id, batch_id, seq, status, epoch)
  FROM gridha.claimed_batches('$ID{A}', 3)");
my $in_claimed = grep { my $bb = $_; grep { /^[^|]+\|\Q$bb\E\|\d+\|submitting\|/ } @want } keys %a_batch;
ok(@a_got == 8 && $claimed eq join("\n", @want) && $claimed3 eq join("\n", @want[0 .. 2])
	  && $in_claimed == 8,
	'reads: claimed_batches(A) is the head of each service of A\'s buckets with the bucket\'s epoch, ready ones first, as the bucket tables hold them; max_batches 3 gives the first 3')
  or diag("got " . scalar(@a_got) . " batches\nclaimed:\n$claimed\nwant:\n" . join("\n", @want) . "\nfirst 3:\n$claimed3");

# verify_batch: true for A's batches at their epoch, false at another
# epoch and for another instance
my ($v_ok, $v_epoch, $v_other) = ('', '', '');
foreach my $g (@a_got)
{
	my ($s, $b, $e) = @$g;
	$v_ok .= one("SELECT gridha.verify_batch('$ID{A}', '$s', '$b', $e)");
	$v_epoch .= one("SELECT gridha.verify_batch('$ID{A}', '$s', '$b', " . ($e + 1) . ")");
	$v_other .= one("SELECT gridha.verify_batch('$ID{B}', '$s', '$b', $e)");
}
ok($v_ok eq 't' x 8 && $v_epoch eq 'f' x 8 && $v_other eq 'f' x 8,
	'reads: verify_batch is true for each of A\'s 8 batches in flight at its epoch, false at the next epoch and for instance B')
  or diag("$v_ok / $v_epoch / $v_other");

# a batched report with a stale row: the third row names the next epoch
my $stale = $a_got[2][1];
my $before_stale = one("SELECT concat_ws('/', status, epoch, attempts) FROM gridha.bucket_batches WHERE batch_id = '$stale'");
my $sub_rows = join(', ', map {
		my ($s, $b, $e) = @{ $a_got[$_] };
		"ROW('$s', '$b', " . ($_ == 2 ? $e + 1 : $e) . ", 'accepted', NULL)::gridha.submission_report"
} 0 .. $#a_got);
my $sub = run("SELECT concat_ws('|', service_id, batch_id, coalesce(status::text, '-'), coalesce(sqlstate, '-'))
  FROM gridha.report_submissions('$ID{A}', ARRAY[$sub_rows])");
my $want_sub = join("\n", map {
		my ($s, $b) = @{ $a_got[$_] };
		$_ == 2 ? "$s|$b|-|RG001" : "$s|$b|pending|-"
} 0 .. $#a_got);
my $after_stale = one("SELECT concat_ws('/', status, epoch, attempts) FROM gridha.bucket_batches WHERE batch_id = '$stale'");
my $pending_now = one("SELECT count(*) FROM gridha.bucket_batches WHERE status = 'pending' AND batch_id IN ("
	  . join(', ', map { "'$_->[1]'" } @a_got) . ")");
ok($sub eq $want_sub && $before_stale eq $after_stale && $before_stale =~ /^submitting\// && $pending_now eq '7'
	  && keys %a_bucket > 1,
	'batched: report_submissions over ' . scalar(keys %a_bucket) . ' buckets answers one row per report in the order given: the stale row (next epoch) refused with RG001 and unchanged, the 7 others pending')
  or diag("$sub\nwant:\n$want_sub\n$before_stale -> $after_stale, pending $pending_now");

# pending_batches: A's pending and valid heads, oldest submission first
@st = bucket_state('A');
@want = map { join('|', $_->{s}, $_->{b}, $_->{st}, $_->{e}) }
  sort { $a->{sub} <=> $b->{sub} or $a->{s} cmp $b->{s} }
  grep { $_->{fl} eq 't' && ($_->{st} eq 'pending' || $_->{st} eq 'valid') } @st;
my $pending = one("SELECT concat_ws('|', service_id, batch_id, status, epoch)
  FROM gridha.pending_batches('$ID{A}', 1000)");
my $pending2 = one("SELECT concat_ws('|', service_id, batch_id, status, epoch)
  FROM gridha.pending_batches('$ID{A}', 2)");
my $v_pending = one("SELECT gridha.verify_batch('$ID{A}', '$a_got[0][0]', '$a_got[0][1]', $a_got[0][2])");
ok(@want == 7 && $pending eq join("\n", @want) && $pending2 eq join("\n", @want[0 .. 1]) && $v_pending eq 'f',
	'reads: pending_batches(A) is the 7 batches accepted, oldest submission first, as the bucket tables hold them (max_batches 2: the first 2); verify_batch is false once accepted')
  or diag("pending:\n$pending\nwant:\n" . join("\n", @want) . "\nfirst 2:\n$pending2\nverify: $v_pending");

# the owner: another role is refused each call as A, and nothing changes
my $snap = q{SELECT string_agg(concat_ws('/', batch_id, status, epoch, attempts), ',' ORDER BY batch_id) FROM gridha.bucket_batches};
my $before_r = one($snap);
my ($s0, $b0, $e0) = @{ $a_got[0] };
my ($s2, $b2, $e2) = @{ $a_got[2] };
my @r35 = map { code($_, 'r35') } (
	"SELECT * FROM gridha.claimed_batches('$ID{A}')",
	"SELECT * FROM gridha.pending_batches('$ID{A}')",
	"SELECT gridha.verify_batch('$ID{A}', '$s2', '$b2', $e2)",
	"SELECT * FROM gridha.report_submissions('$ID{A}', ARRAY[ROW('$s2', '$b2', $e2, 'accepted', NULL)::gridha.submission_report])",
	"SELECT * FROM gridha.report_statuses('$ID{A}', ARRAY[ROW('$s0', '$b0', $e0, 'committed', NULL)::gridha.status_report])",
	"SELECT * FROM gridha.report_statuses('$ID{A}', ARRAY['$s0'], ARRAY['$b0'], ARRAY[$e0]::bigint[], ARRAY['committed'])");
my $after_r = one($snap);
ok(join(',', @r35) eq join(',', ('RG008') x 6) && $before_r eq $after_r,
	'owner: a role that did not take A\'s buckets is refused claimed_batches, pending_batches, verify_batch and the batched reports (both forms) as A (RG008), and nothing changes')
  or diag(join(',', @r35));

# the registered owner counts for the reads too, as for the instance calls:
# an instance registered by another role that holds no bucket yet
my $idle = one(q{SELECT gridha.register_instance('idle, holds nothing')});
my @r35i = map { code($_, 'r35') } (
	"SELECT * FROM gridha.claimed_batches('$idle')",
	"SELECT * FROM gridha.pending_batches('$idle')",
	"SELECT * FROM gridha.report_submissions('$idle', ARRAY[ROW('$s2', '$b2', $e2, 'accepted', NULL)::gridha.submission_report])");
my $own = code("SELECT * FROM gridha.claimed_batches('$idle')");
ok(join(',', @r35i) eq 'RG008,RG008,RG008' && $own eq 'ok',
	'owner: an instance registered by another role and holding no bucket is refused to r35 (claimed_batches, pending_batches, a batched report: RG008, the registered owner as the instance calls check it) and answered to its owner')
  or diag(join(',', @r35i) . " / owner: $own");

# bad input: the whole call's SQLSTATEs, as on one server
my $one_row = "ARRAY[ROW('$s2', '$b2', $e2, 'accepted', NULL)::gridha.submission_report]";
my @whole = map { code($_) } (
	"SELECT * FROM gridha.report_submissions(NULL, $one_row)",
	"SELECT * FROM gridha.report_submissions('$ID{A}', NULL::gridha.submission_report[])",
	"SELECT * FROM gridha.report_statuses('$ID{A}', ARRAY[[ROW('$s0', '$b0', $e0, 'committed', NULL)::gridha.status_report]])",
	"SELECT * FROM gridha.report_submissions('$ID{A}', ARRAY['$s2'], ARRAY['$b2', 'x'], ARRAY[$e2]::bigint[], ARRAY['accepted'])",
	"BEGIN READ ONLY; SELECT * FROM gridha.report_submissions('$ID{A}', $one_row); ROLLBACK",
	"SELECT * FROM gridha.claimed_batches('$ID{A}', -1)",
	"SELECT * FROM gridha.pending_batches('$ID{A}', NULL)",
	"SELECT gridha.verify_batch('$ID{A}', '', '$b2', $e2)",
	"SELECT gridha.verify_batch(NULL, '$s2', '$b2', $e2)");
my $after_w = one($snap);
ok(join(',', @whole) eq '22004,22004,22023,22023,25006,22023,22004,22023,22004' && $after_w eq $before_r,
	'bad input: NULL instance or reports (22004), two dimensions or arrays of different lengths (22023), a read-only transaction (25006), a negative or NULL max_batches (22023, 22004), an empty or NULL id for verify_batch (22023, 22004), as on one server; nothing changes')
  or diag(join(',', @whole));

# bad rows: each refused alone with its SQLSTATE, in the order given
my $bad = run("SELECT concat_ws('|', coalesce(service_id, '-'), coalesce(status::text, '-'), sqlstate, message)
  FROM gridha.report_submissions('$ID{A}', ARRAY[ROW('$s2', NULL, $e2, 'accepted', NULL)::gridha.submission_report,
    ROW('', '$b2', $e2, 'accepted', NULL)::gridha.submission_report,
    ROW('$s2', '$b2', -1, 'accepted', NULL)::gridha.submission_report,
    ROW('$s2', '$b2', $e2, NULL, NULL)::gridha.submission_report,
    NULL::gridha.submission_report]);
SELECT concat_ws('|', service_id, coalesce(status::text, '-'), sqlstate, message)
  FROM gridha.report_submissions('$ID{A}', ARRAY['$s2'], ARRAY['$b2'], ARRAY[$e2]::bigint[], ARRAY['maybe'])");
my $after_b = one($snap);
my $want_bad = join("\n",
	"$s2|-|22004|batch_id must not be null",
	"|-|22023|service_id must not be empty",
	"$s2|-|22023|epoch must not be negative",
	"$s2|-|22004|outcome must not be null",
	"-|-|22004|service_id must not be null",
	"$s2|-|RG004|unknown submission outcome \"maybe\"");
ok($bad eq $want_bad && $after_b eq $before_r,
	'bad rows: a NULL batch_id, an empty service_id, a negative epoch, a NULL outcome, a NULL row, an unknown outcome (array form) are each refused alone with the single server\'s SQLSTATE and message; nothing changes')
  or diag("$bad\nwant:\n$want_bad");

# an operator (gridha_admin) reads the bucket tables, every column but the
# payload, and writes none; a submitter reads none of them
$coord->safe_psql('c35', q{CREATE ROLE r35admin LOGIN IN ROLE gridha_admin;});
my $counts = q{SELECT concat_ws('/', (SELECT count(*) FROM gridha.bucket_claims WHERE holder IS NOT NULL),
       (SELECT count(*) FROM gridha.bucket_services),
       (SELECT count(status) FROM gridha.bucket_batches WHERE status = 'committed'))};
my $owner_counts = one($counts);
my $admin_counts = '';
$coord->psql('c35', $counts, stdout => \$admin_counts, extra_params => [ '-U', 'r35admin' ]);
my @denied = map { code(@$_) } (
	[ 'SELECT payload FROM gridha.bucket_batches LIMIT 1', 'r35admin' ],
	[ 'UPDATE gridha.bucket_claims SET epoch = epoch WHERE bucket = 0', 'r35admin' ],
	[ "SELECT * FROM gridha.claimed_batches('$ID{A}')", 'r35admin' ],
	[ 'SELECT count(*) FROM gridha.bucket_claims', 'r35' ],
	[ 'SELECT count(status) FROM gridha.bucket_batches', 'r35' ]);
ok($admin_counts eq $owner_counts && $owner_counts =~ m{^\d+/60/\d+$} && join(',', @denied) eq join(',', ('42501') x 5),
	'monitor: gridha_admin reads bucket_claims, bucket_services and bucket_batches (as their owner does) but not the payload, writes none of them and calls no instance call; a submitter reads none of them (42501)')
  or diag("admin $admin_counts, owner $owner_counts; " . join(',', @denied));

# the end of these batches: the 7 committed by report_statuses, the stale
# one reported again at its epoch through the array forms
my $st_rows = join(', ', map { "ROW('$_->[0]', '$_->[1]', $_->[2], 'committed', NULL)::gridha.status_report" }
	  @a_got[ 0, 1, 3 .. 7 ]);
my $fin = run("SELECT string_agg(coalesce(status::text, sqlstate), ',') FROM gridha.report_statuses('$ID{A}', ARRAY[$st_rows]);
SELECT string_agg(coalesce(status::text, sqlstate), ',') FROM gridha.report_submissions('$ID{A}', ARRAY['$s2'], ARRAY['$b2'], ARRAY[$e2]::bigint[], ARRAY['ACCEPTED']);
SELECT string_agg(coalesce(status::text, sqlstate), ',') FROM gridha.report_statuses('$ID{A}', ARRAY['$s2'], ARRAY['$b2'], ARRAY[$e2]::bigint[], ARRAY['Committed']);");
my $committed = one("SELECT count(*) FROM gridha.bucket_batches WHERE status = 'committed' AND batch_id IN ("
	  . join(', ', map { "'$_->[1]'" } @a_got) . ")");
ok($fin eq join(',', ('committed') x 7) . "\npending\ncommitted" && $committed eq '8',
	'batched: report_statuses commits the 7, the array forms of report_submissions and report_statuses report the eighth (words in any case): all 8 committed')
  or diag("$fin / $committed");

# ---------------------------------------------------------------------------
# to the end

my $left;
for my $r (1 .. 200)
{
	round(qw(A B));
	$left = one(q{SELECT count(*) FROM gridha.bucket_batches WHERE status <> 'committed'});
	last if $left eq '0';
}
ok($left eq '0', 'end: A and B commit every batch (bounded: 200 rounds)');

ok(!@order_bad, 'run: every hand-out was its service\'s first batch not committed yet (order per service)')
  or diag(join("\n", @order_bad[ 0 .. ($#order_bad > 9 ? 9 : $#order_bad) ]));
ok($multi_flight == 0, 'run: no service ever had more than one batch in flight after a round\'s hand-outs');
ok(!@epoch_bad && keys %seen_epoch > 0,
	'run: each (bucket, epoch) was handed out to one instance, and a bucket\'s epochs never went down')
  or diag(join("\n", @epoch_bad[ 0 .. ($#epoch_bad > 9 ? 9 : $#epoch_bad) ]));

my $lost = one(q{SELECT count(*) || '/' || count(DISTINCT service_id) || '/'
       || count(*) FILTER (WHERE status = 'committed') FROM gridha.bucket_batches});
my $unordered = one(q{SELECT count(*) FROM (
  SELECT service_id, seq, rank() OVER (PARTITION BY service_id ORDER BY seq) AS by_seq,
         rank() OVER (PARTITION BY service_id ORDER BY finished_at, seq) AS by_time
    FROM gridha.bucket_batches) x WHERE by_seq <> by_time});
my $n = $NSERVICES * $NBATCHES;
ok($lost eq "$n/$NSERVICES/$n" && $unordered eq '0',
	"end: nothing lost ($n batches, each committed once) and each service's committed in seq order")
  or diag("$lost, out of order: $unordered");

my $rel = run("SELECT gridha.release_claims('$ID{A}'); SELECT gridha.release_claims('$ID{B}');");
my $still = one("SELECT count(*) FROM gridha.bucket_claims WHERE holder IN ('$ID{A}', '$ID{B}')");
ok($rel =~ /^\d+\n\d+$/ && $still eq '0',
	'end: release_claims gives back every bucket of A and B (nothing in flight)')
  or diag("$rel / $still");

$_->stop foreach @nodes;
