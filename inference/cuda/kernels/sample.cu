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
// with l_i - max rounded to f32 first exactly as the host computes it. A token's rank is by
// falling p, the lower index first on ties (the host's ranksBefore); a cut keeps a prefix of
// that order, named by its last token.
//
// A cut or a draw is a radix select over the rank order (sample_select): the tokens are binned
// by their key (the encoding of p, which rises with p ≥ 0) into 256 bins, and the bin in which
// a count or a mass summed from the top bin down passes the target is binned again, on its own
// key range, until one token is left; a bin of equal p goes on by index. Each level is one
// pass over the row, which recomputes p from the logits (no scratch memory), only for the
// logits within the bin's least and greatest (the level before notes them); the first level
// is binned in the pass that sums the softmax's denominator, and reused by every select of the
// row. Masses are summed in fixed point (sample_fx: two 64-bit integers, p to 2^-80), so the
// sums are exact and the same in any order: the shared-memory atomics that build a bin's sums
// give the same result from run to run.

// SAMPLE_BLOCK is the block size sample_rows is launched with (ops.go: sampleBlock).
#define SAMPLE_BLOCK 256
// SAMPLE_BINS is the radix select's bins per level (one per thread of the block).
#define SAMPLE_BINS SAMPLE_BLOCK
// SAMPLE_BIN0_SHIFT: the first level's bins 1..255 are each 2^49 keys wide (an eighth of a
// binade of p), the top 255 of them ending at p = 1; bin 0 holds every p below (under about
// 2^-31.9), binned again only when a target falls in it.
#define SAMPLE_BIN0_SHIFT 49

// SAMPLE_PASS marks one pass over a row of logits; a test harness may define it to count them.
#ifndef SAMPLE_PASS
#define SAMPLE_PASS()
#endif

typedef unsigned long long u64;

// SAMPLE_KEY1 is the key of p = 1, the largest p.
#define SAMPLE_KEY1 0x3ff0000000000000ull

// sample_px is the unnormalised probability of logit x: 0 for NaN.
__device__ __forceinline__ double sample_px(float x, float mx, double inv_t) {
	return x == x ? exp((double)(x - mx) * inv_t) : 0.0;
}

// sample_p is token i's unnormalised probability.
__device__ __forceinline__ double sample_p(const float *l, int i, float mx, double inv_t) { return sample_px(l[i], mx, inv_t); }

// sample_ord encodes a float (not NaN) as an unsigned integer of the same order, for the
// integer atomicMin and atomicMax; sample_unord decodes it.
__device__ __forceinline__ unsigned sample_ord(float x) {
	unsigned u = __float_as_uint(x);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float sample_unord(unsigned o) { return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o); }

// sample_fx writes p ∈ [0, 1] in fixed point: p = (hi + lo · 2^-40) · 2^-40, truncated below
// 2^-80. Every step is exact in f64 (scalings by powers of two, floor, the fraction of an
// integer-and-fraction), so both backends of the kernels get the same bits. A sum of V such
// pairs fits 64-bit integers for V < 2^23.
__device__ __forceinline__ void sample_fx(double p, u64 *hi, u64 *lo) {
	double s = p * 0x1p40, h = floor(s);
	*hi = (u64)h;
	*lo = (u64)((s - h) * 0x1p40);
}

// sample_fx_val is the f64 nearest a fixed-point sum (one rounding after the carry).
__device__ __forceinline__ double sample_fx_val(u64 hi, u64 lo) {
	hi += lo >> 40;
	lo &= (1ull << 40) - 1;
	return (double)hi * 0x1p-40 + (double)lo * 0x1p-80;
}

// ranks_before: token (ka, a), ka its key, comes before (kb, b) in the sampling order.
__device__ __forceinline__ bool ranks_before(u64 ka, int a, u64 kb, int b) { return ka > kb || (ka == kb && a < b); }

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

// sample_hist is one level of a radix select: per bin, its tokens' count, lowest index, mass
// (fixed point, hi and lo), the least and greatest key among them, and the least and greatest
// of their logits (sample_ord).
struct sample_hist {
	unsigned n[SAMPLE_BINS], first[SAMPLE_BINS], lmin[SAMPLE_BINS], lmax[SAMPLE_BINS];
	u64 hi[SAMPLE_BINS], lo[SAMPLE_BINS], kmin[SAMPLE_BINS], kmax[SAMPLE_BINS];
};

