/*-------------------------------------------------------------------------
 *
 * dlt_url.h
 *		A ledger's URL templates: checked, filled in, encoded
 *		(src/dlt_url.c). Plain C on top of libcurl, like dlt_http.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_DLT_URL_H
#define GRIDHA_DLT_URL_H

#include <stddef.h>

typedef enum GridhaUrlKind
{
	GRIDHA_URL_SUBMIT,
	GRIDHA_URL_STATUS
} GridhaUrlKind;

/*
 * 0 when tmpl is an acceptable URL template: http:// or https://, a host,
 * no spaces or control characters, placeholders only {service_id} and
 * {batch_id} for SUBMIT, only {batch_ids} for STATUS (which must contain
 * it), no unknown {...}, none in the host. Otherwise -1 and a one-line
 * reason in err.
 */
extern int	gridha_url_check(const char *tmpl, GridhaUrlKind kind,
								  char *err, size_t errlen);

/*
 * The URL for a request: tmpl checked as above, then its placeholders
 * replaced by the URL-encoded values (RFC 3986 unreserved characters kept,
 * everything else %XX). For SUBMIT, service_id and batch_id are used; for
 * STATUS, the n_ids ids in batch_ids, each encoded, joined by commas.
 * Returns a malloc'd string the caller frees, or NULL with a reason in err.
 */
extern char *gridha_url_expand(const char *tmpl, GridhaUrlKind kind,
									const char *service_id, const char *batch_id,
									const char *const *batch_ids, int n_ids,
									char *err, size_t errlen);

/*
 * For src/dlt_http.c: the template, already checked, filled in with values
 * that are already encoded (ids: the encoded ids joined by commas), the
 * result checked by libcurl's URL parser; malloc'd, or NULL with a reason
 * in err.
 */
extern char *gridha_url_build(const char *tmpl, GridhaUrlKind kind, const char *svc,
							  const char *batch, const char *ids, char *err, size_t errlen);
/* s URL-encoded ("." and ".." too); free with curl_free; NULL: out of memory */
extern char *gridha_url_escape(const char *s);
/*
 * The n strings URL-encoded and joined by commas; malloc'd, or NULL with a
 * reason in err. With ends, ends[i] gets where the i-th ends.
 */
extern char *gridha_url_escape_join(const char *const *s, int n, size_t *ends,
									char *err, size_t errlen);
/* Whether an id must be asked about in a GET of its own (it has a comma) */
extern int	gridha_url_id_alone(const char *id);

/* Shared by the ledger files: a message into a caller's buffer (may be NULL) */
#ifdef __GNUC__
extern void gridha_dlt_set_err(char *err, size_t errlen, const char *fmt,...)
			__attribute__((format(printf, 3, 4)));
#else
extern void gridha_dlt_set_err(char *err, size_t errlen, const char *fmt,...);
#endif
/* Whether the first len bytes of a and b are equal, ignoring ASCII case */
extern int	gridha_dlt_equal_ci(const char *a, const char *b, size_t len);

#endif							/* GRIDHA_DLT_URL_H */
