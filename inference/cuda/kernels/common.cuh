// Shared definitions of the kernels: bf16 conversions and warp/block reductions. Compiled by
// nvcc to PTX (gen.sh) and, under the cudaemu build tag, as C++ for the CPU (../cudaemu.h).
#pragma once

#ifdef __CUDACC__
#define KERNEL extern "C" __global__
#define DYN_SHARED(type, name) extern __shared__ type name[]
#define REGISTER(name)
#else
#include "../cudaemu.h"
#include "../emu_registry.h"
#endif

#define FULL_MASK 0xffffffffu

// bf16 is bfloat16 bits: weights and the KV cache are held in it, arithmetic is f32.
typedef unsigned short bf16;

__device__ __forceinline__ float bf2f(bf16 h) { return __uint_as_float(((unsigned)h) << 16); }

// f2bf rounds to nearest even (as cpu.F32ToBF16), keeping NaNs NaN.
__device__ __forceinline__ bf16 f2bf(float f) {
	unsigned u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (bf16)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (bf16)(u >> 16);
}

__device__ __forceinline__ float warp_sum(float v) {
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(FULL_MASK, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v) {
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
	return v;
}

// block_reduce returns the sum (or, with MAX, the maximum; NaNs lose to numbers, as fmaxf) of
// v over the block (blockDim.x a multiple of 32) to every thread. red is 32 floats of shared
// memory; the call ends with a barrier, so red may be reused at once.
template <bool MAX> __device__ __forceinline__ float block_reduce(float v, float *red) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	v = MAX ? warp_max(v) : warp_sum(v);
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	v = lane < (int)(blockDim.x >> 5) ? red[lane] : (MAX ? -INFINITY : 0.0f);
	v = MAX ? warp_max(v) : warp_sum(v);
	__syncthreads();
	return v;
}

__device__ __forceinline__ float block_sum(float v, float *red) { return block_reduce<false>(v, red); }
__device__ __forceinline__ float block_max(float v, float *red) { return block_reduce<true>(v, red); }
