//go:build amd64 && !purego

// AVX-512 kernels of the student runtime; the elementwise ones (dotF32 ... cvtQ8) and the f32,
// f16, bf16 and exact-q8 matrix-vector ones (dot4F32 ... dot4Q8) are generated with their AVX2
// forms into kernels_vec_amd64.s by asmgen/vecgen. Why assembly: Go 1.26 has no
// SIMD in the stable language; simd/archsimd exists in go1.26 only behind GOEXPERIMENT=simd,
// which a library cannot require of its users. The portable Go code in ref.go is the fallback
// and the test oracle.
//
// Conventions (all functions ABI0, arguments on the stack):
//   - k (the number of columns a kernel handles) is a multiple of 16 (32 for Q8); the Go caller
//     adds the remaining columns with scalar code.
//   - Only registers AX BX CX DX SI DI R8-R13 and Z0-Z14, Z16-Z31 are used; R14/R15/X15 are left
//     alone (ABIInternal's g, GOT and zero registers).
//   - Every function that uses vector registers ends with VZEROUPPER so later SSE code pays no
//     transition penalty (prefetchLines uses none).
//   - Sums are in f32 with FMA; the order differs from ref.go (16 lanes, then a tree), so results
//     agree with it to rounding (see the tests for the bounds).

#include "textflag.h"
#include "kernels_amd64.h"

// REDUCE4 sums each of the four zmm registers a, b, c, d (whose low ymm halves are ya..yd) into
// X0 = [Σa, Σb, Σc, Σd]. Clobbers Y0-Y4; a..d may be Z0-Z3 but not Z4. VHADDPS has no EVEX
// form, hence the detour via Y0-Y3.
#define REDUCE4(a, b, c, d, ya, yb, yc, yd) \
	VEXTRACTF64X4 $1, a, Y4; \
	VADDPS        ya, Y4, Y0; \
	VEXTRACTF64X4 $1, b, Y4; \
	VADDPS        yb, Y4, Y1; \
	VEXTRACTF64X4 $1, c, Y4; \
	VADDPS        yc, Y4, Y2; \
	VEXTRACTF64X4 $1, d, Y4; \
	VADDPS        yd, Y4, Y3; \
	VHADDPS       Y1, Y0, Y0; \
	VHADDPS       Y3, Y2, Y2; \
	VHADDPS       Y2, Y0, Y0; \
	VEXTRACTF128  $1, Y0, X1; \
	VADDPS        X1, X0, X0

// ZERO4ACC clears the accumulators of the four-row kernels (Z0-Z3).
#define ZERO4ACC \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3

// OUT4 stores X0 to the four floats at *arg (an out+N(FP) argument) and returns; STORE4ACC
// reduces Z0-Z3 into X0 first.
#define OUT4(arg) \
	MOVQ    arg, AX; \
	VMOVUPS X0, (AX); \
	VZEROUPPER; \
	RET

#define STORE4ACC(arg) \
	REDUCE4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3); \
	OUT4(arg)

// GEMMROW accumulates row x (16 columns in zmm xr) times the four weight vectors Z0-Z3 into the
// accumulators a, b, c, d.
#define GEMMROW(xr, a, b, c, d) \
	VFMADD231PS Z0, xr, a; \
	VFMADD231PS Z1, xr, b; \
	VFMADD231PS Z2, xr, c; \
	VFMADD231PS Z3, xr, d

// ZERO2 clears the accumulators a and b (scoresT7, valuesR7).
#define ZERO2(a, b) \
	VPXORD a, a, a; \
	VPXORD b, b, b

// GEMMSTORE reduces the accumulators of one input row into X0 = dst[i, r..r+3], adds the old
// values when K1 is all ones (zero-masked load: K1 = 0 reads nothing and adds 0), stores, and moves
// DX to the next dst row.
#define GEMMSTORE(a, b, c, d, ya, yb, yc, yd) \
	REDUCE4(a, b, c, d, ya, yb, yc, yd); \
	VMOVUPS.Z (DX), K1, X4; \
	VADDPS    X4, X0, X0; \
	VMOVUPS   X0, (DX); \
	ADDQ      BX, DX

// P8ARGS loads the arguments dot64Q8P and dot128Q8P share (defined before any TEXT, so that go
// vet does not check their names against another function's frame): the weights at SI, their
// panel groups' stride in bytes R8; the scales at BX, their stride in bytes R10; xq at DI, xs at
// DX, corr at R12; the blocks CX.
#define P8ARGS \
	MOVQ wp+0(FP), SI; \
	MOVQ ldw+8(FP), R8; \
	MOVQ sp+16(FP), BX; \
	MOVQ lds+24(FP), R10; \
	SHLQ $1, R10; \
	MOVQ xq+32(FP), DI; \
	MOVQ xs+40(FP), DX; \
	MOVQ corr+48(FP), R12; \
	MOVQ nb+56(FP), CX

