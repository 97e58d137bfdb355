# test/t/024_security.pl: the boundaries of docs/security.md that need
# databases, roles or a server restart of their own (the others are in
# pgTAP 16_security and 022_worker_safety).
#
#   schema     a database owner (not a superuser) creates schema gridha
#              before the superuser's CREATE EXTENSION gridha: the install
#              refuses (42501), and so it does when a schema of the
#              superuser's grants CREATE to PUBLIC; a database on 1.1 whose
#              gridha schema was handed to a role that is not a superuser
#              is not upgraded (ALTER EXTENSION ... UPDATE refuses, the
#              database stays on 1.1), and gridha's functions refuse to run
#              there (RG015)
#   path       the claim cycle's functions, which have no SET clause and set
#              gridha's search_path in C before their first statement, run
#              on a caller's hostile path (a schema before pg_catalog with
#              its own comparison and arithmetic operators and now(), temp
#              tables named like gridha's), in a session of their own, the
#              caller a member of gridha_submitter: none of the caller's
#              objects is ever used, every batch is committed, a refused
#              report leaves the path as it found it, and the caller's own
#              path is the caller's after every call; and the same once an
#              administrator attached to gridha's tables, one kind at a
#              time, what runs code resolving names by the path: a trigger
#              (attached while the caller's transaction is open), a CHECK
#              constraint with an expression index, an expression index
#              built concurrently inside the caller's open transaction, a
#              column of a range
#              type whose operator class is an SQL function, a foreign key
#              to a table with such an operator class
#   superuser  with gridha.worker_role naming a superuser, a worker calls no
#              target function: a batch of a function target waits,
#              delayed, with the reason as detail, logged at most once a
#              minute for its target, and the function never ran; a batch
#              of a URL target is committed
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded, restarted once with a worker. Run by
# `make test` (test/run.sh, part 024_security) and by
# `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $db = 'gridha_security_test';
my $dbo = 'gridha_security_dbo';

my $node = gridha_node('security');
# the bootstrap superuser: whoever runs the test
my $su = $node->safe_psql('postgres', 'SELECT current_user');

# run($sql, user => ...): psql's exit code and what it printed (stdout and
# stderr together) in $db
sub run
{
	my ($sql, %opt) = @_;
	my ($rc, $out, $err) = psql_as($node, $db, $sql, $opt{user});
	return ($rc, $out . $err);
}

# sql_is($expected, $sql): the query's output in $db is exactly $expected
sub sql_is
{
	my ($expected, $sql) = @_;
	my ($rc, $out) = run($sql);
	return $rc == 0 && $out eq $expected;
}

# fresh_db(): database $db owned by the role $dbo, which is not a superuser
sub fresh_db
{
	$node->safe_psql('postgres', qq{
SET client_min_messages = warning;
DROP DATABASE IF EXISTS $db WITH (FORCE);
DROP ROLE IF EXISTS $dbo;
CREATE ROLE $dbo LOGIN;
});
	$node->safe_psql('postgres', "CREATE DATABASE $db OWNER $dbo");
	return;
}

# --- schema ----------------------------------------------------------------
fresh_db();
run('CREATE SCHEMA gridha', user => $dbo);
my ($rc, $out) = run('CREATE EXTENSION gridha');
ok( $rc != 0
	  && $out =~ /schema gridha belongs to role "$dbo", not to "\Q$su\E"/
	  && sql_is('0', "SELECT count(*) FROM pg_extension WHERE extname = 'gridha'"),
	"schema: CREATE EXTENSION gridha refuses a schema gridha that the database's owner ($dbo) made first, and installs nothing"
) or diag($out);

fresh_db();
run('CREATE SCHEMA gridha; GRANT CREATE ON SCHEMA gridha TO PUBLIC;');
($rc, $out) = run('CREATE EXTENSION gridha');
ok($rc != 0 && $out =~ /schema gridha grants CREATE to roles other than its owner/,
	'schema: ... and a schema gridha of its own that grants CREATE to PUBLIC')
  or diag($out);

