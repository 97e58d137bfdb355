#!/usr/bin/env bash
# test/ha/run.sh: gridha's fault harness, long version (`make ha`).
#
# One server or a primary with a hot standby: the harness is the tests on
# PostgreSQL's TAP framework test/t/050_ha.pl (HA_TOPOLOGY=single, the
# default) and test/t/051_failover.pl (HA_TOPOLOGY=replica), which `make
# test` runs short; this script runs one of them with prove, longer or
# otherwise as the environment says, as the postgres user when we are root
# (initdb refuses root), with the framework of PG_CONFIG's PGXS or
# Debian's (gridha_tap_framework of test/lib.sh). The .pl starts its
# servers and runs test/ha/driver.py (the workload and the faults) and
# test/ha/check.py; test/t/lib/GridhaHA.pm says how they share the work.
#
# Two nodes under Patroni with a single-node etcd (HA_DB=patroni, or
# HA_TOPOLOGY=patroni; needs root and the Debian packages patroni,
# etcd-server and etcd-client, test/install-debian.sh --ha): Patroni is not
# the framework's, so this script starts the driver with its patroni
# topology (test/ha/patroni.py) and checks the run itself. The gridha
# settings go into bootstrap.dcs.postgresql.parameters; HA_REPLICA=sync sets
# synchronous_mode. Fault kinds: the instance ones, failover (kill -9 of
# the leader's patroni and postmaster; Patroni promotes the other) and
# switchover (patronictl switchover).
#
# Environment:
#   HA_DURATION   seconds of random faults after the first round of every
#                 kind (default 0: one round)
#   HA_SEED       the random seed (default: a new one, printed)
#   HA_TOPOLOGY   single | replica | patroni; HA_DB=patroni is the same as
#                 HA_TOPOLOGY=patroni
#   HA_REPLICA    sync | async (two nodes only; default sync)
#   HA_KINDS      comma-separated fault kinds to inject (default: all the
#                 topology has; 051_failover.pl's own default is failover
#                 and switchover, so make ha HA_TOPOLOGY=replica names them
#                 all), e.g. HA_KINDS=failover,switchover
#   HA_FAILOVER_LAG  (replica) seconds the standby lags before a failover:
#                 the primary's WAL sender is stopped that long, then the
#                 primary's postmaster and all its children are killed at
#                 once (default 0: only the postmaster is killed)
#   HA_OUT        (framework) the test's directory (default: a new /tmp
#                 directory, printed); (patroni) the run directory
#   HA_KEEP=1     keep the servers' and the run's files (the framework's
#                 PG_TEST_NOCLEAN; a failed run keeps them anyway)
#
# Everything the harness starts, it stops on any exit (the framework stops
# its servers; the .pl stops the driver, which stops its clients and
# ledger; the patroni servers are killed here by the pids recorded in the
# server directory).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export GRIDHA_BASE_PORT=${GRIDHA_BASE_PORT:-56400}
# shellcheck source=../lib.sh
. "$REPO/test/lib.sh"
# (no cluster of test/lib.sh's here: a caller's must not be stopped or
# removed by its cleanup)
# shellcheck disable=SC2034 # read by gridha_cluster_cleanup (test/lib.sh)
GRIDHA_TEST_DIR=

DURATION=${HA_DURATION:-0}
TOPOLOGY=${HA_TOPOLOGY:-single}
[ "${HA_DB:-}" = patroni ] && TOPOLOGY=patroni
REPLICA=${HA_REPLICA:-sync}

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
if [ ! -x "$REPO/client/gridha-client" ]; then
	echo "test/ha: client/gridha-client is not built (run make)" >&2
	exit 2
fi

