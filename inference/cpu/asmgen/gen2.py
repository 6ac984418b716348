out = []
P = out.append
P(r'''
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

''')

P(r"""// Q8AG adds one input row's four bytes at xa (broadcast into xr) times the panel's group (Y8
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

q8ablk:""")
xa = ['(DI)', '(DI)(R8*1)', '(DI)(R8*2)', '(R9)']
for g in range(8):
    P('\tQ8AGRP(%d, %d, %d)' % (g*64, g*64+32, g*4))
P(r"""	Q8AF((DX), Y4, Y0)
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
	RET""")
print('\n'.join(out))
