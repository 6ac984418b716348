import evex
out = []
P = out.append
P(r'''
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
''')


def gemm_q8(half):
    """gemmQ8VNNI (f32 scales, half False) or gemmQ8VNNIH (IEEE half scales, half True)."""
    name, st = ('gemmQ8VNNIH', 'uint16') if half else ('gemmQ8VNNI', 'float32')
    text = HEAD.replace('gemmQ8VNNI(', name + '(').replace('sp *float32', 'sp *' + st)
    if half:
        text = text[:text.index('\n//\n') + 4] + DOC16 + text[text.index('TEXT '):]
    P(text)
    for g in range(8):
        P('\tQ8GG(%d, %d, %d)' % (g*128, g*128+64, g*4))
    t = TAIL
    if half:
        t = t.replace(LOAD32, LOAD16).replace('ADDQ $128, BX', 'ADDQ $64, BX')
    P(t.rstrip('\n') + '\n')


HEAD = r'''// func gemmQ8VNNI(wp *byte, sp *float32, xq *int8, ldx int, xs *float32, ldq int, corr *int32, ldc int, nb int, m int, dst *float32, ldd int, m0, m1 int, acc int)
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
'''
TAIL = r'''	VMOVUPS (BX), Z28
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

'''
DOC16 = '''// gemmQ8VNNI for weights in panels at load (Matrix.Q8Panels), whose scales are IEEE halves,
// 64 bytes per block (Matrix.Scales16), each widened exactly by VCVTPH2PS: the results of
// gemmQ8VNNI over the same scales in f32.
'''
LOAD32 = '\tVMOVUPS (BX), Z28\n\tVMOVUPS 64(BX), Z29\n'
LOAD16 = '\tVCVTPH2PS (BX), Z28\n\tVCVTPH2PS 32(BX), Z29\n'
assert LOAD32 in TAIL
gemm_q8(False)
gemm_q8(True)
P(r'''// func cvtX16(dst *uint16, src *float32, n int)   (n a multiple of 32)
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
''' + evex.go('VCVTNE2PS2BF16', 2, 1, 0) + r'''
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
''')
accs = [[0,1,2,3],[4,5,6,7],[8,9,10,11],[16,17,18,19],[20,21,22,23],[24,25,26,27]]
wregs = [12,13,14,28]
for i in range(6):
    xr = 30 if i%2==0 else 31
    for p in range(4):
        b = evex.enc('VDPBF16PS', accs[i][p], wregs[p], xr)
        P('#define DPBF_%d_%d_%d %s' % (xr, wregs[p], accs[i][p], '; '.join('BYTE $0x%02x' % x for x in b)))
P(r'''
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
''')
P('\nbfgloop:')
P('\tVMOVDQU32 (SI), Z12\n\tVMOVDQU32 64(SI), Z13\n\tVMOVDQU32 128(SI), Z14\n\tVMOVDQU32 192(SI), Z28')
xaddr = ['(DI)', '(DI)(R8*1)', '(DI)(R8*2)', '(R9)', '(R9)(R8*1)', '(R9)(R8*2)']
for i in range(6):
    xr = 30 if i%2==0 else 31
    P('\tBFGROW(%s, Z%d, %s)' % (xaddr[i], xr, ', '.join('DPBF_%d_%d_%d' % (xr, wregs[p], accs[i][p]) for p in range(4))))
P(r'''	ADDQ $256, SI
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
	RET''')
print('\n'.join(out))
