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

package guide

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// TestTypedHandlerUnwrapsTombstones proves: `(*typedResourceEventHandler).OnDelete`
// "turns a `DeletedFinalStateUnknown` into a `DeletedObject[T]` with
// `FinalStateUnknown` set and the object inside, if any, as
// `OptionalObj`", and `GetObjectName` gives the key either way.
func TestTypedHandlerUnwrapsTombstones(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a", "b")
	inf := cache.NewTypedSharedIndexInformer[*corev1.ConfigMap](
		cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, 0, cache.Indexers{}))
	got := make(chan cache.DeletedObject[*corev1.ConfigMap], 2)
	_, err := inf.AddTypedEventHandler(cache.TypedResourceEventHandlerFuncs[*corev1.ConfigMap]{
		DeleteFunc: func(d cache.DeletedObject[*corev1.ConfigMap]) { got <- d },
	})
	must(t, err)
	runInformer(t, inf)

	s.remove("a", true) // seen: a real delete
	s.remove("b", false)
	s.expire() // the relist finds b gone
	for _, want := range []struct {
		name    string
		unknown bool
	}{{"a", false}, {"b", true}} {
		d := <-got
		if d.GetObjectName().Name != want.name || (d.FinalStateUnknown != nil) != want.unknown || d.OptionalObj == nil {
			t.Errorf("delete of %s: name %v, FinalStateUnknown %v, object %v; want FinalStateUnknown set %v, object present",
				want.name, d.GetObjectName(), d.FinalStateUnknown, d.OptionalObj, want.unknown)
		}
	}
}

// TestFilteringHandlerTurnsUpdatesIntoAddsAndDeletes proves: with
// `FilteringResourceEventHandler`, "an object that starts passing the
// filter arrives as `OnAdd(new, false)`; an object that stops passing
// arrives as `OnDelete(old)`, although it still exists".
func TestFilteringHandlerTurnsUpdatesIntoAddsAndDeletes(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a") // v0: outside the filter
	rec := &recorder{}
	startInformer(t, s, 0, cache.FilteringResourceEventHandler{
		FilterFunc: func(obj interface{}) bool { return obj.(*corev1.ConfigMap).Data["v"] == "in" },
		Handler:    rec,
	})
	s.set("a", "in", true)  // 2: now passes
	s.set("a", "in", true)  // 3: still passes
	s.set("a", "out", true) // 4: stops passing
	waitFor(t, "three events", func() bool { return rec.len() == 3 })
	want := []event{{Kind: "add", Name: "a", RV: "2"}, {Kind: "update", Name: "a", OldRV: "2", RV: "3"}, {Kind: "delete", Name: "a", RV: "3"}}
	if es := rec.take(); !slices.Equal(es, want) {
		t.Errorf("filtered handler got %v, want %v", es, want)
	}
}

// TestRemovedHandlerGetsNothingMore proves: after `RemoveEventHandler`
// the handler gets no further notification, while the informer and its
// other handlers go on; `ShutDownEventHandler` returns only once the
// handler's goroutine has finished its last call.
func TestRemovedHandlerGetsNothingMore(t *testing.T) {
	t.Parallel()
	s := newFakeServer()
	inf := cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, 0, cache.Indexers{})
	kept, removed := &recorder{}, &recorder{}
	_, err := inf.AddEventHandler(kept)
	must(t, err)
	var mu sync.Mutex
	inCall := false
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj interface{}) {
		mu.Lock()
		inCall = true
		mu.Unlock()
		time.Sleep(100 * time.Millisecond) // a slow last call
		removed.OnAdd(obj, false)
		mu.Lock()
		inCall = false
		mu.Unlock()
	}})
	must(t, err)
	runInformer(t, inf)
	s.set("a", "x", true)
	waitFor(t, "the slow handler's call", func() bool { mu.Lock(); defer mu.Unlock(); return inCall })
	must(t, cache.ShutDownEventHandler(inf, reg))
	mu.Lock()
	if inCall {
		t.Error("ShutDownEventHandler returned during the handler's call")
	}
	mu.Unlock()
	s.set("b", "x", true)
	waitFor(t, "b at the kept handler", func() bool { return kept.len() == 2 })
	if es := removed.take(); len(es) != 1 || es[0].Name != "a" {
		t.Errorf("removed handler got %v, want only a", es)
	}
}

// TestRemovedHandlerDropsWhatWasBuffered proves: notifications buffered
// for a handler behind a call in progress when `RemoveEventHandler`
// returns are dropped (the listener's pop sees its input closed while
// the handler is busy, and ends), the call in progress finishes, and a
// notification distributed after the removal never arrives; nothing
// arrives after `ShutDownEventHandler` returns.
func TestRemovedHandlerDropsWhatWasBuffered(t *testing.T) {
	t.Parallel()
	s := newFakeServer()
	inf := cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, 0, cache.Indexers{})
	kept, removed := &recorder{}, &recorder{}
	_, err := inf.AddEventHandler(kept)
	must(t, err)
	held, release := make(chan struct{}), make(chan struct{})
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj interface{}) {
		if obj.(*corev1.ConfigMap).Name == "a" {
			close(held)
			<-release
		}
		removed.OnAdd(obj, false)
	}})
	must(t, err)
	runInformer(t, inf)
	for _, name := range []string{"a", "b", "c", "d"} {
		s.set(name, "x", true)
	}
	<-held
	// The kept handler has d: its distribution began, and
	// RemoveEventHandler waits for it to end (blockDeltas), so b, c and d
	// are buffered for the held handler when the removal returns.
	waitFor(t, "d at the kept handler", func() bool { return kept.len() == 4 })
	must(t, inf.RemoveEventHandler(reg))
	s.set("e", "x", true) // distributed after the removal
	waitFor(t, "e at the kept handler", func() bool { return kept.len() == 5 })
	close(release)
	must(t, cache.ShutDownEventHandler(inf, reg))
	var names []string
	for _, e := range removed.take() {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, []string{"a"}) {
		t.Fatalf("removed handler got %v, want a alone: b, c and d dropped, e never sent", names)
	}
	s.set("f", "x", true)
	waitFor(t, "f at the kept handler", func() bool { return kept.len() == 6 })
	if n := removed.len(); n != 0 {
		t.Fatalf("the handler got %d notifications after ShutDownEventHandler returned", n)
	}
}

// TestStoppedInformerRefusesHandlers proves: an informer stops when the
// context given to `RunWithContext` ends (`Run` returns, `IsStopped`
// says so), its listeners stop with it, and it cannot be started again
// (a second RunWithContext returns at once, with no request) or given a
// handler.
func TestStoppedInformerRefusesHandlers(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a")
	inf := cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, 0, cache.Indexers{})
	reg, err := inf.AddEventHandler(&recorder{})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	waitFor(t, "sync", inf.HasSynced)
	cancel()
	<-done
	if !inf.IsStopped() {
		t.Error("IsStopped is false after Run returned")
	}
	select {
	case <-reg.(interface{ ShutdownChan() <-chan struct{} }).ShutdownChan():
	case <-time.After(5 * time.Second):
		t.Error("the listener did not stop with the informer")
	}
	if _, err := inf.AddEventHandler(&recorder{}); err == nil {
		t.Error("a stopped informer accepted a handler")
	}
	// A second start returns at once, and asks the server nothing.
	lists, watches := s.counts()
	inf.RunWithContext(context.Background())
	if l, w := s.counts(); l != lists || w != watches || !inf.IsStopped() {
		t.Errorf("a second start: %d lists and %d watches, were %d and %d; stopped %v", l, w, lists, watches, inf.IsStopped())
	}
}
