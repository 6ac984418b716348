package cpu

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"
)

// MatVec computes dst[r] = Σ_c w[r,c]·x[c] for every row r of w.
func MatVec(dst []float32, w *Matrix, x []float32) {
	MatMul(dst, w, x, 1)
}

// MatMul computes dst[i,r] = Σ_c w[r,c]·x[i,c] for n input rows x (n×Cols, row-major) into
// dst (n×Rows, row-major). It panics, naming the mismatch, when the slices are too short for the
// shapes or the matrix data disagrees with its DType and shape.
//
// With Q8 weights the AVX-512 VNNI and AVX2 kernels round x to 8 bits per block of 32 (as
// llama.cpp's q8_0 does; the AVX-512 tier without VNNI keeps x exact below 16 input rows), which
// adds at most Σ_blocks max|x_b|/254 · Σ_b |w| to each result; with bf16 weights and 16 or more
// input rows the AVX512_BF16 kernel rounds x to bf16 (at most 2^-8 of each product); every other
// path computes in f32 from the exact x.
func MatMul(dst []float32, w *Matrix, x []float32, n int) {
	checkMatMul(dst, w, x, n)
	if n == 0 || w.Rows == 0 {
		return
	}
	if r, ok := mvPlan(w, x, n); ok {
		r.parallel(w.Rows*w.Cols*n, w.Rows, func(lo, hi int) { r.run(dst, w, lo, hi) }, w.next)
		r.release()
		return
	}
	switch {
	case !SIMD() || w.Cols < 16 || w.Q8Panels && !useVNNI():
		matMulRef(dst, w, x, n)
	case useGemmQ8(w, n) || useGemmBF16(w, n):
		matMulGemm(dst, w, x, n)
	case useAVX2():
		parallelWork(w.Rows*w.Cols*n, w.Rows, 16, func(lo, hi int) { gemmRangeAVX2(dst, w, x, n, lo, hi) })
	default:
		parallelWork(w.Rows*w.Cols*n, w.Rows, 4, func(lo, hi int) { matMulRange(dst, w, x, n, lo, hi) })
	}
}

// MatMuls runs MatMul(dsts[j], ws[j], x, n) for every matrix of ws, all applied to the same
// input rows x (the projections of one normed hidden state). Where the matrices share dtype and
// width and MatMul would take the matrix-vector kernels (decode, small decode batches), x is
// prepared once and all their rows are one parallel pass: one hand-off to the workers instead
// of one per matrix, which costs tens of microseconds each on a busy VM.
func MatMuls(dsts [][]float32, ws []*Matrix, x []float32, n int) {
	if len(dsts) != len(ws) {
		panic(fmt.Sprintf("cpu: MatMuls: %d outputs for %d matrices", len(dsts), len(ws)))
	}
	total := 0
	for j, w := range ws {
		checkMatMul(dsts[j], w, x, n)
		total += w.Rows
	}
	fused := len(ws) > 1 && n > 0 && sameKind(ws)
	var r mvRoute
	if fused {
		r, fused = mvPlan(ws[0], x, n)
	}
	if !fused {
		for j, w := range ws {
			MatMul(dsts[j], w, x, n)
		}
		return
	}
	r.parallel(total*ws[0].Cols*n, total, func(lo, hi int) {
		off := 0
		for j, w := range ws {
			if a, b := max(lo-off, 0), min(hi-off, w.Rows); a < b {
				r.run(dsts[j], w, a, b)
			}
			off += w.Rows
		}
	}, ws[0].next)
	r.release()
}

// sameKind reports whether every matrix of ws has ws[0]'s dtype, width and layout, as MatMuls
// needs to run them as one product; otherwise it runs them one after another.
func sameKind(ws []*Matrix) bool {
	for _, w := range ws[1:] {
		if w.DType != ws[0].DType || w.Cols != ws[0].Cols || w.Q8Panels != ws[0].Q8Panels {
			return false
		}
	}
	return true
}

