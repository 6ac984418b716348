package generate

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/chainedsql/chainedsql/inference/lm"
)

// GreedyModel is implemented by models that pick the greedy next token themselves (the CUDA
// backend, on the device). The scheduler calls ForwardGreedy instead of Forward for a step
// whose sequences are all greedy (temperature 0 or top-k 1) and want no log-probabilities,
// so that one id per sequence comes back instead of a row of logits.
type GreedyModel interface {
	// ForwardGreedy is Forward writing each step's argmax next token (the lowest index on
	// ties, NaNs ignored, as the host sampler's greedy pick) to out (len(steps) ids) instead
	// of its logits.
	ForwardGreedy(ctx context.Context, steps []lm.Step, out []int) error
}

// SamplingModel is implemented by models that sample the next token themselves (the CUDA
// backend, on the device). The scheduler calls ForwardSample instead of Forward for every step
// that GreedyModel does not take, so that one id (and, for requests that want them, one
// log-probability) per sequence comes back instead of a row of logits; the host sampler runs
// for models without it, and for the steps carrying a request that asks for top
// log-probabilities or a logit bias (Request.TopLogProbs, Request.LogitBias), which run
// Forward instead.
//
// The contract: for each step, out[i] is the token generate's host sampler would pick from the
// step's last logits with how[i]'s settings and uniform draw: the argmax (lowest index on ties,
// NaNs ignored) at temperature 0 or top-k 1; else the first token, in index order without a
// cut (top-k 0 or at least the vocabulary, top-p 1) and in falling-probability order (the
// lower id first on ties) with one, at which the probability mass of softmax(logits/T), cut to
// the top-k tokens and then to the shortest prefix holding top-p of what is left, summed
// so far, exceeds U times the mass kept. Sums in another order or precision may pick a
// neighbour when U lands within rounding of a boundary between two tokens, and nowhere else.
// With logProbs non-nil, logProbs[i] is out[i]'s log-probability as Result.LogProbs defines
// it, within float32 rounding. The uniform of a step whose prompt is not complete is unused
// (its pick is ignored). Steps, caches and errors are as for Forward; Logits are left alone.
type SamplingModel interface {
	// ForwardSample is Forward writing each step's next token, picked as how says, to out
	// (len(steps) ids) and, with logProbs (len(steps) values, else nil), its log-probability,
	// instead of its logits.
	ForwardSample(ctx context.Context, steps []lm.Step, how []lm.Sampling, out []int, logProbs []float32) error
}

// picker is where a step's next tokens come from.
type picker int

// Pickers.
const (
	hostPicks   picker = iota // the host samples from the logits (sampleAll)
	greedyPicks               // GreedyModel's argmax ids, in Generator.picked
	devicePicks               // SamplingModel's ids and log-probabilities (forwardSample)
)

// forward runs b through the model and returns where its tokens come from. Greedy requests
// that want no log-probabilities need only the argmax: a GreedyModel picks it on the device and
// copies back one id per sequence instead of a row of logits, when every sequence of b is one.
// Otherwise a SamplingModel samples on the device, unless a sequence of b needs the host
// (hostOnly), and any other model returns logits.
func (g *Generator) forward(b *batch) (picker, error) {
	greedy, host := g.greedy != nil, false
	for _, s := range b.seqs {
		greedy = greedy && s.deviceGreedy()
		host = host || s.hostOnly()
	}
	switch {
	case greedy:
		g.picked = slices.Grow(g.picked[:0], len(b.steps))[:len(b.steps)]
		return greedyPicks, g.greedy.ForwardGreedy(g.ctx, b.steps, g.picked)
	case g.sampling != nil && !host:
		return devicePicks, g.forwardSample(b.seqs, b.steps)
	}
	return hostPicks, g.model.Forward(g.ctx, b.steps)
}

