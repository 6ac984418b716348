package cpu

import (
	"sync"
	"unsafe"
)

// The AVX2 tier of MatMul (CPUs without AVX-512; see kernels_avx2_amd64.s).

// The matrix-vector route of this tier is in mvPlan (matmul.go); the matrix-matrix one is
// gemmRangeAVX2 and, for q8, gemmQ8RangeAVX2.

// mvMaxNPairs replaces mvMaxN for bf16 weights, whose matrix-vector path takes input rows two at
// a time (avx2MvBF16P2): measured against the matrix-matrix path, interleaved in one process, the
// 24 layers' products of a decode batch: 119 vs 85 tok/s at 16 rows, 80-130 vs 85-112 at 24, 79
// vs 91 at 32.
const mvMaxNPairs = 24

// mvBlock is the number of weight rows the matrix-vector path gives one kernel call: at most
// 64 × 4864 weights (622 KiB of bf16, 1.2 MiB of f32: L2 or L3) that stay cached while every input
// row meets them. (Blocks of 128 KiB, and no blocking at all, measured the same on Zen 3.)
const mvBlock = 64

// mvRangeAVX2 computes dst[i, lo:hi] for every input row i of in (matrix-vector products; bf16
// rows use avx2MvBF16P where in has the deinterleaved copy xp, and avx2MvBF16P2 for pairs of
// input rows). With in.quarters (one input row) it reads the range in quarters
// (matVecQuarters) and the rows they leave as below.
func mvRangeAVX2(dst []float32, w *Matrix, in *vecIn, lo, hi int) {
	if in.quarters {
		lo = matVecQuarters(dst, w, in, lo, hi, true)
	}
	c, rows, x, n := w.Cols, w.Rows, in.x, in.n
	kb := c &^ 7 // Q8: c, a multiple of 32
	if in.xp != nil {
		kb = in.k32
	}
	var tmp, tmp1 [4]float32
	for r0 := lo; r0 < hi; r0 += mvBlock {
		r1 := min(r0+mvBlock, hi)
		r4 := r0 + (r1-r0)&^3
		for i := 0; i < n; {
			if in.xp != nil && i+1 < n && !plainOff.Load() {
				mvPairBF16(dst, w, in, i, r0, r4, r1, &tmp, &tmp1)
				i += 2
				continue
			}
			xi := x[i*c : (i+1)*c]
			d := dst[i*rows : (i+1)*rows]
			if in.xp != nil {
				xi = in.xp[i*kb : (i+1)*kb]
			}
			if r4 > r0 {
				mvAVX2(w, r0, 1, xi, kb, &d[r0], r4-r0, in.xp != nil)
			}
			for r := r4; r < r1; r++ {
				mvAVX2(w, r, 0, xi, kb, &tmp[0], 4, in.xp != nil)
				d[r] = tmp[0]
			}
			mvTail(d, w, x[i*c:(i+1)*c], kb, r0, r1)
			i++
		}
	}
}

// mvPairBF16 computes dst[i, r0:r1] and dst[i+1, r0:r1] for bf16 weights with avx2MvBF16P2
// (rows r0..r4 four at a time, the rest one by one; columns past in.k32 in scalar code).
func mvPairBF16(dst []float32, w *Matrix, in *vecIn, i, r0, r4, r1 int, tmp, tmp1 *[4]float32) {
	c, rows, kb := w.Cols, w.Rows, in.k32
	x0, x1 := &in.xp[i*kb], &in.xp[(i+1)*kb]
	d0, d1 := dst[i*rows:(i+1)*rows], dst[(i+1)*rows:(i+2)*rows]
	if r4 > r0 {
		avx2MvBF16P2(&w.U16[r0*c], c, x0, x1, kb, &d0[r0], &d1[r0], r4-r0)
	}
	for r := r4; r < r1; r++ {
		avx2MvBF16P2(&w.U16[r*c], 0, x0, x1, kb, &tmp[0], &tmp1[0], 4)
		d0[r], d1[r] = tmp[0], tmp1[0]
	}
	mvTail(d0, w, in.x[i*c:(i+1)*c], kb, r0, r1)
	mvTail(d1, w, in.x[(i+1)*c:(i+2)*c], kb, r0, r1)
}

