package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/internal/shared"
)

func TestFigureMedian(t *testing.T) {
	for _, c := range []struct {
		in            []float64
		med, min, max float64
	}{{[]float64{3}, 3, 3, 3}, {[]float64{5, 1, 3}, 3, 1, 5}, {[]float64{4, 1, 3, 2}, 2.5, 1, 4}} {
		f := &Figure{Samples: c.in}
		f.summarise()
		if f.Median != c.med || f.Min != c.min || f.Max != c.max {
			t.Errorf("%v: median %g [%g, %g], want %g [%g, %g]", c.in, f.Median, f.Min, f.Max, c.med, c.min, c.max)
		}
	}
}

func TestWeightBytes(t *testing.T) {
	c := qwen2.Config{HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2, NumAttentionHeads: 4,
		NumKeyValueHeads: 2, HeadDim: 16, VocabSize: 1000}
	elems := int64(2*(64*64+2*64*32+64*64+3*64*128) + 1000*64)
	for dt, per := range map[cpu.DType]int64{cpu.F32: 4 * elems, cpu.BF16: 2 * elems, cpu.Q8: elems + elems/8} {
		total, perToken := weightBytes(c, dt)
		if perToken != per || total != per+per*1000*64/elems {
			t.Errorf("%v untied: total %d, per token %d; want %d, %d", dt, total, perToken, per+per*1000*64/elems, per)
		}
	}
	c.TieWordEmbeddings = true
	if total, perToken := weightBytes(c, cpu.BF16); total != perToken {
		t.Errorf("tied: total %d != per token %d", total, perToken)
	}
}

func TestCheck(t *testing.T) {
	ok := Options{Model: "m", Prompt: 1, Repeat: 1}
	for name, edit := range map[string]func(*Options){
		"no model":  func(o *Options) { o.Model = "" },
		"nothing":   func(o *Options) { o.Prompt = 0 },
		"negative":  func(o *Options) { o.Gen = -1 },
		"batch":     func(o *Options) { o.Batch = 2 },
		"repeat":    func(o *Options) { o.Repeat = 0 },
		"threads":   func(o *Options) { o.Threads = -1 },
		"bad dtype": func(o *Options) { o.DType = "int4" },
		"batch -1":  func(o *Options) { o.Batch = -1; o.Gen = 1 },
		"roofline":  func(o *Options) { o.Roofline = true },
		"roofline on cuda": func(o *Options) {
			o.Roofline, o.Gen, o.Backend = true, 1, "cuda"
		},
	} {
		o := ok
		edit(&o)
		if err := o.Check(); err == nil {
			t.Errorf("%s: no error", name)
		}
		if _, err := Run(context.Background(), o); err == nil || !strings.HasPrefix(err.Error(), "bench: ") {
			t.Errorf("%s: Run error %v, want a bench: error", name, err)
		}
	}
	if err := ok.Check(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

// TestFillDepth: a depth test's caches hold the depth tokens, each run starts from them again
// (a second run fits capacity only because the first was cut back), and a run computes what
// one sequence fed the same tokens computes.
func TestFillDepth(t *testing.T) {
	m, err := qwen2.Load(shared.Path(t, "models/tiny-qwen2-f32"), qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	const depth, gen = 40, 5
	f, err := newFill(ctx, m, 2, depth, depth+gen+1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.release()
	for _, c := range f.caches {
		if c.Len() != depth {
			t.Fatalf("filled cache holds %d tokens, want %d", c.Len(), depth)
		}
	}
	for run := range 3 {
		if _, err := f.decode(ctx, gen); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		for _, c := range f.caches {
			if c.Len() != depth+gen {
				t.Fatalf("run %d: cache holds %d tokens, want %d", run, c.Len(), depth+gen)
			}
		}
	}
	// Sequence 1 alone: its first depth+1 prompt tokens, then greedy steps; then one more
	// token on both.
	c, err := m.NewCache(depth + gen + 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	st := []lm.Step{{Cache: c, Tokens: prompt(depth+1, 1, m.VocabSize())}}
	for c.Len() < depth+gen {
		if err := m.Forward(ctx, st); err != nil {
			t.Fatal(err)
		}
		st[0].Tokens = []int{argmax(st[0].Logits)}
	}
	st[0].Tokens = []int{7}
	got := []lm.Step{{Cache: f.caches[1], Tokens: []int{7}}}
	if err := m.Forward(ctx, st); err != nil {
		t.Fatal(err)
	}
	if err := m.Forward(ctx, got); err != nil {
		t.Fatal(err)
	}
	for i, v := range st[0].Logits {
		if d := got[0].Logits[i] - v; d > 1e-4 || d < -1e-4 {
			t.Fatalf("logit %d after the run: %v, alone %v", i, got[0].Logits[i], v)
		}
	}
}
