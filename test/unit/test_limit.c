/*-------------------------------------------------------------------------
 *
 * test_limit.c
 *		Unit test of src/limit.c (the worker's adaptive limit and connection
 *		bucket), printing TAP lines. No server, no network, no real clock:
 *		a simulated ledger answers each request after a time the test
 *		chooses, on a fake clock the test moves, and every step's limit is
 *		asserted exactly.
 *
 *   test/unit/test_limit
 *
 * Words used here:
 *   clock      the fake time, in microseconds (TimestampTz), passed to
 *              every call of the core
 *   round      the worker starts as many requests as the limit lets it,
 *              the clock moves on by the answer time, and every request
 *              comes back the way the round says (answered, busy, ...)
 *   pipeline   as the worker runs against a busy ledger: every answer
 *              makes room for the next request at once; the ledger answers
 *              each after a fixed time, in the order they were sent
 *
 * Exit status 0 when every test passed, 1 otherwise.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <stdarg.h>
#include <stdio.h>

#include "limit.h"

#define CEILING		64			/* gridha.worker_inflight's default */
#define MS			((TimestampTz) 1000)

static int	test_count = 0;
static int	test_failed = 0;
static TimestampTz clock_now = 1000000 * MS;	/* anything but 0 */

/*
 * ok: one TAP line; returns cond.
 */
static int
pg_attribute_printf(2, 3)
ok(int cond, const char *fmt,...)
{
	va_list		ap;

	test_count++;
	if (!cond)
		test_failed++;
	printf("%sok %d - ", cond ? "" : "not ", test_count);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	return cond;
}

/* is_int: ok(got == want), with both shown when they differ */
static void
pg_attribute_printf(3, 4)
is_int(long got, long want, const char *fmt,...)
{
	va_list		ap;
	char		what[256];

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (!ok(got == want, "%s", what))
		printf("#   got %ld, want %ld\n", got, want);
}

/* done: an answer of kind load that took elapsed_ms */
static GridhaHttpDone
done(GridhaHttpLoad load, long elapsed_ms)
{
	GridhaHttpDone d;

	memset(&d, 0, sizeof(d));
	d.load = load;
	d.elapsed_ms = elapsed_ms;
	d.http_code = load == GRIDHA_LOAD_BUSY ? 503 : (load == GRIDHA_LOAD_ANSWERED ? 202 : 0);
	return d;
}

/* start: starts as many POSTs as the limit lets (the bucket off); returns how many */
static int
start(GridhaLimit *l, int ceiling)
{
	int			n = 0;

	while (gridha_limit_may_start(l, false, clock_now, ceiling, 0))
	{
		l->in_flight++;
		n++;
	}
	return n;
}

/*
 * round: starts what the limit lets, moves the clock on by ms, and every
 * one of them comes back as load after ms (the last answered at the new
 * clock). Returns how many started.
 */
static int
round_of(GridhaLimit *l, GridhaHttpLoad load, long ms, int ceiling)
{
	TimestampTz started = clock_now;
	int			n = start(l, ceiling);
	int			i;

	clock_now += ms * MS;
	for (i = 0; i < n; i++)
	{
		GridhaHttpDone d = done(load, ms);

		gridha_limit_feedback(l, &d, started, clock_now, 0, ceiling);
	}
	return n;
}

/*
 * pipeline: n answers of a ledger that answers each request after ms (or
 * says busy to the request numbered busy_at, counting from 1; 0: never),
 * the worker starting a request whenever the limit has room. The limit
 * after each round trip (every answer whose request was the last one sent
 * when the round before ended) goes to trace, up to max_trace of them;
 * returns how many.
 */
#define PIPE_MAX 4096
static int	pipe_connects = 0;	/* connections each answer opened */

