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

// TestCallsErrorOnAWatcher calls Error on values that are not a
// *testing.T: a fake watcher's Error, and one on a name that shadows t.
// Only the calls on its own t, a subtest's and a helper's testing.TB are
// assertions.
func TestCallsErrorOnAWatcher(t *testing.T) {
	var w watcher
	if w.Pending() {
		w.Error(nil)
	}
	t.Run("sub", func(st *testing.T) {
		if st.Name() == "" {
			st.Fatal("unnamed")
		}
	})
	check := func(tb testing.TB) { tb.Error("checked") }
	check(t)
	{
		t := w
		t.Error(nil)
	}
	t.Error("own")
}

// watcher has an Error method that fails nothing, as watch.FakeWatcher's.
type watcher struct{}

func (watcher) Pending() bool     { return false }
func (watcher) Error(interface{}) {}
