package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// openChinookSQLite opens the shared Chinook file through Open.
func openChinookSQLite(t *testing.T) *sqliteDB {
	t.Helper()
	return openSharedSQLite(t, "data/multi/chinook/Chinook_Sqlite.sqlite")
}

// openConcertSingerSQLite opens Spider's concert_singer database through Open.
func openConcertSingerSQLite(t *testing.T) *sqliteDB {
	t.Helper()
	return openSharedSQLite(t, "data/spider/database/concert_singer/concert_singer.sqlite")
}

// openSharedSQLite opens the shared data file at rel through Open, closed when t ends.
func openSharedSQLite(t *testing.T, rel string) *sqliteDB {
	t.Helper()
	db, err := Open(shared.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db.(*sqliteDB)
}

// waitRunaways waits up to limit for db's abandoned statements to end and returns how long
// that took, or fails the test.
func waitRunaways(t *testing.T, db *sqliteDB, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for db.runaways.Load() > 0 {
		if time.Since(start) > limit {
			t.Fatalf("%d abandoned statements still running after %s", db.runaways.Load(), limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// TestSQLiteHostileBuiltins runs, on a real SQLite database, each class of statement whose work
// sits inside one SQLite step, where the interrupt alone waits for it (quadratic string
// functions over large values, values built to gigabytes, pathological LIKE and GLOB patterns,
// recursive CTEs that build strings, JSON over large text): each ends, in the engine and not just
// in the client, within its deadline plus 1 s, with a timeout or an error saying what
// was too large, and the next statement on the database runs at once.
func TestSQLiteHostileBuiltins(t *testing.T) {
	const deadline = 2 * time.Second
	db := openChinookSQLite(t)
	// big is 4 MB of 'a', built in about a tenth of a second; half of it as a needle makes
	// instr, replace and trim take minutes in SQLite's own built-ins (2e12 byte comparisons).
	big := "WITH s(a) AS MATERIALIZED (SELECT replace(hex(zeroblob(2000000)), '0', 'a')) "
	// set is 2 MB of 'b' and then 'a': trimming a costs a pass over the whole set per character.
	set := "replace(hex(zeroblob(1000000)), '0', 'b') || 'a'"
	probes := []struct {
		name, sql string
		want      sandbox.Outcome
		text      string // in the error
		// orTimeout accepts a timeout instead of the error: SQLite notes the value too big at
		// once but reports it when the aggregate ends.
		orTimeout bool
		// chain: a row that chains steps of linear built-ins over values at the limit, each
		// shorter than the deadline, none of them looking at it. Only the client is bounded:
		// the statement is abandoned and its work ends when the chain does.
		chain bool
	}{
		{"replace grows zeroblob past the limit", "SELECT length(replace(zeroblob(30000000), x'00', 'ab'))", sandbox.OutcomeError, "too big", false, false},
		{"replace, quadratic", big + "SELECT length(replace(a, substr(a, 1, 2000000) || 'b', 'x')) FROM s", sandbox.OutcomeTimeout, "", false, false},
		{"instr, quadratic", big + "SELECT instr(a, substr(a, 1, 2000000) || 'b') FROM s", sandbox.OutcomeTimeout, "", false, false},
		{"instr on blobs, quadratic", "WITH s(a) AS MATERIALIZED (SELECT zeroblob(4000000)) SELECT instr(a, substr(a, 1, 2000000) || x'01') FROM s", sandbox.OutcomeTimeout, "", false, false},
		{"trim with a large set, quadratic", big + "SELECT length(trim(a, " + set + ")) FROM s", sandbox.OutcomeTimeout, "", false, false},
		{"ltrim, quadratic", big + "SELECT length(ltrim(a, " + set + ")) FROM s", sandbox.OutcomeTimeout, "", false, false},
		{"rtrim, quadratic", big + "SELECT length(rtrim(a, " + set + ")) FROM s", sandbox.OutcomeTimeout, "", false, false},
		{"printf width", "SELECT length(printf('%.*c', 1000000000, 'x'))", sandbox.OutcomeError, "too big", false, false},
		{"printf float precision", "SELECT length(printf('%.1000000000f', 1.5))", sandbox.OutcomeError, "too big", false, false},
		{"randomblob", "SELECT length(randomblob(1000000000))", sandbox.OutcomeError, "too big", false, false},
		{"zeroblob materialised", "SELECT length(zeroblob(1000000000) || x'00')", sandbox.OutcomeError, "too big", false, false},
		{"hex of a large blob", "SELECT length(hex(randomblob(10000000)))", sandbox.OutcomeError, "too big", false, false},
		{"char with many arguments", "SELECT char(" + strings.Repeat("65,", 200) + "65)", sandbox.OutcomeError, "too many arguments", false, false},
		{"group_concat", "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 10000000) SELECT length(group_concat(printf('%.100c', 'x'))) FROM c", sandbox.OutcomeError, "too big", true, false},
		{"recursive CTE doubling a string", "WITH RECURSIVE c(s) AS (SELECT 'a' UNION ALL SELECT s || s FROM c) SELECT max(length(s)) FROM c", sandbox.OutcomeError, "too big", false, false},
		{"recursive CTE appending forever", "WITH RECURSIVE c(s) AS (SELECT 'a' UNION ALL SELECT s || 'a' FROM c) SELECT max(length(s)) FROM c", sandbox.OutcomeTimeout, "", false, false},
		{"LIKE, long literal after %", big + "SELECT a LIKE '%' || substr(a, 1, 900) || 'b' FROM s", sandbox.OutcomeError, "outrun the deadline", false, false},
		{"LIKE with ESCAPE", big + "SELECT a LIKE '%' || substr(a, 1, 900) || '!b' ESCAPE '!' FROM s", sandbox.OutcomeError, "outrun the deadline", false, false},
		{"GLOB, long literal after *", big + "SELECT a GLOB '*' || substr(a, 1, 900) || 'b' FROM s", sandbox.OutcomeError, "outrun the deadline", false, false},
		{"GLOB class pattern", big + "SELECT a GLOB '*[' || substr(a, 1, 900) || ']b' FROM s", sandbox.OutcomeError, "outrun the deadline", false, false},
		{"LIKE pattern past the limit", big + "SELECT a LIKE substr(a, 1, 5000) FROM s", sandbox.OutcomeError, "too complex", false, false},
		{"LIKE in a scan, every row", "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT count(*) FROM c WHERE printf('%.2000c', 'a') || n LIKE '%' || printf('%.60c', 'a') || 'b'", sandbox.OutcomeTimeout, "", false, false},
		{"json of a large text", big + "SELECT json_array_length(json_group_array(a)) FROM s, (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5)", sandbox.OutcomeError, "too big", false, false},
		{"json_each over a large array", "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000000) SELECT count(*) FROM (SELECT json_group_array(n) j FROM c), json_each(j) a, json_each(j) b", sandbox.OutcomeTimeout, "", false, false},
		{"chain of 400 hex over 4 MB", "WITH s(a) AS MATERIALIZED (SELECT randomblob(4000000)) SELECT " + strings.Repeat("length(hex(a)) + ", 400) + "0 FROM s", sandbox.OutcomeTimeout, "", false, true},
		{"unhex skipping a large set", big + "SELECT unhex(a, 'b' || a) FROM s", sandbox.OutcomeRefused, "cannot stop it", false, false},
		{"json_patch of large objects", "SELECT json_patch('{\"a\":1}', '{\"b\":2}')", sandbox.OutcomeRefused, "cannot stop it", false, false},
		{"jsonb_patch", "SELECT JSONB_PATCH('{}', '{}')", sandbox.OutcomeRefused, "cannot stop it", false, false},
		{"sort of large keys", "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT n FROM c ORDER BY randomblob(100000) LIMIT 1", sandbox.OutcomeTimeout, "", false, false},
	}
	for _, p := range probes {
		start := time.Now()
		r := sandboxtest.MustExec(t, db, p.sql, sandbox.ExecOptions{Timeout: deadline})
		took := time.Since(start)
		work := waitRunaways(t, db, 5*time.Minute)
		t.Logf("%-40s %-8s %5dms (+%dms abandoned) %.80s", p.name, r.Outcome, took.Milliseconds(), work.Milliseconds(), r.Error)
		// A chain may also finish within the deadline on a fast core (100 links took 1.07 s on a
		// Zen 5 core against 2 s): what it must never do is hold the caller past deadline + 1 s.
		if (r.Outcome != p.want || !strings.Contains(r.Error, p.text)) && !(p.orTimeout && r.Outcome == sandbox.OutcomeTimeout) && !(p.chain && r.OK()) {
			t.Errorf("%s: %s %q, want %s %q", p.name, r.Outcome, r.Error, p.want, p.text)
		}
		if took > deadline+time.Second {
			t.Errorf("%s: returned after %s, past its %s deadline plus 1s", p.name, took, deadline)
		}
		if !p.chain && took+work > deadline+time.Second {
			t.Errorf("%s: the statement's work ended after %s, past its %s deadline plus 1s", p.name, took+work, deadline)
		}
		next := time.Now()
		if r := sandboxtest.MustExec(t, db, "SELECT count(*) FROM Track", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != int64(3503) || time.Since(next) > 500*time.Millisecond {
			t.Errorf("%s: the next statement: %+v after %s", p.name, r, time.Since(next))
		}
	}
}

// TestSQLitePrepareDeadline: statements whose prepare alone outruns the deadline (SQLite copies
// an alias's expression at each reference, a flattened subquery's column at each reference in
// the outer query, so nested subqueries double it at each level; the prepare looks at neither the
// interrupt nor the progress handler) end as a timeout within the deadline plus 1 s, abandoning
// nothing, and a statement that prepares in time runs as before. Before the allocator guard each
// ran 20 to 35 s past a 1 s deadline, holding up to the whole of SQLite's heap.
func TestSQLitePrepareDeadline(t *testing.T) {
	const deadline = 300 * time.Millisecond
	db := openChinookSQLite(t)
	nested := nestedSquares
	// balanced joins items with op as a balanced tree, within SQLite's expression depth.
	balanced := func(items []string, op string) string {
		for len(items) > 1 {
			var next []string
			for i := 0; i < len(items); i += 2 {
				if i+1 < len(items) {
					next = append(next, "("+items[i]+op+items[i+1]+")")
				} else {
					next = append(next, items[i])
				}
			}
			items = next
		}
		return items[0]
	}
	var terms, refs []string
	for i := 0; i < 1500; i++ {
		terms = append(terms, fmt.Sprintf("length('%d')", i))
	}
	for i := 0; i < 3000; i++ {
		refs = append(refs, "a > 0")
	}
	alias := "SELECT " + balanced(terms, "+") + " AS a FROM Track WHERE " + balanced(refs, " AND ")
	if len(alias) > 64<<10 {
		t.Fatalf("the alias probe is %d bytes, past what a policy's statement may be", len(alias))
	}
	runaways := sqliteRunawaysTotal.Load()
	for _, p := range []struct{ name, sql string }{
		{"24 nested subqueries doubling a column", nested(24)},
		{"an alias of 1,500 calls in 3,000 WHERE terms", alias},
		{"an alias in 4,000 ORDER BY terms", "SELECT " + balanced(terms, "+") + " AS a FROM Track ORDER BY " + strings.Repeat("a + 1, ", 3999) + "a"},
	} {
		start := time.Now()
		r := sandboxtest.MustExec(t, db, p.sql, sandbox.ExecOptions{Timeout: deadline})
		took := time.Since(start)
		t.Logf("%-45s %-8s %5dms %.80s", p.name, r.Outcome, took.Milliseconds(), r.Error)
		if r.Outcome != sandbox.OutcomeTimeout || took > deadline+time.Second {
			t.Errorf("%s (%d bytes): %s %q after %s, want a timeout within %s", p.name, len(p.sql), r.Outcome, r.Error, took, deadline+time.Second)
		}
		if n := sqliteRunawaysTotal.Load(); n != runaways {
			waitRunaways(t, db, 5*time.Minute)
			t.Fatalf("%s: abandoned past its deadline, its prepare still running", p.name)
		}
	}
	r := sandboxtest.MustExec(t, db, nested(10), sandbox.ExecOptions{Timeout: 30 * time.Second})
	if !r.OK() || fmt.Sprint(r.Rows[0][0]) != "+Inf" {
		t.Errorf("10 nested subqueries: %+v, want 2^1024 = +Inf", r)
	}
}

// nestedSquares is levels nested SELECT x*x AS x FROM (...) around SELECT 2 AS x: flattening
// copies x at each level, so its prepare makes 2^levels copies (24 levels run tens of seconds).
func nestedSquares(levels int) string {
	q := "SELECT 2 AS x"
	for i := 0; i < levels; i++ {
		q = "SELECT x*x AS x FROM (" + q + ")"
	}
	return q
}

// sqliteCountingDriver is sqliteReadDriver with an authorizer that counts, in sqliteSelectsSeen,
// the SELECTs SQLite compiles (SQLITE_SELECT is authorised once per SELECT a prepare compiles,
// and only in a prepare), then defers to sqliteAuthorize.
const sqliteCountingDriver = "sqlite3-chainedsql-read-counting"

var sqliteSelectsSeen atomic.Int64

func init() {
	sql.Register(sqliteCountingDriver, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		if err := prepareSQLiteConn(c); err != nil {
			return err
		}
		c.RegisterAuthorizer(func(op int, arg1, arg2, arg3 string) int {
			if op == sqlite3.SQLITE_SELECT {
				sqliteSelectsSeen.Add(1)
			}
			return sqliteAuthorize(op, arg1, arg2, arg3)
		})
		return nil
	}})
}

// TestSQLitePreparesOnce: Exec compiles a statement once, the driver's own prepare under the
// deadline's allocator guard (sqliteGuardPrepare), not a guarded check and then the driver's
// prepare (two compilations, 8% of Exec on Spider's golds).
func TestSQLitePreparesOnce(t *testing.T) {
	raw, err := sql.Open(sqliteCountingDriver, sqliteDSN(shared.Path(t, "data/multi/chinook/Chinook_Sqlite.sqlite")))
	if err != nil {
		t.Fatal(err)
	}
	db := &sqliteDB{db: raw}
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{"SELECT count(*) FROM Track", "SELECT Name FROM Artist WHERE ArtistId = 1"} {
		before := sqliteSelectsSeen.Load()
		r := sandboxtest.MustExec(t, db, q, sandbox.ExecOptions{Timeout: 5 * time.Second})
		if !r.OK() || len(r.Rows) != 1 {
			t.Fatalf("%s: %+v", q, r)
		}
		if n := sqliteSelectsSeen.Load() - before; n != 1 {
			t.Errorf("%s: compiled %d times, want once", q, n)
		}
	}
}

// promptAfterStop is how soon a statement whose prepare a cancel or the caller's deadline stops
// must return: before the grace (sqliteGrace) after which it would be abandoned still running.
const promptAfterStop = sqliteGrace - 100*time.Millisecond

// TestSQLitePrepareCancel: cancelling the context of a statement whose prepare runs long (24
// nested subqueries doubling a column: tens of seconds) ends that prepare at once, well before
// its deadline: Exec returns the cancellation promptly, nothing is abandoned still preparing, and
// the database serves the next statement. Without it the prepare ran on to its deadline (the
// guard looked only at the deadline) or was abandoned, still running, sqliteGrace after the
// cancel.
func TestSQLitePrepareCancel(t *testing.T) {
	db := openChinookSQLite(t)
	runaways := sqliteRunawaysTotal.Load()
	const after = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(after, cancel)
	defer timer.Stop()
	start := time.Now()
	r, err := db.Exec(ctx, nestedSquares(24), sandbox.ExecOptions{Timeout: 20 * time.Second})
	took := time.Since(start)
	t.Logf("cancelled after %s: %+v %v, returned after %s", after, r, err, took)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %+v %v, want the cancellation", r, err)
	}
	// Well within the grace after which a prepare still running is abandoned (checked below);
	// -race on a loaded host took 307 and 485 ms.
	if took > after+promptAfterStop {
		t.Errorf("returned %s after the cancel, want within %s", took-after, promptAfterStop)
	}
	if n := sqliteRunawaysTotal.Load(); n != runaways {
		waitRunaways(t, db, 5*time.Minute)
		t.Fatalf("abandoned, its prepare still running after the cancel")
	}
	if r := sandboxtest.MustExec(t, db, "SELECT count(*) FROM Track", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != int64(3503) {
		t.Errorf("the next statement: %+v", r)
	}
}

// TestSQLitePrepareParentDeadline: a caller's deadline (200 ms) shorter than the statement's
// timeout (20 s) stops a long prepare (24 nested subqueries doubling a column) at the caller's
// deadline, as a cancel does: Exec returns context.DeadlineExceeded promptly, nothing is
// abandoned, and the next statement runs. The prepare is guarded by the statement's context,
// which carries the caller's deadline, not only by the timeout set in SQLite.
func TestSQLitePrepareParentDeadline(t *testing.T) {
	s := openConcertSingerSQLite(t)
	db := sandbox.DB(s)
	runaways := sqliteRunawaysTotal.Load()
	const parent = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), parent)
	defer cancel()
	start := time.Now()
	r, err := db.Exec(ctx, nestedSquares(24), sandbox.ExecOptions{Timeout: 20 * time.Second})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %+v %v, want the caller's deadline", r, err)
	}
	// Well within the grace after which a prepare still running is abandoned (checked below);
	// -race on a loaded host took 307 and 485 ms.
	if took > parent+promptAfterStop {
		t.Errorf("returned %s after the caller's deadline, want within %s", took-parent, promptAfterStop)
	}
	if sqliteRunawaysTotal.Load() != runaways {
		waitRunaways(t, s, 5*time.Minute)
		t.Fatalf("abandoned, its prepare still running after the caller's deadline")
	}
	if r := sandboxtest.MustExec(t, db, "SELECT count(*) FROM singer", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != int64(6) {
		t.Errorf("the next statement: %+v", r)
	}
}

// TestSQLiteBoundedBuiltinsMatch compares the bounded instr, replace, trim, ltrim, rtrim, LIKE
// and GLOB of the guarded connection with SQLite's own built-ins (a plain go-sqlite3
// connection) over values of every type: text with multi-byte characters and NULs, blobs,
// numbers, NULL, empty values, wildcards and escapes.
func TestSQLiteBoundedBuiltinsMatch(t *testing.T) {
	db := openChinookSQLite(t)
	plain, err := sql.Open("sqlite3", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	vals := []string{"NULL", "''", "x''", "0", "12", "-3.5", "1e3", "'a'", "'abc'", "'aXbXc'", "'X'", "'XX'",
		"'  pad  '", "' '", "'héllo wörld'", "'é'", "'ö'", "'日本語テキスト'", "'本'", "'a_c'", "'a%c'", "'%'", "'_'",
		"'a!%c'", "'!'", "'[a-c]*'", "'*b*'", "'?b?'", "'[^a]bc'", "'A%'", "'%C'", "'ABC'", "'%b%'", "'a' || char(0) || 'b'",
		"x'00'", "x'6100'", "x'616263'", "x'C3A9'", "x'ff'", "x'80'", "x'e6'", "'xyz'", "'zyx'", "'abcabcabc'", "'bc'"}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 40; i++ { // random short strings over a small alphabet, so that matches are frequent
		var b strings.Builder
		for n := rng.Intn(8); n > 0; n-- {
			b.WriteString([]string{"a", "b", "%", "_", "é", "!", "[", "]", "*", "?", "^", "-"}[rng.Intn(12)])
		}
		vals = append(vals, "'"+b.String()+"'")
	}
	exprs := []string{"instr(a, b)", "replace(a, b, c)", "trim(a, b)", "ltrim(a, b)", "rtrim(a, b)", "trim(a)",
		"a LIKE b", "like(b, a)", "a NOT LIKE b", "a LIKE b ESCAPE '!'", "a LIKE b ESCAPE 'é'", "a GLOB b", "glob(b, a)"}
	var sel []string
	for _, e := range exprs {
		sel = append(sel, "quote("+e+")")
	}
	for i, a := range vals {
		var rows []string
		for j, b := range vals {
			rows = append(rows, fmt.Sprintf("(%s, %s, %s)", a, b, vals[(i+j)%len(vals)]))
		}
		q := "WITH v(a, b, c) AS (VALUES " + strings.Join(rows, ", ") + ") SELECT " + strings.Join(sel, ", ") + " FROM v"
		got := sandboxtest.MustExec(t, db, q, sandbox.ExecOptions{})
		want, err := sandbox.Collect(context.Background(), plain, q, sandbox.ExecOptions{}, nil, nil)
		if err != nil || !got.OK() {
			t.Fatalf("a = %s: plain %v, guarded %+v", a, err, got)
		}
		for r := range want.Rows {
			for c := range want.Rows[r] {
				if fmt.Sprint(got.Rows[r][c]) != fmt.Sprint(want.Rows[r][c]) {
					t.Errorf("a = %s, b = %s, c = %s: %s = %v, SQLite's built-in says %v", a, vals[r], vals[(i+r)%len(vals)], exprs[c], got.Rows[r][c], want.Rows[r][c])
				}
			}
		}
	}
	// A value at the limit still goes through replace; one byte more is SQLite's own error.
	// (hex makes at most sqliteMaxValue-1 bytes: it counts its terminating NUL.)
	half := sqliteMaxValue/2 - 1
	r := sandboxtest.MustExec(t, db, fmt.Sprintf("SELECT length(replace(hex(zeroblob(%d)), '00', 'ab'))", half), sandbox.ExecOptions{})
	if !r.OK() || r.Rows[0][0] != int64(2*half) {
		t.Errorf("replace at the limit: %+v", r)
	}
	r = sandboxtest.MustExec(t, db, fmt.Sprintf("SELECT replace(hex(zeroblob(%d)), '00', 'abc')", half), sandbox.ExecOptions{})
	if r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, "too big") {
		t.Errorf("replace past the limit: %+v", r)
	}
	if r := sandboxtest.MustExec(t, db, "SELECT 'a' LIKE 'a' ESCAPE '%'", sandbox.ExecOptions{}); r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, "not supported") {
		t.Errorf("ESCAPE '%%': %+v", r)
	}
}

// sqliteSleepDriver is sqliteReadDriver with cs_sleep(ms), a function SQLite cannot interrupt,
// standing for any step that outlives the deadline.
const sqliteSleepDriver = "sqlite3-chainedsql-read-sleep"

func init() {
	sql.Register(sqliteSleepDriver, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		if err := prepareSQLiteConn(c); err != nil {
			return err
		}
		return c.RegisterFunc("cs_sleep", func(ms int64) int64 { time.Sleep(time.Duration(ms) * time.Millisecond); return ms }, false)
	}})
}

