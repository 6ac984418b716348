// Package episode plays one chained-sql/v1 episode: the Stepper (one reply in, one turn out,
// for the RL environment and rollouts), the Episode loop that drives it with any chat.Policy,
// judging, the schema cache, policy handles and specs (the oracle included), and the database
// preflight. What it records is a rundir.Trajectory; the protocol is package protocol's.
package episode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/judge"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
)

// Defaults of EpisodeOptions.
const (
	DefaultExecTimeout   = 30 * time.Second
	DefaultSchemaSamples = 3
)

// EpisodeOptions configure one Episode. Zero values take the protocol defaults.
type EpisodeOptions struct {
	// MaxTurns is the turn budget (default DefaultMaxTurns).
	MaxTurns int
	// ExecTimeout bounds each statement, the gold's included (default 30 s).
	ExecTimeout time.Duration
	// Caps bound the observations.
	Caps protocol.ObsCaps
	// Chat is passed to every policy call (sampling settings).
	Chat chat.Options
	// Teacher is the policy's name recorded in the trajectory; Model its model id when known
	// (a reply's own Model wins).
	Teacher string
	Model   string
	// Sample is the sample index recorded in the trajectory (and part of its key).
	Sample int
	// Ordered judges in judge.StyleSpider (test-suite-sql-eval's rules: ordered rows when
	// the gold has ORDER BY, columns in any order, DISTINCT removed); otherwise BIRD EX.
	Ordered bool
	// Schemas caches the rendered DDL per database; nil renders it for this episode alone.
	Schemas *SchemaCache
	// SkipGold leaves Correct false and runs no gold SQL (prediction-only runs).
	SkipGold bool
	// GoldOpener opens the task's reference database (datasets.Task.GoldReference: its SQLite
	// file, for an episode on a server copy of a benchmark with SQLite gold only), which the
	// judge runs the gold on when it fails on the episode's database (judge.Judge.Reference).
	// Nil: such a failure leaves the episode unjudged (GoldError).
	GoldOpener Opener
	// ReplyCap bounds each text of a reply kept in the trajectory and the conversation (content,
	// reasoning), cut by textcap.Cut after the whole reply was parsed (default textcap.Reply).
	ReplyCap int
}

func (o EpisodeOptions) WithDefaults() EpisodeOptions {
	if o.MaxTurns <= 0 {
		o.MaxTurns = protocol.DefaultMaxTurns
	}
	if o.ExecTimeout <= 0 {
		o.ExecTimeout = DefaultExecTimeout
	}
	o.Caps = o.Caps.WithDefaults()
	if o.ReplyCap <= 0 {
		o.ReplyCap = textcap.Reply
	}
	return o
}

// TaskAware is a Policy that needs the task it answers (the oracle). Episode calls ForTask once
// and talks to the policy it returns.
type TaskAware interface {
	ForTask(t datasets.Task, d datasets.Dialect) (chat.Policy, error)
}

// Key names one unit of work of a run: task, teacher, dialect and sample index.
func Key(taskID, teacher string, d datasets.Dialect, sample int) string {
	return fmt.Sprintf("%s|%s|%s|%d", taskID, teacher, d, sample)
}

// PolicyError is an Episode that stopped because the policy failed (after its own retries).
type PolicyError struct {
	Turn int
	Err  error
}

// Error implements error.
func (e *PolicyError) Error() string {
	return fmt.Sprintf("policy failed at turn %d: %v", e.Turn, e.Err)
}

// Unwrap returns the policy's error.
func (e *PolicyError) Unwrap() error { return e.Err }

// Episode runs the chained-sql/v1 loop of policy on task against db and returns the trajectory.
//
// The conversation is system, user question, then assistant and observation turns alternating;
// each turn is recorded once, as received (Trajectory.Conversation rebuilds what the policy
// saw). A truncated reply (see Truncated) gets the truncation notice; a complete reply with no
// usable <sql> is a format violation and gets the format-error observation. Either breaks any
// convergence streak, and the loop goes on. FinalSQL is the
// last statement that was executed (empty when no turn had one); ExecOK says it ran; Correct
// is judge.Judge's verdict on it against task.GoldFor(db.Dialect()) (see judge).
//
// A policy error ends the episode: the partial trajectory comes back with a *PolicyError. A
// database error (connection lost, context ended) comes back wrapped, with the trajectory of the
// turns completed before it; SQL errors, timeouts and refusals are observations. Episode is a
// Stepper driven by policy.
func Episode(ctx context.Context, policy chat.Policy, task datasets.Task, db sandbox.DB, opts EpisodeOptions) (*rundir.Trajectory, error) {
	s := newStepper(task, db, opts)
	tr := s.tr
	defer func() { tr.Duration = time.Since(s.started) }()

	if ta, ok := policy.(TaskAware); ok {
		p, err := ta.ForTask(task, db.Dialect())
		if err != nil {
			return tr, &PolicyError{Turn: 0, Err: err}
		}
		policy = p
	}
	if err := s.prompt(ctx); err != nil {
		return tr, err
	}
	for !s.done {
		t0 := time.Now()
		reply, err := policy.Chat(ctx, s.msgs, s.opts.Chat)
		if err != nil {
			return tr, &PolicyError{Turn: len(tr.Turns) + 1, Err: err}
		}
		if reply.Latency == 0 {
			reply.Latency = time.Since(t0)
		}
		if _, err := s.Step(ctx, reply); err != nil {
			return tr, err
		}
	}
	return tr, nil
}

