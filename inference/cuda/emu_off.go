//go:build !cudaemu

package cuda

import "fmt"

func openEmulator() (Device, error) {
	return nil, fmt.Errorf("cuda: %w: %s needs a binary built with -tags cudaemu (go build -tags cudaemu ./cmd/student)", ErrUnavailable, BackendEmulated)
}
