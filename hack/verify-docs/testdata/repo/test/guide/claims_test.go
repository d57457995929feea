package guide

import "testing"

// TestResyncReplaysTheCache is the proof the test doc cites.
func TestResyncReplaysTheCache(t *testing.T) {}

// helperNotATest has the right file but is no test.
func helperNotATest() {}

// TestLooksLikeATest is a type, not a func.
type TestLooksLikeATest struct{}

// TestSkipped skips itself: it proves nothing.
func TestSkipped(t *testing.T) {
	t.Run("sub", func(t *testing.T) { t.Skip("later") })
}

// Testlower is no test to go test: a lower-case rune follows Test.
func Testlower(t *testing.T) {}

// TestWithAssertions is the table's row: setup, then two assertions.
func TestWithAssertions(t *testing.T) {
	got := 1 + 1
	if got != 2 {
		t.Errorf("got %d", got)
	}
	t.Fatal("unconditional")
}
