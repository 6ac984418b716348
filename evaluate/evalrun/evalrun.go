// Package evalrun runs an evaluation: the episodes of one policy through distill's resumable
// runner into an eval dir, then the derived files (evaluate.Finish). It is the one part of
// student eval that needs the runner; package evaluate itself only reads and writes eval dirs.
package evalrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/evaluate"
)

// ErrInterrupted is returned by Run when its context ended before every task was done; the
// eval dir holds what was done (Summary.Complete false) and the same command resumes it.
var ErrInterrupted = distill.ErrInterrupted

// Run evaluates cfg.Policy on cfg.Tasks: distill.Run does the episodes (concurrent, resumable,
// skipping keys done or failed before; started grouped by database, so a student's KV cache keeps
// one database's system prompt from one task to the next), then the four derived files are rebuilt from everything
// the eval dir holds. It returns the summary also on ErrInterrupted.
func Run(ctx context.Context, cfg evaluate.Config) (*evaluate.Summary, error) {
	if err := cfg.Prepare(); err != nil {
		return nil, err
	}
	started := time.Now()
	rr, err := distill.Run(ctx, distill.RunConfig{
		Dir:          cfg.Dir,
		Tasks:        cfg.Tasks,
		ByDatabase:   true,
		TaskSpec:     cfg.TaskSpec,
		Limit:        cfg.Limit,
		Policies:     []*episode.PolicyHandle{cfg.Policy},
		Dialects:     []datasets.Dialect{cfg.Dialect},
		Samples:      cfg.Samples,
		Episode:      cfg.Episode,
		Concurrency:  cfg.Batch,
		Opener:       cfg.Opener,
		Toolkit:      cfg.Toolkit,
		DrainTimeout: cfg.DrainTimeout,
		Abort:        cfg.Abort,
		Progress:     cfg.Progress,
		Interactive:  cfg.Interactive,
		Schemas:      cfg.Schemas,
	})
	interrupted := errors.Is(err, distill.ErrInterrupted)
	if err != nil && !interrupted {
		return nil, fmt.Errorf("eval dir %s: %w", cfg.Dir, err)
	}
	wall := time.Since(started)
	// The derived files are rebuilt even after an interruption; vote queries then run on their
	// own (each bounded by the exec timeout) so the files match what was done.
	s, berr := evaluate.Finish(context.WithoutCancel(ctx), &cfg, started, wall)
	if berr != nil {
		return nil, berr
	}
	if rr != nil {
		s.Repairs = rr.Repairs
	}
	if interrupted {
		return s, ErrInterrupted
	}
	return s, nil
}
