package qwen2

import (
	"fmt"
	"sync/atomic"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/lm"
)

// The paged KV cache. A sequence's keys and values live in fixed-size blocks of B tokens
// (DefaultKVBlock, a multiple of cpu.KeyTile) and its Cache is a block table: block i holds
// positions [i·B, (i+1)·B). One block holds those tokens for every layer, each layer's part laid
// out as
//
//	K  [kv head][B/16][head dim][16]   RoPE-rotated keys, transposed in tiles of 16 tokens
//	V  [kv head][B][head dim]          values, a token per row
//
// (layer l's part starts at l·2·nkv·B·hd floats, its V at nkv·B·hd past that), so one head's keys
// in a block are tiles of head dim × 16 whose rows put 16 tokens along the SIMD lanes for the
// scores (cpu.Paged's Tiled layout), and its values a B × head-dim matrix whose rows put the
// dimensions along them for P·V; a decode step writes one column of a tile and one row of V.
// Blocks are reference counted: Fork gives a new cache the blocks of a prefix of another by
// reference, and a block shared by several caches is copied before one of them writes into it
// (only a partly filled last block ever is: the others hold positions before every sharer's
// length). A block is freed when its last cache drops it. docs/DESIGN.md ("Paged KV cache") has
// the block table other backends share. With Options.KVBF16 the blocks hold the same layout in
// bf16 (kvBlock.data16): stored rounded, widened exactly where read.

// DefaultKVBlock is the number of tokens per KV block. Decode attention works in chunks of at most
// cpu.AttendChunkLen (256) positions inside one block, so blocks much smaller than that cost
// per-chunk overhead (kernel calls, a merge) against a contiguous cache; larger ones waste more
// memory in each sequence's last block and copy more when a shared last block is written.
const DefaultKVBlock = 256

// kvBlock is one block of B tokens' keys and values for every layer, shared by refs caches.
type kvBlock struct {
	data   []float32 // f32 blocks
	data16 []uint16  // bf16 blocks (Options.KVBF16)
	refs   atomic.Int32
}

// kvStore is a model's block bookkeeping: the block size, the value type and the blocks alive.
type kvStore struct {
	block int  // tokens per block; 0 means DefaultKVBlock
	bf16  bool // blocks hold bf16 (data16), not f32
	live  atomic.Int64
}

// Cache is one sequence's KV cache: a block table over the model's KV blocks, holding n tokens of
// at most max. It grows a block at a time as tokens are added.
type Cache struct {
	m        *Model
	n, max   int
	blocks   []*kvBlock
	released bool
}

var (
	_ lm.Cache  = (*Cache)(nil)
	_ lm.Forker = (*Cache)(nil)
)

// blockLen is the model's tokens per KV block.
func (m *Model) blockLen() int {
	if m.kv.block > 0 {
		if m.kv.block%cpu.KeyTile != 0 {
			panic(fmt.Sprintf("qwen2: KV blocks of %d tokens, want a multiple of %d", m.kv.block, cpu.KeyTile))
		}
		return m.kv.block
	}
	return DefaultKVBlock
}

// blockFloats is the size of one block in floats.
func (m *Model) blockFloats() int {
	c := &m.cfg
	return c.NumHiddenLayers * 2 * c.NumKeyValueHeads * m.blockLen() * c.HeadDim
}

// KVBlocks returns the number of KV blocks alive (held by at least one cache) and the bytes they
// take.
func (m *Model) KVBlocks() (blocks int, bytes int64) {
	n := m.kv.live.Load()
	size := int64(4)
	if m.kv.bf16 {
		size = 2
	}
	return int(n), n * int64(m.blockFloats()) * size
}

// KVBlockTokens returns the number of tokens per KV block.
func (m *Model) KVBlockTokens() int { return m.blockLen() }

func (m *Model) newBlock() *kvBlock {
	b := new(kvBlock)
	if m.kv.bf16 {
		b.data16 = make([]uint16, m.blockFloats())
	} else {
		b.data = make([]float32, m.blockFloats())
	}
	b.refs.Store(1)
	m.kv.live.Add(1)
	return b
}

