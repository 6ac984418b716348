package stats

import (
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/rundir"
)

func TestEvalHeadline(t *testing.T) {
	res := []EvalResult{
		{Difficulty: "simple", Correct: true, Converged: true, ExecOK: true, Turns: 2},
		{Difficulty: "simple", Converged: true, ExecOK: true, Turns: 2},
		{Difficulty: "simple", Converged: true, ExecOK: true, Turns: 2},
		{Difficulty: "challenging", Correct: true, ExecOK: true, Turns: 5, FormatViolations: 2, MalformedTurns: 3},
		{Difficulty: "moderate", Turns: 1, FormatViolations: 1, MalformedTurns: 1},
	}
	got := SummarizeEval(res).Headline()
	want := "EX 40.00% (simple 33.33, moderate 0.00, challenging 100.00), convergence 60.0%, exec-ok 80.0%, format violations 25.0%, malformed turns 4, 2.40 turns"
	if got != want {
		t.Errorf("headline\n got %q\nwant %q", got, want)
	}
	if got := SummarizeEval([]EvalResult{{Correct: true, Turns: 2}, {Turns: 2}}).FormatEX(); got != "EX 50.00%" {
		t.Errorf("no difficulty: %q", got)
	}
	if got := SummarizeEval([]EvalResult{{Difficulty: "extra"}, {Difficulty: "zz"}, {Difficulty: "easy", Correct: true}, {}, {Difficulty: "medium"}}).FormatEX(); got != "EX 20.00% (easy 100.00, medium 0.00, extra 0.00, zz 0.00, other 0.00)" {
		t.Errorf("other bucket: %q", got)
	}
}

// TestEvalUnjudged: a result built from an outcome with a gold error is unjudged, the summary
// takes the count from rundir.Tally, and the headline says how many.
func TestEvalUnjudged(t *testing.T) {
	res := []EvalResult{
		EvalResultOf("simple", rundir.NewOutcome(true, true, true, 2, 0, 0, 0, "")),
		EvalResultOf("simple", rundir.NewOutcome(true, true, false, 2, 0, 0, 0, "error: no such function: YEAR")),
		EvalResultOf("simple", rundir.NewOutcome(false, false, false, 1, 0, 0, 0, "")),
	}
	if !res[1].Unjudged || res[0].Unjudged || !res[1].Outcome().Unjudged {
		t.Fatalf("results %+v", res)
	}
	s := SummarizeEval(res)
	if s.Unjudged != 1 || s.Correct != 1 || s.N != 3 {
		t.Errorf("summary %+v", s)
	}
	if h := s.Headline(); !strings.HasSuffix(h, "; 1 of 3 unjudged: their gold SQL failed") {
		t.Errorf("headline %q", h)
	}
}
