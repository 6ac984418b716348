package qwen2

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/hugemem"
	"github.com/chainedsql/chainedsql/inference/safetensors"
	"github.com/chainedsql/chainedsql/internal/regular"
)

// WeightType selects how weight matrices are held in memory.
type WeightType string

// Weight types. AsStored keeps each matrix in the file's dtype (bf16, f16 or f32).
const (
	AsStored WeightType = ""
	F32      WeightType = "f32"
	BF16     WeightType = "bf16"
	Q8       WeightType = "q8" // int8 with one scale per 32 values, a half's value (cpu.Quantize8)
)

// ParseWeightType parses a flag value: "", "stored", "f32", "bf16" or "q8".
func ParseWeightType(s string) (WeightType, error) {
	switch w := WeightType(strings.ToLower(s)); w {
	case AsStored, F32, BF16, Q8:
		return w, nil
	case "stored":
		return AsStored, nil
	}
	return "", fmt.Errorf("qwen2: weight type %q is not one of stored, f32, bf16, q8", s)
}

// ParseKVCache parses a --kv flag value for weights of type wt: "f32" (false) or "bf16" (true:
// Options.KVBF16); "" is the default, bf16 for q8 weights and f32 for the others (DefaultKVBF16).
func ParseKVCache(s string, wt WeightType) (bf16 bool, err error) {
	switch strings.ToLower(s) {
	case "":
		return DefaultKVBF16(wt), nil
	case "f32":
		return false, nil
	case "bf16":
		return true, nil
	}
	return false, fmt.Errorf("qwen2: KV cache type %q is not one of f32, bf16", s)
}

// DefaultKVBF16 reports whether weights of type wt keep a bf16 KV cache unless told otherwise:
// q8 weights do (over it they stay about as far from the reference computation as over an f32
// cache, TestKVBF16Q8, and decode at depth reads half the bytes, as over llama.cpp's default f16
// cache); f32, bf16 and stored weights keep f32, the reference computation.
func DefaultKVBF16(wt WeightType) bool { return wt == Q8 }

// Options configure Load.
type Options struct {
	// DType converts the weight matrices on load; AsStored (the zero value) keeps the file's.
	// Norm weights and biases are always f32.
	DType WeightType
	// Mmap uses the matrices already in the wanted dtype in place, as views of the memory-mapped
	// file: nothing is copied and processes loading one model share its pages through the page
	// cache. By default (false) every matrix is copied or converted into memory mapped for huge
	// pages (package hugemem), which decode streams faster: see docs/BENCHMARKS.md.
	Mmap bool
	// KVBF16 stores the KV cache's keys and values as bf16 (rounded to nearest even) instead of
	// f32: half the bytes per token, so half the memory a long context holds and half what decode
	// attention reads at depth, but the results change (every later token attends over rounded
	// keys and values; bf16 keeps 8 significant bits). Commands set it from --kv through
	// ParseKVCache, whose default is on for q8 weights only; off, logits match the f32 reference
	// computation.
	KVBF16 bool
	// Opener opens config.json, generation_config.json and the safetensors files (nil:
	// plainly); a server's reload passes one confined to its --weights-root (regular.Confine).
	Opener *regular.Opener
}

// layer holds one decoder layer's weights.
type layer struct {
	attnNorm, mlpNorm []float32
	q, k, v, o        *cpu.Matrix
	qb, kb, vb        []float32
	gate, up, down    *cpu.Matrix
}

// Model is a loaded Qwen2 model. It implements lm.Model; Forward may run concurrently on
// distinct caches.
type Model struct {
	cfg      Config
	eos      []int
	bos      int
	layers   []layer
	embed    *cpu.Matrix
	norm     []float32
	lmHead   *cpu.Matrix
	weights  *safetensors.Set // open while matrices view the mapped files
	mem      *hugemem.Arena   // the weight memory of copied and converted matrices
	invFreq  []float32
	dir      string
	wtype    cpu.DType
	scratch  sync.Pool
	kv       kvStore // the paged KV cache's blocks (cache.go)
	released bool
}

