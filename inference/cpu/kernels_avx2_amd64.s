//go:build amd64 && !purego

// AVX2 + FMA kernels (x86-64-v3: every x86 CPU since Haswell / Zen 1): the tier used where the
// CPU lacks AVX-512 (kernels_amd64.s), e.g. most AMD and desktop Intel CI machines, selected at
// run time in pool.go. The elementwise kernels (avx2DotF32 ... avx2CvtQ8) and the f32, f16, bf16
// and exact-q8 matrix-vector ones (avx2MvF32 ... avx2MvQ8) are generated with their AVX-512 forms
// into kernels_vec_amd64.s by asmgen/vecgen. Why assembly: Go 1.26 has no SIMD in the stable
// language; simd/archsimd exists only behind GOEXPERIMENT=simd, which a library cannot require of
// its users. The portable Go code in ref.go and ops.go is the fallback and the tests' oracle.
//
// Conventions (all functions ABI0, arguments on the stack):
//   - Column counts passed to a kernel are multiples of 8 (32 for Q8); the Go caller handles the
//     rest with scalar code.
//   - Only AX BX CX DX SI DI R8-R13 and Y0-Y14 are used (Y15 too in avx2Gemv7x16 and
//     avx2Gemv7x16N): R14/R15 are
//     ABIInternal's g and GOT registers, which we leave alone; X15, its zero register, is scratch
//     in ABI0 code, and the compiler zeroes it again after every call into it.
//   - Every function ends with VZEROUPPER so later SSE code pays no transition penalty.
//   - Sums are in f32 with FMA; the order differs from ref.go (8 lanes, several accumulators, a
//     final tree), so results agree with it to rounding (see the tests for the bounds).

#include "textflag.h"

// G7ARGS and G7DST read the arguments of avx2Gemv7, avx2Gemv7x16 and avx2Gemv7x16N (defined
// before any TEXT, so that go vet does not check their names against another function's frame).
// G7ARGS: x at SI, its step in bytes R8; the seven scalar rows at DI, DI+R10, DI+2·R10, R11,
// R11+R10, R11+2·R10, R12 (R10 the row stride in bytes), their step in bytes R9; the steps CX
// (G7ROWS, all but x); the prefetch walk's address AX and lines R13.
#define G7ARGS \
	MOVQ x+0(FP), SI; \
	G7ROWS; \
	MOVQ pf+72(FP), AX; \
	MOVQ pfn+80(FP), R13

#define G7ROWS \
	MOVQ xstep+8(FP), R8; \
	SHLQ $2, R8; \
	MOVQ s+16(FP), DI; \
	MOVQ srow+24(FP), R10; \
	SHLQ $2, R10; \
	MOVQ sstep+32(FP), R9; \
	SHLQ $2, R9; \
	LEAQ (DI)(R10*2), R11; \
	ADDQ R10, R11; \
	LEAQ (R11)(R10*2), R12; \
	ADDQ R10, R12; \
	MOVQ steps+40(FP), CX

// G7DST loads dst into DX and its row stride in bytes into BX, and compares acc with zero.
#define G7DST \
	MOVQ dst+48(FP), DX; \
	MOVQ ldd+56(FP), BX; \
	SHLQ $2, BX; \
	CMPQ acc+64(FP), $0

// Q8IARGS loads avx2Dot4Q8I's arguments (Q8PTRS; DI = xq, DX = xs, CX = k), sets Y13 to 16-bit
// ones and zeroes Y0-Y3 (avx2Dot4Q8I, avx2Dot4Q8IFar; before any TEXT, as G7ARGS); clobbers AX.
#define Q8IARGS \
	Q8PTRS; \
	Q8IREST

// Q8IARGSH is Q8IARGS for scales held as halves (avx2Dot4Q8IH, avx2Dot4Q8IFarH).
#define Q8IARGSH \
	Q8PTRSH; \
	Q8IREST

// Q8IREST is Q8IARGS after the row pointers.
#define Q8IREST \
	MOVQ   xq+32(FP), DI; \
	MOVQ   xs+40(FP), DX; \
	MOVQ   k+48(FP), CX; \
	Q8IWORDS; \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3

// Q8I2ARGS loads avx2Dot4Q8I2's arguments after the row pointers (Q8PTRS or Q8PTRSH): R13 xq1,
// AX xs1, the rest as avx2Dot4Q8I's, R12 the prefetch pointer; zeroes Y0-Y7.
#define Q8I2ARGS \
	MOVQ xq0+32(FP), DI; \
	MOVQ xq1+40(FP), R13; \
	MOVQ xs0+48(FP), DX; \
	MOVQ k+64(FP), CX; \
	Q8IONES; \
	MOVQ xs1+56(FP), AX; \
	ZERO8

// Q8I2END stores the two inputs' sums (avx2Dot4Q8I2 and its H twin).
#define Q8I2END \
	HSUM8; \
	MOVQ    out0+72(FP), AX; \
	VMOVUPS X12, (AX); \
	MOVQ    out1+80(FP), AX; \
	VMOVUPS X0, (AX); \
	VZEROUPPER; \
	RET

#include "kernels_amd64.h"

// HSUM4 sums each of Y0..Y3 across its 8 lanes into X0 = [ΣY0, ΣY1, ΣY2, ΣY3]. Clobbers Y1, Y2.
#define HSUM4 \
	VHADDPS      Y1, Y0, Y0; \
	VHADDPS      Y3, Y2, Y2; \
	VHADDPS      Y2, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS       X1, X0, X0

#define ZERO8 \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7

// ---------------------------------------------------------------------------------------------
// Matrix-matrix micro-kernel (prefill, batched decode).
// ---------------------------------------------------------------------------------------------

// LDP loads the 16 packed weights of one column (panel + off) into Y12, Y13.
#define LDP(off) \
	VMOVUPS off(SI), Y12; \
	VMOVUPS (off+32)(SI), Y13

// BXi broadcasts x[i, c] (c at byte offset o from the current column) and accumulates it times
// the 16 weights into the accumulator pair of input row i.
#define BX0(o) VBROADCASTSS o(DI), Y14; VFMADD231PS Y12, Y14, Y0; VFMADD231PS Y13, Y14, Y1
#define BX1(o) VBROADCASTSS o(DI)(R10*1), Y14; VFMADD231PS Y12, Y14, Y2; VFMADD231PS Y13, Y14, Y3
#define BX2(o) VBROADCASTSS o(DI)(R10*2), Y14; VFMADD231PS Y12, Y14, Y4; VFMADD231PS Y13, Y14, Y5
#define BX3(o) VBROADCASTSS o(R11), Y14; VFMADD231PS Y12, Y14, Y6; VFMADD231PS Y13, Y14, Y7
#define BX4(o) VBROADCASTSS o(R11)(R10*1), Y14; VFMADD231PS Y12, Y14, Y8; VFMADD231PS Y13, Y14, Y9
#define BX5(o) VBROADCASTSS o(R11)(R10*2), Y14; VFMADD231PS Y12, Y14, Y10; VFMADD231PS Y13, Y14, Y11

#define S1(p, o) LDP(p); BX0(o)
#define S2(p, o) S1(p, o); BX1(o)
#define S3(p, o) S2(p, o); BX2(o)
#define S4(p, o) S3(p, o); BX3(o)
#define S5(p, o) S4(p, o); BX4(o)
#define S6(p, o) S5(p, o); BX5(o)

#define ADV4 ADDQ $256, SI; ADDQ $16, DI; ADDQ $16, R11; SUBQ $4, CX
#define ADV1 ADDQ $64, SI; ADDQ $4, DI; ADDQ $4, R11; DECQ CX

