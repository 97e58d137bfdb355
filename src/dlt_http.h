/*-------------------------------------------------------------------------
 *
 * dlt_http.h
 *		HTTP submission to a DLT ledger: POST a batch, GET batch statuses.
 *
 * Shared by the in-server background worker and the reference external
 * client (client/gridha-client), so it is plain C on top of libcurl: no
 * palloc, no elog, no longjmp, no exit. Every failure comes back as a
 * return value with a one-line message in a buffer the caller supplies.
 * URL templates are src/dlt_url.c's (libcurl's URL API); status bodies
 * are read by src/dlt_json.c (PostgreSQL's own JSON parser).
 *
 * Words used here:
 *   template   a target's submit_url or status_url, with placeholders
 *              {service_id} and {batch_id} (submit) or {batch_ids} (status)
 *   outcome    what a POST means for the batch: accepted, delayed (ask
 *              again later) or rejected (final)
 *   rejecting  the HTTP codes with which a ledger refuses a batch for good;
 *              400 and 422 unless the target says otherwise. Only they end
 *              a batch: every other non-2xx answer delays it
 *   headers    a target's own request headers ("Name: value" lines, e.g.
 *              credentials), sent with every POST and GET to it and never
 *              written into any message this file produces
 *   dialect    the shape of a status body: Sawtooth
 *              {"data":[{"id":..,"status":"COMMITTED"}]} or Splinter
 *              [{"id":..,"status":{"statusType":"Committed"}}]
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_DLT_HTTP_H
#define GRIDHA_DLT_HTTP_H

#include <stddef.h>

#include "dlt_json.h"
#include "dlt_url.h"

/* One per process; reuses one curl easy handle, so connections stay open. */
typedef struct GridhaHttp GridhaHttp;

/* curl_global_init, once per process; 0 when it worked. */
extern int	gridha_http_global_init(void);

/* A new handle, NULL on failure (out of memory, curl not initialised). */
extern GridhaHttp *gridha_http_create(void);
extern void gridha_http_destroy(GridhaHttp *h);

/*
 * Use this proxy (a libcurl proxy string) for every later request; NULL or
 * "" means no proxy. Without this call no proxy is used, whatever the
 * environment says. Returns 0, or -1 when out of memory.
 */
extern int	gridha_http_set_proxy(GridhaHttp *h, const char *proxy);

/*
 * 0 when line is a request header a target may carry: "Name: value" with
 * Name an HTTP token (RFC 9110: letters, digits and !#$%&'*+-.^_`|~), not
 * one gridha sets itself (X-Gridha-*, Content-Type, Content-Length, Host,
 * Expect, Transfer-Encoding), and a value without CR, LF or NUL. Otherwise
 * -1 and a reason in err that names the header but never quotes its value.
 */
extern int	gridha_http_check_header(const char *line, char *err, size_t errlen);

/* What a target adds to every request that goes to it */
typedef struct GridhaHttpTarget
{
	const char *const *headers; /* "Name: value" lines (checked as above) */
	int			n_headers;
	const int  *reject_codes;	/* NULL: 400 and 422 */
	int			n_reject_codes;
} GridhaHttpTarget;

typedef enum GridhaSubmitOutcome
{
	GRIDHA_SUBMIT_ACCEPTED,
	GRIDHA_SUBMIT_DELAYED,
	GRIDHA_SUBMIT_REJECTED
} GridhaSubmitOutcome;

/* "accepted", "delayed" or "rejected": the words report_submission takes. */
extern const char *gridha_http_outcome_name(GridhaSubmitOutcome outcome);

/*
 * The outcome of an HTTP answer code: 2xx -> ACCEPTED; a rejecting code of
 * the target (target NULL or no list: 400 and 422) -> REJECTED; anything
 * else (1xx, 3xx, other 4xx, 5xx, 0 = no answer) -> DELAYED.
 */
extern GridhaSubmitOutcome gridha_http_outcome_of(long code,
												  const GridhaHttpTarget *target);

