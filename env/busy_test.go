package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
)

// Which executions a busyOpener's databases fail with sandbox.ErrBusy.
const (
	busyNone int32 = iota
	busyAll        // every execution
	busyFull       // full executions only (no row cap): the judge's, the gold's included
)

// busyOpener opens the Connector's databases with their executions failing as an engine's do
// when statements past their deadlines hold its slots: while mode says so, and for the first
// firstTries executions of each statement text holding marker (when set).
type busyOpener struct {
	conn       *sandbox.Connector
	mode       atomic.Int32
	marker     string
	firstTries int
	mu         sync.Mutex
	tries      map[string]int
}

func (o *busyOpener) Open(ctx context.Context, d datasets.Dialect, t datasets.Task) (sandbox.DB, error) {
	db, err := o.conn.Open(ctx, d, t)
	if err != nil {
		return nil, err
	}
	return &busySlotsDB{DB: db, o: o}, nil
}

type busySlotsDB struct {
	sandbox.DB
	o *busyOpener
}

func (b *busySlotsDB) Exec(ctx context.Context, q string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	busy := false
	switch b.o.mode.Load() {
	case busyAll:
		busy = true
	case busyFull:
		busy = opts.MaxRows == 0
	}
	if b.o.marker != "" && strings.Contains(q, b.o.marker) {
		b.o.mu.Lock()
		if b.o.tries == nil {
			b.o.tries = map[string]int{}
		}
		b.o.tries[q]++
		busy = busy || b.o.tries[q] <= b.o.firstTries
		b.o.mu.Unlock()
	}
	if busy {
		return nil, fmt.Errorf("test exec: %w: statements still running past their deadline hold the slots", sandbox.ErrBusy)
	}
	return b.DB.Exec(ctx, q, opts)
}

// postBusy posts body to url and returns the status, the decoded answer and Retry-After.
func postBusy(t *testing.T, url string, body any, out any) (int, string) {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// TestBusyDatabase: while a database's execution slots are held (sandbox.ErrBusy), a step, its
// judging with the gold, a batch step and a score are 503 with Retry-After and the error's
// retry_after, and the episode is unchanged: no turn is spent, nothing is judged; once
// the slots are free the same requests succeed, the episode judged as if nothing had happened.
func TestBusyDatabase(t *testing.T) {
	conn := &sandbox.Connector{}
	t.Cleanup(func() { conn.Close() })
	task := tasksOf(t)[5]
	g := gold(t, task, datasets.SQLite)
	o := &busyOpener{conn: conn}
	_, url := testServer(t, Config{Tasks: []datasets.Task{task}, Opener: o})
	ep := start(t, url, task.ID, "")
	busy := func(what string, code int, retry string, e *apiError) {
		t.Helper()
		if code != http.StatusServiceUnavailable || retry != "1" || e == nil || e.RetryAfter != 1 || !strings.Contains(e.Message, "no execution slot") || !strings.Contains(e.Message, "unchanged") {
			t.Fatalf("%s with the slots held: %d, Retry-After %q, %+v; want 503 with Retry-After 1", what, code, retry, e)
		}
	}
	turns := func(want int) {
		t.Helper()
		var got struct {
			Turns int  `json:"turns"`
			Done  bool `json:"done"`
		}
		if code := call(t, "GET", url+"/v1/episodes/"+ep.EpisodeID, nil, &got); code != 200 || got.Turns != want || got.Done {
			t.Fatalf("episode after a busy database: %d %+v, want %d turns, not done", code, got, want)
		}
	}
	stepURL := url + "/v1/episodes/" + ep.EpisodeID + "/step"

	o.mode.Store(busyAll)
	var st wireStep
	code, retry := postBusy(t, stepURL, map[string]string{"content": answer(g)}, &st)
	busy("a step", code, retry, st.Error)
	turns(0)
	var batch struct {
		Results []wireStep `json:"results"`
	}
	if code, _ := postBusy(t, url+"/v1/episodes:batch-step", map[string]any{"steps": []map[string]string{{"episode_id": ep.EpisodeID, "content": answer(g)}}}, &batch); code != 200 || len(batch.Results) != 1 {
		t.Fatalf("batch step: %d %+v", code, batch)
	}
	busy("a batch step", http.StatusServiceUnavailable, "1", batch.Results[0].Error)
	var e wireErr
	code, retry = postBusy(t, url+"/v1/score", map[string]any{"task_id": task.ID, "completions": []string{answer(g)}}, &e)
	busy("a score", code, retry, e.Error)
	turns(0)

	// The turn's statement runs; the judge's gold does not: the converging step is 503 too.
	o.mode.Store(busyFull)
	if s := step(t, url, ep.EpisodeID, answer(g)); s.Turn != 1 || *s.Done {
		t.Fatalf("first step: %+v", s)
	}
	st = wireStep{}
	code, retry = postBusy(t, stepURL, map[string]string{"content": answer(g)}, &st)
	busy("the step that ends the episode (the gold's slot)", code, retry, st.Error)
	turns(1)

	o.mode.Store(busyNone)
	end := step(t, url, ep.EpisodeID, answer(g))
	if r := end.Rewards.four(t); !*end.Done || end.Turn != 2 || r != [4]int{1, 1, 1, 1} || end.Info.GoldError != "" {
		t.Fatalf("once the slots are free: %+v, rewards %v; want the episode converged and judged correct", end, r)
	}
}

// waitingGoldDB waits wait for an execution slot, telling ExecOptions.Waiting, then answers at
// once.
type waitingGoldDB struct{ slowGoldDB }

func (d *waitingGoldDB) Exec(ctx context.Context, q string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	if opts.Waiting != nil {
		opts.Waiting(true)
	}
	time.Sleep(d.wait)
	if opts.Waiting != nil {
		opts.Waiting(false)
	}
	return &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"x"}, Rows: [][]any{{int64(1)}}, Total: 1, Duration: time.Millisecond}, nil
}

