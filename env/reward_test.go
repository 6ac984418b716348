package env

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/rewards"
	"github.com/chainedsql/chainedsql/sandbox"
)

// wireStepRewards is a step's reward fields as a client decodes them.
type wireStepRewards struct {
	Done        bool            `json:"done"`
	Rewards     map[string]any  `json:"rewards"`
	Reward      *float64        `json:"reward"`
	TurnRewards []float64       `json:"turn_rewards"`
	FinalReward json.RawMessage `json:"final_reward"`
	RewardMode  string          `json:"reward_mode"`
}

// TestRewardModes plays one episode a trainer could produce (a reply without <think> whose SQL
// runs, a reply with prose after its blocks, then the gold twice) under each mode: the reply
// without <think> scores format 0 at once; the step rewards sum to the final reward; each step
// repeats the turn rewards so far; final_reward is null until done.
func TestRewardModes(t *testing.T) {
	task := tasksOf(t)[3]
	g := gold(t, task, datasets.SQLite)
	replies := []string{"<sql>" + g + "</sql>", answer("SELECT 1") + "\nHope this helps!", answer(g), answer(g)}
	for _, mode := range []rewards.Mode{rewards.ModeFinal, rewards.ModeDelta} {
		w := rewards.DefaultWeights
		w.FormatPenalty = 0.05
		_, url := testServer(t, Config{Weights: &w, RewardMode: mode})
		ep := start(t, url, task.ID, "")
		var got []float64
		var last wireStepRewards
		for i, c := range replies {
			var st wireStepRewards
			if code := call(t, "POST", url+"/v1/episodes/"+ep.EpisodeID+"/step", map[string]string{"content": c}, &st); code != 200 {
				t.Fatalf("%s step %d: %d", mode, i+1, code)
			}
			if st.Reward == nil || st.RewardMode != string(mode) || len(st.TurnRewards) != i+1 {
				t.Fatalf("%s step %d: %+v", mode, i+1, st)
			}
			if i == 0 && st.Rewards["format"] != 0.0 {
				t.Fatalf("%s: a reply without <think>: rewards %v, want format 0", mode, st.Rewards)
			}
			if st.Done != (i == len(replies)-1) || (string(st.FinalReward) == "null") == st.Done {
				t.Fatalf("%s step %d: done %v final_reward %s", mode, i+1, st.Done, st.FinalReward)
			}
			got = append(got, *st.Reward)
			for k, r := range got {
				if st.TurnRewards[k] != r {
					t.Fatalf("%s step %d: turn rewards %v, the steps gave %v", mode, i+1, st.TurnRewards, got)
				}
			}
			last = st
		}
		var final float64
		if err := json.Unmarshal(last.FinalReward, &final); err != nil {
			t.Fatal(err)
		}
		// Format 0, exec_ok, converged, correct, two malformed turns: 0.9 - 0.1.
		if final != 0.8 || last.Rewards["total"] != 0.8 {
			t.Fatalf("%s: final reward %v, rewards %v", mode, final, last.Rewards)
		}
		sum := 0.0
		for _, r := range got {
			sum += r
		}
		if math.Abs(sum-final) > 1e-9 {
			t.Errorf("%s: step rewards %v sum to %v, final %v", mode, got, sum, final)
		}
		if mode == rewards.ModeFinal && (got[0] != 0 || got[1] != 0 || got[2] != 0) {
			t.Errorf("final mode: step rewards %v before the end", got)
		}
		if mode == rewards.ModeDelta && got[0] != 0.1-0.05 {
			t.Errorf("delta mode: first step (runs, malformed) %v, want exec_ok less the penalty", got[0])
		}
	}
	if _, err := New(Config{Tasks: tasksOf(t), Dialects: []datasets.Dialect{datasets.SQLite}, Opener: &sandbox.Connector{}, RewardMode: "sum"}); err == nil {
		t.Error("reward mode sum accepted")
	}
}
