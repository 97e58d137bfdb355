#!/usr/bin/env bash
# test/suites/80_dist.sh: the PGXN bundle (make dist), as PGXN and its users
# get it.
#
#   make dist in a clone of the repository's HEAD (a scratch clone, so the
#   working tree and its build are left alone) gives gridha-<version>.zip,
#   <version> being gridha.control's default_version as a semantic version
#   (1.1 -> 1.1.0, as PGXN wants); the zip holds one top directory
#   gridha-<version>/ with the committed files only (no
#   object, library or build output); its sql/ holds only the install
#   scripts, the regress tests being in test/sql and expected/ (with
#   test/expected a symlink to ../expected). Unpacked with python3's zipfile in a
#   clean directory: its META.json is valid against the PGXN Meta Spec and
#   gives that version (test/pgxn_meta.py, the bundle's own); `make` and
#   `make install` there (PG_CONFIG of the run) build and install it;
#   `make installcheck`'s regress tests pass there against the run's
#   cluster (zipfile, like pgxnclient, leaves test/expected a plain file,
#   which installcheck makes the link again for 15's pg_regress);
#   CREATE EXTENSION gridha in a new database of the run's cluster gives the
#   default version; and pgxnclient (`pgxn load`, Debian's pgxnclient)
#   reads the bundle's META.json and creates gridha from it.
#
# What it installs is HEAD's gridha, into the run's PostgreSQL: the same as
# `make install` of a committed tree. Needs git and pgxnclient (as root,
# test/install-debian.sh installs them).
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
FAILED=0
DB=gridha_dist

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 11

WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-dist.XXXXXX)}
mkdir -p "$WORK"
cleanup() {
	psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1
	psql -X -q -d postgres -c "DROP DATABASE IF EXISTS ${DB}_pgxn" >/dev/null 2>&1
	[ -n "${GRIDHA_SUITE_DIR:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

VERSION=$(sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" "$REPO/gridha.control")
# PGXN's version is semantic: 1.1 -> 1.1.0 (META.json, the zip's name)
DISTVERSION=$(echo "$VERSION" | awk -F. '{ printf "%s.%s.%s", $1, ($2 == "" ? 0 : $2), ($3 == "" ? 0 : $3) }')
ZIP=gridha-$DISTVERSION.zip
rm -rf "$WORK/clone" "$WORK/clean"

# make dist in a clone of HEAD
command -v git >/dev/null || gridha_missing_note git | diag
if git clone -q --no-hardlinks "$REPO" "$WORK/clone" >"$WORK/clone.log" 2>&1 &&
	env -u MAKEFLAGS -u MAKELEVEL make -s -C "$WORK/clone" dist PG_CONFIG="$PG_CONFIG" >"$WORK/dist.log" 2>&1 &&
	[ -s "$WORK/clone/$ZIP" ]; then
	ok "make dist gives $ZIP (gridha.control's default_version $VERSION)"
else
	not_ok "make dist gives $ZIP (gridha.control's default_version $VERSION)"
	cat "$WORK/clone.log" "$WORK/dist.log" 2>/dev/null | tail -n 20 | diag
fi
printf '%d bytes  %s\n' "$(stat -c %s "$WORK/clone/$ZIP" 2>/dev/null || echo 0)" "$ZIP" | diag

python3 - "$WORK/clone/$ZIP" "gridha-$DISTVERSION/" "$WORK/clone" >"$WORK/zip.check" 2>&1 <<'EOF'
import subprocess, sys, zipfile
z, top, clone = sys.argv[1], sys.argv[2], sys.argv[3]
names = zipfile.ZipFile(z).namelist()
bad = [n for n in names if not n.startswith(top)]
built = [n for n in names if n.endswith((".o", ".so", ".bc", ".zip")) or "/results/" in n]
files = sorted(n[len(top):] for n in names if not n.endswith("/"))
tracked = sorted(subprocess.check_output(["git", "-C", clone, "ls-files"], text=True).split())
if bad or built or files != tracked:
    print("outside %s: %s; build output: %s; not HEAD's files: %s"
          % (top, bad[:5], built[:5], sorted(set(files) ^ set(tracked))[:10]))
    sys.exit(1)
print("%d files, all under %s, the same as git ls-files" % (len(files), top))
EOF
check $? "the zip holds HEAD's committed files under gridha-$DISTVERSION/ and nothing built"
diag <"$WORK/zip.check"

# install scripts and regress tests apart (issue 42): sql/ holds only the
# install scripts; each test of the Makefile's REGRESS has its input in
# test/sql and its output in expected/, which test/expected (a symlink, for
# PostgreSQL 15's pg_regress) names
python3 - "$WORK/clone/$ZIP" "gridha-$DISTVERSION/" >"$WORK/layout.check" 2>&1 <<'EOF'
import re, stat, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
top = sys.argv[2]
info = {i.filename[len(top):]: i for i in z.infolist()}
bad = []
scripts = sorted(n for n in info if re.fullmatch(r"sql/gridha--[^/]+\.sql", n))
others = sorted(n for n in info if re.fullmatch(r"sql/[^/]+", n) and n not in scripts)
if others:
    bad.append("sql/ holds more than install scripts: %s" % ", ".join(others))
m = re.search(r"^REGRESS\s*=\s*(.*)$", z.read(top + "Makefile").decode(), re.M)
tests = m.group(1).split() if m else []
if not tests:
    bad.append("the Makefile has no REGRESS list")
for t in tests:
    for f in ("test/sql/%s.sql" % t, "expected/%s.out" % t):
        if f not in info:
            bad.append("no %s" % f)
link = info.get("test/expected")
if link is None or not stat.S_ISLNK(link.external_attr >> 16) or z.read(link) != b"../expected":
    bad.append("test/expected is not a symlink to ../expected")
print("; ".join(bad) if bad else
      "%d regress tests in test/sql with expected/NAME.out; sql/ holds %d install scripts"
      % (len(tests), len(scripts)))
sys.exit(1 if bad else 0)
EOF
check $? "in the zip, sql/ holds only install scripts and the regress tests are in test/sql and expected/"
diag <"$WORK/layout.check"

mkdir -p "$WORK/clean"
python3 -m zipfile -e "$WORK/clone/$ZIP" "$WORK/clean" >"$WORK/unzip.log" 2>&1
SRC=$WORK/clean/gridha-$DISTVERSION
[ -f "$SRC/Makefile" ] && [ -f "$SRC/META.json" ]
check $? "the zip unpacks in a clean directory (gridha-$DISTVERSION/Makefile, META.json)"

(cd "$SRC" && python3 test/pgxn_meta.py --control gridha.control META.json) >"$WORK/meta.log" 2>&1
check $? "its META.json is valid against the PGXN Meta Spec 1.0.0, version $DISTVERSION"
diag <"$WORK/meta.log"

# the bundle builds and installs (git archive keeps file modes, not times)
if env -u MAKEFLAGS -u MAKELEVEL make -C "$SRC" -j2 PG_CONFIG="$PG_CONFIG" >"$WORK/make.log" 2>&1; then
	ok "make in the unpacked bundle builds gridha"
else
	not_ok "make in the unpacked bundle builds gridha"
	grep -E -A3 'error|\*\*\*' "$WORK/make.log" | head -n 30 | diag
fi
if env -u MAKEFLAGS -u MAKELEVEL make -C "$SRC" install PG_CONFIG="$PG_CONFIG" >"$WORK/install.log" 2>&1; then
	ok "make install from the unpacked bundle"
else
	not_ok "make install from the unpacked bundle"
	tail -n 20 "$WORK/install.log" | diag
fi

# the regress tests from the unpacked bundle, as `pgxn check` runs them:
# python's zipfile (like pgxnclient) leaves test/expected a file holding
# "../expected", and before 16 pg_regress reads the outputs through it
[ ! -L "$SRC/test/expected" ]
unlinked=$?
if env -u MAKEFLAGS -u MAKELEVEL make -C "$SRC" installcheck PG_CONFIG="$PG_CONFIG" \
		ISOLATION= PGTAP_TESTS= TAP_TESTS= >"$WORK/installcheck.log" 2>&1; then
	ok "make installcheck's regress tests pass in the unpacked bundle (its test/expected a plain file: $([ $unlinked -eq 0 ] && echo yes || echo no))"
else
	not_ok "make installcheck's regress tests pass in the unpacked bundle"
	tail -n 20 "$WORK/installcheck.log" | diag
	[ -f "$SRC/regression.diffs" ] && head -n 40 "$SRC/regression.diffs" | diag
fi

got=$(psql -X -q -A -t -v ON_ERROR_STOP=1 -d postgres -c "SET client_min_messages = warning" \
	-c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" 2>&1 &&
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" -c "CREATE EXTENSION gridha" \
		-c "SELECT extversion FROM pg_extension WHERE extname = 'gridha'" 2>&1)
[ "$got" = "$VERSION" ]
check $? "CREATE EXTENSION gridha from the installed bundle gives $VERSION (got: $got)"

# pgxnclient, Debian's PGXN client, reads the bundle as PGXN would
command -v pgxn >/dev/null
check $? "pgxnclient is installed (pgxn)"
command -v pgxn >/dev/null || gridha_missing_note pgxnclient | diag
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS ${DB}_pgxn" -c "CREATE DATABASE ${DB}_pgxn" >/dev/null 2>&1
pgxn load --yes --pg_config "$PG_CONFIG" -h "$PGHOST" -p "$PGPORT" -U postgres -d "${DB}_pgxn" \
	"$WORK/clone/$ZIP" >"$WORK/pgxn.log" 2>&1
got=$(psql -X -q -A -t -d "${DB}_pgxn" -c "SELECT extversion FROM pg_extension WHERE extname = 'gridha'" 2>&1)
[ "$got" = "$VERSION" ]
check $? "pgxn load of $ZIP reads its META.json and creates gridha $VERSION (got: $got)"
diag <"$WORK/pgxn.log"

[ "$FAILED" -eq 0 ]
