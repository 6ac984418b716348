//go:build !amd64 || purego

package cpu

// Without amd64 assembly there is no CPUID: Machine reports an unknown CPU.
const hasCPUID = false

func cpuid(leaf, sub uint32) (a, b, c, d uint32) { return 0, 0, 0, 0 }

func fmaLoop512(n int) { panic("cpu: no SIMD") }
func fmaLoop256(n int) { panic("cpu: no SIMD") }
