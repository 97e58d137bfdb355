/*-------------------------------------------------------------------------
 *
 * dlt_http.c
 *		HTTP submission to a DLT ledger: POST a batch, GET batch statuses.
 *
 * Linked into the extension (the background worker calls it) and into the
 * reference client, so it is plain C99 on top of libcurl: no PostgreSQL
 * headers, no palloc, no elog, never a longjmp or an exit. Errors are
 * return values plus a one-line message in a caller buffer.
 *
 * Words used here:
 *   template   a target's submit_url or status_url with its placeholders
 *              {service_id} and {batch_id} (submit) or {batch_ids} (status)
 *   outcome    what a POST means for the batch: accepted, delayed, rejected
 *   dialect    the shape of a status body, Sawtooth or Splinter (see
 *              dlt_http.h)
 *   cursor     the position of the small JSON reader in a status body
 *
 * The JSON reader is deliberately tiny and strict: it knows objects, arrays,
 * strings (all escapes, \uXXXX with surrogate pairs), numbers and the three
 * literals, and refuses anything else. A status body is parsed completely
 * into scratch space before any entry is touched, so a malformed body is
 * never partly applied.
 *
 *-------------------------------------------------------------------------
 */
#include "dlt_http.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

/* Longest URL template or expanded URL we accept. */
#define HTTP_MAX_URL		65536
/* Largest status body we read; a bigger one is refused, not truncated. */
#define HTTP_MAX_BODY		(8 * 1024 * 1024)
/* Used when a caller passes a timeout of 0 or less. */
#define HTTP_DEFAULT_TIMEOUT_MS 15000L
/* Nesting depth the JSON reader follows before it gives up. */
#define JSON_MAX_DEPTH		64

#ifdef __GNUC__
#define HTTP_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define HTTP_PRINTF(f, a)
#endif

struct GridhaHttp
{
	CURL	   *curl;
	char	   *proxy;			/* NULL: no proxy at all */
	char		errbuf[CURL_ERROR_SIZE];
	/* the response body of the current request, when it is kept */
	int			keep_body;
	int			body_overflow;
	char	   *body;
	size_t		body_len;
	size_t		body_cap;
};

typedef enum HttpDialect
{
	HTTP_DIALECT_SAWTOOTH,
	HTTP_DIALECT_SPLINTER
} HttpDialect;

typedef struct JsonCursor
{
	const char *start;
	const char *p;
	const char *end;
	int			depth;
	char	   *err;
	size_t		errlen;
} JsonCursor;

/* The five status words report_status takes, in the case we hand out. */
static const char *const http_status_words[] = {
	"pending", "valid", "committed", "invalid", "unknown"
};

static int	http_curl_ready = 0;

/*
 * http_set_err: format a message into a caller's buffer, which may be NULL
 * or empty.
 */
