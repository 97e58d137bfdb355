#!/usr/bin/env bash
# test/suites/31_citus.sh: beside Citus, gridha is never silently wrong: once
# its tables are Citus tables every call refuses (RG030) instead of reading
# and writing the coordinator's empty shells, and a session calling many
# gridha functions beside Citus keeps its relcache callback slots (issue 43,
# item 1; docs/citus.md).
#
# Citus exists for PostgreSQL 15 only (../shared/citus). The suite uses the
# PostgreSQL 15 that GRIDHA_CITUS_PG_CONFIG names (default: the system's,
# /usr/lib/postgresql/15/bin/pg_config). When that tree has no Citus and the
# tarball ../shared/citus/citus-*-pg15-debian12-x86_64.tar.xz (relative to
# the repository; GRIDHA_CITUS_BUILDS names another directory) exists, the
# suite installs it into the tree as root, as CI does (GRIDHA_CITUS_INSTALL=0
# never installs). Without Citus every test is reported skipped, with the
# reason.
#
# Steps, in the order they run:
#
#   build     gridha built from this tree (a copy: the run's own objects
#             stay its major's) and installed into the Citus tree, unless
#             the run's PG_CONFIG is that tree (the run installed it)
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
# The clusters are removed on any exit; their logs are scanned for crashes
# by test/run.sh.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-citus.XXXXXX)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
FAILED=0
NTESTS=10
DONE=0

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan $NTESTS

