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
	// read and wrote are then the resourceVersions of it each one holds.
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

// behind names the cache a sync that met e waits for.
func (e *staleCacheError) behind() string {
	if e.object != "" {
		return "deployments"
	}
	if e.ahead == "deployments" {
		return "metadata"
	}
	return e.resource
}

// metadataCaughtUp returns a staleCacheError if the metadata cache of
// Deployments has read less than the full one. The two watch the same
// Deployments and deliver independently, so right after a Deployment of
// ours is deleted, the full cache may have dropped it while the metadata
// cache still holds it; a sync in that moment would take the Deployment
// for one that lost its managed-by label, and announce its recreation as
// an update. A Deployment that really lost its label is in the metadata
// cache at the resourceVersion that removed it, which the full cache has
// read as a delete: the metadata cache is then not behind.
func metadataCaughtUp(full, meta rvStore) error {
	f, m := full.LastStoreSyncResourceVersion(), meta.LastStoreSyncResourceVersion()
	cmp, err := resourceversion.CompareResourceVersion(m, f)
	if err != nil || cmp >= 0 {
		// Not comparable (an empty store, a fake): never block on it.
		return nil
	}
	return &staleCacheError{resource: "deployment metadata", read: m, wrote: f, ahead: "deployments"}
}

// compareRVs compares two resourceVersions of one resource; ok is false
// when they do not compare (an empty store, an object from a fake).
func compareRVs(a, b string) (cmp int, ok bool) {
	cmp, err := resourceversion.CompareResourceVersion(a, b)
	return cmp, err == nil
}

// newestDeployment decides what the sync may believe about the Deployment
// a Bar names, from the two caches that hold it: have is the full cache's
// copy (only Deployments with the managed-by label), meta the metadata
// cache's (every Deployment), either nil when that cache holds none; full
// and metaStore say how far each cache has read. It returns the holder of
// the name (nil if nobody holds it) and have if the sync may act on it.
//
// The two informers watch the same objects and deliver independently, so
// for a moment after any change one cache holds a newer version than the
// other. The sync must judge ownership from the newer one: when someone
// removes the Bar's ownerReference and the full cache has the change
// first, the metadata cache still shows the Deployment controlled by the
// Bar, and a sync that believed it would force an apply and put the
// ownerReference back. So, for one Deployment:
//
//   - the newer copy (by resourceVersion) decides who controls it;
//   - a Deployment the newer copy says is not this Bar's is left alone at
//     once: nothing more could make it ours;
//   - if it is this Bar's but the full cache holds an older copy, or none
//     yet, the sync waits for the full cache (a staleCacheError), since
//     drift is judged on the full copy and writes follow from it.
//
// With copies whose versions do not compare (fakes), the metadata cache
// decides, as before this rule.
func newestDeployment(bar metav1.Object, have *appsv1.Deployment, meta metav1.Object, full, metaStore rvStore) (metav1.Object, *appsv1.Deployment, error) {
	switch {
	case have == nil && meta == nil:
		return nil, nil, nil
	case meta == nil:
		// The metadata cache has not read the Deployment yet (then the
		// full cache is the newer), or has read its deletion, which the
		// full cache has yet to: then the full copy is a Deployment that
		// is gone, and acting on it would recreate it by apply.
		if cmp, ok := compareRVs(metaStore.LastStoreSyncResourceVersion(), have.ResourceVersion); ok && cmp > 0 {
			return nil, nil, &staleCacheError{resource: "deployments", object: have.Name, read: have.ResourceVersion,
				ahead: "deployment metadata (which no longer holds it)", wrote: metaStore.LastStoreSyncResourceVersion()}
		}
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
	// The Bar's Deployment, which the full cache does not hold: it lost
	// its managed-by label (the full cache read that as a delete), or it
	// is a change the full cache has yet to read. Only the first may be
	// acted on: the full cache has then read as far as the metadata copy,
	// and the metadata cache is not behind the full one either (which
	// would make its copy a deleted Deployment, metadataCaughtUp).
	if err := metadataCaughtUp(full, metaStore); err != nil {
		return nil, nil, err
	}
	if cmp, ok := compareRVs(full.LastStoreSyncResourceVersion(), meta.GetResourceVersion()); ok && cmp < 0 {
		return nil, nil, &staleCacheError{resource: "deployments", object: meta.GetName(), read: "none (read up to " + full.LastStoreSyncResourceVersion() + ")",
			ahead: "deployment metadata", wrote: meta.GetResourceVersion()}
	}
	return meta, nil, nil
}