static void HTTP_PRINTF(3, 4)
http_set_err(char *err, size_t errlen, const char *fmt,...)
{
	va_list		ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* http_lower: ASCII lower case, whatever the locale. */
static int
http_lower(int c)
{
	return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

/* http_prefix_ci: does s start with prefix, ignoring ASCII case? */
static int
http_prefix_ci(const char *s, const char *prefix)
{
	while (*prefix)
	{
		if (http_lower((unsigned char) *s) != http_lower((unsigned char) *prefix))
			return 0;
		s++;
		prefix++;
	}
	return 1;
}

/* http_unreserved: an RFC 3986 unreserved character, kept as is. */
static int
http_unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		(c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
}

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
	h->curl = curl_easy_init();
	if (h->curl == NULL)
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
	if (h->curl)
		curl_easy_cleanup(h->curl);
	free(h->proxy);
	free(h->body);
	free(h);
}

/*
 * gridha_http_set_proxy: the proxy for later requests; NULL or "" for none.
 */
int
gridha_http_set_proxy(GridhaHttp *h, const char *proxy)
{
	char	   *copy = NULL;

	if (proxy != NULL && proxy[0] != '\0')
	{
		copy = malloc(strlen(proxy) + 1);
		if (copy == NULL)
			return -1;
		strcpy(copy, proxy);
	}
	free(h->proxy);
	h->proxy = copy;
	return 0;
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

/* ----------------------------------------------------------------------
 * URL templates
 * ----------------------------------------------------------------------
 */

/*
 * http_placeholder_allowed: is {name} (len bytes) a placeholder of kind?
 */
static int
http_placeholder_allowed(const char *name, size_t len, GridhaUrlKind kind)
{
	if (kind == GRIDHA_URL_SUBMIT)
		return (len == 10 && memcmp(name, "service_id", 10) == 0) ||
			(len == 8 && memcmp(name, "batch_id", 8) == 0);
	return len == 9 && memcmp(name, "batch_ids", 9) == 0;
}

/*
 * http_check_authority: the part between "//" and the path must name a
 * host (optionally user info before '@' and a port after ':').
 */
static int
http_check_authority(const char *a, size_t len, char *err, size_t errlen)
{
	const char *hp = a;
	const char *end = a + len;
	const char *port = NULL;
	const char *q;

	for (q = a; q < end; q++)
	{
		if (*q == '{' || *q == '}')
		{
			http_set_err(err, errlen, "placeholders are not allowed in the host part of the URL");
			return -1;
		}
		if (*q == '@')
			hp = q + 1;
	}
	if (hp < end && *hp == '[')
	{
		q = memchr(hp, ']', end - hp);
		if (q == NULL || q == hp + 1)
		{
			http_set_err(err, errlen, "URL has a malformed IPv6 host");
			return -1;
		}
		q++;
		if (q < end)
		{
			if (*q != ':')
			{
				http_set_err(err, errlen, "URL has a malformed IPv6 host");
				return -1;
			}
			port = q + 1;
		}
	}
	else
	{
		q = memchr(hp, ':', end - hp);
		if ((q ? q : end) == hp)
		{
			http_set_err(err, errlen, "URL has no host");
			return -1;
		}
		if (q)
			port = q + 1;
	}
	if (port)
	{
		long		value = 0;

		if (port == end || end - port > 5)
		{
			http_set_err(err, errlen, "URL has a malformed port");
			return -1;
		}
		for (q = port; q < end; q++)
		{
			if (*q < '0' || *q > '9')
			{
				http_set_err(err, errlen, "URL has a malformed port");
				return -1;
			}
			value = value * 10 + (*q - '0');
		}
		if (value < 1 || value > 65535)
		{
			http_set_err(err, errlen, "URL port is out of range");
			return -1;
		}
	}
	return 0;
}

/*
 * gridha_http_check_url: is tmpl a URL template we can use for kind?
 */
int
gridha_http_check_url(const char *tmpl, GridhaUrlKind kind, char *err, size_t errlen)
{
	const char *p;
	const char *auth;
	size_t		auth_len;
	int			has_ids = 0;

	if (tmpl == NULL || tmpl[0] == '\0')
	{
		http_set_err(err, errlen, "URL is empty");
		return -1;
	}
	if (strlen(tmpl) > HTTP_MAX_URL)
	{
		http_set_err(err, errlen, "URL is longer than %d bytes", HTTP_MAX_URL);
		return -1;
	}
	for (p = tmpl; *p; p++)
	{
		unsigned char c = (unsigned char) *p;

		if (c <= 0x20 || c >= 0x7f)
		{
			http_set_err(err, errlen,
						 "URL contains a space, control or non-ASCII character at byte %ld",
						 (long) (p - tmpl));
			return -1;
		}
	}
	if (http_prefix_ci(tmpl, "http://"))
		auth = tmpl + 7;
	else if (http_prefix_ci(tmpl, "https://"))
		auth = tmpl + 8;
	else
	{
		http_set_err(err, errlen, "URL must start with http:// or https://");
		return -1;
	}
	auth_len = strcspn(auth, "/?#");
	if (http_check_authority(auth, auth_len, err, errlen) != 0)
		return -1;

	/* The placeholders, in the path, query or fragment. */
	for (p = auth + auth_len; *p; p++)
	{
		const char *close;

		if (*p == '}')
		{
			http_set_err(err, errlen, "URL has a '}' without a '{' at byte %ld",
						 (long) (p - tmpl));
			return -1;
		}
		if (*p != '{')
			continue;
		close = strchr(p + 1, '}');
		if (close == NULL || memchr(p + 1, '{', close - p - 1) != NULL)
		{
			http_set_err(err, errlen, "URL has an unterminated placeholder at byte %ld",
						 (long) (p - tmpl));
			return -1;
		}
		if (!http_placeholder_allowed(p + 1, close - p - 1, kind))
		{
			http_set_err(err, errlen, "unknown placeholder %.*s in %s URL (allowed: %s)",
						 (int) (close - p + 1 > 40 ? 40 : close - p + 1), p,
						 kind == GRIDHA_URL_SUBMIT ? "submit" : "status",
						 kind == GRIDHA_URL_SUBMIT ? "{service_id}, {batch_id}" : "{batch_ids}");
			return -1;
		}
		if (kind == GRIDHA_URL_STATUS)
			has_ids = 1;
		p = close;
	}
	if (kind == GRIDHA_URL_STATUS && !has_ids)
	{
		http_set_err(err, errlen, "status URL must contain {batch_ids}");
		return -1;
	}
	return 0;
}

/*
 * http_encoded_len: the length of s once URL-encoded.
 */
static size_t
http_encoded_len(const char *s)
{
	size_t		n = 0;

	for (; *s; s++)
		n += http_unreserved((unsigned char) *s) ? 1 : 3;
	return n;
}

/*
 * http_encode: append s URL-encoded at out; returns the end.
 */
static char *
http_encode(char *out, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";

	for (; *s; s++)
	{
		unsigned char c = (unsigned char) *s;

		if (http_unreserved(c))
			*out++ = (char) c;
		else
		{
			*out++ = '%';
			*out++ = hex[c >> 4];
			*out++ = hex[c & 15];
		}
	}
	return out;
}

/*
 * gridha_http_expand_url: the checked template with its placeholders
 * replaced; malloc'd, or NULL with a reason in err.
 */
char *
gridha_http_expand_url(const char *tmpl, GridhaUrlKind kind,
					   const char *service_id, const char *batch_id,
					   const char *const *batch_ids, int n_ids,
					   char *err, size_t errlen)
{
	size_t		ids_len = 0;
	size_t		need;
	int			uses = 0;
	const char *p;
	char	   *url;
	char	   *out;
	int			i;

	if (gridha_http_check_url(tmpl, kind, err, errlen) != 0)
		return NULL;
	if (kind == GRIDHA_URL_SUBMIT)
	{
		if (service_id == NULL || batch_id == NULL)
		{
			http_set_err(err, errlen, "service id and batch id are required");
			return NULL;
		}
		ids_len = http_encoded_len(service_id) + http_encoded_len(batch_id);
	}
	else
	{
		if (n_ids < 1 || batch_ids == NULL)
		{
			http_set_err(err, errlen, "no batch ids to ask for");
			return NULL;
		}
		for (i = 0; i < n_ids; i++)
		{
			if (batch_ids[i] == NULL)
			{
				http_set_err(err, errlen, "batch id %d is missing", i);
				return NULL;
			}
			ids_len += http_encoded_len(batch_ids[i]) + 1;
		}
	}
	for (p = strchr(tmpl, '{'); p; p = strchr(p + 1, '{'))
		uses++;
	/* every placeholder gets at most all the encoded values */
	need = strlen(tmpl) + (size_t) uses * ids_len + 1;
	if (need > 16 * HTTP_MAX_URL)
	{
		http_set_err(err, errlen, "URL would be longer than %d bytes", 16 * HTTP_MAX_URL);
		return NULL;
	}
	url = malloc(need);
	if (url == NULL)
	{
		http_set_err(err, errlen, "out of memory");
		return NULL;
	}
	out = url;
	for (p = tmpl; *p;)
	{
		if (*p != '{')
		{
			*out++ = *p++;
			continue;
		}
		/* gridha_http_check_url vouched for a known, closed placeholder */
		if (strncmp(p, "{service_id}", 12) == 0)
		{
			out = http_encode(out, service_id);
			p += 12;
		}
		else if (strncmp(p, "{batch_id}", 10) == 0)
		{
			out = http_encode(out, batch_id);
			p += 10;
		}
		else
		{
			for (i = 0; i < n_ids; i++)
			{
				if (i > 0)
					*out++ = ',';
				out = http_encode(out, batch_ids[i]);
			}
			p += 11;
		}
	}
	*out = '\0';
	return url;
}

/* ----------------------------------------------------------------------
 * Requests
 * ----------------------------------------------------------------------
 */

/*
 * http_write_body: curl's write callback; keeps the body when asked to,
 * and stops the transfer when it grows past HTTP_MAX_BODY.
 */
static size_t
http_write_body(char *data, size_t size, size_t nmemb, void *arg)
{
	GridhaHttp *h = arg;
	size_t		n = size * nmemb;

	if (!h->keep_body)
		return n;
	if (h->body_len + n + 1 > HTTP_MAX_BODY)
	{
		h->body_overflow = 1;
		return 0;
	}
	if (h->body_len + n + 1 > h->body_cap)
	{
		size_t		cap = h->body_cap ? h->body_cap : 4096;
		char	   *grown;

		while (cap < h->body_len + n + 1)
			cap *= 2;
		grown = realloc(h->body, cap);
		if (grown == NULL)
			return 0;
		h->body = grown;
		h->body_cap = cap;
	}
	memcpy(h->body + h->body_len, data, n);
	h->body_len += n;
	h->body[h->body_len] = '\0';
	return n;
}

/*
 * http_prepare: reset the easy handle (its connection cache survives) and
 * set what every request of ours uses.
 */
static int
http_prepare(GridhaHttp *h, const char *url, long timeout_ms, int keep_body)
{
	CURL	   *c = h->curl;
	int			bad = 0;

	curl_easy_reset(c);
	h->errbuf[0] = '\0';
	h->keep_body = keep_body;
	h->body_overflow = 0;
	h->body_len = 0;
	if (timeout_ms <= 0)
		timeout_ms = HTTP_DEFAULT_TIMEOUT_MS;

	/* we live inside a server process: no signals, no alarm() */
	bad |= curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_URL, url) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->errbuf) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L) != CURLE_OK;
	/* "" turns off the proxy environment variables too */
	bad |= curl_easy_setopt(c, CURLOPT_PROXY, h->proxy ? h->proxy : "") != CURLE_OK;
