# shellcheck shell=bash
# test/lib.sh: helpers for gridha's test scripts. Source it, don't run it.
#
# It manages one throwaway PostgreSQL cluster per test run, of the
# installation PG_CONFIG names (default: Debian's PostgreSQL 15,
# /usr/lib/postgresql/15/bin/pg_config); its tools come from PG_CONFIG's
# --bindir, which goes first on PATH:
#
#   gridha_cluster_init              new cluster in a fresh /tmp directory
#   gridha_cluster_start [OPT...]    start it with extra settings
#   gridha_cluster_restart [OPT...]  stop, then start with (other) settings
#   gridha_cluster_stop [MODE]       stop it (fast by default)
#   gridha_cluster_wait [SECONDS]    wait until it accepts connections
#   gridha_cluster_cleanup           stop it and remove the directory
#
# OPT is `name=value` or `-c name=value`, e.g.
#   gridha_cluster_restart shared_preload_libraries=gridha max_worker_processes=32
# Settings given to a start replace those of the previous start; the base
# settings (port, socket directory, listen_addresses, logging) always apply.
#
# After gridha_cluster_init these are exported, so psql, pgbench, pg_prove and
# the suites connect without flags:
#   GRIDHA_TEST_DIR  the run's scratch directory (owned by postgres)
#   PGDATA           the data directory           PGHOST  the socket directory
#   PGPORT           the TCP port (127.0.0.1)     PGUSER  postgres
#   GRIDHA_PGLOG     the server log file
#
# The server refuses to run as root, so when we are root every server-side
# command runs as the postgres user through runuser.

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
case $PG_CONFIG in
	*/*) ;;
	*) PG_CONFIG=$(command -v "$PG_CONFIG" || echo "$PG_CONFIG") ;;
esac
# pg_config's own directory until it is installed (a fresh system).
PG_BINDIR=$("$PG_CONFIG" --bindir 2>/dev/null || dirname "$PG_CONFIG")
case "$PATH:" in
	"$PG_BINDIR:"*) ;;
	*) PATH="$PG_BINDIR:$PATH" ;;
esac
export PG_CONFIG PG_BINDIR PATH

# First port probed; later ones are tried when it is taken.
GRIDHA_BASE_PORT=${GRIDHA_BASE_PORT:-54329}

# gridha_log MSG...: a progress line on stderr, so it never mixes with output
# a caller parses.
gridha_log() {
	printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2
}

# gridha_as_pg CMD...: run a command as the server's owner.
gridha_as_pg() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# gridha_port_free PORT: true when nothing listens on 127.0.0.1:PORT and
# nothing can be bound there. Binding (not just connecting) also catches
# ports held by a server that is still starting.
gridha_port_free() {
	python3 - "$1" <<'EOF' 2>/dev/null
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
finally:
    s.close()
EOF
}

# gridha_free_port [FROM]: print the first free port at or after FROM.
gridha_free_port() {
	local port=${1:-$GRIDHA_BASE_PORT}
	local last=$((port + 200))
	while [ "$port" -le "$last" ]; do
		if gridha_port_free "$port"; then
			echo "$port"
			return 0
		fi
		port=$((port + 1))
	done
	echo "gridha_free_port: no free port in ${1:-$GRIDHA_BASE_PORT}..$last" >&2
	return 1
}

# gridha_cluster_init: create and initdb a cluster in a new /tmp directory.
# Exports the variables listed at the top; does not start it.
gridha_cluster_init() {
	GRIDHA_TEST_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gridha-test.XXXXXX")
	# Readable by all so any tool can reach the socket; the data directory
	# itself stays 0700 as the server demands.
	chmod 755 "$GRIDHA_TEST_DIR"
	if [ "$(id -u)" -eq 0 ]; then
		chown postgres: "$GRIDHA_TEST_DIR"
	fi
	PGDATA=$GRIDHA_TEST_DIR/data
	PGHOST=$GRIDHA_TEST_DIR
	PGUSER=postgres
	PGPORT=$(gridha_free_port "$GRIDHA_BASE_PORT")
	GRIDHA_PGLOG=$GRIDHA_TEST_DIR/postgres.log
	export GRIDHA_TEST_DIR PGDATA PGHOST PGUSER PGPORT GRIDHA_PGLOG
	# Settings from the caller's environment must not leak into the tests.
	unset PGDATABASE PGOPTIONS PGPASSWORD PGSERVICE PGSSLMODE

	local out
	if ! out=$(gridha_as_pg "$PG_BINDIR/initdb" --auth=trust -U postgres \
			--encoding=UTF8 --locale=C.UTF-8 --no-sync -D "$PGDATA" 2>&1); then
		echo "$out" >&2
		echo "gridha_cluster_init: initdb failed" >&2
		return 1
	fi
	# Two included files: the base settings (rewritten when the port has to
	# change) and the per-start extra settings.
	cat >>"$PGDATA/postgresql.conf" <<EOF

# --- gridha test harness (test/lib.sh) ---
include_if_exists = '$GRIDHA_TEST_DIR/base.conf'
include_if_exists = '$GRIDHA_TEST_DIR/extra.conf'
EOF
	gridha_write_base_conf
	: >"$GRIDHA_TEST_DIR/extra.conf"
	gridha_fix_owner "$GRIDHA_TEST_DIR/extra.conf"
}

# gridha_fix_owner FILE...: files the server reads must belong to postgres.
gridha_fix_owner() {
	if [ "$(id -u)" -eq 0 ]; then
		chown postgres: "$@"
	fi
}

# gridha_write_base_conf: the settings every start uses.
gridha_write_base_conf() {
	cat >"$GRIDHA_TEST_DIR/base.conf" <<EOF
port = $PGPORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$GRIDHA_TEST_DIR'
# A throwaway cluster: durability is not needed, speed is.
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 100
# test/sql/counts.sql prepares transactions
max_prepared_transactions = 4
log_line_prefix = '%m [%p] %q%a '
log_min_messages = warning
log_lock_waits = on
EOF
	gridha_fix_owner "$GRIDHA_TEST_DIR/base.conf"
}

# gridha_conf_quote VALUE: VALUE as a postgresql.conf string literal.
gridha_conf_quote() {
	printf "'%s'" "${1//\'/\'\'}"
}

# gridha_write_extra_conf OPT...: replace the per-start settings.
gridha_write_extra_conf() {
	local f=$GRIDHA_TEST_DIR/extra.conf opt
	: >"$f"
	while [ $# -gt 0 ]; do
		opt=$1
		shift
		if [ "$opt" = "-c" ]; then
			opt=${1:?"-c needs name=value"}
			shift
		fi
		opt=${opt#-c}
		case "$opt" in
			*=*) ;;
			*)
				echo "gridha_cluster_start: expected name=value, got '$opt'" >&2
				return 1
				;;
		esac
		printf '%s = %s\n' "${opt%%=*}" "$(gridha_conf_quote "${opt#*=}")" >>"$f"
	done
	gridha_fix_owner "$f"
}

# gridha_cluster_running: true when the postmaster of $PGDATA is alive.
gridha_cluster_running() {
	gridha_as_pg "$PG_BINDIR/pg_ctl" status -D "$PGDATA" >/dev/null 2>&1
}

# gridha_cluster_start [OPT...]: start with the given extra settings and wait
# until it accepts connections. When the port was taken in the meantime (a
# parallel test run), it moves to the next free one, up to 5 times.
gridha_cluster_start() {
	gridha_write_extra_conf "$@" || return 1
	local _try
	for _try in 1 2 3 4 5; do
		local mark=0
		if [ -f "$GRIDHA_PGLOG" ]; then
			mark=$(wc -l <"$GRIDHA_PGLOG")
		fi
		if gridha_as_pg "$PG_BINDIR/pg_ctl" start -w -t 60 -D "$PGDATA" \
				-l "$GRIDHA_PGLOG" >/dev/null 2>&1; then
			gridha_cluster_wait 30
			return $?
		fi
		if tail -n +"$((mark + 1))" "$GRIDHA_PGLOG" 2>/dev/null |
				grep -q 'could not bind\|could not create any TCP/IP sockets\|Address already in use'; then
			PGPORT=$(gridha_free_port $((PGPORT + 1))) || return 1
			export PGPORT
			gridha_write_base_conf
			gridha_log "port taken, retrying on $PGPORT"
			continue
		fi
		echo "gridha_cluster_start: the server did not start; end of $GRIDHA_PGLOG:" >&2
		tail -n 30 "$GRIDHA_PGLOG" >&2 2>/dev/null || true
		return 1
	done
	echo "gridha_cluster_start: no usable port" >&2
	return 1
}

# gridha_cluster_stop [MODE]: stop the server (smart|fast|immediate; default
# fast). Falls back to immediate when a fast stop hangs.
gridha_cluster_stop() {
	local mode=${1:-fast}
	gridha_cluster_running || return 0
	if ! gridha_as_pg "$PG_BINDIR/pg_ctl" stop -w -t 30 -m "$mode" -D "$PGDATA" >/dev/null 2>&1; then
		gridha_log "pg_ctl stop -m $mode failed; stopping immediately"
		gridha_as_pg "$PG_BINDIR/pg_ctl" stop -w -t 30 -m immediate -D "$PGDATA" >/dev/null 2>&1 || true
	fi
	! gridha_cluster_running
}

# gridha_cluster_restart [OPT...]: stop, then start with these settings.
gridha_cluster_restart() {
	gridha_cluster_stop fast || return 1
	gridha_cluster_start "$@"
}

# gridha_cluster_wait [SECONDS]: wait until the server accepts connections.
gridha_cluster_wait() {
	local deadline=$((SECONDS + ${1:-30}))
	while [ "$SECONDS" -lt "$deadline" ]; do
		if "$PG_BINDIR/pg_isready" -q -h "$PGHOST" -p "$PGPORT" -U postgres -d postgres; then
			return 0
		fi
		sleep 0.2
	done
	echo "gridha_cluster_wait: no connection after ${1:-30}s" >&2
	return 1
}

# gridha_cluster_cleanup: stop the server and remove the run's directory
# (kept when GRIDHA_KEEP_TMP=1, to look at logs). Safe to call twice.
gridha_cluster_cleanup() {
	[ -n "${GRIDHA_TEST_DIR:-}" ] || return 0
	if [ -d "${PGDATA:-}" ]; then
		gridha_cluster_stop fast || gridha_cluster_stop immediate || true
	fi
	if [ "${GRIDHA_KEEP_TMP:-0}" = 1 ]; then
		gridha_log "kept $GRIDHA_TEST_DIR (GRIDHA_KEEP_TMP=1)"
	else
		rm -rf "$GRIDHA_TEST_DIR"
	fi
	GRIDHA_TEST_DIR=
}

# gridha_debian_major: N when PG_CONFIG is a Debian package's
# (/usr/lib/postgresql/N/bin/pg_config); nothing for any other installation
# (one built from source), which apt-get cannot complete.
gridha_debian_major() {
	case $PG_CONFIG in
		/usr/lib/postgresql/*/bin/pg_config)
			local m=${PG_CONFIG#/usr/lib/postgresql/}
			echo "${m%%/*}"
			;;
	esac
}

