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
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/tools/cache"
)

// deltaString is "Type name@rv" for an object delta, "Type(n)" for a
// ReplacedAll of n objects, plain "Type" for the others.
func deltaString(d cache.Delta) string {
	switch o := d.Object.(type) {
	case *corev1.ConfigMap:
		return fmt.Sprintf("%s %s@%s", d.Type, o.Name, o.ResourceVersion)
	case cache.ReplacedAllInfo:
		return fmt.Sprintf("%s(%d)", d.Type, len(o.Objects))
	}
	return string(d.Type)
}

func popAll(t *testing.T, q cache.Queue, n int) [][]string {
	t.Helper()
	var out [][]string
	for range n {
		var got []string
		_, err := q.Pop(func(obj interface{}, _ bool) error {
			for _, d := range obj.(cache.Deltas) {
				got = append(got, deltaString(d))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, got)
	}
	return out
}

// TestDeltaFIFOAccumulatesAnObjectsChanges proves: DeltaFIFO "keeps an
// object's changes together under its key (it accumulates them; only a
// second deletion in a row is dropped)": an object changed twice is
// delivered once with every delta, and objects leave in the order their
// keys first arrived.
func TestDeltaFIFOAccumulatesAnObjectsChanges(t *testing.T) {
	f := cache.NewDeltaFIFOWithOptions(cache.DeltaFIFOOptions{KeyFunction: cache.MetaNamespaceKeyFunc})
	for _, op := range []func() error{
		func() error { return f.Add(configMap("a", 1, "x")) },
		func() error { return f.Add(configMap("b", 2, "x")) },
		func() error { return f.Update(configMap("a", 3, "x")) },
		func() error { return f.Update(configMap("a", 3, "x")) }, // the same update twice: kept
		func() error { return f.Delete(configMap("a", 4, "x")) },
		func() error { return f.Delete(configMap("a", 4, "x")) }, // a second deletion: dropped
	} {
		if err := op(); err != nil {
			t.Fatal(err)
		}
	}
	got := popAll(t, f, 2)
	want := [][]string{
		{"Added a@1", "Updated a@3", "Updated a@3", "Deleted a@4"},
		{"Added b@2"},
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("DeltaFIFO popped %v, want %v", got, want)
	}
}

// TestRealFIFODeliversEveryNotificationInOrder proves: "`RealFIFO`
// delivers every notification, in the order received."
func TestRealFIFODeliversEveryNotificationInOrder(t *testing.T) {
	f := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{AtomicEvents: true})
	must(t, f.Add(configMap("a", 1, "x")))
	must(t, f.Add(configMap("b", 2, "x")))
	must(t, f.Update(configMap("a", 3, "x")))
	must(t, f.Delete(configMap("a", 4, "x")))
	must(t, f.Delete(configMap("a", 4, "x")))
	got := popAll(t, f, 5)
	want := [][]string{{"Added a@1"}, {"Added b@2"}, {"Updated a@3"}, {"Deleted a@4"}, {"Deleted a@4"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("RealFIFO popped %v, want %v", got, want)
	}
}

// TestAtomicRealFIFOQueuesOneDeltaPerRelistAndResync proves: with
// `AtomicFIFO` "a relist is one `ReplacedAll` delta, a resync one
// `SyncAll` delta; the FIFO no longer reads the cache": the FIFO has no
// KnownObjects to read.
func TestAtomicRealFIFOQueuesOneDeltaPerRelistAndResync(t *testing.T) {
	f := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{AtomicEvents: true})
	must(t, f.Replace([]interface{}{configMap("a", 1, "x"), configMap("b", 2, "x"), configMap("c", 3, "x")}, "3"))
	must(t, f.Resync())
	got := popAll(t, f, 2)
	want := [][]string{{"ReplacedAll(3)"}, {"SyncAll"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("RealFIFO popped %v, want %v", got, want)
	}
	defer func() {
		if recover() == nil {
			t.Error("an atomic RealFIFO accepted KnownObjects")
		}
	}()
	cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{AtomicEvents: true, KnownObjects: cache.NewStore(cache.MetaNamespaceKeyFunc)})
}

// TestPopBatchStopsAtARepeatedKeyAndAtAtomicDeltas proves: "`PopBatch`
// takes up to `defaultBatchSize` (1,000) consecutive
// `Added`/`Updated`/`Deleted` deltas with distinct keys (a repeated key
// closes the batch ...)"; "`ReplacedAll`, `SyncAll` and `Bookmark` are
// not `batchable` and go alone"; and a batch of one goes through the
// single-item path.
func TestPopBatchStopsAtARepeatedKeyAndAtAtomicDeltas(t *testing.T) {
	f := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{AtomicEvents: true, EmitDeltaTypeBookmark: true})
	must(t, f.Add(configMap("a", 1, "x")))
	must(t, f.Add(configMap("b", 2, "x")))
	must(t, f.Update(configMap("a", 3, "x")))
	must(t, f.Bookmark("4"))
	must(t, f.Add(configMap("c", 5, "x")))
	var got []string
	batch := func(ds []cache.Delta, _ bool) error {
		var s []string
		for _, d := range ds {
			s = append(s, deltaString(d))
		}
		got = append(got, "batch["+strings.Join(s, ", ")+"]")
		return nil
	}
	single := func(obj interface{}, _ bool) error {
		got = append(got, "single["+deltaString(obj.(cache.Deltas)[0])+"]")
		return nil
	}
	for range 4 {
		must(t, f.PopBatch(batch, single))
	}
	want := []string{"batch[Added a@1, Added b@2]", "single[Updated a@3]", "single[Bookmark]", "single[Added c@5]"}
	if !slices.Equal(got, want) {
		t.Errorf("PopBatch gave %v, want %v", got, want)
	}

	// A relist and a resync go alone between batchable deltas.
	got = nil
	must(t, f.Add(configMap("d", 6, "x")))
	must(t, f.Replace([]interface{}{configMap("d", 6, "x")}, "6"))
	must(t, f.Add(configMap("e", 7, "x")))
	must(t, f.Resync())
	must(t, f.Add(configMap("g", 8, "x")))
	for range 5 {
		must(t, f.PopBatch(batch, single))
	}
	want = []string{"single[Added d@6]", "single[ReplacedAll(1)]", "single[Added e@7]", "single[SyncAll]", "single[Added g@8]"}
	if !slices.Equal(got, want) {
		t.Errorf("PopBatch gave %v, want %v", got, want)
	}

	// 1,001 distinct keys: a batch of 1,000, then the last alone.
	var sizes []int
	for i := range 1001 {
		must(t, f.Add(configMap(fmt.Sprintf("n%04d", i), 10+i, "x")))
	}
	for range 2 {
		must(t, f.PopBatch(func(ds []cache.Delta, _ bool) error { sizes = append(sizes, len(ds)); return nil },
			func(interface{}, bool) error { sizes = append(sizes, 1); return nil }))
	}
	if !slices.Equal(sizes, []int{1000, 1}) {
		t.Errorf("1,001 adds popped in batches of %v, want [1000 1]", sizes)
	}
}

