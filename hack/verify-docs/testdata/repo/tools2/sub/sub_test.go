package sub

import "testing"

// TestInAnotherModule is in a module of its own: go list ./... at the root
// does not list it.
func TestInAnotherModule(t *testing.T) {}
