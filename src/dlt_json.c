/*-------------------------------------------------------------------------
 *
 * dlt_json.c
 *		Reading a ledger's status body: gridha_json_parse_statuses.
 *
 * The body is read by PostgreSQL's own JSON parser (common/jsonapi.h), in
 * three passes: the lexer alone bounds the nesting (the parser recurses
 * once per level, and only a server checks its stack); the parser without
 * callbacks checks the syntax (with callbacks, a syntax error would leave
 * a key it had copied for them unfreed in a client program); and the
 * parser with the callbacks below, which pick out the entries of either
 * dialect. Nothing is written into the caller's entries until the whole
 * body has been read and found well-formed, so a malformed body is never
 * partly applied.
 *
 * The file is compiled twice: into the extension (the background worker
 * calls it outside any transaction, so there it runs in a private memory
 * context and turns any error into a -1 return), and with -DFRONTEND into
 * the client programs, linked with libpgcommon and libpgport.
 *
 * Words used here:
 *   role       what a value must be, decided by where it stands: the top
 *              value, the Sawtooth "data" array, an entry, an "id", a
 *              status word, a Splinter status object, or a value of no
 *              interest (only checked for syntax); every open object or
 *              array keeps its role on a stack, one per nesting level
 *   found      the status word the body gives each entry, kept aside
 *              until the body has been read to its end
 *
 *-------------------------------------------------------------------------
 */
#ifdef FRONTEND
#include "postgres_fe.h"
#else
#include "postgres.h"
#endif

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#ifndef FRONTEND
#include "utils/memutils.h"
#endif

#include "compat.h"
#include "dlt_json.h"

/* Nesting depth a status body may have; deeper is refused. */
#define JSON_MAX_DEPTH		64

/*
 * The syntax pass cannot stop the recursive parser, nor can the callbacks
 * before 16: the first pass, by the lexer alone, refuses a body nested
 * deeper than this before the parser sees it, so that no body can exhaust
 * the stack of a client program. Anything deeper than JSON_MAX_DEPTH and
 * within this is refused by the callbacks.
 */
#define JSON_STACK_GUARD	(16 * JSON_MAX_DEPTH)

/* The five status words report_status takes, in the case we hand out. */
static const char *const json_status_words[] = {
	"pending", "valid", "committed", "invalid", "unknown"
};

typedef enum JsonRole
{
	ROLE_TOP,					/* the whole body: object or array */
	ROLE_DATA,					/* Sawtooth "data": the entries array */
	ROLE_ENTRY,					/* an element of the entries: an object */
	ROLE_STATUS_OBJECT,			/* Splinter "status": an object */
	ROLE_ID,					/* an entry's "id": a string */
	ROLE_WORD,					/* Sawtooth "status", Splinter "statusType" */
	ROLE_SKIP					/* anything else */
} JsonRole;

/* Why a value cannot stand where it does, by its role. */
static const char *const json_role_wants[] = {
	[ROLE_TOP] = "expected an object or an array",
	[ROLE_DATA] = "\"data\" is not an array",
	[ROLE_ENTRY] = "an entry is not an object",
	[ROLE_STATUS_OBJECT] = "\"status\" is not an object",
	[ROLE_ID] = "\"id\" is not a string",
	[ROLE_WORD] = "a status is not a string",
	[ROLE_SKIP] = "",
};

/* A few words on each syntax error the parser reports. */
static const char *const json_error_texts[] = {
	[JSON_ESCAPING_INVALID] = "bad escape in a string",
	[JSON_ESCAPING_REQUIRED] = "control character in a string",
	[JSON_EXPECTED_ARRAY_FIRST] = "expected a value or ']'",
	[JSON_EXPECTED_ARRAY_NEXT] = "expected ',' or ']'",
	[JSON_EXPECTED_COLON] = "expected ':'",
	[JSON_EXPECTED_END] = "trailing data after the JSON value",
	[JSON_EXPECTED_JSON] = "expected a JSON value",
	[JSON_EXPECTED_MORE] = "unexpected end of body",
	[JSON_EXPECTED_OBJECT_FIRST] = "expected a key or '}'",
	[JSON_EXPECTED_OBJECT_NEXT] = "expected ',' or '}'",
	[JSON_EXPECTED_STRING] = "expected a string",
	[JSON_INVALID_TOKEN] = "not a JSON token",
	[JSON_UNICODE_CODE_POINT_ZERO] = "\\u0000 in a string",
	[JSON_UNICODE_ESCAPE_FORMAT] = "bad \\u escape",
	[JSON_UNICODE_HIGH_SURROGATE] = "high surrogate after a high surrogate",
	[JSON_UNICODE_LOW_SURROGATE] = "surrogate without its other half",
};

