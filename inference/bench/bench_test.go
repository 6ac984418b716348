package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
	q8 := elems + 4*elems/32 // by the configuration: f32 scales (Run counts the loaded matrices instead)
	for dt, per := range map[cpu.DType]int64{cpu.F32: 4 * elems, cpu.BF16: 2 * elems, cpu.Q8: q8} {
		held := per // in memory: a q8 scale takes its f32's 4 bytes in either layout
		if dt == cpu.Q8 {
			held = elems + elems/8
		}
		total, perToken, n := weightBytes(c, dt)
		if perToken != per || total != held+held*1000*64/elems || n != elems {
			t.Errorf("%v untied: total %d, per token %d, %d weights; want %d, %d, %d", dt, total, perToken, n, held+held*1000*64/elems, per, elems)
		}
	}
	c.TieWordEmbeddings = true
	if total, perToken, _ := weightBytes(c, cpu.BF16); total != perToken {
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
		"paired at depth 0": func(o *Options) { o.Paired, o.Gen = true, 1 },
		"paired, no decode": func(o *Options) { o.Paired, o.Depth = true, 10 },
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

// TestPairedRoofline runs the decode test on the tiny checkpoint paired with depth 0 and with
// read passes around each run: the samples are all there, and the medians and ratios are the
// ones the samples give.
func TestPairedRoofline(t *testing.T) {
	const repeat, gen = 3, 4
	var lines []string
	r, err := Run(context.Background(), Options{Model: shared.Path(t, "models/tiny-qwen2-f32"), Gen: gen, Depth: 30,
		Repeat: repeat, Threads: 2, Paired: true, Roofline: true, Progress: func(l string) { lines = append(lines, l) }})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Paired || len(r.Decode.Samples) != repeat || r.DecodeD0 == nil || len(r.DecodeD0.Samples) != repeat {
		t.Fatalf("paired %v, decode %+v, depth 0 %+v", r.Paired, r.Decode, r.DecodeD0)
	}
	if len(r.DepthRatioSamples) != repeat*gen || r.DepthRatio != median(r.DepthRatioSamples) || !(r.DepthRatio > 0) {
		t.Errorf("depth ratio %v of %v", r.DepthRatio, r.DepthRatioSamples)
	}
	if r.DecodeD0TokS != r.DecodeD0.Median || !(r.DecodeD0.Min > 0) {
		t.Errorf("depth 0 %v, figure %+v", r.DecodeD0TokS, r.DecodeD0)
	}
	if len(r.ReadSamples) != repeat+1 || len(r.RooflineSamples) != repeat || r.ReadBufferMiB < 256 {
		t.Fatalf("read passes %v, roofline %v, buffer %v MiB", r.ReadSamples, r.RooflineSamples, r.ReadBufferMiB)
	}
	var best []float64
	for i, v := range r.Decode.Samples {
		bw := max(r.ReadSamples[i], r.ReadSamples[i+1])
		best = append(best, bw)
		want := 100 * v * float64(r.DecodeBytes) / 1e9 / bw
		if math.Abs(r.RooflineSamples[i]-want) > 1e-9*want || !(want > 0) {
			t.Errorf("run %d: roofline %v, want %v", i+1, r.RooflineSamples[i], want)
		}
	}
	if r.ReadGBs != median(best) || r.RooflinePct != median(r.RooflineSamples) {
		t.Errorf("read %v (passes %v), roofline %v (of %v)", r.ReadGBs, r.ReadSamples, r.RooflinePct, r.RooflineSamples)
	}
	text := strings.Join(lines, "\n")
	for _, want := range []string{"decode 4 @ 0 (paired) warm-up", "decode 4 @ 0 (paired) run 3", "decode 4 @ 30 run 3", "read bandwidth: "} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in the progress lines:\n%s", want, text)
		}
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"decode 4 @ 0 (paired)", "depth    30/0 ratio ", "(median of 12 token pairs", "median of 3 runs, each against", "read passes "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestPairedDecode: decoding two fills in turns leaves each where decoding it alone does (the
// same tokens, the same cache), and gives one ratio per pair.
func TestPairedDecode(t *testing.T) {
	m, err := qwen2.Load(shared.Path(t, "models/tiny-qwen2-f32"), qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	const gen = 5
	fills := map[int]*fill{}
	for _, depth := range []int{8, 40} {
		f, err := newFill(ctx, m, 1, depth, depth+gen+1)
		if err != nil {
			t.Fatal(err)
		}
		defer f.release()
		fills[depth] = f
	}
	next := func(f *fill) []float32 {
		st := []lm.Step{{Cache: f.caches[0], Tokens: []int{7}}}
		if err := m.Forward(ctx, st); err != nil {
			t.Fatal(err)
		}
		return st[0].Logits
	}
	var alone [][]float32
	for _, d := range []int{8, 40} {
		if _, err := fills[d].decode(ctx, gen); err != nil {
			t.Fatal(err)
		}
		alone = append(alone, next(fills[d]))
	}
	a, b, ratios, err := pairedDecode(ctx, fills[8], fills[40], gen)
	if err != nil {
		t.Fatal(err)
	}
	if !(a > 0 && b > 0) || len(ratios) != gen {
		t.Errorf("tok/s %v and %v, ratios %v", a, b, ratios)
	}
	for i, d := range []int{8, 40} {
		if n := fills[d].caches[0].Len(); n != d+gen {
			t.Errorf("depth %d: cache holds %d tokens, want %d", d, n, d+gen)
		}
		got := next(fills[d])
		for j, v := range alone[i] {
			if e := got[j] - v; e > 1e-4 || e < -1e-4 {
				t.Fatalf("depth %d: logit %d after the paired run %v, alone %v", d, j, got[j], v)
			}
		}
	}
}

// TestPairedDepthFloor: a paired test at a depth no deeper than the depth 0 side's own prompt
// (decodePrompt tokens) is refused before any model is loaded, naming the floor.
func TestPairedDepthFloor(t *testing.T) {
	for _, d := range []int{1, 4, decodePrompt} {
		err := (&Options{Model: "m", Gen: 8, Depth: d, Repeat: 1, Paired: true}).Check()
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("needs a depth > %d", decodePrompt)) {
			t.Errorf("depth %d, paired: error %v", d, err)
		}
	}
	if err := (&Options{Model: "m", Gen: 8, Depth: decodePrompt + 1, Repeat: 1, Paired: true}).Check(); err != nil {
		t.Errorf("depth %d, paired: %v", decodePrompt+1, err)
	}
}

// TestDecodeBytesAsLoaded: DecodeBytes counts each matrix as loaded. In the tiny checkpoint as
// q8, one weight of layer 0's down projection is made 1e7, past what a half scale holds
// (max|v|/127 > 65504), so that matrix stays in rows with f32 scales while the others hold half
// scales, in panels where the CPU's decode plan packs them, else in rows (cpu.HalveQ8Scales):
// before, every scale counted at the packed size, and later rows counted f32 scales where
// halves could hold them.
func TestDecodeBytesAsLoaded(t *testing.T) {
	src := shared.Path(t, "models/tiny-qwen2-f32")
	dir := t.TempDir()
	for _, f := range []string{"config.json", "generation_config.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.ReadFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	hl := int(binary.LittleEndian.Uint64(st))
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(st[8:8+hl], &hdr); err != nil {
		t.Fatal(err)
	}
	var down struct {
		DType   string `json:"dtype"`
		Shape   []int  `json:"shape"`
		Offsets [2]int `json:"data_offsets"`
	}
	if err := json.Unmarshal(hdr["model.layers.0.mlp.down_proj.weight"], &down); err != nil || down.DType != "F32" {
		t.Fatalf("down_proj: %+v, %v", down, err)
	}
	binary.LittleEndian.PutUint32(st[8+hl+down.Offsets[0]:], math.Float32bits(1e7))
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), st, 0o644); err != nil {
		t.Fatal(err)
	}

	m, err := qwen2.Load(dir, qwen2.Options{DType: qwen2.Q8})
	if err != nil {
		t.Fatal(err)
	}
	w := m.Weights()
	packed, downPacked := w.LMHead.Q8Panels, w.Layers[0].Down.Q8Panels
	m.Close()
	if downPacked {
		t.Fatal("a down projection with a weight of 1e7 was packed in panels with half scales")
	}
	r, err := Run(context.Background(), Options{Model: dir, DType: qwen2.Q8, Gen: 2, Prompt: 0, Repeat: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	elems := r.DecodeWeights
	downElems := int64(down.Shape[0] * down.Shape[1])
	want := elems + 2*(elems-downElems)/cpu.Q8Block + 4*downElems/cpu.Q8Block // in panels or in rows
	if r.DecodeBytes != want {
		t.Errorf("decode bytes %d per token, want %d (panels %v; %d weights, %d of them in the down projection left in rows)", r.DecodeBytes, want, packed, elems, downElems)
	}
}
