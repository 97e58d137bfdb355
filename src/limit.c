/*-------------------------------------------------------------------------
 *
 * limit.c
 *		A background worker's adaptive limit per target (how many requests
 *		it keeps in flight to one ledger) and its connection bucket (how
 *		fast it opens connections to it). The words (limit, waiting,
 *		retry-after) are those of submit.c's header.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "dlt_http.h"
#include "gridha.h"
#include "limit.h"
#include "submit.h"

/* A target's first limit, before anything is known of its ledger */
#define SUBMIT_LIMIT_START		4
/* The fastest answer of a target is looked for in windows of this long */
#define SUBMIT_LIMIT_WINDOW_MS	10000
/* An answer slower than this many times the fastest, plus the slack, halves the limit */
#define SUBMIT_LATENCY_FACTOR	4
#define SUBMIT_LATENCY_SLACK_MS 50

List *submit_limits = NIL;	/* SubmitLimit *, in TopMemoryContext */

/* ----------------------------------------------------------------------
 * Limits per target
 * ----------------------------------------------------------------------
 */

/*
 * submit_limit_of: this worker's limit for a target, made at its first
 * request (SUBMIT_LIMIT_START, under the ceiling).
 */
SubmitLimit *
submit_limit_of(const char *target)
{
	SubmitLimit *l;
	ListCell   *lc;
	MemoryContext old;
	TimestampTz now;

	if (target == NULL)
		target = "";
	foreach(lc, submit_limits)
	{
		l = lfirst(lc);
		if (strcmp(l->target, target) == 0)
			return l;
	}
	now = GetCurrentTimestamp();
	old = MemoryContextSwitchTo(TopMemoryContext);
	l = palloc0(sizeof(SubmitLimit));
	l->target = pstrdup(target);
	l->limit = Min(SUBMIT_LIMIT_START, gridha_worker_inflight);
	l->min_ms = l->prev_min_ms = l->streak_min_ms = -1;
	l->avg_ms = -1;
	l->window_at = l->tokens_at = l->used_at = now;
	l->conn_share = 1.0;
	l->tokens = Max(1.0, gridha_worker_connect_rate / 20.0);
	submit_limits = lappend(submit_limits, l);
	MemoryContextSwitchTo(old);
	return l;
}

/*
 * submit_limit_may_start: whether one more request may go to l's target
 * now: a POST needs room under the limit; every request takes its share
 * of a connection attempt from the target's bucket (gridha.worker_connect_rate
 * a second, bursts of a twentieth of a second's worth), its share being how
 * many of the target's requests opened a connection lately: next to none
 * over kept-alive connections. A status run is never refused (one per
 * target at a time): it only takes its share.
 */
bool
submit_limit_may_start(SubmitLimit *l, bool status)
{
	double		rate = gridha_worker_connect_rate;
	TimestampTz now = GetCurrentTimestamp();

	l->limit = Min(l->limit, (double) gridha_worker_inflight);
	if (now < l->retry_at)
		return false;
	if (!status && l->in_flight >= (int) l->limit)
		return false;
	if (rate > 0)
	{
		l->tokens = Min(Max(1.0, rate / 20.0),
						l->tokens + rate * (double) (now - l->tokens_at) / USECS_PER_SEC);
		l->tokens_at = now;
		if (!status && l->tokens < l->conn_share)
			return false;
		l->tokens -= l->conn_share;
	}
	l->used_at = now;
	return true;
}

/*
 * submit_limit_feedback: a request to l's target finished (started at
 * started_at): the limit follows what its end says of the ledger (see the
 * words at the top).
 */
void
submit_limit_feedback(SubmitLimit *l, const GridhaHttpDone *d, TimestampTz started_at)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		overload = false;
	bool		in_time = false;

	if (l->in_flight > 0)
		l->in_flight--;
	if (d->retry_after_ms > 0)
		l->retry_at = Max(l->retry_at,
						  TimestampTzPlusMilliseconds(now, Min(d->retry_after_ms,
															   GRIDHA_BACKOFF_MAX_MS)));
	l->conn_share = 0.8 * l->conn_share + (d->connects > 0 ? 0.2 : 0.0);
	if (TimestampDifferenceExceeds(l->window_at, now, SUBMIT_LIMIT_WINDOW_MS))
	{
		l->prev_min_ms = l->min_ms;
		l->min_ms = -1;
		l->window_at = now;
	}
	if (d->load == GRIDHA_LOAD_ANSWERED && !d->is_status)
	{
		long		fastest = l->min_ms;
		/* the answer may have waited while the worker was in a step */
		long		elapsed = Max(0, d->elapsed_ms - submit_away_ms);
		double		threshold;

		if (l->prev_min_ms >= 0 && (fastest < 0 || l->prev_min_ms < fastest))
			fastest = l->prev_min_ms;
		if (l->min_ms < 0 || elapsed < l->min_ms)
			l->min_ms = elapsed;
		/* one slow answer among fast ones is noise; an accept queue's 1 s is not */
		l->avg_ms = l->avg_ms < 0 ? elapsed : 0.8 * l->avg_ms + 0.2 * elapsed;
		threshold = fastest * SUBMIT_LATENCY_FACTOR + SUBMIT_LATENCY_SLACK_MS;
		if (fastest >= 0 && elapsed > threshold)
		{
			if (l->streak_min_ms < 0 || elapsed < l->streak_min_ms)
				l->streak_min_ms = elapsed;
			l->slow_streak++;
		}
		else
		{
			l->slow_streak = 0;
			l->streak_min_ms = -1;
		}
		if (l->slow_streak >= Max(4, (int) l->limit))
		{
			/*
			 * A limit's worth of answers in a row, all slow, even after the
			 * halving: the ledger itself answers slower now, it is not this
			 * worker's load. The fastest of them is the new fastest, and
			 * the limit grows again from where it is.
			 */
			l->min_ms = l->prev_min_ms = l->streak_min_ms;
			l->avg_ms = l->streak_min_ms;
			l->window_at = now;
			l->slow_streak = 0;
			l->streak_min_ms = -1;
			in_time = true;
		}
		else if (fastest >= 0 && l->avg_ms > threshold)
			overload = true;
		else
			in_time = l->slow_streak == 0;
	}
	else if (d->load != GRIDHA_LOAD_ANSWERED && d->load != GRIDHA_LOAD_OTHER)
		overload = true;

	if (overload)
	{
		l->failures++;
		l->successes = 0;
		if (started_at >= l->decreased_at)
		{
			l->limit = Max(1.0, floor(l->limit / 2));
			l->decreased_at = now;
			/* the answers to come are judged afresh */
			if (l->avg_ms >= 0 && l->min_ms >= 0)
				l->avg_ms = l->min_ms;
		}
	}
	else if (in_time && (l->in_flight + 1) * 2 >= (int) l->limit &&
			 ++l->successes >= (int) l->limit)
	{
		l->limit = Min((double) gridha_worker_inflight, l->limit + 1);
		l->successes = 0;
	}
}
