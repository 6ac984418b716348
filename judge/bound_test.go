package judge

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	_ "github.com/chainedsql/chainedsql/sandbox/engines" // the servers' dialects
)

// viewDB is a database seen as dialect d (a SQLite file seen as a server's: Match's value model,
// no SQLite reading rules), counting the filtered executions and those that left rows out
// (skipped or stopped on), and keeping the last one's row count and rows kept.
type viewDB struct {
	sandbox.DB
	d           datasets.Dialect
	filtered    int
	left        int
	total, kept int
}

func (v *viewDB) Dialect() datasets.Dialect { return v.d }

func (v *viewDB) Exec(ctx context.Context, q string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	res, err := v.DB.Exec(ctx, q, opts)
	if err == nil && opts.Filter != nil {
		v.filtered++
		v.total, v.kept = res.Total, len(res.Rows)
		if res.Truncated {
			v.left++
		}
	}
	return res, err
}

// valuesSQL is a statement returning rows (SQL literals, n columns each) in their order: with
// ORDER BY over their positions when ordered.
func valuesSQL(rows [][]string, n int, ordered bool) string {
	cols := make([]string, n)
	for i := range cols {
		cols[i] = fmt.Sprintf("column%d", i+2)
	}
	if len(rows) == 0 {
		return fmt.Sprintf("SELECT %s FROM (VALUES (0%s)) WHERE 0", strings.Join(cols, ", "), strings.Repeat(", 0", n))
	}
	vals := make([]string, len(rows))
	for i, r := range rows {
		vals[i] = fmt.Sprintf("(%d, %s)", i, strings.Join(r, ", "))
	}
	q := fmt.Sprintf("SELECT %s FROM (VALUES %s)", strings.Join(cols, ", "), strings.Join(vals, ", "))
	if ordered {
		q += " ORDER BY column1"
	}
	return q
}

