package sandbox

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/chainedsql/chainedsql/datasets"
)

// The screen is the second layer of execution security (docs/DESIGN.md, "Execution security"):
// statements run as a least-privileged reader in a read-only transaction, and before that the
// screen refuses, by their text, statements that are not one read, and the functions and catalogs
// that reach outside the task's data even for a reader (server files, WAL, replication slots,
// logs, settings, other sessions, credentials). A false refusal costs one turn; a miss is caught
// by the reader's permissions where the server has any.

// readPrefixes are the first keywords of statements that only read.
var readPrefixes = []string{"select", "with", "values", "explain"}

// screen checks that query is exactly one read statement (a trailing semicolon is allowed) and
// returns it trimmed, or a reason to refuse it. d selects the dialect's own refusals (MySQL's
// @@ system variables); everything else applies to every dialect. Hand-written because no
// library splits SQL of three dialects; it respects quotes and comments.
func screen(query string, d datasets.Dialect) (string, string) {
	q := strings.TrimSpace(query)
	body, rest := SplitFirst(q)
	if strings.TrimSpace(rest) != "" {
		return "", "refused: only one statement per query is allowed"
	}
	body = strings.TrimSpace(body)
	if body == "" {
		return "", "refused: empty statement"
	}
	lower := strings.ToLower(stripLeadingComments(body))
	ok := false
	for _, p := range readPrefixes {
		if strings.HasPrefix(lower, p) && (len(lower) == len(p) || !isWord(lower[len(p)])) {
			ok = true
		}
	}
	if !ok {
		return "", "refused: only read-only queries (SELECT, WITH, VALUES) are allowed"
	}
	if reason := deniedText(body, d); reason != "" {
		return "", reason
	}
	return body, ""
}

// deniedWords are names that reach outside the task's data in one of the engines: server files
// (and SQLite's list of its files' paths), extensions (dblink's connections to other servers
// and sessions), other sessions and backends, settings (which hold server paths), WAL, replication
// slots and origins, logs, locks held past the statement, dynamic SQL, credentials catalogs,
// MySQL's file-writing INTO targets and its variables tables. deniedPrefixes cover the
// PostgreSQL function families whose members grow with each release. They are refused wherever
// they appear, since a read-only transaction does not stop them.
var (
	deniedWords    = map[string]bool{}
	deniedPrefixes = strings.Fields(`
		pg_read_ pg_ls_ pg_stat_ pg_file pg_wal pg_current_wal pg_last_wal pg_get_wal pg_switch_
		pg_is_wal pg_control_ pg_create_ pg_drop_ pg_copy_ pg_logical_ pg_replication_
		pg_get_replication pg_backup_ pg_advisory_ pg_try_advisory_ pg_current_xact_id
		pg_settings pg_show_all_settings pg_current_logfile pg_rotate_logfile pg_log_backend
		dblink`)
)

func init() {
	for _, w := range strings.Fields(`
		load_extension load_file outfile dumpfile writefile readfile fts3_tokenizer
		pg_start_backup pg_stop_backup pg_terminate_backend pg_cancel_backend pg_signal_backend
		pg_reload_conf pg_promote pg_export_snapshot pg_import_system_collations
		pg_tablespace_location pg_relation_filepath pg_blocking_pids pg_safe_snapshot_blocking_pids
		pg_lock_status pg_locks pg_config
		set_config current_setting txid_current txid_current_if_assigned
		lo_import lo_export lo_from_bytea lo_put lo_get lo_creat lo_create lo_open lo_unlink
		lo_truncate lo_truncate64 lo_write lowrite loread
		pragma_database_list
		query_to_xml query_to_xmlschema query_to_xml_and_xmlschema cursor_to_xml
		cursor_to_xmlschema database_to_xml database_to_xmlschema database_to_xml_and_xmlschema
		schema_to_xml schema_to_xmlschema schema_to_xml_and_xmlschema ts_stat ts_rewrite
		inet_server_addr inet_server_port inet_client_addr inet_client_port
		pg_authid pg_shadow pg_user_mappings pg_hba_file_rules pg_ident_file_mappings
		get_lock release_lock release_all_locks is_free_lock is_used_lock master_pos_wait
		source_pos_wait master_gtid_wait sys_exec sys_eval
		performance_schema processlist global_variables session_variables system_variables
		global_status session_status user_statistics client_statistics`) {
		deniedWords[w] = true
	}
}

