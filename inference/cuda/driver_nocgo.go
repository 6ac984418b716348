//go:build !cgo

package cuda

import "fmt"

func openDriver() (Device, error) {
	return nil, fmt.Errorf("cuda: %w: this binary was built without cgo, which loading the NVIDIA driver needs", ErrUnavailable)
}
