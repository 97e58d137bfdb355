#!/usr/bin/env python3
"""test/pgxn_meta.py: check a META.json against the PGXN Meta Spec 1.0.0.

PGXN's own validators (the Perl PGXN::Meta::Validator, the Rust pgxn_meta
crate) are not packaged for Debian, and pgxnclient only reads a bundle; this
checks what the spec (https://pgxn.org/meta/spec.txt) demands of a source
distribution's META.json:

  - the required keys: name, version, abstract, maintainer, license,
    provides, meta-spec; no top-level key the spec does not know (custom
    keys start with x_ or X_);
  - name a term (2 or more characters, no whitespace, slash, backslash or
    control character); version a semantic version (X.Y.Z);
  - maintainer a string or a list of strings; license one of the spec's
    short names, a list of them, or an object of names to URLs;
  - provides: each extension a term with a relative "file" that exists
    and a semantic "version" (abstract, docfile optional; docfile exists);
  - meta-spec.version 1.0.0; prereqs by phase (configure, build, test,
    runtime, develop) and relationship (requires, recommends, suggests,
    conflicts); release_status stable, testing or unstable; tags a list of
    non-empty strings.

With --control FILE (gridha.control) it also checks that the release is the
control file's default_version: META.json's version and that of the
extension named like the control file are default_version as X.Y.Z
(1.1 -> 1.1.0), and its "file" is sql/<name>--<default_version>.sql.
--sync rewrites those three fields from the control file first.

Exit status 0 when valid; otherwise each problem on stderr and exit 1.
"""

import argparse
import json
import os
import re
import sys

KNOWN = {"name", "version", "abstract", "maintainer", "license", "provides",
         "meta-spec", "description", "generated_by", "tags", "no_index",
         "prereqs", "release_status", "resources"}
REQUIRED = ["name", "version", "abstract", "maintainer", "license",
            "provides", "meta-spec"]
LICENSES = {"agpl_3", "apache_1_1", "apache_2_0", "artistic_1", "artistic_2",
            "bsd", "freebsd", "gfdl_1_2", "gfdl_1_3", "gpl_1", "gpl_2",
            "gpl_3", "lgpl_2_1", "lgpl_3_0", "mit", "mozilla_1_0",
            "mozilla_1_1", "openssl", "perl_5", "postgresql", "qpl_1_0",
            "ssleay", "sun", "zlib", "open_source", "restricted",
            "unrestricted", "unknown"}
PHASES = {"configure", "build", "test", "runtime", "develop"}
RELATIONS = {"requires", "recommends", "suggests", "conflicts"}
SEMVER = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
                    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?"
                    r"(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$")
# a version range: "0", a version, or comparisons joined by commas
RANGE = re.compile(r"^\s*(0|((==|!=|>=|<=|>|<)\s*)?[0-9][0-9A-Za-z.+-]*)"
                   r"(\s*,\s*(==|!=|>=|<=|>|<)\s*[0-9][0-9A-Za-z.+-]*)*\s*$")


def is_custom(key):
    """is_custom: a key the spec leaves to the distribution (x_..., X_...)."""
    return re.match(r"^[xX]_.", key) is not None


def is_term(s):
    """is_term: the spec's "Term": 2+ characters, no space, / \\ or control."""
    return (isinstance(s, str) and len(s) >= 2
            and not re.search(r"[\s/\\\x00-\x1f\x7f]", s))


def is_path(root, p):
    """is_path: a relative unix path inside the distribution that exists."""
    return (isinstance(p, str) and p and not p.startswith("/")
            and "\\" not in p and ".." not in p.split("/")
            and os.path.isfile(os.path.join(root, p)))


