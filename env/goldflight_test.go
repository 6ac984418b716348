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
	return &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"x"}, Rows: [][]any{{int64(1)}}, Total: 1}, nil
}

// TestGoldFlightDeadline: a gold execution shared by concurrent requests ends at the deadline
// of the request that started it; a request with a later deadline that joined it does not take
// its timeout (which the judge would record as its gold's failure), it runs the gold itself.
func TestGoldFlightDeadline(t *testing.T) {
	const gold = "SELECT x FROM g"
	db := &slowGoldDB{wait: 500 * time.Millisecond}
	o := goldOpener{core: gold, cache: &goldCache{}}
	g := o.wrap(db, datasets.Task{ID: "t/0", DBID: "t"})
	var short *sandbox.Result
	done := make(chan struct{})
	go func() {
		defer close(done)
		short, _ = g.Exec(context.Background(), gold, sandbox.ExecOptions{Timeout: 300 * time.Millisecond})
	}()
	time.Sleep(50 * time.Millisecond)
	long, err := g.Exec(context.Background(), gold, sandbox.ExecOptions{Timeout: time.Second})
	<-done
	if err != nil || !long.OK() {
		t.Errorf("the later deadline's gold: %+v, %v", long, err)
	}
	if short == nil || short.Outcome != sandbox.OutcomeTimeout {
		t.Errorf("the earlier deadline's gold: %+v", short)
	}
	if db.runs != 2 {
		t.Errorf("%d executions, want 2 (the shared one, then the later deadline's own)", db.runs)
	}
}
