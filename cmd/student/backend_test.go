package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/inference/cuda"
	"github.com/chainedsql/chainedsql/internal/cli"
)

// TestBackendRefused: a CUDA backend that cannot run here fails with one line, and bad backend
// flags are usage errors: their line and the hint to -h.
func TestBackendRefused(t *testing.T) {
	t.Parallel()
	args := tinyArgs(t)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--backend", "rocm"}, 2, "want cpu, cuda or cuda-emulated"},
		{[]string{"--backend", "cuda", "--dtype", "q8"}, 1, "holds the weights in bf16"},
	}
	if cuda.Check(cuda.BackendCUDA) != nil {
		cases = append(cases, struct {
			args []string
			code int
			want string
		}{[]string{"--backend", "cuda"}, 1, "cuda: backend unavailable: "})
	}
	if cuda.Check(cuda.BackendEmulated) != nil {
		cases = append(cases, struct {
			args []string
			code int
			want string
		}{[]string{"--backend", "cuda-emulated"}, 1, "needs a binary built with -tags cudaemu"})
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		code := dispatch(context.Background(), append(append([]string{"logits", "--ids", "1,2"}, args...), c.args...), &stdout, &stderr)
		msg := stderr.String()
		lines := 1 // a runtime failure: its error once
		if c.code == cli.ExitUsage {
			lines = 2 // the error and the hint to -h
		}
		if code != c.code || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != lines || stdout.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %d lines containing %q", c.args, code, msg, c.code, lines, c.want)
		}
	}
}
