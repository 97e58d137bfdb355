/*-------------------------------------------------------------------------
 *
 * dlt_http.c
 *		HTTP submission to a DLT ledger: POST a batch, GET batch statuses.
 *
 * Linked into the extension (the background worker calls it) and into the
 * reference client, so it is plain C on top of libcurl: no PostgreSQL
 * headers, no palloc, no elog, never a longjmp or an exit. Errors are
 * return values plus a one-line message in a caller buffer. URL
 * templates are src/dlt_url.c's; status bodies are read in src/dlt_json.c.
 *
 * Words used here:
 *   template   a target's submit_url or status_url with its placeholders
 *              {service_id} and {batch_id} (submit) or {batch_ids} (status)
 *   outcome    what a POST means for the batch: accepted, delayed, rejected
 *   transfer   one request on one curl easy handle, with what it owns while
 *              it runs: its header list, its response body, its result
 *   spare      a finished transfer a multi keeps, easy handle and all, for
 *              the next POST
 *   run        one gridha_http_statuses call: its ids, encoded and joined
 *              once, sent in pieces over as many GETs as it takes
 *
 * Every request is set up by http_setup, whichever path sends it: the
 * single POST, the status GET and the POSTs of the multi interface.
 *
 *-------------------------------------------------------------------------
 */
#include "dlt_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

/* Largest status body we read; a bigger one is refused, not truncated. */
#define HTTP_MAX_BODY		(8 * 1024 * 1024)
/* Used when a caller passes a timeout of 0 or less. */
#define HTTP_DEFAULT_TIMEOUT_MS 15000L
/* Finished transfers a multi keeps for reuse. */
#define HTTP_MULTI_SPARE	16

struct HttpMultiRun;

typedef struct HttpXfer
{
	CURL	   *curl;
	long long	started_ms;		/* multi: when it was added */
	struct HttpMultiRun *run;	/* multi: the status run it serves, or NULL */
	int			piece_from;		/* ... and the piece of it being asked */
	int			piece_count;
	struct curl_slist *headers; /* freed when the transfer finishes */
	char		errbuf[CURL_ERROR_SIZE];
	long		timeout_ms;
	/* the response body, when it is kept */
	int			keep_body;
	int			body_overflow;
	char	   *body;
	size_t		body_len;
	size_t		body_cap;
	/* a POST's body, read by libcurl from here (http_read_post) */
	char	   *post;
	size_t		post_len;
	size_t		post_off;
	int			post_read;		/* libcurl has read from it */
	/* multi only: the target's rejecting codes (copied; -1: none), result */
	int		   *reject_codes;
	int			n_reject_codes;
	GridhaHttpDone done;
	struct HttpXfer *next;
} HttpXfer;

struct GridhaHttp
{
	HttpXfer	x;
	char	   *proxy;			/* NULL: no proxy at all */
};

struct GridhaHttpMulti
{
	CURLM	   *multi;
	char	   *proxy;			/* NULL: no proxy at all */
	HttpXfer   *running;		/* added to the multi handle */
	HttpXfer   *done_head;		/* finished, in order, not handed back */
	HttpXfer   *done_tail;
	HttpXfer   *spare;
	int			n_spare;
	int			pending;
};

typedef struct HttpStatusRun
{
	GridhaHttp *h;
	const char *tmpl;
	const GridhaHttpTarget *target;
	GridhaStatusEntry *entries;
	char	   *ids;			/* every id URL-encoded, joined by commas */
	size_t	   *ends;			/* where each id ends in ids */
	long		timeout_ms;
	int			failed;
	char	   *err;
	size_t		errlen;
} HttpStatusRun;

/*
 * A status run of a multi (gridha_http_multi_statuses): its ids and what
 * is left to ask, as pieces (from, count) on a stack whose top is asked
 * next.
 */
typedef struct HttpMultiRun
{
	char	   *tmpl;
	char	  **headers;		/* the target's, copied */
	GridhaHttpTarget target;
	GridhaStatusEntry *entries;
	char	   *ids;			/* every id URL-encoded, joined by commas */
	size_t	   *ends;			/* where each id ends in ids */
	int		   *pieces;			/* (from, count) pairs */
	int			n_pieces;
	int			cap_pieces;
	long		timeout_ms;
	GridhaHttpDone done;		/* what is handed back at its end */
} HttpMultiRun;

static int	http_curl_ready = 0;

/*
 * gridha_http_global_init: curl_global_init, once per process.
 */
int
gridha_http_global_init(void)
{
	if (http_curl_ready)
		return 0;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return -1;
	http_curl_ready = 1;
	return 0;
}

/*
 * http_xfer_release: free everything a transfer holds; the struct itself
 * stays.
 */
static void
http_xfer_release(HttpXfer *x)
{
	if (x->curl)
		curl_easy_cleanup(x->curl);
	curl_slist_free_all(x->headers);
	free(x->body);
	free(x->reject_codes);
	free(x->post);
	x->post = NULL;
	x->curl = NULL;
	x->headers = NULL;
	x->body = NULL;
	x->reject_codes = NULL;
}

/*
 * http_copy_proxy: replace *slot by a copy of proxy (NULL or "": none);
 * -1 when out of memory, *slot unchanged.
 */
static int
http_copy_proxy(char **slot, const char *proxy)
{
	char	   *copy = NULL;

	if (proxy != NULL && proxy[0] != '\0')
	{
		copy = strdup(proxy);
		if (copy == NULL)
			return -1;
	}
	free(*slot);
	*slot = copy;
	return 0;
}

/*
 * gridha_http_create: a handle with its own curl easy handle; NULL when
 * curl could not be set up or memory ran out.
 */
GridhaHttp *
gridha_http_create(void)
{
	GridhaHttp *h;

	if (gridha_http_global_init() != 0)
		return NULL;
	h = calloc(1, sizeof(GridhaHttp));
	if (h == NULL)
		return NULL;
	h->x.curl = curl_easy_init();
	if (h->x.curl == NULL)
	{
		free(h);
		return NULL;
	}
	return h;
}

