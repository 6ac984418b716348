package cpu

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
)

// TestBF16Rows8: bf16 decode through dot8BF16P (eight rows per call, the zen5 plan's) gives what
// dot4BF16P gives, to the bit, for row counts that leave 1-7 rows to the four-row and one-row
// kernels, column counts with and without a tail past the multiple of 32 (and under 32, where
// neither kernel runs), ranges that start at odd multiples of 4 (two threads, and MatMuls' fused
// matrices), whatever CPU class runs it. Only on the AVX-512 tier: elsewhere (no AVX-512, or
// CHAINEDSQL_NOAVX512) prepareVec never takes dot8BF16P and both sides would be dot4's.
func TestBF16Rows8(t *testing.T) {
	if !use512() {
		t.Skip("not on the AVX-512 kernel tier")
	}
	was, wasQ := rows8Force.Load(), fpQuartersForce.Load()
	defer func() { rows8Force.Store(was); fpQuartersForce.Store(wasQ) }()
	fpQuartersForce.Store(-1) // adjacent rows, through dot8BF16P or dot4BF16P
	rng := rand.New(rand.NewPCG(30, 8))
	run := func(force int32, f func()) {
		rows8Force.Store(force)
		f()
	}
	for _, th := range []int{1, 2} {
		restore := withThreads(th)
		for _, rows := range []int{1, 4, 7, 8, 9, 12, 13, 16, 20, 23, 29, 64, 900} {
			for _, cols := range []int{16, 31, 32, 48, 64, 67, 96, 128, 160, 896} {
				w := randMatrix(rng, BF16, rows, cols)
				x := make([]float32, cols)
				for c := range x {
					x[c] = rng.Float32()*2 - 1
				}
				got, want := make([]float32, rows), make([]float32, rows)
				run(1, func() { MatVec(got, w, x) })
				run(-1, func() { MatVec(want, w, x) })
				for r := range rows {
					if got[r] != want[r] {
						t.Fatalf("threads %d, %d×%d row %d: 8 rows %g, 4 rows %g", th, rows, cols, r, got[r], want[r])
					}
				}
			}
		}
		// fused: the second and third matrix start inside a group of eight
		ws := []*Matrix{randMatrix(rng, BF16, 12, 96), randMatrix(rng, BF16, 20, 96), randMatrix(rng, BF16, 9, 96)}
		x := make([]float32, 96)
		for c := range x {
			x[c] = rng.Float32()*2 - 1
		}
		var got, want [][]float32
		for _, w := range ws {
			got, want = append(got, make([]float32, w.Rows)), append(want, make([]float32, w.Rows))
		}
		run(1, func() { MatMuls(got, ws, x, 1) })
		run(-1, func() { MatMuls(want, ws, x, 1) })
		for j := range ws {
			for r := range got[j] {
				if got[j][r] != want[j][r] {
					t.Fatalf("threads %d, MatMuls matrix %d row %d: 8 rows %g, 4 rows %g", th, j, r, got[j][r], want[j][r])
				}
			}
		}
		restore()
	}
	// the forced setting reaches prepareVec on the AVX-512 tier, for one input row only
	w := randMatrix(rng, BF16, 8, 64)
	x := make([]float32, 2*64)
	for _, c := range []struct {
		force int32
		n     int
		want  bool
	}{{1, 1, true}, {1, 2, false}, {-1, 1, false}} {
		rows8Force.Store(c.force)
		in, release := prepareVec(w, x, c.n)
		release()
		if in.rows8 != (c.want && use512()) {
			t.Errorf("force %d, n=%d: rows8 %v, want %v", c.force, c.n, in.rows8, c.want && use512())
		}
	}
}

// TestQ8Prefetch: dot4Q8VNNI's prefetch distance (the zen5 plan's 16 KiB, the others' 8 KiB, and
// one far off) changes no result, through MatVec and MatMuls at one and two threads.
func TestQ8Prefetch(t *testing.T) {
	if !useVNNI() {
		t.Skip("CPU without AVX512_VNNI")
	}
	was := q8PfForce.Load()
	defer q8PfForce.Store(was)
	wasQ := q8QuartersForce.Load()
	defer q8QuartersForce.Store(wasQ)
	q8QuartersForce.Store(-1) // every row through dot4Q8VNNI, which prefetches
	rng := rand.New(rand.NewPCG(30, 9))
	ws := []*Matrix{randMatrix(rng, Q8, 900, 128), randMatrix(rng, Q8, 13, 128), randMatrix(rng, Q8, 7, 128)}
	x := make([]float32, 128)
	for c := range x {
		x[c] = rng.Float32()*2 - 1
	}
	results := func(pfd int32) [][]float32 {
		q8PfForce.Store(pfd)
		var out [][]float32
		for _, w := range ws {
			d := make([]float32, w.Rows)
			MatVec(d, w, x)
			out = append(out, d)
		}
		fused := [][]float32{make([]float32, ws[1].Rows), make([]float32, ws[2].Rows)}
		MatMuls(fused, ws[1:], x, 1)
		return append(out, fused...)
	}
	// the forced distance reaches prepareVec for one input row; batches keep the default
	for _, n := range []int{1, 2} {
		q8PfForce.Store(16384)
		in, release := prepareVec(ws[1], make([]float32, n*128), n)
		release()
		if want := map[int]int{1: 16384, 2: q8PrefetchDefault}[n]; useVNNI() && in.q8pf != want {
			t.Errorf("n=%d: prefetch %d, want %d", n, in.q8pf, want)
		}
	}
	for _, th := range []int{1, 2} {
		restore := withThreads(th)
		want := results(8192)
		for _, pfd := range []int32{16384, 1 << 20} {
			got := results(pfd)
			for j := range got {
				for r := range got[j] {
					if got[j][r] != want[j][r] {
						t.Fatalf("threads %d, prefetch %d: output %d row %d: %g, want %g", th, pfd, j, r, got[j][r], want[j][r])
					}
				}
			}
		}
		restore()
	}
}

