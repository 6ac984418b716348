//go:build amd64 && !purego

package cpu

// readSumAVX2 is in roofline_amd64.s: the wrapping sum of p[0:n], n a multiple of 32, read in
// two streams with pure loads into eight independent accumulators.
//
//go:noescape
func readSumAVX2(p *uint64, n int) uint64

// hasReadAVX2 reports whether readSumAVX2 can run (AVX2 enabled by the OS).
var hasReadAVX2 = hasAVX2

// readSum returns the wrapping sum of s (len a multiple of readAlign): readSumAVX2 where the
// CPU has AVX2, readSumGo elsewhere.
func readSum(s []uint64) uint64 {
	if !hasReadAVX2 || len(s) == 0 {
		return readSumGo(s)
	}
	return readSumAVX2(&s[0], len(s))
}
