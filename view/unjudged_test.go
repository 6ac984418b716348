package view

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/evaluate"
)

// oneTurn is the conversation of every row of the datasets below: one turn, SELECT 1.
var oneTurn = []chat.Message{{Role: chat.RoleSystem, Content: "s"}, {Role: chat.RoleUser, Content: "Question: q"},
	{Role: chat.RoleAssistant, Content: "<think>t</think>\n<sql>SELECT 1</sql>"}}

// writeDataset writes rows as a dataset of one Parquet file in a directory of the test's own.
func writeDataset(t *testing.T, rows []curate.Row) string {
	t.Helper()
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

// unjudgedDataset writes a dataset of three rows: alpha's on sqlite (correct), alpha's on
// postgres whose gold SQL failed there (unjudged), beta's on postgres judged against the
// task's SQLite file (correct).
func unjudgedDataset(t *testing.T) string {
	t.Helper()
	row := func(key, teacher, dialect string, correct bool, goldError, goldDialect string) curate.Row {
		return curate.Row{Messages: oneTurn, Teacher: teacher, Dialect: dialect, Difficulty: "simple", DBID: "shop", TaskID: "sample/" + key,
			Question: "q " + key, Turns: 1, ExecOK: true, Correct: correct, FinalSQL: "SELECT 1", GoldSQL: "SELECT 1",
			GoldError: goldError, GoldDialect: goldDialect, NumTokens: 10, NumTrainableTokens: 5, Key: key}
	}
	rows := []curate.Row{
		row("k1", "alpha", "sqlite", true, "", "sqlite"),
		row("k2", "alpha", "postgres", false, "error: function strftime(unknown, text) does not exist", ""),
		row("k3", "beta", "postgres", true, "", "sqlite"),
	}
	return writeDataset(t, rows)
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
	rowMark := eval[string](b, `document.querySelector("#rows tbody .tag.warn").outerHTML`)
	// The by-task page marks alpha's cell of sample/k2 as the rows table marks its row, in
	// place of "wrong", and counts it in the row's agreement and the summary.
	b.open("#/compare")
	cell := `document.querySelector('#compare tbody tr[data-key="sample/k2|postgres"] td.cell')`
	if got := eval[string](b, cell+`.querySelector(".tag.warn")?.outerHTML || ""`); got != rowMark {
		t.Errorf("compare cell's mark %q, want the rows table's %q", got, rowMark)
	}
	if got := eval[string](b, cell+`.textContent`); strings.Contains(got, "wrong") {
		t.Errorf("compare cell %q says wrong", got)
	}
	if n := eval[int](b, `document.querySelectorAll("#compare td.cell .tag.warn").length`); n != 1 {
		t.Errorf("%d compare cells marked unjudged, want 1", n)
	}
	if got := eval[string](b, `document.querySelector('#compare tbody tr[data-key="sample/k2|postgres"] td.agree').textContent`); !strings.Contains(got, "0/1 correct · 1 unjudged") {
		t.Errorf("agreement %q", got)
	}
	if got := eval[string](b, `document.querySelector("#summary").textContent`); got != "3 of 3 tasks match; 1 unjudged" {
		t.Errorf("compare summary %q", got)
	}
	b.shot("unjudged-compare")
	b.open("#/task/" + url.PathEscape("sample/k2|postgres"))
	if got := eval[string](b, `document.querySelector('.policy-col[data-policy="alpha"] > h3').textContent`); got != "alpha unjudged" {
		t.Errorf("task page's alpha column %q", got)
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

// compareUnjudgedDataset writes a dataset of two teachers, alpha and beta, over four tasks:
// t1 on postgres, alpha's gold SQL failed (unjudged) and beta is correct; t2 on sqlite, alpha
// wrong and beta correct; t3 on postgres, both unjudged; t4 on sqlite, both wrong.
func compareUnjudgedDataset(t *testing.T) string {
	t.Helper()
	const fail = "error: function strftime(unknown, text) does not exist"
	row := func(task, teacher, dialect string, correct bool, goldError string) curate.Row {
		return curate.Row{Messages: oneTurn, Teacher: teacher, Dialect: dialect, Difficulty: "simple", DBID: "shop", TaskID: "sample/" + task,
			Question: "q " + task, Turns: 1, ExecOK: true, Correct: correct, FinalSQL: "SELECT 1", GoldSQL: "SELECT 1",
			GoldError: goldError, NumTokens: 10, NumTrainableTokens: 5, Key: task + "-" + teacher, TaskIndex: int64(task[1] - '0')}
	}
	rows := []curate.Row{
		row("t1", "alpha", "postgres", false, fail), row("t1", "beta", "postgres", true, ""),
		row("t2", "alpha", "sqlite", false, ""), row("t2", "beta", "sqlite", true, ""),
		row("t3", "alpha", "postgres", false, fail), row("t3", "beta", "postgres", false, fail),
		row("t4", "alpha", "sqlite", false, ""), row("t4", "beta", "sqlite", false, ""),
	}
	return writeDataset(t, rows)
}

// TestCompareUnjudged: the by-task view's cells carry the rows' unjudged flag, each row and
// the page count them, and an unjudged cell is neither correct nor wrong to the filters
// ("beta correct, alpha wrong", "teachers disagree", "all wrong").
func TestCompareUnjudged(t *testing.T) {
	h := openServer(t, nil, compareUnjudgedDataset(t)).Handler()
	var all map[string]any
	get(t, h, "/api/compare?limit=500", &all)
	rows := all["rows"].([]any)
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4: %v", len(rows), all)
	}
	if all["unjudged"] != 2.0 {
		t.Errorf("%v tasks unjudged, want 2", all["unjudged"])
	}
	// The JSON as the page reads it: t1's alpha cell is unjudged, beta's cell has no flag.
	t1 := rows[0].(map[string]any)
	cells := t1["cells"].([]any)
	if t1["key"] != "sample/t1|postgres" || t1["unjudged"] != 1.0 || t1["correct"] != 1.0 ||
		cells[0].(map[string]any)["unjudged"] != true || cells[0].(map[string]any)["correct"] != false || cells[1].(map[string]any)["unjudged"] != nil {
		t.Errorf("t1: %v", t1)
	}
	for q, want := range map[string]string{
		"":                     "sample/t1|postgres sample/t2|sqlite sample/t3|postgres sample/t4|sqlite",
		"good=1&bad=0":         "sample/t2|sqlite",
		"differ=1":             "sample/t2|sqlite",
		"allwrong=1":           "sample/t4|sqlite",
		"bad=0":                "sample/t2|sqlite sample/t4|sqlite",
		"good=1":               "sample/t1|postgres sample/t2|sqlite",
		"dialect=postgres":     "sample/t1|postgres sample/t3|postgres",
		"allwrong=1&bad=1":     "sample/t4|sqlite",
		"sqldiffer=1&bad=0":    "",
		"dialect=sqlite&bad=1": "sample/t4|sqlite",
	} {
		var p ComparePage
		if code := get(t, h, "/api/compare?limit=500&"+q, &p); code != 200 {
			t.Fatalf("compare?%s: %d", q, code)
		}
		var keys []string
		unjudged := 0
		for _, r := range p.Rows {
			keys = append(keys, r.Key)
			if r.Unjudged > 0 {
				unjudged++
			}
		}
		if got := strings.Join(keys, " "); got != want || p.Unjudged != unjudged {
			t.Errorf("compare?%s: %q (%d unjudged), want %q (%d)", q, got, p.Unjudged, want, unjudged)
		}
	}
}

// TestCompareUnjudgedEval: over eval dirs the cell's unjudged flag follows results.jsonl (its
// gold_error), and "oracle correct, student wrong" leaves out a task the student's gold SQL
// could not judge.
func TestCompareUnjudgedEval(t *testing.T) {
	fx := getFixture(t)
	student := filepath.Join(t.TempDir(), "eval-student")
	if err := os.CopyFS(student, os.DirFS(fx.evalStudent)); err != nil {
		t.Fatal(err)
	}
	results, err := evaluate.ReadResults(student)
	if err != nil {
		t.Fatal(err)
	}
	unjudged, wrong := "", 0
	var buf bytes.Buffer
	for i := range results {
		r := &results[i]
		if !r.Correct && unjudged == "" {
			unjudged, r.GoldError = r.ID, "error: no such function: strftime"
		} else if !r.Correct {
			wrong++
		}
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(append(line, '\n'))
	}
	if unjudged == "" || wrong == 0 {
		t.Fatalf("the student got %d tasks wrong: the test needs 2", wrong)
	}
	if err := os.WriteFile(filepath.Join(student, evaluate.ResultsFile), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	h := openServer(t, fx.tok, student, fx.evalOracle).Handler()
	var p ComparePage
	get(t, h, "/api/compare?limit=500", &p)
	marked := 0
	for _, r := range p.Rows {
		if r.Cells[0].Unjudged {
			marked++
			if r.TaskID != unjudged || r.Cells[0].Correct || r.Cells[1].Unjudged || r.Unjudged != 1 {
				t.Errorf("task %s: %+v", r.TaskID, r)
			}
		}
	}
	if marked != 1 || p.Unjudged != 1 {
		t.Errorf("%d cells and %d tasks unjudged, want 1 (%s)", marked, p.Unjudged, unjudged)
	}
	get(t, h, "/api/compare?good=1&bad=0&limit=500", &p)
	if p.Total != wrong || p.Unjudged != 0 || slices.ContainsFunc(p.Rows, func(r CompareRow) bool { return r.TaskID == unjudged }) {
		t.Errorf("oracle correct, student wrong: %d tasks (%d unjudged), want %d without %s", p.Total, p.Unjudged, wrong, unjudged)
	}
}
