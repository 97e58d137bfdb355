/*-------------------------------------------------------------------------
 *
 * gridha.c
 *		Module entry point (_PG_init): the settings (settings.c), the test
 *		build's lock-order checker, and, when preloaded, the workers and
 *		their shared memory.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common.h"
#include "lockcheck.h"
#include "settings.h"
#include "slots.h"
#include "worker.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * _PG_init: defines the gridha.* settings, reserves their prefix, and when
 * gridha is preloaded registers its workers and shared memory.
 */
void
_PG_init(void)
{
	gridha_settings_define();

	/* the test build's lock-order checker (lockcheck.c) */
	gridha_lockcheck_init();
	MarkGUCPrefixReserved("gridha");

	/* workers and their shared memory only exist when gridha is preloaded */
	if (process_shared_preload_libraries_in_progress)
	{
		gridha_slots_install_hooks();
		gridha_worker_register_static();
	}
}
