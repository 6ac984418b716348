//go:build amd64 && !purego

package cpu

// cpuid runs the CPUID instruction for leaf and subleaf (cpuid_amd64.s).
//
//go:noescape
func cpuid(leaf, sub uint32) (a, b, c, d uint32)

// hasCPUID reports whether cpuid may be called (always on amd64).
const hasCPUID = true

// fmaLoop512 and fmaLoop256 run n iterations of 12 independent register-only FMAs on zmm and on
// ymm registers (cpuid_amd64.s): probeDatapath compares their time. fmaLoop512 needs AVX-512F.
//
//go:noescape
func fmaLoop512(n int)

//go:noescape
func fmaLoop256(n int)
