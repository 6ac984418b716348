package rewards

import (
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/distill"
)

func TestFrom(t *testing.T) {
	for _, c := range []struct {
		turns, violations, truncated int
		execOK, converged, correct   bool
		want                         Rewards
	}{
		{2, 0, 0, true, true, true, Rewards{1, 1, 1, 1}},
		{3, 1, 0, true, true, true, Rewards{0, 1, 1, 1}},
		{3, 0, 1, true, true, true, Rewards{0, 1, 1, 1}},   // a truncated turn is not well-formed
		{2, 0, 0, false, true, false, Rewards{1, 0, 0, 0}}, // a failing SQL repeated does not converge
		{5, 0, 0, true, false, false, Rewards{1, 1, 0, 0}},
		{0, 0, 0, false, false, false, Rewards{0, 0, 0, 0}}, // no turn, no format reward
	} {
		if got := From(c.turns, c.violations, c.truncated, c.execOK, c.converged, c.correct); got != c.want {
			t.Errorf("%+v: got %+v", c, got)
		}
	}
	tr := &distill.Trajectory{Turns: make([]distill.Turn, 2), ExecOK: true, Converged: true, Correct: true}
	if Of(tr) != (Rewards{1, 1, 1, 1}) {
		t.Errorf("Of: %+v", Of(tr))
	}
}

func TestWeights(t *testing.T) {
	if got := DefaultWeights.Total(Rewards{1, 1, 1, 1}); got != 1 {
		t.Errorf("default total of all ones: %v", got)
	}
	w, err := ParseWeights(DefaultWeights.String())
	if err != nil || w != DefaultWeights {
		t.Fatalf("round trip: %+v %v", w, err)
	}
	w, err = ParseWeights(" correct = 2, format=-0.5 ")
	if err != nil || w != (Weights{Correct: 2, Format: -0.5}) || w.Total(Rewards{0, 1, 1, 1}) != 2 || w.Total(Rewards{1, 0, 0, 0}) != -0.5 {
		t.Fatalf("%+v %v", w, err)
	}
	if w, err := ParseWeights(""); err != nil || w != DefaultWeights {
		t.Fatalf("empty: %+v %v", w, err)
	}
	for in, says := range map[string]string{
		"correct":             "NAME=VALUE",
		"=1":                  "NAME=VALUE",
		"speed=1":             "unknown weight",
		"correct=x":           "not a finite number",
		"correct=NaN":         "not a finite number",
		"correct=1e999":       "not a finite number",
		"correct=1,correct=2": "given twice",
	} {
		if _, err := ParseWeights(in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: %v, want %q", in, err, says)
		}
	}
}
