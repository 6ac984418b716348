package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// mysqlDB executes in one database of a MySQL or MariaDB server.
type mysqlDB struct {
	pool     *sql.DB
	database string
	role     string // the task role each connection enables (mysqlTaskRole); "" as the DSN's user
	version  string
	mariadb  bool

	// srv is the server's share of connections, killer pool and runaway count, shared by the
	// MySQL DBs of one Connector; owned (closed with the DB) when opened alone.
	srv    *mysqlServer
	ownSrv bool

	// open holds a unit per connection of pool taken by an execution (run), mysqlOpenPerDB
	// (at most the share's limit): an execution that finds none free knows it waits
	// (ExecOptions.Waiting). The pool has no MaxOpenConns of its own, at which database/sql
	// would wait untold (an idle connection being closed, by closeIdle or the idle cleaner,
	// still counts there until its Close returns): open bounds the executions' connections, the
	// share (mysqlServer.conns, taken where the pool dials) every connection, closing ones
	// included, and a holder of a unit finds an idle connection or dials one with its own
	// deadline and WaitTeller.
	open chan struct{}

	mu  sync.Mutex
	ids map[any]mysqlThread // driver connection → its server thread

	// runaways counts this database's runaway threads still running (mysqlRunawaysPerDB).
	runaways atomic.Int64

	// cut counts the replies cut at MaxResultBytes (replyLimitConn). The driver reports such a
	// cut as a lost connection; one counted during an execution that lost its connection is
	// taken to be its own.
	cut atomic.Int64
}

// Open opens database on the MySQL/MariaDB server of dsn (go-sql-driver/mysql form, e.g.
// "root@tcp(127.0.0.1:3306)/"; its database part is replaced), executing as acc says: by default
// in a pool of its own logged in as the reader made by EnsureReader, whose password is looked up
// with the DSN's user, each connection under the database's task role. Each Exec runs in a
// READ ONLY transaction under a statement time limit (MariaDB: SET STATEMENT
// max_statement_time ... FOR; MySQL: max_execution_time), backed at the deadline by KILL QUERY
// and then KILL CONNECTION from a second connection of the same user (see mysqlServer for the
// share of connections it holds and the threads that outlive both).
func Open(ctx context.Context, dsn, database string, acc sandbox.Access) (sandbox.DB, error) {
	if database == "" {
		return nil, fmt.Errorf("mysql: empty database name")
	}
	cfg, err := mysqlExecConfig(ctx, dsn, acc)
	if err != nil {
		return nil, mysqlHourly(err) // the reader's login and checks count as its queries
	}
	srv, err := newMySQLServer(ctx, cfg, 0)
	if err != nil {
		return nil, mysqlHourly(err)
	}
	db, err := openMySQLConfig(ctx, cfg, database, acc, srv)
	if err != nil {
		srv.close()
		return nil, mysqlHourly(err)
	}
	db.ownSrv = true
	return db, nil
}

// openMySQLConfig opens database with the connection settings of base (see mysqlExecConfig),
// within the share of srv. As a reader, connections log in with no database (the login itself
// may use none), enable the database's task role and then USE it.
func openMySQLConfig(ctx context.Context, base *mysql.Config, database string, acc sandbox.Access, srv *mysqlServer) (*mysqlDB, error) {
	cfg := base.Clone()
	if acc.AsDSNUser {
		cfg.DBName = database
	} else {
		cfg.DBName = ""
	}
	where := fmt.Sprintf("mysql %s/%s", cfg.Addr, database)
	db := &mysqlDB{database: database, ids: map[any]mysqlThread{}, srv: srv}
	dial := sandbox.DialFunc(cfg.DialFunc)
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}
	cfg.DialFunc = checkable(sandbox.LimitReplies(srv.dial(dial), &db.cut))
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	pool := sql.OpenDB(sandbox.TrackReplies(conn))
	db.open = make(chan struct{}, min(mysqlOpenPerDB, srv.limit))
	// No MaxOpenConns: open and the share bound the connections (see mysqlDB.open).
	pool.SetMaxIdleConns(mysqlIdlePerDB)
	pool.SetConnMaxIdleTime(mysqlIdleTime)
	db.pool = pool
	srv.addPool(pool)
	fail := func(err error) (*mysqlDB, error) {
		srv.dropPool(pool)
		pool.Close()
		switch myErrNo(err) {
		case 1049:
			return nil, fmt.Errorf("%s: database %q does not exist (copy the SQLite database first: distill load --dialect mysql)", where, database)
		case 1044, 1959: // a reader is told this whether or not the database exists; 1959: no such role
			if !acc.AsDSNUser {
				return nil, sandbox.ReaderUngranted(where, acc.ReaderName(), "database", database)
			}
		}
		return nil, fmt.Errorf("%s: connect: %w", where, err)
	}
	var v, mode string
	if err := pool.QueryRowContext(ctx, "SELECT VERSION(), @@SESSION.sql_mode").Scan(&v, &mode); err != nil {
		return fail(err)
	}
	if why := mysqlQuotingRefused(mode); why != "" {
		return fail(errors.New(why))
	}
	num, _, _ := strings.Cut(v, "-")
	if strings.Contains(v, "MariaDB") {
		db.mariadb = true
		db.version = "MariaDB " + num
	} else {
		db.version = "MySQL " + num
	}
	if !acc.AsDSNUser {
		db.role = mysqlTaskRole(acc.ReaderName(), database, db.mariadb)
	}
	c, err := pool.Conn(ctx)
	if err != nil {
		return fail(err)
	}
	_, err = db.connID(ctx, c)
	c.Close()
	if err != nil {
		return fail(err)
	}
	return db, nil
}

