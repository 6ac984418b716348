package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// The per-connection limits (sqlite3_limit) bound what one statement can make SQLite do in a
// single virtual-machine step, where neither the interrupt nor the progress handler is looked at:
// sqliteMaxValue caps any one string, blob or row a statement may build or read (SQLite's
// SQLITE_LIMIT_LENGTH, 1e9 by default), so SELECT randomblob(1e9) fails instead of moving a
// gigabyte into the process and no built-in runs over more; sqliteMaxSQL caps the statement's
// text and so how many such steps one row can chain; sqliteMaxPattern caps a LIKE or GLOB
// pattern (50,000 by default) and sqliteMaxArgs a function's arguments (1,000). Benchmark cells
// are kilobytes, benchmark SQL a few kilobytes.
const (
	sqliteMaxValue   = 8 << 20
	sqliteMaxSQL     = 100_000
	sqliteMaxPattern = 1_000
	sqliteMaxArgs    = 100
)

// sqliteHeapLimit is SQLite's hard heap limit (process-wide): one SQLite result row (2,000
// columns of sqliteMaxValue) would otherwise be materialised whole before Collect sees it. Every
// task's statements share it, so a statement that runs out of it while others hold most of it
// waits for its turn and runs again, and fails with sandbox.ErrBusy, not with their "out of
// memory", only if they hold it through its time limit (heapHeld, awaitTurn).
const sqliteHeapLimit = 1 << 30

// sqliteTempLimit caps, for the process, the bytes of SQLite's temporary files (a sort, DISTINCT,
// GROUP BY or materialised subquery that outgrows the page cache spills to them: unlinked files,
// freed when the statement ends) on every read connection, counted by the VFS they are opened
// through (sqliteTempVFS: each open temporary file's size, given back when it closes). A write
// past it fails with SQLITE_FULL, the statement's error (tempFull), unless other statements
// hold more than half of it: then, as with the heap, it waits for its turn and runs again, and
// fails with sandbox.ErrBusy only if they hold it through its time limit (tempHeld, awaitTurn).
// A write the disk refuses for want of space, within the cap, is sandbox.ErrBusy at once
// (tempNoSpace, tempDiskFull).
// Without it only the deadline bounded them: ORDER BY randomblob(4000) over a recursive CTE
// wrote 445 MiB within a 5 s deadline, and many such statements at the default 30 s could
// fill the disk. PRAGMA temp_store = MEMORY is not the fix: the sort then runs as one
// in-memory pass the deadline does not stop.
const sqliteTempLimit = 1 << 30

// sqliteReadDriver is go-sqlite3 with, on every connection, the limits above, no attached
// databases, SQLite's heap capped (sqliteHeapLimit), its temporary files capped (sqliteTempVFS,
// named in sqliteDSN; sqliteTempLimit), sqliteAuthorize as its authorizer and the
// statement guard (guardSQLite: a deadline enforced by a progress handler and by bounded
// versions of the built-ins that could outrun it).
const sqliteReadDriver = "sqlite3-chainedsql-read"

func init() {
	sql.Register(sqliteReadDriver, &sqlite3.SQLiteDriver{ConnectHook: prepareSQLiteConn})
}

// prepareSQLiteConn readies a new connection of sqliteReadDriver.
func prepareSQLiteConn(c *sqlite3.SQLiteConn) error {
	if sqliteAllocGuard != nil {
		return sqliteAllocGuard
	}
	if sqliteTempVFSErr != nil {
		return sqliteTempVFSErr
	}
	c.SetLimit(sqlite3.SQLITE_LIMIT_LENGTH, sqliteMaxValue)
	c.SetLimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, sqliteMaxSQL)
	c.SetLimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, sqliteMaxPattern)
	c.SetLimit(sqlite3.SQLITE_LIMIT_FUNCTION_ARG, sqliteMaxArgs)
	c.SetLimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
	if _, err := c.Exec(fmt.Sprintf("PRAGMA hard_heap_limit = %d", sqliteHeapLimit), nil); err != nil {
		return err
	}
	c.RegisterAuthorizer(sqliteAuthorize)
	return guardSQLite(c)
}

// sqliteDeniedFunctions are the SQL functions a read may not call: they reach files and the
// process beyond the database (where they are compiled in).
var sqliteDeniedFunctions = map[string]bool{"load_extension": true, "fts3_tokenizer": true, "readfile": true, "writefile": true, "edit": true}

