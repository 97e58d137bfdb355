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

extern void gridha_worker_register_static(void);


#endif							/* GRIDHA_WORKER_H */
