package generate_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/lm"
)

// samplingToy is the toy model sampling tokens itself (as the CUDA backend does on the device):
// ForwardSample picks by SamplingModel's contract (gentest.Sample) and leaves every step's Logits empty, so a scheduler reading logits
// after it would fail.
type samplingToy struct {
	*gentest.Toy
	sampleCalls, forwardCalls atomic.Int64
}

var _ generate.SamplingModel = (*samplingToy)(nil)

func (m *samplingToy) Forward(ctx context.Context, steps []lm.Step) error {
	m.forwardCalls.Add(1)
	return m.Toy.Forward(ctx, steps)
}

func (m *samplingToy) ForwardSample(ctx context.Context, steps []lm.Step, how []lm.Sampling, out []int, logProbs []float32) error {
	m.sampleCalls.Add(1)
	if len(out) != len(steps) || len(how) != len(steps) || (logProbs != nil && len(logProbs) != len(steps)) {
		return fmt.Errorf("ForwardSample: %d steps, %d samplings, %d outputs, %d log-probabilities", len(steps), len(how), len(out), len(logProbs))
	}
	if err := m.Toy.Forward(ctx, steps); err != nil {
		return err
	}
	for i := range steps {
		tok, _, lp := gentest.Sample(steps[i].Logits, how[i])
		out[i] = tok
		if logProbs != nil {
			logProbs[i] = float32(lp)
		}
		steps[i].Logits = nil
	}
	return nil
}

// TestSamplingOnModel: on a model that samples itself, every request (sampled or greedy, with
// or without log-probabilities, batched with prompts still prefilling) goes through
// ForwardSample, never Forward, and gets the tokens and log-probabilities
// (within 1e-6) that the host sampler gives on the same logits for the same seeds: the
// scheduler takes each token's uniform from the request's source exactly when the host
// sampler does.
func TestSamplingOnModel(t *testing.T) {
	dev := &samplingToy{Toy: gentest.NewToy(64, 512)}
	host := gentest.NewToy(64, 512)
	cfg := generate.Config{MaxBatch: 4, PrefillChunk: 8}
	gd, gh := newGen(t, dev, cfg), newGen(t, host, cfg)
	var reqs []generate.Request
	for seed := range int64(3) {
		for _, s := range []lm.Sampling{
			{Temperature: 1}, {Temperature: 0.7, TopP: 0.9}, {Temperature: 1.3, TopK: 5}, {Temperature: 0.9, TopP: 0.8, TopK: 12},
			{Temperature: 0.5, TopK: 1}, {}, {Temperature: 2, TopK: 64},
		} {
			reqs = append(reqs, generate.Request{
				Prompt: seq(int(seed)*5+len(reqs), 6+len(reqs)%13), MaxTokens: 20, IgnoreEOS: true,
				Temperature: s.Temperature, TopP: s.TopP, TopK: s.TopK, Seed: seed*31 + 7, LogProbs: len(reqs)%3 != 2,
			})
		}
	}
	got, want := startRequests(t, gd, reqs), startRequests(t, gh, reqs)
	for i := range reqs {
		if !slices.Equal(got[i].Tokens, want[i].Tokens) {
			t.Fatalf("request %d (%+v): tokens %v, host sampler %v", i, reqs[i], got[i].Tokens, want[i].Tokens)
		}
		if len(got[i].LogProbs) != len(want[i].LogProbs) {
			t.Fatalf("request %d: %d log-probabilities, host sampler %d", i, len(got[i].LogProbs), len(want[i].LogProbs))
		}
		for j, lp := range got[i].LogProbs {
			if math.Abs(float64(lp-want[i].LogProbs[j])) > 1e-6 {
				t.Fatalf("request %d token %d: log-probability %v, host sampler %v", i, j, lp, want[i].LogProbs[j])
			}
		}
	}
	if n := dev.forwardCalls.Load(); n != 0 || dev.sampleCalls.Load() == 0 {
		t.Fatalf("%d Forward calls, %d ForwardSample; want only ForwardSample", n, dev.sampleCalls.Load())
	}
}

// TestHostOnlyOnSamplingModel: on a model that samples itself, a step carrying a request that
// asks for top log-probabilities or a logit bias runs Forward and samples on the host (the
// device gives neither), and every request of such a batch gets the host sampler's tokens and
// log-probabilities, as on a model without device sampling; without such a request the steps
// go through ForwardSample again.
func TestHostOnlyOnSamplingModel(t *testing.T) {
	dev := &samplingToy{Toy: gentest.NewToy(64, 512)}
	host := gentest.NewToy(64, 512)
	cfg := generate.Config{MaxBatch: 4}
	gd, gh := newGen(t, dev, cfg), newGen(t, host, cfg)
	reqs := []generate.Request{
		{Prompt: seq(1, 7), MaxTokens: 12, IgnoreEOS: true, Temperature: 0.9, Seed: 1, LogProbs: true, TopLogProbs: 3},
		{Prompt: seq(2, 9), MaxTokens: 12, IgnoreEOS: true, Seed: 2, LogitBias: map[int]float32{5: 4, 9: -100}},
		{Prompt: seq(3, 5), MaxTokens: 12, IgnoreEOS: true, Temperature: 1.1, TopP: 0.9, Seed: 3, LogProbs: true},
	}
	got, want := startRequests(t, gd, reqs), startRequests(t, gh, reqs)
	for i := range reqs {
		if !slices.Equal(got[i].Tokens, want[i].Tokens) || !slices.Equal(got[i].LogProbs, want[i].LogProbs) || len(got[i].TopLogProbs) != len(want[i].TopLogProbs) {
			t.Fatalf("request %d: %v %v, host %v %v", i, got[i].Tokens, got[i].LogProbs, want[i].Tokens, want[i].LogProbs)
		}
	}
	if dev.forwardCalls.Load() == 0 {
		t.Fatal("no Forward call for the requests that need the host")
	}
	before := dev.sampleCalls.Load()
	startRequests(t, gd, reqs[2:])
	if dev.sampleCalls.Load() == before {
		t.Fatal("a batch without top log-probs or bias did not sample on the device")
	}
}
