#!/usr/bin/env python3
# test/docs/check_docs.py: the checks of test/t/070_docs.pl (its header
# lists them): the docs against the catalog of a fresh install and against
# the files that define gridha's errors, settings and version.
#
#   check_docs.py REPO WORK EXAMPLES_DB
#
# WORK holds what the .pl read from the catalog (functions.tsv, outputs.tsv,
# relations.tsv, types.tsv, userfuncs.tsv, preload.txt, settings.tsv,
# installed.txt); the docs' examples run with psql in a new database
# EXAMPLES_DB of the server PGHOST and PGPORT name (dropped afterwards).
# Output: a plan line "1..N", then one TAP line per object or file, each
# failure followed by "#" lines saying exactly what text to add; exit 1
# when anything failed.
import glob
import json
import os
import re
import subprocess
import sys

REPO, WORK = sys.argv[1], sys.argv[2]
results = []          # (ok, description, [diagnostic lines])


def check(ok, what, *diag):
    results.append((bool(ok), what, list(diag)))


def read(rel):
    """read: a repository file's text, or None when it does not exist."""
    try:
        with open(os.path.join(REPO, rel), encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def rows(name):
    with open(os.path.join(WORK, name), encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


def need(rel):
    text = read(rel)
    if text is None:
        check(False, rel + " exists", rel + " is missing from the repository")
        return ""
    return text


SQLREF, CONF, ERRS = "docs/sql-reference.md", "docs/configuration.md", "docs/errors.md"
sqlref, conf, errs = need(SQLREF), need(CONF), need(ERRS)

# functions, by signature without OUT arguments
for row in rows("functions.tsv"):
    name = row[0]
    identity = row[1] if len(row) > 1 else ""
    args = [a for a in identity.split(", ") if a and not a.startswith("OUT ")]
    sig = "%s(%s)" % (name, ", ".join(args))
    check(sig in sqlref, "function gridha.%s is documented in %s" % (sig, SQLREF),
          "%s lacks the signature `%s` (write it in the function's section as `gridha.%s`)"
          % (SQLREF, sig, sig))

# the columns a function returns, in its own section ("### name")
def section(heading_re, text):
    m = re.search(r"^#+\s+%s\s*\n(.*?)(?=^#|\Z)" % heading_re, text, re.M | re.S)
    return m.group(1) if m else None


def word_in(word, text):
    return re.search(r"(?<![\w])%s(?![\w])" % re.escape(word), text)


for name, outs in rows("outputs.tsv"):
    body = section(re.escape(name), sqlref)
    cols = [c for c in outs.split(",") if c]
    missing = [c for c in cols if body is None or not word_in(c, body)]
    check(not missing, "the result columns of gridha.%s are documented in %s" % (name, SQLREF),
          *(["%s has no section '### %s'" % (SQLREF, name)] if body is None else
            ["%s: the section '### %s' lacks the result column(s) %s"
             % (SQLREF, name, ", ".join("`%s`" % c for c in missing))]))

# tables, views, sequences; a table's or view's columns in its row
for row in rows("relations.tsv"):
    name, kind = row[0], row[1]
    cols = [c for c in (row[2] if len(row) > 2 else "").split(",") if c]
    found = re.search(r"gridha\.%s(?![\w])" % re.escape(name), sqlref)
    diag = [] if found else ["%s never names `gridha.%s` (add it to the %ss)" % (SQLREF, name, kind)]
    if found and kind in ("table", "view"):
        line = re.search(r"^\|\s*`gridha\.%s`\s*\|.*$" % re.escape(name), sqlref, re.M)
        if not line:
            diag.append("%s has no row starting `| \\`gridha.%s\\` |` in the %ss' table"
                        % (SQLREF, name, kind))
        else:
            quoted = " ".join(re.findall(r"`([^`]*)`", line.group(0)))
            missing = [c for c in cols if not word_in(c, quoted)]
            if missing:
                diag.append("%s: the row of gridha.%s lacks the column(s) %s"
                            % (SQLREF, name, ", ".join("`%s`" % c for c in missing)))
    check(not diag, "%s gridha.%s is documented in %s%s"
          % (kind, name, SQLREF, " with its columns" if kind in ("table", "view") else ""), *diag)

# types, and the labels of an enum in its own section
for row in rows("types.tsv"):
    name, kind = row[0], row[1]
    labels = [l for l in (row[2] if len(row) > 2 else "").split(",") if l]
    diag = []
    # the labels must be in the type's own section (its heading to the next)
    sect = re.search(r"^(#+)[^\n]*gridha\.%s(?![\w])[^\n]*\n(.*?)(?=^#|\Z)" % re.escape(name),
                     sqlref, re.M | re.S)
    missing = [l for l in labels if "`%s`" % l not in (sect.group(2) if sect else "")]
    named = re.search(r"gridha\.%s(?![\w])" % re.escape(name), sqlref)
    if labels and not sect:
        diag.append("%s has no heading naming `gridha.%s` for its labels" % (SQLREF, name))
    if not named:
        diag.append("%s never names `gridha.%s`" % (SQLREF, name))
    if missing:
        diag.append("%s lacks the label(s) %s of enum gridha.%s"
                    % (SQLREF, ", ".join("`%s`" % l for l in missing), name))
    check(named and not missing,
          "%s type gridha.%s%s is documented in %s"
          % (kind, name, " and its labels" if labels else "", SQLREF), *diag)

# settings (those read at server start exist only when gridha is preloaded)
with open(os.path.join(WORK, "preload.txt"), encoding="utf-8") as f:
    preload = [x.strip() for x in f.read().split(",")]
check("gridha" in preload, "the cluster preloads gridha, so every gridha.* setting is listed",
      "shared_preload_libraries is %r: gridha.workers, gridha.database and gridha.worker_role "
      "would not be checked" % ",".join(preload))
TIME_MS = {"ms": 1, "s": 1000, "min": 60000, "h": 3600000, "d": 86400000}
BYTES = {"B": 1, "kB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}


def doc_default(text, unit, vartype):
    """doc_default: a default as configuration.md writes it (`30s`, `2kB`,
    `on`, `empty`), in the setting's own unit as pg_settings' boot_val
    gives it; None when it cannot be read."""
    text = text.strip().strip("`").strip()
    if vartype == "string":
        return "" if text == "empty" else text
    if vartype == "enum":
        return text
    if vartype == "bool":
        return {"on": "on", "off": "off", "true": "on", "false": "off"}.get(text)
    m = re.match(r"^(-?\d+(?:\.\d+)?)\s*([A-Za-z]*)$", text)
    if not m:
        return None
    value, u = float(m.group(1)), m.group(2)
    if u and u in TIME_MS and unit in TIME_MS:
        value = value * TIME_MS[u] / TIME_MS[unit]
    elif u and u in BYTES and unit in BYTES:
        value = value * BYTES[u] / BYTES[unit]
    elif u:
        return None
    return str(int(value)) if value == int(value) else str(value)


for row in rows("settings.tsv"):
    name, boot, unit, vartype = (row + ["", "", ""])[:4]
    line = re.search(r"^\|\s*`%s`\s*\|([^|]*)\|" % re.escape(name), conf, re.M)
    if not line:
        check(False, "setting %s is documented in %s with its default" % (name, CONF),
              "%s has no table row starting `| \\`%s\\` |`" % (CONF, name))
        continue
    written = line.group(1).strip()
    got = doc_default(written, unit, vartype)
    check(got == boot, "setting %s is documented in %s with its default" % (name, CONF),
          "%s gives %s the default %s; the server's is %r%s"
          % (CONF, name, written, boot, " " + unit if unit else ""))


# settings.c defines the settings in configuration.md's order, row for row
conf_order = re.findall(r"^\|\s*`(gridha\.[a-z_]+)`\s*\|", conf, re.M)
settings_c = read("src/settings.c") or ""
code_order = re.findall(r'DefineCustom\w+Variable\("(gridha\.[a-z_]+)"', settings_c)
check(code_order == conf_order,
      "src/settings.c defines the settings in the order of %s's table, row for row" % CONF,
      "settings.c: %s; %s: %s" % (", ".join(code_order), CONF, ", ".join(conf_order)))


def error_row(code):
    return re.search(r"^\|\s*`%s`\s*\|" % re.escape(code), errs, re.M)


# SQLSTATEs of the fuzz list
states = read("test/fuzz/sqlstates.txt")
if states is None:
    check(False, "test/fuzz/sqlstates.txt exists", "the file is missing")
else:
    codes = re.findall(r"^([0-9A-Z]{5})\s", states, re.M)
    check(codes, "test/fuzz/sqlstates.txt lists SQLSTATEs",
          "no line of the form 'CODE  meaning' found")
    for code in codes:
        check(error_row(code),
              "SQLSTATE %s of test/fuzz/sqlstates.txt is documented in %s" % (code, ERRS),
              "%s has no table row starting `| \\`%s\\` |`" % (ERRS, code))

# gridha's own codes in src/common.h
header = read("src/common.h") or ""
macros = re.findall(r"#define\s+(ERRCODE_GRIDHA_\w+)\s+MAKE_SQLSTATE\(\s*"
                    r"'(.)'\s*,\s*'(.)'\s*,\s*'(.)'\s*,\s*'(.)'\s*,\s*'(.)'\s*\)", header)
check(macros, "src/common.h defines ERRCODE_GRIDHA_ codes",
      "no '#define ERRCODE_GRIDHA_... MAKE_SQLSTATE(...)' found")
for m in macros:
    macro, code = m[0], "".join(m[1:])
    diag = []
    if not error_row(code):
        diag.append("%s has no table row starting `| \\`%s\\` |`" % (ERRS, code))
    if not re.search(r"`%s`" % macro, errs):
        diag.append("%s never names `%s`" % (ERRS, macro))
    check(not diag, "%s (%s) of src/common.h is documented in %s" % (macro, code, ERRS), *diag)

# the pages whose versions and links are checked
docs = ["README.md", "CHANGELOG.md"] + sorted(
    os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True))

# versions: gridha.control's default_version is the truth
control = read("gridha.control") or ""
m = re.search(r"^\s*default_version\s*=\s*'([^']*)'", control, re.M)
version = m.group(1) if m else None
check(version, "gridha.control has a default_version", "no default_version = '...' line")
if version:
    semver = version if version.count(".") >= 2 else version + ".0"
    ok_versions = {version, semver}
    with open(os.path.join(WORK, "installed.txt"), encoding="utf-8") as f:
        installed = f.read().strip()
    check(installed == version,
          "CREATE EXTENSION gridha installs gridha.control's default_version %s" % version,
          "the installed extension is version %r (is the control file installed stale?)" % installed)

    meta_text = read("META.json")
    try:
        meta = json.loads(meta_text) if meta_text is not None else None
    except ValueError as e:
        meta = None
        check(False, "META.json is valid JSON", str(e))
    if meta is None:
        check(False, "META.json can be read", "META.json is missing or not JSON")
    else:
        top = meta.get("version")
        check(top in ok_versions,
              "META.json's version is gridha.control's default_version %s" % version,
              "META.json says \"version\": %r; gridha.control says %r (write %r)"
              % (top, version, semver))
        prov = (meta.get("provides") or {}).get("gridha") or {}
        pv = prov.get("version")
        check(pv in ok_versions,
              "META.json's provides.gridha.version is gridha.control's default_version %s" % version,
              "META.json says provides.gridha.version %r; gridha.control says %r (write %r)"
              % (pv, version, semver))
        script = "sql/gridha--%s.sql" % version
        pf = prov.get("file")
        check(pf == script and os.path.exists(os.path.join(REPO, script)),
              "META.json's provides.gridha.file is the install script of %s" % version,
              "META.json says provides.gridha.file %r; the install script of %s is %s%s"
              % (pf, version, script,
                 "" if os.path.exists(os.path.join(REPO, script)) else " (which does not exist)"))

    readme_markers = 0
    for rel in docs:
        text = read(rel)
        if text is None:
            check(False, rel + " exists", rel + " is missing from the repository")
            continue
        marks = re.findall(r"<!--\s*version\s*-->\s*([0-9][0-9A-Za-z.]*[0-9A-Za-z])", text)
        if rel == "README.md":
            readme_markers = len(marks)
        if marks:
            wrong = [x for x in marks if x != version]
            check(not wrong,
                  "%s names version %s where it says which version is current" % (rel, version),
                  *["%s says version %s after '<!-- version -->'; gridha.control says %s"
                    % (rel, x, version) for x in wrong])
    check(readme_markers > 0, "README.md says which version is current",
          "README.md has no '<!-- version -->X' marker before the current version")
    changelog = read("CHANGELOG.md") or ""
    heads = re.findall(r"^##\s+(.*)$", changelog, re.M)
    check(heads and re.search(r"(?<![\w.])%s(?![\w]|\.\d)" % re.escape(version), heads[0]),
          "CHANGELOG.md's newest section is version %s" % version,
          "CHANGELOG.md's first '## ' heading is %r; it should name %s"
          % (heads[0] if heads else None, version))



# --- issue 40: versions, majors, install commands and repository alike ---
def marker_lines(rel, name):
    """marker_lines: the text after each "<!-- name -->" of a file, to the
    end of its line."""
    return re.findall(r"<!--\s*%s\s*-->\s*(.*)$" % re.escape(name), read(rel) or "", re.M)


def majors_of(text):
    """majors_of: the majors a sentence such as "PostgreSQL 15, 16 and 17"
    names, as a sorted tuple."""
    m = re.search(r"PostgreSQL\s+((?:\d+(?:\s*,\s*|\s+and\s+)?)+)", text)
    return tuple(sorted({int(x) for x in re.findall(r"\d+", m.group(1))})) if m else ()


if version:
    changelog = read("CHANGELOG.md") or ""
    heads = re.findall(r"^##\s+(.*)$", changelog, re.M)
    unreleased = bool(heads) and bool(re.search(r"unreleased|in progress", heads[0], re.I))
    readme_marks = marker_lines("README.md", "version")
    for m in readme_marks:
        says = "in progress" in m
        check(says == unreleased,
              "README.md says %s is %s, as CHANGELOG.md does" % (version, "in progress" if unreleased else "released"),
              "README.md's version line is %r; CHANGELOG.md's newest heading is %r" % (m, heads[0] if heads else None))
    deb = read("debian/changelog") or ""
    first = re.match(r"^\S+ \(([^)]*)\)[^\n]*\n(.*?)(?=^\S|\Z)", deb, re.S | re.M)
    debver = first.group(1) if first else None
    check(debver is not None and debver.rsplit("-", 1)[0] == version,
          "debian/changelog's newest entry is version %s" % version,
          "debian/changelog's newest entry is %r; add one for %s-1" % (debver, version))
    if first:
        check(("in progress" in first.group(2)) == unreleased,
              "debian/changelog says %s is %s, as CHANGELOG.md does" % (version, "in progress" if unreleased else "released"),
              "debian/changelog's newest entry %s in progress; CHANGELOG.md's newest heading is %r"
              % ("says" if "in progress" in first.group(2) else "does not say", heads[0] if heads else None))

# the supported majors
stated = {}
for rel in docs:
    for m in marker_lines(rel, "pg-versions"):
        stated.setdefault(majors_of(m), []).append(rel)
for rel in ("README.md", "docs/install.md"):
    check(any(rel in v for v in stated.values()), "%s says which PostgreSQL majors are supported" % rel,
          "%s has no '<!-- pg-versions -->PostgreSQL 15, 16 and 17' line" % rel)
meta_text = read("META.json") or "{}"
try:
    meta = json.loads(meta_text)
except ValueError:
    meta = {}
req = (((meta.get("prereqs") or {}).get("runtime") or {}).get("requires") or {}).get("PostgreSQL", "")
lo = re.search(r">=\s*(\d+)\.", req)
hi = re.search(r"<\s*(\d+)\.0\.0", req)
stated.setdefault(tuple(range(int(lo.group(1)), int(hi.group(1)))) if lo and hi else ("unbounded: %r" % req,),
                  []).append("META.json")
pgv = [l.strip() for l in (read("debian/pgversions") or "").splitlines() if l.strip() and not l.startswith("#")]
if any(not re.fullmatch(r"\d+", l) for l in pgv):
    stated.setdefault(("open-ended: %s" % " ".join(pgv),), []).append("debian/pgversions")
else:
    stated.setdefault(tuple(sorted(int(l) for l in pgv)), []).append("debian/pgversions")
low = re.search(r"PG_VERSION_NUM\s*<\s*(\d+)0000\s*\n\s*#\s*error", read("src/compat.h") or "")
check(low, "src/compat.h refuses majors below the lowest supported one",
      "no '#if PG_VERSION_NUM < N0000 / #error' found in src/compat.h")
majors = sorted(stated, key=lambda k: -len(stated[k]))
check(len(stated) == 1 and (not low or isinstance(majors[0][0], int) and int(low.group(1)) == majors[0][0]),
      "the supported PostgreSQL majors are the same in README.md, docs, META.json, debian/pgversions and src/compat.h",
      *["%s: %s" % (", ".join(v), ", ".join(str(x) for x in k)) for k, v in stated.items()] +
      (["src/compat.h: %s and later" % low.group(1)] if low else []))
supported = set(majors[0]) if majors and all(isinstance(x, int) for x in majors[0]) else set()


# the install commands
def fenced_after(rel, name):
    lines = (read(rel) or "").split("\n")
    for i, l in enumerate(lines):
        if l.strip() == "<!-- %s -->" % name:
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and lines[j].startswith("```"):
                k = j + 1
                while k < len(lines) and not lines[k].startswith("```"):
                    k += 1
                return [re.sub(r"^sudo\s+", "", x) for x in lines[j + 1:k]]
    return None


blocks = {rel: fenced_after(rel, "install-source") for rel in ("README.md", "docs/install.md")}
for rel, b in blocks.items():
    check(b is not None, "%s has the install commands after '<!-- install-source -->'" % rel,
          "%s has no fenced block after a '<!-- install-source -->' line" % rel)
if all(b is not None for b in blocks.values()):
    a, b = blocks["README.md"], blocks["docs/install.md"]
    check(a == b, "README.md and docs/install.md give the same install commands",
          *["README.md:       %s" % x for x in a] + ["docs/install.md: %s" % x for x in b])
    apt = " ".join(x for x in a if "apt-get install" in x).split()
    control = read("debian/control") or ""
    bd = re.search(r"^Build-Depends:(.*?)(?=^\S)", control, re.M | re.S)
    libs = [alt.split("|")[0].split("(")[0].strip() for alt in (bd.group(1) if bd else "").split(",")]
    libs = [x for x in libs if re.fullmatch(r"lib[\w.+-]*-dev", x)]
    missing = [x for x in libs if x not in apt]
    dev = [int(m) for m in re.findall(r"postgresql-server-dev-(\d+)", " ".join(apt))]
    check(libs and not missing and dev and set(dev) <= supported,
          "the install commands install debian/control's build libraries and a supported postgresql-server-dev-N",
          *(["the apt-get line lacks %s (debian/control's Build-Depends)" % ", ".join(missing)] if missing else []) +
          (["the apt-get line installs postgresql-server-dev-%s; supported: %s" % (dev, sorted(supported))]
           if not dev or not set(dev) <= supported else []))
bad = []
for rel in docs:
    for n in re.findall(r"postgresql-(\d+)-gridha", read(rel) or ""):
        if int(n) not in supported:
            bad.append("%s names postgresql-%s-gridha; supported: %s" % (rel, n, sorted(supported)))
check(not bad, "every postgresql-N-gridha package the docs name is of a supported major", *dict.fromkeys(bad))

# docs/testing.md: test/install-debian.sh is the one script that installs
# packages; no other script of the tests, benchmarks or demo runs apt-get
# (81_deb's install and purge of the package under test, inside its
# overlay, aside: that is what it tests)
bad = []
for top in ("test", "demo"):
    for d, _, files in os.walk(os.path.join(REPO, top)):
        for name in files:
            path = os.path.join(d, name)
            rel = os.path.relpath(path, REPO)
            if rel == "test/install-debian.sh" or not name.endswith((".sh", ".py", ".pl", ".pm")):
                continue
            try:
                with open(path, encoding="utf-8") as f:
                    lines = f.read().splitlines()
            except (OSError, UnicodeDecodeError):
                continue
            for i, line in enumerate(lines, 1):
                # the command, not a comment or a string that names it
                code = "" if line.lstrip().startswith("#") else re.sub(r'"[^"]*"|\'[^\']*\'', '""', line)
                if not re.search(r"\bapt(-get)?\s+(-\S+\s+)*(install|update|upgrade|dist-upgrade|purge|remove|build-dep)\b"
                                 r"|gridha_apt_install", code):
                    continue
                if rel == "test/suites/81_deb.sh" and re.match(r"\s*(if\s+)?in_ovl\b", code):
                    continue
                bad.append("%s:%d: %s" % (rel, i, line.strip()[:120]))
check(not bad, "no script of test/ or demo/ but test/install-debian.sh runs apt-get", *bad)

# --- issue 42: SQL in C, file by file, as docs/internals.md counts it ---
# A statement is a run of adjacent C string literals that begins with an
# SQL keyword in capitals; its lines are the literals' count. Every file of
# src/ that holds any has its row in the table under "### SQL statements
# in C" (file, statements, lines, why they are not in the install script),
# with today's figures; no other file has one.
SQL_WORDS = ("SELECT", "UPDATE", "INSERT", "DELETE", "WITH", "LOCK", "CREATE", "ALTER",
             "DROP", "SET", "CALL", "TRUNCATE")
counted = {}
for path in sorted(glob.glob(os.path.join(REPO, "src", "*.c"))):
    with open(path, encoding="utf-8") as f:
        src = f.read()
    for m in re.finditer(r'(?:"(?:[^"\\\n]|\\.)*"\s*)+', src):
        first = re.match(r'"\s*(\w+)', m.group(0))
        if not first or first.group(1) not in SQL_WORDS:
            continue
        n = counted.setdefault(os.path.basename(path), [0, 0])
        n[0] += 1
        n[1] += m.group(0).count('"') // 2
internals = need("docs/internals.md")
table = section(r"SQL statements in C", internals) or ""
documented = {}
for m in re.finditer(r"^\|\s*`src/([\w.]+)`\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\S.*?)\s*\|\s*$", table, re.M):
    documented[m.group(1)] = [int(m.group(2)), int(m.group(3))]
bad = []
for name in sorted(set(counted) | set(documented)):
    have, said = counted.get(name), documented.get(name)
    if have != said:
        bad.append("src/%s holds %s statements in %s lines of C string literals; docs/internals.md's table says %s"
                   % (name, have[0] if have else 0, have[1] if have else 0,
                      "%d in %d" % tuple(said) if said else "nothing (add a row: | `src/%s` | %d | %d | why |)"
                      % ((name,) + tuple(have))))
if not table:
    bad = ["docs/internals.md has no section \"### SQL statements in C\" with a row per file"]
check(not bad, "docs/internals.md counts the SQL statements in C file by file, as src/ holds them", *bad)

# the repository address
declared = []
res = meta.get("resources") or {}
for key in ("homepage",):
    if isinstance(res.get(key), str):
        declared.append(res[key])
repo = res.get("repository") or {}
for key in ("url", "web"):
    if isinstance(repo.get(key), str):
        declared.append(repo[key])
declared += re.findall(r"^(?:Homepage|Vcs-[\w-]+):\s*(\S+)", control if blocks else read("debian/control") or "", re.M)
said = {rel: marker_lines(rel, "repository") for rel in ("README.md", "docs/install.md")}
for rel, v in said.items():
    check(len(v) == 1, "%s says where gridha's source comes from" % rel,
          "%s has %d '<!-- repository -->' lines (want one)" % (rel, len(v)))
if all(len(v) == 1 for v in said.values()):
    a, b = said["README.md"][0], said["docs/install.md"][0]
    diag = []
    if a != b:
        diag += ["README.md:       %s" % a, "docs/install.md: %s" % b]
    for url in declared:
        if url not in a:
            diag.append("META.json or debian/control declares %s; the line does not name it" % url)
    if not declared and not re.search(r"\bno public repository\b", a):
        diag.append("META.json and debian/control declare no address; the line should say there is no public repository")
    check(not diag, "README.md and docs/install.md say the same of the repository as META.json and debian/control",
          *diag)
ph = [rel for rel in docs if re.search(r"<[^>]*repository URL>", read(rel) or "", re.I)]
check(not ph, "no page holds a placeholder for the repository address",
      *["%s holds a '<... repository URL>' placeholder" % rel for rel in ph])



# --- issue 40: every user function's example, run, and its output ---
EXDB = sys.argv[3]


def fenced(lines, i):
    """fenced: (language, body lines, index after the block) of the fenced
    block that starts at or after line i past blank lines, else None."""
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i >= len(lines) or not lines[i].startswith("```"):
        return None
    k = i + 1
    while k < len(lines) and not lines[k].startswith("```"):
        k += 1
    return lines[i][3:].strip(), lines[i + 1:k], k + 1


def clean(lines):
    out = [l.rstrip() for l in lines]
    while out and not out[-1]:
        out.pop()
    while out and not out[0]:
        out.pop(0)
    return out


ref_lines = sqlref.split("\n")
setup = None
examples = []           # (section, line number, sql lines, expected lines)
current = None
for i, l in enumerate(ref_lines):
    h = re.match(r"^#{2,3}\s+(.*?)\s*$", l)
    if h:
        current = h.group(1)
    mark = l.strip()
    if mark in ("<!-- example -->", "<!-- example-setup -->"):
        a = fenced(ref_lines, i + 1)
        b = fenced(ref_lines, a[2]) if a else None
        if not a or a[0] != "sql" or not b or b[0] != "text":
            check(False, "%s line %d: an example is a sql block then a text block" % (SQLREF, i + 1),
                  "after '%s' write a ```sql block and then a ```text block with its output" % mark)
            continue
        if mark == "<!-- example-setup -->":
            setup = (i + 1, a[1], b[1])
        else:
            examples.append((current, i + 1, a[1], b[1]))

for name in [r[0] for r in rows("userfuncs.tsv")]:
    body = section(re.escape(name), sqlref)
    if body is None:
        continue            # the functions check says so
    has = "<!-- example -->" in body or re.search(r"<!--\s*no example:\s*\S", body)
    check(has, "gridha.%s has an example in %s" % (name, SQLREF),
          "%s: the section '### %s' has no '<!-- example -->' (a ```sql block, then a ```text "
          "block with its output) nor a '<!-- no example: why -->'" % (SQLREF, name))

check(setup is not None, "%s has the examples' setup block" % SQLREF,
      "%s has no '<!-- example-setup -->' block" % SQLREF)
if setup is not None and examples:
    script = ["\\set ON_ERROR_STOP 1", "\\echo '@@setup'"] + setup[1]
    for n, (name, line, sql, expected) in enumerate(examples):
        script += ["\\echo '@@example %d'" % n, "BEGIN;"] + sql + ["ROLLBACK;"]
    with open(os.path.join(WORK, "examples.sql"), "w", encoding="utf-8") as f:
        f.write("\n".join(script) + "\n")
    prep = subprocess.run(["psql", "-X", "-q", "-d", "postgres",
                           "-c", "SET client_min_messages = warning",
                           "-c", "DROP DATABASE IF EXISTS %s" % EXDB, "-c", "CREATE DATABASE %s" % EXDB],
                          capture_output=True, text=True)
    prep2 = subprocess.run(["psql", "-X", "-q", "-d", EXDB, "-c", "CREATE EXTENSION gridha"],
                           capture_output=True, text=True)
    run = subprocess.run(["psql", "-X", "-q", "-d", EXDB, "-f", os.path.join(WORK, "examples.sql")],
                         capture_output=True, text=True)
    subprocess.run(["psql", "-X", "-q", "-d", "postgres", "-c", "DROP DATABASE IF EXISTS %s" % EXDB],
                   capture_output=True, text=True)
    got = {}
    key = None
    for l in run.stdout.split("\n"):
        m = re.match(r"^@@(setup|example \d+)$", l)
        if m:
            key = m.group(1)
            got[key] = []
        elif key is not None:
            got[key].append(l)
    errors = [e for e in (prep.stderr + prep2.stderr + run.stderr).strip().split("\n") if e]

    def compare(what, key, line, expected):
        want, have = clean(expected), clean(got.get(key, []))
        diag = []
        if key not in got:
            diag.append("it did not run; psql said:")
            diag += errors[-10:]
        elif want != have:
            diag.append("%s line %d shows:" % (SQLREF, line))
            diag += ["  " + x for x in want]
            diag.append("psql printed:")
            diag += ["  " + x for x in have]
            diag += errors[-5:]
        check(not diag, what, *diag)

    compare("the examples' setup block of %s gives the output shown" % SQLREF, "setup", setup[0], setup[2])
    for n, (name, line, sql, expected) in enumerate(examples):
        compare("the example of %s (%s line %d) gives the output shown" % (name, SQLREF, line),
                "example %d" % n, line, expected)

# links between the docs
def slug(title):
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(text):
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {slug(t) for t in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M)}


for rel in docs:
    text = read(rel)
    if text is None:
        continue
    body = re.sub(r"```.*?```", "", text, flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", body):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue                        # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(rel), path)) if path else rel
        dest_text = read(dest)
        if dest_text is None:
            broken.append("%s links to %s, which does not exist" % (rel, target))
        elif anchor and anchor not in anchors(dest_text):
            broken.append("%s links to %s: %s has no heading with anchor #%s"
                          % (rel, target, dest, anchor))
    check(not broken, "every relative link of %s resolves" % rel, *dict.fromkeys(broken))

print("1..%d" % len(results))
failed = 0
for i, (ok, what, diag) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, what))
    if not ok:
        failed += 1
        for line in diag:
            print("# " + line)
sys.exit(1 if failed else 0)
