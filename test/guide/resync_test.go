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
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// updatesOf returns the update events of name in es.
func updatesOf(es []event, name string) []event {
	var out []event
	for _, e := range es {
		if e.Kind == "update" && e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// TestResyncReplaysTheCache proves: "A resync replays the informer's own
// cache: every cached object comes back as `OnUpdate(obj, obj)`."
// Both arguments are the one pointer the cache holds, and one resync
// delivers each cached object once.
func TestResyncReplaysTheCache(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a", "b", "c")
	var mu sync.Mutex
	var updates []*corev1.ConfigMap
	var adds int
	inf := startInformer(t, s, time.Second, cache.ResourceEventHandlerFuncs{
		AddFunc: func(interface{}) { mu.Lock(); adds++; mu.Unlock() },
		UpdateFunc: func(oldObj, newObj interface{}) {
			mu.Lock()
			defer mu.Unlock()
			if oldObj != newObj {
				t.Errorf("a resync's update with two objects: %v, %v", oldObj, newObj)
			}
			updates = append(updates, newObj.(*corev1.ConfigMap))
		},
	})
	waitFor(t, "a resync of every object", func() bool { mu.Lock(); defer mu.Unlock(); return len(updates) >= 3 })
	mu.Lock()
	defer mu.Unlock()
	var names []string
	for _, cm := range updates[:3] {
		names = append(names, cm.Name)
		if cached, _, _ := inf.GetStore().GetByKey("ns/" + cm.Name); cached != any(cm) {
			t.Errorf("the resync's %s is not the object the cache holds", cm.Name)
		}
	}
	sort.Strings(names)
	if adds != 3 || !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Errorf("%d adds, then the first resync delivered %v; want 3 adds and a, b, c once each", adds, names)
	}
}

// TestResyncDoesNotRepairADroppedEvent proves: "It repairs nothing the
// watch lost: an event the informer never received is missing from its
// cache too, and only a relist (the next round) brings it."
func TestResyncDoesNotRepairADroppedEvent(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a") // a at resourceVersion 1
	rec := &recorder{}
	inf := startInformer(t, s, time.Second, rec)
	rec.take()

	s.set("a", "v1", false) // the server has a at 2; the watch never says so
	waitFor(t, "two resyncs", func() bool { return len(updatesOf(rec.snapshot(), "a")) >= 2 })
	for _, e := range updatesOf(rec.take(), "a") {
		if e.OldRV != "1" || e.RV != "1" {
			t.Errorf("a resync delivered %v; want a at 1, the cache's version, not the server's 2", e)
		}
	}
	if obj, _, _ := inf.GetStore().GetByKey("ns/a"); obj.(*corev1.ConfigMap).ResourceVersion != "1" {
		t.Fatalf("after resyncs the cache holds a at %s, want 1", obj.(*corev1.ConfigMap).ResourceVersion)
	}

	s.expire() // 410 Gone: the reflector lists again
	waitFor(t, "the relist's update of a", func() bool {
		return slices.ContainsFunc(updatesOf(rec.snapshot(), "a"), func(e event) bool { return e.RV == "2" })
	})
	i := slices.IndexFunc(updatesOf(rec.take(), "a"), func(e event) bool { return e.RV == "2" })
	if i < 0 {
		t.Fatal("no update to 2")
	}
	if obj, _, _ := inf.GetStore().GetByKey("ns/a"); obj.(*corev1.ConfigMap).ResourceVersion != "2" {
		t.Fatalf("after the relist the cache holds a at %s, want 2", obj.(*corev1.ConfigMap).ResourceVersion)
	}
	if lists, _ := s.counts(); lists != 2 {
		t.Errorf("%d lists, want 2: the first and the relist", lists)
	}
}

// countingStore counts the reflector's calls of Resync.
type countingStore struct {
	cache.Store
	resyncs atomic.Int32
}

func (c *countingStore) Resync() error {
	c.resyncs.Add(1)
	return c.Store.Resync()
}

// TestReflectorResyncsOnlyWhenShouldResyncSaysSo proves: "Every resync
// period, `startResync` asks `ShouldResync` ... and only then calls
// `store.Resync()`."
func TestReflectorResyncsOnlyWhenShouldResyncSaysSo(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a")
	store := &countingStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	var due atomic.Bool
	var asked atomic.Int32
	r := cache.NewReflectorWithOptions(s.lw(), &corev1.ConfigMap{}, store, cache.ReflectorOptions{ResyncPeriod: 10 * time.Millisecond})
	r.ShouldResync = func() bool { asked.Add(1); return due.Load() }
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); r.Run(stop) }()
	defer func() { close(stop); <-done }()

	waitFor(t, "ten questions to ShouldResync", func() bool { return asked.Load() >= 10 })
	if n := store.resyncs.Load(); n != 0 {
		t.Fatalf("%d resyncs while ShouldResync said no, want 0", n)
	}
	due.Store(true)
	waitFor(t, "a resync once ShouldResync says yes", func() bool { return store.resyncs.Load() > 0 })
}

