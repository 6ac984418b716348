package qwen2

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/safetensors"
)

// TestGeneratorSharing runs one batch through the generator on a random small model (blocks of
// 16 tokens) with prefix sharing and without: twelve requests over two 90-token prefixes, all
// submitted at once, under a CacheTokens bound small enough to evict (it bounds the KV blocks
// kept, too), then a second turn of each
// conversation. Greedy outputs are identical both ways and no KV block outlives the generator.
func TestGeneratorSharing(t *testing.T) {
	m := smallModel(t, safetensors.F32, Options{}, nil)
	V := m.VocabSize()
	var prompts [][]int
	for p := range 2 {
		prefix := prompt(90, 10+p, V)
		for i := range 6 {
			prompts = append(prompts, append(slices.Clone(prefix), prompt(7+i, 20+i+6*p, V)...))
		}
	}
	run := func(cacheTokens int) ([][]int, generate.Stats) {
		g, err := generate.New(m, generate.Config{MaxBatch: 6, PrefillChunk: 32, StepTokens: 256, CacheTokens: cacheTokens})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		out := make([][]int, 2*len(prompts))
		for turn := range 2 {
			var wg sync.WaitGroup
			for i, p := range prompts {
				wg.Go(func() {
					if turn == 1 {
						p = append(append(slices.Clone(p), out[i]...), 1, 2, 3)
					}
					r, err := g.Generate(context.Background(), generate.Request{Prompt: p, MaxTokens: 10, IgnoreEOS: true})
					if err != nil {
						t.Error(err)
					}
					out[turn*len(prompts)+i] = r.Tokens
				})
			}
			wg.Wait()
		}
		return out, g.Stats()
	}
	want, _ := run(-1)
	got, st := run(400)
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("request %d: %v with sharing, %v without", i, got[i], want[i])
		}
	}
	if st.PrefixHits < 20 || st.Evicted == 0 || st.CacheTokensNow > 400 || st.KVBlocks*16 > 400 {
		t.Fatalf("stats %+v: want prefix hits, evictions, and the kept caches within 400 tokens of KV memory", st)
	}
	if live, _ := m.KVBlocks(); live != 0 {
		t.Fatalf("%d KV blocks alive after the generator closed", live)
	}
}
