package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/chainedsql/chainedsql/inference/student"
)

// modelFlags are the flags every model-loading subcommand shares.
type modelFlags struct {
	dir, tokenizer, dtype string
	backend               string
	threads               int
	mmap                  bool
}

// newModelFlagSet returns the flag set of subcommand name, writing to stderr, with the model
// flags added.
func newModelFlagSet(name string, stderr io.Writer) (*flag.FlagSet, *modelFlags) {
	fs := flag.NewFlagSet("student "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	m := &modelFlags{}
	fs.StringVar(&m.dir, "model", "", "Hugging Face model directory (config.json, model.safetensors, ...) (required)")
	fs.StringVar(&m.tokenizer, "tokenizer", "", "tokenizer.json or its directory, used when the model directory has none (default $CHAINEDSQL_TOKENIZER)")
	fs.StringVar(&m.dtype, "dtype", "", "weight type: f32, bf16 or q8 (default: as stored)")
	fs.IntVar(&m.threads, "threads", 0, "CPU threads for the kernels (default: all cores)")
	fs.StringVar(&m.backend, "backend", "cpu", "runtime backend: cpu, cuda (NVIDIA GPU) or cuda-emulated (the CUDA kernels on the CPU; -tags cudaemu builds)")
	fs.BoolVar(&m.mmap, "mmap", false, "use weights stored in the wanted type in place from the mapped file (shared page cache) instead of copying them into huge-page memory")
	return fs, m
}

// check reports a missing --model.
func (m *modelFlags) check(cmd string) error {
	if m.dir == "" {
		return fmt.Errorf("student %s: --model DIR is required", cmd)
	}
	return nil
}

// options turns the flags into student.Options.
func (m *modelFlags) options() student.Options {
	tok := m.tokenizer
	if tok == "" {
		tok = os.Getenv("CHAINEDSQL_TOKENIZER")
	}
	return student.Options{Tokenizer: tok, DType: m.dtype, Threads: m.threads, Mmap: m.mmap, Backend: m.backend}
}
