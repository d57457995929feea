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

package main

import (
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"
)

// Informer caches lag behind the API server. Right after the controller
// writes a Deployment or a Bar's status, another event can start a sync of
// the same Bar before the cache holds that write; the sync would then see the
// old object and write (and announce) the same change again. This is the
// stale-read problem kube-controller-manager solves the same way since
// Kubernetes 1.36 (pkg/controller/util/consistency, KEP-5647): remember
// the resourceVersion each write returned, and do not sync a Bar until
// every cache it reads has seen at least that version. Resource versions
// of one resource are comparable integers
// (k8s.io/apimachinery/pkg/util/resourceversion).

// rvStore is the part of an informer's store that says how far it has read.
type rvStore interface {
	LastStoreSyncResourceVersion() string
}

// writeTracker remembers, per Bar, the newest resourceVersion the controller
// wrote to each cached resource. Entries live only until the caches catch
// up, so it holds only Bars with writes in flight.
type writeTracker struct {
	stores map[string][]rvStore // resource name -> the stores it is read from

	mu     sync.Mutex
	writes map[cache.ObjectName]*barWrites
}

type barWrites struct {
	uid types.UID         // a new Bar with the same name starts afresh
	rvs map[string]string // resource name -> newest written resourceVersion
}

// trackedStores is what NewController's tracker waits on: the whole
// Deployment cache and the Bar cache, the caches the controller's writes
// land in. A write to a Deployment must reach the whole cache before the
// Bar syncs again. Every Deployment write (a create, an apply) carries the
// managed-by label, so the metadata cache, which selects the others, never
// reads it: waiting for that store to pass the write's resourceVersion
// would wait for an unrelated Deployment's event or the next bookmark.
func trackedStores(deployments, bars rvStore) map[string][]rvStore {
	return map[string][]rvStore{"deployments": {deployments}, "bars": {bars}}
}

func newWriteTracker(stores map[string][]rvStore) *writeTracker {
	return &writeTracker{stores: stores, writes: map[cache.ObjectName]*barWrites{}}
}

// wrote records that a write made on behalf of the Bar returned rv.
func (t *writeTracker) wrote(bar cache.ObjectName, uid types.UID, resource, rv string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.writes[bar]
	if w == nil || w.uid != uid {
		w = &barWrites{uid: uid, rvs: map[string]string{}}
		t.writes[bar] = w
	}
	if old, ok := w.rvs[resource]; ok {
		if cmp, err := resourceversion.CompareResourceVersion(old, rv); err == nil && cmp >= 0 {
			return
		}
	}
	w.rvs[resource] = rv
}

// caughtUp returns nil when every cache has seen the Bar's writes, and
// forgets them then; otherwise it says which cache is behind.
func (t *writeTracker) caughtUp(bar cache.ObjectName) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.writes[bar]
	if w == nil {
		return nil
	}
	for resource, wrote := range w.rvs {
		for _, store := range t.stores[resource] {
			read := store.LastStoreSyncResourceVersion()
			cmp, err := resourceversion.CompareResourceVersion(wrote, read)
			if err != nil {
				// Not comparable (an empty store, a fake): never block on it.
				continue
			}
			if cmp > 0 {
				return &staleCacheError{resource: resource, wrote: wrote, read: read}
			}
		}
	}
	delete(t.writes, bar)
	return nil
}

// forget drops what is known about a Bar that no longer exists.
func (t *writeTracker) forget(bar cache.ObjectName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.writes, bar)
}

// staleCacheError means "try again shortly", not "something failed".
type staleCacheError struct {
	resource, wrote, read string
	// ahead, if set, is the cache that has read up to wrote: the stale one
	// is behind another cache rather than behind the controller's write.
	ahead string
	// object, if set, is the Deployment the two caches disagree about:
	// read is then the resourceVersion of it the lagging cache holds
	// ("none" if it holds none), wrote the other cache's (or how far that
	// cache has read, when it no longer holds the Deployment).
	object string
}

