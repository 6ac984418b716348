package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"unsafe"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/internal/regular"
)

// Options configure Load.
type Options struct {
	// Backend is BackendCUDA (default) or BackendEmulated.
	Backend string
	// MaxPass is the most tokens one pass through the layers carries (default 512): longer
	// batches run as several passes, bounding the activation memory.
	MaxPass int
	// MaxRows is the most logit rows one LM-head product writes and the most sequences one pass
	// holds (default 256).
	MaxRows int
	// CacheTokens is the KV block pool's capacity in tokens, shared by all caches (default:
	// 40% of the device memory free after the weights, at most 4Mi tokens; 65536 on the
	// emulator).
	CacheTokens int
	// NoGraphs runs decode steps as direct launches instead of replaying captured graphs.
	NoGraphs bool
	// NoBLAS runs every product on the backend's own kernels even where cuBLAS is loaded (its
	// prefill products round the activations to bf16; the own kernels keep them f32).
	NoBLAS bool
	// Opener opens the model directory's files (qwen2.Options.Opener; nil: plainly).
	Opener *regular.Opener

	// sms, when positive, stands in for the device's multiprocessor count in the choice of
	// decode attention's key splits (tests: many splits on the emulator's few threads).
	sms int
}

func (o Options) withDefaults() Options {
	if o.Backend == "" {
		o.Backend = BackendCUDA
	}
	if o.MaxPass <= 0 {
		o.MaxPass = 512
	}
	if o.MaxRows <= 0 {
		o.MaxRows = 256
	}
	return o
}

// blockTokens is the KV cache's block size: tokens per block of the pool.
const blockTokens = 16

// devLayer is one decoder layer's weights on the device. q, k and v are one fused matrix (and
// bias), gate and up another, so each is one product.
type devLayer struct {
	attnNorm, mlpNorm Ptr // f32
	qkv, qkvBias      Ptr // bf16 (qd+2·kvd)×H, f32
	o                 Ptr // bf16 H×qd
	gateUp, down      Ptr // bf16 2I×H, H×I
}

// Model is a Qwen2 model on a CUDA device (or the emulator). It implements lm.Model
// (adapter.go): Forward runs every step of a batch together through the layers, on the device,
// and copies only the logits back. Weights are uploaded once, at Load; the KV caches live in one pool of
// 16-token blocks on the device. Decode batches replay a CUDA graph captured for their bucket of sizes.
// Methods are safe for concurrent use (they take turns on the device's one stream).
type Model struct {
	mu   sync.Mutex
	dev  Device
	op   *ops
	opts Options
	cfg  qwen2.Config
	dir  string
	eos  []int
	bos  int

	H, I, V, L, qd, kvd, qkvW int
	geo                       kvLayout
	eps, scale                float32

	embed, lmHead, norm Ptr
	layers              []devLayer
	cosT, sinT          Ptr

	// Activations of one pass (MaxPass rows each) and the LM head's output.
	x, xn, qkv, q, att, gu, act, xbf Ptr
	// toks: R greedy ids, R sampled ids, R log-probabilities (f32); params: R × 4 f64.
	logits, toks, params Ptr
	// Partial results of split decode attention: outputs, then (max, sum) pairs.
	part, partML Ptr
	sms          int // the device's multiprocessors (decodeSplits)
	qt           int // query tokens per prefill attention tile (ops.prefillTileTokens)
	nTiles       int // prefill attention tiles of the pass being run

	// The pass's metadata: host staging and its device copy (see metaLayout).
	meta     Ptr
	metaHost []int32
	ml       metaLayout

	kv          Ptr // the block pool: L layers × blocks × [2][nkv][bs][hd] bf16
	layerStride int // values per layer of the pool
	nblocks     int
	padBlock    int32 // a block no cache holds: the padding rows of a bucketed decode pass write and read it
	freeBlocks  []int32
	refs        []int32 // per block: the caches holding it (0: free)
	maxBlocks   int     // blocks one sequence may hold

	blas   bool // products of more than gemvMaxT rows go to cuBLAS
	graphs map[graphKey]Graph
	allocs []Ptr
	closed bool
}

// metaLayout places the per-pass int32 arrays in one buffer, at fixed offsets so that captured
// graphs, whose kernel parameters are fixed, find each step's values at the same addresses.
type metaLayout struct {
	toks, pos, seq, rows, tableOff, chunk, tiles, tables, size int
}

