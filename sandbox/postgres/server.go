package postgres

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/chainedsql/chainedsql/sandbox"
)

// The bounds one PostgreSQL server handle (pgServer: a Connector's PostgreSQL server, or one
// Open) keeps on the server (docs/DESIGN.md, "Execution security").
const (
	// pgMaxStatements caps the statements in flight at once, runaway backends included (see
	// pgServer.stop): the connections statements run on, idle ones included, never pass it.
	// 16 covers an RL trainer's 16 episodes in play (docs/BENCHMARKS.md).
	pgMaxStatements = 16
	// pgShareOf is the share of the server's max_connections the statements may take at
	// most: a sixth (16 of PostgreSQL's default 100), so that a server with fewer connections
	// gets fewer statements in flight instead of running out of logins.
	pgShareOf = 6
	// pgMaxIdle caps the idle statement connections kept; a minute's idleness closes one.
	pgMaxIdle = pgMaxStatements
	// pgControlConns is the one connection, beside the statements', that cancels, terminates
	// and watches a statement's backend once its deadline has passed. It is logged in when the
	// server handle opens and held until it closes (never closed for idleness), so that a
	// backend is still stopped, and told gone, while the server has no login left for the
	// reader; one that breaks is dialled again at its next use.
	pgControlConns = 1
	// pgMaxServed and pgMaxServedText bound what one backend serves, in statements and in bytes
	// of their text, before its connection is closed rather than pooled (slotConn.serve), and
	// pgMaxLifetime how long it is pooled at all: the general defence against what a backend
	// caches for its life that no reset frees and no rule of pgKeepsBackendMemory knows of
	// (anonymous ROW types: about 14 to 25 bytes a byte of statement, 0.5 to 1 MB for 40 KB).
	// The text bound holds such a cache to about 25 MB a pooled backend; a login costs 17.5 ms
	// on two busy cores (pgbench -C) against 0.15 ms a SELECT 1, so one every 1,000 statements
	// adds under 20 µs to each, and one per MiB of text (about 3,000 gold statements) less.
	pgMaxServed     = 1000
	pgMaxServedText = 1 << 20
	pgMaxLifetime   = 10 * time.Minute
	// pgCancelAfter is how long past its deadline (statement_timeout) a statement's reply may
	// take before the client drops the connection and cancels the backend itself.
	pgCancelAfter = 250 * time.Millisecond
	// pgExitWait is how long a closed connection's backend may take to exit by itself before
	// it is cancelled.
	pgExitWait = 100 * time.Millisecond
	// pgTerminateAfter is how long after the cancel the backend is terminated, and
	// pgTerminateWait how long pg_terminate_backend then waits for it to exit: together
	// within a second of the deadline.
	pgTerminateAfter = 250 * time.Millisecond
	pgTerminateWait  = 400 * time.Millisecond
	// pgRunawaysPerDB is how many runaway backends one pgDB (a task's schema) may have: while
	// it has as many, its new statements do not run and fail with sandbox.ErrBusy (pgDB.run), so
	// that one task's statements cannot fill the slots with runaways (as sqliteRunawaysPerDB).
	pgRunawaysPerDB = 2
	// pgWatchEvery is how often a runaway backend (one that outlived its terminate) is looked
	// for until it ends.
	pgWatchEvery = time.Second
	// pgMemoryEvery is how often a running statement's backend's memory is read (watchMemory):
	// at the fastest growth measured (about 620 MB a second, made-up time zones) about 40 MB
	// between two reads, for a read of one small /proc file.
	pgMemoryEvery = 60 * time.Millisecond
	// pgPooledMemory is the most anonymous memory a backend may hold after its statement and
	// still be pooled (memWatch.pooledOver): a fresh backend holds about 3 MB, and one after a
	// sort, hash or aggregate of hundreds of MB about 15 MB (glibc gives large blocks back).
	pgPooledMemory = 64 << 20
)

