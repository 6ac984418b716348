package rewards

import (
	"math"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
)

func TestFrom(t *testing.T) {
	for _, c := range []struct {
		turns, malformed           int
		execOK, converged, correct bool
		want                       Rewards
	}{
		{2, 0, true, true, true, Rewards{1, 1, 1, 1, 0}},
		{3, 1, true, true, true, Rewards{0, 1, 1, 1, 1}},
		{2, 0, false, true, false, Rewards{1, 0, 0, 0, 0}}, // a failing SQL repeated does not converge
		{5, 0, true, false, false, Rewards{1, 1, 0, 0, 0}},
		{0, 0, false, false, false, Rewards{0, 0, 0, 0, 0}}, // no turn, no format reward
	} {
		o := rundir.NewOutcome(c.converged, c.execOK, c.correct, c.turns, 0, 0, c.malformed, "")
		if got := From(o); got != c.want {
			t.Errorf("%+v: got %+v", c, got)
		}
	}
}

// turn is a turn with content whose statement ran (ok) or not.
func turn(content string, ok bool) rundir.Turn {
	p := protocol.ParseReply(content)
	tu := rundir.Turn{Content: content}
	if !p.OK {
		tu.FormatViolation = true
		return tu
	}
	tu.SQL = p.SQL
	tu.Exec = &rundir.ExecRecord{Outcome: sandbox.OutcomeOK}
	if !ok {
		tu.Exec.Outcome = sandbox.OutcomeError
	}
	return tu
}

// TestTurnWellFormed: the format reward (rundir.Turn.WellFormed) is the documented form and
// nothing else; each reply below is one a loose parser accepts (it has a usable statement) but
// the format rule does not.
func TestTurnWellFormed(t *testing.T) {
	good := []string{
		"<think>count them</think>\n<sql>SELECT 1</sql>",
		"  <THINK>count</Think><SQL>SELECT 1</sql>\n",
		"<think></think>\n<sql>SELECT '<b>'</sql>",
	}
	bad := map[string]string{
		"no think":             "<sql>SELECT 1</sql>",
		"prose before":         "Sure! <think>x</think>\n<sql>SELECT 1</sql>",
		"prose after":          "<think>x</think>\n<sql>SELECT 1</sql>\nHope this helps.",
		"prose between":        "<think>x</think>\nSo:\n<sql>SELECT 1</sql>",
		"two sql blocks":       "<think>x</think>\n<sql>SELECT 1</sql>\n<sql>SELECT 2</sql>",
		"unclosed sql":         "<think>x</think>\n<sql>SELECT 1",
		"unclosed think":       "<think>x\n<sql>SELECT 1</sql>",
		"sql drafted in think": "<think>maybe <sql>SELECT 0</sql></think>\n<sql>SELECT 1</sql>",
		"two think blocks":     "<think>x</think><think>y</think>\n<sql>SELECT 1</sql>",
		"blank statement":      "<think>x</think>\n<sql>  </sql>",
		"sql before think":     "<sql>SELECT 1</sql><think>x</think>",
	}
	for _, c := range good {
		if tu := turn(c, true); !tu.WellFormed() {
			t.Errorf("%q: not well-formed", c)
		}
	}
	for why, c := range bad {
		if tu := turn(c, true); tu.WellFormed() {
			t.Errorf("%s: %q well-formed", why, c)
		}
	}
	// Reasoning in a field, or opened by the template, is the think block.
	field := rundir.Turn{Content: "<sql>SELECT 1</sql>", Reasoning: "count them", ReasoningSource: "reasoning_content"}
	opened := rundir.Turn{Content: "count them</think>\n<sql>SELECT 1</sql>", ThinkOpened: true}
	if !field.WellFormed() || !opened.WellFormed() {
		t.Errorf("field %v, opened %v: want both well-formed", field.WellFormed(), opened.WellFormed())
	}
	field.Content = "<think>again</think><sql>SELECT 1</sql>"
	if field.WellFormed() {
		t.Error("a reasoning field and an inline think block: two think blocks, well-formed")
	}
	cut := turn("<think>x</think>\n<sql>SELECT 1</sql>", true)
	cut.Truncated = true
	if cut.WellFormed() {
		t.Error("a truncated turn is well-formed")
	}
}

// FuzzTurnWellFormed: whatever the text, a well-formed reply is one think block then one sql
// block with a statement, each tag exactly once, nothing else around it.
func FuzzTurnWellFormed(f *testing.F) {
	for _, s := range []string{"<think>a</think>\n<sql>SELECT 1</sql>", "<sql>x</sql>", "<think>a</think>b<sql>c</sql>d", "<think><sql>x</sql></think>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !(rundir.Turn{Content: s}).WellFormed() {
			return
		}
		low := strings.ToLower(strings.TrimSpace(s))
		for _, tag := range []string{protocol.TagThinkOpen, protocol.TagThinkClose, protocol.TagSQLOpen, protocol.TagSQLClose} {
			if n := strings.Count(low, tag); n != 1 {
				t.Fatalf("%q well-formed with %d %s", s, n, tag)
			}
		}
		if !strings.HasPrefix(low, protocol.TagThinkOpen) || !strings.HasSuffix(low, protocol.TagSQLClose) {
			t.Fatalf("%q well-formed with text around the blocks", s)
		}
		between := low[strings.Index(low, protocol.TagThinkClose)+len(protocol.TagThinkClose) : strings.Index(low, protocol.TagSQLOpen)]
		if strings.TrimSpace(between) != "" {
			t.Fatalf("%q well-formed with %q between the blocks", s, between)
		}
		if p := protocol.ParseReply(s); !p.OK {
			t.Fatalf("%q well-formed without a statement", s)
		}
	})
}