// ST stores one input row's 16 results; STA adds them to dst first. DX moves to the next row.
#define ST(a, b) VMOVUPS a, (DX); VMOVUPS b, 32(DX); ADDQ BX, DX
#define STA(a, b) VADDPS (DX), a, a; VADDPS 32(DX), b, b; VMOVUPS a, (DX); VMOVUPS b, 32(DX); ADDQ BX, DX

// func avx2Gemm16(m int, panel *float32, x *float32, ldx int, k int, dst *float32, ldd int, acc int)
//
// dst[i, j] (+)= Σ_{c<k} panel[c*16 + j]·x[i*ldx + c] for m (1..6) input rows i and 16 weight
// rows j; k >= 1. panel holds 16 weight rows packed column by column (see avx2Transpose16), so one
// column is two ymm loads; each x[i, c] is broadcast once and meets both: 2 loads + m broadcasts
// per 2m FMAs, with the 2m accumulators (12 ymm for m = 6) in registers for the whole k loop.
// With m = 6 this is the classic 6×16 AVX2 SGEMM register block: FMA-bound when the panel is in
// L1 and the 6 x rows in L1/L2 (see gemmRangeAVX2). acc = 1 adds to dst, 0 overwrites it.
TEXT ·avx2Gemm16(SB), NOSPLIT, $0-64
	MOVQ panel+8(FP), SI
	MOVQ x+16(FP), DI
	MOVQ ldx+24(FP), R10
	SHLQ $2, R10
	LEAQ (DI)(R10*2), R11
	ADDQ R10, R11
	MOVQ k+32(FP), CX
	MOVQ m+0(FP), AX
	ZERO8
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	CMPQ AX, $6
	JEQ  g6
	CMPQ AX, $5
	JEQ  g5
	CMPQ AX, $4
	JEQ  g4
	CMPQ AX, $3
	JEQ  g3
	CMPQ AX, $2
	JEQ  g2

g1:
	CMPQ CX, $4
	JLT  g1one
g1four:
	S1(0, 0); S1(64, 4); S1(128, 8); S1(192, 12)
	ADV4
	CMPQ CX, $4
	JGE  g1four
g1one:
	TESTQ CX, CX
	JZ    gstore
	S1(0, 0)
	ADV1
	JMP   g1one

g2:
	CMPQ CX, $4
	JLT  g2one
g2four:
	S2(0, 0); S2(64, 4); S2(128, 8); S2(192, 12)
	ADV4
	CMPQ CX, $4
	JGE  g2four
g2one:
	TESTQ CX, CX
	JZ    gstore
	S2(0, 0)
	ADV1
	JMP   g2one

g3:
	CMPQ CX, $4
	JLT  g3one
g3four:
	S3(0, 0); S3(64, 4); S3(128, 8); S3(192, 12)
	ADV4
	CMPQ CX, $4
	JGE  g3four
g3one:
	TESTQ CX, CX
	JZ    gstore
	S3(0, 0)
	ADV1
	JMP   g3one

g4:
	CMPQ CX, $4
	JLT  g4one
g4four:
	S4(0, 0); S4(64, 4); S4(128, 8); S4(192, 12)
	ADV4
	CMPQ CX, $4
	JGE  g4four
g4one:
	TESTQ CX, CX
	JZ    gstore
	S4(0, 0)
	ADV1
	JMP   g4one

g5:
	CMPQ CX, $4
	JLT  g5one
g5four:
	S5(0, 0); S5(64, 4); S5(128, 8); S5(192, 12)
	ADV4
	CMPQ CX, $4
	JGE  g5four
g5one:
	TESTQ CX, CX
	JZ    gstore
	S5(0, 0)
	ADV1
	JMP   g5one

g6:
	CMPQ CX, $4
	JLT  g6one
g6four:
	S6(0, 0); S6(64, 4); S6(128, 8); S6(192, 12)
	ADV4
	CMPQ CX, $4
	JGE  g6four
g6one:
	TESTQ CX, CX
	JZ    gstore
	S6(0, 0)
	ADV1
	JMP   g6one

gstore:
	MOVQ  dst+40(FP), DX
	MOVQ  ldd+48(FP), BX
	SHLQ  $2, BX
	MOVQ  acc+56(FP), R8
	TESTQ R8, R8
	JNZ   gstoreacc
	ST(Y0, Y1)
	CMPQ  AX, $1
	JEQ   gdone
	ST(Y2, Y3)
	CMPQ  AX, $2
	JEQ   gdone
	ST(Y4, Y5)
	CMPQ  AX, $3
	JEQ   gdone
	ST(Y6, Y7)
	CMPQ  AX, $4
	JEQ   gdone
	ST(Y8, Y9)
	CMPQ  AX, $5
	JEQ   gdone
	ST(Y10, Y11)
	JMP   gdone

gstoreacc:
	STA(Y0, Y1)
	CMPQ AX, $1
	JEQ  gdone
	STA(Y2, Y3)
	CMPQ AX, $2
	JEQ  gdone
	STA(Y4, Y5)
	CMPQ AX, $3
	JEQ  gdone
	STA(Y6, Y7)
	CMPQ AX, $4
	JEQ  gdone
	STA(Y8, Y9)
	CMPQ AX, $5
	JEQ  gdone
	STA(Y10, Y11)

gdone:
	VZEROUPPER
	RET

// TR8 transposes the 8×8 block of rows p, p+ld, p+2ld, p+3ld, q, q+ld, q+2ld, q+3ld (R8 = ld,
// R9 = 3ld in bytes; 8 columns each) into 8 packed columns of 8 at byte offset o of the panel
// (DI), 64 bytes apart: the standard unpack / shuffle / lane-permute sequence.
#define TR8(p, q, o) \
	VMOVUPS    (p), Y0; \
	VMOVUPS    (p)(R8*1), Y1; \
	VMOVUPS    (p)(R8*2), Y2; \
	VMOVUPS    (p)(R9*1), Y3; \
	VMOVUPS    (q), Y4; \
	VMOVUPS    (q)(R8*1), Y5; \
	VMOVUPS    (q)(R8*2), Y6; \
	VMOVUPS    (q)(R9*1), Y7; \
	VUNPCKLPS  Y1, Y0, Y8; \
	VUNPCKHPS  Y1, Y0, Y9; \
	VUNPCKLPS  Y3, Y2, Y10; \
	VUNPCKHPS  Y3, Y2, Y11; \
	VSHUFPS    $0x44, Y10, Y8, Y0; \
	VSHUFPS    $0xEE, Y10, Y8, Y1; \
	VSHUFPS    $0x44, Y11, Y9, Y2; \
	VSHUFPS    $0xEE, Y11, Y9, Y3; \
	VUNPCKLPS  Y5, Y4, Y8; \
	VUNPCKHPS  Y5, Y4, Y9; \
	VUNPCKLPS  Y7, Y6, Y10; \
	VUNPCKHPS  Y7, Y6, Y11; \
	VSHUFPS    $0x44, Y10, Y8, Y4; \
	VSHUFPS    $0xEE, Y10, Y8, Y5; \
	VSHUFPS    $0x44, Y11, Y9, Y6; \
	VSHUFPS    $0xEE, Y11, Y9, Y7; \
	VPERM2F128 $0x20, Y4, Y0, Y8; \
	VMOVUPS    Y8, o(DI); \
	VPERM2F128 $0x20, Y5, Y1, Y8; \
	VMOVUPS    Y8, (o+64)(DI); \
	VPERM2F128 $0x20, Y6, Y2, Y8; \
	VMOVUPS    Y8, (o+128)(DI); \
	VPERM2F128 $0x20, Y7, Y3, Y8; \
	VMOVUPS    Y8, (o+192)(DI); \
	VPERM2F128 $0x31, Y4, Y0, Y8; \
	VMOVUPS    Y8, (o+256)(DI); \
	VPERM2F128 $0x31, Y5, Y1, Y8; \
	VMOVUPS    Y8, (o+320)(DI); \
	VPERM2F128 $0x31, Y6, Y2, Y8; \
	VMOVUPS    Y8, (o+384)(DI); \
	VPERM2F128 $0x31, Y7, Y3, Y8; \
	VMOVUPS    Y8, (o+448)(DI)

