package generate_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/lm"
)

// greedyToy is the toy model picking greedy tokens itself (as the CUDA backend does on the
// device): ForwardGreedy returns ids and leaves every step's Logits empty, so a scheduler
// reading logits after it would fail.
type greedyToy struct {
	*gentest.Toy
	greedyCalls, forwardCalls atomic.Int64
}

func (m *greedyToy) Forward(ctx context.Context, steps []lm.Step) error {
	m.forwardCalls.Add(1)
	return m.Toy.Forward(ctx, steps)
}

func (m *greedyToy) ForwardGreedy(ctx context.Context, steps []lm.Step, out []int) error {
	m.greedyCalls.Add(1)
	if len(out) != len(steps) {
		panic("ForwardGreedy: out and steps differ in length")
	}
	if err := m.Toy.Forward(ctx, steps); err != nil {
		return err
	}
	for i := range steps {
		l := steps[i].Logits
		best := 0
		for j, v := range l {
			if v > l[best] {
				best = j
			}
		}
		out[i] = best
		steps[i].Logits = nil
	}
	return nil
}

// TestGreedyOnModel: greedy requests without log-probabilities go through ForwardGreedy (no
// logits), give the reference's tokens, and a batch holding a request that needs logits (a
// temperature or log-probabilities) goes through Forward.
func TestGreedyOnModel(t *testing.T) {
	toy := &greedyToy{Toy: gentest.NewToy(64, 512)}
	g := newGen(t, toy, generate.Config{MaxBatch: 4, PrefillChunk: 8})
	prompts := [][]int{seq(3, 20), seq(5, 9), seq(11, 30)}
	res := startAll(t, g, prompts, 12)
	for i, r := range res {
		if want := refGreedy(toy.Toy, prompts[i], 12); !slices.Equal(r.Tokens, want) {
			t.Fatalf("request %d: got %v, want %v", i, r.Tokens, want)
		}
	}
	if n := toy.forwardCalls.Load(); n != 0 || toy.greedyCalls.Load() == 0 {
		t.Fatalf("greedy requests: %d Forward calls, %d ForwardGreedy; want only ForwardGreedy", n, toy.greedyCalls.Load())
	}
	for _, req := range []generate.Request{
		{Prompt: seq(7, 10), MaxTokens: 5, LogProbs: true},
		{Prompt: seq(7, 10), MaxTokens: 5, Temperature: 0.7, Seed: 3},
	} {
		toy.forwardCalls.Store(0)
		r, err := g.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if toy.forwardCalls.Load() == 0 {
			t.Fatalf("%+v ran without Forward", req)
		}
		if req.LogProbs && len(r.LogProbs) != len(r.Tokens) {
			t.Fatalf("log-probabilities %v for tokens %v", r.LogProbs, r.Tokens)
		}
	}
}

// TestGreedyBiasOnModel: a greedy request with a logit bias is not the model's argmax: its
// steps run Forward and the host picks from the biased logits.
func TestGreedyBiasOnModel(t *testing.T) {
	m := &greedyToy{Toy: gentest.NewToy(64, 512)}
	g := newGen(t, m, generate.Config{})
	plain, err := g.Generate(context.Background(), generate.Request{Prompt: seq(4, 8), MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Generate(context.Background(), generate.Request{Prompt: seq(4, 8), MaxTokens: 3, LogitBias: map[int]float32{plain.Tokens[0]: -100}})
	if err != nil || res.Tokens[0] == plain.Tokens[0] || m.forwardCalls.Load() == 0 {
		t.Fatalf("biased greedy: %v (plain %v), %v, %d Forward calls", res.Tokens, plain.Tokens, err, m.forwardCalls.Load())
	}
}