/*
 * gridha_http_destroy: close the connections and free the handle.
 */
void
gridha_http_destroy(GridhaHttp *h)
{
	if (h == NULL)
		return;
	http_xfer_release(&h->x);
	free(h->proxy);
	free(h);
}

/*
 * gridha_http_set_proxy: the proxy for later requests; NULL or "" for none.
 */
int
gridha_http_set_proxy(GridhaHttp *h, const char *proxy)
{
	return http_copy_proxy(&h->proxy, proxy);
}

/*
 * gridha_http_outcome_name: the word report_submission takes.
 */
const char *
gridha_http_outcome_name(GridhaSubmitOutcome outcome)
{
	switch (outcome)
	{
		case GRIDHA_SUBMIT_ACCEPTED:
			return "accepted";
		case GRIDHA_SUBMIT_DELAYED:
			return "delayed";
		case GRIDHA_SUBMIT_REJECTED:
			return "rejected";
	}
	return "delayed";
}

/*
 * gridha_http_load_name: a word for a load signal, for messages.
 */
const char *
gridha_http_load_name(GridhaHttpLoad load)
{
	switch (load)
	{
		case GRIDHA_LOAD_ANSWERED:
			return "answered";
		case GRIDHA_LOAD_BUSY:
			return "busy";
		case GRIDHA_LOAD_TIMEOUT:
			return "timeout";
		case GRIDHA_LOAD_REFUSED:
			return "refused";
		case GRIDHA_LOAD_DROPPED:
			return "dropped";
		case GRIDHA_LOAD_OTHER:
			return "other";
	}
	return "other";
}

/*
 * gridha_http_outcome_of: 2xx accepts, only a rejecting code of the target
 * rejects, everything else delays, no answer (0) included. A target's list
 * that is present but empty rejects nothing.
 */
GridhaSubmitOutcome
gridha_http_outcome_of(long code, const GridhaHttpTarget *target)
{
	static const int default_reject[] = {400, 422};
	const int  *codes = default_reject;
	int			n = 2;
	int			i;

	if (code >= 200 && code <= 299)
		return GRIDHA_SUBMIT_ACCEPTED;
	if (code == 0)
		return GRIDHA_SUBMIT_DELAYED;
	if (target != NULL && target->reject_codes != NULL)
	{
		codes = target->reject_codes;
		n = target->n_reject_codes;
	}
	for (i = 0; i < n; i++)
	{
		if (codes[i] == code)
			return GRIDHA_SUBMIT_REJECTED;
	}
	return GRIDHA_SUBMIT_DELAYED;
}

/* ----------------------------------------------------------------------
 * Requests
 * ----------------------------------------------------------------------
 */

/*
 * gridha_http_check_header: is line a header a target may carry? The
 * reason names the header only when its name is a clean token, and never
 * quotes its value.
 */
int
gridha_http_check_header(const char *line, char *err, size_t errlen)
{
	static const char *const reserved[] = {
		"Content-Type", "Content-Length", "Host", "Expect", "Transfer-Encoding", "X-Gridha-"
	};
	size_t		name_len;
	size_t		i;

	if (line == NULL || line[0] == '\0')
	{
		gridha_dlt_set_err(err, errlen, "header is empty");
		return -1;
	}
	name_len = strspn(line, "!#$%&'*+-.^_`|~0123456789"
					  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
	if (line[name_len] != ':')
	{
		gridha_dlt_set_err(err, errlen, "header name is not an HTTP token followed by ':' (byte %ld)",
					 (long) name_len);
		return -1;
	}
	if (name_len == 0)
	{
		gridha_dlt_set_err(err, errlen, "header has an empty name");
		return -1;
	}
	for (i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
	{
		size_t		len = strlen(reserved[i]);

		/* the names in full, X-Gridha- as a prefix */
		if ((name_len == len || (reserved[i][len - 1] == '-' && name_len > len)) &&
			gridha_dlt_equal_ci(line, reserved[i], len))
		{
			gridha_dlt_set_err(err, errlen, "header %.*s is set by gridha itself",
						 (int) (name_len > 64 ? 64 : name_len), line);
			return -1;
		}
	}
	if (strpbrk(line + name_len, "\r\n") != NULL)
	{
		gridha_dlt_set_err(err, errlen, "header %.*s has a CR or LF in its value",
					 (int) (name_len > 64 ? 64 : name_len), line);
		return -1;
	}
	return 0;
}

/*
 * http_add_header: append line to *list; 0, or -1 when out of memory (the
 * list so far is kept).
 */
static int
http_add_header(struct curl_slist **list, const char *line)
{
	struct curl_slist *grown = curl_slist_append(*list, line);

	if (grown == NULL)
		return -1;
	*list = grown;
	return 0;
}

/*
 * http_add_target_header: append a checked target header. A value that is
 * empty is sent empty ("Name;" in libcurl's words; "Name:" would only
 * remove a header libcurl sets itself).
 */
static int
http_add_target_header(struct curl_slist **list, const char *line)
{
	const char *colon = strchr(line, ':');
	char	   *empty;
	int			rc;

	if (colon[1 + strspn(colon + 1, " \t")] != '\0')
		return http_add_header(list, line);
	empty = strdup(line);
	if (empty == NULL)
		return -1;
	empty[colon - line] = ';';
	empty[colon - line + 1] = '\0';
	rc = http_add_header(list, empty);
	free(empty);
	return rc;
}

/*
 * http_finish: what a transfer owned while it ran is let go; the easy
 * handle no longer points to it.
 */
static void
http_finish(HttpXfer *x)
{
	if (x->curl)
		curl_easy_setopt(x->curl, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(x->headers);
	x->headers = NULL;
	free(x->reject_codes);
	x->reject_codes = NULL;
	x->n_reject_codes = -1;
	free(x->post);
	x->post = NULL;
}

/*
 * http_write_body: curl's write callback; keeps the body when asked to,
 * and stops the transfer when it grows past HTTP_MAX_BODY.
 */
static size_t
http_write_body(char *data, size_t size, size_t nmemb, void *arg)
{
	HttpXfer   *x = arg;
	size_t		n = size * nmemb;

	if (!x->keep_body)
		return n;
	if (x->body_len + n + 1 > HTTP_MAX_BODY)
	{
		x->body_overflow = 1;
		return 0;
	}
	if (x->body_len + n + 1 > x->body_cap)
	{
		size_t		cap = x->body_cap ? x->body_cap : 4096;
		char	   *grown;

		while (cap < x->body_len + n + 1)
			cap *= 2;
		grown = realloc(x->body, cap);
		if (grown == NULL)
			return 0;
		x->body = grown;
		x->body_cap = cap;
	}
	memcpy(x->body + x->body_len, data, n);
	x->body_len += n;
	x->body[x->body_len] = '\0';
	return n;
}

/*
 * http_setup: make x's easy handle ready for one request to url: reset it
 * (its connections survive), set what every request of ours uses, and
 * take headers (ours so far, may be NULL) with the target's appended as
 * the transfer's own header list. On failure headers are freed and err
 * says why.
 */
static int
http_setup(HttpXfer *x, const char *proxy, const char *url,
		   const GridhaHttpTarget *target, long timeout_ms, int keep_body,
		   struct curl_slist *headers, char *err, size_t errlen)
{
	CURL	   *c = x->curl;
	char		why[256];
	int			bad = 0;
	int			i;

	for (i = 0; target != NULL && i < target->n_headers; i++)
	{
		if (gridha_http_check_header(target->headers[i], why, sizeof(why)) != 0)
		{
			gridha_dlt_set_err(err, errlen, "bad header: %s", why);
			curl_slist_free_all(headers);
			return -1;
		}
		if (http_add_target_header(&headers, target->headers[i]) != 0)
		{
			gridha_dlt_set_err(err, errlen, "out of memory");
			curl_slist_free_all(headers);
			return -1;
		}
	}

	curl_easy_reset(c);
	curl_slist_free_all(x->headers);
	x->headers = headers;
	x->errbuf[0] = '\0';
	x->keep_body = keep_body;
	x->body_overflow = 0;
	x->body_len = 0;
	x->timeout_ms = timeout_ms > 0 ? timeout_ms : HTTP_DEFAULT_TIMEOUT_MS;

	/* we live inside a server process: no signals, no alarm() */
	bad |= curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_URL, url) != CURLE_OK;
	/* the path is sent as built: no dot-segment is resolved (gridha_url_escape) */
	bad |= curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_PRIVATE, (void *) x) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_ERRORBUFFER, x->errbuf) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, x->timeout_ms) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, x->timeout_ms) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L) != CURLE_OK;
	/* "" turns off the proxy environment variables too */
	bad |= curl_easy_setopt(c, CURLOPT_PROXY, proxy ? proxy : "") != CURLE_OK;
