/*-------------------------------------------------------------------------
 *
 * gridha-client.c
 *		The reference external gridha instance: a submitter process that
 *		takes batches from the database and posts them to a ledger.
 *
 * This is the program to read when writing a submitter of your own. It
 * does nothing clever: every decision (which services are ours, which
 * batch is next, whether a report still counts) is made by the database,
 * and the client only carries batches between it and the ledger.
 *
 * The loop:
 *
 *   1. gridha.next_batch(instance)      renews and acquires claims when due
 *                                        and hands out at most one batch
 *   2. gridha.verify_batch(...)          only with --verify: still ours?
 *   3. the service's target              gridha.service_claims.target ->
 *                                        gridha.targets.submit_url
 *   4. POST the payload                  gridha_http_submit (src/dlt_http.c)
 *   5. gridha.report_submission(...)     accepted / delayed / rejected, as
 *                                        a gridha.submission_outcome
 *
 * and, every --monitor-interval-ms, the DLT monitor:
 *
 *   gridha.pending_batches(instance) -> GET each target's status_url for
 *   its ids -> one gridha.report_statuses(instance, gridha.status_report[])
 *   for every id the ledger mentions.
 *
 * It speaks only the 1.3 SQL API (typed outcomes and ledger statuses,
 * batched reports of rows, next_batch's attempts), which a database still
 * on 1.2 has too. Older SQL is refused by the library (RG022, until ALTER
 * EXTENSION gridha UPDATE): the client's first call (register_instance, or
 * acquire_claims when given --instance-id) is refused, and it prints the
 * refusal and stops with exit status 1.
 *
 * Words used here:
 *   instance   this process's uuid, given or made by register_instance
 *   hand-out   a batch next_batch gave us: service, batch, epoch, attempts
 *              (logged as "attempt")
 *   refusal    a report the database turned down: RG001 (the claim has
 *              moved on: drop the batch, its new holder sends it again) or
 *              RG002 (the batch is no longer in the state the report needs)
 *   event log  --log FILE: one JSON object a line for every hand-out,
 *              submission outcome, report and refusal, for fault checkers
 *
 * Every statement runs on its own (autocommit); no transaction is ever held
 * open across an HTTP request. When the connection breaks, the client
 * reconnects with backoff and carries on with the same instance id; a
 * report that was under way is sent again (a duplicate is refused with
 * RG002, which is harmless), and a hand-out whose answer was lost is
 * reported delayed (client_recover). SIGTERM or SIGINT: the batch in hand is
 * finished and reported, the claims are released, and the exit status is 0.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "dlt_http.h"

/* Longest status URL: longer id lists are split (dlt_http.c). */
#define STATUS_URL_MAX		2048

/*
 * The kinds of target this client serves: it POSTs and GETs; a target
 * with a submit_function or status_function is left to the workers.
 */
#define CLIENT_SERVES		"'{submit_url,status_url}'::text[]"
/* How far reconnect backoff grows. */
#define RECONNECT_MAX_MS	5000L
/* Reconnect attempts while stopping, before the last reports are given up. */
#define STOPPING_CONNECT_TRIES 10

typedef struct ClientOptions
{
	const char *dsn;			/* libpq conninfo; "" = PG* environment */
	const char *instance_id;	/* NULL: register a new one */
	const char *label;
	long		idle_sleep_ms;
	long		monitor_interval_ms;
	long		submit_timeout_ms;
	int			verify;
	long		max_runtime_s;	/* 0: run until signalled */
	const char *log_path;		/* NULL: no event log */
} ClientOptions;

typedef struct Client
{
	ClientOptions opt;
	PGconn	   *conn;			/* NULL while disconnected */
	GridhaHttp *http;
	char		instance_id[64];
	int			log_fd;			/* -1: no event log */
	long		backoff_ms;		/* next reconnect delay */
	double		started_ms;		/* monotonic */
	double		next_monitor_ms;	/* monotonic */
	int			recover;		/* look for hand-outs we do not have in hand */
	const char *stop_reason;
} Client;

/* A batch handed out to us by next_batch. */
typedef struct Batch
{
	char	   *service_id;
	char	   *batch_id;
	unsigned char *payload;
	size_t		payload_len;
	char		epoch[24];		/* kept as text: it goes back as a parameter */
	int			attempts;		/* hand-outs of this batch, this one included */
} Batch;

/* How a statement went. */
typedef enum QueryResult
{
	QUERY_OK,
	QUERY_REFUSED,				/* RG001 or RG002: drop the batch */
	QUERY_LOST,					/* the connection broke */
	QUERY_ERROR					/* anything else */
} QueryResult;

static volatile sig_atomic_t stop_signal = 0;

/* ----------------------------------------------------------------------
 * Time, signals, logging
 * ----------------------------------------------------------------------
 */

/* now_ms: monotonic milliseconds, for intervals. */
static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static void
handle_stop_signal(int sig)
{
	stop_signal = sig;
}

/*
 * client_stopping: true once SIGTERM/SIGINT arrived or --max-runtime-s
 * has passed; remembers why.
 */
static int
client_stopping(Client *c)
{
	if (stop_signal != 0 && c->stop_reason == NULL)
		c->stop_reason = stop_signal == SIGINT ? "SIGINT" : "SIGTERM";
	if (c->opt.max_runtime_s > 0 && c->stop_reason == NULL &&
		now_ms() - c->started_ms >= c->opt.max_runtime_s * 1000.0)
		c->stop_reason = "max-runtime";
	return c->stop_reason != NULL;
}

/* client_sleep: sleep ms milliseconds, waking early when told to stop. */
static void
client_sleep(Client *c, long ms)
{
	double		until = now_ms() + ms;

	while (!client_stopping(c))
	{
		double		left = until - now_ms();
		struct timespec ts;

		if (left <= 0)
			break;
		if (left > 50)
			left = 50;
		ts.tv_sec = 0;
		ts.tv_nsec = (long) (left * 1e6);
		nanosleep(&ts, NULL);
	}
}

