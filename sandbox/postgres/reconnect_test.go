package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// TestPostgresControlTerminatedByAdmin: an administrator terminates every backend of the
// reader while no statement runs (the held control connection and the idle statement one).
// The next statement (a second later: pgx pings a connection idle that long before its reuse)
// runs ok, and a statement cancelled after that is still stopped: its slot
// given back within 5 s, no runaway counted (the control connection dialled again).
func TestPostgresControlTerminatedByAdmin(t *testing.T) {
	admin := sandboxtest.PGAdmin(t)
	schemas := pgHostileSchemas(t, admin, 1)
	c, reader, dbs := pgHostileConnector(t, schemas)
	p := dbs[0].(*pgDB)
	if r := sandboxtest.MustExec(t, p, "SELECT count(*) FROM t", sandbox.ExecOptions{}); !r.OK() {
		t.Fatalf("before: %+v", r)
	}
	var n int
	if err := admin.QueryRow("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = $1", reader).Scan(&n); err != nil {
		t.Fatal(err)
	}
	t.Logf("terminated the reader's %d backends", n)
	time.Sleep(1200 * time.Millisecond) // pgx pings a connection idle over a second before reuse
	if r, err := p.Exec(context.Background(), "SELECT count(*) FROM t", sandbox.ExecOptions{}); err != nil || !r.OK() {
		t.Errorf("first statement after the admin's terminate: %+v, %v; want ok on a new connection", r, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	r, err := p.Exec(ctx, "SELECT pg_catalog.pg_sleep(60) FROM t", sandbox.ExecOptions{Timeout: time.Minute})
	t.Logf("cancelled statement after %s: %+v, %v", time.Since(start), r, err)
	closeIdle(t, p) // the slots all given back within 5 s
	if got := c.Runaways(datasets.Postgres); got.Total != 0 || p.runaways.Load() != 0 {
		t.Errorf("runaways %+v (schema %d), want none", got, p.runaways.Load())
	}
}

// TestPostgresOpenCloseNoLeak: a Connector opened and closed 8 times, a statement run each
// time, leaves no backend of the reader on the server.
func TestPostgresOpenCloseNoLeak(t *testing.T) {
	admin := sandboxtest.PGAdmin(t)
	schemas := pgHostileSchemas(t, admin, 1)
	c0, reader, _ := pgHostileConnector(t, schemas)
	c0.Close()
	sandboxtest.OpenCloseRounds(t, datasets.Postgres, shared.PostgresDSN(), reader, datasets.Task{ID: schemas[0], DBID: schemas[0]}, 8, func() int {
		var n int
		if err := admin.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE usename = $1", reader).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	})
}
