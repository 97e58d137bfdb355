# test/t/028_target_functions.pl: a call of a target function leaves
# nothing behind in the worker, runs under gridha's search_path whatever a
# role or a database owner sets, calls the function it was given however
# someone overloads its name, ends within the statement timeout plus a
# margin whatever the function catches, and cannot keep a worker from being
# started again or the server from stopping (src/step.c, src/worker.c,
# src/slots.c; issue 38, findings 4 to 8).
#
# Steps, in the order they run:
#
#   path        a target function reads its search_path: pg_catalog, pg_temp
#   temp        a target function leaves a temporary table with a trigger
#               (and a temporary trigger function) in the worker's session;
#               a later call of another target's SECURITY DEFINER function
#               with SET search_path = public (pg_temp comes first for it)
#               inserts into that name: nothing of the first call is left,
#               the row goes to public's table, the trigger never runs
#   user        the database owner makes a schema named like the worker
#               role ("$user") with a function a target function calls by
#               name: it never runs
#   overload    a role with CREATE on a target function's schema adds
#               overloads of the submit and status functions with one more
#               defaulted parameter: the target's batches are still
#               submitted and committed, the overloads never run
#   utf8        a submit function answers 200 two-byte characters, another
#               raises an error whose message is as long: each batch's
#               detail holds the answer or the message cut to whole
#               characters, and the rows copy out and in again (what
#               pg_restore does)
#   database    the database owner sets ALTER DATABASE ... SET search_path
#               to a schema of its own; after a restart a target function
#               still reads pg_catalog, pg_temp and the planted function
#               never runs
#   role        a target function runs ALTER ROLE <worker role> SET
#               search_path; after a restart, the same
#   grant       a target whose submit and status functions had EXECUTE
#               revoked from PUBLIC and never granted to the worker role:
#               its first batch is delayed at every attempt (detail
#               'submit function failed: permission denied for function
#               tf_priv_sub'), the next one
#               stays queued, and each attempt logs the permission error;
#               EXECUTE on the submit function granted, the batch is
#               submitted once and stays pending while the status
#               function's permission error, in every monitor round, is
#               logged once (then counted, a line a minute at most); EXECUTE
#               on that granted too, both are committed, in order
#   timeout     a target function that catches query_canceled in a loop:
#               the worker ends within the statement timeout plus its
#               margin (logged), is started again, and once the function
#               is disarmed the batch is committed
#   terminate   a target function runs pg_terminate_backend on every
#               worker (they run as its role): the worker is started again
#   stop        (statement timeout off, by a reload; a dynamic worker
#               started beside the static one) gridha.stop_worker of the
#               worker inside such a function: it ends within the margin
#               and is not started again
#   shutdown    a fast shutdown while a dynamic worker is inside such a
#               function completes within 20 s
#
# Words: the worker role (gridha_tf_worker) is a member of gridha_submitter
# and nothing more, with grants on this test's tables; the database
# (gridha_tf_test) belongs to a role that is no superuser
# (gridha_tf_dbowner); "armed" means a row in tf_arm names the function.
# Every wait is a bounded poll.
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded, restarted with one static worker serving
# the test's database (gridha.worker_statement_timeout 2 s); no ledger. Run
# by `make test` (test/run.sh, part 028_target_functions) and by
# `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More tests => 29;
use Time::HiRes qw(time);

my $db = 'gridha_tf_test';
my $wrole = 'gridha_tf_worker';
my $dbowner = 'gridha_tf_dbowner';
my $vowner = 'gridha_tf_victim';
my $ovl = 'gridha_tf_schema';
my $work = PostgreSQL::Test::Utils::tempdir;
$ENV{PGCLIENTENCODING} = 'UTF8';

my $node = gridha_node('target_functions');

# run($sql, user => ...): psql's exit code and what it printed on stdout
# and on stderr, in $db
sub run
{
	my ($sql, %opt) = @_;
	return psql_as($node, $db, $sql, $opt{user});
}

# query($sql): what the query printed in $db, '' after an error
sub query
{
	my ($rc, $out) = run($_[0]);
	return $rc == 0 ? $out : '';
}

# sql_is($expected, $sql): the query's output in $db is exactly $expected
sub sql_is
{
	my ($expected, $sql) = @_;
	my ($rc, $out) = run($sql);
	return $rc == 0 && $out eq $expected;
}

