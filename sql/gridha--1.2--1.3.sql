/*
 * gridha 1.2 -> 1.3: ALTER EXTENSION gridha UPDATE TO '1.3'.
 *
 * An upgraded database equals a fresh 1.3 install (test/suites/15_upgrade.sh
 * compares pg_dump --schema-only of both): every change below is made the
 * same way in gridha--1.3.sql. Each section names the issue it belongs to.
 */

\echo Use "ALTER EXTENSION gridha UPDATE TO '1.3'" to load this file. \quit

-- --- issue 39: pg_upgrade (function targets as text) ---
--
-- pg_upgrade refuses a cluster with a regprocedure column in a user table,
-- and OIDs do not survive it: submit_function and status_function hold the
-- function's signature as text. Each row's function becomes the signature
-- regprocedure prints under search_path = pg_catalog (schema-qualified);
-- one whose function was dropped keeps its OID as digits, which no backend
-- resolves (its batches are delayed, with the reason, until the row is
-- fixed); OID 0 ('-') becomes NULL. The search_path is set back at once.
DO $$
DECLARE
    path text := pg_catalog.current_setting('search_path');
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog', true);
    ALTER TABLE gridha.targets
        ALTER COLUMN submit_function TYPE text
            USING CASE WHEN submit_function::oid <> 0 THEN submit_function::text END,
        ALTER COLUMN status_function TYPE text
            USING CASE WHEN status_function::oid <> 0 THEN status_function::text END;
    PERFORM pg_catalog.set_config('search_path', path, true);
END
$$;

COMMENT ON COLUMN gridha.targets.submit_function IS
'instead of submit_url, the function that submits a batch: written as any name that resolves (f(text,text,bytea,bigint)), stored as its schema-qualified signature (never an OID: it survives pg_upgrade and a restore), resolved by each backend when it loads the targets';

COMMENT ON COLUMN gridha.targets.status_function IS
'instead of status_url, the function that gives the ledger''s statuses: written as any name that resolves (f(text[])), stored as its schema-qualified signature';

-- The trigger resolves the names a writer gives with the writer's
-- search_path, as the regprocedure cast in the writer's statement did.
ALTER FUNCTION gridha.targets_check() RESET search_path;

COMMENT ON FUNCTION gridha.targets_check() IS
'trigger: refuses malformed URLs, two sources of one kind, and functions that do not exist or have the wrong signature in gridha.targets; stores each function as its schema-qualified signature';