func TestOfNoThink(t *testing.T) {
	tr := &rundir.Trajectory{Turns: []rundir.Turn{turn("<sql>SELECT 1</sql>", true), turn("<sql>SELECT 1</sql>", true)},
		ExecOK: true, Repeated: true, Correct: true}
	r := Of(tr)
	if r != (Rewards{Format: 0, ExecOK: 1, Converged: 1, Correct: 1, Malformed: 2}) {
		t.Fatalf("a reply without <think>: %+v, want format 0", r)
	}
	w := DefaultWeights
	w.FormatPenalty = 0.25
	if got := w.Total(r); got != 0.9-0.5 {
		t.Errorf("total with a penalty of 0.25 per malformed turn: %v", got)
	}
}

func TestWeights(t *testing.T) {
	all := Rewards{1, 1, 1, 1, 0}
	if got := DefaultWeights.Total(all); got != 1 {
		t.Errorf("default total of all ones: %v", got)
	}
	w, err := ParseWeights(DefaultWeights.String())
	if err != nil || w != DefaultWeights {
		t.Fatalf("round trip: %+v %v", w, err)
	}
	w, err = ParseWeights(" correct = 2, format=-0.5 ")
	if err != nil || w != (Weights{Correct: 2, Format: -0.5}) || w.Total(Rewards{0, 1, 1, 1, 0}) != 2 || w.Total(Rewards{1, 0, 0, 0, 0}) != -0.5 {
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
		// finite each, but three of them sum past the largest float64
		"correct=1e308,format=1e308,exec_ok=1e308": "beyond ±1e+06",
		"format=-2e6": "beyond ±1e+06",
	} {
		if _, err := ParseWeights(in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: %v, want %q", in, err, says)
		}
	}
}

// TestTurnRewards: in both modes the turn rewards sum to the final reward; in delta mode each
// turn gets what it changed, so the OpenRLHF-style sum no longer ranks an episode that never
// converges above the oracle.
func TestTurnRewards(t *testing.T) {
	gold := "<think>x</think>\n<sql>SELECT 1</sql>"
	oracle := &rundir.Trajectory{Turns: []rundir.Turn{turn(gold, true), turn(gold, true)}, ExecOK: true, Repeated: true, Correct: true}
	never := &rundir.Trajectory{Turns: []rundir.Turn{
		turn("<think>a</think><sql>SELECT 2</sql>", true), turn("<think>a</think><sql>SELECT 3</sql>", true),
		turn("<think>a</think><sql>SELECT 4</sql>", true), turn("<think>a</think><sql>SELECT 5</sql>", true),
		turn("<think>a</think><sql>SELECT 6</sql>", true)}, ExecOK: true}
	mixed := &rundir.Trajectory{Turns: []rundir.Turn{
		turn("no sql here", false), turn("<sql>SELECT x</sql>", false), turn("<think>a</think><sql>SELECT 1</sql>", true),
		turn("<think>a</think><sql>SELECT 1</sql>", true)}, ExecOK: true, Repeated: true, Correct: true}
	w := DefaultWeights
	w.FormatPenalty = 0.05
	sum := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s
	}
	for name, tr := range map[string]*rundir.Trajectory{"oracle": oracle, "never": never, "mixed": mixed} {
		for _, mode := range []Mode{ModeFinal, ModeDelta} {
			turns, final := w.TurnRewards(tr, true, mode)
			if final != w.Total(Of(tr)) || len(turns) != len(tr.Turns) {
				t.Fatalf("%s %s: final %v, want %v; %d turn rewards", name, mode, final, w.Total(Of(tr)), len(turns))
			}
			if math.Abs(sum(turns)-final) > 1e-9 {
				t.Errorf("%s %s: turn rewards %v sum to %v, final %v", name, mode, turns, sum(turns), final)
			}
			// A prefix's turn rewards are the full episode's first ones.
			part := *tr
			part.Turns, part.Repeated, part.Correct = tr.Turns[:1], false, false
			part.ExecOK = tr.Turns[0].Exec != nil && tr.Turns[0].Exec.Outcome == sandbox.OutcomeOK
			if p, _ := w.TurnRewards(&part, false, mode); (mode == ModeDelta && p[0] != turns[0]) || (mode == ModeFinal && p[0] != 0) {
				t.Errorf("%s %s: first turn %v as played, %v at the end", name, mode, p[0], turns[0])
			}
		}
	}
	o, _ := w.TurnRewards(oracle, true, ModeDelta)
	n, _ := w.TurnRewards(never, true, ModeDelta)
	if !(sum(o) > sum(n)) || o[0] != 0.2 || n[1] != 0 {
		t.Errorf("delta: oracle %v (sum %v), never converging %v (sum %v)", o, sum(o), n, sum(n))
	}
	m, _ := w.TurnRewards(mixed, true, ModeDelta)
	if want := []float64{-0.05, -0.05, 0.1, 0.8}; !equal(m, want) {
		t.Errorf("mixed delta rewards %v, want %v", m, want)
	}
	if f, _ := w.TurnRewards(mixed, true, ModeFinal); !equal(f, []float64{0, 0, 0, 0.8}) {
		t.Errorf("mixed final rewards %v", f)
	}
	if _, err := ParseMode("sum"); err == nil {
		t.Error("mode sum accepted")
	}
	if m, err := ParseMode(""); err != nil || m != ModeFinal {
		t.Errorf("empty mode: %v %v", m, err)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-12 {
			return false
		}
	}
	return true
}
