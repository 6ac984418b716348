package cuda

import _ "embed"

// Regenerate the PTX after changing kernels/*.cu, *.cuh or nvcc.flags (needs nvcc; see
// docs/DESIGN.md, "CUDA backend"); TestPTXCurrent fails while it is stale.
//go:generate bash kernels/gen.sh

// ptxSource is the kernels compiled for compute_80.
//
//go:embed kernels/kernels.ptx
var ptxSource string
