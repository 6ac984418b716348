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

// Tiled attention for prefill (and every pass that is not one token per sequence) with plain f32
// FMAs: the passes of head dims attn_mma does not take (not a multiple of 16, or above 128).
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

// attn_mma: prefill attention on tensor cores (mma_bf16), FlashAttention-2 style. Same grid,
// tiles and rows as attn_prefill: block (tile i, kv head kh) of grid (tiles, nkv), 128 threads,
// row r = (token r / group, head r % group) of the tile's n ≤ 64 / group tokens; warp w owns
// rows 16w..16w+15 as the m dimension of its products. Per step of KC keys (all threads): the
// keys as bf16 rows (padded by 8 against bank conflicts) and the values transposed (dim-major,
// so a lane's b fragment is one word), read from the pool through the block table; keys past
// the tile's last position are zeros. Per warp, skipping steps wholly past its rows' last
// position: S = Q·Kᵀ (16 × KC, f32 in registers), scaled and masked causally, the online
// softmax of each row (its max and sum shared by the row's 4 lanes through shuffles; each lane
// keeps a partial sum, added up at the end), the accumulators O (16 × hd, registers) rescaled,
// and O += P·V with the S fragments reused as P's a fragments (the accumulator layout of two
// n tiles is the a layout of one k step). Queries and weights enter the products split into
// two bf16 terms (split_bf16: q ≈ q_hi + q_lo to 2^-17), keys and values are bf16 already, so
// the products are as exact as f32 ones at twice the mma count; a single bf16 term would move
// scores by up to 2^-9 of Σ|q·k|. MAXHD bounds hd (a multiple of 16) for the register arrays.
// With QSH the split query fragments (2·MAXHD/4 words a lane) wait in shared memory instead of
// registers and S's k steps are the outer loop, each fragment read once per step of keys.
// Dynamic shared memory: attnMMAShared bytes (ops.go).
template <int MAXHD, int KC, bool QSH>
__device__ __forceinline__ void attn_mma(float *__restrict__ out, const float *__restrict__ q,
                                         const bf16 *__restrict__ kv, const int *__restrict__ tiles,
                                         const int *__restrict__ tok_pos, const int *__restrict__ tok_seq,
                                         const int *__restrict__ tables, const int *__restrict__ table_off, int nh,
                                         int nkv, int hd, int bs, float scale) {
	DYN_SHARED(unsigned, mma_sh);
	int kh = blockIdx.y, t0 = tiles[2 * blockIdx.x], n = tiles[2 * blockIdx.x + 1];
	int group = nh / nkv, rows = n * group;
	int kp = hd + 8, vp = KC + 8;
	bf16 *sk = (bf16 *)mma_sh; // KC × (hd + 8): keys
	bf16 *svt = sk + KC * kp; // hd × (KC + 8): values, transposed
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
	int r0 = warp * 16 + gid, r1 = r0 + 8;
	bool active = warp * 16 < rows;
	int p0 = tok_pos[t0], last = tok_pos[t0 + n - 1];
	int pos0 = p0 + r0 / group, pos1 = p0 + r1 / group;
	int wlast = active ? min(last, p0 + (min(rows, warp * 16 + 16) - 1) / group) : -1;
	const float *q0 = r0 < rows ? q + (size_t)(t0 + r0 / group) * nh * hd + (size_t)(kh * group + r0 % group) * hd : nullptr;
	const float *q1 = r1 < rows ? q + (size_t)(t0 + r1 / group) * nh * hd + (size_t)(kh * group + r1 % group) * hd : nullptr;
	// The query fragments: in registers, or with QSH in shared memory after the values, each
	// lane's own (hi then lo, one uint4 each per k step, lanes consecutive: no bank conflicts),
	// written and read by that lane alone, so no barrier orders them.
	unsigned qh[QSH ? 1 : MAXHD / 16][4], ql[QSH ? 1 : MAXHD / 16][4];
	uint4 *sq = (uint4 *)(svt + hd * vp) + (size_t)warp * (hd / 16) * 64 + lane;
#pragma unroll
	for (int ks = 0; ks < MAXHD / 16; ks++)
		if (ks * 16 < hd) {
			int c = ks * 16 + 2 * tig, i = QSH ? 0 : ks;
			split_bf16(q0 ? q0[c] : 0.0f, q0 ? q0[c + 1] : 0.0f, &qh[i][0], &ql[i][0]);
			split_bf16(q1 ? q1[c] : 0.0f, q1 ? q1[c + 1] : 0.0f, &qh[i][1], &ql[i][1]);
			split_bf16(q0 ? q0[c + 8] : 0.0f, q0 ? q0[c + 9] : 0.0f, &qh[i][2], &ql[i][2]);
			split_bf16(q1 ? q1[c + 8] : 0.0f, q1 ? q1[c + 9] : 0.0f, &qh[i][3], &ql[i][3]);
			if constexpr (QSH) {
				sq[ks * 64] = uint4{qh[0][0], qh[0][1], qh[0][2], qh[0][3]};
				sq[ks * 64 + 32] = uint4{ql[0][0], ql[0][1], ql[0][2], ql[0][3]};
			}
		}
	float o[MAXHD / 8][4];
#pragma unroll
	for (int dn = 0; dn < MAXHD / 8; dn++)
		o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0;
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0, l1 = 0;
	const int *tab = tables + table_off[tok_seq[t0]];
	size_t head = (size_t)kh * bs * hd, vofs = (size_t)nkv * bs * hd, blk = (size_t)2 * nkv * bs * hd;
	int hd2 = hd / 2;
	for (int j0 = 0; j0 <= last; j0 += KC) {
		__syncthreads(); // the previous step's keys and values are used
		for (int i = threadIdx.x; i < KC * hd2; i += blockDim.x) {
			int j = i / hd2, d = (i % hd2) * 2, p = j0 + j;
			unsigned w = 0;
			if (p <= last)
				w = *(const unsigned *)(kv + (size_t)tab[p / bs] * blk + head + (size_t)(p % bs) * hd + d);
			*(unsigned *)(sk + j * kp + d) = w;
		}
		for (int i = threadIdx.x; i < KC / 2 * hd2; i += blockDim.x) {
			int j = (i / hd2) * 2, d = (i % hd2) * 2, p = j0 + j;
			unsigned va = 0, vb = 0; // (v[p][d], v[p][d+1]) and (v[p+1][d], v[p+1][d+1])
			if (p <= last)
				va = *(const unsigned *)(kv + (size_t)tab[p / bs] * blk + vofs + head + (size_t)(p % bs) * hd + d);
			if (p + 1 <= last)
				vb = *(const unsigned *)(kv + (size_t)tab[(p + 1) / bs] * blk + vofs + head + (size_t)((p + 1) % bs) * hd + d);
			*(unsigned *)(svt + d * vp + j) = (va & 0xffffu) | (vb << 16);
			*(unsigned *)(svt + (d + 1) * vp + j) = (va >> 16) | (vb & 0xffff0000u);
		}
		__syncthreads();
		if (j0 > wlast)
			continue; // every key of the step is past this warp's rows (or it has none)
		// S = Q·Kᵀ, each s[nt] summed over the k steps in order (hi, then lo, each step); with
		// QSH the k steps are the outer loop, so a fragment is read from shared memory once.
		float s[KC / 8][4];
		if constexpr (QSH) {
#pragma unroll
			for (int nt = 0; nt < KC / 8; nt++)
				s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0;
#pragma unroll
			for (int ks = 0; ks < MAXHD / 16; ks++)
				if (ks * 16 < hd) {
					uint4 h = sq[ks * 64], l = sq[ks * 64 + 32];
					unsigned fh[4] = {h.x, h.y, h.z, h.w}, fl[4] = {l.x, l.y, l.z, l.w};
#pragma unroll
					for (int nt = 0; nt < KC / 8; nt++) {
						const bf16 *kr = sk + (nt * 8 + gid) * kp + ks * 16 + 2 * tig;
						unsigned b[2] = {*(const unsigned *)kr, *(const unsigned *)(kr + 8)};
						mma_bf16(s[nt], fh, b, s[nt]);
						mma_bf16(s[nt], fl, b, s[nt]);
					}
				}
		} else {
#pragma unroll
			for (int nt = 0; nt < KC / 8; nt++) {
				s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0;
#pragma unroll
				for (int ks = 0; ks < MAXHD / 16; ks++)
					if (ks * 16 < hd) {
						const bf16 *kr = sk + (nt * 8 + gid) * kp + ks * 16 + 2 * tig;
						unsigned b[2] = {*(const unsigned *)kr, *(const unsigned *)(kr + 8)};
						mma_bf16(s[nt], qh[ks], b, s[nt]);
						mma_bf16(s[nt], ql[ks], b, s[nt]);
					}
			}
		}
		float mx0 = m0, mx1 = m1;
#pragma unroll
		for (int nt = 0; nt < KC / 8; nt++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int key = j0 + nt * 8 + 2 * tig + (e & 1);
				float v = key <= (e < 2 ? pos0 : pos1) ? s[nt][e] * scale : -INFINITY;
				s[nt][e] = v;
				if (e < 2)
					mx0 = fmaxf(mx0, v);
				else
					mx1 = fmaxf(mx1, v);
			}
		mx0 = fmaxf(mx0, __shfl_xor_sync(FULL_MASK, mx0, 1));
		mx0 = fmaxf(mx0, __shfl_xor_sync(FULL_MASK, mx0, 2));
		mx1 = fmaxf(mx1, __shfl_xor_sync(FULL_MASK, mx1, 1));
		mx1 = fmaxf(mx1, __shfl_xor_sync(FULL_MASK, mx1, 2));
		// Key 0 is in every row's first step, so the maxima are finite from then on.
		float c0 = expf(m0 - mx0), c1 = expf(m1 - mx1), ls0 = 0, ls1 = 0;
		m0 = mx0;
		m1 = mx1;
#pragma unroll
		for (int nt = 0; nt < KC / 8; nt++) {
			s[nt][0] = expf(s[nt][0] - mx0); // a masked key: exp(-inf) = 0
			s[nt][1] = expf(s[nt][1] - mx0);
			s[nt][2] = expf(s[nt][2] - mx1);
			s[nt][3] = expf(s[nt][3] - mx1);
			ls0 += s[nt][0] + s[nt][1];
			ls1 += s[nt][2] + s[nt][3];
		}
		l0 = l0 * c0 + ls0;
		l1 = l1 * c1 + ls1;
#pragma unroll
		for (int dn = 0; dn < MAXHD / 8; dn++) {
			o[dn][0] *= c0;
			o[dn][1] *= c0;
			o[dn][2] *= c1;
			o[dn][3] *= c1;
		}
#pragma unroll
		for (int kk = 0; kk < KC / 16; kk++) {
			unsigned ph[4], pl[4];
			split_bf16(s[2 * kk][0], s[2 * kk][1], &ph[0], &pl[0]);
			split_bf16(s[2 * kk][2], s[2 * kk][3], &ph[1], &pl[1]);
			split_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1], &ph[2], &pl[2]);
			split_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3], &ph[3], &pl[3]);
