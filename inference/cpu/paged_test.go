package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// toPaged splits the row-major rows×cols matrix a into blocks of block rows (byRows) or columns.
func toPaged(a []float32, rows, cols, block int, byRows bool) *Paged {
	p := &Paged{Rows: rows, Cols: cols, Block: block, ByRows: byRows}
	if byRows {
		for r0 := 0; r0 < rows; r0 += block {
			blk := make([]float32, block*cols)
			for i := range block * cols {
				blk[i] = float32(math.NaN()) // never read past Rows
			}
			copy(blk, a[r0*cols:min(rows, r0+block)*cols])
			p.Blocks = append(p.Blocks, blk)
		}
		return p
	}
	for c0 := 0; c0 < cols; c0 += block {
		blk := make([]float32, rows*block)
		for i := range blk {
			blk[i] = float32(math.NaN())
		}
		for r := range rows {
			copy(blk[r*block:], a[r*cols+c0:r*cols+min(cols, c0+block)])
		}
		p.Blocks = append(p.Blocks, blk)
	}
	return p
}

// toKeyTiles holds the n × hd row-major keys k as Attend reads them: transposed, hd × n,
// in blocks of block positions (a multiple of KeyTile) laid out in tiles (Paged.Tiled); the
// slots past n are NaN, so a read past them shows.
func toKeyTiles(k []float32, n, hd, block int) *Paged {
	p := &Paged{Rows: hd, Cols: n, Block: block, Tiled: true}
	for p0 := 0; p0 < n; p0 += block {
		blk := make([]float32, hd*block)
		for i := range blk {
			blk[i] = float32(math.NaN())
		}
		for j := p0; j < min(n, p0+block); j++ {
			t := j - p0
			for c := range hd {
				blk[(t/KeyTile*hd+c)*KeyTile+t%KeyTile] = k[j*hd+c]
			}
		}
		p.Blocks = append(p.Blocks, blk)
	}
	return p
}

// TestMatMulPaged: a paged matrix, by rows and by columns, gives MatMul's products of the same
// matrix held contiguously, in every kernel tier, for shapes with partial blocks, row counts not
// a multiple of 4 and column counts past the kernels' multiples.
func TestMatMulPaged(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 1))
		for _, sh := range []struct{ rows, cols, block, n int }{
			{2048, 64, 256, 7}, {70, 64, 16, 2}, {33, 16, 8, 1}, {5, 40, 4, 3}, {64, 300, 64, 5}, {1, 8, 1, 1}, {130, 24, 3, 17},
		} {
			for _, byRows := range []bool{true, false} {
				a := randVec(rng, sh.rows*sh.cols)
				x := randVec(rng, sh.n*sh.cols)
				w := &Matrix{DType: F32, Rows: sh.rows, Cols: sh.cols, F32: a}
				want := make([]float32, sh.n*sh.rows)
				matMulRef(want, w, x, sh.n)
				got := make([]float32, sh.n*sh.rows)
				MatMulPaged(got, toPaged(a, sh.rows, sh.cols, sh.block, byRows), x, sh.n)
				for i := range sh.n {
					for r := range sh.rows {
						g, e := got[i*sh.rows+r], want[i*sh.rows+r]
						bound := tol*absDot(w, r, x[i*sh.cols:]) + 1e-6
						if d := math.Abs(float64(g - e)); !(d <= bound) {
							t.Fatalf("%d×%d blocks of %d, byRows=%v, n=%d: dst[%d,%d] = %g, want %g", sh.rows, sh.cols, sh.block, byRows, sh.n, i, r, g, e)
						}
					}
				}
			}
		}
	})
}

// TestMatMulPagedThreads: the results do not depend on the thread count or on how many input rows
// come in one call.
func TestMatMulPagedThreads(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 1))
	const rows, cols, block = 1024, 64, 64
	a := randVec(rng, rows*cols)
	x := randVec(rng, 4*cols)
	for _, byRows := range []bool{true, false} {
		p := toPaged(a, rows, cols, block, byRows)
		if !byRows {
			p = toPaged(randVec(rng, cols*rows), cols, rows, block, false)
			x = randVec(rng, 4*rows)
		}
		run := func(th, n int) []float32 {
			old := Threads()
			SetThreads(th)
			defer SetThreads(old)
			out := make([]float32, 4*p.Rows)
			for i := 0; i < 4; i += n {
				MatMulPaged(out[i*p.Rows:], p, x[i*p.Cols:], n)
			}
			return out
		}
		want := run(1, 4)
		for _, c := range [][2]int{{2, 4}, {3, 1}, {2, 2}} {
			got := run(c[0], c[1])
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("byRows=%v threads %d, %d rows a call: element %d is %g, want %g", byRows, c[0], c[1], i, got[i], want[i])
				}
			}
		}
	}
}

func TestMatMulPagedBadInput(t *testing.T) {
	p := &Paged{Rows: 10, Cols: 16, Block: 4, ByRows: true, Blocks: [][]float32{make([]float32, 64), make([]float32, 64)}}
	for name, f := range map[string]func(){
		"too few blocks": func() { MatMulPaged(make([]float32, 10), p, make([]float32, 16), 1) },
		"short dst": func() {
			MatMulPaged(make([]float32, 9), &Paged{Rows: 10, Cols: 16, Block: 16, ByRows: true, Blocks: [][]float32{make([]float32, 256)}}, make([]float32, 16), 1)
		},
		"short block": func() {
			MatMulPaged(make([]float32, 10), &Paged{Rows: 10, Cols: 16, Block: 16, ByRows: true, Blocks: [][]float32{make([]float32, 100)}}, make([]float32, 16), 1)
		},
		"zero block": func() { MatMulPaged(make([]float32, 10), &Paged{Rows: 10, Cols: 16}, make([]float32, 16), 1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
