package sandbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// MaxResultBytes bounds what one statement's result may hold in this process at once: the rows
// it keeps (every engine, counted by rowSize; the judge keeps what its verdict needs) and, on the
// server engines, together with them, what the driver holds of the server's reply
// (replyLimitConn: what was read since the request or since Collect took the last row, one row). A statement the policy writes may ask for a
// gigabyte a row (repeat('x', 1e9) in ten columns) or keep millions of rows; it gets an error
// instead of exhausting the memory of a run with dozens of executions in flight. Rows that are
// only counted stream through, however many (the statement's deadline bounds them), so a result
// of millions of small rows is ok on every engine. BIRD's largest gold results are a few
// megabytes.
const MaxResultBytes = 256 << 20

// errResultTooLarge reports a result past MaxResultBytes.
var errResultTooLarge = fmt.Errorf("the result is larger than %d MiB; ask for fewer rows or columns", MaxResultBytes>>20)

// TooLarge is the Result of a statement whose result passed MaxResultBytes.
func TooLarge(res *Result) *Result {
	return &Result{Outcome: OutcomeError, Error: errResultTooLarge.Error(), Duration: res.Duration}
}

// rowSize is roughly the heap a kept Result row takes: its entry in Result.Rows with the slack
// of append's doubling (48 bytes), and per cell its interface slot (16) and the value it boxes:
// 8 bytes for a number or a bool, 24 for a time, a string's or a slice's header and its bytes
// (a result of ten million one-integer rows measured about 80 bytes of heap a row).
func rowSize(row []any) int {
	n := 48
	for _, v := range row {
		n += 16
		switch x := v.(type) {
		case nil:
		case string:
			n += 16 + len(x)
		case Decimal:
			n += 16 + len(x)
		case []byte:
			n += 24 + len(x)
		case time.Time:
			n += 24
		default:
			n += 8
		}
	}
	return n
}

// Size is roughly the memory res holds: its kept rows as Collect counts them (rowSize), its
// column names and its error. A cache of results bounds itself by it.
func Size(res *Result) int64 {
	n := int64(len(res.Error))
	for _, c := range res.Columns {
		n += 16 + int64(len(c))
	}
	for _, row := range res.Rows {
		n += int64(rowSize(row))
	}
	return n
}

// replyLimitConn is a network connection whose reads fail once what was read since the client
// last wrote (a request) or since Collect last took a row of the reply (rowTaken) passes limit,
// counting each such cut in cut. Both drivers read a row whole into one buffer before handing
// it over (pgx a protocol message, go-sql-driver/mysql a packet sequence) and drop it at the
// next row, so what a driver holds of a reply at once is this window: one row and what it read
// ahead. Hand-written because go-sql-driver/mysql has no bound of its own and pgx none by
// default (postgres also sets pgx's per-message one, which refuses a row before its buffer).
type replyLimitConn struct {
	net.Conn
	limit int64
	n     atomic.Int64 // read since the last write or row taken
	cut   *atomic.Int64

	mu     sync.Mutex
	key    any // the driver connection reading through it, in replyConns; nil if none
	closed bool
}

// replyConns maps each live driver connection of a pool opened with TrackReplies to the
// replyLimitConn it reads through.
var replyConns sync.Map

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

// Close closes the connection and forgets the driver connection reading through it.
func (c *replyLimitConn) Close() error {
	c.mu.Lock()
	c.closed = true
	if c.key != nil {
		replyConns.Delete(c.key)
		c.key = nil
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

// track records dc as the driver connection reading through c, until c is closed.
func (c *replyLimitConn) track(dc driver.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.key = dc
	replyConns.Store(dc, c)
}

// rowTaken restarts c's window once the row read before it is the caller's: at kept, the bytes
// the caller holds of the result, so that what it keeps and what the driver reads of the next
// row share one limit. A nil c does nothing.
func (c *replyLimitConn) rowTaken(kept int) {
	if c != nil {
		c.n.Store(int64(kept))
	}
}

// replyWindow returns the replyLimitConn a query on db reads through when db is a *sql.Conn of
// a pool opened with TrackReplies over a LimitReplies dialer, else nil.
func replyWindow(db Queryer) *replyLimitConn {
	conn, ok := db.(*sql.Conn)
	if !ok {
		return nil
	}
	var rc *replyLimitConn
	_ = conn.Raw(func(dc any) error {
		if v, ok := replyConns.Load(dc); ok {
			rc = v.(*replyLimitConn)
		}
		return nil
	})
	return rc
}

// DialFunc is the dialer both drivers accept.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// LimitReplies wraps dial so that every connection it makes is a replyLimitConn of
// MaxResultBytes counting its cuts in cut. Without TrackReplies over the pool's connector its
// window is the whole reply to each request.
func LimitReplies(dial DialFunc, cut *atomic.Int64) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		rc := &replyLimitConn{Conn: c, limit: MaxResultBytes, cut: cut}
		if d, ok := ctx.Value(dialedKey{}).(*dialed); ok {
			d.mu.Lock()
			d.last = rc
			d.mu.Unlock()
		}
		return rc, nil
	}
}

// TrackReplies wraps c, whose Connect dials through LimitReplies with the context it is given,
// so that Collect finds the connection each of its driver connections reads through and
// restarts its window at each row it takes: a result of any number of rows then streams, and
// only a row past MaxResultBytes (with what the driver read ahead) is cut.
func TrackReplies(c driver.Connector) driver.Connector { return trackingConnector{c} }

// trackingConnector is TrackReplies' connector.
type trackingConnector struct{ driver.Connector }

// dialed carries, from a Connect to the dialer, the last connection LimitReplies made for it
// (a driver may dial again: another address, a TLS fallback).
type dialed struct {
	mu   sync.Mutex
	last *replyLimitConn
}

type dialedKey struct{}

func (t trackingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	d := &dialed{}
	dc, err := t.Connector.Connect(context.WithValue(ctx, dialedKey{}, d))
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	rc := d.last
	d.mu.Unlock()
	if rc != nil {
		rc.track(dc)
	}
	return dc, nil
}

// IsTooLarge reports whether err is a result cut at MaxResultBytes.
func IsTooLarge(err error) bool { return errors.Is(err, errResultTooLarge) }