/*
 * A POST leaves the worker once per call: when a kept-alive connection
 * dies after the request was sent, libcurl would send it again on a new
 * one; that re-send is refused instead (the POST is DELAYED with the
 * detail "connection closed after the request was sent: not sent again",
 * load DROPPED), so a ledger sees each attempt at most once.
 *
 * POST payload to the template with {service_id}/{batch_id} filled in,
 * with headers X-Gridha-Service-Id, X-Gridha-Batch-Id (both URL-encoded),
 * X-Gridha-Epoch, X-Gridha-Attempt, Content-Type: application/octet-stream,
 * and the target's own headers. Redirects are not followed.
 *
 * The outcome is gridha_http_outcome_of(the answer's code); a timeout, a
 * connection error or a template that does not pass gridha_url_check
 * is DELAYED (it is the target's configuration or the network, not the
 * batch, that is wrong). *http_code (may be NULL) gets the answer's code,
 * 0 without one. detail gets a short text: "http 202", "http 503",
 * "timeout after 15000 ms", "connect: Connection refused", "bad
 * submit_url: ...": never a header's value.
 */
extern GridhaSubmitOutcome gridha_http_submit(GridhaHttp *h, const char *url_template,
											  const GridhaHttpTarget *target,
											  const char *service_id, const char *batch_id,
											  long long epoch, int attempt,
											  const void *payload, size_t payload_len,
											  long timeout_ms, long *http_code,
											  char *detail, size_t detail_len);

/*
 * Many POSTs in flight at once (libcurl's multi interface), for a worker
 * that holds many services: gridha_http_multi_submit starts one (the
 * payload is copied), gridha_http_multi_perform moves every transfer on,
 * waits at most wait_ms for one to progress, and hands back those that
 * finished. Each POST is exactly what gridha_http_submit sends, and its
 * outcome follows the same rules. Connections are reused across POSTs.
 */
typedef struct GridhaHttpMulti GridhaHttpMulti;

/*
 * What a finished request says about the ledger's load, for a caller that
 * adapts how many requests it keeps in flight: ANSWERED (any answer but
 * 429 and 503), BUSY (429 or 503), TIMEOUT, REFUSED (the connection
 * attempt failed), DROPPED (the connection broke or closed without an
 * answer) and OTHER (a failure that says nothing of the load: a bad URL,
 * a name that does not resolve, out of memory).
 */
typedef enum GridhaHttpLoad
{
	GRIDHA_LOAD_ANSWERED,
	GRIDHA_LOAD_BUSY,
	GRIDHA_LOAD_TIMEOUT,
	GRIDHA_LOAD_REFUSED,
	GRIDHA_LOAD_DROPPED,
	GRIDHA_LOAD_OTHER
} GridhaHttpLoad;

/* "answered", "busy", "timeout", "refused", "dropped" or "other" */
extern const char *gridha_http_load_name(GridhaHttpLoad load);

typedef struct GridhaHttpDone
{
	void	   *tag;			/* as given to gridha_http_multi_submit or
								 * gridha_http_multi_statuses */
	GridhaSubmitOutcome outcome;	/* POST only */
	long		http_code;		/* 0: no answer */
	char		detail[256];	/* POST: as gridha_http_submit's; status
								 * run: its first failure, "" when none */
	int			is_status;		/* a status run, not a POST */
	int			failed;			/* status run: some GET of it failed */
	GridhaHttpLoad load;		/* status run: the worst of its GETs */
	long		elapsed_ms;		/* start to finish (a status run: its
								 * slowest GET) */
	long		connects;		/* new connections it opened */
	long		retry_after_ms; /* a 429 or 503 answer's Retry-After (seconds
								 * or HTTP-date form), in ms; 0: none (a
								 * status run: the longest of its GETs) */
} GridhaHttpDone;

/* NULL on failure (out of memory, curl not initialised). */
extern GridhaHttpMulti *gridha_http_multi_create(void);