static int
pipeline(GridhaLimit *l, long ms, int n, int busy_at, int ceiling,
		 long *trace, int max_trace)
{
	TimestampTz sent[PIPE_MAX];
	int			head = 0;
	int			tail = 0;
	int			answered = 0;
	int			round_end;
	int			rounds = 0;

	while (tail < PIPE_MAX && gridha_limit_may_start(l, false, clock_now, ceiling, 0))
	{
		l->in_flight++;
		sent[tail++] = clock_now;
	}
	round_end = tail;
	while (answered < n && head < tail)
	{
		TimestampTz at = sent[head] + ms * MS;
		GridhaHttpDone d;

		answered++;
		d = done(answered == busy_at ? GRIDHA_LOAD_BUSY : GRIDHA_LOAD_ANSWERED, ms);
		d.connects = pipe_connects;
		if (clock_now < at)
			clock_now = at;
		gridha_limit_feedback(l, &d, sent[head], clock_now, 0, ceiling);
		head++;
		while (tail < PIPE_MAX && gridha_limit_may_start(l, false, clock_now, ceiling, 0))
		{
			l->in_flight++;
			sent[tail++] = clock_now;
		}
		if (head == round_end)
		{
			if (rounds < max_trace)
				trace[rounds] = (long) l->limit;
			rounds++;
			round_end = tail;
		}
	}
	return Min(rounds, max_trace);
}

/* trace_is: the limits of trace are want's */
static void
trace_is(const long *trace, int n, const long *want, int nwant, const char *what)
{
	char		got_s[512] = "";
	char		want_s[512] = "";
	int			i;
	bool		same = n == nwant;

	for (i = 0; i < n || i < nwant; i++)
	{
		if (i < n)
			snprintf(got_s + strlen(got_s), sizeof(got_s) - strlen(got_s), " %ld", trace[i]);
		if (i < nwant)
			snprintf(want_s + strlen(want_s), sizeof(want_s) - strlen(want_s), " %ld", want[i]);
		if (i < n && i < nwant && trace[i] != want[i])
			same = false;
	}
	if (!ok(same, "%s", what))
		printf("#   got%s\n#   want%s\n", got_s, want_s);
}

/* fresh: a new limit at the clock */
static GridhaLimit
fresh(int ceiling, int rate)
{
	GridhaLimit l;

	gridha_limit_init(&l, clock_now, ceiling, rate);
	return l;
}

static void
test_start(void)
{
	GridhaLimit l = fresh(CEILING, 0);
	GridhaLimit small = fresh(2, 0);

	is_int((long) l.limit, GRIDHA_LIMIT_START, "a new target's limit is GRIDHA_LIMIT_START");
	is_int((long) small.limit, 2, "... under the ceiling");
	is_int(start(&l, CEILING), GRIDHA_LIMIT_START, "as many POSTs start as the limit");
	ok(gridha_limit_may_start(&l, true, clock_now, CEILING, 0),
	   "a status run is not refused by a full limit");
}

/*
 * slow start: from a cold start against a busy ledger the limit doubles
 * every round trip up to the ceiling
 */
static void
test_slow_start(void)
{
	GridhaLimit l = fresh(CEILING, 0);
	long		trace[16];
	long		want[] = {8, 16, 32, 64, 64};
	int			n;

	ok(l.slow_start, "a new limit is in slow start");
	n = pipeline(&l, 20, 4 + 8 + 16 + 32 + 64, 0, CEILING, trace, lengthof(trace));
	trace_is(trace, n, want, lengthof(want),
			 "slow start: the limit doubles every round trip (20 ms), 4 to the ceiling 64 in 4");
	ok(l.slow_start, "... and is still in slow start without a sign of overload");
}

/*
 * the first sign of overload halves the limit and ends the slow start:
 * from then on one more a limit's worth of answers in time
 */
static void
test_slow_start_end(void)
{
	GridhaLimit l = fresh(CEILING, 0);
	long		trace[16];
	long		want[] = {8, 16, 9, 10, 11, 12};
	int			n;

	/* the 4 + 8 + 1st request: in the third round trip, when the limit is 16 */
	n = pipeline(&l, 20, 4 + 8 + 16 + 9 + 10 + 11, 4 + 8 + 1, CEILING,
				 trace, lengthof(trace));
	trace_is(trace, n, want, lengthof(want),
			 "a 503 in slow start halves the limit (16 to 8), then it grows by one a round trip");
	ok(!l.slow_start, "... and the slow start is over for good");
	is_int((long) l.failures, 1, "... one failure counted");
}