// mysqlConfig parses dsn and points it at database, with dates and times read as the server's
// text (the driver's time parsing reads '0000-00-00 00:00:00' as 0001-01-01 and a zero month
// or day as the days before), a single statement per query and no compression: the result
// limit counts the bytes on the wire (sandbox.LimitReplies), and a compressed row of a gigabyte
// of one letter is a megabyte there. Its sessions read quotes as the screen does
// (mysqlQuotingMode, and the client character set utf8mb4: in GBK or Big5 the last byte of a
// character may be a backslash, which then escapes no quote): a DSN parameter the driver would
// SET that is not a plain name, or that sets a character_set_ variable, is an error, and its
// sql_mode is read in any case.
func mysqlConfig(dsn, database string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql: parse DSN: %w", err)
	}
	cfg.DBName = database
	cfg.ParseTime = false
	cfg.Loc = time.UTC
	cfg.MultiStatements = false
	cfg.AllowAllFiles = false
	collation := cfg.Collation
	if !strings.HasPrefix(collation, "utf8mb4_") {
		collation = "utf8mb4_general_ci"
	}
	if err := cfg.Apply(mysql.EnableCompression(false), mysql.Charset("utf8mb4", collation)); err != nil {
		return nil, fmt.Errorf("mysql: DSN: %w", err)
	}
	mode := "@@SESSION.sql_mode" // the server's default
	params := map[string]string{}
	for k, v := range cfg.Params {
		// The driver sends each as SET k = v, in the map's random order: SQL_MODE beside the
		// sql_mode set here ran under either, and character_set_client=gbk undid utf8mb4.
		name := strings.ToLower(k)
		switch {
		case strings.TrimLeft(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != "":
			return nil, fmt.Errorf("mysql: DSN parameter %q: only a system variable's plain name may be set", k)
		case strings.HasPrefix(name, "character_set_") || name == "names":
			return nil, fmt.Errorf("mysql: DSN parameter %q: the client character set is utf8mb4 (a backslash may end a character in others, and then escapes no quote)", k)
		case name == "sql_mode":
			if mode != "@@SESSION.sql_mode" {
				return nil, fmt.Errorf("mysql: DSN sets sql_mode twice (%q)", k)
			}
			if v != "" {
				mode = v
			}
		default:
			params[name] = v
		}
	}
	params["sql_mode"] = mysqlQuotingMode(mode)
	cfg.Params = params
	return cfg, nil
}

// mysqlQuotingFlags are the sql_mode flags a session's mode is set without (mysqlQuotingMode),
// under which MariaDB reads a statement otherwise than the screen: ANSI_QUOTES,
// NO_BACKSLASH_ESCAPES, PIPES_AS_CONCAT (x LIKE 'a' || col is a pattern built from a column, not
// an OR), and the combination modes that hold them (ORACLE also switches MariaDB to another
// grammar).
var mysqlQuotingFlags = []string{"ANSI_QUOTES", "NO_BACKSLASH_ESCAPES", "PIPES_AS_CONCAT", "ANSI", "DB2", "MAXDB", "MSSQL", "ORACLE", "POSTGRESQL"}

