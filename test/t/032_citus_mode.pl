# test/t/032_citus_mode.pl: gridha's Citus mode (issue 43, item 2;
# docs/citus.md, "Built"): gridha.citus_setup on the coordinator of a
# coordinator and two workers, then the claim cycle through the per-bucket
# functions, each called as a statement of its own (so that Citus sends it
# whole to the node holding its bucket), with a producer enqueueing into 24
# services, two instances holding the buckets, a take-over that fences a
# stale holder, and a shard of a busy bucket moved mid-run.
#
# Citus exists for PostgreSQL 15 only. As test/t/031_citus.pl: the
# PostgreSQL 15 GRIDHA_CITUS_PG_CONFIG names (default: the system's), used
# as it is when the run's programs are that tree's with gridha installed,
# otherwise a copy of it with gridha built from this source tree; without
# Citus there every test is reported skipped, with the reason. That, the
# build and the cluster are test/t/lib/GridhaCitus.pm's.
#
# Steps, in the order they run:
#
#   build     as 031_citus
#   cluster   a coordinator and two workers (citus, then gridha preloaded),
#             CREATE EXTENSION citus and gridha on the coordinator
#   refusals  gridha.citus_setup refuses, each with its SQLSTATE: on a
#             worker (RG031), in a database whose gridha tables hold rows
#             (RG032), 3 and 16 buckets (RG033) (that a refusal changes
#             nothing is not checked: psql runs each call in a transaction
#             of its own, which the error rolls back); then it lays out 64
#             buckets while a second call at the same time waits for it
#             and is refused (RG034)
#   layout    the three bucket tables distributed by bucket and co-located,
#             gridha.bucket_instances and gridha.bucket_targets reference
#             tables on both workers, the twelve per-bucket functions (two
#             forms of bucket_enqueue) distributed by bucket with
#             them, a call sent whole to a worker (citus.log_remote_commands);
#             lead of gridha's library refused in the mode (RG035, naming
#             what serves it; next_batch and the reports serve the mode:
#             test/t/035_citus_loop.pl; enqueue and register_instance:
#             below); the ID sequences' calls served on the coordinator
#             (test/citus/sql/id_sequences.sql) and refused on a worker
#             (RG043), writing nothing there
#   run       services s01..s24; a producer enqueues 10 batches into each
#             (2 before the instances start, 8 while they run); instance A
#             takes half of the services' buckets, B the other half
#             (bucket_acquire); in passes, each instance goes once over its
#             buckets: bucket_next_batch, then bucket_report_submission
#             (accepted) and bucket_report_status (committed) of what it got.
#             During the third pass the shard of the bucket with the most
#             of those services moves to the other worker
#             (citus_move_shard_placement, block_writes); while the passes
#             run, a reader counts services with more than one batch in
#             flight
#   fence     a bucket of its own: A acquires it and is handed its first
#             batch; B's take-over is refused while the lease runs, and
#             succeeds after A's lease, cut to 1 ms by a renewal, ran out
#             (epoch + 1); A's
#             reports, hand-out and renewal at the old epoch are refused
#             (RG001); B hands the batch out again and commits it and the
#             next; B releases the bucket and A acquires it again (epoch + 1)
#   lapsed    a bucket of its own: A's lease (renewed for 1 ms after its
#             first hand-out) runs out, nobody takes
#             the bucket over: A's reports are accepted, its hand-out is
#             refused (RG001, renew first); after a renewal the service's
#             next batch is handed out
#   reports   on the fence bucket, held by A again: a delayed batch goes
#             out again after its backoff (not at once), one whose ledger
#             status is unknown goes out again at once, a rejected one
#             ends invalid and its service's next batch follows; a repeated
#             report changes nothing; a report of a batch never handed out
#             (RG023) and an unknown outcome (RG004) are refused
#   owner     a login role in gridha_submitter that did not take A's
#             buckets is refused (RG008) a hand-out and a renewal as A
#   setrole   what a delegated call sees on the worker after SET ROLE on
#             the coordinator (session_user, current_user)
#   checks    what the rows show at the end (each check below says what)
#   batched   a bucket of its own, services X, Y, Z: bucket_next_batches
#             hands out at most n heads, one per service, the service
#             waiting longest first, at the bucket's worker; after a release
#             and acquire they go out again at the new epoch, and a call at
#             the old one is refused (RG001); bucket_report_submissions and
#             bucket_report_statuses answer each row in order, fenced by its
#             own epoch: a stale row, an unknown batch, a NULL row and a
#             report of a batch not accepted are refused with their
#             SQLSTATEs while the other rows pass
#
#   move      two take-overs issued while a shard move holds its locks:
#             exactly one gets the new epoch, with a lease counted from the
#             clock after its wait (hard_expiry >= the move's commit + the
#             lease; from now() it fell short by the wait)
#   producers gridha.enqueue: seqs and the service's bucket; NULL, empty,
#             too long and ".." ids, an empty target (22004, 22023), an
#             unknown target (RG006), a duplicate batch id (23505), no row
#             changed (targets themselves: 038_citus_targets)
#   instances gridha.register_instance as the login role c32_other (owner,
#             label; an unknown kind in serves: 22023, nothing
#             registered); its next_batch and reports in order;
#             c32_intruder (not a member) refused (RG008) by bucket_acquire,
#             bucket_takeover and next_batch naming it, nothing changed; an
#             id never registered registered by its first next_batch, then
#             refused to c32_intruder (RG008); with gridha.unknown_instance
#             = refuse, an unknown id refused (RG024), by next_batch on the
#             coordinator and, with the setting a role's on every node, by
#             bucket_acquire and bucket_takeover on a worker
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster). Run by
# `make test` (test/run.sh, part 032_citus_mode) and by `make
# prove_installcheck`, as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaCitus;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $NTESTS = 31;
my $A = 'aaaaaaaa-0000-0000-0000-000000000032';
my $B = 'bbbbbbbb-0000-0000-0000-000000000032';
my $NSERVICES = 24;
my $NBATCHES = 10;
my $BEFORE = 2;    # batches per service enqueued before the instances start

plan tests => $NTESTS;

# ---------------------------------------------------------------------------
# Citus: there, or every test skipped; build (as 031_citus); cluster: a
# coordinator (n0) and two workers (n1, n2) (test/t/lib/GridhaCitus.pm)

my ($CFG, $CBIN, $CLIB) = citus_tree();
my $install_path = citus_build($CFG, $CBIN, $CLIB);
my $PSQL = defined $install_path ? "$install_path/bin/psql" : 'psql';
my @nodes = citus_cluster($install_path, 'test/t/032_citus_mode.pl', 'c32', '');
my $coord = $nodes[0];

