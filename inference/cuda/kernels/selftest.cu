// selftest exercises the CUDA features the emulator models (barriers with shared memory, warp
// shuffles of each kind, votes, atomics), so that the same test checks the emulator here and the
// hardware on a GPU (TestSelftest).
#pragma once
#include "common.cuh"

// selftest: block 64 (two warps), grid G. For thread i of block b with v = b·64 + i:
// out[v·8 + 0] = shfl_xor(v, 1), +1 = shfl_down(v, 3) (own value past the warp's end),
// +2 = shfl(v, lane 5), +3 = ballot(v odd), +4 = any(v == b·64 + 40), +5 = all(v < 1e9),
// +6 = the block's sum of v through shared memory and a barrier, +7 = this thread's value of
// the reversed shared array (shared[63 - i], in dynamic shared memory: launch with 256 bytes);
// counter gets atomicAdd(1) per thread and fsum atomicAdd(0.5f).
KERNEL void selftest(int *__restrict__ out, int *__restrict__ counter, float *__restrict__ fsum) {
	DYN_SHARED(int, sh);
	__shared__ int total;
	int i = threadIdx.x, b = blockIdx.x, v = b * 64 + i;
	int *o = out + (size_t)v * 8;
	o[0] = __shfl_xor_sync(FULL_MASK, v, 1);
	o[1] = __shfl_down_sync(FULL_MASK, v, 3);
	o[2] = __shfl_sync(FULL_MASK, v, 5);
	o[3] = (int)__ballot_sync(FULL_MASK, v & 1);
	o[4] = __any_sync(FULL_MASK, v == b * 64 + 40);
	o[5] = __all_sync(FULL_MASK, v < 1000000000);
	sh[i] = v;
	if (i == 0)
		total = 0;
	__syncthreads();
	atomicAdd(&total, v);
	__syncthreads();
	o[6] = total;
	o[7] = sh[63 - i];
	atomicAdd(counter, 1);
	atomicAdd(fsum, 0.5f);
}
REGISTER(selftest);

// mma_selftest checks mma_bf16 (TestMMA): block 64 (two warps), grid G; warp w of block b takes
// the matrices of set m = 2b + w: a + m·256 (16×16, row-major), bm + m·128 (16×8, b(k, n) at
// k·8 + n) and c + m·128 (16×8, row-major). Each lane loads its fragments element by element
// with the PTX ISA's formulas for m16n8k16 (element i of a fragment, low half first) and writes
// its four values of d = a·b + c to out[(m·32 + lane)·8 + i], then those of a·b + d (the
// product accumulated onto its own result) to out[(m·32 + lane)·8 + 4 + i].
KERNEL void mma_selftest(float *__restrict__ out, const bf16 *__restrict__ a, const bf16 *__restrict__ bm,
                         const float *__restrict__ c) {
	int lane = threadIdx.x & 31, m = blockIdx.x * 2 + (threadIdx.x >> 5);
	int gid = lane >> 2, tig = lane & 3;
	a += (size_t)m * 256;
	bm += (size_t)m * 128;
	c += (size_t)m * 128;
	unsigned af[4] = {0, 0, 0, 0}, bf[2] = {0, 0};
	float cf[4], d[4];
	for (int i = 0; i < 8; i++) {
		int row = (i < 2 || (i >= 4 && i < 6)) ? gid : gid + 8;
		int col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
		af[i / 2] |= (unsigned)a[row * 16 + col] << (16 * (i & 1));
	}
	for (int i = 0; i < 4; i++) {
		int row = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0), col = gid;
		bf[i / 2] |= (unsigned)bm[row * 8 + col] << (16 * (i & 1));
	}
	for (int i = 0; i < 4; i++) {
		int row = i < 2 ? gid : gid + 8, col = tig * 2 + (i & 1);
		cf[i] = c[row * 8 + col];
	}
	float *o = out + ((size_t)m * 32 + lane) * 8;
	mma_bf16(d, af, bf, cf);
	for (int i = 0; i < 4; i++)
		o[i] = d[i];
	mma_bf16(d, af, bf, d);
	for (int i = 0; i < 4; i++)
		o[4 + i] = d[i];
}
REGISTER(mma_selftest);
