//go:build cudaemu

// The kernels of kernels/*.cu compiled for the CPU (see cudaemu.h); each REGISTER adds one to
// the emulator's table. gen.sh rewrites the hash below with the PTX stamp's (TestPTXCurrent
// checks both), so that editing a kernel changes this file and go build recompiles it.
// kernel sources: fa240fe966d398944a196fa42c1ddd8b79e1cd7bc67287178c010b3926d7f853
#include "kernels/kernels.cu"