// pgServer is one PostgreSQL server as statements reach it: the pool they run on, a control
// connection, and the slots that bound the backends of the pool, runaways included. A slot is
// taken when a connection is dialled and given back only once its backend is gone from the
// server (slotConn.Close), so that a backend still at work after its client let go, or merely
// still exiting, counts until it ends. The pool itself has no cap of its own: its users hold a
// unit of taken each while they hold a connection (conn), and then wait, when neither an idle
// connection nor a slot for a new one is free, for either to be given back (conn), so that each wait of an execution is one it can tell
// (ExecOptions.Waiting), where database/sql's own wait at a MaxOpenConns says nothing.
type pgServer struct {
	pool  *sql.DB
	ctl   *sql.DB
	where string // the server and database, for messages
	// login and database are the statements' login role and database, as a backend's process
	// title names them (backendTitle).
	login, database string
	// memoryOff logs, once, that the memory watch is off (watchMemory).
	memoryOff sync.Once
	// pooledMemory is the most anonymous memory a watched backend may hold after its statement
	// and still be pooled (memWatch.pooledOver): pgPooledMemory; tests raise it.
	pooledMemory int64
	// cancelRequest sends a stopped statement's cancel request (stopper); nil: pgx's
	// CancelRequest. Tests replace it to take the hang-up that follows a cancel that failed.
	cancelRequest func(ctx context.Context, pc *pgconn.PgConn) error
	// slots holds a token per backend of the pool (busy, idle, exiting or runaway).
	slots chan struct{}
	// taken holds a unit per connection of the pool taken through conn (an execution, or
	// newPostgresDB's checks), as many as slots: a taker that finds none free knows it waits,
	// and one that holds a unit finds an idle connection or a slot for a new one, unless
	// backends past their connection (exiting, runaway) hold the slots: conn then waits, told
	// too, for a slot or a connection given back, whichever comes first. openPostgresServer's reader check takes none: it runs
	// before the handle is shared.
	taken chan struct{}
	// maxServed and maxServedText are pgMaxServed and pgMaxServedText (tests lower them).
	maxServed, maxServedText int64
	// changeMu guards change, closed and replaced (signal) whenever a slot is given back or a
	// connection given back to the pool, which conn, its taker finding neither an idle
	// connection nor a free slot, waits for before trying again.
	changeMu sync.Mutex
	change   chan struct{}
	total    atomic.Int64
	running  atomic.Int64
	done     chan struct{}
	mu       sync.Mutex // guards closed against wg.Add
	closed   bool
	wg       sync.WaitGroup
}

// newPGServer opens the pool of cfg and its control connection, with at most as many backends
// as the server's max_connections allows (see pgShareOf), pgMaxStatements, and limit when
// limit > 0.
func newPGServer(ctx context.Context, cfg *pgx.ConnConfig, where string, limit int) (*pgServer, error) {
	ctl := pgPool(cfg.Copy())
	ctl.SetMaxOpenConns(pgControlConns)
	ctl.SetMaxIdleConns(pgControlConns)
	ctl.SetConnMaxIdleTime(0) // held: see pgControlConns
	ctl.SetConnMaxLifetime(0)
	var maxConn int
	if err := ctl.QueryRowContext(ctx, "SELECT current_setting('max_connections')::int").Scan(&maxConn); err != nil {
		ctl.Close()
		return nil, fmt.Errorf("%s: read max_connections: %w", where, err)
	}
	n := min(pgMaxStatements, max(1, maxConn/pgShareOf))
	if limit > 0 {
		n = min(n, limit)
	}
	s := &pgServer{ctl: ctl, where: where, login: cfg.User, database: cfg.Database, pooledMemory: pgPooledMemory, slots: make(chan struct{}, n), taken: make(chan struct{}, n), maxServed: pgMaxServed, maxServedText: pgMaxServedText, change: make(chan struct{}), done: make(chan struct{})}
	cfg.DialFunc = pgconn.DialFunc(sandbox.LimitReplies(s.dial(sandbox.DialFunc(cfg.DialFunc)), new(atomic.Int64)))
	// A row (a message) past the result limit is refused at its header, before pgx allocates
	// its buffer (up to 1 GiB, the size rounded up to a power of two); the replies' window
	// bounds the rest of what is read.
	cfg.MaxProtocolMessageBodyLen = sandbox.MaxResultBytes
	cfg.AfterConnect = func(_ context.Context, c *pgconn.PgConn) error {
		if sc := asSlotConn(c.Conn()); sc != nil {
			sc.pid.Store(c.PID())
		}
		return nil
	}
	pgConfigure(cfg)
	s.pool = sql.OpenDB(sandbox.TrackReplies(slotConnector{Connector: stdlib.GetConnector(*cfg), srv: s}))
	// No MaxOpenConns: taken and slots bound the connections (see pgServer), and database/sql,
	// which would wait at one untold (an idle connection the pool is closing still counts
	// there), never waits. Set once, before the pool is shared, and never changed: idle
	// connections (at most one per slot, one pool for every schema) need no closing to free a
	// slot, and two SetMaxIdleConns(0)-and-back at once lose a connection outside the pool
	// (database/sql, see the MySQL share's closeIdle).
	s.pool.SetMaxIdleConns(min(pgMaxIdle, n))
	s.pool.SetConnMaxIdleTime(time.Minute)
	s.pool.SetConnMaxLifetime(pgMaxLifetime)
	return s, nil
}