// func gemm4x6F32(w *float32, ldw int, x *float32, ldx int, k int, dst *float32, ldd int, acc int)
//
// The matrix-matrix micro-kernel: dst[i, r] (+)= Σ_c w[r, c]·x[i, c] for 4 weight rows r and 6
// input rows i, over k columns (a multiple of 16, > 0); ldw, ldx, ldd are row strides in elements.
// The 24 dot products live in 24 zmm accumulators; each step of 16 columns loads 4 weight vectors
// and 6 input vectors (10 loads) for 24 FMAs, so the FMA ports, not loads, are the limit: the
// caller keeps the 6 input rows in L1 and the weight block in L2 (see matMulRange). When acc is 1
// the results are added to dst, else they overwrite it. Z15 is avoided (ABIInternal zero register).
TEXT ·gemm4x6F32(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ ldw+8(FP), R8
	SHLQ $2, R8
	LEAQ (SI)(R8*2), R9
	ADDQ R8, R9
	MOVQ x+16(FP), DI
	MOVQ ldx+24(FP), R10
	SHLQ $2, R10
	LEAQ (DI)(R10*2), R11
	ADDQ R10, R11
	MOVQ k+32(FP), CX
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	VPXORD Z28, Z28, Z28
	VPXORD Z29, Z29, Z29
	VPXORD Z30, Z30, Z30

gemmloop:
	VMOVUPS (SI), Z0
	VMOVUPS (SI)(R8*1), Z1
	VMOVUPS (SI)(R8*2), Z2
	VMOVUPS (R9), Z3
	VMOVUPS (DI), Z4
	VMOVUPS (DI)(R10*1), Z5
	GEMMROW(Z4, Z6, Z7, Z8, Z9)
	VMOVUPS (DI)(R10*2), Z4
	GEMMROW(Z5, Z10, Z11, Z12, Z13)
	VMOVUPS (R11), Z5
	GEMMROW(Z4, Z14, Z16, Z17, Z18)
	VMOVUPS (R11)(R10*1), Z4
	GEMMROW(Z5, Z19, Z20, Z21, Z22)
	VMOVUPS (R11)(R10*2), Z5
	GEMMROW(Z4, Z23, Z24, Z25, Z26)
	GEMMROW(Z5, Z27, Z28, Z29, Z30)
	ADDQ    $64, SI
	ADDQ    $64, R9
	ADDQ    $64, DI
	ADDQ    $64, R11
	SUBQ    $16, CX
	JGT     gemmloop

	MOVQ  acc+56(FP), AX
	NEGQ  AX
	KMOVW AX, K1
	MOVQ  dst+40(FP), DX
	MOVQ  ldd+48(FP), BX
	SHLQ  $2, BX
	GEMMSTORE(Z6, Z7, Z8, Z9, Y6, Y7, Y8, Y9)
	GEMMSTORE(Z10, Z11, Z12, Z13, Y10, Y11, Y12, Y13)
	GEMMSTORE(Z14, Z16, Z17, Z18, Y14, Y16, Y17, Y18)
	GEMMSTORE(Z19, Z20, Z21, Z22, Y19, Y20, Y21, Y22)
	GEMMSTORE(Z23, Z24, Z25, Z26, Y23, Y24, Y25, Y26)
	GEMMSTORE(Z27, Z28, Z29, Z30, Y27, Y28, Y29, Y30)
	VZEROUPPER
	RET

// Q8ROW adds one row's 64 int8 weights at w (two blocks of 32; their scales at sc) to acc:
// t = w XOR 0x80 = w+128 as unsigned bytes; VPDPBUSD adds Σ (w+128)·xq over each group of four
// bytes to the lane's -128·Σ xq (the correction, loaded from R12), leaving Σ w·xq exactly in
// int32; that is widened to f32 and added times the lane's weight scale × x scale (lanes 0-7 are
// the first block, 8-15 the second: a broadcast of sc and a masked broadcast of sc4, the second
// block's scale, into lanes 8-15 (K1) build the weight scales).
#define Q8ROW(w, sc, sc4, acc, t, u, v) \
	VPXORD         w, Z20, t; \
	VMOVDQU32      (R12), u; \
	VPDPBUSD       (DI), t, u; \
	VCVTDQ2PS      u, u; \
	VBROADCASTSS   sc, v; \
	VBROADCASTSS   sc4, K1, v; \
	VMULPS         Z5, v, v; \
	VFMADD231PS    v, u, acc

// Q8VNNISTEP is one step of both kernels' loops: 64 columns of the four rows (Q8ROW each, with
// the x scales in Z5), then every stream moves on by 64 columns.
#define Q8VNNISTEP \
	VMOVUPS (DX), Z5; \
	Q8ROW((SI), (BX), 4(BX), Z0, Z6, Z7, Z8); \
	Q8ROW((SI)(R8*1), (BX)(R10*1), 4(BX)(R10*1), Z1, Z9, Z10, Z11); \
	Q8ROW((SI)(R8*2), (BX)(R10*2), 4(BX)(R10*2), Z2, Z12, Z13, Z14); \
	Q8ROW((R9), (R11), 4(R11), Z3, Z16, Z17, Z18); \
	ADDQ    $64, SI; \
	ADDQ    $64, R9; \
	ADDQ    $8, BX; \
	ADDQ    $8, R11; \
	ADDQ    $64, DI; \
	ADDQ    $64, R12; \
	ADDQ    $64, DX

// func dot4Q8VNNI(w *int8, ldw int, scales *float32, lds int, xq *int8, corr *int32, xs *float32, k int, out *[4]float32, pfd int)
//
// The Q8 matrix-vector kernel with AVX512_VNNI: four rows of int8 weights (one f32 scale per
// block of 32 of a row; ldw, lds in elements) against x quantised to int8 per block of 32
// (see prepareVec: xq, its scale per output lane xs, and the correction -128·Σ xq per lane); k
// a multiple of 64. VPDPBUSD does 64 multiply-adds in one op, where widening each int8 to f32
// (dot4Q8) takes three ops per 16, so the kernel issues few enough instructions to keep many
// DRAM requests in flight; like dot4BF16P it prefetches into L2, pfd bytes ahead of row 0 (8 KiB;
// 16 KiB in the zen5 decode plan; Q8 rows are 896 bytes at 896 columns). VPDPBUSD multiplies unsigned by signed bytes; biasing the weights
// by 128 (an XOR) and subtracting 128·Σ xq keeps every int8 value, -128 included, exact. The
// price is the rounding of x to 8 bits per block, as in llama.cpp's q8_0 path; the tests bound
// that error.
TEXT ·dot4Q8VNNI(SB), NOSPLIT, $0-80
	Q8VNNIARGS
	MOVQ  pfd+72(FP), R13
	ADDQ  SI, R13
	TESTQ CX, CX
	JLE   q8vdone

q8vloop:
	PREFETCHT2 (R13)
	PREFETCHT2 64(R13)
	PREFETCHT2 128(R13)
	PREFETCHT2 192(R13)
	Q8VNNISTEP
	ADDQ       $256, R13
	SUBQ       $64, CX
	JGT        q8vloop

q8vdone:
	STORE4ACC(out+64(FP))

// func dot4Q8VNNIFar(w *int8, ldw int, scales *float32, lds int, xq *int8, corr *int32, xs *float32, k int, out *[4]float32)
//
// dot4Q8VNNI for four rows far apart (ldw elements between them: the quarter streams of q8
// decode in the zen5 plan, matVecQuarters) and without software prefetch: each row is its own
// sequential stream across calls, which the hardware prefetcher follows. The same arithmetic
// per row as dot4Q8VNNI, so the same results to the bit.
TEXT ·dot4Q8VNNIFar(SB), NOSPLIT, $0-72
	Q8VNNIARGS
	TESTQ CX, CX
	JLE   q8fdone

q8floop:
	Q8VNNISTEP
	SUBQ $64, CX
	JGT  q8floop

q8fdone:
	STORE4ACC(out+64(FP))

// Q8ROWH is Q8ROW for scales held as IEEE halves (Matrix.Scales16 in rows): the two blocks'
// halves at sc and sc2 are broadcast as words into the ymm h (the first into all 16 words, the
// second into words 8-15 under K1) and widened exactly into v (VCVTPH2PS), the weight scales
// Q8ROW builds from the same values in f32; h is t's lower half, free once VPDPBUSD has read t.
#define Q8ROWH(w, sc, sc2, acc, t, h, u, v) \
	VPXORD         w, Z20, t; \
	VMOVDQU32      (R12), u; \
	VPDPBUSD       (DI), t, u; \
	VCVTDQ2PS      u, u; \
	VPBROADCASTW   sc, h; \
	VPBROADCASTW   sc2, K1, h; \
	VCVTPH2PS      h, v; \
	VMULPS         Z5, v, v; \
	VFMADD231PS    v, u, acc

// Q8VNNISTEPH is Q8VNNISTEP over half scales (Q8ROWH; two halves, 4 bytes, a row and step).
#define Q8VNNISTEPH \
	VMOVUPS (DX), Z5; \
	Q8ROWH((SI), (BX), 2(BX), Z0, Z6, Y6, Z7, Z8); \
	Q8ROWH((SI)(R8*1), (BX)(R10*1), 2(BX)(R10*1), Z1, Z9, Y9, Z10, Z11); \
	Q8ROWH((SI)(R8*2), (BX)(R10*2), 2(BX)(R10*2), Z2, Z12, Y12, Z13, Z14); \
	Q8ROWH((R9), (R11), 2(R11), Z3, Z16, Y16, Z17, Z18); \
	ADDQ    $64, SI; \
	ADDQ    $64, R9; \
	ADDQ    $4, BX; \
	ADDQ    $4, R11; \
	ADDQ    $64, DI; \
	ADDQ    $64, R12; \
	ADDQ    $64, DX

// func dot4Q8VNNIH(w *int8, ldw int, scales *uint16, lds int, xq *int8, corr *int32, xs *float32, k int, out *[4]float32, pfd int)
//
// dot4Q8VNNI for scales held as IEEE halves (Matrix.Scales16 in rows; lds in halves), widened
// exactly where dot4Q8VNNI broadcasts its f32 scales (Q8ROWH: one instruction more per row and
// 64 columns), so the same results to the bit over the same scale values; the same prefetch.
TEXT ·dot4Q8VNNIH(SB), NOSPLIT, $0-80
	Q8VNNIARGSH
	MOVQ  pfd+72(FP), R13
	ADDQ  SI, R13
	TESTQ CX, CX
	JLE   q8vhdone

q8vhloop:
	PREFETCHT2 (R13)
	PREFETCHT2 64(R13)
	PREFETCHT2 128(R13)
	PREFETCHT2 192(R13)
	Q8VNNISTEPH
	ADDQ       $256, R13
	SUBQ       $64, CX
	JGT        q8vhloop

q8vhdone:
	STORE4ACC(out+64(FP))

// func dot4Q8VNNIFarH(w *int8, ldw int, scales *uint16, lds int, xq *int8, corr *int32, xs *float32, k int, out *[4]float32)
//
// dot4Q8VNNIFar for scales held as halves (Q8ROWH): dot4Q8VNNIFar's results to the bit.
TEXT ·dot4Q8VNNIFarH(SB), NOSPLIT, $0-72
	Q8VNNIARGSH
	TESTQ CX, CX
	JLE   q8fhdone

q8fhloop:
	Q8VNNISTEPH
	SUBQ $64, CX
	JGT  q8fhloop

q8fhdone:
	STORE4ACC(out+64(FP))

// ---------------------------------------------------------------------------------------------
// Matrix-matrix kernels on int8 and bf16 dot products (prefill; see prefill.go). The weights of
// a few 16-row panels are packed so that one 64-byte vector holds four bytes (4 int8 or 2 bf16
// columns) of each of 16 rows (pack16); a 4-byte group of one input row is broadcast to all 16
// lanes, so one VPDPBUSD does 64 multiply-adds into the 16 rows' sums and one VDPBF16PS 32.
// ---------------------------------------------------------------------------------------------

// func pack16(dst *byte, lddst int, src *byte, idx *[16]int32, n int, xor uint32)
//
// Packs 16 rows for the matrix-matrix kernels: for g < n, the 64 bytes at dst + g·lddst are the
// four bytes at src + 4·(idx[j] + g) of each row j (idx: the rows' offsets from src in 4-byte
// units), XORed with xor. One gather per output vector: packing is one pass over the weights per
// product, against the n/6 passes of the kernels over the packed copy.
TEXT ·pack16(SB), NOSPLIT, $0-44
	MOVQ         dst+0(FP), DI
	MOVQ         lddst+8(FP), DX
	MOVQ         src+16(FP), SI
	MOVQ         idx+24(FP), AX
	VMOVDQU32    (AX), Z1
	MOVQ         n+32(FP), CX
	MOVL         xor+40(FP), AX
	VPBROADCASTD AX, Z2
	TESTQ        CX, CX
	JLE          packdone

packloop:
	KXNORW     K1, K1, K1
	VPXORD     Z0, Z0, Z0
	VPGATHERDD (SI)(Z1*4), K1, Z0
	VPXORD     Z2, Z0, Z0
	VMOVDQU32  Z0, (DI)
	ADDQ       $4, SI
	ADDQ       DX, DI
	DECQ       CX
	JNZ        packloop

packdone:
	VZEROUPPER
	RET

DATA q8xc<>+0(SB)/4, $0x7fffffff  // |x| mask
DATA q8xc<>+4(SB)/4, $0x42fe0000  // 127
DATA q8xc<>+8(SB)/4, $0x0da24260  // 1e-30, the smallest block maximum
DATA q8xc<>+12(SB)/4, $0x01010101 // four unsigned byte ones
GLOBL q8xc<>(SB), RODATA|NOPTR, $16

// func quantX8(xq *int8, corr *int32, xs *float32, x *float32, nblocks int, blockSums int)
//
// quantizeX in AVX-512 (with VNNI): per block of 32 values, m = max|x| (at least 1e-30, so an
// all-zero block gives q = 0 and no NaN), q = x·(127/m) rounded to nearest (even on ties), the
// scale m/127 stored for each of the block's 8 int32 lanes, and corr = -128·Σ of each lane's 4
// bytes (a VPDPBUSD of byte ones against q); with blockSums = 1, corr gets one value per block
// instead, -128·Σ of its 32 bytes (gemmQ8VNNI's correction).
TEXT ·quantX8(SB), NOSPLIT, $0-48
	MOVQ         xq+0(FP), DI
	MOVQ         corr+8(FP), R8
	MOVQ         xs+16(FP), R9
	MOVQ         x+24(FP), SI
	MOVQ         nblocks+32(FP), CX
	MOVQ         blockSums+40(FP), BX
	VPBROADCASTD q8xc<>+0(SB), Z20
	VBROADCASTSS q8xc<>+4(SB), Z21
	VBROADCASTSS q8xc<>+8(SB), Z22
	VPBROADCASTD q8xc<>+12(SB), Y23
	VPXORD       Z24, Z24, Z24
	TESTQ        CX, CX
	JLE          qxdone

qxloop:
	VMOVUPS     (SI), Z0
	VMOVUPS     64(SI), Z1
	VPANDD      Z20, Z0, Z2
	VPANDD      Z20, Z1, Z3
	VMAXPS      Z3, Z2, Z2
	VSHUFF32X4  $0x4e, Z2, Z2, Z3
	VMAXPS      Z3, Z2, Z2
	VSHUFF32X4  $0xb1, Z2, Z2, Z3
	VMAXPS      Z3, Z2, Z2
	VPERMILPS   $0x4e, Z2, Z3
	VMAXPS      Z3, Z2, Z2
	VPERMILPS   $0xb1, Z2, Z3
	VMAXPS      Z3, Z2, Z2
	VMAXPS      Z22, Z2, Z2
	VDIVPS      Z2, Z21, Z4
	VDIVPS      Z21, Z2, Z5
	VMULPS      Z4, Z0, Z0
	VMULPS      Z4, Z1, Z1
	VCVTPS2DQ   Z0, Z0
	VCVTPS2DQ   Z1, Z1
	VPMOVSDB    Z0, X0
	VPMOVSDB    Z1, X1
	VINSERTI128 $1, X1, Y0, Y0
	VMOVDQU     Y0, (DI)
	VPXORD      Y6, Y6, Y6
	VPDPBUSD    Y0, Y23, Y6
	VPSLLD      $7, Y6, Y6
	VPSUBD      Y6, Y24, Y6
	VMOVUPS     Y5, (R9)
	TESTQ       BX, BX
	JNZ         qxsum
	VMOVDQU     Y6, (R8)
	ADDQ        $32, R8
	JMP         qxnext

qxsum:
	VEXTRACTI128 $1, Y6, X7
	VPADDD       X7, X6, X6
	VPSHUFD      $0x4e, X6, X7
	VPADDD       X7, X6, X6
	VPSHUFD      $0xb1, X6, X7
	VPADDD       X7, X6, X6
	VMOVD        X6, (R8)
	ADDQ         $4, R8

qxnext:
	ADDQ        $128, SI
	ADDQ        $32, DI
	ADDQ        $32, R9
	DECQ        CX
	JNZ         qxloop

qxdone:
	VZEROUPPER
	RET

// ZERO12ACC clears Z0-Z11 and ZERO12HI Z16-Z27 (the matrix-matrix kernels' accumulators).
#define ZERO12ACC \
	ZERO4ACC; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7; \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11

#define ZERO12HI \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19; \
	VPXORD Z20, Z20, Z20; \
	VPXORD Z21, Z21, Z21; \
	VPXORD Z22, Z22, Z22; \
	VPXORD Z23, Z23, Z23; \
	VPXORD Z24, Z24, Z24; \
	VPXORD Z25, Z25, Z25; \
	VPXORD Z26, Z26, Z26; \
	VPXORD Z27, Z27, Z27

// Q8GI starts a block for one input row: its int32 sums of both panels (ia, ib) begin at the
// row's bias correction for the block, -128·Σ of its 32 bytes (ca). (Two broadcasts from
// memory instead of the copy: 250-261 vs 275-292 GMAC/s in BenchmarkKernelRate, the loads being
// the tighter resource.)
#define Q8GI(ca, ia, ib) \
	VPBROADCASTD ca, ia; \
	VMOVDQA32    ia, ib

// Q8GG is one group of four columns: the two panels' 64-byte weight vectors at wa and wb (Z12,
// Z13), then each of the six input rows' four bytes at xo, broadcast once into a register (Z30,
// Z31, Z28, Z29, Z14: free until the block's end) and met by both.
#define Q8GG(wa, wb, xo) \
	VMOVDQU32    wa(SI), Z12; \
	VMOVDQU32    wb(SI), Z13; \
	VPBROADCASTD xo(DI), Z30; \
	VPDPBUSD     Z30, Z12, Z16; \
	VPDPBUSD     Z30, Z13, Z17; \
	VPBROADCASTD xo(DI)(R8*1), Z31; \
	VPDPBUSD     Z31, Z12, Z18; \
	VPDPBUSD     Z31, Z13, Z19; \
	VPBROADCASTD xo(DI)(R8*2), Z28; \
	VPDPBUSD     Z28, Z12, Z20; \
	VPDPBUSD     Z28, Z13, Z21; \
	VPBROADCASTD xo(R9), Z29; \
	VPDPBUSD     Z29, Z12, Z22; \
	VPDPBUSD     Z29, Z13, Z23; \
	VPBROADCASTD xo(R9)(R8*1), Z14; \
	VPDPBUSD     Z14, Z12, Z24; \
	VPDPBUSD     Z14, Z13, Z25; \
	VPBROADCASTD xo(R9)(R8*2), Z30; \
	VPDPBUSD     Z30, Z12, Z26; \
	VPDPBUSD     Z30, Z13, Z27

// Q8GF ends a block for one input row: its exact int32 sums (ia, ib) become f32 and are added
// to the row's accumulators (fa, fb) times the weight scales of the block (Z28, Z29: the 16
// rows of each panel) times the row's x scale (xsa, broadcast).
#define Q8GF(xsa, ia, ib, fa, fb) \
	VCVTDQ2PS   ia, ia; \
	VMULPS.BCST xsa, Z28, Z30; \
	VFMADD231PS Z30, ia, fa; \
	VCVTDQ2PS   ib, ib; \
	VMULPS.BCST xsa, Z29, Z31; \
	VFMADD231PS Z31, ib, fb

// Q8GS stores one input row's 32 results (masks K1, K2; with acc, the old values loaded under
// K5, K6 are added first) and moves DX to the next row, or leaves after the m-th row.
#define Q8GS(fa, fb) \
	VMOVUPS.Z (DX), K5, Z30; \
	VADDPS    Z30, fa, fa; \
	VMOVUPS   fa, K1, (DX); \
	VMOVUPS.Z 64(DX), K6, Z31; \
	VADDPS    Z31, fb, fb; \
	VMOVUPS   fb, K2, 64(DX); \
	DECQ      AX; \
	JZ        q8gdone; \
	ADDQ      BX, DX

// func gemmQ8VNNI(wp *byte, sp *float32, xq *int8, ldx int, xs *float32, ldq int, corr *int32, ldc int, nb int, m int, dst *float32, ldd int, m0, m1 int, acc int)
//
// The int8 matrix-matrix micro-kernel: dst[i, j] (+)= Σ_c w[j, c]·x[i, c] for 32 weight rows j
// (two packed 16-row panels) and m (1..6) input rows i, over nb blocks of 32 columns. wp holds
// the weights packed by pack16, the two panels interleaved (128 bytes per group of four
// columns), each byte XORed with 0x80: VPDPBUSD multiplies unsigned by signed bytes, and w+128 is
// unsigned; the input row's correction -128·Σ x (corr) starts each block's int32 sums, so they
// are Σ w·x exactly (every int8 value, -128 included). sp holds the panels' scales, 128 bytes
// per block. The input rows are quantised by quantX8 (xq rows ldx bytes apart; xs, ldq lanes
// apart, each block's scale at its first lane; corr, ldc apart, one correction per block); six rows are read
// even when m is less (the caller pads). Per block and row the int32 sums are widened and added
// times the weight scales × x scale; 12 int32 and 12 f32 accumulators stay in registers. Eight
// VPDPBUSD per 512 multiply-adds where f32 FMA needs 32. m0, m1 mask the lanes stored of each
// panel (rows past the caller's range); acc = 1 adds to dst.
TEXT ·gemmQ8VNNI(SB), NOSPLIT, $0-120
	Q8GEMMPTRS
	MOVQ   corr+48(FP), R10
	MOVQ   ldc+56(FP), AX
	SHLQ   $2, AX
	ROW3(R10, AX, R11)
	MOVQ   nb+64(FP), CX
	ZERO12ACC

q8gblk:
	Q8GI((R10), Z16, Z17)
	Q8GI((R10)(AX*1), Z18, Z19)
	Q8GI((R10)(AX*2), Z20, Z21)
	Q8GI((R11), Z22, Z23)
	Q8GI((R11)(AX*1), Z24, Z25)
	Q8GI((R11)(AX*2), Z26, Z27)

	Q8GG(0, 64, 0)
	Q8GG(128, 192, 4)
	Q8GG(256, 320, 8)
	Q8GG(384, 448, 12)
	Q8GG(512, 576, 16)
	Q8GG(640, 704, 20)
	Q8GG(768, 832, 24)
	Q8GG(896, 960, 28)
	VMOVUPS (BX), Z28
	VMOVUPS 64(BX), Z29
	Q8GF((DX), Z16, Z17, Z0, Z1)
	Q8GF((DX)(R13*1), Z18, Z19, Z2, Z3)
	Q8GF((DX)(R13*2), Z20, Z21, Z4, Z5)
	Q8GF((R12), Z22, Z23, Z6, Z7)
	Q8GF((R12)(R13*1), Z24, Z25, Z8, Z9)
	Q8GF((R12)(R13*2), Z26, Z27, Z10, Z11)
	ADDQ $1024, SI
	ADDQ $128, BX
	ADDQ $32, DI
	ADDQ $32, R9
	ADDQ $32, DX
	ADDQ $32, R12
	ADDQ $4, R10
	ADDQ $4, R11
	DECQ CX
	JNZ  q8gblk

	MOVQ  m0+96(FP), AX
	KMOVW AX, K1
	MOVQ  m1+104(FP), AX
	KMOVW AX, K2
	MOVQ  acc+112(FP), AX
	NEGQ  AX
	KMOVW AX, K4
	KANDW K1, K4, K5
	KANDW K2, K4, K6
	MOVQ  dst+80(FP), DX
	MOVQ  ldd+88(FP), BX
	SHLQ  $2, BX
	MOVQ  m+72(FP), AX
	Q8GS(Z0, Z1)
	Q8GS(Z2, Z3)
	Q8GS(Z4, Z5)
	Q8GS(Z6, Z7)
	Q8GS(Z8, Z9)
	Q8GS(Z10, Z11)

q8gdone:
	VZEROUPPER
	RET

// func gemmQ8VNNIH(wp *byte, sp *uint16, xq *int8, ldx int, xs *float32, ldq int, corr *int32, ldc int, nb int, m int, dst *float32, ldd int, m0, m1 int, acc int)
//
// gemmQ8VNNI for weights in panels at load (Matrix.Q8Panels), whose scales are IEEE halves,
// 64 bytes per block (Matrix.Scales16), each widened exactly by VCVTPH2PS: the results of
// gemmQ8VNNI over the same scales in f32.
TEXT ·gemmQ8VNNIH(SB), NOSPLIT, $0-120
	Q8GEMMPTRS
	MOVQ   corr+48(FP), R10
	MOVQ   ldc+56(FP), AX
	SHLQ   $2, AX
	ROW3(R10, AX, R11)
	MOVQ   nb+64(FP), CX
	ZERO12ACC

q8gblk:
	Q8GI((R10), Z16, Z17)
	Q8GI((R10)(AX*1), Z18, Z19)
	Q8GI((R10)(AX*2), Z20, Z21)
	Q8GI((R11), Z22, Z23)
	Q8GI((R11)(AX*1), Z24, Z25)
	Q8GI((R11)(AX*2), Z26, Z27)

	Q8GG(0, 64, 0)
	Q8GG(128, 192, 4)
	Q8GG(256, 320, 8)
	Q8GG(384, 448, 12)
	Q8GG(512, 576, 16)
	Q8GG(640, 704, 20)
	Q8GG(768, 832, 24)
	Q8GG(896, 960, 28)
	VCVTPH2PS (BX), Z28
	VCVTPH2PS 32(BX), Z29
	Q8GF((DX), Z16, Z17, Z0, Z1)
	Q8GF((DX)(R13*1), Z18, Z19, Z2, Z3)
	Q8GF((DX)(R13*2), Z20, Z21, Z4, Z5)
	Q8GF((R12), Z22, Z23, Z6, Z7)
	Q8GF((R12)(R13*1), Z24, Z25, Z8, Z9)
	Q8GF((R12)(R13*2), Z26, Z27, Z10, Z11)
	ADDQ $1024, SI
	ADDQ $64, BX
	ADDQ $32, DI
	ADDQ $32, R9
	ADDQ $32, DX
	ADDQ $32, R12
	ADDQ $4, R10
	ADDQ $4, R11
	DECQ CX
	JNZ  q8gblk

	MOVQ  m0+96(FP), AX
	KMOVW AX, K1
	MOVQ  m1+104(FP), AX
	KMOVW AX, K2
	MOVQ  acc+112(FP), AX
	NEGQ  AX
	KMOVW AX, K4
	KANDW K1, K4, K5
	KANDW K2, K4, K6
	MOVQ  dst+80(FP), DX
	MOVQ  ldd+88(FP), BX
	SHLQ  $2, BX
	MOVQ  m+72(FP), AX
	Q8GS(Z0, Z1)
	Q8GS(Z2, Z3)
	Q8GS(Z4, Z5)
	Q8GS(Z6, Z7)
	Q8GS(Z8, Z9)
	Q8GS(Z10, Z11)

q8gdone:
	VZEROUPPER
	RET

// func cvtX16(dst *uint16, src *float32, n int)   (n a multiple of 32)
//
// Rounds f32 to bf16 (nearest even) with AVX512_BF16's VCVTNE2PS2BF16, 32 per step: the input
// rows of the bf16 matrix-matrix kernel. (Go's assembler has no AVX512_BF16 mnemonics: the
// instructions are written as bytes, each with its mnemonic in a comment.)
TEXT ·cvtX16(SB), NOSPLIT, $0-24
	MOVQ  dst+0(FP), DI
	MOVQ  src+8(FP), SI
	MOVQ  n+16(FP), CX
	TESTQ CX, CX
	JLE   cvtxdone

cvtxloop:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	BYTE $0x62; BYTE $0xf2; BYTE $0x77; BYTE $0x48; BYTE $0x72; BYTE $0xd0 // VCVTNE2PS2BF16 Z0, Z1, Z2
	VMOVDQU32 Z2, (DI)
	ADDQ      $128, SI
	ADDQ      $64, DI
	SUBQ      $32, CX
	JGT       cvtxloop

cvtxdone:
	VZEROUPPER
	RET

// BFGS stores one input row's 64 results (four panels; masks K1-K4) and moves DX to the next
// row, or leaves after the m-th row; BFGA adds the old values first.
#define BFGS(a, b, c, d) \
	VMOVUPS a, K1, (DX); \
	VMOVUPS b, K2, 64(DX); \
	VMOVUPS c, K3, 128(DX); \
	VMOVUPS d, K4, 192(DX); \
	DECQ    AX; \
	JZ      bfgdone; \
	ADDQ    BX, DX

#define BFGA(a, b, c, d) \
	VADDPS.Z (DX), a, K1, a; \
	VADDPS.Z 64(DX), b, K2, b; \
	VADDPS.Z 128(DX), c, K3, c; \
	VADDPS.Z 192(DX), d, K4, d; \
	BFGS(a, b, c, d)

// DPBF_x_w_a is VDPBF16PS Zx, Zw, Za (Za += the pairwise products of Zw and Zx as bf16, summed
// in f32), as bytes: Go's assembler has no AVX512_BF16 mnemonics.

#define DPBF_30_12_0 BYTE $0x62; BYTE $0x92; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xc6
#define DPBF_30_13_1 BYTE $0x62; BYTE $0x92; BYTE $0x16; BYTE $0x48; BYTE $0x52; BYTE $0xce
#define DPBF_30_14_2 BYTE $0x62; BYTE $0x92; BYTE $0x0e; BYTE $0x48; BYTE $0x52; BYTE $0xd6
#define DPBF_30_28_3 BYTE $0x62; BYTE $0x92; BYTE $0x1e; BYTE $0x40; BYTE $0x52; BYTE $0xde
#define DPBF_31_12_4 BYTE $0x62; BYTE $0x92; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xe7
#define DPBF_31_13_5 BYTE $0x62; BYTE $0x92; BYTE $0x16; BYTE $0x48; BYTE $0x52; BYTE $0xef
#define DPBF_31_14_6 BYTE $0x62; BYTE $0x92; BYTE $0x0e; BYTE $0x48; BYTE $0x52; BYTE $0xf7
#define DPBF_31_28_7 BYTE $0x62; BYTE $0x92; BYTE $0x1e; BYTE $0x40; BYTE $0x52; BYTE $0xff
#define DPBF_30_12_8 BYTE $0x62; BYTE $0x12; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xc6
#define DPBF_30_13_9 BYTE $0x62; BYTE $0x12; BYTE $0x16; BYTE $0x48; BYTE $0x52; BYTE $0xce
#define DPBF_30_14_10 BYTE $0x62; BYTE $0x12; BYTE $0x0e; BYTE $0x48; BYTE $0x52; BYTE $0xd6
#define DPBF_30_28_11 BYTE $0x62; BYTE $0x12; BYTE $0x1e; BYTE $0x40; BYTE $0x52; BYTE $0xde
#define DPBF_31_12_16 BYTE $0x62; BYTE $0x82; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xc7
#define DPBF_31_13_17 BYTE $0x62; BYTE $0x82; BYTE $0x16; BYTE $0x48; BYTE $0x52; BYTE $0xcf
#define DPBF_31_14_18 BYTE $0x62; BYTE $0x82; BYTE $0x0e; BYTE $0x48; BYTE $0x52; BYTE $0xd7
#define DPBF_31_28_19 BYTE $0x62; BYTE $0x82; BYTE $0x1e; BYTE $0x40; BYTE $0x52; BYTE $0xdf
#define DPBF_30_12_20 BYTE $0x62; BYTE $0x82; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xe6
#define DPBF_30_13_21 BYTE $0x62; BYTE $0x82; BYTE $0x16; BYTE $0x48; BYTE $0x52; BYTE $0xee
#define DPBF_30_14_22 BYTE $0x62; BYTE $0x82; BYTE $0x0e; BYTE $0x48; BYTE $0x52; BYTE $0xf6
#define DPBF_30_28_23 BYTE $0x62; BYTE $0x82; BYTE $0x1e; BYTE $0x40; BYTE $0x52; BYTE $0xfe
#define DPBF_31_12_24 BYTE $0x62; BYTE $0x02; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xc7
#define DPBF_31_13_25 BYTE $0x62; BYTE $0x02; BYTE $0x16; BYTE $0x48; BYTE $0x52; BYTE $0xcf
#define DPBF_31_14_26 BYTE $0x62; BYTE $0x02; BYTE $0x0e; BYTE $0x48; BYTE $0x52; BYTE $0xd7
#define DPBF_31_28_27 BYTE $0x62; BYTE $0x02; BYTE $0x1e; BYTE $0x40; BYTE $0x52; BYTE $0xdf

// BFGROW broadcasts one input row's pair of bf16 values at xa into xr and adds its products
// with the four panels' vectors (Z12, Z13, Z14, Z28) to the row's accumulators (d0-d3, each a
// DPBF macro).
#define BFGROW(xa, xr, d0, d1, d2, d3) \
	VPBROADCASTD xa, xr; \
	d0; \
	d1; \
	d2; \
	d3

// func gemmBF16(wp *uint16, xb *uint16, ldx int, kp int, m int, dst *float32, ldd int, masks uint64, acc int)
//
// The bf16 matrix-matrix micro-kernel (AVX512_BF16): dst[i, j] (+)= Σ_c w[j, c]·x[i, c] for 64
// weight rows j (four packed 16-row panels, interleaved: 256 bytes per pair of columns) and m
// (1..6) input rows i of bf16 values (xb, ldx elements apart; six rows are read, the caller
// pads) over kp column pairs. Each pair of one input row is broadcast and meets the four panels
// in VDPBF16PS (32 multiply-adds, products exact, sums in f32): 24 accumulators, 10 loads per
// 24 ops. masks holds the four panels' 16-bit store masks; acc = 1 adds to dst.
TEXT ·gemmBF16(SB), NOSPLIT, $0-72
	MOVQ   wp+0(FP), SI
	MOVQ   xb+8(FP), DI
	MOVQ   ldx+16(FP), R8
	SHLQ   $1, R8
	ROW3(DI, R8, R9)
	MOVQ   kp+24(FP), CX
	ZERO12ACC
	ZERO12HI


bfgloop:
	VMOVDQU32 (SI), Z12
	VMOVDQU32 64(SI), Z13
	VMOVDQU32 128(SI), Z14
	VMOVDQU32 192(SI), Z28
	BFGROW((DI), Z30, DPBF_30_12_0, DPBF_30_13_1, DPBF_30_14_2, DPBF_30_28_3)
	BFGROW((DI)(R8*1), Z31, DPBF_31_12_4, DPBF_31_13_5, DPBF_31_14_6, DPBF_31_28_7)
	BFGROW((DI)(R8*2), Z30, DPBF_30_12_8, DPBF_30_13_9, DPBF_30_14_10, DPBF_30_28_11)
	BFGROW((R9), Z31, DPBF_31_12_16, DPBF_31_13_17, DPBF_31_14_18, DPBF_31_28_19)
	BFGROW((R9)(R8*1), Z30, DPBF_30_12_20, DPBF_30_13_21, DPBF_30_14_22, DPBF_30_28_23)
	BFGROW((R9)(R8*2), Z31, DPBF_31_12_24, DPBF_31_13_25, DPBF_31_14_26, DPBF_31_28_27)
	ADDQ $256, SI
	ADDQ $4, DI
	ADDQ $4, R9
	DECQ CX
	JNZ  bfgloop

	MOVQ  masks+56(FP), AX
	KMOVW AX, K1
	SHRQ  $16, AX
	KMOVW AX, K2
	SHRQ  $16, AX
	KMOVW AX, K3
	SHRQ  $16, AX
	KMOVW AX, K4
	MOVQ  dst+40(FP), DX
	MOVQ  ldd+48(FP), BX
	SHLQ  $2, BX
	MOVQ  m+32(FP), AX
	CMPQ  acc+64(FP), $0
	JNE   bfgacc
	BFGS(Z0, Z1, Z2, Z3)
	BFGS(Z4, Z5, Z6, Z7)
	BFGS(Z8, Z9, Z10, Z11)
	BFGS(Z16, Z17, Z18, Z19)
	BFGS(Z20, Z21, Z22, Z23)
	BFGS(Z24, Z25, Z26, Z27)
	JMP   bfgdone

bfgacc:
	BFGA(Z0, Z1, Z2, Z3)
	BFGA(Z4, Z5, Z6, Z7)
	BFGA(Z8, Z9, Z10, Z11)
	BFGA(Z16, Z17, Z18, Z19)
	BFGA(Z20, Z21, Z22, Z23)
	BFGA(Z24, Z25, Z26, Z27)

bfgdone:
	VZEROUPPER
	RET

// func pack16T(dst *byte, lddst int, rows *[16]*byte, n int, xor uint32)
//
// pack16 for whole 64-byte column chunks of 16 rows given by their addresses (a row may repeat:
// a last panel's missing rows): n times, the 16 rows' next 64 bytes are loaded, XORed with xor
// and transposed as a 16×16 matrix of 4-byte groups (dword, qword and two 128-bit-lane shuffle
// stages), and group g of the chunk goes to dst + g·lddst. 64 shuffles per KiB where gathers
// load every 4 bytes separately.
TEXT ·pack16T(SB), NOSPLIT, $0-36
	MOVQ         dst+0(FP), DI
	MOVQ         lddst+8(FP), R8
	MOVQ         rows+16(FP), BX
	MOVQ         n+24(FP), DX
	MOVL         xor+32(FP), AX
	VPBROADCASTD AX, Z0
	LEAQ         (R8)(R8*1), R9
	SHLQ         $1, R9
	LEAQ         (R9)(R9*1), R10
	LEAQ         (R10)(R9*1), R11
	XORQ         CX, CX
	TESTQ        DX, DX
	JLE          ptdone

ptloop:
	MOVQ      0(BX), R12
	VMOVDQU32 (R12)(CX*1), Z16
	VPXORD    Z0, Z16, Z16
	MOVQ      8(BX), R12
	VMOVDQU32 (R12)(CX*1), Z17
	VPXORD    Z0, Z17, Z17
	MOVQ      16(BX), R12
	VMOVDQU32 (R12)(CX*1), Z18
	VPXORD    Z0, Z18, Z18
	MOVQ      24(BX), R12
	VMOVDQU32 (R12)(CX*1), Z19
	VPXORD    Z0, Z19, Z19
	MOVQ      32(BX), R12
	VMOVDQU32 (R12)(CX*1), Z20
	VPXORD    Z0, Z20, Z20
	MOVQ      40(BX), R12
	VMOVDQU32 (R12)(CX*1), Z21
	VPXORD    Z0, Z21, Z21
	MOVQ      48(BX), R12
	VMOVDQU32 (R12)(CX*1), Z22
	VPXORD    Z0, Z22, Z22
	MOVQ      56(BX), R12
	VMOVDQU32 (R12)(CX*1), Z23
	VPXORD    Z0, Z23, Z23
	MOVQ      64(BX), R12
	VMOVDQU32 (R12)(CX*1), Z24
	VPXORD    Z0, Z24, Z24
	MOVQ      72(BX), R12
	VMOVDQU32 (R12)(CX*1), Z25
	VPXORD    Z0, Z25, Z25
	MOVQ      80(BX), R12
	VMOVDQU32 (R12)(CX*1), Z26
	VPXORD    Z0, Z26, Z26
	MOVQ      88(BX), R12
	VMOVDQU32 (R12)(CX*1), Z27
	VPXORD    Z0, Z27, Z27
	MOVQ      96(BX), R12
	VMOVDQU32 (R12)(CX*1), Z28
	VPXORD    Z0, Z28, Z28
	MOVQ      104(BX), R12
	VMOVDQU32 (R12)(CX*1), Z29
	VPXORD    Z0, Z29, Z29
	MOVQ      112(BX), R12
	VMOVDQU32 (R12)(CX*1), Z30
	VPXORD    Z0, Z30, Z30
	MOVQ      120(BX), R12
	VMOVDQU32 (R12)(CX*1), Z31
	VPXORD    Z0, Z31, Z31
	MOVQ      DI, AX
	VPUNPCKLDQ Z17, Z16, Z1
	VPUNPCKHDQ Z17, Z16, Z16
	VPUNPCKLDQ Z19, Z18, Z2
	VPUNPCKHDQ Z19, Z18, Z18
	VPUNPCKLDQ Z21, Z20, Z3
	VPUNPCKHDQ Z21, Z20, Z20
	VPUNPCKLDQ Z23, Z22, Z4
	VPUNPCKHDQ Z23, Z22, Z22
	VPUNPCKLDQ Z25, Z24, Z5
	VPUNPCKHDQ Z25, Z24, Z24
	VPUNPCKLDQ Z27, Z26, Z6
	VPUNPCKHDQ Z27, Z26, Z26
	VPUNPCKLDQ Z29, Z28, Z7
	VPUNPCKHDQ Z29, Z28, Z28
	VPUNPCKLDQ Z31, Z30, Z8
	VPUNPCKHDQ Z31, Z30, Z30
	VPUNPCKLQDQ Z2, Z1, Z9
	VPUNPCKHQDQ Z2, Z1, Z1
	VPUNPCKLQDQ Z18, Z16, Z11
	VPUNPCKHQDQ Z18, Z16, Z16
	VPUNPCKLQDQ Z4, Z3, Z12
	VPUNPCKHQDQ Z4, Z3, Z3
	VPUNPCKLQDQ Z22, Z20, Z14
	VPUNPCKHQDQ Z22, Z20, Z20
	VPUNPCKLQDQ Z6, Z5, Z17
	VPUNPCKHQDQ Z6, Z5, Z5
	VPUNPCKLQDQ Z26, Z24, Z21
	VPUNPCKHQDQ Z26, Z24, Z24
	VPUNPCKLQDQ Z8, Z7, Z23
	VPUNPCKHQDQ Z8, Z7, Z7
	VPUNPCKLQDQ Z30, Z28, Z27
	VPUNPCKHQDQ Z30, Z28, Z28
	VSHUFI32X4 $0x88, Z12, Z9, Z29
	VSHUFI32X4 $0xdd, Z12, Z9, Z9
	VSHUFI32X4 $0x88, Z23, Z17, Z31
	VSHUFI32X4 $0xdd, Z23, Z17, Z17
	VSHUFI32X4 $0x88, Z31, Z29, Z2
	VSHUFI32X4 $0xdd, Z31, Z29, Z29
	VSHUFI32X4 $0x88, Z17, Z9, Z31
	VSHUFI32X4 $0xdd, Z17, Z9, Z9
	VMOVDQU32 Z2, (AX)
	VMOVDQU32 Z31, (AX)(R9*1)
	VMOVDQU32 Z29, (AX)(R10*1)
	VMOVDQU32 Z9, (AX)(R11*1)
	ADDQ      R8, AX
	VSHUFI32X4 $0x88, Z3, Z1, Z18
	VSHUFI32X4 $0xdd, Z3, Z1, Z1
	VSHUFI32X4 $0x88, Z7, Z5, Z10
	VSHUFI32X4 $0xdd, Z7, Z5, Z5
	VSHUFI32X4 $0x88, Z10, Z18, Z4
	VSHUFI32X4 $0xdd, Z10, Z18, Z18
	VSHUFI32X4 $0x88, Z5, Z1, Z10
	VSHUFI32X4 $0xdd, Z5, Z1, Z1
	VMOVDQU32 Z4, (AX)
	VMOVDQU32 Z10, (AX)(R9*1)
	VMOVDQU32 Z18, (AX)(R10*1)
	VMOVDQU32 Z1, (AX)(R11*1)
	ADDQ      R8, AX
	VSHUFI32X4 $0x88, Z14, Z11, Z22
	VSHUFI32X4 $0xdd, Z14, Z11, Z11
	VSHUFI32X4 $0x88, Z27, Z21, Z13
	VSHUFI32X4 $0xdd, Z27, Z21, Z21
	VSHUFI32X4 $0x88, Z13, Z22, Z6
	VSHUFI32X4 $0xdd, Z13, Z22, Z22
	VSHUFI32X4 $0x88, Z21, Z11, Z13
	VSHUFI32X4 $0xdd, Z21, Z11, Z11
	VMOVDQU32 Z6, (AX)
	VMOVDQU32 Z13, (AX)(R9*1)
	VMOVDQU32 Z22, (AX)(R10*1)
	VMOVDQU32 Z11, (AX)(R11*1)
	ADDQ      R8, AX
	VSHUFI32X4 $0x88, Z20, Z16, Z26
	VSHUFI32X4 $0xdd, Z20, Z16, Z16
	VSHUFI32X4 $0x88, Z28, Z24, Z19
	VSHUFI32X4 $0xdd, Z28, Z24, Z24
	VSHUFI32X4 $0x88, Z19, Z26, Z8
	VSHUFI32X4 $0xdd, Z19, Z26, Z26
	VSHUFI32X4 $0x88, Z24, Z16, Z19
	VSHUFI32X4 $0xdd, Z24, Z16, Z16
	VMOVDQU32 Z8, (AX)
	VMOVDQU32 Z19, (AX)(R9*1)
	VMOVDQU32 Z26, (AX)(R10*1)
	VMOVDQU32 Z16, (AX)(R11*1)
	ADDQ      R8, AX
	ADDQ      $64, CX
	MOVQ      R8, R13
	SHLQ      $4, R13
	ADDQ      R13, DI
	DECQ      DX
	JNZ       ptloop

ptdone:
	VZEROUPPER
	RET

// PREFETCH_LINES(instr, loop) issues instr for each of the CX 64-byte lines from SI (CX > 0) and
// returns: the body of prefetchLines and prefetchL2.
#define PREFETCH_LINES(instr, loop) \
loop: \
	instr (SI) \
	ADDQ $64, SI \
	DECQ CX \
	JGT  loop \
	RET

// func prefetchLines(p *byte, n int)
//
// PREFETCHT0 of the n 64-byte lines from p (n > 0): software prefetch of the next keys and
// values of decode attention (attend.go, prefetcher).
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	PREFETCH_LINES(PREFETCHT0, pfloop)

// func prefetchL2(p *byte, n int)
//
// PREFETCHT1 of the n 64-byte lines from p (n > 0): the start of a thread's next q8 product in
// panels, fetched while it waits (panels.go, prefetchNext).
TEXT ·prefetchL2(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	PREFETCH_LINES(PREFETCHT1, pf2loop)

// ---------------------------------------------------------------------------------------------
// q8 decode on weights in panels (panels.go): 32 rows packed as gemmQ8VNNI reads them, one input
// row quantised by quantX8 with one correction per block.
// ---------------------------------------------------------------------------------------------

// P8G is one group of four columns of one panel group: the two panels' 64-byte weight vectors
// (weights XORed with 0x80: unsigned) against the input's four bytes at xo, broadcast from
// memory, into the int32 sums ia, ib.
#define P8G(wa, wb, xo, ia, ib) \
	VMOVDQU32     wa(SI), Z12; \
	VMOVDQU32     wb(SI), Z13; \
	VPDPBUSD.BCST xo(DI), Z12, ia; \
	VPDPBUSD.BCST xo(DI), Z13, ib

// func dot32Q8P(wp *byte, sp *uint16, xq *int8, xs *float32, corr *int32, nb int, out *[32]float32)
//
// out[j] = Σ_c w[j, c]·x[c] for the 32 rows of one panel group over nb blocks of 32 columns: wp
// the group's weights, sp its scales (IEEE halves, Matrix.Scales16: 64 bytes a block, widened
// exactly by VCVTPH2PS), xq, xs, corr the input as quantX8 writes it with blockSums
// = 1 (xs: the block's scale at its first lane, 8 lanes a block). Each block's int32 sums start
// at the block's correction -128·Σ xq (so they are Σ w·x exactly, -128 included), even and odd
// column groups in two chains, then are widened once and added times the weight scales × the x
// scale: the arithmetic of gemmQ8VNNIH with one input row, so the same results to the bit.
TEXT ·dot32Q8P(SB), NOSPLIT, $0-56
	MOVQ   wp+0(FP), SI
	MOVQ   sp+8(FP), BX
	MOVQ   xq+16(FP), DI
	MOVQ   xs+24(FP), DX
	MOVQ   corr+32(FP), R10
	MOVQ   nb+40(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	TESTQ  CX, CX
	JLE    p8done

p8blk:
	VPBROADCASTD (R10), Z16
	VMOVDQA32    Z16, Z17
	VPXORD       Z18, Z18, Z18
	VPXORD       Z19, Z19, Z19
	P8G(0, 64, 0, Z16, Z17)
	P8G(128, 192, 4, Z18, Z19)
	P8G(256, 320, 8, Z16, Z17)
	P8G(384, 448, 12, Z18, Z19)
	P8G(512, 576, 16, Z16, Z17)
	P8G(640, 704, 20, Z18, Z19)
	P8G(768, 832, 24, Z16, Z17)
	P8G(896, 960, 28, Z18, Z19)
	VPADDD       Z18, Z16, Z16
	VPADDD       Z19, Z17, Z17
	VCVTPH2PS    (BX), Z28
	VCVTPH2PS    32(BX), Z29
	VCVTDQ2PS    Z16, Z16
	VMULPS.BCST  (DX), Z28, Z30
	VFMADD231PS  Z30, Z16, Z0
	VCVTDQ2PS    Z17, Z17
	VMULPS.BCST  (DX), Z29, Z31
	VFMADD231PS  Z31, Z17, Z1
	ADDQ         $1024, SI
	ADDQ         $64, BX
	ADDQ         $32, DI
	ADDQ         $32, DX
	ADDQ         $4, R10
	DECQ         CX
	JNZ          p8blk

p8done:
	MOVQ    out+48(FP), AX
	VMOVUPS Z0, (AX)
	VMOVUPS Z1, 64(AX)
	VZEROUPPER
	RET

// P8G2 is one group of four columns of two panel groups (SI and SI+R8): four 64-byte weight
// vectors against the input's four bytes at xo, into Z16-Z19.
#define P8G2(wa, wb, xo) \
	VMOVDQU32     wa(SI), Z12; \
	VMOVDQU32     wb(SI), Z13; \
	VPDPBUSD.BCST xo(DI), Z12, Z16; \
	VPDPBUSD.BCST xo(DI), Z13, Z17; \
	VMOVDQU32     wa(SI)(R8*1), Z14; \
	VMOVDQU32     wb(SI)(R8*1), Z15; \
	VPDPBUSD.BCST xo(DI), Z14, Z18; \
	VPDPBUSD.BCST xo(DI), Z15, Z19

// P8G4 is P8G2 for four panel groups (SI, SI+R8, SI+2·R8, R9), into Z16-Z23.
#define P8G4(wa, wb, xo) \
	P8G2(wa, wb, xo); \
	VMOVDQU32     wa(SI)(R8*2), Z12; \
	VMOVDQU32     wb(SI)(R8*2), Z13; \
	VPDPBUSD.BCST xo(DI), Z12, Z20; \
	VPDPBUSD.BCST xo(DI), Z13, Z21; \
	VMOVDQU32     wa(R9), Z14; \
	VMOVDQU32     wb(R9), Z15; \
	VPDPBUSD.BCST xo(DI), Z14, Z22; \
	VPDPBUSD.BCST xo(DI), Z15, Z23

// P8BLOCK is the products of one block of 32 columns, the group macro g (P8G2, P8G4) on each
// of its eight groups of four columns.
#define P8BLOCK(g) \
	g(0, 64, 0); \
	g(128, 192, 4); \
	g(256, 320, 8); \
	g(384, 448, 12); \
	g(512, 576, 16); \
	g(640, 704, 20); \
	g(768, 832, 24); \
	g(896, 960, 28)

// P8INIT2 starts the int32 sums of two groups, Z16-Z19, at the block's correction (R12);
// P8INIT4 those of four, Z16-Z23.
#define P8INIT2 \
	VPBROADCASTD (R12), Z16; \
	VMOVDQA32    Z16, Z17; \
	VMOVDQA32    Z16, Z18; \
	VMOVDQA32    Z16, Z19

#define P8INIT4 \
	P8INIT2; \
	VMOVDQA32 Z16, Z20; \
	VMOVDQA32 Z16, Z21; \
	VMOVDQA32 Z16, Z22; \
	VMOVDQA32 Z16, Z23

// P8F4 ends a block for one group: int sums ia, ib times its scales at sa (64 bytes apart) times
// the block's x scale, into fa, fb.
#define P8F4(sa, sb, ia, ib, fa, fb) \
	VCVTPH2PS    sa, Z28; \
	VCVTPH2PS    sb, Z29; \
	VCVTDQ2PS    ia, ia; \
	VMULPS.BCST  (DX), Z28, Z30; \
	VFMADD231PS  Z30, ia, fa; \
	VCVTDQ2PS    ib, ib; \
	VMULPS.BCST  (DX), Z29, Z31; \
	VFMADD231PS  Z31, ib, fb

// func dot128Q8P(wp *byte, ldw int, sp *uint16, lds int, xq *int8, xs *float32, corr *int32, nb int, out *[128]float32)
//
// dot32Q8P for four panel groups, ldw bytes (and lds scales) apart, into out[32g:32g+32]: the
// four quarters of a thread's range as four sequential streams (panelRange). Eight 64-byte loads
// and eight VPDPBUSD per group of four columns; the same results as dot32Q8P per group.
TEXT ·dot128Q8P(SB), NOSPLIT, $0-72
	P8ARGS
	LEAQ   (SI)(R8*2), R9
	ADDQ   R8, R9
	LEAQ   (BX)(R10*2), R11
	ADDQ   R10, R11
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	TESTQ  CX, CX
	JLE    p84done

p84blk:
	P8INIT4
	P8BLOCK(P8G4)
	P8F4((BX), 32(BX), Z16, Z17, Z0, Z1)
	P8F4((BX)(R10*1), 32(BX)(R10*1), Z18, Z19, Z2, Z3)
	P8F4((BX)(R10*2), 32(BX)(R10*2), Z20, Z21, Z4, Z5)
	P8F4((R11), 32(R11), Z22, Z23, Z6, Z7)
	ADDQ         $1024, SI
	ADDQ         $1024, R9
	ADDQ         $64, BX
	ADDQ         $64, R11
	ADDQ         $32, DI
	ADDQ         $32, DX
	ADDQ         $4, R12
	DECQ         CX
	JNZ          p84blk

p84done:
	MOVQ    out+64(FP), AX
	VMOVUPS Z0, (AX)
	VMOVUPS Z1, 64(AX)
	VMOVUPS Z2, 128(AX)
	VMOVUPS Z3, 192(AX)
	VMOVUPS Z4, 256(AX)
	VMOVUPS Z5, 320(AX)
	VMOVUPS Z6, 384(AX)
	VMOVUPS Z7, 448(AX)
	VZEROUPPER
	RET

// func dot64Q8P(wp *byte, ldw int, sp *uint16, lds int, xq *int8, xs *float32, corr *int32, nb int, out *[64]float32)
//
// dot32Q8P for two panel groups, ldw bytes (and lds scales) apart, into out[32g:32g+32]: two
// sequential streams for the groups a thread's quarters leave over (panelRange), which dot32Q8P
// would read one a call, at about half the rate of four streams. The same results as dot32Q8P
// per group.
TEXT ·dot64Q8P(SB), NOSPLIT, $0-72
	P8ARGS
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	TESTQ  CX, CX
	JLE    p82done

p82blk:
	P8INIT2
	P8BLOCK(P8G2)
	P8F4((BX), 32(BX), Z16, Z17, Z0, Z1)
	P8F4((BX)(R10*1), 32(BX)(R10*1), Z18, Z19, Z2, Z3)
	ADDQ         $1024, SI
	ADDQ         $64, BX
	ADDQ         $32, DI
	ADDQ         $32, DX
	ADDQ         $4, R12
	DECQ         CX
	JNZ          p82blk

p82done:
	MOVQ    out+64(FP), AX
	VMOVUPS Z0, (AX)
	VMOVUPS Z1, 64(AX)
	VMOVUPS Z2, 128(AX)
	VMOVUPS Z3, 192(AX)
	VZEROUPPER
	RET

// MASK32 sets K1 and K2 to the lanes of the first n (1 ≤ n ≤ 32, in register n, which must not
// be AX) of two 16-lane vectors. Clobbers AX.
#define MASK32(n) \
	MOVQ  $1, AX; \
	SHLQ  n, AX; \
	DECQ  AX; \
	KMOVW AX, K1; \
	SHRQ  $16, AX; \
	KMOVW AX, K2

// BF16PAIR loads 16 bf16 values from each of a and b (under the masks K1 and K2; zeros past
// them) and widens them exactly to f32 in Z0 and Z1 (the bf16 bits are the f32's top half).
#define BF16PAIR(a, b) \
	VMOVDQU16.Z a, K1, Y0; \
	VMOVDQU16.Z b, K2, Y1; \
	VPMOVZXWD   Y0, Z0; \
	VPMOVZXWD   Y1, Z1; \
	VPSLLD      $16, Z0, Z0; \
	VPSLLD      $16, Z1, Z1

// SCT7ROW broadcasts the query value at off(DI) into b and adds its products with the two key
// vectors Z0, Z1 into a0, a1 (scoresT7).
#define SCT7ROW(off, b, a0, a1) \
	VBROADCASTSS off(DI), b; \
	VFMADD231PS  Z0, b, a0; \
	VFMADD231PS  Z1, b, a1

// SCT7STORE stores the scores of one query row, a0 and a1 under the masks K1 and K2, at DX and
// moves DX to the next row (BX bytes on).
#define SCT7STORE(a0, a1) \
	VMOVUPS a0, K1, (DX); \
	VMOVUPS a1, K2, 64(DX); \
	ADDQ    BX, DX

// SCT7STEP adds one dimension's products: the query values at DI (qt's row) against the key
// vectors Z0, Z1 (scoresT7).
#define SCT7STEP \
	SCT7ROW(0, Z2, Z16, Z17); \
	SCT7ROW(4, Z3, Z18, Z19); \
	SCT7ROW(8, Z4, Z20, Z21); \
	SCT7ROW(12, Z5, Z22, Z23); \
	SCT7ROW(16, Z6, Z24, Z25); \
	SCT7ROW(20, Z7, Z26, Z27); \
	SCT7ROW(24, Z8, Z28, Z29)

// ACC7ZERO clears the 14 accumulators Z16-Z29 of scoresT7 and valuesR7; ACC7STORE stores
// them, two per row, from DX on (SCT7STORE).
#define ACC7ZERO \
	ZERO2(Z16, Z17) \
	ZERO2(Z18, Z19) \
	ZERO2(Z20, Z21) \
	ZERO2(Z22, Z23) \
	ZERO2(Z24, Z25) \
	ZERO2(Z26, Z27) \
	ZERO2(Z28, Z29)

#define ACC7STORE \
	SCT7STORE(Z16, Z17) \
	SCT7STORE(Z18, Z19) \
	SCT7STORE(Z20, Z21) \
	SCT7STORE(Z22, Z23) \
	SCT7STORE(Z24, Z25) \
	SCT7STORE(Z26, Z27) \
	SCT7STORE(Z28, Z29)

// PFLINES2 and PFLINES4 prefetch (PREFETCHT0) the next two or four 64-byte lines at R9 while
// R13 (the lines left) is above zero, then move R9 on and count them off: a kernel's share of
// decode attention's prefetch walk, spread over its loop rather than issued in one burst.
#define PFLINES2 \
	CMPQ       R13, $0; \
	JLE        5(PC); \
	PREFETCHT0 (R9); \
	PREFETCHT0 64(R9); \
	ADDQ       $128, R9; \
	SUBQ       $2, R13

#define PFLINES4 \
	PFLINES2; \
	PFLINES2

// func scoresT7(qt *float32, k unsafe.Pointer, hd int, dst *float32, ldd int, n int, b16 int, pf unsafe.Pointer, pfn int)
//
// The decode-attention scores over keys in tiles (Paged.Tiled: a tile is hd rows of 16
// positions, row-major, tiles back to back), f32, or bf16 with b16 = 1: dst[r, j] =
// Σ_d qt[d, r]·k[tile j/16][d][j%16] for the 7 query rows r < 7 and the n keys j < n (1 ≤ n ≤ 32:
// the tile at k and the next), with qt the queries transposed (hd rows of 8 values, the 8th
// unused) and hd ≥ 1. The keys lie along the lanes: per d, two key vectors (one row of each tile,
// loaded under the masks K1, K2 of the n keys, so nothing past them is read; bf16 widened exactly
// in the registers) meet the 7 query values, each broadcast once, in 14 FMAs into 14
// accumulators (Z16-Z29), and no horizontal sums; the two tiles are read front to back. Each
// score is summed over d in order, the same order for f32 and bf16. The n results of each row
// overwrite dst (masked stores). Meanwhile it prefetches the pfn lines from pf, its share of
// decode attention's prefetch walk: two per d while any are left (pfn rounded up to even, so
// one line past them at most; pfn ≤ 2·hd; pf any address: a prefetch never faults).
TEXT ·scoresT7(SB), NOSPLIT, $0-72
	MOVQ n+40(FP), CX
	MASK32(CX)
	MOVQ pf+56(FP), R9
	MOVQ pfn+64(FP), R13
	MOVQ qt+0(FP), DI
	MOVQ k+8(FP), SI
	MOVQ hd+16(FP), CX
	MOVQ CX, R8
	ACC7ZERO
	CMPQ b16+48(FP), $0
	JNE  sct7b16
	SHLQ $6, R8

sct7loop:
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS.Z (SI)(R8*1), K2, Z1
	PFLINES2
	SCT7STEP
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  sct7loop
	JMP  sct7done

sct7b16:
	SHLQ $5, R8

sct7b16loop:
	BF16PAIR((SI), (SI)(R8*1))
	PFLINES2
	SCT7STEP
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  sct7b16loop

sct7done:
	MOVQ dst+24(FP), DX
	MOVQ ldd+32(FP), BX
	SHLQ $2, BX
	ACC7STORE
	VZEROUPPER
	RET

// VR7ROW broadcasts p[r, j] from off into b and adds its products with the two value vectors
// Z0, Z1 into a0, a1 (valuesR7).
#define VR7ROW(off, b, a0, a1) \
	VBROADCASTSS off, b; \
	VFMADD231PS  Z0, b, a0; \
	VFMADD231PS  Z1, b, a1

// VR7STEP adds one position's products: the weights of the 7 rows at DI, DI+R10, ..., R12
// against the value vectors Z0, Z1, then moves SI to the next value row (R8 bytes on) and the
// weight pointers to the next position (valuesR7).
#define VR7STEP \
	VR7ROW((DI), Z2, Z16, Z17); \
	VR7ROW((DI)(R10*1), Z3, Z18, Z19); \
	VR7ROW((DI)(R10*2), Z4, Z20, Z21); \
	VR7ROW((R11), Z5, Z22, Z23); \
	VR7ROW((R11)(R10*1), Z6, Z24, Z25); \
	VR7ROW((R11)(R10*2), Z7, Z26, Z27); \
	VR7ROW((R12), Z8, Z28, Z29); \
	ADDQ R8, SI; \
	ADDQ $4, DI; \
	ADDQ $4, R11; \
	ADDQ $4, R12

// VR7LOAD loads o's row at DX (under the masks K1, K2; zeros past them) into a0, a1 and moves DX
// to the next row (BX bytes on).
#define VR7LOAD(a0, a1) \
	VMOVUPS.Z (DX), K1, a0; \
	VMOVUPS.Z 64(DX), K2, a1; \
	ADDQ      BX, DX

// func valuesR7(p *float32, ldp int, v unsafe.Pointer, ldv int, n int, o *float32, ldo int, w int, acc int, b16 int, pf unsafe.Pointer, pfn int)
//
// The decode-attention values product over values stored by rows (one position per row, ldv
// elements apart), f32, or bf16 with b16 = 1: o[r, c] (+)= Σ_j p[r, j]·v[j, c] for the 7 query
// rows r < 7 (p's rows ldp apart, o's ldo) and the w columns c < w (1 ≤ w ≤ 32) over n ≥ 1
// positions j. Per position, two value vectors (columns 0-15 and 16-31, loaded under the masks
// K1, K2 of the w columns, so nothing past them is read; bf16 widened exactly in the registers)
// meet the 7 weights p[r, j], each broadcast once, in 14 FMAs into 14 accumulators (Z16-Z29),
// and no horizontal sums. Each sum runs over j in order; with acc = 1 it continues from o's
// values (a product split over calls sums as one call would), else from zero. The w results of
// each row are stored under the masks. Meanwhile it prefetches the pfn lines from pf as scoresT7
// does, four per position (pfn rounded up to a multiple of two; pfn ≤ 4·n).
TEXT ·valuesR7(SB), NOSPLIT, $0-96
	MOVQ w+56(FP), CX
	MASK32(CX)
	MOVQ pf+80(FP), R9
	MOVQ pfn+88(FP), R13
	MOVQ o+40(FP), DX
	MOVQ ldo+48(FP), BX
	SHLQ $2, BX
	CMPQ acc+64(FP), $0
	JEQ  vr7zero
	VR7LOAD(Z16, Z17)
	VR7LOAD(Z18, Z19)
	VR7LOAD(Z20, Z21)
	VR7LOAD(Z22, Z23)
	VR7LOAD(Z24, Z25)
	VR7LOAD(Z26, Z27)
	VR7LOAD(Z28, Z29)
	JMP  vr7start

vr7zero:
	ACC7ZERO

vr7start:
	MOVQ p+0(FP), DI
	MOVQ ldp+8(FP), R10
	SHLQ $2, R10
	LEAQ (DI)(R10*2), R11
	ADDQ R10, R11
	LEAQ (R11)(R10*2), R12
	ADDQ R10, R12
	MOVQ v+16(FP), SI
	MOVQ ldv+24(FP), R8
	MOVQ n+32(FP), CX
	CMPQ b16+72(FP), $0
	JNE  vr7b16
	SHLQ $2, R8

vr7loop:
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS.Z 64(SI), K2, Z1
	PFLINES4
	VR7STEP
	DECQ CX
	JNZ  vr7loop
	JMP  vr7done

vr7b16:
	SHLQ $1, R8

vr7b16loop:
	BF16PAIR((SI), 32(SI))
	PFLINES4
	VR7STEP
	DECQ CX
	JNZ  vr7b16loop

vr7done:
	MOVQ o+40(FP), DX
	ACC7STORE
	VZEROUPPER
	RET