// Sampling scratch in shared memory (about 28 KB).
struct sample_shared {
	sample_hist h0, h; // the first level (all tokens of the row) and the level being refined
	double d[SAMPLE_BLOCK];
	int id[SAMPLE_BLOCK];
	// sample_select's state, written by thread 0: the key's phase (0: the key is p's encoding;
	// 1: among the tokens whose p has encoding v, the key is V-1-index, so that it falls with the
	// index), the key range [a, e] being binned and its bin width 2^s; the count and mass (nb,
	// hb, lb) of the tokens ranked before that range; done, and the pick with its p's encoding;
	// [flo, fhi], the logits of the range's tokens.
	int phase, s, done, pick;
	unsigned nb;
	u64 hb, lb, a, e, v, pkey;
	float flo, fhi;
};

// sample_hist_pass is one pass over the row. With zsum it returns this thread's share of the
// sum of p (in the order of the pass before this kernel used a radix select); with bin, it
// bins into h the tokens with p > 0 whose key (of phase, with v) lies in [a, e]: bin 0 below
// lo, else 1 + (key - lo) >> s. Without zsum it computes p only for logits in [flo, fhi],
// which hold every token of [a, e] (the range is a bin of the level before, whose logits
// that level noted): a refining pass takes an exponential per token of the range, not of
// the row. Bin 0 is summed in registers first and added once per thread: in the first level
// it holds most of a peaked row's vocabulary, which per-token atomics would serialise on.
__device__ double sample_hist_pass(const float *l, int V, float mx, double inv_t, bool zsum, bool bin, int phase, u64 v,
                                   u64 a, u64 e, u64 lo, int s, float flo, float fhi, sample_hist *h) {
	int tid = threadIdx.x;
	SAMPLE_PASS();
	if (bin) {
		h->n[tid] = 0;
		h->first[tid] = 0xffffffffu;
		h->lmin[tid] = 0xffffffffu;
		h->lmax[tid] = 0;
		h->hi[tid] = h->lo[tid] = 0;
		h->kmin[tid] = ~0ull;
		h->kmax[tid] = 0;
		__syncthreads();
	}
	unsigned n0 = 0, f0 = 0, lmn0 = 0xffffffffu, lmx0 = 0;
	u64 hi0 = 0, lo0 = 0, mn0 = ~0ull, mx0 = 0;
	double z = 0;
	for (int i = tid; i < V; i += SAMPLE_BLOCK) {
		float x = l[i];
		if (!zsum && !(x >= flo && x <= fhi))
			continue;
		double p = sample_px(x, mx, inv_t);
		z += p;
		if (!bin || !(p > 0))
			continue;
		u64 k = (u64)__double_as_longlong(p);
		if (phase) {
			if (k != v)
				continue;
			k = (u64)(V - 1 - i);
		}
		if (k < a || k > e)
			continue;
		u64 qh, ql;
		sample_fx(p, &qh, &ql);
		unsigned xo = sample_ord(x);
		if (k < lo) {
			if (n0++ == 0)
				f0 = i; // this thread's indices rise
			hi0 += qh;
			lo0 += ql;
			mn0 = k < mn0 ? k : mn0;
			mx0 = k > mx0 ? k : mx0;
			lmn0 = xo < lmn0 ? xo : lmn0;
			lmx0 = xo > lmx0 ? xo : lmx0;
			continue;
		}
		int b = 1 + (int)((k - lo) >> s);
		atomicAdd(&h->n[b], 1u);
		atomicMin(&h->first[b], (unsigned)i);
		atomicAdd(&h->hi[b], qh);
		atomicAdd(&h->lo[b], ql);
		atomicMin(&h->kmin[b], k);
		atomicMax(&h->kmax[b], k);
		atomicMin(&h->lmin[b], xo);
		atomicMax(&h->lmax[b], xo);
	}
	if (n0) {
		atomicAdd(&h->n[0], n0);
		atomicMin(&h->first[0], f0);
		atomicAdd(&h->hi[0], hi0);
		atomicAdd(&h->lo[0], lo0);
		atomicMin(&h->kmin[0], mn0);
		atomicMax(&h->kmax[0], mx0);
		atomicMin(&h->lmin[0], lmn0);
		atomicMax(&h->lmax[0], lmx0);
	}
	if (bin)
		__syncthreads();
	return z;
}