#if LIBCURL_VERSION_NUM >= 0x075500
	bad |= curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK;
#else
	bad |= curl_easy_setopt(c, CURLOPT_PROTOCOLS,
							(long) (CURLPROTO_HTTP | CURLPROTO_HTTPS)) != CURLE_OK;
#endif
	bad |= curl_easy_setopt(c, CURLOPT_USERAGENT, "gridha/1.0") != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_write_body) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_WRITEDATA, (void *) x) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_HTTPHEADER, x->headers) != CURLE_OK;
	if (bad)
	{
		http_finish(x);
		gridha_dlt_set_err(err, errlen, "curl: could not set request options");
		return -1;
	}
	return 0;
}

/*
 * http_add_escaped: append "name: value" with value URL-encoded, so that
 * no id can break a header line.
 */
static int
http_add_escaped(struct curl_slist **list, const char *name, const char *value)
{
	char	   *enc = gridha_url_escape(value);
	char	   *line;
	int			rc = -1;

	if (enc == NULL)
		return -1;
	line = malloc(strlen(name) + 2 + strlen(enc) + 1);
	if (line != NULL)
	{
		sprintf(line, "%s: %s", name, enc);
		rc = http_add_header(list, line);
		free(line);
	}
	curl_free(enc);
	return rc;
}

/*
 * http_read_post: curl's read callback for a POST's body.
 */
static size_t
http_read_post(char *buf, size_t size, size_t nitems, void *arg)
{
	HttpXfer   *x = arg;
	size_t		n = size * nitems;

	x->post_read = 1;
	if (n > x->post_len - x->post_off)
		n = x->post_len - x->post_off;
	if (n > 0)
		memcpy(buf, x->post + x->post_off, n);
	x->post_off += n;
	return n;
}

/*
 * http_seek_post: curl's seek callback for a POST's body. libcurl rewinds
 * a body only to send it again: when a kept-alive connection it reused
 * died after the request went out, it would send the POST once more on a
 * new connection, and the ledger would see one attempt twice, unknown to
 * gridha. That is refused: the transfer then fails with
 * CURLE_SEND_FAIL_REWIND, and the batch is delayed and handed out again
 * as a new attempt. A rewind before anything was read is harmless.
 */
static int
http_seek_post(void *arg, curl_off_t offset, int origin)
{
	HttpXfer   *x = arg;

	if (!x->post_read && offset == 0 && origin == SEEK_SET)
		return CURL_SEEKFUNC_OK;
	return CURL_SEEKFUNC_CANTSEEK;
}

/*
 * http_setup_post: make x ready to POST a batch (see gridha_http_submit);
 * the payload is copied. On failure -1 with the detail for a DELAYED
 * outcome.
 */
