package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/chainedsql/chainedsql/sandbox"
)

// The connections one Connector may hold on a MySQL/MariaDB server (docs/DESIGN.md, "Execution
// security"). A server has one max_connections for every client; a run must leave most of it
// to others and can never reach it, whatever its statements do.
const (
	// mysqlShareDiv: a Connector holds at most 1/mysqlShareDiv of the server's max_connections
	// (or of max_user_connections, when that is smaller): every connection it opens, idle or
	// busy, and every runaway thread its statements left behind.
	mysqlShareDiv = 3
	// mysqlKillers are the connections of that share kept for KILL and the PROCESSLIST checks,
	// so that a share full of statements can still be stopped. They are opened with the server
	// handle and held until it closes (never closed for idleness, the server's wait_timeout
	// raised to mysqlKillerWait on them), so that KILL works while the server is at
	// max_connections; one that breaks is dialled again at its next use.
	mysqlKillers = 2
	// mysqlKillerWait is the session wait_timeout of the killer connections in seconds: the
	// largest the server takes (a year), so that the server does not close them when idle.
	mysqlKillerWait = 31536000
	// mysqlOpenPerDB and mysqlIdlePerDB bound one database's pool within the share: the
	// connections its executions hold at once (mysqlDB.open; the pool has no MaxOpenConns) and
	// its idle ones.
	mysqlOpenPerDB = 16
	mysqlIdlePerDB = 2
	// mysqlIdleTime closes a pooled connection left idle this long.
	mysqlIdleTime = 30 * time.Second
	// mysqlKillGrace is how long a statement may run past KILL QUERY before its connection is
	// killed (KILL CONNECTION) and abandoned, and again how long its thread may take to leave
	// the server after that before it is counted as a runaway.
	mysqlKillGrace = 400 * time.Millisecond
	// mysqlWaitGrace is how long past its deadline a statement may still get its slot and
	// connection (run): enough for a free connection to be taken under a tiny timeout.
	mysqlWaitGrace = 250 * time.Millisecond
	// mysqlRunawaysPerDB is how many runaway threads one database may have: while it has as
	// many, its new statements do not run and fail with sandbox.ErrBusy (mysqlDB.run), so that
	// one task's statements cannot fill the share with runaways (as sqliteRunawaysPerDB).
	mysqlRunawaysPerDB = 2
	// mysqlRunawayPoll is how often a runaway thread is looked for in PROCESSLIST.
	mysqlRunawayPoll = 250 * time.Millisecond
	// mysqlFullPoll is how often a dial waiting in a full share closes idle connections again.
	mysqlFullPoll = 20 * time.Millisecond
)

// mysqlServer is what the MySQL databases of one Connector share on one server: the share of
// its connections (statements in flight, pooled connections, runaway threads), the killer pool
// and the runaway count. Pools are per database (each connection enables its task role and
// USEs its database); the share is enforced where they dial.
type mysqlServer struct {
	limit  int           // connections of the share for statements (the share less mysqlKillers)
	slots  chan struct{} // statements in flight, runaway threads included
	conns  connBudget    // connections open for statements, runaway threads included
	killer *sql.DB       // mysqlKillers connections outside conns
	// stopQuery is the KILL QUERY of a stopped statement (run's stopper); nil: s.kill. Tests
	// replace it to take the KILL CONNECTION that follows one that failed.
	stopQuery func(ctx context.Context, id int64) error
	share     int // the whole share, killers included (for reports and tests)

	mu    sync.Mutex
	pools map[*sql.DB]bool // for closing idle connections when the share is full

	total, running atomic.Int64
	stop           context.Context // ends the runaway watchers at close
	cancel         context.CancelFunc
	watchers       sync.WaitGroup
}

// newMySQLServer reads max_connections (and max_user_connections) as cfg's user and sets up
// the share, no larger than limit when limit > 0.
func newMySQLServer(ctx context.Context, cfg *mysql.Config, limit int) (*mysqlServer, error) {
	kcfg := cfg.Clone()
	kcfg.DBName = ""
	killer, err := openKillers(ctx, kcfg)
	if err != nil {
		return nil, err
	}
	var maxConns, maxUser int
	if err := killer.QueryRowContext(ctx, "SELECT @@max_connections, @@max_user_connections").Scan(&maxConns, &maxUser); err != nil {
		killer.Close()
		return nil, fmt.Errorf("mysql %s: read max_connections: %w", cfg.Addr, err)
	}
	if maxUser > 0 && maxUser < maxConns {
		maxConns = maxUser
	}
	share := maxConns / mysqlShareDiv
	if limit > 0 {
		share = min(share, limit)
	}
	s := newMySQLShare(share)
	s.killer = killer
	return s, nil
}

