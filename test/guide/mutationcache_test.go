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
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// getRV reads key through a MutationCache: "name@rv", or "missing".
func getRV(t *testing.T, mc cache.MutationCache, key string) string {
	t.Helper()
	obj, ok, err := mc.GetByKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "missing"
	}
	cm := obj.(*corev1.ConfigMap)
	return cm.Name + "@" + cm.ResourceVersion
}

// storeRV is the resourceVersion of key in the informer's cache.
func storeRV(inf cache.SharedIndexInformer, key string) string {
	obj, ok, _ := inf.GetStore().GetByKey(key)
	if !ok {
		return ""
	}
	return obj.(*corev1.ConfigMap).ResourceVersion
}

// TestMutationCacheReturnsTheNewerOfWriteAndCache proves: a
// `MutationCache` over an informer's store answers `GetByKey` with the
// newer of the object the controller wrote (handed to `Mutation`) and
// the cached one, by resourceVersion: the write until the informer
// catches up, the cache from then on; a `Mutation` older than what it
// holds or than the cache is ignored; and, without `includeAdds`, an
// object the cache does not hold is missing even when it was just
// created and handed to `Mutation`.
func TestMutationCacheReturnsTheNewerOfWriteAndCache(t *testing.T) {
	t.Parallel()
	s := newFakeServer("a") // a@1
	inf := startInformer(t, s, 0)
	mc := cache.NewIntegerResourceVersionMutationCache(klog.Background(), inf.GetStore(), inf.GetIndexer(), time.Minute, false)
	const key = "ns/a"

	// The controller writes a@2; its watch event is still on the way.
	s.set("a", "v1", false)
	mc.Mutation(configMap("a", 2, "v1"))
	if got, cached := getRV(t, mc, key), storeRV(inf, key); got != "a@2" || cached != "1" {
		t.Errorf("after the write: GetByKey %s with the cache at %s, want a@2 with the cache at 1", got, cached)
	}
	// An older answer (a write that lost a race, say) changes nothing.
	mc.Mutation(configMap("a", 1, "stale"))
	if got := getRV(t, mc, key); got != "a@2" {
		t.Errorf("after an older Mutation: GetByKey %s, want a@2", got)
	}

	// The informer catches up with the write, then goes past it.
	s.sendEvent(watch.Event{Type: watch.Modified, Object: configMap("a", 2, "v1")})
	waitFor(t, "the cache at a@2", func() bool { return storeRV(inf, key) == "2" })
	cached, _, _ := inf.GetStore().GetByKey(key)
	if obj, _, _ := mc.GetByKey(key); obj != cached {
		t.Error("with the cache caught up, GetByKey did not return the cached object")
	}
	s.set("a", "v2", true) // a@3, by someone else
	waitFor(t, "the cache at a@3", func() bool { return storeRV(inf, key) == "3" })
	mc.Mutation(configMap("a", 2, "v1")) // the old write's answer, late
	if got := getRV(t, mc, key); got != "a@3" {
		t.Errorf("with the cache past the write: GetByKey %s, want a@3", got)
	}

	// A create the cache has not seen yet is invisible without includeAdds.
	s.set("b", "v0", false) // b@4
	mc.Mutation(configMap("b", 4, "v0"))
	if got := getRV(t, mc, "ns/b"); got != "missing" {
		t.Errorf("a created object not yet cached: GetByKey %s, want missing (includeAdds is false)", got)
	}
	withAdds := cache.NewIntegerResourceVersionMutationCache(klog.Background(), inf.GetStore(), inf.GetIndexer(), time.Minute, true)
	withAdds.Mutation(configMap("b", 4, "v0"))
	if got := getRV(t, withAdds, "ns/b"); got != "b@4" {
		t.Errorf("with includeAdds: GetByKey %s, want b@4", got)
	}
}

// byValue indexes ConfigMaps by their value, as a controller indexes
// its objects by owner.
func byValue(obj any) ([]string, error) { return []string{obj.(*corev1.ConfigMap).Data["v"]}, nil }