#if LIBCURL_VERSION_NUM >= 0x075500
	bad |= curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK;
#else
	bad |= curl_easy_setopt(c, CURLOPT_PROTOCOLS,
							(long) (CURLPROTO_HTTP | CURLPROTO_HTTPS)) != CURLE_OK;
#endif
	bad |= curl_easy_setopt(c, CURLOPT_USERAGENT, "gridha/1.0") != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_write_body) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_WRITEDATA, (void *) h) != CURLE_OK;
	return bad ? -1 : 0;
}

/*
 * http_transport_error: describe a failed transfer in a few words.
 */
static void
http_transport_error(GridhaHttp *h, CURLcode rc, long timeout_ms,
					 char *detail, size_t detail_len)
{
	long		os_errno = 0;

	if (timeout_ms <= 0)
		timeout_ms = HTTP_DEFAULT_TIMEOUT_MS;
	switch (rc)
	{
		case CURLE_OPERATION_TIMEDOUT:
			http_set_err(detail, detail_len, "timeout after %ld ms", timeout_ms);
			break;
		case CURLE_COULDNT_CONNECT:
			curl_easy_getinfo(h->curl, CURLINFO_OS_ERRNO, &os_errno);
			if (os_errno != 0)
				http_set_err(detail, detail_len, "connect: %s", strerror((int) os_errno));
			else
				http_set_err(detail, detail_len, "connect: %s",
							 h->errbuf[0] ? h->errbuf : curl_easy_strerror(rc));
			break;
		case CURLE_COULDNT_RESOLVE_HOST:
			http_set_err(detail, detail_len, "resolve: %s",
						 h->errbuf[0] ? h->errbuf : curl_easy_strerror(rc));
			break;
		default:
			if (h->body_overflow)
				http_set_err(detail, detail_len, "response body larger than %d bytes",
							 HTTP_MAX_BODY);
			else
				http_set_err(detail, detail_len, "curl: %s",
							 h->errbuf[0] ? h->errbuf : curl_easy_strerror(rc));
			break;
	}
}

