# test/t/037_citus_lifecycle.pl: the Citus mode's lifecycle (issue 43;
# docs/citus.md, "Lifecycle"): a database that ran gridha 1.2 on the
# coordinator of a Citus cluster updated to 1.3 and laid out by bucket
# with its rows moved in (gridha.citus_setup(move_rows => true, buckets => 64)); then a
# pg_dump of it from the coordinator restored into a second, fresh Citus
# cluster and laid out again there (gridha.citus_restore()); then that
# cluster upgraded with pg_upgrade, node by node, within PostgreSQL 15.
#
# Citus exists for PostgreSQL 15 only. As test/t/032_citus_mode.pl: the
# PostgreSQL 15 GRIDHA_CITUS_PG_CONFIG names (default: the system's), used
# as it is when the run's programs are that tree's with gridha installed,
# otherwise a copy of it with gridha built from this source tree; without
# Citus there every test is reported skipped, with the reason
# (test/t/lib/GridhaCitus.pm). pg_upgrade runs from PostgreSQL 15 to the
# same 15 (the Citus build exists for one major only): it shows Citus's
# procedure and gridha's state through it, not a change of major.
#
# Steps, in the order they run:
#
#   build     as 031_citus
#   cluster   a coordinator and two workers; gridha dropped and created
#             again at VERSION '1.2'; a login role c37_sub in
#             gridha_submitter
#   1.2       on the coordinator's local tables, through the 1.2 API:
#             services s1..s6, three batches each (enqueue); c37_sub
#             registers instance A and takes three hand-outs (one
#             committed, one accepted: pending, one left submitting); an
#             ID sequence, ids taken from it (next_id, reserve_ids)
#   update    ALTER EXTENSION gridha UPDATE: 1.3 on the coordinator and
#             both workers, the rows unchanged
#   refusals  citus_setup() refused (RG032, its hint naming move_rows),
#             nothing changed
#   move      citus_setup(move_rows => true): every batch, queue and
#             instance in the bucket tables as it was, gridha's local
#             tables of the claim cycle and the shells empty, the running
#             totals of gridha.metrics per target as before the move
#   ids       the ID sequence and its windows left as they were on the
#             coordinator; next_id and reserve_ids there, in the mode, give
#             ids no call reserved before (each in a window at or past its
#             next_id as the move left it)
#   epochs    every bucket free, at an epoch no lower than its services'
#             1.2 epochs
#   calls     A's late 1.2 report refused (RG001); c37_sub drains every
#             batch through next_batch and the reports as A, in order per
#             service, at epochs above the 1.2 ones
#   dump      more batches enqueued, one handed out and left in flight;
#             pg_dump -Fc of the coordinator: the bucket tables' data in
#             it, no shard table
#   cluster   a second coordinator and two workers (r0, r1, r2), c37_sub
#             created there
#   nothing   gridha.citus_restore() there before the restore (RG047)
#   restore   gridha dropped, pg_restore of the dump: gridha 1.3 on every
#             node, the bucket tables plain local tables of the
#             coordinator holding every row, no distributed function
#   layout    a restore made inconsistent (a service's tail below its last
#             batch) refused (RG048), nothing changed; on a worker
#             refused (RG031), with a row in gridha.leases (RG032); then
#             citus_restore(): the layout of the old cluster (tables
#             distributed by bucket, co-located, the reference table on
#             both workers, the same distributed functions), the shells
#             empty; a second call refused (RG034)
#   rows      every batch, queue, instance and bucket (holder, role,
#             epoch, lease), and the ID sequence with its windows, as
#             dumped
#   after     the per-bucket functions, delegated to a worker: A reports
#             its batch in flight at its epoch, releases the bucket, a new
#             instance B takes it (epoch + 1), A's report at the old epoch
#             is refused (RG001); then B drains every batch through the
#             instance calls, in order, and no bucket's epoch is below the
#             dumped one; next_id gives an id the old cluster never
#             reserved (in a window at or past its dumped next_id)
#   upgrade   one more batch in flight; citus_prepare_pg_upgrade() on every
#             node, each node stopped and upgraded by pg_upgrade into a new
#             data directory on the same port (u0, u1, u2),
#             citus_finish_pg_upgrade() on every node: the same layout and
#             distributed functions, every row as before, the shells
#             empty, the ID sequence as before; the batch in flight
#             reported at its epoch through the
#             per-bucket functions on a worker, and next_batch hands out
#             the service's next batch at the same epoch
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster). Run by
# `make test` (test/run.sh, part 037_citus_lifecycle) and by `make
# prove_installcheck`, as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaCitus;
use File::Copy ();
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $NTESTS = 21;
plan tests => $NTESTS;

my ($CFG, $CBIN, $CLIB) = citus_tree();
my $install_path = citus_build($CFG, $CBIN, $CLIB);
my $BIN = defined $install_path ? "$install_path/bin" : undef;
sub prog { my ($p) = @_; return defined $BIN ? "$BIN/$p" : $p; }

my @nodes = citus_cluster($install_path, 'test/t/037_citus_lifecycle.pl', 'c37', q{
DROP EXTENSION gridha;
CREATE EXTENSION gridha VERSION '1.2';
CREATE ROLE c37_sub LOGIN IN ROLE gridha_submitter;
});
my $coord = $nodes[0];