# gridha_pgtap_dir: the extension directory of PG_CONFIG's installation,
# where CREATE EXTENSION pgtap looks.
gridha_pgtap_dir() {
	echo "$("$PG_CONFIG" --sharedir)/extension"
}

# gridha_pgtap_source: a directory of Debian's pgTAP files (plain SQL, the
# same for every major), for installations that have no pgTAP of their own.
gridha_pgtap_source() {
	local f
	for f in /usr/share/postgresql/*/extension/pgtap.control; do
		[ -f "$f" ] && dirname "$f"
	done | sort -V | tail -n 1
}

# gridha_install_pgtap: copy pgTAP's files into PG_CONFIG's installation
# when it has none (a PostgreSQL not from Debian's packages). Needs the
# files of a Debian pgTAP package (gridha_missing_packages pgtap names it).
# test/install-debian.sh calls it.
gridha_install_pgtap() {
	local dest src
	dest=$(gridha_pgtap_dir) || return 1
	[ -f "$dest/pgtap.control" ] && return 0
	src=$(gridha_pgtap_source)
	if [ -z "$src" ]; then
		echo "gridha_install_pgtap: no pgTAP files in /usr/share/postgresql/*/extension" >&2
		return 1
	fi
	cp "$src"/pgtap.control "$src"/pgtap*.sql "$dest/"
}

