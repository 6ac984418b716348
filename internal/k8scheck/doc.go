// Package k8scheck checks the Kubernetes manifests of docs/examples against the Kubernetes API
// types (k8s.io/api) with the API machinery's strict decoder, and against the Indexed Job rules
// the API server enforces. It is its own module so that the toolkit does not depend on k8s.io;
// scripts/test.sh runs it.
package k8scheck
