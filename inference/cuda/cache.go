package cuda

import (
	"fmt"

	"github.com/chainedsql/chainedsql/inference/lm"
)

// Cache is one sequence's KV cache: the blocks of the model's device pool that hold its keys and
// values (blockTokens positions each, every layer), in order. Blocks are taken from the pool as
// tokens are added and given back by Truncate and Release. Blocks are reference counted: Fork
// shares a prefix's blocks between caches, and a block returns to the pool when its last holder
// drops it.
type Cache struct {
	m        *Model
	n, max   int
	blocks   []int32
	released bool
}

var _ lm.Forker = (*Cache)(nil)

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
// drops the blocks no longer needed (those no other cache holds go back to the pool).
func (c *Cache) Truncate(n int) {
	if n >= c.n {
		return
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.n = max(n, 0)
	c.trim(c.n)
}

// Fork returns a new cache of capacity maxTokens holding the first n tokens of c (0 ≤ n ≤ Len()
// and n ≤ maxTokens ≤ ContextLength): the blocks holding them are shared by reference, and the
// last one, when partly filled, is copied on the device by whichever cache writes into it first.
// c is unchanged; both are released separately.
func (c *Cache) Fork(n, maxTokens int) (lm.Cache, error) {
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return nil, errClosed
	case c.released:
		return nil, fmt.Errorf("cuda: fork of a released cache")
	case n < 0 || n > c.n:
		return nil, fmt.Errorf("cuda: fork of %d tokens from a cache holding %d", n, c.n)
	case maxTokens < max(n, 1) || maxTokens > m.cfg.MaxPositionEmbeddings:
		return nil, fmt.Errorf("cuda: fork of %d tokens into a cache of %d: want %d to the context length %d", n, maxTokens, max(n, 1), m.cfg.MaxPositionEmbeddings)
	}
	nb := blocksFor(n)
	f := &Cache{m: m, n: n, max: maxTokens, blocks: make([]int32, nb, blocksFor(maxTokens))}
	for i, b := range c.blocks[:nb] {
		m.refs[b]++
		f.blocks[i] = b
	}
	return f, nil
}

// KVBlocks returns the number of the pool's blocks held by at least one cache and the bytes they
// take (every layer's keys and values).
func (m *Model) KVBlocks() (blocks int, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nblocks - len(m.freeBlocks)
	return n, int64(n) * int64(m.L*m.blockBytes())
}

// KVBlockTokens returns the number of tokens per KV block.
func (m *Model) KVBlockTokens() int { return blockTokens }

// blocksFor is the number of blocks holding n tokens.
func blocksFor(n int) int { return (n + blockTokens - 1) / blockTokens }

// trim drops the blocks past those n tokens need (the model's lock held).
func (c *Cache) trim(n int) {
	keep := blocksFor(n)
	if keep >= len(c.blocks) {
		return
	}
	for _, b := range c.blocks[keep:] {
		c.m.unref(b)
	}
	c.blocks = c.blocks[:keep]
}

// Release drops the cache's blocks (those no other cache holds go back to the pool); the cache
// must not be used afterwards.
func (c *Cache) Release() {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	if c.released {
		return
	}
	c.trim(0)
	c.released, c.n = true, 0
}

// reserve makes positions [Len(), need) writable (the model's lock held): the partly filled
// block holding position Len() is copied on the device when another cache shares it, and blocks
// are taken from the pool so that need tokens fit.
func (c *Cache) reserve(need int) error {
	if need <= c.n {
		return nil
	}
	m := c.m
	cow := -1 // the shared block to copy
	if i := c.n / blockTokens; c.n%blockTokens != 0 && m.refs[c.blocks[i]] > 1 {
		cow = i
	}
	k := blocksFor(need) - len(c.blocks)
	if cow >= 0 {
		k++
	}
	if k > len(m.freeBlocks) {
		return fmt.Errorf("cuda: the KV cache pool is full: %d more blocks of %d tokens wanted, %d free of %d (raise the pool's size)", k, blockTokens, len(m.freeBlocks), m.nblocks)
	}
	if cow >= 0 {
		own := m.takeBlock()
		if err := m.copyBlock(own, c.blocks[cow]); err != nil {
			m.unref(own)
			return fmt.Errorf("cuda: copying a shared KV block: %w", err)
		}
		m.unref(c.blocks[cow])
		c.blocks[cow] = own
	}
	for len(c.blocks) < blocksFor(need) {
		c.blocks = append(c.blocks, m.takeBlock())
	}
	return nil
}

// blockBytes is the bytes of one block in one layer: (K, V) × kv dims × positions × bf16.
func (m *Model) blockBytes() int { return 2 * 2 * m.kvd * blockTokens }

// takeBlock takes a free block from the pool with one reference (the lock held; one is free).
func (m *Model) takeBlock() int32 {
	last := len(m.freeBlocks) - 1
	b := m.freeBlocks[last]
	m.freeBlocks = m.freeBlocks[:last]
	m.refs[b] = 1
	return b
}

// unref drops a reference to block b, returning it to the pool with the last (the lock held).
func (m *Model) unref(b int32) {
	if m.refs[b]--; m.refs[b] == 0 {
		m.freeBlocks = append(m.freeBlocks, b)
	}
}

// copyBlock queues device copies of block src's keys and values, every layer, into block dst.
func (m *Model) copyBlock(dst, src int32) error {
	per := m.blockBytes()
	for l := range m.L {
		base := m.layerKV(l)
		if err := m.dev.Copy(base+Ptr(int(dst)*per), base+Ptr(int(src)*per), per); err != nil {
			return err
		}
	}
	return nil
}
