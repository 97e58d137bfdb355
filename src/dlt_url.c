/*-------------------------------------------------------------------------
 *
 * dlt_url.c
 *		A ledger's URL templates: checked (gridha_url_check, for targets.c
 *		and the client), filled in with encoded values (gridha_url_expand,
 *		gridha_url_build), and the encoding of ids. Plain C on top of
 *		libcurl's URL API, linked into the extension and the client, like
 *		src/dlt_http.c, which sends the requests.
 *
 * Words used here:
 *   template   a target's submit_url or status_url with its placeholders
 *              {service_id} and {batch_id} (submit) or {batch_ids} (status)
 *   encoded    URL-encoded by libcurl (RFC 3986 unreserved characters kept,
 *              everything else %XX), "." and ".." as %2E and %2E%2E
 *
 *-------------------------------------------------------------------------
 */
#include "dlt_url.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <curl/mprintf.h>

/* Longest URL template we accept. */
#define URL_MAX_LEN		65536

/*
 * gridha_dlt_set_err: format a message into a caller's buffer, which may be NULL
 * or empty.
 */
void
gridha_dlt_set_err(char *err, size_t errlen, const char *fmt,...)
{
	va_list		ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* gridha_dlt_equal_ci: are the first len bytes of a and b equal, ignoring ASCII case? */
int
gridha_dlt_equal_ci(const char *a, const char *b, size_t len)
{
	for (; len > 0; a++, b++, len--)
	{
		int			x = (*a >= 'A' && *a <= 'Z') ? *a + 'a' - 'A' : *a;
		int			y = (*b >= 'A' && *b <= 'Z') ? *b + 'a' - 'A' : *b;

		if (x != y || x == '\0')
			return x == y;
	}
	return 1;
}

/*
 * url_fill: tmpl with every placeholder of kind replaced by its value
 * (svc, batch or ids, used as they are); malloc'd. NULL with a reason in
 * err when a '{' or '}' is not part of a placeholder of kind, or a status
 * template lacks {batch_ids}.
 */
static char *
url_fill(const char *tmpl, GridhaUrlKind kind, const char *svc, const char *batch,
		  const char *ids, char *err, size_t errlen)
{
	static const char *const names[] = {"{service_id}", "{batch_id}", "{batch_ids}"};
	const char *values[3];
	size_t		longest = 0;
	size_t		braces = 0;
	int			uses = 0;
	const char *p;
	char	   *url;
	char	   *w;
	int			k;

	values[0] = kind == GRIDHA_URL_SUBMIT ? svc : NULL;
	values[1] = kind == GRIDHA_URL_SUBMIT ? batch : NULL;
	values[2] = kind == GRIDHA_URL_STATUS ? ids : NULL;
	for (k = 0; k < 3; k++)
		longest = (values[k] && strlen(values[k]) > longest) ? strlen(values[k]) : longest;
	for (p = strchr(tmpl, '{'); p; p = strchr(p + 1, '{'))
		braces++;
	url = malloc(strlen(tmpl) + braces * longest + 1);
	if (url == NULL)
	{
		gridha_dlt_set_err(err, errlen, "out of memory");
		return NULL;
	}
	for (p = tmpl, w = url; *p;)
	{
		const char *close = strchr(p + 1, '}');

		if (*p != '{' && *p != '}')
		{
			*w++ = *p++;
			continue;
		}
		for (k = 0; k < 3; k++)
		{
			if (values[k] && strncmp(p, names[k], strlen(names[k])) == 0)
				break;
		}
		if (k < 3)
		{
			w += strlen(strcpy(w, values[k]));
			p += strlen(names[k]);
			uses++;
			continue;
		}
		if (*p == '}')
			gridha_dlt_set_err(err, errlen, "URL has a '}' without a '{' at byte %ld",
						 (long) (p - tmpl));
		else if (close == NULL || memchr(p + 1, '{', close - p - 1) != NULL)
			gridha_dlt_set_err(err, errlen, "URL has an unterminated placeholder at byte %ld",
						 (long) (p - tmpl));
		else
			gridha_dlt_set_err(err, errlen, "unknown placeholder %.*s in %s URL (allowed: %s)",
						 (int) (close - p + 1 > 40 ? 40 : close - p + 1), p,
						 kind == GRIDHA_URL_SUBMIT ? "submit" : "status",
						 kind == GRIDHA_URL_SUBMIT ? "{service_id}, {batch_id}" : "{batch_ids}");
		free(url);
		return NULL;
	}
	*w = '\0';
	if (kind == GRIDHA_URL_STATUS && uses == 0)
	{
		gridha_dlt_set_err(err, errlen, "status URL must contain {batch_ids}");
		free(url);
		return NULL;
	}
	return url;
}

/*
 * url_open: url taken apart by libcurl; NULL with a reason in err
 * unless it is http:// or https:// with a host and a port from 1 to 65535
 * (or none). The caller frees it with curl_url_cleanup.
 */
static CURLU *
url_open(const char *url, char *err, size_t errlen)
{
	CURLU	   *u = curl_url();
	CURLUcode	rc;
	char	   *scheme = NULL;
	char	   *host = NULL;
	char	   *port = NULL;
	int			good = 0;

	if (u == NULL)
	{
		gridha_dlt_set_err(err, errlen, "out of memory");
		return NULL;
	}
	rc = curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME);
	if (strstr(url, "://") == NULL)
		gridha_dlt_set_err(err, errlen, "URL must start with http:// or https://");
	else if (rc != CURLUE_OK)
#if LIBCURL_VERSION_NUM >= 0x075000
		gridha_dlt_set_err(err, errlen, "URL is malformed: %s", curl_url_strerror(rc));
#else
		gridha_dlt_set_err(err, errlen, "URL is malformed (libcurl URL error %d)", (int) rc);
#endif
	else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
			 (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0))
		gridha_dlt_set_err(err, errlen, "URL must start with http:// or https://");
	/* libcurl takes "http:///x" for "http://x/": we want the "//" and a host */
	else if (!gridha_dlt_equal_ci(url, scheme, strlen(scheme)) ||
			 strncmp(url + strlen(scheme), "://", 3) != 0 ||
			 url[strlen(scheme) + 3] == '/' ||
			 curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || host[0] == '\0')
		gridha_dlt_set_err(err, errlen, "URL has no host");
	else if (curl_url_get(u, CURLUPART_PORT, &port, 0) == CURLUE_OK && atol(port) < 1)
		gridha_dlt_set_err(err, errlen, "URL port is out of range");
	else
		good = 1;
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	if (!good)
	{
		curl_url_cleanup(u);
		return NULL;
	}
	return u;
}

