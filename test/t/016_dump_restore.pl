# test/t/016_dump_restore.pl: logical backups keep everything that matters
# (DESIGN.md section 9): a database taken with pg_dump while gridha works,
# restored into another cluster, carries on where the dump left it.
#
# Steps, in the order they run:
#
#   live      database gridha_dump on the first cluster ('live'), restarted
#             with two background workers serving it, and the reference
#             client (client/gridha-client), both against the test ledger
#             (test/dlt/ledger.py: a 2 s commit delay keeps batches
#             pending, '^bad-' batches end INVALID, every request must
#             carry the header X-Test-Token: dump-default). The 'default'
#             target is changed (rate_burst, reject_codes, request_headers),
#             a second target has headers of its own and a rate limit, a
#             third, 'gated', points at a closed port (its batches are
#             delayed, again and again); an id sequence has ids reserved
#             (the set is kept), a leader lease has a tick. 20 services x
#             8 batches, 5 more on 'gated'; an instance X, in a psql session
#             of its own, holds five services whose heads it leaves
#             submitting, pending, valid, unknown and delayed (the test
#             ledger never answers VALID, and the others are fleeting in a
#             live run), on a fourth target, 'xheld', which has neither URL
#             nor function: no worker can serve it, so none takes them; the
#             test POSTs X's submitting head for it, as if X's report were
#             lost.
#   dump      mid-run, with the workers, the client and X live and POSTs
#             under way (the ledger now holds its answers for 6 s, and a
#             new service's head has just arrived there): its session locks
#             gridha.batches (SHARE: no batch can change from then on),
#             exports its snapshot, and under it takes pg_dump -Fc, pg_dump
#             in plain format and the record of what they hold
#             (test/dba/dump_state.sql: every batch with every column,
#             claims, instances, targets, leases, ticks, id sequences and
#             windows, rate state); batches in every status, some
#             submitting with their POST at the ledger.
#   stop      still under that lock, the client and X are killed and the
#             cluster is stopped (immediate: no backend commits anything
#             more), then started again without workers. The old run ends
#             exactly at the dump, as when a database moves to another
#             cluster: the old database holds the record's batches, and
#             every POST the ledger applied after the lock is of a batch the
#             dump holds as submitting. From here on the backup is all that
#             is left of that run.
#   restore   a second, fresh cluster ('restored'), started without
#             workers: createdb and pg_restore -d of the custom dump into
#             gridha_dump, psql -f of the plain dump into gridha_dump_plain.
#             Both equal the record, row for row, and each other.
#   drain     'gated' and 'xheld' get the ledger's URLs in the restored
#             database; the second cluster restarts with two workers
#             serving it, against the same ledger, until every batch is
#             final. Then: per-service order at the ledger intact across
#             the restore (check_log.py, expected = the enqueue order the
#             dump holds); every duplicate POST explained (see
#             "duplicates" below); no epoch went back, and every hand-out
#             after the restore, at the ledger and in the table, has an
#             epoch above the dump's; ids reserved before the dump are
#             never handed out by reserve_ids/next_id after the restore.
#
# What the restore does with claims, instances and leases: they come back
# exactly as they were (gridha.service_claims, gridha.instances and
# gridha.leases are dumped with their rows), and the service counts are
# rebuilt from the claims. Nothing of the old cluster runs in the new one:
# the old instances' leases run out (the workers' and the client's at once,
# their expiries being seconds long and past by the time the restore is
# served; X's, a minute long, is moved to 30 s after the restore by the
# test), and the new workers take their claims over with a new epoch. The
# liveness key of every old instance names a session that does not exist in
# the new cluster, so each claim with nothing submitting is taken at once,
# without waiting for its lease; only a head that was submitting waits for
# the old lease's hard expiry, and is then handed out again.
#
# Duplicates: the ledger counts a POST of a batch id it has accepted before
# as a duplicate. After a restore a batch is POSTed twice exactly when its
# first POST reached the ledger but the dump does not know it: the dump
# holds it handed out and not final (submitting: the POST under way or done,
# its report not yet written; delayed after a timeout would be another
# case). The old run ends at the dump (see stop), so every duplicate POST
# must come from the new cluster, of a batch first accepted by the old one,
# that the dump holds in flight: submitting, pending, valid, delayed or
# unknown. X's head and the POSTs whose answers the ledger holds make sure
# there are such batches. (A database that goes on serving after its dump
# hands out more: a restore POSTs those batches again too; the README says
# so.)
#
# Every wait is a bounded poll. Runs on PostgreSQL's TAP framework
# (PostgreSQL::Test::Cluster starts, stops and restarts both clusters); it
# replaced test/suites/16_dump_restore.sh. Run by `make test` (test/run.sh,
# part 016_dump_restore) and by `make prove_installcheck` as any user but
# root; needs client/gridha-client built (make).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";