// sqliteRecursive is SQLITE_RECURSIVE (a recursive CTE), which go-sqlite3 does not export.
const sqliteRecursive = 33

// sqliteAuthorize is SQLite's counterpart of the servers' reader (the first layer, before the
// screen): statements are prepared only from reads (SELECT, column reads, recursive CTEs,
// functions but sqliteDeniedFunctions); ATTACH, PRAGMA statements, writes, schema changes and
// transactions fail to prepare with "not authorized". The pragma table-valued functions
// (pragma_table_info) are authorised as their pragma: only those describing tables and keys
// pass (not pragma_database_list, which shows the file's path).
func sqliteAuthorize(op int, arg1, arg2, _ string) int {
	switch op {
	case sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqliteRecursive:
		return sqlite3.SQLITE_OK
	case sqlite3.SQLITE_FUNCTION:
		if sqliteDeniedFunctions[strings.ToLower(arg2)] {
			return sqlite3.SQLITE_DENY
		}
		return sqlite3.SQLITE_OK
	case sqlite3.SQLITE_PRAGMA: // arg2 is the pragma's argument: these only read, whatever it is
		switch strings.ToLower(arg1) {
		case "table_info", "table_xinfo", "table_list", "foreign_key_list", "index_list", "index_info", "index_xinfo":
			return sqlite3.SQLITE_OK
		}
	}
	return sqlite3.SQLITE_DENY
}

// A statement that its deadline has not stopped sqliteGrace after it is abandoned, so that Exec
// returns within the deadline plus 1 s: Exec returns its timeout at once and the connection is
// closed when the statement returns. Abandoned statements still use a core each, so at most
// sqliteRunawaysPerDB of them per database and sqliteRunaways in the process are outstanding:
// while either is full, a new statement on that database does not run and Exec fails with
// sandbox.ErrBusy (the database's failure, not the statement's), and one already running that
// outlives its deadline is waited for (its own timeout).
const (
	sqliteGrace         = 900 * time.Millisecond
	sqliteRunawaysPerDB = 2
	sqliteRunaways      = 8
)

// sqliteRunawaysNow counts the abandoned statements of the process still running,
// sqliteRunawaysTotal all it abandoned.
var sqliteRunawaysNow, sqliteRunawaysTotal atomic.Int64

// sqliteDB is a SQLite file opened read-only and immutable.
type sqliteDB struct {
	db       *sql.DB
	version  string
	runaways atomic.Int64 // abandoned statements still running
	// deadlineSet, where not nil (tests), is called once a statement's connection has its
	// deadline: the time a loaded machine may take between SQLite's deadline and the statement.
	deadlineSet func()
	// withDeadline, where not nil (tests), makes a statement's context in place of
	// context.WithDeadline: one whose Err comes late, as its timer's goroutine may on a loaded machine.
	withDeadline func(context.Context, time.Time) (context.Context, context.CancelFunc)
}

// Open opens the SQLite file at path read-only (mode=ro&immutable=1). Each statement runs
// on a connection of its own with a deadline that a progress handler and the bounded built-ins
// enforce (guardSQLite), besides the driver's interrupt on context cancellation; see
// sqliteGrace for one they do not stop. The first connection is made here and pooled; where
// making it runs out of SQLite's heap (sqliteHeapLimit, the process's: other statements hold
// it), the file is only checked to read as a SQLite database (checkSQLiteHeader) and the first
// statement makes the connection, waiting for the heap as a statement that runs out of it does
// (run, exec): a database opened while other tasks' statements hold the heap is not this task's
// failure. Where the process or the system has no file descriptor left for the first connection
// (EMFILE, ENFILE: connNoFds), Open fails with sandbox.ErrBusy, as a statement's connection does:
// the process's other files hold them, and an opener that tries again later opens it.
func Open(path string) (sandbox.DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open sqlite database %s: %w", path, err)
	}
	db, err := sql.Open(sqliteReadDriver, sqliteDSN(path))
	if err != nil {
		return nil, fmt.Errorf("open sqlite database %s: %w", path, err)
	}
	if err := db.Ping(); err != nil {
		if connNoFds(err) {
			db.Close()
			return nil, fmt.Errorf("open sqlite database %s: %w: no file descriptor left to open it (the process's or the system's open files all taken); try again once others are closed (%v)", path, sandbox.ErrBusy, err)
		}
		if !heapShort(err) {
			db.Close()
			return nil, fmt.Errorf("open sqlite database %s: %w", path, err)
		}
		if err := checkSQLiteHeader(path); err != nil {
			db.Close()
			return nil, fmt.Errorf("open sqlite database %s: %w", path, err)
		}
	}
	v, _, _ := sqlite3.Version() // the library every connection runs: sqlite_version()
	return &sqliteDB{db: db, version: "SQLite " + v}, nil
}

