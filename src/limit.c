/*-------------------------------------------------------------------------
 *
 * limit.c
 *		A background worker's adaptive limit per target (how many requests
 *		it keeps in flight to one ledger) and its connection bucket (how
 *		fast it opens connections to it). The words (limit, waiting,
 *		retry-after) are those of submit.c's header.
 *
 * The core is pure: what it decides depends only on its arguments (the
 * limit's state, the answer, the time now, the settings), never on the
 * clock or a global, so test/unit/test_limit.c checks it step by step with
 * a fake clock (built with -DFRONTEND, without the server). The worker's
 * part, at the end, keeps its list of limits and passes the real clock
 * and the settings in.
 *
 * Words:
 *   fastest    the fastest POST answer of the last 10 to 20 s (two windows
 *              of GRIDHA_LIMIT_WINDOW_MS)
 *   slow       an answer slower than the fastest times
 *              GRIDHA_LIMIT_LATENCY_FACTOR plus GRIDHA_LIMIT_LATENCY_SLACK_MS
 *   overload   a 429 or 503, a timeout, a refused or dropped connection,
 *              or a moving average of answers that is slow
 *   slow start a new limit's first phase: each answer in time while the
 *              limit is at least half used adds one to it, so a busy
 *              worker's limit doubles every round trip (from
 *              GRIDHA_LIMIT_START: 4, 8, 16, ... up to the ceiling). The
 *              first sign of overload halves it and ends the slow start
 *              for good; so does the first slow answer, without halving
 *              it (a queue building up at the ledger shows there before
 *              the average moves: an accept queue that overflows answers
 *              a second late). A target whose requests open a connection
 *              each (HTTP/1.0: conn_share at GRIDHA_LIMIT_SLOW_START_CONN
 *              or more) grows additively even in slow start: there a
 *              doubling of the limit is a doubling of connection attempts
 *              at once, which an accept queue loses, and the loss shows
 *              only a second later (the kernel's retry); from then on the limit grows by one a limit's
 *              worth of answers in time (additive increase) and is halved
 *              at each overload, once a round trip (multiplicative
 *              decrease)
 *   regrowth   after a halving by slow answers (not by a refusal, a
 *              timeout or a lost connection), once a limit's worth of
 *              answers in time has added one, the limit grows by one per
 *              answer in time up to three quarters of where it was (as in
 *              slow start, and not against a target whose requests open a
 *              connection each); then additively again
 *
 * An answer's time is taken less the time the worker was away (in a step)
 * to judge it, but the fastest is taken from answers' own times: less the
 * time away, it can be under what the ledger ever takes. The answers of
 * requests sent before the last halving do not move the average that
 * judges the next one.
 *
 *-------------------------------------------------------------------------
 */
#ifdef FRONTEND
#include "postgres_fe.h"
#else
#include "postgres.h"
#endif

#include <math.h>

#include "limit.h"

/* The fastest answer of a target is looked for in windows of this long */
#define GRIDHA_LIMIT_WINDOW_MS	10000
/* An answer slower than this many times the fastest, plus the slack, halves the limit */
#define GRIDHA_LIMIT_LATENCY_FACTOR 4
#define GRIDHA_LIMIT_LATENCY_SLACK_MS 50

/*
 * Slow start doubles the limit only while fewer of the target's requests
 * than this open a connection of their own (conn_share)
 */
#define GRIDHA_LIMIT_SLOW_START_CONN 0.85

#define limit_plus_ms(t, ms)	((t) + (TimestampTz) (ms) * 1000)

/*
 * gridha_limit_init: a target's limit at its first request, at now:
 * GRIDHA_LIMIT_START under the ceiling (gridha.worker_inflight), a full
 * connection bucket (a twentieth of a second's worth of connect_rate,
 * gridha.worker_connect_rate). The target's name is the caller's.
 */