typedef struct JsonStatusParse
{
	JsonLexContext *lex;
	const GridhaStatusEntry *entries;
	int			n;
	const char **found;			/* per entry: its word, or NULL */
	bool		splinter;		/* the dialect, known from the top value */
	JsonRole	next;			/* role of the value about to start */
	JsonRole	open[JSON_MAX_DEPTH];	/* roles of the open containers */
	int			depth;
	bool		seen_data;
	/* the entry being read */
	bool		seen_id;
	bool		seen_status;
	bool		seen_type;
	char	   *id;
	const char *word;
	/* the first thing found wrong, if any */
	bool		failed;
	char	   *err;
	size_t		errlen;
} JsonStatusParse;

/*
 * json_set_err: format a message into a caller's buffer (which may be NULL
 * or empty), with every byte outside printable ASCII replaced by '?': the
 * text may quote a piece of the body.
 */
static void
pg_attribute_printf(3, 4)
json_set_err(char *err, size_t errlen, const char *fmt,...)
{
	va_list		ap;
	char	   *p;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	for (p = err; *p; p++)
	{
		if ((unsigned char) *p < 0x20 || (unsigned char) *p >= 0x7f)
			*p = '?';
	}
}

/*
 * json_offset: the byte of the body where the lexer stands.
 */
static long
json_offset(JsonLexContext *lex)
{
	if (lex->token_start != NULL)
		return (long) (lex->token_start - lex->input);
	if (lex->token_terminator != NULL)
		return (long) (lex->token_terminator - lex->input);
	return 0;
}

/*
 * json_syntax_error: err says what syntax error the parser found, where.
 */
static void
json_syntax_error(JsonLexContext *lex, JsonParseErrorType error, char *err, size_t errlen)
{
	const char *text = NULL;

	if ((int) error >= 0 && (int) error < (int) lengthof(json_error_texts))
		text = json_error_texts[error];
	json_set_err(err, errlen, "malformed status body at byte %ld: %s",
				 json_offset(lex), text ? text : "not valid JSON");
}

/*
 * json_fail: record the first thing found wrong with the body, with the
 * byte where the lexer stands; later ones are ignored.
 */
static void
pg_attribute_printf(2, 3)
json_fail(JsonStatusParse *st, const char *fmt,...)
{
	char		why[160];
	va_list		ap;

	if (st->failed)
		return;
	st->failed = true;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	json_set_err(st->err, st->errlen, "malformed status body at byte %ld: %s",
				 json_offset(st->lex), why);
}

/*
 * json_open: an object or array starts; it must be one where it stands
 * (the top value, which decides the dialect, may be either), and it may
 * not nest too deep. Its role goes on the stack.
 */
static void
json_open(JsonStatusParse *st, bool object)
{
	JsonRole	role = st->next;

	if (st->failed)
		return;
	if (st->depth >= JSON_MAX_DEPTH)
		json_fail(st, "nested deeper than %d", JSON_MAX_DEPTH);
	else if (role == ROLE_TOP)
		st->splinter = !object;
	else if ((role == ROLE_DATA && object) ||
			 ((role == ROLE_ENTRY || role == ROLE_STATUS_OBJECT) && !object) ||
			 role == ROLE_ID || role == ROLE_WORD)
		json_fail(st, "%s", json_role_wants[role]);
	if (st->failed)
		return;
	if (role == ROLE_ENTRY)
	{
		st->seen_id = st->seen_status = false;
		st->id = NULL;
		st->word = NULL;
	}
	if (role == ROLE_STATUS_OBJECT)
		st->seen_type = false;
	st->open[st->depth++] = role;
}

/*
 * json_object_start, json_array_start: callbacks for '{' and '['.
 */
static JSON_CB_RESULT
json_object_start(void *state)
{
	JsonStatusParse *st = state;

	json_open(st, true);
	JSON_CB_RETURN(st->failed);
}

static JSON_CB_RESULT
json_array_start(void *state)
{
	JsonStatusParse *st = state;

	json_open(st, false);
	JSON_CB_RETURN(st->failed);
}

/*
 * json_object_end: '}' closes the innermost object; an entry that is
 * complete is recorded in found for every entry asked for with its id.
 */
