package cpu

import (
	"fmt"
	"testing"
)

// BenchmarkOps times the vector helpers of ops.go and RowF32's widening, one call per iteration,
// on every kernel tier this CPU has, at a head's width (64: attention's Dot and Axpy per key) and
// the 0.5B model's hidden and MLP widths; MB/s is the bytes the op reads.
func BenchmarkOps(b *testing.B) {
	for _, tier := range []string{"avx512", "avx2", "go"} {
		b.Run(tier, func(b *testing.B) {
			switch {
			case tier == "avx512" && !hasAVX512, tier == "avx2" && !hasAVX2:
				b.Skip("CPU without " + tier)
			}
			was := UseSIMD(tier != "go")
			defer UseSIMD(was)
			avxWas := avx512Off.Swap(tier == "avx2")
			defer avx512Off.Store(avxWas)
			for _, n := range []int{64, qHidden, qInter} {
				x, y, z := make([]float32, n), make([]float32, n), make([]float32, n)
				for i := range x {
					x[i], y[i], z[i] = float32(i%7)/7-0.5, float32(i%5)/5-0.4, 1
				}
				bf := fastMatrix(BF16, 1, n, 1)
				ops := []struct {
					name  string
					bytes int
					f     func()
				}{
					{"Dot", 8 * n, func() { z[0] = Dot(x, y) }},
					{"Axpy", 8 * n, func() { Axpy(z, 1e-3, x) }},
					{"Add", 8 * n, func() { Add(z, x) }},
					{"RMSNorm", 8 * n, func() { RMSNorm(z, x, y, 1e-6) }},
					{"Softmax", 4 * n, func() { copy(z, x); Softmax(z) }},
					{"SiLUMul", 8 * n, func() { SiLUMul(z, x, y) }},
					{"RowF32BF16", 2 * n, func() { RowF32(z, bf, 0) }},
				}
				for _, op := range ops {
					b.Run(fmt.Sprintf("%s/%d", op.name, n), func(b *testing.B) {
						b.SetBytes(int64(op.bytes))
						for b.Loop() {
							op.f()
						}
					})
				}
			}
		})
	}
}
