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

// TestGoldStatementExact: of the statements Run executes, GoldStatement identifies exactly the
// gold's, in every style: the gold as the style rewrites it, run once, and no other statement
// for it (a result of DATE and BOOLEAN columns, flags, included); never a prediction that holds
// the gold's text (a cache of gold results keyed by it keeps nothing else).
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
	golds := []string{
		"SELECT id, name FROM t WHERE n > 1",
		"  SELECT DISTINCT grp FROM t ORDER BY grp;  ",
		"-- the flags\nSELECT b, d FROM flags;",
		"SELECT count(*) FROM t WHERE YEAR(CURDATE()) > 0",
	}
	for _, gold := range golds {
		core := strings.TrimSuffix(strings.TrimSpace(gold), ";")
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
			stmt, ok := j.GoldStatement(db.Dialect(), gold)
			if !ok {
				t.Fatalf("%s %q: no gold statement", j.Style, gold)
			}
			for _, pred := range preds {
				rec := &recordingDB{DB: db}
				if _, err := j.Run(context.Background(), rec, gold, pred, nil, 10*time.Second); err != nil {
					t.Fatal(err)
				}
				plain, other := 0, 0
				for _, q := range rec.stmt {
					isGold := q == stmt
					isPred := strings.Contains(q, "pred_marker")
					if isGold && isPred {
						t.Errorf("%s %q, pred %q: the prediction's %q is taken for the gold's", j.Style, gold, pred, q)
					}
					if isGold {
						plain++
					} else if !isPred {
						other++
					}
				}
				if plain != 1 || other != 0 {
					t.Errorf("%s %q, pred %q: %d executions of the gold statement %q and %d of neither it nor the prediction, want 1 and 0; ran %q", j.Style, gold, pred, plain, stmt, other, rec.stmt)
				}
			}
		}
	}
	// The prepared gold is what Prepare gives on a server.
	for _, j := range []Judge{{Style: StyleBIRD}, {Style: StyleSpider}, {Style: StyleSpiderStrict}} {
		for _, gold := range golds {
			g, _, _, _ := j.Prepare(gold, "SELECT 1")
			if got, ok := j.GoldStatement("postgres", gold); !ok || got != g {
				t.Errorf("%s on postgres: %q, want Prepare's %q", j.Style, got, g)
			}
		}
	}
}