// TestBoundedVerdicts: judging with what the keeper keeps of the prediction's result (BIRD: its
// distinct rows, stopping at one the gold lacks where the gold is known first; Spider: stopping
// past the gold's row count) gives the verdict of the full comparison (equal over the whole
// result, as exec reads it keeping everything), on random small results: duplicate rows, NULLs,
// ints and equal floats, text that reads as a number, permuted columns, rows dropped, added,
// changed and reordered. In every style, on SQLite's value model and on the servers' (the file
// seen as a server's), with the prediction run afresh, its whole result reused, and through a
// reused prefix of its rows (the episode's path, where the gold runs first).
func TestBoundedVerdicts(t *testing.T) {
	base := sqliteDB(t, "CREATE TABLE unused (x)")
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 17))
	vals := []string{"1", "1.0", "2", "2.5", "NULL", "'a'", "'1'", "X'61'"}
	cell := func() string { return vals[rng.IntN(len(vals))] }
	views := []*viewDB{{DB: base, d: datasets.SQLite}, {DB: base, d: datasets.Postgres}}
	type count struct{ correct, wrong, prefixes int }
	counts := map[Style]*count{}
	for _, st := range Styles {
		counts[st] = &count{}
	}
	for iter := 0; iter < 250; iter++ {
		n := 1 + rng.IntN(3)
		gold := make([][]string, rng.IntN(6))
		for r := range gold {
			gold[r] = make([]string, n)
			for c := range gold[r] {
				gold[r][c] = vals[rng.IntN(3+rng.IntN(len(vals)-2))] // repeated values more often
			}
		}
		// The prediction: the gold's rows, sometimes reordered, some dropped, duplicated, added
		// or changed, its columns sometimes permuted, 1 sometimes written 1.0.
		var pred [][]string
		order := rng.Perm(len(gold))
		if rng.IntN(2) == 0 {
			for i := range order {
				order[i] = i
			}
		}
		mutate := rng.IntN(2) == 0
		for _, i := range order {
			if !mutate || rng.IntN(5) != 0 {
				pred = append(pred, append([]string(nil), gold[i]...))
			}
		}
		if mutate {
			for k := rng.IntN(4); k > 0 && len(gold) > 0; k-- {
				pred = append(pred, append([]string(nil), gold[rng.IntN(len(gold))]...))
			}
			if rng.IntN(3) == 0 {
				extra := make([]string, n)
				for c := range extra {
					extra[c] = cell()
				}
				pred = append(pred, extra)
			}
			if rng.IntN(3) == 0 && len(pred) > 0 {
				pred[rng.IntN(len(pred))][rng.IntN(n)] = cell()
			}
		}
		if rng.IntN(3) == 0 {
			perm := rng.Perm(n)
			for r, row := range pred {
				p := make([]string, n)
				for c := range perm {
					p[c] = row[perm[c]]
				}
				pred[r] = p
			}
		}
		for _, row := range pred {
			for c := range row {
				if row[c] == "1" && rng.IntN(3) == 0 {
					row[c] = "1.0"
				}
			}
		}
		ordered := rng.IntN(3) == 0
		goldSQL, predSQL := valuesSQL(gold, n, ordered), valuesSQL(pred, n, ordered && rng.IntN(4) != 0)
		for _, st := range Styles {
			j := Judge{Style: st}
			for _, db := range views {
				g, p, ord, _ := j.Prepare(goldSQL, predSQL)
				gres, gerr := j.exec(ctx, db, g, nil, 10*time.Second, nil, nil)
				pres, perr := j.exec(ctx, db, p, nil, 10*time.Second, nil, nil)
				if gerr != nil || perr != nil || !gres.OK() || !pres.OK() {
					t.Fatalf("%s / %s: %+v %v; %+v %v", goldSQL, predSQL, gres, gerr, pres, perr)
				}
				want := j.equal(db.Dialect(), gres.Rows, pres.Rows, ord)
				v, err := j.Run(ctx, db, goldSQL, predSQL, nil, 0)
				if err != nil || v.Outcome != "ok" || v.Correct != want {
					t.Fatalf("%s on %s, gold %s, prediction %s: %+v, %v; the full comparison gives %v", st, db.d, goldSQL, predSQL, v, err, want)
				}
				if want {
					counts[st].correct++
				} else {
					counts[st].wrong++
				}
				whole, err := db.DB.Exec(ctx, predSQL, sandbox.ExecOptions{})
				if err != nil || !whole.OK() {
					t.Fatalf("%s: %+v, %v", predSQL, whole, err)
				}
				if v, err := j.Run(ctx, db, goldSQL, predSQL, whole, 0); err != nil || v.Outcome != "ok" || v.Correct != want {
					t.Fatalf("%s on %s, gold %s, prediction %s with its whole result reused: %+v, %v; the full comparison gives %v", st, db.d, goldSQL, predSQL, v, err, want)
				}
				kept, err := db.DB.Exec(ctx, predSQL, sandbox.ExecOptions{MaxRows: 1 + rng.IntN(2)})
				if err != nil || !kept.Truncated {
					continue
				}
				counts[st].prefixes++
				if v, err := j.Run(ctx, db, goldSQL, predSQL, kept, 0); err != nil || v.Outcome != "ok" || v.Correct != want {
					t.Fatalf("%s on %s, gold %s, prediction %s with its first %d rows kept: %+v, %v; the full comparison gives %v", st, db.d, goldSQL, predSQL, len(kept.Rows), v, err, want)
				}
			}
		}
	}
	for st, c := range counts {
		t.Logf("%s: %d correct, %d wrong, %d judged again through a reused prefix", st, c.correct, c.wrong, c.prefixes)
		if c.correct < 100 || c.wrong < 100 || c.prefixes < 100 {
			t.Errorf("%s: %+v: the cases do not exercise both verdicts and the reused prefix", st, *c)
		}
	}
	for _, db := range views {
		t.Logf("%s: %d of %d filtered executions left rows out", db.d, db.left, db.filtered)
		if db.left < 200 {
			t.Errorf("%s: %d of %d filtered executions left rows out: the keeper's skips and stops are not exercised", db.d, db.left, db.filtered)
		}
	}
}

