// Package rewards defines the rewards of a chained-sql/v1 episode once, for the RL environment
// (package env), student eval and curate stats: format, exec_ok, converged and correct, each 0 or
// 1, and their weighted total.
package rewards

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/chainedsql/chainedsql/distill"
)

// Rewards are the four rewards of an episode (or of the part played so far), each 0 or 1.
type Rewards struct {
	// Format is 1 when the episode has turns and each reply was a complete
	// <think>…</think>\n<sql>…</sql> as distill.ParseReply accepts it: no format violation and no
	// truncated turn (a reply the length limit cut before its SQL was complete; distill counts it
	// apart, and a trainer should not reward it).
	Format int `json:"format"`
	// ExecOK is 1 when the final SQL (the last statement executed) ran: no error, timeout or
	// refusal.
	ExecOK int `json:"exec_ok"`
	// Converged is 1 when the episode ended by the same SQL twice in a row and that SQL ran;
	// repeating a failing statement does not converge.
	Converged int `json:"converged"`
	// Correct is 1 when the final SQL's full result matches the gold's (distill's judge,
	// datasets.Match); 0 until the episode is judged.
	Correct int `json:"correct"`
}

// Of returns the rewards of a trajectory, complete or partial.
func Of(tr *distill.Trajectory) Rewards {
	return From(len(tr.Turns), tr.FormatViolations, tr.TruncatedTurns, tr.ExecOK, tr.Converged, tr.Correct)
}

// From returns the rewards of an episode recorded elsewhere (a dataset row, an eval result):
// turns played, format violations and truncated turns among them, and the trajectory's exec_ok,
// converged and correct flags.
func From(turns, formatViolations, truncatedTurns int, execOK, converged, correct bool) Rewards {
	return Rewards{
		Format:    b2i(turns > 0 && formatViolations == 0 && truncatedTurns == 0),
		ExecOK:    b2i(execOK),
		Converged: b2i(converged && execOK),
		Correct:   b2i(correct),
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Weights weigh the rewards into one scalar (Total).
type Weights struct {
	Format    float64 `json:"format"`
	ExecOK    float64 `json:"exec_ok"`
	Converged float64 `json:"converged"`
	Correct   float64 `json:"correct"`
}

// DefaultWeights put most of the total on correctness and keep it in [0, 1].
var DefaultWeights = Weights{Format: 0.1, ExecOK: 0.1, Converged: 0.1, Correct: 0.7}

// Total is the weighted sum of r, rounded to 12 decimals so that 0.1+0.1+0.1+0.7 reads 1, not
// 1.0000000000000002.
func (w Weights) Total(r Rewards) float64 {
	t := w.Format*float64(r.Format) + w.ExecOK*float64(r.ExecOK) +
		w.Converged*float64(r.Converged) + w.Correct*float64(r.Correct)
	return math.Round(t*1e12) / 1e12
}

// String renders w in the form ParseWeights reads.
func (w Weights) String() string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return "format=" + f(w.Format) + ",exec_ok=" + f(w.ExecOK) + ",converged=" + f(w.Converged) + ",correct=" + f(w.Correct)
}

// ParseWeights reads "NAME=VALUE,…" with names format, exec_ok, converged and correct; names
// not listed weigh 0. An empty string is DefaultWeights. Values are finite numbers, negative
// ones included (a penalty).
func ParseWeights(s string) (Weights, error) {
	if strings.TrimSpace(s) == "" {
		return DefaultWeights, nil
	}
	var w Weights
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return Weights{}, fmt.Errorf("rewards: weight %q: want NAME=VALUE (names format, exec_ok, converged, correct)", item)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return Weights{}, fmt.Errorf("rewards: weight %s=%q is not a finite number", name, val)
		}
		if seen[name] {
			return Weights{}, fmt.Errorf("rewards: weight %s given twice", name)
		}
		seen[name] = true
		switch name {
		case "format":
			w.Format = v
		case "exec_ok":
			w.ExecOK = v
		case "converged":
			w.Converged = v
		case "correct":
			w.Correct = v
		default:
			return Weights{}, fmt.Errorf("rewards: unknown weight %q (names format, exec_ok, converged, correct)", name)
		}
	}
	return w, nil
}
