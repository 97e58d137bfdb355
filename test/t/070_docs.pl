# test/t/070_docs.pl: the documentation cannot drift from the code.
#
# Installs gridha in a fresh database of its own (gridha_docs_test) and reads
# what CREATE EXTENSION made from the catalog, then checks the docs against it
# and against the files that define gridha's errors and version:
#
#   functions   every function of schema gridha (pg_proc), by its signature
#               "name(arg type, ...)" as pg_get_function_identity_arguments
#               prints it without OUT arguments, is in docs/sql-reference.md
#   results     every column a function returns (OUT and TABLE arguments)
#               is named in its section "### name" there
#   relations   every table, view and sequence of schema gridha (pg_class)
#               is named "gridha.NAME" in docs/sql-reference.md, and every
#               column of a table or view is named, in backquotes, in its
#               row "| `gridha.NAME` | ..." there
#   types       every enum, composite and domain type of schema gridha is
#               named there, and every label of an enum is there as `label`
#   settings    the cluster preloads gridha (else the settings read at
#               server start do not exist), and every gridha.* setting of
#               pg_settings has a row "| `gridha.NAME` | default |" in
#               docs/configuration.md whose default, read in its unit
#               (`30s`, `2kB`, `on`, `empty`), is pg_settings' boot_val
#   sqlstates   every code of test/fuzz/sqlstates.txt, and every
#               ERRCODE_GRIDHA_* of src/common.h (its code and its name), has
#               a row "| `CODE` |" in docs/errors.md
#   versions    gridha.control's default_version is the truth: CREATE
#               EXTENSION installs it; META.json's version and
#               provides.gridha.version are it (or it with ".0" appended, as
#               PGXN wants three parts) and provides.gridha.file is its
#               install script, which exists; every "<!-- version -->X"
#               marker in README.md, CHANGELOG.md and docs/**/*.md says it;
#               the README has such a marker; CHANGELOG.md's first release
#               heading names it
#   status      README.md's version marker says "in progress" exactly
#               when CHANGELOG.md's newest heading says "Unreleased" or "in
#               progress"; debian/changelog's newest entry is that version
#               (VERSION-N) and says "in progress" exactly then too
#   majors      the supported PostgreSQL majors are stated alike everywhere:
#               each "<!-- pg-versions -->PostgreSQL 15, 16 and 17" marker
#               (README.md and docs/install.md must have one), META.json's
#               prereqs.runtime.requires.PostgreSQL (">= 15.0.0, < 18.0.0"),
#               debian/pgversions (one major a line, no "N+") and the
#               lowest major src/compat.h's #error accepts
#   install     the fenced block after "<!-- install-source -->" is the
#               same in README.md and docs/install.md (a leading "sudo "
#               aside); its apt-get line installs every first alternative
#               of debian/control's Build-Depends that is a library
#               (lib*-dev) and postgresql-server-dev-N of a supported N;
#               every "postgresql-N-gridha" package named in README.md and
#               docs/**/*.md is of a supported major; no script of
#               test/ or demo/ but test/install-debian.sh runs apt-get
#               (docs/testing.md; 81_deb's install of the package under
#               test in its overlay aside)
#   sql in C    docs/internals.md's table "SQL statements in C" has a row
#               for every file of src/ whose C string literals hold SQL
#               statements (a run of literals beginning with an SQL keyword
#               in capitals), with their count and lines as src/ holds
#               them, and no other row (issue 42)
#   repository  the "<!-- repository -->" lines of README.md and
#               docs/install.md say the same; they name every address
#               META.json (resources) and debian/control (Homepage, Vcs-*)
#               declare, or, when none is declared, say there is none; no
#               page holds a placeholder "<... repository URL>"
#   examples    every function that is not a trigger function has, in its
#               section of docs/sql-reference.md, an example ("<!-- example
#               -->", a ```sql block, a ```text block) or "<!-- no example:
#               why -->"; the setup block ("<!-- example-setup -->") and then
#               every example, each in a transaction rolled back at its end,
#               run in one psql session in a new database
#               (gridha_docs_test_examples) and must print what the text
#               block shows (trailing blanks aside)
#   links       every relative link of README.md, CHANGELOG.md and
#               docs/**/*.md points at a file that exists and, with an
#               #anchor, at a heading of that file
#
# Every file is read afresh from the repository at each run. A failure's
# test names the object and the file it is missing from; the "#" lines
# after it say exactly what text to add. The checks themselves are
# test/docs/check_docs.py's (one TAP line each, passed on here as one test
# each); the plan is the number of objects and files checked.
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster), a cluster
# of its own with gridha preloaded. Run by `make test` (test/run.sh, part
# 070_docs) and by `make prove_installcheck` as any user but root.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib "$FindBin::RealBin/lib";
use GridhaTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $db = 'gridha_docs_test';
my $work = PostgreSQL::Test::Utils::tempdir;

