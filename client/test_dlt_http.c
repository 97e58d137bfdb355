/*-------------------------------------------------------------------------
 *
 * test_dlt_http.c
 *		Unit test of src/dlt_http.c, printing TAP lines.
 *
 * Without arguments it checks what needs no network: URL templates, their
 * expansion, the outcome of each HTTP code, target headers and the
 * status-body parser of both dialects, malformed bodies included. With the
 * base URL of client/test_http_fixture.py it also checks real requests:
 * outcome per status code, the headers and payload that arrive, timeouts,
 * refused connections, status GETs (split by URL length, halved on 414 and
 * 431), keep-alive, and many POSTs at once through the multi interface.
 *
 *   client/test_dlt_http [http://127.0.0.1:PORT]
 *
 * Words used here:
 *   fixture    the canned-answer HTTP server (client/test_http_fixture.py)
 *   sentinel   a status we put in every entry before a call that must fail,
 *              to prove the call changed nothing
 *   secret     the value of a target header, which must reach the fixture
 *              and must never appear in a detail or error text
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
#include <time.h>
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
	int			rc = gridha_url_check(tmpl, kind, err, sizeof(err));

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
	check_url_case("http://h{batch_id}.example/x", GRIDHA_URL_SUBMIT, 0,
				   "a placeholder in part of the host");
	check_url_case("http://h:{batch_id}/x", GRIDHA_URL_SUBMIT, 0, "a placeholder in the port");
	check_url_case("http://{service_id}@h/x", GRIDHA_URL_SUBMIT, 0,
				   "a placeholder in the user info");
	check_url_case("http://h:0/x", GRIDHA_URL_SUBMIT, 0, "port 0");
	check_url_case("http:/h/x", GRIDHA_URL_SUBMIT, 0, "one slash after the scheme");
	check_url_case("http:h/x", GRIDHA_URL_SUBMIT, 0, "no slash after the scheme");
}

/* expand_case: one expansion against its expected URL. */
static void
expand_case(const char *tmpl, GridhaUrlKind kind, const char *svc, const char *batch,
			const char *const *ids, int n, const char *want, const char *what)
{
	char		err[256] = "";
	char	   *url = gridha_url_expand(tmpl, kind, svc, batch, ids, n, err, sizeof(err));

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
	expand_case("http://h/ledger/batches/{service_id}/{batch_id}", GRIDHA_URL_SUBMIT,
				"..", "admin", NULL, 0,
				"http://h/ledger/batches/%2E%2E/admin",
				"encodes an id of \"..\" so that it names no parent path");
	expand_case("http://h/ledger/batches/{service_id}/{batch_id}", GRIDHA_URL_SUBMIT,
				"s", ".", NULL, 0,
				"http://h/ledger/batches/s/%2E",
				"encodes an id of \".\" so that it names no other path");
	expand_case("http://h/b/{service_id}/{batch_id}", GRIDHA_URL_SUBMIT,
				"...", "a.b", NULL, 0,
				"http://h/b/.../a.b",
				"keeps dots in other ids (not dot-segments)");
}

/* ----------------------------------------------------------------------
 * Outcomes and target headers
 * ----------------------------------------------------------------------
 */

/* outcome_case: the outcome of one code for one target. */
static void
outcome_case(long code, const GridhaHttpTarget *target, const char *target_name,
			 GridhaSubmitOutcome want)
{
	GridhaSubmitOutcome got = gridha_http_outcome_of(code, target);

	if (!ok(got == want, "outcome_of %ld, %s: %s", code, target_name,
			gridha_http_outcome_name(want)))
		diag("got %s", gridha_http_outcome_name(got));
}

static void
test_outcome_of(void)
{
	static const long accepted[] = {200, 201, 202, 204, 299};
	static const long delayed[] = {0, 100, 199, 301, 302, 304, 401, 403, 404, 408,
	409, 414, 429, 431, 500, 502, 503, 599};
	static const int only_409[] = {409};
	GridhaHttpTarget plain = {NULL, 0, NULL, 0};
	GridhaHttpTarget custom = {NULL, 0, only_409, 1};
	GridhaHttpTarget none = {NULL, 0, only_409, 0};
	size_t		i;

	for (i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++)
		outcome_case(accepted[i], NULL, "default codes", GRIDHA_SUBMIT_ACCEPTED);
	outcome_case(400, NULL, "default codes", GRIDHA_SUBMIT_REJECTED);
	outcome_case(422, NULL, "default codes", GRIDHA_SUBMIT_REJECTED);
	for (i = 0; i < sizeof(delayed) / sizeof(delayed[0]); i++)
		outcome_case(delayed[i], NULL, "default codes", GRIDHA_SUBMIT_DELAYED);
	outcome_case(400, &plain, "a target without a list (default codes)",
				 GRIDHA_SUBMIT_REJECTED);
	outcome_case(422, &plain, "a target without a list (default codes)",
				 GRIDHA_SUBMIT_REJECTED);
	outcome_case(409, &custom, "rejecting {409}", GRIDHA_SUBMIT_REJECTED);
	outcome_case(400, &custom, "rejecting {409}", GRIDHA_SUBMIT_DELAYED);
	outcome_case(422, &custom, "rejecting {409}", GRIDHA_SUBMIT_DELAYED);
	outcome_case(201, &custom, "rejecting {409}", GRIDHA_SUBMIT_ACCEPTED);
	outcome_case(400, &none, "an empty list", GRIDHA_SUBMIT_DELAYED);
}

