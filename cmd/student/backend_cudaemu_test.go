//go:build cudaemu

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/internal/shared"
)

// TestLogitsEmulated: student logits --backend cuda-emulated (the CUDA kernels on the CPU)
// agrees with llama.cpp's reference logits on the tiny checkpoint, within the CUDA backend's
// bf16 KV-cache tolerance (inference/cuda: logitTol).
func TestLogitsEmulated(t *testing.T) {
	dir := shared.Path(t, "models/tiny-qwen2-f32")
	data, err := os.ReadFile(filepath.Join(dir, "reference_logits.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref refFile
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(ref.Tokens))
	for i, id := range ref.Tokens {
		ids[i] = strconv.Itoa(id)
	}
	var stdout, stderr bytes.Buffer
	if code := dispatch(context.Background(), []string{"logits", "--model", dir, "--ids", strings.Join(ids, ","), "--top", "10", "--backend", "cuda-emulated"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	checkTop(t, "bf16", stdout.Bytes(), &ref, 2.5e-3)
	if !strings.Contains(stdout.String(), `"dtype":"bf16"`) {
		t.Fatalf("dtype not bf16: %.200s", stdout.String())
	}
}