static int
http_setup_post(HttpXfer *x, const char *proxy, const char *url_template,
				const GridhaHttpTarget *target,
				const char *service_id, const char *batch_id,
				long long epoch, int attempt,
				const void *payload, size_t payload_len, long timeout_ms,
				char *detail, size_t detail_len)
{
	struct curl_slist *headers = NULL;
	char		reason[256];
	char		line[64];
	char	   *url;
	int			bad = 0;

	url = gridha_url_expand(url_template, GRIDHA_URL_SUBMIT, service_id, batch_id,
								 NULL, 0, reason, sizeof(reason));
	if (url == NULL)
	{
		gridha_dlt_set_err(detail, detail_len, "bad submit_url: %s", reason);
		return -1;
	}
	bad |= http_add_escaped(&headers, "X-Gridha-Service-Id", service_id);
	bad |= http_add_escaped(&headers, "X-Gridha-Batch-Id", batch_id);
	snprintf(line, sizeof(line), "X-Gridha-Epoch: %lld", epoch);
	bad |= http_add_header(&headers, line);
	snprintf(line, sizeof(line), "X-Gridha-Attempt: %d", attempt);
	bad |= http_add_header(&headers, line);
	bad |= http_add_header(&headers, "Content-Type: application/octet-stream");
	/* no "Expect: 100-continue" round trip for big payloads */
	bad |= http_add_header(&headers, "Expect:");
	if (bad)
	{
		curl_slist_free_all(headers);
		free(url);
		gridha_dlt_set_err(detail, detail_len, "out of memory");
		return -1;
	}
	if (http_setup(x, proxy, url, target, timeout_ms, 0, headers, detail, detail_len) != 0)
	{
		free(url);
		return -1;
	}
	free(url);
	/* the body is read from a copy of our own, so that a re-send shows */
	free(x->post);
	x->post_len = payload ? payload_len : 0;
	x->post_off = 0;
	x->post_read = 0;
	x->post = malloc(x->post_len > 0 ? x->post_len : 1);
	if (x->post == NULL)
	{
		http_finish(x);
		gridha_dlt_set_err(detail, detail_len, "out of memory");
		return -1;
	}
	if (x->post_len > 0)
		memcpy(x->post, payload, x->post_len);
	if (curl_easy_setopt(x->curl, CURLOPT_POST, 1L) != CURLE_OK ||
		curl_easy_setopt(x->curl, CURLOPT_POSTFIELDSIZE_LARGE,
						 (curl_off_t) x->post_len) != CURLE_OK ||
		curl_easy_setopt(x->curl, CURLOPT_READFUNCTION, http_read_post) != CURLE_OK ||
		curl_easy_setopt(x->curl, CURLOPT_READDATA, (void *) x) != CURLE_OK ||
		curl_easy_setopt(x->curl, CURLOPT_SEEKFUNCTION, http_seek_post) != CURLE_OK ||
		curl_easy_setopt(x->curl, CURLOPT_SEEKDATA, (void *) x) != CURLE_OK)
	{
		http_finish(x);
		gridha_dlt_set_err(detail, detail_len, "curl: could not set the payload");
		return -1;
	}
	return 0;
}

/*
 * http_result: the answer's code of a finished transfer (0 without one;
 * a transfer stopped because the body was too large did get an answer, and
 * has its code), and a detail: "http N", or a few words on what went wrong
 * on the way.
 */
static long
http_result(HttpXfer *x, CURLcode rc, char *detail, size_t detail_len)
{
	long		code = 0;
	long		os_errno = 0;

	if (rc == CURLE_OK)
	{
		curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &code);
		gridha_dlt_set_err(detail, detail_len, "http %ld", code);
		return code;
	}
	switch (rc)
	{
		case CURLE_OPERATION_TIMEDOUT:
			gridha_dlt_set_err(detail, detail_len, "timeout after %ld ms", x->timeout_ms);
			break;
		case CURLE_COULDNT_CONNECT:
			curl_easy_getinfo(x->curl, CURLINFO_OS_ERRNO, &os_errno);
			if (os_errno != 0)
				gridha_dlt_set_err(detail, detail_len, "connect: %s", strerror((int) os_errno));
			else
				gridha_dlt_set_err(detail, detail_len, "connect: %s",
							 x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc));
			break;
		case CURLE_COULDNT_RESOLVE_HOST:
			gridha_dlt_set_err(detail, detail_len, "resolve: %s",
						 x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc));
			break;
		case CURLE_SEND_FAIL_REWIND:
			gridha_dlt_set_err(detail, detail_len,
						 "connection closed after the request was sent: not sent again");
			break;
		default:
			if (x->body_overflow)
			{
				/* an answer came: its code is known, its body was refused */
				curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &code);
				gridha_dlt_set_err(detail, detail_len, "http %ld with a body larger than %d bytes",
							 code, HTTP_MAX_BODY);
			}
			else
				gridha_dlt_set_err(detail, detail_len, "curl: %s",
							 x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc));
			break;
	}
	return code;
}

/*
 * gridha_http_submit: POST one batch; the outcome decides what happens to
 * it (see dlt_http.h).
 */
GridhaSubmitOutcome
gridha_http_submit(GridhaHttp *h, const char *url_template,
				   const GridhaHttpTarget *target,
				   const char *service_id, const char *batch_id,
				   long long epoch, int attempt,
				   const void *payload, size_t payload_len,
				   long timeout_ms, long *http_code,
				   char *detail, size_t detail_len)
{
	GridhaSubmitOutcome outcome = GRIDHA_SUBMIT_DELAYED;
	long		code = 0;

	if (http_setup_post(&h->x, h->proxy, url_template, target, service_id, batch_id,
						epoch, attempt, payload, payload_len, timeout_ms,
						detail, detail_len) == 0)
	{
		code = http_result(&h->x, curl_easy_perform(h->x.curl), detail, detail_len);
		http_finish(&h->x);
		outcome = gridha_http_outcome_of(code, target);
	}
	if (http_code != NULL)
		*http_code = code;
	return outcome;
}

/* ----------------------------------------------------------------------
 * Many POSTs at once
 * ----------------------------------------------------------------------
 */

/* http_now_ms: a monotonic clock in milliseconds. */
static long long
http_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * http_load_of: what a finished request says about the ledger's load.
 */