fresh_db();
run("CREATE EXTENSION gridha VERSION '1.1'; ALTER SCHEMA gridha OWNER TO $dbo;");
($rc, $out) = run('ALTER EXTENSION gridha UPDATE');
ok( $rc != 0
	  && $out =~ /schema gridha belongs to role "$dbo", which is not a superuser/
	  && sql_is('1.1', "SELECT extversion FROM pg_extension WHERE extname = 'gridha'"),
	"schema: a database on 1.1 whose schema gridha belongs to $dbo is not upgraded (it stays on 1.1)"
) or diag($out);
($rc, $out) = run("SELECT gridha.register_instance('x')");
ok($out =~ /schema gridha belongs to role "$dbo", which is not a superuser/,
	"schema: ... and gridha's functions refuse to run there (RG015)")
  or diag($out);

my ($version) = slurp_file(gridha_repo() . '/gridha.control') =~ /^default_version = '(.*)'/m;
ok( (run("ALTER SCHEMA gridha OWNER TO \"$su\""))[0] == 0
	  && (run('ALTER EXTENSION gridha UPDATE'))[0] == 0
	  && sql_is($version, "SELECT extversion FROM pg_extension WHERE extname = 'gridha'"),
	'schema: once a superuser owns the schema again, the upgrade runs');

