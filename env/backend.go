package env

// This file is the environment's only contact with the protocol's reply parsing and with SQL
// execution: everything else in the package goes through start and play, so a change of the
// parser or of how statements reach a database is a change here.

import (
	"context"
	"fmt"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
)

// start opens task's database in dialect d and starts an episode of at most maxTurns turns on
// it (0: the server's budget), with the prompt distill gives a teacher.
func (s *Server) start(ctx context.Context, task datasets.Task, d datasets.Dialect, maxTurns int) (*distill.Stepper, error) {
	db, err := s.cfg.Opener.Open(ctx, d, task)
	if err != nil {
		return nil, fmt.Errorf("opening the %s database %s of task %s: %w", d, task.DBID, task.ID, err)
	}
	opts := s.cfg.Episode
	opts.Schemas = s.cfg.Schemas
	opts.Ordered = ordered(task)
	if maxTurns > 0 {
		opts.MaxTurns = maxTurns
	}
	return distill.NewStepper(ctx, task, db, opts)
}

// play feeds one assistant reply to st: parse, execute, converge, judge at the end.
func play(ctx context.Context, st *distill.Stepper, r reply) (distill.Turn, error) {
	return st.Step(ctx, chat.Reply{Content: *r.Content, Reasoning: r.Reasoning, FinishReason: r.FinishReason})
}

// ordered is the judge's option as student eval sets it: Spider's tasks compare ordered results
// when the gold SQL has ORDER BY; the others compare row sets (BIRD EX).
func ordered(t datasets.Task) bool { return t.Source == datasets.SpecSpider }