/* note: a line for the operator on stderr. */
static void
__attribute__((format(printf, 1, 2)))
note(const char *fmt,...)
{
	va_list		ap;
	char		stamp[32];
	time_t		t = time(NULL);
	struct tm	tm;

	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
	fprintf(stderr, "%s gridha-client[%d]: ", stamp, (int) getpid());
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* One event-log line being built. */
typedef struct LogLine
{
	char		buf[8192];
	size_t		len;
} LogLine;

/* log_raw: append text, silently cut when the line is full. */
static void
log_raw(LogLine *l, const char *s)
{
	size_t		n = strlen(s);

	if (l->len + n >= sizeof(l->buf) - 4)
		n = sizeof(l->buf) - 4 - l->len;
	memcpy(l->buf + l->len, s, n);
	l->len += n;
}

/* log_str: append "key": "value" (JSON-escaped, at most 1000 bytes). */
static void
log_str(LogLine *l, const char *key, const char *value)
{
	char		esc[7];
	const char *p;
	int			n = 0;

	log_raw(l, ",\"");
	log_raw(l, key);
	if (value == NULL)
	{
		log_raw(l, "\":null");
		return;
	}
	log_raw(l, "\":\"");
	for (p = value; *p && n < 1000; p++, n++)
	{
		unsigned char ch = (unsigned char) *p;

		if (ch == '"' || ch == '\\')
		{
			esc[0] = '\\';
			esc[1] = (char) ch;
			esc[2] = '\0';
		}
		else if (ch < 0x20)
			snprintf(esc, sizeof(esc), "\\u%04x", ch);
		else
		{
			esc[0] = (char) ch;
			esc[1] = '\0';
		}
		log_raw(l, esc);
	}
	log_raw(l, "\"");
}

/* log_num: append "key": number (given as text, e.g. an epoch). */
static void
log_num(LogLine *l, const char *key, const char *number)
{
	log_raw(l, ",\"");
	log_raw(l, key);
	log_raw(l, "\":");
	log_raw(l, number && number[0] ? number : "null");
}

/* log_int: append "key": integer. */
static void
log_int(LogLine *l, const char *key, long value)
{
	char		num[24];

	snprintf(num, sizeof(num), "%ld", value);
	log_num(l, key, num);
}

/*
 * log_begin: start a line with the wall time (Unix seconds and ISO 8601,
 * UTC), the event name and our instance id.
 */
static void
log_begin(Client *c, LogLine *l, const char *event)
{
	struct timespec ts;
	struct tm	tm;
	char		iso[32];
	char		head[96];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%S", &tm);
	l->len = 0;
	snprintf(head, sizeof(head), "{\"t\":%lld.%03ld,\"ts\":\"%s.%03ldZ\"",
			 (long long) ts.tv_sec, ts.tv_nsec / 1000000, iso, ts.tv_nsec / 1000000);
	log_raw(l, head);
	log_str(l, "event", event);
	log_str(l, "instance", c->instance_id[0] ? c->instance_id : NULL);
}

/* log_batch: the fields that name a hand-out. */
static void
log_batch(LogLine *l, const Batch *b)
{
	log_str(l, "service", b->service_id);
	log_str(l, "batch", b->batch_id);
	log_num(l, "epoch", b->epoch);
	log_int(l, "attempt", b->attempts);
}

/* log_end: finish the line and append it to the event log in one write. */
static void
log_end(Client *c, LogLine *l)
{
	ssize_t		w;

	if (c->log_fd < 0)
		return;
	l->buf[l->len++] = '}';
	l->buf[l->len++] = '\n';
	w = write(c->log_fd, l->buf, l->len);
	if (w != (ssize_t) l->len)
		note("could not write the event log: %s", strerror(errno));
}

/* ----------------------------------------------------------------------
 * The database connection
 * ----------------------------------------------------------------------
 */

/*
 * client_disconnect: drop a broken connection; the next call reconnects.
 * Whatever was lost with it -- the answer of a hand-out, or, after a
 * failover to a replica that had not received them, reports the old
 * primary had acknowledged -- may leave a batch submitting under this
 * instance that is not in hand: the next cycle looks for one
 * (client_recover), whichever call saw the connection break.
 */
static void
client_disconnect(Client *c, const char *why)
{
	LogLine		l;

	if (c->conn == NULL)
		return;
	PQfinish(c->conn);
	c->conn = NULL;
	c->recover = 1;
	note("connection lost: %s", why);
	log_begin(c, &l, "disconnected");
	log_str(&l, "detail", why);
	log_end(c, &l);
}

/*
 * client_connect: connect, retrying with backoff (100 ms doubling to 5 s).
 * Gives up when told to stop, unless bounded, in which case it tries
 * STOPPING_CONNECT_TRIES times whatever happens (used to send the last
 * reports during shutdown). Returns 0 when connected.
 */
static int
client_connect(Client *c, int bounded)
{
	const char *keys[] = {"dbname", "fallback_application_name", NULL};
	const char *values[] = {c->opt.dsn, "gridha-client", NULL};
	int			tries = 0;

	while (c->conn == NULL)
	{
		PGconn	   *conn;
		LogLine		l;

		if (bounded ? tries >= STOPPING_CONNECT_TRIES : client_stopping(c))
			return -1;
		tries++;
		conn = PQconnectdbParams(keys, values, 1);
		if (PQstatus(conn) == CONNECTION_OK)
		{
			c->conn = conn;
			c->backoff_ms = 100;
			log_begin(c, &l, "connected");
			log_end(c, &l);
			break;
		}
		note("cannot connect (retrying in %ld ms): %s", c->backoff_ms,
			 PQerrorMessage(conn));
		PQfinish(conn);
		if (bounded)
		{
			struct timespec ts = {0, 200 * 1000000L};

			nanosleep(&ts, NULL);
		}
		else
			client_sleep(c, c->backoff_ms);
		c->backoff_ms = c->backoff_ms * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS : c->backoff_ms * 2;
	}
	return 0;
}

/*
 * client_query: run one statement with text parameters, on its own. On
 * QUERY_OK *res holds the result (the caller clears it); otherwise sqlstate
 * and msg say what went wrong, and a broken connection is dropped.
 */
static QueryResult
client_query(Client *c, const char *sql, int nparams, const char *const *params,
			 PGresult **res, char *sqlstate, char *msg, size_t msglen)
{
	PGresult   *r;
	const char *state;
	ExecStatusType st;

	*res = NULL;
	sqlstate[0] = '\0';
	msg[0] = '\0';
	if (c->conn == NULL)
	{
		snprintf(msg, msglen, "not connected");
		return QUERY_LOST;
	}
	r = PQexecParams(c->conn, sql, nparams, NULL, params, NULL, NULL, 0);
	st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
	{
		*res = r;
		return QUERY_OK;
	}
	state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	snprintf(sqlstate, 6, "%s", state ? state : "");
	/* the primary message alone ("stale claim on service ..."), no "ERROR:" */
	snprintf(msg, msglen, "%s", r && PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) ?
			 PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : PQerrorMessage(c->conn));
	msg[strcspn(msg, "\n")] = '\0';
	PQclear(r);

	/*
	 * 08: connection exceptions; 57P0x: the server is shutting down; 25006
	 * on a write: this server is (now) a standby. Reconnecting finds the
	 * primary when the connection string names every host with
	 * target_session_attrs=read-write.
	 */
	if (PQstatus(c->conn) != CONNECTION_OK || strncmp(sqlstate, "08", 2) == 0 ||
		strncmp(sqlstate, "57P0", 4) == 0 || strcmp(sqlstate, "25006") == 0)
	{
		client_disconnect(c, msg);
		return QUERY_LOST;
	}
	if (strcmp(sqlstate, "RG001") == 0 || strcmp(sqlstate, "RG002") == 0)
		return QUERY_REFUSED;
	return QUERY_ERROR;
}