// shfl_u64 is lane src's v (a 64-bit __shfl_sync).
__device__ __forceinline__ u64 shfl_u64(u64 v, int src) {
	return ((u64)__shfl_sync(FULL_MASK, (unsigned)(v >> 32), src) << 32) | __shfl_sync(FULL_MASK, (unsigned)v, src);
}

// SAMPLE_LANE_BINS is the bins each lane of sample_descend's warp walks.
#define SAMPLE_LANE_BINS (SAMPLE_BINS / 32)

// sample_descend (warp 0, every lane) walks the bins of h from the top, adding each one's
// count or mass to what ranks before it, to the first bin where the sum passes target; it then
// ends the select (that bin holds one token, or none passes) or narrows the key range to the
// bin's keys. Lane L takes SAMPLE_LANE_BINS bins from the top down, starting SAMPLE_LANE_BINS·L
// below the top one, after a scan over the lanes of what the bins above its own hold: the
// integer sums are exact, so every bin gets the sum a walk over all bins on one thread would
// give it, and the first lane with a passing bin finishes alone.
__device__ void sample_descend(const sample_hist *h, bool count, bool strict, double target, int V, sample_shared *sh) {
	__syncwarp(); // thread 0's start of the select is seen
	int lane = threadIdx.x & 31, top = SAMPLE_BINS - 1 - lane * SAMPLE_LANE_BINS;
	unsigned n = 0;
	u64 hs = 0, ls = 0;
	for (int j = 0; j < SAMPLE_LANE_BINS; j++) {
		n += h->n[top - j];
		hs += h->hi[top - j];
		ls += h->lo[top - j];
	}
	unsigned in = n; // inclusive scans over the lanes, lane 0 first
	u64 ih = hs, il = ls;
	for (int d = 1; d < 32; d <<= 1) {
		unsigned on = __shfl_sync(FULL_MASK, in, max(lane - d, 0));
		u64 oh = shfl_u64(ih, max(lane - d, 0)), ol = shfl_u64(il, max(lane - d, 0));
		if (lane >= d) {
			in += on;
			ih += oh;
			il += ol;
		}
	}
	unsigned nb = sh->nb + (in - n);
	u64 hb = sh->hb + (ih - hs), lb = sh->lb + (il - ls);
	int pick = -1;
	for (int j = 0; j < SAMPLE_LANE_BINS; j++) {
		int b = top - j;
		unsigned c = h->n[b];
		if (c == 0)
			continue;
		u64 h2 = hb + h->hi[b], l2 = lb + h->lo[b];
		double sum = count ? (double)(nb + c) : sample_fx_val(h2, l2);
		if (strict ? sum > target : sum >= target) {
			pick = b;
			break;
		}
		nb += c;
		hb = h2;
		lb = l2;
	}
	unsigned found = __ballot_sync(FULL_MASK, pick >= 0);
	if (found == 0) { // none passes: lane 31 has summed every bin
		if (lane == 31) {
			sh->nb = nb;
			sh->hb = hb;
			sh->lb = lb;
			sh->done = 1;
			sh->pick = -1;
		}
		return;
	}
	if (lane != __ffs(found) - 1)
		return;
	sh->nb = nb;
	sh->hb = hb;
	sh->lb = lb;
	sh->done = 1;
	sh->pick = -1;
	if (h->n[pick] == 1) {
		sh->pick = (int)h->first[pick];
		sh->pkey = sh->phase ? sh->v : h->kmin[pick];
		return;
	}
	u64 a = h->kmin[pick], e = h->kmax[pick];
	sh->flo = sample_unord(h->lmin[pick]);
	sh->fhi = sample_unord(h->lmax[pick]);
	if (sh->phase == 0 && a == e) { // a run of equal p: on by index
		sh->phase = 1;
		sh->v = a;
		a = 0;
		e = (u64)(V - 1) - h->first[pick];
	}
	int s = 0;
	while (((e - a) >> s) > SAMPLE_BINS - 2)
		s++;
	sh->a = a;
	sh->e = e;
	sh->s = s;
	sh->done = 0;
}

