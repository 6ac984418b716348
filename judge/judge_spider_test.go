package judge

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
)

func TestSpiderRemoveDistinct(t *testing.T) {
	for in, want := range map[string]string{
		"SELECT DISTINCT a FROM t":                            "SELECT  a FROM t",
		"SELECT count(DISTINCT t.a) FROM t":                   "SELECT count( t.a) FROM t",
		"select count(distinct(a)) from t":                    "select count((a)) from t",
		"SELECT a FROM t WHERE b = 'distinct'":                "SELECT a FROM t WHERE b = 'distinct'",
		`SELECT "distinct", [distinct], ` + "`distinct`":      `SELECT "distinct", [distinct], ` + "`distinct`",
		"SELECT a -- distinct\nFROM t":                        "SELECT a -- distinct\nFROM t",
		"SELECT t.distinct FROM t":                            "SELECT t. FROM t",
		"SELECT distinct_count FROM t":                        "SELECT distinct_count FROM t",
		"SELECT a FROM t; SELECT DISTINCT b FROM u":           "SELECT a FROM t; ",
		"SELECT a FROM t;  -- c\n  SELECT 2":                  "SELECT a FROM t;  -- c\n  ",
		"SELECT a FROM t;\nSELECT 2":                          "SELECT a FROM t;",
		"; SELECT 1":                                          "; ",
		"SELECT CASE WHEN a THEN 1 END, (SELECT 1; SELECT 2)": "SELECT CASE WHEN a THEN 1 END, (SELECT 1; ",
		"SELECT (1; 2) ; 3":                                   "SELECT (1; 2) ; ",
		"SELECT 'it''s; distinct'; x":                         "SELECT 'it''s; distinct'; ",
		"SELECT 1e5distinct":                                  "SELECT 1e5",
	} {
		got, ok := spiderRemoveDistinct(in)
		if !ok || got != want {
			t.Errorf("remove_distinct(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if _, ok := spiderRemoveDistinct(" \n\t"); ok {
		t.Error("blank text: sqlparse finds no statement")
	}
}

// TestSpiderRemoveDistinctAgainstSqlparse compares spiderRemoveDistinct with remove_distinct
// run by the real sqlparse (Debian's python3-sqlparse) on the Spider dev gold queries, tricky
// cases and random SQL-like text.
func TestSpiderRemoveDistinctAgainstSqlparse(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import sqlparse").Run(); err != nil {
		t.Skipf("%s with sqlparse is not available (apt-get install python3-sqlparse): %v", py, err)
	}
	var corpus []string
	if dev := shared.Dir() + "/data/spider/dev.json"; fileExists(dev) {
		tasks, err := datasets.LoadTasks("spider:"+dev, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			corpus = append(corpus, task.Gold[datasets.SQLite])
		}
	}
	pieces := []string{
		"SELECT", " ", "  ", "\n", "\r\n", "\t", "DISTINCT", "distinct", "Distinct", "count(", "(", ")", ";", ",", ".",
		"a", "t1", "_x", "'", "''", "'s'", `"`, `"q"`, "`", "`b`", "[", "]", "[n]", "--", "-- c\n", "# ", "#t", "##t", "@v",
		"$x", "$$", "$tag$", ":p", "?", "%s", "%(k)s", "\\", "\\cmd", "/*", "*/", "/* c */", "*", "END", "end(", "CASE",
		"BEGIN", "CREATE", "IF", "LOOP", "END LOOP", "END IF", "DECLARE", "1", "-1", "1.5", ".5", "1.", "1e5", "1.5E-3",
		"0x1F", "12ab", "é", "中", "ſ", "×", "ORDER BY", "GROUP BY", "NOT IN", "IN", "LEFT JOIN", "UNION ALL", "NOT NULL",
		"LIKE", "NOT LIKE", "WITH' TIME ZONE 'u'", "NULLS FIRST", "LATERAL VIEW EXPLODE", ":=", "::", "´n´", "´", "\u00a0", "\x1c", "\u2028", "\r", "--+h", "/*+ h */", "%(", "$1", "x$", "DOUBLE PRECISION", "CREATE OR REPLACE", "ORDER\nBY", "distinct$", "distinct#", ">=", "> =", "<>", "!", "+", "-", "/", "%", "^", "|", "&", "~", "=", "AT TIME ZONE 'z'",
	}
	rng := rand.New(rand.NewPCG(20, 1))
	for i := 0; i < 4000; i++ {
		var b strings.Builder
		for n := 1 + rng.IntN(14); n > 0; n-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		corpus = append(corpus, b.String())
	}
	in, _ := json.Marshal(corpus)
	cmd := exec.Command(py, "-c", `
import json, sys, sqlparse
out = []
for s in json.load(sys.stdin):
    st = sqlparse.parse(s)
    out.append(''.join(t.value for t in st[0].flatten() if t.value.lower() != 'distinct') if st else None)
json.dump(out, sys.stdout)
`)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outData, err := cmd.Output()
	if err != nil {
		t.Fatalf("sqlparse: %v: %s", err, stderr.String())
	}
	var want []*string
	if err := json.Unmarshal(outData, &want); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i, s := range corpus {
		got, ok := spiderRemoveDistinct(s)
		if ok != (want[i] != nil) || ok && got != *want[i] {
			bad++
			if bad <= 15 {
				w := "<no statement>"
				if want[i] != nil {
					w = *want[i]
				}
				t.Errorf("remove_distinct(%q) = %q (%v), sqlparse %q", s, got, ok, w)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d texts differ from sqlparse", bad, len(corpus))
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
