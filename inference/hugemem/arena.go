package hugemem

import (
	"errors"
	"sync"
)

// ArenaChunk is the size of the buffers an Arena carves allocations from (larger requests get a
// buffer of their own size).
const ArenaChunk = 128 << 20

// Arena hands out many allocations from a few large Buffers, so that rounding each weight
// matrix up to a whole huge page does not waste memory: an Arena of a 1 GB model wastes at most
// the untouched tail of each chunk, which never becomes resident, plus part of one huge page per
// chunk. Safe for concurrent use. The zero value is ready.
type Arena struct {
	mu     sync.Mutex
	bufs   []*Buffer
	cur    []byte // the unused rest of the last chunk
	huge   bool
	closed bool
}

// Alloc returns n zeroed bytes (n >= 0), aligned to 64 bytes, valid until Free.
func (a *Arena) Alloc(n int) []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		panic("hugemem: Alloc on a freed Arena")
	}
	if n <= 0 {
		return []byte{}
	}
	need := (n + 63) &^ 63
	if need > ArenaChunk { // its own buffer; the current chunk's rest stays in use
		b := Alloc(n)
		a.bufs = append(a.bufs, b)
		a.huge = a.huge || b.Huge()
		return b.Bytes
	}
	if need > len(a.cur) {
		b := Alloc(ArenaChunk)
		a.bufs = append(a.bufs, b)
		a.huge = a.huge || b.Huge()
		a.cur = b.Bytes
	}
	out := a.cur[:n:n]
	a.cur = a.cur[need:]
	return out
}

// Huge reports whether any chunk is mapped for huge pages.
func (a *Arena) Huge() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.huge
}

// Free releases every chunk; the memory handed out must not be used after that. A second Free
// does nothing, as does Free of a nil Arena.
func (a *Arena) Free() error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var err error
	for _, b := range a.bufs {
		err = errors.Join(err, b.Free())
	}
	a.bufs, a.cur, a.closed = nil, nil, true
	return err
}