/* Aborts every transfer still in flight and frees everything. */
extern void gridha_http_multi_destroy(GridhaHttpMulti *m);

/*
 * As gridha_http_set_proxy, for every later POST of this multi: without
 * this call no proxy is used. Returns 0, or -1 when out of memory.
 */
extern int	gridha_http_multi_set_proxy(GridhaHttpMulti *m, const char *proxy);

/*
 * Starts a POST; tag comes back with its result. Returns 0. A POST that
 * cannot start (a bad template, out of memory) is not an error here: it
 * finishes at once, DELAYED, and is handed back by the next perform; only
 * when there is no memory even to record that is -1 returned.
 */
extern int	gridha_http_multi_submit(GridhaHttpMulti *m, void *tag,
									 const char *url_template,
									 const GridhaHttpTarget *target,
									 const char *service_id, const char *batch_id,
									 long long epoch, int attempt,
									 const void *payload, size_t payload_len,
									 long timeout_ms);

/*
 * Moves the transfers on and waits up to wait_ms (0: not at all) for
 * progress; copies up to max_done finished ones into done and returns how
 * many. Finished transfers not handed back yet wait for the next call.
 */
extern int	gridha_http_multi_perform(GridhaHttpMulti *m, long wait_ms,
									  GridhaHttpDone *done, int max_done);

/* POSTs and status runs started and not handed back yet. */
extern int	gridha_http_multi_pending(const GridhaHttpMulti *m);

/*
 * How many connections the multi may keep open: at most max_host to one
 * host, max_total in all (libcurl queues the transfers beyond them), and
 * as many idle ones in its cache for reuse. 0 leaves a bound as it is.
 */
extern void gridha_http_multi_set_connections(GridhaHttpMulti *m, long max_host,
											  long max_total);

/*
 * A status run in the multi: what gridha_http_statuses does (the same
 * GETs, the same splitting by max_url_len and on 414 or 431, the same
 * rules for entries), but without blocking: the GETs of one run go one
 * after the other on one transfer, moved on by gridha_http_multi_perform,
 * which hands the run back (is_status set, tag, failed and the first
 * failure in detail) once its last GET finished. entries must stay where
 * they are until then; the template and the target are copied. Returns 0,
 * or -1 when out of memory (nothing started).
 */
extern int	gridha_http_multi_statuses(GridhaHttpMulti *m, void *tag,
									   const char *url_template,
									   const GridhaHttpTarget *target,
									   GridhaStatusEntry *entries, int n,
									   size_t max_url_len, long timeout_ms);

/*
 * GET the status template with {batch_ids} = the ids, each URL-encoded,
 * joined by commas, with the target's own headers. Understands both
 * dialects.
 *
 * The ids are split over as many GETs as it takes for no URL to be longer
 * than max_url_len bytes (0: no limit; an id too long to fit goes alone);
 * an id that contains a comma is always asked about alone, so that a
 * ledger that URL-decodes the parameter before splitting it on commas
 * cannot mix it up with the ids beside it,
 * and a GET answered 414 (URI Too Long) or 431 (Request Header Fields Too
 * Large) is asked again in two halves, down to one id.
 *
 * Every entry of a GET that got a well-formed 2xx answer gets one of
 * "pending", "valid", "committed", "invalid", "unknown", or "" when the
 * answer does not mention its id. The entries of a GET that failed (a
 * transport error, a non-2xx answer, a malformed body: not JSON, wrong
 * shape, unknown status word) are left exactly as they were: a body is
 * never partly applied. Returns 0 when every GET succeeded, otherwise -1
 * with the first failure in err.
 */
extern int	gridha_http_statuses(GridhaHttp *h, const char *url_template,
								 const GridhaHttpTarget *target,
								 GridhaStatusEntry *entries, int n,
								 size_t max_url_len, long timeout_ms,
								 char *err, size_t errlen);

#endif							/* GRIDHA_DLT_HTTP_H */
