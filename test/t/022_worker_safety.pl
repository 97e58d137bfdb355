# test/t/022_worker_safety.pl: a background worker survives whatever its
# targets, the ledger, other sessions and the operator do to it, and keeps
# its credentials to itself (src/worker.c, src/submit.c, src/targets.c).
#
# Steps, in the order they run:
#
#   switch      a service claimed on a URL target is moved by enqueue to
#               'default', which has neither URL nor function: no crash,
#               its head is delayed with the reason, the next batch waits,
#               one WARNING for five such services; once 'default' gets a
#               URL both batches of each service arrive in order
#   dropped     the submit_function of one target and the status_function
#               of another are dropped (a stored signature records no
#               dependency): after a claim cycle the worker still holds
#               their services, their next heads are delayed with the
#               reason (one WARNING each), the worker is the same process;
#               re-created under the same signatures (the rows untouched:
#               the signature resolves again), every batch is committed in
#               order
#   malformed   target rows written with targets_check disabled (a URL and
#               a function, a malformed URL, headers that are not a JSON
#               object): heads delayed with the reason, no crash
#   pgstat      the worker's writes show in pg_stat_user_tables
#   lock        a session holds a claim row lock (SELECT ... FOR UPDATE,
#               kept open): the worker logs the lock timeout, keeps renewing
#               and serving the other services (no batch POSTed twice), and
#               serves the locked one once the lock is gone
#   statement   with gridha.worker_statement_timeout 2s, a submit function
#               asleep is cancelled (logged), its batch delayed; while the
#               worker is inside it, a DROP FUNCTION of it waits; disarmed,
#               the batches are applied once each, in order
#   codes       the ledger answers 301, 401, 403, 404, 414 for a while: the
#               batches are delayed, then committed, none invalid; 400 and
#               422 still end a batch invalid, and a target's own
#               reject_codes are honoured
#   urls        status GETs: with gridha.status_url_max_length 512 no GET is
#               longer and the fullest holds as many ids as fit; without a
#               limit of its own the worker halves GETs the ledger answers
#               414, and a poll answered 431 is halved down to single ids;
#               every batch committed, none delayed
#   headers     a target's request_headers reach the ledger on every POST
#               and GET; the secret is never in batches.detail, the server
#               log, the client's log, or anything a producer can read
#   client      the reference client (URL targets only) and the worker
#               share URL and function targets with balance on: all
#               committed, the client never holds a function target's
#               service
#   reinstall   DROP EXTENSION / CREATE EXTENSION while the worker runs
#               (first in the transaction that created a service: it
#               commits, and the counts start empty): it
#               waits, then serves again as the same instance (kind worker)
#   sigterm     stop_worker ends a worker waiting for a row lock, and one
#               inside a 600 s target function (that batch reported
#               delayed); a fast shutdown ends a worker in a target function
#               and one waiting for a row lock that only a prepared
#               transaction holds. Each within 30 s (a failure bound, not a
#               measure of speed)
#   role        with gridha.worker_role a plain role: the worker connects
#               as it and owns its instance; target functions redefined to
#               CREATE ROLE or to read pg_authid fail and delay their batch,
#               nothing is created; a public."=" on (text, text), found
#               first by the worker role's search_path, and one on
#               (gridha.batch_status, gridha.batch_status) are never called
#               by the worker
#   headers     (again, over the whole run) every POST and status GET
#               carried the header; the secret is not in the server log
#   dropdb      DROP DATABASE ... WITH (FORCE) while the worker sleeps in a
#               target function: it succeeds, the worker stops
#   syncrep     in a database of its own (gridha_safety_sync), the worker
#               holds a claim when synchronous_commit = on starts waiting
#               for a standby that never connects: a fast shutdown still
#               completes within 30 s, the worker releasing its claims
#
# Words: W1 is the static worker; "history" is w_history, where a trigger
# on gridha.batches records every change of a batch's status or detail, so a
# step can see a batch's past states. Every wait is a bounded poll, never a
# sleep standing in for an assertion. Services are named per step. "The
# worker settings" are one static worker serving this test's database
# (gridha.balance_claims off: it claims every service it can serve), short
# timings and a 1 s gridha.worker_lock_timeout, in gridha_safety.conf of
# the data directory, which the steps rewrite (some reload other settings,
# and put them back).
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded, restarted with the worker settings and
# a worker role that is a member of gridha_submitter only; later with the
# same settings and gridha.worker_role a plain role of its own
# (gridha_safety_worker); at the end with the worker serving
# gridha_safety_sync. The test ledger (test/dlt/ledger.py) commits 0.1 s
# after accepting and requires the target's Authorization header. Run by
# `make test` (test/run.sh, part 022_worker_safety) and by
# `make prove_installcheck` as any user but root.

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
use Test::More tests => 92;
use Time::HiRes qw(time);

my $DB = 'gridha_safety_test';
my $SDB = 'gridha_safety_sync';
my $WROLE = 'gridha_safety_worker';
my $OWNER = 'gridha_safety_owner';
my $PROLE = 'gridha_safety_producer';
my $EVIL = 'gridha_safety_evil';
# the worker role of every step but the role step: a member of
# gridha_submitter only; what the target functions read and write is
# granted to it below, as a user would
my $TROLE = 'gridha_test_worker';
my $REPO = gridha_repo();
my $CLIENT = "$REPO/client/gridha-client";
my $SECRET_VALUE = 's3cret-' . join('', map { sprintf('%02x', int(rand(256))) } 1 .. 8);
my $SECRET = "Bearer $SECRET_VALUE";
my $work = PostgreSQL::Test::Utils::tempdir;
my $http = HTTP::Tiny->new(timeout => 10);

BAIL_OUT('client/gridha-client is built (run make)') unless -x $CLIENT;

# The worker settings (see the header). A cycle of the lock step waits out
# up to two lock timeouts (the reports in one statement, then the locked one
# alone) while POSTs are out: submit_timeout is longer, as the defaults are
# (5 s and 15 s).
my @WORKER_OPTS = (
	"gridha.worker_role=$TROLE", 'gridha.workers=1',
	"gridha.database=$DB", 'gridha.balance_claims=off',
	'gridha.naptime=100ms', 'gridha.monitor_interval=100ms',
	'gridha.renew_interval=1s', 'gridha.soft_expiry=10s',
	'gridha.hard_expiry=30s', 'gridha.submit_timeout=5s',
	'gridha.worker_lock_timeout=1s', 'max_prepared_transactions=4');

# The framework's cluster logs every statement (log_statement = all) and
# cannot wait for a synchronous standby (max_wal_senders = 0); the secret
# must not be in the server log unless the server puts it there, and the
# syncrep step needs commits that wait for one: as a cluster made by
# initdb, with room for a standby.
my $node = gridha_node('safety', q{
log_statement = none
wal_level = replica
max_wal_senders = 4
include_if_exists = 'gridha_safety.conf'
});

# set_conf(@opts): the worker settings, then @opts (name=value; a later one
# wins), as the node's gridha_safety.conf, read at the next reload or start
sub set_conf
{
	my $text = '';
	foreach my $opt (@WORKER_OPTS, @_)
	{
		my ($name, $value) = split /=/, $opt, 2;
		$value =~ s/'/''/g;
		$text .= "$name = '$value'\n";
	}
	open(my $fh, '>', $node->data_dir . '/gridha_safety.conf') or die $!;
	print $fh $text;
	close($fh);
	return;
}