// unref drops one reference to b, freeing it with the last.
func (m *Model) unref(b *kvBlock) {
	switch r := b.refs.Add(-1); {
	case r == 0:
		b.data, b.data16 = nil, nil
		m.kv.live.Add(-1)
	case r < 0:
		panic("qwen2: KV block released more often than referenced")
	}
}

// NewCache returns an empty cache for up to maxTokens tokens (1 ≤ maxTokens ≤ ContextLength).
func (m *Model) NewCache(maxTokens int) (lm.Cache, error) {
	if maxTokens < 1 || maxTokens > m.cfg.MaxPositionEmbeddings {
		return nil, fmt.Errorf("qwen2: cache of %d tokens: want 1 to the context length %d", maxTokens, m.cfg.MaxPositionEmbeddings)
	}
	return &Cache{m: m, max: maxTokens}, nil
}

// Len returns the number of tokens held.
func (c *Cache) Len() int { return c.n }

// Cap returns the most tokens the cache may hold.
func (c *Cache) Cap() int { return c.max }

// Blocks returns the number of KV blocks in the cache's table.
func (c *Cache) Blocks() int { return len(c.blocks) }

// Truncate keeps the first n tokens (n ≥ Len() changes nothing; n < 0 empties the cache), dropping
// the blocks past them.
func (c *Cache) Truncate(n int) {
	if n >= c.n {
		return
	}
	c.n = max(n, 0)
	c.dropFrom(c.blocksFor(c.n))
}

// Release frees the cache's blocks (those no other cache holds); the cache must not be used
// afterwards.
func (c *Cache) Release() {
	if c.released {
		return
	}
	c.dropFrom(0)
	c.released = true
	c.n = 0
}

// Fork returns a new cache of capacity maxTokens holding the first n tokens of c (0 ≤ n ≤ Len()
// and n ≤ maxTokens ≤ ContextLength): the blocks holding them are shared by reference, and the
// last one, when partly filled, is copied by whichever cache writes into it first. c is unchanged.
func (c *Cache) Fork(n, maxTokens int) (lm.Cache, error) {
	switch {
	case c.released:
		return nil, fmt.Errorf("qwen2: fork of a released cache")
	case n < 0 || n > c.n:
		return nil, fmt.Errorf("qwen2: fork of %d tokens from a cache holding %d", n, c.n)
	case maxTokens < max(n, 1) || maxTokens > c.m.cfg.MaxPositionEmbeddings:
		return nil, fmt.Errorf("qwen2: fork of %d tokens into a cache of %d: want %d to the context length %d", n, maxTokens, max(n, 1), c.m.cfg.MaxPositionEmbeddings)
	}
	nb := c.blocksFor(n)
	f := &Cache{m: c.m, n: n, max: maxTokens, blocks: make([]*kvBlock, nb, c.blocksFor(maxTokens))}
	for i, b := range c.blocks[:nb] {
		b.refs.Add(1)
		f.blocks[i] = b
	}
	return f, nil
}

// blocksFor is the number of blocks holding n tokens.
func (c *Cache) blocksFor(n int) int {
	B := c.m.blockLen()
	return (n + B - 1) / B
}

// dropFrom unreferences blocks i and after.
func (c *Cache) dropFrom(i int) {
	if i >= len(c.blocks) {
		return
	}
	for _, b := range c.blocks[i:] {
		c.m.unref(b)
	}
	clear(c.blocks[i:])
	c.blocks = c.blocks[:i]
}

// prepare makes positions [n, need) writable (need ≤ max): the partly filled block holding
// position n is copied when another cache shares it, and blocks are added up to need.
func (c *Cache) prepare(need int) {
	B := c.m.blockLen()
	if i := c.n / B; c.n%B != 0 {
		if b := c.blocks[i]; b.refs.Load() > 1 {
			own := c.m.newBlock()
			copy(own.data, b.data)
			copy(own.data16, b.data16)
			c.m.unref(b)
			c.blocks[i] = own
		}
	}
	for len(c.blocks)*B < need {
		c.blocks = append(c.blocks, c.m.newBlock())
	}
}