/*
 * http_header_value: append "name: encoded value" to a header list; ids are
 * URL-encoded like in the URL, so no id can break a header line.
 */
static struct curl_slist *
http_header_value(struct curl_slist *list, const char *name, const char *value)
{
	size_t		len = strlen(name) + 2 + http_encoded_len(value) + 1;
	char	   *line = malloc(len);
	char	   *out;
	struct curl_slist *grown;

	if (line == NULL)
		return NULL;
	out = line + sprintf(line, "%s: ", name);
	*http_encode(out, value) = '\0';
	grown = curl_slist_append(list, line);
	free(line);
	return grown;
}

/*
 * gridha_http_submit: POST one batch; the outcome decides what happens to
 * it (see dlt_http.h).
 */
GridhaSubmitOutcome
gridha_http_submit(GridhaHttp *h, const char *url_template,
				   const char *service_id, const char *batch_id,
				   long long epoch, int attempt,
				   const void *payload, size_t payload_len,
				   long timeout_ms, char *detail, size_t detail_len)
{
	char		reason[256];
	char		line[64];
	char	   *url;
	struct curl_slist *headers = NULL;
	struct curl_slist *next;
	CURLcode	rc;
	long		code = 0;
	int			bad = 0;

	url = gridha_http_expand_url(url_template, GRIDHA_URL_SUBMIT, service_id, batch_id,
								 NULL, 0, reason, sizeof(reason));
	if (url == NULL)
	{
		http_set_err(detail, detail_len, "bad submit_url: %s", reason);
		return GRIDHA_SUBMIT_DELAYED;
	}
	if (http_prepare(h, url, timeout_ms, 0) != 0)
	{
		free(url);
		http_set_err(detail, detail_len, "curl: could not set request options");
		return GRIDHA_SUBMIT_DELAYED;
	}

	/* each append returns NULL when out of memory; the list so far is kept */
	next = http_header_value(headers, "X-Gridha-Service-Id", service_id);
	bad |= next == NULL;
	headers = next ? next : headers;
	next = http_header_value(headers, "X-Gridha-Batch-Id", batch_id);
	bad |= next == NULL;
	headers = next ? next : headers;
	snprintf(line, sizeof(line), "X-Gridha-Epoch: %lld", epoch);
	next = curl_slist_append(headers, line);
	bad |= next == NULL;
	headers = next ? next : headers;
	snprintf(line, sizeof(line), "X-Gridha-Attempt: %d", attempt);
	next = curl_slist_append(headers, line);
	bad |= next == NULL;
	headers = next ? next : headers;
	next = curl_slist_append(headers, "Content-Type: application/octet-stream");
	bad |= next == NULL;
	headers = next ? next : headers;
	/* no "Expect: 100-continue" round trip for big payloads */
	next = curl_slist_append(headers, "Expect:");
	bad |= next == NULL;
	headers = next ? next : headers;
	if (bad)
	{
		curl_slist_free_all(headers);
		free(url);
		http_set_err(detail, detail_len, "out of memory");
		return GRIDHA_SUBMIT_DELAYED;
	}

	curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(h->curl, CURLOPT_POST, 1L);
	curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, payload ? (const char *) payload : "");
	curl_easy_setopt(h->curl, CURLOPT_POSTFIELDSIZE_LARGE,
					 (curl_off_t) (payload ? payload_len : 0));

	rc = curl_easy_perform(h->curl);
	if (rc == CURLE_OK)
		curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &code);
	/* the handle must not keep pointers to what we free now */
	curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, NULL);
	curl_slist_free_all(headers);
	free(url);

	if (rc != CURLE_OK)
	{
		http_transport_error(h, rc, timeout_ms, detail, detail_len);
		return GRIDHA_SUBMIT_DELAYED;
	}
	http_set_err(detail, detail_len, "http %ld", code);
	if (code >= 200 && code <= 299)
		return GRIDHA_SUBMIT_ACCEPTED;
	if (code == 429 || (code >= 500 && code <= 599) || code == 0)
		return GRIDHA_SUBMIT_DELAYED;
	return GRIDHA_SUBMIT_REJECTED;
}

