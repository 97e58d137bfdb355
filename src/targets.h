/*-------------------------------------------------------------------------
 *
 * targets.h
 *		Targets as instances use them: each row of gridha.targets judged
 *		once (what it offers, or why nobody can use it), kept per backend
 *		until gridha.targets or a function changes.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRIDHA_TARGETS_H
#define GRIDHA_TARGETS_H

#include "postgres.h"
#include "nodes/pg_list.h"

/*
 * The kinds of target source an instance can serve, as it declares them
 * (gridha.instances.serves). GRIDHA_SERVES_ANY: an instance that declared
 * nothing serves every service as gridha 1.0 did, whatever its target says.
 */
#define GRIDHA_SERVES_SUBMIT_URL		0x01
#define GRIDHA_SERVES_SUBMIT_FUNCTION	0x02
#define GRIDHA_SERVES_STATUS_URL		0x04
#define GRIDHA_SERVES_STATUS_FUNCTION	0x08
#define GRIDHA_SERVES_ALL				0x0f
#define GRIDHA_SERVES_ANY				(-1)

/* One row of gridha.targets, judged */
typedef struct GridhaTarget
{
	char	   *name;
	char	   *submit_url;		/* NULL: none */
	Oid			submit_function;	/* InvalidOid: none, or its signature
									 * did not resolve */
	char	   *status_url;
	Oid			status_function;
	char	   *submit_signature;	/* as stored (1.3); NULL: none, or an
									 * OID column (up to 1.2) */
	char	   *status_signature;
	char	   *submit_why;		/* why the signature did not resolve */
	char	   *status_why;
	int		   *reject_codes;	/* NULL: 400 and 422 */
	int			n_reject_codes;
	char	  **headers;		/* "Name: value"; never logged */
	int			n_headers;
	bool		rate_limited;
	int			submit_kind;	/* the one GRIDHA_SERVES_SUBMIT_* bit it
								 * needs, 0 when it has no usable one */
	int			status_kind;	/* GRIDHA_SERVES_STATUS_* bit, 0: no status
								 * source (fire and forget) */
	char	   *unusable;		/* why no instance can serve it; NULL when
								 * some kind of instance can */
} GridhaTarget;

extern void gridha_targets_refresh(void);
extern const GridhaTarget *gridha_target_get(const char *name);
extern bool gridha_target_servable(const GridhaTarget *t, int serves);
extern Datum gridha_targets_servable_names(int serves);
extern bool gridha_targets_any_limited(void);
extern uint64 gridha_targets_generation(void);
extern void gridha_target_warn(const char *target, const char *reason);
extern void gridha_target_warn_answer(const char *target, const char *reason);
extern int64 gridha_target_note(const char *target, const char *what, const char *detail);
extern void gridha_target_notes_flush(void);

extern int	gridha_serves_parse(Datum kinds);
extern Datum gridha_serves_datum(int serves);

#endif							/* GRIDHA_TARGETS_H */
