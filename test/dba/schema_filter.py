#!/usr/bin/env python3
"""test/dba/schema_filter.py: a `pg_dump --schema-only --binary-upgrade`
dump without what differs between two databases holding the same schema.

pg_dump --schema-only prints only "CREATE EXTENSION gridha" for an
extension; with --binary-upgrade it prints every member object too (and
"ALTER EXTENSION gridha ADD ..." for each), which is what an upgraded and a
fresh database are compared by. Such a dump also carries lines that name
OIDs, transaction ids or storage details; this filter drops them:

  binary_upgrade_set_next_*          the OIDs and relfilenodes to reuse
  binary_upgrade_create_empty_extension
                                     the extension with its extconfig as an
                                     OID array (015_upgrade compares extconfig
                                     and extcondition by table name instead)
  binary_upgrade_set_missing_value   a column added with ALTER TABLE ... ADD
                                     COLUMN ... DEFAULT keeps its default for
                                     the rows that existed before it in the
                                     catalog (attmissingval): storage, not
                                     schema (the column's DEFAULT itself is
                                     printed, and compared, as usual)
  relfrozenxid ... WHERE oid = ...   the frozen xid of each table
  SELECT pg_catalog.setval(...)      the value of an extension sequence
                                     marked with pg_extension_config_dump:
                                     data, not schema (015_upgrade compares it
                                     with the other data)
  \\restrict, \\unrestrict           the dump's random psql guard key
  dropped columns                    a column dropped by an upgrade stays in
                                     the table as "........pg.dropped.N........"
                                     (a placeholder in CREATE TABLE, then a
                                     "-- For binary upgrade, recreate dropped
                                     column." block that drops it again):
                                     storage, not schema; the placeholder
                                     and the block go (and the comma they
                                     leave at the end of a column list)
  the "-- set missing value." and "-- For binary upgrade, set heap's
  relfrozenxid and relminmxid" comments of those lines

and runs of blank lines become one.

It also puts objects of one table-scoped kind that share a name (every
view's "_RETURN" rule, a trigger or constraint name used on two tables)
in the order of their tables: pg_dump sorts objects by kind, schema and
name, and then, before the releases of November 2025 (15.15, 16.11,
17.7; so in the 16beta2 and 17beta2 builds CI tests with), by OID, the
order they were created in. An upgraded database creates a view that a
fresh install creates earlier, so the order of its "_RETURN" rule alone
would make the two dumps differ. Only runs of adjacent entries of the
same kind, schema and object name are reordered; their text is unchanged.

Reads the dump on stdin (or a file argument), writes the result on stdout.
"""

import re
import sys

DROP = re.compile(
    r"binary_upgrade_set_next_"
    r"|binary_upgrade_create_empty_extension"
    r"|binary_upgrade_set_missing_value"
    r"|relfrozenxid"
    r"|^SELECT pg_catalog\.setval\("
    r"|^WHERE oid = '\d+';$"
    r"|^\\(un)?restrict "
    r"|^-- set missing value\.$"
    r"|^-- For binary upgrade, set heap's relfrozenxid and relminmxid$"
    r"|^-- For binary upgrade, set toast's relfrozenxid and relminmxid$"
)


# The header of a dump entry ("--", then this line, then "--").
HEADER = re.compile(r"^-- Name: (?P<name>.*?); Type: (?P<type>.*?); Schema: (?P<schema>.*?);")

# Kinds whose entry name is "TABLE NAME" while pg_dump sorts them by NAME
# alone.
TABLE_SCOPED = {"RULE", "TRIGGER", "POLICY", "CONSTRAINT", "FK CONSTRAINT"}


def entries(lines):
    """Split lines into the preamble and the blocks that start with a
    framed comment ("--", "-- ...", "--"): (key, name, lines), key (type,
    schema, object name) for an entry of a table-scoped kind, else None
    (other entries, the closing "dump complete" comment)."""
    starts = [i for i in range(len(lines) - 2)
              if lines[i] == "--" and lines[i + 1].startswith("-- ")
              and lines[i + 2] == "--"]
    result = []
    bounds = starts + [len(lines)]
    for i, start in enumerate(starts):
        m = HEADER.match(lines[start + 1])
        key = None
        if m and m.group("type") in TABLE_SCOPED and " " in m.group("name"):
            key = (m.group("type"), m.group("schema"),
                   m.group("name").split(" ", 1)[1])
        result.append((key, m.group("name") if m else "", lines[start:bounds[i + 1]]))
    return lines[:starts[0] if starts else len(lines)], result


def order_same_names(lines):
    """lines with each run of adjacent same-key entries sorted by their
    names (table, then object); every other line where it was."""
    preamble, items = entries(lines)
    out = list(preamble)
    i = 0
    while i < len(items):
        j = i + 1
        if items[i][0] is not None:
            while j < len(items) and items[j][0] == items[i][0]:
                j += 1
        for _key, _name, body in sorted(items[i:j], key=lambda e: e[1]):
            out.extend(body)
        i = j
    return out


# A dropped column's placeholder in CREATE TABLE, and the block after the
# table that drops it again (its first line, then up to its DROP COLUMN).
DROPPED_COLUMN = re.compile(r'^\s+"\.{8}pg\.dropped\.\d+\.{8}" ')
DROPPED_BLOCK = "-- For binary upgrade, recreate dropped column."
DROPPED_BLOCK_END = re.compile(r'^ALTER TABLE ONLY .* DROP COLUMN "\.{8}pg\.dropped\.\d+\.{8}";$')


def without_dropped_columns(lines):
    """lines less the dropped columns' placeholders and blocks."""
    out = []
    in_block = False
    for line in lines:
        if in_block:
            in_block = not DROPPED_BLOCK_END.match(line)
            continue
        if line == DROPPED_BLOCK:
            in_block = True
            continue
        if DROPPED_COLUMN.match(line):
            if not line.endswith(",") and out and out[-1].endswith(","):
                out[-1] = out[-1][:-1]      # it was the last column
            continue
        out.append(line)
    return out


def main(argv):
    src = open(argv[0], encoding="utf-8") if argv else sys.stdin
    kept = []
    blank = False
    with src:
        lines = without_dropped_columns([line.rstrip("\n") for line in src])
        for line in lines:
            if DROP.search(line):
                continue
            if not line.strip():
                if blank:
                    continue
                blank = True
            else:
                blank = False
            kept.append(line)
    for line in order_same_names(kept):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
