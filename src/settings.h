/*-------------------------------------------------------------------------
 *
 * settings.h
 *		Every gridha.* setting's variable, in docs/configuration.md's order,
 *		and the claim timings as they are applied (settings.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_SETTINGS_H
#define GRIDHA_SETTINGS_H

/* Claims */
extern int	gridha_soft_expiry_ms;
extern int	gridha_hard_expiry_ms;
extern int	gridha_renew_interval_ms;
extern bool gridha_balance_claims;
extern int	gridha_probe_interval_ms;
extern bool gridha_session_liveness;

/* gridha.unknown_instance (1.3) */
typedef enum GridhaUnknownInstance
{
	GRIDHA_UNKNOWN_INSTANCE_REGISTER,	/* an unknown id becomes an instance */
	GRIDHA_UNKNOWN_INSTANCE_REFUSE	/* RG024 */
} GridhaUnknownInstance;
extern int	gridha_unknown_instance;

/* Background workers */
extern int	gridha_workers;
extern char *gridha_database;
extern char *gridha_worker_role;
extern int	gridha_naptime_ms;
extern int	gridha_submit_timeout_ms;
extern int	gridha_monitor_interval_ms;
extern int	gridha_worker_inflight;
extern int	gridha_worker_connect_rate;
extern int	gridha_worker_lock_timeout_ms;
extern int	gridha_worker_statement_timeout_ms;
extern int	gridha_status_url_max_length;
extern int	gridha_status_omitted_limit;

/* Leader leases, maintenance, ID windows */
extern int	gridha_maintenance_interval_ms;
extern int	gridha_retention_s;
extern int	gridha_prune_interval_ms;
extern int	gridha_prune_chunk;
extern int	gridha_sweep_instances_after_s;
extern int	gridha_id_block_size;

/* Test builds only */
#ifdef GRIDHA_TEST_HOOKS
/* a liveness probe waits on this advisory lock (0: off) */
extern int	gridha_test_probe_pause;
#endif

extern void gridha_settings_define(void);

/* Claim timings as they are applied */
typedef struct GridhaTiming
{
	int64		soft_ms;		/* claim window */
	int64		hard_ms;		/* never below soft_ms */
	int64		renew_ms;		/* always below soft_ms */
} GridhaTiming;

extern GridhaTiming gridha_timing(void);

#endif							/* GRIDHA_SETTINGS_H */