// slotConnector opens the pool's connections, each after taking a slot (for conn's, marked
// slotNoWaitKey, a free one or errNoSlot at once; else waiting until ctx ends, telling the
// sandbox.WaitTeller in ctx, if any, while it does), which the
// socket the connection ends up on (slotConn) then holds. pgx may dial more than once for one
// connection (sslmode prefer or allow falling back, several hosts, target_session_attrs): every
// socket it dials for the Connect is a slotConn, and the slot goes to the one under the
// connection Connect returns, found there once it has returned; the discarded attempts' sockets,
// which pgx closed before it dialled again, hold none. A connection whose socket is not found
// is closed and refused, so that no connection of the pool is without a slot. Cancel requests,
// which pgx dials with the same function, take none.
type slotConnector struct {
	driver.Connector
	srv *pgServer
}

// slotTicket marks, in a Connect's context, the dials made for it.
type slotTicket struct{}

type slotTicketKey struct{}

// slotNoWaitKey marks a Connect (conn's) that takes a free slot or fails with errNoSlot at once,
// its caller waiting for a slot or an idle connection itself.
type slotNoWaitKey struct{}

// errNoSlot is a Connect's with slotNoWaitKey that found no slot free.
var errNoSlot = errors.New("no statement slot free")

func (c slotConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if ctx.Value(slotNoWaitKey{}) != nil {
		select {
		case c.srv.slots <- struct{}{}:
		default:
			return nil, errNoSlot
		}
	} else if err := sandbox.WaitTellerFrom(ctx).Acquire(ctx, c.srv.slots); err != nil {
		return nil, fmt.Errorf("%s: all %d connections busy: %w", c.srv.where, c.srv.capacity(), err)
	}
	conn, err := c.Connector.Connect(context.WithValue(ctx, slotTicketKey{}, &slotTicket{}))
	if err != nil {
		c.srv.release()
		return nil, err
	}
	var sc *slotConn
	if sc2, ok := conn.(*stdlib.Conn); ok {
		sc = asSlotConn(sc2.Conn().PgConn().Conn())
	}
	if sc == nil || !sc.hold() {
		conn.Close()
		c.srv.release()
		return nil, fmt.Errorf("%s: connect: the connection's socket was not found (or already closed) to hold its statement slot", c.srv.where)
	}
	return conn, nil
}

// capacity is the number of slots.
func (s *pgServer) capacity() int { return cap(s.slots) }

// slotConn is a socket dialled for a connection of the pool; the one under the connection
// Connect returns holds its slot (hold) until its backend is gone.
type slotConn struct {
	net.Conn
	srv *pgServer
	pid atomic.Uint32 // the backend's, once the login is done
	// owner counts the runaways of the pgDB whose statement ran on the connection last (run
	// sets it before each statement), should its backend outlive the connection (stop).
	owner atomic.Pointer[atomic.Int64]
	// served and servedText count the statements its backend ran and their bytes (serve).
	served, servedText atomic.Int64

	mu     sync.Mutex
	holds  bool // the slot is this socket's (hold)
	closed bool
	// status is the backend's open status file, once its identity is proven (statusFile);
	// statusTried: it was looked for.
	status      *os.File
	statusTried bool
}

// statusFile returns the open status file of c's backend (pid, its connection's local end
// local), opened by its first caller if the backend is provably c's (backendStatus), and
// closed with c; nil where it is not.
func (c *slotConn) statusFile(pid uint32, login, database string, local net.Addr) *os.File {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.statusTried && !c.closed {
		c.statusTried = true
		if f, ok := backendStatus(pid, login, database, local); ok {
			c.status = f
		}
	}
	return c.status
}

