//go:build !unix

package safetensors

import (
	"errors"
	"os"
)

// canMmap is false here: Open reads the file into memory instead.
const canMmap = false

func mmapFile(*os.File, int64) ([]byte, func() error, error) {
	return nil, nil, errors.New("mmap is not supported on this platform")
}

func dropPages([]byte) error { return nil }
