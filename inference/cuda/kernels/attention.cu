// Attention over the paged KV cache: token t of sequence tok_seq[t] at position tok_pos[t]
// attends to positions 0..tok_pos[t] of its sequence (causal), query head h to kv head
// h / (nh / nkv) (grouped-query attention), reading the layer's block pool as rope_kv writes it
// through the sequence's block table.
#pragma once
#include "common.cuh"

// block_to_shared widens n rows of hd bf16 values (one kv head's keys or values of a cache
// block, contiguous) into dst as f32 rows of hd + 1 (the pad keeps a column's reads on distinct
// banks), the whole block's threads taking turns.
__device__ __forceinline__ void block_to_shared(float *dst, const bf16 *src, int n, int hd) {
	for (int i = threadIdx.x; i < n * hd; i += blockDim.x)
		dst[(i / hd) * (hd + 1) + i % hd] = bf2f(src[i]);
}

// Tiled attention for prefill (and every pass that is not one token per sequence),
// FlashAttention-2 style with plain f32 FMAs (no mma: the emulator has none, see docs/DESIGN.md).
// Block (tile i, kv head kh) of grid (tiles, nkv) takes the tile's n ≤ qt consecutive query
// tokens of one sequence (tiles[2i] the first, tiles[2i+1] the count: a span of the pass cut
// into pieces of qt) with the group = nh/nkv query heads of kh: rows = n·group query rows,
// row r = (token r / group, head r % group). It walks the keys 0..(the last token's position) a
// cache block (bs ≤ 32 positions) at a time, reading each key and value once for all its rows:
// keys into shared memory as f32, a score per (row, key) masked causally, an online softmax per
// row (a thread per row), values into the same tile, then the accumulators (in shared memory,
// rows × hd) rescaled and added to. Dynamic shared memory: attnPrefillShared floats (ops.go).
KERNEL void attn_prefill(float *__restrict__ out, const float *__restrict__ q, const bf16 *__restrict__ kv,
                         const int *__restrict__ tiles, const int *__restrict__ tok_pos,
                         const int *__restrict__ tok_seq, const int *__restrict__ tables,
                         const int *__restrict__ table_off, int qt, int nh, int nkv, int hd, int bs, float scale) {
	DYN_SHARED(float, attn_sh);
	int kh = blockIdx.y, t0 = tiles[2 * blockIdx.x], n = tiles[2 * blockIdx.x + 1];
	int group = nh / nkv, rows = n * group, hp = hd + 1;
	float *sq = attn_sh;                 // rows × hd: the queries, scaled
	float *sacc = sq + qt * group * hd;  // rows × hd: the unnormalised outputs
	float *skv = sacc + qt * group * hd; // bs × (hd + 1): one cache block's keys, then its values
	float *sp = skv + bs * hp;           // rows × bs: scores, then weights
	float *sm = sp + qt * group * bs;    // rows: running max
	float *sl = sm + qt * group;         // rows: running sum
	float *sc = sl + qt * group;         // rows: this block's correction of the accumulators
	for (int i = threadIdx.x; i < rows * hd; i += blockDim.x) {
		int r = i / hd, d = i % hd;
		sq[i] = q[(size_t)(t0 + r / group) * nh * hd + (size_t)(kh * group + r % group) * hd + d] * scale;
		sacc[i] = 0;
	}
	for (int r = threadIdx.x; r < rows; r += blockDim.x) {
		sm[r] = -INFINITY;
		sl[r] = 0;
	}
	const int *tab = tables + table_off[tok_seq[t0]];
	int p0 = tok_pos[t0], last = tok_pos[t0 + n - 1];
	size_t head = (size_t)kh * bs * hd, vofs = (size_t)nkv * bs * hd;
	for (int j0 = 0; j0 <= last; j0 += bs) {
		int nk = min(bs, last + 1 - j0);
		const bf16 *kp = kv + (size_t)tab[j0 / bs] * 2 * nkv * bs * hd + head;
		__syncthreads(); // the previous block's values and weights are used
		block_to_shared(skv, kp, nk, hd);
		__syncthreads();
		for (int i = threadIdx.x; i < rows * nk; i += blockDim.x) {
			int r = i / nk, j = i % nk;
			float v = -INFINITY;
			if (j0 + j <= p0 + r / group) {
				const float *qr = sq + r * hd, *kj = skv + j * hp;
				v = 0;
				for (int d = 0; d < hd; d++)
					v += qr[d] * kj[d];
			}
			sp[r * bs + j] = v;
		}
		__syncthreads();
		block_to_shared(skv, kp + vofs, nk, hd);
		for (int r = threadIdx.x; r < rows; r += blockDim.x) {
			float *pr = sp + r * bs;
			float mo = sm[r], mn = mo;
			for (int j = 0; j < nk; j++)
				mn = fmaxf(mn, pr[j]);
			float sum = 0;
			for (int j = 0; j < nk; j++) {
				float e = expf(pr[j] - mn); // a masked key: exp(-inf) = 0
				pr[j] = e;
				sum += e;
			}
			float c = expf(mo - mn);
			sc[r] = c;
			sl[r] = sl[r] * c + sum;
			sm[r] = mn;
		}
		__syncthreads();
		for (int i = threadIdx.x; i < rows * hd; i += blockDim.x) {
			int r = i / hd, d = i % hd;
			const float *pr = sp + r * bs;
			float v = sacc[i] * sc[r];
			for (int j = 0; j < nk; j++)
				v += pr[j] * skv[j * hp + d];
			sacc[i] = v;
		}
	}
	__syncthreads();
	for (int i = threadIdx.x; i < rows * hd; i += blockDim.x) {
		int r = i / hd, d = i % hd;
		out[(size_t)(t0 + r / group) * nh * hd + (size_t)(kh * group + r % group) * hd + d] = sacc[i] / sl[r];
	}
}
REGISTER(attn_prefill);