// token returns the token picked for b.seqs[i] and, when its request asks for it, the token's
// log-probability; an error when the pick is unusable (an id outside the vocabulary, a row of
// logits too short).
func (g *Generator) token(b *batch, i int, pick picker) (int, float32, error) {
	if pick == hostPicks {
		if n := len(b.steps[i].Logits); n < g.vocab {
			return 0, 0, fmt.Errorf("generate: model returned %d logits, want %d", n, g.vocab)
		}
		return b.drawn[i].tok, b.drawn[i].logProb, nil
	}
	tok := g.picked[i]
	if tok < 0 || tok >= g.vocab {
		return 0, 0, fmt.Errorf("generate: model picked token %d outside the vocabulary of %d", tok, g.vocab)
	}
	var logProb float32
	if pick == devicePicks && b.seqs[i].req.LogProbs {
		logProb = g.lps[i]
	}
	return tok, logProb, nil
}

// draw is one sequence's sampled token and, when asked for, its log-probability and the most
// likely tokens of the step.
type draw struct {
	tok     int
	logProb float32
	top     []TokenProb
}

// sampleAll draws the next token of each sequence of the forward that completed its prompt
// (steps[i] is seqs[i]'s), on up to GOMAXPROCS goroutines: each sequence has its own sampler
// and logits, so the draws are those of one at a time, and a top-p draw over a vocabulary of
// 151,936 costs milliseconds that would otherwise add up, one sequence after another, while
// the cores the forward used sit idle.
func (g *Generator) sampleAll(seqs []*Sequence, steps []lm.Step) []draw {
	drawn := make([]draw, len(seqs))
	var todo []int
	for i, s := range seqs {
		if len(s.todo) == len(steps[i].Tokens) && len(steps[i].Logits) >= g.vocab {
			todo = append(todo, i)
		}
	}
	one := func(i int) {
		s, logits := seqs[i], steps[i].Logits[len(steps[i].Logits)-g.vocab:]
		logits = s.sampler.biased(logits)
		drawn[i].tok = s.sampler.sample(logits)
		if s.req.LogProbs {
			drawn[i].logProb, drawn[i].top = s.sampler.logProbs(logits, drawn[i].tok, s.req.TopLogProbs)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(todo))
	if workers <= 1 {
		for _, i := range todo {
			one(i)
		}
		return drawn
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for n := int(next.Add(1)) - 1; n < len(todo); n = int(next.Add(1)) - 1 {
				one(todo[n])
			}
		})
	}
	wg.Wait()
	return drawn
}

// forwardSample runs a step through the SamplingModel: a sequence whose prompt the step
// completes samples with its request's settings, taking the uniform of this token from its
// seeded source exactly when the host sampler would take one (deviceSampling), so that a seed
// gives the same tokens on both paths; the others' picks are not used.
func (g *Generator) forwardSample(seqs []*Sequence, steps []lm.Step) error {
	n := len(steps)
	g.picked = slices.Grow(g.picked[:0], n)[:n]
	g.how = slices.Grow(g.how[:0], n)[:n]
	var lps []float32
	for i, s := range seqs {
		g.how[i] = lm.Sampling{}
		if len(s.todo) == len(steps[i].Tokens) {
			g.how[i] = s.sampler.deviceSampling()
		}
		if s.req.LogProbs && lps == nil {
			g.lps = slices.Grow(g.lps[:0], n)[:n]
			lps = g.lps
		}
	}
	return g.sampling.ForwardSample(g.ctx, steps, g.how, g.picked, lps)
}

// deviceSampling returns s's settings for a model that samples on the device, with the next
// uniform of s's source when sample would draw one (temperature > 0, top-k not 1).
func (s *sampler) deviceSampling() lm.Sampling {
	d := lm.Sampling{Temperature: s.temperature, TopP: s.topP, TopK: s.topK}
	if s.temperature > 0 && s.topK != 1 {
		d.U = s.rng.Float64()
	}
	return d
}

// deviceGreedy reports whether s's next token is the argmax of its logits (as sampler.sample
// picks at temperature 0 or top-k 1) and s wants no log-probabilities nor a logit bias.
func (s *Sequence) deviceGreedy() bool {
	return (s.req.Temperature <= 0 || s.req.TopK == 1) && !s.req.LogProbs && !s.hostOnly()
}

// hostOnly reports whether s's tokens are sampled on the host whatever the model: it asks for
// top log-probabilities or a logit bias, which a model sampling on the device does not give.
func (s *Sequence) hostOnly() bool {
	return s.req.TopLogProbs > 0 || len(s.req.LogitBias) > 0
}