// mvTail adds the columns kb..Cols of rows r0..r1 of w times x to d.
func mvTail(d []float32, w *Matrix, x []float32, kb, r0, r1 int) {
	c := w.Cols
	if kb >= c {
		return
	}
	for r := r0; r < r1; r++ {
		var s float32
		for k := kb; k < c; k++ {
			s += elem(w, r*c+k) * x[k]
		}
		d[r] += s
	}
}

// mvRangeAVX2Q8 computes dst[i, lo:hi] for Q8 weights and every input row of in (x quantised
// by prepareVec over all columns) with avx2Dot4Q8I2 for pairs of input rows and avx2Dot4Q8I for
// a last odd one (their H twins over half scales), four weight rows at a time; each block of
// mvBlock rows stays cached while it meets every input row. With in.quarters (one input row) it
// reads the range in quarters (matVecQuarters) and the rows they leave so.
func mvRangeAVX2Q8(dst []float32, w *Matrix, in *vecIn, lo, hi int) {
	if in.quarters {
		lo = matVecQuarters(dst, w, in, lo, hi, true)
	}
	c, rows := w.Cols, w.Rows
	var out, out1 [4]float32
	for r0 := lo; r0 < hi; r0 += mvBlock {
		r1 := min(r0+mvBlock, hi)
		for i := 0; i < in.n; i++ {
			xq, xs := &in.xq[i*c], &in.xs[i*c/4]
			if i+1 < in.n { // two input rows per pass
				xq1, xs1 := &in.xq[(i+1)*c], &in.xs[(i+1)*c/4]
				d0, d1 := dst[i*rows:(i+1)*rows], dst[(i+1)*rows:(i+2)*rows]
				r := r0
				for ; r+4 <= r1; r += 4 {
					avx2Q8Dot2(w, r, c, xq, xq1, xs, xs1, &out, &out1)
					copy(d0[r:r+4], out[:])
					copy(d1[r:r+4], out1[:])
				}
				for ; r < r1; r++ {
					avx2Q8Dot2(w, r, 0, xq, xq1, xs, xs1, &out, &out1)
					d0[r], d1[r] = out[0], out1[0]
				}
				i++
				continue
			}
			d := dst[i*rows : (i+1)*rows]
			r := r0
			for ; r+4 <= r1; r += 4 {
				avx2Q8Dot1(w, r, c, xq, xs, &out)
				copy(d[r:r+4], out[:])
			}
			for ; r < r1; r++ {
				avx2Q8Dot1(w, r, 0, xq, xs, &out)
				d[r] = out[0]
			}
		}
	}
}

// avx2Q8Dot1 runs avx2Dot4Q8I (avx2Dot4Q8IH over half scales) on rows r.. of w: four rows with
// ld = Cols, row r four times with ld = 0.
func avx2Q8Dot1(w *Matrix, r, ld int, xq *int8, xs *float32, out *[4]float32) {
	c, nb := w.Cols, w.Cols/Q8Block
	if w.Scales16 != nil {
		avx2Dot4Q8IH(&w.Q8[r*c], ld, &w.Scales16[r*nb], ld/Q8Block, xq, xs, c, out)
	} else {
		avx2Dot4Q8I(&w.Q8[r*c], ld, &w.Scales[r*nb], ld/Q8Block, xq, xs, c, out)
	}
}

// avx2Q8Dot2 is avx2Q8Dot1 for two input rows: avx2Dot4Q8I2, or avx2Dot4Q8I2H.
func avx2Q8Dot2(w *Matrix, r, ld int, xq, xq1 *int8, xs, xs1 *float32, out, out1 *[4]float32) {
	c, nb := w.Cols, w.Cols/Q8Block
	if w.Scales16 != nil {
		avx2Dot4Q8I2H(&w.Q8[r*c], ld, &w.Scales16[r*nb], ld/Q8Block, xq, xq1, xs, xs1, c, out, out1)
	} else {
		avx2Dot4Q8I2(&w.Q8[r*c], ld, &w.Scales[r*nb], ld/Q8Block, xq, xq1, xs, xs1, c, out, out1)
	}
}

