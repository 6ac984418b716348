package cpu

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// The vector helpers of the forward pass. Each uses an assembly kernel of the tier in use for the
// bulk (a multiple of 16 elements with AVX-512, of 8 with AVX2) and scalar Go for the rest; with
// SIMD off they are plain loops.

// Kernel tiers, as vecTier.id and bulk name them.
const (
	tierGo = iota
	tierAVX2
	tier512
)

// vecTier is one tier's table of elementwise kernels (the vector helpers and the widening of
// weight rows): each takes a whole number of the tier's vectors. The portable tier has mask 0 and
// no kernels.
type vecTier struct {
	id   int // tierGo, tierAVX2 or tier512
	mask int // n & mask is how many of n elements the kernels take: -width, or 0

	dot      func(a, b *float32, n int) float32
	axpy     func(dst *float32, a float32, x *float32, n int)
	add      func(dst, x *float32, n int)
	mulScale func(dst, x, w *float32, s float32, n int)
	max      func(x *float32, n int) float32 // n > 0
	expSum   func(x *float32, n int, m float32) float32
	siluMul  func(dst, gate, up *float32, n int)
	scale    func(x *float32, s float32, n int)
	cvtBF16  func(dst *float32, src *uint16, n int)
	cvtF16   func(dst *float32, src *uint16, n int)
	cvtQ8    func(dst *float32, src *int8, scales *float32, nblocks int) // blocks of Q8Block
	cvtQ8H   func(dst *float32, src *int8, scales *uint16, nblocks int)  // cvtQ8 over half scales
}

// vecTiers are the tables of the two assembly tiers, indexed by tier. Their kernels are
// generated from one description (asmgen/vecgen) into kernels_vec_amd64.s.
//
//go:generate go run asmgen/vecgen/main.go
var vecTiers = [...]vecTier{
	tierGo: {id: tierGo},
	tierAVX2: {id: tierAVX2, mask: -8,
		dot: avx2DotF32, axpy: avx2AxpyF32, add: avx2AddF32, mulScale: avx2MulScaleF32,
		max: avx2MaxF32, expSum: avx2ExpSumF32, siluMul: avx2SiluMulF32, scale: avx2ScaleF32,
		cvtBF16: avx2CvtBF16, cvtF16: avx2CvtF16, cvtQ8: avx2CvtQ8, cvtQ8H: avx2CvtQ8H},
	tier512: {id: tier512, mask: -16,
		dot: dotF32, axpy: axpyF32, add: addF32, mulScale: mulScaleF32,
		max: maxF32, expSum: expSumF32, siluMul: siluMulF32, scale: scaleF32,
		cvtBF16: cvtBF16, cvtF16: cvtF16, cvtQ8: cvtQ8, cvtQ8H: cvtQ8H},
}

var (
	vec    atomic.Pointer[vecTier] // the table in use, set by pickTier
	pickMu sync.Mutex
)

func init() { pickTier() }

// pickTier sets vec to the table of the tier the CPU features and the off switches select: at
// start-up and whenever a tierSwitch changes. Every route reads the choice from vec (use512,
// useAVX2), so the features and switches are looked at here only.
func pickTier() {
	pickMu.Lock()
	defer pickMu.Unlock()
	switch simd := !simdOff.Load(); {
	case simd && hasAVX512 && !avx512Off.Load():
		vec.Store(&vecTiers[tier512])
	case simd && hasAVX2:
		vec.Store(&vecTiers[tierAVX2])
	default:
		vec.Store(&vecTiers[tierGo])
	}
}

// tierSwitch is an off switch of kernel tiers (simdOff, avx512Off): an atomic flag whose changes
// pick the table of vector kernels again.
type tierSwitch struct{ b atomic.Bool }

// Load reports whether the switch is on.
func (s *tierSwitch) Load() bool { return s.b.Load() }

// Store sets the switch and picks the tier again.
func (s *tierSwitch) Store(v bool) {
	s.b.Store(v)
	pickTier()
}

// Swap sets the switch, picks the tier again and returns the previous setting.
func (s *tierSwitch) Swap(v bool) (was bool) {
	was = s.b.Swap(v)
	pickTier()
	return was
}

// bulk returns how many of n elements the assembly kernels take and which tier runs them.
func bulk(n int) (k, tier int) {
	t := vec.Load()
	return n & t.mask, t.id
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
	t := vec.Load()
	k := n & t.mask
	if k > 0 {
		s = t.dot(&a[0], &b[0], k)
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
	t := vec.Load()
	k := n & t.mask
	if k > 0 {
		t.axpy(&dst[0], a, &x[0], k)
	}
	for i := k; i < n; i++ {
		dst[i] += a * x[i]
	}
}

// Add computes dst[i] += x[i] over len(dst) elements.
func Add(dst, x []float32) {
	n := len(dst)
	checkLen("Add", n, len(x))
	t := vec.Load()
	k := n & t.mask
	if k > 0 {
		t.add(&dst[0], &x[0], k)
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
	t := vec.Load()
	k := n & t.mask
	if k > 0 {
		t.mulScale(&dst[0], &x[0], &weight[0], s, k)
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
	t := vec.Load()
	k := n & t.mask
	m := float32(math.Inf(-1))
	if k > 0 {
		m = t.max(&x[0], k)
	}
	for i := k; i < n; i++ {
		m = max(m, x[i])
	}
	var sum float32
	if k > 0 {
		sum = t.expSum(&x[0], k, m)
	}
	for i := k; i < n; i++ {
		x[i] = float32(math.Exp(float64(x[i] - m)))
		sum += x[i]
	}
	inv := 1 / sum
	if k > 0 {
		t.scale(&x[0], inv, k)
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
	t := vec.Load()
	k := n & t.mask
	if k > 0 {
		t.siluMul(&dst[0], &gate[0], &up[0], k)
	}
	for i := k; i < n; i++ {
		g := gate[i]
		dst[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}

// WidenBF16 sets dst[i] to the bf16 value src[i] as f32 (exact) for every value of src (dst at
// least as long).
func WidenBF16(dst []float32, src []uint16) {
	n := len(src)
	checkLen("WidenBF16", n, len(dst))
	t := vec.Load()
	k := n & t.mask
	if k > 0 {
		t.cvtBF16(&dst[0], &src[0], k)
	}
	for i := k; i < n; i++ {
		dst[i] = BF16ToF32(src[i])
	}
}
