#!/usr/bin/env bash
# The project's test command (README): vet, every test with the race detector, every benchmark
# once, the CUDA kernels under the emulator, the fault suite and the Kubernetes manifests.
set -euo pipefail
cd "$(dirname "$0")/.."
go vet ./...
go test -race -count=1 -timeout 40m ./...
# Every benchmark once (-benchtime 1x, about 90 s on 2 cores): a benchmark that a change broke
# fails here, not in the hands of whoever measures with it next.
go test -count=1 -timeout 20m -run '^$' -bench . -benchtime 1x ./...
# The CUDA backend (issue 15) on the CPU: its kernels compiled through the CUDA execution model
# (-tags cudaemu; needs g++, not nvcc or a GPU) against the CPU backend and the reference logits.
go vet -tags cudaemu ./inference/cuda/...
go test -race -count=1 -timeout 20m -tags cudaemu ./inference/cuda/...
go test -count=1 -timeout 10m -tags cudaemu -run 'LogitsEmulated|BackendRefused' ./cmd/student
# The fault suite (issue 8): thousands of faulty requests and a SIGKILL loop; without -race, the
# same code runs under -race above at smaller scale.
go test -count=1 -timeout 20m -tags faults -run '^TestFaults' ./...
# The Kubernetes manifests of docs/examples against k8s.io/api (its own module, docs/SCALE-OUT.md).
(cd internal/k8scheck && go vet ./... && go test -count=1 ./...)
