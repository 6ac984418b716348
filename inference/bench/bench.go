// Package bench measures the student runtime as llama-bench measures llama.cpp: a model is
// loaded once, each test runs once untimed (warm-up) and then Repeat times, and the figures are
// the median and range of those runs. Tests: prefill (one Forward over a Prompt-token prompt,
// logits of the last token), decode (Gen greedy one-token steps) and batched decode (Gen steps
// of Batch sequences, all in one Forward per step). `student bench` prints its Result.
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
	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/internal/rss"
)

// Options select the model and the tests.
type Options struct {
	Model   string           // Hugging Face model directory
	DType   qwen2.WeightType // weight type to load as (AsStored: the file's)
	Mmap    bool             // qwen2.Options.Mmap
	Threads int              // kernel threads (cpu.SetThreads); 0 keeps cpu.Threads()
	Prompt  int              // prefill test's prompt length; 0 skips it
	Gen     int              // decode tests' generated tokens; 0 skips them
	Batch   int              // > 1 adds the batched decode test of Batch sequences
	Repeat  int              // timed runs of each test after the warm-up (at least 1)
	// Progress, when set, receives a line per finished run (for a terminal).
	Progress func(line string)
}

// decodePrompt is the untimed prompt before the decode tests' first timed step (as the qwen2
// decode benchmarks; llama-bench's tg starts from an empty context, a few tokens' difference).
const decodePrompt = 8

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
	DType       string  `json:"dtype"`
	Kernels     string  `json:"kernels"`
	Threads     int     `json:"threads"`
	Prompt      int     `json:"prompt"`
	Gen         int     `json:"gen"`
	Batch       int     `json:"batch"`
	Repeat      int     `json:"repeat"`
	LoadSeconds float64 `json:"load_s"`
	WeightMiB   float64 `json:"weights_mib"`
	DecodeBytes int64   `json:"decode_bytes_per_token"`

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
}

// Check reports the first invalid option.
func (o *Options) Check() error {
	switch {
	case o.Model == "":
		return errors.New("bench: no model directory")
	case o.Prompt < 0 || o.Gen < 0:
		return fmt.Errorf("bench: prompt %d and gen %d must be >= 0", o.Prompt, o.Gen)
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
	}
	if _, err := qwen2.ParseWeightType(string(o.DType)); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// Run loads the model and runs the tests. ctx cancels between Forward calls.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	if o.Threads > 0 {
		cpu.SetThreads(o.Threads)
	}
	r := &Result{Model: o.Model, Threads: cpu.Threads(), Prompt: o.Prompt, Gen: o.Gen, Batch: max(o.Batch, 1), Repeat: o.Repeat}
	r.LoadAvg[0] = loadAvg()
	t0 := time.Now()
	m, err := qwen2.Load(o.Model, qwen2.Options{DType: o.DType, Mmap: o.Mmap})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer m.Close()
	r.LoadSeconds = time.Since(t0).Seconds()
	r.DType, r.Kernels = m.WeightDType().String(), cpu.Kernels()
	weights, perToken := weightBytes(m.Config(), m.WeightDType())
	r.WeightMiB, r.DecodeBytes = float64(weights)/(1<<20), perToken
	if need := max(o.Prompt, decodePrompt+o.Gen); need > m.ContextLength() {
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
	series := func(test string, f func() (float64, error)) (*Figure, error) {
		fig := &Figure{}
		for run := 0; run <= o.Repeat; run++ {
			v, err := f()
			if err != nil {
				return nil, err
			}
			progress(test, run, v)
			if run > 0 {
				fig.Samples = append(fig.Samples, v)
			}
		}
		fig.summarise()
		return fig, nil
	}
	if o.Prompt > 0 {
		if r.Prefill, err = series(fmt.Sprintf("prefill %d", o.Prompt), func() (float64, error) { return prefill(ctx, m, o.Prompt) }); err != nil {
			return nil, err
		}
		r.PrefillTokS = r.Prefill.Median
	}
	if o.Gen > 0 {
		if r.Decode, err = series(fmt.Sprintf("decode %d", o.Gen), func() (float64, error) { return decode(ctx, m, 1, o.Gen) }); err != nil {
			return nil, err
		}
		r.DecodeTokS = r.Decode.Median
		r.DecodeGBs = r.DecodeTokS * float64(perToken) / 1e9
	}
	if o.Batch > 1 {
		if r.BatchDecode, err = series(fmt.Sprintf("decode %d x%d", o.Gen, o.Batch), func() (float64, error) { return decode(ctx, m, o.Batch, o.Gen) }); err != nil {
			return nil, err
		}
		r.BatchDecodeTok = r.BatchDecode.Median
		r.BatchDecodeGBs = r.BatchDecodeTok / float64(o.Batch) * float64(perToken) / 1e9
	}
	r.PeakRSSMiB = float64(rss.Peak()) / (1 << 20)
	r.LoadAvg[1] = loadAvg()
	return r, nil
}

