package qwen2

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

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

// TestGeneratorStatsKVMemory: the generator's KV memory counters are current once a request has
// ended, with reuse off (its cache released) and on (its cache kept).
func TestGeneratorStatsKVMemory(t *testing.T) {
	m := smallModel(t, safetensors.F32, Options{}, nil)
	for _, cacheTokens := range []int{-1, 1000} {
		g, err := generate.New(m, generate.Config{CacheTokens: cacheTokens})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Generate(context.Background(), generate.Request{Prompt: prompt(40, 1, m.VocabSize()), MaxTokens: 5, IgnoreEOS: true}); err != nil {
			t.Fatal(err)
		}
		st := g.Stats()
		blocks, bytes := m.KVBlocks()
		if st.KVBlocks != blocks || st.KVBytes != bytes || (cacheTokens < 0) != (blocks == 0) {
			t.Errorf("CacheTokens %d: stats say %d KV blocks (%d bytes), the model holds %d (%d bytes)", cacheTokens, st.KVBlocks, st.KVBytes, blocks, bytes)
		}
		g.Close()
	}
}

// TestGeneratorMemoryBounded runs waves of concurrent requests with distinct prompts through the
// generator, as a long eval or a long-running server sees them (some over one of a few system
// prompts, some follow-up turns, some sharing nothing, some cancelled midway): after every wave the
// kept caches hold at most CacheTokens tokens and KV memory (blocks of 16 tokens, rounded up by
// one block), however many requests went through, and nothing outlives the generator.
func TestGeneratorMemoryBounded(t *testing.T) {
	const bound = 320
	m := smallModel(t, safetensors.F32, Options{}, nil)
	V := m.VocabSize()
	g, err := generate.New(m, generate.Config{MaxBatch: 4, PrefillChunk: 24, StepTokens: 96, CacheTokens: bound, Headroom: 16})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	toks := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = rng.IntN(V)
		}
		return out
	}
	systems := [][]int{toks(70), toks(45), toks(100)}
	var history [][]int
	peak := 0
	for wave := range 30 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var done [][]int
		for range 6 {
			var p []int
			switch r := rng.IntN(10); {
			case r < 6:
				p = append(slices.Clone(systems[rng.IntN(len(systems))]), toks(1+rng.IntN(12))...)
			case r < 8 && len(history) > 0: // the waves before this one's
				p = append(slices.Clone(history[rng.IntN(len(history))]), toks(1+rng.IntN(6))...)
			default:
				p = toks(1 + rng.IntN(60))
			}
			if len(p) > 150 {
				p = p[len(p)-150:]
			}
			cancelAfter := time.Duration(0)
			if rng.IntN(5) == 0 {
				cancelAfter = time.Duration(1+rng.IntN(3)) * time.Millisecond
			}
			wg.Go(func() {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if cancelAfter > 0 {
					time.AfterFunc(cancelAfter, cancel)
				}
				r, err := g.Generate(ctx, generate.Request{Prompt: p, MaxTokens: 1 + len(p)%8, IgnoreEOS: true})
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Error(err)
				}
				if err == nil {
					mu.Lock()
					done = append(done, append(slices.Clone(p), r.Tokens...))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		history = append(history, done...)
		st := g.Stats()
		blocks, _ := m.KVBlocks()
		peak = max(peak, blocks)
		if st.CacheTokensNow > bound || blocks*16 > bound+16 || st.KVBlocks != blocks {
			t.Fatalf("wave %d: %d kept caches hold %d tokens in %d KV blocks (stats say %d), bound %d tokens", wave, st.CachesKept, st.CacheTokensNow, blocks, st.KVBlocks, bound)
		}
	}
	st := g.Stats()
	g.Close()
	if live, _ := m.KVBlocks(); live != 0 {
		t.Fatalf("%d KV blocks alive after Close", live)
	}
	if st.Requests < 150 || st.Evicted == 0 || st.PrefixHits == 0 {
		t.Fatalf("stats %+v: want most of the 180 requests run, evictions and reuse", st)
	}
	t.Logf("%d requests, %d prefix hits, %d evicted, peak %d KV blocks", st.Requests, st.PrefixHits, st.Evicted, peak)
}

// TestGeneratorWholePromptCached: a prompt the kept caches hold in full, or a prefix of one ending
// on a block boundary or inside a block, is forked at all but its last token, which is run for
// the logits: outputs, greedy and sampled, are those of a generator that computes everything.
// The forks write into the blocks they share with the kept caches (copying them first), and the
// last requests read those kept caches again, past where the forks wrote. (Sampled requests are
// what tell: a random model's greedy tokens hardly depend on the context; a fork writing into a
// shared block without copying it fails this test only through them.)
func TestGeneratorWholePromptCached(t *testing.T) {
	// A large vocabulary makes a sample move with any change of the logits.
	m := smallModel(t, safetensors.F32, Options{}, func(s *spec) { s.vocab = 32000 })
	long := prompt(40, 3, m.VocabSize())
	greedy := func(p []int) generate.Request { return generate.Request{Prompt: p, MaxTokens: 6, IgnoreEOS: true} }
	sampled := func(p []int, seed int64) generate.Request {
		return generate.Request{Prompt: p, MaxTokens: 6, IgnoreEOS: true, Temperature: 1, Seed: seed}
	}
	wantCached := []int{0, 39, 39, 32, 20, 0, 39, 43}
	run := func(cacheTokens int) ([][]int, []int) {
		g, err := generate.New(m, generate.Config{CacheTokens: cacheTokens})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		var out [][]int
		var cached []int
		for i := range wantCached {
			var r generate.Request
			switch i {
			case 0, 1:
				r = greedy(long) // 1: the whole prompt kept, forked at 39 (in a block)
			case 2, 6:
				r = sampled(long, int64(i))
			case 3:
				r = greedy(long[:33]) // forked at 32, a block boundary
			case 4:
				r = sampled(long[:21], 5) // forked at 20, in the block before
			case 5:
				r = greedy(long[:1])
			case 7:
				r = sampled(append(slices.Clone(long), out[0][:4]...), 7) // the first reply's cache, past 39
			}
			res, err := g.Generate(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, res.Tokens)
			cached = append(cached, res.CachedTokens)
		}
		return out, cached
	}
	want, _ := run(-1)
	got, cached := run(1000)
	if !slices.Equal(cached, wantCached) {
		t.Fatalf("cached tokens %v, want %v", cached, wantCached)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("request %d: %v from the kept caches, %v computed", i, got[i], want[i])
		}
	}
}
