package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/chainedsql/chainedsql/rundir"
)

// EvalResult is the part of one evaluated task that EvalSummary needs: its difficulty and its
// outcome (EvalResultOf a rundir.Outcome; Converged is the outcome's, and a converged flag
// recorded with the raw meaning is read as converged AND exec_ok).
type EvalResult struct {
	Difficulty       string `json:"difficulty"`
	Correct          bool   `json:"correct"`
	Converged        bool   `json:"converged"`
	ExecOK           bool   `json:"exec_ok"`
	Turns            int    `json:"turns"`
	FormatViolations int    `json:"format_violations"`
	// MalformedTurns is the outcome's: turns failing the format reward's rule.
	MalformedTurns int `json:"malformed_turns"`
	// Unjudged is the outcome's Unjudged: the task's gold SQL gave no result (it failed on the
	// dialect evaluated and on the task's reference where it has one, or the task has none),
	// so the answer could not be compared; Correct is then false.
	Unjudged bool `json:"unjudged,omitempty"`
}

// EvalSummary is the headline of an evaluation: execution accuracy (EX) overall and by
// difficulty, convergence, exec-ok rate, format violations, average turns. Rates are in [0, 1];
// over zero results every rate is 0.
type EvalSummary struct {
	N       int     `json:"n"`
	Correct int     `json:"correct"`
	EX      float64 `json:"ex"`
	// ByDifficulty has one entry per difficulty found in the results: BIRD's simple, moderate,
	// challenging and Spider's easy, medium, hard, extra first (when present), then any others
	// by name; "" (no difficulty) last.
	ByDifficulty []DifficultyEX `json:"by_difficulty"`
	Convergence  float64        `json:"convergence"`
	ExecOK       float64        `json:"exec_ok"`
	// FormatViolationRate is format-violating turns over all turns.
	FormatViolationRate float64 `json:"format_violation_rate"`
	// MalformedTurns sums the turns failing the format reward's rule (rundir.Outcome's
	// MalformedTurns): every format violation and truncated turn, and replies with a usable
	// statement in a looser form than one <think>…</think> then one <sql>…</sql>.
	MalformedTurns int `json:"malformed_turns"`
	// RowsWithViolation counts the results with at least one format violation, as
	// rows_with_violation does in dataset stats; RowsWithViolationShare is their share of N.
	// (Summaries written before the share had its own name hold the share under
	// rows_with_violation; UnmarshalJSON reads both.)
	RowsWithViolation      int     `json:"rows_with_violation"`
	RowsWithViolationShare float64 `json:"rows_with_violation_share"`
	AvgTurns               float64 `json:"avg_turns"`
	// Unjudged counts the results whose gold SQL failed (rundir.Tally's Unjudged over
	// EvalResult.Outcome): EX counts them as wrong, as BIRD's evaluation does, and the
	// headline says how many there are.
	Unjudged int `json:"unjudged"`
}

// UnmarshalJSON reads an EvalSummary. A summary without rows_with_violation_share is of the
// older layout, whose rows_with_violation is the share: the count is then that share of N,
// rounded.
func (s *EvalSummary) UnmarshalJSON(data []byte) error {
	type plain EvalSummary // without the method
	var aux struct {
		plain
		RowsWithViolation      json.Number `json:"rows_with_violation"`
		RowsWithViolationShare *float64    `json:"rows_with_violation_share"`
	}
	if err := json.Unmarshal(data, &aux); err != nil {
		return err
	}
	*s = EvalSummary(aux.plain)
	if aux.RowsWithViolation == "" {
		aux.RowsWithViolation = "0"
	}
	if aux.RowsWithViolationShare != nil {
		n, err := aux.RowsWithViolation.Int64()
		if err != nil {
			return fmt.Errorf("eval summary: rows_with_violation %s is not a count: %w", aux.RowsWithViolation, err)
		}
		s.RowsWithViolation, s.RowsWithViolationShare = int(n), *aux.RowsWithViolationShare
		return nil
	}
	share, err := aux.RowsWithViolation.Float64()
	if err != nil {
		return fmt.Errorf("eval summary: rows_with_violation %s: %w", aux.RowsWithViolation, err)
	}
	s.RowsWithViolationShare = share
	s.RowsWithViolation = int(math.Round(share * float64(s.N)))
	return nil
}

// DifficultyEX is EX within one difficulty bucket.
type DifficultyEX struct {
	Difficulty string  `json:"difficulty"`
	N          int     `json:"n"`
	Correct    int     `json:"correct"`
	EX         float64 `json:"ex"`
}

