package qwen2

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/inference/safetensors"
	"github.com/chainedsql/chainedsql/internal/shared"
)

var refIDs = []int{151644, 872, 198, 9707, 11, 1879, 0, 151645}

type refFile struct {
	Tokens    []int `json:"tokens"`
	Positions []struct {
		Pos    int       `json:"pos"`
		Logits []float64 `json:"logits"`
	} `json:"positions"`
	Greedy *struct {
		N         int       `json:"n"`
		Tokens    []int     `json:"tokens"`
		MaxLogits []float64 `json:"max_logits"`
	} `json:"greedy_continuation"`
}

// readRef parses a reference file; it runs off the test goroutine (the files are 40 MB of JSON
// between them, slow under -race), so it returns its error.
func readRef(path string) (*refFile, error) {
	js, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r refFile
	if err := json.Unmarshal(js, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !slices.Equal(r.Tokens, refIDs) || len(r.Positions) != len(refIDs) {
		return nil, fmt.Errorf("%s: tokens %v, %d positions", path, r.Tokens, len(r.Positions))
	}
	return &r, nil
}

func mustLoad(t testing.TB, dir string, opts Options) *Model {
	t.Helper()
	m, err := Load(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newCache(t testing.TB, m *Model, n int) lm.Cache {
	t.Helper()
	c, err := m.NewCache(n)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func forward(t testing.TB, m *Model, steps ...lm.Step) []lm.Step {
	t.Helper()
	if err := m.Forward(context.Background(), steps); err != nil {
		t.Fatal(err)
	}
	return steps
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

func maxAbsDiff(a []float32, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// TestReferenceLogits checks the f32 path against llama.cpp's and a float64 NumPy
// implementation's logits at all 8 positions, and the 16-token greedy continuation.
func TestReferenceLogits(t *testing.T) {
	dir := shared.Path(t, "models/tiny-qwen2-f32")
	names := []string{"reference_logits.json", "reference_f64.json"}
	refs := make([]*refFile, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { refs[i], errs[i] = readRef(filepath.Join(dir, name)) })
	}
	for _, mmap := range []bool{false, true} {
		t.Run(fmt.Sprintf("mmap=%v", mmap), func(t *testing.T) {
			m := mustLoad(t, dir, Options{Mmap: mmap})
			if views := m.weights != nil && m.weights.Mapped(); m.WeightDType() != cpu.F32 || views != mmap {
				t.Fatalf("f32 checkpoint: weights %v, views of the mapped file %v, want f32, %v", m.WeightDType(), views, mmap)
			}
			wg.Wait()
			checkReference(t, m, names, refs, errs)
		})
	}
}

// checkReference compares m's logits for refIDs and its greedy continuation with the
// reference files.
func checkReference(t *testing.T, m *Model, names []string, refs []*refFile, errs []error) {
	if !slices.Equal(m.EOS(), []int{151645, 151643}) || m.BOS() != 151643 {
		t.Errorf("eos %v bos %d", m.EOS(), m.BOS())
	}
	c := newCache(t, m, 64)
	st := forward(t, m, lm.Step{Cache: c, Tokens: refIDs, AllLogits: true})[0]
	V := m.VocabSize()
	if len(st.Logits) != len(refIDs)*V {
		t.Fatalf("%d logits, want %d", len(st.Logits), len(refIDs)*V)
	}
	for i, name := range names {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		ref := refs[i]
		var worst float64
		for p, pos := range ref.Positions {
			if len(pos.Logits) != V {
				t.Fatalf("%s: position %d has %d logits", name, p, len(pos.Logits))
			}
			for i, want := range pos.Logits {
				worst = max(worst, math.Abs(float64(st.Logits[p*V+i])-want))
			}
		}
		t.Logf("%s: max abs error %.3g", name, worst)
		if worst >= 1e-4 {
			t.Errorf("%s: max abs error %.3g, want < 1e-4", name, worst)
		}
	}

	ref := refs[0]
	if ref.Greedy == nil || len(ref.Greedy.Tokens) != 16 {
		t.Fatal("reference has no 16-token greedy continuation")
	}
	last := st.Logits[(len(refIDs)-1)*V:]
	var got []int
	step := lm.Step{Cache: c}
	for i := range ref.Greedy.N {
		tok := argmax(last)
		if d := math.Abs(float64(last[tok]) - ref.Greedy.MaxLogits[i]); d >= 1e-4 {
			t.Errorf("greedy step %d: max logit %v, reference %v", i, last[tok], ref.Greedy.MaxLogits[i])
		}
		got = append(got, tok)
		step.Tokens = []int{tok}
		step = forward(t, m, step)[0]
		last = step.Logits
	}
	if !slices.Equal(got, ref.Greedy.Tokens) {
		t.Errorf("greedy continuation %v, want %v", got, ref.Greedy.Tokens)
	}
	if c.Len() != len(refIDs)+16 {
		t.Errorf("cache length %d", c.Len())
	}
}

func smallModel(t testing.TB, dtype safetensors.DType, opts Options, edit func(*spec)) *Model {
	t.Helper()
	sp := smallSpec(dtype)
	if edit != nil {
		edit(&sp)
	}
	dir := t.TempDir()
	writeCheckpoint(t, dir, sp)
	m := mustLoad(t, dir, opts)
	m.kv.block = 16 // prompts of the tests span several KV blocks
	return m
}

func prompt(n, seed, vocab int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (seed*131 + i*17 + i*i*7) % vocab
	}
	return out
}

// xRoundTol is how far two runs of the small test model over the same tokens may differ when
// only one went through cpu.MatMul's matrix-matrix path (16 or more rows): with bf16 weights
// that path rounds x to bf16 (cpu's AVX512_BF16 kernel; 2^-8 of each product at most), f32
// weights are multiplied in f32 on every path.
func xRoundTol(dt safetensors.DType) float64 {
	if dt == safetensors.BF16 {
		return 4e-3 // measured 1.5e-3 on the AVX512_BF16 path
	}
	return 2e-5
}

// TestPrefillMatchesDecode: a prompt in one Forward (matrix-matrix path) and token by token
// (matrix-vector path) give the same logits at every position (within xRoundTol).
func TestPrefillMatchesDecode(t *testing.T) {
	for _, dt := range []safetensors.DType{safetensors.F32, safetensors.BF16} {
		t.Run(string(dt), func(t *testing.T) {
			m := smallModel(t, dt, Options{}, nil)
			V := m.VocabSize()
			ids := prompt(20, 1, V)
			all, worst := prefillVsDecode(t, m, ids)
			if tol := xRoundTol(dt); worst > tol {
				t.Errorf("prefill vs decode: max abs difference %.3g > %.3g", worst, tol)
			}
			// The logits must depend on the context: position 19's differ from a fresh start
			// with the same token.
			fresh := forward(t, m, lm.Step{Cache: newCache(t, m, 4), Tokens: ids[19:]})[0].Logits
			if maxAbsDiff(fresh, all[19*V:]) < 1e-3 {
				t.Error("logits do not depend on earlier tokens")
			}
		})
	}
}

// prefillVsDecode runs ids through m in one Forward (all positions' logits) and token by token
// in a second cache, and returns the first's logits and the largest difference between the two
// at any position.
func prefillVsDecode(t *testing.T, m *Model, ids []int) (all []float32, worst float64) {
	t.Helper()
	V := m.VocabSize()
	all = forward(t, m, lm.Step{Cache: newCache(t, m, 32), Tokens: ids, AllLogits: true})[0].Logits
	c := newCache(t, m, 32)
	for i, id := range ids {
		lg := forward(t, m, lm.Step{Cache: c, Tokens: []int{id}})[0].Logits
		worst = max(worst, maxAbsDiff(lg, all[i*V:(i+1)*V]))
	}
	return all, worst
}

// TestPasses: a batch split into passes of 4 tokens (long prompts cut across passes, steps
// sharing a pass) gives the logits of one pass, and a decode step after it too.
func TestPasses(t *testing.T) {
	m := smallModel(t, safetensors.F32, Options{}, nil)
	V := m.VocabSize()
	run := func() [][]float32 {
		var steps []lm.Step
		for i, n := range []int{5, 11, 1, 3} {
			steps = append(steps, lm.Step{Cache: newCache(t, m, 32), Tokens: prompt(n, i, V), AllLogits: i%2 == 1})
		}
		forward(t, m, steps...)
		var out [][]float32
		for i := range steps {
			out = append(out, slices.Clone(steps[i].Logits))
			steps[i].Tokens = []int{i + 1}
			steps[i].AllLogits = false
		}
		forward(t, m, steps...)
		for i := range steps {
			out = append(out, slices.Clone(steps[i].Logits))
		}
		return out
	}
	want := run()
	old := maxPass
	maxPass = 4
	defer func() { maxPass = old }()
	got := run()
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("result %d: %d logits, want %d", i, len(got[i]), len(want[i]))
		}
		if d := maxAbsDiff(got[i], want[i]); d > 2e-5 {
			t.Errorf("result %d: passes of 4 differ by %.3g", i, d)
		}
	}
}

// TestBatchMatchesSeparate: three sequences of different lengths in one Forward (prefill, then a
// batched decode step with a two-token step mixed in) equal three separate runs.
func TestBatchMatchesSeparate(t *testing.T) {
	m := smallModel(t, safetensors.BF16, Options{}, func(sp *spec) { sp.tied = true })
	V := m.VocabSize()
	prompts := [][]int{prompt(5, 1, V), prompt(11, 2, V), prompt(1, 3, V)}
	next := [][]int{{7}, {8, 9}, {10}}
	var want [][]float32
	for i, p := range prompts {
		c := newCache(t, m, 32)
		forward(t, m, lm.Step{Cache: c, Tokens: p})
		lg := forward(t, m, lm.Step{Cache: c, Tokens: next[i], AllLogits: true})[0].Logits
		want = append(want, slices.Clone(lg))
	}
	caches := []lm.Cache{newCache(t, m, 32), newCache(t, m, 32), newCache(t, m, 32)}
	steps := make([]lm.Step, 3)
	for i := range steps {
		steps[i] = lm.Step{Cache: caches[i], Tokens: prompts[i]}
	}
	forward(t, m, steps...)
	for i := range steps {
		if len(steps[i].Logits) != V {
			t.Fatalf("step %d: %d logits, want the last position's %d", i, len(steps[i].Logits), V)
		}
		steps[i].Tokens = next[i]
		steps[i].AllLogits = true
	}
	forward(t, m, steps...)
	for i := range steps {
		if len(steps[i].Logits) != len(want[i]) {
			t.Fatalf("step %d: %d logits, want %d", i, len(steps[i].Logits), len(want[i]))
		}
		if d, tol := maxAbsDiff(steps[i].Logits, want[i]), xRoundTol(safetensors.BF16); d > tol {
			t.Errorf("sequence %d: batched vs separate differ by %.3g > %.3g", i, d, tol)
		}
		if caches[i].Len() != len(prompts[i])+len(next[i]) {
			t.Errorf("sequence %d: cache length %d", i, caches[i].Len())
		}
	}
}

// TestConcurrentForward: Forward on distinct caches from several goroutines at once gives the
// serial results (run with -race).
func TestConcurrentForward(t *testing.T) {
	m := smallModel(t, safetensors.BF16, Options{}, nil)
	V := m.VocabSize()
	const n = 4
	want := make([][]float32, n)
	for i := range n {
		want[i] = forward(t, m, lm.Step{Cache: newCache(t, m, 32), Tokens: prompt(6+i, i, V), AllLogits: true})[0].Logits
	}
	got := make([][]float32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := m.NewCache(32)
			if err != nil {
				errs[i] = err
				return
			}
			st := []lm.Step{{Cache: c, Tokens: prompt(6+i, i, V), AllLogits: true}}
			errs[i] = m.Forward(context.Background(), st)
			got[i] = st[0].Logits
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("sequence %d: concurrent logits differ by %.3g", i, maxAbsDiff(got[i], want[i]))
		}
	}
}

// TestCacheGrowth: a cache that grows block by block while decoding (blocks of 16 tokens, 10 →
// 150 tokens) keeps its contents: the logits match one prefill.
func TestCacheGrowth(t *testing.T) {
	m := smallModel(t, safetensors.F32, Options{}, nil)
	m.kv.block = 16
	V := m.VocabSize()
	ids := prompt(150, 3, V)
	all := forward(t, m, lm.Step{Cache: newCache(t, m, 150), Tokens: ids, AllLogits: true})[0].Logits
	c := newCache(t, m, 200)
	forward(t, m, lm.Step{Cache: c, Tokens: ids[:10]})
	var worst float64
	for i := 10; i < len(ids); i++ {
		lg := forward(t, m, lm.Step{Cache: c, Tokens: ids[i : i+1]})[0].Logits
		worst = max(worst, maxAbsDiff(lg, all[i*V:(i+1)*V]))
	}
	if cc := c.(*Cache); cc.Blocks() != 10 || cc.Cap() != 200 {
		t.Errorf("%d blocks of capacity %d after 150 tokens, want 10 blocks of 16 and capacity 200", cc.Blocks(), cc.Cap())
	}
	if worst > 2e-5 {
		t.Errorf("grown cache differs by %.3g", worst)
	}
}

// TestLogitsReused: Forward writes into a caller's Logits slice that is large enough.
func TestLogitsReused(t *testing.T) {
	m := smallModel(t, safetensors.F32, Options{}, nil)
	buf := make([]float32, 3*m.VocabSize())
	st := forward(t, m, lm.Step{Cache: newCache(t, m, 8), Tokens: []int{1, 2}, Logits: buf})[0]
	if len(st.Logits) != m.VocabSize() || &st.Logits[0] != &buf[0] {
		t.Errorf("logits len %d, reused %v", len(st.Logits), &st.Logits[0] == &buf[0])
	}
	small := make([]float32, 10)
	st = forward(t, m, lm.Step{Cache: newCache(t, m, 8), Tokens: []int{1, 2}, AllLogits: true, Logits: small})[0]
	if len(st.Logits) != 2*m.VocabSize() {
		t.Errorf("all logits len %d", len(st.Logits))
	}
}

// TestTruncateReuse: truncating a cache to a shared prefix and feeding a different suffix gives
// the logits of a fresh run over prefix+suffix.
func TestTruncateReuse(t *testing.T) {
	m := smallModel(t, safetensors.F32, Options{}, nil)
	V := m.VocabSize()
	a, b := prompt(12, 4, V), prompt(5, 5, V)
	c := newCache(t, m, 40)
	forward(t, m, lm.Step{Cache: c, Tokens: a})
	c.Truncate(7)
	if c.Len() != 7 {
		t.Fatalf("Len after Truncate(7) = %d", c.Len())
	}
	c.Truncate(100)
	if c.Len() != 7 {
		t.Fatalf("Truncate beyond Len changed it to %d", c.Len())
	}
	got := forward(t, m, lm.Step{Cache: c, Tokens: b})[0].Logits
	want := forward(t, m, lm.Step{Cache: newCache(t, m, 40), Tokens: append(slices.Clone(a[:7]), b...)})[0].Logits
	if d := maxAbsDiff(got, want); d > 2e-5 {
		t.Errorf("prefix reuse differs by %.3g", d)
	}
}

// TestWeightTypes: conversions on load keep the logits of the stored weights (exactly for
// bf16→f32, within rounding for f32→bf16 and int8).
func TestWeightTypes(t *testing.T) {
	dir := t.TempDir()
	writeCheckpoint(t, dir, smallSpec(safetensors.BF16))
	ids := prompt(9, 6, 300)
	run := func(opts Options, want cpu.DType) []float32 {
		m := mustLoad(t, dir, opts)
		if m.WeightDType() != want {
			t.Errorf("%q: weights %v, want %v", opts.DType, m.WeightDType(), want)
		}
		if views := m.weights != nil; views != (opts.Mmap && (opts.DType == AsStored || opts.DType == BF16)) {
			t.Errorf("%q: keeps the mapped file: %v", opts.DType, views)
		}
		return forward(t, m, lm.Step{Cache: newCache(t, m, 16), Tokens: ids, AllLogits: true})[0].Logits
	}
	stored := run(Options{Mmap: true}, cpu.BF16)
	zc := mustLoad(t, dir, Options{Mmap: true})
	emb, err := zc.weights.Tensor("model.embed_tokens.weight")
	if err != nil {
		t.Fatal(err)
	}
	if &zc.embed.U16[0] != (*uint16)(unsafe.Pointer(&emb.Data[0])) {
		t.Error("stored bf16 embedding with Mmap is a copy, not a view of the mapped file")
	}
	if d := maxAbsDiff(run(Options{}, cpu.BF16), stored); d != 0 {
		t.Errorf("bf16 copied into huge-page memory differs from the mapped file by %.3g", d)
	}
	if d := maxAbsDiff(run(Options{DType: F32}, cpu.F32), stored); d > 2e-5 {
		t.Errorf("bf16→f32 differs by %.3g", d)
	}
	if d := maxAbsDiff(run(Options{DType: BF16}, cpu.BF16), stored); d != 0 {
		t.Errorf("bf16 as bf16 differs by %.3g", d)
	}
	q8 := run(Options{DType: Q8}, cpu.Q8)
	d := maxAbsDiff(q8, stored)
	if d > 0.02 || d == 0 {
		t.Errorf("q8 differs by %.3g, want small but non-zero", d)
	}

	dir32 := t.TempDir()
	writeCheckpoint(t, dir32, smallSpec(safetensors.F32))
	m32 := mustLoad(t, dir32, Options{})
	f32 := forward(t, m32, lm.Step{Cache: newCache(t, m32, 16), Tokens: ids})[0].Logits
	mb := mustLoad(t, dir32, Options{DType: BF16})
	if mb.WeightDType() != cpu.BF16 || mb.weights != nil {
		t.Errorf("f32→bf16: %v, views %v", mb.WeightDType(), mb.weights != nil)
	}
	bf := forward(t, mb, lm.Step{Cache: newCache(t, mb, 16), Tokens: ids})[0].Logits
	if d := maxAbsDiff(bf, f32); d > 0.01 || d == 0 {
		t.Errorf("f32→bf16 differs by %.3g", d)
	}
}

// TestF16: an f16 checkpoint runs in place and agrees with the same weights in f32 to f16
// rounding.
func TestF16(t *testing.T) {
	ids := prompt(7, 8, 300)
	h := smallModel(t, safetensors.F16, Options{}, nil)
	if h.WeightDType() != cpu.F16 {
		t.Fatalf("f16 checkpoint held as %v", h.WeightDType())
	}
	f := smallModel(t, safetensors.F32, Options{}, nil)
	a := forward(t, h, lm.Step{Cache: newCache(t, h, 8), Tokens: ids})[0].Logits
	b := forward(t, f, lm.Step{Cache: newCache(t, f, 8), Tokens: ids})[0].Logits
	if d := maxAbsDiff(a, b); d > 5e-3 || d == 0 {
		t.Errorf("f16 vs f32 differ by %.3g", d)
	}
}

func TestF32ToF16Helper(t *testing.T) {
	for _, v := range []float32{0, 1, -2, 0.5, 0.0333, 1.0 / (1 << 20), 65504, 1.9999} {
		back := cpu.F16ToF32(f32ToF16(v))
		if math.Abs(float64(back-v)) > math.Abs(float64(v))/1024+1.0/(1<<25) {
			t.Errorf("%v → %v", v, back)
		}
	}
}

// TestSharded: the same weights split over three shards give the same logits.
func TestSharded(t *testing.T) {
	one := smallModel(t, safetensors.BF16, Options{}, nil)
	three := smallModel(t, safetensors.BF16, Options{}, func(sp *spec) { sp.shards = 3 })
	if _, err := os.Stat(filepath.Join(three.dir, safetensors.IndexFile)); err != nil {
		t.Fatal(err)
	}
	ids := prompt(6, 7, 300)
	a := forward(t, one, lm.Step{Cache: newCache(t, one, 8), Tokens: ids})[0].Logits
	b := forward(t, three, lm.Step{Cache: newCache(t, three, 8), Tokens: ids})[0].Logits
	if !slices.Equal(a, b) {
		t.Errorf("sharded logits differ by %.3g", maxAbsDiff(a, b))
	}
}

func TestForwardErrors(t *testing.T) {
	m := smallModel(t, safetensors.F32, Options{}, nil)
	other := smallModel(t, safetensors.F32, Options{}, nil)
	ctx := context.Background()
	c := newCache(t, m, 8)
	forward(t, m, lm.Step{Cache: c, Tokens: []int{1, 2}})
	released := newCache(t, m, 8)
	released.Release()
	cases := []struct {
		name  string
		steps []lm.Step
		want  string
	}{
		{"foreign cache", []lm.Step{{Cache: newCache(t, other, 8), Tokens: []int{1}}}, "not one of this model's"},
		{"nil cache", []lm.Step{{Tokens: []int{1}}}, "not one of this model's"},
		{"released", []lm.Step{{Cache: released, Tokens: []int{1}}}, "released"},
		{"no tokens", []lm.Step{{Cache: c}}, "step 0: no tokens"},
		{"bad token", []lm.Step{{Cache: c, Tokens: []int{1, 300}}}, "token 300 at index 1 is outside the vocabulary of 300"},
		{"negative token", []lm.Step{{Cache: c, Tokens: []int{-1}}}, "token -1"},
		{"over capacity", []lm.Step{{Cache: c, Tokens: make([]int, 7)}}, "7 tokens after 2 exceed the cache's capacity of 8"},
		{"shared cache", []lm.Step{{Cache: c, Tokens: []int{1}}, {Cache: c, Tokens: []int{2}}}, "steps 0 and 1 share one cache"},
	}
	for _, cs := range cases {
		err := m.Forward(ctx, cs.steps)
		if err == nil || !strings.Contains(err.Error(), cs.want) {
			t.Errorf("%s: error %v, want %q", cs.name, err, cs.want)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := m.Forward(cctx, []lm.Step{{Cache: c, Tokens: []int{3}}}); err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Errorf("cancelled: %v", err)
	}
	if c.Len() != 2 {
		t.Errorf("failed calls changed the cache length to %d", c.Len())
	}
	if err := m.Forward(ctx, nil); err != nil {
		t.Errorf("empty batch: %v", err)
	}
	for _, n := range []int{0, -1, 257} {
		if _, err := m.NewCache(n); err == nil {
			t.Errorf("NewCache(%d) succeeded", n)
		}
	}
	m.Close()
	if err := m.Forward(ctx, []lm.Step{{Cache: c, Tokens: []int{3}}}); err == nil {
		t.Error("Forward after Close succeeded")
	}
}

func TestLoadErrors(t *testing.T) {
	good := func(t *testing.T, sp spec) string {
		dir := t.TempDir()
		writeCheckpoint(t, dir, sp)
		return dir
	}
	editConfig := func(t *testing.T, dir string, edit func(map[string]any)) {
		cfg := smallSpec(safetensors.F32).configJSON()
		edit(cfg)
		writeJSON(t, filepath.Join(dir, "config.json"), cfg)
	}
	sp := smallSpec(safetensors.F32)
	tiedSp := sp
	tiedSp.tied = true
	cases := []struct {
		name  string
		setup func(t *testing.T) string
		opts  Options
		want  []string
	}{
		{"missing dir", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }, Options{}, []string{"config.json"}},
		{"malformed config", func(t *testing.T) string {
			d := good(t, sp)
			os.WriteFile(filepath.Join(d, "config.json"), []byte("{"), 0o644)
			return d
		}, Options{}, []string{"config.json", "unexpected end"}},
		{"wrong architecture", func(t *testing.T) string {
			d := good(t, sp)
			editConfig(t, d, func(c map[string]any) { c["architectures"] = []string{"LlamaForCausalLM"} })
			return d
		}, Options{}, []string{"LlamaForCausalLM", "not Qwen2ForCausalLM"}},
		{"kv heads", func(t *testing.T) string {
			d := good(t, sp)
			editConfig(t, d, func(c map[string]any) { c["num_key_value_heads"] = 3 })
			return d
		}, Options{}, []string{"num_key_value_heads 3 does not divide num_attention_heads 4"}},
		{"zero layers", func(t *testing.T) string {
			d := good(t, sp)
			editConfig(t, d, func(c map[string]any) { delete(c, "num_hidden_layers") })
			return d
		}, Options{}, []string{"num_hidden_layers is 0"}},
		{"rope scaling", func(t *testing.T) string {
			d := good(t, sp)
			editConfig(t, d, func(c map[string]any) { c["rope_scaling"] = map[string]any{"type": "yarn"} })
			return d
		}, Options{}, []string{"rope_scaling"}},
		{"shape disagrees with config", func(t *testing.T) string {
			d := good(t, sp)
			editConfig(t, d, func(c map[string]any) { c["intermediate_size"] = 128 })
			return d
		}, Options{}, []string{`"model.layers.0.mlp.gate_proj.weight" has shape [96 64], config.json implies [128 64]`}},
		{"missing tensor", func(t *testing.T) string {
			d := good(t, sp)
			editConfig(t, d, func(c map[string]any) { c["num_hidden_layers"] = 4 })
			return d
		}, Options{}, []string{`no tensor "model.layers.3.input_layernorm.weight"`}},
		{"untied without lm_head", func(t *testing.T) string {
			d := good(t, tiedSp)
			editConfig(t, d, func(c map[string]any) { c["tie_word_embeddings"] = false })
			return d
		}, Options{}, []string{`no tensor "lm_head.weight"`}},
		{"unsupported dtype", func(t *testing.T) string {
			s := sp
			s.override = map[string]safetensors.DType{"model.layers.1.self_attn.q_proj.weight": safetensors.I32}
			return good(t, s)
		}, Options{}, []string{`"model.layers.1.self_attn.q_proj.weight" has dtype I32`}},
		{"unknown dtype", func(t *testing.T) string {
			d := good(t, sp)
			p := filepath.Join(d, "model.safetensors")
			b, _ := os.ReadFile(p)
			i := strings.Index(string(b), `"dtype":"F32"`)
			copy(b[i:], `"dtype":"X32"`)
			os.WriteFile(p, b, 0o644)
			return d
		}, Options{}, []string{"model.safetensors", `tensor "model.embed_tokens.weight": unknown dtype "X32"`}},
		{"lying header", func(t *testing.T) string {
			d := good(t, sp)
			f, _ := os.OpenFile(filepath.Join(d, "model.safetensors"), os.O_WRONLY, 0)
			f.WriteAt([]byte{0, 0, 0, 0, 0, 0, 1, 0}, 0)
			f.Close()
			return d
		}, Options{}, []string{"model.safetensors", "goes beyond the file"}},
		{"no weights", func(t *testing.T) string {
			d := good(t, sp)
			os.Remove(filepath.Join(d, "model.safetensors"))
			return d
		}, Options{}, []string{"neither model.safetensors nor model.safetensors.index.json"}},
		{"q8 columns", func(t *testing.T) string {
			s := sp
			s.hidden, s.heads, s.kv = 48, 4, 2
			return good(t, s)
		}, Options{DType: Q8}, []string{"has 48 columns, not a multiple of 32"}},
		{"bad weight type", func(t *testing.T) string { return good(t, sp) }, Options{DType: "q4"}, []string{`"q4"`}},
		{"bad generation config", func(t *testing.T) string {
			d := good(t, sp)
			os.WriteFile(filepath.Join(d, "generation_config.json"), []byte(`{"eos_token_id":"x"}`), 0o644)
			return d
		}, Options{}, []string{"generation_config.json"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := c.setup(t)
			m, err := Load(dir, c.opts)
			if err == nil {
				m.Close()
				t.Fatal("Load succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestMissingGenerationConfig(t *testing.T) {
	dir := t.TempDir()
	writeCheckpoint(t, dir, smallSpec(safetensors.F32))
	os.Remove(filepath.Join(dir, "generation_config.json"))
	m := mustLoad(t, dir, Options{})
	if !slices.Equal(m.EOS(), []int{2}) || m.BOS() != 1 {
		t.Errorf("eos %v bos %d, want config.json's [2] and 1", m.EOS(), m.BOS())
	}
	if m.ContextLength() != 256 || m.Config().HeadDim != 16 {
		t.Errorf("context %d head dim %d", m.ContextLength(), m.Config().HeadDim)
	}
}

func TestParseWeightType(t *testing.T) {
	for s, want := range map[string]WeightType{"": AsStored, "stored": AsStored, "F32": F32, "bf16": BF16, "q8": Q8} {
		if got, err := ParseWeightType(s); err != nil || got != want {
			t.Errorf("ParseWeightType(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParseWeightType("int4"); err == nil {
		t.Error("int4 accepted")
	}
}

// TestKVBF16: a bf16 KV cache (Options.KVBF16) holds half the bytes, and its logits stay near the
// f32 cache's: over a 40-token prompt and 12 decode steps (both cpu.Attend over the bf16
// blocks) of the small f32 model, within kvBF16Tol of the largest
// logit; prefill and decode over bf16 blocks agree as over f32 ones (xRoundTol).
func TestKVBF16(t *testing.T) {
	mf := smallModel(t, safetensors.F32, Options{}, nil)
	mb := smallModel(t, safetensors.F32, Options{KVBF16: true}, nil)
	V := mf.VocabSize()
	ids := prompt(40, 4, V)
	run := func(m *Model) (all []float32, dec [][]float32) {
		c := newCache(t, m, 64)
		all = slices.Clone(forward(t, m, lm.Step{Cache: c, Tokens: ids, AllLogits: true})[0].Logits)
		for i := range 12 {
			dec = append(dec, slices.Clone(forward(t, m, lm.Step{Cache: c, Tokens: []int{(7 * i) % V}})[0].Logits))
		}
		if _, bytes := m.KVBlocks(); m == mb {
			_, fb := mf.KVBlocks()
			if fb != 2*bytes || bytes == 0 {
				t.Errorf("bf16 KV blocks take %d bytes, f32 ones %d: want half", bytes, fb)
			}
		}
		return all, dec
	}
	fAll, fDec := run(mf)
	bAll, bDec := run(mb)
	var scale float64
	for _, x := range fAll {
		scale = max(scale, math.Abs(float64(x)))
	}
	worst := maxAbsDiff(bAll, fAll)
	for i := range fDec {
		worst = max(worst, maxAbsDiff(bDec[i], fDec[i]))
	}
	t.Logf("bf16 against f32 KV: max |Δ logit| %.3g (largest logit %.3g)", worst, scale)
	if worst > kvBF16Tol*scale {
		t.Errorf("bf16 KV logits differ from f32 KV by %.3g > %.3g", worst, kvBF16Tol*scale)
	}
	if worst == 0 {
		t.Error("bf16 KV logits equal the f32 ones: the values were not rounded")
	}
	// Token by token over the bf16 blocks gives the prefill's logits.
	c := newCache(t, mb, 64)
	var pd float64
	for i, id := range ids {
		lg := forward(t, mb, lm.Step{Cache: c, Tokens: []int{id}})[0].Logits
		pd = max(pd, maxAbsDiff(lg, bAll[i*V:(i+1)*V]))
	}
	if tol := xRoundTol(safetensors.F32); pd > tol {
		t.Errorf("bf16 KV: prefill vs decode: max abs difference %.3g > %.3g", pd, tol)
	}
}

// TestKVBF16Q8: the bf16 cache q8 weights keep by default (DefaultKVBF16) leaves them about as far
// from the reference computation as the f32 cache does. Over a prompt and 12 decoded tokens, q8
// weights over a bf16 cache are within 1.25 times the largest logit difference of q8 over an f32
// cache, both against f32 weights over an f32 cache (measured 0.00659 against 0.00656: the
// cache's rounding, 0.00583 alone, is of the weights' size and does not add to it).
func TestKVBF16Q8(t *testing.T) {
	if !DefaultKVBF16(Q8) || DefaultKVBF16(F32) || DefaultKVBF16(BF16) || DefaultKVBF16(AsStored) {
		t.Fatal("DefaultKVBF16: want bf16 for q8 weights only")
	}
	for _, c := range []struct {
		s    string
		wt   WeightType
		want bool
	}{{"", Q8, true}, {"", F32, false}, {"", BF16, false}, {"", AsStored, false}, {"f32", Q8, false}, {"F32", Q8, false}, {"bf16", F32, true}, {"BF16", AsStored, true}} {
		if got, err := ParseKVCache(c.s, c.wt); err != nil || got != c.want {
			t.Errorf("ParseKVCache(%q, %q) = %v, %v; want %v", c.s, c.wt, got, err, c.want)
		}
	}
	if _, err := ParseKVCache("f16", Q8); err == nil {
		t.Error(`ParseKVCache("f16") took it`)
	}
	ref := smallModel(t, safetensors.F32, Options{}, nil)
	qf := smallModel(t, safetensors.F32, Options{DType: Q8}, nil)
	qb := smallModel(t, safetensors.F32, Options{DType: Q8, KVBF16: true}, nil)
	V := ref.VocabSize()
	ids := prompt(40, 4, V)
	run := func(m *Model) (out [][]float32) {
		c := newCache(t, m, 64)
		out = append(out, slices.Clone(forward(t, m, lm.Step{Cache: c, Tokens: ids, AllLogits: true})[0].Logits))
		for i := range 12 {
			out = append(out, slices.Clone(forward(t, m, lm.Step{Cache: c, Tokens: []int{(7 * i) % V}})[0].Logits))
		}
		return out
	}
	r, f, b := run(ref), run(qf), run(qb)
	var weights, cache, both float64
	for i := range r {
		weights = max(weights, maxAbsDiff(f[i], r[i]))
		cache = max(cache, maxAbsDiff(b[i], f[i]))
		both = max(both, maxAbsDiff(b[i], r[i]))
	}
	t.Logf("max |Δ logit|: q8 against f32 weights %.3g, bf16 against f32 cache under q8 %.3g, q8 over bf16 against f32 over f32 %.3g", weights, cache, both)
	if cache == 0 {
		t.Error("q8 over the bf16 cache gives the f32 cache's logits: the cache was not bf16")
	}
	if both > 1.25*weights {
		t.Errorf("q8 over the bf16 cache is %.3g from the reference, over 1.25 times q8 over the f32 cache's %.3g", both, weights)
	}
}

// kvBF16Tol bounds the bf16 KV cache's logits against the f32 cache's, relative to the largest
// logit: bf16 rounds each key and value by at most 2^-9 of itself.
const kvBF16Tol = 1e-2 // measured 1.7e-3 (0.00105 of 0.629)

// TestQ8PanelsAtLoad: where the decode plan holds q8 weights in panels (cpu.PackQ8Panels), a q8
// model's matrices whose rows are a multiple of 32 are packed at load and the others (the
// 300-row LM head of the small model) stay in rows; every q8 matrix, in panels or in rows
// (cpu.HalveQ8Scales), holds its scales as halves: 34 bytes per 32 weights (cpu.Matrix.Bytes,
// which student bench's decode_bytes_per_token sums); a prompt in one Forward (the matrix-matrix
// kernel reading the panels in place) and token by token (the panel decode kernels: dot32Q8P at
// this model's size; cpu's TestQ8Panels covers dot128Q8P) give the same logits at every
// position, to float rounding.
func TestQ8PanelsAtLoad(t *testing.T) {
	m := smallModel(t, safetensors.F32, Options{DType: Q8}, nil)
	want := cpu.DecodePlan().Q8Panels && strings.Contains(cpu.Kernels(), "vnni")
	for l, ly := range m.layers {
		for name, w := range map[string]*cpu.Matrix{"q": ly.q, "k": ly.k, "v": ly.v, "o": ly.o, "gate": ly.gate, "up": ly.up, "down": ly.down} {
			if w.Q8Panels != want {
				t.Errorf("layer %d %s: in panels %v, want %v (plan %s)", l, name, w.Q8Panels, want, cpu.DecodePlan())
			}
		}
	}
	if m.lmHead.Q8Panels {
		t.Error("the 300-row LM head was packed")
	}
	halves := func(name string, w *cpu.Matrix) {
		if n := int64(w.Rows * w.Cols); w.Bytes() != n+2*n/cpu.Q8Block || w.Scales != nil {
			t.Errorf("%s: %d bytes for %d weights (f32 scales %v), want %d: scales as halves", name, w.Bytes(), n, w.Scales != nil, n+2*n/cpu.Q8Block)
		}
	}
	halves("LM head", m.lmHead)
	for l, ly := range m.layers {
		for name, w := range map[string]*cpu.Matrix{"q": ly.q, "k": ly.k, "v": ly.v, "o": ly.o, "gate": ly.gate, "up": ly.up, "down": ly.down} {
			halves(fmt.Sprintf("layer %d %s", l, name), w)
		}
	}
	_, worst := prefillVsDecode(t, m, prompt(20, 2, m.VocabSize()))
	t.Logf("prefill vs decode: max abs difference %.3g", worst)
	if worst > 1e-4 {
		t.Errorf("prefill vs decode: max abs difference %.3g > 1e-4", worst)
	}
}
