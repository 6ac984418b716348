package cuda

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/internal/shared"
)

// The whole forward pass on ../shared/models/tiny-qwen2-f32 (2 layers, hidden 64, 4 heads of
// 16 over 2 kv heads, the full 151,936-token vocabulary, weights bf16-representable) against
// the CPU backend and the reference logits.
//
// Tolerance: the device holds the weights in bf16 exactly as the file's f32 values (they are
// bf16-rounded), but its KV cache is bf16 where the CPU's is f32; that rounds each key and
// value by up to 2⁻⁹ relative, which moves these logits (|logit| < 2) by up to about 1e-3.
// logitTol bounds the difference to the CPU backend and to the float64 reference.
const logitTol = 2.5e-3

var refIDs = []int{151644, 872, 198, 9707, 11, 1879, 0, 151645}

type refFile struct {
	Tokens    []int `json:"tokens"`
	Positions []struct {
		Logits []float64 `json:"logits"`
	} `json:"positions"`
	Greedy *struct {
		Tokens []int `json:"tokens"`
	} `json:"greedy_continuation"`
}

var tinyRef = sync.OnceValues(func() (*refFile, error) {
	js, err := os.ReadFile(filepath.Join(shared.Dir(), "models/tiny-qwen2-f32/reference_f64.json"))
	if err != nil {
		return nil, err
	}
	var r refFile
	if err := json.Unmarshal(js, &r); err != nil {
		return nil, err
	}
	g, err := os.ReadFile(filepath.Join(shared.Dir(), "models/tiny-qwen2-f32/reference_logits.json"))
	if err != nil {
		return nil, err
	}
	var gr refFile
	if err := json.Unmarshal(g, &gr); err != nil {
		return nil, err
	}
	r.Greedy = gr.Greedy
	return &r, nil
})

func tinyDir(t testing.TB) string { return shared.Path(t, "models/tiny-qwen2-f32") }

func loadTiny(t testing.TB, opts Options) *Model { return loadTinyBLAS(t, opts, false) }

