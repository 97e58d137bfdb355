#!/usr/bin/env bash
# test/install/citus.sh: installs Citus into a PostgreSQL 15 tree, for
# test/t/031_citus.pl (which only reads the tree, and skips its tests when
# Citus is not there). Needs root: the tree is the system's.
#
#   . test/install/citus.sh
#   install_citus PG_CONFIG
#
# Citus exists for PostgreSQL 15 only, as the tarball
# ../shared/citus/citus-*-pg15-debian12-x86_64.tar.xz (relative to the
# repository; GRIDHA_CITUS_BUILDS names another directory). The tarball
# holds usr/lib/postgresql/15/...: it unpacks at the root of a tree laid
# out as Debian's (/ for the system's). Nothing is installed when the tree
# has Citus already, or (a note on stderr; returns 0, and the test reports
# its tests skipped) when the tree is not PostgreSQL 15 or not laid out as
# Debian's, when there is no tarball, or when GRIDHA_CITUS_INSTALL=0.
# Returns non-zero (the reason on stderr) when PG_CONFIG is no program,
# when it is not run as root, or when the unpacking failed.

# install_citus PG_CONFIG
install_citus() {
	local cfg=$1 repo builds major lib tarball root
	repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
	builds=${GRIDHA_CITUS_BUILDS:-$repo/../shared/citus}
	if [ ! -x "$cfg" ]; then
		echo "install_citus: no PostgreSQL at $cfg" >&2
		return 1
	fi
	major=$("$cfg" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
	if [ "$major" != 15 ]; then
		echo "install_citus: $cfg is PostgreSQL $major; Citus here exists for 15 only: not installed" >&2
		return 0
	fi
	lib=$("$cfg" --pkglibdir)
	[ -e "$lib/citus.so" ] && return 0
	if [ "${GRIDHA_CITUS_INSTALL:-1}" = 0 ]; then
		echo "install_citus: no Citus in $lib, and GRIDHA_CITUS_INSTALL=0: not installed" >&2
		return 0
	fi
	if [ "$(id -u)" -ne 0 ]; then
		echo "install_citus: no Citus in $lib; installing it needs root" >&2
		return 1
	fi
	tarball=$(compgen -G "$builds/citus-*-pg15-debian12-x86_64.tar.xz" | head -n 1)
	if [ -z "$tarball" ]; then
		echo "install_citus: no Citus in $lib, and no $builds/citus-*-pg15-debian12-x86_64.tar.xz: not installed" >&2
		return 0
	fi
	root=${cfg%/usr/lib/postgresql/15/bin/pg_config}
	if [ "$root/usr/lib/postgresql/15/bin/pg_config" != "$cfg" ]; then
		echo "install_citus: $cfg is not laid out as Debian's (ROOT/usr/lib/postgresql/15): $(basename "$tarball") does not fit it; not installed" >&2
		return 0
	fi
	echo "install_citus: installing $(basename "$tarball") into ${root:-/}"
	tar -C "${root:-/}" -xJf "$tarball" || return 1
	[ -e "$lib/citus.so" ]
}
