# test/t/042_scale_soak.pl: three background workers hold 100,000
# services, a few hundred of them busy, for minutes, with autovacuum on and
# the maintenance tick pruning what is done.
#
# The cluster is restarted with three static workers serving this test's
# database (claims: renew 2 s, soft expiry 10 s, hard 60 s; committed
# batches pruned 20 s after they end, a tick every 2 s; autovacuum with a
# 5 s naptime). Before the workers start, SCALE_SOAK_IDLE (100,000) idle
# services are made through the API: each had one batch, handed out and
# committed by a set-up instance that then handed them back. The workers
# take them all and share them. Then a producer enqueues, every
# SCALE_SOAK_ROUND_MS (2000), one batch for each of SCALE_SOAK_ACTIVE (300)
# services, for SCALE_SOAK_SECONDS (120; make soak: 900), and the workers
# submit them to the test ledger.
#
#   setup      the idle services exist; the workers register and hold every
#              service
#   renew      sampled every second: no worker's lease was renewed longer
#              ago than twice gridha.renew_interval (its lease would run out
#              at soft expiry, five intervals)
#   sizes      table and index sizes of batches, service_claims and
#              instances every 10 s (printed); from the middle of the run to
#              its end each grows by at most a fifth plus 1 MB: they level
#              off once pruning and autovacuum keep pace
#   drain      after the producer stops, every batch it enqueued reaches the
#              ledger in its service's order, one in flight per service, and
#              is committed or pruned; no idle service changed hands (no
#              claim expired under a busy worker)
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded, the workers' role a member of
# gridha_submitter only, with the test ledger (commits 0.1 s after
# accepting); the producer and the two samplers are bash loops of psql
# through IPC::Run, the order check test/dlt/check_log.py. Run by
# `make test` (test/run.sh, part 042_scale_soak), `make soak` (longer) and
# `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More tests => 7;

my $db = 'gridha_scale_soak';
my $idle = $ENV{SCALE_SOAK_IDLE} // 100000;
my $active = $ENV{SCALE_SOAK_ACTIVE} // 300;
my $duration = $ENV{SCALE_SOAK_SECONDS} // 120;
my $round_ms = $ENV{SCALE_SOAK_ROUND_MS} // 2000;
my $renew_s = 2;
my $total = $idle + $active;
my $work = PostgreSQL::Test::Utils::tempdir;

my $node = gridha_node('scale_soak', q{
max_connections = 100
shared_buffers = 128MB
log_statement = none
synchronous_commit = off
full_page_writes = off
});

# sqlv($sql): what psql printed, '' after an error
sub sqlv
{
	return psql_value($node, $db, $_[0]);
}

my $ledger = start_ledger($work, '--commit-delay', '0.1', '--max-lifetime', $duration + 600);
my $led = $ledger->{url};

# ---------------------------------------------------------------------------
# setup: idle services through the API, before the workers start

$node->safe_psql('postgres', "CREATE DATABASE $db");
my $t0 = time();
my ($out, $err) = ('', '');
$node->psql($db, <<"EOS", stdout => \$out, stderr => \$err, on_error_die => 1);
SET client_min_messages = warning;
CREATE EXTENSION gridha;
CREATE ROLE gridha_test_worker LOGIN IN ROLE gridha_submitter;
UPDATE gridha.targets
   SET submit_url = '$led/batches/{service_id}/{batch_id}',
       status_url = '$led/batch_statuses?id={batch_ids}'
 WHERE target = 'default';

-- what the producer enqueued, in order (the batches table is pruned)
CREATE TABLE soak_enqueued (service_id text, batch_id text, pos bigserial);
CREATE TABLE soak_epochs AS SELECT NULL::text AS service_id, NULL::bigint AS epoch LIMIT 0;

SET gridha.balance_claims = off;
-- every idle service in one statement (the counts are written once, at
-- commit)
INSERT INTO gridha.batches (service_id, batch_id, payload)
SELECT 'idle-' || lpad(i::text, 6, '0'), 'idle-' || lpad(i::text, 6, '0') || '-1', '\\x00'
  FROM generate_series(1, $idle) AS i;
SELECT count(*) FROM gridha.acquire_claims('00000000-0000-4000-9000-000000000042');
DO \$\$
DECLARE
    inst uuid := '00000000-0000-4000-9000-000000000042';
    got int;
    s text[];
    b text[];
    e bigint[];
BEGIN
    LOOP
        SELECT count(*), array_agg(service_id), array_agg(batch_id), array_agg(epoch)
          INTO got, s, b, e FROM gridha.next_batches(inst, 10000);
        EXIT WHEN got = 0;
        PERFORM count(*) FROM gridha.report_statuses(inst, s, b, e,
                                                      array_fill('committed'::text, ARRAY[got]));
    END LOOP;
