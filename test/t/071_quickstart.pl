# test/t/071_quickstart.pl: the README's quick start runs as written.
#
# Reads README.md afresh and takes from it:
#   setup   the fenced block after "<!-- quickstart-setup -->": the server
#           settings it writes (lines "name = 'value'") are appended to the
#           cluster's postgresql.conf and applied by a restart, after the
#           cluster's own settings, so they decide (a README that stopped
#           preloading gridha would fail here). The block's other lines (the
#           conf.d path, pg_ctlcluster, createuser) are the host's own: the
#           test's cluster stands in for them, already running with the
#           user who runs the test as its superuser. The Install section's
#           apt-get and make are what test/run.sh does before any test.
#   blocks  every fenced sh block after a "<!-- quickstart -->" line, run in
#           order as one bash script (bash -e -o pipefail), from an empty
#           scratch directory, with PGHOST and PGPORT naming the cluster:
#           the quick start needs no source tree (a user who installed the
#           .deb or from PGXN has none). psql reads a psqlrc that sets
#           ON_ERROR_STOP, so a failing statement fails the run; the script
#           runs in a process group of its own, ended at exit with whatever
#           it started.
#
# Then checks: the script exited 0 within QUICKSTART_TIMEOUT seconds (180);
# every batch in the quick-start database is committed; the batches a worker
# handed out reached the quick start's ledger stand-in (its table
# public.ledger) in each service's enqueue order, each after the one before
# it was committed; at least one batch was handed out by a psql instance and
# one by a worker; no worker runs afterwards. Words: "quick-start database"
# is the gridha.database of the setup; the workers run as the role the setup
# names as gridha.worker_role, which the quick start creates a member of
# gridha_submitter and grants its ledger table.
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded. Run by `make test` (test/run.sh, part
# 071_quickstart) and by `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More tests => 8;

my $timeout = $ENV{QUICKSTART_TIMEOUT} // 180;
my $work = PostgreSQL::Test::Utils::tempdir;
my $run = "$work/run";
mkdir $run or die "mkdir $run: $!";

# What the README says: the setup's settings ([name, value]) and the
# blocks as one script (each after a comment naming its line).
my @lines = split /\n/, slurp_file(gridha_repo() . '/README.md'), -1;

# block_after($i): (first line number, language, body lines) of the fenced
# block that starts after line $i with only blank lines between; () if none.
sub block_after
{
	my ($i) = @_;
	my $j = $i + 1;
	$j++ while $j < @lines && $lines[$j] !~ /\S/;
	return () if $j >= @lines || $lines[$j] !~ /^```/;
	my $lang = substr($lines[$j], 3);
	$lang =~ s/^\s+|\s+$//g;
	my $k = $j + 1;
	$k++ while $k < @lines && $lines[$k] !~ /^```/;
	return ($j + 1, $lang, [ @lines[ $j + 1 .. $k - 1 ] ]);
}

my (@setup, $script);
my $nblocks = 0;
for my $i (0 .. $#lines)
{
	(my $mark = $lines[$i]) =~ s/^\s+|\s+$//g;
	if ($mark eq '<!-- quickstart-setup -->')
	{
		my ($start, $lang, $body) = block_after($i);
		next unless $body;
		foreach (@$body)
		{
			push @setup, [ $1, $2 ] if /^\s*([A-Za-z_][\w.]*)\s*=\s*'([^']*)'\s*(#.*)?$/;
		}
	}
	elsif ($mark eq '<!-- quickstart -->')
	{
		my ($start, $lang, $body) = block_after($i);
		if (!$body)
		{
			$script .= sprintf("echo 'README.md line %d: <!-- quickstart --> is not followed by a fenced block' >&2\nexit 2\n",
				$i + 1);
		}
		elsif ($lang !~ /^(sh|bash|shell)$/)
		{
			$script .= sprintf("echo 'README.md line %d: a quickstart block must be sh, not %s' >&2\nexit 2\n",
				$start, $lang);
		}
		else
		{
			$script .= sprintf("# --- README.md line %d\n%s\n", $start, join("\n", @$body));
		}
		$nblocks++;
	}
}
my %set = map { $_->[0] => $_->[1] } @setup;
my $db = $set{'gridha.database'} // '';
my $preload = $set{shared_preload_libraries} // '';
$preload =~ s/\s//g;
# (a failure here ends the test: the tests after it never run, and count
# as failed by the plan)
if (!ok(@setup && $db ne '' && ",$preload," =~ /,gridha,/,
		"README.md's quick-start setup preloads gridha and names the workers' database ($db)"))
{
	diag('settings found after <!-- quickstart-setup -->: '
		  . join(', ', map { "$_->[0] = '$_->[1]'" } @setup));
	exit 1;
}
ok($nblocks >= 3,
	$nblocks >= 3
	? "README.md has $nblocks quick-start blocks"
	: "README.md has at least 3 quick-start blocks (found $nblocks)")
  or exit 1;
