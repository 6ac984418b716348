package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// BusyPatience is how long a Patient DB keeps trying a statement that meets ErrBusy, from its
// first try: runaways end within seconds on SQLite (a server's may last longer: the screen
// refuses what is known to), and slots held longer fail the task as any database failure does.
const BusyPatience = 2 * time.Minute

// The waits of a Patient DB between tries: busyFirstWait, doubled each time, at most busyMaxWait.
const (
	busyFirstWait = 500 * time.Millisecond
	busyMaxWait   = 8 * time.Second
)

// patientDB is a DB whose Exec tries again while its statement meets ErrBusy (see Patient).
type patientDB struct {
	DB
	patience time.Duration
}

// Patient returns db with an Exec that, while the statement fails with ErrBusy (statements past
// their deadlines hold the engine's slots), tries it again after 0.5 s, 1 s, 2 s, … (at most 8 s
// a wait), each try with its own full time limit, until patience (BusyPatience when zero) has
// passed since the first; then it returns the last error, wrapped with the count of tries. The
// batch jobs (distill, student eval, student score, student rollout) run through it, so that a
// runaway of one episode costs another only time; the env answers 503 instead, and its client
// tries again. Each try has the same ExecOptions, RowFilter included: a caller whose filter keeps
// what it was told (one a failed try may have asked about rows, see RowFilter) takes the DB under
// it (Impatient) and tries again itself with a fresh filter, as the judge does. A db that is
// already Patient is returned as it is.
func Patient(db DB, patience time.Duration) DB {
	if _, ok := db.(*patientDB); ok || db == nil {
		return db
	}
	if patience <= 0 {
		patience = BusyPatience
	}
	return &patientDB{DB: db, patience: patience}
}

// Exec implements DB.
func (p *patientDB) Exec(ctx context.Context, query string, opts ExecOptions) (*Result, error) {
	var res *Result
	err := RetryBusy(ctx, p.patience, func() error {
		var err error
		res, err = p.DB.Exec(ctx, query, opts)
		return err
	})
	return res, err
}

// Impatient returns the DB under a Patient one and its patience, or db itself and 0. A caller
// that runs several statements within one time budget (the judge: a prediction and its gold)
// takes the DB under it and tries the whole again with RetryBusy, each try with a fresh budget,
// since a statement tried again by Patient has spent the budget of the statements after it.
func Impatient(db DB) (DB, time.Duration) {
	if p, ok := db.(*patientDB); ok {
		return p.DB, p.patience
	}
	return db, 0
}

// RetryBusy calls f until it returns nil or an error that is not ErrBusy, waiting 0.5 s, 1 s,
// 2 s, … (at most 8 s a wait) between calls, until patience (BusyPatience when zero) has passed
// since the first; then it returns the last error, wrapped with the count of tries.
func RetryBusy(ctx context.Context, patience time.Duration, f func() error) error {
	if patience <= 0 {
		patience = BusyPatience
	}
	first := time.Now()
	wait := busyFirstWait
	for tries := 1; ; tries++ {
		err := f()
		if err == nil || !errors.Is(err, ErrBusy) {
			return err
		}
		if time.Since(first)+wait > patience {
			return fmt.Errorf("%w (%d tries in %s)", err, tries, time.Since(first).Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (while waiting to try again: %w)", err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, busyMaxWait)
	}
}
