//go:build tools

// Package tools pins etcd (whose package main is the module root of
// go.etcd.io/etcd/server/v3) so that `go mod tidy` records what it needs in
// go.mod and go.sum. It is never compiled.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
