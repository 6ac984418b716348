//go:build !unix

package qwen2

import "time"

// processCPU is 0 where getrusage is not available: the benchmarks' CPU-time metrics read 0.
func processCPU() time.Duration { return 0 }
