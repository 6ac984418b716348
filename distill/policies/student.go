package policies

import (
	"fmt"
	"os"
	"strconv"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/inference/student"
)

// Environment variables read by the "student:DIR" policy, for what a spec cannot carry.
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
	// EnvStudentBackend is the runtime backend: cpu (default), cuda or cuda-emulated.
	EnvStudentBackend = "CHAINEDSQL_STUDENT_BACKEND"
)

func init() {
	distill.RegisterPolicy("student", openStudent)
}

// openStudent loads the bundled runtime on the model directory dir as a policy.
func openStudent(dir string) (chat.Policy, string, error) {
	opts := student.Options{Tokenizer: os.Getenv(EnvStudentTokenizer), DType: os.Getenv(EnvStudentDType), Backend: os.Getenv(EnvStudentBackend)}
	switch v := os.Getenv(EnvStudentMmap); v {
	case "", "0":
	case "1":
		opts.Mmap = true
	default:
		return nil, "", fmt.Errorf("%s=%q: want 0 or 1", EnvStudentMmap, v)
	}
	if v := os.Getenv(EnvStudentThreads); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, "", fmt.Errorf("%s=%q: want a positive thread count", EnvStudentThreads, v)
		}
		opts.Threads = n
	}
	s, err := student.Open(dir, opts)
	if err != nil {
		return nil, "", err
	}
	return s, s.ModelID(), nil
}
