/*
 * gridha 1.2 -> 1.3: ALTER EXTENSION gridha UPDATE TO '1.3'.
 *
 * An upgraded database equals a fresh 1.3 install (test/suites/15_upgrade.sh
 * compares pg_dump --schema-only of both): every change below is made the
 * same way in gridha--1.3.sql. Each section names the issue it belongs to.
 */

\echo Use "ALTER EXTENSION gridha UPDATE TO '1.3'" to load this file. \quit

-- --- issue 39: restores by any superuser; restored instances' owners ---
-- (the schema check of the install script is not run by an update)

-- Owners set before the update were set on this cluster.
ALTER TABLE gridha.instances ADD COLUMN owner_cluster bigint;

UPDATE gridha.instances
   SET owner_cluster = (SELECT s.system_identifier FROM pg_catalog.pg_control_system() s)
 WHERE owner IS NOT NULL;

COMMENT ON COLUMN gridha.instances.owner_cluster IS
'the system identifier of the cluster on which the owner was set (registration, first use, set_instance_owner): on another cluster, unless this database ran there before (gridha.epoch_bands), the owner is not confirmed and only superusers may act as the instance';

/*
 * instances_owner_stamp: an owner set here (a registration, a first use,
 * set_instance_owner) is set on this cluster. A row that arrives with the
 * cluster it was owned on (a restore) keeps it.
 */
CREATE FUNCTION gridha.instances_owner_stamp()
RETURNS trigger
AS 'MODULE_PATHNAME', 'gridha_instances_owner_stamp'
LANGUAGE C
SET search_path = pg_catalog, gridha, pg_temp;

COMMENT ON FUNCTION gridha.instances_owner_stamp() IS
'trigger: an owner written on this cluster (INSERT without owner_cluster, UPDATE OF owner) gets this cluster''s system identifier in owner_cluster';

CREATE TRIGGER instances_owner_stamp
    BEFORE INSERT OR UPDATE OF owner ON gridha.instances
    FOR EACH ROW EXECUTE FUNCTION gridha.instances_owner_stamp();

/*
 * instances_restored: a statement that brings instances owned on another
 * cluster (a restore's COPY) says, once, whose owners are missing here or
 * only share a name with a role here, and how an administrator confirms
 * them. Until then only superusers act as those instances.
 */
CREATE FUNCTION gridha.instances_restored()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, gridha, pg_temp
AS $$
DECLARE
    here      bigint := (SELECT s.system_identifier FROM pg_catalog.pg_control_system() s);
    missing   text;
    ambiguous text;
    fix       text;
    n         bigint;
BEGIN
    WITH unconfirmed AS (
        SELECT r.owner, count(*) AS instances,
               EXISTS (SELECT 1 FROM pg_catalog.pg_roles p WHERE p.rolname = r.owner) AS exists_here
          FROM restored r
         WHERE r.owner IS NOT NULL
           AND r.owner_cluster IS DISTINCT FROM here
           AND NOT EXISTS (SELECT 1 FROM gridha.epoch_bands e
                            WHERE e.system_identifier = r.owner_cluster)
         GROUP BY r.owner)
    SELECT sum(u.instances),
           string_agg(format('%I (%s)', u.owner, u.instances), ', ' ORDER BY u.owner)
               FILTER (WHERE NOT u.exists_here),
           string_agg(format('%I (%s)', u.owner, u.instances), ', ' ORDER BY u.owner)
               FILTER (WHERE u.exists_here),
           string_agg(format('SELECT gridha.set_instance_owner(instance_id, %L) FROM gridha.instances WHERE owner = %L;',
                             quote_ident(u.owner), u.owner), ' ' ORDER BY u.owner)
      INTO n, missing, ambiguous, fix
      FROM unconfirmed u;
    IF n > 0 THEN
        RAISE WARNING 'the owners of % restored gridha instances are not confirmed on this cluster', n
            USING DETAIL = format('Owner roles missing here (instances): %s. Owner roles that exist here, but may be other roles of the same name (instances): %s. Until an administrator confirms an owner, only superusers may act as its instances.',
                                  coalesce(missing, 'none'), coalesce(ambiguous, 'none')),
                  HINT = format('Create each missing role, check that each role is the one that owned the instances, then: %s', fix);
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION gridha.instances_restored() IS
'trigger: a statement that brings instances owned on another cluster (a restore) warns once which owners are missing or ambiguous here, with the set_instance_owner commands that confirm them';

CREATE TRIGGER instances_restored
    AFTER INSERT ON gridha.instances
    REFERENCING NEW TABLE AS restored
    FOR EACH STATEMENT EXECUTE FUNCTION gridha.instances_restored();

REVOKE ALL ON FUNCTION gridha.instances_owner_stamp(), gridha.instances_restored() FROM PUBLIC;

COMMENT ON FUNCTION gridha.set_instance_owner(uuid, regrole) IS
'gives an instance an owner, or confirms a restored instance''s owner on this cluster (administrators): only members of that role may act as it; an instance without an owner, or whose owner is not confirmed here, is refused to everyone but superusers';
