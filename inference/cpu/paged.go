package cpu

import (
	"fmt"
	"unsafe"
)

// Paged is a Rows×Cols f32 matrix stored in fixed-size blocks, the layout of a paged KV cache
// (one KV head of one layer of one sequence, read through its block table). With ByRows, block b
// holds rows [b·Block, (b+1)·Block) as a Block×Cols row-major matrix: values, a token per row
// (Attend). Else block b holds columns [b·Block, (b+1)·Block) as a Rows×Block row-major
// matrix: a token per column. The last block may be partly used (Rows or Cols need not be
// multiples of Block); no value past them is read.
//
// With Tiled (not with ByRows), the columns of a block lie in Block/KeyTile tiles of KeyTile
// columns, back to back, each a Rows×KeyTile row-major matrix: column j of block b is
// Blocks[b][(j'/KeyTile·Rows + r)·KeyTile + j'%KeyTile] for row r and j' = j − b·Block; keys,
// transposed a tile at a time, for Attend. Block must then be a multiple of KeyTile.
//
// The blocks hold f32 values (Blocks) or, with BF16 set instead, bf16 ones (a KV cache stored at
// half the bytes): Attend widens those exactly to f32 (on AVX-512 in registers, on AVX2 a
// key tile or a step's value rows at a time, elsewhere a chunk at a time), so its results are the
// f32 path's for the rounded values; MatMulPaged takes f32 blocks by rows or columns only.
type Paged struct {
	Rows, Cols int
	Block      int
	ByRows     bool
	Tiled      bool
	Blocks     [][]float32
	BF16       [][]uint16
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
	case w.BF16 != nil:
		panic("cpu: MatMulPaged: bf16 blocks (f32 only)")
	case w.Tiled:
		panic("cpu: MatMulPaged: tiled blocks (by rows or columns only)")
	}
	checkPagedBlocks(w)
}

// checkPagedBlocks panics unless w (Block ≥ 1) has a full block for every row (ByRows) or column
// it holds.
func checkPagedBlocks(w *Paged) {
	if w.Block < 1 {
		panic(fmt.Sprintf("cpu: paged matrix: block size %d", w.Block))
	}
	if w.Tiled && (w.ByRows || w.Block%KeyTile != 0) {
		panic(fmt.Sprintf("cpu: paged matrix: tiled with blocks of %d (by rows %v), want columns in blocks of a multiple of %d", w.Block, w.ByRows, KeyTile))
	}
	span := w.Cols
	if w.ByRows {
		span = w.Rows
	}
	nb := (span + w.Block - 1) / w.Block
	have := len(w.Blocks)
	if w.BF16 != nil {
		if w.Blocks != nil {
			panic("cpu: paged matrix: both f32 and bf16 blocks")
		}
		have = len(w.BF16)
	}
	if have < nb {
		panic(fmt.Sprintf("cpu: paged matrix: %d blocks, want %d for %d×%d in blocks of %d", have, nb, w.Rows, w.Cols, w.Block))
	}
	for b := range nb {
		f, h := w.block(b, 0)
		if n := len(f) + len(h); n < pagedBlockLen(w) {
			panic(fmt.Sprintf("cpu: paged matrix: block %d has %d values, want %d", b, n, pagedBlockLen(w)))
		}
	}
}

// block returns block b of m from element i on: its f32 values, or its bf16 ones where m holds
// bf16 blocks (the other nil).
func (m *Paged) block(b, i int) ([]float32, []uint16) {
	if m.BF16 != nil {
		return nil, m.BF16[b][i:]
	}
	return m.Blocks[b][i:], nil
}

// list returns the address of m's block list (f32 or bf16): views whose lists are one slice, or
// prefixes of one, read the same blocks.
func (m *Paged) list() unsafe.Pointer {
	if m.BF16 != nil {
		return unsafe.Pointer(unsafe.SliceData(m.BF16))
	}
	return unsafe.Pointer(unsafe.SliceData(m.Blocks))
}

// pagedBlockLen is the number of values one block of w holds.
func pagedBlockLen(w *Paged) int {
	if w.ByRows {
		return w.Block * w.Cols
	}
	return w.Rows * w.Block
}

// pagedRowsRange computes dst[i, lo:hi] for every input row i of a ByRows matrix, block by
// block.
func pagedRowsRange(dst []float32, w *Paged, x []float32, n, lo, hi int) {
	c, B := w.Cols, w.Block
	for b := lo / B; b*B < hi; b++ {
		r0, r1 := max(lo, b*B), min(hi, (b+1)*B)
		dotRows(dst[r0:], w.Rows, w.Blocks[b][(r0-b*B)*c:], c, r1-r0, x, c, n, c)
	}
}

