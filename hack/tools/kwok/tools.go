//go:build tools

// Package tools pins the kwok command so that `go mod tidy` records what it
// needs in go.mod and go.sum. It is never compiled.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
