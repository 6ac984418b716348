package judge

import (
	"context"
	"math"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
)

// TestNaNNeverEqual: the official evaluators compare rows as Python does, where a NaN (psycopg's
// float('nan') for a float8 NaN, Decimal('NaN') for a numeric one) equals nothing, itself from
// another execution included: BIRD's set(pred) == set(gold) and test-suite-sql-eval's result_eq
// (quick_rej's lists and sets of rows, multiset_eq) are false as soon as either result holds a
// NaN, even when both run the same statement; two empty results stay equal in the Spider styles.
// Infinities equal themselves (inf == inf). SQLite never returns a NaN (it gives NULL, None to
// Python, which equals None), and its 1e999 is inf. The judge keyed NaN as "NaN" and found a
// gold NaN equal to a predicted one on PostgreSQL.
func TestNaNNeverEqual(t *testing.T) {
	cases := []struct {
		d          datasets.Dialect
		gold, pred string
		correct    bool
	}{
		{datasets.SQLite, "SELECT 1e999, -1e999", "SELECT 9e999, -9e999", true},
		{datasets.SQLite, "SELECT 1e999", "SELECT -1e999", false},
		{datasets.SQLite, "SELECT 1e999 - 1e999", "SELECT NULL", true},
		{datasets.SQLite, "SELECT 0.0 / 0.0", "SELECT 1e999 * 0", true},
		{datasets.Postgres, "SELECT 'NaN'::float8", "SELECT 'NaN'::float8", false},
		{datasets.Postgres, "SELECT 'NaN'::numeric", "SELECT 'NaN'::numeric", false},
		{datasets.Postgres, "SELECT 'NaN'::float8", "SELECT 'NaN'::numeric", false},
		{datasets.Postgres, "SELECT 1, 'NaN'::float8 UNION ALL SELECT 2, 3", "SELECT 1, 'NaN'::float8 UNION ALL SELECT 2, 3", false},
		{datasets.Postgres, "SELECT 2, 3", "SELECT 2, 3 UNION ALL SELECT 1, 'NaN'::float8", false},
		{datasets.Postgres, "SELECT 'NaN'::float8 WHERE false", "SELECT 'NaN'::float8 WHERE false", true},
		{datasets.Postgres, "SELECT 'Infinity'::float8, '-Infinity'::float8", "SELECT 'Infinity'::numeric, '-Infinity'::float8", true},
		{datasets.Postgres, "SELECT 'Infinity'::float8", "SELECT '-Infinity'::float8", false},
	}
	for _, c := range cases {
		var db sandbox.DB
		if c.d == datasets.SQLite {
			db = sqliteDB(t, "CREATE TABLE t (x INTEGER)")
		} else {
			shared.SkipServers(t)
			db = serverDB(t, c.d, "public")
		}
		for _, style := range Styles {
			correct := c.correct
			v, err := Judge{Style: style}.Run(context.Background(), db, c.gold, c.pred, nil, 0)
			if err != nil {
				t.Fatalf("%s %s %s: %v", style, c.d, c.pred, err)
			}
			if v.Outcome != string(sandbox.OutcomeOK) || v.Correct != correct {
				t.Errorf("%s on %s: %s against %s: %s %q correct %v, want correct %v (Python's)", style, c.d, c.pred, c.gold, v.Outcome, v.Error, v.Correct, correct)
			}
		}
	}
}

// TestMatchNaN: Match, the cross-engine rule, finds no result holding a NaN (float64 or a
// sandbox.Decimal "NaN") equal to any, in either order; infinities equal themselves.
func TestMatchNaN(t *testing.T) {
	res := func(v any) *sandbox.Result {
		return &sandbox.Result{Outcome: sandbox.OutcomeOK, Columns: []string{"x"}, Rows: [][]any{{v}}, Total: 1}
	}
	for _, v := range []any{math.NaN(), sandbox.Decimal("NaN")} {
		for _, ordered := range []bool{false, true} {
			if Match(res(v), res(v), ordered) {
				t.Errorf("Match(%#v, %#v, ordered %v) is true", v, v, ordered)
			}
		}
	}
	if !Match(res(math.Inf(1)), res(sandbox.Decimal("Infinity")), false) {
		t.Error("Match(+Inf, Decimal Infinity) is false")
	}
}