# run(NODE, SQL, [USER]): what psql prints (unaligned, tuples only), its
# errors after it (no stop at an error)
sub run
{
	my ($node, $sql, $user) = @_;
	return citus_psql($node, 'c37', $sql, '-v', 'VERBOSITY=verbose', defined $user ? ('-U', $user) : ());
}

# one(NODE, SQL, [USER]): the one answer, dying on an error
sub one
{
	my ($node, $sql, $user) = @_;
	return $node->safe_psql('c37', $sql, defined $user ? (extra_params => [ '-U', $user ]) : ());
}

sub sqlstate_of
{
	my ($out) = @_;
	return $out =~ /ERROR:  ([0-9A-Z]{5}):/ ? $1 : 'no error';
}

# ---------------------------------------------------------------------------
# 1.2 on the coordinator's local tables

my @services = map { "s$_" } 1 .. 6;
# s6 on a target of its own (the others on default)
one($coord, q{INSERT INTO gridha.targets (target, submit_url) VALUES ('c37t', 'http://127.0.0.1:9/submit')});
one($coord, join('', map {
			my $s = $_;
			my $t = $s eq 's6' ? ", 'c37t'" : '';
			map { "SELECT gridha.enqueue('$s', 'b$_', '\\x0$_'$t);\n" } 1 .. 3
		} @services));
my $A = one($coord, q{SELECT gridha.register_instance('c37 old')}, 'c37_sub');
my @h12;
foreach my $k (1 .. 3)
{
	my ($s, $b, $e) = split /\|/, one($coord, "SELECT service_id, batch_id, epoch FROM gridha.next_batch('$A')", 'c37_sub');
	push @h12, [ $s, $b, $e ];
	one($coord, "SELECT gridha.report_submission('$A', '$s', '$b', $e, 'accepted')", 'c37_sub') if $k <= 2;
	one($coord, "SELECT gridha.report_status('$A', '$s', '$b', $e, 'committed')", 'c37_sub') if $k == 1;
}
one($coord, q{SELECT gridha.create_id_sequence('c37ids', window_size => 1000, min_open_windows => 2)});
# ids of 1.2: a block of next_id, five of reserve_ids; the highest given
my @ids12 = split /\n/, one($coord, q{SELECT gridha.next_id('c37ids'); SELECT gridha.next_id('c37ids');
SELECT upper(gridha.reserve_ids('c37ids', 5)) - 1});
my $IDS = q{SELECT (SELECT string_agg(concat_ws('/', name, serial, window_size, min_open_windows, high_water, dropped), ',' ORDER BY name)
	FROM gridha.id_sequences) || ';' || coalesce((SELECT string_agg(concat_ws('/', name, window_start, window_end, next_id), ','
	ORDER BY name, window_start) FROM gridha.id_windows), '-')};
my $ids_before = one($coord, $IDS);

# fresh(STATE, IDS): every id lies in a window of STATE (what $IDS
# answered) at or past its next_id: no call reserved it before (ids below
# a window's next_id, and every id of a retired window, were reserved)
sub fresh
{
	my ($state, @ids) = @_;
	my @windows = map { [ (split m{/})[ 1 .. 3 ] ] } split /,/, (split /;/, $state)[1];
	foreach my $id (@ids)
	{
		return 0 unless grep { $id >= $_->[2] && $id < $_->[1] } @windows;
	}
	return scalar(@ids) > 0;
}
my %old_epoch = map { split /\|/ } split /\n/, one($coord, q{SELECT service_id, epoch FROM gridha.service_claims});
note('1.2 hand-outs: ' . join(', ', map { join('/', @$_) } @h12));

# the rows of the local tables and of the bucket tables, in one form
my $BATCHES_LOCAL = q{SELECT string_agg(concat_ws('/', service_id, batch_id, seq, status, coalesce(epoch::text, '-'),
	attempts, coalesce(instance_id::text, '-'), encode(payload, 'hex')), ',' ORDER BY service_id, seq) FROM gridha.batches};
(my $BATCHES_BUCKET = $BATCHES_LOCAL) =~ s/gridha\.batches/gridha.bucket_batches/;
my $QUEUES_LOCAL = q{SELECT string_agg(concat_ws('/', service_id, coalesce(head_seq, tail_seq + 1), tail_seq,
	head_seq IS NOT NULL AND in_flight), ',' ORDER BY service_id) FROM gridha.service_claims};
my $QUEUES_BUCKET = q{SELECT string_agg(concat_ws('/', service_id, head_seq, tail_seq, in_flight), ',' ORDER BY service_id)
	FROM gridha.bucket_services};
my $INSTANCES_LOCAL = q{SELECT string_agg(concat_ws('/', instance_id, owner, label, registered_at), ',' ORDER BY instance_id)
	FROM gridha.instances};
(my $INSTANCES_BUCKET = $INSTANCES_LOCAL) =~ s/gridha\.instances/gridha.bucket_instances/;