// Split-key decode attention (flash-decoding). Block (t, kv head kh, split s) of grid (T, nkv, S)
// takes the keys [s·chunk, (s+1)·chunk) ∩ [0, pos] of token t (the last split also takes any
// keys past S·chunk) for all the group = nh/nkv query heads of kh at once, so each key and value
// of the split is read from the pool once per group. chunk is read from device memory (*chunkp,
// a multiple of the cache block chosen per pass from the longest context) so that a graph
// captured for a batch size serves every depth. Keys go one cache block (bs ≤ 32 positions) at
// a time: the block's keys into shared memory as f32, a score per (head, key), an online softmax
// per head (a warp per head), then each thread's (head, dim) accumulators take the block's
// values. With S = 1 the block writes the output; else its unnormalised output, running max
// and sum go to part (per token, query head and split: hd values, then max and sum in ml) for
// attn_merge. A split with no keys writes nothing. Dynamic shared memory:
// attnSplitShared floats (ops.go).
#define ATTS_ACC 16 // (head, dim) accumulators per thread: group·hd ≤ ATTS_ACC·blockDim.x

KERNEL void attn_split(float *__restrict__ out, float *__restrict__ part, float *__restrict__ ml,
                       const float *__restrict__ q, const bf16 *__restrict__ kv, const int *__restrict__ tok_pos,
                       const int *__restrict__ tok_seq, const int *__restrict__ tables,
                       const int *__restrict__ table_off, const int *__restrict__ chunkp, int nh, int nkv, int hd,
                       int bs, float scale) {
	DYN_SHARED(float, attn_sh);
	int t = blockIdx.x, kh = blockIdx.y, s = blockIdx.z, S = gridDim.z;
	int group = nh / nkv, gd = group * hd, hp = hd + 1;
	int pos = tok_pos[t], chunk = *chunkp;
	int lo = s * chunk, hi = s == S - 1 ? pos + 1 : min(lo + chunk, pos + 1);
	if (lo >= hi)
		return;
	float *sq = attn_sh;         // group × hd: the queries, scaled
	float *skv = sq + gd;        // bs × (hd + 1): one cache block's keys, then its values
	float *sp = skv + bs * hp;   // group × bs: scores, then weights
	float *sm = sp + group * bs; // group: running max
	float *sl = sm + group;      // group: running sum
	float *sc = sl + group;      // group: this block's correction of the accumulators
	const int *tab = tables + table_off[tok_seq[t]];
	const float *qr = q + (size_t)t * nh * hd + (size_t)kh * gd;
	for (int i = threadIdx.x; i < gd; i += blockDim.x)
		sq[i] = qr[i] * scale;
	for (int g = threadIdx.x; g < group; g += blockDim.x) {
		sm[g] = -INFINITY;
		sl[g] = 0;
	}
	float acc[ATTS_ACC];
#pragma unroll
	for (int a = 0; a < ATTS_ACC; a++)
		acc[a] = 0;
	size_t head = (size_t)kh * bs * hd, vofs = (size_t)nkv * bs * hd;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
	for (int j0 = lo; j0 < hi;) {
		int n = min(hi, (j0 / bs + 1) * bs) - j0;
		const bf16 *kp = kv + (size_t)tab[j0 / bs] * 2 * nkv * bs * hd + head + (size_t)(j0 % bs) * hd;
		__syncthreads(); // the previous block's values and weights are used
		block_to_shared(skv, kp, n, hd);
		__syncthreads();
		for (int i = threadIdx.x; i < group * n; i += blockDim.x) {
			int g = i / n, j = i % n;
			const float *qg = sq + g * hd, *kj = skv + j * hp;
			float v = 0;
			for (int d = 0; d < hd; d++)
				v += qg[d] * kj[d];
			sp[g * bs + j] = v;
		}
		__syncthreads();
		block_to_shared(skv, kp + vofs, n, hd);
		for (int g = warp; g < group; g += nwarps) {
			float v = lane < n ? sp[g * bs + lane] : -INFINITY;
			float mo = sm[g], mn = fmaxf(mo, warp_max(v));
			float e = lane < n ? expf(v - mn) : 0.0f;
			float sum = warp_sum(e);
			if (lane < n)
				sp[g * bs + lane] = e;
			if (lane == 0) {
				float c = expf(mo - mn);
				sc[g] = c;
				sl[g] = sl[g] * c + sum;
				sm[g] = mn;
			}
		}
		__syncthreads();
#pragma unroll
		for (int a = 0; a < ATTS_ACC; a++) {
			int i = threadIdx.x + a * blockDim.x;
			if (i < gd) {
				int g = i / hd, d = i % hd;
				const float *pg = sp + g * bs;
				float v = acc[a] * sc[g];
				for (int j = 0; j < n; j++)
					v += pg[j] * skv[j * hp + d];
				acc[a] = v;
			}
		}
		j0 += n;
	}
	size_t row = (size_t)t * nh + (size_t)kh * group; // the group's first query head
#pragma unroll
	for (int a = 0; a < ATTS_ACC; a++) {
		int i = threadIdx.x + a * blockDim.x;
		if (i < gd) {
			int g = i / hd, d = i % hd;
			if (S == 1)
				out[(row + g) * hd + d] = acc[a] / sl[g];
			else
				part[((row + g) * S + s) * hd + d] = acc[a];
		}
	}
	if (S > 1)
		for (int g = threadIdx.x; g < group; g += blockDim.x) {
			ml[((row + g) * S + s) * 2] = sm[g];
			ml[((row + g) * S + s) * 2 + 1] = sl[g];
		}
}
REGISTER(attn_split);