// TestSQLiteAbandon: a statement still running sqliteGrace after its deadline returns its
// timeout at once; the next statement on the same database does not queue behind it; at most
// sqliteRunawaysPerDB such statements are outstanding per database: then Exec fails with
// sandbox.ErrBusy saying why (the database's failure: the statement never ran), at once, and
// runs again once they end; when one returns, its connection is closed, not pooled.
func TestSQLiteAbandon(t *testing.T) {
	p := shared.Path(t, "data/multi/chinook/Chinook_Sqlite.sqlite")
	raw, err := sql.Open(sqliteSleepDriver, "file:"+p+"?mode=ro&immutable=1")
	if err != nil {
		t.Fatal(err)
	}
	db := &sqliteDB{db: raw}
	defer db.Close()
	const deadline = 500 * time.Millisecond
	const sleep = 6000
	for i := 0; i < sqliteRunawaysPerDB; i++ {
		start := time.Now()
		r := sandboxtest.MustExec(t, db, fmt.Sprintf("SELECT cs_sleep(%d)", sleep), sandbox.ExecOptions{Timeout: deadline})
		took := time.Since(start)
		if r.Outcome != sandbox.OutcomeTimeout || took > deadline+time.Second || took < deadline+sqliteGrace {
			t.Fatalf("uninterruptible statement %d: %s after %s, want a timeout at the deadline plus %s", i, r.Outcome, took, sqliteGrace)
		}
		if n := db.runaways.Load(); n != int64(i+1) {
			t.Fatalf("%d runaways counted, want %d", n, i+1)
		}
		if i == sqliteRunawaysPerDB-1 {
			break
		}
		next := time.Now()
		if r := sandboxtest.MustExec(t, db, "SELECT count(*) FROM Album", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != int64(347) || time.Since(next) > 300*time.Millisecond {
			t.Fatalf("a statement beside a runaway: %+v after %s", r, time.Since(next))
		}
	}
	asked := time.Now()
	r, err := db.Exec(context.Background(), "SELECT count(*) FROM Album", sandbox.ExecOptions{})
	if !errors.Is(err, sandbox.ErrBusy) || r != nil || !strings.Contains(err.Error(), "past their deadline") || time.Since(asked) > 300*time.Millisecond {
		t.Fatalf("with %d runaways: %+v, %v after %s; want sandbox.ErrBusy at once saying the slots are held", sqliteRunawaysPerDB, r, err, time.Since(asked))
	}
	waitRunaways(t, db, 10*time.Second)
	if n := sqliteRunawaysNow.Load(); n != 0 {
		t.Errorf("%d runaways counted in the process after they ended", n)
	}
	if r := sandboxtest.MustExec(t, db, "SELECT count(*) FROM Album", sandbox.ExecOptions{}); !r.OK() {
		t.Fatalf("after the runaways ended: %+v", r)
	}
	if st := raw.Stats(); st.OpenConnections > 2 {
		t.Errorf("%d connections open after the runaways ended: theirs were pooled", st.OpenConnections)
	}
	// The caller's cancellation: an uninterruptible statement is abandoned sqliteGrace after it.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := db.Exec(ctx, fmt.Sprintf("SELECT cs_sleep(%d)", sleep), sandbox.ExecOptions{Timeout: time.Minute}); err == nil || time.Since(start) > 200*time.Millisecond+sqliteGrace+300*time.Millisecond {
		t.Errorf("cancelled: %v after %s", err, time.Since(start))
	}
	waitRunaways(t, db, 10*time.Second)
}