use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use GridhaTest;

my $repo   = gridha_repo();
my $client = "$repo/client/gridha-client";
my $DB     = 'gridha_dump';
my $PLAIN  = 'gridha_dump_plain';
my $work   = PostgreSQL::Test::Utils::tempdir;

# Every session prints timestamps alike (the record and the restored state
# are compared as text).
$ENV{PGTZ} = 'UTC';

# `make installcheck` of a tree that was installed but not built (pgxn
# check) has no client: the test says so and runs nothing
plan skip_all => 'client/gridha-client is not built (run make)' unless -x $client;
plan tests => 45;

# Claim timings of both clusters: leases of seconds, so that the old
# instances' leases are long past when the restored database is served.
my $timing = q{
gridha.soft_expiry = '4s'
gridha.hard_expiry = '10s'
gridha.renew_interval = '1s'
gridha.naptime = '200ms'
gridha.monitor_interval = '200ms'
gridha.submit_timeout = '8s'
};
my $workers = qq{
gridha.workers = 2
gridha.database = '$DB'
};
# The live cluster's workers run as a role that is not a superuser, as the
# other suites' do: the dump then holds instances whose owner the second
# cluster lacks, which pg_restore --exit-on-error and psql -f must take.
my $live_workers = qq{
$workers
gridha.worker_role = 'gridha_test_worker'
};
# Both clusters as test/run.sh's: gridha preloaded, the server's own
# messages only. The live cluster commits synchronously (PostgreSQL's
# default): a transaction the dump's snapshot sees is then in the WAL before
# the immediate stop, and "the old database ends with exactly the batches
# the dump holds" holds.
my $base_conf = gridha_conf() . qq{
log_statement = none
synchronous_commit = on
include_if_exists = 'gridha_run.conf'
$timing
};

# run_conf($node, $text): the settings of the node's next start
sub run_conf
{
	my ($node, $text) = @_;
	open(my $fh, '>', $node->data_dir . '/gridha_run.conf') or die $!;
	print $fh $text;
	close($fh);
	return;
}

my $live = PostgreSQL::Test::Cluster->new('live');
$live->init;
$live->append_conf('postgresql.conf', $base_conf);
my $restored = PostgreSQL::Test::Cluster->new('restored');
$restored->init;
$restored->append_conf('postgresql.conf', $base_conf);

# query($node, $db, $sql): what psql printed (unaligned, tuples only); ''
# after an error
sub query
{
	return psql_value(@_);
}

# check_is($node, $expected, $what, $sql): one test of a query in $DB
sub check_is
{
	my ($node, $expected, $what, $sql) = @_;
	my ($out, $err);
	$node->psql($DB, $sql, stdout => \$out, stderr => \$err);
	is($out . ($err ne '' ? "\n$err" : ''), $expected, $what);
	return;
}

# copy_to($node, $db, $sql, $file): COPY ($sql) TO STDOUT into $file
sub copy_to
{
	my ($node, $db, $sql, $file) = @_;
	IPC::Run::run(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($db), '-c',
			"COPY ($sql) TO STDOUT" ],
		'<', \undef, '>', $file, '2>', "$file.err");
	return;
}

sub read_lines
{
	my ($file) = @_;
	return () unless -f $file;
	return split /\n/, slurp_file($file);
}

# kind_of($file, $kind): the rows of one kind of a state file, as text
sub kind_of
{
	my ($file, $kind) = @_;
	return join('', map { "$_\n" } grep { (split /\t/, $_, 2)[0] eq $kind } read_lines($file));
}

# batch_status($file): service/batch => status of a state file's batches
sub batch_status
{
	my ($file) = @_;
	my %st;
	foreach my $line (read_lines($file))
	{
		my ($kind, $key, $val) = split /\t/, $line, 3;
		$st{$key} = decode_json($val)->{status} if $kind eq 'batch';
	}
	return %st;
}

# statuses($file): "status count ..." of a state file's batches
my @order = qw(queued submitting pending valid delayed unknown committed invalid);
sub statuses
{
	my %st = batch_status($_[0]);
	my %n;
	$n{$_}++ foreach values %st;
	return join(' ', map { "$_ $n{$_}" } grep { $n{$_} } @order);
}

# ledger_events($file): the ledger log's events
sub ledger_events
{
	return map { decode_json($_) } grep { $_ ne '' } read_lines($_[0]);
}

my $http = HTTP::Tiny->new(timeout => 10);

# --- live: the database, the workers, X, the services, the client -----------
my $ledger = start_ledger($work, '--commit-delay', '2', '--invalid-pattern', '^bad-',
	'--max-lifetime', '600', '--require-header', 'X-Test-Token: dump-default');
