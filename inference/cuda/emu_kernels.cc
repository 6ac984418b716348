//go:build cudaemu

// The kernels of kernels/*.cu compiled for the CPU (see cudaemu.h); each REGISTER adds one to
// the emulator's table. gen.sh rewrites the hash below with the PTX stamp's (TestPTXCurrent
// checks both), so that editing a kernel changes this file and go build recompiles it.
// kernel sources: 8d453561108737dc7c2cfd070a02252b75e688f129da96af21e7551e1e71d3b8
#include "kernels/kernels.cu"
