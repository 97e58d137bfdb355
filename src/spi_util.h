/*-------------------------------------------------------------------------
 *
 * spi_util.h
 *		Prepared statements kept for the life of the backend, and the
 *		argument checks every SQL-callable function shares.
 *
 * A GridhaStatement is a static description of one SQL statement; its plan
 * is prepared on first use and kept (SPI_keepplan), so hot paths pay no
 * parse or plan cost after the first call in a session.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_SPI_UTIL_H
#define GRIDHA_SPI_UTIL_H

#include "postgres.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/guc.h"
#include "nodes/execnodes.h"
#include "utils/uuid.h"

#define GRIDHA_MAX_ARGS 10

typedef struct GridhaStatement
{
	const char *sql;
	int			nargs;
	Oid			argtypes[GRIDHA_MAX_ARGS];
	bool		custom_plan;	/* plan for each call's values (see gridha_exec) */
	SPIPlanPtr	plan;			/* prepared on first use */
} GridhaStatement;

extern int	gridha_exec(GridhaStatement *stmt, Datum *values, const char *nulls,
						bool read_only);
/* ... for a worker's statement that serves the Citus mode too */
extern int	gridha_exec_served(GridhaStatement *stmt, Datum *values, const char *nulls,
							   bool read_only);

/* Column accessors on SPI_tuptable row "row" (column numbers from 1) */
extern Datum gridha_col(int row, int col, bool *isnull);
extern int64 gridha_col_int64(int row, int col);

/* Every row of the last SPI statement (first ncols columns) to rsinfo */
extern void gridha_put_rows(ReturnSetInfo *rsinfo, int ncols);
extern Datum gridha_text_array(Datum *elems, int n);
extern Datum gridha_int8_array(Datum *elems, int n);

/* Argument checks: raise a clear error (22004 NULL, 22023 bad value) */
extern Datum gridha_arg_uuid(FunctionCallInfo fcinfo, int argno, const char *name);
extern text *gridha_arg_id(FunctionCallInfo fcinfo, int argno, const char *name);
extern text *gridha_arg_new_id(FunctionCallInfo fcinfo, int argno, const char *name);
extern int64 gridha_arg_epoch(FunctionCallInfo fcinfo, int argno);
extern text *gridha_check_id(Datum value, bool isnull, const char *name);
extern int64 gridha_check_epoch(Datum value, bool isnull);
extern int32 gridha_arg_count(FunctionCallInfo fcinfo, int argno, const char *name);

extern bool gridha_uuid_equal(Datum a, Datum b);

/* Write paths refuse read-only transactions and hot standbys (25006) */
extern void gridha_require_writable(const char *what);
/* ... where the Citus mode is served too (the workers) */
extern void gridha_require_writable_served(const char *what);

/*
 * One step in a subtransaction of its own, with one setting changed for its
 * length: NULL when the step ran through (kept), else its error (undone)
 */
typedef void (*GridhaSubxactStep) (void *arg);
extern ErrorData *gridha_subxact_try(GridhaSubxactStep step, void *arg,
									 const char *setting, const char *value,
									 GucContext context);

/* Schemas gridha and (1.3) gridha_internal are a superuser's and nobody else
 * may create in them (RG015) */
extern void gridha_require_safe_schema(void);
extern void gridha_require_safe_schema_served(void);

#endif							/* GRIDHA_SPI_UTIL_H */
