// Weight products: out[t][n] (+)= Σ_k x[t][k]·w[n][k], x f32 (T rows of K), w bf16 row-major N×K
// (PyTorch Linear layout), out f32 with row stride ldo. accumulate adds to out (the residual
// stream) instead of overwriting it.
#pragma once
#include "common.cuh"

// GEMV_MAXT is the most input rows gemv_bf16 takes (decode and small decode batches); larger T
// goes through gemm_bf16 (or cuBLAS).
#define GEMV_MAXT 8 // the butterfly reduction below is written for 8

// gemv_bf16: G = glanes lanes per weight row (a power of two: 32 for rows of 256 weights or
// more, fewer for short rows, so that lanes are not idle), 32/G rows per warp, each row streamed
// once for all T ≤ GEMV_MAXT input rows (16-byte loads of 8 weights when K is a multiple of 8,
// else one weight per lane and step); grid ceil(N / rows per block).
KERNEL void gemv_bf16(float *__restrict__ out, const float *__restrict__ x, const bf16 *__restrict__ w, int T, int N,
                      int K, int ldo, int accumulate, int glanes) {
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int first = (blockIdx.x * (blockDim.x >> 5) + warp) * (32 / glanes); // the warp's first row
	if (first >= N)
		return; // the whole warp: its lanes stay together for the shuffles below
	int gl = lane & (glanes - 1);
	int n = first + lane / glanes;
	bool valid = n < N;
	const bf16 *wr = w + (size_t)(valid ? n : first) * K;
	float acc[GEMV_MAXT];
#pragma unroll
	for (int t = 0; t < GEMV_MAXT; t++)
		acc[t] = 0;
	if (!valid) {
	} else if ((K & 7) == 0) {
		const uint4 *w8 = (const uint4 *)wr;
		for (int k8 = gl; k8 < K / 8; k8 += glanes) {
			uint4 u = w8[k8];
			float wf[8] = {__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
			               __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u),
			               __uint_as_float(u.z << 16), __uint_as_float(u.z & 0xffff0000u),
			               __uint_as_float(u.w << 16), __uint_as_float(u.w & 0xffff0000u)};
#pragma unroll
			for (int t = 0; t < GEMV_MAXT; t++) {
				if (t < T) {
					const float4 *xv = (const float4 *)(x + (size_t)t * K + (size_t)k8 * 8);
					float4 a = xv[0], b = xv[1];
					acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x + wf[5] * b.y +
					          wf[6] * b.z + wf[7] * b.w;
				}
			}
		}
	} else {
		for (int k = gl; k < K; k += glanes) {
			float wv = bf2f(wr[k]);
#pragma unroll
			for (int t = 0; t < GEMV_MAXT; t++)
				if (t < T)
					acc[t] += wv * x[(size_t)t * K + k];
		}
	}
	if (glanes < 32) { // short rows: reduce each sum within its lane group
#pragma unroll
		for (int t = 0; t < GEMV_MAXT; t++) {
			if (t < T) {
				float v = acc[t];
				for (int o = glanes / 2; o > 0; o >>= 1)
					v += __shfl_xor_sync(FULL_MASK, v, o);
				if (gl == 0 && valid) {
					float *o = out + (size_t)t * ldo + n;
					*o = accumulate ? *o + v : v;
				}
			}
		}
		return;
	}
	float *o;
	if (T == 1) {
		float v = warp_sum(acc[0]);
		o = out + n;
		if (lane == 0)
			*o = accumulate ? *o + v : v;
		return;
	}
	// Reduce the 8 sums together, halving them at each of the first three steps (lanes keep the
	// half their lane bit selects and add the partner's copy of it): 9 shuffles instead of 40.
	// Lane l ends with the sum of row t = (l >> 2) & 7.
#pragma unroll
	for (int i = 0; i < 4; i++) {
		bool hi = lane & 16;
		float send = hi ? acc[i] : acc[4 + i];
		float keep = hi ? acc[4 + i] : acc[i];
		acc[i] = keep + __shfl_xor_sync(FULL_MASK, send, 16);
	}
#pragma unroll
	for (int i = 0; i < 2; i++) {
		bool hi = lane & 8;
		float send = hi ? acc[i] : acc[2 + i];
		float keep = hi ? acc[2 + i] : acc[i];
		acc[i] = keep + __shfl_xor_sync(FULL_MASK, send, 8);
	}
	{
		bool hi = lane & 4;
		float send = hi ? acc[0] : acc[1];
		float keep = hi ? acc[1] : acc[0];
		acc[0] = keep + __shfl_xor_sync(FULL_MASK, send, 4);
	}
	float v = acc[0];
	v += __shfl_xor_sync(FULL_MASK, v, 2);
	v += __shfl_xor_sync(FULL_MASK, v, 1);
	int t = (lane >> 2) & 7;
	if ((lane & 3) == 0 && t < T) {
		o = out + (size_t)t * ldo + n;
		*o = accumulate ? *o + v : v;
	}
}
REGISTER(gemv_bf16);

// gemm_bf16: 64×64 output tiles (64 weight rows × 64 input rows), 256 threads each computing
// 4×4 of them from 16-wide slices of K staged in shared memory; grid (ceil(N/64), ceil(T/64)).
// The fallback for prefill where cuBLAS is absent, and the reference cuBLAS is checked against.
#define GEMM_TILE 64
#define GEMM_TK 16
KERNEL void gemm_bf16(float *__restrict__ out, const float *__restrict__ x, const bf16 *__restrict__ w, int T, int N,
                      int K, int ldo, int accumulate) {
	__shared__ float xs[GEMM_TK][GEMM_TILE + 4];
	__shared__ float ws[GEMM_TK][GEMM_TILE + 4];
	int tid = threadIdx.x;
	int n0 = blockIdx.x * GEMM_TILE, t0 = blockIdx.y * GEMM_TILE;
	int tx = tid % 16, ty = tid / 16;
	float acc[4][4];
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
			acc[i][j] = 0;
	for (int k0 = 0; k0 < K; k0 += GEMM_TK) {
		for (int i = tid; i < GEMM_TILE * GEMM_TK; i += blockDim.x) {
			int r = i / GEMM_TK, c = i % GEMM_TK, k = k0 + c;
			int t = t0 + r, n = n0 + r;
			xs[c][r] = (t < T && k < K) ? x[(size_t)t * K + k] : 0.0f;
			ws[c][r] = (n < N && k < K) ? bf2f(w[(size_t)n * K + k]) : 0.0f;
		}
		__syncthreads();
#pragma unroll
		for (int c = 0; c < GEMM_TK; c++) {
			float a[4], b[4];
#pragma unroll
			for (int i = 0; i < 4; i++) {
				a[i] = xs[c][ty * 4 + i];
				b[i] = ws[c][tx * 4 + i];
			}
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					acc[i][j] += a[i] * b[j];
		}
		__syncthreads();
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		int t = t0 + ty * 4 + i;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			int n = n0 + tx * 4 + j;
			if (t < T && n < N) {
				float *o = out + (size_t)t * ldo + n;
				*o = accumulate ? *o + acc[i][j] : acc[i][j];
			}
		}
	}
}
REGISTER(gemm_bf16);
