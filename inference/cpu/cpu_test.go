package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Tolerance: the SIMD kernels sum in a different order than ref.go (16 lanes, FMA, a final tree)
// so results differ by rounding only. For a dot product of length n the rounding error of either
// order is bounded by about n·ε·Σ|w·x|; in practice it is far below, and we require
// |got-want| <= 1e-5·Σ|w_c·x_c| + 1e-6, i.e. a relative error of 1e-5 against the magnitude of
// the terms (the natural scale: cancellation makes |want| itself arbitrarily small).
const tol = 1e-5

// randMatrix returns a Rows×Cols matrix of dtype dt with values in [-1, 1) and its f32 copy.
func randMatrix(rng *rand.Rand, dt DType, rows, cols int) *Matrix {
	f := make([]float32, rows*cols)
	for i := range f {
		f[i] = rng.Float32()*2 - 1
	}
	m := &Matrix{DType: F32, Rows: rows, Cols: cols, F32: f}
	switch dt {
	case BF16:
		u := make([]uint16, len(f))
		for i, v := range f {
			u[i] = F32ToBF16(v)
		}
		return &Matrix{DType: BF16, Rows: rows, Cols: cols, U16: u}
	case F16:
		u := make([]uint16, len(f))
		for i, v := range f {
			u[i] = f32ToF16(v)
		}
		return &Matrix{DType: F16, Rows: rows, Cols: cols, U16: u}
	case Q8:
		return Quantize8(m)
	}
	return m
}

// f32ToF16 converts (truncating the mantissa; test data only needs some valid half values).
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	if exp <= 0 {
		return sign
	}
	return sign | uint16(exp)<<10 | uint16(b>>13&0x3ff)
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = rng.Float32()*2 - 1
	}
	return v
}

// absDot is Σ_c |w[r,c]·x[c]|, the scale of the rounding error.
func absDot(w *Matrix, r int, x []float32) float64 {
	row := make([]float32, w.Cols)
	rowF32Ref(row, w, r)
	var s float64
	for c, v := range row {
		s += math.Abs(float64(v) * float64(x[c]))
	}
	return s
}

// checkMatMul compares MatMul (current SIMD setting) with matMulRef.
func compareMatMul(t *testing.T, rng *rand.Rand, dt DType, rows, cols, n int) {
	t.Helper()
	w := randMatrix(rng, dt, rows, cols)
	x := randVec(rng, n*cols)
	got := make([]float32, n*rows+3)
	for i := range got {
		got[i] = float32(math.NaN()) // every output must be written
	}
	got[n*rows], got[n*rows+1], got[n*rows+2] = 7, 7, 7
	want := make([]float32, n*rows)
	MatMul(got, w, x, n)
	matMulRef(want, w, x, n)
	// With VNNI, Q8 products round x to 8 bits per block of 32 of its first k64 columns: each
	// value moves by at most half its block's step max|x_b|/127, adding Σ step/2·|w| to the bound.
	k64 := 0
	var xStep []float64
	if k := q8QuantCols(&Matrix{DType: dt, Cols: cols}, n); k > 0 {
		k64 = k
		xStep = make([]float64, n*cols/Q8Block)
		for b := range xStep {
			var m float64
			for _, v := range x[b*Q8Block : (b+1)*Q8Block] {
				m = max(m, math.Abs(float64(v)))
			}
			xStep[b] = float64(float32(m) / 127)
		}
	}
	// The bf16 matrix-matrix kernel rounds x to bf16 (8 significant bits): each product moves by
	// at most 2^-8 of its size.
	bfRel := 0.0
	if useGemmBF16(&Matrix{DType: dt, Cols: cols}, n) {
		bfRel = 1.0 / 256
	}
	wf := make([]float32, rows*cols) // the widened weights, for the error bounds
	for r := range rows {
		rowF32Ref(wf[r*cols:(r+1)*cols], w, r)
	}
	for i := range n {
		for r := range rows {
			g, e := got[i*rows+r], want[i*rows+r]
			var ad, qerr float64
			for c, v := range wf[r*cols : (r+1)*cols] {
				ad += math.Abs(float64(v) * float64(x[i*cols+c]))
				if c < k64 {
					qerr += xStep[i*cols/Q8Block+c/Q8Block] / 2 * math.Abs(float64(v))
				}
			}
			bound := tol*ad + 1e-6 + qerr*(1+1e-5) + bfRel*ad
			if d := math.Abs(float64(g - e)); !(d <= bound) {
				t.Fatalf("%v %d×%d n=%d simd=%v: dst[%d,%d] = %g, ref %g (diff %g > %g)",
					dt, rows, cols, n, SIMD(), i, r, g, e, d, bound)
			}
		}
	}
	if got[n*rows] != 7 || got[n*rows+2] != 7 {
		t.Fatalf("%v %d×%d n=%d: MatMul wrote past n×Rows", dt, rows, cols, n)
	}
}

