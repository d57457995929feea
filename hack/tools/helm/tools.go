//go:build tools

// Package tools pins the helm command so that `go mod tidy` records what it
// needs in go.mod and go.sum. It is never compiled. The chart's test
// (charts/bar-controller) renders the chart with it and compares the
// objects with kubectl kustomize's rendering of artifacts/.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