// mysqlQuotingMode returns the SQL expression of the session's sql_mode from mode (the DSN's
// value, or the server's @@SESSION.sql_mode): that without mysqlQuotingFlags, so that a session
// reads quotes as the screen does: " quotes a string, and a backslash escapes the next byte in
// one, and || is OR. Under ANSI_QUOTES "space"(3), a string to the screen, calls SPACE; under
// NO_BACKSLASH_ESCAPES 'a\', SPACE(3) -- ' runs the SPACE the screen read inside a string. The
// flags are matched as MariaDB reads them, in any case and with spaces after them, each item
// between its own commas (REPLACE does not match overlapping ones: 'ANSI_QUOTES,ANSI_QUOTES');
// MariaDB reads the empty items left as nothing. What this misses (a number, a tab) the
// session's check in openMySQLConfig refuses (mysqlQuotingRefused).
func mysqlQuotingMode(mode string) string {
	e := "CONCAT(',,', REPLACE(REPLACE(UPPER(" + mode + "), ' ', ''), ',', ',,'), ',,')"
	for _, f := range mysqlQuotingFlags {
		e = "REPLACE(" + e + ", '," + f + ",', ',')"
	}
	return "TRIM(BOTH ',' FROM " + e + ")"
}

// mysqlQuotingRefused says why a session whose @@sql_mode is mode does not read statements as the
// screen does (it holds one of mysqlQuotingFlags), or "".
func mysqlQuotingRefused(mode string) string {
	for f := range strings.SplitSeq(mode, ",") {
		if slices.Contains(mysqlQuotingFlags, strings.ToUpper(strings.TrimSpace(f))) {
			return fmt.Sprintf("the session's sql_mode %q holds %s, under which MariaDB reads statements otherwise than the screen (drop it from the DSN's sql_mode)", mode, strings.TrimSpace(f))
		}
	}
	return ""
}

func (m *mysqlDB) Dialect() datasets.Dialect { return datasets.MySQL }
func (m *mysqlDB) Version() string           { return m.version }

func (m *mysqlDB) Close() error {
	m.srv.dropPool(m.pool)
	err := m.pool.Close()
	if m.ownSrv {
		err = errors.Join(err, m.srv.close())
	}
	return err
}

// overRunaways is sandbox.ErrBusy naming them while the database has mysqlRunawaysPerDB
// runaways, else nil. Not the statement's outcome: it never ran.
func (m *mysqlDB) overRunaways() error {
	if n := m.runaways.Load(); n >= mysqlRunawaysPerDB {
		return fmt.Errorf("mysql exec in database %s: %w: %d of its statements still run on the server past their deadline (runaways, at most %d per database; %d in this run's share); try again once they end",
			m.database, sandbox.ErrBusy, n, mysqlRunawaysPerDB, m.srv.running.Load())
	}
	return nil
}

// connID returns the server thread of conn (its id and the server's start), cached per driver
// connection. A connection seen for the first time first enables the task role and uses the
// database.
func (m *mysqlDB) connID(ctx context.Context, conn *sql.Conn) (mysqlThread, error) {
	var key any
	_ = conn.Raw(func(dc any) error { key = dc; return nil })
	m.mu.Lock()
	th, ok := m.ids[key]
	m.mu.Unlock()
	if ok {
		return th, nil
	}
	if m.role != "" {
		for _, q := range []string{"SET ROLE " + sandbox.SQLString(m.role), "USE " + sandbox.QuoteIdent(datasets.MySQL, m.database)} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				sandbox.Discard(conn)
				return th, err
			}
		}
	}
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&th.id); err != nil {
		return th, err
	}
	// th.serverStart stays 0: runaway reads the server's start for a thread it watches.
	m.mu.Lock()
	if len(m.ids) > 256 { // connections come and go; forget the old ones wholesale
		clear(m.ids)
	}
	m.ids[key] = th
	m.mu.Unlock()
	return th, nil
}

func (m *mysqlDB) Exec(ctx context.Context, query string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	start := time.Now()
	stmt, timeout, refused := sandbox.StartExec(query, datasets.MySQL, opts)
	if refused != nil {
		return refused, nil
	}
	return m.run(ctx, start, stmt, timeout, opts)
}