# run($node, SQL, [DB]): what psql prints (unaligned, tuples only), its
# errors after it (no stop at an error, as a session would go on)
sub run
{
	my ($node, $sql, $db) = @_;
	return citus_psql($node, $db // 'c32', $sql, '-v', 'VERBOSITY=verbose');
}

# one($sql): the coordinator's one-line answer, dying on an error
sub one
{
	my ($sql, $db) = @_;
	return $coord->safe_psql($db // 'c32', $sql);
}

# ---------------------------------------------------------------------------
# refusals of citus_setup, then the setup

# sqlstate_of(OUTPUT): the SQLSTATE of the first error psql printed
sub sqlstate_of
{
	my ($out) = @_;
	return $out =~ /ERROR:  ([0-9A-Z]{5}):/ ? $1 : 'no error';
}

# on a worker: no coordinator there
my $w = run($nodes[1], 'SELECT gridha.citus_setup()');
diag("on a worker: $w");
ok(sqlstate_of($w) eq 'RG031' && $w =~ /is not one/,
	'refusals: citus_setup on a worker is refused (RG031: not the coordinator)');

# a database of the cluster whose gridha tables hold rows (a plain enqueue
# while gridha's tables are still local)
$coord->safe_psql('postgres', 'CREATE DATABASE c32rows');
$coord->safe_psql('c32rows', sprintf(q{
CREATE EXTENSION citus;
SELECT citus_set_coordinator_host('localhost', %d);
CREATE EXTENSION gridha;
SELECT gridha.enqueue('r1', 'rb1', '\x01');
}, $coord->port));
my $r = run($coord, 'SELECT gridha.citus_setup()', 'c32rows');
diag("with rows: $r");
ok(sqlstate_of($r) eq 'RG032' && $r =~ /gridha\.batches holds rows/,
	'refusals: citus_setup where gridha.batches holds a row is refused (RG032)');

my $bad = run($coord, 'SELECT gridha.citus_setup(3)') . "\n" . run($coord, 'SELECT gridha.citus_setup(16)');
diag("bad counts: $bad");
ok( ($bad =~ /ERROR:  RG033: cannot lay gridha out in 3 buckets/)
	  && ($bad =~ /ERROR:  RG033: cannot lay gridha out in 16 buckets/),
	'refusals: citus_setup(3) (not a power of two) and citus_setup(16) (below citus.shard_count, 32) are refused (RG033)'
);

# two setups at once: the first holds its transaction open until the
# second waits for a lock (at most 30 s), then commits; the second, which
# waited, is refused (RG034)
my $setup_tmp = PostgreSQL::Test::Utils::tempdir('c32setup');
my @setup_sessions;
foreach my $i (1, 2)
{
	my $sql = $i == 1 ? q{BEGIN;
SELECT gridha.citus_setup();
DO $$
BEGIN
    FOR i IN 1 .. 300 LOOP
        PERFORM pg_stat_clear_snapshot();
        EXIT WHEN EXISTS (SELECT 1 FROM pg_stat_activity
                           WHERE pid <> pg_backend_pid() AND wait_event_type = 'Lock'
                             AND query LIKE 'SELECT gridha.citus_setup(128)%');
        PERFORM pg_sleep(0.1);
    END LOOP;
END
$$;
SELECT pg_stat_clear_snapshot();
SELECT 'waited: ' || count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'SELECT gridha.citus_setup(128)%';
COMMIT;
} : "SELECT gridha.citus_setup(128);\n";
	open my $fh, '>', "$setup_tmp/s$i.sql" or die;
	print $fh $sql;
	close $fh;
	push @setup_sessions, IPC::Run::start([ $PSQL, '-X', '-q', '-A', '-t', '-v', 'VERBOSITY=verbose',
			'-d', $coord->connstr('c32'), '-f', "$setup_tmp/s$i.sql" ],
		'<', \undef, '>', "$setup_tmp/s$i.out", '2>', "$setup_tmp/s$i.err");
	# the first session is in its wait before the second starts
	$coord->poll_query_until('c32', q{SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query LIKE 'DO $$%' AND pid <> pg_backend_pid())})
	  if $i == 1;
}
$_->finish foreach @setup_sessions;
my $set = slurp("$setup_tmp/s1.out") . slurp("$setup_tmp/s1.err");
my $again = slurp("$setup_tmp/s2.out") . slurp("$setup_tmp/s2.err");
my $buckets_after = one('SELECT count(*) || \'/\' || min(buckets) || \'/\' || max(epoch) FROM gridha.bucket_claims');
diag("setup: $set\nagain (at once): $again");
ok($set =~ /^64$/m && $set =~ /^waited: 1$/m && sqlstate_of($again) eq 'RG034' && $buckets_after eq '64/64/0',
	'refusals: citus_setup() lays out 64 buckets; a second call at the same time, citus_setup(128), waits for the first and is refused (RG034); 64 buckets at epoch 0');

# ---------------------------------------------------------------------------
# layout

my $layout = one(q{
SELECT string_agg(logicalrelid::text || '/' || partmethod::text || '/' || column_to_column_name(logicalrelid, partkey), ',' ORDER BY logicalrelid::text)
       || ' ' || count(DISTINCT colocationid)
  FROM pg_dist_partition WHERE partmethod <> 'n'});
# the instances' reference table, with a placement on each worker
my $reference = one(q{
SELECT string_agg(p.logicalrelid::text || '/' || p.partmethod::text, ',' ORDER BY p.logicalrelid::text)
       || ' ' || (SELECT count(DISTINCT n.nodeport) FROM pg_dist_shard s JOIN pg_dist_placement pl USING (shardid)
                    JOIN pg_dist_node n ON n.groupid = pl.groupid
                   WHERE s.logicalrelid = 'gridha.bucket_instances'::regclass AND n.groupid <> 0)
  FROM pg_dist_partition p WHERE p.partmethod = 'n'});
# (and the targets' reference table: test/t/038_citus_targets.pl)
my $functions = one(q{
SELECT count(*) || ' ' || bool_and(o.distribution_argument_index = 0
                                   AND o.colocationid = (SELECT colocationid FROM pg_dist_partition
                                                          WHERE logicalrelid = 'gridha.bucket_claims'::regclass))
  FROM pg_dist_object o
 WHERE o.classid = 'pg_proc'::regclass AND o.objid::regproc::text LIKE 'gridha.bucket\_%'});
# (a renewal of a bucket nobody holds: refused, RG001, on the worker)
my $delegated = run($coord, q{
SET citus.log_remote_commands = on;
SET client_min_messages = notice;
SELECT gridha.bucket_renew(0, 'cccccccc-0000-0000-0000-000000000032', 1);
SELECT gridha.bucket_renew(gridha.bucket_of('probe', 64), 'cccccccc-0000-0000-0000-000000000032', 1);
});
my $probe = one(q{SELECT gridha.bucket_of('probe', 64)});
diag("layout: $layout\nreference: $reference\nfunctions: $functions\n$delegated");
ok( $layout eq
	  'gridha.bucket_batches/h/bucket,gridha.bucket_claims/h/bucket,gridha.bucket_rates/h/bucket,gridha.bucket_services/h/bucket 1'
	  && $reference eq 'gridha.bucket_instances/n,gridha.bucket_targets/n 2'
	  && $functions eq '12 true'
	  && $delegated =~ /issuing SELECT gridha\.bucket_renew\(0, 'cccccccc-0000-0000-0000-000000000032'::uuid/
	  && $delegated =~ /on server postgres\@localhost:(\d+)/
	  && $1 != $coord->port
	  && $delegated =~ /ERROR:  RG001: stale claim on bucket 0/
	  && $delegated =~ /issuing SELECT gridha\.bucket_renew\($probe, 'cccccccc-0000-0000-0000-000000000032'::uuid/,
	'layout: the three bucket tables and the rate limits\' state distributed by bucket, co-located, and gridha.bucket_instances and gridha.bucket_targets reference tables on both workers; the twelve per-bucket functions distributed by bucket with them; a call is sent whole to a worker, with gridha.bucket_of(...) folded to its bucket'
);

my $mode = run($coord, "SELECT gridha.lead('$A')");
# the ID sequences: served on the coordinator (an unknown name is the
# usual refusal, RG010), refused on a worker (RG043) before they write
my $ids_coord = run($coord, "SELECT gridha.next_id('x')");
my $ids_worker = join("\n",
	map { run($nodes[1], $_) } (
		"SELECT gridha.create_id_sequence('x')",
		"SELECT gridha.reserve_ids('x', 1)",
		"SELECT gridha.next_id('x')"));
my $worker_rows = $nodes[1]->safe_psql('c32',
	'SELECT (SELECT count(*) FROM gridha.id_sequences) + (SELECT count(*) FROM gridha.id_windows)');
diag("library calls in the mode:\n$mode\n$ids_coord\non a worker:\n$ids_worker\nrows there: $worker_rows");
my @rg043 = ($ids_worker =~ /ERROR:  RG043: gridha\.(\w+)\(\) runs on the coordinator in Citus mode, and this node is not it/g);
ok( sqlstate_of($mode) eq 'RG035'
	  && $mode =~ /HINT:  Enqueue with gridha.enqueue or gridha.bucket_enqueue; submit through gridha.next_batch/
	  && $mode =~ /the ID sequences \(create_id_sequence, drop_id_sequence, reserve_ids, next_id, on the coordinator\)/
	  && sqlstate_of($ids_coord) eq 'RG010'
	  && "@rg043" eq 'create_id_sequence reserve_ids next_id'
	  && $ids_worker =~ /DETAIL:  The Citus mode keeps the ID sequences and their windows in plain tables of the coordinator/
	  && $worker_rows eq '0',
	'layout: lead of the library is refused in the mode (RG035), naming the calls that serve it; the ID sequences are served on the coordinator (next_id of an unknown name: RG010) and refused on a worker (create_id_sequence, reserve_ids, next_id: RG043), nothing written there'
);

# ---------------------------------------------------------------------------
# run

my @services = map { sprintf('s%02d', $_) } 1 .. $NSERVICES;
my %bucket_of = map { split /\|/ } split /\n/, one(
	join(' UNION ALL ', map { "SELECT '$_' || '|' || gridha.bucket_of('$_', 64)" } @services));
my @buckets = sort { $a <=> $b } keys %{ { map { $_ => 1 } values %bucket_of } };
my (%holder, %mine);
for my $i (0 .. $#buckets)
{
	my $inst = $i % 2 ? $B : $A;
	$holder{ $buckets[$i] } = $inst;
	push @{ $mine{$inst} }, $buckets[$i];
}
my %per_bucket;
$per_bucket{ $bucket_of{$_} }++ foreach @services;
my ($busy) = sort { $per_bucket{$b} <=> $per_bucket{$a} || $a <=> $b } @buckets;
note(sprintf('%d services in %d buckets; the busiest, %d, holds %d', scalar @services,
		scalar @buckets, $busy, $per_bucket{$busy}));

my (%calls, @errors, %epochs);

# sample_epochs(): every bucket's epoch now, kept for the epochs check
my @epoch_samples;
sub sample_epochs
{
	push @epoch_samples, { map { split /:/ } split /,/,
		  one(q{SELECT string_agg(bucket || ':' || epoch, ',') FROM gridha.bucket_claims}) };
}
sample_epochs();

# psql_script(SQL, FILE): a psql child running SQL (a file) against the
# coordinator, its output into FILE; started, not waited for
my $tmp = PostgreSQL::Test::Utils::tempdir('c32run');
my $nscripts = 0;
sub psql_script
{
	my ($sql) = @_;
	my $f = "$tmp/s" . ++$nscripts;
	open my $fh, '>', "$f.sql" or die;
	print $fh $sql;
	close $fh;
	my $h = IPC::Run::start([ $PSQL, '-X', '-q', '-A', '-t', '-v', 'VERBOSITY=verbose',
			'-d', $coord->connstr('c32'), '-f', "$f.sql" ],
		'<', \undef, '>', "$f.out", '2>', "$f.err");
	return [ $h, $f ];
}

sub psql_finish
{
	my ($s) = @_;
	$s->[0]->finish;
	return (slurp("$s->[1].out"), slurp("$s->[1].err"));
}

# enqueue_sql(ROUNDS): the producer's script: batch b<k> of every service,
# round k after round k - 1
sub enqueue_sql
{
	my @rounds = @_;
	my $sql = '';
	foreach my $k (@rounds)
	{
		foreach my $s (@services)
		{
			$sql .= sprintf("SELECT gridha.bucket_enqueue(gridha.bucket_of('%s', 64), '%s', 'b%02d', '\\x%02x');\n",
				$s, $s, $k, $k);
		}
	}
	return $sql;
}

# the instances take their buckets
foreach my $inst ($A, $B)
{
	foreach my $b (@{ $mine{$inst} })
	{
		my $e = one("SELECT gridha.bucket_acquire($b, '$inst', '10 min')");
		push @{ $epochs{$b} }, $e;
		$calls{acquire}++;
	}
}

my ($out, $err) = psql_finish(psql_script(enqueue_sql(1 .. $BEFORE)));
push @errors, "producer: $err" if $err ne '';
$calls{enqueue} += $NSERVICES * $BEFORE;
my $producer = psql_script(enqueue_sql($BEFORE + 1 .. $NBATCHES) . "\\echo producer done\n");

# pass_sql(INSTANCE): one pass of an instance over its buckets
sub pass_sql
{
	my ($inst) = @_;
	my $sql = '';
	foreach my $b (@{ $mine{$inst} })
	{
		my $e = $epochs{$b}[-1];
		$sql .= <<"EOF";
\\unset r
SELECT gridha.bucket_next_batch($b, '$inst', $e) AS r \\gset
\\echo next $b
\\if :{?r}
SELECT (:'r'::gridha.bucket_batch).service_id AS sid, (:'r'::gridha.bucket_batch).batch_id AS bid \\gset
SELECT gridha.bucket_report_submission($b, '$inst', :'sid', :'bid', $e, 'accepted') AS rs \\gset
SELECT gridha.bucket_report_status($b, '$inst', :'sid', :'bid', $e, 'committed') AS rt \\gset
\\echo cycle $b :sid :bid :rs :rt
\\endif
EOF
	}
	return $sql;
}

my $TOTAL = $NSERVICES * $NBATCHES;
my ($passes, $moved, $move_out, $inflight_max, $samples) = (0, 0, '', 0, 0);
my ($move_from, $move_to, $shard);
my $committed_before_move;
my $producer_done = 0;
while ($passes < 200)
{
	$passes++;
	my @p = map { psql_script(pass_sql($_)) } ($A, $B);
	my $mover;
	if ($passes == 3)
	{
		$shard = one("SELECT get_shard_id_for_distribution_column('gridha.bucket_batches', $busy)");
		$move_from = one("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shard");
		$move_to = $move_from == $nodes[1]->port ? $nodes[2]->port : $nodes[1]->port;
		$committed_before_move = one(
			"SELECT count(*) FROM gridha.bucket_batches WHERE bucket = $busy AND status = 'committed'");
		$mover = psql_script(
			"SELECT citus_move_shard_placement($shard, 'localhost', $move_from, 'localhost', $move_to, shard_transfer_mode => 'block_writes');\n"
		);
	}
	sample_epochs();
	# while the passes run: no service with two batches in flight
	my $n = one(q{SELECT count(*) FROM (SELECT service_id FROM gridha.bucket_batches
		WHERE status IN ('submitting', 'pending', 'valid', 'unknown')
		GROUP BY service_id HAVING count(*) > 1) x});
	$samples++;
	$inflight_max = $n if $n > $inflight_max;
	foreach my $s (@p)
	{
		my ($o, $e) = psql_finish($s);
		push @errors, "pass $passes: $e" if $e ne '';
		$calls{next_batch} += () = $o =~ /^next /mg;
		my $c = () = $o =~ /^cycle .* pending committed$/mg;
		$calls{report_submission} += $c;
		$calls{report_status} += $c;
		$calls{cycles} += $c;
	}
	if ($mover)
	{
		my ($o, $e) = psql_finish($mover);
		$move_out = $o . $e;
		$moved = one("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shard") == $move_to;
	}
	if (!$producer_done && slurp("$producer->[1].out") =~ /^producer done$/m)
	{
		my ($o, $e) = psql_finish($producer);
		push @errors, "producer: $e" if $e ne '';
		$calls{enqueue} += $NSERVICES * ($NBATCHES - $BEFORE);
		$producer_done = 1;
	}
	last
	  if $producer_done
	  && one(q{SELECT count(*) FROM gridha.bucket_batches WHERE status <> 'committed'}) eq '0';
}
if (!$producer_done)
{
	my ($o, $e) = psql_finish($producer);
	push @errors, "producer: $e" if $e ne '';
	$producer_done = 1;
}
note(sprintf('run: %d passes; calls: %s; %d in-flight samples', $passes,
		join(', ', map { "$_ $calls{$_}" } sort keys %calls), $samples));
diag(join("\n", @errors)) if @errors;
ok( !@errors
	  && $calls{cycles} == $TOTAL
	  && one(q{SELECT count(*) FROM gridha.bucket_batches WHERE service_id LIKE 's%' AND status = 'committed'}) ==
	  $TOTAL,
	"run: $NSERVICES services x $NBATCHES batches enqueued, handed out and committed through the per-bucket functions by two instances, no call failed"
);

# ---------------------------------------------------------------------------
# fence: a bucket none of the services above is in

my $f;
for my $i (1 .. 200)
{
	$f = "f$i";
	last unless exists $holder{ one("SELECT gridha.bucket_of('$f', 64)") };
}
my $fb = one("SELECT gridha.bucket_of('$f', 64)");
my $fence = '';
my $q = sub { my ($label, $sql) = @_; $fence .= "$label:" . run($coord, $sql) . "\n"; };
one("SELECT gridha.bucket_enqueue($fb, '$f', 'fb1', '\\x01')");
one("SELECT gridha.bucket_enqueue($fb, '$f', 'fb2', '\\x02')");
# batch_of(HANDOUT): the batch id of a gridha.bucket_batch as psql prints it
sub batch_of { my ($h) = @_; return $h =~ /^\([^,]*,([^,]*),/ ? $1 : ''; }
# A's lease: 10 min while it is handed fb1 and B's take-over is refused,
# then cut to 1 ms by a renewal (a 2 s lease could run out before the
# hand-out or the refused take-over on a loaded machine)
my $e1 = one("SELECT gridha.bucket_acquire($fb, '$A', '10 min')");
my $h1 = batch_of(one("SELECT gridha.bucket_next_batch($fb, '$A', $e1)"));
my $early = one("SELECT gridha.bucket_takeover($fb, '$B', '10 min')") eq '' ? 't' : 'f';
one("SELECT gridha.bucket_renew($fb, '$A', $e1, '1 ms')");
sleep 1;
sample_epochs();
my $e2 = one("SELECT gridha.bucket_takeover($fb, '$B', '10 min')");
sample_epochs();
$q->('a accepted', "SELECT gridha.bucket_report_submission($fb, '$A', '$f', 'fb1', $e1, 'accepted')");
$q->('a committed', "SELECT gridha.bucket_report_status($fb, '$A', '$f', 'fb1', $e1, 'committed')");
$q->('a next', "SELECT gridha.bucket_next_batch($fb, '$A', $e1)");
$q->('a renew', "SELECT gridha.bucket_renew($fb, '$A', $e1)");
my $h2 = batch_of(one("SELECT gridha.bucket_next_batch($fb, '$B', $e2)"));
my $c2 = one("SELECT gridha.bucket_report_submission($fb, '$B', '$f', 'fb1', $e2, 'accepted')") . ','
  . one("SELECT gridha.bucket_report_status($fb, '$B', '$f', 'fb1', $e2, 'committed')");
my $h3 = batch_of(one("SELECT gridha.bucket_next_batch($fb, '$B', $e2)"));
one("SELECT gridha.bucket_report_submission($fb, '$B', '$f', 'fb2', $e2, 'accepted')");
one("SELECT gridha.bucket_report_status($fb, '$B', '$f', 'fb2', $e2, 'committed')");
my $rel = one("SELECT gridha.bucket_release($fb, '$B', $e2)");
sample_epochs();
my $e3 = one("SELECT gridha.bucket_acquire($fb, '$A', '10 min')");
$epochs{$fb} = [ 0, $e1, $e2, $e3 ];
my $frows = one("SELECT string_agg(batch_id || '/' || status || '/' || epoch || '/' || attempts, ',' ORDER BY seq)
  FROM gridha.bucket_batches WHERE bucket = $fb AND service_id = '$f'");
diag("fence on bucket $fb ($f): epochs $e1 $e2 $e3; handed $h1 $h2 $h3; takeover while the lease ran: $early; $c2; release $rel; rows $frows\n$fence");
my @rg001 = ($fence =~ /^a \w+:\s*\n(?:psql:\S+ )?ERROR:  RG001: stale claim on bucket $fb$/mg);
ok( $h1 eq 'fb1'
	  && $early eq 't'
	  && $e2 == $e1 + 1
	  && @rg001 == 4
	  && $h2 eq 'fb1'
	  && $c2 eq 'pending,committed'
	  && $h3 eq 'fb2'
	  && $frows eq "fb1/committed/$e2/2,fb2/committed/$e2/1",
	'fence: after B took over the bucket whose lease ran out, the stale holder A\'s accepted and committed reports, hand-out and renewal are refused (RG001); B hands fb1 out again and it is committed once, at the new epoch'
);

# ---------------------------------------------------------------------------
# lapsed: a holder whose lease ran out, on a bucket nobody took over, has
# its reports accepted (as on one server); its hand-out is refused (RG001,
# renew first) until it renews, then the service's next batch follows

my $g;
for my $i (1 .. 400)
{
	$g = "g$i";
	my $gb = one("SELECT gridha.bucket_of('$g', 64)");
	last unless exists $holder{$gb} || $gb == $fb;
}
my $gb = one("SELECT gridha.bucket_of('$g', 64)");
one("SELECT gridha.bucket_enqueue($gb, '$g', 'gb$_', '\\x0$_')") foreach 1 .. 2;
# the lease: 10 min for the first hand-out, then cut to 1 ms by a renewal
# (a 1 s lease could run out before the hand-out on a loaded machine)
my $ge = one("SELECT gridha.bucket_acquire($gb, '$A', '10 min')");
my $gh1 = batch_of(one("SELECT gridha.bucket_next_batch($gb, '$A', $ge)"));
one("SELECT gridha.bucket_renew($gb, '$A', $ge, '1 ms')");
sleep 1;
my $lapsed = one("SELECT hard_expiry < now() FROM gridha.bucket_claims WHERE bucket = $gb");
my $grep = run($coord, "SELECT gridha.bucket_report_submission($gb, '$A', '$g', 'gb1', $ge, 'accepted')") . ','
  . run($coord, "SELECT gridha.bucket_report_status($gb, '$A', '$g', 'gb1', $ge, 'committed')");
my $gnext = run($coord, "SELECT gridha.bucket_next_batch($gb, '$A', $ge)");
one("SELECT gridha.bucket_renew($gb, '$A', $ge, '10 min')");
my $gh2 = batch_of(one("SELECT gridha.bucket_next_batch($gb, '$A', $ge)"));
my $grows = one("SELECT string_agg(batch_id || '/' || status || '/' || epoch || '/' || attempts, ',' ORDER BY seq)
  FROM gridha.bucket_batches WHERE bucket = $gb AND service_id = '$g'");
push @{ $epochs{$gb} }, $ge;
diag("lapsed on bucket $gb ($g): epoch $ge; lease ran out: $lapsed; handed $gh1 then $gh2; reports: $grep\nhand-out with the lease out: $gnext\nrows $grows");
ok( $gh1 eq 'gb1'
	  && $lapsed eq 't'
	  && $grep eq 'pending,committed'
	  && sqlstate_of($gnext) eq 'RG001'
	  && $gnext =~ /HINT:  Renew the lease/
	  && $gh2 eq 'gb2'
	  && $grows eq "gb1/committed/$ge/1,gb2/submitting/$ge/1",
	'lapsed: the holder\'s reports after its lease ran out, with no take-over, are accepted (pending, committed); its hand-out is refused (RG001, renew first) until it renews, then the service\'s next batch is handed out'
);

# ---------------------------------------------------------------------------
# reports: the other outcomes and statuses, on the fence bucket (A, epoch e3)

my $rep = '';
my $call = sub { my ($sql) = @_; my $r = one($sql); $rep .= "$r;"; return $r; };
my $rsub = sub { "SELECT gridha.bucket_report_submission($fb, '$A', '$f', '$_[0]', $e3, '$_[1]')" };
my $rstat = sub { "SELECT gridha.bucket_report_status($fb, '$A', '$f', '$_[0]', $e3, '$_[1]')" };
my $next = "SELECT gridha.bucket_next_batch($fb, '$A', $e3)";
one("SELECT gridha.bucket_enqueue($fb, '$f', 'fb$_', '\\x0$_')") foreach 3 .. 5;
$call->($next);
$call->($rsub->('fb3', 'delayed'));
my $waiting = one("$next IS NULL");
one("SELECT pg_sleep(0.3)");
$call->($next);
$call->($rsub->('fb3', 'rejected'));
$call->($rsub->('fb3', 'rejected'));
my $never = run($coord, $rsub->('fb5', 'accepted'));
$call->($next);
$call->($rsub->('fb4', 'accepted'));
$call->($rstat->('fb4', 'unknown'));
$call->($next);
my $badword = run($coord, $rsub->('fb4', 'exploded'));
$call->($rsub->('fb4', 'accepted'));
$call->($rstat->('fb4', 'committed'));
$call->($next);
$call->($rsub->('fb5', 'accepted'));
$call->($rstat->('fb5', 'committed'));
my $rrows = one("SELECT string_agg(batch_id || '/' || status || '/' || attempts, ',' ORDER BY seq)
  FROM gridha.bucket_batches WHERE bucket = $fb AND service_id = '$f' AND seq >= 3");
$rep =~ s/\("?$f"?,(fb\d),\d+,"[^"]*",\d+,(\d+),default\)/$1#$2/g;
diag("reports: $rep\nnothing to hand out during the backoff: $waiting\nnever handed out: $never\nunknown outcome: $badword\nrows: $rrows");
ok( $waiting eq 't'
	  && $rep eq 'fb3#1;delayed;fb3#2;invalid;invalid;fb4#1;pending;unknown;fb4#2;pending;committed;fb5#1;pending;committed;'
	  && sqlstate_of($never) eq 'RG023'
	  && sqlstate_of($badword) eq 'RG004'
	  && $rrows eq 'fb3/invalid/2,fb4/committed/2,fb5/committed/1',
	'reports: delayed hands the batch out again after its backoff (nothing during it), a ledger status unknown at once, rejected ends it invalid and the next batch follows, a repeated report changes nothing; never handed out (RG023) and an unknown outcome (RG004) are refused'
);

# ---------------------------------------------------------------------------
# owner: a role that did not take the bucket may not act as its holder

$coord->safe_psql('c32', 'CREATE ROLE c32_other LOGIN IN ROLE gridha_submitter');
my $ab = $mine{$A}[0];
my $other = '';
foreach my $call ("SELECT gridha.bucket_next_batch($ab, '$A', 1)", "SELECT gridha.bucket_renew($ab, '$A', 1)")
{
	my ($o, $e) = ('', '');
	$coord->psql('c32', $call, stdout => \$o, stderr => \$e, on_error_stop => 0,
		extra_params => [ '-U', 'c32_other', '-v', 'VERBOSITY=verbose' ]);
	$other .= "$o$e\n";
}
my $ab_after = one("SELECT holder || '/' || epoch || '/' || holder_role FROM gridha.bucket_claims WHERE bucket = $ab");
diag("another role acting as A on bucket $ab:\n$other\nbucket after: $ab_after");
my @rg008 = ($other =~ /ERROR:  RG008: role "c32_other" does not own instance $A/g);
ok(@rg008 == 2 && $ab_after eq "$A/1/" . one('SELECT current_user'),
	'owner: a role in gridha_submitter that did not take the bucket is refused (RG008) a hand-out and a renewal as its holder, and the bucket stays as it was'
);

# setrole: the role a delegated call runs as on the worker when the
# coordinator's session did SET ROLE (docs/citus.md, "Ownership by the
# role that took the bucket"): a probe
# distributed with the buckets shows the worker's session_user and
# current_user, then the superuser that took A's buckets, after SET ROLE
# c32_other, renews one of them (the probe is PL/pgSQL: a SQL function
# would be inlined on the coordinator instead of delegated)
$coord->safe_psql('c32', q{
CREATE FUNCTION public.c32_who(b integer) RETURNS text LANGUAGE plpgsql
AS $$BEGIN RETURN session_user || '/' || current_user || '/' || current_setting('port'); END$$;
SELECT create_distributed_function('public.c32_who(integer)', 'b', colocate_with => 'gridha.bucket_claims');
});
my $who = run($coord, qq{
SET citus.log_remote_commands = on;
SET client_min_messages = notice;
SELECT public.c32_who($ab);
SET ROLE c32_other;
SELECT public.c32_who($ab);
SELECT gridha.bucket_renew($ab, '$A', 1, '10 min') IS NOT NULL;
});
my $su = one('SELECT current_user');
diag("as the login role, then after SET ROLE c32_other:\n$who");
my $probe_ok = $who =~ /\A$su\/$su\/(\d+)\nc32_other\/c32_other\/(\d+)\nt\n/ && $1 == $2 && $1 != $coord->port;
ok( $probe_ok
	  && $who =~ /issuing SELECT public\.c32_who\($ab\) AS c32_who\nDETAIL:  on server c32_other\@localhost:/
	  && $who !~ /issuing SELECT gridha\.bucket_renew/
	  && $who =~ /issuing UPDATE gridha\.bucket_claims_\d+ .*\nDETAIL:  on server $su\@localhost:/,
	'setrole: after SET ROLE c32_other on the coordinator, Citus sends a delegated call to the worker as c32_other (session_user and current_user there); the session\'s renewal of a bucket its login role took is then not delegated: it runs on the coordinator (its statements reach the shard as postgres, the login role and the functions\' owner here) and succeeds'
);

# ---------------------------------------------------------------------------
# checks

# exactly once, in order: every batch of s01..s24 committed after one
# hand-out, each handed out only after its service's previous one was final
my $order = one(q{
SELECT sum(CASE WHEN attempts <> 1 OR status <> 'committed' THEN 1 ELSE 0 END)
       || '/' || sum(CASE WHEN seq <> rn THEN 1 ELSE 0 END)
       || '/' || sum(CASE WHEN prev_finished IS NOT NULL AND handed_out_at < prev_finished THEN 1 ELSE 0 END)
       || '/' || sum(CASE WHEN batch_id <> 'b' || lpad(seq::text, 2, '0') THEN 1 ELSE 0 END)
  FROM (SELECT b.*, row_number() OVER w AS rn, lag(finished_at) OVER w AS prev_finished
          FROM gridha.bucket_batches b WHERE service_id LIKE 's%'
        WINDOW w AS (PARTITION BY bucket, service_id ORDER BY seq)) x});
my $queues = one(q{
SELECT count(*) || '/' || sum(CASE WHEN head_seq = tail_seq + 1 AND tail_seq = 10 AND NOT in_flight AND ready_at IS NULL THEN 1 ELSE 0 END)
  FROM gridha.bucket_services WHERE service_id LIKE 's%'});
diag("order (not once / seq gaps / handed out before the previous one was final / out of place): $order; queues: $queues");
ok($order eq '0/0/0/0' && $queues eq "$NSERVICES/$NSERVICES",
	"order: each of the $TOTAL batches handed out exactly once, per service in seq order, each after the previous one was final; every queue drained"
);

ok($samples >= 1 && $inflight_max == 0,
	"one in flight: $samples samples taken while the instances ran found no service with two batches in flight");

# every bucket's epoch, sampled before the instances took their buckets,
# at each pass and around the fence's take-over and release, and now:
# none went down from one sample to the next
sample_epochs();
my ($epochs_ok, $epochs_down) = (1, '');
for my $i (1 .. $#epoch_samples)
{
	foreach my $b (keys %{ $epoch_samples[$i] })
	{
		next if $epoch_samples[$i]{$b} >= $epoch_samples[ $i - 1 ]{$b};
		$epochs_ok = 0;
		$epochs_down .= " $b:$epoch_samples[$i-1]{$b}->$epoch_samples[$i]{$b}";
	}
}
my $epoch_rows = one(q{
SELECT count(*) FROM gridha.bucket_batches b JOIN gridha.bucket_claims c USING (bucket)
 WHERE b.epoch > c.epoch});
my $held_epochs = one(sprintf(q{SELECT string_agg(DISTINCT epoch::text, ',') FROM gridha.bucket_claims
 WHERE bucket IN (%s)}, join(',', @buckets)));
diag(sprintf('epochs: %d samples of 64 buckets%s; ', scalar @epoch_samples, $epochs_down ne '' ? ", down:$epochs_down" : '')
	  . "held buckets at $held_epochs; batches above their bucket's epoch: $epoch_rows; fence bucket 0 -> $e1 -> $e2 -> $e3");
ok( $epochs_ok
	  && @epoch_samples > 5
	  && keys %{ $epoch_samples[-1] } == 64
	  && $e1 == 1
	  && $e2 == 2
	  && $e3 == 3
	  && $held_epochs eq '1'
	  && $epoch_rows eq '0',
	'epochs never down: no bucket\'s epoch went down between samples taken through the run; each rose by one whenever it changed hands (0, 1, 2, 3 on the fence bucket: acquire, take-over, release then acquire), the held buckets stayed at 1, no batch carries an epoch above its bucket\'s'
);

# the coordinator's shells: the bucket tables' local files, gridha's own
# per-service tables
my $shells = one(q{
SELECT string_agg(c || ':' || (pg_stat_file(pg_relation_filepath(c))).size, ',' ORDER BY c)
  FROM unnest(ARRAY['gridha.bucket_batches', 'gridha.bucket_claims', 'gridha.bucket_services']) AS c});
my $own = one(q{SELECT (SELECT count(*) FROM gridha.batches) + (SELECT count(*) FROM gridha.service_claims)
  + (SELECT count(*) FROM gridha.instances)});
diag("coordinator shells: $shells; rows in gridha's own tables: $own");
ok( $shells eq 'gridha.bucket_batches:0,gridha.bucket_claims:0,gridha.bucket_services:0'
	  && $own eq '0',
	'shells: on the coordinator the bucket tables\' local files are empty, and gridha.batches, gridha.service_claims and gridha.instances hold no row'
);

my $busy_rows = one(sprintf(q{SELECT count(*) FROM gridha.bucket_batches WHERE bucket = %d AND status = 'committed'}, $busy));
diag("move: shard $shard of bucket $busy from $move_from to $move_to: $move_out; committed in the bucket before the move $committed_before_move, at the end $busy_rows");
ok( $moved
	  && $move_out !~ /ERROR/
	  && $committed_before_move < $per_bucket{$busy} * $NBATCHES
	  && $busy_rows == $per_bucket{$busy} * $NBATCHES
	  && $order eq '0/0/0/0',
	"move: the shard of the busiest bucket moved to the other worker mid-run (citus_move_shard_placement, block_writes), and its $per_bucket{$busy} services' batches were all committed, none lost or out of order"
);

# ---------------------------------------------------------------------------
# batched: the batched per-bucket hand-out and reports (issue 43.4), on a
# bucket of their own with three services X, Y, Z (xb1, yb1, xb2, zb1
# enqueued in that order), held by A. Each call a statement of its own
# (Citus sends it to the bucket's worker), its array read back by psql.

my %taken = map { $_ => 1 } (keys %holder, $fb, $gb);
my ($hb, %in_hb);
foreach my $i (1 .. 2000)
{
	my $b = one("SELECT gridha.bucket_of('h$i', 64)");
	next if $taken{$b};
	push @{ $in_hb{$b} }, "h$i";
	if (@{ $in_hb{$b} } == 3)
	{
		$hb = $b;
		last;
	}
}
my ($X, $Y, $Z) = @{ $in_hb{$hb} };
one("SELECT gridha.bucket_enqueue($hb, '$_->[0]', '$_->[1]', '\\x01')")
  foreach ([ $X, 'xb1' ], [ $Y, 'yb1' ], [ $X, 'xb2' ], [ $Z, 'zb1' ]);
my $he1 = one("SELECT gridha.bucket_acquire($hb, '$A', '10 min')");

# handed(ARRAY): "service/batch/epoch/attempts" of each element, in order
sub handed_sql
{
	my ($call) = @_;
	return qq{SET citus.log_remote_commands = on;
SET client_min_messages = notice;
SELECT $call AS h \\gset
RESET citus.log_remote_commands;
SELECT 'got ' || coalesce(string_agg(service_id || '/' || batch_id || '/' || epoch || '/' || attempts, ',' ORDER BY o), '')
  FROM unnest(:'h'::gridha.bucket_batch[]) WITH ORDINALITY AS x(service_id, batch_id, seq, payload, epoch, attempts, target, o);
};
}
my $b1 = run($coord, handed_sql("gridha.bucket_next_batches($hb, '$A', $he1, 2)"));
my $hrel = one("SELECT gridha.bucket_release($hb, '$A', $he1)");
my $he2 = one("SELECT gridha.bucket_acquire($hb, '$A', '10 min')");
my $b2 = run($coord, handed_sql("gridha.bucket_next_batches($hb, '$A', $he2, 10)"));
my $bstale = run($coord, "SELECT gridha.bucket_next_batches($hb, '$A', $he1, 10)");
my ($XY1, $XY2) = sort ($X, $Y);
my %first = ($X => 'xb1', $Y => 'yb1');
diag("batched hand-outs on bucket $hb ($X, $Y, $Z): epochs $he1 $he2 (release: $hrel)\nfirst:\n$b1\nafter the release:\n$b2\nat the old epoch:\n$bstale");
ok( $b1 =~ /issuing SELECT gridha\.bucket_next_batches\($hb, 'aaaaaaaa-0000-0000-0000-000000000032'::uuid, /
	  && $b1 =~ /on server postgres\@localhost:(\d+)/
	  && $1 != $coord->port
	  && $b1 =~ /^got $X\/xb1\/$he1\/1,$Y\/yb1\/$he1\/1$/m
	  && $he2 == $he1 + 1
	  && $b2 =~ /^got $Z\/zb1\/$he2\/1,$XY1\/$first{$XY1}\/$he2\/2,$XY2\/$first{$XY2}\/$he2\/2$/m
	  && sqlstate_of($bstale) eq 'RG001',
	'batched: bucket_next_batches is sent whole to the bucket\'s worker and hands out at most max_batches heads, one per service, the service waiting longest first (xb1 and yb1, not xb2 behind xb1; after a release and acquire, zb1 then xb1 and yb1 again at the new epoch); at the old epoch it is refused (RG001)'
);

# reports: per row, fenced by the row's own epoch; a refused row leaves
# the others
my $rep_sql = sub {
	my ($call) = @_;
	return qq{SELECT $call AS r \\gset
SELECT 'rep ' || string_agg(coalesce(status::text, sqlstate), ',' ORDER BY o)
  FROM unnest(:'r'::gridha.bucket_report_result[]) WITH ORDINALITY AS x(service_id, batch_id, status, sqlstate, message, o);
};
};
my $s1 = run($coord, $rep_sql->("gridha.bucket_report_submissions($hb, '$A', ARRAY[
    ('$X', 'xb1', $he2, 'accepted', NULL), ('$Y', 'yb1', $he1, 'accepted', NULL),
    ('$Z', 'zb1', $he2, 'rejected', NULL), ('$X', 'nosuch', $he2, 'accepted', NULL),
    NULL]::gridha.submission_report[])"));
my $s2 = run($coord, $rep_sql->("gridha.bucket_report_statuses($hb, '$A', ARRAY[
    ('$X', 'xb1', $he2, 'committed', NULL), ('$Y', 'yb1', $he2, 'committed', NULL)]::gridha.status_report[])"));
my $b3 = run($coord, handed_sql("gridha.bucket_next_batches($hb, '$A', $he2, 10)"));
my $hrows = one("SELECT string_agg(batch_id || '/' || status || '/' || epoch || '/' || attempts, ',' ORDER BY batch_id)
  FROM gridha.bucket_batches WHERE bucket = $hb");
diag("batched reports:\nsubmissions: $s1\nstatuses: $s2\nthen: $b3\nrows $hrows");
ok( $s1 =~ /^rep pending,RG001,invalid,RG003,22004$/m
	  && $s2 =~ /^rep committed,RG002$/m
	  && $b3 =~ /^got $X\/xb2\/$he2\/1$/m
	  && $hrows eq "xb1/committed/$he2/2,xb2/submitting/$he2/1,yb1/submitting/$he2/2,zb1/invalid/$he2/1",
	'batched: bucket_report_submissions and bucket_report_statuses answer one element per row in order, each fenced by its own epoch: the row at the old epoch is refused (RG001), an unknown batch (RG003), a NULL row (22004), a committed report of a batch not accepted (RG002), while the other rows pass (pending, invalid, committed); the refused batch stays as it was and X\'s next batch follows'
);

# take-overs during a shard move: two take-overs of one bucket whose
# holder's lease ran out, issued while a move of its shard (block_writes)
# holds its locks in an open transaction, wait for it; after its commit
# exactly one of them gets the new epoch (without the per-bucket
# functions' first write, each read the placement being left and both got
# it)
{
	my $mb = one("SELECT min(bucket) FROM gridha.bucket_claims WHERE holder IS NULL");
	my ($P, $Q, $R) = map { sprintf('%08d-0000-0000-0000-000000000032', $_) } (11, 12, 13);
	my $e0 = one("SELECT gridha.bucket_acquire($mb, '$P', '1 ms')");
	my $mshard = one("SELECT get_shard_id_for_distribution_column('gridha.bucket_claims', $mb)");
	my $mfrom = one("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $mshard");
	my $mto = $mfrom == $nodes[1]->port ? $nodes[2]->port : $nodes[1]->port;
	my $mv = psql_script("BEGIN;\nSELECT citus_move_shard_placement($mshard, 'localhost', $mfrom, 'localhost', $mto, shard_transfer_mode => 'block_writes');\nSELECT pg_sleep(8) AS move_holds;\nSELECT 'moved at ' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;\nCOMMIT;\n");
	my $holding = 0;
	foreach (1 .. 600)
	{
		$holding = one(q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(8) AS move_holds%' AND state = 'active'});
		last if $holding;
		usleep(100_000);
	}
	my @t = map { psql_script("SELECT gridha.bucket_takeover($mb, '$_', '10 min');\n") } ($Q, $R);
	my $waiting = 0;
	foreach (1 .. 50)
	{
		$waiting = one(q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT gridha.bucket_takeover%' AND state = 'active'});
		last if $waiting == 2;
		usleep(100_000);
	}
	my ($mout, $merr) = psql_finish($mv);
	my @got = map { my ($o, $e) = psql_finish($_); $o =~ s/\s+$//; $o . ($e ne '' ? " [$e]" : '') } @t;
	my $row = one("SELECT holder || '/' || epoch FROM gridha.bucket_claims WHERE bucket = $mb");
	# the lease the take-over got, from the clock after its wait: its
	# hard expiry is at least the move's commit (the clock read just
	# before it) plus the 10 min asked (from the transaction's start, now(),
	# it would be earlier: the take-over's transaction began before)
	my ($moved_at) = $mout =~ /^moved at (\d+)$/m;
	my $hard = one("SELECT (extract(epoch FROM hard_expiry) * 1000000)::bigint FROM gridha.bucket_claims WHERE bucket = $mb");
	my $lease_ok = defined $moved_at && $hard >= $moved_at + 600 * 1000000;
	my $mnow = one("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $mshard");
	my $e1 = $e0 + 1;
	my @winners = grep { $got[$_] eq "$e1" } (0, 1);
	my @losers = grep { $got[$_] eq '' } (0, 1);
	diag("take-overs during a move: bucket $mb (shard $mshard, $mfrom -> $mto, now on $mnow), epoch $e0 before;"
		  . " the move held its locks: $holding; take-overs waiting: $waiting; answers: Q '$got[0]', R '$got[1]'; bucket now $row; move: $merr");
	diag(sprintf('the move committed at %s (µs), the winner\'s hard expiry %s: %s after the commit plus 10 min',
			$moved_at // '(not read)', $hard, defined $moved_at ? ($hard - $moved_at - 600 * 1000000) . ' µs' : '?'));
	ok( $holding == 1 && $waiting == 2 && $mnow == $mto
		  && @winners == 1 && @losers == 1
		  && $row eq ($winners[0] == 0 ? $Q : $R) . "/$e1",
		'take-overs during a shard move: two take-overs of a bucket whose lease ran out, issued while a move of its shard (block_writes) holds its locks, wait for it; after its commit exactly one gets the new epoch and holds the bucket, the other gets nothing (NULL)');
	ok($lease_ok,
		'lease from the clock: the take-over that waited for the move got a lease ending at least 10 min (what it asked) after the move\'s commit, not 10 min after its own transaction began (clock_timestamp(), not now())');
}

# ---------------------------------------------------------------------------
# producers and instances (docs/citus.md, "Built: producers and
# instances"): gridha.enqueue and gridha.register_instance in the mode, an
# instance's owner checked by the per-bucket functions and next_batch

# as(ROLE, SQL): what psql prints as that login role (verbose errors)
sub as_role
{
	my ($role, $sql) = @_;
	my ($o, $e) = ('', '');
	$coord->psql('c32', $sql, stdout => \$o, stderr => \$e, on_error_stop => 0,
		extra_params => [ '-U', $role, '-v', 'VERBOSITY=verbose' ]);
	return "$o\n$e";
}

# a service in a bucket nobody holds
my $pq;
foreach my $i (1 .. 400)
{
	$pq = "pq$i";
	last if one("SELECT holder IS NULL FROM gridha.bucket_claims WHERE bucket = gridha.bucket_of('$pq', 64)") eq 't';
}
my $pqb = one("SELECT gridha.bucket_of('$pq', 64)");
my $enq = join(',', map { one("SELECT gridha.enqueue('$pq', 'q$_', '\\x0$_')") } 1 .. 3);
my $pq_rows = one("SELECT string_agg(bucket || '/' || batch_id || '/' || seq || '/' || status, ',' ORDER BY seq)
  FROM gridha.bucket_batches WHERE service_id = '$pq'");
diag("enqueue: $pq in bucket $pqb: seqs $enq; rows $pq_rows");
ok($enq eq '1,2,3' && $pq_rows eq "$pqb/q1/1/queued,$pqb/q2/2/queued,$pqb/q3/3/queued",
	'producers: gridha.enqueue in the mode returns each batch\'s seq (1, 2, 3) and puts it in the service\'s bucket (gridha.bucket_of(service_id, 64)), queued');

# bad input: the single server's SQLSTATEs (an unknown target: RG006); nothing written
my $state = sub {
	one("SELECT count(*) || '/' || coalesce(sum(tail_seq), 0) FROM gridha.bucket_services")
	  . '/' . one('SELECT count(*) FROM gridha.bucket_batches');
};
my $before_bad = $state->();
my $long = 'x' x 513;
my @bad = (
	[ "SELECT gridha.enqueue(NULL, 'b', '\\x01')", '22004', 'service_id must not be null' ],
	[ "SELECT gridha.enqueue('', 'b', '\\x01')", '22023', 'service_id must not be empty' ],
	[ "SELECT gridha.enqueue('$pq', NULL, '\\x01')", '22004', 'batch_id must not be null' ],
	[ "SELECT gridha.enqueue('$pq', '', '\\x01')", '22023', 'batch_id must not be empty' ],
	[ "SELECT gridha.enqueue('$long', 'b', '\\x01')", '22023', 'service_id is too long' ],
	[ "SELECT gridha.enqueue('$pq', '..', '\\x01')", '22023', 'batch_id must not be "\.\."' ],
	[ "SELECT gridha.enqueue('$pq', 'q9', '\\x01', '')", '22023', 'target must not be empty' ],
	[ "SELECT gridha.enqueue('${pq}new', 'q9', '\\x01', 'ledger')", 'RG006', 'unknown target "ledger"' ],
	[ "SELECT gridha.enqueue('$pq', 'q2', '\\x02')", '23505', 'duplicate key value' ]);
my ($bad_ok, $bad_out) = (1, '');
foreach my $b (@bad)
{
	my $o = run($coord, $b->[0]);
	$bad_out .= "$o\n";
	$bad_ok = 0 unless sqlstate_of($o) eq $b->[1] && $o =~ /ERROR:  $b->[1]: $b->[2]/;
}
my $after_bad = $state->();
diag("enqueue refusals (services/tails/batches $before_bad -> $after_bad):\n$bad_out");
ok($bad_ok && $before_bad eq $after_bad && $bad_out =~ /HINT:  Add it first: INSERT INTO gridha.targets/,
	'producers: gridha.enqueue refuses NULL, empty, too long and "." ids and an empty target with the single server\'s SQLSTATEs (22004, 22023), an unknown target with RG006 and a batch id its service has with 23505; no row of the bucket tables changed');

# register_instance: owned by the calling role; serves checked as on one server (22023)
$coord->safe_psql('c32', 'CREATE ROLE c32_intruder LOGIN IN ROLE gridha_submitter');
my $reg = as_role('c32_other', "SELECT gridha.register_instance('c32 worker')");
my ($I) = $reg =~ /^([0-9a-f-]{36})$/m;
$I //= '00000000-0000-0000-0000-000000000000';
my $reg_row = one("SELECT owner || '/' || label FROM gridha.bucket_instances WHERE instance_id = '$I'");
my $serves = as_role('c32_other', "SELECT gridha.register_instance('s', ARRAY['submit_url', 'bogus'])");
my $ninst = one('SELECT count(*) FROM gridha.bucket_instances');
diag("register_instance as c32_other: $reg\nrow: $reg_row\nwith serves: $serves\ninstances: $ninst");
ok($reg_row eq 'c32_other/c32 worker' && sqlstate_of($serves) eq '22023' && $serves =~ /ERROR:  22023: unknown target kind "bogus"/
	  && one("SELECT count(*) FROM gridha.bucket_instances WHERE label = 's'") eq '0',
	'instances: gridha.register_instance in the mode returns a new instance, in gridha.bucket_instances owned by the calling role (c32_other) with its label; with an unknown kind in serves it is refused (22023, as on one server) and registers nothing');

# the owner serves through next_batch and the reports, in order
my $cycle = as_role('c32_other', qq{
SELECT service_id, batch_id, epoch FROM gridha.next_batch('$I') \\gset n_
\\echo got :n_service_id/:n_batch_id
SELECT gridha.report_submission('$I', :'n_service_id', :'n_batch_id', :n_epoch, 'accepted');
SELECT gridha.report_status('$I', :'n_service_id', :'n_batch_id', :n_epoch, 'committed');
SELECT service_id, batch_id, epoch FROM gridha.next_batch('$I') \\gset n_
\\echo got :n_service_id/:n_batch_id
SELECT gridha.report_submission('$I', :'n_service_id', :'n_batch_id', :n_epoch, 'accepted');
SELECT service_id, batch_id, epoch FROM gridha.next_batch('$I') \\gset m_
\\echo nothing more while q2 is in flight: :{?m_service_id}
});
my $held = one("SELECT holder || '/' || holder_role FROM gridha.bucket_claims WHERE bucket = $pqb");
my @got = $cycle =~ /^got (\S+)$/mg;
diag("c32_other's instance $I:\n$cycle\nbucket $pqb: $held");
ok("@got" eq "$pq/q1 $pq/q2" && $cycle =~ /^pending\ncommitted$/m && $cycle =~ /^nothing more while q2 is in flight: FALSE$/m
	  && $held eq "$I/c32_other",
	'instances: the owner\'s gridha.next_batch takes the service\'s bucket and hands its batches out in order (q1, then q2 once q1 was committed through the reports), one in flight');

# another role (not a member of c32_other, no superuser) naming that
# instance: refused (RG008) by bucket_acquire (a free bucket),
# bucket_takeover (the instance's bucket) and next_batch; nothing changes
my $free = one("SELECT min(bucket) FROM gridha.bucket_claims WHERE holder IS NULL");
my $rows_of = sub {
	one("SELECT string_agg(bucket || ':' || coalesce(holder::text, '-') || '/' || epoch || '/' || coalesce(holder_role, '-') || '/' || coalesce(hard_expiry::text, '-'), ',' ORDER BY bucket)
	       FROM gridha.bucket_claims WHERE bucket IN ($free, $pqb)")
	  . ' ' . one("SELECT string_agg(batch_id || '/' || status || '/' || attempts, ',' ORDER BY seq) FROM gridha.bucket_batches WHERE service_id = '$pq'");
};
my $owner_before = $rows_of->();
my $intr = '';
$intr .= as_role('c32_intruder', $_) . "\n" foreach (
	"SELECT gridha.bucket_acquire($free, '$I', '10 min')",
	"SELECT gridha.bucket_takeover($pqb, '$I', '10 min')",
	"SELECT * FROM gridha.next_batch('$I')");
my $owner_after = $rows_of->();
my @rg008i = ($intr =~ /ERROR:  RG008: role "c32_intruder" does not own instance $I/g);
diag("c32_intruder naming $I:\n$intr\nbuckets $free and $pqb: $owner_before -> $owner_after");
ok(@rg008i == 3 && $owner_before eq $owner_after && $owner_before =~ /(^|,)$free:-\//,
	'instances: another role (not a member of the owner, no superuser) naming the instance is refused (RG008) by bucket_acquire of a free bucket, bucket_takeover of the instance\'s bucket and gridha.next_batch; both buckets and the service\'s batches stay as they were');

# an instance id never registered: the first next_batch registers it,
# owned by the caller (as on one server); then another role is refused
# (RG008); with gridha.unknown_instance = refuse, next_batch refuses an
# unknown id (RG024) and registers nothing
my $U = 'dddddddd-0000-0000-0000-000000000032';
my $V = 'eeeeeeee-0000-0000-0000-000000000032';
my $first = as_role('c32_other', "SELECT count(*) FROM gridha.next_batch('$U')");
my $u_row = one("SELECT owner || '/' || (label IS NULL) FROM gridha.bucket_instances WHERE instance_id = '$U'");
my $u_other = as_role('c32_intruder', "SELECT count(*) FROM gridha.next_batch('$U')");
my $refuse = run($coord, "SET gridha.unknown_instance = refuse;\nSELECT count(*) FROM gridha.next_batch('$V');");
my $v_rows = one("SELECT count(*) FROM gridha.bucket_instances WHERE instance_id = '$V'");
diag("first use of $U as c32_other: $first\nrow: $u_row\nas c32_intruder: $u_other\nunknown $V with refuse: $refuse\nits rows: $v_rows");
ok($first !~ /ERROR/ && $u_row eq 'c32_other/true'
	  && $u_other =~ /ERROR:  RG008: role "c32_intruder" does not own instance $U/
	  && sqlstate_of($refuse) eq 'RG024' && $v_rows eq '0',
	'instances: an id never registered is registered by its first next_batch, owned by the caller (c32_other); another role naming it is then refused (RG008); with gridha.unknown_instance = refuse an unknown id is refused (RG024) and not registered');

# the per-bucket functions do not register an id; with
# gridha.unknown_instance = refuse on the node where the call runs (here a
# role's setting, which Citus carries to every node), bucket_acquire and
# bucket_takeover refuse an id never registered (RG024), on the worker
# the call was sent to, and change nothing
$coord->safe_psql('c32', q{CREATE ROLE c32_strict LOGIN IN ROLE gridha_submitter;
ALTER ROLE c32_strict SET gridha.unknown_instance = 'refuse'});
my $W = 'ffffffff-0000-0000-0000-000000000032';
my $role_set = join(' ', map {
		$_->safe_psql('c32', q{SELECT coalesce((SELECT array_to_string(s.setconfig, ',') FROM pg_db_role_setting s
			JOIN pg_roles r ON r.oid = s.setrole WHERE r.rolname = 'c32_strict' AND s.setdatabase = 0), '-')})
	} @nodes);
my $strict_before = $rows_of->();
my $strict = as_role('c32_strict', qq{SET citus.log_remote_commands = on;
SET client_min_messages = notice;
SELECT gridha.bucket_acquire($free, '$W', '10 min');
SELECT gridha.bucket_takeover($pqb, '$W', '10 min');});
my $strict_after = $rows_of->();
my $w_rows = one("SELECT count(*) FROM gridha.bucket_instances WHERE instance_id = '$W'");
my @rg024 = ($strict =~ /ERROR:  RG024: unknown instance $W/g);
my $wports = join('|', map { $_->port } @nodes[1, 2]);
diag("c32_strict's setting on each node: $role_set\nper-bucket calls naming $W:\n$strict\nbuckets: $strict_before -> $strict_after; its rows: $w_rows");
ok( $role_set eq 'gridha.unknown_instance=refuse gridha.unknown_instance=refuse gridha.unknown_instance=refuse'
	  && @rg024 == 2
	  && $strict =~ /issuing SELECT gridha\.bucket_acquire\($free,.{0,300}?on server \w+\@localhost:($wports)\b/s
	  && $strict_before eq $strict_after && $w_rows eq '0',
	'instances: with gridha.unknown_instance = refuse (a role\'s setting, on every node), bucket_acquire of a free bucket and bucket_takeover, sent to a worker, refuse an id never registered (RG024); nothing changes, nothing registered');

my $logs = join('', map { slurp($_->logfile) } @nodes);
my @crash = grep { /server process .* was terminated|PANIC/ } split /\n/, $logs;
ok(!@crash, 'no node crashed and no PANIC in the logs');
diag(join("\n", @crash)) if @crash;

note(sprintf('figures: %d passes, %d hand-out calls, %d cycles, %d enqueues, %d acquires, %d shard move(s)',
		$passes, $calls{next_batch}, $calls{cycles}, $calls{enqueue}, $calls{acquire}, $moved ? 1 : 0));

$_->stop foreach @nodes;