// mvRoute is MatMul's matrix-vector route for one call (mvPlan): run computes dst[:, lo:hi] (for
// the planned matrix or any of its dtype, width and layout; lo and hi multiples of align) and
// release returns the buffers of x's prepared copy.
type mvRoute struct {
	run     func(dst []float32, w *Matrix, lo, hi int)
	release func()
	align   int
	panels  bool // q8 weights in panels, one input row (panelRange)
}

// panelWholeWork is the size, in weights, below which a product in panels is cut into one part
// per thread rather than partsPerThread: each thread then reads its share as four long streams
// with at most three groups left over, instead of short parts with leftovers of their own (read
// two or one group a call, at a lower rate). On Zen 5 the 0.5B layers' products ran 10-13%
// (q, k, v), 8-11% (o) and 2% (gate, up) faster so, and q8 decode 3-5% near depth 0, in the
// minutes when the host's memory was fast (docs/BENCHMARKS.md, "Issue 30: q8 products in one
// part per thread").
// Above it (the 0.5B's LM head; larger models' gate and up products too) parts stay small
// enough that a busy core does not hold up the call for long. The threshold is reasoned, not
// measured: no product between 9.8 and 153 MB was timed either way.
const panelWholeWork = 16 << 20

// parallel runs f over [0, rows) of a call of work multiply-adds, on the threads (parallelWork).
// For q8 in panels, a thread left without parts fetches the start of its part of next, the
// product decode runs after this one (SetDecodeOrder), while it waits (prefetchNext).
func (r mvRoute) parallel(work, rows int, f func(lo, hi int), next []*Matrix) {
	per := panelParts(r.panels, work)
	var idle func(first int)
	if r.panels && len(next) > 0 && prefetchNextBytes.Load() > 0 {
		idle = func(first int) { prefetchNext(next, first, prefetchL2) }
	}
	parallelWorkIdle(work, rows, r.align, per, f, idle)
}

// panelParts is how many parts per thread mvRoute.parallel cuts a call of work multiply-adds
// into: one for a product in panels under panelWholeWork, else partsPerThread.
func panelParts(panels bool, work int) int {
	if panels && work < panelWholeWork {
		return 1
	}
	return partsPerThread
}

// mvPlan returns MatMul's matrix-vector route for n input rows x against w, when it takes one.
// Few input rows (decode, decode batches, attention over a short cache) stream the weights once;
// each group of 4 rows stays in L1 while it meets every input row. q8 weights in panels take one
// input row here (panelRange) and more through the matrix-matrix kernel (useGemmQ8).
func mvPlan(w *Matrix, x []float32, n int) (mvRoute, bool) {
	switch {
	case w.Q8Panels && n == 1 && useVNNI():
		in := preparePanelVec(w, x)
		return mvRoute{func(dst []float32, w *Matrix, lo, hi int) { panelRange(dst, w, in, lo, hi) }, func() { gemmInPool.Put(in) }, panelRows, true}, true
	case !SIMD() || w.Cols < 16 || w.Q8Panels || useGemmQ8(w, n) || useGemmBF16(w, n):
		return mvRoute{}, false
	case useAVX2() && n < mvMaxN && q8QuantCols(w, n) > 0:
		in, release := prepareVec(w, x, n)
		return mvRoute{func(dst []float32, w *Matrix, lo, hi int) { mvRangeAVX2Q8(dst, w, in, lo, hi) }, release, 4, false}, true
	case useAVX2() && (n < mvMaxN || (n < mvMaxNPairs && w.DType == BF16 && w.Cols >= 32 && !plainOff.Load())):
		in, release := &vecIn{x: x, n: n}, func() {}
		if w.DType == BF16 && !plainOff.Load() || w.DType == F32 {
			in, release = prepareVec(w, x, n) // deinterleaved x for avx2MvBF16P; quarters
		}
		return mvRoute{func(dst []float32, w *Matrix, lo, hi int) { mvRangeAVX2(dst, w, in, lo, hi) }, release, 4, false}, true
	case !useAVX2() && n < mvMaxN:
		in, release := prepareVec(w, x, n)
		return mvRoute{func(dst []float32, w *Matrix, lo, hi int) { matVecRange(dst, w, in, lo, hi) }, release, 4, false}, true
	}
	return mvRoute{}, false
}

