package judge

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/sandbox"
)

func res(rows ...[]any) *sandbox.Result {
	return &sandbox.Result{Outcome: sandbox.OutcomeOK, Rows: rows, Total: len(rows)}
}

func TestMatch(t *testing.T) {
	cases := []struct {
		name        string
		gold, pred  *sandbox.Result
		ordered, eq bool
	}{
		{"same", res([]any{int64(1), "a"}), res([]any{int64(1), "a"}), false, true},
		{"int vs float", res([]any{int64(1)}), res([]any{1.0}), false, true},
		{"float noise", res([]any{0.1 + 0.2}), res([]any{0.3}), false, true},
		{"different float", res([]any{0.31}), res([]any{0.3}), false, false},
		{"duplicates ignored", res([]any{int64(1)}, []any{int64(1)}), res([]any{int64(1)}), false, true},
		{"order ignored", res([]any{int64(1)}, []any{int64(2)}), res([]any{int64(2)}, []any{int64(1)}), false, true},
		{"order kept", res([]any{int64(1)}, []any{int64(2)}), res([]any{int64(2)}, []any{int64(1)}), true, false},
		{"column order kept", res([]any{int64(1), "a"}), res([]any{"a", int64(1)}), false, false},
		{"null vs empty", res([]any{nil}), res([]any{""}), false, false},
		{"bytes vs text", res([]any{[]byte("x")}), res([]any{"x"}), false, true},
		{"text number vs number", res([]any{"1"}), res([]any{int64(1)}), false, false},
		{"time vs datetime text", res([]any{time.Date(2009, 1, 3, 0, 0, 0, 0, time.UTC)}), res([]any{"2009-01-03 00:00:00"}), false, true},
		{"time vs date text", res([]any{time.Date(2009, 1, 3, 0, 0, 0, 0, time.UTC)}), res([]any{"2009-01-03"}), false, true},
		{"time vs ISO text", res([]any{time.Date(2009, 1, 3, 4, 5, 6, 0, time.UTC)}), res([]any{"2009-01-03T04:05:06Z"}), false, true},
		{"time vs other time", res([]any{time.Date(2009, 1, 3, 4, 5, 6, 0, time.UTC)}), res([]any{"2009-01-03 04:05:07"}), false, false},
		{"invalid date text kept", res([]any{"2009-13-45"}), res([]any{"2009-13-45 00:00:00"}), false, false},
		{"decimal vs float", res([]any{sandbox.Decimal("12.50")}), res([]any{12.5}), false, true},
		{"decimal vs float noise", res([]any{sandbox.Decimal("0.3000000000000000")}), res([]any{0.1 + 0.2}), false, true},
		{"integral decimal vs int", res([]any{sandbox.Decimal("7.00")}), res([]any{int64(7)}), false, true},
		{"wide integral decimal vs int", res([]any{sandbox.Decimal("1234567890123456789.0")}), res([]any{int64(1234567890123456789)}), false, true},
		{"decimal vs other decimal", res([]any{sandbox.Decimal("12.50")}), res([]any{sandbox.Decimal("12.51")}), false, false},
		{"decimal vs its text", res([]any{sandbox.Decimal("12.50")}), res([]any{"12.50"}), false, false},
		{"unsigned past int64 vs float", res([]any{sandbox.Decimal("18446744073709551615")}), res([]any{float64(18446744073709551615)}), false, false},
		{"unsigned past int64 vs the next", res([]any{sandbox.Decimal("18446744073709551615")}), res([]any{sandbox.Decimal("18446744073709551614")}), false, false},
		{"integer past int64 vs its fraction of zeros", res([]any{sandbox.Decimal("18446744073709551615")}), res([]any{sandbox.Decimal("18446744073709551615.000")}), false, true},
		{"decimal past float64 vs its text", res([]any{sandbox.Decimal("1" + strings.Repeat("0", 400))}), res([]any{"1" + strings.Repeat("0", 400)}), false, false},
		{"decimal past float64 written otherwise", res([]any{sandbox.Decimal("-1" + strings.Repeat("0", 400) + ".5")}), res([]any{sandbox.Decimal("-01" + strings.Repeat("0", 400) + ".50")}), false, true},
		{"negative zero decimal", res([]any{sandbox.Decimal("-0.00")}), res([]any{int64(0)}), false, true},
		{"zero datetime vs its text", res([]any{"0000-00-00 00:00:00"}), res([]any{"0000-00-00 00:00:00"}), false, true},
		{"zero datetime vs 0001-01-01", res([]any{"0000-00-00 00:00:00"}), res([]any{time.Time{}}), false, false},
		{"extra row", res([]any{int64(1)}), res([]any{int64(1)}, []any{int64(2)}), false, false},
		{"text holding a separator", res([]any{"a", "b"}), res([]any{"a\x1fsb"}), false, false},
	}
	for _, c := range cases {
		if got := Match(c.gold, c.pred, c.ordered); got != c.eq {
			t.Errorf("%s: Match = %v, want %v", c.name, got, c.eq)
		}
	}
	if Match(res(), &sandbox.Result{Outcome: sandbox.OutcomeError}, false) {
		t.Error("an error result matched")
	}
}

