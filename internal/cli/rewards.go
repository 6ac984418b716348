package cli

import (
	"flag"
	"math"

	"github.com/chainedsql/chainedsql/rewards"
)

// Rewards is the rewards flag group: --weights, --format-penalty and --reward-mode.
type Rewards struct {
	weights, mode string
	penalty       float64
}

// AddRewards defines the rewards flags on fs.
func AddRewards(fs *flag.FlagSet) *Rewards {
	r := &Rewards{}
	fs.StringVar(&r.weights, "weights", rewards.DefaultWeights.String(), "weights of the rewards in \"total\" (names not listed weigh 0)")
	fs.Float64Var(&r.penalty, "format-penalty", 0, "subtracted from \"total\" once per malformed reply")
	fs.StringVar(&r.mode, "reward-mode", string(rewards.ModeFinal), "how an episode's total is spread over its turns: final (all on the last) or delta (each turn's change; they sum to the final reward)")
	return r
}

// Parse returns the weights (with the format penalty) and the mode, or a usage error.
func (r *Rewards) Parse() (rewards.Weights, rewards.Mode, error) {
	w, err := rewards.ParseWeights(r.weights)
	if err != nil {
		return w, "", Usagef("--weights: %v", err)
	}
	if math.IsNaN(r.penalty) || math.Abs(r.penalty) > rewards.MaxWeight {
		return w, "", Usagef("--format-penalty must be a number within ±%g", float64(rewards.MaxWeight))
	}
	w.FormatPenalty = r.penalty
	mode, err := rewards.ParseMode(r.mode)
	if err != nil {
		return w, "", Usagef("--reward-mode: %v", err)
	}
	return w, mode, nil
}