# gridha_missing_packages [pgtap]: the Debian packages that building and
# running gridha need and that are not installed, one a line, each detected
# by a file it provides; with "pgtap" also pgTAP and pg_prove (make test).
# The PostgreSQL packages are those of PG_CONFIG's major when it is Debian's;
# an installation built from source must be complete already, and takes its
# pgTAP from Debian's package for 15 (gridha_install_pgtap copies it).
gridha_missing_packages() {
	local major
	major=$(gridha_debian_major)
	if [ -n "$major" ]; then
		[ -x "$PG_BINDIR/postgres" ] || echo "postgresql-$major"
		[ -x "$PG_BINDIR/pgbench" ] || echo "postgresql-client-$major"
		[ -f "/usr/include/postgresql/$major/server/postgres.h" ] || echo "postgresql-server-dev-$major"
	fi
	command -v make >/dev/null || echo make
	command -v gcc >/dev/null || echo gcc
	# gcc without its recommends (a minimal Debian) has no C library headers;
	# postgresql-server-dev-NN brings them, a tree built from source does not.
	[ -f /usr/include/stdio.h ] || echo libc6-dev
	# test/lib.sh, the test ledger (test/dlt) and the fault harness are Python 3.
	command -v python3 >/dev/null || echo python3
	# 018_pg_upgrade unpacks the newer majors' trees (../shared/pg, .tar.xz)
	if [ "${1:-}" = pgtap ]; then
		command -v xz >/dev/null || echo xz-utils
		# 72_instructions counts the cycle's instructions (callgrind)
		command -v valgrind >/dev/null || echo valgrind
	fi
	# Any libcurl development package will do (they conflict with each other).
	if ! compgen -G '/usr/include/*/curl/curl.h' >/dev/null && [ ! -f /usr/include/curl/curl.h ]; then
		echo libcurl4-openssl-dev
	fi
	if [ "${1:-}" = pgtap ]; then
		if [ -n "$major" ]; then
			[ -f "/usr/share/postgresql/$major/extension/pgtap.control" ] || echo "postgresql-$major-pgtap"
		elif [ ! -f "$(gridha_pgtap_dir 2>/dev/null)/pgtap.control" ] &&
				[ -z "$(gridha_pgtap_source)" ]; then
			echo postgresql-15-pgtap
		fi
		[ -x /usr/bin/pg_prove ] || echo libtap-parser-sourcehandler-pgtap-perl
		# test/t/*.pl: PostgreSQL's TAP framework and what it needs
		perl -MIPC::Run -e 1 2>/dev/null || echo libipc-run-perl
		[ -n "$(gridha_tap_framework)" ] || echo "postgresql-client-${major:-15}"
	fi
}