// pagedColsRange computes dst[i, lo:hi] for every input row i of a column-blocked matrix: per
// block, the rows [lo, hi) of that block (Rows×Block) dotted with the block's slice of each input
// row, added to the sums of the blocks before it. Rows go in groups of pagedGroup and inputs in
// groups of pagedInputs so the partial sums fit a stack buffer.
func pagedColsRange(dst []float32, w *Paged, x []float32, n, lo, hi int) {
	B := w.Block
	var tmp [pagedInputs * pagedGroup]float32
	for i0 := 0; i0 < n; i0 += pagedInputs {
		ni := min(n-i0, pagedInputs)
		for g0 := lo; g0 < hi; g0 += pagedGroup {
			g := min(hi, g0+pagedGroup) - g0
			for b := 0; b*B < w.Cols; b++ {
				k := min(B, w.Cols-b*B)
				blk := w.Blocks[b][g0*B:]
				xb := x[i0*w.Cols+b*B:]
				if b == 0 {
					dotRows(dst[i0*w.Rows+g0:], w.Rows, blk, B, g, xb, w.Cols, ni, k)
					continue
				}
				dotRows(tmp[:], g, blk, B, g, xb, w.Cols, ni, k)
				for i := range ni {
					d := dst[(i0+i)*w.Rows+g0 : (i0+i)*w.Rows+g0+g]
					for j, v := range tmp[i*g : (i+1)*g] {
						d[j] += v
					}
				}
			}
		}
	}
}

// pagedGroup and pagedInputs bound the rows and input rows of one partial-sum buffer of
// pagedColsRange.
const (
	pagedGroup  = 64
	pagedInputs = 16
)

// dotRows sets dst[i·ldd+j] = Σ_{c<k} w[j·ldw+c]·x[i·ldx+c] for rows j < nr and input rows i < n:
// the f32 matrix-vector kernel of the tier in use, each group of four weight rows (AVX-512) or of
// up to 64 (AVX2, whose kernel takes many rows a call) meeting every input row while it is in L1,
// as MatMul's matrix-vector path does; the columns past the kernel's multiple of 16 (AVX-512) or
// 8 (AVX2) in Go.
func dotRows(dst []float32, ldd int, w []float32, ldw, nr int, x []float32, ldx, n, k int) {
	if nr == 0 || n == 0 {
		return
	}
	if need := (nr-1)*ldw + k; len(w) < need {
		panic(fmt.Sprintf("cpu: dotRows: %d weights, want %d", len(w), need))
	}
	if need := (n-1)*ldx + k; len(x) < need {
		panic(fmt.Sprintf("cpu: dotRows: %d inputs, want %d", len(x), need))
	}
	if need := (n-1)*ldd + nr; len(dst) < need {
		panic(fmt.Sprintf("cpu: dotRows: dst of %d, want %d", len(dst), need))
	}
	kb, tier := bulk(k)
	var out [4]float32
	switch tier {
	case tier512:
		j := 0
		for ; j+4 <= nr; j += 4 {
			for i := range n {
				dot4F32(&w[j*ldw], ldw, &x[i*ldx], kb, &out)
				copy(dst[i*ldd+j:i*ldd+j+4], out[:])
			}
		}
		for ; j < nr; j++ {
			for i := range n {
				dot4F32(&w[j*ldw], 0, &x[i*ldx], kb, &out)
				dst[i*ldd+j] = out[0]
			}
		}
	case tierAVX2:
		for j0 := 0; j0 < nr; j0 += pagedGroup {
			j1 := min(nr, j0+pagedGroup)
			j4 := j0 + (j1-j0)&^3
			for i := range n {
				if j4 > j0 {
					avx2MvF32(&w[j0*ldw], ldw, &x[i*ldx], kb, &dst[i*ldd+j0], j4-j0)
				}
				for j := j4; j < j1; j++ {
					avx2MvF32(&w[j*ldw], 0, &x[i*ldx], kb, &out[0], 4)
					dst[i*ldd+j] = out[0]
				}
			}
		}
	default:
		for i := range n {
			clear(dst[i*ldd : i*ldd+nr])
		}
	}
	addTail(dst, ldd, w, ldw, nr, x, ldx, n, kb, k)
}

// addTail adds Σ_{kb≤c<k} w[j·ldw+c]·x[i·ldx+c] to dst[i·ldd+j] for rows j < nr and input rows
// i < n: the columns past a kernel's multiple, in Go.
func addTail(dst []float32, ldd int, w []float32, ldw, nr int, x []float32, ldx, n, kb, k int) {
	if kb == k {
		return
	}
	for i := range n {
		xi := x[i*ldx : i*ldx+k]
		for j := range nr {
			row := w[j*ldw : j*ldw+k]
			s := dst[i*ldd+j]
			for c := kb; c < k; c++ {
				s += row[c] * xi[c]
			}
			dst[i*ldd+j] = s
		}
	}
}