// Load reads the Hugging Face model directory dir as qwen2.Load does, converts the weights to
// bf16 and uploads them to the device opts.Backend names. The host copy is released before
// Load returns.
func Load(dir string, opts Options) (*Model, error) {
	opts = opts.withDefaults()
	dev, err := Open(opts.Backend)
	if err != nil {
		return nil, err
	}
	host, err := qwen2.Load(dir, qwen2.Options{DType: qwen2.BF16, Mmap: true, Opener: opts.Opener})
	if err != nil {
		dev.Close()
		return nil, err
	}
	m, err := newModel(dev, host, dir, opts)
	host.Close()
	if err != nil {
		dev.Close()
		return nil, err
	}
	return m, nil
}

func newModel(dev Device, host *qwen2.Model, dir string, opts Options) (*Model, error) {
	c := host.Config()
	m := &Model{dev: dev, opts: opts, cfg: c, dir: dir, eos: host.EOS(), bos: host.BOS(), graphs: map[graphKey]Graph{}}
	m.H, m.I, m.V, m.L = c.HiddenSize, c.IntermediateSize, c.VocabSize, c.NumHiddenLayers
	m.geo = kvLayout{nh: c.NumAttentionHeads, nkv: c.NumKeyValueHeads, hd: c.HeadDim, bs: blockTokens}
	m.qd, m.kvd = m.geo.nh*m.geo.hd, m.geo.nkv*m.geo.hd
	m.qkvW = m.qd + 2*m.kvd
	m.eps = float32(c.RMSNormEps)
	m.scale = float32(1 / math.Sqrt(float64(c.HeadDim)))
	if m.geo.hd > maxHeadDim || m.geo.hd%2 != 0 {
		return nil, fmt.Errorf("cuda: %s: head_dim %d: the attention kernel takes even head dims up to %d", dir, m.geo.hd, maxHeadDim)
	}
	if m.geo.nkv < 1 || m.geo.nh%m.geo.nkv != 0 || m.qd/m.geo.nkv > maxGroupDims || attnSplitShared(m.geo) > maxShared || f32TileTokens(m.geo) == 0 {
		return nil, fmt.Errorf("cuda: %s: %d query heads over %d kv heads of %d dims: the attention kernels take up to %d (query head, dim) pairs per kv head", dir, m.geo.nh, m.geo.nkv, m.geo.hd, maxGroupDims)
	}
	m.sms = 1
	if d, ok := dev.(interface{ multiprocessors() int }); ok {
		m.sms = max(1, d.multiprocessors())
	}
	if opts.sms > 0 {
		m.sms = opts.sms
	}
	var err error
	if m.op, err = newOps(dev); err != nil {
		return nil, err
	}
	m.qt = m.op.prefillTileTokens(m.geo)
	if err := m.upload(host); err != nil {
		m.free()
		return nil, fmt.Errorf("cuda: %s: uploading the weights: %w", dir, err)
	}
	if d, ok := dev.(interface{ hasBLAS() bool }); ok && d.hasBLAS() && !opts.NoBLAS {
		m.blas = true
	}
	if err := m.allocActivations(); err != nil {
		m.free()
		return nil, fmt.Errorf("cuda: %s: %w", dir, err)
	}
	if err := m.allocPool(); err != nil {
		m.free()
		return nil, fmt.Errorf("cuda: %s: %w", dir, err)
	}
	return m, nil
}

func (m *Model) alloc(n int) (Ptr, error) {
	p, err := m.dev.Alloc(n)
	if err != nil {
		return 0, err
	}
	m.allocs = append(m.allocs, p)
	return p, nil
}

// put uploads v into new device memory.
func put[T any](m *Model, v []T) (Ptr, error) {
	var z T
	n := len(v) * int(unsafe.Sizeof(z))
	p, err := m.alloc(n)
	if err != nil || n == 0 {
		return p, err
	}
	return p, m.dev.CopyIn(p, unsafe.Pointer(&v[0]), n)
}

// bf16Of returns w's values as bf16 bits (the model was loaded as bf16, so they already are).
func bf16Of(w *cpu.Matrix) ([]uint16, error) {
	if w.DType != cpu.BF16 {
		return nil, fmt.Errorf("weight matrix in %v, want bf16", w.DType)
	}
	return w.U16, nil
}

