package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

var opSizes = []int{1, 5, 15, 16, 17, 31, 32, 33, 64, 100, 896, 4867}

func near(a, b, scale float64, rel float64) bool {
	return math.Abs(a-b) <= rel*scale+1e-7
}

func TestDotAxpyAdd(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(21, 22))
		for _, n := range opSizes {
			a, b := randVec(rng, n), randVec(rng, n+3)
			var want, scale float64
			for i := range n {
				want += float64(a[i]) * float64(b[i])
				scale += math.Abs(float64(a[i]) * float64(b[i]))
			}
			if got := Dot(a, b); !near(float64(got), want, scale, 1e-5) {
				t.Fatalf("Dot n=%d: %g, want %g", n, got, want)
			}
			dst := randVec(rng, n)
			orig := append([]float32(nil), dst...)
			Axpy(dst, 0.75, b)
			for i := range n {
				if w := orig[i] + 0.75*b[i]; !near(float64(dst[i]), float64(w), math.Abs(float64(w)), 1e-6) {
					t.Fatalf("Axpy n=%d [%d]: %g, want %g", n, i, dst[i], w)
				}
			}
			copy(dst, orig)
			Add(dst, b)
			for i := range n {
				if w := orig[i] + b[i]; dst[i] != w {
					t.Fatalf("Add n=%d [%d]: %g, want %g", n, i, dst[i], w)
				}
			}
		}
	})
}

func TestRMSNorm(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(23, 24))
		for _, n := range opSizes {
			x, w := randVec(rng, n), randVec(rng, n)
			var ss float64
			for _, v := range x {
				ss += float64(v) * float64(v)
			}
			s := 1 / math.Sqrt(ss/float64(n)+1e-6)
			dst := make([]float32, n)
			RMSNorm(dst, x, w, 1e-6)
			for i := range n {
				want := float64(x[i]) * s * float64(w[i])
				if !near(float64(dst[i]), want, math.Abs(want), 1e-5) {
					t.Fatalf("RMSNorm n=%d [%d]: %g, want %g", n, i, dst[i], want)
				}
			}
			RMSNorm(x, x, w, 1e-6) // in place
			for i := range n {
				if x[i] != dst[i] {
					t.Fatalf("RMSNorm in place n=%d [%d]: %g, want %g", n, i, x[i], dst[i])
				}
			}
		}
	})
}

func TestSoftmax(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(25, 26))
		for _, n := range opSizes {
			x := randVec(rng, n)
			for i := range x {
				x[i] *= 30 // a wide range, down to e^-60
			}
			if n > 3 {
				x[1] = float32(math.Inf(-1)) // a masked position
				x[n-1] = float32(math.Inf(-1))
			}
			m := math.Inf(-1)
			for _, v := range x {
				m = max(m, float64(v))
			}
			want := make([]float64, n)
			var sum float64
			for i, v := range x {
				want[i] = math.Exp(float64(v) - m)
				sum += want[i]
			}
			Softmax(x)
			var total float64
			for i := range n {
				w := want[i] / sum
				if !near(float64(x[i]), w, w, 2e-6) {
					t.Fatalf("Softmax n=%d [%d]: %g, want %g", n, i, x[i], w)
				}
				total += float64(x[i])
			}
			if math.Abs(total-1) > 1e-5 {
				t.Fatalf("Softmax n=%d sums to %g", n, total)
			}
			if n > 3 && (x[1] != 0 || x[n-1] != 0) {
				t.Fatalf("Softmax n=%d: masked entries %g, %g, want 0", n, x[1], x[n-1])
			}
		}
	})
}

func TestSiLUMul(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(27, 28))
		for _, n := range opSizes {
			g, u := randVec(rng, n), randVec(rng, n)
			for i := range g {
				g[i] *= 20
			}
			if n > 2 {
				g[0], g[1] = 200, -200 // saturation: silu(200) = 200, silu(-200) = -0
			}
			dst := make([]float32, n)
			SiLUMul(dst, g, u)
			for i := range n {
				gv := float64(g[i])
				want := gv / (1 + math.Exp(-gv)) * float64(u[i])
				if !near(float64(dst[i]), want, math.Abs(want), 2e-6) {
					t.Fatalf("SiLUMul n=%d [%d] g=%g: %g, want %g", n, i, g[i], dst[i], want)
				}
			}
			SiLUMul(g, g, u) // in place
			for i := range n {
				if g[i] != dst[i] {
					t.Fatalf("SiLUMul in place n=%d [%d]: %g, want %g", n, i, g[i], dst[i])
				}
			}
		}
	})
}

