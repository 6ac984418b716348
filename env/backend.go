package env

// This file is the environment's only contact with the protocol's reply parsing and with SQL
// execution: everything else in the package goes through start and play, so a change of the
// parser or of how statements reach a database is a change here.

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/judge"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
)

// start opens task's database in dialect d and starts an episode of at most maxTurns turns on
// it (0: the server's budget), with the prompt distill gives a teacher.
func (s *Server) start(ctx context.Context, task datasets.Task, d datasets.Dialect, maxTurns int) (*episode.Stepper, error) {
	db, err := s.cfg.Opener.Open(ctx, d, task)
	if err != nil {
		return nil, fmt.Errorf("opening the %s database %s of task %s: %w", d, task.DBID, task.ID, err)
	}
	opts := s.cfg.Episode
	opts.Schemas = s.cfg.Schemas
	opts.Ordered = ordered(task)
	if g, ok := task.GoldFor(d); ok {
		gold := goldOpener{Opener: s.cfg.Opener, judge: episode.Judge(opts), gold: g, cache: s.golds}
		db = gold.wrap(db, task)
		opts.GoldOpener = gold // the task's reference database, if it has one, through the cache too
	}
	if maxTurns > 0 {
		opts.MaxTurns = maxTurns
	}
	return episode.NewStepper(ctx, task, db, opts)
}

// play feeds one assistant reply to st: parse, execute, converge, judge at the end.
func play(ctx context.Context, st *episode.Stepper, r reply) (rundir.Turn, error) {
	rep := chat.Reply{Content: *r.Content, Reasoning: r.Reasoning, FinishReason: r.FinishReason}
	if rep.Reasoning != "" {
		rep.ReasoningSource = chat.SourceReasoning // the request's "reasoning" field
	}
	return st.Step(ctx, rep)
}

// ordered is the judge's option as student eval sets it: Spider's tasks compare ordered results
// when the gold SQL has ORDER BY; the others compare row sets (BIRD EX).
func ordered(t datasets.Task) bool { return t.Source == datasets.SpecSpider }

// maxGoldRows bounds the rows goldCache holds, besides its bytes (Config.GoldCacheBytes).
const maxGoldRows = 1 << 20

// goldCache keeps the full result of each task's gold SQL per database and dialect, so the group
// of rollouts a GRPO step plays on one task runs its gold once: the task databases are read-only,
// so a gold result does not change. It keeps only the results of the statement the judge runs
// for a gold (judge.Judge.GoldStatement), at most maxBytes by sandbox.Size and maxGoldRows rows
// in all; the least recently used go first to make room, and a result over either bound alone
// is not kept. Concurrent misses of one gold share one
// execution (goldCall). Only results that ran are kept (a timeout under load may not repeat).
// Safe for concurrent use.
type goldCache struct {
	// limit is how long a shared execution may run: the judge's whole budget
	// (episode.JudgeBudget), past every caller's own timeout, so that no caller needs to run
	// the gold again; each caller waits only until its own limit (goldDB.Exec).
	limit    time.Duration
	maxBytes int64

	mu    sync.Mutex
	m     map[string]*list.Element // of *goldEntry, in lru
	lru   list.List                // most recently used first
	rows  int
	bytes int64
	// calls holds the shared executions in flight, by key; one leaves it, its result kept
	// first if it ran, before its waiters are told.
	calls map[string]*goldCall
}

// goldCall is one shared execution of a gold in flight.
type goldCall struct {
	done chan struct{} // closed once run and err are set
	run  goldRun
	err  error
	// wait tells whether the execution waits for an execution slot now and how long its
	// statement has run so far.
	wait slotWait

	mu        sync.Mutex         // orders tell and listen
	listeners map[int]func(bool) // the ExecOptions.Waiting of the requests waiting on it
	next      int
}

// tell is the shared execution's sandbox.ExecOptions.Waiting: it follows the wait (slotWait)
// and passes it on to the requests waiting on the execution (listen).
func (c *goldCall) tell(w bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wait.clock.Tell(w)
	for _, f := range c.listeners {
		f(w)
	}
}

