package mysql

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// myFillReader limits the reader's accounts to 3 connections (MAX_USER_CONNECTIONS, counted
// from now on) and opens new ones as the reader until the server refuses one, holding them
// until the test ends: the server has no login left for the reader, as at max_connections.
func myFillReader(t *testing.T, admin *sql.DB, reader string) {
	t.Helper()
	myLimitReader(t, admin, reader, "MAX_USER_CONNECTIONS 3")
	cfg, err := mysqlExecConfig(context.Background(), shared.MySQLDSN(), sandbox.Access{Reader: reader})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	filler := sql.OpenDB(conn)
	t.Cleanup(func() { filler.Close() })
	for i := 0; ; i++ {
		c, err := filler.Conn(context.Background())
		if err == nil {
			err = c.PingContext(context.Background())
		}
		if err != nil {
			if !mysqlServerFull[myErrNo(err)] {
				t.Fatalf("filling the reader's connections: %v, want the server's refusal", err)
			}
			t.Logf("the server refused the reader's connection %d: %v", i+1, err)
			return
		}
		if i > 20 {
			t.Fatal("the server took 20 connections of a reader limited to 3")
		}
	}
}

// TestMySQLKillAtMaxConnections: the connections kept for KILL are held for the life of the
// server handle, so that a statement is still stopped when the server has no login left for
// the reader. Left idle past mysqlIdleTime (when the killer pool used to close them), the
// reader's logins then all taken, a statement (SLEEP(60), on a connection already open) whose
// caller gives up is killed: its thread is gone from the server within a second or two, and
// no runaway is counted. Before, the killer pool had closed its idle connection, KILL could
// not log in, and the thread slept on for its whole minute, counted as a runaway.
func TestMySQLKillAtMaxConnections(t *testing.T) {
	admin, reader, c, dbs := myHostileSetup(t, 1, 0)
	m := dbs[0].(*mysqlDB)
	if open := m.srv.killer.Stats().OpenConnections; open != mysqlKillers {
		t.Errorf("killer pool: %d connections open at the start, want %d", open, mysqlKillers)
	}
	time.Sleep(mysqlIdleTime + 2*time.Second)
	if open := m.srv.killer.Stats().OpenConnections; open != mysqlKillers {
		t.Errorf("killer pool: %d connections open after %s idle, want %d", open, mysqlIdleTime+2*time.Second, mysqlKillers)
	}
	if r := sandboxtest.MustExec(t, m, "SELECT count(*) FROM t", sandbox.ExecOptions{}); !r.OK() {
		t.Fatalf("before filling: %+v", r)
	}
	myFillReader(t, admin, reader)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	r, err := m.Exec(ctx, "SELECT /* kill_at_max */ SLEEP(60) FROM t", sandbox.ExecOptions{Timeout: time.Minute})
	t.Logf("cancelled statement after %s: %+v, %v", time.Since(start), r, err)
	if err == nil {
		t.Errorf("cancelled statement: %+v, want the context's error", r)
	}
	for {
		var n int
		if err := admin.QueryRow("SELECT count(*) FROM information_schema.PROCESSLIST WHERE USER = ? AND INFO LIKE '%kill\\_at\\_max%'", reader).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the cancelled statement's thread still runs %s after its start: KILL did not reach it", time.Since(start))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the thread was gone %s after the start", time.Since(start))
	if got := c.Runaways(datasets.MySQL); got.Total != 0 {
		t.Errorf("runaways %+v, want none", got)
	}
}
