#!/usr/bin/env bash
# test/ha/run.sh: gridha's fault harness (`make ha`, and the short versions
# in `make test` through test/suites/50_ha.sh and 51_failover.sh).
#
# Starts database servers of its own with gridha preloaded, background
# workers, short expiries and durable commits; then test/ha/driver.py runs
# the test ledger, external clients, workers and a producer over 60
# services, injects every fault kind of the topology, drains, and records
# the history; test/ha/check.py checks it and prints the tables. Exit status
# 0 when the checker finds nothing.
#
# Topologies (HA_TOPOLOGY, or HA_DB=patroni):
#   single    (default) one throwaway cluster (test/lib.sh, from port
#             GRIDHA_BASE_PORT, 56400 unless set). Fault kinds: kill9-off,
#             kill9-on, stop-client, term-worker, stop-worker, 503, stall,
#             restart
#   replica   a primary and a hot standby on loopback (test/ha/topology.py):
#             streaming replication built with pg_basebackup -R, the same
#             settings on both (gridha preloaded, gridha.workers on both:
#             workers start only once a server is out of recovery),
#             wal_log_hints for pg_rewind. HA_REPLICA=sync (default:
#             synchronous_standby_names on the primary names the standby)
#             or async. Clients and the producer reach the primary through
#             a multi-host connection string (target_session_attrs=
#             read-write). Fault kinds: the single ones plus failover (kill
#             -9 of the primary's postmaster, promote the standby, the old
#             primary back as a standby through pg_rewind) and switchover
#             (pg_ctl stop -m fast of the primary, promote, rejoin)
#   patroni   the same on two Patroni nodes with a single-node etcd
#             (HA_DB=patroni; needs root and the Debian packages patroni,
#             etcd-server and etcd-client, installed when missing). The
#             gridha settings go into bootstrap.dcs.postgresql.parameters;
#             HA_REPLICA=sync sets synchronous_mode. Fault kinds: the
#             instance ones, failover (kill -9 of the leader's patroni and
#             postmaster; Patroni promotes the other) and switchover
#             (patronictl switchover)
#
# Environment:
#   HA_DURATION   seconds of random faults after the first round of every
#                 kind (default 0: one round, about a minute and a half)
#   HA_SEED       the random seed (default: a new one, printed)
#   HA_OUT        keep the run directory here (default: a /tmp directory,
#                 removed unless HA_KEEP=1 or the check failed)
#   HA_TAP=1      print the checker's verdicts as TAP lines, each prefixed
#                 with HA_TAP_NAME (default "ha")
#   HA_TOPOLOGY   single | replica | patroni (see above); HA_DB=patroni
#                 is the same as HA_TOPOLOGY=patroni
#   HA_REPLICA    sync | async (two nodes only; default sync)
#   HA_KINDS      comma-separated fault kinds to inject (default: all the
#                 topology has), e.g. HA_KINDS=failover,switchover
#   HA_FAILOVER_LAG  (replica) seconds the standby lags before a failover:
#                 the primary's WAL sender is stopped that long, then the
#                 primary's postmaster and all its children are killed at
#                 once
#                 (default 0: only the postmaster is killed)
#   HA_SERVICES, HA_CLIENTS, HA_WORKERS   the workload (60, 4, 3)
#   HA_KEEP=1     keep the run directory and the two-node servers' files
#
# Words: "run directory" is where the driver records the history (see
# driver.py); "server directory" (two nodes) holds their data directories,
# sockets and logs. Everything the harness starts, it stops on any exit: the
# driver stops its servers after dumping the history, and this script then
# kills, by the pids recorded in the server directory, any process that is
# still running from it.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export GRIDHA_BASE_PORT=${GRIDHA_BASE_PORT:-56400}
# shellcheck source=../lib.sh
. "$REPO/test/lib.sh"
# Ours is made by gridha_cluster_init (single) or never: a caller's (make
# test exports its own) must not be stopped or removed by our cleanup.
# shellcheck disable=SC2034 # read by gridha_cluster_cleanup (test/lib.sh)
GRIDHA_TEST_DIR=

