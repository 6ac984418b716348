//go:build !amd64 || purego

package cpu

// hasReadAVX2 is false: no assembly read kernel here.
const hasReadAVX2 = false

// readSum returns the wrapping sum of s.
func readSum(s []uint64) uint64 { return readSumGo(s) }
