//go:build amd64

package generate

import "golang.org/x/sys/cpu"

// expFMA is whether math.Exp takes its FMA path on this CPU (math's useFMA), the one
// expBuckets repeats inline; without it expBuckets calls math.Exp.
var expFMA = cpu.X86.HasAVX && cpu.X86.HasFMA
