package view

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/curate"
)

// unjudgedDataset writes a dataset of three rows: alpha's on sqlite (correct), alpha's on
// postgres whose gold SQL failed there (unjudged), beta's on postgres judged against the
// task's SQLite file (correct).
func unjudgedDataset(t *testing.T) string {
	t.Helper()
	msgs := []chat.Message{{Role: chat.RoleSystem, Content: "s"}, {Role: chat.RoleUser, Content: "Question: q"},
		{Role: chat.RoleAssistant, Content: "<think>t</think>\n<sql>SELECT 1</sql>"}}
	row := func(key, teacher, dialect string, correct bool, goldError, goldDialect string) curate.Row {
		return curate.Row{Messages: msgs, Teacher: teacher, Dialect: dialect, Difficulty: "simple", DBID: "shop", TaskID: "sample/" + key,
			Question: "q " + key, Turns: 1, ExecOK: true, Correct: correct, FinalSQL: "SELECT 1", GoldSQL: "SELECT 1",
			GoldError: goldError, GoldDialect: goldDialect, NumTokens: 10, NumTrainableTokens: 5, Key: key}
	}
	rows := []curate.Row{
		row("k1", "alpha", "sqlite", true, "", "sqlite"),
		row("k2", "alpha", "postgres", false, "error: function strftime(unknown, text) does not exist", ""),
		row("k3", "beta", "postgres", true, "", "sqlite"),
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, curate.DataDir), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, curate.DataDir, "train-00000-of-00001.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	w := curate.NewParquetWriter(f, 0)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestUnjudgedRows: the viewer filters unjudged rows (unjudged=1 or 0), marks them in the
// table, counts them in the charts' bars and the stats page's tables, shows the gold's error
// on the row page, and exports the gold columns.
func TestUnjudgedRows(t *testing.T) {
	s := openServer(t, loadTokenizer(t), unjudgedDataset(t))
	h := s.Handler()

	var p Page
	get(t, h, "/api/rows?unjudged=1", &p)
	if p.Total != 1 || p.Rows[0].Key != "k2" || !p.Rows[0].Unjudged {
		t.Errorf("unjudged=1: %+v", p)
	}
	var judged Page // a fresh one: unjudged is left out where false
	get(t, h, "/api/rows?unjudged=0", &judged)
	if judged.Total != 2 || judged.Rows[0].Unjudged || judged.Rows[1].Unjudged {
		t.Errorf("unjudged=0: %+v", judged)
	}
	if code := get(t, h, "/api/rows?unjudged=maybe", nil); code != 400 {
		t.Errorf("unjudged=maybe: %d, want 400", code)
	}

	var charts ChartsPage
	get(t, h, "/api/charts", &charts)
	bars := map[string]Bar{}
	for _, c := range charts.Charts {
		for _, b := range c.Bars {
			bars[c.Name+"/"+b.Label] = b
		}
	}
	for name, want := range map[string]Bar{
		"dialect/postgres": {Count: 2, Correct: 1, Unjudged: 1}, "dialect/sqlite": {Count: 1, Correct: 1},
		"teacher/alpha": {Count: 2, Correct: 1, Unjudged: 1}, "teacher/beta": {Count: 1, Correct: 1},
	} {
		if b := bars[name]; b.Count != want.Count || b.Correct != want.Correct || b.Unjudged != want.Unjudged {
			t.Errorf("chart bar %s: %+v, want %+v", name, b, want)
		}
	}

	var st StatsPage
	get(t, h, "/api/stats", &st)
	tables := st.Sections[0].Tables
	if !strings.HasSuffix(tables[0].Title, "; 1 of 3 unjudged: their gold SQL failed") {
		t.Errorf("per-teacher title %q", tables[0].Title)
	}
	col := slices.Index(tables[1].Header, "unjudged")
	if col < 0 || tables[1].Rows[0][0] != "postgres" || tables[1].Rows[0][col] != "1" || tables[1].Rows[1][col] != "0" {
		t.Errorf("per-dialect table %+v", tables[1])
	}

	var d Detail
	get(t, h, "/api/row?id=1", &d)
	if d.GoldError == "" || !strings.Contains(d.GoldError, "strftime") {
		t.Errorf("row page of k2: gold_error %q", d.GoldError)
	}
	var d3 Detail
	get(t, h, "/api/row?id=2", &d3)
	if d3.GoldError != "" || d3.GoldDialect != "sqlite" {
		t.Errorf("row page of k3: gold_error %q, gold_dialect %q", d3.GoldError, d3.GoldDialect)
	}

	var out bytes.Buffer
	q, err := ParseQuery(map[string][]string{"unjudged": {"1"}})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Export(context.Background(), q, FormatJSONL, &out); err != nil || n != 1 {
		t.Fatalf("export: %d rows, %v", n, err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["key"] != "k2" || !strings.Contains(got["gold_error"].(string), "strftime") || got["gold_dialect"] != "" {
		t.Errorf("exported row: key %v, gold_error %v, gold_dialect %v", got["key"], got["gold_error"], got["gold_dialect"])
	}
}

// TestBrowserUnjudged: the page filters unjudged rows from its Outcome panel, marks them
// beside correct, names them in the captions of the EX charts, and explains a row's gold error.
func TestBrowserUnjudged(t *testing.T) {
	b := newBrowser(t, openServer(t, loadTokenizer(t), unjudgedDataset(t)))
	b.open("#/?unjudged=1")
	if got := eval[string](b, `document.querySelector("#summary").textContent`); !strings.HasPrefix(got, "1 of 3") {
		t.Errorf("summary %q, want 1 of 3 rows", got)
	}
	if got := eval[string](b, `document.querySelector("#f-unjudged").value`); got != "1" {
		t.Errorf("the unjudged filter shows %q", got)
	}
	if n := eval[int](b, `[...document.querySelectorAll("#rows tbody .tag.warn")].filter((e) => e.textContent === "unjudged").length`); n != 1 {
		t.Errorf("%d rows marked unjudged, want 1", n)
	}
	b.open("#/")
	b.wait(`document.querySelector('figure[data-chart="dialect"] rect.bar') !== null`)
	if got := eval[string](b, `document.querySelector('figure[data-chart="dialect"] figcaption').textContent`); !strings.Contains(got, "1 unjudged") {
		t.Errorf("dialect chart caption %q", got)
	}
	if got := eval[string](b, `[...document.querySelectorAll('figure[data-chart="dialect"] rect.bar title')].map((e) => e.textContent).join("|")`); !strings.Contains(got, "postgres: 2 rows, 1 correct (EX 50.0%), 1 unjudged") {
		t.Errorf("dialect bars' titles %q", got)
	}
	b.open("#/row/1")
	if got := eval[string](b, `document.querySelector("#unjudged").textContent`); !strings.Contains(got, "strftime") {
		t.Errorf("row page: %q", got)
	}
	b.shot("unjudged-row")
	b.noErrors()
}
