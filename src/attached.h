/*-------------------------------------------------------------------------
 *
 * attached.h
 *		Whether gridha's tables hold only what gridha attached to them
 *		(attached.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_ATTACHED_H
#define GRIDHA_ATTACHED_H

/* Nothing attached to the tables the claim cycle writes directly could
 * resolve a name by the search_path */
extern bool gridha_tables_bare(void);

/* A built-in function that is internal and immutable */
extern bool gridha_function_builtin(Oid funcid);

#endif							/* GRIDHA_ATTACHED_H */
