# test/t/lib/GridhaTest.pm: what gridha's tests on PostgreSQL's TAP
# framework (test/t/*.pl) share beyond PostgreSQL::Test::Cluster: the
# repository's root, bounded waits, reading a server log from an offset
# (and its crash lines), the test ledger (test/dlt/ledger.py) as a child
# process and its order check, a cluster with gridha preloaded, psql
# helpers, and a database served by background workers (made, restarted
# with workers, waited for).
#
# A test loads it with
#	use FindBin;
#	use lib "$FindBin::RealBin/lib";
#	use GridhaTest;
#
# Each sub that another test file adds goes below the others, under a
# comment naming the file that needs it.

package GridhaTest;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use File::Basename qw(dirname);
use File::Spec;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(usleep);

our @EXPORT = qw(gridha_repo wait_until log_size log_since start_ledger
  stop_ledgers gridha_node gridha_conf);

my @ledgers;

# A test stopped by a signal (test/run.sh's time limit, ^C) dies instead,
# so that the END blocks run: the framework stops the test's clusters and
# stop_ledgers() its ledgers, and nothing is left running.
$SIG{TERM} = $SIG{INT} = $SIG{HUP} = sub { die "stopped by signal $_[0]\n"; };

# gridha_repo(): the repository's root (test/t/lib is three levels down).
sub gridha_repo
{
	return File::Spec->rel2abs(dirname(__FILE__) . '/../../..');
}

# wait_until($seconds, $sub): call $sub every 0.2 s until it returns true or
# $seconds have passed; then its last result (true or false).
sub wait_until
{
	my ($seconds, $check) = @_;
	my $deadline = time() + $seconds;
	while (time() < $deadline)
	{
		return 1 if $check->();
		usleep(200_000);
	}
	return $check->() ? 1 : 0;
}

# log_size($file): the size of a server log now, to read from later.
sub log_size
{
	return -s $_[0] // 0;
}

# log_since($file, $offset): what the log got after $offset.
sub log_since
{
	my ($file, $offset) = @_;
	return slurp_file($file, $offset);
}

# start_ledger($dir, @args): test/dlt/ledger.py on a free port with @args,
# logging to $dir/ledger.log (its output in $dir/ledger.out). Returns a hash
# with url, log (the JSON-lines event log) and the handle. Dies when it does
# not start within 15 s. stop_ledgers() ends every ledger started here
# (also at exit).
sub start_ledger
{
	my ($dir, @args) = @_;
	my $port_file = "$dir/ledger.port";
	unlink $port_file;
	my $h = IPC::Run::start(
		[
			'python3', gridha_repo() . '/test/dlt/ledger.py',
			'--port', '0', '--port-file', $port_file, '--log', "$dir/ledger.log", @args
		],
		'<', \undef, '>', "$dir/ledger.out", '2>&1');
	push @ledgers, $h;
	wait_until(15, sub { -s $port_file })
	  or die "the test ledger did not start: " . slurp_file("$dir/ledger.out");
	my $port = slurp_file($port_file);
	$port =~ s/\s+//g;
	return { url => "http://127.0.0.1:$port", log => "$dir/ledger.log", handle => $h };
}

sub stop_ledgers
{
	foreach my $h (@ledgers)
	{
		eval { $h->signal('TERM'); $h->finish; };
	}
	@ledgers = ();
}

# gridha_conf(): the postgresql.conf lines of a test's cluster: gridha
# preloaded, room for workers, the server's own messages from WARNING up.
sub gridha_conf
{
	return q{
shared_preload_libraries = 'gridha'
max_worker_processes = 32
log_min_messages = warning
};
}

