package postgres

import (
	"fmt"
	"strings"

	"github.com/chainedsql/chainedsql/sandbox"
)

// postgresScreen are PostgreSQL's own refusals: the system catalogs (another task's objects),
// what no deadline stops (XML, XPath, arrays, containment, polygons, text searches with a
// search string the screen cannot measure), what outlives the session's reset (setseed) and
// the tables EXPLAIN ANALYZE creates past the read-only transaction (pgCreatesTable).
// The toolkit's own catalog statements pass.
func postgresScreen() sandbox.ScreenRules {
	return sandbox.ScreenRules{Names: pgNames, Split: pgSplit, Skip: pgSkip, Empty: sandbox.EmptyAnywhere, Words: func(q, _ string, words []string) string {
		if pgOwnCatalog(q) {
			return ""
		}
		if reason := pgOtherTasks(words); reason != "" {
			return reason
		}
		if reason := pgUninterruptible(words); reason != "" {
			return reason
		}
		stmt := newPGStmt(q)
		if reason := pgCreatesTable(stmt); reason != "" {
			return reason
		}
		if reason := pgJSONXMLRule(stmt); reason != "" {
			return reason
		}
		return pgTokenRules(stmt)
	}}
}

// pgNames are the names q holds as the server's lexer reads it (pgLex): its unquoted words and
// quoted identifiers, lower case, which the shared denied names, pgOtherTasks and
// pgUninterruptible look at. A string constant (dollar-quoted too) or a comment names nothing:
// on PostgreSQL a string only becomes a name through a reg* cast or a function the screen
// refuses by its own name (query_to_xml, ts_stat, to_regclass, …). A numeric constant's letters
// count as names too, each from where it starts after a digit to the end (1pg_ls_dir: PostgreSQL
// 15 reads a number and then a name; 1e5pg_ls_dir gives e5pg_ls_dir and pg_ls_dir).
func pgNames(q string) []string {
	var names []string
	for _, t := range pgLex(q) {
		switch {
		case t.name():
			names = append(names, t.text)
		case t.kind == pgNumber:
			// Each run of name characters that starts after a digit, a point or a sign.
			w := strings.ToLower(t.text)
			for k := 1; k < len(w); k++ {
				if pgIdentStart(w[k]) && !pgIdentStart(w[k-1]) {
					names = append(names, w[k:])
				}
			}
		}
	}
	return names
}

// pgAllowed are the pg_ names a PostgreSQL statement may use: the schema qualifying built-in
// functions, and functions of values only.
var pgAllowed = map[string]bool{"pg_catalog": true, "pg_typeof": true, "pg_column_size": true, "pg_sleep": true,
	"pg_client_encoding": true, "pg_size_pretty": true}

// pgCatalogWords are the other PostgreSQL names that show every schema's objects to any role:
// the reg* types that turn an oid into a qualified name and back (an existence test too), and
// their input and output functions, which do the same called by name (regclassout(g::oid) lists
// another task's tables, regnamespaceout its schema, regtypeout its row types, regroleout its
// role); aclitem and the functions that make or read one (acldefault('r', oid)::text and
// makeaclitem(oid, …)::text spell a role's name, every task's role by oid); the functions that
// describe an object or test a name, and the information_schema views that list the row types
// of every table. Named one by one, never by prefix or suffix: task columns share those
// (document_description, to_region, regtype_code).
var pgCatalogWords = map[string]bool{
	"format_type": true, "udt_privileges": true, "role_udt_grants": true,
	// aclitem: its text names the grantor and grantee roles of any oid
	"aclitem": true, "_aclitem": true, "aclitemin": true, "aclitemout": true, "aclitemeq": true, "hash_aclitem": true,
	"hash_aclitem_extended": true, "acldefault": true, "makeaclitem": true, "aclexplode": true, "aclcontains": true,
	"aclinsert": true, "aclremove": true,
	// the functions that open a relation by oid (an integer is one) and name it in their error:
	// currval(oid) reads "\"secret\" is not a sequence" for another task's table
	"currval": true, "nextval": true, "setval": true, "row_security_active": true, "brin_summarize_range": true,
	"brin_summarize_new_values": true, "brin_desummarize_range": true, "gin_clean_pending_list": true,
	"satisfies_hash_partition": true,
	// the functions that describe an object by its oid or name
	"obj_description": true, "col_description": true, "shobj_description": true,
	// the to_reg* functions: a qualified name to an oid, or null (an existence test)
	"to_regclass": true, "to_regcollation": true, "to_regnamespace": true, "to_regoper": true, "to_regoperator": true,
	"to_regproc": true, "to_regprocedure": true, "to_regrole": true, "to_regtype": true, "to_regtypemod": true,
	// the access privilege inquiry functions: given a name, whether it exists
	"has_any_column_privilege": true, "has_column_privilege": true, "has_database_privilege": true,
	"has_foreign_data_wrapper_privilege": true, "has_function_privilege": true, "has_language_privilege": true,
	"has_parameter_privilege": true, "has_schema_privilege": true, "has_sequence_privilege": true,
	"has_server_privilege": true, "has_table_privilege": true, "has_tablespace_privilege": true, "has_type_privilege": true,
}

