package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// pgNoSSLProxy returns the address of a proxy to the test server that answers 'N' to an
// SSLRequest, as a server with ssl=off does (the stock postgres Docker image), so that pgx's
// default sslmode=prefer dials a second time for the connection it uses.
func pgNoSSLProxy(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var hdr [8]byte
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					return
				}
				if binary.BigEndian.Uint32(hdr[4:]) == 80877103 { // SSLRequest
					c.Write([]byte{'N'})
					if _, err := io.ReadFull(c, hdr[:]); err != nil {
						return
					}
				}
				s, err := net.Dial("tcp", "127.0.0.1:5432")
				if err != nil {
					return
				}
				defer s.Close()
				s.Write(hdr[:])
				go io.Copy(s, c)
				io.Copy(c, s)
			}()
		}
	}()
	return l.Addr().String()
}

// TestPostgresRedialHoldsSlot: whatever pgx's fallbacks dial for a connection (sslmode=prefer
// refused, then plain; target_session_attrs=prefer-standby, a primary's login discarded, then
// the fallback), the socket of the connection actually used holds its slot, and a discarded
// attempt's holds none. Before, the slot went to the first socket dialled: the used
// connection had no slotConn (not hung up on, its backend neither stopped nor counted) and
// held no slot.
func TestPostgresRedialHoldsSlot(t *testing.T) {
	admin := sandboxtest.PGAdmin(t)
	ctx := context.Background()
	schemas := pgHostileSchemas(t, admin, 1)
	for name, dsn := range map[string]string{
		"prefer-refused": "postgres://postgres@" + pgNoSSLProxy(t) + "/test?sslmode=prefer",
		"prefer-standby": "postgres://postgres@127.0.0.1:5432/test?sslmode=disable&target_session_attrs=prefer-standby",
	} {
		t.Run(name, func(t *testing.T) {
			p := pgOpen(t, pgSlotsEngine(t, dsn, 1, sandbox.Access{AsDSNUser: true}), schemas[0])
			// One slot: each Exec gets it only if no discarded attempt kept it.
			for i := 0; i < 3; i++ {
				res, err := p.Exec(ctx, "SELECT count(*) FROM t", sandbox.ExecOptions{Timeout: 5 * time.Second})
				if err != nil || res.Outcome != sandbox.OutcomeOK {
					t.Fatalf("exec %d: %v %+v", i, err, res)
				}
			}
			conn, done, err := p.srv.conn(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, sc := pgConnOf(conn)
			done()
			if sc == nil {
				t.Error("the pool's connection has no slotConn under it")
			}
			time.Sleep(300 * time.Millisecond) // any closed socket's stop has run
			if st := p.srv.pool.Stats(); st.OpenConnections != len(p.srv.slots) {
				t.Errorf("%d open pool connections, %d slots held", st.OpenConnections, len(p.srv.slots))
			}
		})
	}
}

// TestPostgresSlotWaitTakesIdle: a statement that finds no idle connection and no free slot (one
// of two held by a backend past its connection, as a runaway holds it, the other by a running
// statement) takes the connection the running statement gives back, instead of waiting on for a
// slot until its deadline. Before, it waited in Connect for a slot and never saw the connection.
func TestPostgresSlotWaitTakesIdle(t *testing.T) {
	admin := sandboxtest.PGAdmin(t)
	ctx := context.Background()
	schemas := pgHostileSchemas(t, admin, 1)
	p := pgOpen(t, pgSlotsEngine(t, shared.PostgresDSN(), 2, sandbox.Access{AsDSNUser: true}), schemas[0])
	closeIdle(t, p)
	p.srv.slots <- struct{}{} // a runaway's slot
	defer p.srv.release()
	a := make(chan error, 1)
	go func() {
		_, err := p.run(ctx, time.Now(), "SELECT 1 FROM pg_catalog.pg_sleep(0.4)", 5*time.Second, sandbox.ExecOptions{})
		a <- err
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	r, err := p.run(ctx, start, "SELECT 1", time.Second, sandbox.ExecOptions{})
	if err != nil || !r.OK() {
		t.Errorf("the statement waiting while a connection was given back at 0.3 s: %+v, %v after %s", r, err, time.Since(start))
	}
	if err := <-a; err != nil {
		t.Fatal(err)
	}
}

// TestPostgresRunawaysPerDB: a schema whose runaway backends number pgRunawaysPerDB refuses its
// new statements with sandbox.ErrBusy at once, naming them, while another schema of the same
// server handle still runs; once they end it runs again. The count is the one pgServer.stop
// keeps for the schema of the statement a runaway backend ran (TestPostgresHostileDeadlines
// holds a real runaway to it); set here. Before, one schema's runaways were capped only by the
// handle's slots, which one task's statements could fill.
func TestPostgresRunawaysPerDB(t *testing.T) {
	admin := sandboxtest.PGAdmin(t)
	schemas := pgHostileSchemas(t, admin, 2)
	eng := pgSlotsEngine(t, shared.PostgresDSN(), 4, sandbox.Access{AsDSNUser: true})
	p, q := pgOpen(t, eng, schemas[0]), pgOpen(t, eng, schemas[1])
	p.runaways.Store(pgRunawaysPerDB)
	start := time.Now()
	r, err := p.Exec(context.Background(), "SELECT count(*) FROM t", sandbox.ExecOptions{Timeout: 2 * time.Second})
	t.Logf("beside %d runaways, after %s: %v", pgRunawaysPerDB, time.Since(start), err)
	if !errors.Is(err, sandbox.ErrBusy) || r != nil || !strings.Contains(err.Error(), "runaways") || time.Since(start) > time.Second {
		t.Errorf("a statement of a schema with %d runaways: %+v, %v after %s; want sandbox.ErrBusy naming them at once", pgRunawaysPerDB, r, err, time.Since(start))
	}
	if r := sandboxtest.MustExec(t, q, "SELECT count(*) FROM t", sandbox.ExecOptions{}); !r.OK() {
		t.Errorf("another schema of the handle: %+v, want it to run", r)
	}
	p.runaways.Store(pgRunawaysPerDB - 1)
	if r := sandboxtest.MustExec(t, p, "SELECT count(*) FROM t", sandbox.ExecOptions{}); !r.OK() {
		t.Errorf("below the cap: %+v, want it to run", r)
	}
}

// TestPostgresRunawaysAfterWait: a statement that passed the per-schema runaway cap at its start
// and waited for a slot while its schema's runaways reached the cap does not run either
// (sandbox.ErrBusy): before, every statement queued for a slot before the cap was reached ran
// once it got one, so that one task's statements could fill the handle's slots with runaways.
func TestPostgresRunawaysAfterWait(t *testing.T) {
	admin := sandboxtest.PGAdmin(t)
	schemas := pgHostileSchemas(t, admin, 1)
	eng := pgSlotsEngine(t, shared.PostgresDSN(), 2, sandbox.Access{AsDSNUser: true})
	p := pgOpen(t, eng, schemas[0])
	t.Cleanup(func() {
		p.runaways.Store(0)
		for len(p.srv.taken) > 0 {
			<-p.srv.taken
		}
	})
	sandboxtest.CheckRunawaysAfterWait(t, p, func() {
		for range cap(p.srv.taken) {
			p.srv.taken <- struct{}{}
		}
	}, func() {
		p.runaways.Store(pgRunawaysPerDB)
		<-p.srv.taken
		p.srv.signal()
	})
}