my $node = gridha_node('docs');

# The catalog of a fresh install, one file per kind (tab-separated).
my ($rc, $out, $err) = $node->psql('postgres', "CREATE DATABASE $db");
($rc, $out, $err) = $node->psql($db, 'CREATE EXTENSION gridha') if $rc == 0;
if ($rc != 0)
{
	plan tests => 1;
	fail('CREATE EXTENSION gridha in a fresh database');
	diag($err);
	exit 1;
}

my %catalog = (
	'functions.tsv' => q{
SELECT p.proname, pg_get_function_identity_arguments(p.oid)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'gridha'
 ORDER BY 1, 2},
	'outputs.tsv' => q{
SELECT p.proname, string_agg(DISTINCT p.proargnames[i], ',')
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
       generate_subscripts(p.proargmodes, 1) AS i
 WHERE n.nspname = 'gridha' AND p.proargmodes[i] IN ('o', 't')
 GROUP BY 1
 ORDER BY 1},
	'relations.tsv' => q{
SELECT c.relname, CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'table'
                  WHEN 'v' THEN 'view' WHEN 'm' THEN 'view' ELSE 'sequence' END,
       coalesce((SELECT string_agg(a.attname, ',' ORDER BY a.attnum) FROM pg_attribute a
                  WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'gridha' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
 ORDER BY 1},
	'types.tsv' => q{
SELECT t.typname,
       CASE t.typtype WHEN 'e' THEN 'enum' WHEN 'd' THEN 'domain' ELSE 'composite' END,
       coalesce((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                   FROM pg_enum e WHERE e.enumtypid = t.oid), '')
  FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
 WHERE n.nspname = 'gridha'
   AND (t.typtype IN ('e', 'd')
        OR (t.typtype = 'c' AND (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c'))
 ORDER BY 1},
	'userfuncs.tsv' => q{
SELECT DISTINCT p.proname
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'gridha' AND p.prorettype <> 'trigger'::regtype
 ORDER BY 1},
	'preload.txt' => 'SHOW shared_preload_libraries',
	'settings.tsv' => q{
LOAD 'gridha';
SELECT name, boot_val, coalesce(unit, ''), vartype FROM pg_settings
 WHERE name LIKE 'gridha.%' ORDER BY 1},
	'installed.txt' => q{SELECT extversion FROM pg_extension WHERE extname = 'gridha'});
my $read = 1;
foreach my $file (sort keys %catalog)
{
	my ($r, $o, $e) = $node->psql($db, $catalog{$file}, extra_params => [ '-F', "\t" ]);
	if ($r != 0)
	{
		$read = 0;
		diag("$file: $e");
		last;
	}
	append_to_file("$work/$file", $o eq '' ? '' : "$o\n");
}
if (!$read)
{
	plan tests => 1;
	fail('the catalog of a fresh install could be read');
	exit 1;
}

# test/docs/check_docs.py's checks, each line a test
my $tap = '';
{
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	delete local $ENV{PGUSER};
	delete local $ENV{PGDATABASE};
	IPC::Run::run(
		[ 'python3', gridha_repo() . '/test/docs/check_docs.py', gridha_repo(), $work, "${db}_examples" ],
		'<', \undef, '>', \$tap, '2>&1');
}
my @results;    # [ ok, what, diagnostics ]
my $planned;
foreach my $line (split /\n/, $tap)
{
	if ($line =~ /^1\.\.(\d+)$/)
	{
		$planned //= $1;
	}
	elsif ($line =~ /^(not )?ok \d+ - (.*)$/)
	{
		push @results, [ !defined $1, $2, '' ];
	}
	elsif ($line =~ /^# (.*)$/ && @results)
	{
		$results[-1][2] .= "$1\n";
	}
}
if (!defined $planned || $planned != scalar(@results) || !@results)
{
	plan tests => 1;
	fail('test/docs/check_docs.py ran its checks');
	diag($tap);
	exit 1;
}
plan tests => scalar(@results);
foreach my $r (@results)
{
	chomp(my $why = $r->[2]);
	ok($r->[0], $r->[1]) or diag($why);
}

$node->stop;