CFG=${GRIDHA_CITUS_PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
BUILDS=${GRIDHA_CITUS_BUILDS:-$REPO/../shared/citus}
DIR=
PORTS=()

t_ok() {
	ok "$@"
	DONE=$((DONE + 1))
}
t_not_ok() {
	not_ok "$@"
	DONE=$((DONE + 1))
}
t_check() {
	if [ "$1" -eq 0 ]; then t_ok "$2"; else t_not_ok "$2"; fi
}

# skip_rest WHY: every test not run yet, skipped; then the end.
skip_rest() {
	while [ "$DONE" -lt "$NTESTS" ]; do
		DONE=$((DONE + 1))
		skip_test "citus: test $DONE of $NTESTS" "$1"
	done
	exit $((FAILED > 0))
}

cleanup() {
	local n
	if [ -n "$DIR" ]; then
		for n in 0 1 2; do
			[ -f "$DIR/n$n/postmaster.pid" ] &&
				gridha_as_pg env -u LD_LIBRARY_PATH "$CBIN/pg_ctl" -D "$DIR/n$n" -m immediate -w stop >/dev/null 2>&1
		done
		[ "${GRIDHA_KEEP_TMP:-0}" = 1 ] || rm -rf "$DIR"
	fi
}
trap cleanup EXIT

# ---------------------------------------------------------------------------
# Citus: found, or installed from the tarball, or every test skipped

if [ ! -x "$CFG" ]; then
	skip_rest "no PostgreSQL 15 at $CFG (GRIDHA_CITUS_PG_CONFIG): Citus exists for PostgreSQL 15 only"
fi
CMAJOR=$("$CFG" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
[ "$CMAJOR" = 15 ] || skip_rest "$CFG is PostgreSQL $CMAJOR; Citus here exists for 15 only"
CBIN=$("$CFG" --bindir)
CLIB=$("$CFG" --pkglibdir)
if [ ! -e "$CLIB/citus.so" ]; then
	tarball=$(compgen -G "$BUILDS/citus-*-pg15-debian12-x86_64.tar.xz" | head -n 1)
	# the tarball holds usr/lib/postgresql/15/...: it unpacks at the root
	# of the tree, / for the system's
	root=${CFG%/usr/lib/postgresql/15/bin/pg_config}
	if [ -n "$tarball" ] && [ "$(id -u)" -eq 0 ] && [ "${GRIDHA_CITUS_INSTALL:-1}" != 0 ] &&
		[ "$root/usr/lib/postgresql/15/bin/pg_config" = "$CFG" ]; then
		echo "# installing $(basename "$tarball") into ${root:-/}"
		tar -C "${root:-/}" -xJf "$tarball" 2>&1 | sed 's/^/# tar: /'
	fi
	[ -e "$CLIB/citus.so" ] ||
		skip_rest "Citus is not installed in $CLIB (nor installable: no $BUILDS/citus-*-pg15-debian12-x86_64.tar.xz, not root, or GRIDHA_CITUS_INSTALL=0)"
fi

# ---------------------------------------------------------------------------
# build

if [ -n "${PG_CONFIG:-}" ] && [ "$(realpath "$PG_CONFIG")" = "$(realpath "$CFG")" ] &&
	[ -e "$CLIB/gridha.so" ]; then
	t_ok "build: gridha is the run's own build, installed into PostgreSQL 15 ($CFG)"
else
	mkdir -p "$WORK/build"
	tar -C "$REPO" --exclude='*.o' --exclude='*.so' --exclude='*.bc' --exclude=.pg_build \
		--exclude=client/gridha-client --exclude=client/test_dlt_http \
		-cf - Makefile gridha.control README.md src sql client | tar -C "$WORK/build" -xf -
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u LD_LIBRARY_PATH \
		make -C "$WORK/build" PG_CONFIG="$CFG" GRIDHA_TEST_HOOKS=1 install >"$WORK/build.log" 2>&1
	rc=$?
	t_check $rc "build: gridha built from this tree and installed into PostgreSQL 15 with Citus ($CFG)"
	if [ "$rc" -ne 0 ]; then
		tail -n 20 "$WORK/build.log" | diag
		skip_rest "gridha could not be built for the Citus tree"
	fi
fi

# ---------------------------------------------------------------------------
# cluster: a coordinator (n0) and two workers (n1, n2)

DIR=$(mktemp -d /tmp/gridha-citus.XXXXXX)
chmod 755 "$DIR"
[ "$(id -u)" -eq 0 ] && chown postgres: "$DIR"
port=$((${PGPORT:-${GRIDHA_BASE_PORT:-5432}} + 30))
cluster_ok=0
for n in 0 1 2; do
	port=$(gridha_free_port "$port") || { cluster_ok=1; break; }
	PORTS[n]=$port
	LOGF[n]=$(gridha_server_log "citus-n$n" "$DIR/n$n.log")
	if ! gridha_as_pg env -u LD_LIBRARY_PATH "$CBIN/initdb" --auth=trust -U postgres --encoding=UTF8 \
			--locale=C.UTF-8 --no-sync -D "$DIR/n$n" >"$WORK/initdb-n$n.log" 2>&1; then
		cluster_ok=1
		diag <"$WORK/initdb-n$n.log"
		break
	fi
	cat >>"$DIR/n$n/postgresql.conf" <<EOF

# --- a node of test/suites/31_citus.sh ---
port = $port
listen_addresses = 'localhost'
unix_socket_directories = '$DIR'
shared_preload_libraries = 'citus,gridha'
max_prepared_transactions = 20
max_worker_processes = 32
fsync = off
synchronous_commit = off
full_page_writes = off
log_line_prefix = '%m [%p] %q%a '
EOF
	if ! gridha_as_pg env -u LD_LIBRARY_PATH "$CBIN/pg_ctl" -D "$DIR/n$n" -l "${LOGF[n]}" -w -t 60 start \
			>"$WORK/start-n$n.log" 2>&1; then
		cluster_ok=1
		tail -n 20 "${LOGF[n]}" | diag
		break
	fi
	port=$((port + 1))
done

# cq N ARG...: psql to node N, database c31 (quiet, unaligned, tuples only)
cq() {
	local n=$1
	shift
	env -u LD_LIBRARY_PATH "$CBIN/psql" -X -q -A -t -h "$DIR" -p "${PORTS[n]}" -U postgres "$@"
}

if [ "$cluster_ok" -eq 0 ]; then
	for n in 0 1 2; do
		cq "$n" -d postgres -c "CREATE DATABASE c31" >>"$WORK/setup.log" 2>&1 &&
			cq "$n" -d c31 -v ON_ERROR_STOP=1 -c "CREATE EXTENSION citus" >>"$WORK/setup.log" 2>&1 ||
			cluster_ok=1
	done
	cq 0 -d c31 -v ON_ERROR_STOP=1 \
		-c "SELECT citus_set_coordinator_host('localhost', ${PORTS[0]})" \
		-c "SELECT citus_add_node('localhost', ${PORTS[1]})" \
		-c "SELECT citus_add_node('localhost', ${PORTS[2]})" \
		-c "CREATE EXTENSION gridha" \
		-c "CREATE ROLE c31_other LOGIN IN ROLE gridha_submitter" >>"$WORK/setup.log" 2>&1 || cluster_ok=1
	[ "$cluster_ok" -eq 0 ] &&
		[ "$(cq 0 -d c31 -c "SELECT count(*) FROM citus_get_active_worker_nodes()")" = 2 ] || cluster_ok=1
fi
t_check $cluster_ok "cluster: a coordinator and two workers (PostgreSQL 15, citus then gridha preloaded), gridha created on the coordinator"
if [ "$cluster_ok" -ne 0 ]; then
	diag <"$WORK/setup.log"
	skip_rest "the Citus cluster did not start"
fi

# ---------------------------------------------------------------------------
# plain: one session calls many gridha functions; citus: a new session keeps
# gridha's verdict on its tables, then distributes them and calls again; each
# other refusal in a session of its own

A=aaaaaaaa-0000-0000-0000-000000000031
cq 0 -d c31 >"$WORK/session.out" 2>&1 <<EOF
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
SELECT 'enqueue:' || gridha.enqueue('s1', 'b1', '\x01') || ',' || gridha.enqueue('s1', 'b2', '\x02')
       || ',' || gridha.enqueue('s2', 'c1', '\x03');
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
cq 0 -d c31 >>"$WORK/session.out" 2>&1 <<EOF
SET client_min_messages = warning;
SELECT 'claimed before:' || count(*) FROM gridha.claimed_batches('$A');
SET citus.enable_unsafe_triggers = on;
SELECT create_distributed_table('gridha.batches', 'service_id');
SELECT create_reference_table('gridha.instances');
SELECT 'distributed:' || string_agg(logicalrelid::text || '/' || partmethod::text, ',' ORDER BY logicalrelid::text)
  FROM pg_dist_partition;
SELECT 'refused next_batch:' || public.c31_error_of('SELECT * FROM gridha.next_batch(''$A'')');
EOF
# refusal LABEL SQL: SQL in a new session; prints LABEL:sqlstate|message
refusal() {
	cq 0 -d c31 >>"$WORK/session.out" 2>&1 <<EOF
SET client_min_messages = warning;
SELECT '$1:' || public.c31_error_of(\$q\$$2\$q\$);
EOF
}
refusal 'refused report_submission' "SELECT gridha.report_submission('$A', 's1', 'b1', 1, 'accepted')"
refusal 'refused report_status' "SELECT gridha.report_status('$A', 's1', 'b1', 1, 'committed')"
refusal 'refused enqueue' "SELECT gridha.enqueue('s1', 'b3', '\\x03')"
refusal 'refused acquire_claims' "SELECT * FROM gridha.acquire_claims('$A')"
refusal 'refused register_instance' "SELECT gridha.register_instance('c31b')"
cq 0 -d c31 >>"$WORK/session.out" 2>&1 <<EOF
SELECT 'state:' || string_agg(service_id || '/' || batch_id || '/' || status, ',' ORDER BY service_id, batch_id)
  FROM gridha.batches;
EOF
line() { sed -n "s/^$1://p" "$WORK/session.out" | head -n 1; }
echo "# session:"
sed 's/^/#   /' "$WORK/session.out"

[ "$(line enqueue)" = "1,2,1" ] && [ "$(line acquire)" = 2 ] &&
	[ "$(line handed)" = "s1/b1/1,s2/c1/1" ] && [ "$(line reported)" = "pending,committed" ] &&
	[ "$(line verify)" = true ] && [ "$(line ids)" = true ] && grep -qx 'plain done' "$WORK/session.out"
t_check $? "plain: beside Citus, with its tables local, one session enqueues, hands out, reports, verifies and reserves ids"

if ! grep -q 'out of relcache_callback_list slots' "${LOGF[@]}" "$WORK/session.out" &&
	grep -qx 'plain done' "$WORK/session.out"; then
	t_ok "plain: the session calling those gridha functions beside Citus lived to its end (no 'out of relcache_callback_list slots')"
else
	t_not_ok "plain: the session calling those gridha functions beside Citus lived to its end (no 'out of relcache_callback_list slots')"
	grep -h 'relcache_callback' "${LOGF[@]}" | head -n 5 | diag
fi

RG030_BATCHES='RG030|gridha.batches is a Citus table (distributed, reference or Citus local), which gridha does not support'
[ "$(line 'distributed')" = "gridha.batches/h,gridha.instances/n" ] && [ "$(line 'refused next_batch')" = "$RG030_BATCHES" ]
t_check $? "citus: gridha.batches distributed, gridha.instances a reference table: next_batch in the session that called gridha before is refused (RG030)"
[ "$(line 'refused report_submission')" = "$RG030_BATCHES" ]
t_check $? "citus: report_submission of the batch in flight is refused (RG030), not answered 'pending'"
[ "$(line 'refused report_status')" = "$RG030_BATCHES" ]
t_check $? "citus: report_status of the batch in flight is refused (RG030), not answered 'committed'"
[ "$(line 'refused enqueue')" = "$RG030_BATCHES" ] && [ "$(line 'refused acquire_claims')" = "$RG030_BATCHES" ] &&
	[ "$(line 'refused register_instance')" = "$RG030_BATCHES" ]
t_check $? "citus: enqueue, acquire_claims and register_instance are refused (RG030)"

# the ownership check: a new session, of a role that does not own A
OTHER=$(env -u LD_LIBRARY_PATH "$CBIN/psql" -X -q -A -t -h "$DIR" -p "${PORTS[0]}" -U c31_other -d c31 \
	-v VERBOSITY=verbose -c "SELECT gridha.renew_claims('$A')" 2>&1)
echo "$OTHER" | diag
echo "$OTHER" | grep -q '^ERROR:  RG030: gridha.batches is a Citus table'
t_check $? "citus: a role that does not own the instance is refused (RG030) in a new session"

[ "$(line state)" = "s1/b1/submitting,s1/b2/queued,s2/c1/committed" ]
t_check $? "citus: the refusals changed nothing: SQL still sees b1 submitting, b2 queued, c1 committed"

[ "$DONE" -eq "$NTESTS" ] || not_ok "the suite ran $DONE of its $NTESTS tests"
exit $((FAILED > 0))
