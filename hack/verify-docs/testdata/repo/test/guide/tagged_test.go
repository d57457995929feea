//go:build integration

package guide

import "testing"

// TestTagged runs only with -tags=integration, which make test does not set.
func TestTagged(t *testing.T) {}