// TestBoundedStoredValues: on SQLite, in columns whose declared type go-sqlite3 converts by
// (DATETIME text into one time, BOOLEAN integers into true) and the engine returns as stored,
// the keeper's distinct rows give the verdict and outcome of the full comparison: rows the
// driver would read alike but stored apart count apart, a stored row the gold holds does not
// stop the stream, and a BOOLEAN 5 skipped or kept stays 5. Text that is not UTF-8 fails BIRD's
// reading whether its row was kept, skipped as a duplicate or stopped on.
func TestBoundedStoredValues(t *testing.T) {
	db := sqliteDB(t, `CREATE TABLE d (x DATETIME); INSERT INTO d VALUES ('2009-01-01'), ('2009-01-01 00:00:00'), ('2009-01-01');
		CREATE TABLE dn (o INTEGER, x DATETIME); INSERT INTO dn VALUES (1, NULL), (2, '2009-01-01 00:00:00');
		CREATE TABLE b (x BOOLEAN); INSERT INTO b VALUES (5);
		CREATE TABLE odd (o INTEGER, s TEXT); INSERT INTO odd VALUES (1, 'a'), (2, CAST(X'61FF62' AS TEXT)), (3, CAST(X'61FF62' AS TEXT)), (4, 'c');`)
	ctx := context.Background()
	for _, c := range []struct {
		name, gold, pred string
		kept             int // > 0: the prediction's first rows reused, as an episode's step kept them; -1: its whole result
		correct          bool
		outcome          string
	}{
		{"times stored apart", "SELECT '2009-01-01' UNION SELECT '2009-01-01 00:00:00'", "SELECT x FROM d", 0, true, "ok"},
		{"times stored apart, one missing", "SELECT '2009-01-01'", "SELECT x FROM d", 0, false, "ok"},
		{"times stored apart, the whole result reused", "SELECT '2009-01-01' UNION SELECT '2009-01-01 00:00:00'", "SELECT x FROM d", -1, true, "ok"},
		{"a stored time the gold holds, the driver's time not", "SELECT NULL UNION SELECT '2009-01-01 00:00:00'", "SELECT x FROM dn ORDER BY o", 1, true, "ok"},
		{"a stored BOOLEAN 5", "SELECT 1 UNION SELECT 5", "SELECT x FROM b UNION ALL SELECT 1.0 ORDER BY 1", 0, true, "ok"},
		{"text not UTF-8, twice", "SELECT 'a'", "SELECT s FROM odd WHERE o IN (2, 3)", 0, false, "error"},
		{"text not UTF-8 on the row stopped on", "SELECT 'a' UNION SELECT 'c'", "SELECT s FROM odd ORDER BY o", 1, false, "error"},
	} {
		for _, st := range Styles {
			j := Judge{Style: st}
			var prefix *sandbox.Result
			if c.kept != 0 {
				var err error
				if prefix, err = db.Exec(ctx, c.pred, sandbox.ExecOptions{MaxRows: max(c.kept, 0)}); err != nil || prefix.Truncated != (c.kept > 0) {
					t.Fatalf("%s: the kept rows: %+v, %v", c.name, prefix, err)
				}
			}
			v, err := j.Run(ctx, db, c.gold, c.pred, prefix, 0)
			g, p, ord, _ := j.Prepare(c.gold, c.pred)
			gres, _ := j.exec(ctx, db, g, nil, 10*time.Second, nil, nil)
			pres, _ := j.exec(ctx, db, p, nil, 10*time.Second, nil, nil)
			want, outcome := false, string(pres.Outcome)
			if pres.OK() {
				want = j.equal(db.Dialect(), gres.Rows, pres.Rows, ord)
			}
			if err != nil || v.Correct != want || v.Outcome != outcome {
				t.Errorf("%s, %s: %+v, %v; the full comparison gives %v (%s)", c.name, st, v, err, want, outcome)
			}
			if st == StyleBIRD && (v.Correct != c.correct || v.Outcome != c.outcome) {
				t.Errorf("%s, bird: %v (%s), want %v (%s) as BIRD's evaluator: %s", c.name, v.Correct, v.Outcome, c.correct, c.outcome, v.Error)
			}
		}
	}
}

// forgottenJoinRows is how many rows the forgotten join returns: a few million copies of one.
const forgottenJoinRows = 2_000_000