// listen tells f, a request's sandbox.ExecOptions.Waiting, while the shared execution waits for
// a slot, from now until the returned func is called (which ends a wait under way for f), so
// that the request's caller counts the wait as a statement's own would be counted (the judge's
// pair clock: judge.Run's budget counts running time).
func (c *goldCall) listen(f func(bool)) (stop func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.listeners == nil {
		c.listeners = map[int]func(bool){}
	}
	id := c.next
	c.next++
	c.listeners[id] = f
	if _, waiting := c.wait.clock.Waited(); waiting {
		f(true)
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.listeners, id)
		if _, waiting := c.wait.clock.Waited(); waiting {
			f(false)
		}
	}
}

// goldEntry is one kept gold result.
type goldEntry struct {
	key string
	goldRun
	bytes int64
}

// goldRun is a gold execution's result and the statement's own running time: its
// Result.Duration less the time it waited for an execution slot (slotWait), which is the
// load of the moment, not the gold's. The running time is what a request's own time limit is
// compared with, so that a result kept after a wait is not a later request's timeout.
type goldRun struct {
	res *sandbox.Result
	ran time.Duration
}

// slotWait follows one execution from its start (began, set before it is shared): the time
// it waits for an execution slot (clock, told through sandbox.ExecOptions.Waiting by
// goldCall.tell), and so the time its statement has run.
type slotWait struct {
	began time.Time
	clock sandbox.WaitClock
}

// ran is the own running time of the execution whose Exec took took (its Result.Duration):
// took less the waits told, never below zero.
func (w *slotWait) ran(took time.Duration) time.Duration {
	waited, _ := w.clock.Waited()
	return max(took-waited, 0)
}

// now reports whether the execution waits for a slot now and how long it has run so far: the
// time since began less the waits told.
func (w *slotWait) now() (waiting bool, ran time.Duration) {
	waited, waiting := w.clock.Waited()
	return waiting, max(time.Since(w.began)-waited, 0)
}

func newGoldCache(limit time.Duration, maxBytes int64) *goldCache {
	return &goldCache{limit: limit, maxBytes: maxBytes, m: map[string]*list.Element{}, calls: map[string]*goldCall{}}
}

// get returns the run kept under key, now the most recently used.
func (c *goldCache) get(key string) (goldRun, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.getLocked(key)
}

func (c *goldCache) getLocked(key string) (goldRun, bool) {
	el, ok := c.m[key]
	if !ok {
		return goldRun{}, false
	}
	c.lru.MoveToFront(el)
	return el.Value.(*goldEntry).goldRun, true
}

