// cudaemu.h: the part of CUDA C++ the kernels use, for compiling them as ordinary C++ on the
// CPU (the cudaemu build tag). emu_runtime.cc implements it: a block's threads are fibers run
// by one OS thread, switched only at barriers and warp operations, so __syncthreads, shuffles
// and votes have their real semantics (a thread waits until the others arrive); blocks run on
// several OS threads at once, so atomics are real atomics. __shared__ variables are
// thread_local statics: shared by the fibers of a block, distinct between blocks running at
// once. Not modelled: timing, the memory model's reorderings, warp divergence inside one warp
// (lanes run one after another between warp operations), PTX code generation.
#ifndef CHAINEDSQL_CUDAEMU_H
#define CHAINEDSQL_CUDAEMU_H
#include <math.h>
#include <stdint.h>
#include <string.h>

struct dim3 {
	unsigned int x, y, z;
};

extern thread_local dim3 emu_thread_idx, emu_block_idx, emu_block_dim, emu_grid_dim;
extern thread_local void *emu_dyn_shared;

#define threadIdx emu_thread_idx
#define blockIdx emu_block_idx
#define blockDim emu_block_dim
#define gridDim emu_grid_dim
#define warpSize 32

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static thread_local

// The synchronising operations are out-of-line calls, so the compiler reloads threadIdx (a
// thread_local the scheduler rewrites for every fiber it resumes) after each of them.
void __syncthreads(void);
void __syncwarp(unsigned mask = 0xffffffffu);
float __shfl_sync(unsigned mask, float v, int src, int width = 32);
int __shfl_sync(unsigned mask, int v, int src, int width = 32);
unsigned __shfl_sync(unsigned mask, unsigned v, int src, int width = 32);
float __shfl_xor_sync(unsigned mask, float v, int lane_mask, int width = 32);
int __shfl_xor_sync(unsigned mask, int v, int lane_mask, int width = 32);
unsigned __shfl_xor_sync(unsigned mask, unsigned v, int lane_mask, int width = 32);
float __shfl_down_sync(unsigned mask, float v, unsigned delta, int width = 32);
int __shfl_down_sync(unsigned mask, int v, unsigned delta, int width = 32);
unsigned __shfl_down_sync(unsigned mask, unsigned v, unsigned delta, int width = 32);
unsigned __ballot_sync(unsigned mask, int pred);
int __any_sync(unsigned mask, int pred);
int __all_sync(unsigned mask, int pred);
// emu_mma_bf16 is mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (see mma_bf16 in
// kernels/common.cuh): a warp operation of all 32 lanes, each posting its fragments of a and b.
void emu_mma_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]);

inline float atomicAdd(float *p, float v) {
	uint32_t old = __atomic_load_n((uint32_t *)p, __ATOMIC_RELAXED), want;
	float f;
	do {
		memcpy(&f, &old, 4);
		f += v;
		memcpy(&want, &f, 4);
	} while (!__atomic_compare_exchange_n((uint32_t *)p, &old, want, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	memcpy(&f, &old, 4);
	return f;
}
inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline int atomicMax(int *p, int v) {
	int old = __atomic_load_n(p, __ATOMIC_RELAXED);
	while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
	}
	return old;
}
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
	return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
// emu_atomic_min_max is atomicMin (MAX false) or atomicMax on an integer of type T.
template <bool MAX, typename T> inline T emu_atomic_min_max(T *p, T v) {
	T old = __atomic_load_n(p, __ATOMIC_RELAXED);
	while ((MAX ? old < v : v < old) &&
	       !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
	}
	return old;
}
inline unsigned atomicMin(unsigned *p, unsigned v) { return emu_atomic_min_max<false>(p, v); }
inline unsigned atomicMax(unsigned *p, unsigned v) { return emu_atomic_min_max<true>(p, v); }
inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) { return emu_atomic_min_max<false>(p, v); }
inline unsigned long long atomicMax(unsigned long long *p, unsigned long long v) { return emu_atomic_min_max<true>(p, v); }
inline unsigned atomicCAS(unsigned *p, unsigned cmp, unsigned v) {
	__atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	return cmp;
}

inline float __uint_as_float(unsigned u) {
	float f;
	memcpy(&f, &u, 4);
	return f;
}
inline unsigned __float_as_uint(float f) {
	unsigned u;
	memcpy(&u, &f, 4);
	return u;
}
inline long long __double_as_longlong(double d) {
	long long u;
	memcpy(&u, &d, 8);
	return u;
}
inline double __longlong_as_double(long long u) {
	double d;
	memcpy(&d, &u, 8);
	return d;
}
inline float __expf(float x) { return expf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }

// uint4 / float4 / float2 as the vector loads use them.
struct uint4 {
	unsigned int x, y, z, w;
};
struct uint2 {
	unsigned int x, y;
};
struct float4 {
	float x, y, z, w;
};
struct float2 {
	float x, y;
};

// Dynamic shared memory: extern __shared__ arrays become a pointer to the block's buffer.
#define DYN_SHARED(type, name) type *name = (type *)emu_dyn_shared

// KERNEL declares a kernel entry point.
#define KERNEL extern "C"

#endif