// mysqlNoMerge is the optimizer setting every statement runs under: derived tables and common
// table expressions materialized, never merged into the query that reads them. Merged, each
// reference to one of their columns is its defining expression, evaluated again at every
// reference within one row, and the server checks for a kill only between rows: 7 levels of
// SELECT s+s+…+s (16 references) AS s FROM (…) d, 409 bytes, evaluated the innermost 16^7
// times and ran 48 s past a 1 s max_statement_time (a level more, 16 times that), where
// materialized each level is computed once. It changes the plan, not what a statement
// answers (the order of rows it leaves unordered aside).
const mysqlNoMerge = "optimizer_switch='derived_merge=off'"

// mysqlNoPushdown is mysqlNoMerge on MariaDB, where it also keeps a condition on a derived
// table's columns from being pushed into it (condition_pushdown_for_derived): pushed, each
// column in the condition is replaced by its defining expression, and down a chain of derived
// tables each naming the one before k times the condition grows to k^depth copies, built while
// the statement is optimized, where MariaDB does not check for a kill: 10 levels of SELECT
// s+s+s+s AS s FROM (…) d … WHERE s > 0 (580 bytes) ran 1.5 s past a 0.05 s limit, 9 levels
// 0.4 s, each level more 4 times that. Not pushed, the condition is checked on the rows the
// derived table gives, once.
const mysqlNoPushdown = "optimizer_switch='derived_merge=off,condition_pushdown_for_derived=off'"

// mysqlResetSession, run before each execution's transaction, leaves nothing of what the
// session ran before (another episode's statement, the pool's own queries) for it to read:
// FOUND_ROWS() 0, ROW_COUNT() 0 after START TRANSACTION, no warnings (a statement over a table,
// the derived one here, clears them; one over DUAL does not). The driver has no
// COM_RESET_CONNECTION.
const mysqlResetSession = "SELECT 0 FROM (SELECT 0) d WHERE 0"

