package datasets

import (
	"testing"
	"time"
)

func res(rows ...[]any) *Result { return &Result{Outcome: OutcomeOK, Rows: rows, Total: len(rows)} }

func TestMatch(t *testing.T) {
	cases := []struct {
		name        string
		gold, pred  *Result
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
		{"extra row", res([]any{int64(1)}), res([]any{int64(1)}, []any{int64(2)}), false, false},
	}
	for _, c := range cases {
		if got := Match(c.gold, c.pred, c.ordered); got != c.eq {
			t.Errorf("%s: Match = %v, want %v", c.name, got, c.eq)
		}
	}
	if Match(res(), &Result{Outcome: OutcomeError}, false) {
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
