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

// Package memo remembers what a function of a byte string returned, so
// that an informer's transform pays for an input it has seen once only.
package memo

import (
	"hash/maphash"
	"sync"
)

// A transform runs on every watch event of every object, and most of an
// object does not change from one event to the next: the Deployment
// controller's status updates leave every managedFields entry but its own
// as it was. The root package's pruneOwnedFields parses one entry of the
// controller's and writes back what drift asks about, about 40 µs for the
// entry the create left; an entry written by anyone else under the
// controller's manager name may be 32 KiB, which costs milliseconds, and
// one forged entry made every status update of that Deployment cost the
// replicas 31 times an ordinary event (issue 39, sixteenth review). With
// a Bytes in front, an unchanged entry is parsed once, and what an input
// costs follows what its writer wrote, one write at a time, not how often
// others touch the object.
//
// The table is bounded twice, like internal/intern's: by entries and by
// the bytes of results it holds for inputs that may be long gone (the
// objects they came from deleted). At either limit it starts again,
// empty, which costs the computations it had saved and nothing else: the
// results it handed out stay with whoever holds them.

// Bytes maps inputs to the result of one function of them, safe for
// concurrent use. Inputs are known by a 128-bit hash with seeds chosen
// when the process starts, so that no writer can choose two inputs that
// collide, and a chance collision among a few thousand inputs is about
// one in 2^100.
type Bytes struct {
	f        func([]byte) []byte
	seeds    [2]maphash.Seed
	maxLen   int
	maxBytes int

	mu     sync.Mutex
	m      map[key][]byte
	held   int // bytes of the results in m
	resets int
}

type key struct {
	n    int
	h, g uint64
}

// New returns a table of f's results, holding at most maxLen of them and
// at most maxBytes of their bytes at a time. f must be a pure function,
// and neither it nor its callers may write to the results it returns:
// they are shared.
func New(f func([]byte) []byte, maxLen, maxBytes int) *Bytes {
	return &Bytes{f: f, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		maxLen: maxLen, maxBytes: maxBytes, m: map[key][]byte{}}
}

func (b *Bytes) key(in []byte) key {
	return key{n: len(in), h: maphash.Bytes(b.seeds[0], in), g: maphash.Bytes(b.seeds[1], in)}
}

// Get returns f(in), computing it only if the table does not hold it.
// The result is remembered for itself too, since the informer's
// transform may be handed its own output again (WatchList applies it
// twice).
func (b *Bytes) Get(in []byte) []byte {
	k := b.key(in)
	b.mu.Lock()
	out, ok := b.m[k]
	b.mu.Unlock()
	if ok {
		return out
	}
	// Computed outside the lock: the three informers' transforms run on
	// their own goroutines, and two computing the same input at once
	// waste one computation, which a lock held over f would cost every
	// other input.
	out = b.f(in)
	if len(out) > b.maxBytes {
		return out // would empty the table on its own
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.m)+2 > b.maxLen || b.held+len(out) > b.maxBytes {
		clear(b.m) // keeps the map's room for what comes next
		b.held = 0
		b.resets++
	}
	if _, ok := b.m[k]; !ok {
		b.held += len(out)
	}
	b.m[k] = out
	b.m[b.key(out)] = out // the same bytes: held once
	return out
}

// Len is how many inputs the table remembers.
func (b *Bytes) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

// Resets is how many times the table has started again.
func (b *Bytes) Resets() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.resets
}