// TestQ8Quarters checks that q8 decode read in quarters (matVecQuarters with dot4Q8VNNIFar, the
// AVX-512 plans' with VNNI; on the AVX2 tier avx2Dot4Q8IFar, the avx2 plan's) gives the
// adjacent-row kernels' results to the bit (dot4Q8VNNI; avx2Dot4Q8I), over shapes whose ranges leave rows beyond four
// quarters and columns beyond a multiple of 64, alone and fused, on 1-3 threads, on the AVX-512
// (with VNNI) and AVX2 tiers this CPU has; and that only one input row takes it.
func TestQ8Quarters(t *testing.T) {
	onSIMDTiers(t, func(t *testing.T, tier string) {
		if tier == "avx512" && !useVNNI() {
			t.Skip("CPU without AVX512_VNNI")
		}
		q8Quarters(t)
	})
}

func q8Quarters(t *testing.T) {
	was := q8QuartersForce.Load()
	defer q8QuartersForce.Store(was)
	rng := rand.New(rand.NewPCG(30, 10))
	ws := []*Matrix{
		randMatrix(rng, Q8, 896, 896), randMatrix(rng, Q8, 128, 896), randMatrix(rng, Q8, 1003, 960),
		randMatrix(rng, Q8, 37, 96), randMatrix(rng, Q8, 3, 128), randMatrix(rng, Q8, 130, 4864),
	}
	for _, w := range ws { // scales that differ per block, so a block read with another's scale shows
		for i := range w.Scales {
			w.Scales[i] = float32(i%13+1) / 1000
		}
	}
	x := make([]float32, 4864)
	for c := range x {
		x[c] = rng.Float32()*2 - 1
	}
	checkQuarters(t, "q8", &q8QuartersForce, ws, x)
}

// TestFPQuarters checks that bf16 and f32 decode read in quarters (matVecQuarters with
// dot4BF16PFar and dot4F32, the AVX-512 plans'; on the AVX2 tier avx2MvBF16PFar and avx2MvF32, the
// avx2 plan's) give the adjacent-row kernels' results to the bit (dot8BF16P or dot4BF16P, dot4F32
// on four adjacent rows; avx2MvBF16P and avx2MvF32 on adjacent rows), over shapes whose ranges leave
// rows beyond four quarters and columns beyond a multiple of 8, 16 or 32, alone and fused, on
// 1-3 threads, on the AVX-512 and AVX2 tiers this CPU has; and that only one input row takes it.
func TestFPQuarters(t *testing.T) {
	onSIMDTiers(t, func(t *testing.T, _ string) { fpQuarters(t) })
}

func fpQuarters(t *testing.T) {
	was := fpQuartersForce.Load()
	defer fpQuartersForce.Store(was)
	rng := rand.New(rand.NewPCG(30, 11))
	x := make([]float32, 4864)
	for c := range x {
		x[c] = rng.Float32()*2 - 1
	}
	for _, dt := range []DType{BF16, F32} {
		ws := []*Matrix{
			randMatrix(rng, dt, 896, 896), randMatrix(rng, dt, 128, 896), randMatrix(rng, dt, 1003, 960),
			randMatrix(rng, dt, 37, 100), randMatrix(rng, dt, 3, 128), randMatrix(rng, dt, 130, 4864),
			randMatrix(rng, dt, 71, 40), randMatrix(rng, dt, 45, 120),
		}
		checkQuarters(t, dt.String(), &fpQuartersForce, ws, x)
	}
}

// checkQuarters checks that MatVec over each of ws and MatMuls over ws[0] and ws[1] (fused, 896
// columns) give the same bits with force set to 1 (in quarters) as to -1 (adjacent rows), on 1-3
// threads, that the route takes matVecQuarters with force 1 only, and that prepareVec reads in
// quarters for one input row only.
func checkQuarters(t *testing.T, name string, force *atomic.Int32, ws []*Matrix, x []float32) {
	t.Helper()
	results := func(f int32) [][]float32 {
		force.Store(f)
		var out [][]float32
		for _, w := range ws {
			d := make([]float32, w.Rows)
			MatVec(d, w, x[:w.Cols])
			out = append(out, d)
		}
		fused := [][]float32{make([]float32, ws[0].Rows), make([]float32, ws[1].Rows)}
		MatMuls(fused, ws[:2], x[:896], 1)
		return append(out, fused...)
	}
	for _, n := range []int{1, 2} {
		force.Store(1)
		in, release := prepareVec(ws[1], make([]float32, n*896), n)
		release()
		if in.quarters != (n == 1) {
			t.Errorf("%s n=%d: quarters %v", name, n, in.quarters)
		}
	}
	var seen atomic.Int64
	quartersSeen = &seen
	defer func() { quartersSeen = nil }()
	for _, th := range []int{1, 2, 3} {
		restore := withThreads(th)
		n0 := seen.Load()
		want := results(-1)
		n1 := seen.Load()
		got := results(1)
		n2 := seen.Load()
		restore()
		if n1 != n0 || n2 == n1 {
			t.Fatalf("%s threads %d: %d calls of matVecQuarters with quarters off, %d with them on; want 0 and some", name, th, n1-n0, n2-n1)
		}
		for j := range got {
			for r := range got[j] {
				if math.Float32bits(got[j][r]) != math.Float32bits(want[j][r]) {
					t.Fatalf("%s threads %d: output %d row %d: %g in quarters, want %g", name, th, j, r, got[j][r], want[j][r])
				}
			}
		}
	}
}