/*
 * against a ledger that closes every connection (HTTP/1.0) the limit grows
 * additively even in slow start; over kept-alive connections the first
 * round's new connections do not stop the doubling
 */
static void
test_slow_start_http10(void)
{
	GridhaLimit l = fresh(CEILING, 0);
	long		trace[16];
	long		want[] = {5, 6, 7, 8, 9, 10};
	int			n;

	pipe_connects = 1;
	n = pipeline(&l, 20, 4 + 5 + 6 + 7 + 8 + 9, 0, CEILING, trace, lengthof(trace));
	pipe_connects = 0;
	trace_is(trace, n, want, lengthof(want),
			 "slow start, every request a new connection: one more a round trip, no doubling");
	ok(l.slow_start, "... still in slow start (no sign of overload)");
	l.in_flight = 0;			/* the requests the ledger never answered */
	n = pipeline(&l, 20, 10 + 20 + 40, 0, CEILING, trace, lengthof(trace));
	is_int(n > 0 ? trace[n - 1] : -1, 80 > CEILING ? CEILING : 80,
		   "once the connections are kept alive it doubles again (10 to 20 to 40 to 80: the ceiling)");
}

/*
 * a slow answer to a request that opened a connection ends the slow start
 * without halving the limit; over a kept-alive connection one slow answer
 * does not, a second in a row does
 */
static void
test_slow_start_slow_answer(void)
{
	GridhaLimit l = fresh(CEILING, 0);
	GridhaHttpDone fast = done(GRIDHA_LOAD_ANSWERED, 20);
	GridhaHttpDone slow = done(GRIDHA_LOAD_ANSWERED, 500);
	GridhaHttpDone slow_connect = done(GRIDHA_LOAD_ANSWERED, 500);
	int			i;

	slow_connect.connects = 1;
	l.in_flight = 4;
	clock_now += 20 * MS;
	gridha_limit_feedback(&l, &fast, clock_now - 20 * MS, clock_now, 0, CEILING);
	is_int((long) l.limit, 5, "slow start: an answer in time adds one");
	l.in_flight = 5;
	clock_now += 500 * MS;
	gridha_limit_feedback(&l, &slow_connect, clock_now - 500 * MS, clock_now, 0, CEILING);
	ok(!l.slow_start, "an answer slower than 4 x the fastest + 50 ms that opened a connection ends the slow start");
	is_int((long) l.limit, 5, "... without halving the limit (the average, 116 ms, is in time)");
	for (i = 0; i < 5; i++)
	{
		l.in_flight = 5;
		clock_now += 20 * MS;
		gridha_limit_feedback(&l, &fast, clock_now - 20 * MS, clock_now, 0, CEILING);
	}
	is_int((long) l.limit, 6, "... and from then on one more a limit's worth of answers in time");

	l = fresh(CEILING, 0);
	l.in_flight = 4;
	clock_now += 20 * MS;
	gridha_limit_feedback(&l, &fast, clock_now - 20 * MS, clock_now, 0, CEILING);
	l.in_flight = 5;
	clock_now += 500 * MS;
	gridha_limit_feedback(&l, &slow, clock_now - 500 * MS, clock_now, 0, CEILING);
	ok(l.slow_start, "one slow answer over a kept-alive connection leaves the slow start on");
	is_int((long) l.limit, 5, "... and the limit where it was (not in time: nothing added)");
	l.in_flight = 5;
	clock_now += 500 * MS;
	gridha_limit_feedback(&l, &slow, clock_now - 500 * MS, clock_now, 0, CEILING);
	ok(!l.slow_start, "a second slow answer in a row ends it");
}