my $b12 = one($coord, $BATCHES_LOCAL);
my $q12 = one($coord, $QUEUES_LOCAL);
my $i12 = one($coord, $INSTANCES_LOCAL);

# ---------------------------------------------------------------------------
# update

one($coord, 'ALTER EXTENSION gridha UPDATE');
my @versions = map { $_->safe_psql('c37', q{SELECT extversion FROM pg_extension WHERE extname = 'gridha'}) } @nodes;
diag("versions after the update: @versions");
ok("@versions" eq '1.3 1.3 1.3'
	  && one($coord, $BATCHES_LOCAL) eq $b12 && one($coord, $QUEUES_LOCAL) eq $q12 && one($coord, $INSTANCES_LOCAL) eq $i12,
	'update: ALTER EXTENSION gridha UPDATE on the coordinator leaves 1.3 on it and on both workers; the batches, queues and instances unchanged');

# ---------------------------------------------------------------------------
# refusals

my $plain = run($coord, 'SELECT gridha.citus_setup()');
my $after_plain = one($coord, q{SELECT (to_regclass('gridha.bucket_claims') IS NULL)::text})
  . '/' . (one($coord, $BATCHES_LOCAL) eq $b12 ? 'same' : 'changed') . '/' . (one($coord, $IDS) eq $ids_before ? 'same' : 'changed');
