package view

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/pgtest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
)

// TestResultsReferencePostgres: a PostgreSQL row of a task with SQLite gold only that fails
// there (ifnull is SQLite's) shows, as the gold's result, the gold's answer on the task's
// SQLite file, the reference the judge used, with a note; the final SQL (the oracle's, the same
// statement) shows PostgreSQL's error.
func TestResultsReferencePostgres(t *testing.T) {
	shared.SkipServers(t)
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "shop", "shop.sqlite")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	lite, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lite.Exec(`CREATE TABLE customer (id INTEGER PRIMARY KEY, city TEXT); INSERT INTO customer VALUES (7, 'Pune'), (8, 'Oslo');`)
	lite.Close()
	if err != nil {
		t.Fatal(err)
	}
	name, reader := pgtest.Copy(t, path, "cs_vr")
	task := datasets.Task{ID: "shop/0", DBID: name, Question: "Which city does customer 7 live in?", Source: "test", DBPath: path,
		Gold: map[datasets.Dialect]string{datasets.SQLite: "SELECT ifnull(city, '?') FROM customer WHERE id = 7"}}
	conn := &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.Postgres: shared.PostgresDSN()}, Access: sandbox.Access{Reader: reader}}
	defer conn.Close()
	run := filepath.Join(t.TempDir(), "run")
	if _, err := distill.Run(ctx, distill.RunConfig{Dir: run, Tasks: []datasets.Task{task}, TaskSpec: "test", Dialects: []datasets.Dialect{datasets.Postgres},
		Policies: []*episode.PolicyHandle{{Name: "oracle", Spec: "oracle", Model: "oracle", Policy: episode.Oracle{}}},
		Opener:   conn, Toolkit: "test"}); err != nil {
		t.Fatal(err)
	}
	s := openServer(t, nil, run)
	s.SetExecutor(Executor{Tasks: []datasets.Task{task}, Opener: conn, Dialects: []datasets.Dialect{datasets.Postgres}})
	var rr RowResults
	if code := get(t, s.Handler(), "/api/results?id=0", &rr); code != 200 {
		t.Fatalf("results: %d", code)
	}
	if rr.Final.Outcome != "error" || rr.Gold.Outcome != "ok" || rr.Gold.Total != 1 || !strings.HasPrefix(rr.Gold.Engine, "SQLite") ||
		len(rr.Notes) != 1 || !strings.Contains(rr.Notes[0], "reference") {
		t.Errorf("final %+v\ngold %+v\nnotes %q", rr.Final, rr.Gold, rr.Notes)
	}
}