/*
 * client_query_retry: client_query for statements that are safe to send
 * again (lookups and reports: a report that did arrive the first time is
 * refused the second time with RG002). Reconnects until it gets an answer
 * or has to give up while stopping.
 */
static QueryResult
client_query_retry(Client *c, const char *sql, int nparams, const char *const *params,
				   PGresult **res, char *sqlstate, char *msg, size_t msglen)
{
	QueryResult qr;

	for (;;)
	{
		qr = client_query(c, sql, nparams, params, res, sqlstate, msg, msglen);
		if (qr != QUERY_LOST)
			return qr;
		if (client_connect(c, client_stopping(c)) != 0)
			return QUERY_LOST;
	}
}

/* log_refusal: a refused or failed statement about a batch. */
static void
log_refusal(Client *c, const char *event, const char *during, const Batch *b,
			const char *sqlstate, const char *msg)
{
	LogLine		l;

	note("%s: %s during %s of %s/%s: %s", event, sqlstate, during,
		 b ? b->service_id : "-", b ? b->batch_id : "-", msg);
	log_begin(c, &l, event);
	log_str(&l, "during", during);
	if (b)
		log_batch(&l, b);
	log_str(&l, "sqlstate", sqlstate);
	log_str(&l, "message", msg);
	log_end(c, &l);
}

/* ----------------------------------------------------------------------
 * The instance
 * ----------------------------------------------------------------------
 */

/*
 * client_declare_serves: tell the database again which kinds of target
 * this client serves; it hands back the claims it cannot serve.
 */
static int
client_declare_serves(Client *c)
{
	const char *params[1] = {c->instance_id};
	PGresult   *res;
	char		sqlstate[6] = "";
	char		msg[512] = "";

	if (client_query_retry(c, "SELECT count(*) FROM gridha.acquire_claims($1, " CLIENT_SERVES ")",
						   1, params, &res, sqlstate, msg, sizeof(msg)) == QUERY_OK)
		PQclear(res);
	else
	{
		note("cannot declare what this instance serves: %s (%s)", msg, sqlstate);
		return -1;
	}
	return 0;
}

/*
 * client_register: our instance id: the one given, or a fresh one from
 * gridha.register_instance(label). Returns 0 when we have one.
 */