DURATION=${HA_DURATION:-0}
SERVICES=${HA_SERVICES:-60}
CLIENTS=${HA_CLIENTS:-4}
WORKERS=${HA_WORKERS:-3}
TOPOLOGY=${HA_TOPOLOGY:-single}
[ "${HA_DB:-}" = patroni ] && TOPOLOGY=patroni
REPLICA=${HA_REPLICA:-sync}
SOFT=3s
HARD=6s
OUT_GIVEN=${HA_OUT:-}
if [ -n "$OUT_GIVEN" ]; then
	OUT=$OUT_GIVEN
	mkdir -p "$OUT"
else
	OUT=$(mktemp -d /tmp/gridha-ha.XXXXXX)
fi
DRIVER_PID=
TOPO_DIR=

case "$TOPOLOGY" in
	single | replica | patroni) ;;
	*)
		echo "test/ha: HA_TOPOLOGY is single, replica or patroni, not '$TOPOLOGY'" >&2
		exit 2
		;;
esac
case "$REPLICA" in
	sync | async) ;;
	*)
		echo "test/ha: HA_REPLICA is sync or async, not '$REPLICA'" >&2
		exit 2
		;;
esac

# topo_cleanup: whatever still runs from the server directory (the driver
# stops it all normally), killed by the pids recorded there, but only a pid
# whose command line names the directory; then the directory goes.
topo_cleanup() {
	[ -n "$TOPO_DIR" ] && [ -d "$TOPO_DIR" ] || return 0
	local f pid
	for f in "$TOPO_DIR"/run/*.pid "$TOPO_DIR"/*/data/postmaster.pid; do
		[ -f "$f" ] || continue
		pid=$(head -n 1 "$f" 2>/dev/null)
		case "$pid" in '' | *[!0-9]*) continue ;; esac
		if [ -r "/proc/$pid/cmdline" ] &&
			tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF "$TOPO_DIR"; then
			kill -9 "$pid" 2>/dev/null
		fi
	done
	if [ "${HA_KEEP:-0}" = 1 ]; then
		gridha_log "ha: kept the servers' directory $TOPO_DIR"
	else
		sleep 1
		rm -rf "$TOPO_DIR"
	fi
	TOPO_DIR=
}

cleanup() {
	if [ -n "$DRIVER_PID" ] && kill -0 "$DRIVER_PID" 2>/dev/null; then
		kill -TERM "$DRIVER_PID" 2>/dev/null
		wait "$DRIVER_PID" 2>/dev/null
	fi
	topo_cleanup
	gridha_cluster_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ ! -x "$REPO/client/gridha-client" ]; then
	echo "test/ha: client/gridha-client is not built (run make)" >&2
	exit 2
fi

# The servers' settings, the same on every node: durable commits (an
# immediate stop or a kill -9 must not lose an acknowledged enqueue or
# report; the base settings of test/lib.sh turn synchronous_commit off for
# speed), gridha preloaded with its workers and short expiries.
SETTINGS=(shared_preload_libraries=gridha max_worker_processes=24
	synchronous_commit=on max_connections=200
	gridha.workers="$WORKERS" gridha.database=gridha_ha gridha.naptime=100
	gridha.submit_timeout=2000 gridha.monitor_interval=250
	gridha.soft_expiry="$SOFT" gridha.hard_expiry="$HARD" gridha.renew_interval=1s
	log_min_messages=warning)
# The single topology's restarts start the server again on its port, which
# some program's outgoing connection may hold by then: it listens on its
# socket only, through which every connection goes (the replica topology
# does the same, test/ha/topology.py; Patroni's nodes need TCP).
[ "$TOPOLOGY" = single ] && SETTINGS+=(listen_addresses=)