// unscreened runs q unscreened: SQLite's authorizer is all that stands in its way
// (sandboxtest.RawFunc).
func unscreened(ctx context.Context, db sandbox.DB, q string, timeout time.Duration, maxRows int) (*sandbox.Result, error) {
	return db.(*sqliteDB).exec(ctx, time.Now(), q, timeout, sandbox.ExecOptions{MaxRows: maxRows})
}

// TestSQLiteHostileStatements runs the hostile suite on Chinook's own file
// (sandboxtest.HostileStatements).
func TestSQLiteHostileStatements(t *testing.T) {
	sandboxtest.HostileStatements(t, openChinookSQLite(t), unscreened, sandboxtest.HostileTag())
}

// TestSQLiteResultSize: sandboxtest.ResultSize and ManyRows on Chinook's own file.
func TestSQLiteResultSize(t *testing.T) {
	db := openChinookSQLite(t)
	t.Run("ResultSize", func(t *testing.T) { sandboxtest.ResultSize(t, db, unscreened) })
	t.Run("ManyRows", func(t *testing.T) { sandboxtest.ManyRows(t, db) })
}

// TestSQLiteResultCopies: a kept result costs the process the driver's copy of each value and
// the one kept, not a third (Collect's values come from Scan into *any, which already copies the
// driver's bytes): 80 MB of blobs kept allocate less than 2.5 times that.
func TestSQLiteResultCopies(t *testing.T) {
	db := openChinookSQLite(t)
	const n, size = 20, 4 << 20
	q := fmt.Sprintf("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < %d) SELECT zeroblob(%d) FROM c", n, size)
	sandboxtest.MustExec(t, db, "SELECT 1", sandbox.ExecOptions{}) // the connection's own allocations
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := sandboxtest.MustExec(t, db, q, sandbox.ExecOptions{Timeout: 30 * time.Second})
	runtime.ReadMemStats(&after)
	if !r.OK() || len(r.Rows) != n {
		t.Fatalf("%s: %d rows, %q", r.Outcome, len(r.Rows), r.Error)
	}
	kept := 0
	for _, row := range r.Rows {
		kept += len(row[0].([]byte))
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("kept %d MB, allocated %d MB (%.2fx)", kept>>20, alloc>>20, float64(alloc)/float64(kept))
	if kept != n*size || float64(alloc) > 2.5*float64(kept) {
		t.Errorf("kept %d bytes, allocated %d: want %d kept and at most 2.5 times that allocated", kept, alloc, n*size)
	}
}

// TestSQLiteKeptSize: what Collect counts for kept rows (sandbox.Size) is the heap they hold,
// within a margin, for small cells too: a million rows of one integer and a short text.
func TestSQLiteKeptSize(t *testing.T) {
	db := openChinookSQLite(t)
	const n = 1_000_000
	q := fmt.Sprintf("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < %d) SELECT n, 'ab' || n FROM c", n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := sandboxtest.MustExec(t, db, q, sandbox.ExecOptions{Timeout: 60 * time.Second})
	runtime.GC()
	runtime.ReadMemStats(&after)
	if !r.OK() || len(r.Rows) != n {
		t.Fatalf("%s: %d rows, %q", r.Outcome, len(r.Rows), r.Error)
	}
	heap, counted := float64(after.HeapAlloc)-float64(before.HeapAlloc), float64(sandbox.Size(r))
	t.Logf("%d rows kept: %.0f bytes of heap a row, %.0f counted", n, heap/n, counted/n)
	if counted < 0.8*heap || counted > 1.5*heap {
		t.Errorf("%.0f bytes counted for %.0f in the heap: want 0.8 to 1.5 times", counted, heap)
	}
	runtime.KeepAlive(r)
}

// TestSQLiteStoppedStream: sandboxtest.StoppedStream on Chinook's own file: a stream stopped at
// its first row is reset, not run to its deadline, and leaves no abandoned statement.
func TestSQLiteStoppedStream(t *testing.T) {
	db := openChinookSQLite(t)
	sandboxtest.StoppedStream(t, db, func(string) int { return int(db.runaways.Load()) })
}

// TestSQLiteHeapHeldByAnother: SQLite's heap cap (sqliteHeapLimit) is the process's, shared by
// the statements of every task. A statement holding nearly all of it until its deadline (max()
// over distinct 8 MB values, computed on the first row of a cross join that then runs on past
// its deadline, a triple one: the few columns of the lowered cap let a double one end first) made a
// statement of another task, on another database, fail with "out of memory" as its own outcome,
// an error it never ran into (an episode's turn, or its gold at the judge). That statement now
// fails with sandbox.ErrBusy, the database's failure, which Patient tries again until it runs
// once the holder ends; the holder keeps its own outcome, and a statement that runs out of the
// heap by itself keeps its "out of memory". The cap is lowered for the test (lowerHeapCap): on
// a loaded machine filling the whole one took up to the holder's deadline, and the other task's
// statement, given 5 s, then ran once the holder ended, not ErrBusy; its time limit is now also
// what the holder has left once the heap is full, within 5 s.
func TestSQLiteHeapHeldByAnother(t *testing.T) {
	// The holder tells, through heap_read, when one of its three scans of Track has reached the
	// last track: its values were built on the first row, and its scans have read every page of
	// Track, so it allocates nothing more until its deadline (the heap in use at its second row
	// is already what it holds then).
	const lastTrack = 3503
	read := make(chan struct{})
	var readOnce sync.Once
	hog := funcChinookSQLite(t, "heap_read", func(a, b, c int64) bool {
		if a == lastTrack || b == lastTrack || c == lastTrack {
			readOnce.Do(func() { close(read) })
		}
		return true
	})
	if r := sandboxtest.MustExec(t, hog, "SELECT max(TrackId), count(*) FROM Track", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != int64(lastTrack) || r.Rows[0][1] != int64(lastTrack) {
		t.Fatalf("Track's ids: %+v", r)
	}
	other, err := Open(shared.Path(t, "data/multi/northwind/northwind.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const victim = "SELECT octet_length(zeroblob(2000000) || x'00')" // 2 MB of heap
	if r := sandboxtest.MustExec(t, other, victim, sandbox.ExecOptions{}); !r.OK() {
		t.Fatalf("the other task's statement alone: %+v", r)
	}
	lowerHeapCap(t)
	limit := sqliteHeapCap()
	// The holder leaves margin of the cap free: less than the victim needs.
	const margin = 512 << 10
	var cols []string
	for i, n := 0, limit-sqliteHeapUsed()-margin; n > 0; i++ {
		// The last values are smaller, so that the copies one is built from fit in what is left.
		size := min(n, 8_000_000, max(n/3, 64<<10))
		cols = append(cols, fmt.Sprintf("max(CASE WHEN a.TrackId = 1 AND b.TrackId = 1 AND c.TrackId = 1 THEN zeroblob(%d + b.TrackId) || x'%02x' END)", size-2, i%256))
		n -= size
	}
	const deadline = 15 * time.Second
	// The holder's outcome, when it ended and the heap in use then (for an error: what was held).
	type holderEnd struct {
		r    *sandbox.Result
		took time.Duration
		used int64
	}
	held := make(chan holderEnd, 1)
	ended := make(chan struct{})
	// A Fatalf below leaves the holder running to its deadline: the tests after this one would
	// find SQLite's heap held (before lowerHeapCap's cleanup, which runs after this one).
	t.Cleanup(func() { <-ended })
	start := time.Now()
	go func() {
		defer close(ended)
		r, err := hog.Exec(context.Background(), "SELECT "+strings.Join(cols, ", ")+" FROM Track a, Track b, Track c WHERE heap_read(a.TrackId, b.TrackId, c.TrackId)", sandbox.ExecOptions{Timeout: deadline})
		if err != nil {
			r = &sandbox.Result{Outcome: sandbox.OutcomeError, Error: err.Error()}
		}
		held <- holderEnd{r, time.Since(start), sqliteHeapUsed()}
	}()
	// Wait until the holder holds all it will (heap_read). Waiting until the heap in use had
	// stopped growing (under 64 KiB in 50 ms) could end while the holder, its thread off the CPU
	// on a loaded host, still had values to build: the other task's statement then took the
	// margin and the holder ran out instead (seen in CI, under -race).
	select {
	case <-read:
	case h := <-held:
		t.Fatalf("the holder ended before it held the heap: %s %q after %s, %d bytes of SQLite's heap in use", h.r.Outcome, h.r.Error, h.took, h.used)
	}
	if used := sqliteHeapUsed(); used < limit-2*margin {
		t.Fatalf("the holder holds %d bytes of SQLite's heap; want more than %d", used, limit-2*margin)
	}
	// The other task's statement must run out, wait and give up while the holder still holds the
	// heap: its time limit is at most a third of what the holder has left.
	filled := time.Since(start)
	wait := min(5*time.Second, (deadline-filled)/3)
	t.Logf("the holder holds %d MiB of SQLite's heap after %s; the other task's statement waits %s", sqliteHeapUsed()>>20, filled.Round(time.Millisecond), wait.Round(time.Millisecond))
	if wait < 100*time.Millisecond {
		t.Fatalf("the holder took %s of its %s to fill SQLite's heap: too little left to test a statement that waits for it", filled, deadline)
	}
	r, err := other.Exec(context.Background(), victim, sandbox.ExecOptions{Timeout: wait})
	if !errors.Is(err, sandbox.ErrBusy) || r != nil || !strings.Contains(fmt.Sprint(err), "heap") {
		t.Errorf("another task's statement while the heap is held: %+v, %v after %s; want sandbox.ErrBusy saying the heap is held", r, err, time.Since(start))
	}
	patient := time.Now()
	r, err = sandbox.Patient(other, 0).Exec(context.Background(), victim, sandbox.ExecOptions{Timeout: 5 * time.Second})
	if err != nil || !r.OK() || r.Rows[0][0] != int64(2000001) {
		t.Errorf("the other task's statement through Patient: %+v, %v after %s", r, err, time.Since(patient))
	}
	if h := <-held; h.r.Outcome != sandbox.OutcomeTimeout {
		t.Errorf("the holder: %s %q after %s, %d bytes of SQLite's heap in use; want its timeout", h.r.Outcome, h.r.Error, h.took, h.used)
	}
	// A statement that runs out of the heap by itself (values of 8 MB at once, more than the
	// cap) keeps its error.
	var vals []string
	for i := int64(0); i <= limit/8_000_000; i++ {
		vals = append(vals, fmt.Sprintf("zeroblob(%d) || x'00'", 8_000_000-i))
	}
	if r := sandboxtest.MustExec(t, hog, "SELECT "+strings.Join(vals, ", "), sandbox.ExecOptions{Timeout: deadline}); r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, "out of memory") {
		t.Errorf("a statement past the heap by itself: %s %q, want its out of memory", r.Outcome, r.Error)
	}
}

// TestSQLiteErrorAtDeadline: a statement that SQLite stops at its deadline may end with another
// error than the interrupt (TestSQLiteHeapHeldByAnother's holder, with the heap full, ended with
// "out of memory" at 15.0013 s of its 15 under -race on a loaded host); once its deadline has
// passed, its outcome is its timeout. The statement's context used to get its deadline after
// SQLite's, so an error in between was the statement's own: here a function's that returns
// after SQLite's deadline, the connection's set 100 ms before the statement starts (deadlineSet:
// a loaded machine's delay).
func TestSQLiteErrorAtDeadline(t *testing.T) {
	const timeout = 300 * time.Millisecond
	db, set := failLateSQLite(t, timeout)
	db.deadlineSet = func() {
		set.Store(time.Now().UnixNano())
		time.Sleep(100 * time.Millisecond)
	}
	r := sandboxtest.MustExec(t, db, "SELECT fail_late(1)", sandbox.ExecOptions{Timeout: timeout})
	if r.Outcome != sandbox.OutcomeTimeout {
		t.Errorf("a statement whose error came past its deadline: %s %q, want its timeout", r.Outcome, r.Error)
	}
	// One that fails within its deadline keeps its error.
	db.deadlineSet = nil
	set.Store(time.Now().Add(-time.Hour).UnixNano())
	if r := sandboxtest.MustExec(t, db, "SELECT fail_late(1)", sandbox.ExecOptions{Timeout: timeout}); r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, "failed past the deadline") {
		t.Errorf("a statement that failed within its deadline: %s %q, want its error", r.Outcome, r.Error)
	}
}

// TestSQLiteErrorAtDeadlineLateTimer: a statement's context expires when its timer's goroutine
// runs its cancel, which a loaded machine may run after SQLite has stopped the statement at its
// deadline; an error the statement ends with past its deadline is still its timeout. Here the
// context's Err comes a second late (withDeadline) and a function fails 50 ms past SQLite's
// deadline: before, run read the deadline from qctx.Err and took it as the statement's error.
func TestSQLiteErrorAtDeadlineLateTimer(t *testing.T) {
	const timeout = 300 * time.Millisecond
	db, set := failLateSQLite(t, timeout)
	db.deadlineSet = func() { set.Store(time.Now().UnixNano()) }
	db.withDeadline = func(ctx context.Context, d time.Time) (context.Context, context.CancelFunc) {
		late, cancel := context.WithDeadline(ctx, d.Add(time.Second))
		return lateContext{late, d}, cancel
	}
	r := sandboxtest.MustExec(t, db, "SELECT fail_late(1)", sandbox.ExecOptions{Timeout: timeout})
	if r.Outcome != sandbox.OutcomeTimeout {
		t.Errorf("a statement whose error came past its deadline, its context not yet expired: %s %q, want its timeout", r.Outcome, r.Error)
	}
}

// failLateSQLite opens Chinook with fail_late(x), which fails 50 ms past timeout from the time
// in set (Unix ns; deadlineSet stores when a connection's deadline was set).
func failLateSQLite(t *testing.T, timeout time.Duration) (*sqliteDB, *atomic.Int64) {
	set := new(atomic.Int64)
	db := funcChinookSQLite(t, "fail_late", func(x int64) (int64, error) {
		time.Sleep(time.Until(time.Unix(0, set.Load()).Add(timeout + 50*time.Millisecond)))
		return 0, errors.New("failed past the deadline")
	})
	return db, set
}

// lateContext is a context whose Deadline is d but whose Done and Err come later (its Context's).
type lateContext struct {
	context.Context
	d time.Time
}

func (c lateContext) Deadline() (time.Time, bool) { return c.d, true }

// TestSQLiteHeapEachPastIt: statements that each need more than the whole of SQLite's heap
// (sqliteHeapLimit), run together, make each other run out while the others hold most of it.
// Each must still end with its own "out of memory" (in its turn, awaitTurn), not with
// sandbox.ErrBusy: before, each was the others' victim every time, and Patient tried them again
// together until one had waited 31.8 s, or more than BusyPatience with more of them. The cap is
// lowered for the test (lowerHeapCap): on a loaded machine filling the whole one three times over
// took longer than a statement's time limit (a timeout, not its out of memory, at a fifth of a
// core). That they overlap is not left to the machine's speed (heapGate): each waits, at its
// tenth row, for the three to hold nine values of 1 MB each (a value held costs about twice its
// size, and three while max() takes it), about 57 MB of the cap's 67 among them; then the last
// to arrive runs on alone while the other two stay there, holding what they hold, until a
// statement waits for its turn (ExecOptions.Waiting). So the one that runs out finds the other
// two holding more than half, and waits (both checked). Released together at the gate, as
// before, all three could run out within a few steps of each other on a loaded host (-race, 2
// busy cores), the first freeing its heap and the other two theirs before it looked at what
// others held: each then saw the heap free, kept its own "out of memory" without a wait, and
// Waiting was never told (1 run in 10 of the test under two CPU hogs).
func TestSQLiteHeapEachPastIt(t *testing.T) {
	const n, value, gateAt = 3, 1_000_000, 10
	gate := &heapGate{n: n, at: gateAt, open: make(chan struct{}), waited: make(chan struct{})}
	db := gatedChinookSQLite(t, gate)
	lowerHeapCap(t)
	// Distinct values held by max(), one more a row, more of them than the heap holds.
	var cols []string
	last := int(sqliteHeapCap()/value) + 2
	for k := 1; k <= last; k++ {
		cols = append(cols, fmt.Sprintf("max(CASE WHEN i = %d THEN zeroblob(%d) || x'%02x' END)", k, value-k, k%256))
	}
	q := fmt.Sprintf("WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < %d) SELECT %s FROM r WHERE heap_gate(i)", last, strings.Join(cols, ", "))
	var waited atomic.Int64 // statements that waited for their turn
	tell := func(w bool) {
		if w && waited.Add(1) == 1 {
			close(gate.waited) // the two held at the gate run on
		}
	}
	const timeout = 30 * time.Second
	type outcome struct {
		res  *sandbox.Result
		err  error
		took time.Duration
	}
	out := make(chan outcome, n)
	start := time.Now()
	for range n {
		go func() {
			r, err := db.Exec(context.Background(), q, sandbox.ExecOptions{Timeout: timeout, Waiting: tell})
			out <- outcome{r, err, time.Since(start)}
		}()
	}
	for range n {
		o := <-out
		if o.err != nil || o.res.Outcome != sandbox.OutcomeError || !strings.Contains(o.res.Error, "out of memory") {
			t.Errorf("a statement past the heap by itself, run with two others: %+v, %v after %s; want its own out of memory", o.res, o.err, o.took)
			continue
		}
		t.Logf("its out of memory after %s", o.took)
		// Its first run, the wait for its turn and its run then are each within its time limit.
		if o.took > 3*timeout+sqliteGrace {
			t.Errorf("a statement past the heap by itself ended after %s", o.took)
		}
	}
	if len(sqliteHeapTurn) != 0 {
		t.Errorf("the turn is still held")
	}
	if gate.late.Load() {
		t.Error("the statements did not reach the gate together (one ran out before it?): the values held there are too large for the cap")
	} else if gate.stuck.Load() {
		t.Error("no statement waited for its turn within 20 s of the gate: the one that ran on from it ran out without a wait (the two held there held too little?)")
	} else if held := gate.held.Load(); held*2/3 <= sqliteHeapCap()/2 {
		t.Errorf("the statements held %d bytes at the gate: two of them not more than half the cap", held)
	} else {
		t.Logf("the three held %d MiB at the gate", held>>20)
	}
	if waited.Load() == 0 {
		t.Error("no statement waited for its turn (ExecOptions.Waiting told nothing)")
	}
}

// heapGate is the SQL function heap_gate(i) of gatedChinookSQLite's connections: true, after,
// where i is at, waiting for the first n statements to reach it (at most 20 s, then late); then
// the last of them to arrive runs on, and the others wait until waited is closed (a statement
// waits for its turn; at most 20 s, then stuck), holding what they hold. At once for the rest
// (one running again in its turn).
type heapGate struct {
	n, at   int64
	mu      sync.Mutex
	arrived int64
	open    chan struct{}
	waited  chan struct{}
	late    atomic.Bool
	stuck   atomic.Bool
	held    atomic.Int64 // SQLite's heap in use once all n reached it
}

func (g *heapGate) pass(i int64) bool {
	if i != g.at {
		return true
	}
	g.mu.Lock()
	g.arrived++
	arrived := g.arrived
	if arrived == g.n {
		g.held.Store(sqliteHeapUsed())
		close(g.open)
	}
	g.mu.Unlock()
	if arrived >= g.n {
		return true
	}
	select {
	case <-g.open:
	case <-time.After(20 * time.Second):
		g.late.Store(true)
		return true
	}
	select {
	case <-g.waited:
	case <-time.After(20 * time.Second):
		g.stuck.Store(true)
	}
	return true
}

// gatedChinookSQLite opens the shared Chinook file as Open does, on connections that also have
// heap_gate (g).
func gatedChinookSQLite(t *testing.T, g *heapGate) *sqliteDB {
	t.Helper()
	return funcChinookSQLite(t, "heap_gate", g.pass)
}

// funcChinookSQLite opens the shared Chinook file as Open does, on connections that also have
// the SQL function name, impl (not pure: called for each row).
func funcChinookSQLite(t *testing.T, name string, impl any) *sqliteDB {
	t.Helper()
	d := &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		if err := prepareSQLiteConn(c); err != nil {
			return err
		}
		return c.RegisterFunc(name, impl, false)
	}}
	db := &sqliteDB{db: sql.OpenDB(dsnConnector{d, sqliteDSN(shared.Path(t, "data/multi/chinook/Chinook_Sqlite.sqlite"))})}
	t.Cleanup(func() { db.Close() })
	return db
}

// dsnConnector is a driver.Connector opening dsn with d.
type dsnConnector struct {
	d   *sqlite3.SQLiteDriver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

// TestSQLiteNoStatement: text in which SQLite finds no statement (only comments, whitespace
// and semicolons), should it reach run past Screen (which refuses it, as Exec shows), is an
// error saying so and the connection serves the next statement. Before, the statement prepared
// once (collectGuarded) held no SQLite handle and running it passed NULL to
// sqlite3_clear_bindings: a SIGSEGV ending the process; go-sqlite3's own query skips it.
func TestSQLiteNoStatement(t *testing.T) {
	s := openConcertSingerSQLite(t)
	db := sandbox.DB(s)
	s.db.SetMaxOpenConns(1) // the next statement runs on the same connection
	for _, q := range []string{"", "-- only a comment", "/* c */ ;", " ; ;"} {
		if r := sandboxtest.MustExec(t, db, q, sandbox.ExecOptions{}); r.Outcome != sandbox.OutcomeRefused {
			t.Errorf("Exec %q: %+v, want refused by Screen", q, r)
		}
		r, err := s.run(context.Background(), time.Now(), q, 5*time.Second, sandbox.ExecOptions{}, false)
		if err != nil || r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, "no statement") {
			t.Errorf("run %q: %+v %v, want the error that there is no statement", q, r, err)
		}
		if r := sandboxtest.MustExec(t, db, "SELECT count(*) FROM singer", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != int64(6) {
			t.Errorf("after %q, the next statement: %+v", q, r)
		}
	}
}

// TestSQLiteGuardEndsOnPanic: a prepare that panics under sqliteGuardPrepare still ends the
// guard on its thread, so a later statement on that thread (here a plain query on the same
// locked thread, its context cancelled into the guard meanwhile) allocates as usual. Without the
// deferred end, the thread keeps failing every SQLite allocation: "out of memory".
func TestSQLiteGuardEndsOnPanic(t *testing.T) {
	s := openConcertSingerSQLite(t)
	conn, err := s.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var guard func(context.Context, func()) (bool, bool)
	if err := conn.Raw(func(dc any) error {
		var err error
		guard, err = sqliteGuardPrepare(dc.(*sqlite3.SQLiteConn))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, cancel := context.WithCancel(context.Background())
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the prepare's panic did not come through")
			}
		}()
		guard(ctx, func() {
			cancel()
			time.Sleep(50 * time.Millisecond) // the cancel reaches the guard
			panic("prepare")
		})
	}()
	time.Sleep(50 * time.Millisecond)
	var n int64 // a value past the connection's lookaside, so that it needs the allocator
	if err := conn.QueryRowContext(context.Background(), "SELECT length(randomblob(200000)) + count(*) FROM singer").Scan(&n); err != nil || n != 200006 {
		t.Errorf("a statement on the thread after the panic: %d, %v; want 200006", n, err)
	}
}
