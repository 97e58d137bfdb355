/*-------------------------------------------------------------------------
 *
 * limit.h
 *		A background worker's adaptive limit and connection bucket per
 *		target (see limit.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_LIMIT_H
#define GRIDHA_LIMIT_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

#include "dlt_http.h"

/* A target's limit, as this worker keeps it (in TopMemoryContext) */
typedef struct SubmitLimit
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
} SubmitLimit;

extern List *submit_limits;		/* SubmitLimit *, in TopMemoryContext */
/* how long before this poll nobody looked (submit.c) */
extern long submit_away_ms;

extern SubmitLimit *submit_limit_of(const char *target);
extern bool submit_limit_may_start(SubmitLimit *l, bool status);
extern void submit_limit_feedback(SubmitLimit *l, const GridhaHttpDone *d,
								  TimestampTz started_at);

#endif							/* GRIDHA_LIMIT_H */
