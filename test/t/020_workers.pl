# test/t/020_workers.pl: gridha's background-worker instances
# (src/worker.c, src/submit.c, src/targets.c) against the test ledger
# (test/dlt/ledger.py).
#
# The cluster is restarted with two static workers serving this test's
# database (gridha.workers = 2, gridha.database), short claim timings and a
# 1 s gridha.submit_timeout. Steps, in the order they run:
#
#   static      two workers: distinct instance ids, pids in pg_stat_activity
#               as 'gridha worker', instances of kind 'worker'
#   targets     RG007 for a malformed submit_url, a status_url without
#               {batch_ids}, submit_url together with submit_function, a
#               submit_function of the wrong signature; the row unchanged
#   http        20 services x 25 batches over HTTP, both status dialects:
#               all committed, enqueue order at the ledger, no duplicate
#   dynamic     start_worker / stop_worker, the worker slots running out
#               (53400 with a hint)
#   faults      503s, then stalls longer than gridha.submit_timeout: all
#               committed, delayed batches were attempted again
#   waits       pg_stat_activity.wait_event of a napping worker, of one
#               whose POSTs the ledger holds and of one whose status poll
#               it holds: GridhaNap, GridhaLedgerAnswer, GridhaStatusPoll on
#               PostgreSQL 17, 'Extension' on 15 and 16
#   invalid     a batch the ledger marks invalid, a batch it rejects (400):
#               each ends invalid, the next batch of its service commits
#   functions   targets with submit_function (fire and forget, and with a
#               status_function); a submit_function that raises is retried
#               and blocks nobody else
#   orphan      a report that fails with an error: the worker finds the
#               batch it no longer has in hand and submits it again
#   unknown     heads left pending by an instance that never POSTed them:
#               the workers hear UNKNOWN and POST each again, never asking
#               about a batch again before the answer is applied (its
#               hand-out never moves from submitting to unknown)
#   client      client/gridha-client and the workers share services
#   wake-up     with gridha.naptime and gridha.monitor_interval at 60 s, an
#               enqueue is still handed out at once (the latch)
#   crash       kill -9 of a worker: the postmaster restarts every backend,
#               the static workers come back as new instances
#   sigterm     pg_terminate_backend of a worker while batches flow: it
#               exits, releases its claims, and is started again as a new
#               instance (only gridha.stop_worker stops a worker for good);
#               the workers finish everything
#
# Words: "victim" is the worker a step signals; every wait is a bounded
# poll, never a sleep standing in for an assertion. Services are named per
# step (e01.., f1.., v1, r1, fa1.., sh.., w1, t01..), so each step checks
# only its own. The ledger's log is read by test/workers/ledger_query.py
# (posts of a result, status queries of a dialect) and
# test/dlt/check_log.py (enqueue order, one in flight).
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded (restart_after_crash on, for the crash
# step), restarted once with the two workers, which run as a role that is a
# member of gridha_submitter and nothing more; the test ledger commits
# 0.1 s after accepting, marks batches 'bad-*' invalid and rejects 'rej-*'.
# Run by `make test` (test/run.sh, part 020_workers) and by
# `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use IPC::Run;
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More tests => 63;
use Time::HiRes qw(sleep);

my $db = 'gridha_worker_test';
my $repo = gridha_repo();
my $client = "$repo/client/gridha-client";
my $work = PostgreSQL::Test::Utils::tempdir;
my $client_pid;

# The worker settings of this test (see the header).
my $worker_conf = worker_conf($db, 2) . q{
gridha.naptime = '200ms'
gridha.monitor_interval = '100ms'
gridha.submit_timeout = '1s'
gridha.soft_expiry = '6s'
gridha.hard_expiry = '20s'
gridha.renew_interval = '1s'
};

die "client/gridha-client is not built (run make)\n" unless -x $client;

my $node = gridha_node('workers', q{
log_statement = none
restart_after_crash = on
});
my $logfile = $node->logfile;

# ---------------------------------------------------------------------------
# helpers

# query($sql): what psql printed in $db, '' after an error
sub query
{
	return psql_value($node, $db, $_[0]);
}

# sql_is($expected, $sql): the query's output is exactly $expected
sub sql_is
{
	my ($expected, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql($db, $sql, stdout => \$out, stderr => \$err);
	return $rc == 0 && $out eq $expected;
}

# log_has($mark, $regex): a line the server logged after $mark matches
sub log_has
{
	my ($mark, $re) = @_;
	return log_since($logfile, $mark) =~ /$re/m ? 1 : 0;
}

# log_count($mark, $text): how many lines logged after $mark hold $text
sub log_count
{
	my ($mark, $text) = @_;
	return scalar(grep { index($_, $text) >= 0 } split /\n/, log_since($logfile, $mark));
}

my $ledger = start_ledger($work, '--commit-delay', '0.1', '--max-lifetime', '600',
	'--invalid-pattern', '^bad-', '--reject-pattern', '^rej-');
my $led = $ledger->{url};

# posts($result, [$services]): batch ids of the ledger's post lines with
# $result (of the services matching the regex $services)
sub posts
{
	return ledger_query($ledger, 'posts', @_);
}

# uniq_sorted(@list): the distinct entries, sorted
sub uniq_sorted
{
	my %seen;
	return sort grep { !$seen{$_}++ } @_;
}

# order_kept($name, $where): test/dlt/check_log.py against the enqueue order
# of the services matching $where (an SQL condition on gridha.batches):
# every batch arrived, in order, one in flight per service. $name names
# the files.
sub order_kept
{
	my ($name, $where) = @_;
	my $exp = "$work/expected-$name.tsv";
	my ($rows, $err) = ('', '');
	$node->psql($db, "SELECT service_id, batch_id FROM gridha.batches WHERE $where ORDER BY service_id, seq",
		stdout => \$rows, stderr => \$err, extra_params => [ '-F', "\t" ]) == 0
	  or return 0;
	return 0 if $rows eq '';
	unlink $exp;
	append_to_file($exp, "$rows\n");
	my ($ok, $out) = ledger_in_order($ledger, $exp);
	diag($out =~ /(^violations.*)/ms ? join("\n", (split /\n/, $1)[ 0 .. 10 ]) : $out) unless $ok;
	return $ok;
}

# duplicates_of($regex): the services' duplicate POSTs, "batch count"
# lines, sorted by batch
sub duplicates_of
{
	my %n;
	$n{$_}++ foreach posts('duplicate', $_[0]);
	return map { "$_ $n{$_}" } sort keys %n;
}

END
{
	if ($client_pid)
	{
		kill 'TERM', $client_pid;
		waitpid($client_pid, 0);
	}
}

# ---------------------------------------------------------------------------
# the database, the restart with workers

worker_database($node, $db, qq{
UPDATE gridha.targets
   SET submit_url = '$led/batches/{service_id}/{batch_id}',
       status_url = '$led/batch_statuses?id={batch_ids}'
 WHERE target = 'default';
INSERT INTO gridha.targets (target, submit_url, status_url) VALUES
    ('splinter', '$led/batches/{service_id}/{batch_id}',
     '$led/splinter/batch_statuses?ids={batch_ids}'),
    ('ff', '$led/batches/{service_id}/{batch_id}', NULL),
    ('t7', '$led/batches/{service_id}/{batch_id}',
     '$led/batch_statuses?id={batch_ids}');
});
$node->safe_psql($db, q{
-- An in-database ledger: what the submit functions applied, in order.
CREATE TABLE w_applied (
    bid  text PRIMARY KEY,
    sid  text NOT NULL,
    ep   bigint NOT NULL,
    n    integer NOT NULL DEFAULT 1,
    pos  bigserial
);

-- Target functions are called with search_path pg_catalog, pg_temp: these
-- find public's tables and functions through a path of their own.
CREATE FUNCTION w_submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO w_applied (bid, sid, ep) VALUES ($2, $1, $4)
        ON CONFLICT (bid) DO UPDATE SET n = w_applied.n + 1;
    RETURN 'accepted';
END
$$;

CREATE FUNCTION w_status(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql SET search_path = public, pg_temp AS $$
    SELECT a.bid, 'COMMITTED' FROM w_applied a WHERE a.bid = ANY ($1)
$$;

-- Services listed here make w_flaky raise.
CREATE TABLE w_fail (sid text PRIMARY KEY);

CREATE FUNCTION w_flaky(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM w_fail f WHERE f.sid = $1) THEN
        RAISE EXCEPTION 'the in-database ledger is down for %', $1;
    END IF;
    RETURN w_submit($1, $2, $3, $4);
END
$$;

-- The workers call w_submit, w_status and w_flaky as the worker role
-- (gridha.worker_role, a member of gridha_submitter only): the
-- functions' own tables are the user's to grant.
GRANT SELECT, INSERT, UPDATE ON w_applied TO gridha_test_worker;
GRANT USAGE ON SEQUENCE w_applied_pos_seq TO gridha_test_worker;
GRANT SELECT ON w_fail TO gridha_test_worker;

CREATE FUNCTION w_wrong(batch_id text) RETURNS text LANGUAGE sql AS 'SELECT $1';

INSERT INTO gridha.targets (target, submit_function) VALUES
    ('fn', 'w_submit(text,text,bytea,bigint)'),
    ('fnflaky', 'w_flaky(text,text,bytea,bigint)');
INSERT INTO gridha.targets (target, submit_function, status_function) VALUES
    ('fn2', 'w_submit(text,text,bytea,bigint)', 'w_status(text[])');

-- w_sqlstate(cmd): runs cmd; 'ok' or the SQLSTATE it raised.
CREATE FUNCTION w_sqlstate(cmd text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE cmd;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END
$$;

CREATE TABLE w_dyn (id uuid);
CREATE TABLE w_dyn_error (state text, message text, hint text);
});

$node->append_conf('postgresql.conf', $worker_conf);
$node->restart;

# ---------------------------------------------------------------------------
# static workers

ok( wait_for_workers($node, $db, 2, 30),
	'static: gridha.workers shows 2 registered workers');
note(query('SELECT instance_id, label, pid, state FROM gridha.workers'));

ok(sql_is(2, 'SELECT count(DISTINCT instance_id) FROM gridha.workers'),
	'static: the 2 workers have distinct instance ids');

ok( sql_is(2, q{SELECT count(*) FROM gridha.workers w
                 JOIN pg_stat_activity a ON a.pid = w.pid AND a.backend_type = 'gridha worker'}),
	"static: their pids are in pg_stat_activity with backend_type 'gridha worker'");

ok( sql_is(2, q{SELECT count(*) FROM gridha.workers w
                 JOIN gridha.instances i USING (instance_id) WHERE i.kind = 'worker'}),
	"static: each is a gridha.instances row of kind 'worker'");

my $n_logged = 0;
foreach my $id (split /\n/, query('SELECT instance_id FROM gridha.workers'))
{
	$n_logged++ if log_has(0, qr/gridha worker "worker [12]" started as instance \Q$id\E/);
}
is($n_logged, 2, "static: the server log names each worker's instance at its start ($n_logged of 2)");

# ---------------------------------------------------------------------------
# target checks (RG007)

sub t7_row
{
	return query(q{SELECT t::text FROM gridha.targets t WHERE target = 't7'});
}

# refused($what, $sql): $sql is refused with RG007 and the t7 row is unchanged
sub refused
{
	my ($what, $sql) = @_;
	my $before = t7_row();
	my $state = query("SELECT w_sqlstate(\$cmd\$$sql\$cmd\$)");
	my $after = t7_row();
	ok($state eq 'RG007' && $before ne '' && $before eq $after,
		"targets: $what is refused with RG007, the row unchanged (got $state)");
	return;
}

refused('a malformed submit_url',
	q{UPDATE gridha.targets SET submit_url = 'htp:/127.0.0.1/batches' WHERE target = 't7'});
refused('a status_url without {batch_ids}',
	"UPDATE gridha.targets SET status_url = '$led/batch_statuses?id=all' WHERE target = 't7'");
refused('both submit_url and submit_function',
	q{UPDATE gridha.targets SET submit_function = 'w_submit(text,text,bytea,bigint)' WHERE target = 't7'});
refused('a submit_function with the wrong signature',
	q{UPDATE gridha.targets SET submit_url = NULL, submit_function = 'w_wrong(text)' WHERE target = 't7'});

my $state = query(q{SELECT w_sqlstate($$UPDATE gridha.targets SET submit_url = NULL,
                    submit_function = 'w_submit(text,text,bytea,bigint)' WHERE target = 't7'$$)});
ok( $state eq 'ok'
	  && query(q{SELECT submit_function FROM gridha.targets WHERE target = 't7'}) eq
	  'public.w_submit(text,text,bytea,bigint)',
	'targets: a valid change of the same row (submit_url -> submit_function) is accepted, the function stored as its schema-qualified signature'
);

# ---------------------------------------------------------------------------
# end to end over HTTP: 20 services x 25 batches, both dialects

$node->safe_psql($db, q{
DO $$
BEGIN
    FOR b IN 1..25 LOOP
        FOR s IN 1..20 LOOP
            PERFORM gridha.enqueue(format('e%s', lpad(s::text, 2, '0')),
                                   format('e%s-b%s', lpad(s::text, 2, '0'), lpad(b::text, 2, '0')),
                                   decode(lpad(to_hex(b), 2, '0'), 'hex'),
                                   CASE WHEN s > 10 THEN 'splinter' END);
        END LOOP;
    END LOOP;
END
$$;
});

ok( wait_until(
		120, sub { sql_is(500, q{SELECT count(*) FROM gridha.batches WHERE service_id ~ '^e' AND status = 'committed'}) }),
	'http: all 500 batches of 20 services reach committed');
note(query(q{SELECT status, count(*) FROM gridha.batches WHERE service_id ~ '^e' GROUP BY 1}));

my ($q_saw) = ledger_query($ledger, 'queries', 'sawtooth');
my ($q_spl) = ledger_query($ledger, 'queries', 'splinter');
ok($q_saw > 0 && $q_spl > 0,
	"http: the workers polled both status dialects (Sawtooth and Splinter) ($q_saw and $q_spl queries)");

ok(order_kept('e2e', q{service_id ~ '^e'}),
	"http: each service's batches arrived at the ledger in enqueue order, one in flight");

my $dups = ledger_stat($ledger, 'duplicates');
my $accepted = ledger_stat($ledger, 'accepted');
ok($dups == 0 && $accepted == 500,
	"http: no batch applied twice (ledger: $accepted accepted, $dups duplicates)");

ok(sql_is(2, q{SELECT count(DISTINCT instance_id) FROM gridha.batches WHERE service_id ~ '^e'}),
	'http: both workers handed batches out');

# ---------------------------------------------------------------------------
# dynamic workers

my ($dyn, $dyn_err) = ('', '');
$node->psql($db, q{SELECT gridha.start_worker('dyn')}, stdout => \$dyn, stderr => \$dyn_err);
ok($dyn =~ /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
	"dynamic: start_worker('dyn') returns a uuid ($dyn$dyn_err)");

ok(wait_until(15, sub { sql_is('dyn', "SELECT label FROM gridha.workers WHERE instance_id = '$dyn'") }),
	'dynamic: it appears in gridha.workers with label dyn');

# With balance on, three live instances share the work: the idle claims
# stay with the two workers that hold them, and the new worker takes its
# share of the services that get work (6 new ones, free, 20 batches each).
wait_until(20, sub { sql_is('t', "SELECT soft_expiry > now() FROM gridha.instances WHERE instance_id = '$dyn'") });
query(q{SELECT gridha.enqueue(format('dy%s', s), format('dy%s-b%s', s, lpad(b::text, 2, '0')), '\x5a')
          FROM generate_series(1, 20) b, generate_series(1, 6) s ORDER BY b, s});
wait_until(30, sub { sql_is(120, q{SELECT count(*) FROM gridha.batches WHERE service_id ~ '^dy' AND status = 'committed'}) });
my $shares = query(q{SELECT string_agg(n::text, '+') FROM (SELECT count(*) AS n FROM gridha.batches
                      WHERE service_id ~ '^dy' GROUP BY instance_id ORDER BY 1) x});
ok( sql_is('t', qq{SELECT count(DISTINCT instance_id) FILTER (WHERE instance_id = '$dyn') = 1
                      AND count(DISTINCT instance_id) FILTER (WHERE instance_id <> '$dyn') >= 1
                   FROM gridha.batches WHERE service_id ~ '^dy'}),
	"dynamic: the new worker takes its share of the new work, beside the others ($shares batches of 120 by instance)");

ok(sql_is('t', "SELECT gridha.stop_worker('$dyn')"), 'dynamic: stop_worker of its id returns true');

ok(wait_until(15, sub { sql_is(0, "SELECT count(*) FROM gridha.workers WHERE instance_id = '$dyn'") }),
	'dynamic: the stopped worker disappears from gridha.workers');

ok(sql_is(0, "SELECT count(*) FROM gridha.service_claims WHERE claimant = '$dyn'"),
	'dynamic: its instance holds no claims afterwards');

ok(sql_is('f', 'SELECT gridha.stop_worker(gen_random_uuid())'),
	'dynamic: stop_worker of an unknown uuid returns false');

# Start workers until the background worker slots run out.
$node->safe_psql($db, q{
DO $$
DECLARE
    st text;
    msg text;
    hnt text;
BEGIN
    FOR i IN 1..64 LOOP
        BEGIN
            INSERT INTO w_dyn SELECT gridha.start_worker('fill');
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                                    hnt = PG_EXCEPTION_HINT;
            INSERT INTO w_dyn_error VALUES (st, msg, hnt);
            EXIT;
        END;
    END LOOP;
END
$$;
});
my $n_fill = query('SELECT count(*) FROM w_dyn');
note(query('SELECT * FROM w_dyn_error'));
ok( sql_is('t', q{SELECT state = '53400' AND coalesce(hint, '') <> '' FROM w_dyn_error}),
	"dynamic: start_worker with max_worker_processes exhausted raises 53400 with a hint (after $n_fill started)");

my $n_stopped = query('SELECT count(*) FILTER (WHERE gridha.stop_worker(id)) FROM w_dyn');
ok( wait_until(30, sub { sql_is(2, 'SELECT count(*) FROM gridha.workers') })
	  && $n_stopped eq $n_fill
	  && $n_fill =~ /^[0-9]+$/
	  && $n_fill > 0,
	"dynamic: all $n_fill extra workers stop ($n_stopped stop_worker calls true), the 2 static remain");

# ---------------------------------------------------------------------------
# 503s, then stalls longer than gridha.submit_timeout (1 s)

# 503 for 2 s, then every request is held 2 s until 6 s from now.
ledger_control($ledger, '{"fail_503_for": 2, "stall_for": 6, "stall_seconds": 2}');
$node->safe_psql($db, q{
SELECT gridha.enqueue(format('f%s', s), format('f%s-b%s', s, b), '\x0f',
                      CASE WHEN s > 3 THEN 'splinter' END)
  FROM generate_series(1, 4) b, generate_series(1, 5) s
 ORDER BY b, s;
});
ok( wait_until(90, sub { sql_is(20, q{SELECT count(*) FROM gridha.batches WHERE service_id ~ '^f' AND status = 'committed'}) }),
	'faults: all 20 batches enqueued during 503s and stalls end committed');
note(query(q{SELECT status, count(*), max(attempts) FROM gridha.batches WHERE service_id ~ '^f' GROUP BY 1}));
ledger_control($ledger, '{"clear": true}');

my $n503 = ledger_stat($ledger, '503s');
my $nstall = ledger_stat($ledger, 'stalls');
ok($n503 > 0 && $nstall > 0, "faults: the ledger answered 503s ($n503) and held requests ($nstall stalls)");

my @d503 = uniq_sorted(posts('503', '^f'));
my @dstall = uniq_sorted(posts('stalled', '^f'));
my @delayed = uniq_sorted(@d503, @dstall);
my $ids = @delayed ? join(',', map { "'$_'" } @delayed) : q{''};
ok( @d503 > 0
	  && @dstall > 0
	  && sql_is(scalar(@delayed), "SELECT count(*) FROM gridha.batches WHERE batch_id IN ($ids) AND attempts > 1"),
	'faults: every batch that met a 503 (' . scalar(@d503) . ') or a stall past the timeout ('
	  . scalar(@dstall) . ') has attempts > 1');

ok(order_kept('faults', q{service_id ~ '^f'}), 'faults: enqueue order kept at the ledger');

# ---------------------------------------------------------------------------
# waits: pg_stat_activity names what a worker waits for. On PostgreSQL 17
# each wait has a name of its own (GridhaNap, GridhaLedgerAnswer,
# GridhaStatusPoll); on 15 and 16 every one is 'Extension'.

my $server_major = int(query('SHOW server_version_num') / 10000);

# wait_name($name): what wait_event shows for $name on this server
sub wait_name
{
	return $server_major >= 17 ? $_[0] : 'Extension';
}

# a_worker_waits($event): a worker of this test waits on $event now
sub a_worker_waits
{
	my ($ev) = @_;
	return sql_is('t', qq{SELECT EXISTS (SELECT FROM gridha.workers w
	                                       JOIN pg_stat_activity a ON a.pid = w.pid
	                                      WHERE a.wait_event_type = 'Extension' AND a.wait_event = '$ev')});
}

my $ev = wait_name('GridhaNap');
ok(wait_until(20, sub { a_worker_waits($ev) }),
	"waits: an idle worker's nap shows as wait_event '$ev' (PostgreSQL $server_major)");

# POSTs held 0.8 s (under gridha.submit_timeout) for the next 4 s
$ev = wait_name('GridhaLedgerAnswer');
ledger_control($ledger, '{"stall_for": 4, "stall_seconds": 0.8}');
query(q{SELECT gridha.enqueue(format('wt%s', s), format('wt%s-b%s', s, b), '\x0f')
          FROM generate_series(1, 4) b, generate_series(1, 3) s ORDER BY b, s});
ok(wait_until(20, sub { a_worker_waits($ev) }),
	"waits: a worker with POSTs held by the ledger shows as wait_event '$ev'");
wait_until(60, sub { sql_is(12, q{SELECT count(*) FROM gridha.batches WHERE service_id ~ '^wt' AND status = 'committed'}) });
ledger_control($ledger, '{"clear": true}');

# status GETs held for the next 4 s
$ev = wait_name('GridhaStatusPoll');
ledger_control($ledger, '{"hang_status_for": 4}');
query(q{SELECT gridha.enqueue(format('ws%s', s), format('ws%s-b1', s), '\x0f')
          FROM generate_series(1, 3) s});
ok(wait_until(20, sub { a_worker_waits($ev) }),
	"waits: a worker whose status poll the ledger holds shows as wait_event '$ev'");
wait_until(60, sub { sql_is(3, q{SELECT count(*) FROM gridha.batches WHERE service_id ~ '^ws' AND status = 'committed'}) });
ledger_control($ledger, '{"clear": true}');

# ---------------------------------------------------------------------------
# INVALID and rejected batches end without blocking their service

my $mark_invalid = log_size($logfile);
$node->safe_psql($db, q{
SELECT gridha.enqueue('v1', 'v1-b1', '\x01');
SELECT gridha.enqueue('v1', 'bad-v1-b2', '\x02');
SELECT gridha.enqueue('v1', 'v1-b3', '\x03');
SELECT gridha.enqueue('r1', 'r1-b1', '\x01', 'splinter');
SELECT gridha.enqueue('r1', 'rej-r1-b2', '\x02', 'splinter');
SELECT gridha.enqueue('r1', 'r1-b3', '\x03', 'splinter');
});
my $vr_open = q{SELECT count(*) FROM gridha.batches WHERE service_id IN ('v1', 'r1')
                AND status NOT IN ('committed', 'invalid')};
wait_until(30, sub { sql_is(0, $vr_open) });
note(query(q{SELECT batch_id, status, attempts, detail, instance_id, epoch FROM gridha.batches
              WHERE service_id IN ('v1', 'r1') ORDER BY service_id, seq}));
if (!sql_is(0, $vr_open))
{
	# what held them up: the claims, the workers, the server's words
	diag(query(q{SELECT service_id, claimant, epoch, soft_expiry, hard_expiry, ready_at, has_in_flight, submitting
	              FROM gridha.claims WHERE service_id IN ('v1', 'r1')}));
	diag(query('SELECT * FROM gridha.workers'));
	my @l = grep { !/statement:/ } split /\n/, log_since($logfile, $mark_invalid);
	diag(join("\n", @l > 40 ? @l[ -40 .. -1 ] : @l));
}

ok( sql_is('invalid|committed', q{SELECT string_agg(status::text, '|' ORDER BY seq) FROM gridha.batches
                                   WHERE batch_id IN ('bad-v1-b2', 'v1-b3')}),
	'invalid: the batch the ledger marks INVALID ends invalid, the next of its service committed');

ok( sql_is('invalid|http 400|committed', q{SELECT b.status || '|' || b.detail || '|' || n.status
                                           FROM gridha.batches b, gridha.batches n
                                           WHERE b.batch_id = 'rej-r1-b2' AND n.batch_id = 'r1-b3'}),
	"invalid: the batch the ledger rejects (400) ends invalid with detail 'http 400', its service moves on");

ok(order_kept('invalid', q{service_id IN ('v1', 'r1')}), 'invalid: enqueue order kept at the ledger');

# ---------------------------------------------------------------------------
# in-database targets

my $mark = log_size($logfile);
$node->safe_psql($db, q{
INSERT INTO w_fail VALUES ('fl1');
SELECT gridha.enqueue(format('%s1', t), format('%s1-b%s', t, b), '\x0a',
                      CASE t WHEN 'fa' THEN 'fn' WHEN 'fb' THEN 'fn2' ELSE 'fnflaky' END)
  FROM generate_series(1, 5) b, unnest(ARRAY['fa', 'fb', 'fl', 'fm']) t
 ORDER BY b, t;
});
# fl1 raises until it is taken off w_fail; fm1 is on the same target.
wait_until(
	60,
	sub {
		sql_is(15, q{SELECT count(*) FROM gridha.batches WHERE service_id IN ('fa1', 'fb1', 'fm1')
		              AND status = 'committed'})
		  && sql_is('t', q{SELECT attempts >= 2 FROM gridha.batches WHERE batch_id = 'fl1-b1'});
	});
note(query(q{SELECT service_id, status, count(*), max(attempts) FROM gridha.batches
              WHERE service_id ~ '^f[abml]1' GROUP BY 1, 2 ORDER BY 1}));

ok( sql_is(5, q{SELECT count(*) FROM gridha.batches WHERE service_id = 'fa1' AND status = 'committed'})
	  && sql_is(5, q{SELECT count(*) FROM w_applied WHERE sid = 'fa1' AND n = 1}),
	'functions: a submit_function target (no status source) commits its batches, each applied once');

ok( sql_is(5, q{SELECT count(*) FROM gridha.batches WHERE service_id = 'fb1' AND status = 'committed'})
	  && sql_is(5, q{SELECT count(*) FROM w_applied WHERE sid = 'fb1' AND n = 1}),
	'functions: a submit_function + status_function target commits its batches, each applied once');

ok( sql_is('true|queued', q{SELECT string_agg(CASE WHEN seq = 1 THEN (attempts >= 2 AND status IN ('delayed', 'submitting'))::text
                                                 ELSE status::text END, '|' ORDER BY seq)
                            FROM gridha.batches WHERE service_id = 'fl1' AND seq <= 2})
	  && sql_is(5, q{SELECT count(*) FROM gridha.batches WHERE service_id = 'fm1' AND status = 'committed'}),
	'functions: a raising submit_function is retried (delayed, attempts >= 2) while other services of its target commit');

ok(log_has($mark, qr/gridha worker: submit function failed: the in-database ledger is down for fl1/),
	"functions: the worker logs the submit function's failure");

query('DELETE FROM w_fail');
ok(wait_until(30, sub { sql_is(5, q{SELECT count(*) FROM gridha.batches WHERE service_id = 'fl1' AND status = 'committed'}) }),
	'functions: once the function works again, the retried service commits all its batches');

ok( sql_is('fl1-b1,fl1-b2,fl1-b3,fl1-b4,fl1-b5', q{SELECT string_agg(bid, ',' ORDER BY pos) FROM w_applied WHERE sid = 'fl1'}),
	"functions: the retried service's batches were applied in enqueue order");

# ---------------------------------------------------------------------------
# orphan: a report that fails with an error (not a refusal) leaves its batch
# submitting under the worker's own live claim; the worker must find it and
# report it delayed, or the service would wait for as long as it renews

$mark = log_size($logfile);
$node->safe_psql($db, q{
CREATE SEQUENCE w_report_fail;
-- gridha's functions pin search_path: the trigger brings its own
CREATE FUNCTION w_fail_report() RETURNS trigger LANGUAGE plpgsql SET search_path = public AS $$
BEGIN
    -- a sequence, not a table: the failure rolls everything else back
    IF NEW.batch_id = 'o1-b1' AND NEW.status = 'pending' AND nextval('w_report_fail') = 1 THEN
        RAISE EXCEPTION 'injected failure of the report of %', NEW.batch_id;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER w_fail_report BEFORE UPDATE ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION w_fail_report();
SELECT gridha.enqueue('o1', 'o1-b' || b, '\x0b') FROM generate_series(1, 3) b;
});
my $orphan_line = 'batch "o1-b1" of service "o1" was submitting but not in hand';
ok( wait_until(
		30,
		sub {
			sql_is('committed,committed,committed',
				q{SELECT string_agg(status::text, ',' ORDER BY seq) FROM gridha.batches WHERE service_id = 'o1'});
		}),
	'orphan: after its report failed, o1-b1 is handed out again and o1 commits all 3 batches');
note(query(q{SELECT batch_id, status, attempts FROM gridha.batches WHERE service_id = 'o1' ORDER BY seq}));
ok( log_has($mark, qr/injected failure of the report of o1-b1/)
	  && log_has($mark, qr/\Q$orphan_line\E: reported delayed/),
	'orphan: the worker logged the failed report and that it reported o1-b1 delayed');
# The recovery hands o1-b1 out once more; a POST of that hand-out that
# outlives the 1 s gridha.submit_timeout (a loaded machine) is reported
# delayed and handed out again, as any timed-out POST is. So the exact count
# is of the orphan reports, and attempts is at least 2.
note(join("\n", grep { index($_, '"o1-b1"') >= 0 } split /\n/, slurp_file($ledger->{log})));
ok( sql_is('t', q{SELECT attempts >= 2 FROM gridha.batches WHERE batch_id = 'o1-b1'})
	  && log_count($mark, $orphan_line) == 1
	  && scalar(grep { $_ eq 'o1-b1' } posts('accepted', '^o1$')) == 1,
	'orphan: o1-b1 was reported delayed as an orphan exactly once, handed out again (attempts >= 2) and accepted by the ledger once'
);
query('DROP TRIGGER w_fail_report ON gridha.batches');

# ---------------------------------------------------------------------------
# unknown: heads pending at a ledger that never got them (an external
# instance reported them accepted without POSTing them, then released its
# claims). The workers that take them over ask the ledger, hear UNKNOWN and
# POST each batch again: the answer applied, the batch is not asked about
# again while that answer waits to be applied. A second question, asked
# before the first answer was applied, reaches the ledger before the new
# POST and is answered UNKNOWN as well; applied after the batch was handed
# out anew, it would move that hand-out to unknown and have the batch
# POSTed twice at once. The workers look at their pending batches every
# 10 ms for this step (gridha.monitor_interval), so that an answer often
# comes back in a cycle whose monitor round is due. A trigger records every
# status change of these batches: a worker moves a batch to unknown only
# from pending, never from submitting.

$node->safe_psql($db, q{
CREATE TABLE w_moves (batch_id text, old_status text, new_status text, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION w_record_move() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = public AS $$
BEGIN
    IF NEW.batch_id LIKE 'uk%' AND NEW.status::text IS DISTINCT FROM OLD.status::text THEN
        INSERT INTO public.w_moves (batch_id, old_status, new_status) VALUES (NEW.batch_id, OLD.status, NEW.status);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER w_record_move AFTER UPDATE ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION w_record_move();
});
query(q{ALTER SYSTEM SET gridha.monitor_interval = '10ms'});
query('SELECT pg_reload_conf()');
my ($uk_out, $uk_err) = ('', '');
$node->psql($db, q{
SET gridha.balance_claims = off;
SELECT gridha.register_instance('uk-e') AS e \gset
BEGIN;
SELECT count(gridha.enqueue(s, s || '-b1', '\x0c'))
  FROM (SELECT 'uk' || lpad(i::text, 2, '0') AS s FROM generate_series(1, 10) i) x;
SELECT count(*) FROM gridha.acquire_claims(:'e');
CREATE TEMP TABLE h AS SELECT * FROM gridha.next_batches(:'e', 100);
COMMIT;
SELECT count(gridha.report_submission(:'e', service_id, batch_id, epoch, 'accepted')) FROM h;
SELECT gridha.release_claims(:'e');
SELECT string_agg(batch_id, ',' ORDER BY batch_id) FROM h;
}, stdout => \$uk_out, stderr => \$uk_err);
is((split /\n/, $uk_out)[-1] // '',
	'uk01-b1,uk02-b1,uk03-b1,uk04-b1,uk05-b1,uk06-b1,uk07-b1,uk08-b1,uk09-b1,uk10-b1',
	'unknown: an external instance left the heads of 10 new services pending without POSTing them, and released their claims'
);
note("$uk_out\n$uk_err");
ok( wait_until(
		30, sub { sql_is(10, q{SELECT count(*) FROM gridha.batches WHERE batch_id LIKE 'uk%' AND status = 'committed'}) }),
	'unknown: the workers took the services over and every batch is committed');
query('ALTER SYSTEM RESET gridha.monitor_interval');
query('SELECT pg_reload_conf()');
my @uk_accepted = uniq_sorted(posts('accepted', '^uk[0-9]+$'));
ok( sql_is('10|0', q{SELECT count(*) FILTER (WHERE old_status = 'pending') || '|' || count(*) FILTER (WHERE old_status <> 'pending')
                     FROM w_moves WHERE new_status = 'unknown'})
	  && @uk_accepted == 10,
	'unknown: each batch went to unknown once, from pending, never from submitting (a hand-out the ledger had not answered for), and the ledger accepted all 10'
) or do
{
	diag(query('SELECT batch_id, old_status, new_status, at FROM w_moves ORDER BY at'));
	diag(join("\n", grep { index($_, '"uk') >= 0 && index($_, '"post"') >= 0 } split /\n/, slurp_file($ledger->{log})));
};
query('DROP TRIGGER w_record_move ON gridha.batches');

# ---------------------------------------------------------------------------
# an external client and the workers share services

my $cid = query('SELECT gen_random_uuid()');
$client_pid = fork() // die "fork: $!";
if ($client_pid == 0)
{
	open(STDOUT, '>', "$work/client.out") or POSIX::_exit(127);
	open(STDERR, '>', "$work/client.err") or POSIX::_exit(127);
	exec($client, '--dsn', $node->connstr($db), '--instance-id', $cid, '--label', 'shared-client',
		'--idle-sleep-ms', '100', '--monitor-interval-ms', '200', '--submit-timeout-ms', '10000',
		'--max-runtime-s', '120', '--log', "$work/client.log")
	  or POSIX::_exit(127);
}

# The client joins two workers that hold every idle service: it takes none
# of their idle claims (they stay where they are), but its share of the
# work: 8 new services, free, 10 batches each, shared by the three.
my @shared = map { sprintf('sh%02d', $_) } 1 .. 8;
my $shared_list = join(',', map { "'$_'" } @shared);
my $n_sh = @shared * 10;
if (wait_until(30, sub { sql_is('t', "SELECT soft_expiry > now() FROM gridha.instances WHERE instance_id = '$cid'") }))
{
	$node->safe_psql($db, qq{
SELECT gridha.enqueue(s, format('sh-%s-b%s', s, lpad(b::text, 2, '0')), '\\x5a')
  FROM generate_series(1, 10) b, unnest(ARRAY[$shared_list]) s
 ORDER BY b, s;
});
	ok( wait_until(60, sub { sql_is($n_sh, q{SELECT count(*) FROM gridha.batches WHERE batch_id ~ '^sh-' AND status = 'committed'}) }),
		"client: all $n_sh batches of services shared by the client and the workers are committed");
	note(query(q{SELECT coalesce(i.kind, '?'), count(*) FROM gridha.batches b
	              LEFT JOIN gridha.instances i USING (instance_id)
	              WHERE b.batch_id ~ '^sh-' GROUP BY 1}));

	ok( sql_is('t', qq{SELECT count(*) FILTER (WHERE b.instance_id = '$cid') > 0
	                      AND count(*) FILTER (WHERE i.kind = 'worker') > 0
	                   FROM gridha.batches b JOIN gridha.instances i USING (instance_id)
	                   WHERE b.batch_id ~ '^sh-'})
		  && -f "$work/client.log"
		  && slurp_file("$work/client.log") =~ /"event":"handout"/,
		"client: both the client's instance and a worker instance handed batches out");

	ok(order_kept('shared', "service_id IN ($shared_list)"),
		'client: enqueue order kept at the ledger for the shared services');

	# only this step's batches: a shared service may be one an earlier step
	# used (o1 was sent twice on purpose)
	my @sh_dups = grep { /^sh-/ } duplicates_of('^(' . join('|', @shared) . ')$');
	ok(!@sh_dups, 'client: no batch of the shared services was applied twice');
	# each duplicate's story: the ledger's posts, the client's events
	foreach my $line (@sh_dups)
	{
		my ($bid) = split / /, $line;
		diag(join("\n", grep { index($_, "\"$bid\"") >= 0 } split /\n/, slurp_file($ledger->{log})));
		diag(join("\n", grep { index($_, "\"$bid\"") >= 0 } split /\n/, slurp_file("$work/client.log")));
		diag(query("SELECT batch_id, status, attempts, instance_id, epoch FROM gridha.batches WHERE batch_id = '$bid'"));
	}
}
else
{
	# the four tests of the step, each failed: the client never took a lease
	my $err = -f "$work/client.err" ? slurp_file("$work/client.err") : '';
	fail('client: the client registered and took a lease') foreach 1 .. 4;
	diag(join("\n", grep { defined } (split /\n/, $err)[ -20 .. -1 ])) if $err ne '';
}
kill 'TERM', $client_pid;
my $crc = 124;
if (wait_until(20, sub { waitpid($client_pid, WNOHANG) == $client_pid }))
{
	$crc = $? >> 8;
	$crc = 128 + ($? & 127) if $? & 127;
	$client_pid = undef;
}
is($crc, 0, "client: SIGTERM stops it with exit status 0 (got $crc)");

# ---------------------------------------------------------------------------
# wake-up: an enqueue is handed out at once even with a 60 s naptime

# Worker settings are reloadable: the later lines win.
$node->append_conf('postgresql.conf', q{
gridha.naptime = '60s'
gridha.monitor_interval = '60s'
});
$node->reload;

# workers_asleep: both workers idle and unchanged over 1.5 s. On the old
# settings an idle worker goes round every 200 ms, so a worker that has not
# taken the new ones yet would show a newer state_since.
sub worker_states
{
	return query(q{SELECT string_agg(pid || ' ' || state || ' ' || state_since, ',' ORDER BY pid)
	               FROM gridha.workers});
}

sub workers_asleep
{
	my $a = worker_states();
	sleep(1.5);
	my $b = worker_states();
	my $idle = () = $a =~ / idle /g;
	return $a ne '' && $a eq $b && $idle == 2;
}
if (wait_until(30, \&workers_asleep))
{
	query(q{SELECT gridha.enqueue('w1', 'w1-b1', '\x77', 'ff')});
	my $t0 = time();
	my $woke = wait_until(20, sub { sql_is('committed', q{SELECT status FROM gridha.batches WHERE batch_id = 'w1-b1'}) });
	ok($woke, 'wake-up: with naptime 60 s, an enqueued batch is committed within 20 s (' . (time() - $t0) . ' s)');
}
else
{
	fail('wake-up: the workers settled into their 60 s sleep');
	diag(worker_states());
}
$node->append_conf('postgresql.conf', $worker_conf);
$node->reload;

ok( sql_is('w1-b1', q{SELECT batch_id FROM gridha.batches WHERE service_id = 'w1' AND status = 'committed'})
	  && join(',', posts('accepted', '^w1$')) eq 'w1-b1',
	'wake-up: the fire-and-forget target got the POST once and the batch was reported committed');

# ---------------------------------------------------------------------------
# crash: kill -9 of a worker, the postmaster restarts everything

my $old_ids = query(q{SELECT string_agg(quote_literal(instance_id::text), ',') FROM gridha.instances WHERE kind = 'worker'});
my $victim = query('SELECT pid FROM gridha.workers ORDER BY label LIMIT 1');
$mark = log_size($logfile);
kill 'KILL', $victim;
ok( wait_until(
		60,
		sub {
			sql_is('2|2', qq{SELECT count(*) FILTER (WHERE instance_id::text NOT IN ($old_ids)), count(*)
			                  FROM gridha.workers});
		}),
	"crash: after kill -9 of worker pid $victim, gridha.workers shows 2 workers with new instance ids");
note(query('SELECT instance_id, label, pid, state FROM gridha.workers'));

ok(log_has($mark, qr/\(PID \Q$victim\E\) was terminated by signal 9/),
	'crash: the postmaster saw the worker die and restarted the backends');

ok( sql_is(2, qq{SELECT count(*) FROM gridha.workers w JOIN gridha.instances i USING (instance_id)
                  WHERE i.kind = 'worker' AND w.pid <> $victim}),
	"crash: the restarted workers are new gridha.instances rows of kind 'worker'");

# ---------------------------------------------------------------------------
# SIGTERM while batches flow

$node->safe_psql($db, q{
SELECT gridha.enqueue(format('t%s', lpad(s::text, 2, '0')),
                      format('t%s-b%s', lpad(s::text, 2, '0'), lpad(b::text, 2, '0')), '\x74',
                      CASE WHEN s % 2 = 0 THEN 'splinter' END)
  FROM generate_series(1, 20) b, generate_series(1, 8) s
 ORDER BY b, s;
});
# Some work done, much left.
wait_until(30, sub { sql_is('t', q{SELECT count(*) BETWEEN 10 AND 100 FROM gridha.batches
                                   WHERE service_id ~ '^t' AND status = 'committed'}) });
# The victim: a worker holding t claims.
my ($victim_id, $victim_pid, $victim_label) = split /\|/, query(q{
SELECT w.instance_id, w.pid, w.label
  FROM gridha.workers w JOIN gridha.service_claims c ON c.claimant = w.instance_id
 WHERE c.service_id ~ '^t' GROUP BY 1, 2, 3 ORDER BY count(*) DESC LIMIT 1});
$victim_id //= '';
$victim_pid //= 0;
$victim_label //= '';
$mark = log_size($logfile);
# The victim's row is read first (a materialized CTE), then only its pid is
# signalled: a plain WHERE pid = ... AND pg_terminate_backend(pid) may run
# the function on every row of the view. What it has in hand is read in the
# same statement that signals it.
my $in_hand = query(qq{WITH v AS MATERIALIZED (
                           SELECT w.pid, CASE WHEN w.state IN ('submitting', 'reporting') THEN w.batch_id END AS b
                             FROM gridha.workers w WHERE w.pid = $victim_pid)
                       SELECT v.b FROM v WHERE pg_terminate_backend(v.pid)});
note("victim $victim_id (pid $victim_pid, $victim_label), batch in hand: '$in_hand'");

ok($victim_pid > 0
	  && wait_until(20, sub { sql_is(0, "SELECT count(*) FROM gridha.workers WHERE pid = $victim_pid") }),
	'sigterm: the terminated worker exits (gone from gridha.workers)');
my $gone_at = time();

ok(sql_is(0, "SELECT count(*) FROM gridha.service_claims WHERE claimant = '$victim_id'"),
	'sigterm: its instance holds no claims afterwards');

ok( wait_until(
		10,
		sub {
			log_has($mark, qr/gridha worker "\Q$victim_label\E" \(instance \Q$victim_id\E\) stopped and released its claims/);
		}),
	'sigterm: it logged that it stopped and released its claims');

ok( wait_until(90, sub { sql_is(160, q{SELECT count(*) FROM gridha.batches WHERE service_id ~ '^t' AND status = 'committed'}) }),
	'sigterm: the workers commit all 160 batches');
note(query(q{SELECT status, count(*) FROM gridha.batches WHERE service_id ~ '^t' GROUP BY 1}));

ok(order_kept('sigterm', q{service_id ~ '^t'}), 'sigterm: enqueue order kept at the ledger');

my @t_dups = duplicates_of('^t');
note(join("\n", @t_dups)) if @t_dups;
if (!@t_dups)
{
	pass("sigterm: no batch applied twice (the batch in hand, '$in_hand', was finished and reported)");
}
elsif ($in_hand ne '' && "@t_dups" eq "$in_hand 1")
{
	pass("sigterm: only the batch in hand ($in_hand) was sent again, once");
}
else
{
	fail("sigterm: duplicates only of the batch in hand ('$in_hand'), at most once");
}

# Started again: a worker ended by anyone but an administrator's
# stop_worker (or a server shutdown) exits with 1, and the postmaster starts
# it again after 5 s, as a new instance.
ok( wait_until(
		30,
		sub {
			sql_is(2, qq{SELECT count(*) FROM gridha.workers WHERE instance_id IS NOT NULL
			             AND instance_id <> '$victim_id' AND pid <> $victim_pid});
		})
	  && log_has($mark, qr/gridha worker "\Q$victim_label\E" started as instance/),
	'sigterm: the worker is started again as a new instance (' . (time() - $gone_at) . ' s after its exit)');

$node->stop;