// Load reads the model in dir: config.json, generation_config.json (optional; eos ids fall back
// to config.json's) and model.safetensors or a sharded model.safetensors.index.json. Every
// tensor's shape is checked against the config; errors name the directory and the tensor.
func Load(dir string, opts Options) (*Model, error) {
	if _, err := ParseWeightType(string(opts.DType)); err != nil {
		return nil, err
	}
	cfg, err := readConfig(filepath.Join(dir, "config.json"), opts.Opener)
	if err != nil {
		return nil, err
	}
	gen, err := readGenerationConfig(filepath.Join(dir, "generation_config.json"), opts.Opener)
	if err != nil {
		return nil, err
	}
	m := &Model{cfg: *cfg, dir: dir, eos: slices.Clone(cfg.EOSTokenID), bos: -1}
	m.kv.bf16 = opts.KVBF16
	if cfg.BOSTokenID != nil {
		m.bos = *cfg.BOSTokenID
	}
	if gen != nil {
		if len(gen.EOSTokenID) > 0 {
			m.eos = slices.Clone(gen.EOSTokenID)
		}
		if gen.BOSTokenID != nil {
			m.bos = *gen.BOSTokenID
		}
	}
	for _, id := range m.eos {
		if id < 0 || id >= cfg.VocabSize {
			return nil, fmt.Errorf("qwen2 %s: eos token id %d outside the vocabulary of %d", dir, id, cfg.VocabSize)
		}
	}
	set, err := safetensors.OpenDirWith(dir, opts.Opener)
	if err != nil {
		return nil, fmt.Errorf("qwen2 %s: %w", dir, err)
	}
	l := &loader{set: set, dir: dir, want: opts.DType, mmap: opts.Mmap, mem: new(hugemem.Arena)}
	err = m.loadWeights(l)
	if err == nil {
		err = l.convertAll()
	}
	m.mem = l.mem
	if err != nil {
		set.Close()
		m.mem.Free()
		return nil, err
	}
	if l.views {
		m.weights = set
	} else if err := set.Close(); err != nil {
		m.mem.Free()
		return nil, fmt.Errorf("qwen2 %s: %w", dir, err)
	}
	m.wtype = m.embed.DType
	m.setDecodeOrder()
	hd := cfg.HeadDim
	m.invFreq = make([]float32, hd/2)
	for i := range m.invFreq {
		// As Hugging Face: inv_freq = 1 / theta^(2i/d), in float32.
		m.invFreq[i] = float32(1 / math.Pow(cfg.RopeTheta, float64(float32(2*i)/float32(hd))))
	}
	return m, nil
}

// setDecodeOrder tells the cpu package the order of decode's products (cpu.SetDecodeOrder),
// as layer and logits run them: per layer q, k and v together, o, gate and up together, down;
// then the LM head (and after it, the next token's first layer).
func (m *Model) setDecodeOrder() {
	order := make([][]*cpu.Matrix, 0, 4*len(m.layers)+2)
	for i := range m.layers {
		ly := &m.layers[i]
		order = append(order, []*cpu.Matrix{ly.q, ly.k, ly.v}, []*cpu.Matrix{ly.o}, []*cpu.Matrix{ly.gate, ly.up}, []*cpu.Matrix{ly.down})
	}
	cpu.SetDecodeOrder(append(order, []*cpu.Matrix{m.lmHead}))
}

func (m *Model) loadWeights(l *loader) error {
	c := &m.cfg
	H, I, V := c.HiddenSize, c.IntermediateSize, c.VocabSize
	qd, kvd := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	m.embed = l.matrix("model.embed_tokens.weight", V, H)
	m.norm = l.vector("model.norm.weight", H)
	if c.TieWordEmbeddings {
		m.lmHead = m.embed
	} else {
		m.lmHead = l.matrix("lm_head.weight", V, H)
	}
	m.layers = make([]layer, c.NumHiddenLayers)
	for i := range m.layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		ly := &m.layers[i]
		ly.attnNorm = l.vector(p+"input_layernorm.weight", H)
		ly.mlpNorm = l.vector(p+"post_attention_layernorm.weight", H)
		ly.q = l.matrix(p+"self_attn.q_proj.weight", qd, H)
		ly.k = l.matrix(p+"self_attn.k_proj.weight", kvd, H)
		ly.v = l.matrix(p+"self_attn.v_proj.weight", kvd, H)
		ly.o = l.matrix(p+"self_attn.o_proj.weight", H, qd)
		ly.qb = l.vector(p+"self_attn.q_proj.bias", qd)
		ly.kb = l.vector(p+"self_attn.k_proj.bias", kvd)
		ly.vb = l.vector(p+"self_attn.v_proj.bias", kvd)
		ly.gate = l.matrix(p+"mlp.gate_proj.weight", I, H)
		ly.up = l.matrix(p+"mlp.up_proj.weight", I, H)
		ly.down = l.matrix(p+"mlp.down_proj.weight", H, I)
		if l.err != nil {
			break
		}
	}
	return l.err
}

