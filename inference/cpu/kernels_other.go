//go:build !amd64 || purego

package cpu

import "unsafe"

// Without amd64 assembly every kernel is the portable Go code; the functions below are never
// called because hasAVX512 is false.
const (
	hasAVX512 = false
	hasVNNI   = false
	hasBF16   = false
)

// prefetchLines is only a hint to the hardware: without assembly there is nothing to do.
func prefetchLines(p *byte, n int) {}

// prefetchL2 is only a hint to the hardware: without assembly there is nothing to do.
func prefetchL2(p *byte, n int) {}

func scoresT7(qt *float32, k unsafe.Pointer, hd int, dst *float32, ldd int, n int, b16 int, pf unsafe.Pointer, pfn int) {
	panic("cpu: no SIMD")
}
func valuesR7(p *float32, ldp int, v unsafe.Pointer, ldv int, n int, o *float32, ldo int, w int, acc int, b16 int, pf unsafe.Pointer, pfn int) {
	panic("cpu: no SIMD")
}
func gemm4x6F32(w *float32, ldw int, x *float32, ldx int, k int, dst *float32, ldd int, acc int) {
	panic("cpu: no SIMD")
}
func dot4Q8VNNI(w *int8, ldw int, scales *float32, lds int, xq *int8, corr *int32, xs *float32, k int, out *[4]float32, pfd int) {
	panic("cpu: no SIMD")
}
func dot4Q8VNNIFar(w *int8, ldw int, scales *float32, lds int, xq *int8, corr *int32, xs *float32, k int, out *[4]float32) {
	panic("cpu: no SIMD")
}
func dot4Q8VNNIH(w *int8, ldw int, scales *uint16, lds int, xq *int8, corr *int32, xs *float32, k int, out *[4]float32, pfd int) {
	panic("cpu: no SIMD")
}
func dot4Q8VNNIFarH(w *int8, ldw int, scales *uint16, lds int, xq *int8, corr *int32, xs *float32, k int, out *[4]float32) {
	panic("cpu: no SIMD")
}
func pack16(dst *byte, lddst int, src *byte, idx *[16]int32, n int, xor uint32) {
	panic("cpu: no SIMD")
}
func pack16T(dst *byte, lddst int, rows *[16]*byte, n int, xor uint32) { panic("cpu: no SIMD") }
func quantX8(xq *int8, corr *int32, xs *float32, x *float32, nblocks int, blockSums int) {
	panic("cpu: no SIMD")
}
func gemmQ8VNNI(wp *byte, sp *float32, xq *int8, ldx int, xs *float32, ldq int, corr *int32, ldc int, nb int, m int, dst *float32, ldd int, m0, m1 int, acc int) {
	panic("cpu: no SIMD")
}
func cvtX16(dst *uint16, src *float32, n int) { panic("cpu: no SIMD") }
func gemmQ8VNNIH(wp *byte, sp *uint16, xq *int8, ldx int, xs *float32, ldq int, corr *int32, ldc int, nb int, m int, dst *float32, ldd int, m0, m1 int, acc int) {
	panic("cpu: no SIMD")
}
func dot32Q8P(wp *byte, sp *uint16, xq *int8, xs *float32, corr *int32, nb int, out *[32]float32) {
	panic("cpu: no SIMD")
}
func dot64Q8P(wp *byte, ldw int, sp *uint16, lds int, xq *int8, xs *float32, corr *int32, nb int, out *[64]float32) {
	panic("cpu: no SIMD")
}
func dot128Q8P(wp *byte, ldw int, sp *uint16, lds int, xq *int8, xs *float32, corr *int32, nb int, out *[128]float32) {
	panic("cpu: no SIMD")
}
func gemmBF16(wp *uint16, xb *uint16, ldx int, kp int, m int, dst *float32, ldd int, masks uint64, acc int) {
	panic("cpu: no SIMD")
}
