package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

func TestSQLiteHostileAndCaps(t *testing.T) {
	p := shared.Path(t, "data/multi/chinook/Chinook_Sqlite.sqlite")
	before := sandboxtest.Sum(t, p)
	db, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	opts := sandbox.ExecOptions{Timeout: 2 * time.Second, MaxRows: 5}
	for _, q := range []string{
		"DROP TABLE Album", "DELETE FROM Album", "UPDATE Album SET Title='x'",
		"ATTACH DATABASE '/tmp/x.db' AS x", "PRAGMA writable_schema=1", "VACUUM INTO '/tmp/x.db'",
		"SELECT 1; DROP TABLE Album", "INSERT INTO Album VALUES (9999,'x',1)",
	} {
		r, err := db.Exec(ctx, q, opts)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if r.Outcome != sandbox.OutcomeRefused && r.Outcome != sandbox.OutcomeError {
			t.Errorf("%s: outcome %s, want refused", q, r.Outcome)
		}
	}
	for _, q := range []string{
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c",
		"SELECT count(*) FROM Track a, Track b, Track c",
	} {
		start := time.Now()
		r, err := db.Exec(ctx, q, sandbox.ExecOptions{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if r.Outcome != sandbox.OutcomeTimeout || time.Since(start) > 3*time.Second {
			t.Errorf("%s: outcome %s after %s, want timeout within the deadline", q, r.Outcome, time.Since(start))
		}
	}
	r, err := db.Exec(ctx, "SELECT AlbumId FROM Album ORDER BY AlbumId;", opts)
	if err != nil || !r.OK() {
		t.Fatalf("select: %v %+v", err, r)
	}
	if r.Total != 347 || len(r.Rows) != 5 || !r.Truncated || r.Rows[0][0] != int64(1) || r.Rows[4][0] != int64(5) {
		t.Errorf("caps: total %d rows %v truncated %v", r.Total, r.Rows, r.Truncated)
	}
	sandboxtest.CheckFilter(t, db)
	r, _ = db.Exec(ctx, "SELECT nope FROM Album", opts)
	if r.Outcome != sandbox.OutcomeError || r.Error == "" {
		t.Errorf("engine error: %+v", r)
	}
	if sandboxtest.Sum(t, p) != before {
		t.Fatal("database file changed")
	}
}

func TestConnectorSQLite(t *testing.T) {
	p := shared.Path(t, "data/multi/chinook/Chinook_Sqlite.sqlite")
	var c sandbox.Connector
	defer c.Close()
	task := datasets.Task{ID: "t1", DBID: "chinook", DBPath: p}
	a, err := c.Open(context.Background(), datasets.SQLite, task)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Open(context.Background(), datasets.SQLite, task)
	if err != nil || a != b {
		t.Fatalf("second open: %v, same pool %v", err, a == b)
	}
	if _, err := c.Open(context.Background(), datasets.SQLite, datasets.Task{ID: "t2", DBID: "x", DBPath: filepath.Join(t.TempDir(), "missing.sqlite")}); err == nil {
		t.Fatal("missing database opened")
	}
	if _, err := c.Open(context.Background(), datasets.Postgres, task); err == nil {
		t.Fatal("postgres dialect should report it is not built")
	}
}

// TestSQLiteStoredValues: values in columns declared DATE, DATETIME, TIMESTAMP and BOOLEAN come
// back as SQLite stores them, as Python's sqlite3 returns them (BIRD's and Spider's
// evaluations), with or without a RowFilter; go-sqlite3 made '0000-00-00' and 'N/A' the zero
// time 0001-01-01, integers Unix times and a BOOLEAN 5 or -1 a bool. want is Python 3's
// sqlite3 on the same table.
func TestSQLiteStoredValues(t *testing.T) {
	p := writeSQLite(t, "dates.sqlite", `CREATE TABLE t(id INTEGER, d DATE, dt DATETIME, ts TIMESTAMP, b BOOLEAN, n TEXT);
		INSERT INTO t VALUES (1, '0000-00-00', '0000-00-00 00:00:00', 'N/A', 5, 'x'),
		(2, '2010-01-02', '2010-01-02 03:04:05', '2010-01-02T03:04:05Z', 0, 'y'),
		(3, 1262304000, 1262304000123, 1.5, 1, 'z'), (4, NULL, '', x'0062', -1, 'w')`)
	want := [][]any{
		{int64(1), "0000-00-00", "0000-00-00 00:00:00", "N/A", int64(5), "x"},
		{int64(2), "2010-01-02", "2010-01-02 03:04:05", "2010-01-02T03:04:05Z", int64(0), "y"},
		{int64(3), int64(1262304000), int64(1262304000123), 1.5, int64(1), "z"},
		{int64(4), nil, "", []byte("\x00b"), int64(-1), "w"},
	}
	db, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, opts := range []sandbox.ExecOptions{{}, {Filter: func([]any) sandbox.RowAction { return sandbox.RowKeep }}} {
		r := sandboxtest.MustExec(t, db, "SELECT * FROM t ORDER BY id", opts)
		if !r.OK() || !reflect.DeepEqual(r.Rows, want) {
			t.Errorf("filter %v: %+v\nwant rows %#v", opts.Filter != nil, r, want)
		}
	}
	r := sandboxtest.MustExec(t, db, "SELECT max(d), min(dt) FROM t", sandbox.ExecOptions{})
	if !r.OK() || !reflect.DeepEqual(r.Rows, [][]any{{"2010-01-02", int64(1262304000123)}}) {
		t.Errorf("aggregates over DATE columns: %+v", r)
	}
}

// writeSQLite makes the SQLite file name in the test's temporary directory with plain
// go-sqlite3, runs setup on it (statements separated by semicolons) and returns its path.
func writeSQLite(t *testing.T, name, setup string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	w, err := sql.Open("sqlite3", p)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Exec(setup); err != nil {
		t.Fatalf("making %s: %v", name, err)
	}
	return p
}
