package mysql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/judge"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

func TestMySQLExec(t *testing.T) {
	admin := sandboxtest.MyAdmin(t)
	name := sandboxtest.MyDatabase(t, admin,
		`CREATE TABLE t (id BIGINT PRIMARY KEY, n DECIMAL(10,2), r FLOAT, d DOUBLE, day DATE,
			ts DATETIME, u BIGINT UNSIGNED, b LONGBLOB, s LONGTEXT, v VARCHAR(20), tm TIME)`,
		`INSERT INTO t VALUES (1, 12.50, 0.1, 2.5, '2009-01-03', '2009-01-03 04:05:06', 18446744073709551615, x'0102', 'x', 'é', '01:02:03'),
			(2, 7, NULL, NULL, NULL, NULL, 5, NULL, NULL, NULL, NULL), (3, 3, 1, 1, NULL, NULL, NULL, NULL, 'z', NULL, NULL)`)
	acc := sandboxtest.Reader(t, datasets.MySQL, name)
	db, err := Open(context.Background(), shared.MySQLDSN(), name, acc)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.Dialect() != datasets.MySQL || !(strings.HasPrefix(db.Version(), "MariaDB ") || strings.HasPrefix(db.Version(), "MySQL ")) {
		t.Errorf("dialect %s version %q", db.Dialect(), db.Version())
	}
	r := sandboxtest.MustExec(t, db, "SELECT id, n, r, d, day, ts, u, b, s, v, tm FROM t ORDER BY id", sandbox.ExecOptions{MaxRows: 2})
	if !r.OK() || r.Total != 3 || len(r.Rows) != 2 || !r.Truncated {
		t.Fatalf("caps: %+v", r)
	}
	want := []any{int64(1), sandbox.Decimal("12.50"), 0.1, 2.5, "2009-01-03", "2009-01-03 04:05:06",
		sandbox.Decimal("18446744073709551615"), []byte{1, 2}, "x", "é", "01:02:03"}
	for i := range want {
		got := r.Rows[0][i]
		if !sandboxtest.SameCell(got, want[i]) || fmt.Sprintf("%T", got) != fmt.Sprintf("%T", want[i]) {
			t.Errorf("column %s: %#v (%T), want %#v (%T)", r.Columns[i], got, got, want[i], want[i])
		}
	}
	if r.Rows[1][1] != sandbox.Decimal("7.00") || r.Rows[1][2] != nil || r.Rows[1][6] != int64(5) {
		t.Errorf("integral decimal / NULL / unsigned: %#v", r.Rows[1])
	}
	if r := sandboxtest.MustExec(t, db, "SELECT sum(n), avg(id), count(*) FROM t", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != sandbox.Decimal("22.50") || r.Rows[0][1] != sandbox.Decimal("2.0000") || r.Rows[0][2] != int64(3) {
		t.Errorf("aggregates: %+v", r)
	}
	if r := sandboxtest.MustExec(t, db, "SELECT nope FROM t", sandbox.ExecOptions{}); r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, "Unknown column 'nope'") {
		t.Errorf("engine error: %+v", r)
	}
	sandboxtest.CheckReadForms(t, db)
	sandboxtest.CheckFilter(t, db)
	start := time.Now()
	if r := sandboxtest.MustExec(t, db, "SELECT SLEEP(60)", sandbox.ExecOptions{Timeout: 500 * time.Millisecond}); r.Outcome != sandbox.OutcomeTimeout || time.Since(start) > sandboxtest.ReplyBy(500*time.Millisecond) {
		t.Errorf("SLEEP: %s after %s", r.Outcome, time.Since(start))
	}
	if r := sandboxtest.MustExec(t, db, "SELECT 1", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != int64(1) {
		t.Errorf("after timeout: %+v", r)
	}
	// A limit under the server's resolution still limits (0 would mean none).
	start = time.Now()
	if r := sandboxtest.MustExec(t, db, "SELECT SLEEP(5)", sandbox.ExecOptions{Timeout: time.Microsecond}); r.Outcome != sandbox.OutcomeTimeout || time.Since(start) > sandboxtest.ReplyBy(time.Microsecond) {
		t.Errorf("1µs limit: %s after %s", r.Outcome, time.Since(start))
	}
	for range 3 {
		if r := sandboxtest.MustExec(t, db, "SELECT 1", sandbox.ExecOptions{}); !r.OK() {
			t.Errorf("after a 1µs limit: %+v", r)
		}
	}
	if _, err := Open(context.Background(), shared.MySQLDSN(), name+"_missing", sandbox.Access{AsDSNUser: true}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing database: %v", err)
	}
}

// TestMySQLExactValues: a result holds what the server sent, as the mysql client prints it: a
// DECIMAL past float64's digits and a BIGINT UNSIGNED past int64 exactly (they were float64:
// 1e+35 and 1.8446744073709552e+19), zero dates as zero dates (the driver's time parsing made
// them 0001-01-01, and a zero month the month before), DATETIME fractions as declared. Match
// still equates them with the numbers and date texts they were compared as before.
func TestMySQLExactValues(t *testing.T) {
	admin := sandboxtest.MyAdmin(t)
	name := sandboxtest.MyDatabase(t, admin,
		`CREATE TABLE t (d DECIMAL(44,9), u BIGINT UNSIGNED, dt DATETIME, ts TIMESTAMP NULL, day DATE, f DATETIME(6), m DATETIME)`,
		`SET SESSION sql_mode = ''; INSERT INTO t VALUES (99999999999999999999999999999999999.123456789, 18446744073709551615,
			'0000-00-00 00:00:00', '0000-00-00 00:00:00', '2020-00-00', '2009-01-03 04:05:06.5', '2009-01-03 00:00:00')`)
	acc := sandboxtest.Reader(t, datasets.MySQL, name)
	db, err := Open(context.Background(), shared.MySQLDSN(), name, acc)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r := sandboxtest.MustExec(t, db, "SELECT d, u, dt, ts, day, f, m, d / 3, u - 1 FROM t", sandbox.ExecOptions{})
	if !r.OK() || len(r.Rows) != 1 {
		t.Fatalf("%+v", r)
	}
	want := []any{sandbox.Decimal("99999999999999999999999999999999999.123456789"), sandbox.Decimal("18446744073709551615"),
		"0000-00-00 00:00:00", "0000-00-00 00:00:00", "2020-00-00", "2009-01-03 04:05:06.500000", "2009-01-03 00:00:00",
		sandbox.Decimal("33333333333333333333333333333333333.0411522630000"), sandbox.Decimal("18446744073709551614")}
	for i, w := range want {
		if got := r.Rows[0][i]; got != w {
			t.Errorf("column %s: %#v (%T), want %#v (%T)", r.Columns[i], got, got, w, w)
		}
	}
	// Match compares the numbers a float64 holds as it did the float64s they were, those past
	// int64 by their exact digits (as Python's int and Decimal compare them), and the dates as
	// dates; a zero date is no longer 0001-01-01.
	was := []any{1e35 + 0.123456789, sandbox.Decimal("18446744073709551615.0"), "0000-00-00 00:00:00", "0000-00-00 00:00:00", "2020-00-00",
		time.Date(2009, 1, 3, 4, 5, 6, 5e8, time.UTC), time.Date(2009, 1, 3, 0, 0, 0, 0, time.UTC), 3.333333333333333e34, sandbox.Decimal("18446744073709551614")}
	for i, w := range was {
		if !judge.Match(cell(r.Rows[0][i]), cell(w), false) {
			t.Errorf("column %s: Match tells %#v from %#v", r.Columns[i], r.Rows[0][i], w)
		}
	}
	if judge.Match(cell(r.Rows[0][2]), cell(time.Time{}), false) {
		t.Errorf("Match equates a zero DATETIME with 0001-01-01")
	}
}

// cell is a result of one row of one value.
func cell(v any) *sandbox.Result {
	return &sandbox.Result{Outcome: sandbox.OutcomeOK, Rows: [][]any{{v}}, Total: 1}
}

// TestMySQLSlots: with every in-flight slot taken, an execution waits, and at its deadline
// fails with sandbox.ErrBusy, the database's failure (it never ran), not a timeout; freed slots
// let executions run again.
func TestMySQLSlots(t *testing.T) {
	name := sandboxtest.MyDatabase(t, sandboxtest.MyAdmin(t), "CREATE TABLE t (x INT)")
	db, err := Open(context.Background(), shared.MySQLDSN(), name, sandboxtest.Reader(t, datasets.MySQL, name))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := db.(*mysqlDB)
	for range cap(m.srv.slots) {
		m.srv.slots <- struct{}{}
	}
	start := time.Now()
	r, err := db.Exec(context.Background(), "SELECT 1", sandbox.ExecOptions{Timeout: 100 * time.Millisecond})
	if !errors.Is(err, sandbox.ErrBusy) || r != nil || time.Since(start) < 100*time.Millisecond || time.Since(start) > time.Second {
		t.Errorf("slots taken: %+v, %v after %s; want sandbox.ErrBusy at the deadline", r, err, time.Since(start))
	}
	for range cap(m.srv.slots) {
		<-m.srv.slots
	}
	if r := sandboxtest.MustExec(t, db, "SELECT 1", sandbox.ExecOptions{}); !r.OK() || len(m.srv.slots) != 0 {
		t.Errorf("slot free: %+v, %d slots held after", r, len(m.srv.slots))
	}
}

// TestMySQLLongStatement: a statement past sandbox.MaxStatement is refused unsent; a 20 MiB one,
// past MariaDB's max_allowed_packet, had the server reset the connection, the database's failure
// on every try.
func TestMySQLLongStatement(t *testing.T) {
	admin := sandboxtest.MyAdmin(t)
	name := sandboxtest.MyDatabase(t, admin, `CREATE TABLE t (id BIGINT PRIMARY KEY)`)
	acc := sandboxtest.Reader(t, datasets.MySQL, name)
	db, err := Open(context.Background(), shared.MySQLDSN(), name, acc)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, n := range []int{sandbox.MaxStatement, 20 << 20} {
		r, err := db.Exec(context.Background(), "SELECT '"+strings.Repeat("x", n)+"'", sandbox.ExecOptions{})
		if err != nil || r.Outcome != sandbox.OutcomeRefused || !strings.Contains(r.Error, "bytes long") {
			t.Errorf("%d bytes: %+v, %v", n, r, err)
		}
	}
	if r := sandboxtest.MustExec(t, db, "SELECT '"+strings.Repeat("x", sandbox.MaxStatement-10)+"'", sandbox.ExecOptions{}); !r.OK() {
		t.Errorf("just under the limit: %+v", r)
	}
}

// TestMySQLNoCompression: a DSN asking for compression gets none (the result limit counts bytes
// on the wire, see mysqlConfig); the server says so for the execution's own session.
func TestMySQLNoCompression(t *testing.T) {
	name := sandboxtest.MyDatabase(t, sandboxtest.MyAdmin(t), "CREATE TABLE t (x INT)")
	db, err := Open(context.Background(), shared.MySQLDSN()+"?compress=true", name, sandboxtest.Reader(t, datasets.MySQL, name))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err := unscreened(context.Background(), db, "SHOW SESSION STATUS LIKE 'Compression'", 10*time.Second, 0)
	if err != nil || !r.OK() || len(r.Rows) != 1 || r.Rows[0][1] != "OFF" {
		t.Errorf("the session's compression: %+v, %v; want OFF", r, err)
	}
}

// myWaitDB opens a database of t(x) = 1, 2, 3 with a server share of its own.
func myWaitDB(t *testing.T) *mysqlDB {
	t.Helper()
	name := sandboxtest.MyDatabase(t, sandboxtest.MyAdmin(t), "CREATE TABLE t (x INT); INSERT INTO t VALUES (1), (2), (3)")
	db, err := Open(context.Background(), shared.MySQLDSN(), name, sandboxtest.Reader(t, datasets.MySQL, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db.(*mysqlDB)
}

// TestMySQLNoWaitTold: executions that find a slot and a connection free at once, on a pooled
// connection or a new one (after a statement whose session state closes its own), one at a
// time or several together below the caps, never call ExecOptions.Waiting; before, every
// execution told a wait of its connection's setup, which the judge's pair clock took off its
// running time.
func TestMySQLNoWaitTold(t *testing.T) {
	m := myWaitDB(t)
	ctx := context.Background()
	var log sandboxtest.WaitLog
	opts := sandbox.ExecOptions{Waiting: log.Tell}
	for _, q := range []string{"SELECT count(*) FROM t", "SELECT @v", "SELECT count(*) FROM t", "SELECT x FROM t"} {
		if r, err := m.Exec(ctx, q, opts); err != nil || !r.OK() {
			t.Fatalf("%s: %+v, %v", q, r, err)
		}
	}
	sandboxtest.CheckNoWaitTold(t, m, min(4, cap(m.srv.slots), cap(m.open)), "SELECT SLEEP(0.2)", &log)
}

// TestMySQLWaitTold: an execution that has to wait, for a slot (all held), for a unit of its
// database's connections (all taken) or for a unit of the share to dial (the share full),
// tells Waiting true and then, once the wait ends, false, once each, and then runs.
func TestMySQLWaitTold(t *testing.T) {
	m := myWaitDB(t)
	const hold = 300 * time.Millisecond
	run := func(t *testing.T, take, give func()) { sandboxtest.CheckWaitTold(t, m, hold, take, give) }
	t.Run("slot", func(t *testing.T) {
		run(t, func() {
			for range cap(m.srv.slots) {
				m.srv.slots <- struct{}{}
			}
		}, func() {
			for range cap(m.srv.slots) {
				<-m.srv.slots
			}
		})
	})
	t.Run("connection", func(t *testing.T) {
		run(t, func() {
			for range cap(m.open) {
				m.open <- struct{}{}
			}
		}, func() {
			for range cap(m.open) {
				<-m.open
			}
		})
	})
	t.Run("share", func(t *testing.T) {
		// No idle connection in the pool, none open: the execution dials, in a full share.
		m.pool.SetMaxIdleConns(0)
		m.pool.SetMaxIdleConns(mysqlIdlePerDB)
		for deadline := time.Now().Add(5 * time.Second); m.srv.conns.inUse() != 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections of the share still counted", m.srv.conns.inUse())
			}
		}
		run(t, func() {
			for range m.srv.conns.limit {
				m.srv.conns.force()
			}
		}, func() {
			for range m.srv.conns.limit {
				m.srv.conns.release()
			}
		})
	})
}

// slowCloseConn is a connection whose Close takes *slow (read when Close is called) and says
// on closing that it has begun.
type slowCloseConn struct {
	net.Conn
	slow    *atomic.Int64
	closing chan<- struct{}
}

func (c slowCloseConn) Close() error {
	if d := time.Duration(c.slow.Load()); d > 0 {
		select {
		case c.closing <- struct{}{}:
		default:
		}
		time.Sleep(d)
	}
	return c.Conn.Close()
}

// TestMySQLIdleClosingWaitTold: an execution that finds its database's pool with no idle
// connection because one is being closed from another goroutine (closeIdle, run by another
// database's dial in a full share; the pool's idle cleaner alike), whose unit of the share the
// closing connection still holds, dials in the full share and tells its wait, which ends by its
// deadline (then ErrBusy) or once the close gives the unit back. Before, the pool's
// MaxOpenConns, at which database/sql still counted the closing connection, had it wait inside
// database/sql untold, and a replacement dialled by database/sql's own opener without its
// deadline: an Exec with a 500 ms timeout failed ErrBusy with nothing told (found by a review).
func TestMySQLIdleClosingWaitTold(t *testing.T) {
	name := sandboxtest.MyDatabase(t, sandboxtest.MyAdmin(t), "CREATE TABLE t (x INT); INSERT INTO t VALUES (1), (2), (3)")
	ctx := context.Background()
	eng, err := Dialect{share: mysqlKillers + 1}.Connect(ctx, &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.MySQL: shared.MySQLDSN()}, Access: sandboxtest.Reader(t, datasets.MySQL, name)})
	if err != nil {
		t.Fatal(err)
	}
	e := eng.(*mysqlEngine)
	defer e.Close()
	var slow atomic.Int64
	closing := make(chan struct{}, 1)
	e.cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return slowCloseConn{Conn: c, slow: &slow, closing: closing}, nil
	}
	db, err := e.Open(ctx, datasets.Task{ID: "task", DBID: name})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := db.(*mysqlDB)
	if m.srv.limit != 1 {
		t.Fatalf("a share of %d connections for statements, want 1", m.srv.limit)
	}
	for _, c := range []struct {
		close   time.Duration // how long the idle connection's Close takes
		timeout time.Duration
		busy    bool
	}{{1500 * time.Millisecond, 500 * time.Millisecond, true}, {700 * time.Millisecond, 5 * time.Second, false}} {
		// One idle connection, holding the share's one unit.
		if r := sandboxtest.MustExec(t, m, "SELECT 1", sandbox.ExecOptions{}); !r.OK() || m.srv.conns.inUse() != 1 {
			t.Fatalf("SELECT 1: %+v, %d units of the share in use; want ok, 1", r, m.srv.conns.inUse())
		}
		slow.Store(int64(c.close))
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			m.srv.closeIdle()
		}()
		<-closing
		slow.Store(0)
		var log sandboxtest.WaitLog
		start := time.Now()
		r, err := m.Exec(ctx, "SELECT count(*) FROM t", sandbox.ExecOptions{Timeout: c.timeout, Waiting: log.Tell})
		took := time.Since(start)
		switch {
		case c.busy && (!errors.Is(err, sandbox.ErrBusy) || took > c.timeout+mysqlWaitGrace+300*time.Millisecond):
			t.Errorf("idle connection closing for %s, timeout %s: %+v, %v after %s; want ErrBusy by %s", c.close, c.timeout, r, err, took, c.timeout+mysqlWaitGrace)
		case !c.busy && (err != nil || !r.OK() || r.Rows[0][0] != int64(3)):
			t.Errorf("idle connection closing for %s, timeout %s: %+v, %v after %s; want ok, 3", c.close, c.timeout, r, err, took)
		}
		if got := log.String(); got != "[true false]" {
			t.Errorf("idle connection closing for %s, timeout %s: Waiting told %s after %s, want [true false]", c.close, c.timeout, got, took)
		}
		<-closed
	}
}
