package sandbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// myAdmin opens the test MariaDB/MySQL server (no database) for setup and checks.
func myAdmin(t testing.TB) *sql.DB {
	t.Helper()
	shared.SkipServers(t)
	cfg, err := mysqlConfig(shared.MySQLDSN(), "")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MultiStatements = true
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	if err := db.Ping(); err != nil {
		db.Close()
		t.Fatalf("MySQL/MariaDB at %s is not reachable (start it, or set CHAINEDSQL_NO_SERVERS=1): %v", cfg.Addr, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// myDatabase creates a fresh database, runs setup in it, and drops it when the test ends.
func myDatabase(t testing.TB, admin *sql.DB, setup ...string) string {
	t.Helper()
	name := srvName("cs_my")
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE " + name) })
	for _, s := range setup {
		if _, err := admin.Exec("USE " + name + "; " + s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return name
}

func TestMySQLExec(t *testing.T) {
	admin := myAdmin(t)
	name := myDatabase(t, admin,
		`CREATE TABLE t (id BIGINT PRIMARY KEY, n DECIMAL(10,2), r FLOAT, d DOUBLE, day DATE,
			ts DATETIME, u BIGINT UNSIGNED, b LONGBLOB, s LONGTEXT, v VARCHAR(20), tm TIME)`,
		`INSERT INTO t VALUES (1, 12.50, 0.1, 2.5, '2009-01-03', '2009-01-03 04:05:06', 18446744073709551615, x'0102', 'x', 'é', '01:02:03'),
			(2, 7, NULL, NULL, NULL, NULL, 5, NULL, NULL, NULL, NULL), (3, 3, 1, 1, NULL, NULL, NULL, NULL, 'z', NULL, NULL)`)
	acc := testReader(t, datasets.MySQL, name)
	db, err := OpenMySQL(context.Background(), shared.MySQLDSN(), name, acc)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.Dialect() != datasets.MySQL || !(strings.HasPrefix(db.Version(), "MariaDB ") || strings.HasPrefix(db.Version(), "MySQL ")) {
		t.Errorf("dialect %s version %q", db.Dialect(), db.Version())
	}
	r := mustExec(t, db, "SELECT id, n, r, d, day, ts, u, b, s, v, tm FROM t ORDER BY id", ExecOptions{MaxRows: 2})
	if !r.OK() || r.Total != 3 || len(r.Rows) != 2 || !r.Truncated {
		t.Fatalf("caps: %+v", r)
	}
	want := []any{int64(1), 12.5, 0.1, 2.5, time.Date(2009, 1, 3, 0, 0, 0, 0, time.UTC), time.Date(2009, 1, 3, 4, 5, 6, 0, time.UTC),
		float64(18446744073709551615), []byte{1, 2}, "x", "é", "01:02:03"}
	for i := range want {
		got := r.Rows[0][i]
		if !sameCell(got, want[i]) || fmt.Sprintf("%T", got) != fmt.Sprintf("%T", want[i]) {
			t.Errorf("column %s: %#v (%T), want %#v (%T)", r.Columns[i], got, got, want[i], want[i])
		}
	}
	if r.Rows[1][1] != int64(7) || r.Rows[1][2] != nil || r.Rows[1][6] != int64(5) {
		t.Errorf("integral decimal / NULL / unsigned: %#v", r.Rows[1])
	}
	if r := mustExec(t, db, "SELECT sum(n), avg(id), count(*) FROM t", ExecOptions{}); !r.OK() || r.Rows[0][0] != 22.5 || r.Rows[0][1] != int64(2) || r.Rows[0][2] != int64(3) {
		t.Errorf("aggregates: %+v", r)
	}
	if r := mustExec(t, db, "SELECT nope FROM t", ExecOptions{}); r.Outcome != OutcomeError || !strings.Contains(r.Error, "Unknown column 'nope'") {
		t.Errorf("engine error: %+v", r)
	}
	checkReadForms(t, db)
	start := time.Now()
	if r := mustExec(t, db, "SELECT SLEEP(60)", ExecOptions{Timeout: 500 * time.Millisecond}); r.Outcome != OutcomeTimeout || time.Since(start) > 2*time.Second {
		t.Errorf("SLEEP: %s after %s", r.Outcome, time.Since(start))
	}
	if r := mustExec(t, db, "SELECT 1", ExecOptions{}); !r.OK() || r.Rows[0][0] != int64(1) {
		t.Errorf("after timeout: %+v", r)
	}
	// A limit under the server's resolution still limits (0 would mean none).
	start = time.Now()
	if r := mustExec(t, db, "SELECT SLEEP(5)", ExecOptions{Timeout: time.Microsecond}); r.Outcome != OutcomeTimeout || time.Since(start) > 2*time.Second {
		t.Errorf("1µs limit: %s after %s", r.Outcome, time.Since(start))
	}
	for range 3 {
		if r := mustExec(t, db, "SELECT 1", ExecOptions{}); !r.OK() {
			t.Errorf("after a 1µs limit: %+v", r)
		}
	}
	if _, err := OpenMySQL(context.Background(), shared.MySQLDSN(), name+"_missing", Access{AsDSNUser: true}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing database: %v", err)
	}
}

func TestConnectorServers(t *testing.T) {
	my := myDatabase(t, myAdmin(t), "CREATE TABLE t (x INT)", "INSERT INTO t VALUES (1), (2)")
	pg := pgSchema(t, pgAdmin(t), "CREATE TABLE t (x int)", "INSERT INTO t VALUES (1), (2), (3)")
	reader := testReaderName()
	grantReader(t, datasets.MySQL, reader, my)
	grantReader(t, datasets.Postgres, reader, pg)
	c := &Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN(), datasets.MySQL: shared.MySQLDSN()}, Access: Access{Reader: reader}}
	defer c.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		d    datasets.Dialect
		db   string
		want int64
	}{{datasets.MySQL, my, 2}, {datasets.Postgres, pg, 3}} {
		task := datasets.Task{ID: "t-" + string(tc.d), DBID: tc.db}
		a, err := c.Open(ctx, tc.d, task)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Open(ctx, tc.d, task)
		if err != nil || a != b {
			t.Fatalf("%s: second open: %v, same DB %v", tc.d, err, a == b)
		}
		if r := mustExec(t, a, "SELECT count(*) FROM t", ExecOptions{}); !r.OK() || r.Rows[0][0] != tc.want {
			t.Errorf("%s: %+v", tc.d, r)
		}
		if _, err := c.Open(ctx, tc.d, datasets.Task{ID: "t-missing", DBID: tc.db + "_missing"}); err == nil || !strings.Contains(err.Error(), "t-missing") {
			t.Errorf("%s: missing database: %v", tc.d, err)
		}
	}
	var none Connector
	if _, err := none.Open(ctx, datasets.Postgres, datasets.Task{ID: "x", DBID: "y"}); err == nil || !strings.Contains(err.Error(), "no postgres DSN") {
		t.Errorf("no DSN: %v", err)
	}
	if _, err := none.Open(ctx, datasets.Dialect("oracle"), datasets.Task{ID: "x", DBID: "y"}); err == nil || !strings.Contains(err.Error(), "unknown dialect") {
		t.Errorf("unknown dialect: %v", err)
	}
}

// TestMySQLSlots: with every in-flight slot taken, an execution waits, and at its deadline
// reports a timeout rather than an error; freed slots let executions run again.
func TestMySQLSlots(t *testing.T) {
	name := myDatabase(t, myAdmin(t), "CREATE TABLE t (x INT)")
	db, err := OpenMySQL(context.Background(), shared.MySQLDSN(), name, testReader(t, datasets.MySQL, name))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := db.(*mysqlDB)
	for range cap(m.srv.slots) {
		m.srv.slots <- struct{}{}
	}
	start := time.Now()
	r := mustExec(t, db, "SELECT 1", ExecOptions{Timeout: 100 * time.Millisecond})
	if r.Outcome != OutcomeTimeout || time.Since(start) > time.Second {
		t.Errorf("slots taken: %s after %s", r.Outcome, time.Since(start))
	}
	for range cap(m.srv.slots) {
		<-m.srv.slots
	}
	if r := mustExec(t, db, "SELECT 1", ExecOptions{}); !r.OK() || len(m.srv.slots) != 0 {
		t.Errorf("slot free: %+v, %d slots held after", r, len(m.srv.slots))
	}
}