// forgottenJoin opens a database of dialect d holding t (ten names by id) and u (n: 1 to
// forgottenJoinRows), made for the test and dropped after it. It skips the servers without them.
func forgottenJoin(t *testing.T, d datasets.Dialect) sandbox.DB {
	t.Helper()
	const names = "INSERT INTO t VALUES (1, 'Ann'), (2, 'Bob'), (3, 'Cy'), (4, 'Dee'), (5, 'Alice'), (6, 'Eve'), (7, 'Fay'), (8, 'Gus'), (9, 'Hal'), (10, 'Ida')"
	if d == datasets.SQLite {
		return sqliteDB(t, fmt.Sprintf(`CREATE TABLE t (id INTEGER, name TEXT); %s;
			CREATE TABLE u (n INTEGER); WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < %d) INSERT INTO u SELECT n FROM c;`, names, forgottenJoinRows))
	}
	shared.SkipServers(t)
	name := fmt.Sprintf("cs_judgemem_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	driver, dsn, setup, drop := "pgx", shared.PostgresDSN(), []string{
		"CREATE SCHEMA " + name,
		"CREATE TABLE " + name + ".t (id integer, name text)",
		strings.Replace(names, "INTO t", "INTO "+name+".t", 1),
		fmt.Sprintf("CREATE TABLE %s.u AS SELECT generate_series(1, %d) AS n", name, forgottenJoinRows),
	}, "DROP SCHEMA "+name+" CASCADE"
	if d == datasets.MySQL {
		driver, dsn, setup, drop = "mysql", shared.MySQLDSN(), []string{
			"CREATE DATABASE " + name,
			"CREATE TABLE " + name + ".t (id INT, name TEXT)",
			strings.Replace(names, "INTO t", "INTO "+name+".t", 1),
			fmt.Sprintf("CREATE TABLE %s.u AS SELECT seq AS n FROM %s.seq_1_to_%d", name, name, forgottenJoinRows),
		}, "DROP DATABASE "+name
	}
	admin, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	t.Cleanup(func() {
		if _, err := admin.Exec(drop); err != nil {
			t.Errorf("%s: %v", drop, err)
		}
	})
	for _, s := range setup {
		if _, err := admin.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return serverDB(t, d, name)
}

// peakHeap runs f and returns the most heap in use, above what was in use before it, seen while
// it ran (sampled every millisecond).
func peakHeap(f func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(stop)
	<-done
	return peak - base
}

// TestForgottenJoinBounded: a prediction that forgets a join condition returns the gold's one
// row two million times. BIRD judges it correct (the same set) holding its one distinct row, not
// two million, run afresh (student score) and through a reused prefix of its rows (an episode's
// end, where the gold runs first); the Spider styles judge it wrong holding the gold's one row
// and the next, then stop. On SQLite, PostgreSQL and MariaDB, peak heap stays under 32 MiB
// above what was in use before (holding every row, as the judge did before it kept only what
// the verdict needs, took 190 to 300 MiB).
func TestForgottenJoinBounded(t *testing.T) {
	if raceEnabled {
		t.Skip("two million rows under the race detector take minutes (see raceEnabled)")
	}
	const gold, pred = "SELECT name FROM t WHERE id = 5", "SELECT t.name FROM t, u WHERE t.id = 5"
	const bound = 32 << 20
	for _, d := range []datasets.Dialect{datasets.SQLite, datasets.Postgres, datasets.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			db := &viewDB{DB: forgottenJoin(t, d), d: d}
			ctx := context.Background()
			kept, err := db.Exec(ctx, pred, sandbox.ExecOptions{MaxRows: 20, Timeout: time.Minute})
			if err != nil || !kept.OK() || kept.Total != forgottenJoinRows {
				t.Fatalf("the prediction's first rows: %+v, %v", kept, err)
			}
			for _, c := range []struct {
				style   Style
				kept    *sandbox.Result
				correct bool
			}{{StyleBIRD, nil, true}, {StyleBIRD, kept, true}, {StyleSpider, nil, false}} {
				var v Verdict
				var err error
				start := time.Now()
				peak := peakHeap(func() { v, err = Judge{Style: c.style}.Run(ctx, db, gold, pred, c.kept, time.Minute) })
				t.Logf("%s, %s, prefix reused %v: %v (%s) in %s, peak heap in use %.1f MiB above the start; the prediction counted %d rows, kept %d",
					d, c.style, c.kept != nil, v.Correct, v.Outcome, time.Since(start).Round(time.Millisecond), float64(peak)/(1<<20), db.total, db.kept)
				if err != nil || v.Outcome != "ok" || v.Correct != c.correct {
					t.Errorf("%s, prefix reused %v: %+v, %v; want correct %v", c.style, c.kept != nil, v, err, c.correct)
				}
				if peak > bound {
					t.Errorf("%s, prefix reused %v: peak heap in use %.1f MiB above the start, want under %d", c.style, c.kept != nil, float64(peak)/(1<<20), bound>>20)
				}
				if c.style != StyleBIRD && db.total != 2 {
					t.Errorf("%s: the prediction's run read %d rows; want 2, the gold's one and the next", c.style, db.total)
				}
			}
		})
	}
}

// TestStopsEarly: where the gold's result is known before the prediction runs, the prediction's
// stream stops at the row that tells them apart, judged wrong with the outcome "ok": in the
// Spider styles the row past the gold's count (a prediction counting for ever, which a full run
// takes to the size limit or the time limit), in BIRD, through a reused prefix, the first row
// the gold lacks.
func TestStopsEarly(t *testing.T) {
	db := &viewDB{DB: sqliteDB(t, "CREATE TABLE unused (x)"), d: datasets.SQLite}
	ctx := context.Background()
	const gold = "SELECT 1 UNION ALL SELECT 2"
	const forever = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT n FROM c"
	const counting = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 3000000) SELECT n FROM c"
	kept := &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"n"}, Rows: [][]any{{int64(1)}, {int64(2)}}, Total: 3000000, Truncated: true}
	for _, c := range []struct {
		style Style
		pred  string
		kept  *sandbox.Result
	}{{StyleSpider, forever, nil}, {StyleSpiderStrict, forever, nil}, {StyleBIRD, counting, kept}} {
		db.total = 0
		start := time.Now()
		v, err := Judge{Style: c.style}.Run(ctx, db, gold, c.pred, c.kept, 20*time.Second)
		took := time.Since(start)
		if err != nil || v.Correct || v.Outcome != "ok" || db.total != 3 || took > 2*time.Second {
			t.Errorf("%s: %+v, %v in %s; the prediction's run read %d rows, want 3 (the gold's two and the next) within 2 s", c.style, v, err, took, db.total)
		}
	}
}
