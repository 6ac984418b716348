package qwen2

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/inference/safetensors"
	"github.com/chainedsql/chainedsql/internal/benchprocs"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// The benchmarks run the Qwen2.5-0.5B shape with random bf16 weights, written once per test
// process to a temporary directory (about 1 GB) and loaded per weight type: f32 and q8 are
// converted on load, bf16 is copied into huge-page memory (BenchmarkDecodeMmap: used in place
// from the mapped file). Run one weight type per process for a meaningful peak RSS (VmHWM), e.g.
//
//	go test ./inference/qwen2 -run '^$' -bench 'Decode/bf16' -benchtime 1x -cpu 2

// CHAINEDSQL_BENCH_05B=DIR keeps the checkpoint in DIR across processes (written there once), so
// a series of one-type-per-process runs does not rewrite 1 GB each time.
var bench05 struct {
	once sync.Once
	dir  string // a temporary checkpoint, removed at exit
	keep string // CHAINEDSQL_BENCH_05B's
	err  error
}

// dir05B is the checkpoint directory in use.
func dir05B() string {
	if bench05.keep != "" {
		return bench05.keep
	}
	return bench05.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bench05.dir != "" {
		os.RemoveAll(bench05.dir)
	}
	os.Exit(code)
}

func model05B(b *testing.B, wt WeightType) *Model { return model05BOpts(b, Options{DType: wt}) }

