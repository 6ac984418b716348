package sandbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
)

// TestReplyWindow: a limited connection's reads fail, counted, once what was read since the
// last write or the last row taken passes its limit, however much went through before.
func TestReplyWindow(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	go func() {
		defer server.Close()
		b := make([]byte, 60)
		for {
			if _, err := server.Write(b); err != nil {
				return
			}
		}
	}()
	var cut atomic.Int64
	c := &replyLimitConn{Conn: client, limit: 100, cut: &cut}
	b := make([]byte, 60)
	for i := range 10 { // 600 bytes, a row taken every 60
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		c.rowTaken(0)
	}
	var err error
	for i := 0; i < 3 && err == nil; i++ {
		_, err = io.ReadFull(c, b)
	}
	if !IsTooLarge(err) || cut.Load() != 1 {
		t.Errorf("past the window: %v, %d cuts; want the result too large, one cut", err, cut.Load())
	}
	// What the caller keeps shares the window: with 90 bytes kept, one more 60-byte row passes it.
	c = &replyLimitConn{Conn: client, limit: 100, cut: &cut}
	c.rowTaken(90)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("the row after 90 bytes kept: %v", err)
	}
	if _, err := io.ReadFull(c, b); !IsTooLarge(err) || cut.Load() != 2 {
		t.Errorf("past the window with 90 bytes kept: %v, %d cuts; want the result too large, a second cut", err, cut.Load())
	}
}

// pipeConnector connects database/sql connections over fresh pipes dialled with dial.
type pipeConnector struct{ dial DialFunc }

func (p pipeConnector) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := p.dial(ctx, "pipe", "")
	if err != nil {
		return nil, err
	}
	return &pipeConn{c}, nil
}

func (p pipeConnector) Driver() driver.Driver { return nil }

// pipeConn is a driver connection that can only be closed.
type pipeConn struct{ net.Conn }

func (*pipeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("no statements") }
func (*pipeConn) Begin() (driver.Tx, error)           { return nil, errors.New("no transactions") }

// TestTrackReplies: Collect finds the limited connection a pool's connection reads through
// while it is open, and the pool forgets it once closed.
func TestTrackReplies(t *testing.T) {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, s := net.Pipe()
		s.Close()
		return c, nil
	}
	for _, tracked := range []bool{true, false} {
		connector := driver.Connector(pipeConnector{LimitReplies(dial, new(atomic.Int64))})
		if tracked {
			connector = TrackReplies(connector)
		}
		pool := sql.OpenDB(connector)
		conn, err := pool.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if w := replyWindow(conn); (w != nil) != tracked {
			t.Errorf("tracked %v: window %v", tracked, w)
		}
		conn.Close()
		pool.Close()
		n := 0
		replyConns.Range(func(any, any) bool { n++; return true })
		if n != 0 {
			t.Errorf("tracked %v: %d connections still known after the pool closed", tracked, n)
		}
	}
}