// sqliteDSN is go-sqlite3's name for the SQLite file at path, opened read-only and immutable
// through sqliteTempVFS (SQLite opens a connection's temporary files through its database's VFS).
func sqliteDSN(path string) string {
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?mode=ro&immutable=1&_query_only=1&vfs=" + sqliteTempVFS
}

// sqliteMagic is how every SQLite database file starts (the header's first 16 bytes).
const sqliteMagic = "SQLite format 3\x00"

// checkSQLiteHeader is Open's check of the file at path where SQLite's heap is too short to open
// it: what SQLite refuses before reading any table, short of its page checks. A file it cannot
// read (a directory, one without permission) and one that does not start with sqliteMagic
// ("file is not a database", one shorter than it too: SQLite reads a short first page as
// zeros) fail; an empty file is an empty database.
func checkSQLiteHeader(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, len(sqliteMagic))
	n, err := io.ReadFull(f, head)
	switch {
	case err == io.EOF:
		return nil // empty: SQLite opens it as an empty database
	case err != nil && err != io.ErrUnexpectedEOF:
		return err
	case string(head[:n]) != sqliteMagic:
		return errors.New("file is not a database (no SQLite header)")
	}
	return nil
}

func (s *sqliteDB) Dialect() datasets.Dialect { return datasets.SQLite }
func (s *sqliteDB) Version() string           { return s.version }
func (s *sqliteDB) Close() error              { return s.db.Close() }

func (s *sqliteDB) Exec(ctx context.Context, query string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	start := time.Now()
	stmt, timeout, refused := sandbox.StartExec(query, datasets.SQLite, opts)
	if refused != nil {
		return refused, nil
	}
	return s.exec(ctx, start, stmt, timeout, opts)
}

// exec runs stmt, already screened (run), and once more in its turn (awaitTurn) if it ran out
// of SQLite's heap or of its temporary files' cap while others held most of it (again, after a
// wait for room, while it runs out of the heap in its turn with others holding most of it, until
// its wait's time limit has passed), unless its RowFilter was asked about rows of the run: a filter keeps what it was told (the judge's keeps a row per key and skips the
// rows it saw), so it would read the rows of a second run as seen. Such a statement fails with
// the heap's sandbox.ErrBusy at once, and its caller runs it again whole with a fresh filter
// (the judge does: sandbox.RetryBusy).
func (s *sqliteDB) exec(ctx context.Context, start time.Time, stmt string, timeout time.Duration, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	res, err := s.run(ctx, start, stmt, timeout, opts, false)
	var held *capBusyError
	if !errors.As(err, &held) || held.asked {
		return res, err
	}
	// It ran out of the heap (or the temporary files' cap) while others held most of it: its own
	// need or theirs? Run it again alone in its turn (awaitTurn), where running out is its own.
	until := time.Now().Add(timeout)
	release, err := awaitTurn(ctx, timeout, opts.Waiting, held.room)
	if err != nil {
		return nil, err
	}
	if release == nil {
		return nil, held
	}
	defer release()
	for {
		res, err = s.run(ctx, start, stmt, timeout, opts, true)
		if !errors.As(err, &held) || held.asked || !held.again {
			return res, err
		}
		// It ran out of the heap in its turn, others holding more than half once its memory was
		// freed: statements that started (or ran on) meanwhile took the room. It waits for room
		// again, keeping its turn, within what is left of its wait's time limit, and runs again.
		ok, err := awaitRoom(ctx, time.Until(until), opts.Waiting, held.room)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, held
		}
	}
}

// sqliteHeapTurn is held by the one statement of the process at a time that runs again after
// running out of SQLite's heap, or of its temporary files' cap, while others held most of it
// (awaitTurn).
var sqliteHeapTurn = make(chan struct{}, 1)