// TestTransformRunsAsTheObjectIsQueued proves: "`addToItems_locked` and
// `addReplaceToItemsLocked` call it as the object is queued, before
// anything else sees it".
func TestTransformRunsAsTheObjectIsQueued(t *testing.T) {
	calls := 0
	f := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{AtomicEvents: true, Transformer: func(obj interface{}) (interface{}, error) {
		calls++
		obj.(*corev1.ConfigMap).Data = nil
		return obj, nil
	}})
	must(t, f.Add(configMap("a", 1, "x")))
	must(t, f.Replace([]interface{}{configMap("b", 2, "x")}, "2"))
	if calls != 2 {
		t.Fatalf("transform ran %d times before anything was popped, want 2", calls)
	}
	_, err := f.Pop(func(obj interface{}, _ bool) error {
		if cm := obj.(cache.Deltas)[0].Object.(*corev1.ConfigMap); cm.Data != nil {
			t.Error("the popped object is not the transformed one")
		}
		return nil
	})
	must(t, err)
}

// TestFeatureGateDefaults proves the table of client-go feature gates:
// in v0.37 `InOrderInformers`, `InOrderInformersBatchProcess`,
// `AtomicFIFO`, `UnlockWhileProcessingFIFO`, `WatchListClient` and
// `InformerResourceVersion` are all on by default.
func TestFeatureGateDefaults(t *testing.T) {
	for _, f := range []clientfeatures.Feature{
		clientfeatures.InOrderInformers, clientfeatures.InOrderInformersBatchProcess, clientfeatures.AtomicFIFO,
		clientfeatures.UnlockWhileProcessingFIFO, clientfeatures.WatchListClient, clientfeatures.InformerResourceVersion,
	} {
		if !clientfeatures.FeatureGates().Enabled(f) {
			t.Errorf("%s is off by default, the docs say on", f)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// lookupFails is a store whose keys cannot be read back: one lookup
// errs, the other finds nothing.
type lookupFails struct{}

func (lookupFails) ListKeys() []string { return []string{"ns/errs", "ns/vanished"} }
func (lookupFails) GetByKey(key string) (interface{}, bool, error) {
	if key == "ns/errs" {
		return nil, false, errors.New("lookup failed")
	}
	return nil, false, nil
}

// TestMissedDeleteTombstoneWithoutObject proves the other branch of
// `reconcileReplacement`: a key the known objects list and the relist
// lacks becomes a `DeletedFinalStateUnknown` whose `Obj` is nil when
// looking the key up fails or finds nothing. A handler that unwraps a
// tombstone must allow for the nil.
func TestMissedDeleteTombstoneWithoutObject(t *testing.T) {
	f := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{KnownObjects: lookupFails{}})
	must(t, f.Replace([]interface{}{configMap("a", 5, "x")}, "5"))
	var got []string
	for range 3 {
		_, err := f.Pop(func(obj interface{}, _ bool) error {
			d := obj.(cache.Deltas)[0]
			if tomb, ok := d.Object.(cache.DeletedFinalStateUnknown); ok {
				got = append(got, fmt.Sprintf("%s %s obj=%v", d.Type, tomb.Key, tomb.Obj))
				return nil
			}
			got = append(got, deltaString(d))
			return nil
		})
		must(t, err)
	}
	want := []string{"Deleted ns/errs obj=<nil>", "Deleted ns/vanished obj=<nil>", "Replaced a@5"}
	if !slices.Equal(got, want) {
		t.Errorf("popped %v, want %v", got, want)
	}
}
