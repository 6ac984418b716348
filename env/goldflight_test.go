package env

import (
	"context"
	"errors"
	"fmt"
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

// slotGoldDB waits wait for an execution slot, telling ExecOptions.Waiting, then runs its
// statement for run, and counts both in the Result's Duration as the engines do (from the call
// of Exec).
type slotGoldDB struct {
	slowGoldDB
	run time.Duration
}

func (d *slotGoldDB) Exec(ctx context.Context, q string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	d.mu.Lock()
	d.runs++
	d.mu.Unlock()
	start := time.Now()
	if opts.Waiting != nil {
		opts.Waiting(true)
	}
	time.Sleep(d.wait)
	if opts.Waiting != nil {
		opts.Waiting(false)
	}
	time.Sleep(d.run)
	return &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"x"}, Rows: [][]any{{int64(1)}}, Total: 1, Duration: time.Since(start)}, nil
}

// slotGold is a slotGoldDB that waits wait for a slot and runs run, and the env's gold wrapper
// over it for gold with a shared execution's limit of limit.
func slotGold(gold string, wait, run, limit time.Duration) (*slotGoldDB, sandbox.DB) {
	db := &slotGoldDB{slowGoldDB: slowGoldDB{wait: wait}, run: run}
	return db, goldOpener{gold: gold, cache: newGoldCache(limit, DefaultGoldCacheBytes)}.wrap(db, datasets.Task{ID: "t/0", DBID: "t"})
}

// TestGoldSlotWaitNotKept: a shared gold execution that waited for an execution slot is kept
// with its statement's own running time: a later request whose limit is shorter than the wait
// and the run together but longer than the run gets the result, not a timeout (the wait was the
// load of that moment); a limit shorter than the run is still its timeout.
func TestGoldSlotWaitNotKept(t *testing.T) {
	const gold = "SELECT x FROM g"
	db, g := slotGold(gold, 600*time.Millisecond, 50*time.Millisecond, 3*time.Second)
	ctx := context.Background()
	first, err := g.Exec(ctx, gold, sandbox.ExecOptions{Timeout: 2 * time.Second})
	if err != nil || !first.OK() || first.Duration < db.wait {
		t.Fatalf("the first request: %+v, %v; want the result, its Duration counting the wait", first, err)
	}
	if r, err := g.Exec(ctx, gold, sandbox.ExecOptions{Timeout: 300 * time.Millisecond}); err != nil || !r.OK() {
		t.Errorf("a 300ms limit after the gold (%s, %s of it waiting for a slot) was kept: %+v, %v; want the result", first.Duration.Round(time.Millisecond), db.wait, r, err)
	}
	if r, err := g.Exec(ctx, gold, sandbox.ExecOptions{Timeout: 20 * time.Millisecond}); err != nil || r.Outcome != sandbox.OutcomeTimeout {
		t.Errorf("a 20ms limit, shorter than the gold's %s run: %+v, %v; want its timeout", db.run, r, err)
	}
	if db.runs != 1 {
		t.Errorf("%d executions, want 1", db.runs)
	}
}