// run executes stmt, already screened, in a read-only transaction of its own, within a slot
// of the server's share, on a session reset by mysqlResetSession; a statement that gets no slot
// or no connection by its deadline fails with sandbox.ErrBusy (mysqlDB.busy). ExecOptions.Waiting
// is told of those waits only when one happens (sandbox.WaitTeller). At the deadline
// it sends KILL QUERY; a statement still running mysqlKillGrace later has its connection killed (KILL
// CONNECTION) and abandoned, and a thread still on the server another mysqlKillGrace later is a
// runaway (mysqlServer.runaway): it keeps its slot and connection until it ends. While the
// database has mysqlRunawaysPerDB runaways, a statement does not run and fails with
// sandbox.ErrBusy at once, and so does one that got its connection after they came (it waited
// meanwhile for a slot, a unit of the database's connections or a dial in a full share); those
// already running may each still add theirs, so a database may have up to
// mysqlRunawaysPerDB - 1 + mysqlOpenPerDB (17) of them, never more than the share. A cancelled
// ctx kills the thread the same way. A statement a RowFilter stopped whose reply still streams
// sandbox.StopDrain later gets KILL QUERY, and mysqlKillGrace after that the deadline's KILL
// CONNECTION and runaway check; its Result is ok whatever that took.
func (m *mysqlDB) run(ctx context.Context, start time.Time, stmt string, timeout time.Duration, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	if err := m.overRunaways(); err != nil {
		return nil, err
	}
	// The waits for a slot and a connection end together by the deadline (mysqlWaitGrace past
	// it, so that a tiny timeout still takes a free connection): no slot or connection by then
	// is ErrBusy.
	wctx, wcancel := context.WithTimeout(ctx, timeout+mysqlWaitGrace)
	defer wcancel()
	fail := func(step string, err error) (*sandbox.Result, error) {
		return nil, mysqlHourly(fmt.Errorf("mysql exec in database %s: %s: %w", m.database, step, err))
	}
	// Waiting is told of a wait only when one happens: a slot or a unit of the database's
	// connections not free at once, or a dial in a full share (mysqlServer.dial, through wctx).
	w := sandbox.NewWaitTeller(opts.Waiting)
	defer w.Close()
	wctx = sandbox.WithWaitTeller(wctx, w)
	acquire := func(units chan struct{}, what string) error {
		if err := w.Acquire(wctx, units); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("mysql exec: %w", ctx.Err())
			}
			return m.busy(what)
		}
		return nil
	}
	if err := acquire(m.srv.slots, "slot"); err != nil {
		return nil, err
	}
	releaseSlot := func() { <-m.srv.slots }
	slotHeld := true
	defer func() {
		if slotHeld {
			releaseSlot()
		}
	}()
	// The database's unit goes back after the connection (deferred before conn.Close): the
	// executions' connections never outnumber the units taken. database/sql, with no
	// MaxOpenConns, never waits (untold): it hands over an idle connection or dials one with
	// wctx, whose wait in a full share is told (mysqlServer.dial).
	if err := acquire(m.open, "connection"); err != nil {
		return nil, err
	}
	defer func() { <-m.open }()
	conn, err := m.pool.Conn(wctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("mysql exec: %w", ctx.Err())
		}
		if wctx.Err() != nil { // the share's or the database's connections all held until the deadline
			return nil, m.busy("connection")
		}
		if mysqlHourlyLimit(err) != "" { // not ErrBusy: no wait short of the hour frees it
			return nil, mysqlHourly(fmt.Errorf("mysql exec in database %s: connect: %w", m.database, err))
		}
		if mysqlServerFull[myErrNo(err)] {
			return nil, fmt.Errorf("mysql exec in database %s: %w: the server refused a new connection, its connections being held by others (%v); try again once they end", m.database, sandbox.ErrBusy, err)
		}
		return fail("connect", err)
	}
	w.Close()
	if err := m.overRunaways(); err != nil {
		// Runaways came while it waited for its slot, a unit of the database's connections or
		// one of the share (the dial): it does not run either (TestMySQLRunawaysAfterWait,
		// TestMySQLRunawaysAfterDialWait).
		conn.Close()
		return nil, err
	}
	// The statement's time starts once it has its slot and connection, as the server's
	// max_statement_time and the killer's timer below do: a wait is the load's, not the
	// statement's.
	qctx, cancel := context.WithTimeout(ctx, timeout+sandbox.ServerGrace)
	defer cancel()
	defer conn.Close()
	th, err := m.connID(qctx, conn)
	id := th.id
	if err != nil {
		sandbox.Discard(conn)
		return fail("connection id", err)
	}
	if m.mariadb {
		stmt = fmt.Sprintf("SET STATEMENT max_statement_time=%.3f, %s FOR %s", max(timeout.Seconds(), 0.001), mysqlNoPushdown, stmt) // 0 would mean no limit
	} else if _, err := conn.ExecContext(qctx, fmt.Sprintf("SET SESSION max_execution_time=%d, %s", max(timeout.Milliseconds(), 1), mysqlNoMerge)); err != nil {
		sandbox.Discard(conn)
		return fail("set max_execution_time", err)
	}
	if err := conn.QueryRowContext(qctx, mysqlResetSession).Scan(new(int)); !errors.Is(err, sql.ErrNoRows) {
		sandbox.Discard(conn)
		return fail("reset the session", err)
	}
	if _, err := conn.ExecContext(qctx, "START TRANSACTION READ ONLY"); err != nil {
		sandbox.Discard(conn)
		return fail("begin", err)
	}
	var killed, dropped atomic.Bool
	var dropOnce sync.Once
	drop := func() {
		dropOnce.Do(func() {
			// The thread may outlive its connection: a unit of the share stands for it from now
			// on, given back below if it ends, else kept by the runaway.
			m.srv.conns.force()
			dropped.Store(true)
			m.srv.kill(ctx, "KILL", id)
			cancel() // the driver closes the connection
		})
	}
	stop, killDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(killDone)
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-stop:
			return
		case <-t.C:
		case <-ctx.Done():
		}
		killed.Store(true)
		if err := m.srv.kill(ctx, "KILL QUERY", id); err != nil {
			drop() // not applied yet, it might be later, to the connection's next statement
			return
		}
		t.Reset(mysqlKillGrace)
		select {
		case <-stop:
			return
		case <-t.C:
		}
		drop()
	}()
	// A stop (a RowFilter's) whose rest still streams after sandbox.StopDrain: KILL QUERY, and
	// the connection as at the deadline if the rest streams mysqlKillGrace after that.
	stopper := func(done <-chan struct{}) {
		kill := func(ctx context.Context, id int64) error { return m.srv.kill(ctx, "KILL QUERY", id) }
		if m.srv.stopQuery != nil {
			kill = m.srv.stopQuery
		}
		if err := kill(ctx, id); err != nil {
			// KILL QUERY did not complete: the server may still apply it later, to whatever the
			// thread runs then, another task's statement if the connection went back to the
			// pool. The connection goes as at the deadline instead.
			drop()
		}
		t := time.NewTimer(mysqlKillGrace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			drop()
		}
	}
	qstart := time.Now()
	cuts := m.cut.Load()
	res, qerr := sandbox.Collect(qctx, conn, stmt, opts, mysqlNormaliser, stopper)
	// An interrupted SLEEP() or BENCHMARK() returns a value, not an error: a statement that
	// ran for its whole time limit was stopped by it.
	overran := time.Since(qstart) >= timeout
	close(stop)
	<-killDone
	if ctx.Err() != nil && !dropped.Load() {
		// The caller gave up and the driver closed the connection: the thread is killed too.
		drop()
	}
	res.Duration = time.Since(start)
	if dropped.Load() {
		sandbox.Discard(conn)
		runaway := !m.srv.ended(ctx, th)
		if runaway {
			slotHeld = false
			m.srv.runaway(th, releaseSlot, &m.runaways)
		} else {
			m.srv.conns.release()
		}
		switch {
		case res.Stopped():
			return res, nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("mysql exec: %w", ctx.Err())
		case runaway:
			return &sandbox.Result{Outcome: sandbox.OutcomeTimeout, Duration: time.Since(start),
				Error: fmt.Sprintf("statement stopped after %s, but the server could not interrupt it and runs it on (counted as a runaway)", timeout)}, nil
		}
		return sandbox.TimedOut(timeout, time.Since(start)), nil
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.CleanupTimeout)
	_, rerr := conn.ExecContext(rctx, "ROLLBACK")
	rcancel()
	if rerr != nil || mysqlSessionState(stmt) {
		sandbox.Discard(conn)
	}
	if qerr == nil && (!killed.Load() && !overran || res.Stopped()) {
		return res, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("mysql exec: %w", ctx.Err())
	}
	var me *mysql.MySQLError
	isMy := errors.As(qerr, &me)
	if mysqlHourlyLimit(qerr) != "" { // the account's error, not the statement's: never its answer
		return nil, mysqlHourly(fmt.Errorf("mysql exec in database %s: %w", m.database, qerr))
	}
	if sandbox.IsTooLarge(qerr) || qerr != nil && !isMy && m.cut.Load() != cuts {
		sandbox.Discard(conn)
		return sandbox.TooLarge(res), nil
	}
	switch {
	case killed.Load(), overran, qctx.Err() != nil, isMy && (me.Number == 1969 || me.Number == 3024 || me.Number == 1317):
		return sandbox.TimedOut(timeout, res.Duration), nil
	case isMy:
		return &sandbox.Result{Outcome: sandbox.OutcomeError, Error: qerr.Error(), Duration: res.Duration}, nil
	case rerr != nil:
		return fail("query", errors.Join(qerr, rerr))
	}
	return &sandbox.Result{Outcome: sandbox.OutcomeError, Error: qerr.Error(), Duration: res.Duration}, nil
}

