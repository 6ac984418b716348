package cpu

import (
	"sync"
	"unsafe"
)

// The AVX-512 matrix-matrix products on int8 (AVX512_VNNI) and bf16 (AVX512_BF16) dot
// products: prefill and large decode batches with q8 or bf16 weights. The f32 path
// (matMulRange) widens such weights to f32 and multiplies with FMA, 16 multiply-adds per op;
// VPDPBUSD does 64 and VDPBF16PS 32. The price is the rounding of x: to int8 per block of 32 for
// q8 (as the decode kernels and llama.cpp's q8_0 do), to bf16 for bf16 weights (each product
// then has x's 8-bit mantissa instead of 24; sums stay f32).
//
// Both kernels take the weights as packed panels of 16 rows (packRows: four bytes of each row per
// 64-byte vector) and the input rows as they are, four bytes broadcast at a time, so only the
// weights are repacked per product (one pass over them, while the kernels pass over the packed
// copy once per group of 6 input rows). Each worker takes whole panel groups of its row range
// and every input row: the packed group (32 or 64 rows by a column chunk, at most 36 KiB) stays
// in L1 while all input rows' chunks (at most 512 KiB at 512 rows: L2) meet it.

const (
	gemmRows6 = 6    // input rows per micro-kernel call (both kernels)
	q8GroupR  = 32   // weight rows per gemmQ8VNNI call (two panels)
	q8KC      = 1024 // most columns per chunk: 32 rows of it are 32 KiB of int8
	bfGroupR  = 64   // weight rows per gemmBF16 call (four panels)
	bfKC      = 256  // most columns per chunk: 64 rows of it are 32 KiB of bf16
)

// useGemmQ8 and useGemmBF16 report whether MatMul of n input rows takes the int8 (AVX512_VNNI,
// or AVX2: avx2GemmQ8) or the bf16 dot-product kernels.
func useGemmQ8(w *Matrix, n int) bool {
	if w.Q8Panels {
		return n >= 2 && useVNNI() // the weights are packed already: no per-product packing to amortise
	}
	return n >= mvMaxN && w.DType == Q8 && (useVNNI() || useAVX2() && !plainOff.Load())
}

func useGemmBF16(w *Matrix, n int) bool {
	return n >= mvMaxN && w.DType == BF16 && w.Cols >= 32 && w.Cols%2 == 0 && hasBF16 && use512() && !plainOff.Load()
}

// chunkCols splits c columns into equal chunks of at most most, each a multiple of unit.
func chunkCols(c, most, unit int) int {
	nk := (c + most - 1) / most
	return ((c+nk-1)/nk + unit - 1) / unit * unit
}

// gemmIn holds the input rows of a dot-product matrix-matrix product, padded with zero rows to
// a multiple of gemmRows6 and avx2Q8M: quantised for q8 (xq, corr, xs as quantizeX lays them out, k
// columns per row) or rounded to bf16 (xb, k columns per row, k a multiple of 32).
type gemmIn struct {
	k    int
	xq   []int8
	corr []int32
	xs   []float32
	xb   []uint16
}

var gemmInPool = sync.Pool{New: func() any { return new(gemmIn) }}

// quantRows quantises rows [lo, hi) of x (rows c apart, the first k columns) into in (the AVX2
// kernel needs no correction).
func (in *gemmIn) quantRows(x []float32, c, lo, hi int) {
	k := in.k
	for i := lo; i < hi; i++ {
		if useAVX2() {
			avx2QuantX8(&in.xq[i*k], &in.xs[i*k/4], &x[i*c], k/Q8Block)
		} else {
			quantX8(&in.xq[i*k], &in.corr[i*k/Q8Block], &in.xs[i*k/4], &x[i*c], k/Q8Block, 1)
		}
	}
}

