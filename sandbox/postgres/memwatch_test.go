package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chainedsql/chainedsql/datasets"
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
	admin := pgAdminVisible(t)
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
	// its memory is not read, and the statement runs as without the watch. (A connection's
	// backend is proven once, when first watched: a fresh handle, whose login is changed
	// before its first statement.)
	_, reader, dbs = pgHostileConnector(t, schemas)
	dbs[0].(*pgDB).srv.login = "i26pg_not_" + reader
	if r, _ := run(zones); r.Outcome != sandbox.OutcomeOK {
		t.Errorf("the statement whose backend is not provably its own was stopped: %s %q", r.Outcome, r.Error)
	}
}

// pgRowZones reads the made-up time zones from to to as the date column of the row type d (a table of the
// task's), which pgKeepsBackendMemory cannot see by the statement's tokens: each zone is cached
// for the backend's life, about 23 KB.
func pgRowZones(from, to int) string {
	return fmt.Sprintf("SELECT max((('(2020-01-01 Q' || chr(65 + g %% 26) || chr(65 + (g/26) %% 26) || chr(65 + (g/676) %% 26) || '1)')::d).d) FROM generate_series(%d, %d) g", from, to)
}

// TestPostgresMemoryWatchPooledBackend: the memory watch charges a statement with its backend's
// growth, not with what an earlier statement left on the pooled backend, and a backend left
// holding more than a pooled backend may is not pooled. Before, 8,000 made-up zones read
// through a row type (190 MB, under the 256 MiB bound, and kept) left their backend pooled, and
// the next statement on it, growing 100 MB of its own (an array of 10,000,000 integers), was
// stopped as "more than 256 MiB".
func TestPostgresMemoryWatchPooledBackend(t *testing.T) {
	admin := pgAdminVisible(t)
	schemas := pgHostileSchemas(t, admin, 1)
	if _, err := admin.Exec("CREATE TABLE " + schemas[0] + ".d (d date)"); err != nil {
		t.Fatal(err)
	}
	_, reader, dbs := pgHostileConnector(t, schemas)
	run := func(q string) (*sandbox.Result, int) {
		t.Helper()
		r, pid := pgRunSeen(t, admin, dbs[0], reader, q, sandbox.ExecOptions{Timeout: 30 * time.Second, MaxServerMemory: 256 << 20})
		if r.Outcome != sandbox.OutcomeOK {
			t.Errorf("%.70q: %s %q after %v, want ok", q, r.Outcome, r.Error, r.Duration)
		}
		return r, pid
	}
	const grow = "SELECT length(string_agg(repeat('x', 1000), ',')) FROM generate_series(1, 100000)"
	_, fat := run(pgRowZones(1, 8000))
	for end := time.Now().Add(2 * time.Second); pgAlive(t, admin, fat); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Errorf("the backend %d left holding 190 MB of time zones is still there 2 s after its statement: it was pooled", fat)
			break
		}
	}
	run(grow)
	// The same with such a backend pooled (as where its memory was left under the pooled
	// bound): the next statement is charged with its own growth only.
	dbs[0].(*pgDB).srv.pooledMemory = 1 << 40
	_, fat = run(pgRowZones(8001, 16000)) // others: the first are cached on the pooled backend
	if _, pid := run(grow); pid != fat {
		t.Logf("the statement after the zones ran on backend %d, not on the zones' %d: the pooled growth is not tested", pid, fat)
	}
}

// TestPostgresMemoryWatchParallel: a statement's backend does not hand its work to parallel
// workers, whose memory the watch does not read (other processes, titled "parallel worker for
// PID …"). Before, made-up zones read by two workers (the reader's settings making the plan
// parallel and the leader a bystander) held about 470 MB each and the statement ran to ok under
// a 256 MiB bound.
func TestPostgresMemoryWatchParallel(t *testing.T) {
	admin := pgAdminVisible(t)
	schemas := pgHostileSchemas(t, admin, 1)
	s := schemas[0]
	if _, err := admin.Exec("CREATE TABLE " + s + ".z (x text) WITH (parallel_workers = 2); INSERT INTO " + s + ".z SELECT '2020-01-01 Q' || chr(65 + g % 26) || chr(65 + (g/26) % 26) || chr(65 + (g/676) % 26) || '1' FROM generate_series(1, 40000) g; ANALYZE " + s + ".z"); err != nil {
		t.Fatal(err)
	}
	reader := fmt.Sprintf("i26pg_rd_%d_%d", os.Getpid()%100000, sandboxtest.Seq()+time.Now().UnixNano()%1_000_000)
	sandboxtest.GrantReader(t, datasets.Postgres, reader, s)
	// Settings the reader's sessions start with (before its first connection): a parallel plan
	// however small the table, its leader only gathering.
	if _, err := admin.Exec("ALTER ROLE " + reader + " SET parallel_setup_cost = 0; ALTER ROLE " + reader + " SET parallel_tuple_cost = 0; ALTER ROLE " + reader + " SET min_parallel_table_scan_size = 0; ALTER ROLE " + reader + " SET parallel_leader_participation = off"); err != nil {
		t.Fatal(err)
	}
	c := &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN()}, Access: sandbox.Access{Reader: reader}}
	defer c.Close()
	db, err := c.Open(context.Background(), datasets.Postgres, datasets.Task{ID: s, DBID: s})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := pgRunSeen(t, admin, db, reader, "SELECT max(x::date) FROM z", sandbox.ExecOptions{Timeout: 30 * time.Second, MaxServerMemory: 256 << 20})
	if want := "more than 256 MiB of server memory"; r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, want) {
		t.Errorf("40,000 made-up zones read by a parallel plan under a 256 MiB bound: %s %q after %v, want an error saying %q", r.Outcome, r.Error, r.Duration, want)
	}
}

// pgAdminVisible returns the test server's admin connection, skipping the test where the
// server's backends are not visible on this host (the memory watch is off there).
func pgAdminVisible(t *testing.T) *sql.DB {
	t.Helper()
	admin := sandboxtest.PGAdmin(t)
	var serverPID int
	if err := admin.QueryRow("SELECT pg_backend_pid()").Scan(&serverPID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", serverPID)); err != nil {
		t.Skipf("the test server's backends are not visible here: %v", err)
	}
	return admin
}

// backendMemory returns the anonymous memory, in bytes, of process pid of this host (RssAnon
// of its status), and whether it is provably the backend of the connection whose local end is
// local, logged in as login to database (backendStatus): what the watch reads, for the tests.
func backendMemory(pid uint32, login, database string, local net.Addr) (int64, bool) {
	f, ok := backendStatus(pid, login, database, local)
	if !ok {
		return 0, false
	}
	defer f.Close()
	return rssAnon(f)
}