/*
 * url_same_authority: do two parsed URLs agree on everything before
 * the path?
 */
static int
url_same_authority(CURLU *a, CURLU *b)
{
	static const CURLUPart parts[] = {
		CURLUPART_SCHEME, CURLUPART_USER, CURLUPART_PASSWORD, CURLUPART_OPTIONS,
		CURLUPART_HOST, CURLUPART_PORT, CURLUPART_ZONEID
	};
	size_t		i;
	int			same = 1;

	for (i = 0; same && i < sizeof(parts) / sizeof(parts[0]); i++)
	{
		char	   *x = NULL;
		char	   *y = NULL;
		CURLUcode	rx = curl_url_get(a, parts[i], &x, 0);
		CURLUcode	ry = curl_url_get(b, parts[i], &y, 0);

		same = rx == ry && (rx != CURLUE_OK || strcmp(x, y) == 0);
		curl_free(x);
		curl_free(y);
	}
	return same;
}

/*
 * gridha_url_check: is tmpl a URL template we can use for kind? It is
 * filled in twice, with two different sample values, and both URLs must
 * pass libcurl's URL parser and agree before the path: a placeholder in
 * the scheme, user, host or port would make them differ.
 */
int
gridha_url_check(const char *tmpl, GridhaUrlKind kind, char *err, size_t errlen)
{
	const char *p;
	char	   *one;
	char	   *two = NULL;
	CURLU	   *u1 = NULL;
	CURLU	   *u2 = NULL;
	int			rc = -1;

	if (tmpl == NULL || tmpl[0] == '\0')
	{
		gridha_dlt_set_err(err, errlen, "URL is empty");
		return -1;
	}
	if (strlen(tmpl) > URL_MAX_LEN)
	{
		gridha_dlt_set_err(err, errlen, "URL is longer than %d bytes", URL_MAX_LEN);
		return -1;
	}
	for (p = tmpl; *p; p++)
	{
		if ((unsigned char) *p <= 0x20 || (unsigned char) *p >= 0x7f)
		{
			gridha_dlt_set_err(err, errlen,
						 "URL contains a space, control or non-ASCII character at byte %ld",
						 (long) (p - tmpl));
			return -1;
		}
	}
	one = url_fill(tmpl, kind, "1", "1", "1", err, errlen);
	if (one != NULL)
		two = url_fill(tmpl, kind, "2", "2", "2", err, errlen);
	if (two != NULL && (u1 = url_open(one, err, errlen)) != NULL)
	{
		u2 = url_open(two, NULL, 0);
		if (u2 == NULL || !url_same_authority(u1, u2))
			gridha_dlt_set_err(err, errlen,
						 "placeholders are not allowed in the scheme, user, host or port of the URL");
		else
			rc = 0;
	}
	curl_url_cleanup(u1);
	curl_url_cleanup(u2);
	free(one);
	free(two);
	return rc;
}

