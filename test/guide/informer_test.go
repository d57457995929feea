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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// TestHandlerSeesWhatTheCacheHolds proves: `processDeltas` "adds the
// Bar to the indexer ... and only then calls `sharedIndexInformer.OnAdd`:
// a handler never sees an object the cache does not hold yet."
//
// The handler runs on its listener's goroutine, so merely looking up the
// object from the handler could not catch the opposite order: the cache
// write would usually win the race anyway. Instead the cache write
// itself (an index function, which runs inside it) waits up to 200 ms
// for the handler to be called. In the documented order it never is, and
// the write ends first; notified before the write, the handler would be
// called within those 200 ms and come first. The 200 ms bound only how
// long the wrong order has to show itself; the right one passes whatever
// the machine's speed.
func TestHandlerSeesWhatTheCacheHolds(t *testing.T) {
	t.Parallel()
	s := newFakeServer()
	handled := make(chan struct{})
	var mu sync.Mutex
	var order []string
	note := func(what string) { mu.Lock(); defer mu.Unlock(); order = append(order, what) }
	inf := cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, 0, cache.Indexers{
		"probe": func(interface{}) ([]string, error) {
			select {
			case <-handled:
			case <-time.After(200 * time.Millisecond):
			}
			note("cache written")
			return nil, nil
		},
	})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			note("handler called")
			close(handled)
			if _, cached, _ := inf.GetStore().Get(obj); !cached {
				t.Error("the handler's object is not in the cache")
			}
		},
	})
	must(t, err)
	runInformer(t, inf)
	s.set("a", "x", true)
	waitFor(t, "the handler", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"cache written", "handler called"}; !slices.Equal(order, want) {
		t.Errorf("got %v, want %v", order, want)
	}
}

// TestListerReturnsTheCachedPointer proves: "A lister ... returns the
// pointer the map holds. Every handler, every worker and every other
// controller sharing the informer gets the same object", and writing to
// it "changes the cache without an event": the handlers' next
// notification is the next change on the server.
func TestListerReturnsTheCachedPointer(t *testing.T) {
	t.Parallel()
	s := newFakeServer()
	got := make(chan *corev1.ConfigMap, 1)
	rec := &recorder{}
	inf := startInformer(t, s, 0, rec, cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if cm := obj.(*corev1.ConfigMap); cm.Name == "a" {
				got <- cm
			}
		},
	})
	s.set("a", "x", true)
	handed := <-got
	listed, err := corelisters.NewConfigMapLister(inf.GetIndexer()).ConfigMaps("ns").Get("a")
	if err != nil {
		t.Fatal(err)
	}
	if listed != handed {
		t.Error("the lister returned a copy, not the object the handler got")
	}
	handed.Data["v"] = "mutated" // what the docs forbid: the cache changes, without an event
	if cached, _, _ := inf.GetStore().GetByKey("ns/a"); cached.(*corev1.ConfigMap).Data["v"] != "mutated" {
		t.Error("writing to the handler's object did not change the cache")
	}
	s.set("b", "x", true)
	waitFor(t, "b's add", func() bool { return rec.len() >= 2 })
	want := []event{{Kind: "add", Name: "a", RV: "1"}, {Kind: "add", Name: "b", RV: "2"}}
	if es := rec.take(); !slices.Equal(es, want) {
		t.Errorf("the handlers got %v, want %v: no event for the write to a", es, want)
	}
}

// TestRegistrationHasSyncedWaitsForTheHandler proves: the registration's
// `HasSynced` is true once "the informer has synced *and* this handler
// has returned from every add of the first list", while the informer's
// is true as soon as the first list is in the cache.
func TestRegistrationHasSyncedWaitsForTheHandler(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a")
	release := make(chan struct{})
	inf := cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, 0, cache.Indexers{})
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(interface{}) { <-release }})
	must(t, err)
	runInformer(t, inf)
	time.Sleep(50 * time.Millisecond) // the handler is blocked in its initial add
	if !inf.HasSynced() || reg.HasSynced() {
		t.Fatalf("informer synced %v, registration synced %v; want true, false", inf.HasSynced(), reg.HasSynced())
	}
	close(release)
	waitFor(t, "the registration to sync", reg.HasSynced)
}

// TestSlowHandlerDelaysOnlyItsOwnListener proves: "a slow handler
// delays only its own listener: its buffer grows ...; the informer and
// the other handlers go on."
func TestSlowHandlerDelaysOnlyItsOwnListener(t *testing.T) {
	t.Parallel()
	s := newFakeServer()
	release := make(chan struct{})
	defer close(release)
	fast := &recorder{}
	var slowCalls atomic.Int32
	slow := cache.ResourceEventHandlerFuncs{AddFunc: func(interface{}) { slowCalls.Add(1); <-release }}
	inf := startInformer(t, s, 0, slow, fast)
	for _, n := range []string{"a", "b", "c"} {
		s.set(n, "x", true)
	}
	waitFor(t, "the fast handler's three adds", func() bool { return fast.len() == 3 })
	if n, cached := slowCalls.Load(), len(inf.GetStore().List()); n != 1 || cached != 3 {
		t.Errorf("the slow handler is in call %d, the cache holds %d; want still in its first, and all 3 cached", n, cached)
	}
}

// TestLateHandlerGetsTheCacheAsInitialAdds proves: "when you add a
// handler to an informer already running:
// `(*sharedIndexInformer).AddEventHandlerWithOptions` ... replays the
// cache to it as initial adds while the informer's `HasSynced` has long
// been true."
func TestLateHandlerGetsTheCacheAsInitialAdds(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a", "b")
	inf := startInformer(t, s, 0)
	late := &recorder{}
	reg, err := inf.AddEventHandler(late)
	must(t, err)
	waitFor(t, "the late registration to sync", reg.HasSynced)
	es := late.take()
	slices.SortFunc(es, func(a, b event) int { return strings.Compare(a.Name, b.Name) })
	want := []event{{Kind: "add", Name: "a", RV: "1", InitialList: true}, {Kind: "add", Name: "b", RV: "2", InitialList: true}}
	if !slices.Equal(es, want) {
		t.Errorf("late handler got %v, want %v", es, want)
	}
}

