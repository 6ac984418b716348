package view

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/sqlite"
)

// countingOpener counts the statements run through its databases.
type countingOpener struct {
	conn  *sandbox.Connector
	execs chan string
}

func (o *countingOpener) Open(ctx context.Context, d datasets.Dialect, t datasets.Task) (sandbox.DB, error) {
	db, err := o.conn.Open(ctx, d, t)
	if err != nil {
		return nil, err
	}
	return countingDB{db, o.execs}, nil
}

type countingDB struct {
	sandbox.DB
	execs chan string
}

func (c countingDB) Exec(ctx context.Context, sql string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	c.execs <- sql
	return c.DB.Exec(ctx, sql, opts)
}

// resultRows picks a fixture row whose final SQL is its gold SQL and one whose final SQL
// ran and is wrong.
func resultRows(t *testing.T, rows []curate.Row) (same, wrong int) {
	t.Helper()
	same, wrong = -1, -1
	for i, r := range rows {
		if same < 0 && r.Correct && r.FinalSQL == r.GoldSQL && r.GoldSQL != "" {
			same = i
		}
		if wrong < 0 && r.FinalSQL != "" && r.ExecOK && !r.Correct && r.GoldSQL != "" {
			wrong = i
		}
	}
	if same < 0 || wrong < 0 {
		t.Fatalf("fixture has no row with final = gold (%d) or a wrong final SQL (%d)", same, wrong)
	}
	return same, wrong
}

