//go:build tools

// Package tools names the ten commands hack/install-tools.sh builds, so that
// `go mod tidy` records every module they need in this one go.mod and go.sum.
// It is never compiled (the build tag is never set). Why one module for all
// of them, and what it costs, is in README.md.
package tools

import (
	// etcd: package main is the module root of go.etcd.io/etcd/server/v3.
	_ "go.etcd.io/etcd/server/v3"
	// The control plane, the node and kubectl (hack/install-k8s-binaries.sh).
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	// Fake nodes and pods for a local cluster.
	_ "sigs.k8s.io/kwok/cmd/kwok"
	// The chart's tests (make test-chart).
	_ "helm.sh/helm/v3/cmd/helm"
	// Signing a release (make release COSIGN_KEY=...).
	_ "github.com/sigstore/cosign/v2/cmd/cosign"
	// The alerts' tests (make test-monitoring, test/e2e).
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