my $L = $ledger->{url};

$live->start;
$live->safe_psql('postgres', "CREATE DATABASE $DB");
$live->safe_psql($DB, qq{
CREATE EXTENSION gridha;
CREATE ROLE gridha_test_worker LOGIN IN ROLE pg_read_all_data, pg_write_all_data, gridha_submitter;

UPDATE gridha.targets
   SET submit_url = '$L/batches/{service_id}/{batch_id}',
       status_url = '$L/batch_statuses?id={batch_ids}',
       rate_burst = 3,
       reject_codes = '{400,409,422}',
       request_headers = '{"X-Test-Token": "dump-default"}'
 WHERE target = 'default';
INSERT INTO gridha.targets (target, submit_url, status_url, reject_codes, request_headers,
                            rate_interval, rate_burst)
VALUES ('splinter', '$L/batches/{service_id}/{batch_id}',
        '$L/splinter/batch_statuses?ids={batch_ids}', '{400}',
        '{"Authorization": "Bearer dump-splinter", "X-Tenant": "sixteen", "X-Test-Token": "dump-default"}',
        '50 milliseconds', 2);
INSERT INTO gridha.targets (target, submit_url, status_url, request_headers)
VALUES ('gated', 'http://127.0.0.1:9/batches/{service_id}/{batch_id}',
        'http://127.0.0.1:9/batch_statuses?id={batch_ids}', '{"X-Test-Token": "dump-default"}');
INSERT INTO gridha.targets (target, request_headers) VALUES ('xheld', '{"X-Test-Token": "dump-default"}');

SELECT gridha.create_id_sequence('orders', 1000, 2);
SELECT gridha.try_lead('00000000-0000-0000-0000-00000000d017');
SELECT outcome FROM gridha.run_maintenance('00000000-0000-0000-0000-00000000d017');
});

# Ids reserved before the dump: three blocks and 15 single ids (blocks of
# 5 for this backend's next_id), kept as ranges in ids-before.txt.
my $ids_before = $live->safe_psql($DB, q{
SET gridha.id_block_size = 5;
SELECT gridha.reserve_ids('orders', n)::text FROM (VALUES (10), (25), (400)) v (n);
SELECT int8range(i, i, '[]')::text FROM (SELECT gridha.next_id('orders') AS i FROM generate_series(1, 15)) x;
});
append_to_file("$work/ids-before.txt", "$ids_before\n");

run_conf($live, $live_workers);
$live->restart;
ok( wait_for_workers($live, $DB, 2, 30),
	"live: two background workers serve $DB");

# X: its services are created, claimed and their heads handed out in one
# transaction, so nobody else can take them first. They are on 'xheld',
# which no worker can serve: workers below their fair share take the idle
# heads of an instance above it (unknown and delayed are idle: ready to be
# handed out again), and under load they took x-unk and x-del before the
# check below saw them. Its lease is 60 s and its session stays open, so
# the live cluster leaves them alone until the dump.
append_to_file("$work/x.sql", q{
\set ON_ERROR_STOP 1
SET gridha.soft_expiry = '60s';
SET gridha.hard_expiry = '60s';
SET gridha.balance_claims = off;
SELECT gridha.register_instance('x') AS x \gset
BEGIN;
SELECT count(gridha.enqueue(s, s || '-b' || b, convert_to(s || ' batch ' || b, 'UTF8'), 'xheld'))
  FROM unnest(ARRAY['x-sub', 'x-pend', 'x-valid', 'x-unk', 'x-del']) s, generate_series(1, 2) b;
SELECT count(*) FROM gridha.acquire_claims(:'x');
CREATE TEMP TABLE h AS SELECT * FROM gridha.next_batches(:'x', 10);
COMMIT;
SELECT gridha.report_submission(:'x', service_id, batch_id, epoch, 'accepted')
  FROM h WHERE service_id IN ('x-pend', 'x-valid', 'x-unk');
SELECT gridha.report_status(:'x', service_id, batch_id, epoch, 'VALID') FROM h WHERE service_id = 'x-valid';
SELECT gridha.report_status(:'x', service_id, batch_id, epoch, 'UNKNOWN') FROM h WHERE service_id = 'x-unk';
SELECT gridha.report_submission(:'x', service_id, batch_id, epoch, 'delayed', 'held back by the test')
  FROM h WHERE service_id = 'x-del';
SELECT pg_sleep(300);
});
my $x = IPC::Run::start([ 'psql', '-X', '-q', '-d', $live->connstr($DB), '-f', "$work/x.sql" ],
	'<', \undef, '>', "$work/x.out", '2>&1');
