#!/usr/bin/env bash
# test/suites/81_deb.sh: the Debian package (debian/), built, installed,
# used and removed as a user would.
#
#   build    the working tree's files (git ls-files: committed or not, less
#            what .gitignore ignores) copied to gridha-<version>/ in the
#            suite's directory, its orig tarball made from them, and
#            `dpkg-buildpackage -us -uc` (source and binary) for the majors
#            debian/pgversions and postgresql-common give: on Debian 12,
#            PostgreSQL 15. The build dependencies must be installed
#            (test/install-debian.sh installs them, as root). The
#            version of debian/changelog must be gridha.control's.
#   install  a clean place: the machine's / under an overlay in a mount and
#            network namespace of its own (upper layer on a tmpfs, its own
#            loopback), gridha's own `make install` files removed from it,
#            Debian's cluster 15/main made afresh (pg_dropcluster,
#            pg_createcluster: what installing postgresql-15 makes), then
#            `apt-get install ./postgresql-15-gridha_*.deb`.
#   use      there, README.md's quick start, as written (the blocks after
#            "<!-- quickstart-setup -->" and "<!-- quickstart -->", in
#            order, as root from an empty directory: no source tree, only
#            the package): every batch ends committed, CREATE EXTENSION gave
#            the default version, and the worker's batches reached the
#            quick start's ledger stand-in (its table public.ledger) in each
#            service's order, each after the one before it was committed.
#            The time from `apt-get install` to the first committed batch
#            (and to the worker's first) is printed. The quick start's
#            conf.d file is removed afterwards, as a user would.
#   autopkgtest  there too, debian/tests/installcheck in the built source
#            tree, as autopkgtest runs it: pg_buildext installcheck against
#            the installed package (make installcheck: pg_regress, the
#            isolation specs, pgTAP), gridha preloaded; its time is shown.
#   remove   apt-get purge: the package is gone, none of its files is left,
#            and the clean place holds the same files outside /var and /tmp
#            (dpkg's and apt's records, the cluster) as before the install
#            (of the files written there: the machine's own below it may
#            change meanwhile).
#
# Needs root (mount and network namespaces, chroot; apt-get installs and
# purges the package under test inside the overlay only, which the machine
# never sees) and Debian's PostgreSQL 15; under
# another PG_CONFIG (CI's 16 and 17 runs) the planned tests are skipped:
# Debian 12 has no postgresql-16/17 nor postgresql-server-dev-16/17. A tree
# of ../shared/pg unpacked as /usr/lib/postgresql/NN does let pg_buildext
# build postgresql-NN-gridha (PG_SUPPORTED_VERSIONS=NN), but that package
# installs into the tree's layout (/usr/lib/postgresql/NN/lib/postgresql,
# .../share/postgresql/extension), not Debian's, and depends on
# postgresql-NN (>> NN.x), which no registry here provides: apt-get cannot
# install it.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
FAILED=0
PIDS=()

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"