func checkMatMul(dst []float32, w *Matrix, x []float32, n int) {
	if w == nil {
		panic("cpu: MatMul: nil matrix")
	}
	if err := w.check(); err != nil {
		panic("cpu: MatMul: " + err.Error())
	}
	if n < 0 {
		panic(fmt.Sprintf("cpu: MatMul: negative row count n=%d", n))
	}
	if len(x) < n*w.Cols {
		panic(fmt.Sprintf("cpu: MatMul: x has %d values, want n×Cols = %d×%d", len(x), n, w.Cols))
	}
	if len(dst) < n*w.Rows {
		panic(fmt.Sprintf("cpu: MatMul: dst has %d values, want n×Rows = %d×%d", len(dst), n, w.Rows))
	}
}

// check reports whether the data slices fit the DType and shape.
func (w *Matrix) check() error {
	if w.Rows < 0 || w.Cols < 0 {
		return fmt.Errorf("matrix shape %d×%d is negative", w.Rows, w.Cols)
	}
	size := w.Rows * w.Cols
	switch w.DType {
	case F32:
		if len(w.F32) < size {
			return fmt.Errorf("f32 matrix %d×%d has %d values", w.Rows, w.Cols, len(w.F32))
		}
	case BF16, F16:
		if len(w.U16) < size {
			return fmt.Errorf("%v matrix %d×%d has %d values", w.DType, w.Rows, w.Cols, len(w.U16))
		}
	case Q8:
		if w.Cols%Q8Block != 0 {
			return fmt.Errorf("q8 matrix has %d columns, not a multiple of %d", w.Cols, Q8Block)
		}
		if w.Scales != nil && w.Scales16 != nil {
			return fmt.Errorf("q8 matrix %d×%d has both f32 and half scales", w.Rows, w.Cols)
		}
		ns := len(w.Scales)
		if w.Q8Panels || w.Scales16 != nil {
			ns = len(w.Scales16)
		}
		if len(w.Q8) < size || ns < size/Q8Block {
			return fmt.Errorf("q8 matrix %d×%d has %d values and %d scales", w.Rows, w.Cols, len(w.Q8), ns)
		}
	default:
		return fmt.Errorf("unknown dtype %v", w.DType)
	}
	return nil
}

// RowF32 writes row r of w, widened to f32, into dst (len Cols).
func RowF32(dst []float32, w *Matrix, r int) {
	c := w.Cols
	if !SIMD() || c < 16 || w.Q8Panels {
		rowF32Ref(dst, w, r)
		return
	}
	_ = dst[c-1]
	widen(&dst[0], w, r, 0, c)
}

// widen writes w[r, k0:k0+k] as f32 to dst (k0 a multiple of 16, and of 32 for Q8; SIMD only).
func widen(dst *float32, w *Matrix, r, k0, k int) {
	c := w.Cols
	t := vec.Load()
	kb := k & t.mask
	off := r*c + k0
	switch w.DType {
	case F32:
		copy(unsafe.Slice(dst, k), w.F32[off:off+k])
		return
	case BF16:
		if kb > 0 {
			t.cvtBF16(dst, &w.U16[off], kb)
		}
	case F16:
		if kb > 0 {
			t.cvtF16(dst, &w.U16[off], kb)
		}
	case Q8:
		kb = k & t.mask &^ (Q8Block - 1)
		switch {
		case kb > 0 && w.Scales16 != nil:
			t.cvtQ8H(dst, &w.Q8[off], &w.Scales16[off/Q8Block], kb/Q8Block)
		case kb > 0:
			t.cvtQ8(dst, &w.Q8[off], &w.Scales[off/Q8Block], kb/Q8Block)
		}
	}
	d := unsafe.Slice(dst, k)
	for j := kb; j < k; j++ {
		d[j] = elem(w, off+j)
	}
}

