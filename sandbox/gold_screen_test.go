package sandbox_test

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
)

// TestEveryGoldPassesScreen: the screen refuses no gold SQL of the benchmarks at hand in any
// dialect it may run on: the bundled sample's SQLite, PostgreSQL and MySQL golds; Spider dev's,
// BIRD dev's and BIRD mini-dev's SQLite golds, which server runs execute too
// (datasets.Task.GoldFor); and defog's hand-written PostgreSQL, MySQL and SQLite golds
// (sql-eval), the nearest thing here to translated server SQL. A rule that trips a gold leaves
// its task unjudged (or judged on its SQLite file, on a server), and costs a policy that writes
// the same SQL its turn. One kind of refusal is expected:
// on PostgreSQL, a SQLite gold that quotes a LIKE pattern in double quotes (Spider's
// LIKE "%w%"), which PostgreSQL reads as a column and so fails anyway; the judge runs such a
// gold, refused or failed alike, on the task's SQLite file (judge.Judge.Reference).
func TestEveryGoldPassesScreen(t *testing.T) {
	all := []datasets.Dialect{datasets.SQLite, datasets.Postgres, datasets.MySQL}
	n, quoted := 0, 0
	check := func(name, gold string, ds ...datasets.Dialect) {
		t.Helper()
		for _, d := range ds {
			n++
			_, why := sandbox.Screen(gold, d)
			if d == datasets.Postgres && quotedPattern.MatchString(gold) && strings.Contains(why, "not a string constant") {
				quoted++
				continue
			}
			if why != "" {
				t.Errorf("%s on %s: %s\n%s", name, d, why, gold)
			}
		}
	}
	tasks, err := datasets.LoadTasks(datasets.SpecSample, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		for d, gold := range task.Gold {
			check(task.ID, gold, d)
		}
	}
	for _, spec := range []string{"spider:data/spider/dev.json", "bird:data/bird/dev.json", "minidev:data/bird/mini_dev_sqlite.json"} {
		kind, rel, _ := strings.Cut(spec, ":")
		tasks, err := datasets.LoadTasks(kind+":"+shared.Path(t, rel), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			for _, gold := range task.Gold {
				check(task.ID, gold, all...)
			}
		}
	}
	for d, glob := range map[datasets.Dialect]string{datasets.Postgres: "*_postgres.csv", datasets.MySQL: "*_mysql.csv", datasets.SQLite: "*_sqlite.csv"} {
		files, _ := filepath.Glob(filepath.Join(shared.Path(t, "data/multi/defog/sql_eval"), glob))
		if len(files) == 0 {
			t.Fatalf("no defog %s files", glob)
		}
		for _, f := range files {
			for i, q := range defogGolds(t, f) {
				check(filepath.Base(f)+":"+strconv.Itoa(i+2), q, d)
			}
		}
	}
	t.Logf("%d gold screenings; on PostgreSQL %d golds with a LIKE pattern in double quotes (a column there) refused", n, quoted)
}

// quotedPattern matches a LIKE whose pattern is in double quotes: a string in SQLite, a column
// in PostgreSQL.
var quotedPattern = regexp.MustCompile(`(?i)\blike\s+"[^"]*"`)

// defogGolds reads the statements of the query column of one of defog sql-eval's question files.
func defogGolds(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.LazyQuotes = true // their free-text columns hold bare quotes
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	col := -1
	for i, h := range recs[0] {
		if h == "query" {
			col = i
		}
	}
	if col < 0 {
		t.Fatalf("%s: no query column in %v", path, recs[0])
	}
	var out []string
	for i, r := range recs[1:] {
		// A row with a bare quote in its question reads as fewer fields; its query is not
		// where the header says.
		if len(r) != len(recs[0]) {
			t.Logf("%s: row %d has %d fields, not %d; skipped", filepath.Base(path), i+2, len(r), len(recs[0]))
			continue
		}
		// A cell holds the accepted answers, one statement each; {a, b} in a select list or
		// GROUP BY {} is sql-eval's template, expanded before it runs.
		for rest := r[col]; strings.TrimSpace(rest) != ""; {
			var q string
			q, rest = sandbox.SplitFirst(rest)
			if !strings.Contains(q, "{") {
				out = append(out, q)
			}
		}
	}
	return out
}
