# test/t/018_pg_upgrade.pl: pg_upgrade to every newer major works with
# gridha installed (DESIGN.md section 9: no reg* columns; workers never
# start in binary-upgrade mode).
#
# The old major is the one whose programs come first in PATH (test/run.sh
# puts PG_CONFIG's there); the newer ones are the install trees found as
# .ci/run finds them: /opt/pgNN, else the tarball of ../shared/pg
# (GRIDHA_PG_BUILDS) unpacked into the test's directory; or, when
# GRIDHA_NEW_PG_CONFIGS is set (pg_config paths, space-separated), exactly
# those. Each major from the old one's next up to 17 (and any newer one
# GRIDHA_NEW_PG_CONFIGS names) is one pair; a pair without a tree has its
# tests reported skipped, with the reason.
#
# Steps, in the order they run:
#
#   old       a cluster of the old major, gridha preloaded (no worker yet),
#             database gridha_pgu: the 'default' target at the test ledger
#             (test/dlt/ledger.py: submit and status URLs), a target 'fn'
#             with a submit_function and a status_function (schema pgu,
#             recording what they apply), an instance X holding seven
#             services whose heads it left submitting, pending, valid,
#             unknown, delayed, committed and invalid, a service 'fence'
#             taken from instance A by instance B (epoch 2), services
#             queued on both targets, an id sequence with ids reserved, and
#             a plain table. What it holds is recorded
#             (test/dba/dump_state.sql, and the plain table); it is stopped,
#             and its configuration then asks for two workers (pg_upgrade
#             starts it too).
#   per pair  for each newer major:
#     build     a copy of the new tree in the test's directory (no write
#               into the tree itself, so no root), gridha built from this
#               source tree (a copy: the run's own objects stay the old
#               major's) and installed into that copy
#     new       a new cluster of the copy whose configuration preloads
#               gridha with gridha.workers = 2 serving gridha_pgu
#     plain     a cluster holding only a plain table upgraded (see below)
#     upgrade   a fresh ledger on the URL the 'default' target names;
#               pg_upgrade --check, then pg_upgrade (copy mode, --retain).
#               The ledger received nothing during them (no POST, no status
#               query), and the servers pg_upgrade started (old and new,
#               pg_upgrade_server.log) started no gridha worker and said why
#     rows      the new cluster started with gridha.workers = 0: every row
#               of gridha's tables and the plain table equal the record;
#               A's write under epoch 1 is refused (RG001); ids reserved
#               after the upgrade never meet those reserved before
#     drain     the old instances' leases ended (an operator's UPDATE: their
#               sessions are gone with the old cluster), the new cluster
#               restarted as configured: two workers drain every batch, the
#               URL target's in enqueue order at the ledger, one in flight
#               (test/dlt/check_log.py), the function target's applied by
#               its function (resolved from the stored signature in the new
#               cluster), each once, in order
#     binary    the new cluster started in binary-upgrade mode (postgres -b,
#               as pg_upgrade starts it): no worker runs although
#               gridha.workers = 2, and gridha.start_worker() refuses
#
# gridha.worker_role is empty (the bootstrap superuser) in both clusters'
# configuration, as in the report of issue 39: in binary-upgrade mode only
# a superuser may connect, so a worker of another role would die at its
# connection and hide the fault; the drain runs the workers as the suites'
# worker role (target functions are called only by a role that is not a
# superuser).
#
# Each pair first upgrades a cluster of the old major that holds nothing but
# a plain table: what pg_upgrade does without gridha. Debian's PostgreSQL 15
# (15.20-0+deb12u1, CI's old major) stamps an attribute option pg_attver on
# every column it creates (pg_attribute.attoptions, {pg_attver=N}; ALTER
# TABLE ... RESET does not remove it), and the 16beta2 and 17beta2 trees do
# not know that option: the new pg_dump writes ALTER COLUMN ... SET
# (pg_attver=N), the new server refuses it (unrecognized parameter
# "pg_attver"), and pg_upgrade fails for any table, gridha's or not. The
# plain table shows it: upgraded as the old build leaves it, it fails with
# that error; with the options cleared (UPDATE pg_attribute, in the test's
# own throwaway cluster), it passes. The test clears them the same way in
# its old gridha cluster before recording it: a workaround of the test's
# alone, for an old build's quirk; gridha itself sets no attribute option.
# When the old build stamps nothing (PostgreSQL 16 and 17 trees), nothing
# is cleared and the plain table must simply upgrade.
#
# Runs on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster): every
# cluster is the framework's (the new major's with install_path), ports
# are the framework's. Run by `make test` (test/run.sh, part 018_pg_upgrade)
# and by `make prove_installcheck`, as any user but root; gridha must be
# installed in the old major's tree (the new trees are only read).

