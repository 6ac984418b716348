package cuda

import "fmt"

// Cache is one sequence's KV cache: the blocks of the model's device pool that hold its keys and
// values (blockTokens positions each, every layer), in order. Blocks are taken from the pool as
// tokens are added and given back by Truncate and Release.
type Cache struct {
	m        *Model
	n, max   int
	blocks   []int32
	released bool
}

// newCache returns an empty cache for up to maxTokens tokens (1 ≤ maxTokens ≤ ContextLength).
// It takes no pool memory until tokens are added.
func (m *Model) newCache(maxTokens int) (*Cache, error) {
	if maxTokens < 1 || maxTokens > m.cfg.MaxPositionEmbeddings {
		return nil, fmt.Errorf("cuda: cache of %d tokens: want 1 to the context length %d", maxTokens, m.cfg.MaxPositionEmbeddings)
	}
	return &Cache{m: m, max: maxTokens}, nil
}

// Len returns the number of tokens held.
func (c *Cache) Len() int { return c.n }

// Truncate keeps the first n tokens (n ≥ Len() changes nothing; n < 0 empties the cache) and
// returns the blocks no longer needed to the pool.
func (c *Cache) Truncate(n int) {
	if n >= c.n {
		return
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.n = max(n, 0)
	c.trim(c.n)
}

// trim gives back the blocks past those n tokens need (the model's lock held).
func (c *Cache) trim(n int) {
	keep := (n + blockTokens - 1) / blockTokens
	if keep < len(c.blocks) {
		c.m.freeBlocks = append(c.m.freeBlocks, c.blocks[keep:]...)
		c.blocks = c.blocks[:keep]
	}
}

// Release returns the cache's blocks to the pool; the cache must not be used afterwards.
func (c *Cache) Release() {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	if c.released {
		return
	}
	c.trim(0)
	c.released, c.n = true, 0
}

// reserve takes blocks from the pool so that need tokens fit (the model's lock held).
func (c *Cache) reserve(need int) error {
	want := (need + blockTokens - 1) / blockTokens
	m := c.m
	if k := want - len(c.blocks); k > len(m.freeBlocks) {
		return fmt.Errorf("cuda: the KV cache pool is full: %d more blocks of %d tokens wanted, %d free of %d (raise the pool's size)", k, blockTokens, len(m.freeBlocks), m.nblocks)
	}
	for len(c.blocks) < want {
		last := len(m.freeBlocks) - 1
		c.blocks = append(c.blocks, m.freeBlocks[last])
		m.freeBlocks = m.freeBlocks[:last]
	}
	return nil
}
