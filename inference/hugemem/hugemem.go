// Package hugemem allocates the large, long-lived buffers of the student runtime (model
// weights) outside the Go heap, in anonymous memory the kernel may back with 2 MiB transparent
// huge pages.
//
// Why: decode streams every weight once per token, at DRAM speed. With 4 KiB pages, a 1 GB
// model is 250,000 pages; the hardware prefetchers stop at each page boundary and every page
// costs a TLB miss, so a matrix-vector product reads well below the memory bandwidth. On a 2 MiB
// page both problems are 512 times rarer (docs/BENCHMARKS.md: "Huge pages"). The Go runtime
// does not ask for huge pages itself, and with the common setting
// /sys/kernel/mm/transparent_hugepage/enabled = madvise it gets none, so this package maps its
// own memory, aligned to 2 MiB, and marks it MADV_HUGEPAGE. Where that is not possible (another
// OS, THP off, mmap refused) a Buffer falls back to an ordinary Go slice; the memory is zeroed
// either way.
package hugemem

// PageSize is the huge page size the allocations are aligned to.
const PageSize = 2 << 20

// Buffer is one allocation: Bytes is its memory (len = the size asked for). Free returns it;
// the slices viewing it must not be used after that.
type Buffer struct {
	Bytes []byte
	free  func() error
	huge  bool
}

// Huge reports whether the buffer was mapped and marked for huge pages (false for the Go-slice
// fallback). Whether the kernel found free huge pages is its own matter (AnonHugePages in
// /proc/self/smaps).
func (b *Buffer) Huge() bool { return b != nil && b.huge }

// Free releases the memory (a no-op for the fallback, which the GC collects, and on second call).
func (b *Buffer) Free() error {
	if b == nil {
		return nil
	}
	f := b.free
	b.free, b.Bytes = nil, nil
	if f == nil {
		return nil
	}
	return f()
}

// Alloc returns a zeroed buffer of n bytes (n >= 0), mapped for huge pages where the OS allows.
func Alloc(n int) *Buffer {
	if n <= 0 {
		return &Buffer{Bytes: []byte{}}
	}
	if b := allocHuge(n); b != nil {
		return b
	}
	return &Buffer{Bytes: make([]byte, n)}
}