END
\$\$;
SELECT gridha.release_claims('00000000-0000-4000-9000-000000000042');
EOS
is(sqlv("SELECT count(*) || '|' || count(*) FILTER (WHERE status = 'committed') FROM gridha.batches"),
	"$idle|$idle",
	"setup: $idle idle services, each with one batch committed through the API (" . (time() - $t0) . ' s)');

restart_with_workers($node, $db, 3, qq{
gridha.naptime = '200ms'
gridha.monitor_interval = '200ms'
gridha.submit_timeout = '5s'
gridha.renew_interval = '${renew_s}s'
gridha.soft_expiry = '10s'
gridha.hard_expiry = '60s'
gridha.retention = '20s'
gridha.maintenance_interval = '2s'
autovacuum = on
autovacuum_naptime = '5s'
});

# the producer's services exist before the workers settle their shares
$node->safe_psql($db, qq{
INSERT INTO gridha.batches (service_id, batch_id, payload)
SELECT 'act-' || lpad(i::text, 3, '0'), 'act-' || lpad(i::text, 3, '0') || '-000000', '\\x01'
  FROM generate_series(1, $active) AS i ORDER BY i;
INSERT INTO soak_enqueued (service_id, batch_id)
SELECT 'act-' || lpad(i::text, 3, '0'), 'act-' || lpad(i::text, 3, '0') || '-000000'
  FROM generate_series(1, $active) AS i ORDER BY i;
});
# idle claims stay where the workers first took them (the count share bounds
# only what each takes while they are free): how evenly depends on the
# order in which the workers came up, and is printed, not checked
$t0 = time();
ok( wait_until(
		120,
		sub {
			sqlv(q{SELECT count(*) || '|' || sum(held) FROM gridha.instances
			        WHERE kind = 'worker' AND soft_expiry > now()}) eq "3|$total";
		}),
	"setup: the 3 workers hold all $total services (" . (time() - $t0) . ' s)');
diag(sqlv("SELECT label, held FROM gridha.instances WHERE kind = 'worker' ORDER BY label"));
sqlv(q{INSERT INTO soak_epochs SELECT service_id, epoch FROM gridha.service_claims
        WHERE service_id LIKE 'idle-%'});

# ---------------------------------------------------------------------------
# the run: a producer, a sampler of leases and one of sizes (bash loops of
# psql, each until DURATION has passed)

my $t_start = time();
my $sizes_sql = qq{SELECT (extract(epoch FROM now())::bigint - $t_start) || '|' ||
       string_agg(pg_table_size(c) || '|' || pg_indexes_size(c), '|' ORDER BY c::text)
  FROM unnest(ARRAY['gridha.batches', 'gridha.instances', 'gridha.service_claims']::regclass[]) AS c};

# loop($name, $script, @args): bash -c $script with the connection string,
# DURATION and @args as $1, $2, ... (ended at exit if still running)
my @loops;
sub loop
{
	my ($name, $script, @args) = @_;
	my $h = IPC::Run::start([ 'bash', '-c', $script, $name, $node->connstr($db), $duration, @args ],
		'<', \undef, '>', "$work/$name.out", '2>&1');
	push @loops, $h;
	return $h;
}

END
{
	local $?;
	foreach my $h (@loops)
	{
		eval { $h->kill_kill(grace => 0); };
	}
}

my $producer = loop('producer', q{
	r=1
	end=$(($(date +%s) + $2))
	while [ "$(date +%s)" -lt "$end" ]; do
		psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$1" -c "BEGIN;
		  INSERT INTO gridha.batches (service_id, batch_id, payload)
		  SELECT 'act-' || lpad(i::text, 3, '0'), 'act-' || lpad(i::text, 3, '0') || '-' || lpad('$r', 6, '0'), '\\x01'
		    FROM generate_series(1, $3) AS i ORDER BY i;
		  INSERT INTO soak_enqueued (service_id, batch_id)
		  SELECT 'act-' || lpad(i::text, 3, '0'), 'act-' || lpad(i::text, 3, '0') || '-' || lpad('$r', 6, '0')
		    FROM generate_series(1, $3) AS i ORDER BY i;
		  COMMIT" >/dev/null || echo "# producer: round $r failed" >&2
		r=$((r + 1))
		sleep "$(awk "BEGIN { print $4 / 1000 }")"
	done
}, $active, $round_ms);
# the age of each worker's last renewal: its soft expiry minus 10 s
my $leases = loop('lease_ages', q{
	end=$(($(date +%s) + $2))
	while [ "$(date +%s)" -lt "$end" ]; do
		psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$1" -c "SELECT round(extract(epoch FROM max(now() - (soft_expiry - interval '10 s')))::numeric, 2),
		                   count(*)
		              FROM gridha.instances WHERE kind = 'worker' AND soft_expiry IS NOT NULL" \
			>>"$3" 2>/dev/null
		sleep 1
	done
}, "$work/lease_ages");
my $sizer = loop('sizes', q{
	end=$(($(date +%s) + $2))
	while [ "$(date +%s)" -lt "$end" ]; do
		psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$1" -c "$4" >>"$3" 2>/dev/null
		sleep 10
	done
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$1" -c "$4" >>"$3" 2>/dev/null
}, "$work/sizes", $sizes_sql);
$producer->finish;
$sizer->finish;
$leases->finish;
diag(slurp_file("$work/producer.out")) if -s "$work/producer.out";

