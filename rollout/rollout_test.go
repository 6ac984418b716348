package rollout

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/rewards"
	"github.com/chainedsql/chainedsql/sandbox"
)

// tiny opens ../shared/models/tiny-qwen2-f32 with the Qwen2.5 tokenizer.
func tiny(t *testing.T, batch int) *student.Student {
	t.Helper()
	s, err := student.Open(shared.Path(t, "models/tiny-qwen2-f32"), student.Options{
		Tokenizer: shared.Path(t, "tokenizer/qwen2.5"), Generate: generate.Config{MaxBatch: batch}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sampleConfig samples the whole vocabulary (top-p 1): the random tiny checkpoint's
// distributions are nearly flat, so a nucleus holds most of its 151,936 ids and sorting it for
// every token (inference/generate's top-p) would be most of the test's time, ten times more
// under the race detector; a trained model's nucleus is a few ids.
func sampleConfig(t *testing.T, s *student.Student, tasks int, group int) Config {
	t.Helper()
	ts, err := datasets.LoadTasks(datasets.SpecSample, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) < tasks {
		t.Fatalf("the sample has %d tasks, want %d", len(ts), tasks)
	}
	conn := &sandbox.Connector{}
	t.Cleanup(func() { conn.Close() })
	w := rewards.DefaultWeights
	w.FormatPenalty = 0.05
	return Config{Tasks: ts[:tasks], Dialect: datasets.SQLite, Opener: conn, Generator: s.Generator(), Tokenizer: s.Tokenizer(),
		Model: "tiny", Group: group, Temperature: 1, TopP: 1, Seed: 7, MaxTokens: 8, Weights: &w, Mode: rewards.ModeDelta,
		Episode: episode.EpisodeOptions{MaxTurns: 2}}
}

// TestRolloutTiny is the check: 16 sample tasks × G=8 from the tiny checkpoint, written
// to Parquet and read back: every token column aligned, log-probs <= 0 on the sampled tokens
// and 0 elsewhere, the assistant mask on exactly the template's trainable spans (the decoded
// 1-runs are the spans' texts), the turn rewards summing to the reward, and each group's
// advantages summing to 0.
func TestRolloutTiny(t *testing.T) {
	s := tiny(t, 128)
	cfg := sampleConfig(t, s, 16, 8)
	rows, rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Episodes != 128 || rep.GeneratedTokens == 0 || rep.CachedTokens == 0 {
		t.Fatalf("report %+v: want 128 episodes, tokens generated, the shared prompts cached", rep)
	}
	// The first token of every turn is sampled after its prompt, not in a decode step.
	if rep.DecodeSteps == 0 || rep.DecodeStepTokens <= 0 || rep.DecodeStepTokens >= rep.GeneratedTokens || rep.DecodeStepTime <= 0 ||
		rep.DecodeStepTokensPerSec != float64(rep.DecodeStepTokens)/rep.DecodeStepTime.Seconds() {
		t.Fatalf("report %+v: want decode steps, fewer tokens in them than generated, their rate", rep)
	}
	path := filepath.Join(t.TempDir(), "rollout.parquet")
	if err := Write(path, rows); err != nil {
		t.Fatal(err)
	}
	back, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 128 {
		t.Fatalf("%d rows read back", len(back))
	}
	tok := s.Tokenizer()
	sums := map[int64]float64{}
	for i, r := range back {
		if r.Group != int64(i/8) || r.Sample != int64(i%8) || r.TaskID != cfg.Tasks[i/8].ID {
			t.Fatalf("row %d: task %s group %d sample %d", i, r.TaskID, r.Group, r.Sample)
		}
		n := len(r.TokenIDs)
		if len(r.AssistantMask) != n || len(r.SampledMask) != n || len(r.LogProbs) != n || len(r.TurnRewards) != int(r.Turns) {
			t.Fatalf("row %d: %d ids, %d mask, %d sampled, %d logprobs, %d turn rewards for %d turns", i, n, len(r.AssistantMask), len(r.SampledMask), len(r.LogProbs), len(r.TurnRewards), r.Turns)
		}
		sampled := 0
		for k := range n {
			if r.SampledMask[k] == 1 {
				sampled++
				if r.LogProbs[k] > 0 || math.IsNaN(float64(r.LogProbs[k])) || r.AssistantMask[k] != 1 {
					t.Fatalf("row %d token %d: sampled, log-prob %v, mask %d", i, k, r.LogProbs[k], r.AssistantMask[k])
				}
			} else if r.LogProbs[k] != 0 {
				t.Fatalf("row %d token %d: not sampled, log-prob %v", i, k, r.LogProbs[k])
			}
		}
		if int64(sampled) != r.GeneratedTokens || sampled == 0 { // every token generated is recorded, the stop token too
			t.Fatalf("row %d: %d sampled tokens, %d generated", i, sampled, r.GeneratedTokens)
		}
		checkMask(t, tok, r)
		sum := 0.0
		for _, x := range r.TurnRewards {
			sum += x
		}
		if math.Abs(sum-r.Reward) > 1e-9 {
			t.Fatalf("row %d: turn rewards %v sum to %v, reward %v", i, r.TurnRewards, sum, r.Reward)
		}
		sums[r.Group] += r.Advantage
	}
	for g, s := range sums {
		if math.Abs(s) > 1e-6 {
			t.Errorf("group %d: advantages sum to %v", g, s)
		}
	}
	if !slices.EqualFunc(rows, back, func(a, b Row) bool { return slices.Equal(a.TokenIDs, b.TokenIDs) && a.Advantage == b.Advantage }) {
		t.Error("the rows read back differ from those written")
	}
	t.Logf("%+v", rep)
}

// checkMask: the conversation's ids decode to its rendering, and the 1-runs of the assistant
// mask decode to the template's trainable spans, in order, once the special tokens a reply
// stopped on other than <|im_end|> (sampled, recorded before the template's closing
// <|im_end|>, not in the messages' text) are left out.
func checkMask(t *testing.T, tok Tokenizer, r Row) {
	t.Helper()
	imEnd, _ := tok.TokenID(chattmpl.ImEnd)
	special := tok.(interface{ IsSpecial(id int) bool })
	for k := len(r.TokenIDs) - 2; k >= 0; k-- {
		if r.SampledMask[k] == 1 && special.IsSpecial(int(r.TokenIDs[k])) && r.TokenIDs[k+1] == int32(imEnd) && r.SampledMask[k+1] == 0 {
			r.TokenIDs = slices.Delete(slices.Clone(r.TokenIDs), k, k+1)
			r.AssistantMask = slices.Delete(slices.Clone(r.AssistantMask), k, k+1)
			r.SampledMask = slices.Delete(slices.Clone(r.SampledMask), k, k+1)
		}
	}
	var msgs []chat.Message
	for _, m := range r.Messages {
		msgs = append(msgs, chat.Message{Role: m.Role, Content: m.Content})
	}
	text, spans := chattmpl.Render(msgs, false)
	ids := make([]int, len(r.TokenIDs))
	for i, id := range r.TokenIDs {
		ids[i] = int(id)
	}
	if got := tok.Decode(ids); got != text {
		t.Fatalf("task %s sample %d: the ids decode to\n%q\nthe conversation renders\n%q", r.TaskID, r.Sample, got, text)
	}
	var runs []string
	for k := 0; k < len(ids); {
		if r.AssistantMask[k] == 0 {
			k++
			continue
		}
		e := k
		for e < len(ids) && r.AssistantMask[e] == 1 {
			e++
		}
		runs = append(runs, tok.Decode(ids[k:e]))
		k = e
	}
	var want []string
	for _, s := range spans {
		want = append(want, text[s.Start:s.End])
	}
	if !slices.Equal(runs, want) {
		t.Fatalf("task %s sample %d: mask runs\n%q\nspans\n%q", r.TaskID, r.Sample, runs, want)
	}
}

// TestRolloutReproducible: each turn draws from its own seed, so with one sequence decoded at a
// time and no prefix reuse (every logit computed the same way) a rollout repeats bit for bit
// whatever order its episodes run in; another seed gives other episodes.
func TestRolloutReproducible(t *testing.T) {
	s, err := student.Open(shared.Path(t, "models/tiny-qwen2-f32"), student.Options{
		Tokenizer: shared.Path(t, "tokenizer/qwen2.5"), Generate: generate.Config{MaxBatch: 1, CacheTokens: -1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cfg := sampleConfig(t, s, 2, 2)
	a, _, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if !slices.Equal(a[i].TokenIDs, b[i].TokenIDs) || !slices.Equal(a[i].LogProbs, b[i].LogProbs) {
			t.Fatalf("row %d differs between runs", i)
		}
	}
	if slices.Equal(a[0].TokenIDs, a[1].TokenIDs) {
		t.Error("two samples of one task are the same episode")
	}
	cfg.Seed++
	c, _, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(a[0].TokenIDs, c[0].TokenIDs) {
		t.Error("another seed gave the same episode")
	}
}

func TestSetAdvantages(t *testing.T) {
	g := []Row{{Reward: 1}, {Reward: 0}, {Reward: 0}, {Reward: 1}}
	SetAdvantages(g, 1e-4)
	want := 0.5 / (math.Sqrt(1.0/3) + 1e-4) // sample std of {1, 0, 0, 1}: sqrt(1/3)
	for i, r := range g {
		w := want
		if r.Reward == 0 {
			w = -want
		}
		if math.Abs(r.Advantage-w) > 1e-12 {
			t.Errorf("row %d: advantage %v, want %v", i, r.Advantage, w)
		}
	}
	same := []Row{{Reward: -0.1}, {Reward: -0.1}, {Reward: -0.1}}
	SetAdvantages(same, 1e-4)
	one := []Row{{Reward: 0.7}}
	SetAdvantages(one, 1e-4)
	if same[0].Advantage != 0 || same[2].Advantage != 0 || one[0].Advantage != 0 {
		t.Errorf("equal rewards %v, a group of one %v: want 0", same, one[0].Advantage)
	}
}
