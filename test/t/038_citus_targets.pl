# test/t/038_citus_targets.pl: targets in the Citus mode (issue 43;
# docs/citus.md, "Built: targets"): the mode's reference table of targets
# (gridha.bucket_targets) written from gridha.targets on the coordinator,
# gridha.enqueue with a target, register_instance and acquire_claims with
# serves, and the hand-outs (next_batches, bucket_next_batch) giving an
# instance only batches of targets it serves, with the batch's target.
#
# Citus exists for PostgreSQL 15 only. As test/t/035_citus_loop.pl: the
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
#   setup     a target 'pre' written to gridha.targets before the setup;
#             gridha.citus_setup(64): gridha.bucket_targets a reference
#             table holding 'default' and 'pre' on the coordinator and on
#             both workers
#   setup40   in a second database, a target with a rate limit set before
#             citus_setup is laid out with it on every node
#   admin     INSERT INTO gridha.targets on the coordinator (a URL target,
#             one with a status URL, a function target) reaches
#             gridha.bucket_targets on every node; refused with the single
#             server's SQLSTATEs and writing nothing: a malformed URL and
#             two submit sources (RG007), an empty name and a negative rate
#             interval (23514), a name that exists (23505); an UPDATE reaches
#             every node; a rename carries its services along; the DELETE
#             of a target a service is on is refused (23503), of an unused
#             one removes it everywhere; a member of gridha_admin (no
#             superuser) writes targets too, a role outside it is refused
#             (42501)
#   enqueue   gridha.enqueue with a target: a new service on it, one
#             without on 'default'; a later batch naming the service's
#             target accepted; another target refused (RG013), an unknown
#             one (RG006), nothing written; gridha.bucket_enqueue with a
#             target (delegated to the bucket's worker) the same
#   serves    register_instance with serves, kept in gridha.bucket_instances
#             on every node; an unknown kind or a NULL in serves refused
#             (22023), nothing registered
#   handout   instances U (submit_url), S (submit_url, status_url), F
#             (submit_function) and A (serves nothing declared), one after
#             the other, each calling next_batches and reporting every
#             batch committed until nothing is handed out (bounded): each
#             got every batch of the targets it serves that the earlier
#             ones left, and nothing else; each service's batches in seq
#             order; bucket_next_batch carries the batch's target and hands
#             an instance nothing of a target it does not serve;
#             acquire_claims with serves declares anew
#   rate      in the second database: 'slow' at 200 ms, burst 2, three
#             instances handing out at once (next_batches) give out its
#             batches within the bound, not all, every batch of default
#             out, the slots on every node equal to the hand-outs, shown by
#             gridha.target_rates; bucket_next_batch sent to a worker takes
#             the one slot (60 s, burst 1) and then hands out nothing;
#             rate_burst 0 pauses it; a new interval scales what is owed
#   end       gridha's own tables and the bucket tables' shells hold no
#             row; no node crashed
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster). Run by
# `make test` (test/run.sh, part 038_citus_targets) and by `make
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

my $NTESTS = 27;

plan tests => $NTESTS;

my ($CFG, $CBIN, $CLIB) = citus_tree();
my $install_path = citus_build($CFG, $CBIN, $CLIB);
my @nodes = citus_cluster($install_path, 'test/t/038_citus_targets.pl', 'c38', '');
my $coord = $nodes[0];

sub run
{
	my ($sql) = @_;
	return citus_psql($coord, 'c38', $sql, '-v', 'VERBOSITY=verbose');
}

