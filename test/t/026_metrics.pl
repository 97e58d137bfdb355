# test/t/026_metrics.pl: gridha's metrics through a real
# prometheus-postgres-exporter and a real Prometheus (Debian packages,
# which test/install-debian.sh installs), while two background workers
# serve a steady load.
#
# What it shows:
#
#   exporter    prometheus-postgres-exporter with monitoring/gridha-queries.yaml
#               against the test's database: its /metrics has
#               gridha_target_* and gridha_instance_* series, and
#               gridha_target_committed_total lies between what the database
#               said just before and just after the scrape, and so do the
#               claims taken over and the stale writes refused; the workers'
#               instances are there with their claims and leases
#   prometheus  prometheus scraping the exporter every second, with its data
#               in the test's directory: its HTTP query API gives a
#               committed-batches rate, rate(gridha_target_committed_total[10s]),
#               above zero and within a factor of 3 of the rate counted in the
#               database
#
# Words: "the load" is rounds of one batch for each of 20 services, 50 rounds
# a second at most (m_load below); "committed" is the sum of the services'
# committed_total in gridha.service_claims.
#
# The exporter and Prometheus listen on 127.0.0.1 only, each on a port the
# framework found free, and are stopped at exit; each wait is bounded.
# Without the packages (no installing here) the 9 tests are skipped, saying
# which are missing, never passed.
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded and two workers serving its database
# (gridha_metrics_test) as a role with only gridha_submitter; the exporter
# connects through the cluster's socket. Run by `make test` (test/run.sh,
# part 026_metrics) and by `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More tests => 9;
use Time::HiRes qw(time);

my $n_tests = 9;
my $db = 'gridha_metrics_test';
my $exporter = '/usr/bin/prometheus-postgres-exporter';
my $prometheus = '/usr/bin/prometheus';

# The packages
my @need;
push @need, 'prometheus-postgres-exporter' unless -x $exporter;
push @need, 'prometheus' unless -x $prometheus;
if (@need)
{
  SKIP:
	{
		skip('missing packages (' . join(' ', @need)
			  . '): as root, test/install-debian.sh installs them', $n_tests);
	}
	exit 0;
}

my $work = PostgreSQL::Test::Utils::tempdir;
my $http = HTTP::Tiny->new(timeout => 5);
my @procs;

END
{
	local $?;
	foreach my $h (@procs)
	{
		eval { $h->signal('TERM'); $h->finish; };
	}
}

my $node = gridha_node('metrics');

# The database: a target function that accepts everything (fire and forget:
# committed at once), two workers serving it
$node->safe_psql('postgres', "CREATE DATABASE $db");
$node->safe_psql($db, q{
CREATE EXTENSION gridha;
CREATE ROLE gridha_test_worker LOGIN IN ROLE gridha_submitter;
CREATE FUNCTION m_submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT 'accepted' $$;
GRANT EXECUTE ON FUNCTION m_submit(text, text, bytea, bigint) TO gridha_test_worker;
UPDATE gridha.targets SET submit_function = 'm_submit(text,text,bytea,bigint)'
 WHERE target = 'default';
-- takeovers and stale writes, which this run's two live workers do not
-- make: the target's totals start at 3 and 2, so that the exporter's
-- figures for them are compared with counts other than 0
INSERT INTO gridha.target_totals (target, slot, claims_taken_over, stale_writes_refused)
VALUES ('default', 100000, 3, 2);
-- the load: rounds of one batch for each of 20 services, in service_id
-- order (COLLATE "C"), as docs/concurrency.md asks of a multi-row INSERT:
-- in the order m1, m2, ..., m20 it can deadlock with a worker's batched
-- report, which locks m1, m10, ..., m19, m2, m20, ... (seen once in 20 runs
-- on 17: the load ended and the rate below was 0)
CREATE PROCEDURE m_load(rounds int)
LANGUAGE plpgsql AS $$
BEGIN
    FOR r IN 1..rounds LOOP
        INSERT INTO gridha.batches (service_id, batch_id, payload)
        SELECT 'm' || i, 'm' || i || '-' || r, '\x00'
          FROM generate_series(1, 20) AS i
         ORDER BY ('m' || i) COLLATE "C";
        COMMIT;
        PERFORM pg_sleep(0.02);
    END LOOP;
END
$$;
});
$node->append_conf('postgresql.conf', qq{
gridha.workers = 2
gridha.database = '$db'
gridha.worker_role = 'gridha_test_worker'
gridha.naptime = '100ms'
gridha.monitor_interval = '100ms'
});
$node->restart;

