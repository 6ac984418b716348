//go:build !amd64 || purego

package cpu

import "unsafe"

// Without amd64 assembly the AVX2 tier does not exist; these are never called.
const hasAVX2 = false

func avx2Gemm16(m int, panel *float32, x *float32, ldx int, k int, dst *float32, ldd int, acc int) {
	panic("cpu: no SIMD")
}
func avx2Gemv7(x *float32, xstep int, s *float32, srow int, sstep int, steps int, dst *float32, ldd int, acc int, pf unsafe.Pointer, pfn int) {
	panic("cpu: no SIMD")
}
func avx2Gemv7x16(x unsafe.Pointer, xstep int, s *float32, srow int, sstep int, steps int, dst *float32, ldd int, acc int, pf unsafe.Pointer, pfn int, b16 int) {
	panic("cpu: no SIMD")
}
func avx2Gemv7x16N(x unsafe.Pointer, xstep int, s *float32, srow int, sstep int, steps int, dst *float32, ldd int, acc int, pf unsafe.Pointer, pfn int, cols int, b16 int) {
	panic("cpu: no SIMD")
}
func avx2Transpose16(panel *float32, src *float32, lds int, kc int) { panic("cpu: no SIMD") }
func avx2Dot4Q8I(w *int8, ldw int, scales *float32, lds int, xq *int8, xs *float32, k int, out *[4]float32) {
	panic("cpu: no SIMD")
}
func avx2Dot4Q8IFar(w *int8, ldw int, scales *float32, lds int, xq *int8, xs *float32, k int, out *[4]float32) {
	panic("cpu: no SIMD")
}
func avx2Dot4Q8IH(w *int8, ldw int, scales *uint16, lds int, xq *int8, xs *float32, k int, out *[4]float32) {
	panic("cpu: no SIMD")
}
func avx2Dot4Q8IFarH(w *int8, ldw int, scales *uint16, lds int, xq *int8, xs *float32, k int, out *[4]float32) {
	panic("cpu: no SIMD")
}
func avx2Dot4Q8I2H(w *int8, ldw int, scales *uint16, lds int, xq0, xq1 *int8, xs0, xs1 *float32, k int, out0, out1 *[4]float32) {
	panic("cpu: no SIMD")
}
func avx2MvBF16P2(w *uint16, ldw int, x0, x1 *float32, k int, d0, d1 *float32, nrows int) {
	panic("cpu: no SIMD")
}
func avx2Dot4Q8I2(w *int8, ldw int, scales *float32, lds int, xq0, xq1 *int8, xs0, xs1 *float32, k int, out0, out1 *[4]float32) {
	panic("cpu: no SIMD")
}
func avx2Pack8(dst *byte, lddst int, src *byte, idx *[8]int32, n int, abs int) {
	panic("cpu: no SIMD")
}
func avx2QuantX8(xq *int8, xs *float32, x *float32, nblocks int) { panic("cpu: no SIMD") }
func avx2GemmQ8(wp *byte, sp *float32, xq *int8, ldx int, xs *float32, ldq int, nb int, m int, dst *float32, ldd int) {
	panic("cpu: no SIMD")
}
