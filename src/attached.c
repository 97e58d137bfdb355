/*-------------------------------------------------------------------------
 *
 * attached.c
 *		Whether gridha's tables hold only what gridha attached to them.
 *
 * The claim cycle's SQL functions have no SET clause: a call sets gridha's
 * search_path when it is first needed (gridha_pinned_call, path.c), and
 * most calls run no statement. Until then the call reads and
 * writes gridha.service_claims, gridha.batches, gridha.instances and
 * gridha.target_totals directly (rows.c), and PostgreSQL runs what is
 * attached to those tables: their triggers and the triggers' WHEN clauses,
 * CHECK constraints, the operator classes, expressions and predicates of
 * their indexes, the operators of foreign keys and exclusion constraints.
 * What gridha attaches resolves no name by the path (C functions, functions
 * with their own SET clause, built-in operators). Something an
 * administrator attaches may (a PL/pgSQL trigger without a SET clause, an
 * SQL function in a CHECK or an index expression), and would then run as
 * the function's owner with the caller's path: that would let a member of
 * gridha_submitter run code of its own as the owner.
 *
 * gridha_tables_bare answers whether everything attached to those four
 * tables is of a kind that cannot resolve a name by the path; when
 * anything else is attached, or a table is missing, a cycle call sets the
 * path when its writer opens one of them (rows.c), before anything attached
 * can run, as a SET clause would (docs/security.md). The verdict is
 * kept until one of the tables changes (a relcache invalidation: a trigger,
 * index, constraint, rule or column added, dropped or altered, on it or on
 * a table whose foreign key points at it) or any function, type or schema
 * does (a syscache invalidation of pg_proc, pg_type or pg_namespace).
 *
 * What counts as harmless:
 *   - a trigger whose function is gridha's (a member of the extension) and
 *     is C or pins gridha's path, or a built-in one (PostgreSQL's own
 *     foreign-key triggers; their constraints' operators are built in);
 *   - in a trigger's WHEN clause, a CHECK constraint, an index expression
 *     or predicate: only built-in, immutable, internal functions and
 *     operators (built in: made by initdb, OID below FirstNormalObjectId);
 *   - table and index access methods and operator classes that are built
 *     in;
 *   - columns, and values in those expressions, of built-in types or
 *     gridha's own (a type of anyone else's may bring its own operator
 *     class: a range's subtype, a composite's fields), domains whose CHECKs
 *     hold only such functions, no generated column; no rules, no
 *     row-level security.
 * What the writer's AFTER triggers run (a foreign key's check queries the
 * other table) runs with gridha's path: rows.c sets it before firing them
 * (path.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "attached.h"
#include "common.h"
#include "tables.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/transam.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_index.h"
#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

/* The tables the claim cycle's calls read and write before any statement */
static const char *const attached_tables[] = {
	"service_claims", "batches", "instances", "target_totals"
};

/* The verdict, while valid; and the tables' and extension's OIDs it was
 * reached for */
static bool attached_valid = false;
static bool attached_bare = false;
static Oid	attached_relids[lengthof(attached_tables)];
static Oid	attached_extension = InvalidOid;
static bool attached_registered = false;

static bool attached_check(void);
static bool attached_table_bare(Relation rel, Oid extension);

/* Any relcache invalidation of one of the tables (or of all) */
static void
attached_relcache_callback(Datum arg, Oid relid)
{
	int			i;

	if (!OidIsValid(relid))
	{
		attached_valid = false;
		return;
	}
	for (i = 0; i < lengthof(attached_relids); i++)
		if (attached_relids[i] == relid)
			attached_valid = false;
}

/* Any change of a function, a type or a schema */
static void
attached_syscache_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	attached_valid = false;
}

/*
 * gridha_tables_bare: whether everything attached to the tables the claim
 * cycle writes directly is harmless on any search_path (see the header).
 */
