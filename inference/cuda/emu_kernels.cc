//go:build cudaemu

// The kernels of kernels/*.cu compiled for the CPU (see cudaemu.h); each REGISTER adds one to
// the emulator's table. gen.sh rewrites the hash below with the PTX stamp's (TestPTXCurrent
// checks both), so that editing a kernel changes this file and go build recompiles it.
// kernel sources: 1a0dae50b6e41273b4ca053d464b4f80ed91b1a2edd34977ba49d6ff35ac9677
#include "kernels/kernels.cu"
