//go:build cudaemu

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/internal/shared"
)

// TestLogitsEmulated: student logits --backend cuda-emulated (the CUDA kernels on the CPU)
// agrees with llama.cpp's reference logits on the tiny checkpoint, within the CUDA backend's
// bf16 KV-cache tolerance (inference/cuda: logitTol).
func TestLogitsEmulated(t *testing.T) {
	dir := shared.Path(t, "models/tiny-qwen2-f32")
	ref, ids := readRef(t, dir)
	var stdout, stderr bytes.Buffer
	if code := dispatch(context.Background(), []string{"logits", "--model", dir, "--ids", strings.Join(ids, ","), "--top", "10", "--backend", "cuda-emulated"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	checkTop(t, "bf16", stdout.Bytes(), &ref, 2.5e-3)
	if !strings.Contains(stdout.String(), `"dtype":"bf16"`) {
		t.Fatalf("dtype not bf16: %.200s", stdout.String())
	}
}
