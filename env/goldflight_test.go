package env

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// slowGoldDB answers every statement after wait, or with a timeout at its ExecOptions.Timeout
// when that comes first, as a server's statement_timeout would.
type slowGoldDB struct {
	wait time.Duration
	mu   sync.Mutex
	runs int
}

func (d *slowGoldDB) Dialect() datasets.Dialect { return datasets.Postgres }
func (d *slowGoldDB) Version() string           { return "test" }
func (d *slowGoldDB) Close() error              { return nil }
func (d *slowGoldDB) Exec(ctx context.Context, q string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	d.mu.Lock()
	d.runs++
	d.mu.Unlock()
	if opts.Timeout < d.wait {
		time.Sleep(opts.Timeout)
		return sandbox.TimedOut(opts.Timeout, opts.Timeout), nil
	}
	time.Sleep(d.wait)
	return &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"x"}, Rows: [][]any{{int64(1)}}, Total: 1, Duration: d.wait}, nil
}

// TestGoldFlightDeadline: concurrent requests for one gold share one execution, which runs for
// the judge's whole budget whoever started it; each request gets the answer its own time limit
// allows, as running the gold alone would give it: a longer limit the result, a shorter one its
// timeout by its deadline, whichever request came first and whether the result was shared or
// kept from before.
func TestGoldFlightDeadline(t *testing.T) {
	const gold = "SELECT x FROM g"
	for _, shortFirst := range []bool{true, false} {
		db := &slowGoldDB{wait: time.Second}
		o := goldOpener{gold: gold, cache: newGoldCache(3*time.Second, DefaultGoldCacheBytes)}
		g := o.wrap(db, datasets.Task{ID: "t/0", DBID: "t"})
		type answer struct {
			res  *sandbox.Result
			took time.Duration
		}
		run := func(timeout time.Duration, out *answer, done chan<- struct{}) {
			start := time.Now()
			out.res, _ = g.Exec(context.Background(), gold, sandbox.ExecOptions{Timeout: timeout})
			out.took = time.Since(start)
			close(done)
		}
		var short, long answer
		d1, d2 := make(chan struct{}), make(chan struct{})
		if shortFirst {
			go run(300*time.Millisecond, &short, d1)
			time.Sleep(50 * time.Millisecond)
			go run(2*time.Second, &long, d2)
		} else {
			go run(2*time.Second, &long, d2)
			time.Sleep(50 * time.Millisecond)
			go run(300*time.Millisecond, &short, d1)
		}
		<-d1
		<-d2
		if long.res == nil || !long.res.OK() {
			t.Errorf("short first %v: the longer limit's gold: %+v", shortFirst, long.res)
		}
		if short.res == nil || short.res.Outcome != sandbox.OutcomeTimeout || short.took > 900*time.Millisecond {
			t.Errorf("short first %v: the shorter limit's gold: %+v after %s, want its timeout before the gold's second", shortFirst, short.res, short.took)
		}
		// The result is kept now: a shorter limit still gets its timeout, a longer one the result.
		if r, _ := g.Exec(context.Background(), gold, sandbox.ExecOptions{Timeout: 300 * time.Millisecond}); r.Outcome != sandbox.OutcomeTimeout {
			t.Errorf("short first %v: a shorter limit after the gold was kept: %+v", shortFirst, r)
		}
		if r, _ := g.Exec(context.Background(), gold, sandbox.ExecOptions{Timeout: 2 * time.Second}); !r.OK() {
			t.Errorf("short first %v: a longer limit after the gold was kept: %+v", shortFirst, r)
		}
		if db.runs != 1 {
			t.Errorf("short first %v: %d executions, want 1", shortFirst, db.runs)
		}
	}
}

// TestGoldFilteredNotCached: an execution of the gold's text with a row filter (the judge's of a
// prediction that reads as the gold) runs on the database, neither served from the cache nor
// kept in it; the full execution is cached.
func TestGoldFilteredNotCached(t *testing.T) {
	const gold = "SELECT x FROM g"
	db := &slowGoldDB{}
	g := goldOpener{gold: gold, cache: newGoldCache(time.Second, DefaultGoldCacheBytes)}.wrap(db, datasets.Task{ID: "t/0", DBID: "t"})
	ctx := context.Background()
	filtered := sandbox.ExecOptions{Timeout: time.Second, Filter: func([]any) sandbox.RowAction { return sandbox.RowKeep }}
	for i, opts := range []sandbox.ExecOptions{filtered, {Timeout: time.Second}, {Timeout: time.Second}, filtered} {
		if r, err := g.Exec(ctx, gold, opts); err != nil || !r.OK() {
			t.Fatalf("execution %d: %+v, %v", i, r, err)
		}
	}
	if db.runs != 3 {
		t.Errorf("the database ran %d executions, want 3 (two filtered, the first full one)", db.runs)
	}
}