// sqliteHeapPoll is how often awaitTurn looks at the heap (or the temporary files) in use.
const sqliteHeapPoll = 10 * time.Millisecond

// awaitTurn waits, for a statement that ran out of SQLite's heap while other statements held
// more than half of it (heapHeld, its own memory freed), for its turn (sqliteHeapTurn) and then
// until room reports the heap in use fallen to at most half of its limit (heapRoom), both within limit,
// telling waiting (ExecOptions.Waiting, when not nil) while it waits. It returns the release of
// the turn, to call once the statement has run again; nil when limit passed first (the
// statement stays sandbox.ErrBusy); an error when ctx is done first. Several statements that
// each need more than the whole heap, run together, make each other run out: in turns each runs
// out alone and keeps its own "out of memory" (before, each was ErrBusy, and Patient tried them
// again together until its patience ran out). A statement that passed the cap on temporary
// files while others held more than half of it (tempHeld) waits the same, room being tempRoom.
func awaitTurn(ctx context.Context, limit time.Duration, waiting func(bool), room func() bool) (release func(), err error) {
	if waiting != nil {
		waiting(true)
		defer waiting(false)
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case sqliteHeapTurn <- struct{}{}:
	case <-timer.C:
		return nil, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("sqlite exec: %w", ctx.Err())
	}
	if ok, err := roomBy(ctx, timer.C, room); !ok {
		<-sqliteHeapTurn
		return nil, err
	}
	return func() { <-sqliteHeapTurn }, nil
}