// mysqlServerFull are the errors of a connection the server refuses for the connections others
// hold: max_connections reached (1040, by other clients: a share is a third of it), the user's
// MAX_USER_CONNECTIONS (1203, 1226: an administrator's limit set after the share was read, or
// shared with other clients logged in as the reader). The statement never ran: its Exec fails
// with sandbox.ErrBusy, as in a full share, and is tried again later (sandbox.Patient, the env's
// Retry-After); before, a plain connect error. A 1226 naming an hourly resource is no such
// error: mysqlHourly is asked first.
var mysqlServerFull = map[uint16]bool{1040: true, 1203: true, 1226: true}

// ErrHourlyLimit marks the errors of a login or statement the server refused because the
// account it runs as (the reader) has used up an hourly limit an administrator set on it:
// MAX_QUERIES_PER_HOUR, MAX_UPDATES_PER_HOUR or MAX_CONNECTIONS_PER_HOUR (error 1226 naming
// that resource). It is a configuration error, reported at once: not sandbox.ErrBusy, which is
// tried again for seconds (sandbox.Patient, the env's Retry-After) while nothing short of the
// hour's end, or the limit lifted, frees it; and never a statement's own error.
var ErrHourlyLimit = errors.New("an hourly limit of the account is used up")

// mysqlHourlyLimits maps the resource a 1226 error names to the limit that sets it: MariaDB
// names the limit itself, MySQL its column of mysql.user. max_user_connections, the other
// resource 1226 names, is a limit on connections at once (mysqlServerFull).
var mysqlHourlyLimits = map[string]string{
	"max_queries_per_hour":     "MAX_QUERIES_PER_HOUR",
	"max_questions":            "MAX_QUERIES_PER_HOUR",
	"max_updates_per_hour":     "MAX_UPDATES_PER_HOUR",
	"max_updates":              "MAX_UPDATES_PER_HOUR",
	"max_connections_per_hour": "MAX_CONNECTIONS_PER_HOUR",
}

