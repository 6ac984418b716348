package cpu

import "fmt"

// Paged is a Rows×Cols f32 matrix stored in fixed-size blocks, the layout of a paged KV cache
// (one KV head of one layer of one sequence, read through its block table). With ByRows, block b
// holds rows [b·Block, (b+1)·Block) as a Block×Cols row-major matrix: keys, a token per row. Else
// block b holds columns [b·Block, (b+1)·Block) as a Rows×Block row-major matrix: values
// transposed, a token per column. The last block may be partly used (Rows or Cols need not be
// multiples of Block); no value past them is read.
type Paged struct {
	Rows, Cols int
	Block      int
	ByRows     bool
	Blocks     [][]float32
}

// MatMulPaged computes dst[i,r] = Σ_c w[r,c]·x[i,c] for n input rows x (n×Cols, row-major) into
// dst (n×Rows), as MatMul does for a contiguous matrix. It is meant for few input rows (decode
// attention): each block is streamed once through the matrix-vector kernels while every input
// row meets it, so reading through the block table costs what a contiguous matrix costs. Every
// result is computed the same way whatever n and the thread count (for ByRows a plain dot
// product per element; otherwise block by block, partial sums added in block order).
func MatMulPaged(dst []float32, w *Paged, x []float32, n int) {
	checkPaged(dst, w, x, n)
	if n == 0 || w.Rows == 0 {
		return
	}
	if w.ByRows {
		parallelWork(w.Rows*w.Cols*n, w.Rows, 4, func(lo, hi int) { pagedRowsRange(dst, w, x, n, lo, hi) })
		return
	}
	parallelWork(w.Rows*w.Cols*n, w.Rows, 4, func(lo, hi int) { pagedColsRange(dst, w, x, n, lo, hi) })
}

func checkPaged(dst []float32, w *Paged, x []float32, n int) {
	switch {
	case w == nil:
		panic("cpu: MatMulPaged: nil matrix")
	case w.Rows < 0 || w.Cols < 0 || n < 0:
		panic(fmt.Sprintf("cpu: MatMulPaged: negative shape %d×%d, n=%d", w.Rows, w.Cols, n))
	case w.Block < 1:
		panic(fmt.Sprintf("cpu: MatMulPaged: block size %d", w.Block))
	case len(x) < n*w.Cols:
		panic(fmt.Sprintf("cpu: MatMulPaged: x has %d values, want n×Cols = %d×%d", len(x), n, w.Cols))
	case len(dst) < n*w.Rows:
		panic(fmt.Sprintf("cpu: MatMulPaged: dst has %d values, want n×Rows = %d×%d", len(dst), n, w.Rows))
	}
	span := w.Cols
	if w.ByRows {
		span = w.Rows
	}
	nb := (span + w.Block - 1) / w.Block
	if len(w.Blocks) < nb {
		panic(fmt.Sprintf("cpu: MatMulPaged: %d blocks, want %d for %d×%d in blocks of %d", len(w.Blocks), nb, w.Rows, w.Cols, w.Block))
	}
	for b := range nb {
		if len(w.Blocks[b]) < pagedBlockLen(w) {
			panic(fmt.Sprintf("cpu: MatMulPaged: block %d has %d values, want %d", b, len(w.Blocks[b]), pagedBlockLen(w)))
		}
	}
}

// pagedBlockLen is the number of values one block of w holds.
func pagedBlockLen(w *Paged) int {
	if w.ByRows {
		return w.Block * w.Cols
	}
	return w.Rows * w.Block
}

// pagedRowsRange computes dst[i, lo:hi] for every input row i of a ByRows matrix: the rows of
// each block in [lo, hi) meet every input row while they are in cache.
func pagedRowsRange(dst []float32, w *Paged, x []float32, n, lo, hi int) {
	c, B := w.Cols, w.Block
	for b := lo / B; b*B < hi; b++ {
		r0, r1 := max(lo, b*B), min(hi, (b+1)*B)
		blk := w.Blocks[b][(r0-b*B)*c:]
		for i := range n {
			dotRows(dst[i*w.Rows+r0:i*w.Rows+r1], blk, c, x[i*c:(i+1)*c])
		}
	}
}

// pagedColsRange computes dst[i, lo:hi] for every input row i of a column-blocked matrix: per
// block, the rows [lo, hi) of that block (Rows×Block) dotted with the block's slice of each input
// row, added to the sums of the blocks before it. Rows go in groups of pagedGroup so the partial
// sums stay on the stack.
func pagedColsRange(dst []float32, w *Paged, x []float32, n, lo, hi int) {
	B := w.Block
	var tmp [pagedGroup]float32
	for g0 := lo; g0 < hi; g0 += pagedGroup {
		g1 := min(hi, g0+pagedGroup)
		for b := 0; b*B < w.Cols; b++ {
			k := min(B, w.Cols-b*B)
			blk := w.Blocks[b][g0*B:]
			for i := range n {
				d := dst[i*w.Rows+g0 : i*w.Rows+g1]
				xi := x[i*w.Cols+b*B : i*w.Cols+b*B+k]
				if b == 0 {
					dotRows(d, blk, B, xi)
					continue
				}
				t := tmp[:g1-g0]
				dotRows(t, blk, B, xi)
				for j, v := range t {
					d[j] += v
				}
			}
		}
	}
}

// pagedGroup is how many rows of a column-blocked matrix one pass over its blocks handles.
const pagedGroup = 64

// dotRows sets d[j] = Σ_{c<len(x)} w[j·ldw+c]·x[c] for every j < len(d): the f32 matrix-vector
// kernel of the tier in use (four rows per call), the columns past its multiple of 16 (AVX-512)
// or 8 (AVX2) in Go.
func dotRows(d, w []float32, ldw int, x []float32) {
	nr, k := len(d), len(x)
	if nr == 0 {
		return
	}
	if need := (nr-1)*ldw + k; len(w) < need {
		panic(fmt.Sprintf("cpu: dotRows: %d weights, want %d", len(w), need))
	}
	kb, tier := bulk(k)
	var out [4]float32
	switch tier {
	case tier512:
		j := 0
		for ; j+4 <= nr; j += 4 {
			dot4F32(&w[j*ldw], ldw, &x[0], kb, &out)
			d[j], d[j+1], d[j+2], d[j+3] = out[0], out[1], out[2], out[3]
		}
		for ; j < nr; j++ {
			dot4F32(&w[j*ldw], 0, &x[0], kb, &out)
			d[j] = out[0]
		}
	case tierAVX2:
		n4 := nr &^ 3
		if n4 > 0 {
			avx2MvF32(&w[0], ldw, &x[0], kb, &d[0], n4)
		}
		for j := n4; j < nr; j++ {
			avx2MvF32(&w[j*ldw], 0, &x[0], kb, &out[0], 4)
			d[j] = out[0]
		}
	default:
		clear(d)
	}
	if kb == k {
		return
	}
	for j := range d {
		row := w[j*ldw : j*ldw+k]
		s := d[j]
		for c := kb; c < k; c++ {
			s += row[c] * x[c]
		}
		d[j] = s
	}
}