// TestGoldSlotWaitPostgres: TestGoldSlotWaitNotKept on PostgreSQL: with every statement slot
// of the server handle held by a pg_sleep, the gold waits for one (its Duration counts the
// wait); a later request with a limit shorter than that Duration, ample for the gold itself,
// gets the kept result.
func TestGoldSlotWaitPostgres(t *testing.T) {
	task := tasksOf(t)[1]
	tasks := []datasets.Task{task}
	conn := freshPostgres(t, tasks)
	t.Cleanup(func() { conn.Close() })
	ctx := context.Background()
	db, err := conn.Open(ctx, datasets.Postgres, task)
	if err != nil {
		t.Fatal(err)
	}
	// A server handle has at most 16 statement slots (sandbox/postgres: pgMaxStatements; fewer
	// on a server of under 96 max_connections, where the sleeps then hold them longer).
	const slots, hold = 16, 1500 * time.Millisecond
	var wg sync.WaitGroup
	for range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := db.Exec(ctx, fmt.Sprintf("SELECT pg_sleep(%g)", hold.Seconds()), sandbox.ExecOptions{Timeout: 10 * time.Second}); err != nil || !r.OK() {
				t.Errorf("pg_sleep holding a slot: %+v, %v", r, err)
			}
		}()
	}
	t.Cleanup(wg.Wait)
	time.Sleep(300 * time.Millisecond) // the sleeps hold the slots
	g := goldOpener{gold: gold(t, task, datasets.Postgres), cache: newGoldCache(20*time.Second, DefaultGoldCacheBytes)}
	gdb := g.wrap(db, task)
	first, err := gdb.Exec(ctx, g.gold, sandbox.ExecOptions{Timeout: 10 * time.Second})
	if err != nil || !first.OK() || first.Duration < hold/2 {
		t.Fatalf("the gold beside the sleeps: %+v, %v; want the result after a wait for a slot", first, err)
	}
	if n, _, _ := g.cache.held(); n != 1 {
		t.Fatalf("the cache holds %d results, want the gold's", n)
	}
	limit := first.Duration / 2
	if r, err := gdb.Exec(ctx, g.gold, sandbox.ExecOptions{Timeout: limit}); err != nil || !r.OK() {
		t.Errorf("a %s limit after the gold was kept (%s with its wait for a slot): %+v, %v; want the result", limit.Round(time.Millisecond), first.Duration.Round(time.Millisecond), r, err)
	}
}

// TestGoldSlotWaitInFlight: a request's limit is measured against the shared gold statement's
// running time in flight as it is once the result is kept, the execution's wait for a slot
// aside. The execution waits 3u for a slot and runs 6u: a limit of 8u (past at 8u, the
// statement then 5u in) gets the result at 9u; one of 4u its timeout at 7u, once the statement
// has run 4u, not at the end; one of 2u arriving at 4u its timeout at 6u; one of 2u from the
// start sandbox.ErrBusy at 2u (the gold never ran for it). Once kept, the same limits get the
// same answers, and the gold ran once.
func TestGoldSlotWaitInFlight(t *testing.T) {
	const gold, u = "SELECT x FROM g", 100 * time.Millisecond
	db, g := slotGold(gold, 3*u, 6*u, 30*u)
	ctx := context.Background()
	type request struct {
		name          string
		limit, arrive time.Duration
		want          sandbox.Outcome // "" : sandbox.ErrBusy
		by            time.Duration   // the answer comes before this, from the arrival
		res           *sandbox.Result
		err           error
		took          time.Duration
	}
	reqs := []*request{
		{name: "8u from the start", limit: 8 * u, want: sandbox.OutcomeOK, by: 11 * u},
		{name: "4u from the start", limit: 4 * u, want: sandbox.OutcomeTimeout, by: 8*u + u/2},
		{name: "2u arriving at 4u", limit: 2 * u, arrive: 4 * u, want: sandbox.OutcomeTimeout, by: 4*u + u/2},
		{name: "2u from the start", limit: 2 * u, by: 3 * u},
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(r.arrive)
			at := time.Now()
			r.res, r.err = g.Exec(ctx, gold, sandbox.ExecOptions{Timeout: r.limit})
			r.took = time.Since(at)
		}()
	}
	wg.Wait()
	t.Logf("the shared execution ended after %s", time.Since(start).Round(time.Millisecond))
	for _, r := range reqs {
		switch {
		case r.want == "" && (r.res != nil || !errors.Is(r.err, sandbox.ErrBusy)):
			t.Errorf("limit %s: %+v, %v; want sandbox.ErrBusy", r.name, r.res, r.err)
		case r.want != "" && (r.err != nil || r.res.Outcome != r.want):
			t.Errorf("limit %s in flight: %+v, %v; want %s", r.name, r.res, r.err, r.want)
		case r.took > r.by:
			t.Errorf("limit %s: answered after %s, want before %s", r.name, r.took.Round(time.Millisecond), r.by)
		}
	}
	for _, r := range reqs[:3] {
		if res, err := g.Exec(ctx, gold, sandbox.ExecOptions{Timeout: r.limit}); err != nil || res.Outcome != r.want {
			t.Errorf("limit %s once kept: %+v, %v; want %s as in flight", r.name, res, err, r.want)
		}
	}
	if db.runs != 1 {
		t.Errorf("%d executions, want 1", db.runs)
	}
}

