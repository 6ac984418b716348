package student

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/cuda"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/regular"
)

// Options are how Open loads a model directory.
type Options struct {
	// Tokenizer is a tokenizer.json (or a directory holding one) to use when the model
	// directory has none; the directory's own always wins. Neither is ErrNoTokenizer.
	Tokenizer string
	// DType is the weight type: "" or "stored" (as in the files), "f32", "bf16" or "q8".
	DType string
	// Threads, when > 0, sets the CPU kernels' thread count (cpu.SetThreads, process-wide).
	Threads int
	// Mmap uses weights already in the wanted type in place from the mapped files
	// (qwen2.Options.Mmap) instead of copying them into huge-page memory.
	Mmap bool
	// KVCache is the CPU backend's KV cache value type: "f32" or "bf16" (qwen2.Options.KVBF16:
	// half the bytes at depth, results change slightly); "" is bf16 for q8 weights and f32 for
	// the others (qwen2.DefaultKVBF16). The CUDA backends' cache is always bf16; "f32" there is
	// an error.
	KVCache string
	// Backend runs the model on "cpu" (the default), "cuda" (an NVIDIA GPU through the driver)
	// or "cuda-emulated" (the CUDA kernels on the CPU, in binaries built with -tags cudaemu).
	Backend string
	// ModelID names the model (default the directory's base name).
	ModelID string
	// Sampling holds the defaults for unset chat.Options (zero: greedy, 2048 max tokens).
	Sampling Sampling
	// Generate tunes the scheduler.
	Generate generate.Config
	// Opener opens every file the load reads: config.json, generation_config.json, the
	// safetensors files, tokenizer.json and tokenizer_config.json (nil: plainly). A server's
	// reload (Successor) passes one confined to its --weights-root (regular.Confine).
	Opener *regular.Opener
}

// ErrNoTokenizer is Open's error for a model directory without tokenizer.json when
// Options.Tokenizer is empty.
var ErrNoTokenizer = errors.New("no tokenizer")

// Open loads the Hugging Face model directory dir (config.json, model.safetensors or a sharded
// index, generation_config.json, tokenizer.json) and returns a Student over it. The stop tokens
// are the model's eos ids plus DefaultStops (every special token of the tokenizer).
func Open(dir string, opts Options) (*Student, error) {
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("student: model directory: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("student: model directory %s is not a directory", dir)
	}
	tokPath := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(tokPath); errors.Is(err, fs.ErrNotExist) {
		if opts.Tokenizer == "" {
			return nil, fmt.Errorf("student: %w: %s has no tokenizer.json and no other was given", ErrNoTokenizer, dir)
		}
		tokPath = opts.Tokenizer
	}
	m, err := LoadModel(dir, opts)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.LoadWith(tokPath, opts.Opener)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("student: %w", err)
	}
	if tok.VocabSize() > m.VocabSize() {
		m.Close()
		return nil, fmt.Errorf("student: tokenizer %s has %d tokens, more than the %d rows of the model in %s", tokPath, tok.VocabSize(), m.VocabSize(), dir)
	}
	stops := stopIDs(m, tok)
	id := opts.ModelID
	if id == "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			abs = dir
		}
		id = filepath.Base(abs)
	}
	s, err := New(m, tok, Config{ModelID: id, Sampling: opts.Sampling, StopIDs: stops, Generate: opts.Generate})
	if err != nil {
		m.Close()
		return nil, err
	}
	s.closers = append(s.closers, m.Close)
	return s, nil
}

// stopIDs are m's eos ids plus DefaultStops(tok).
func stopIDs(m Model, tok Tokenizer) []int {
	stops := m.EOS()
	for _, id := range DefaultStops(tok) {
		if !slices.Contains(stops, id) {
			stops = append(stops, id)
		}
	}
	return stops
}

// Model is a loaded model on any backend.
type Model interface {
	lm.Model
	// EOS returns the end-of-sequence token ids.
	EOS() []int
	// WeightDType is the dtype the weights are held in.
	WeightDType() cpu.DType
	// Close releases the model's memory.
	Close() error
}

// Backends, as Options.Backend takes them.
const (
	BackendCPU = "cpu"
)

// ParseBackend checks a backend name: cpu, cuda or cuda-emulated ("" is cpu).
func ParseBackend(s string) (string, error) {
	switch s {
	case "", BackendCPU:
		return BackendCPU, nil
	case cuda.BackendCUDA, cuda.BackendEmulated:
		return s, nil
	}
	return "", fmt.Errorf("backend %q: want %s, %s or %s", s, BackendCPU, cuda.BackendCUDA, cuda.BackendEmulated)
}

// LoadModel loads the model in dir on opts.Backend (the weight and thread options apply to
// the CPU backend; the CUDA backends hold the weights in bf16).
func LoadModel(dir string, opts Options) (Model, error) {
	backend, err := ParseBackend(opts.Backend)
	if err != nil {
		return nil, fmt.Errorf("student: %w", err)
	}
	wt, err := qwen2.ParseWeightType(opts.DType)
	if err != nil {
		return nil, fmt.Errorf("student: %w", err)
	}
	kvBF16, err := qwen2.ParseKVCache(opts.KVCache, wt)
	if err != nil {
		return nil, fmt.Errorf("student: %w", err)
	}
	if opts.Threads > 0 {
		cpu.SetThreads(opts.Threads)
	}
	if backend != BackendCPU {
		if err := cuda.CheckTypes(backend, string(wt), opts.KVCache); err != nil {
			return nil, fmt.Errorf("student: %w", err)
		}
		m, err := cuda.Load(dir, cuda.Options{Backend: backend, Opener: opts.Opener})
		if err != nil {
			return nil, fmt.Errorf("student: %w", err)
		}
		return m, nil
	}
	m, err := qwen2.Load(dir, qwen2.Options{DType: wt, Mmap: opts.Mmap, KVBF16: kvBF16, Opener: opts.Opener})
	if err != nil {
		return nil, fmt.Errorf("student: %w", err)
	}
	return m, nil
}