// EvalResultOf returns the EvalResult of an outcome (built with the task's gold error, so
// that Unjudged is set where the gold SQL gave no result).
func EvalResultOf(difficulty string, o rundir.Outcome) EvalResult {
	return EvalResult{Difficulty: difficulty, Correct: o.Correct, Converged: o.Converged, ExecOK: o.ExecOK, Turns: o.Turns,
		FormatViolations: o.FormatViolations, MalformedTurns: o.MalformedTurns, Unjudged: o.Unjudged}
}

// Outcome returns the result's outcome.
func (r EvalResult) Outcome() rundir.Outcome {
	o := rundir.NewOutcome(r.Converged, r.ExecOK, r.Correct, r.Turns, r.FormatViolations, 0, r.MalformedTurns, "")
	o.Unjudged = r.Unjudged // recorded as a flag: the gold's error text is not kept here
	return o
}

// SummarizeEval computes an EvalSummary from results, counting their outcomes with rundir.Tally.
func SummarizeEval(results []EvalResult) EvalSummary {
	s := EvalSummary{N: len(results), ByDifficulty: []DifficultyEX{}}
	var all rundir.Tally
	buckets := map[string]*DifficultyEX{}
	for _, r := range results {
		b := buckets[r.Difficulty]
		if b == nil {
			b = &DifficultyEX{Difficulty: r.Difficulty}
			buckets[r.Difficulty] = b
		}
		o := r.Outcome()
		all.Add(o)
		b.N++
		if o.Correct {
			b.Correct++
		}
	}
	s.Correct = all.Correct
	s.EX = ratio(s.Correct, s.N)
	s.Convergence = ratio(all.Converged, s.N)
	s.ExecOK = ratio(all.ExecOK, s.N)
	s.RowsWithViolation = all.RowsWithViolation
	s.RowsWithViolationShare = ratio(all.RowsWithViolation, s.N)
	s.FormatViolationRate = ratio(all.FormatViolations, all.Turns)
	s.MalformedTurns = all.MalformedTurns
	s.AvgTurns = ratio(all.Turns, s.N)
	s.Unjudged = all.Unjudged
	for _, name := range orderDifficulties(keys(buckets)) {
		b := buckets[name]
		b.EX = ratio(b.Correct, b.N)
		s.ByDifficulty = append(s.ByDifficulty, *b)
	}
	return s
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// orderDifficulties sorts difficulty names: BIRD's simple, moderate, challenging, Spider's easy,
// medium, hard, extra, then others by name, then "".
func orderDifficulties(names []string) []string {
	rank := func(s string) int {
		switch s {
		case "simple":
			return 0
		case "moderate":
			return 1
		case "challenging":
			return 2
		case "easy": // Spider's hardness levels
			return 3
		case "medium":
			return 4
		case "hard":
			return 5
		case "extra":
			return 6
		case "":
			return 8
		}
		return 7
	}
	sort.Slice(names, func(i, j int) bool {
		ri, rj := rank(names[i]), rank(names[j])
		if ri != rj {
			return ri < rj
		}
		return names[i] < names[j]
	})
	return names
}

// FormatEX renders EX overall and per difficulty bucket, e.g.
// "EX 12.84% (simple 17.73, moderate 6.25, challenging 2.76)". A run whose only bucket has no
// difficulty prints the overall figure alone; a bucket without a name is called "other".
func (s EvalSummary) FormatEX() string {
	out := fmt.Sprintf("EX %.2f%%", 100*s.EX)
	if len(s.ByDifficulty) == 0 || (len(s.ByDifficulty) == 1 && s.ByDifficulty[0].Difficulty == "") {
		return out
	}
	parts := make([]string, len(s.ByDifficulty))
	for i, b := range s.ByDifficulty {
		name := b.Difficulty
		if name == "" {
			name = "other"
		}
		parts[i] = fmt.Sprintf("%s %.2f", name, 100*b.EX)
	}
	return out + " (" + strings.Join(parts, ", ") + ")"
}

// Headline renders the summary on one line, e.g. "EX 12.84% (simple 17.73, moderate 6.25,
// challenging 2.76), convergence 57.8%, exec-ok 60.2%, format violations 16.2%, malformed turns 61,
// 3.35 turns". Format violations are violating turns over all turns; malformed turns is the
// count MalformedTurns. Where some results are unjudged it
// ends with how many ("; 41 of 120 unjudged: their gold SQL failed").
func (s EvalSummary) Headline() string {
	h := fmt.Sprintf("%s, convergence %s, exec-ok %s, format violations %s, malformed turns %d, %.2f turns",
		s.FormatEX(), pct(s.Convergence), pct(s.ExecOK), pct(s.FormatViolationRate), s.MalformedTurns, s.AvgTurns)
	if s.Unjudged > 0 {
		h += fmt.Sprintf("; %d of %d unjudged: their gold SQL failed", s.Unjudged, s.N)
	}
	return h
}
