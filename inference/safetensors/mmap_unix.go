//go:build unix

package safetensors

import (
	"fmt"
	"math"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

const canMmap = true

// mmapFile maps size bytes of f read-only and shared (pages come from the page cache, so several
// processes loading one model share its memory).
func mmapFile(f *os.File, size int64) ([]byte, func() error, error) {
	if size == 0 {
		return []byte{}, nil, nil
	}
	if size > math.MaxInt {
		return nil, nil, fmt.Errorf("file of %d bytes is too large to map", size)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return b, func() error { return unix.Munmap(b) }, nil
}

// dropPages applies MADV_DONTNEED to the whole pages inside b (a read-only shared file mapping,
// so dropped pages are re-read from the page cache on the next access).
func dropPages(b []byte) error {
	ps := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(&b[0]))
	lo := (start + ps - 1) &^ (ps - 1)
	hi := (start + uintptr(len(b))) &^ (ps - 1)
	if hi <= lo {
		return nil
	}
	return unix.Madvise(b[lo-start:hi-start], unix.MADV_DONTNEED)
}
