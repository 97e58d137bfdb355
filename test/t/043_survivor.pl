# test/t/043_survivor.pl: a crash, a graceful stop and one survivor; a
# paused instance past its hard expiry; an operator's expiry (issue 26,
# cases 2 and 3), played with real processes: psql sessions as instances.
#
# The common start (a database of its own per case, 10 services x
# SURVIVOR_BATCHES batches, default settings: soft expiry 30 s):
#   a   acquires (it is alone: it takes all 10), hands out one batch, and
#       its psql is killed (SIGKILL): its session ends, the batch stays
#       submitting under a's epoch
#   b   acquires (a's session is gone: all 10, the one submitting too),
#       hands out one batch, calls release_claims (the batch in hand keeps
#       its claim) and exits, as a clean shutdown does
# Case 2: c starts, the only instance working (a loop of next_batch ->
#   report_status('committed'), SURVIVOR_WORK_MS per batch, SURVIVOR_IDLE_MS
#   sleep after an empty poll). Checked: every service with work is held by
#   c within 1 s of its first idle poll, and within 1 s of its first poll
#   (a crashed, holding nothing once b took its claims, its lease still
#   running, and b released: neither counts as live), a's and b's late reports
#   (new sessions, their old epochs) are refused with RG001, hand-outs
#   keep each service's order, c's hand-outs carry epochs above a's and
#   b's, and every batch ends committed.
# Case 3: after the common start, c (its session with gridha.soft_expiry
#   1s, hard_expiry 2s, renew_interval 500ms: its lease runs out in real
#   time, nothing is moved by hand) hands out a batch on each service it
#   took (next_batches) and is frozen (SIGSTOP of its psql) until its hard
#   expiry has passed; d starts (default settings). Checked: d holds every
#   service with work within 1 s of its first idle poll and of its first
#   poll, d hands out again each batch c left submitting under a bumped
#   epoch, c's late reports after SIGCONT (its own session) are refused
#   with RG001, order, every batch committed.
# Operator: e and f each hold 10 idle claims (their share of 20); one of
#   e's services gets work and e hands out its head (in flight, e live and
#   idle, its session open); f polls. Checked: f does not take e's head in
#   flight while e lives; after an operator's UPDATE gridha.service_claims
#   SET hard_expiry = now() - interval '1 s' on that claim, f holds it
#   within 1 s and hands its head out again under a bumped epoch; e's late
#   report is refused; order.
#
# The measured seconds (server clock: survivor_watch sees every service
# with work held by the survivor; survivor_loop records its first poll and
# first empty poll) are printed as TAP comments, and appended to
# SURVIVOR_FIGURES when set (test/bench/scale.sh, part survivor). The SQL
# helpers are test/t/data/043_survivor.sql.
#
# Environment: SURVIVOR_BATCHES [8] SURVIVOR_WORK_MS [20] SURVIVOR_IDLE_MS
# [100] SURVIVOR_SECONDS [15] (a survivor's loop and a watch end by then at
# the latest), SURVIVOR_CASES [2 3 op] (7, 6 and 5 tests),
# SURVIVOR_FIGURES [unset].
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded and no workers; the instances are psql
# sessions of the bootstrap superuser. Run by `make test` (test/run.sh,
# part 043_survivor) and by `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $batches = $ENV{SURVIVOR_BATCHES} // 8;
my $work_ms = $ENV{SURVIVOR_WORK_MS} // 20;
my $idle_ms = $ENV{SURVIVOR_IDLE_MS} // 100;
my $seconds = $ENV{SURVIVOR_SECONDS} // 15;
my @cases = split ' ', ($ENV{SURVIVOR_CASES} // '2 3 op');
my $figures = $ENV{SURVIVOR_FIGURES};
my %tests_of = ('2' => 7, '3' => 6, 'op' => 5);

my $n_plan = 0;
$n_plan += $tests_of{$_} // 0 foreach @cases;
plan skip_all => "SURVIVOR_CASES ('@cases') names none of 2, 3, op" if $n_plan == 0;
plan tests => $n_plan;

my $work = PostgreSQL::Test::Utils::tempdir;
my $node = gridha_node('survivor');
my $db;
my %S;          # instance name -> its psql session { h, in }
my @started;    # every harness started here, ended at the end
my $resn = 0;

# sqlv($sql): what psql printed (errors go to the test's log)
sub sqlv
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	$node->psql($db, $sql, stdout => \$out, stderr => \$err);
	diag($err) if $err ne '';
	return $out;
}

