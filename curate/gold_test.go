package curate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/rundir"
)

// TestBuildUnjudged: a trajectory whose gold SQL failed becomes a row with its gold_error and
// no gold_dialect, counted unjudged in stats.json and the card; a gold judged against the
// task's SQLite file keeps gold_dialect sqlite, one judged on its own dialect names it.
func TestBuildUnjudged(t *testing.T) {
	tok := loadTokenizer(t)
	tmp := t.TempDir()
	run := filepath.Join(tmp, "run")
	judged, unjudged, ref := handTrajectory("k/1", "alpha", 2), handTrajectory("k/2", "alpha", 2), handTrajectory("k/3", "beta", 1)
	unjudged.Dialect, unjudged.Correct = datasets.Postgres, false
	unjudged.GoldError = "error: function strftime(unknown, text) does not exist"
	ref.Dialect, ref.GoldDialect = datasets.Postgres, datasets.SQLite
	writeRun(t, run, []*rundir.Trajectory{judged, unjudged, ref}, 10)
	out := filepath.Join(tmp, "ds")
	rep, err := Build(context.Background(), []string{run}, BuildOptions{Tokenizer: tok, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]*Row{}
	if err := ReadRows(context.Background(), out, func(r *Row) error { rows[r.Key] = r; return nil }); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]struct{ goldError, goldDialect string }{
		"k/1": {"", "sqlite"}, "k/2": {unjudged.GoldError, ""}, "k/3": {"", "sqlite"},
	} {
		r := rows[key]
		if r == nil {
			t.Fatalf("no row %s", key)
		}
		if r.GoldError != want.goldError || r.GoldDialect != want.goldDialect || r.Outcome().Unjudged != (want.goldError != "") {
			t.Errorf("row %s: gold_error %q, gold_dialect %q, unjudged %v; want %q, %q", key, r.GoldError, r.GoldDialect, r.Outcome().Unjudged,
				want.goldError, want.goldDialect)
		}
	}
	back, err := ReadReport(out)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Unjudged != 1 || back.Unjudged != 1 || back.Correct != 2 || len(back.Teachers) != 2 ||
		back.Teachers[0].Unjudged != 1 || back.Teachers[1].Unjudged != 0 {
		t.Errorf("stats.json: unjudged %d, correct %d, teachers %+v", back.Unjudged, back.Correct, back.Teachers)
	}
	card, err := os.ReadFile(filepath.Join(out, CardFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"- Correct (`correct`): 2 of 3 rows (66.7%); 1 of 3 unjudged: their gold SQL failed (`gold_error`)",
		"| correct | unjudged |", "| 50.0% | 1 |", "name: gold_error", "name: gold_dialect", "chainedsql-sft/v5",
	} {
		if !strings.Contains(string(card), want) {
			t.Errorf("card lacks %q:\n%s", want, card)
		}
	}
}

// v4Row is a dataset row as curate wrote it before chainedsql-sft/v5: no gold_error and no
// gold_dialect (the columns the reader needs for the outcome, and a key).
type v4Row struct {
	Teacher   string `parquet:"teacher,dict"`
	Dialect   string `parquet:"dialect,dict"`
	Turns     int64  `parquet:"turns"`
	Converged bool   `parquet:"converged"`
	ExecOK    bool   `parquet:"exec_ok"`
	Correct   bool   `parquet:"correct"`
	GoldSQL   string `parquet:"gold_sql"`
	Key       string `parquet:"key"`
}

// TestReadOldSchema: a dataset of the schema before gold_error reads without an error, its
// gold columns empty, so no row is unjudged.
func TestReadOldSchema(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, DataDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := parquet.WriteFile(filepath.Join(dir, DataDir, "train-00000-of-00001.parquet"), []v4Row{
		{Teacher: "t", Dialect: "postgres", Turns: 2, Converged: true, ExecOK: true, Correct: true, GoldSQL: "SELECT 1", Key: "k1"},
		{Teacher: "t", Dialect: "postgres", Turns: 3, GoldSQL: "SELECT 2", Key: "k2"},
	}); err != nil {
		t.Fatal(err)
	}
	var rows []*Row
	if err := ReadRows(context.Background(), dir, func(r *Row) error { rows = append(rows, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || !rows[0].Correct || rows[1].Correct || rows[0].GoldSQL != "SELECT 1" {
		t.Fatalf("rows %+v", rows)
	}
	for _, r := range rows {
		if r.GoldError != "" || r.GoldDialect != "" || r.Outcome().Unjudged {
			t.Errorf("row %s: gold_error %q, gold_dialect %q, unjudged %v", r.Key, r.GoldError, r.GoldDialect, r.Outcome().Unjudged)
		}
	}
}