// bothPaths runs f with each kernel tier this CPU has: AVX-512, AVX2 (each once more with the Q8
// kernels that quantise x and the AVX2 shift/mask bf16 kernel off: "-plain"), and the portable
// Go code.
func bothPaths(t *testing.T, f func(t *testing.T)) {
	for _, mode := range []string{"avx512", "avx512-plain", "avx2", "avx2-plain", "portable"} {
		t.Run(mode, func(t *testing.T) {
			switch {
			case mode == "avx512" && !hasAVX512, mode == "avx512-plain" && !hasAVX512:
				t.Skip("CPU without AVX-512")
			case mode == "avx512-plain" && !hasVNNI:
				t.Skip("CPU without AVX512_VNNI: the avx512 run already used dot4Q8")
			case (mode == "avx2" || mode == "avx2-plain") && !hasAVX2:
				t.Skip("CPU without AVX2")
			case raceEnabled && strings.HasSuffix(mode, "-plain"):
				t.Skip("-race: the widening Q8 kernels run in the plain test run")
			}
			was := UseSIMD(mode != "portable")
			defer UseSIMD(was)
			plainWas := plainOff.Swap(mode == "avx512-plain" || mode == "avx2-plain")
			defer plainOff.Store(plainWas)
			avxWas := avx512Off.Swap(mode == "avx2" || mode == "avx2-plain")
			defer avx512Off.Store(avxWas)
			f(t)
		})
	}
}

// TestQ8VNNIExact: with x exactly representable in int8 (integers, each block's largest 127),
// the integer kernels' quantisation of x is exact and every weight value, -128 included, must
// give Σ q·x·scale to f32 rounding (all partial sums are small integers times the scales): one
// input row (matrix-vector kernels) and 23 (the matrix-matrix kernel, with a partial group of
// input rows and 41 weight rows: a partial panel).
func TestQ8VNNIExact(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		const rows, cols = 41, 192
		w := &Matrix{DType: Q8, Rows: rows, Cols: cols, Q8: make([]int8, rows*cols), Scales: make([]float32, rows*cols/Q8Block)}
		for i := range w.Q8 {
			w.Q8[i] = int8(i*37 + i/7) // covers -128..127
		}
		w.Q8[5] = -128
		for i := range w.Scales {
			w.Scales[i] = 0.25 * float32(1+i%3)
		}
		for _, n := range []int{1, 23} {
			x := make([]float32, n*cols)
			for c := range x {
				x[c] = float32((c*29+c/cols)%255 - 127)
			}
			for b := 0; b < n*cols/Q8Block; b++ {
				x[b*Q8Block+3] = 127
			}
			dst := make([]float32, n*rows)
			MatMul(dst, w, x, n)
			for i := range n {
				for r := range rows {
					var want float64
					for b := 0; b < cols/Q8Block; b++ {
						var s int64
						for c := b * Q8Block; c < (b+1)*Q8Block; c++ {
							s += int64(w.Q8[r*cols+c]) * int64(x[i*cols+c])
						}
						want += float64(s) * float64(w.Scales[r*cols/Q8Block+b])
					}
					if d := math.Abs(float64(dst[i*rows+r]) - want); d > 1e-6*math.Abs(want)+1e-3 {
						t.Fatalf("n=%d: dst[%d,%d] = %g, want %g", n, i, r, dst[i*rows+r], want)
					}
				}
			}
		}
	})
}

func withThreads(n int) func() {
	old := Threads()
	SetThreads(n)
	return func() { SetThreads(old) }
}

func TestMatMulShapes(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for _, th := range []int{1, 2, 3} {
			if (!SIMD() || raceEnabled) && th != 2 {
				continue // the portable path is the reference itself: one split suffices
			}
			restore := withThreads(th)
			ns := []int{1, 2, 5, 6, 7, 13} // every n from 1 to 13 at 2 threads
			if th == 2 {
				ns = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
			}
			for _, dt := range []DType{F32, BF16, F16, Q8} {
				if plainOff.Load() && dt != Q8 && dt != BF16 {
					continue // the -plain runs are for the widening Q8 and AVX2 bf16 kernels
				}
				colsList := []int{16, 17, 31, 32, 45, 63, 64, 100, 130, 1030, 2100}
				if dt == Q8 {
					colsList = []int{32, 64, 96, 160, 1056, 2112}
				}
				for _, cols := range colsList {
					rowsList := []int{1, 3, 4, 5, 17, 70, 133}
					if raceEnabled {
						rowsList = []int{3, 17, 70}
					}
					for _, rows := range rowsList {
						for _, n := range ns {
							if cols > 1000 && (rows > 17 || n > 7 && n != 13) {
								continue // keep the big shapes few
							}
							compareMatMul(t, rng, dt, rows, cols, n)
						}
					}
				}
			}
			restore()
		}
	})
}

