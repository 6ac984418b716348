package generate

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/chainedsql/chainedsql/inference/lm"
)

// step runs one Forward over the active sequences and takes a token for each whose prompt or
// decode step it completed: schedule the batch, forward it, count it, pick the host's tokens
// where the model gave logits, advance each sequence, count the step, end the finished ones.
func (g *Generator) step() {
	b := g.schedule()
	pick, err := g.forward(&b)
	g.countForward(&b)
	if err != nil {
		if g.ctx.Err() != nil {
			return // shutdown ends everything
		}
		err = fmt.Errorf("generate: forward of %d sequences, %d tokens: %w", len(b.steps), b.tokens, err)
		for _, s := range b.seqs {
			g.fail(s, err)
		}
		g.removeEnded()
		return
	}
	if pick == hostPicks {
		b.drawn = g.sampleAll(b.seqs, b.steps)
	}
	ends, generated := g.advance(&b, pick)
	g.countStep(&b, generated)
	// The sequences this step finishes end after the step's stats are in, so a caller that saw
	// its sequence end reads Stats with this step counted.
	for _, e := range ends {
		e.s.end(e.reason, e.stopID, nil)
	}
	g.removeEnded()
}

// batch is one Forward: steps[i] feeds seqs[i].
type batch struct {
	steps []lm.Step
	seqs  []*Sequence
	// decoding is how many steps, the first ones, decode (one token after the prompt); the
	// batch is a decode step when all do. tokens is the tokens of all steps.
	decoding, tokens int
	began            time.Time
	drawn            []draw // the host's picks (hostPicks)
}

// schedule builds the step's batch: every decoding sequence's one token, then prompt chunks of
// at most PrefillChunk tokens while StepTokens lasts (one chunk, whatever the budget, when no
// sequence decodes).
func (g *Generator) schedule() batch {
	b := batch{
		steps: make([]lm.Step, 0, len(g.active)),
		seqs:  make([]*Sequence, 0, len(g.active)),
		began: time.Now(),
	}
	budget := g.cfg.StepTokens
	// Decoding sequences first: one token each, always.
	for _, s := range g.active {
		if s.decoding() {
			b.steps = append(b.steps, lm.Step{Cache: s.cache, Tokens: s.todo, Logits: s.logits})
			b.seqs = append(b.seqs, s)
			budget--
		}
	}
	b.decoding = len(b.steps)
	for _, s := range g.active {
		if s.decoding() {
			continue
		}
		n := min(len(s.todo), g.cfg.PrefillChunk, budget)
		if n <= 0 {
			if len(b.steps) > 0 {
				continue
			}
			n = min(len(s.todo), g.cfg.PrefillChunk)
		}
		b.steps = append(b.steps, lm.Step{Cache: s.cache, Tokens: s.todo[:n], Logits: s.logits})
		b.seqs = append(b.seqs, s)
		budget -= n
	}
	for _, st := range b.steps {
		b.tokens += len(st.Tokens)
	}
	return b
}

// decoding reports whether s feeds one sampled token after its complete prompt.
func (s *Sequence) decoding() bool {
	return len(s.todo) == 1 && len(s.fed) >= len(s.req.Prompt)
}

// ending is a sequence the step finished, and why.
type ending struct {
	s      *Sequence
	reason string
	stopID int
}

// advance moves each sequence of b past the tokens it fed and, where its prompt is complete,
// takes its next token (accept). A sequence whose token is unusable fails at once. It returns
// the sequences to end and the tokens taken.
func (g *Generator) advance(b *batch, pick picker) (ends []ending, generated int) {
	for i, s := range b.seqs {
		st := b.steps[i]
		s.logits = st.Logits
		s.fed = append(s.fed, st.Tokens...)
		s.todo = s.todo[len(st.Tokens):]
		if len(s.todo) > 0 {
			continue // prompt not yet complete
		}
		tok, logProb, err := g.token(b, i, pick)
		if err == nil && s.req.LogProbs {
			err = finiteLogProbs(tok, logProb, b.drawn, i)
		}
		if err != nil {
			g.fail(s, err)
			continue
		}
		if s.req.LogProbs {
			s.mu.Lock()
			s.logprobs = append(s.logprobs, logProb)
			if s.req.TopLogProbs > 0 {
				s.tops = append(s.tops, b.drawn[i].top) // hostOnly: always the host's draw
			}
			s.mu.Unlock()
		}
		generated++
		if e, ok := g.accept(s, tok); ok {
			ends = append(ends, e)
		}
	}
	return ends, generated
}

// finiteLogProbs says why a draw's log-probabilities cannot be reported: NaN, which only
// logits that are not finite give (a checkpoint holding NaN or Inf), and which JSON cannot
// carry nor a trainer's importance ratio use. drawn holds the host's draws (nil when the
// device drew), whose top log-probabilities are checked too.
func finiteLogProbs(tok int, logProb float32, drawn []draw, i int) error {
	bad := math.IsNaN(float64(logProb))
	if i < len(drawn) {
		for _, t := range drawn[i].top {
			bad = bad || math.IsNaN(float64(t.LogProb))
		}
	}
	if bad {
		return fmt.Errorf("generate: the log-probabilities of the step that drew token %d are NaN: the model's logits are not finite (do the weights hold NaN or Inf?)", tok)
	}
	return nil
}

// accept takes tok as s's next token: a stop token or the length limit (MaxTokens, or the
// cache's capacity) finishes s, its cache kept; else tok is emitted and fed next.
func (g *Generator) accept(s *Sequence, tok int) (ending, bool) {
	if s.first.IsZero() {
		s.first = time.Now()
	}
	if isStop(s.stops, tok) {
		g.keep(s)
		return ending{s, FinishStop, tok}, true
	}
	s.emit(tok)
	s.mu.Lock()
	n := len(s.toks)
	s.mu.Unlock()
	if n >= s.req.MaxTokens || len(s.fed)+1 > s.capacity {
		g.keep(s)
		return ending{s, FinishLength, -1}, true
	}
	s.todo = []int{tok}
	return ending{}, false
}

// isStop reports whether tok is one of stops.
func isStop(stops []int, tok int) bool {
	return slices.Contains(stops, tok)
}