# --- one server, or a primary and a standby: the framework's test ---------
if [ "$TOPOLOGY" != patroni ]; then
	fw=$(gridha_tap_framework)
	if [ -z "$fw" ]; then
		echo "test/ha: no PostgreSQL::Test::Cluster: $(gridha_missing_note "postgresql-client-15")" >&2
		exit 2
	fi
	if [ "$TOPOLOGY" = single ]; then
		pl=$REPO/test/t/050_ha.pl
	else
		pl=$REPO/test/t/051_failover.pl
		export HA_KINDS=${HA_KINDS:-restart,failover,switchover,kill9-off,kill9-on,stop-client,term-worker,stop-worker,503,stall}
		export HA_REPLICA=$REPLICA
	fi
	dir=${HA_OUT:-$(mktemp -d /tmp/gridha-ha.XXXXXX)}
	mkdir -p "$dir"
	gridha_fix_owner "$dir"
	gridha_log "ha: $(basename "$pl") in $dir (duration ${DURATION} s)"
	as=()
	[ "$(id -u)" -eq 0 ] && as=(runuser -u postgres --)
	keep=()
	[ "${HA_KEEP:-0}" = 1 ] && keep=(PG_TEST_NOCLEAN=1)
	cd "$dir" || exit 2
	"${as[@]}" env PATH="$PG_BINDIR:$PATH" TESTDIR="$dir" HA_DURATION="$DURATION" "${keep[@]}" \
		PG_REGRESS="$(dirname "$(dirname "$("$PG_CONFIG" --pgxs)")")/test/regress/pg_regress" \
		prove -v -I "$fw" "$pl"
	exit $?
fi

# --- two nodes under Patroni ------------------------------------------------
SERVICES=${HA_SERVICES:-60}
CLIENTS=${HA_CLIENTS:-4}
WORKERS=${HA_WORKERS:-3}
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

# shellcheck disable=SC2317 # called by the EXIT trap
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

# The servers' settings, the same on both nodes: durable commits (an
# immediate stop or a kill -9 must not lose an acknowledged enqueue or
# report), gridha preloaded with its workers and short expiries.
SETTINGS=(shared_preload_libraries=gridha max_worker_processes=24
	synchronous_commit=on max_connections=200
	gridha.workers="$WORKERS" gridha.database=gridha_ha gridha.naptime=100
	gridha.submit_timeout=2000 gridha.monitor_interval=250
	gridha.soft_expiry="$SOFT" gridha.hard_expiry="$HARD" gridha.renew_interval=1s
	log_min_messages=warning)

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
# No libpq setting of the caller's may leak into the servers or clients.
unset PGHOST PGPORT PGUSER PGDATA PGDATABASE PGOPTIONS PGPASSWORD PGPASSFILE PGSERVICE PGSSLMODE
TOPO_DIR=$(mktemp -d /tmp/gridha-ha-db.XXXXXX)
chmod 755 "$TOPO_DIR"
chown postgres: "$TOPO_DIR"
gridha_log "ha: patroni topology ($REPLICA) in $TOPO_DIR, run directory $OUT"
topo_opt=(--topology patroni --replica "$REPLICA" --topo-dir "$TOPO_DIR"
	--port-base "$GRIDHA_BASE_PORT")
for s in "${SETTINGS[@]}"; do
	topo_opt+=(--setting "$s")
done

extra_opt=()
[ -n "${HA_SEED:-}" ] && extra_opt+=(--seed "$HA_SEED")
[ -n "${HA_KINDS:-}" ] && extra_opt+=(--kinds "$HA_KINDS")
python3 "$REPO/test/ha/driver.py" --out "$OUT" --repo "$REPO" --bindir "$PG_BINDIR" \
	"${topo_opt[@]}" --duration "$DURATION" \
	--services "$SERVICES" --clients "$CLIENTS" --workers "$WORKERS" \
	--static-workers "$WORKERS" "${extra_opt[@]}" &
DRIVER_PID=$!
wait "$DRIVER_PID"
driver_rc=$?
DRIVER_PID=
topo_cleanup

python3 "$REPO/test/ha/check.py" --hard-expiry "${HARD%s}" "$OUT"
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