// sample_select finds the token at which the count (count) or the mass of the tokens with
// p > 0, summed in rank order, passes target (sum > target with strict, else sum ≥ target):
// sh->pick, or -1 when the whole sum does not; sh->pkey is its p's encoding, and sh->nb, hb,
// lb the count and mass ranked before it. It starts from sh->h0, the row's first level. Each
// further level is a pass over the row and cuts the key range 255-fold: at most 8 levels on
// p's encoding (62 bits below p = 1) and 3 on the index of a run of ties (V < 2^24). Not
// inlined: sample_rows calls it up to four times.
__device__ __noinline__ void sample_select(const float *l, int V, float mx, double inv_t, bool count, bool strict,
                                           double target, sample_shared *sh) {
	__syncthreads(); // every thread has read the last select's result
	if (threadIdx.x == 0) {
		sh->phase = 0;
		sh->nb = 0;
		sh->hb = sh->lb = 0;
	}
	const sample_hist *h = &sh->h0;
	for (;;) {
		if (threadIdx.x < 32)
			sample_descend(h, count, strict, target, V, sh);
		__syncthreads();
		if (sh->done)
			return;
		sample_hist_pass(l, V, mx, inv_t, false, true, sh->phase, sh->v, sh->a, sh->e, sh->a, sh->s, sh->flo, sh->fhi,
		                 &sh->h);
		h = &sh->h;
	}
}

