/*-------------------------------------------------------------------------
 *
 * worker.h
 *		Background-worker instances: how they start, run and stop.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_WORKER_H
#define GRIDHA_WORKER_H

#include "postgres.h"

#include "fmgr.h"

extern void gridha_worker_register_static(void);
extern void gridha_worker_register_check(FunctionCallInfo fcinfo, NameData *owner);


#endif							/* GRIDHA_WORKER_H */
