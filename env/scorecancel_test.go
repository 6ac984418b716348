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