# new_db($name): database $name (made afresh, with the helpers) becomes $db
sub new_db
{
	($db) = @_;
	$node->safe_psql('postgres', "DROP DATABASE IF EXISTS $db WITH (FORCE)");
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, slurp_file("$FindBin::RealBin/data/043_survivor.sql"));
	return;
}

# sess_open($name, $pgoptions): instance $name's psql session (application
# name survivor-$name) that runs what sess/sess_send give it
sub sess_open
{
	my ($name, $options) = @_;
	my $in = '';
	local $ENV{PGAPPNAME} = "survivor-$name";
	local $ENV{PGOPTIONS} = $options // '';
	my $h = IPC::Run::start([ 'psql', '-X', '-q', '-A', '-t', '-d', $node->connstr($db) ],
		'<', \$in, '>', "$work/$name.out", '2>&1');
	push @started, $h;
	$S{$name} = { h => $h, in => \$in };
	return;
}

sub pump_sess
{
	my ($name) = @_;
	eval { $S{$name}{h}->pump_nb; };
	return;
}

# sess_send($name, $sql): $sql to the session, not waited for
sub sess_send
{
	my ($name, $sql) = @_;
	${ $S{$name}{in} } .= "$sql\n";
	pump_sess($name);
	return;
}

# sess($name, $sql, $wait): runs $sql (one statement, no semicolon) in the
# session and returns its result once it is done ($wait, 10 s, at most;
# undef when not done by then). The result goes to a file of its own (\g),
# closed when the statement ends, then a shell command (\!) marks it done.
sub sess
{
	my ($name, $sql, $wait) = @_;
	my $res = "$work/$name.res." . ++$resn;
	${ $S{$name}{in} } .= "$sql \\g $res\n\\! touch $res.done\n";
	wait_until($wait // 10, sub { pump_sess($name); -e "$res.done" }) or return undef;
	my $r = slurp_file($res);
	chomp $r;
	return $r;
}

# sess_close($name): end of input, psql exits and its session ends
sub sess_close
{
	my ($name) = @_;
	eval { $S{$name}{h}->finish; };
	return;
}

# gone($name): no backend of instance $name's session is left
sub gone
{
	return sqlv("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'survivor-$_[0]'") eq '0';
}

# background($name, $file, $sql): psql running $sql, its output to $file,
# as instance $name's application name
sub background
{
	my ($name, $file, $sql) = @_;
	local $ENV{PGAPPNAME} = "survivor-$name";
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($db), '-c', $sql ],
		'<', \undef, '>', $file, '2>&1', IPC::Run::timeout($seconds + 20));
	push @started, $h;
	return $h;
}

# wait_done($h): the background psql has ended (killed when its time ran out)
sub wait_done
{
	my ($h) = @_;
	eval { $h->finish; 1 } or eval { $h->kill_kill(grace => 1); };
	return;
}