# ---------------------------------------------------------------------------
# The roles, the database, the functions

$node->safe_psql('postgres', qq{
CREATE ROLE $dbowner LOGIN;
CREATE ROLE $vowner LOGIN;
CREATE ROLE $ovl LOGIN;
});
# UTF-8, whatever the environment's locale (the utf8 step counts characters)
$node->safe_psql('postgres',
	"CREATE DATABASE $db OWNER $dbowner ENCODING 'UTF8' LOCALE 'C' TEMPLATE template0");
$node->safe_psql($db, qq{
SET client_min_messages = warning;
CREATE EXTENSION gridha;
CREATE ROLE $wrole LOGIN IN ROLE gridha_submitter;
});

$node->safe_psql($db, qq{
-- what target functions record, and what arms the hostile ones
CREATE TABLE tf_probe (label text, path text, who text);
CREATE TABLE tf_stolen (who text, what text);
CREATE TABLE tf_vict_log (bid text);
CREATE TABLE tf_arm (what text PRIMARY KEY);
CREATE TABLE tf_ov_done (bid text PRIMARY KEY);
GRANT INSERT, SELECT ON tf_probe, tf_ov_done TO $wrole;
GRANT INSERT ON tf_stolen TO PUBLIC;
GRANT INSERT, SELECT ON tf_vict_log TO $vowner;
GRANT SELECT ON tf_arm TO PUBLIC;

CREATE FUNCTION public.tf_armed(what text) RETURNS boolean LANGUAGE sql AS
\$\$ SELECT EXISTS (SELECT 1 FROM public.tf_arm a WHERE a.what OPERATOR(pg_catalog.=) \$1) \$\$;

-- path: what a call sees
CREATE FUNCTION public.tf_probe_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.tf_probe VALUES (\$2, pg_catalog.current_setting('search_path'), current_user);
    RETURN 'accepted';
END
\$\$;

-- temp: the plant, and its victim
CREATE FUNCTION public.tf_plant_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    CREATE TEMP TABLE tf_vict_log (bid text);
    GRANT ALL ON pg_temp.tf_vict_log TO PUBLIC;
    CREATE FUNCTION pg_temp.tf_steal() RETURNS trigger LANGUAGE plpgsql AS
        'BEGIN INSERT INTO public.tf_stolen VALUES (current_user, NEW.bid); RETURN NEW; END';
    CREATE TRIGGER tf_steal BEFORE INSERT ON pg_temp.tf_vict_log
        FOR EACH ROW EXECUTE FUNCTION pg_temp.tf_steal();
    RETURN 'accepted';
END
\$\$;
CREATE FUNCTION public.tf_victim_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS \$\$
BEGIN
    INSERT INTO tf_vict_log VALUES (\$2);
    RETURN 'accepted';
END
\$\$;
ALTER FUNCTION public.tf_victim_sub(text, text, bytea, bigint) OWNER TO $vowner;

-- user, database, role: a function that calls a helper by name
CREATE FUNCTION public.tf_helper(text) RETURNS text LANGUAGE sql AS \$\$ SELECT \$1 \$\$;
CREATE FUNCTION public.tf_helped_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    PERFORM tf_helper(\$2);
    RETURN 'accepted';
END
\$\$;

-- role: sets the worker role's own default search_path
CREATE FUNCTION public.tf_alter_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    EXECUTE pg_catalog.format('ALTER ROLE %I SET search_path = tf_dbevil, public', current_user);
    RETURN 'accepted';
END
\$\$;

-- overload: the target's functions live in schema tf, where $ovl may create
CREATE SCHEMA tf;
GRANT USAGE, CREATE ON SCHEMA tf TO $ovl;
GRANT USAGE ON SCHEMA tf TO PUBLIC;
CREATE FUNCTION tf.ov_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS \$\$
    INSERT INTO public.tf_ov_done VALUES (\$2) ON CONFLICT DO NOTHING RETURNING 'accepted'
\$\$;
CREATE FUNCTION tf.ov_stat(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS \$\$
    SELECT d.bid, 'COMMITTED' FROM public.tf_ov_done d WHERE d.bid OPERATOR(pg_catalog.=) ANY (\$1)
\$\$;

-- utf8: an answer that is no word
CREATE FUNCTION public.tf_utf_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS \$\$ SELECT pg_catalog.repeat('é', 200) \$\$;
-- utf8: an error whose message is as long
CREATE FUNCTION public.tf_utf_err_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    RAISE EXCEPTION '%', pg_catalog.repeat('é', 200);
END
\$\$;

-- timeout, stop, shutdown: swallows every cancel while armed
CREATE FUNCTION public.tf_stubborn_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    LOOP
        -- the check too: a cancel that comes while it runs is swallowed
        BEGIN
            EXIT WHEN NOT public.tf_armed('stubborn');
            PERFORM pg_catalog.pg_sleep(0.5);
        EXCEPTION WHEN query_canceled THEN
            NULL;
        END;
    END LOOP;
    RETURN 'accepted';
END
\$\$;

-- terminate: every worker, while armed
CREATE FUNCTION public.tf_killer_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    IF public.tf_armed('killer') THEN
        PERFORM pg_catalog.pg_terminate_backend(a.pid) FROM pg_catalog.pg_stat_activity a
          WHERE a.backend_type OPERATOR(pg_catalog.=) 'gridha worker';
    END IF;
    RETURN 'accepted';
END
\$\$;

SET client_min_messages = warning;
INSERT INTO gridha.targets (target, submit_function) VALUES
    ('probe', 'public.tf_probe_sub(text,text,bytea,bigint)'),
    ('plant', 'public.tf_plant_sub(text,text,bytea,bigint)'),
    ('victim', 'public.tf_victim_sub(text,text,bytea,bigint)'),
    ('helped', 'public.tf_helped_sub(text,text,bytea,bigint)'),
    ('alter', 'public.tf_alter_sub(text,text,bytea,bigint)'),
    ('utf', 'public.tf_utf_sub(text,text,bytea,bigint)'),
    ('utferr', 'public.tf_utf_err_sub(text,text,bytea,bigint)'),
    ('stubborn', 'public.tf_stubborn_sub(text,text,bytea,bigint)'),
    ('killer', 'public.tf_killer_sub(text,text,bytea,bigint)');
INSERT INTO gridha.targets (target, submit_function, status_function) VALUES
    ('ovl', 'tf.ov_sub(text,text,bytea,bigint)', 'tf.ov_stat(text[])');
-- a target with a credential, which the planted functions go after
INSERT INTO gridha.targets (target, submit_url, request_headers) VALUES
    ('secret', 'http://127.0.0.1:9/{batch_id}', '{"Authorization": "Bearer tf-secret"}');
});

# one static worker serving $db as $wrole
restart_with_workers($node, $db, 1, q{
gridha.balance_claims = off
gridha.naptime = '100ms'
gridha.monitor_interval = '100ms'
gridha.renew_interval = '1s'
gridha.soft_expiry = '10s'
gridha.hard_expiry = '30s'
gridha.worker_statement_timeout = '2s'
}, $wrole);

# worker_up: a worker runs as $wrole and has registered its instance
sub worker_up
{
	return sql_is('1', qq{SELECT count(*) FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
	                      WHERE w.instance_id IS NOT NULL AND a.usename = '$wrole'});
}

sub worker_pid
{
	return query('SELECT pid FROM gridha.workers WHERE instance_id IS NOT NULL');
}

sub backend_gone
{
	my ($pid) = @_;
	return sql_is('0', "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid");
}

sub committed
{
	my ($batch_id) = @_;
	return sql_is('committed', "SELECT status FROM gridha.batches WHERE batch_id = '$batch_id'");
}

# called($batch_id): the batch's target function was called: it failed (as
# tf_helped_sub does when tf_helper is not on its path) or it was committed
sub called
{
	my ($batch_id) = @_;
	return sql_is('t', qq{SELECT status = 'committed' OR detail = 'submit function failed: function tf_helper(text) does not exist'
	                      FROM gridha.batches WHERE batch_id = '$batch_id'});
}

# in_sleep: the worker sleeps in a target function
sub in_sleep
{
	return sql_is('1', q{SELECT count(*) FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
	                     WHERE a.wait_event = 'PgSleep'});
}

# enqueue($service, $batch_id, $target)
sub enqueue
{
	my ($service, $batch_id, $target) = @_;
	$node->safe_psql($db, "SELECT gridha.enqueue('$service', '$batch_id', '\\x00', '$target')");
	return;
}

sub batch_state
{
	return query(qq{SELECT status || ' ' || coalesce(detail, '') FROM gridha.batches WHERE batch_id = '$_[0]'});
}

sub step
{
	note("--- $_[0]");
	return;
}

# restart_and_probe($step, $n, $helped, $after): restart the cluster and,
# once the worker runs again, enqueue probe batch p$n and batch h$n of
# service $helped (target helped); two tests: the probe saw the path
# 'pg_catalog, pg_temp' (named "$step: $after, a target function still has
# ..."), and tf_dbevil.tf_helper never ran for h$n
sub restart_and_probe
{
	my ($step, $n, $helped, $after) = @_;
	$node->restart;
	wait_until(30, \&worker_up);
	enqueue('probe', "p$n", 'probe');
	enqueue($helped, "h$n", 'helped');
	wait_until(20, sub { committed("p$n") });
	ok( sql_is('pg_catalog, pg_temp', qq{SELECT path FROM tf_probe WHERE label = 'p$n'}),
		"$step: $after, a target function still has 'pg_catalog, pg_temp' (got '"
		  . query(qq{SELECT path FROM tf_probe WHERE label = 'p$n'}) . "')");
	wait_until(20, sub { called("h$n") });
	ok(sql_is('0', qq{SELECT count(*) FROM tf_stolen WHERE what LIKE 'h$n %'}), "$step: tf_dbevil.tf_helper never ran");
	return;
}

wait_until(30, \&worker_up) or die "the worker does not run as $wrole";

# ---------------------------------------------------------------------------
step('path');

enqueue('probe', 'p1', 'probe');
wait_until(20, sub { committed('p1') });
ok( sql_is("pg_catalog, pg_temp|$wrole", "SELECT path || '|' || who FROM tf_probe WHERE label = 'p1'"),
	"path: a target function runs as $wrole with search_path 'pg_catalog, pg_temp' (got '"
	  . query("SELECT path FROM tf_probe WHERE label = 'p1'") . "')");

# ---------------------------------------------------------------------------
step('temp');

enqueue('plant', 't1', 'plant');
wait_until(20, sub { committed('t1') });
ok( sql_is(
		'0|0', q{SELECT (SELECT count(*) FROM pg_class WHERE relname = 'tf_vict_log' AND relpersistence = 't')
		                || '|' || (SELECT count(*) FROM pg_proc WHERE proname = 'tf_steal')}),
	"temp: after a call that made a temporary table with a trigger and a temporary function, neither is left in the worker's session"
);

enqueue('victim', 'v1', 'victim');
wait_until(20, sub { committed('v1') });
ok(sql_is('1', q{SELECT count(*) FROM public.tf_vict_log WHERE bid = 'v1'}),
	"temp: the next target's SECURITY DEFINER function (SET search_path = public) writes its row to public.tf_vict_log"
);

ok( sql_is('0', q{SELECT count(*) FROM tf_stolen WHERE what = 'v1'}),
	'temp: the planted trigger never ran (tf_stolen: '
	  . query(q{SELECT string_agg(who || ':' || what, ',') FROM tf_stolen}) . ')');

# ---------------------------------------------------------------------------
step('user');

# The database owner, no superuser, makes a schema named like the worker role.
my ($rc, $out, $err) = run(qq{
CREATE SCHEMA $wrole;
GRANT USAGE ON SCHEMA $wrole TO PUBLIC;
CREATE FUNCTION $wrole.tf_helper(text) RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.tf_stolen SELECT current_user, \$1 || ' ' || t.request_headers::text
      FROM gridha.targets t WHERE t.target = 'secret';
    RETURN \$1;
END
\$\$;
}, user => $dbowner);
ok($rc == 0,
	"user: the database owner ($dbowner, no superuser) makes schema $wrole with a function tf_helper(text)")
  or diag($err);
enqueue('helped', 'h1', 'helped');
wait_until(20, sub { called('h1') });
ok( sql_is('0', q{SELECT count(*) FROM tf_stolen WHERE what LIKE 'h1 %'}),
	"user: a target function calling tf_helper by name never runs $wrole.tf_helper (batch h1: "
	  . batch_state('h1') . ')');

# ---------------------------------------------------------------------------
step('overload');

enqueue('ovl', 'o1', 'ovl');
wait_until(20, sub { committed('o1') });
($rc, $out, $err) = run(q{
CREATE FUNCTION tf.ov_sub(service_id text, batch_id text, payload bytea, epoch bigint, extra int DEFAULT 0)
RETURNS text LANGUAGE sql AS $$
    INSERT INTO public.tf_stolen VALUES (current_user, 'ov_sub overload') RETURNING 'accepted'
$$;
CREATE FUNCTION tf.ov_stat(batch_ids text[], extra int DEFAULT 0)
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS $$
    INSERT INTO public.tf_stolen VALUES (current_user, 'ov_stat overload') RETURNING NULL::text, NULL::text
$$;
}, user => $ovl);
diag("the overloads were not made: $err") if $rc != 0;
enqueue('ovl', 'o2', 'ovl');
ok( wait_until(30, sub { committed('o2') }),
	"overload: with overloads of tf.ov_sub and tf.ov_stat (one more defaulted parameter) added by $ovl, batch o2 is submitted and committed (o2: "
	  . batch_state('o2') . ')');
ok(sql_is('0', q{SELECT count(*) FROM tf_stolen WHERE what LIKE 'ov_%'}), 'overload: the overloads never ran');

# ---------------------------------------------------------------------------
step('utf8');

enqueue('utf', 'u1', 'utf');
enqueue('utf-err', 'u2', 'utferr');
# both are delayed at every attempt: the details are read while both are
# delayed (not handed out again)
ok( wait_until(
		20,
		sub {
			sql_is(
				'delayed true|delayed true', q{SELECT string_agg(status || ' ' || coalesce((detail = CASE batch_id
				                             WHEN 'u1' THEN 'submit function returned "' || repeat('é', 100) || '"'
				                             ELSE 'submit function failed: ' || repeat('é', 100) END)::text, 'null'),
				                           '|' ORDER BY batch_id)
				                           FROM gridha.batches WHERE batch_id IN ('u1', 'u2')});
		}),
	'utf8: the detail holds the function\'s answer of 200 two-byte characters cut to 100 whole characters ("submit function returned "...""), or likewise its error\'s message ("submit function failed: ...")'
) or diag(query(q{SELECT batch_id || ' ' || status || ' ' || coalesce(detail, 'null') FROM gridha.batches WHERE batch_id IN ('u1', 'u2')}));
my $copy = '';
my $copied = $node->psql($db, q{COPY (SELECT batch_id, detail FROM gridha.batches WHERE service_id IN ('utf', 'utf-err')) TO STDOUT},
	stdout => \$copy, stderr => \$err) == 0;
append_to_file("$work/utf.copy", "$copy\n") if $copied;
($rc, $out, $err) = run("CREATE TEMP TABLE u (b text, d text);\n\\copy u FROM '$work/utf.copy'\n") if $copied;
ok($copied && $rc == 0, "utf8: the batch's row copies out and in again, as pg_restore loads it")
  or diag($err);

# ---------------------------------------------------------------------------
step('database');

($rc, $out, $err) = run(qq{
CREATE SCHEMA tf_dbevil;
GRANT USAGE ON SCHEMA tf_dbevil TO PUBLIC;
CREATE FUNCTION tf_dbevil.tf_helper(text) RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.tf_stolen SELECT current_user, \$1 || ' ' || t.request_headers::text
      FROM gridha.targets t WHERE t.target = 'secret';
    RETURN \$1;
END
\$\$;
ALTER DATABASE $db SET search_path = tf_dbevil, public;
}, user => $dbowner);
diag("the database owner's schema tf_dbevil was not made: $err") if $rc != 0;
restart_and_probe('database', 2, 'helped-db',
	'after ALTER DATABASE ... SET search_path = tf_dbevil, public by its owner and a restart');

# ---------------------------------------------------------------------------
step('role');

enqueue('alter', 'a1', 'alter');
wait_until(20, sub { committed('a1') });
ok( sql_is(
		'1', qq{SELECT count(*) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
		        WHERE r.rolname = '$wrole' AND s.setconfig::text ~ 'tf_dbevil'}),
	"role: a target function set its role's default: ALTER ROLE $wrole SET search_path = tf_dbevil, public");
restart_and_probe('role', 3, 'helped-role', 'after a restart');
$node->safe_psql($db, "ALTER ROLE $wrole RESET ALL; ALTER DATABASE $db RESET ALL;");

# ---------------------------------------------------------------------------
step('grant');

# EXECUTE revoked from PUBLIC and not granted to the worker role. The
# executor checks EXECUTE when the worker calls a function by its OID (as it
# does for a call by name): the call fails with 42501, the step is rolled
# back and logged at LOG (src/step.c), and then (src/submit.c) the batch is
# delayed like any failed call, or (src/monitor.c) the poll is given up
# until the next round and the batch stays pending.
$node->safe_psql($db, qq{
CREATE TABLE tf_priv_log (n bigint GENERATED ALWAYS AS IDENTITY, bid text);
GRANT INSERT, SELECT ON tf_priv_log TO $wrole;
CREATE FUNCTION public.tf_priv_sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS \$\$
    INSERT INTO public.tf_priv_log (bid) VALUES (\$2) RETURNING 'accepted'
\$\$;
CREATE FUNCTION public.tf_priv_stat(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS \$\$
    SELECT l.bid, 'COMMITTED' FROM public.tf_priv_log l WHERE l.bid OPERATOR(pg_catalog.=) ANY (\$1)
\$\$;
REVOKE EXECUTE ON FUNCTION public.tf_priv_sub(text, text, bytea, bigint), public.tf_priv_stat(text[]) FROM PUBLIC;
SET client_min_messages = warning;
INSERT INTO gridha.targets (target, submit_function, status_function) VALUES
    ('priv', 'public.tf_priv_sub(text,text,bytea,bigint)', 'public.tf_priv_stat(text[])');
});
my $sub_denied = 'gridha worker: submit function failed: permission denied for function tf_priv_sub';
# a status function's failure is logged as a failing status URL's is: its
# first line, then a count at most once a minute (src/monitor.c)
my $stat_denied = 'gridha worker: target "priv": status function failed: permission denied for function tf_priv_stat';
my $stat_summary = qr/\Qgridha worker: target "priv": status function failed: \E\d+ times in the last/;
my $stat_per_round = 'gridha worker: status function failed:';

# count_lines($text, $line): how many lines of $text hold $line
sub count_lines
{
	my ($text, $line) = @_;
	return scalar(() = $text =~ /\Q$line\E/g);
}

my $mark = log_size($node->logfile);
enqueue('priv', 'pr1', 'priv');
enqueue('priv', 'pr2', 'priv');
my $priv_state = qq{SELECT (SELECT status || ' ' || coalesce(detail, '') FROM gridha.batches WHERE batch_id = 'pr1')
                           || '|' || (SELECT status || ' ' || attempts FROM gridha.batches WHERE batch_id = 'pr2')
                           || '|' || (SELECT coalesce(string_agg(bid, ',' ORDER BY n), '') FROM tf_priv_log)
                           || '|' || has_function_privilege('$wrole', 'public.tf_priv_sub(text,text,bytea,bigint)', 'EXECUTE')
                           || ',' || has_function_privilege('$wrole', 'public.tf_priv_stat(text[])', 'EXECUTE')};
my $pr1_attempts = q{SELECT attempts FROM gridha.batches WHERE batch_id = 'pr1'};
ok( wait_until(
		60,
		sub {
			sql_is(qq{delayed submit function failed: permission denied for function tf_priv_sub|queued 0||false,false}, $priv_state)
			  && query($pr1_attempts) >= 3;
		}),
	"grant: without EXECUTE on its submit function, batch pr1 is delayed at every attempt (detail 'submit function failed: permission denied for function tf_priv_sub'), the next batch pr2 stays queued, the function never ran (got '"
	  . query($priv_state) . "' after " . query($pr1_attempts) . ' attempts)');

# one line per attempt: the attempts a delayed pr1 had (each call was
# logged before its report), then the lines, then the attempts again
my $a1 = '';
wait_until(10, sub { $a1 = query(q{SELECT attempts FROM gridha.batches WHERE batch_id = 'pr1' AND status = 'delayed'}); $a1 ne '' });
my $lines = count_lines(log_since($node->logfile, $mark), $sub_denied);
my $a2 = query($pr1_attempts);
ok($a1 ne '' && $a1 >= 3 && $lines >= $a1 && $lines <= $a2,
	"grant: each attempt logs '$sub_denied' once ($lines lines, $a1 to $a2 attempts)");

my ($m0, $t0) = (log_size($node->logfile), time());
$node->safe_psql($db, "GRANT EXECUTE ON FUNCTION public.tf_priv_sub(text, text, bytea, bigint) TO $wrole");
ok( wait_until(
		30,
		sub {
			sql_is(qq{pending submit function: accepted|queued 0|pr1|true,false}, $priv_state);
		}),
	"grant: with EXECUTE on the submit function, pr1 is submitted once and stays pending while its status function cannot be called; pr2 stays queued (got '"
	  . query($priv_state) . "')");

# monitor rounds every 100 ms (gridha.monitor_interval), each failing: one
# line since the submit function's GRANT, and no more than the summaries
# a minute allows (none within a minute); none of the line a round
sleep 3;
my ($m2, $t2) = (log_size($node->logfile), time());
my $since = substr(log_since($node->logfile, $m0), 0, $m2 - $m0);
$lines = count_lines($since, $stat_denied);
my $summaries = scalar(() = $since =~ /$stat_summary/g);
my $per_round = count_lines($since, $stat_per_round);
my $allowed = int(($t2 - $t0) / 60);
ok( $lines == 1
	  && $summaries <= $allowed
	  && $per_round == 0
	  && sql_is(qq{pending submit function: accepted|queued 0|pr1|true,false}, $priv_state),
	sprintf("grant: the status function's failure in every monitor round is logged once ('%s'), then counted at most once a minute, and pr1 stays pending (%d such lines, %d summaries (at most %d), %d lines of a round's own in %.1f s)",
		$stat_denied, $lines, $summaries, $allowed, $per_round, $t2 - $t0));

$node->safe_psql($db, "GRANT EXECUTE ON FUNCTION public.tf_priv_stat(text[]) TO $wrole");
my $priv_done = q{SELECT string_agg(batch_id || ' ' || status, ',' ORDER BY seq)
                         || '|' || (SELECT coalesce(string_agg(bid, ',' ORDER BY n), '') FROM tf_priv_log)
                         || '|' || (SELECT coalesce((b2.handed_out_at >= b1.finished_at)::text, 'null')
                                      FROM gridha.batches b1, gridha.batches b2
                                     WHERE b1.batch_id = 'pr1' AND b2.batch_id = 'pr2')
                    FROM gridha.batches WHERE service_id = 'priv'};
ok( wait_until(30, sub { sql_is('pr1 committed,pr2 committed|pr1,pr2|true', $priv_done) }),
	"grant: with EXECUTE on the status function too, pr1 then pr2 are committed, each submitted once, pr2 handed out after pr1 was committed (got '"
	  . query($priv_done) . "')");

# ---------------------------------------------------------------------------
step('timeout');

$mark = log_size($node->logfile);
$node->safe_psql($db, "INSERT INTO tf_arm VALUES ('stubborn')");
enqueue('stubborn', 's1', 'stubborn');
if (wait_until(20, \&in_sleep))
{
	my $pid1 = worker_pid();
	my $t0 = time();
	# statement timeout 2 s + margin 2 s; the bound is a failure bound
	my $gone = wait_until(15, sub { backend_gone($pid1) });
	ok($gone,
		sprintf(
			'timeout: the worker (pid %s) inside a function that swallows every cancel ends within 15 s (gone after %d s; statement timeout 2 s, margin 2 s)',
			$pid1, time() - $t0));
	my $why = 'gridha worker ended itself: a function of target "stubborn" ran on 2000 ms after it was cancelled';
	ok(wait_until(5, sub { index(log_since($node->logfile, $mark), $why) >= 0 }),
		'timeout: the worker logged why it ended');
	$node->safe_psql($db, "DELETE FROM tf_arm WHERE what = 'stubborn'");
	ok( wait_until(
			30,
			sub {
				sql_is('t',
					"SELECT count(*) = 1 AND min(pid) <> $pid1 FROM gridha.workers WHERE instance_id IS NOT NULL");
			}),
		'timeout: a worker is started again (a new process)');
	ok(wait_until(45, sub { committed('s1') }), 'timeout: disarmed, the batch is committed');
}
else
{
	fail('timeout: the worker calls the function');
	fail('timeout: (not run)') for 1 .. 3;
}
$node->safe_psql($db, "DELETE FROM tf_arm WHERE what = 'stubborn'");

# ---------------------------------------------------------------------------
step('terminate');

wait_until(30, \&worker_up);
my $pid2 = worker_pid();
$node->safe_psql($db, "INSERT INTO tf_arm VALUES ('killer')");
enqueue('killer', 'k1', 'killer');
ok(wait_until(20, sub { backend_gone($pid2) }),
	"terminate: a target function terminates the worker (pid $pid2) with pg_terminate_backend");
$node->safe_psql($db, "DELETE FROM tf_arm WHERE what = 'killer'");
ok( wait_until(
		30,
		sub {
			sql_is('t', "SELECT count(*) = 1 AND min(pid) <> $pid2 FROM gridha.workers WHERE instance_id IS NOT NULL");
		}),
	'terminate: a worker is started again (a new process)');

# ---------------------------------------------------------------------------
step('stop');

# no statement timeout from here: only SIGTERM's cancel is swallowed
$node->append_conf('postgresql.conf', "gridha.worker_statement_timeout = 0\n");
$node->reload;
wait_until(10, sub { sql_is('0', 'SHOW gridha.worker_statement_timeout') });
wait_until(30, \&worker_up);
# the worker reads the file at its next wait (gridha.naptime 100 ms)
sleep 1;
# a dynamic worker too, so that the step does not depend on the last one's
# restart
$node->safe_psql($db, "SELECT gridha.start_worker('tf stop')");
$node->safe_psql($db, "INSERT INTO tf_arm VALUES ('stubborn')");
enqueue('stubborn', 's2', 'stubborn');
if (wait_until(20, \&in_sleep))
{
	my ($w3, $pid3, $label3) = split /\|/, query(q{SELECT w.instance_id, w.pid, w.label
	                                                FROM gridha.workers w JOIN pg_stat_activity a USING (pid)
	                                               WHERE a.wait_event = 'PgSleep'});
	my $t0 = time();
	query("SELECT gridha.stop_worker('$w3')");
	my $gone = wait_until(15, sub { backend_gone($pid3) });
	ok($gone,
		sprintf(
			"stop: stop_worker ends the worker '%s' (pid %s) inside a function that swallows the cancel within 15 s (gone after %d s; margin 2 s)",
			$label3, $pid3, time() - $t0));
	$node->safe_psql($db, "DELETE FROM tf_arm WHERE what = 'stubborn'");
	# a worker that is started again comes after 5 s
	my $again = wait_until(12,
		sub { sql_is('1', "SELECT count(*) FROM gridha.workers WHERE label = '$label3'") });
	ok(!$again,
		"stop: an administrator stopped it: it is not started again ("
		  . ($again ? "worker '$label3' runs again" : "12 s later no worker '$label3' runs") . ')');
}
else
{
	fail('stop: the worker calls the function');
	fail('stop: (not run)');
}

# ---------------------------------------------------------------------------
step('shutdown');

$node->safe_psql($db, "INSERT INTO tf_arm VALUES ('stubborn') ON CONFLICT DO NOTHING");
enqueue('stubborn', 's3', 'stubborn');
$node->safe_psql($db, "SELECT gridha.start_worker('tf dynamic')");
if (wait_until(30, \&in_sleep))
{
	my $t0 = time();
	my $stopped;
	{
		# pg_ctl stop -t 20: it fails when the server has not stopped by then
		local $ENV{PGCTLTIMEOUT} = 20;
		$stopped = $node->stop('fast', fail_ok => 1);
	}
	ok($stopped,
		sprintf(
			'shutdown: a fast shutdown completes within 20 s while a worker is inside a function that swallows the cancel (took %d s)',
			time() - $t0));
}
else
{
	fail('shutdown: a dynamic worker calls the function');
}
$node->stop('immediate', fail_ok => 1);