/* header_case: one header line, accepted or refused, its value never quoted. */
static void
header_case(const char *line, int want_ok, const char *what)
{
	char		err[256] = "";
	int			rc = gridha_http_check_header(line, err, sizeof(err));

	if (want_ok)
	{
		if (!ok(rc == 0, "check_header accepts %s", what))
			diag("refused: %s", err);
	}
	else if (!ok(rc == -1 && err[0] != '\0' && strstr(err, "s3cret") == NULL,
				 "check_header refuses %s (%s)", what, err))
		diag("rc %d", rc);
}

static void
test_check_header(void)
{
	header_case("Authorization: Bearer s3cret", 1, "Authorization");
	header_case("X-Api-Key:s3cret", 1, "a header without a space after the colon");
	header_case("X-Empty:", 1, "an empty value");
	header_case("X-Tab: a\tb", 1, "a tab in the value");
	header_case("User-Agent: custom", 1, "User-Agent (gridha's is only a default)");
	header_case("!#$%&'*+-.^_`|~09azAZ: v", 1, "every token character in the name");
	header_case(NULL, 0, "NULL");
	header_case("", 0, "an empty line");
	header_case("Authorization Bearer s3cret", 0, "a line without ':' (value not quoted)");
	header_case("Bad Name: s3cret", 0, "a space in the name");
	header_case("Bad(Name): s3cret", 0, "a '(' in the name");
	header_case("B\xc3\xa4" "d: s3cret", 0, "a non-ASCII name");
	header_case(": s3cret", 0, "an empty name");
	header_case("X-Gridha-Epoch: 5", 0, "X-Gridha-Epoch (gridha's own)");
	header_case("x-gridha-anything: s3cret", 0, "any X-Gridha-* in any case");
	header_case("Content-Type: text/plain", 0, "Content-Type");
	header_case("content-length: 1", 0, "Content-Length");
	header_case("Host: elsewhere", 0, "Host");
	header_case("Expect: 100-continue", 0, "Expect");
	header_case("Transfer-Encoding: chunked", 0, "Transfer-Encoding");
	header_case("X-A: s3cret\r\nX-B: b", 0, "CR LF in the value");
	header_case("X-A: s3cret\nb", 0, "LF in the value");
	header_case("X-A: s3cret\r", 0, "CR at the end of the value");
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
	rc = gridha_json_parse_statuses(body, strlen(body), e, NIDS, err, sizeof(err));
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
	rc = gridha_json_parse_statuses(body, len, e, NIDS, err, sizeof(err));
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

	/* far deeper than any stack could follow */
	{
		size_t		levels = 200000;
		char	   *abyss = malloc(2 * levels + 32);
		char	   *w = abyss;

		w += sprintf(w, "{\"data\":[],\"x\":");
		memset(w, '[', levels);
		w += levels;
		memset(w, ']', levels);
		w += levels;
		strcpy(w, "}");
		parse_bad(abyss, strlen(abyss), "nesting 200000 deep, without running out of stack");
		free(abyss);
	}
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

/* last_lacks: does the fixture's record of the last request lack s? */
static int
last_lacks(const char *base, const char *s)
{
	char	   *last = fetch(base, "/last");
	int			absent = last != NULL && strstr(last, s) == NULL;

	if (!absent)
		diag("'%s' in /last: %s", s, last ? last : "(fetch failed)");
	free(last);
	return absent;
}

/*
 * submit_case: one POST for a target (NULL: none) and the outcome and
 * detail it must give; the detail never carries a secret.
 */
static void
submit_case(GridhaHttp *h, const char *tmpl, const GridhaHttpTarget *target,
			long timeout_ms, GridhaSubmitOutcome want, const char *want_detail,
			const char *what)
{
	char		detail[256] = "";
	long		code = -1;
	long		want_code = strncmp(want_detail, "http ", 5) == 0 ? atol(want_detail + 5) : 0;
	GridhaSubmitOutcome got;

	got = gridha_http_submit(h, tmpl, target, "svc", "b1", 3, 1, "x", 1, timeout_ms,
							 &code, detail, sizeof(detail));
	if (!ok(got == want && strncmp(detail, want_detail, strlen(want_detail)) == 0 &&
			code == want_code && strstr(detail, "s3cret") == NULL,
			"submit %s: %s \"%s\"", what, gridha_http_outcome_name(want), want_detail))
		diag("got %s \"%s\", code %ld", gridha_http_outcome_name(got), detail, code);
}

/* now_ms: a monotonic clock in milliseconds. */
static long long
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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

/* A target's own headers, two of them with a secret, one empty. */
static const char *const secret_headers[] = {
	"Authorization: Bearer s3cret-token", "X-Api-Key: k3y-s3cret", "X-Empty:"
};

/*
 * test_codes: more answers over HTTP; only 2xx accepts and only the
 * target's rejecting codes reject.
 */
static void
test_codes(GridhaHttp *h, const char *base)
{
	static const int only_409[] = {409};
	static const long delayed[] = {301, 401, 403, 414};
	GridhaHttpTarget t409 = {NULL, 0, only_409, 1};
	char		tmpl[512];
	char		what[64];
	size_t		i;

	snprintf(tmpl, sizeof(tmpl), "%s/submit/422/x", base);
	submit_case(h, tmpl, NULL, 5000, GRIDHA_SUBMIT_REJECTED, "http 422", "422 (rejecting by default)");
	for (i = 0; i < sizeof(delayed) / sizeof(delayed[0]); i++)
	{
		char		want[16];

		snprintf(tmpl, sizeof(tmpl), "%s/submit/%ld/x", base, delayed[i]);
		snprintf(want, sizeof(want), "http %ld", delayed[i]);
		snprintf(what, sizeof(what), "%ld (delayed: not a rejecting code)", delayed[i]);
		submit_case(h, tmpl, NULL, 5000, GRIDHA_SUBMIT_DELAYED, want, what);
	}
	snprintf(tmpl, sizeof(tmpl), "%s/submit/409/x", base);
	submit_case(h, tmpl, &t409, 5000, GRIDHA_SUBMIT_REJECTED, "http 409",
				"409 to a target rejecting {409}");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/400/x", base);
	submit_case(h, tmpl, &t409, 5000, GRIDHA_SUBMIT_DELAYED, "http 400",
				"400 to a target rejecting {409} (delayed)");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/422/x", base);
	submit_case(h, tmpl, &t409, 5000, GRIDHA_SUBMIT_DELAYED, "http 422",
				"422 to a target rejecting {409} (delayed)");
}

/*
 * test_headers: a target's headers go with every POST and GET, and their
 * values never show in a detail or error.
 */
static void
test_headers(GridhaHttp *h, const char *base)
{
	static const char *const bad_lines[] = {"X-Ok: 1", "X-Bad: s3cret\r\nX-Injected: 1"};
	GridhaHttpTarget t = {secret_headers, 3, NULL, 0};
	GridhaHttpTarget bad = {bad_lines, 2, NULL, 0};
	GridhaStatusEntry e[NIDS];
	char		tmpl[4096];
	char		err[256];
	int			rc;

	snprintf(tmpl, sizeof(tmpl), "%s/submit/503/{batch_id}", base);
	submit_case(h, tmpl, &t, 5000, GRIDHA_SUBMIT_DELAYED, "http 503",
				"503 with target headers (no secret in the detail)");
	ok(last_has(base, "\"authorization\": \"Bearer s3cret-token\"") &&
	   last_has(base, "\"x-api-key\": \"k3y-s3cret\""),
	   "the target's headers arrive with the POST");
	ok(last_has(base, "\"x-empty\": \"\""), "a target header with an empty value arrives empty");
	ok(last_has(base, "\"x-gridha-batch-id\": \"b1\"") &&
	   last_has(base, "\"content_type\": \"application/octet-stream\""),
	   "gridha's own headers still go with them");

	snprintf(tmpl, sizeof(tmpl), "%s/stall/3/{batch_id}", base);
	submit_case(h, tmpl, &t, 300, GRIDHA_SUBMIT_DELAYED, "timeout after 300 ms",
				"timeout with target headers (no secret in the detail)");

	snprintf(tmpl, sizeof(tmpl), "%s/submit/202/bad-header", base);
	submit_case(h, tmpl, &bad, 5000, GRIDHA_SUBMIT_DELAYED,
				"bad header: header X-Bad has a CR or LF in its value",
				"with a target header carrying CR LF (value not quoted)");
	ok(last_lacks(base, "bad-header"), "a request with a bad target header is not sent");

	status_url(tmpl, sizeof(tmpl), base, 200, "[]");
	fill_entries(e);
	rc = gridha_http_statuses(h, tmpl, &t, e, NIDS, 0, 5000, err, sizeof(err));
	ok(rc == 0 && last_has(base, "\"path\": \"/status?") &&
	   last_has(base, "\"authorization\": \"Bearer s3cret-token\""),
	   "the target's headers arrive with the status GET");
	status_url(tmpl, sizeof(tmpl), base, 503, "[]");
	fill_entries(e);
	rc = gridha_http_statuses(h, tmpl, &t, e, NIDS, 0, 5000, err, sizeof(err));
	ok(rc == -1 && strcmp(err, "http 503") == 0 && strstr(err, "s3cret") == NULL,
	   "a failed status GET with target headers: \"http 503\", no secret (%s)", err);
	fill_entries(e);
	rc = gridha_http_statuses(h, tmpl, &bad, e, NIDS, 0, 5000, err, sizeof(err));
	ok(rc == -1 && strncmp(err, "bad header: ", 12) == 0 && strstr(err, "s3cret") == NULL,
	   "a status GET with a bad target header fails, value not quoted (%s)", err);
}

/* gets_are: the status GETs the fixture saw since the last look, then forget them. */
static int
gets_are(const char *base, const char *want)
{
	char	   *got = fetch(base, "/gets?reset=1");
	int			same = got != NULL && strcmp(got, want) == 0;

	if (!same)
		diag("status GETs %s, want %s", got ? got : "(fetch failed)", want);
	free(got);
	return same;
}

#define MAXIDS 8

/*
 * multi_statuses: as gridha_http_statuses, through a status run of a
 * multi (gridha_http_multi_statuses), waited for; -1 with the run's first
 * failure in err when it failed, -2 when nothing came back.
 */
static int
multi_statuses(const char *tmpl, GridhaStatusEntry *e, int n, size_t max_url_len,
			   char *err, size_t errlen)
{
	GridhaHttpMulti *m = gridha_http_multi_create();
	GridhaHttpDone d[2];
	long long	end = now_ms() + 20000;
	int			got = 0;
	int			tag = 0;

	if (m == NULL || gridha_http_multi_statuses(m, &tag, tmpl, NULL, e, n, max_url_len, 5000) != 0)
	{
		gridha_http_multi_destroy(m);
		return -2;
	}
	while (got == 0 && now_ms() < end)
		got = gridha_http_multi_perform(m, 200, d, 2);
	gridha_http_multi_destroy(m);
	if (got != 1 || d[0].tag != &tag || !d[0].is_status)
		return -2;
	snprintf(err, errlen, "%s", d[0].detail);
	return d[0].failed ? -1 : 0;
}

/*
 * statuses_case: gridha_http_statuses over entries with these ids, every
 * status the sentinel before; the return code, the error's start, each
 * entry's status afterwards and the GETs the fixture saw must be as given.
 * The same again through a status run of a multi, which must send the
 * same GETs, in the same order, and end the same.
 */
static void
statuses_case(GridhaHttp *h, const char *base, const char *tmpl, const char *const *ids,
			  int n, size_t max_url_len, int want_rc, const char *want_err,
			  const char *const *want_status, const char *want_gets, const char *what)
{
	GridhaStatusEntry e[MAXIDS];
	char		err[256] = "";
	int			rc;
	int			same;
	int			i;
	int			multi;

	for (multi = 0; multi < 2; multi++)
	{
		for (i = 0; i < n; i++)
		{
			e[i].batch_id = ids[i];
			strcpy(e[i].status, SENTINEL);
		}
		err[0] = '\0';
		free(fetch(base, "/gets?reset=1"));
		if (multi)
			rc = multi_statuses(tmpl, e, n, max_url_len, err, sizeof(err));
		else
			rc = gridha_http_statuses(h, tmpl, NULL, e, n, max_url_len, 5000, err, sizeof(err));
		same = 1;
		for (i = 0; i < n; i++)
			same &= strcmp(e[i].status, want_status[i]) == 0;
		if (!ok(rc == want_rc && strncmp(err, want_err, strlen(want_err)) == 0 && same &&
				gets_are(base, want_gets), "statuses%s: %s", multi ? " (multi)" : "", what))
		{
			diag("rc %d (%s)", rc, err);
			for (i = 0; i < n; i++)
				diag("  %s: %s (want %s)", ids[i], e[i].status, want_status[i]);
		}
	}
}

/*
 * test_statuses_split: many ids over several GETs, by URL length and by
 * halving on 414 and 431; a failed GET leaves only its own entries alone.
 */
static void
test_statuses_split(GridhaHttp *h, const char *base)
{
	static const char *const ids[] = {"b1", "b2", "b3", "b4", "b5", "b6"};
	static const char *const with_long[] = {
		"b1", "a-very-long-batch-id-that-fits-in-no-url", "b3"
	};
	static const char *const with_comma[] = {"b1", "x,y", "b3", "b4", "b5"};
	static const char *const all[] = {
		"committed", "committed", "committed", "committed", "committed", "committed"
	};
	static const char *const first_failed[] = {SENTINEL, SENTINEL, "committed", "committed"};
	static const char *const middle_failed[] = {
		"committed", "committed", SENTINEL, SENTINEL, "committed", "committed"
	};
	static const char *const none[] = {SENTINEL, SENTINEL};
	char		tmpl[512];
	size_t		two;			/* a URL length for which two ids fit, not three */

	snprintf(tmpl, sizeof(tmpl), "%s/limit?k=100&ids={batch_ids}", base);
	two = strlen(tmpl) - strlen("{batch_ids}") + strlen("b1,b2");
	statuses_case(h, base, tmpl, ids, 5, two, 0, "", all,
				  "{\"count\": 3, \"ids\": [2, 2, 1]}",
				  "max_url_len for two ids: 5 ids in GETs of 2, 2 and 1");
	statuses_case(h, base, tmpl, with_long, 3, two, 0, "", all,
				  "{\"count\": 3, \"ids\": [1, 1, 1]}",
				  "an id longer than max_url_len goes alone");
	statuses_case(h, base, tmpl, ids, 5, 0, 0, "", all,
				  "{\"count\": 1, \"ids\": [5]}", "max_url_len 0: one GET for all");
	statuses_case(h, base, tmpl, with_comma, 5, 0, 0, "", all,
				  "{\"count\": 3, \"ids\": [1, 1, 3]}",
				  "an id holding a comma goes alone, and splits the ids around it");

	snprintf(tmpl, sizeof(tmpl), "%s/limit?k=2&ids={batch_ids}", base);
	statuses_case(h, base, tmpl, ids, 5, 0, 0, "", all,
				  "{\"count\": 5, \"ids\": [5, 2, 3, 1, 2]}",
				  "414 for more than 2 ids: halved until it fits");
	snprintf(tmpl, sizeof(tmpl), "%s/limit?k=1&code=431&ids={batch_ids}", base);
	statuses_case(h, base, tmpl, ids, 4, 0, 0, "", all,
				  "{\"count\": 7, \"ids\": [4, 2, 1, 1, 2, 1, 1]}",
				  "431 for more than 1 id: halved down to single ids");
	snprintf(tmpl, sizeof(tmpl), "%s/limit?k=0&ids={batch_ids}", base);
	statuses_case(h, base, tmpl, ids, 2, 0, -1, "http 414", none,
				  "{\"count\": 3, \"ids\": [2, 1, 1]}",
				  "414 even for a single id: an error, nothing changed");

	snprintf(tmpl, sizeof(tmpl), "%s/limit?k=100&fail=b1&ids={batch_ids}", base);
	two = strlen(tmpl) - strlen("{batch_ids}") + strlen("b1,b2");
	statuses_case(h, base, tmpl, ids, 4, two, -1, "http 503", first_failed,
				  "{\"count\": 2, \"ids\": [2, 2]}",
				  "the first of two GETs fails: its entries untouched, the second's applied");
	snprintf(tmpl, sizeof(tmpl), "%s/limit?k=100&fail=b3&ids={batch_ids}", base);
	statuses_case(h, base, tmpl, ids, 6, two, -1, "http 503", middle_failed,
				  "{\"count\": 3, \"ids\": [2, 2, 2]}",
				  "the middle one of three GETs fails: exactly its entries untouched");
}

/* ----------------------------------------------------------------------
 * Many POSTs at once
 * ----------------------------------------------------------------------
 */

static int	tags[16];

/* tag_index: which of tags a result's tag points to, or -1. */
static int
tag_index(const GridhaHttpDone *d)
{
	int			i;

	for (i = 0; i < 16; i++)
	{
		if (d->tag == &tags[i])
			return i;
	}
	return -1;
}

/*
 * multi_drain: perform until nothing is pending or limit_ms has passed;
 * the results go into out (up to max_out); returns how many.
 */
static int
multi_drain(GridhaHttpMulti *m, GridhaHttpDone *out, int max_out, long limit_ms)
{
	long long	end = now_ms() + limit_ms;
	int			n = 0;

	while (gridha_http_multi_pending(m) > 0 && now_ms() < end)
	{
		GridhaHttpDone d[4];
		int			k = gridha_http_multi_perform(m, 200, d, 4);
		int			i;

		for (i = 0; i < k; i++)
		{
			if (n < max_out)
				out[n++] = d[i];
		}
	}
	return n;
}

/* multi_one: one POST through m, waited for; its result. */
static GridhaHttpDone
multi_one(GridhaHttpMulti *m, const char *tmpl, const GridhaHttpTarget *target,
		  const void *payload, size_t len)
{
	GridhaHttpDone d;

	memset(&d, 0, sizeof(d));
	gridha_http_multi_submit(m, &tags[0], tmpl, target, "svc", "b1", 2, 1, payload, len, 5000);
	if (multi_drain(m, &d, 1, 10000) != 1)
		strcpy(d.detail, "(nothing handed back)");
	return d;
}

static void
test_multi(const char *base)
{
	GridhaHttpMulti *m = gridha_http_multi_create();
	GridhaHttpMulti *m2;
	GridhaHttpDone d[16];
	GridhaHttpDone one;
	GridhaHttpTarget t = {secret_headers, 3, NULL, 0};
	int			codes[1] = {409};
	GridhaHttpTarget t409 = {NULL, 0, codes, 1};
	char		tmpl[512];
	char		payload[4];
	char		batch[16];
	char	   *conns_before;
	char	   *conns_after;
	int			seen[16];
	long long	t0;
	long long	elapsed;
	int			good;
	int			n;
	int			i;

	if (!ok(m != NULL, "gridha_http_multi_create"))
		return;

	/* eight POSTs that each take a second, at once */
	snprintf(tmpl, sizeof(tmpl), "%s/stall/1/{batch_id}", base);
	t0 = now_ms();
	for (i = 0; i < 8; i++)
	{
		snprintf(batch, sizeof(batch), "m%d", i);
		gridha_http_multi_submit(m, &tags[i], tmpl, NULL, "svc", batch, 1, 1, "p", 1, 5000);
	}
	ok(gridha_http_multi_pending(m) == 8, "multi: 8 POSTs pending");
	n = multi_drain(m, d, 16, 10000);
	elapsed = now_ms() - t0;
	memset(seen, 0, sizeof(seen));
	good = n == 8;
	for (i = 0; i < n; i++)
	{
		int			k = tag_index(&d[i]);

		if (k < 0 || k >= 8 || seen[k]++ || d[i].outcome != GRIDHA_SUBMIT_ACCEPTED ||
			d[i].http_code != 202 || strcmp(d[i].detail, "http 202") != 0)
			good = 0;
	}
	if (!ok(good, "multi: the 8 come back once each, with their own tags, accepted \"http 202\""))
		diag("%d handed back", n);
	if (!ok(elapsed < 4000 && gridha_http_multi_pending(m) == 0,
			"multi: 8 POSTs to a ledger that stalls each for 1 s all finish in %lld ms "
			"(under 4 s: they run at the same time)", elapsed))
		diag("pending %d", gridha_http_multi_pending(m));

	/* each its own outcome */
	snprintf(tmpl, sizeof(tmpl), "%s/submit/202/{batch_id}", base);
	gridha_http_multi_submit(m, &tags[0], tmpl, NULL, "svc", "o0", 1, 1, "p", 1, 5000);
	snprintf(tmpl, sizeof(tmpl), "%s/submit/400/{batch_id}", base);
	gridha_http_multi_submit(m, &tags[1], tmpl, NULL, "svc", "o1", 1, 1, "p", 1, 5000);
	snprintf(tmpl, sizeof(tmpl), "%s/submit/503/{batch_id}", base);
	gridha_http_multi_submit(m, &tags[2], tmpl, NULL, "svc", "o2", 1, 1, "p", 1, 5000);
	snprintf(tmpl, sizeof(tmpl), "%s/stall/3/{batch_id}", base);
	gridha_http_multi_submit(m, &tags[3], tmpl, NULL, "svc", "o3", 1, 1, "p", 1, 300);
	n = multi_drain(m, d, 16, 10000);
	memset(seen, 0, sizeof(seen));
	for (i = 0; i < n; i++)
	{
		int			k = tag_index(&d[i]);

		if (k < 0 || k > 3)
			continue;
		seen[k]++;
		switch (k)
		{
			case 0:
				seen[k] += d[i].outcome == GRIDHA_SUBMIT_ACCEPTED && d[i].http_code == 202;
				break;
			case 1:
				seen[k] += d[i].outcome == GRIDHA_SUBMIT_REJECTED && d[i].http_code == 400 &&
					strcmp(d[i].detail, "http 400") == 0;
				break;
			case 2:
				seen[k] += d[i].outcome == GRIDHA_SUBMIT_DELAYED && d[i].http_code == 503;
				break;
			default:
				seen[k] += d[i].outcome == GRIDHA_SUBMIT_DELAYED && d[i].http_code == 0 &&
					strcmp(d[i].detail, "timeout after 300 ms") == 0;
				break;
		}
	}
	if (!ok(n == 4 && seen[0] == 2 && seen[1] == 2 && seen[2] == 2 && seen[3] == 2,
			"multi: each tag with its own outcome: 202 accepted, 400 rejected, "
			"503 delayed, timeout delayed"))
		for (i = 0; i < n; i++)
			diag("tag %d: %s %ld \"%s\"", tag_index(&d[i]),
				 gridha_http_outcome_name(d[i].outcome), d[i].http_code, d[i].detail);

	/* a POST that cannot start */
	gridha_http_multi_submit(m, &tags[5], "http://h/{oops}", NULL, "svc", "b", 1, 1, "p", 1, 5000);
	ok(gridha_http_multi_pending(m) == 1, "multi: a bad template is pending until handed back");
	t0 = now_ms();
	n = gridha_http_multi_perform(m, 5000, d, 4);
	elapsed = now_ms() - t0;
	if (!ok(n == 1 && tag_index(&d[0]) == 5 && d[0].outcome == GRIDHA_SUBMIT_DELAYED &&
			d[0].http_code == 0 && strncmp(d[0].detail, "bad submit_url: ", 16) == 0 &&
			elapsed < 1000 && gridha_http_multi_pending(m) == 0,
			"multi: a bad template comes back at once, delayed \"bad submit_url: ...\""))
		diag("n %d, %s \"%s\", %lld ms", n, gridha_http_outcome_name(d[0].outcome),
			 d[0].detail, elapsed);

	/* the target's codes and headers; the payload copied at submit */
	snprintf(tmpl, sizeof(tmpl), "%s/submit/409/{batch_id}", base);
	gridha_http_multi_submit(m, &tags[0], tmpl, &t409, "svc", "b1", 2, 1, "p", 1, 5000);
	codes[0] = 400;
	n = multi_drain(m, d, 1, 10000);
	ok(n == 1 && d[0].outcome == GRIDHA_SUBMIT_REJECTED && d[0].http_code == 409,
	   "multi: 409 to a target rejecting {409} is rejected (its codes copied at submit)");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/202/{batch_id}", base);
	memcpy(payload, "a\0b", 4);
	gridha_http_multi_submit(m, &tags[0], tmpl, &t, "svc", "b1", 2, 1, payload, 3, 5000);
	memset(payload, 'z', sizeof(payload));
	n = multi_drain(m, d, 1, 10000);
	ok(n == 1 && d[0].outcome == GRIDHA_SUBMIT_ACCEPTED &&
	   last_has(base, "\"body_len\": 3, \"body_hex\": \"610062\""),
	   "multi: the payload is copied at submit, NUL included");
	ok(last_has(base, "\"authorization\": \"Bearer s3cret-token\"") &&
	   last_has(base, "\"x-gridha-epoch\": \"2\""),
	   "multi: the target's headers and gridha's own arrive");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/503/{batch_id}", base);
	one = multi_one(m, tmpl, &t, "p", 1);
	ok(one.outcome == GRIDHA_SUBMIT_DELAYED && strcmp(one.detail, "http 503") == 0,
	   "multi: 503 with target headers: delayed \"http 503\", no secret");

	/* what each end says of the ledger's load */
	good = one.load == GRIDHA_LOAD_BUSY && one.elapsed_ms >= 0;
	snprintf(tmpl, sizeof(tmpl), "%s/submit/202/{batch_id}", base);
	one = multi_one(m, tmpl, NULL, "p", 1);
	good &= one.load == GRIDHA_LOAD_ANSWERED;
	snprintf(tmpl, sizeof(tmpl), "%s/stall/3/{batch_id}", base);
	gridha_http_multi_submit(m, &tags[0], tmpl, NULL, "svc", "lt", 1, 1, "p", 1, 300);
	good &= multi_drain(m, d, 1, 10000) == 1 && d[0].load == GRIDHA_LOAD_TIMEOUT &&
		d[0].elapsed_ms >= 250;
	/* a port nobody listens on (the fixture's, plus nothing: port 1) */
	gridha_http_multi_submit(m, &tags[0], "http://127.0.0.1:1/x/{batch_id}", NULL, "svc", "lr",
							 1, 1, "p", 1, 2000);
	good &= multi_drain(m, d, 1, 10000) == 1 && d[0].load == GRIDHA_LOAD_REFUSED &&
		d[0].http_code == 0 && !d[0].is_status;
	if (!ok(good, "multi: load signals: 503 busy, 202 answered, a timeout, a refused connection"))
		diag("last: %s, %ld ms, \"%s\"", gridha_http_load_name(d[0].load), d[0].elapsed_ms,
			 d[0].detail);
	{
		GridhaStatusEntry se[1] = {{"x1", SENTINEL}};

		gridha_http_multi_statuses(m, &tags[3], "http://127.0.0.1:1/s?ids={batch_ids}", NULL,
								   se, 1, 0, 2000);
		n = multi_drain(m, d, 1, 10000);
		if (!ok(n == 1 && d[0].is_status && d[0].failed && d[0].tag == &tags[3] &&
				d[0].load == GRIDHA_LOAD_REFUSED && d[0].http_code == 0 &&
				strncmp(d[0].detail, "connect: ", 9) == 0 && strcmp(se[0].status, SENTINEL) == 0,
				"multi: a status run to a port nobody listens on fails, refused, its entry untouched"))
			diag("n %d, failed %d, %s, \"%s\"", n, d[0].failed, gridha_http_load_name(d[0].load),
				 d[0].detail);
	}

	/* one connection for POSTs one after the other */
	m2 = gridha_http_multi_create();
	conns_before = fetch(base, "/conns");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/202/{batch_id}", base);
	good = 1;
	for (i = 0; i < 3; i++)
		good &= multi_one(m2, tmpl, NULL, "p", 1).outcome == GRIDHA_SUBMIT_ACCEPTED;
	conns_after = fetch(base, "/conns");
	if (!ok(good && conns_before && conns_after &&
			atoi(conns_after) - atoi(conns_before) == 2,
			"multi: three POSTs one after the other reuse one connection"))
		diag("connections before %s, after %s", conns_before ? conns_before : "?",
			 conns_after ? conns_after : "?");
	free(conns_before);
	free(conns_after);

	/* perform waits no longer than asked */
	snprintf(tmpl, sizeof(tmpl), "%s/stall/2/{batch_id}", base);
	gridha_http_multi_submit(m2, &tags[0], tmpl, NULL, "svc", "w", 1, 1, "p", 1, 5000);
	t0 = now_ms();
	n = gridha_http_multi_perform(m2, 300, d, 4);
	elapsed = now_ms() - t0;
	ok(n == 0 && elapsed >= 250 && elapsed < 2000,
	   "multi: perform(300 ms) with nothing finishing returns after %lld ms, empty-handed",
	   elapsed);
	t0 = now_ms();
	n = gridha_http_multi_perform(m2, 0, d, 4);
	elapsed = now_ms() - t0;
	ok(n == 0 && elapsed < 200, "multi: perform(0) does not wait (%lld ms)", elapsed);

	/* destroyed with transfers in flight */
	gridha_http_multi_submit(m2, &tags[1], tmpl, NULL, "svc", "w1", 1, 1, "p", 1, 5000);
	gridha_http_multi_submit(m2, &tags[2], "http://h/{oops}", NULL, "svc", "w2", 1, 1, "p", 1, 5000);
	gridha_http_multi_perform(m2, 0, d, 0);
	ok(gridha_http_multi_pending(m2) == 3, "multi: 3 pending before destroy");
	gridha_http_multi_destroy(m2);
	ok(1, "multi: destroyed with transfers in flight");

	gridha_http_multi_destroy(m);
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
	submit_case(h, tmpl, NULL, 5000, GRIDHA_SUBMIT_ACCEPTED, "http 202", "202");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/200/{batch_id}", base);
	submit_case(h, tmpl, NULL, 5000, GRIDHA_SUBMIT_ACCEPTED, "http 200", "200");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/503/x", base);
	submit_case(h, tmpl, NULL, 5000, GRIDHA_SUBMIT_DELAYED, "http 503", "503");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/500/x", base);
	submit_case(h, tmpl, NULL, 5000, GRIDHA_SUBMIT_DELAYED, "http 500", "500");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/429/x", base);
	submit_case(h, tmpl, NULL, 5000, GRIDHA_SUBMIT_DELAYED, "http 429", "429");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/404/x", base);
	submit_case(h, tmpl, NULL, 5000, GRIDHA_SUBMIT_DELAYED, "http 404",
				"404 (delayed: not a rejecting code)");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/400/x", base);
	submit_case(h, tmpl, NULL, 5000, GRIDHA_SUBMIT_REJECTED, "http 400", "400");
	snprintf(tmpl, sizeof(tmpl), "%s/submit/302/x", base);
	submit_case(h, tmpl, NULL, 5000, GRIDHA_SUBMIT_DELAYED, "http 302",
				"302 (delayed, the redirect is not followed)");

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
	got = gridha_http_submit(h, tmpl, NULL, "svc/\xc3\xa9 1", "b\r\n1", 9000000000LL, 4,
							 payload, sizeof(payload), 5000, NULL, detail, sizeof(detail));
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
	got = gridha_http_submit(h, tmpl, NULL, "s", "b", 1, 1, NULL, 0, 5000, NULL,
							 detail, sizeof(detail));
	ok(got == GRIDHA_SUBMIT_ACCEPTED && last_has(base, "\"body_len\": 0,"),
	   "an empty payload is posted empty");

	/* transport failures */
	snprintf(tmpl, sizeof(tmpl), "%s/stall/3/{batch_id}", base);
	submit_case(h, tmpl, NULL, 300, GRIDHA_SUBMIT_DELAYED, "timeout after 300 ms", "to a stalled ledger");
	snprintf(tmpl, sizeof(tmpl), "http://127.0.0.1:%d/x/{batch_id}", closed_port());
	submit_case(h, tmpl, NULL, 5000, GRIDHA_SUBMIT_DELAYED, "connect: Connection refused",
				"to a closed port");
	submit_case(h, "http://h/{oops}", NULL, 5000, GRIDHA_SUBMIT_DELAYED, "bad submit_url: ",
				"to a bad template");

	/* status GETs */
	status_url(tmpl, sizeof(tmpl), base, 200,
			   "{\"data\":[{\"id\":\"b1\",\"status\":\"COMMITTED\"},{\"id\":\"b3\",\"status\":\"PENDING\"}]}");
	fill_entries(e);
	rc = gridha_http_statuses(h, tmpl, NULL, e, NIDS, 0, 5000, err, sizeof(err));
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
	rc = gridha_http_statuses(h, tmpl, NULL, e, NIDS, 0, 5000, err, sizeof(err));
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
		rc = gridha_http_statuses(h, tmpl, NULL, e, NIDS, 0, timeout, err, sizeof(err));
		untouched = 1;
		for (k = 0; k < NIDS; k++)
			untouched &= strcmp(e[k].status, SENTINEL) == 0;
		if (!ok(rc == -1 && untouched && strncmp(err, want, strlen(want)) == 0,
				"statuses: %s is an error \"%s\" and changes nothing", what, want))
			diag("rc %d, untouched %d, err \"%s\"", rc, untouched, err);
	}

	/* the handle still works after all those failures */
	snprintf(tmpl, sizeof(tmpl), "%s/submit/201/{batch_id}", base);
	submit_case(h, tmpl, NULL, 5000, GRIDHA_SUBMIT_ACCEPTED, "http 201", "after failures");

	test_codes(h, base);
	test_headers(h, base);
	test_statuses_split(h, base);

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
	test_outcome_of();
	test_check_header();
	test_parse();
	if (argc > 1)
	{
		test_http(argv[1]);
		test_multi(argv[1]);
	}
	else
		diag("no fixture URL given: HTTP requests not tested");
	printf("1..%d\n", test_count);
	if (test_failed)
		diag("%d of %d failed", test_failed, test_count);
	return test_failed ? 1 : 0;
}