# common_start: a takes all, hands out one batch, dies; b takes them, hands
# out one, releases and exits
sub common_start
{
	sqlv("CALL survivor_enqueue('v', 10, $batches)");
	sess_open('a');
	my $a_took = sess('a', "SELECT count(*) FROM gridha.acquire_claims(survivor_instance('a'))") // 'none';
	sess('a', "SELECT survivor_handout('a', 1)");
	$S{a}{h}->signal('KILL');
	sess_close('a');
	wait_until(10, sub { gone('a') }) or diag("a's backend is still there");
	sess_open('b');
	my $b_took = sess('b', "SELECT count(*) FROM gridha.acquire_claims(survivor_instance('b'))") // 'none';
	sess('b', "SELECT survivor_handout('b', 1)");
	my $b_released = sess('b', "SELECT gridha.release_claims(survivor_instance('b'))") // 'none';
	sess_close('b');
	wait_until(10, sub { gone('b') }) or diag("b's backend is still there");
	diag("start: a took $a_took and was killed, b took $b_took, released $b_released and exited; "
		  . sqlv(q{SELECT count(*) FILTER (WHERE claimant IS NULL) || ' free, '
		                 || count(*) FILTER (WHERE claimant = survivor_instance('b')) || ' held by b'
		            FROM gridha.service_claims}));
	return;
}

# watch_start($name): survivor_watch of $name in the background
sub watch_start
{
	my ($name) = @_;
	my $h = background("watch-$name", "$work/watch.out", "CALL survivor_watch('$name', $seconds)");
	usleep(300_000);
	return $h;
}

# loop_start($name): survivor_loop of $name in a session of its own
sub loop_start
{
	my ($name) = @_;
	return background($name, "$work/loop-$name.out",
		"CALL survivor_loop('$name', $seconds, $idle_ms, $work_ms)");
}

sub is_num { return defined $_[0] && $_[0] =~ /^[0-9]+(\.[0-9]*)?$/; }

