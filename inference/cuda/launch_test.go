package cuda

import (
	"context"
	"slices"
	"testing"
	"unsafe"

	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/inference/qwen2"
)

// countingDevice counts what the model asks of the device: kernel launches run directly (not
// those recorded into a graph), graph replays and captures, copies each way and the bytes
// copied back.
type countingDevice struct {
	Device
	capturing                          bool
	launches, replays, captures        int
	copyIns, copyOuts, outBytes, syncs int
}

type countedGraph struct {
	Graph
	d *countingDevice
}

func (g countedGraph) Launch() error { g.d.replays++; return g.Graph.Launch() }

func (d *countingDevice) Launch(f Func, grid, block Dim, shared int, args ...any) error {
	if !d.capturing {
		d.launches++
	}
	return d.Device.Launch(f, grid, block, shared, args...)
}

func (d *countingDevice) Gemm(N, T, K int, w, x, out Ptr, ldo int, beta float32) (bool, error) {
	ok, err := d.Device.Gemm(N, T, K, w, x, out, ldo, beta)
	if ok && !d.capturing {
		d.launches++
	}
	return ok, err
}

func (d *countingDevice) CopyIn(p Ptr, src unsafe.Pointer, n int) error {
	d.copyIns++
	return d.Device.CopyIn(p, src, n)
}

func (d *countingDevice) CopyOut(dst unsafe.Pointer, p Ptr, n int) error {
	d.copyOuts++
	d.outBytes += n
	return d.Device.CopyOut(dst, p, n)
}

func (d *countingDevice) Sync() error { d.syncs++; return d.Device.Sync() }

func (d *countingDevice) BeginCapture() error {
	d.captures++
	d.capturing = true
	return d.Device.BeginCapture()
}

func (d *countingDevice) EndCapture() (Graph, error) {
	d.capturing = false
	g, err := d.Device.EndCapture()
	if g != nil {
		g = countedGraph{g, d}
	}
	return g, err
}

// Close leaves the device to testDevice's cleanup.
func (d *countingDevice) Close() error { return nil }

// counts is a snapshot of a countingDevice's counters.
type counts struct{ launches, replays, captures, copyIns, copyOuts, outBytes, syncs int }

func (d *countingDevice) snap() counts {
	return counts{d.launches, d.replays, d.captures, d.copyIns, d.copyOuts, d.outBytes, d.syncs}
}

func (c counts) minus(o counts) counts {
	return counts{c.launches - o.launches, c.replays - o.replays, c.captures - o.captures, c.copyIns - o.copyIns,
		c.copyOuts - o.copyOuts, c.outBytes - o.outBytes, c.syncs - o.syncs}
}

