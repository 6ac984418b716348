package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/judge"
	"github.com/chainedsql/chainedsql/sandbox"
)

// testReader returns a reader name unique to this test run, dropped from dialect d's test
// server (through dsn) when the test ends.
func testReader(t *testing.T, d datasets.Dialect, dsn string) string {
	t.Helper()
	name := fmt.Sprintf("cs_rd_ld%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	t.Cleanup(func() {
		if err := sandbox.DropReader(context.Background(), d, dsn, name); err != nil {
			t.Errorf("drop reader %s: %v", name, err)
		}
	})
	return name
}

func TestLoadFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"load", "--dialect", "sqlite", "--dsn", "x"}, "want postgres or mysql"},
		{[]string{"load", "--dialect", "postgres"}, "--dsn is required"},
		{[]string{"load", "--dialect", "mysql", "--dsn", "x", "--tasks", "nosuch:x"}, `unknown task spec "nosuch:x"`},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q lacks %q", c.args, code, errb.String(), c.want)
		}
	}
}

// TestLoadSpiderIntoPostgres loads the databases of the first Spider dev tasks into a fresh
// PostgreSQL database, twice (the second run skips), and runs their gold SQL there through
// the Connector distill uses.
func TestLoadSpiderIntoPostgres(t *testing.T) {
	shared.SkipServers(t)
	dev := shared.Path(t, "data/spider/dev.json")
	admin, err := sql.Open("pgx", shared.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	name := fmt.Sprintf("cs_load_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database (is PostgreSQL running?): %v", err)
	}
	defer admin.Exec("DROP DATABASE " + name + " WITH (FORCE)")
	dsn := strings.Replace(shared.PostgresDSN(), "/test?", "/"+name+"?", 1)
	if dsn == shared.PostgresDSN() {
		t.Skipf("cannot derive a fresh-database DSN from %s", shared.PostgresDSN())
	}
	reader := testReader(t, datasets.Postgres, shared.PostgresDSN()) // dropped after the database
	args := []string{"load", "--tasks", "spider:" + dev, "--limit", "10", "--dialect", "postgres", "--dsn", dsn, "--reader", reader}
	var out, errb bytes.Buffer
	// Before the load, the run stops at once and says what to do.
	if code := run([]string{"--teachers", "oracle", "--tasks", "spider:" + dev, "--limit", "10", "--dialects", "postgres",
		"--pg-dsn", dsn, "--reader", reader, "--out", filepath.Join(t.TempDir(), "none"), "--progress", "off"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "distill load") || !strings.Contains(errb.String(), reader) || !strings.Contains(errb.String(), "nothing was run") {
		t.Errorf("no reader yet: exit %d: %s", code, errb.String())
	}
	errb.Reset()
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "concert_singer → postgres: 4 tables") || !strings.Contains(errb.String(), "reader "+reader+" created: may read the 1 loaded schema,") {
		t.Errorf("progress:\n%s", errb.String())
	}
	errb.Reset()
	if code := run(args, &out, &errb); code != 0 || !strings.Contains(errb.String(), "skipped") {
		t.Fatalf("second load: exit %d: %s", code, errb.String())
	}
	// The main job on the loaded copies: the oracle's gold SQL runs in PostgreSQL.
	out.Reset()
	errb.Reset()
	runDir := filepath.Join(t.TempDir(), "pg")
	if code := run([]string{"--teachers", "oracle", "--tasks", "spider:" + dev, "--limit", "10", "--dialects", "postgres",
		"--pg-dsn", dsn, "--reader", reader, "--out", runDir, "--progress", "off"}, &out, &errb); code != 0 {
		t.Fatalf("distill on postgres: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "10 done now") || !strings.Contains(out.String(), "postgres") || strings.Count(out.String(), "100.0%") != 3 {
		t.Errorf("summary:\n%s", out.String())
	}
	tasks, err := datasets.LoadTasks("spider:"+dev, "")
	if err != nil {
		t.Fatal(err)
	}
	c := &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: dsn}, Access: sandbox.Access{Reader: reader}}
	defer c.Close()
	for _, task := range tasks[:10] {
		pg, err := c.Open(context.Background(), datasets.Postgres, task)
		if err != nil {
			t.Fatal(err)
		}
		lite, err := c.Open(context.Background(), datasets.SQLite, task)
		if err != nil {
			t.Fatal(err)
		}
		gold, _ := task.GoldFor(datasets.SQLite)
		want, err1 := lite.Exec(context.Background(), gold, sandbox.ExecOptions{})
		got, err2 := pg.Exec(context.Background(), gold, sandbox.ExecOptions{})
		if err1 != nil || err2 != nil || !judge.Match(want, got, judge.HasOrderBy(gold)) {
			t.Errorf("%s: %s\nsqlite %+v\npostgres %+v %v %v", task.ID, gold, want, got, err1, err2)
		}
	}
}

