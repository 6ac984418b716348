package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// halfPair returns a random q8 matrix in rows whose f32 scales are halves' values from across
// the halves' range (subnormal and zero, large, ordinary; both signs) and a copy with its scales
// halved (HalveQ8Scales).
func halfPair(t testing.TB, rng *rand.Rand, rows, cols int) (w, h *Matrix) {
	w = randMatrix(rng, Q8, rows, cols)
	for i := range w.Scales {
		var b uint16
		switch i % 7 {
		case 0:
			b = uint16(rng.IntN(0x400)) // subnormal or zero
		case 1:
			b = 0x7800 + uint16(rng.IntN(0x400)) // 32768 to 65504
		default:
			b = 0x1c00 + uint16(rng.IntN(0x2000)) // 2^-8 to 1
		}
		w.Scales[i] = F16ToF32(b | uint16(rng.IntN(2))<<15)
	}
	return w, convertedCopy(t, w, HalveQ8Scales)
}

// sameBits reports the first index where got and want differ in their bits (-1: none).
func sameBits(got, want []float32) int {
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return i
		}
	}
	return -1
}

// TestQ8HalfRows: q8 weights in rows with half scales (HalveQ8Scales) give every product of the
// same weights with f32 scales to the bit, on every route and tier this CPU has (bothPaths:
// AVX-512 with the VNNI kernels, dot4Q8VNNIH and dot4Q8VNNIFarH, and without, dot4Q8H and the
// widening cvtQ8H; AVX2's avx2Dot4Q8IH, avx2Dot4Q8IFarH and avx2Dot4Q8I2H, and without the
// integer kernels avx2MvQ8H and avx2CvtQ8H; the int8 matrix-matrix kernels over scales widened
// while packing; the portable code): one input row in quarters and on adjacent rows, decode
// batches, prefill, with column counts around the AVX2 kernels' 128-column stages, rows left over
// by four, on 1-3 threads; fused with f32-scale matrices in one MatMuls; and RowF32.
func TestQ8HalfRows(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		wasQ := q8QuartersForce.Load()
		defer q8QuartersForce.Store(wasQ)
		rng := rand.New(rand.NewPCG(41, 7))
		colsList := []int{32, 64, 96, 128, 160, 224, 960, 4864}
		rowsList := []int{1, 3, 5, 17, 70, 133}
		ns := []int{1, 2, 3, 15, 16, 17}
		threads := []int{1, 2, 3}
		if !SIMD() || raceEnabled {
			threads, rowsList, ns = []int{2}, []int{5, 70}, []int{1, 2, 17}
		}
		for _, cols := range colsList {
			for _, rows := range rowsList {
				if cols > 1000 && rows > 17 {
					continue // keep the big shapes few
				}
				w, h := halfPair(t, rng, rows, cols)
				for _, n := range ns {
					x := randVec(rng, n*cols)
					want, got := make([]float32, n*rows), make([]float32, n*rows)
					for _, th := range threads {
						for _, q := range []int32{1, -1} {
							if q < 0 && n > 1 {
								continue // quarters are for one input row only
							}
							q8QuartersForce.Store(q)
							restore := withThreads(th)
							MatMul(want, w, x, n)
							MatMul(got, h, x, n)
							restore()
							if i := sameBits(got, want); i >= 0 {
								t.Fatalf("%d×%d n=%d threads %d quarters %d: dst[%d,%d] = %g with half scales, %g with f32", rows, cols, n, th, q, i/rows, i%rows, got[i], want[i])
							}
						}
					}
				}
				rw, rh := make([]float32, cols), make([]float32, cols)
				for r := range rows {
					RowF32(rw, w, r)
					RowF32(rh, h, r)
					if i := sameBits(rh, rw); i >= 0 {
						t.Fatalf("%d×%d: RowF32 of row %d, column %d: %g with half scales, %g with f32", rows, cols, r, i, rh[i], rw[i])
					}
				}
			}
		}
		// Fused: half-scale and f32-scale matrices of one width in one pass.
		w1, h1 := halfPair(t, rng, 96, 896)
		w2, _ := halfPair(t, rng, 37, 896)
		_, h3 := halfPair(t, rng, 64, 896)
		x := randVec(rng, 3*896)
		for _, n := range []int{1, 3} {
			ws := []*Matrix{h1, w2, h3}
			dsts, want := make([][]float32, len(ws)), make([][]float32, len(ws))
			for j, m := range ws {
				dsts[j], want[j] = make([]float32, n*m.Rows), make([]float32, n*m.Rows)
				MatMul(want[j], m, x, n)
			}
			MatMuls(dsts, ws, x, n)
			for j := range ws {
				if i := sameBits(dsts[j], want[j]); i >= 0 {
					t.Fatalf("n=%d: fused matrix %d, output %d: %g, alone %g", n, j, i, dsts[j][i], want[j][i])
				}
			}
			h1w := make([]float32, n*96)
			MatMul(h1w, w1, x, n)
			if i := sameBits(dsts[0], h1w); i >= 0 {
				t.Fatalf("n=%d: fused half-scale matrix, output %d: %g, with f32 scales %g", n, i, dsts[0][i], h1w[i])
			}
		}
	})
}

