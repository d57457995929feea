package cache

import "testing"

// TestUpstream is a test of a module: make test does not run it.
func TestUpstream(t *testing.T) {}
