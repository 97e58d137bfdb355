/*-------------------------------------------------------------------------
 *
 * test_dlt_http.c
 *		Unit test of src/dlt_http.c, printing TAP lines.
 *
 * Without arguments it checks what needs no network: URL templates, their
 * expansion and the status-body parser of both dialects, malformed bodies
 * included. With the base URL of client/test_http_fixture.py it also
 * checks real requests: outcome per status code, the headers and payload
 * that arrive, timeouts, refused connections, status GETs and keep-alive.
 *
 *   client/test_dlt_http [http://127.0.0.1:PORT]
 *
 * Words used here:
 *   fixture    the canned-answer HTTP server (client/test_http_fixture.py)
 *   sentinel   a status we put in every entry before a call that must fail,
 *              to prove the call changed nothing
 *
 * Exit status 0 when every test passed, 1 otherwise.
 *
 *-------------------------------------------------------------------------
 */
#include "dlt_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#define SENTINEL "sentinel"

static int	test_count = 0;
static int	test_failed = 0;

/*
 * ok: one TAP line; returns cond so callers can print diagnostics.
 */
static int
__attribute__((format(printf, 2, 3)))
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
	fflush(stdout);
	return cond;
}

/* diag: a TAP comment. */
static void
__attribute__((format(printf, 1, 2)))
diag(const char *fmt,...)
{
	va_list		ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

/* ----------------------------------------------------------------------
 * URL templates
 * ----------------------------------------------------------------------
 */

/* check_url_case: one template, accepted or refused as expected. */
static void
check_url_case(const char *tmpl, GridhaUrlKind kind, int want_ok, const char *what)
{
	char		err[256] = "";
	int			rc = gridha_http_check_url(tmpl, kind, err, sizeof(err));

	if (want_ok)
	{
		if (!ok(rc == 0, "check_url accepts %s", what))
			diag("refused: %s", err);
	}
	else
	{
		if (!ok(rc == -1 && err[0] != '\0', "check_url refuses %s (%s)", what, err))
			diag("rc %d", rc);
	}
}

static void
test_check_url(void)
{
	check_url_case("http://127.0.0.1:8008/batches/{service_id}/{batch_id}",
				   GRIDHA_URL_SUBMIT, 1, "the documented submit template");
	check_url_case("HTTPS://ledger.example/submit", GRIDHA_URL_SUBMIT, 1,
				   "https without placeholders, scheme in upper case");
	check_url_case("http://user:pw@[::1]:80/b?s={service_id}&b={batch_id}#x",
				   GRIDHA_URL_SUBMIT, 1, "user info, IPv6 host, placeholders in the query");
	check_url_case("http://127.0.0.1:8008/batch_statuses?id={batch_ids}",
				   GRIDHA_URL_STATUS, 1, "the documented status template");
	check_url_case("http://h/{batch_ids}/{batch_ids}", GRIDHA_URL_STATUS, 1,
				   "{batch_ids} twice");
	check_url_case(NULL, GRIDHA_URL_SUBMIT, 0, "NULL");
	check_url_case("", GRIDHA_URL_SUBMIT, 0, "an empty template");
	check_url_case("ftp://h/x", GRIDHA_URL_SUBMIT, 0, "another scheme");
	check_url_case("127.0.0.1:8008/x", GRIDHA_URL_SUBMIT, 0, "no scheme");
	check_url_case("http:///x", GRIDHA_URL_SUBMIT, 0, "no host");
	check_url_case("http://:8008/x", GRIDHA_URL_SUBMIT, 0, "a port without a host");
	check_url_case("http://h:99999/x", GRIDHA_URL_SUBMIT, 0, "a port out of range");
	check_url_case("http://h:80a/x", GRIDHA_URL_SUBMIT, 0, "a malformed port");
	check_url_case("http://h/x y", GRIDHA_URL_SUBMIT, 0, "a space");
	check_url_case("http://h/x\ty", GRIDHA_URL_SUBMIT, 0, "a tab");
	check_url_case("http://h/x\n", GRIDHA_URL_SUBMIT, 0, "a newline");
	check_url_case("http://h/\xc3\xa9", GRIDHA_URL_SUBMIT, 0, "a non-ASCII byte");
	check_url_case("http://h/{batch_ids}", GRIDHA_URL_SUBMIT, 0,
				   "{batch_ids} in a submit template");
	check_url_case("http://h/{service_id}?id={batch_ids}", GRIDHA_URL_STATUS, 0,
				   "{service_id} in a status template");
	check_url_case("http://h/batch_statuses", GRIDHA_URL_STATUS, 0,
				   "a status template without {batch_ids}");
	check_url_case("http://h/{foo}", GRIDHA_URL_SUBMIT, 0, "an unknown placeholder");
	check_url_case("http://h/{Service_Id}", GRIDHA_URL_SUBMIT, 0,
				   "a placeholder in the wrong case");
	check_url_case("http://h/{service_id", GRIDHA_URL_SUBMIT, 0,
				   "an unterminated placeholder");
	check_url_case("http://h/{{service_id}", GRIDHA_URL_SUBMIT, 0, "a doubled '{'");
	check_url_case("http://h/x}", GRIDHA_URL_SUBMIT, 0, "a stray '}'");
	check_url_case("http://{service_id}/x", GRIDHA_URL_SUBMIT, 0, "a placeholder in the host");
}

/* expand_case: one expansion against its expected URL. */
static void
expand_case(const char *tmpl, GridhaUrlKind kind, const char *svc, const char *batch,
			const char *const *ids, int n, const char *want, const char *what)
{
	char		err[256] = "";
	char	   *url = gridha_http_expand_url(tmpl, kind, svc, batch, ids, n, err, sizeof(err));

	if (want == NULL)
		ok(url == NULL && err[0] != '\0', "expand_url refuses %s (%s)", what, err);
	else if (!ok(url != NULL && strcmp(url, want) == 0, "expand_url %s", what))
		diag("got '%s' (%s), want '%s'", url ? url : "(null)", err, want);
	free(url);
}

static void
test_expand_url(void)
{
	const char *ids[] = {"a,b", "c d", "e/\xc3\xbc~._-"};

	expand_case("http://h/b/{service_id}/{batch_id}", GRIDHA_URL_SUBMIT,
				"svc a/\xc3\xbc", "b~1.-_Z9", NULL, 0,
				"http://h/b/svc%20a%2F%C3%BC/b~1.-_Z9",
				"encodes all but the unreserved characters");
	expand_case("http://h/{batch_id}?again={batch_id}&s={service_id}", GRIDHA_URL_SUBMIT,
				"s?&=#%{}", "b", NULL, 0,
				"http://h/b?again=b&s=s%3F%26%3D%23%25%7B%7D",
				"fills every occurrence, encodes reserved characters");
	expand_case("http://h/st?id={batch_ids}", GRIDHA_URL_STATUS, NULL, NULL, ids, 3,
				"http://h/st?id=a%2Cb,c%20d,e%2F%C3%BC~._-",
				"joins encoded ids with literal commas");
	expand_case("http://h/st?id={batch_ids}", GRIDHA_URL_STATUS, NULL, NULL, ids, 1,
				"http://h/st?id=a%2Cb", "a single id");
	expand_case("http://h/st?id={batch_ids}", GRIDHA_URL_STATUS, NULL, NULL, ids, 0,
				NULL, "an empty id list");
	expand_case("http://h/{nope}", GRIDHA_URL_SUBMIT, "s", "b", NULL, 0, NULL,
				"a template check_url refuses");
}

/* ----------------------------------------------------------------------
 * Status bodies
 * ----------------------------------------------------------------------
 */

#define NIDS 4
static const char *const parse_ids[NIDS] = {
	"b1", "b2", "b3", "q\"\\\xc3\xa9\xf0\x9f\x98\x80/"
};

/* fill_entries: the test's ids, every status set to the sentinel. */
static void
fill_entries(GridhaStatusEntry *e)
{
	int			i;

	for (i = 0; i < NIDS; i++)
	{
		e[i].batch_id = parse_ids[i];
		strcpy(e[i].status, SENTINEL);
	}
}

/*
 * parse_good: a body that must parse, with the four expected statuses
 * ("" = not mentioned).
 */
static void
parse_good(const char *body, const char *s1, const char *s2, const char *s3,
		   const char *s4, const char *what)
{
	GridhaStatusEntry e[NIDS];
	const char *want[NIDS];
	char		err[256] = "";
	int			rc;
	int			i;
	int			same = 1;

	want[0] = s1;
	want[1] = s2;
	want[2] = s3;
	want[3] = s4;
	fill_entries(e);
	rc = gridha_http_parse_statuses(body, strlen(body), e, NIDS, err, sizeof(err));
	for (i = 0; i < NIDS; i++)
		same &= strcmp(e[i].status, want[i]) == 0;
	if (!ok(rc == 0 && same, "parse %s", what))
		diag("rc %d (%s): [%s] [%s] [%s] [%s]", rc, err,
			 e[0].status, e[1].status, e[2].status, e[3].status);
}

/* parse_bad: a body that must be refused, every entry left as it was. */
static void
parse_bad(const char *body, size_t len, const char *what)
{
	GridhaStatusEntry e[NIDS];
	char		err[256] = "";
	int			rc;
	int			i;
	int			untouched = 1;

	fill_entries(e);
	rc = gridha_http_parse_statuses(body, len, e, NIDS, err, sizeof(err));
	for (i = 0; i < NIDS; i++)
		untouched &= strcmp(e[i].status, SENTINEL) == 0;
	if (!ok(rc == -1 && untouched && err[0] != '\0', "parse refuses %s (%s)", what, err))
		diag("rc %d, untouched %d", rc, untouched);
}

#define BAD(body, what) parse_bad(body, sizeof(body) - 1, what)

static void
test_parse(void)
{
	char		deep[400];
	int			i;

	parse_good("{\"data\":[{\"id\":\"b1\",\"status\":\"COMMITTED\"},"
			   "{\"id\":\"b2\",\"status\":\"PENDING\",\"invalid_transactions\":[]}],"
			   "\"link\":\"http://h/batch_statuses?id=b1,b2\"}",
			   "committed", "pending", "", "",
			   "Sawtooth: upper-case words, extra members, unmentioned ids stay empty");
	parse_good(" \n{ \"link\" : null , \"data\" : [ { \"status\" : \"invalid\" , \"id\" : \"b3\" ,"
			   " \"n\" : -1.5e+3 , \"t\" : true , \"f\" : false , \"o\" : {\"x\":[1,{}]} } ,"
			   " {\"id\":\"b1\",\"status\":\"Valid\"} ] } \t",
			   "valid", "", "invalid", "",
			   "Sawtooth: white space, members in any order, numbers and literals skipped");
	parse_good("[{\"id\":\"b1\",\"status\":{\"statusType\":\"Committed\",\"message\":[]}},"
			   "{\"id\":\"b2\",\"status\":{\"statusType\":\"Invalid\"}},"
			   "{\"id\":\"b3\",\"status\":{\"statusType\":\"Unknown\"}},"
			   "{\"id\":\"other\",\"status\":{\"statusType\":\"Pending\"}}]",
			   "committed", "invalid", "unknown", "",
			   "Splinter: statusType words, ids not asked for ignored");
	parse_good("[{\"id\":\"q\\\"\\\\\\u00e9\\ud83d\\ude00\\/\",\"status\":{\"statusType\":\"PENDING\"}}]",
			   "", "", "", "pending",
			   "escapes: \\\" \\\\ \\/ \\u00e9 and a surrogate pair match the UTF-8 id");
	parse_good("{\"data\":[]}", "", "", "", "", "Sawtooth: no entries");
	parse_good("[]", "", "", "", "", "Splinter: no entries");

	BAD("", "an empty body");
	BAD("   ", "white space only");
	BAD("hello", "not JSON");
	BAD("<html>502 Bad Gateway</html>", "an HTML error page");
	BAD("\"data\"", "a bare string");
	BAD("{\"data\":[{\"id\":\"b1\",\"status\":\"COMMITTED\"}", "a truncated body");
	BAD("{\"data\":[{\"id\":\"b1\",\"status\":\"COMMITTED\"},]}", "a trailing comma in an array");
	BAD("{\"data\":[{\"id\":\"b1\",\"status\":\"COMMITTED\",}]}", "a trailing comma in an object");
	BAD("{\"data\":[]} x", "trailing data");
	BAD("{\"data\":[]}{}", "two values");
	BAD("{\"data\":{}}", "Sawtooth data that is not an array");
	BAD("{\"nodata\":[]}", "an object without data");
	BAD("{\"data\":[],\"data\":[]}", "data twice");
	BAD("{\"data\":[\"b1\"]}", "an entry that is not an object");
	BAD("{\"data\":[{\"id\":\"b1\"}]}", "an entry without status");
	BAD("{\"data\":[{\"status\":\"COMMITTED\"}]}", "an entry without id");
	BAD("{\"data\":[{\"id\":1,\"status\":\"COMMITTED\"}]}", "a numeric id");
	BAD("{\"data\":[{\"id\":\"b1\",\"id\":\"b2\",\"status\":\"COMMITTED\"}]}", "id twice");
	BAD("{\"data\":[{\"id\":\"b1\",\"status\":{\"statusType\":\"Committed\"}}]}",
		"a Splinter status object in a Sawtooth body");
	BAD("[{\"id\":\"b1\",\"status\":\"Committed\"}]", "a Sawtooth status string in a Splinter body");
	BAD("[{\"id\":\"b1\",\"status\":{\"message\":\"x\"}}]", "a Splinter status without statusType");
	BAD("{\"data\":[{\"id\":\"b1\",\"status\":\"COMMITTED\"},{\"id\":\"b2\",\"status\":\"LOST\"}]}",
		"an unknown status word after a good entry (not partly applied)");
	BAD("{\"data\":[{\"id\":\"b1\",\"status\":\"\"}]}", "an empty status word");
	BAD("{\"data\":[{\"id\":\"b1\",\"status\":\"COMMITTED\"}],\"x\":01}", "a number with a leading zero");
	BAD("{\"data\":[],\"x\":1.}", "a number without fraction digits");
	BAD("{\"data\":[],\"x\":-}", "a lone minus");
	BAD("{\"data\":[],\"x\":tru}", "a misspelt literal");
	BAD("{\"data\":[],\"x\":'a'}", "single quotes");
	BAD("{\"data\":[{\"id\":\"b\\q1\",\"status\":\"COMMITTED\"}]}", "an unknown escape");
	BAD("{\"data\":[{\"id\":\"b\\u00g1\",\"status\":\"COMMITTED\"}]}", "a bad \\u escape");
	BAD("{\"data\":[{\"id\":\"\\ud83d\",\"status\":\"COMMITTED\"}]}", "a lone high surrogate");
	BAD("{\"data\":[{\"id\":\"\\ude00\",\"status\":\"COMMITTED\"}]}", "a lone low surrogate");
	BAD("{\"data\":[{\"id\":\"b\n1\",\"status\":\"COMMITTED\"}]}", "a raw newline in a string");
	BAD("{\"data\":[{\"id\":\"b1\",\"status\":\"COMMITTED\"}]}\0", "a NUL byte after the value");
	BAD("{\"data\":[],\"x\":\"abc}", "an unterminated string");
	BAD("{data:[]}", "an unquoted key");
	BAD("{\"data\" []}", "a missing colon");

	/* nesting far past the reader's limit */
	strcpy(deep, "{\"data\":[],\"x\":");
	for (i = 0; i < 100; i++)
		strcat(deep, "[");
	for (i = 0; i < 100; i++)
		strcat(deep, "]");
	strcat(deep, "}");
	parse_bad(deep, strlen(deep), "nesting 100 deep");
}

/* ----------------------------------------------------------------------
 * Requests against the fixture
 * ----------------------------------------------------------------------
 */

typedef struct Buf
{
	char	   *data;
	size_t		len;
} Buf;

static size_t
buf_write(char *data, size_t size, size_t nmemb, void *arg)
{
	Buf		   *b = arg;
	size_t		n = size * nmemb;
	char	   *grown = realloc(b->data, b->len + n + 1);

	if (grown == NULL)
		return 0;
	b->data = grown;
	memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

/* fetch: GET base+path with a fresh curl handle; malloc'd body or NULL. */
static char *
fetch(const char *base, const char *path)
{
	char		url[512];
	Buf			b = {NULL, 0};
	CURL	   *c = curl_easy_init();
	CURLcode	rc;

	snprintf(url, sizeof(url), "%s%s", base, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROXY, "");
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, buf_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
	rc = curl_easy_perform(c);
	curl_easy_cleanup(c);
	if (rc != CURLE_OK)
	{
		free(b.data);
		return NULL;
	}
	return b.data ? b.data : strdup("");
}

/* last_has: does the fixture's record of the last request contain s? */
static int
last_has(const char *base, const char *s)
{
	char	   *last = fetch(base, "/last");
	int			found = last != NULL && strstr(last, s) != NULL;

	if (!found)
		diag("no '%s' in /last: %s", s, last ? last : "(fetch failed)");
	free(last);
	return found;
}

/* submit_case: one POST and the outcome and detail it must give. */
static void
submit_case(GridhaHttp *h, const char *tmpl, long timeout_ms,
			GridhaSubmitOutcome want, const char *want_detail, const char *what)
{
	char		detail[256] = "";
	GridhaSubmitOutcome got;

	got = gridha_http_submit(h, tmpl, "svc", "b1", 3, 1, "x", 1, timeout_ms,
							 detail, sizeof(detail));
	if (!ok(got == want && strncmp(detail, want_detail, strlen(want_detail)) == 0,
			"submit %s: %s \"%s\"", what, gridha_http_outcome_name(want), want_detail))
		diag("got %s \"%s\"", gridha_http_outcome_name(got), detail);
}

/* closed_port: a local port nothing listens on (bound, then closed). */
static int
closed_port(void)
{
	struct sockaddr_in a;
	socklen_t	len = sizeof(a);
	int			fd = socket(AF_INET, SOCK_STREAM, 0);
	int			port = 1;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *) &a, sizeof(a)) == 0 &&
		getsockname(fd, (struct sockaddr *) &a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/*
 * status_url: a fixture template answering code with body, ids appended.
 */
static void
status_url(char *out, size_t outlen, const char *base, int code, const char *body)
{
	CURL	   *c = curl_easy_init();
	char	   *enc = curl_easy_escape(c, body, 0);

	snprintf(out, outlen, "%s/status?code=%d&b=%s&ids={batch_ids}", base, code, enc);
	curl_free(enc);
	curl_easy_cleanup(c);
}

static void
test_http(const char *base)
{
	GridhaHttp *h = gridha_http_create();
	char		tmpl[4096];
	char		detail[256];
	char		err[256];
	char	   *conns_before;
	char	   *conns_after;
	GridhaStatusEntry e[NIDS];
	static const char payload[] = {'a', '\0', 'b', '\n', (char) 0xff};
	GridhaSubmitOutcome got;
	int			rc;
	int			i;
	int			k;
	int			untouched;

	if (!ok(h != NULL, "gridha_http_create"))
		return;

	conns_before = fetch(base, "/conns");

	/* outcome per status code */
	snprintf(tmpl, sizeof(tmpl), "%s/submit/202/{service_id}/{batch_id}", base);
	submit_case(h, tmpl, 5000, GRIDHA_SUBMIT_ACCEPTED, "http 202", "202");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/200/{batch_id}", base);
	submit_case(h, tmpl, 5000, GRIDHA_SUBMIT_ACCEPTED, "http 200", "200");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/503/x", base);
	submit_case(h, tmpl, 5000, GRIDHA_SUBMIT_DELAYED, "http 503", "503");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/500/x", base);
	submit_case(h, tmpl, 5000, GRIDHA_SUBMIT_DELAYED, "http 500", "500");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/429/x", base);
	submit_case(h, tmpl, 5000, GRIDHA_SUBMIT_DELAYED, "http 429", "429");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/404/x", base);
	submit_case(h, tmpl, 5000, GRIDHA_SUBMIT_REJECTED, "http 404", "404");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/400/x", base);
	submit_case(h, tmpl, 5000, GRIDHA_SUBMIT_REJECTED, "http 400", "400");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/302/x", base);
	submit_case(h, tmpl, 5000, GRIDHA_SUBMIT_REJECTED, "http 302",
				"302 (the redirect is not followed)");

	/*
	 * One keep-alive connection for all of these: the count grows by that
	 * one and by the connection of the fetch that reads it.
	 */
	conns_after = fetch(base, "/conns");
	if (!ok(conns_before && conns_after && atoi(conns_after) - atoi(conns_before) == 2,
			"eight requests reuse one connection (keep-alive)"))
		diag("connections before %s, after %s", conns_before ? conns_before : "?",
			 conns_after ? conns_after : "?");
	free(conns_before);
	free(conns_after);
	ok(last_has(base, "\"path\": \"/submit/302/x\""), "the redirect target was not requested");

	/* what arrives: URL, headers, payload bytes */
	snprintf(tmpl, sizeof(tmpl), "%s/submit/202/{service_id}/{batch_id}", base);
	got = gridha_http_submit(h, tmpl, "svc/\xc3\xa9 1", "b\r\n1", 9000000000LL, 4,
							 payload, sizeof(payload), 5000, detail, sizeof(detail));
	ok(got == GRIDHA_SUBMIT_ACCEPTED, "submit with awkward ids is accepted (%s)", detail);
	ok(last_has(base, "\"path\": \"/submit/202/svc%2F%C3%A9%201/b%0D%0A1\""),
	   "the URL carries the encoded ids");
	ok(last_has(base, "\"x-gridha-service-id\": \"svc%2F%C3%A9%201\"") &&
	   last_has(base, "\"x-gridha-batch-id\": \"b%0D%0A1\""),
	   "the id headers carry the encoded ids");
	ok(last_has(base, "\"x-gridha-epoch\": \"9000000000\"") &&
	   last_has(base, "\"x-gridha-attempt\": \"4\""),
	   "the epoch and attempt headers");
	ok(last_has(base, "\"content_type\": \"application/octet-stream\""),
	   "Content-Type: application/octet-stream");
	ok(last_has(base, "\"body_len\": 5, \"body_hex\": \"6100620aff\""),
	   "the payload arrives byte for byte, NUL included");
	got = gridha_http_submit(h, tmpl, "s", "b", 1, 1, NULL, 0, 5000, detail, sizeof(detail));
	ok(got == GRIDHA_SUBMIT_ACCEPTED && last_has(base, "\"body_len\": 0,"),
	   "an empty payload is posted empty");

	/* transport failures */
	snprintf(tmpl, sizeof(tmpl), "%s/stall/3/{batch_id}", base);
	submit_case(h, tmpl, 300, GRIDHA_SUBMIT_DELAYED, "timeout after 300 ms", "to a stalled ledger");
	snprintf(tmpl, sizeof(tmpl), "http://127.0.0.1:%d/x/{batch_id}", closed_port());
	submit_case(h, tmpl, 5000, GRIDHA_SUBMIT_DELAYED, "connect: Connection refused",
				"to a closed port");
	submit_case(h, "http://h/{oops}", 5000, GRIDHA_SUBMIT_DELAYED, "bad submit_url: ",
				"to a bad template");

	/* status GETs */
	status_url(tmpl, sizeof(tmpl), base, 200,
			   "{\"data\":[{\"id\":\"b1\",\"status\":\"COMMITTED\"},{\"id\":\"b3\",\"status\":\"PENDING\"}]}");
	fill_entries(e);
	rc = gridha_http_statuses(h, tmpl, e, NIDS, 5000, err, sizeof(err));
	if (!ok(rc == 0 && strcmp(e[0].status, "committed") == 0 && e[1].status[0] == '\0' &&
			strcmp(e[2].status, "pending") == 0 && e[3].status[0] == '\0',
			"statuses: a Sawtooth answer over HTTP"))
		diag("rc %d (%s): [%s] [%s] [%s] [%s]", rc, err,
			 e[0].status, e[1].status, e[2].status, e[3].status);
	ok(last_has(base, "&ids=b1,b2,b3,q%22%5C%C3%A9%F0%9F%98%80%2F\""),
	   "statuses: the ids arrive encoded and comma-joined");

	status_url(tmpl, sizeof(tmpl), base, 200,
			   "[{\"id\":\"b2\",\"status\":{\"statusType\":\"Valid\"}}]");
	fill_entries(e);
	rc = gridha_http_statuses(h, tmpl, e, NIDS, 5000, err, sizeof(err));
	ok(rc == 0 && strcmp(e[1].status, "valid") == 0 && e[0].status[0] == '\0',
	   "statuses: a Splinter answer over HTTP");

	/* failures change nothing */
	for (i = 0; i < 4; i++)
	{
		const char *what;
		const char *want;
		long		timeout = 5000;

		switch (i)
		{
			case 0:
				status_url(tmpl, sizeof(tmpl), base, 503, "{\"data\":[{\"id\":\"b1\",\"status\":\"COMMITTED\"}]}");
				what = "a 503 answer";
				want = "http 503";
				break;
			case 1:
				status_url(tmpl, sizeof(tmpl), base, 200, "{\"data\":[{\"id\":\"b1\",\"status\":\"COMMITTED\"},{\"id\":\"b2\"");
				what = "a truncated body";
				want = "malformed status body";
				break;
			case 2:
				snprintf(tmpl, sizeof(tmpl), "%s/stall?s=3&ids={batch_ids}", base);
				what = "a stalled ledger";
				want = "timeout after 300 ms";
				timeout = 300;
				break;
			default:
				snprintf(tmpl, sizeof(tmpl), "http://127.0.0.1:%d/s?id={batch_ids}", closed_port());
				what = "a closed port";
				want = "connect: Connection refused";
				break;
		}
		fill_entries(e);
		err[0] = '\0';
		rc = gridha_http_statuses(h, tmpl, e, NIDS, timeout, err, sizeof(err));
		untouched = 1;
		for (k = 0; k < NIDS; k++)
			untouched &= strcmp(e[k].status, SENTINEL) == 0;
		if (!ok(rc == -1 && untouched && strncmp(err, want, strlen(want)) == 0,
				"statuses: %s is an error \"%s\" and changes nothing", what, want))
			diag("rc %d, untouched %d, err \"%s\"", rc, untouched, err);
	}

	/* the handle still works after all those failures */
	snprintf(tmpl, sizeof(tmpl), "%s/submit/201/{batch_id}", base);
	submit_case(h, tmpl, 5000, GRIDHA_SUBMIT_ACCEPTED, "http 201", "after failures");

	gridha_http_destroy(h);
}

int
main(int argc, char **argv)
{
	if (!ok(gridha_http_global_init() == 0, "gridha_http_global_init") ||
		!ok(gridha_http_global_init() == 0, "gridha_http_global_init twice"))
		return 1;
	test_check_url();
	test_expand_url();
	test_parse();
	if (argc > 1)
		test_http(argv[1]);
	else
		diag("no fixture URL given: HTTP requests not tested");
	printf("1..%d\n", test_count);
	if (test_failed)
		diag("%d of %d failed", test_failed, test_count);
	return test_failed ? 1 : 0;
}