// TestLoadIntoMySQL loads a Spider database under a db_id of its own (MySQL databases are
// server-wide) and runs the main job on it in MySQL.
func TestLoadIntoMySQL(t *testing.T) {
	shared.SkipServers(t)
	dev := shared.Path(t, "data/spider/dev.json")
	b, err := os.ReadFile(dev)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("cs_ld_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	var mine []map[string]any
	for _, r := range recs {
		if r["db_id"] == "concert_singer" {
			r["db_id"] = id
			mine = append(mine, r)
		}
	}
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join(filepath.Dir(dev), "database", "concert_singer", "concert_singer.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "database", id), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "database", id, id+".sqlite"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(mine)
	if err := os.WriteFile(filepath.Join(dir, "dev.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", shared.MySQLDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	defer func() {
		admin.Exec("DROP DATABASE IF EXISTS " + id)
		admin.Exec("DELETE FROM chainedsql_meta.copies WHERE target = ?", id)
	}()
	spec := "spider:" + filepath.Join(dir, "dev.json")
	reader := testReader(t, datasets.MySQL, shared.MySQLDSN())
	var out, errb bytes.Buffer
	if code := run([]string{"load", "--tasks", spec, "--dialect", "mysql", "--dsn", shared.MySQLDSN(), "--reader", reader}, &out, &errb); code != 0 {
		t.Fatalf("load: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), id+" → mysql: 4 tables") {
		t.Errorf("progress:\n%s", errb.String())
	}
	out.Reset()
	if code := run([]string{"--teachers", "oracle", "--tasks", spec, "--dialects", "mysql", "--mysql-dsn", shared.MySQLDSN(), "--reader", reader,
		"--out", filepath.Join(dir, "run"), "--progress", "off"}, &out, &errb); code != 0 {
		t.Fatalf("distill on mysql: exit %d: %s", code, errb.String())
	}
	if want := fmt.Sprintf("%d done now", len(mine)); !strings.Contains(out.String(), want) || strings.Count(out.String(), "100.0%") != 3 {
		t.Errorf("summary lacks %q or 100%% converged/exec-ok/correct:\n%s", want, out.String())
	}
	// Without the SQLite files (a db root that lacks them) a server run says that where their
	// SQLite gold fails on the server, those tasks are unjudged (no reference to judge against).
	errb.Reset()
	if code := run([]string{"--teachers", "oracle", "--tasks", spec, "--db-root", t.TempDir(), "--dialects", "mysql", "--mysql-dsn", shared.MySQLDSN(),
		"--reader", reader, "--limit", "2", "--out", filepath.Join(dir, "run2"), "--progress", "off"}, &out, &errb); code != 0 ||
		!strings.Contains(errb.String(), "WARNING: 2 of 2 tasks on mysql have SQLite gold only and no SQLite database here") {
		t.Errorf("a server run without the SQLite files: exit %d, stderr %q", code, errb.String())
	}
}