/* answers that leave the limit less than half used do not double it */
static void
test_slow_start_unused(void)
{
	GridhaLimit l = fresh(CEILING, 0);
	GridhaHttpDone d = done(GRIDHA_LOAD_ANSWERED, 20);
	int			i;

	for (i = 0; i < 20; i++)
	{
		l.in_flight = 1;
		clock_now += 20 * MS;
		gridha_limit_feedback(&l, &d, clock_now - 20 * MS, clock_now, 0, CEILING);
	}
	is_int((long) l.limit, GRIDHA_LIMIT_START,
		   "slow start: answers while the limit is not half used leave it where it is");
}

/* the additive increase of rounds (the worker starts a round's worth at once) */
static void
test_growth(void)
{
	GridhaLimit l = fresh(CEILING, 0);
	long		want[] = {6, 7, 7, 8, 8, 9};
	int			i;

	l.slow_start = false;
	l.limit = 6;
	for (i = 0; i < (int) lengthof(want); i++)
	{
		round_of(&l, GRIDHA_LOAD_ANSWERED, 20, CEILING);
		is_int((long) l.limit, want[i], "after the slow start: round %d of answers in time", i + 1);
	}
}

/* an idle worker's answers (the limit not half used) do not raise it */
static void
test_unused(void)
{
	GridhaLimit l = fresh(CEILING, 0);
	int			i;

	for (i = 0; i < 20; i++)
	{
		GridhaHttpDone d = done(GRIDHA_LOAD_ANSWERED, 20);
		TimestampTz started = clock_now;

		l.in_flight = 1;
		clock_now += 20 * MS;
		gridha_limit_feedback(&l, &d, started, clock_now, 0, CEILING);
	}
	is_int((long) l.limit, GRIDHA_LIMIT_START,
		   "answers while the limit is not half used leave it where it is");
}

/* multiplicative decrease, once a round trip, for each sign of overload */
static void
test_decrease(void)
{
	GridhaHttpLoad loads[] = {GRIDHA_LOAD_BUSY, GRIDHA_LOAD_TIMEOUT,
	GRIDHA_LOAD_REFUSED, GRIDHA_LOAD_DROPPED};
	int			i;

	for (i = 0; i < (int) lengthof(loads); i++)
	{
		GridhaLimit l = fresh(CEILING, 0);
		GridhaHttpDone d = done(loads[i], 20);
		TimestampTz before = clock_now;

		l.limit = 16;
		l.in_flight = 16;
		clock_now += 20 * MS;
		gridha_limit_feedback(&l, &d, before, clock_now, 0, CEILING);
		gridha_limit_feedback(&l, &d, before, clock_now, 0, CEILING);
		is_int((long) l.limit, 8, "%s: halved once for the requests of one round trip",
			   gridha_http_load_name(loads[i]));
		clock_now += MS;
		gridha_limit_feedback(&l, &d, clock_now - MS, clock_now, 0, CEILING);
		is_int((long) l.limit, 4, "%s: a request started after the halving halves it again",
			   gridha_http_load_name(loads[i]));
		is_int((long) l.failures, 3, "%s: each counted as a failure",
			   gridha_http_load_name(loads[i]));
	}
	{
		GridhaLimit l = fresh(CEILING, 0);
		GridhaHttpDone d = done(GRIDHA_LOAD_OTHER, 20);
		GridhaHttpDone b = done(GRIDHA_LOAD_BUSY, 20);

		l.limit = 16;
		l.in_flight = 1;
		clock_now += 20 * MS;
		gridha_limit_feedback(&l, &d, clock_now - 20 * MS, clock_now, 0, CEILING);
		is_int((long) l.limit, 16, "other (a bad URL): says nothing of the load");
		l.limit = 1;
		clock_now += 20 * MS;
		gridha_limit_feedback(&l, &b, clock_now - 20 * MS, clock_now, 0, CEILING);
		is_int((long) l.limit, 1, "the limit never falls under 1");
	}
}

