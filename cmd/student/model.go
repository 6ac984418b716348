package main

import (
	"flag"
	"os"

	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/cli"
)

// modelFlags are the flags every model-loading subcommand shares.
type modelFlags struct {
	dir, tokenizer, dtype string
	backend               string
	threads               int
	mmap                  bool
}

// addModelFlags defines the model flags on fs.
func addModelFlags(fs *flag.FlagSet) *modelFlags {
	m := &modelFlags{}
	fs.StringVar(&m.dir, "model", "", "Hugging Face model directory (config.json, model.safetensors, ...) (required)")
	fs.StringVar(&m.tokenizer, "tokenizer", "", "tokenizer.json or its directory, used when the model directory has none (default $"+cli.TokenizerEnv+")")
	addWeightFlags(fs, "", &m.dtype, &m.threads, &m.mmap)
	fs.StringVar(&m.backend, "backend", "cpu", "runtime backend: cpu, cuda (NVIDIA GPU) or cuda-emulated (the CUDA kernels on the CPU; -tags cudaemu builds)")
	return m
}

// addWeightFlags defines --dtype, --threads and --mmap, the flags of how the weights are held
// and multiplied; prefix starts their help ("student: " where other policies share the command).
func addWeightFlags(fs *flag.FlagSet, prefix string, dtype *string, threads *int, mmap *bool) {
	fs.StringVar(dtype, "dtype", "", prefix+"weight type: f32, bf16 or q8 (default: as stored)")
	fs.IntVar(threads, "threads", 0, prefix+"CPU threads for the kernels (default: all cores)")
	fs.BoolVar(mmap, "mmap", false, prefix+"use weights stored in the wanted type in place from the mapped file (shared page cache) instead of copying them into huge-page memory")
}

// check returns the usage error of a missing --model, a bad --dtype or a bad --backend.
func (m *modelFlags) check() error {
	if m.dir == "" {
		return cli.Usagef("--model DIR is required")
	}
	if _, err := qwen2.ParseWeightType(m.dtype); err != nil {
		return cli.Usagef("--dtype: %v", err)
	}
	if _, err := student.ParseBackend(m.backend); err != nil {
		return cli.Usagef("--%v", err)
	}
	return nil
}

// options turns the flags into student.Options.
func (m *modelFlags) options() student.Options {
	tok := m.tokenizer
	if tok == "" {
		tok = os.Getenv(cli.TokenizerEnv)
	}
	return student.Options{Tokenizer: tok, DType: m.dtype, Threads: m.threads, Mmap: m.mmap, Backend: m.backend}
}