static GridhaHttpLoad
http_load_of(CURLcode rc, long code)
{
	if (rc == CURLE_OK)
		return (code == 429 || code == 503) ? GRIDHA_LOAD_BUSY : GRIDHA_LOAD_ANSWERED;
	switch (rc)
	{
		case CURLE_OPERATION_TIMEDOUT:
			return GRIDHA_LOAD_TIMEOUT;
		case CURLE_COULDNT_CONNECT:
			return GRIDHA_LOAD_REFUSED;
		case CURLE_GOT_NOTHING:
		case CURLE_SEND_FAIL_REWIND:
		case CURLE_RECV_ERROR:
		case CURLE_SEND_ERROR:
		case CURLE_PARTIAL_FILE:
			return GRIDHA_LOAD_DROPPED;
		default:
			return GRIDHA_LOAD_OTHER;
	}
}

/*
 * http_note_finish: the load signal, the time and the new connections of
 * a finished transfer, into its done (a status run keeps the worst signal
 * and the slowest GET of its pieces).
 */
static void
http_note_finish(HttpXfer *x, GridhaHttpDone *d, CURLcode rc, long code)
{
	GridhaHttpLoad load = http_load_of(rc, code);
	long		elapsed = (long) (http_now_ms() - x->started_ms);
	long		connects = 0;

	if (x->curl != NULL)
		curl_easy_getinfo(x->curl, CURLINFO_NUM_CONNECTS, &connects);
	d->connects += connects;
	if (elapsed > d->elapsed_ms)
		d->elapsed_ms = elapsed;
	if (d->load == GRIDHA_LOAD_ANSWERED || d->load == GRIDHA_LOAD_OTHER)
		d->load = (d->load == GRIDHA_LOAD_ANSWERED || load != GRIDHA_LOAD_ANSWERED) ? load : d->load;
#if LIBCURL_VERSION_NUM >= 0x074200
	/* libcurl reads both forms, seconds and an HTTP-date, as seconds */
	if (x->curl != NULL && rc == CURLE_OK && (code == 429 || code == 503))
	{
		curl_off_t	wait = 0;

		if (curl_easy_getinfo(x->curl, CURLINFO_RETRY_AFTER, &wait) == CURLE_OK && wait > 0)
		{
			long		ms = wait > 86400 ? 86400000L : (long) wait * 1000;

			if (ms > d->retry_after_ms)
				d->retry_after_ms = ms;
		}
	}
#endif
}

static void http_run_free(HttpMultiRun *run);
static void http_run_piece_done(GridhaHttpMulti *m, HttpXfer *x, CURLcode rc);

/*
 * gridha_http_multi_create: an empty multi; NULL when curl could not be
 * set up or memory ran out.
 */
GridhaHttpMulti *
gridha_http_multi_create(void)
{
	GridhaHttpMulti *m;

	if (gridha_http_global_init() != 0)
		return NULL;
	m = calloc(1, sizeof(GridhaHttpMulti));
	if (m == NULL)
		return NULL;
	m->multi = curl_multi_init();
	if (m->multi == NULL)
	{
		free(m);
		return NULL;
	}
	return m;
}

/*
 * http_free_list: release and free every transfer of a list.
 */
static void
http_free_list(HttpXfer *x)
{
	while (x != NULL)
	{
		HttpXfer   *next = x->next;

		http_xfer_release(x);
		free(x);
		x = next;
	}
}

/*
 * gridha_http_multi_destroy: abort what is in flight, free everything.
 */
void
gridha_http_multi_destroy(GridhaHttpMulti *m)
{
	HttpXfer   *x;

	if (m == NULL)
		return;
	for (x = m->running; x != NULL; x = x->next)
	{
		curl_multi_remove_handle(m->multi, x->curl);
		http_run_free(x->run);
		x->run = NULL;
	}
	http_free_list(m->running);
	http_free_list(m->done_head);
	http_free_list(m->spare);
	curl_multi_cleanup(m->multi);
	free(m->proxy);
	free(m);
}

/*
 * gridha_http_multi_set_proxy: the proxy for later POSTs of the multi;
 * NULL or "" for none.
 */
int
gridha_http_multi_set_proxy(GridhaHttpMulti *m, const char *proxy)
{
	return http_copy_proxy(&m->proxy, proxy);
}

/* http_multi_queue_done: x finished; it waits to be handed back. */
static void
http_multi_queue_done(GridhaHttpMulti *m, HttpXfer *x)
{
	x->next = NULL;
	if (m->done_tail)
		m->done_tail->next = x;
	else
		m->done_head = x;
	m->done_tail = x;
}

/*
 * http_multi_take_xfer: a spare transfer, or a new one (its curl handle
 * may be NULL when curl could not make one); NULL when out of memory.
 */
static HttpXfer *
http_multi_take_xfer(GridhaHttpMulti *m)
{
	HttpXfer   *x = m->spare;

	if (x != NULL)
	{
		m->spare = x->next;
		m->n_spare--;
		return x;
	}
	if ((x = calloc(1, sizeof(HttpXfer))) == NULL)
		return NULL;
	x->curl = curl_easy_init();
	x->n_reject_codes = -1;
	return x;
}

/*
 * gridha_http_multi_submit: start one POST; one that cannot start is
 * finished at once, DELAYED. -1 only when not even that could be recorded
 * (out of memory).
 */
