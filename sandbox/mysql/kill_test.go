package mysql

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// myReaderPool opens a pool logged in as reader, outside any share, closed when the test ends.
func myReaderPool(t *testing.T, reader string) *sql.DB {
	t.Helper()
	cfg, err := mysqlExecConfig(context.Background(), shared.MySQLDSN(), sandbox.Access{Reader: reader})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool := sql.OpenDB(conn)
	t.Cleanup(func() { pool.Close() })
	return pool
}

// myFillReader limits the reader's accounts to 3 connections (MAX_USER_CONNECTIONS, counted
// from now on) and opens new ones as the reader until the server refuses one, holding them
// until the test ends: the server has no login left for the reader, as at max_connections.
func myFillReader(t *testing.T, admin *sql.DB, reader string) {
	t.Helper()
	myLimitReader(t, admin, reader, "MAX_USER_CONNECTIONS 3")
	filler := myReaderPool(t, reader)
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

// myAwaitKilled waits until no thread of reader runs a statement LIKE like, failing the test
// when one still does 5 s after start (KILL did not reach it).
func myAwaitKilled(t *testing.T, admin *sql.DB, reader, like string, start time.Time) {
	t.Helper()
	for {
		var n int
		if err := admin.QueryRow("SELECT count(*) FROM information_schema.PROCESSLIST WHERE USER = ? AND INFO LIKE ?", reader, like).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the cancelled statement's thread still runs %s after its start: KILL did not reach it", time.Since(start))
		}
		time.Sleep(50 * time.Millisecond)
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
	myAwaitKilled(t, admin, reader, `%kill\_at\_max%`, start)
	t.Logf("the thread was gone %s after the start", time.Since(start))
	if got := c.Runaways(datasets.MySQL); got.Total != 0 {
		t.Errorf("runaways %+v, want none", got)
	}
}

// TestMySQLRunawaysPerDB: a database with mysqlRunawaysPerDB runaway threads refuses its new
// statements with sandbox.ErrBusy at once, naming them, while another database of the same
// share still runs; once they end it runs again. The runaways are two real threads of the
// reader (SLEEP(3) on connections of their own) counted for the first database as run counts
// a thread that outlived its KILL: before, one database's runaways were capped only by the
// whole share, which one task's statements could fill.
func TestMySQLRunawaysPerDB(t *testing.T) {
	_, reader, c, dbs := myHostileSetup(t, 2, 0)
	m := dbs[0].(*mysqlDB)
	sleepers := myReaderPool(t, reader)
	sleepers.SetMaxIdleConns(0) // a sleeper's thread leaves the server with its statement, as a killed one
	done := make(chan error, mysqlRunawaysPerDB)
	for range mysqlRunawaysPerDB {
		sc, err := sleepers.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		th := myThread(t, sc)
		go func() {
			_, err := sc.ExecContext(context.Background(), "SELECT SLEEP(3)")
			sc.Close()
			done <- err
		}()
		// As run does for a thread that outlived its KILL: a slot and a unit of the share held.
		m.srv.slots <- struct{}{}
		m.srv.conns.force()
		m.srv.runaway(th, func() { <-m.srv.slots }, &m.runaways)
	}
	start := time.Now()
	r, err := m.Exec(context.Background(), "SELECT count(*) FROM t", sandbox.ExecOptions{Timeout: 2 * time.Second})
	t.Logf("beside %d runaways, after %s: %v", mysqlRunawaysPerDB, time.Since(start), err)
	if !errors.Is(err, sandbox.ErrBusy) || r != nil || !strings.Contains(err.Error(), "runaways") || time.Since(start) > time.Second {
		t.Errorf("a statement of a database with %d runaways: %+v, %v after %s; want sandbox.ErrBusy naming them at once", mysqlRunawaysPerDB, r, err, time.Since(start))
	}
	if r := sandboxtest.MustExec(t, dbs[1], "SELECT count(*) FROM t", sandbox.ExecOptions{}); !r.OK() {
		t.Errorf("another database of the share: %+v, want it to run", r)
	}
	for range mysqlRunawaysPerDB {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for m.runaways.Load() != 0 || c.Runaways(datasets.MySQL).Running != 0 {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("runaways still counted %s after the start: %d of the database, %+v", time.Since(start), m.runaways.Load(), c.Runaways(datasets.MySQL))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := sandboxtest.MustExec(t, m, "SELECT count(*) FROM t", sandbox.ExecOptions{}); !r.OK() || len(m.srv.slots) != 0 {
		t.Errorf("after the runaways ended: %+v, %d slots held", r, len(m.srv.slots))
	}
}

// myThread is the server thread of conn, its id and the server's start, as connID reads them.
func myThread(t *testing.T, conn *sql.Conn) mysqlThread {
	t.Helper()
	var th mysqlThread
	if err := conn.QueryRowContext(context.Background(), "SELECT CONNECTION_ID(), "+mysqlServerStart).Scan(&th.id, &th.serverStart); err != nil || th.serverStart == 0 {
		t.Fatalf("the thread's id and the server's start: %v (start %d)", err, th.serverStart)
	}
	return th
}

// TestMySQLRunawayAfterRestart: the runaway watcher tells a thread by its id and the server's
// start, so that a thread that took a runaway's id after a server restart is not counted as it.
// A restart is simulated by the recorded identity: a runaway recorded on a server that started an
// hour before this one, whose id a live idle connection now holds, is let go within a few polls
// (by id alone it stayed counted, with its slot, its unit of the share and one of its database's
// mysqlRunawaysPerDB, for as long as that connection lived); one recorded with its true identity
// stays counted while its thread lives, and is let go once it has left.
func TestMySQLRunawayAfterRestart(t *testing.T) {
	_, reader, _, dbs := myHostileSetup(t, 1, 0)
	m := dbs[0].(*mysqlDB)
	pool := myReaderPool(t, reader)
	pool.SetMaxIdleConns(0)
	held, err := pool.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	th := myThread(t, held)
	if start := m.srv.serverStart(context.Background()); start != th.serverStart {
		t.Errorf("serverStart: %d; want the server's start %d", start, th.serverStart)
	}
	watch := func(th mysqlThread) {
		// As run does for a thread that outlived its KILL: a slot and a unit of the share held.
		m.srv.slots <- struct{}{}
		m.srv.conns.force()
		m.srv.runaway(th, func() { <-m.srv.slots }, &m.runaways)
	}
	counted := func(within time.Duration) bool {
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if m.runaways.Load() == 0 {
				return false
			}
		}
		return true
	}
	watch(mysqlThread{id: th.id, serverStart: th.serverStart - 3600})
	if counted(8 * mysqlRunawayPoll) {
		t.Fatalf("a runaway recorded on a server started an hour earlier, its id now a live idle connection's: still counted after %s (%d of the database, %d slots held)",
			8*mysqlRunawayPoll, m.runaways.Load(), len(m.srv.slots))
	}
	watch(th)
	if !counted(8 * mysqlRunawayPoll) {
		t.Fatalf("a runaway recorded with its true identity, its thread alive: let go within %s", 8*mysqlRunawayPoll)
	}
	held.Close() // no idle connections kept: the thread leaves the server
	if counted(8 * mysqlRunawayPoll) {
		t.Errorf("the runaway's thread gone: still counted after %s", 8*mysqlRunawayPoll)
	}
	if len(m.srv.slots) != 0 {
		t.Errorf("%d slots held after the runaways were let go", len(m.srv.slots))
	}
}

// TestMySQLRunawaysAfterWait: a statement that passed the per-database runaway cap at its start
// and waited for a slot while its database's runaways reached the cap does not run either
// (sandbox.ErrBusy): before, every statement queued for a slot before the cap was reached ran
// once it got one, so that one task's statements could fill the share with runaways.
func TestMySQLRunawaysAfterWait(t *testing.T) {
	_, _, _, dbs := myHostileSetup(t, 1, 0)
	m := dbs[0].(*mysqlDB)
	t.Cleanup(func() {
		m.runaways.Store(0)
		for len(m.srv.slots) > 0 {
			<-m.srv.slots
		}
	})
	sandboxtest.CheckRunawaysAfterWait(t, m, func() {
		for range cap(m.srv.slots) {
			m.srv.slots <- struct{}{}
		}
	}, func() {
		m.runaways.Store(mysqlRunawaysPerDB)
		<-m.srv.slots
	})
}

// TestMySQLRunawaysAfterDialWait: as TestMySQLRunawaysAfterWait, with the slot free and the
// wait in the dial of a new connection, every unit of the run's share held (no idle connection
// to take): runaways that came meanwhile refuse the statement too.
func TestMySQLRunawaysAfterDialWait(t *testing.T) {
	_, _, _, dbs := myHostileSetup(t, 1, 0)
	m := dbs[0].(*mysqlDB)
	forced := 0
	t.Cleanup(func() {
		m.runaways.Store(0)
		for ; forced > 0; forced-- {
			m.srv.conns.release()
		}
	})
	sandboxtest.CheckRunawaysAfterWait(t, m, func() {
		m.pool.SetMaxIdleConns(0) // no idle connection: the statement dials
		for deadline := time.Now().Add(5 * time.Second); m.srv.conns.inUse() > 0 || m.pool.Stats().OpenConnections > 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the share still holds %d connections", m.srv.conns.inUse())
			}
		}
		for m.srv.conns.inUse() < m.srv.conns.limit {
			m.srv.conns.force()
			forced++
		}
	}, func() {
		m.runaways.Store(mysqlRunawaysPerDB)
		m.srv.conns.release()
		forced--
	})
}