bool
gridha_tables_bare(void)
{
	if (likely(attached_valid))
		return attached_bare;
	if (!attached_registered)
	{
		gridha_on_relcache(attached_relcache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(PROCOID, attached_syscache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(TYPEOID, attached_syscache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(NAMESPACEOID, attached_syscache_callback, (Datum) 0);
		attached_registered = true;
	}
	/*
	 * Valid from here: an invalidation taken in during the check resets it,
	 * and the check runs again; an error leaves the cautious answer.
	 */
	do
	{
		attached_valid = true;
		attached_bare = false;
		attached_bare = attached_check();
	} while (!attached_valid);
	return attached_bare;
}

/* attached_check: the verdict, from the catalogs */
static bool
attached_check(void)
{
	Oid			nsp = get_namespace_oid("gridha", true);
	bool		bare = true;
	int			i;

	attached_extension = get_extension_oid("gridha", true);
	for (i = 0; i < lengthof(attached_tables); i++)
		attached_relids[i] = OidIsValid(nsp) ?
			get_relname_relid(attached_tables[i], nsp) : InvalidOid;
	for (i = 0; i < lengthof(attached_tables) && bare; i++)
	{
		Relation	rel;

		if (!OidIsValid(attached_relids[i]))
			return false;
		rel = try_table_open(attached_relids[i], AccessShareLock);
		if (rel == NULL)
			return false;
		bare = attached_table_bare(rel, attached_extension);
		table_close(rel, AccessShareLock);
	}
	return bare;
}

/*
 * gridha_function_builtin: a built-in function that is internal and
 * immutable (it runs no SQL and no code of anyone's)
 */
bool
gridha_function_builtin(Oid funcid)
{
	HeapTuple	tup;
	Form_pg_proc proc;
	bool		ok;

	if (funcid >= FirstNormalObjectId)
		return false;
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	if (!HeapTupleIsValid(tup))
		return false;
	proc = (Form_pg_proc) GETSTRUCT(tup);
	ok = proc->prolang == INTERNALlanguageId && proc->provolatile == PROVOLATILE_IMMUTABLE;
	ReleaseSysCache(tup);
	return ok;
}

/* check_functions_in_node's callback: true for a function that is not */
static bool
attached_builtin_function(Oid funcid, void *context)
{
	return !gridha_function_builtin(funcid);
}

/*
 * attached_type_bare: a type gridha's writes may compare, hash or check
 * without running code of anyone's: built in (arrays and ranges of built-in
 * types included), gridha's own (a member of the extension: its enums,
 * domains and row types), an array of such a type, a domain over one (its
 * CHECKs are walked as constraints), or the row type of one of the tables.
 * A type of anyone else's may bring its own operator class (a range's
 * subtype, a composite's fields): not bare.
 */
static bool
attached_type_bare(Oid type)
{
	for (;;)
	{
		HeapTuple	tup;
		Form_pg_type t;
		Oid			next = InvalidOid;
		bool		ok = false;
		int			i;

		if (type < FirstNormalObjectId)
			return true;
		tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(type));
		if (!HeapTupleIsValid(tup))
			return false;
		t = (Form_pg_type) GETSTRUCT(tup);
		if (t->typtype == TYPTYPE_DOMAIN)
			next = t->typbasetype;
		else if (OidIsValid(get_element_type(type)))
			next = t->typelem;
		else if (OidIsValid(attached_extension) &&
				 getExtensionOfObject(TypeRelationId, type) == attached_extension)
			ok = true;
		else if (t->typtype == TYPTYPE_COMPOSITE)
			for (i = 0; i < lengthof(attached_relids); i++)
				ok = ok || (OidIsValid(t->typrelid) && t->typrelid == attached_relids[i]);
		ReleaseSysCache(tup);
		if (!OidIsValid(next))
			return ok;
		type = next;
	}
}

/*
 * Walker: true when the expression holds anything but the node kinds
 * below, a function or operator that is not a built-in, internal,
 * immutable one, or a value of a type that is not bare
 */
static bool
attached_expr_walker(Node *node, void *context)
{
	if (node == NULL)
		return false;
	switch (nodeTag(node))
	{
		case T_List:
		case T_BoolExpr:
		case T_NullTest:
		case T_BooleanTest:
		case T_CaseWhen:
		case T_CaseTestExpr:
		case T_CoerceToDomainValue:
			break;
		case T_Var:
		case T_Const:
		case T_FuncExpr:
		case T_OpExpr:
		case T_DistinctExpr:
		case T_NullIfExpr:
		case T_ScalarArrayOpExpr:
		case T_RelabelType:
		case T_CoerceViaIO:
		case T_CollateExpr:
		case T_CaseExpr:
		case T_CoalesceExpr:
		case T_ArrayExpr:
		case T_MinMaxExpr:
			if (!attached_type_bare(exprType(node)))
				return true;
			break;
		default:
			return true;
	}
	if (check_functions_in_node(node, attached_builtin_function, context))
		return true;
	return expression_tree_walker(node, attached_expr_walker, context);
}

/* A stored expression (nodeToString text): harmless or absent */
static bool
attached_expr_bare(Datum stored, bool isnull)
{
	if (isnull)
		return true;
	return !attached_expr_walker((Node *) stringToNode(TextDatumGetCString(stored)), NULL);
}

/* Every operator of an oid[] is built in */
static bool
attached_operators_bare(Datum ops, bool isnull)
{
	ArrayType  *arr;
	Datum	   *elems;
	int			n;
	int			i;

	if (isnull)
		return true;
	arr = DatumGetArrayTypeP(ops);
	deconstruct_array(arr, OIDOID, sizeof(Oid), true, TYPALIGN_INT, &elems, NULL, &n);
	for (i = 0; i < n; i++)
		if (DatumGetObjectId(elems[i]) >= FirstNormalObjectId)
			return false;
	return true;
}

/*
 * A trigger function: gridha's own (a member of the extension: C, or its
 * path pinned), or a built-in one
 */
static bool
attached_trigger_function_bare(Oid funcid, Oid extension)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	Form_pg_proc proc;
	bool		ok = false;

	if (!HeapTupleIsValid(tup))
		return false;
	proc = (Form_pg_proc) GETSTRUCT(tup);
	if (funcid < FirstNormalObjectId)
		ok = proc->prolang == INTERNALlanguageId;
	else if (OidIsValid(extension) &&
			 getExtensionOfObject(ProcedureRelationId, funcid) == extension)
	{
		if (proc->prolang == ClanguageId)
			ok = true;
		else
		{
			bool		isnull;
			Datum		config = SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_proconfig, &isnull);

			if (!isnull)
			{
				ArrayType  *arr = DatumGetArrayTypeP(config);
				Datum	   *elems;
				int			n;
				int			i;

				deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
				for (i = 0; i < n && !ok; i++)
					ok = strcmp(TextDatumGetCString(elems[i]),
								"search_path=" GRIDHA_SEARCH_PATH) == 0;
			}
		}
	}
	ReleaseSysCache(tup);
	return ok;
}

