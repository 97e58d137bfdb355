/*-------------------------------------------------------------------------
 *
 * dlt_json.h
 *		A ledger's status body, read (src/dlt_json.c). Compiled into the
 *		extension and, with -DFRONTEND, into the client programs.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_DLT_JSON_H
#define GRIDHA_DLT_JSON_H

#include <stddef.h>

/* A batch asked about, and the status word an answer gave it */
typedef struct GridhaStatusEntry
{
	const char *batch_id;
	char		status[16];
} GridhaStatusEntry;

/*
 * The body parser behind gridha_http_statuses (src/dlt_http.c), on its own:
 * the same result rules, for a body already in memory (len bytes, need not
 * end in NUL).
 */
extern int	gridha_json_parse_statuses(const char *body, size_t len,
									   GridhaStatusEntry *entries, int n,
									   char *err, size_t errlen);

#endif							/* GRIDHA_DLT_JSON_H */