func (e *staleCacheError) Error() string {
	if e.object != "" {
		return fmt.Sprintf("%s cache holds %s at resourceVersion %s but the %s cache at %s", e.resource, e.object, e.read, e.ahead, e.wrote)
	}
	if e.ahead != "" {
		return fmt.Sprintf("%s cache has read up to resourceVersion %s but the %s cache up to %s", e.resource, e.read, e.ahead, e.wrote)
	}
	return fmt.Sprintf("%s cache has read up to resourceVersion %s but the controller wrote %s", e.resource, e.read, e.wrote)
}

// compareRVs compares two resourceVersions of one resource; ok is false
// when they do not compare (an empty store, an object from a fake).
func compareRVs(a, b string) (cmp int, ok bool) {
	cmp, err := resourceversion.CompareResourceVersion(a, b)
	return cmp, err == nil
}

// newestDeployment decides what the sync may believe about the Deployment
// a Bar names, from the two caches that may hold it: have is the full
// cache's copy (the Deployments with the managed-by label), meta the
// metadata cache's (every other Deployment), either nil when that cache
// holds none. It returns the holder of the name (nil if nobody holds it)
// and have if the sync may act on it.
//
// The caches select by the label, so a Deployment is in one of them; but
// the two informers deliver independently, so while someone adds or
// removes the label, both may hold a copy for a moment (or neither: then
// the sync sees no Deployment, and a create fails with AlreadyExists and
// is retried). The sync must judge ownership from the newer copy: when
// someone removes the Bar's ownerReference together with the label and
// the metadata cache has the change first, the full cache still shows the
// Deployment controlled by the Bar, and a sync that believed it would
// force an apply and put the ownerReference back. So, for one Deployment:
//
//   - the newer copy (by resourceVersion) decides who controls it;
//   - a Deployment the newer copy says is not this Bar's is left alone at
//     once: nothing more could make it ours;
//   - if it is this Bar's but the full cache holds an older copy, the sync
//     waits (a staleCacheError): drift is judged on the full copy, and the
//     caches will agree with the next event of this very Deployment;
//   - the Bar's Deployment in the metadata cache alone lost the label,
//     and the sync puts it back.
//
// Every wait ends with an event of the Deployment it waits on, never with
// a bookmark or an unrelated object, so none lasts longer than a watch
// event's delivery. With copies whose versions do not compare (fakes), the
// metadata cache decides, as before this rule.
func newestDeployment(bar metav1.Object, have *appsv1.Deployment, meta metav1.Object) (metav1.Object, *appsv1.Deployment, error) {
	switch {
	case have == nil && meta == nil:
		return nil, nil, nil
	case meta == nil:
		// The usual case: a managed Deployment, in the full cache alone.
		return have, have, nil
	case have != nil:
		cmp, ok := compareRVs(have.ResourceVersion, meta.GetResourceVersion())
		switch {
		case !ok:
			if have.UID != meta.GetUID() {
				have = nil
			}
			return meta, have, nil
		case cmp >= 0:
			// The full copy is as new or newer; with another UID, the
			// metadata cache still holds a namesake that is gone.
			return have, have, nil
		case have.UID == meta.GetUID():
			if !metav1.IsControlledBy(meta, bar) {
				return meta, nil, nil
			}
			return nil, nil, &staleCacheError{resource: "deployments", object: have.Name, read: have.ResourceVersion,
				ahead: "deployment metadata", wrote: meta.GetResourceVersion()}
		}
		// The full cache still holds a namesake that is gone: judge the
		// metadata copy alone.
	}
	if !metav1.IsControlledBy(meta, bar) {
		return meta, nil, nil
	}
	if meta.GetLabels()[managedByLabel] == managedByValue {
		// main.go's selector keeps a labelled Deployment out of the
		// metadata cache; a cache filled without it (a test's) may hold
		// one the full cache has yet to read: wait for the full copy.
		return nil, nil, &staleCacheError{resource: "deployments", object: meta.GetName(), read: "none",
			ahead: "deployment metadata", wrote: meta.GetResourceVersion()}
	}
	return meta, nil, nil
}
