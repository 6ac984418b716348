//go:build linux

package hugemem

import (
	"os"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// thpMode returns /sys/kernel/mm/transparent_hugepage/enabled's selected value ("always",
// "madvise" or "never"; "" when unreadable), read on first use rather than at start-up of every
// binary that links the runtime.
var thpMode = sync.OnceValue(func() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.IndexByte(s, '['); i >= 0 {
		if j := strings.IndexByte(s[i:], ']'); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return ""
})

// allocHuge maps n bytes (rounded up to PageSize) at a PageSize-aligned address, marked
// MADV_HUGEPAGE: it over-maps by one huge page and unmaps the unaligned head and tail. It
// returns nil where THP is off or a call fails (the caller falls back to the Go heap).
func allocHuge(n int) *Buffer {
	if m := thpMode(); m != "always" && m != "madvise" || os.Getenv("CHAINEDSQL_NOHUGEPAGES") != "" {
		return nil
	}
	size := (uintptr(n) + PageSize - 1) &^ (PageSize - 1)
	p, err := unix.MmapPtr(-1, 0, nil, size+PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil
	}
	head := (PageSize - uintptr(p)%PageSize) % PageSize
	if head > 0 {
		if unix.MunmapPtr(p, head) != nil {
			unix.MunmapPtr(p, size+PageSize)
			return nil
		}
	}
	base := unsafe.Add(p, head)
	if tail := PageSize - head; tail > 0 {
		unix.MunmapPtr(unsafe.Add(base, size), tail) // a failure only leaves an unused tail mapped
	}
	b := unsafe.Slice((*byte)(base), size)
	if unix.Madvise(b, unix.MADV_HUGEPAGE) != nil {
		unix.MunmapPtr(base, size)
		return nil
	}
	return &Buffer{Bytes: b[:n:n], huge: true, free: func() error { return unix.MunmapPtr(base, size) }}
}