// TestMatMulGemmShapes covers the matrix-matrix blocking: several column chunks, several
// row blocks (32 rows for AVX-512; up to 8 panels of 16 for AVX2, 300 rows making a short last
// block) with leftovers, full and padded groups of input rows, and both sides of
// mvMaxN (15 input rows: matrix-vector kernels; 16: matrix-matrix) and of mvMaxNPairs (AVX2
// bf16: 23 and 24).
func TestMatMulGemmShapes(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(13, 14))
		defer withThreads(2)()
		colsList, rowsList, ns := []int{300, 600}, []int{33, 70, 300}, []int{12, 13, 15, 16, 23, 24, 25}
		if raceEnabled {
			colsList, rowsList, ns = []int{600}, []int{70}, []int{13}
		}
		for _, dt := range []DType{F32, BF16, F16, Q8} {
			for _, cols := range colsList {
				if dt == Q8 {
					cols += 32 - cols%32
				}
				for _, rows := range rowsList {
					for _, n := range ns {
						compareMatMul(t, rng, dt, rows, cols, n)
					}
				}
			}
		}
	})
}

// TestGemmTails covers the dot-product matrix-matrix kernels (gemmQ8VNNI, gemmBF16,
// avx2GemmQ8) at every column tail (bf16: c mod 32, the part added in scalar code; odd counts
// take the f32 path), several column chunks (q8KC, bfKC), partial panels and panel groups of
// weight rows (masked or tile stores) and partial groups of input rows (the padded rows).
func TestGemmTails(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(15, 16))
		defer withThreads(2)()
		rowsList, ns := []int{1, 9, 16, 17, 33, 65, 80}, []int{16, 17, 18, 22, 23}
		if raceEnabled {
			rowsList, ns = []int{17, 65}, []int{17}
		}
		for cols := 32; cols <= 64; cols++ {
			compareMatMul(t, rng, BF16, rowsList[rng.IntN(len(rowsList))], cols, ns[rng.IntN(len(ns))])
		}
		for _, cols := range []int{32, 96, 512, 1056, 2112} {
			for _, rows := range rowsList {
				for _, n := range ns {
					compareMatMul(t, rng, Q8, rows, cols, n)
					compareMatMul(t, rng, BF16, rows, cols+2, n)
				}
			}
		}
	})
}

func TestMatMulSmallCols(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, dt := range []DType{F32, BF16, F16} {
			for cols := 1; cols < 40; cols++ {
				for _, n := range []int{1, 6, 7} {
					compareMatMul(t, rng, dt, 9, cols, n)
				}
			}
		}
	})
}

// TestMatMulRandom draws random shapes (a fuzz-style property test: MatMul agrees with the
// reference on any shape).
func TestMatMulRandom(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		defer withThreads(2)()
		iters := 60
		if raceEnabled {
			iters = 20
		}
		for range iters {
			dt := DType(rng.IntN(4))
			cols := 1 + rng.IntN(700)
			if dt == Q8 {
				cols = Q8Block * (1 + rng.IntN(20))
			}
			compareMatMul(t, rng, dt, 1+rng.IntN(90), cols, 1+rng.IntN(20))
		}
	})
}

// TestMatVecExactValues checks results against hand-computable sums, not only the reference.
func TestMatVecExactValues(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		const rows, cols = 7, 67
		f := make([]float32, rows*cols)
		for r := range rows {
			for c := range cols {
				f[r*cols+c] = float32(r + 1) // exactly representable in bf16 and f16
			}
		}
		x := make([]float32, cols)
		for c := range x {
			x[c] = 0.5
		}
		w := &Matrix{DType: F32, Rows: rows, Cols: cols, F32: f}
		b := &Matrix{DType: BF16, Rows: rows, Cols: cols, U16: make([]uint16, len(f))}
		h := &Matrix{DType: F16, Rows: rows, Cols: cols, U16: make([]uint16, len(f))}
		for i, v := range f {
			b.U16[i] = F32ToBF16(v)
			h.U16[i] = f32ToF16(v)
		}
		for _, m := range []*Matrix{w, b, h} {
			dst := make([]float32, rows)
			MatVec(dst, m, x)
			for r := range rows {
				if want := float32(r+1) * 0.5 * cols; dst[r] != want {
					t.Fatalf("%v row %d: got %g, want %g", m.DType, r, dst[r], want)
				}
			}
		}
	})
}