// func avx2Transpose16(panel *float32, src *float32, lds int, kc int)
//
// Packs 16 rows of kc columns (src, stride lds elements; kc a multiple of 8, > 0) for avx2Gemm16:
// panel[c*16 + j] = src[j*lds + c], 8×8 blocks at a time.
TEXT ·avx2Transpose16(SB), NOSPLIT, $0-32
	MOVQ panel+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	SHLQ $2, R8
	MOVQ kc+24(FP), CX
	LEAQ (R8)(R8*2), R9
	LEAQ (SI)(R8*4), AX
	LEAQ (SI)(R8*8), BX
	LEAQ (BX)(R8*4), DX

trloop:
	TR8(SI, AX, 0)
	TR8(BX, DX, 32)
	ADDQ $32, SI
	ADDQ $32, AX
	ADDQ $32, BX
	ADDQ $32, DX
	ADDQ $512, DI
	SUBQ $8, CX
	JGT  trloop
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------------------------
// Matrix-vector kernels (decode) on int8 products, and for two input rows at once; the f32, f16,
// bf16 and exact-q8 ones (avx2MvF32 ...) are generated into kernels_vec_amd64.s.
// ---------------------------------------------------------------------------------------------

// Q8IROW adds one row's block of 32 int8 weights at w (its scale at sc) to acc, against x
// quantised to int8 in Y8 (its scale per lane in Y9): Y10 = |w| as unsigned bytes, Y11 = x with
// w's sign, so VPMADDUBSW's u8×s8 pairs are w·x (at most 2·128·127 in magnitude, no saturation,
// -128 included), VPMADDWD with ones (Y13) sums them into 8 int32 lanes of 4 products; those are
// widened and added times x scale × weight scale. The scale is loaded into Y12 by ld: Q8SF (an
// f32, broadcast) or Q8SH (a half, broadcast as a word and widened exactly: the same f32 value).
#define Q8IROW(w, sc, acc) Q8IROWL(Q8SF, w, sc, acc)

#define Q8IROWL(ld, w, sc, acc) \
	VMOVDQU      w, Y10; \
	VPSIGNB      Y10, Y8, Y11; \
	VPABSB       Y10, Y10; \
	VPMADDUBSW   Y11, Y10, Y10; \
	VPMADDWD     Y13, Y10, Y10; \
	VCVTDQ2PS    Y10, Y10; \
	VMULPS       Y9, Y10, Y10; \
	ld(sc); \
	VFMADD231PS  Y12, Y10, acc

#define Q8SF(sc) VBROADCASTSS sc, Y12

#define Q8SH(sc) \
	VPBROADCASTW sc, X12; \
	VCVTPH2PS    X12, Y12

// Q8ISTEPL adds one block of 32 columns of the four rows to Y0-Y3 (Q8IROWL with scale loader ld,
// the rows' scales at s0-s3) and moves the rows and x on (avx2Dot4Q8I, avx2Dot4Q8IFar and their
// H twins); the scale pointers are the caller's to move. Q8ISTEP is the f32 scales' block, Q8ISTEPH
// the halves' (each moves BX and R11 on by one scale).
#define Q8ISTEPL(ld, s0, s1, s2, s3) \
	VMOVDQU (DI), Y8; \
	VMOVUPS (DX), Y9; \
	Q8IROWL(ld, (SI), s0, Y0); \
	Q8IROWL(ld, (SI)(R8*1), s1, Y1); \
	Q8IROWL(ld, (SI)(R8*2), s2, Y2); \
	Q8IROWL(ld, (R9), s3, Y3); \
	ADDQ    $32, SI; \
	ADDQ    $32, R9; \
	ADDQ    $32, DI; \
	ADDQ    $32, DX

#define Q8ISTEP \
	Q8ISTEPL(Q8SF, (BX), (BX)(R10*1), (BX)(R10*2), (R11)); \
	ADDQ $4, BX; \
	ADDQ $4, R11

#define Q8ISTEPH \
	Q8ISTEPL(Q8SH, (BX), (BX)(R10*1), (BX)(R10*2), (R11)); \
	ADDQ $2, BX; \
	ADDQ $2, R11

// Q8ISTAGE widens the next four half scales of each of the four rows (8 bytes at BX,
// BX+R10, BX+2·R10 and R11) to f32 into the frame's 64 bytes, row i's at s-64+16i(SP), and moves
// BX and R11 on by four scales: the H kernels' blocks then broadcast their scales from there as
// the f32 kernels do from the rows (Q8ISTEPS), one VCVTPH2PS and one store per row and four
// blocks instead of a word broadcast and a VCVTPH2PS per row and block (Q8ISTEPH, the tails).
// Clobbers Y10 (free between blocks).
#define Q8ISTAGE \
	VCVTPH2PS (BX), X10; \
	VMOVUPS   X10, s-64(SP); \
	VCVTPH2PS (BX)(R10*1), X10; \
	VMOVUPS   X10, s-48(SP); \
	VCVTPH2PS (BX)(R10*2), X10; \
	VMOVUPS   X10, s-32(SP); \
	VCVTPH2PS (R11), X10; \
	VMOVUPS   X10, s-16(SP); \
	ADDQ      $8, BX; \
	ADDQ      $8, R11

// Q8ICHUNK is four blocks (128 columns) of the H kernels: their scales staged (Q8ISTAGE), then
// step(ld, s0, s1, s2, s3) for each block (Q8ISTEPL, or Q8I2STEPL for two inputs) with the f32
// loader from the frame, pf (the kernel's prefetch per block) before each.
#define Q8ICHUNK(step, pf) \
	Q8ISTAGE; \
	pf; \
	step(Q8SF, s-64(SP), s-48(SP), s-32(SP), s-16(SP)); \
	pf; \
	step(Q8SF, s-60(SP), s-44(SP), s-28(SP), s-12(SP)); \
	pf; \
	step(Q8SF, s-56(SP), s-40(SP), s-24(SP), s-8(SP)); \
	pf; \
	step(Q8SF, s-52(SP), s-36(SP), s-20(SP), s-4(SP))

// Q8IPF2 is avx2Dot4Q8I's prefetch per block: two lines 8 KiB ahead (R12), into L2.
#define Q8IPF2 \
	PREFETCHT2 (R12); \
	PREFETCHT2 64(R12); \
	ADDQ       $128, R12

// Q8IPFFAR is avx2Dot4Q8IFar's prefetch per block: 512 bytes ahead in each of the four rows.
#define Q8IPFFAR \
	PREFETCHT0 512(SI); \
	PREFETCHT0 512(SI)(R8*1); \
	PREFETCHT0 512(SI)(R8*2); \
	PREFETCHT0 512(R9)