push @procs, IPC::Run::start(
	[ 'psql', '-X', '-q', '-d', $node->connstr($db), '-c', 'CALL m_load(5000)' ],
	'<', \undef, '>', "$work/load.log", '2>&1');

# query($sql): what psql printed, '' after an error
sub query
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql($db, $sql, stdout => \$out, stderr => \$err);
	return $rc == 0 ? $out : '';
}

sub committed
{
	return query(
		"SELECT coalesce(sum(committed_total), 0) FROM gridha.service_claims WHERE target = 'default'");
}

ok(wait_until(30, sub { my $c = committed(); $c =~ /^\d+$/ && $c > 100 }),
	'metrics: the workers commit the load (' . committed() . ' committed)');

# The exporter, through the cluster's socket as the bootstrap superuser
my $user = $node->safe_psql('postgres', 'SELECT current_user');
my $exp_port = PostgreSQL::Test::Cluster::get_free_port();
{
	local $ENV{DATA_SOURCE_NAME} =
	  'host=' . $node->host . ' port=' . $node->port . " user=$user dbname=$db sslmode=disable";
	push @procs, IPC::Run::start(
		[
			$exporter, "--web.listen-address=127.0.0.1:$exp_port",
			'--extend.query-path=' . gridha_repo() . '/monitoring/gridha-queries.yaml',
			'--disable-settings-metrics'
		],
		'<', \undef, '>', "$work/exporter.log", '2>&1');
}

my $metrics = '';
sub scrape
{
	my $r = $http->get("http://127.0.0.1:$exp_port/metrics");
	$metrics = $r->{success} ? $r->{content} : '';
	return $metrics =~ /^gridha_target_committed_total/m;
}
ok(wait_until(30, \&scrape), 'exporter: /metrics has gridha_target_committed_total');
diag(slurp_file("$work/exporter.log")) unless scrape();