// elem returns element i (flat index) of w as f32.
func elem(w *Matrix, i int) float32 {
	switch w.DType {
	case F32:
		return w.F32[i]
	case BF16:
		return BF16ToF32(w.U16[i])
	case F16:
		return F16ToF32(w.U16[i])
	case Q8:
		switch {
		case w.Q8Panels:
		case w.Scales16 != nil:
			return float32(w.Q8[i]) * F16ToF32(w.Scales16[i/Q8Block])
		default:
			return float32(w.Q8[i]) * w.Scales[i/Q8Block]
		}
	}
	r, j := i/w.Cols, i%w.Cols // Q8 in panels
	return float32(q8At(w, r, j)) * q8ScaleAt(w, r, j/Q8Block)
}

// vecIn holds the n input rows of a matrix-vector product with the copies the kernel of the
// weights' dtype reads: for bf16, xp, each row deinterleaved by blocks of 32 (n×k32 values); for
// Q8 with VNNI, each row quantised by quantizeX (xq n×k64 bytes, corr and xs n×k64/4 values).
type vecIn struct {
	x    []float32
	n    int
	xp   []float32
	k32  int // columns handled by dot4BF16P (a multiple of 32)
	xq   []int8
	corr []int32
	xs   []float32
	k64  int // columns handled by dot4Q8VNNI (Cols&^63) or avx2Dot4Q8I (Cols) with x quantised
	bufs *vecBufs
	// rows8: matVecRange takes eight bf16 rows per call (dot8BF16P), as the decode plan says
	// (DecodePlan's BF16Rows8) for one input row.
	rows8 bool
	q8pf  int // dot4Q8VNNI's prefetch distance in bytes (DecodePlan's Q8Prefetch for one input row)
	// quarters: matVecRange (mvRangeAVX2, mvRangeAVX2Q8 on the AVX2 tier) reads each range of
	// rows as four streams (matVecQuarters), as the decode plan says (DecodePlan's Q8Quarters
	// with VNNI or AVX2, BF16Quarters, F32Quarters on AVX-512 and AVX2) for one input row.
	quarters bool
}

// vecBufs are the reusable buffers behind a vecIn.
type vecBufs struct {
	f []float32
	q []int8
	c []int32
}

var vecPool = sync.Pool{New: func() any { return new(vecBufs) }}

// grow returns s resized to n, reallocated when its capacity is short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// prepareVec builds the vecIn of x for w; release returns its buffers.
func prepareVec(w *Matrix, x []float32, n int) (in *vecIn, release func()) {
	c := w.Cols
	in = &vecIn{x: x, n: n}
	switch {
	case w.DType == BF16 && c >= 32:
		in.k32 = c &^ 31
		in.bufs = vecPool.Get().(*vecBufs)
		in.bufs.f = grow(in.bufs.f, n*in.k32)
		in.xp = in.bufs.f
		in.rows8 = n == 1 && use512() && bf16Rows8()
		in.quarters = n == 1 && (use512() || useAVX2()) && decodeQuarters(BF16)
		for i := range n {
			deinterleave32(in.xp[i*in.k32:(i+1)*in.k32], x[i*c:i*c+in.k32])
		}
	case w.DType == Q8 && q8QuantCols(w, n) > 0:
		k := q8QuantCols(w, n)
		in.k64 = k
		in.q8pf = q8PrefetchDefault
		if n == 1 { // measured on decode (one input row) only
			in.q8pf = q8Prefetch()
			in.quarters = (useVNNI() || useAVX2()) && decodeQuarters(Q8)
		}
		in.bufs = vecPool.Get().(*vecBufs)
		in.bufs.q = grow(in.bufs.q, n*k)
		in.bufs.c = grow(in.bufs.c, n*k/4)
		in.bufs.f = grow(in.bufs.f, n*k/4)
		in.xq, in.corr, in.xs = in.bufs.q, in.bufs.c, in.bufs.f
		for i := range n {
			switch {
			case useVNNI():
				quantX8(&in.xq[i*k], &in.corr[i*k/4], &in.xs[i*k/4], &x[i*c], k/Q8Block, 0)
			case useAVX2(): // avx2Dot4Q8I and avx2Dot4Q8IFar need no correction
				avx2QuantX8(&in.xq[i*k], &in.xs[i*k/4], &x[i*c], k/Q8Block)
			default:
				quantizeX(in.xq[i*k:(i+1)*k], in.corr[i*k/4:(i+1)*k/4], in.xs[i*k/4:(i+1)*k/4], x[i*c:i*c+k])
			}
		}
	case w.DType == F32 && n == 1 && (use512() || useAVX2()):
		in.quarters = decodeQuarters(F32)
		return in, func() {}
	default:
		return in, func() {}
	}
	return in, func() { vecPool.Put(in.bufs) }
}