// panicGoldDB panics in every Exec.
type panicGoldDB struct{ slowGoldDB }

func (d *panicGoldDB) Exec(context.Context, string, sandbox.ExecOptions) (*sandbox.Result, error) {
	panic("envfix3: Exec panics")
}

// TestGoldExecutePanicEnds: a shared gold execution whose Exec panics, the panic recovered,
// still ends its call: no call is left under its key, and its waiters get an error.
func TestGoldExecutePanicEnds(t *testing.T) {
	const gold = "SELECT x FROM g"
	o := goldOpener{gold: gold, cache: newGoldCache(time.Second, DefaultGoldCacheBytes)}
	g := o.wrap(&panicGoldDB{}, datasets.Task{ID: "t/0", DBID: "t"}).(*goldDB)
	key := g.prefix + gold
	call := &goldCall{done: make(chan struct{})}
	o.cache.calls[key] = call
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Exec's panic did not reach execute's caller")
			}
		}()
		g.execute(context.Background(), key, gold, sandbox.ExecOptions{}, time.Second, call)
	}()
	o.cache.mu.Lock()
	_, left := o.cache.calls[key]
	o.cache.mu.Unlock()
	if left {
		t.Error("the call is left under its key after Exec panicked")
	}
	select {
	case <-call.done:
		if call.err == nil {
			t.Error("the call ended with no error after Exec panicked")
		}
	default:
		t.Fatal("the call is not done after Exec panicked")
	}
}

// TestGoldSlotWaitTold: a request waiting on a shared gold execution is told (its
// ExecOptions.Waiting) while that execution waits for a slot, from when it joins, as its own
// statement would tell it: the judge's pair clock then counts the gold's running time only, and
// the prediction judged after it keeps its time (judge.Run). A request joining after the wait
// is told nothing.
func TestGoldSlotWaitTold(t *testing.T) {
	const gold, u = "SELECT x FROM g", 100 * time.Millisecond
	db, g := slotGold(gold, 3*u, 3*u, 30*u)
	ctx := context.Background()
	type request struct {
		arrive time.Duration
		mu     sync.Mutex
		told   []bool
		waited time.Duration
		since  time.Time
	}
	reqs := []*request{{arrive: 0}, {arrive: u}, {arrive: 4 * u}}
	var wg sync.WaitGroup
	for _, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(r.arrive)
			res, err := g.Exec(ctx, gold, sandbox.ExecOptions{Timeout: 20 * u, Waiting: func(w bool) {
				r.mu.Lock()
				defer r.mu.Unlock()
				r.told = append(r.told, w)
				if w {
					r.since = time.Now()
				} else {
					r.waited += time.Since(r.since)
				}
			}})
			if err != nil || !res.OK() {
				t.Errorf("the request arriving at %s: %+v, %v", r.arrive, res, err)
			}
		}()
	}
	wg.Wait()
	for i, want := range []time.Duration{3 * u, 2 * u, 0} {
		r := reqs[i]
		if want == 0 {
			if len(r.told) != 0 {
				t.Errorf("the request arriving after the wait was told %v", r.told)
			}
			continue
		}
		if len(r.told) != 2 || !r.told[0] || r.told[1] || r.waited < want-u/2 || r.waited > want+u/2 {
			t.Errorf("the request arriving at %s: told %v, waited %s; want true then false, about %s", r.arrive, r.told, r.waited.Round(time.Millisecond), want)
		}
	}
	if db.runs != 1 {
		t.Errorf("%d executions, want 1", db.runs)
	}
}