// deniedText refuses query text that calls a denied function, names a denied catalog, reaches
// the mysql schema, or hides code from screening. It scans the raw text, strings and comments
// included: no dialect's quoting rules are trusted here.
func deniedText(q string, d datasets.Dialect) string {
	lower := strings.ToLower(q)
	for _, hidden := range []string{"/*!", "/*m!", `u&"`, "u&'"} {
		if strings.Contains(lower, hidden) {
			return fmt.Sprintf("refused: %q (executable comments, escaped identifiers) is not allowed", hidden)
		}
	}
	if mysqlSchemaRef(lower) {
		return "refused: the mysql schema (server accounts and settings) is not part of the task's data"
	}
	if d == datasets.MySQL && strings.Contains(lower, "@@") {
		return "refused: @@ system variables describe the server, not the task's data"
	}
	if d == datasets.MySQL {
		if reason := mysqlDenied(lower); reason != "" {
			return reason
		}
	}
	words := strings.FieldsFunc(lower, func(r rune) bool {
		return !(r == '_' || r == '$' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
	for _, w := range words {
		if deniedWord(w) {
			return fmt.Sprintf("refused: %s is not allowed (it reaches outside the task's data)", w)
		}
		if d == datasets.SQLite && sqliteUnstoppable[w] {
			return fmt.Sprintf("refused: %s is not allowed on SQLite (one call can take hours, and SQLite cannot stop it at the deadline)", w)
		}
	}
	if d == datasets.Postgres && !pgOwnCatalog(q) {
		if reason := pgOtherTasks(words); reason != "" {
			return reason
		}
		return pgUninterruptible(lower, words)
	}
	return ""
}

// pgAllowed are the pg_ names a PostgreSQL statement may use: the schema qualifying built-in
// functions, and functions of values only.
var pgAllowed = map[string]bool{"pg_catalog": true, "pg_typeof": true, "pg_column_size": true, "pg_sleep": true,
	"pg_client_encoding": true, "pg_size_pretty": true}

// pgCatalogWords are the other PostgreSQL names that show every schema's objects to any role:
// the reg* types that turn an oid into a qualified name and back (an existence test too), the
// functions that describe an object or test a name, and the information_schema views that list
// the row types of every table. Named one by one, never by prefix or suffix: task columns share
// those (document_description, to_region).
var pgCatalogWords = map[string]bool{
	"regclass": true, "regnamespace": true, "regtype": true, "regproc": true, "regprocedure": true, "regoper": true,
	"regoperator": true, "regrole": true, "regcollation": true, "regconfig": true, "regdictionary": true,
	"format_type": true, "udt_privileges": true, "role_udt_grants": true,
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

// pgOwnCatalog reports whether q is one of the toolkit's own catalog statements (schema
// introspection, pgCatalog), which read the system catalogs for the current schema only: the
// task's own, whoever sends them.
func pgOwnCatalog(q string) bool {
	q = strings.TrimSpace(q)
	return q == strings.TrimSpace(pgCatalog.columns) || q == strings.TrimSpace(pgCatalog.keys)
}

// pgOtherTasks refuses what shows a PostgreSQL statement another task's objects: the system
// catalogs every role may read list every schema's tables, columns, indexes and types (pg_class,
// pg_attribute, pg_tables, pg_type, ...), and the statistics views their reads, row counts and
// sizes (pg_stat_*, pg_statio_*), with no regard to privileges. By catalog, not by prefix: every
// relation and function of pg_catalog is named pg_..., and all of them are refused but pgAllowed;
// information_schema shows a role only what it may use, and TestPostgresCatalogIsolation reads
// every relation of both schemas the screen passes as a task role and checks that none shows
// another task's names. Text-to-SQL needs none of it: information_schema describes the task's
// own tables.
func pgOtherTasks(words []string) string {
	for _, w := range words {
		switch {
		case strings.HasPrefix(w, "pg_") && !pgAllowed[w], pgCatalogWords[w]:
			return fmt.Sprintf("refused: %s is not allowed on PostgreSQL (the system catalogs show every task's tables; information_schema shows this task's)", w)
		}
	}
	return ""
}

// mysqlDeniedCalls are the MariaDB/MySQL functions refused where they are called (the name,
// any gap, then "("), with the reason the observation gives. Found on MariaDB 10.11 with a
// statement time limit of 1 s, KILL QUERY and KILL CONNECTION: XPath over a built-up XML value,
// and REPLACE or REGEXP_REPLACE over a value of a megabyte (growing or shrinking it: each match
// moves the rest of the value), run on for minutes to hours in a thread marked Killed, since the
// server checks for a kill only between rows. REPEAT, LPAD, RPAD, SPACE, CAST(… AS BINARY(n))
// and UNCOMPRESS build such values from a few bytes of text; BENCHMARK only spends server time.
// Other functions are not interrupted either (LOCATE, SUBSTRING_INDEX and REVERSE over a value
// built by nesting CONCAT): their threads are the runaways mysqlServer counts and contains.
var mysqlDeniedCalls = map[string]string{
	"extractvalue":   "MariaDB cannot interrupt XPath evaluation (ExtractValue, UpdateXML): it runs on past the deadline and KILL",
	"updatexml":      "MariaDB cannot interrupt XPath evaluation (ExtractValue, UpdateXML): it runs on past the deadline and KILL",
	"replace":        "MariaDB cannot interrupt REPLACE, whose time grows with the square of its input: it runs on past the deadline and KILL",
	"regexp_replace": "MariaDB cannot interrupt REGEXP_REPLACE, whose time grows with the square of its input: it runs on past the deadline and KILL",
	"repeat":         "REPEAT builds values of up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"lpad":           "LPAD builds values of up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"rpad":           "RPAD builds values of up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"space":          "SPACE builds values of up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"binary":         "BINARY(n) pads values to up to 16 MiB, over which MariaDB's string functions run on past the deadline and KILL",
	"uncompress":     "UNCOMPRESS builds values of up to 16 MiB from a few kilobytes, over which MariaDB's string functions run on past the deadline and KILL",
	"benchmark":      "BENCHMARK only spends server time",
}

// mysqlDenied refuses, in lower (lower-cased MySQL text), a call of one of mysqlDeniedCalls and
// EXPLAIN FOR CONNECTION, which shows the plan (in JSON, the literals) of the statement another
// connection runs: every task's connections log in as one reader, so MariaDB shows them all to
// it. Names are matched as whole words however they are spaced or commented.
func mysqlDenied(lower string) string {
	for i := 0; i < len(lower); {
		if !isIdentByte(lower[i]) {
			i++
			continue
		}
		j := i
		for j < len(lower) && isIdentByte(lower[j]) {
			j++
		}
		w, next := lower[i:j], skipGap(lower, j)
		if reason, ok := mysqlDeniedCalls[w]; ok && next < len(lower) && lower[next] == '(' {
			return "refused: " + reason
		}
		if w == "for" && strings.HasPrefix(lower[next:], "connection") && (next+10 == len(lower) || !isIdentByte(lower[next+10])) {
			return "refused: EXPLAIN FOR CONNECTION shows another connection's statement, which may be another task's"
		}
		i = j
	}
	return ""
}

// pgArrayTypes are the internal names of PostgreSQL's array types ('{1,2}'::_int4).
var pgArrayTypes = regexp.MustCompile(`^_(int[248]|float[48]|numeric|text|varchar|bpchar|char|bool|date|time|timetz|timestamp|timestamptz|interval|bytea|json|jsonb|oid|name|uuid|money)$`)

// pgEmptyBrackets matches an array type's brackets (int[], text [ ]).
var pgEmptyBrackets = regexp.MustCompile(`\[\s*\]`)

// pgUninterruptible refuses the PostgreSQL functions that neither statement_timeout nor
// pg_terminate_backend can stop, because they run without checking for interrupts, and whose
// cost is not bounded by a small multiple of the size of their input, measured on PostgreSQL
// 15 (sandbox/hostile_postgres_test.go): XML and XPath (libxml2; an XPath over a built-up
// document ran 13 s past a 1 s timeout, and longer after pg_terminate_backend), and arrays,
// whose constructors build tens of millions of elements in a second and whose functions and
// operators then loop over them unchecked (array_remove 20 s, && quadratic, array_in and
// array_out over a cast). lower is the statement in lower case, words its words.
func pgUninterruptible(lower string, words []string) string {
	why := ""
	for _, w := range words {
		switch {
		case w == "xml", strings.HasPrefix(w, "xml"), strings.HasPrefix(w, "xpath"), strings.Contains(w, "_xml"):
			why = w + " (XML and XPath run in libxml2, which never checks for interrupts)"
		case w == "array", strings.HasPrefix(w, "array_"), strings.HasSuffix(w, "_to_array"), w == "generate_subscripts", pgArrayTypes.MatchString(w):
			why = w + " (array functions loop over every element without checking for interrupts)"
		}
		if why != "" {
			break
		}
	}
	if why == "" && pgEmptyBrackets.MatchString(lower) {
		why = "array types (array functions loop over every element without checking for interrupts)"
	}
	if why == "" {
		return ""
	}
	return "refused: " + why + " cannot be stopped at the deadline on PostgreSQL, so it is not allowed"
}

// sqliteUnstoppable are SQLite built-ins whose one call takes time quadratic in its arguments'
// size inside a single step, where neither the interrupt nor the progress handler is looked at
// (two values at the length limit: hours): unhex with a set of characters to skip searches the
// set for each character skipped; json_patch searches the target's keys for each key of the
// patch. Rare in benchmark SQL, so refused rather than rewritten (instr, replace, trim and LIKE
// are bounded in the engine instead, see guardSQLite).
var sqliteUnstoppable = map[string]bool{"unhex": true, "json_patch": true, "jsonb_patch": true}

// deniedWord reports whether w (lower case) is a denied name or starts with a denied prefix.
func deniedWord(w string) bool {
	if deniedWords[w] {
		return true
	}
	for _, p := range deniedPrefixes {
		if strings.HasPrefix(w, p) {
			return true
		}
	}
	return false
}

// mysqlSchemaRef reports whether lower (lower-cased SQL) qualifies a name with the mysql schema
// however it is spelled: `mysql`.user, "mysql".user, mysql .user, mysql/**/.user, mysql -- x
// (newline) .user, mysql # x (newline) .user. It skips, between the word and the dot, anything
// MySQL allows there (spaces, closing quotes, comments), without regard to whether the word sits
// inside a string: a string that merely mentions mysql.x is refused too.
func mysqlSchemaRef(lower string) bool {
	const word = "mysql"
	for i := 0; ; i++ {
		k := strings.Index(lower[i:], word)
		if k < 0 {
			return false
		}
		i += k
		j := i + len(word)
		if i > 0 && isIdentByte(lower[i-1]) || j < len(lower) && isIdentByte(lower[j]) {
			continue
		}
		if j = skipGap(lower, j); j < len(lower) && lower[j] == '.' {
			return true
		}
	}
}

// skipGap returns the index of the first byte at or after i that is not a space, a quote
// character or inside a comment (/* */, -- and # to the end of the line).
func skipGap(s string, i int) int {
	for i < len(s) {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == '`' || c == '"':
			i++
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return len(s)
			}
			i += end + 4
		case strings.HasPrefix(s[i:], "--") || c == '#':
			end := strings.IndexByte(s[i:], '\n')
			if end < 0 {
				return len(s)
			}
			i += end + 1
		default:
			return i
		}
	}
	return i
}

// isIdentByte reports whether b can continue an unquoted identifier (MySQL allows $).
func isIdentByte(b byte) bool { return isWord(b) || b == '$' || b >= 0x80 }

func isWord(b byte) bool {
	return b == '_' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9'
}

func stripLeadingComments(s string) string {
	for {
		s = strings.TrimSpace(s)
		switch {
		case strings.HasPrefix(s, "--"):
			if i := strings.IndexByte(s, '\n'); i >= 0 {
				s = s[i+1:]
			} else {
				return ""
			}
		case strings.HasPrefix(s, "/*"):
			if i := strings.Index(s, "*/"); i >= 0 {
				s = s[i+2:]
			} else {
				return ""
			}
		default:
			return s
		}
	}
}

// SplitFirst splits q at the first semicolon outside quotes and comments.
func SplitFirst(q string) (string, string) {
	for i := 0; i < len(q); i++ {
		switch c := q[i]; c {
		case '\'', '"', '`':
			j := i + 1
			for j < len(q) && q[j] != c {
				j++
			}
			i = j
		case '[':
			if j := strings.IndexByte(q[i:], ']'); j >= 0 {
				i += j
			}
		case '-':
			if i+1 < len(q) && q[i+1] == '-' {
				j := strings.IndexByte(q[i:], '\n')
				if j < 0 {
					return q, ""
				}
				i += j
			}
		case '/':
			if i+1 < len(q) && q[i+1] == '*' {
				j := strings.Index(q[i+2:], "*/")
				if j < 0 {
					return q, ""
				}
				i += j + 3
			}
		case ';':
			return q[:i], q[i+1:]
		}
	}
	return q, ""
}
