-- test/dba/extension_catalog.sql: the catalog entries of the extension
-- gridha that a schema dump shows only by OID, or not at all, as sorted
-- lines "section<TAB>what", so that two databases compare with diff.
--
--   config     each table or sequence marked by pg_extension_config_dump,
--              by name, with its condition (pg_extension.extconfig and
--              extcondition)
--   init_priv  each member object's initial privileges (pg_init_privs,
--              what the extension script granted), by object identity,
--              with its aclitems sorted
--   member     each member object, by description (pg_depend, deptype e)
--
-- Run by psql in the database to describe (unaligned, tuples only).

SELECT 'config' || E'\t' || c.cfg::regclass::text || E'\t' || coalesce(c.cond, '(null)')
  FROM pg_catalog.pg_extension e,
       LATERAL unnest(e.extconfig::regclass[], e.extcondition) AS c (cfg, cond)
 WHERE e.extname = 'gridha'
UNION ALL
SELECT 'init_priv' || E'\t' || o.type || ' ' || o.identity || E'\t' || p.privtype::text || E'\t'
       || (SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(p.initprivs) a)
  FROM pg_catalog.pg_init_privs p
  JOIN pg_catalog.pg_depend d
    ON d.classid = p.classoid AND d.objid = p.objoid AND d.objsubid = 0
   AND d.deptype = 'e'
   AND d.refclassid = 'pg_catalog.pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'gridha')
 CROSS JOIN LATERAL pg_catalog.pg_identify_object(p.classoid, p.objoid, p.objsubid) o
UNION ALL
SELECT 'member' || E'\t' || pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)
  FROM pg_catalog.pg_depend d
 WHERE d.deptype = 'e'
   AND d.refclassid = 'pg_catalog.pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'gridha')
ORDER BY 1;
