package judge

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/sqlite"
)

// sqliteDB is a SQLite file of tb's own made by ddl, opened as the sandbox opens a task's.
func sqliteDB(tb testing.TB, ddl string) sandbox.DB {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "db.sqlite")
	raw, err := sql.Open("sqlite3", path)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := raw.Exec(ddl); err != nil {
		tb.Fatal(err)
	}
	raw.Close()
	db, err := sqlite.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// TestReference: a gold that fails on the prediction's database runs again on Reference and the
// verdict compares with that result (GoldOn says so), in every style; a gold that runs on the
// prediction's database never opens Reference; without Reference, where it does not open, or
// where the gold fails or runs out of time there too, the first failure is reported (the
// verdict is unjudged); where its execution slots are held or its open finds no file descriptor
// (sandbox.ErrBusy), Run fails with that error, the database's failure, and gives no verdict.
func TestReference(t *testing.T) {
	// The reference has the gold's table; the prediction's database only a copy under another name.
	ref := sqliteDB(t, `CREATE TABLE g (x INTEGER); INSERT INTO g VALUES (1), (2);`)
	db := sqliteDB(t, `CREATE TABLE h (x INTEGER); INSERT INTO h VALUES (1), (2); CREATE TABLE g2 (x INTEGER); INSERT INTO g2 VALUES (7);`)
	ctx := context.Background()
	opened := 0
	reference := func(context.Context) (sandbox.DB, error) { opened++; return ref, nil }
	for _, st := range []Style{StyleBIRD, StyleSpider, StyleSpiderStrict} {
		j := Judge{Style: st, Reference: reference}
		v, err := j.Run(ctx, db, "SELECT x FROM g", "SELECT x FROM h", nil, 0)
		if err != nil || !v.Correct || v.GoldOn != datasets.SQLite || v.GoldError != "" || v.Outcome != "ok" {
			t.Errorf("%s: the reference's answer: %+v, %v", st, v, err)
		}
		if v, err = j.Run(ctx, db, "SELECT x FROM g", "SELECT x FROM g2", nil, 0); err != nil || v.Correct || v.GoldOn != datasets.SQLite {
			t.Errorf("%s: another answer: %+v, %v", st, v, err)
		}
		opened = 0
		if v, err = j.Run(ctx, db, "SELECT x FROM h", "SELECT x FROM h", nil, 0); err != nil || !v.Correct || v.GoldOn != "" || opened != 0 {
			t.Errorf("%s: a gold that runs: %+v, %v, reference opened %d times", st, v, err, opened)
		}
		long := "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT count(*) FROM c, g"
		if v, err = j.Run(ctx, db, long, "SELECT x FROM h", nil, 300*time.Millisecond); err != nil || v.Correct || v.GoldOn != "" ||
			!strings.Contains(v.GoldError, "no such table: g") || v.Outcome != OutcomeGoldError {
			t.Errorf("%s: a gold that runs out of time on the reference: %+v, %v", st, v, err)
		}
		if v, err = j.Run(ctx, db, "SELECT x FROM nowhere", "SELECT x FROM h", nil, 0); err != nil || v.Correct || v.GoldOn != "" || v.GoldError == "" {
			t.Errorf("%s: a gold that fails on both: %+v, %v", st, v, err)
		}
		j.Reference = func(context.Context) (sandbox.DB, error) { return busyRefDB{ref}, nil }
		if v, err = j.Run(ctx, db, "SELECT x FROM g", "SELECT x FROM h", nil, 0); !errors.Is(err, sandbox.ErrBusy) || v.GoldError != "" || v.Correct {
			t.Errorf("%s: a reference whose slots are held: %+v, %v; want sandbox.ErrBusy", st, v, err)
		}
		j.Reference = func(context.Context) (sandbox.DB, error) {
			return nil, fmt.Errorf("open sqlite database ref: %w: no file descriptor left", sandbox.ErrBusy)
		}
		if v, err = j.Run(ctx, db, "SELECT x FROM g", "SELECT x FROM h", nil, 0); !errors.Is(err, sandbox.ErrBusy) || v.GoldError != "" || v.Correct {
			t.Errorf("%s: a reference whose open is busy: %+v, %v; want sandbox.ErrBusy", st, v, err)
		}
		j.Reference = func(context.Context) (sandbox.DB, error) { return nil, errors.New("no file") }
		if v, err = j.Run(ctx, db, "SELECT x FROM g", "SELECT x FROM h", nil, 0); err != nil || v.Correct || v.GoldOn != "" || !strings.Contains(v.GoldError, "no such table: g") {
			t.Errorf("%s: a reference that does not open: %+v, %v", st, v, err)
		}
		j.Reference = nil
		if v, err = j.Run(ctx, db, "SELECT x FROM g", "SELECT x FROM h", nil, 0); err != nil || v.Correct || v.GoldOn != "" || v.GoldError == "" {
			t.Errorf("%s: no reference: %+v, %v", st, v, err)
		}
	}
}