// Q8I2ROW is Q8IROW for two inputs at once (x0 in Y8 with its lane scales at (DX), x1 in Y9
// with its scales at (AX)): the row's weights are loaded, made absolute (Y14) and their scale
// loaded into Y12 (by ld: Q8SF or Q8SH, as Q8IROWL) once, then each input gets its signed copy,
// products and accumulator (p, q).
#define Q8I2ROW(ld, w, sc, p, q) \
	VPABSB       w, Y14; \
	ld(sc); \
	VPSIGNB      w, Y8, Y11; \
	VPMADDUBSW   Y11, Y14, Y10; \
	VPMADDWD     Y13, Y10, Y10; \
	VCVTDQ2PS    Y10, Y10; \
	VMULPS       (DX), Y10, Y10; \
	VFMADD231PS  Y12, Y10, p; \
	VPSIGNB      w, Y9, Y11; \
	VPMADDUBSW   Y11, Y14, Y10; \
	VPMADDWD     Y13, Y10, Y10; \
	VCVTDQ2PS    Y10, Y10; \
	VMULPS       (AX), Y10, Y10; \
	VFMADD231PS  Y12, Y10, q

// Q8I2STEPL is one block of avx2Dot4Q8I2 (scale loader ld, the four rows' scales at s0-s3):
// both inputs' 32 bytes, the four rows, and every stream but the scales moved on (Q8I2STEP
// and Q8I2STEPH move those: one f32 or one half).
#define Q8I2STEPL(ld, s0, s1, s2, s3) \
	VMOVDQU    (DI), Y8; \
	VMOVDQU    (R13), Y9; \
	Q8I2ROW(ld, (SI), s0, Y0, Y4); \
	Q8I2ROW(ld, (SI)(R8*1), s1, Y1, Y5); \
	Q8I2ROW(ld, (SI)(R8*2), s2, Y2, Y6); \
	Q8I2ROW(ld, (R9), s3, Y3, Y7); \
	ADDQ       $32, SI; \
	ADDQ       $32, R9; \
	ADDQ       $32, DI; \
	ADDQ       $32, R13; \
	ADDQ       $32, DX; \
	ADDQ       $32, AX

#define Q8I2STEP \
	Q8I2STEPL(Q8SF, (BX), (BX)(R10*1), (BX)(R10*2), (R11)); \
	ADDQ $4, BX; \
	ADDQ $4, R11

#define Q8I2STEPH \
	Q8I2STEPL(Q8SH, (BX), (BX)(R10*1), (BX)(R10*2), (R11)); \
	ADDQ $2, BX; \
	ADDQ $2, R11

// Q8IWORDS sets Y13 to 16-bit ones (for VPMADDWD); clobbers AX. Q8IONES also sets R12 to the
// prefetch pointer 8 KiB ahead of the rows.
#define Q8IWORDS \
	MOVL $0x00010001, AX; \
	VMOVQ AX, X13; \
	VPBROADCASTD X13, Y13

#define Q8IONES \
	LEAQ 8192(SI), R12; \
	Q8IWORDS

// HSUM8 folds two inputs' four-row sums: Y0-Y3 into X12 and Y4-Y7 into X0 (the pair kernels'
// epilogue). Clobbers Y1-Y11.
#define HSUM8 \
	VMOVAPS Y4, Y8; \
	VMOVAPS Y5, Y9; \
	VMOVAPS Y6, Y10; \
	VMOVAPS Y7, Y11; \
	HSUM4; \
	VMOVAPS X0, X12; \
	VMOVAPS Y8, Y0; \
	VMOVAPS Y9, Y1; \
	VMOVAPS Y10, Y2; \
	VMOVAPS Y11, Y3; \
	HSUM4

// func avx2Dot4Q8I(w *int8, ldw int, scales *float32, lds int, xq *int8, xs *float32, k int, out *[4]float32)
//
// The AVX2 Q8 matrix-vector kernel on integer products: four rows of int8 weights (one scale per
// block of 32; ldw, lds in elements; ldw = lds = 0 repeats one row) against x quantised per
// block of 32 (quantizeX: xq, and xs, the block's scale repeated over its 8 int32 lanes); k a
// multiple of 32. Seven ops per row and block where widening every weight to f32
// (avx2MvQ8) takes thirteen, so more of the core's window is left for DRAM requests; the cost
// is x rounded to 8 bits per block, as in dot4Q8VNNI. Prefetches 8 KiB ahead into L2.
TEXT ·avx2Dot4Q8I(SB), NOSPLIT, $0-64
	Q8IARGS
	LEAQ  8192(SI), R12
	TESTQ CX, CX
	JLE   q8idone

q8iloop:
	Q8IPF2
	Q8ISTEP
	SUBQ $32, CX
	JGT  q8iloop

q8idone:
	HSUM4
	MOVQ    out+56(FP), AX
	VMOVUPS X0, (AX)
	VZEROUPPER
	RET

// func avx2Dot4Q8IFar(w *int8, ldw int, scales *float32, lds int, xq *int8, xs *float32, k int, out *[4]float32)
//
// avx2Dot4Q8I for four rows far apart (the avx2 plan's quarters, matVecQuarters: ldw a quarter
// of a thread's rows, four sequential streams), the same results to the bit. Where
// avx2Dot4Q8I prefetches 8 KiB ahead of its first row only (a quarter's rows follow each other,
// so that covers one stream of four), this one prefetches (PREFETCHT0) 512 bytes ahead in each
// of the four rows every block: each stream runs ahead of its reads into the next row of its
// quarter. On Zen 3 the 0.5B layers' q8 decode products in quarters ran 3-9% faster than with
// avx2Dot4Q8I (medians of 9 alternated rounds), and faster than with no prefetch in 8 of the 9
// (docs/BENCHMARKS.md, "Issue 30 on an AVX2-only CPU").
TEXT ·avx2Dot4Q8IFar(SB), NOSPLIT, $0-64
	Q8IARGS
	TESTQ CX, CX
	JLE   q8fdone

q8floop:
	Q8IPFFAR
	Q8ISTEP
	SUBQ $32, CX
	JGT  q8floop

q8fdone:
	HSUM4
	MOVQ    out+56(FP), AX
	VMOVUPS X0, (AX)
	VZEROUPPER
	RET

// func avx2Dot4Q8IH(w *int8, ldw int, scales *uint16, lds int, xq *int8, xs *float32, k int, out *[4]float32)
//
// avx2Dot4Q8I for scales held as IEEE halves (Matrix.Scales16 in rows; lds in halves): 34 bytes
// a row streams per 32 weights instead of 36. Each 128 columns widen their four rows' 16 halves
// to f32 in the frame first (Q8ISTAGE: one VCVTPH2PS and one store a row), then run
// avx2Dot4Q8I's blocks broadcasting the scales from there; the last k mod 128 columns widen
// each scale as they take it (Q8ISTEPH). Every block's arithmetic is avx2Dot4Q8I's on the same
// scale values, so its results to the bit; the same prefetch.
TEXT ·avx2Dot4Q8IH(SB), NOSPLIT, $64-64
	Q8IARGSH
	LEAQ 8192(SI), R12
	CMPQ CX, $128
	JLT  q8ihtail

q8ihloop:
	Q8ICHUNK(Q8ISTEPL, Q8IPF2)
	SUBQ $128, CX
	CMPQ CX, $128
	JGE  q8ihloop

q8ihtail:
	TESTQ CX, CX
	JLE   q8ihdone

q8ihone:
	Q8IPF2
	Q8ISTEPH
	SUBQ $32, CX
	JGT  q8ihone

