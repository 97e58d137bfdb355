#!/usr/bin/env bash
# test/install-debian.sh: installs, on a fresh Debian 12 machine, every
# package that building gridha and any part of its tests (make test, make
# bench, make demo) needs; the only file of the project that runs apt-get
# or needs root for anything but running a server as the postgres user.
# `make test` (test/run.sh) runs it first when run as root; run as another
# user, make test skips it, and a part whose package is missing skips or
# fails with a message naming the package.
#
#   test/install-debian.sh [--dry-run] [--ha]
#
# Run as root. It installs, with apt-get (apt-get update first, only when
# something is missing):
#   - what building and running gridha needs (gridha_missing_packages of
#     test/lib.sh: the PostgreSQL packages of PG_CONFIG's major when it is
#     Debian's, make, gcc, the C library's and libcurl's headers, python3,
#     pgTAP and pg_prove, IPC::Run and PostgreSQL's TAP framework for
#     test/t, valgrind, xz-utils);
#   - what single suites need (the list below, PACKAGES);
#   - with --ha: Patroni and etcd (make ha HA_DB=patroni).
# Then, when PG_CONFIG's PostgreSQL is not Debian's (one built from source),
# pgTAP's SQL files into its extension directory (gridha_install_pgtap); and
# Citus into Debian's PostgreSQL 15 from ../shared/citus when that
# directory holds its tarball (031_citus; test/install/citus.sh's
# install_citus when the project has it).
#
# --dry-run prints what it would install and changes nothing (as any user).
# PG_CONFIG as for make test (default Debian's 15). Exit status: 0 when
# everything is there afterwards, 1 when not (apt-get's output is shown),
# 2 for a wrong call (not root, not Debian).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$REPO/test/lib.sh"

DRY=0
HA=0
for a in "$@"; do
	case $a in
		--dry-run | -n) DRY=1 ;;
		--ha) HA=1 ;;
		*)
			echo "usage: test/install-debian.sh [--dry-run] [--ha]" >&2
			exit 2
			;;
	esac
done

# The Debian packages single suites need, each checked by dpkg (installed
# or not); the suites check again and say which is missing.
PACKAGES=(
	# 034_citus_faults: gdb holds a coordinator backend inside the two-phase commit
	gdb
	# 80_dist: make dist (git archive), pgxn load of the bundle
	git pgxnclient
	# 026_metrics: the exporter and Prometheus scraping gridha's metrics
	prometheus-postgres-exporter prometheus curl
	# 81_deb: dpkg-buildpackage of debian/ (its Build-Depends), and `ip`
	# for the install's network namespace
	build-essential debhelper dpkg-dev fakeroot postgresql-server-dev-all
	postgresql-server-dev-15 libpq-dev iproute2
	# 81_deb and 031_citus: Debian's PostgreSQL 15 whatever PG_CONFIG is
	postgresql-15
)
# make ha HA_DB=patroni (test/ha/run.sh)
HA_PACKAGES=(patroni etcd-server etcd-client)

say() {
	printf 'install-debian: %s\n' "$*"
}

# installed PKG: true when dpkg has PKG installed.
installed() {
	[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

# missing: every package of the lists above not installed, one a line.
missing() {
	local p
	gridha_missing_packages pgtap
	for p in "${PACKAGES[@]}"; do
		installed "$p" || echo "$p"
	done
	if [ "$HA" = 1 ]; then
		for p in "${HA_PACKAGES[@]}"; do
			installed "$p" || echo "$p"
		done
	fi
}

if ! command -v apt-get >/dev/null || ! command -v dpkg-query >/dev/null; then
	echo "install-debian: no apt-get here: this script installs a Debian machine's packages; elsewhere install them by hand (docs/testing.md)" >&2
	exit 2
fi
if [ "$DRY" = 0 ] && [ "$(id -u)" -ne 0 ]; then
	echo "install-debian: run as root (or with --dry-run to see what is missing)" >&2
	exit 2
fi

need=$(missing | sort -u | tr '\n' ' ')
need=${need% }

# ---------------------------------------------------------------------------
# apt-get

if [ -z "$need" ]; then
	say "every package is installed"
elif [ "$DRY" = 1 ]; then
	say "would install: $need"
else
	say "installing $need"
	log=$(mktemp "${TMPDIR:-/tmp}/gridha-apt.XXXXXX")
	export DEBIAN_FRONTEND=noninteractive
	# shellcheck disable=SC2086 # one word per package
	if ! apt-get update -qq >"$log" 2>&1 ||
		! apt-get install -y -qq --no-install-recommends $need >>"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		echo "install-debian: apt-get could not install $need" >&2
		exit 1
	fi
	# the quiet output stays quiet, but not its warnings and errors
	grep -E '^(E|W):' "$log" >&2 || true
	rm -f "$log"
	still=$(missing | sort -u | tr '\n' ' ')
	if [ -n "${still% }" ]; then
		echo "install-debian: still missing after apt-get: ${still% }" >&2
		exit 1
	fi
fi

# ---------------------------------------------------------------------------
# pgTAP into a PostgreSQL not from Debian's packages

if [ -z "$(gridha_debian_major)" ] && [ -x "$PG_CONFIG" ]; then
	dest=$(gridha_pgtap_dir)
	if [ -f "$dest/pgtap.control" ]; then
		:
	elif [ "$DRY" = 1 ]; then
		say "would copy pgTAP into $dest"
	else
		gridha_install_pgtap || {
			echo "install-debian: could not copy pgTAP into $dest" >&2
			exit 1
		}
		say "copied pgTAP into $dest"
	fi
fi

# ---------------------------------------------------------------------------
# Citus into Debian's PostgreSQL 15 (031_citus), from ../shared/citus

CITUS_CFG=${GRIDHA_CITUS_PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
CITUS_BUILDS=${GRIDHA_CITUS_BUILDS:-$REPO/../shared/citus}
if [ -d "$CITUS_BUILDS" ] && [ -x "$CITUS_CFG" ] &&
		[ ! -e "$("$CITUS_CFG" --pkglibdir)/citus.so" ]; then
	if [ -f "$REPO/test/install/citus.sh" ]; then
		if [ "$DRY" = 1 ]; then
			say "would install Citus into $CITUS_CFG's PostgreSQL (test/install/citus.sh)"
		else
			# shellcheck source=/dev/null # another file's, when it exists
			. "$REPO/test/install/citus.sh"
			install_citus "$CITUS_CFG" || {
				echo "install-debian: could not install Citus into $CITUS_CFG's PostgreSQL" >&2
				exit 1
			}
		fi
	else
		tarball=$(compgen -G "$CITUS_BUILDS/citus-*-pg15-debian12-x86_64.tar.xz" | head -n 1 || true)
		# the tarball holds usr/lib/postgresql/15/...: it unpacks at the
		# root of the tree that holds that path, / for Debian's
		root=${CITUS_CFG%/usr/lib/postgresql/15/bin/pg_config}
		if [ -z "$tarball" ]; then
			say "no Citus tarball in $CITUS_BUILDS: 031_citus will skip"
		elif [ "$root/usr/lib/postgresql/15/bin/pg_config" != "$CITUS_CFG" ]; then
			say "$CITUS_CFG is not a PostgreSQL 15 at .../usr/lib/postgresql/15: no Citus"
		elif [ "$DRY" = 1 ]; then
			say "would unpack $(basename "$tarball") into ${root:-/}"
		else
			say "unpacking $(basename "$tarball") into ${root:-/}"
			tar -C "${root:-/}" -xJf "$tarball"
		fi
	fi
fi
exit 0
