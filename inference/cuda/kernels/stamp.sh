#!/usr/bin/env bash
# Prints the SHA-256 of the kernel sources as TestPTXCurrent computes it: for each *.cu, *.cuh
# and nvcc.flags in byte order of their names, "== NAME\n" then the file's bytes.
set -euo pipefail
cd "$(dirname "$0")"
for f in $(LC_ALL=C ls *.cu *.cuh nvcc.flags | LC_ALL=C sort); do
	printf '== %s\n' "$f"
	cat "$f"
done | sha256sum | cut -d' ' -f1
