package qwen2

import (
	"fmt"

	"github.com/chainedsql/chainedsql/inference/generate"
)

// Cache is one sequence's KV cache: per layer, the RoPE-rotated keys and the values of every
// token so far in f32, laid out [kv head][token][head dim] so that one head's keys form a
// matrix for cpu.MatMul. Memory grows as tokens are added, up
// to the capacity given to NewCache.
type Cache struct {
	m        *Model
	n, max   int
	cap      int         // tokens the buffers hold
	k, v     [][]float32 // per layer, cap × kvDim
	released bool
}

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
	c.n, c.cap = 0, 0
	c.k, c.v = nil, nil
}

// reserve grows the buffers to hold need tokens (need ≤ max), keeping the first n tokens.
func (c *Cache) reserve(need int) {
	if need <= c.cap {
		return
	}
	nc := min(c.max, max(need, 2*c.cap, 64))
	nkv, hd := c.m.cfg.NumKeyValueHeads, c.m.cfg.HeadDim
	for l := range c.k {
		k := make([]float32, nkv*nc*hd)
		v := make([]float32, nkv*nc*hd)
		if c.n > 0 {
			for kh := range nkv {
				copy(k[kh*nc*hd:], c.k[l][kh*c.cap*hd:(kh*c.cap+c.n)*hd])
				copy(v[kh*nc*hd:], c.v[l][kh*c.cap*hd:(kh*c.cap+c.n)*hd])
			}
		}
		c.k[l], c.v[l] = k, v
	}
	c.cap = nc
}