ok( wait_until(
		20,
		sub {
			query($live, $DB, q{
			SELECT string_agg(service_id || '|' || status, ' ' ORDER BY service_id)
			  FROM gridha.batches WHERE batch_id LIKE 'x-%-b1'}) eq
			  'x-del|delayed x-pend|pending x-sub|submitting x-unk|unknown x-valid|valid';
		}),
	'live: X holds heads submitting, pending, valid, unknown and delayed');

# 20 services x 8 batches, in rounds; s01-s03 begin with a batch the
# ledger finds INVALID; s16-s20 go to the Splinter-dialect target. And 5
# services d01-d05 x 2 batches on the target 'gated', whose URL nobody
# answers (a closed port): their heads come back delayed at once, again and
# again, with a growing backoff, so they are delayed nearly all the time.
$live->safe_psql($DB, q{
SELECT count(gridha.enqueue(format('s%s', lpad(s::text, 2, '0')),
                            format('%ss%s-b%s', CASE WHEN b = 1 AND s <= 3 THEN 'bad-' ELSE '' END,
                                   lpad(s::text, 2, '0'), b),
                            convert_to(format('payload %s/%s', s, b), 'UTF8'),
                            CASE WHEN s > 15 THEN 'splinter' END))
  FROM generate_series(1, 8) b, generate_series(1, 20) s;
SELECT count(gridha.enqueue('d0' || s, format('d0%s-b%s', s, b), '\x0d', 'gated'))
  FROM generate_series(1, 2) b, generate_series(1, 5) s;
});

my $client_h = IPC::Run::start(
	[
		$client, '--dsn', $live->connstr($DB), '--label', 'dump-client',
		'--idle-sleep-ms', '100', '--monitor-interval-ms', '200',
		'--submit-timeout-ms', '8000', '--max-runtime-s', '150', '--log', "$work/client.log"
	],
	'<', \undef, '>', "$work/client.out", '2>', "$work/client.err");

ok( wait_until(
		40,
		sub {
			query($live, $DB, q{
			SELECT count(*) FILTER (WHERE status = 'committed') >= 25
			       AND count(*) FILTER (WHERE status = 'invalid') = 3
			  FROM gridha.batches}) eq 't';
		}),
	'live: the workers and the client commit batches (25 or more) and 3 end invalid');
note(query($live, $DB, 'SELECT status, count(*) FROM gridha.batches GROUP BY 1 ORDER BY 1'));

ok( wait_until(
		30,
		sub {
			query($live, $DB, q{
			SELECT count(*) >= 4 FROM gridha.batches
			 WHERE service_id LIKE 'd0%' AND status = 'delayed' AND attempts >= 3}) eq 't';
		}),
	"live: the heads of the 'gated' target, which nobody answers, are delayed (4 or more, after 3 attempts or more)"
);
note(query($live, $DB,
	q{SELECT DISTINCT detail FROM gridha.batches WHERE service_id LIKE 'd0%' AND status = 'delayed'}));

# X's POST of its submitting head reaches the ledger (X's report never
# will): the dump holds it submitting, the ledger has it.
my ($xsub_epoch, $xsub_attempt) = split /\|/, query($live, $DB, q{
	SELECT epoch, attempts FROM gridha.batches WHERE batch_id = 'x-sub-b1' AND status = 'submitting'});
my $r = $http->request(
	'POST', "$L/batches/x-sub/x-sub-b1",
	{
		content => 'x-sub batch 1',
		headers => {
			'X-Gridha-Epoch'   => $xsub_epoch   // 0,
			'X-Gridha-Attempt' => $xsub_attempt // 0,
			'X-Test-Token'     => 'dump-default'
		}
	});
like($r->{content} // '', qr/"result": "accepted"/,
	"live: X's POST of its submitting head x-sub-b1 is accepted by the ledger");

# --- dump: custom and plain format, and the record, under one snapshot taken
# once no batch can change ---------------------------------------------------

# A stall window at the ledger (POSTs applied as they arrive, every answer
# held for 6 s), and five new services f1-f5: once the ledger has accepted
# the POST of one of their heads, the dump locks gridha.batches, seconds
# before the answer can reach its worker, whose report then waits for the
# lock. The dump holds that batch submitting, and the ledger has it.
ledger_control($ledger, '{"stall_for": 60, "stall_seconds": 6, "stall_apply": "before"}');
$live->safe_psql($DB, q{SELECT count(gridha.enqueue('f' || s, format('f%s-b%s', s, b), '\x0f'))
                         FROM generate_series(1, 2) b, generate_series(1, 5) s});
ok( wait_until(
		30,
		sub {
			-f $ledger->{log}
			  && slurp_file($ledger->{log}) =~
			  /"event":"post","service_id":"f[1-5]","batch_id":"f[1-5]-b1".*"result":"accepted"/;
		}),
	'dump: POSTs under way as it is taken (the ledger accepted a new service\'s head, its answer held)');