// awaitRoom waits, for a statement that holds its turn (awaitTurn) and ran out of SQLite's heap
// in it while others took the room again, until room reports room again, within limit, telling
// waiting (when not nil) while it waits. It reports false when limit passed first; an error
// when ctx is done first.
func awaitRoom(ctx context.Context, limit time.Duration, waiting func(bool), room func() bool) (bool, error) {
	if limit <= 0 {
		return false, nil
	}
	if waiting != nil {
		waiting(true)
		defer waiting(false)
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	return roomBy(ctx, timer.C, room)
}

// roomBy polls room (every sqliteHeapPoll) until it reports room: true; false when expired
// fires first, an error when ctx is done first.
func roomBy(ctx context.Context, expired <-chan time.Time, room func() bool) (bool, error) {
	tick := time.NewTicker(sqliteHeapPoll)
	defer tick.Stop()
	for !room() {
		select {
		case <-tick.C:
		case <-expired:
			return false, nil
		case <-ctx.Done():
			return false, fmt.Errorf("sqlite exec: %w", ctx.Err())
		}
	}
	return true, nil
}

// run executes stmt, already screened, on a connection of its own with the deadline set in
// SQLite, and abandons it (see sqliteGrace) if it outlives the deadline by sqliteGrace. Its
// temporary files passing their cap (sqliteTempLimit) is its error, tempFull, or, while others
// hold more than half of the cap, tempHeld's sandbox.ErrBusy, as the heap's below, in its
// turn too (a statement that started meanwhile may have taken the cap again); the disk having
// no space left for them, within the cap, is tempDiskFull's sandbox.ErrBusy, and the process
// having no file descriptor left to open one is tempFdsOut's (and to make its connection,
// connNoFds, sandbox.ErrBusy too), unless the statement's own files took them (tempFdsOwn: its
// error). A
// statement that runs out of SQLite's heap while others hold most of it fails with heapHeld's
// sandbox.ErrBusy, in its turn too (turn, awaitTurn: then marked to wait for room again in it,
// capBusyError.again); its "out of memory" is its own error only where others hold at most half
// once its memory is freed, as for one that ran out holding most of the heap itself; one that
// ran out making its connection (opening it, installing its guard) is ErrBusy in its turn too. Running
// out converting a row's values for the driver (a zeroblob's expansion) is running out as in a
// step, before its RowFilter sees the row: go-sqlite3 reads such a value as empty, and only the
// next step fails, which a filter's stop on that row never takes (sqliteRowShort).
func (s *sqliteDB) run(ctx context.Context, start time.Time, stmt string, timeout time.Duration, opts sandbox.ExecOptions, turn bool) (*sandbox.Result, error) {
	if n, all := s.runaways.Load(), sqliteRunawaysNow.Load(); n >= sqliteRunawaysPerDB || all >= sqliteRunaways {
		// Not the statement's outcome: it never ran (see sqliteGrace).
		return nil, fmt.Errorf("sqlite exec: %w: statements still running past their deadline hold the SQLite slots (%d on this database, at most %d; %d in the process, at most %d); try again once they end",
			sandbox.ErrBusy, n, sqliteRunawaysPerDB, all, sqliteRunaways)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		if busy := heapHeld(err); busy != nil {
			return nil, busy
		}
		if connNoFds(err) {
			return nil, fmt.Errorf("sqlite exec: %w: no file descriptor left to open the database (the process's or the system's open files all taken); try again once others are closed (%v)", sandbox.ErrBusy, err)
		}
		return nil, fmt.Errorf("sqlite exec: %w", err)
	}
	var short func() bool
	var stored sandbox.ColumnNormaliser
	var guard func(context.Context, func()) (bool, bool)
	// The context's deadline comes before SQLite's (sqliteDeadline, set below): a statement that
	// SQLite stops at its deadline may end with another error than the interrupt (with the heap
	// full, "out of memory"), which is its timeout once deadline has passed. That is read on the
	// clock, not from qctx.Err: the timer that expires qctx runs its cancel on a goroutine of its
	// own, which a loaded machine may run milliseconds after SQLite stopped the statement.
	deadline := time.Now().Add(timeout)
	withDeadline := context.WithDeadline
	if s.withDeadline != nil {
		withDeadline = s.withDeadline
	}
	qctx, cancel := withDeadline(ctx, deadline)
	defer cancel()
	if err := conn.Raw(func(dc any) error {
		c := dc.(*sqlite3.SQLiteConn)
		var err error
		if stored, err = sqliteStoredValues(c); err != nil {
			return err
		}
		if opts.Filter != nil {
			if short, err = sqliteRowShort(c); err != nil {
				return err
			}
		}
		if guard, err = sqliteGuardPrepare(c); err != nil {
			return err
		}
		return sqliteDeadline(c, timeout)
	}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("sqlite exec: %w", err)
	}
	if s.deadlineSet != nil {
		s.deadlineSet()
	}
	var asked sqliteAsked // written by Collect's goroutine, read once it has sent on done
	if f := opts.Filter; f != nil {
		opts.Filter = func(row []any) sandbox.RowAction {
			if short() {
				asked.short = true
				return sandbox.RowStop
			}
			asked.rows = true
			return f(row)
		}
	}
	done := make(chan sqliteOutcome, 1)
	go func() {
		res, err := collectGuarded(qctx, conn, guard, stmt, opts, stored)
		done <- sqliteOutcome{res, err}
	}()
	o, abandoned := s.await(ctx, conn, done, timeout+sqliteGrace)
	if abandoned {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sqlite exec: %w", ctx.Err())
		}
		return sandbox.TimedOut(timeout, time.Since(start)), nil
	}
	res, err := o.res, o.err
	res.Duration = time.Since(start)
	if asked.short {
		err = errRowShort
	}
	if err == nil {
		return res, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("sqlite exec: %w", ctx.Err())
	}
	if sandbox.IsTooLarge(err) {
		return sandbox.TooLarge(res), nil
	}
	var se sqlite3.Error
	if errors.Is(err, errPrepareStopped) || qctx.Err() != nil || !time.Now().Before(deadline) || (errors.As(err, &se) && se.Code == sqlite3.ErrInterrupt) {
		return sandbox.TimedOut(timeout, res.Duration), nil
	}
	if tempNoSpace(err) {
		return nil, tempDiskFull(err)
	}
	if tempNoFds(err) {
		if own := tempFdsOwn(err); own != nil {
			return &sandbox.Result{Outcome: sandbox.OutcomeError, Error: own.Error(), Duration: res.Duration}, nil
		}
		return nil, tempFdsOut(err)
	}
	if busy := heapHeld(err); busy != nil {
		busy.asked = asked.rows
		busy.again = turn
		return nil, busy
	}
	// Unlike the heap's, others' temporary files are held only by their running statements, and
	// the turn keeps out only statements waiting for one: others holding more than half once this
	// one's files are closed ran it out, in its turn too.
	if busy := tempHeld(err); busy != nil {
		busy.asked = asked.rows
		return nil, busy
	}
	if tempShort(err) {
		err = tempFull(err)
	}
	return &sandbox.Result{Outcome: sandbox.OutcomeError, Error: err.Error(), Duration: res.Duration}, nil
}

