package evaluate

import (
	"context"
	"fmt"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// rowsDB answers every statement "n:x" with the rows 0..n-1 (in descending order when x is
// "desc", shifted by one when "other"), so that result sets of any size are cheap to ask for.
type rowsDB struct{ execs int }

func (*rowsDB) Dialect() datasets.Dialect { return datasets.SQLite }
func (*rowsDB) Version() string           { return "rows 1" }
func (*rowsDB) Close() error              { return nil }
func (d *rowsDB) Exec(_ context.Context, sql string, _ sandbox.ExecOptions) (*sandbox.Result, error) {
	d.execs++
	var n int
	var how string
	if _, err := fmt.Sscanf(sql, "%d:%s", &n, &how); err != nil {
		return &sandbox.Result{Outcome: sandbox.OutcomeError, Error: err.Error()}, nil
	}
	r := &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"v"}, Total: n}
	for i := range n {
		v := i
		switch how {
		case "desc":
			v = n - 1 - i
		case "other":
			v = i + 1
		}
		r.Rows = append(r.Rows, []any{int64(v)})
	}
	return r, nil
}

type rowsOpener struct{ db *rowsDB }

func (o rowsOpener) Open(context.Context, datasets.Dialect, datasets.Task) (sandbox.DB, error) {
	return o.db, nil
}

// TestVoterBounded: the voter keeps a fixed-size fingerprint per sample, however large its
// result, and only the task in hand's; equal result sets (in any row order) still vote together.
func TestVoterBounded(t *testing.T) {
	db := &rowsDB{}
	v := newVoter(&Config{Opener: rowsOpener{db}, Dialect: datasets.SQLite})
	ctx := context.Background()
	const n = 200_000
	for task := range 3 {
		tk := datasets.Task{ID: fmt.Sprint(task), DBID: "db"}
		sqls := []string{fmt.Sprintf("%d:asc", n+task), fmt.Sprintf("%d:desc", n+task), fmt.Sprintf("%d:other", n+task), fmt.Sprintf("%d:asc", n+task)}
		per := make([]*Result, len(sqls))
		keys := make([]string, len(sqls))
		finals := map[string]string{}
		for i, s := range sqls {
			per[i] = &Result{ID: tk.ID, Sample: i, ExecOK: true, Outcome: "ok"}
			keys[i] = fmt.Sprint(task, "/", i)
			finals[keys[i]] = s
		}
		w, err := v.vote(ctx, tk, per, keys, finals)
		if err != nil {
			t.Fatal(err)
		}
		if w.Votes != 3 || w.Sample != 0 || w.Samples != 4 {
			t.Errorf("task %d: the winner is sample %d with %d of %d votes, want sample 0 with 3 of 4", task, w.Sample, w.Votes, w.Samples)
		}
		if len(v.cache) != 3 {
			t.Errorf("task %d: %d fingerprints kept, want the 3 distinct statements of this task", task, len(v.cache))
		}
		for s, fp := range v.cache {
			if len(fp) != 32 {
				t.Errorf("task %d: the fingerprint of %q is %d bytes, want 32", task, s, len(fp))
			}
		}
	}
	if db.execs != 9 {
		t.Errorf("%d executions, want 9 (the repeated statement of each task from the cache)", db.execs)
	}
}