// pgRegTypes are the reg* types, each an oid read and written as a qualified name.
var pgRegTypes = []string{"regclass", "regnamespace", "regtype", "regproc", "regprocedure", "regoper",
	"regoperator", "regrole", "regcollation", "regconfig", "regdictionary"}

func init() {
	// Each reg* type, its array type, and the functions that convert it (regclassout, regrolein, …).
	for _, t := range pgRegTypes {
		for _, w := range []string{t, "_" + t, t + "in", t + "out", t + "recv", t + "send"} {
			pgCatalogWords[w] = true
		}
	}
}

// pgOwnCatalog reports whether q is one of the toolkit's own catalog statements (schema
// introspection, pgCatalog), which read the system catalogs for the current schema only: the
// task's own, whoever sends them. Trimmed as the screen trims (sandbox.AllSpace), not of
// Unicode's spaces: the catalog statement with a no-break space after it names another column
// to PostgreSQL, and is screened as any other statement.
func pgOwnCatalog(q string) bool {
	q = strings.Trim(q, sandbox.AllSpace)
	return q == strings.Trim(pgCatalog.Columns, sandbox.AllSpace) || q == strings.Trim(pgCatalog.Keys, sandbox.AllSpace)
}

// pgOtherTasks refuses what shows a PostgreSQL statement another task's objects: the system
// catalogs every role may read list every schema's tables, columns, indexes and types (pg_class,
// pg_attribute, pg_tables, pg_type, ...), and the statistics views their reads, row counts and
// sizes (pg_stat_*, pg_statio_*), with no regard to privileges. By catalog, not by prefix: every
// relation and function of pg_catalog is named pg_..., and all of them are refused but pgAllowed;
// information_schema shows a role only what it may use, and TestPostgresCatalogIsolation reads
// every relation of both schemas the screen passes as a task role and checks that none shows
// another task's names. By the statement's names (pgNames), so a string constant or a comment
// that holds pg_class passes, while 'pg_class'::regclass is refused by regclass. Text-to-SQL needs none of it: information_schema describes the task's
// own tables.
func pgOtherTasks(words []string) string {
	for _, w := range words {
		switch {
		case strings.HasPrefix(w, "pg_") && !pgAllowed[w], pgCatalogWords[w]:
			return fmt.Sprintf("refused: %s is not allowed on PostgreSQL (its pg_ catalogs and functions show every task's tables or act on the server itself; information_schema describes this task's tables)", w)
		}
	}
	return ""
}

// pgUninterruptible refuses, by their names (pgNames) wherever they appear, the PostgreSQL functions
// and types that neither statement_timeout nor pg_terminate_backend can stop, because they run
// without checking for interrupts, and whose cost is not bounded by a small multiple of the
// size of their input, measured on PostgreSQL 15 (sandbox/postgres/hostile_test.go): XML and
// XPath (libxml2; an XPath over a built-up document ran 13 s past a 1 s timeout, and longer
// after pg_terminate_backend), and arrays, whose constructors build tens of millions of elements
// in a second and whose functions and operators then loop over them unchecked (array_remove
// 20 s, && quadratic, array_in and array_out over a cast). int2vector and oidvector are arrays
// under other names, made by their input functions too (int2vectorin('1 2')), as anyarray_in
// would make any. pgJSONXMLRule refuses XML, XPath, json and jsonb, and pgTokenRules the rest of
// the array syntax (brackets, _int4-style type names) and multiranges, which need the
// statement's tokens.
func pgUninterruptible(words []string) string {
	for _, w := range words {
		switch {
		case w == "array", strings.HasPrefix(w, "array_"), strings.HasSuffix(w, "_to_array"), w == "generate_subscripts",
			strings.HasPrefix(w, "int2vector"), strings.HasPrefix(w, "oidvector"), strings.HasPrefix(w, "anyarray"),
			strings.HasPrefix(w, "anycompatiblearray"):
			return pgCannotStop(w + pgWhyArrays)
		}
	}
	return ""
}

