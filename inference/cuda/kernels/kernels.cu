// The translation unit nvcc compiles to kernels.ptx (and the emulator includes): every kernel
// of the backend.
#include "common.cuh"
#include "ops.cu"
#include "gemm.cu"
#include "attention.cu"
#include "sample.cu"
#include "selftest.cu"
