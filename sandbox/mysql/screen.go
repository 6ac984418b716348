package mysql

import (
	"strings"

	"github.com/chainedsql/chainedsql/sandbox"
)

// mysqlScreen are MySQL's and MariaDB's own refusals: @@ system variables, the calls MariaDB
// cannot interrupt, EXPLAIN FOR CONNECTION, and the role catalogs.
func mysqlScreen() sandbox.ScreenRules {
	return sandbox.ScreenRules{Text: func(lower string) string {
		if strings.Contains(lower, "@@") {
			return "refused: @@ system variables describe the server, not the task's data"
		}
		if why := mysqlDenied(lower); why != "" {
			return why
		}
		return mysqlBuiltNeedle(lower)
	}, Word: func(w string) string {
		if mysqlRoleCatalogs[w] {
			return "refused: " + w + " is not allowed on MySQL/MariaDB (the reader holds a role per loaded database, so the role catalogs name every task's database)"
		}
		return ""
	}}
}

// mysqlRoleCatalogs are the information_schema tables of roles. Every task's executions log in
// as the one reader, granted a role per loaded database (reader/db_id) and enabling its own:
// MariaDB's APPLICABLE_ROLES lists them all, so it names every other task's database (not its
// rows); MySQL 8 adds ADMINISTRABLE_ROLE_AUTHORIZATIONS and the ROLE_*_GRANTS tables, of the
// same roles. ENABLED_ROLES shows only the task's own role, and nothing Text-to-SQL needs.
var mysqlRoleCatalogs = map[string]bool{
	"applicable_roles": true, "enabled_roles": true, "administrable_role_authorizations": true,
	"role_table_grants": true, "role_column_grants": true, "role_routine_grants": true,
}

// mysqlDeniedCalls are the MariaDB/MySQL functions refused where they are called (the name,
// any gap, then "("), with the reason the observation gives. Found on MariaDB 10.11 with a
// statement time limit of 1 s, KILL QUERY and KILL CONNECTION: XPath over a built-up XML value,
// and REPLACE or REGEXP_REPLACE over a value of a megabyte (growing or shrinking it: each match
// moves the rest of the value), run on for minutes to hours in a thread marked Killed, since the
// server checks for a kill only between rows. REPEAT, LPAD, RPAD, SPACE, CAST(… AS BINARY(n)),
// UNCOMPRESS, SFORMAT ('{:a>16000000}'), WEIGHT_STRING(… AS CHAR(n)) and nested EXPORT_SET build
// such values from a few bytes of text (SFORMAT's made LOCATE run 6 s past a 1 s deadline from a
// 70-byte statement); BENCHMARK only spends server time. Nesting (CONCAT in derived tables, HEX
// of HEX) still builds them: the screen makes that longer to write, the share contains it.
// Other functions are not interrupted either: the searches (LOCATE, INSTR, POSITION,
// SUBSTRING_INDEX) take only short literal needles (mysqlBuiltNeedle), and what is left (REVERSE
// over a value built by nesting CONCAT) runs as the runaways mysqlServer counts and contains.
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
	"sformat":        "SFORMAT pads values to up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"weight_string":  "WEIGHT_STRING(… AS CHAR(n)) pads values to up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"export_set":     "EXPORT_SET multiplies its strings by up to 128 in each call, building values of up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"benchmark":      "BENCHMARK only spends server time",
}

// mysqlDenied refuses, in lower (lower-cased MySQL text), a call of one of mysqlDeniedCalls and
// EXPLAIN FOR CONNECTION, which shows the plan (in JSON, the literals) of the statement another
// connection runs: every task's connections log in as one reader, so MariaDB shows them all to
// it. Names are matched as whole words however they are spaced or commented.
func mysqlDenied(lower string) string {
	for i := 0; i < len(lower); {
		if !sandbox.IsIdentByte(lower[i]) {
			i++
			continue
		}
		j := i
		for j < len(lower) && sandbox.IsIdentByte(lower[j]) {
			j++
		}
		w, next := lower[i:j], sandbox.SkipGap(lower, j)
		if reason, ok := mysqlDeniedCalls[w]; ok && next < len(lower) && lower[next] == '(' {
			return "refused: " + reason
		}
		if w == "for" && strings.HasPrefix(lower[next:], "connection") && (next+10 == len(lower) || !sandbox.IsIdentByte(lower[next+10])) {
			return "refused: EXPLAIN FOR CONNECTION shows another connection's statement, which may be another task's"
		}
		i = j
	}
	return ""
}
