package cpu

import (
	"fmt"
	"math"
)

// matMulRef is the portable MatMul: one dot product per (input row, weight row), parallel over
// weight rows. It is the fallback where no SIMD kernel applies and the tests' oracle.
func matMulRef(dst []float32, w *Matrix, x []float32, n int) {
	parallelWork(w.Rows*w.Cols*n, w.Rows, 1, func(lo, hi int) {
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
		for b := 0; b < c/Q8Block; b++ {
			var bs float32
			for j := b * Q8Block; j < (b+1)*Q8Block; j++ {
				bs += float32(q8At(w, r, j)) * x[j]
			}
			s += bs * q8ScaleAt(w, r, b)
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

// F32ToF16 rounds f to the nearest IEEE half, ties to even: subnormal halves below 2^-14, ±Inf
// from 65520 on (the tie above the largest half, 65504), NaN a quiet NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	b &^= 1 << 31
	switch {
	case b > 0x7f800000:
		return sign | 0x7e00
	case b >= 0x477ff000: // 65520
		return sign | 0x7c00
	case b >= 0x38800000: // 2^-14: rebias the exponent (127 to 15), round the mantissa to 10 bits
		b -= 112 << 23
		b += 0xfff + (b>>13)&1
		return sign | uint16(b>>13)
	}
	// A multiple of 2^-24 (1024 of them is 2^-14, the smallest normal half): exact in float64.
	return sign | uint16(math.RoundToEven(float64(math.Float32frombits(b))*(1<<24)))
}

// Quantize8 returns w as Q8: per block of Q8Block values of a row, the scale is the least IEEE
// half at or above max|v|/127 (max|v|/127 itself where no half holds it, from max|v| about 8.3e6
// on), so that decode can read the scales in 16 bits (PackQ8Panels), and q = round(v/scale)
// (halves away from zero): every value within half a step of q·scale, |q| <= 127. (llama.cpp's
// q8_0 quantises with max|v|/127 and keeps its nearest half, which loses the block's precision
// where that half is subnormal, max|v| below about 0.0078, and zeroes blocks below about 3.8e-6.)
// Cols must be a multiple of Q8Block. Rows are quantised in parallel (SetThreads).
func Quantize8(w *Matrix) *Matrix {
	return Quantize8Into(make([]int8, w.Rows*w.Cols), make([]float32, w.Rows*w.Cols/Q8Block), w)
}

// Quantize8Into is Quantize8 writing into q (Rows×Cols values, all zero on entry) and scales
// (Rows×Cols/Q8Block values): memory the caller owns, such as huge-page weight buffers.
func Quantize8Into(q8 []int8, scales []float32, w *Matrix) *Matrix {
	c := w.Cols
	if c%Q8Block != 0 {
		panic(fmt.Sprintf("cpu: Quantize8: %d columns is not a multiple of %d", c, Q8Block))
	}
	if err := w.check(); err != nil {
		panic("cpu: Quantize8: " + err.Error())
	}
	if len(q8) != w.Rows*c || len(scales) != w.Rows*c/Q8Block {
		panic(fmt.Sprintf("cpu: Quantize8Into: %d values and %d scales for a %d×%d matrix", len(q8), len(scales), w.Rows, c))
	}
	q := &Matrix{DType: Q8, Rows: w.Rows, Cols: c, Q8: q8, Scales: scales}
	parallelRows(w.Rows, 1, func(lo, hi int) {
		buf := make([]float32, c)
		for r := lo; r < hi; r++ {
			RowF32(buf, w, r)
			for b := 0; b < c/Q8Block; b++ {
				q.Scales[r*(c/Q8Block)+b] = quantizeBlock(q.Q8[r*c+b*Q8Block:r*c+(b+1)*Q8Block], buf[b*Q8Block:(b+1)*Q8Block])
			}
		}
	})
	return q
}

// quantizeBlock writes round(v/s) for the values of blk to dst (which starts zeroed) and returns
// s, the least half at or above max|v|/127 (Quantize8). The maximum compares the bit patterns with the sign cleared (the
// same order as the values for non-NaN floats); the rounding adds ±0.5 in float64, exact for
// |v/s| <= 127, then truncates: math.Round's halves away from zero, without its call and
// without a sign branch (unpredictable on weights: it cost more than the rest together).
func quantizeBlock(dst []int8, blk []float32) float32 {
	var mb uint32
	for _, v := range blk {
		mb = max(mb, math.Float32bits(v)&^(1<<31))
	}
	sc := math.Float32frombits(mb) / 127
	if sc == 0 {
		return 0
	}
	if h := F32ToF16(sc); h < 0x7c00 { // the least half at or above sc, where there is one
		if F16ToF32(h) < sc {
			h++
		}
		if h < 0x7c00 {
			sc = F16ToF32(h)
		}
	}
	dst = dst[:len(blk)]
	for j, v := range blk {
		x := float64(v / sc)
		dst[j] = int8(int32(x + math.Copysign(0.5, x))) // no branch: the signs are random
	}
	return sc
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
		for j := range c {
			dst[j] = float32(q8At(w, r, j)) * q8ScaleAt(w, r, j/Q8Block)
		}
	}
}