// TestTransformAndIndexersAfterStart proves: "`SetTransform` ... refuses
// once the informer has started", and `AddIndexers` "refuses only once
// the informer has stopped", indexing "the items already cached".
func TestTransformAndIndexersAfterStart(t *testing.T) {
	s := newFakeServer("a")
	inf := cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("no sync")
	}
	if err := inf.SetTransform(func(o interface{}) (interface{}, error) { return o, nil }); err == nil {
		t.Error("SetTransform on a running informer succeeded")
	}
	byValue := cache.Indexers{"byValue": func(o interface{}) ([]string, error) { return []string{o.(*corev1.ConfigMap).Data["v"]}, nil }}
	must(t, inf.AddIndexers(byValue))
	if keys, _ := inf.GetIndexer().IndexKeys("byValue", "v0"); !slices.Equal(keys, []string{"ns/a"}) {
		t.Errorf("a new index of a running informer holds %v, want the cached ns/a", keys)
	}
	cancel()
	<-done
	if err := inf.AddIndexers(cache.Indexers{"late": byValue["byValue"]}); err == nil {
		t.Error("AddIndexers on a stopped informer succeeded")
	}
}

// TestCachesPopulatedIsLoggedBeforeHasSynced proves: "Caches populated"
// "is logged when the list is queued", and only `HasSynced` says it has
// been applied: here the cache's index function holds the informer's
// processing goroutine in the middle of applying the list it popped, so
// the log line is out and HasSynced still false.
func TestCachesPopulatedIsLoggedBeforeHasSynced(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a")
	release := make(chan struct{})
	var logMu sync.Mutex
	var logged []string
	logger := funcr.New(func(_, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		logged = append(logged, args)
	}, funcr.Options{Verbosity: 2})
	populated := func() bool {
		logMu.Lock()
		defer logMu.Unlock()
		return slices.ContainsFunc(logged, func(l string) bool { return strings.Contains(l, `"Caches populated"`) })
	}
	inf := cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, 0, cache.Indexers{
		"held": func(interface{}) ([]string, error) { <-release; return nil, nil },
	})
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()

	waitFor(t, `"Caches populated"`, populated)
	time.Sleep(50 * time.Millisecond)
	if inf.HasSynced() {
		t.Fatal("HasSynced while the list was still queued")
	}
	close(release)
	waitFor(t, "HasSynced once the list is applied", inf.HasSynced)
}

// TestStoreResourceVersionNeedsAtomicFIFO proves:
// "`LastStoreSyncResourceVersion` ... only answers while `AtomicFIFO` is
// on": `threadSafeMap.LastStoreSyncResourceVersion` returns "" otherwise.
func TestStoreResourceVersionNeedsAtomicFIFO(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	must(t, idx.Replace([]interface{}{configMap("a", 5, "x")}, "7"))
	if rv := idx.LastStoreSyncResourceVersion(); rv != "7" {
		t.Errorf("with AtomicFIFO on the store says %q, want 7", rv)
	}
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.AtomicFIFO, false)
	if rv := idx.LastStoreSyncResourceVersion(); rv != "" {
		t.Errorf("with AtomicFIFO off the store says %q, want \"\"", rv)
	}
}

// TestInformerResourceVersionGatesOnlyGetController proves:
// `InformerResourceVersion` gates "only
// `GetController().LastSyncResourceVersion()`, which answers `""`
// without it; the informer's own `LastSyncResourceVersion` answers either
// way".
func TestInformerResourceVersionGatesOnlyGetController(t *testing.T) {
	s := newFakeServer("a", "b")
	inf := startInformer(t, s, 0)
	if a, b := inf.LastSyncResourceVersion(), inf.GetController().LastSyncResourceVersion(); a != "2" || b != "2" {
		t.Errorf("gate on: informer %q, controller %q; want 2, 2", a, b)
	}
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.InformerResourceVersion, false)
	if a, b := inf.LastSyncResourceVersion(), inf.GetController().LastSyncResourceVersion(); a != "2" || b != "" {
		t.Errorf("gate off: informer %q, controller %q; want 2, \"\"", a, b)
	}
}

// TestBookmarkMovesTheStoreWithoutAnEvent proves: "Bookmarks the server
// sends now and then move that resourceVersion forward without any
// object changing", and with `AtomicFIFO` the store's too
// (`Store.Bookmark(rv)`), with no handler called.
func TestBookmarkMovesTheStoreWithoutAnEvent(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a")
	rec := &recorder{}
	inf := startInformer(t, s, 0, rec)
	rec.take()
	s.sendEvent(watch.Event{Type: watch.Bookmark, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "99"}}})
	waitFor(t, "the store at 99", func() bool { return inf.GetIndexer().LastStoreSyncResourceVersion() == "99" })
	if inf.LastSyncResourceVersion() != "99" {
		t.Errorf("informer at %q, want 99", inf.LastSyncResourceVersion())
	}
	// A barrier: the handler takes its notifications in order, so once it
	// has the add of z it has had whatever the bookmark gave it.
	s.set("z", "x", true)
	waitFor(t, "the add of z", func() bool { return rec.len() > 0 })
	if es := rec.take(); len(es) != 1 || es[0].Name != "z" {
		t.Errorf("around a bookmark the handler got %v, want only the add of z", es)
	}
}