// put keeps run under key, dropping the least recently used results until both bounds hold; a
// result over a bound alone is not kept.
func (c *goldCache) put(key string, run goldRun) {
	res := run.res
	e := &goldEntry{key: key, goldRun: run, bytes: int64(len(key)) + sandbox.Size(res)}
	if e.bytes > c.maxBytes || len(res.Rows) > maxGoldRows {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; ok {
		return
	}
	for c.bytes+e.bytes > c.maxBytes || c.rows+len(res.Rows) > maxGoldRows {
		c.dropLocked(c.lru.Back())
	}
	c.m[key] = c.lru.PushFront(e)
	c.bytes += e.bytes
	c.rows += len(res.Rows)
}

func (c *goldCache) dropLocked(el *list.Element) {
	e := c.lru.Remove(el).(*goldEntry)
	delete(c.m, e.key)
	c.bytes -= e.bytes
	c.rows -= len(e.res.Rows)
}

// held returns the results kept, their rows and their bytes.
func (c *goldCache) held() (results, rows int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.rows, c.bytes
}

// goldOpener opens a task's reference database (episode.EpisodeOptions.GoldOpener), with its
// gold executions through the goldCache.
type goldOpener struct {
	episode.Opener
	judge judge.Judge // the episode's (episode.Judge)
	gold  string      // the task's gold SQL for the episode's dialect
	cache *goldCache
}

// Open implements episode.Opener.
func (o goldOpener) Open(ctx context.Context, d datasets.Dialect, t datasets.Task) (sandbox.DB, error) {
	db, err := o.Opener.Open(ctx, d, t)
	if err != nil {
		return nil, err
	}
	return o.wrap(db, t), nil
}

// wrap returns db (task t's, in its dialect) with its gold executions through the cache.
func (o goldOpener) wrap(db sandbox.DB, t datasets.Task) sandbox.DB {
	stmt, ok := o.judge.GoldStatement(db.Dialect(), o.gold)
	if !ok {
		return db // the gold holds no statement: nothing runs for it
	}
	return &goldDB{DB: db, stmt: stmt, prefix: string(db.Dialect()) + "\x00" + t.DBID + "\x00" + t.DBPath + "\x00", cache: o.cache}
}

// goldDB is a task's database whose full executions of the statement the judge runs for the
// task's gold go through a goldCache: the gold as the judge's style rewrites it (stmt),
// identified by its exact text. Every other execution goes to the database: one keeping some
// rows only (by MaxRows or a Filter: a step's, or the judge's of a prediction that reads as the
// gold), and a prediction that holds the gold's text.
type goldDB struct {
	sandbox.DB
	stmt   string // judge.Judge.GoldStatement of the task's gold in this dialect
	prefix string // the database's part of the cache key
	cache  *goldCache
}

// Exec implements sandbox.DB.
func (g *goldDB) Exec(ctx context.Context, query string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	if opts.MaxRows != 0 || opts.Filter != nil || query != g.stmt {
		return g.DB.Exec(ctx, query, opts)
	}
	key := g.prefix + query
	c := g.cache
	own := opts.Timeout
	if own <= 0 {
		own = sandbox.DefaultTimeout
	}
	// A request gets the answer its own time limit allows: a kept or shared result whose
	// statement ran longer than own is its timeout, as running the gold alone would be, whoever
	// ran it first; the time that execution waited for a slot is not the gold's (goldRun).
	// Each request gets a Result of its own (a caller may set fields of the one it gets); the rows
	// are shared and read only.
	mine := func(run goldRun) *sandbox.Result {
		if run.res.OK() && run.ran > own {
			return sandbox.TimedOut(own, own)
		}
		cp := *run.res
		return &cp
	}
	c.mu.Lock()
	if run, ok := c.getLocked(key); ok {
		c.mu.Unlock()
		return mine(run), nil
	}
	call := c.calls[key]
	if call == nil {
		call = &goldCall{done: make(chan struct{}), wait: slotWait{began: time.Now()}}
		c.calls[key] = call
		go g.execute(context.WithoutCancel(ctx), key, query, opts, own, call)
	}
	c.mu.Unlock()
	if opts.Waiting != nil {
		defer call.listen(opts.Waiting)()
	}
	// The request waits until its own limit has passed on the statement's running time, not
	// on the clock: at own after its arrival, a shared execution that has run for ran < own
	// (it waited for a slot first, or began later) is waited for until own - ran more, as
	// running the gold alone would be (statement_timeout and the MySQL killer start after the
	// wait), so that the answer in flight is the answer kept (mine). One whose execution still
	// waits for a slot then gets sandbox.ErrBusy: the gold never ran for it.
	timer := time.NewTimer(own)
	defer timer.Stop()
	answer := func() (*sandbox.Result, error) {
		if call.err != nil {
			return nil, call.err
		}
		return mine(call.run), nil
	}
	for {
		select {
		case <-call.done:
			return answer()
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
		}
		select {
		case <-call.done: // ended meanwhile: its result decides
			return answer()
		default:
		}
		waiting, ran := call.wait.now()
		if waiting {
			// Not started by this request's deadline: the database's failure, as for a
			// statement of its own that got no slot.
			return nil, fmt.Errorf("the gold SQL: %w within its %s: its shared execution still waits for one", sandbox.ErrBusy, own)
		}
		if ran >= own {
			return sandbox.TimedOut(own, own), nil
		}
		timer.Reset(own - ran)
	}
}

// execute runs the shared execution call of the gold query under key and ends it: its result
// kept if it ran, then call done. It ends with neither the context nor the deadline of the
// request that started it (ctx has no cancellation): it runs for the judge's whole budget
// (goldCache.limit), so that every request it serves gets the answer its own limit allows.
// The call ends however execute does: a panic in Exec, were it recovered, leaves no call under
// key and its waiters an error.
func (g *goldDB) execute(ctx context.Context, key, query string, opts sandbox.ExecOptions, own time.Duration, call *goldCall) {
	c := g.cache
	ended := false
	defer func() {
		if !ended {
			call.err = errors.New("the gold SQL: its shared execution ended without a result")
		}
		c.mu.Lock()
		delete(c.calls, key)
		c.mu.Unlock()
		close(call.done)
	}()
	opts.Timeout = max(c.limit, own)
	opts.Waiting = call.tell
	res, err := g.DB.Exec(ctx, query, opts)
	if err == nil {
		call.run = goldRun{res: res, ran: call.wait.ran(res.Duration)}
		if res.OK() {
			c.put(key, call.run)
		}
	}
	call.err = err
	ended = true
}