q8ihdone:
	HSUM4
	MOVQ    out+56(FP), AX
	VMOVUPS X0, (AX)
	VZEROUPPER
	RET

// func avx2Dot4Q8IFarH(w *int8, ldw int, scales *uint16, lds int, xq *int8, xs *float32, k int, out *[4]float32)
//
// avx2Dot4Q8IFar for scales held as halves, as avx2Dot4Q8IH is avx2Dot4Q8I's: avx2Dot4Q8IFar's
// results to the bit, with its prefetch.
TEXT ·avx2Dot4Q8IFarH(SB), NOSPLIT, $64-64
	Q8IARGSH
	CMPQ CX, $128
	JLT  q8fhtail

q8fhloop:
	Q8ICHUNK(Q8ISTEPL, Q8IPFFAR)
	SUBQ $128, CX
	CMPQ CX, $128
	JGE  q8fhloop

q8fhtail:
	TESTQ CX, CX
	JLE   q8fhdone

q8fhone:
	Q8IPFFAR
	Q8ISTEPH
	SUBQ $32, CX
	JGT  q8fhone

q8fhdone:
	HSUM4
	MOVQ    out+56(FP), AX
	VMOVUPS X0, (AX)
	VZEROUPPER
	RET

// BFP2ROW adds one row's 32 bf16 weights (16 at a0, 16 at a1) times two deinterleaved inputs
// (R11 and R13: even values at 0 and 32, odd at 64 and 96) to the row's accumulators p (input 0)
// and q (input 1). The weights are widened once for both inputs; x comes from L1 as FMA memory
// operands, which leaves the registers for the eight accumulators.
#define BFP2ROW(a0, a1, p, q) \
	VMOVDQU     a0, Y13; \
	VPSLLD      $16, Y13, Y14; \
	VPAND       Y12, Y13, Y13; \
	VFMADD231PS (R11), Y14, p; \
	VFMADD231PS (R13), Y14, q; \
	VFMADD231PS 64(R11), Y13, p; \
	VFMADD231PS 64(R13), Y13, q; \
	VMOVDQU     a1, Y13; \
	VPSLLD      $16, Y13, Y14; \
	VPAND       Y12, Y13, Y13; \
	VFMADD231PS 32(R11), Y14, p; \
	VFMADD231PS 32(R13), Y14, q; \
	VFMADD231PS 96(R11), Y13, p; \
	VFMADD231PS 96(R13), Y13, q