#define ATTM_MAXS 1024 // splits attn_merge takes

// attn_merge: grid (T, nh), block a multiple of 32. Combines the S partial results attn_split
// left for token t and query head h: the splits holding keys (those starting at or before pos),
// each weighted by exp(its max − the overall max), divided by the likewise weighted sum.
KERNEL void attn_merge(float *__restrict__ out, const float *__restrict__ part, const float *__restrict__ ml,
                       const int *__restrict__ tok_pos, const int *__restrict__ chunkp, int nh, int hd, int S) {
	__shared__ float w[ATTM_MAXS];
	__shared__ float red[32];
	int t = blockIdx.x, h = blockIdx.y;
	int chunk = *chunkp;
	int ns = min(S, tok_pos[t] / chunk + 1);
	size_t row = (size_t)t * nh + h;
	const float *mlr = ml + row * S * 2;
	float m = -INFINITY;
	for (int s = threadIdx.x; s < ns; s += blockDim.x)
		m = fmaxf(m, mlr[2 * s]);
	m = block_max(m, red);
	float l = 0;
	for (int s = threadIdx.x; s < ns; s += blockDim.x) {
		float f = expf(mlr[2 * s] - m);
		w[s] = f;
		l += mlr[2 * s + 1] * f;
	}
	l = block_sum(l, red);
	const float *pr = part + row * S * hd;
	for (int d = threadIdx.x; d < hd; d += blockDim.x) {
		float v = 0;
		for (int s = 0; s < ns; s++)
			v += pr[(size_t)s * hd + d] * w[s];
		out[row * hd + d] = v / l;
	}
}
REGISTER(attn_merge);
