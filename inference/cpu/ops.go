package cpu

import (
	"fmt"
	"math"
)

// The vector helpers of the forward pass. Each uses an assembly kernel for the bulk (a multiple
// of 16 elements with AVX-512, of 8 with AVX2; see bulk) and scalar Go for the rest; with SIMD off
// they are plain loops.

// Kernel tiers, as bulk returns them.
const (
	tierGo = iota
	tierAVX2
	tier512
)

// bulk returns how many of n elements the assembly kernels take and which tier runs them.
func bulk(n int) (k, tier int) {
	switch {
	case n >= 16 && use512():
		return n &^ 15, tier512
	case n >= 8 && useAVX2():
		return n &^ 7, tierAVX2
	}
	return 0, tierGo
}

func checkLen(op string, want int, got ...int) {
	for _, g := range got {
		if g < want {
			panic(fmt.Sprintf("cpu: %s: slice of length %d, want at least %d", op, g, want))
		}
	}
}

// Dot returns Σ a[i]·b[i] over len(a) elements; b must be at least as long.
func Dot(a, b []float32) float32 {
	n := len(a)
	checkLen("Dot", n, len(b))
	var s float32
	k, tier := bulk(n)
	switch tier {
	case tier512:
		s = dotF32(&a[0], &b[0], k)
	case tierAVX2:
		s = avx2DotF32(&a[0], &b[0], k)
	}
	for i := k; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

// Axpy computes dst[i] += a·x[i] over len(dst) elements.
func Axpy(dst []float32, a float32, x []float32) {
	n := len(dst)
	checkLen("Axpy", n, len(x))
	k, tier := bulk(n)
	switch tier {
	case tier512:
		axpyF32(&dst[0], a, &x[0], k)
	case tierAVX2:
		avx2AxpyF32(&dst[0], a, &x[0], k)
	}
	for i := k; i < n; i++ {
		dst[i] += a * x[i]
	}
}

// Add computes dst[i] += x[i] over len(dst) elements.
func Add(dst, x []float32) {
	n := len(dst)
	checkLen("Add", n, len(x))
	k, tier := bulk(n)
	switch tier {
	case tier512:
		addF32(&dst[0], &x[0], k)
	case tierAVX2:
		avx2AddF32(&dst[0], &x[0], k)
	}
	for i := k; i < n; i++ {
		dst[i] += x[i]
	}
}

// RMSNorm computes dst = x / sqrt(mean(x²) + eps) · weight over len(x) elements (dst may be x).
func RMSNorm(dst, x, weight []float32, eps float32) {
	n := len(x)
	checkLen("RMSNorm", n, len(dst), len(weight))
	if n == 0 {
		return
	}
	ss := Dot(x, x)
	s := float32(1 / math.Sqrt(float64(ss)/float64(n)+float64(eps)))
	k, tier := bulk(n)
	switch tier {
	case tier512:
		mulScaleF32(&dst[0], &x[0], &weight[0], s, k)
	case tierAVX2:
		avx2MulScaleF32(&dst[0], &x[0], &weight[0], s, k)
	}
	for i := k; i < n; i++ {
		dst[i] = x[i] * s * weight[i]
	}
}

// Softmax replaces x by exp(x - max x) / Σ exp(x - max x). -Inf entries (masked positions) become
// 0; at least one entry must be finite. The SIMD exp is Cephes' expf polynomial (relative error
// about 2e-7 per element).
func Softmax(x []float32) {
	n := len(x)
	if n == 0 {
		return
	}
	k, tier := bulk(n)
	m := float32(math.Inf(-1))
	switch tier {
	case tier512:
		m = maxF32(&x[0], k)
	case tierAVX2:
		m = avx2MaxF32(&x[0], k)
	}
	for i := k; i < n; i++ {
		m = max(m, x[i])
	}
	var sum float32
	switch tier {
	case tier512:
		sum = expSumF32(&x[0], k, m)
	case tierAVX2:
		sum = avx2ExpSumF32(&x[0], k, m)
	}
	for i := k; i < n; i++ {
		x[i] = float32(math.Exp(float64(x[i] - m)))
		sum += x[i]
	}
	inv := 1 / sum
	switch tier {
	case tier512:
		scaleF32(&x[0], inv, k)
	case tierAVX2:
		avx2ScaleF32(&x[0], inv, k)
	}
	for i := k; i < n; i++ {
		x[i] *= inv
	}
}

// SiLUMul computes dst[i] = silu(gate[i])·up[i] with silu(g) = g/(1+e^-g) (the SwiGLU MLP) over
// len(dst) elements; dst may be gate or up.
func SiLUMul(dst, gate, up []float32) {
	n := len(dst)
	checkLen("SiLUMul", n, len(gate), len(up))
	k, tier := bulk(n)
	switch tier {
	case tier512:
		siluMulF32(&dst[0], &gate[0], &up[0], k)
	case tierAVX2:
		avx2SiluMulF32(&dst[0], &gate[0], &up[0], k)
	}
	for i := k; i < n; i++ {
		g := gate[i]
		dst[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}
