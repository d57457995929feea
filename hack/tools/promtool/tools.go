//go:build tools

// Package tools pins the promtool command so that `go mod tidy` records
// what it needs in go.mod and go.sum. It is never compiled. The monitoring
// tests (test/monitoring) run promtool check rules and promtool test rules
// over artifacts/monitoring's PrometheusRule.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