// TestHalveQ8Scales: a matrix Quantize8 wrote has its scales halved in place, in the memory of its
// f32 scales (nothing allocated), with the same values, and streams 34 bytes per 32 weights
// (Bytes) where it streamed 36; matrices it does not fit are left as they are; a matrix holding
// both kinds of scale is refused by MatMul; and packing into panels takes rows with half scales.
func TestHalveQ8Scales(t *testing.T) {
	const rows, cols = 64, 96
	q := Quantize8(fastMatrix(F32, rows, cols, 1))
	scales := slices.Clone(q.Scales)
	n := int64(rows * cols)
	if q.Bytes() != n+4*n/Q8Block {
		t.Fatalf("f32 scales: %d bytes, want %d", q.Bytes(), n+4*n/Q8Block)
	}
	mem := unsafe.Pointer(unsafe.SliceData(q.Scales))
	if !HalveQ8Scales(q) {
		t.Fatal("Quantize8's matrix was not halved")
	}
	if q.Scales != nil || len(q.Scales16) != len(scales) || unsafe.Pointer(unsafe.SliceData(q.Scales16)) != mem {
		t.Fatalf("%d f32 scales and %d halves, halves in the f32 memory %v; want none, %d, true",
			len(q.Scales), len(q.Scales16), unsafe.Pointer(unsafe.SliceData(q.Scales16)) == mem, len(scales))
	}
	if q.Bytes() != n+2*n/Q8Block {
		t.Errorf("half scales in rows: %d bytes, want %d (34 per 32 weights)", q.Bytes(), n+2*n/Q8Block)
	}
	nb := cols / Q8Block
	for r := range rows {
		for b := range nb {
			if got, want := q8ScaleAt(q, r, b), scales[r*nb+b]; got != want {
				t.Fatalf("row %d block %d: scale %g, want %g", r, b, got, want)
			}
		}
	}

	wide := fastMatrix(Q8, rows, cols, 2) // one scale no half holds
	wide.Scales[77] = 1.0 / 3
	short := fastMatrix(Q8, rows, cols, 3)
	short.Scales = short.Scales[:10]
	bf := fastMatrix(BF16, rows, cols, 4)
	for _, c := range []struct {
		name string
		w    *Matrix
	}{{"halved already", q}, {"a scale no half holds", wide}, {"too few scales", short}, {"bf16", bf}} {
		was := *c.w
		ws := slices.Clone(c.w.Scales)
		if HalveQ8Scales(c.w) {
			t.Errorf("%s: halved", c.name)
		}
		if c.w.Scales16 != nil && was.Scales16 == nil || !slices.Equal(c.w.Scales, ws) || len(c.w.Scales) != len(was.Scales) {
			t.Errorf("%s: changed", c.name)
		}
	}

	both := fastMatrix(Q8, 4, 32, 5)
	both.Scales16 = make([]uint16, 4)
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "both f32 and half scales") {
				t.Errorf("MatMul over f32 and half scales at once: recovered %v", r)
			}
		}()
		MatVec(make([]float32, 4), both, make([]float32, 32))
	}()

	if !useVNNI() {
		return
	}
	rng := rand.New(rand.NewPCG(41, 8))
	w, h := halfPair(t, rng, 96, 160)
	hmem := unsafe.Pointer(unsafe.SliceData(h.Scales16))
	if !packQ8Panels(w) || !packQ8Panels(h) {
		t.Fatal("not packed")
	}
	if !slices.Equal(h.Q8, w.Q8) || !slices.Equal(h.Scales16, w.Scales16) || unsafe.Pointer(unsafe.SliceData(h.Scales16)) != hmem {
		t.Error("rows with half scales packed into other panels than the same rows with f32 scales, or out of their memory")
	}
}

// BenchmarkQ8HalfRowsAB times the q8 weight products of one 0.5B decode token (24 distinct layers
// and the LM head, huge pages) in rows with f32 scales (36 bytes per 32 weights) and with half
// scales (HalveQ8Scales: 34), alternating in one process, each round between two passes of the
// read probe, through the kernels of the tier in use (on AVX2 avx2Dot4Q8IFar against
// avx2Dot4Q8IFarH in quarters; with VNNI the row kernels, not the panels): f32% and half% are
// their GB/s (each its own bytes) against the better pass, speedup the f32 scales' time over the
// halves' (medians; q8LayoutAB).
func BenchmarkQ8HalfRowsAB(b *testing.B) {
	if !SIMD() {
		b.Skip("no SIMD kernels")
	}
	q8LayoutAB(b, [2]string{"f32", "half"}, HalveQ8Scales)
}