static JSON_CB_RESULT
json_object_end(void *state)
{
	JsonStatusParse *st = state;
	JsonRole	role;
	int			i;

	if (st->failed)
		JSON_CB_RETURN(st->failed);
	role = st->open[--st->depth];
	if (role == ROLE_TOP && !st->seen_data)
		json_fail(st, "object without \"data\"");
	else if (role == ROLE_STATUS_OBJECT && !st->seen_type)
		json_fail(st, "status object without \"statusType\"");
	else if (role == ROLE_ENTRY && (st->id == NULL || st->word == NULL))
		json_fail(st, "entry without %s", st->id == NULL ? "\"id\"" : "\"status\"");
	else if (role == ROLE_ENTRY)
	{
		for (i = 0; i < st->n; i++)
		{
			if (st->entries[i].batch_id != NULL &&
				strcmp(st->entries[i].batch_id, st->id) == 0)
				st->found[i] = st->word;
		}
		pfree(st->id);
		st->id = NULL;
	}
	JSON_CB_RETURN(st->failed);
}

/*
 * json_array_end: ']' closes the innermost array.
 */
static JSON_CB_RESULT
json_array_end(void *state)
{
	JsonStatusParse *st = state;

	if (!st->failed)
		st->depth--;
	JSON_CB_RETURN(st->failed);
}

/*
 * json_field_start: a key of the innermost object; sets the role of its
 * value, and refuses a key of interest that comes twice.
 */
static JSON_CB_RESULT
json_field_start(void *state, char *fname, bool isnull pg_attribute_unused())
{
	JsonStatusParse *st = state;
	JsonRole	in = st->failed ? ROLE_SKIP : st->open[st->depth - 1];
	bool	   *seen = NULL;

	st->next = ROLE_SKIP;
	if (in == ROLE_TOP && strcmp(fname, "data") == 0)
	{
		seen = &st->seen_data;
		st->next = ROLE_DATA;
	}
	else if (in == ROLE_ENTRY && strcmp(fname, "id") == 0)
	{
		seen = &st->seen_id;
		st->next = ROLE_ID;
	}
	else if (in == ROLE_ENTRY && strcmp(fname, "status") == 0)
	{
		seen = &st->seen_status;
		st->next = st->splinter ? ROLE_STATUS_OBJECT : ROLE_WORD;
	}
	else if (in == ROLE_STATUS_OBJECT && strcmp(fname, "statusType") == 0)
	{
		seen = &st->seen_type;
		st->next = ROLE_WORD;
	}
	if (seen != NULL && *seen)
		json_fail(st, "duplicate \"%s\"", fname);
	else if (seen != NULL)
		*seen = true;
	pfree(fname);
	JSON_CB_RETURN(st->failed);
}

/*
 * json_element_start: an element of the innermost array; an element of
 * the entries is an entry.
 */
static JSON_CB_RESULT
json_element_start(void *state, bool isnull pg_attribute_unused())
{
	JsonStatusParse *st = state;
	JsonRole	in = st->failed ? ROLE_SKIP : st->open[st->depth - 1];

	st->next = (in == ROLE_DATA || (in == ROLE_TOP && st->splinter)) ? ROLE_ENTRY : ROLE_SKIP;
	JSON_CB_RETURN(st->failed);
}

/*
 * json_scalar: a string, number or literal; keeps an entry's id and maps
 * its status word to one of ours (any case), refuses a scalar where a
 * container must be.
 */
static JSON_CB_RESULT
json_scalar(void *state, char *token, JsonTokenType type)
{
	JsonStatusParse *st = state;
	int			i;

	if (st->failed || st->next == ROLE_SKIP)
		pfree(token);
	else if ((st->next != ROLE_ID && st->next != ROLE_WORD) || type != JSON_TOKEN_STRING)
	{
		json_fail(st, "%s", json_role_wants[st->next]);
		pfree(token);
	}
	else if (st->next == ROLE_ID)
		st->id = token;			/* freed when the entry ends */
	else
	{
		for (i = 0; i < (int) lengthof(json_status_words); i++)
		{
			if (pg_strcasecmp(token, json_status_words[i]) == 0)
				st->word = json_status_words[i];
		}
		if (st->word == NULL)
			json_fail(st, "unknown status \"%.32s\"", token);
		pfree(token);
	}
	JSON_CB_RETURN(st->failed);
}

/*
 * json_depth_within: does the body nest no deeper than limit? Only the
 * lexer runs, so any depth is safe to look at; a syntax error ends the
 * look early, and is for the parser to report.
 */
