# shellcheck shell=bash
# test/dba/cluster2.sh: a second throwaway PostgreSQL cluster beside the one
# of test/lib.sh, for suites that need another cluster
# (test/suites/12_installcheck_defaults.sh). Source it after test/lib.sh,
# whose helpers it uses (gridha_as_pg, gridha_free_port,
# gridha_conf_quote, gridha_server_log); lib.sh's own cluster and variables are left alone.
#
#   c2_init                  initdb in a new /tmp directory, on a free port
#   c2_start [OPT...]        start it with extra settings (name=value, as
#                            gridha_cluster_start takes them), wait for it
#   c2_restart [OPT...]      stop, then start with these settings
#   c2_stop                  stop it (fast, immediate when that hangs)
#   c2_psql ARG...           psql to it (quiet, unaligned, tuples only,
#                            stops at the first error), like gridha_psql
#   c2_cleanup               stop it and remove its directory (kept with
#                            GRIDHA_KEEP_TMP=1); safe to call twice
#
# Variables it sets: C2_DIR (the directory, owned by postgres; also the
# socket directory), C2_DATA, C2_PORT and C2_LOG (the server log).
# Every start has shared_preload_libraries = gridha and
# max_worker_processes = 32 unless an option says otherwise.

C2_DIR=
C2_DATA=
C2_PORT=
C2_LOG=

c2_init() {
	C2_DIR=$(mktemp -d /tmp/gridha-c2.XXXXXX) || return 1
	chmod 755 "$C2_DIR"
	if [ "$(id -u)" -eq 0 ]; then
		chown postgres: "$C2_DIR"
	fi
	C2_DATA=$C2_DIR/data
	# in GRIDHA_LOG_DIR under test/run.sh, read for crashes at the run's end
	C2_LOG=$(gridha_server_log cluster2 "$C2_DIR/postgres.log")
	# not the first cluster's port, nor the one after it (its restarts may
	# move there)
	C2_PORT=$(gridha_free_port $((${PGPORT:-$GRIDHA_BASE_PORT} + 7))) || return 1
	local out
	if ! out=$(gridha_as_pg "$PG_BINDIR/initdb" --auth=trust -U postgres \
			--encoding=UTF8 --locale=C.UTF-8 --no-sync -D "$C2_DATA" 2>&1); then
		echo "$out" >&2
		echo "c2_init: initdb failed" >&2
		return 1
	fi
	cat >>"$C2_DATA/postgresql.conf" <<EOF

# --- second cluster of a gridha test (test/dba/cluster2.sh) ---
port = $C2_PORT
listen_addresses = ''
unix_socket_directories = '$C2_DIR'
fsync = off
synchronous_commit = off
full_page_writes = off
log_line_prefix = '%m [%p] %q%a '
log_min_messages = warning
include_if_exists = '$C2_DIR/extra.conf'
EOF
}

# c2_write_extra OPT...: the per-start settings.
c2_write_extra() {
	local f=$C2_DIR/extra.conf opt spl=0 mwp=0
	: >"$f"
	for opt in "$@"; do
		case "$opt" in
			shared_preload_libraries=*) spl=1 ;;
			max_worker_processes=*) mwp=1 ;;
			*=*) ;;
			*)
				echo "c2_start: expected name=value, got '$opt'" >&2
				return 1
				;;
		esac
		printf '%s = %s\n' "${opt%%=*}" "$(gridha_conf_quote "${opt#*=}")" >>"$f"
	done
	[ "$spl" = 1 ] || echo "shared_preload_libraries = 'gridha'" >>"$f"
	[ "$mwp" = 1 ] || echo "max_worker_processes = 32" >>"$f"
	if [ "$(id -u)" -eq 0 ]; then
		chown postgres: "$f"
	fi
}

c2_start() {
	c2_write_extra "$@" || return 1
	if ! gridha_as_pg "$PG_BINDIR/pg_ctl" start -w -t 60 -D "$C2_DATA" -l "$C2_LOG" >/dev/null 2>&1; then
		echo "c2_start: the second cluster did not start; end of $C2_LOG:" >&2
		tail -n 20 "$C2_LOG" >&2 2>/dev/null
		return 1
	fi
	local deadline=$((SECONDS + 30))
	while [ "$SECONDS" -lt "$deadline" ]; do
		"$PG_BINDIR/pg_isready" -q -h "$C2_DIR" -p "$C2_PORT" -U postgres -d postgres && return 0
		sleep 0.2
	done
	echo "c2_start: no connection after 30 s" >&2
	return 1
}

c2_stop() {
	[ -n "$C2_DATA" ] && [ -d "$C2_DATA" ] || return 0
	gridha_as_pg "$PG_BINDIR/pg_ctl" status -D "$C2_DATA" >/dev/null 2>&1 || return 0
	if ! gridha_as_pg "$PG_BINDIR/pg_ctl" stop -w -t 30 -m fast -D "$C2_DATA" >/dev/null 2>&1; then
		gridha_as_pg "$PG_BINDIR/pg_ctl" stop -w -t 30 -m immediate -D "$C2_DATA" >/dev/null 2>&1
	fi
}

c2_restart() {
	c2_stop && c2_start "$@"
}

c2_psql() {
	"$PG_BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$C2_DIR" -p "$C2_PORT" -U postgres "$@"
}

c2_cleanup() {
	[ -n "$C2_DIR" ] || return 0
	c2_stop
	if [ "${GRIDHA_KEEP_TMP:-0}" = 1 ]; then
		echo "# kept the second cluster in $C2_DIR (GRIDHA_KEEP_TMP=1)" >&2
	else
		rm -rf "$C2_DIR"
	fi
	C2_DIR=
}
