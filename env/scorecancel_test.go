package env

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// slowCountOpener opens through busyOpener and counts the databases opened and the executions
// of slowAnswer's statement that ran to their end.
type slowCountOpener struct {
	busy     *busyOpener
	opens    atomic.Int64
	finished atomic.Int64
}

func (o *slowCountOpener) Open(ctx context.Context, d datasets.Dialect, t datasets.Task) (sandbox.DB, error) {
	o.opens.Add(1)
	db, err := o.busy.Open(ctx, d, t)
	if err != nil {
		return nil, err
	}
	return slowCountDB{DB: db, o: o}, nil
}

type slowCountDB struct {
	sandbox.DB
	o *slowCountOpener
}

func (c slowCountDB) Exec(ctx context.Context, q string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	res, err := c.DB.Exec(ctx, q, opts)
	if err == nil && strings.Contains(slowAnswer, q) && strings.Contains(q, "RECURSIVE") {
		c.o.finished.Add(1)
	}
	return res, err
}

// TestScoreStopsAtFirstFailure: a score request whose completion fails (its database busy) is
// 503 naming that completion, and the others stop there: the slow one running beside it is
// cancelled before its end and those waiting for a slot never open a database. Without it the
// ten slow completions queued behind ran on, each to its end (11 finished, 12 opened), for a
// reply that was a 503 anyway.
func TestScoreStopsAtFirstFailure(t *testing.T) {
	conn := &sandbox.Connector{}
	t.Cleanup(func() { conn.Close() })
	task := tasksOf(t)[0]
	const marker = "score-fails-here"
	o := &slowCountOpener{busy: &busyOpener{conn: conn, marker: marker, firstTries: 1 << 30}}
	_, url := testServer(t, Config{Tasks: []datasets.Task{task}, Opener: o, Parallel: 2})
	completions := []string{slowAnswer, answer("SELECT '" + marker + "'")}
	for range 10 {
		completions = append(completions, slowAnswer)
	}
	var e wireErr
	began := time.Now()
	code, retry := postBusy(t, url+"/v1/score", map[string]any{"task_id": task.ID, "completions": completions}, &e)
	took := time.Since(began)
	if code != http.StatusServiceUnavailable || retry != "1" || e.Error == nil || !strings.Contains(e.Error.Message, "completion 1:") ||
		strings.Contains(e.Error.Message, context.Canceled.Error()) {
		t.Errorf("score with completion 1 failing: %d, Retry-After %q, %+v; want 503 naming completion 1 alone", code, retry, e.Error)
	}
	if n := o.finished.Load(); n != 0 {
		t.Errorf("%d slow completions ran to their end after completion 1 failed, want 0", n)
	}
	if n := o.opens.Load(); n > 2 {
		t.Errorf("%d databases opened, want at most the 2 of the completions holding a slot", n)
	}
	t.Logf("answered in %v, %d opened", took.Round(time.Millisecond), o.opens.Load())
}

// TestScoreAnswerFailuresCancelNothing: a completion whose statement fails (an SQL error, a
// timeout, a refused write, no SQL at all) is a scored answer, not a failure of the request:
// beside it the slow completions, running and queued for the 2 slots, all run to their end and
// the reply is 200 with every result, each with its own outcome.
func TestScoreAnswerFailuresCancelNothing(t *testing.T) {
	conn := &sandbox.Connector{}
	t.Cleanup(func() { conn.Close() })
	task := tasksOf(t)[0]
	o := &slowCountOpener{busy: &busyOpener{conn: conn, marker: "never-busy"}}
	cfg := Config{Tasks: []datasets.Task{task}, Opener: o, Parallel: 2}
	cfg.Episode.ExecTimeout = 300 * time.Millisecond
	_, url := testServer(t, cfg)
	failing := map[int]string{
		1: answer("SELECT no_such_column FROM no_such_table"),
		2: answer("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c"),
		3: answer("DELETE FROM sqlite_master"),
		4: "no sql here",
	}
	wantOutcome := map[int]string{1: "error", 2: "timeout", 3: "refused", 4: "format_violation"}
	completions := []string{slowAnswer}
	for i := 1; i <= 4; i++ {
		completions = append(completions, failing[i])
	}
	for range 3 {
		completions = append(completions, slowAnswer)
	}
	var out struct {
		Results []struct {
			Info wireInfo `json:"info"`
		} `json:"results"`
	}
	if code := call(t, "POST", url+"/v1/score", map[string]any{"task_id": task.ID, "completions": completions}, &out); code != http.StatusOK || len(out.Results) != len(completions) {
		t.Fatalf("score with failing answers: %d, %d results; want 200 with %d", code, len(out.Results), len(completions))
	}
	for i, want := range wantOutcome {
		if got := out.Results[i].Info.Outcome; got != want {
			t.Errorf("completion %d: outcome %q, want %q", i, got, want)
		}
	}
	if n := o.finished.Load(); n != 4 {
		t.Errorf("%d of the 4 slow completions ran to their end, want all", n)
	}
}
