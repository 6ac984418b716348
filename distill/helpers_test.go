package distill_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/judge"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
)

// testDB is a read-only SQLite sandbox.DB for these tests, used where the datasets execution
// layer is not available. It normalises values like the contract says (int64, float64, string,
// []byte, nil) and counts rows past MaxRows.
type testDB struct {
	db      *sql.DB
	version string
}

func openTestDB(tb testing.TB, path string) *testDB {
	tb.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&immutable=1")
	if err != nil {
		tb.Fatal(err)
	}
	var v string
	if err := db.QueryRow("select sqlite_version()").Scan(&v); err != nil {
		tb.Fatalf("open %s: %v", path, err)
	}
	tb.Cleanup(func() { db.Close() })
	return &testDB{db: db, version: "SQLite " + v}
}

func (d *testDB) Dialect() datasets.Dialect { return datasets.SQLite }
func (d *testDB) Version() string           { return d.version }
func (d *testDB) Close() error              { return nil }

func (d *testDB) Exec(ctx context.Context, q string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	start := time.Now()
	low := strings.ToLower(strings.TrimSpace(q))
	if !strings.HasPrefix(low, "select") && !strings.HasPrefix(low, "with") {
		return &sandbox.Result{Outcome: sandbox.OutcomeRefused, Error: "only SELECT statements are allowed"}, nil
	}
	if opts.Timeout == 0 {
		opts.Timeout = 30 * time.Second
	}
	qctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	res, err := sandbox.Collect(qctx, d.db, q, opts, nil, nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if qctx.Err() != nil {
			return &sandbox.Result{Outcome: sandbox.OutcomeTimeout, Duration: time.Since(start)}, nil
		}
		return &sandbox.Result{Outcome: sandbox.OutcomeError, Error: err.Error(), Duration: time.Since(start)}, nil
	}
	res.Duration = time.Since(start)
	return res, nil
}

// testOpener opens each task's SQLite file once.
type testOpener struct {
	tb testing.TB
	mu sync.Mutex
	m  map[string]*testDB
}

func (o *testOpener) Open(ctx context.Context, d datasets.Dialect, t datasets.Task) (sandbox.DB, error) {
	if d != datasets.SQLite {
		return nil, fmt.Errorf("test opener: only sqlite")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]*testDB{}
	}
	if db, ok := o.m[t.DBPath]; ok {
		return db, nil
	}
	if _, err := os.Stat(t.DBPath); err != nil {
		return nil, err
	}
	db := openTestDB(o.tb, t.DBPath)
	o.m[t.DBPath] = db
	return db, nil
}

// testRender renders a SQLite schema from sqlite_master when sandbox.Introspect is not built.
func testRender(ctx context.Context, db sandbox.DB, samples int) (string, error) {
	if s, err := sandbox.Introspect(ctx, db, samples); err == nil {
		return s.DDL(db.Dialect()), nil
	}
	res, err := db.Exec(ctx, "select sql from sqlite_master where type='table' and sql is not null order by name", sandbox.ExecOptions{})
	if err != nil {
		return "", err
	}
	if !res.OK() {
		return "", errors.New(res.Error)
	}
	var b strings.Builder
	for _, r := range res.Rows {
		fmt.Fprintf(&b, "%s;\n", r[0])
	}
	return b.String(), nil
}

func testSchemas() *episode.SchemaCache {
	return &episode.SchemaCache{Render: testRender}
}

// matchReady reports whether judge.Match is built (it judges identical results equal).
func matchReady() bool {
	r := &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"a"}, Rows: [][]any{{int64(1)}}, Total: 1}
	return judge.Match(r, r, false)
}

// makeShopDB writes a small SQLite database and returns its path and tasks over it.
func makeShopDB(tb testing.TB) (string, []datasets.Task) {
	tb.Helper()
	dir := tb.TempDir()
	path := filepath.Join(dir, "shop", "shop.sqlite")
	os.MkdirAll(filepath.Dir(path), 0o755)
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	stmts := []string{
		`create table customer (id integer primary key, name text not null, city text)`,
		`create table orders (id integer primary key, customer_id integer references customer(id), amount real, note text)`,
	}
	for i := 1; i <= 40; i++ {
		city := []string{"Paris", "Oslo", "Lima", "Pune"}[i%4]
		stmts = append(stmts, fmt.Sprintf(`insert into customer values (%d, 'customer %d', '%s')`, i, i, city))
		for j := 0; j < i%3+1; j++ {
			stmts = append(stmts, fmt.Sprintf(`insert into orders (customer_id, amount, note) values (%d, %d.5, 'note %d')`, i, i*10+j, j))
		}
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			tb.Fatal(err)
		}
	}
	return path, shopTasks(path)
}

// shopTasks are the questions over the database of makeShopDB at path.
func shopTasks(path string) []datasets.Task {
	mk := func(i int, q, gold, ev string) datasets.Task {
		return datasets.Task{ID: fmt.Sprintf("shop/%d", i), Index: i, DBID: "shop", Question: q, Evidence: ev,
			Gold: map[datasets.Dialect]string{datasets.SQLite: gold}, Difficulty: "simple", Source: "test", DBPath: path}
	}
	return []datasets.Task{
		mk(0, "How many customers are there?", "SELECT count(*) FROM customer", ""),
		mk(1, "Which customers live in Oslo?", "SELECT name FROM customer WHERE city = 'Oslo'", "Oslo is a city."),
		mk(2, "What is the total order amount?", "SELECT sum(amount) FROM orders", ""),
		mk(3, "List every order amount of customer 7.", "SELECT amount FROM orders WHERE customer_id = 7 ORDER BY amount", ""),
		mk(4, "How many orders per city?", "SELECT c.city, count(*) FROM orders o JOIN customer c ON c.id = o.customer_id GROUP BY c.city", ""),
		mk(5, "Name the customers without orders.", "SELECT name FROM customer WHERE id NOT IN (SELECT customer_id FROM orders)", ""),
	}
}

// readShards decodes every line of every shard file (not only the journaled part).
func readShardLines(tb testing.TB, dir string) []rundir.Trajectory {
	tb.Helper()
	names, err := rundir.ShardFiles(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var out []rundir.Trajectory
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, rundir.ShardsDir, n))
		if err != nil {
			tb.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
			if line == "" {
				continue
			}
			var tr rundir.Trajectory
			if err := json.Unmarshal([]byte(line), &tr); err != nil {
				tb.Fatalf("shard %s: %v", n, err)
			}
			out = append(out, tr)
		}
	}
	return out
}

// accounted reads a run dir's trajectories and failures and checks that no key is both done and
// failed (or failed twice) and that every failure has a reason; it returns them with the
// failures counted by reason.
func accounted(t *testing.T, dir string) (map[string]*rundir.Trajectory, []rundir.Failure, map[string]int) {
	t.Helper()
	done := committed(t, dir)
	fails, skipped, err := rundir.ReadFailures(dir)
	if err != nil || len(skipped) > 0 {
		t.Fatal(err, skipped)
	}
	seen := map[string]bool{}
	for k := range done {
		seen[k] = true
	}
	reasons := map[string]int{}
	for _, f := range fails {
		if seen[f.Key] {
			t.Fatalf("key %s both done and failed, or failed twice", f.Key)
		}
		if f.Reason == "" || f.Error == "" {
			t.Fatalf("failure without a reason: %+v", f)
		}
		seen[f.Key] = true
		reasons[f.Reason]++
	}
	return done, fails, reasons
}
