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