/* One row of pg_constraint: what it makes the writer run is harmless */
static bool
attached_constraint_bare(HeapTuple tup, TupleDesc desc)
{
	Form_pg_constraint c = (Form_pg_constraint) GETSTRUCT(tup);
	bool		isnull;
	Datum		d;
	bool		bare = true;

	switch (c->contype)
	{
		case CONSTRAINT_CHECK:
			d = heap_getattr(tup, Anum_pg_constraint_conbin, desc, &isnull);
			bare = attached_expr_bare(d, isnull);
			break;
		case CONSTRAINT_FOREIGN:
			d = heap_getattr(tup, Anum_pg_constraint_conpfeqop, desc, &isnull);
			bare = attached_operators_bare(d, isnull);
			d = heap_getattr(tup, Anum_pg_constraint_conppeqop, desc, &isnull);
			bare = bare && attached_operators_bare(d, isnull);
			d = heap_getattr(tup, Anum_pg_constraint_conffeqop, desc, &isnull);
			bare = bare && attached_operators_bare(d, isnull);
			break;
		case CONSTRAINT_EXCLUSION:
			d = heap_getattr(tup, Anum_pg_constraint_conexclop, desc, &isnull);
			bare = attached_operators_bare(d, isnull);
			break;
		default:
			break;
	}
	return bare;
}

/* The constraints whose column attno is key, through index indexid */
static bool
attached_constraints_by(Relation con, Oid indexid, AttrNumber attno, Oid key)
{
	ScanKeyData skey;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		bare = true;

	ScanKeyInit(&skey, attno, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(key));
	scan = systable_beginscan(con, indexid, true, NULL, 1, &skey);
	while (bare && HeapTupleIsValid(tup = systable_getnext(scan)))
		bare = attached_constraint_bare(tup, RelationGetDescr(con));
	systable_endscan(scan);
	return bare;
}

/*
 * The constraints on the table, those whose foreign key points at it
 * (found through their triggers on it), and those of the domains its
 * columns are of (a domain's CHECK runs where a value is cast to it: in a
 * statement, after the path is set, but checked all the same); each looked
 * up by index, so the check costs what the table has, not what the
 * database holds
 */
