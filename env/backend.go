package env

// This file is the environment's only contact with the protocol's reply parsing and with SQL
// execution: everything else in the package goes through start and play, so a change of the
// parser or of how statements reach a database is a change here.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
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
	if g, ok := task.GoldFor(d); ok {
		gold := goldOpener{Opener: s.cfg.Opener, core: strings.TrimSuffix(strings.TrimSpace(g), ";"), cache: s.golds}
		db = gold.wrap(db, task)
		opts.GoldOpener = gold // the task's reference database, if it has one, through the cache too
	}
	opts.Ordered = ordered(task)
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

// maxGoldRows bounds the rows goldCache holds; past it, gold results are not kept.
const maxGoldRows = 1 << 20

// goldCache keeps the full result of each task's gold SQL per database and dialect, so the group
// of rollouts a GRPO step plays on one task runs its gold once: the task databases are read-only,
// so a gold result does not change. Concurrent misses of one gold share one execution. Only
// results that ran are kept (a timeout under load may not repeat). Safe for concurrent use.
type goldCache struct {
	// limit is how long a shared execution may run: the judge's whole budget
	// (episode.JudgeBudget), past every caller's own timeout, so that no caller needs to run
	// the gold again; each caller waits only until its own deadline.
	limit  time.Duration
	mu     sync.Mutex
	m      map[string]*sandbox.Result
	rows   int
	flight singleflight.Group
}

// goldOpener opens a task's reference database (episode.EpisodeOptions.GoldOpener), with its
// gold executions through the goldCache.
type goldOpener struct {
	episode.Opener
	core  string // the gold SQL, trimmed of space and a trailing ";"
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
	return &goldDB{DB: db, core: o.core, prefix: string(db.Dialect()) + "\x00" + t.DBID + "\x00" + t.DBPath + "\x00", cache: o.cache}
}

// goldDB is a task's database whose full executions of the task's gold SQL go through a
// goldCache; every other execution goes to the database. The judge runs the gold as it is or
// in forms of its own (a trailing ";" cut, wrapped in a CTE to read raw values), so every full
// execution whose text holds the gold is cached, under its exact text: whatever is cached, a
// read-only database gives the same result again.
type goldDB struct {
	sandbox.DB
	core   string // the gold SQL, trimmed of space and a trailing ";"
	prefix string // the database's part of the cache key
	cache  *goldCache
}

// Exec implements sandbox.DB.
func (g *goldDB) Exec(ctx context.Context, query string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	if opts.MaxRows != 0 || g.core == "" || !strings.Contains(query, g.core) {
		return g.DB.Exec(ctx, query, opts)
	}
	key := g.prefix + query
	c := g.cache
	own := opts.Timeout
	if own <= 0 {
		own = sandbox.DefaultTimeout
	}
	// A request gets the answer its own time limit allows: a kept or shared result that took
	// longer than own is its timeout, as running the gold alone would be, whoever ran it first.
	mine := func(res *sandbox.Result) *sandbox.Result {
		if res.OK() && res.Duration > own {
			return sandbox.TimedOut(own, own)
		}
		return res
	}
	c.mu.Lock()
	res, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return mine(res), nil
	}
	// The shared execution ends with neither the context nor the deadline of the request that
	// started it: it runs for the judge's whole budget (limit), so that every request it serves
	// gets the answer its own deadline allows, and each request waits only until its own.
	shared := opts
	shared.Timeout = max(c.limit, own)
	ch := c.flight.DoChan(key, func() (any, error) {
		res, err := g.DB.Exec(context.WithoutCancel(ctx), query, shared)
		if err == nil && res.OK() {
			c.mu.Lock()
			if c.rows+len(res.Rows) <= maxGoldRows {
				if c.m == nil {
					c.m = make(map[string]*sandbox.Result)
				}
				c.m[key] = res
				c.rows += len(res.Rows)
			}
			c.mu.Unlock()
		}
		return res, err
	})
	timer := time.NewTimer(own)
	defer timer.Stop()
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return mine(r.Val.(*sandbox.Result)), nil
	case <-timer.C:
		return sandbox.TimedOut(own, own), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