// timedDB is a DB whose statements holding a key of delay take that long first, or run out of
// their ExecOptions.Timeout doing so as an engine's deadline would stop them; those holding a
// key of fail then fail with that error. Every other statement runs on the DB.
type timedDB struct {
	sandbox.DB
	delay map[string]time.Duration
	fail  map[string]string
	ran   []string
}

func (d *timedDB) Exec(ctx context.Context, q string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	d.ran = append(d.ran, q)
	for k, wait := range d.delay {
		if !strings.Contains(q, k) {
			continue
		}
		if opts.Timeout > 0 && wait > opts.Timeout {
			time.Sleep(opts.Timeout)
			return &sandbox.Result{Outcome: sandbox.OutcomeTimeout, Error: "canceling statement due to statement timeout"}, nil
		}
		time.Sleep(wait)
	}
	for k, msg := range d.fail {
		if strings.Contains(q, k) {
			return &sandbox.Result{Outcome: sandbox.OutcomeError, Error: msg}, nil
		}
	}
	return d.DB.Exec(ctx, q, opts)
}

func (d *timedDB) Dialect() datasets.Dialect { return datasets.Postgres }

// TestGoldTimeout: a gold that runs out of time having had at least half the budget is the
// gold's failure, unjudged (it ran first, in the Spider styles; the prediction's result was
// reused, as in an episode; or the prediction was quick); one that runs past the little time a
// prediction executed before it left it is the pair's timeout, as BIRD's evaluation.py reports
// it. A gold that fails late on the server has, on its
// reference, the time it had there.
func TestGoldTimeout(t *testing.T) {
	base := sqliteDB(t, `CREATE TABLE g (x INTEGER); INSERT INTO g VALUES (1), (2);`)
	ctx := context.Background()
	const budget = 300 * time.Millisecond
	gold, pred := "SELECT x FROM g WHERE 'gold' = 'gold'", "SELECT x FROM g WHERE 'pred' = 'pred'"
	slowGold := &timedDB{DB: base, delay: map[string]time.Duration{"'gold'": time.Second}}

	// An episode's final SQL: its result is at hand, the gold has the whole budget.
	reused := &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"x"}, Rows: [][]any{{int64(1)}, {int64(2)}}, Total: 2}
	for _, st := range []Style{StyleBIRD, StyleSpider, StyleSpiderStrict} {
		v, err := Judge{Style: st}.Run(ctx, slowGold, gold, pred, reused, budget)
		if err != nil || v.Correct || v.Outcome != OutcomeGoldError || !strings.HasPrefix(v.GoldError, "timeout: ") {
			t.Errorf("%s, the prediction's result reused: a gold past the budget is unjudged: %+v, %v", st, v, err)
		}
	}
	// The Spider styles run the gold first: its timeout is its own, and the prediction does not run.
	slowGold.ran = nil
	v, err := Judge{Style: StyleSpider}.Run(ctx, slowGold, gold, pred, nil, budget)
	if err != nil || v.Outcome != OutcomeGoldError || !strings.HasPrefix(v.GoldError, "timeout: ") || len(slowGold.ran) != 1 {
		t.Errorf("spider: a gold past the budget: %+v, %v; ran %q", v, err, slowGold.ran)
	}
	// BIRD runs the prediction first: a quick one leaves the gold the budget's better part.
	quick := &timedDB{DB: base, delay: map[string]time.Duration{"'gold'": time.Second}}
	v, err = Judge{Style: StyleBIRD}.Run(ctx, quick, gold, pred, nil, budget)
	if err != nil || v.Outcome != OutcomeGoldError || !strings.HasPrefix(v.GoldError, "timeout: ") || len(quick.ran) != 2 {
		t.Errorf("bird: a gold past the budget after a quick prediction: %+v, %v; ran %q", v, err, quick.ran)
	}
	// A gold past what a slow one left it is the pair's timeout, judged.
	both := &timedDB{DB: base, delay: map[string]time.Duration{"'pred'": 200 * time.Millisecond, "'gold'": 200 * time.Millisecond}}
	v, err = Judge{Style: StyleBIRD}.Run(ctx, both, gold, pred, nil, budget)
	if err != nil || v.Correct || v.Outcome != "timeout" || v.GoldError != "" || !strings.Contains(v.Error, "the time the prediction left it") {
		t.Errorf("bird: a gold past the time the prediction left it: %+v, %v", v, err)
	}
	// A gold that errs on the server after 200 ms of 300 runs on its reference with those 300.
	late := &timedDB{DB: base, delay: map[string]time.Duration{"'gold'": 200 * time.Millisecond}, fail: map[string]string{"'gold'": "function ifnull(text, unknown) does not exist"}}
	ref := &timedDB{DB: base, delay: map[string]time.Duration{"'gold'": 200 * time.Millisecond}}
	j := Judge{Style: StyleBIRD, Reference: func(context.Context) (sandbox.DB, error) { return referenceDB{ref}, nil }}
	v, err = j.Run(ctx, late, gold, pred, reused, budget)
	if err != nil || !v.Correct || v.GoldOn != datasets.SQLite || v.GoldError != "" {
		t.Errorf("a gold that errs late on the server, judged on its reference: %+v, %v", v, err)
	}
	// Where it runs out of time on the reference too, the server's failure is the verdict's.
	ref.delay["'gold'"] = time.Second
	v, err = j.Run(ctx, late, gold, pred, reused, budget)
	if err != nil || v.Correct || v.GoldOn != "" || !strings.Contains(v.GoldError, "ifnull") || v.Outcome != OutcomeGoldError {
		t.Errorf("a gold that runs out of time on its reference: %+v, %v", v, err)
	}
}

