package guide

import "testing"

// TestResyncReplaysTheCache is the proof the test doc cites.
func TestResyncReplaysTheCache(t *testing.T) {}

// helperNotATest has the right file but is no test.
func helperNotATest() {}

// TestLooksLikeATest is a type, not a func.
type TestLooksLikeATest struct{}