use strict;
use warnings FATAL => 'all';

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Find;
use File::Path qw(make_path remove_tree);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $REPO = $ENV{GRIDHA_REPO} // abs_path(dirname(__FILE__) . '/../..');
my $DB = 'gridha_pgu';
my $PER_PAIR = 16;
my $WORKER_ROLE = 'gridha_test_worker';
$ENV{PGTZ} = 'UTC';

my $A = 'aaaaaaaa-0000-0000-0000-00000000000a';
my $X = '00000000-0000-0000-0000-0000000000aa';

# major_of(PROGRAM): the major version PROGRAM --version names (16 of
# "PostgreSQL 16beta2", of "initdb (PostgreSQL) 16.1"), or ''.
sub major_of
{
	my ($prog) = @_;
	return '' unless -x $prog;
	my $v = `"$prog" --version 2>/dev/null` // '';
	return $v =~ /PostgreSQL\)?\s+(\d+)/ ? $1 : '';
}

# The old major: the programs first in PATH (the framework's too).
my $OLD_BIN;
foreach my $d (split /:/, $ENV{PATH})
{
	if ($d ne '' && -x "$d/initdb" && -x "$d/pg_ctl")
	{
		$OLD_BIN = $d;
		last;
	}
}
BAIL_OUT('no initdb in PATH') unless defined $OLD_BIN;
my $OLD_MAJOR = major_of("$OLD_BIN/initdb");
BAIL_OUT("no major version from $OLD_BIN/initdb") if $OLD_MAJOR eq '';
my $BUILDS = $ENV{GRIDHA_PG_BUILDS} // "$REPO/../shared/pg";

sub tarball_of
{
	my ($m) = @_;
	my @t = glob("$BUILDS/pg$m*-debian12-x86_64.tar.xz");
	return @t ? $t[0] : undef;
}