// func avx2MvBF16P2(w *uint16, ldw int, x0, x1 *float32, k int, d0, d1 *float32, nrows int)
//
// avx2MvBF16P for two input rows at once (decode batches): d0[j] = Σ w[j,c]·x0[c] and d1[j] the
// same for x1, over nrows rows (a multiple of 4; ldw = 0 with nrows = 4 repeats one row), x0 and
// x1 deinterleaved, k a multiple of 32. Each weight is loaded and widened once for both inputs,
// so a batch pays the widening and the L1/L2 traffic of the weights half as often as with two
// avx2MvBF16P calls. Registers: SI row group, AX/R9 rows 0 and 3 (R8 stride in bytes), R11/R13
// the inputs, R10 columns left, DX/DI the outputs, BX rows left, R12 the prefetch pointer.
TEXT ·avx2MvBF16P2(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ ldw+8(FP), R8
	SHLQ $1, R8
	MOVQ k+32(FP), CX
	MOVQ d0+40(FP), DX
	MOVQ d1+48(FP), DI
	MOVQ nrows+56(FP), BX

bfp2rows:
	MOVL $0xFFFF0000, AX // the mask, per group: HSUM8 below takes its register
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	LEAQ 8192(SI), R12
	MOVQ SI, AX
	LEAQ (SI)(R8*2), R9
	ADDQ R8, R9
	MOVQ x0+16(FP), R11
	MOVQ x1+24(FP), R13
	MOVQ CX, R10
	ZERO8
	TESTQ R10, R10
	JLE   bfp2sum

bfp2loop:
	PREFETCHT0  (R12)
	PREFETCHT0  64(R12)
	PREFETCHT0  128(R12)
	PREFETCHT0  192(R12)
	ADDQ        $256, R12
	BFP2ROW((AX), 32(AX), Y0, Y4)
	BFP2ROW((AX)(R8*1), 32(AX)(R8*1), Y1, Y5)
	BFP2ROW((AX)(R8*2), 32(AX)(R8*2), Y2, Y6)
	BFP2ROW((R9), 32(R9), Y3, Y7)
	ADDQ        $64, AX
	ADDQ        $64, R9
	ADDQ        $128, R11
	ADDQ        $128, R13
	SUBQ        $32, R10
	JGT         bfp2loop

bfp2sum:
	HSUM8
	VMOVUPS X12, (DX)
	VMOVUPS X0, (DI)
	ADDQ    $16, DX
	ADDQ    $16, DI
	LEAQ    (SI)(R8*4), SI
	SUBQ    $4, BX
	JGT     bfp2rows
	VZEROUPPER
	RET

// func avx2Dot4Q8I2(w *int8, ldw int, scales *float32, lds int, xq0, xq1 *int8, xs0, xs1 *float32, k int, out0, out1 *[4]float32)
//
// avx2Dot4Q8I for two quantised input rows (decode batches): out0 = four rows of w against
// (xq0, xs0), out1 against (xq1, xs1). The loads, absolute values and scale broadcasts of the
// weights are shared, 3 of the 9 ops per row and block. Registers as avx2Dot4Q8I's, plus R13 xq1
// and AX xs1; accumulators Y0-Y3 (input 0) and Y4-Y7 (input 1).
TEXT ·avx2Dot4Q8I2(SB), NOSPLIT, $0-88
	Q8PTRS
	Q8I2ARGS
	TESTQ  CX, CX
	JLE    q8i2done

q8i2loop:
	Q8IPF2
	Q8I2STEP
	SUBQ $32, CX
	JGT  q8i2loop

q8i2done:
	Q8I2END

// func avx2Dot4Q8I2H(w *int8, ldw int, scales *uint16, lds int, xq0, xq1 *int8, xs0, xs1 *float32, k int, out0, out1 *[4]float32)
//
// avx2Dot4Q8I2 for scales held as halves, staged per 128 columns as in avx2Dot4Q8IH (Q8ICHUNK;
// the last k mod 128 columns widen each scale as they take it): avx2Dot4Q8I2's results to the
// bit, with its prefetch.
TEXT ·avx2Dot4Q8I2H(SB), NOSPLIT, $64-88
	Q8PTRSH
	Q8I2ARGS
	CMPQ CX, $128
	JLT  q8i2htail

q8i2hloop:
	Q8ICHUNK(Q8I2STEPL, Q8IPF2)
	SUBQ $128, CX
	CMPQ CX, $128
	JGE  q8i2hloop

q8i2htail:
	TESTQ CX, CX
	JLE   q8i2hdone

q8i2hone:
	Q8IPF2
	Q8I2STEPH
	SUBQ $32, CX
	JGT  q8i2hone

q8i2hdone:
	Q8I2END

// ---------------------------------------------------------------------------------------------
// Matrix-matrix kernel on int8 products (prefill with q8 weights on CPUs without AVX-512; see
// prefill_avx2.go).
// ---------------------------------------------------------------------------------------------

// func avx2Pack8(dst *byte, lddst int, src *byte, idx *[8]int32, n int, abs int)
//
// Packs 8 rows for avx2GemmQ8: for g < n, the 32 bytes at dst + g·lddst are the four bytes at
// src + 4·(idx[j] + g) of each row j (an AVX2 gather per group); with abs = 1 their absolute
// values (VPABSB) follow at dst + g·lddst + 32.
TEXT ·avx2Pack8(SB), NOSPLIT, $0-48
	MOVQ    dst+0(FP), DI
	MOVQ    lddst+8(FP), DX
	MOVQ    src+16(FP), SI
	MOVQ    idx+24(FP), AX
	VMOVDQU (AX), Y1
	MOVQ    n+32(FP), CX
	MOVQ    abs+40(FP), BX
	TESTQ   CX, CX
	JLE     p8done

p8loop:
	VPCMPEQD   Y2, Y2, Y2
	VPXOR      Y0, Y0, Y0
	VPGATHERDD Y2, (SI)(Y1*4), Y0
	VMOVDQU    Y0, (DI)
	TESTQ      BX, BX
	JZ         p8next
	VPABSB     Y0, Y0
	VMOVDQU    Y0, 32(DI)

p8next:
	ADDQ $4, SI
	ADDQ DX, DI
	DECQ CX
	JNZ  p8loop

p8done:
	VZEROUPPER
	RET

DATA q8x2<>+0(SB)/4, $0x7fffffff  // |x| mask
DATA q8x2<>+4(SB)/4, $0x42fe0000  // 127
DATA q8x2<>+8(SB)/4, $0x0da24260  // 1e-30, the smallest block maximum
DATA q8x2<>+12(SB)/4, $0
DATA q8x2<>+16(SB)/4, $0          // VPERMD order of avx2QuantX8's packed bytes: 0 4 1 5 2 6 3 7
DATA q8x2<>+20(SB)/4, $4
DATA q8x2<>+24(SB)/4, $1
DATA q8x2<>+28(SB)/4, $5
DATA q8x2<>+32(SB)/4, $2
DATA q8x2<>+36(SB)/4, $6
DATA q8x2<>+40(SB)/4, $3
DATA q8x2<>+44(SB)/4, $7
DATA q8x2<>+48(SB)/8, $0x0001000100010001 // 16-bit ones (VPMADDWD's memory operand)
DATA q8x2<>+56(SB)/8, $0x0001000100010001
DATA q8x2<>+64(SB)/8, $0x0001000100010001
DATA q8x2<>+72(SB)/8, $0x0001000100010001
GLOBL q8x2<>(SB), RODATA|NOPTR, $80

// func avx2QuantX8(xq *int8, xs *float32, x *float32, nblocks int)
//
// quantizeX in AVX2, without the correction (the AVX2 integer kernels need none): per block of
// 32 values, m = max|x| (at least 1e-30), q = x·(127/m) rounded to nearest (even on ties), and
// the scale m/127 for each of the block's 8 lanes. VPACKSSDW and VPACKSSWB pack within 128-bit
// lanes, so a VPERMD puts the bytes back in order.
TEXT ·avx2QuantX8(SB), NOSPLIT, $0-32
	MOVQ         xq+0(FP), DI
	MOVQ         xs+8(FP), R9
	MOVQ         x+16(FP), SI
	MOVQ         nblocks+24(FP), CX
	VBROADCASTSS q8x2<>+0(SB), Y10
	VBROADCASTSS q8x2<>+4(SB), Y11
	VBROADCASTSS q8x2<>+8(SB), Y12
	VMOVDQU      q8x2<>+16(SB), Y13
	TESTQ        CX, CX
	JLE          qx2done

qx2loop:
	VMOVUPS      (SI), Y0
	VMOVUPS      32(SI), Y1
	VMOVUPS      64(SI), Y2
	VMOVUPS      96(SI), Y3
	VANDPS       Y10, Y0, Y4
	VANDPS       Y10, Y1, Y5
	VMAXPS       Y5, Y4, Y4
	VANDPS       Y10, Y2, Y5
	VMAXPS       Y5, Y4, Y4
	VANDPS       Y10, Y3, Y5
	VMAXPS       Y5, Y4, Y4
	VPERM2F128   $1, Y4, Y4, Y5
	VMAXPS       Y5, Y4, Y4
	VPERMILPS    $0x4e, Y4, Y5
	VMAXPS       Y5, Y4, Y4
	VPERMILPS    $0xb1, Y4, Y5
	VMAXPS       Y5, Y4, Y4
	VMAXPS       Y12, Y4, Y4
	VDIVPS       Y4, Y11, Y5
	VDIVPS       Y11, Y4, Y4
	VMOVUPS      Y4, (R9)
	VMULPS       Y5, Y0, Y0
	VMULPS       Y5, Y1, Y1
	VMULPS       Y5, Y2, Y2
	VMULPS       Y5, Y3, Y3
	VCVTPS2DQ    Y0, Y0
	VCVTPS2DQ    Y1, Y1
	VCVTPS2DQ    Y2, Y2
	VCVTPS2DQ    Y3, Y3
	VPACKSSDW    Y1, Y0, Y0
	VPACKSSDW    Y3, Y2, Y2
	VPACKSSWB    Y2, Y0, Y0
	VPERMD       Y0, Y13, Y0
	VMOVDQU      Y0, (DI)
	ADDQ         $128, SI
	ADDQ         $32, DI
	ADDQ         $32, R9
	DECQ         CX
	JNZ          qx2loop

qx2done:
	VZEROUPPER
	RET


// Q8AG adds one input row's four bytes at xa (broadcast into xr) times the panel's group (Y8
// the weights, Y9 their absolute values) to the row's int32 sums ia: t = x with each weight's
// sign (VPSIGNB), VPMADDUBSW with |w| gives pairs of products (at most 2·128·127 in magnitude:
// no saturation) and VPMADDWD with 16-bit ones (Y10) sums them into the 8 rows' lanes.
#define Q8AG(xa, xr, t, ia) \
	VPBROADCASTD xa, xr; \
	VPSIGNB      Y8, xr, t; \
	VPMADDUBSW   t, Y9, t; \
	VPMADDWD     Y10, t, t; \
	VPADDD       t, ia, ia

// Q8AGRP is one group of four columns for the four input rows: the panel's 32 weights at wo(SI)
// and their absolute values at ao(SI), each row's four bytes at xo.
#define Q8AGRP(wo, ao, xo) \
	VMOVDQU wo(SI), Y8; \
	VMOVDQU ao(SI), Y9; \
	Q8AG(xo(DI), Y11, Y12, Y4); \
	Q8AG(xo(DI)(R8*1), Y13, Y14, Y5); \
	Q8AG(xo(DI)(R8*2), Y11, Y12, Y6); \
	Q8AG(xo(R9), Y13, Y14, Y7)

// Q8AF ends a block for one input row: its int32 sums ia, widened, are added to fa times the
// 8 rows' weight scales of the block (BX) times the row's x scale (xsa, broadcast); ia is
// cleared for the next block.
#define Q8AF(xsa, ia, fa) \
	VCVTDQ2PS    ia, ia; \
	VBROADCASTSS xsa, Y11; \
	VMULPS       (BX), Y11, Y11; \
	VFMADD231PS  Y11, ia, fa; \
	VPXOR        ia, ia, ia

// func avx2GemmQ8(wp *byte, sp *float32, xq *int8, ldx int, xs *float32, ldq int, nb int, m int, dst *float32, ldd int)
//
// The int8 matrix-matrix micro-kernel of the AVX2 tier: dst[i, j] = Σ_c w[j, c]·x[i, c] for 8
// weight rows j (one panel packed by avx2Pack8: per group of four columns, 32 bytes of weights
// and their 32 absolute values) and m (1..4) input rows i quantised by avx2QuantX8 (xq rows ldx
// bytes apart, xs ldq lanes apart; four rows are read, the caller pads), over nb blocks of 32
// columns. Per block and row the exact int32 sums are widened and added times the weight
// scales (sp, 32 bytes per block) × x scale. 4 int32 and 4 f32 accumulators, the group's
// weights, their absolute values and the ones stay in registers: per group 6 loads and 20 ops
// for 128 multiply-adds, where the f32 path needs 16 FMAs.
TEXT ·avx2GemmQ8(SB), NOSPLIT, $0-80
	Q8GEMMPTRS
	MOVQ         nb+48(FP), CX
	ZERO8
	VPBROADCASTD q8x2<>+48(SB), Y10

q8ablk:
	Q8AGRP(0, 32, 0)
	Q8AGRP(64, 96, 4)
	Q8AGRP(128, 160, 8)
	Q8AGRP(192, 224, 12)
	Q8AGRP(256, 288, 16)
	Q8AGRP(320, 352, 20)
	Q8AGRP(384, 416, 24)
	Q8AGRP(448, 480, 28)
	Q8AF((DX), Y4, Y0)
	Q8AF((DX)(R13*1), Y5, Y1)
	Q8AF((DX)(R13*2), Y6, Y2)
	Q8AF((R12), Y7, Y3)
	ADDQ $512, SI
	ADDQ $32, BX
	ADDQ $32, DI
	ADDQ $32, R9
	ADDQ $32, DX
	ADDQ $32, R12
	DECQ CX
	JNZ  q8ablk

	MOVQ    dst+64(FP), DX
	MOVQ    ldd+72(FP), BX
	SHLQ    $2, BX
	MOVQ    m+56(FP), AX
	VMOVUPS Y0, (DX)
	DECQ    AX
	JZ      q8adone
	ADDQ    BX, DX
	VMOVUPS Y1, (DX)
	DECQ    AX
	JZ      q8adone
	ADDQ    BX, DX
	VMOVUPS Y2, (DX)
	DECQ    AX
	JZ      q8adone
	ADDQ    BX, DX
	VMOVUPS Y3, (DX)

q8adone:
	VZEROUPPER
	RET

// G7LOAD loads the 8 lanes at AX into y and moves AX to the next row (BX bytes on); G7STORE
// stores y at DX likewise (avx2Gemv7).
#define G7LOAD(y) \
	VMOVUPS (AX), y; \
	ADDQ    BX, AX

#define G7STORE(y) \
	VMOVUPS y, (DX); \
	ADDQ    BX, DX

// G7PF prefetches (PREFETCHT0) the next four 64-byte lines at AX while R13 (the lines left) is
// above zero, then moves AX on and counts them off (avx2Gemv7's share of the prefetch walk).
#define G7PF \
	CMPQ       R13, $0; \
	JLE        7(PC); \
	PREFETCHT0 (AX); \
	PREFETCHT0 64(AX); \
	PREFETCHT0 128(AX); \
	PREFETCHT0 192(AX); \
	ADDQ       $256, AX; \
	SUBQ       $4, R13

// G7PF1 prefetches (PREFETCHT0) the next 64-byte line at AX while R13 (the lines left) is above
// zero, then moves AX on and counts it off (avx2Gemv7x16N's share of the prefetch walk: a line
// a step, the bytes a step of 16 lanes reads).
#define G7PF1 \
	CMPQ       R13, $0; \
	JLE        4(PC); \
	PREFETCHT0 (AX); \
	ADDQ       $64, AX; \
	DECQ       R13

// G7NEXT moves x and the seven scalar rows on by one step and counts it off (G7ARGS).
#define G7NEXT \
	ADDQ R8, SI; \
	ADDQ R9, DI; \
	ADDQ R9, R11; \
	ADDQ R9, R12; \
	DECQ CX

// func avx2Gemv7(x *float32, xstep int, s *float32, srow int, sstep int, steps int, dst *float32, ldd int, acc int, pf unsafe.Pointer, pfn int)
//
// Decode attention's two products on AVX2 (AttendDecode; avx2Gemv7x16 and avx2Gemv7x16N on 16
// lanes, this one on a last 8 dimensions of the value rows: pipeValueRows): dst[r, 0..8) (+)= Σ_t s[r·srow + t·sstep]·x[t·xstep + 0..8) for the 7 rows r < 7
// over steps ≥ 1 steps t; strides in elements. Per step one vector of x (Y0) meets the 7 scalars,
// each broadcast once (Y1-Y7), in 7 FMAs into 7 accumulators (Y8-Y14), so no horizontal sums;
// each sum runs over t in order, from dst's values with acc = 1, else from zero. Meanwhile it
// prefetches the pfn lines from pf, its share of decode attention's prefetch walk: four per step
// while any are left (pfn rounded up to a multiple of four, so three lines past them at most;
// pfn ≤ 4·steps; pf any address: a prefetch never faults).
TEXT ·avx2Gemv7(SB), NOSPLIT, $0-88
	G7DST
	JEQ  g7zero
	MOVQ DX, AX
	G7LOAD(Y8)
	G7LOAD(Y9)
	G7LOAD(Y10)
	G7LOAD(Y11)
	G7LOAD(Y12)
	G7LOAD(Y13)
	G7LOAD(Y14)
	JMP     g7start

g7zero:
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14

g7start:
	G7ARGS

g7loop:
	VMOVUPS      (SI), Y0
	G7PF
	VBROADCASTSS (DI), Y1
	VFMADD231PS  Y0, Y1, Y8
	VBROADCASTSS (DI)(R10*1), Y2
	VFMADD231PS  Y0, Y2, Y9
	VBROADCASTSS (DI)(R10*2), Y3
	VFMADD231PS  Y0, Y3, Y10
	VBROADCASTSS (R11), Y4
	VFMADD231PS  Y0, Y4, Y11
	VBROADCASTSS (R11)(R10*1), Y5
	VFMADD231PS  Y0, Y5, Y12
	VBROADCASTSS (R11)(R10*2), Y6
	VFMADD231PS  Y0, Y6, Y13
	VBROADCASTSS (R12), Y7
	VFMADD231PS  Y0, Y7, Y14
	G7NEXT
	JNZ          g7loop

	G7STORE(Y8)
	G7STORE(Y9)
	G7STORE(Y10)
	G7STORE(Y11)
	G7STORE(Y12)
	G7STORE(Y13)
	G7STORE(Y14)
	VZEROUPPER
	RET

// G16LOAD loads the 16 lanes at AX into ya, yb and moves AX to the next row (BX bytes on);
// G16STORE stores ya, yb at DX likewise (avx2Gemv7x16).
#define G16LOAD(ya, yb) \
	VMOVUPS (AX), ya; \
	VMOVUPS 32(AX), yb; \
	ADDQ    BX, AX

#define G16STORE(ya, yb) \
	VMOVUPS ya, (DX); \
	VMOVUPS yb, 32(DX); \
	ADDQ    BX, DX

// G16ZERO zeroes ya and yb.
#define G16ZERO(ya, yb) \
	VXORPS ya, ya, ya; \
	VXORPS yb, yb, yb

// G16ROWS applies m (G16LOAD, G16ZERO, G16STORE) to the seven rows' accumulators Y2-Y15, two
// per row, in row order.
#define G16ROWS(m) \
	m(Y2, Y3); \
	m(Y4, Y5); \
	m(Y6, Y7); \
	m(Y8, Y9); \
	m(Y10, Y11); \
	m(Y12, Y13); \
	m(Y14, Y15)

// G16LOADS loads the 14 accumulators from the seven rows of dst at AX; G16ZEROS zeroes them;
// G16STORES stores them to the seven rows at DX.
#define G16LOADS G16ROWS(G16LOAD)
#define G16ZEROS G16ROWS(G16ZERO)
#define G16STORES G16ROWS(G16STORE)

// G16STEP is one step of avx2Gemv7x16's loop: x's 16 lanes at SI (Y0 and 32(SI)) against the
// seven scalars, the prefetch share pf (G7PF or G7PF1), then the next step (G7NEXT, which sets
// the flags for the loop's JNZ).
#define G16STEP(pf) \
	VMOVUPS (SI), Y0; \
	pf; \
	G16ROW((DI), Y2, Y3); \
	G16ROW((DI)(R10*1), Y4, Y5); \
	G16ROW((DI)(R10*2), Y6, Y7); \
	G16ROW((R11), Y8, Y9); \
	G16ROW((R11)(R10*1), Y10, Y11); \
	G16ROW((R11)(R10*2), Y12, Y13); \
	G16ROW((R12), Y14, Y15); \
	G7NEXT

// G16ROW broadcasts the scalar at sp into Y1 and adds its products with the step's two vectors
// of x (Y0 and the 8 lanes at 32(SI), read by the FMA) into ya, yb (avx2Gemv7x16).
#define G16ROW(sp, ya, yb) \
	VBROADCASTSS sp, Y1; \
	VFMADD231PS  Y0, Y1, ya; \
	VFMADD231PS  32(SI), Y1, yb

// G16HALF adds the products of the 8 lanes in Y0 with the seven scalars into one accumulator
// per row (a-g): half of a bf16 step (G16STEPB). G8ROW is one row: the scalar at sp broadcast
// into Y1, times Y0, into acc.
#define G8ROW(sp, acc) \
	VBROADCASTSS sp, Y1; \
	VFMADD231PS  Y0, Y1, acc

#define G16HALF(a, b, c, d, e, f, g) \
	G8ROW((DI), a); \
	G8ROW((DI)(R10*1), b); \
	G8ROW((DI)(R10*2), c); \
	G8ROW((R11), d); \
	G8ROW((R11)(R10*1), e); \
	G8ROW((R11)(R10*2), f); \
	G8ROW((R12), g)

// G16STEPB is G16STEP over bf16 x (avx2Gemv7x16 and avx2Gemv7x16N with b16 = 1): its 16 lanes
// at SI widened exactly to f32 in Y0 (the bf16 bits are the f32's top half), 8 at a time, as no
// register is left for a second vector; lanes 0..8 meet the seven scalars into Y2, Y4, ...,
// Y14, lanes 8..16 into Y3, ..., Y15: the same FMAs into the same accumulators as G16STEP over
// the widened values.
#define G16STEPB(pf) \
	VPMOVZXWD (SI), Y0; \
	VPSLLD    $16, Y0, Y0; \
	pf; \
	G16HALF(Y2, Y4, Y6, Y8, Y10, Y12, Y14); \
	VPMOVZXWD 16(SI), Y0; \
	VPSLLD    $16, Y0, Y0; \
	G16HALF(Y3, Y5, Y7, Y9, Y11, Y13, Y15); \
	G7NEXT

// func avx2Gemv7x16(x unsafe.Pointer, xstep int, s *float32, srow int, sstep int, steps int, dst *float32, ldd int, acc int, pf unsafe.Pointer, pfn int, b16 int)
//
// avx2Gemv7 on 16 lanes: dst[r, 0..16) (+)= Σ_t s[r·srow + t·sstep]·x[t·xstep + 0..16) for the
// 7 rows r < 7, each sum over t in order (so the same bits as two avx2Gemv7 calls on lanes 0..8
// and 8..16). Two accumulators a row (Y2-Y15) give 14 independent FMA chains, enough to keep
// both FMA pipes busy through the FMA latency where avx2Gemv7's 7 chains are not, and each
// broadcast scalar meets 16 lanes. Y15 is free here: in ABI0 code X15 is scratch, and the ABI
// wrapper restores it as ABIInternal's zero register on return (cmd/compile/abi-internal.md).
// x is f32, or bf16 with b16 = 1, widened exactly in the registers as it is loaded (G16STEPB):
// the same bits as over x widened first. Prefetches as avx2Gemv7 (G7PF).
TEXT ·avx2Gemv7x16(SB), NOSPLIT, $0-96
	G7DST
	JEQ  g16zero
	MOVQ DX, AX
	G16LOADS
	JMP     g16start

g16zero:
	G16ZEROS

g16start:
	G7ARGS
	CMPQ b16+88(FP), $0
	JNE  g16b16

g16loop:
	G16STEP(G7PF)
	JNZ     g16loop
	JMP     g16done

g16b16:
	SHRQ $1, R8 // two bytes an element

g16b16loop:
	G16STEPB(G7PF)
	JNZ       g16b16loop

g16done:
	G16STORES
	VZEROUPPER
	RET

// func avx2Gemv7x16N(x unsafe.Pointer, xstep int, s *float32, srow int, sstep int, steps int, dst *float32, ldd int, acc int, pf unsafe.Pointer, pfn int, cols int, b16 int)
//
// avx2Gemv7x16 over cols lanes (a multiple of 16, at least 16; steps ≥ 1), one call: for each 16
// lanes c, dst[r, c..c+16) (+)= Σ_t s[r·srow + t·sstep]·x[t·xstep + c..c+16), so the same bits as
// one avx2Gemv7x16 call per 16 lanes, without a call's cost each (the value rows of attendAVX2's
// steps); x f32, or bf16 with b16 = 1 (G16STEPB). The prefetch share runs on across the lanes'
// loops, one line a step while lines are left (G7PF1: pfn ≤ steps·cols/16). The frame holds the
// lanes' byte offsets in dst (off) and in x (xoff) and the walk's address while AX loads
// accumulators (pfp).
TEXT ·avx2Gemv7x16N(SB), NOSPLIT, $24-104
	MOVQ pf+72(FP), AX
	MOVQ pfn+80(FP), R13
	MOVQ $0, off-8(SP)
	MOVQ $0, xoff-24(SP)

g16nlanes:
	MOVQ dst+48(FP), DX
	ADDQ off-8(SP), DX
	MOVQ ldd+56(FP), BX
	SHLQ $2, BX
	CMPQ acc+64(FP), $0
	JEQ  g16nzero
	MOVQ AX, pfp-16(SP)
	MOVQ DX, AX
	G16LOADS
	MOVQ pfp-16(SP), AX
	JMP  g16nstart

g16nzero:
	G16ZEROS

g16nstart:
	MOVQ x+0(FP), SI
	ADDQ xoff-24(SP), SI
	G7ROWS
	CMPQ b16+96(FP), $0
	JNE  g16nb16

g16nloop:
	G16STEP(G7PF1)
	JNZ     g16nloop
	ADDQ    $64, xoff-24(SP)
	JMP     g16nnext

g16nb16:
	SHRQ $1, R8 // two bytes an element

g16nb16loop:
	G16STEPB(G7PF1)
	JNZ       g16nb16loop
	ADDQ      $32, xoff-24(SP)

g16nnext:
	G16STORES
	MOVQ cols+88(FP), CX
	SHLQ $2, CX
	ADDQ $64, off-8(SP)
	CMPQ off-8(SP), CX
	JLT  g16nlanes
	VZEROUPPER
	RET