// referenceDB is a timedDB that says it is SQLite, as a task's reference file is.
type referenceDB struct{ *timedDB }

func (referenceDB) Dialect() datasets.Dialect { return datasets.SQLite }

// TestPrefixReused: a reused result that kept only the prediction's first rows decides the
// verdict without running the prediction again where those rows (BIRD: one the gold lacks) or
// its row count (Spider: not the gold's) already tell the two apart, and the verdict is the one
// a full run gives (the outcome too, in these cases: a kept row's text that is not UTF-8
// included); where they cannot, the prediction runs again.
func TestPrefixReused(t *testing.T) {
	base := sqliteDB(t, `CREATE TABLE g (x INTEGER); INSERT INTO g VALUES (1), (2);
		CREATE TABLE big (x INTEGER); WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000) INSERT INTO big SELECT n FROM c;
		CREATE TABLE odd (x); INSERT INTO odd VALUES (CAST(X'ff41' AS TEXT)); INSERT INTO odd SELECT x FROM big;`)
	ctx := context.Background()
	rows := func(xs ...int64) [][]any {
		out := make([][]any, len(xs))
		for i, x := range xs {
			out[i] = []any{x}
		}
		return out
	}
	prefix := func(total int, xs ...int64) *sandbox.Result {
		return &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"x"}, Rows: rows(xs...), Total: total, Truncated: true}
	}
	const gold = "SELECT x FROM g"
	oddKept, err := base.Exec(ctx, "SELECT x FROM odd", sandbox.ExecOptions{MaxRows: 3})
	if err != nil || !oddKept.Truncated {
		t.Fatalf("odd: %+v, %v", oddKept, err)
	}
	for _, c := range []struct {
		name    string
		style   Style
		pred    string
		kept    *sandbox.Result
		correct bool
		reran   bool
	}{
		{"bird, a kept row the gold lacks", StyleBIRD, "SELECT x FROM big", prefix(1000, 1, 2, 3), false, false},
		{"bird, kept rows all the gold's", StyleBIRD, "SELECT x FROM g UNION ALL SELECT x FROM g", prefix(4, 1, 2), true, true},
		{"spider, another row count", StyleSpider, "SELECT x FROM big", prefix(1000, 1, 2), false, false},
		{"spider, the gold's row count", StyleSpider, "SELECT x FROM g ORDER BY x DESC", prefix(2, 2), true, true},
		{"spider-strict, another row count", StyleSpiderStrict, "SELECT x FROM big", prefix(1000, 1), false, false},
		// BIRD's evaluator fails on text that is not UTF-8 (on SQLite): an error, as in a full run
		{"bird, a kept row not UTF-8", StyleBIRD, "SELECT x FROM odd", oddKept, false, false},
	} {
		for _, d := range []string{"sqlite", "server"} {
			counted := &timedDB{DB: base}
			var db sandbox.DB = counted
			if d == "sqlite" {
				db = referenceDB{counted}
			}
			v, err := Judge{Style: c.style}.Run(ctx, db, gold, c.pred, c.kept, 0)
			reran := false
			for _, q := range counted.ran {
				reran = reran || strings.Contains(q, c.pred)
			}
			full, ferr := Judge{Style: c.style}.Run(ctx, db, gold, c.pred, nil, 0)
			if err != nil || ferr != nil || v.Correct != c.correct || reran != c.reran || v.Correct != full.Correct || v.Outcome != full.Outcome {
				t.Errorf("%s on %s: %+v, %v; ran the prediction again %v, want %v; a full run gives %+v", c.name, d, v, err, reran, c.reran, full)
			}
		}
	}
}