TESTS=(
	"build: debian/changelog's version is gridha.control's default_version"
	"build: the build dependencies are installed"
	"build: dpkg-buildpackage -us -uc builds the source and postgresql-15-gridha"
	"build: the .deb holds gridha.so, gridha.control and every sql/gridha--*.sql"
	"install: apt-get install ./postgresql-15-gridha_*.deb in a clean place"
	"use: README.md's quick start runs as written after the install, CREATE EXTENSION gridha at the default version"
	"use: every batch of the quick start ends committed, some by hand and some by its worker"
	"use: the worker's batches reached the quick start's ledger stand-in in order, one in flight"
	"autopkgtest: debian/tests/installcheck (pg_buildext installcheck, gridha preloaded) passes"
	"remove: apt-get purge removes postgresql-15-gridha"
	"remove: none of the package's files is left"
	"remove: nothing else is left behind outside /var and /tmp"
)
plan ${#TESTS[@]}

# skip_rest N WHY: the planned tests from the Nth on, skipped.
skip_rest() {
	local i
	for ((i = $1; i < ${#TESTS[@]}; i++)); do
		skip_test "${TESTS[$i]}" "$2"
	done
	exit 0
}

# fail_rest N WHY: the planned tests from the Nth on, failed; the suite ends.
fail_rest() {
	local i
	for ((i = $1; i < ${#TESTS[@]}; i++)); do
		not_ok "${TESTS[$i]} (not run: $2)"
	done
	exit 1
}

if [ "$(id -u)" -ne 0 ]; then
	skip_rest 0 "needs root (apt-get, mount, chroot)"
fi
if [ "$(gridha_debian_major)" != 15 ]; then
	skip_rest 0 "the package is built for Debian's PostgreSQL 15; this run's PG_CONFIG is $PG_CONFIG"
fi

WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-deb.XXXXXX)}
mkdir -p "$WORK"
NS_PID=
OVL=

cleanup() {
	if [ -n "$NS_PID" ]; then
		in_ovl pg_ctlcluster 15 main stop -m immediate >/dev/null 2>&1
		kill "$NS_PID" 2>/dev/null
		wait "$NS_PID" 2>/dev/null
	fi
	[ -n "$OVL" ] && rm -rf "$OVL"
	suite_stop_pids
	[ -n "${GRIDHA_SUITE_DIR:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

# in_ovl CMD...: CMD inside the clean place (the overlay's root).
in_ovl() {
	nsenter --target "$NS_PID" --mount --net --root --wd chroot "$OVL/root" "$@"
}

# ---------------------------------------------------------------------------
# build

VERSION=$(sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" "$REPO/gridha.control")
DEBVER=$(dpkg-parsechangelog -l "$REPO/debian/changelog" -S Version 2>/dev/null ||
	sed -n '1s/^[^(]*(\([^)]*\)).*/\1/p' "$REPO/debian/changelog")
UPSTREAM=${DEBVER%-*}
[ -n "$VERSION" ] && [ "$UPSTREAM" = "$VERSION" ]
check $? "${TESTS[0]} ($DEBVER, $VERSION)"
[ "$UPSTREAM" = "$VERSION" ] ||
	echo "# add a debian/changelog entry for $VERSION-1 (the release's)" | diag

need=()
# (iproute2: `ip`, which brings the install's network namespace's loopback
# up; a fresh machine may lack it, and the autopkgtest connects over TCP)
for p in build-essential debhelper dpkg-dev fakeroot postgresql-server-dev-all postgresql-server-dev-15 \
	libpq-dev make gcc iproute2; do
	dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
# libcurl's headers: either flavour, as debian/control says
dpkg -s libcurl4-openssl-dev >/dev/null 2>&1 || dpkg -s libcurl4-gnutls-dev >/dev/null 2>&1 ||
	need+=(libcurl4-openssl-dev)
if [ "${#need[@]}" -eq 0 ]; then
	ok "${TESTS[1]}"
else
	not_ok "${TESTS[1]} (${need[*]})"
	gridha_missing_note "${need[@]}" | diag
	fail_rest 2 "no build dependencies"
fi

SRC=$WORK/build/gridha-$UPSTREAM
rm -rf "$WORK/build"
mkdir -p "$SRC"
(cd "$REPO" && git ls-files -z --cached --others --exclude-standard |
	tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -C "$SRC" -xf -
# the orig tarball: the same files less debian/
tar -C "$WORK/build" --exclude="gridha-$UPSTREAM/debian" -czf "$WORK/build/gridha_$UPSTREAM.orig.tar.gz" \
	"gridha-$UPSTREAM"
start=$SECONDS
(cd "$SRC" && dpkg-buildpackage -us -uc -j2) >"$WORK/dpkg-buildpackage.log" 2>&1
rc=$?
DEB=$(compgen -G "$WORK/build/postgresql-15-gridha_${DEBVER}_*.deb" | head -n 1)
[ "$rc" -eq 0 ] && [ -n "$DEB" ]
check $? "${TESTS[2]} ($((SECONDS - start)) s)"
if [ "$rc" -ne 0 ] || [ -z "$DEB" ]; then
	grep -E -B2 -A5 'error|Error|warning:' "$WORK/dpkg-buildpackage.log" | tail -n 40 | diag
	fail_rest 3 "no package"
fi
(cd "$WORK/build" && for f in *.deb *.dsc *.tar.* *.changes *.buildinfo; do
	[ -f "$f" ] && printf '%8d  %s\n' "$(stat -c %s "$f")" "$f"
done) | diag

dpkg-deb -c "$DEB" | awk '{print $NF}' | sed 's|^\./|/|' >"$WORK/deb.files"
missing=""
for f in /usr/lib/postgresql/15/lib/gridha.so /usr/share/postgresql/15/extension/gridha.control \
	$(cd "$REPO" && ls sql/gridha--*.sql | sed 's|^sql/|/usr/share/postgresql/15/extension/|'); do
	grep -qxF "$f" "$WORK/deb.files" || missing="$missing $f"
done
[ -z "$missing" ]
check $? "${TESTS[3]}${missing:+ (missing:$missing)}"

# ---------------------------------------------------------------------------
# install, in a clean place

OVL=$(mktemp -d /tmp/gridha-deb-ovl.XXXXXX)
unshare --mount --net --propagation unchanged sleep 3600 &
NS_PID=$!
sleep 0.2
# its own loopback: the cluster 15/main's port 5432 is the namespace's alone
if ! nsenter --target "$NS_PID" --net ip link set lo up >"$WORK/lo.log" 2>&1; then
	echo "# the install's namespace has no loopback: $(head -c 200 "$WORK/lo.log")" | diag
fi
# the overlay: / below, a tmpfs above; /proc and /dev from the machine
# (--root: entering a mount namespace resets the root to the namespace's,
# not the chroot this may run in)
if ! nsenter --target "$NS_PID" --mount --root --wd sh -ec "
	mount -t tmpfs tmpfs '$OVL'
	mkdir -p '$OVL/upper' '$OVL/work' '$OVL/root'
	mount -t overlay overlay -o lowerdir=/,upperdir='$OVL/upper',workdir='$OVL/work' '$OVL/root'
	mount --bind /proc '$OVL/root/proc'
	mount --bind /dev '$OVL/root/dev'
	cp '$DEB' '$OVL/root/tmp/'" >"$WORK/overlay.log" 2>&1; then
	not_ok "${TESTS[4]} (no overlay: $(head -c 200 "$WORK/overlay.log"))"
	fail_rest 5 "no clean place"
fi
# gridha's own `make install` files are not the package's
for f in /usr/lib/postgresql/15/lib/gridha.so /usr/lib/postgresql/15/lib/bitcode/gridha \
	/usr/lib/postgresql/15/lib/bitcode/gridha.index.bc /usr/share/postgresql/15/extension/gridha.control \
	/usr/share/postgresql/15/extension/gridha--*.sql /usr/share/doc/postgresql-doc-15/extension/README.md; do
	in_ovl sh -c "rm -rf $f"
done
# Debian's cluster 15/main, as installing postgresql-15 makes it (the
# machine's own may be stale or missing)
in_ovl sh -c "pg_dropcluster 15 main; pg_createcluster 15 main" >"$WORK/createcluster.log" 2>&1
in_ovl find / -xdev -path /proc -prune -o -path /tmp -prune -o -path /var -prune -o \
	-type f -print 2>/dev/null | sort >"$WORK/files.before"
INSTALL_START=$(date +%s.%N)
if in_ovl env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
	"/tmp/$(basename "$DEB")" >"$WORK/apt-install.log" 2>&1 &&
	in_ovl dpkg -s postgresql-15-gridha >/dev/null 2>&1; then
	ok "${TESTS[4]}"
else
	not_ok "${TESTS[4]}"
	tail -n 20 "$WORK/apt-install.log" | diag
	fail_rest 5 "not installed"
fi
in_ovl dpkg -L postgresql-15-gridha >"$WORK/dpkg-L.txt"

# ---------------------------------------------------------------------------
# use: README.md's quick start, as written, in the clean place

python3 - "$REPO/README.md" "$WORK/quickstart.sh" <<'PYEOF'
import sys
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
out = []
for i, line in enumerate(lines):
    if line.strip() in ("<!-- quickstart-setup -->", "<!-- quickstart -->"):
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j < len(lines) and lines[j].startswith("```"):
            k = j + 1
            while k < len(lines) and not lines[k].startswith("```"):
                k += 1
            out.append("# --- README.md line %d\n%s" % (j + 1, "\n".join(lines[j + 1:k])))
open(sys.argv[2], "w", encoding="utf-8").write("\n".join(out) + "\n")
PYEOF
in_ovl sh -c "rm -rf /tmp/quickstart && mkdir -p /tmp/quickstart"
in_ovl sh -c "cat >/tmp/quickstart/run.sh" <"$WORK/quickstart.sh"
printf '\\set ON_ERROR_STOP on\n' | in_ovl sh -c "cat >/tmp/quickstart/psqlrc"
DB=$(sed -n "s/^gridha.database *= *'\([^']*\)'.*/\1/p" "$WORK/quickstart.sh" | tail -n 1)
qs() {
	in_ovl env -u PGPORT -u PGHOST -u PGUSER -u PGDATA -u PGDATABASE -u PGOPTIONS HOME=/root \
		PSQLRC=/tmp/quickstart/psqlrc "$@"
}
dbq() {
	qs psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}
qs timeout 300 sh -c "cd /tmp/quickstart && exec bash -e -o pipefail run.sh" >"$WORK/quickstart.out" 2>&1
rc=$?
got=$(dbq -c "SELECT extversion FROM pg_extension WHERE extname = 'gridha'" 2>&1)
[ "$rc" -eq 0 ] && [ "$got" = "$VERSION" ]
check $? "${TESTS[5]} (exit $rc, $got)"
[ "$rc" -eq 0 ] || tail -n 30 "$WORK/quickstart.out" | diag

[ "$(dbq -c "SELECT count(*) >= 2 AND count(*) FILTER (WHERE status <> 'committed') = 0
	AND bool_or(i.kind = 'worker') AND bool_or(i.kind <> 'worker')
	FROM gridha.batches b JOIN gridha.instances i USING (instance_id)" 2>&1)" = t ]
check $? "${TESTS[6]}"
dbq -c "SELECT status, count(*) FROM gridha.batches GROUP BY 1" 2>&1 | diag

[ "$(dbq -c "WITH w AS (SELECT b.service_id, b.seq, l.received_at,
	       lag(b.finished_at) OVER (PARTITION BY b.service_id ORDER BY b.seq) AS prev_final,
	       row_number() OVER (PARTITION BY b.service_id ORDER BY b.seq) AS by_seq,
	       row_number() OVER (PARTITION BY b.service_id ORDER BY l.received_at) AS by_arrival
	  FROM gridha.batches b LEFT JOIN public.ledger l USING (batch_id)
	 WHERE b.service_id IN (SELECT b2.service_id FROM gridha.batches b2
	                          JOIN gridha.instances i USING (instance_id) WHERE i.kind = 'worker'))
	SELECT count(*) > 0 AND count(*) FILTER (WHERE received_at IS NULL OR by_seq <> by_arrival
	                                         OR received_at < prev_final) = 0 FROM w" 2>&1)" = t ]
check $? "${TESTS[7]}"

# from apt-get install to the first committed batch (the quick start's
# step 3, by hand) and to the worker's first
times=$(dbq -F ' ' -c "SELECT round((extract(epoch FROM min(b.finished_at)) - $INSTALL_START)::numeric, 1),
	round((extract(epoch FROM min(b.finished_at) FILTER (WHERE i.kind = 'worker')) - $INSTALL_START)::numeric, 1)
	FROM gridha.batches b JOIN gridha.instances i USING (instance_id) WHERE b.status = 'committed'" 2>&1)
echo "from apt-get install of the .deb to the first committed batch: ${times%% *} s; to the worker's first: ${times##* } s (machine time, the quick start run as a script)" | diag
in_ovl grep -E 'terminated by signal (4|6|7|8|11)([^0-9]|$)|PANIC:|TRAP:' /var/log/postgresql/postgresql-15-main.log | diag
in_ovl cat /var/log/postgresql/postgresql-15-main.log >"$WORK/debtest-postgres.log" 2>/dev/null
[ -d "${GRIDHA_LOG_DIR:-}" ] && cp "$WORK/debtest-postgres.log" "$GRIDHA_LOG_DIR/81_deb-postgres.log"
in_ovl pg_ctlcluster 15 main stop -m fast >/dev/null 2>&1
# the quick start's own file (not the package's), removed as a user would
in_ovl rm -f /etc/postgresql/15/main/conf.d/gridha.conf

start=$SECONDS
# without the run's PG* settings: pg_virtualenv picks a port of its own, and
# PGPORT (the run's cluster's, in use) would make its cluster fail to start
in_ovl env -u PGPORT -u PGHOST -u PGUSER -u PGDATA -u PGDATABASE \
	sh -c "cd '$SRC' && sh debian/tests/installcheck" >"$WORK/autopkgtest.log" 2>&1
rc=$?
took=$((SECONDS - start))
summary=$(grep -E 'All [0-9]+ tests passed|^Files=|^Result:' "$WORK/autopkgtest.log" | sed 's/^ *//' | paste -sd ';')
[ "$rc" -eq 0 ] && grep -q '^Result: PASS' "$WORK/autopkgtest.log"
check $? "${TESTS[8]} (${took} s)"
echo "$summary" | diag
[ "$rc" -eq 0 ] || grep -E -A5 'FAIL|failed|error' "$WORK/autopkgtest.log" | head -n 40 | diag

# ---------------------------------------------------------------------------
# remove

in_ovl env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q postgresql-15-gridha >"$WORK/apt-purge.log" 2>&1
! in_ovl dpkg -s postgresql-15-gridha >/dev/null 2>&1
check $? "${TESTS[9]}"

left=""
while read -r f; do
	[ "$f" = /. ] && continue
	if in_ovl test -f "$f" || in_ovl test -L "$f"; then
		left="$left $f"
	fi
done <"$WORK/dpkg-L.txt"
[ -z "$left" ]
check $? "${TESTS[10]}${left:+ (left:$left)}"

in_ovl find / -xdev -path /proc -prune -o -path /tmp -prune -o -path /var -prune -o \
	-type f -print 2>/dev/null | sort >"$WORK/files.after"
# only what was written in the clean place (its upper layer): the machine's
# own files below it may come and go meanwhile (other work on a shared
# machine), and those are not the package's
extra=$(comm -13 "$WORK/files.before" "$WORK/files.after" |
	nsenter --target "$NS_PID" --mount sh -c "while read -r f; do [ -e '$OVL/upper'\"\$f\" ] && echo \"\$f\"; done")
[ -z "$extra" ]
check $? "${TESTS[11]}"
[ -z "$extra" ] || echo "$extra" | head -n 20 | diag

[ "$FAILED" -eq 0 ]
