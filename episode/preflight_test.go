package episode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

type countingOpener struct {
	opened map[string]int
	bad    string
	busy   int // the first busy opens of each database fail with sandbox.ErrBusy
}

func (o *countingOpener) Open(_ context.Context, d datasets.Dialect, t datasets.Task) (sandbox.DB, error) {
	o.opened[string(d)+"/"+t.DBID]++
	if o.opened[string(d)+"/"+t.DBID] <= o.busy {
		return nil, fmt.Errorf("open %s: %w: no file descriptor left", t.DBID, sandbox.ErrBusy)
	}
	if t.DBID == o.bad {
		return nil, errors.New("open " + t.DBID + ": no such database")
	}
	if t.DBID == "noreader" {
		return nil, fmt.Errorf("reader role %q does not exist: %w", "r", sandbox.ErrReader)
	}
	return nil, nil
}

func TestCheckDatabases(t *testing.T) {
	tasks := []datasets.Task{{ID: "a/0", DBID: "shop"}, {ID: "a/1", DBID: "shop"}, {ID: "a/2", DBID: "school"}}
	o := &countingOpener{opened: map[string]int{}}
	if err := CheckDatabases(context.Background(), o, tasks, []datasets.Dialect{datasets.SQLite, datasets.Postgres}); err != nil {
		t.Fatal(err)
	}
	if len(o.opened) != 4 || o.opened["sqlite/shop"] != 1 || o.opened["postgres/school"] != 1 {
		t.Fatalf("opened %v, want each (dialect, db) once", o.opened)
	}
	o = &countingOpener{opened: map[string]int{}, bad: "school"}
	err := CheckDatabases(context.Background(), o, tasks, []datasets.Dialect{datasets.MySQL})
	if err == nil || !strings.Contains(err.Error(), "mysql") || !strings.Contains(err.Error(), "open school: no such database") {
		t.Fatalf("err = %v, want the dialect and the opener's error", err)
	}
	err = CheckDatabases(context.Background(), o, []datasets.Task{{ID: "b/0", DBID: "noreader"}}, []datasets.Dialect{datasets.Postgres})
	if !errors.Is(err, sandbox.ErrReader) || !strings.Contains(err.Error(), "distill load --dialect postgres") || !strings.Contains(err.Error(), "nothing was run") {
		t.Fatalf("missing reader: %v", err)
	}
}

// TestPatientOpenerRetriesBusy: a Patient opener tries an open that fails with sandbox.ErrBusy
// (SQLite's first connection with no file descriptor left) again, as its databases' statements,
// instead of failing the task at once as the database lost; another error is returned at once.
func TestPatientOpenerRetriesBusy(t *testing.T) {
	o := &countingOpener{opened: map[string]int{}, bad: "school", busy: 1}
	p := Patient(o)
	if _, err := p.Open(context.Background(), datasets.SQLite, datasets.Task{ID: "a/0", DBID: "shop"}); err != nil || o.opened["sqlite/shop"] != 2 {
		t.Errorf("an open busy once: %v after %d tries; want it opened at the second", err, o.opened["sqlite/shop"])
	}
	o.busy = 0
	if _, err := p.Open(context.Background(), datasets.SQLite, datasets.Task{ID: "a/2", DBID: "school"}); err == nil || o.opened["sqlite/school"] != 1 {
		t.Errorf("a failed open: %v after %d tries; want its error at once", err, o.opened["sqlite/school"])
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o.busy = 10
	if _, err := p.Open(ctx, datasets.SQLite, datasets.Task{ID: "a/3", DBID: "zoo"}); !errors.Is(err, sandbox.ErrBusy) || o.opened["sqlite/zoo"] != 1 {
		t.Errorf("a busy open, context cancelled: %v after %d tries; want ErrBusy after one", err, o.opened["sqlite/zoo"])
	}
}
