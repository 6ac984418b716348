// Package cpu holds the CPU kernels of the student runtime: matrix-vector and matrix-matrix
// products over f32, bf16, f16 and int8 weights, parallel over rows on a pool of persistent
// workers (SetThreads), and the vector helpers of the forward pass.
//
// The kernel tier is chosen at run time from the CPU (golang.org/x/sys/cpu): AVX-512 (with a
// VNNI int8 kernel where AVX512_VNNI exists), else AVX2+FMA, else portable Go, which is also the
// tests' reference. CHAINEDSQL_NOSIMD=1 (or UseSIMD(false)) forces the Go code and
// CHAINEDSQL_NOAVX512=1 the AVX2 tier. The assembly kernels explain their algorithms in
// kernels_amd64.s and kernels_avx2_amd64.s; docs/BENCHMARKS.md ("CPU kernels") has their figures.
package cpu

import (
	"fmt"
	"math"
)

// DType is the element type of a weight matrix.
type DType int

// Weight element types.
const (
	F32 DType = iota
	BF16
	F16
	Q8 // int8 with one scale per block of Q8Block values of a row (f32 or a half in rows, a half in panels)
)

// Q8Block is the number of int8 values sharing one scale.
const Q8Block = 32

// String returns the dtype's name: f32, bf16, f16 or q8.
func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	case Q8:
		return "q8"
	}
	return fmt.Sprintf("dtype(%d)", int(d))
}

// Matrix is a row-major Rows×Cols weight matrix (PyTorch Linear layout: out × in). Exactly one of
// F32, U16 (bf16 or f16 bits), Q8+Scales or Q8+Scales16 (in panels, or in rows with half scales)
// holds the data.
type Matrix struct {
	DType      DType
	Rows, Cols int
	F32        []float32
	U16        []uint16
	Q8         []int8
	Scales     []float32 // Rows * Cols/Q8Block; nil where Scales16 holds the scales
	// Q8Panels: Q8 and Scales16 hold the rows in panels of 32 (PackQ8Panels) instead of one row
	// after another, the bytes biased by 128; RowF32 and the products read either layout.
	Q8Panels bool
	// Scales16 holds the scales of Q8 as IEEE half bits (Rows * Cols/Q8Block): in panels, and in
	// rows where HalveQ8Scales converted them (in the memory Scales had in either case). The values
	// are Scales' (both convert only scales a half holds); in rows they are laid out as Scales.
	Scales16 []uint16

	// next is the product decode runs after this one (SetDecodeOrder): one matrix, or the
	// matrices of one MatMuls call.
	next []*Matrix
}

// Bytes returns the bytes of w's data as held, which a matrix-vector product streams once: 4 a
// weight in f32, 2 in bf16 or f16, and in q8 1 a weight plus 4 a block scale in f32 (Scales) or
// 2 as a half (Scales16: panels, or rows after HalveQ8Scales).
func (w *Matrix) Bytes() int64 {
	return 4*int64(len(w.F32)) + 2*int64(len(w.U16)) + int64(len(w.Q8)) + 4*int64(len(w.Scales)) + 2*int64(len(w.Scales16))
}

// BF16ToF32 widens bfloat16 bits.
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 rounds to nearest even.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}