my $state_sql = slurp_file("$repo/test/dba/dump_state.sql");
my ($host, $port) = ($live->host, $live->port);
append_to_file("$work/dump.psql", qq{
\\set ON_ERROR_STOP 1
BEGIN ISOLATION LEVEL REPEATABLE READ;
LOCK TABLE gridha.batches IN SHARE MODE;
\\! wc -l <"$ledger->{log}" >"$work/mark"
SELECT pg_export_snapshot() AS snapshot \\gset
\\setenv GRIDHA_DUMP_SNAPSHOT :snapshot
\\! pg_dump -h '$host' -p $port -Fc --snapshot="\$GRIDHA_DUMP_SNAPSHOT" -f "$work/dump.custom" $DB 2>"$work/pg_dump.err"; echo \$? >"$work/pg_dump.rc"
\\! pg_dump -h '$host' -p $port --snapshot="\$GRIDHA_DUMP_SNAPSHOT" -f "$work/dump.sql" $DB 2>>"$work/pg_dump.err"; echo \$? >>"$work/pg_dump.rc"
\\o $work/record.tsv
COPY ($state_sql) TO STDOUT;
\\o
\\! touch "$work/dumped"
SELECT pg_sleep(120);
});
my $start  = time();
my $dumper = IPC::Run::start(
	[ 'psql', '-X', '-q', '-A', '-t', '-d', $live->connstr($DB), '-f', "$work/dump.psql" ],
	'<', \undef, '>', "$work/dump.out", '2>&1');
wait_until(90, sub { -e "$work/dumped" || !$dumper->pumpable });
my $dump_ok =
     -e "$work/dumped"
  && join(',', read_lines("$work/pg_dump.rc")) eq '0,0'
  && -s "$work/dump.custom"
  && -s "$work/dump.sql"
  && -s "$work/record.tsv"
  && -s "$work/mark";
ok($dump_ok,
	'dump: pg_dump -Fc and plain mid-run, and the record, under one exported snapshot, gridha.batches locked ('
	  . (time() - $start)
	  . ' s)');
my $mark = -s "$work/mark" ? slurp_file("$work/mark") + 0 : 0;

# --- stop: the old run ends at the dump; the backup is what is left ---------
# SIGKILL, as a crash would: SIGTERM would let the client finish its batch
# in hand and release its claims after the dump
for my $h ($client_h, $x)
{
	eval { $h->signal('KILL'); $h->finish; };
}
my $stop_ok = $live->stop('immediate', fail_ok => 1);
eval { $dumper->kill_kill(grace => 0); };
run_conf($live, '');
my $start_ok = $live->start(fail_ok => 1);
ok($stop_ok && $start_ok,
	'stop: the client and X killed, the cluster stopped (immediate) with the dump\'s lock held, then started without workers'
);
if (!$dump_ok)
{
	diag(slurp_file("$work/dump.out"));
	diag(slurp_file("$work/pg_dump.err")) if -f "$work/pg_dump.err";
	die 'no dump to restore';
}
ledger_control($ledger, '{"clear": true}');

my $held = statuses("$work/record.tsv");
note("the dump holds: $held");
my $n = grep { " $held " =~ / \Q$_\E / } @order;
is($n, 8, "dump: it holds batches in every status ($n of 8)");
like(kind_of("$work/record.tsv", 'batch'), qr/"status": "delayed", [^}]*"service_id": "d0/,
	"dump: it holds batches delayed by the workers (the 'gated' target's)");

# The old database, after the stop, holds exactly the batches of the
# record: nothing changed a batch after the dump's snapshot.
copy_to($live, $DB, $state_sql, "$work/old.tsv");
my $record_batch = kind_of("$work/record.tsv", 'batch');
ok($record_batch ne '' && $record_batch eq kind_of("$work/old.tsv", 'batch'),
	'stop: the old database ends with exactly the batches the dump holds: the old run ended at the dump');

