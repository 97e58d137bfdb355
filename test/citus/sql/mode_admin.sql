-- mode_admin: the administrators' SQL functions that work on gridha's
-- local tables refuse in the Citus mode (RG035), where those tables stay
-- empty: move_service (a service stays on the target it was created on) and
-- set_instance_owner (no instances table; a bucket's holder is the role
-- that took it). The mode is checked before the arguments.
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT gridha.move_service('s52', 'default');
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.set_instance_owner('aaaaaaaa-0000-0000-0000-00000000000a', 'gridha_admin');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY terse
SELECT gridha.move_service(NULL, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT gridha.set_instance_owner(NULL, NULL);
\echo :LAST_ERROR_SQLSTATE
