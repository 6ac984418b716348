package cpu

import (
	"math"
	"runtime"
	"sync"
)

var threads = runtime.GOMAXPROCS(0)

// SetThreads sets how many goroutines the kernels split work over (at least 1).
func SetThreads(n int) {
	if n < 1 {
		n = 1
	}
	threads = n
}

// Threads returns the current thread count.
func Threads() int { return threads }

// parallelRows runs f over [0,rows) split into contiguous chunks, one per thread.
func parallelRows(rows int, f func(lo, hi int)) {
	t := threads
	if t > rows {
		t = rows
	}
	if t <= 1 {
		f(0, rows)
		return
	}
	var wg sync.WaitGroup
	chunk := (rows + t - 1) / t
	for lo := 0; lo < rows; lo += chunk {
		hi := min(lo+chunk, rows)
		wg.Add(1)
		go func() { defer wg.Done(); f(lo, hi) }()
	}
	wg.Wait()
}

// MatVec computes dst[r] = Σ_c w[r,c]·x[c] for every row r of w.
func MatVec(dst []float32, w *Matrix, x []float32) {
	MatMul(dst, w, x, 1)
}

// MatMul computes dst[i,r] = Σ_c w[r,c]·x[i,c] for n input rows x (n×Cols, row-major) into
// dst (n×Rows, row-major).
func MatMul(dst []float32, w *Matrix, x []float32, n int) {
	parallelRows(w.Rows, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			for i := 0; i < n; i++ {
				dst[i*w.Rows+r] = dotRow(w, r, x[i*w.Cols:(i+1)*w.Cols])
			}
		}
	})
}

func dotRow(w *Matrix, r int, x []float32) float32 {
	c := w.Cols
	var s float32
	switch w.DType {
	case F32:
		row := w.F32[r*c : (r+1)*c]
		for j, v := range row {
			s += v * x[j]
		}
	case BF16:
		row := w.U16[r*c : (r+1)*c]
		for j, v := range row {
			s += BF16ToF32(v) * x[j]
		}
	case F16:
		row := w.U16[r*c : (r+1)*c]
		for j, v := range row {
			s += F16ToF32(v) * x[j]
		}
	case Q8:
		row := w.Q8[r*c : (r+1)*c]
		sc := w.Scales[r*(c/Q8Block):]
		for b := 0; b < c/Q8Block; b++ {
			var bs float32
			for j := b * Q8Block; j < (b+1)*Q8Block; j++ {
				bs += float32(row[j]) * x[j]
			}
			s += bs * sc[b]
		}
	}
	return s
}

// F16ToF32 widens IEEE half-precision bits.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		f := float32(man) / 1024 / 16384
		if sign != 0 {
			return -f
		}
		return f
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// Quantize8 returns w as Q8: per block of Q8Block values of a row, scale = max|v|/127 and
// q = round(v/scale). Cols must be a multiple of Q8Block.
func Quantize8(w *Matrix) *Matrix {
	c := w.Cols
	q := &Matrix{DType: Q8, Rows: w.Rows, Cols: c, Q8: make([]int8, w.Rows*c), Scales: make([]float32, w.Rows*c/Q8Block)}
	buf := make([]float32, c)
	for r := 0; r < w.Rows; r++ {
		RowF32(buf, w, r)
		for b := 0; b < c/Q8Block; b++ {
			blk := buf[b*Q8Block : (b+1)*Q8Block]
			var m float32
			for _, v := range blk {
				m = max(m, float32(math.Abs(float64(v))))
			}
			sc := m / 127
			q.Scales[r*(c/Q8Block)+b] = sc
			if sc == 0 {
				continue
			}
			for j, v := range blk {
				q.Q8[r*c+b*Q8Block+j] = int8(math.Round(float64(v / sc)))
			}
		}
	}
	return q
}

// RowF32 writes row r of w, widened to f32, into dst (len Cols).
func RowF32(dst []float32, w *Matrix, r int) {
	c := w.Cols
	switch w.DType {
	case F32:
		copy(dst, w.F32[r*c:(r+1)*c])
	case BF16:
		for j, v := range w.U16[r*c : (r+1)*c] {
			dst[j] = BF16ToF32(v)
		}
	case F16:
		for j, v := range w.U16[r*c : (r+1)*c] {
			dst[j] = F16ToF32(v)
		}
	case Q8:
		for j, v := range w.Q8[r*c : (r+1)*c] {
			dst[j] = float32(v) * w.Scales[r*(c/Q8Block)+j/Q8Block]
		}
	}
}