// pgJSONXMLRule refuses, by the statement's names (unquoted words and quoted identifiers, as
// the server's lexer splits them: a string constant, a dollar-quoted one too, or a comment that
// holds json names nothing), XML and XPath, which run in libxml2 (an XPath over a built-up
// document ran 13 s past a 1 s statement_timeout), and json and jsonb, whose input parses a whole
// text and whose builders and operators copy a whole document element by element, all unchecked:
// a document of millions of elements is built in a second (repeat, or json_build_array(j, j)
// doubling it in each of a few CTEs) and then parsed or copied for tens of seconds (pgWhyJSON).
// A name is refused wherever it stands, not only where called or named as a type: PostgreSQL
// calls a function of one row by attribute notation too (t.to_json is to_json(t)). IS [NOT]
// DOCUMENT is refused too: it reads a string constant as XML without naming it.
func pgJSONXMLRule(s *pgStmt) string {
	for i, t := range s.toks {
		if t.word("is") && (s.at(i+1).word("document") || s.at(i+1).word("not") && s.at(i+2).word("document")) {
			return pgCannotStop("IS DOCUMENT (it reads its operand as XML in libxml2, which never checks for interrupts)")
		}
		if !t.name() {
			continue
		}
		switch kind := pgJSONXMLName(t.text); kind {
		case "xml":
			return pgCannotStop(t.text + " (XML and XPath run in libxml2, which never checks for interrupts)")
		case "json":
			return pgCannotStop(t.text + pgWhyJSON)
		}
	}
	return ""
}

// pgJSONXMLName says whether name (lower case) is one of PostgreSQL's XML names ("xml") or json
// ones ("json"), else "": every name that starts with xml, xpath or json (the types, their
// keywords and functions, and whatever a release adds under those prefixes: a column jsonfield
// is refused with them), their array types (_xml, _json…), and the other names of the server's
// catalog that hold json or xml (pgJSONXMLOther). A name that only holds json or xml after its
// start, and is none of those, passes (a column raw_json, payload_xml).
// TestPostgresJSONXMLCatalog checks the list against the server's catalog.
func pgJSONXMLName(name string) string {
	switch n := strings.TrimPrefix(name, "_"); {
	case strings.HasPrefix(n, "xml"), strings.HasPrefix(n, "xpath"):
		return "xml"
	case strings.HasPrefix(n, "json"):
		return "json"
	}
	return pgJSONXMLOther[name]
}

// pgJSONXMLOther are the names of PostgreSQL 15's functions and operator classes that hold
// json or xml past their start: the converters to json (to_json, row_to_json, …), jsonb's GIN
// support functions, and the functions that write a table, query, cursor, schema or database as
// XML.
var pgJSONXMLOther = func() map[string]string {
	m := map[string]string{}
	for _, n := range strings.Fields(`to_json to_jsonb row_to_json array_to_json gin_compare_jsonb gin_consistent_jsonb
		gin_consistent_jsonb_path gin_extract_jsonb gin_extract_jsonb_path gin_extract_jsonb_query
		gin_extract_jsonb_query_path gin_triconsistent_jsonb gin_triconsistent_jsonb_path`) {
		m[n] = "json"
	}
	for _, what := range []string{"table", "query", "cursor", "schema", "database"} {
		for _, suffix := range []string{"_to_xml", "_to_xmlschema", "_to_xml_and_xmlschema"} {
			m[what+suffix] = "xml"
		}
	}
	return m
}()

// pgWhyJSON says why json and jsonb are refused.
const pgWhyJSON = " (json and jsonb input parse the whole text, and their builders and operators copy whole documents, without checking for interrupts: a jsonb array of 20 million elements parsed from a built text ran 20 s past a 1 s statement_timeout, and to_jsonb of a json doubled in CTEs 33 s past a 3 s one)"

// pgWhyArrays says why arrays are refused.
const pgWhyArrays = " (array functions loop over every element without checking for interrupts)"

// pgCannotStop is the refusal of what, described by what, PostgreSQL cannot stop at the
// deadline.
func pgCannotStop(what string) string {
	return "refused: " + what + " cannot be stopped at the deadline on PostgreSQL, so it is not allowed"
}

// pgCreatesTable refuses a statement that holds the keyword CREATE or INTO (an unquoted word
// that no AS makes a column label: SELECT 1 AS into is a read). No read holds either, and the
// read-only transaction does not stop the one that EXPLAIN ANALYZE runs: PostgreSQL 15 checks
// a CREATE TABLE AS, CREATE MATERIALIZED VIEW or SELECT … INTO against a read-only
// transaction only when it is the statement itself, so EXPLAIN ANALYZE CREATE TEMP TABLE t AS
// SELECT … (or SELECT … INTO TEMP t) ran as the reader, writing a temporary table, which
// temp_file_limit does not bound, until the deadline (1.6 GB in 5 s); as postgres, a plain
// CREATE TABLE AS under it made a table in public inside a READ ONLY transaction.
func pgCreatesTable(s *pgStmt) string {
	for i, t := range s.toks {
		if t.kind != pgWord || t.text != "create" && t.text != "into" {
			continue
		}
		if prev := s.at(i - 1); prev.kind == pgWord && prev.text == "as" {
			continue
		}
		return fmt.Sprintf("refused: %s is not allowed on PostgreSQL (it creates a table, which EXPLAIN ANALYZE runs past the read-only transaction)", strings.ToUpper(t.text))
	}
	return ""
}