/* answers slower than the fastest: their moving average halves the limit */
static void
test_latency(void)
{
	GridhaLimit l = fresh(CEILING, 0);
	GridhaHttpDone fast = done(GRIDHA_LOAD_ANSWERED, 20);
	GridhaHttpDone slow = done(GRIDHA_LOAD_ANSWERED, 1000);
	GridhaHttpDone waited = done(GRIDHA_LOAD_ANSWERED, 1020);
	TimestampTz t;

	l.limit = 16;
	l.in_flight = 16;
	clock_now += 20 * MS;
	gridha_limit_feedback(&l, &fast, clock_now - 20 * MS, clock_now, 0, CEILING);
	is_int(l.min_ms, 20, "the fastest answer is kept");
	/* one 1 s answer among 20 ms ones: the average (216 ms) is over 4 x 20 + 50 */
	t = clock_now;
	clock_now += 1000 * MS;
	gridha_limit_feedback(&l, &slow, t, clock_now, 0, CEILING);
	is_int((long) l.limit, 8, "an answer that lifts the average over 4 x fastest + 50 ms halves");
	is_int((long) l.avg_ms, 20, "... and the answers to come are judged afresh");
	/* an answer that waited while the worker was in a step is not slow */
	t = clock_now;
	clock_now += 1020 * MS;
	gridha_limit_feedback(&l, &waited, t, clock_now, 1000, CEILING);
	is_int((long) l.limit, 8, "the time the worker was away is not held against the ledger");
	is_int(l.slow_streak, 0, "... nor counted as slow");
}

/* a ledger that got slower for good: the slow becomes the fastest */
static void
test_slower_ledger(void)
{
	GridhaLimit l = fresh(CEILING, 0);
	GridhaHttpDone fast = done(GRIDHA_LOAD_ANSWERED, 20);
	GridhaHttpDone slow = done(GRIDHA_LOAD_ANSWERED, 500);
	int			i;

	l.limit = 4;
	l.in_flight = 4;
	clock_now += 20 * MS;
	gridha_limit_feedback(&l, &fast, clock_now - 20 * MS, clock_now, 0, CEILING);
	for (i = 0; i < 4; i++)
	{
		l.in_flight = 4;
		clock_now += 500 * MS;
		gridha_limit_feedback(&l, &slow, clock_now - 500 * MS, clock_now, 0, CEILING);
	}
	is_int(l.min_ms, 500, "a limit's worth of slow answers in a row: the slow is the new fastest");
	is_int((long) l.limit, 2, "... after the one halving they brought (their average)");
	is_int(l.slow_streak, 0, "... and the streak starts over");
}

/* never above the ceiling, and a lowered ceiling is obeyed at once */
static void
test_ceiling(void)
{
	GridhaLimit l = fresh(6, 0);
	int			i;

	for (i = 0; i < 30; i++)
		round_of(&l, GRIDHA_LOAD_ANSWERED, 20, 6);
	is_int((long) l.limit, 6, "answers in time never lift the limit over the ceiling");
	is_int(round_of(&l, GRIDHA_LOAD_ANSWERED, 20, 3), 3,
		   "a lowered ceiling (gridha.worker_inflight) is obeyed at the next start");
	is_int((long) l.limit, 3, "... and the limit is brought under it");
}

/* Retry-After: nothing starts before its time, at most a minute */
static void
test_retry_after(void)
{
	GridhaLimit l = fresh(CEILING, 0);
	GridhaHttpDone d = done(GRIDHA_LOAD_BUSY, 20);
	TimestampTz at;

	d.retry_after_ms = 2000;
	l.in_flight = 1;
	clock_now += 20 * MS;
	at = clock_now;
	gridha_limit_feedback(&l, &d, at - 20 * MS, at, 0, CEILING);
	ok(!gridha_limit_may_start(&l, false, at + 1999 * MS, CEILING, 0),
	   "Retry-After 2 s: no POST 1.999 s later");
	ok(!gridha_limit_may_start(&l, true, at + 1999 * MS, CEILING, 0),
	   "... nor a status run");
	ok(gridha_limit_may_start(&l, false, at + 2000 * MS, CEILING, 0),
	   "... a POST 2 s later");
	d.retry_after_ms = 3600 * 1000;
	gridha_limit_feedback(&l, &d, at, at, 0, CEILING);
	is_int((long) ((l.retry_at - at) / MS), GRIDHA_LIMIT_RETRY_MAX_MS,
		   "a Retry-After of an hour is obeyed for a minute");
}

