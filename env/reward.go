package env

import (
	"github.com/chainedsql/chainedsql/rewards"
	"github.com/chainedsql/chainedsql/rundir"
)

// stepRewards are a step's rewards as a trainer sums or stores them (docs/ENV.md, "Rewards"):
// under either reward mode the turn rewards of an episode sum to its final reward.
type stepRewards struct {
	// Reward is this turn's reward under the server's reward mode.
	Reward float64 `json:"reward"`
	// TurnRewards are the rewards of every turn so far, this one last.
	TurnRewards []float64 `json:"turn_rewards"`
	// FinalReward is the episode's total at done; null before.
	FinalReward *float64 `json:"final_reward"`
	// RewardMode is the server's --reward-mode.
	RewardMode rewards.Mode `json:"reward_mode"`
}

// turnRewards spreads tr's total over its turns under the server's reward mode.
func (s *Server) turnRewards(tr *rundir.Trajectory, done bool) stepRewards {
	turns, total := s.cfg.Weights.TurnRewards(tr, done, s.cfg.RewardMode)
	out := stepRewards{TurnRewards: turns, RewardMode: s.cfg.RewardMode}
	if n := len(turns); n > 0 {
		out.Reward = turns[n-1]
	}
	if done {
		out.FinalReward = &total
	}
	return out
}