/*
 * gridha_http_statuses: ask the ledger about some batches (see dlt_http.h).
 */
int
gridha_http_statuses(GridhaHttp *h, const char *url_template,
					 GridhaStatusEntry *entries, int n,
					 long timeout_ms, char *err, size_t errlen)
{
	const char **ids;
	char	   *url;
	CURLcode	rc;
	long		code = 0;
	int			i;

	if (n <= 0)
		return 0;
	ids = malloc(sizeof(char *) * (size_t) n);
	if (ids == NULL)
	{
		http_set_err(err, errlen, "out of memory");
		return -1;
	}
	for (i = 0; i < n; i++)
		ids[i] = entries[i].batch_id;
	url = gridha_http_expand_url(url_template, GRIDHA_URL_STATUS, NULL, NULL,
								 ids, n, err, errlen);
	free(ids);
	if (url == NULL)
		return -1;
	if (http_prepare(h, url, timeout_ms, 1) != 0)
	{
		free(url);
		http_set_err(err, errlen, "curl: could not set request options");
		return -1;
	}
	curl_easy_setopt(h->curl, CURLOPT_HTTPGET, 1L);
	rc = curl_easy_perform(h->curl);
	free(url);
	if (rc != CURLE_OK)
	{
		http_transport_error(h, rc, timeout_ms, err, errlen);
		return -1;
	}
	curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &code);
	if (code < 200 || code > 299)
	{
		http_set_err(err, errlen, "http %ld", code);
		return -1;
	}
	return gridha_http_parse_statuses(h->body ? h->body : "", h->body_len,
									  entries, n, err, errlen);
}

/* ----------------------------------------------------------------------
 * The JSON reader
 * ----------------------------------------------------------------------
 */

/*
 * json_fail: record where and why the body is malformed; returns -1.
 */
static int	HTTP_PRINTF(2, 3)
json_fail(JsonCursor *c, const char *fmt,...)
{
	char		why[160];
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	http_set_err(c->err, c->errlen, "malformed status body at byte %ld: %s",
				 (long) (c->p - c->start), why);
	return -1;
}

