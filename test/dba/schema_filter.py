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
                                     OID array (15_upgrade compares extconfig
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
                                     data, not schema (15_upgrade compares it
                                     with the other data)
  \\restrict, \\unrestrict           the dump's random psql guard key
  the "-- set missing value." and "-- For binary upgrade, set heap's
  relfrozenxid and relminmxid" comments of those lines

and runs of blank lines become one. Reads the dump on stdin (or a file
argument), writes the result on stdout.
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


def main(argv):
    src = open(argv[0], encoding="utf-8") if argv else sys.stdin
    blank = False
    with src:
        for line in src:
            line = line.rstrip("\n")
            if DROP.search(line):
                continue
            if not line.strip():
                if blank:
                    continue
                blank = True
            else:
                blank = False
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