// sample_rows picks one token per row of logits as generate's host sampler does and writes its
// log-probability: params holds per row four doubles (1/T, top_p, u, top_k) with u uniform in
// [0, 1). top_k 1 is greedy: the token is greedy[r] (argmax_rows' pick) and 1/T only scales
// the log-probability. Otherwise the row draws from softmax(l/T), cut to the top_k most likely
// tokens (0: off) and then to the shortest rank-order prefix whose mass reaches top_p of what
// is left (1: off); with neither cut the draw walks the vocabulary in index order, else in rank
// order, to the first token where the mass summed so far exceeds u times the kept mass. lp[r]
// is the token's log-softmax of l/T over the whole vocabulary (before the cuts), at most 0.
// Block: SAMPLE_BLOCK threads. Passes over the row: 2 without a cut (the max; then the
// exponentials, summed per thread over a contiguous chunk of the row, which give both the
// softmax's denominator and the chunk the draw falls in, walked again by one thread: V/256
// more exponentials); with one, 2 (the max; the denominator, binning the first level) and then
// one per level that a select refines (see sample_select).
KERNEL void sample_rows(int *__restrict__ out, float *__restrict__ lp, const int *__restrict__ greedy,
                        const float *__restrict__ logits, const double *__restrict__ params, int V) {
	__shared__ sample_shared sh;
	__shared__ float red[32];
	int r = blockIdx.x, tid = threadIdx.x;
	const float *l = logits + (size_t)r * V;
	double inv_t = params[4 * r], top_p = params[4 * r + 1], u = params[4 * r + 2];
	int k = (int)params[4 * r + 3];
	SAMPLE_PASS();
	float mx = -INFINITY;
	for (int i = tid; i < V; i += SAMPLE_BLOCK)
		if (l[i] == l[i])
			mx = fmaxf(mx, l[i]);
	mx = block_max(mx, red);
	bool cut = k != 1 && ((k > 0 && k < V) || top_p < 1);
	// z, the softmax's denominator, is needed by thread 0 only (the draw's target, lp).
	double z = 0;
	if (k == 1 || cut) {
		// The first level of every select: bins 1..255 an eighth of a binade each, up to p = 1.
		const u64 lo0 = SAMPLE_KEY1 + 1 - ((u64)(SAMPLE_BINS - 1) << SAMPLE_BIN0_SHIFT);
		z = sample_hist_pass(l, V, mx, inv_t, true, cut, 0, 0, 0, SAMPLE_KEY1, lo0, SAMPLE_BIN0_SHIFT, -INFINITY,
		                     INFINITY, &sh.h0);
		z = block_sum_d(z, sh.d);
	}
	int tok = -1;
	if (k == 1) {
		tok = greedy[r];
	} else if (!cut) {
		// No cut: walk the vocabulary in index order, in the pass that sums the denominator.
		// Each thread owns a contiguous chunk and sums its mass in index order; thread 0 adds
		// the chunks' masses in order (z, the same on every launch), then finds the chunk
		// holding u·z by the running sum and walks it.
		SAMPLE_PASS();
		int chunk = (V + SAMPLE_BLOCK - 1) / SAMPLE_BLOCK, c0 = min(V, tid * chunk), c1 = min(V, c0 + chunk);
		double s = 0;
		int last = -1;
		for (int i = c0; i < c1; i++) {
			double p = sample_p(l, i, mx, inv_t);
			if (p > 0) {
				s += p;
				last = i;
			}
		}
		sh.d[tid] = s;
		sh.id[tid] = last;
		__syncthreads();
		if (tid == 0) {
			for (int i = 0; i < SAMPLE_BLOCK; i++)
				z += sh.d[i];
			double run = 0, x = u * z;
			for (int i = 0; i < SAMPLE_BLOCK && tok < 0; i++) {
				int c0 = min(V, i * chunk), c1 = min(V, c0 + chunk);
				if (sh.d[i] > 0 && x < run + sh.d[i]) {
					double w = run;
					for (int j = c0; j < c1 && tok < 0; j++) {
						double p = sample_p(l, j, mx, inv_t);
						if (p > 0) {
							w += p;
							if (w > x)
								tok = j;
						}
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
		// The kept set is the rank-order prefix up to last (all tokens with p > 0 while
		// last < 0); kh, kl its mass.
		if (tid == 0) {
			unsigned n = 0;
			u64 hi = 0, lo = 0;
			for (int b = 0; b < SAMPLE_BINS; b++) {
				n += sh.h0.n[b];
				hi += sh.h0.hi[b];
				lo += sh.h0.lo[b];
			}
			sh.nb = n;
			sh.hb = hi;
			sh.lb = lo;
		}
		__syncthreads();
		unsigned npos = sh.nb;
		u64 kh = sh.hb, kl = sh.lb, lastk = 0;
		int last = -1;
		if (k > 0 && k < V) {
			sample_select(l, V, mx, inv_t, true, false, (double)k, &sh);
			if (sh.pick >= 0) {
				last = sh.pick;
				lastk = sh.pkey;
				u64 qh, ql;
				sample_fx(__longlong_as_double((long long)lastk), &qh, &ql);
				kh = sh.hb + qh;
				kl = sh.lb + ql;
			}
		}
		if (top_p < 1) {
			sample_select(l, V, mx, inv_t, false, false, top_p * sample_fx_val(kh, kl), &sh);
			int b = sh.pick;
			if (b >= 0 && (last < 0 || !ranks_before(lastk, last, sh.pkey, b))) {
				last = b;
				lastk = sh.pkey;
				u64 qh, ql;
				sample_fx(__longlong_as_double((long long)lastk), &qh, &ql);
				kh = sh.hb + qh;
				kl = sh.lb + ql;
			}
		}
		sample_select(l, V, mx, inv_t, false, true, u * sample_fx_val(kh, kl), &sh);
		tok = sh.pick;
		if (tok < 0 || (last >= 0 && ranks_before(lastk, last, sh.pkey, tok))) {
			// u·kept at or past the kept mass by rounding: the last kept token
			if (last >= 0) {
				tok = last;
			} else {
				sample_select(l, V, mx, inv_t, true, false, (double)npos, &sh);
				tok = sh.pick;
			}
		}
	}
	if (tid == 0) {
		if (tok < 0 || tok >= V)
			tok = 0;
		out[r] = tok;
		lp[r] = (float)fmin((double)(l[tok] - mx) * inv_t - log(z), 0.0);
	}
}
REGISTER(sample_rows);