// TestGoldFlightBusy: a request whose deadline passes while the shared gold execution still
// waits for an execution slot gets sandbox.ErrBusy (the database's failure: the env's 503), not
// the gold's timeout; a request with a longer limit gets the result once the execution runs.
func TestGoldFlightBusy(t *testing.T) {
	const gold = "SELECT x FROM g"
	o := goldOpener{gold: gold, cache: newGoldCache(3*time.Second, DefaultGoldCacheBytes)}
	g := o.wrap(&waitingGoldDB{slowGoldDB{wait: time.Second}}, datasets.Task{ID: "t/0", DBID: "t"})
	type answer struct {
		res  *sandbox.Result
		err  error
		took time.Duration
	}
	var short, long answer
	var wg sync.WaitGroup
	for _, a := range []struct {
		timeout time.Duration
		out     *answer
	}{{300 * time.Millisecond, &short}, {2 * time.Second, &long}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			a.out.res, a.out.err = g.Exec(context.Background(), gold, sandbox.ExecOptions{Timeout: a.timeout})
			a.out.took = time.Since(start)
		}()
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	if short.res != nil || !errors.Is(short.err, sandbox.ErrBusy) || short.took > 900*time.Millisecond {
		t.Errorf("the shorter limit while the gold waits for a slot: %+v, %v after %s; want sandbox.ErrBusy at its deadline", short.res, short.err, short.took)
	}
	if long.err != nil || !long.res.OK() {
		t.Errorf("the longer limit: %+v, %v; want the result", long.res, long.err)
	}
}

// busyOpenOpener fails its next busy Opens with sandbox.ErrBusy, as sqlite.Open does when its
// first connection finds no file descriptor left.
type busyOpenOpener struct {
	conn   *sandbox.Connector
	busy   atomic.Int32
	opened atomic.Int32 // the Opens tried
}

func (o *busyOpenOpener) Open(ctx context.Context, d datasets.Dialect, t datasets.Task) (sandbox.DB, error) {
	o.opened.Add(1)
	if o.busy.Add(-1) >= 0 {
		return nil, fmt.Errorf("open sqlite database %s: %w: no file descriptor left to open it", t.DBID, sandbox.ErrBusy)
	}
	return o.conn.Open(ctx, d, t)
}

// TestBusyOpen: an episode whose database's open fails with sandbox.ErrBusy (SQLite's Open with
// no file descriptor left) is 503 with Retry-After, not started; once the open succeeds the same
// request starts it.
func TestBusyOpen(t *testing.T) {
	conn := &sandbox.Connector{}
	t.Cleanup(func() { conn.Close() })
	task := tasksOf(t)[5]
	o := &busyOpenOpener{conn: conn}
	_, url := testServer(t, Config{Tasks: []datasets.Task{task}, Opener: o})
	o.busy.Store(1)
	var ep wireEpisode
	code, retry := postBusy(t, url+"/v1/episodes", map[string]string{"task_id": task.ID}, &ep)
	if code != http.StatusServiceUnavailable || retry != "1" || ep.Error == nil || ep.Error.RetryAfter != 1 || ep.EpisodeID != "" {
		t.Fatalf("a busy open: %d, Retry-After %q, %+v; want 503 with Retry-After 1", code, retry, ep)
	}
	start(t, url, task.ID, "")
}

// TestPromptsBusyOpen: the prompt export, a batch job, tries a prompt whose database's open is
// busy (sandbox.ErrBusy) again, as the batch jobs' episode.Patient openers do, instead of failing
// the whole export on the first busy open.
func TestPromptsBusyOpen(t *testing.T) {
	tok, err := tokenizer.Load(shared.Path(t, "tokenizer/qwen2.5"))
	if err != nil {
		t.Fatal(err)
	}
	conn := &sandbox.Connector{}
	t.Cleanup(func() { conn.Close() })
	task := tasksOf(t)[5]
	o := &busyOpenOpener{conn: conn}
	s := testEnv(t, Config{Tasks: []datasets.Task{task}, Opener: o, Tokenizer: tok})
	o.busy.Store(1)
	n := 0
	if err := s.Prompts(context.Background(), func(rows []PromptRow) error { n += len(rows); return nil }); err != nil || n != 1 || o.opened.Load() != 2 {
		t.Fatalf("an export whose first open is busy: %d rows after %d opens, %v; want 1 row after 2", n, o.opened.Load(), err)
	}
}
