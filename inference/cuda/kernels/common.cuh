// Shared definitions of the kernels: bf16 conversions, warp/block reductions and the bf16
// tensor-core product (mma_bf16). Compiled by
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

// pack_bf16 rounds lo and hi to bf16 (to nearest even) and packs them into one 32-bit word, lo in
// the low half: the operand registers of mma_bf16 hold consecutive elements so.
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
#ifdef __CUDACC__
	unsigned u;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
	return u;
#else
	return (unsigned)f2bf(lo) | ((unsigned)f2bf(hi) << 16);
#endif
}

// split_bf16 writes x0 and x1 (consecutive elements) as two bf16 pairs, hi = their rounding and
// lo = the rounding of what hi leaves out, so that hi + lo holds each to 2^-17 of itself (16
// significant bits instead of bf16's 8): a product taken as hi·b + lo·b loses next to nothing
// to the operand's rounding when b is bf16 already.
__device__ __forceinline__ void split_bf16(float x0, float x1, unsigned *hi, unsigned *lo) {
	unsigned h = pack_bf16(x0, x1);
	*hi = h;
	*lo = pack_bf16(x0 - __uint_as_float(h << 16), x1 - __uint_as_float(h & 0xffff0000u));
}

// mma_bf16 is one warp's tensor-core product d = a·b + c of a 16×16 bf16 matrix a and a 16×8
// bf16 matrix b, with f32 c and d (16×8): PTX mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32.
// Every lane of the warp must call it together (it is a warp-collective operation, like a
// shuffle); each holds a fragment of each matrix, laid out as the PTX ISA gives for m16n8k16
// (g = lane / 4, t = lane % 4; two bf16 per word, the lower-indexed element in the low half):
//   a[0] = a(g, 2t..2t+1), a[1] = a(g+8, 2t..2t+1), a[2] = a(g, 2t+8..2t+9), a[3] = a(g+8, 2t+8..2t+9)
//   b[0] = b(2t..2t+1, g), b[1] = b(2t+8..2t+9, g)
//   c[i], d[i] = (g, 2t + i) for i < 2, (g+8, 2t + i - 2) for i ≥ 2.
// d may be c. Under cudaemu, emu_mma_bf16 (emu_runtime.cc) gathers the lanes' fragments at a
// warp operation and computes each lane's d from the whole matrices.
__device__ __forceinline__ void mma_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
#ifdef __CUDACC__
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	             "{%10,%11,%12,%13};"
	             : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
	               "f"(c[2]), "f"(c[3]));
#else
	emu_mma_bf16(d, a, b, c);
#endif
}