// collectGuarded prepares stmt on conn once, under guard (sqliteGuardPrepare: the deadline set
// on conn, or qctx done, stops the prepare), and gathers its rows (sandbox.Collect) within
// qctx. A prepare the guard stopped is errPrepareStopped; text that holds no statement (only
// comments, whitespace and semicolons, which Screen refuses before) is errNoStatement, never run.
func collectGuarded(qctx context.Context, conn *sql.Conn, guard func(context.Context, func()) (bool, bool), stmt string, opts sandbox.ExecOptions, stored sandbox.ColumnNormaliser) (*sandbox.Result, error) {
	var st *sql.Stmt
	var err error
	stopped, made := guard(qctx, func() { st, err = conn.PrepareContext(qctx, stmt) })
	if stopped {
		if st != nil {
			st.Close()
		}
		return &sandbox.Result{}, errPrepareStopped
	}
	if err != nil {
		return &sandbox.Result{}, err
	}
	defer st.Close()
	if !made {
		return &sandbox.Result{}, errNoStatement
	}
	// Closing the rows resets the statement: a stop needs no Stopper.
	return sandbox.Collect(qctx, preparedQuery{st}, stmt, opts, stored, nil)
}

// errPrepareStopped is collectGuarded's error for a prepare that its deadline or its context
// stopped.
var errPrepareStopped = errors.New("sqlite prepare: stopped at the deadline or on cancellation")

// errNoStatement is collectGuarded's error for text in which SQLite found no statement.
var errNoStatement = errors.New("sqlite exec: no statement to run (only comments or whitespace)")

// preparedQuery is a sandbox.Queryer that runs its prepared statement, whatever query it is
// given (Collect passes the statement's own text).
type preparedQuery struct{ st *sql.Stmt }

// QueryContext runs q's statement within ctx; the query text is the statement's own.
func (q preparedQuery) QueryContext(ctx context.Context, _ string, args ...any) (*sql.Rows, error) {
	return q.st.QueryContext(ctx, args...)
}

// sqliteAsked is what a statement's RowFilter was asked (run).
type sqliteAsked struct {
	rows  bool // about a row
	short bool // nothing, for a row whose values SQLite ran out of its heap converting
}

// errRowShort is the error of a statement that ran out of SQLite's heap converting a row's
// values for the driver (sqliteRowShort): SQLite's "out of memory".
var errRowShort = sqlite3.Error{Code: sqlite3.ErrNomem}

// heapShort reports whether err is SQLite's "out of memory": its heap (sqliteHeapCap) ran out.
func heapShort(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrNomem
}

// heapHeld returns, for err of a statement whose memory is released (its rows closed, its
// connection given back), an error wrapping sandbox.ErrBusy when err is SQLite's "out of memory"
// and other statements of the process still hold more than half of SQLite's heap: the cap
// (sqliteHeapLimit) is the process's, so one statement may hold nearly all of it until its
// deadline, and the statement that then ran out is the database's failure, not its own, unless
// it runs out again in its turn (exec, awaitTurn). A statement that ran out holding more than
// half itself keeps its error: nil.
func heapHeld(err error) *capBusyError {
	if !heapShort(err) {
		return nil
	}
	used := sqliteHeapUsed()
	if used <= sqliteHeapCap()/2 {
		return nil
	}
	return newHeapBusy(err, used)
}

// newHeapBusy is the sandbox.ErrBusy of a statement that ran out of SQLite's heap (err) while
// others held used bytes of it.
func newHeapBusy(err error, used int64) *capBusyError {
	return &capBusyError{err: fmt.Errorf("sqlite exec: %w: SQLite's heap (%d MiB for the whole process) ran out while other statements held %d MiB of it; try again once they end (%v)",
		sandbox.ErrBusy, sqliteHeapCap()>>20, used>>20, err), room: heapRoom}
}

// heapRoom reports whether SQLite's heap in use is at most half of its limit: where a
// statement that ran out of it while others held more runs again in its turn (awaitTurn).
func heapRoom() bool { return sqliteHeapUsed() <= sqliteHeapCap()/2 }

