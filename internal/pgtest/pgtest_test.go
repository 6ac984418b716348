package pgtest

import (
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/chainedsql/chainedsql/internal/shared"
)

// deadPID returns a process id that no process on this machine has now.
func deadPID(t *testing.T) int {
	for pid := 999_999; pid > 900_000; pid-- { // above Linux's default pid_max, 4,194,304 at most
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); os.IsNotExist(err) {
			return pid
		}
	}
	t.Skip("no free process id found")
	return 0
}

// TestSweep: FreshDB and Copy drop the databases, schemas and readers of their prefix that a
// killed test process left (its process id is gone), and leave those of running processes and
// of other prefixes.
func TestSweep(t *testing.T) {
	shared.SkipServers(t)
	admin, err := sql.Open("pgx", shared.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	dead := deadPID(t)
	const prefix = "cs_sweep_"
	leftDB, liveDB, otherDB := fmt.Sprintf("%s%d_1", prefix, dead), fmt.Sprintf("%s%d_2", prefix, os.Getpid()), fmt.Sprintf("cs_sweepx_%d_3", dead)
	leftSchema, leftRole := fmt.Sprintf("%s%d_4", prefix, dead), fmt.Sprintf("cs_rd_%s%d_5", prefix, dead)
	for _, q := range []string{"CREATE DATABASE " + leftDB, "CREATE DATABASE " + liveDB, "CREATE DATABASE " + otherDB,
		"CREATE SCHEMA " + leftSchema, "CREATE ROLE " + leftRole} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, q := range []string{"DROP DATABASE IF EXISTS " + leftDB, "DROP DATABASE IF EXISTS " + liveDB, "DROP DATABASE IF EXISTS " + otherDB,
			"DROP SCHEMA IF EXISTS " + leftSchema, "DROP ROLE IF EXISTS " + leftRole} {
			admin.Exec(q)
		}
	}()
	FreshDB(t, prefix)
	exists := func(q, name string) bool {
		var n int
		if err := admin.QueryRow(q, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	const db, schema, role = "SELECT count(*) FROM pg_database WHERE datname = $1", "SELECT count(*) FROM pg_namespace WHERE nspname = $1", "SELECT count(*) FROM pg_roles WHERE rolname = $1"
	if exists(db, leftDB) || exists(schema, leftSchema) || exists(role, leftRole) {
		t.Errorf("what a killed process left stays: database %v, schema %v, role %v", exists(db, leftDB), exists(schema, leftSchema), exists(role, leftRole))
	}
	if !exists(db, liveDB) || !exists(db, otherDB) {
		t.Errorf("a running process's database (%v) or another prefix's (%v) was dropped", exists(db, liveDB), exists(db, otherDB))
	}
}

// TestLocalServer: the sweep runs only against a server on this machine.
func TestLocalServer(t *testing.T) {
	t.Setenv("PGHOST", "db.internal")
	if localServer("postgres://postgres@/test") {
		t.Error("a URL without a host (PGHOST elsewhere): local")
	}
	t.Setenv("PGHOST", "")
	for dsn, want := range map[string]bool{
		"postgres://postgres@127.0.0.1:5432/test?sslmode=disable": true,
		"postgres://postgres@localhost/test":                      true,
		"postgres://postgres@[::1]:5432/test":                     true,
		"postgres:///test?host=/var/run/postgresql":               true,
		"postgres://postgres@db.internal:5432/test":               false,
		"postgres://postgres@10.0.0.7/test":                       false,
		"host=db.internal user=postgres dbname=test":              false,
		"host=10.0.0.7 dbname=test sslmode=disable":               false,
		"host=127.0.0.1 user=postgres dbname=test":                true,
		"postgres://postgres@127.0.0.1,db.internal/test":          false,
	} {
		if got := localServer(dsn); got != want {
			t.Errorf("%s: %v, want %v", dsn, got, want)
		}
	}
}
