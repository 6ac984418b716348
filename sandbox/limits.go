package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
)

// maxResultBytes bounds what one statement's result may bring into this process: the server's
// reply to it (PostgreSQL, MySQL), or the cells kept (every engine). A statement the policy
// writes may ask for a gigabyte a row (repeat('x', 1e9) in ten columns) or keep millions of rows
// (a judged prediction keeps all of them); it gets an error instead of exhausting the memory of
// a run with dozens of executions in flight. BIRD's largest gold results are a few megabytes.
const maxResultBytes = 256 << 20

// errResultTooLarge reports a result past maxResultBytes.
var errResultTooLarge = fmt.Errorf("the result is larger than %d MiB; ask for fewer rows or columns", maxResultBytes>>20)

// TooLarge is the Result of a statement whose result passed maxResultBytes.
func TooLarge(res *Result) *Result {
	return &Result{Outcome: OutcomeError, Error: errResultTooLarge.Error(), Duration: res.Duration}
}

// cellSize is roughly the memory v takes in a Result row.
func cellSize(v any) int {
	switch x := v.(type) {
	case string:
		return 16 + len(x)
	case []byte:
		return 24 + len(x)
	}
	return 16
}

// replyLimitConn is a network connection whose reads fail once the server's reply to one
// request (what was read since the client last wrote) passes limit, counting each such cut in
// cut. Hand-written because neither driver bounds what it reads: pgx's message cap is per row
// and 1 GiB, go-sql-driver/mysql has none.
type replyLimitConn struct {
	net.Conn
	limit int64
	n     atomic.Int64 // read since the last write
	cut   *atomic.Int64
}

func (c *replyLimitConn) Write(b []byte) (int, error) {
	c.n.Store(0)
	return c.Conn.Write(b)
}

// NetConn returns the connection under c, as crypto/tls's Conn does, for an engine looking for
// its own connection type beneath.
func (c *replyLimitConn) NetConn() net.Conn { return c.Conn }

func (c *replyLimitConn) Read(b []byte) (int, error) {
	if c.n.Load() > c.limit {
		c.cut.Add(1)
		return 0, errResultTooLarge
	}
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// DialFunc is the dialer both drivers accept.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// LimitReplies wraps dial so that every connection it makes is a replyLimitConn of
// maxResultBytes counting its cuts in cut.
func LimitReplies(dial DialFunc, cut *atomic.Int64) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &replyLimitConn{Conn: c, limit: maxResultBytes, cut: cut}, nil
	}
}

// IsTooLarge reports whether err is a result cut at maxResultBytes.
func IsTooLarge(err error) bool { return errors.Is(err, errResultTooLarge) }