func loadTinyBLAS(t testing.TB, opts Options, blas bool) *Model {
	t.Helper()
	dir := tinyDir(t)
	testDevice(t) // skips where the test backend cannot run
	opts.Backend = testBackend()
	if opts.CacheTokens == 0 {
		opts.CacheTokens = 8192
	}
	if opts.MaxRows == 0 {
		opts.MaxRows = 16
	}
	if !blas {
		// Parity with the CPU backend: f32 activations in every product (TestBLASPrefill checks
		// the cuBLAS path on its own tolerance).
		opts.NoBLAS = true
	}
	m, err := Load(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

var cpuTiny = sync.OnceValues(func() (*qwen2.Model, error) {
	return qwen2.Load(filepath.Join(shared.Dir(), "models/tiny-qwen2-f32"), qwen2.Options{})
})

func loadCPU(t testing.TB) *qwen2.Model {
	t.Helper()
	tinyDir(t)
	m, err := cpuTiny()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newCache(t testing.TB, m lm.Model, n int) lm.Cache {
	t.Helper()
	c, err := m.NewCache(n)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func run(t testing.TB, m lm.Model, steps ...lm.Step) []lm.Step {
	t.Helper()
	if err := m.Forward(context.Background(), steps); err != nil {
		t.Fatal(err)
	}
	return steps
}

func maxDiff(a []float32, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// TestTinyReference: the 8 reference positions in one prefill against the float64 reference
// and the CPU backend, then the reference's 16-token greedy continuation decoded step by step.
func TestTinyReference(t *testing.T) {
	m := loadTiny(t, Options{})
	ref, err := tinyRef()
	if err != nil {
		t.Fatal(err)
	}
	cm := loadCPU(t)
	V := m.VocabSize()
	c := newCache(t, m, 64)
	st := run(t, m, lm.Step{Cache: c, Tokens: refIDs, AllLogits: true})[0]
	cst := run(t, cm, lm.Step{Cache: newCache(t, cm, 64), Tokens: refIDs, AllLogits: true})[0]
	worstRef := 0.0
	for p, pos := range ref.Positions {
		for i, want := range pos.Logits {
			worstRef = max(worstRef, math.Abs(float64(st.Logits[p*V+i])-want))
		}
	}
	worstCPU := maxDiff(st.Logits, cst.Logits)
	t.Logf("%s: max abs error %.3g against the float64 reference, %.3g against the CPU backend", m.Device(), worstRef, worstCPU)
	if worstRef > logitTol || worstCPU > logitTol {
		t.Fatalf("max abs error %.3g (reference), %.3g (CPU); want ≤ %g", worstRef, worstCPU, logitTol)
	}
	last := st.Logits[(len(refIDs)-1)*V:]
	var got []int
	step := lm.Step{Cache: c}
	for range ref.Greedy.Tokens {
		tok := hostArgmax(last)
		got = append(got, tok)
		step.Tokens = []int{tok}
		step = run(t, m, step)[0]
		last = step.Logits
	}
	if !slices.Equal(got, ref.Greedy.Tokens) {
		t.Fatalf("greedy continuation %v, want %v", got, ref.Greedy.Tokens)
	}
	if c.Len() != len(refIDs)+len(got) {
		t.Fatalf("cache length %d", c.Len())
	}
}

func prompt(n, seed, vocab int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (seed*7919 + i*104729 + i*i*31) % vocab
	}
	return out
}

// greedy decodes n tokens after prompt one sequence at a time, returning the tokens and the
// logits of each decode step.
func greedy(t testing.TB, m lm.Model, p []int, n int) ([]int, [][]float32) {
	t.Helper()
	c := newCache(t, m, len(p)+n+1)
	defer c.Release()
	st := run(t, m, lm.Step{Cache: c, Tokens: p})[0]
	var toks []int
	var logits [][]float32
	for range n {
		tok := hostArgmax(st.Logits)
		toks = append(toks, tok)
		logits = append(logits, slices.Clone(st.Logits))
		st = run(t, m, lm.Step{Cache: c, Tokens: []int{tok}, Logits: st.Logits})[0]
	}
	return toks, logits
}

// TestAgainstCPU: prompts of several lengths (crossing KV blocks, the matrix-vector limit and
// the passes of a small MaxPass) decoded greedily on the device and on the CPU backend.
func TestAgainstCPU(t *testing.T) {
	m := loadTiny(t, Options{MaxPass: 40})
	cm := loadCPU(t)
	for _, n := range []int{1, 9, 17, 70} {
		p := prompt(n, n, m.VocabSize())
		got, gl := greedy(t, m, p, 3)
		want, wl := greedy(t, cm, p, 3)
		sameGreedy(t, fmt.Sprintf("prompt of %d", n), got, want, gl, wl)
	}
}

// sameGreedy fails unless the device's greedy tokens got are the CPU backend's want and the
// logits of each step (gl, wl) are within logitTol.
func sameGreedy(t *testing.T, what string, got, want []int, gl, wl [][]float32) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: device %v, CPU %v", what, got, want)
	}
	for i := range gl {
		if d := maxDiff(gl[i], wl[i]); d > logitTol {
			t.Fatalf("%s, step %d: logits differ by %.3g", what, i, d)
		}
	}
}

// TestSplitDecodeAgainstCPU: a decode batch at depths from one token to past several cache
// blocks, with the keys split many ways (the multiprocessor count raised so that 10 splits of
// 32 keys are launched, up to 5 of them holding keys), gives the CPU backend's greedy tokens and logits for each sequence
// decoded alone.
func TestSplitDecodeAgainstCPU(t *testing.T) {
	m := loadTiny(t, Options{sms: 20})
	cm := loadCPU(t)
	lens := []int{1, 16, 33, 150}
	if S := m.splits(len(lens)); S != 10 || splitChunk(151, S, blockTokens) != 32 {
		t.Fatalf("%d splits of %d keys for a batch of %d, want 10 of 32", S, splitChunk(151, S, blockTokens), len(lens))
	}
	const n = 4 // the prefill's logits, then three decode steps
	var want [][]int
	var wantLogits [][][]float32
	steps := make([]lm.Step, len(lens))
	for i, l := range lens {
		p := prompt(l, 200+i, m.VocabSize())
		toks, logits := greedy(t, cm, p, n)
		want, wantLogits = append(want, toks), append(wantLogits, logits)
		steps[i] = lm.Step{Cache: newCache(t, m, l+n+1), Tokens: p}
	}
	for k := range n {
		run(t, m, steps...)
		for i, l := range lens {
			if tok := hostArgmax(steps[i].Logits); tok != want[i][k] {
				t.Fatalf("sequence %d (depth %d) step %d: token %d, CPU %d", i, l, k, tok, want[i][k])
			}
			if d := maxDiff(steps[i].Logits, wantLogits[i][k]); d > logitTol {
				t.Fatalf("sequence %d (depth %d) step %d: logits differ from the CPU's by %.3g", i, l, k, d)
			}
			steps[i].Tokens = []int{want[i][k]}
		}
	}
}

// TestBatchedDecode: several conversations prefilled and decoded in one Forward per step give
// the tokens and logits of each run alone.
func TestBatchedDecode(t *testing.T) {
	m := loadTiny(t, Options{})
	lens := []int{3, 30, 1, 17}
	const n = 4
	var alone [][]int
	var aloneLogits [][][]float32
	for i, l := range lens {
		toks, logits := greedy(t, m, prompt(l, 100+i, m.VocabSize()), n)
		alone = append(alone, toks)
		aloneLogits = append(aloneLogits, logits)
	}
	steps := make([]lm.Step, len(lens))
	for i, l := range lens {
		steps[i] = lm.Step{Cache: newCache(t, m, 64), Tokens: prompt(l, 100+i, m.VocabSize())}
	}
	got := make([][]int, len(lens))
	worst := 0.0
	defer func() { t.Logf("batched and alone logits differ by at most %.3g (bound 1e-5)", worst) }()
	for k := range n {
		run(t, m, steps...)
		for i := range steps {
			d := maxDiff(steps[i].Logits, aloneLogits[i][k])
			worst = max(worst, d)
			if d > 1e-5 {
				t.Fatalf("sequence %d step %d: batched logits differ from alone by %.3g", i, k, d)
			}
			tok := hostArgmax(steps[i].Logits)
			got[i] = append(got[i], tok)
			steps[i].Tokens = []int{tok}
		}
	}
	for i := range lens {
		if !slices.Equal(got[i], alone[i]) {
			t.Fatalf("sequence %d: batched %v, alone %v", i, got[i], alone[i])
		}
	}
}

// TestGraphsMatchDirect: decode steps replayed from captured graphs give exactly the logits of
// direct launches (a kernel parameter that changes between steps would break this), for
// several batch sizes in turn and a cache crossing block boundaries.
func TestGraphsMatchDirect(t *testing.T) {
	g := loadTiny(t, Options{})
	d := loadTiny(t, Options{NoGraphs: true})
	for _, B := range []int{1, 3, 2} {
		sg := make([]lm.Step, B)
		sd := make([]lm.Step, B)
		for i := range B {
			p := prompt(9+5*i, i, g.VocabSize()) // decoding crosses the first block boundary
			sg[i] = lm.Step{Cache: newCache(t, g, 64), Tokens: p}
			sd[i] = lm.Step{Cache: newCache(t, d, 64), Tokens: p}
		}
		for k := range 6 {
			run(t, g, sg...)
			run(t, d, sd...)
			for i := range B {
				if !slices.Equal(sg[i].Logits, sd[i].Logits) {
					t.Fatalf("B=%d step %d sequence %d: graph and direct logits differ by %.3g", B, k, i, maxDiff(sg[i].Logits, sd[i].Logits))
				}
				tok := hostArgmax(sg[i].Logits)
				sg[i].Tokens, sd[i].Tokens = []int{tok}, []int{tok}
			}
		}
		for i := range B {
			sg[i].Cache.Release()
			sd[i].Cache.Release()
		}
	}
	if len(g.graphs) != 3 || len(d.graphs) != 0 {
		t.Fatalf("%d graphs captured (want 3, one per batch size), %d without graphs", len(g.graphs), len(d.graphs))
	}
}

// TestGraphsBLAS: where cuBLAS is loaded, a decode batch of more than gemvMaxT sequences puts
// cuBLAS products inside the captured graph (its workspace is set so that it allocates nothing
// there); the replayed steps match direct launches and the batch's greedy tokens agree. The
// emulator has no cuBLAS, so this runs on a GPU only.
func TestGraphsBLAS(t *testing.T) {
	g := loadTinyBLAS(t, Options{}, true)
	if !g.BLAS() {
		t.Skipf("%s has no cuBLAS", g.Device())
	}
	d := loadTinyBLAS(t, Options{NoGraphs: true}, true)
	const B = gemvMaxT + 4
	sg := make([]lm.Step, B)
	sd := make([]lm.Step, B)
	for i := range B {
		p := prompt(5+3*i, 50+i, g.VocabSize())
		sg[i] = lm.Step{Cache: newCache(t, g, 64), Tokens: p}
		sd[i] = lm.Step{Cache: newCache(t, d, 64), Tokens: p}
	}
	worst := 0.0
	for k := range 5 {
		run(t, g, sg...)
		run(t, d, sd...)
		for i := range B {
			diff := maxDiff(sg[i].Logits, sd[i].Logits)
			worst = max(worst, diff)
			if diff > 1e-4 {
				t.Fatalf("step %d sequence %d: graph and direct logits differ by %.3g", k, i, diff)
			}
			tok, tokD := hostArgmax(sg[i].Logits), hostArgmax(sd[i].Logits)
			if tok != tokD {
				t.Fatalf("step %d sequence %d: graph token %d, direct %d", k, i, tok, tokD)
			}
			sg[i].Tokens, sd[i].Tokens = []int{tok}, []int{tok}
		}
	}
	if len(g.graphs) != 1 {
		t.Fatalf("%d graphs captured, want 1", len(g.graphs))
	}
	t.Logf("%s: graph and direct decode logits differ by at most %.3g (cuBLAS in the graph)", g.Device(), worst)
}

// TestForwardSample: tokens sampled on the device are the greedy tokens of Forward's logits at
// temperature 0 (or top-k 1) and the host sampler's rule (gentest.Sample) applied to them otherwise,
// with its log-probabilities.
func TestForwardSample(t *testing.T) {
	m := loadTiny(t, Options{})
	ref := loadTiny(t, Options{})
	r := rand.New(rand.NewPCG(21, 22))
	B := 4
	ss := make([]lm.Step, B)
	sr := make([]lm.Step, B)
	for i := range B {
		p := prompt(4+i, 50+i, m.VocabSize())
		ss[i] = lm.Step{Cache: newCache(t, m, 64), Tokens: p}
		sr[i] = lm.Step{Cache: newCache(t, ref, 64), Tokens: p}
	}
	how := []Sampling{{}, {Temperature: 0.8, TopP: 0.9}, {Temperature: 1.5, TopK: 40}, {Temperature: 0.05, TopP: 0.5, TopK: 1}}
	out, lps := make([]int, B), make([]float32, B)
	for k := range 4 {
		for i := range how {
			how[i].U = r.Float64()
		}
		if err := m.ForwardSample(context.Background(), ss, how, out, lps); err != nil {
			t.Fatal(err)
		}
		run(t, ref, sr...)
		for i := range B {
			want, margin, wantLP := gentest.Sample(sr[i].Logits, how[i])
			if out[i] != want && margin > 1e-9 {
				t.Fatalf("step %d sequence %d (%+v): sampled %d, want %d", k, i, how[i], out[i], want)
			}
			if out[i] == want && math.Abs(float64(lps[i])-wantLP) > 1e-6 {
				t.Fatalf("step %d sequence %d (%+v): log-probability %v, want %v", k, i, how[i], lps[i], wantLP)
			}
			ss[i].Tokens, sr[i].Tokens = []int{out[i]}, []int{out[i]}
		}
	}
	if err := m.ForwardSample(context.Background(), ss[:1], []Sampling{{Temperature: 1, U: 1}}, out[:1], nil); err == nil {
		t.Fatal("u = 1 accepted")
	}
}

// TestGenerator: the model under generate's scheduler (continuous batching, prefix reuse)
// produces the CPU backend's greedy outputs for concurrent requests.
func TestGenerator(t *testing.T) {
	m := loadTiny(t, Options{})
	cm := loadCPU(t)
	gd, err := generate.New(m, generate.Config{MaxBatch: 4, PrefillChunk: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer gd.Close()
	gc, err := generate.New(cm, generate.Config{MaxBatch: 4, PrefillChunk: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Go(func() {
			req := generate.Request{Prompt: prompt(5+9*i, 200+i, m.VocabSize()), MaxTokens: 4, IgnoreEOS: true}
			a, err := gd.Generate(context.Background(), req)
			if err != nil {
				errs[i] = err
				return
			}
			b, err := gc.Generate(context.Background(), req)
			if err != nil {
				errs[i] = err
				return
			}
			if !slices.Equal(a.Tokens, b.Tokens) {
				errs[i] = fmt.Errorf("request %d: device %v, CPU %v", i, a.Tokens, b.Tokens)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if s := gd.Stats(); s.MaxBatchSeen < 2 {
		t.Errorf("the generator never batched: %+v", s)
	}
}

// logitsOnly hides a model's device sampling from generate: its generator samples on the host
// from the logits Forward copies back.
type logitsOnly struct{ lm.Model }

// TestGeneratorSampling: generate's scheduler over the model samples on the device (no logit
// row comes back) and gives, for the same seeds, the tokens the host sampler draws from the same
// model's logits, over temperatures, top-p and top-k settings and greedy requests, and their
// log-probabilities within 1e-6 (the kernel sums in f64 in another order; the f32 results
// differ by at most an ulp or two). Requests run one at a time so that both generators make
// the same passes, and so the same logits.
func TestGeneratorSampling(t *testing.T) {
	m, d := loadCounting(t, Options{})
	cfg := generate.Config{MaxBatch: 4, PrefillChunk: 16}
	gd, err := generate.New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer gd.Close()
	gh, err := generate.New(logitsOnly{m}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer gh.Close()
	var reqs []generate.Request
	for seed := range int64(2) {
		for _, r := range []generate.Request{
			{Temperature: 1, LogProbs: true}, {Temperature: 0.7, TopP: 0.9, LogProbs: true}, {Temperature: 1.2, TopK: 20},
			{Temperature: 0.8, TopP: 0.8, TopK: 100, LogProbs: true}, {Temperature: 0.6, TopK: 1, LogProbs: true},
			{Temperature: 0.05, TopP: 0.5, LogProbs: true},
		} {
			r.Prompt, r.MaxTokens, r.IgnoreEOS = prompt(3+len(reqs)%7, 600+len(reqs), m.VocabSize()), 4, true
			r.Seed = seed*1000 + int64(len(reqs))
			reqs = append(reqs, r)
		}
	}
	reqs = append(reqs, generate.Request{Prompt: prompt(9, 700, m.VocabSize()), MaxTokens: 4, IgnoreEOS: true, LogProbs: true})
	runAll := func(g *generate.Generator) []generate.Result {
		out := make([]generate.Result, len(reqs))
		for i, r := range reqs {
			res, err := g.Generate(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = res
		}
		return out
	}
	before := d.snap()
	got := runAll(gd)
	c := d.snap().minus(before)
	if c.outBytes >= 4*m.VocabSize() {
		t.Fatalf("the device-sampled requests copied %d bytes back (a logit row is %d): %+v", c.outBytes, 4*m.VocabSize(), c)
	}
	want := runAll(gh)
	for i, r := range reqs {
		if !slices.Equal(got[i].Tokens, want[i].Tokens) {
			t.Fatalf("request %d (T %v, top-p %v, top-k %d, seed %d): device %v, host %v", i, r.Temperature, r.TopP, r.TopK, r.Seed, got[i].Tokens, want[i].Tokens)
		}
		if len(got[i].LogProbs) != len(want[i].LogProbs) {
			t.Fatalf("request %d: %d log-probabilities, host %d", i, len(got[i].LogProbs), len(want[i].LogProbs))
		}
		for j, lp := range got[i].LogProbs {
			if math.Abs(float64(lp-want[i].LogProbs[j])) > 1e-6 {
				t.Fatalf("request %d token %d: log-probability %v, host %v", i, j, lp, want[i].LogProbs[j])
			}
		}
	}
}

// TestBadSteps: invalid steps and a full pool fail with an error and change no cache.
func TestBadSteps(t *testing.T) {
	m := loadTiny(t, Options{CacheTokens: 64})
	cm := loadCPU(t)
	c := newCache(t, m, 200)
	run(t, m, lm.Step{Cache: c, Tokens: []int{1, 2, 3}})
	other := newCache(t, cm, 10)
	released := newCache(t, m, 10)
	released.Release()
	for _, c2 := range []struct {
		steps []lm.Step
		want  string
	}{
		{[]lm.Step{{Cache: c, Tokens: []int{m.VocabSize()}}}, "outside the vocabulary"},
		{[]lm.Step{{Cache: c}}, "no tokens"},
		{[]lm.Step{{Cache: other, Tokens: []int{1}}}, "not one of this model's"},
		{[]lm.Step{{Cache: released, Tokens: []int{1}}}, "released"},
		{[]lm.Step{{Cache: c, Tokens: []int{1}}, {Cache: c, Tokens: []int{2}}}, "share one cache"},
		{[]lm.Step{{Cache: c, Tokens: prompt(100, 1, 1000)}}, "pool is full"},
	} {
		err := m.Forward(context.Background(), c2.steps)
		if err == nil || !strings.Contains(err.Error(), c2.want) {
			t.Errorf("%v: want an error containing %q", err, c2.want)
		}
		if c.Len() != 3 {
			t.Fatalf("cache length %d after a failed forward", c.Len())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Forward(ctx, []lm.Step{{Cache: c, Tokens: []int{5}}}); !errors.Is(err, context.Canceled) || c.Len() != 3 {
		t.Fatalf("cancelled forward: %v, length %d", err, c.Len())
	}
	// The pool is whole again: a released cache's blocks come back.
	c.Release()
	c3 := newCache(t, m, 64)
	run(t, m, lm.Step{Cache: c3, Tokens: prompt(64, 2, 1000)})
}

// TestBLASPrefill: where cuBLAS is loaded, a prefill through it (activations rounded to bf16)
// stays within blasTol of the own kernels' logits, and the greedy continuation agrees.
func TestBLASPrefill(t *testing.T) {
	b := loadTinyBLAS(t, Options{}, true)
	if !b.BLAS() {
		t.Skipf("%s has no cuBLAS", b.Device())
	}
	own := loadTiny(t, Options{})
	const blasTol = 3e-2
	for _, n := range []int{9, 64, 200} {
		p := prompt(n, 7, b.VocabSize())
		sb := run(t, b, lm.Step{Cache: newCache(t, b, n), Tokens: p, AllLogits: true})[0]
		so := run(t, own, lm.Step{Cache: newCache(t, own, n), Tokens: p, AllLogits: true})[0]
		d := maxDiff(sb.Logits, so.Logits)
		t.Logf("prompt of %d: cuBLAS and own kernels differ by %.3g", n, d)
		if d > blasTol {
			t.Fatalf("prompt of %d: cuBLAS prefill differs from the own kernels by %.3g (> %g)", n, d, blasTol)
		}
	}
}

// envParityModel names a checkpoint (e.g. gpu-check.sh's random Qwen2.5-0.5B) for
// TestCheckpointAgainstCPU: the full-size shapes (head dim 64, 7 query heads per kv head, rows
// of 896 and 4,864 weights) that the tiny model does not reach.
const envParityModel = "CHAINEDSQL_CUDA_PARITY_MODEL"

// TestCheckpointAgainstCPU: a prompt of 12 tokens (the tiled product) and 3 greedy decode steps
// (the matrix-vector one) on the device against the CPU backend in bf16, logits and tokens.
func TestCheckpointAgainstCPU(t *testing.T) {
	dir := os.Getenv(envParityModel)
	if dir == "" {
		t.Skipf("set %s to a checkpoint directory", envParityModel)
	}
	testDevice(t)
	m, err := Load(dir, Options{Backend: testBackend(), NoBLAS: true, CacheTokens: 4096, MaxRows: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cm, err := qwen2.Load(dir, qwen2.Options{DType: qwen2.BF16})
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	p := prompt(12, 5, m.VocabSize())
	got, gl := greedy(t, m, p, 3)
	want, wl := greedy(t, cm, p, 3)
	for i := range gl {
		d := maxDiff(gl[i], wl[i])
		t.Logf("%s: step %d: logits differ from the CPU backend's by %.3g (max |logit| %.3g)", m.Device(), i, d, maxAbs(wl[i]))
		if d > 1e-2*max(1, maxAbs(wl[i])) {
			t.Fatalf("step %d: logits differ by %.3g", i, d)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("greedy tokens %v, CPU %v", got, want)
	}
}

func maxAbs(x []float32) float64 {
	m := 0.0
	for _, v := range x {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// TestLongPromptKernels: a 333-token prompt (21 cache blocks, passes of MaxPass 128) on the
// tiny checkpoint with prefill attention on the tensor cores and on f32 FMAs: the two give the
// same logits to 1e-5 (the split bf16 products are as exact as f32 ones, TestAttentionMMA),
// and both decode the CPU backend's greedy tokens with logits within logitTol of its.
func TestLongPromptKernels(t *testing.T) {
	m := loadTiny(t, Options{MaxPass: 128})
	if !m.op.useMMA(m.geo) {
		t.Fatalf("attn_mma does not take the tiny checkpoint's heads %+v", m.geo)
	}
	defer m.setMMA(true)
	p := prompt(333, 27, m.VocabSize())
	want, wl := greedy(t, loadCPU(t), p, 3)
	var logits [2][][]float32
	for i, on := range []bool{true, false} {
		m.setMMA(on)
		got, gl := greedy(t, m, p, 3)
		sameGreedy(t, fmt.Sprintf("mma %v", on), got, want, gl, wl)
		logits[i] = gl
	}
	worst := 0.0
	for k := range logits[0] {
		worst = max(worst, maxDiff(logits[0][k], logits[1][k]))
	}
	t.Logf("tensor-core and f32 prefill attention: logits differ by at most %.3g", worst)
	if worst > 1e-5 {
		t.Fatalf("tensor-core and f32 prefill attention differ by %.3g (> 1e-5)", worst)
	}
}