// mvAVX2 runs the mv kernel of w's dtype on nrows rows from r (step 1) or on row r four times
// (step 0), over the first kb columns, into dst; deint: x is deinterleaved (bf16 only).
func mvAVX2(w *Matrix, r, step int, x []float32, kb int, dst *float32, nrows int, deint bool) {
	c := w.Cols
	off := r * c
	switch w.DType {
	case F32:
		avx2MvF32(&w.F32[off], step*c, &x[0], kb, dst, nrows)
	case BF16:
		if deint {
			avx2MvBF16P(&w.U16[off], step*c, &x[0], kb, dst, nrows)
		} else {
			avx2MvBF16(&w.U16[off], step*c, &x[0], kb, dst, nrows)
		}
	case F16:
		avx2MvF16(&w.U16[off], step*c, &x[0], kb, dst, nrows)
	case Q8:
		if w.Scales16 != nil {
			avx2MvQ8H(&w.Q8[off], step*c, &w.Scales16[off/Q8Block], step*(c/Q8Block), &x[0], kb, dst, nrows)
		} else {
			avx2MvQ8(&w.Q8[off], step*c, &w.Scales[off/Q8Block], step*(c/Q8Block), &x[0], kb, dst, nrows)
		}
	}
}

// gemmKC2 is the column chunk of the AVX2 matrix-matrix path: a 16-row panel of it is 16 KiB
// (L1) and the n input rows' slice of it, 1 KiB each.
const gemmKC2 = 256

// gemmPanels is the number of 16-row panels packed at once: 8 × 16 KiB = 128 KiB, which stay in
// L2 while each group of 6 input rows (6 KiB, L1) meets all of them.
const gemmPanels = 8

// gemmBufs are the widening and packing buffers of one gemmRangeAVX2 call.
type gemmBufs struct {
	wide  [16 * gemmKC2]float32
	panel [gemmPanels][16 * gemmKC2]float32
}

var gemmPool = sync.Pool{New: func() any { return new(gemmBufs) }}

// gemmRangeAVX2 computes dst[:, lo:hi] for n >= mvMaxN input rows. Weight rows are taken in
// blocks of up to gemmPanels×16 and columns in chunks of at most gemmKC2. Each 16 rows of a
// block's chunk are widened to f32 (f32 weights are read in place) and transposed into a panel,
// column by column (transpose16); then each group of up to 6 input rows meets every panel of the
// block in gemm16: 12 ymm accumulators, one broadcast of x per 2 FMAs. The x group stays in L1
// across the panels and the panels in L2 across the groups, so neither is re-read from further
// away: the loop order with one panel at a time re-read all n input rows' chunk (512 KiB at
// n = 512, past Zen 3's L2) for every 16 weight rows. Later chunks add to dst; columns past the
// last multiple of 8 are added in scalar code, and rows past the last multiple of 16 go to the
// matrix-vector path. (Interleaved A/B against one panel at a time, 512 input rows, the 0.5B
// shapes, f32 and bf16: 3-11% faster at one thread, -3% to +13% at two.)
func gemmRangeAVX2(dst []float32, w *Matrix, x []float32, n, lo, hi int) {
	c, rows := w.Cols, w.Rows
	b := gemmPool.Get().(*gemmBufs)
	defer gemmPool.Put(b)
	r0 := lo
	for r0+16 <= hi {
		np := min(gemmPanels, (hi-r0)/16)
		for k0 := 0; k0 < c; k0 += gemmKC2 {
			kw := min(gemmKC2, c-k0)
			k8 := kw &^ 7
			acc := 0
			if k0 > 0 {
				acc = 1
			}
			if k8 > 0 {
				for p := range np {
					rp := r0 + 16*p
					if w.DType == F32 {
						avx2Transpose16(&b.panel[p][0], &w.F32[rp*c+k0], c, k8)
						continue
					}
					for j := range 16 {
						widen(&b.wide[j*gemmKC2], w, rp+j, k0, k8)
					}
					avx2Transpose16(&b.panel[p][0], &b.wide[0], gemmKC2, k8)
				}
				for i := 0; i < n; i += 6 {
					m := min(6, n-i)
					for p := range np {
						avx2Gemm16(m, &b.panel[p][0], &x[i*c+k0], c, k8, &dst[i*rows+r0+16*p], rows, acc)
					}
				}
			}
			for k := k8; k < kw; k++ {
				for j := range 16 * np {
					v := elem(w, (r0+j)*c+k0+k)
					for i := range n {
						dst[i*rows+r0+j] += v * x[i*c+k0+k] // k8 > 0 at k0 = 0 (c >= 16)
					}
				}
			}
		}
		r0 += 16 * np
	}
	if r0 < hi {
		mvRangeAVX2(dst, w, &vecIn{x: x, n: n}, r0, hi)
	}
}

