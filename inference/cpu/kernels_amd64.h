// Macros shared by the AVX-512 (kernels_amd64.s) and AVX2 (kernels_avx2_amd64.s) kernels.

// Q8PTRS loads the row pointers of the Q8 kernels (arguments w, ldw, scales, lds at 0-24(FP)):
// SI, R9 rows 0 and 3 (R8 = row stride in bytes), BX, R11 their scales (R10 = scale row stride
// in bytes).
#define Q8PTRS \
	MOVQ w+0(FP), SI; \
	MOVQ ldw+8(FP), R8; \
	LEAQ (SI)(R8*2), R9; \
	ADDQ R8, R9; \
	MOVQ scales+16(FP), BX; \
	MOVQ lds+24(FP), R10; \
	SHLQ $2, R10; \
	LEAQ (BX)(R10*2), R11; \
	ADDQ R10, R11
