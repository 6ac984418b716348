package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
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
	want := []any{int64(1), 12.5, 0.1, 2.5, time.Date(2009, 1, 3, 0, 0, 0, 0, time.UTC), time.Date(2009, 1, 3, 4, 5, 6, 0, time.UTC),
		float64(18446744073709551615), []byte{1, 2}, "x", "é", "01:02:03"}
	for i := range want {
		got := r.Rows[0][i]
		if !sandboxtest.SameCell(got, want[i]) || fmt.Sprintf("%T", got) != fmt.Sprintf("%T", want[i]) {
			t.Errorf("column %s: %#v (%T), want %#v (%T)", r.Columns[i], got, got, want[i], want[i])
		}
	}
	if r.Rows[1][1] != int64(7) || r.Rows[1][2] != nil || r.Rows[1][6] != int64(5) {
		t.Errorf("integral decimal / NULL / unsigned: %#v", r.Rows[1])
	}
	if r := sandboxtest.MustExec(t, db, "SELECT sum(n), avg(id), count(*) FROM t", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != 22.5 || r.Rows[0][1] != int64(2) || r.Rows[0][2] != int64(3) {
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
