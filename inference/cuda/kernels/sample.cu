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

// The sampler below works in double precision, as generate's host sampler does, so that a
// seeded request draws the same tokens on both backends: p_i = exp(double(l_i - max) · 1/T),
// with l_i - max rounded to f32 first exactly as the host computes it, and every mass summed in
// f64. A token's rank is by falling p, the lower index first on ties (the host's ranksBefore);
// "kept" is a prefix of that order named by its last token: p > vc, or p == vc and i ≤ ic.

// SAMPLE_BLOCK is the block size sample_rows is launched with (ops.go: sampleBlock).
#define SAMPLE_BLOCK 256
// SAMPLE_LIST is the most tokens of one threshold bucket that sample_search ranks by sorting
// them on one thread; a larger bucket is walked with a block reduction per token.
#define SAMPLE_LIST 256

__device__ __forceinline__ bool kept_tok(double v, int i, double vc, int ic) { return v > vc || (v == vc && i <= ic); }

// ranks_before: token (va, a) comes before (vb, b) in the sampling order.
__device__ __forceinline__ bool ranks_before(double va, int a, double vb, int b) { return va > vb || (va == vb && a < b); }

// block_sum_d returns the f64 sum of v over the block to every thread, in a fixed order (a
// tree over the threads), so that a row's sums are the same from run to run. sh holds
// SAMPLE_BLOCK doubles; blockDim.x is SAMPLE_BLOCK.
__device__ double block_sum_d(double v, double *sh) {
	int tid = threadIdx.x;
	sh[tid] = v;
	__syncthreads();
	for (int s = SAMPLE_BLOCK / 2; s > 0; s >>= 1) {
		if (tid < s)
			sh[tid] += sh[tid + s];
		__syncthreads();
	}
	double r = sh[0];
	__syncthreads();
	return r;
}

// block_first returns, to every thread, the id of the first-ranked token among those the
// threads offer (id < 0: none), or -1. sv, si hold SAMPLE_BLOCK entries each.
__device__ int block_first(double v, int id, double *sv, int *si) {
	int tid = threadIdx.x;
	sv[tid] = v;
	si[tid] = id;
	__syncthreads();
	for (int s = SAMPLE_BLOCK / 2; s > 0; s >>= 1) {
		if (tid < s) {
			int o = si[tid + s];
			if (o >= 0 && (si[tid] < 0 || ranks_before(sv[tid + s], o, sv[tid], si[tid]))) {
				sv[tid] = sv[tid + s];
				si[tid] = o;
			}
		}
		__syncthreads();
	}
	int r = si[0];
	__syncthreads();
	return r;
}

// hiword is the upper 32 bits of v's encoding: for v ≥ 0 they rise with v.
__device__ __forceinline__ unsigned hiword(double v) { return (unsigned)__double2hiint(v); }

// kept_mass sums over the kept tokens with p > 0 whose hiword is at least h: their count
// (count) or their probability mass.
__device__ double kept_mass(const double *p, int V, unsigned h, double vc, int ic, bool count, double *sh) {
	double s = 0;
	for (int i = threadIdx.x; i < V; i += SAMPLE_BLOCK) {
		double v = p[i];
		if (v > 0 && hiword(v) >= h && kept_tok(v, i, vc, ic))
			s += count ? 1.0 : v;
	}
	return block_sum_d(s, sh);
}

// Sampling scratch in shared memory.
struct sample_shared {
	double d[SAMPLE_BLOCK];
	int id[SAMPLE_BLOCK];
	int list[SAMPLE_LIST];
	int n, pick;
};

