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
// 70-byte statement); BENCHMARK only spends server time; ENCRYPT's crypt() takes its rounds from
// the salt (1,000,000 rounds of $5$ ran 0.4 s past a 1 s limit, the most 999,999,999). Nesting (CONCAT in derived tables, HEX
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
	"encrypt":        "ENCRYPT runs the system's crypt(), whose salt sets its rounds ('$5$rounds=999999999$'), for minutes without checking for a kill, holding a lock every other ENCRYPT waits on",
}

// mysqlWhySpatial says why the spatial functions are refused.
const mysqlWhySpatial = "MariaDB's spatial functions run their geometry (distances, relations, unions, buffers) without checking for a kill, in time up to the product of the two geometries' sizes: ST_Distance between two multipoints of 10,000 points each ran 7 s past a 1 s deadline, and a geometry may be read from a built text or string of megabytes"

// mysqlSpatialCalls are MariaDB's spatial functions without the ST_ or MBR prefix
// (mysqlSpatial), but X and Y, which read one coordinate of a point and are likelier names of a
// common table expression (WITH x (a) AS …).
var mysqlSpatialCalls = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range strings.Fields(`area asbinary astext aswkb aswkt boundary buffer centroid contains convexhull
		crosses dimension disjoint endpoint envelope equals exteriorring geomcollfromtext geomcollfromwkb
		geometrycollection geometrycollectionfromtext geometrycollectionfromwkb geometryfromtext geometryfromwkb
		geometryn geometrytype geomfromtext geomfromwkb glength interiorringn intersects isclosed isempty isring
		issimple linefromtext linefromwkb linestring linestringfromtext linestringfromwkb mlinefromtext mlinefromwkb
		mpointfromtext mpointfromwkb mpolyfromtext mpolyfromwkb multilinestring multilinestringfromtext
		multilinestringfromwkb multipoint multipointfromtext multipointfromwkb multipolygon multipolygonfromtext
		multipolygonfromwkb numgeometries numinteriorrings numpoints overlaps point pointfromtext pointfromwkb pointn
		pointonsurface polyfromtext polyfromwkb polygon polygonfromtext polygonfromwkb srid startpoint touches within`) {
		m[n] = true
	}
	return m
}()

// mysqlSpatial reports whether w, a called name, is one of MariaDB's spatial functions: ST_…,
// MBR… and mysqlSpatialCalls.
func mysqlSpatial(w string) bool {
	return strings.HasPrefix(w, "st_") || strings.HasPrefix(w, "mbr") || mysqlSpatialCalls[w]
}

// mysqlDenied refuses, in lower (lower-cased MySQL text), a call of one of mysqlDeniedCalls or
// of a spatial function (mysqlSpatial), and EXPLAIN FOR CONNECTION, which shows the plan (in JSON, the literals) of the statement another
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
		if call := next < len(lower) && lower[next] == '('; call {
			if reason, ok := mysqlDeniedCalls[w]; ok {
				return "refused: " + reason
			}
			if mysqlSpatial(w) {
				return "refused: " + strings.ToUpper(w) + " is not allowed: " + mysqlWhySpatial
			}
		}
		if w == "for" && strings.HasPrefix(lower[next:], "connection") && (next+10 == len(lower) || !sandbox.IsIdentByte(lower[next+10])) {
			return "refused: EXPLAIN FOR CONNECTION shows another connection's statement, which may be another task's"
		}
		i = j
	}
	return ""
}