/* the connection bucket */
static void
test_bucket(void)
{
	GridhaLimit l = fresh(CEILING, 200);
	GridhaHttpDone kept = done(GRIDHA_LOAD_ANSWERED, 20);
	int			n = 0;
	int			i;

	while (gridha_limit_may_start(&l, false, clock_now, CEILING, 200) && n < 100)
	{
		l.in_flight++;
		n++;
	}
	is_int(n, 4, "the limit bounds the first burst (200 a second: a burst of 10)");
	l.limit = 64;
	while (gridha_limit_may_start(&l, false, clock_now, CEILING, 200) && n < 100)
	{
		l.in_flight++;
		n++;
	}
	is_int(n, 10, "a burst of a twentieth of a second's connections, then none");
	ok(gridha_limit_may_start(&l, true, clock_now, CEILING, 200),
	   "a status run is not refused by an empty bucket");
	ok(gridha_limit_may_start(&l, false, clock_now + 10 * MS, CEILING, 200),
	   "10 ms later (two connections' worth) one more POST");
	/* over kept-alive connections a request takes next to no connection */
	for (i = 0; i < 30; i++)
		gridha_limit_feedback(&l, &kept, clock_now, clock_now + 20 * MS, 0, CEILING);
	clock_now += 20 * MS;
	n = 0;
	l.in_flight = 0;
	while (gridha_limit_may_start(&l, false, clock_now, CEILING, 200) && n < 100)
	{
		l.in_flight++;
		n++;
	}
	is_int(n, 64, "kept-alive connections: the bucket no longer holds POSTs back");
}

/*
 * the fastest is the answer's own time, never less the time away: an
 * answer read after a step (elapsed 25 ms, 12 of them away) does not make
 * the fastest 13 ms, under what the ledger takes
 */
static void
test_fastest_raw(void)
{
	GridhaLimit l = fresh(CEILING, 0);
	GridhaHttpDone fast = done(GRIDHA_LOAD_ANSWERED, 20);
	GridhaHttpDone away = done(GRIDHA_LOAD_ANSWERED, 25);
	GridhaHttpDone loaded = done(GRIDHA_LOAD_ANSWERED, 120);
	int			i;

	l.slow_start = false;
	l.limit = 32;
	l.in_flight = 32;
	clock_now += 20 * MS;
	gridha_limit_feedback(&l, &fast, clock_now - 20 * MS, clock_now, 0, CEILING);
	clock_now += 25 * MS;
	gridha_limit_feedback(&l, &away, clock_now - 25 * MS, clock_now, 12, CEILING);
	is_int(l.min_ms, 20, "an answer's time less the time away does not lower the fastest (20 ms, not 13)");
	/* a loaded ledger's 120 ms: over 4 x 13 + 50 = 102, under 4 x 20 + 50 = 130 */
	for (i = 0; i < 20; i++)
	{
		l.in_flight = 32;
		clock_now += 120 * MS;
		gridha_limit_feedback(&l, &loaded, clock_now - 120 * MS, clock_now, 0, CEILING);
	}
	is_int((long) l.limit, 32, "... so answers of 120 ms (under 4 x 20 + 50) do not halve the limit");
}

/*
 * after a halving, the answers of requests sent before it do not move the
 * average: a backlog of slow answers, then a fast one of a request sent
 * after the halving, halves nothing more
 */
