/*
Copyright The bar-controller Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package memo

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// upper counts its calls: the computations the table saves or does not.
type upper struct{ calls atomic.Int64 }

func (u *upper) f(in []byte) []byte {
	u.calls.Add(1)
	return bytes.ToUpper(in)
}

func TestGetComputesEachInputOnce(t *testing.T) {
	u := &upper{}
	b := New(u.f, 100, 1<<20)
	for range 3 {
		for _, in := range []string{"a", "bc", "def"} {
			if got := b.Get([]byte(in)); string(got) != string(bytes.ToUpper([]byte(in))) {
				t.Fatalf("Get(%q) = %q", in, got)
			}
		}
	}
	if n := u.calls.Load(); n != 3 {
		t.Errorf("f ran %d times for 3 inputs asked for 3 times each, want 3", n)
	}
	// The transform may be handed its own output (WatchList applies it
	// twice): that costs nothing either.
	b.Get([]byte("BC"))
	if n := u.calls.Load(); n != 3 {
		t.Errorf("f ran again for its own output: %d calls", n)
	}
	// Inputs that share a prefix, or differ in length only, are not
	// taken for one another.
	for _, in := range []string{"", "d", "de", "defg", "a\x00"} {
		if got, want := b.Get([]byte(in)), bytes.ToUpper([]byte(in)); !bytes.Equal(got, want) {
			t.Errorf("Get(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestBounded feeds the table a supply of distinct inputs, as a writer
// who changes an entry on every write would: it holds at most its limits
// at any time, and keeps working once it has started again.
func TestBounded(t *testing.T) {
	for _, tc := range []struct {
		name             string
		maxLen, maxBytes int
		inBytes          int
	}{
		{name: "entries", maxLen: 64, maxBytes: 1 << 20, inBytes: 8},
		{name: "bytes", maxLen: 1 << 20, maxBytes: 4 << 10, inBytes: 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &upper{}
			b := New(u.f, tc.maxLen, tc.maxBytes)
			for i := range 1000 {
				in := fmt.Appendf(nil, "%0*d", tc.inBytes, i)
				b.Get(in)
				if l := b.Len(); l > tc.maxLen {
					t.Fatalf("after %d inputs the table holds %d, limit %d", i+1, l, tc.maxLen)
				}
				b.mu.Lock()
				held := b.held
				b.mu.Unlock()
				if held > tc.maxBytes {
					t.Fatalf("after %d inputs the table holds %d bytes, limit %d", i+1, held, tc.maxBytes)
				}
			}
			if b.Resets() == 0 {
				t.Fatal("1,000 distinct inputs never filled the table")
			}
			calls := u.calls.Load()
			last := fmt.Appendf(nil, "%0*d", tc.inBytes, 999)
			if got := b.Get(last); !bytes.Equal(got, bytes.ToUpper(last)) || u.calls.Load() != calls {
				t.Errorf("the newest input is not remembered after a reset: %q, %d more calls", got, u.calls.Load()-calls)
			}
		})
	}
}

func TestLongResultIsNotHeld(t *testing.T) {
	u := &upper{}
	b := New(u.f, 100, 1<<10)
	long := bytes.Repeat([]byte("x"), 2<<10)
	for range 2 {
		if got := b.Get(long); !bytes.Equal(got, bytes.ToUpper(long)) {
			t.Fatal("wrong result for a long input")
		}
	}
	if b.Len() != 0 || u.calls.Load() != 2 {
		t.Errorf("a result longer than the table's bytes was held: %d entries, %d calls", b.Len(), u.calls.Load())
	}
}

func TestConcurrentGet(t *testing.T) {
	u := &upper{}
	b := New(u.f, 16, 1<<20)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				in := fmt.Appendf(nil, "%d-%d", g, i%40)
				if got := b.Get(in); !bytes.Equal(got, bytes.ToUpper(in)) {
					t.Errorf("Get(%q) = %q", in, got)
					return
				}
			}
		})
	}
	wg.Wait()
}
