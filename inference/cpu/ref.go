package cpu

import (
	"fmt"
	"math"
)

// matMulRef is the portable MatMul: one dot product per (input row, weight row), parallel over
// weight rows. It is the fallback where no SIMD kernel applies and the tests' oracle.
func matMulRef(dst []float32, w *Matrix, x []float32, n int) {
	parallelRows(w.Rows, 1, func(lo, hi int) {
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
	if c%Q8Block != 0 {
		panic(fmt.Sprintf("cpu: Quantize8: %d columns is not a multiple of %d", c, Q8Block))
	}
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

// rowF32Ref is the portable RowF32.
func rowF32Ref(dst []float32, w *Matrix, r int) {
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