def control_version(path):
    """control_version: default_version of a control file, or None."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\s*default_version\s*=\s*'([^']*)'", line)
            if m:
                return m.group(1)
    return None


def semver_of(v):
    """semver_of: an extension version as X.Y.Z (1.1 -> 1.1.0)."""
    parts = v.split(".")
    while len(parts) < 3:
        parts.append("0")
    return ".".join(parts)


def check(meta, root, problems):
    """check: append to problems what in meta breaks the spec."""
    if not isinstance(meta, dict):
        problems.append("META.json is not a JSON object")
        return
    for k in REQUIRED:
        if k not in meta:
            problems.append("required key missing: %s" % k)
    for k in meta:
        if k not in KNOWN and not is_custom(k):
            problems.append("unknown top-level key: %s" % k)
    if "name" in meta and not is_term(meta["name"]):
        problems.append("name is not a term: %r" % meta["name"])
    if "version" in meta and not (isinstance(meta["version"], str)
                                  and SEMVER.match(meta["version"])):
        problems.append("version is not a semantic version: %r" % meta["version"])
    for k in ("abstract", "description", "generated_by"):
        if k in meta and not (isinstance(meta[k], str) and meta[k]):
            problems.append("%s is not a non-empty string" % k)
    m = meta.get("maintainer")
    if "maintainer" in meta and not (
            (isinstance(m, str) and m)
            or (isinstance(m, list) and m and all(isinstance(x, str) and x for x in m))):
        problems.append("maintainer is not a string or a list of strings")
    lic = meta.get("license")
    if "license" in meta and not (
            lic in LICENSES if isinstance(lic, str) else
            (isinstance(lic, list) and lic and all(x in LICENSES for x in lic)) or
            (isinstance(lic, dict) and lic and
             all(isinstance(u, str) and re.match(r"^[a-z][a-z0-9+.-]*:", u) for u in lic.values()))):
        problems.append("license is not one of the spec's forms: %r" % (lic,))
    prov = meta.get("provides")
    if "provides" in meta:
        if not (isinstance(prov, dict) and prov):
            problems.append("provides is not a non-empty object")
        else:
            for ext, d in prov.items():
                if not is_term(ext):
                    problems.append("provides: %r is not a term" % ext)
                if not isinstance(d, dict):
                    problems.append("provides.%s is not an object" % ext)
                    continue
                for k in d:
                    if k not in ("file", "version", "abstract", "docfile") and not is_custom(k):
                        problems.append("provides.%s: unknown key %s" % (ext, k))
                if not is_path(root, d.get("file")):
                    problems.append("provides.%s.file is not a file of the distribution: %r"
                                    % (ext, d.get("file")))
                if not (isinstance(d.get("version"), str) and SEMVER.match(d["version"])):
                    problems.append("provides.%s.version is not a semantic version: %r"
                                    % (ext, d.get("version")))
                if "docfile" in d and not is_path(root, d["docfile"]):
                    problems.append("provides.%s.docfile is not a file of the distribution: %r"
                                    % (ext, d["docfile"]))
                if "abstract" in d and not (isinstance(d["abstract"], str) and d["abstract"]):
                    problems.append("provides.%s.abstract is empty" % ext)
    ms = meta.get("meta-spec")
    if "meta-spec" in meta and not (isinstance(ms, dict) and ms.get("version") == "1.0.0"):
        problems.append("meta-spec.version is not 1.0.0")
    pre = meta.get("prereqs")
    if pre is not None:
        if not isinstance(pre, dict):
            problems.append("prereqs is not an object")
        else:
            for ph, rels in pre.items():
                if ph not in PHASES and not is_custom(ph):
                    problems.append("prereqs: unknown phase %s" % ph)
                    continue
                if not (isinstance(rels, dict) and rels):
                    problems.append("prereqs.%s is not a non-empty object" % ph)
                    continue
                for rel, deps in rels.items():
                    if rel not in RELATIONS and not is_custom(rel):
                        problems.append("prereqs.%s: unknown relationship %s" % (ph, rel))
                        continue
                    if not isinstance(deps, dict):
                        problems.append("prereqs.%s.%s is not an object" % (ph, rel))
                        continue
                    for dep, v in deps.items():
                        if not (v == 0 or (isinstance(v, str) and RANGE.match(v))):
                            problems.append("prereqs.%s.%s.%s: not a version range: %r"
                                            % (ph, rel, dep, v))
    if "release_status" in meta and meta["release_status"] not in ("stable", "testing", "unstable"):
        problems.append("release_status is not stable, testing or unstable")
    tags = meta.get("tags")
    if tags is not None and not (isinstance(tags, list) and tags and
                                 all(isinstance(t, str) and 0 < len(t) <= 255 for t in tags)):
        problems.append("tags is not a list of non-empty strings")


def main():
    """main: parse the arguments, sync if asked, check, report."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("meta", nargs="?", default="META.json")
    ap.add_argument("--control", help="the extension's control file")
    ap.add_argument("--sync", action="store_true",
                    help="rewrite the version fields from --control first")
    args = ap.parse_args()
    root = os.path.dirname(os.path.abspath(args.meta))
    with open(args.meta, encoding="utf-8") as f:
        try:
            meta = json.load(f)
        except ValueError as e:
            print("%s: not JSON: %s" % (args.meta, e), file=sys.stderr)
            return 1
    problems = []
    if args.control:
        ext = os.path.basename(args.control)[:-len(".control")]
        cv = control_version(args.control)
        if cv is None:
            print("%s has no default_version" % args.control, file=sys.stderr)
            return 1
        want = semver_of(cv)
        want_file = "sql/%s--%s.sql" % (ext, cv)
        if args.sync and isinstance(meta, dict):
            meta["version"] = want
            meta.setdefault("provides", {}).setdefault(ext, {})
            meta["provides"][ext]["version"] = want
            meta["provides"][ext]["file"] = want_file
            with open(args.meta, "w", encoding="utf-8") as f:
                json.dump(meta, f, indent=3, ensure_ascii=False)
                f.write("\n")
        if isinstance(meta, dict):
            if meta.get("version") != want:
                problems.append("version is %r, gridha.control's default_version %s makes it %s"
                                % (meta.get("version"), cv, want))
            d = meta.get("provides", {}).get(ext) if isinstance(meta.get("provides"), dict) else None
            if not isinstance(d, dict):
                problems.append("provides has no %s" % ext)
            else:
                if d.get("version") != want:
                    problems.append("provides.%s.version is %r, not %s" % (ext, d.get("version"), want))
                if d.get("file") != want_file:
                    problems.append("provides.%s.file is %r, not %s" % (ext, d.get("file"), want_file))
    check(meta, root, problems)
    for p in problems:
        print("%s: %s" % (args.meta, p), file=sys.stderr)
    if problems:
        if args.control and not args.sync:
            print("(python3 test/pgxn_meta.py --sync --control %s %s rewrites the versions)"
                  % (args.control, args.meta), file=sys.stderr)
        return 1
    print("%s: valid PGXN Meta Spec 1.0.0 (%s %s)" % (args.meta, meta["name"], meta["version"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