func TestHasOrderBy(t *testing.T) {
	for q, want := range map[string]bool{
		"SELECT a FROM t ORDER BY a":                       true,
		"select a from t order\n by a desc limit 1":        true,
		"SELECT a FROM (SELECT a FROM t ORDER BY a) x":     false,
		"SELECT 'order by' FROM t":                         false,
		"SELECT a FROM t -- order by a\n":                  false,
		"SELECT a FROM t WHERE b IN (SELECT b ORDER BY b)": false,
	} {
		if got := HasOrderBy(q); got != want {
			t.Errorf("HasOrderBy(%q) = %v, want %v", q, got, want)
		}
	}
}

// bruteResultEq is result_eq with every column permutation tried, as the official code does
// up to 3 columns.
func bruteResultEq(gold, pred [][]any, ordered bool) bool {
	m := pyModel{}
	if len(gold) == 0 && len(pred) == 0 {
		return true
	}
	if len(gold) != len(pred) || len(gold[0]) != len(pred[0]) {
		return false
	}
	gu, pu := unorderedRows(m, gold), unorderedRows(m, pred)
	if ordered && !slices.Equal(gu, pu) || !ordered && !sameSet(gu, pu) {
		return false
	}
	n := len(gold[0])
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	var try func(k int) bool
	try = func(k int) bool {
		if k == n {
			p := make([][]any, len(pred))
			for r, row := range pred {
				p[r] = make([]any, n)
				for c := range perm {
					p[r][c] = row[perm[c]]
				}
			}
			return listEqual(m, gold, p, ordered)
		}
		for i := k; i < n; i++ {
			perm[k], perm[i] = perm[i], perm[k]
			if try(k + 1) {
				return true
			}
			perm[k], perm[i] = perm[i], perm[k]
		}
		return false
	}
	return try(0)
}

// TestSpiderResultEqAgainstBruteForce checks the pruned permutation search against trying every
// permutation, on small random tables with many repeated values, ints and equal floats.
func TestSpiderResultEqAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	vals := []any{int64(1), 1.0, int64(2), int64(12), "1", "a", nil, 2.5}
	matched := 0
	for iter := 0; iter < 20000; iter++ {
		n, rows := 1+rng.IntN(5), rng.IntN(5)
		gold := make([][]any, rows)
		for r := range gold {
			gold[r] = make([]any, n)
			for c := range gold[r] {
				gold[r][c] = vals[rng.IntN(3+rng.IntN(len(vals)-2))]
			}
		}
		// The prediction: gold with its columns and rows shuffled, sometimes a cell changed.
		cols, order := rng.Perm(n), rng.Perm(rows)
		pred := make([][]any, rows)
		for r := range pred {
			pred[r] = make([]any, n)
			for c := range cols {
				pred[r][c] = gold[order[r]][cols[c]]
			}
		}
		if rows > 0 && rng.IntN(3) == 0 {
			pred[rng.IntN(rows)][rng.IntN(n)] = vals[rng.IntN(len(vals))]
		}
		ordered := rng.IntN(2) == 0
		want := bruteResultEq(gold, pred, ordered)
		if got := spiderResultEq(pyModel{}, gold, pred, ordered); got != want {
			t.Fatalf("gold %v pred %v ordered %v: %v, every permutation tried gives %v", gold, pred, ordered, got, want)
		}
		if want {
			matched++
		}
	}
	if matched < 2000 || matched > 18000 {
		t.Errorf("%d of 20000 matched: the cases do not exercise both verdicts", matched)
	}
}

// TestSpiderResultEqWide: a 12-column table whose columns all hold the same values in other
// arrangements (every column multiset equal) is decided without trying 12! permutations.
func TestSpiderResultEqWide(t *testing.T) {
	const n, rows = 12, 300
	gold := make([][]any, rows)
	for r := range gold {
		gold[r] = make([]any, n)
		for c := range gold[r] {
			gold[r][c] = int64((r*(c+1) + c) % rows)
		}
	}
	pred := make([][]any, rows)
	for r := range pred {
		pred[r] = make([]any, n)
		for c := range pred[r] {
			pred[r][c] = gold[rows-1-r][n-1-c]
		}
	}
	if !spiderResultEq(pyModel{}, gold, pred, false) {
		t.Error("reversed columns and rows: no match found")
	}
	pred[0][0], pred[1][0] = pred[1][0], pred[0][0]
	if spiderResultEq(pyModel{}, gold, pred, false) {
		t.Error("two cells swapped within a column: matched")
	}
}
