package sandbox

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
)

var testSeq atomic.Int64

// srvName returns a schema/database name no other test run uses at the same time.
func srvName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1_000_000, testSeq.Add(1))
}

// pgAdmin opens the test PostgreSQL server for setup and checks (not through DB).
func pgAdmin(t testing.TB) *sql.DB {
	t.Helper()
	shared.SkipServers(t)
	db, err := openPostgresPool(shared.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(); err != nil {
		db.Close()
		t.Fatalf("PostgreSQL at %s is not reachable (start it, or set CHAINEDSQL_NO_SERVERS=1): %v", pgTarget(shared.PostgresDSN()), err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// pgSchema creates a fresh schema, runs setup in it, and drops it when the test ends.
func pgSchema(t testing.TB, admin *sql.DB, setup ...string) string {
	t.Helper()
	name := srvName("cs_pg")
	if _, err := admin.Exec("CREATE SCHEMA " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP SCHEMA " + name + " CASCADE") })
	for _, s := range setup {
		if _, err := admin.Exec("SET search_path = " + name + "; " + s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return name
}

func mustExec(t *testing.T, db DB, q string, opts ExecOptions) *Result {
	t.Helper()
	r, err := db.Exec(context.Background(), q, opts)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return r
}

// sameCell reports whether a normalised cell equals want: the same value, times at the same
// instant.
func sameCell(got, want any) bool {
	if g, ok := got.(time.Time); ok {
		w, ok := want.(time.Time)
		return ok && g.Equal(w)
	}
	return reflect.DeepEqual(got, want)
}

// checkReadForms runs the read statement forms screen lets through (EXPLAIN, comments, VALUES,
// WITH, a trailing semicolon) on a DB holding table t(id).
func checkReadForms(t *testing.T, db DB) {
	t.Helper()
	for _, q := range []string{"EXPLAIN SELECT * FROM t", "-- a comment\nSELECT 1", "SELECT 1 -- trailing comment", "VALUES (1), (2)",
		"WITH c AS (SELECT id FROM t) SELECT count(*) FROM c", "SELECT 1;"} {
		if r := mustExec(t, db, q, ExecOptions{}); !r.OK() {
			t.Errorf("%q: %+v", q, r)
		}
	}
}

func TestPostgresExec(t *testing.T) {
	admin := pgAdmin(t)
	schema := pgSchema(t, admin,
		`CREATE TABLE t (id bigint PRIMARY KEY, n numeric, r real, d double precision, day date,
			ts timestamp, ok boolean, b bytea, j json, s text)`,
		`INSERT INTO t VALUES (1, 12.50, 0.1, 2.5, '2009-01-03', '2009-01-03 04:05:06', true, '\x0102', '{"a": 1}', 'x'),
			(2, 7, NULL, NULL, NULL, NULL, false, NULL, NULL, NULL), (3, 3, 1, 1, NULL, NULL, NULL, NULL, NULL, 'z')`)
	acc := testReader(t, datasets.Postgres, schema)
	db, err := OpenPostgres(context.Background(), shared.PostgresDSN(), schema, acc)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.Dialect() != datasets.Postgres || !strings.HasPrefix(db.Version(), "PostgreSQL ") {
		t.Errorf("dialect %s version %q", db.Dialect(), db.Version())
	}
	r := mustExec(t, db, "SELECT id, n, r, d, day, ts, ok, b, j, s FROM t ORDER BY id", ExecOptions{MaxRows: 2})
	if !r.OK() || r.Total != 3 || len(r.Rows) != 2 || !r.Truncated {
		t.Fatalf("caps: %+v", r)
	}
	row := r.Rows[0]
	want := []any{int64(1), 12.5, 0.1, 2.5, time.Date(2009, 1, 3, 0, 0, 0, 0, time.UTC), time.Date(2009, 1, 3, 4, 5, 6, 0, time.UTC), true, []byte{1, 2}, `{"a": 1}`, "x"}
	for i := range want {
		if !sameCell(row[i], want[i]) || fmt.Sprintf("%T", row[i]) != fmt.Sprintf("%T", want[i]) {
			t.Errorf("column %s: %#v (%T), want %#v (%T)", r.Columns[i], row[i], row[i], want[i], want[i])
		}
	}
	if r.Rows[1][1] != int64(7) || r.Rows[1][2] != nil {
		t.Errorf("integral numeric / NULL: %#v", r.Rows[1])
	}
	if r := mustExec(t, db, "SELECT sum(n), avg(id), count(*) FROM t", ExecOptions{}); !r.OK() || r.Rows[0][0] != 22.5 || r.Rows[0][1] != int64(2) || r.Rows[0][2] != int64(3) {
		t.Errorf("aggregates: %+v", r)
	}
	if r := mustExec(t, db, "SELECT nope FROM t", ExecOptions{}); r.Outcome != OutcomeError || !strings.Contains(r.Error, `column "nope" does not exist`) {
		t.Errorf("engine error: %+v", r)
	}
	// The schema is found through search_path, not by qualifying names.
	if r := mustExec(t, db, "SELECT current_schema()", ExecOptions{}); r.Rows[0][0] != schema {
		t.Errorf("current_schema %v, want %s", r.Rows[0][0], schema)
	}
	checkReadForms(t, db)
	start := time.Now()
	if r := mustExec(t, db, "SELECT pg_sleep(60)", ExecOptions{Timeout: 500 * time.Millisecond}); r.Outcome != OutcomeTimeout || time.Since(start) > 2*time.Second {
		t.Errorf("pg_sleep: %s after %s", r.Outcome, time.Since(start))
	}
	// The pool is still usable after a timeout.
	if r := mustExec(t, db, "SELECT 1", ExecOptions{}); !r.OK() {
		t.Errorf("after timeout: %+v", r)
	}
	if _, err := OpenPostgres(context.Background(), shared.PostgresDSN(), schema+"_missing", acc); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing schema: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := db.Exec(ctx, "SELECT 1", ExecOptions{}); err == nil {
		t.Error("cancelled context: no error")
	}
}
