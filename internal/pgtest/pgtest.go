// Package pgtest gives tests PostgreSQL objects of their own on the test server
// (shared.PostgresDSN), dropped when they end. For tests only.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the admin connection

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	_ "github.com/chainedsql/chainedsql/sandbox/engines" // the dialects, for sandbox.DropReader
)

// unique names a test's PostgreSQL object: prefix, the process id and a time-derived number.
func unique(prefix string) string {
	return fmt.Sprintf("%s%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1_000_000)
}

// stale matches the names unique gave: prefix, a process id, "_", digits.
var stale = regexp.MustCompile(`^(.*?)([0-9]+)_[0-9]+$`)

// sweep drops what unique named with prefix for a process that no longer runs on this machine
// (a test binary killed by -timeout or a signal runs no cleanups): databases, schemas of the
// test database, and roles (cs_rd_ + prefix). What it cannot drop it leaves. It sweeps only
// where it can tell: with /proc, and a server on this machine (a loopback host or a socket),
// whose other clients' process ids this machine sees; never a server that clients of other
// machines or containers share.
func sweep(admin *sql.DB, prefix string) {
	if _, err := os.Stat("/proc/self"); err != nil || !localServer(shared.PostgresDSN()) {
		return
	}
	dead := func(name, prefix string) bool {
		m := stale.FindStringSubmatch(name)
		if m == nil || m[1] != prefix {
			return false
		}
		_, err := os.Stat("/proc/" + m[2])
		return os.IsNotExist(err)
	}
	like := strings.NewReplacer("_", `\_`, "%", `\%`).Replace
	for _, q := range []struct{ list, drop, prefix string }{
		{"SELECT datname FROM pg_database WHERE datname LIKE $1", "DROP DATABASE IF EXISTS %s WITH (FORCE)", prefix},
		{"SELECT nspname FROM pg_namespace WHERE nspname LIKE $1", "DROP SCHEMA IF EXISTS %s CASCADE", prefix},
		{"SELECT rolname FROM pg_roles WHERE rolname LIKE $1", "", "cs_rd_" + prefix},
	} {
		rows, err := admin.Query(q.list, like(q.prefix)+"%")
		if err != nil {
			continue
		}
		var names []string
		for rows.Next() {
			var n string
			if rows.Scan(&n) == nil && dead(n, q.prefix) {
				names = append(names, n)
			}
		}
		rows.Close()
		for _, n := range names {
			if q.drop == "" {
				sandbox.DropReader(context.Background(), datasets.Postgres, shared.PostgresDSN(), n)
			} else {
				admin.Exec(fmt.Sprintf(q.drop, n))
			}
		}
	}
}

// localServer reports whether dsn's server is on this machine: every host pgx would try (URL or
// keyword/value form, PGHOST where the DSN names none) a loopback address, localhost or a socket.
func localServer(dsn string) bool {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return false
	}
	hosts := []string{cfg.Host}
	for _, f := range cfg.Fallbacks {
		hosts = append(hosts, f.Host)
	}
	for _, h := range hosts {
		ip := net.ParseIP(h)
		if h != "localhost" && !strings.HasPrefix(h, "/") && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return true
}

// FreshDB creates a database of its own for tb on the test server (shared.PostgresDSN) and
// returns its DSN and drop, which drops it (once; a drop that fails is the test's error) and
// runs when tb ends too: defer drop() before dropping roles granted on it (a t.Cleanup
// registered earlier runs after it). It first drops the databases of prefix that killed test
// processes left. It skips without servers, or where no DSN can be derived from
// shared.PostgresDSN's.
func FreshDB(tb testing.TB, prefix string) (dsn string, drop func()) {
	tb.Helper()
	shared.SkipServers(tb)
	admin, err := sql.Open("pgx", shared.PostgresDSN())
	if err != nil {
		tb.Fatal(err)
	}
	name := unique(prefix)
	dsn = strings.Replace(shared.PostgresDSN(), "/test?", "/"+name+"?", 1)
	if dsn == shared.PostgresDSN() {
		admin.Close()
		tb.Skipf("cannot derive a fresh-database DSN from %s", shared.PostgresDSN())
	}
	sweep(admin, prefix)
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		admin.Close()
		tb.Fatalf("create database (is PostgreSQL running? set CHAINEDSQL_NO_SERVERS=1 to skip): %v", err)
	}
	var once sync.Once
	drop = func() {
		once.Do(func() {
			if _, err := admin.Exec("DROP DATABASE " + name + " WITH (FORCE)"); err != nil {
				tb.Errorf("drop database %s: %v", name, err)
			}
			admin.Close()
		})
	}
	tb.Cleanup(drop)
	return dsn, drop
}

// Copy copies the SQLite database at path into a schema of its own in the test database
// (shared.PostgresDSN) and creates a reader granted only that schema, both dropped when tb
// ends, and returns the schema's name (a task's db_id on the copy) and the reader. It skips
// without servers.
func Copy(tb testing.TB, path, prefix string) (schema, reader string) {
	tb.Helper()
	shared.SkipServers(tb)
	ctx := context.Background()
	schema, reader = unique(prefix), unique("cs_rd_"+prefix)
	admin, err := sql.Open("pgx", shared.PostgresDSN())
	if err != nil {
		tb.Fatal(err)
	}
	sweep(admin, prefix)
	tb.Cleanup(func() { // after the reader's drop below (cleanups run last first)
		if _, err := admin.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
		admin.Close()
	})
	if _, err := sandbox.CopySQLite(ctx, path, datasets.Postgres, shared.PostgresDSN(), schema); err != nil {
		tb.Fatalf("copy %s into postgres: %v (set CHAINEDSQL_NO_SERVERS=1 to skip)", path, err)
	}
	tb.Cleanup(func() { // DropReader drops nothing where the reader is missing
		if err := sandbox.DropReader(context.Background(), datasets.Postgres, shared.PostgresDSN(), reader); err != nil {
			tb.Errorf("drop reader %s: %v", reader, err)
		}
	})
	if _, err := sandbox.EnsureReader(ctx, datasets.Postgres, shared.PostgresDSN(), sandbox.ReaderSetup{Name: reader}, []string{schema}); err != nil {
		tb.Fatal(err)
	}
	return schema, reader
}
