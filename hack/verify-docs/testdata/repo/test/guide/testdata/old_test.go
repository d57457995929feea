package guide

import "testing"

// TestInTestdata is under testdata/, which go list skips.
func TestInTestdata(t *testing.T) {}