// TestQuantizeBlock compares quantizeBlock with math.Round on random blocks and on values that
// land exactly on halves (v/scale = k + 0.5) and on the ±127 ends.
func TestQuantizeBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	blk := make([]float32, Q8Block)
	for iter := range 2000 {
		for j := range blk {
			blk[j] = (rng.Float32()*2 - 1) * float32(1+iter%7)
		}
		if iter%3 == 0 { // scale 1: halves and the ends are exact
			blk[0] = 127
			for j := 1; j < Q8Block; j++ {
				blk[j] = float32(rng.IntN(254)-127) + 0.5*float32(rng.IntN(2))
				blk[j] = max(-127, min(127, blk[j]))
			}
		}
		got := make([]int8, Q8Block)
		sc := quantizeBlock(got, blk)
		var m float32
		for _, v := range blk {
			m = max(m, float32(math.Abs(float64(v))))
		}
		if want := leastHalf(m / 127); sc != want {
			t.Fatalf("iter %d: scale %g, want %g (the least half at or above %g)", iter, sc, want, m/127)
		}
		for j, v := range blk {
			if want := int8(math.Round(float64(v / sc))); got[j] != want {
				t.Fatalf("iter %d: q[%d] of %g/%g = %d, want %d", iter, j, v, sc, got[j], want)
			}
		}
	}
	zero := make([]int8, Q8Block)
	if sc := quantizeBlock(zero, make([]float32, Q8Block)); sc != 0 {
		t.Fatalf("all-zero block: scale %g", sc)
	}
	// Past the halves (a scale above 65504) the scale stays as it is; below the normal ones it
	// is the next multiple of 2^-24 up, and q comes from it: every value within half a step of
	// its dequantised value, however small the block (q8_0's nearest half zeroes the last two).
	for _, m := range []float32{127 * 70000, 127 * 65505, 127 * 65504, 127 * 1.1e-5, 127 * 3e-7, 127 * 1e-9, 1e-30} {
		blk := make([]float32, Q8Block)
		for j := range blk {
			blk[j] = m * float32(j%11-5) / 5
		}
		got := make([]int8, Q8Block)
		sc := quantizeBlock(got, blk)
		want := leastHalf(m / 127)
		if m/127 > 65504 {
			want = m / 127
		}
		if sc != want {
			t.Fatalf("max %g: scale %g, want %g", m, sc, want)
		}
		for j, v := range blk {
			if d := math.Abs(float64(v) - float64(got[j])*float64(sc)); d > float64(sc)/2*(1+1e-6) {
				t.Fatalf("max %g: value %g quantised to %d × %g, %g off (more than half a step)", m, v, got[j], sc, d)
			}
		}
	}
}

// leastHalf returns the least IEEE half value at or above s (s > 0, at most 65504), by search.
func leastHalf(s float32) float32 {
	lo, hi := uint16(0), uint16(0x7bff)
	for lo < hi {
		mid := (lo + hi) / 2
		if F16ToF32(mid) >= s {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return F16ToF32(lo)
}

// TestF32ToF16 checks F32ToF16 against F16ToF32 on every half: each value maps back to its bits,
// the midpoint between neighbours to the even one, and the floats just either side of it to the
// nearer; past the largest half to ±Inf, NaN to NaN.
func TestF32ToF16(t *testing.T) {
	for h := uint16(0); h < 0x7c00; h++ {
		for _, sg := range []uint16{0, 0x8000} {
			v := F16ToF32(h | sg)
			if got := F32ToF16(v); got != h|sg {
				t.Fatalf("F32ToF16(%g) = %#04x, want %#04x", v, got, h|sg)
			}
			if h == 0x7bff {
				continue
			}
			next := F16ToF32((h + 1) | sg)
			mid := float32((float64(v) + float64(next)) / 2) // exact: 12 significant bits
			even := h
			if h&1 == 1 {
				even = h + 1
			}
			if got := F32ToF16(mid); got != even|sg {
				t.Fatalf("F32ToF16(%g), the tie between %#04x and %#04x, = %#04x, want %#04x", mid, h|sg, (h+1)|sg, got, even|sg)
			}
			toward := float32(math.Inf(1))
			if sg != 0 {
				toward = -toward
			}
			if got := F32ToF16(math.Nextafter32(mid, toward)); got != (h+1)|sg {
				t.Fatalf("F32ToF16 just past %g = %#04x, want %#04x", mid, got, (h+1)|sg)
			}
			if got := F32ToF16(math.Nextafter32(mid, 0)); got != h|sg {
				t.Fatalf("F32ToF16 just short of %g = %#04x, want %#04x", mid, got, h|sg)
			}
		}
	}
	for _, c := range []struct {
		f    float32
		want uint16
	}{{65519.99, 0x7bff}, {65520, 0x7c00}, {-65520, 0xfc00}, {1e30, 0x7c00}, {float32(math.Inf(-1)), 0xfc00}, {1e-9, 0}, {-1e-9, 0x8000}} {
		if got := F32ToF16(c.f); got != c.want {
			t.Fatalf("F32ToF16(%g) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
	if got := F32ToF16(float32(math.NaN())); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
		t.Fatalf("F32ToF16(NaN) = %#04x, not a NaN", got)
	}
}

// TestWidenBF16: every value widened exactly (the bits shifted up), in every tier and length,
// and nothing written past len(src).
func TestWidenBF16(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(25, 26))
		for _, n := range opSizes {
			src := make([]uint16, n)
			for i := range src {
				src[i] = uint16(rng.Uint32())
			}
			dst := make([]float32, n+1)
			dst[n] = -3
			WidenBF16(dst, src)
			for i, b := range src {
				if got := math.Float32bits(dst[i]); got != uint32(b)<<16 {
					t.Fatalf("n=%d [%d]: bits %#x, want %#x", n, i, got, uint32(b)<<16)
				}
			}
			if dst[n] != -3 {
				t.Fatalf("n=%d: wrote past the values", n)
			}
		}
	})
}