# The pairs: $new_config{major} is its pg_config, 'tarball', or '' ($why
# says why).
my (@majors, %new_config, %why);
foreach my $m ($OLD_MAJOR + 1 .. 17)
{
	push @majors, $m;
	$new_config{$m} = '';
	$why{$m} = "no PostgreSQL $m tree";
}
if (($ENV{GRIDHA_NEW_PG_CONFIGS} // '') ne '')
{
	foreach my $c (split ' ', $ENV{GRIDHA_NEW_PG_CONFIGS})
	{
		my $m = major_of($c);
		if ($m ne '' && $m > $OLD_MAJOR)
		{
			push @majors, $m unless exists $new_config{$m};
			$new_config{$m} = $c;
		}
	}
	foreach my $m (@majors)
	{
		$why{$m} = "no PostgreSQL $m in GRIDHA_NEW_PG_CONFIGS"
		  if $new_config{$m} eq '';
	}
}
else
{
	foreach my $m (@majors)
	{
		if (major_of("/opt/pg$m/bin/pg_config") eq $m)
		{
			$new_config{$m} = "/opt/pg$m/bin/pg_config";
		}
		elsif (defined tarball_of($m))
		{
			$new_config{$m} = 'tarball';
		}
		else
		{
			$why{$m} = "no PostgreSQL $m tree in /opt/pg$m nor in $BUILDS";
		}
	}
}

if (!@majors)
{
	plan tests => 1;
  SKIP:
	{
		skip "pg_upgrade from PostgreSQL $OLD_MAJOR: no newer major than $OLD_MAJOR is supported yet", 1;
	}
	exit 0;
}
plan tests => 2 + $PER_PAIR * scalar(@majors);

my $TMP = PostgreSQL::Test::Utils::tempdir('pgu');
my $P_LEDGER = PostgreSQL::Test::Cluster::get_free_port();
my $LEDGER = "http://127.0.0.1:$P_LEDGER";
my $ledger;

END
{
	if ($ledger)
	{
		$ledger->kill_kill(grace => 5);
		$ledger = undef;
	}
}

sub slurp
{
	my ($f) = @_;
	return -f $f ? PostgreSQL::Test::Utils::slurp_file($f) : '';
}

sub write_file
{
	my ($f, $text) = @_;
	open my $fh, '>', $f or die "$f: $!";
	print $fh $text;
	close $fh;
}

# diag_lines(TEXT, N): the first N lines of TEXT as diagnostics.
sub diag_lines
{
	my ($text, $n) = @_;
	my @l = split /\n/, $text // '';
	splice(@l, $n) if @l > $n;
	diag(join("\n", @l)) if @l;
}

# diag_tail(TEXT, N): the last N lines of TEXT as diagnostics.
sub diag_tail
{
	my ($text, $n) = @_;
	my @l = split /\n/, $text // '';
	splice(@l, 0, @l - $n) if @l > $n;
	diag(join("\n", @l)) if @l;
}

# query($node, SQL): what SQL prints in gridha_pgu, its errors after it (a
# statement timeout: after a pg_upgrade that went wrong, a row may name a
# transaction the new cluster thinks is still running).
sub query
{
	my ($node, $sql) = @_;
	my ($out, $err, $timed_out) = ('', '', 0);
	$node->psql($DB, "SET statement_timeout = '60s';\n$sql",
		stdout => \$out, stderr => \$err, on_error_stop => 1,
		timeout => $PostgreSQL::Test::Utils::timeout_default,
		timed_out => \$timed_out);
	$err .= "psql timed out (a statement that ignored statement_timeout)" if $timed_out;
	return $err eq '' ? $out : "$out\n$err";
}

# sqlstate($node, SQL): the SQLSTATE the statement raises, or "ok".
sub sqlstate
{
	my ($node, $sql) = @_;
	my ($out, $err, $timed_out) = ('', '', 0);
	$node->psql($DB, $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-v', 'VERBOSITY=sqlstate' ],
		timeout => $PostgreSQL::Test::Utils::timeout_default,
		timed_out => \$timed_out);
	return 'timed out' if $timed_out;
	return 'ok' if $err eq '';
	return $1 if $err =~ /ERROR:\s+([0-9A-Z]{5})/;
	return $err;
}

# start_ledger(LOG): the test ledger on P_LEDGER (the URL the targets
# name), logging to LOG.
sub start_ledger
{
	my ($log) = @_;
	unlink "$log.port";
	$ledger = IPC::Run::start(
		[
			'python3', "$REPO/test/dlt/ledger.py",
			'--port', $P_LEDGER, '--port-file', "$log.port",
			'--log', $log, '--commit-delay', '0.2',
			'--max-lifetime', '900'
		],
		'>', "$log.out", '2>&1');
	foreach (1 .. 150)
	{
		last if -s "$log.port";
		select(undef, undef, undef, 0.1);
	}
	diag("the ledger did not start: " . slurp("$log.out")) unless -s "$log.port";
}

sub stop_ledger
{
	return unless $ledger;
	$ledger->signal('TERM');
	$ledger->finish;
	$ledger = undef;
}

# conf($node, WORKERS): the settings both clusters share, and
# gridha.workers (extra.conf in the data directory, read last, may change
# it).
sub conf
{
	my ($node, $workers) = @_;
	$node->append_conf('postgresql.conf', qq{
# --- test/t/018_pg_upgrade.pl ---
synchronous_commit = off
log_statement = none
shared_preload_libraries = 'gridha'
max_worker_processes = 16
gridha.database = '$DB'
# empty: the bootstrap superuser, which may connect in binary-upgrade
# mode (a worker of another role could not); the drain sets WORKER_ROLE
gridha.worker_role = ''
gridha.naptime = '100ms'
gridha.monitor_interval = '200ms'
gridha.renew_interval = '500ms'
gridha.soft_expiry = '5s'
gridha.hard_expiry = '10s'
gridha.workers = $workers
include_if_exists = 'extra.conf'
});
}

my @INITDB = (extra => [ '--encoding=UTF8', '--locale=C.UTF-8' ]);

# ---------------------------------------------------------------------------
# old: the cluster of the old major

my $old = PostgreSQL::Test::Cluster->new('old');
$old->init(@INITDB);
conf($old, 0);
$old->start;
$old->safe_psql('postgres', qq{
CREATE DATABASE $DB;
CREATE ROLE $WORKER_ROLE LOGIN IN ROLE pg_read_all_data, pg_write_all_data;
});

my ($setup_out, $setup_err) = ('', '');
my $setup_rc = $old->psql($DB, <<"EOF", stdout => \$setup_out, stderr => \$setup_err, on_error_stop => 1);
SET client_min_messages = warning;
SET gridha.balance_claims = off;
SET gridha.session_liveness = off;
SET gridha.soft_expiry = '1h';
SET gridha.hard_expiry = '1h';
CREATE EXTENSION gridha;
GRANT gridha_submitter TO $WORKER_ROLE;

-- a plain table, beside gridha's
CREATE SCHEMA pgu;
CREATE TABLE pgu.plain (i integer PRIMARY KEY, t text);
INSERT INTO pgu.plain SELECT i, md5(i::text) FROM generate_series(1, 100) i;

-- the function target: what it applies, in order
CREATE TABLE pgu.applied (pos bigserial PRIMARY KEY, sid text, bid text, epoch bigint);
CREATE FUNCTION pgu.sub(service_id text, batch_id text, payload bytea, epoch bigint)
RETURNS text LANGUAGE sql AS \$\$
    INSERT INTO pgu.applied (sid, bid, epoch) VALUES (\$1, \$2, \$4) RETURNING 'accepted'
\$\$;
CREATE FUNCTION pgu.stat(batch_ids text[])
RETURNS TABLE (batch_id text, status text) LANGUAGE sql AS \$\$
    SELECT a.bid, 'COMMITTED' FROM pgu.applied a WHERE a.bid = ANY (\$1)
\$\$;

UPDATE gridha.targets
   SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
       status_url = '$LEDGER/batch_statuses?id={batch_ids}'
 WHERE target = 'default';
INSERT INTO gridha.targets (target, submit_function, status_function)
VALUES ('fn', 'pgu.sub(text,text,bytea,bigint)', 'pgu.stat(text[])');

-- X: seven services, their heads left in seven statuses
SELECT count(gridha.enqueue(s, s || '-b' || b, convert_to(s || ' batch ' || b, 'UTF8')))
  FROM unnest(ARRAY['x-sub', 'x-pend', 'x-valid', 'x-unk', 'x-del', 'x-com', 'x-inv']) s,
       generate_series(1, 3) b;
SELECT count(*) FROM gridha.acquire_claims('$X');
CREATE TEMP TABLE h AS SELECT * FROM gridha.next_batches('$X', 10);
SELECT gridha.report_submission('$X', service_id, batch_id, epoch, 'accepted')
  FROM h WHERE service_id IN ('x-pend', 'x-valid', 'x-unk', 'x-com');
SELECT gridha.report_status('$X', service_id, batch_id, epoch,
                            CASE service_id WHEN 'x-valid' THEN 'VALID' WHEN 'x-unk' THEN 'UNKNOWN'
                                            ELSE 'COMMITTED' END)
  FROM h WHERE service_id IN ('x-valid', 'x-unk', 'x-com');
SELECT gridha.report_submission('$X', service_id, batch_id, epoch,
                                CASE service_id WHEN 'x-del' THEN 'delayed' ELSE 'rejected' END,
                                'held back by the test')
  FROM h WHERE service_id IN ('x-del', 'x-inv');

-- fence: A holds it at epoch 1 and hands its head out, its lease runs out,
-- B takes it (epoch 2)
SELECT count(gridha.enqueue('fence', 'fence-b' || b, '\\x0e')) FROM generate_series(1, 2) b;
SELECT count(*) FROM gridha.acquire_claims('$A');
SELECT count(*) FROM gridha.next_batch('$A');
UPDATE gridha.instances SET soft_expiry = now() - interval '1 hour', hard_expiry = now() - interval '1 minute'
 WHERE instance_id = '$A';
SELECT count(*) FROM gridha.acquire_claims('bbbbbbbb-0000-0000-0000-00000000000b');

-- queued work on both targets, nobody's yet
SELECT count(gridha.enqueue(format('u%s', s), format('u%s-b%s', s, b), convert_to(format('u %s/%s', s, b), 'UTF8')))
  FROM generate_series(1, 4) b, generate_series(1, 5) s;
SELECT count(gridha.enqueue(format('f%s', s), format('f%s-b%s', s, b), '\\x0f', 'fn'))
  FROM generate_series(1, 3) b, generate_series(1, 3) s;

SELECT gridha.create_id_sequence('pgu_ids', 100, 2);
EOF

# ATTVER_SQL: how many user columns carry the old build's pg_attver
# attribute option (see the header); CLEAR_SQL clears them.
my $ATTVER_SQL = q{SELECT count(*) FROM pg_attribute
             WHERE attrelid >= 16384 AND array_to_string(attoptions, ',') ~ '(^|,)pg_attver='};
my $CLEAR_SQL = q{UPDATE pg_attribute SET attoptions = NULLIF(ARRAY(
               SELECT o FROM unnest(attoptions) o WHERE o !~ '^pg_attver='), '{}')
            WHERE attrelid >= 16384 AND array_to_string(attoptions, ',') ~ '(^|,)pg_attver='};
my $ATTVER = $old->safe_psql($DB, $ATTVER_SQL);
if ($ATTVER > 0)
{
	diag("the old build stamped pg_attver on $ATTVER columns of $DB: cleared in every database (see the header)");
	foreach my $d (split /\n/,
		$old->safe_psql('postgres', 'SELECT datname FROM pg_database WHERE datallowconn'))
	{
		$old->safe_psql($d, $CLEAR_SQL);
	}
}
my $OLD_IDS = query($old, q{SELECT array_agg(gridha.reserve_ids('pgu_ids', n) ORDER BY n) FROM (VALUES (40), (30), (60)) v (n)});
diag(query($old, 'SELECT status, count(*) FROM gridha.batches GROUP BY 1 ORDER BY 1'));
ok( $setup_rc == 0
	  && $OLD_IDS =~ /^\{.*\}$/
	  && query($old, q{SELECT string_agg(DISTINCT status::text, ',' ORDER BY status::text) FROM gridha.batches})
	  eq 'committed,delayed,invalid,pending,queued,submitting,unknown,valid'
	  && query($old, q{SELECT claimant || '/' || epoch FROM gridha.service_claims WHERE service_id = 'fence'})
	  eq 'bbbbbbbb-0000-0000-0000-00000000000b/2',
	"old: PostgreSQL $OLD_MAJOR cluster with gridha: URL and function targets, claims held, batches in every status, an id sequence (ids $OLD_IDS)"
);
diag("setup: $setup_err") unless $setup_rc == 0;

my $STATE_SQL = slurp("$REPO/test/dba/dump_state.sql");
$STATE_SQL =~ s/;?\s*$//;
my $old_sub_oid = query($old, q{SELECT 'pgu.sub(text,text,bytea,bigint)'::regprocedure::oid});
my $old_rows = query($old, "COPY ($STATE_SQL) TO STDOUT");
my $old_plain = query($old, 'COPY (SELECT * FROM pgu.plain ORDER BY i) TO STDOUT');
write_file("$TMP/old.tsv", "$old_rows\n");
write_file("$TMP/old-plain.tsv", "$old_plain\n");
my $stopped = $old->stop('fast', fail_ok => 1);
# from now on every start of the old cluster (pg_upgrade's) asks for workers
write_file($old->data_dir . '/extra.conf', "gridha.workers = 2\n");
my $n_rows = () = $old_rows =~ /\n/g;
$n_rows++ if $old_rows ne '';
ok($stopped && $old_rows ne '' && $old_rows !~ /ERROR/,
	"old: its rows recorded ($n_rows gridha rows, the plain table), stopped; its configuration now asks for two workers"
);

# ---------------------------------------------------------------------------
# per pair

# skip_rest(PAIR, N, WHY): the pair's last N tests, skipped.
sub skip_rest
{
	my ($pair, $n, $why) = @_;
  SKIP:
	{
		skip "$pair: $why", $n;
	}
}

# tree_copy(PG_CONFIG, DEST): a copy of the installation PG_CONFIG names
# under DEST (each directory at DEST/<its path>, so that the copy finds
# its files relative to its programs), without gridha; returns the
# copy's pg_config, or undef.
sub tree_copy
{
	my ($cfg, $dest) = @_;
	my %dir;
	foreach my $k (qw(bindir libdir pkglibdir sharedir includedir pkgincludedir includedir-server))
	{
		my $d = `"$cfg" --$k`;
		chomp $d;
		return undef if $? != 0 || $d eq '';
		$dir{$k} = $d;
		next if -e "$dest$d";
		make_path(dirname("$dest$d"));
		return undef if system('cp', '-a', $d, "$dest$d") != 0;
	}
	unlink "$dest$dir{pkglibdir}/gridha.so";
	unlink glob("$dest$dir{sharedir}/extension/gridha[.-]*");
	return "$dest$dir{bindir}/pg_config";
}

# run_to(FILE, DIR, ENV, CMD...): CMD run in DIR with ENV added, its output
# into FILE; its exit status.
sub run_to
{
	my ($file, $dir, $env, @cmd) = @_;
	local %ENV = %ENV;
	foreach my $k (keys %$env)
	{
		if (defined $env->{$k})
		{
			$ENV{$k} = $env->{$k};
		}
		else
		{
			delete $ENV{$k};
		}
	}
	print "# Running: " . join(' ', @cmd) . "\n";
	IPC::Run::run(\@cmd, '<', \undef, '>', $file, '2>&1',
		init => sub { chdir $dir or die "$dir: $!" });
	return $?;
}

my $plain_n = 0;

sub run_pair
{
	my ($m) = @_;
	my $PAIR = "$OLD_MAJOR -> $m";
	my $cfg = $new_config{$m};
	my $PAIRDIR = "$TMP/pair-$m";
	make_path($PAIRDIR);
	my $built;

	# --- build: a copy of the new tree (the tarball's, unpacked, is its
	# own), gridha built from a copy of this source tree and installed
	# into it
	if ($cfg eq 'tarball')
	{
		my $tarball = tarball_of($m);
		make_path("$TMP/trees");
		$cfg = "$TMP/trees/pg$m/bin/pg_config";
		if (system('tar', '-C', "$TMP/trees", '-xJf', $tarball) != 0 || !-x $cfg)
		{
			skip_rest($PAIR, $PER_PAIR, "its tree could not be unpacked from $BUILDS");
			return;
		}
		unlink "$TMP/trees/pg$m/lib/postgresql/gridha.so";
	}
	else
	{
		$cfg = tree_copy($cfg, "$TMP/tree-$m");
	}
	my ($NEWBIN, $NEWLIB, $INST) = ('', '', '');
	if (defined $cfg)
	{
		($NEWBIN = `"$cfg" --bindir`) =~ s/\n//;
		($NEWLIB = `"$cfg" --libdir`) =~ s/\n//;
		$INST = dirname($NEWBIN);
		my %E = (LD_LIBRARY_PATH => $NEWLIB . (($ENV{LD_LIBRARY_PATH} // '') ne '' ? ":$ENV{LD_LIBRARY_PATH}" : ''));
		make_path("$TMP/build-$m");
		my $pkglib = `"$cfg" --pkglibdir`;
		chomp $pkglib;
		$built = system('sh', '-c',
			q{tar -C "$1" --exclude='*.o' --exclude='*.so' --exclude='*.bc' --exclude=.pg_build }
			  . q{--exclude=client/gridha-client --exclude=client/test_dlt_http }
			  . q{-cf - Makefile gridha.control README.md src sql client | tar -C "$2" -xf -},
			'sh', $REPO, "$TMP/build-$m") == 0
		  && run_to("$PAIRDIR/build.log", "$TMP/build-$m",
			{ %E, MAKEFLAGS => undef, MFLAGS => undef, MAKELEVEL => undef },
			'make', '-C', "$TMP/build-$m", "PG_CONFIG=$cfg", 'install') == 0
		  && -f "$pkglib/gridha.so";
	}
	ok($built,
		"$PAIR: gridha built from this tree and installed into a copy of PostgreSQL ${m}'s tree ($new_config{$m})");
	diag_tail(slurp("$PAIRDIR/build.log"), 20) unless $built;
	if (!defined $cfg)
	{
		skip_rest($PAIR, $PER_PAIR - 1, "its tree could not be copied");
		return;
	}
	my %E = (LD_LIBRARY_PATH => $NEWLIB . (($ENV{LD_LIBRARY_PATH} // '') ne '' ? ":$ENV{LD_LIBRARY_PATH}" : ''));

	# --- new: its configuration preloads gridha with two workers
	my $new = PostgreSQL::Test::Cluster->new("new_$m", install_path => $INST);
	$new->init(@INITDB);
	conf($new, 2);
	my $NEWDATA = $new->data_dir;
	my ($ver) = ($new->pg_version =~ /^(\d+)/);
	ok( $ver eq $m
		  && slurp("$NEWDATA/postgresql.conf") =~ /^shared_preload_libraries = 'gridha'$/m
		  && slurp("$NEWDATA/postgresql.conf") =~ /^gridha.workers = 2$/m,
		"$PAIR: a new PostgreSQL $m cluster whose configuration preloads gridha with gridha.workers = 2 serving $DB"
	);

	# --- plain: pg_upgrade without gridha (see the header)
	my $plain_upgrade = sub {
		my ($clear) = @_;
		$plain_n++;
		my $po = PostgreSQL::Test::Cluster->new("plain_old_$plain_n");
		$po->init(@INITDB);
		$po->start;
		my $rc = $po->psql('postgres', qq{
CREATE TABLE plain (i integer PRIMARY KEY, t text);
INSERT INTO plain SELECT i, md5(i::text) FROM generate_series(1, 100) i;
} . ($clear ? "$CLEAR_SQL;" : ''), on_error_stop => 1);
		$po->stop;
		my $pn = PostgreSQL::Test::Cluster->new("plain_new_$plain_n", install_path => $INST);
		$pn->init(@INITDB);
		my $out = "$PAIRDIR/plain" . ($clear ? '-cleared' : '') . '.out';
		$rc ||= run_to($out, $PAIRDIR, \%E, "$NEWBIN/pg_upgrade",
			'-b', $OLD_BIN, '-B', $NEWBIN, '-d', $po->data_dir, '-D', $pn->data_dir,
			'-p', $po->port, '-P', $pn->port, '-s', $pn->host);
		my $logs = '';
		find(sub { $logs .= slurp($_) if /\.log$/ }, $pn->data_dir . '/pg_upgrade_output.d')
		  if -d $pn->data_dir . '/pg_upgrade_output.d';
		open my $fh, '>>', $out;
		print $fh $logs;
		close $fh;
		remove_tree($po->data_dir, $pn->data_dir);
		return $rc == 0;
	};
	my $plain_ok;
	if ($ATTVER > 0)
	{
		$plain_ok = !$plain_upgrade->(0)
		  && slurp("$PAIRDIR/plain.out") =~ /unrecognized parameter "pg_attver"/
		  && $plain_upgrade->(1);
		ok($plain_ok,
			"$PAIR: a cluster holding only a plain table: pg_upgrade fails as PostgreSQL ${OLD_MAJOR}'s build leaves it (unrecognized parameter \"pg_attver\": an attribute option that build stamps on every column and $m does not know; not gridha's), and passes once the test clears that option, as it did in its gridha cluster"
		);
	}
	else
	{
		$plain_ok = $plain_upgrade->(0);
		ok($plain_ok,
			"$PAIR: a cluster holding only a plain table: pg_upgrade works (the old build stamps no pg_attver option: nothing cleared)"
		);
	}
	unless ($plain_ok)
	{
		diag_lines(join("\n",
				grep { /error|fatal|failure/i }
				  map { split /\n/, slurp($_) } glob("$PAIRDIR/plain*.out")), 10);
	}

	# --- upgrade
	start_ledger("$PAIRDIR/ledger.log");
	my $upgrade = sub {
		my ($out, @extra) = @_;
		return run_to($out, $PAIRDIR, \%E, "$NEWBIN/pg_upgrade",
			'-b', $OLD_BIN, '-B', $NEWBIN, '-d', $old->data_dir, '-D', $NEWDATA,
			'-p', $old->port, '-P', $new->port, '-s', $new->host, @extra);
	};
	my $rc = $upgrade->("$PAIRDIR/check.out", '--check');
	ok($rc == 0, "$PAIR: pg_upgrade --check accepts the cluster with gridha installed");
	if ($rc != 0)
	{
		diag(slurp("$PAIRDIR/check.out"));
		stop_ledger();
		skip_rest($PAIR, $PER_PAIR - 4, 'pg_upgrade --check failed');
		return;
	}

	$rc = $upgrade->("$PAIRDIR/upgrade.out", '--retain');
	ok($rc == 0, "$PAIR: pg_upgrade (copy mode) of the cluster with gridha");
	if ($rc != 0)
	{
		diag_tail(slurp("$PAIRDIR/upgrade.out"), 30);
		find(sub { diag_lines(slurp($_), 40) if /\.log$/ }, "$NEWDATA/pg_upgrade_output.d")
		  if -d "$NEWDATA/pg_upgrade_output.d";
		stop_ledger();
		skip_rest($PAIR, $PER_PAIR - 5, 'pg_upgrade failed');
		return;
	}

	my $ledger_log = slurp("$PAIRDIR/ledger.log");
	my $n = () = $ledger_log =~ /"event": *"(?:post|status_query)"/g;
	ok(-s "$PAIRDIR/ledger.log" && $n == 0,
		"$PAIR: the ledger the targets name received nothing during pg_upgrade (POSTs and status queries: $n)");

	# The servers pg_upgrade started (old and new) log to one file.
	my $slog;
	find(sub { $slog //= $File::Find::name if $_ eq 'pg_upgrade_server.log' }, "$NEWDATA/pg_upgrade_output.d")
	  if -d "$NEWDATA/pg_upgrade_output.d";
	my $stext = defined $slog ? slurp($slog) : '';
	PostgreSQL::Test::Utils::append_to_file($new->logfile, $stext);
	$n = () = $stext =~ /gridha: no background worker is started in binary-upgrade mode/g;
	my $got = () = $stext =~ /background worker "gridha worker|gridha worker .* started as instance|gridha worker .* does not run/g;
	ok(defined $slog && $n >= 2 && $got == 0,
		"$PAIR: the servers pg_upgrade started registered no gridha worker (said so $n times) and none started ($got)");

	# --- rows: started without workers
	write_file("$NEWDATA/extra.conf", "gridha.workers = 0\n");
	if (!$new->start(fail_ok => 1))
	{
		fail("$PAIR: the upgraded cluster starts");
		stop_ledger();
		skip_rest($PAIR, $PER_PAIR - 8, 'the upgraded cluster did not start');
		return;
	}
	my $new_rows = query($new, "COPY ($STATE_SQL) TO STDOUT");
	my $new_plain = query($new, 'COPY (SELECT * FROM pgu.plain ORDER BY i) TO STDOUT');
	write_file("$PAIRDIR/new.tsv", "$new_rows\n");
	write_file("$PAIRDIR/new-plain.tsv", "$new_plain\n");
	my $same = $new_rows eq $old_rows && $new_plain eq $old_plain;
	ok($same,
		"$PAIR: every row of gridha's tables (batches, claims, instances, targets with their function signatures, leases, ids, rate state) and the plain table equals the old cluster's"
	);
	unless ($same)
	{
		my $d = `diff -u "$TMP/old.tsv" "$PAIRDIR/new.tsv"; diff -u "$TMP/old-plain.tsv" "$PAIRDIR/new-plain.tsv"`;
		diag_lines($d, 40);
	}
	diag("pgu.sub: OID $old_sub_oid in the old cluster, "
		  . query($new, q{SELECT 'pgu.sub(text,text,bytea,bigint)'::regprocedure::oid})
		  . ' in the new');

	$got = sqlstate($new,
		qq{SELECT gridha.report_submission('$A', 'fence', 'fence-b1', 1, 'accepted')});
	ok($got eq 'RG001',
		"$PAIR: A's write under epoch 1, B having taken 'fence' at epoch 2 before the upgrade, is refused ($got)");

	$got = query($new, qq{SELECT count(*) FROM unnest('$OLD_IDS'::int8range[]) o,
	                (SELECT gridha.reserve_ids('pgu_ids', n) AS r FROM (VALUES (40), (30), (60), (5)) v (n)) x
	               WHERE o.o && x.r});
	ok($got eq '0',
		"$PAIR: ids reserved after the upgrade never meet those reserved before (overlaps: $got)");

	# --- drain: the old instances' sessions are gone; an operator ends their
	# leases, so that the workers take everything, the submitting head too.
	query($new, q{UPDATE gridha.instances SET soft_expiry = now() - interval '1 minute',
	                                   hard_expiry = now() - interval '1 second'
	         WHERE soft_expiry IS NOT NULL});
	my $expected = query($new, q{SELECT b.service_id || E'\t' || b.batch_id FROM gridha.batches b
	                   JOIN gridha.service_claims c USING (service_id)
	                  WHERE c.target = 'default' AND b.status NOT IN ('committed', 'invalid')
	                  ORDER BY b.service_id, b.seq});
	write_file("$PAIRDIR/expected.tsv", "$expected\n");
	my $n_all = query($new, 'SELECT count(*) FROM gridha.batches');
	write_file("$NEWDATA/extra.conf", "gridha.worker_role = '$WORKER_ROLE'\n");
	$new->stop;
	ok( $new->start(fail_ok => 1)
		  && $new->poll_query_until($DB,
			'SELECT count(*) = 2 FROM gridha.workers WHERE instance_id IS NOT NULL'),
		"$PAIR: the upgraded cluster restarted as configured: two workers serve $DB");

	ok( $new->poll_query_until($DB,
			q{SELECT count(*) FROM gridha.batches WHERE status IN ('committed', 'invalid')},
			$n_all),
		"$PAIR: the workers drain every batch to a final status ($n_all batches)");
	diag(query($new, 'SELECT status, count(*) FROM gridha.batches GROUP BY 1 ORDER BY 1'));

	my @expected = split /\n/, $expected;
	my $n_expected = scalar(@expected);
	$rc = run_to("$PAIRDIR/expected.tsv.check", $PAIRDIR, {},
		'python3', "$REPO/test/dlt/check_log.py", '--expected', "$PAIRDIR/expected.tsv",
		'--require-all', '--one-in-flight', "$PAIRDIR/ledger.log");
	ok($rc == 0,
		"$PAIR: the URL target's batches ($n_expected) arrived at the ledger in enqueue order, one in flight per service");
	diag_lines(slurp("$PAIRDIR/expected.tsv.check") =~ s/^.*?(?=^violations)//msr, 11) if $rc != 0;

	$got = query($new, q{SELECT string_agg(l, '|' ORDER BY sid) FROM (
	                SELECT sid, string_agg(bid, ',' ORDER BY pos) AS l FROM pgu.applied GROUP BY sid) s});
	ok($got eq 'f1-b1,f1-b2,f1-b3|f2-b1,f2-b2,f2-b3|f3-b1,f3-b2,f3-b3',
		"$PAIR: the function target's batches applied by pgu.sub, resolved from its stored signature in the new cluster, each once, in order ($got)"
	);

	# --- binary: as pg_upgrade starts a server (postgres -b; the framework
	# has no start option for it, so its pg_ctl is called here), the
	# workers' role the superuser (as during pg_upgrade)
	write_file("$NEWDATA/extra.conf", '');
	$new->stop;
	# what the binary-upgrade start logs, apart from the stop before it (a
	# worker that a shutdown ends exits with 1, and the postmaster logs it)
	my $logged_before = -s $new->logfile;
	if (run_to("$PAIRDIR/start-b.out", $PAIRDIR, \%E, "$NEWBIN/pg_ctl", '-w', '-D', $NEWDATA,
			'-l', $new->logfile, '-o', '-b', 'start') == 0)
	{
		$got = sqlstate($new, q{SELECT gridha.start_worker('in binary-upgrade mode')});
		my $msg = query($new, 'SELECT gridha.start_worker()');
		ok($msg =~ /gridha workers cannot be started in binary-upgrade mode/ && $got eq '55000',
			"$PAIR: in binary-upgrade mode gridha.start_worker() refuses (55000: gridha workers cannot be started in binary-upgrade mode)"
		);
		sleep 1;
		$got = query($new, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'gridha worker'});
		my $since = substr(slurp($new->logfile), $logged_before);
		ok( $got eq '0'
			  && query($new, 'SHOW gridha.workers') eq '2'
			  && $since !~ /background worker "gridha worker/,
			"$PAIR: in binary-upgrade mode no gridha worker runs although gridha.workers = 2 ($got)");
		run_to("$PAIRDIR/stop-b.out", $PAIRDIR, \%E, "$NEWBIN/pg_ctl", '-w', '-D', $NEWDATA,
			'-m', 'fast', 'stop');
	}
	else
	{
		fail("$PAIR: the new cluster starts in binary-upgrade mode");
		diag(slurp("$PAIRDIR/start-b.out"));
		skip_rest($PAIR, 1, 'it did not start');
	}
	stop_ledger();
}

foreach my $m (@majors)
{
	if ($new_config{$m} eq '')
	{
		skip_rest("$OLD_MAJOR -> $m", $PER_PAIR, $why{$m});
		next;
	}
	run_pair($m);
}
