package cuda

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/inference/lm"
)

// Benchmarks of the model on the test backend (CHAINEDSQL_CUDA_TEST=cuda for the GPU). The
// checkpoint is CHAINEDSQL_CUDA_BENCH_MODEL (scripts/gpu-check.sh writes the random Qwen2.5-0.5B
// one there), else the tiny one from ../shared; on the emulator the figures only show that the
// code runs.
//
//	CHAINEDSQL_CUDA_TEST=cuda CHAINEDSQL_CUDA_BENCH_MODEL=/tmp/q05b go test ./inference/cuda -run '^$' -bench .

const envBenchModel = "CHAINEDSQL_CUDA_BENCH_MODEL"

// benched is the benchmarks' model, loaded once per process (and never closed: the process
// ends after the benchmarks).
var benched *Model

func benchModel(b *testing.B) *Model {
	b.Helper()
	if benched != nil {
		return benched
	}
	dir := os.Getenv(envBenchModel)
	if dir == "" {
		dir = tinyDir(b)
	}
	testDevice(b)
	m, err := Load(dir, Options{Backend: testBackend(), MaxRows: 128, CacheTokens: 1 << 18})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%s on %s", dir, m.Device())
	benched = m
	return m
}

// decodeRun prefills batch sequences with a short prompt each, then decodes steps tokens per
// sequence with device-side greedy sampling (the graph-replayed path), and returns the decode
// time.
func decodeRun(b *testing.B, m *Model, batch, promptLen, steps int, how Sampling) time.Duration {
	b.Helper()
	ctx := context.Background()
	st := make([]lm.Step, batch)
	hows := make([]Sampling, batch)
	out := make([]int, batch)
	for i := range st {
		c, err := m.NewCache(promptLen + steps + 1)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Release()
		st[i] = lm.Step{Cache: c, Tokens: prompt(promptLen, i, m.VocabSize())}
		hows[i] = how
	}
	if err := m.ForwardSample(ctx, st, hows, out, nil); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for range steps {
		for i := range st {
			st[i].Tokens = []int{out[i]}
		}
		if err := m.ForwardSample(ctx, st, hows, out, nil); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// BenchmarkDecode: greedy decode tokens per second at batch 1, 8, 32 and 128 (device sampling,
// graphs), after a 32-token prompt per sequence.
func BenchmarkDecode(b *testing.B) {
	m := benchModel(b)
	steps := 64
	if m.H < 256 {
		steps = 4 // the tiny model on the emulator: a smoke run
	}
	for _, batch := range []int{1, 8, 32, 128} {
		if m.H < 256 && batch > 8 {
			continue
		}
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				total += decodeRun(b, m, batch, 32, steps, Sampling{})
			}
			b.ReportMetric(float64(batch*steps*b.N)/total.Seconds(), "tok/s")
		})
	}
}

// BenchmarkDecodeTopP: batch 8 with top-p sampling on the device.
func BenchmarkDecodeTopP(b *testing.B) {
	sampledDecode(b, Sampling{Temperature: 0.7, TopP: 0.9, U: 0.5})
}

// BenchmarkDecodeNoCut: batch 8 sampled on the device at temperature 1 without top-p or top-k
// (the rollout setting: sample_rows' no-cut path, one pass of exponentials a row).
func BenchmarkDecodeNoCut(b *testing.B) {
	sampledDecode(b, Sampling{Temperature: 1, U: 0.5})
}

// sampledDecode times 32 steps (2 on a small model) of batch 8 sampled on the device as how says,
// after a 32-token prompt.
func sampledDecode(b *testing.B, how Sampling) {
	m := benchModel(b)
	steps := 32
	if m.H < 256 {
		steps = 2
	}
	var total time.Duration
	for b.Loop() {
		total += decodeRun(b, m, 8, 32, steps, how)
	}
	b.ReportMetric(float64(8*steps*b.N)/total.Seconds(), "tok/s")
}

// BenchmarkDecodeLogits: batch-1 decode through Forward, copying the logits back as the
// generate scheduler needs them.
func BenchmarkDecodeLogits(b *testing.B) {
	m := benchModel(b)
	steps := 64
	if m.H < 256 {
		steps = 4
	}
	ctx := context.Background()
	var total time.Duration
	for b.Loop() {
		c, err := m.NewCache(33 + steps)
		if err != nil {
			b.Fatal(err)
		}
		st := []lm.Step{{Cache: c, Tokens: prompt(32, 1, m.VocabSize())}}
		if err := m.Forward(ctx, st); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for range steps {
			st[0].Tokens = []int{hostArgmax(st[0].Logits)}
			if err := m.Forward(ctx, st); err != nil {
				b.Fatal(err)
			}
		}
		total += time.Since(start)
		c.Release()
	}
	b.ReportMetric(float64(steps*b.N)/total.Seconds(), "tok/s")
}

// BenchmarkPrefill: a 512-token prompt in one Forward (the last token's logits back).
func BenchmarkPrefill(b *testing.B) {
	m := benchModel(b)
	n := 512
	if m.H < 256 {
		n = 64
	}
	prefillRun(b, m, prompt(n, 3, m.VocabSize()))
}

// prefillRun times prompt p in one Forward per iteration, each into a new cache, and reports
// prompt tokens per second.
func prefillRun(b *testing.B, m *Model, p []int) {
	ctx := context.Background()
	var total time.Duration
	for b.Loop() {
		c, err := m.NewCache(len(p))
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := m.Forward(ctx, []lm.Step{{Cache: c, Tokens: p}}); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		c.Release()
	}
	b.ReportMetric(float64(len(p)*b.N)/total.Seconds(), "tok/s")
}

// BenchmarkPrefillLong: a 2,048-token prompt (a long schema prompt) in one Forward, four passes
// of MaxPass 512 whose attention reaches all the earlier keys, with prefill attention on the
// tensor cores (kernel=mma: attn_mma64/128) and on f32 FMAs (kernel=f32: attn_prefill); the
// tiny model on the emulator takes 256 tokens, a smoke run.
func BenchmarkPrefillLong(b *testing.B) {
	m := benchModel(b)
	n := 2048
	if m.H < 256 {
		n = 256
	}
	p := prompt(n, 5, m.VocabSize())
	defer m.setMMA(true)
	for _, kernel := range []string{"mma", "f32"} {
		b.Run("kernel="+kernel, func(b *testing.B) {
			m.setMMA(kernel == "mma")
			prefillRun(b, m, p)
		})
	}
}

// setMMA selects the prefill attention kernel of m's later passes: attn_mma where it takes
// the model's heads (on) or attn_prefill (off), with the tile size that goes with it.
func (m *Model) setMMA(on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.op.noMMA = !on
	m.qt = m.op.prefillTileTokens(m.geo)
}