sub one
{
	my ($sql, $node) = @_;
	return ($node // $coord)->safe_psql('c38', $sql);
}

sub sqlstate_of
{
	my ($out) = @_;
	return $out =~ /ERROR:  ([0-9A-Z]{5}):/ ? $1 : 'no error';
}

# the targets as each node holds them (coordinator, worker 1, worker 2)
my $TARGETS = q{SELECT coalesce(string_agg(concat_ws('|', target, coalesce(submit_url, ''), coalesce(status_url, ''),
  coalesce(submit_function, ''), coalesce(status_function, ''), reject_codes::text,
  coalesce(request_headers::text, '')), E'\n' ORDER BY target), '')
  FROM gridha.bucket_targets};
sub targets_everywhere
{
	return map { one($TARGETS, $_) } @nodes;
}

# ---------------------------------------------------------------------------
# setup

my $URL = 'http://127.0.0.1:9/b/{service_id}/{batch_id}';
my $SURL = 'http://127.0.0.1:9/s?id={batch_ids}';
my $setup = run(qq{
INSERT INTO gridha.targets (target, submit_url) VALUES ('pre', '$URL');
SELECT gridha.citus_setup(64);});
my @t = targets_everywhere();
my $kind = one(q{SELECT partmethod::text || '/' || repmodel::text FROM pg_dist_partition
  WHERE logicalrelid = 'gridha.bucket_targets'::regclass});
ok($setup =~ /^64$/m && $kind eq 'n/t' && $t[0] eq "default|||||{400,422}|\npre|$URL||||{400,422}|"
	  && $t[1] eq $t[0] && $t[2] eq $t[0],
	'setup: gridha.bucket_targets is a reference table holding gridha.targets\' rows (default and one written before the setup) on the coordinator and both workers')
  or diag("$setup\n$kind\n" . join("\n--\n", @t));

# a second database, whose target 'slow' has a rate limit before the
# setup: laid out with its limit (the rate tests below run there)
my $c38b_ok = 1;
{
	my $ok = 1;
	foreach my $n (@nodes)
	{
		$ok &&= $n->psql('postgres', 'CREATE DATABASE c38b') == 0;
		$ok &&= $n->psql('c38b', 'CREATE EXTENSION citus') == 0;
	}
	my $r = citus_psql($coord, 'c38b', sprintf(q{
SELECT citus_set_coordinator_host('localhost', %d);
SELECT citus_add_node('localhost', %d);
SELECT citus_add_node('localhost', %d);
CREATE EXTENSION gridha;
INSERT INTO gridha.targets (target, submit_url, rate_interval) VALUES ('slow', '%s', '1 s');
SELECT gridha.citus_setup(64);}, $coord->port, $nodes[1]->port, $nodes[2]->port, $URL),
		'-v', 'VERBOSITY=verbose');
	my @rates = map { $_->safe_psql('c38b', q{SELECT string_agg(concat_ws('|', target, coalesce(rate_interval::text, '-'),
	  rate_burst, coalesce(rate_interval_us::text, '-')), ',' ORDER BY target) FROM gridha.bucket_targets}) } @nodes;
	my $rstate = $coord->safe_psql('c38b', q{SELECT string_agg(concat_ws('|', bucket, target, tat_us, slots_taken), ','
	  ORDER BY target) FROM gridha.bucket_rates});
	$c38b_ok = $ok && $r =~ /^64$/m;
	ok($c38b_ok && $rates[0] eq 'default|-|1|-,slow|00:00:01|1|1000000'
		  && $rates[1] eq $rates[0] && $rates[2] eq $rates[0] && $rstate eq '0|default|0|0,0|slow|0|0',
		'setup: a target with a rate limit set before citus_setup is laid out with it: gridha.bucket_targets holds its interval (also in microseconds) and burst on every node, gridha.bucket_rates a state row per target in bucket 0')
	  or diag("$r\n" . join("\n", @rates) . "\n$rstate");
}

# ---------------------------------------------------------------------------
# admin: gridha.targets on the coordinator, mirrored on every node

one(q{CREATE FUNCTION public.c38_submit(service_id text, batch_id text, payload bytea, epoch bigint)
  RETURNS text LANGUAGE sql AS $$ SELECT 'accepted' $$});
my $ins = run(qq{
INSERT INTO gridha.targets (target, submit_url) VALUES ('url', '$URL');
INSERT INTO gridha.targets (target, submit_url, status_url, reject_codes, request_headers)
  VALUES ('urls', '$URL', '$SURL', '{400}', '{"X-Key": "k"}');
INSERT INTO gridha.targets (target, submit_function) VALUES ('fn', 'c38_submit(text,text,bytea,bigint)');
INSERT INTO gridha.targets (target, submit_url) VALUES ('spare', '$URL');
INSERT INTO gridha.targets (target, submit_url) VALUES ('gone', '$URL');});
@t = targets_everywhere();
my $want = "default|||||{400,422}|\n"
  . "fn|||public.c38_submit(text,text,bytea,bigint)||{400,422}|\n"
  . "gone|$URL||||{400,422}|\n"
  . "pre|$URL||||{400,422}|\n"
  . "spare|$URL||||{400,422}|\n"
  . "url|$URL||||{400,422}|\n"
  . "urls|$URL|$SURL|||{400}|{\"X-Key\": \"k\"}";
ok($ins !~ /ERROR/ && $t[0] eq $want && $t[1] eq $want && $t[2] eq $want,
	'admin: INSERT INTO gridha.targets on the coordinator reaches gridha.bucket_targets on every node (URLs, reject codes, headers, a function as its stored signature)')
  or diag("$ins\n" . join("\n--\n", @t));

my $before = join("\n--\n", targets_everywhere(), one('SELECT count(*) FROM gridha.targets'));
my @bad = (
	[ "INSERT INTO gridha.targets (target, submit_url) VALUES ('bad', 'ftp://x')", 'RG007',
		'invalid submit_url of target "bad"' ],
	[ "INSERT INTO gridha.targets (target, submit_url, submit_function) VALUES ('two', '$URL', 'c38_submit(text,text,bytea,bigint)')",
		'RG007', 'target "two" has both submit_url and submit_function' ],
	[ "INSERT INTO gridha.targets (target) VALUES ('')", '23514', 'new row for relation "targets" violates check constraint' ],
	[ "INSERT INTO gridha.targets (target) VALUES ('url')", '23505', 'duplicate key value violates unique constraint "targets_pkey"' ],
	[ "INSERT INTO gridha.targets (target, submit_url, rate_interval) VALUES ('lim', '$URL', '-1 s')", '23514',
		'new row for relation "targets" violates check constraint' ],
	[ "UPDATE gridha.targets SET status_url = 'x' WHERE target = 'url'", 'RG007', 'invalid status_url of target "url"' ]);
my ($bad_ok, $bad_out) = (1, '');
foreach my $b (@bad)
{
	my $o = run($b->[0]);
	$bad_out .= "$o\n";
	$bad_ok = 0 unless sqlstate_of($o) eq $b->[1] && $o =~ /ERROR:  $b->[1]: \Q$b->[2]\E/;
}
my $after = join("\n--\n", targets_everywhere(), one('SELECT count(*) FROM gridha.targets'));
ok($bad_ok && $before eq $after,
	'admin: a malformed URL and two submit sources (RG007), an empty name and a negative rate interval (23514), a name that exists (23505) are refused with the single server\'s SQLSTATEs; gridha.targets and gridha.bucket_targets on every node unchanged')
  or diag("$bad_out\nbefore:\n$before\nafter:\n$after");

my $upd = run(q{UPDATE gridha.targets SET reject_codes = '{400,409}' WHERE target = 'spare';
DELETE FROM gridha.targets WHERE target = 'gone';});
@t = targets_everywhere();
ok($upd !~ /ERROR/ && $t[0] =~ /^spare\|\Q$URL\E\|\|\|\|\{400,409\}\|$/m && $t[0] !~ /^gone\|/m
	  && $t[1] eq $t[0] && $t[2] eq $t[0],
	'admin: an UPDATE of a target and the DELETE of an unused one reach gridha.bucket_targets on every node')
  or diag("$upd\n" . join("\n--\n", @t));

# an administrator who is no superuser (a member of gridha_admin) writes
# targets the same way; a role outside it is refused (42501)
one(q{CREATE ROLE c38_admin LOGIN IN ROLE gridha_admin; CREATE ROLE c38_nobody LOGIN});
sub as_role
{
	my ($role, $sql) = @_;
	return citus_psql($coord, 'c38', $sql, '-U', $role, '-v', 'VERBOSITY=verbose');
}
my $by_admin = as_role('c38_admin', qq{INSERT INTO gridha.targets (target, submit_url) VALUES ('byadmin', '$URL');
UPDATE gridha.targets SET reject_codes = '{400}' WHERE target = 'byadmin';});
my $before_nobody = join("\n--\n", targets_everywhere());
my $by_nobody = as_role('c38_nobody', qq{INSERT INTO gridha.targets (target, submit_url) VALUES ('bynobody', '$URL')});
@t = targets_everywhere();
ok($by_admin !~ /ERROR/ && $t[0] =~ /^byadmin\|\Q$URL\E\|\|\|\|\{400\}\|$/m && $t[1] eq $t[0] && $t[2] eq $t[0]
	  && sqlstate_of($by_nobody) eq '42501' && $before_nobody eq join("\n--\n", @t),
	'admin: a member of gridha_admin (no superuser) writes a target that reaches every node; a role outside it is refused (42501) and nothing is written')
  or diag("$by_admin\n$by_nobody\n" . join("\n--\n", @t));

# ---------------------------------------------------------------------------
# enqueue

my $STATE = q{SELECT count(*) || '/' || coalesce(sum(tail_seq), 0) || '/'
  || coalesce(string_agg(service_id || '=' || target, ',' ORDER BY service_id), '') FROM gridha.bucket_services};
my $state = sub { one($STATE) . '/' . one('SELECT count(*) FROM gridha.bucket_batches') };

# services: u01..u06 on url, s01..s06 on urls, f01..f04 on fn, d01..d04
# without a target (default), p01 on pre (renamed below); 2 batches each
my %target_of;
$target_of{ sprintf('u%02d', $_) } = 'url' foreach 1 .. 6;
$target_of{ sprintf('s%02d', $_) } = 'urls' foreach 1 .. 6;
$target_of{ sprintf('f%02d', $_) } = 'fn' foreach 1 .. 4;
$target_of{ sprintf('d%02d', $_) } = 'default' foreach 1 .. 4;
$target_of{p01} = 'pre';
my $enq_sql = '';
foreach my $j (1, 2)
{
	foreach my $s (sort keys %target_of)
	{
		# the first batch names the target (none for default); the second
		# names it again for half of them, none for the others
		my $tg = $target_of{$s} eq 'default' ? 'NULL'
		  : ($j == 1 || $s =~ /[13579]$/) ? "'$target_of{$s}'" : 'NULL';
		$enq_sql .= "SELECT gridha.enqueue('$s', '$s-$j', '\\x38', $tg);\n";
	}
}
my $enq = run($enq_sql);
my $svc = one(q{SELECT string_agg(service_id || '=' || target || '/' || tail_seq, ',' ORDER BY service_id)
  FROM gridha.bucket_services});
my $want_svc = join(',', map { "$_=$target_of{$_}/2" } sort keys %target_of);
ok($enq !~ /ERROR/ && $svc eq $want_svc,
	'enqueue: a new service is created on the target its first batch names (default without one); later batches naming that target or none go to its queue')
  or diag("$enq\n$svc\nwant $want_svc");

my $before_enq = $state->();
my @refuse = (
	[ "SELECT gridha.enqueue('u01', 'u01-9', '\\x38', 'urls')", 'RG013', 'service "u01" is on target "url", not "urls"' ],
	[ "SELECT gridha.enqueue('d01', 'd01-9', '\\x38', 'url')", 'RG013', 'service "d01" is on target "default", not "url"' ],
	[ "SELECT gridha.enqueue('n01', 'n01-1', '\\x38', 'nowhere')", 'RG006', 'unknown target "nowhere"' ],
	[ "SELECT gridha.enqueue('u01', 'u01-9', '\\x38', 'nowhere')", 'RG013', 'service "u01" is on target "url", not "nowhere"' ]);
my ($ref_ok, $ref_out) = (1, '');
foreach my $r (@refuse)
{
	my $o = run($r->[0]);
	$ref_out .= "$o\n";
	$ref_ok = 0 unless sqlstate_of($o) eq $r->[1] && $o =~ /ERROR:  $r->[1]: \Q$r->[2]\E/;
}
my $after_enq = $state->();
ok($ref_ok && $before_enq eq $after_enq,
	'enqueue: a batch naming another target than its service\'s is refused (RG013), an unknown target for a new service (RG006), as on one server; no service or batch written')
  or diag("$ref_out\n$before_enq\n$after_enq");

# the per-bucket enqueue with a target, delegated to the bucket's worker
my $direct = run(q{SELECT gridha.bucket_enqueue(gridha.bucket_of('u07', 64), 'u07', 'u07-1', '\x38', 'url');
SELECT gridha.bucket_enqueue(gridha.bucket_of('u07', 64), 'u07', 'u07-2', '\x38', 'url');});
$target_of{u07} = 'url';
my $before_direct = $state->();
my $d1 = run(q{SELECT gridha.bucket_enqueue(gridha.bucket_of('u07', 64), 'u07', 'u07-9', '\x38', 'fn')});
my $d2 = run(q{SELECT gridha.bucket_enqueue(gridha.bucket_of('n02', 64), 'n02', 'n02-1', '\x38', 'nowhere')});
my $after_direct = $state->();
ok($direct =~ /^1\n2$/ && one("SELECT target FROM gridha.bucket_services WHERE service_id = 'u07'") eq 'url'
	  && sqlstate_of($d1) eq 'RG013' && sqlstate_of($d2) eq 'RG006' && $before_direct eq $after_direct,
	'enqueue: gridha.bucket_enqueue with a target creates the service on it; another target (RG013) and an unknown one (RG006) refused, nothing written')
  or diag("$direct\n$d1\n$d2\n$before_direct\n$after_direct");

# a rename carries its services along; the DELETE of a used target is refused
my $ren = run(q{UPDATE gridha.targets SET target = 'pre2' WHERE target = 'pre'});
$target_of{p01} = 'pre2';
@t = targets_everywhere();
my $p01 = one(q{SELECT target FROM gridha.bucket_services WHERE service_id = 'p01'});
my $before_del = join("\n--\n", @t, $state->());
my $del = run(q{DELETE FROM gridha.targets WHERE target = 'url'});
my $after_del = join("\n--\n", targets_everywhere(), $state->());
ok($ren !~ /ERROR/ && $p01 eq 'pre2' && $t[0] =~ /^pre2\|/m && $t[0] !~ /^pre\|/m && $t[1] eq $t[0] && $t[2] eq $t[0]
	  && sqlstate_of($del) eq '23503' && $del =~ /is still referenced from table "bucket_services"/
	  && $before_del eq $after_del
	  && one(q{SELECT count(*) FROM gridha.targets WHERE target = 'url'}) eq '1',
	'admin: renaming a target renames it on every node and carries its services along (as ON UPDATE CASCADE); deleting a target a service is on is refused (23503) and changes nothing')
  or diag("$ren\n$p01\n$del\n$before_del\n$after_del");

# ---------------------------------------------------------------------------
# serves

my %ID;
my $reg = run(q{SELECT 'U=' || gridha.register_instance('u', ARRAY['submit_url']);
SELECT 'S=' || gridha.register_instance('s', ARRAY['submit_url', 'status_url']);
SELECT 'F=' || gridha.register_instance('f', ARRAY['submit_function']);
SELECT 'A=' || gridha.register_instance('a');});
%ID = $reg =~ /^([USFA])=([0-9a-f-]{36})$/mg;
my $SERVES = q{SELECT string_agg(label || '=' || coalesce(serves::text, 'NULL'), ',' ORDER BY label)
  FROM gridha.bucket_instances};
my @sv = map { one($SERVES, $_) } @nodes;
ok(scalar(keys %ID) == 4 && $sv[0] eq 'a=NULL,f={submit_function},s={submit_url,status_url},u={submit_url}'
	  && $sv[1] eq $sv[0] && $sv[2] eq $sv[0],
	'serves: register_instance keeps what an instance serves in gridha.bucket_instances, on every node (NULL: nothing declared)')
  or diag("$reg\n" . join("\n", @sv));

my $before_reg = one('SELECT count(*) FROM gridha.bucket_instances');
my $r1 = run(q{SELECT gridha.register_instance('x', ARRAY['submit_url', 'bogus'])});
my $r2 = run(q{SELECT gridha.register_instance('x', ARRAY['submit_url', NULL])});
ok(sqlstate_of($r1) eq '22023' && $r1 =~ /unknown target kind "bogus"/
	  && sqlstate_of($r2) eq '22023' && $r2 =~ /serves must not contain NULL/
	  && one('SELECT count(*) FROM gridha.bucket_instances') eq $before_reg,
	'serves: an unknown kind and a NULL in serves are refused (22023, as on one server); nothing registered')
  or diag("$r1\n$r2");

# ---------------------------------------------------------------------------
# handout

one(q{CREATE TABLE public.c38_log (instance text, service_id text, batch_id text, seq bigint, n serial)});

# drain(X): X calls next_batches and reports every batch committed, round
# after round (one transaction each) until a round hands out nothing
# (bounded: 12 rounds); then gives its buckets back. What it got.
sub drain
{
	my ($x) = @_;
	my $out = '';
	foreach my $round (1 .. 12)
	{
		my $o = run(qq{DO \$\$
DECLARE r record; BEGIN
FOR r IN SELECT * FROM gridha.next_batches('$ID{$x}', 100) LOOP
  INSERT INTO public.c38_log (instance, service_id, batch_id, seq)
    VALUES ('$x', r.service_id, r.batch_id, split_part(r.batch_id, '-', 2)::bigint);
  PERFORM gridha.report_submission('$ID{$x}', r.service_id, r.batch_id, r.epoch, 'accepted');
  PERFORM gridha.report_status('$ID{$x}', r.service_id, r.batch_id, r.epoch, 'committed');
END LOOP; END \$\$;
SELECT count(*) FROM public.c38_log WHERE instance = '$x';});
		$out .= $o;
		last if $o =~ /ERROR/;
		my ($n) = $o =~ /(\d+)\s*$/;
		state_round($x, $n) or last;
	}
	$out .= run("SELECT gridha.release_claims('$ID{$x}')");
	return $out;
}
my %last_n;
sub state_round
{
	my ($x, $n) = @_;
	my $more = !defined $last_n{$x} || $n != $last_n{$x};
	$last_n{$x} = $n;
	return $more;
}

my $GOT = q{SELECT coalesce(string_agg(l.batch_id, ',' ORDER BY l.batch_id), '') FROM public.c38_log l WHERE l.instance = '%s'};
sub want_of
{
	my (@targets) = @_;
	my %in = map { $_ => 1 } @targets;
	return join(',', sort map { ("$_-1", "$_-2") } grep { $in{ $target_of{$_} } } keys %target_of);
}

# (a target without a submit source, as 'default' here, is served only by
# an instance that declared nothing, as on one server)
my @order = ([ 'U', [ 'url', 'pre2' ], 'submit_url: the two URL targets without a status URL' ],
	[ 'S', ['urls'], 'submit_url and status_url: the one with both, the others U served' ],
	[ 'F', ['fn'], 'submit_function: the function target' ],
	[ 'A', ['default'], 'nothing declared: every target; default, without a submit source, was left' ]);
foreach my $o (@order)
{
	my ($x, $tg, $what) = @$o;
	my $out = drain($x);
	my $got = one(sprintf($GOT, $x));
	my $w = want_of(@$tg);
	ok($out !~ /ERROR/ && $got eq $w,
		"handout: instance $x (serves $what) is handed out every batch of its targets left and nothing else")
	  or diag("$out\ngot  $got\nwant $w");
}

my $unordered = one(q{SELECT count(*) FROM (
  SELECT service_id, seq, rank() OVER (PARTITION BY service_id ORDER BY n) AS by_log,
         rank() OVER (PARTITION BY service_id ORDER BY seq) AS by_seq FROM public.c38_log) x
 WHERE by_log <> by_seq});
my $all = one(q{SELECT count(*) || '/' || count(*) FILTER (WHERE status = 'committed') FROM gridha.bucket_batches});
my $n = 2 * scalar(keys %target_of);
ok($unordered eq '0' && $all eq "$n/$n" && one('SELECT count(*) FROM public.c38_log') eq $n,
	"handout: every batch ($n) handed out once and committed, each service's in seq order")
  or diag("unordered $unordered, batches $all");

# the per-bucket hand-out: the batch's target in its result; nothing of a
# target the instance does not serve
my $pb = run(q{SELECT gridha.enqueue('f05', 'f05-1', '\x38', 'fn');
SELECT gridha.enqueue('f05', 'f05-2', '\x38');});
my $fb = one(q{SELECT gridha.bucket_of('f05', 64)});
my $hand = run(qq{SELECT gridha.bucket_acquire($fb, '$ID{U}') AS e \\gset
SELECT gridha.bucket_next_batch($fb, '$ID{U}', :e) IS NULL AS none_for_u;
SELECT gridha.bucket_release($fb, '$ID{U}', :e);
SELECT gridha.bucket_acquire($fb, '$ID{F}') AS e \\gset
SELECT gridha.bucket_next_batch($fb, '$ID{F}', :e);});
ok($hand =~ /^t$/m && $hand =~ /^\(f05,f05-1,1,"\\\\x38",\d+,1,fn\)$/m,
	'handout: bucket_next_batch hands an instance that does not serve a target none of its batches, and one that does the batch with its target')
  or diag("$pb\n$hand");

my $acq = run(qq{SELECT count(*) >= 0 FROM gridha.acquire_claims('$ID{U}', ARRAY['submit_function']);});
my $acq_bad = run(qq{SELECT count(*) FROM gridha.acquire_claims('$ID{U}', ARRAY['nope'])});
ok($acq !~ /ERROR/ && sqlstate_of($acq_bad) eq '22023'
	  && one(qq{SELECT serves::text FROM gridha.bucket_instances WHERE instance_id = '$ID{U}'}) eq '{submit_function}'
	  && one(qq{SELECT serves::text FROM gridha.bucket_instances WHERE instance_id = '$ID{U}'}, $nodes[1]) eq '{submit_function}',
	'serves: acquire_claims with serves declares anew what the instance serves, on every node; an unknown kind refused (22023)')
  or diag("$acq\n$acq_bad");

# ---------------------------------------------------------------------------
# metrics: one row of scope target per target of gridha.bucket_targets, each
# with the figures of the services on it (computed here from the bucket
# tables: committed batches, batches not final)

my $mrows = run(q{SELECT string_agg(target || '=' || committed_total || '/' || backlog, ',' ORDER BY target)
  FROM gridha.metrics WHERE scope = 'target'});
my $mwant = one(q{SELECT string_agg(t.target || '=' || coalesce(c.n, 0) || '/' || coalesce(c.b, 0), ',' ORDER BY t.target)
  FROM gridha.bucket_targets t
  LEFT JOIN (SELECT s.target, count(*) FILTER (WHERE b.status = 'committed') AS n,
                    count(*) FILTER (WHERE b.status NOT IN ('committed', 'invalid')) AS b
               FROM gridha.bucket_batches b
               JOIN gridha.bucket_services s ON s.bucket = b.bucket AND s.service_id = b.service_id
              GROUP BY s.target) c ON c.target = t.target});
my $busy = () = $mwant =~ /=[1-9]\d*\//g;
ok($mrows eq $mwant && $busy >= 2,
	"metrics: one row of scope target per target of gridha.bucket_targets, its committed total and backlog those of the services on it ($busy targets with commits)")
  or diag("metrics: $mrows\nwant:    $mwant");

# ---------------------------------------------------------------------------
# rate: a rate limit in the mode (database c38b), across instances and nodes

sub oneb
{
	my ($sql, $node) = @_;
	return ($node // $coord)->safe_psql('c38b', $sql);
}
sub runb
{
	my ($sql, @extra) = @_;
	return citus_psql($coord, 'c38b', $sql, '-v', 'VERBOSITY=verbose', @extra);
}
my $PSQL = defined $install_path ? "$install_path/bin/psql" : 'psql';
my $rtmp = PostgreSQL::Test::Utils::tempdir('c38rate');
my $RATE = q{SELECT concat_ws('|', x.rate_interval_us, x.rate_burst, r.tat_us, r.slots_taken)
  FROM gridha.bucket_rates r JOIN gridha.bucket_targets x ON x.target = r.target WHERE r.bucket = 0 AND r.target = 'slow'};
# the hand-out times (microseconds) of the batches of 'slow' handed out,
# and how often each was
my $SLOW_TIMES = q{SELECT coalesce(string_agg((EXTRACT(epoch FROM b.handed_out_at) * 1000000)::int8::text || ':' || b.attempts,
  ',' ORDER BY b.handed_out_at), '') FROM gridha.bucket_batches b
  JOIN gridha.bucket_services s ON s.bucket = b.bucket AND s.service_id = b.service_id
  WHERE s.target = 'slow' AND b.attempts > 0};

# 'slow' at 200 ms, burst 2; 150 services on it (more than the limit lets
# out while the instances run) and 10 on default, one batch each; three
# instances hand out at once, each next_batches(4) every 50 ms, 20 times,
# all three started at the same moment on a layout none had used (their
# claim cycles take buckets at once: before citus_take undid a look at a
# bucket not taken, one call of three ended with 40P01, docs/citus.md)
my $R = 200_000;
my $prep = runb(q{UPDATE gridha.targets SET rate_interval = '200 ms', rate_burst = 2 WHERE target = 'slow';}
	  . join('', map { sprintf("SELECT gridha.enqueue('r%03d', 'rb', '\\x01', 'slow');\n", $_) } 1 .. 150)
	  . join('', map { sprintf("SELECT gridha.enqueue('q%02d', 'qb', '\\x01');\n", $_) } 1 .. 10));
my @sessions;
foreach my $k (1 .. 3)
{
	my $id = oneb("SELECT gridha.register_instance('rate $k')");
	my $f = "$rtmp/h$k";
	open my $fh, '>', "$f.sql" or die;
	print $fh "SELECT count(*) FROM gridha.next_batches('$id', 4);\nSELECT pg_sleep(0.05);\n" foreach 1 .. 20;
	close $fh;
	push @sessions, [ [ $PSQL, '-X', '-q', '-A', '-t', '-v', 'VERBOSITY=verbose',
				'-d', $coord->connstr('c38b'), '-f', "$f.sql" ], $f ];
}
# the three at once
$_ = [ IPC::Run::start($_->[0], '<', \undef, '>', "$_->[1].out", '2>', "$_->[1].err"), $_->[1] ] foreach @sessions;
my ($herr, $hout) = ('', 0);
foreach my $h (@sessions)
{
	$h->[0]->finish;
	$herr .= slurp("$h->[1].err");
	$hout += $_ foreach grep { /^\d+$/ } split /\n/, slurp("$h->[1].out");
}
my @slow = map { [ split /:/ ] } split /,/, oneb($SLOW_TIMES);
my @ts = map { $_->[0] } @slow;
my $nslow = scalar @ts;
# the bound (src/ratelimit.c): the j-th hand-out after the i-th is at
# least (j - i - (burst - 1)) intervals after it
my @over;
foreach my $i (0 .. $#ts)
{
	foreach my $j ($i + 1 .. $#ts)
	{
		push @over, "$i-$j" if $ts[$j] - $ts[$i] < ($j - $i - 1) * $R;
	}
}
my $span = $nslow ? $ts[-1] - $ts[0] : 0;
my $others = oneb(q{SELECT count(*) FILTER (WHERE b.attempts > 0) || '/' || count(*) FROM gridha.bucket_batches b
  JOIN gridha.bucket_services s ON s.bucket = b.bucket AND s.service_id = b.service_id WHERE s.target = 'default'});
my @state = map { oneb($RATE, $_) } @nodes;
my $view = oneb(q{SELECT slots_taken || '|' || (next_slot_at IS NOT NULL) FROM gridha.target_rates WHERE target = 'slow'});
my $again = grep { $_->[1] != 1 } @slow;
diag("rate: $prep\nhanded out $hout in all; of slow: $nslow over " . ($span / 1e6) . " s, each once: " . ($again ? 'no' : 'yes')
	  . "\nover the bound: @over\ndefault: $others\nstate per node: @state\nview: $view\nerrors: $herr");
ok( $c38b_ok && $prep !~ /ERROR/ && $herr eq '' && !@over && !$again
	  && $nslow >= 5 && $nslow < 150 && $nslow <= 2 + int($span / $R)
	  && $others eq '10/10'
	  && $state[0] =~ /^200000\|2\|\d+\|$nslow$/ && $state[1] eq $state[0] && $state[2] eq $state[0]
	  && $view eq "$nslow|true",
	'rate: with \'slow\' at 200 ms and burst 2, three instances handing out at once (started at the same moment on a layout none had used) gave out its batches within the bound (the k-th after another at least k - 1 intervals later), some but not all of them, while every batch of default went out, no call refused; the slots taken, read from every node, equal the hand-outs, and gridha.target_rates shows them');

# the per-bucket hand-out, sent to a worker: one slot, then none; paused;
# a new interval scales what is owed
oneb("SELECT gridha.release_claims('$_')")
  foreach split /\n/, oneb(q{SELECT instance_id FROM gridha.bucket_instances WHERE label LIKE 'rate %' ORDER BY 1});
# The bucket: a free one with nothing ready or in flight, into which two
# new services of 'slow' (two of x000 to x999, by gridha.bucket_of) are enqueued;
# how many of the 150 above are left depends on the machine's speed
my %busy = map { $_ => 1 } split /\n/, oneb(q{SELECT DISTINCT bucket FROM gridha.bucket_services
  WHERE ready_at IS NOT NULL OR in_flight});
my %free = map { $_ => 1 } split /\n/, oneb(q{SELECT bucket FROM gridha.bucket_claims WHERE holder IS NULL});
my %xs;
foreach (split /\n/, oneb(q{SELECT format('x%s', lpad(i::text, 3, '0')) || '|' || gridha.bucket_of(format('x%s', lpad(i::text, 3, '0')), 64)
  FROM generate_series(0, 999) i}))
{
	my ($x, $xb) = split /\|/;
	push @{ $xs{$xb} }, $x;
}
my ($k) = grep { $free{$_} && !$busy{$_} && @{ $xs{$_} // [] } >= 2 } sort { $a <=> $b } keys %xs;
die 'rate: no free bucket without work holds two of the services x000 to x999' unless defined $k;
oneb(join('', map { "SELECT gridha.enqueue('$_', 'xb', '\\x01', 'slow');\n" } @{ $xs{$k} }[0, 1]));
my $D = oneb(q{SELECT gridha.register_instance('rate direct')});
my $e = oneb(qq{UPDATE gridha.targets SET rate_interval = NULL WHERE target = 'slow';
UPDATE gridha.targets SET rate_interval = '60 s', rate_burst = 1 WHERE target = 'slow';
SELECT gridha.bucket_acquire($k, '$D', '5 min')});
my $s0 = oneb($RATE);
my $rdirect = runb(qq{SET citus.log_remote_commands = on;
SET client_min_messages = notice;
SELECT 'first';
SELECT gridha.bucket_next_batch($k, '$D', $e);
SELECT 'second';
SELECT gridha.bucket_next_batch($k, '$D', $e);
SELECT 'end';});
my $s1 = oneb($RATE);
my $wports = join('|', map { $_->port } @nodes[1, 2]);
my ($t0, $n0) = (split /\|/, $s0)[2, 3];
my ($t1, $n1) = (split /\|/, $s1)[2, 3];
diag("bucket $k, instance $D, epoch $e:\n$rdirect\nstate $s0 -> $s1");
ok( $k =~ /^\d+$/ && $rdirect =~ /^first\n\(x\d\d\d,xb,1,[^\n]*,slow\)\nsecond\n\nend$/m
	  && $rdirect =~ /issuing SELECT gridha\.bucket_next_batch\($k,.{0,300}?on server \w+\@localhost:($wports)\b/s
	  && $n1 == $n0 + 1 && $t1 >= $t0 + 60_000_000,
	'rate: gridha.bucket_next_batch, sent whole to the bucket\'s worker, takes the one slot of \'slow\' (60 s, burst 1) there and hands its batch out; the next call at once hands out nothing (no other target in the bucket); the slot counted once');

my $paused = runb(qq{UPDATE gridha.targets SET rate_burst = 0 WHERE target = 'slow';
SELECT 'paused';
SELECT gridha.bucket_next_batch($k, '$D', $e);
SELECT 'end';
SELECT next_slot_at FROM gridha.target_rates WHERE target = 'slow';
UPDATE gridha.targets SET rate_burst = 1 WHERE target = 'slow';});
my $t2 = (split /\|/, oneb($RATE))[2];
oneb(q{UPDATE gridha.targets SET rate_interval = '120 s' WHERE target = 'slow'});
my $t3 = (split /\|/, oneb($RATE))[2];
diag("paused: $paused\ntat $t1 -> $t2 -> (120 s) $t3: owed " . (($t3 - $t2) / 1e6) . " s more");
ok( $paused =~ /^paused\n\nend$/m && $paused =~ /^infinity$/m && $t2 == $t1
	  && $t3 - $t2 > 40_000_000 && $t3 - $t2 <= 60_000_000,
	'rate: rate_burst 0 pauses \'slow\' (nothing handed out, next slot at infinity) and keeps its state; a new interval (60 s to 120 s) doubles the time still owed, as on one server');

# ---------------------------------------------------------------------------
# end

my $local = one(q{SELECT (SELECT count(*) FROM gridha.batches) + (SELECT count(*) FROM gridha.service_claims)
  + (SELECT count(*) FROM gridha.instances)});
my $shells = one(q{SELECT sum((pg_stat_file(pg_relation_filepath(c))).size)
  FROM unnest(ARRAY['gridha.bucket_batches', 'gridha.bucket_claims', 'gridha.bucket_services']::regclass[]) AS c});
ok($local eq '0' && $shells eq '0',
	'end: gridha\'s own tables hold no row and the bucket tables\' local shells are empty on the coordinator')
  or diag("local $local shells $shells");

my $logs = join('', map { slurp($_->logfile) } @nodes);
my @crash = grep { /server process .* was terminated|PANIC/ } split /\n/, $logs;
ok(!@crash, 'no node crashed and no PANIC in the logs');
diag(join("\n", @crash)) if @crash;

$_->stop foreach @nodes;