// serve counts a statement of n bytes run on c's backend and reports whether the backend has
// now served its share (srv.maxServed statements or srv.maxServedText bytes), its connection
// to be closed, not pooled.
func (c *slotConn) serve(n int) bool {
	served, text := c.served.Add(1), c.servedText.Add(int64(n))
	return served >= c.srv.maxServed || text >= c.srv.maxServedText
}

// hold gives c the slot its Connect took, unless c is closed already (false).
func (c *slotConn) hold() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.holds = true
	return true
}

// dial wraps dial so that every socket a Connect dials is a slotConn, the one of them its
// connection ends up on to hold the slot the Connect took.
func (s *pgServer) dial(dial sandbox.DialFunc) sandbox.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if _, ok := ctx.Value(slotTicketKey{}).(*slotTicket); err != nil || !ok {
			return c, err
		}
		return &slotConn{Conn: c, srv: s}, nil
	}
}

// hangUp closes the socket under conn at once, so that pgx, which drains a broken connection
// until its backend answers, closes it now and its backend gets stopped (stop).
func hangUp(conn *sql.Conn) {
	if _, sc := pgConnOf(conn); sc != nil {
		sc.Conn.Close()
	}
}

// pgConnOf returns the pgx connection of conn and the slotConn under it (nil when not found).
// It takes conn's lock: not while a query on conn is being read or closed.
func pgConnOf(conn *sql.Conn) (pc *pgconn.PgConn, sc *slotConn) {
	_ = conn.Raw(func(dc any) error {
		if c, ok := dc.(*stdlib.Conn); ok {
			pc = c.Conn().PgConn()
			sc = asSlotConn(pc.Conn())
		}
		return nil
	})
	return pc, sc
}

// stopper returns the sandbox.Stopper of the statement about to run on conn: a cancel request to
// its backend (bounded by pgCancelAfter) and, if the rest of its reply still streams
// pgCancelAfter after that, a hang-up as at a deadline (its backend then cancelled, terminated or
// counted a runaway, holding its slot until it ends: stop), which it records in hungUp. A cancel
// request the server did not answer within pgCancelAfter is recorded there too: the connection
// is hung up on after the statement, not reset and pooled, since the request's signal may still
// come and would cancel the next statement on it. The
// connection is found now, before the query, as its lock is held while the rows drain.
func (s *pgServer) stopper(ctx context.Context, conn *sql.Conn, hungUp *atomic.Bool) sandbox.Stopper {
	pc, sc := pgConnOf(conn)
	return func(done <-chan struct{}) {
		if pc != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pgCancelAfter)
			err := s.sendCancel(cctx, pc)
			if err != nil || cctx.Err() != nil {
				// The server did not answer the request in time (pgx waits for its answer but
				// does not report a wait that ran out): its signal may still reach the backend
				// after the statement has ended, and cancel whatever the connection runs next,
				// another task's statement if it went back to the pool. It does not.
				hungUp.Store(true)
				slog.Debug("postgres: cancel request for a stopped statement not answered", "server", s.where, "pid", pc.PID(), "err", err)
			}
			cancel()
		}
		t := time.NewTimer(pgCancelAfter)
		defer t.Stop()
		select {
		case <-done:
			return
		case <-t.C:
		}
		if sc != nil {
			hungUp.Store(true)
			sc.Conn.Close()
		}
	}
}

// sendCancel sends pc's backend a cancel request (s.cancelRequest, else pgx's).
func (s *pgServer) sendCancel(ctx context.Context, pc *pgconn.PgConn) error {
	if s.cancelRequest != nil {
		return s.cancelRequest(ctx, pc)
	}
	return pc.CancelRequest(ctx)
}

// memWatch is the memory watch of one statement's backend (watchMemory).
type memWatch struct {
	// status is the backend's open status file; nil: nothing is watched.
	status *os.File
	srv    *pgServer
	ctx    context.Context
	pc     *pgconn.PgConn
	sc     *slotConn
	base   int64 // RssAnon when the statement began
	bound  int64
	timer  *time.Timer
	stop   chan struct{} // closed by end
	mu     sync.Mutex    // held by a look (look) and by end
	ended  bool
	passed bool // the backend grew by more than bound while the statement ran
}

