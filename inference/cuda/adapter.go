package cuda

import (
	"context"
	"fmt"
	"math"

	"github.com/chainedsql/chainedsql/inference/lm"
)

// The lm.Model adapter: everything that depends on inference/lm's interface is in
// this file (the forward pass itself works on seq).

var (
	_ lm.Model = (*Model)(nil)
	_ lm.Cache = (*Cache)(nil)
)

// NewCache returns an empty KV cache for up to maxTokens tokens (1 ≤ maxTokens ≤
// ContextLength); it takes blocks of the device pool only as tokens are added.
func (m *Model) NewCache(maxTokens int) (lm.Cache, error) { return m.newCache(maxTokens) }

// Forward appends each step's tokens to its cache and writes its logits (lm.Model). All
// steps go through the layers together, as passes of up to Options.MaxPass tokens and
// Options.MaxRows sequences; every layer of a pass runs on the device without a host round
// trip, and only the logits asked for come back. A decode pass (one token per step) replays a
// CUDA graph captured for its bucket of batch sizes (decodeBucket). Forward checks every step before changing anything;
// on an error or a done ctx no cache's length changes.
func (m *Model) Forward(ctx context.Context, steps []lm.Step) error {
	seqs, err := m.seqsOf(steps)
	if err != nil || len(seqs) == 0 {
		return err
	}
	for i := range steps {
		seqs[i].logits = steps[i].Logits
	}
	if err := m.forward(ctx, seqs, nil, nil, nil); err != nil {
		return err
	}
	for i := range steps {
		steps[i].Logits = seqs[i].logits
	}
	return nil
}

// ForwardSample is Forward that samples each step's next token on the device, as how says,
// and writes it to out (len(steps) ids), copying no logits back; with logProbs (len(steps)
// values, else nil) it also writes each token's log-probability as generate's host sampler
// reports it. Steps must not ask for AllLogits, and their Logits are left as they are
// (generate.SamplingModel). The draw follows the host sampler's rule (sample_rows, in f64), so
// for the same uniforms it picks the same tokens except where a sum lands within rounding of
// a boundary between two tokens.
func (m *Model) ForwardSample(ctx context.Context, steps []lm.Step, how []Sampling, out []int, logProbs []float32) error {
	if len(how) != len(steps) || len(out) != len(steps) || (logProbs != nil && len(logProbs) != len(steps)) {
		return fmt.Errorf("cuda: ForwardSample: %d steps, %d samplings, %d outputs, %d log-probabilities", len(steps), len(how), len(out), len(logProbs))
	}
	for i, s := range how {
		if steps[i].AllLogits {
			return fmt.Errorf("cuda: ForwardSample: step %d asks for all logits", i)
		}
		if s.Temperature < 0 || s.TopP < 0 || s.TopP > 1 || s.TopK < 0 || s.U < 0 || s.U >= 1 || math.IsNaN(s.Temperature+s.TopP+s.U) {
			return fmt.Errorf("cuda: ForwardSample: step %d: sampling %+v out of range", i, s)
		}
	}
	seqs, err := m.seqsOf(steps)
	if err != nil || len(seqs) == 0 {
		return err
	}
	return m.forward(ctx, seqs, how, out, logProbs)
}

// seqsOf validates steps: caches of this model, not released nor shared, tokens in the
// vocabulary and within each cache's capacity.
func (m *Model) seqsOf(steps []lm.Step) ([]seq, error) {
	seqs := make([]seq, len(steps))
	for i := range steps {
		st := &steps[i]
		ca, ok := st.Cache.(*Cache)
		if !ok || ca == nil || ca.m != m {
			return nil, fmt.Errorf("cuda: step %d: cache %T is not one of this model's", i, st.Cache)
		}
		if ca.released {
			return nil, fmt.Errorf("cuda: step %d: cache was released", i)
		}
		if len(st.Tokens) == 0 {
			return nil, fmt.Errorf("cuda: step %d: no tokens", i)
		}
		if ca.n+len(st.Tokens) > ca.max {
			return nil, fmt.Errorf("cuda: step %d: %d tokens after %d exceed the cache's capacity of %d", i, len(st.Tokens), ca.n, ca.max)
		}
		for j, tok := range st.Tokens {
			if tok < 0 || tok >= m.V {
				return nil, fmt.Errorf("cuda: step %d: token %d at index %d is outside the vocabulary of %d", i, tok, j, m.V)
			}
		}
		for j := range i {
			if seqs[j].cache == ca {
				return nil, fmt.Errorf("cuda: steps %d and %d share one cache", j, i)
			}
		}
		seqs[i] = seq{cache: ca, tokens: st.Tokens, all: st.AllLogits}
	}
	return seqs, nil
}

// ForwardGreedy is Forward that writes each step's greedy next token (the argmax of its last
// logits, the lowest index on ties, NaNs ignored, as generate's host sampler picks it) to out
// (len(steps) ids), copying no logits back: the generate scheduler's path for greedy requests.
// Steps must not ask for AllLogits.
func (m *Model) ForwardGreedy(ctx context.Context, steps []lm.Step, out []int) error {
	return m.ForwardSample(ctx, steps, make([]Sampling, len(steps)), out, nil)
}
