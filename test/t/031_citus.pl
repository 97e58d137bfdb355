# test/t/031_citus.pl: beside Citus, gridha is never silently wrong: once
# its tables are Citus tables every call refuses (RG030) instead of reading
# and writing the coordinator's empty shells, and a session calling many
# gridha functions beside Citus keeps its relcache callback slots (issue 43,
# item 1; docs/citus.md).
#
# Citus exists for PostgreSQL 15 only. The test uses the PostgreSQL 15 that
# GRIDHA_CITUS_PG_CONFIG names (default: the system's,
# /usr/lib/postgresql/15/bin/pg_config); it only reads that tree. Citus is
# installed into it beforehand, as root (test/install/citus.sh,
# install_citus); without Citus there every test is reported skipped, with
# the reason. That, the build and the cluster below are
# test/t/lib/GridhaCitus.pm's, shared with test/t/032_citus_mode.pl.
#
# Steps, in the order they run:
#
#   build     when the run's programs (first in PATH) are that tree's and
#             gridha is installed there, the run's own build; otherwise a
#             copy of the tree in the test's directory (no write into the
#             tree itself), gridha built from this source tree (a copy: the
#             run's own objects stay its major's) and installed into it
#   cluster   a coordinator and two workers, PostgreSQL 15 with
#             shared_preload_libraries = 'citus,gridha' (Citus first), the
#             workers added; CREATE EXTENSION gridha on the coordinator
#   plain     one session, gridha's tables still local: enqueue (s1: b1,
#             b2; s2: c1), acquire, renew, next_batches (b1 and c1 at
#             epoch 1), c1 reported accepted then committed, claimed and
#             pending batches, verify, an ID sequence and an id; the session
#             lives on (gridha takes one relcache callback slot beside
#             Citus's five: "out of relcache_callback_list slots" in no log)
#   citus     a new session calls gridha (its verdict on the tables is
#             kept), then distributes gridha.batches by service_id
#             (citus.enable_unsafe_triggers: its triggers) and makes
#             gridha.instances a reference table, as issue 43 did: its
#             next_batch is refused with RG030 (the kept verdict was
#             invalidated); then, each in a session of its own,
#             report_submission and report_status of b1 (epoch 1; 1.2
#             answered them from the empty shells), enqueue, acquire_claims,
#             register_instance, and a role that does not own the instance
#             (1.2's ownership check read the empty shell of
#             gridha.instances and let it pass) are refused with RG030, and
#             the rows SQL sees did not change (b1 still submitting)
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster): the
# nodes, their ports and logs are the framework's. Run by `make test`
# (test/run.sh, part 031_citus) and by `make prove_installcheck`, as any
# user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaCitus;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $NTESTS = 10;
my $A = 'aaaaaaaa-0000-0000-0000-000000000031';

plan tests => $NTESTS;

# ---------------------------------------------------------------------------
# Citus: there, or every test skipped; build; cluster: a coordinator (n0)
# and two workers (n1, n2) (test/t/lib/GridhaCitus.pm)

my ($CFG, $CBIN, $CLIB) = citus_tree();
my $install_path = citus_build($CFG, $CBIN, $CLIB);
my @nodes = citus_cluster($install_path, 'test/t/031_citus.pl', 'c31',
	"CREATE ROLE c31_other LOGIN IN ROLE gridha_submitter;\n");

