package generate_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/internal/benchprocs"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// BenchmarkBatchedDecode measures generated tokens per second through the Generator on the tiny
// Qwen2 checkpoint with 1, 4 and 16 requests in flight: each request has a 16-token prompt and
// greedily generates 64 tokens, so decode steps dominate and all requests share every Forward.
func BenchmarkBatchedDecode(b *testing.B) {
	m, err := qwen2.Load(shared.Path(b, "models/tiny-qwen2-f32"), qwen2.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	const promptLen, gen = 16, 64
	for _, batch := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			g, err := generate.New(m, generate.Config{MaxBatch: batch, CacheTokens: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			tokens := 0
			b.ResetTimer()
			for it := range b.N {
				var wg sync.WaitGroup
				for r := range batch {
					prompt := make([]int, promptLen)
					for i := range prompt {
						prompt[i] = (it*7919 + r*104729 + i*31) % 150000
					}
					wg.Go(func() {
						res, err := g.Generate(context.Background(), generate.Request{Prompt: prompt, MaxTokens: gen, IgnoreEOS: true})
						if err != nil || len(res.Tokens) != gen {
							b.Errorf("%d tokens, %v", len(res.Tokens), err)
						}
					})
				}
				wg.Wait()
				tokens += batch * gen
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
			s := g.Stats()
			b.ReportMetric(float64(s.ForwardTokens)/float64(s.Forwards), "tokens/forward")
		})
	}
}

// BenchmarkSchedulerOverhead is the Generator's own cost per generated token (scheduling,
// sampling, streaming) with 16 requests in flight over a toy model of 64 logits whose Forward
// costs next to nothing.
func BenchmarkSchedulerOverhead(b *testing.B) {
	toy := gentest.NewToy(64, 1<<20)
	g, err := generate.New(toy, generate.Config{MaxBatch: 16})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	b.ResetTimer()
	for it := range b.N {
		var wg sync.WaitGroup
		for r := range 16 {
			wg.Go(func() {
				prompt := []int{it % 64, r, 1, 2}
				if _, err := g.Generate(context.Background(), generate.Request{Prompt: prompt, MaxTokens: 64, Temperature: 0.8, TopK: 20, Seed: int64(r), IgnoreEOS: true}); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		toy.ResetCalls()
	}
	b.ReportMetric(float64(b.N*16*64)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkSharedPrompt is eight requests with a common 1,024-token prompt prefix and their own
// 32-token suffixes, arriving together, 8 greedy tokens each, with prefix sharing and without
// (CacheTokens -1): on the tiny checkpoint, and on the 0.5B checkpoint that the qwen2 benchmarks
// keep in $CHAINEDSQL_BENCH_05B when that is set. req/s is requests completed per second.
func BenchmarkSharedPrompt(b *testing.B) {
	models := []string{shared.Path(b, "models/tiny-qwen2-f32")}
	if dir := os.Getenv("CHAINEDSQL_BENCH_05B"); dir != "" {
		models = append(models, dir)
	}
	for _, dir := range models {
		m, err := qwen2.Load(dir, qwen2.Options{})
		if err != nil {
			b.Fatal(err)
		}
		prompts := tinyShared(8, 1024, 32)
		for _, share := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/share=%v", filepath.Base(dir), share), func(b *testing.B) {
				defer cpu.SetThreads(cpu.Threads())
				cpu.SetThreads(benchprocs.Threads(b)) // the kernels' threads and the sampling workers follow -cpu
				cfg := generate.Config{MaxBatch: 8}
				if !share {
					cfg.CacheTokens = -1
				}
				var st generate.Stats
				for b.Loop() {
					g, err := generate.New(m, cfg)
					if err != nil {
						b.Fatal(err)
					}
					var wg sync.WaitGroup
					for _, p := range prompts {
						wg.Go(func() {
							if _, err := g.Generate(context.Background(), generate.Request{Prompt: p, MaxTokens: 8, IgnoreEOS: true}); err != nil {
								b.Error(err)
							}
						})
					}
					wg.Wait()
					st = g.Stats()
					g.Close()
				}
				b.ReportMetric(float64(len(prompts)*b.N)/b.Elapsed().Seconds(), "req/s")
				b.ReportMetric(float64(st.CachedTokens)/float64(st.PromptTokens), "cached-share")
			})
		}
		m.Close()
	}
}