// watchMemory watches the backend of the statement about to run on conn while it runs, where
// that backend is visible on this host and provably the statement's (backendStatus, proven once
// per connection, its status file then kept open): it reads the backend's anonymous memory
// (RssAnon) now, and every pgMemoryEvery while the statement runs; once the backend has grown
// by more than bound bytes since the statement began, it cancels the statement (a cancel
// request through its connection, as stopper's) and, if its reply still streams pgCancelAfter
// later, hangs up on it (stop then cancels and terminates its backend). The growth is the
// statement's own: what an earlier statement left on a pooled backend is not charged to it
// (pooledOver retires such a backend). Nothing else bounds a backend's memory within one
// statement: PostgreSQL has no such setting, and a statement making up time zones keeps about
// 620 MB a second until its deadline. end stops the watch and reports whether the bound was
// passed; the caller then closes the connection, so that the backend, and all it keeps, is
// gone. Where the backend is not visible (a remote server, another pid namespace, process
// titles off or a Unix socket, whose title names no port) nothing is watched and nothing
// changes, said once per server handle; bound < 0 watches nothing. The connection is found
// now, before the query, as stopper's. A statement shorter than pgMemoryEvery costs two reads
// of the open status file and a timer, no goroutine.
func (s *pgServer) watchMemory(ctx context.Context, conn *sql.Conn, bound int64) *memWatch {
	w := &memWatch{srv: s, ctx: ctx, bound: bound}
	if bound < 0 {
		return w
	}
	pc, sc := pgConnOf(conn)
	if pc == nil || sc == nil {
		return w
	}
	pid := pc.PID()
	f := sc.statusFile(pid, s.login, s.database, sc.Conn.LocalAddr())
	base, ok := int64(0), false
	if f != nil {
		base, ok = rssAnon(f)
	}
	if !ok {
		s.memoryOff.Do(func() {
			slog.Info("postgres: memory watch off: a statement's backend is not provably visible on this host (a remote server, another pid namespace, a Unix socket or process titles off); a statement's memory is bounded only by its deadline", "server", s.where, "pid", pid)
		})
		return w
	}
	w.status, w.pc, w.sc, w.base = f, pc, sc, base
	w.stop = make(chan struct{})
	w.timer = time.AfterFunc(pgMemoryEvery, w.look)
	return w
}

// look reads the backend's memory once, as the timer fires, and either looks again
// pgMemoryEvery later or, past the bound, stops the statement.
func (w *memWatch) look() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	rss, ok := rssAnon(w.status)
	if !ok {
		return // the backend is gone
	}
	if rss-w.base <= w.bound {
		w.timer.Reset(pgMemoryEvery)
		return
	}
	w.passed = true
	cctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), pgCancelAfter)
	if err := w.srv.sendCancel(cctx, w.pc); err != nil {
		slog.Debug("postgres: cancel request for a statement over its memory bound failed", "server", w.srv.where, "pid", w.pc.PID(), "err", err)
	}
	cancel()
	select {
	case <-w.stop:
	case <-time.After(pgCancelAfter):
		w.sc.Conn.Close()
	}
}

// end stops the watch, waiting for a look under way, and reports whether the statement's
// backend grew past its bound.
func (w *memWatch) end() (over bool) {
	if w.status == nil {
		return false
	}
	close(w.stop) // a look waiting after its cancel ends now
	w.timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
	return w.passed
}

// pooledOver reports whether the watched backend now holds more anonymous memory than a pooled
// backend may (pgServer.pooledMemory), read once more: what a statement left on it (caches no
// reset frees, such as made-up time zones read through a row type's input, which
// pgKeepsBackendMemory cannot see by the statement's tokens) would otherwise stay on the pool,
// under every later statement, another task's included. Only where the watch is on, after end.
func (w *memWatch) pooledOver() bool {
	if w.status == nil {
		return false
	}
	rss, ok := rssAnon(w.status)
	return ok && rss > w.srv.pooledMemory
}

