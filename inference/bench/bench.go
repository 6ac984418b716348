// Package bench measures the student runtime as llama-bench measures llama.cpp: a model is
// loaded once, each test runs once untimed (warm-up) and then Repeat times, and the figures are
// the median and range of those runs. Tests: prefill (one Forward over a Prompt-token prompt,
// logits of the last token), decode (Gen greedy one-token steps) and batched decode (Gen steps
// of Batch sequences, all in one Forward per step), each after Depth tokens already in every
// cache (llama-bench's -d). `student bench` prints its Result.
//
// Two measurements are paired in time, so that a shared or drifting machine moves both sides of
// a ratio alike: the roofline (Options.Roofline) reads memory right before and right after each
// decode run and sets each run against the better of its two passes; the depth ratio
// (Options.Paired) decodes at depth 0 and at Depth in turns, one token each, and takes the median
// of the per-pair ratios.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/cuda"
	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/internal/rss"
)

// Options select the model and the tests.
type Options struct {
	Model   string           // Hugging Face model directory
	Backend string           // "" or "cpu" (qwen2), cuda.BackendCUDA or cuda.BackendEmulated
	DType   qwen2.WeightType // weight type to load as (AsStored: the file's; bf16 on CUDA)
	Mmap    bool             // qwen2.Options.Mmap
	KVCache string           // the KV cache type as --kv names it: "" (the weight type's, qwen2.ParseKVCache), f32 or bf16 (the CUDA backends: bf16 only)
	Threads int              // kernel threads (cpu.SetThreads); 0 keeps cpu.Threads()
	Prompt  int              // prefill test's prompt length; 0 skips it
	Gen     int              // decode tests' generated tokens; 0 skips them
	Batch   int              // > 1 adds the batched decode test of Batch sequences
	Depth   int              // tokens in each cache before the timed tokens (0: decodePrompt for decode)
	Repeat  int              // timed runs of each test after the warm-up (at least 1)
	// Roofline interleaves memory read bandwidth passes (cpu.ReadProbe, rooflinePass each) with
	// the decode runs, one before the first timed run and one after each, to set each run's
	// GB/s against (cpu backend only).
	Roofline bool
	// Paired (with Depth > decodePrompt) makes the decode test decode two sequences in turns, one token
	// each: one at depth 0 (after decodePrompt tokens) and one at Depth, each side timed by its
	// own steps, for the depth ratio of the same moments of the machine. The batched decode
	// test (Batch > 1) is not paired.
	Paired bool
	// Progress, when set, receives a line per finished run (for a terminal).
	Progress func(line string)
}

// decodePrompt is the untimed prompt before the decode tests' first timed step where Depth is
// 0 (as the qwen2 decode benchmarks; llama-bench's tg starts from an empty context, a few
// tokens' difference).
const decodePrompt = 8

// rooflinePass is how long each read bandwidth pass of Options.Roofline sweeps its buffer (the
// fastest sweep counts).
const rooflinePass = 150 * time.Millisecond

// Model is what the tests need of a loaded model (qwen2.Model and cuda.Model are ones).
type Model interface {
	lm.Model
	Config() qwen2.Config
	WeightDType() cpu.DType
	Close() error
}

