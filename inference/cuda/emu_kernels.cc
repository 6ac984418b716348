//go:build cudaemu

// The kernels of kernels/*.cu compiled for the CPU (see cudaemu.h); each REGISTER adds one to
// the emulator's table. gen.sh rewrites the hash below with the PTX stamp's (TestPTXCurrent
// checks both), so that editing a kernel changes this file and go build recompiles it.
// kernel sources: 12a65abd0fe0b8b72b3f8061916a4373a62ae3f76bb0d92d1fe3eef9cf474a51
#include "kernels/kernels.cu"

// Kernels that break CUDA's rules on purpose, for the emulator's own checks (TestEmulatorChecks);
// emulator-only, as on a GPU they would hang or corrupt memory.

// emu_partial_mask: a shuffle whose mask leaves out lanes that take part.
KERNEL void emu_partial_mask(int *out) {
	out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, (int)threadIdx.x, 1);
}
REGISTER(emu_partial_mask);

// emu_divergent_shuffle: half a warp shuffles while the other half waits at a barrier.
KERNEL void emu_divergent_shuffle(int *out) {
	int v = threadIdx.x;
	if ((threadIdx.x & 31) < 16)
		v = __shfl_xor_sync(0xffffffffu, v, 1);
	else
		__syncthreads();
	out[threadIdx.x] = v;
}
REGISTER(emu_divergent_shuffle);

// emu_overrun writes one int past the n it is given.
KERNEL void emu_overrun(int *out, int n) {
	if (threadIdx.x == 0)
		out[n] = 7;
}
REGISTER(emu_overrun);

// emu_mma_shuffle: half a warp calls mma_bf16 while the other half shuffles, at the same count
// of warp operations.
KERNEL void emu_mma_shuffle(float *out) {
	unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
	float d[4] = {0, 0, 0, 0};
	if ((threadIdx.x & 31) < 16)
		mma_bf16(d, a, b, d);
	else
		d[0] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
	out[threadIdx.x] = d[0];
}
REGISTER(emu_mma_shuffle);

// emu_mma_partial: half of each warp has exited when the other half calls mma_bf16.
KERNEL void emu_mma_partial(float *out) {
	if ((threadIdx.x & 31) >= 16)
		return;
	unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
	float d[4] = {0, 0, 0, 0};
	mma_bf16(d, a, b, d);
	out[threadIdx.x] = d[0];
}
REGISTER(emu_mma_partial);
