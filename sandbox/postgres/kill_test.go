package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// TestPostgresControlAtConnectionLimit: the control connection is held for the life of the
// server handle, so that a statement's backend is still watched, and told gone, when the
// server has no login left for the reader. Left idle past a minute (when the control pool used
// to close it), the reader's logins then all taken (CONNECTION LIMIT 3, filled, and every login
// given back taken again at once), a statement
// (pg_sleep(60), on a connection already open) whose caller gives up is cancelled, its backend
// seen gone, its slot given back, and no runaway counted. Before, the control connection was
// closed, pg_stat_activity could not be read, and the backend, though cancelled, was counted
// a runaway holding its slot for as long as the logins stayed taken.
func TestPostgresControlAtConnectionLimit(t *testing.T) {
	admin := sandboxtest.PGAdmin(t)
	schemas := pgHostileSchemas(t, admin, 1)
	c, reader, dbs := pgHostileConnector(t, schemas)
	p := dbs[0].(*pgDB)
	closeIdle(t, p) // now, not a minute later, when their stops would use the control connection
	time.Sleep(time.Minute + 2*time.Second)
	if open := p.srv.ctl.Stats().OpenConnections; open != pgControlConns {
		t.Errorf("control pool: %d connections open after a minute idle, want %d", open, pgControlConns)
	}
	if r := sandboxtest.MustExec(t, p, "SELECT count(*) FROM t", sandbox.ExecOptions{}); !r.OK() {
		t.Fatalf("before filling: %+v", r)
	}
	if _, err := admin.Exec(fmt.Sprintf("ALTER ROLE %s CONNECTION LIMIT 3", reader)); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgExecConfig(context.Background(), shared.PostgresDSN(), sandbox.Access{Reader: reader})
	if err != nil {
		t.Fatal(err)
	}
	filler := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { filler.Close() })
	for i := 0; ; i++ {
		fc, err := filler.Conn(context.Background())
		if err == nil {
			err = fc.PingContext(context.Background())
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "53300" {
			t.Logf("the server refused the reader's connection %d: %v", i+1, err)
			break
		}
		if err != nil || i > 20 {
			t.Fatalf("filling the reader's connections (%d): %v, want the server's refusal", i+1, err)
		}
	}
	// As other clients at max_connections would, the filler takes every login given back (the
	// cancelled statement's, once its backend exits) before the control pool could.
	fillCtx, stopFill := context.WithCancel(context.Background())
	filled := make(chan struct{})
	defer func() { stopFill(); <-filled }()
	go func() {
		defer close(filled)
		for fillCtx.Err() == nil {
			if fc, err := filler.Conn(fillCtx); err == nil {
				if fc.PingContext(fillCtx) != nil {
					fc.Close()
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	r, err := p.Exec(ctx, "SELECT pg_catalog.pg_sleep(60) FROM t", sandbox.ExecOptions{Timeout: time.Minute})
	t.Logf("cancelled statement after %s: %+v, %v", time.Since(start), r, err)
	for len(p.srv.slots) != 0 {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%d slots still held %s after the start, runaways %+v: the cancelled backend was not seen gone", len(p.srv.slots), time.Since(start), c.Runaways(datasets.Postgres))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := c.Runaways(datasets.Postgres); got.Total != 0 {
		t.Errorf("runaways %+v, want none", got)
	}
	var n int
	if err := admin.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND query LIKE '%pg_sleep(60)%'", reader).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d backends of the reader still sleeping (%v), want none", n, err)
	}
}
