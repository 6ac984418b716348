package main

import (
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/distill/policies"
)

// TestEvalStudentOptions: eval's flags reach the student:DIR policy's options over the
// documented environment, --batch becomes the generator's MaxBatch (the conversations in flight
// decode together), --mmap and --cache-tokens count only when given, and --backend (default cpu)
// wins as it always has.
func TestEvalStudentOptions(t *testing.T) {
	env := map[string]string{policies.EnvStudentTokenizer: "/env-tok", policies.EnvStudentDType: "bf16", policies.EnvStudentThreads: "3",
		policies.EnvStudentMmap: "1", policies.EnvStudentCacheTokens: "100", policies.EnvStudentBackend: "cuda", policies.EnvStudentKV: "bf16"}
	getenv := func(k string) string { return env[k] }
	o, err := evalStudentOptions(getenv, map[string]bool{}, evalStudentFlags{backend: "cpu", cacheTokens: 65536})
	if err != nil || o.Tokenizer != "/env-tok" || o.DType != "bf16" || o.Threads != 3 || !o.Mmap || o.Generate.CacheTokens != 100 || o.Backend != "cpu" || o.Generate.MaxBatch != 0 || o.KVCache != "bf16" {
		t.Fatalf("environment only: %+v %v", o, err)
	}
	o, err = evalStudentOptions(getenv, map[string]bool{"mmap": true, "cache-tokens": true, "batch": true},
		evalStudentFlags{tokenizer: "/flag-tok", dtype: "q8", kv: "f32", backend: "cpu", threads: 1, mmap: false, cacheTokens: -1, batch: 32})
	if err != nil || o.Tokenizer != "/flag-tok" || o.DType != "q8" || o.Threads != 1 || o.Mmap || o.Generate.CacheTokens != -1 || o.Generate.MaxBatch != 32 || o.KVCache != "f32" {
		t.Fatalf("flags over the environment: %+v %v", o, err)
	}
	o, err = evalStudentOptions(func(string) string { return "" }, map[string]bool{"mmap": true}, evalStudentFlags{backend: "cpu", mmap: true, batch: 5})
	if err != nil || !o.Mmap || o.Generate.MaxBatch != 5 || o.Generate.CacheTokens != 0 {
		t.Fatalf("--mmap --batch 5: %+v %v", o, err)
	}
	env[policies.EnvStudentThreads] = "many"
	if _, err := evalStudentOptions(getenv, nil, evalStudentFlags{}); err == nil || !strings.Contains(err.Error(), policies.EnvStudentThreads) {
		t.Fatalf("a malformed environment: %v", err)
	}
}
