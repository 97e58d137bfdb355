/*-------------------------------------------------------------------------
 *
 * compat.h
 *		Every PostgreSQL version difference gridha cares about, in one place.
 *
 * gridha is built and tested against PostgreSQL 15.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_COMPAT_H
#define GRIDHA_COMPAT_H

#if PG_VERSION_NUM < 150000
#error "gridha needs PostgreSQL 15 or later"
#endif

#endif							/* GRIDHA_COMPAT_H */