// loader reads tensors from a checkpoint, keeping the first error.
type loader struct {
	set   *safetensors.Set
	dir   string
	want  WeightType
	mmap  bool           // Options.Mmap
	views bool           // some matrix views the mapped file
	jobs  []func() error // pending conversions
	mem   *hugemem.Arena // memory of the copied and converted matrices
	err   error
}

func (l *loader) fail(format string, args ...any) {
	if l.err == nil {
		l.err = fmt.Errorf("qwen2 %s: "+format, append([]any{l.dir}, args...)...)
	}
}

// stored returns the tensor as a matrix in its own dtype, viewing the file's memory.
func (l *loader) stored(name string, shape ...int) (*safetensors.Tensor, *cpu.Matrix) {
	if l.err != nil {
		return nil, nil
	}
	t, err := l.set.Tensor(name)
	if err != nil {
		l.fail("%w", err)
		return nil, nil
	}
	if !slices.Equal(t.Shape, shape) {
		l.fail("tensor %q has shape %v, config.json implies %v", name, t.Shape, shape)
		return nil, nil
	}
	rows, cols := 1, shape[len(shape)-1]
	if len(shape) == 2 {
		rows = shape[0]
	}
	w := &cpu.Matrix{Rows: rows, Cols: cols}
	switch t.DType {
	case safetensors.F32:
		w.DType = cpu.F32
		w.F32, err = t.F32()
	case safetensors.BF16, safetensors.F16:
		w.DType = cpu.BF16
		if t.DType == safetensors.F16 {
			w.DType = cpu.F16
		}
		w.U16, err = t.U16()
	default:
		l.fail("tensor %q has dtype %s; want F32, BF16 or F16", name, t.DType)
		return nil, nil
	}
	if err != nil {
		l.fail("%w", err)
		return nil, nil
	}
	return t, w
}

// matrix loads a rows×cols weight in the wanted type.
func (l *loader) matrix(name string, rows, cols int) *cpu.Matrix {
	t, w := l.stored(name, rows, cols)
	if w == nil {
		return nil
	}
	same := l.want == AsStored || (l.want == F32 && w.DType == cpu.F32) || (l.want == BF16 && w.DType == cpu.BF16)
	if same && l.mmap {
		l.views = true
		return w
	}
	if l.want == Q8 && cols%cpu.Q8Block != 0 {
		l.fail("tensor %q has %d columns, not a multiple of %d as q8 needs", name, cols, cpu.Q8Block)
		return nil
	}
	// Conversions run later, several at once (see convertAll); out is allocated now so that
	// pointers to it (a tied LM head) stay valid. f32 and bf16 are converted in blocks of rows
	// straight into out; q8 one whole tensor per job, as cpu.Quantize8 allocates its result
	// (quantizing blocks and copying them would leave as much garbage as the weights).
	// Copies (same) are conversions to the stored dtype.
	n := rows * cols
	out := &cpu.Matrix{Rows: rows, Cols: cols}
	switch {
	case same && w.DType == cpu.F32, l.want == F32:
		out.DType, out.F32 = cpu.F32, hugemem.Float32s(l.mem.Alloc(4*n), n)
	case same:
		out.DType, out.U16 = w.DType, hugemem.Uint16s(l.mem.Alloc(2*n), n)
	case l.want == BF16:
		out.DType, out.U16 = cpu.BF16, hugemem.Uint16s(l.mem.Alloc(2*n), n)
	case l.want == Q8:
		q8 := hugemem.Int8s(l.mem.Alloc(n), n)
		scales := hugemem.Float32s(l.mem.Alloc(4*(n/cpu.Q8Block)), n/cpu.Q8Block)
		l.jobs = append(l.jobs, func() error {
			*out = *cpu.Quantize8Into(q8, scales, w)
			err := t.Evict() // before packing: the file's pages (4 bytes a weight in f32) go first
			// In panels where the decode plan holds q8 so, else in rows with half scales; in
			// place either way (a matrix with a scale no half holds keeps f32 scales in rows).
			if !cpu.PackQ8Panels(out) {
				cpu.HalveQ8Scales(out)
			}
			return err
		})
		return out
	}
	// Each block's file pages are dropped once it is converted, so the file and the converted
	// copy of a large tensor (the 272 MB embedding) are not resident together.
	block := max(1, convertBlock/cols)
	rowBytes := len(t.Data) / rows
	for r0 := 0; r0 < rows; r0 += block {
		r1 := min(rows, r0+block)
		l.jobs = append(l.jobs, func() error {
			convertRows(out, w, r0, r1)
			return t.EvictRange(r0*rowBytes, r1*rowBytes)
		})
	}
	return out
}

