package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// busyDB fails its first busy executions with ErrBusy (or with fail, when set), then answers.
type busyDB struct {
	DB
	busy  int
	fail  error
	tries int
}

func (b *busyDB) Exec(ctx context.Context, q string, opts ExecOptions) (*Result, error) {
	b.tries++
	if b.tries <= b.busy {
		if b.fail != nil {
			return nil, b.fail
		}
		return nil, fmt.Errorf("test exec: %w: runaways hold the slots", ErrBusy)
	}
	return &Result{Outcome: OutcomeOK, Total: 1}, nil
}

// TestPatient: a Patient DB tries a statement that meets ErrBusy again after 0.5 s, then 1 s,
// and answers once it runs; it gives up with the last ErrBusy when the next wait would pass its
// patience, returns any other error at once, stops waiting when the context ends, and wraps
// a DB only once.
func TestPatient(t *testing.T) {
	ctx := context.Background()
	db := &busyDB{busy: 2}
	start := time.Now()
	res, err := Patient(db, time.Minute).Exec(ctx, "SELECT 1", ExecOptions{})
	if took := time.Since(start); err != nil || !res.OK() || db.tries != 3 || took < 1500*time.Millisecond || took > 3*time.Second {
		t.Fatalf("busy twice: %+v, %v after %d tries in %s; want the result on the third, after 1.5 s of waits", res, err, db.tries, took)
	}

	db = &busyDB{busy: 1 << 30}
	start = time.Now()
	res, err = Patient(db, 1200*time.Millisecond).Exec(ctx, "SELECT 1", ExecOptions{})
	if took := time.Since(start); !errors.Is(err, ErrBusy) || res != nil || db.tries != 2 || !strings.Contains(err.Error(), "2 tries") || took > 1200*time.Millisecond {
		t.Fatalf("busy throughout, patience 1.2 s: %+v, %v after %d tries in %s; want ErrBusy after 2 tries (a third would start past the patience)", res, err, db.tries, took)
	}

	lost := errors.New("connection lost")
	db = &busyDB{busy: 1, fail: lost}
	if _, err := Patient(db, time.Minute).Exec(ctx, "SELECT 1", ExecOptions{}); !errors.Is(err, lost) || db.tries != 1 {
		t.Fatalf("another error: %v after %d tries; want it at once", err, db.tries)
	}

	db = &busyDB{busy: 1 << 30}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := Patient(db, time.Minute).Exec(cctx, "SELECT 1", ExecOptions{}); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrBusy) || time.Since(start) > 400*time.Millisecond {
		t.Fatalf("context ended while waiting: %v after %s", err, time.Since(start))
	}

	p := Patient(db, 0)
	if Patient(p, time.Second) != p || p.(*patientDB).patience != BusyPatience {
		t.Error("a Patient DB wrapped again, or a zero patience not BusyPatience")
	}
}
