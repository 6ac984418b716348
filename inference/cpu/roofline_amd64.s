//go:build amd64 && !purego

#include "textflag.h"

// func readSumAVX2(p *uint64, n int) uint64
// The wrapping sum of p[0:n], n a multiple of 32: the memory read kernel of ReadProbe. Two
// streams (the two halves of p), four ymm accumulators each, VPADDQ straight from memory: pure
// loads, 256 bytes an iteration, no dependency between them but the accumulators'. Measured on
// Zen 5 (docs/BENCHMARKS.md, issue 30, "a read kernel that streams"): two streams read 14-21%
// faster than one per thread; zmm, more accumulators or four streams no faster than this.
TEXT ·readSumAVX2(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	MOVQ CX, DX
	SHLQ $2, DX            // n/2 elements: the second stream's offset in bytes
	LEAQ (SI)(DX*1), DI
	SHRQ $5, CX            // iterations: 16 elements of each stream
	JZ   done

loop:
	VPADDQ 0(SI), Y0, Y0
	VPADDQ 0(DI), Y1, Y1
	VPADDQ 32(SI), Y2, Y2
	VPADDQ 32(DI), Y3, Y3
	VPADDQ 64(SI), Y4, Y4
	VPADDQ 64(DI), Y5, Y5
	VPADDQ 96(SI), Y6, Y6
	VPADDQ 96(DI), Y7, Y7
	ADDQ   $128, SI
	ADDQ   $128, DI
	DECQ   CX
	JNZ    loop

done:
	VPADDQ       Y4, Y0, Y0
	VPADDQ       Y5, Y1, Y1
	VPADDQ       Y6, Y2, Y2
	VPADDQ       Y7, Y3, Y3
	VPADDQ       Y2, Y0, Y0
	VPADDQ       Y3, Y1, Y1
	VPADDQ       Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDQ       X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPADDQ       X1, X0, X0
	MOVQ         X0, AX
	VZEROUPPER
	MOVQ         AX, ret+16(FP)
	RET