// loadCounting loads the tiny model on the test backend behind a countingDevice.
func loadCounting(t *testing.T, opts Options) (*Model, *countingDevice) {
	t.Helper()
	dir := tinyDir(t)
	d := &countingDevice{Device: testDevice(t)}
	opts.Backend, opts.NoBLAS = testBackend(), true
	opts.CacheTokens, opts.MaxRows = 8192, 64
	opts = opts.withDefaults()
	host, err := qwen2.Load(dir, qwen2.Options{DType: qwen2.BF16, Mmap: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := newModel(d, host, dir, opts)
	host.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, d
}

func TestDecodeBucket(t *testing.T) {
	for _, c := range []struct{ T, limit, want int }{
		{1, 256, 1}, {2, 256, 2}, {3, 256, 4}, {5, 256, 8}, {8, 256, 8}, {9, 256, 16}, {56, 256, 56},
		{57, 256, 64}, {65, 256, 96}, {250, 256, 256}, {256, 256, 256}, {13, 12, 13}, {11, 12, 12}, {40, 48, 40},
	} {
		if got := decodeBucket(c.T, c.limit); got != c.want {
			t.Errorf("decodeBucket(%d, %d) = %d, want %d", c.T, c.limit, got, c.want)
		}
	}
	for T := 1; T <= 256; T++ {
		pad := 7
		if T > 64 {
			pad = 31
		}
		if B := decodeBucket(T, 256); B < T || decodeBucket(B, 256) != B || B-T > pad {
			t.Fatalf("decodeBucket(%d) = %d: below T, not its own bucket or padding more than %d rows", T, B, pad)
		}
	}
}

// TestLaunchesPerStep holds the generate path's device work per step to what it is meant to be
// (a regression fails here, not only in the timings): after its first step, a greedy decode
// step of a batch replays one graph, launches nothing directly, copies the metadata in once
// and one id per sequence out (4 bytes each); batch sizes within one bucket share its graph; a step mixing a
// prompt chunk with decoding sequences replays the decode graph and launches directly only
// what a pass of the chunk alone launches. The tokens are those of the same steps launched
// directly without graphs.
func TestLaunchesPerStep(t *testing.T) {
	m, d := loadCounting(t, Options{})
	ref := loadTiny(t, Options{NoGraphs: true, MaxRows: 64})
	ctx := context.Background()
	const B = 5
	seqs := make([]lm.Step, B)
	refs := make([]lm.Step, B)
	out, refOut := make([]int, B), make([]int, B)
	for i := range B {
		p := prompt(3+7*i, 300+i, m.VocabSize())
		seqs[i] = lm.Step{Cache: newCache(t, m, 128), Tokens: p}
		refs[i] = lm.Step{Cache: newCache(t, ref, 128), Tokens: p}
	}
	step := func(what string, n int) counts {
		t.Helper()
		before := d.snap()
		if err := m.ForwardGreedy(ctx, seqs[:n], out[:n]); err != nil {
			t.Fatal(err)
		}
		c := d.snap().minus(before)
		if err := ref.ForwardGreedy(ctx, refs[:n], refOut[:n]); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out[:n], refOut[:n]) {
			t.Fatalf("%s: tokens %v, without graphs %v", what, out[:n], refOut[:n])
		}
		for i := range n {
			seqs[i].Tokens, refs[i].Tokens = []int{out[i]}, []int{out[i]}
		}
		t.Logf("%s: %+v", what, c)
		return c
	}
	prefill := step("prefill of 5 prompts", B)
	if prefill.replays != 0 || prefill.launches == 0 {
		t.Fatalf("prefill: %+v", prefill)
	}
	step("first decode step of 5 (captures the graph of 8)", B)
	for k := range 3 {
		c := step("decode step of 5", B)
		want := counts{replays: 1, copyIns: 1, copyOuts: 1, outBytes: 4 * B}
		if c != want {
			t.Fatalf("decode step %d of a batch of 5: %+v, want %+v", k, c, want)
		}
	}
	// 7 and 6 sequences share the bucket of 8 with 5: no capture.
	for i := 5; i < 7; i++ {
		p := prompt(2+i, 400+i, m.VocabSize())
		seqs = append(seqs, lm.Step{Cache: newCache(t, m, 128), Tokens: p})
		refs = append(refs, lm.Step{Cache: newCache(t, ref, 128), Tokens: p})
		out, refOut = append(out, 0), append(refOut, 0)
	}
	// A mixed step: five decoding, two prompts (16 tokens).
	alone := func() int {
		c := newCache(t, m, 64)
		defer c.Release()
		before := d.snap()
		if err := m.ForwardGreedy(ctx, []lm.Step{{Cache: c, Tokens: prompt(16, 9, m.VocabSize())}}, make([]int, 1)); err != nil {
			t.Fatal(err)
		}
		return d.snap().minus(before).launches
	}()
	mixed := step("mixed step: 5 decoding, prompts of 7 and 8 tokens", 7)
	if mixed.replays != 1 || mixed.captures != 0 || mixed.launches != alone {
		t.Fatalf("mixed step: %+v; want one replay, no capture and the %d launches of the prompts' pass", mixed, alone)
	}
	if mixed.outBytes > 4*7 {
		t.Fatalf("mixed step copied %d bytes back", mixed.outBytes)
	}
	c := step("decode step of 7 (the graph of 8)", 7)
	if c.replays != 1 || c.captures != 0 || c.launches != 0 {
		t.Fatalf("decode step of 7: %+v", c)
	}
	step("decode step of 3 (captures the graph of 4)", 3)
	c = step("decode step of 4", 4)
	if c.replays != 1 || c.captures != 0 || c.launches != 0 {
		t.Fatalf("decode step of 4 after 3: %+v", c)
	}
	keys := make([]int, 0, len(m.graphs))
	for k := range m.graphs {
		keys = append(keys, k.T)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []int{4, 8}) {
		t.Fatalf("graphs of batch sizes %v, want [4 8]", keys)
	}
}

// TestSampledStepCopies holds the sampled decode step to the greedy one's device work: after
// its first step, a batch drawing with temperature, top-p and top-k and asking for
// log-probabilities replays one graph, launches nothing directly, copies the metadata and the
// sampling settings in and the ids and log-probabilities out in one copy (no logit row: the
// greedy ids of the graph's bucket of 4 rows, its sampled ids and the 3 log-probabilities),
// and gives the tokens of the same steps launched directly without graphs.
func TestSampledStepCopies(t *testing.T) {
	m, d := loadCounting(t, Options{})
	ref := loadTiny(t, Options{NoGraphs: true, MaxRows: 64})
	ctx := context.Background()
	const B = 3
	seqs := make([]lm.Step, B)
	refs := make([]lm.Step, B)
	out, refOut := make([]int, B), make([]int, B)
	lps, refLPs := make([]float32, B), make([]float32, B)
	how := []Sampling{{Temperature: 0.8, TopP: 0.9}, {Temperature: 1.1, TopK: 30}, {Temperature: 0.7, TopK: 1}}
	for i := range B {
		p := prompt(4+5*i, 500+i, m.VocabSize())
		seqs[i] = lm.Step{Cache: newCache(t, m, 64), Tokens: p}
		refs[i] = lm.Step{Cache: newCache(t, ref, 64), Tokens: p}
	}
	for k := range 4 {
		for i := range how {
			how[i].U = float64(k*B+i) / 12
		}
		before := d.snap()
		if err := m.ForwardSample(ctx, seqs, how, out, lps); err != nil {
			t.Fatal(err)
		}
		c := d.snap().minus(before)
		if err := ref.ForwardSample(ctx, refs, how, refOut, refLPs); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out, refOut) || !slices.Equal(lps, refLPs) {
			t.Fatalf("step %d: tokens %v (log-probabilities %v), without graphs %v (%v)", k, out, lps, refOut, refLPs)
		}
		t.Logf("step %d: %+v", k, c)
		if c.outBytes >= 4*m.VocabSize() {
			t.Fatalf("step %d copied %d bytes back", k, c.outBytes)
		}
		if k >= 2 {
			if want := (counts{replays: 1, copyIns: 2, copyOuts: 1, outBytes: 4 * (2*decodeBucket(B, 64) + B)}); c != want {
				t.Fatalf("sampled decode step %d of a batch of %d: %+v, want %+v", k, B, c, want)
			}
		}
		for i := range B {
			seqs[i].Tokens, refs[i].Tokens = []int{out[i]}, []int{out[i]}
		}
	}
}