# value($name, $labels): the value of the first series of $name whose line
# holds $labels, from the last scrape ('' when none)
sub value
{
	my ($name, $labels) = @_;
	foreach my $line (split /\n/, $metrics)
	{
		my @f = split ' ', $line;
		next unless @f;
		next unless $f[0] =~ /^\Q$name\E[{ ]/ || $f[0] eq $name;
		return $f[-1] if index($line, $labels) >= 0;
	}
	return '';
}

sub num
{
	return defined $_[0] && $_[0] =~ /^-?[0-9.]+(?:e[-+]?\d+)?$/i;
}

# the two totals of gridha.metrics for the target: claims taken over, stale
# writes refused
sub target_totals
{
	return split /\|/, query(
		"SELECT claims_taken_over_total, stale_writes_refused_total FROM gridha.metrics WHERE scope = 'target' AND target = 'default'"
	);
}

my $before = committed();
my @totals_before = target_totals();
scrape();
my $after = committed();
my @totals_after = target_totals();
my $got = value('gridha_target_committed_total', 'target="default"');
ok( num($got) && $got >= $before && $got <= $after,
	"exporter: gridha_target_committed_total{target=\"default\"} ($got) lies between the database's counts before ($before) and after ($after) the scrape"
);

$got = value('gridha_target_enqueued_total', 'target="default"');
my $want = query("SELECT sum(tail_seq) FROM gridha.service_claims WHERE target = 'default'");
ok(num($got) && num($want) && $got <= $want && $got > 0,
	"exporter: gridha_target_enqueued_total ($got) is at most what was enqueued by now ($want), and not 0");

my $taken = value('gridha_target_claims_taken_over_total', 'target="default"');
my $stale = value('gridha_target_stale_writes_refused_total', 'target="default"');
ok( num($taken) && num($stale) && @totals_before == 2 && @totals_after == 2
	  && $taken >= 3 && $stale >= 2
	  && $taken >= $totals_before[0] && $taken <= $totals_after[0]
	  && $stale >= $totals_before[1] && $stale <= $totals_after[1],
	"exporter: gridha_target_claims_taken_over_total ($taken) and gridha_target_stale_writes_refused_total ($stale) are at least the 3 and 2 the test put in, and lie between the database's before (@totals_before) and after (@totals_after) the scrape"
);

my $backlog = value('gridha_target_backlog', 'target="default"');
ok( $backlog ne ''
	  && $metrics =~ /^gridha_target_oldest_ready_age_seconds\{/m
	  && $metrics =~ /^gridha_target_in_flight\{/m,
	"exporter: the target's gauges backlog ($backlog), oldest_ready_age_seconds and in_flight are there");

my @workers = split /\n/,
  query("SELECT instance_id FROM gridha.instances WHERE kind = 'worker' AND soft_expiry > now()");
my $ok_inst = 0;
foreach my $w (@workers)
{
	my $held = value('gridha_instance_claims_held', "instance_id=\"$w\"");
	my $lease = value('gridha_instance_lease_remaining_seconds', "instance_id=\"$w\"");
	$ok_inst++ if $held ne '' && num($lease) && $lease > 0;
}
my $n_inst = scalar(@workers);
ok($n_inst == 2 && $ok_inst == 2,
	"exporter: both workers' instances have gridha_instance_claims_held and a lease_remaining_seconds above 0 ($ok_inst of $n_inst)"
);

# Prometheus
my $prom_port = PostgreSQL::Test::Cluster::get_free_port();
append_to_file("$work/prometheus.yml", <<"EOF");
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: gridha
    static_configs:
      - targets: ['127.0.0.1:$exp_port']
EOF
push @procs, IPC::Run::start(
	[
		$prometheus, "--config.file=$work/prometheus.yml", "--storage.tsdb.path=$work/tsdb",
		'--storage.tsdb.retention.time=1h', "--web.listen-address=127.0.0.1:$prom_port"
	],
	'<', \undef, '>', "$work/prometheus.log", '2>&1');

# prom_query($expr): the first sample's value of an instant query, or ''
sub prom_query
{
	my ($expr) = @_;
	my $r = $http->get("http://127.0.0.1:$prom_port/api/v1/query?"
		  . $http->www_form_urlencode({ query => $expr }));
	return '' unless $r->{success};
	my $j = eval { decode_json($r->{content}) } or return '';
	my $res = ($j->{status} // '') eq 'success' ? $j->{data}{result} // [] : [];
	return @$res ? $res->[0]{value}[1] : '';
}
sub up
{
	return prom_query('up{job="gridha"}') eq '1';
}
ok(wait_until(30, \&up), 'prometheus: scrapes the exporter (up{job="gridha"} = 1)');
unless (up())
{
	my @l = split /\n/, slurp_file("$work/prometheus.log");
	diag(join("\n", @l[ ($#l > 19 ? $#l - 19 : 0) .. $#l ]));
}

# the rate over 10 s of samples, against the database's own count
my $rate_expr = 'rate(gridha_target_committed_total{target="default"}[10s])';
my $c0 = committed();
my $t0 = time();
sleep 12;
wait_until(20, sub { prom_query($rate_expr) ne '' });
my $rate = prom_query($rate_expr);
my $c1 = committed();
my $t1 = time();
my $db_rate = (num($c0) && num($c1)) ? sprintf('%.1f', ($c1 - $c0) / ($t1 - $t0)) : 0;
ok( num($rate) && $rate > 0 && $rate <= 3 * $db_rate && $rate >= $db_rate / 3,
	"prometheus: the query API's committed rate ($rate batches/s) is above 0 and within 3x of the database's ($db_rate batches/s)"
) or diag(slurp_file("$work/load.log"));    # the load's own error, if it ended

note('metrics: ' . committed() . " committed; exporter on $exp_port, prometheus on $prom_port");
$node->stop;