// tempShort reports whether err is SQLite's "database or disk is full" from sqliteTempCap: a
// write to a temporary file would pass it (the read connections write no other file). The
// disk's own refusal is tempNoSpace.
func tempShort(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrFull && se.ExtendedCode != sqliteTempNoSpace
}

// tempNoSpace reports whether err is SQLite's "database or disk is full" from the disk: a write
// to a temporary file that the file system refused for want of space (ENOSPC, or EDQUOT: the
// disk quota reached), within the cap,
// or its open where the file system had no block or inode left (sqliteTempNoSpace).
func tempNoSpace(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrFull && se.ExtendedCode == sqliteTempNoSpace
}

// tempDiskFull is the error of a statement whose temporary file's write the disk refused for
// want of space (err, tempNoSpace): sandbox.ErrBusy, the database's failure and not the
// statement's, which did not reach the cap (sqliteTempCap) that bounds its need. The space
// comes back as other statements' temporary files (or the other files of that file system) are
// freed; the caller tries again later (sandbox.Patient).
func tempDiskFull(err error) error {
	return fmt.Errorf("sqlite exec: %w: no space left on the temporary files' disk (full, or its disk quota reached; SQLite's temporary files take %d MiB of their cap of %d MiB for the process); try again once space is freed (%v)",
		sandbox.ErrBusy, sqliteTempUsed()>>20, sqliteTempCap()>>20, err)
}

// tempNoFds reports whether err is SQLite's "unable to open database file" for a temporary file
// that found no file descriptor: the process's (EMFILE, RLIMIT_NOFILE: sqliteTempNoFds) or the
// system's (ENFILE: sqliteTempNoFile) all taken.
func tempNoFds(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrCantOpen && (se.ExtendedCode == sqliteTempNoFds || se.ExtendedCode == sqliteTempNoFile)
}

// tempFdsOwn is the statement's own error where err (tempNoFds), of a statement whose temporary
// files are closed, is the process's limit (EMFILE) and the process now holds at most half of
// it (openFds, the soft RLIMIT_NOFILE): the statement's own temporary files (one open for each
// sort or materialised subquery past the page cache, until it ends) took the rest, and trying
// it again fails alike. Otherwise (the system's ENFILE; the process still holding more than
// half; its descriptors not countable) nil: others hold them, tempFdsOut's sandbox.ErrBusy.
func tempFdsOwn(err error) error {
	var se sqlite3.Error
	if !errors.As(err, &se) || se.ExtendedCode != sqliteTempNoFds {
		return nil
	}
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return nil
	}
	n, ok := openFds()
	if !ok || uint64(n) > lim.Cur/2 {
		return nil
	}
	return fmt.Errorf("%w: the statement's temporary files (one for each sort or materialised subquery past the page cache, open until it ends) need more file descriptors than the process's limit of %d leaves (%d open without them)",
		err, lim.Cur, n)
}

// openFds counts the process's open file descriptors (/proc/self/fd, less the one reading it);
// false where they cannot be read, as when none is left to open the directory.
func openFds() (int, bool) {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil || len(fds) == 0 {
		return 0, false
	}
	return len(fds) - 1, true
}

// connNoFds reports whether err, of making a connection, is SQLite's "unable to open database
// file" for want of a file descriptor (the errno SQLite kept: EMFILE, the process's limit, or
// ENFILE, the system's): the process's other files hold them, not a database lost.
func connNoFds(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrCantOpen && (se.SystemErrno == syscall.EMFILE || se.SystemErrno == syscall.ENFILE)
}

// tempFdsOut is the error of a statement whose temporary file found no file descriptor (err,
// tempNoFds): sandbox.ErrBusy, the process's failure and not the statement's (it asked for one
// file, within the cap), nor the disk's. The descriptors come back as the process's other files
// (other statements' temporary files, connections) close; the caller tries again later.
func tempFdsOut(err error) error {
	return fmt.Errorf("sqlite exec: %w: no file descriptor left for a temporary file (the process's or the system's open files all taken); try again once others are closed (%v)",
		sandbox.ErrBusy, err)
}