// q8QuantCols returns how many leading columns of x a Q8 product of n input rows quantises to
// int8 (the VNNI and AVX2 integer kernels and gemmQ8VNNI; 0 where x stays f32).
func q8QuantCols(w *Matrix, n int) int {
	if useGemmQ8(w, n) {
		return w.Cols
	}
	if w.DType != Q8 || n >= mvMaxN || plainOff.Load() {
		return 0
	}
	switch {
	case useVNNI() && w.Cols >= 64:
		return w.Cols &^ 63
	case useAVX2():
		return w.Cols
	}
	return 0
}

// quantizeX quantises x (a multiple of 32 values) for dot4Q8VNNI and avx2Dot4Q8I, by blocks of Q8Block
// (the portable definition; quantX8 and avx2QuantX8 are its SIMD forms, tested against it): with
// s = max|x_b|/127, xq = round(x/s) in [-127, 127]. Per 32-bit output lane of the kernel (four
// bytes; lanes 0-7 of each 64 hold the first block, 8-15 the second) xs is the block's s and corr
// is -128 times the lane's Σ xq (the VNNI kernel's bias correction; corr may be nil).
func quantizeX(xq []int8, corr []int32, xs []float32, x []float32) {
	for b := 0; b*Q8Block < len(x); b++ {
		blk := x[b*Q8Block : (b+1)*Q8Block]
		var m float32
		for _, v := range blk {
			m = max(m, abs32(v))
		}
		s, inv := m/127, float32(0)
		if m > 0 {
			inv = 127 / m
		}
		q := xq[b*Q8Block : (b+1)*Q8Block]
		for j, v := range blk {
			q[j] = int8(max(-127, min(127, math.Round(float64(v*inv)))))
		}
		for l := range Q8Block / 4 {
			lane := b*Q8Block/4 + l
			xs[lane] = s
			if corr != nil {
				corr[lane] = -128 * (int32(q[4*l]) + int32(q[4*l+1]) + int32(q[4*l+2]) + int32(q[4*l+3]))
			}
		}
	}
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// deinterleave32 writes src (a multiple of 32 values) to dst with each block of 32 reordered as
// its 16 even-indexed then its 16 odd-indexed values: the layout dot4BF16P pairs with bf16 rows.
func deinterleave32(dst, src []float32) {
	for b := 0; b+32 <= len(src); b += 32 {
		s := src[b : b+32 : b+32]
		d := dst[b : b+32 : b+32]
		for j := range 16 {
			d[j] = s[2*j]
			d[16+j] = s[2*j+1]
		}
	}
}

// dot4 computes out[j] = Σ_{c<Cols} w[r+j*step, c]·x_i[c] for j = 0..3 and input row i of in
// with the SIMD kernel of w's dtype (step 1: four rows; step 0: one row four times, for the last
// rows of a matrix); q8 with half scales in rows takes the kernels' H twins (dot4Q8VNNIH,
// dot4Q8H).
func dot4(w *Matrix, r, step int, in *vecIn, i int, out *[4]float32) {
	c := w.Cols
	x := in.x[i*c : (i+1)*c]
	off := r * c
	ld := step * c
	k16 := c &^ 15
	switch w.DType {
	case F32:
		dot4F32(&w.F32[off], ld, &x[0], k16, out)
	case BF16:
		k16 = in.k32
		if k16 > 0 {
			dot4BF16P(&w.U16[off], ld, &in.xp[i*k16], k16, out)
		} else {
			*out = [4]float32{}
		}
	case F16:
		dot4F16(&w.U16[off], ld, &x[0], k16, out)
	case Q8:
		k16 = c
		ls := step * (c / Q8Block)
		switch k := in.k64; {
		case k > 0 && w.Scales16 != nil:
			k16 = k
			dot4Q8VNNIH(&w.Q8[off], ld, &w.Scales16[off/Q8Block], ls, &in.xq[i*k], &in.corr[i*k/4], &in.xs[i*k/4], k, out, in.q8pf)
		case k > 0:
			k16 = k
			dot4Q8VNNI(&w.Q8[off], ld, &w.Scales[off/Q8Block], ls, &in.xq[i*k], &in.corr[i*k/4], &in.xs[i*k/4], k, out, in.q8pf)
		case w.Scales16 != nil:
			dot4Q8H(&w.Q8[off], ld, &w.Scales16[off/Q8Block], ls, &x[0], c, out)
		default:
			dot4Q8(&w.Q8[off], ld, &w.Scales[off/Q8Block], ls, &x[0], c, out)
		}
	}
	tailCols(w, off, ld, k16, x, out[:])
}

// dot8 computes out[j] = Σ_{c<Cols} w[r+j, c]·x_i[c] for j = 0..7 with dot8BF16P (bf16 weights,
// in.k32 > 0): what dot4 gives for rows r and r+4, to the bit.
func dot8(w *Matrix, r int, in *vecIn, i int, out *[8]float32) {
	c := w.Cols
	off := r * c
	dot8BF16P(&w.U16[off], c, &in.xp[i*in.k32], in.k32, out)
	tailCols(w, off, c, in.k32, in.x[i*c:(i+1)*c], out[:])
}

// tailCols adds Σ_{k0<=k<Cols} w[row j, k]·x[k] to out[j] for each j, row j at flat offset
// off + j·ld: the columns the kernels leave (beyond their multiple of 16, 32 or 64).
func tailCols(w *Matrix, off, ld, k0 int, x []float32, out []float32) {
	c := w.Cols
	if k0 >= c {
		return
	}
	for j := range out {
		ro := off + j*ld
		var s float32
		for k := k0; k < c; k++ {
			s += elem(w, ro+k) * x[k]
		}
		out[j] += s
	}
}

// matVecRange computes dst[i, lo:hi] for the in.n (< mvMaxN) input rows, 4 weight rows at a time
// (8 with in.rows8, then 4 for what is left).
func matVecRange(dst []float32, w *Matrix, in *vecIn, lo, hi int) {
	rows, n := w.Rows, in.n
	var out [4]float32
	r := lo
	if in.quarters {
		r = matVecQuarters(dst, w, in, lo, hi, false)
	}
	if in.rows8 {
		var out8 [8]float32
		for ; r+8 <= hi; r += 8 {
			for i := range n {
				dot8(w, r, in, i, &out8)
				copy(dst[i*rows+r:i*rows+r+8], out8[:])
			}
		}
	}
	for ; r+4 <= hi; r += 4 {
		for i := range n {
			dot4(w, r, 1, in, i, &out)
			copy(dst[i*rows+r:i*rows+r+4], out[:])
		}
	}
	for ; r < hi; r++ {
		for i := range n {
			dot4(w, r, 0, in, i, &out)
			dst[i*rows+r] = out[0]
		}
	}
}

// matVecQuarters computes dst[lo:lo+4m] (one input row; Q8 weights with in.k64 > 0, bf16 with
// in.k32 > 0, or f32) with m = (hi-lo)/4 and returns lo+4m, the first row it leaves: the range is
// read as four sequential streams, its quarters, each kernel call taking row j of every quarter.
// On the AVX-512 tier (avx2 false, the caller's route: in was prepared for it) the kernels are
// dot4Q8VNNIFar, dot4BF16PFar and dot4F32, with no software prefetch; on the AVX2 tier (avx2
// true) avx2Dot4Q8IFar, avx2MvBF16PFar and avx2MvF32 on four rows a quarter apart
// (avx2Dot4Q8IFar prefetches 512 bytes ahead in each of the four streams, where avx2Dot4Q8I's
// prefetch 8 KiB ahead of the first row covers one quarter only: on Zen 3, 3-9% faster;
// avx2MvBF16P's prefetch, dropped in avx2MvBF16PFar, cost bf16 decode in quarters 21-26% of its
// speed on Zen 5). Four streams per thread keep more DRAM
// requests in flight than one stream of adjacent rows (dot4Q8VNNI, dot8BF16P with their software
// prefetch, dot4F32; on AVX2 avx2Dot4Q8I, avx2MvBF16P and avx2MvF32 on adjacent rows): measured on Zen 5 in process,
// the layers' medians 1-26% faster in q8 (bests 17-33%), 6-22% in bf16, 11-24% in f32
// (docs/BENCHMARKS.md, "Issue 30: q8 decode in quarters" and "Issue 30: bf16 and f32 decode in
// quarters"); with AVX-512 off, decode q8 24-27%, bf16 36-50% and f32 36-45% faster ("Issue 30:
// the AVX2 tier against llama.cpp's AVX2 build"). Each row's sums are the adjacent-row kernels',
// to the bit. q8 scales held as halves (HalveQ8Scales) take the kernels' H twins
// (dot4Q8VNNIFarH, avx2Dot4Q8IFarH), the same results as over f32 scales.
func matVecQuarters(dst []float32, w *Matrix, in *vecIn, lo, hi int, avx2 bool) int {
	if quartersSeen != nil {
		quartersSeen.Add(1)
	}
	m := (hi - lo) / 4
	if m == 0 {
		return lo
	}
	c := w.Cols
	ld := m * c
	x := in.x[:c]
	var out [4]float32
	for r := lo; r < lo+m; r++ {
		off := r * c
		var k int
		switch w.DType {
		case Q8:
			k = in.k64
			ls := m * (c / Q8Block)
			switch h := w.Scales16 != nil; {
			case avx2 && h:
				avx2Dot4Q8IFarH(&w.Q8[off], ld, &w.Scales16[off/Q8Block], ls, &in.xq[0], &in.xs[0], k, &out)
			case avx2:
				avx2Dot4Q8IFar(&w.Q8[off], ld, &w.Scales[off/Q8Block], ls, &in.xq[0], &in.xs[0], k, &out)
			case h:
				dot4Q8VNNIFarH(&w.Q8[off], ld, &w.Scales16[off/Q8Block], ls, &in.xq[0], &in.corr[0], &in.xs[0], k, &out)
			default:
				dot4Q8VNNIFar(&w.Q8[off], ld, &w.Scales[off/Q8Block], ls, &in.xq[0], &in.corr[0], &in.xs[0], k, &out)
			}
		case BF16:
			k = in.k32
			if avx2 {
				avx2MvBF16PFar(&w.U16[off], ld, &in.xp[0], k, &out[0], 4)
			} else {
				dot4BF16PFar(&w.U16[off], ld, &in.xp[0], k, &out)
			}
		case F32:
			if avx2 {
				k = c &^ 7
				avx2MvF32(&w.F32[off], ld, &x[0], k, &out[0], 4)
			} else {
				k = c &^ 15
				dot4F32(&w.F32[off], ld, &x[0], k, &out)
			}
		}
		tailCols(w, off, ld, k, x, out[:])
		dst[r], dst[r+m], dst[r+2*m], dst[r+3*m] = out[0], out[1], out[2], out[3]
	}
	return lo + 4*m
}

// quartersSeen, when not nil (tests only; set it while no product runs), counts matVecQuarters
// calls: the tests check that a route reads in quarters. Nil in production, so decode's threads
// do not share a counter's cache line on every call.
var quartersSeen *atomic.Int64

// Blocking of the matrix-matrix product (see matMulRange).
const (
	gemmN   = 6    // input rows per micro-kernel call
	mvMaxN  = 16   // fewer input rows use the matrix-vector kernels (see matMulRange; q8 in panels: one)
	gemmRB  = 64   // weight rows per packed block (64 × gemmKC × 4 bytes = 256 KiB, in L2)
	gemmKC  = 1024 // largest column chunk: 6 input rows of it (24 KiB) stay in L1
	gemmMax = gemmRB * gemmKC
)

var packPool = sync.Pool{New: func() any { b := make([]float32, gemmMax); return &b }}

// matMulRange computes dst[:, lo:hi] for n >= mvMaxN input rows. (Below mvMaxN, widening and
// packing each weight block costs more than the matrix-vector kernels' re-reads of it from L1
// or L2 for every input row: measured on the AVX2 tier, a decode batch of 8 ran at 70 tok/s
// through this path and 100 through the matrix-vector one; docs/BENCHMARKS.md.) Columns are cut into chunks of
// at most gemmKC (multiples of 16), weight rows into blocks of gemmRB; each block is widened to f32
// once (bf16/f16/q8; f32 weights are used in place) and then met by every group of 6 input rows,
// 4 weight rows at a time, in the gemm4x6F32 micro-kernel: the 6 input rows stay in L1 across the
// block's 16 row groups, the block stays in L2 across all input groups. Later column chunks add to
// dst. Leftover input rows (n mod 6) and weight rows (mod 4) use the 4×1 f32 kernel on the block.
func matMulRange(dst []float32, w *Matrix, x []float32, n, lo, hi int) {
	c, rows := w.Cols, w.Rows
	nk := (c + gemmKC - 1) / gemmKC
	kc := ((c+nk-1)/nk + 15) &^ 15
	if w.DType == Q8 {
		kc = ((c+nk-1)/nk + 31) &^ 31
	}
	var bufp *[]float32
	var buf []float32
	if w.DType != F32 {
		bufp = packPool.Get().(*[]float32)
		buf = *bufp
		defer packPool.Put(bufp)
	}
	var out [4]float32
	for k0 := 0; k0 < c; k0 += kc {
		kw := min(kc, c-k0)
		k16 := kw &^ 15
		acc := 0
		if k0 > 0 {
			acc = 1
		}
		for r0 := lo; r0 < hi; r0 += gemmRB {
			rn := min(gemmRB, hi-r0)
			// wp[rr*ld + j] = w[r0+rr, k0+j]
			var wp []float32
			ld := c
			if w.DType == F32 {
				wp = w.F32[r0*c+k0:]
			} else {
				ld = kw
				for rr := range rn {
					widen(&buf[rr*ld], w, r0+rr, k0, kw)
				}
				wp = buf
			}
			// tail adds the columns k16..kw of weight row rr times input row i to dst.
			tail := func(i, rr int) {
				var s float32
				wr := wp[rr*ld:]
				xi := x[i*c+k0:]
				for j := k16; j < kw; j++ {
					s += wr[j] * xi[j]
				}
				dst[i*rows+r0+rr] += s
			}
			// store writes (or with acc adds) one 4×1 kernel result.
			store := func(d []float32, cnt int) {
				for j := range cnt {
					if acc == 1 {
						d[j] += out[j]
					} else {
						d[j] = out[j]
					}
				}
			}
			i := 0
			for ; i+gemmN <= n; i += gemmN {
				rr := 0
				if k16 > 0 {
					for ; rr+4 <= rn; rr += 4 {
						gemm4x6F32(&wp[rr*ld], ld, &x[i*c+k0], c, k16, &dst[i*rows+r0+rr], rows, acc)
					}
				}
				for ; rr < rn; rr++ {
					for ii := i; ii < i+gemmN; ii++ {
						out = [4]float32{}
						if k16 > 0 {
							dot4F32(&wp[rr*ld], 0, &x[ii*c+k0], k16, &out)
						}
						store(dst[ii*rows+r0+rr:], 1)
					}
				}
				if k16 < kw {
					for ii := i; ii < i+gemmN; ii++ {
						for rr := range rn {
							tail(ii, rr)
						}
					}
				}
			}
			for ; i < n; i++ {
				rr := 0
				for ; rr+4 <= rn; rr += 4 {
					out = [4]float32{}
					if k16 > 0 {
						dot4F32(&wp[rr*ld], ld, &x[i*c+k0], k16, &out)
					}
					store(dst[i*rows+r0+rr:], 4)
				}
				for ; rr < rn; rr++ {
					out = [4]float32{}
					if k16 > 0 {
						dot4F32(&wp[rr*ld], 0, &x[i*c+k0], k16, &out)
					}
					store(dst[i*rows+r0+rr:], 1)
				}
				if k16 < kw {
					for rr := range rn {
						tail(i, rr)
					}
				}
			}
		}
	}
}