// TestResyncSkipsAListenerThatIsNotDue proves: "`distribute` gives it
// only to listeners whose own resync period is due
// (`sharedProcessor.shouldResync`)": a handler registered with a resync
// period of 0 on a resyncing informer never sees a resync.
func TestResyncSkipsAListenerThatIsNotDue(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a")
	resyncing, quiet := &recorder{}, &recorder{}
	inf := cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, time.Second, cache.Indexers{})
	if _, err := inf.AddEventHandler(resyncing); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandlerWithResyncPeriod(quiet, 0); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	waitFor(t, "two resyncs", func() bool { return resyncing.len() >= 3 })
	if es := quiet.take(); len(es) != 1 || es[0].Kind != "add" {
		t.Errorf("the handler without resync saw %v, want only its initial add", es)
	}
}

// TestRelistUnchangedObjectsReachOnlyResyncingListeners proves the three
// cases of writing-handlers.md: a listener starts flagged as resyncing,
// so before the resync timer first fires every listener gets a relist's
// unchanged objects as updates; once it has fired, a listener that asked
// for no resync is spared them, and one whose period is the informer's
// still gets them.
func TestRelistUnchangedObjectsReachOnlyResyncingListeners(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a")
	resyncing, quiet := &recorder{}, &recorder{}
	inf := cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, time.Second, cache.Indexers{})
	if _, err := inf.AddEventHandler(resyncing); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandlerWithResyncPeriod(quiet, 0); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	resyncing.take()
	quiet.take()

	// Before the timer: both flagged, both get the unchanged a.
	s.expire()
	relisted := func(r *recorder) bool {
		return slices.ContainsFunc(r.snapshot(), func(e event) bool { return e.Kind == "update" && !e.Same })
	}
	waitFor(t, "the first relist at both listeners", func() bool { return relisted(resyncing) && relisted(quiet) })

	// After the timer fired once: the quiet listener is no longer flagged.
	waitFor(t, "a periodic resync", func() bool {
		return slices.ContainsFunc(resyncing.snapshot(), func(e event) bool { return e.Same })
	})
	resyncing.take()
	quiet.take()
	s.expire()
	waitFor(t, "the second relist at the resyncing listener", func() bool { return relisted(resyncing) })
	// A barrier rather than a sleep: an object added after the relist
	// reaches every listener after whatever the relist gave it, as each
	// listener takes its notifications in order. Once the quiet listener
	// has the add, it has had the relist's update too, if it got one.
	waitFor(t, "the third watch", func() bool { _, w := s.counts(); return w == 3 })
	s.set("z", "x", true)
	waitFor(t, "the barrier at the quiet listener", func() bool { return quiet.len() > 0 })
	if es := quiet.take(); len(es) != 1 || es[0].Kind != "add" || es[0].Name != "z" {
		t.Errorf("the listener without resync got %v around the second relist, want only the add of z", es)
	}
}

// TestRelistOnAnInformerWithoutResyncReachesEveryListener proves the
// first case of writing-handlers.md: on an informer without resync (the
// metadata-only Deployment informer's configuration), whose resync timer
// never fires, every listener stays flagged and gets every relist's
// unchanged objects as updates, one that asked for no resync too.
func TestRelistOnAnInformerWithoutResyncReachesEveryListener(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a")
	plain, quiet := &recorder{}, &recorder{}
	inf := cache.NewSharedIndexInformer(s.lw(), &corev1.ConfigMap{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(plain); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandlerWithResyncPeriod(quiet, 0); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	for round := 1; round <= 2; round++ {
		plain.take()
		quiet.take()
		s.expire()
		waitFor(t, "the relist at both listeners", func() bool { return plain.len() > 0 && quiet.len() > 0 })
		for _, r := range []*recorder{plain, quiet} {
			want := []event{{Kind: "update", Name: "a", OldRV: "1", RV: "1"}}
			if es := r.take(); !slices.Equal(es, want) {
				t.Errorf("relist %d delivered %v, want %v", round, es, want)
			}
		}
		waitFor(t, "the next watch", func() bool { _, w := s.counts(); return w == round+1 })
	}
}

// TestMissedDeleteArrivesAsTombstoneFromTheCache proves: "When a relist
// finds an object gone whose delete event was missed,
// `processReplacedAllInfo` delivers a `cache.DeletedFinalStateUnknown`
// carrying the last known state", taken from the cache, and the
// deletions come before the relist's updates.
func TestMissedDeleteArrivesAsTombstoneFromTheCache(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a", "b") // b at 2
	rec := &recorder{}
	startInformer(t, s, 0, rec)
	rec.take()
	s.set("b", "v1", false) // b at 3, unseen
	s.remove("b", false)    // gone, unseen
	s.expire()
	waitFor(t, "the relist's two events", func() bool { return rec.len() >= 2 })
	es := rec.take()
	want := []event{{Kind: "delete", Name: "b", RV: "2", Tombstone: true}, {Kind: "update", Name: "a", OldRV: "1", RV: "1"}}
	if !slices.Equal(es, want) {
		t.Errorf("relist delivered %v, want %v", es, want)
	}
}