# --- path: the claim cycle on a caller's hostile search_path ----------------
fresh_db();
my $caller = 'gridha_path_caller';
$node->safe_psql($db, qq{
SET client_min_messages = warning;
CREATE EXTENSION gridha;
DROP ROLE IF EXISTS $caller;
CREATE ROLE $caller LOGIN IN ROLE gridha_submitter;
GRANT CREATE, TEMPORARY ON DATABASE $db TO $caller;
INSERT INTO gridha.batches (service_id, batch_id)
SELECT 'p' || s, 'p' || s || '-b' || b FROM generate_series(1, 3) s, generate_series(1, 6) b ORDER BY s, b;
});
# The caller's traps: each operator and function logs who ran it (as
# gridha's functions run as their owner, that would be a superuser) and
# answers as pg_catalog's would; temp tables named like gridha's have no
# column gridha uses.
($rc, $out) = run(q{
CREATE SCHEMA evil;
CREATE TABLE evil.hits (what text, run_as text);
GRANT USAGE ON SCHEMA evil TO PUBLIC;
GRANT INSERT ON evil.hits TO PUBLIC;
-- a call the planner folds when its argument is a constant: the text "="
-- below runs it when an expression using it is inlined, not only when run
CREATE FUNCTION evil.log(w text) RETURNS boolean LANGUAGE sql
AS $f$ INSERT INTO evil.hits VALUES (w, current_user) RETURNING true $f$;
CREATE FUNCTION evil.trap(w text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE
AS $f$ BEGIN PERFORM evil.log(w); RETURN true; END $f$;
DO $do$
DECLARE
    t text;
    o text;
    n integer := 0;
BEGIN
    FOREACH t IN ARRAY ARRAY['uuid', 'text', 'bigint', 'integer', 'timestamptz', 'boolean',
                             'gridha.batch_status', 'gridha.instance_kind'] LOOP
        FOREACH o IN ARRAY ARRAY['=', '<>', '<', '<=', '>', '>='] LOOP
            n := n + 1;
            IF t = 'text' AND o = '=' THEN
                EXECUTE format('CREATE FUNCTION evil.op%s(a %s, b %s) RETURNS boolean LANGUAGE sql IMMUTABLE '
                               'AS $f$ SELECT evil.trap(%L) AND a OPERATOR(pg_catalog.%s) b $f$',
                               n, t, t, o || ' ' || t, o);
            ELSE
                EXECUTE format('CREATE FUNCTION evil.op%s(a %s, b %s) RETURNS boolean LANGUAGE sql '
                               'AS $f$ INSERT INTO evil.hits VALUES (%L, current_user) '
                               'RETURNING a OPERATOR(pg_catalog.%s) b $f$', n, t, t, o || ' ' || t, o);
            END IF;
            EXECUTE format('CREATE OPERATOR evil.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = evil.op%s)',
                           o, t, t, n);
        END LOOP;
    END LOOP;
    FOREACH t IN ARRAY ARRAY['bigint', 'integer'] LOOP
        FOREACH o IN ARRAY ARRAY['+', '-'] LOOP
            n := n + 1;
            EXECUTE format('CREATE FUNCTION evil.op%s(a %s, b %s) RETURNS %s LANGUAGE sql '
                           'AS $f$ INSERT INTO evil.hits VALUES (%L, current_user) '
                           'RETURNING a OPERATOR(pg_catalog.%s) b $f$', n, t, t, t, o || ' ' || t, o);
            EXECUTE format('CREATE OPERATOR evil.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = evil.op%s)',
                           o, t, t, n);
        END LOOP;
    END LOOP;
    FOREACH o IN ARRAY ARRAY['+', '-'] LOOP
        n := n + 1;
        EXECUTE format('CREATE FUNCTION evil.op%s(a timestamptz, b interval) RETURNS timestamptz LANGUAGE sql '
                       'AS $f$ INSERT INTO evil.hits VALUES (%L, current_user) '
                       'RETURNING a OPERATOR(pg_catalog.%s) b $f$', n, o || ' timestamptz', o);
        EXECUTE format('CREATE OPERATOR evil.%s (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = evil.op%s)',
                       o, n);
    END LOOP;
END
$do$;
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql
AS $f$ INSERT INTO evil.hits VALUES ('now()', current_user) RETURNING pg_catalog.now() $f$;
CREATE FUNCTION evil.lower(t text) RETURNS text LANGUAGE sql
AS $f$ INSERT INTO evil.hits VALUES ('lower()', current_user) RETURNING pg_catalog.lower(t) $f$;
}, user => $caller);
ok($rc == 0, 'path: the caller makes its schema of traps') or diag($out);

# The cycle, in a session of the caller's own from its first statement, on
# its path; the caller's own statements use no operator of its schema
my $cycle = q{
SET search_path = evil, pg_catalog;
CREATE TEMP TABLE service_claims (x int);
CREATE TEMP TABLE batches (x int);
CREATE TEMP TABLE instances (x int);
CREATE TEMP TABLE targets (x int);
CREATE TEMP TABLE target_totals (x int);
CREATE TEMP TABLE service_counts (x int);
CREATE TEMP TABLE paths (at text, path text);
SELECT pg_catalog.set_config('gridha_test.id', gridha.register_instance('path-caller')::text, false) \gset
DO $do$
DECLARE
    id uuid := pg_catalog.current_setting('gridha_test.id')::uuid;
    r record;
    subs gridha.submission_report[];
    stats gridha.status_report[];
    i integer;
BEGIN
    FOR i IN 1..6 LOOP
        SELECT * INTO r FROM gridha.next_batch(id);
        EXIT WHEN NOT FOUND;
        INSERT INTO paths SELECT 'next_batch', pg_catalog.current_setting('search_path');
        PERFORM gridha.report_submission(id, r.service_id, r.batch_id, r.epoch, 'accepted');
        PERFORM gridha.report_status(id, r.service_id, r.batch_id, r.epoch, 'committed');
        INSERT INTO paths SELECT 'reports (text)', pg_catalog.current_setting('search_path');
        -- a refused report (a stale epoch), caught
        BEGIN
            PERFORM gridha.report_status(id, r.service_id, r.batch_id, 0::bigint,
                                         'committed'::gridha.ledger_status);
        EXCEPTION WHEN OTHERS THEN
            INSERT INTO paths SELECT 'refused ' || SQLSTATE, pg_catalog.current_setting('search_path');
        END;
        SELECT * INTO r FROM gridha.next_batch(id);
        EXIT WHEN NOT FOUND;
        PERFORM gridha.report_submission(id, r.service_id, r.batch_id, r.epoch,
                                         'accepted'::gridha.submission_outcome);
        PERFORM gridha.report_status(id, r.service_id, r.batch_id, r.epoch,
                                     'committed'::gridha.ledger_status);
        INSERT INTO paths SELECT 'reports (typed)', pg_catalog.current_setting('search_path');
    END LOOP;
    FOR i IN 1..6 LOOP
        SELECT pg_catalog.array_agg(ROW(n.service_id, n.batch_id, n.epoch, 'accepted', NULL)::gridha.submission_report),
               pg_catalog.array_agg(ROW(n.service_id, n.batch_id, n.epoch, 'committed', NULL)::gridha.status_report)
          INTO subs, stats
          FROM gridha.next_batches(id, 3) n;
        EXIT WHEN subs IS NULL;
        PERFORM FROM gridha.report_submissions(id, subs);
        PERFORM FROM gridha.report_statuses(id, stats);
        INSERT INTO paths SELECT 'batched', pg_catalog.current_setting('search_path');
    END LOOP;
END
$do$;
SELECT pg_catalog.string_agg(DISTINCT path, '|'),
       pg_catalog.count(*) FILTER (WHERE pg_catalog.starts_with(at, 'refused RG')),
       pg_catalog.count(*) FILTER (WHERE pg_catalog.starts_with(at, 'batched'))
  FROM paths;
SELECT pg_catalog.count(*) FROM service_claims;
};
($rc, $out) = run($cycle, user => $caller);
ok($rc == 0 && $out =~ /\Aevil, pg_catalog\|6\|[1-9]\d*\n0\z/,
	'path: on the caller\'s path, the cycle (next_batch, both report forms, a refused report, next_batches and the batched reports) runs through, and after every call the path is the caller\'s again'
) or diag($out);
my $hits = $node->safe_psql($db, 'SELECT count(*) FROM evil.hits');
ok($hits eq '0', "path: none of the caller's operators, functions or tables was used ($hits uses)")
  or diag($node->safe_psql($db, 'SELECT what, run_as, count(*) FROM evil.hits GROUP BY 1, 2 ORDER BY 1, 2'));
ok( sql_is(
		'18|18', q{
SELECT count(*) FILTER (WHERE status = 'committed') || '|' || count(*) FROM gridha.batches WHERE service_id LIKE 'p%'}),
	'path: every batch was committed');

# An administrator (the superuser) attaches to gridha's tables what calls
# functions resolving names by the path (docs/security.md asks not to);
# gridha then sets the path when such code may run (src/attached.c,
# src/path.c). Each kind alone, then removed; the caller runs the cycle on
# 18 new batches in a new session each time.
sub enqueue18
{
	my ($prefix) = @_;
	$node->safe_psql($db, qq{
INSERT INTO gridha.batches (service_id, batch_id)
SELECT '$prefix' || s, '$prefix' || s || '-b' || b FROM generate_series(1, 3) s, generate_series(1, 6) b ORDER BY s, b;
});
	return;
}

# report_step($function, $word): a DO block reporting the batch the last
# next step handed out, if any, with gridha.$function and $word
sub report_step
{
	my ($function, $word) = @_;
	return qq{
DO \$do\$
BEGIN
    IF pg_catalog.current_setting('gridha_test.have')::boolean THEN
        PERFORM gridha.$function(pg_catalog.current_setting('gridha_test.id')::uuid,
                    pg_catalog.current_setting('gridha_test.sid'), pg_catalog.current_setting('gridha_test.bid'),
                    pg_catalog.current_setting('gridha_test.ep')::bigint, $word);
    END IF;
END
\$do\$;
};
}

# The cycle one call a transaction, as a client makes it: a call that runs
# no statement of its own sets no path unless something attached to the
# tables needs it (one transaction for the whole cycle would keep what the
# first, path-setting call made of an SQL function: its parse lives for the
# transaction). The caller's own statements use no operator of its schema.
my %step = (
	next => q{
DO $do$
DECLARE
    r record;
BEGIN
    SELECT * INTO r FROM gridha.next_batch(pg_catalog.current_setting('gridha_test.id')::uuid);
    PERFORM pg_catalog.set_config('gridha_test.have', FOUND::text, false);
    IF FOUND THEN
        PERFORM pg_catalog.set_config('gridha_test.sid', r.service_id, false),
                pg_catalog.set_config('gridha_test.bid', r.batch_id, false),
                pg_catalog.set_config('gridha_test.ep', r.epoch::text, false);
    END IF;
END
$do$;
},
	report => report_step('report_submission', q{'accepted'::gridha.submission_outcome})
	  . report_step('report_status', q{'committed'::gridha.ledger_status}),
);
my $register = q{
SET search_path = evil, pg_catalog;
SELECT pg_catalog.set_config('gridha_test.id', gridha.register_instance('steps')::text, false) IS NOT NULL;
};

# attacked($prefix, $what, $whole): 18 cycles on the caller's path, one
# call a transaction (or, with $whole, the cycle above in one transaction,
# where a row is written twice: a foreign key's check then runs): the
# prefix's 18 batches committed, no trap ran, and the caller's path is its
# own at the end
sub attacked
{
	my ($prefix, $what, $whole) = @_;
	my $before = $node->safe_psql($db, 'SELECT count(*) FROM evil.hits');
	my ($crc, $cout) =
	  $whole
	  ? run($cycle, user => $caller)
	  : run($register . ($step{next} . $step{report}) x 18
		  . q{SELECT pg_catalog.current_setting('search_path');}, user => $caller);
	my $n = $node->safe_psql($db, 'SELECT count(*) FROM evil.hits') - $before;
	ok( $crc == 0
		  && ($whole ? $cout =~ /\Aevil, pg_catalog\|6\|[1-9]\d*\n0\z/ : $cout eq "t\nevil, pg_catalog")
		  && $n == 0
		  && sql_is('18|18', qq{
SELECT count(*) FILTER (WHERE status = 'committed') || '|' || count(*) FROM gridha.batches WHERE service_id LIKE '$prefix%'}),
		"path: $what, 18 cycles on the caller's path ("
		  . ($whole ? 'one transaction' : 'a transaction a call')
		  . ") commit every batch and use none of the caller's objects ($n uses)"
	) or diag($cout, $node->safe_psql($db, 'SELECT what, run_as, count(*) FROM evil.hits GROUP BY 1, 2 ORDER BY 1, 2'));
	return;
}

# A trigger whose function resolves now() by the path, attached while the
# caller is inside a transaction, after a call of the same session found
# the tables bare: the report in that transaction takes the verdict in
# again under the lock the writer takes
$node->safe_psql($db, q{INSERT INTO gridha.batches (service_id, batch_id) VALUES ('x1', 'x1-b1'), ('x1', 'x1-b2')});
my $bg = $node->background_psql($db, on_error_stop => 0, extra_params => [ '-U', $caller ]);
my $first = $bg->query($register . $step{next} . $step{report} . $step{next} . q{
BEGIN;
SELECT 'open';
});
$node->safe_psql($db, q{
CREATE FUNCTION public.audit_batches() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    PERFORM now();
    RETURN NULL;
END
$f$;
CREATE TRIGGER audit AFTER UPDATE ON gridha.batches FOR EACH ROW EXECUTE FUNCTION public.audit_batches();
});
my $second = $bg->query($step{report} . q{
COMMIT;
SELECT pg_catalog.current_setting('search_path');
});
$bg->quit;
$hits = $node->safe_psql($db, 'SELECT count(*) FROM evil.hits');
ok( $first =~ /open/
	  && $second =~ /evil, pg_catalog$/
	  && $hits eq '0'
	  && sql_is('committed,committed', q{SELECT string_agg(status::text, ',' ORDER BY seq) FROM gridha.batches WHERE service_id = 'x1'}),
	"path: a trigger attached while the caller's transaction is open runs with gridha's path in the caller's next report in it ($hits uses)"
) or diag("$first\n--\n$second\n", $node->safe_psql($db, 'SELECT what, run_as, count(*) FROM evil.hits GROUP BY 1, 2 ORDER BY 1, 2'));
enqueue18('r');
attacked('r', 'with that trigger attached');
$node->safe_psql($db, 'DROP TRIGGER audit ON gridha.batches');

# A CHECK constraint and an expression index calling SQL functions with
# unqualified names
$node->safe_psql($db, q{
CREATE FUNCTION public.sane(t text) RETURNS boolean LANGUAGE sql AS $f$ SELECT t <> '' $f$;
ALTER TABLE gridha.service_claims ADD CONSTRAINT sane CHECK (public.sane(service_id));
CREATE FUNCTION public.norm(t text) RETURNS text LANGUAGE sql IMMUTABLE
AS $f$ SELECT CASE WHEN t = '' THEN NULL ELSE t END $f$;
CREATE INDEX claims_norm ON gridha.service_claims (public.norm(service_id));
});
enqueue18('s');
attacked('s', 'with a CHECK constraint and an expression index calling SQL functions attached');
$node->safe_psql($db, 'ALTER TABLE gridha.service_claims DROP CONSTRAINT sane; DROP INDEX gridha.claims_norm');

# An index whose expression calls an SQL function with unqualified names,
# built CONCURRENTLY while the caller's transaction is open, between two
# reports in it (made by another session than the hand-out's): the build
# does not wait for the caller's locks, and the second report takes it in
# mid-call, with the first lock on one of the table's indexes
$node->safe_psql($db, q{INSERT INTO gridha.batches (service_id, batch_id) VALUES ('y1', 'y1-b1'), ('y2', 'y2-b1')});
my $before_cic = $node->safe_psql($db, 'SELECT count(*) FROM evil.hits');
my ($hrc, $hout) = run(q{
SET search_path = evil, pg_catalog;
CREATE TABLE evil.got AS
SELECT i.id, n.* FROM (SELECT gridha.register_instance('cic') AS id) i, gridha.next_batches(i.id, 10) n;
SELECT pg_catalog.count(*) FROM evil.got;
}, user => $caller);
my $att = $node->background_psql($db, on_error_stop => 0, extra_params => [ '-U', $caller ]);
my $adm = $node->background_psql($db, on_error_stop => 0);
my $cic1 = $att->query(q{
SET search_path = evil, pg_catalog;
BEGIN;
SELECT gridha.report_submission(g.id, g.service_id, g.batch_id, g.epoch, 'accepted'::gridha.submission_outcome, 'one')
  FROM (SELECT * FROM evil.got ORDER BY batch_id LIMIT 1) g;
});
$adm->query_until(qr/building/, q{
\echo building
CREATE INDEX CONCURRENTLY batches_detail_norm ON gridha.batches (public.norm(pg_catalog.left(detail, 100)));
});
my $visible = wait_until(30, sub { sql_is('1', q{SELECT count(*) FROM pg_class WHERE relname = 'batches_detail_norm'}) });
my $cic2 = $att->query(q{
SELECT gridha.report_submission(g.id, g.service_id, g.batch_id, g.epoch, 'accepted'::gridha.submission_outcome, 'two')
  FROM (SELECT * FROM evil.got ORDER BY batch_id OFFSET 1 LIMIT 1) g;
COMMIT;
SELECT pg_catalog.current_setting('search_path');
});
my $built = $adm->query(q{SELECT 'built'});
$att->quit;
$adm->quit;
my $cic_hits = $node->safe_psql($db, 'SELECT count(*) FROM evil.hits') - $before_cic;
ok( $hrc == 0
	  && $hout eq '2'
	  && $visible
	  && $cic1 =~ /\Apending\z/
	  && $cic2 =~ /\Apending\nevil, pg_catalog\z/
	  && $built =~ /built/
	  && $cic_hits == 0,
	"path: an expression index built concurrently between two reports of the caller's open transaction is built into with gridha's path ($cic_hits uses)"
) or diag("$hout\n--\n$cic1\n--\n$cic2\n--\n$built\n", $node->safe_psql($db, 'SELECT what, run_as, count(*) FROM evil.hits GROUP BY 1, 2 ORDER BY 1, 2'));
$node->safe_psql($db, 'DROP INDEX gridha.batches_detail_norm');

# A column of a range type whose subtype's operator class compares with an
# SQL function resolving lower() by the path, and a CHECK of built-in range
# operators on it
$node->safe_psql($db, q{
CREATE FUNCTION public.ci_cmp(a text, b text) RETURNS integer LANGUAGE sql IMMUTABLE STRICT
AS $f$ SELECT pg_catalog.bttextcmp(lower(a), lower(b)) $f$;
CREATE OPERATOR CLASS public.text_ci_ops FOR TYPE text USING btree AS
    OPERATOR 1 <, OPERATOR 2 <=, OPERATOR 3 =, OPERATOR 4 >=, OPERATOR 5 >,
    FUNCTION 1 public.ci_cmp(text, text);
CREATE TYPE public.cirange AS RANGE (subtype = text, subtype_opclass = public.text_ci_ops);
ALTER TABLE gridha.batches ADD COLUMN label_span public.cirange DEFAULT '[a,m)';
ALTER TABLE gridha.batches ADD CONSTRAINT label_span_sane
    CHECK (label_span <> 'empty' AND NOT label_span <@ '[x,y)');
});
enqueue18('t');
attacked('t', 'with a column of a range type whose operator class is an SQL function, and a CHECK on it');
$node->safe_psql($db, 'ALTER TABLE gridha.batches DROP COLUMN label_span');

# A foreign key from gridha.batches to a table of the administrator's whose
# unique index has an operator class of its own (the key's check queries
# that table when a row written in the transaction is written again)
$node->safe_psql($db, q{
CREATE SCHEMA admin;
CREATE TABLE admin.services (id text NOT NULL);
CREATE UNIQUE INDEX services_id_ci ON admin.services (id public.text_ci_ops);
INSERT INTO admin.services SELECT p || g FROM unnest(ARRAY['p', 'r', 's', 't', 'u', 'x', 'y']) p, generate_series(1, 3) g;
ALTER TABLE gridha.batches ADD CONSTRAINT batches_service_known
    FOREIGN KEY (service_id) REFERENCES admin.services (id);
});
enqueue18('u');
attacked('u', 'with a foreign key to a table whose unique index compares with an SQL function', 1);
$node->safe_psql($db, 'ALTER TABLE gridha.batches DROP CONSTRAINT batches_service_known');

# --- superuser: a worker connected as a superuser calls no target function --
fresh_db();
my $work = PostgreSQL::Test::Utils::tempdir;
my $ledger = start_ledger($work, '--commit-delay', '0.05', '--max-lifetime', '600');
my $led = $ledger->{url};
$node->safe_psql($db, qq{
CREATE EXTENSION gridha;
CREATE TABLE called (service_id text, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION sec_submit(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.called (service_id) VALUES (\$1);
    RETURN 'accepted';
END
\$\$;
INSERT INTO gridha.targets (target, submit_function) VALUES ('fn', 'sec_submit(text,text,bytea,bigint)');
INSERT INTO gridha.targets (target, submit_url, status_url) VALUES
    ('ledger', '$led/batches/{service_id}/{batch_id}', '$led/batch_statuses?id={batch_ids}');
});

my $mark = log_size($node->logfile);
restart_with_workers($node, $db, 1, q{
gridha.naptime = '100ms'
gridha.monitor_interval = '100ms'
}, $su);
$node->safe_psql($db, q{
SELECT gridha.enqueue('f1', 'f1-b' || n, '\x01', 'fn') FROM generate_series(1, 2) n;
SELECT gridha.enqueue('u1', 'u1-b1', '\x01', 'ledger');
});
ok(wait_until(30, sub { sql_is('committed', "SELECT status FROM gridha.batches WHERE batch_id = 'u1-b1'") }),
	'superuser: the worker commits the batch of a URL target');

my $reason =
  'target functions are not called while the worker runs as a superuser: set gridha.worker_role to a role that is not one';
ok( wait_until(
		30,
		sub {
			sql_is("delayed|$reason",
				"SELECT status || '|' || detail FROM gridha.batches WHERE batch_id = 'f1-b1'");
		}),
	"superuser: the head of the function target's service is delayed with the reason as its detail");

sleep 2;
ok( sql_is(
		'0|queued|true', q{
SELECT (SELECT count(*) FROM called) || '|' ||
       (SELECT status FROM gridha.batches WHERE batch_id = 'f1-b2') || '|' ||
       (SELECT attempts > 1 FROM gridha.batches WHERE batch_id = 'f1-b1')}),
	'superuser: the function never ran, the batch behind waits, and the head was handed out again and again, never failed'
);
diag($node->safe_psql($db, q{
SELECT batch_id, status, attempts, detail FROM gridha.batches WHERE service_id = 'f1' ORDER BY seq;
SELECT count(*) AS called FROM called;
}));

my $log = log_since($node->logfile, $mark);
my $n_warn = grep { /target functions are not called/ } split /\n/, $log;
my $n_start = grep { /runs as a superuser/ } split /\n/, $log;
ok($n_start >= 1 && $n_warn >= 1 && $n_warn <= 2,
	"superuser: the worker warns at start ($n_start) and about the target once a minute at most ($n_warn lines)"
);

$node->stop;
done_testing();
