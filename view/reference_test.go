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
// SQLite file, the reference the judge used, with a note saying the row was judged against it;
// the final SQL (the oracle's, the same statement) shows PostgreSQL's error. A row distilled
// without the file is unjudged, and the note says so.
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
		len(rr.Notes) != 1 || !strings.Contains(rr.Notes[0], "reference; the row was judged against it") {
		t.Errorf("final %+v\ngold %+v\nnotes %q", rr.Final, rr.Gold, rr.Notes)
	}

	// Distilled where the SQLite file was missing, the row is unjudged: the viewer, which has
	// the file, shows its answer and says the row was judged without it.
	missing := task
	missing.DBPath = filepath.Join(dir, "gone", "shop.sqlite")
	run = filepath.Join(t.TempDir(), "run")
	if _, err := distill.Run(ctx, distill.RunConfig{Dir: run, Tasks: []datasets.Task{missing}, TaskSpec: "test", Dialects: []datasets.Dialect{datasets.Postgres},
		Policies: []*episode.PolicyHandle{{Name: "oracle", Spec: "oracle", Model: "oracle", Policy: episode.Oracle{}}},
		Opener:   conn, Toolkit: "test"}); err != nil {
		t.Fatal(err)
	}
	s = openServer(t, nil, run)
	s.SetExecutor(Executor{Tasks: []datasets.Task{task}, Opener: conn, Dialects: []datasets.Dialect{datasets.Postgres}})
	rr = RowResults{}
	if code := get(t, s.Handler(), "/api/results?id=0", &rr); code != 200 {
		t.Fatalf("results: %d", code)
	}
	if rr.Gold.Outcome != "ok" || len(rr.Notes) != 1 || !strings.Contains(rr.Notes[0], "the row was left unjudged") || !strings.Contains(rr.Notes[0], "ifnull") {
		t.Errorf("unjudged row: gold %+v\nnotes %q", rr.Gold, rr.Notes)
	}
}
