package env

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/sandbox"
)

// TestGoldCacheKeepsOnlyGold: predictions that hold the gold's text and are run again in full by
// the judge (their first row is a gold row) are not kept, only the gold's own result is; the
// verdicts stand.
func TestGoldCacheKeepsOnlyGold(t *testing.T) {
	task := tasksOf(t)[1] // one column of titles
	g := gold(t, task, datasets.SQLite)
	cfg := Config{Tasks: []datasets.Task{task}}
	cfg.Episode.Caps = protocol.ObsCaps{MaxRows: 1} // the kept first row cannot tell them wrong
	s, url := testServer(t, cfg)
	var comps []string
	for k := range 3 {
		comps = append(comps, answer(fmt.Sprintf("%s UNION ALL SELECT printf('%%.*c', 100000, 'x') FROM book /* %d */", g, k)))
	}
	comps = append(comps, answer(g))
	var out struct {
		Results []struct {
			Rewards wireRewards `json:"rewards"`
			Info    wireInfo    `json:"info"`
		} `json:"results"`
	}
	for _, c := range comps { // one at a time: each its own full run
		if code := call(t, "POST", url+"/v1/score", map[string]any{"task_id": task.ID, "completions": []string{c}}, &out); code != 200 || len(out.Results) != 1 {
			t.Fatalf("score: %d", code)
		}
		want := map[bool]int{true: 1}[c == comps[len(comps)-1]]
		if r := out.Results[0].Rewards.four(t); r[3] != want || out.Results[0].Info.Outcome != "ok" {
			t.Errorf("%.60s: rewards %v, info %+v", c, r, out.Results[0].Info)
		}
	}
	results, rows, bytes := s.golds.held()
	s.golds.mu.Lock()
	var keys []string
	for k := range s.golds.m {
		keys = append(keys, k[strings.LastIndexByte(k, 0)+1:])
	}
	s.golds.mu.Unlock()
	if results != 1 || keys[0] != g || bytes > 4096 {
		t.Errorf("the cache keeps %d results (%d rows, %d bytes): %.200q, want the gold's alone", results, rows, bytes, keys)
	}
}

// sized is an OK result of one row holding n bytes of text.
func sized(n int) *sandbox.Result {
	return &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"c"}, Rows: [][]any{{strings.Repeat("x", n)}}, Total: 1}
}

// TestGoldCacheBytes: the cache holds at most its bytes; the least recently used result goes
// first, a result over the bound alone is not kept.
func TestGoldCacheBytes(t *testing.T) {
	c := newGoldCache(time.Second, 1000)
	c.put("a", goldRun{res: sized(300)})
	c.put("b", goldRun{res: sized(300)})
	if _, ok := c.get("a"); !ok { // a is now the most recently used
		t.Fatal("a is not kept")
	}
	c.put("c", goldRun{res: sized(300)})
	_, aok := c.get("a")
	_, bok := c.get("b")
	_, cok := c.get("c")
	if !aok || bok || !cok {
		t.Errorf("after c: a kept %v, b %v, c %v; want b, the least recently used, dropped", aok, bok, cok)
	}
	if n, _, bytes := c.held(); n != 2 || bytes > 1000 {
		t.Errorf("%d results, %d bytes", n, bytes)
	}
	c.put("huge", goldRun{res: sized(2000)})
	if _, ok := c.get("huge"); ok {
		t.Error("a result over the bound alone is kept")
	}
	if n, _, bytes := c.held(); n != 2 || bytes > 1000 {
		t.Errorf("after the huge one: %d results, %d bytes", n, bytes)
	}
}

// TestGoldResultOwn: each request gets a Result of its own, so that what a caller sets on one
// changes neither the kept result nor another's.
func TestGoldResultOwn(t *testing.T) {
	const gold = "SELECT x FROM g"
	db := &slowGoldDB{wait: time.Millisecond}
	g := goldOpener{gold: gold, cache: newGoldCache(time.Second, DefaultGoldCacheBytes)}.wrap(db, datasets.Task{ID: "t/0", DBID: "t"})
	for i := range 3 {
		r, err := g.Exec(context.Background(), gold, sandbox.ExecOptions{Timeout: 100 * time.Millisecond})
		if err != nil || !r.OK() || r.Duration != time.Millisecond {
			t.Fatalf("run %d: %+v %v", i, r, err)
		}
		r.Duration += time.Hour
	}
	if db.runs != 1 {
		t.Errorf("%d executions, want 1", db.runs)
	}
}
