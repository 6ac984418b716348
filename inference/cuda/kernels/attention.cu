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
