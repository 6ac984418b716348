package generate_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/internal/shared"
)

var tinyIDs = []int{151644, 872, 198, 9707, 11, 1879, 0, 151645}

// tinyGreedy reads the 16-token greedy continuation of tinyIDs that llama.cpp produced.
func tinyGreedy(t *testing.T, dir string) []int {
	f, err := os.Open(filepath.Join(dir, "reference_logits.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ref struct {
		Greedy struct {
			Tokens []int `json:"tokens"`
		} `json:"greedy_continuation"`
	}
	if err := json.NewDecoder(f).Decode(&ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Greedy.Tokens) != 16 {
		t.Fatalf("reference continuation has %d tokens", len(ref.Greedy.Tokens))
	}
	return ref.Greedy.Tokens
}

// loadTiny loads ../shared/models/tiny-qwen2-f32 (closed at the end of the test).
func loadTiny(t *testing.T) (string, *qwen2.Model) {
	t.Helper()
	dir := shared.Path(t, "models/tiny-qwen2-f32")
	m, err := qwen2.Load(dir, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return dir, m
}

// TestTinyModel drives the real Qwen2 forward pass: the reference greedy continuation, alone and
// in a batch of four, stopping on eos, and a second turn served from the kept cache.
func TestTinyModel(t *testing.T) {
	dir, m := loadTiny(t)
	want := tinyGreedy(t, dir)
	g := newGen(t, m, generate.Config{StopIDs: m.EOS()})
	ctx := context.Background()

	res, err := g.Generate(ctx, generate.Request{Prompt: tinyIDs, MaxTokens: 16, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tokens, want) {
		t.Fatalf("greedy continuation\n got %v\nwant %v", res.Tokens, want)
	}
	// With eos ids on, the first token (151645, <|im_end|>) ends the request.
	res, err = g.Generate(ctx, generate.Request{Prompt: tinyIDs, MaxTokens: 16})
	if err != nil || len(res.Tokens) != 0 || res.FinishReason != generate.FinishStop || res.StopID != 151645 || res.LogProbs != nil {
		t.Fatalf("eos stop: %+v %v", res, err)
	}
	// Log-probs: one per token, the stop token's last; sampled ones are <= 0 and, greedy, the
	// same whatever ran beside them.
	lp, err := g.Generate(ctx, generate.Request{Prompt: tinyIDs, MaxTokens: 16, LogProbs: true})
	if err != nil || len(lp.LogProbs) != 1 || lp.LogProbs[0] > 0 {
		t.Fatalf("eos stop with log-probs: %+v %v", lp, err)
	}
	lp, err = g.Generate(ctx, generate.Request{Prompt: tinyIDs, MaxTokens: 16, IgnoreEOS: true, LogProbs: true, Temperature: 0.8, Seed: 3})
	if err != nil || len(lp.LogProbs) != len(lp.Tokens) || lp.FinishReason != generate.FinishLength {
		t.Fatalf("sampled with log-probs: %+v %v", lp, err)
	}
	for i, v := range lp.LogProbs {
		if v > 0 || v != v {
			t.Fatalf("log-prob %d of %d: %v", i, lp.Tokens[i], v)
		}
	}

	var wg sync.WaitGroup
	got := make([][]int, 4)
	for i := range got {
		wg.Go(func() {
			r, err := g.Generate(ctx, generate.Request{Prompt: tinyIDs, MaxTokens: 16, IgnoreEOS: true})
			if err != nil {
				t.Error(err)
			}
			got[i] = r.Tokens
		})
	}
	wg.Wait()
	for i, toks := range got {
		if !slices.Equal(toks, want) {
			t.Fatalf("batched request %d: %v", i, toks)
		}
	}

	// Turn two re-sends the history: only the new tokens are prefilled, the output continues
	// the reference.
	prompt := append(slices.Clone(tinyIDs), want[:8]...)
	res, err = g.Generate(ctx, generate.Request{Prompt: prompt, MaxTokens: 8, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.CachedTokens < len(tinyIDs) || !slices.Equal(res.Tokens, want[8:]) {
		t.Fatalf("second turn: cached %d, tokens %v, want %v", res.CachedTokens, res.Tokens, want[8:])
	}
}

// tinyShared returns n prompts of the tiny checkpoint's vocabulary: a common prefix of pre
// tokens and distinct suffixes of suf tokens.
func tinyShared(n, pre, suf int) [][]int {
	out := make([][]int, n)
	for i := range out {
		p := make([]int, 0, pre+suf)
		for j := range pre {
			p = append(p, (j*7919+13)%150000)
		}
		for j := range suf {
			p = append(p, (i*104729+j*31+1)%150000)
		}
		out[i] = p
	}
	return out
}

// generateAll runs the prompts concurrently (max tokens each, at temperature, request i seeded
// with i) and returns their results.
func generateAll(t *testing.T, g *generate.Generator, prompts [][]int, maxTokens int, temperature float64) []generate.Result {
	t.Helper()
	res := make([]generate.Result, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Go(func() {
			r, err := g.Generate(context.Background(), generate.Request{Prompt: p, MaxTokens: maxTokens, IgnoreEOS: true, Temperature: temperature, Seed: int64(i)})
			if err != nil {
				t.Error(err)
			}
			res[i] = r
		})
	}
	wg.Wait()
	return res
}

// TestTinySharedPrefix runs one batch on the tiny checkpoint with prefix sharing and without
// (CacheTokens -1): eight requests with a 600-token common prefix (three KV blocks, the last one
// partly filled and so copied on write) arriving together, then eight more after them, under a
// CacheTokens bound that evicts kept caches, each batch greedy and then sampled at temperature 1
// (seeded). The outputs are identical both ways, the prefix is computed once, and the KV blocks
// are all freed at the end. The sampled pass is what makes the test sensitive: the tiny
// checkpoint's random weights make its greedy tokens depend little on the context (a fork
// writing into the shared last block without copying it still gave the same greedy tokens),
// while a sample drawn from its near-uniform distribution moves with any change of a logit.
func TestTinySharedPrefix(t *testing.T) {
	_, m := loadTiny(t)
	first := tinyShared(8, 600, 24)
	second := tinyShared(16, 600, 40)[8:]
	run := func(cacheTokens int) ([][]int, generate.Stats) {
		g, err := generate.New(m, generate.Config{MaxBatch: 8, PrefillChunk: 128, StepTokens: 1024, CacheTokens: cacheTokens})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		var out [][]int
		for _, batch := range [][][]int{first, second} {
			for _, temp := range []float64{0, 1} {
				for _, r := range generateAll(t, g, batch, 12, temp) {
					out = append(out, r.Tokens)
				}
			}
		}
		return out, g.Stats()
	}
	want, plain := run(-1)
	got, st := run(1200)
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("request %d: %v with sharing, %v without", i, got[i], want[i])
		}
	}
	if plain.CachedTokens != 0 || st.CachedTokens < 15*600 || st.ForwardTokens > plain.ForwardTokens-15*600 {
		t.Fatalf("cached %d, forward tokens %d (%d without sharing): the prefix was not computed once", st.CachedTokens, st.ForwardTokens, plain.ForwardTokens)
	}
	if st.Evicted == 0 || st.CacheTokensNow > 1200 {
		t.Fatalf("stats %+v: want evictions under the 1200-token bound", st)
	}
	if live, _ := m.KVBlocks(); live != 0 {
		t.Fatalf("%d KV blocks alive after the generators closed", live)
	}
}