int
gridha_http_multi_submit(GridhaHttpMulti *m, void *tag,
						 const char *url_template,
						 const GridhaHttpTarget *target,
						 const char *service_id, const char *batch_id,
						 long long epoch, int attempt,
						 const void *payload, size_t payload_len,
						 long timeout_ms)
{
	HttpXfer   *x = http_multi_take_xfer(m);
	GridhaHttpDone *d;

	if (x == NULL)
		return -1;
	d = &x->done;
	memset(d, 0, sizeof(*d));
	d->tag = tag;
	d->outcome = GRIDHA_SUBMIT_DELAYED;
	d->load = GRIDHA_LOAD_ANSWERED;
	x->run = NULL;
	x->started_ms = http_now_ms();
	m->pending++;

	if (x->curl == NULL)
	{
		gridha_dlt_set_err(d->detail, sizeof(d->detail), "curl: could not create a handle");
		http_multi_queue_done(m, x);
		return 0;
	}
	if (http_setup_post(x, m->proxy, url_template, target, service_id, batch_id,
						epoch, attempt, payload, payload_len, timeout_ms,
						d->detail, sizeof(d->detail)) != 0)
	{
		http_multi_queue_done(m, x);
		return 0;
	}
	/* the target need not outlive this call: keep its rejecting codes */
	if (target != NULL && target->reject_codes != NULL &&
		(x->reject_codes = malloc(sizeof(int) * (size_t) (target->n_reject_codes + 1))) != NULL)
	{
		x->n_reject_codes = target->n_reject_codes;
		memcpy(x->reject_codes, target->reject_codes, sizeof(int) * (size_t) x->n_reject_codes);
	}
	if (target != NULL && target->reject_codes != NULL && x->reject_codes == NULL)
		gridha_dlt_set_err(d->detail, sizeof(d->detail), "out of memory");
	else if (curl_multi_add_handle(m->multi, x->curl) != CURLM_OK)
		gridha_dlt_set_err(d->detail, sizeof(d->detail), "curl: could not start the transfer");
	else
	{
		x->next = m->running;
		m->running = x;
		return 0;
	}
	http_finish(x);
	http_multi_queue_done(m, x);
	return 0;
}

/*
 * http_multi_collect: move every transfer libcurl reports finished from
 * the running list to the done queue, with its result.
 */
static void
http_multi_collect(GridhaHttpMulti *m)
{
	CURLMsg    *msg;
	int			left;

	while ((msg = curl_multi_info_read(m->multi, &left)) != NULL)
	{
		HttpXfer   *x;
		HttpXfer  **link;
		GridhaHttpTarget target;
		CURLcode	rc = msg->data.result;
		char	   *priv = NULL;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
		x = (HttpXfer *) priv;
		curl_multi_remove_handle(m->multi, x->curl);
		for (link = &m->running; *link != x; link = &(*link)->next)
			;
		*link = x->next;

		if (x->run != NULL)
		{
			http_run_piece_done(m, x, rc);
			continue;
		}
		memset(&target, 0, sizeof(target));
		target.reject_codes = x->n_reject_codes >= 0 ? x->reject_codes : NULL;
		target.n_reject_codes = x->n_reject_codes;
		x->done.http_code = http_result(x, rc, x->done.detail, sizeof(x->done.detail));
		x->done.outcome = gridha_http_outcome_of(x->done.http_code, &target);
		http_note_finish(x, &x->done, rc, x->done.http_code);
		http_finish(x);
		http_multi_queue_done(m, x);
	}
}

/*
 * gridha_http_multi_perform: move the transfers on, waiting no longer than
 * wait_ms in all for one to finish, and hand back up to max_done finished
 * ones, in the order they finished.
 */
int
gridha_http_multi_perform(GridhaHttpMulti *m, long wait_ms,
						  GridhaHttpDone *done, int max_done)
{
	long long	deadline = http_now_ms() + (wait_ms > 0 ? wait_ms : 0);
	int			running = 0;
	int			n = 0;

	curl_multi_perform(m->multi, &running);
	http_multi_collect(m);
	while (m->done_head == NULL && m->running != NULL)
	{
		long long	left = deadline - http_now_ms();

		if (left <= 0)
			break;
		curl_multi_poll(m->multi, NULL, 0, (int) (left < 60000 ? left : 60000), NULL);
		curl_multi_perform(m->multi, &running);
		http_multi_collect(m);
	}

	while (n < max_done && m->done_head != NULL)
	{
		HttpXfer   *x = m->done_head;

		m->done_head = x->next;
		if (m->done_head == NULL)
			m->done_tail = NULL;
		done[n++] = x->done;
		m->pending--;
		if (m->n_spare < HTTP_MULTI_SPARE && x->curl != NULL)
		{
			x->next = m->spare;
			m->spare = x;
			m->n_spare++;
		}
		else
		{
			http_xfer_release(x);
			free(x);
		}
	}
	return n;
}

/*
 * gridha_http_multi_pending: POSTs started and not handed back yet.
 */
int
gridha_http_multi_pending(const GridhaHttpMulti *m)
{
	return m->pending;
}

/*
 * gridha_http_multi_set_connections: libcurl's bounds on the multi's
 * connections; 0 leaves one as it is.
 */
void
gridha_http_multi_set_connections(GridhaHttpMulti *m, long max_host, long max_total)
{
	if (max_host > 0)
		curl_multi_setopt(m->multi, CURLMOPT_MAX_HOST_CONNECTIONS, max_host);
	if (max_total > 0)
	{
		curl_multi_setopt(m->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, max_total);
		curl_multi_setopt(m->multi, CURLMOPT_MAXCONNECTS, max_total);
	}
}

/* http_run_free: a status run and everything it owns. */
static void
http_run_free(HttpMultiRun *run)
{
	int			i;

	if (run == NULL)
		return;
	for (i = 0; run->headers != NULL && i < run->target.n_headers; i++)
		free(run->headers[i]);
	free(run->headers);
	free(run->tmpl);
	free(run->ids);
	free(run->ends);
	free(run->pieces);
	free(run);
}

/* http_run_push: one more piece to ask, asked next; -1 when out of memory. */
static int
http_run_push(HttpMultiRun *run, int from, int count)
{
	if (run->n_pieces + 2 > run->cap_pieces)
	{
		int			cap = run->cap_pieces ? 2 * run->cap_pieces : 16;
		int		   *grown = realloc(run->pieces, sizeof(int) * (size_t) cap);

		if (grown == NULL)
			return -1;
		run->pieces = grown;
		run->cap_pieces = cap;
	}
	run->pieces[run->n_pieces++] = from;
	run->pieces[run->n_pieces++] = count;
	return 0;
}