# num($x): $x when it is a number, else 0
sub num
{
	my ($x) = @_;
	return defined $x && $x =~ /\A-?[0-9]+(\.[0-9]*)?\z/ ? $x : 0;
}

# ---------------------------------------------------------------------------
# renew

my @ages = grep { /\S/ } split /\n/, (-e "$work/lease_ages" ? slurp_file("$work/lease_ages") : '');
my ($bad, $max_age) = (0, 0);
foreach my $line (@ages)
{
	my ($age, $count) = split /\|/, $line;
	$age = num($age);    # no worker had a lease yet: counted by $count
	$max_age = $age if $age > $max_age;
	$bad = 1 if $age > 2 * $renew_s || !defined $count || $count ne '3';
}
my $samples = scalar(@ages);
ok(!$bad && $samples >= int($duration / 2),
	"renew: in $samples samples, every worker's lease was renewed at most "
	  . (2 * $renew_s)
	  . " s ago (renew interval ${renew_s} s; the oldest seen: $max_age s)");

# ---------------------------------------------------------------------------
# sizes

my @sizes = grep { /\S/ } split /\n/, (-e "$work/sizes" ? slurp_file("$work/sizes") : '');
diag(join("\n",
		'sizes (kB, table / indexes) every 10 s:',
		sprintf('%6s %20s %20s %20s', 's', 'batches', 'instances', 'service_claims'),
		map {
			my @f = split /\|/;
			sprintf('%6s %9d / %8d %9d / %8d %9d / %8d', $f[0], map { num($_) / 1024 } @f[ 1 .. 6 ])
		} @sizes));
my $n = scalar(@sizes);
my ($level_ok, $worst) = (0, '');
if ($n >= 3)
{
	my @mid = split /\|/, $sizes[ int(($n + 1) / 2) - 1 ];
	my @last = split /\|/, $sizes[-1];
	$level_ok = 1;
	foreach my $i (1 .. 6)
	{
		if (num($last[$i]) > num($mid[$i]) * 1.2 + 1048576)
		{
			$level_ok = 0;
			$worst .= ' column ' . ($i + 1);
		}
	}
}
ok($level_ok,
	"sizes: from the middle of the run to its end no table or index of batches, instances or service_claims grew by more than a fifth plus 1 MB$worst"
);

# ---------------------------------------------------------------------------
# drain

$t0 = time();
my $drained = wait_until(120,
	sub { sqlv("SELECT count(*) FROM gridha.batches WHERE service_id LIKE 'act-%' AND status <> 'committed'") eq '0' });
ok($drained,
	'drain: every batch the producer enqueued is committed or pruned (' . (time() - $t0) . ' s after it stopped)');
diag(sqlv('SELECT status, count(*) FROM gridha.batches GROUP BY 1 ORDER BY 1'));

my $expected = "$work/expected.tsv";
my $rows = $node->safe_psql($db, 'SELECT service_id, batch_id FROM soak_enqueued ORDER BY service_id, pos',
	extra_params => [ '-F', "\t" ]);
append_to_file($expected, "$rows\n");
my @expected_rows = split /\n/, $rows;
my $n_expected = scalar(@expected_rows);
my ($in_order, $check) = ledger_in_order($ledger, $expected);
ok($in_order,
	"drain: all $n_expected batches reached the ledger in their service's order, one in flight per service")
  or diag($check =~ /^(violations.*?)(?:\n\n|\z)/ms ? $1 : $check);

is( sqlv(q{SELECT count(*) FROM soak_epochs s JOIN gridha.service_claims c USING (service_id)
            WHERE c.epoch <> s.epoch}),
	'0',
	'drain: no idle service changed hands during the run (epochs as they were)');

# A fast stop, falling back to an immediate one as test/lib.sh's restart of
# the shared cluster did: here it once took longer than pg_ctl's 60 s (the
# workers hold 100,000 claims), and that is no test of this file.
my $t_stop = time();
if (!$node->stop('fast', fail_ok => 1))
{
	diag('pg_ctl stop -m fast failed after ' . (time() - $t_stop) . ' s; stopping immediately');
	$node->stop('immediate');
}
diag('the server stopped ' . (time() - $t_stop) . ' s after the fast stop began');