static bool
attached_constraints_bare(Relation rel, List *domains)
{
	Relation	con = table_open(ConstraintRelationId, AccessShareLock);
	TriggerDesc *td = rel->trigdesc;
	ListCell   *lc;
	int			i;
	bool		bare;

	bare = attached_constraints_by(con, ConstraintRelidTypidNameIndexId,
								   Anum_pg_constraint_conrelid, RelationGetRelid(rel));
	foreach(lc, domains)
		if (bare)
			bare = attached_constraints_by(con, ConstraintTypidIndexId,
										   Anum_pg_constraint_contypid, lfirst_oid(lc));
	for (i = 0; bare && td != NULL && i < td->numtriggers; i++)
		if (OidIsValid(td->triggers[i].tgconstraint))
			bare = attached_constraints_by(con, ConstraintOidIndexId,
										   Anum_pg_constraint_oid, td->triggers[i].tgconstraint);
	table_close(con, AccessShareLock);
	return bare;
}

/* The table's indexes: built-in methods and classes, harmless expressions */
static bool
attached_indexes_bare(Relation rel)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	bool		bare = true;

	foreach(lc, indexes)
	{
		Oid			indexid = lfirst_oid(lc);
		HeapTuple	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(indexid));
		Form_pg_index ind;
		oidvector  *classes;
		bool		isnull;
		int			i;

		if (!HeapTupleIsValid(tup))
		{
			bare = false;
			break;
		}
		ind = (Form_pg_index) GETSTRUCT(tup);
		classes = (oidvector *) DatumGetPointer(SysCacheGetAttr(INDEXRELID, tup,
																Anum_pg_index_indclass, &isnull));
		for (i = 0; !isnull && i < ind->indnkeyatts && bare; i++)
			bare = classes->values[i] < FirstNormalObjectId;
		if (bare)
		{
			Datum		exprs = SysCacheGetAttr(INDEXRELID, tup, Anum_pg_index_indexprs, &isnull);

			bare = attached_expr_bare(exprs, isnull);
		}
		if (bare)
		{
			Datum		pred = SysCacheGetAttr(INDEXRELID, tup, Anum_pg_index_indpred, &isnull);

			bare = attached_expr_bare(pred, isnull);
		}
		ReleaseSysCache(tup);
		if (bare)
		{
			tup = SearchSysCache1(RELOID, ObjectIdGetDatum(indexid));
			bare = HeapTupleIsValid(tup) &&
				((Form_pg_class) GETSTRUCT(tup))->relam < FirstNormalObjectId;
			if (HeapTupleIsValid(tup))
				ReleaseSysCache(tup);
		}
		if (!bare)
			break;
	}
	list_free(indexes);
	return bare;
}

/* attached_table_bare: one table (see the header) */
static bool
attached_table_bare(Relation rel, Oid extension)
{
	TupleDesc	desc = RelationGetDescr(rel);
	TriggerDesc *td = rel->trigdesc;
	List	   *domains = NIL;
	int			i;

	if (rel->rd_rel->relhasrules || rel->rd_rel->relrowsecurity ||
		rel->rd_rel->relam >= FirstNormalObjectId)
		return false;
	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		Oid			type = att->atttypid;
		Oid			elem;

		if (att->attisdropped)
			continue;
		if (att->attgenerated != '\0' || !attached_type_bare(type))
			return false;
		/* a domain, its base domains, an array's element type's */
		for (;;)
		{
			if (get_typtype(type) == TYPTYPE_DOMAIN)
			{
				HeapTuple	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(type));

				if (!HeapTupleIsValid(tup))
					return false;
				domains = list_append_unique_oid(domains, type);
				type = ((Form_pg_type) GETSTRUCT(tup))->typbasetype;
				ReleaseSysCache(tup);
			}
			else if (OidIsValid(elem = get_element_type(type)))
				type = elem;
			else
				break;
		}
	}
	for (i = 0; td != NULL && i < td->numtriggers; i++)
	{
		Trigger    *trig = &td->triggers[i];

		if (!attached_trigger_function_bare(trig->tgfoid, extension))
			return false;
		if (trig->tgqual != NULL &&
			attached_expr_walker((Node *) stringToNode(trig->tgqual), NULL))
			return false;
	}
	return attached_indexes_bare(rel) && attached_constraints_bare(rel, domains);
}
