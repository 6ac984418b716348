// Package pgtest gives tests PostgreSQL objects of their own on the test server
// (shared.PostgresDSN), dropped when they end. For tests only.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the admin connection

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
)

// unique names a test's PostgreSQL object: prefix, the process id and a time-derived number.
func unique(prefix string) string {
	return fmt.Sprintf("%s%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1_000_000)
}

// FreshDB creates a database of its own for tb on the test server (shared.PostgresDSN) and
// returns its DSN and drop, which drops it: defer drop() before dropping roles granted on it
// (a t.Cleanup registered earlier runs after it). It skips without servers, or where no DSN can
// be derived from shared.PostgresDSN's.
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
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		admin.Close()
		tb.Fatalf("create database (is PostgreSQL running? set CHAINEDSQL_NO_SERVERS=1 to skip): %v", err)
	}
	return dsn, func() {
		admin.Exec("DROP DATABASE " + name + " WITH (FORCE)")
		admin.Close()
	}
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
	if _, err := sandbox.CopySQLite(ctx, path, datasets.Postgres, shared.PostgresDSN(), schema); err != nil {
		tb.Fatalf("copy %s into postgres: %v (set CHAINEDSQL_NO_SERVERS=1 to skip)", path, err)
	}
	admin, err := sql.Open("pgx", shared.PostgresDSN())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { // after the reader's drop below (cleanups run last first)
		admin.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE")
		admin.Close()
	})
	if _, err := sandbox.EnsureReader(ctx, datasets.Postgres, shared.PostgresDSN(), sandbox.ReaderSetup{Name: reader}, []string{schema}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := sandbox.DropReader(context.Background(), datasets.Postgres, shared.PostgresDSN(), reader); err != nil {
			tb.Errorf("drop reader %s: %v", reader, err)
		}
	})
	return schema, reader
}