// sample_search walks the kept tokens with p > 0 in rank order, adding up their count (count)
// or mass, and returns the first token at which the sum passes target (sum > target with
// strict, else sum ≥ target), or -1 when the whole sum does not. A bisection on the hiword
// (30 passes) finds the bucket of equal hiwords that holds it; that bucket's tokens are then
// ranked exactly and summed one by one after the mass of the buckets above it. Not inlined:
// sample_rows calls it up to four times, and one copy keeps the PTX small.
__device__ __noinline__ int sample_search(const double *p, int V, double vc, int ic, bool count, bool strict, double target,
                             sample_shared *sh) {
	unsigned lo = 0, hi = hiword(1.0);
	while (lo < hi) {
		unsigned mid = lo + (hi - lo + 1) / 2;
		double s = kept_mass(p, V, mid, vc, ic, count, sh->d);
		if (strict ? s > target : s >= target)
			lo = mid;
		else
			hi = mid - 1;
	}
	if (lo == 0) { // the bisection never tried the bottom bucket
		double s = kept_mass(p, V, 0, vc, ic, count, sh->d);
		if (!(strict ? s > target : s >= target))
			return -1;
	}
	double acc = lo < hiword(1.0) ? kept_mass(p, V, lo + 1, vc, ic, count, sh->d) : 0.0;
	if (threadIdx.x == 0)
		sh->n = 0;
	__syncthreads();
	for (int i = threadIdx.x; i < V; i += SAMPLE_BLOCK) {
		double v = p[i];
		if (v > 0 && hiword(v) == lo && kept_tok(v, i, vc, ic)) {
			int k = atomicAdd(&sh->n, 1);
			if (k < SAMPLE_LIST)
				sh->list[k] = i;
		}
	}
	__syncthreads();
	int n = sh->n, found = -1;
	if (n <= SAMPLE_LIST) {
		if (threadIdx.x == 0) {
			int *L = sh->list;
			for (int a = 1; a < n; a++) { // insertion sort into rank order
				int x = L[a], b = a;
				for (; b > 0 && ranks_before(p[x], x, p[L[b - 1]], L[b - 1]); b--)
					L[b] = L[b - 1];
				L[b] = x;
			}
			for (int a = 0; a < n && found < 0; a++) {
				acc += count ? 1.0 : p[L[a]];
				if (strict ? acc > target : acc >= target)
					found = L[a];
			}
			if (found < 0 && n > 0) // the bucket's own sum fell short by rounding: its last token
				found = L[n - 1];
			sh->pick = found;
		}
		__syncthreads();
		return sh->pick; // rewritten only after the barriers of another search

	}
	// A bucket too large to list: take its tokens in rank order, one block reduction each.
	double pv = INFINITY;
	int pi = -1;
	for (int a = 0; a < n; a++) {
		double bv = 0;
		int bi = -1;
		for (int i = threadIdx.x; i < V; i += SAMPLE_BLOCK) {
			double v = p[i];
			if (v > 0 && hiword(v) == lo && kept_tok(v, i, vc, ic) && ranks_before(pv, pi, v, i) &&
			    (bi < 0 || ranks_before(v, i, bv, bi))) {
				bv = v;
				bi = i;
			}
		}
		int b = block_first(bv, bi, sh->d, sh->id);
		if (b < 0)
			break;
		pv = p[b];
		pi = b;
		acc += count ? 1.0 : pv;
		if (strict ? acc > target : acc >= target)
			return b;
	}
	return pi;
}