diag("citus_setup(): $plain\nafter: $after_plain");
ok( sqlstate_of($plain) eq 'RG032'
	  && $plain =~ /HINT:  Move them into the buckets in the same step: SELECT gridha\.citus_setup\(move_rows => true/
	  && $after_plain eq 'true/same/same',
	'refusals: citus_setup() refused (RG032) with a hint naming move_rows; nothing changed');

# ---------------------------------------------------------------------------
# move

# gridha.metrics' running totals per target, on one server before the move
my $TOTALS = q{SELECT string_agg(concat_ws('/', target, enqueued_total, committed_total, invalid_total, resubmitted_total), ','
	ORDER BY target) FROM gridha.metrics WHERE scope = 'target'};
my $totals12 = one($coord, $TOTALS);
my $moved = run($coord, q{SET client_min_messages = notice; SELECT gridha.citus_setup(move_rows => true, buckets => 64)});
my $totals_moved = one($coord, $TOTALS);
my $own = one($coord, q{SELECT (SELECT count(*) FROM gridha.batches) + (SELECT count(*) FROM gridha.service_claims)
	+ (SELECT count(*) FROM gridha.instances) + (SELECT count(*) FROM gridha.leases)});
my $SHELLS = q{SELECT string_agg(c || ':' || (pg_stat_file(pg_relation_filepath(c))).size, ',' ORDER BY c)
  FROM unnest(ARRAY['gridha.bucket_batches', 'gridha.bucket_claims', 'gridha.bucket_services']) AS c};
my $shells = one($coord, $SHELLS);
my $bm = one($coord, $BATCHES_BUCKET);
my $qm = one($coord, $QUEUES_BUCKET);
my $im = one($coord, $INSTANCES_BUCKET);
my $misplaced = one($coord, q{SELECT count(*) FROM gridha.bucket_batches WHERE bucket <> gridha.bucket_of(service_id, 64)});
my $targets_moved = one($coord, q{SELECT string_agg(service_id || '=' || target, ',' ORDER BY service_id) FROM gridha.bucket_services})
  . ';' . one($coord, q{SELECT string_agg(target, ',' ORDER BY target) FROM gridha.bucket_targets});
diag("move: $moved\nown rows left: $own; shells: $shells\nbatches: $bm\nqueues: $qm\ninstances: $im\ntargets: $targets_moved\n"
	  . "metrics' totals before: $totals12\nafter: $totals_moved");
ok( $moved =~ /^64$/m
	  && $moved =~ /NOTICE:  00000: gridha moved 18 batch\(es\) of 6 service\(s\) and 1 instance\(s\) into 64 buckets/
	  && $bm eq $b12 && $qm eq $q12 && $im eq $i12 && $misplaced eq '0'
	  && $targets_moved eq 's1=default,s2=default,s3=default,s4=default,s5=default,s6=c37t;c37t,default'
	  && $own eq '0'
	  && $shells eq 'gridha.bucket_batches:0,gridha.bucket_claims:0,gridha.bucket_services:0'
	  && $totals_moved eq $totals12 && $totals12 eq 'c37t/3/0/0/0,default/15/1/0/0',
	'move: citus_setup(move_rows => true, buckets => 64) moves every batch (status, seq, epoch, attempts, instance, payload), every queue with its target and the instance with its owner into the buckets; gridha\'s local tables and the shells are empty; gridha.metrics\' running totals per target are those of one server before the move');

my %bucket_state = map { my ($s, $e, $h) = split /:/; ($s => [ $e, $h ]) } split /,/, one($coord, q{
SELECT string_agg(s.service_id || ':' || c.epoch || ':' || coalesce(c.holder::text, '-'), ',')
  FROM gridha.bucket_services s JOIN gridha.bucket_claims c ON c.bucket = s.bucket});
my @low = grep { !defined $bucket_state{$_} || $bucket_state{$_}[0] < $old_epoch{$_} || $bucket_state{$_}[1] ne '-' } @services;
my $holders = one($coord, q{SELECT count(*) FROM gridha.bucket_claims WHERE holder IS NOT NULL});
diag('1.2 epochs: ' . join(' ', map { "$_:$old_epoch{$_}" } @services) . "\nbucket epochs: "
	  . join(' ', map { "$_:" . ($bucket_state{$_} ? $bucket_state{$_}[0] : '?') } @services));
ok(!@low && $holders eq '0' && (grep { $old_epoch{$_} > 0 } @services) >= 1,
	'epochs: every bucket free after the move, each service\'s bucket at an epoch no lower than the service\'s 1.2 epoch');

# the ID sequence stays on the coordinator, served there in the mode
my $ids_moved = one($coord, $IDS);
my @ids13 = split /\n/, one($coord, q{SELECT gridha.next_id('c37ids'); SELECT gridha.next_id('c37ids');
SELECT lower(gridha.reserve_ids('c37ids', 5)); SELECT upper(gridha.reserve_ids('c37ids', 1000)) - 1});
diag("ID sequence before the move: $ids_before\nafter: $ids_moved\n1.2 ids: @ids12; in the mode: @ids13");
ok( $ids_moved eq $ids_before && @ids12 == 3 && @ids13 == 4 && fresh($ids_before, @ids13)
	  && $ids13[1] == $ids13[0] + 1 && !(grep { my $x = $_; grep { $_ == $x } @ids12 } @ids13),
	'ids: the move leaves the ID sequence and its windows as they were; in the mode next_id and reserve_ids on the coordinator (a window\'s worth too) give ids no call reserved before, none of 1.2\'s');

# ---------------------------------------------------------------------------
# calls: A's late 1.2 report, then A drains everything through the mode

my ($ps, $pb, $pe) = @{ $h12[1] };    # accepted (pending) under 1.2
my $late = run($coord, "SELECT gridha.report_status('$A', '$ps', '$pb', $pe, 'committed')", 'c37_sub');
my (@got, @errs, %max_e);
foreach my $i (1 .. 40)
{
	my $r = run($coord, "SELECT service_id || '|' || batch_id || '|' || epoch FROM gridha.next_batch('$A')", 'c37_sub');
	chomp $r;
	last if $r eq '';
	if ($r =~ /ERROR/) { push @errs, $r; last; }
	my ($s, $b, $e) = split /\|/, $r;
	push @got, "$s/$b";
	$max_e{$s} = $e if !defined $max_e{$s} || $e > $max_e{$s};
	my $rep = run($coord, "SELECT gridha.report_submission('$A', '$s', '$b', $e, 'accepted');"
		  . "SELECT gridha.report_status('$A', '$s', '$b', $e, 'committed')", 'c37_sub');
	push @errs, $rep if $rep =~ /ERROR/;
}
my %per;
push @{ $per{ (split m{/}, $_)[0] } }, (split m{/}, $_)[1] foreach @got;
# what each service had left after 1.2: from its first batch not committed
my %left = map { $_ => [ 'b1', 'b2', 'b3' ] } @services;
shift @{ $left{ $h12[0][0] } };
my $order_ok = 1;
foreach my $s (@services)
{
	$order_ok = 0 unless join(',', @{ $per{$s} // [] }) eq join(',', @{ $left{$s} });
	$order_ok = 0 unless !defined $max_e{$s} || $max_e{$s} > $old_epoch{$s};
}
my $all = one($coord, q{SELECT count(*) FILTER (WHERE status = 'committed') || '/' || count(*) FROM gridha.bucket_batches});
diag("late 1.2 report: $late\nhand-outs: @got\nerrors: @errs\nstatuses: $all");
ok( sqlstate_of($late) eq 'RG001'
	  && !@errs && $order_ok && $all eq '18/18',
	'calls: A\'s report at its 1.2 epoch refused (RG001); A then drains every batch through next_batch and the reports, in seq order per service (the 1.2 batches in flight again first), each service at an epoch above its 1.2 epoch');

# ---------------------------------------------------------------------------
# dump

one($coord, join('', map { "SELECT gridha.enqueue('$_', 'b4', '\\x04'); SELECT gridha.enqueue('$_', 'b5', '\\x05');\n" } @services[0..2]));
my ($fs, $fb, $fe) = split /\|/, one($coord, "SELECT service_id, batch_id, epoch FROM gridha.next_batch('$A')", 'c37_sub');
my $fk = one($coord, "SELECT gridha.bucket_of('$fs', 64)");
note("in flight at the dump: $fs/$fb at epoch $fe, bucket $fk");
my $CLAIMS = q{SELECT string_agg(concat_ws('/', bucket, buckets, coalesce(holder::text, '-'), coalesce(holder_role, '-'), epoch,
	coalesce(soft_expiry::text, '-'), coalesce(hard_expiry::text, '-'), coalesce(taken_at::text, '-')), ',' ORDER BY bucket)
	FROM gridha.bucket_claims};
my $QUEUES_FULL = q{SELECT string_agg(concat_ws('/', bucket, service_id, head_seq, tail_seq, coalesce(ready_at::text, '-'),
	in_flight), ',' ORDER BY service_id) FROM gridha.bucket_services};
my $BATCHES_FULL = q{SELECT string_agg(concat_ws('/', bucket, service_id, batch_id, seq, status, created_at, coalesce(epoch::text, '-'),
	attempts, coalesce(instance_id::text, '-'), coalesce(handed_out_at::text, '-'), coalesce(submitted_at::text, '-'),
	coalesce(finished_at::text, '-'), encode(payload, 'hex')), ',' ORDER BY service_id, seq) FROM gridha.bucket_batches};
my $FUNCTIONS = q{SELECT string_agg(o.objid::regprocedure::text || '/' || o.distribution_argument_index || '/'
	|| (o.colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'gridha.bucket_claims'::regclass)),
	',' ORDER BY o.objid::regprocedure::text)
	FROM pg_dist_object o WHERE o.classid = 'pg_proc'::regclass AND o.objid::regproc::text LIKE 'gridha.%'};
my $LAYOUT = q{
SELECT string_agg(logicalrelid::text || '/' || partmethod::text || '/'
                  || CASE WHEN partmethod = 'n' THEN '-' ELSE column_to_column_name(logicalrelid, partkey) END,
                  ',' ORDER BY logicalrelid::text)
       || ' ' || count(DISTINCT colocationid) FILTER (WHERE partmethod = 'h')
       || ' ' || (SELECT count(DISTINCT n.nodeport) FROM pg_dist_shard s JOIN pg_dist_placement pl USING (shardid)
                    JOIN pg_dist_node n ON n.groupid = pl.groupid
                   WHERE s.logicalrelid = 'gridha.bucket_instances'::regclass AND n.groupid <> 0)
  FROM pg_dist_partition WHERE logicalrelid::text LIKE 'gridha.bucket\_%'};
my %dumped = (
	claims => one($coord, $CLAIMS),
	queues => one($coord, $QUEUES_FULL),
	batches => one($coord, $BATCHES_FULL),
	instances => one($coord, $INSTANCES_BUCKET),
	functions => one($coord, $FUNCTIONS),
	layout => one($coord, $LAYOUT),
	ids => one($coord, $IDS));
my %dumped_epoch = map { split /\// } split /,/, one($coord, q{SELECT string_agg(bucket || '/' || epoch, ',') FROM gridha.bucket_claims});

my $tmp = PostgreSQL::Test::Utils::tempdir('c37');
my ($dout, $derr) = ('', '');
IPC::Run::run([ prog('pg_dump'), '-Fc', '-f', "$tmp/c37.dump", '-d', $coord->connstr('c37') ],
	'<', \undef, '>', \$dout, '2>', \$derr);
my $dump_rc = $?;
my ($toc, $terr) = ('', '');
IPC::Run::run([ prog('pg_restore'), '-l', "$tmp/c37.dump" ], '<', \undef, '>', \$toc, '2>', \$terr);
my @data = sort map { /TABLE DATA gridha (bucket_\w+)/ ? $1 : () } split /\n/, $toc;
my @shards = grep { /bucket_\w+_\d{6,}/ } split /\n/, $toc;
diag("pg_dump: rc $dump_rc $derr\ndata in the dump: @data\nshard entries: " . scalar(@shards) . "\n" . join("\n", @shards[0 .. ($#shards < 4 ? $#shards : 4)]));
ok( $dump_rc == 0
	  && "@data" eq 'bucket_batches bucket_claims bucket_instances bucket_rates bucket_services bucket_targets'
	  && !@shards,
	'dump: pg_dump -Fc of the coordinator holds the data of the five bucket tables (Citus answers the COPY from every shard) and no shard table');

# ---------------------------------------------------------------------------
# a second, fresh cluster; the restore

my @rnodes = citus_cluster($install_path, 'test/t/037_citus_lifecycle.pl', 'c37', q{
CREATE ROLE c37_sub LOGIN IN ROLE gridha_submitter;
}, 'r');
my $rc = $rnodes[0];
my $nothing = run($rc, 'SELECT gridha.citus_restore()');
diag("citus_restore before the restore: $nothing");
ok(sqlstate_of($nothing) eq 'RG047' && $nothing =~ /nothing to restore: gridha\.bucket_claims does not exist/,
	'nothing: citus_restore() in a database without restored bucket tables is refused (RG047)');

# a fresh database, as the dump expects it: no gridha, no schema gridha
one($rc, 'DROP EXTENSION gridha; DROP SCHEMA IF EXISTS gridha CASCADE; DROP SCHEMA IF EXISTS gridha_internal CASCADE');
my ($rout, $rerr) = ('', '');
IPC::Run::run([ prog('pg_restore'), '-d', $rc->connstr('c37'), "$tmp/c37.dump" ], '<', \undef, '>', \$rout, '2>', \$rerr);
my $restore_rc = $?;
my @rversions = map { $_->safe_psql('c37', q{SELECT extversion FROM pg_extension WHERE extname = 'gridha'}) } @rnodes;
my $local = one($rc, q{SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::text LIKE 'gridha.bucket\_%'})
  . '/' . one($rc, q{SELECT count(*) FROM pg_dist_object WHERE classid = 'pg_proc'::regclass AND objid::regproc::text LIKE 'gridha.%'});
my $restored_rows = one($rc, $CLAIMS) eq $dumped{claims} && one($rc, $QUEUES_FULL) eq $dumped{queues}
  && one($rc, $BATCHES_FULL) eq $dumped{batches} && one($rc, $INSTANCES_BUCKET) eq $dumped{instances};
diag("pg_restore: rc $restore_rc\n$rerr\nversions: @rversions; Citus tables / distributed functions: $local; rows as dumped: "
	  . ($restored_rows ? 'yes' : 'no'));
ok( $restore_rc == 0 && "@rversions" eq '1.3 1.3 1.3' && $local eq '0/0' && $restored_rows,
	'restore: pg_restore into the new coordinator succeeds; gridha 1.3 on it and both workers; the bucket tables come back as plain local tables with every row, and no function is distributed');

# a restore made inconsistent: refused, nothing changed
my $bad = run($rc, qq{BEGIN;
UPDATE gridha.bucket_services SET tail_seq = tail_seq - 1 WHERE service_id = '$fs';
SELECT gridha.citus_restore();
ROLLBACK;});
my $still = one($rc, q{SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::text LIKE 'gridha.bucket\_%'});
diag("inconsistent: $bad\nCitus tables after: $still");
ok( sqlstate_of($bad) eq 'RG048'
	  && $bad =~ /the restored bucket tables are not one layout: batch "b5" of service "$fs" \(seq 5\) is past its service's tail \(4\)/
	  && $still eq '0',
	'layout: citus_restore() of bucket tables that are not one layout (a service\'s tail below its last batch) is refused (RG048), nothing distributed');

# the restore's other refusals: on a worker (RG031); with a row in one of
# gridha's own tables, which stay empty in the mode (RG032); nothing
# distributed by either
my $onworker = run($rnodes[1], 'SELECT gridha.citus_restore()');
my $withrows = run($rc, q{BEGIN;
INSERT INTO gridha.leases (duty) VALUES ('c37.early');
SELECT gridha.citus_restore();
ROLLBACK;});
my $still2 = one($rc, q{SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::text LIKE 'gridha.bucket\_%'});
diag("on a worker: $onworker\nwith a row in gridha.leases: $withrows\nCitus tables after: $still2");
ok( sqlstate_of($onworker) eq 'RG031'
	  && $onworker =~ /gridha\.citus_restore runs on the coordinator of a Citus cluster, and this node is not one/
	  && sqlstate_of($withrows) eq 'RG032'
	  && $withrows =~ /gridha\.leases holds rows; gridha\.citus_restore needs them empty/
	  && $still2 eq '0',
	'refusals: citus_restore() on a worker is refused (RG031), and on the coordinator while one of gridha\'s own tables holds a row (RG032); nothing distributed');

my $laid = run($rc, q{SET client_min_messages = notice; SELECT gridha.citus_restore()});
my $again = run($rc, 'SELECT gridha.citus_restore()');
my $rshells = one($rc, $SHELLS) . ',' . one($rc, q{SELECT (pg_stat_file(pg_relation_filepath('gridha.bucket_instances'))).size})
  . ',' . one($rc, q{SELECT (pg_stat_file(pg_relation_filepath('gridha.bucket_targets'))).size});
my $rlayout = one($rc, $LAYOUT);
my $rfunctions = one($rc, $FUNCTIONS);
diag("citus_restore: $laid\nagain: $again\nlayout: $rlayout (old: $dumped{layout})\nfunctions: $rfunctions\nshells: $rshells");
ok( $laid =~ /^64$/m
	  && $laid =~ /NOTICE:  00000: gridha laid out 24 restored batch\(es\) in 64 buckets again/
	  && $rlayout eq $dumped{layout}
	  && $rlayout eq 'gridha.bucket_batches/h/bucket,gridha.bucket_claims/h/bucket,gridha.bucket_instances/n/-,gridha.bucket_rates/h/bucket,gridha.bucket_services/h/bucket,gridha.bucket_targets/n/- 1 2'
	  && $rfunctions eq $dumped{functions}
	  && ($rfunctions =~ tr/,//) >= 10
	  && $rshells eq 'gridha.bucket_batches:0,gridha.bucket_claims:0,gridha.bucket_services:0,0,0'
	  && sqlstate_of($again) eq 'RG034',
	'layout: citus_restore() lays the restored tables out as the old cluster had them (distributed by bucket, co-located, the instances\' and targets\' reference tables on both workers, the same distributed functions), the shells empty; a second call is refused (RG034)');

my %now = (
	claims => one($rc, $CLAIMS),
	queues => one($rc, $QUEUES_FULL),
	batches => one($rc, $BATCHES_FULL),
	instances => one($rc, $INSTANCES_BUCKET),
	ids => one($rc, $IDS));
my @differ = grep { $now{$_} ne $dumped{$_} } sort keys %now;
diag('differ from the dump: ' . (@differ ? "@differ" : 'nothing'));
ok(!@differ && $dumped{batches} =~ m{/$fs/$fb/\d+/submitting/},
	'rows: after citus_restore every batch (status, epoch, attempts, instance, timestamps, payload), queue, instance and bucket (holder, role, epoch, lease), and the ID sequence with its windows, is as dumped, the batch in flight included');

# ---------------------------------------------------------------------------
# after: the per-bucket functions and the instance calls on the new cluster

my $B = one($rc, q{SELECT gridha.register_instance('c37 new')}, 'c37_sub');
my $cyc = run($rc, qq{
SET citus.log_remote_commands = on;
SET client_min_messages = notice;
SELECT gridha.bucket_report_submission($fk, '$A', '$fs', '$fb', $fe, 'accepted');
SELECT gridha.bucket_release($fk, '$A', $fe);
SELECT gridha.bucket_acquire($fk, '$B', '5 min');
SELECT gridha.bucket_report_status($fk, '$A', '$fs', '$fb', $fe, 'committed');
}, 'c37_sub');
my $ports = join('|', map { $_->port } @rnodes[1, 2]);
my $ne = $fe + 1;
diag("after the restore, bucket $fk: $cyc");
ok( $cyc =~ /\Apending\nt\n$ne\n/
	  && $cyc =~ /issuing SELECT gridha\.bucket_report_submission\($fk,.{0,400}?on server \w+\@localhost:($ports)\b/s
	  && sqlstate_of($cyc) eq 'RG001',
	'after: on the new cluster the per-bucket functions run on a worker: A\'s report of its batch in flight at its dumped epoch is accepted, A releases the bucket, B takes it at epoch + 1, A\'s report at the old epoch is refused (RG001)');

one($rc, "SELECT gridha.release_claims('$A')", 'c37_sub');
my (@got2, @errs2);
foreach my $i (1 .. 30)
{
	my $r = run($rc, "SELECT service_id || '|' || batch_id || '|' || epoch FROM gridha.next_batch('$B')", 'c37_sub');
	chomp $r;
	last if $r eq '';
	if ($r =~ /ERROR/) { push @errs2, $r; last; }
	my ($s, $b, $e) = split /\|/, $r;
	push @got2, "$s/$b";
	my $rep = run($rc, "SELECT gridha.report_submission('$B', '$s', '$b', $e, 'accepted');"
		  . "SELECT gridha.report_status('$B', '$s', '$b', $e, 'committed')", 'c37_sub');
	push @errs2, $rep if $rep =~ /ERROR/;
}
my $rid = one($rc, q{SELECT gridha.next_id('c37ids')});
my %per2;
push @{ $per2{ (split m{/}, $_)[0] } }, (split m{/}, $_)[1] foreach @got2;
my $order2 = join(' ', map { "$_:" . join(',', @{ $per2{$_} // [] }) } sort keys %per2);
my $want2 = join(' ', map { "$_:b4,b5" } sort @services[0 .. 2]);
# the batch in flight at the dump (b4 of $fs) went out again first, then b5
my $all2 = one($rc, q{SELECT count(*) FILTER (WHERE status = 'committed') || '/' || count(*) FROM gridha.bucket_batches});
my @down = grep { my ($k, $e) = split m{/}; $e < $dumped_epoch{$k} }
  split /,/, one($rc, q{SELECT string_agg(bucket || '/' || epoch, ',') FROM gridha.bucket_claims});
diag("B's hand-outs: @got2\nerrors: @errs2\nper service: $order2\nstatuses: $all2\nbuckets below their dumped epoch: @down\nnext_id: $rid (dumped: $dumped{ids}; the old cluster's ids in the mode: @ids13)");
ok(!@errs2 && $order2 eq $want2 && $fb eq 'b4' && $all2 eq '24/24' && !@down
	  && fresh($dumped{ids}, $rid) && !(grep { $_ == $rid } @ids12, @ids13),
	'after: B drains every batch left through next_batch and the reports, in seq order per service (the batch in flight at the dump again first), and no bucket\'s epoch is below its dumped one; next_id gives an id the old cluster never reserved');


# ---------------------------------------------------------------------------
# pg_upgrade of the restored cluster, within one major (Citus exists here
# for PostgreSQL 15 only: no newer major to upgrade to), node by node, with
# Citus's citus_prepare_pg_upgrade() and citus_finish_pg_upgrade() around
# it; each new node on its old node's port (the workers are known by port)

one($rc, q{SELECT gridha.enqueue('s4', 'b4', '\x04'); SELECT gridha.enqueue('s4', 'b5', '\x05')});
my ($us, $ub, $ue) = split /\|/, one($rc, "SELECT service_id, batch_id, epoch FROM gridha.next_batch('$B')", 'c37_sub');
my $uk = one($rc, "SELECT gridha.bucket_of('$us', 64)");
my %pre = (
	claims => one($rc, $CLAIMS),
	queues => one($rc, $QUEUES_FULL),
	batches => one($rc, $BATCHES_FULL),
	instances => one($rc, $INSTANCES_BUCKET),
	functions => one($rc, $FUNCTIONS),
	layout => one($rc, $LAYOUT),
	ids => one($rc, $IDS));
my $bindir = $BIN // $CBIN;
my $upg_ok = 1;
my $upg_out = '';
$upg_out .= $_->safe_psql('c37', 'SELECT citus_prepare_pg_upgrade()') . "\n" foreach @rnodes;
$_->stop('fast') foreach @rnodes;
my @unodes;
foreach my $i (0 .. 2)
{
	my $old = $rnodes[$i];
	my $new = PostgreSQL::Test::Cluster->new("u$i", port => $old->port,
		defined $install_path ? (install_path => $install_path) : ());
	$new->init(extra => [ '--encoding=UTF8', '--locale=C.UTF-8' ]);
	$new->append_conf('postgresql.conf', q{
listen_addresses = 'localhost'
shared_preload_libraries = 'citus,gridha'
max_prepared_transactions = 20
max_worker_processes = 32
synchronous_commit = off
full_page_writes = off
});
	my $wd = "$tmp/upgrade$i";
	mkdir $wd;
	my ($o, $e) = ('', '');
	IPC::Run::run([ prog('pg_upgrade'), '-b', $bindir, '-B', $bindir, '-d', $old->data_dir, '-D', $new->data_dir,
			'-p', $old->port, '-P', $new->port, '-s', $new->host ],
		'<', \undef, '>', \$o, '2>', \$e, init => sub { chdir $wd or die });
	my $ok = $? == 0;
	# what pg_upgrade does not carry: CREATE EXTENSION citus turned SSL on
	# (ALTER SYSTEM, a self-signed certificate in the data directory), and
	# Citus's connections between nodes require it
	foreach my $f (qw(postgresql.auto.conf server.crt server.key))
	{
		$ok &&= File::Copy::copy($old->data_dir . "/$f", $new->data_dir . "/$f");
	}
	chmod 0600, $new->data_dir . '/server.key';
	$upg_ok &&= $ok;
	$upg_out .= "node $i: pg_upgrade " . ($ok ? 'done' : "failed:\n$o\n$e") . "\n";
	unless ($ok)
	{
		$upg_out .= slurp($_) foreach glob("$wd/*.log $new->{_basedir}/pgdata/pg_upgrade_output.d/*/log/*.log");
	}
	push @unodes, $new;
}
if ($upg_ok)
{
	$_->start foreach @unodes;
	$upg_out .= $_->safe_psql('c37', 'SELECT citus_finish_pg_upgrade()') . "\n" foreach @unodes;
}
my $uc = $unodes[0];
my %post = $upg_ok ? (
	claims => one($uc, $CLAIMS),
	queues => one($uc, $QUEUES_FULL),
	batches => one($uc, $BATCHES_FULL),
	instances => one($uc, $INSTANCES_BUCKET),
	functions => one($uc, $FUNCTIONS),
	layout => one($uc, $LAYOUT),
	ids => one($uc, $IDS)) : ();
my @udiffer = grep { ($post{$_} // '') ne $pre{$_} } sort keys %pre;
my $ushells = $upg_ok ? one($uc, $SHELLS) : '';
diag("pg_upgrade: $upg_out\ndiffer after it: " . (@udiffer ? "@udiffer" : 'nothing') . "\nshells: $ushells");
ok($upg_ok && !@udiffer && $ushells eq 'gridha.bucket_batches:0,gridha.bucket_claims:0,gridha.bucket_services:0'
	  && $pre{batches} =~ m{/$us/$ub/\d+/submitting/},
	'pg_upgrade: citus_prepare_pg_upgrade() on every node, pg_upgrade of each node (within PostgreSQL 15), citus_finish_pg_upgrade(): the same layout and distributed functions, every batch, queue, instance and bucket (holder, role, epoch, lease) and the ID sequence as before, the shells empty');

my $ucyc = $upg_ok ? run($uc, qq{
SET citus.log_remote_commands = on;
SET client_min_messages = notice;
SELECT gridha.bucket_report_submission($uk, '$B', '$us', '$ub', $ue, 'accepted');
SELECT gridha.bucket_report_status($uk, '$B', '$us', '$ub', $ue, 'committed');
}, 'c37_sub') : '';
my $unext = $upg_ok ? run($uc, "SELECT service_id || '/' || batch_id || '/' || epoch FROM gridha.next_batch('$B')", 'c37_sub') : '';
my $uports = join('|', map { $_->port } @unodes[1, 2]);
diag("after pg_upgrade: $ucyc\nnext: $unext");
ok( $ucyc =~ /\Apending\ncommitted\n/
	  && $ucyc =~ /issuing SELECT gridha\.bucket_report_submission\($uk,.{0,400}?on server \w+\@localhost:($uports)\b/s
	  && $unext =~ /^$us\/b5\/$ue$/m,
	'pg_upgrade: afterwards the per-bucket functions run on a worker (B\'s batch in flight reported at its epoch, committed) and next_batch hands out the service\'s next batch at the same epoch');

my $logs = join('', map { slurp($_->logfile) } @nodes, @rnodes, @unodes);
my @crash = grep { /server process .* was terminated|PANIC/ } split /\n/, $logs;
ok(!@crash, 'no node of either cluster crashed and no PANIC in the logs');
diag(join("\n", @crash)) if @crash;
