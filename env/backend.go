package env

// This file is the environment's only contact with the protocol's reply parsing and with SQL
// execution: everything else in the package goes through start and play, so a change of the
// parser or of how statements reach a database is a change here.

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

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
// so a gold result does not change. It keeps only the results of the statements the judge runs
// for a gold (judge.Judge.GoldStatement, judge.ReadsRawValues), at most maxBytes by
// sandbox.Size and maxGoldRows rows in all; the least recently used go first to make room, and
// a result over either bound alone is not kept. Concurrent misses of one gold share one
// execution. Only results that ran are kept (a timeout under load may not repeat). Safe for
// concurrent use.
type goldCache struct {
	// limit is how long a shared execution may run: the judge's whole budget
	// (episode.JudgeBudget), past every caller's own timeout, so that no caller needs to run
	// the gold again; each caller waits only until its own deadline.
	limit    time.Duration
	maxBytes int64

	mu    sync.Mutex
	m     map[string]*list.Element // of *goldEntry, in lru
	lru   list.List                // most recently used first
	rows  int
	bytes int64

	flight singleflight.Group
	// waiting holds the keys whose shared execution waits for an execution slot now
	// (sandbox.ExecOptions.Waiting): a request whose deadline passes then gets sandbox.ErrBusy,
	// not the gold's timeout.
	waiting map[string]bool
}

// setWaiting records whether key's shared execution waits for an execution slot.
func (c *goldCache) setWaiting(key string, w bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !w {
		delete(c.waiting, key)
		return
	}
	if c.waiting == nil {
		c.waiting = make(map[string]bool)
	}
	c.waiting[key] = true
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

// slotWait adds up the time an execution waits for an execution slot, from what it tells
// sandbox.ExecOptions.Waiting. Safe for concurrent use.
type slotWait struct {
	mu     sync.Mutex
	since  time.Time // when the wait now under way began; zero when none is
	waited time.Duration
}

// tell is the execution's sandbox.ExecOptions.Waiting.
func (w *slotWait) tell(waiting bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case waiting && w.since.IsZero():
		w.since = time.Now()
	case !waiting && !w.since.IsZero():
		w.waited += time.Since(w.since)
		w.since = time.Time{}
	}
}

// ran is the own running time of the execution whose Exec took took (its Result.Duration):
// took less the waits told, never below zero.
func (w *slotWait) ran(took time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(took-w.waited, 0)
}

func newGoldCache(limit time.Duration, maxBytes int64) *goldCache {
	return &goldCache{limit: limit, maxBytes: maxBytes, m: map[string]*list.Element{}}
}

// get returns the run kept under key, now the most recently used.
func (c *goldCache) get(key string) (goldRun, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
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

// goldDB is a task's database whose full executions of the statements the judge runs for the
// task's gold go through a goldCache: the gold as the judge's style rewrites it (stmt) and, on
// SQLite, its wrapper reading the stored values (judge.ReadsRawValues), each identified by its
// exact text. Every other execution goes to the database: one keeping some rows only (by
// MaxRows or a Filter: a step's, or the judge's of a prediction that reads as the gold), and a
// prediction that holds the gold's text.
type goldDB struct {
	sandbox.DB
	stmt   string // judge.Judge.GoldStatement of the task's gold in this dialect
	prefix string // the database's part of the cache key
	cache  *goldCache
}

// Exec implements sandbox.DB.
func (g *goldDB) Exec(ctx context.Context, query string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	if opts.MaxRows != 0 || opts.Filter != nil || query != g.stmt && !judge.ReadsRawValues(query, g.stmt) {
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
	// Each request gets a Result of its own (the judge sets fields of the one it gets); the rows
	// are shared and read only.
	mine := func(run goldRun) *sandbox.Result {
		if run.res.OK() && run.ran > own {
			return sandbox.TimedOut(own, own)
		}
		cp := *run.res
		return &cp
	}
	if run, ok := c.get(key); ok {
		return mine(run), nil
	}
	// The shared execution ends with neither the context nor the deadline of the request that
	// started it: it runs for the judge's whole budget (limit), so that every request it serves
	// gets the answer its own deadline allows, and each request waits only until its own; one
	// whose deadline passes while the execution still waits for a slot gets sandbox.ErrBusy.
	shared := opts
	shared.Timeout = max(c.limit, own)
	ch := c.flight.DoChan(key, func() (any, error) {
		var wait slotWait
		opts := shared
		opts.Waiting = func(w bool) {
			c.setWaiting(key, w)
			wait.tell(w)
		}
		res, err := g.DB.Exec(context.WithoutCancel(ctx), query, opts)
		if err != nil {
			return nil, err
		}
		run := goldRun{res: res, ran: wait.ran(res.Duration)}
		if res.OK() {
			c.put(key, run)
		}
		return run, nil
	})
	timer := time.NewTimer(own)
	defer timer.Stop()
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return mine(r.Val.(goldRun)), nil
	case <-timer.C:
		c.mu.Lock()
		waiting := c.waiting[key]
		c.mu.Unlock()
		if waiting {
			// Not started by this request's deadline: the database's failure, as for a
			// statement of its own that got no slot.
			return nil, fmt.Errorf("the gold SQL: %w within its %s: its shared execution still waits for one", sandbox.ErrBusy, own)
		}
		return sandbox.TimedOut(own, own), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
