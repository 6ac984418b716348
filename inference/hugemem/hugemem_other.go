//go:build !linux

package hugemem

// allocHuge is Linux-only; elsewhere every Buffer is a Go slice.
func allocHuge(int) *Buffer { return nil }
