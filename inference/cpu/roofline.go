package cpu

import (
	"context"
	"fmt"
	"time"

	"github.com/chainedsql/chainedsql/inference/hugemem"
)

// ReadBandwidth measures the machine's memory read bandwidth as the decode kernels see it, in
// bytes per second: a buffer of at least size bytes, and of at least 4× the L3 cache (so that
// nothing of it is cache-resident), held as the weights are (huge pages where the kernel gives
// them) and summed with Dot in 64 KiB chunks over the worker pool (Threads()). The best of
// passes passes (at least one) counts; the buffer is freed before it returns. ctx cancels
// between passes.
func ReadBandwidth(ctx context.Context, size, passes int) (float64, error) {
	const chunk = 1 << 14 // f32 values: 64 KiB
	size = max(size, 4*CPU().L3, 64<<20)
	n := (size/4 + chunk - 1) / chunk * chunk
	var mem hugemem.Arena
	defer mem.Free()
	buf := hugemem.Float32s(mem.Alloc(4*n), n)
	for i := range buf {
		buf[i] = 1
	}
	sums := make([]float32, n/chunk)
	var best time.Duration
	for range max(passes, 1) {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("read bandwidth: %w", err)
		}
		t0 := time.Now()
		parallelRows(n/chunk, 1, func(lo, hi int) {
			for c := lo; c < hi; c++ {
				s := buf[c*chunk : (c+1)*chunk]
				sums[c] = Dot(s, s)
			}
		})
		if d := time.Since(t0); best == 0 || d < best {
			best = d
		}
	}
	for _, s := range sums {
		if s != chunk {
			return 0, fmt.Errorf("read bandwidth: a chunk summed to %v, want %d", s, chunk)
		}
	}
	return float64(4*n) / best.Seconds(), nil
}