static int
client_register(Client *c)
{
	const char *params[1] = {c->opt.label};
	PGresult   *res;
	char		sqlstate[6];
	char		msg[512];
	QueryResult qr;

	if (c->opt.instance_id)
	{
		snprintf(c->instance_id, sizeof(c->instance_id), "%s", c->opt.instance_id);
		return client_declare_serves(c);
	}
	qr = client_query_retry(c, "SELECT gridha.register_instance($1, " CLIENT_SERVES ")", 1, params,
							&res, sqlstate, msg, sizeof(msg));
	if (qr != QUERY_OK)
	{
		note("cannot register an instance: %s (%s)", msg, sqlstate);
		return -1;
	}
	snprintf(c->instance_id, sizeof(c->instance_id), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return 0;
}

/*
 * client_release: hand our claims back (on the way out), so others take
 * the services over at once instead of waiting for the claims to expire.
 */
static void
client_release(Client *c)
{
	const char *params[1] = {c->instance_id};
	PGresult   *res;
	char		sqlstate[6];
	char		msg[512];
	LogLine		l;

	if (client_connect(c, 1) != 0 ||
		client_query_retry(c, "SELECT gridha.release_claims($1)", 1, params,
						   &res, sqlstate, msg, sizeof(msg)) != QUERY_OK)
	{
		note("could not release the claims: %s", c->conn ? msg : "no connection");
		log_refusal(c, "error", "release_claims", NULL, sqlstate,
					c->conn ? msg : "no connection");
		return;
	}
	log_begin(c, &l, "release");
	log_num(&l, "released", PQgetvalue(res, 0, 0));
	log_end(c, &l);
	PQclear(res);
}

/* ----------------------------------------------------------------------
 * Submitting one batch
 * ----------------------------------------------------------------------
 */

static void
batch_free(Batch *b)
{
	free(b->service_id);
	free(b->batch_id);
	if (b->payload)
		PQfreemem(b->payload);
	memset(b, 0, sizeof(*b));
}

/*
 * client_next_batch: one hand-out. 1 with *b filled, 0 when there is
 * nothing to do, -1 when the call failed (never retried: had the hand-out
 * committed before the connection broke, sending it again would not give
 * the same batch back).
 */
static int
client_next_batch(Client *c, Batch *b)
{
	const char *params[1] = {c->instance_id};
	PGresult   *res;
	char		sqlstate[6];
	char		msg[512];
	QueryResult qr;
	LogLine		l;

	qr = client_query(c,
					  "SELECT service_id, batch_id, payload, epoch, attempts"
					  " FROM gridha.next_batch($1)", 1, params,
					  &res, sqlstate, msg, sizeof(msg));
	if (qr != QUERY_OK)
	{
		if (qr != QUERY_LOST)
			log_refusal(c, "error", "next_batch", NULL, sqlstate, msg);
		else
			c->recover = 1;		/* it may have committed: see client_recover */
		return -1;
	}
	if (PQntuples(res) == 0)
	{
		PQclear(res);
		return 0;
	}
	memset(b, 0, sizeof(*b));
	b->service_id = strdup(PQgetvalue(res, 0, 0));
	b->batch_id = strdup(PQgetvalue(res, 0, 1));
	if (!PQgetisnull(res, 0, 2))
		b->payload = PQunescapeBytea((const unsigned char *) PQgetvalue(res, 0, 2),
									 &b->payload_len);
	snprintf(b->epoch, sizeof(b->epoch), "%s", PQgetvalue(res, 0, 3));
	b->attempts = atoi(PQgetvalue(res, 0, 4));
	PQclear(res);
	if (b->service_id == NULL || b->batch_id == NULL ||
		(b->payload == NULL && b->payload_len != 0))
	{
		note("out of memory");
		batch_free(b);
		return -1;
	}

	log_begin(c, &l, "handout");
	log_batch(&l, b);
	log_end(c, &l);
	return 1;
}

/*
 * client_verify: with --verify, ask the database whether the batch is
 * still ours to submit. 1 yes, 0 no (drop it), -1 could not ask.
 */
static int
client_verify(Client *c, const Batch *b)
{
	const char *params[4] = {c->instance_id, b->service_id, b->batch_id, b->epoch};
	PGresult   *res;
	char		sqlstate[6];
	char		msg[512];
	int			yes;

	if (client_query_retry(c, "SELECT gridha.verify_batch($1, $2, $3, $4)", 4, params,
						   &res, sqlstate, msg, sizeof(msg)) != QUERY_OK)
	{
		log_refusal(c, "error", "verify_batch", b, sqlstate, msg);
		return -1;
	}
	yes = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (!yes)
		log_refusal(c, "refused", "verify_batch", b, "", "no longer this instance's to submit");
	return yes;
}

/*
 * A target as the client uses it: where to POST, where to GET statuses,
 * and what its requests carry (its own headers, e.g. credentials, never
 * logged; the answers that reject a batch).
 */
typedef struct ClientTarget
{
	char	   *name;
	char	   *submit_url;		/* NULL: none (a function, or nothing) */
	char	   *status_url;		/* NULL: none */
	int			fire_and_forget;	/* no status source: accepted = committed */
	char	   *header_lines;	/* "Name: value\n..." (the headers point in) */
	const char *headers[32];
	int			reject_codes[64];
	GridhaHttpTarget http;
} ClientTarget;

/*
 * The target's columns, through to_jsonb for those a gridha 1.0 database
 * does not have: reject codes as "400,422" ("" for none, NULL for the
 * default), headers as lines.
 */
#define CLIENT_TARGET_COLUMNS \
	"SELECT t.target, t.submit_url, t.status_url," \
	"       t.status_url IS NULL AND t.status_function IS NULL," \
	"       CASE WHEN to_jsonb(t) ? 'reject_codes' THEN coalesce(" \
	"         (SELECT string_agg(x, ',') FROM jsonb_array_elements_text(" \
	"            to_jsonb(t) -> 'reject_codes') AS x), '') END," \
	"       (SELECT string_agg(h.key || ': ' || h.value, E'\\n' ORDER BY h.key)" \
	"          FROM jsonb_each_text(CASE WHEN jsonb_typeof(to_jsonb(t) -> 'request_headers') = 'object'" \
	"                                    THEN to_jsonb(t) -> 'request_headers' END) AS h)" \
	"  FROM gridha.targets t"

static void
target_free(ClientTarget *t)
{
	free(t->name);
	free(t->submit_url);
	free(t->status_url);
	free(t->header_lines);
	memset(t, 0, sizeof(*t));
}

/*
 * target_from_row: a ClientTarget from row 0 of a CLIENT_TARGET_COLUMNS
 * result. Returns 0, or -1 when out of memory.
 */
static int
target_from_row(PGresult *res, ClientTarget *t)
{
	char	   *line;
	char	   *save;
	const char *codes;

	memset(t, 0, sizeof(*t));
	t->name = strdup(PQgetvalue(res, 0, 0));
	t->submit_url = PQgetisnull(res, 0, 1) ? NULL : strdup(PQgetvalue(res, 0, 1));
	t->status_url = PQgetisnull(res, 0, 2) ? NULL : strdup(PQgetvalue(res, 0, 2));
	t->fire_and_forget = strcmp(PQgetvalue(res, 0, 3), "t") == 0;
	t->http.headers = t->headers;
	if (!PQgetisnull(res, 0, 4))
	{
		/* the target's own list; empty: nothing rejects */
		t->http.reject_codes = t->reject_codes;
		for (codes = PQgetvalue(res, 0, 4); *codes && t->http.n_reject_codes < 64;)
		{
			t->reject_codes[t->http.n_reject_codes++] = atoi(codes);
			codes += strcspn(codes, ",");
			if (*codes == ',')
				codes++;
		}
	}
	if (!PQgetisnull(res, 0, 5))
	{
		t->header_lines = strdup(PQgetvalue(res, 0, 5));
		if (t->header_lines == NULL)
			return -1;
		for (line = strtok_r(t->header_lines, "\n", &save); line && t->http.n_headers < 32;
			 line = strtok_r(NULL, "\n", &save))
			t->headers[t->http.n_headers++] = line;
	}
	return t->name == NULL ? -1 : 0;
}

/*
 * client_target_of: the target of a service (by service id) or by name.
 * Returns 0 with *t filled; -1 with msg saying why not.
 */
static int
client_target_of(Client *c, const char *service_id, const char *target,
				 ClientTarget *t, char *msg, size_t msglen)
{
	const char *params[1] = {service_id ? service_id : target};
	PGresult   *res;
	char		sqlstate[6];
	int			rc = -1;

	memset(t, 0, sizeof(*t));
	if (client_query_retry(c, service_id ?
						   CLIENT_TARGET_COLUMNS
						   "  JOIN gridha.service_claims c ON c.target = t.target"
						   " WHERE c.service_id = $1" :
						   CLIENT_TARGET_COLUMNS " WHERE t.target = $1",
						   1, params, &res, sqlstate, msg, msglen) != QUERY_OK)
		return -1;
	if (PQntuples(res) == 0)
		snprintf(msg, msglen, "no target row");
	else if (target_from_row(res, t) != 0)
		snprintf(msg, msglen, "out of memory");
	else
		rc = 0;
	PQclear(res);
	return rc;
}

/*
 * client_report_submission: tell the database what the ledger said. A
 * refusal (RG001/RG002) means the batch is no longer ours: logged, dropped.
 */
static int
client_report_submission(Client *c, const Batch *b, const char *outcome, const char *detail)
{
	const char *params[6] = {c->instance_id, b->service_id, b->batch_id, b->epoch,
	outcome, detail};
	PGresult   *res;
	char		sqlstate[6];
	char		msg[512];
	QueryResult qr;
	LogLine		l;

	qr = client_query_retry(c,
							"SELECT gridha.report_submission($1, $2, $3, $4,"
							" $5::gridha.submission_outcome, $6)",
							6, params, &res, sqlstate, msg, sizeof(msg));
	if (qr == QUERY_REFUSED)
	{
		log_refusal(c, "refused", "report_submission", b, sqlstate, msg);
		return 0;
	}
	if (qr != QUERY_OK)
	{
		log_refusal(c, "error", "report_submission", b, sqlstate, msg);
		c->recover = 1;			/* still submitting under our claim: client_recover */
		return 0;
	}
	log_begin(c, &l, "report");
	log_str(&l, "kind", "submission");
	log_batch(&l, b);
	log_str(&l, "word", outcome);
	log_str(&l, "result", PQgetvalue(res, 0, 0));
	log_end(c, &l);
	PQclear(res);
	return 1;
}

static int	client_report_status(Client *c, const Batch *b, const char *word);

/*
 * client_recover: a batch handed out to this instance id that the client
 * does not have in hand -- the answer of a next_batch lost with the
 * connection, or a hand-out of an earlier run under the same --instance-id
 * -- is reported "delayed", so it is handed out again at once. Without this
 * its service would wait for as long as this instance keeps renewing the
 * claim. A batch whose report is refused (it is submitting under an older
 * epoch, and the hand-out takes it again by itself) is left alone. Run at
 * start and at the top of the cycle after any lost connection, when
 * nothing is in hand.
 */
static void
client_recover(Client *c)
{
	const char *params[1] = {c->instance_id};
	PGresult   *res;
	PGresult   *r2;
	char		sqlstate[6];
	char		msg[512];
	int			i;

	c->recover = 0;
	if (client_query_retry(c, "SELECT service_id, batch_id, epoch"
						   "  FROM gridha.claimed_batches($1, 1000)"
						   " WHERE status = 'submitting'", 1, params,
						   &res, sqlstate, msg, sizeof(msg)) != QUERY_OK)
	{
		log_refusal(c, "error", "claimed_batches", NULL, sqlstate, msg);
		return;
	}
	for (i = 0; i < PQntuples(res); i++)
	{
		const char *rp[4] = {c->instance_id, PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
		PQgetvalue(res, i, 2)};
		LogLine		l;
		QueryResult qr;

		qr = client_query_retry(c,
								"SELECT gridha.report_submission($1, $2, $3, $4,"
								" 'delayed'::gridha.submission_outcome,"
								" 'hand-out not in hand (lost with a connection)')", 4, rp,
								&r2, sqlstate, msg, sizeof(msg));
		if (qr != QUERY_OK)
			continue;
		PQclear(r2);
		log_begin(c, &l, "recovered");
		log_str(&l, "service", rp[1]);
		log_str(&l, "batch", rp[2]);
		log_num(&l, "epoch", rp[3]);
		log_end(c, &l);
		note("batch %s of service %s was handed out to this instance but not in hand: reported delayed",
			 rp[2], rp[1]);
	}
	PQclear(res);
}

/*
 * client_handle_batch: the life of one hand-out: verify, look up the
 * target, POST, report. Never inside a transaction.
 */
static void
client_handle_batch(Client *c, const Batch *b)
{
	char		detail[512];
	ClientTarget t;
	int			fire_and_forget;
	GridhaSubmitOutcome outcome;
	int			not_served = 0;
	LogLine		l;

	if (c->opt.verify && client_verify(c, b) != 1)
		return;

	if (client_target_of(c, b->service_id, NULL, &t, detail, sizeof(detail)) != 0)
	{
		if (c->conn == NULL)
			return;				/* stopping without a connection */
		/* nowhere to send it: the database backs it off and we retry */
		outcome = GRIDHA_SUBMIT_DELAYED;
	}
	else if (t.submit_url == NULL)
	{
		/* not a target this client serves (the hand-out hands such back) */
		snprintf(detail, sizeof(detail), "target \"%s\" has no submit_url", t.name);
		outcome = GRIDHA_SUBMIT_DELAYED;
		not_served = 1;
	}
	else
		outcome = gridha_http_submit(c->http, t.submit_url, &t.http, b->service_id,
									 b->batch_id, strtoll(b->epoch, NULL, 10), b->attempts,
									 b->payload, b->payload_len,
									 c->opt.submit_timeout_ms, NULL,
									 detail, sizeof(detail));
	fire_and_forget = t.fire_and_forget;
	target_free(&t);

	log_begin(c, &l, "submit");
	log_batch(&l, b);
	log_str(&l, "outcome", gridha_http_outcome_name(outcome));
	log_str(&l, "detail", detail);
	log_end(c, &l);

	if (client_report_submission(c, b, gridha_http_outcome_name(outcome), detail) &&
		outcome == GRIDHA_SUBMIT_ACCEPTED && fire_and_forget)
		(void) client_report_status(c, b, "committed");

	/*
	 * Someone declared this instance able to serve a kind of target it
	 * cannot (a function target): declare again what it serves, so the
	 * database hands such services back to instances that can.
	 */
	if (not_served)
		(void) client_declare_serves(c);
}

/* ----------------------------------------------------------------------
 * The DLT monitor
 * ----------------------------------------------------------------------
 */

/*
 * client_report_status: one ledger word for one batch. Returns 0, or -1
 * when the connection is gone (the monitor round ends).
 */
static int
client_report_status(Client *c, const Batch *b, const char *word)
{
	const char *params[5] = {c->instance_id, b->service_id, b->batch_id, b->epoch, word};
	PGresult   *res;
	char		sqlstate[6];
	char		msg[512];
	QueryResult qr;
	LogLine		l;

	qr = client_query(c,
					  "SELECT gridha.report_status($1, $2, $3, $4, $5::gridha.ledger_status)", 5, params,
					  &res, sqlstate, msg, sizeof(msg));
	if (qr == QUERY_LOST)
		return -1;
	if (qr != QUERY_OK)
	{
		log_refusal(c, qr == QUERY_REFUSED ? "refused" : "error", "report_status",
					b, sqlstate, msg);
		return 0;
	}
	log_begin(c, &l, "report");
	log_str(&l, "kind", "status");
	log_batch(&l, b);
	log_str(&l, "word", word);
	log_str(&l, "result", PQgetvalue(res, 0, 0));
	log_end(c, &l);
	PQclear(res);
	return 0;
}

/* A growing string (array literals for the batched report) */
typedef struct Text
{
	char	   *data;
	size_t		len;
	size_t		cap;
	int			oom;
} Text;

static void
text_add(Text *t, const char *s, size_t n)
{
	if (t->oom)
		return;
	if (t->len + n + 1 > t->cap)
	{
		size_t		cap = t->cap ? t->cap * 2 : 256;
		char	   *grown;

		while (cap < t->len + n + 1)
			cap *= 2;
		grown = realloc(t->data, cap);
		if (grown == NULL)
		{
			t->oom = 1;
			return;
		}
		t->data = grown;
		t->cap = cap;
	}
	memcpy(t->data + t->len, s, n);
	t->len += n;
	t->data[t->len] = '\0';
}

/* text_element: appends value to an array literal, quoted as arrays want */
static void
text_element(Text *t, const char *value)
{
	text_add(t, t->len == 0 ? "{\"" : ",\"", 2);
	for (; *value; value++)
	{
		if (*value == '"' || *value == '\\')
			text_add(t, "\\", 1);
		text_add(t, value, 1);
	}
	text_add(t, "\"", 1);
}

static void
text_close(Text *t)
{
	text_add(t, t->len == 0 ? "{}" : "}", t->len == 0 ? 2 : 1);
}

/* The reports of one monitor round, sent together */
typedef struct ClientReports
{
	int			n;
	Text		services;
	Text		batches;
	Text		epochs;
	Text		words;
} ClientReports;

static void
reports_add(ClientReports *r, const char *service_id, const char *batch_id,
			const char *epoch, const char *word)
{
	text_element(&r->services, service_id);
	text_element(&r->batches, batch_id);
	text_element(&r->epochs, epoch);
	text_element(&r->words, word);
	r->n++;
}

static void
reports_free(ClientReports *r)
{
	free(r->services.data);
	free(r->batches.data);
	free(r->epochs.data);
	free(r->words.data);
	memset(r, 0, sizeof(*r));
}

/*
 * client_send_statuses: the round's ledger words in one statement (one
 * transaction), gridha.report_statuses; each row says what became of its
 * batch, or why it was refused (a refused row does not undo the others).
 */
static void
client_send_statuses(Client *c, ClientReports *r, PGresult *pending, const int *rows,
					 char *const *words)
{
	const char *params[5];
	PGresult   *res;
	char		sqlstate[6];
	char		msg[512];
	QueryResult qr;
	int			i;

	if (r->n == 0)
		return;
	text_close(&r->services);
	text_close(&r->batches);
	text_close(&r->epochs);
	text_close(&r->words);
	if (r->services.oom || r->batches.oom || r->epochs.oom || r->words.oom)
	{
		note("out of memory");
		return;
	}
	params[0] = c->instance_id;
	params[1] = r->services.data;
	params[2] = r->batches.data;
	params[3] = r->epochs.data;
	params[4] = r->words.data;
	/*
	 * One gridha.status_report row per batch, made from the round's arrays
	 * in their order (the ledger's words are the five labels of
	 * gridha.ledger_status, dlt_json.c).
	 */
	qr = client_query_retry(c,
							"SELECT service_id, batch_id, status, sqlstate, message"
							"  FROM gridha.report_statuses($1, ARRAY("
							"    SELECT (u.s, u.b, u.e, u.w::gridha.ledger_status, NULL)::gridha.status_report"
							"      FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[])"
							"           WITH ORDINALITY AS u(s, b, e, w, n)"
							"     ORDER BY u.n))",
							5, params, &res, sqlstate, msg, sizeof(msg));
	if (qr != QUERY_OK)
	{
		log_refusal(c, "error", "report_statuses", NULL, sqlstate, msg);
		return;
	}
	for (i = 0; i < PQntuples(res); i++)
	{
		Batch		b;
		LogLine		l;

		memset(&b, 0, sizeof(b));
		b.service_id = PQgetvalue(res, i, 0);
		b.batch_id = PQgetvalue(res, i, 1);
		snprintf(b.epoch, sizeof(b.epoch), "%s", PQgetvalue(pending, rows[i], 3));
		if (!PQgetisnull(res, i, 3))
		{
			log_refusal(c, "refused", "report_status", &b, PQgetvalue(res, i, 3),
						PQgetvalue(res, i, 4));
			continue;
		}
		log_begin(c, &l, "report");
		log_str(&l, "kind", "status");
		log_batch(&l, &b);
		log_str(&l, "word", words[rows[i]]);
		log_str(&l, "result", PQgetvalue(res, i, 2));
		log_end(c, &l);
	}
	PQclear(res);
}

/*
 * client_monitor_target: asks one target about rows [from, to) of the
 * pending list (dlt_http.c splits the ids over as many GETs as the URL
 * length allows) and adds what changed to the round's reports (rows:
 * which pending row each report is about; words: the ledger's word, by
 * pending row).
 */
static void
client_monitor_target(Client *c, PGresult *pending, int from, int to,
					  ClientReports *r, int *rows, char **words)
{
	GridhaStatusEntry *entries = calloc(to - from, sizeof(GridhaStatusEntry));
	ClientTarget t;
	char		err[512];
	int			n = to - from;
	int			i;

	if (entries == NULL)
	{
		note("out of memory");
		return;
	}
	if (client_target_of(c, NULL, PQgetvalue(pending, from, 4), &t, err, sizeof(err)) != 0)
	{
		free(entries);
		return;
	}
	for (i = 0; i < n; i++)
	{
		entries[i].batch_id = PQgetvalue(pending, from + i, 1);
		/* no status source (fire and forget): accepted means committed */
		if (t.fire_and_forget)
			snprintf(entries[i].status, sizeof(entries[i].status), "committed");
	}
	if (!t.fire_and_forget &&
		gridha_http_statuses(c->http, t.status_url, &t.http, entries, n, STATUS_URL_MAX,
							 c->opt.submit_timeout_ms, err, sizeof(err)) != 0)
	{
		LogLine		l;

		/* the answers that came are used all the same */
		log_begin(c, &l, "monitor_error");
		log_str(&l, "target", t.name);
		log_str(&l, "detail", err);
		log_end(c, &l);
	}
	for (i = 0; i < n; i++)
	{
		/* "" = the ledger did not mention it; the same word = no news */
		if (entries[i].status[0] == '\0' ||
			strcmp(entries[i].status, PQgetvalue(pending, from + i, 2)) == 0)
			continue;
		rows[r->n] = from + i;
		words[from + i] = strdup(entries[i].status);
		reports_add(r, PQgetvalue(pending, from + i, 0), PQgetvalue(pending, from + i, 1),
					PQgetvalue(pending, from + i, 3), entries[i].status);
	}
	target_free(&t);
	free(entries);
}

/*
 * client_monitor: one round of the DLT monitor over the pending or valid
 * batches of our services (the 1,000 oldest submissions: more than the
 * default 100, so that one round covers a large fleet), one target at a time, and one report for all the
 * changes it learnt. A target with neither status_url nor status_function
 * has no ledger to ask: its pending batches are reported committed (fire
 * and forget, as the background worker does). A target with only a
 * status_function is left to the workers.
 */
static void
client_monitor(Client *c)
{
	const char *params[1] = {c->instance_id};
	PGresult   *res;
	char		sqlstate[6];
	char		msg[512];
	ClientReports r;
	int		   *rows;
	char	  **words;
	int			nrows;
	int			from;
	int			i;

	if (client_query(c, "SELECT p.service_id, p.batch_id, p.status, p.epoch,"
					 "       t.target, t.status_url"
					 "  FROM gridha.pending_batches($1, 1000) p"
					 "  JOIN gridha.service_claims c ON c.service_id = p.service_id"
					 "  JOIN gridha.targets t ON t.target = c.target"
					 " WHERE t.status_url IS NOT NULL OR t.status_function IS NULL"
					 " ORDER BY t.target, p.submitted_at", 1, params,
					 &res, sqlstate, msg, sizeof(msg)) != QUERY_OK)
	{
		if (c->conn)
			log_refusal(c, "error", "pending_batches", NULL, sqlstate, msg);
		return;
	}
	nrows = PQntuples(res);
	memset(&r, 0, sizeof(r));
	rows = calloc(nrows + 1, sizeof(int));
	words = calloc(nrows + 1, sizeof(char *));
	if (rows == NULL || words == NULL)
		note("out of memory");
	else
	{
		for (from = 0; from < nrows;)
		{
			int			to = from + 1;

			while (to < nrows && strcmp(PQgetvalue(res, to, 4), PQgetvalue(res, from, 4)) == 0)
				to++;
			client_monitor_target(c, res, from, to, &r, rows, words);
			from = to;
		}
		client_send_statuses(c, &r, res, rows, words);
	}
	for (i = 0; words && i < nrows; i++)
		free(words[i]);
	free(words);
	free(rows);
	reports_free(&r);
	PQclear(res);
}

/* ----------------------------------------------------------------------
 * Options and main
 * ----------------------------------------------------------------------
 */

static void
usage(FILE *out)
{
	fprintf(out,
			"gridha-client: a gridha submitter instance; posts batches to each\n"
			"service's target and reports what the ledger said.\n"
			"\n"
			"Usage: gridha-client [OPTION]...\n"
			"\n"
			"  --dsn CONNINFO           libpq connection string (GRIDHA_DSN;\n"
			"                           default: the PG* environment)\n"
			"  --instance-id UUID       run as this instance (GRIDHA_INSTANCE_ID;\n"
			"                           default: a new one from gridha.register_instance)\n"
			"  --label TEXT             label of a new instance (GRIDHA_LABEL)\n"
			"  --idle-sleep-ms N        sleep when there is nothing to submit (500)\n"
			"  --monitor-interval-ms N  poll the ledger for pending batches this often (1000)\n"
			"  --submit-timeout-ms N    HTTP timeout of a POST or status request (15000)\n"
			"  --verify                 call gridha.verify_batch before each POST\n"
			"  --max-runtime-s N        stop by itself after N seconds (0: never)\n"
			"  --log FILE               append a JSON line per hand-out, submission,\n"
			"                           report and refusal (GRIDHA_LOG)\n"
			"  --help                   this text\n"
			"\n"
			"Numeric options can also come from GRIDHA_IDLE_SLEEP_MS,\n"
			"GRIDHA_MONITOR_INTERVAL_MS, GRIDHA_SUBMIT_TIMEOUT_MS, GRIDHA_MAX_RUNTIME_S,\n"
			"and --verify from GRIDHA_VERIFY=1; flags win over the environment.\n"
			"\n"
			"SIGTERM or SIGINT: finish the batch in hand, release the claims, exit 0.\n");
}

/* parse_long: a non-negative number option; exits with usage on junk. */
static long
parse_long(const char *name, const char *text)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(text, &end, 10);
	if (errno != 0 || end == text || *end != '\0' || v < 0)
	{
		fprintf(stderr, "gridha-client: %s must be a non-negative integer, not \"%s\"\n",
				name, text);
		exit(2);
	}
	return v;
}

