package main

import (
	"errors"
	"flag"
	"fmt"

	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/cli"
)

// modelFlags are the flags every model-loading subcommand shares.
type modelFlags struct {
	dir, tokenizer string
	backend        string
	weightFlags
}

// addModelFlags defines the model flags on fs.
func addModelFlags(fs *flag.FlagSet) *modelFlags {
	m := &modelFlags{}
	fs.StringVar(&m.dir, "model", "", "Hugging Face model directory (config.json, model.safetensors, ...) (required)")
	fs.StringVar(&m.tokenizer, "tokenizer", "", tokenizerHelp)
	m.weightFlags.add(fs, "")
	fs.StringVar(&m.backend, "backend", "cpu", "runtime backend: cpu, cuda (NVIDIA GPU) or cuda-emulated (the CUDA kernels on the CPU; -tags cudaemu builds)")
	return m
}

// weightFlags are --dtype, --threads, --mmap and --kv: how the weights and the KV cache are
// held and multiplied.
type weightFlags struct {
	dtype, kv string
	threads   int
	mmap      bool
}

// add defines the flags on fs; prefix starts their help ("student: " where other policies
// share the command).
func (w *weightFlags) add(fs *flag.FlagSet, prefix string) {
	fs.StringVar(&w.dtype, "dtype", "", prefix+"weight type: f32, bf16 or q8 (default: as stored)")
	fs.IntVar(&w.threads, "threads", 0, prefix+"CPU threads for the kernels (default: all cores)")
	fs.BoolVar(&w.mmap, "mmap", false, prefix+"use weights stored in the wanted type in place from the mapped file (shared page cache) instead of copying them into huge-page memory")
	fs.StringVar(&w.kv, "kv", "", prefix+"KV cache value type on the cpu backend: f32 or bf16 (half the bytes a long context reads and holds; results change slightly) (default: bf16 with --dtype q8, f32 otherwise)")
}

// check returns the usage error of a bad --dtype or --kv.
func (w *weightFlags) check() error {
	_, _, err := w.parse()
	return err
}

// parse returns the weight type and whether the KV cache is bf16, or the usage error of a bad
// --dtype or --kv.
func (w *weightFlags) parse() (qwen2.WeightType, bool, error) {
	wt, err := qwen2.ParseWeightType(w.dtype)
	if err != nil {
		return "", false, cli.Usagef("--dtype: %v", err)
	}
	kvBF16, err := qwen2.ParseKVCache(w.kv, wt)
	if err != nil {
		return "", false, cli.Usagef("--kv %q: want f32 or bf16", w.kv)
	}
	return wt, kvBF16, nil
}

// check returns the usage error of a missing --model, a bad --dtype or a bad --backend.
func (m *modelFlags) check() error {
	if m.dir == "" {
		return cli.Usagef("--model DIR is required")
	}
	if err := m.weightFlags.check(); err != nil {
		return err
	}
	if _, err := student.ParseBackend(m.backend); err != nil {
		return cli.Usagef("--%v", err)
	}
	return nil
}

// options turns the flags into student.Options.
func (m *modelFlags) options() student.Options {
	return student.Options{Tokenizer: cli.FallbackTokenizer(m.tokenizer), DType: m.dtype, KVCache: m.kv, Threads: m.threads, Mmap: m.mmap, Backend: m.backend}
}

// open loads the model directory with opts (from options), saying how to give a tokenizer
// when it has none.
func (m *modelFlags) open(opts student.Options) (*student.Student, error) {
	st, err := student.Open(m.dir, opts)
	return st, tokenizerHint(err)
}

// tokenizerHelp is the --tokenizer flag's help in every subcommand that loads a model.
const tokenizerHelp = "tokenizer.json or its directory, used when the model directory has none (default $" + cli.TokenizerEnv + ", else ../shared/tokenizer/qwen2.5 when present)"

// tokenizerHint adds to student.ErrNoTokenizer how to give a tokenizer; other errors pass
// unchanged.
func tokenizerHint(err error) error {
	if errors.Is(err, student.ErrNoTokenizer) {
		return fmt.Errorf("%w; give one with --tokenizer PATH or $%s (a tokenizer.json or its directory, e.g. the Qwen2.5 tokenizer's)", err, cli.TokenizerEnv)
	}
	return err
}