# gridha_node($name, $conf): a new cluster of the framework's, started, as
# the tests moved from test/suites run on (021_worker_race and the ones
# after it): gridha_conf() and $conf (postgresql.conf lines) after that.
sub gridha_node
{
	my ($name, $conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', gridha_conf() . ($conf // ''));
	$node->start;
	return $node;
}

# --- test/t/020_workers.pl, 030_client.pl, 016_dump_restore.pl -------------
# The test ledger's control, counts and log, for a ledger of start_ledger.
push @EXPORT, qw(ledger_control ledger_stat ledger_query);

# ledger_control($ledger, $json): POST $json to /control of a ledger that
# start_ledger started (stalls, failures, clear; see test/dlt/ledger.py).
# Dies when the ledger does not take it.
sub ledger_control
{
	my ($ledger, $json) = @_;
	require HTTP::Tiny;
	my $r = HTTP::Tiny->new(timeout => 10)->post("$ledger->{url}/control",
		{ content => $json, headers => { 'Content-Type' => 'application/json' } });
	die "ledger control $json: $r->{status} $r->{content}" unless $r->{success};
	return;
}

# ledger_stat($ledger, $name): one count of GET /stats.
sub ledger_stat
{
	my ($ledger, $name) = @_;
	require HTTP::Tiny;
	require JSON::PP;
	my $r = HTTP::Tiny->new(timeout => 10)->get("$ledger->{url}/stats");
	die "ledger stats: $r->{status} $r->{content}" unless $r->{success};
	return JSON::PP::decode_json($r->{content})->{$name};
}

# ledger_query($ledger, @args): the lines test/workers/ledger_query.py
# prints about the ledger's log (posts RESULT [SERVICES], queries DIALECT);
# dies when it fails.
sub ledger_query
{
	my ($ledger, @args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'python3', gridha_repo() . '/test/workers/ledger_query.py', $ledger->{log}, @args ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "ledger_query.py @args: $err";
	return grep { $_ ne '' } split /\n/, $out;
}

# --- test/t/029_ledger_answers.pl, 025_ledger_adapt.pl (crash_lines: 022,
# 023) -------------------------------------------------------------------
push @EXPORT, qw(log_lines_matching crash_lines);

# log_lines_matching($file, $offset, $regex): how many lines a server log got after
# $offset that match $regex.
sub log_lines_matching
{
	my ($file, $offset, $re) = @_;
	return scalar(grep { /$re/ } split /\n/, log_since($file, $offset));
}

# crash_lines($file, $offset): the lines a server log got after $offset
# that say a server process ended by a signal.
sub crash_lines
{
	my ($file, $offset) = @_;
	return grep { /terminated by signal/ } split /\n/, log_since($file, $offset);
}

# --- psql and the worker databases: 015_upgrade, 016_dump_restore,
# 020_workers to 030_client, 041_ratelimit_soak, 042_scale_soak, 060_fuzz ---
push @EXPORT, qw(psql_value worker_database worker_conf restart_with_workers
  workers_registered wait_for_workers psql_as);

# psql_value($node, $db, $sql): what psql printed in $db (unaligned, tuples
# only), '' after an error.
sub psql_value
{
	my ($node, $db, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql($db, $sql, stdout => \$out, stderr => \$err);
	return $rc == 0 ? $out : '';
}

# worker_database($node, $db, $sql, quiet => 1): database $db, made anew,
# with gridha and gridha_test_worker, the LOGIN role the tests' workers run
# as (a member of gridha_submitter only), then $sql run in it by the same
# psql call (after SET client_min_messages = warning with quiet). Dies on an
# error.
sub worker_database
{
	my ($node, $db, $sql, %opt) = @_;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db,
		($opt{quiet} ? "\nSET client_min_messages = warning;" : '') . qq{
CREATE EXTENSION gridha;
CREATE ROLE gridha_test_worker LOGIN IN ROLE gridha_submitter;
} . ($sql // ''));
	return;
}

# worker_conf($db, $workers, $role): the postgresql.conf lines for $workers
# static workers serving $db as $role (gridha_test_worker unless given).
sub worker_conf
{
	my ($db, $workers, $role) = @_;
	$role //= 'gridha_test_worker';
	return qq{
gridha.workers = $workers
gridha.database = '$db'
gridha.worker_role = '$role'
};
}

# restart_with_workers($node, $db, $workers, $conf, $role): $node restarted
# with worker_conf($db, $workers, $role) and then $conf (more
# postgresql.conf lines) appended to its configuration.
sub restart_with_workers
{
	my ($node, $db, $workers, $conf, $role) = @_;
	$node->append_conf('postgresql.conf', worker_conf($db, $workers, $role) . ($conf // ''));
	$node->restart;
	return;
}

# workers_registered($node, $db): how many workers serving $db have
# registered their instance (rows of gridha.workers with an instance id);
# '' after an error.
sub workers_registered
{
	my ($node, $db) = @_;
	return psql_value($node, $db, 'SELECT count(*) FROM gridha.workers WHERE instance_id IS NOT NULL');
}

# wait_for_workers($node, $db, $n, $seconds): true when exactly $n workers
# serving $db have registered within $seconds (30 unless given).
sub wait_for_workers
{
	my ($node, $db, $n, $seconds) = @_;
	return wait_until($seconds // 30, sub { workers_registered($node, $db) eq $n });
}

# psql_as($node, $db, $sql, $user): psql's exit code and what it printed on
# stdout and on stderr, running $sql in $db as $user (the test's OS user
# when undef) and stopping at the first error.
sub psql_as
{
	my ($node, $db, $sql, $user) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql($db, $sql,
		stdout => \$out,
		stderr => \$err,
		on_error_stop => 1,
		$user ? (extra_params => [ '-U', $user ]) : ());
	return ($rc, $out, $err);
}

# --- test/t/015_upgrade.pl, 016_dump_restore.pl (and the order check of
# 020, 022, 023, 029, 030, 042) ---------------------------------------------
push @EXPORT, qw(metrics_off_sql ledger_in_order);

# metrics_off_sql(): the FROM and WHERE of a query whose rows are the
# targets with counters in gridha.metrics that differ from the sums over
# their rows of gridha.service_claims (count(*) of it: 0 when all agree).
sub metrics_off_sql
{
	return q{
  FROM gridha.metrics m
  JOIN (SELECT target, sum(tail_seq) AS e, sum(committed_total) AS c, sum(invalid_total) AS i,
               sum(resubmitted_total) AS r
          FROM gridha.service_claims GROUP BY target) s USING (target)
 WHERE m.scope = 'target'
   AND (m.enqueued_total, m.committed_total, m.invalid_total, m.resubmitted_total)
       IS DISTINCT FROM (s.e, s.c, s.i, s.r)};
}

# ledger_in_order($ledger, $expected): test/dlt/check_log.py on the log of
# a ledger of start_ledger: every batch of the file $expected (service and
# batch id, tab-separated, each service's in enqueue order) reached the
# ledger, in that order, one in flight per service. Returns whether it did
# (1 or 0) and what the script printed (its violations).
sub ledger_in_order
{
	my ($ledger, $expected) = @_;
	my $out = '';
	my $ok = IPC::Run::run(
		[
			'python3', gridha_repo() . '/test/dlt/check_log.py',
			'--expected', $expected, '--require-all', '--one-in-flight', $ledger->{log}
		],
		'<', \undef, '>', \$out, '2>&1');
	return ($ok ? 1 : 0, $out);
}

END
{
	local $?;
	stop_ledgers();
}

1;
