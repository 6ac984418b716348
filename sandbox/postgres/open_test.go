package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// TestPostgresOpenContextError: an Open whose context is cancelled, or whose deadline passes
// while it waits for the only slot, returns the context's error, not sandbox.ErrBusy.
func TestPostgresOpenContextError(t *testing.T) {
	admin := sandboxtest.PGAdmin(t)
	ctx := context.Background()
	schemas := pgHostileSchemas(t, admin, 2)
	reader := pgHostileName("rd")
	sandboxtest.GrantReader(t, datasets.Postgres, reader, schemas...)
	eng := pgSlotsEngine(t, shared.PostgresDSN(), 1, sandbox.Access{Reader: reader})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := eng.Open(cctx, datasets.Task{ID: schemas[0], DBID: schemas[0]})
	if !errors.Is(err, context.Canceled) || errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("cancelled Open: %v; want context.Canceled, not ErrBusy", err)
	}
	db := pgOpen(t, eng, schemas[0])
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		db.run(ctx, time.Now(), "SELECT pg_catalog.pg_sleep(1)", 5*time.Second, sandbox.ExecOptions{})
	}()
	defer func() { <-ran }()
	time.Sleep(200 * time.Millisecond)
	dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer dcancel()
	_, err = eng.Open(dctx, datasets.Task{ID: schemas[1], DBID: schemas[1]})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("Open past its deadline while the slot is held: %v; want context.DeadlineExceeded, not ErrBusy", err)
	}
}
