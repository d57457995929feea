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
}

func (e *staleCacheError) Error() string {
	if e.ahead != "" {
		return fmt.Sprintf("%s cache has read up to resourceVersion %s but the %s cache up to %s", e.resource, e.read, e.ahead, e.wrote)
	}
	return fmt.Sprintf("%s cache has read up to resourceVersion %s but the controller wrote %s", e.resource, e.read, e.wrote)
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