// tempFull is the error of a statement whose temporary files passed their cap (err,
// tempShort) by its own need: it says what the cap is and what spills to temporary files.
func tempFull(err error) error {
	return fmt.Errorf("%w: the statement's temporary files (a sort, DISTINCT, GROUP BY or subquery past SQLite's page cache) would pass their cap of %d MiB for the process",
		err, sqliteTempCap()>>20)
}

// tempHeld is heapHeld for SQLite's temporary files: for err of a statement whose files are
// closed (its statement finalised, its connection given back), an error wrapping
// sandbox.ErrBusy when err is SQLITE_FULL (tempShort) and other statements' temporary files
// still take more than half of the cap (sqliteTempCap, the process's): those statements ran it
// out, in its turn (exec, awaitTurn) too, where others that started meanwhile may hold it. One
// that passed the cap while others held at most half of it keeps its own error (tempFull): nil.
func tempHeld(err error) *capBusyError {
	if used := sqliteTempUsed(); tempShort(err) && used > sqliteTempCap()/2 {
		return &capBusyError{err: fmt.Errorf("sqlite exec: %w: SQLite's temporary files (%d MiB for the whole process) ran out while other statements' files took %d MiB; try again once they end (%v)",
			sandbox.ErrBusy, sqliteTempCap()>>20, used>>20, err), room: tempRoom}
	}
	return nil
}

// tempRoom reports whether SQLite's temporary files take at most half of their cap.
func tempRoom() bool { return sqliteTempUsed() <= sqliteTempCap()/2 }

// capBusyError is heapHeld's and tempHeld's error, wrapping sandbox.ErrBusy.
type capBusyError struct {
	err   error
	asked bool        // the statement's RowFilter was asked about rows before it ran out (exec)
	again bool        // it ran out of the heap in its turn: it waits for room again in it (exec)
	room  func() bool // whether what it ran out of has room again to run it in its turn
}

func (e *capBusyError) Error() string { return e.err.Error() }
func (e *capBusyError) Unwrap() error { return e.err }

// await waits for the statement on conn to send on done, and releases conn. It abandons the
// statement instead (see sqliteGrace) if it has not sent by limit, or sqliteGrace after ctx is
// done, reporting true.
func (s *sqliteDB) await(ctx context.Context, conn *sql.Conn, done <-chan sqliteOutcome, limit time.Duration) (sqliteOutcome, bool) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	var o sqliteOutcome
	select {
	case o = <-done:
		releaseSQLite(conn, false)
		return o, false
	case <-timer.C:
	case <-ctx.Done():
		timer.Reset(sqliteGrace)
		select {
		case o = <-done:
			releaseSQLite(conn, false)
			return o, false
		case <-timer.C:
		}
	}
	if s.abandon(conn, done) {
		return o, true
	}
	o = <-done
	releaseSQLite(conn, false)
	return o, false
}

// sqliteOutcome is what Collect returned for one statement.
type sqliteOutcome struct {
	res *sandbox.Result
	err error
}

// abandon counts the statement on conn as a runaway until it sends on done, then closes conn
// without returning it to the pool. It reports false, and leaves the statement to its caller,
// when the database or the process already has its most runaways.
func (s *sqliteDB) abandon(conn *sql.Conn, done <-chan sqliteOutcome) bool {
	if !reserve(&s.runaways, sqliteRunawaysPerDB) {
		return false
	}
	if !reserve(&sqliteRunawaysNow, sqliteRunaways) {
		s.runaways.Add(-1)
		return false
	}
	sqliteRunawaysTotal.Add(1)
	go func() {
		<-done
		releaseSQLite(conn, true)
		s.runaways.Add(-1)
		sqliteRunawaysNow.Add(-1)
	}()
	return true
}

// reserve adds one to n unless that would pass limit.
func reserve(n *atomic.Int64, limit int64) bool {
	for {
		v := n.Load()
		if v >= limit {
			return false
		}
		if n.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// releaseSQLite clears conn's deadline, releases its page cache (sqliteReleaseCache: an idle
// connection's cache would count as heap other statements hold, heapHeld) and gives it back to
// the pool, or closes it (discard).
func releaseSQLite(conn *sql.Conn, discard bool) {
	conn.Raw(func(dc any) error {
		c := dc.(*sqlite3.SQLiteConn)
		if discard || sqliteDeadline(c, 0) != nil || sqliteReleaseCache(c) != nil {
			return driver.ErrBadConn
		}
		return nil
	})
	conn.Close()
}
