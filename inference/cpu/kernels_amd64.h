// Macros shared by the AVX-512 (kernels_amd64.s) and AVX2 (kernels_avx2_amd64.s) kernels.

// Q8PTRS loads the row pointers of the Q8 kernels (arguments w, ldw, scales, lds at 0-24(FP)):
// SI, R9 rows 0 and 3 (R8 = row stride in bytes), BX, R11 their scales (R10 = scale row stride
// in bytes, for f32 scales); Q8PTRSH is the same for scales held as halves (the H kernels).
#define Q8PTRS Q8PTRSX($2)
#define Q8PTRSH Q8PTRSX($1)

// Q8PTRSX is Q8PTRS with sh the log2 of a scale's size.
#define Q8PTRSX(sh) \
	MOVQ w+0(FP), SI; \
	MOVQ ldw+8(FP), R8; \
	ROW3(SI, R8, R9); \
	MOVQ scales+16(FP), BX; \
	MOVQ lds+24(FP), R10; \
	SHLQ sh, R10; \
	ROW3(BX, R10, R11)

// Q8VNNIARGS loads what dot4Q8VNNI and dot4Q8VNNIFar share (w, ldw, scales, lds, xq, corr, xs,
// k at 0-56(FP)): the four rows' weight and scale pointers (Q8PTRS), DI = xq, R12 = corr,
// DX = xs, CX = k, the XOR bias in Z20, the upper-half mask in K1, and zeroes Z0-Z3.
#define Q8VNNIARGS \
	Q8PTRS; \
	Q8VNNIREST

// Q8VNNIARGSH is Q8VNNIARGS for scales held as halves (dot4Q8VNNIH, dot4Q8VNNIFarH).
#define Q8VNNIARGSH \
	Q8PTRSH; \
	Q8VNNIREST

// Q8VNNIREST is Q8VNNIARGS after the row pointers.
#define Q8VNNIREST \
	MOVQ         xq+32(FP), DI; \
	MOVQ         corr+40(FP), R12; \
	MOVQ         xs+48(FP), DX; \
	MOVQ         k+56(FP), CX; \
	MOVL         $0x80808080, AX; \
	VPBROADCASTD AX, Z20; \
	MOVL         $0xFF00, AX; \
	KMOVW        AX, K1; \
	ZERO4ACC

// ROW3 sets r to the address of row 3 from base b, s bytes per row (rows 1 and 2 are then
// (b)(s*1) and (b)(s*2), rows 4 and 5 (r)(s*1) and (r)(s*2)).
#define ROW3(b, s, r) \
	LEAQ (b)(s*2), r; \
	ADDQ s, r

// Q8GEMMPTRS loads the arguments the int8 matrix-matrix kernels share (wp, sp, xq, ldx, xs, ldq
// at 0-40(FP)): SI packed weights, BX packed scales, DI and R9 input rows 0 and 3 (R8 = row
// stride in bytes), DX and R12 their x scales (R13 = stride in bytes).
#define Q8GEMMPTRS \
	MOVQ wp+0(FP), SI; \
	MOVQ sp+8(FP), BX; \
	MOVQ xq+16(FP), DI; \
	MOVQ ldx+24(FP), R8; \
	ROW3(DI, R8, R9); \
	MOVQ xs+32(FP), DX; \
	MOVQ ldq+40(FP), R13; \
	SHLQ $2, R13; \
	ROW3(DX, R13, R12)
