# test/t/040_idseq_soak.pl: ID windows under concurrency.
#
# 8 pgbench clients reserve blocks (gridha.reserve_ids, 1..40 ids) and take
# single ids (gridha.next_id, blocks of 7 cached per backend, some of them
# in transactions that roll back) from one sequence with small windows,
# while two would-be leaders run maintenance (the window agent) every
# 100 ms. Every id and block that committed is logged; then the checks:
# no id appears twice, no block crosses a window's end, every tick of the
# agents ran once; and after one more tick the agent has left
# min_open_windows windows with room for a block, and none without.
#
# Knobs: IDSOAK_SECONDS (10), IDSOAK_CLIENTS (8), IDSOAK_WINDOW (40: a
# window opens every few reservations, the path where PostgreSQL 17 once
# refused next_id).
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded. Run by `make test` (test/run.sh, part
# 040_idseq_soak) and by `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $seconds = $ENV{IDSOAK_SECONDS} // 10;
my $clients = $ENV{IDSOAK_CLIENTS} // 8;
my $window = $ENV{IDSOAK_WINDOW} // 40;
my $db = 'gridha_idseq_soak';

my $node = gridha_node('idseq', qq{
max_connections = 100
});

$node->safe_psql('postgres', "CREATE DATABASE $db");
$node->safe_psql('postgres', qq{
ALTER DATABASE $db SET gridha.id_block_size = 7;
ALTER DATABASE $db SET gridha.maintenance_interval = '100ms';
});
$node->safe_psql($db, qq{
CREATE EXTENSION gridha;
SELECT gridha.create_id_sequence('soak', $window, 4);
-- every id (as [id, id + 1)) and every block that committed
CREATE TABLE got (kind text NOT NULL, lo bigint NOT NULL, hi bigint NOT NULL);
});

my $work = PostgreSQL::Test::Utils::tempdir;
append_to_file("$work/ids.sql", q{\set n random(1, 40)
INSERT INTO got SELECT 'block', lower(r), upper(r) FROM gridha.reserve_ids('soak', :n) AS r;
INSERT INTO got SELECT 'id', i, i + 1 FROM gridha.next_id('soak') AS i;
INSERT INTO got SELECT 'id', i, i + 1 FROM (SELECT gridha.next_id('soak') AS i FROM generate_series(1, 3)) AS x;
BEGIN;
INSERT INTO got SELECT 'id', i, i + 1 FROM (SELECT gridha.next_id('soak') AS i FROM generate_series(1, 10)) AS x;
ROLLBACK;
INSERT INTO got SELECT 'id', i, i + 1 FROM gridha.next_id('soak') AS i;
});
append_to_file("$work/agent.sql", q{SELECT * FROM gridha.run_maintenance(md5('idsoak-agent-' || :client_id::text)::uuid);
\sleep 20 ms
});

note("idseq soak: $clients clients for ${seconds}s, windows of $window");
my $connstr = $node->connstr($db);
my ($agent_out, $ids_out) = ('', '');
my $agent = IPC::Run::start(
	[ 'pgbench', '-n', '-M', 'prepared', '-c', '2', '-j', '1', '-T', $seconds, '-f', "$work/agent.sql", $connstr ],
	'<', \undef, '>', \$agent_out, '2>&1');
my $ids_ok = IPC::Run::run(
	[ 'pgbench', '-n', '-M', 'prepared', '-c', $clients, '-j', '2', '-T', $seconds, '-f', "$work/ids.sql", $connstr ],
	'<', \undef, '>', \$ids_out, '2>&1');
my $agent_ok = $agent->finish;
ok($ids_ok && $agent_ok && "$ids_out$agent_out" !~ /aborted|error/i,
	'pgbench clients and agents ran without errors')
  or diag(join("\n", grep { /error|abort/i } split /\n/, "$ids_out\n$agent_out"));
note($node->safe_psql($db, q{
SELECT count(*) FILTER (WHERE kind = 'id') || ' ids, ' || count(*) FILTER (WHERE kind = 'block') || ' blocks' FROM got}));

# check_sql($what, $sql): ok when the query prints t
sub check_sql
{
	my ($what, $sql) = @_;
	my ($out, $err) = ('', '');
	$node->psql($db, $sql, stdout => \$out, stderr => \$err);
	is($out, 't', $what) or diag($err);
	return;
}

check_sql('ids were served by next_id and blocks by reserve_ids',
	"SELECT count(*) FILTER (WHERE kind = 'id') > 100 AND count(*) FILTER (WHERE kind = 'block') > 100 FROM got");
check_sql('no id appears twice (ids and blocks never overlap)',
	'SELECT count(*) = 0 FROM (SELECT lo, lag(hi) OVER (ORDER BY lo, hi) AS prev_hi FROM got) x WHERE lo < prev_hi');
check_sql('no block crosses the end of its window',
	"SELECT bool_and((lo - 1) / $window = (hi - 2) / $window AND hi > lo) FROM got WHERE kind = 'block'");
check_sql("every id lies below the sequence's high water",
	"SELECT max(hi) - 1 <= (SELECT high_water FROM gridha.id_sequences WHERE name = 'soak') FROM got");
check_sql('the two would-be leaders ran ticks, each once',
	'SELECT count(*) > 1 AND count(DISTINCT tick) = count(*) FROM gridha.maintenance_ticks');

# One more tick, at once: the stored ticks are removed and the lease handed
# over, as if the clock had moved on.
$node->safe_psql($db, q{
SELECT gridha.resign_lead(leader, duty) FROM gridha.leases WHERE leader IS NOT NULL;
DELETE FROM gridha.maintenance_ticks;
});
check_sql('a tick of the window agent runs after the load',
	"SELECT outcome = 'ran' FROM gridha.run_maintenance('00000000-0000-0000-0000-00000000aaaa')");
check_sql('after it, min_open_windows (4) windows have room for a block',
	"SELECT count(*) >= 4 FROM gridha.id_windows WHERE name = 'soak' AND window_end - next_id >= 7");
check_sql('after it, no window without room for a block is left',
	"SELECT count(*) = 0 FROM gridha.id_windows WHERE name = 'soak' AND window_end - next_id < 7");

$node->stop;
done_testing();
