package view

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chainedsql/chainedsql/curate"
)

// taskOutcomes is the reference for the by-task view: per task and dialect, each teacher's
// correctness and final SQL, from the rows read back.
func taskOutcomes(rows []curate.Row) map[string]map[string]curate.Row {
	out := map[string]map[string]curate.Row{}
	for _, r := range rows {
		k := r.TaskID + "|" + r.Dialect
		if out[k] == nil {
			out[k] = map[string]curate.Row{}
		}
		out[k][r.Teacher] = r
	}
	return out
}

func normSQL(s string) string { return strings.Join(strings.Fields(strings.ToLower(s)), " ") }

// TestDatasetByTask checks /api/compare and /api/task over a dataset's teachers against the
// rows: "teachers disagree", "final SQL differs", "all wrong" (on a dataset of one teacher
// exported from the fixture, where it selects rows), per-row counts.
func TestDatasetByTask(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	s := openServer(t, fx.tok, fx.dataset)
	h := s.Handler()
	if !s.Info().Compare {
		t.Error("a dataset of two teachers does not offer the by-task view")
	}
	tasks := taskOutcomes(rows)
	count := func(keep func(m map[string]curate.Row) bool) int {
		n := 0
		for _, m := range tasks {
			if keep(m) {
				n++
			}
		}
		return n
	}
	differ := count(func(m map[string]curate.Row) bool { return m["alpha"].Correct != m["oracle"].Correct })
	sqlDiffer := count(func(m map[string]curate.Row) bool {
		return normSQL(m["alpha"].FinalSQL) != normSQL(m["oracle"].FinalSQL)
	})
	if differ == 0 || sqlDiffer == 0 {
		t.Fatalf("the fixture has %d tasks where the teachers disagree and %d with different SQL: the test checks nothing", differ, sqlDiffer)
	}
	var p ComparePage
	for q, want := range map[string]int{"": len(tasks), "differ=1": differ, "sqldiffer=1": sqlDiffer, "allwrong=1": 0, "dialect=postgres": 0} {
		if code := get(t, h, "/api/compare?limit=500&"+q, &p); code != 200 || p.Total != want {
			t.Errorf("compare?%s: %d, %d tasks; want %d", q, code, p.Total, want)
		}
	}
	get(t, h, "/api/compare?limit=500", &p)
	if strings.Join(p.Policies, ",") != "alpha,oracle" {
		t.Errorf("teachers %v", p.Policies)
	}
	for _, r := range p.Rows {
		m := tasks[r.Key]
		correct := 0
		for k, teacher := range p.Policies {
			c := r.Cells[k]
			if !c.Present || c.Correct != m[teacher].Correct || c.SQL != m[teacher].FinalSQL || rows[c.ID].Key != m[teacher].Key {
				t.Errorf("task %s, %s: cell %+v, row %s correct %v", r.Key, teacher, c, m[teacher].Key, m[teacher].Correct)
			}
			if m[teacher].Correct {
				correct++
			}
		}
		if r.Correct != correct || r.Dialect != "sqlite" {
			t.Errorf("task %s: %d correct in %s, want %d in sqlite", r.Key, r.Correct, r.Dialect, correct)
		}
	}
	var tp TaskPage
	key := p.Rows[0].Key
	if code := get(t, h, "/api/task?id="+url.QueryEscape(key), &tp); code != 200 || len(tp.Details) != 2 || tp.Details[0] == nil || tp.Details[0].Teacher != "alpha" || tp.Details[1].Teacher != "oracle" {
		t.Errorf("task %s: %d %+v", key, code, tp.Task)
	}
	var e map[string]string
	if code := get(t, h, "/api/task?id=nothing", &e); code != 404 || e["error"] != `no task "nothing" in this dataset dir` {
		t.Errorf("unknown task: %d %q", code, e["error"])
	}

	// One teacher, exported into a dataset of its own: "all wrong" is its wrong answers.
	dir := filepath.Join(t.TempDir(), "alpha")
	if err := os.MkdirAll(filepath.Join(dir, curate.DataDir), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, curate.DataDir, "train-00000-of-00001.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Export(context.Background(), Query{Facets: [nFacets][]string{facetTeacher: {"alpha"}}}, FormatParquet, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	wrong := count(func(m map[string]curate.Row) bool { return !m["alpha"].Correct })
	one := openServer(t, nil, dir).Handler()
	if get(t, one, "/api/compare?allwrong=1&limit=500", &p); p.Total != wrong || wrong == 0 {
		t.Errorf("one teacher, all wrong: %d tasks, want %d (> 0)", p.Total, wrong)
	}
	for _, r := range p.Rows {
		if tasks[r.Key]["alpha"].Correct {
			t.Errorf("task %s listed as all wrong", r.Key)
		}
	}
}

// TestBrowserByTask: a dataset's "By task" view, the preset "teachers disagree", a task's
// teachers side by side with agreement, each final SQL against the gold; the row page's diff.
func TestBrowserByTask(t *testing.T) {
	fx := getFixture(t)
	rows := readRows(t, fx.dataset)
	tasks := taskOutcomes(rows)
	b := newBrowser(t, openServer(t, fx.tok, fx.dataset))
	b.open("#/")
	b.do(chromedp.Click(chromedp.CSS(`#nav a[data-nav="compare"]`)))
	b.ready("#/compare")
	if got := eval[string](b, `document.querySelector("#nav a.active").textContent`); got != "By task" {
		t.Errorf("active nav %q", got)
	}
	b.do(chromedp.Click(chromedp.CSS(`#preset-differ`)))
	b.ready("#/compare?differ=1")
	keys := eval[[]string](b, `[...document.querySelectorAll("#compare tbody tr")].map(r => r.dataset.key)`)
	want := 0
	for _, m := range tasks {
		if m["alpha"].Correct != m["oracle"].Correct {
			want++
		}
	}
	if len(keys) != min(want, 50) || want == 0 {
		t.Errorf("%d tasks where the teachers disagree, want %d", len(keys), want)
	}
	for _, k := range keys {
		if tasks[k]["alpha"].Correct == tasks[k]["oracle"].Correct {
			t.Errorf("task %s listed, but the teachers agree", k)
		}
	}
	if got := eval[string](b, `document.querySelector("#compare tbody tr td.agree").textContent`); !strings.HasPrefix(got, "1/2 correct") {
		t.Errorf("agreement cell %q", got)
	}
	b.shot("bytask")
	b.do(chromedp.Click(chromedp.CSS(`#compare tbody tr:first-child td:first-child a`)))
	b.ready("#/task/" + url.PathEscape(keys[0]))
	b.noErrors()
	cols := eval[[]string](b, `[...document.querySelectorAll(".policy-col > h3")].map(h => h.textContent)`)
	m := tasks[keys[0]]
	for i, teacher := range []string{"alpha", "oracle"} {
		if len(cols) != 2 || !strings.HasPrefix(cols[i], teacher) || strings.Contains(cols[i], "correct") != m[teacher].Correct {
			t.Errorf("columns %q; %s correct: %v", cols, teacher, m[teacher].Correct)
		}
	}
	// The wrong answer's diff marks words; the right one's matches the gold.
	wrongCol, rightCol := 0, 1
	if m["alpha"].Correct {
		wrongCol, rightCol = 1, 0
	}
	ins := eval[string](b, fmt.Sprintf(`[...document.querySelectorAll(".policy-col")[%d].querySelectorAll(".sql-diff ins")].map(e => e.textContent).join(" ")`, wrongCol))
	del := eval[string](b, fmt.Sprintf(`[...document.querySelectorAll(".policy-col")[%d].querySelectorAll(".sql-diff del")].map(e => e.textContent).join(" ")`, wrongCol))
	if ins == "" && del == "" {
		t.Error("the wrong answer's diff against the gold marks nothing")
	}
	for _, w := range strings.Fields(del) {
		if !strings.Contains(m[cols[wrongCol][:strings.Index(cols[wrongCol], " ")]].FinalSQL, w) {
			t.Errorf("%q struck out, but it is not in the final SQL", w)
		}
	}
	gold := m["oracle"].GoldSQL
	for _, w := range strings.Fields(ins) {
		if !strings.Contains(gold, w) {
			t.Errorf("%q marked as the gold's, but it is not in the gold SQL %q", w, gold)
		}
	}
	if normSQL(m["oracle"].FinalSQL) == normSQL(gold) && eval[int](b, fmt.Sprintf(`document.querySelectorAll(".policy-col")[%d].querySelectorAll(".sql-same").length`, rightCol)) != 1 {
		t.Error("the right answer, the gold word for word, is not shown as the same")
	}
	if got := eval[string](b, `document.querySelector("#task-agreement").textContent`); !strings.HasPrefix(got, "1/2 correct") {
		t.Errorf("task agreement %q", got)
	}
	b.shot("bytask-task")
	// The row page shows the diff under the outcome.
	for i := range rows {
		if !rows[i].Correct && rows[i].FinalSQL != "" {
			b.open(fmt.Sprintf("#/row/%d", i))
			if n := eval[int](b, `document.querySelectorAll("#outcome .sql-diff del, #outcome .sql-diff ins").length`); n == 0 {
				t.Errorf("row %d (wrong): no diff against the gold", i)
			}
			break
		}
	}
}
