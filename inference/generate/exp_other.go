//go:build !amd64

package generate

// expFMA is false: expBuckets repeats math.Exp's amd64 assembly only, and calls math.Exp
// elsewhere.
const expFMA = false