// mysqlHourlyLimit is the limit err reports used up when err holds error 1226 naming an hourly
// resource, else "". The resource is the message's last quoted text: in every language of both
// servers' messages (lc_messages) the 1226 reads User '<user>' ... '<resource>' ... (<value>),
// the resource quoted last, so a reader whose name holds a resource's quoted name is not taken
// for it (the user name comes first and may hold quotes).
func mysqlHourlyLimit(err error) string {
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1226 {
		return ""
	}
	end := strings.LastIndexByte(me.Message, '\'')
	if end < 0 {
		return ""
	}
	start := strings.LastIndexByte(me.Message[:end], '\'')
	if start < 0 {
		return ""
	}
	return mysqlHourlyLimits[me.Message[start+1:end]]
}

// mysqlHourly is err marked ErrHourlyLimit, saying what to do, when it holds an hourly limit's
// 1226 (mysqlHourlyLimit) and is not marked yet; else err itself, nil included.
func mysqlHourly(err error) error {
	limit := mysqlHourlyLimit(err)
	if limit == "" || errors.Is(err, ErrHourlyLimit) {
		return err
	}
	return fmt.Errorf("%w: %w: %s, set by an administrator on the account; not tried again: lift it (ALTER USER ... WITH %s 0) or wait for the hour to end", err, ErrHourlyLimit, limit, limit)
}

// busy is the error of a statement that got no statement slot (what) or no connection by its
// deadline: sandbox.ErrBusy, the server's failure and not the statement's timeout, since the
// statement never ran; it says how much of the share runaways hold.
func (m *mysqlDB) busy(what string) error {
	s := m.srv
	return fmt.Errorf("mysql exec in database %s: %w within its deadline: no %s free in this run's share of the server (%d statements in flight of %d, %d connections open of %d, %d of them runaways: threads past their deadline that KILL did not stop); try again once they end",
		m.database, sandbox.ErrBusy, what, len(s.slots), s.limit, s.conns.inUse(), s.limit, s.running.Load())
}

// mysqlSessionWords are the functions through which a MySQL SELECT leaves state in its session
// that ROLLBACK keeps: LAST_INSERT_ID(x), named locks, sequences.
var mysqlSessionWords = []string{"last_insert_id", "get_lock", "nextval", "lastval", "setval"}

// mysqlSessionState reports whether stmt may leave session state that outlives its
// transaction (user variables, set with @v := x or INTO @v, or one of mysqlSessionWords): its
// connection is then closed rather than pooled, so that no later execution sees it. The driver
// has no COM_RESET_CONNECTION; a text test that errs towards closing costs only a reconnect.
func mysqlSessionState(stmt string) bool {
	if strings.Contains(stmt, "@") {
		return true
	}
	lower := strings.ToLower(stmt)
	for _, w := range mysqlSessionWords {
		if strings.Contains(lower, w) {
			return true
		}
	}
	return false
}

// mysqlNormaliser maps go-sql-driver/mysql's values by column type: text types ([]byte) to
// string (dates and times too: the server's text, as the mysql client prints it), DECIMAL
// through sandbox.NumericValue (int64 or the server's exact text), FLOAT through its shortest
// decimal form, unsigned integers to int64 (a sandbox.Decimal beyond int64), binary types kept
// as []byte.
func mysqlNormaliser(cols []*sql.ColumnType) []func(any) any {
	out := make([]func(any) any, len(cols))
	for i, c := range cols {
		t := c.DatabaseTypeName()
		switch {
		case t == "DECIMAL":
			out[i] = sandbox.NumericValue
		case strings.Contains(t, "BLOB") || strings.Contains(t, "BINARY") || t == "BIT" || t == "GEOMETRY":
			out[i] = sandbox.Normalise
		default:
			out[i] = myCell
		}
	}
	return out
}

func myCell(v any) any {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case float32:
		return sandbox.Float32Value(x)
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
		return sandbox.Decimal(strconv.FormatUint(x, 10))
	}
	return sandbox.Normalise(v)
}