// Figure is one test's tokens/s over the timed runs.
type Figure struct {
	Median  float64   `json:"median"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	Samples []float64 `json:"samples"`
}

// Result is what Run measured. GB/s figures are the weight bytes one decode step streams (every
// matrix of the layers and the LM head, DecodeBytes) times steps per second: decode cannot pass
// the machine's memory bandwidth by that measure.
type Result struct {
	Model       string  `json:"model"`
	Backend     string  `json:"backend"`
	DType       string  `json:"dtype"`
	Kernels     string  `json:"kernels"`
	Threads     int     `json:"threads"`
	Prompt      int     `json:"prompt"`
	Gen         int     `json:"gen"`
	Batch       int     `json:"batch"`
	Depth       int     `json:"depth"`
	KV          string  `json:"kv_cache"` // the KV cache's value type: "f32" or "bf16" on the cpu backend, "bf16" on the CUDA ones
	Repeat      int     `json:"repeat"`
	LoadSeconds float64 `json:"load_s"`
	WeightMiB   float64 `json:"weights_mib"`
	DecodeBytes int64   `json:"decode_bytes_per_token"`
	// DecodeWeights is the weights one decode step streams (DecodeBytes without the dtype): a
	// peer's bytes per token for its own format (llama.cpp's q8_0: 34 bytes per 32).
	DecodeWeights int64 `json:"decode_weights_per_token"`

	PrefillTokS    float64 `json:"prefill_tok_s"`
	Prefill        *Figure `json:"prefill,omitempty"`
	DecodeTokS     float64 `json:"decode_tok_s"`
	DecodeGBs      float64 `json:"decode_gb_s"`
	Decode         *Figure `json:"decode,omitempty"`
	BatchDecodeTok float64 `json:"batch_decode_tok_s,omitempty"`
	BatchDecodeGBs float64 `json:"batch_decode_gb_s,omitempty"`
	BatchDecode    *Figure `json:"batch_decode,omitempty"`

	PeakRSSMiB float64    `json:"peak_rss_mib"`
	LoadAvg    [2]float64 `json:"load_avg"` // 1-minute load average before and after the tests

	// CPU and Plan are the machine and the decode kernel choice made for it (cpu backend).
	CPU  *cpu.Machine `json:"cpu,omitempty"`
	Plan *cpu.Plan    `json:"plan,omitempty"`
	// Options.Roofline: ReadSamples are the read passes in GB/s in order (one before the first
	// timed decode run, one after each), RooflineSamples each run's decode GB/s as a percentage
	// of the better of the passes around it; ReadGBs and RooflinePct are the medians of those
	// better passes and of RooflineSamples. ReadBufferMiB is the passes' buffer (in the peak
	// RSS).
	ReadGBs         float64   `json:"read_gb_s,omitempty"`
	RooflinePct     float64   `json:"roofline_pct,omitempty"`
	ReadSamples     []float64 `json:"read_samples_gb_s,omitempty"`
	RooflineSamples []float64 `json:"roofline_samples_pct,omitempty"`
	ReadBufferMiB   float64   `json:"read_buffer_mib,omitempty"`

	// Options.Paired: DecodeD0 is the depth 0 side's tok/s (Decode is the depth side's),
	// DepthRatioSamples every timed pair's depth tok/s over its depth 0 tok/s (Repeat×Gen of
	// them, in order), DepthRatio their median.
	Paired            bool      `json:"paired,omitempty"`
	DecodeD0TokS      float64   `json:"decode_d0_tok_s,omitempty"`
	DecodeD0          *Figure   `json:"decode_d0,omitempty"`
	DepthRatio        float64   `json:"depth_ratio,omitempty"`
	DepthRatioSamples []float64 `json:"depth_ratio_samples,omitempty"`
}

// Check reports the first invalid option.
func (o *Options) Check() error {
	switch {
	case o.Model == "":
		return errors.New("bench: no model directory")
	case o.Prompt < 0 || o.Gen < 0 || o.Depth < 0:
		return fmt.Errorf("bench: prompt %d, gen %d and depth %d must be >= 0", o.Prompt, o.Gen, o.Depth)
	case o.Prompt == 0 && o.Gen == 0:
		return errors.New("bench: nothing to measure: prompt and gen are both 0")
	case o.Batch < 0:
		return fmt.Errorf("bench: batch %d must be >= 1", o.Batch)
	case o.Batch > 1 && o.Gen == 0:
		return errors.New("bench: a batched decode test needs gen > 0")
	case o.Repeat < 1:
		return fmt.Errorf("bench: repeat %d must be >= 1", o.Repeat)
	case o.Threads < 0:
		return fmt.Errorf("bench: threads %d must be >= 0", o.Threads)
	case o.Roofline && o.Gen == 0:
		return errors.New("bench: the roofline needs the decode test (gen > 0)")
	case o.Paired && o.Depth <= decodePrompt:
		return fmt.Errorf("bench: a paired test needs a depth > %d: its depth 0 side decodes after a %d-token prompt", decodePrompt, decodePrompt)
	case o.Paired && o.Gen == 0:
		return errors.New("bench: a paired test needs the decode test (gen > 0)")
	}
	wt, err := qwen2.ParseWeightType(string(o.DType))
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	switch o.Backend {
	case "", "cpu":
	case cuda.BackendCUDA, cuda.BackendEmulated:
		if err := cuda.CheckTypes(o.Backend, string(wt), o.KVCache); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	default:
		return fmt.Errorf("bench: backend %q: want cpu, %s or %s", o.Backend, cuda.BackendCUDA, cuda.BackendEmulated)
	}
	if o.Roofline && o.Backend != "" && o.Backend != "cpu" {
		return fmt.Errorf("bench: the roofline measures the CPU's read bandwidth; backend %s has none", o.Backend)
	}
	if _, err := qwen2.ParseKVCache(o.KVCache, wt); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// load loads the model on o's backend (on the cpu backend with a bf16 KV cache where kvBF16),
// returning it with the name of the kernels it runs.
func (o *Options) load(kvBF16 bool) (Model, string, error) {
	if o.Backend == cuda.BackendCUDA || o.Backend == cuda.BackendEmulated {
		m, err := cuda.Load(o.Model, cuda.Options{Backend: o.Backend})
		if err != nil {
			return nil, "", err
		}
		return m, m.Device(), nil
	}
	m, err := qwen2.Load(o.Model, qwen2.Options{DType: o.DType, Mmap: o.Mmap, KVBF16: kvBF16})
	if err != nil {
		return nil, "", err
	}
	return m, cpu.Kernels(), nil
}

// Run loads the model and runs the tests. ctx cancels between Forward calls.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	if o.Threads > 0 {
		cpu.SetThreads(o.Threads)
	}
	r := &Result{Model: o.Model, Backend: o.Backend, Threads: cpu.Threads(), Prompt: o.Prompt, Gen: o.Gen, Batch: max(o.Batch, 1), Depth: o.Depth, Repeat: o.Repeat, Paired: o.Paired}
	kvBF16, _ := qwen2.ParseKVCache(o.KVCache, o.DType) // Check took it
	r.KV = "bf16"                                       // the CUDA backends' only one
	if (o.Backend == "" || o.Backend == "cpu") && !kvBF16 {
		r.KV = "f32"
	}
	if r.Backend == "" {
		r.Backend = "cpu"
	}
	r.LoadAvg[0] = loadAvg()
	t0 := time.Now()
	m, kernels, err := o.load(kvBF16)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer m.Close()
	r.LoadSeconds = time.Since(t0).Seconds()
	r.DType, r.Kernels = m.WeightDType().String(), kernels
	if r.Backend == "cpu" {
		mc, p := cpu.CPU(), cpu.DecodePlan()
		r.CPU, r.Plan = &mc, &p
		if o.Progress != nil {
			o.Progress(fmt.Sprintf("cpu: %s; decode plan %s", mc, p))
		}
	}
	weights, perToken, elems := weightBytes(m.Config(), m.WeightDType())
	if q, ok := m.(*qwen2.Model); ok {
		perToken = streamedBytes(q.Weights())
	}
	r.WeightMiB, r.DecodeBytes, r.DecodeWeights = float64(weights)/(1<<20), perToken, elems
	ctxDecode := o.Depth
	if ctxDecode == 0 {
		ctxDecode = decodePrompt
	}
	// Paired: Check holds Depth above decodePrompt, so the depth side needs the most tokens.
	need := max(o.Depth+o.Prompt, ctxDecode+o.Gen)
	if need > m.ContextLength() {
		return nil, fmt.Errorf("bench: %d tokens exceed the model's context length of %d", need, m.ContextLength())
	}
	progress := func(test string, run int, v float64) {
		if o.Progress != nil {
			what := fmt.Sprintf("run %d", run)
			if run == 0 {
				what = "warm-up"
			}
			o.Progress(fmt.Sprintf("%s %s: %.2f tok/s", test, what, v))
		}
	}
	// series runs f once untimed (run 0) and then Repeat times, calling after (when set) after
	// each run.
	var series seriesFunc = func(test string, f func(run int) (float64, error), after func() error) (*Figure, error) {
		fig := &Figure{}
		for run := 0; run <= o.Repeat; run++ {
			v, err := f(run)
			if err != nil {
				return nil, err
			}
			progress(test, run, v)
			if run > 0 {
				fig.Samples = append(fig.Samples, v)
			}
			if after != nil {
				if err := after(); err != nil {
					return nil, err
				}
			}
		}
		fig.summarise()
		return fig, nil
	}
	if o.Prompt > 0 {
		f, err := newFill(ctx, m, 1, o.Depth, o.Depth+o.Prompt)
		if err != nil {
			return nil, err
		}
		r.Prefill, err = series("prefill "+r.testName(o.Prompt, 1), func(int) (float64, error) { return f.prefill(ctx, o.Prompt) }, nil)
		f.release()
		if err != nil {
			return nil, err
		}
		r.PrefillTokS = r.Prefill.Median
	}
	if o.Gen > 0 {
		if err := r.decodeTest(ctx, &o, m, series, ctxDecode); err != nil {
			return nil, err
		}
	}
	if o.Batch > 1 {
		f, err := newFill(ctx, m, o.Batch, ctxDecode, ctxDecode+o.Gen)
		if err != nil {
			return nil, err
		}
		r.BatchDecode, err = series("decode "+r.testName(o.Gen, o.Batch), func(int) (float64, error) { return f.decode(ctx, o.Gen) }, nil)
		f.release()
		if err != nil {
			return nil, err
		}
		r.BatchDecodeTok = r.BatchDecode.Median
		r.BatchDecodeGBs = r.BatchDecodeTok / float64(o.Batch) * float64(perToken) / 1e9
	}
	r.PeakRSSMiB = float64(rss.Peak()) / (1 << 20)
	r.LoadAvg[1] = loadAvg()
	return r, nil
}

// seriesFunc is Run's series of one test's runs.
type seriesFunc func(test string, f func(run int) (float64, error), after func() error) (*Figure, error)

// decodeTest runs the decode test into r: plain, paired with depth 0 (o.Paired) and/or with
// read bandwidth passes around each run (o.Roofline).
func (r *Result) decodeTest(ctx context.Context, o *Options, m Model, series seriesFunc, ctxDecode int) error {
	f, err := newFill(ctx, m, 1, ctxDecode, ctxDecode+o.Gen)
	if err != nil {
		return err
	}
	defer f.release()
	run := func(int) (float64, error) { return f.decode(ctx, o.Gen) }
	var d0 *fill
	var d0Samples []float64
	if o.Paired {
		if d0, err = newFill(ctx, m, 1, decodePrompt, decodePrompt+o.Gen); err != nil {
			return err
		}
		defer d0.release()
		run = func(i int) (float64, error) {
			v0, v, ratios, err := pairedDecode(ctx, d0, f, o.Gen)
			if err != nil {
				return 0, err
			}
			if o.Progress != nil {
				what := "warm-up"
				if i > 0 {
					what = fmt.Sprintf("run %d", i)
				}
				o.Progress(fmt.Sprintf("decode %d @ 0 (paired) %s: %.2f tok/s", o.Gen, what, v0))
			}
			if i > 0 {
				d0Samples = append(d0Samples, v0)
				r.DepthRatioSamples = append(r.DepthRatioSamples, ratios...)
			}
			return v, nil
		}
	}
	var after func() error
	if o.Roofline {
		probe := cpu.NewReadProbe(0)
		defer probe.Close()
		r.ReadBufferMiB = float64(probe.Bytes()) / (1 << 20)
		after = func() error {
			bw, err := probe.Pass(ctx, rooflinePass)
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			r.ReadSamples = append(r.ReadSamples, bw/1e9)
			if o.Progress != nil {
				o.Progress(fmt.Sprintf("read bandwidth: %.1f GB/s", bw/1e9))
			}
			return nil
		}
	}
	if r.Decode, err = series("decode "+r.testName(o.Gen, 1), run, after); err != nil {
		return err
	}
	perToken := float64(r.DecodeBytes)
	r.DecodeTokS = r.Decode.Median
	r.DecodeGBs = r.DecodeTokS * perToken / 1e9
	if o.Paired {
		r.DecodeD0 = &Figure{Samples: d0Samples}
		r.DecodeD0.summarise()
		r.DecodeD0TokS = r.DecodeD0.Median
		r.DepthRatio = median(r.DepthRatioSamples)
	}
	if o.Roofline {
		// ReadSamples[i] is the pass before timed run i+1 (the first after the warm-up).
		var best []float64
		for i, v := range r.Decode.Samples {
			bw := max(r.ReadSamples[i], r.ReadSamples[i+1])
			best = append(best, bw)
			r.RooflineSamples = append(r.RooflineSamples, 100*v*perToken/1e9/bw)
		}
		r.ReadGBs, r.RooflinePct = median(best), median(r.RooflineSamples)
	}
	return nil
}

func (f *Figure) summarise() {
	s := slices.Sorted(slices.Values(f.Samples))
	f.Min, f.Max = s[0], s[len(s)-1]
	f.Median = median(s)
}

// median returns the median of x (0 for none).
func median(x []float64) float64 {
	s := slices.Sorted(slices.Values(x))
	n := len(s)
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// prompt returns n deterministic token ids below vocab for sequence seq (the same ids as the
// qwen2 benchmarks use).
func prompt(n, seq, vocab int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (seq*131 + i*17 + i*i*7) % vocab
	}
	return out
}

// testName names a test of n timed tokens per sequence in the progress lines: "N", "N xB",
// "N @ D" at depth D.
func (r *Result) testName(n, batch int) string {
	s := fmt.Sprint(n)
	if batch > 1 {
		s += fmt.Sprintf(" x%d", batch)
	}
	if r.Depth > 0 {
		s += fmt.Sprintf(" @ %d", r.Depth)
	}
	return s
}

// fill is a test's caches, one per sequence, each holding depth untimed tokens: filled once
// (in one Forward) and cut back to depth before every run, so that the warm-up and the timed
// runs start from the same context without computing it again.
type fill struct {
	m      lm.Model
	caches []lm.Cache
	depth  int
	steps  []lm.Step
}

// newFill makes batch caches of capacity maxTokens holding depth prompt tokens each.
func newFill(ctx context.Context, m lm.Model, batch, depth, maxTokens int) (*fill, error) {
	f := &fill{m: m, depth: depth}
	for i := range batch {
		c, err := m.NewCache(maxTokens)
		if err != nil {
			f.release()
			return nil, fmt.Errorf("bench: %w", err)
		}
		f.caches = append(f.caches, c)
		if depth > 0 {
			f.steps = append(f.steps, lm.Step{Cache: c, Tokens: prompt(depth, i, m.VocabSize())})
		}
	}
	if len(f.steps) > 0 {
		if err := m.Forward(ctx, f.steps); err != nil {
			f.release()
			return nil, fmt.Errorf("bench: filling %d caches with %d tokens: %w", batch, depth, err)
		}
	}
	return f, nil
}

func (f *fill) release() {
	for _, c := range f.caches {
		c.Release()
	}
}

// reset cuts every cache back to the fill's depth.
func (f *fill) reset() {
	for _, c := range f.caches {
		c.Truncate(f.depth)
	}
}

// prefill times one Forward over an n-token prompt after the fill's context (one sequence);
// returns tokens/s.
func (f *fill) prefill(ctx context.Context, n int) (float64, error) {
	f.reset()
	steps := []lm.Step{{Cache: f.caches[0], Tokens: prompt(n, 1, f.m.VocabSize())}}
	t0 := time.Now()
	if err := f.m.Forward(ctx, steps); err != nil {
		return 0, fmt.Errorf("bench: prefill: %w", err)
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// decode times gen greedy decode steps of the fill's sequences (one Forward per step carrying
// all of them) after its context; returns tokens/s over the batch.
func (f *fill) decode(ctx context.Context, gen int) (float64, error) {
	steps := f.start()
	t0 := time.Now()
	for range gen {
		if err := f.step(ctx, steps); err != nil {
			return 0, err
		}
	}
	return float64(len(steps)*gen) / time.Since(t0).Seconds(), nil
}

// start cuts the caches back to the fill's depth and returns the first decode step of each
// sequence: its last context token (the fill's logits are not kept).
func (f *fill) start() []lm.Step {
	f.reset()
	steps := make([]lm.Step, len(f.caches))
	for i, c := range f.caches {
		steps[i] = lm.Step{Cache: c, Tokens: []int{prompt(f.depth+1, i, f.m.VocabSize())[f.depth]}}
	}
	return steps
}

// step runs one decode Forward over steps and sets each step's next token to its greedy pick.
func (f *fill) step(ctx context.Context, steps []lm.Step) error {
	if err := f.m.Forward(ctx, steps); err != nil {
		return fmt.Errorf("bench: decode: %w", err)
	}
	for i := range steps {
		steps[i].Tokens = append(steps[i].Tokens[:0], argmax(steps[i].Logits))
	}
	return nil
}

// pairedDecode decodes gen tokens on each of two fills (one sequence each) in turns, one token
// each, a and b in alternating order (ab, ba, ab, ...) so that neither side always follows the
// other; returns each side's tokens/s over its own steps and, per pair, b's tokens/s over a's
// (a's step time over b's).
func pairedDecode(ctx context.Context, a, b *fill, gen int) (aTokS, bTokS float64, ratios []float64, err error) {
	sa, sb := a.start(), b.start()
	var ta, tb time.Duration
	timed := func(f *fill, s []lm.Step) (time.Duration, error) {
		t0 := time.Now()
		err := f.step(ctx, s)
		return time.Since(t0), err
	}
	for k := range gen {
		var da, db time.Duration
		if k%2 == 0 {
			if da, err = timed(a, sa); err == nil {
				db, err = timed(b, sb)
			}
		} else {
			if db, err = timed(b, sb); err == nil {
				da, err = timed(a, sa)
			}
		}
		if err != nil {
			return 0, 0, nil, err
		}
		ta, tb = ta+da, tb+db
		ratios = append(ratios, da.Seconds()/db.Seconds())
	}
	return float64(gen) / ta.Seconds(), float64(gen) / tb.Seconds(), ratios, nil
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

// weightBytes returns the bytes of the model's weight matrices as loading holds them (a q8 scale
// 4 bytes: a half, in panels or in rows, sits in its f32's memory), the bytes one decode step streams (the
// layers' seven projections and the LM head; the embedding is read one row per token, so a tied
// LM head counts once) as the configuration and dtype give them, a q8 scale 4 bytes (where the
// loaded matrices are at hand, Run counts them instead: streamedBytes), and the weights of the
// latter.
func weightBytes(c qwen2.Config, dt cpu.DType) (total, perToken, elems int64) {
	H, I, V := int64(c.HiddenSize), int64(c.IntermediateSize), int64(c.VocabSize)
	qd, kvd := int64(c.NumAttentionHeads*c.HeadDim), int64(c.NumKeyValueHeads*c.HeadDim)
	layer := H*qd + 2*H*kvd + qd*H + 3*H*I
	elems = int64(c.NumHiddenLayers)*layer + V*H
	size := func(n int64, scale int) int64 {
		switch dt {
		case cpu.F32:
			return 4 * n
		case cpu.Q8:
			return n + int64(scale)*n/cpu.Q8Block
		}
		return 2 * n
	}
	perToken = size(elems, 4)
	total = perToken
	if !c.TieWordEmbeddings {
		total += size(V*H, 4)
	}
	return total, perToken, elems
}

// streamedBytes returns the bytes one decode step streams from w as loaded (cpu.Matrix.Bytes of
// the layers' seven projections and the LM head): q8 scales as halves, in panels or in rows
// (cpu.HalveQ8Scales), and as f32 in a matrix with a scale no half holds.
func streamedBytes(w qwen2.Weights) int64 {
	n := w.LMHead.Bytes()
	for _, ly := range w.Layers {
		for _, m := range []*cpu.Matrix{ly.Q, ly.K, ly.V, ly.O, ly.Gate, ly.Up, ly.Down} {
			n += m.Bytes()
		}
	}
	return n
}

// loadAvg returns the 1-minute load average (/proc/loadavg), or -1 where it cannot be read.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var v float64
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &v); err != nil {
		return -1
	}
	return v
}

// WriteText prints r as a short table (the figures of --json in words).
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "model    %s (backend %s)\n", r.Model, r.Backend)
	fmt.Fprintf(&b, "weights  %s, %.1f MiB (%.1f MB streamed per decoded token); kernels %s, %d threads\n",
		r.DType, r.WeightMiB, float64(r.DecodeBytes)/1e6, r.Kernels, r.Threads)
	if r.KV != "" {
		fmt.Fprintf(&b, "kv cache %s\n", r.KV)
	}
	if r.CPU != nil && r.Plan != nil {
		fmt.Fprintf(&b, "cpu      %s\n         decode plan %s\n", r.CPU, r.Plan)
	}
	fmt.Fprintf(&b, "load     %.2f s; peak RSS %.0f MiB; load average %.2f -> %.2f\n", r.LoadSeconds, r.PeakRSSMiB, r.LoadAvg[0], r.LoadAvg[1])
	fmt.Fprintf(&b, "\n%-24s %10s %21s %8s\n", "test", "tok/s", "[min - max]", "GB/s")
	row := func(name string, f *Figure, gbs float64) {
		if f == nil {
			return
		}
		g := ""
		if gbs > 0 {
			g = fmt.Sprintf("%.1f", gbs)
		}
		fmt.Fprintf(&b, "%-24s %10.2f %21s %8s\n", name, f.Median, fmt.Sprintf("[%.2f - %.2f]", f.Min, f.Max), g)
	}
	row("prefill "+r.testName(r.Prompt, 1), r.Prefill, 0)
	row("decode "+r.testName(r.Gen, 1), r.Decode, r.DecodeGBs)
	if r.DecodeD0 != nil {
		row(fmt.Sprintf("decode %d @ 0 (paired)", r.Gen), r.DecodeD0, r.DecodeD0TokS*float64(r.DecodeBytes)/1e9)
	}
	row("decode "+r.testName(r.Gen, r.Batch), r.BatchDecode, r.BatchDecodeGBs)
	fmt.Fprintf(&b, "(median of %d runs after one warm-up)\n", r.Repeat)
	if r.DecodeD0 != nil {
		fmt.Fprintf(&b, "depth    %d/0 ratio %.3f (median of %d token pairs, depth %d and depth 0 decoded in turns)\n",
			r.Depth, r.DepthRatio, len(r.DepthRatioSamples), r.Depth)
	}
	if r.ReadGBs > 0 {
		fmt.Fprintf(&b, "roofline decode %.1f GB/s of %.1f GB/s measured read bandwidth (%.0f%%; median of %d runs, each against the better read pass around it: %s%%)\n",
			r.DecodeGBs, r.ReadGBs, r.RooflinePct, len(r.RooflineSamples), joinf(r.RooflineSamples, "%.0f"))
		fmt.Fprintf(&b, "         read passes %s GB/s (%.0f MiB buffer, in the peak RSS)\n", joinf(r.ReadSamples, "%.1f"), r.ReadBufferMiB)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// joinf formats each of x with format, separated by spaces.
func joinf(x []float64, format string) string {
	s := make([]string, len(x))
	for i, v := range x {
		s[i] = fmt.Sprintf(format, v)
	}
	return strings.Join(s, " ")
}