void
gridha_limit_init(GridhaLimit *l, TimestampTz now, int ceiling, int connect_rate)
{
	memset(l, 0, sizeof(*l));
	l->limit = Min(GRIDHA_LIMIT_START, ceiling);
	l->min_ms = l->prev_min_ms = l->streak_min_ms = -1;
	l->avg_ms = -1;
	l->window_at = l->tokens_at = l->used_at = now;
	l->conn_share = 1.0;
	l->tokens = Max(1.0, connect_rate / 20.0);
	l->slow_start = true;
}

/*
 * gridha_limit_may_start: whether one more request may go to l's target
 * at now: a POST needs room under the limit; every request takes its share
 * of a connection attempt from the target's bucket (connect_rate a second,
 * bursts of a twentieth of a second's worth), its share being how many of
 * the target's requests opened a connection lately: next to none over
 * kept-alive connections. A status run is never refused (one per target
 * at a time): it only takes its share. Nothing starts before a
 * Retry-After's time.
 */
bool
gridha_limit_may_start(GridhaLimit *l, bool status, TimestampTz now, int ceiling,
					   int connect_rate)
{
	double		rate = connect_rate;

	l->limit = Min(l->limit, (double) ceiling);
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
 * gridha_limit_feedback: a request to l's target that started at
 * started_at finished at now: the limit follows what its end says of the
 * ledger (see the words at the top and submit.c's). away_ms: how long
 * before now nobody looked at the answers (the worker was in a step), so
 * the answer may have waited that long; ceiling: gridha.worker_inflight.
 */
void
gridha_limit_feedback(GridhaLimit *l, const GridhaHttpDone *d, TimestampTz started_at,
					  TimestampTz now, long away_ms, int ceiling)
{
	bool		overload = false;
	bool		by_latency = false;
	bool		in_time = false;

	if (l->in_flight > 0)
		l->in_flight--;
	if (d->retry_after_ms > 0)
		l->retry_at = Max(l->retry_at,
						  limit_plus_ms(now, Min(d->retry_after_ms,
												 GRIDHA_LIMIT_RETRY_MAX_MS)));
	l->conn_share = 0.8 * l->conn_share + (d->connects > 0 ? 0.2 : 0.0);
	if (now - l->window_at >= (TimestampTz) GRIDHA_LIMIT_WINDOW_MS * 1000)
	{
		l->prev_min_ms = l->min_ms;
		l->min_ms = -1;
		l->window_at = now;
	}
	if (d->load == GRIDHA_LOAD_ANSWERED && !d->is_status)
	{
		long		fastest = l->min_ms;
		/* the answer may have waited while the worker was in a step */
		long		elapsed = Max(0, d->elapsed_ms - away_ms);
		double		threshold;

		if (l->prev_min_ms >= 0 && (fastest < 0 || l->prev_min_ms < fastest))
			fastest = l->prev_min_ms;

		/*
		 * The fastest is the answer's own time, not less the time away: the
		 * answer may have come at any moment of the worker's step, so the
		 * difference can be less than the ledger ever takes, and a fastest
		 * under the truth makes answers of a normal load look slow.
		 */
		if (l->min_ms < 0 || d->elapsed_ms < l->min_ms)
			l->min_ms = d->elapsed_ms;

		/*
		 * One slow answer among fast ones is noise; an accept queue's 1 s is
		 * not. The answers of requests sent before the last halving speak
		 * of the load before it: they do not move the average that judges
		 * the next one (it would halve again at the first answer after it,
		 * however fast).
		 */
		if (started_at >= l->decreased_at || l->avg_ms < 0)
			l->avg_ms = l->avg_ms < 0 ? elapsed : 0.8 * l->avg_ms + 0.2 * elapsed;
		threshold = fastest * GRIDHA_LIMIT_LATENCY_FACTOR + GRIDHA_LIMIT_LATENCY_SLACK_MS;
		if (fastest >= 0 && elapsed > threshold)
		{
			if (l->streak_min_ms < 0 || elapsed < l->streak_min_ms)
				l->streak_min_ms = elapsed;
			l->slow_streak++;

			/*
			 * A slow answer to a request that opened a connection ends the
			 * slow start (an accept queue that overflowed: the next
			 * doubling would lose more), and so does a second slow answer
			 * in a row; one slow answer over a kept-alive connection is
			 * noise (a busy machine, a pause of the ledger's), which the
			 * average judges. Either way the average judges a halving.
			 */
			if (d->connects > 0 || l->slow_streak >= 2)
				l->slow_start = false;
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
			overload = by_latency = true;
		else
			in_time = l->slow_streak == 0;
	}
	else if (d->load != GRIDHA_LOAD_ANSWERED && d->load != GRIDHA_LOAD_OTHER)
		overload = true;

	if (overload)
	{
		l->failures++;
		l->successes = 0;
		l->slow_start = false;
		if (started_at >= l->decreased_at)
		{
			/*
			 * Slow answers are a soft sign (a burst of work at once moves
			 * the average as well as a ledger at its end does): once a
			 * limit's worth of answers in time has lifted the limit by one
			 * (the overload is over), it comes back fast, one per answer
			 * in time, to three quarters of where it was. A refusal, a
			 * timeout or a lost connection is a hard sign: from there,
			 * additive increase only.
			 */
			l->regrow_to = by_latency ? floor(l->limit * 3 / 4) : 0;
			l->limit = Max(1.0, floor(l->limit / 2));
			l->halved_to = l->limit;
			l->decreased_at = now;
			/* the answers to come are judged afresh */
			if (l->avg_ms >= 0 && l->min_ms >= 0)
				l->avg_ms = l->min_ms;
		}
	}
	else if (in_time && (l->in_flight + 1) * 2 >= (int) l->limit &&
			 (((l->slow_start ||
				(l->limit > l->halved_to && l->limit < l->regrow_to)) &&
			   l->conn_share < GRIDHA_LIMIT_SLOW_START_CONN) ||
			  ++l->successes >= (int) l->limit))
	{
		l->limit = Min((double) ceiling, l->limit + 1);
		l->successes = 0;
	}
}

#ifndef FRONTEND

/* ----------------------------------------------------------------------
 * The worker's limits: the real clock and the settings
 * ----------------------------------------------------------------------
 */
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "common.h"
#include "settings.h"

StaticAssertDecl(GRIDHA_LIMIT_RETRY_MAX_MS == GRIDHA_BACKOFF_MAX_MS,
				 "a Retry-After is obeyed up to the backoff's ceiling");

List	   *gridha_limits = NIL;	/* GridhaLimit *, in TopMemoryContext */

/*
 * gridha_limit_of: this worker's limit for a target, made at its first
 * request.
 */
GridhaLimit *
gridha_limit_of(const char *target)
{
	GridhaLimit *l;
	ListCell   *lc;
	MemoryContext old;

	if (target == NULL)
		target = "";
	foreach(lc, gridha_limits)
	{
		l = lfirst(lc);
		if (strcmp(l->target, target) == 0)
			return l;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	l = palloc(sizeof(GridhaLimit));
	gridha_limit_init(l, GetCurrentTimestamp(), gridha_worker_inflight,
					  gridha_worker_connect_rate);
	l->target = pstrdup(target);
	gridha_limits = lappend(gridha_limits, l);
	MemoryContextSwitchTo(old);
	return l;
}

/* gridha_limit_start: gridha_limit_may_start, now */
bool
gridha_limit_start(GridhaLimit *l, bool status)
{
	return gridha_limit_may_start(l, status, GetCurrentTimestamp(),
								  gridha_worker_inflight, gridha_worker_connect_rate);
}

/* gridha_limit_done: gridha_limit_feedback, now */
void
gridha_limit_done(GridhaLimit *l, const GridhaHttpDone *d, TimestampTz started_at,
				  long away_ms)
{
	gridha_limit_feedback(l, d, started_at, GetCurrentTimestamp(), away_ms,
						  gridha_worker_inflight);
}

#endif							/* FRONTEND */