// openKillers opens the killer pool of cfg (mysqlKillers connections, see there) and dials all
// of them now: they are held, idle or not, until the pool is closed (no idle limit, no lifetime,
// the session's wait_timeout at mysqlKillerWait), so that a KILL never waits for a login that a
// server at max_connections would refuse. database/sql dials a broken one again at its next use.
func openKillers(ctx context.Context, cfg *mysql.Config) (*sql.DB, error) {
	cfg = cfg.Clone()
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["wait_timeout"] = fmt.Sprint(mysqlKillerWait)
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql %s: %w", cfg.Addr, err)
	}
	killer := sql.OpenDB(conn)
	killer.SetMaxOpenConns(mysqlKillers)
	killer.SetMaxIdleConns(mysqlKillers)
	killer.SetConnMaxIdleTime(0)
	killer.SetConnMaxLifetime(0)
	var held []*sql.Conn
	defer func() {
		for _, c := range held {
			c.Close() // back to the pool, which keeps it
		}
	}()
	for range mysqlKillers {
		c, err := killer.Conn(ctx)
		if err != nil {
			killer.Close()
			return nil, fmt.Errorf("mysql %s: open the connections kept for KILL: %w", cfg.Addr, err)
		}
		held = append(held, c)
	}
	return killer, nil
}

// newMySQLShare returns a server state holding share connections (at least mysqlKillers + 1).
func newMySQLShare(share int) *mysqlServer {
	share = max(share, mysqlKillers+1)
	s := &mysqlServer{share: share, limit: share - mysqlKillers, pools: map[*sql.DB]bool{}}
	s.slots = make(chan struct{}, s.limit)
	s.conns.limit = s.limit
	s.stop, s.cancel = context.WithCancel(context.Background())
	return s
}

// Runaways returns the runaway threads counted so far.
func (s *mysqlServer) Runaways() sandbox.Runaways {
	return sandbox.Runaways{Total: s.total.Load(), Running: s.running.Load()}
}

// close ends the runaway watchers (their threads stay uncounted) and the killer pool.
func (s *mysqlServer) close() error {
	s.cancel()
	s.watchers.Wait()
	return s.killer.Close()
}

// addPool and dropPool register a database's pool, whose idle connections the share may close.
func (s *mysqlServer) addPool(p *sql.DB) {
	s.mu.Lock()
	s.pools[p] = true
	s.mu.Unlock()
}

func (s *mysqlServer) dropPool(p *sql.DB) {
	s.mu.Lock()
	delete(s.pools, p)
	s.mu.Unlock()
}

// closeIdle closes the idle connections of every pool, so that a database without one can
// open its own within the share: each is taken from its pool as a statement takes one (a pool
// with none left would dial, which dial refuses for closeIdle's context) and discarded. Not
// SetMaxIdleConns(0) then back: database/sql closes the idle list it cut off after unlocking the
// pool, while that list still shares its array with the pool's, so a connection put back
// meanwhile (another closeIdle having raised the limit again) was closed in the place of an idle
// one, which stayed open outside the pool's list, holding its unit of the share and its server
// thread for good (TestMySQLCloseIdleKeepsCount).
func (s *mysqlServer) closeIdle() {
	s.mu.Lock()
	pools := make([]*sql.DB, 0, len(s.pools))
	for p := range s.pools {
		pools = append(pools, p)
	}
	s.mu.Unlock()
	ctx := context.WithValue(context.Background(), idleOnlyKey{}, true)
	for _, p := range pools {
		for range p.Stats().Idle {
			c, err := p.Conn(ctx)
			if err != nil {
				break // none idle any more
			}
			sandbox.Discard(c)
			c.Close()
		}
	}
}

// idleOnlyKey marks closeIdle's context: dial refuses to open a connection for it.
type idleOnlyKey struct{}

// errIdleOnly is dial's refusal of closeIdle's context.
var errIdleOnly = errors.New("mysql: no idle connection to close")

