// Attention over the paged KV cache, prefill and decode alike: token t of sequence tok_seq[t]
// at position tok_pos[t] attends to positions 0..tok_pos[t] of its sequence (causal), query
// head h to kv head h / (nh / nkv) (grouped-query attention).
#pragma once
#include "common.cuh"

#define ATT_WARPS 4
#define ATT_MAXD 8 // head_dim ≤ 256: up to 8 dimensions per lane

// attention: grid (T, nh), block 32·ATT_WARPS. Each warp takes every ATT_WARPS-th key with an
// online softmax (running max, sum and weighted values; lane l holds dimensions l, l+32, ...),
// then warp 0 merges the warps' partial results. q rows are nh·hd, out likewise; kv is the
// layer's block pool as rope_kv writes it.
KERNEL void attention(float *__restrict__ out, const float *__restrict__ q, const bf16 *__restrict__ kv,
                      const int *__restrict__ tok_pos, const int *__restrict__ tok_seq, const int *__restrict__ tables,
                      const int *__restrict__ table_off, int nh, int nkv, int hd, int bs, float scale) {
	__shared__ float sm[ATT_WARPS], sl[ATT_WARPS];
	__shared__ float sacc[ATT_WARPS][ATT_MAXD * 32];
	int t = blockIdx.x, h = blockIdx.y, kh = h / (nh / nkv);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int pos = tok_pos[t];
	const int *tab = tables + table_off[tok_seq[t]];
	const float *qr = q + (size_t)t * nh * hd + (size_t)h * hd;
	float qv[ATT_MAXD], acc[ATT_MAXD];
#pragma unroll
	for (int i = 0; i < ATT_MAXD; i++) {
		int d = lane + 32 * i;
		qv[i] = d < hd ? qr[d] * scale : 0.0f;
		acc[i] = 0;
	}
	float m = -INFINITY, l = 0;
	size_t head = (size_t)kh * bs * hd, vofs = (size_t)nkv * bs * hd;
	for (int j = warp; j <= pos; j += ATT_WARPS) {
		const bf16 *kp = kv + (size_t)tab[j / bs] * 2 * nkv * bs * hd + head + (size_t)(j % bs) * hd;
		const bf16 *vp = kp + vofs;
		float s = 0;
#pragma unroll
		for (int i = 0; i < ATT_MAXD; i++) {
			int d = lane + 32 * i;
			if (d < hd)
				s += qv[i] * bf2f(kp[d]);
		}
		s = warp_sum(s);
		float mn = fmaxf(m, s);
		float corr = expf(m - mn), p = expf(s - mn);
		l = l * corr + p;
#pragma unroll
		for (int i = 0; i < ATT_MAXD; i++) {
			int d = lane + 32 * i;
			if (d < hd)
				acc[i] = acc[i] * corr + p * bf2f(vp[d]);
		}
		m = mn;
	}
	if (lane == 0) {
		sm[warp] = m;
		sl[warp] = l;
	}
#pragma unroll
	for (int i = 0; i < ATT_MAXD; i++)
		sacc[warp][lane + 32 * i] = acc[i];
	__syncthreads();
	if (warp == 0) {
		float M = sm[0];
		for (int w = 1; w < ATT_WARPS; w++)
			M = fmaxf(M, sm[w]);
		float L = 0, f[ATT_WARPS];
		for (int w = 0; w < ATT_WARPS; w++) {
			f[w] = sm[w] == -INFINITY ? 0.0f : expf(sm[w] - M);
			L += sl[w] * f[w];
		}
		float *o = out + (size_t)t * nh * hd + (size_t)h * hd;
#pragma unroll
		for (int i = 0; i < ATT_MAXD; i++) {
			int d = lane + 32 * i;
			if (d < hd) {
				float v = 0;
				for (int w = 0; w < ATT_WARPS; w++)
					v += sacc[w][d] * f[w];
				o[d] = v / L;
			}
		}
	}
}
REGISTER(attention);

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
		for (int i = threadIdx.x; i < n * hd; i += blockDim.x)
			skv[(i / hd) * hp + i % hd] = bf2f(kp[i]);
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
		for (int i = threadIdx.x; i < n * hd; i += blockDim.x)
			skv[(i / hd) * hp + i % hd] = bf2f(kp[vofs + i]);
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