// putMatrices uploads the row-wise concatenation of ws as one bf16 matrix.
func (m *Model) putMatrices(ws ...*cpu.Matrix) (Ptr, error) {
	if len(ws) == 1 {
		u, err := bf16Of(ws[0])
		if err != nil {
			return 0, err
		}
		return put(m, u)
	}
	var all []uint16
	for _, w := range ws {
		u, err := bf16Of(w)
		if err != nil {
			return 0, err
		}
		all = append(all, u...)
	}
	return put(m, all)
}

func (m *Model) upload(host *qwen2.Model) error {
	w := host.Weights()
	var err error
	if m.embed, err = m.putMatrices(w.Embed); err != nil {
		return err
	}
	m.lmHead = m.embed
	if w.LMHead != w.Embed {
		if m.lmHead, err = m.putMatrices(w.LMHead); err != nil {
			return err
		}
	}
	if m.norm, err = put(m, w.Norm); err != nil {
		return err
	}
	m.layers = make([]devLayer, len(w.Layers))
	for i, lw := range w.Layers {
		d := &m.layers[i]
		if d.attnNorm, err = put(m, lw.AttnNorm); err != nil {
			return err
		}
		if d.mlpNorm, err = put(m, lw.MLPNorm); err != nil {
			return err
		}
		if d.qkv, err = m.putMatrices(lw.Q, lw.K, lw.V); err != nil {
			return err
		}
		if d.qkvBias, err = put(m, slices.Concat(lw.QBias, lw.KBias, lw.VBias)); err != nil {
			return err
		}
		if d.o, err = m.putMatrices(lw.O); err != nil {
			return err
		}
		if d.gateUp, err = m.putMatrices(lw.Gate, lw.Up); err != nil {
			return err
		}
		if d.down, err = m.putMatrices(lw.Down); err != nil {
			return err
		}
	}
	// RoPE tables for every position, computed as qwen2 computes them (f32 angle, f64 cos/sin).
	inv := host.InvFreq()
	half, P := len(inv), m.cfg.MaxPositionEmbeddings
	cs, sn := make([]float32, P*half), make([]float32, P*half)
	for p := range P {
		for f, v := range inv {
			a := float64(float32(p) * v)
			cs[p*half+f], sn[p*half+f] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	if m.cosT, err = put(m, cs); err != nil {
		return err
	}
	m.sinT, err = put(m, sn)
	return err
}

func (m *Model) allocActivations() error {
	P, R := m.opts.MaxPass, m.opts.MaxRows
	sizes := []struct {
		p *Ptr
		n int
	}{
		{&m.x, 4 * P * m.H}, {&m.xn, 4 * max(P, R) * m.H}, {&m.qkv, 4 * P * m.qkvW},
		{&m.q, 4 * P * m.qd}, {&m.att, 4 * P * m.qd}, {&m.gu, 4 * P * 2 * m.I}, {&m.act, 4 * P * m.I},
		{&m.xbf, 2 * max(P, R) * max(m.H, m.qd, m.I)}, {&m.logits, 4 * R * m.V}, {&m.toks, 4 * 3 * R},
		{&m.params, 8 * 4 * R}, {&m.part, 4 * m.maxSplitRows() * m.qd}, {&m.partML, 4 * m.maxSplitRows() * m.geo.nh * 2},
	}
	for _, s := range sizes {
		p, err := m.alloc(s.n)
		if err != nil {
			return fmt.Errorf("activations: %w", err)
		}
		*s.p = p
	}
	m.maxBlocks = (m.cfg.MaxPositionEmbeddings + blockTokens - 1) / blockTokens
	l := metaLayout{toks: 0, pos: P, seq: 2 * P, rows: 3 * P, tableOff: 4 * P, chunk: 4*P + R, tiles: 4*P + R + 1}
	l.tables = l.tiles + 2*(P+R) // a tile per token at most
	l.size = l.tables + R*m.maxBlocks
	m.ml = l
	m.metaHost = make([]int32, l.size)
	var err error
	m.meta, err = m.alloc(4 * l.size)
	return err
}

// splits is the key splits of decode attention for a decode pass of T sequences: those of its
// bucket (decodeBucket), so that a pass padded to its bucket's graph and the same pass launched
// directly split the keys alike and agree exactly.
func (m *Model) splits(T int) int {
	B := decodeBucket(T, min(m.opts.MaxRows, m.opts.MaxPass))
	return decodeSplits(B, m.geo.nkv, m.sms, m.cfg.MaxPositionEmbeddings)
}

// maxSplitRows is the most (token, split) pairs of a decode pass: T·splits(T) at its largest.
func (m *Model) maxSplitRows() int {
	n := 0
	for T := 1; T <= m.opts.MaxRows; T++ {
		if S := m.splits(T); S > 1 {
			n = max(n, T*S)
		}
	}
	return max(n, 1)
}

// defaultCacheTokens is the pool's size where Options.CacheTokens is 0.
func (m *Model) defaultCacheTokens(perToken int) int {
	if d, ok := m.dev.(interface{ memInfo() (int, int, error) }); ok {
		if free, _, err := d.memInfo(); err == nil {
			return min(4<<20, int(0.4*float64(free))/perToken)
		}
	}
	return 65536
}

func (m *Model) allocPool() error {
	perToken := m.L * 2 * m.kvd * 2 // bytes: layers × (K, V) × kv dims × bf16
	tokens := m.opts.CacheTokens
	if tokens <= 0 {
		tokens = m.defaultCacheTokens(perToken)
	}
	m.nblocks = max(1, tokens/blockTokens)
	m.padBlock = int32(m.nblocks) // one more block than the caches share
	m.layerStride = (m.nblocks + 1) * 2 * m.kvd * blockTokens
	p, err := m.alloc(m.L * m.layerStride * 2)
	if err != nil {
		return fmt.Errorf("KV cache pool of %d tokens (%d MiB): %w", m.nblocks*blockTokens, (m.L*m.layerStride*2)>>20, err)
	}
	m.kv = p
	m.freeBlocks = make([]int32, m.nblocks)
	m.refs = make([]int32, m.nblocks)
	for i := range m.freeBlocks {
		m.freeBlocks[i] = int32(m.nblocks - 1 - i)
	}
	return nil
}

// layerKV is layer l's part of the pool.
func (m *Model) layerKV(l int) Ptr { return m.kv + Ptr(2*l*m.layerStride) }

func (m *Model) free() {
	for _, g := range m.graphs {
		g.Destroy()
	}
	m.graphs = nil
	for _, p := range m.allocs {
		m.dev.Free(p)
	}
	m.allocs = nil
}

// Device returns the device's description.
func (m *Model) Device() string { return m.dev.Name() }

// BLAS reports whether the model's larger products run on cuBLAS.
func (m *Model) BLAS() bool { return m.blas }

// bf16Scratch is the bf16 activation buffer cuBLAS products use, or 0 (own kernels only).
func (m *Model) bf16Scratch() Ptr {
	if m.blas {
		return m.xbf
	}
	return 0
}

// Config returns the model's configuration.
func (m *Model) Config() qwen2.Config { return m.cfg }

// EOS returns the end-of-sequence token ids.
func (m *Model) EOS() []int { return slices.Clone(m.eos) }

// BOS returns the beginning-of-sequence token id, or -1.
func (m *Model) BOS() int { return m.bos }

// VocabSize returns the number of logits per position.
func (m *Model) VocabSize() int { return m.V }

// ContextLength returns max_position_embeddings.
func (m *Model) ContextLength() int { return m.cfg.MaxPositionEmbeddings }

// CacheTokens returns the KV pool's capacity in tokens.
func (m *Model) CacheTokens() int { return m.nblocks * blockTokens }

// WeightDType is the dtype the weights are held in on the device.
func (m *Model) WeightDType() cpu.DType { return cpu.BF16 }

// Close releases the device memory and the device; the model must not be used afterwards.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	m.free()
	if err := m.dev.Close(); err != nil {
		return fmt.Errorf("cuda: %s: %w", m.dir, err)
	}
	return nil
}

var errClosed = errors.New("cuda: model is closed")

// envNoGraphs, when 1, runs decode steps as direct launches (Options.NoGraphs).
const envNoGraphs = "CHAINEDSQL_CUDA_NOGRAPHS"

func graphsOff(o Options) bool { return o.NoGraphs || os.Getenv(envNoGraphs) == "1" }