// sample_rows picks one token per row of logits as generate's host sampler does and writes its
// log-probability: params holds per row four doubles (1/T, top_p, u, top_k) with u uniform in
// [0, 1). top_k 1 is greedy: the token is greedy[r] (argmax_rows' pick) and 1/T only scales
// the log-probability. Otherwise the row draws from softmax(l/T), cut to the top_k most likely
// tokens (0: off) and then to the shortest rank-order prefix whose mass reaches top_p of what
// is left (1: off); with neither cut the draw walks the vocabulary in index order, else in rank
// order, to the first token where the mass summed so far exceeds u times the kept mass. lp[r]
// is the token's log-softmax of l/T over the whole vocabulary (before the cuts), at most 0.
// scratch holds V doubles per row. Block: SAMPLE_BLOCK threads.
KERNEL void sample_rows(int *__restrict__ out, float *__restrict__ lp, const int *__restrict__ greedy,
                        const float *__restrict__ logits, const double *__restrict__ params, double *__restrict__ scratch,
                        int V) {
	__shared__ sample_shared sh;
	__shared__ float red[32];
	int r = blockIdx.x, tid = threadIdx.x;
	const float *l = logits + (size_t)r * V;
	double *p = scratch + (size_t)r * V;
	double inv_t = params[4 * r], top_p = params[4 * r + 1], u = params[4 * r + 2];
	int k = (int)params[4 * r + 3];
	float mx = -INFINITY;
	for (int i = tid; i < V; i += SAMPLE_BLOCK)
		if (l[i] == l[i])
			mx = fmaxf(mx, l[i]);
	mx = block_max(mx, red);
	double z = 0;
	for (int i = tid; i < V; i += SAMPLE_BLOCK) {
		double e = l[i] == l[i] ? exp((double)(l[i] - mx) * inv_t) : 0.0;
		p[i] = e;
		z += e;
	}
	z = block_sum_d(z, sh.d);
	int tok = -1;
	if (k == 1) {
		tok = greedy[r];
	} else if ((k <= 0 || k >= V) && !(top_p < 1)) {
		// No cut: walk the vocabulary in index order. Each thread owns a contiguous chunk; an
		// exclusive scan over the chunks' mass finds the chunk holding u·z, and its thread walks it.
		int chunk = (V + SAMPLE_BLOCK - 1) / SAMPLE_BLOCK, c0 = min(V, tid * chunk), c1 = min(V, c0 + chunk);
		double s = 0;
		int last = -1;
		for (int i = c0; i < c1; i++)
			if (p[i] > 0) {
				s += p[i];
				last = i;
			}
		sh.d[tid] = s;
		sh.id[tid] = last;
		__syncthreads();
		if (tid == 0) {
			double run = 0, x = u * z;
			for (int i = 0; i < SAMPLE_BLOCK && tok < 0; i++) {
				int c0 = min(V, i * chunk), c1 = min(V, c0 + chunk);
				if (sh.d[i] > 0 && x < run + sh.d[i]) {
					double w = run;
					for (int j = c0; j < c1 && tok < 0; j++)
						if (p[j] > 0) {
							w += p[j];
							if (w > x)
								tok = j;
						}
					if (tok < 0) // rounding: the chunk's last token
						tok = sh.id[i];
				}
				run += sh.d[i];
			}
			for (int i = SAMPLE_BLOCK - 1; i >= 0 && tok < 0; i--) // u·z at or past the total by rounding
				tok = sh.id[i];
			sh.pick = tok;
		}
		__syncthreads();
		tok = sh.pick;
	} else {
		double vc = -1, kept = z;
		int ic = V;
		if (k > 0 && k < V) {
			int b = sample_search(p, V, vc, ic, true, false, (double)k, &sh);
			if (b >= 0) {
				vc = p[b];
				ic = b;
				kept = kept_mass(p, V, 0, vc, ic, false, sh.d);
			}
		}
		if (top_p < 1) {
			int b = sample_search(p, V, vc, ic, false, false, top_p * kept, &sh);
			if (b >= 0) {
				vc = p[b];
				ic = b;
				kept = kept_mass(p, V, 0, vc, ic, false, sh.d);
			}
		}
		tok = sample_search(p, V, vc, ic, false, true, u * kept, &sh);
		if (tok < 0) // u·kept at or past the kept mass by rounding: the last kept token
			tok = sample_search(p, V, vc, ic, true, false, kept_mass(p, V, 0, vc, ic, true, sh.d), &sh);
	}
	if (tid == 0) {
		if (tok < 0 || tok >= V)
			tok = 0;
		out[r] = tok;
		lp[r] = (float)fmin((double)(l[tok] - mx) * inv_t - log(z), 0.0);
	}
}
REGISTER(sample_rows);