// dial wraps dial so that each connection takes one unit of the share until it closes; while
// the share is full it closes the pools' idle connections and waits (bounded by ctx, the
// statement's deadline), telling the execution's sandbox.WaitTeller in ctx, if any, while it does.
// It opens nothing for closeIdle's context (errIdleOnly).
func (s *mysqlServer) dial(dial sandbox.DialFunc) sandbox.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if ctx.Value(idleOnlyKey{}) != nil {
			return nil, errIdleOnly
		}
		w := sandbox.WaitTellerFrom(ctx)
		full := func() {
			w.Start()
			s.closeIdle()
		}
		err := s.conns.acquire(ctx, full)
		w.End()
		if err != nil {
			return nil, fmt.Errorf("wait for one of the %d connections of this run's share: %w", s.limit, err)
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			s.conns.release()
			return nil, err
		}
		return &budgetConn{Conn: c, release: s.conns.release}, nil
	}
}

// kill runs KILL QUERY or KILL (the connection) on thread id from the killer pool.
func (s *mysqlServer) kill(ctx context.Context, what string, id int64) error {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.CleanupTimeout)
	defer cancel()
	_, err := s.killer.ExecContext(kctx, fmt.Sprintf("%s %d", what, id))
	return err
}

// mysqlThread is a thread of the server as the runaway watcher tells it apart from others: its
// id and the start of the server it runs on (serverStart, Unix seconds; 0 where the server does
// not show it). A restarted server gives its thread ids out again from the start, so that after
// a restart an id alone may name another thread (any connection of the reader, an idle pooled
// one too), which would stay counted as the runaway as long as it lives, holding its slot, its
// unit of the share and one of its database's mysqlRunawaysPerDB; the pair names one thread
// (as PostgreSQL's pid and backend_start do).
type mysqlThread struct {
	id, serverStart int64
}

// mysqlServerStart is the server's start in Unix seconds, read in the same statement as what it
// goes with: UNIX_TIMESTAMP() less the Uptime status, both the statement's start time less
// something in whole seconds, so one value over a server's life (a clock step moves both).
// MariaDB shows GLOBAL_STATUS to any user; MySQL 8 has no such table in information_schema,
// and there threads are told by id alone.
const mysqlServerStart = "(SELECT CAST(UNIX_TIMESTAMP() - VARIABLE_VALUE AS SIGNED) FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME')"

// serverStart returns the server's start (mysqlServerStart), read on a killer connection; 0
// where it cannot be read (MySQL 8: threads are then told by id alone). runaway reads it once
// for the thread it watches, the thread still running on that server: reading it with each new
// connection's id, in the same query on that connection, made the pool dial past the share under
// load (TestMySQLConnectionShare saw 11 of 10).
func (s *mysqlServer) serverStart(ctx context.Context) int64 {
	qctx, cancel := context.WithTimeout(ctx, sandbox.CleanupTimeout)
	defer cancel()
	var start sql.NullInt64
	if err := s.killer.QueryRowContext(qctx, "SELECT "+mysqlServerStart).Scan(&start); err != nil || !start.Valid {
		return 0
	}
	return start.Int64
}

// alive reports whether thread th is still on the server (a user sees its own threads in
// PROCESSLIST without the PROCESS privilege): one of its id on a server of its start (more than
// a second off: a restart since). An error counts as alive.
func (s *mysqlServer) alive(ctx context.Context, th mysqlThread) bool {
	qctx, cancel := context.WithTimeout(ctx, sandbox.CleanupTimeout)
	defer cancel()
	const count = "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = ?"
	var n int
	if th.serverStart == 0 {
		if err := s.killer.QueryRowContext(qctx, count, th.id).Scan(&n); err != nil {
			return true
		}
		return n > 0
	}
	var start sql.NullInt64
	if err := s.killer.QueryRowContext(qctx, "SELECT ("+count+"), "+mysqlServerStart, th.id).Scan(&n, &start); err != nil || !start.Valid {
		return true
	}
	return n > 0 && start.Int64 >= th.serverStart-1 && start.Int64 <= th.serverStart+1
}

// ended waits up to mysqlKillGrace for thread th to leave the server and reports whether it did.
func (s *mysqlServer) ended(ctx context.Context, th mysqlThread) bool {
	deadline := time.Now().Add(mysqlKillGrace)
	for {
		if !s.alive(context.WithoutCancel(ctx), th) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(mysqlKillGrace / 8)
	}
}