func (f *Figure) summarise() {
	s := slices.Sorted(slices.Values(f.Samples))
	f.Min, f.Max = s[0], s[len(s)-1]
	if n := len(s); n%2 == 1 {
		f.Median = s[n/2]
	} else {
		f.Median = (s[n/2-1] + s[n/2]) / 2
	}
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

// prefill times one Forward over an n-token prompt in a fresh cache; returns tokens/s.
func prefill(ctx context.Context, m lm.Model, n int) (float64, error) {
	c, err := m.NewCache(n)
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	defer c.Release()
	steps := []lm.Step{{Cache: c, Tokens: prompt(n, 1, m.VocabSize())}}
	t0 := time.Now()
	if err := m.Forward(ctx, steps); err != nil {
		return 0, fmt.Errorf("bench: prefill: %w", err)
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// decode times gen greedy decode steps of batch sequences (one Forward per step carrying all of
// them) after an untimed decodePrompt-token prompt each; returns tokens/s over the batch.
func decode(ctx context.Context, m lm.Model, batch, gen int) (float64, error) {
	steps := make([]lm.Step, batch)
	for i := range steps {
		c, err := m.NewCache(decodePrompt + gen)
		if err != nil {
			return 0, fmt.Errorf("bench: %w", err)
		}
		defer c.Release()
		steps[i] = lm.Step{Cache: c, Tokens: prompt(decodePrompt, i, m.VocabSize())}
	}
	if err := m.Forward(ctx, steps); err != nil {
		return 0, fmt.Errorf("bench: decode prompt: %w", err)
	}
	t0 := time.Now()
	for range gen {
		for i := range steps {
			steps[i].Tokens = append(steps[i].Tokens[:0], argmax(steps[i].Logits))
		}
		if err := m.Forward(ctx, steps); err != nil {
			return 0, fmt.Errorf("bench: decode: %w", err)
		}
	}
	return float64(batch*gen) / time.Since(t0).Seconds(), nil
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

// weightBytes returns the bytes of the model's weight matrices and of those one decode step
// streams (the layers' seven projections and the LM head; the embedding is read one row per
// token, so a tied LM head counts once).
func weightBytes(c qwen2.Config, dt cpu.DType) (total, perToken int64) {
	H, I, V := int64(c.HiddenSize), int64(c.IntermediateSize), int64(c.VocabSize)
	qd, kvd := int64(c.NumAttentionHeads*c.HeadDim), int64(c.NumKeyValueHeads*c.HeadDim)
	layer := H*qd + 2*H*kvd + qd*H + 3*H*I
	elems := int64(c.NumHiddenLayers)*layer + V*H
	size := func(n int64) int64 {
		switch dt {
		case cpu.F32:
			return 4 * n
		case cpu.Q8:
			return n + 4*n/cpu.Q8Block
		}
		return 2 * n
	}
	perToken = size(elems)
	total = perToken
	if !c.TieWordEmbeddings {
		total += size(V * H)
	}
	return total, perToken
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
	fmt.Fprintf(&b, "model    %s\n", r.Model)
	fmt.Fprintf(&b, "weights  %s, %.1f MiB (%.1f MB streamed per decoded token); kernels %s, %d threads\n",
		r.DType, r.WeightMiB, float64(r.DecodeBytes)/1e6, r.Kernels, r.Threads)
	fmt.Fprintf(&b, "load     %.2f s; peak RSS %.0f MiB; load average %.2f -> %.2f\n", r.LoadSeconds, r.PeakRSSMiB, r.LoadAvg[0], r.LoadAvg[1])
	fmt.Fprintf(&b, "\n%-16s %10s %21s %8s\n", "test", "tok/s", "[min - max]", "GB/s")
	row := func(name string, f *Figure, gbs float64) {
		if f == nil {
			return
		}
		g := ""
		if gbs > 0 {
			g = fmt.Sprintf("%.1f", gbs)
		}
		fmt.Fprintf(&b, "%-16s %10.2f %21s %8s\n", name, f.Median, fmt.Sprintf("[%.2f - %.2f]", f.Min, f.Max), g)
	}
	row(fmt.Sprintf("prefill %d", r.Prompt), r.Prefill, 0)
	row(fmt.Sprintf("decode %d", r.Gen), r.Decode, r.DecodeGBs)
	row(fmt.Sprintf("decode %d x%d", r.Gen, r.Batch), r.BatchDecode, r.BatchDecodeGBs)
	fmt.Fprintf(&b, "(median of %d runs after one warm-up)\n", r.Repeat)
	_, err := io.WriteString(w, b.String())
	return err
}
