package postgres

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/judge"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

func TestPostgresExec(t *testing.T) {
	admin := sandboxtest.PGAdmin(t)
	schema := sandboxtest.PGSchema(t, admin,
		`CREATE TABLE t (id bigint PRIMARY KEY, n numeric, r real, d double precision, day date,
			ts timestamp, ok boolean, b bytea, j json, s text)`,
		`INSERT INTO t VALUES (1, 12.50, 0.1, 2.5, '2009-01-03', '2009-01-03 04:05:06', true, '\x0102', '{"a": 1}', 'x'),
			(2, 7, NULL, NULL, NULL, NULL, false, NULL, NULL, NULL), (3, 3, 1, 1, NULL, NULL, NULL, NULL, NULL, 'z')`)
	acc := sandboxtest.Reader(t, datasets.Postgres, schema)
	db, err := Open(context.Background(), shared.PostgresDSN(), schema, acc)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.Dialect() != datasets.Postgres || !strings.HasPrefix(db.Version(), "PostgreSQL ") {
		t.Errorf("dialect %s version %q", db.Dialect(), db.Version())
	}
	r := sandboxtest.MustExec(t, db, "SELECT id, n, r, d, day, ts, ok, b, j, s FROM t ORDER BY id", sandbox.ExecOptions{MaxRows: 2})
	if !r.OK() || r.Total != 3 || len(r.Rows) != 2 || !r.Truncated {
		t.Fatalf("caps: %+v", r)
	}
	// An error that echoes a 1 MB value is kept cut to textcap.Error.
	if r := sandboxtest.MustExec(t, db, "SELECT ('1' || repeat('x', 1000000))::int", sandbox.ExecOptions{}); r.Outcome != sandbox.OutcomeError || len(r.Error) > textcap.Error || !strings.Contains(r.Error, "truncated") {
		t.Errorf("a cast's error echoing 1 MB: %s, %d bytes %.80q", r.Outcome, len(r.Error), r.Error)
	}
	row := r.Rows[0]
	want := []any{int64(1), sandbox.Decimal("12.50"), 0.1, 2.5, time.Date(2009, 1, 3, 0, 0, 0, 0, time.UTC), time.Date(2009, 1, 3, 4, 5, 6, 0, time.UTC), true, []byte{1, 2}, `{"a": 1}`, "x"}
	for i := range want {
		if !sandboxtest.SameCell(row[i], want[i]) || fmt.Sprintf("%T", row[i]) != fmt.Sprintf("%T", want[i]) {
			t.Errorf("column %s: %#v (%T), want %#v (%T)", r.Columns[i], row[i], row[i], want[i], want[i])
		}
	}
	if r.Rows[1][1] != int64(7) || r.Rows[1][2] != nil {
		t.Errorf("integral numeric / NULL: %#v", r.Rows[1])
	}
	if r := sandboxtest.MustExec(t, db, "SELECT sum(n), avg(id), count(*) FROM t", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != sandbox.Decimal("22.50") || r.Rows[0][1] != sandbox.Decimal("2.0000000000000000") || r.Rows[0][2] != int64(3) {
		t.Errorf("aggregates: %+v", r)
	}
	if r := sandboxtest.MustExec(t, db, "SELECT nope FROM t", sandbox.ExecOptions{}); r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, `column "nope" does not exist`) {
		t.Errorf("engine error: %+v", r)
	}
	// The schema is found through search_path, not by qualifying names.
	if r := sandboxtest.MustExec(t, db, "SELECT current_schema()", sandbox.ExecOptions{}); r.Rows[0][0] != schema {
		t.Errorf("current_schema %v, want %s", r.Rows[0][0], schema)
	}
	sandboxtest.CheckReadForms(t, db)
	sandboxtest.CheckFilter(t, db)
	start := time.Now()
	if r := sandboxtest.MustExec(t, db, "SELECT pg_sleep(60)", sandbox.ExecOptions{Timeout: 500 * time.Millisecond}); r.Outcome != sandbox.OutcomeTimeout || time.Since(start) > sandboxtest.ReplyBy(500*time.Millisecond) {
		t.Errorf("pg_sleep: %s after %s", r.Outcome, time.Since(start))
	}
	// The pool is still usable after a timeout.
	if r := sandboxtest.MustExec(t, db, "SELECT 1", sandbox.ExecOptions{}); !r.OK() {
		t.Errorf("after timeout: %+v", r)
	}
	if _, err := Open(context.Background(), shared.PostgresDSN(), schema+"_missing", acc); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing schema: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := db.Exec(ctx, "SELECT 1", sandbox.ExecOptions{}); err == nil {
		t.Error("cancelled context: no error")
	}
}