// busyRefDB is a reference whose execution slots are held by statements past their deadlines.
type busyRefDB struct{ sandbox.DB }

func (busyRefDB) Exec(context.Context, string, sandbox.ExecOptions) (*sandbox.Result, error) {
	return nil, fmt.Errorf("sqlite exec: %w: statements still running past their deadline hold the SQLite slots", sandbox.ErrBusy)
}

// slotsHeldDB is a server's database whose first busy executions wait their whole time limit
// for a slot and fail with ErrBusy, as PostgreSQL's and MySQL's do while runaways hold them.
type slotsHeldDB struct {
	sandbox.DB
	busy int // executions still to fail
}

func (b *slotsHeldDB) Exec(ctx context.Context, q string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	if b.busy > 0 {
		b.busy--
		time.Sleep(opts.Timeout)
		return nil, fmt.Errorf("postgres exec: %w: no execution slot free within %s", sandbox.ErrBusy, opts.Timeout)
	}
	return b.DB.Exec(ctx, q, opts)
}

// TestPatientPair: on a Patient database whose slots are held at first, a correct prediction is
// judged correct, in both orders of execution: the pair is tried again whole, not its first
// statement alone within the pair's budget (which left its second statement no time: a
// timeout, judged wrong).
func TestPatientPair(t *testing.T) {
	base := sqliteDB(t, "CREATE TABLE t (name TEXT); INSERT INTO t VALUES ('a'), ('b');")
	for _, style := range []Style{StyleBIRD, StyleSpider} {
		db := sandbox.Patient(&slotsHeldDB{DB: base, busy: 1}, 30*time.Second)
		v, err := Judge{Style: style}.Run(context.Background(), db, "SELECT name FROM t", "SELECT name FROM t", nil, 300*time.Millisecond)
		if err != nil || !v.Correct || v.Outcome != "ok" {
			t.Errorf("%s: %+v, %v; want correct", style, v, err)
		}
	}
}