#pragma unroll
			for (int dn = 0; dn < MAXHD / 8; dn++)
				if (dn * 8 < hd) {
					const bf16 *vr = svt + (dn * 8 + gid) * vp + kk * 16 + 2 * tig;
					unsigned b[2] = {*(const unsigned *)vr, *(const unsigned *)(vr + 8)};
					mma_bf16(o[dn], ph, b, o[dn]);
					mma_bf16(o[dn], pl, b, o[dn]);
				}
		}
	}
	if (!active)
		return;
	l0 += __shfl_xor_sync(FULL_MASK, l0, 1);
	l0 += __shfl_xor_sync(FULL_MASK, l0, 2);
	l1 += __shfl_xor_sync(FULL_MASK, l1, 1);
	l1 += __shfl_xor_sync(FULL_MASK, l1, 2);
	float *o0 = r0 < rows ? out + (size_t)(t0 + r0 / group) * nh * hd + (size_t)(kh * group + r0 % group) * hd : nullptr;
	float *o1 = r1 < rows ? out + (size_t)(t0 + r1 / group) * nh * hd + (size_t)(kh * group + r1 % group) * hd : nullptr;
#pragma unroll
	for (int dn = 0; dn < MAXHD / 8; dn++)
		if (dn * 8 < hd) {
			int c = dn * 8 + 2 * tig;
			if (o0) {
				o0[c] = o[dn][0] / l0;
				o0[c + 1] = o[dn][1] / l0;
			}
			if (o1) {
				o1[c] = o[dn][2] / l1;
				o1[c + 1] = o[dn][3] / l1;
			}
		}
}