// TestResults: without an executor a row's results say how to get them; with one, the final
// and gold SQL run on the task's SQLite database, the gold's row count is the database's, the
// same statement twice is run once, a wrong final SQL shows another result, a failing one its
// error, a task or dialect the executor lacks says so.
func TestResults(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	same, wrong := resultRows(t, rows)
	s := openServer(t, nil, fx.dataset)
	h := s.Handler()

	var rr RowResults
	results := func(id int) {
		t.Helper()
		rr = RowResults{}
		if code := get(t, h, fmt.Sprintf("/api/results?id=%d", id), &rr); code != 200 {
			t.Fatalf("results of row %d: %d", id, code)
		}
	}
	results(same)
	if rr.Gold.Absent != noExecutor || rr.Final.Absent != noExecutor || rr.Gold.Observation != nil {
		t.Errorf("without an executor: %+v", rr)
	}

	conn := &sandbox.Connector{SQLiteRoot: filepath.Join(fx.root, "db")}
	t.Cleanup(func() { conn.Close() })
	op := &countingOpener{conn: conn, execs: make(chan string, 100)}
	s.SetExecutor(Executor{Tasks: fx.tasks, Opener: op, Dialects: []datasets.Dialect{datasets.SQLite}})
	results(same)
	g := rr.Gold
	if g.Absent != "" || g.Outcome != "ok" || g.Observation == nil || g.SQL != rows[same].GoldSQL || !strings.HasPrefix(g.Engine, "SQLite") {
		t.Fatalf("gold result of row %d: %+v", same, g)
	}
	// The row count, asked of the database on its own.
	db, err := sqlite.Open(filepath.Join(fx.root, "db", rows[same].DBID, rows[same].DBID+".sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n, err := db.Exec(context.Background(), "SELECT COUNT(*) FROM ("+strings.TrimSuffix(strings.TrimSpace(rows[same].GoldSQL), ";")+")", sandbox.ExecOptions{})
	if err != nil || !n.OK() || fmt.Sprint(n.Rows[0][0]) != fmt.Sprint(g.Total) {
		t.Errorf("gold total %d, the database counts %v (%v)", g.Total, n, err)
	}
	if g.Total > 0 && (g.Observation.Kind != "table" || len(g.Observation.Rows) != min(g.Total, 50)) {
		t.Errorf("gold observation of %d rows: %+v", g.Total, g.Observation)
	}
	if f := rr.Final; f.Absent != "" || fmt.Sprint(f.Observation) != fmt.Sprint(g.Observation) || f.Total != g.Total {
		t.Errorf("final SQL = gold SQL, yet the results differ:\n%+v\n%+v", f, g)
	}
	if len(op.execs) != 1 || <-op.execs != rows[same].GoldSQL {
		t.Errorf("final and gold, the same statement, ran %d times", len(op.execs)+1)
	}
	results(same)
	if !rr.Gold.Cached || !rr.Final.Cached || len(op.execs) != 0 {
		t.Errorf("asked again: cached %v %v, %d statements run", rr.Gold.Cached, rr.Final.Cached, len(op.execs))
	}

	results(wrong)
	if rr.Final.Outcome != "ok" || rr.Gold.Outcome != "ok" || fmt.Sprint(rr.Final.Observation) == fmt.Sprint(rr.Gold.Observation) ||
		rr.Final.SQL != rows[wrong].FinalSQL || rr.Gold.SQL != rows[wrong].GoldSQL {
		t.Errorf("row %d (a wrong final SQL): final %+v gold %+v", wrong, rr.Final, rr.Gold)
	}
	x := s.exec.Load()
	sdb, err := conn.Open(context.Background(), datasets.SQLite, fx.tasks[0])
	if err != nil {
		t.Fatal(err)
	}
	v, err := x.run(context.Background(), sdb, fx.tasks[0].ID, "SELECT no_such_column FROM no_such_table")
	if err != nil || v.Outcome != "error" || v.Observation == nil || v.Observation.Kind != "error" || !strings.Contains(v.Observation.Text, "no_such_table") {
		t.Errorf("a failing statement: %+v %v", v, err)
	}
	v, err = x.run(context.Background(), sdb, fx.tasks[0].ID, "DELETE FROM sqlite_master")
	if err != nil || v.Outcome != "refused" {
		t.Errorf("a write: %+v %v", v, err)
	}

	// A task the executor lacks, a dialect it lacks.
	others := []datasets.Task{}
	for _, task := range fx.tasks {
		if task.ID != rows[same].TaskID {
			others = append(others, task)
		}
	}
	s.SetExecutor(Executor{Tasks: others, Opener: op, Dialects: []datasets.Dialect{datasets.SQLite}})
	results(same)
	if !strings.Contains(rr.Gold.Absent, rows[same].TaskID) || !strings.Contains(rr.Gold.Absent, "--tasks") {
		t.Errorf("unknown task: %+v", rr.Gold)
	}
	s.SetExecutor(Executor{Tasks: fx.tasks, Opener: op, Dialects: []datasets.Dialect{datasets.Postgres}})
	results(same)
	if !strings.Contains(rr.Gold.Absent, "no sqlite databases") {
		t.Errorf("dialect not served: %+v", rr.Gold)
	}
	if code := get(t, h, "/api/results?id=100000", nil); code != 404 {
		t.Errorf("unknown row: %d", code)
	}
}

// TestResultsConcurrent: requests for one row at once run its statements once between them,
// and each gets the same result.
func TestResultsConcurrent(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	_, wrong := resultRows(t, rows)
	s := openServer(t, nil, fx.dataset)
	conn := &sandbox.Connector{SQLiteRoot: filepath.Join(fx.root, "db")}
	t.Cleanup(func() { conn.Close() })
	op := &countingOpener{conn: conn, execs: make(chan string, 100)}
	s.SetExecutor(Executor{Tasks: fx.tasks, Opener: op, Dialects: []datasets.Dialect{datasets.SQLite}})
	const n = 8
	got := make([]*RowResults, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = s.Results(context.Background(), wrong)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || fmt.Sprint(got[i].Gold.Observation, got[i].Final.Observation) != fmt.Sprint(got[0].Gold.Observation, got[0].Final.Observation) {
			t.Errorf("request %d: %v %+v", i, errs[i], got[i])
		}
	}
	if len(op.execs) != 2 {
		t.Errorf("%d requests at once ran %d statements, want 2 (final and gold)", n, len(op.execs))
	}
}

// TestBrowserResults: a row page shows the final SQL's result beside the gold result, as
// tables, once the viewer runs them; without an executor it says how to get them.
func TestBrowserResults(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	same, wrong := resultRows(t, rows)
	s := openServer(t, nil, fx.dataset)
	b := newBrowser(t, s)
	b.open(fmt.Sprintf("#/row/%d", same))
	b.wait(`document.querySelector("#results .result-col") !== null`)
	if got := eval[string](b, `document.querySelector("#result-gold .absent").textContent`); got != noExecutor {
		t.Errorf("without an executor the gold column says %q", got)
	}

	conn := &sandbox.Connector{SQLiteRoot: filepath.Join(fx.root, "db")}
	t.Cleanup(func() { conn.Close() })
	s.SetExecutor(Executor{Tasks: fx.tasks, Opener: conn, Dialects: []datasets.Dialect{datasets.SQLite}})
	for _, id := range []int{same, wrong} {
		b.do(chromedp.Navigate("about:blank"))
		b.open(fmt.Sprintf("#/row/%d", id))
		b.wait(`document.querySelector("#result-gold .obs") !== null && document.querySelector("#result-final .obs") !== null`)
		var rr RowResults
		get(t, s.Handler(), fmt.Sprintf("/api/results?id=%d", id), &rr)
		for _, c := range []struct {
			col string
			v   ExecView
		}{{"#result-final", rr.Final}, {"#result-gold", rr.Gold}} {
			cells := eval[[]string](b, `[...document.querySelectorAll("`+c.col+` .obs-table td")].map(td => td.textContent)`)
			var want []string
			for _, r := range c.v.Observation.Rows {
				want = append(want, r...)
			}
			if c.v.Observation.Kind != "table" || fmt.Sprint(cells) != fmt.Sprint(want) {
				t.Errorf("row %d %s shows %q, want %q", id, c.col, cells, want)
			}
			if head := eval[string](b, `document.querySelector("`+c.col+` h4").textContent`); !strings.Contains(head, fmt.Sprintf("· %d row", c.v.Total)) {
				t.Errorf("row %d %s heading %q", id, c.col, head)
			}
		}
		b.noErrors()
		b.shot(fmt.Sprintf("results-%d", id))
	}
}