append_to_file("$work/quickstart.sh", $script);

# The setup's settings, after the cluster's own so that they win.
my $node = gridha_node('quickstart');
$node->append_conf('postgresql.conf',
	join('', map { "$_->[0] = '$_->[1]'\n" } @setup));
$node->restart;

# The blocks, from the empty directory, as the cluster's superuser
append_to_file("$work/psqlrc", "\\set ON_ERROR_STOP on\n");
my $pid_file = "$work/quickstart.pid";
my $qs;
my $finished;
{
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	local $ENV{PSQLRC} = "$work/psqlrc";
	delete local $ENV{PGUSER};
	delete local $ENV{PGDATABASE};
	# setsid: a session and process group of its own (the pid the script's
	# shell writes), ended at exit
	$qs = IPC::Run::start(
		[
			'setsid', '-w', 'bash', '-c', 'echo $$ >"$1"; cd "$2" && exec bash -e -o pipefail "$3"',
			'quickstart', $pid_file, $run, "$work/quickstart.sh"
		],
		'<', \undef, '>', "$work/quickstart.out", '2>&1',
		IPC::Run::timeout($timeout));
	$finished = eval { $qs->finish; 1 };
}

# stop_group(): whatever the quick start left running
sub stop_group
{
	my $pid = -s $pid_file ? slurp_file($pid_file) : '';
	$pid =~ s/\s//g;
	kill('TERM', -$pid) if $pid =~ /^\d+$/;
}

sub tail_out
{
	my @out = split /\n/, slurp_file("$work/quickstart.out");
	return join("\n", @out[ ($#out > 29 ? $#out - 29 : 0) .. $#out ]);
}

if (!$finished)
{
	fail("the quick start ran to its end within ${timeout}s");
	diag(tail_out());
	stop_group();
	eval { $qs->kill_kill };
	exit 1;
}
my $rc = $qs->result(0);
ok($rc == 0, "the quick start's commands ran without an error" . ($rc == 0 ? '' : " (exit $rc)"))
  or diag(tail_out());
stop_group();

# check_sql($name, $sql): one test, that $sql returns true in the
# quick-start database
sub check_sql
{
	my ($name, $sql) = @_;
	my ($r, $out, $err) = $node->psql($db, $sql);
	return 1 if ok($out eq 't', $name);
	diag("got: $out$err");
	return 0;
}

sub show
{
	my ($r, $out, $err) = $node->psql($db, $_[0]);
	diag("$out$err");
}

check_sql('every batch of the quick start is committed',
	q{SELECT count(*) >= 2 AND count(*) FILTER (WHERE status <> 'committed') = 0 FROM gridha.batches})
  or show('SELECT service_id, batch_id, status FROM gridha.batches ORDER BY service_id, seq');
check_sql('a psql instance handed out and reported batches by hand',
	q{SELECT count(*) > 0 FROM gridha.batches b JOIN gridha.instances i USING (instance_id)
	   WHERE i.kind <> 'worker' AND b.status = 'committed'});
check_sql('a background worker handed out batches that ended committed',
	q{SELECT count(*) > 0 FROM gridha.batches b JOIN gridha.instances i USING (instance_id)
	   WHERE i.kind = 'worker' AND b.status = 'committed'});

# The worker's services, in enqueue order, against the ledger stand-in's
# table (public.ledger of the quick start): the same batches, received in
# seq order, each after the one before it was committed (one in flight).
check_sql("the worker's batches reached the ledger stand-in in enqueue order, one in flight",
	q{WITH w AS (SELECT b.service_id, b.batch_id, b.seq, b.finished_at, l.received_at,
	                    lag(b.finished_at) OVER (PARTITION BY b.service_id ORDER BY b.seq) AS prev_final,
	                    row_number() OVER (PARTITION BY b.service_id ORDER BY b.seq) AS by_seq,
	                    row_number() OVER (PARTITION BY b.service_id ORDER BY l.received_at) AS by_arrival
	               FROM gridha.batches b LEFT JOIN public.ledger l USING (batch_id)
	              WHERE b.service_id IN (SELECT b2.service_id FROM gridha.batches b2
	                                       JOIN gridha.instances i USING (instance_id) WHERE i.kind = 'worker'))
	  SELECT count(*) > 0
	         AND count(*) FILTER (WHERE received_at IS NULL OR by_seq <> by_arrival
	                              OR received_at < prev_final) = 0
	    FROM w})
  or show(q{SELECT b.service_id, b.batch_id, b.seq, b.finished_at, l.received_at
	          FROM gridha.batches b LEFT JOIN public.ledger l USING (batch_id)
	         ORDER BY b.service_id, b.seq});

ok( wait_until(
		15,
		sub {
			my ($r, $out) = $node->psql($db, 'SELECT count(*) FROM gridha.workers');
			return $r == 0 && $out eq '0';
		}),
	"the quick start's last block stopped its worker");

$node->stop;