/*
 * gridha_url_escape: s URL-encoded by libcurl (RFC 3986 unreserved characters
 * kept, everything else %XX in upper case); free with curl_free. NULL when
 * out of memory. The handle argument of curl_easy_escape is not used.
 *
 * "." and ".." are dot-segments: put into a path they would name the
 * segment itself or its parent, and send a producer's batch elsewhere on
 * the ledger's host with the target's credentials. They are encoded as
 * %2E and %2E%2E, which no path resolution treats as dot-segments (and the
 * requests are sent with CURLOPT_PATH_AS_IS, so libcurl resolves nothing).
 */
char *
gridha_url_escape(const char *s)
{
	/* curl_maprintf: allocated by libcurl, so curl_free frees it too */
	if (strcmp(s, ".") == 0)
		return curl_maprintf("%s", "%2E");
	if (strcmp(s, "..") == 0)
		return curl_maprintf("%s", "%2E%2E");
	return curl_easy_escape(NULL, s, (int) strlen(s));
}

/*
 * gridha_url_escape_join: the n (at least one) strings URL-encoded and joined by
 * commas; malloc'd, or NULL with a reason in err. With ends, ends[i] gets
 * where the i-th ends in the result, so that any run of them is a piece of
 * it.
 */
char *
gridha_url_escape_join(const char *const *s, int n, size_t *ends, char *err, size_t errlen)
{
	char	   *out = NULL;
	size_t		len = 0;
	size_t		cap = 0;
	int			i;

	for (i = 0; i < n; i++)
	{
		char	   *enc = s[i] ? gridha_url_escape(s[i]) : NULL;
		size_t		need = len + (enc ? strlen(enc) : 0) + 2;

		if (enc != NULL && need > cap)
		{
			char	   *grown = realloc(out, 2 * need);

			cap = grown ? 2 * need : cap;
			out = grown ? grown : out;
		}
		if (enc == NULL || need > cap)
		{
			if (s[i] == NULL)
				gridha_dlt_set_err(err, errlen, "batch id %d is missing", i);
			else
				gridha_dlt_set_err(err, errlen, "out of memory");
			curl_free(enc);
			free(out);
			return NULL;
		}
		if (i > 0)
			out[len++] = ',';
		len += strlen(strcpy(out + len, enc));
		curl_free(enc);
		if (ends)
			ends[i] = len;
	}
	return out;
}

/*
 * gridha_url_id_alone: whether an id must be asked about in a GET of its own: it
 * contains the comma that separates the ids of {batch_ids}. Encoded, it
 * cannot split a URL; but a ledger that decodes the parameter before it
 * splits it would read it as two ids, and the ids beside it with them.
 */
int
gridha_url_id_alone(const char *id)
{
	return id != NULL && strchr(id, ',') != NULL;
}

/*
 * gridha_url_build: the template, already checked, filled in with values that
 * are already encoded, and the result checked by libcurl's URL parser;
 * malloc'd, or NULL with a reason in err.
 */
char *
gridha_url_build(const char *tmpl, GridhaUrlKind kind, const char *svc, const char *batch,
		   const char *ids, char *err, size_t errlen)
{
	char	   *url = url_fill(tmpl, kind, svc, batch, ids, err, errlen);
	CURLU	   *u;

	if (url == NULL)
		return NULL;
	u = url_open(url, err, errlen);
	if (u == NULL)
	{
		free(url);
		return NULL;
	}
	curl_url_cleanup(u);
	return url;
}

/*
 * gridha_url_expand: the checked template with its placeholders
 * replaced by the encoded values; malloc'd, or NULL with a reason in err.
 */
char *
gridha_url_expand(const char *tmpl, GridhaUrlKind kind,
					   const char *service_id, const char *batch_id,
					   const char *const *batch_ids, int n_ids,
					   char *err, size_t errlen)
{
	char	   *svc = NULL;
	char	   *batch = NULL;
	char	   *ids = NULL;
	char	   *url = NULL;

	if (gridha_url_check(tmpl, kind, err, errlen) != 0)
		return NULL;
	if (kind == GRIDHA_URL_SUBMIT && (service_id == NULL || batch_id == NULL))
		gridha_dlt_set_err(err, errlen, "service id and batch id are required");
	else if (kind == GRIDHA_URL_STATUS && (n_ids < 1 || batch_ids == NULL))
		gridha_dlt_set_err(err, errlen, "no batch ids to ask for");
	else if (kind == GRIDHA_URL_STATUS)
	{
		if ((ids = gridha_url_escape_join(batch_ids, n_ids, NULL, err, errlen)) != NULL)
			url = gridha_url_build(tmpl, kind, NULL, NULL, ids, err, errlen);
	}
	else if ((svc = gridha_url_escape(service_id)) == NULL || (batch = gridha_url_escape(batch_id)) == NULL)
		gridha_dlt_set_err(err, errlen, "out of memory");
	else
		url = gridha_url_build(tmpl, kind, svc, batch, NULL, err, errlen);
	curl_free(svc);
	curl_free(batch);
	free(ids);
	return url;
}

