//go:build tools

// Package tools pins the cosign command so that `go mod tidy` records what
// it needs in go.mod and go.sum. It is never compiled. hack/release signs
// a release's image index with it (hack/install-cosign.sh builds it).
package tools

import (
	_ "github.com/sigstore/cosign/v2/cmd/cosign"
)
