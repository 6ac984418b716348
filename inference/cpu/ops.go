package cpu

import (
	"fmt"
	"math"
)

// The vector helpers of the forward pass. Each uses an AVX-512 kernel for the bulk (a multiple
// of 16 elements) and scalar Go for the rest; with SIMD off they are plain loops.

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
	k := 0
	if SIMD() && n >= 16 {
		k = n &^ 15
		s = dotF32(&a[0], &b[0], k)
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
	k := 0
	if SIMD() && n >= 16 {
		k = n &^ 15
		axpyF32(&dst[0], a, &x[0], k)
	}
	for i := k; i < n; i++ {
		dst[i] += a * x[i]
	}
}

// Add computes dst[i] += x[i] over len(dst) elements.
func Add(dst, x []float32) {
	n := len(dst)
	checkLen("Add", n, len(x))
	k := 0
	if SIMD() && n >= 16 {
		k = n &^ 15
		addF32(&dst[0], &x[0], k)
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
	k := 0
	if SIMD() && n >= 16 {
		k = n &^ 15
		mulScaleF32(&dst[0], &x[0], &weight[0], s, k)
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
	simd := SIMD() && n >= 16
	k := 0
	m := float32(math.Inf(-1))
	if simd {
		k = n &^ 15
		m = maxF32(&x[0], k)
	}
	for i := k; i < n; i++ {
		m = max(m, x[i])
	}
	var sum float32
	if simd {
		sum = expSumF32(&x[0], k, m)
	}
	for i := k; i < n; i++ {
		x[i] = float32(math.Exp(float64(x[i] - m)))
		sum += x[i]
	}
	inv := 1 / sum
	if simd {
		scaleF32(&x[0], inv, k)
	} else {
		k = 0
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
	k := 0
	if SIMD() && n >= 16 {
		k = n &^ 15
		siluMulF32(&dst[0], &gate[0], &up[0], k)
	}
	for i := k; i < n; i++ {
		g := gate[i]
		dst[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}