# held_checks($case, $name): the timing tests of survivor $name (its watch
# and loop must have ended): every service with work held within 1 s of its
# first idle poll, and within 1 s of its first poll: it is the only live
# instance, so its work share is all the work (a crashed instance stops
# counting at once, issue 26, "Live means able to work"). Prints the
# seconds from its first poll and from its first idle poll.
sub held_checks
{
	my ($case, $name) = @_;
	my $held = slurp_file("$work/watch.out");
	$held =~ s/\s+\z//;
	my ($first, $idle) = split /\|/,
	  sqlv("SELECT extract(epoch FROM first_poll), coalesce(extract(epoch FROM first_idle)::text, '')
	          FROM survivor_polls WHERE who = '$name'"), -1;
	$idle //= '';
	my ($s_first, $s_idle) = ('none', 'none');
	if (is_num($held) && is_num($first))
	{
		$s_first = sprintf('%.3f', $held - $first);
		$s_idle = is_num($idle) ? sprintf('%.3f', $held > $idle ? $held - $idle : 0) : '0.000';
	}
	diag("case $case: every service with work held by $name $s_first s after its first poll, "
		  . "$s_idle s after its first idle poll (0: held before it)"
		  . (is_num($idle) && is_num($first)
			? sprintf(' (first idle poll %.3f s after the first poll)', $idle - $first)
			: ''));
	append_to_file($figures, "case$case $s_first $s_idle\n") if $figures;
	ok($s_idle ne 'none' && $s_idle <= 1.0,
		"case $case: $name holds every service with work within 1 s of its first idle poll");
	ok($s_first ne 'none' && $s_first <= 1.0,
		"case $case: $name, the only live instance, holds every service with work within 1 s of its first poll (a, crashed, does not count)"
	);
	if ($s_first eq 'none')
	{
		diag(sqlv(q{SELECT service_id || ' held by ' || coalesce(claimant::text, 'nobody') || ', epoch ' || epoch
		              FROM gridha.service_claims ORDER BY 1}));
	}
	return;
}

# late_check($case, $name, $session, $service): ${name}'s late reports
# (accepted, then committed) of the last batch of each service it was
# handed (of $service only, when given), in instance $session's open
# session (undef: a new one), are all refused with RG001
sub late_check
{
	my ($case, $name, $session, $only) = @_;
	$only //= '%';
	my ($acc, $com);
	if (defined $session)
	{
		$acc = sess($session, "SELECT survivor_late('$name', 'accepted', '$only')") // 'no answer';
		$com = sess($session, "SELECT survivor_late('$name', 'committed', '$only')") // 'no answer';
	}
	else
	{
		foreach my $r ([ \$acc, 'accepted' ], [ \$com, 'committed' ])
		{
			my ($out, $err) = ('', '');
			$node->psql($db, "SELECT survivor_late('$name', '$r->[1]', '$only')",
				stdout => \$out, stderr => \$err);
			${ $r->[0] } = $out . $err;
		}
	}
	ok($acc =~ /\ARG001 x [0-9]+\z/ && $com =~ /\ARG001 x [0-9]+\z/,
		"case $case: ${name}'s late reports (accepted: $acc; committed: $com) are refused with RG001");
	return;
}

sub order_check
{
	my ($case) = @_;
	my $v = sqlv('SELECT count(*) FROM survivor_order_violations()');
	ok($v eq '0',
		"case $case: every hand-out came after every earlier batch of its service was committed ($v violations)")
	  or diag(sqlv('SELECT * FROM survivor_order_violations() LIMIT 5'));
	return;
}

sub committed_check
{
	my ($case) = @_;
	my $left = sqlv("SELECT count(*) FROM gridha.batches WHERE status <> 'committed'");
	ok($left eq '0',
		"case $case: every batch (" . sqlv('SELECT count(*) FROM gridha.batches') . ") ends committed ($left not)");
	return;
}

# ---------------------------------------------------------------------------
# case 2: a crash, a graceful stop, one survivor
# ---------------------------------------------------------------------------

sub case2
{
	new_db('gridha_survivor2');
	common_start();
	my $watch = watch_start('c');
	my $loop = loop_start('c');
	wait_done($watch);
	late_check(2, 'a');
	late_check(2, 'b');
	wait_done($loop);
	held_checks(2, 'c');
	order_check(2);
	my $v = sqlv(q{SELECT count(*) FROM survivor_log l
	                WHERE l.who = 'c' AND l.epoch <= (SELECT max(o.epoch) FROM survivor_log o
	                                                   WHERE o.who IN ('a', 'b') AND o.service_id = l.service_id)});
	my $n = sqlv("SELECT count(*) FROM survivor_log WHERE who = 'c'");
	ok($v eq '0' && is_num($n) && $n > 0,
		"case 2: c's $n hand-outs carry epochs above a's and b's on their service ($v do not)");
	committed_check(2);
	return;
}

# ---------------------------------------------------------------------------
# case 3: a paused instance past its hard expiry
# ---------------------------------------------------------------------------

sub case3
{
	new_db('gridha_survivor3');
	common_start();
	sess_open('c', '-c gridha.soft_expiry=1s -c gridha.hard_expiry=2s -c gridha.renew_interval=500ms');
	my $c_handed = sess('c', "SELECT survivor_handout('c', 10)") // 'none';
	my $c_held = sqlv("SELECT count(*) FROM gridha.service_claims WHERE claimant = survivor_instance('c')");
	$S{c}{h}->signal('STOP');
	wait_until(
		10,
		sub {
			sqlv(q{SELECT hard_expiry < now() - interval '200 ms' FROM gridha.instances
			        WHERE instance_id = survivor_instance('c')}) eq 't';
		}) or diag("c's hard expiry has not passed");
	diag("case 3: c took $c_held services, handed out $c_handed batches and was stopped until past its hard expiry");
	my $watch = watch_start('d');
	my $loop = loop_start('d');
	wait_done($watch);
	$S{c}{h}->signal('CONT');
	# d holds the work at once, but its loop hands the batches out one
	# after the other (its loop sleeps between them): wait for them
	my $v;
	wait_until(
		10,
		sub {
			$v = sqlv(q{SELECT count(*) FROM survivor_log l
			             WHERE l.who = 'c'
			               AND NOT EXISTS (SELECT 1 FROM survivor_log x
			                                WHERE x.who = 'd' AND x.service_id = l.service_id
			                                  AND x.batch_id = l.batch_id AND x.epoch > l.epoch
			                                  AND x.attempt > l.attempt)});
			$v eq '0';
		});
	ok($v eq '0' && is_num($c_handed) && $c_handed > 0,
		"case 3: d handed out again, under a bumped epoch, each of the $c_handed batches c left submitting ($v not)");
	late_check(3, 'c', 'c');
	sess_close('c');
	wait_done($loop);
	held_checks(3, 'd');
	order_check(3);
	committed_check(3);
	return;
}

# ---------------------------------------------------------------------------
# an operator's expiry of one claim of a live instance
# ---------------------------------------------------------------------------

sub case_op
{
	new_db('gridha_survivor_op');
	sqlv("CALL survivor_enqueue('o', 20, 1)");
	sess_open('e');
	sess_open('f');
	foreach my $call (
		'gridha.renew_claims(survivor_instance(\'%s\'))',
		'count(*) FROM gridha.acquire_claims(survivor_instance(\'%s\'))',
		'survivor_cycle_all(\'%s\')')
	{
		sess($_, 'SELECT ' . sprintf($call, $_)) foreach qw(e f);
	}
	my $x = sqlv("SELECT min(service_id) FROM gridha.service_claims WHERE claimant = survivor_instance('e')");
	sqlv("SELECT gridha.enqueue('$x', 'b' || lpad(i::text, 3, '0'), '\\x00') FROM generate_series(2, 3) AS i");
	sess('e', "SELECT survivor_handout('e', 1)");
	diag('operator: claims e/f '
		  . sqlv(q{SELECT count(*) FILTER (WHERE claimant = survivor_instance('e')) || '/'
		                 || count(*) FILTER (WHERE claimant = survivor_instance('f'))
		            FROM gridha.service_claims})
		  . ", e's $x in flight");
	sess_send('f', "CALL survivor_loop('f', $seconds, $idle_ms, $work_ms);");
	wait_until(10,
		sub { sqlv("SELECT first_idle < now() - interval '1200 ms' FROM survivor_polls WHERE who = 'f'") eq 't' })
	  or diag('f has not polled idle');
	my $before = sqlv("SELECT claimant = survivor_instance('e') FROM gridha.service_claims WHERE service_id = '$x'");
	ok($before eq 't', "operator: f, idle, leaves e's head in flight with e while e lives");
	my $watch = watch_start('f');
	my $t_op = sqlv("UPDATE gridha.service_claims SET hard_expiry = now() - interval '1 s'
	                  WHERE service_id = '$x' RETURNING extract(epoch FROM clock_timestamp())");
	wait_done($watch);
	my $held = slurp_file("$work/watch.out");
	$held =~ s/\s+\z//;
	my $s = 'none';
	$s = sprintf('%.3f', $held > $t_op ? $held - $t_op : 0) if is_num($held) && is_num($t_op);
	diag("operator: f held e's expired claim $s s after the UPDATE");
	append_to_file($figures, "op $s\n") if $figures;
	ok($s ne 'none' && $s <= 1.0,
		'operator: an idle f holds the claim whose hard_expiry an operator moved into the past within 1 s');
	late_check('op', 'e', 'e', $x);
	sess('f', 'SELECT 1', $seconds + 5);    # f's loop has ended
	my $v = sqlv(q{SELECT count(*) FROM survivor_log x JOIN survivor_log l USING (service_id, batch_id)
	                WHERE l.who = 'e' AND x.who = 'f' AND x.epoch > l.epoch AND x.attempt > l.attempt});
	ok($v eq '1', "operator: f handed e's batch out again under a bumped epoch");
	order_check('op');
	sess_close($_) foreach qw(e f);
	return;
}

my %run = ('2' => \&case2, '3' => \&case3, 'op' => \&case_op);
foreach my $c (@cases)
{
	$run{$c}->() if $run{$c};
}

$node->stop;

# every psql started here ends (at a die or a signal too)
END
{
	local $?;
	foreach my $h (@started)
	{
		eval { $h->signal('CONT'); };
		eval { $h->kill_kill(grace => 1); };
	}
}