// avx2Q8Rows is the number of weight rows (four 8-row panels of avx2GemmQ8) packed at once and
// met by each group of 6 input rows: x, the larger operand at long prompts, is then read from
// L2/L3 once per 32 weight rows instead of once per panel; four panels of the 0.5B shapes'
// longest rows (4864 columns, 78 KiB each with the absolute values) stay in L2.
const avx2Q8Rows = 32

// avx2Q8M is the number of input rows per avx2GemmQ8 call.
const avx2Q8M = 4

// avx2Q8Pack is the packing buffer of gemmQ8RangeAVX2.
type avx2Q8Pack struct {
	w    []byte    // per panel: per group of 4 columns, 32 bytes of weights and 32 of |w|
	s    []float32 // per panel: per block, 8 scales
	wide []float32 // half scales: the avx2Q8Rows rows' scales widened (widenScales)
	tile [avx2Q8M * 8]float32
}

var avx2Q8Pool = sync.Pool{New: func() any { return new(avx2Q8Pack) }}

// gemmQ8RangeAVX2 computes dst[:, lo:hi] for q8 weights and the n quantised input rows of in
// with avx2GemmQ8 (see avx2Q8Rows); a last panel of fewer than 8 rows is computed into a tile
// and copied. Half scales (Scales16 in rows) are widened per avx2Q8Rows rows (widenScales) and
// packed from there: the packed scales, and so the products, are those of the f32 scales.
func gemmQ8RangeAVX2(dst []float32, w *Matrix, in *gemmIn, n, lo, hi int) {
	c, rows, nb := w.Cols, w.Rows, w.Cols/Q8Block
	pk := avx2Q8Pool.Get().(*avx2Q8Pack)
	defer avx2Q8Pool.Put(pk)
	wStride, sStride := 16*c, 8*nb // bytes and floats per packed panel
	pk.w = grow(pk.w, avx2Q8Rows/8*wStride)
	pk.s = grow(pk.s, avx2Q8Rows/8*sStride)
	var idx, sidx [8]int32
	for r0 := lo; r0 < hi; r0 += avx2Q8Rows {
		np := min(avx2Q8Rows, hi-r0+7) / 8
		scales, s0 := packScales(w, &pk.wide, r0, min(r0+avx2Q8Rows, hi))
		for p := range np {
			r := r0 + 8*p
			for j := range 8 {
				rr := min(r+j, hi-1) - r
				idx[j], sidx[j] = int32(rr*c/4), int32(rr*nb)
			}
			avx2Pack8(&pk.w[p*wStride], 64, (*byte)(unsafe.Pointer(&w.Q8[r*c])), &idx, c/4, 1)
			avx2Pack8((*byte)(unsafe.Pointer(&pk.s[p*sStride])), 32, (*byte)(unsafe.Pointer(&scales[(r-s0)*nb])), &sidx, nb, 0)
		}
		for i := 0; i < n; i += avx2Q8M {
			m := min(avx2Q8M, n-i)
			for p := range np {
				r := r0 + 8*p
				if r+8 <= hi {
					avx2GemmQ8(&pk.w[p*wStride], &pk.s[p*sStride], &in.xq[i*c], c, &in.xs[i*c/4], c/4, nb, m, &dst[i*rows+r], rows)
					continue
				}
				avx2GemmQ8(&pk.w[p*wStride], &pk.s[p*sStride], &in.xq[i*c], c, &in.xs[i*c/4], c/4, nb, m, &pk.tile[0], 8)
				for ii := range m {
					copy(dst[(i+ii)*rows+r:(i+ii)*rows+hi], pk.tile[ii*8:])
				}
			}
		}
	}
}
