package qwen2

import (
	"fmt"

	"github.com/chainedsql/chainedsql/inference/generate"
)

// Cache is one sequence's KV cache: per layer, the RoPE-rotated keys and the values of every
// token so far, in f32. Keys are laid out [kv head][token][head dim], so one head's keys are a
// tokens × head-dim matrix for the scores; values are transposed, [kv head][head dim][vs], so
// one head's values are a head-dim × vs matrix for P·V and a decode step appends a column
// instead of transposing the whole cache. vs is the capacity plus vPad: a row stride that is not
// a multiple of 4 KiB, so the strided column writes do not all land in one cache set. Memory
// grows (doubling) as tokens are added, up to the capacity given to NewCache.
type Cache struct {
	m        *Model
	n, max   int
	cap, vs  int         // tokens the buffers hold; value row stride
	k, v     [][]float32 // per layer: keys nkv×cap×hd, values nkv×hd×vs
	released bool
}

// vPad is added to the capacity to give the value row stride.
const vPad = 16

var _ generate.Cache = (*Cache)(nil)

// NewCache returns an empty cache for up to maxTokens tokens (1 ≤ maxTokens ≤ ContextLength).
func (m *Model) NewCache(maxTokens int) (generate.Cache, error) {
	if maxTokens < 1 || maxTokens > m.cfg.MaxPositionEmbeddings {
		return nil, fmt.Errorf("qwen2: cache of %d tokens: want 1 to the context length %d", maxTokens, m.cfg.MaxPositionEmbeddings)
	}
	L := m.cfg.NumHiddenLayers
	return &Cache{m: m, max: maxTokens, k: make([][]float32, L), v: make([][]float32, L)}, nil
}

// Len returns the number of tokens held.
func (c *Cache) Len() int { return c.n }

// Cap returns the most tokens the cache may hold.
func (c *Cache) Cap() int { return c.max }

// Truncate keeps the first n tokens (n ≥ Len() changes nothing; n < 0 empties the cache).
func (c *Cache) Truncate(n int) {
	if n < c.n {
		c.n = max(n, 0)
	}
}

// Release frees the cache's memory; the cache must not be used afterwards.
func (c *Cache) Release() {
	c.released = true
	c.n, c.cap, c.vs = 0, 0, 0
	c.k, c.v = nil, nil
}

// reserve grows the buffers to hold need tokens (need ≤ max), keeping the first n tokens.
func (c *Cache) reserve(need int) {
	if need <= c.cap {
		return
	}
	nc := min(c.max, max(need, 2*c.cap, 64))
	nvs := nc + vPad
	nkv, hd := c.m.cfg.NumKeyValueHeads, c.m.cfg.HeadDim
	for l := range c.k {
		k := make([]float32, nkv*nc*hd)
		v := make([]float32, nkv*hd*nvs)
		if c.n > 0 {
			for kh := range nkv {
				copy(k[kh*nc*hd:], c.k[l][kh*c.cap*hd:(kh*c.cap+c.n)*hd])
			}
			for r := range nkv * hd {
				copy(v[r*nvs:], c.v[l][r*c.vs:r*c.vs+c.n])
			}
		}
		c.k[l], c.v[l] = k, v
	}
	c.cap, c.vs = nc, nvs
}

// store writes one token's keys and values (kvDim each, heads concatenated) of layer l at
// position p (< cap).
func (c *Cache) store(l, p int, k, v []float32) {
	hd := c.m.cfg.HeadDim
	K, V := c.k[l], c.v[l]
	for kh := range c.m.cfg.NumKeyValueHeads {
		o := (kh*c.cap + p) * hd
		copy(K[o:o+hd], k[kh*hd:(kh+1)*hd])
		for d, x := range v[kh*hd : (kh+1)*hd] {
			V[(kh*hd+d)*c.vs+p] = x
		}
	}
}
