/*-------------------------------------------------------------------------
 *
 * limit.h
 *		A background worker's adaptive limit and connection bucket per
 *		target (see limit.c).
 *
 * The core (gridha_limit_init, gridha_limit_may_start,
 * gridha_limit_feedback) is a pure function of its arguments: the clock
 * and the settings are passed in, so test/unit/test_limit.c drives it with
 * a fake clock, as a frontend program. The rest (the worker's list of
 * limits, read with the real clock and the settings) is the server's.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_LIMIT_H
#define GRIDHA_LIMIT_H

#include "datatype/timestamp.h"

#include "dlt_http.h"

/* A target's first limit, before anything is known of its ledger */
#define GRIDHA_LIMIT_START		4
/* The longest Retry-After obeyed (GRIDHA_BACKOFF_MAX_MS, common.h) */
#define GRIDHA_LIMIT_RETRY_MAX_MS 60000

/* A target's limit, as this worker keeps it (in TopMemoryContext) */
typedef struct GridhaLimit
{
	char	   *target;
	double		limit;			/* 1 .. gridha.worker_inflight */
	int			in_flight;		/* POSTs and status runs out now */
	int			successes;		/* answers in time since the last increase */
	long		min_ms;			/* fastest POST answer of this window, -1 */
	long		prev_min_ms;	/* ... of the window before, -1 */
	double		avg_ms;			/* moving average of POST answers' times, -1 */
	int			slow_streak;	/* slow answers in a row */
	long		streak_min_ms;	/* the fastest of them, -1 */
	TimestampTz window_at;		/* when this window started */
	TimestampTz decreased_at;	/* the last halving */
	double		conn_share;		/* of the requests, how many opened a
								 * connection (moving average) */
	double		tokens;			/* connection attempts allowed now */
	TimestampTz tokens_at;
	bool		status_running; /* a status run is out */
	int64		failures;		/* overload signals */
	TimestampTz used_at;		/* the last request's start */
	TimestampTz retry_at;		/* no request before this (Retry-After) */
	bool		slow_start;		/* no sign of overload yet: the limit
								 * doubles every round trip */
	double		regrow_to;		/* after a halving by slow answers: three
								 * quarters of the limit before it, where
								 * answers in time bring it back fast; 0:
								 * none */
	double		halved_to;		/* the limit that halving left */
} GridhaLimit;

/* The core: pure, the clock (now) and the settings passed in */
extern void gridha_limit_init(GridhaLimit *l, TimestampTz now, int ceiling,
							  int connect_rate);
extern bool gridha_limit_may_start(GridhaLimit *l, bool status, TimestampTz now,
								   int ceiling, int connect_rate);
extern void gridha_limit_feedback(GridhaLimit *l, const GridhaHttpDone *d,
								  TimestampTz started_at, TimestampTz now,
								  long away_ms, int ceiling);

#ifndef FRONTEND
#include "nodes/pg_list.h"

extern List *gridha_limits;		/* GridhaLimit *, in TopMemoryContext */

/* The worker's: the real clock, gridha.worker_inflight and _connect_rate */
extern GridhaLimit *gridha_limit_of(const char *target);
extern bool gridha_limit_start(GridhaLimit *l, bool status);
extern void gridha_limit_done(GridhaLimit *l, const GridhaHttpDone *d,
							  TimestampTz started_at, long away_ms);
#endif

#endif							/* GRIDHA_LIMIT_H */