// prepareGemm fills in for n input rows of x against w (parallel over rows for large inputs).
func prepareGemm(w *Matrix, x []float32, n int) *gemmIn {
	in := gemmInPool.Get().(*gemmIn)
	c := w.Cols
	const pad = 12 // a multiple of gemmRows6 and avx2Q8M
	np := (n + pad - 1) / pad * pad
	if w.DType == Q8 {
		k := c
		in.k = k
		in.xq = grow(in.xq, np*k)
		in.corr = grow(in.corr, np*k/Q8Block)
		in.xs = grow(in.xs, np*k/4)
		clear(in.xq[n*k:])
		clear(in.corr[n*k/Q8Block:])
		clear(in.xs[n*k/4:])
		parallelWork(n*k*4, n, 1, func(lo, hi int) { in.quantRows(x, c, lo, hi) })
		return in
	}
	k := c &^ 31
	in.k = k
	in.xb = grow(in.xb, np*k)
	clear(in.xb[n*k:])
	parallelWork(n*k*4, n, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			cvtX16(&in.xb[i*k], &x[i*c], k)
		}
	})
	return in
}

// packRows packs kwBytes bytes (a multiple of 4) from byte k0b of the 16 rows from r of a
// matrix at data (rowBytes bytes per row; rows past last repeat it: their lanes are computed but
// not stored) into dst for the matrix-matrix kernels: group g of four bytes of every row at
// dst + g·lddst, XORed with xor. Whole 64-byte chunks go through pack16T's transposes, a last
// partial chunk through pack16's gathers, whose offsets are from the first row read (row last
// where r is past it: nothing before the matrix is read). It returns the store mask of the rows
// before end.
func packRows(dst unsafe.Pointer, lddst int, data unsafe.Pointer, rowBytes, r, last, end, k0b, kwBytes int, xor uint32) uint64 {
	var rows [16]*byte
	var idx [16]int32
	var mask uint64
	first := min(r, last)
	for j := range 16 {
		rr := min(r+j, last)
		rows[j] = (*byte)(unsafe.Add(data, rr*rowBytes+k0b))
		idx[j] = int32((rr - first) * rowBytes / 4)
		if r+j < end {
			mask |= 1 << j
		}
	}
	n64 := kwBytes / 64
	if n64 > 0 {
		pack16T((*byte)(dst), lddst, &rows, n64, xor)
	}
	if rest := kwBytes - 64*n64; rest > 0 {
		pack16((*byte)(unsafe.Add(dst, 16*n64*lddst)), lddst, (*byte)(unsafe.Add(unsafe.Pointer(rows[0]), 64*n64)), &idx, rest/4, xor)
	}
	return mask
}

// gemmPack is a worker's packing buffer (one panel group and, for q8, its scales; for half
// scales in rows, the group's rows' scales widened, wide).
type gemmPack struct {
	w    [q8GroupR * q8KC]byte // also bfGroupR × bfKC bf16
	s    [q8GroupR * q8KC / Q8Block]float32
	wide []float32
}

var gemmPackPool = sync.Pool{New: func() any { return new(gemmPack) }}

// gemmBlocks calls f for every column chunk (k0, kw; acc: add to dst, as chunks after the
// first do) of c columns cut into chunks of at most most (multiples of unit), and within it for
// every group of rows r0 of [lo, hi) group apart: the blocking both kernels share.
func gemmBlocks(c, most, unit, lo, hi, group int, f func(k0, kw, acc, r0 int)) {
	kc := chunkCols(c, most, unit)
	for k0 := 0; k0 < c; k0 += kc {
		acc := 0
		if k0 > 0 {
			acc = 1
		}
		for r0 := lo; r0 < hi; r0 += group {
			f(k0, min(kc, c-k0), acc, r0)
		}
	}
}

