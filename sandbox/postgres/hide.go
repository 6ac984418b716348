package postgres

import (
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// PostgreSQL checks a role's USAGE of a schema it names only once the schema is found: a name
// qualified by another task's schema (b.t, b.f(), NULL::b.t, 'x' COLLATE b.c, to_tsvector('b.cfg',
// …), a.b.c as a column) fails with "permission denied for schema b", and one qualified by a
// schema that does not exist with "schema \"b\" does not exist", "relation \"b.t\" does not exist",
// "missing FROM-clause entry for table \"t\"" (or "invalid reference to FROM-clause entry" where
// FROM has a table t) or, for TABLESAMPLE b.m(…), "tablesample method b.m does not exist": the
// error text told a task which other tasks' schemas are loaded. No grant or revoke changes that (USAGE on the schema would tell its tables
// apart instead), so the engine answers a missing schema as the server answers a forbidden one.

var (
	pgMissingSchema   = regexp.MustCompile(`^schema "(.*)" does not exist$`)
	pgMissingRelation = regexp.MustCompile(`^relation "(.*)" does not exist$`)
	pgMissingFrom     = regexp.MustCompile(`^(?:missing FROM-clause entry|invalid reference to FROM-clause entry) for table "(.*)"$`)
	pgMissingMethod   = regexp.MustCompile(`^tablesample method (.*) does not exist$`)
)

// hideSchemas is the error text of pe (qerr's, as qerr.Error() says it) for a task: a schema
// the statement named that does not exist reported as one the task's role may not use ("permission
// denied for schema X", SQLSTATE 42501), as the server reports an existing one, so that no task
// can tell another task's schemas from names that exist nowhere. Errors about the schemas the
// role may use (p.usable: its own, pg_catalog, information_schema, public where granted) are kept,
// and so is every error of a DB that executes as the DSN's user (no task role: nothing to hide).
func (p *pgDB) hideSchemas(qerr error, pe *pgconn.PgError, stmt string) string {
	if p.role == "" {
		return qerr.Error()
	}
	if x := p.missingSchema(pe, stmt); x != "" {
		hidden := *pe
		hidden.Code, hidden.Message, hidden.Detail, hidden.Hint = "42501", "permission denied for schema "+x, "", ""
		return hidden.Error()
	}
	return qerr.Error()
}

// missingSchema is the schema, not one of p.usable, whose absence pe reports, or "".
func (p *pgDB) missingSchema(pe *pgconn.PgError, stmt string) string {
	switch pe.Code {
	case "3F000":
		if m := pgMissingSchema.FindStringSubmatch(pe.Message); m != nil && !p.usable[m[1]] {
			return m[1]
		}
	case "42P01":
		if m := pgMissingRelation.FindStringSubmatch(pe.Message); m != nil && strings.Contains(m[1], ".") {
			return p.qualifiedBy(stmt, m[1])
		}
		if m := pgMissingFrom.FindStringSubmatch(pe.Message); m != nil {
			// a.b.c read as schema a, table b, column c: a missing a is this error, or, where
			// the statement's FROM has a table b, the invalid reference to it
			for _, q := range pgQualifiers(stmt) {
				if q.name == m[1] && q.more && !p.usable[q.schema] {
					return q.schema
				}
			}
		}
	case "42704":
		// TABLESAMPLE a.m(…): the method is looked up as a function, quietly, so a missing
		// schema reads as a missing method (its name as written, unquoted)
		if m := pgMissingMethod.FindStringSubmatch(pe.Message); m != nil {
			return p.qualifiedBy(stmt, m[1])
		}
	}
	return ""
}

// qualifiedBy is the schema, not one of p.usable, that qualifies the name schema.name the
// server names in an error (either part may hold a dot: missing only if no schema the role may
// use is a prefix of it), where stmt qualifies that name by it, or "". A name the statement
// does not qualify (an unqualified "a.b" whose name holds a dot: the task's own error) is no
// schema's.
func (p *pgDB) qualifiedBy(stmt, qualified string) string {
	for i := 0; i < len(qualified); i++ {
		if qualified[i] == '.' && p.usable[qualified[:i]] {
			return ""
		}
	}
	for _, q := range pgQualifiers(stmt) {
		if q.schema+"."+q.name == qualified && !p.usable[q.schema] {
			return q.schema
		}
	}
	return ""
}

// pgQualified is a name qualified by another in a statement: schema.name as the server folds
// them (lower case unless quoted), more when a third name follows (schema.table.column).
type pgQualified struct {
	schema, name string
	more         bool
}

// pgQualifiers lists the qualified names of stmt, each pair of names joined by a dot.
func pgQualifiers(stmt string) []pgQualified {
	toks := pgLex(stmt)
	var out []pgQualified
	for i := 0; i+2 < len(toks); i++ {
		if toks[i].name() && toks[i+1].is(".") && toks[i+2].name() {
			out = append(out, pgQualified{schema: toks[i].serverName(), name: toks[i+2].serverName(),
				more: i+4 < len(toks) && toks[i+3].is(".") && (toks[i+4].name() || toks[i+4].is("*"))})
		}
	}
	return out
}