func TestRowF32(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		for _, dt := range []DType{F32, BF16, F16, Q8} {
			for _, cols := range []int{32, 64, 96, 160} {
				w := randMatrix(rng, dt, 3, cols)
				got, want := make([]float32, cols), make([]float32, cols)
				for r := range 3 {
					RowF32(got, w, r)
					rowF32Ref(want, w, r)
					for c := range cols {
						// widening is exact; Q8 is one multiply either way
						if got[c] != want[c] {
							t.Fatalf("%v row %d col %d: %g, want %g", dt, r, c, got[c], want[c])
						}
					}
				}
			}
		}
	})
}

func TestMatMulConcurrent(t *testing.T) {
	defer withThreads(2)()
	rng := rand.New(rand.NewPCG(9, 10))
	w := randMatrix(rng, BF16, 200, 96)
	x := randVec(rng, 8*96)
	want := make([]float32, 8*200)
	matMulRef(want, w, x, 8)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 1 + g%8
			dst := make([]float32, n*200)
			for range 20 {
				MatMul(dst, w, x, n)
				for i := range dst {
					if d := math.Abs(float64(dst[i] - want[i])); d > 1e-4 {
						errs <- fmt.Sprintf("goroutine %d: dst[%d] = %g, want %g", g, i, dst[i], want[i])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

func TestMatMulBadInput(t *testing.T) {
	cases := map[string]func(){
		"short x": func() {
			MatVec(make([]float32, 2), &Matrix{DType: F32, Rows: 2, Cols: 3, F32: make([]float32, 6)}, make([]float32, 2))
		},
		"short dst": func() {
			MatVec(make([]float32, 1), &Matrix{DType: F32, Rows: 2, Cols: 3, F32: make([]float32, 6)}, make([]float32, 3))
		},
		"short data": func() {
			MatVec(make([]float32, 2), &Matrix{DType: BF16, Rows: 2, Cols: 3, U16: make([]uint16, 5)}, make([]float32, 3))
		},
		"q8 cols": func() {
			MatVec(make([]float32, 2), &Matrix{DType: Q8, Rows: 2, Cols: 3, Q8: make([]int8, 6)}, make([]float32, 3))
		},
		"bad dtype":    func() { MatVec(make([]float32, 2), &Matrix{DType: 9, Rows: 2, Cols: 3}, make([]float32, 3)) },
		"quantize odd": func() { Quantize8(&Matrix{DType: F32, Rows: 1, Cols: 3, F32: make([]float32, 3)}) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil {
					t.Fatal("no panic")
				} else if s, ok := r.(string); !ok || len(s) < 5 || s[:4] != "cpu:" {
					t.Fatalf("panic %v is not a cpu: message", r)
				}
			}()
			f()
		})
	}
}

func TestQ8ErrorBound(t *testing.T) {
	// Quantisation error of Q8 against the f32 weights: per element at most scale/2 =
	// max|block|/254, so |Σ (q·s - w)·x| <= Σ_blocks max|block|/254 · Σ|x_block|.
	rng := rand.New(rand.NewPCG(11, 12))
	w := randMatrix(rng, F32, 20, 896)
	q := Quantize8(w)
	x := randVec(rng, 896)
	a, b := make([]float32, 20), make([]float32, 20)
	MatVec(a, w, x)
	MatVec(b, q, x)
	for r := range 20 {
		var bound float64
		for blk := 0; blk < 896/Q8Block; blk++ {
			var m, sx float64
			for j := blk * Q8Block; j < (blk+1)*Q8Block; j++ {
				m = max(m, math.Abs(float64(w.F32[r*896+j])))
				sx += math.Abs(float64(x[j]))
			}
			bound += m / 254 * sx
			if q8QuantCols(q, 1) > 0 {
				// x rounded to 8 bits per block: each value moves by at most max|x_b|/254
				var mx, sw float64
				for j := blk * Q8Block; j < (blk+1)*Q8Block; j++ {
					mx = max(mx, math.Abs(float64(x[j])))
					sw += math.Abs(float64(q.Q8[r*896+j]) * float64(q.Scales[r*896/Q8Block+blk]))
				}
				bound += mx / 254 * sw
			}
		}
		if d := math.Abs(float64(a[r] - b[r])); d > bound+1e-4 {
			t.Fatalf("row %d: q8 %g vs f32 %g differ by %g > bound %g", r, b[r], a[r], d, bound)
		}
	}
}

// TestMatMuls: the fused products (one pass over several matrices sharing x) equal MatMul of
// each, bit for bit (the same kernels on the same rows), for every tier, fused or not (n past
// the matrix-vector crossover, mixed dtypes).
func TestMatMuls(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(17, 18))
		defer withThreads(2)()
		for _, dt := range []DType{F32, BF16, F16, Q8} {
			for _, n := range []int{1, 3, 16} {
				ws := []*Matrix{randMatrix(rng, dt, 70, 96), randMatrix(rng, dt, 17, 96), randMatrix(rng, dt, 33, 96)}
				if n == 3 {
					ws[1] = randMatrix(rng, (dt+1)%4, 17, 96) // mixed dtypes: not fused
				}
				x := randVec(rng, n*96)
				dsts := make([][]float32, len(ws))
				for j, w := range ws {
					dsts[j] = make([]float32, n*w.Rows)
				}
				MatMuls(dsts, ws, x, n)
				for j, w := range ws {
					want := make([]float32, n*w.Rows)
					MatMul(want, w, x, n)
					if !slices.Equal(dsts[j], want) {
						t.Fatalf("%v n=%d matrix %d: MatMuls differs from MatMul", dt, n, j)
					}
				}
			}
		}
	})
}