// backendStatus opens the status file of process pid of this host if it is provably the backend
// of the connection whose local end is local, logged in as login to database: its process title
// (cmdline), as PostgreSQL sets it, names that role, database and the client address and port
// of that local end ("postgres: [cluster: ]login database 127.0.0.1(54321) activity"). A
// process of another pid namespace, another connection's backend or no backend at all does not
// match, and its status is not opened. The file stays that process's: once it has exited, a
// read fails, whatever process takes its pid after.
func backendStatus(pid uint32, login, database string, local net.Addr) (*os.File, bool) {
	addr, ok := local.(*net.TCPAddr)
	if !ok || pid == 0 {
		return nil, false
	}
	dir := fmt.Sprintf("/proc/%d/", pid)
	status, err := os.Open(dir + "status")
	if err != nil {
		return nil, false
	}
	// The title is read after the status is open, so both are of one process.
	title, err := os.ReadFile(dir + "cmdline")
	if err != nil {
		status.Close()
		return nil, false
	}
	t := strings.TrimRight(strings.ReplaceAll(string(title), "\x00", " "), " ")
	want := fmt.Sprintf(" %s %s %s(%d) ", login, database, addr.IP, addr.Port)
	if !strings.HasPrefix(t, "postgres: ") || !strings.Contains(t+" ", want) {
		status.Close()
		return nil, false
	}
	return status, true
}

// rssAnon reads RssAnon, in bytes, from f, a process's open status file.
func rssAnon(f *os.File) (int64, bool) {
	var buf [4096]byte
	n, err := f.ReadAt(buf[:], 0)
	if n == 0 || (err != nil && !errors.Is(err, io.EOF)) {
		return 0, false
	}
	b := buf[:n]
	i := bytes.Index(b, []byte("\nRssAnon:"))
	if i < 0 {
		return 0, false
	}
	b = b[i+len("\nRssAnon:"):]
	if j := bytes.IndexByte(b, '\n'); j >= 0 {
		b = b[:j]
	}
	kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(b)), " kB"), 10, 64)
	if err != nil {
		return 0, false
	}
	return kb << 10, true
}

// Close closes the socket and, if it holds its slot, gives the slot back once the backend is
// gone (see stop).
func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	stop := c.holds && !c.closed
	c.closed = true
	if c.status != nil {
		c.status.Close()
	}
	c.mu.Unlock()
	if stop {
		c.srv.stop(c.pid.Load(), c.owner.Load())
	}
	return err
}