# gridha_tap_framework: the directory of PostgreSQL's TAP framework
# (PostgreSQL::Test::Cluster, PostgreSQL::Test::Utils) for PG_CONFIG's
# PostgreSQL: its PGXS's src/test/perl, or, for a tree built without it
# (configure without --enable-tap-tests), the newest Debian package's (the
# framework drives other majors' programs through PATH). Empty when none.
gridha_tap_framework() {
	local d
	d=$(dirname "$(dirname "$("$PG_CONFIG" --pgxs 2>/dev/null)")")/test/perl
	if [ ! -f "$d/PostgreSQL/Test/Cluster.pm" ]; then
		d=$(compgen -G '/usr/lib/postgresql/*/lib/pgxs/src/test/perl/PostgreSQL/Test/Cluster.pm' |
			sort -V | tail -n 1)
		d=${d%/PostgreSQL/Test/Cluster.pm}
	fi
	[ -n "$d" ] && echo "$d"
}

# gridha_missing_note PKG...: the message for a part that lacks Debian
# packages: which, and that test/install-debian.sh (as root) installs them.
# Nothing but that script installs packages.
gridha_missing_note() {
	echo "missing packages ($*): as root, test/install-debian.sh installs them"
}

# gridha_relocated_copy DEST: a copy of the PostgreSQL installation
# PG_CONFIG names under DEST (each directory at DEST/<its path>, so that
# the copy finds its files relative to its binaries); prints the copy's
# pg_config. gridha is removed from the copy. The client library's
# directory is linked, not copied; when it holds the package library
# directory (one prefix, e.g. /opt/pg17/lib and /opt/pg17/lib/postgresql)
# its other entries are linked one by one, so that the copy's client
# programs find libpq.
gridha_relocated_copy() {
	local dest=$1 d libdir
	for d in "$("$PG_CONFIG" --bindir)" "$("$PG_CONFIG" --pkglibdir)" "$("$PG_CONFIG" --sharedir)" \
			"$("$PG_CONFIG" --includedir)" "$("$PG_CONFIG" --pkgincludedir)" "$("$PG_CONFIG" --includedir-server)"; do
		[ -e "$dest$d" ] && continue
		mkdir -p "$(dirname "$dest$d")"
		cp -a "$d" "$dest$d"
	done
	libdir=$("$PG_CONFIG" --libdir)
	if [ ! -e "$dest$libdir" ]; then
		mkdir -p "$(dirname "$dest$libdir")"
		ln -s "$libdir" "$dest$libdir"
	else
		for d in "$libdir"/*; do
			[ -e "$dest$d" ] || ln -s "$d" "$dest$d"
		done
	fi
	rm -f "$dest$("$PG_CONFIG" --pkglibdir)"/gridha.so "$dest$("$PG_CONFIG" --sharedir)"/extension/gridha[.-]*
	echo "$dest$("$PG_CONFIG" --bindir)/pg_config"
}

# gridha_build_commit REV DIR: builds gridha as of commit REV of this
# repository (git archive) into a relocated copy of the installation
# (gridha_relocated_copy) under DIR, readable by the server's owner;
# prints the copy's pg_config. The build's output is in DIR/build.log.
# Used to run an earlier library against the same cluster: start it with
# PG_BINDIR set to the copy's bindir.
gridha_build_commit() {
	local rev=$1 dir=$2 root config
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	mkdir -p "$dir" && chmod 755 "$dir" || return 1
	rev=$(git -C "$root" rev-parse --short "$rev^{commit}" 2>/dev/null) ||
		{ echo "gridha_build_commit: no commit $1 (a git checkout is needed)" >&2; return 1; }
	config=$(gridha_relocated_copy "$dir/pg") || return 1
	rm -rf "$dir/src" && mkdir "$dir/src" || return 1
	git -C "$root" archive "$rev" | tar -x -C "$dir/src" || return 1
	if ! (cd "$dir/src" && make -s PG_CONFIG="$config" >"$dir/build.log" 2>&1 &&
		make -s PG_CONFIG="$config" install >>"$dir/build.log" 2>&1); then
		echo "gridha_build_commit: $rev does not build; end of $dir/build.log:" >&2
		tail -n 20 "$dir/build.log" >&2
		return 1
	fi
	echo "$config"
}

# gridha_psql [ARG...]: psql that stops at the first error and reads no
# ~/.psqlrc, quiet, unaligned and tuples-only for easy parsing.
gridha_psql() {
	"$PG_BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 "$@"
}
