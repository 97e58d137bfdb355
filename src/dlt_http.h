/*-------------------------------------------------------------------------
 *
 * dlt_http.h
 *		HTTP submission to a DLT ledger: POST a batch, GET batch statuses.
 *
 * Shared by the in-server background worker and the reference external
 * client (client/gridha-client), so it is plain C99 on top of libcurl and
 * uses nothing of PostgreSQL: no palloc, no elog, no longjmp, no exit.
 * Every failure comes back as a return value with a one-line message in a
 * buffer the caller supplies.
 *
 * Words used here:
 *   template   a target's submit_url or status_url, with placeholders
 *              {service_id} and {batch_id} (submit) or {batch_ids} (status)
 *   outcome    what a POST means for the batch: accepted, delayed (ask
 *              again later) or rejected (final)
 *   dialect    the shape of a status body: Sawtooth
 *              {"data":[{"id":..,"status":"COMMITTED"}]} or Splinter
 *              [{"id":..,"status":{"statusType":"Committed"}}]
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_DLT_HTTP_H
#define GRIDHA_DLT_HTTP_H

#include <stddef.h>

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

typedef enum GridhaUrlKind
{
	GRIDHA_URL_SUBMIT,
	GRIDHA_URL_STATUS
} GridhaUrlKind;

/*
 * 0 when tmpl is an acceptable URL template: http:// or https://, a host,
 * no spaces or control characters, placeholders only {service_id} and
 * {batch_id} for SUBMIT, only {batch_ids} for STATUS (which must contain
 * it), no unknown {...}. Otherwise -1 and a one-line reason in err.
 */
extern int	gridha_http_check_url(const char *tmpl, GridhaUrlKind kind,
								  char *err, size_t errlen);

/*
 * The URL for a request: tmpl checked as above, then its placeholders
 * replaced by the URL-encoded values (RFC 3986 unreserved characters kept,
 * everything else %XX). For SUBMIT, service_id and batch_id are used; for
 * STATUS, the n_ids ids in batch_ids, each encoded, joined by commas.
 * Returns a malloc'd string the caller frees, or NULL with a reason in err.
 */
extern char *gridha_http_expand_url(const char *tmpl, GridhaUrlKind kind,
									const char *service_id, const char *batch_id,
									const char *const *batch_ids, int n_ids,
									char *err, size_t errlen);

typedef enum GridhaSubmitOutcome
{
	GRIDHA_SUBMIT_ACCEPTED,
	GRIDHA_SUBMIT_DELAYED,
	GRIDHA_SUBMIT_REJECTED
} GridhaSubmitOutcome;

/* "accepted", "delayed" or "rejected": the words report_submission takes. */
extern const char *gridha_http_outcome_name(GridhaSubmitOutcome outcome);

/*
 * POST payload to the template with {service_id}/{batch_id} filled in,
 * with headers X-Gridha-Service-Id, X-Gridha-Batch-Id, X-Gridha-Epoch,
 * X-Gridha-Attempt and Content-Type: application/octet-stream.
 *
 * 2xx -> ACCEPTED; 429, 5xx, timeout, connection error -> DELAYED; other
 * 4xx (and 1xx/3xx final codes) -> REJECTED. A template that does not pass
 * gridha_http_check_url is DELAYED too: it is the target's configuration,
 * not the batch, that is wrong. detail gets a short text: "http 202",
 * "http 503", "timeout after 15000 ms", "connect: Connection refused", ...
 */
extern GridhaSubmitOutcome gridha_http_submit(GridhaHttp *h, const char *url_template,
											  const char *service_id, const char *batch_id,
											  long long epoch, int attempt,
											  const void *payload, size_t payload_len,
											  long timeout_ms,
											  char *detail, size_t detail_len);

typedef struct GridhaStatusEntry
{
	const char *batch_id;
	char		status[16];
} GridhaStatusEntry;

/*
 * GET the status template with {batch_ids} = the ids, each URL-encoded,
 * joined by commas. Understands both dialects. On success returns 0 and
 * sets each entry's status to one of "pending", "valid", "committed",
 * "invalid", "unknown", or "" when the body does not mention that id.
 * Returns -1 (err says why; no entry changed) for a transport error, a
 * non-2xx answer, or a malformed body (not JSON, wrong shape, unknown
 * status word): a malformed body is never partly applied.
 */
extern int	gridha_http_statuses(GridhaHttp *h, const char *url_template,
								 GridhaStatusEntry *entries, int n,
								 long timeout_ms, char *err, size_t errlen);

/*
 * The body parser behind gridha_http_statuses, on its own: same result
 * rules, for a body already in memory (len bytes, need not end in NUL).
 */
extern int	gridha_http_parse_statuses(const char *body, size_t len,
									   GridhaStatusEntry *entries, int n,
									   char *err, size_t errlen);

#endif							/* GRIDHA_DLT_HTTP_H */
