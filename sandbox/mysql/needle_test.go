package mysql

import (
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// TestMySQLBuiltNeedle: LOCATE, INSTR, POSITION and SUBSTRING_INDEX are refused where their needle
// is not a short literal, a number or NULL, and only there: the golds' forms pass, and the names
// inside strings and comments, and quoted names not called, are no calls; a quoted name called
// (`locate`(…)) is one, and 1--1 is no comment (MySQL's -- needs a space or a control
// character after it).
func TestMySQLBuiltNeedle(t *testing.T) {
	refused := []string{
		"SELECT LOCATE(HEX(HEX(HEX('a'))), name) FROM t",
		"SELECT INSTR(name, HEX(HEX(x))) FROM t",
		"SELECT INSTR(a.name, b.name) FROM a, b",
		"SELECT POSITION(CONCAT(x, x) IN name) FROM t",
		"SELECT SUBSTRING_INDEX(name, n.big, 1) FROM t, (SELECT HEX(HEX(name)) big FROM t) n",
		"SELECT locate /* c */ (x, y) FROM t",
		"SELECT INSTR(name, '" + strings.Repeat("x", 65) + "') FROM t",
		"SELECT LOCATE('a' 'b', name) FROM t",
		"SELECT 1--1, LOCATE(x, name) FROM t",
		"SELECT `locate`(x, name) FROM t",
		"SELECT `INSTR` /* c */ (name, x) FROM t",
		"SELECT `substring_index`(name, x, 1) FROM t",
		"SELECT INSTR(name -- )\n, x) FROM t",
		"SELECT SUBSTRING_INDEX(name /* ) */, x, 1) FROM t",
	}
	passed := []string{
		"SELECT INSTR(T2.fastestLapTime, ':') FROM t T2",
		"SELECT SUBSTR(time, 1, INSTR(time, ':') - 1) FROM t",
		"SELECT LOCATE('x', name), LOCATE(\"y\", name, 3) FROM t",
		"SELECT POSITION('a' IN name), POSITION(NULL IN name), INSTR(name, 1) FROM t",
		"SELECT SUBSTRING_INDEX(name, ',', 1) FROM t",
		"SELECT INSTR(name, 'it''s') FROM t",
		"SELECT 'locate(x, y)', `instr(a, b)` FROM t -- locate(x, y)",
		"SELECT `locate`, `instr` FROM t WHERE `substring_index` = 1 -- locate(x, y)",
		"SELECT x FROM t #--\n-- locate(x, y)\n--\tinstr(a, b)",
		"SELECT INSTR(name, /* ) */ ':'), LOCATE(/* , */ 'a', name), SUBSTRING_INDEX(name # ,\n, ',', 1) FROM t",
		"SELECT name FROM t WHERE name IN ('a', 'b') /* instr(a, b) */",
		"SELECT INSTR(name, '" + strings.Repeat("x", 64) + "') FROM t",
	}
	want := map[string]string{}
	for _, q := range refused {
		want[q] = "needle"
	}
	myScreenCases(t, want, passed)
}

// myScreenCases fails t for each statement of refused the MySQL screen passes or refuses
// without saying its reason's part, and for each statement of passed it refuses.
func myScreenCases(t *testing.T, refused map[string]string, passed []string) {
	t.Helper()
	for q, want := range refused {
		if _, why := sandbox.Screen(q, datasets.MySQL); !strings.Contains(why, want) {
			t.Errorf("%s\n  refused with %q\n  want it to say %q", q, why, want)
		}
	}
	for _, q := range passed {
		if _, why := sandbox.Screen(q, datasets.MySQL); why != "" {
			t.Errorf("%s\n  refused: %s", q, why)
		}
	}
}

// TestMySQLLikePattern: LIKE and JSON_SEARCH are refused where their pattern is not a string
// literal (lower- or upper-cased at most), a number or NULL, or is a literal that may cost
// more than mysqlMaxPasses comparisons per character of the text (ASCII letters folded, any
// other character agreeing with anything, as MariaDB's accent-insensitive collations make it);
// the golds' forms pass, and LIKE inside strings, quoted names and comments is no operator
// (after 1--1 it is one; `json_search`(…) is JSON_SEARCH). SOUNDS
// LIKE is held to it too: a column named sounds before LIKE reads as SOUNDS LIKE to the screen.
func TestMySQLLikePattern(t *testing.T) {
	myScreenCases(t, map[string]string{
		"SELECT name FROM t WHERE name LIKE CONCAT('%', x, '%')":               "LIKE's pattern must be a string literal",
		"SELECT a.name LIKE b.name FROM a, b":                                  "LIKE's pattern must be",
		"SELECT name NOT LIKE (SELECT max(x) FROM t) FROM t":                   "LIKE's pattern must be",
		"SELECT name LIKE +x FROM t":                                           "LIKE's pattern must be",
		"SELECT name LIKE lower(y) FROM t":                                     "LIKE's pattern must be",
		"SELECT name LIKE 0x25333325 FROM t":                                   "LIKE's pattern must be",
		"SELECT name LIKE x'25333325' FROM t":                                  "LIKE's pattern must be",
		"SELECT name like/**/y FROM t":                                         "LIKE's pattern must be",
		"SELECT s LIKE '%" + strings.Repeat("3", 63) + "4%' FROM t":            "may take over 8 comparisons",
		"SELECT s LIKE '%aaaaaaaab%' FROM t":                                   "may take over 8",
		"SELECT s LIKE '%a' 'aaaaaaaab%' FROM t":                               "may take over 8",
		"SELECT s LIKE LOWER(('%AAAAAAAAB%')) FROM t":                          "may take over 8",
		"SELECT s LIKE '%ééééééééé%' FROM t":                                   "may take over 8",
		"SELECT s LIKE '%a_a_a_a_a_b%' FROM t":                                 "may take over 8",
		"SELECT s LIKE '%" + strings.Repeat("!%", 9) + "b%' ESCAPE '!' FROM t": "may take over 8",
		"SELECT s LIKE 'a' ESCAPE x FROM t":                                    "ESCAPE",
		"SELECT JSON_SEARCH(j, 'all', CONCAT('%', x)) FROM t":                  "JSON_SEARCH's pattern must be a string literal",
		"SELECT JSON_SEARCH(j, 'all', '%aaaaaaaaab%') FROM t":                  "JSON_SEARCH with the pattern",
		"SELECT sounds LIKE p FROM (SELECT 'a' AS sounds, 'b' AS p) d":         "LIKE's pattern must be",
		"SELECT name SOUNDS LIKE other FROM t":                                 "LIKE's pattern must be",
		"SELECT JSON_SEARCH(j, 'all', '%a%', x) FROM t":                        "ESCAPE",
		// MySQL reads -- as a comment only before a space or a control character
		"SELECT 1--1, s LIKE CONCAT('%', p, '4%') FROM t":                "LIKE's pattern must be",
		"SELECT s LIKE '%a%'--1, s LIKE p FROM t":                        "LIKE's pattern must be",
		"SELECT 1--1, JSON_SEARCH(j, 'one', CONCAT('%', p)) FROM t":      "JSON_SEARCH's pattern must be",
		"SELECT `json_search`(j, 'one', CONCAT('%', p)) FROM t":          "JSON_SEARCH's pattern must be",
		"SELECT `JSON_SEARCH` /* c */ (j, 'all', '%aaaaaaaaab%') FROM t": "JSON_SEARCH with the pattern",
		// a ) or , inside a comment ends no argument
		"SELECT JSON_SEARCH(j, 'one' /* ) */, CONCAT('%', p)) FROM t": "JSON_SEARCH's pattern must be",
		"SELECT JSON_SEARCH(j, 'one', '%a%' -- )\n, x) FROM t":        "ESCAPE",
		// an ESCAPE after COLLATE is the pattern's: its 14 backslashes cost 14 under '!', 7 under \
		"SELECT s LIKE '%" + strings.Repeat(`\\`, 14) + "4%' COLLATE utf8mb4_bin ESCAPE '!' FROM t": "may take over 8",
		"SELECT s LIKE 'a' COLLATE `utf8mb4_bin` ESCAPE x FROM t":                                   "ESCAPE",
		"SELECT s LIKE CONCAT('%', 'aaaaaaaa', 'b%') FROM t":                                        "may take over 8",
		"SELECT s LIKE CONCAT('%', 'a', x) FROM t":                                                  "LIKE's pattern must be",
		"SELECT s LIKE CONCAT('%', 1e5, '%') FROM t":                                                "LIKE's pattern must be",
		"SELECT s LIKE CONCAT('%', 007, '%') FROM t":                                                "LIKE's pattern must be",
		"SELECT s LIKE LOWER('%a', '%') FROM t":                                                     "LIKE's pattern must be",
		"SELECT JSON_SEARCH(j, 'one', CONCAT('%', 'a', '%') 'b') FROM t":                            "JSON_SEARCH's pattern must be",
	}, []string{
		"SELECT count(*) FROM t WHERE name LIKE '%Computer Science%' AND code NOT LIKE 'x%'",
		"SELECT time FROM laptimes WHERE time LIKE '_:%:__.___'",
		"SELECT name FROM t WHERE LOWER(name) LIKE LOWER('%New York%') OR UPPER(x) LIKE UCASE ( 'A%' )",
		`SELECT name FROM t WHERE name LIKE "%w%"`,
		"SELECT name FROM t WHERE name LIKE 'abc' 'def%' OR name LIKE ('%a%') OR name LIKE BINARY 'A%'",
		"SELECT name FROM t WHERE name LIKE _utf8mb4'%a%' COLLATE utf8mb4_bin OR name LIKE N'%b%'",
		"SELECT name FROM t WHERE name LIKE '%it''s%' OR name LIKE '%50\\%%' OR name LIKE '%a!%%' ESCAPE '!'",
		"SELECT name FROM t WHERE name LIKE '%José%'",
		"SELECT name FROM t WHERE name LIKE '%a%' || name LIKE 'b%'",
		"SELECT name FROM t WHERE code LIKE 5 OR code LIKE -1.5e3 OR code LIKE NULL",
		"SELECT name FROM t WHERE name SOUNDS LIKE 'Smith'",
		"SELECT 'x LIKE y', `like` FROM t -- name LIKE other\nWHERE a = 1 /* b LIKE c */",
		"SELECT JSON_SEARCH(j, 'one', 'abc'), JSON_SEARCH(j, 'all', '%a%', NULL, '$.x'), JSON_SEARCH(j, 'all', 'a!_b', '!') FROM t",
		"SELECT `like`, `sounds` FROM t WHERE `locate` = 1",
		"SELECT JSON_SEARCH(j, /* ) */ 'one', /* p */ '%a%' /* , x */) FROM t",
		"SELECT name FROM t WHERE name LIKE CONCAT('%', 'New York', '%') OR year LIKE CONCAT(2019, '%') OR x LIKE CONCAT(LOWER('%A'), ('%'))",
		"SELECT JSON_SEARCH(j, 'all', CONCAT('%', 'a', '%')) FROM t",
		"SELECT name FROM t WHERE name LIKE '%a!%%' COLLATE utf8mb4_bin ESCAPE '!' OR name LIKE 'b%' COLLATE 'utf8mb4_bin' -- x LIKE y\n",
	})
}

// TestMySQLSpatialAndCrypt: MariaDB's spatial functions (ST_…, MBR… and the names without a
// prefix) and ENCRYPT are refused where they are called, saying why; X and Y, columns and CTEs
// named like them, and names that merely start alike pass.
func TestMySQLSpatialAndCrypt(t *testing.T) {
	myScreenCases(t, map[string]string{
		"SELECT ST_Distance(a, b) FROM t":                      "spatial functions",
		"SELECT st_union /* c */ (a, b) FROM t":                "spatial functions",
		"SELECT Contains(a, b), 1 FROM t":                      "spatial functions",
		"SELECT MBRIntersects(a, b) FROM t":                    "spatial functions",
		"SELECT AsText(Buffer(GeomFromText(x), 1)) FROM t":     "spatial functions",
		"SELECT ENCRYPT('x', '$5$rounds=999999999$ab')":        "ENCRYPT runs the system's crypt()",
		"SELECT encrypt /* c */ (name, '$6$rounds=9$') FROM t": "ENCRYPT",
	}, []string{
		"SELECT x, y, area, contains, point, encrypt FROM t",
		"WITH x (a) AS (SELECT 1) SELECT X(p), Y(p), a FROM x",
		"SELECT STDDEV(a), STR_TO_DATE(b, '%Y'), st.a, mbr.b FROM st, mbr",
		"SELECT AES_ENCRYPT(a, 'k'), DES_ENCRYPT(a) FROM t",
	})
}

// TestMySQLTrim: TRIM from the end (BOTH, TRAILING or neither) of a remstr that is not a
// literal of one byte is refused; TRIM of spaces, of one character, and LEADING pass.
func TestMySQLTrim(t *testing.T) {
	myScreenCases(t, map[string]string{
		"SELECT TRIM(TRAILING '33' FROM s) FROM t":            "TRIM of",
		"SELECT TRIM(BOTH 'ab' FROM s) FROM t":                "TRIM of",
		"SELECT trim ( 'ab' FROM s) FROM t":                   "TRIM of",
		"SELECT TRIM(TRAILING 'é' FROM s) FROM t":             "TRIM of",
		"SELECT TRIM(TRAILING x FROM s) FROM t":               "TRIM of",
		"SELECT TRIM(TRAILING (SELECT max(x) FROM t) FROM s)": "TRIM of",
		"SELECT TRIM_ORACLE(TRAILING 'ab' FROM s) FROM t":     "TRIM of",
		"SELECT 1--1, TRIM(TRAILING '33' FROM s) FROM t":      "TRIM of",
		"SELECT TRIM(TRAILING '33' /* ) */ FROM s) FROM t":    "TRIM of",
		"SELECT TRIM(TRAILING '33' # )\n FROM s) FROM t":      "TRIM of",
	}, []string{
		"SELECT TRIM(name), TRIM(BOTH FROM name), TRIM(TRAILING ' ' FROM name), TRIM('.' FROM name) FROM t",
		"SELECT TRIM(LEADING '00' FROM code), TRIM(LEADING x FROM code), TRIM(BOTH \"x\" FROM code) FROM t",
		"SELECT RTRIM(name), LTRIM(name) FROM t WHERE 'trim(trailing xy from z)' = name",
		"SELECT TRIM(/* ) */ LEADING 'ab' FROM s), TRIM(BOTH /* x */ ' ' FROM s) FROM t",
	})
}

// TestMySQLScreenReadsAsMariaDB: the screen's MySQL rules read a statement as MariaDB's lexer
// does. A denied name, a spatial function, @@ or FOR CONNECTION inside a string (either quote,
// backslash escapes and doubled quotes kept inside), a backquoted name not called or a comment
// is no call (these were refused: 'Lost in Space (1998)' called SPACE), while code after a
// string that ends, after 1--1 (a subtraction) and inside an executable comment (/*! … */,
// which MariaDB runs: Screen refuses it anyway, so mysqlText is asked directly) is read.
func TestMySQLScreenReadsAsMariaDB(t *testing.T) {
	myScreenCases(t, map[string]string{
		`SELECT 'a\\', space(5) FROM t`:                                         "SPACE builds",
		`SELECT "a\\", space(5) FROM t`:                                         "SPACE builds",
		`SELECT 'a''', repeat('x', 9) FROM t`:                                   "REPEAT builds",
		`SELECT "a""", lpad('x', 9, 'y') FROM t`:                                "LPAD builds",
		"SELECT `a``(`, `space`(9) FROM t":                                      "SPACE builds",
		"SELECT 1--1, space(5) FROM t":                                          "SPACE builds",
		"SELECT 1 -- x\n, Point(1, 2)":                                          "spatial functions",
		"SELECT 1 /* 'x */, ST_Distance(a, b)":                                  "spatial functions",
		"SELECT 'x' # '\n, @@version":                                           "@@ system variables",
		"EXPLAIN FOR /* 'x */ connection 1":                                     "another connection",
		"SELECT 1e1like CONCAT('%', x) FROM t":                                  "LIKE's pattern must be",
		"SELECT CAST(x AS CHAR(16000000) BYTE) FROM t":                          "BINARY(n)",
		"SELECT CAST(x AS CHARACTER (9) /* ) */ CHARACTER SET binary) FROM t":   "BINARY(n)",
		"SELECT CONVERT(x, CHAR(9) CHAR SET 'bin\\ary') FROM t":                 "BINARY(n)",
		"SELECT CAST(x AS CHAR(9) charset `binary`), CAST(y AS CHAR(2)) FROM t": "BINARY(n)",
		"SELECT x FROM t WHERE 1.5like y":                                       "LIKE's pattern must be",
		"SELECT x FROM t WHERE .5like y":                                        "LIKE's pattern must be",
	}, []string{
		"SELECT t.1e1like, t.5like FROM t",
		"SELECT CAST(x AS CHAR(9)), CAST(y AS CHAR(9) CHARACTER SET utf8mb4), CHAR(65, 66 USING binary), CAST(z AS CHAR(9) BINARY) FROM t",
		"SELECT * FROM movies WHERE title = 'Lost in Space (1998)'",
		`SELECT * FROM t WHERE name = "Point (Reyes)" OR name = 'Contains (x)' OR note = 'repeat(3) & lpad(x)'`,
		`SELECT 'it\'s space(', "a\" repeat(", 'b'' st_union(' FROM t`,
		"SELECT x FROM t WHERE email LIKE '%@@%' OR note = 'for connection'",
		"SELECT x FROM t /* ExtractValue(a, b), @@version */ WHERE y = 1 # polygon(1)\n-- space(3)\n",
		"SELECT `space`, `repeat` AS `lpad(` FROM t",
	})
	for q, want := range map[string]string{
		"SELECT /*!50000 space(3) */":             "SPACE builds",
		"SELECT space/*!*/(3)":                    "SPACE builds",
		"SELECT space /*!50000 (3) */":            "SPACE builds",
		"SELECT 1 /*M!100000 , repeat('x', 9) */": "REPEAT builds",
		"SELECT /*! @@version */":                 "@@ system variables",
		"SELECT /*! 1 /* c */, point(1, 2) */":    "spatial functions",
		"SELECT /*! 1 */ , 'x */', space(2)":      "SPACE builds",
	} {
		if why := mysqlText(strings.ToLower(q)); !strings.Contains(why, want) {
			t.Errorf("mysqlText(%q) = %q, want it to say %q", q, why, want)
		}
	}
	for _, q := range []string{"SELECT '/*!', space FROM t", "SELECT x /* /*! space(3) */ FROM t"} {
		if why := mysqlText(strings.ToLower(q)); why != "" {
			t.Errorf("mysqlText(%q) = %q, want it passed", q, why)
		}
	}
}