// convertBlock is the number of values one conversion job handles (rounded to whole rows).
const convertBlock = 1 << 22

// convertRows writes rows [r0, r1) of w into out, converted to out's dtype (f32 or bf16; or
// copied where the dtypes are the same).
func convertRows(out, w *cpu.Matrix, r0, r1 int) {
	cols := w.Cols
	switch {
	case out.DType == w.DType && out.DType == cpu.F32:
		copy(out.F32[r0*cols:r1*cols], w.F32[r0*cols:r1*cols])
	case out.DType == w.DType:
		copy(out.U16[r0*cols:r1*cols], w.U16[r0*cols:r1*cols])
	case out.DType == cpu.F32:
		for r := r0; r < r1; r++ {
			cpu.RowF32(out.F32[r*cols:(r+1)*cols], w, r)
		}
	case out.DType == cpu.BF16:
		row := make([]float32, cols)
		for r := r0; r < r1; r++ {
			cpu.RowF32(row, w, r)
			dst := out.U16[r*cols : (r+1)*cols]
			for j, v := range row {
				dst[j] = cpu.F32ToBF16(v)
			}
		}
	}
}

// convertAll runs the queued conversions on cpu.Threads() goroutines.
func (l *loader) convertAll() error {
	if l.err != nil {
		return l.err
	}
	jobs := make(chan func() error)
	errs := make([]error, max(1, cpu.Threads()))
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			for j := range jobs {
				if err := j(); err != nil && errs[i] == nil {
					errs[i] = err
				}
			}
		})
	}
	for _, j := range l.jobs {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	l.jobs = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("qwen2 %s: %w", l.dir, err)
	}
	return nil
}

// vector loads a 1-D tensor of n values as f32 (always a copy).
func (l *loader) vector(name string, n int) []float32 {
	t, w := l.stored(name, n)
	if w == nil {
		return nil
	}
	out := make([]float32, n)
	cpu.RowF32(out, w, 0)
	if err := t.Evict(); err != nil {
		l.fail("%w", err)
	}
	return out
}

// Config returns the model's configuration (defaults filled in).
func (m *Model) Config() Config { return m.cfg }

// EOS returns the end-of-sequence token ids (generation_config.json, else config.json).
func (m *Model) EOS() []int { return slices.Clone(m.eos) }

// BOS returns the beginning-of-sequence token id, or -1 when the config names none.
func (m *Model) BOS() int { return m.bos }

// WeightDType returns the dtype the weight matrices are held in.
func (m *Model) WeightDType() cpu.DType { return m.wtype }

// VocabSize returns the number of logits per position.
func (m *Model) VocabSize() int { return m.cfg.VocabSize }

// ContextLength returns max_position_embeddings, the most tokens one sequence may hold.
func (m *Model) ContextLength() int { return m.cfg.MaxPositionEmbeddings }

// Close releases the weight memory and the memory-mapped weight files; the model must not be
// used afterwards (nor while Close runs).
func (m *Model) Close() error {
	m.released = true
	err := m.mem.Free()
	if m.weights != nil {
		w := m.weights
		m.weights = nil
		err = errors.Join(err, w.Close())
	}
	if err != nil {
		return fmt.Errorf("qwen2 %s: %w", m.dir, err)
	}
	return nil
}
