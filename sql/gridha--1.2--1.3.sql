/*
 * gridha 1.2 -> 1.3: ALTER EXTENSION gridha UPDATE TO '1.3'.
 *
 * An upgraded database equals a fresh 1.3 install (test/suites/15_upgrade.sh
 * compares pg_dump --schema-only of both): every change below is made the
 * same way in gridha--1.3.sql. Each section names the issue it belongs to.
 */

\echo Use "ALTER EXTENSION gridha UPDATE TO '1.3'" to load this file. \quit