// namesAt lists what ByIndex returns for one value, as "name@rv:value".
func namesAt(t *testing.T, mc cache.MutationCache, value string) []string {
	t.Helper()
	objs, err := mc.ByIndex("byValue", value)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		cm := o.(*corev1.ConfigMap)
		out = append(out, cm.Name+"@"+cm.ResourceVersion+":"+cm.Data["v"])
	}
	sort.Strings(out)
	return out
}

// TestMutationCacheByIndexReturnsWrites proves: `ByIndex` patches as
// `GetByKey` does. For each key the backing index holds under the value,
// it returns the newer of the write and the cached object, so a write
// that moves an object to another value is still found under the old
// one, now with the new value; without `includeAdds` a written object the
// index does not hold under the value is missing; with it, a write whose
// index function gives the value is added, created or moved there.
func TestMutationCacheByIndexReturnsWrites(t *testing.T) {
	t.Parallel()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{"byValue": byValue})
	for _, cm := range []*corev1.ConfigMap{configMap("a", 1, "x"), configMap("c", 1, "y")} {
		if err := idx.Add(cm); err != nil {
			t.Fatal(err)
		}
	}
	mc := cache.NewIntegerResourceVersionMutationCache(klog.Background(), idx, idx, time.Minute, false)
	withAdds := cache.NewIntegerResourceVersionMutationCache(klog.Background(), idx, idx, time.Minute, true)

	mc.Mutation(configMap("a", 2, "x"))
	withAdds.Mutation(configMap("a", 2, "x"))
	if got := namesAt(t, mc, "x"); !slices.Equal(got, []string{"a@2:x"}) {
		t.Errorf("after a write: ByIndex(x) %v, want [a@2:x]", got)
	}

	// The write moves a from x to y; the backing index still has it at x.
	for _, m := range []cache.MutationCache{mc, withAdds} {
		m.Mutation(configMap("a", 3, "y"))
		m.Mutation(configMap("b", 4, "x")) // created, not yet cached
	}
	if got := namesAt(t, mc, "x"); !slices.Equal(got, []string{"a@3:y"}) {
		t.Errorf("without includeAdds: ByIndex(x) %v, want [a@3:y] (a under its cached value, b missing)", got)
	}
	if got := namesAt(t, mc, "y"); !slices.Equal(got, []string{"c@1:y"}) {
		t.Errorf("without includeAdds: ByIndex(y) %v, want [c@1:y]", got)
	}
	if got := namesAt(t, withAdds, "x"); !slices.Equal(got, []string{"a@3:y", "b@4:x"}) {
		t.Errorf("with includeAdds: ByIndex(x) %v, want [a@3:y b@4:x]", got)
	}
	if got := namesAt(t, withAdds, "y"); !slices.Equal(got, []string{"a@3:y", "c@1:y"}) {
		t.Errorf("with includeAdds: ByIndex(y) %v, want [a@3:y c@1:y]", got)
	}
}

// TestMutationCacheForgetsAWriteAfterItsTTL proves: a `MutationCache`
// keeps a write for its TTL only. A write the informer never catches up
// with (a watch event lost, a slow relist) is returned until the TTL
// ends, and then the stale cached object is returned again: the cache
// guarantees nothing past the TTL. In a synctest bubble, whose clock
// the cache's LRU (apimachinery's util/cache, on the real clock) reads.
func TestMutationCacheForgetsAWriteAfterItsTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := cache.NewStore(cache.MetaNamespaceKeyFunc)
		if err := store.Add(configMap("a", 1, "v0")); err != nil {
			t.Fatal(err)
		}
		mc := cache.NewIntegerResourceVersionMutationCache(klog.Background(), store, nil, time.Minute, false)
		mc.Mutation(configMap("a", 2, "v1"))
		time.Sleep(time.Minute)
		if got := getRV(t, mc, "ns/a"); got != "a@2" {
			t.Errorf("at the TTL: GetByKey %s, want a@2", got)
		}
		time.Sleep(time.Nanosecond)
		if got := getRV(t, mc, "ns/a"); got != "a@1" {
			t.Errorf("past the TTL: GetByKey %s, want a@1, the stale cached object", got)
		}
	})
}