/* env_long: a numeric setting from the environment, or dflt. */
static long
env_long(const char *name, long dflt)
{
	const char *v = getenv(name);

	return v && v[0] ? parse_long(name, v) : dflt;
}

/* looks_like_uuid: 8-4-4-4-12 hex digits. */
static int
looks_like_uuid(const char *s)
{
	int			i;

	for (i = 0; i < 36; i++)
	{
		char		ch = s[i];

		if (i == 8 || i == 13 || i == 18 || i == 23)
		{
			if (ch != '-')
				return 0;
		}
		else if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
				   (ch >= 'A' && ch <= 'F')))
			return 0;
	}
	return s[36] == '\0';
}

/*
 * parse_options: environment first, then flags ("--name value" or
 * "--name=value").
 */
static void
parse_options(int argc, char **argv, ClientOptions *o)
{
	const char *v;
	int			i;

	o->dsn = getenv("GRIDHA_DSN") ? getenv("GRIDHA_DSN") : "";
	o->instance_id = getenv("GRIDHA_INSTANCE_ID");
	o->label = getenv("GRIDHA_LABEL");
	o->idle_sleep_ms = env_long("GRIDHA_IDLE_SLEEP_MS", 500);
	o->monitor_interval_ms = env_long("GRIDHA_MONITOR_INTERVAL_MS", 1000);
	o->submit_timeout_ms = env_long("GRIDHA_SUBMIT_TIMEOUT_MS", 15000);
	o->verify = (v = getenv("GRIDHA_VERIFY")) != NULL && strcmp(v, "1") == 0;
	o->max_runtime_s = env_long("GRIDHA_MAX_RUNTIME_S", 0);
	o->log_path = getenv("GRIDHA_LOG");

	for (i = 1; i < argc; i++)
	{
		char		name[64];
		const char *arg = argv[i];
		const char *eq = strchr(arg, '=');
		const char *value = NULL;

		if (strncmp(arg, "--", 2) != 0)
		{
			fprintf(stderr, "gridha-client: unexpected argument \"%s\" (see --help)\n", arg);
			exit(2);
		}
		snprintf(name, sizeof(name), "%.*s", (int) (eq ? eq - arg : (long) strlen(arg)), arg);
		if (strcmp(name, "--help") == 0)
		{
			usage(stdout);
			exit(0);
		}
		if (strcmp(name, "--verify") == 0)
		{
			o->verify = 1;
			continue;
		}
		if (eq)
			value = eq + 1;
		else if (i + 1 < argc)
			value = argv[++i];
		else
		{
			fprintf(stderr, "gridha-client: %s needs a value\n", name);
			exit(2);
		}
		if (strcmp(name, "--dsn") == 0)
			o->dsn = value;
		else if (strcmp(name, "--instance-id") == 0)
			o->instance_id = value;
		else if (strcmp(name, "--label") == 0)
			o->label = value;
		else if (strcmp(name, "--idle-sleep-ms") == 0)
			o->idle_sleep_ms = parse_long(name, value);
		else if (strcmp(name, "--monitor-interval-ms") == 0)
			o->monitor_interval_ms = parse_long(name, value);
		else if (strcmp(name, "--submit-timeout-ms") == 0)
			o->submit_timeout_ms = parse_long(name, value);
		else if (strcmp(name, "--max-runtime-s") == 0)
			o->max_runtime_s = parse_long(name, value);
		else if (strcmp(name, "--log") == 0)
			o->log_path = value;
		else
		{
			fprintf(stderr, "gridha-client: unknown option %s (see --help)\n", name);
			exit(2);
		}
	}
	if (o->instance_id && o->instance_id[0] == '\0')
		o->instance_id = NULL;
	if (o->instance_id && !looks_like_uuid(o->instance_id))
	{
		fprintf(stderr, "gridha-client: instance id \"%s\" is not a uuid\n", o->instance_id);
		exit(2);
	}
	if (o->submit_timeout_ms == 0)
		o->submit_timeout_ms = 15000;
	if (o->label == NULL || o->label[0] == '\0')
		o->label = "gridha-client";
}