# run($node, SQL, [DB, [extra psql params]]): what psql prints, its errors
# after it (no stop at an error, as a session would go on)
sub run
{
	my ($node, $sql, $db, @extra) = @_;
	return citus_psql($node, $db // 'c31', $sql, @extra);
}

# ---------------------------------------------------------------------------
# plain: one session calls many gridha functions; citus: a new session keeps
# gridha's verdict on its tables, then distributes them and calls again; each
# other refusal in a session of its own

my $session = run($nodes[0], <<"EOF");
SET client_min_messages = warning;
CREATE FUNCTION public.c31_error_of(q text) RETURNS text
LANGUAGE plpgsql AS \$\$
DECLARE
    st text; msg text;
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
    RETURN st || '|' || msg;
END
\$\$;
SET gridha.balance_claims = off;
SELECT 'enqueue:' || gridha.enqueue('s1', 'b1', '\\x01') || ',' || gridha.enqueue('s1', 'b2', '\\x02')
       || ',' || gridha.enqueue('s2', 'c1', '\\x03');
SELECT 'acquire:' || count(*) FROM gridha.acquire_claims('$A');
SELECT 'renew:' || gridha.renew_claims('$A');
SELECT 'handed:' || string_agg(service_id || '/' || batch_id || '/' || epoch, ',' ORDER BY service_id)
  FROM gridha.next_batches('$A', 10);
SELECT 'reported:' || gridha.report_submission('$A', 's2', 'c1', 1, 'accepted')
       || ',' || gridha.report_status('$A', 's2', 'c1', 1, 'committed');
SELECT 'claimed:' || count(*) FROM gridha.claimed_batches('$A');
SELECT 'pending:' || count(*) FROM gridha.pending_batches('$A');
SELECT 'verify:' || gridha.verify_batch('$A', 's1', 'b1', 1);
SELECT gridha.create_id_sequence('c31');
SELECT 'ids:' || (gridha.next_id('c31') IS NOT NULL);
SELECT 'plain done';
EOF
$session .= "\n" . run($nodes[0], <<"EOF");
SET client_min_messages = warning;
SELECT 'claimed before:' || count(*) FROM gridha.claimed_batches('$A');
SET citus.enable_unsafe_triggers = on;
SELECT create_distributed_table('gridha.batches', 'service_id');
SELECT create_reference_table('gridha.instances');
SELECT 'distributed:' || string_agg(logicalrelid::text || '/' || partmethod::text, ',' ORDER BY logicalrelid::text)
  FROM pg_dist_partition;
SELECT 'refused next_batch:' || public.c31_error_of('SELECT * FROM gridha.next_batch(''$A'')');
EOF

# refusal(LABEL, SQL): SQL in a new session; adds LABEL:sqlstate|message
sub refusal
{
	my ($label, $sql) = @_;
	$session .= "\n" . run($nodes[0], <<"EOF");
SET client_min_messages = warning;
SELECT '$label:' || public.c31_error_of(\$q\$$sql\$q\$);
EOF
}
refusal('refused report_submission', "SELECT gridha.report_submission('$A', 's1', 'b1', 1, 'accepted')");
refusal('refused report_status', "SELECT gridha.report_status('$A', 's1', 'b1', 1, 'committed')");
refusal('refused enqueue', "SELECT gridha.enqueue('s1', 'b3', '\\x03')");
refusal('refused acquire_claims', "SELECT * FROM gridha.acquire_claims('$A')");
refusal('refused register_instance', "SELECT gridha.register_instance('c31b')");
$session .= "\n" . run($nodes[0], q{
SELECT 'state:' || string_agg(service_id || '/' || batch_id || '/' || status, ',' ORDER BY service_id, batch_id)
  FROM gridha.batches;
});
diag("session:\n$session");

# line(LABEL): what the session printed after LABEL: (its first such line)
sub line
{
	my ($label) = @_;
	return $session =~ /^\Q$label\E:(.*)$/m ? $1 : '';
}
my $plain_done = $session =~ /^plain done$/m;

ok( line('enqueue') eq '1,2,1'
	  && line('acquire') eq '2'
	  && line('handed') eq 's1/b1/1,s2/c1/1'
	  && line('reported') eq 'pending,committed'
	  && line('verify') eq 'true'
	  && line('ids') eq 'true'
	  && $plain_done,
	'plain: beside Citus, with its tables local, one session enqueues, hands out, reports, verifies and reserves ids');

my $logs = join('', map { slurp($_->logfile) } @nodes);
ok( $plain_done
	  && "$logs$session" !~ /out of relcache_callback_list slots/,
	"plain: the session calling those gridha functions beside Citus lived to its end (no 'out of relcache_callback_list slots')"
);
diag(join("\n", grep { /relcache_callback/ } split /\n/, $logs)) if $logs =~ /relcache_callback/;

my $RG030_BATCHES =
  'RG030|gridha.batches is a Citus table (distributed, reference or Citus local), which gridha does not support';
ok( line('distributed') eq 'gridha.batches/h,gridha.instances/n'
	  && line('refused next_batch') eq $RG030_BATCHES,
	'citus: gridha.batches distributed, gridha.instances a reference table: next_batch in the session that called gridha before is refused (RG030)'
);
ok(line('refused report_submission') eq $RG030_BATCHES,
	"citus: report_submission of the batch in flight is refused (RG030), not answered 'pending'");
ok(line('refused report_status') eq $RG030_BATCHES,
	"citus: report_status of the batch in flight is refused (RG030), not answered 'committed'");
ok( line('refused enqueue') eq $RG030_BATCHES
	  && line('refused acquire_claims') eq $RG030_BATCHES
	  && line('refused register_instance') eq $RG030_BATCHES,
	'citus: enqueue, acquire_claims and register_instance are refused (RG030)');

# the ownership check: a new session, of a role that does not own A
my $other = run($nodes[0], "SELECT gridha.renew_claims('$A')", 'c31',
	'-U', 'c31_other', '-v', 'VERBOSITY=verbose');
diag($other);
ok($other =~ /ERROR:  RG030: gridha.batches is a Citus table/,
	'citus: a role that does not own the instance is refused (RG030) in a new session');

ok(line('state') eq 's1/b1/submitting,s1/b2/queued,s2/c1/committed',
	'citus: the refusals changed nothing: SQL still sees b1 submitting, b2 queued, c1 committed');

$_->stop foreach @nodes;