/* http_run_fail: a GET of the run failed; the first failure is kept. */
static void
http_run_fail(HttpMultiRun *run, const char *why)
{
	if (!run->done.failed)
		gridha_dlt_set_err(run->done.detail, sizeof(run->done.detail), "%s", why);
	run->done.failed = 1;
}

/*
 * http_run_next: starts the next piece of x's run on x; when none is left
 * the run is over: its result waits to be handed back, and x with it.
 */
static void
http_run_next(GridhaHttpMulti *m, HttpXfer *x)
{
	HttpMultiRun *run = x->run;
	char		why[512];

	while (run->n_pieces > 0)
	{
		int			count = run->pieces[--run->n_pieces];
		int			from = run->pieces[--run->n_pieces];
		char	   *ids = run->ids + (from > 0 ? run->ends[from - 1] + 1 : 0);
		char	   *end = run->ids + run->ends[from + count - 1];
		char		saved = *end;
		char	   *url;

		/* these ids are a piece of the joined ones: end it there for a moment */
		*end = '\0';
		url = gridha_url_build(run->tmpl, GRIDHA_URL_STATUS, NULL, NULL, ids, why, sizeof(why));
		*end = saved;
		if (url != NULL && x->curl == NULL)
			gridha_dlt_set_err(why, sizeof(why), "curl: could not create a handle");
		if (url == NULL || x->curl == NULL ||
			http_setup(x, m->proxy, url, &run->target, run->timeout_ms, 1, NULL,
					   why, sizeof(why)) != 0)
		{
			free(url);
			http_run_fail(run, why);
			continue;
		}
		free(url);
		x->piece_from = from;
		x->piece_count = count;
		x->started_ms = http_now_ms();
		if (curl_easy_setopt(x->curl, CURLOPT_HTTPGET, 1L) != CURLE_OK ||
			curl_multi_add_handle(m->multi, x->curl) != CURLM_OK)
		{
			http_finish(x);
			http_run_fail(run, "curl: could not start the transfer");
			continue;
		}
		x->next = m->running;
		m->running = x;
		return;
	}
	x->done = run->done;
	x->run = NULL;
	http_run_free(run);
	http_multi_queue_done(m, x);
}

/*
 * http_run_piece_done: a GET of a status run finished: as http_status_get,
 * its entries take the answer, or its halves are asked for on 414 or 431,
 * or the run records the failure; then the run goes on.
 */
static void
http_run_piece_done(GridhaHttpMulti *m, HttpXfer *x, CURLcode rc)
{
	HttpMultiRun *run = x->run;
	int			from = x->piece_from;
	int			count = x->piece_count;
	char		why[512];
	long		code = http_result(x, rc, why, sizeof(why));

	http_note_finish(x, &run->done, rc, code);
	run->done.http_code = code;
	if (rc == CURLE_OK && (code == 414 || code == 431) && count > 1)
	{
		if (http_run_push(run, from + count / 2, count - count / 2) != 0 ||
			http_run_push(run, from, count / 2) != 0)
			http_run_fail(run, "out of memory");
	}
	else if (rc != CURLE_OK || code < 200 || code > 299 ||
			 gridha_json_parse_statuses(x->body ? x->body : "", x->body_len,
										run->entries + from, count,
										why, sizeof(why)) != 0)
		http_run_fail(run, why);
	http_finish(x);
	http_run_next(m, x);
}

/*
 * gridha_http_multi_statuses: start a status run (see dlt_http.h). A run
 * that cannot start (a bad template, a bad header) finishes at once,
 * failed, and is handed back by the next perform.
 */
int
gridha_http_multi_statuses(GridhaHttpMulti *m, void *tag, const char *url_template,
						   const GridhaHttpTarget *target,
						   GridhaStatusEntry *entries, int n,
						   size_t max_url_len, long timeout_ms)
{
	HttpMultiRun *run = calloc(1, sizeof(HttpMultiRun));
	HttpXfer   *x;
	const char **ids = NULL;
	char		why[256];
	size_t		uses = 0;
	size_t		base;
	const char *p;
	int			from;
	int			to;
	int			i;

	if (run == NULL)
		return -1;
	if ((x = http_multi_take_xfer(m)) == NULL)
	{
		free(run);
		return -1;
	}
	run->done.tag = tag;
	run->done.is_status = 1;
	run->done.outcome = GRIDHA_SUBMIT_DELAYED;
	run->done.load = GRIDHA_LOAD_ANSWERED;
	run->entries = entries;
	run->timeout_ms = timeout_ms;
	x->run = run;
	m->pending++;

	if (n <= 0)
	{
		http_run_next(m, x);
		return 0;
	}
	if (gridha_url_check(url_template, GRIDHA_URL_STATUS, why, sizeof(why)) != 0)
	{
		http_run_fail(run, why);
		http_run_next(m, x);
		return 0;
	}
	run->tmpl = strdup(url_template);
	run->ends = malloc(sizeof(size_t) * (size_t) n);
	ids = malloc(sizeof(char *) * (size_t) n);
	if (target != NULL && target->n_headers > 0)
		run->headers = calloc((size_t) target->n_headers, sizeof(char *));
	if (target != NULL)
		run->target.n_headers = target->n_headers;
	for (i = 0; run->headers != NULL && i < run->target.n_headers; i++)
		if ((run->headers[i] = strdup(target->headers[i])) == NULL)
			break;
	if (run->tmpl == NULL || run->ends == NULL || ids == NULL ||
		(run->target.n_headers > 0 && (run->headers == NULL || i < run->target.n_headers)))
	{
		free(ids);
		http_run_fail(run, "out of memory");
		http_run_next(m, x);
		return 0;
	}
	run->target.headers = (const char *const *) run->headers;
	for (from = 0; from < n; from++)
		ids[from] = entries[from].batch_id;
	run->ids = gridha_url_escape_join(ids, n, run->ends, why, sizeof(why));
	free(ids);
	if (run->ids == NULL)
	{
		http_run_fail(run, why);
		http_run_next(m, x);
		return 0;
	}

	/* the pieces, as gridha_http_statuses cuts them, then put last-first */
	for (p = strstr(url_template, "{batch_ids}"); p; p = strstr(p + 1, "{batch_ids}"))
		uses++;
	base = strlen(url_template) - uses * strlen("{batch_ids}");
	for (from = 0; from < n; from = to)
	{
		size_t		start = from > 0 ? run->ends[from - 1] + 1 : 0;

		to = from + 1;
		while (to < n && !gridha_url_id_alone(entries[from].batch_id) &&
			   !gridha_url_id_alone(entries[to].batch_id) &&
			   (max_url_len == 0 || base + uses * (run->ends[to] - start) <= max_url_len))
			to++;
		if (http_run_push(run, from, to - from) != 0)
		{
			run->n_pieces = 0;
			http_run_fail(run, "out of memory");
			break;
		}
	}
	for (i = 0; i < run->n_pieces / 4; i++)
	{
		int			j = run->n_pieces / 2 - 1 - i;
		int			f = run->pieces[2 * i];
		int			c = run->pieces[2 * i + 1];

		run->pieces[2 * i] = run->pieces[2 * j];
		run->pieces[2 * i + 1] = run->pieces[2 * j + 1];
		run->pieces[2 * j] = f;
		run->pieces[2 * j + 1] = c;
	}
	http_run_next(m, x);
	return 0;
}

