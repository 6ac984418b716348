#!/usr/bin/env bash
# The project's test command (README): vet, then every test with the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."
go vet ./...
go test -race -count=1 -timeout 40m ./...
# The fault suite (issue 8): thousands of faulty requests and a SIGKILL loop; without -race, the
# same code runs under -race above at smaller scale.
go test -count=1 -timeout 20m -tags faults -run '^TestFaults' ./...
# The Kubernetes manifests of docs/examples against k8s.io/api (its own module, docs/SCALE-OUT.md).
(cd internal/k8scheck && go vet ./... && go test -count=1 ./...)
