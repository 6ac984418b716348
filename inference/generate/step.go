package generate

import (
	"fmt"
	"slices"
	"time"

	"github.com/chainedsql/chainedsql/inference/lm"
)

// step runs one Forward over all active sequences and samples where a prompt or a decode step
// completed.
func (g *Generator) step() {
	steps := make([]lm.Step, 0, len(g.active))
	seqs := make([]*Sequence, 0, len(g.active))
	budget := g.cfg.StepTokens
	began := time.Now()
	// Decoding sequences first: one token each, always.
	for _, s := range g.active {
		if len(s.todo) == 1 && len(s.fed) >= len(s.req.Prompt) {
			steps = append(steps, lm.Step{Cache: s.cache, Tokens: s.todo, Logits: s.logits})
			seqs = append(seqs, s)
			budget--
		}
	}
	decoding := len(steps) // a decode step if no prompt chunk joins them
	for _, s := range g.active {
		if len(s.todo) == 1 && len(s.fed) >= len(s.req.Prompt) {
			continue
		}
		n := min(len(s.todo), g.cfg.PrefillChunk, budget)
		if n <= 0 {
			if len(steps) > 0 {
				continue
			}
			n = min(len(s.todo), g.cfg.PrefillChunk)
		}
		steps = append(steps, lm.Step{Cache: s.cache, Tokens: s.todo[:n], Logits: s.logits})
		seqs = append(seqs, s)
		budget -= n
	}
	tokens := 0
	for _, st := range steps {
		tokens += len(st.Tokens)
	}
	// Greedy requests that want no log-probabilities need only the argmax: a model that picks
	// it on the device copies back one id per sequence instead of a row of logits.
	greedy := g.greedy != nil
	for _, s := range seqs {
		greedy = greedy && s.deviceGreedy()
	}
	// Otherwise a model that samples on the device does so (forwardSample).
	sampled := !greedy && g.sampling != nil
	var err error
	switch {
	case greedy:
		g.picked = slices.Grow(g.picked[:0], len(steps))[:len(steps)]
		err = g.greedy.ForwardGreedy(g.ctx, steps, g.picked)
	case sampled:
		err = g.forwardSample(seqs, steps)
	default:
		err = g.model.Forward(g.ctx, steps)
	}
	g.statsMu.Lock()
	g.stats.Forwards++
	g.stats.ForwardTokens += int64(tokens)
	g.stats.MaxBatchSeen = max(g.stats.MaxBatchSeen, len(steps))
	g.statsMu.Unlock()
	if err != nil {
		if g.ctx.Err() != nil {
			return // shutdown ends everything
		}
		err = fmt.Errorf("generate: forward of %d sequences, %d tokens: %w", len(steps), tokens, err)
		for _, s := range seqs {
			g.fail(s, err)
		}
		g.removeEnded()
		return
	}
	var drawn []draw
	if !greedy && !sampled {
		drawn = g.sampleAll(seqs, steps)
	}
	// The sequences this step finishes end after the step's stats are in, so a caller that saw
	// its sequence end reads Stats with this step counted.
	type ending struct {
		s      *Sequence
		reason string
		stopID int
	}
	var ends []ending
	generated := 0
	for i, s := range seqs {
		st := steps[i]
		s.logits = st.Logits
		s.fed = append(s.fed, st.Tokens...)
		s.todo = s.todo[len(st.Tokens):]
		if len(s.todo) > 0 {
			continue // prompt not yet complete
		}
		var tok int
		if greedy || sampled {
			tok = g.picked[i]
			if tok < 0 || tok >= g.vocab {
				g.fail(s, fmt.Errorf("generate: model picked token %d outside the vocabulary of %d", tok, g.vocab))
				continue
			}
			if sampled && s.req.LogProbs {
				s.mu.Lock()
				s.logprobs = append(s.logprobs, g.lps[i])
				s.mu.Unlock()
			}
		} else {
			if len(st.Logits) < g.vocab {
				g.fail(s, fmt.Errorf("generate: model returned %d logits, want %d", len(st.Logits), g.vocab))
				continue
			}
			tok = drawn[i].tok
			if s.req.LogProbs {
				s.mu.Lock()
				s.logprobs = append(s.logprobs, drawn[i].logProb)
				s.mu.Unlock()
			}
		}
		generated++
		if s.first.IsZero() {
			s.first = time.Now()
		}
		if isStop(s.stops, tok) {
			g.keep(s)
			ends = append(ends, ending{s, FinishStop, tok})
			continue
		}
		s.emit(tok)
		s.mu.Lock()
		n := len(s.toks)
		s.mu.Unlock()
		if n >= s.req.MaxTokens || len(s.fed)+1 > s.capacity {
			g.keep(s)
			ends = append(ends, ending{s, FinishLength, -1})
			continue
		}
		s.todo = []int{tok}
	}
	g.statsMu.Lock()
	g.stats.Generated += int64(generated)
	if decoding == len(steps) {
		g.stats.DecodeSteps++
		g.stats.DecodeTokens += int64(generated)
		g.stats.DecodeTime += time.Since(began)
	}
	g.statsMu.Unlock()
	for _, e := range ends {
		e.s.end(e.reason, e.stopID, nil)
	}
	g.removeEnded()
}

func isStop(stops []int, tok int) bool {
	for _, id := range stops {
		if id == tok {
			return true
		}
	}
	return false
}