// JudgeBudget is the time the judge has for an episode's final SQL and its gold together: two
// statements' timeouts (opts.WithDefaults's).
func JudgeBudget(opts EpisodeOptions) time.Duration { return 2 * opts.WithDefaults().ExecTimeout }

// Judge is the judge an episode under opts applies to its final SQL (judgeFinal adds the
// Reference): the Spider style when opts.Ordered, else BIRD's.
func Judge(opts EpisodeOptions) judge.Judge {
	if opts.Ordered {
		return judge.Judge{Style: judge.StyleSpider}
	}
	return judge.Judge{Style: judge.StyleBIRD}
}

// judgeFinal sets Correct by judge.Judge: the Spider style when opts.Ordered, else BIRD's, so
// that student score on the eval dir's predictions gives the same verdicts. The judge decides
// from the final SQL itself (the style's official evaluator may run it rewritten), reusing the
// turn's result when the SQL runs unchanged and the result is complete (or failed).
func judgeFinal(ctx context.Context, tr *rundir.Trajectory, task datasets.Task, db sandbox.DB, final *sandbox.Result, opts EpisodeOptions) error {
	gold, ok := task.GoldFor(db.Dialect())
	if !ok {
		tr.GoldError = fmt.Sprintf("task has no gold SQL for %s", db.Dialect())
		return nil
	}
	tr.GoldSQL = gold
	j := Judge(opts)
	if ref, ok := task.GoldReference(db.Dialect()); ok && opts.GoldOpener != nil {
		j.Reference = func(ctx context.Context) (sandbox.DB, error) { return opts.GoldOpener.Open(ctx, ref, task) }
	}
	v, err := j.Run(ctx, db, gold, tr.FinalSQL, final, JudgeBudget(opts))
	if err != nil {
		return fmt.Errorf("task %s: judging on %s (%s): %w", task.ID, task.DBID, db.Dialect(), err)
	}
	tr.GoldError = textcap.Cut(v.GoldError, textcap.Error)
	tr.GoldDialect = v.GoldOn
	tr.Correct = v.Correct
	return nil
}

// boundResult cuts the texts of r that came from the database or the statement, its error and
// its column names (textcap.Error, textcap.CutList), in place: the Stepper keeps the final
// Result between turns, and a trajectory keeps both.
func boundResult(r *sandbox.Result) {
	r.Error = textcap.Cut(r.Error, textcap.Error)
	r.Columns = textcap.CutList(r.Columns)
}

func execRecord(r *sandbox.Result) *rundir.ExecRecord {
	return &rundir.ExecRecord{
		Outcome:   r.Outcome,
		Columns:   r.Columns,
		Total:     r.Total,
		Truncated: r.Truncated,
		Error:     r.Error,
		Duration:  r.Duration,
	}
}

// SchemaCache renders each database's schema once and shares it among episodes. Safe for
// concurrent use; concurrent requests for the same database wait for one rendering. Failures are
// not cached.
type SchemaCache struct {
	// Samples is the number of sample values per column (default 3).
	Samples int
	// Render replaces the default rendering (sandbox.Introspect, then Schema.DDL of the dialect).
	Render func(ctx context.Context, db sandbox.DB, samples int) (string, error)

	mu      sync.Mutex
	entries map[string]*schemaEntry
	prompts sync.Map // system prompts (see systemPrompt), one string per database for all episodes
}

type schemaEntry struct {
	done chan struct{}
	ddl  string
	err  error
}

// NewSchemaCache returns an empty cache with samples values per column.
func NewSchemaCache(samples int) *SchemaCache { return &SchemaCache{Samples: samples} }

func (c *SchemaCache) render(ctx context.Context, db sandbox.DB) (string, error) {
	samples := DefaultSchemaSamples
	var render func(context.Context, sandbox.DB, int) (string, error)
	if c != nil {
		if c.Samples > 0 {
			samples = c.Samples
		}
		render = c.Render
	}
	if render != nil {
		return render(ctx, db, samples)
	}
	s, err := sandbox.Introspect(ctx, db, samples)
	if err != nil {
		return "", err
	}
	return s.DDL(db.Dialect()), nil
}

// DDL returns the schema DDL of task's database db, rendering it on first use. The cache key is
// (dialect, db_id, SQLite path), so equal db_ids of different benchmarks do not collide.
func (c *SchemaCache) DDL(ctx context.Context, task datasets.Task, db sandbox.DB) (string, error) {
	if c == nil {
		return c.render(ctx, db)
	}
	key := string(db.Dialect()) + "\x00" + task.DBID + "\x00" + task.DBPath
	for {
		c.mu.Lock()
		if c.entries == nil {
			c.entries = make(map[string]*schemaEntry)
		}
		e, ok := c.entries[key]
		if !ok {
			e = &schemaEntry{done: make(chan struct{})}
			c.entries[key] = e
			c.mu.Unlock()
			e.ddl, e.err = c.render(ctx, db)
			if e.err != nil {
				c.mu.Lock()
				delete(c.entries, key)
				c.mu.Unlock()
			}
			close(e.done)
			return e.ddl, e.err
		}
		c.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		if e.err == nil {
			return e.ddl, nil
		}
		if errors.Is(e.err, context.Canceled) || errors.Is(e.err, context.DeadlineExceeded) {
			continue // the renderer's context ended, not ours: try again
		}
		return "", e.err
	}
}
