#!/usr/bin/env bash
# Compiles kernels.cu (and what it includes) to PTX for compute_80 and writes the stamp that
# TestPTXCurrent checks: the SHA-256 of every kernels/*.cu, *.cuh and nvcc.flags. Run through
# `go generate ./inference/cuda` after changing any of them. Needs nvcc (Debian:
# nvidia-cuda-toolkit, CUDA 11.8, in the non-free component; see docs/DESIGN.md).
set -euo pipefail
cd "$(dirname "$0")"
command -v nvcc >/dev/null || { echo "gen.sh: nvcc not found (apt-get install nvidia-cuda-toolkit from Debian non-free)" >&2; exit 1; }
read -r -a flags < nvcc.flags
nvcc -ptx "${flags[@]}" -o kernels.ptx.tmp kernels.cu
mv kernels.ptx.tmp kernels.ptx
sum=$(bash stamp.sh)
# The emulator's translation unit carries the hash too: go build tracks the files of the
# package directory, not the kernels/ sources it includes, so this line is what makes a
# changed kernel recompile under -tags cudaemu.
sed -i "s/^\/\/ kernel sources: .*/\/\/ kernel sources: $sum/" ../emu_kernels.cc
{
	echo "sources $sum"
	echo "nvcc $(nvcc --version | tail -1)"
} > kernels.ptx.stamp