topo_opt=()
if [ "$TOPOLOGY" = single ]; then
	gridha_cluster_init || exit 2
	if ! gridha_cluster_start "${SETTINGS[@]}"; then
		exit 2
	fi
	gridha_log "ha: cluster on port $PGPORT, run directory $OUT"
	topo_opt=(--topology single --pgdata "$PGDATA" --pglog "$GRIDHA_PGLOG"
		--pghost "$PGHOST" --pgport "$PGPORT")
else
	if [ "$TOPOLOGY" = patroni ]; then
		if [ "$(id -u)" -ne 0 ]; then
			echo "test/ha: the patroni topology runs as root (it starts Patroni as postgres)" >&2
			exit 2
		fi
		missing=()
		[ -x /usr/bin/patroni ] || missing+=(patroni)
		[ -x /usr/bin/etcd ] || missing+=(etcd-server)
		[ -x /usr/bin/etcdctl ] || missing+=(etcd-client)
		if [ "${#missing[@]}" -gt 0 ]; then
			echo "test/ha: the patroni topology needs Patroni and etcd: $(gridha_missing_note "${missing[@]}") (test/install-debian.sh --ha)" >&2
			exit 2
		fi
	fi
	# No libpq setting of the caller's may leak into the servers or clients.
	unset PGHOST PGPORT PGUSER PGDATA PGDATABASE PGOPTIONS PGPASSWORD PGPASSFILE PGSERVICE PGSSLMODE
	TOPO_DIR=$(mktemp -d /tmp/gridha-ha-db.XXXXXX)
	chmod 755 "$TOPO_DIR"
	if [ "$(id -u)" -eq 0 ]; then
		chown postgres: "$TOPO_DIR"
	fi
	gridha_log "ha: $TOPOLOGY topology ($REPLICA) in $TOPO_DIR, run directory $OUT"
	topo_opt=(--topology "$TOPOLOGY" --replica "$REPLICA" --topo-dir "$TOPO_DIR"
		--port-base "$GRIDHA_BASE_PORT")
	for s in "${SETTINGS[@]}"; do
		topo_opt+=(--setting "$s")
	done
fi

extra_opt=()
[ -n "${HA_SEED:-}" ] && extra_opt+=(--seed "$HA_SEED")
[ -n "${HA_KINDS:-}" ] && extra_opt+=(--kinds "$HA_KINDS")
[ -n "${HA_FAILOVER_LAG:-}" ] && extra_opt+=(--failover-lag "$HA_FAILOVER_LAG")
python3 "$REPO/test/ha/driver.py" --out "$OUT" --repo "$REPO" --bindir "$PG_BINDIR" \
	"${topo_opt[@]}" --duration "$DURATION" \
	--services "$SERVICES" --clients "$CLIENTS" --workers "$WORKERS" \
	--static-workers "$WORKERS" "${extra_opt[@]}" &
DRIVER_PID=$!
wait "$DRIVER_PID"
driver_rc=$?
DRIVER_PID=
if [ "$TOPOLOGY" = single ]; then
	cp "$GRIDHA_PGLOG" "$OUT/postgres.log" 2>/dev/null
	gridha_cluster_stop fast
fi
topo_cleanup

check_opt=(--hard-expiry "${HARD%s}" --name "${HA_TAP_NAME:-ha}")
[ "${HA_TAP:-0}" = 1 ] && check_opt+=(--tap)
python3 "$REPO/test/ha/check.py" "${check_opt[@]}" "$OUT"
check_rc=$?

if [ "$driver_rc" -ne 0 ]; then
	echo "test/ha: the driver stopped early (exit $driver_rc); see $OUT/driver.log" >&2
fi
rc=$((driver_rc != 0 || check_rc != 0))
if [ -z "$OUT_GIVEN" ]; then
	if [ "$rc" -ne 0 ] || [ "${HA_KEEP:-0}" = 1 ]; then
		gridha_log "ha: kept $OUT"
	else
		rm -rf "$OUT"
	fi
fi
exit "$rc"
