package judge

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/sqlite"
)

// recordingDB records every statement executed on it.
type recordingDB struct {
	sandbox.DB
	mu   sync.Mutex
	stmt []string
}

func (r *recordingDB) Exec(ctx context.Context, q string, opts sandbox.ExecOptions) (*sandbox.Result, error) {
	r.mu.Lock()
	r.stmt = append(r.stmt, q)
	r.mu.Unlock()
	return r.DB.Exec(ctx, q, opts)
}

// TestGoldStatementExact: of the statements Run executes, GoldStatement and ReadsRawValues
// identify exactly the gold's, in every style: the gold as the style rewrites it (and, were its
// result to hold values the driver converted, its raw-values wrapper: the SQLite engine returns
// stored values, so the DATE and BOOLEAN columns of flags no longer run it); never a prediction
// that holds the gold's text (a cache of gold results keyed by them keeps nothing else).
func TestGoldStatementExact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db", "judge.sqlite")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	writeJudgeFixture(t, path)
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cases := []struct {
		gold string
		raw  bool // the gold's result holds converted values: its wrapper runs too
	}{
		{"SELECT id, name FROM t WHERE n > 1", false},
		{"  SELECT DISTINCT grp FROM t ORDER BY grp;  ", false},
		{"-- the flags\nSELECT b, d FROM flags;", false},
		{"SELECT count(*) FROM t WHERE YEAR(CURDATE()) > 0", false},
	}
	for _, c := range cases {
		core := strings.TrimSuffix(strings.TrimSpace(c.gold), ";")
		if i := strings.Index(core, "SELECT"); i > 0 {
			core = core[i:]
		}
		// Predictions that hold the gold's text, and the gold itself written otherwise.
		preds := []string{
			"SELECT * FROM (" + core + ") AS pred_marker",
			core + " /* pred_marker */",
			"SELECT 1 AS pred_marker UNION ALL SELECT count(*) FROM (" + core + ")",
		}
		for _, j := range []Judge{{Style: StyleBIRD}, {Style: StyleSpider}, {Style: StyleSpider, KeepDistinct: true}, {Style: StyleSpiderStrict}} {
			stmt, ok := j.GoldStatement(db.Dialect(), c.gold)
			if !ok {
				t.Fatalf("%s %q: no gold statement", j.Style, c.gold)
			}
			for _, pred := range preds {
				rec := &recordingDB{DB: db}
				if _, err := j.Run(context.Background(), rec, c.gold, pred, nil, 10*time.Second); err != nil {
					t.Fatal(err)
				}
				plain, wrapped := 0, 0
				for _, q := range rec.stmt {
					isGold := q == stmt
					isRaw := ReadsRawValues(q, stmt)
					if (isGold || isRaw) && strings.Contains(q, "pred_marker") {
						t.Errorf("%s %q, pred %q: the prediction's %q is taken for the gold's", j.Style, c.gold, pred, q)
					}
					if isGold {
						plain++
					}
					if isRaw {
						wrapped++
					}
				}
				if want := map[bool]int{true: 1}[c.raw]; plain != 1 || wrapped != want {
					t.Errorf("%s %q, pred %q: %d executions of the gold statement %q and %d of its wrapper, want 1 and %d; ran %q", j.Style, c.gold, pred, plain, stmt, wrapped, want, rec.stmt)
				}
			}
		}
	}
	// The prepared gold is what Prepare gives on a server.
	for _, j := range []Judge{{Style: StyleBIRD}, {Style: StyleSpider}, {Style: StyleSpiderStrict}} {
		for _, c := range cases {
			g, _, _, _ := j.Prepare(c.gold, "SELECT 1")
			if got, ok := j.GoldStatement("postgres", c.gold); !ok || got != g {
				t.Errorf("%s on postgres: %q, want Prepare's %q", j.Style, got, g)
			}
		}
	}
	if ReadsRawValues("WITH chainedsql_raw(c1) AS (SELECT 1\n) SELECT +c1 FROM chainedsql_raw WHERE 0", "SELECT 1") {
		t.Error("a wrapper with more after it is taken for the gold's")
	}
}