# query($sql, $db): what psql printed (unaligned, tuples only), '' after an
# error
sub query
{
	my ($sql, $db) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql($db // $DB, $sql, stdout => \$out, stderr => \$err);
	return $rc == 0 ? $out : '';
}

# sql_is($expected, $sql): the query's output is exactly $expected
sub sql_is
{
	my ($expected, $sql) = @_;
	my ($out, $err) = ('', '');
	$node->psql($DB, $sql, stdout => \$out, stderr => \$err);
	return $out eq $expected;
}

# sql_ok($sql): the statements ran without an error
sub sql_ok
{
	my ($out, $err) = ('', '');
	return $node->psql($DB, $_[0], stdout => \$out, stderr => \$err) == 0;
}

# run_sql($sql[, $db]): runs statements, dies on an error
sub run_sql
{
	my ($sql, $db) = @_;
	return $node->safe_psql($db // $DB, $sql);
}

# log_mark(): the server log's size now; log_since_mark($mark): what came
# after; log_count($mark, $re): how many of those lines match
sub log_mark
{
	return log_size($node->logfile);
}

sub log_lines
{
	return split /\n/, log_since($node->logfile, $_[0]);
}

sub log_count
{
	my ($mark, $re) = @_;
	return scalar(grep { /$re/ } log_lines($mark));
}

sub log_has
{
	return log_count(@_) > 0;
}

# no_crash($mark): no server process ended by a signal since $mark
sub no_crash
{
	return !crash_lines($node->logfile, $_[0]);
}

# hist_mark(): the newest history row's id
sub hist_mark
{
	return query('SELECT coalesce(max(id), 0) FROM w_history');
}

# worker_pid($id): the pid of the running worker that is instance $id
sub worker_pid
{
	return query("SELECT pid FROM gridha.workers WHERE instance_id = '$_[0]'");
}

# backend_gone($pid): no server process has this pid any more
sub backend_gone
{
	return query("SELECT count(*) FROM pg_stat_activity WHERE pid = $_[0]", 'postgres') eq '0';
}

# hold_open($name, $sql): a session of its own runs BEGIN and $sql and keeps
# the transaction open (application_name w_hold_$name) until
# hold_close($name). True once the transaction is open.
my %holds;

sub hold_open
{
	my ($name, $sql) = @_;
	my $h = { in => "BEGIN; $sql\n", out => '' };
	$h->{run} = IPC::Run::start(
		[
			'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d',
			$node->connstr($DB) . " application_name=w_hold_$name"
		],
		'<', \$h->{in}, '>', \$h->{out}, '2>&1');
	$holds{$name} = $h;
	$h->{run}->pump_nb;
	return wait_until(
		10,
		sub {
			$h->{run}->pump_nb;
			sql_is(1, "SELECT count(*) FROM pg_stat_activity
			           WHERE application_name = 'w_hold_$name' AND state = 'idle in transaction'");
		});
}

sub hold_close
{
	my ($name) = @_;
	my $h = delete $holds{$name} or return;
	$h->{in} .= "COMMIT;\n";
	eval { $h->{run}->finish; };
	return;
}

# the test ledger (start_ledger) and its URL; ledger_control($ledger,
# $json) of GridhaTest.pm steers it
my $ledger;
my $LEDGER;

# ledger_stats(): the ledger's /stats
sub ledger_stats
{
	my $r = $http->get("$LEDGER/stats");
	die "ledger stats: $r->{status} $r->{content}" unless $r->{success};
	return decode_json($r->{content});
}

# ---------------------------------------------------------------------------
# The ledger, the database, the restart with one worker

$ledger = start_ledger($work, '--commit-delay', '0.1', '--max-lifetime', '600',
	'--require-header', "Authorization: $SECRET");
$LEDGER = $ledger->{url};

# order_kept($name, $where): the ledger got the batches of the services
# matching $where (an SQL condition on gridha.batches) all, in enqueue
# order, one in flight per service
sub order_kept
{
	my ($name, $where) = @_;
	my $exp = "$work/expected-$name.tsv";
	my $rows = query("SELECT service_id || E'\\t' || batch_id FROM gridha.batches
	                  WHERE $where ORDER BY service_id, seq");
	return 0 if $rows eq '';
	open(my $fh, '>', $exp) or die $!;
	print $fh "$rows\n";
	close($fh);
	my ($ok, $out) = ledger_in_order($ledger, $exp);
	diag($out =~ /(violations.*?)(?:\n\n|\z)/s ? $1 : $out) unless $ok;
	return $ok;
}

# duplicates($re): the duplicate POSTs of the services matching $re
sub duplicates
{
	my $out = '';
	IPC::Run::run([ 'python3', "$REPO/test/workers/ledger_query.py", $ledger->{log}, 'posts',
			'duplicate', $_[0] ],
		'<', \undef, '>', \$out, '2>&1');
	return $out;
}

run_sql("CREATE DATABASE $DB ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0",
	'postgres');

# What the target functions do, and what the steps look at. The functions
# compare text with OPERATOR(pg_catalog.=) only: the role step plants a
# public."=" that the worker role's search_path finds first.
run_sql(q{
CREATE TABLE w_applied (
    bid  text PRIMARY KEY,
    sid  text NOT NULL,
    n    integer NOT NULL DEFAULT 1,
    pos  bigserial
);

CREATE FUNCTION w_submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.w_applied (bid, sid) VALUES ($2, $1)
        ON CONFLICT (bid) DO UPDATE SET n = w_applied.n + 1;
    RETURN 'accepted';
END
$$;

CREATE FUNCTION w_sub_a(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT public.w_submit($1, $2, $3, $4) $$;
CREATE FUNCTION w_sub_b(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT public.w_submit($1, $2, $3, $4) $$;
CREATE FUNCTION w_stat(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $$
    SELECT a.bid, 'COMMITTED' FROM public.w_applied a WHERE a.bid OPERATOR(pg_catalog.=) ANY ($1)
$$;

-- A status function that says PENDING until the batch id is in w_done.
CREATE TABLE w_done (bid text PRIMARY KEY);
CREATE FUNCTION w_gated(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $$
    SELECT b, CASE WHEN EXISTS (SELECT 1 FROM public.w_done d WHERE d.bid OPERATOR(pg_catalog.=) b)
                   THEN 'COMMITTED' ELSE 'PENDING' END
      FROM unnest($1) AS b
$$;

-- Armed: sleep or wait for w_gate's row, but only in the server run that
-- armed it (a restart disarms them).
CREATE TABLE w_arm (what text PRIMARY KEY, armed_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE w_gate (id integer PRIMARY KEY);
INSERT INTO w_gate VALUES (1);
CREATE FUNCTION w_armed(what text) RETURNS boolean LANGUAGE sql AS $$
    SELECT EXISTS (SELECT 1 FROM public.w_arm a WHERE a.what OPERATOR(pg_catalog.=) $1
                   AND a.armed_at > pg_catalog.pg_postmaster_start_time())
$$;
CREATE FUNCTION w_sleepy(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF public.w_armed('sleep') THEN
        PERFORM pg_catalog.pg_sleep(600);
    END IF;
    RETURN public.w_submit($1, $2, $3, $4);
END
$$;
CREATE FUNCTION w_locky(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF public.w_armed('lock') THEN
        PERFORM 1 FROM public.w_gate WHERE id = 1 FOR UPDATE;
    END IF;
    RETURN public.w_submit($1, $2, $3, $4);
END
$$;

-- The role step redefines these two.
CREATE FUNCTION w_ev1(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT public.w_submit($1, $2, $3, $4) $$;
CREATE FUNCTION w_ev2(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT public.w_submit($1, $2, $3, $4) $$;

-- Every change of a batch's status or detail, whoever writes it.
CREATE TABLE w_history (
    id          bigserial PRIMARY KEY,
    service_id  text,
    batch_id    text,
    status      text,
    detail      text,
    attempts    integer,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION w_record() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    -- as text: the role step plants a public."=" on gridha.batch_status
    IF NEW.status::text IS DISTINCT FROM OLD.status::text OR NEW.detail IS DISTINCT FROM OLD.detail THEN
        INSERT INTO public.w_history (service_id, batch_id, status, detail, attempts)
        VALUES (NEW.service_id, NEW.batch_id, NEW.status::text, NEW.detail, NEW.attempts);
    END IF;
    RETURN NULL;
END
$$;

-- Calls of the planted operator (the role step).
CREATE TABLE w_planted (
    at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    who   text NOT NULL DEFAULT session_user,
    app   text DEFAULT current_setting('application_name')
);
});

run_sql('CREATE EXTENSION gridha');

# The worker roles: this test's usual one ($TROLE), and the role step's, a
# plain login role whose own search_path puts public first; a public."="
# (text, text) that records its calls.
run_sql(qq{
CREATE ROLE $TROLE LOGIN IN ROLE gridha_submitter;
CREATE ROLE $WROLE LOGIN IN ROLE gridha_submitter;
ALTER ROLE $WROLE SET search_path = public, pg_catalog;
GRANT SELECT, INSERT, UPDATE ON w_applied, w_arm, w_gate TO $WROLE;
GRANT USAGE ON SEQUENCE w_applied_pos_seq TO $WROLE;
GRANT SELECT, INSERT, UPDATE ON w_applied, w_arm, w_gate TO $TROLE;
GRANT SELECT ON w_done TO $TROLE;
GRANT USAGE ON SEQUENCE w_applied_pos_seq TO $TROLE;
CREATE FUNCTION public.w_eq(text, text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS \$\$
BEGIN
    INSERT INTO public.w_planted DEFAULT VALUES;
    RETURN \$1 OPERATOR(pg_catalog.=) \$2;
END
\$\$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.w_eq);
});
# the plant works for a session with that search_path
query("SET search_path = public, pg_catalog; SELECT 'a'::text = 'b'::text");
my $PLANT_WORKS = query('SELECT count(*) FROM w_planted');
query('TRUNCATE w_planted');

# gridha_setup(): the extension's objects this test adds (targets, the
# history trigger), after every CREATE EXTENSION; true when it worked
sub gridha_setup
{
	my ($out, $err) = ('', '');
	my $rc = $node->psql($DB, qq{
SET client_min_messages = warning;
INSERT INTO gridha.targets (target, submit_url) VALUES
    ('closed', 'http://127.0.0.1:9/batches/{service_id}/{batch_id}');
INSERT INTO gridha.targets (target, submit_url, status_url, request_headers) VALUES
    ('ledger', '$LEDGER/batches/{service_id}/{batch_id}', '$LEDGER/batch_statuses?id={batch_ids}',
     jsonb_build_object('Authorization', '$SECRET'));
INSERT INTO gridha.targets (target, submit_function) VALUES
    ('fsub', 'w_sub_a(text,text,bytea,bigint)'),
    ('mal1', 'w_submit(text,text,bytea,bigint)'),
    ('mal2', 'w_submit(text,text,bytea,bigint)'),
    ('mal3', 'w_submit(text,text,bytea,bigint)'),
    ('sleepy', 'w_sleepy(text,text,bytea,bigint)'),
    ('locky', 'w_locky(text,text,bytea,bigint)'),
    ('evil1', 'w_ev1(text,text,bytea,bigint)'),
    ('evil2', 'w_ev2(text,text,bytea,bigint)');
INSERT INTO gridha.targets (target, submit_function, status_function) VALUES
    ('fstat', 'w_sub_b(text,text,bytea,bigint)', 'w_stat(text[])'),
    ('gated', 'w_submit(text,text,bytea,bigint)', 'w_gated(text[])');
CREATE TRIGGER w_record AFTER UPDATE ON gridha.batches
    FOR EACH ROW EXECUTE FUNCTION public.w_record();
}, stdout => \$out, stderr => \$err);
	diag("gridha_setup: $err") if $rc != 0;
	return $rc == 0;
}

gridha_setup() or BAIL_OUT('the targets and the history trigger are set up');

set_conf();
$node->restart;
wait_for_workers($node, $DB, 1, 30);
my $W1 = query('SELECT instance_id FROM gridha.workers');
my $W1PID = $W1 ne '' ? worker_pid($W1) : '';
BAIL_OUT('the static worker registered') if $W1 eq '' || $W1PID eq '';
note("worker $W1, pid $W1PID");

my $t0 = time();

# step($name): a comment line with the time the test has run so far
sub step
{
	note(sprintf('--- %s (at %ds)', $_[0], time() - $t0));
	return;
}

sub same_w1
{
	return sql_is($W1PID, "SELECT pid FROM gridha.workers WHERE instance_id = '$W1'");
}

# claimed_by_w1(@services): each service is claimed by W1
sub claimed_by_w1
{
	foreach my $s (@_)
	{
		return 0 unless sql_is($W1, "SELECT claimant FROM gridha.service_claims WHERE service_id = '$s'");
	}
	return 1;
}

# renewed_since($ts): W1 has run a claim cycle (acquire, then renew) that
# began after $ts
sub renewed_since
{
	my ($ts) = @_;
	return sql_is('t', "SELECT last_seen_at > '$ts' FROM gridha.instances WHERE instance_id = '$W1'");
}

# reload_worker(@opts): the worker settings plus @opts, reloaded; true once
# the postmaster has read them and W1 has run two claim cycles since (it
# reads the file between cycles, so it has them too)
sub reload_worker
{
	set_conf(@_);
	my $m = log_mark();
	query('SELECT pg_reload_conf()') eq 't' or return 0;
	wait_until(10, sub { log_has($m, qr/received SIGHUP, reloading configuration files/) }) or return 0;
	my $t = query('SELECT clock_timestamp()');
	wait_until(10, sub { renewed_since($t) }) or return 0;
	$t = query('SELECT clock_timestamp()');
	return wait_until(10, sub { renewed_since($t) });
}

sub diag_query
{
	diag(query($_[0]));
	return;
}

# ---------------------------------------------------------------------------
# switch: a claimed service moved to a target with neither URL nor function

step('switch');

my $mark = log_mark();
# A service's target is moved by an administrator (gridha.move_service),
# once nothing of it is in flight; enqueue never moves one (RG013).
query(q{SELECT gridha.enqueue('svc' || s, 'svc' || s || '-b5', '\x00', 'closed')
        FROM generate_series(1, 5) s});
ok(wait_until(20, sub { claimed_by_w1(map { "svc$_" } 1 .. 5) }),
	"switch: the worker claims the five services on target 'closed' (a refused port)");
ok( wait_until(
		20,
		sub {
			sql_ok("SELECT gridha.move_service('svc' || s, 'default') FROM generate_series(1, 5) s");
		}),
	"switch: an administrator moves the five services to target 'default' (gridha.move_service)");
query(q{SELECT gridha.enqueue('svc' || s, 'svc' || s || '-b6', '\x00') FROM generate_series(1, 5) s});

my $REASON = 'target "default" has neither submit_url nor submit_function';
ok( wait_until(
		20,
		sub {
			sql_is(5, qq{SELECT count(*) FROM gridha.batches WHERE batch_id ~ '^svc[1-5]-b5\$'
			             AND status = 'delayed' AND detail = '$REASON'});
		}),
	"switch: each head (svcN-b5) is delayed with detail '$REASON'");
diag_query(q{SELECT batch_id, status, attempts, detail FROM gridha.batches
             WHERE service_id ~ '^svc' ORDER BY service_id, seq});

ok( sql_is(5, q{SELECT count(*) FROM gridha.batches WHERE batch_id ~ '^svc[1-5]-b6$'
                AND status = 'queued' AND attempts = 0}),
	"switch: each service's next batch (svcN-b6) waits, queued and never handed out");

ok(no_crash($mark) && same_w1(),
	"switch: no process was terminated by a signal; the worker is the same process (pid $W1PID)");

my $n_warn = log_count($mark, qr/WARNING: +gridha: batches of target "default" are delayed: \Q$REASON\E/);
ok($n_warn == 1,
	"switch: one WARNING for target 'default' and this reason, not one per batch (got $n_warn for 5 batches)");

query(qq{UPDATE gridha.targets SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
                status_url = '$LEDGER/batch_statuses?id={batch_ids}',
                request_headers = jsonb_build_object('Authorization', '$SECRET')
         WHERE target = 'default'});
ok( wait_until(
		30,
		sub { sql_is(10, q{SELECT count(*) FROM gridha.batches WHERE service_id ~ '^svc' AND status = 'committed'}) }),
	"switch: once 'default' has a URL, all 10 batches are committed");

ok(order_kept('switch', q{service_id ~ '^svc'}),
	"switch: each service's b5 reached the ledger before its b6, one in flight");

# ---------------------------------------------------------------------------
# dropped: target functions dropped after their rows were written

step('dropped');

query(q{SELECT gridha.enqueue('d1', 'd1-b1', '\x01', 'fsub'), gridha.enqueue('e1', 'e1-b1', '\x01', 'fstat')});
ok( wait_until(
		20,
		sub {
			sql_is(2, q{SELECT count(*) FROM gridha.batches WHERE batch_id IN ('d1-b1', 'e1-b1') AND status = 'committed'});
		}),
	'dropped: both function targets work first (d1-b1, e1-b1 committed)');

$mark = log_mark();
query(q{
DROP FUNCTION w_sub_a(text, text, bytea, bigint);
DROP FUNCTION w_stat(text[]);
});
# the worker holds d1 and e1 through a claim cycle after the drop, then
# their next batches arrive
my $t_change = query('SELECT clock_timestamp()');
wait_until(10, sub { renewed_since($t_change) });
query(q{SELECT gridha.enqueue(s, s || '-b' || b, '\x02', CASE s WHEN 'd1' THEN 'fsub' ELSE 'fstat' END)
        FROM generate_series(2, 4) b, unnest(ARRAY['d1', 'e1']) s ORDER BY b, s});
ok( wait_until(
		10,
		sub {
			sql_is(2, q{SELECT count(*) FROM gridha.batches
			  WHERE (batch_id = 'd1-b2' AND detail = 'submit_function of target "fsub" (public.w_sub_a(text,text,bytea,bigint)) does not exist'
			      OR batch_id = 'e1-b2' AND detail = 'status_function of target "fstat" (public.w_stat(text[])) does not exist')
			    AND status = 'delayed'});
		}),
	q{dropped: after a claim cycle of the worker, the new heads are delayed with detail 'submit_function of target "fsub" (public.w_sub_a(text,text,bytea,bigint)) does not exist' / 'status_function of target "fstat" (public.w_stat(text[])) ...'}
);
diag_query(q{SELECT batch_id, status, attempts, detail FROM gridha.batches
             WHERE service_id IN ('d1', 'e1') ORDER BY service_id, seq});

ok(sql_is(0, q{SELECT count(*) FROM gridha.batches WHERE service_id IN ('d1', 'e1') AND seq > 2 AND attempts > 0}),
	'dropped: the batches behind them were never handed out');

my $n_fsub = log_count($mark,
	qr/WARNING: +gridha: batches of target "fsub" are delayed: submit_function of target "fsub" \(public\.w_sub_a\(text,text,bytea,bigint\)\) does not exist/
);
my $n_fstat = log_count($mark,
	qr/WARNING: +gridha: batches of target "fstat" are delayed: status_function of target "fstat" \(public\.w_stat\(text\[\]\)\) does not exist/
);
ok($n_fsub == 1 && $n_fstat == 1,
	"dropped: one WARNING for each target and its reason (fsub: $n_fsub, fstat: $n_fstat)");

ok(no_crash($mark) && same_w1() && !log_has($mark, qr/started as instance/),
	"dropped: no crash, no worker restart: the same process (pid $W1PID) keeps running");

query(q{
CREATE FUNCTION w_sub_a(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS $$ SELECT public.w_submit($1, $2, $3, $4) $$;
CREATE FUNCTION w_stat(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $$
    SELECT a.bid, 'COMMITTED' FROM public.w_applied a WHERE a.bid OPERATOR(pg_catalog.=) ANY ($1)
$$;
-- the rows are left as they are: their signatures resolve again
});
ok( wait_until(
		30,
		sub {
			sql_is(8, q{SELECT count(*) FROM gridha.batches WHERE service_id IN ('d1', 'e1') AND status = 'committed'});
		}),
	'dropped: re-created under the same signatures, the rows untouched, all 8 batches are committed');

ok( sql_is(
		'd1-b1,d1-b2,d1-b3,d1-b4|e1-b1,e1-b2,e1-b3,e1-b4',
		q{SELECT string_agg(l, '|' ORDER BY sid) FROM (SELECT sid, string_agg(bid, ',' ORDER BY pos) AS l
		  FROM w_applied WHERE sid IN ('d1', 'e1') GROUP BY sid) s}),
	"dropped: the functions applied each service's batches in enqueue order");

# ---------------------------------------------------------------------------
# malformed: rows written with the check disabled

step('malformed');

query(q{SELECT gridha.enqueue('m' || t, 'm' || t || '-b1', '\x01', 'mal' || t) FROM generate_series(1, 3) t});
ok( wait_until(
		20,
		sub {
			sql_is(3, q{SELECT count(*) FROM gridha.batches WHERE batch_id ~ '^m[123]-b1$' AND status = 'committed'});
		}),
	'malformed: the three targets work first (m1-b1..m3-b1 committed)');

$mark = log_mark();
query(q{
ALTER TABLE gridha.targets DISABLE TRIGGER targets_check;
UPDATE gridha.targets SET submit_url = 'http://127.0.0.1:9/x/{batch_id}' WHERE target = 'mal1';
UPDATE gridha.targets SET submit_function = NULL, submit_url = 'htp:/nowhere' WHERE target = 'mal2';
UPDATE gridha.targets SET request_headers = '["Authorization"]' WHERE target = 'mal3';
ALTER TABLE gridha.targets ENABLE TRIGGER targets_check;
});
$t_change = query('SELECT clock_timestamp()');
wait_until(10, sub { renewed_since($t_change) });
query(q{SELECT gridha.enqueue('m' || t, 'm' || t || '-b2', '\x02', 'mal' || t) FROM generate_series(1, 3) t});
ok( wait_until(
		10,
		sub {
			sql_is(3, q{SELECT count(*) FROM gridha.batches WHERE status = 'delayed' AND (
			             batch_id = 'm1-b2' AND detail = 'target "mal1" has both submit_url and submit_function'
			          OR batch_id = 'm2-b2' AND detail ~ '^invalid submit_url of target "mal2": '
			          OR batch_id = 'm3-b2' AND detail = 'target "mal3": request_headers is not a JSON object')});
		}),
	'malformed: after a claim cycle of the worker, each new head is delayed with its reason (both URL and function; invalid submit_url; request_headers not an object)'
);
diag_query(q{SELECT batch_id, status, detail FROM gridha.batches WHERE service_id ~ '^m[123]$' ORDER BY 1});

ok(no_crash($mark) && same_w1(), 'malformed: no crash; the worker is the same process');

# ---------------------------------------------------------------------------
# pgstat: the worker's own writes reach the statistics

step('pgstat');

# tup_upd($table): n_tup_upd of a gridha table, as a fresh snapshot sees it
sub tup_upd
{
	my @l = split /\n/,
	  query("SELECT pg_stat_clear_snapshot();
	         SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'gridha.$_[0]'::regclass");
	return defined $l[-1] && $l[-1] =~ /^\d+$/ ? $l[-1] : -1;
}
my $upd_b0 = tup_upd('batches');
my $upd_c0 = tup_upd('service_claims');
# ten new services of one batch each: the enqueue inserts, only the worker
# updates (hand-out, acceptance, commit)
query(q{SELECT gridha.enqueue('st' || s, 'st' || s || '-b1', '\x01', 'fsub') FROM generate_series(1, 10) s});
wait_until(20,
	sub { sql_is(10, q{SELECT count(*) FROM gridha.batches WHERE service_id ~ '^st' AND status = 'committed'}) });
my $grew = wait_until(15,
	sub { tup_upd('batches') >= $upd_b0 + 30 && tup_upd('service_claims') >= $upd_c0 + 20 });
ok($grew,
	    'pgstat: n_tup_upd of gridha.batches grows by >= 30 and of gridha.service_claims by >= 20 for 10 batches the worker moved ('
	  . "$upd_b0 -> "
	  . tup_upd('batches')
	  . ", $upd_c0 -> "
	  . tup_upd('service_claims')
	  . ')');

# ---------------------------------------------------------------------------
# lock: a session keeps a claim row locked

step('lock');

# x1-b1 stays pending (target 'gated') until the lock is taken; then its
# status function says COMMITTED, and that report must wait for the lock.
query(q{SELECT gridha.enqueue('x1', 'x1-b1', '\x01', 'gated')});
wait_until(10, sub { sql_is('pending', q{SELECT status FROM gridha.batches WHERE batch_id = 'x1-b1'}) });
$mark = log_mark();
ok(hold_open('lock', q{SELECT service_id FROM gridha.service_claims WHERE service_id = 'x1' FOR UPDATE;}),
	'lock: a session holds the claim row of x1 (SELECT ... FOR UPDATE, transaction open)');
query(q{INSERT INTO w_done VALUES ('x1-b1')});

ok(wait_until(20, sub { log_has($mark, qr/gridha worker: .* failed: canceling statement due to lock timeout/) }),
	"lock: the worker logs its step's lock timeout (gridha.worker_lock_timeout)");

my $lease0 = query("SELECT soft_expiry FROM gridha.instances WHERE instance_id = '$W1'");
query(q{SELECT gridha.enqueue('q' || s, 'q' || s || '-b' || b, '\x01', 'ledger')
        FROM generate_series(1, 3) b, generate_series(1, 5) s ORDER BY b, s});
ok( wait_until(
		40,
		sub { sql_is(15, q{SELECT count(*) FROM gridha.batches WHERE service_id ~ '^q' AND status = 'committed'}) }),
	'lock: meanwhile the worker commits all 15 batches of five other services');
diag_query(q{SELECT status, count(*) FROM gridha.batches WHERE service_id ~ '^q' GROUP BY 1});

ok(sql_is('t', "SELECT soft_expiry > '$lease0' FROM gridha.instances WHERE instance_id = '$W1'"),
	"lock: the worker keeps renewing (its lease's soft_expiry moved past $lease0)");

my %seen;
my $dups = join(',', grep { $_ ne '' && !$seen{$_}++ } sort split /\n/, duplicates('^q'));
ok($dups eq '', 'lock: no batch of the other services was POSTed twice (duplicates: ' . ($dups || 'none') . ')');

ok(same_w1() && sql_is('pending', q{SELECT status FROM gridha.batches WHERE batch_id = 'x1-b1'}),
	'lock: the worker is the same process, x1-b1 still pending behind the lock');

hold_close('lock');
ok(wait_until(20, sub { sql_is('committed', q{SELECT status FROM gridha.batches WHERE batch_id = 'x1-b1'}) }),
	'lock: once the transaction ends, x1-b1 is committed');

# ---------------------------------------------------------------------------
# statement: a target function that outlasts gridha.worker_statement_timeout

step('statement');

ok(reload_worker('gridha.worker_statement_timeout=2s'),
	'statement: the worker runs with gridha.worker_statement_timeout = 2s (reloaded)');
my $h0 = hist_mark();
$mark = log_mark();
query(q{INSERT INTO w_arm (what) VALUES ('sleep');
        SELECT gridha.enqueue('z0', 'z0-b' || b, '\x01', 'sleepy') FROM generate_series(1, 2) b});
ok( wait_until(
		20,
		sub {
			sql_is(1, qq{SELECT count(DISTINCT batch_id) FROM w_history WHERE id > $h0 AND batch_id = 'z0-b1'
			             AND status = 'delayed' AND detail = 'submit function failed: canceling statement due to statement timeout'});
		}),
	"statement: the submit function asleep past the timeout is cancelled and its batch (z0-b1) delayed (detail 'submit function failed: canceling statement due to statement timeout')");

# While the worker is inside the target function, the function cannot be
# dropped: the worker holds it (as a DROP FUNCTION locks it) until its step
# ends. A DROP with a short lock_timeout times out (rolled back either way);
# tried at each of the worker's attempts until one finds it asleep.
sub drop_waits
{
	wait_until(
		10,
		sub {
			sql_is(1, qq{SELECT count(*) FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
			             WHERE w.instance_id = '$W1' AND a.wait_event = 'PgSleep'});
		}) or return 0;
	my ($out, $err) = ('', '');
	$node->psql($DB, q{BEGIN; SET LOCAL lock_timeout = '300ms';
DROP FUNCTION w_sleepy(text, text, bytea, bigint);
ROLLBACK;}, stdout => \$out, stderr => \$err, on_error_stop => 0);
	return 1 if "$out$err" =~ /lock timeout/;
	diag("DROP FUNCTION while the worker sleeps in it: $out$err");
	return 0;
}
my $ok_drop = 0;
for (1 .. 3)
{
	if (drop_waits())
	{
		$ok_drop = 1;
		last;
	}
}
ok($ok_drop, 'statement: while the worker calls the submit function, a DROP FUNCTION of it waits (lock timeout)');

ok(log_has($mark, qr/gridha worker: submit function failed: canceling statement due to statement timeout/),
	'statement: the worker logs the statement timeout');

query(q{DELETE FROM w_arm WHERE what = 'sleep'});
ok(wait_until(20, sub { sql_is(2, q{SELECT count(*) FROM gridha.batches WHERE service_id = 'z0' AND status = 'committed'}) }),
	'statement: disarmed, z0-b1 and z0-b2 are committed');

ok( sql_is('z0-b1,z0-b2', q{SELECT string_agg(bid, ',' ORDER BY pos) FROM w_applied WHERE sid = 'z0'})
	  && same_w1()
	  && no_crash($mark),
	"statement: each applied once, in order, by the same worker process (pid $W1PID), no crash");

reload_worker() or fail('statement: the worker settings reloaded without gridha.worker_statement_timeout');

# ---------------------------------------------------------------------------
# codes: answers that are not the batch's fault, and answers that are

step('codes');

# code_answered($code): the ledger's code window has answered $code
sub code_answered
{
	return (ledger_stats()->{fail_code_counts}{ $_[0] } // 0) > 0;
}

# 301, 401, 403, 404, 414 in turn, POSTs and status GETs alike; each code
# stays until the ledger has answered it
$h0 = hist_mark();
ledger_control($ledger, '{"fail_code": 301, "fail_code_applies": "both", "fail_code_for": 120}');
query(q{SELECT gridha.enqueue('k' || s, 'k' || s || '-b' || b, '\x0b', 'ledger')
        FROM generate_series(1, 4) b, generate_series(1, 5) s ORDER BY b, s});
my $met = '';
foreach my $code (301, 401, 403, 404, 414)
{
	ledger_control($ledger, qq({"fail_code": $code}));
	$met .= " $code" if wait_until(20, sub { code_answered($code) });
}
ledger_control($ledger, '{"fail_code_for": 0}');
ok($met eq ' 301 401 403 404 414', "codes: the ledger answered 301, 401, 403, 404 and 414 in turn (met:$met)");

ok( wait_until(
		60,
		sub { sql_is(20, q{SELECT count(*) FROM gridha.batches WHERE service_id ~ '^k[1-5]$' AND status = 'committed'}) }),
	'codes: afterwards all 20 batches are committed, none invalid');
diag_query(q{SELECT status, count(*), max(attempts) FROM gridha.batches WHERE service_id ~ '^k[1-5]$' GROUP BY 1});

ok( sql_is(
		'http 301,http 401,http 403,http 404,http 414',
		qq{SELECT string_agg(DISTINCT detail, ',' ORDER BY detail) FROM w_history
		   WHERE id > $h0 AND service_id ~ '^k[1-5]\$' AND status = 'delayed'}),
	"codes: each of them made a batch delayed with detail 'http NNN', nothing else did");

ok(order_kept('codes', q{service_id ~ '^k[1-5]$'}),
	"codes: each service's batches reached the ledger in enqueue order, one in flight");

# the batch's fault: 400 and 422 on the default reject_codes; a target of
# its own list ({404}) takes only 404 as a refusal
query(qq{INSERT INTO gridha.targets (target, submit_url, status_url, reject_codes, request_headers)
         VALUES ('ledger404', '$LEDGER/batches/{service_id}/{batch_id}',
                 '$LEDGER/batch_statuses?id={batch_ids}', '{404}',
                 jsonb_build_object('Authorization', '$SECRET'))});
$h0 = hist_mark();
foreach my $code (400, 422, 404)
{
	ledger_control($ledger, qq({"fail_code": $code, "fail_code_applies": "post", "fail_code_for": 60}));
	query(qq{SELECT gridha.enqueue('rd$code', 'rd$code-b1', '\\x0c', 'ledger'),
	                gridha.enqueue('ro$code', 'ro$code-b1', '\\x0c', 'ledger404')});
	# both met the code: a final status, or a delay naming it
	wait_until(
		20,
		sub {
			sql_is(2, qq{SELECT count(*) FROM gridha.batches b WHERE b.batch_id IN ('rd$code-b1', 'ro$code-b1')
			             AND (b.status = 'invalid' OR EXISTS (SELECT 1 FROM w_history h WHERE h.id > $h0
			                  AND h.batch_id = b.batch_id AND h.detail = 'http $code'))});
		});
	ledger_control($ledger, '{"fail_code_for": 0}');
	# both final before the next code: a delayed one retried under the
	# next window would meet that code instead
	wait_until(
		30,
		sub {
			sql_is(2, qq{SELECT count(*) FROM gridha.batches WHERE batch_id IN ('rd$code-b1', 'ro$code-b1')
			             AND status IN ('committed', 'invalid')});
		});
}
wait_until(30,
	sub { sql_is(0, q{SELECT count(*) FROM gridha.batches WHERE service_id ~ '^r[do][0-9]' AND status < 'committed'}) });
diag_query(q{SELECT batch_id, status, attempts, detail FROM gridha.batches WHERE service_id ~ '^r[do][0-9]' ORDER BY 1});

ok( sql_is(
		'invalid|http 400|invalid|http 422',
		q{SELECT string_agg(status || '|' || detail, '|' ORDER BY batch_id) FROM gridha.batches
		  WHERE batch_id IN ('rd400-b1', 'rd422-b1')}),
	"codes: with the default reject_codes, 400 and 422 end the batch invalid (detail 'http 400', 'http 422')");

ok(sql_is('invalid|http 404', q{SELECT status || '|' || detail FROM gridha.batches WHERE batch_id = 'ro404-b1'}),
	"codes: a target with reject_codes {404}: 404 ends its batch invalid (detail 'http 404')");

ok( sql_is(
		'committed|committed|committed',
		q{SELECT string_agg(status::text, '|' ORDER BY batch_id) FROM gridha.batches
		  WHERE batch_id IN ('ro400-b1', 'ro422-b1', 'rd404-b1')})
	  && sql_is(
		3,
		qq{SELECT count(DISTINCT batch_id) FROM w_history WHERE id > $h0 AND status = 'delayed'
		   AND (batch_id, detail) IN (('ro400-b1', 'http 400'), ('ro422-b1', 'http 422'), ('rd404-b1', 'http 404'))}),
	"codes: a code not in the target's list only delays: 400, 422 on {404}, 404 on the default; then committed");

# ---------------------------------------------------------------------------
# urls: status GETs kept within gridha.status_url_max_length, halved on 414
# and 431

step('urls');

# ledger_mark(): the ledger log's size now; status_gets($mark): [result,
# ids] of each status GET the ledger logged after $mark, in order
sub ledger_mark
{
	return log_size($ledger->{log});
}

sub status_gets
{
	my @gets;
	foreach my $line (split /\n/, log_since($ledger->{log}, $_[0]))
	{
		my $e = eval { decode_json($line) } or next;
		push @gets, [ '' . ($e->{result} // ''), $e->{ids} // 0 ]
		  if ($e->{event} // '') eq 'status_query';
	}
	return @gets;
}

sub gets_text
{
	return join("\n", map { "$_->[0] $_->[1]" } @_);
}

# enqueue_long($prefix): services PREFIX01..PREFIX24 on 'ledger', one batch
# each, whose id is 40 bytes (a URL-safe PREFIXnn-uuu...)
sub enqueue_long
{
	query(qq{SELECT gridha.enqueue(s, s || '-' || repeat('u', 35), '\\x0e', 'ledger')
	         FROM (SELECT '$_[0]' || lpad(g::text, 2, '0') AS s FROM generate_series(1, 24) g) x
	         ORDER BY s});
	return;
}

# all_committed($prefix): the 24 batches of those services are committed
sub all_committed
{
	return sql_is(24, "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^$_[0]' AND status = 'committed'");
}

# never_delayed($prefix): none of them was delayed or made invalid once it
# was pending, which is what a status poll could do wrong. Before that only
# its POST can delay a batch (a POST that got no answer, on a loaded
# machine), which this step does not test: those rows are printed, not
# counted.
sub never_delayed
{
	my ($p) = @_;
	diag_query(qq{SELECT h.batch_id, h.status, h.detail FROM w_history h
	              WHERE h.service_id ~ '^$p' AND h.status IN ('delayed', 'invalid') ORDER BY h.id});
	return sql_is(0, qq{SELECT count(*) FROM w_history h
	                    WHERE h.service_id ~ '^$p' AND h.status IN ('delayed', 'invalid')
	                      AND EXISTS (SELECT 1 FROM w_history p WHERE p.batch_id = h.batch_id
	                                   AND p.status = 'pending' AND p.id < h.id)});
}

# The status URL is "$LEDGER/batch_statuses?id=" and the ids, comma-separated:
# with 40-byte ids a URL of k ids is BASE + 41 k - 1 bytes.
my $URL_PATH = '/batch_statuses?id=';
my $URL_BASE = length($LEDGER) + length($URL_PATH);
my $URL_LIMIT = 512;
my $CAP_GRIDHA = int(($URL_LIMIT - $URL_BASE + 1) / 41);
# the ledger's max_url counts the target only (path and query)
my $CAP_LEDGER = int(($URL_LIMIT - length($URL_PATH) + 1) / 41);
note("a status URL holds up to $CAP_GRIDHA ids within $URL_LIMIT bytes; the ledger's target up to $CAP_LEDGER");

# pending_n($prefix, $n): $n batches of those services are pending (accepted
# by the ledger, not yet polled to their end)
sub pending_n
{
	return sql_is($_[1], "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^$_[0]' AND status = 'pending'");
}

# Each part holds the status GETs off with a code window (503, or the 431
# under test) until every batch is pending, so that the polls that follow
# ask about all of them at once.

# 1. gridha.status_url_max_length 512, the ledger answers 414 past 512: the
# 24 pending ids go in GETs of at most CAP_GRIDHA ids, none refused
ledger_control($ledger, qq({"max_url": $URL_LIMIT, "fail_code": 503, "fail_code_applies": "get", "fail_code_for": 60}));
ok(reload_worker("gridha.status_url_max_length=$URL_LIMIT"),
	"urls: the worker runs with gridha.status_url_max_length = $URL_LIMIT (reloaded)");
enqueue_long('ua');
ok(wait_until(30, sub { pending_n('ua', 24) }),
	'urls: while status GETs get 503, 24 batches with 40-byte ids are accepted and pending');
my $lm = ledger_mark();
ledger_control($ledger, '{"fail_code_for": 0}');
ok(wait_until(30, sub { all_committed('ua') }), 'urls: once the GETs are answered, the 24 are committed');
my @gets = status_gets($lm);
my $n414 = grep { $_->[0] eq '414' } @gets;
my $max_ids = 0;
foreach (@gets) { $max_ids = $_->[1] if $_->[0] eq 'ok' && $_->[1] > $max_ids; }
ok($n414 == 0 && $max_ids == $CAP_GRIDHA && never_delayed('ua'),
	"urls: no status GET was over the limit (414s: $n414); the fullest carried $CAP_GRIDHA ids, as many as fit (got $max_ids); none delayed or invalid once pending"
);
diag(gets_text(@gets[ 0 .. ($#gets < 5 ? $#gets : 5) ]));

# 2. no limit of gridha's own (1 MB), the ledger's 512 bytes: a GET of more
# than CAP_LEDGER ids is answered 414 and asked again in halves, which fit.
# The ledger judges a URL's length before its code window, so a poll of
# more than CAP_LEDGER ids gets its 414 while the window is on too; the
# GETs are read from before the window. A status run asks its pieces one
# after another, and this test has one worker: the two GETs after a 414
# are its halves. Which polls carry how many ids depends on when each batch
# became pending, but once all 24 are, the next poll carries every one not
# yet committed, and none is committed before the window ends: some poll of
# at least 13 ids gets a 414.
ok(reload_worker('gridha.status_url_max_length=1MB'),
	'urls: the worker runs with gridha.status_url_max_length = 1MB (reloaded)');
$lm = ledger_mark();
ledger_control($ledger, '{"fail_code_for": 60}');
enqueue_long('ub');
ok(wait_until(30, sub { pending_n('ub', 24) }), 'urls: while status GETs get 503, 24 more are accepted and pending');
ledger_control($ledger, '{"fail_code_for": 0}');
ok(wait_until(30, sub { all_committed('ub') }),
	'urls: once the GETs are answered, the 24 are committed, the ledger answering 414 to long ones');
@gets = status_gets($lm);
# halves: each 414 as "n:a+b", a and b the ids of the two GETs after it;
# bad: a 414 whose two next GETs are not its halves
my @halves;
my $bad = 0;
for my $i (0 .. $#gets)
{
	next unless $gets[$i][0] eq '414';
	my $n = $gets[$i][1];
	my $a = $i + 1 <= $#gets ? $gets[ $i + 1 ][1] + 0 : 0;
	my $b = $i + 2 <= $#gets ? $gets[ $i + 2 ][1] + 0 : 0;
	push @halves, "$n:$a+$b";
	$bad = 1
	  if $i + 2 > $#gets
	  || $a + $b != $n
	  || ($a - $b) * ($a - $b) > 1
	  || $gets[ $i + 1 ][0] eq '414'
	  || $gets[ $i + 2 ][0] eq '414';
}
my $max_ok = 0;
my $min_414;
foreach (@gets)
{
	$max_ok = $_->[1] if $_->[0] eq 'ok' && $_->[1] > $max_ok;
	$min_414 = $_->[1] if $_->[0] eq '414' && (!defined $min_414 || $_->[1] < $min_414);
}
$min_414 //= 0;
my $halves = join(' ', @halves);
ok(@halves && !$bad && $min_414 > $CAP_LEDGER && $max_ok <= $CAP_LEDGER && never_delayed('ub'),
	"urls: every GET of more than $CAP_LEDGER ids got 414 and was asked again in halves (ids: $halves; fullest answered: $max_ok); none delayed or invalid once pending"
);
diag(gets_text(@gets[ 0 .. ($#gets < 11 ? $#gets : 11) ]));

# 3. every status GET answered 431: a poll of 8 pending batches halves down
# to single ids, depth first
ledger_control($ledger, '{"max_url": 0, "fail_code": 431, "fail_code_applies": "get", "fail_code_for": 60}');
query(q{SELECT gridha.enqueue('uc' || g, 'uc' || g || '-' || repeat('u', 36), '\x0e', 'ledger')
        FROM generate_series(1, 8) g});
ok(wait_until(30, sub { pending_n('uc', 8) }), 'urls: while status GETs get 431, 8 batches are accepted and pending');
$lm = ledger_mark();

# tree_431(): the ids of the first 15 GETs answered 431 from the first poll
# of all 8 after the mark on
sub tree_431
{
	my ($f, @ids) = (0);
	foreach (status_gets($lm))
	{
		$f = 1 if $_->[0] eq '431' && $_->[1] == 8;
		push @ids, $_->[1] if $f && $_->[0] eq '431' && @ids < 15;
	}
	return join(' ', @ids);
}
wait_until(20, sub { scalar(split / /, tree_431()) >= 15 });
ledger_control($ledger, '{"fail_code_for": 0}');
my $got = tree_431();
ok($got eq '8 4 2 1 1 2 1 1 4 2 1 1 2 1 1',
	"urls: a poll answered 431 is asked again in halves down to single ids (ids per GET: $got)");
ok( wait_until(
		30,
		sub { sql_is(8, q{SELECT count(*) FROM gridha.batches WHERE service_id ~ '^uc' AND status = 'committed'}) })
	  && never_delayed('uc'),
	'urls: once the 431s end, the 8 are committed, none delayed or invalid once pending');

reload_worker() or fail('urls: the worker settings reloaded without gridha.status_url_max_length');

# ---------------------------------------------------------------------------
# headers: the target's credentials

step('headers');

run_sql(qq{
CREATE ROLE $PROLE LOGIN IN ROLE gridha_producer;
SELECT gridha.create_id_sequence('w_ids', 1000, 1);
});
# everything the producer role can SELECT in the database
my ($pview, $perr) = ('', '');
$node->psql(
	$DB, q{
SELECT format('SELECT %L, t::text FROM %I.%I t;', 'rel ' || n.nspname || '.' || c.relname, n.nspname, c.relname)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'v', 'm', 'p', 'f')
   AND n.nspname NOT IN ('pg_catalog', 'information_schema')
   AND has_table_privilege(c.oid, 'SELECT')
\gexec
SELECT gridha.enqueue('pr1', 'pr1-b1', '\x01', 'ledger');
SELECT * FROM gridha.queue_progress;
SELECT * FROM gridha.id_sequence_status;
SELECT t::text FROM gridha.targets t;
SELECT pid, usename, application_name, query FROM pg_stat_activity;
SELECT name, setting FROM pg_settings WHERE name LIKE 'gridha.%';
},
	stdout => \$pview,
	stderr => \$perr,
	on_error_stop => 0,
	connstr => $node->connstr($DB) . " user=$PROLE");
my %rel;
$rel{$1} = 1 foreach ($pview =~ /^rel ([^|]*)\|/mg);
my $rels = join(' ', sort keys %rel);
ok($perr =~ /permission denied for table targets/ && $rels ne '' && index("$pview$perr", $SECRET) < 0,
	"headers: a gridha_producer member reads every relation it may ($rels), pg_stat_activity and the settings, and never the secret; gridha.targets is refused"
);

wait_until(20, sub { sql_is('committed', q{SELECT status FROM gridha.batches WHERE batch_id = 'pr1-b1'}) });
ok(index(query('SELECT detail FROM gridha.batches'), $SECRET_VALUE) < 0, 'headers: the secret is in no batches.detail');

# ---------------------------------------------------------------------------
# client: the reference client and the worker share URL and function targets

step('client');

# gridha.balance_claims on: the worker hands the client its share.
set_conf('gridha.balance_claims=on');
query('SELECT pg_reload_conf()');
my $CID = query('SELECT gen_random_uuid()');
my $client = IPC::Run::start(
	[
		$CLIENT, '--dsn', $node->connstr($DB), '--instance-id', $CID, '--label', 'safety-client',
		'--idle-sleep-ms', '100', '--monitor-interval-ms', '200', '--submit-timeout-ms', '5000',
		'--max-runtime-s', '120', '--log', "$work/client.log"
	],
	'<', \undef, '>', "$work/client.out", '2>', "$work/client.err");
wait_until(15, sub { sql_is(1, "SELECT count(*) FROM gridha.instances WHERE instance_id = '$CID'") });
query(q{SELECT gridha.enqueue(s, s || '-b' || lpad(b::text, 2, '0'), '\x0c',
                              CASE WHEN s ~ '^cu' THEN 'ledger' ELSE 'fsub' END)
        FROM generate_series(1, 8) b,
             unnest(ARRAY['cu1', 'cu2', 'cu3', 'cu4', 'cu5', 'cu6',
                          'cf1', 'cf2', 'cf3', 'cf4', 'cf5', 'cf6']) s
        ORDER BY b, s});
# watch the client's claims until every batch is committed
my $n_fn_held = 0;
my $all_c = wait_until(
	45,
	sub {
		my $n = query(qq{SELECT count(*) FROM gridha.service_claims c JOIN gridha.targets t USING (target)
		                 WHERE c.claimant = '$CID' AND t.submit_function IS NOT NULL});
		$n_fn_held += $n if $n ne '' && $n > 0;
		sql_is(96, q{SELECT count(*) FROM gridha.batches WHERE service_id ~ '^c[uf]' AND status = 'committed'});
	});
ok($all_c, 'client: all 96 batches of 6 URL and 6 function services are committed');
if (!$all_c)
{
	diag_query(qq{SELECT c.service_id, c.target, coalesce(i.kind, '-'), c.claimant = '$CID' AS client,
	                     c.head_seq, c.ready_at IS NOT NULL AS ready, c.in_flight
	              FROM gridha.service_claims c LEFT JOIN gridha.instances i ON i.instance_id = c.claimant
	              WHERE c.service_id ~ '^c[uf]' ORDER BY 1});
	diag_query(q{SELECT kind, held, serves, (SELECT count(*) FROM gridha.service_claims c
	                                           WHERE c.claimant = i.instance_id) AS claims
	             FROM gridha.instances i WHERE soft_expiry > now()});
	diag_query('SELECT count(*) AS services FROM gridha.service_claims');
}
diag_query(qq{SELECT left(service_id, 2), coalesce(i.kind, '?'), b.instance_id = '$CID' AS client, count(*)
              FROM gridha.batches b LEFT JOIN gridha.instances i USING (instance_id)
              WHERE service_id ~ '^c[uf]' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3});

ok(sql_is('t', "SELECT count(*) FILTER (WHERE instance_id = '$CID') > 0 FROM gridha.batches WHERE service_id ~ '^cu'"),
	'client: the client handed out batches of the URL services');

my $client_log = -f "$work/client.log" ? slurp_file("$work/client.log") : '';
ok( $n_fn_held == 0
	  && sql_is(0, "SELECT count(*) FROM gridha.batches WHERE service_id ~ '^cf' AND instance_id = '$CID'")
	  && index($client_log, '"batch_id":"cf') < 0,
	"client: the client never held a function target's service nor handed out its batches (claims seen: $n_fn_held)");

ok(order_kept('client', q{service_id ~ '^cu'}),
	"client: the URL services' batches reached the ledger in enqueue order, one in flight");

eval { $client->kill_kill(grace => 20); };
$client_log = -f "$work/client.log" ? slurp_file("$work/client.log") : '';
my $client_err = slurp_file("$work/client.err");
ok(index($client_log, $SECRET_VALUE) < 0 && index($client_err, $SECRET_VALUE) < 0,
	"headers: the secret is nowhere in the client's log or its error output");

set_conf();
query('SELECT pg_reload_conf()');

# ---------------------------------------------------------------------------
# reinstall: DROP EXTENSION / CREATE EXTENSION under the running worker

step('reinstall');

# A transaction that creates a service, then drops the extension and
# creates it again, commits: the count of its new service (written at
# commit, counts.c) has no table of its own left, and the new extension
# counts nothing of the old one.
my ($ri_out, $ri_err) = ('', '');
my $ri = $node->psql($DB, q{BEGIN;
SELECT gridha.enqueue('ri-gone', 'b1', '\x01');
SET LOCAL client_min_messages = warning;
DROP EXTENSION gridha;
CREATE EXTENSION gridha;
COMMIT;}, stdout => \$ri_out, stderr => \$ri_err);
diag($ri_err) if $ri != 0;
ok($ri == 0 && gridha_setup(),
	'reinstall: a transaction that creates a service, drops the extension and creates it again commits');
ok(sql_is(0, 'SELECT count(*) FROM gridha.service_counts'),
	"reinstall: ... and the new extension's service counts are empty");

# The same with the drop alone, the worker running: the extension is gone.
$mark = log_mark();
$ri = $node->psql($DB, q{BEGIN;
SELECT gridha.enqueue('ri-gone', 'b1', '\x01');
SET LOCAL client_min_messages = warning;
DROP EXTENSION gridha;
COMMIT;}, stdout => \$ri_out, stderr => \$ri_err);
diag($ri_err) if $ri != 0;
ok($ri == 0, 'reinstall: a transaction that creates a service and drops the extension commits');
ok( wait_until(
		20,
		sub { log_has($mark, qr/gridha worker "worker 1" waits: the extension gridha is gone from database "$DB"/) }),
	'reinstall: after DROP EXTENSION the worker logs that it waits for the extension');

ok(sql_is(1, "SELECT count(*) FROM pg_stat_activity WHERE pid = $W1PID AND backend_type = 'gridha worker'"),
	"reinstall: the worker (pid $W1PID) stays, waiting");

query('CREATE EXTENSION gridha');
gridha_setup();
ok(wait_until(20, sub { log_has($mark, qr/gridha worker "worker 1" serves again as instance \Q$W1\E/) }),
	"reinstall: after CREATE EXTENSION the worker serves again as instance $W1 (logged)");

ok( sql_is(
		"worker|$W1PID", qq{SELECT i.kind, w.pid FROM gridha.instances i JOIN gridha.workers w USING (instance_id)
		                    WHERE i.instance_id = '$W1'}),
	"reinstall: gridha.instances has it as kind 'worker', gridha.workers with the same pid");

query(q{SELECT gridha.enqueue(s, s || '-b' || b, '\x0d', CASE WHEN s = 'ri1' THEN 'ledger' ELSE 'fsub' END)
        FROM generate_series(1, 3) b, unnest(ARRAY['ri1', 'ri2']) s ORDER BY b, s});
ok( wait_until(
		30,
		sub {
			sql_is(6, q{SELECT count(*) FROM gridha.batches WHERE service_id IN ('ri1', 'ri2') AND status = 'committed'});
		}),
	'reinstall: batches enqueued after the re-create are committed (URL and function targets)');

ok(no_crash($mark), 'reinstall: no process was terminated by a signal');

# ---------------------------------------------------------------------------
# sigterm: stop_worker and a fast shutdown end a worker that waits

step('sigterm');

# No lock timeout from here: only SIGTERM can end a lock wait.
ok(reload_worker('gridha.worker_lock_timeout=0'), 'sigterm: the worker runs with gridha.worker_lock_timeout = 0 (reloaded)');

# 1. W1 waits for a claim row lock (the report of x2-b1's commit)
query(q{SELECT gridha.enqueue('x2', 'x2-b1', '\x01', 'gated')});
wait_until(10, sub { sql_is('pending', q{SELECT status FROM gridha.batches WHERE batch_id = 'x2-b1'}) });
hold_open('lock2', q{SELECT service_id FROM gridha.service_claims WHERE service_id = 'x2' FOR UPDATE;});
query(q{INSERT INTO w_done VALUES ('x2-b1')});
$mark = log_mark();
if (wait_until(20, sub { sql_is('Lock', "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $W1PID") }))
{
	$mark = log_mark();
	query("SELECT gridha.stop_worker('$W1')");
	ok(wait_until(30, sub { backend_gone($W1PID) }),
		"sigterm: stop_worker ends the worker waiting for a row lock (pid $W1PID gone within 30 s)");
	diag_query("SELECT pid, wait_event_type, wait_event, state, query FROM pg_stat_activity WHERE pid = $W1PID");
}
else
{
	fail('sigterm: the worker waits for the claim row lock of x2');
}
hold_close('lock2');
wait_until(20, sub { backend_gone($W1PID) });
ok(log_has($mark, qr/gridha worker "worker 1" \(instance \Q$W1\E\) stopped and released its claims/),
	'sigterm: it logged that it stopped and released its claims');

# 2. a dynamic worker inside a 600 s target function
query(q{INSERT INTO w_arm (what) VALUES ('sleep'), ('lock')});
my $D1 = query(q{SELECT gridha.start_worker('sleeper')});
query(q{SELECT gridha.enqueue('z1', 'z1-b1', '\x01', 'sleepy')});

# in_wait($id, $event): the worker that is instance $id waits for $event
sub in_wait
{
	my ($id, $event) = @_;
	return sql_is(1, qq{SELECT count(*) FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
	                    WHERE w.instance_id = '$id' AND a.wait_event = '$event'});
}
if (wait_until(20, sub { in_wait($D1, 'PgSleep') }))
{
	my $D1PID = worker_pid($D1);
	$h0 = hist_mark();
	$mark = log_mark();
	query("SELECT gridha.stop_worker('$D1')");
	ok(wait_until(30, sub { backend_gone($D1PID) }),
		"sigterm: stop_worker ends the worker inside pg_sleep(600) (pid $D1PID gone within 30 s)");
	ok( sql_is(1, qq{SELECT count(*) FROM w_history WHERE id > $h0 AND batch_id = 'z1-b1' AND status = 'delayed'
	                 AND detail = 'submit function failed: canceling statement due to user request'}),
		"sigterm: the batch in hand (z1-b1) was reported delayed (detail 'submit function failed: canceling statement due to user request')");
	ok(log_has($mark, qr/gridha worker "sleeper" \(instance \Q$D1\E\) stopped and released its claims/),
		'sigterm: the stopped worker logged that it released its claims');
}
else
{
	fail('sigterm: a dynamic worker sleeps in the target function of z1');
	fail('sigterm: the batch in hand (z1-b1) was reported delayed');
	fail('sigterm: the stopped worker logged that it released its claims');
}

# 3. a fast shutdown while one worker sleeps in a target function and
# another waits for a row lock that a prepared transaction holds (the
# shutdown ends every session, but not that)
my $D2 = query(q{SELECT gridha.start_worker('sleeper 2')});
wait_until(20, sub { in_wait($D2, 'PgSleep') });
query(q{BEGIN;
SELECT id FROM w_gate WHERE id = 1 FOR UPDATE;
PREPARE TRANSACTION 'w_gate';});
my $D3 = query(q{SELECT gridha.start_worker('locker')});
query(q{SELECT gridha.enqueue('y1', 'y1-b1', '\x01', 'locky')});

# in_hand($id, $batch, $wait_event_type[, $wait_event]): the worker that is
# instance $id has $batch handed out (submitting under it) and waits for
# that kind of event (and that event): it is inside the batch's target
# function. The sleeper's is PgSleep itself: other events of type Timeout
# (SpinDelay, under load) can come before the function is called.
sub in_hand
{
	my ($id, $batch, $type, $event) = @_;
	$event //= '';
	return sql_is(1, qq{SELECT count(*) FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
	                    JOIN gridha.batches b ON b.instance_id = w.instance_id
	                    WHERE w.instance_id = '$id' AND b.batch_id = '$batch' AND b.status = 'submitting'
	                      AND a.wait_event_type = '$type' AND a.wait_event = coalesce(nullif('$event', ''), a.wait_event)});
}
my $shutdown_state = '';
if (   wait_until(20, sub { in_hand($D2, 'z1-b1', 'Timeout', 'PgSleep') })
	&& wait_until(20, sub { in_hand($D3, 'y1-b1', 'Lock') }))
{
	$h0 = hist_mark();
	$mark = log_mark();
	$shutdown_state = query(q{SELECT w.label, a.wait_event_type, a.wait_event, b.batch_id, b.status
	                          FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
	                          LEFT JOIN gridha.batches b ON b.instance_id = w.instance_id
	                           AND b.status = 'submitting' ORDER BY 1});
	# pg_ctl's wait (PGCTLTIMEOUT) is the 30 s bound
	local $ENV{PGCTLTIMEOUT} = 30;
	ok($node->stop('fast', fail_ok => 1),
		'sigterm: a fast shutdown completes within 30 s with workers in pg_sleep(600) and in a lock wait');
}
else
{
	fail('sigterm: one worker sleeps in a target function (z1) and another waits for a row lock (y1)');
	$h0 = hist_mark();
	$mark = log_mark();
}
$node->stop('immediate', fail_ok => 1);

# ---------------------------------------------------------------------------
# role: gridha.worker_role, and a planted operator

step('role');

set_conf("gridha.worker_role=$WROLE");
$node->start;
query(q{ROLLBACK PREPARED 'w_gate'});

my $both = sql_is(2, qq{SELECT count(*) FROM w_history WHERE id > $h0 AND batch_id IN ('z1-b1', 'y1-b1') AND status = 'delayed'
                        AND detail = 'submit function failed: canceling statement due to user request'});
ok($both, "sigterm: both batches in hand at the fast shutdown (z1-b1, y1-b1) were reported delayed (detail 'submit function failed: canceling statement due to user request')");
diag_query("SELECT id, batch_id, status, detail, at FROM w_history WHERE id > $h0 ORDER BY id");
if (!$both)
{
	# what the workers were doing just before the shutdown, and what they logged
	diag("workers before the shutdown: $shutdown_state");
	my @l = grep { /gridha|z1-b1|y1-b1|cancel/ } log_lines($mark);
	diag(join("\n", @l[ 0 .. ($#l < 29 ? $#l : 29) ]));
}

# A public."=" on gridha.batch_status too (it needs the extension's type,
# so it is planted now): gridha compares statuses in its own SQL.
run_sql(q{
CREATE FUNCTION public.w_eq_status(gridha.batch_status, gridha.batch_status) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    INSERT INTO public.w_planted DEFAULT VALUES;
    RETURN $1::text OPERATOR(pg_catalog.=) $2::text;
END
$$;
CREATE OPERATOR public.= (LEFTARG = gridha.batch_status, RIGHTARG = gridha.batch_status,
                          FUNCTION = public.w_eq_status);
});
query(q{SELECT 'queued'::gridha.batch_status = 'queued'::gridha.batch_status});
my $PLANT_STATUS_WORKS = query('SELECT count(*) FROM w_planted');
query('TRUNCATE w_planted');

ok($PLANT_WORKS eq '1' && $PLANT_STATUS_WORKS eq '1',
	'role: the plants work: a session with search_path public, pg_catalog calls public.= (text, text), one with the default search_path public.= (batch_status, batch_status)'
);

# RW: how long the steps below wait for the worker (not at all without one)
my $RW = 1;
$mark = log_mark();
if (wait_until(
		15,
		sub {
			sql_is(1, qq{SELECT count(*) FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
			             WHERE a.usename = '$WROLE' AND a.backend_type = 'gridha worker'});
		}))
{
	pass("role: the worker connects as $WROLE and registers its instance");
	$RW = 30;
}
else
{
	fail("role: the worker connects as $WROLE and registers its instance");
	my %n;
	$n{$_}++ foreach grep { /ERROR|exited/ } log_lines($mark);
	diag(join("\n", grep { defined } (map { "$n{$_} $_" } sort keys %n)[ 0 .. 4 ]));
}

$mark = log_mark();
query(q{SELECT gridha.enqueue(s, s || '-b1', '\x01', CASE s WHEN 'ev1' THEN 'evil1' WHEN 'ev2' THEN 'evil2' ELSE 'ledger' END)
        FROM unnest(ARRAY['ev1', 'ev2', 'rl1']) s});
ok( wait_until(
		$RW,
		sub {
			sql_is(3, q{SELECT count(*) FROM gridha.batches WHERE batch_id IN ('ev1-b1', 'ev2-b1', 'rl1-b1') AND status = 'committed'});
		}),
	"role: the worker as $WROLE commits batches of function and URL targets");

ok(sql_is("worker|$WROLE", q{SELECT i.kind || '|' || i.owner FROM gridha.instances i JOIN gridha.workers w USING (instance_id)}),
	"role: its instance is of kind worker and owned by $WROLE");

$h0 = hist_mark();
run_sql(qq{
CREATE OR REPLACE FUNCTION w_ev1(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    EXECUTE 'CREATE ROLE $EVIL LOGIN';
    RETURN public.w_submit(\$1, \$2, \$3, \$4);
END
\$\$;
CREATE OR REPLACE FUNCTION w_ev2(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    PERFORM rolpassword FROM pg_catalog.pg_authid;
    RETURN public.w_submit(\$1, \$2, \$3, \$4);
END
\$\$;
SELECT gridha.enqueue(s, s || '-b' || b, '\\x02', CASE s WHEN 'ev1' THEN 'evil1' WHEN 'ev2' THEN 'evil2' ELSE 'ledger' END)
  FROM generate_series(2, 4) b, unnest(ARRAY['ev1', 'ev2', 'rl1']) s ORDER BY b, s;
});

sub evil_delayed
{
	return sql_is(2, qq{SELECT count(DISTINCT batch_id) FROM w_history WHERE id > $h0 AND status = 'delayed'
	                    AND (batch_id, detail) IN (('ev1-b2', 'submit function failed: permission denied to create role'),
	                                               ('ev2-b2', 'submit function failed: permission denied for table pg_authid'))});
}
ok(wait_until($RW, \&evil_delayed),
	"role: the redefined functions' batches (ev1-b2, ev2-b2) are delayed, each detail naming its error ('submit function failed: permission denied to create role', '... for table pg_authid')");

ok(log_has($mark, qr/permission denied to create role/) && log_has($mark, qr/permission denied for table pg_authid/),
	'role: the server log shows both refusals (permission denied to create role / for table pg_authid)');

ok( evil_delayed()
	  && sql_is(0, "SELECT count(*) FROM pg_roles WHERE rolname = '$EVIL'")
	  && sql_is(0, q{SELECT count(*) FROM w_applied WHERE bid ~ '^ev[12]-b[234]$'})
	  && sql_is(0, q{SELECT count(*) FROM gridha.batches WHERE service_id IN ('ev1', 'ev2') AND seq > 2 AND attempts > 0}),
	"role: the functions ran and nothing was created: no role $EVIL, nothing applied, the batches behind them never handed out"
);

ok( wait_until(
		$RW, sub { sql_is(4, q{SELECT count(*) FROM gridha.batches WHERE service_id = 'rl1' AND status = 'committed'}) })
	  && sql_is(0, "SELECT count(*) FROM w_planted WHERE who = '$WROLE'"),
	"role: the worker ($WROLE, search_path public, pg_catalog) commits rl1-b1..b4 and never calls a planted public.= (on text or on gridha.batch_status)"
);

# The review's attack on 1.1: the owner of a function an administrator made
# a target's submit_function redefines it to set the session's search_path
# for good (set_config(..., false)), plants an evil."=" on uuid that makes
# its owner a superuser when a superuser runs it, and a domain evil.text
# that breaks the worker's own report statement (its "::text" casts); the
# failed report made the worker look for orphans as the bootstrap
# superuser, with an unqualified "=" on uuid parsed under that search_path.
run_sql(qq{
CREATE ROLE $OWNER LOGIN;
GRANT CREATE ON DATABASE $DB TO $OWNER;
});
$node->safe_psql(
	$DB, q{
CREATE SCHEMA evil;
GRANT USAGE ON SCHEMA evil TO PUBLIC;
CREATE TABLE evil.calls (who name, super boolean, at timestamptz DEFAULT pg_catalog.clock_timestamp());
GRANT INSERT ON evil.calls TO PUBLIC;
CREATE FUNCTION evil.eq(uuid, uuid) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    su boolean := (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user);
BEGIN
    INSERT INTO evil.calls (who, super) VALUES (current_user, su);
    IF su THEN
        EXECUTE 'ALTER ROLE gridha_safety_owner SUPERUSER';
    END IF;
    RETURN $1::pg_catalog.text OPERATOR(pg_catalog.=) $2::pg_catalog.text;
END
$$;
CREATE OPERATOR evil.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = evil.eq);
CREATE DOMAIN evil.text AS pg_catalog.int4;
CREATE FUNCTION evil.w_poison(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'evil, pg_catalog, gridha', false);
    RETURN 'accepted';
END
$$;
},
	connstr => $node->connstr($DB) . " user=$OWNER");
query(q{INSERT INTO gridha.targets (target, submit_function) VALUES ('poison', 'evil.w_poison(text,text,bytea,bigint)');
        SELECT gridha.enqueue('ev3', 'ev3-b' || b, '\x03', 'poison') FROM generate_series(1, 3) b});
ok(wait_until($RW, sub { sql_is(3, q{SELECT count(*) FROM gridha.batches WHERE service_id = 'ev3' AND status = 'committed'}) }),
	"attack: the worker commits the batches of a target whose function sets the session's search_path to evil, pg_catalog, gridha"
);
sleep 2;
ok( sql_is('f', "SELECT rolsuper FROM pg_roles WHERE rolname = '$OWNER'")
	  && sql_is(0, 'SELECT count(*) FROM evil.calls'),
	"attack: the function's owner ($OWNER) is not a superuser, and nobody ever ran the planted evil.= on uuid");
diag_query('SELECT * FROM evil.calls');

# The workers view cuts an id on a character boundary: a service id of 40
# two-byte characters shows as its first 31 (62 bytes), never 63 bytes
# ending inside a character. (UTF-8 bytes of e with an acute accent.)
my $E_ACUTE = "\xc3\xa9";
my $LONG_SID = $E_ACUTE x 40;
query(qq{INSERT INTO w_arm (what) VALUES ('sleep')
         ON CONFLICT (what) DO UPDATE SET armed_at = clock_timestamp();
         SELECT gridha.enqueue('$LONG_SID', 'u1', '\\x01', 'sleepy')});
my $RWID = query('SELECT instance_id FROM gridha.workers');
if (wait_until(20, sub { in_wait($RWID, 'PgSleep') }))
{
	ok(sql_is('62|true', "SELECT octet_length(service_id) || '|' || (service_id = repeat('$E_ACUTE', 31)) FROM gridha.workers"),
		'utf8: the workers view shows the long multibyte service id cut to 31 whole characters (62 bytes)');
	query(q{DELETE FROM w_arm WHERE what = 'sleep'; SELECT pg_cancel_backend(pid) FROM gridha.workers});
	ok(wait_until(30, sub { sql_is('committed', q{SELECT status FROM gridha.batches WHERE batch_id = 'u1'}) }),
		"utf8: once woken, the worker commits the long service's batch");
}
else
{
	fail('utf8: the worker sleeps in the target function of the long service');
	fail("utf8: once woken, the worker commits the long service's batch");
}

# ---------------------------------------------------------------------------
# headers, over the whole run

my $st = ledger_stats();
my ($n_auth, $n_posts, $n_sq, $h_name) =
  map { $_ // '' } ($st->{auth_failures}, $st->{posts}, $st->{status_queries}, $st->{require_header});
$n_posts = 0 unless $n_posts =~ /^\d+$/;
$n_sq = 0 unless $n_sq =~ /^\d+$/;
ok($n_auth eq '0' && $h_name eq 'Authorization' && $n_posts > 0 && $n_sq > 0,
	"headers: every POST ($n_posts) and status GET ($n_sq) the ledger got carried the target's Authorization header ($n_auth refused for want of it)"
);

ok(index(slurp_file($node->logfile), $SECRET_VALUE) < 0, 'headers: the secret is nowhere in the server log');

# ---------------------------------------------------------------------------
# dropdb: DROP DATABASE ... WITH (FORCE) ends a worker inside a target function

step('dropdb');

my $WR = query('SELECT instance_id FROM gridha.workers');
my $WRPID = $WR ne '' ? worker_pid($WR) : '';
query(q{INSERT INTO w_arm (what) VALUES ('sleep')
        ON CONFLICT (what) DO UPDATE SET armed_at = clock_timestamp();
        SELECT gridha.enqueue('z9', 'z9-b1', '\x01', 'sleepy')});
if ($WRPID ne '' && wait_until(20, sub { in_wait($WR, 'PgSleep') }))
{
	$mark = log_mark();
	my ($dout, $derr) = ('', '');
	my $rc = $node->psql('postgres', "DROP DATABASE $DB WITH (FORCE)", stdout => \$dout, stderr => \$derr);
	ok($rc == 0, 'dropdb: DROP DATABASE ... WITH (FORCE) succeeds while the worker sleeps in pg_sleep(600)');
	diag($derr) if $derr ne '';
	ok( wait_until(10, sub { backend_gone($WRPID) })
		  && log_has($mark, qr/gridha worker: submit function failed: canceling statement due to user request/)
		  && log_has($mark, qr/gridha worker "worker 1" \(instance \Q$WR\E\) stopped and released its claims/)
		  && no_crash($mark),
		"dropdb: the worker (pid $WRPID) had its target function cancelled, released its claims and stopped (logged); no crash"
	);
}
else
{
	fail('dropdb: the worker sleeps in the target function of z9');
	fail('dropdb: the worker had its target function cancelled, released its claims and stopped (logged); no crash');
}

# ---------------------------------------------------------------------------
# syncrep: a fast shutdown while the worker's commits wait for a synchronous
# standby that is not there

step('syncrep');

# sync_waiting(): the worker waits for the synchronous standby
sub sync_waiting
{
	return query(q{SELECT count(*) FROM pg_stat_activity
	               WHERE backend_type = 'gridha worker' AND wait_event = 'SyncRep'}, 'postgres') eq '1';
}

# sync_claimed(): the worker holds the claim of sr1
sub sync_claimed
{
	return query(q{SELECT count(*) FROM gridha.service_claims
	               WHERE service_id = 'sr1' AND claimant IS NOT NULL}, $SDB) eq '1';
}
set_conf("gridha.database=$SDB");
$node->restart;
my ($sout, $serr) = ('', '');
if (   $node->psql('postgres', "CREATE DATABASE $SDB", stdout => \$sout, stderr => \$serr) == 0
	&& $node->psql(
		$SDB, q{CREATE EXTENSION gridha;
INSERT INTO gridha.targets (target, submit_url) VALUES ('nowhere', 'http://127.0.0.1:9/{batch_id}');
SELECT gridha.enqueue('sr1', 'sr1-b1', '\x01', 'nowhere');},
		stdout => \$sout,
		stderr => \$serr) == 0
	&& wait_until(20, \&sync_claimed))
{
	# From now on every commit that wrote waits for a standby named
	# gridha_absent, which never connects (this step writes nothing more).
	set_conf("gridha.database=$SDB", 'synchronous_commit=on', 'synchronous_standby_names=gridha_absent');
	query('SELECT pg_reload_conf()', 'postgres');
	if (wait_until(20, \&sync_waiting))
	{
		$mark = log_mark();
		local $ENV{PGCTLTIMEOUT} = 30;
		ok($node->stop('fast', fail_ok => 1),
			'syncrep: a fast shutdown completes within 30 s while the worker, holding a claim, waits for a synchronous standby that never comes'
		);
		ok(log_has($mark, qr/gridha worker "worker 1" \(instance [0-9a-f-]*\) stopped and released its claims/),
			'syncrep: the worker logged that it stopped and released its claims');
		my @l = grep { /gridha|synchronous/ } log_lines($mark);
		diag(join("\n", @l[ 0 .. ($#l < 19 ? $#l : 19) ]));
	}
	else
	{
		fail('syncrep: the worker waits for the synchronous standby (wait event SyncRep)');
		fail('syncrep: the worker logged that it stopped and released its claims');
	}
}
else
{
	fail("syncrep: a worker serving $SDB claims its one service");
	diag($serr);
	diag(query('SELECT * FROM gridha.service_claims', $SDB));
	fail('syncrep: the worker logged that it stopped and released its claims');
}
$node->stop('immediate', fail_ok => 1);