// TestQuantX8: the SIMD quantisers of x (quantX8, both layouts of its correction, and
// avx2QuantX8) against quantizeX: the same scales, the same int8 values but at exact ties (the
// SIMD ones round half to even, quantizeX away from zero), corrections that match their values,
// and an all-zero block quantised to zeros.
func TestQuantX8(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	const nb = 9
	x := randVec(rng, nb*Q8Block)
	clear(x[2*Q8Block : 3*Q8Block]) // all zero
	for j := range Q8Block {        // ties: multiples of half a step
		x[4*Q8Block+j] = float32(j%5) * 0.5
	}
	x[4*Q8Block+7] = 127
	wq, wc, ws := make([]int8, len(x)), make([]int32, len(x)/4), make([]float32, len(x)/4)
	quantizeX(wq, wc, ws, x)
	check := func(name string, xq []int8, xs []float32) {
		for b := range nb {
			for l := range Q8Block / 4 {
				got, want := xs[b*8+l], ws[b*8+l]
				if got != want && !(want == 0 && got <= 1e-30) {
					t.Fatalf("%s: block %d lane %d scale %g, want %g", name, b, l, got, want)
				}
			}
			for j := b * Q8Block; j < (b+1)*Q8Block; j++ {
				if xq[j] != wq[j] {
					v := float64(x[j]) * float64(127/max(ws[b*8], 1e-30))
					if d := math.Abs(v - math.Trunc(v)); d != 0.5 || absInt(int(xq[j])-int(wq[j])) != 1 {
						t.Fatalf("%s: x[%d] = %g quantised to %d, want %d", name, j, x[j], xq[j], wq[j])
					}
				}
			}
		}
	}
	switch {
	case hasAVX512 && hasVNNI:
		xq, corr, xs := make([]int8, len(x)), make([]int32, len(x)/4), make([]float32, len(x)/4)
		quantX8(&xq[0], &corr[0], &xs[0], &x[0], nb, 0)
		check("quantX8", xq, xs)
		sums := make([]int32, nb)
		quantX8(&xq[0], &sums[0], &xs[0], &x[0], nb, 1)
		for b := range nb {
			var blk int32
			for l := range 8 {
				var s int32
				for j := range 4 {
					s += int32(xq[b*Q8Block+4*l+j])
				}
				if corr[b*8+l] != -128*s {
					t.Fatalf("quantX8: block %d lane %d correction %d, want %d", b, l, corr[b*8+l], -128*s)
				}
				blk += s
			}
			if sums[b] != -128*blk {
				t.Fatalf("quantX8: block %d sum correction %d, want %d", b, sums[b], -128*blk)
			}
		}
	default:
		t.Log("CPU without AVX512_VNNI: quantX8 not tested")
	}
	if hasAVX2 {
		xq, xs := make([]int8, len(x)), make([]float32, len(x)/4)
		avx2QuantX8(&xq[0], &xs[0], &x[0], nb)
		check("avx2QuantX8", xq, xs)
	}
}

func absInt(v int) int { return max(v, -v) }