// attn_mma64 and attn_mma128: attn_mma for head dims up to 64 (steps of 64 keys) and up to
// 128 (steps of 32 keys, bounding the registers the larger accumulators take; the query
// fragments in shared memory, QSH, and its launch bounds asking for 3 blocks of 128 threads an
// SM: at most 168 registers a thread). ptxas -v (CUDA 11.8) registers, sm_80 / sm_90, none
// spilling: attn_mma64 168 / 138; attn_mma128 159 / 143, where it took 236 / 205 (2 blocks an
// SM) with the fragments in registers. attn_mma128 takes 51,712 bytes of shared memory at hd
// 128 (18,944 before), past the 48 KiB a launch gets without opting in.
#define ATTN_MMA_KERNEL(name, MAXHD, KC, QSH, BOUNDS)                                                             \
	KERNEL void BOUNDS                                                                                            \
	    name(float *__restrict__ out, const float *__restrict__ q, const bf16 *__restrict__ kv,                   \
	         const int *__restrict__ tiles, const int *__restrict__ tok_pos, const int *__restrict__ tok_seq,     \
	         const int *__restrict__ tables, const int *__restrict__ table_off, int nh, int nkv, int hd, int bs, \
	         float scale) {                                                                                       \
		attn_mma<MAXHD, KC, QSH>(out, q, kv, tiles, tok_pos, tok_seq, tables, table_off, nh, nkv, hd, bs, scale); \
	}                                                                                                             \
	REGISTER(name)
ATTN_MMA_KERNEL(attn_mma64, 64, 64, false, __launch_bounds__(128));
ATTN_MMA_KERNEL(attn_mma128, 128, 32, true, __launch_bounds__(128, 3));

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