// TestPostgresExactNumeric: a numeric is held as the server wrote it, as psql prints it (it was
// a float64: 1e+35, 12.5, 2), an integer's digits as int64; Match compares them as the numbers
// it compared before, but an integer past int64 and a number past float64 exactly, as Python's
// Decimal does (equal to themselves written with a fraction of zeros, not to a float or a text);
// a NaN equals nothing, as Python's float('nan') and Decimal('NaN') from two executions never do.
func TestPostgresExactNumeric(t *testing.T) {
	admin := sandboxtest.PGAdmin(t)
	schema := sandboxtest.PGSchema(t, admin, `CREATE TABLE t (n numeric)`, `INSERT INTO t VALUES (1), (2)`)
	acc := sandboxtest.Reader(t, datasets.Postgres, schema)
	db, err := Open(context.Background(), shared.PostgresDSN(), schema, acc)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r := sandboxtest.MustExec(t, db, `SELECT 99999999999999999999999999999999999.123456789::numeric, 12.50::numeric, avg(n), sum(n),
		'NaN'::numeric, 3.00::numeric, ('1' || repeat('0', 400))::numeric, 18446744073709551615::numeric FROM t`, sandbox.ExecOptions{})
	if !r.OK() || len(r.Rows) != 1 {
		t.Fatalf("%+v", r)
	}
	want := []any{sandbox.Decimal("99999999999999999999999999999999999.123456789"), sandbox.Decimal("12.50"),
		sandbox.Decimal("1.5000000000000000"), int64(3), sandbox.Decimal("NaN"), sandbox.Decimal("3.00"),
		sandbox.Decimal("1" + strings.Repeat("0", 400)), sandbox.Decimal("18446744073709551615")}
	one := func(v any) *sandbox.Result {
		return &sandbox.Result{Outcome: sandbox.OutcomeOK, Rows: [][]any{{v}}, Total: 1}
	}
	was := []any{1e35, 12.5, 1.5, int64(3), math.NaN(), int64(3), sandbox.Decimal("1" + strings.Repeat("0", 400) + ".00"), sandbox.Decimal("18446744073709551615.0")}
	for i, w := range want {
		got := r.Rows[0][i]
		if got != w {
			t.Errorf("column %d: %#v (%T), want %#v (%T)", i, got, got, w, w)
		}
		if nan := w == sandbox.Decimal("NaN"); judge.Match(one(got), one(was[i]), false) == nan {
			t.Errorf("column %d: Match(%#v, %#v) = %v, want %v", i, got, was[i], nan, !nan)
		}
	}
}

// TestPostgresTerminated: a statement whose backend the server's operator terminates
// (pg_terminate_backend, SQLSTATE 57P01) is a failure of the database, an error as a lost
// connection is, not an outcome of the statement to show its policy; the next statement runs.
func TestPostgresTerminated(t *testing.T) {
	admin := sandboxtest.PGAdmin(t)
	schema := sandboxtest.PGSchema(t, admin, `CREATE TABLE t (id bigint)`)
	acc := sandboxtest.Reader(t, datasets.Postgres, schema)
	db, err := Open(context.Background(), shared.PostgresDSN(), schema, acc)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const marker = "cs-terminate-marker"
	done := make(chan error, 1)
	var res *sandbox.Result
	go func() {
		var err error
		res, err = db.Exec(context.Background(), "SELECT pg_sleep(5), '"+marker+"'", sandbox.ExecOptions{Timeout: 10 * time.Second})
		done <- err
	}()
	terminated := false
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline) && !terminated; time.Sleep(20 * time.Millisecond) {
		err := admin.QueryRow(`SELECT count(pg_terminate_backend(pid)) > 0 FROM pg_stat_activity
			WHERE query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`, marker).Scan(&terminated)
		if err != nil {
			t.Fatal(err)
		}
	}
	if !terminated {
		t.Fatal("the statement's backend was not found")
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "57P01") {
		t.Errorf("terminated backend: result %+v, error %v; want an error naming SQLSTATE 57P01", res, err)
	}
	if r := sandboxtest.MustExec(t, db, "SELECT 1", sandbox.ExecOptions{}); !r.OK() {
		t.Errorf("after the termination: %+v", r)
	}
	// A NUL in the text draws PostgreSQL's protocol violation (08P01) on a session that still
	// works: the statement's outcome (refused by the screen), never the database's failure.
	for _, q := range []string{"SELECT 1\x00", "SELECT '\x00'", "SELECT 1 -- \x00"} {
		if r, err := db.Exec(context.Background(), q, sandbox.ExecOptions{}); err != nil || r.Outcome != sandbox.OutcomeRefused || !strings.Contains(r.Error, "NUL") {
			t.Errorf("%q: %+v, %v", q, r, err)
		}
	}
}

