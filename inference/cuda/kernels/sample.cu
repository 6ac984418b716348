// Sampling on the device: one block per row of logits.
#pragma once
#include "common.cuh"

// argmax_rows: out[r] = the index of the largest logit of row r, the lowest index on ties, NaNs
// ignored (0 when the row is all NaN), as the host sampler's argmax. Block: a multiple of 32.
KERNEL void argmax_rows(int *__restrict__ out, const float *__restrict__ logits, int V) {
	__shared__ float sv[32];
	__shared__ int si[32];
	const float *l = logits + (size_t)blockIdx.x * V;
	float bv = -INFINITY;
	int bi = -1;
	for (int i = threadIdx.x; i < V; i += blockDim.x) {
		float v = l[i];
		if (v == v && (bi < 0 || v > bv)) {
			bv = v;
			bi = i;
		}
	}
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	for (int pass = 0; pass < 2; pass++) {
		for (int o = 16; o > 0; o >>= 1) {
			float ov = __shfl_xor_sync(FULL_MASK, bv, o);
			int oi = __shfl_xor_sync(FULL_MASK, bi, o);
			if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
				bv = ov;
				bi = oi;
			}
		}
		if (pass == 1)
			break;
		if (lane == 0) {
			sv[warp] = bv;
			si[warp] = bi;
		}
		__syncthreads();
		bool in = lane < (int)(blockDim.x >> 5);
		bv = in ? sv[lane] : -INFINITY;
		bi = in ? si[lane] : -1;
	}
	if (threadIdx.x == 0)
		out[blockIdx.x] = bi < 0 ? 0 : bi;
}
REGISTER(argmax_rows);

// sample_rows draws one token per row from softmax(logits / temperature) restricted to the
// nucleus: params holds per row (1/temperature, top_p, u) with u uniform in [0, 1). p_i =
// exp((l_i - max)/T) goes to scratch (rows of V floats). With top_p < 1 the kept set is
// {i : p_i ≥ τ} for the largest τ whose kept mass reaches top_p of the total (the smallest
// most-likely prefix, ties at the edge kept), found by bisection on τ's bits; the token is
// the first index, in vocabulary order, where the kept mass summed so far exceeds u times the
// kept total. Block: a multiple of 32, at most 1024.
KERNEL void sample_rows(int *__restrict__ out, const float *__restrict__ logits, const float *__restrict__ params,
                        float *__restrict__ scratch, int V) {
	__shared__ float red[32];
	__shared__ float pre[1024];
	__shared__ int pick;
	int r = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
	const float *l = logits + (size_t)r * V;
	float *p = scratch + (size_t)r * V;
	float inv_t = params[3 * r], top_p = params[3 * r + 1], u = params[3 * r + 2];
	float mx = -INFINITY;
	for (int i = tid; i < V; i += nt)
		if (l[i] == l[i])
			mx = fmaxf(mx, l[i]);
	mx = block_max(mx, red);
	float z = 0;
	for (int i = tid; i < V; i += nt) {
		float e = l[i] == l[i] ? expf((l[i] - mx) * inv_t) : 0.0f;
		p[i] = e;
		z += e;
	}
	z = block_sum(z, red);
	float tau = 0, kept = z;
	if (top_p < 1.0f) {
		float target = top_p * z;
		unsigned lo = 0, hi = __float_as_uint(1.0f); // the largest p is exp(0) = 1
		while (lo < hi) {
			unsigned mid = lo + (hi - lo + 1) / 2;
			float th = __uint_as_float(mid), s = 0;
			for (int i = tid; i < V; i += nt)
				if (p[i] >= th)
					s += p[i];
			s = block_sum(s, red);
			if (s >= target) {
				lo = mid;
				kept = s;
			} else {
				hi = mid - 1;
			}
		}
		tau = __uint_as_float(lo);
		if (lo == 0)
			kept = z;
	}
	// Each thread owns a contiguous chunk; an exclusive scan over the chunks' kept mass finds the
	// chunk holding u·kept, and its thread walks it.
	int chunk = (V + nt - 1) / nt, c0 = tid * chunk, c1 = min(V, c0 + chunk);
	float s = 0;
	for (int i = c0; i < c1; i++)
		if (p[i] >= tau)
			s += p[i];
	pre[tid] = s;
	if (tid == 0)
		pick = -1;
	__syncthreads();
	if (tid == 0) {
		float run = 0;
		for (int i = 0; i < nt; i++) {
			float v = pre[i];
			pre[i] = run;
			run += v;
		}
	}
	__syncthreads();
	float target = u * kept, run = pre[tid];
	if (s > 0 && run <= target && target < run + s) {
		for (int i = c0; i < c1; i++) {
			if (p[i] >= tau) {
				run += p[i];
				if (run > target) {
					pick = i;
					break;
				}
			}
		}
		if (pick < 0) { // rounding: take the chunk's last kept token
			for (int i = c1 - 1; i >= c0; i--)
				if (p[i] >= tau) {
					pick = i;
					break;
				}
		}
	}
	__syncthreads();
	if (tid == 0) {
		int k = pick;
		if (k < 0) // u·kept at or past the total by rounding: the last kept token
			for (int i = V - 1; i >= 0 && k < 0; i--)
				if (p[i] >= tau)
					k = i;
		out[r] = k < 0 ? 0 : k;
	}
}
REGISTER(sample_rows);