// store writes one token's keys and values (kvDim each, heads concatenated) of layer l at
// position p (< the prepared length).
func (c *Cache) store(l, p int, k, v []float32) {
	cf := &c.m.cfg
	B, hd, nkv := c.m.blockLen(), cf.HeadDim, cf.NumKeyValueHeads
	o := p % B
	base := l * 2 * nkv * B * hd
	if blk := c.blocks[p/B].data16; blk != nil {
		for kh := range nkv {
			ko := base + kh*B*hd + o/cpu.KeyTile*cpu.KeyTile*hd + o%cpu.KeyTile
			for d, x := range k[kh*hd : (kh+1)*hd] {
				blk[ko+d*cpu.KeyTile] = cpu.F32ToBF16(x)
			}
			vo := base + (nkv*B+o)*hd + kh*B*hd
			for d, x := range v[kh*hd : (kh+1)*hd] {
				blk[vo+d] = cpu.F32ToBF16(x)
			}
		}
		return
	}
	blk := c.blocks[p/B].data
	for kh := range nkv {
		ko := base + kh*B*hd + o/cpu.KeyTile*cpu.KeyTile*hd + o%cpu.KeyTile
		for d, x := range k[kh*hd : (kh+1)*hd] {
			blk[ko+d*cpu.KeyTile] = x
		}
		vo := base + (nkv*B+o)*hd + kh*B*hd
		copy(blk[vo:vo+hd], v[kh*hd:(kh+1)*hd])
	}
}

// keys sets w to the first n keys of kv head kh in layer l, transposed: a tiled paged matrix
// (head dim × n, cpu.Paged's Tiled) over the cache's blocks, reusing w's block slices' capacity.
func (c *Cache) keys(w *cpu.Paged, l, kh, n int) {
	cf := &c.m.cfg
	B, hd, nkv := c.m.blockLen(), cf.HeadDim, cf.NumKeyValueHeads
	c.paged(w, l*2*nkv*B*hd+kh*B*hd, B*hd, n)
	w.Rows, w.Cols, w.Tiled = hd, n, true
}

// values sets w to the values of the first n tokens of kv head kh in layer l: a ByRows paged
// matrix (n × head dim) over the cache's blocks, reusing w's block slices' capacity.
func (c *Cache) values(w *cpu.Paged, l, kh, n int) {
	cf := &c.m.cfg
	B, hd, nkv := c.m.blockLen(), cf.HeadDim, cf.NumKeyValueHeads
	c.paged(w, l*2*nkv*B*hd+(nkv+kh)*B*hd, B*hd, n)
	w.Rows, w.Cols, w.ByRows = n, hd, true
}

// prefix sets w to the first n tokens of full (a view keys or values set to at least n tokens),
// sharing full's block list.
func (c *Cache) prefix(w, full *cpu.Paged, n int) {
	*w = *full
	nb := c.blocksFor(n)
	if w.BF16 != nil {
		w.BF16 = w.BF16[:nb]
	} else {
		w.Blocks = w.Blocks[:nb]
	}
	if w.Tiled {
		w.Cols = n
	} else {
		w.Rows = n
	}
}

// paged sets w's blocks to [off, off+size) of each block holding the first n tokens (f32 or bf16,
// as the cache's), its block size to the cache's; the caller sets the shape.
func (c *Cache) paged(w *cpu.Paged, off, size, n int) {
	f32, b16 := w.Blocks[:0], w.BF16[:0]
	for _, b := range c.blocks[:c.blocksFor(n)] {
		if c.m.kv.bf16 {
			b16 = append(b16, b.data16[off:off+size])
		} else {
			f32 = append(f32, b.data[off:off+size])
		}
	}
	*w = cpu.Paged{Block: c.m.blockLen()}
	if c.m.kv.bf16 {
		w.BF16 = b16
	} else {
		w.Blocks = f32
	}
}