// gemmQ8Range computes dst[:, lo:hi] for q8 weights and the n quantised input rows of in. Half
// scales in rows are widened per group of rows (widenScales) and packed from there, so the
// packed scales and the products are those of the f32 scales.
func gemmQ8Range(dst []float32, w *Matrix, in *gemmIn, n, lo, hi int) {
	c, rows, nb := w.Cols, w.Rows, w.Cols/Q8Block
	p := gemmPackPool.Get().(*gemmPack)
	defer gemmPackPool.Put(p)
	wq := unsafe.Pointer(&w.Q8[0])
	gemmBlocks(c, q8KC, Q8Block, lo, hi, q8GroupR, func(k0, kw, acc, r0 int) {
		if w.Q8Panels { // packed at load (panels.go): the kernel reads the weights where they are
			for i := 0; i < n; i += gemmRows6 {
				gemmQ8VNNIH((*byte)(unsafe.Add(wq, r0*c+panelRows*k0)), &w.Scales16[r0*nb+panelRows*(k0/Q8Block)],
					&in.xq[i*c+k0], c, &in.xs[(i*c+k0)/4], c/4, &in.corr[(i*c+k0)/Q8Block], nb,
					kw/Q8Block, min(gemmRows6, n-i), &dst[i*rows+r0], rows, 0xffff, 0xffff, acc)
			}
			return
		}
		scales, s0 := packScales(w, &p.wide, r0, min(r0+q8GroupR, hi))
		var masks [2]uint64
		for pn := range 2 {
			r := r0 + 16*pn
			masks[pn] = packRows(unsafe.Pointer(&p.w[64*pn]), 128, wq, c, r, hi-1, hi, k0, kw, 0x80808080)
			packRows(unsafe.Pointer(&p.s[16*pn]), 128, unsafe.Pointer(&scales[0]), 4*nb, r-s0, hi-1-s0, hi-s0, 4*(k0/Q8Block), 4*(kw/Q8Block), 0)
		}
		for i := 0; i < n; i += gemmRows6 {
			gemmQ8VNNI(&p.w[0], &p.s[0], &in.xq[i*c+k0], c, &in.xs[(i*c+k0)/4], c/4, &in.corr[(i*c+k0)/Q8Block], nb,
				kw/Q8Block, min(gemmRows6, n-i), &dst[i*rows+r0], rows, int(masks[0]), int(masks[1]), acc)
		}
	})
}

// gemmBF16Range computes dst[:, lo:hi] for bf16 weights and the n rounded input rows of in;
// columns past in.k (the last c mod 32) are added in scalar code.
func gemmBF16Range(dst []float32, w *Matrix, x []float32, in *gemmIn, n, lo, hi int) {
	c, rows, k := w.Cols, w.Rows, in.k
	p := gemmPackPool.Get().(*gemmPack)
	defer gemmPackPool.Put(p)
	wp := unsafe.Slice((*uint16)(unsafe.Pointer(&p.w[0])), len(p.w)/2)
	wu := unsafe.Pointer(&w.U16[0])
	gemmBlocks(k, bfKC, 32, lo, hi, bfGroupR, func(k0, kw, acc, r0 int) {
		var masks uint64
		for pn := range 4 {
			masks |= packRows(unsafe.Pointer(&p.w[64*pn]), 256, wu, 2*c, r0+16*pn, hi-1, hi, 2*k0, 2*kw, 0) << (16 * pn)
		}
		for i := 0; i < n; i += gemmRows6 {
			gemmBF16(&wp[0], &in.xb[i*k+k0], k, kw/2, min(gemmRows6, n-i), &dst[i*rows+r0], rows, masks, acc)
		}
	})
	for i := range n {
		mvTail(dst[i*rows:], w, x[i*c:], k, lo, hi)
	}
}

// matMulGemm is MatMul through gemmQ8Range or gemmBF16Range.
func matMulGemm(dst []float32, w *Matrix, x []float32, n int) {
	in := prepareGemm(w, x, n)
	defer gemmInPool.Put(in)
	switch {
	case w.DType == Q8 && useAVX2():
		parallelWork(w.Rows*w.Cols*n, w.Rows, avx2Q8Rows, func(lo, hi int) { gemmQ8RangeAVX2(dst, w, in, n, lo, hi) })
		return
	case w.DType == Q8:
		parallelWork(w.Rows*w.Cols*n, w.Rows, q8GroupR, func(lo, hi int) { gemmQ8Range(dst, w, in, n, lo, hi) })
		return
	}
	parallelWork(w.Rows*w.Cols*n, w.Rows, bfGroupR, func(lo, hi int) { gemmBF16Range(dst, w, x, in, n, lo, hi) })
}
