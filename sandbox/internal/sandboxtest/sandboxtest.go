// Package sandboxtest holds what the tests of sandbox and of its engines (sandbox/sqlite,
// sandbox/postgres, sandbox/mysql) share: fresh names on the test servers, their admin
// connections, readers, Chinook copies, and the hostile suites every engine runs on its own DBs
// with its own unscreened runner (RawFunc). It imports no engine: a test registers the engines
// it uses (sandbox/engines, or an engine's own tests registering themselves).
package sandboxtest

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
)

var testSeq atomic.Int64

// Seq returns a number no earlier call in this process returned, for unique names.
func Seq() int64 { return testSeq.Add(1) }

// SrvName returns a schema/database name no other test run uses at the same time.
func SrvName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1_000_000, testSeq.Add(1))
}

// PGAdmin opens the test PostgreSQL server for setup and checks (not through DB).
func PGAdmin(t testing.TB) *sql.DB {
	t.Helper()
	shared.SkipServers(t)
	cfg, err := pgx.ParseConfig(shared.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	// As the engine's own pools: the extended protocol without a named statement.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	db := stdlib.OpenDB(*cfg)
	if err := db.Ping(); err != nil {
		db.Close()
		t.Fatalf("PostgreSQL at %s:%d/%s is not reachable (start it, or set CHAINEDSQL_NO_SERVERS=1): %v", cfg.Host, cfg.Port, cfg.Database, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// PGSchema creates a fresh schema, runs setup in it, and drops it when the test ends.
func PGSchema(t testing.TB, admin *sql.DB, setup ...string) string {
	t.Helper()
	name := SrvName("cs_pg")
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

// ReplyBy is how long after its start a server statement with deadline timeout may take to
// reply that it was stopped: the deadline plus sandbox.ServerGrace (after which the client hangs
// up) and a second for the hang-up. Usually it replies within 0.1 s of the deadline; once, under
// -race beside other packages' tests on a 2-core Zen 3, a MySQL SLEEP replied at 2.5 s of a
// 500 ms deadline, where a bound of 2 s failed.
func ReplyBy(timeout time.Duration) time.Duration { return timeout + sandbox.ServerGrace + time.Second }

// MustExec runs q on db and fails the test on an error (a Result's own failure is returned).
func MustExec(t *testing.T, db sandbox.DB, q string, opts sandbox.ExecOptions) *sandbox.Result {
	t.Helper()
	r, err := db.Exec(context.Background(), q, opts)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return r
}

// WaitLog records what executions tell ExecOptions.Waiting (Tell), in order. Safe for
// concurrent use.
type WaitLog struct {
	mu    sync.Mutex
	waits []bool
}

// Tell is an execution's ExecOptions.Waiting.
func (l *WaitLog) Tell(w bool) {
	l.mu.Lock()
	l.waits = append(l.waits, w)
	l.mu.Unlock()
}

// String lists the calls told so far, as fmt prints a []bool: "[true false]".
func (l *WaitLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.waits)
}

// CheckNoWaitTold runs n executions of q on db at once, telling log (n within what the engine
// has free, so none waits), and fails unless each ran and log, with what the caller's own
// executions told it before, holds nothing.
func CheckNoWaitTold(t *testing.T, db sandbox.DB, n int, q string, log *WaitLog) {
	t.Helper()
	errs := make(chan error, n)
	for range n {
		go func() {
			r, err := db.Exec(context.Background(), q, sandbox.ExecOptions{Waiting: log.Tell})
			if err == nil && !r.OK() {
				err = fmt.Errorf("%+v", r)
			}
			if err != nil {
				err = fmt.Errorf("%s: %w", q, err)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := log.String(); got != "[]" {
		t.Errorf("executions that never waited told Waiting %s, want nothing", got)
	}
}

// CheckWaitTold calls take (which holds what an Exec needs), runs "SELECT count(*) FROM t" on db
// (5 s timeout; t has three rows), checks after hold that the Exec has told ExecOptions.Waiting
// [true], calls give (which lets it go on), and checks that the Exec then told [true false],
// counted three rows and took at least hold: a wait told once, around the wait only.
func CheckWaitTold(t *testing.T, db sandbox.DB, hold time.Duration, take, give func()) {
	t.Helper()
	take()
	var log WaitLog
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		r, err := db.Exec(context.Background(), "SELECT count(*) FROM t", sandbox.ExecOptions{Timeout: 5 * time.Second, Waiting: log.Tell})
		if err != nil || !r.OK() || r.Rows[0][0] != int64(3) {
			t.Errorf("after the wait: %+v, %v", r, err)
		}
	}()
	time.Sleep(hold)
	if got := log.String(); got != "[true]" {
		t.Errorf("while waiting: Waiting told %s, want [true]", got)
	}
	give()
	<-done
	if got, took := log.String(), time.Since(start); got != "[true false]" || took < hold {
		t.Errorf("Waiting told %s, Exec took %s; want [true false], at least %s", got, took, hold)
	}
}

// CheckRunawaysAfterWait calls take (which holds every statement slot of db's server handle),
// runs "SELECT count(*) FROM t" on db (3 s timeout), and once the Exec tells ExecOptions.Waiting
// it waits (it passed the per-database runaway cap's check at its start), calls give (which
// brings the database's runaways up to its cap, then gives a slot back): the statement must not
// run, but fail with sandbox.ErrBusy naming the runaways, since runaways that came while it
// waited count as those that were there when it started.
func CheckRunawaysAfterWait(t *testing.T, db sandbox.DB, take, give func()) {
	t.Helper()
	take()
	waiting := make(chan struct{})
	var once sync.Once
	type reply struct {
		r   *sandbox.Result
		err error
	}
	done := make(chan reply, 1)
	go func() {
		r, err := db.Exec(context.Background(), "SELECT count(*) FROM t", sandbox.ExecOptions{Timeout: 3 * time.Second,
			Waiting: func(w bool) {
				if w {
					once.Do(func() { close(waiting) })
				}
			}})
		done <- reply{r, err}
	}()
	select {
	case <-waiting:
	case rep := <-done:
		t.Fatalf("the statement did not wait for a slot: %+v, %v", rep.r, rep.err)
	}
	give()
	rep := <-done
	if !errors.Is(rep.err, sandbox.ErrBusy) || rep.r != nil || !strings.Contains(rep.err.Error(), "runaways") {
		t.Errorf("a statement that waited while its database's runaways reached the cap: %+v, %v; want sandbox.ErrBusy naming them", rep.r, rep.err)
	}
}

// SameCell reports whether a normalised cell equals want: the same value, times at the same
// instant.
func SameCell(got, want any) bool {
	if g, ok := got.(time.Time); ok {
		w, ok := want.(time.Time)
		return ok && g.Equal(w)
	}
	return reflect.DeepEqual(got, want)
}

// CheckReadForms runs the read statement forms screen lets through (EXPLAIN, comments, VALUES,
// WITH, a trailing semicolon) on a DB holding table t(id).
func CheckReadForms(t *testing.T, db sandbox.DB) {
	t.Helper()
	for _, q := range []string{"EXPLAIN SELECT * FROM t", "-- a comment\nSELECT 1", "SELECT 1 -- trailing comment", "VALUES (1), (2)",
		"WITH c AS (SELECT id FROM t) SELECT count(*) FROM c", "SELECT 1;"} {
		if r := MustExec(t, db, q, sandbox.ExecOptions{}); !r.OK() {
			t.Errorf("%q: %+v", q, r)
		}
	}
}

// CheckFilter holds db's Exec to ExecOptions.Filter's contract over the numbers 1 to 1000: the
// filter sees every row in order, values normalised, MaxRows applying to the rows it keeps;
// skipped rows count in Total only; a stop ends the result there, OutcomeOK, with Total counting
// the rows read; and db answers the next statement after a stop mid-result.
func CheckFilter(t *testing.T, db sandbox.DB) {
	t.Helper()
	const q = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000) SELECT n, 'x' FROM c"
	var seen []int64
	even := func(row []any) sandbox.RowAction {
		n, _ := row[0].(int64)
		seen = append(seen, n)
		if n%2 == 1 {
			return sandbox.RowSkip
		}
		return sandbox.RowKeep
	}
	r := MustExec(t, db, q, sandbox.ExecOptions{Filter: even, MaxRows: 3})
	ordered := len(seen) == 1000
	for i := 0; ordered && i < len(seen); i++ {
		ordered = seen[i] == int64(i+1)
	}
	if !r.OK() || r.Total != 1000 || !r.Truncated || len(r.Rows) != 3 || r.Rows[0][0] != int64(2) || r.Rows[2][0] != int64(6) || r.Rows[2][1] != "x" || !ordered {
		t.Errorf("%s: skipping odd rows, 3 kept at most: %s total %d truncated %v, %d rows, first %v; the filter saw %d rows, in order %v", db.Dialect(), r.Outcome, r.Total, r.Truncated, len(r.Rows), r.Rows[:min(len(r.Rows), 5)], len(seen), ordered)
	}
	calls := 0
	stop := func(row []any) sandbox.RowAction {
		calls++
		if row[0] == int64(5) {
			return sandbox.RowStop
		}
		return sandbox.RowKeep
	}
	r = MustExec(t, db, q, sandbox.ExecOptions{Filter: stop})
	if !r.OK() || r.Total != 5 || !r.Truncated || len(r.Rows) != 4 || r.Rows[3][0] != int64(4) || calls != 5 {
		t.Errorf("%s: stopping at 5: %s total %d truncated %v, %d rows, first %v; the filter called %d times", db.Dialect(), r.Outcome, r.Total, r.Truncated, len(r.Rows), r.Rows[:min(len(r.Rows), 5)], calls)
	}
	if r := MustExec(t, db, "SELECT 1", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != int64(1) {
		t.Errorf("%s: after a stop: %+v", db.Dialect(), r)
	}
}

// StoppedStreamSQL is a statement holding marker (a text no other statement holds) whose rows
// stream for far longer than any deadline, the same on every engine: one in about a thousand of
// the 10^12 rows of a cross join, its fourth row the first (a = b = d = 1, e = 6). Few bytes a
// second, so that a driver draining the rest of its reply reads until the deadline, not until
// the reply window (sandbox.MaxResultBytes) cuts it.
func StoppedStreamSQL(marker string) string {
	return "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000) " +
		"SELECT '" + marker + "', a.n, b.n, '" + strings.Repeat("y", 100) + "' FROM c a, c b, c d, c e WHERE (a.n * b.n + d.n * e.n) % 1000 = 7"
}

// StoppedStream holds db's Exec to a RowFilter's stop on a statement whose rest streams for
// far longer than its 20 s deadline (StoppedStreamSQL): stopped at its first row, it returns
// within 3 s, ok, Truncated, Total 1, no row kept, Duration within the call; running (nil on an
// engine without a server), which counts the server's statements holding a marker still at work,
// counts none of it within 2 s after; and db answers the next statement. Stopped with a deadline
// that passes while the statement is being ended, it is still ok, and db answers after.
func StoppedStream(t *testing.T, db sandbox.DB, running func(marker string) int) {
	t.Helper()
	const timeout, within, gone = 20 * time.Second, 3 * time.Second, 2 * time.Second
	marker := fmt.Sprintf("stopper_%d_%d", os.Getpid(), Seq())
	stop := func([]any) sandbox.RowAction { return sandbox.RowStop }
	start := time.Now()
	r := MustExec(t, db, StoppedStreamSQL(marker), sandbox.ExecOptions{Timeout: timeout, Filter: stop})
	took := time.Since(start)
	t.Logf("%s: stopped at the first row of a %s statement: %s in %s (Duration %s), total %d, truncated %v %s",
		db.Dialect(), timeout, r.Outcome, took.Round(time.Millisecond), r.Duration.Round(time.Millisecond), r.Total, r.Truncated, r.Error)
	if !r.OK() || !r.Truncated || r.Total != 1 || len(r.Rows) != 0 || r.Duration <= 0 || r.Duration > took {
		t.Errorf("%s: a stop at the first row: %s %q, total %d, truncated %v, %d rows, Duration %s of %s; want ok, truncated, total 1, no row, Duration within the call",
			db.Dialect(), r.Outcome, r.Error, r.Total, r.Truncated, len(r.Rows), r.Duration, took)
	}
	if took > within {
		t.Errorf("%s: a stop at the first row returned after %s, want within %s (the statement's deadline: %s)", db.Dialect(), took, within, timeout)
	}
	if running != nil {
		for end := time.Now().Add(gone); ; time.Sleep(20 * time.Millisecond) {
			n := running(marker)
			if n == 0 {
				t.Logf("%s: no server statement of the stream at work %s after Exec returned", db.Dialect(), (time.Since(start) - took).Round(time.Millisecond))
				break
			}
			if time.Now().After(end) {
				t.Errorf("%s: %d server statements of the stopped stream still at work %s after Exec returned", db.Dialect(), n, gone)
				break
			}
		}
	}
	if r := MustExec(t, db, "SELECT 1", sandbox.ExecOptions{Timeout: 5 * time.Second}); !r.OK() || r.Rows[0][0] != int64(1) {
		t.Errorf("%s: after a stopped stream: %+v", db.Dialect(), r)
	}
	// A deadline that passes while the stop ends the statement (shorter than sandbox.StopDrain)
	// leaves the outcome ok: one fact, one outcome, on every engine. Tried again while the first
	// row comes after the deadline (a loaded machine): that statement never reached its stop.
	const short = sandbox.StopDrain * 3 / 4
	for try := 1; ; try++ {
		stops := 0
		once := func([]any) sandbox.RowAction { stops++; return sandbox.RowStop }
		start := time.Now()
		r := MustExec(t, db, StoppedStreamSQL(marker), sandbox.ExecOptions{Timeout: short, Filter: once})
		took := time.Since(start)
		if stops == 0 && try < 5 {
			continue
		}
		t.Logf("%s: stopped at the first row of a %s statement: %s in %s, total %d, truncated %v %s", db.Dialect(), short, r.Outcome, took.Round(time.Millisecond), r.Total, r.Truncated, r.Error)
		if !r.OK() || !r.Truncated || r.Total != 1 || stops != 1 || took > within {
			t.Errorf("%s: a stop at the first row of a %s statement: %s %q after %s, total %d, truncated %v, the filter called %d times; want ok, truncated, total 1 within %s",
				db.Dialect(), short, r.Outcome, r.Error, took, r.Total, r.Truncated, stops, within)
		}
		break
	}
	if r := MustExec(t, db, "SELECT 1", sandbox.ExecOptions{Timeout: 5 * time.Second}); !r.OK() || r.Rows[0][0] != int64(1) {
		t.Errorf("%s: after a stopped stream past its deadline: %+v", db.Dialect(), r)
	}
}

// MyAdmin opens the test MariaDB/MySQL server (no database) for setup and checks.
func MyAdmin(t testing.TB) *sql.DB {
	t.Helper()
	shared.SkipServers(t)
	cfg, err := mysql.ParseDSN(shared.MySQLDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName, cfg.ParseTime, cfg.Loc = "", true, time.UTC
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

// MyDatabase creates a fresh database, runs setup in it, and drops it when the test ends.
func MyDatabase(t testing.TB, admin *sql.DB, setup ...string) string {
	t.Helper()
	name := SrvName("cs_my")
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

// FreshReaderName returns a reader name no other test run uses at the same time.
func FreshReaderName() string {
	return fmt.Sprintf("cs_rd_%d_%d_%d", os.Getpid()%100000, time.Now().UnixNano()%1_000_000, testSeq.Add(1))
}

// DSN returns the test server's DSN of dialect d.
func DSN(d datasets.Dialect) string {
	if d == datasets.Postgres {
		return shared.PostgresDSN()
	}
	return shared.MySQLDSN()
}

// GrantReader creates (or updates) reader name on d's test server, granted targets, and drops
// it when the test ends.
func GrantReader(t testing.TB, d datasets.Dialect, name string, targets ...string) sandbox.ReaderReport {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sandbox.DropReader(ctx, d, DSN(d), name); err != nil {
			t.Errorf("drop reader: %v", err)
		}
	})
	rep, err := sandbox.EnsureReader(context.Background(), d, DSN(d), sandbox.ReaderSetup{Name: name}, targets)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Reader is GrantReader under a fresh name, returned as the Access to open with.
func Reader(t testing.TB, d datasets.Dialect, targets ...string) sandbox.Access {
	t.Helper()
	name := FreshReaderName()
	GrantReader(t, d, name, targets...)
	return sandbox.Access{Reader: name}
}

// StoredPassword reads the password EnsureReader kept for name.
func StoredPassword(t *testing.T, admin *sql.DB, name string) string {
	t.Helper()
	var pw string
	if err := admin.QueryRow("SELECT password FROM " + sandbox.ReaderMeta + ".readers WHERE name = " + sandbox.SQLString(name)).Scan(&pw); err != nil {
		t.Fatalf("stored password of %s: %v", name, err)
	}
	return pw
}

// ChinookQueries run unchanged on SQLite and PostgreSQL; MySQL gets backticks for the double
// quotes. ordered: compare row order too.
var ChinookQueries = []struct {
	SQL     string
	Ordered bool
}{
	{`SELECT count(*) FROM Track`, false},
	{`SELECT Name, Milliseconds FROM Track ORDER BY Milliseconds DESC, TrackId LIMIT 10`, true},
	{`SELECT g.Name, count(*) FROM Track t JOIN Genre g ON g.GenreId = t.GenreId GROUP BY g.Name`, false},
	{`SELECT BillingCountry, sum(Total) FROM Invoice GROUP BY BillingCountry`, false},
	{`SELECT avg(UnitPrice), min(UnitPrice), max(UnitPrice) FROM Track`, false},
	{`SELECT count(*) - count(Composer) FROM Track`, false},
	{`SELECT FirstName, Company, Fax, State FROM Customer WHERE Country = 'Brazil'`, false},
	{`SELECT InvoiceDate, Total FROM Invoice WHERE InvoiceId IN (1, 2, 100)`, false},
	{ChinookMonthSQL, true},
	{`SELECT count(*) FROM Invoice WHERE InvoiceDate >= '2010-06-01' AND InvoiceDate < '2011-01-01'`, false},
	{`SELECT min(InvoiceDate), max(HireDate) FROM Invoice, Employee`, false},
	{`SELECT ar.Name, count(*) AS n FROM Artist ar JOIN Album al ON al.ArtistId = ar.ArtistId GROUP BY ar.ArtistId, ar.Name ORDER BY n DESC, ar.ArtistId LIMIT 5`, true},
	{`SELECT e.FirstName, m.FirstName FROM Employee e LEFT JOIN Employee m ON e.ReportsTo = m.EmployeeId`, false},
	{`SELECT BirthDate, HireDate FROM Employee ORDER BY EmployeeId`, true},
	{`SELECT Title FROM Album WHERE lower(Title) LIKE 'the %'`, false},
	{`SELECT t.Name, il.UnitPrice * il.Quantity FROM InvoiceLine il JOIN Track t ON t.TrackId = il.TrackId WHERE il.InvoiceId = 5`, false},
	{`SELECT count(DISTINCT BillingCity) FROM Invoice`, false},
	{`SELECT CustomerId, sum(Total) AS s FROM Invoice GROUP BY CustomerId HAVING sum(Total) > 45`, false},
	{`SELECT round(sum(Total), 2), round(avg(Total), 4) FROM Invoice`, false},
	{`SELECT Name FROM MediaType WHERE MediaTypeId NOT IN (SELECT MediaTypeId FROM Track) ORDER BY MediaTypeId`, true},
	{`SELECT p.Name, count(pt.TrackId) FROM Playlist p LEFT JOIN PlaylistTrack pt ON pt.PlaylistId = p.PlaylistId GROUP BY p.PlaylistId, p.Name`, false},
}

// ChinookMonthSQL groups by month with SQLite's text functions on the DATETIME column.
const ChinookMonthSQL = `SELECT substr(InvoiceDate, 1, 7) AS m, count(*) FROM Invoice GROUP BY substr(InvoiceDate, 1, 7) ORDER BY m`

// ChinookDialectSQL rewrites the queries that need a dialect's own date functions (the
// copies hold InvoiceDate as timestamp/DATETIME).
var ChinookDialectSQL = map[datasets.Dialect]map[string]string{
	datasets.Postgres: {ChinookMonthSQL: `SELECT to_char(InvoiceDate, 'YYYY-MM') AS m, count(*) FROM Invoice GROUP BY to_char(InvoiceDate, 'YYYY-MM') ORDER BY m`},
	datasets.MySQL:    {ChinookMonthSQL: `SELECT DATE_FORMAT(InvoiceDate, '%Y-%m') AS m, count(*) FROM Invoice GROUP BY DATE_FORMAT(InvoiceDate, '%Y-%m') ORDER BY m`},
}

// ServerCounts reads the row count of every table of a copy.
func ServerCounts(t *testing.T, db sandbox.DB, tables []sandbox.Table) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, tb := range tables {
		r := MustExec(t, db, "SELECT count(*) FROM "+tb.Name, sandbox.ExecOptions{}) // unquoted: folds in PostgreSQL
		if !r.OK() {
			t.Fatalf("count %s: %+v", tb.Name, r)
		}
		out[tb.Name] = r.Rows[0][0].(int64)
	}
	return out
}

// CopyServer returns an admin connection to dialect d's test server and the server's DSN.
func CopyServer(tb testing.TB, d datasets.Dialect) (*sql.DB, string) {
	tb.Helper()
	if d == datasets.Postgres {
		return PGAdmin(tb), shared.PostgresDSN()
	}
	return MyAdmin(tb), shared.MySQLDSN()
}

// DropCopy removes a copy CopySQLite made, with its MySQL marker row.
func DropCopy(admin *sql.DB, d datasets.Dialect, target string) {
	if d == datasets.Postgres {
		admin.Exec("DROP SCHEMA IF EXISTS " + sandbox.QuoteIdent(d, target) + " CASCADE")
		return
	}
	admin.Exec("DROP DATABASE IF EXISTS " + sandbox.QuoteIdent(d, target))
	admin.Exec("DELETE FROM "+sandbox.ReaderMeta+".copies WHERE target = ?", target)
}

// OpenCopy opens a copy CopySQLite made, as a reader of its own granted the copy, through the
// registered dialect d (its Engine is closed when the test ends).
func OpenCopy(t testing.TB, ctx context.Context, d datasets.Dialect, dsn, target string) (sandbox.DB, error) {
	acc := Reader(t, d, target)
	return openTask(t, ctx, d, &sandbox.Connector{DSN: map[datasets.Dialect]string{d: dsn}, Access: acc}, datasets.Task{ID: target, DBID: target})
}

// OpenFile opens the SQLite file at path through the registered SQLite dialect; it is closed
// when the test ends.
func OpenFile(t testing.TB, path string) sandbox.DB {
	t.Helper()
	db, err := openTask(t, context.Background(), datasets.SQLite, &sandbox.Connector{}, datasets.Task{ID: "file", DBPath: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// openTask opens task t's database in dialect d through the registered dialect's own Engine
// (Dialect.Connect with c's settings), without the Connector's cache: the DB is the caller's
// to close, the Engine is closed when the test ends.
func openTask(tb testing.TB, ctx context.Context, d datasets.Dialect, c *sandbox.Connector, t datasets.Task) (sandbox.DB, error) {
	dl, err := sandbox.Check(d)
	if err != nil {
		return nil, err
	}
	eng, err := dl.Connect(ctx, c)
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { eng.Close() })
	return eng.Open(ctx, t)
}

// CopyChinook copies Chinook into dialect d under a fresh name, dropped when the test ends.
func CopyChinook(t *testing.T, d datasets.Dialect) (sandbox.DB, sandbox.CopyStats) {
	t.Helper()
	src := shared.Path(t, "data/multi/chinook/Chinook_Sqlite.sqlite")
	ctx := context.Background()
	target := SrvName("cs_chinook")
	admin, dsn := CopyServer(t, d)
	t.Cleanup(func() { DropCopy(admin, d, target) })
	st, err := sandbox.CopySQLite(ctx, src, d, dsn, target)
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped || st.Tables != 11 || st.Rows != 15607 || st.PrimaryKeys != 11 || st.ForeignKeys != 11 {
		t.Errorf("stats: %+v", st)
	}
	for _, n := range st.Notes {
		t.Logf("note: %s", n)
	}
	// A second copy of the same file is skipped.
	again, err := sandbox.CopySQLite(ctx, src, d, dsn, target)
	if err != nil || !again.Skipped || again.Marker != st.Marker {
		t.Errorf("second copy: %+v %v", again, err)
	}
	db, err := OpenCopy(t, ctx, d, dsn, target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, st
}

// Sum is the SHA-256 of the file at p.
func Sum(t *testing.T, p string) [32]byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// HostileFor lists statements that must each be refused, fail, or be stopped at the deadline,
// leaving the data and the server as they were, in every engine. tag makes the names of what
// they would create (a replication slot, files, roles) unique to one test run.
func HostileFor(tag string) []string {
	q := []string{
		"DROP TABLE Album", "DELETE FROM Album", "UPDATE Album SET Title = 'x'", "INSERT INTO Album VALUES (9999, 'x', 1)",
		"CREATE TABLE pwned (x int)", "TRUNCATE Album", "ALTER TABLE Album ADD COLUMN x int",
		"ATTACH DATABASE '/tmp/x.db' AS x", "PRAGMA writable_schema=1", "VACUUM INTO '/tmp/x.db'",
		"SELECT 1; DROP TABLE Album", "SELECT 1; DELETE FROM Album;",
		"WITH d AS (DELETE FROM Album RETURNING *) SELECT count(*) FROM d",
		"WITH d AS (SELECT 1) UPDATE Album SET Title = 'x'",
		"SELECT * INTO pwned FROM Album",
		"EXPLAIN ANALYZE DELETE FROM Album",
		// PostgreSQL's read-only transaction does not stop what EXPLAIN ANALYZE creates.
		"EXPLAIN ANALYZE CREATE TEMP TABLE pwned AS SELECT * FROM Album", "EXPLAIN (ANALYZE) SELECT * INTO TEMP pwned FROM Album",
		"COPY Album TO PROGRAM 'touch /tmp/pwned'", "SET search_path = public", "SET transaction_read_only = off",
		"SELECT set_config('transaction_read_only', 'off', true)",
		"SELECT pg_read_file('/etc/passwd')", `SELECT "pg_read_file"('/etc/passwd')`,
		"SELECT load_file('/etc/passwd')", "SELECT load_extension('/tmp/x.so')",
		"SELECT * FROM Album INTO OUTFILE '/tmp/pwned.txt'", "SELECT 1 /*!, load_file('/etc/passwd') */",
		"SELECT query_to_xml('delete from album', true, true, '')",
		"SELECT pg_sleep(60)", "SELECT SLEEP(60)", "SELECT BENCHMARK(1000000000000, md5('x'))",
		"SELECT count(*) FROM Track a, Track b, Track c",
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
		"LOCK TABLE Album", "CALL nothing()", "GRANT ALL ON Album TO PUBLIC",
		"SELECT rolpassword FROM pg_authid",
		"SELECT query FROM pg_stat_activity", "SELECT * FROM information_schema.processlist",
		"SELECT length(randomblob(1000000000))", "SELECT length(zeroblob(1000000000))",
		// SQLite's list of attached files names the task file's path on this machine.
		"SELECT file FROM pragma_database_list", "SELECT * FROM main.PRAGMA_DATABASE_LIST",
	}
	slot := "cs_slot_" + tag
	file := "/tmp/cs_pwn_" + tag
	q = append(q, PGServerStatements(slot, file, "cs_pwn_"+tag)...)
	q = append(q, MySQLServerStatements(file, "cs_pwn_"+tag)...)
	q = append(q,
		// The PostgreSQL catalog of slots, and the same functions spelled otherwise.
		"SELECT slot_name FROM pg_replication_slots",
		`SELECT "pg_create_physical_replication_slot"('`+slot+`_q')`,
		"SELECT pg_catalog.pg_switch_wal()", "SELECT pg_catalog . PG_SWITCH_WAL ()",
		"SELECT * FROM pg_settings WHERE name = 'data_directory'",
		"SELECT setting FROM pg_catalog.pg_settings WHERE setting LIKE '/%'",
		"SELECT current_setting('ssl_cert_file')",
		// Dynamic SQL would carry any name past the screen: refused itself.
		"SELECT * FROM ts_stat('SELECT to_tsvector(set_config(''role'', ''postgres'', false))')",
		"SELECT * FROM ts_stat('SELECT to_tsvector(pg_create_physical_replication_slot(''"+slot+"_d'')::text)')",
		// MySQL's credentials table however the reference is spelled.
		"SELECT user, plugin FROM mysql .user", "SELECT user, plugin FROM mysql/**/.user",
		"SELECT user, plugin FROM `mysql` .`user`", "SELECT user FROM `mysql`/* x */.`user`",
		"SELECT user FROM mysql -- x\n.user", "SELECT user FROM mysql # x\n.user", "SELECT User FROM MySQL.USER",
		"SELECT user FROM mysql\n\t.\nuser", `SELECT user FROM "mysql"."user"`,
		"SELECT * FROM mysql.user", "SELECT * FROM `mysql`.`user`",
		"SELECT user, host FROM mysql.global_priv", "SELECT * FROM mysql.db",
		// MySQL server variables hold its paths; any user may read them.
		"SELECT @@datadir", "SELECT @@GLOBAL.basedir, @@plugin_dir", "SELECT @@log_error",
		"SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES WHERE VARIABLE_NAME = 'DATADIR'",
		"SELECT GLOBAL_VALUE FROM information_schema.SYSTEM_VARIABLES WHERE VARIABLE_NAME = 'DATADIR'",
		"SELECT * FROM information_schema.SESSION_VARIABLES",
	)
	return q
}

// PGServerStatements reach the PostgreSQL server beyond the database (replication slots, WAL,
// logs, backends, settings, files, roles): run unscreened as the reader, each must fail with a
// permission error (or a read-only transaction's refusal) and change nothing.
func PGServerStatements(slot, file, role string) []string {
	return []string{
		"SELECT pg_create_physical_replication_slot('" + slot + "')",
		"SELECT pg_create_physical_replication_slot('" + slot + "_r', true)",
		"SELECT * FROM pg_create_logical_replication_slot('" + slot + "_l', 'test_decoding')",
		"SELECT pg_drop_replication_slot('" + slot + "')",
		"SELECT pg_switch_wal()",
		"SELECT * FROM pg_ls_waldir()",
		"SELECT pg_create_restore_point('" + slot + "')",
		"SELECT pg_backup_start('" + slot + "')",
		"SELECT current_setting('data_directory')",
		"SELECT current_setting('config_file'), current_setting('hba_file')",
		"SELECT * FROM pg_file_settings",
		"SELECT * FROM pg_hba_file_rules",
		"SELECT * FROM pg_ls_logdir()",
		"SELECT pg_current_logfile()",
		"SELECT pg_rotate_logfile()",
		"SELECT pg_reload_conf()",
		"SELECT pg_read_file('postgresql.auto.conf')",
		"SELECT * FROM pg_ls_dir('.')",
		"SELECT pg_stat_file('pg_hba.conf')",
		"SELECT pg_log_backend_memory_contexts(pg_backend_pid())",
		"SELECT pg_replication_origin_create('" + slot + "')",
		"SELECT lo_import('/etc/passwd')",
		"SELECT lo_export(1, '" + file + "')",
		"COPY (SELECT 1) TO '" + file + "'",
		"COPY (SELECT 1) TO PROGRAM 'touch " + file + "'",
		"SELECT * INTO " + role + " FROM Album",
		"CREATE ROLE " + role + " SUPERUSER",
		"ALTER ROLE CURRENT_USER SUPERUSER",
		"ALTER ROLE CURRENT_USER PASSWORD 'x'",
		"ALTER ROLE CURRENT_USER SET default_transaction_read_only = off",
		"SET ROLE postgres",
		"SET SESSION AUTHORIZATION postgres",
		"SELECT set_config('role', 'postgres', false)",
		"SELECT set_config('session_authorization', 'postgres', false)",
		"SELECT * FROM ts_stat('SELECT to_tsvector(set_config(''role'', ''postgres'', false))')",
		"SELECT rolpassword FROM pg_authid",
		"SELECT * FROM " + sandbox.ReaderMeta + ".readers",
		// The task role is not the login's: the reader's other sessions (another run's
		// episodes, this one's own backend) are out of its reach.
		"SELECT pg_cancel_backend(pg_backend_pid())",
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = session_user",
	}
}

// SQLiteServerStatements reach past the SQLite file (other files, extensions, the file's path,
// settings): run unscreened, SQLite's authorizer must refuse each.
func SQLiteServerStatements(file string) []string {
	return []string{
		"ATTACH DATABASE '" + file + ".db' AS x", "ATTACH DATABASE ':memory:' AS m", "VACUUM INTO '" + file + ".db'",
		"PRAGMA writable_schema = 1", "PRAGMA query_only = 0", "PRAGMA temp_store_directory = '/tmp'",
		"SELECT load_extension('/usr/lib/x86_64-linux-gnu/libc.so.6')", "SELECT fts3_tokenizer('simple')",
		"SELECT file FROM pragma_database_list", "CREATE TEMP TABLE pwned (x)", "DELETE FROM Album", "BEGIN IMMEDIATE",
	}
}

// MySQLServerStatements are PGServerStatements for MySQL/MariaDB.
func MySQLServerStatements(file, user string) []string {
	return []string{
		"SELECT user, plugin, authentication_string FROM mysql.user",
		"SELECT user, plugin FROM mysql .user",
		"SELECT * FROM mysql.global_priv",
		"SELECT * FROM " + sandbox.ReaderMeta + ".readers",
		"SELECT load_file('/etc/passwd')",
		"SELECT 1 INTO OUTFILE '" + file + "'",
		"SELECT 1 INTO DUMPFILE '" + file + "_d'",
		"SELECT * FROM performance_schema.threads",
		"CREATE USER '" + user + "'@'localhost'",
		"CREATE TABLE " + user + " (x INT)",
		"GRANT ALL ON *.* TO CURRENT_USER",
		"SET GLOBAL max_connections = 1",
	}
}

// ScreenOnly are statements a reader's permissions allow and a read-only transaction does not
// stop, which therefore only the screen refuses; they are never run unscreened on the shared
// test servers. PostgreSQL: every role may write a WAL message, even read-only, and signal its
// own role's other sessions (another run's episodes). MariaDB: every user may change its own
// password and kill its own other connections.
var ScreenOnly = map[datasets.Dialect][]string{
	datasets.Postgres: {
		"SELECT pg_logical_emit_message(false, 'x', repeat('x', 1000000))",
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = current_user",
		"SELECT pg_cancel_backend(1)",
		"SELECT pg_advisory_lock(1)",
	},
	datasets.MySQL: {
		"SET PASSWORD = PASSWORD('x')", "ALTER USER CURRENT_USER IDENTIFIED BY 'x'", "KILL 1", "KILL QUERY 1",
		"SELECT GET_LOCK('chainedsql-copy:x', 0)",
	},
}

// RolledBack are statements a reader may run that write only inside its transaction, which
// every execution rolls back: after the suite, nothing of them remains.
var RolledBack = map[datasets.Dialect][]string{
	datasets.Postgres: {"SELECT lo_from_bytea(0, 'x')", "SELECT lo_create(0)"},
}

// RawFunc runs q on db without the screen, within timeout, keeping at most maxRows rows (0: all):
// the server's permissions (on SQLite, the authorizer) are all that stands in its way. Each
// engine's tests give theirs (its DB's own run).
type RawFunc func(ctx context.Context, db sandbox.DB, q string, timeout time.Duration, maxRows int) (*sandbox.Result, error)

// PermissionError reports whether an engine error says the statement lacked a privilege or
// was refused by the read-only transaction.
func PermissionError(d datasets.Dialect, msg string) bool {
	m := strings.ToLower(msg)
	switch d {
	case datasets.Postgres:
		return strings.Contains(m, "sqlstate 42501") || strings.Contains(m, "sqlstate 25006")
	case datasets.SQLite:
		return strings.Contains(m, "not authorized") || strings.Contains(m, "authorization denied")
	}
	for _, s := range []string{"denied", "read only", "read-only", "you need"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// WALName matches a PostgreSQL WAL segment file name (timeline, log, segment: 24 hex digits).
var WALName = regexp.MustCompile(`\b[0-9A-F]{24}\b`)

// MySQLHash matches a mysql_native_password hash.
var MySQLHash = regexp.MustCompile(`\*[0-9A-F]{40}`)

// Leaks returns the first of needles found in any cell of r, or "".
func Leaks(r *sandbox.Result, needles []string, patterns ...*regexp.Regexp) string {
	for _, row := range r.Rows {
		for _, v := range row {
			s := fmt.Sprint(v)
			if b, ok := v.([]byte); ok {
				s = string(b)
			}
			for _, n := range needles {
				if strings.Contains(s, n) {
					return n
				}
			}
			for _, p := range patterns {
				if m := p.FindString(s); m != "" {
					return m
				}
			}
		}
	}
	return ""
}

// ScanRelations reads each of rels (qualified names) as db's reader, unscreened (raw), unless
// the screen refuses it, and fails the test for any cell holding one of needles or patterns.
func ScanRelations(t *testing.T, db sandbox.DB, raw RawFunc, rels, needles []string, patterns ...*regexp.Regexp) {
	t.Helper()
	read, screened := 0, 0
	for _, rel := range rels {
		q := "SELECT * FROM " + rel + " LIMIT 5000"
		if _, reason := sandbox.Screen(q, db.Dialect()); reason != "" {
			screened++
			continue
		}
		if rel == "information_schema.element_types" {
			continue // array element types only, and it takes over 10 s on a server with many schemas
		}
		r, err := raw(context.Background(), db, q, 10*time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Outcome == sandbox.OutcomeTimeout {
			t.Errorf("%s: timed out, so it was not checked", rel)
		}
		if !r.OK() {
			continue // not readable by the reader
		}
		read++
		if leak := Leaks(r, needles, patterns...); leak != "" {
			t.Errorf("%s shows %q to the reader", rel, leak)
		}
	}
	t.Logf("%d catalog relations read by the reader, %d refused by the screen", read, screened)
}

// HostileStatements runs the hostile suite (HostileFor, named by tag) on db, Chinook in db's
// engine (the SQLite file itself, or a copy opened as a reader), with raw its engine's
// unscreened runner: every statement is refused, fails or stops at its deadline, in one line;
// the statements that reach the server (on SQLite: past the file) fail with a permission error
// even unscreened; the data is intact and neither the SQLite file nor any file they name is
// written. The engine's test checks its server for what tag names (ServerLeftovers).
func HostileStatements(t *testing.T, db sandbox.DB, raw RawFunc, tag string) {
	const deadline = 2 * time.Second
	ctx := context.Background()
	src := shared.Path(t, "data/multi/chinook/Chinook_Sqlite.sqlite")
	before := Sum(t, src)
	lite := OpenFile(t, src)
	schema, err := sandbox.Introspect(ctx, lite, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := ServerCounts(t, lite, schema.Tables)
	file := "/tmp/cs_pwn_" + tag
	hostile := HostileFor(tag)
	d := db.Dialect()
	for _, q := range hostile {
		start := time.Now()
		r := MustExec(t, db, q, sandbox.ExecOptions{Timeout: deadline, MaxRows: 10})
		took := time.Since(start)
		t.Logf("%-70.70q %-8s %5dms %.90s", q, r.Outcome, took.Milliseconds(), r.Error)
		// MariaDB ends recursion itself at max_recursive_iterations (1000), with a result.
		bounded := d == datasets.MySQL && strings.HasPrefix(q, "WITH RECURSIVE") && r.OK() && r.Rows[0][0] == int64(1001)
		if r.Outcome == sandbox.OutcomeOK && !bounded {
			t.Errorf("%q: ran (%v)", q, r.Rows)
		}
		if !r.OK() && (r.Error == "" || strings.ContainsAny(r.Error, "\r\n")) {
			t.Errorf("%q: %s %q: want what happened in one line", q, r.Outcome, r.Error)
		}
		if took > deadline+time.Second {
			t.Errorf("%q: %s after %s, past the %s deadline", q, r.Outcome, took, deadline)
		}
	}
	// The layer below the screen: the reader's own permissions.
	var server []string
	switch d {
	case datasets.Postgres:
		server = PGServerStatements("cs_slot_"+tag, file, "cs_pwn_"+tag)
	case datasets.MySQL:
		server = MySQLServerStatements(file, "cs_pwn_"+tag)
	case datasets.SQLite:
		server = SQLiteServerStatements(file)
	}
	for _, q := range server {
		r, err := raw(ctx, db, q, deadline, 10)
		if err != nil {
			t.Fatalf("%q unscreened: %v", q, err)
		}
		// MariaDB's LOAD_FILE without the FILE privilege reads nothing: NULL.
		nothing := r.OK() && len(r.Rows) == 1 && r.Rows[0][0] == nil && strings.Contains(strings.ToLower(q), "load_file")
		if !nothing && (r.Outcome != sandbox.OutcomeError || !PermissionError(d, r.Error)) {
			t.Errorf("%q unscreened as the reader: %s %q %v, want a permission error", q, r.Outcome, r.Error, r.Rows)
		}
	}
	for _, q := range ScreenOnly[d] {
		if r := MustExec(t, db, q, sandbox.ExecOptions{}); r.Outcome != sandbox.OutcomeRefused {
			t.Errorf("%q: %s %q, want it refused by the screen", q, r.Outcome, r.Error)
		}
	}
	for _, q := range RolledBack[d] {
		if r := MustExec(t, db, q, sandbox.ExecOptions{}); r.Outcome != sandbox.OutcomeRefused {
			t.Errorf("%q: %s %q, want it refused by the screen", q, r.Outcome, r.Error)
		}
		if r, err := raw(ctx, db, q, deadline, 10); err != nil || !r.OK() && !PermissionError(d, r.Error) {
			t.Errorf("%q unscreened: %v %+v", q, err, r)
		}
	}
	if got := ServerCounts(t, db, schema.Tables); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("row counts changed: %v, want %v", got, want)
	}
	if r := MustExec(t, db, "SELECT count(*) FROM pwned", sandbox.ExecOptions{}); r.OK() {
		t.Error("a table was created")
	}
	if r := MustExec(t, db, "SELECT Title FROM Album WHERE AlbumId = 1", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != "For Those About To Rock We Salute You" {
		t.Errorf("album 1: %+v", r)
	}
	t.Cleanup(func() {
		if Sum(t, src) != before {
			t.Error("the SQLite file changed")
		}
		for _, p := range []string{"/tmp/pwned.txt", "/tmp/pwned", file, file + "_d", file + ".db"} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("%s was written", p)
			}
		}
	})
}

// HostileTag names what one run of HostileStatements would create (files, slots, roles, users).
func HostileTag() string {
	return fmt.Sprintf("%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
}

// ServerLeftovers checks, when the test ends, that dialect d's server holds nothing a
// HostileStatements run named by tag would have created: PostgreSQL replication slots, their
// directories, roles and the readers' large objects; MySQL users.
func ServerLeftovers(t *testing.T, d datasets.Dialect, tag string) {
	t.Cleanup(func() {
		if d == datasets.Postgres {
			pg := PGAdmin(t)
			var slots, roles int
			if err := pg.QueryRow("SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1), (SELECT count(*) FROM pg_roles WHERE rolname LIKE $1)", "cs_%"+tag+"%").Scan(&slots, &roles); err != nil {
				t.Fatal(err)
			}
			if slots != 0 || roles != 0 {
				t.Errorf("%d replication slots, %d roles created", slots, roles)
			}
			var slotFiles int
			if err := pg.QueryRow("SELECT count(*) FROM pg_ls_dir('pg_replslot') f WHERE f LIKE $1", "%"+tag+"%").Scan(&slotFiles); err != nil || slotFiles != 0 {
				t.Errorf("%d slot directories in pg_replslot: %v", slotFiles, err)
			}
			var largeObjects int
			if err := pg.QueryRow("SELECT count(*) FROM pg_largeobject_metadata m JOIN pg_roles r ON r.oid = m.lomowner WHERE r.rolname LIKE 'cs_rd_%'").Scan(&largeObjects); err != nil || largeObjects != 0 {
				t.Errorf("%d large objects left by readers: %v", largeObjects, err)
			}
			return
		}
		var users int
		if err := MyAdmin(t).QueryRow("SELECT count(*) FROM mysql.user WHERE User LIKE ?", "%"+tag+"%").Scan(&users); err != nil || users != 0 {
			t.Errorf("%d MySQL users created: %v", users, err)
		}
	})
}

// CrossTaskIsolation: one reader granted two tasks' databases (as distill load leaves it
// after loading a benchmark), executing for task A in a Connector that also serves task B.
// Statements of A, run unscreened, cannot read B's rows (directly, quoted, or through a regclass
// built at run time), see B's statement text while it runs (nor, on MySQL, screened, B's
// database or role in any information_schema table), or leave session state (user variables,
// LAST_INSERT_ID, named and advisory locks) that a later execution on the pooled connection
// sees.
func CrossTaskIsolation(t *testing.T, d datasets.Dialect, rawRun RawFunc) {
	ctx := context.Background()
	var a, b string
	if d == datasets.Postgres {
		admin := PGAdmin(t)
		a = PGSchema(t, admin, "CREATE TABLE t (x int)", "INSERT INTO t VALUES (1)")
		b = PGSchema(t, admin, "CREATE TABLE secret (x int)", "INSERT INTO secret VALUES (4242)")
	} else {
		admin := MyAdmin(t)
		a = MyDatabase(t, admin, "CREATE TABLE t (x INT)", "INSERT INTO t VALUES (1)")
		b = MyDatabase(t, admin, "CREATE TABLE secret (x INT)", "INSERT INTO secret VALUES (4242)")
	}
	acc := Reader(t, d, a, b)
	c := &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN(), datasets.MySQL: shared.MySQLDSN()}, Access: acc}
	defer c.Close()
	dbA, err := c.Open(ctx, d, datasets.Task{ID: "a", DBID: a})
	if err != nil {
		t.Fatal(err)
	}
	dbB, err := c.Open(ctx, d, datasets.Task{ID: "b", DBID: b})
	if err != nil {
		t.Fatal(err)
	}
	raw := func(db sandbox.DB, q string) *sandbox.Result {
		t.Helper()
		r, err := rawRun(ctx, db, q, 5*time.Second, 10)
		if err != nil {
			t.Fatalf("%q: %v", q, err)
		}
		return r
	}
	if r := raw(dbB, "SELECT x FROM secret"); !r.OK() || r.Rows[0][0] != int64(4242) {
		t.Fatalf("task B reads its own table: %+v", r)
	}
	if r := raw(dbA, "SELECT x FROM t"); !r.OK() {
		t.Fatalf("task A reads its own table: %+v", r)
	}
	q := sandbox.QuoteIdent(d, b)
	reads := []string{"SELECT x FROM " + b + ".secret", "SELECT x FROM " + q + "." + sandbox.QuoteIdent(d, "secret"),
		"SELECT * FROM (SELECT x FROM " + b + ".secret) s"}
	if d == datasets.Postgres {
		reads = append(reads,
			"SELECT table_to_xml('"+b+".secret'::regclass, true, true, '')",
			"SELECT table_to_xml((SELECT oid FROM pg_class WHERE relname = 'secret' AND relnamespace = '"+b+"'::regnamespace)::regclass, true, true, '')",
			"SELECT table_to_xml((SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = concat('"+b[:4]+"', '"+b[4:]+"') AND c.relname = 'secret')::regclass, true, true, '')")
	}
	for _, s := range reads {
		r := raw(dbA, s)
		if r.Outcome != sandbox.OutcomeError || !PermissionError(d, r.Error) {
			t.Errorf("task A, unscreened: %q: %s %q %v, want a permission error", s, r.Outcome, r.Error, r.Rows)
		}
		if r := MustExec(t, dbA, s, sandbox.ExecOptions{}); r.OK() {
			t.Errorf("task A: %q ran: %v", s, r.Rows)
		}
	}

	// B's statement text, while it runs, is not visible to A.
	marker := fmt.Sprintf("cs_marker_%d", time.Now().UnixNano())
	sleep := map[datasets.Dialect]string{datasets.Postgres: "SELECT pg_sleep(60), '" + marker + "'", datasets.MySQL: "SELECT SLEEP(60), '" + marker + "'"}[d]
	bctx, stopB := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); dbB.Exec(bctx, sleep, sandbox.ExecOptions{Timeout: time.Minute}) }()
	running := map[datasets.Dialect]string{datasets.Postgres: "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()",
		datasets.MySQL: "SELECT count(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE CONCAT('%', ?, '%') AND ID <> CONNECTION_ID()"}[d]
	admin := map[datasets.Dialect]func(testing.TB) *sql.DB{datasets.Postgres: PGAdmin, datasets.MySQL: MyAdmin}[d](t)
	for n := 0; n == 0; time.Sleep(50 * time.Millisecond) {
		if err := admin.QueryRow(running, marker).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	var rels []string
	if d == datasets.Postgres {
		rels, err = sandbox.QueryStrings(ctx, PGAdmin(t), `SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname IN ('pg_catalog', 'information_schema') AND c.relkind IN ('r', 'v', 'm') AND c.relname <> 'element_types' ORDER BY 1`)
		rels = append(rels, "pg_stat_get_activity(NULL)")
	} else {
		rels, err = sandbox.QueryStrings(ctx, MyAdmin(t), "SELECT CONCAT('information_schema.', TABLE_NAME) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'information_schema'")
	}
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, rel := range rels {
		s := "SELECT * FROM " + rel
		var r *sandbox.Result
		needles := []string{marker}
		if d == datasets.Postgres {
			r = raw(dbA, s) // PostgreSQL: the privileges alone (TestPostgresCatalogIsolation: B's names)
		} else {
			// MariaDB shows a user its own threads, and the roles granted to it (one per
			// task, named after its database): the screen.
			r = MustExec(t, dbA, s, sandbox.ExecOptions{Timeout: 5 * time.Second})
			needles = append(needles, b)
		}
		if r.OK() {
			seen++
			if leak := Leaks(r, needles); leak != "" {
				t.Errorf("task A sees task B's %q in %s", leak, rel)
			}
		}
	}
	stopB()
	<-done
	t.Logf("%d catalog relations read by task A while task B ran", seen)

	// Session state set by one execution is gone in the next.
	var set, get []string
	if d == datasets.Postgres {
		set = []string{"SELECT pg_advisory_lock(4242)", "SELECT set_config('work_mem', '1GB', false), set_config('search_path', 'cs_elsewhere', false)"}
		get = []string{"SELECT current_setting('work_mem') <> '1GB' AND current_setting('search_path') <> 'cs_elsewhere', (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND pid = pg_backend_pid()) = 0"}
	} else {
		set = []string{"SELECT 4242 INTO @cs_leak", "SELECT @cs_leak2 := 4242", "SELECT LAST_INSERT_ID(4242)", "SELECT GET_LOCK('" + marker + "', 0)"}
		get = []string{"SELECT @cs_leak IS NULL AND @cs_leak2 IS NULL AND LAST_INSERT_ID() = 0, IS_USED_LOCK('" + marker + "') IS NULL"}
	}
	for _, db := range []sandbox.DB{dbA, dbB} {
		for i := 0; i < 8; i++ { // over the pool's connections
			for _, s := range set {
				raw(db, s)
			}
			for _, s := range get {
				// A closed MySQL connection's locks go as the server reaps it: allow it a moment.
				r := raw(db, s)
				for try := 0; try < 20 && r.OK() && fmt.Sprint(r.Rows[0][1]) == "0"; try++ {
					time.Sleep(50 * time.Millisecond)
					r = raw(db, s)
				}
				truth := func(v any) bool { return v == true || v == int64(1) }
				if !r.OK() || !truth(r.Rows[0][0]) || !truth(r.Rows[0][1]) {
					t.Fatalf("after %q, %q: %+v: the state of one execution reached the next", set, s, r)
				}
			}
		}
	}
}

// ManyRowsSQL is a statement of 2,000,000 rows (1,000 × 1,000 × 2), the same on every engine,
// each row two numbers and a 200-byte text: over 400 MB of the server's reply in all (MySQL's
// text protocol about 215 bytes a row, PostgreSQL's about 230), past sandbox.MaxResultBytes,
// yet a few hundred bytes at a time. (MariaDB stops a recursion at 1,000 iterations.)
var ManyRowsSQL = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000) " +
	"SELECT a.n, b.n, '" + strings.Repeat("x", 200) + "' FROM c a, c b, (SELECT 1 AS k UNION ALL SELECT 2) d"

// ManyRowsTotal is ManyRowsSQL's row count.
const ManyRowsTotal = 2_000_000

// ManyRowsHeap bounds the growth of the heap in use while ManyRowsSQL runs: generous for what
// streaming holds (a driver's buffer, the 20 rows kept, garbage between collections), far under
// what the rows themselves (over 400 MB) or the result limit (256 MiB) would take.
const ManyRowsHeap = 64 << 20

// HeapGrowth runs f and returns by how much the process's heap in use (runtime.MemStats
// HeapInuse, sampled every 10 ms) rose above what it was before, at most.
func HeapGrowth(f func()) int64 {
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	stop, sampled := make(chan struct{}), make(chan uint64, 1)
	go func() {
		peak := base.HeapInuse
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stop:
				sampled <- peak
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	func() {
		defer close(stop) // also when f ends the test
		f()
	}()
	return int64(<-sampled) - int64(base.HeapInuse)
}

// ManyRows: a statement of millions of small rows, whose reply passes the result limit though
// none of its rows comes near it, is ok on every engine, with its exact total and the first 20
// rows kept, as a step runs it; the process's heap in use (sampled every few milliseconds) grows
// by less than ManyRowsHeap while it streams; db answers after.
func ManyRows(t *testing.T, db sandbox.DB) {
	start := time.Now()
	var r *sandbox.Result
	grew := HeapGrowth(func() { r = MustExec(t, db, ManyRowsSQL, sandbox.ExecOptions{MaxRows: 20, Timeout: 60 * time.Second}) })
	t.Logf("%s: %s, %d rows (%d kept) in %s; the heap in use grew by %d MiB at most",
		db.Dialect(), r.Outcome, r.Total, len(r.Rows), time.Since(start).Round(time.Millisecond), grew>>20)
	if !r.OK() || r.Total != ManyRowsTotal || len(r.Rows) != 20 || !r.Truncated || len(r.Rows[19]) != 3 || r.Rows[19][2] != strings.Repeat("x", 200) {
		t.Errorf("%s: %s, total %d, %d rows kept, %q; want ok, total %d, 20 rows", db.Dialect(), r.Outcome, r.Total, len(r.Rows), r.Error, ManyRowsTotal)
	}
	if grew > ManyRowsHeap {
		t.Errorf("%s: the heap in use grew by %d MiB while the rows streamed, want under %d MiB", db.Dialect(), grew>>20, ManyRowsHeap>>20)
	}
	if r := MustExec(t, db, "SELECT 1", sandbox.ExecOptions{}); !r.OK() {
		t.Errorf("%s: after the many rows: %+v", db.Dialect(), r)
	}
}

// ResultSize: a statement whose result would hold more than the result limit in the process
// (many rows kept, as a judged prediction keeps them all, or one huge row) gets an error saying
// so, in one line, instead of the memory; db still answers after. On MySQL, whose screen refuses
// REPEAT, raw (the engine's unscreened runner) reaches the cap. On PostgreSQL the huge row is
// refused before it is read: the heap in use grows by less than ManyRowsHeap.
func ResultSize(t *testing.T, db sandbox.DB, raw RawFunc) {
	ctx := context.Background()
	rows := "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 300) "
	cols := func(n int, expr string) string {
		c := make([]string, n)
		for i := range c {
			c[i] = fmt.Sprintf(expr, i)
		}
		return strings.Join(c, ", ")
	}
	big := map[datasets.Dialect][]string{
		datasets.SQLite:   {rows + "SELECT zeroblob(1000000) FROM c", "SELECT " + cols(40, "zeroblob(7000000 + %d)")},
		datasets.Postgres: {rows + "SELECT repeat('x', 1000000) FROM c", "SELECT " + cols(3, "repeat('x', 90000000 + %d)")},
		datasets.MySQL:    {rows + "SELECT REPEAT('x', 1000000) FROM c", "SELECT " + cols(20, "REPEAT('x', 16000000 + %d)")},
	}
	d := db.Dialect()
	for i, q := range big[d] {
		start := time.Now()
		var r *sandbox.Result
		grew := HeapGrowth(func() {
			r = MustExec(t, db, q, sandbox.ExecOptions{Timeout: 60 * time.Second})
			if d == datasets.MySQL { // the screen refuses REPEAT (see mysqlDeniedCalls): the cap, unscreened
				var err error
				if r, err = raw(ctx, db, q, 60*time.Second, 0); err != nil {
					t.Fatal(err)
				}
			}
		})
		t.Logf("%s %.60q: %s in %s, the heap in use %d MiB more at most: %s", d, q, r.Outcome, time.Since(start).Round(time.Millisecond), grew>>20, r.Error)
		if r.Outcome != sandbox.OutcomeError || strings.ContainsAny(r.Error, "\r\n") || !strings.Contains(r.Error, "larger than") && !strings.Contains(r.Error, "out of memory") {
			t.Errorf("%s %.60q: %s (%d rows) %q, want an error saying the result is too large", d, q, r.Outcome, len(r.Rows), r.Error)
		}
		// PostgreSQL refuses the one row past the limit at its header, before pgx's buffer.
		if d == datasets.Postgres && i == 1 && grew > ManyRowsHeap {
			t.Errorf("%s %.60q: the heap in use grew by %d MiB, want under %d MiB", d, q, grew>>20, ManyRowsHeap>>20)
		}
		if r := MustExec(t, db, "SELECT 1", sandbox.ExecOptions{}); !r.OK() {
			t.Errorf("%s: after %.60q: %+v", d, q, r)
		}
	}
}

// OpenCloseRounds opens a Connector of reader on dsn, opens task's DB in it, runs a statement
// and closes both, rounds times; then it waits up to 3 s for count (the reader's connections
// on the server, counted by the caller as an administrator) to reach 0 and fails the test if
// it does not: a Close that leaves a server connection behind.
func OpenCloseRounds(t *testing.T, d datasets.Dialect, dsn, reader string, task datasets.Task, rounds int, count func() int) {
	t.Helper()
	for i := range rounds {
		c := &sandbox.Connector{DSN: map[datasets.Dialect]string{d: dsn}, Access: sandbox.Access{Reader: reader}}
		db, err := c.Open(context.Background(), d, task)
		if err != nil {
			t.Fatal(err)
		}
		if r := MustExec(t, db, "SELECT count(*) FROM t", sandbox.ExecOptions{}); !r.OK() {
			t.Fatalf("round %d: %+v", i, r)
		}
		db.Close()
		c.Close()
	}
	n := count()
	for deadline := time.Now().Add(3 * time.Second); n != 0 && time.Now().Before(deadline); n = count() {
		time.Sleep(100 * time.Millisecond)
	}
	if n != 0 {
		t.Errorf("%d connections of the reader left on the server after %d Open/Close", n, rounds)
	}
}

// HiddenStatements checks the screen's one-statement check on db (each engine's
// ScreenHiddenStatement test): each of hidden, a second statement after one the engine reads as
// ended, is refused by the screen as a second statement and, unscreened through raw (nil: not
// run), fails on the server without rows; each key of one, one statement whose ; the engine reads
// inside a string, quoted name or comment, runs and gives the one value it maps to.
func HiddenStatements(t *testing.T, db sandbox.DB, raw RawFunc, hidden []string, one map[string]any) {
	t.Helper()
	ctx := context.Background()
	for _, q := range hidden {
		r, err := db.Exec(ctx, q, sandbox.ExecOptions{Timeout: 2 * time.Second})
		if err != nil || r.Outcome != sandbox.OutcomeRefused || !strings.Contains(r.Error, "one statement") {
			t.Errorf("%q: %v %s %q, want refused as a second statement", q, err, r.Outcome, r.Error)
		}
		if raw == nil {
			continue
		}
		if r, err := raw(ctx, db, q, 2*time.Second, 10); err != nil || r.OK() {
			t.Errorf("%q unscreened: %v %s %v, want the server's error", q, err, r.Outcome, r.Rows)
		}
	}
	for q, want := range one {
		r, err := db.Exec(ctx, q, sandbox.ExecOptions{Timeout: 2 * time.Second})
		if err != nil || !r.OK() || len(r.Rows) != 1 || r.Rows[0][0] != want {
			t.Errorf("%q: %v %s %q %v, want one row %v", q, err, r.Outcome, r.Error, r.Rows, want)
		}
	}
}

// TrailingComments checks statements followed after their ; by whitespace and comments only, as
// db's engine reads them (ScreenRules.Skip; each engine's ScreenHiddenStatement test): each key
// of one runs and gives the one value it maps to, and so does its whole text unscreened through
// raw (the engine reads it as one statement too, so passing the statement before the ; alone
// changes nothing). Each key of refused is refused by the screen with a reason that holds the
// text it maps to.
func TrailingComments(t *testing.T, db sandbox.DB, raw RawFunc, one map[string]any, refused map[string]string) {
	t.Helper()
	ctx := context.Background()
	HiddenStatements(t, db, nil, nil, one)
	for q, want := range one {
		r, err := raw(ctx, db, q, 2*time.Second, 10)
		if err != nil || !r.OK() || len(r.Rows) != 1 || r.Rows[0][0] != want {
			t.Errorf("%q unscreened: %v %s %q %v, want the engine to run it as one statement giving %v", q, err, r.Outcome, r.Error, r.Rows, want)
		}
	}
	for q, why := range refused {
		r, err := db.Exec(ctx, q, sandbox.ExecOptions{Timeout: 2 * time.Second})
		if err != nil || r.Outcome != sandbox.OutcomeRefused || !strings.Contains(r.Error, why) {
			t.Errorf("%q: %v %s %q, want refused with %q", q, err, r.Outcome, r.Error, why)
		}
	}
}

// LeadingComments checks statements behind comments as db's engine reads them
// (ScreenRules.Skip): each key of one runs screened and gives the one value it maps to; each
// of hidden, a statement that is not a read behind comments that a reading otherwise than the
// engine's takes to end before a SELECT, is refused by the screen as not a read, and runs
// unscreened through raw (the engine reads it as that statement).
func LeadingComments(t *testing.T, db sandbox.DB, raw RawFunc, one map[string]any, hidden []string) {
	t.Helper()
	ctx := context.Background()
	HiddenStatements(t, db, nil, nil, one)
	for _, q := range hidden {
		r, err := db.Exec(ctx, q, sandbox.ExecOptions{Timeout: 2 * time.Second})
		if err != nil || r.Outcome != sandbox.OutcomeRefused || !strings.Contains(r.Error, "only read-only") {
			t.Errorf("%q: %v %s %q, want refused as not a read", q, err, r.Outcome, r.Error)
		}
		if r, err := raw(ctx, db, q, 2*time.Second, 10); err != nil || !r.OK() {
			t.Errorf("%q unscreened: %v %s %q, want the engine to run it", q, err, r.Outcome, r.Error)
		}
	}
}

// NoBreakSpaces are statements that end in a no-break space (U+00A0), before or without a ;,
// which each engine reads as a letter of the name it ends, so ORDER BY first<U+00A0> names no
// column (TrimmedAsEngine).
var NoBreakSpaces = []string{
	"SELECT 'a' AS first ORDER BY first\u00a0",
	"SELECT 'a' AS first ORDER BY first\u00a0;",
	"SELECT 'a' AS first ORDER BY first\u00a0 ; -- x",
}

// TrimmedAsEngine checks that each of qs, screened, fails as the engine fails it unscreened
// through raw, with the same error: the screen trims from a statement's ends only what every
// engine reads as whitespace, so what it sends is the engine's own statement. A no-break space
// before the first word, or alone after the ;, is a name to the engine (a syntax error, a second
// statement; Python's sqlite3 answers "You can only execute one statement at a time"), and the
// screen refuses both.
func TrimmedAsEngine(t *testing.T, db sandbox.DB, raw RawFunc, qs []string) {
	t.Helper()
	ctx := context.Background()
	for q, why := range map[string]string{"\u00a0SELECT 1": "only read-only", "SELECT 1;\u00a0": "one statement"} {
		r, err := db.Exec(ctx, q, sandbox.ExecOptions{Timeout: 2 * time.Second})
		if err != nil || r.Outcome != sandbox.OutcomeRefused || !strings.Contains(r.Error, why) {
			t.Errorf("%q: %v %s %q %v, want refused with %q", q, err, r.Outcome, r.Error, r.Rows, why)
		}
	}
	for _, q := range qs {
		want, err := raw(ctx, db, q, 2*time.Second, 10)
		if err != nil || want.OK() {
			t.Errorf("%q unscreened: %v %s %v, want the engine's error", q, err, want.Outcome, want.Rows)
			continue
		}
		r, err := db.Exec(ctx, q, sandbox.ExecOptions{Timeout: 2 * time.Second})
		if err != nil || r.Outcome != want.Outcome || r.Error != want.Error {
			t.Errorf("%q: %v %s %q %v, want %s %q as unscreened", q, err, r.Outcome, r.Error, r.Rows, want.Outcome, want.Error)
		}
	}
}
