//go:build tools

// Package tools pins the Kubernetes control-plane commands that
// hack/install-k8s-binaries.sh builds, so that `go mod tidy` records every
// module they need in go.mod and go.sum. It is never compiled.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