// runaway counts thread th, killed but still running, as a runaway: it keeps the statement's
// slot and the unit of the share forced for its thread when its client connection was dropped
// (run) until PROCESSLIST no longer shows it on the server it started on (alive), then gives
// both back. releaseSlot gives the slot back; perDB counts the runaways of the statement's
// database (mysqlRunawaysPerDB) meanwhile.
func (s *mysqlServer) runaway(th mysqlThread, releaseSlot func(), perDB *atomic.Int64) {
	s.total.Add(1)
	s.running.Add(1)
	perDB.Add(1)
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		if th.serverStart == 0 {
			th.serverStart = s.serverStart(context.Background())
		}
		defer releaseSlot()
		defer s.conns.release()
		defer s.running.Add(-1)
		defer perDB.Add(-1)
		t := time.NewTicker(mysqlRunawayPoll)
		defer t.Stop()
		for {
			select {
			case <-s.stop.Done():
				return
			case <-t.C:
				if !s.alive(s.stop, th) {
					return
				}
			}
		}
	}()
}

// connBudget is a counting semaphore that can be forced past its limit (a runaway thread
// takes over the unit of the connection it outlives).
type connBudget struct {
	mu    sync.Mutex
	used  int
	limit int
	freed chan struct{} // closed and replaced at each release
}

// acquire takes a unit, calling full each time it finds none (to have some freed) and then
// waiting for a release, at most mysqlFullPoll (units held by idle connections are freed by
// full, not released on their own), until ctx ends.
func (b *connBudget) acquire(ctx context.Context, full func()) error {
	for {
		b.mu.Lock()
		if b.used < b.limit {
			b.used++
			b.mu.Unlock()
			return nil
		}
		if b.freed == nil {
			b.freed = make(chan struct{})
		}
		freed := b.freed
		b.mu.Unlock()
		full()
		t := time.NewTimer(mysqlFullPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-freed:
		case <-t.C:
		}
		t.Stop()
	}
}

func (b *connBudget) force() {
	b.mu.Lock()
	b.used++
	b.mu.Unlock()
}

func (b *connBudget) release() {
	b.mu.Lock()
	b.used--
	if b.freed != nil {
		close(b.freed)
		b.freed = nil
	}
	b.mu.Unlock()
}

// inUse returns the units taken.
func (b *connBudget) inUse() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// budgetConn gives its unit of the share back once the server has closed its end after the
// client's (within CleanupTimeout), so that a thread still quitting on the server is counted.
type budgetConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// NetConn returns the connection c wraps (checkedConn finds the socket through it).
func (c *budgetConn) NetConn() net.Conn { return c.Conn }

// checkedConn shows the driver the socket under the wrappers of the share and the reply limit
// (syscall.Conn), so that it checks an idle connection before reusing it (CheckConnLiveness)
// and dials another for one the server closed (wait_timeout, an administrator's KILL, a
// restart): hidden, the check was skipped and the next statement on it failed with "invalid
// connection".
type checkedConn struct{ net.Conn }

// SyscallConn returns the socket's raw connection, found through the NetConn of each wrapper;
// where there is none (a dialer that is not a socket's), one on which the check finds nothing.
func (c checkedConn) SyscallConn() (syscall.RawConn, error) {
	inner := c.Conn
	for {
		switch v := inner.(type) {
		case syscall.Conn:
			return v.SyscallConn()
		case interface{ NetConn() net.Conn }:
			inner = v.NetConn()
		default:
			return uncheckedRaw{}, nil
		}
	}
}

// uncheckedRaw is the raw connection of a dialer without a socket: the driver's check reads
// nothing from it and finds the connection alive, as when the socket was hidden.
type uncheckedRaw struct{}

func (uncheckedRaw) Control(func(uintptr)) error    { return nil }
func (uncheckedRaw) Read(func(uintptr) bool) error  { return nil }
func (uncheckedRaw) Write(func(uintptr) bool) error { return nil }

// checkable wraps each connection dial makes in a checkedConn.
func checkable(dial sandbox.DialFunc) sandbox.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return checkedConn{c}, nil
	}
}

func (c *budgetConn) Close() error {
	var err error
	c.once.Do(func() {
		tc, ok := c.Conn.(*net.TCPConn)
		if !ok || tc.CloseWrite() != nil {
			err = c.Conn.Close()
			c.release()
			return
		}
		go func() {
			defer c.release()
			_ = tc.SetReadDeadline(time.Now().Add(sandbox.CleanupTimeout))
			_, _ = io.Copy(io.Discard, tc)
			tc.Close()
		}()
	})
	return err
}
