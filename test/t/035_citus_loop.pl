# test/t/035_citus_loop.pl: the Citus mode's instance calls (issue 43,
# item 2; docs/citus.md, "Built: the instance calls"): three instances on
# the coordinator call gridha.next_batch, gridha.report_submission and
# gridha.report_status (not the per-bucket functions) over 60 services in
# 64 buckets; the buckets are balanced between them, and the buckets of an
# instance that stops are taken over by the others.
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

my $NTESTS = 13;
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
