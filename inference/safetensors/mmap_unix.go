//go:build unix

package safetensors

import (
	"fmt"
	"math"
	"os"

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
