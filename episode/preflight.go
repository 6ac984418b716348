package episode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// PreflightTimeout bounds CheckDatabases.
const PreflightTimeout = time.Minute

// CheckDatabases opens every distinct database of tasks once in each dialect, so that a command
// can refuse a missing SQLite file, an unreachable server, a bad DSN, or a reader that is missing
// or not granted a database (sandbox.ErrReader) with one error naming it before it creates a run
// dir (inside Run such a failure only becomes a failures.jsonl line per key). A Connector keeps
// the pools it opened, so the run reuses them.
func CheckDatabases(ctx context.Context, o Opener, tasks []datasets.Task, dialects []datasets.Dialect) error {
	ctx, cancel := context.WithTimeout(ctx, PreflightTimeout)
	defer cancel()
	for _, d := range dialects {
		seen := map[string]bool{}
		for _, t := range tasks {
			k := t.DBID + "\x00" + t.DBPath
			if seen[k] {
				continue
			}
			seen[k] = true
			_, err := o.Open(ctx, d, t)
			if errors.Is(err, sandbox.ErrReader) {
				return fmt.Errorf("checking the %s databases: %w; nothing was run: first run distill load --dialect %s --dsn DSN --tasks SPEC (this run's tasks)", d, err, d)
			}
			if err != nil {
				return fmt.Errorf("checking the %s databases: %w; nothing was run", d, err)
			}
		}
	}
	return nil
}

// Opener opens a task's database in a dialect; *sandbox.Connector is one. The returned DB stays
// owned by the Opener (pooled, closed by it).
type Opener interface {
	Open(ctx context.Context, d datasets.Dialect, t datasets.Task) (sandbox.DB, error)
}

// patientOpener opens databases as sandbox.Patient ones (see Patient).
type patientOpener struct{ Opener }

// Patient returns o with every database it opens made sandbox.Patient (BusyPatience): a
// statement that finds the engine's execution slots held by runaways (sandbox.ErrBusy) is tried
// again until they end, within sandbox.BusyPatience, and only then is the database's failure; so
// is an open that fails with sandbox.ErrBusy.
// distill.Run, student eval, student score and student rollout open through it; the env does
// not, answering 503 instead. An Opener that is already Patient is returned as it is.
func Patient(o Opener) Opener {
	if _, ok := o.(patientOpener); ok || o == nil {
		return o
	}
	return patientOpener{o}
}

// Open implements Opener: an open that fails with sandbox.ErrBusy (SQLite's first connection
// finding no file descriptor left) is tried again as a statement is (sandbox.RetryBusy, within
// sandbox.BusyPatience), not the task's database lost.
func (o patientOpener) Open(ctx context.Context, d datasets.Dialect, t datasets.Task) (sandbox.DB, error) {
	var db sandbox.DB
	err := sandbox.RetryBusy(ctx, sandbox.BusyPatience, func() error {
		var err error
		db, err = o.Opener.Open(ctx, d, t)
		return err
	})
	if err != nil {
		return nil, err
	}
	return sandbox.Patient(db, 0), nil
}
