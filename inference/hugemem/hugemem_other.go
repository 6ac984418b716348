//go:build !linux

package hugemem

// thpMode is Linux's transparent huge page setting; there is none elsewhere.
func thpMode() string { return "" }

// allocHuge is Linux-only; elsewhere every Buffer is a Go slice.
func allocHuge(int) *Buffer { return nil }
