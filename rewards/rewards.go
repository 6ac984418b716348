// Package rewards defines the rewards of a chained-sql/v1 episode once, for the RL environment
// (package env), student eval, student rollout and curate stats: format, exec_ok, converged and
// correct, each 0 or 1, their weighted total with a format penalty, and how that total is spread
// over the turns (Mode).
package rewards

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
)

// Rewards are the four rewards of an episode (or of the part played so far), each 0 or 1, and
// the count of malformed turns the format penalty is charged on.
type Rewards struct {
	// Format is 1 when the episode has turns and every reply was well-formed (rundir.Turn.WellFormed):
	// exactly one <think>…</think> then one <sql>…</sql> and nothing else.
	Format int `json:"format"`
	// ExecOK is 1 when the final SQL (the last statement executed) ran: no error, timeout or
	// refusal.
	ExecOK int `json:"exec_ok"`
	// Converged is 1 when the episode converged (rundir.Outcome.Converged: the same SQL twice in
	// a row, and that SQL ran; repeating a failing statement does not converge).
	Converged int `json:"converged"`
	// Correct is 1 when the final SQL's full result matches the gold's (distill's judge,
	// judge.Match); 0 until the episode is judged.
	Correct int `json:"correct"`
	// Malformed counts the replies that were not well-formed (rundir.Outcome.MalformedTurns).
	Malformed int `json:"malformed_turns"`
}

// Of returns the rewards of a trajectory, complete or partial.
func Of(tr *rundir.Trajectory) Rewards {
	return From(tr.Outcome())
}

// From returns the rewards of an episode from its outcome (Trajectory.Outcome, or one read back
// from a dataset row or an eval result): exec_ok, converged, correct and the malformed turns are
// the outcome's, format is 1 when it has turns and none is malformed.
func From(o rundir.Outcome) Rewards {
	return Rewards{
		Format:    b2i(o.Turns > 0 && o.MalformedTurns == 0),
		ExecOK:    b2i(o.ExecOK),
		Converged: b2i(o.Converged),
		Correct:   b2i(o.Correct),
		Malformed: o.MalformedTurns,
	}
}

// Prefixes returns the rewards of tr as they stood after each of its turns: element k-1 is the
// episode of the first k turns, the last one Of(tr). Before the last turn an episode has not
// converged and is not judged (converged and correct 0), and its exec_ok is that of the last
// statement executed so far, as the environment reported it at each step.
func Prefixes(tr *rundir.Trajectory) []Rewards {
	out := make([]Rewards, len(tr.Turns))
	execOK, malformed := false, 0
	for k, tu := range tr.Turns {
		if tu.Exec != nil {
			execOK = tu.Exec.Outcome == sandbox.OutcomeOK
		}
		if !tu.WellFormed() {
			malformed++
		}
		out[k] = From(rundir.Outcome{Turns: k + 1, ExecOK: execOK, MalformedTurns: malformed})
	}
	if n := len(out); n > 0 {
		out[n-1] = Of(tr)
	}
	return out
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
	// FormatPenalty is subtracted from the total once per malformed turn (0 by default).
	FormatPenalty float64 `json:"format_penalty"`
}

// DefaultWeights put most of the total on correctness and keep it in [0, 1].
var DefaultWeights = Weights{Format: 0.1, ExecOK: 0.1, Converged: 0.1, Correct: 0.7}

// Total is the weighted sum of r less FormatPenalty per malformed turn, rounded to 12 decimals
// so that 0.1+0.1+0.1+0.7 reads 1, not 1.0000000000000002.
func (w Weights) Total(r Rewards) float64 {
	t := w.Format*float64(r.Format) + w.ExecOK*float64(r.ExecOK) +
		w.Converged*float64(r.Converged) + w.Correct*float64(r.Correct) - w.FormatPenalty*float64(r.Malformed)
	return round12(t)
}

func round12(x float64) float64 { return math.Round(x*1e12) / 1e12 }

// String renders the four weights in the form ParseWeights reads (FormatPenalty is a flag of
// its own).
func (w Weights) String() string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return "format=" + f(w.Format) + ",exec_ok=" + f(w.ExecOK) + ",converged=" + f(w.Converged) + ",correct=" + f(w.Correct)
}

// MaxWeight bounds the magnitude of a weight and of the format penalty, so that every total
// (a few weights and a penalty per turn) stays a finite number.
const MaxWeight = 1e6

// ParseWeights reads "NAME=VALUE,…" with names format, exec_ok, converged and correct; names
// not listed weigh 0. An empty string is DefaultWeights. Values are numbers within ±MaxWeight,
// negative ones included (a penalty). FormatPenalty is left 0.
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
		if math.Abs(v) > MaxWeight {
			return Weights{}, fmt.Errorf("rewards: weight %s=%s is beyond ±%g", name, strings.TrimSpace(val), float64(MaxWeight))
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

// Mode says how an episode's total is spread over its turns (TurnRewards). Either way the
// turn rewards sum to the final reward, so a trainer that sums step rewards (OpenRLHF) and one
// that takes the last (TRL, verl) see the same return.
type Mode string

// The reward modes.
const (
	// ModeFinal gives every turn 0 and the last one the episode's total.
	ModeFinal Mode = "final"
	// ModeDelta gives each turn the change of the running total it caused (Prefixes): format
	// and exec_ok are credited when earned and taken back when lost.
	ModeDelta Mode = "delta"
)

// ParseMode reads "final" or "delta"; "" is ModeFinal.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeFinal:
		return ModeFinal, nil
	case ModeDelta:
		return ModeDelta, nil
	}
	return "", fmt.Errorf("rewards: reward mode %q: want final or delta", s)
}

// TurnRewards returns the reward of each turn of tr under mode, and the total of the episode
// as played (its final reward once done). The turn rewards of a done episode sum to that total
// up to float rounding (each is rounded to 12 decimals); those of an episode still in play are
// the ones the finished episode will start with (all 0 under ModeFinal).
func (w Weights) TurnRewards(tr *rundir.Trajectory, done bool, mode Mode) (turns []float64, total float64) {
	pre := Prefixes(tr)
	turns = make([]float64, len(pre))
	if len(pre) == 0 {
		return turns, w.Total(Of(tr))
	}
	total = w.Total(pre[len(pre)-1])
	switch {
	case mode == ModeDelta:
		prev := 0.0
		for k, r := range pre {
			t := w.Total(r)
			turns[k] = round12(t - prev)
			prev = t
		}
	case done:
		turns[len(turns)-1] = total
	}
	return turns, total
}