my %dump_status = batch_status("$work/record.tsv");
my @events = ledger_events($ledger->{log});
# the POSTs the ledger applied after the dump's lock was taken (accepted or
# duplicate), each as "batch result status-in-the-dump"
my @after_lock =
  map {
	my $key = "$_->{service_id}/$_->{batch_id}";
	"$key $_->{result} " . ($dump_status{$key} // '(not in the dump)')
  }
  grep {
	$_->{seq} > $mark
	  && $_->{event} eq 'post'
	  && ($_->{result} // '') =~ /^(accepted|duplicate)$/
  } @events;
my @odd = grep { !/ accepted submitting$/ } @after_lock;
SKIP:
{
	# with no POST after the lock the test would pass without judging one
	skip 'stop: no POST reached the ledger after the dump\'s lock in this run', 1
	  unless @after_lock;
	ok(!@odd,
		'stop: every POST the ledger applied after the dump\'s lock ('
		  . scalar(@after_lock)
		  . ') was accepted, of a batch the dump holds as submitting')
	  or diag(join("\n", @odd[ 0 .. ($#odd < 9 ? $#odd : 9) ]));
}

# the batches the dump holds as submitting whose POST the ledger has
# accepted (their reports were still to come), X's aside
my $n_posted = grep {
	my $key = join('/', $_->{service_id} // '', $_->{batch_id} // '');
	$_->{event} eq 'post'
	  && ($_->{result} // '') eq 'accepted'
	  && ($dump_status{$key} // '') eq 'submitting'
	  && $key !~ /^x-/
} @events;
ok($n_posted > 0,
	"dump: it holds batches submitting whose POST the ledger accepted, their reports still to come ($n_posted, X's aside)"
);

# --- restore: a second cluster, both formats --------------------------------
ok($restored->start(fail_ok => 1),
	'restore: the second cluster started (port ' . $restored->port . ')')
  or die 'the second cluster did not start';
$restored->safe_psql('postgres', "CREATE DATABASE $DB");
$restored->safe_psql('postgres', "CREATE DATABASE $PLAIN");

$start = time();
my $out;
ok( IPC::Run::run(
		[
			'pg_restore', '-d', $restored->connstr($DB), '--exit-on-error',
			"$work/dump.custom"
		],
		'>', \$out, '2>&1'),
	'restore: pg_restore -d of the custom dump into a fresh database (' . (time() - $start) . ' s)')
  or diag($out);
ok( IPC::Run::run(
		[
			'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $restored->connstr($PLAIN), '-f',
			"$work/dump.sql"
		],
		'>', \$out, '2>&1'),
	'restore: psql -f of the plain dump into another fresh database')
  or diag(substr($out, -2000));

copy_to($restored, $DB,    $state_sql, "$work/restored.tsv");
copy_to($restored, $PLAIN, $state_sql, "$work/restored-plain.tsv");

# restored_same($kind, $what): the restored rows of $kind equal the record's
sub restored_same
{
	my ($kind, $what) = @_;
	my $want = kind_of("$work/record.tsv", $kind);
	my $rows = () = $want =~ /\n/g;
	ok($want ne '' && $want eq kind_of("$work/restored.tsv", $kind), "restore: $what ($rows rows)")
	  or diag("record:\n" . substr($want, 0, 2000) . "\nrestored:\n"
		  . substr(kind_of("$work/restored.tsv", $kind), 0, 2000));
	return;
}
restored_same('batch',
	'every batch restored with its seq, status, payload, attempts, epoch, created_at and other columns');
note('restored: ' . statuses("$work/restored.tsv"));
restored_same('target',
	'every target row restored, the changed default row and the request_headers included');
check_is($restored, '3|{400,409,422}|{"X-Test-Token": "dump-default"}',
	'restore: the default row is the dumped one, not the one CREATE EXTENSION makes',
	q{SELECT concat_ws('|', rate_burst, reject_codes, request_headers) FROM gridha.targets WHERE target = 'default'});
restored_same('id_sequence', 'every id sequence restored with its high water');
restored_same('id_window',   'every id window restored');
restored_same('serial',      'the id sequences\' serial restored');
restored_same('claim', 'claims restored as they were: claimant, epoch, queue state, expiries');
restored_same('instance',
	'instances restored as they were, with their leases and liveness keys');
restored_same('lease',      'leader leases restored');
restored_same('tick',       'maintenance ticks restored');
restored_same('rate_state', 'rate state restored');
check_is($restored, 't', 'restore: the service counts are rebuilt from the restored claims',
	q{SELECT (SELECT sum(services) FROM gridha.service_counts) = (SELECT count(*) FROM gridha.service_claims)});
check_is($restored, '0', 'restore: every instance\'s held equals its restored claims', q{
	SELECT count(*) FROM gridha.instances i
	 WHERE held <> (SELECT count(*) FROM gridha.service_claims c WHERE c.claimant = i.instance_id)});
check_is($restored, 'true|0',
	'restore: gridha.metrics\' counters are the sums over the restored services (settled totals and services restored together)',
	q{
	SELECT (SELECT sum(committed_total) > 0 FROM gridha.metrics WHERE scope = 'target') || '|' || count(*)}
	  . metrics_off_sql());
my $restored_all = -f "$work/restored.tsv" ? slurp_file("$work/restored.tsv") : '';
ok($restored_all ne '' && $restored_all eq slurp_file("$work/restored-plain.tsv"),
	'restore: the plain-format restore holds the same batches, claims, targets, instances and ids as the custom one'
);

# --- drain: workers serve the restored database against the same ledger -----

# The operator points the 'gated' and 'xheld' targets at the ledger, in the
# restored database (their services drain with the others, with the token
# restored).
is( query($restored, $DB, qq{
	WITH u AS (UPDATE gridha.targets SET submit_url = '$L/batches/{service_id}/{batch_id}',
	                                     status_url = '$L/batch_statuses?id={batch_ids}'
	            WHERE target IN ('gated', 'xheld') RETURNING 1)
	SELECT count(*) FROM u}),
	'2',
	"drain: the 'gated' and 'xheld' targets pointed at the ledger in the restored database");
# X's lease is moved to 30 s from now (however long the restore took), so
# that its idle heads can show they are taken before it runs out, and its
# submitting head is taken when it does.
my $x_lease = query($restored, $DB, q{
	UPDATE gridha.instances SET soft_expiry = now() + interval '30 s',
	                            hard_expiry = now() + interval '30 s'
	 WHERE label = 'x' RETURNING soft_expiry});
my @lines_before = read_lines($ledger->{log});
my $mark_drain = scalar(@lines_before);
run_conf($restored, $workers);
ok( eval { $restored->restart; 1 }
	  && wait_for_workers($restored, $DB, 2, 30),
	'drain: the second cluster restarted with two workers serving the restored database');
my $workers_at = query($restored, 'postgres', 'SELECT now()');

my $n_batches = keys %dump_status;
$start = time();
ok( wait_until(
		90,
		sub {
			query($restored, $DB,
				q{SELECT count(*) FROM gridha.batches WHERE status IN ('committed', 'invalid')})
			  eq $n_batches;
		}),
	"drain: every batch reaches a final status ($n_batches batches, " . (time() - $start) . ' s)');
note(query($restored, $DB, 'SELECT status, count(*) FROM gridha.batches GROUP BY 1 ORDER BY 1'));
check_is($restored, 't', "drain: exactly the '^bad-' batches end invalid, every other committed",
	q{SELECT bool_and((status = 'invalid') = (batch_id ~ '^bad-')) FROM gridha.batches});

# The record and the ledger's log, beside the restored data (a schema of
# the test's own).
my ($scratch_rc) = $restored->psql($DB, qq{
CREATE SCHEMA dump_scratch;
CREATE TABLE dump_scratch.record (kind text, key text, val jsonb);
\\copy dump_scratch.record FROM '$work/record.tsv'
CREATE TABLE dump_scratch.ledger_log (e jsonb);
\\copy dump_scratch.ledger_log FROM '$ledger->{log}' WITH (FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')
CREATE TABLE dump_scratch.ids (phase text, ids int8range);
\\copy dump_scratch.ids (ids) FROM '$work/ids-before.txt'
UPDATE dump_scratch.ids SET phase = 'before';
CREATE VIEW dump_scratch.dump_epoch AS
SELECT key AS service_id, (val->>'epoch')::bigint AS epoch FROM dump_scratch.record WHERE kind = 'claim';
});
is($scratch_rc, 0,
	'the record, the ledger log and the ids reserved before the dump loaded beside the restored data');

append_to_file("$work/expected.tsv", join('', map { "$_\n" } split /\n/, query($restored, $DB, q{
	SELECT (val->>'service_id') || E'\t' || (val->>'batch_id') FROM dump_scratch.record
	 WHERE kind = 'batch' ORDER BY val->>'service_id', (val->>'seq')::bigint})));
my $in_order;
($in_order, $out) = ledger_in_order($ledger, "$work/expected.tsv");
ok($in_order,
	'drain: each service\'s batches arrived at the ledger in enqueue order across the restore, one in flight'
) or diag($out =~ /(^violations.*)/ms ? substr($1, 0, 2000) : substr($out, -2000));

check_is($restored, '0', 'drain: no service\'s epoch is below the dump\'s', q{
	SELECT count(*) FROM dump_scratch.dump_epoch d JOIN gridha.service_claims c USING (service_id)
	 WHERE c.epoch < d.epoch});
check_is($restored, '0', 'drain: the old cluster\'s instances hold no claim; the new workers took over', q{
	SELECT count(*) FROM gridha.service_claims c
	  JOIN dump_scratch.record r ON r.kind = 'instance' AND r.key = c.claimant::text});
check_is($restored, '0|true',
	'drain: every batch handed out after the restore carries an epoch above its service\'s in the dump', q{
	SELECT count(*) FILTER (WHERE b.epoch <= d.epoch) || '|' || (count(*) > 0)::text
	  FROM gridha.batches b
	  JOIN dump_scratch.record r ON r.kind = 'batch' AND r.key = b.service_id || '/' || b.batch_id
	  JOIN dump_scratch.dump_epoch d ON d.service_id = b.service_id
	 WHERE b.attempts > (r.val->>'attempts')::int});
check_is($restored, '0|true',
	'drain: every POST the ledger saw from the new cluster carries an epoch above the dump\'s', qq{
	SELECT count(*) FILTER (WHERE (l.e->>'epoch')::bigint <= d.epoch) || '|' || (count(*) > 0)::text
	  FROM dump_scratch.ledger_log l
	  JOIN dump_scratch.dump_epoch d ON d.service_id = l.e->>'service_id'
	 WHERE l.e->>'event' = 'post' AND l.e->>'result' IN ('accepted', 'duplicate')
	   AND (l.e->>'seq')::bigint > $mark_drain});

# Duplicates (see the header): each with its seq, the seq of the POST the
# ledger accepted first, and the batch's status in the dump.
my $dups_sql = q{
	SELECT l.e->>'batch_id' AS batch_id, (l.e->>'seq')::bigint AS seq,
	       (l.e->>'first_seq')::bigint AS first_seq,
	       r.val->>'status' AS dump_status
	  FROM dump_scratch.ledger_log l
	  LEFT JOIN dump_scratch.record r ON r.kind = 'batch'
	       AND r.key = (l.e->>'service_id') || '/' || (l.e->>'batch_id')
	 WHERE l.e->>'event' = 'post' AND l.e->>'result' = 'duplicate'};
my $n_dups = query($restored, $DB, "SELECT count(*) FROM ($dups_sql) d");
note(query($restored, $DB,
	"SELECT coalesce(dump_status, '(not in the dump)'), count(*) FROM ($dups_sql) d GROUP BY 1"));
check_is($restored, '0|true',
	"drain: every duplicate POST ($n_dups) is of a batch in flight at the dump (handed out, not final), POSTed again by the new cluster after the old one's POST",
	qq{
	SELECT count(*) FILTER (WHERE d.seq <= $mark_drain OR d.first_seq > $mark_drain
	                          OR NOT coalesce(d.dump_status = ANY (ARRAY['submitting', 'pending', 'valid',
	                                                                   'delayed', 'unknown']), false))
	       || '|' || (count(*) > 0)::text
	  FROM ($dups_sql) d});

# X's heads: the one submitting in the dump is handed out again under a
# new epoch once X's lease is past its hard expiry; the idle ones are taken
# at once, X's session being gone (shown unless the workers started only
# after X's lease ran out: a very slow machine).
check_is($restored, 't',
	'drain: X\'s head that was submitting in the dump was handed out again, one attempt and at least one epoch more',
	q{
	SELECT b.attempts = (r.val->>'attempts')::int + 1 AND b.epoch > (r.val->>'epoch')::bigint
	  FROM gridha.batches b JOIN dump_scratch.record r ON r.kind = 'batch' AND r.key = 'x-sub/x-sub-b1'
	 WHERE b.batch_id = 'x-sub-b1'});
SKIP:
{
	skip "drain: X's idle heads were taken before its lease ran out: the workers started after it ran out",
	  1
	  unless query($restored, $DB,
		"SELECT '$workers_at'::timestamptz < '$x_lease'::timestamptz") eq 't';
	check_is($restored, 't',
		'drain: X\'s idle heads (delayed, unknown, valid, pending) were taken before its lease ran out: its session is gone',
		qq{
		SELECT bool_and(b.handed_out_at < '$x_lease'::timestamptz) AND count(*) = 4
		  FROM gridha.batches b
		 WHERE b.batch_id IN ('x-del-b1', 'x-unk-b1', 'x-valid-b1', 'x-pend-b1')});
}

# Ids: reserve_ids and next_id on the restored side, in two sessions, then
# in no way an id reserved before the dump.
foreach my $i (1, 2)
{
	$restored->safe_psql($DB, q{
INSERT INTO dump_scratch.ids (phase, ids)
SELECT 'after', gridha.reserve_ids('orders', n) FROM (VALUES (10), (300), (999), (5)) v (n);
INSERT INTO dump_scratch.ids (phase, ids)
SELECT 'after', int8range(i, i, '[]') FROM (SELECT gridha.next_id('orders') AS i FROM generate_series(1, 150)) x;
});
}
check_is($restored, '18|0|true',
	'ids: no id reserved before the dump is handed out after the restore (reserve_ids and next_id)', q{
	SELECT count(*) FILTER (WHERE phase = 'before') || '|'
	       || (SELECT count(*) FROM dump_scratch.ids b JOIN dump_scratch.ids a
	            ON b.phase = 'before' AND a.phase = 'after' AND a.ids && b.ids) || '|'
	       || (count(*) FILTER (WHERE phase = 'after') = 308)::text
	  FROM dump_scratch.ids});

$restored->stop;
$live->stop;
stop_ledgers();