/*
 * client_loop: hand-outs and monitor rounds until told to stop. A batch in
 * hand is always finished (submitted and reported) before the loop looks
 * at the stop flag again.
 */
static void
client_loop(Client *c)
{
	c->next_monitor_ms = now_ms();
	c->recover = 1;
	while (!client_stopping(c))
	{
		Batch		b;
		int			got;

		if (c->conn == NULL && client_connect(c, 0) != 0)
			break;
		if (c->recover)
			client_recover(c);
		if (now_ms() >= c->next_monitor_ms)
		{
			client_monitor(c);
			c->next_monitor_ms = now_ms() + c->opt.monitor_interval_ms;
			continue;
		}
		got = client_next_batch(c, &b);
		if (got == 1)
		{
			client_handle_batch(c, &b);
			batch_free(&b);
		}
		else if (got == 0 || c->conn != NULL)
		{
			/* nothing to do, or an error that asking again at once won't fix */
			double		wait = c->next_monitor_ms - now_ms();

			client_sleep(c, wait < c->opt.idle_sleep_ms ? (long) wait : c->opt.idle_sleep_ms);
		}
	}
}

int
main(int argc, char **argv)
{
	Client		c;
	struct sigaction sa;
	LogLine		l;

	memset(&c, 0, sizeof(c));
	c.log_fd = -1;
	c.backoff_ms = 100;
	parse_options(argc, argv, &c.opt);
	c.started_ms = now_ms();

	/* no SA_RESTART: a signal cuts an idle sleep short */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handle_stop_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (c.opt.log_path)
	{
		c.log_fd = open(c.opt.log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (c.log_fd < 0)
		{
			fprintf(stderr, "gridha-client: cannot open %s: %s\n", c.opt.log_path,
					strerror(errno));
			return 1;
		}
	}
	if (gridha_http_global_init() != 0 || (c.http = gridha_http_create()) == NULL)
	{
		fprintf(stderr, "gridha-client: cannot initialise libcurl\n");
		return 1;
	}

	if (client_connect(&c, 0) == 0 && client_register(&c) == 0)
	{
		note("instance %s started", c.instance_id);
		log_begin(&c, &l, "start");
		log_str(&l, "label", c.opt.label);
		log_int(&l, "pid", (long) getpid());
		log_int(&l, "verify", c.opt.verify);
		log_end(&c, &l);

		client_loop(&c);
		client_release(&c);
	}
	client_stopping(&c);
	note("stopping (%s)", c.stop_reason ? c.stop_reason : "error");
	log_begin(&c, &l, "stop");
	log_str(&l, "reason", c.stop_reason ? c.stop_reason : "error");
	log_end(&c, &l);

	if (c.conn)
		PQfinish(c.conn);
	gridha_http_destroy(c.http);
	if (c.log_fd >= 0)
		close(c.log_fd);
	/*
	 * 0 when it stopped because it was told to (a signal, --max-runtime-s:
	 * the loop ends only so); 1 when it could not start, with or without an
	 * instance id of its own (a refused registration or declaration).
	 */
	return c.stop_reason ? 0 : 1;
}
