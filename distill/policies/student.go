package policies

import (
	"fmt"
	"strconv"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/inference/student"
)

// Environment variables a command may read into Options.Student with StudentEnv, for the
// "student:DIR" policy's settings that a spec cannot carry (the documented forms; the library
// itself reads no environment).
const (
	// EnvStudentTokenizer is the tokenizer.json (or its directory) used when DIR has none.
	EnvStudentTokenizer = "CHAINEDSQL_STUDENT_TOKENIZER"
	// EnvStudentDType is the weight type: stored (default), f32, bf16 or q8.
	EnvStudentDType = "CHAINEDSQL_STUDENT_DTYPE"
	// EnvStudentThreads is the CPU kernels' thread count (default all cores).
	EnvStudentThreads = "CHAINEDSQL_STUDENT_THREADS"
	// EnvStudentMmap, when 1, uses the weights in place from the mapped files (shared page
	// cache between processes) instead of copying them into huge-page memory.
	EnvStudentMmap = "CHAINEDSQL_STUDENT_MMAP"
	// EnvStudentKV is the CPU backend's KV cache type: f32 or bf16 (default: bf16 for q8 weights,
	// f32 for the others).
	EnvStudentKV = "CHAINEDSQL_STUDENT_KV"
	// EnvStudentBackend is the runtime backend: cpu (default), cuda or cuda-emulated.
	EnvStudentBackend = "CHAINEDSQL_STUDENT_BACKEND"
	// EnvStudentCacheTokens is the generator's CacheTokens: the tokens of finished
	// conversations' KV caches kept for prefix reuse (default 65536; negative: no reuse).
	EnvStudentCacheTokens = "CHAINEDSQL_STUDENT_CACHE_TOKENS"
)

// StudentEnv reads the EnvStudent* variables through getenv (os.Getenv in a command) into
// student options; unset variables leave their fields zero. A malformed value is an error
// naming the variable.
func StudentEnv(getenv func(string) string) (student.Options, error) {
	opts := student.Options{Tokenizer: getenv(EnvStudentTokenizer), DType: getenv(EnvStudentDType), Backend: getenv(EnvStudentBackend), KVCache: getenv(EnvStudentKV)}
	if _, err := qwen2.ParseKVCache(opts.KVCache, qwen2.AsStored); err != nil {
		return opts, fmt.Errorf("%s=%q: want f32 or bf16", EnvStudentKV, opts.KVCache)
	}
	switch v := getenv(EnvStudentMmap); v {
	case "", "0":
	case "1":
		opts.Mmap = true
	default:
		return opts, fmt.Errorf("%s=%q: want 0 or 1", EnvStudentMmap, v)
	}
	if v := getenv(EnvStudentThreads); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return opts, fmt.Errorf("%s=%q: want a positive thread count", EnvStudentThreads, v)
		}
		opts.Threads = n
	}
	if v := getenv(EnvStudentCacheTokens); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return opts, fmt.Errorf("%s=%q: want a token count (negative: no prefix reuse)", EnvStudentCacheTokens, v)
		}
		opts.Generate.CacheTokens = n
	}
	return opts, nil
}

// openStudent loads the bundled runtime on the model directory dir with opts as a policy.
func openStudent(dir string, opts student.Options) (chat.Policy, string, error) {
	s, err := student.Open(dir, opts)
	if err != nil {
		return nil, "", err
	}
	return s, s.ModelID(), nil
}
