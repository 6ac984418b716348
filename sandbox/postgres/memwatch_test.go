package postgres

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// TestPostgresBackendMemoryIdentity: backendMemory reads a process's memory only when its title
// names the connection's login, database and local address and port.
func TestPostgresBackendMemoryIdentity(t *testing.T) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, shared.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	cfg, pid := c.Config(), c.PgConn().PID()
	local, ok := c.PgConn().Conn().LocalAddr().(*net.TCPAddr)
	if !ok {
		t.Skipf("the test server is not reached over TCP (%v)", c.PgConn().Conn().LocalAddr())
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		t.Skipf("the test server's backends are not visible here: %v", err)
	}
	if rss, ok := backendMemory(pid, cfg.User, cfg.Database, local); !ok || rss <= 0 {
		t.Fatalf("backendMemory of the connection's own backend %d = %d, %v; want its RssAnon", pid, rss, ok)
	}
	other := *local
	other.Port++
	for what, w := range map[string]struct {
		pid       uint32
		login, db string
		local     net.Addr
	}{
		"another port":     {pid, cfg.User, cfg.Database, &other},
		"another login":    {pid, cfg.User + "x", cfg.Database, local},
		"another database": {pid, cfg.User, cfg.Database + "x", local},
		"not a backend":    {uint32(os.Getpid()), cfg.User, cfg.Database, local},
		"a Unix socket":    {pid, cfg.User, cfg.Database, &net.UnixAddr{Name: "/tmp/.s.PGSQL.5432", Net: "unix"}},
		"no such process":  {1 << 30, cfg.User, cfg.Database, local},
	} {
		if rss, ok := backendMemory(w.pid, w.login, w.db, w.local); ok {
			t.Errorf("%s: backendMemory read %d bytes of a process that is not provably the backend", what, rss)
		}
	}
}

// TestPostgresMemoryWatch: a statement whose backend passes ExecOptions.MaxServerMemory (made-up
// time zones, read as dates through a derived column, which the screen passes) is stopped well
// before its deadline with an error saying so, and its backend is gone; a plain statement under
// the same bound runs and its backend stays pooled; where the backend is not provably the
// statement's (its title names another login) nothing is watched.
func TestPostgresMemoryWatch(t *testing.T) {
	admin := sandboxtest.PGAdmin(t)
	var serverPID int
	if err := admin.QueryRow("SELECT pg_backend_pid()").Scan(&serverPID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", serverPID)); err != nil {
		t.Skipf("the test server's backends are not visible here: %v", err)
	}
	schemas := pgHostileSchemas(t, admin, 1)
	_, reader, dbs := pgHostileConnector(t, schemas)
	const bound = 256 << 20
	run := func(q string) (*sandbox.Result, int) {
		t.Helper()
		return pgRunSeen(t, admin, dbs[0], reader, q, sandbox.ExecOptions{Timeout: 30 * time.Second, MaxServerMemory: bound})
	}
	alive := func(pid int) bool { return pgAlive(t, admin, pid) }
	// 40,000 made-up zones keep about 940 MB when run to their end (0.6 to 1.5 s on two busy cores).
	const zones = "SELECT max(d) FROM (SELECT x::date AS d FROM (SELECT '2020-01-01 Q' || chr(65 + g % 26) || chr(65 + (g/26) % 26) || chr(65 + (g/676) % 26) || '1' AS x FROM generate_series(1, 40000) g) s) z"
	r, pid := run(zones)
	if want := "more than 256 MiB of server memory"; r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, want) {
		t.Errorf("the statement over its memory bound: %s %q after %v, want an error saying %q", r.Outcome, r.Error, r.Duration, want)
	}
	t.Logf("stopped over %d MiB after %v: %s", bound>>20, r.Duration, r.Error)
	if r.Duration > 10*time.Second {
		t.Errorf("the statement over its memory bound was stopped after %v, not well before its 30 s deadline", r.Duration)
	}
	for end := time.Now().Add(2 * time.Second); alive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Errorf("the backend %d of the statement over its memory bound is still there 2 s after Exec returned", pid)
			break
		}
	}
	r, pid = run("SELECT count(*) FROM t, pg_sleep(0.3)")
	if r.Outcome != sandbox.OutcomeOK || len(r.Rows) != 1 || fmt.Sprint(r.Rows[0][0]) != "3" {
		t.Errorf("a plain statement under the memory bound: %s %q %v, want its count 3", r.Outcome, r.Error, r.Rows)
	}
	if !alive(pid) {
		t.Errorf("the backend %d of a plain statement under the memory bound is gone: it should stay pooled", pid)
	}
	// A backend whose title does not name the handle's login is not provably the statement's:
	// its memory is not read, and the statement runs as without the watch.
	srv := dbs[0].(*pgDB).srv
	srv.login = "i26pg_not_" + reader
	if r, _ := run(zones); r.Outcome != sandbox.OutcomeOK {
		t.Errorf("the statement whose backend is not provably its own was stopped: %s %q", r.Outcome, r.Error)
	}
}
