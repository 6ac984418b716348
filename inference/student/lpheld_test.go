package student

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// TestLogProbsHeldCompact: the log-probability entries of a reply at student serve's bound
// (serve.MaxLogprobEntries), as collect records them, are ids and float32 log-probabilities
// only. With top_logprobs 20 (16 choices × 3,120 tokens × 21, 1,048,320 entries) they hold
// under 12 bytes an entry on the heap (about 10 MB in all: an alternative is 8 bytes, a token
// 32); with top_logprobs 0, GRPO's case (16 × 65,536 tokens, 1,048,576 entries), every entry is
// a token's, whose Top slice header alone is 24 bytes, and they hold under 40 bytes an entry
// (about 38 MB). With each token's bytes and text as strings in every entry (the form before)
// they held about 92 and 98 bytes an entry, 96 and 103 MB.
func TestLogProbsHeldCompact(t *testing.T) {
	tok, err := tokenizer.Load(shared.Path(t, "tokenizer/qwen2.5"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tokens, top int
		bound       float64 // bytes held an entry
	}{{3120, 20, 12}, {65536, 0, 40}} {
		t.Run(fmt.Sprintf("top_logprobs %d", c.top), func(t *testing.T) {
			heldCompact(t, tok, 16, c.tokens, c.top, c.bound)
		})
	}
}

// heldCompact records choices × tokens entries with top alternatives each as collect does and
// fails when they hold more than bound bytes an entry.
func heldCompact(t *testing.T, tok *tokenizer.Tokenizer, choices, tokens, top int, bound float64) {
	vocab := tok.VocabSize()
	// The generator's top tokens of a step, one slice for every step: the generator's own
	// allocation, not what the student holds.
	var tops []generate.TokenProb
	if top > 0 {
		tops = make([]generate.TokenProb, top)
	}
	for j := range tops {
		tops[j] = generate.TokenProb{ID: (j*7919 + 13) % vocab, LogProb: -0.5 - float32(j)}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	streams := make([]*textStream, choices)
	for c := range streams {
		ts := &textStream{tok: tok, logProbs: true, emit: func(string, []TokenLogProb) error { return nil }}
		for i := range tokens {
			ts.record(generate.Token{ID: (i*104729 + c) % vocab, LogProb: -1.25, Top: tops})
		}
		ts.pendingLPs = nil // emitted: only the choice's entries stay
		streams[c] = ts
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	entries := 0
	for _, ts := range streams {
		for _, e := range ts.lps {
			entries += 1 + len(e.Top)
		}
	}
	runtime.KeepAlive(streams)
	perEntry := float64(held) / float64(entries)
	t.Logf("%d entries held in %d bytes (%.1f MB, %.1f bytes an entry)", entries, held, float64(held)/1e6, perEntry)
	if entries != choices*tokens*(1+top) {
		t.Fatalf("%d entries, want %d", entries, choices*tokens*(1+top))
	}
	if perEntry > bound {
		t.Errorf("%.1f bytes held an entry (%.1f MB for a reply at the bound); want under %g (ids and float32 log-probabilities only)", perEntry, float64(held)/1e6, bound)
	}
}
