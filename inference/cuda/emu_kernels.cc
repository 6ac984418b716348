//go:build cudaemu

// The kernels of kernels/*.cu compiled for the CPU (see cudaemu.h); each REGISTER adds one to
// the emulator's table. gen.sh rewrites the hash below with the PTX stamp's (TestPTXCurrent
// checks both), so that editing a kernel changes this file and go build recompiles it.
// kernel sources: 414837f3d909b279b50a9c4e50fd24e4895fecfdbc920e44e9e4604d94d12349
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