static bool
json_depth_within(char *body, int len, int limit)
{
	JsonLexContext *lex = JSON_LEX_NEW(body, len, false);
	int			depth = 0;

	while (json_lex(lex) == JSON_SUCCESS && lex->token_type != JSON_TOKEN_END && depth <= limit)
	{
		if (lex->token_type == JSON_TOKEN_OBJECT_START ||
			lex->token_type == JSON_TOKEN_ARRAY_START)
			depth++;
		else if (lex->token_type == JSON_TOKEN_OBJECT_END ||
				 lex->token_type == JSON_TOKEN_ARRAY_END)
			depth--;
	}
	JSON_LEX_FREE(lex);
	return depth <= limit;
}

/*
 * json_parse_body: the three passes; entries change only when all succeed.
 * Everything it allocates it frees, so that the client programs do not
 * leak; in the server an error it raises is caught by the caller.
 */
static int
json_parse_body(const char *body, size_t len, GridhaStatusEntry *entries, int n,
				char *err, size_t errlen)
{
	JsonSemAction sem;
	JsonStatusParse st;
	JsonParseErrorType rc;
	char	   *copy;
	int			i;

	if (len > (size_t) (PG_INT32_MAX / 2))
	{
		json_set_err(err, errlen, "status body of %zu bytes is too large", len);
		return -1;
	}
	/* the lexer wants a writable string; NUL-ended for good measure */
	copy = palloc(len + 1);
	memcpy(copy, body, len);
	copy[len] = '\0';

	memset(&st, 0, sizeof(st));
	st.err = err;
	st.errlen = errlen;
	if (!json_depth_within(copy, (int) len, JSON_STACK_GUARD))
	{
		json_set_err(err, errlen, "malformed status body: nested deeper than %d",
					 JSON_MAX_DEPTH);
		pfree(copy);
		return -1;
	}

	/*
	 * The syntax, without callbacks, so that the parser copies no key for
	 * them; with the strings unescaped, so that every error the pass with
	 * callbacks could meet is met here first.
	 */
	st.lex = JSON_LEX_NEW(copy, (int) len, true);
	rc = pg_parse_json(st.lex, &nullSemAction);
	if (rc != JSON_SUCCESS)
	{
		json_syntax_error(st.lex, rc, err, errlen);
		JSON_LEX_FREE(st.lex);
		pfree(copy);
		return -1;
	}
	JSON_LEX_FREE(st.lex);

	/* The meaning. */
	st.lex = JSON_LEX_NEW(copy, (int) len, true);
	st.entries = entries;
	st.n = n;
	st.found = palloc0(sizeof(char *) * (n > 0 ? n : 1));
	st.next = ROLE_TOP;
	memset(&sem, 0, sizeof(sem));
	sem.semstate = &st;
	sem.object_start = json_object_start;
	sem.object_end = json_object_end;
	sem.array_start = json_array_start;
	sem.array_end = json_array_end;
	sem.object_field_start = json_field_start;
	sem.array_element_start = json_element_start;
	sem.scalar = json_scalar;
	rc = pg_parse_json(st.lex, &sem);
	if (!st.failed && rc != JSON_SUCCESS)
	{
		/* cannot happen: the syntax was checked */
		json_syntax_error(st.lex, rc, err, errlen);
		st.failed = true;
	}
	for (i = 0; i < n && !st.failed; i++)
		strlcpy(entries[i].status, st.found[i] ? st.found[i] : "",
				sizeof(entries[i].status));

	if (st.id != NULL)
		pfree(st.id);
	pfree(st.found);
	JSON_LEX_FREE(st.lex);
	pfree(copy);
	return st.failed ? -1 : 0;
}

/*
 * gridha_json_parse_statuses: parse a whole status body of either dialect
 * (see dlt_http.h). In the server it never raises: any error becomes a -1
 * return with its message, and what the parse allocated is freed with its
 * private memory context.
 */
int
gridha_json_parse_statuses(const char *body, size_t len,
						   GridhaStatusEntry *entries, int n,
						   char *err, size_t errlen)
{
#ifdef FRONTEND
	return json_parse_body(body, len, entries, n, err, errlen);
#else
	MemoryContext old = CurrentMemoryContext;
	MemoryContext volatile ctx = NULL;
	volatile int rc = -1;

	PG_TRY();
	{
		ctx = AllocSetContextCreate(old, "gridha status body", ALLOCSET_DEFAULT_SIZES);
		MemoryContextSwitchTo(ctx);
		rc = json_parse_body(body, len, entries, n, err, errlen);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(ctx != NULL ? ctx : old);
		edata = CopyErrorData();
		FlushErrorState();
		json_set_err(err, errlen, "could not read the status body: %s", edata->message);
		FreeErrorData(edata);
		rc = -1;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(old);
	if (ctx != NULL)
		MemoryContextDelete(ctx);
	return rc;
#endif
}