// asSlotConn finds the slotConn under c (a TLS connection, the reply limit of sandbox.LimitReplies), or nil.
func asSlotConn(c net.Conn) *slotConn {
	for c != nil {
		switch x := c.(type) {
		case *slotConn:
			return x
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// release gives a slot back.
func (s *pgServer) release() {
	<-s.slots
	s.signal()
}

// changed returns the channel the next signal closes.
func (s *pgServer) changed() <-chan struct{} {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	return s.change
}

// signal tells conn's waiters that a slot or a connection was given back.
func (s *pgServer) signal() {
	s.changeMu.Lock()
	close(s.change)
	s.change = make(chan struct{})
	s.changeMu.Unlock()
}

// conn takes a connection of the pool for one statement: a unit of taken, then an idle
// connection or, for a new one, a slot (slotConnector, which does not wait for it here: when
// neither is free, conn waits until a slot or a connection is given back (signal), then tries
// again, so that a connection given back meanwhile is taken instead of waiting on for a slot),
// telling w (nil: nobody) only of the waits that happen: one that finds them free tells nothing,
// and a new connection's login is not a wait. A wait that ctx (the statement's deadline) ends is sandbox.ErrBusy, the server's
// failure and not the statement's timeout: the statement never ran. The error says how many of
// the slots are held and how many of those by runaways. done closes the connection, then gives
// its unit back.
func (s *pgServer) conn(ctx context.Context, w *sandbox.WaitTeller) (c *sql.Conn, done func(), err error) {
	busy := func() error {
		return fmt.Errorf("%w within its deadline: %d of the %d statement slots of %s are held (%d by runaways: backends past their deadline that cancel and terminate did not stop); try again once they end",
			sandbox.ErrBusy, len(s.slots), s.capacity(), s.where, s.running.Load())
	}
	if err := w.Acquire(ctx, s.taken); err != nil {
		return nil, nil, busy()
	}
	nctx := context.WithValue(ctx, slotNoWaitKey{}, true)
	for {
		change := s.changed()
		if c, err = s.pool.Conn(nctx); !errors.Is(err, errNoSlot) {
			break
		}
		w.Start() // told around the wait only: the next try's login is not a wait
		select {
		case <-change:
		case <-ctx.Done():
		}
		w.End()
		if ctx.Err() != nil {
			break
		}
	}
	if err == nil {
		return c, func() {
			c.Close()
			s.signal()
			<-s.taken
		}, nil
	}
	<-s.taken
	if ctx.Err() != nil {
		return nil, nil, busy()
	}
	return nil, nil, fmt.Errorf("%s: connect: %w", s.where, err)
}

// runaways returns the runaway counts.
func (s *pgServer) runaways() sandbox.Runaways {
	return sandbox.Runaways{Total: s.total.Load(), Running: s.running.Load()}
}

// stop makes sure the backend pid, whose connection was closed (idle, or dropped with its
// statement possibly still running), ends, holding the connection's slot until it does: an
// idle backend exits within milliseconds of its socket; one that does not within pgExitWait is
// cancelled, terminated pgTerminateAfter later and, if it survives both, counted a runaway,
// logged, and looked for every pgWatchEvery until it is gone (or the server handle is closed),
// counted meanwhile in perDB too (the runaways of the statement's pgDB) when not nil.
// Runs in its own goroutine; releases the slot.
func (s *pgServer) stop(pid uint32, perDB *atomic.Int64) {
	closedAt := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.release()
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.release()
		if pid == 0 {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-s.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		var started time.Time
		look := func() error {
			return s.ctl.QueryRowContext(ctx, "SELECT backend_start FROM pg_catalog.pg_stat_activity WHERE pid = $1", int64(pid)).Scan(&started)
		}
		err := look()
		for ; err != nil && !errors.Is(err, sql.ErrNoRows) && ctx.Err() == nil && time.Since(closedAt) < time.Second; err = look() {
			time.Sleep(50 * time.Millisecond)
		}
		if errors.Is(err, sql.ErrNoRows) {
			return
		}
		// The backend is the one of the statement only while pid and start match.
		const match = " FROM pg_catalog.pg_stat_activity WHERE pid = $1 AND backend_start = $2"
		alive := func() bool {
			var n int
			if err := s.ctl.QueryRowContext(ctx, "SELECT count(*)"+match, int64(pid), started).Scan(&n); err != nil {
				return ctx.Err() == nil // unknown: assume it runs, unless closing
			}
			return n > 0
		}
		if err == nil {
			for t := time.Now().Add(pgExitWait); time.Now().Before(t); time.Sleep(10 * time.Millisecond) {
				if !alive() {
					return
				}
			}
			s.ctl.ExecContext(ctx, "SELECT pg_catalog.pg_cancel_backend(pid)"+match, int64(pid), started)
			for t := time.Now().Add(pgTerminateAfter); time.Now().Before(t); time.Sleep(25 * time.Millisecond) {
				if !alive() {
					return
				}
			}
			s.ctl.ExecContext(ctx, fmt.Sprintf("SELECT pg_catalog.pg_terminate_backend(pid, %d)", pgTerminateWait.Milliseconds())+match, int64(pid), started)
		}
		if err == nil && !alive() || ctx.Err() != nil {
			return
		}
		s.total.Add(1)
		s.running.Add(1)
		defer s.running.Add(-1)
		if perDB != nil {
			perDB.Add(1)
			defer perDB.Add(-1)
		}
		slog.Warn("postgres: a statement's backend outlived its deadline, cancel and terminate; it keeps a statement slot until it ends",
			"server", s.where, "pid", pid, "since_closed", time.Since(closedAt).Round(time.Millisecond), "runaways_running", s.running.Load(), "err", err)
		t := time.NewTicker(pgWatchEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err != nil { // the first look failed: try again
				if err = look(); errors.Is(err, sql.ErrNoRows) {
					return
				}
				continue
			}
			if !alive() {
				slog.Info("postgres: runaway backend ended", "server", s.where, "pid", pid, "since_closed", time.Since(closedAt).Round(time.Millisecond))
				return
			}
			// Asking again costs nothing and ends it as soon as it reaches a check.
			s.ctl.ExecContext(ctx, "SELECT pg_catalog.pg_terminate_backend(pid)"+match, int64(pid), started)
		}
	}()
}

// closeAll stops watching runaways and closes both pools.
func (s *pgServer) closeAll() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return errors.Join(s.pool.Close(), s.ctl.Close())
}
