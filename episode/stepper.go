package episode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
)

// ErrEpisodeDone is returned by Stepper.Step after the episode has ended.
var ErrEpisodeDone = errors.New("distill: the episode is done")

// Stepper is the chained-sql/v1 loop driven one assistant reply at a time: Episode drives it with
// a Policy, and a caller that generates elsewhere (an RL trainer through env) feeds it replies.
// A Stepper is not safe for concurrent use.
type Stepper struct {
	task    datasets.Task
	db      sandbox.DB
	opts    EpisodeOptions
	tr      *rundir.Trajectory
	msgs    []chat.Message // the conversation the next reply answers
	started time.Time
	prevSQL string // SQL of the previous turn; "" after a violation or truncation
	final   *sandbox.Result
	done    bool
}

// NewStepper starts an episode of task on db: it renders the prompt (system turn with the
// schema, user turn with the question), which Messages returns. opts are those of Episode.
func NewStepper(ctx context.Context, task datasets.Task, db sandbox.DB, opts EpisodeOptions) (*Stepper, error) {
	s := newStepper(task, db, opts)
	if err := s.prompt(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func newStepper(task datasets.Task, db sandbox.DB, opts EpisodeOptions) *Stepper {
	opts = opts.WithDefaults()
	dialect := db.Dialect()
	started := time.Now()
	return &Stepper{task: task, db: db, opts: opts, started: started, tr: &rundir.Trajectory{
		Protocol:   protocol.ProtocolVersion,
		Key:        Key(task.ID, opts.Teacher, dialect, opts.Sample),
		TaskID:     task.ID,
		TaskIndex:  task.Index,
		Source:     task.Source,
		DBID:       task.DBID,
		Question:   task.Question,
		Evidence:   task.Evidence,
		Difficulty: task.Difficulty,
		Dialect:    dialect,
		Teacher:    opts.Teacher,
		Model:      opts.Model,
		Sample:     opts.Sample,
		Started:    started.UTC(),
	}}
}

func (s *Stepper) prompt(ctx context.Context) error {
	sys, err := s.opts.Schemas.systemPrompt(ctx, s.task, s.db)
	if err != nil {
		return fmt.Errorf("task %s: schema of %s (%s): %w", s.task.ID, s.task.DBID, s.db.Dialect(), err)
	}
	s.tr.System, s.tr.Prompt = sys, protocol.UserPrompt(s.task)
	s.msgs = append(make([]chat.Message, 0, 2+2*s.opts.MaxTurns),
		chat.Message{Role: chat.RoleSystem, Content: s.tr.System},
		chat.Message{Role: chat.RoleUser, Content: s.tr.Prompt},
	)
	return nil
}

// systemPrompt is SystemPrompt for task's database db, rendered once per database and engine
// version and shared by its episodes (a schema of many KiB is then held once, not per live
// episode).
func (c *SchemaCache) systemPrompt(ctx context.Context, task datasets.Task, db sandbox.DB) (string, error) {
	ddl, err := c.DDL(ctx, task, db)
	if err != nil {
		return "", err
	}
	if c == nil {
		return protocol.SystemPrompt(db.Dialect(), db.Version(), ddl), nil
	}
	// The DDL cache's key, plus the version the prompt names.
	key := string(db.Dialect()) + "\x00" + task.DBID + "\x00" + task.DBPath + "\x00" + db.Version()
	if p, ok := c.prompts.Load(key); ok && p.(*cachedPrompt).ddl == ddl {
		return p.(*cachedPrompt).text, nil
	}
	p := &cachedPrompt{ddl: ddl, text: protocol.SystemPrompt(db.Dialect(), db.Version(), ddl)}
	c.prompts.Store(key, p)
	return p.text, nil
}

type cachedPrompt struct{ ddl, text string }

// Messages is the conversation so far as the policy sees it (Trajectory.Conversation plus the
// last observation while the episode goes on), ending with the turn the next reply answers. The
// caller must not modify it.
func (s *Stepper) Messages() []chat.Message { return s.msgs }

// Done reports whether the episode has ended (converged or out of turns).
func (s *Stepper) Done() bool { return s.done }

// Trajectory is the episode so far; complete (judged, unless SkipGold) once Done. It is the
// Stepper's own record: read it, do not modify it, and do not use it concurrently with Step.
func (s *Stepper) Trajectory() *rundir.Trajectory { return s.tr }

// Step plays one assistant reply: it parses it, executes its SQL (or answers a truncation or a
// format violation), checks convergence and, when the episode ends, judges the final SQL
// against the gold (see Episode). It returns the recorded turn; its Observation is the next user
// turn unless the episode is now Done. A database error (connection lost, context ended) leaves
// the Stepper as it was, so the same reply can be stepped again. After the end it returns
// ErrEpisodeDone.
func (s *Stepper) Step(ctx context.Context, reply chat.Reply) (rundir.Turn, error) {
	if s.done {
		return rundir.Turn{}, ErrEpisodeDone
	}
	task, dialect, opts := s.task, s.db.Dialect(), s.opts
	turn := len(s.tr.Turns) + 1
	p := protocol.ParseReply(reply.Content)
	// The reply is parsed as the policy gave it (a teacher's texts arrive already cut at
	// textcap.Reply by package teachers, so an <sql> past that is not seen); what is kept of it
	// is bounded: its texts by EpisodeOptions.ReplyCap, the names a provider sends (finish
	// reason, model id) by textcap.Name.
	tu := rundir.Turn{
		Index:                turn,
		Content:              textcap.Cut(reply.Content, opts.ReplyCap),
		Reasoning:            textcap.Cut(reply.Reasoning, opts.ReplyCap),
		ReasoningSource:      reply.ReasoningSource,
		FinishReason:         textcap.Cut(reply.FinishReason, textcap.Name),
		ProviderFinishReason: textcap.Cut(reply.ProviderFinishReason, textcap.Name),
		Latency:              reply.Latency,
		Usage:                reply.Usage,
		Attempts:             reply.Attempts,
		ThinkOpened:          reply.ThinkOpened,
	}
	var (
		res       *sandbox.Result
		converged bool
		prevSQL   string
	)
	switch {
	case protocol.Truncated(reply):
		tu.Truncated = true
		tu.Observation = protocol.TruncatedObservation()
	case !p.OK:
		tu.FormatViolation = true
		tu.Observation = protocol.FormatViolationObservation()
	case len(p.SQL) > textcap.SQL:
		// Refused unrun, and never a convergence: the statement kept is cut.
		tu.SQL = textcap.Cut(p.SQL, textcap.SQL)
		res = &sandbox.Result{Outcome: sandbox.OutcomeRefused, Error: fmt.Sprintf("the statement is %d bytes long; at most %d are run", len(p.SQL), textcap.SQL)}
		tu.Exec = execRecord(res)
		tu.Observation = protocol.RenderObservation(res, opts.Caps)
	default:
		tu.SQL = strings.Clone(p.SQL) // p.SQL is part of the whole reply: keep only the statement
		var err error
		res, err = s.db.Exec(ctx, tu.SQL, sandbox.ExecOptions{Timeout: opts.ExecTimeout, MaxRows: opts.Caps.MaxRows})
		if err != nil {
			return rundir.Turn{}, fmt.Errorf("task %s turn %d: executing on %s (%s): %w", task.ID, turn, task.DBID, dialect, err)
		}
		boundResult(res)
		tu.Exec = execRecord(res)
		tu.Observation = protocol.RenderObservation(res, opts.Caps)
		converged = protocol.SameSQL(s.prevSQL, tu.SQL)
		prevSQL = tu.SQL
	}
	if len(reply.Content) > opts.ReplyCap || len(reply.Reasoning) > opts.ReplyCap {
		// The texts kept are cut: the form is the whole reply's, judged now.
		whole := tu
		whole.Content, whole.Reasoning = reply.Content, reply.Reasoning
		tu.Form = rundir.FormMalformed
		if whole.WellFormed() {
			tu.Form = rundir.FormWellFormed
		}
	}
	final, finalSQL := s.final, s.tr.FinalSQL
	if res != nil {
		final, finalSQL = res, tu.SQL
	}
	done := converged || turn >= opts.MaxTurns
	var verdict rundir.Trajectory // the judge's fields, committed with the turn
	if done && !opts.SkipGold {
		verdict.FinalSQL = finalSQL
		if err := judgeFinal(ctx, &verdict, task, s.db, final, opts); err != nil {
			return rundir.Turn{}, err
		}
	}

	// Commit: nothing above changed the Stepper.
	tr := s.tr
	if reply.Model != "" {
		tr.Model = textcap.Cut(reply.Model, textcap.Name)
	}
	tr.Usage = tr.Usage.Add(reply.Usage)
	s.msgs = append(s.msgs, chat.Message{Role: chat.RoleAssistant, Content: tu.Content})
	if tu.FormatViolation {
		tr.FormatViolations++
	}
	if tu.Truncated {
		tr.TruncatedTurns++
	}
	tr.Turns = append(tr.Turns, tu)
	s.prevSQL, s.final, tr.FinalSQL = prevSQL, final, finalSQL
	tr.ExecOK = final.OK()
	tr.Repeated = converged
	s.done = done
	if done {
		tr.GoldSQL, tr.GoldError, tr.GoldDialect, tr.Correct = verdict.GoldSQL, verdict.GoldError, verdict.GoldDialect, verdict.Correct
		s.final = nil // judged: its rows are not needed any more
	} else {
		s.msgs = append(s.msgs, chat.Message{Role: chat.RoleUser, Content: tu.Observation})
		if final != nil && len(final.Rows) > 0 {
			// Between turns the rows are dropped (a live episode holds no result set): when the
			// episode ends on a later format violation or truncation, judge runs the final SQL
			// again in full.
			kept := *final
			kept.Rows, kept.Truncated = nil, true
			s.final = &kept
		}
	}
	tr.Duration = time.Since(s.started)
	return tu, nil
}