/* json_ws: skip JSON white space. */
static void
json_ws(JsonCursor *c)
{
	while (c->p < c->end &&
		   (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

/* json_at_end: only white space is left. */
static int
json_at_end(JsonCursor *c)
{
	json_ws(c);
	return c->p >= c->end;
}

/* json_peek: the next significant byte, or 0 at the end. */
static char
json_peek(JsonCursor *c)
{
	json_ws(c);
	return c->p < c->end ? *c->p : '\0';
}

/* json_hex4: the value of four hex digits at s, or -1. */
static long
json_hex4(const char *s)
{
	long		v = 0;
	int			i;

	for (i = 0; i < 4; i++)
	{
		char		ch = s[i];

		v <<= 4;
		if (ch >= '0' && ch <= '9')
			v |= ch - '0';
		else if (ch >= 'a' && ch <= 'f')
			v |= ch - 'a' + 10;
		else if (ch >= 'A' && ch <= 'F')
			v |= ch - 'A' + 10;
		else
			return -1;
	}
	return v;
}

/* json_put_utf8: append code point cp as UTF-8; returns the end. */
static char *
json_put_utf8(char *out, long cp)
{
	if (cp < 0x80)
		*out++ = (char) cp;
	else if (cp < 0x800)
	{
		*out++ = (char) (0xC0 | (cp >> 6));
		*out++ = (char) (0x80 | (cp & 0x3F));
	}
	else if (cp < 0x10000)
	{
		*out++ = (char) (0xE0 | (cp >> 12));
		*out++ = (char) (0x80 | ((cp >> 6) & 0x3F));
		*out++ = (char) (0x80 | (cp & 0x3F));
	}
	else
	{
		*out++ = (char) (0xF0 | (cp >> 18));
		*out++ = (char) (0x80 | ((cp >> 12) & 0x3F));
		*out++ = (char) (0x80 | ((cp >> 6) & 0x3F));
		*out++ = (char) (0x80 | (cp & 0x3F));
	}
	return out;
}

/*
 * json_string: read a string at the cursor. With out, the decoded text is
 * returned malloc'd (NUL-terminated; *outlen its length, which may include
 * NULs from \u0000); without, it is only checked.
 */
static int
json_string(JsonCursor *c, char **out, size_t *outlen)
{
	const char *s;
	const char *close;
	char	   *buf = NULL;
	char	   *w = NULL;

	if (json_peek(c) != '"')
		return json_fail(c, "expected a string");
	s = c->p + 1;
	/* find the closing quote; decoding never makes the text longer */
	for (close = s; close < c->end && *close != '"'; close++)
	{
		if (*close == '\\')
			close++;
	}
	if (close >= c->end)
		return json_fail(c, "unterminated string");
	if (out)
	{
		buf = malloc((size_t) (close - s) + 1);
		if (buf == NULL)
			return json_fail(c, "out of memory");
		w = buf;
	}
	c->p = s;
	while (c->p < close)
	{
		unsigned char ch = (unsigned char) *c->p;

		if (ch < 0x20)
		{
			free(buf);
			return json_fail(c, "control character in string");
		}
		if (ch != '\\')
		{
			if (w)
				*w++ = (char) ch;
			c->p++;
			continue;
		}
		c->p++;
		switch (*c->p)
		{
			case '"':
			case '\\':
			case '/':
				ch = (unsigned char) *c->p;
				break;
			case 'b':
				ch = '\b';
				break;
			case 'f':
				ch = '\f';
				break;
			case 'n':
				ch = '\n';
				break;
			case 'r':
				ch = '\r';
				break;
			case 't':
				ch = '\t';
				break;
			case 'u':
				{
					long		cp;

					cp = (close - c->p > 4) ? json_hex4(c->p + 1) : -1;
					if (cp < 0)
					{
						free(buf);
						return json_fail(c, "bad \\u escape");
					}
					c->p += 5;
					if (cp >= 0xDC00 && cp <= 0xDFFF)
					{
						free(buf);
						return json_fail(c, "lone low surrogate in \\u escape");
					}
					if (cp >= 0xD800 && cp <= 0xDBFF)
					{
						long		lo = -1;

						if (close - c->p >= 6 && c->p[0] == '\\' && c->p[1] == 'u')
							lo = json_hex4(c->p + 2);
						if (lo < 0xDC00 || lo > 0xDFFF)
						{
							free(buf);
							return json_fail(c, "high surrogate without its low half");
						}
						cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
						c->p += 6;
					}
					if (w)
						w = json_put_utf8(w, cp);
					continue;
				}
			default:
				free(buf);
				return json_fail(c, "bad escape in string");
		}
		if (w)
			*w++ = (char) ch;
		c->p++;
	}
	c->p = close + 1;
	if (out)
	{
		*w = '\0';
		*out = buf;
		*outlen = (size_t) (w - buf);
	}
	return 0;
}

/* json_digits: at least one digit; returns how many were read. */
static int
json_digits(JsonCursor *c)
{
	int			n = 0;

	while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
	{
		c->p++;
		n++;
	}
	return n;
}

/* json_number: check a number by the JSON grammar; its value is unused. */
static int
json_number(JsonCursor *c)
{
	if (c->p < c->end && *c->p == '-')
		c->p++;
	if (c->p < c->end && *c->p == '0')
		c->p++;
	else if (json_digits(c) == 0)
		return json_fail(c, "malformed number");
	if (c->p < c->end && *c->p == '.')
	{
		c->p++;
		if (json_digits(c) == 0)
			return json_fail(c, "malformed number");
	}
	if (c->p < c->end && (*c->p == 'e' || *c->p == 'E'))
	{
		c->p++;
		if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
			c->p++;
		if (json_digits(c) == 0)
			return json_fail(c, "malformed number");
	}
	return 0;
}

/*
 * json_begin: consume the opening bracket of a container; 0 or -1.
 */
static int
json_begin(JsonCursor *c, char open)
{
	if (json_peek(c) != open)
		return json_fail(c, open == '{' ? "expected an object" : "expected an array");
	if (++c->depth > JSON_MAX_DEPTH)
		return json_fail(c, "nested deeper than %d", JSON_MAX_DEPTH);
	c->p++;
	return 0;
}

/*
 * json_more: inside a container opened by json_begin, is there another
 * element? 1 yes (for objects the cursor is at the key), 0 the container
 * ended (its bracket consumed), -1 malformed. *first is the caller's state.
 */
static int
json_more(JsonCursor *c, char close, int *first)
{
	char		ch = json_peek(c);

	if (ch == close)
	{
		c->p++;
		c->depth--;
		return 0;
	}
	if (!*first)
	{
		if (ch != ',')
			return json_fail(c, "expected ',' or '%c'", close);
		c->p++;
		if (json_peek(c) == close)
			return json_fail(c, "trailing comma");
	}
	*first = 0;
	return 1;
}

/*
 * json_key: read an object key and its ':'; the key is malloc'd.
 */
static int
json_key(JsonCursor *c, char **key, size_t *keylen)
{
	if (json_string(c, key, keylen) != 0)
		return -1;
	if (json_peek(c) != ':')
	{
		free(*key);
		*key = NULL;
		return json_fail(c, "expected ':'");
	}
	c->p++;
	return 0;
}

/* json_key_is: does a decoded key equal name? */
static int
json_key_is(const char *key, size_t keylen, const char *name)
{
	return keylen == strlen(name) && memcmp(key, name, keylen) == 0;
}

/* json_literal: consume word at the cursor, or fail. */
static int
json_literal(JsonCursor *c, const char *word)
{
	size_t		len = strlen(word);

	if ((size_t) (c->end - c->p) < len || memcmp(c->p, word, len) != 0)
		return json_fail(c, "unexpected character '%c'", *c->p);
	c->p += len;
	return 0;
}

/*
 * json_skip: check and skip any value.
 */
static int
json_skip(JsonCursor *c)
{
	int			first = 1;
	int			more;
	char	   *key;
	size_t		keylen;

	switch (json_peek(c))
	{
		case '{':
			if (json_begin(c, '{') != 0)
				return -1;
			while ((more = json_more(c, '}', &first)) == 1)
			{
				if (json_key(c, &key, &keylen) != 0)
					return -1;
				free(key);
				if (json_skip(c) != 0)
					return -1;
			}
			return more;
		case '[':
			if (json_begin(c, '[') != 0)
				return -1;
			while ((more = json_more(c, ']', &first)) == 1)
			{
				if (json_skip(c) != 0)
					return -1;
			}
			return more;
		case '"':
			return json_string(c, NULL, NULL);
		case 't':
			return json_literal(c, "true");
		case 'f':
			return json_literal(c, "false");
		case 'n':
			return json_literal(c, "null");
		case '\0':
			return json_fail(c, "unexpected end of body");
		default:
			if (*c->p == '-' || (*c->p >= '0' && *c->p <= '9'))
				return json_number(c);
			return json_fail(c, "unexpected character '%c'", *c->p);
	}
}

/*
 * json_status_word: read a status string and map it to one of our five
 * words (any case); an unknown word is a malformed body.
 */
static int
json_status_word(JsonCursor *c, const char **word)
{
	char	   *s;
	size_t		len;
	size_t		i;
	size_t		k;

	if (json_string(c, &s, &len) != 0)
		return -1;
	for (i = 0; i < sizeof(http_status_words) / sizeof(http_status_words[0]); i++)
	{
		const char *w = http_status_words[i];

		if (len != strlen(w))
			continue;
		for (k = 0; k < len; k++)
		{
			if (http_lower((unsigned char) s[k]) != w[k])
				break;
		}
		if (k == len)
		{
			free(s);
			*word = w;
			return 0;
		}
	}
	for (k = 0; k < len && k < 32; k++)
	{
		if ((unsigned char) s[k] < 0x20 || (unsigned char) s[k] >= 0x7f || s[k] == '"')
			s[k] = '?';
	}
	json_fail(c, "unknown status \"%.*s\"", (int) (len < 32 ? len : 32), s);
	free(s);
	return -1;
}

/*
 * json_splinter_status: the Splinter status object {"statusType": "..", ..}.
 */
static int
json_splinter_status(JsonCursor *c, const char **word)
{
	int			first = 1;
	int			more;
	char	   *key;
	size_t		keylen;
	int			rc;

	*word = NULL;
	if (json_begin(c, '{') != 0)
		return -1;
	while ((more = json_more(c, '}', &first)) == 1)
	{
		if (json_key(c, &key, &keylen) != 0)
			return -1;
		if (json_key_is(key, keylen, "statusType"))
		{
			if (*word != NULL)
				rc = json_fail(c, "duplicate \"statusType\"");
			else
				rc = json_status_word(c, word);
		}
		else
			rc = json_skip(c);
		free(key);
		if (rc != 0)
			return -1;
	}
	if (more < 0)
		return -1;
	if (*word == NULL)
		return json_fail(c, "status object without \"statusType\"");
	return 0;
}

/*
 * json_entry: one {"id": .., "status": ..} of either dialect; records its
 * word in scratch for every requested entry with that id.
 */
static int
json_entry(JsonCursor *c, HttpDialect dialect, const GridhaStatusEntry *entries,
		   int n, const char **scratch)
{
	int			first = 1;
	char	   *key;
	size_t		keylen;
	char	   *id = NULL;
	size_t		idlen = 0;
	const char *word = NULL;
	int			more = 0;
	int			rc = 0;
	int			i;

	if (json_begin(c, '{') != 0)
		return -1;
	while (rc == 0 && (more = json_more(c, '}', &first)) == 1)
	{
		if (json_key(c, &key, &keylen) != 0)
		{
			rc = -1;
			break;
		}
		if (json_key_is(key, keylen, "id"))
		{
			if (id != NULL)
				rc = json_fail(c, "duplicate \"id\"");
			else
				rc = json_string(c, &id, &idlen);
		}
		else if (json_key_is(key, keylen, "status"))
		{
			if (word != NULL)
				rc = json_fail(c, "duplicate \"status\"");
			else if (dialect == HTTP_DIALECT_SAWTOOTH)
				rc = json_status_word(c, &word);
			else
				rc = json_splinter_status(c, &word);
		}
		else
			rc = json_skip(c);
		free(key);
	}
	if (rc == 0 && more < 0)
		rc = -1;
	if (rc == 0 && (id == NULL || word == NULL))
		rc = json_fail(c, "entry without %s", id == NULL ? "\"id\"" : "\"status\"");
	if (rc == 0)
	{
		for (i = 0; i < n; i++)
		{
			const char *want = entries[i].batch_id;

			if (want != NULL && strlen(want) == idlen && memcmp(want, id, idlen) == 0)
				scratch[i] = word;
		}
	}
	free(id);
	return rc;
}

/*
 * json_entries: the array of entries.
 */
static int
json_entries(JsonCursor *c, HttpDialect dialect, const GridhaStatusEntry *entries,
			 int n, const char **scratch)
{
	int			first = 1;
	int			more;

	if (json_begin(c, '[') != 0)
		return -1;
	while ((more = json_more(c, ']', &first)) == 1)
	{
		if (json_entry(c, dialect, entries, n, scratch) != 0)
			return -1;
	}
	return more;
}

/*
 * gridha_http_parse_statuses: parse a whole status body of either dialect;
 * entries change only when all of it is well-formed.
 */
int
gridha_http_parse_statuses(const char *body, size_t len,
						   GridhaStatusEntry *entries, int n,
						   char *err, size_t errlen)
{
	JsonCursor	c;
	const char **scratch;
	int			rc = 0;
	int			i;

	scratch = calloc(n > 0 ? (size_t) n : 1, sizeof(char *));
	if (scratch == NULL)
	{
		http_set_err(err, errlen, "out of memory");
		return -1;
	}
	c.start = c.p = body;
	c.end = body + len;
	c.depth = 0;
	c.err = err;
	c.errlen = errlen;

	switch (json_peek(&c))
	{
		case '{':
			{
				/* Sawtooth: {"data": [...], "link": ..} */
				int			first = 1;
				int			more = 0;
				int			seen = 0;
				char	   *key;
				size_t		keylen;

				if (json_begin(&c, '{') != 0)
				{
					rc = -1;
					break;
				}
				while (rc == 0 && (more = json_more(&c, '}', &first)) == 1)
				{
					if (json_key(&c, &key, &keylen) != 0)
					{
						rc = -1;
						break;
					}
					if (json_key_is(key, keylen, "data"))
					{
						if (seen++)
							rc = json_fail(&c, "duplicate \"data\"");
						else
							rc = json_entries(&c, HTTP_DIALECT_SAWTOOTH, entries, n, scratch);
					}
					else
						rc = json_skip(&c);
					free(key);
				}
				if (rc == 0 && more < 0)
					rc = -1;
				if (rc == 0 && !seen)
					rc = json_fail(&c, "object without \"data\"");
				break;
			}
		case '[':
			/* Splinter: [{"id": .., "status": {"statusType": ..}}] */
			rc = json_entries(&c, HTTP_DIALECT_SPLINTER, entries, n, scratch);
			break;
		default:
			if (json_at_end(&c))
			{
				rc = json_fail(&c, "empty body");
				break;
			}
			rc = json_fail(&c, "expected an object or an array");
			break;
	}
	if (rc == 0 && !json_at_end(&c))
		rc = json_fail(&c, "trailing data after the JSON value");
	if (rc == 0)
	{
		for (i = 0; i < n; i++)
		{
			if (scratch[i])
				strcpy(entries[i].status, scratch[i]);
			else
				entries[i].status[0] = '\0';
		}
	}
	free(scratch);
	return rc;
}
