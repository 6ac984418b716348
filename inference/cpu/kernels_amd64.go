//go:build amd64 && !purego

package cpu

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// hasAVX512 reports whether the AVX-512 kernels of kernels_amd64.s can run: AVX-512 F, VL, BW
// and DQ enabled by the OS (x/sys/cpu checks XCR0), plus FMA and F16C.
var hasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW &&
	cpu.X86.HasAVX512DQ && cpu.X86.HasFMA && cpu.X86.HasF16C

// hasVNNI reports whether AVX512_VNNI (VPDPBUSD) is there too, for dot4Q8VNNI.
var hasVNNI = hasAVX512 && cpu.X86.HasAVX512VNNI

// hasBF16 reports whether AVX512_BF16 (VDPBF16PS, VCVTNE2PS2BF16) is there too, for the bf16
// matrix-matrix kernel.
var hasBF16 = hasAVX512 && cpu.X86.HasAVX512BF16

// Implemented in kernels_amd64.s; see the comments there. k and n are multiples of 16 (32 for
// Q8); ld* are row strides in elements.

//go:noescape
func prefetchLines(p *byte, n int)

//go:noescape
func prefetchL2(p *byte, n int)

//go:noescape
func scoresT7(qt *float32, k unsafe.Pointer, hd int, dst *float32, ldd int, n int, b16 int, pf unsafe.Pointer, pfn int)

//go:noescape
func valuesR7(p *float32, ldp int, v unsafe.Pointer, ldv int, n int, o *float32, ldo int, w int, acc int, b16 int, pf unsafe.Pointer, pfn int)

//go:noescape
func gemm4x6F32(w *float32, ldw int, x *float32, ldx int, k int, dst *float32, ldd int, acc int)

//go:noescape
func dot4Q8VNNI(w *int8, ldw int, scales *float32, lds int, xq *int8, corr *int32, xs *float32, k int, out *[4]float32, pfd int)

//go:noescape
func dot4Q8VNNIFar(w *int8, ldw int, scales *float32, lds int, xq *int8, corr *int32, xs *float32, k int, out *[4]float32)

//go:noescape
func dot4Q8VNNIH(w *int8, ldw int, scales *uint16, lds int, xq *int8, corr *int32, xs *float32, k int, out *[4]float32, pfd int)

//go:noescape
func dot4Q8VNNIFarH(w *int8, ldw int, scales *uint16, lds int, xq *int8, corr *int32, xs *float32, k int, out *[4]float32)

//go:noescape
func pack16(dst *byte, lddst int, src *byte, idx *[16]int32, n int, xor uint32)

//go:noescape
func pack16T(dst *byte, lddst int, rows *[16]*byte, n int, xor uint32)

//go:noescape
func quantX8(xq *int8, corr *int32, xs *float32, x *float32, nblocks int, blockSums int)

//go:noescape
func gemmQ8VNNI(wp *byte, sp *float32, xq *int8, ldx int, xs *float32, ldq int, corr *int32, ldc int, nb int, m int, dst *float32, ldd int, m0, m1 int, acc int)

//go:noescape
func gemmQ8VNNIH(wp *byte, sp *uint16, xq *int8, ldx int, xs *float32, ldq int, corr *int32, ldc int, nb int, m int, dst *float32, ldd int, m0, m1 int, acc int)

//go:noescape
func cvtX16(dst *uint16, src *float32, n int)

//go:noescape
func gemmBF16(wp *uint16, xb *uint16, ldx int, kp int, m int, dst *float32, ldd int, masks uint64, acc int)

//go:noescape
func dot32Q8P(wp *byte, sp *uint16, xq *int8, xs *float32, corr *int32, nb int, out *[32]float32)

//go:noescape
func dot64Q8P(wp *byte, ldw int, sp *uint16, lds int, xq *int8, xs *float32, corr *int32, nb int, out *[64]float32)

//go:noescape
func dot128Q8P(wp *byte, ldw int, sp *uint16, lds int, xq *int8, xs *float32, corr *int32, nb int, out *[128]float32)