/* ----------------------------------------------------------------------
 * Status GETs
 * ----------------------------------------------------------------------
 */

/*
 * http_status_get: one GET for the count entries from 'from' on; on a
 * well-formed 2xx answer they take the statuses it gives, on 414 or 431
 * the two halves are asked for on their own, on any other failure they
 * stay as they were and the run records it.
 */
static void
http_status_get(HttpStatusRun *run, int from, int count)
{
	HttpXfer   *x = &run->h->x;
	char	   *ids = run->ids + (from > 0 ? run->ends[from - 1] + 1 : 0);
	char	   *end = run->ids + run->ends[from + count - 1];
	char		saved = *end;
	char		why[512];
	char	   *url;
	CURLcode	rc = CURLE_OK;
	long		code = 0;

	/* these ids are a piece of the joined ones: end it there for a moment */
	*end = '\0';
	url = gridha_url_build(run->tmpl, GRIDHA_URL_STATUS, NULL, NULL, ids, why, sizeof(why));
	*end = saved;
	if (url == NULL ||
		http_setup(x, run->h->proxy, url, run->target, run->timeout_ms, 1, NULL,
				   why, sizeof(why)) != 0)
		rc = CURLE_FAILED_INIT;
	else
	{
		curl_easy_setopt(x->curl, CURLOPT_HTTPGET, 1L);
		rc = curl_easy_perform(x->curl);
		code = http_result(x, rc, why, sizeof(why));
		http_finish(x);
	}
	free(url);
	if (rc == CURLE_OK && (code == 414 || code == 431) && count > 1)
	{
		http_status_get(run, from, count / 2);
		http_status_get(run, from + count / 2, count - count / 2);
	}
	else if (rc != CURLE_OK || code < 200 || code > 299 ||
			 gridha_json_parse_statuses(x->body ? x->body : "", x->body_len,
										run->entries + from, count,
										why, sizeof(why)) != 0)
	{
		if (!run->failed)
			gridha_dlt_set_err(run->err, run->errlen, "%s", why);
		run->failed = 1;
	}
}

/*
 * gridha_http_statuses: ask the ledger about some batches, in as many GETs
 * as max_url_len asks for (see dlt_http.h).
 */
int
gridha_http_statuses(GridhaHttp *h, const char *url_template,
					 const GridhaHttpTarget *target,
					 GridhaStatusEntry *entries, int n,
					 size_t max_url_len, long timeout_ms,
					 char *err, size_t errlen)
{
	HttpStatusRun run;
	const char **ids;
	size_t		uses = 0;
	size_t		base;
	const char *p;
	int			from;
	int			to;

	if (n <= 0)
		return 0;
	if (gridha_url_check(url_template, GRIDHA_URL_STATUS, err, errlen) != 0)
		return -1;
	memset(&run, 0, sizeof(run));
	ids = malloc(sizeof(char *) * (size_t) n);
	run.ends = malloc(sizeof(size_t) * (size_t) n);
	if (ids == NULL || run.ends == NULL)
		gridha_dlt_set_err(err, errlen, "out of memory");
	else
	{
		for (from = 0; from < n; from++)
			ids[from] = entries[from].batch_id;
		run.ids = gridha_url_escape_join(ids, n, run.ends, err, errlen);
	}
	free(ids);
	if (run.ids == NULL)
	{
		free(run.ends);
		return -1;
	}

	/* a URL's length: the checked template without its {batch_ids}, plus ids at each */
	for (p = strstr(url_template, "{batch_ids}"); p; p = strstr(p + 1, "{batch_ids}"))
		uses++;
	base = strlen(url_template) - uses * strlen("{batch_ids}");
	run.h = h;
	run.tmpl = url_template;
	run.target = target;
	run.entries = entries;
	run.timeout_ms = timeout_ms;
	run.err = err;
	run.errlen = errlen;
	for (from = 0; from < n; from = to)
	{
		size_t		start = from > 0 ? run.ends[from - 1] + 1 : 0;

		to = from + 1;
		while (to < n && !gridha_url_id_alone(entries[from].batch_id) &&
			   !gridha_url_id_alone(entries[to].batch_id) &&
			   (max_url_len == 0 || base + uses * (run.ends[to] - start) <= max_url_len))
			to++;
		http_status_get(&run, from, to - from);
	}
	free(run.ids);
	free(run.ends);
	return run.failed ? -1 : 0;
}
