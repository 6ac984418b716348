package datasets

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// The bounds one PostgreSQL server handle (pgServer: a Connector's PostgreSQL server, or one
// OpenPostgres) keeps on the server (docs/DESIGN.md, "Execution security").
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
	// and watches a statement's backend once its deadline has passed.
	pgControlConns = 1
	// pgCancelAfter is how long past its deadline (statement_timeout) a statement's reply may
	// take before the client drops the connection and cancels the backend itself.
	pgCancelAfter = 250 * time.Millisecond
	// pgTerminateAfter is how long after the cancel the backend is terminated, and
	// pgTerminateWait how long pg_terminate_backend then waits for it to exit: together
	// within a second of the deadline.
	pgTerminateAfter = 250 * time.Millisecond
	pgTerminateWait  = 400 * time.Millisecond
	// pgWatchEvery is how often a runaway backend (one that outlived its terminate) is looked
	// for until it ends.
	pgWatchEvery = time.Second
)

// PostgresRunaways counts the backends whose statement outlived its deadline, the cancel and
// the terminate (a function PostgreSQL cannot interrupt, such as a long chain of string
// functions over a huge value, that the screen lets through).
type PostgresRunaways struct {
	// Total is how many were counted since the server was opened.
	Total int64 `json:"total"`
	// Running is how many still run on the server, each holding one of the statement slots
	// until it ends.
	Running int64 `json:"running"`
}

// pgServer is one PostgreSQL server as statements reach it: the pool they run on, a control
// connection, and the slots that bound the statements in flight and the runaway backends.
type pgServer struct {
	pool  *sql.DB
	ctl   *sql.DB
	where string // the server and database, for messages
	// slots holds a token per statement in flight and per runaway backend still running.
	slots    chan struct{}
	total    atomic.Int64
	running  atomic.Int64
	limitsMu sync.Mutex // orders the pool limit changes
	done     chan struct{}
	mu       sync.Mutex // guards closed against wg.Add
	closed   bool
	wg       sync.WaitGroup
}

// newPGServer bounds pool (the statements' connections) and opens ctl with the same settings,
// taking the statement cap from the server's max_connections (see pgShareOf).
func newPGServer(ctx context.Context, pool, ctl *sql.DB, where string) (*pgServer, error) {
	var maxConn int
	if err := pool.QueryRowContext(ctx, "SELECT current_setting('max_connections')::int").Scan(&maxConn); err != nil {
		return nil, fmt.Errorf("%s: read max_connections: %w", where, err)
	}
	n := min(pgMaxStatements, max(1, maxConn/pgShareOf))
	ctl.SetMaxOpenConns(pgControlConns)
	ctl.SetMaxIdleConns(pgControlConns)
	ctl.SetConnMaxIdleTime(time.Minute)
	s := &pgServer{pool: pool, ctl: ctl, where: where, slots: make(chan struct{}, n), done: make(chan struct{})}
	s.setLimits()
	return s, nil
}

// capacity is the number of statement slots.
func (s *pgServer) capacity() int { return cap(s.slots) }

// setLimits sizes the pool to the slots not held by runaway backends, so that the pool's
// connections, busy and idle, and the runaways never pass the cap together.
func (s *pgServer) setLimits() {
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	open := s.capacity() - int(s.running.Load())
	if open < 1 { // every slot is a runaway's: no statement runs, and none is kept idle
		s.pool.SetMaxOpenConns(1)
		s.pool.SetMaxIdleConns(0)
		return
	}
	s.pool.SetMaxOpenConns(open)
	s.pool.SetMaxIdleConns(min(pgMaxIdle, open))
	s.pool.SetConnMaxIdleTime(time.Minute)
}

// acquire takes a statement slot, waiting until ctx ends.
func (s *pgServer) acquire(ctx context.Context) error {
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *pgServer) release() { <-s.slots }

// runaways returns the runaway counts.
func (s *pgServer) runaways() PostgresRunaways {
	return PostgresRunaways{Total: s.total.Load(), Running: s.running.Load()}
}

// backendPID returns the process id of conn's backend, 0 when it cannot be read.
func backendPID(conn *sql.Conn) uint32 {
	var pid uint32
	_ = conn.Raw(func(dc any) error {
		if c, ok := dc.(*stdlib.Conn); ok {
			pid = c.Conn().PgConn().PID()
		}
		return nil
	})
	return pid
}

// stop makes sure the backend pid, whose connection was dropped with its statement possibly
// still running, ends, holding the caller's slot until it does: it cancels the backend,
// terminates it pgTerminateAfter later, and if it survives both, counts it a runaway, logs it,
// and looks for it every pgWatchEvery until it is gone (or the server handle is closed).
// Runs in its own goroutine; releases the slot.
func (s *pgServer) stop(pid uint32, deadline time.Time) {
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
		for ; err != nil && !errors.Is(err, sql.ErrNoRows) && ctx.Err() == nil && time.Since(deadline) < time.Second; err = look() {
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
		s.setLimits()
		defer func() {
			s.running.Add(-1)
			s.setLimits()
		}()
		slog.Warn("postgres: a statement's backend outlived its deadline, cancel and terminate; it keeps a statement slot until it ends",
			"server", s.where, "pid", pid, "past_deadline", time.Since(deadline).Round(time.Millisecond), "runaways_running", s.running.Load(), "err", err)
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
				slog.Info("postgres: runaway backend ended", "server", s.where, "pid", pid, "past_deadline", time.Since(deadline).Round(time.Millisecond))
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
