#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs on a GPU machine that has neither a Go toolchain nor
# ../shared (the lent H200 machines: a copy of the checkout travels, ../shared does not): the
# test binaries of inference/cuda and inference/qwen2 and the student binary, built here without
# the cudaemu tag, and the shared test data the CUDA tests and the eval read (the tiny
# checkpoint and its reference logits, the Qwen2.5 tokenizer), xz-compressed into
# .gpu/bundle.tar.xz (git-ignored; about 40 MB, under the 64 MiB a device run carries).
#
#   scripts/gpu-bundle.sh            # then, on the device machine:
#   bash scripts/gpu-check.sh        # with .gpu carried (run tool: carry [".gpu"])
#
# Env: CHAINEDSQL_SHARED (default ../shared); GPU_BUNDLE_TAGS=cudaemu builds the binaries with
# the emulator, for a dry run of gpu-check.sh on the CPU (GPU_CHECK_BACKEND=cuda-emulated).
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${CHAINEDSQL_SHARED:-$(cd .. && pwd)/shared}
for f in models/tiny-qwen2-f32/model.safetensors models/tiny-qwen2-f32/reference_f64.json tokenizer/qwen2.5/tokenizer.json; do
	[ -f "$SHARED/$f" ] || { echo "gpu-bundle: $SHARED/$f not found (set CHAINEDSQL_SHARED)" >&2; exit 1; }
done
command -v xz >/dev/null || { echo "gpu-bundle: xz not found (apt-get install xz-utils)" >&2; exit 1; }
B=.gpu
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/shared/models" "$stage/shared/tokenizer" "$B"
# -trimpath -s -w: smaller binaries; cgo on, as loading libcuda needs it.
build=(-trimpath -ldflags '-s -w' -tags "${GPU_BUNDLE_TAGS:-}")
echo "gpu-bundle: building the binaries"
CGO_ENABLED=1 go test -c "${build[@]}" -o "$stage/bin/cuda.test" ./inference/cuda
CGO_ENABLED=1 go test -c "${build[@]}" -o "$stage/bin/qwen2.test" ./inference/qwen2
CGO_ENABLED=1 go build "${build[@]}" -o "$stage/bin/student" ./cmd/student
cp -r "$SHARED/models/tiny-qwen2-f32" "$stage/shared/models/"
cp -r "$SHARED/tokenizer/qwen2.5" "$stage/shared/tokenizer/"
chmod -R u+w "$stage/shared"
{
	echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
	echo "built $(date -u +%FT%TZ) with $(go version) on glibc $(ldd --version | head -1 | awk '{print $NF}')"
} >"$stage/BUNDLE"
echo "gpu-bundle: compressing"
tar -C "$stage" -cf - . | xz -T0 -3 >"$B/bundle.tar.xz.tmp"
mv "$B/bundle.tar.xz.tmp" "$B/bundle.tar.xz"
size=$(stat -c %s "$B/bundle.tar.xz")
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
total=$((size + tree))
echo "gpu-bundle: $B/bundle.tar.xz $((size >> 20)) MiB; with the working tree that travels, $((total >> 20)) MiB of the 64 MiB a run carries"
cat "$stage/BUNDLE"
if ((total > 64 << 20)); then
	echo "gpu-bundle: too large to carry" >&2
	exit 1
fi
