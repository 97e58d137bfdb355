/*-------------------------------------------------------------------------
 *
 * ratelimit.c
 *		Per-target rate limits, enforced at hand-out across all instances.
 *
 * Words:
 *   slot      the right to hand out one batch of a rate-limited target
 *   tat       the target's theoretical arrival time (generic cell rate
 *             algorithm), kept in gridha.target_rate_state: a hand-out at
 *             time t conforms when t >= tat - (rate_burst - 1) * rate_interval,
 *             and moves tat to max(tat, t) + rate_interval
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "gridha.h"
#include "ratelimit.h"
#include "spi_util.h"

#include "catalog/pg_type.h"

static GridhaStatement ratelimit_prune_stmt = {
	"DELETE FROM gridha.rate_handouts WHERE slot_at < now() - interval '1 day'",
	0, {InvalidOid}
};

/*
 * gridha_ratelimit_prune_log: maintenance forgets hand-out log rows older
 * than a day. Inside SPI.
 */
void
gridha_ratelimit_prune_log(void)
{
	gridha_exec(&ratelimit_prune_stmt, NULL, NULL, false);
}
