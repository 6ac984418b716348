package fakedb_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/fakedb"
)

// The one line that adds FakeDB to the toolkit, as sandbox/engines adds the bundled engines.
func init() { sandbox.Register(fakedb.Dialect{}) }

// TestRunnerOpensNewDialect: a dialect that is one package and one registration line is loaded
// into by distill load's copier (sandbox.CopySQLite through its Loader) and run by the runner
// (distill.Run) through its opener, a sandbox.Connector given the dialect's DSN: every oracle
// episode gets a system prompt naming FakeDB with the schema FakeDB's catalog gave, executes
// its SQL there, converges and is judged correct; FakeDB's own screen rule refuses, and the
// runner's checks know the dialect's name.
func TestRunnerOpensNewDialect(t *testing.T) {
	ctx := context.Background()
	server := t.TempDir()
	src := filepath.Join(t.TempDir(), "shop.sqlite")
	raw, err := sql.Open("sqlite3", src)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL)",
		"INSERT INTO items VALUES (1, 'pen', 1.5), (2, 'book', 12), (3, 'lamp\tshade', 30.25)",
	} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	raw.Close()
	st, err := sandbox.CopySQLite(ctx, src, fakedb.Name, server, "shop")
	if err != nil || st.Tables != 1 || st.Rows != 3 || !slices.Contains(st.Notes, "items.name: tabs replaced in 1 values (FakeDB)") {
		t.Fatalf("copy into FakeDB: %+v %v", st, err)
	}
	if again, err := sandbox.CopySQLite(ctx, src, fakedb.Name, server, "shop"); err != nil || !again.Skipped {
		t.Errorf("a completed copy is skipped: %+v %v", again, err)
	}
	tasks := []datasets.Task{
		{ID: "q1", DBID: "shop", Question: "How many items are there?", Gold: map[datasets.Dialect]string{fakedb.Name: "SELECT count(*) FROM items"}},
		{ID: "q2", DBID: "shop", Question: "Which items cost more than 10?", Gold: map[datasets.Dialect]string{fakedb.Name: "SELECT name FROM items WHERE price > 10 ORDER BY name"}},
	}
	conn := &sandbox.Connector{DSN: map[datasets.Dialect]string{fakedb.Name: server}}
	defer conn.Close()
	dir := t.TempDir()
	res, err := distill.Run(ctx, distill.RunConfig{Dir: dir, Tasks: tasks, TaskSpec: "test:fakedb",
		Dialects: []datasets.Dialect{fakedb.Name}, Policies: []*episode.PolicyHandle{{Name: "oracle", Spec: "oracle", Policy: episode.Oracle{}}},
		Opener: conn})
	if err != nil {
		t.Fatal(err)
	}
	if res.Done != len(tasks) || res.Failed != 0 {
		t.Fatalf("%d done, %d failed, want %d done", res.Done, res.Failed, len(tasks))
	}
	n := 0
	err = rundir.ReadRun(dir, func(tr *rundir.Trajectory) error {
		n++
		sys := tr.Conversation()[0].Content
		if tr.Dialect != fakedb.Name || !strings.Contains(sys, "FakeDB") || !strings.Contains(sys, "CREATE TABLE items") || !strings.Contains(sys, "price REAL") {
			t.Errorf("%s: dialect %s, system prompt:\n%s", tr.Key, tr.Dialect, sys)
		}
		if !tr.Correct || !tr.Repeated || !tr.ExecOK {
			t.Errorf("%s: correct %v converged %v exec_ok %v, final %q", tr.Key, tr.Correct, tr.Repeated, tr.ExecOK, tr.FinalSQL)
		}
		return nil
	})
	if err != nil || n != len(tasks) {
		t.Fatalf("%d trajectories, %v", n, err)
	}
	db, err := conn.Open(ctx, fakedb.Name, tasks[0])
	if err != nil {
		t.Fatal(err)
	}
	if r, err := db.Exec(ctx, "SELECT fakesecret FROM items", sandbox.ExecOptions{}); err != nil || r.Outcome != sandbox.OutcomeRefused {
		t.Errorf("FakeDB's screen rule: %+v %v", r, err)
	}
	if protocol.EngineName(fakedb.Name) != "FakeDB" {
		t.Errorf("engine name %q", protocol.EngineName(fakedb.Name))
	}
	if _, err := (&sandbox.Connector{}).Open(ctx, fakedb.Name, tasks[0]); err == nil || !strings.Contains(err.Error(), "no fakedb DSN") {
		t.Errorf("open without a DSN: %v", err)
	}
}
