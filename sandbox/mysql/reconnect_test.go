package mysql

import (
	"context"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// TestMySQLKillersKilledByAdmin: an administrator kills every thread of the reader while no
// statement runs (the connections held for KILL and the database's idle one, as a server
// restart would). The next statement runs ok: the driver finds the idle connection's socket
// closed and dials another (it failed with "reset the session: invalid connection" while the
// share's wrappers hid the socket from the driver's check). A statement cancelled after that
// is still killed (database/sql dials the killers again), its thread gone within 5 s and no
// runaway counted.
func TestMySQLKillersKilledByAdmin(t *testing.T) {
	admin, reader, c, dbs := myHostileSetup(t, 1, 0)
	m := dbs[0].(*mysqlDB)
	if r := sandboxtest.MustExec(t, m, "SELECT count(*) FROM t", sandbox.ExecOptions{}); !r.OK() {
		t.Fatalf("before: %+v", r)
	}
	rows, err := admin.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ?", reader)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		if _, err := admin.Exec("KILL CONNECTION ?", id); err != nil {
			t.Logf("kill %d: %v", id, err)
		}
	}
	t.Logf("killed the reader's %d threads", len(ids))
	time.Sleep(200 * time.Millisecond)
	if r, err := m.Exec(context.Background(), "SELECT count(*) FROM t", sandbox.ExecOptions{}); err != nil || !r.OK() {
		t.Fatalf("first statement after the admin's kill: %+v, %v; want ok on a new connection", r, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	r, err := m.Exec(ctx, "SELECT /* rkill_admin */ SLEEP(60) FROM t", sandbox.ExecOptions{Timeout: time.Minute})
	t.Logf("cancelled statement after %s: %+v, %v", time.Since(start), r, err)
	myAwaitKilled(t, admin, reader, `%rkill\_admin%`, start)
	if got := c.Runaways(datasets.MySQL); got.Total != 0 {
		t.Errorf("runaways %+v, want none", got)
	}
	if n := m.runaways.Load(); n != 0 {
		t.Errorf("database's runaways %d, want 0", n)
	}
}

// TestMySQLOpenCloseNoLeak: a Connector opened and closed 8 times, a statement run each time,
// leaves none of the reader's connections on the server.
func TestMySQLOpenCloseNoLeak(t *testing.T) {
	admin, reader, c, _ := myHostileSetup(t, 1, 0)
	name := c.dbs[0].(*mysqlDB).database
	c.Close()
	sandboxtest.OpenCloseRounds(t, datasets.MySQL, shared.MySQLDSN(), reader, datasets.Task{ID: "task", DBID: name}, 8, func() int {
		all, _ := myThreads(t, admin, reader)
		return all
	})
}
