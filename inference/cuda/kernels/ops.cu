// Elementwise and per-row kernels of the forward pass.
#pragma once
#include "common.cuh"

// embed_bf16: out[t] = table[toks[t]] widened to f32 (grid T, any block).
KERNEL void embed_bf16(float *__restrict__ out, const bf16 *__restrict__ table, const int *__restrict__ toks, int H) {
	int t = blockIdx.x;
	const bf16 *row = table + (size_t)toks[t] * H;
	for (int i = threadIdx.x; i < H; i += blockDim.x)
		out[(size_t)t * H + i] = bf2f(row[i]);
}
REGISTER(embed_bf16);

// rmsnorm: out[r] = x[rows[r]] / sqrt(mean(x²) + eps) · w, for r < gridDim.x (rows NULL: r
// itself). The scale is computed in double, as the CPU backend does. Block: a multiple of 32.
KERNEL void rmsnorm(float *__restrict__ out, const float *__restrict__ x, const float *__restrict__ w,
                    const int *__restrict__ rows, int H, float eps) {
	__shared__ float red[32];
	int r = blockIdx.x;
	const float *xr = x + (size_t)(rows ? rows[r] : r) * H;
	float *o = out + (size_t)r * H;
	float ss = 0;
	for (int i = threadIdx.x; i < H; i += blockDim.x)
		ss += xr[i] * xr[i];
	ss = block_sum(ss, red);
	float s = (float)(1.0 / sqrt((double)ss / H + (double)eps));
	for (int i = threadIdx.x; i < H; i += blockDim.x)
		o[i] = xr[i] * s * w[i];
}
REGISTER(rmsnorm);

// silu_mul: out[t][i] = silu(gu[t][i]) · gu[t][I+i], gu holding the fused gate and up
// projections of T rows (grid-stride over T·I).
KERNEL void silu_mul(float *__restrict__ out, const float *__restrict__ gu, int T, int I) {
	size_t n = (size_t)T * I;
	for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
		size_t t = idx / I, i = idx % I;
		float g = gu[t * 2 * I + i], u = gu[t * 2 * I + I + i];
		out[idx] = g / (1.0f + expf(-g)) * u;
	}
}
REGISTER(silu_mul);

// to_bf16: out[i] = in[i] rounded to bf16 (the activations cuBLAS multiplies).
KERNEL void to_bf16(bf16 *__restrict__ out, const float *__restrict__ in, int n) {
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		out[i] = f2bf(in[i]);
}
REGISTER(to_bf16);

// rope_kv takes the fused QKV projection of T tokens (qkv: T rows of (nh + 2·nkv)·hd, no bias
// yet), adds the bias, rotates the query and key heads by the token's position (Hugging Face's
// rotate_half pairing: x[f] with x[f + hd/2]), writes the queries to q and the keys and values
// into the paged KV cache of the layer (kv: blocks of [2][nkv][bs][hd] bf16; the token's block
// is tables[table_off[tok_seq[t]] + pos/bs]). cos_t/sin_t hold hd/2 values per position.
// Grid T, any block.
KERNEL void rope_kv(float *__restrict__ q, const float *__restrict__ qkv, const float *__restrict__ bias,
                    const float *__restrict__ cos_t, const float *__restrict__ sin_t, const int *__restrict__ tok_pos,
                    const int *__restrict__ tok_seq, const int *__restrict__ tables, const int *__restrict__ table_off,
                    bf16 *__restrict__ kv, int nh, int nkv, int hd, int bs) {
	int t = blockIdx.x, pos = tok_pos[t], half = hd / 2;
	int width = (nh + 2 * nkv) * hd;
	const float *row = qkv + (size_t)t * width;
	const float *cs = cos_t + (size_t)pos * half, *sn = sin_t + (size_t)pos * half;
	int blk = tables[table_off[tok_seq[t]] + pos / bs], off = pos % bs;
	bf16 *kb = kv + (size_t)blk * 2 * nkv * bs * hd;
	bf16 *vb = kb + (size_t)nkv * bs * hd;
	for (int i = threadIdx.x; i < (nh + nkv) * half; i += blockDim.x) {
		int h = i / half, f = i % half, base = h * hd;
		float a = row[base + f] + bias[base + f];
		float c = row[base + f + half] + bias[base + f + half];
		float r1 = a * cs[f] - c * sn[f], r2 = c * cs[f] + a * sn[f];
		if (h < nh) {
			q[(size_t)t * nh * hd + base + f] = r1;
			q[(size_t)t * nh * hd + base + f + half] = r2;
		} else {
			bf16 *k = kb + ((size_t)(h - nh) * bs + off) * hd;
			k[f] = f2bf(r1);
			k[f + half] = f2bf(r2);
		}
	}
	for (int i = threadIdx.x; i < nkv * hd; i += blockDim.x) {
		int kh = i / hd, d = i % hd, src = (nh + nkv) * hd + i;
		vb[((size_t)kh * bs + off) * hd + d] = f2bf(row[src] + bias[src]);
	}
}
REGISTER(rope_kv);