static void
test_halving_backlog(void)
{
	GridhaLimit l = fresh(CEILING, 0);
	GridhaHttpDone fast = done(GRIDHA_LOAD_ANSWERED, 20);
	GridhaHttpDone slow = done(GRIDHA_LOAD_ANSWERED, 1000);
	TimestampTz before;
	TimestampTz halved;
	int			i;

	l.slow_start = false;
	l.limit = 64;
	l.in_flight = 64;
	clock_now += 20 * MS;
	gridha_limit_feedback(&l, &fast, clock_now - 20 * MS, clock_now, 0, CEILING);
	before = clock_now;
	clock_now += 1000 * MS;
	gridha_limit_feedback(&l, &slow, before, clock_now, 0, CEILING);
	is_int((long) l.limit, 32, "a 1 s answer among 20 ms ones halves the limit (64 to 32)");
	halved = clock_now;
	/* the rest of the burst sent before the halving: slow too */
	for (i = 0; i < 10; i++)
	{
		clock_now += MS;
		gridha_limit_feedback(&l, &slow, before, clock_now, 0, CEILING);
	}
	is_int((long) l.avg_ms, 20, "the slow answers of requests sent before the halving leave the average alone");
	clock_now += 30 * MS;
	gridha_limit_feedback(&l, &fast, halved + MS, clock_now, 0, CEILING);
	is_int((long) l.limit, 32, "... so a fast answer of a request sent after it halves nothing (32, not 16)");
}

/*
 * after a halving by slow answers, a limit's worth of answers in time
 * lifts the limit by one, then it comes back one per answer in time to
 * three quarters of where it was (48 of 64), then grows by one a round
 * trip again; after a 503 it grows by one a round trip only
 */
static void
test_regrow(void)
{
	GridhaLimit l = fresh(CEILING, 0);
	GridhaLimit busy = fresh(CEILING, 0);
	GridhaHttpDone fast = done(GRIDHA_LOAD_ANSWERED, 20);
	GridhaHttpDone slow = done(GRIDHA_LOAD_ANSWERED, 1000);
	GridhaHttpDone b = done(GRIDHA_LOAD_BUSY, 20);
	long		trace[16];
	long		want[] = {33, 48, 49};
	long		want_busy[] = {33, 34, 35, 36};
	int			n;

	l.slow_start = false;
	l.limit = 64;
	l.in_flight = 64;
	clock_now += 20 * MS;
	gridha_limit_feedback(&l, &fast, clock_now - 20 * MS, clock_now, 0, CEILING);
	clock_now += 1000 * MS;
	gridha_limit_feedback(&l, &slow, clock_now - 1000 * MS, clock_now, 0, CEILING);
	is_int((long) l.limit, 32, "a slow answer halves the limit (64 to 32)");
	l.in_flight = 0;
	clock_now += MS;
	n = pipeline(&l, 20, 32 + 33 + 48, 0, CEILING, trace, lengthof(trace));
	trace_is(trace, n, want, lengthof(want),
			 "after slow answers: one more after a limit's worth in time, then back to 48 in a round trip");

	busy.slow_start = false;
	busy.limit = 64;
	busy.in_flight = 64;
	clock_now += 20 * MS;
	gridha_limit_feedback(&busy, &b, clock_now - 20 * MS, clock_now, 0, CEILING);
	is_int((long) busy.limit, 32, "a 503 halves the limit (64 to 32)");
	busy.in_flight = 0;
	clock_now += MS;
	n = pipeline(&busy, 20, 32 + 33 + 34 + 35, 0, CEILING, trace, lengthof(trace));
	trace_is(trace, n, want_busy, lengthof(want_busy),
			 "after a 503: one more a round trip only");
}

int
main(void)
{
	test_start();
	test_slow_start();
	test_slow_start_end();
	test_slow_start_slow_answer();
	test_slow_start_http10();
	test_slow_start_unused();
	test_growth();
	test_unused();
	test_decrease();
	test_latency();
	test_slower_ledger();
	test_ceiling();
	test_retry_after();
	test_bucket();
	test_fastest_raw();
	test_halving_backlog();
	test_regrow();
	printf("1..%d\n", test_count);
	return test_failed > 0 ? 1 : 0;
}