// TestPostgresScreenReasons: the refusal of a pg_ name says why for functions that act on the
// server as for the catalogs.
func TestPostgresScreenReasons(t *testing.T) {
	rules := postgresScreen()
	for q, want := range map[string]string{
		"SELECT pg_notify('a', 'b')":   "act on the server",
		"SELECT relname FROM pg_class": "show every task's tables",
	} {
		lower := strings.ToLower(q)
		if got := rules.Words(q, lower, strings.FieldsFunc(lower, func(r rune) bool { return !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') })); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want it to say %q", q, got, want)
		}
	}
}

// pgWaitDB opens a schema of t(x) = 1, 2, 3 with a server handle of its own (pgMaxStatements
// slots or fewer, as max_connections allows).
func pgWaitDB(t *testing.T) *pgDB {
	t.Helper()
	schema := sandboxtest.PGSchema(t, sandboxtest.PGAdmin(t), "CREATE TABLE t (x int)", "INSERT INTO t VALUES (1), (2), (3)")
	db, err := Open(context.Background(), shared.PostgresDSN(), schema, sandboxtest.Reader(t, datasets.Postgres, schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db.(*pgDB)
}

// closeIdle closes the idle connections of p's pool and waits until their backends are gone
// and their slots given back. One caller at a time per pool: two SetMaxIdleConns(0)-and-back at
// once can lose a connection outside the pool (database/sql; see the MySQL share's closeIdle).
func closeIdle(t *testing.T, p *pgDB) {
	t.Helper()
	p.srv.pool.SetMaxIdleConns(0)
	p.srv.pool.SetMaxIdleConns(min(pgMaxIdle, p.srv.capacity()))
	for deadline := time.Now().Add(5 * time.Second); len(p.srv.slots) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d slots still held after the idle connections closed", len(p.srv.slots))
		}
	}
}

// TestPostgresNoWaitTold: executions that find a unit of the pool and a connection (idle, or a
// slot for a new one) free at once, one at a time or several together below the caps, never
// call ExecOptions.Waiting; before, every execution told a wait around the take of its
// connection, a new one's login included, which the judge's pair clock and the env's shared
// gold took off its running time.
func TestPostgresNoWaitTold(t *testing.T) {
	p := pgWaitDB(t)
	ctx := context.Background()
	var log sandboxtest.WaitLog
	opts := sandbox.ExecOptions{Waiting: log.Tell}
	exec := func(q string) error {
		r, err := p.Exec(ctx, q, opts)
		if err == nil && !r.OK() {
			err = fmt.Errorf("%+v", r)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
		return nil
	}
	for _, q := range []string{"SELECT count(*) FROM t", "SELECT x FROM t"} { // a pooled connection
		if err := exec(q); err != nil {
			t.Fatal(err)
		}
	}
	closeIdle(t, p)
	if err := exec("SELECT count(*) FROM t"); err != nil { // a new one
		t.Fatal(err)
	}
	// New connections and the pooled one together.
	sandboxtest.CheckNoWaitTold(t, p, min(4, p.srv.capacity()), "SELECT 1 FROM pg_catalog.pg_sleep(0.2)", &log)
}

// TestPostgresWaitTold: an execution that has to wait tells Waiting true and then, once the
// wait ends, false, once each, and then runs: with the one slot of its server handle held by a
// running statement (statement), with every unit of the pool taken (unit), and, with no idle
// connection, with every slot held by backends the pool no longer holds (slot: exiting or
// runaway ones, which conn waits for).
func TestPostgresWaitTold(t *testing.T) {
	ctx := context.Background()
	const hold = 300 * time.Millisecond
	run := func(t *testing.T, p *pgDB, take, give func()) { sandboxtest.CheckWaitTold(t, p, hold, take, give) }
	t.Run("statement", func(t *testing.T) {
		_, p := pgOneSlot(t, sandboxtest.PGAdmin(t))
		held := make(chan error, 1)
		run(t, p, func() {
			go func() {
				r, err := p.Exec(ctx, "SELECT 1 FROM pg_catalog.pg_sleep(0.6)", sandbox.ExecOptions{Timeout: 5 * time.Second})
				if err == nil && !r.OK() {
					err = fmt.Errorf("%+v", r)
				}
				held <- err
			}()
			for deadline := time.Now().Add(5 * time.Second); len(p.srv.taken) == 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the statement holding the slot did not start")
				}
			}
		}, func() {
			if err := <-held; err != nil {
				t.Errorf("the statement holding the slot: %v", err)
			}
		})
	})
	p := pgWaitDB(t)
	t.Run("unit", func(t *testing.T) {
		run(t, p, func() {
			for range cap(p.srv.taken) {
				p.srv.taken <- struct{}{}
			}
		}, func() {
			for range cap(p.srv.taken) {
				<-p.srv.taken
			}
		})
	})
	t.Run("slot", func(t *testing.T) {
		closeIdle(t, p)
		run(t, p, func() {
			for range p.srv.capacity() {
				p.srv.slots <- struct{}{}
			}
		}, func() {
			for range p.srv.capacity() {
				p.srv.release()
			}
		})
	})
}

// TestPostgresOwnCatalogTrimmed: the toolkit's own catalog statements pass the catalog rules,
// trimmed as the screen trims (sandbox.AllSpace); one with a no-break space after it, which
// PostgreSQL reads as part of its last name, is screened as any other statement and refused for
// the catalogs it reads.
func TestPostgresOwnCatalogTrimmed(t *testing.T) {
	rules := postgresScreen()
	for q, want := range map[string]string{
		"\n" + pgCatalog.Columns + " \t\r\n": "",
		pgCatalog.Keys:                       "",
		pgCatalog.Columns + "\u00a0":         "show every task's tables",
		"\u00a0" + pgCatalog.Keys:            "show every task's tables",
	} {
		lower := strings.ToLower(q)
		got := rules.Words(q, lower, strings.FieldsFunc(lower, func(r rune) bool { return !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') }))
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("%q: %q, want %q", q, got, want)
		}
	}
}

// TestPostgresBackendServesItsShare: a backend is pooled for at most srv.maxServed statements
// and srv.maxServedText bytes of their text (lowered here to 3 and 200), then its connection is
// closed and the next statement gets a new backend; until then, one after another, statements
// share one.
func TestPostgresBackendServesItsShare(t *testing.T) {
	p := pgWaitDB(t)
	pid := func(q string) string {
		t.Helper()
		r, err := unscreened(context.Background(), p, q, 5*time.Second, 1)
		if err != nil || !r.OK() {
			t.Fatalf("%q: %v %+v", q, err, r)
		}
		return fmt.Sprint(r.Rows[0][0])
	}
	for _, c := range []struct {
		served, text int64
		q            string
	}{
		{3, pgMaxServedText, "SELECT pg_backend_pid()"},
		{pgMaxServed, 200, "SELECT pg_backend_pid() /* " + strings.Repeat("x", 40) + " */"}, // 3 of 70 bytes pass 200
	} {
		closeIdle(t, p)
		p.srv.maxServed, p.srv.maxServedText = c.served, c.text
		var pids []string
		for range 7 {
			pids = append(pids, pid(c.q))
		}
		if !(pids[0] == pids[1] && pids[1] == pids[2] && pids[2] != pids[3] && pids[3] == pids[4] && pids[4] == pids[5] && pids[5] != pids[6]) {
			t.Errorf("at most %d statements or %d bytes a backend: the backends of 7 statements in a row were %v, want 3, 3 and 1", c.served, c.text, pids)
		}
	}
}