func model05BOpts(b *testing.B, opts Options) *Model {
	b.Helper()
	cpu.SetThreads(benchprocs.Threads(b)) // follow -cpu
	bench05.once.Do(func() {
		if dir := os.Getenv("CHAINEDSQL_BENCH_05B"); dir != "" {
			// A kept checkpoint: written on first use, reused by later processes.
			if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
				bench05.keep = dir
				return
			}
			if bench05.err = os.MkdirAll(dir, 0o755); bench05.err != nil {
				return
			}
			tmp, err := os.MkdirTemp(dir, ".writing-*")
			if err != nil {
				bench05.err = err
				return
			}
			writeCheckpoint(b, tmp, spec05B(safetensors.BF16))
			for _, f := range []string{"config.json", "generation_config.json", "model.safetensors"} { // the weights last
				if bench05.err = os.Rename(filepath.Join(tmp, f), filepath.Join(dir, f)); bench05.err != nil {
					return
				}
			}
			os.RemoveAll(tmp)
			bench05.keep = dir
			return
		}
		dir, err := os.MkdirTemp("", "qwen2-05b-*")
		if err != nil {
			bench05.err = err
			return
		}
		bench05.dir = dir
		writeCheckpoint(b, dir, spec05B(safetensors.BF16))
	})
	if bench05.err != nil {
		b.Fatal(bench05.err)
	}
	// Return the previous sub-benchmark's model to the OS first, so that peak RSS is one
	// model's.
	debug.FreeOSMemory()
	m, err := Load(dir05B(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

func reportMemory(b *testing.B) {
	b.ReportMetric(float64(shared.PeakRSS())/(1<<20), "MiB-peak-RSS")
}

var weightTypes = []WeightType{F32, BF16, Q8}

// BenchmarkPrefill512 is one Forward over a 512-token prompt (logits of the last token only),
// after one untimed warm-up Forward (as llama-bench's warm-up run: first-touch page faults of
// the scratch buffers and caches are not prefill speed).
func BenchmarkPrefill512(b *testing.B) {
	for _, wt := range weightTypes {
		b.Run(string(wt), func(b *testing.B) {
			m := model05B(b, wt)
			ids := prompt(512, 1, m.VocabSize())
			warm, _ := m.NewCache(512)
			if err := m.Forward(context.Background(), []lm.Step{{Cache: warm, Tokens: ids}}); err != nil {
				b.Fatal(err)
			}
			warm.Release()
			for b.Loop() {
				c, _ := m.NewCache(512)
				if err := m.Forward(context.Background(), []lm.Step{{Cache: c, Tokens: ids}}); err != nil {
					b.Fatal(err)
				}
				c.Release()
			}
			b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "tok/s")
			reportMemory(b)
		})
	}
}

// BenchmarkDecode is 128 greedy one-token steps after an 8-token prompt (the prompt untimed).
func BenchmarkDecode(b *testing.B) {
	for _, wt := range weightTypes {
		b.Run(string(wt), func(b *testing.B) {
			m := model05B(b, wt)
			benchDecode(b, m, 1)
		})
	}
}

// BenchmarkDecodeMmap is BenchmarkDecode for bf16 weights used in place from the mapped file
// (Options.Mmap) rather than copied into huge-page memory.
func BenchmarkDecodeMmap(b *testing.B) {
	b.Run("bf16", func(b *testing.B) {
		m := model05BOpts(b, Options{DType: BF16, Mmap: true})
		benchDecode(b, m, 1)
	})
}

// BenchmarkDecodeBatch is 32 decode steps of a batch of sequences in one Forward each (bf16);
// tok/s counts the tokens of all sequences.
func BenchmarkDecodeBatch(b *testing.B) {
	for _, n := range []int{1, 4, 8, 16} {
		b.Run(fmt.Sprintf("bf16/batch=%d", n), func(b *testing.B) {
			m := model05B(b, BF16)
			benchDecode(b, m, n)
		})
	}
}

func benchDecode(b *testing.B, m *Model, batch int) {
	ctx := context.Background()
	gen := 128
	if batch > 1 {
		gen = 32
	}
	for b.Loop() {
		b.StopTimer()
		steps := make([]lm.Step, batch)
		for i := range steps {
			c, _ := m.NewCache(8 + gen)
			steps[i] = lm.Step{Cache: c, Tokens: prompt(8, i, m.VocabSize())}
		}
		if err := m.Forward(ctx, steps); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for range gen {
			for i := range steps {
				steps[i].Tokens = []int{argmax(steps[i].Logits)}
			}
			if err := m.Forward(ctx, steps); err != nil {
				b.Fatal(err)
			}
		}
		for _, s := range steps {
			s.Cache.Release()
		}
	}
	b.ReportMetric(float64(gen*batch*b.N)/b.Elapsed().Seconds(), "tok/s")
	reportMemory(b)
}

// BenchmarkLoad is Load of the 0.5B checkpoint: in place (bf16), or converted to f32 or q8.
func BenchmarkLoad(b *testing.B) {
	for _, wt := range []WeightType{AsStored, F32, Q8} {
		name := string(wt)
		if wt == AsStored {
			name = "stored"
		}
		b.Run(name, func(b *testing.B) {
			model05B(b, AsStored).Close() // write the checkpoint outside the timing
			for b.Loop() {
				m, err := Load(dir05B(), Options{DType: wt})
				if err != nil {
					b.Fatal(err)
				}
				m.Close()
			}
		})
	}
}

// BenchmarkDecodeLong is 16 decode steps after a 2048-token prompt (untimed), bf16: the cost of
// attention over a long cache, as in an agentic conversation's later turns.
func BenchmarkDecodeLong(b *testing.B) {
	m := model05B(b, BF16)
	ctx := context.Background()
	const ctxLen, gen = 2048, 16
	for b.Loop() {
		b.StopTimer()
		c, _ := m.NewCache(ctxLen + gen)
		st := []lm.Step{{Cache: c, Tokens: prompt(ctxLen, 1, m.VocabSize())}}
		if err := m.Forward(ctx, st); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for range gen {
			st[0].Tokens = []int{argmax(st[0].Logits)}
			if err := m.Forward(ctx, st); err != nil {
				b.Fatal(err)
			}
		}
		c.Release()
	}
	b.ReportMetric(float64(gen*b.N)/b.Elapsed().Seconds(), "tok/s")
	reportMemory(b)
}

// BenchmarkAttendDecode is the attention of one decode step over a cache of 2048 tokens, all 24
// layers of the 0.5B shape (no weights involved): the per-token cost a long context adds.
func BenchmarkAttendDecode(b *testing.B) { benchAttendDecode(b, 0) }

// BenchmarkAttendDecodeBlocks is BenchmarkAttendDecode with KV blocks of 16, 64 and 256 tokens:
// decode attention works in chunks inside one block, so small blocks cost per-chunk overhead.
func BenchmarkAttendDecodeBlocks(b *testing.B) {
	for _, blk := range []int{16, 64, 256} {
		b.Run(fmt.Sprintf("block=%d", blk), func(b *testing.B) { benchAttendDecode(b, blk) })
	}
}

func benchAttendDecode(b *testing.B, block int) {
	cpu.SetThreads(benchprocs.Threads(b))
	const n = 2048
	m, c, s := attendSetup(b, block, n, false)
	spans := []span{{step: 0, lo: 0, hi: 1}}
	for b.Loop() {
		for l := range m.cfg.NumHiddenLayers {
			m.attend(l, s, []*Cache{c}, spans)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/token")
}

// attendSetup returns a model of the 0.5B shape without weights (KV blocks of block tokens, 0:
// the default; bf16 ones with kv16), a cache holding n tokens of random keys and values (the same
// values, seed 5, whatever kv16: bf16 holds them rounded) and a scratch whose one query row, at
// position n, sees all n+1.
func attendSetup(b *testing.B, block, n int, kv16 bool) (*Model, *Cache, *scratch) {
	sp := spec05B(safetensors.BF16)
	m := &Model{cfg: Config{HiddenSize: sp.hidden, IntermediateSize: sp.inter, NumHiddenLayers: sp.layers,
		NumAttentionHeads: sp.heads, NumKeyValueHeads: sp.kv, HeadDim: sp.hidden / sp.heads, VocabSize: sp.vocab, MaxPositionEmbeddings: sp.maxPos}}
	m.kv.block, m.kv.bf16 = block, kv16
	gc, err := m.NewCache(n + 1)
	if err != nil {
		b.Fatal(err)
	}
	c := gc.(*Cache)
	c.prepare(n + 1)
	r := rng(5)
	for _, blk := range c.blocks {
		for i := range max(len(blk.data), len(blk.data16)) {
			if x := r.uniform(1); kv16 {
				blk.data16[i] = cpu.F32ToBF16(x)
			} else {
				blk.data[i] = x
			}
		}
	}
	c.n = n
	s := m.getScratch(1)
	for i := range s.q {
		s.q[i] = r.uniform(1)
	}
	s.pos[0] = n // the token after the n cached ones sees n+1 keys
	return m, c, s
}

// BenchmarkAttendKV is the attention of one decode step at depth 2,048 (all 24 layers of the 0.5B
// shape) over KV caches holding the same values: f32 and bf16 blocks (rounded), in turn per
// iteration (the order alternating): the median wall ms of each, the process CPU ms of each
// (meanCPU: summed over the run, not per iteration) and their ratio bf16/f32 (the pairs ran back
// to back, so a change of load hits both). It checks that the outputs are close (the rounding of
// the values only).
func BenchmarkAttendKV(b *testing.B) {
	cpu.SetThreads(benchprocs.Threads(b))
	const n = 2048
	type variant struct {
		name      string
		kv16      bool
		m         *Model
		c         *Cache
		s         *scratch
		wall, cpu []time.Duration
	}
	vs := []*variant{{name: "f32"}, {name: "bf16", kv16: true}}
	spans := []span{{step: 0, lo: 0, hi: 1}}
	for _, v := range vs {
		v.m, v.c, v.s = attendSetup(b, 0, n, v.kv16)
		v.m.attend(0, v.s, []*Cache{v.c}, spans)
		for i, x := range vs[0].s.att {
			if d := math.Abs(float64(x - v.s.att[i])); d > 1e-2 {
				b.Fatalf("%s and f32 KV attention differ by %g at %d", v.name, d, i)
			}
		}
	}
	i := 0
	for b.Loop() {
		for j := range vs {
			v := vs[(i+j)%len(vs)]
			t, p := time.Now(), processCPU()
			for l := range v.m.cfg.NumHiddenLayers {
				v.m.attend(l, v.s, []*Cache{v.c}, spans)
			}
			v.wall, v.cpu = append(v.wall, time.Since(t)), append(v.cpu, processCPU()-p)
		}
		i++
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for _, v := range vs[1:] {
		b.ReportMetric(float64(meanCPU(v.cpu))/float64(meanCPU(vs[0].cpu)), "cpu-"+v.name+"/f32")
	}
	for _, v := range vs {
		b.ReportMetric(ms(meanCPU(v.cpu)), "ms-cpu-"+v.name)
		b.ReportMetric(ms(median(v.wall)), "ms-"+v.name)
	}
	for _, v := range vs {
		v.c.Release()
	}
}
